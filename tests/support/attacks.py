"""Three attacks from one address on a running `mainstem serve`, each timing the login of a
real AMQP client (aio-pika) while it lasts: the client must get in, and soon.

- `login_storm`: loops of wrong logins for one user; a user who never logged in before
  (so whose password needs the hash) and the attacked user then log in with theirs.
- `silent_sockets`: more silent sockets than the broker's connection limit; a client then
  logs in.
- `hostile_patterns`: a policy whose pattern backtracks catastrophically (`(a+)+$`), queues
  declared with long names it nearly matches, and the same pattern as a `use_regex` filter.

And storms for tests and `bench/login_storms.py`, each a number of loops in flight from
one source address, counting what they did, while a real client (pika) is timed:

- `WrongLogins`: AMQP wrong logins (raw frames, so a thousand cost this side little),
  each loop opening a new connection once the last is answered or closed.
- `SilentReopens`: sockets that send nothing, each reopened as soon as the broker
  closes it.
- `timed_pika_login`: seconds until a pika client is in (connection and channel open),
  as one of the users `add_users` made.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aio_pika
import aiohttp
import pika

from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.amqp091.encode import encode_method

HOST = "127.0.0.1"
STORM_LOOPS = 8  # concurrent wrong-login loops, as in issue 29
STORM_WRONG_LOGINS = 32  # before timing the logins: the attacked user's budget (30) is spent
LOGIN_DEADLINE_S = 15.0  # a login not in by then counts as kept out
CATASTROPHIC = "(a+)+$"  # hours for a backtracking engine on 40 characters
HOSTILE_NAME_LENGTHS = (27, 128, 254)
ADMIN = aiohttp.BasicAuth("guest", "guest")


@dataclass
class AttackReport:
    name: str
    # What was timed -> seconds until the client was logged in; None: kept out.
    logins: dict[str, float | None] = field(default_factory=dict)
    details: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return not self.errors and None not in self.logins.values()


async def login_storm(ports: dict[str, int]) -> AttackReport:
    report = AttackReport("login-storm")
    users = {"soak-target": "target-secret", "soak-bystander": "bystander-secret"}
    async with aiohttp.ClientSession(auth=ADMIN) as http:
        for user, password in users.items():
            await _admin_put(http, ports, f"/api/users/{user}",
                             {"password": password, "tags": ""})
            await _admin_put(http, ports, f"/api/permissions/%2F/{user}",
                             {"configure": ".*", "write": ".*", "read": ".*"})
    wrong = 0

    async def wrong_logins() -> None:
        nonlocal wrong
        while True:
            with contextlib.suppress(aio_pika.exceptions.AMQPConnectionError):
                connection = await aio_pika.connect(_amqp_url(ports, "soak-target", "wrong"))
                await connection.close()
                report.errors.append("a wrong password was accepted")
            wrong += 1

    started = time.perf_counter()
    loops = [asyncio.ensure_future(wrong_logins()) for _ in range(STORM_LOOPS)]
    try:
        while wrong < STORM_WRONG_LOGINS and time.perf_counter() - started < 60:
            await asyncio.sleep(0.05)
        report.details["storm_s"] = time.perf_counter() - started
        for user, password in reversed(users.items()):  # the bystander first
            report.logins[user] = await _time_login(ports, user, password)
        report.details["wrong_logins"] = wrong
    finally:
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
    return report


async def silent_sockets(ports: dict[str, int], count: int) -> AttackReport:
    report = AttackReport("silent-sockets")
    started = time.perf_counter()
    sockets: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        for _ in range(count):
            try:
                sockets.append(await asyncio.open_connection(HOST, ports["amqp"]))
            except OSError as exc:
                report.errors.append(f"opening silent socket {len(sockets)}: {exc!r}")
                break
        report.details["sockets"] = len(sockets)
        report.details["open_s"] = time.perf_counter() - started
        report.logins["guest"] = await _time_login(ports, "guest", "guest")
        await asyncio.sleep(0.5)  # the closes of the broker have reached this side
        report.details["closed_by_broker"] = sum(reader.at_eof() for reader, _ in sockets)
    finally:
        for _, writer in sockets:
            writer.transport.abort()
    return report


async def hostile_patterns(ports: dict[str, int]) -> AttackReport:
    report = AttackReport("hostile-patterns")
    policy = f"http://{HOST}:{ports['admin']}/api/policies/%2F/soak-hostile"
    async with aiohttp.ClientSession(auth=ADMIN) as http:
        async with http.put(policy, json={"pattern": CATASTROPHIC,
                                          "definition": {"max-length": 5}}) as reply:
            if reply.status >= 300:
                raise RuntimeError(f"PUT {policy}: {reply.status} {await reply.text()}")
        attack = asyncio.ensure_future(_declare_and_filter(http, ports, report))
        try:
            report.logins["guest"] = await _time_login(ports, "guest", "guest")
            await asyncio.wait_for(attack, LOGIN_DEADLINE_S)
        except TimeoutError:
            report.errors.append(f"declares and filter not done in {LOGIN_DEADLINE_S} s")
        finally:
            attack.cancel()
            async with http.delete(policy):
                pass
    return report


async def _declare_and_filter(http: aiohttp.ClientSession, ports: dict[str, int],
                              report: AttackReport) -> None:
    """Queues named to nearly match CATASTROPHIC declared, then listed through it."""
    connection = await aio_pika.connect(_amqp_url(ports, "guest", "guest"))
    async with connection:
        channel = await connection.channel()
        started = time.perf_counter()
        for length in HOSTILE_NAME_LENGTHS:
            await channel.declare_queue("a" * length + "b", exclusive=True)
        report.details["declares_s"] = time.perf_counter() - started
        started = time.perf_counter()
        async with http.get(f"http://{HOST}:{ports['admin']}/api/queues/%2F",
                            params={"name": CATASTROPHIC, "use_regex": "true"}) as reply:
            if reply.status != 200:
                report.errors.append(f"use_regex filter: {reply.status} {await reply.text()}")
        report.details["filter_s"] = time.perf_counter() - started


async def _time_login(ports: dict[str, int], user: str, password: str) -> float | None:
    """Seconds until an AMQP login of `user` works (retried until LOGIN_DEADLINE_S)."""
    started = time.perf_counter()
    while time.perf_counter() - started < LOGIN_DEADLINE_S:
        with contextlib.suppress(aio_pika.exceptions.AMQPConnectionError, ConnectionError,
                                 asyncio.TimeoutError):
            connection = await asyncio.wait_for(
                aio_pika.connect(_amqp_url(ports, user, password)), LOGIN_DEADLINE_S)
            async with connection:
                channel = await connection.channel()
                await channel.declare_queue(f"{user}-attacked", auto_delete=True)
            return time.perf_counter() - started
        await asyncio.sleep(0.1)
    return None


def _amqp_url(ports: dict[str, int], user: str, password: str) -> str:
    return f"amqp://{user}:{password}@{HOST}:{ports['amqp']}/"


async def _admin_put(http: aiohttp.ClientSession, ports: dict[str, int], path: str,
                     body: dict[str, str]) -> None:
    async with http.put(f"http://{HOST}:{ports['admin']}{path}", json=body) as reply:
        if reply.status >= 300:
            raise RuntimeError(f"PUT {path}: {reply.status} {await reply.text()}")


AMQP_HEADER = b"AMQP\x00\x00\x09\x01"


class _Storm:
    """`loops` tasks running `_once` from `source` until stopped (async with)."""

    def __init__(self, port: int, loops: int, source: str) -> None:
        self.port = port
        self.source = source
        self.opened = 0  # connections opened
        self.errors = 0  # connects that failed (the client side ran short, say)
        self._loops = loops
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> _Storm:
        self._tasks = [asyncio.ensure_future(self._loop()) for _ in range(self._loops)]
        return self

    async def __aexit__(self, *_exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def until_opened(self, count: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.opened < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.opened} of {count} connections opened")
            await asyncio.sleep(0.05)

    async def _loop(self) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection(
                    HOST, self.port, local_addr=(self.source, 0))
            except OSError:
                self.errors += 1
                await asyncio.sleep(0.05)
                continue
            self.opened += 1
            try:
                await self._once(reader, writer)
            except OSError:
                pass  # reset by the broker: the next one
            finally:
                writer.transport.abort()

    async def _once(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class WrongLogins(_Storm):
    """AMQP logins of `user` with a wrong password: header, start-ok, then wait for the
    broker's answer (connection.close) or its close."""

    def __init__(self, port: int, loops: int, source: str, user: str) -> None:
        super().__init__(port, loops, source)
        self._start_ok = encode_method(0, m.ConnectionStartOk(
            {}, "PLAIN", b"\0" + user.encode() + b"\0wrong", "en_US"))

    async def _once(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(AMQP_HEADER)
        if not await reader.read(4096):  # connection.start, or closed at once
            return
        writer.write(self._start_ok)
        while await reader.read(4096):
            pass


class SilentReopens(_Storm):
    """Sockets that send nothing, reopened as soon as the broker closes them."""

    async def _once(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()


def pika_login(port: int, user: str, password: str, timeout_s: float = 30.0) -> None:
    """Log in with pika and open a channel (raises pika's errors)."""
    parameters = pika.ConnectionParameters(
        HOST, port, credentials=pika.PlainCredentials(user, password),
        socket_timeout=timeout_s, blocked_connection_timeout=timeout_s,
        stack_timeout=timeout_s)
    connection = pika.BlockingConnection(parameters)
    try:
        connection.channel()
    finally:
        connection.close()


async def timed_pika_login(port: int, user: str, password: str) -> float | None:
    """Seconds until pika logged in (one attempt, in a thread); None: it was refused."""
    return await asyncio.to_thread(_timed, lambda: pika_login(port, user, password))


def _timed(login: Callable[[], None]) -> float | None:
    started = time.perf_counter()
    try:
        login()
    except pika.exceptions.AMQPError:
        return None
    return time.perf_counter() - started


async def add_users(admin_port: int, names: list[str]) -> None:
    """Users with their name as password and every permission on "/"."""
    async with aiohttp.ClientSession(auth=ADMIN) as http:
        ports = {"admin": admin_port}
        for name in names:
            await _admin_put(http, ports, f"/api/users/{name}", {"password": name, "tags": ""})
            await _admin_put(http, ports, f"/api/permissions/%2F/{name}",
                             {"configure": ".*", "write": ".*", "read": ".*"})
