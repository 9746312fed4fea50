"""Single active consumer: of the consumers sharing a name on a partition, one
receives messages; when it leaves, the next takes over.

For a plain stream the earliest member is active. For a partition of a super
stream (`position` set) the members rotate over the partitions, as RabbitMQ
does: partition i is served by member i mod n, so N consumers spread over N
partitions. Members are told through callbacks; the protocol turns those into
its own messages (ConsumerUpdate in the stream protocol).

A hand-off goes as RabbitMQ's (3.11+): the active member is told to step down, and
the next one is activated only once it has (`stepped_down`, when its client answered)
or has left, so two members are never active at once. A member that never answers is
the protocol's to drop (the stream protocol's request timeout closes its connection).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Notify = Callable[[], None]


@dataclass(eq=False, slots=True)
class ActiveConsumer:
    group: ActiveConsumerGroup
    activate: Notify
    deactivate: Notify
    is_active: bool = False
    stepping_down: bool = False  # told to deactivate, its answer not in yet

    def leave(self) -> None:
        self.group.leave(self)

    def stepped_down(self) -> None:
        """Its client answered the deactivation: the next member may take over."""
        if self.stepping_down:
            self.stepping_down = False
            if self in self.group.members:
                self.group.rebalance()


@dataclass(eq=False, slots=True)
class ActiveConsumerGroup:
    key: tuple[str, str, str]
    position: int | None
    on_empty: Callable[[ActiveConsumerGroup], None]
    members: list[ActiveConsumer] = field(default_factory=list)

    def join(self, activate: Notify, deactivate: Notify) -> ActiveConsumer:
        member = ActiveConsumer(self, activate, deactivate)
        self.members.append(member)
        self.rebalance()
        return member

    def leave(self, member: ActiveConsumer) -> None:
        if member not in self.members:
            return
        self.members.remove(member)
        member.is_active = False
        if not self.members:
            self.on_empty(self)
            return
        self.rebalance()

    @property
    def active(self) -> ActiveConsumer | None:
        for member in self.members:
            if member.is_active:
                return member
        return None

    def _chosen(self) -> ActiveConsumer:
        index = 0 if self.position is None else self.position % len(self.members)
        return self.members[index]

    def rebalance(self) -> None:
        """Step the active member down if another should be active, or activate the
        chosen one when none is active and none is stepping down."""
        if any(member.stepping_down for member in self.members):
            return  # its answer (or its leaving) rebalances again
        chosen, current = self._chosen(), self.active
        if chosen is current:
            return
        if current is not None:
            current.is_active = False
            current.stepping_down = True
            current.deactivate()
            return
        chosen.is_active = True
        chosen.activate()


class ActiveConsumers:
    """Every single-active-consumer group of the broker, keyed by partition and name."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str, str], ActiveConsumerGroup] = {}

    def group(self, namespace: str, partition_name: str, name: str,
              position: int | None = None) -> ActiveConsumerGroup:
        key = (namespace, partition_name, name)
        group = self._groups.get(key)
        if group is None:
            group = ActiveConsumerGroup(key, position, self._forget)
            self._groups[key] = group
        return group

    def _forget(self, group: ActiveConsumerGroup) -> None:
        self._groups.pop(group.key, None)
