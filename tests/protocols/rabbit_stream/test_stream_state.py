"""The stream protocol's rules as pure objects: no socket, no event loop.

`ConnectionState` is driven through the handshake, tune, heartbeat and close with
frames and the broker's answers; `Subscriptions` through subscribe, credit and the
single active consumer exchange; `Publishers` and the command helpers directly. Random
sequences check that bad input only ever raises the protocol's own error and that neither
state object reaches an illegal state.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.protocols.identity import DEFAULT_IDENTITY
from mainstem.protocols.rabbit_stream import commands
from mainstem.protocols.rabbit_stream import credit as c
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import publishers as p
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream import state as s
from mainstem.protocols.rabbit_stream.codec import StreamCodec, encode
from mainstem.protocols.rabbit_stream.constants import Key, OffsetType, ResponseCode
from mainstem.protocols.rabbit_stream.responses import REPLY_PARSERS

SERVER_FRAME_MAX = 1_048_576
SERVER_HEARTBEAT = 60
USER = "a-user"  # the state only keeps the broker's user, never looks inside
PLAIN = b"\0guest\0guest"


def new_state() -> s.ConnectionState:
    return s.ConnectionState(SERVER_FRAME_MAX, SERVER_HEARTBEAT, DEFAULT_IDENTITY)


def sent(actions: list) -> list[f.Frame]:
    return [action.frame for action in actions if isinstance(action, s.Send)]


def logged_in() -> s.ConnectionState:
    state = new_state()
    state.receive(f.PeerProperties(1, {}))
    state.receive(f.SaslHandshake(2))
    state.receive(f.SaslAuthenticate(3, "PLAIN", PLAIN))
    state.login_succeeded(USER)
    return state


def opened(frame_max: int = 0, heartbeat: int = 0) -> s.ConnectionState:
    state = logged_in()
    state.receive(f.Tune(frame_max, heartbeat))
    state.receive(f.Open(4, "/"))
    state.namespace_opened("localhost", 5552)
    return state


# -- the handshake ---------------------------------------------------------------------


def test_the_handshake_step_by_step() -> None:
    state = new_state()
    actions = state.receive(f.PeerProperties(1, {"connection_name": "app"}))
    assert actions[0] == s.ShowClientProperties({"connection_name": "app"})
    (response,) = sent(actions)
    assert isinstance(response, r.PeerPropertiesResponse)
    assert response.properties["product"] == "mainstem"
    assert state.phase is s.Phase.AUTHENTICATING

    assert sent(state.receive(f.SaslHandshake(2))) == [
        r.SaslHandshakeResponse(2, ResponseCode.OK, ["PLAIN"])]
    assert state.receive(f.SaslAuthenticate(3, "PLAIN", PLAIN)) == [
        s.Authenticate("guest", "guest")]
    assert sent(state.login_succeeded(USER)) == [
        r.SaslAuthenticateResponse(3, ResponseCode.OK), f.Tune(SERVER_FRAME_MAX, SERVER_HEARTBEAT)]
    assert state.phase is s.Phase.TUNING

    assert state.receive(f.Tune(65536, 30)) == [s.LimitFrames(65532), s.StartHeartbeat(30)]
    assert state.phase is s.Phase.OPENING
    assert state.receive(f.Open(4, "/orders")) == [s.OpenNamespace(USER, "/orders")]
    actions = state.namespace_opened("broker.example", 5553)
    assert sent(actions) == [r.OpenResponse(4, ResponseCode.OK, {
        "advertised_host": "broker.example", "advertised_port": "5553"})]
    assert actions[-1] == s.Opened(USER, "/orders")
    assert state.is_open and state.namespace == "/orders"


@pytest.mark.parametrize("kind", [f.CreateStream(1, "s", {}), f.Credit(1, 1), f.Metadata(1, [])])
def test_a_command_before_open_is_a_protocol_error(kind: f.Frame) -> None:
    state = logged_in()
    with pytest.raises(s.ProtocolError) as raised:
        state.admit(type(kind))
    assert raised.value.code == ResponseCode.UNKNOWN_FRAME
    opened().admit(type(kind))  # once open, it passes


def test_an_unsupported_mechanism_is_refused_and_may_be_retried() -> None:
    state = new_state()
    state.receive(f.PeerProperties(1, {}))
    assert sent(state.receive(f.SaslAuthenticate(2, "EXTERNAL", b""))) == [
        r.SaslAuthenticateResponse(2, ResponseCode.SASL_MECHANISM_NOT_SUPPORTED)]
    assert state.phase is s.Phase.AUTHENTICATING
    assert state.receive(f.SaslAuthenticate(3, "PLAIN", PLAIN)) == [
        s.Authenticate("guest", "guest")]


def test_malformed_plain_credentials_answer_and_close_with_sasl_error() -> None:
    state = new_state()
    assert state.receive(f.SaslAuthenticate(2, "PLAIN", b"no separators")) == [
        s.Send(r.SaslAuthenticateResponse(2, ResponseCode.SASL_ERROR)),
        s.Close(ResponseCode.SASL_ERROR, "malformed SASL response")]


@pytest.mark.parametrize(("message", "code"), [
    ("bad credentials", ResponseCode.AUTHENTICATION_FAILURE),
    ("guest may only connect via localhost", ResponseCode.SASL_AUTHENTICATION_FAILURE_LOOPBACK),
])
def test_a_failed_login_answers_and_closes(message: str, code: int) -> None:
    state = new_state()
    state.receive(f.SaslAuthenticate(7, "PLAIN", PLAIN))
    assert state.login_failed(message) == [
        s.Send(r.SaslAuthenticateResponse(7, code)), s.Close(code, message)]
    assert state.user is None


def test_a_refused_namespace_answers_and_closes() -> None:
    state = logged_in()
    state.receive(f.Tune(0, 0))
    state.receive(f.Open(9, "/nope"))
    assert state.namespace_refused("no access") == [
        s.Send(r.OpenResponse(9, ResponseCode.VIRTUAL_HOST_ACCESS_FAILURE)),
        s.Close(ResponseCode.VIRTUAL_HOST_ACCESS_FAILURE, "no access")]
    assert not state.is_open and state.namespace == "/"


@pytest.mark.parametrize(("frame", "code"), [
    (f.Tune(0, 0), ResponseCode.PRECONDITION_FAILED),  # before login
    (f.Open(1, "/"), ResponseCode.AUTHENTICATION_FAILURE),  # before login
])
def test_out_of_sequence_frames_before_login(frame: f.Frame, code: int) -> None:
    with pytest.raises(s.ProtocolError) as raised:
        new_state().receive(frame)
    assert raised.value.code == code


@pytest.mark.parametrize("frame", [f.Tune(0, 0), f.Open(5, "/"),
                                   f.SaslAuthenticate(5, "PLAIN", PLAIN)])
def test_handshake_steps_are_not_repeated_once_open(frame: f.Frame) -> None:
    with pytest.raises(s.ProtocolError) as raised:
        opened().receive(frame)
    assert raised.value.code == ResponseCode.PRECONDITION_FAILED


def test_a_broker_answer_nobody_asked_for_is_the_callers_mistake() -> None:
    with pytest.raises(RuntimeError):
        new_state().login_succeeded(USER)
    with pytest.raises(RuntimeError):
        logged_in().namespace_opened("h", 1)


# -- tune and heartbeat ------------------------------------------------------------------


@given(frame_max=st.integers(0, 2**32 - 1), heartbeat=st.integers(0, 2**32 - 1))
def test_tune_takes_the_lower_of_both_and_zero_means_the_servers(frame_max: int,
                                                                 heartbeat: int) -> None:
    state = logged_in()
    actions = state.receive(f.Tune(frame_max, heartbeat))
    expected_max = min(SERVER_FRAME_MAX, frame_max) if frame_max else SERVER_FRAME_MAX
    expected_heartbeat = min(SERVER_HEARTBEAT, heartbeat) if heartbeat else 0
    assert (state.frame_max, state.heartbeat_s) == (expected_max, expected_heartbeat)
    assert actions[0] == s.LimitFrames(max(expected_max - 4, 0))
    assert (s.StartHeartbeat(expected_heartbeat) in actions) == bool(expected_heartbeat)


def test_heartbeat_ticks_send_heartbeats_until_the_peer_is_silent_for_two_intervals() -> None:
    state = opened(heartbeat=10)
    state.heard_from_peer(100.0)
    assert state.heartbeat_tick(110.0, reading_paused=False) == [s.Send(f.Heartbeat())]
    assert state.heartbeat_tick(120.0, reading_paused=False) == [s.Send(f.Heartbeat())]
    (drop,) = state.heartbeat_tick(120.5, reading_paused=False)
    assert isinstance(drop, s.Drop)
    # Not reading (a publisher held by an alarm) is our silence, not the peer's.
    assert state.heartbeat_tick(500.0, reading_paused=True) == [s.Send(f.Heartbeat())]
    state.heard_from_peer(500.0)
    assert state.heartbeat_tick(510.0, reading_paused=False) == [s.Send(f.Heartbeat())]


def test_command_versions_settle_the_deliver_version() -> None:
    state = opened()
    assert state.deliver_version == 1
    (response,) = sent(state.receive(f.ExchangeCommandVersions(
        5, [f.CommandVersion(Key.DELIVER, 1, 7)])))
    assert response == r.ExchangeCommandVersionsResponse(5, ResponseCode.OK,
                                                         r.SERVER_COMMAND_VERSIONS)
    assert state.deliver_version == 2


def test_unknown_commands_are_answered_when_they_can_be() -> None:
    state = opened()
    assert sent(state.receive(f.UnknownCommand(0x777, 1, 42))) == [
        f.Response(0x777, 42, ResponseCode.UNKNOWN_FRAME)]
    with pytest.raises(s.ProtocolError):
        state.receive(f.UnknownCommand(0x777, 1, None))


# -- closing -----------------------------------------------------------------------------


def test_a_client_close_is_answered_and_ends_the_connection() -> None:
    state = opened()
    assert sent(state.receive(f.Close(8, 1, "bye"))) == [f.Response(Key.CLOSE, 8, ResponseCode.OK)]
    assert state.phase is s.Phase.CLOSED
    assert state.receive(f.Heartbeat()) == []
    with pytest.raises(s.ProtocolError):
        state.admit(f.PublishBlock)


def test_the_servers_close_and_consumer_updates_share_one_correlation_sequence() -> None:
    correlations = s.Correlations()
    state = s.ConnectionState(SERVER_FRAME_MAX, SERVER_HEARTBEAT, DEFAULT_IDENTITY, correlations)
    subscriptions = c.Subscriptions(correlations)
    subscriptions.subscribe(f.Subscribe(1, 1, "s", f.OffsetSpec(OffsetType.FIRST), 1,
                                        {"single-active-consumer": "true"}))
    (update,) = sent(subscriptions.activation(1, True))
    assert update.correlation_id == 1
    assert sent(state.close(ResponseCode.OK, "shutting down")) == [
        f.Close(2, ResponseCode.OK, "shutting down")]
    state.receive(f.Response(Key.CLOSE, 2, ResponseCode.OK))
    assert state.phase is s.Phase.CLOSED


# -- random client sequences -------------------------------------------------------------

client_frames = st.one_of(
    st.builds(f.PeerProperties, st.integers(0, 9), st.just({})),
    st.builds(f.SaslHandshake, st.integers(0, 9)),
    st.builds(f.SaslAuthenticate, st.integers(0, 9), st.sampled_from(["PLAIN", "AMQPLAIN"]),
              st.sampled_from([PLAIN, b"", b"\0a\0b\0c"])),
    st.builds(f.Tune, st.integers(0, 2**20), st.integers(0, 120)),
    st.builds(f.Open, st.integers(0, 9), st.sampled_from(["/", "/other"])),
    st.builds(f.Close, st.integers(0, 9), st.just(1), st.just("bye")),
    st.just(f.Heartbeat()),
    st.builds(f.Response, st.sampled_from([Key.CLOSE, Key.CONSUMER_UPDATE]), st.integers(0, 9),
              st.just(1)),
    st.builds(f.UnknownCommand, st.integers(0x40, 0x7F), st.just(1),
              st.one_of(st.none(), st.integers(0, 9))),
    st.builds(f.ExchangeCommandVersions, st.integers(0, 9), st.just([])),
    st.builds(f.Metadata, st.integers(0, 9), st.just([])),
    st.builds(f.Credit, st.integers(0, 3), st.integers(0, 5)),
)
ORDER = list(s.Phase)
HANDSHAKE = [f.PeerProperties(1, {}), f.SaslHandshake(2), f.SaslAuthenticate(3, "PLAIN", PLAIN),
             f.Tune(0, 0), f.Open(4, "/")]


@settings(max_examples=400)
@given(steps=st.integers(0, len(HANDSHAKE)), frames=st.lists(client_frames, max_size=25),
       login_ok=st.booleans(), namespace_ok=st.booleans())
def test_random_sequences_raise_only_protocol_errors_and_keep_the_state_legal(
        steps: int, frames: list[f.Frame], login_ok: bool, namespace_ok: bool) -> None:
    """A few steps of a good handshake, then anything."""
    state = new_state()
    for frame in HANDSHAKE[:steps] + frames:
        before = state.phase
        try:
            if type(frame) in s.CONNECTION_FRAMES:
                actions = state.receive(frame)
            else:
                state.admit(type(frame))
                actions = []
        except s.ProtocolError as error:
            assert error.code != ResponseCode.OK
            return
        for action in list(actions):  # the connection feeds back the broker's answer
            if isinstance(action, s.Authenticate):
                actions += state.login_succeeded(USER) if login_ok else state.login_failed("no")
            elif isinstance(action, s.OpenNamespace):
                actions += (state.namespace_opened("h", 1) if namespace_ok
                            else state.namespace_refused("no"))
        assert ORDER.index(state.phase) >= ORDER.index(before), "the handshake never goes back"
        if ORDER.index(state.phase) >= ORDER.index(s.Phase.TUNING) and state.phase is not (
                s.Phase.CLOSED):
            assert state.user == USER
        assert 0 < state.frame_max <= SERVER_FRAME_MAX
        assert 0 <= state.heartbeat_s <= SERVER_HEARTBEAT
        assert state.deliver_version in (1, 2)
        if any(isinstance(action, s.Close) for action in actions):
            assert not state.is_open
            return  # the connection closes here
        if any(isinstance(action, s.Opened) for action in actions):
            assert state.is_open


# -- subscriptions and credit ------------------------------------------------------------


FIRST = f.OffsetSpec(OffsetType.FIRST)


def subscribe(subscriptions: c.Subscriptions, subscription_id: int = 1, *, credit: int = 2,
              properties: dict[str, str] | None = None, correlation_id: int = 10,
              spec: f.OffsetSpec = FIRST) -> list[c.FlowAction]:
    return subscriptions.subscribe(f.Subscribe(correlation_id, subscription_id, "orders", spec,
                                               credit, properties or {}))


def test_a_subscription_starts_reading_with_its_credit_and_delivers() -> None:
    subscriptions = c.Subscriptions()
    spec = f.OffsetSpec(OffsetType.OFFSET, 42)
    assert subscribe(subscriptions, 3, credit=5, spec=spec,
                     properties={"filter.1": "eu", "filter.2": "us",
                                 "match-unfiltered": "true"}) == [
        s.Send(f.Response(Key.SUBSCRIBE, 10, ResponseCode.OK)),
        c.StartReading(3, "orders", 5, ["eu", "us"], True),
        c.StartDelivery(3, spec)]
    assert 3 in subscriptions


def test_a_subscription_id_is_taken_once() -> None:
    subscriptions = c.Subscriptions()
    subscribe(subscriptions)
    assert subscribe(subscriptions, correlation_id=11) == [
        s.Send(f.Response(Key.SUBSCRIBE, 11, ResponseCode.SUBSCRIPTION_ID_ALREADY_EXISTS))]


def test_credit_goes_to_a_known_subscription_else_is_refused() -> None:
    subscriptions = c.Subscriptions()
    subscribe(subscriptions)
    assert subscriptions.credit(f.Credit(1, 7)) == [c.Grant(1, 7)]
    assert subscriptions.credit(f.Credit(2, 7)) == [
        s.Send(r.CreditResponse(ResponseCode.SUBSCRIPTION_ID_DOES_NOT_EXIST, 2))]


def test_unsubscribe_ends_a_known_subscription() -> None:
    subscriptions = c.Subscriptions()
    subscribe(subscriptions)
    assert subscriptions.unsubscribe(f.Unsubscribe(12, 1)) == [
        c.EndSubscription(1), s.Send(f.Response(Key.UNSUBSCRIBE, 12, ResponseCode.OK))]
    assert subscriptions.unsubscribe(f.Unsubscribe(13, 1)) == [
        s.Send(f.Response(Key.UNSUBSCRIBE, 13, ResponseCode.SUBSCRIPTION_ID_DOES_NOT_EXIST))]
    assert subscriptions.end(1) == []


def test_a_single_active_consumer_delivers_only_once_active_and_told_where() -> None:
    subscriptions = c.Subscriptions()
    start = f.OffsetSpec(OffsetType.NEXT)
    actions = subscribe(subscriptions, spec=start, properties={
        "single-active-consumer": "true", "name": "app", "super-stream": "invoices"})
    assert actions[-1] == c.JoinGroup(1, "app", "invoices")
    assert not any(isinstance(action, c.StartDelivery) for action in actions)

    assert subscriptions.activation(1, True) == [s.Send(r.ConsumerUpdate(1, 1, True)),
                                                 c.AwaitReply(1)]
    assert subscriptions.awaiting(1)
    reply = f.ConsumerUpdateReply(1, ResponseCode.OK, f.OffsetSpec(OffsetType.NONE))
    assert subscriptions.consumer_update_reply(reply) == [c.StartDelivery(1, start)]
    assert not subscriptions.awaiting(1)
    assert subscriptions.consumer_update_reply(reply) == []  # answered once

    assert subscriptions.activation(1, False) == [
        c.StopDelivery(1), s.Send(r.ConsumerUpdate(2, 1, False)), c.AwaitReply(2)]
    assert subscriptions.consumer_update_reply(  # the group may activate the next now
        f.ConsumerUpdateReply(2, ResponseCode.OK, f.OffsetSpec(OffsetType.FIRST))) == [
        c.SteppedDown(1)]

    assert sent(subscriptions.activation(1, True)) == [r.ConsumerUpdate(3, 1, True)]
    chosen = f.OffsetSpec(OffsetType.OFFSET, 99)
    assert subscriptions.consumer_update_reply(
        f.ConsumerUpdateReply(3, ResponseCode.OK, chosen)) == [c.StartDelivery(1, chosen)]


def test_a_reply_for_an_ended_subscription_starts_nothing() -> None:
    subscriptions = c.Subscriptions()
    sac = {"single-active-consumer": "true"}
    subscribe(subscriptions, properties=sac)
    subscriptions.activation(1, True)
    subscriptions.end(1)
    subscribe(subscriptions, properties=sac)  # the same id again, not yet active
    reply = f.ConsumerUpdateReply(1, ResponseCode.OK, f.OffsetSpec(OffsetType.NONE))
    assert subscriptions.consumer_update_reply(reply) == []


def test_activation_of_a_plain_or_unknown_subscription_is_ignored() -> None:
    subscriptions = c.Subscriptions()
    subscribe(subscriptions)
    assert subscriptions.activation(1, True) == []
    assert subscriptions.activation(9, True) == []


flow_events = st.one_of(
    st.tuples(st.just("subscribe"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("credit"), st.integers(0, 3), st.integers(0, 10)),
    st.tuples(st.just("unsubscribe"), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("activation"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("reply"), st.integers(0, 12), st.sampled_from(list(OffsetType))),
)


@settings(max_examples=300)
@given(events=st.lists(flow_events, max_size=40))
def test_random_flow_events_never_deliver_twice_or_to_what_is_gone(
        events: list[tuple[str, int, object]]) -> None:
    subscriptions = c.Subscriptions()
    existing: set[int] = set()
    delivering: set[int] = set()  # the delivery tasks the connection would be running
    for event, number, value in events:
        if event == "subscribe":
            properties = {"single-active-consumer": "true"} if value else {}
            actions = subscribe(subscriptions, number, properties=properties)
        elif event == "credit":
            actions = subscriptions.credit(f.Credit(number, int(value)))  # type: ignore[call-overload]
        elif event == "unsubscribe":
            actions = subscriptions.unsubscribe(f.Unsubscribe(0, number))
        elif event == "activation":
            actions = subscriptions.activation(number, bool(value))
        else:
            spec = f.OffsetSpec(value, 0)  # type: ignore[arg-type]
            actions = subscriptions.consumer_update_reply(
                f.ConsumerUpdateReply(number, ResponseCode.OK, spec))
        for action in actions:
            match action:
                case c.StartReading(subscription_id):
                    assert subscription_id not in existing
                    existing.add(subscription_id)
                case c.StartDelivery(subscription_id, spec):
                    assert subscription_id in existing and subscription_id not in delivering
                    assert spec.type != OffsetType.NONE
                    delivering.add(subscription_id)
                case c.StopDelivery(subscription_id):
                    assert subscription_id in delivering
                    delivering.discard(subscription_id)
                case (c.Grant(subscription_id) | c.JoinGroup(subscription_id)
                      | c.SteppedDown(subscription_id)):
                    assert subscription_id in existing
                case c.EndSubscription(subscription_id):
                    assert subscription_id in existing
                    existing.discard(subscription_id)
                    delivering.discard(subscription_id)
        assert existing == set(subscriptions.flows)
        for flow in subscriptions.flows.values():
            if flow.single_active and flow.subscription_id in delivering:
                assert flow.active
            assert flow.delivering == (flow.subscription_id in delivering)


# -- publishers and command arguments ----------------------------------------------------


def test_a_publisher_id_is_declared_once_and_deleted_once() -> None:
    publishers: p.Publishers[str] = p.Publishers()
    assert not publishers
    assert publishers.declare(f.DeclarePublisher(1, 7, "ref", "orders"), "partition-0") == (
        f.Response(Key.DECLARE_PUBLISHER, 1, ResponseCode.OK))
    assert publishers.by_id[7].target == "partition-0" and publishers
    assert publishers.declare(f.DeclarePublisher(2, 7, "", "orders"), "partition-0") == (
        f.Response(Key.DECLARE_PUBLISHER, 2, ResponseCode.PRECONDITION_FAILED))
    assert publishers.by_id[7].reference == "ref"  # the first declaration stands
    assert publishers.delete(f.DeletePublisher(3, 7)) == (
        f.Response(Key.DELETE_PUBLISHER, 3, ResponseCode.OK))
    assert publishers.delete(f.DeletePublisher(4, 7)) == (
        f.Response(Key.DELETE_PUBLISHER, 4, ResponseCode.PUBLISHER_DOES_NOT_EXIST))


def test_a_deleted_stream_takes_its_publishers() -> None:
    publishers: p.Publishers[str] = p.Publishers()
    for publisher_id, stream in enumerate(["a", "b", "a"]):
        publishers.declare(f.DeclarePublisher(0, publisher_id, "", stream), stream)
    assert publishers.drop(lambda target: target == "a") == {"a"}
    assert list(publishers.by_id) == [1]


def test_a_refusal_names_every_message() -> None:
    code = ResponseCode.PUBLISHER_DOES_NOT_EXIST
    assert p.refusal(3, [10, 11], code) == r.PublishError(3, [(10, code), (11, code)])


def test_stream_arguments_in_broker_form() -> None:
    assert commands.stream_arguments({"max-length-bytes": "100", "max-age": "1h",
                                      "x-queue-leader-locator": "client-local",
                                      "unknown": "ignored"}) == {
        "x-max-length-bytes": 100, "x-max-age": "1h", "x-queue-leader-locator": "client-local"}
    with pytest.raises(commands.CommandFailed):
        commands.stream_arguments({"stream-max-segment-size-bytes": "big"})


@pytest.mark.parametrize(("spec", "offset"), [
    (f.OffsetSpec(OffsetType.FIRST), 10),
    (f.OffsetSpec(OffsetType.LAST), 40),
    (f.OffsetSpec(OffsetType.NEXT), 50),
    (f.OffsetSpec(OffsetType.OFFSET, 23), 23),
    (f.OffsetSpec(OffsetType.TIMESTAMP, 1000), 30),
])
def test_offset_specs_resolve_against_the_partition(spec: f.OffsetSpec, offset: int) -> None:
    partition = SimpleNamespace(first_offset=10, committed_chunk_id=40, committed_offset=50,
                                offset_for_timestamp=lambda ms: 30)
    assert commands.resolve_offset(partition, spec) == offset  # type: ignore[arg-type]


# -- the client's side of the same handshake ---------------------------------------------


def handshake_through(server: s.ConnectionState, client: s.ClientHandshake, *,
                      accept_login: bool = True, open_namespace: bool = True) -> None:
    """Frames from one side to the other through the codec, each side's state deciding
    what to send, the server's broker answers given as asked, until neither sends more."""
    codec = StreamCodec(1 << 20, REPLY_PARSERS)
    to_server = [client.begin()]
    while to_server:
        to_client: list[f.Frame] = []
        for frame in to_server:
            actions = server.receive(frame)
            while actions:
                action, *actions = actions
                if isinstance(action, s.Send):
                    to_client.append(action.frame)
                elif isinstance(action, s.Authenticate):
                    actions += (server.login_succeeded(action.username) if accept_login
                                else server.login_failed("wrong password"))
                elif isinstance(action, s.OpenNamespace):
                    actions += (server.namespace_opened("127.0.0.1", 5552) if open_namespace
                                else server.namespace_refused("no such vhost"))
        to_server = []
        for frame in to_client:
            codec.receive_data(encode(frame))
            for read in codec.next_frames():
                to_server += client.receive(read)


