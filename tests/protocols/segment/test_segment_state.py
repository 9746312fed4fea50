"""The segment protocol's state object driven directly: no socket, no event loop."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.protocols.segment import codec as c
from mainstem.protocols.segment.state import (
    Close,
    Drop,
    Login,
    Phase,
    SegmentState,
    Send,
    Serve,
    Violation,
)

CID = uuid.UUID(int=7)


def ready(level: int = 0) -> SegmentState:
    state = SegmentState(idle_s=10)
    assert state.receive(c.Authenticate("guest", "guest"), 0) == (Login("guest", "guest"),)
    assert state.logged_in("guest") == (Send(c.Authenticated()),)
    (serve,) = state.receive(c.SetupAppend(CID, "s/t/0"), 0)
    assert isinstance(serve, Serve)
    assert state.append_setup("s/t/0", CID, level) == (Send(c.AppendSetup("s/t/0", CID,
                                                                          level)),)
    return state


def feed_block(state: SegmentState, offset: int, events: list[bytes]) -> int:
    frame, end = c.encode_append_block(CID, offset, events)
    for message, size in c.Decoder().feed(frame):
        assert state.receive(message, size) == ()
    return end


def test_the_first_frame_must_be_authenticate() -> None:
    state = SegmentState()
    with pytest.raises(Violation) as raised:
        state.receive(c.CreateSegment(1, "s/t/0"), 0)
    assert isinstance(raised.value.reply, c.AuthenticationFailed)
    assert state.phase is Phase.CLOSED


def test_a_refused_login_closes_with_authentication_failed() -> None:
    state = SegmentState()
    state.receive(c.Authenticate("guest", "bad"), 0)
    assert state.phase is Phase.AUTHENTICATING
    (close,) = state.login_refused("wrong password")
    assert isinstance(close, Close) and close.reply == c.AuthenticationFailed("", "wrong password")
    assert state.phase is Phase.CLOSED


def test_requests_are_served_and_replies_refused() -> None:
    state = ready()
    assert state.receive(c.ReadSegment("s/t/0", 0, 10), 0)[0] == Serve(
        c.ReadSegment("s/t/0", 0, 10))
    assert state.receive(c.KeepAlive(), 0) == ()
    with pytest.raises(Violation):
        state.receive(c.Authenticated(), 0)


def test_events_of_a_block_are_written_once_and_acked_at_their_level() -> None:
    state = ready()
    end = feed_block(state, 0, [b"a", b"bc"])
    (write,) = state.writes()
    assert [bytes(e) for e in write.events] == [b"\0\0\0\1a", b"\0\0\0\2bc"] and write.level == end
    assert state.writes() == []
    assert state.ack_due(CID) == end
    assert state.settled(CID, end) == (Send(c.DataAppended(CID, end)),)
    assert state.ack_due(CID) is None


def test_a_resent_block_below_the_stored_level_is_dropped() -> None:
    state = ready()
    end = feed_block(state, 0, [b"a", b"b"])
    state.writes()
    assert feed_block(state, 0, [b"a", b"b"]) == end
    assert state.writes() == []


def test_a_block_past_the_stored_level_is_an_invalid_event_number() -> None:
    state = ready(level=5)
    with pytest.raises(Violation) as raised:
        state.receive(c.BeginAppendBlock(CID, 6, 0), 0)
    assert isinstance(raised.value.reply, c.InvalidEventNumber)


def test_block_framing_rules() -> None:
    state = ready()
    with pytest.raises(Violation):
        state.receive(c.Event(b"x"), 9)  # outside a block
    with pytest.raises(Violation):
        state.receive(c.EndAppendBlock(CID, 0, 0), 0)  # without its begin
    state.receive(c.BeginAppendBlock(CID, 0, 0), 0)
    with pytest.raises(Violation):
        state.receive(c.BeginAppendBlock(CID, 0, 0), 0)  # nested
    with pytest.raises(Violation):
        ready().receive(c.BeginAppendBlock(uuid.uuid4(), 0, 0), 0)  # no SetupAppend


def test_an_event_split_across_blocks_is_joined() -> None:
    state = ready()
    frame = c.Event(b"x" * 100).encode()
    first, second = frame[:40], frame[40:]
    state.receive(c.BeginAppendBlock(CID, 0, 0), 0)
    state.receive(c.Partial(c.PARTIAL_BEGIN, first), 0)
    state.receive(c.EndAppendBlock(CID, 40, 40), 0)
    with pytest.raises(Violation):  # the split event must continue at the cursor
        ready().receive(c.BeginAppendBlock(CID, 1, 0), 0)
    state.receive(c.BeginAppendBlock(CID, 40, 0), 0)
    state.receive(c.Partial(c.PARTIAL_END, second), 0)
    state.receive(c.EndAppendBlock(CID, len(frame), len(second)), 0)
    (write,) = state.writes()
    assert [bytes(e) for e in write.events] == [b"\0\0\0\x64" + b"x" * 100]
    assert write.level == len(frame)


def test_keepalives_and_idleness() -> None:
    state = SegmentState(idle_s=10, now=0.0)
    assert state.keepalive_interval == 5
    assert state.tick(5.0) == (Send(c.KeepAlive()),)
    state.heard(8.0)
    assert state.tick(15.0) == (Send(c.KeepAlive()),)
    state.hold()
    assert state.tick(100.0) == (Send(c.KeepAlive()),)  # held back: not idle
    state.release(100.0)
    (drop,) = state.tick(111.0)
    assert isinstance(drop, Drop) and state.phase is Phase.CLOSED
    assert SegmentState(idle_s=0).keepalive_interval == 0


MESSAGES = st.one_of(
    st.builds(c.Authenticate, st.sampled_from(["guest", "x"]), st.just("p")),
    st.builds(c.SetupAppend, st.just(CID), st.just("s/t/0")),
    st.builds(c.BeginAppendBlock, st.just(CID), st.integers(-5, 60), st.integers(0, 60)),
    st.builds(c.EndAppendBlock, st.just(CID), st.integers(-5, 60), st.integers(0, 60)),
    st.builds(c.Event, st.binary(max_size=8)),
    st.builds(c.Partial, st.integers(0, 2), st.binary(max_size=20)),
    st.builds(c.KeepAlive),
    st.builds(c.ReadSegment, st.just("s/t/0"), st.integers(0, 9), st.integers(0, 9)),
    st.builds(c.Authenticated),
    st.builds(c.DataAppended, st.just(CID), st.integers(0, 9)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(MESSAGES, st.integers(0, 40), st.booleans()), max_size=30))
def test_random_sequences_raise_only_violations(steps: list) -> None:
    """Whatever arrives, the state raises nothing but Violation and keeps its invariants."""
    state = SegmentState(idle_s=4)
    try:
        for message, size, accept in steps:
            for action in state.receive(message, size):
                if isinstance(action, Login):
                    if accept:
                        state.logged_in(action.username)
                    else:
                        state.login_refused("no")
                elif isinstance(action, Serve) and isinstance(action.request, c.SetupAppend):
                    state.append_setup("s/t/0", CID, size)
            if state.phase is Phase.CLOSED:
                break
            for write in state.writes():
                assert write.events and state.ack_due(write.appender.connection_id) is not None
            _check(state)
    except Violation as violation:
        assert isinstance(violation.reply, c.SegmentError)
    _check(state)


def _check(state: SegmentState) -> None:
    assert (state.user is not None) == (state.phase is Phase.READY or bool(state.appenders))
    assert not state.appenders or state.phase is Phase.READY
    for appender in state.appenders.values():
        assert appender.flushed <= appender.level and appender.acked <= appender.flushed
    if state.block is not None:
        assert state.block.appender is state.appenders[state.block.appender.connection_id]


def feed_block_runs(state: SegmentState, offset: int, events: list[bytes]) -> int:
    """As the server feeds a block: its events as one run."""
    frame, end = c.encode_append_block(CID, offset, events)
    for item in c.Decoder().feed_events(frame):
        if isinstance(item, c.Events):
            state.on_events(item)
        else:
            assert state.receive(*item) == ()
    return end


def test_a_resent_run_keeps_only_the_events_past_the_stored_level() -> None:
    state = ready()
    level = feed_block_runs(state, 0, [b"a", b"b"])
    state.writes()
    end = feed_block_runs(state, 0, [b"a", b"b", b"c", b"de"])
    (write,) = state.writes()
    assert [bytes(e) for e in write.events] == [b"\0\0\0\1c", b"\0\0\0\2de"]
    assert write.level == end == level + 9 + 10
    assert feed_block_runs(state, 0, [b"a", b"b", b"c", b"de"]) == end
    assert state.writes() == []
