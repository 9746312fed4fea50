"""Exhaustion and login abuse: silent sockets are reaped on every listener, connections are
limited by default, and wrong logins neither slow durable publishing nor reveal users."""

from __future__ import annotations

import asyncio
import dataclasses
import resource
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aio_pika
import aiohttp
import pytest
from rstream import AMQPMessage, Producer

from mainstem import Broker
from mainstem.broker.login_throttle import (
    MAX_PENALTY_FACTOR,
    MAX_TRACKED,
    LoginThrottle,
)
from mainstem.client.events import EventsClient
from mainstem.client.iggy import IggyClient
from mainstem.client.segment import SegmentClient, SegmentClientError
from mainstem.config import ConfigError, ServerConfig, load_config
from mainstem.server import default_max_connections
from tests.support.server_process import kill, start_server, wait_for_event

HANDSHAKE_MS = 500
TIMEOUT_S = 10
LISTENERS = ["stream", "amqp", "iggy", "bson", "segment", "admin"]
# What a client sends before going quiet: a protocol header, half an HTTP request.
PARTIAL_HANDSHAKES = {
    "amqp": b"AMQP\x00\x00\x09\x01",
    "admin": b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\n",
}


def config(tmp_path: Path, *, handshake_ms: int = 10_000, delay_ms: int = 1000,
           failures_per_minute: int = 30, **limits: object) -> ServerConfig:
    defaults = ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=tmp_path / "data")
    auth = dataclasses.replace(defaults.auth, failed_login_delay_ms=delay_ms,
                               failed_logins_per_minute=failures_per_minute)
    return dataclasses.replace(defaults, handshake_timeout_ms=handshake_ms, auth=auth, **limits)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with Broker(config=config(tmp_path, handshake_ms=HANDSHAKE_MS)) as running:
        yield running


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": aiohttp.encode_basic_auth(user, password)}


def admin_url(broker: Broker, path: str = "/api/overview") -> str:
    return f"http://127.0.0.1:{broker.ports['admin']}{path}"


# -- handshake timeout ----------------------------------------------------------------


@pytest.mark.parametrize("listener", LISTENERS)
@pytest.mark.parametrize("sends", ["nothing", "a partial handshake"])
async def test_a_socket_that_does_not_log_in_is_closed(
    broker: Broker, listener: str, sends: str
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.ports[listener])
    started = time.monotonic()
    if sends != "nothing":
        writer.write(PARTIAL_HANDSHAKES.get(listener, b"\x00"))
    while await asyncio.wait_for(reader.read(65536), TIMEOUT_S):
        pass  # the server's own handshake frames, then the close
    assert time.monotonic() - started >= HANDSHAKE_MS / 1000 * 0.9
    writer.close()
    await until(lambda: not broker.connections)


async def test_clients_that_logged_in_outlive_the_handshake_timeout(tmp_path: Path) -> None:
    """Every protocol tells the server when its client has logged in (ctx.identify)."""
    handshake_ms = 1000  # room for the first login's password hash on a busy machine
    async with Broker(config=config(tmp_path, handshake_ms=handshake_ms)) as broker:
        await stay_logged_in(broker, handshake_ms / 1000 * 1.5)


async def stay_logged_in(broker: Broker, seconds: float) -> None:
    ports = broker.ports
    amqp = await aio_pika.connect(broker.urls["amqp"])
    stream = Producer("127.0.0.1", port=ports["stream"], username="guest", password="guest")
    await stream.start()
    await stream.create_stream("kept-stream")  # over a connection rstream then closes
    await stream.send_wait("kept-stream", AMQPMessage(body=b"before"))
    iggy = await IggyClient.connect("127.0.0.1", ports["iggy"])
    await iggy.login("guest", "guest")
    bson = await EventsClient.connect("127.0.0.1", ports["bson"], "guest", "guest")
    segment = await SegmentClient.connect("127.0.0.1", ports["segment"])
    try:
        await asyncio.sleep(seconds)
        channel = await amqp.channel()
        await channel.declare_queue("kept-queue")
        await stream.send_wait("kept-stream", AMQPMessage(body=b"after"))
        await iggy.ping()
        await bson.publish("kept-stream", {"n": 1})
        await segment.create("/kept/0")
        listeners = sorted(c.ctx.listener for c in broker.connections.list())
        assert listeners == sorted(LISTENERS[:-1]), listeners
    finally:
        await amqp.close()
        await iggy.close()
        await stream.close()
        await bson.close()
        await segment.close()


