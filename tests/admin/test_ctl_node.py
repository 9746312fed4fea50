"""`mainstem ctl status`, `ctl environment` and `ctl policies list`, run as real
subprocesses against a real broker: what rabbitmqctl users reach for first."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mainstem import Broker
from mainstem.config import AuthConfig, ServerConfig, TieringConfig
from tests.admin.test_admin_ctl import ctl, rows_of, run

SECRETS = ("n0t-guest-pw", "tier-s3cret-key")


async def test_status_shows_node_version_uptime_listeners_memory_disk_and_alarms(broker):
    code, status, err = await ctl(broker, "status", json_output=True)
    assert code == 0, err
    assert status["node"].startswith("mainstem@") and status["version"]
    assert status["uptime_s"] >= 0 and status["alarms"] == []
    assert {"protocol": "amqp", "ip_address": "127.0.0.1",
            "port": broker.ports["amqp"]} in status["listeners"]
    assert set(status["memory"]) == {"used", "limit"}
    assert status["disk_free"]["limit"] == broker.config.alarms.disk_free_limit
    code, text, err = await ctl(broker, "status")
    assert code == 0, err
    lines = text.splitlines()
    assert lines[0] == f"Status of node {status['node']}"
    assert f"127.0.0.1:{broker.ports['amqp']}" in text
    assert "Alarms: none" in lines and any(line.startswith("Uptime: ") for line in lines)


async def test_environment_shows_the_effective_configuration_without_secrets(
        tmp_path: Path) -> None:
    defaults = ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data")
    config = dataclasses.replace(
        defaults, workers=0, auth=AuthConfig(default_pass=SECRETS[0]),
        tiering=TieringConfig(url=str(tmp_path / "tier"), secret_access_key=SECRETS[1]))
    async with Broker(config=config) as broker:
        url = f"http://127.0.0.1:{broker.ports['admin']}"
        code, out, err = await run("ctl", "--url", url, "--password", SECRETS[0], "--json",
                                   "environment")
        assert code == 0, err
        assert all(secret not in out for secret in SECRETS)
        code, text, err = await run("ctl", "--url", url, "--password", SECRETS[0],
                                    "environment")
        assert code == 0, err
        lines = text.splitlines()
        assert 'auth.default_pass = "********"' in lines
        assert 'tiering.secret_access_key = "********"' in lines
        assert f'data_dir = "{tmp_path / "data"}"' in lines
        assert 'storage.fsync = "batch"' in lines
        assert all(secret not in text for secret in SECRETS)


async def test_environment_is_for_administrators(broker):
    url = f"http://127.0.0.1:{broker.ports['admin']}"
    assert (await ctl(broker, "users", "add", "watcher", "pw", "--tags", "monitoring"))[0] == 0
    code, _, err = await run("ctl", "--url", url, "--user", "watcher", "--password", "pw",
                             "environment")
    assert code == 1 and "HTTP 401" in err


async def test_policies_list_shows_definitions_as_json(broker):
    code, _, err = await ctl(broker, "policies", "set", "cap", "^capped$",
                             '{"max-length": 2, "overflow": "reject-publish"}')
    assert code == 0, err
    code, table, err = await ctl(broker, "policies", "list")
    assert code == 0, err
    assert '{"max-length": 2, "overflow": "reject-publish"}' in table
    assert "'max-length'" not in table  # never a Python dict


async def test_vhosts_add_sets_metadata_and_list_shows_it(broker):
    code, _, err = await ctl(broker, "vhosts", "add", "orders", "--description", "Orders",
                             "--tags", "prod,eu", "--default-queue-type", "quorum")
    assert code == 0, err
    code, _, err = await ctl(broker, "vhosts", "add", "orders", "--description", "Shop")
    assert code == 0, err
    code, table, err = await ctl(broker, "vhosts", "list")
    assert code == 0, err
    assert rows_of(table)[0] == ["name", "default_queue_type", "tags", "description"]
    assert ["orders", "quorum", "prod,eu", "Shop"] in rows_of(table)
    assert ["/", "classic"] in rows_of(table)
