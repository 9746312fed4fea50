"""The Iggy protocol's connection state as a pure object: requests and broker outcomes in,
actions and reply bytes out; no asyncio, no sockets.

It holds the per-connection choice of framing (the first frame tells the early-2024
length-prefixed layout from apache-iggy's replicated framing), the login and logout
state of both (LOGIN_USER, or the replicated framing's REGISTER with its evictions), which
commands a client may send before logging in, how each framing answers a result or a
failure, and a consumer group member's turn over its partitions. The asyncio connection
moves bytes, runs the commands against the broker and carries out the actions.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from mainstem.protocols.iggy import codec as c
from mainstem.protocols.iggy import vsr
from mainstem.protocols.iggy.codec import Code, ErrorCode, IggyError
from mainstem.protocols.iggy.commands import LoginUser
from mainstem.protocols.iggy.layouts import SEED, VSR, SeedLayout

ANONYMOUS_COMMANDS = frozenset((Code.PING, Code.LOGIN_USER))  # allowed before a login


def user_id(name: str) -> int:
    """The numeric id a client sees for a user: stable across connections and restarts."""
    return zlib.crc32(name.encode()) & 0x7FFF_FFFF or 1


class Phase(enum.Enum):
    FRAMING = "framing"  # no frame seen yet: the layout is unknown
    ANONYMOUS = "anonymous"
    AUTHENTICATING = "authenticating"  # the broker is checking credentials
    LOGGED_IN = "logged-in"
    CLOSED = "closed"


# -- actions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """Send these bytes; `note` is worth a log line."""

    data: bytes
    note: str = ""


@dataclass(frozen=True, slots=True)
class Execute:
    """Run command `code` on `payload` against the broker, then feed `executed` or
    `refused` with this action."""

    request: c.Request | vsr.Frame
    code: int
    payload: memoryview


@dataclass(frozen=True, slots=True)
class Login:
    """Check credentials with the broker, then feed `logged_in` or `login_refused`."""

    request: c.Request | vsr.Frame
    username: str
    password: str
    register: bool  # the replicated framing's REGISTER: its reply opens a session


@dataclass(frozen=True, slots=True)
class Logout:
    """The session's user is gone: send `data`."""

    data: bytes


Action = Reply | Execute | Login | Logout