def test_the_client_walks_the_servers_handshake_to_open() -> None:
    server = s.ConnectionState(1 << 20, 60, DEFAULT_IDENTITY)
    client = s.ClientHandshake("guest", "guest", "shop", {"product": "test"})
    handshake_through(server, client)
    assert client.phase is server.phase is s.Phase.OPEN
    assert server.user == "guest" and server.namespace == "shop"
    assert (client.frame_max, client.heartbeat_s) == (1 << 20, 60)


@pytest.mark.parametrize(("login", "namespace", "code", "step"), [
    (False, True, ResponseCode.AUTHENTICATION_FAILURE, "SaslAuthenticate"),
    (True, False, ResponseCode.VIRTUAL_HOST_ACCESS_FAILURE, "Open")])
def test_a_refused_step_stops_the_client_with_its_code(login: bool, namespace: bool,
                                                       code: int, step: str) -> None:
    server = s.ConnectionState(1 << 20, 60, DEFAULT_IDENTITY)
    client = s.ClientHandshake("guest", "guest", "shop", {})
    with pytest.raises(s.StepRefused) as refused:
        handshake_through(server, client, accept_login=login, open_namespace=namespace)
    assert (refused.value.code, refused.value.request) == (code, step)
    assert client.phase is s.Phase.CLOSED


def test_an_answer_out_of_order_is_a_protocol_error() -> None:
    client = s.ClientHandshake("guest", "guest", "/", {})
    client.begin()
    with pytest.raises(s.ProtocolError):
        client.receive(r.OpenResponse(1, ResponseCode.OK))
