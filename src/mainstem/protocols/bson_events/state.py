"""The BSON event protocol's connection state as a pure object: decoded frames and broker
outcomes in, actions out; no asyncio, no sockets.

It holds the CONNECT handshake (version and credential checks, the login itself done by
the broker and fed back), which frames a request must be answered with, and the flow
control of subscriptions (RECEV frames in flight before an ACKEV) and of query results
(QUERYRESULT frames before QUERYACKs). The asyncio connection moves bytes, serves the
requests with the broker and carries out the actions.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from mainstem.protocols.bson_events.codec import Event, Frame, Malformed, Oversized

SUPPORTED_VERSIONS = ("0.", "1.")  # major versions 0 and 1 of the protocol
PUBLISH_FRAMES = ("PUBLISH", "PUB", "EMIT")
UNANSWERED_FRAMES = ("ACKEV", "QUERYACK")  # answered only when they fail
# The frames whose field list in the protocol document names `rID`: only these need one.
# CONNECT, ACKEV, QUERY and QUERYACK have none there, nor have the frames the document
# does not list; their answers echo an rID when one was sent.
RID_FRAMES = frozenset((*PUBLISH_FRAMES, "STARTTX", "COMMITTX", "ABORTTX", "SUBSCRIBE",
                        "UNSUBSCRIBE", "SUBCLOSE"))


class FrameFailed(Exception):
    """A request that gets a failed RESPONSE (the connection stays)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- actions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    kind: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Login:
    """Log in and open the namespace with the broker, then feed `connected` or `refused`."""

    request_id: Any
    username: str
    password: str
    namespace: str
    version: str


@dataclass(frozen=True, slots=True)
class Stage:
    """Stage the PUBLISH just received in this read's batch of appends."""


STAGE = (Stage(),)  # one shared answer: a PUBLISH costs no allocation here


@dataclass(frozen=True, slots=True)
class Serve:
    """A request for the broker; staged publishes go first."""

    frame: Frame


@dataclass(frozen=True, slots=True)
class Flush:
    """Append the staged publishes now: what follows is answered after them."""


FLUSH = Flush()


@dataclass(frozen=True, slots=True)
class Wake:
    """Flow-control credit came back: resume the subscription or query sending."""

    subscription: int | None = None
    query: int | None = None


@dataclass(frozen=True, slots=True)
class StoreOffset:
    """A durable subscription's next position, to remember across connections."""

    request_id: Any  # the ACKEV's, for a failure
    channel: str
    durable_id: str
    position: int


@dataclass(frozen=True, slots=True)
class Close:
    """Drop the connection once what is queued has gone out."""

    reason: str


Action = Send | Login | Stage | Flush | Serve | Wake | StoreOffset | Close


def answer(request_id: Any, body: dict[str, Any]) -> dict[str, Any]:
    """`body` with the request's rID; without one (the request had none) the key is left
    out."""
    if request_id is not None:
        body["rID"] = request_id
    return body


def failure(request_id: Any, code: str, message: str, kind: str = "RESPONSE",
            **fields: Any) -> Send:
    """A failed RESPONSE (or the SUBRESPONSE or QUERYRESPONSE its request is answered with)."""
    return Send(kind, answer(request_id, {"ok": False, "errCode": code, "errMsg": message,
                                          **fields}))


def response_kind(frame_type: str) -> str:
    return _RESPONSE_KINDS.get(frame_type, "RESPONSE")


_RESPONSE_KINDS = {"SUBSCRIBE": "SUBRESPONSE", "QUERY": "QUERYRESPONSE"}


class Phase(enum.Enum):
    AWAIT_CONNECT = "await-connect"
    CONNECTING = "connecting"  # the broker is checking the credentials
    READY = "ready"
    CLOSED = "closed"


# -- flow control ------------------------------------------------------------------------


@dataclass(slots=True)
class SubscriptionFlow:
    """RECEV frames sent and not yet acknowledged, at most `window` of them."""

    sub_id: int
    channel: str
    durable_id: str | None
    window: int
    in_flight: deque[int] = field(default_factory=deque)  # positions sent, not yet acked

    def ack(self, upto: int | None) -> int:
        """ACKEV: the oldest in flight, or all up to and including `upto`; the last position
        acknowledged, -1 for none."""
        in_flight = self.in_flight
        acked = -1
        if upto is None:
            if in_flight:
                acked = in_flight.popleft()
        else:
            while in_flight and in_flight[0] <= upto:
                acked = in_flight.popleft()
        return acked


@dataclass(slots=True)
class QueryFlow:
    """QUERYRESULT frames sent and not yet acknowledged, at most `window` of them."""

    window: int
    in_flight: int = 0

    @property
    def full(self) -> bool:
        return self.in_flight >= self.window