# -- connection limit -----------------------------------------------------------------


def test_default_limit_leaves_descriptors_for_the_broker_files() -> None:
    assert default_max_connections(1024) == 672  # (1024 - 128) * 3/4
    assert default_max_connections(65536) == 49056
    assert default_max_connections(100) == 1


def test_connection_limit_defaults_from_the_descriptor_limit(tmp_path: Path) -> None:
    descriptors = 200
    log_path = tmp_path / "server.log"
    process = start_server(
        tmp_path / "data", log_path, "--max-unauthenticated-connections", "0",
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (descriptors, descriptors)),
    )
    try:
        started = wait_for_event(process, log_path, "broker.started", after_pid=process.pid)
        limit = default_max_connections(descriptors)
        assert started["max_connections"] == limit
        asyncio.run(fill_to_the_limit(started["ports"], limit))
    finally:
        kill(process)


async def fill_to_the_limit(ports: dict[str, int], limit: int) -> None:
    """A real client, then silent sockets up to `limit`: the next socket is closed at once,
    on a protocol and on HTTP, while the client keeps working."""
    amqp = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{ports['amqp']}/")
    async with amqp:
        channel = await amqp.channel()  # publisher confirms: each publish waits for its ack
        queue = await channel.declare_queue("limited", durable=True)
        silent = [await asyncio.open_connection("127.0.0.1", ports["iggy"])
                  for _ in range(limit - 1)]
        # The same listener: its accept queue keeps the order of the connects.
        reader, writer = await asyncio.open_connection("127.0.0.1", ports["iggy"])
        assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""
        writer.close()
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientError):
                await http.get(f"http://127.0.0.1:{ports['admin']}/api/overview",
                               headers=basic("guest", "guest"))
        await channel.default_exchange.publish(aio_pika.Message(b"still here"), "limited")
        assert (await queue.get(timeout=TIMEOUT_S)).body == b"still here"
        for _, silent_writer in silent:
            silent_writer.close()


# -- connections not logged in --------------------------------------------------------

# Small budgets: 4 connections not logged in per address, 6 in all, 9 connections in all;
# no handshake timeout during the test.
BUDGETS = {"max_connections": 9, "max_unauthenticated_per_address": 4,
           "max_unauthenticated_connections": 6, "handshake_ms": 60_000}


async def silent_sockets(port: int, count: int, address: str = "127.0.0.1"
                         ) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    return [await asyncio.open_connection("127.0.0.1", port, local_addr=(address, 0))
            for _ in range(count)]


def not_logged_in(broker: Broker) -> int:
    return sum(1 for c in broker.connections.list() if c.ctx.user is None)


async def closed_by_the_broker(sockets: list[tuple[asyncio.StreamReader,
                                                    asyncio.StreamWriter]]) -> None:
    for reader, _ in sockets:
        assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""


async def test_silent_sockets_from_one_address_cannot_keep_its_clients_out(
    tmp_path: Path,
) -> None:
    """More silent sockets than the connection limit, from the clients' own address: the
    oldest beyond the address's budget are closed, and real clients log in and work."""
    async with Broker(config=config(tmp_path, **BUDGETS)) as broker:
        silent = await silent_sockets(broker.ports["iggy"], 9)
        await closed_by_the_broker(silent[:5])  # the oldest, beyond the 4 of the budget
        amqp = await aio_pika.connect(broker.urls["amqp"])
        async with amqp, Producer("127.0.0.1", port=broker.ports["stream"],
                                  username="guest", password="guest") as producer:
            assert not_logged_in(broker) <= 4
            # Clients that logged in are not in the budget: more silent sockets leave them be.
            silent += await silent_sockets(broker.ports["segment"], 8)
            await closed_by_the_broker(silent[5:13])
            assert not_logged_in(broker) == 4
            await producer.create_stream("still-served")
            await producer.send_wait("still-served", AMQPMessage(body=b"stored"))
            channel = await amqp.channel()
            queue = await channel.declare_queue("still-served-queue")
            await channel.default_exchange.publish(aio_pika.Message(b"routed"), queue.name)
            assert (await queue.get(timeout=TIMEOUT_S)).body == b"routed"
        for _, writer in silent:
            writer.close()


