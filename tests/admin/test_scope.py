"""Scoped management access: RabbitMQ's user tags (management, policymaker, monitoring,
administrator) against each family of endpoints, as the management plugin's documentation
and its authorisation rules state them, with real HTTP and AMQP clients (aiohttp, pika)
against a real broker. Outside its scope a request gets RabbitMQ's answer: 401
{"error": "not_authorised", "reason": ...}."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from urllib.parse import quote

import aiohttp
import pika
import pytest
from rstream import Producer

from mainstem import Broker
from tests.support.admin_http import call, session

PERMISSIONS = {"configure": ".*", "write": ".*", "read": ".*"}
# user -> tags; each may log in to "team" only (guest, the administrator, to "/")
USERS = {"manager": "management", "maker": "policymaker", "watcher": "monitoring",
         "plain": "", "narrow": "management"}
NOT_MANAGEMENT = {"error": "not_authorised", "reason": "Not management user"}
NOT_ADMIN = {"error": "not_authorised", "reason": "Not administrator user"}
NOT_MONITOR = {"error": "not_authorised", "reason": "Not monitor user"}
NOT_VHOST = {"error": "not_authorised", "reason": "User not authorised to access virtual host"}
NOT_OBJECT = {"error": "not_authorised", "reason": "User not authorised to access object"}


@pytest.fixture
async def sessions(broker: Broker) -> AsyncIterator[dict[str, aiohttp.ClientSession]]:
    """guest (administrator) and the users of USERS, with vhosts team and other, a queue
    in each."""
    opened = {name: session(broker, name) for name in ("guest", *USERS)}
    admin = opened["guest"]
    for vhost in ("team", "other"):
        await call(admin, "PUT", f"/api/vhosts/{vhost}", status=201)
        await call(admin, "PUT", f"/api/queues/{vhost}/{vhost}-q", {}, status=201)
    for name, tags in USERS.items():
        await call(admin, "PUT", f"/api/users/{name}", {"password": name, "tags": tags},
                   status=201)
        patterns = {"configure": "^narrow-", "write": "^$", "read": "^$"} \
            if name == "narrow" else PERMISSIONS
        await call(admin, "PUT", f"/api/permissions/team/{name}", patterns, status=204)
    try:
        yield opened
    finally:
        for http in opened.values():
            await http.close()


def names(rows: list[dict]) -> set[str]:
    return {row["name"] for row in rows}


async def test_a_user_without_a_management_tag_is_refused_everywhere(sessions):
    plain = sessions["plain"]
    for path in ("/api/overview", "/api/whoami", "/api/queues", "/api/vhosts/team"):
        assert await call(plain, "GET", path, status=401) == NOT_MANAGEMENT
    assert await call(plain, "PUT", "/api/queues/team/x", {}, status=401) == NOT_MANAGEMENT
    # a management user meets unknown paths and methods as an administrator does
    assert (await call(sessions["manager"], "GET", "/api/nothing", status=404))["error"] == \
        "Object Not Found"
    await call(sessions["manager"], "PATCH", "/api/queues", status=405)


async def test_administrator_only_families(sessions):
    """Users, permissions, vhosts' creation, definitions (password hashes) and limits'
    changes: administrators only, monitoring included (reading user limits is not: see
    test_permissions_table)."""
    for user in ("manager", "maker", "watcher"):
        http = sessions[user]
        for method, path in (("GET", "/api/users"), ("GET", "/api/users/manager"),
                             ("PUT", "/api/users/mallory"), ("GET", "/api/permissions"),
                             ("PUT", "/api/permissions/team/plain"),
                             ("PUT", "/api/vhosts/mine"), ("DELETE", "/api/vhosts/team"),
                             ("GET", "/api/definitions"), ("GET", "/api/definitions/team"),
                             ("POST", "/api/definitions"),
                             ("PUT", "/api/vhost-limits/team/max-queues")):
            assert await call(http, method, path, {"value": 1}, status=401) == NOT_ADMIN, \
                (user, method, path)
    await call(sessions["guest"], "GET", "/api/definitions")


async def test_every_management_tag_sees_the_overview_and_itself(sessions):
    for user, tags in USERS.items():
        if tags:
            http = sessions[user]
            assert (await call(http, "GET", "/api/whoami")) == {"name": user, "tags": [tags]}
            assert "object_totals" in await call(http, "GET", "/api/overview")
            await call(http, "GET", "/api/health/checks/alarms")


async def test_management_sees_and_manages_only_its_vhosts(sessions):
    manager = sessions["manager"]
    assert names(await call(manager, "GET", "/api/vhosts")) == {"team"}
    assert names(await call(manager, "GET", "/api/queues")) == {"team-q"}
    assert {row["vhost"] for row in await call(manager, "GET", "/api/exchanges")} == {"team"}
    assert {row["vhost"] for row in await call(manager, "GET", "/api/bindings")} == {"team"}
    paged = await call(manager, "GET", "/api/queues?page=1&page_size=10")
    assert paged["total_count"] == 1 and names(paged["items"]) == {"team-q"}
    for method, path in (("GET", "/api/vhosts/other"), ("GET", "/api/queues/other"),
                         ("GET", "/api/queues/other/other-q"),
                         ("PUT", "/api/queues/other/mine"),
                         ("DELETE", "/api/queues/other/other-q"),
                         ("GET", "/api/exchanges/other"),
                         ("PUT", "/api/exchanges/other/x"),
                         ("POST", "/api/exchanges/other/amq.default/publish"),
                         ("POST", "/api/queues/other/other-q/get"),
                         ("GET", "/api/vhost-limits/other"),
                         ("GET", "/api/consumers/other"), ("GET", "/api/streams/other"),
                         ("PUT", "/api/streams/other/s"),
                         ("GET", "/api/stream/consumers/other"),
                         ("GET", "/api/aliveness-test/other")):
        assert await call(manager, method, path, {}, status=401) == NOT_VHOST, (method, path)
    assert await call(manager, "GET", "/api/nodes", status=401) == NOT_MONITOR
    # in its own vhost: declare, publish, get, bind, delete
    await call(manager, "PUT", "/api/queues/team/mine", {}, status=201)
    await call(manager, "PUT", "/api/exchanges/team/mine-x", {"type": "fanout"}, status=201)
    await call(manager, "POST", "/api/bindings/team/e/mine-x/q/mine", {}, status=201)
    routed = await call(manager, "POST", "/api/exchanges/team/mine-x/publish",
                        {"routing_key": "", "payload": "hello", "properties": {}})
    assert routed == {"routed": True}
    got = await call(manager, "POST", "/api/queues/team/mine/get",
                     {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})
    assert [message["payload"] for message in got] == ["hello"]
    await call(manager, "DELETE", "/api/queues/team/mine", status=204)
    admin = sessions["guest"]
    for vhost in ("team", "other"):
        await call(admin, "PUT", f"/api/vhost-limits/{vhost}/max-queues", {"value": 9},
                   status=204)
    assert await call(manager, "GET", "/api/vhost-limits") == [
        {"vhost": "team", "value": {"max-queues": 9}}]
    assert len(await call(sessions["watcher"], "GET", "/api/vhost-limits")) == 2
    await call(manager, "GET", "/api/aliveness-test/team")
    await call(admin, "PUT", "/api/streams/other/theirs", {}, status=201)
    await call(manager, "PUT", "/api/streams/team/ours", {}, status=201)
    assert names(await call(manager, "GET", "/api/streams")) == {"ours"}
    await call(manager, "DELETE", "/api/streams/team/ours", status=204)


async def test_the_overview_counts_what_the_user_sees(sessions):
    """management: its vhosts' queues and its own connections, no node-level data;
    monitoring: the node's, and every vhost's totals."""
    manager = await call(sessions["manager"], "GET", "/api/overview")
    assert manager["object_totals"]["queues"] == 1  # team-q, not other-q
    assert manager["listeners"] == [] and "alarms" not in manager
    assert "message_stats" not in manager
    watcher = await call(sessions["watcher"], "GET", "/api/overview")
    assert watcher["object_totals"]["queues"] >= 2
    assert watcher["listeners"] and "alarms" in watcher and "message_stats" in watcher


async def test_management_acts_only_as_its_permissions_allow(sessions):
    narrow = sessions["narrow"]  # configure ^narrow-, no write, no read
    await call(narrow, "PUT", "/api/queues/team/narrow-q", {}, status=201)
    refused = await call(narrow, "PUT", "/api/queues/team/wide-q", {}, status=401)
    assert refused["error"] == "not_authorised"
    assert refused["reason"] == ("configure access to queue 'wide-q' in namespace 'team'"
                                 " refused for user 'narrow'")
    await call(narrow, "POST", "/api/exchanges/team/amq.default/publish",
               {"routing_key": "narrow-q", "payload": "x", "properties": {}}, status=401)
    await call(narrow, "POST", "/api/queues/team/narrow-q/get",
               {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}, status=401)
    await call(narrow, "DELETE", "/api/queues/team/narrow-q", status=204)


async def test_monitoring_reads_node_data_and_objects_of_its_vhosts_only(sessions):
    """As RabbitMQ: a monitoring user sees every vhost, but the objects of those it may
    log in to only."""
    watcher = sessions["watcher"]
    assert names(await call(watcher, "GET", "/api/vhosts")) >= {"/", "team", "other"}
    assert names(await call(watcher, "GET", "/api/queues")) == {"team-q"}
    assert await call(watcher, "GET", "/api/queues/other/other-q", status=401) == NOT_VHOST
    assert await call(watcher, "GET", "/api/exchanges/other") == []
    assert len(await call(watcher, "GET", "/api/nodes")) == 1
    await call(watcher, "GET", "/api/vhost-limits/other")
    for method, path in (("PUT", "/api/queues/other/mine"),
                         ("DELETE", "/api/queues/other/other-q"),
                         ("POST", "/api/queues/other/other-q/get")):
        assert await call(watcher, method, path, {}, status=401) == NOT_VHOST
    await call(watcher, "PUT", "/api/queues/team/watched", {}, status=201)


async def test_policymaker_is_a_management_user_for_its_vhosts(sessions):
    maker = sessions["maker"]
    assert names(await call(maker, "GET", "/api/vhosts")) == {"team"}
    assert await call(maker, "GET", "/api/queues/other", status=401) == NOT_VHOST
    assert await call(maker, "GET", "/api/nodes", status=401) == NOT_MONITOR


POLICY = {"pattern": "^team-", "definition": {"max-length": 5}, "apply-to": "queues"}


async def test_policymaker_manages_the_policies_of_its_vhosts_only(sessions):
    """As RabbitMQ: policies for policymakers in their vhosts; operator policies for
    administrators alone; management users neither."""
    maker, manager = sessions["maker"], sessions["manager"]
    await call(maker, "PUT", "/api/policies/team/cap", POLICY, status=201)
    assert await call(maker, "GET", "/api/policies/team/cap") == {
        "vhost": "team", "name": "cap", **POLICY, "priority": 0}
    await call(sessions["guest"], "PUT", "/api/policies/other/theirs", POLICY, status=201)
    assert names(await call(maker, "GET", "/api/policies")) == {"cap"}  # not other's
    assert await call(maker, "PUT", "/api/policies/other/mine", POLICY, status=401) == \
        NOT_OBJECT
    for method in ("GET", "PUT"):
        assert await call(maker, method, "/api/operator-policies/team/op", POLICY,
                          status=401) == NOT_ADMIN
        assert await call(manager, method, "/api/policies/team/cap", POLICY, status=401) == \
            NOT_OBJECT
    await call(maker, "DELETE", "/api/policies/team/cap", status=204)


async def test_monitoring_scrapes_the_management_ports_metrics(sessions):
    async with sessions["watcher"].get("/metrics/per-object") as response:
        assert response.status == 200
        assert "team-q" in await response.text()
    async with sessions["manager"].get("/metrics") as response:
        assert response.status == 401
        assert json.loads(await response.text()) == NOT_MONITOR


async def connect(broker: Broker, user: str, vhost: str, name: str) -> pika.BlockingConnection:
    password = "guest" if user == "guest" else user
    params = pika.ConnectionParameters(
        "127.0.0.1", broker.ports["amqp"], vhost, pika.PlainCredentials(user, password),
        client_properties={"connection_name": name})
    connection = await asyncio.to_thread(pika.BlockingConnection, params)
    await asyncio.to_thread(connection.channel)
    return connection


async def test_connections_and_channels_are_their_owners(broker: Broker, sessions):
    """management: its own connections and channels, closing them too; monitoring: every
    one, closing only its own; administrator: every one."""
    mine = await connect(broker, "manager", "team", "mine")
    theirs = await connect(broker, "guest", "/", "theirs")
    try:
        manager, watcher = sessions["manager"], sessions["watcher"]
        rows = await call(manager, "GET", "/api/connections")
        assert [row["user_provided_name"] for row in rows] == ["mine"]
        assert {row["user"] for row in await call(manager, "GET", "/api/channels")} == \
            {"manager"}
        assert {row["user_provided_name"] for row in await call(
            watcher, "GET", "/api/connections")} == {"mine", "theirs"}
        assert len(await call(watcher, "GET", "/api/channels")) == 2
        theirs_row = next(row for row in await call(sessions["guest"], "GET",
                                                    "/api/connections")
                          if row["user_provided_name"] == "theirs")
        path = f"/api/connections/{quote(theirs_row['name'], safe='')}"
        assert await call(manager, "GET", path, status=401) == NOT_OBJECT
        assert await call(manager, "GET", path + "/channels", status=401) == NOT_OBJECT
        channel = f"/api/channels/{quote(theirs_row['name'] + ' (1)', safe='')}"
        assert await call(manager, "GET", channel, status=401) == NOT_OBJECT
        await call(watcher, "GET", path)
        await call(watcher, "GET", channel)
        assert await call(watcher, "DELETE", path, status=401) == NOT_OBJECT
        assert await call(manager, "DELETE", path, status=401) == NOT_OBJECT
        await call(manager, "DELETE", "/api/connections/mine", status=204)
        assert await call(manager, "GET", "/api/connections") == []
        await call(sessions["guest"], "DELETE", path, status=204)
    finally:
        for connection in (mine, theirs):
            with contextlib.suppress(pika.exceptions.AMQPError):  # closed by the API
                await asyncio.to_thread(connection.close)


async def rabbitmqadmin(broker: Broker, user: str, *args: str) -> tuple[int, str]:
    """Debian's rabbitmqadmin (3.10) as `user`: its exit code and output."""
    process = await asyncio.create_subprocess_exec(
        "/usr/bin/rabbitmqadmin", "-H", "127.0.0.1", "-P", str(broker.ports["admin"]),
        "-u", user, "-p", user, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_stream_clients_are_listed_in_their_vhost_only(broker: Broker, sessions):
    """RabbitMQ's stream management lists: a management user sees its vhosts' publishers
    and subscriptions, not another vhost's."""
    admin = sessions["guest"]
    await call(admin, "PUT", "/api/permissions/other/guest", PERMISSIONS, status=204)
    await call(admin, "PUT", "/api/streams/other/feed", {}, status=201)
    producer = Producer("127.0.0.1", port=broker.ports["stream"], username="guest",
                        password="guest", vhost="other")
    async with producer:
        await producer.send_wait("feed", b"x")
        assert len(await call(sessions["watcher"], "GET", "/api/stream/publishers")) == 1
        assert await call(sessions["manager"], "GET", "/api/stream/publishers") == []


async def test_rabbitmqadmin_as_a_management_user(broker: Broker, sessions):
    code, out = await rabbitmqadmin(broker, "manager", "--format", "raw_json", "list",
                                    "queues")
    assert code == 0 and names(json.loads(out)) == {"team-q"}
    code, out = await rabbitmqadmin(broker, "manager", "-V", "team", "declare", "queue",
                                    "name=made-by-manager")
    assert code == 0, out
    code, out = await rabbitmqadmin(broker, "manager", "-V", "other", "declare", "queue",
                                    "name=refused")
    assert code != 0 and "Access refused: /api/queues/other/refused" in out  # its 401
    code, out = await rabbitmqadmin(broker, "manager", "list", "users")
    assert code != 0 and "Access refused: /api/users" in out
    code, out = await rabbitmqadmin(broker, "watcher", "--format", "raw_json", "list",
                                    "queues")
    assert code == 0 and names(json.loads(out)) == {"team-q", "made-by-manager"}
