"""Every cell of the management API's permissions table: 34 requests by five users, one
per tag (administrator, monitoring, policymaker, management, none), each with permissions
in vhost "mine" and none in vhost "theirs", against a running broker over HTTP. The
expected statuses and rows are RabbitMQ 3.10's (its management plugin's checks, see
docs/management-permissions.md); lists are checked for which vhosts' rows they show."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pika
import pytest

from mainstem import Broker
from tests.support.admin_http import call, session

ALL = {"mine", "theirs"}
MINE = {"mine"}
USERS = {"admin": "administrator", "monitor": "monitoring", "maker": "policymaker",
         "manager": "management", "nobody": ""}
EVERYONE = (200, 200, 200, 200, 401)  # statuses in USERS' order
ADMIN_ONLY = (200, 401, 401, 401, 401)
REFUSED = (401, 401, 401, 401, 401)
POLICY = {"pattern": "^q", "definition": {"max-length": 5}, "apply-to": "queues"}
FULL = {"configure": ".*", "write": ".*", "read": ".*"}

# (method, path ({user} is the caller's name), body, statuses, vhosts each user's rows show)
TABLE: list[tuple[str, str, dict[str, Any] | None, tuple[int, ...],
                  tuple[set[str], ...] | None]] = [
    ("GET", "/api/overview", None, EVERYONE, None),
    ("GET", "/api/whoami", None, EVERYONE, None),
    ("GET", "/api/nodes", None, (200, 200, 401, 401, 401), None),
    ("GET", "/api/vhosts", None, EVERYONE, (ALL, ALL, MINE, MINE)),
    ("PUT", "/api/vhosts/new-{user}", {}, (201, 401, 401, 401, 401), None),
    ("GET", "/api/users", None, ADMIN_ONLY, None),
    ("GET", "/api/permissions", None, ADMIN_ONLY, None),
    ("GET", "/api/definitions", None, ADMIN_ONLY, None),
    ("GET", "/api/queues", None, EVERYONE, (ALL, MINE, MINE, MINE)),
    ("GET", "/api/queues/theirs", None, (200, 200, 401, 401, 401), ({"theirs"}, set())),
    ("GET", "/api/queues/mine/q", None, EVERYONE, None),
    ("GET", "/api/queues/theirs/q", None, ADMIN_ONLY, None),
    ("PUT", "/api/queues/mine/q-{user}", {}, (201, 201, 201, 201, 401), None),
    ("PUT", "/api/queues/theirs/q-{user}", {}, REFUSED, None),
    ("DELETE", "/api/queues/theirs/q/contents", None, REFUSED, None),
    ("POST", "/api/queues/theirs/q/get",
     {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}, REFUSED, None),
    ("GET", "/api/exchanges", None, EVERYONE, (ALL, MINE, MINE, MINE)),
    ("GET", "/api/exchanges/theirs", None, (200, 200, 401, 401, 401), ({"theirs"}, set())),
    ("GET", "/api/exchanges/theirs/x", None, ADMIN_ONLY, None),
    ("PUT", "/api/exchanges/theirs/x-{user}", {"type": "fanout"}, REFUSED, None),
    ("POST", "/api/exchanges/theirs/amq.default/publish",
     {"routing_key": "q", "payload": "x", "payload_encoding": "string", "properties": {}},
     REFUSED, None),
    ("GET", "/api/bindings/theirs", None, ADMIN_ONLY, None),
    ("GET", "/api/policies", None, EVERYONE, (ALL, MINE, MINE, MINE)),
    ("GET", "/api/policies/theirs", None, ADMIN_ONLY, None),
    ("GET", "/api/policies/mine/p", None, (200, 401, 200, 401, 401), None),
    ("PUT", "/api/policies/mine/p-{user}", POLICY, (201, 401, 201, 401, 401), None),
    ("PUT", "/api/policies/theirs/p-{user}", POLICY, (201, 401, 401, 401, 401), None),
    ("GET", "/api/operator-policies", None, EVERYONE, (ALL, MINE, MINE, MINE)),
    ("GET", "/api/user-limits", None, EVERYONE, None),
    ("GET", "/api/parameters", None, EVERYONE, None),
    ("GET", "/api/parameters/vhost-limits/theirs", None, ADMIN_ONLY, None),
    ("GET", "/api/vhost-limits", None, EVERYONE, (ALL, ALL, MINE, MINE)),
    ("GET", "/api/connections", None, EVERYONE, None),
    ("GET", "/api/consumers", None, EVERYONE, None),
]


@pytest.fixture
async def users(broker: Broker) -> AsyncIterator[dict[str, aiohttp.ClientSession]]:
    """USERS, each with full permissions in "mine" and none in "theirs"; both vhosts hold
    a queue q, an exchange x, a policy p, an operator policy and a limit (made by guest)."""
    guest = session(broker, "guest")
    opened = {name: session(broker, name) for name in USERS}
    try:
        for vhost in ALL:
            await call(guest, "PUT", f"/api/vhosts/{vhost}", {}, status=201)
            await call(guest, "PUT", f"/api/queues/{vhost}/q", {}, status=201)
            await call(guest, "PUT", f"/api/exchanges/{vhost}/x", {"type": "fanout"},
                       status=201)
            await call(guest, "PUT", f"/api/policies/{vhost}/p", POLICY, status=201)
            await call(guest, "PUT", f"/api/operator-policies/{vhost}/op", POLICY, status=201)
            await call(guest, "PUT", f"/api/vhost-limits/{vhost}/max-queues", {"value": 50},
                       status=204)
        for name, tags in USERS.items():
            await call(guest, "PUT", f"/api/users/{name}", {"password": name, "tags": tags},
                       status=201)
            await call(guest, "PUT", f"/api/permissions/mine/{name}", FULL, status=204)
        yield opened
    finally:
        for http in (guest, *opened.values()):
            await http.close()


def row_vhosts(path: str, rows: list[dict[str, Any]]) -> set[str]:
    key = "name" if path == "/api/vhosts" else "vhost"
    return {row[key] for row in rows} & ALL


async def test_every_cell_is_rabbitmqs(users: dict[str, aiohttp.ClientSession]) -> None:
    """All cells are gathered before the assertion, so a failure lists every one that
    differs."""
    differ = []
    for method, path, body, statuses, seen in TABLE:
        for column, name in enumerate(USERS):
            target = path.format(user=name)
            async with users[name].request(method, target, json=body) as response:
                text = await response.text()
            got: Any = response.status
            wanted: Any = statuses[column]
            if got == wanted == 200 and seen is not None and column < len(seen):
                got, wanted = row_vhosts(path, json.loads(text)), seen[column]
            if got != wanted:
                differ.append(f"{name} {method} {target}: {got}, RabbitMQ {wanted}")
    assert differ == []


async def test_the_creator_of_a_vhost_gets_full_permissions_in_it(
        broker: Broker, users: dict[str, aiohttp.ClientSession]) -> None:
    """As RabbitMQ: applications of the user who made a vhost over the API may use it at
    once (no 530 NOT_ALLOWED until someone sets permissions)."""
    await call(users["admin"], "PUT", "/api/vhosts/fresh", {}, status=201)
    assert await call(users["admin"], "GET", "/api/permissions/fresh/admin") == {
        "user": "admin", "vhost": "fresh", **FULL}
    params = pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"], "fresh",
                                       pika.PlainCredentials("admin", "admin"))
    connection = await asyncio.to_thread(pika.BlockingConnection, params)
    try:
        channel = await asyncio.to_thread(connection.channel)
        await asyncio.to_thread(channel.queue_declare, "work")
    finally:
        await asyncio.to_thread(connection.close)
    # a PUT of a vhost that exists grants nothing more
    await call(users["admin"], "PUT", "/api/vhosts/theirs", {}, status=204)
    await call(users["admin"], "GET", "/api/permissions/theirs/admin", status=404)