async def test_silent_sockets_from_many_addresses_are_capped_in_total(tmp_path: Path) -> None:
    async with Broker(config=config(tmp_path, **BUDGETS)) as broker:
        port = broker.ports["iggy"]
        silent = [socket for address in ("127.0.0.2", "127.0.0.3", "127.0.0.4")
                  for socket in await silent_sockets(port, 3, address)]
        await closed_by_the_broker(silent[:3])  # the oldest beyond the 6 in all
        await until(lambda: not_logged_in(broker) == 6)
        async with Producer("127.0.0.1", port=broker.ports["stream"],
                            username="guest", password="guest") as producer:
            await producer.create_stream("served")
            await producer.send_wait("served", AMQPMessage(body=b"stored"))
        iggy = await IggyClient.connect("127.0.0.1", broker.ports["iggy"])
        await iggy.login("guest", "guest")
        await iggy.ping()
        await iggy.close()
        assert not_logged_in(broker) <= 6
        for _, writer in silent:
            writer.close()


async def test_admin_http_sockets_are_in_the_budget_until_a_request_logs_in(
    tmp_path: Path,
) -> None:
    async with Broker(config=config(tmp_path, **BUDGETS)) as broker:
        port = broker.ports["admin"]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await http_overview(reader, writer)  # a keep-alive connection that logged in
        silent = await silent_sockets(port, 6)
        await closed_by_the_broker(silent[:2])  # the oldest beyond the 4 of the budget
        await http_overview(reader, writer)  # the connection that logged in stayed open
        writer.close()
        for _, silent_writer in silent:
            silent_writer.close()


