"""AMQP 0-9-1's state objects driven directly: no socket, no event loop."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.amqp091 import state as s
from mainstem.protocols.amqp091.errors import AmqpCodecError, ProtocolHeaderMismatch
from mainstem.protocols.amqp091.events import (
    HEARTBEAT,
    PROTOCOL_HEADER_RECEIVED,
    ContentMessage,
    MethodFrame,
)
from mainstem.protocols.amqp091.methods import ReplyCode
from mainstem.protocols.amqp091.wire import encode_table

USER = object()
PLAIN = m.ConnectionStartOk({"capabilities": {"consumer_cancel_notify": True}}, "PLAIN",
                            b"\0guest\0secret", "en_US")


def new_state(**limits: int) -> s.ConnectionState:
    return s.ConnectionState(**({"channel_max": 2047, "frame_max": 131072, "heartbeat": 60}
                                | limits))


def frame(method: m.Method, channel: int = 0) -> MethodFrame:
    return MethodFrame(channel, method)


def open_state(**limits: int) -> s.ConnectionState:
    state = new_state(**limits)
    state.receive(PROTOCOL_HEADER_RECEIVED)
    state.receive(frame(PLAIN))
    state.answer(s.LoginAccepted(USER))
    state.receive(frame(m.ConnectionTuneOk(0, 0, 0)))
    state.receive(frame(m.ConnectionOpen("/")))
    state.answer(s.VirtualHostOpened())
    return state


# -- the handshake -------------------------------------------------------------------------


def test_handshake_step_by_step() -> None:
    state = new_state(channel_max=100, frame_max=65536, heartbeat=30)
    [start] = state.receive(PROTOCOL_HEADER_RECEIVED)
    assert isinstance(start, s.Send) and isinstance(start.method, m.ConnectionStart)
    assert start.method.mechanisms == b"PLAIN AMQPLAIN"
    assert start.method.server_properties["capabilities"]["per_consumer_qos"] is True
    assert state.receive(frame(PLAIN)) == [s.CheckLogin("PLAIN", "guest", "secret")]
    assert state.phase is s.Phase.LOGGING_IN
    assert state.cancel_notify and not state.blocked_capable
    assert state.answer(s.LoginAccepted(USER)) == [s.Send(0, m.ConnectionTune(100, 65536, 30))]
    assert state.user is USER
    assert state.receive(frame(m.ConnectionTuneOk(10, 8192, 5))) == [s.Tuned(8192, 10, 5)]
    assert (state.channel_max, state.frame_max, state.heartbeat) == (10, 8192, 5)
    assert state.receive(frame(m.ConnectionOpen("/v"))) == [s.OpenVirtualHost("/v")]
    assert state.answer(s.VirtualHostOpened()) == [s.Send(0, m.ConnectionOpenOk())]
    assert state.phase is s.Phase.OPEN


def test_heartbeats_and_content_during_the_handshake_are_dropped() -> None:
    state = new_state()
    state.receive(PROTOCOL_HEADER_RECEIVED)
    assert state.receive(HEARTBEAT) == []
    assert state.receive(ContentMessage(1, m.BasicPublish(), b"\0\0", b"x")) == []
    assert state.phase is s.Phase.AWAIT_START_OK


def test_amqplain_credentials() -> None:
    table = encode_table({"LOGIN": "alice", "PASSWORD": b"pw"})[4:]  # a table without its size
    assert s.credentials("AMQPLAIN", table) == ("alice", "pw")


@pytest.mark.parametrize("mechanism, response", [
    ("PLAIN", b"guest\0secret"), ("AMQPLAIN", b"\xff\xff"), ("EXTERNAL", b""),
])
def test_bad_credentials_are_access_refused(mechanism: str, response: bytes) -> None:
    state = new_state()
    state.receive(PROTOCOL_HEADER_RECEIVED)
    with pytest.raises(AmqpCodecError) as refused:
        state.receive(frame(m.ConnectionStartOk({}, mechanism, response, "en_US")))
    assert refused.value.reply_code is ReplyCode.ACCESS_REFUSED


def test_refused_login_names_the_mechanism() -> None:
    state = new_state()
    state.receive(PROTOCOL_HEADER_RECEIVED)
    state.receive(frame(PLAIN))
    with pytest.raises(AmqpCodecError) as refused:
        state.answer(s.LoginRefused())
    assert refused.value.reply_code is ReplyCode.ACCESS_REFUSED
    assert "mechanism PLAIN" in refused.value.reply_text


def test_out_of_order_handshake_method_is_command_invalid() -> None:
    state = new_state()
    state.receive(PROTOCOL_HEADER_RECEIVED)
    with pytest.raises(AmqpCodecError) as invalid:
        state.receive(frame(m.ConnectionOpen("/")))
    assert invalid.value.reply_code is ReplyCode.COMMAND_INVALID
    assert invalid.value.reply_text == "expected connection.start-ok, got connection.open"
    assert (invalid.value.class_id, invalid.value.method_id) == (10, 40)


def test_handshake_method_on_another_channel_is_command_invalid() -> None:
    state = new_state()
    state.receive(PROTOCOL_HEADER_RECEIVED)
    with pytest.raises(AmqpCodecError):
        state.receive(frame(PLAIN, channel=1))


@pytest.mark.parametrize("proposed, negotiated", [
    ((0, 0, 0), (2047, 131072, 0)),  # zero: ours
    ((5000, 131072, 600), (2047, 131072, 600)),  # more channels than ours: ours
    ((1, 4096, 1), (1, 4096, 1)),
])
def test_tune_ok_negotiation(proposed: tuple[int, int, int],
                             negotiated: tuple[int, int, int]) -> None:
    state = new_state()
    state.receive(PROTOCOL_HEADER_RECEIVED)
    state.receive(frame(PLAIN))
    state.answer(s.LoginAccepted(USER))
    state.receive(frame(m.ConnectionTuneOk(*proposed)))
    assert (state.channel_max, state.frame_max, state.heartbeat) == negotiated


@pytest.mark.parametrize("frame_max", [4095, 131073])
def test_frame_max_outside_the_range_is_not_allowed(frame_max: int) -> None:
    state = new_state()
    state.receive(PROTOCOL_HEADER_RECEIVED)
    state.receive(frame(PLAIN))
    state.answer(s.LoginAccepted(USER))
    with pytest.raises(AmqpCodecError) as refused:
        state.receive(frame(m.ConnectionTuneOk(0, frame_max, 0)))
    assert refused.value.reply_code is ReplyCode.NOT_ALLOWED
    assert (refused.value.class_id, refused.value.method_id) == (10, 31)


def test_refused_virtual_host_is_not_allowed() -> None:
    state = new_state()
    state.receive(PROTOCOL_HEADER_RECEIVED)
    state.receive(frame(PLAIN))
    state.answer(s.LoginAccepted(USER))
    state.receive(frame(m.ConnectionTuneOk(0, 0, 0)))
    state.receive(frame(m.ConnectionOpen("/nope")))
    with pytest.raises(AmqpCodecError) as refused:
        state.answer(s.VirtualHostRefused("no access to '/nope'"))
    assert refused.value.reply_code is ReplyCode.NOT_ALLOWED
    assert (refused.value.class_id, refused.value.method_id) == (10, 40)


def test_answers_nobody_asked_for_are_misuse() -> None:
    state = new_state()
    with pytest.raises(s.StateMisuse):
        state.answer(s.LoginAccepted(USER))
    state.receive(PROTOCOL_HEADER_RECEIVED)
    state.receive(frame(PLAIN))
    with pytest.raises(s.StateMisuse):
        state.answer(s.VirtualHostOpened())
    with pytest.raises(s.StateMisuse):
        state.receive(frame(m.ConnectionTuneOk()))  # the login's answer is still out


# -- closing -------------------------------------------------------------------------------


def test_client_close_is_answered_then_input_discarded_until_hang_up() -> None:
    state = open_state()
    actions = state.receive(frame(m.ConnectionClose(200, "bye", 0, 0)))
    assert actions == [s.EndChannels(), s.Send(0, m.ConnectionCloseOk()), s.DiscardInput(),
                       s.HangUp()]
    assert state.phase is s.Phase.CLOSED and not state.awaiting_close_ok
    assert state.receive(frame(m.ConnectionOpen("/"))) == []


def test_unsolicited_close_ok_hangs_up() -> None:
    state = open_state()
    assert state.receive(frame(m.ConnectionCloseOk())) == [s.HangUp()]


def test_our_close_waits_for_close_ok_dropping_everything_else() -> None:
    state = open_state()
    error = AmqpCodecError(ReplyCode.FRAME_ERROR, "bad frame")
    assert state.fail(error) == [s.EndChannels(), s.Send(0, error.close_method()),
                                 s.DiscardInput(), s.HangUp()]
    assert state.awaiting_close_ok
    assert state.fail(error) == []  # one close only
    assert state.receive(frame(m.BasicAck(1), channel=1)) == []
    assert state.receive(frame(m.ConnectionUpdateSecret(b"", "")) ) == []
    assert state.awaiting_close_ok
    assert state.receive(frame(m.ConnectionCloseOk())) == []
    assert state.phase is s.Phase.CLOSED


def test_a_client_close_crossing_ours_ends_the_wait() -> None:
    state = open_state()
    state.fail(AmqpCodecError(ReplyCode.CONNECTION_FORCED, "shutdown"))
    state.receive(frame(m.ConnectionClose(200, "", 0, 0)))
    assert not state.awaiting_close_ok


def test_failing_during_the_handshake_closes_too() -> None:
    state = new_state()
    state.receive(PROTOCOL_HEADER_RECEIVED)
    assert s.HangUp() in state.fail(AmqpCodecError(ReplyCode.COMMAND_INVALID, "x"))


def test_another_protocol_gets_our_header_and_no_close() -> None:
    state = new_state()
    assert state.fail(ProtocolHeaderMismatch(b"AMQP\x00\x01\x00\x00")) == [
        s.SendProtocolHeader(), s.HangUp()]
    assert state.phase is s.Phase.CLOSED


def test_update_secret_is_acknowledged_and_other_methods_refused() -> None:
    state = open_state()
    assert state.receive(frame(m.ConnectionUpdateSecret(b"t", "r"))) == [
        s.Send(0, m.ConnectionUpdateSecretOk())]
    with pytest.raises(AmqpCodecError) as invalid:
        state.receive(frame(m.ConnectionTuneOk()))
    assert invalid.value.reply_code is ReplyCode.COMMAND_INVALID


# -- alarms ------------------------------------------------------------------------------


def test_blocked_while_an_alarm_is_on_for_capable_clients() -> None:
    state = open_state()
    assert state.alarms_changed(frozenset({"memory"})) == []  # not connection.blocked capable
    capable = m.ConnectionStartOk({"capabilities": {"connection.blocked": True}}, "PLAIN",
                                  b"\0guest\0secret", "en_US")
    state = new_state()
    assert state.alarms_changed(frozenset({"disk"})) == []  # not open yet
    state.receive(PROTOCOL_HEADER_RECEIVED)
    state.receive(frame(capable))
    state.answer(s.LoginAccepted(USER))
    state.receive(frame(m.ConnectionTuneOk(0, 0, 0)))
    state.receive(frame(m.ConnectionOpen("/")))
    state.answer(s.VirtualHostOpened())
    assert state.alarms_changed(frozenset({"memory", "disk"})) == [
        s.Send(0, m.ConnectionBlocked("low on disk"))]
    assert state.alarms_changed(frozenset({"inodes"})) == [
        s.Send(0, m.ConnectionBlocked("resource alarm"))]
    assert state.alarms_changed(frozenset()) == [s.Send(0, m.ConnectionUnblocked())]


# -- channels ------------------------------------------------------------------------------


def test_channels_open_within_channel_max() -> None:
    table = s.ChannelTable(2)
    assert table.method(7, m.ChannelOpen()) is s.Verdict.OPEN
    assert table.method(65535, m.ChannelOpen()) is s.Verdict.OPEN
    with pytest.raises(AmqpCodecError) as refused:
        table.method(1, m.ChannelOpen())
    assert refused.value.reply_code is ReplyCode.NOT_ALLOWED
    assert "negotiated channel_max (2)" in refused.value.reply_text
    assert table.method(7, m.ChannelClose(200, "", 0, 0)) is s.Verdict.CLOSE
    assert table.method(1, m.ChannelOpen()) is s.Verdict.OPEN


def test_methods_on_a_channel_not_open_are_channel_errors() -> None:
    table = s.ChannelTable(10)
    with pytest.raises(AmqpCodecError) as error:
        table.method(3, m.BasicQos(0, 1, False))
    assert error.value.reply_code is ReplyCode.CHANNEL_ERROR
    with pytest.raises(AmqpCodecError):
        table.content(ContentMessage(3, m.BasicPublish(), b"\0\0", b""))
    table.method(3, m.ChannelOpen())
    with pytest.raises(AmqpCodecError) as again:
        table.method(3, m.ChannelOpen())
    assert again.value.reply_text == "second 'channel.open' seen"


def test_channel_close_crossing_rules() -> None:
    table = s.ChannelTable(10)
    table.method(1, m.ChannelOpen())
    assert table.method(1, m.BasicQos(0, 1, False)) is s.Verdict.HANDLE
    assert table.method(1, m.ChannelCloseOk()) is s.Verdict.DROP  # nothing to confirm
    table.close_sent(1)
    assert table.method(1, m.BasicQos(0, 1, False)) is s.Verdict.DROP
    assert table.content(ContentMessage(1, m.BasicPublish(), b"\0\0", b"")) is s.Verdict.DROP
    assert table.method(1, m.ChannelOpen()) is s.Verdict.DROP
    assert table.method(1, m.ChannelClose(200, "", 0, 0)) is s.Verdict.ANSWER_CLOSE
    assert table.method(1, m.ChannelCloseOk()) is s.Verdict.FORGET
    assert len(table) == 0
    assert table.method(1, m.ChannelOpen()) is s.Verdict.OPEN  # the number is free again


def test_closing_channels_count_against_channel_max() -> None:
    table = s.ChannelTable(1)
    table.method(1, m.ChannelOpen())
    table.close_sent(1)
    with pytest.raises(AmqpCodecError):
        table.method(2, m.ChannelOpen())
    with pytest.raises(s.StateMisuse):
        table.close_sent(2)


# -- heartbeats ------------------------------------------------------------------------------


def test_heartbeats_every_half_interval_and_death_after_two() -> None:
    clock = s.HeartbeatClock(10, now=100.0)
    assert clock.period == 5
    assert clock.tick(105.0) == [s.SendHeartbeat()]
    assert clock.tick(120.0) == [s.SendHeartbeat()]  # exactly two intervals: still alive
    clock.received(118.0)
    assert clock.tick(138.0) == [s.SendHeartbeat()]
    assert clock.tick(138.5) == [s.SendHeartbeat(), s.PeerDead()]


# -- credit ----------------------------------------------------------------------------------


def test_qos_per_consumer_and_global() -> None:
    unacked: dict[int, object] = {}
    credit = s.ChannelCredit(unacked)
    assert credit.consumer_prefetch(stream=False) == 0 and credit.allows(0, 10**6, False)
    assert credit.qos(m.BasicQos(0, 2, True)) == m.BasicQosOk()
    assert credit.consumer_prefetch(stream=False) == 0  # global is shared, not per consumer
    assert credit.consumer_prefetch(stream=True) == 2  # a stream consumer takes it
    unacked[1] = unacked[2] = object()
    assert not credit.allows(0, 0, False)
    assert not credit.allows(0, 0, True)  # no-ack deliveries are not counted, yet wait
    del unacked[1]
    assert credit.allows(0, 0, False)
    credit.qos(m.BasicQos(0, 3, False))
    assert credit.consumer_prefetch(stream=False) == 3 == credit.consumer_prefetch(stream=True)
    credit.qos(m.BasicQos(0, 0, True))
    assert credit.allows(0, 10**6, False)


@pytest.mark.parametrize("prefetch, unacked, no_ack, allowed", [
    (0, 10**6, False, True), (2, 1, False, True), (2, 2, False, False), (2, 5, True, True),
])
def test_consumer_prefetch(prefetch: int, unacked: int, no_ack: bool, allowed: bool) -> None:
    assert s.ChannelCredit({}).allows(prefetch, unacked, no_ack) is allowed


def test_a_closed_channel_delivers_nothing() -> None:
    credit = s.ChannelCredit({})
    credit.close()
    assert not credit.allows(0, 0, True)


def test_qos_prefetch_size_and_flow_off_are_not_implemented() -> None:
    credit = s.ChannelCredit({})
    with pytest.raises(AmqpCodecError) as size:
        credit.qos(m.BasicQos(1024, 1, False))
    assert size.value.reply_code is ReplyCode.NOT_IMPLEMENTED
    assert credit.flow(m.ChannelFlow(True)) == m.ChannelFlowOk(True)
    with pytest.raises(AmqpCodecError) as flow:
        credit.flow(m.ChannelFlow(False))
    assert (flow.value.class_id, flow.value.method_id) == (20, 20)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["qos", "consume", "deliver", "ack", "ack-all"]),
                          st.integers(0, 4), st.booleans()), max_size=40))
def test_deliveries_never_exceed_the_prefetch(steps: list[tuple[str, int, bool]]) -> None:
    """A consumer that delivers only while allowed never holds more than its prefetch nor
    its channel more than the global prefetch, whatever qos says meanwhile (a lowered
    prefetch only stops deliveries until acks bring the count under it)."""
    unacked: dict[int, object] = {}
    credit = s.ChannelCredit(unacked)
    tag = consumer_unacked = 0
    prefetch = credit.consumer_prefetch(stream=False)
    for step, count, global_ in steps:
        if step == "qos":
            credit.qos(m.BasicQos(0, count, global_))
        elif step == "consume":  # a new consumer takes the current prefetch
            prefetch, consumer_unacked = credit.consumer_prefetch(stream=False), 0
        elif step == "deliver" and credit.allows(prefetch, consumer_unacked, False):
            tag += 1
            unacked[tag] = object()
            consumer_unacked += 1
            assert not prefetch or consumer_unacked <= prefetch
            assert not credit.global_prefetch or len(unacked) <= credit.global_prefetch
        elif step == "ack" and unacked:
            del unacked[max(unacked)]
            consumer_unacked = max(consumer_unacked - 1, 0)
        elif step == "ack-all":
            unacked.clear()
            consumer_unacked = 0


# -- random sequences ------------------------------------------------------------------------

CLIENT_METHODS = [
    PLAIN, m.ConnectionStartOk({}, "AMQPLAIN", b"", "en_US"),
    m.ConnectionStartOk({}, "PLAIN", b"x", "en_US"), m.ConnectionTuneOk(0, 0, 0),
    m.ConnectionTuneOk(3, 4096, 1), m.ConnectionTuneOk(0, 10, 0), m.ConnectionOpen("/"),
    m.ConnectionClose(200, "", 0, 0), m.ConnectionCloseOk(), m.ConnectionUpdateSecret(b"", ""),
    m.ChannelOpen(), m.ChannelClose(200, "", 0, 0), m.ChannelCloseOk(), m.BasicQos(0, 1, True),
    m.BasicAck(1, False),
]
client_events = st.one_of(
    st.builds(MethodFrame, st.sampled_from([0, 0, 1, 2]), st.sampled_from(CLIENT_METHODS)),
    st.just(HEARTBEAT),
    st.builds(ContentMessage, st.sampled_from([0, 1, 2]), st.just(m.BasicPublish()),
              st.just(b"\0\0"), st.just(b"")),
)
steps = st.lists(st.one_of(client_events, st.sampled_from(["fail", "close-sent"])),
                 max_size=30)


@settings(max_examples=300, deadline=None)
@given(steps, st.booleans(), st.booleans())
def test_random_sequences_raise_only_protocol_errors(sequence: list, logins: bool,
                                                     vhosts: bool) -> None:
    """Driven as the connection drives them (answers when asked, channel frames of an open
    connection to the table), the state objects only ever raise the codec's error, a
    connection that raised is closed with connection.close, and phases only move on."""
    state = new_state(channel_max=2)
    table = s.ChannelTable(2)
    order = list(s.Phase)
    for step in [PROTOCOL_HEADER_RECEIVED, *sequence]:
        before = order.index(state.phase)
        try:
            if step == "fail":
                state.fail(AmqpCodecError(ReplyCode.CONNECTION_FORCED, "stop"))
            elif step == "close-sent":
                if table.closing and state.phase is s.Phase.OPEN:
                    table.close_sent(next(iter(table.closing)))
            elif state.phase is s.Phase.OPEN and getattr(step, "channel", 0) != 0:
                if isinstance(step, ContentMessage):
                    table.content(step)
                else:
                    table.method(step.channel, step.method)
            else:
                perform(state, table, state.receive(step), logins, vhosts)
        except AmqpCodecError as error:
            actions = state.fail(error)
            assert s.HangUp() in actions and state.awaiting_close_ok
        assert order.index(state.phase) >= before
        assert len(table) <= table.channel_max <= 2
        if state.phase in (s.Phase.LOGGING_IN, s.Phase.OPENING):
            raise AssertionError("an answer was left out")


def perform(state: s.ConnectionState, table: s.ChannelTable, actions: list[s.Action],
            logins: bool, vhosts: bool) -> None:
    for action in actions:
        if isinstance(action, s.CheckLogin):
            answer = s.LoginAccepted(USER) if logins else s.LoginRefused()
            perform(state, table, state.answer(answer), logins, vhosts)
        elif isinstance(action, s.OpenVirtualHost):
            answer = s.VirtualHostOpened() if vhosts else s.VirtualHostRefused("no")
            perform(state, table, state.answer(answer), logins, vhosts)
        elif isinstance(action, s.Tuned):
            table.channel_max = action.channel_max
        elif isinstance(action, s.EndChannels):
            table.clear()


CHANNEL_METHODS = [m.ChannelOpen(), m.ChannelClose(200, "", 0, 0), m.ChannelCloseOk(),
                   m.BasicQos(0, 1, False), "content", "close-sent"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from(CHANNEL_METHODS)), max_size=40))
def test_channel_table_against_a_model(steps: list[tuple[int, object]]) -> None:
    """The table agrees with a plain model: a closing channel hands nothing to its
    handlers, a closed number is free again, and no more than channel_max are open."""
    table = s.ChannelTable(3)
    model: dict[int, str] = {}  # number -> "open" | "closing"
    for number, step in steps:
        if step == "close-sent":
            if model.get(number) == "open":
                table.close_sent(number)
                model[number] = "closing"
            continue
        try:
            if step == "content":
                verdict = table.content(ContentMessage(number, m.BasicPublish(), b"\0\0", b""))
            else:
                verdict = table.method(number, step)  # type: ignore[arg-type]
        except AmqpCodecError as error:
            assert error.reply_code in (ReplyCode.CHANNEL_ERROR, ReplyCode.NOT_ALLOWED)
            assert model.get(number) != "closing"
            if isinstance(step, m.ChannelOpen) and number not in model:
                assert len(model) == 3
            continue
        state = model.get(number)
        if verdict is s.Verdict.OPEN:
            assert state is None
            model[number] = "open"
        elif verdict in (s.Verdict.CLOSE, s.Verdict.FORGET):
            assert state == ("open" if verdict is s.Verdict.CLOSE else "closing")
            del model[number]
        elif verdict is s.Verdict.HANDLE:
            assert state == "open"
        else:
            assert state is not None
        assert len(table) == len(model) <= 3
        assert {n for n, closing in table.closing.items() if closing} == {
            n for n, st_ in model.items() if st_ == "closing"}
