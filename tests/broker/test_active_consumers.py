"""Single-active-consumer groups on their own: who is active, and the order of a hand-off
(the active member steps down before the next is activated)."""

from __future__ import annotations

from mainstem.broker.active_consumers import ActiveConsumer, ActiveConsumers


def join(group, name: str, told: list[str]) -> ActiveConsumer:
    return group.join(activate=lambda: told.append(f"{name} active"),
                      deactivate=lambda: told.append(f"{name} inactive"))


def test_a_super_stream_partition_hands_off_only_once_the_active_member_stepped_down() -> None:
    told: list[str] = []
    group = ActiveConsumers().group("/", "orders-1", "app", position=1)
    first = join(group, "first", told)
    second = join(group, "second", told)  # partition 1 goes to member 1 mod 2
    assert told == ["first active", "first inactive"]
    assert group.active is None and first.stepping_down
    third = join(group, "third", told)  # a join while stepping down waits too
    assert told == ["first active", "first inactive"]
    first.stepped_down()
    assert told[-1] == "second active" and group.active is second  # 1 mod 3
    first.stepped_down()  # a second answer changes nothing
    assert told[-1] == "second active"
    second.leave()
    assert told[-1] == "third active" and group.active is third  # 1 mod 2: the active left


def test_a_member_that_leaves_while_stepping_down_lets_the_next_take_over() -> None:
    told: list[str] = []
    groups = ActiveConsumers()
    group = groups.group("/", "orders-1", "app", position=1)
    first = join(group, "first", told)
    join(group, "second", told)
    first.leave()  # its connection closed (or was dropped for not answering)
    assert told == ["first active", "first inactive", "second active"]


def test_a_plain_stream_keeps_its_earliest_member_active() -> None:
    told: list[str] = []
    group = ActiveConsumers().group("/", "events", "app")
    first = join(group, "first", told)
    join(group, "second", told)
    assert told == ["first active"]
    first.leave()
    assert told == ["first active", "second active"]
