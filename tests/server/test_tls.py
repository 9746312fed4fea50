"""TLS twins of the listeners: real rstream and HTTP clients over TLS, with certificates
made by the test, optional and required client certificates."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from pathlib import Path

import aiohttp
import pika
import pytest
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    OffsetType,
    Producer,
    amqp_decoder,
)

from mainstem import Broker
from mainstem.config import ServerConfig, TlsConfig, load_config
from mainstem.tls import TlsSetupError
from tests.support.tls_certs import Certificates, make_certificates

TIMEOUT_S = 15


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def tls_broker(tmp_path: Path, certs: Certificates, verify: str = "none") -> Broker:
    config = dataclasses.replace(
        ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data"),
        tls=TlsConfig(certs.server_cert, certs.server_key, certs.ca, verify),
    )
    return Broker(config=config)


def client_context(certs: Certificates, with_client_cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if with_client_cert:
        context.load_cert_chain(certs.client_cert, certs.client_key)
    return context


async def round_trip(broker: Broker, context: ssl.SSLContext, stream: str) -> list[bytes]:
    args = {"host": "localhost", "port": broker.ports["stream/tls"], "username": "guest",
            "password": "guest", "ssl_context": context}
    async with Producer(**args) as producer:
        await producer.create_stream(stream, exists_ok=True)
        await producer.send_batch(stream, [AMQPMessage(body=b"m%d" % i) for i in range(50)])
        await producer.send_wait(stream, AMQPMessage(body=b"last"))
    received: list[bytes] = []
    done = asyncio.Event()

    async def on_message(message: AMQPMessage, context) -> None:
        received.append(bytes(message.body))
        if len(received) == 51:
            done.set()

    async with Consumer(**args) as consumer:
        await consumer.start()
        await consumer.subscribe(stream, on_message, offset_specification=
                                 ConsumerOffsetSpecification(OffsetType.FIRST),
                                 decoder=amqp_decoder)
        await asyncio.wait_for(done.wait(), TIMEOUT_S)
    return received


async def test_stream_protocol_over_tls(tmp_path, certs):
    async with tls_broker(tmp_path, certs) as broker:
        assert broker.ports["stream/tls"] != broker.ports["stream"]
        assert broker.urls["stream/tls"].startswith("rabbitmq-stream+tls://")
        received = await round_trip(broker, client_context(certs), "secure")
        assert received == [b"m%d" % i for i in range(50)] + [b"last"]
        # the same stream, read over the plain listener: one log under both
        assert broker.core.streams.get("/", "secure").partitions[0].committed_offset == 51


async def test_required_client_certificate(tmp_path, certs):
    async with tls_broker(tmp_path, certs, verify="required") as broker:
        received = await round_trip(broker, client_context(certs, with_client_cert=True), "mtls")
        assert len(received) == 51
        # without a client certificate the handshake fails; the server keeps serving
        reader_writer = asyncio.open_connection(
            "localhost", broker.ports["stream/tls"], ssl=client_context(certs))
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            reader, writer = await asyncio.wait_for(reader_writer, TIMEOUT_S)
            writer.write(b"\x00\x00\x00\x04\x00\x11\x00\x01")
            await writer.drain()
            await asyncio.wait_for(reader.readexactly(1), TIMEOUT_S)
        assert len(await round_trip(
            broker, client_context(certs, with_client_cert=True), "mtls")) >= 51


async def test_management_api_over_https(tmp_path, certs):
    async with tls_broker(tmp_path, certs) as broker:
        url = f"https://localhost:{broker.ports['admin/tls']}/api/overview"
        headers = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
        async with aiohttp.ClientSession() as session, session.get(
                url, ssl=client_context(certs), headers=headers) as response:
            assert response.status == 200
            listeners = {row["protocol"] for row in (await response.json())["listeners"]}
        assert {"stream", "stream/tls", "admin", "admin/tls"} <= listeners


def test_tls_configuration_from_toml_env_and_flags(tmp_path, certs):
    toml = tmp_path / "m.toml"
    toml.write_text(f'[tls]\ncertfile = "{certs.server_cert}"\nverify = "optional"\n'
                    f'cafile = "{certs.ca}"\n[listeners.stream]\ntls_port = 6551\n')
    env = {"MAINSTEM_CONFIG": str(toml), "MAINSTEM_TLS_KEYFILE": str(certs.server_key),
           "MAINSTEM_ADMIN_TLS_PORT": "16671"}
    config = load_config(None, env)
    assert config.tls == TlsConfig(certs.server_cert, certs.server_key, certs.ca, "optional")
    assert config.tls_port("stream") == 6551
    assert config.tls_port("admin") == 16671
    assert load_config(None, {}).tls_port("stream") == 5551
    assert load_config(None, {}).tls.enabled is False


async def test_unreadable_certificate_stops_the_start(tmp_path, certs):
    config = dataclasses.replace(
        ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data"),
        tls=TlsConfig(tmp_path / "missing.pem"),
    )
    with pytest.raises(TlsSetupError, match="cannot load TLS certificates"):
        async with Broker(config=config):
            pass


async def test_pika_over_tls(tmp_path, certs):
    async with tls_broker(tmp_path, certs) as broker:
        port = broker.ports["amqp/tls"]
        assert broker.urls["amqp/tls"].startswith("amqps://")

        def publish_and_get() -> bytes:
            parameters = pika.ConnectionParameters(
                "127.0.0.1", port, ssl_options=pika.SSLOptions(client_context(certs),
                                                               "localhost"))
            connection = pika.BlockingConnection(parameters)
            channel = connection.channel()
            channel.queue_declare("tls-q")
            channel.basic_publish("", "tls-q", b"encrypted")
            body = channel.basic_get("tls-q", auto_ack=True)[2]
            connection.close()
            return body

        assert await asyncio.to_thread(publish_and_get) == b"encrypted"
