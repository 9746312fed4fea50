"""The data source over TLS against a broker whose stream listener asks for a client
certificate, with certificates made for the test, and passwords from an option or a file."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import ssl
import threading
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from mainstem.client.stream import Endpoint, StreamClient, StreamClientError, Tls
from mainstem.config import ServerConfig, TlsConfig
from mainstem.spark.options import SourceError, SourceOptions
from mainstem.testing import ThreadedBroker
from tests.support.tls_certs import Certificates, make_certificates

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_url(tmp_path_factory, certs: Certificates) -> Iterator[str]:
    """A TLS URL with a wrong password: the tests give the right one by option or file."""
    data = tmp_path_factory.mktemp("broker")
    config = dataclasses.replace(
        ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=data),
        tls=TlsConfig(certs.server_cert, certs.server_key, certs.ca, "required"))
    with ThreadedBroker(data, config=config) as broker:
        port = broker.ports["stream/tls"]
        with StreamClient(Endpoint("localhost", port, "guest", "guest", "/",
                                   _tls(certs))) as client:
            client.create_stream("secure")
            publisher = 0
            client.declare_publisher(publisher, "seed", "secure")
            client.publish(publisher, [(i + 1, f"s{i}".encode()) for i in range(30)])
        yield f"rabbitmq-stream+tls://guest:wrong@localhost:{port}/%2F"


def _tls(certs: Certificates) -> Tls:
    return Tls(str(certs.ca), str(certs.client_cert), str(certs.client_key))


def _ssl_options(certs: Certificates) -> dict[str, str]:
    return {"ssl.cafile": str(certs.ca), "ssl.certfile": str(certs.client_cert),
            "ssl.keyfile": str(certs.client_key)}


def test_spark_reads_and_writes_over_tls_with_a_password_file(
        spark: SparkSession, tls_url: str, certs: Certificates, tmp_path) -> None:
    secret = tmp_path / "password"
    secret.write_text("guest\n")
    options = {"url": tls_url, "passwordFile": str(secret), **_ssl_options(certs)}
    rows = spark.read.format("mainstem").options(stream="secure", **options).load().collect()
    assert len(rows) == 30 and {r.stream for r in rows} == {"secure"}
    (spark.createDataFrame([("w",)], "value STRING").write.format("mainstem")
     .options(stream="secure", **options).mode("append").save())
    again = spark.read.format("mainstem").options(stream="secure", **options,
                                                  password="guest")
    with pytest.raises(Exception, match="'password' or 'passwordFile', not both"):
        again.load()
    by_option = {**options, "password": "guest"}
    del by_option["passwordFile"]
    assert spark.read.format("mainstem").options(stream="secure", **by_option).load().count() \
        == 31


def test_tls_failures_say_what_failed(spark: SparkSession, tls_url: str,
                                      certs: Certificates) -> None:
    plain = {"url": tls_url, "password": "guest"}
    with pytest.raises(Exception, match=r"TLS with localhost:.* failed: .*CERTIFICATE_VERIFY"):
        spark.read.format("mainstem").options(stream="secure", **plain).load().collect()
    wrong = {**plain, **_ssl_options(certs), "password": "nope"}
    with pytest.raises(Exception, match="authentication failed for user 'guest'"):
        spark.read.format("mainstem").options(stream="secure", **wrong).load().collect()
    with pytest.raises(SourceError, match=r"the ssl\.\* options need a rabbitmq-stream\+tls"):
        SourceOptions.parse({"url": "rabbitmq-stream://h:5552/%2F", "stream": "s",
                             "ssl.cafile": str(certs.ca)})


def test_a_missing_client_certificate_or_a_plain_connection_is_named(
        spark: SparkSession, tls_url: str, certs: Certificates) -> None:
    """Both used to say only "the server closed the connection"."""
    no_certificate = {"url": tls_url, "password": "guest", "ssl.cafile": str(certs.ca)}
    with pytest.raises(Exception, match=r"TLS with localhost:\d+: the server closed the "
                                        r"connection right after the handshake, before "
                                        r"answering, as a server that requires a client "
                                        r"certificate does when it gets none"):
        spark.read.format("mainstem").options(stream="secure", **no_certificate).load().collect()
    plain = tls_url.replace("rabbitmq-stream+tls://", "rabbitmq-stream://")
    with pytest.raises(Exception, match=r"the server closed the connection before answering: "
                                        r"localhost:\d+ speaks TLS; use a rabbitmq-stream\+tls:"):
        spark.read.format("mainstem").options(stream="secure", url=plain,
                                              password="guest").load().collect()


def test_the_alert_a_tls_server_sends_is_named(certs: Certificates) -> None:
    """A server that answers a missing client certificate with TLS 1.3's alert, as
    RabbitMQ's does (the broker's asyncio listener closes without one): the client used to
    raise the bare ssl error, from the send or the read that met it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.server_cert, certs.server_key)
    context.load_verify_locations(certs.ca)
    context.verify_mode = ssl.CERT_REQUIRED
    with socket.create_server(("127.0.0.1", 0)) as listener:
        def refuse_one() -> None:
            connection, _ = listener.accept()
            with connection, contextlib.suppress(ssl.SSLError):  # no certificate: refused
                context.wrap_socket(connection, server_side=True)

        server = threading.Thread(target=refuse_one)
        server.start()
        port = listener.getsockname()[1]
        with pytest.raises(StreamClientError, match=rf"TLS with localhost:{port} failed: the "
                                                    "server sent the TLS alert 'certificate "
                                                    "required'"):
            StreamClient(Endpoint("localhost", port, "guest", "guest", "/", Tls(str(certs.ca))))
        server.join(10)


def test_credentials_stay_out_of_reprs() -> None:
    options = SourceOptions.parse({"url": "rabbitmq-stream+tls://alice:s3cret@h/%2F",
                                   "streamPattern": "s.*",
                                   "adminUrl": "https://alice:s3cret@h:15671"})
    assert options.endpoint.password == "s3cret" and options.endpoint.port == 5551
    assert "s3cret" not in repr(options) and "alice" in repr(options)
    with pytest.raises(StreamClientError) as caught:
        StreamClient(dataclasses.replace(options.endpoint, host="127.0.0.1", port=1))
    assert "s3cret" not in str(caught.value)
