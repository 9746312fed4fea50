"""Issue 43: a RabbitMQ 3.10.8 export moved over whole or not at all: every shape it writes
imported, re-exported and compared; a refused file changing nothing; the topic permissions
it carries enforced on AMQP publishes and binds (pika), against a real broker.

The two fixtures were written by RabbitMQ 3.10.8 itself (Debian's rabbitmq-server
3.10.8-1.1+deb12u1, management plugin on) for the installation the issue describes, built by
`fixtures/rabbitmq_migration_shape.py` through its HTTP API: `GET /api/definitions` wrote
rabbitmq-3.10.8-migration.json, `rabbitmqctl export_definitions` the -ctl one (which adds
each vhost's metadata and its limits as [name, value] pairs)."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path

import pika
import pytest

from tests.support.admin_http import call

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = FIXTURES / "rabbitmq-3.10.8-migration.json"
CTL_FIXTURE = FIXTURES / "rabbitmq-3.10.8-migration-ctl.json"
IGNORED = ("ha-", "queue-mode")  # classic mirroring and lazy queues: gone in RabbitMQ 4
# a fresh broker's own user, in every export of it
OWN = "guest"


def rabbit_export() -> dict:
    return json.loads(FIXTURE.read_text())


def amqp(broker, user: str, vhost: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", broker.ports["amqp"], vhost, pika.PlainCredentials(user, f"{user}-secret")))


def rows(definitions: dict, kind: str, *keys: str) -> list:
    # rabbitmqctl's export leaves out an exchange's internal flag when false
    return sorted(json.dumps([row.get(key, False if key == "internal" else None)
                              for key in keys], sort_keys=True)
                  for row in definitions.get(kind, [])
                  if OWN not in (row.get("user"), row.get("name")))


def kept_policies(rabbit: dict) -> list:
    """The file's policies as mainstem keeps them: without the keys RabbitMQ 4 ignores."""
    policies = [{**p, "definition": {k: v for k, v in p["definition"].items()
                                     if not k.startswith(IGNORED)}} for p in rabbit["policies"]]
    return sorted(json.dumps(p, sort_keys=True) for p in policies if p["definition"])


def operator_policies(definitions: dict) -> list:
    """Operator policies in either shape: 3.x's parameters of component operator_policy,
    or their own key (3.8's and mainstem's). rabbitmqctl writes a definition as pairs."""
    found = [{**row["value"], "definition": dict(row["value"]["definition"]),
              "vhost": row["vhost"], "name": row["name"]}
             for row in definitions["parameters"] if row["component"] == "operator_policy"]
    return sorted(json.dumps(p, sort_keys=True)
                  for p in found + definitions.get("operator_policies", []))


def vhost_limits(definitions: dict) -> dict:
    """Each vhost's limits; a cleared one ([]) is no limit at all."""
    return {row["vhost"]: row["value"] for row in definitions["parameters"]
            if row["component"] == "vhost-limits" and row["value"]}


COMPARED = (("users", ("name", "password_hash", "hashing_algorithm", "tags", "limits")),
            ("permissions", ("user", "vhost", "configure", "write", "read")),
            ("topic_permissions", ("user", "vhost", "exchange", "write", "read")),
            ("queues", ("name", "vhost", "durable", "auto_delete", "arguments")),
            ("exchanges", ("name", "vhost", "type", "durable", "auto_delete", "internal",
                           "arguments")),
            ("bindings", ("source", "vhost", "destination", "destination_type",
                          "routing_key", "arguments")))
WARNINGS = [
    "policy 'billing-dlx' in vhost 'shop': ignored ha-mode, ha-params (classic mirroring"
    " and lazy queues are gone, as in RabbitMQ 4)",
    "policy 'ha-all' in vhost '/': ignored ha-mode, ha-sync-mode (classic mirroring and"
    " lazy queues are gone, as in RabbitMQ 4); nothing else left, so it was not created",
    "policy 'lazy-archive' in vhost 'shop': ignored queue-mode (classic mirroring and"
    " lazy queues are gone, as in RabbitMQ 4)"]


