"""The BSON event protocol's state object driven directly: no socket, no event loop."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.protocols.bson_events.codec import Frame, Malformed, Oversized
from mainstem.protocols.bson_events.state import (
    FLUSH,
    STAGE,
    Close,
    EventsState,
    FrameFailed,
    Login,
    Phase,
    Send,
    Serve,
    Stage,
    StoreOffset,
    Wake,
)

CONNECT = {"rID": 1, "version": "0.1", "username": "guest", "password": "guest"}


def frame(kind: str, **body: Any) -> Frame:
    return Frame(kind, body, 0)


def connected(window: int = 3, results: int = 2) -> EventsState:
    state = EventsState(window, results)
    (login,) = state.receive(frame("CONNECT", **CONNECT), 100)
    assert login == Login(1, "guest", "guest", "/", "0.1")
    assert state.phase is Phase.CONNECTING
    assert state.connected(1, "guest", "/") == (Send("RESPONSE", {"ok": True, "rID": 1}),)
    return state


def failed(actions: tuple) -> dict[str, Any]:
    (send,) = [a for a in actions if isinstance(a, Send)]
    assert send.body["ok"] is False
    return send.body


def test_a_frame_before_connect_closes_without_a_reply() -> None:
    state = EventsState(3, 2)
    (close,) = state.receive(frame("PING", rID=1), 100)
    assert isinstance(close, Close) and state.phase is Phase.CLOSED
    assert state.receive(frame("CONNECT", **CONNECT), 100) == ()


def test_connect_checks_version_credentials_and_namespace() -> None:
    cases = [({"version": "2.0"}, "UNSUPPORTED_VERSION"),
             ({"version": None}, "UNSUPPORTED_VERSION"),
             ({"password": None}, "AUTHENTICATION_FAILED"),
             ({"namespace": 5}, "INVALID_ARGUMENT")]
    for change, code in cases:
        state = EventsState(3, 2)
        actions = state.receive(frame("CONNECT", **{**CONNECT, **change}), 100)
        assert failed(actions) == {"ok": False, "rID": 1, "errCode": code,
                                   "errMsg": failed(actions)["errMsg"]}
        assert isinstance(actions[-1], Close) and state.phase is Phase.CLOSED


def test_a_connect_without_rid_logs_in_and_is_answered_without_one() -> None:
    state = EventsState(3, 2)
    body = {k: v for k, v in CONNECT.items() if k != "rID"}
    assert state.receive(frame("CONNECT", **body), 100) == (
        Login(None, "guest", "guest", "/", "0.1"),)
    assert state.connected(None, "guest", "/") == (Send("RESPONSE", {"ok": True}),)


def test_a_refused_login_answers_and_closes() -> None:
    state = EventsState(3, 2)
    state.receive(frame("CONNECT", **CONNECT), 100)
    actions = state.refused(1, "AUTHENTICATION_FAILED", "no")
    assert failed(actions)["errCode"] == "AUTHENTICATION_FAILED"
    assert isinstance(actions[-1], Close) and state.phase is Phase.CLOSED


def test_codec_complaints_are_answered_and_the_connection_stays() -> None:
    state = EventsState(3, 2)
    assert failed(state.receive(Oversized(10), 5))["errCode"] == "EVENT_TOO_LARGE"
    assert failed(state.receive(Malformed("x", 4), 5)) == {
        "ok": False, "rID": 4, "errCode": "INVALID_FRAME", "errMsg": "x"}
    assert state.phase is Phase.AWAIT_CONNECT


def test_requests_publishes_and_missing_rids_once_connected() -> None:
    state = connected()
    publish = frame("PUBLISH", rID=2, channel="c", event={})
    assert state.receive(publish, 100) == STAGE  # staged: no flush
    ping = frame("PING", rID=3)
    assert state.receive(ping, 100) == (FLUSH, Serve(ping))
    assert failed(state.receive(frame("SUBSCRIBE"), 100)) == {
        "ok": False, "errCode": "INVALID_FRAME", "errMsg": "SUBSCRIBE has no 'rID'"}
    assert state.receive(frame("SUBSCRIBE"), 100)[0].kind == "SUBRESPONSE"
    assert state.phase is Phase.READY


def test_ackev_returns_credit_oldest_first_or_up_to_a_position() -> None:
    state = connected(window=3)
    flow = state.subscribe("c", None)
    flow.in_flight.extend([10, 11, 12])
    assert state.receive(frame("ACKEV", subID=flow.sub_id), 100) == (
        FLUSH, Wake(subscription=flow.sub_id))
    assert list(flow.in_flight) == [11, 12]
    state.receive(frame("ACKEV", subID=flow.sub_id, pos=11), 100)
    assert list(flow.in_flight) == [12]
    assert failed(state.receive(frame("ACKEV", subID=flow.sub_id, pos="x"), 100))[
        "errCode"] == "INVALID_FRAME"
    assert failed(state.receive(frame("ACKEV", subID=99), 100))[
        "errCode"] == "NO_SUCH_SUBSCRIPTION"


def test_a_durable_subscription_stores_the_position_after_its_last_ack() -> None:
    state = connected()
    flow = state.subscribe("c", "d1")
    flow.in_flight.extend([4, 5])
    actions = state.receive(frame("ACKEV", subID=flow.sub_id, pos=5), 100)
    assert actions[-1] == StoreOffset(None, "c", "d1", 6)
    assert state.receive(frame("ACKEV", subID=flow.sub_id), 100)[-1] == Wake(
        subscription=flow.sub_id)  # nothing in flight: nothing to store
    state.end_subscription(flow.sub_id)
    with pytest.raises(FrameFailed):
        state.subscription({"subID": flow.sub_id})


def test_query_acks_return_credit() -> None:
    state = connected(results=2)
    flow = state.open_query(7)
    with pytest.raises(FrameFailed):
        state.open_query(7)
    flow.in_flight = 2
    assert flow.full
    assert state.receive(frame("QUERYACK", queryID=7), 100) == (FLUSH, Wake(query=7))
    assert not flow.full
    assert state.receive(frame("QUERYACK", queryID=8), 100) == (FLUSH,)  # unknown: ignored
    assert failed(state.receive(frame("QUERYACK"), 100))["errCode"] == "INVALID_FRAME"
    state.end_query(7)
    assert state.open_query(7).in_flight == 0


VALUES = st.one_of(st.none(), st.integers(-2, 3), st.text(max_size=3), st.booleans())
FRAMES = st.one_of(
    st.builds(Oversized, st.integers(0, 10)),
    st.builds(Malformed, st.text(max_size=3), VALUES),
    st.builds(lambda kind, body: Frame(kind, body, 0),
              st.sampled_from(["CONNECT", "PUBLISH", "PING", "SUBSCRIBE", "ACKEV", "QUERYACK",
                               "QUERY", "NOPE"]),
              st.fixed_dictionaries({}, optional={
                  "rID": VALUES, "version": st.sampled_from(["0.1", "1.0", "2.0", 1]),
                  "username": VALUES, "password": VALUES, "namespace": VALUES,
                  "subID": VALUES, "pos": VALUES, "queryID": VALUES})),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(FRAMES, st.sampled_from(["accept", "refuse", "send", "sub"])),
                max_size=30))
def test_random_frames_never_raise_and_credit_stays_in_its_window(steps: list) -> None:
    state = EventsState(2, 2)
    for position, (event, step) in enumerate(steps):
        for action in state.receive(event, 100):
            assert isinstance(action, (Send, Login, Stage, Serve, Wake, StoreOffset, Close,
                                       type(FLUSH)))
            if isinstance(action, Login):
                if step == "refuse":
                    state.refused(action.request_id, "AUTHENTICATION_FAILED", "no")
                else:
                    state.connected(action.request_id, action.username, action.namespace)
        if state.phase is Phase.READY and step == "sub":
            state.subscribe("c", "d" if position % 2 else None)
            state.open_query(position)
        for flow in state.subscriptions.values():  # the sender's rule: only with credit
            if step == "send" and len(flow.in_flight) < flow.window:
                flow.in_flight.append(position)
        for query in state.queries.values():
            if step == "send" and not query.full:
                query.in_flight += 1
        assert state.phase is not Phase.CONNECTING  # every login outcome was fed back
        assert (state.user is not None) == (state.phase is Phase.READY)
        for flow in state.subscriptions.values():
            assert len(flow.in_flight) <= flow.window
            assert list(flow.in_flight) == sorted(flow.in_flight)
        for query in state.queries.values():
            assert 0 <= query.in_flight <= query.window
