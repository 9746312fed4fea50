"""One namespace seen as an AMQP 0-9-1 virtual host: exchanges, bindings and queues.

Classic queues live here; a stream queue is a stream of the namespace (so one declared by
the stream protocol is a queue here too, and one declared here is a stream there). In a
cluster, quorum queues are replicated (see `quorum`): live on their journal's leader.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mainstem.broker.amqp.queues.arguments import (
    QUORUM,
    STREAM,
    QueueArguments,
    assert_equivalent_arguments,
    parse_queue_arguments,
)
from mainstem.broker.amqp.queues.journal import QueueJournal, Replay
from mainstem.broker.amqp.queues.message import QueueMessage, properties_codec
from mainstem.broker.amqp.queues.paging import MemoryBound
from mainstem.broker.amqp.queues.policy_settings import with_policy
from mainstem.broker.amqp.queues.queue import ClassicQueue
from mainstem.broker.amqp.queues.quorum import (
    REPLICATED,
    REPLICATED_QUEUES,
    QuorumQueue,
    QuorumStandby,
)
from mainstem.broker.amqp.queues.remote import QueueRelay, RemoteQueue
from mainstem.broker.amqp.routing import Binding, ExchangeGraph
from mainstem.broker.catalog import Catalog
from mainstem.broker.cluster_view import QueueReplication
from mainstem.broker.counters import BrokerCounters
from mainstem.broker.errors import (
    AccessRefused,
    AlreadyExists,
    NotFound,
    PreconditionFailed,
)
from mainstem.broker.limits import Limits
from mainstem.broker.message_stats import MessageStats
from mainstem.broker.policies import EXCHANGE
from mainstem.broker.streams import Stream, StreamStore

log = logging.getLogger("mainstem.amqp")

# What 0-9-1 -> stream conversion needs: (message) -> AMQP 1.0 record bytes.
StreamEncoder = Callable[[QueueMessage], bytes]


# The owner of an exclusive queue whose connection is on another node.
ELSEWHERE = object()


class ResourceLocked(AccessRefused):
    """An exclusive queue of another connection (AMQP 405)."""


@dataclass
class PublishOutcome:
    routed: bool = False
    rejected: bool = False  # a queue refused it (x-overflow reject-publish)
    waits: list[asyncio.Future[None]] = field(default_factory=list)
    # Queues whose pager is behind: the publisher waits for these before sending more.
    backlogs: list[asyncio.Future[None]] = field(default_factory=list)


class Topology(Protocol):
    """What a vhost tells the cluster of its changes (`shared_topology.SharedTopology`)."""

    def changed(self, vhost: VirtualHost) -> None: ...

    async def written(self, vhost: str) -> None: ...


class Manager(Protocol):
    """What a vhost needs of the manager of every vhost (`manager.QueueManager`)."""

    catalog: Catalog
    streams: StreamStore
    counters: BrokerCounters
    limits: Limits | None
    memory: MemoryBound
    spill_directory: Path
    replication: QueueReplication | None
    relay: QueueRelay | None
    topology: Topology | None

    def open_journal(self, vhost: str, queue: str) -> tuple[QueueJournal, Replay]: ...

    def save(self) -> None: ...


class VirtualHost:
    def __init__(self, name: str, manager: Manager) -> None:
        self.name = name
        self.manager = manager
        self.queues: dict[str, ClassicQueue] = {}
        self.graph = ExchangeGraph(name)

    @property
    def graph(self) -> ExchangeGraph:
        return self._graph

    @graph.setter
    def graph(self, graph: ExchangeGraph) -> None:
        graph.policy_alternate = self._policy_alternate
        self._graph = graph

    def _policy_alternate(self, exchange: str) -> str | None:
        """An exchange's alternate-exchange set by policy (an argument goes first)."""
        value = self.manager.catalog.policies.applied(self.name, exchange, EXCHANGE) \
            .definition.get("alternate-exchange")
        return value if isinstance(value, str) else None

    # -- policies ----------------------------------------------------------------

    def apply_policy(self, queue: ClassicQueue) -> None:
        """The queue runs with its arguments and the policies that match it now."""
        applied = self.manager.catalog.policies.applied(self.name, queue.name,
                                                        queue.declared.queue_type)
        queue.reconfigure(with_policy(queue.declared, queue.arguments, applied.definition),
                          applied)

    def policies_changed(self) -> None:
        """A policy of this vhost was set or cleared: each queue runs with what applies."""
        for queue in list(self.queues.values()):
            if not queue.deleted:
                self.apply_policy(queue)

    def describe(self, kind: str, name: str) -> str:
        return f"{kind} '{name}' in vhost '{self.name}'"

    # -- queues ----------------------------------------------------------------

    def stream(self, name: str) -> Stream | None:
        stream = self.manager.streams.find(self.name, name)
        if stream is not None and not self.graph.has_queue(name):
            self.graph.add_queue(name)  # made by another protocol since we last looked
        return stream

    def lookup(self, name: str, owner: object | None) -> ClassicQueue | Stream:
        """The queue called `name`, checked for exclusive ownership."""
        queue = self.queues.get(name)
        if queue is not None:
            if queue.owner is not None and queue.owner is not owner:
                raise self._locked(name)
            if type(queue) is RemoteQueue and queue.home() is None:
                raise NotFound(f"home node '{queue.home_node}' of durable "
                               f"{self.describe('queue', name)} is down or inaccessible")
            return queue
        stream = self.stream(name)
        if stream is None:
            raise NotFound(f"no {self.describe('queue', name)}")
        return stream

    def _locked(self, name: str) -> ResourceLocked:
        return ResourceLocked(
            f"cannot obtain exclusive access to locked {self.describe('queue', name)}."
            " It could be originally declared on another connection or the exclusive"
            " property value does not match that of the original declaration.")

    def declare_queue(self, name: str, *, durable: bool, exclusive: bool, auto_delete: bool,
                      arguments: Mapping[str, Any], owner: object) -> ClassicQueue | Stream:
        existing = self.queues.get(name) or self.stream(name)
        if existing is None and not (exclusive or auto_delete or not durable):
            arguments = self._typed(arguments)
        settings = parse_queue_arguments(name, self.name, arguments)
        counters = self.manager.counters
        counters.queues_declared += 1
        if existing is not None:
            found = self.lookup(name, owner)
            self._assert_equivalent(found, durable, exclusive, auto_delete, arguments)
            if isinstance(found, ClassicQueue):
                found.touch()
            return found
        if self.manager.limits is not None:
            self.manager.limits.check_queue(self.name, name)
        if settings.queue_type == STREAM:
            stream = self._declare_stream(name, durable, exclusive, auto_delete, arguments)
            counters.queues_created += 1
            return stream
        replication = self.manager.replication
        if settings.queue_type == QUORUM and replication is not None:
            self._refuse_properties(name, durable, exclusive, auto_delete)
            standby = self.add_standby(name, dict(arguments))
            if isinstance(standby, QuorumStandby):
                standby.placing = replication.create_quorum(self.name, name, dict(arguments))
            counters.queues_created += 1
            return standby
        queue = self._new_queue(name, durable, auto_delete, owner if exclusive else None,
                                dict(arguments), settings)
        counters.queues_created += 1
        self.changed(durable=durable)
        return queue

    def _typed(self, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        """A new durable, shared queue declared without x-queue-type gets its vhost's
        default queue type (RabbitMQ 3.11+; an exclusive, auto-delete or transient one stays
        classic, as there); a redeclaration without one matches any type, so is left be."""
        if "x-queue-type" in arguments:
            return arguments
        record = self.manager.catalog.get_namespace(self.name)
        default = None if record is None else record.metadata.default_queue_type
        return arguments if default is None else {**arguments, "x-queue-type": default}

    async def placed(self, queue: ClassicQueue | Stream) -> ClassicQueue | Stream:
        """A queue just declared, once usable: a quorum queue of a cluster once the
        cluster recorded it (and made it live here if this node leads it, its journal
        replayed)."""
        if isinstance(queue, QuorumStandby) and queue.placing is not None:
            await queue.placing
            queue = self.queues.get(queue.name, queue)
        if isinstance(queue, QuorumQueue) and queue.replaying is not None:
            await asyncio.shield(queue.replaying)  # its counts are the replay's
        return queue

    def _refuse_properties(self, name: str, durable: bool, exclusive: bool,
                           auto_delete: bool) -> None:
        """Replicated queues (streams, quorum queues of a cluster) are durable and shared."""
        refused = "exclusive" if exclusive else "auto-delete" if auto_delete else \
            None if durable else "non-durable"
        if refused is not None:
            raise PreconditionFailed(
                f"invalid property '{refused}' for {self.describe('queue', name)}")

    def _declare_stream(self, name: str, durable: bool, exclusive: bool, auto_delete: bool,
                        arguments: Mapping[str, Any]) -> Stream:
        self._refuse_properties(name, durable, exclusive, auto_delete)
        stream_args = {k: v for k, v in arguments.items() if k != "x-queue-type"}
        try:
            stream = self.manager.streams.create(self.name, name, 1, stream_args)
        except AlreadyExists as exc:
            raise PreconditionFailed(exc.message) from None
        self.graph.add_queue(name)
        return stream

    def _new_queue(self, name: str, durable: bool, auto_delete: bool, owner: object | None,
                   arguments: dict[str, Any], settings: QueueArguments,
                   journal: QueueJournal | None = None,
                   kind: type[ClassicQueue] = ClassicQueue) -> ClassicQueue:
        if durable and journal is None and kind is ClassicQueue:
            journal, _ = self.manager.open_journal(self.name, name)
        queue = kind(name, durable=durable, auto_delete=auto_delete, owner=owner,
                             arguments=arguments, settings=settings, journal=journal,
                             dead_letter=self.dead_letter, on_unused=self._unused,
                             memory=settings.memory_bound(self.manager.memory),
                             spill_root=self.manager.spill_directory)
        if isinstance(queue, RemoteQueue):  # it reaches its home through the cluster's relay
            queue.vhost, queue.relay_of = self.name, lambda: self.manager.relay
        self.queues[name] = queue
        self.graph.add_queue(name, durable=durable)
        self.apply_policy(queue)
        return queue

    def restore_queue(self, record: dict[str, Any]) -> None:
        name = record["name"]
        if record["arguments"].get(REPLICATED):  # the cluster says where it is live
            self.add_standby(name, {k: v for k, v in record["arguments"].items()
                                    if k != REPLICATED}, save=False)
            return
        settings = parse_queue_arguments(name, self.name, record["arguments"])
        journal, replay = self.manager.open_journal(self.name, name)
        queue = self._new_queue(name, True, record["auto_delete"], None, record["arguments"],
                                settings, journal)
        queue.restore(replay)

    def _assert_equivalent(self, found: ClassicQueue | Stream, durable: bool, exclusive: bool,
                           auto_delete: bool, arguments: Mapping[str, Any]) -> None:
        if isinstance(found, ClassicQueue):
            current = {"durable": found.durable, "exclusive": found.owner is not None,
                       "auto_delete": found.auto_delete}
            current_args = found.arguments
        else:
            current = {"durable": True, "exclusive": False, "auto_delete": False}
            current_args = {"x-queue-type": STREAM}
            arguments = {k: v for k, v in arguments.items() if k == "x-queue-type"}
        if current["exclusive"] != exclusive:  # RabbitMQ checks the owner first: 405
            raise self._locked(found.name)
        requested = {"durable": durable, "auto_delete": auto_delete}
        for key, value in requested.items():
            if current[key] != value:
                raise PreconditionFailed(
                    f"inequivalent arg '{key}' for {self.describe('queue', found.name)}: "
                    f"received '{str(value).lower()}' but current is "
                    f"'{str(current[key]).lower()}'")
        assert_equivalent_arguments(found.name, self.name, current_args, arguments)

    async def delete_queue(self, name: str, *, owner: object | None, if_unused: bool = False,
                           if_empty: bool = False) -> int:
        """Delete a queue; returns how many ready messages it held. A missing one is fine."""
        try:
            queue = self.lookup(name, owner)
        except NotFound:
            return 0
        if isinstance(queue, Stream):
            await self.manager.streams.delete(self.name, name)
            self.graph.remove_queue(name)
            self.manager.counters.queues_deleted += 1
            return 0
        if if_unused and queue.consumer_count:
            raise PreconditionFailed(f"{self.describe('queue', name)} in use")
        if if_empty and queue.ready_count:
            raise PreconditionFailed(f"{self.describe('queue', name)} not empty")
        return self.remove_queue(queue)

    def remove_queue(self, queue: ClassicQueue, *, everywhere: bool = True) -> int:
        """Delete a queue here (and, for a replicated one, `everywhere` in the cluster)."""
        count = queue.ready_count
        queue.deleted = True
        self.manager.counters.queues_deleted += 1
        queue.stop_timers()
        self.queues.pop(queue.name, None)
        self.graph.remove_queue(queue.name)
        for consumer in list(queue.consumers):
            consumer.cancelled_by_server()
        queue.consumers.clear()
        queue.delete_storage()
        replication = self.manager.replication
        if everywhere and replication is not None and isinstance(queue, REPLICATED_QUEUES):
            replication.delete_quorum(self.name, queue.name)
        self.changed(durable=queue.durable)
        return count

    # -- replicated quorum queues: what the cluster tells this vhost -----------------

    def add_standby(self, name: str, arguments: dict[str, Any], *,
                    save: bool = True) -> ClassicQueue:
        """A quorum queue the cluster has (declared here or on another node): known here,
        not live until this node leads its journal. One known already stays as it is."""
        known = self.queues.get(name)
        if known is not None:
            return known
        settings = parse_queue_arguments(name, self.name, arguments)
        standby = self._new_queue(name, True, False, None, arguments, settings,
                                  kind=QuorumStandby)
        assert isinstance(standby, QuorumStandby)
        standby.home = lambda: self._quorum_leader(name)
        if save:
            self.manager.save()
        return standby

    def add_remote(self, name: str, durable: bool, auto_delete: bool, exclusive: bool,
                   arguments: dict[str, Any]) -> RemoteQueue:
        """A classic queue whose home is another node (see `shared_topology`); an
        exclusive one belongs to a connection there, so every connection here is refused
        it (as RabbitMQ refuses it on every other connection) but may publish to it."""
        settings = parse_queue_arguments(name, self.name, arguments)
        owner = ELSEWHERE if exclusive else None
        remote = self._new_queue(name, durable, auto_delete, owner, arguments, settings,
                                 kind=RemoteQueue)
        assert isinstance(remote, RemoteQueue)
        return remote

    def _quorum_leader(self, name: str) -> str | None:
        replication = self.manager.replication
        return None if replication is None else replication.quorum_leader(self.name, name)

    def go_live(self, name: str, journal: QueueJournal) -> QuorumQueue | None:
        """This node leads the quorum queue's journal: the queue, live here, to be filled
        by its journal's replay (`QuorumQueue.replay`); None if it was deleted meanwhile."""
        standby = self.queues.get(name)
        if not isinstance(standby, QuorumStandby):
            return None
        queue = self._new_queue(name, True, False, None, standby.arguments, standby.declared,
                                journal, kind=QuorumQueue)
        assert isinstance(queue, QuorumQueue)
        return queue

    def stand_by(self, name: str) -> None:
        """This node no longer leads the quorum queue's journal: its consumers here are
        cancelled, and the queue waits as a standby."""
        live = self.queues.get(name)
        if not isinstance(live, QuorumQueue):
            return
        live.step_down()
        del self.queues[name]
        self.add_standby(name, live.arguments, save=False)

    def drop_replicated(self, name: str) -> None:
        """The cluster deleted a quorum queue (through another node)."""
        queue = self.queues.get(name)
        if isinstance(queue, REPLICATED_QUEUES):
            self.remove_queue(queue, everywhere=False)

    def _unused(self, queue: ClassicQueue) -> None:
        if not queue.deleted and not queue.consumers:
            self.remove_queue(queue)

    def connection_closed(self, owner: object) -> None:
        """Exclusive queues go with the connection that declared them."""
        for queue in [q for q in self.queues.values() if q.owner is owner]:
            self.remove_queue(queue)

    # -- exchanges and bindings ----------------------------------------------------

    def bind(self, binding: Binding) -> None:
        if binding.destination_kind == "queue":
            self.lookup_for_binding(binding.destination)
        self.graph.bind(binding)
        self.changed(durable=True)

    def unbind(self, binding: Binding, owner: object | None) -> None:
        """Remove a binding. One that does not exist, or whose queue or exchanges are gone
        already (auto-delete, exclusive cleanup), is fine, as in RabbitMQ."""
        if not self.graph.has_exchange(binding.source) or \
                binding not in self.graph.bindings(binding.source):
            return
        if binding.destination_kind == "queue":
            self.lookup(binding.destination, owner)
        self.graph.unbind(binding)
        self.changed(durable=True)

    def changed(self, *, durable: bool) -> None:
        """Exchanges, bindings or queues changed: the durable ones are saved, and in a
        cluster every change reaches every node."""
        if durable:
            self.manager.save()
        topology = self.manager.topology
        if topology is not None:
            topology.changed(self)

    async def shared(self) -> None:
        """Returns once the cluster holds this vhost's changes (at once without one)."""
        topology = self.manager.topology
        if topology is not None:
            await topology.written(self.name)

    def lookup_for_binding(self, name: str) -> None:
        if name not in self.queues and self.stream(name) is None:
            raise NotFound(f"no {self.describe('queue', name)}")

    # -- publishing -------------------------------------------------------------

    def publish(self, exchange: str, routing_key: str, message: QueueMessage,
                headers: Mapping[str, Any] | None, cc: tuple[str, ...],
                to_stream: StreamEncoder, confirm: bool = False) -> PublishOutcome:
        """Route a message and enqueue it in every queue it reaches; with `confirm`, the
        outcome's waits end once it is durable (fsynced) everywhere."""
        if exchange == "" and not cc:  # the default exchange: the key names the queue
            names: set[str] | tuple[str, ...] = (routing_key,)
        else:
            names = self.graph.route(exchange, routing_key, headers, cc=cc)
        outcome = PublishOutcome()
        first = True
        for name in names:
            queue = self.queues.get(name)
            if queue is not None:
                copy = message if first else message.copy()
                first = False
                result = queue.publish(copy, confirm)
                outcome.routed = True
                if result is False:
                    outcome.rejected = True
                elif result is not None and result is not True:
                    outcome.waits.append(result)
                if (backlog := queue.backlog) is not None:
                    outcome.backlogs.append(backlog)
                continue
            stream = self.stream(name)
            if stream is not None:
                outcome.routed = True
                outcome.waits.append(
                    stream.services[0].appender.append_records([to_stream(message)]).durable)
        stats = self.graph.stats.get(exchange)
        if stats is None:
            stats = self.graph.stats[exchange] = MessageStats()
        stats.publish_in += 1
        stats.publish_out += outcome.routed
        return outcome

    def dead_letter(self, queue: ClassicQueue, message: QueueMessage, reason: str) -> None:
        """Republish a dead message to the queue's dead-letter exchange with an x-death
        entry, as RabbitMQ does (at most once: no confirm waits on it)."""
        settings = queue.settings
        exchange = settings.dead_letter_exchange
        exists = exchange is not None and self.graph.has_exchange(exchange)
        strategy = "at_most_once" if exists else "disabled"  # RabbitMQ's label for /metrics
        self.manager.counters.dead_lettered[settings.queue_type, reason, strategy] += 1
        if exchange is None or not exists:
            return
        codec = properties_codec()
        headers = dict(codec.headers(message.properties))
        routing_keys = [message.routing_key]
        _record_death(headers, queue.name, reason, message.exchange, routing_keys,
                      codec.expiration(message.properties))
        key = settings.dead_letter_routing_key or message.routing_key
        names = self.graph.route(exchange, key, headers)
        if _is_cycle(headers, names, queue.name):
            log.debug("dead_letter.cycle_dropped", extra={"vhost": self.name, "queue": queue.name})
            return
        dead = QueueMessage(exchange, key,
                            codec.with_headers(message.properties, headers, drop_expiration=True),
                            message.body, persistent=message.persistent,
                            priority=message.priority)
        for name in names:
            target = self.queues.get(name)
            if target is not None:
                target.publish(dead.copy())

    # -- persistence ------------------------------------------------------------

    def records(self) -> dict[str, Any]:
        records: dict[str, Any] = dict(self.graph.to_records())
        records["queues"] = [
            {"name": q.name, "auto_delete": q.auto_delete,
             "arguments": {**q.arguments, REPLICATED: True}
             if isinstance(q, REPLICATED_QUEUES) else q.arguments}
            for q in self.queues.values()
            if q.durable and q.owner is None and type(q) is not RemoteQueue
        ]
        return records


def _record_death(headers: dict[str, Any], queue: str, reason: str, exchange: str,
                  routing_keys: list[str], expiration: str | None) -> None:
    deaths = [dict(d) for d in headers.get("x-death") or [] if isinstance(d, Mapping)]
    for i, death in enumerate(deaths):
        if death.get("queue") == queue and death.get("reason") == reason:
            death["count"] = int(death.get("count", 0)) + 1
            death["time"] = _now()
            deaths.insert(0, deaths.pop(i))
            break
    else:
        death = {"count": 1, "reason": reason, "queue": queue, "time": _now(),
                 "exchange": exchange, "routing-keys": routing_keys}
        if expiration is not None:
            death["original-expiration"] = expiration
        deaths.insert(0, death)
    headers["x-death"] = deaths
    headers.setdefault("x-first-death-reason", reason)
    headers.setdefault("x-first-death-queue", queue)
    headers.setdefault("x-first-death-exchange", exchange)
    headers["x-last-death-reason"] = reason
    headers["x-last-death-queue"] = queue
    headers["x-last-death-exchange"] = exchange


def _is_cycle(headers: Mapping[str, Any], targets: set[str], queue: str) -> bool:
    """RabbitMQ drops a message that would loop back to a queue it already died in, unless
    a rejection (a client's decision) is part of the loop."""
    if queue not in targets:
        return False
    deaths = headers.get("x-death") or []
    return not any(d.get("reason") == "rejected" for d in deaths)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)
