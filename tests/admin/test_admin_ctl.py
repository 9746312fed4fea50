"""`mainstem ctl` against a real broker's management API (the CLI runs in a thread, as a
separate process would, while the broker serves on the test's event loop)."""

from __future__ import annotations

import asyncio
import json

from rstream import AMQPMessage, Producer

from mainstem import Broker
from mainstem.cli import main


async def ctl(broker: Broker, capsys, *argv: str, json_output: bool = False):
    url = f"http://127.0.0.1:{broker.ports['admin']}"
    flags = ["--url", url, *(["--json"] if json_output else [])]
    code = await asyncio.to_thread(main, ["ctl", *flags, *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if json_output and code == 0 and out.strip() else out), err


async def test_users_vhosts_and_permissions(broker, capsys):
    assert (await ctl(broker, capsys, "vhosts", "add", "staging"))[0] == 0
    code, _, err = await ctl(broker, capsys, "users", "add", "alice", "pw", "--tags", "monitoring")
    assert code == 0, err
    code, _, _ = await ctl(broker, capsys, "permissions", "set", "alice", "--vhost", "staging",
                             "--write", "^$")
    assert code == 0
    code, rows, _ = await ctl(broker, capsys, "permissions", "list", json_output=True)
    assert {"user": "alice", "vhost": "staging", "configure": ".*", "write": "^$",
            "read": ".*"} in rows
    code, table, _ = await ctl(broker, capsys, "users", "list")
    lines = table.splitlines()
    assert lines[0].split() == ["name", "tags"]
    assert ["alice", "monitoring"] in [line.split() for line in lines[1:]]
    assert (await ctl(broker, capsys, "users", "delete", "alice"))[0] == 0
    code, _, err = await ctl(broker, capsys, "users", "delete", "alice")
    assert code == 1 and "HTTP 404" in err and "alice" in err
    assert (await ctl(broker, capsys, "vhosts", "delete", "staging"))[0] == 0
    code, rows, _ = await ctl(broker, capsys, "vhosts", "list", json_output=True)
    assert [row["name"] for row in rows] == ["/"]


async def test_streams_queues_connections_and_lag(broker, capsys):
    args = {"host": "127.0.0.1", "port": broker.ports["stream"], "username": "guest",
            "password": "guest"}
    async with Producer(**args) as producer:
        await producer.create_stream("events")
        for i in range(4):
            await producer.send_wait("events", AMQPMessage(body=b"%d" % i))
        broker.core.store_offset("/", "events", 0, "reporting", 0)

        code, table, _ = await ctl(broker, capsys, "streams", "list")
        assert code == 0 and table.splitlines()[1].split()[:4] == ["/", "events", "1", "4"]
        code, rows, _ = await ctl(broker, capsys, "lag", "events", json_output=True)
        assert rows == [{"vhost": "/", "stream": "events", "partition": 0,
                         "reference": "reporting", "offset": 0, "lag": 3}]
        code, rows, _ = await ctl(broker, capsys, "connections", "list", json_output=True)
        assert [row["protocol"] for row in rows] == ["stream"]
        code, out, _ = await ctl(broker, capsys, "connections", "close", rows[0]["name"])
        assert code == 0 and out.strip() == "ok"
        code, rows, _ = await ctl(broker, capsys, "connections", "list", json_output=True)
        assert rows == []
    assert (await ctl(broker, capsys, "streams", "add", "more", "--partitions", "2"))[0] == 0
    code, rows, _ = await ctl(broker, capsys, "queues", "list", json_output=True)
    assert sorted(row["name"] for row in rows) == ["events", "more"]
    assert (await ctl(broker, capsys, "queues", "delete", "events"))[0] == 0
    assert (await ctl(broker, capsys, "streams", "delete", "more"))[0] == 0
    assert broker.core.streams.list() == []


async def test_unreachable_broker_exits_2(capsys):
    code = await asyncio.to_thread(main, ["ctl", "--url", "http://admin:s3cret@127.0.0.1:9",
                                          "vhosts", "list"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot reach http://127.0.0.1:9:" in err  # never the credentials
    assert "s3cret" not in err and "admin" not in err
