"""`mainstem ctl` run as a real subprocess (`python -m mainstem ctl ...`) against a real
broker's management API, with real pika and rstream clients making the objects."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import pika
import pytest
from rstream import AMQPMessage, Producer

from mainstem import Broker
from mainstem.admin.ctl import COMMANDS, GROUPS, add_ctl_arguments
from tests.admin.test_tiering_ops import STREAM, tiered_broker

TIMEOUT_S = 60


async def run(*argv: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mainstem", *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def ctl(broker: Broker, *argv: str, json_output: bool = False):
    url = f"http://127.0.0.1:{broker.ports['admin']}"
    code, out, err = await run("ctl", "--url", url, *(["--json"] if json_output else []), *argv)
    return code, (json.loads(out) if json_output and code == 0 and out.strip() else out), err


def rows_of(table: str) -> list[list[str]]:
    return [line.split() for line in table.splitlines()]


def help_of(capsys, *argv: str) -> str:
    """What `mainstem ctl ARGV --help` prints, whitespace folded."""
    parser = argparse.ArgumentParser(prog="mainstem ctl")
    add_ctl_arguments(parser)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([*argv, "--help"])
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())


async def test_help_lists_every_group_and_action(capsys):
    code, out, _ = await run("ctl", "--help")
    assert code == 0
    for group in (*GROUPS, *COMMANDS, "lag"):
        assert f"    {group} " in out
    code, out, _ = await run("ctl", "queues", "--help")
    assert code == 0
    for action in ("list", "declare", "purge", "delete"):
        assert f"    {action} " in out
    # every group's help lists its actions with their help; every action explains itself
    for group, (summary, actions) in GROUPS.items():
        text = help_of(capsys, group)
        assert summary in text
        for action in actions:
            assert f"{action.name} {action.help}" in text
            assert action.help in help_of(capsys, group, action.name)
            for names, options in action.arguments:
                assert options.get("help"), (group, action.name, names)


async def test_users_vhosts_and_permissions(broker):
    assert (await ctl(broker, "vhosts", "add", "staging"))[0] == 0
    code, _, err = await ctl(broker, "users", "add", "alice", "pw", "--tags", "monitoring")
    assert code == 0, err
    code, _, _ = await ctl(broker, "permissions", "set", "alice", "--vhost", "staging",
                           "--write", "^$")
    assert code == 0
    code, rows, _ = await ctl(broker, "permissions", "list", json_output=True)
    expected = {"user": "alice", "vhost": "staging", "configure": ".*", "write": "^$",
                "read": ".*"}
    assert expected in rows
    code, rows, _ = await ctl(broker, "permissions", "list", "alice", json_output=True)
    assert rows == [expected]
    code, table, _ = await ctl(broker, "users", "list")
    assert rows_of(table)[0] == ["name", "tags"]
    assert ["alice", "monitoring"] in rows_of(table)[1:]
    assert (await ctl(broker, "permissions", "clear", "alice", "--vhost", "staging"))[0] == 0
    code, rows, _ = await ctl(broker, "permissions", "list", "--vhost", "staging",
                              json_output=True)
    assert [row["user"] for row in rows] == ["guest"]  # the vhost's creator
    assert (await ctl(broker, "users", "delete", "alice"))[0] == 0
    code, _, err = await ctl(broker, "users", "delete", "alice")
    assert code == 1 and "HTTP 404" in err and "alice" in err
    assert (await ctl(broker, "vhosts", "delete", "staging"))[0] == 0
    code, rows, _ = await ctl(broker, "vhosts", "list", json_output=True)
    assert [row["name"] for row in rows] == ["/"]


async def test_policies_set_list_and_clear(broker):
    code, _, err = await ctl(broker, "policies", "set", "cap", "^capped$",
                             '{"max-length": 2}', "--priority", "4", "--apply-to", "queues")
    assert code == 0, err
    code, _, err = await ctl(broker, "policies", "set", "ops", ".*", '{"message-ttl": 5000}',
                             "--operator")
    assert code == 0, err
    assert (await ctl(broker, "queues", "declare", "capped"))[0] == 0
    await asyncio.to_thread(publish, broker, "", "capped", 5)
    queue = next(q for q in broker.core.queues.vhost("/").queues.values()
                 if q.name == "capped")
    assert queue.ready_count == 2 and queue.settings.message_ttl_ms == 5000
    code, rows, _ = await ctl(broker, "policies", "list", "--vhost", "/", json_output=True)
    assert [(r["name"], r["priority"], r["apply-to"]) for r in rows] == [("cap", 4, "queues")]
    code, table, _ = await ctl(broker, "policies", "list", "--operator")
    assert rows_of(table)[1][:3] == ["/", "ops", ".*"]
    code, _, err = await ctl(broker, "policies", "set", "bad", ".*", "{not json")
    assert code == 1 and "not JSON" in err
    code, _, err = await ctl(broker, "policies", "set", "bad", ".*", '{"max-length": "x"}')
    assert code == 1 and "HTTP 400" in err
    assert (await ctl(broker, "policies", "clear", "cap"))[0] == 0
    assert (await ctl(broker, "policies", "clear", "ops", "--operator"))[0] == 0
    code, rows, _ = await ctl(broker, "policies", "list", json_output=True)
    assert rows == [] and queue.settings.max_length is None


async def test_users_add_refuses_an_existing_user_and_set_password_and_tags_change_one(
        broker):
    """As rabbitmqctl add_user / change_password / set_user_tags: adding a user that
    exists changes nothing; the password and the tags each change without the other."""
    assert (await ctl(broker, "users", "add", "bob", "first", "--tags",
                      "monitoring,management"))[0] == 0
    code, out, err = await ctl(broker, "users", "add", "bob", "second")
    assert code == 1 and "user 'bob' already exists" in err and out == ""
    auth = broker.core.auth
    assert auth.authenticate("bob", "first", "127.0.0.1").tags == ("monitoring", "management")

    assert (await ctl(broker, "users", "set-password", "bob", "second"))[0] == 0
    user = auth.authenticate("bob", "second", "127.0.0.1")
    assert user.tags == ("monitoring", "management")  # kept
    code, _, err = await ctl(broker, "users", "set-password", "nobody", "x")
    assert code == 1 and "HTTP 404" in err and "nobody" in err

    assert (await ctl(broker, "users", "set-tags", "bob", "administrator", "policymaker")
            )[0] == 0
    assert auth.authenticate("bob", "second", "127.0.0.1").tags == ("administrator",
                                                                    "policymaker")
    assert (await ctl(broker, "users", "set-tags", "bob"))[0] == 0  # no tags: cleared
    code, rows, _ = await ctl(broker, "users", "list", json_output=True)
    assert {"name": "bob", "tags": [], "limits": {}} in rows
    assert auth.authenticate("bob", "second", "127.0.0.1").tags == ()  # password kept
    code, _, err = await ctl(broker, "users", "set-tags", "nobody", "monitoring")
    assert code == 1 and "HTTP 404" in err


def hold_unacked(broker: Broker, ready: asyncio.Event, release: asyncio.Event,
                 loop: asyncio.AbstractEventLoop) -> None:
    """3 messages into "work", one fetched and left unacked until `release`, and a
    consumer on "busy" with prefetch 0 messages."""
    parameters = pika.ConnectionParameters(
        "127.0.0.1", broker.ports["amqp"], client_properties={"connection_name": "worker-1"})
    with pika.BlockingConnection(parameters) as connection:
        channel = connection.channel()
        channel.queue_declare("work")
        channel.queue_declare("busy")
        for i in range(3):
            channel.basic_publish("", "work", b"m%d" % i)
        channel.basic_get("work")
        channel.basic_consume("busy", lambda *delivery: None)
        loop.call_soon_threadsafe(ready.set)
        while not release.is_set():
            connection.process_data_events(time_limit=0.05)


async def test_queues_with_ready_unacked_consumers_and_connections(broker):
    ready, release = asyncio.Event(), asyncio.Event()
    worker = asyncio.create_task(asyncio.to_thread(
        hold_unacked, broker, ready, release, asyncio.get_running_loop()))
    try:
        await asyncio.wait_for(ready.wait(), TIMEOUT_S)
        code, table, err = await ctl(broker, "queues", "list")
        assert code == 0, err
        lines = rows_of(table)
        assert lines[0] == ["vhost", "name", "type", "messages", "ready", "unacked",
                            "consumers"]
        assert ["/", "work", "classic", "3", "2", "1", "0"] in lines
        assert ["/", "busy", "classic", "0", "0", "0", "1"] in lines
        code, rows, _ = await ctl(broker, "connections", "list", json_output=True)
        [connection] = rows
        assert connection["user_provided_name"] == "worker-1"
        code, rows, _ = await ctl(broker, "connections", "list", "--vhost", "/",
                                  json_output=True)
        assert [row["id"] for row in rows] == [connection["id"]]  # /api/vhosts/%2F/connections
        code, table, _ = await ctl(broker, "connections", "list")
        assert "worker-1" in rows_of(table)[1]
        code, table, _ = await ctl(broker, "consumers", "list")
        assert rows_of(table)[1][:2] == ["/", "busy"]
        code, out, _ = await ctl(broker, "connections", "close", str(connection["id"]),
                                 "--reason", "maintenance")
        assert code == 0 and out.strip() == "ok"
    finally:
        release.set()
        await asyncio.gather(worker, return_exceptions=True)
    code, rows, _ = await ctl(broker, "connections", "list", json_output=True)
    assert rows == []
    code, table, _ = await ctl(broker, "queues", "list", "--vhost", "/")
    assert ["/", "work", "classic", "3", "3", "0", "0"] in rows_of(table)  # requeued


async def test_streams_and_lag(broker):
    args = {"host": "127.0.0.1", "port": broker.ports["stream"], "username": "guest",
            "password": "guest"}
    async with Producer(**args) as producer:
        await producer.create_stream("events")
        for i in range(4):
            await producer.send_wait("events", AMQPMessage(body=b"%d" % i))
    broker.core.store_offset("/", "events", 0, "reporting", 0)
    code, table, _ = await ctl(broker, "streams", "list")
    assert code == 0 and rows_of(table)[1][:4] == ["/", "events", "1", "4"]
    code, rows, _ = await ctl(broker, "lag", "events", json_output=True)
    assert rows == [{"vhost": "/", "stream": "events", "partition": 0,
                     "reference": "reporting", "offset": 0, "lag": 3}]
    assert (await ctl(broker, "streams", "add", "more", "--partitions", "2"))[0] == 0
    code, rows, _ = await ctl(broker, "queues", "list", json_output=True)
    assert sorted(row["name"] for row in rows) == ["events", "more"]
    assert (await ctl(broker, "queues", "delete", "events"))[0] == 0
    assert (await ctl(broker, "streams", "delete", "more"))[0] == 0
    assert broker.core.streams.list() == []


async def test_streams_tiering_shows_the_tier_its_counters_and_each_partition(tmp_path):
    async with tiered_broker(tmp_path) as broker:
        tiering = broker.core.tiering
        assert tiering is not None
        service = broker.core.streams.service("/", STREAM)
        code, table, err = await ctl(broker, "streams", "tiering", "--vhost", "/")
        assert code == 0, err
        lines = table.splitlines()
        assert lines[0] == f"tier: {tmp_path / 'tier'}"
        assert rows_of(table)[1][:5] == ["uploads", "uploaded_bytes", "upload_lag_bytes",
                                         "errors", "deletes_pending"]
        assert rows_of(table)[2] == [str(tiering.stats.uploads),
                                     str(tiering.stats.uploaded_bytes), "0", "0", "0", "0",
                                     "0"]  # nothing deleted, nothing fenced
        assert rows_of(table)[-1] == [
            "/", STREAM, "0", str(service.size_bytes - service.tiered_bytes),
            str(service.tiered_bytes), str(len(service.tiered_records)),
            str(service.local_first_offset)]
        code, shown, _ = await ctl(broker, "streams", "tiering", json_output=True)
        assert [r["key"] for r in shown["partitions"][0]["records"]] == [
            r.key for r in service.tiered_records]


async def test_streams_tiering_without_a_tier(broker):
    code, table, _ = await ctl(broker, "streams", "tiering")
    assert code == 0 and table.splitlines()[0] == "tier: none (every stream is on local disk)"


async def test_overview(broker):
    code, table, err = await ctl(broker, "overview", "show")
    assert code == 0, err
    header, values = rows_of(table)
    assert header == ["version", "node", "connections", "channels", "queues", "consumers",
                      "messages", "ready", "unacked"]
    assert values[1].startswith("mainstem@")


async def test_unreachable_broker_exits_2():
    code, _, err = await run("ctl", "--url", "http://admin:s3cret@127.0.0.1:9", "vhosts",
                             "list")
    assert code == 2 and "cannot reach http://127.0.0.1:9:" in err  # never the credentials
    assert "s3cret" not in err and "admin" not in err


async def test_bad_usage_exits_2_with_the_groups_actions():
    code, _, err = await run("ctl", "queues")
    assert code == 2 and "ACTION" in err
    code, _, err = await run("ctl", "queues", "declare", "q", "--argument", "novalue")
    assert code != 0 and "KEY=VALUE" in err


def publish(broker: Broker, exchange: str, routing_key: str, count: int) -> None:
    parameters = pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"])
    with pika.BlockingConnection(parameters) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for i in range(count):
            channel.basic_publish(exchange, routing_key, b"m%d" % i)


async def test_declare_purge_and_delete_queues(broker):
    code, out, err = await ctl(broker, "queues", "declare", "orders", "--argument",
                               "x-max-length=100", "--argument", "x-overflow=reject-publish")
    assert code == 0 and out.strip() == "ok", err
    await asyncio.to_thread(publish, broker, "", "orders", 3)
    code, rows, _ = await ctl(broker, "queues", "list", "--vhost", "/", json_output=True)
    [orders] = [row for row in rows if row["name"] == "orders"]
    assert orders["arguments"] == {"x-max-length": 100, "x-overflow": "reject-publish"}
    assert (orders["durable"], orders["auto_delete"], orders["messages_ready"]) == (True, False,
                                                                                     3)
    code, _, err = await ctl(broker, "queues", "declare", "orders", "--no-durable")
    assert code == 1 and "durable" in err  # inequivalent to the existing queue
    code, _, err = await ctl(broker, "queues", "delete", "orders", "--if-empty")
    assert code == 1 and "HTTP 400" in err
    assert (await ctl(broker, "queues", "purge", "orders"))[0] == 0
    code, table, _ = await ctl(broker, "queues", "list")
    assert ["/", "orders", "classic", "0", "0", "0", "0"] in rows_of(table)
    assert (await ctl(broker, "queues", "delete", "orders", "--if-empty"))[0] == 0
    code, rows, _ = await ctl(broker, "queues", "list", json_output=True)
    assert "orders" not in [row["name"] for row in rows]
    assert (await ctl(broker, "queues", "declare", "log", "--type", "stream"))[0] == 0
    assert broker.core.streams.find("/", "log") is not None


async def test_exchanges_and_bindings(broker):
    assert (await ctl(broker, "exchanges", "declare", "events", "--type", "topic"))[0] == 0
    assert (await ctl(broker, "queues", "declare", "audit"))[0] == 0
    code, _, err = await ctl(broker, "bindings", "declare", "events", "audit",
                             "--routing-key", "order.*")
    assert code == 0, err
    code, table, _ = await ctl(broker, "bindings", "list")
    assert ["/", "events", "audit", "queue", "order.*"] in rows_of(table)
    code, table, _ = await ctl(broker, "exchanges", "list", "--vhost", "/")
    assert ["/", "events", "topic", "True", "False"] in rows_of(table)
    await asyncio.to_thread(publish, broker, "events", "order.created", 2)
    await asyncio.to_thread(publish, broker, "events", "invoice.sent", 1)
    code, rows, _ = await ctl(broker, "queues", "list", json_output=True)
    assert [row["messages_ready"] for row in rows if row["name"] == "audit"] == [2]
    assert (await ctl(broker, "exchanges", "delete", "events"))[0] == 0
    code, rows, _ = await ctl(broker, "exchanges", "list", json_output=True)
    assert "events" not in [row["name"] for row in rows]


FIXTURES = Path(__file__).parent / "fixtures"


async def test_definitions_export_and_import(broker, tmp_path):
    """A RabbitMQ 3.10 definitions file imports; what mainstem exports imports back."""
    rabbit = FIXTURES / "rabbitmq-3.10-definitions.json"
    code, out, err = await ctl(broker, "definitions", "import", str(rabbit))
    assert code == 0 and out.strip() == "ok", err
    code, rows, _ = await ctl(broker, "users", "list", json_output=True)
    assert {"ops", "billing", "legacy"} <= {row["name"] for row in rows}
    code, rows, _ = await ctl(broker, "permissions", "list", "billing", json_output=True)
    assert rows == [{"user": "billing", "vhost": "shop", "configure": "^billing\\.",
                     "write": ".*", "read": "^billing\\."}]

    exported = tmp_path / "mainstem.json"
    code, _, err = await ctl(broker, "definitions", "export", str(exported))
    assert code == 0 and "written" in err
    definitions = json.loads(exported.read_text())
    expected = json.loads(rabbit.read_text())
    for kind, keys in (("queues", ("vhost", "name", "durable", "arguments")),
                       ("exchanges", ("vhost", "name", "type")),
                       ("bindings", ("vhost", "source", "destination", "routing_key"))):
        wanted = [[row[key] for key in keys] for row in expected[kind]]
        assert wanted, kind  # the fixture has some of each
        got = [[row[key] for key in keys] for row in definitions[kind]]
        assert [row for row in wanted if row not in got] == [], kind

    for user in ("ops", "billing", "legacy"):
        assert (await ctl(broker, "users", "delete", user))[0] == 0
    assert (await ctl(broker, "vhosts", "delete", "shop"))[0] == 0
    code, _, err = await ctl(broker, "definitions", "import", str(exported))
    assert code == 0, err
    code, rows, _ = await ctl(broker, "vhosts", "list", json_output=True)
    assert "shop" in [row["name"] for row in rows]
    code, out, _ = await run("ctl", "--url", f"http://127.0.0.1:{broker.ports['admin']}",
                             "definitions", "export")  # to stdout
    assert json.loads(out)["users"] == definitions["users"]


async def test_importing_a_file_that_is_not_json_fails_with_its_name(broker, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    code, _, err = await ctl(broker, "definitions", "import", str(bad))
    assert code == 1 and "bad.json is not JSON" in err


async def test_importing_a_rabbitmq_3_10_8_export_prints_what_it_ignored(broker):
    code, out, err = await ctl(broker, "definitions", "import",
                               str(FIXTURES / "rabbitmq-3.10.8-migration.json"))
    assert code == 0 and out.strip() == "ok", err
    assert "warning: policy 'ha-all' in vhost '/': ignored ha-mode, ha-sync-mode" in err
    assert err.count("warning: ") == 3
