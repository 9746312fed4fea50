"""Hostile requests to the management API of a real broker running in its own thread
(issue 40): a `use_regex` filter with catastrophic backtracking, from a user with only
the management tag, is answered at once while another client's requests keep being
answered; one only a backtracking engine can run is refused with 400 and the reason; and
authenticated requests whose bodies the client cuts short leave a few log lines, no
tracebacks."""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import time
from collections.abc import Iterator

import aiohttp
import pytest

from mainstem.testing import ThreadedBroker
from tests.broker.test_patterns import BOUND_S, CATASTROPHIC, LONG_NAME, SHORT_NAME
from tests.support.admin_http import call

ADMIN = aiohttp.BasicAuth("guest", "guest")
WATCHER = aiohttp.BasicAuth("watcher", "watcher-secret")
CUT_SHORT_REQUESTS = 300
LOG_LINES_BOUND = 20  # a line per cause and window at most (10 by default), and a margin


@pytest.fixture
def server(mainstem_server: ThreadedBroker) -> Iterator[ThreadedBroker]:
    yield mainstem_server


def _url(server: ThreadedBroker) -> str:
    return f"http://127.0.0.1:{server.ports['admin']}"


async def _slowest_probe(http: aiohttp.ClientSession, attack: asyncio.Task[object]) -> float:
    """The slowest round trip of another client's requests while `attack` runs."""
    slowest = 0.0
    while True:
        started = time.monotonic()
        await call(http, "GET", "/api/whoami")
        slowest = max(slowest, time.monotonic() - started)
        if attack.done():
            return slowest
        await asyncio.sleep(0.01)


async def _timed(http: aiohttp.ClientSession, path: str) -> tuple[float, list[dict]]:
    started = time.monotonic()
    rows = await call(http, "GET", path)
    return time.monotonic() - started, rows


async def test_catastrophic_use_regex_leaves_the_loop_free(server: ThreadedBroker) -> None:
    async with aiohttp.ClientSession(_url(server), auth=ADMIN) as admin, \
            aiohttp.ClientSession(_url(server), auth=WATCHER) as watcher:
        await call(admin, "PUT", "/api/users/watcher",
                   {"password": "watcher-secret", "tags": "management"}, status=201)
        await call(admin, "PUT", "/api/permissions/%2F/watcher",
                   {"configure": ".*", "write": ".*", "read": ".*"}, status=204)
        path = f"/api/queues/%2F?name={CATASTROPHIC.replace('+', '%2B').replace('$', '%24')}" \
               "&use_regex=true"
        for name in (SHORT_NAME, LONG_NAME):  # the short one alone took seconds before
            await call(admin, "PUT", f"/api/queues/%2F/{name}", {}, status=201)
            attack = asyncio.ensure_future(_timed(watcher, path))
            slowest = await _slowest_probe(admin, attack)
            took, rows = await attack
            assert took < BOUND_S, f"the filter took {took:.2f} s"
            assert slowest < BOUND_S, f"another client waited {slowest:.2f} s"
            assert rows == []
        await call(admin, "PUT", "/api/queues/%2F/aaa", {}, status=201)
        rows = await call(watcher, "GET", path)
        assert [row["name"] for row in rows] == ["aaa"]


@pytest.mark.parametrize(("pattern", "reason"), [(r"(a)\1", "backreference"),
                                                 ("^(?!amq)", "lookahead")])
async def test_a_filter_only_backtracking_can_match_is_refused(
        server: ThreadedBroker, pattern: str, reason: str) -> None:
    async with aiohttp.ClientSession(_url(server), auth=ADMIN) as admin, \
            admin.get("/api/queues/%2F", params={"name": pattern, "use_regex": "true"}) as answer:
        assert answer.status == 400
        assert reason in (await answer.json())["reason"]


def _cut_short(server: ThreadedBroker, index: int) -> bytes:
    """An authenticated PUT that promises 1000 bytes of body, sends 8 and stops; what the
    broker answered before closing."""
    auth = base64.b64encode(b"guest:guest").decode()
    with socket.create_connection(("127.0.0.1", server.ports["admin"]), timeout=10) as sock:
        sock.sendall(f"PUT /api/vhosts/cut-{index} HTTP/1.1\r\nHost: localhost\r\n"
                     f"Authorization: Basic {auth}\r\nContent-Type: application/json\r\n"
                     "Content-Length: 1000\r\n\r\n{\"tags\":".encode())
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        return answer


def test_cut_short_bodies_leave_a_few_log_lines(server: ThreadedBroker,
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    caplog.clear()
    answers = [_cut_short(server, index) for index in range(CUT_SHORT_REQUESTS)]
    time.sleep(0.5)  # the last requests' handlers have finished
    records = caplog.records
    assert 0 < len(records) <= LOG_LINES_BOUND, [r.getMessage() for r in records[:30]]
    assert not [r for r in records if r.exc_info], "a traceback was logged"
    assert [r.message for r in records] == ["http.cut_short"] * len(records)
    assert sum(getattr(r, "left_out", 0) for r in records) + len(records) <= CUT_SHORT_REQUESTS
    # Closed cleanly: nothing half-written, and no 500 for a client that went away.
    assert all(answer == b"" or answer.startswith(b"HTTP/1.1 400") for answer in answers)
    assert server.ports["admin"]  # still serving: a whole request is answered
    with socket.create_connection(("127.0.0.1", server.ports["admin"]), timeout=10) as sock:
        sock.sendall(b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\n"
                     b"Connection: close\r\n\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.1 401")