class EventsState:
    """The states and rules of one BSON event protocol connection."""

    def __init__(self, max_unacked_events: int, max_unacked_results: int) -> None:
        self.phase = Phase.AWAIT_CONNECT
        self.user: str | None = None
        self.namespace = "/"
        self.max_unacked_events = max_unacked_events
        self.max_unacked_results = max_unacked_results
        self.subscriptions: dict[int, SubscriptionFlow] = {}
        self.queries: dict[int, QueryFlow] = {}
        self._sub_ids = itertools.count(1)

    # -- frames in -------------------------------------------------------------------

    def receive(self, event: Event, max_frame_size: int) -> tuple[Action, ...]:
        """One decoded frame (or a codec's complaint about one)."""
        if (type(event) is Frame and event.type in PUBLISH_FRAMES
                and self.phase is Phase.READY and event.body.get("rID") is not None):
            return STAGE  # the hot path first
        if self.phase is Phase.CLOSED:
            return ()
        if isinstance(event, Oversized):
            return (failure(None, "EVENT_TOO_LARGE", f"a frame of {event.size} bytes is over "
                                                     f"the limit of {max_frame_size}"),)
        if isinstance(event, Malformed):
            return (failure(event.request_id, "INVALID_FRAME", event.reason),)
        ready = self.phase is Phase.READY
        if not ready and event.type != "CONNECT":
            return self._close(f"bson frame {event.type} before CONNECT")
        if event.type in UNANSWERED_FRAMES:
            return (FLUSH, *self._credit(event))
        if event.type in RID_FRAMES and event.body.get("rID") is None:
            return (failure(None, "INVALID_FRAME", f"{event.type} has no 'rID'",
                            response_kind(event.type)),)
        if not ready:
            return self._connect(event.body)
        return (FLUSH, Serve(event))

    def _close(self, reason: str) -> tuple[Action, ...]:
        self.phase = Phase.CLOSED
        return (Close(reason),)

    # -- connecting -------------------------------------------------------------------

    def _connect(self, body: dict[str, Any]) -> tuple[Action, ...]:
        request_id = body.get("rID")
        version = body.get("version")
        if not isinstance(version, str) or not version.startswith(SUPPORTED_VERSIONS):
            return (failure(request_id, "UNSUPPORTED_VERSION",
                            f"unsupported protocol version {version!r}: "
                            "this server speaks 0.x, 1.x"),
                    *self._close(f"unsupported version {version!r}"))
        username, password = body.get("username"), body.get("password")
        namespace = body.get("namespace", "/")
        if not isinstance(username, str) or not isinstance(password, str):
            return self.refused(request_id, "AUTHENTICATION_FAILED",
                                "username and password are required")
        if not isinstance(namespace, str):
            return self.refused(request_id, "INVALID_ARGUMENT", "namespace must be a string")
        self.phase = Phase.CONNECTING
        return (Login(request_id, username, password, namespace, version),)

    def connected(self, request_id: Any, user: str, namespace: str) -> tuple[Action, ...]:
        """The broker accepted the CONNECT of `Login`."""
        if self.phase is not Phase.CONNECTING:
            raise RuntimeError(f"a login outcome in phase {self.phase.value}")
        self.phase = Phase.READY
        self.user, self.namespace = user, namespace
        return (Send("RESPONSE", answer(request_id, {"ok": True})),)

    def refused(self, request_id: Any, code: str, message: str) -> tuple[Action, ...]:
        """The CONNECT is refused: answer it and close."""
        return (failure(request_id, code, message),
                *self._close(f"bson connect refused: {message}"))

    # -- subscriptions -------------------------------------------------------------------

    def subscribe(self, channel: str, durable_id: str | None) -> SubscriptionFlow:
        """A new subscription's flow control, with its id."""
        flow = SubscriptionFlow(next(self._sub_ids), channel, durable_id,
                                self.max_unacked_events)
        self.subscriptions[flow.sub_id] = flow
        return flow

    def subscription(self, body: dict[str, Any]) -> SubscriptionFlow:
        sub_id = body.get("subID")
        flow = self.subscriptions.get(sub_id) if isinstance(sub_id, int) else None
        if flow is None:
            raise FrameFailed("NO_SUCH_SUBSCRIPTION", f"no subscription {sub_id!r}")
        return flow

    def end_subscription(self, sub_id: int) -> None:
        self.subscriptions.pop(sub_id, None)

    def _credit(self, event: Frame) -> tuple[Action, ...]:
        try:
            if event.type == "ACKEV":
                return self._ackev(event.body)
            return self._query_ack(event.body)
        except FrameFailed as exc:
            return (failure(event.body.get("rID"), exc.code, exc.message),)

    def _ackev(self, body: dict[str, Any]) -> tuple[Action, ...]:
        """Acknowledge events of a subscription (no response): the oldest one in flight,
        or with mainstem's optional ``pos`` all of them up to and including that position."""
        flow = self.subscription(body)
        upto = body.get("pos")
        if upto is not None and (not isinstance(upto, int) or isinstance(upto, bool)):
            raise FrameFailed("INVALID_FRAME", "'pos' must be an int64")
        acked = flow.ack(upto)
        wake = Wake(subscription=flow.sub_id)
        if flow.durable_id is not None and acked >= 0:
            return (wake, StoreOffset(body.get("rID"), flow.channel, flow.durable_id,
                                      acked + 1))
        return (wake,)

    # -- queries -----------------------------------------------------------------------

    def open_query(self, query_id: Any) -> QueryFlow:
        if not isinstance(query_id, int) or query_id in self.queries:
            raise FrameFailed("INVALID_FRAME", "'queryID' must be a new integer")
        flow = self.queries[query_id] = QueryFlow(self.max_unacked_results)
        return flow

    def end_query(self, query_id: int) -> None:
        self.queries.pop(query_id, None)

    def _query_ack(self, body: dict[str, Any]) -> tuple[Action, ...]:
        query_id = body.get("queryID")
        if not isinstance(query_id, int):
            raise FrameFailed("INVALID_FRAME", "'queryID' must be an integer")
        flow = self.queries.get(query_id)
        if flow is None:
            return ()
        flow.in_flight = max(flow.in_flight - 1, 0)
        return (Wake(query=query_id),)