class IggyState:
    """The states and rules of one Iggy connection."""

    def __init__(self, client_id: int, commands: Collection[int], server_name: str) -> None:
        self.phase = Phase.FRAMING
        self.layout: SeedLayout = SEED
        self.client_id = client_id  # also the session id of the replicated framing
        self.commands = commands  # the codes the connection serves
        self.server_name = server_name
        self.user: str | None = None
        self._group_turn = -1

    # -- framing ---------------------------------------------------------------------

    def tell_framing(self, buf: bytes) -> bool:
        """Choose the layout from the first bytes; False while too few have come."""
        if self.phase is not Phase.FRAMING:
            return True
        if vsr.may_become_request(buf):
            return False  # a zero length or a VSR header: wait for its command byte
        self.layout = VSR if vsr.is_request(buf) else SEED
        self.phase = Phase.ANONYMOUS
        return True

    def parse(self, buf: bytes, max_frame_size: int
              ) -> tuple[Sequence[c.Request | vsr.Frame], int]:
        """Every complete request in `buf` and the bytes they used; raises FramingError."""
        if self.layout is VSR:
            return vsr.parse_frames(buf, max_frame_size)
        return c.parse_requests(buf, max_frame_size)

    def framing_failed(self) -> bytes:
        """The connection closes on a framing error: the 2024 layout says why first."""
        self.phase = Phase.CLOSED
        return c.encode_error(ErrorCode.INVALID_COMMAND) if self.layout is SEED else b""

    # -- requests in -------------------------------------------------------------------

    def receive(self, request: c.Request | vsr.Frame) -> Action:
        """What one complete request needs."""
        if isinstance(request, c.Request):
            return self._command(request, request.code, request.payload)
        operation = request.operation
        if operation == vsr.Operation.REGISTER:
            return self._register(request)
        if operation == vsr.Operation.LOGOUT:
            return self._logout(vsr.encode_reply(request))
        code = request.code if operation == vsr.Operation.NON_REPLICATED else \
            vsr.COMMANDS.get(operation)
        if code is None:
            return Reply(self._failure(request, None, IggyError(
                ErrorCode.INVALID_COMMAND, f"operation {operation} code {code} not served")))
        if code in VSR.unsupported:
            return Reply(self._failure(request, code, IggyError(
                ErrorCode.FEATURE_UNAVAILABLE, f"operation {operation} code {code} not served")))
        return self._command(request, code, request.body)

    def _command(self, request: c.Request | vsr.Frame, code: int, payload: memoryview
                 ) -> Action:
        try:
            if code not in self.commands:
                raise IggyError(ErrorCode.INVALID_COMMAND, f"unknown command {code}")
            if self.phase is not Phase.LOGGED_IN and code not in ANONYMOUS_COMMANDS:
                raise IggyError(ErrorCode.UNAUTHENTICATED, "log in first")
            if code == Code.LOGIN_USER:
                return self._login_user(request, c.Reader(payload))
            if code == Code.LOGOUT_USER:
                c.Reader(payload).end()
                return self._logout(self._success(request, code, b""))
        except IggyError as exc:
            return Reply(self._failure(request, code, exc))
        return Execute(request, code, payload)

    def _login_user(self, request: c.Request | vsr.Frame, r: c.Reader) -> Login:
        login = LoginUser.decode(r)  # its version and context are informative only
        r.end()
        self.phase = Phase.AUTHENTICATING
        return Login(request, login.username, login.password, register=False)

    def _register(self, frame: vsr.Frame) -> Action:
        """The login of the replicated framing: versions, credentials, a session."""
        r = c.Reader(frame.body)
        try:
            version = r.u32()
            r.name("sdk name")
            r.name("sdk version")
            username, password = r.name("username"), r.name("password")
            if r.remaining:
                r.take(r.u32())  # the client's context, informative only
            r.end()
        except IggyError:
            return Reply(vsr.encode_eviction(frame.client, vsr.Eviction.MALFORMED_LOGIN))
        if version != vsr.PROTOCOL_VERSION:
            return Reply(vsr.encode_eviction(frame.client, vsr.Eviction.INCOMPATIBLE_PROTOCOL),
                         f"iggy client of protocol {version:#x} refused")
        self.phase = Phase.AUTHENTICATING
        return Login(frame, username, password, register=True)

    def _logout(self, reply: bytes) -> Logout:
        self.user = None
        self.phase = Phase.ANONYMOUS
        return Logout(reply)

    # -- outcomes in ---------------------------------------------------------------------

    def logged_in(self, login: Login, user: str) -> bytes:
        """The broker accepted `login`: the reply."""
        self._expect(Phase.AUTHENTICATING)
        self.user, self.phase = user, Phase.LOGGED_IN
        if not login.register:
            return self._success(login.request, Code.LOGIN_USER, c.U32.pack(user_id(user)))
        session = self.client_id  # nonzero and unique in this process
        body = struct.pack("<IQI", user_id(user), session, vsr.PROTOCOL_VERSION) + \
            c.encode_name(self.server_name)
        assert isinstance(login.request, vsr.Frame)
        return vsr.encode_reply(login.request, vsr.committed(body), commit=session)

    def login_refused(self, login: Login) -> bytes:
        """The broker refused the credentials of `login`; a logged-in user stays so no more."""
        self._expect(Phase.AUTHENTICATING)
        self.phase = Phase.LOGGED_IN if self.user is not None else Phase.ANONYMOUS
        error = IggyError(ErrorCode.INVALID_CREDENTIALS, "invalid credentials")
        if login.register:
            assert isinstance(login.request, vsr.Frame)
            return vsr.encode_eviction(login.request.client, vsr.Eviction.INVALID_CREDENTIALS)
        return self._failure(login.request, Code.LOGIN_USER, error)

    def _expect(self, phase: Phase) -> None:
        if self.phase is not phase:
            raise RuntimeError(f"a login outcome in phase {self.phase.value}")

    def executed(self, command: Execute, body: bytes) -> bytes:
        return self._success(command.request, command.code, body)

    def refused(self, command: Execute, error: IggyError) -> bytes:
        return self._failure(command.request, command.code, error)

    # -- replies -------------------------------------------------------------------------

    @staticmethod
    def _success(request: c.Request | vsr.Frame, code: int, body: bytes) -> bytes:
        if isinstance(request, c.Request):
            return c.encode_response(body)
        framed = vsr.result_framed(request.operation)
        return vsr.encode_reply(request, vsr.committed(body) if framed else body)

    @staticmethod
    def _failure(request: c.Request | vsr.Frame, code: int | None, error: IggyError) -> bytes:
        if isinstance(request, c.Request):
            return c.encode_error(error.code)
        if vsr.result_framed(request.operation):
            return vsr.encode_reply(request, vsr.refused(error.code))
        if code in vsr.LOOKUPS and error.code in vsr.ABSENT:
            return vsr.encode_reply(request)  # an absent thing: None to the SDK
        return vsr.encode_reply(request, status=error.code)

    # -- consumer groups ---------------------------------------------------------------

    def member_partition(self, assigned: Sequence[int] | None, index: int | None) -> int:
        """The partition a group member's poll reads: the one asked for if it is the
        member's, else the member's partitions in turn."""
        if assigned is None:
            raise IggyError(ErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND, "join the group first")
        if not assigned:
            raise IggyError(ErrorCode.PARTITION_NOT_FOUND, "no partition assigned")
        if index is not None and index in assigned:
            return index
        self._group_turn += 1
        return assigned[self._group_turn % len(assigned)]
