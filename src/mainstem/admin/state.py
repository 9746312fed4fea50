"""What every management API handler shares: the broker it looks at, the sampled
counters behind message_stats rates, and the request helpers."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from mainstem.admin.history import Sample, SampleHistory, add_lengths
from mainstem.admin.queue_activity import QueueActivity, QueueLook
from mainstem.admin.resources import ResourceProvider, providers_for, stream_messages
from mainstem.admin.stats import RateSampler
from mainstem.broker.alarms import AlarmMonitor
from mainstem.broker.auth import User
from mainstem.broker.errors import InvalidArgument
from mainstem.broker.message_stats import MessageStats
from mainstem.protocols.identity import DEFAULT_IDENTITY, ServerIdentity
from mainstem.protocols.registry import Connection, ConnectionRegistry, socket_traffic

if TYPE_CHECKING:
    from mainstem.broker.amqp.queues.queue import ClassicQueue
    from mainstem.broker.core import BrokerCore
    from mainstem.broker.streams import Stream

OVERVIEW = ("overview",)
CHURN = ("churn",)


@dataclass
class AdminState:
    core: BrokerCore
    connections: ConnectionRegistry
    monitor: AlarmMonitor | None
    listeners: dict[str, int]  # listener name -> port, as bound
    hosts: dict[str, str]  # listener name -> bind address
    certfile: Path | None = None  # the TLS listeners' certificate chain
    identity: ServerIdentity = DEFAULT_IDENTITY  # the product, version and cluster name shown
    # Called with the transport of a connection whose request logged in: the server then
    # no longer counts it among the connections not logged in.
    on_login: Callable[[Hashable], None] | None = None
    # Why the node takes no clients yet (a cluster node waiting for etcd); None: it does.
    not_ready: Callable[[], str | None] = lambda: None
    # The effective configuration, secrets redacted (`mainstem ctl environment`)
    environment: Mapping[str, Any] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)  # for the node's uptime
    rates: RateSampler = field(default_factory=RateSampler)
    activity: QueueActivity = field(default_factory=QueueActivity)
    history: SampleHistory = field(default_factory=SampleHistory)  # the overview's charts
    started: float = field(default_factory=time.monotonic)  # when: the node's uptime
    providers: list[ResourceProvider] = field(init=False)

    def __post_init__(self) -> None:
        self.providers = providers_for(self.core)

    def sample(self) -> None:
        """Every live object's counters, once a second, for the rates of message_stats,
        every AMQP queue's activity, and the overview's history."""
        samples: dict[Hashable, Mapping[str, int]] = {}
        looks: dict[Hashable, QueueLook] = {}
        lengths: dict[str, dict[str, int]] = {}  # per vhost, as the overview's queue_totals
        for connection in self.connections.list():
            samples[connection_key(connection)] = traffic_counts(connection)
            for number, channel in list(connection.ctx.channels.items()):
                samples[channel_key(connection, number)] = channel.stats.counts()
        for vhost in self.core.queues.vhosts.values():
            ready = unacked = 0
            for queue in vhost.queues.values():
                key = ("queue", vhost.name, queue.name)
                samples[key] = queue.stats.counts()
                looks[key] = QueueLook(samples[key], deliverable(queue))
                ready += queue.ready_count
                unacked += queue.unacked_count
            add_lengths(lengths, vhost.name, ready, unacked)
            for name, stats in list(vhost.graph.stats.items()):
                samples[("exchange", vhost.name, name)] = stats.counts()
        for stream in self.core.streams.list():
            samples[("queue", stream.namespace, stream.name)] = stream_counts(self.core, stream)
            add_lengths(lengths, stream.namespace, stream_messages(stream), 0)
        samples[OVERVIEW] = self.totals()
        samples[CHURN] = churn_counts(self.core)
        self.rates.record(time.monotonic(), samples)
        self.activity.record(time.time(), looks)
        self.history.record(Sample(time.time(), samples[OVERVIEW], lengths))

    def totals(self) -> dict[str, int]:
        """The overview's counters: every AMQP channel's, closed ones included, and the
        messages and bytes stored in streams by every protocol (mainstem's own)."""
        totals = MessageStats()
        totals.add(self.core.closed_channel_stats)
        for connection in self.connections.list():
            for channel in list(connection.ctx.channels.values()):
                totals.add(channel.stats)
        partitions = [p for s in self.core.streams.list() for p in s.partitions]
        return {**totals.counts(),
                "stream_publish": sum(p.committed_offset for p in partitions),
                "stream_publish_bytes": sum(p.committed_byte for p in partitions)}

    def message_stats(self, key: Hashable, counts: Mapping[str, int]) -> dict[str, Any]:
        return self.rates.detailed(key, counts)


def deliverable(queue: ClassicQueue) -> bool:
    """Whether a message arriving now would go to a consumer at once."""
    consumers = queue.consumers
    return bool(consumers) and (not queue.ready_count or any(c.has_credit() for c in consumers))


def churn_counts(core: BrokerCore) -> dict[str, int]:
    """The node's object churn under the names of RabbitMQ's `churn_rates`."""
    counters = core.counters
    return {"connection_created": counters.connections_opened,
            "connection_closed": counters.connections_closed,
            "channel_created": counters.channels_opened,
            "channel_closed": counters.channels_closed,
            "queue_declared": counters.queues_declared,
            "queue_created": counters.queues_created,
            "queue_deleted": counters.queues_deleted}


def traffic_counts(connection: Connection) -> dict[str, int]:
    traffic = socket_traffic(connection.ctx.writer)
    return {"recv_oct": traffic.get("bytes_in", 0), "send_oct": traffic.get("bytes_out", 0)}


def connection_key(connection: Connection) -> tuple[str, int]:
    return ("connection", connection.conn_id)


def channel_key(connection: Connection, number: int) -> tuple[str, int, int]:
    return ("channel", connection.conn_id, number)


STATE = web.AppKey("state", AdminState)
USER = web.RequestKey("user", User)  # the request's authenticated User


def state_of(request: web.Request) -> AdminState:
    return request.app[STATE]


def vhost_of(request: web.Request) -> str | None:
    return request.match_info.get("vhost")


def stream_of(request: web.Request) -> Stream:
    """The stream a `/{vhost}/{name}` route names (NotFound when there is none)."""
    return state_of(request).core.streams.get(request.match_info["vhost"],
                                            request.match_info["name"])


async def read_body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except (ValueError, RecursionError):  # RecursionError: nested thousands deep
        raise InvalidArgument("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise InvalidArgument("the request body must be a JSON object")
    return body


def no_content() -> web.Response:
    return web.Response(status=204)



def add_message_stats(state: AdminState, kind: str, row: dict[str, Any]) -> None:
    """A queue's, stream's or exchange's counters and rates, and an AMQP queue's activity,
    as RabbitMQ shows them."""
    key = (kind, row["vhost"], row["name"])
    counts = object_counts(state.core, kind, row["vhost"], row["name"])
    if counts is not None:
        row["message_stats"] = state.message_stats(key, counts)
    capacity = state.activity.consumer_capacity(key)
    if capacity is not None:
        row["consumer_capacity"] = row["consumer_utilisation"] = round(capacity, 2)
    idle_since = state.activity.idle_since(key)
    if idle_since is not None:
        row["idle_since"] = rfc3339(idle_since)


def rfc3339(timestamp: float) -> str:
    """A time as RabbitMQ 3.10+ writes `idle_since`: 2026-11-29T06:40:00.123+00:00."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds")


def object_counts(core: BrokerCore, kind: str, vhost: str, name: str
                  ) -> Mapping[str, int] | None:
    host = core.queues.vhosts.get(vhost)
    if kind == "exchange":
        stats = None if host is None else host.graph.stats.get(name)
        return None if stats is None else stats.counts()
    queue = None if host is None else host.queues.get(name)
    if queue is not None:
        return queue.stats.counts()
    stream = core.streams.find(vhost, name)
    return None if stream is None else stream_counts(core, stream)


def stream_counts(core: BrokerCore, stream: Stream) -> dict[str, int]:
    """A stream's counters: messages ever appended (its committed offsets) and delivered
    (as every protocol counts them), so nothing is counted per message for it."""
    return {"publish": sum(p.committed_offset for p in stream.partitions),
            "deliver_get": core.delivery_stats.delivered_messages(stream.namespace,
                                                                  stream.name)}