@pytest.mark.parametrize("fixture", [FIXTURE, CTL_FIXTURE], ids=["http-api", "rabbitmqctl"])
async def test_a_rabbitmq_3_10_8_export_imports_whole_and_round_trips(broker, http, fixture):
    rabbit = json.loads(fixture.read_text())
    assert rabbit["rabbitmq_version"] == "3.10.8"
    answer = await call(http, "POST", "/api/definitions", rabbit, status=200)
    assert sorted(answer["warnings"]) == WARNINGS

    exported = await call(http, "GET", "/api/definitions")
    for kind, keys in COMPARED:
        assert rows(exported, kind, *keys) == rows(rabbit, kind, *keys), kind
    assert kept_policies(rabbit) == sorted(json.dumps(p, sort_keys=True)
                                           for p in exported["policies"])
    # written back as RabbitMQ 3.x writes them (3.10 reads no "operator_policies" key)
    assert operator_policies(exported) == operator_policies(rabbit)
    assert "operator_policies" not in exported
    assert vhost_limits(exported) == vhost_limits(rabbit) == {
        "shop": {"max-connections": 200, "max-queues": 50}}
    mine = {v["name"]: v for v in exported["vhosts"]}
    assert set(mine) == {v["name"] for v in rabbit["vhosts"]} == {"/", "shop", "iot"}
    # only rabbitmqctl's export carries the metadata; "/" was there before the import
    for vhost in (v for v in rabbit["vhosts"] if v["name"] != "/"):
        for key, value in vhost.get("metadata", {}).items():
            assert mine[vhost["name"]]["metadata"][key] == value, (vhost["name"], key)

    for user, vhost in (("ops", "shop"), ("billing", "shop"), ("legacy", "/"),
                        ("audit", "/")):
        if user == "audit":  # sha512, no permissions: logs in, then refused the vhost
            with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
                await asyncio.to_thread(amqp, broker, user, vhost)
            continue
        connection = await asyncio.to_thread(amqp, broker, user, vhost)
        await asyncio.to_thread(connection.close)

    await call(http, "POST", "/api/definitions", exported, status=204)  # mainstem's own back
    assert await call(http, "GET", "/api/definitions") == exported


def plain_export() -> dict:
    """The export without the shapes only the fix takes, so that the broker before it
    got as far as declaring queues (having made users, vhosts and permissions)."""
    rabbit = rabbit_export()
    rabbit["topic_permissions"] = []
    rabbit["parameters"] = [row for row in rabbit["parameters"] if row["value"]
                            and row["component"] == "vhost-limits"]
    rabbit["policies"] = [p for p in rabbit["policies"]
                          if not any(k.startswith(IGNORED) for k in p["definition"])]
    return rabbit


@pytest.mark.parametrize("spoil", ["bad policy value", "unknown user in permissions",
                                   "bad queue argument"])
async def test_a_refused_import_changes_nothing(broker, http, spoil):
    rabbit = plain_export()
    if spoil == "bad policy value":  # one bad policy among many, the last
        rabbit["policies"][-1]["definition"] = {"alternate-exchange": 42}
    elif spoil == "unknown user in permissions":
        rabbit["permissions"].append({"user": "ghost", "vhost": "shop", "configure": ".*",
                                      "write": ".*", "read": ".*"})
    else:
        rabbit["queues"][-1]["arguments"] = {"x-max-length": "many"}
    before = await call(http, "GET", "/api/definitions")
    answer = await call(http, "POST", "/api/definitions", rabbit,
                        status=404 if spoil == "unknown user in permissions" else 400)
    assert answer["reason"]
    assert await call(http, "GET", "/api/definitions") == before
    assert [u["name"] for u in await call(http, "GET", "/api/users")] == ["guest"]
    assert [v["name"] for v in await call(http, "GET", "/api/vhosts")] == ["/"]
    assert len(await call(http, "GET", "/api/permissions")) == 1


async def test_a_failure_while_declaring_puts_everything_back(broker, http):
    """A queue already there with other settings fails the declaration, after the catalog's
    changes were made: they are put back, and the exchanges the import made deleted."""
    await call(http, "PUT", "/api/queues/%2F/legacy.inbox", {"durable": True}, status=201)
    before = await call(http, "GET", "/api/definitions")
    answer = await call(http, "POST", "/api/definitions", plain_export(), status=400)
    assert "legacy.inbox" in answer["reason"]
    assert await call(http, "GET", "/api/definitions") == before
    assert [v["name"] for v in await call(http, "GET", "/api/vhosts")] == ["/"]
    assert "legacy" not in {e["name"] for e in await call(http, "GET", "/api/exchanges/%2F")}


