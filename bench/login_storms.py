"""Correct logins timed under a storm from one address, against a `mainstem serve` this
script starts on loopback (ephemeral ports, data in a fresh directory).

    PYTHONPATH=src .venv/bin/python -m bench.login_storms --storm wrong-logins --loops 1000
    PYTHONPATH=src .venv/bin/python -m bench.login_storms --storm silent --loops 1000

The storm runs `--loops` loops from `--source` (127.0.0.1: the victims' own address;
127.0.0.2: another): AMQP wrong logins for `--user`, or silent sockets reopened as soon
as they are closed (`tests.support.attacks`). While it lasts, pika logs in `--logins`
times as users never logged in before (their password needs the hash) and as guest,
whose password was verified before the storm. Printed: each login's seconds (or
"refused"), and what the broker logged (evictions, refusals by the accept rate).
Extra arguments after `--` go to `mainstem serve`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.support.attacks import SilentReopens, WrongLogins, add_users, timed_pika_login
from tests.support.server_process import kill, start_server, started_ports

HOST = "127.0.0.1"


async def run(options: argparse.Namespace, ports: dict[str, int]) -> dict[str, object]:
    fresh = [f"fresh-{n}" for n in range(options.logins)]
    await add_users(ports["admin"], fresh)
    amqp = ports["amqp"]
    baseline = await timed_pika_login(amqp, "guest", "guest")  # guest's password now cached
    storm = (WrongLogins(amqp, options.loops, options.source, options.user)
             if options.storm == "wrong-logins" else SilentReopens(amqp, options.loops,
                                                                   options.source))
    async with storm:
        await storm.until_opened(options.loops)
        await asyncio.sleep(options.settle)
        started = time.perf_counter()
        first_logins = [await timed_pika_login(amqp, user, user) for user in fresh]
        cached_logins = [await timed_pika_login(amqp, "guest", "guest")
                         for _ in range(options.logins)]
        storm_s = time.perf_counter() - started
        opened = storm.opened
    return {"baseline_s": baseline, "first_logins_s": first_logins,
            "cached_logins_s": cached_logins, "storm_connections": opened,
            "storm_client_errors": storm.errors, "measured_over_s": round(storm_s, 1)}


def logged(log_path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in log_path.read_text().splitlines():
        entry = json.loads(line)
        event = entry.get("event", "")
        if event in ("handshake.evicted", "handshake.timeout", "auth.failed"):
            counts[event] = counts.get(event, 0) + 1
        if event == "connection.rate_limited":
            counts["rate_limited"] = entry["refused_total"]  # logged now and then: a lower bound
    return counts


def summary(times: list[float | None]) -> str:
    answered = [t for t in times if t is not None]
    if not answered:
        return f"0 of {len(times)} in"
    return (f"{len(answered)} of {len(times)} in, median {statistics.median(answered):.2f} s,"
            f" max {max(answered):.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storm", choices=["wrong-logins", "silent"], default="wrong-logins")
    parser.add_argument("--loops", type=int, default=1000, help="in flight (default 1000)")
    parser.add_argument("--source", default=HOST, help="the storm's address (127.0.0.x)")
    parser.add_argument("--user", default="guest", help="the user the wrong logins name")
    parser.add_argument("--logins", type=int, default=6, help="timed logins of each kind")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds of storm before the timed logins")
    parser.add_argument("serve", nargs="*", help="arguments for mainstem serve")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="login-storms-") as directory:
        log_path = Path(directory) / "server.log"
        process = start_server(Path(directory) / "data", log_path, *options.serve)
        try:
            result = asyncio.run(run(options, started_ports(process, log_path)))
        finally:
            kill(process)
        result["broker_logged"] = logged(log_path)
    print(json.dumps(result))
    print(f"{options.storm} x{options.loops} from {options.source}:"
          f" first logins {summary(result['first_logins_s'])};"  # type: ignore[arg-type]
          f" cached logins {summary(result['cached_logins_s'])}",  # type: ignore[arg-type]
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
