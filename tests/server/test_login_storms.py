"""Storms from one address against `mainstem serve` (its default bounds): a correct login
from the storm's own address is not kept behind its wrong logins, and sockets reopened as
fast as they are closed cost the broker an accept each and slow no other address."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rstream import Producer

from mainstem.config import ServerConfig, add_config_arguments, load_config
from mainstem.handshakes import AcceptRate, Handshakes
from tests.support.attacks import SilentReopens, WrongLogins, add_users, timed_pika_login
from tests.support.server_process import kill, start_server, started_ports

STORM = "127.0.0.1"  # the address of the victims too (pika cannot choose its own)
OTHER = "127.0.0.2"
# More wrong logins in flight than the 256 connections not logged in an address may keep:
# before the fix a correct first login from that address waited behind them and was closed.
WRONG_LOGINS = 300
SILENT_LOOPS = 1000
LOGIN_BOUND_S = 2.5  # generous: the machine running the suite is loaded; baseline ~0.02 s


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[dict[str, int], Path]]:
    log_path = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log_path)
    try:
        yield started_ports(process, log_path), log_path
    finally:
        kill(process)


async def timed_stream_login(port: int, user: str) -> float:
    started = time.perf_counter()
    async with Producer("127.0.0.1", port=port, username=user, password=user):
        pass
    return time.perf_counter() - started


async def test_a_correct_login_is_not_kept_behind_wrong_logins_from_its_address(
    served: tuple[dict[str, int], Path],
) -> None:
    """Wrong logins for guest from the victims' address: users never logged in (their
    password needs the hash) and guest itself, verified before, get in within the bound,
    over AMQP and the stream protocol."""
    ports, _log = served
    await add_users(ports["admin"], ["first-0", "first-1", "first-2"])
    assert await timed_pika_login(ports["amqp"], "guest", "guest") is not None
    async with WrongLogins(ports["amqp"], WRONG_LOGINS, STORM, "guest") as storm:
        await storm.until_opened(WRONG_LOGINS)
        await asyncio.sleep(1.5)  # the first failures are answered; the rest wait
        logins = {
            "first-0": await timed_pika_login(ports["amqp"], "first-0", "first-0"),
            "guest": await timed_pika_login(ports["amqp"], "guest", "guest"),
            "first-1": await timed_pika_login(ports["amqp"], "first-1", "first-1"),
            "first-2 (stream)": await asyncio.wait_for(
                timed_stream_login(ports["stream"], "first-2"), 30),
        }
        opened = storm.opened
    print(f"logins during {WRONG_LOGINS} wrong logins in flight ({opened} opened): {logins}")
    assert all(seconds is not None and seconds <= LOGIN_BOUND_S
               for seconds in logins.values()), logins


async def test_sockets_reopened_as_fast_as_closed_are_refused_at_once(
    served: tuple[dict[str, int], Path],
) -> None:
    """Silent sockets from another address, each reopened once the broker closes it:
    beyond the address's accept rate they are closed before any handshake, and a login
    from here stays prompt."""
    ports, log_path = served
    assert await timed_pika_login(ports["amqp"], "guest", "guest") is not None
    async with SilentReopens(ports["amqp"], SILENT_LOOPS, OTHER) as storm:
        await storm.until_opened(3 * SILENT_LOOPS)
        logins = [await timed_pika_login(ports["amqp"], "guest", "guest") for _ in range(5)]
        opened = storm.opened
    served_storm = sum(1 for line in log_path.read_text().splitlines()
                       if _is_opened_from(json.loads(line), OTHER))
    print(f"logins during {opened} silent sockets ({served_storm} served): {logins}")
    assert None not in logins
    assert statistics.median(logins) <= LOGIN_BOUND_S / 5, logins  # type: ignore[type-var]
    assert served_storm < opened / 2, (served_storm, opened)


def _is_opened_from(entry: dict[str, object], address: str) -> bool:
    return (entry.get("event") == "connection.opened"
            and str(entry.get("peer", "")).startswith(address + ":"))


# -- the bounds alone ---------------------------------------------------------------------


def test_suspect_connections_leave_their_address_budget_and_go_first_in_all() -> None:
    closed: list[int] = []
    handshakes = Handshakes(per_address=2, total=4)

    def begin(conn: int, address: str = "10.0.0.1") -> None:
        handshakes.begin(conn, address, lambda: closed.append(conn))

    begin(0)
    for conn in (1, 2, 3):
        begin(conn)
        handshakes.suspect(conn)  # a wrong login: held until answered
    assert closed == []  # one not suspect from the address, four in all
    begin(4)
    assert closed == [1]  # five in all: the first suspect goes, not the oldest
    begin(5)
    assert closed == [1, 0]  # three not suspect from the address: the oldest of them
    handshakes.end(2)
    handshakes.suspect(2)  # gone already: nothing to do
    begin(6, "10.0.0.2")
    assert closed == [1, 0]  # 3, 4, 5 and 6 in all


def test_the_accept_rate_is_a_bucket_per_address() -> None:
    now = [0.0]
    rate = AcceptRate(rate=2, burst=3, clock=lambda: now[0])
    assert [rate.admits("10.0.0.1", "amqp") for _ in range(4)] == [True] * 3 + [False]
    assert rate.admits("10.0.0.2", "amqp")  # another address's bucket
    assert rate.admits("::ffff:10.0.0.2", "amqp")  # the same client, mapped
    now[0] = 0.5  # a token a half second
    assert [rate.admits("10.0.0.1", "amqp") for _ in range(2)] == [True, False]
    assert rate.refused == 2
    unlimited = AcceptRate(rate=0, burst=1)
    assert all(unlimited.admits("10.0.0.1", "amqp") for _ in range(1000))


def test_the_bounds_are_settings(tmp_path: Path) -> None:
    toml = tmp_path / "mainstem.toml"
    toml.write_text("[limits]\naccept_rate_per_address = 0\naccept_burst_per_address = 5\n"
                    "[auth]\npassword_checks_per_address = 3\n")
    loaded = load_config(None, {"MAINSTEM_CONFIG": str(toml)})
    assert (loaded.accept_rate_per_address, loaded.accept_burst_per_address) == (0, 5)
    assert loaded.core_settings().password_checks_per_address == 3
    from_env = load_config(None, {"MAINSTEM_ACCEPT_RATE_PER_ADDRESS": "50",
                                  "MAINSTEM_PASSWORD_CHECKS_PER_ADDRESS": "1"})
    assert from_env.accept_rate_per_address == 50
    assert from_env.auth.password_checks_per_address == 1
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    flags = parser.parse_args(["--accept-burst-per-address", "7"])
    assert load_config(flags, {}).accept_burst_per_address == 7
    defaults = ServerConfig()
    assert (defaults.accept_rate_per_address, defaults.accept_burst_per_address,
            defaults.auth.password_checks_per_address) == (200, 1000, 2)
