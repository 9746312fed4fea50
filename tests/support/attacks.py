"""Two attacks from one address on a running `mainstem serve`, each timing the login of a
real AMQP client (aio-pika) while it lasts: the client must get in, and soon.

- `login_storm`: loops of wrong logins for one user; a user who never logged in before
  (so whose password needs the hash) and the attacked user then log in with theirs.
- `silent_sockets`: more silent sockets than the broker's connection limit; a client then
  logs in.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import aio_pika
import aiohttp

HOST = "127.0.0.1"
STORM_LOOPS = 8  # concurrent wrong-login loops, as in issue 29
STORM_WRONG_LOGINS = 32  # before timing the logins: the attacked user's budget (30) is spent
LOGIN_DEADLINE_S = 15.0  # a login not in by then counts as kept out
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
