"""The server properties an operator configures ([server_properties], as RabbitMQ's
server_properties) are what AMQP 0-9-1 clients (pika), stream clients (rstream), Iggy's
cluster metadata and the management API report: some client test suites compare `product`
with "RabbitMQ"."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import aiohttp
import pika
from rstream.client import ClientPool

from mainstem import Broker
from mainstem.cli import build_parser
from mainstem.client.iggy import IggyClient
from mainstem.config import load_config
from mainstem.protocols.iggy.codec import Code
from tests.support.server_process import loopback_listener_flags

CONFIGURED = {"product": "RabbitMQ", "version": "4.0.5", "platform": "Erlang/OTP 27",
              "copyright": "the operators", "information": "Licensed under the MPL 2.0",
              "cluster_name": "east"}
TOML = """[server_properties]
product = "RabbitMQ"
version = "4.0.5"
platform = "Erlang/OTP 27"
copyright = "the operators"
"""


def _configured_broker(tmp_path: Path) -> Broker:
    """TOML for most properties, the environment for one, a flag for another."""
    config_path = tmp_path / "mainstem.toml"
    config_path.write_text(TOML)
    args = build_parser().parse_args(["serve", "--config", str(config_path), "--workers", "0",
                                      *loopback_listener_flags(), "--server-information",
                                      CONFIGURED["information"]])
    config = load_config(args, {"MAINSTEM_CLUSTER_NAME": CONFIGURED["cluster_name"]})
    return Broker(tmp_path / "data", config=config)


def _pika_properties(port: int) -> dict[str, object]:
    """From a blocking client: run it off the broker's loop."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        return dict(connection._impl.server_properties)
    finally:
        connection.close()


async def _rstream_properties(port: int) -> dict[str, str]:
    pool = ClientPool("127.0.0.1", port, username="guest", password="guest", vhost="/",
                      frame_max=1 << 20, heartbeat=60, load_balancer_mode=False,
                      max_retries=1)
    client = await pool.get(connection_name="identity")
    try:
        assert client.server_properties is not None
        return dict(client.server_properties)
    finally:
        await pool.close()


async def _iggy_cluster_name(port: int) -> str:
    client = await IggyClient.connect("127.0.0.1", port)
    try:
        await client.login("guest", "guest")
        metadata = await client.request(Code.GET_CLUSTER_METADATA)
    finally:
        await client.close()
    (size,) = struct.unpack_from("<I", metadata)
    return metadata[4:4 + size].decode()


async def _overview(port: int) -> dict[str, object]:
    auth = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    async with (aiohttp.ClientSession(headers=auth) as http,
                http.get(f"http://127.0.0.1:{port}/api/overview") as response):
        return await response.json()


async def test_configured_properties_reach_every_client(tmp_path: Path) -> None:
    async with _configured_broker(tmp_path) as broker:
        amqp = await asyncio.to_thread(_pika_properties, broker.ports["amqp"])
        stream = await _rstream_properties(broker.ports["stream"])
        overview = await _overview(broker.ports["admin"])
        iggy_cluster = await _iggy_cluster_name(broker.ports["iggy"])
    for properties in (amqp, stream):
        assert {key: properties[key] for key in CONFIGURED} == CONFIGURED
    assert amqp["capabilities"]["publisher_confirms"] is True  # type: ignore[index]
    assert (overview["product_name"], overview["product_version"], overview["cluster_name"]
            ) == ("RabbitMQ", "4.0.5", "east")
    assert iggy_cluster == "east"


async def test_the_default_product_is_mainstem(broker: Broker) -> None:
    amqp = await asyncio.to_thread(_pika_properties, broker.ports["amqp"])
    stream = await _rstream_properties(broker.ports["stream"])
    assert amqp["product"] == stream["product"] == "mainstem"
    assert amqp["version"] == stream["version"]
    assert amqp["cluster_name"] == stream["cluster_name"]
