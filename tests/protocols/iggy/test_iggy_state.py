"""The Iggy protocol's state object driven directly: no socket, no event loop."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.protocols.iggy import codec as c
from mainstem.protocols.iggy import vsr
from mainstem.protocols.iggy.codec import Code, ErrorCode, IggyError
from mainstem.protocols.iggy.layouts import SEED, VSR
from mainstem.protocols.iggy.state import (
    Execute,
    IggyState,
    Login,
    Logout,
    Phase,
    Reply,
    user_id,
)

COMMANDS = frozenset((Code.PING, Code.LOGIN_USER, Code.LOGOUT_USER, Code.GET_STREAM,
                      Code.CREATE_STREAM, Code.SEND_MESSAGES, Code.GET_STATS))
CLIENT = (7).to_bytes(16, "little")


def state_of(layout: str) -> IggyState:
    state = IggyState(42, COMMANDS, "mainstem-test")
    if layout == "seed":
        assert state.tell_framing(c.encode_request(Code.PING))
    else:
        header = bytearray(vsr.HEADER_SIZE)
        struct.pack_into("<I", header, vsr.SIZE_OFFSET, vsr.HEADER_SIZE)
        header[vsr.COMMAND_OFFSET] = vsr.Command.REQUEST
        assert not state.tell_framing(bytes(header[:vsr.COMMAND_OFFSET]))  # not yet told
        assert state.tell_framing(bytes(header))
    return state


def seed(code: int, payload: bytes = b"") -> c.Request:
    return c.Request(code, memoryview(payload))


def frame(operation: int, body: bytes = b"", code: int = 0) -> vsr.Frame:
    return vsr.Frame(CLIENT, b"\x09" * 16, 1, operation, 0, code, memoryview(body))


def credentials(password: str = "guest") -> bytes:
    return c.encode_name("guest") + c.encode_name(password)


def register_body(version: int = vsr.PROTOCOL_VERSION) -> bytes:
    return struct.pack("<I", version) + c.encode_name("sdk") + c.encode_name("1") + \
        credentials() + bytes(4)


def test_the_first_frame_tells_the_layout() -> None:
    assert state_of("seed").layout is SEED
    assert state_of("vsr").layout is VSR
    state = state_of("seed")
    state.tell_framing(b"\x00" * 300)  # told once: later bytes change nothing
    assert state.layout is SEED


def test_framing_errors_are_answered_only_in_the_2024_layout() -> None:
    seed_state, vsr_state = state_of("seed"), state_of("vsr")
    assert seed_state.framing_failed() == c.encode_error(ErrorCode.INVALID_COMMAND)
    assert vsr_state.framing_failed() == b""
    assert seed_state.phase is Phase.CLOSED


def test_only_ping_and_login_before_a_login() -> None:
    state = state_of("seed")
    assert state.receive(seed(Code.PING)) == Execute(seed(Code.PING), Code.PING,
                                                     memoryview(b""))
    assert state.receive(seed(Code.GET_STREAM)) == Reply(
        c.encode_error(ErrorCode.UNAUTHENTICATED))
    assert state.receive(seed(999)) == Reply(c.encode_error(ErrorCode.INVALID_COMMAND))


def test_login_then_logout_in_the_2024_layout() -> None:
    state = state_of("seed")
    login = state.receive(seed(Code.LOGIN_USER, credentials()))
    assert isinstance(login, Login) and (login.username, login.password) == ("guest", "guest")
    assert state.phase is Phase.AUTHENTICATING
    assert state.logged_in(login, "guest") == c.encode_response(c.U32.pack(user_id("guest")))
    assert isinstance(state.receive(seed(Code.GET_STREAM)), Execute)
    assert state.receive(seed(Code.LOGOUT_USER, b"x")) == Reply(
        c.encode_error(ErrorCode.INVALID_FORMAT))  # trailing bytes: still logged in
    assert state.receive(seed(Code.LOGOUT_USER)) == Logout(c.encode_response())
    assert state.phase is Phase.ANONYMOUS and state.user is None


def test_a_refused_login_keeps_the_previous_session() -> None:
    state = state_of("seed")
    assert state.receive(seed(Code.LOGIN_USER, b"\x01")) == Reply(
        c.encode_error(ErrorCode.INVALID_FORMAT))
    login = state.receive(seed(Code.LOGIN_USER, credentials("bad")))
    assert state.login_refused(login) == c.encode_error(ErrorCode.INVALID_CREDENTIALS)
    assert state.phase is Phase.ANONYMOUS
    state.logged_in(state.receive(seed(Code.LOGIN_USER, credentials())), "guest")
    state.login_refused(state.receive(seed(Code.LOGIN_USER, credentials("bad"))))
    assert state.phase is Phase.LOGGED_IN and state.user == "guest"


def test_register_opens_a_session_or_evicts() -> None:
    state = state_of("vsr")
    assert state.receive(frame(vsr.Operation.REGISTER, b"\x01")) == Reply(
        vsr.encode_eviction(CLIENT, vsr.Eviction.MALFORMED_LOGIN))
    refused = state.receive(frame(vsr.Operation.REGISTER, register_body(version=1)))
    assert refused.data == vsr.encode_eviction(CLIENT, vsr.Eviction.INCOMPATIBLE_PROTOCOL)
    assert refused.note
    login = state.receive(frame(vsr.Operation.REGISTER, register_body()))
    assert isinstance(login, Login) and login.register
    assert state.login_refused(login) == vsr.encode_eviction(
        CLIENT, vsr.Eviction.INVALID_CREDENTIALS)
    login = state.receive(frame(vsr.Operation.REGISTER, register_body()))
    reply = state.logged_in(login, "guest")
    body = struct.pack("<IQI", user_id("guest"), 42, vsr.PROTOCOL_VERSION) + \
        c.encode_name("mainstem-test")
    assert reply == vsr.encode_reply(login.request, vsr.committed(body), commit=42)
    logout = frame(vsr.Operation.LOGOUT)
    assert state.receive(logout) == Logout(vsr.encode_reply(logout))
    assert state.phase is Phase.ANONYMOUS


def test_how_the_replicated_framing_answers() -> None:
    state = state_of("vsr")
    state.logged_in(state.receive(frame(vsr.Operation.REGISTER, register_body())), "guest")
    create = state.receive(frame(vsr.Operation.CREATE_STREAM, b"body"))
    assert isinstance(create, Execute) and create.code == Code.CREATE_STREAM
    assert state.executed(create, b"ok") == vsr.encode_reply(create.request,
                                                             vsr.committed(b"ok"))
    error = IggyError(ErrorCode.STREAM_NAME_NOT_FOUND, "x")
    assert state.refused(create, error) == vsr.encode_reply(
        create.request, vsr.refused(ErrorCode.STREAM_NAME_NOT_FOUND))
    lookup = state.receive(frame(vsr.Operation.NON_REPLICATED, code=Code.GET_STREAM))
    assert state.refused(lookup, error) == vsr.encode_reply(lookup.request)  # absent: None
    other = IggyError(ErrorCode.UNAUTHORIZED, "x")
    assert state.refused(lookup, other) == vsr.encode_reply(lookup.request,
                                                            status=ErrorCode.UNAUTHORIZED)
    unsupported = frame(vsr.Operation.NON_REPLICATED, code=Code.GET_STATS)
    assert state.receive(unsupported) == Reply(vsr.encode_reply(
        unsupported, status=ErrorCode.FEATURE_UNAVAILABLE))
    unknown = frame(250)
    assert state.receive(unknown) == Reply(vsr.encode_reply(
        unknown, status=ErrorCode.INVALID_COMMAND))


def test_a_group_member_takes_its_partitions_in_turn() -> None:
    state = state_of("seed")
    with pytest.raises(IggyError) as raised:
        state.member_partition(None, 0)
    assert raised.value.code == ErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND
    with pytest.raises(IggyError) as raised:
        state.member_partition([], 0)
    assert raised.value.code == ErrorCode.PARTITION_NOT_FOUND
    assert state.member_partition([1, 3], 3) == 3
    assert [state.member_partition([1, 3], None) for _ in range(4)] == [1, 3, 1, 3]


SEED_REQUESTS = st.builds(seed, st.sampled_from([*COMMANDS, 999]),
                          st.one_of(st.just(credentials()), st.binary(max_size=12)))
VSR_REQUESTS = st.one_of(
    st.builds(frame, st.just(vsr.Operation.REGISTER),
              st.one_of(st.just(register_body()), st.binary(max_size=12))),
    st.builds(frame, st.sampled_from([vsr.Operation.LOGOUT, vsr.Operation.CREATE_STREAM,
                                      vsr.Operation.SEND_MESSAGES, 250])),
    st.builds(frame, st.just(vsr.Operation.NON_REPLICATED),
              st.one_of(st.just(credentials()), st.binary(max_size=12)),
              st.sampled_from([*COMMANDS, 999])),
)


@settings(max_examples=300, deadline=None)
@given(st.data(), st.sampled_from(["seed", "vsr"]))
def test_random_requests_never_raise_and_commands_need_a_login(data: st.DataObject,
                                                                layout: str) -> None:
    state = state_of(layout)
    requests = st.lists(st.tuples(SEED_REQUESTS if layout == "seed" else VSR_REQUESTS,
                                  st.booleans()), max_size=30)
    for request, accept in data.draw(requests):
        logged_in = state.phase is Phase.LOGGED_IN
        action = state.receive(request)
        if isinstance(action, Login):
            reply = state.logged_in(action, "guest") if accept else state.login_refused(action)
            assert isinstance(reply, bytes) and reply
        elif isinstance(action, Execute):
            assert action.code in COMMANDS
            assert logged_in or action.code == Code.PING
            reply = state.executed(action, b"") if accept else state.refused(
                action, IggyError(ErrorCode.ERROR, "x"))
            assert isinstance(reply, bytes) and reply
        else:
            assert isinstance(action, Reply | Logout) and action.data
        assert state.phase in (Phase.ANONYMOUS, Phase.LOGGED_IN)
        assert (state.user is not None) == (state.phase is Phase.LOGGED_IN)