async def test_topic_permissions_hold_on_topic_exchanges(broker, http):
    rabbit = rabbit_export()
    await call(http, "POST", "/api/definitions", rabbit, status=200)
    # orders-api may write "orders" (permission) with keys "order.*" only (topic permission)
    connection = await asyncio.to_thread(amqp, broker, "orders-api", "shop")
    try:
        channel = await asyncio.to_thread(connection.channel)
        await asyncio.to_thread(channel.confirm_delivery)
        await asyncio.to_thread(channel.basic_publish, "orders", "order.1.paid", b"ok")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            await asyncio.to_thread(channel.basic_publish, "orders", "invoice.1", b"no")
        assert refused.value.reply_code == 403
        assert "invoice.1" in refused.value.reply_text
    finally:
        await asyncio.to_thread(connection.close)
    # iot-gw reads "devices.*" from amq.topic only, writes under its own name ({username})
    connection = await asyncio.to_thread(amqp, broker, "iot-gw", "iot")
    try:
        channel = await asyncio.to_thread(connection.channel)
        await asyncio.to_thread(channel.confirm_delivery)
        await asyncio.to_thread(channel.basic_publish, "amq.topic", "devices.iot-gw.t", b"ok")
        await asyncio.to_thread(channel.queue_bind, "telemetry.raw", "amq.topic", "devices.#")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            await asyncio.to_thread(channel.queue_bind, "telemetry.raw", "amq.topic", "#")
        assert refused.value.reply_code == 403
        channel = await asyncio.to_thread(connection.channel)
        await asyncio.to_thread(channel.confirm_delivery)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            await asyncio.to_thread(channel.basic_publish, "amq.topic", "devices.other.t",
                                    b"no")
        channel = await asyncio.to_thread(connection.channel)  # no topic permission there
        await asyncio.to_thread(channel.basic_publish, "telemetry", "anything", b"ok")
    finally:
        await asyncio.to_thread(connection.close)


async def test_rabbitmq_3_8_shapes(broker, http):
    """Tags as a comma-separated string, operator policies under their own key."""
    rabbit = copy.deepcopy(rabbit_export())
    next(u for u in rabbit["users"] if u["name"] == "admin")["tags"] = \
        "administrator,monitoring"
    rabbit["operator_policies"] = [{**row["value"], "vhost": row["vhost"], "name": row["name"]}
                                   for row in rabbit["parameters"]
                                   if row["component"] == "operator_policy"]
    rabbit["parameters"] = [row for row in rabbit["parameters"]
                            if row["component"] != "operator_policy"]
    await call(http, "POST", "/api/definitions", rabbit, status=200)
    exported = await call(http, "GET", "/api/definitions")
    assert len(operator_policies(exported)) == 2
    assert next(u for u in exported["users"] if u["name"] == "admin")["tags"] == [
        "administrator", "monitoring"]


async def test_a_refused_import_drops_no_message_by_its_policies(broker, http):
    """A policy of a refused import never held: a queue it would have cut keeps its
    messages (a length limit applied, then put back, would have dropped them)."""
    await call(http, "PUT", "/api/queues/%2F/kept", {"durable": True}, status=201)
    for n in range(5):
        await call(http, "POST", "/api/exchanges/%2F/amq.default/publish",
                   {"routing_key": "kept", "payload": str(n), "payload_encoding": "string",
                    "properties": {}}, status=200)
    await call(http, "PUT", "/api/queues/%2F/legacy.inbox", {"durable": True}, status=201)
    rabbit = plain_export()
    rabbit["policies"].append({"vhost": "/", "name": "cut", "pattern": "^kept$",
                               "apply-to": "queues", "definition": {"max-length": 1},
                               "priority": 0})
    await call(http, "POST", "/api/definitions", rabbit, status=400)  # legacy.inbox differs
    assert (await call(http, "GET", "/api/queues/%2F/kept"))["messages"] == 5
    assert await call(http, "GET", "/api/policies") == []