async def http_overview(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    credentials = basic("guest", "guest")["Authorization"]
    writer.write(f"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 f"Authorization: {credentials}\r\n\r\n".encode())
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT_S)
    assert head.startswith(b"HTTP/1.1 200"), head
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    await reader.readexactly(length)


# -- failed logins ----------------------------------------------------------------------


async def confirm_latency(producer: Producer, seconds: float) -> float:
    """The median time to a publish confirm (after its fsync), publishing for `seconds`."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        await producer.send_wait("durable", AMQPMessage(body=b"%d" % len(latencies)))
        latencies.append(time.perf_counter() - started)
    return statistics.median(latencies)


async def test_a_wrong_login_flood_does_not_delay_publish_confirms(tmp_path: Path) -> None:
    # No delay and no per-address limit: every wrong login costs the broker a password hash.
    settings = config(tmp_path, delay_ms=0, failures_per_minute=1_000_000)
    async with Broker(config=settings) as broker, Producer(
        "127.0.0.1", port=broker.ports["stream"], username="guest", password="guest"
    ) as producer:
        await producer.create_stream("durable")
        quiet = await confirm_latency(producer, 0.5)
        hashed = 0

        async def wrong_logins(http: aiohttp.ClientSession) -> None:
            nonlocal hashed
            while True:
                async with http.get(admin_url(broker), headers=basic("guest", "wrong")) as reply:
                    assert reply.status == 401
                hashed += 1

        async with aiohttp.ClientSession() as http:
            flood = [asyncio.ensure_future(wrong_logins(http)) for _ in range(8)]
            await asyncio.sleep(0.3)
            try:
                flooded = await confirm_latency(producer, 1.5)
            finally:
                for task in flood:
                    task.cancel()
                await asyncio.gather(*flood, return_exceptions=True)
    assert hashed >= 5, "the flood did not run"
    print(f"confirm p50 {quiet * 1000:.1f} ms, {flooded * 1000:.1f} ms under {hashed} logins")
    assert flooded < max(10 * quiet, 0.02) and flooded < 0.2, (quiet, flooded, hashed)


async def timed(attempt: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await attempt()
    return time.perf_counter() - started


async def test_unknown_and_known_users_are_refused_alike(tmp_path: Path) -> None:
    delay_s = 0.2
    async with Broker(config=config(tmp_path, delay_ms=int(delay_s * 1000))) as broker:
        async def refused(user: str) -> None:
            with pytest.raises(SegmentClientError, match="invalid credentials"):
                await SegmentClient.connect("127.0.0.1", broker.ports["segment"], user, "wrong")

        known, unknown = [], []
        for _ in range(3):  # interleaved: a change in the machine's load hits both alike
            known.append(await timed(lambda: refused("guest")))
            unknown.append(await timed(lambda: refused("nobody")))
    assert min(known + unknown) >= delay_s
    # The unknown name pays a password hash too: its answer is no faster than a known one's.
    hash_s = statistics.median(known) - delay_s
    assert statistics.median(unknown) - delay_s > hash_s / 2, (known, unknown)


async def test_wrong_logins_for_one_user_lock_out_no_correct_password(tmp_path: Path) -> None:
    """Eight loops of wrong logins for guest from this address: alice, never logged in
    (so her password needs the hash), gets in at once, and so does guest's own right
    password, over AMQP and the stream protocol."""
    async with Broker(config=config(tmp_path, delay_ms=50, failures_per_minute=3)) as broker:
        broker.core.auth.add_user("alice", "alice-secret")
        broker.core.auth.set_permissions("alice", "/")
        refused = 0

        async def wrong_logins(http: aiohttp.ClientSession) -> None:
            nonlocal refused
            while True:
                async with http.get(admin_url(broker), headers=basic("guest", "wrong")) as reply:
                    assert reply.status == 401
                refused += 1

        async with aiohttp.ClientSession() as http:
            flood = [asyncio.ensure_future(wrong_logins(http)) for _ in range(8)]
            try:
                await until(lambda: refused >= 6)  # twice the budget: guest's is spent
                started = time.perf_counter()
                amqp = await aio_pika.connect(
                    f"amqp://alice:alice-secret@127.0.0.1:{broker.ports['amqp']}/")
                await amqp.close()
                alice = time.perf_counter() - started
                started = time.perf_counter()
                amqp = await aio_pika.connect(broker.urls["amqp"])
                await amqp.close()
                guest = time.perf_counter() - started
                for user, password in (("alice", "alice-secret"), ("guest", "guest")):
                    async with Producer("127.0.0.1", port=broker.ports["stream"],
                                        username=user, password=password) as producer:
                        await producer.create_stream(f"{user}-stream")
            finally:
                for task in flood:
                    task.cancel()
                await asyncio.gather(*flood, return_exceptions=True)
    print(f"first AMQP logins during the flood: alice {alice * 1000:.0f} ms,"
          f" guest {guest * 1000:.0f} ms ({refused} wrong logins refused)")


async def test_failures_beyond_a_users_budget_are_answered_later(tmp_path: Path) -> None:
    delay_s = 0.2
    settings = config(tmp_path, delay_ms=int(delay_s * 1000), failures_per_minute=3)
    async with Broker(config=settings) as broker:
        async def refused(user: str) -> None:
            with pytest.raises(SegmentClientError, match="invalid credentials"):
                await SegmentClient.connect("127.0.0.1", broker.ports["segment"], user, "x")

        answers = [await timed(lambda: refused("guest")) for _ in range(5)]
        # Two failures beyond the budget of three: twice, then four times the delay.
        assert min(answers[:3]) >= delay_s and answers[3] >= 2 * delay_s
        assert answers[4] >= 4 * delay_s, answers
        # Another user's budget is whole; guest's right password is not refused.
        other = await timed(lambda: refused("alice"))
        assert other < answers[4] - delay_s, (other, answers)
        segment = await SegmentClient.connect("127.0.0.1", broker.ports["segment"])
        await segment.close()
        async with aiohttp.ClientSession() as http, http.get(
            admin_url(broker), headers=basic("guest", "guest")
        ) as reply:
            assert reply.status == 200


def test_failure_budgets_are_per_address_and_user() -> None:
    now = [0.0]
    throttle = LoginThrottle(per_minute=2, clock=lambda: now[0])

    def take(address: str, user: str = "guest") -> tuple[bool, bool, int]:
        attempt = throttle.take(address, user)
        return attempt.within_budget, attempt.fresh, attempt.penalty_factor

    assert take("10.0.0.1") == (True, True, 1)
    throttle.give_back("10.0.0.1", "guest")  # a successful login costs nothing
    assert take("10.0.0.1") == (True, True, 1)
    assert take("10.0.0.1") == (True, False, 1)  # guest failed lately from here
    # Beyond the budget: checked after other addresses' logins, failures answered later.
    assert take("10.0.0.1") == (False, False, 2)
    assert take("::ffff:10.0.0.1") == (False, False, 4)  # the same client
    assert take("10.0.0.1", "alice") == (False, True, 1)  # another user's budget
    assert take("10.0.0.2") == (True, True, 1)  # another address's
    for _ in range(5):
        take("10.0.0.1")
    assert take("10.0.0.1")[2] == MAX_PENALTY_FACTOR
    now[0] = 150.0  # a token every 30 s: the debt (at most 5 tokens here) is paid off
    assert take("10.0.0.1")[2] == 2
    now[0] = 210.0
    assert take("10.0.0.1") == (True, False, 1)
    now[0] = 300.0  # two tokens again: no recent failure
    assert take("10.0.0.1") == (True, True, 1)
    assert take("2001:db8::1")[:2] == (True, True) and take("2001:db8::2")[:2] == (True, False)
    assert take("2001:db8::3") == (False, False, 2)  # one /64, one client


def test_the_failure_budgets_forget_the_oldest_beyond_their_bound() -> None:
    throttle = LoginThrottle(per_minute=1, clock=lambda: 0.0)
    throttle.take("10.0.0.1", "guest")
    assert throttle.take("10.0.0.1", "guest").penalty_factor == 2
    for n in range(MAX_TRACKED):  # one address, as many other users as the table holds
        throttle.take("10.0.0.1", f"user-{n}")
    assert throttle.take("10.0.0.1", "guest").penalty_factor == 1  # forgotten: bounded


# -- HTTP input ---------------------------------------------------------------------------


async def test_non_ascii_basic_credentials_are_unauthorised(broker: Broker) -> None:
    async with aiohttp.ClientSession() as http, http.get(
        admin_url(broker), headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q\u00e9"}
    ) as reply:
        assert reply.status == 401


async def test_deeply_nested_json_is_a_bad_request(broker: Broker) -> None:
    depth = 5000
    body = '{"tags": ' + "[" * depth + "]" * depth + "}"
    async with aiohttp.ClientSession() as http, http.put(
        admin_url(broker, "/api/users/bob"), data=body, headers={
            **basic("guest", "guest"), "Content-Type": "application/json"},
    ) as reply:
        assert reply.status == 400, await reply.text()


async def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


def test_configuration_keys(tmp_path: Path) -> None:
    toml = tmp_path / "mainstem.toml"
    toml.write_text('[limits]\nmax_connections = "auto"\nhandshake_timeout_ms = 2500\n'
                    'max_unauthenticated_per_address = 8\n'
                    'max_unauthenticated_connections = "auto"\n'
                    "[auth]\nfailed_login_delay_ms = 0\nfailed_logins_per_minute = 5\n")
    loaded = load_config(None, {"MAINSTEM_CONFIG": str(toml)})
    assert (loaded.max_connections, loaded.handshake_timeout_ms) == (None, 2500)
    assert (loaded.max_unauthenticated_per_address,
            loaded.max_unauthenticated_connections) == (8, None)
    from_env = load_config(None, {"MAINSTEM_MAX_UNAUTHENTICATED_CONNECTIONS": "100",
                                  "MAINSTEM_MAX_UNAUTHENTICATED_PER_ADDRESS": "0"})
    assert (from_env.max_unauthenticated_connections,
            from_env.max_unauthenticated_per_address) == (100, 0)
    settings = loaded.core_settings()
    assert (settings.failed_login_delay_s, settings.failed_logins_per_minute) == (0, 5)
    assert load_config(None, {"MAINSTEM_MAX_CONNECTIONS": "0"}).max_connections == 0
    with pytest.raises(ConfigError, match="max_connections"):
        load_config(None, {"MAINSTEM_MAX_CONNECTIONS": "many"})
