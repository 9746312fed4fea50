"""A connection's subscriptions and their flow rules as a pure object.

`Subscriptions` decides what Subscribe, Credit, Unsubscribe and the single active
consumer exchange (the group's activate/deactivate, ConsumerUpdate and its reply)
mean for delivery: which subscription ids exist, when a subscription delivers and from
where, what credit goes where. It answers with actions; the connection carries them
out on the stream service, whose reader counts the credit one chunk at a time. No I/O,
no event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream import responses as r
from mainstem.protocols.rabbit_stream.constants import Key, OffsetType, ResponseCode
from mainstem.protocols.rabbit_stream.state import Correlations, Send


@dataclass(frozen=True, slots=True)
class StartReading:
    """Open a reader on `stream` for this subscription, with its first credit."""

    subscription_id: int
    stream: str
    credit: int
    filter_values: list[str]
    match_unfiltered: bool


@dataclass(frozen=True, slots=True)
class JoinGroup:
    """Join the single-active-consumer group `name` (by position, for a super stream);
    the group's activate/deactivate go to Subscriptions.activation()."""

    subscription_id: int
    name: str
    super_stream: str | None


@dataclass(frozen=True, slots=True)
class StartDelivery:
    """Seek the reader to `offset_spec` and ship chunks as credit allows."""

    subscription_id: int
    offset_spec: f.OffsetSpec


@dataclass(frozen=True, slots=True)
class StopDelivery:
    subscription_id: int


@dataclass(frozen=True, slots=True)
class Grant:
    """Add `credit` chunks to the subscription's reader."""

    subscription_id: int
    credit: int


@dataclass(frozen=True, slots=True)
class EndSubscription:
    """Release the reader, its delivery and its group membership."""

    subscription_id: int


@dataclass(frozen=True, slots=True)
class SteppedDown:
    """The client answered its deactivation: tell the group, which activates the next."""

    subscription_id: int


@dataclass(frozen=True, slots=True)
class AwaitReply:
    """A ConsumerUpdate went out: drop the connection if `correlation_id` is still
    unanswered after the request timeout (Subscriptions.awaiting says)."""

    correlation_id: int


FlowAction = (Send | StartReading | JoinGroup | StartDelivery | StopDelivery | Grant
              | EndSubscription | SteppedDown | AwaitReply)


@dataclass(eq=False, slots=True)
class Flow:
    """What the rules need to know of one subscription."""

    subscription_id: int
    start: f.OffsetSpec
    single_active: bool
    active: bool = False  # single active consumer: the group chose this one
    delivering: bool = False


@dataclass(slots=True)
class Subscriptions:
    correlations: Correlations = field(default_factory=Correlations)
    flows: dict[int, Flow] = field(default_factory=dict)
    # ConsumerUpdate requests awaiting the client's reply, by correlation id.
    _asked: dict[int, Flow] = field(default_factory=dict)

    def __contains__(self, subscription_id: int) -> bool:
        return subscription_id in self.flows

    def subscribe(self, frame: f.Subscribe) -> list[FlowAction]:
        """A Subscribe the broker allowed (the stream exists, the user may read it)."""
        if frame.subscription_id in self.flows:
            return [Send(f.Response(Key.SUBSCRIBE, frame.correlation_id,
                                    ResponseCode.SUBSCRIPTION_ID_ALREADY_EXISTS))]
        properties = frame.properties
        single_active = properties.get("single-active-consumer") == "true"
        flow = Flow(frame.subscription_id, frame.offset_spec, single_active)
        self.flows[frame.subscription_id] = flow
        values, match_unfiltered = subscription_filter(properties)
        actions: list[FlowAction] = [
            Send(f.Response(Key.SUBSCRIBE, frame.correlation_id, ResponseCode.OK)),
            StartReading(frame.subscription_id, frame.stream, frame.credit, values,
                         match_unfiltered)]
        if single_active:
            actions.append(JoinGroup(frame.subscription_id, properties.get("name", ""),
                                     properties.get("super-stream")))
        else:
            flow.delivering = True
            actions.append(StartDelivery(frame.subscription_id, frame.offset_spec))
        return actions

    def credit(self, frame: f.Credit) -> list[FlowAction]:
        if frame.subscription_id not in self.flows:
            return [Send(r.CreditResponse(ResponseCode.SUBSCRIPTION_ID_DOES_NOT_EXIST,
                                          frame.subscription_id))]
        return [Grant(frame.subscription_id, frame.credit)]

    def unsubscribe(self, frame: f.Unsubscribe) -> list[FlowAction]:
        if frame.subscription_id not in self.flows:
            return [Send(f.Response(Key.UNSUBSCRIBE, frame.correlation_id,
                                    ResponseCode.SUBSCRIPTION_ID_DOES_NOT_EXIST))]
        return [*self.end(frame.subscription_id),
                Send(f.Response(Key.UNSUBSCRIBE, frame.correlation_id, ResponseCode.OK))]

    def end(self, subscription_id: int) -> list[FlowAction]:
        """The subscription ends (unsubscribed, its stream deleted, the connection gone)."""
        flow = self.flows.pop(subscription_id, None)
        if flow is None:
            return []
        for correlation_id in [c for c, asked in self._asked.items() if asked is flow]:
            del self._asked[correlation_id]
        return [EndSubscription(subscription_id)]

    # -- single active consumer ---------------------------------------------------

    def activation(self, subscription_id: int, active: bool) -> list[FlowAction]:
        """The group made this subscription its active consumer, or stopped doing so:
        an inactive one stops at once; the client is asked where to go on, or told to
        step down."""
        flow = self.flows.get(subscription_id)
        if flow is None or not flow.single_active:
            return []
        flow.active = active
        actions: list[FlowAction] = []
        if not active and flow.delivering:
            flow.delivering = False
            actions.append(StopDelivery(subscription_id))
        correlation_id = self.correlations.next()
        self._asked[correlation_id] = flow
        actions += [Send(r.ConsumerUpdate(correlation_id, subscription_id, active)),
                    AwaitReply(correlation_id)]
        return actions

    def awaiting(self, correlation_id: int) -> bool:
        """Is this ConsumerUpdate still unanswered?"""
        return correlation_id in self._asked

    def consumer_update_reply(self, frame: f.ConsumerUpdateReply) -> list[FlowAction]:
        """The client said where the active consumer starts (NONE: where it subscribed),
        or that an inactive one stepped down."""
        flow = self._asked.pop(frame.correlation_id, None)
        if flow is None:
            return []
        if not flow.active:
            return [SteppedDown(flow.subscription_id)]
        if flow.delivering:
            return []
        spec = frame.offset_spec
        if spec.type == OffsetType.NONE:
            spec = flow.start
        flow.delivering = True
        return [StartDelivery(flow.subscription_id, spec)]


def subscription_filter(properties: dict[str, str]) -> tuple[list[str], bool]:
    """The filter values of a subscription's `filter.N` properties, as RabbitMQ 3.13+
    reads them, and `match-unfiltered` (also chunks of messages without a value)."""
    values = [value for key, value in properties.items() if key.startswith("filter.")]
    return values, properties.get("match-unfiltered") == "true"
