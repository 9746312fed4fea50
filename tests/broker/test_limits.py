"""Limits in the catalog (kept across a restart, gone with their vhost or user, shared with
other nodes as changes) and the tallies they are compared with."""

from __future__ import annotations

from pathlib import Path

import pytest

from mainstem.broker.catalog import Catalog, UserRecord
from mainstem.broker.errors import InvalidArgument, NotAllowed, NotFound, PreconditionFailed
from mainstem.broker.limits import USER_LIMIT, VHOST_LIMIT, Limits


def test_limits_survive_a_restart_and_go_with_their_owner(tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite"
    with Catalog.open(path) as catalog:
        catalog.add_namespace("team")
        catalog.put_user(UserRecord("bob", "hash"))
        catalog.set_limit(VHOST_LIMIT, "team", "max-queues", 3)
        catalog.set_limit(USER_LIMIT, "bob", "max-channels", 5)
        with pytest.raises(NotFound):
            catalog.set_limit(VHOST_LIMIT, "nowhere", "max-queues", 1)
    with Catalog.open(path) as catalog:
        assert catalog.list_limits(VHOST_LIMIT) == {"team": {"max-queues": 3}}
        assert catalog.list_limits(USER_LIMIT, "bob") == {"bob": {"max-channels": 5}}
        catalog.delete_namespace("team")
        catalog.delete_user("bob")
        assert catalog.list_limits(VHOST_LIMIT) == catalog.list_limits(USER_LIMIT) == {}


def test_limit_changes_are_told_and_applied_like_users(tmp_path: Path) -> None:
    with Catalog.open(tmp_path / "a.sqlite") as here, Catalog.open(tmp_path / "b.sqlite") as there:
        told: list[tuple[str, tuple[object, ...], dict[str, object] | None]] = []
        here.on_change = lambda kind, key, row: told.append((kind, key, row))
        here.set_limit(VHOST_LIMIT, "/", "max-connections", 10)
        here.clear_limit(VHOST_LIMIT, "/", "max-connections")
        here.set_limit(VHOST_LIMIT, "/", "max-queues", 4)
        assert told[0] == ("vhost_limit", ("/", "max-connections"), {"value": 10})
        assert told[1] == ("vhost_limit", ("/", "max-connections"), None)
        there.on_change = lambda *change: pytest.fail("an applied change is not told again")
        for change in told:
            there.apply(*change)
        assert there.list_limits(VHOST_LIMIT) == {"/": {"max-queues": 4}}


async def test_tallies_admit_up_to_the_limit_and_release(tmp_path: Path) -> None:
    with Catalog.open(tmp_path / "catalog.sqlite") as catalog:
        catalog.put_user(UserRecord("bob", "hash"))
        queues = {"/": 0}
        limits = Limits(catalog, queues.__getitem__)
        with pytest.raises(InvalidArgument, match="unknown limit"):
            await limits.set(USER_LIMIT, "bob", "max-queues", 1)
        with pytest.raises(InvalidArgument, match="must be an integer"):
            await limits.set(VHOST_LIMIT, "/", "max-queues", True)
        await limits.set(USER_LIMIT, "bob", "max-connections", 2)
        releases = [limits.admit_connection("bob", "/"), limits.admit_connection("bob", None)]
        with pytest.raises(NotAllowed, match=r"user connection limit \(2\) is reached"):
            limits.admit_connection("bob", "/")
        releases.pop()()
        releases.append(limits.admit_connection("bob", "/"))
        await limits.set(VHOST_LIMIT, "/", "max-queues", 1)
        limits.check_queue("/", "first")
        queues["/"] = 1
        with pytest.raises(PreconditionFailed, match=r"queue limit in vhost '/' \(1\)"):
            limits.check_queue("/", "second")
