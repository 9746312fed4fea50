"""The reliability campaign as a command: SIGKILL rounds with every protocol's real client
publishing with confirms, then a fuzz phase on every listener, against a `mainstem serve`
this script starts on loopback (ephemeral ports, data in a fresh directory).

    .venv/bin/python -m bench.soak --rounds 5 --fuzz-inputs 500

Each round starts the broker, verifies what every earlier round had confirmed, lets every
protocol's client publish numbered messages with confirms, and SIGKILLs the broker at a
random moment. The last start verifies once more, fuzzes each listener (a canary of the
protocol's client publishes and reads before and after), runs the attacks of
`tests.support.attacks` (a wrong-login storm, a flood of silent sockets, hostile regular
expressions as a policy and a filter: an AMQP client must still log in, and is timed) and
stops the broker with SIGTERM.
Verified: every confirmed message is stored exactly once and in confirm order. Exit status
0 only when nothing was lost, duplicated or reordered, every start succeeded, the broker
never died on its own, the fuzzing found nothing and no attack kept a client out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.support.attacks import (
    AttackReport,
    hostile_patterns,
    login_storm,
    silent_sockets,
)
from tests.support.campaign_clients import DRIVERS, Driver
from tests.support.fuzzing import ServerLog, fuzz_listener
from tests.support.server_process import kill, start_server, started_ports

PROTOCOLS = ["stream", "amqp", "iggy", "bson", "segment"]
LISTENERS = [*PROTOCOLS, "admin"]
ATTACKS = ["login-storm", "silent-sockets", "hostile-patterns"]
STOP_TIMEOUT_S = 30.0


@dataclass
class Tally:
    """One row of the summary."""

    name: str
    rounds: int = 0
    confirmed: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    failed_restarts: int = 0
    fuzz_inputs: int = 0
    fuzz_failures: int = 0
    server_crashes: int = 0
    errors: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered or self.failed_restarts
                    or self.fuzz_failures or self.server_crashes or self.errors)


@dataclass
class Durability:
    """What one protocol's client was confirmed, and what verification found wrong."""

    driver: Driver
    confirmed: list[bytes] = field(default_factory=list)
    lost: set[bytes] = field(default_factory=set)
    duplicated: set[bytes] = field(default_factory=set)
    reordered: set[bytes] = field(default_factory=set)

    def verify(self, stored: list[bytes]) -> None:
        """Every confirmed body once, in confirm order; unconfirmed ones may be there."""
        position: dict[bytes, int] = {}
        for index, body in enumerate(stored):
            if body in position:
                self.duplicated.add(body)
            position.setdefault(body, index)
        highest = -1
        for body in self.confirmed:
            at = position.get(body)
            if at is None:
                self.lost.add(body)
                continue
            if at < highest:
                self.reordered.add(body)
            highest = max(highest, at)


class Broker:
    """The broker process across restarts: one data directory, one log."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.data = directory / "data"
        self.log_path = directory / "server.log"
        self.process: subprocess.Popen | None = None
        self.peak_rss_kb = 0

    def start(self) -> dict[str, int]:
        self.process = start_server(self.data, self.log_path, "--log-format", "json")
        try:
            return started_ports(self.process, self.log_path)
        except AssertionError:
            kill(self.process)
            raise

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def sample_rss(self) -> None:
        """The process's peak resident set so far (VmHWM), kept as the campaign's peak."""
        assert self.process is not None
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_rss_kb = max(self.peak_rss_kb, int(line.split()[1]))

    def sigkill(self) -> None:
        assert self.process is not None
        self.sample_rss()
        kill(self.process)

    def stop(self) -> int:
        """SIGTERM and wait; the exit status."""
        assert self.process is not None
        self.sample_rss()
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill(self.process)
            return -signal.SIGKILL


class Campaign:
    def __init__(self, options: argparse.Namespace, directory: Path) -> None:
        self.options = options
        self.rng = random.Random(options.seed)
        self.broker = Broker(directory)
        self.protocols = {name: Durability(DRIVERS[name](f"soak-{name}"))
                          for name in options.protocols}
        self.tallies = {name: Tally(name) for name in [*options.protocols, *options.listeners]}
        self.attacks: list[AttackReport] = []

    async def run(self) -> None:
        for round_ in range(self.options.rounds):
            if not await self._start_and_verify(resume=round_ > 0):
                return
            await self._publish_until_killed(round_)
        if await self._start_and_verify(resume=self.options.rounds > 0):
            await self._close_drivers()
            await self._fuzz()
            await self._attack()
            status = self.broker.stop()
            if status != 0:
                self._everyone_error(f"the broker exited with {status} on SIGTERM")

    async def _start_and_verify(self, resume: bool) -> bool:
        try:
            ports = self.broker.start()
        except AssertionError:
            for name in self.protocols:
                self.tallies[name].failed_restarts += 1
            return False
        await asyncio.gather(*(self._verify(name, ports[name], resume)
                               for name in self.protocols))
        return True

    async def _verify(self, name: str, port: int, resume: bool) -> None:
        state = self.protocols[name]
        try:
            await asyncio.wait_for(state.driver.connect(port), 30)
            if resume:
                state.confirmed += await asyncio.wait_for(state.driver.resume(), 30)
            state.verify(await asyncio.wait_for(state.driver.read_all(), 120))
        except Exception as exc:
            self.tallies[name].errors.append(f"verifying: {exc!r}")

    async def _publish_until_killed(self, round_: int) -> None:
        publishers = [asyncio.ensure_future(self._publish(name, round_))
                      for name in self.protocols]
        await asyncio.sleep(self.rng.uniform(0.1, self.options.round_seconds))
        if not self.broker.alive():
            for name in self.protocols:
                self.tallies[name].server_crashes += 1
        self.broker.sigkill()
        for publisher in publishers:
            publisher.cancel()
        await asyncio.gather(*publishers, return_exceptions=True)
        for name in self.protocols:
            self.tallies[name].rounds += 1
        await self._close_drivers()

    async def _close_drivers(self) -> None:
        for state in self.protocols.values():
            await state.driver.close()

    async def _publish(self, name: str, round_: int) -> None:
        """Publish numbered batches until the broker is killed; keep what was confirmed."""
        state = self.protocols[name]
        batch = min(self.options.batch, state.driver.max_batch)
        try:
            for first in range(0, 10**9, batch):  # bounded by the kill
                bodies = [f"{name}-r{round_}-{i}".encode() for i in range(first, first + batch)]
                await state.driver.publish(bodies)
                state.confirmed += bodies
        except Exception as exc:
            if self.broker.alive():  # the kill ends every publisher with some error: not that
                self.tallies[name].errors.append(f"publishing: {exc!r}")

    async def _fuzz(self) -> None:
        ports = started_ports(self.broker.process, self.broker.log_path)
        for index, listener in enumerate(self.options.listeners):
            tally = self.tallies[listener]
            try:
                report = await fuzz_listener(listener, ports[listener],
                                             ServerLog(self.broker.log_path), self.broker.alive,
                                             self.options.seed + index, self.options.fuzz_inputs)
            except Exception as exc:
                tally.errors.append(f"fuzzing: {exc!r}")
                continue
            tally.fuzz_inputs += report.inputs
            tally.fuzz_failures += len(report.failures)
            tally.errors += report.failures[:5]
            if not self.broker.alive():
                tally.server_crashes += 1
                return

    async def _attack(self) -> None:
        ports = started_ports(self.broker.process, self.broker.log_path)
        for name in self.options.attacks:
            if name == "login-storm":
                report = await login_storm(ports)
            elif name == "hostile-patterns":
                report = await hostile_patterns(ports)
            else:
                report = await silent_sockets(ports, self.options.silent_sockets)
            if not self.broker.alive():
                report.errors.append("the broker died")
            self.attacks.append(report)

    def _everyone_error(self, message: str) -> None:
        for tally in self.tallies.values():
            tally.errors.append(message)

    def summary(self) -> list[Tally]:
        for name, state in self.protocols.items():
            tally = self.tallies[name]
            tally.confirmed = len(state.confirmed)
            tally.lost = len(state.lost)
            tally.duplicated = len(state.duplicated)
            tally.reordered = len(state.reordered)
        return list(self.tallies.values())


COLUMNS = ["name", "rounds", "confirmed", "lost", "duplicated", "reordered",
           "failed_restarts", "fuzz_inputs", "fuzz_failures", "server_crashes"]


def print_table(tallies: list[Tally], attacks: list[AttackReport], peak_rss_kb: int) -> None:
    rows = [COLUMNS] + [[str(getattr(t, column)) for column in COLUMNS] for t in tallies]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    for row in rows:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    print(f"peak broker RSS: {peak_rss_kb / 1024:.1f} MiB")
    for tally in tallies:
        for error in tally.errors:
            print(f"{tally.name}: {error[:2000]}")
    for attack in attacks:
        logins = ", ".join(f"{user} {'kept out' if s is None else f'in after {s:.2f} s'}"
                           for user, s in attack.logins.items())
        details = ", ".join(f"{key} {value:g}" for key, value in attack.details.items())
        print(f"{attack.name}: {logins} ({details})")
        for error in attack.errors:
            print(f"{attack.name}: {error[:2000]}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="SIGKILL rounds (default 5)")
    parser.add_argument("--round-seconds", type=float, default=3.0,
                        help="the kill lands within this many seconds of publishing")
    parser.add_argument("--batch", type=int, default=50, help="messages per confirmed publish")
    parser.add_argument("--protocols", type=_names(PROTOCOLS), default=PROTOCOLS,
                        help="comma-separated; default: " + ",".join(PROTOCOLS))
    parser.add_argument("--listeners", type=_names(LISTENERS), default=LISTENERS,
                        help="listeners to fuzz; default: " + ",".join(LISTENERS))
    parser.add_argument("--fuzz-inputs", type=int, default=500, help="per listener")
    parser.add_argument("--attacks", type=_names(ATTACKS), default=ATTACKS,
                        help="comma-separated; default: " + ",".join(ATTACKS))
    parser.add_argument("--silent-sockets", type=int, default=_silent_sockets(),
                        help="sockets of the silent-sockets attack (default: 16000, fewer"
                             " under a lower descriptor limit)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--directory", type=Path,
                        help="for the data and server log (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser.parse_args(argv)


def _silent_sockets() -> int:
    """16000 sockets (issue 29's flood), leaving this process 512 descriptors of its own."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(1, min(16_000, soft - 512))


def _names(allowed: list[str]):
    def parse(text: str) -> list[str]:
        names = [name for name in text.split(",") if name]
        unknown = sorted(set(names) - set(allowed))
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown: {', '.join(unknown)}")
        return names
    return parse


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    # The clients log every failed call and reconnect attempt after a kill: expected here.
    logging.getLogger().setLevel(logging.CRITICAL)
    with contextlib.ExitStack() as stack:
        directory = options.directory or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="mainstem-soak-")))
        campaign = Campaign(options, directory)
        try:
            asyncio.run(campaign.run())
        finally:
            if campaign.broker.process is not None:
                kill(campaign.broker.process)
        tallies = campaign.summary()
        if options.json:
            print(json.dumps({"peak_rss_kb": campaign.broker.peak_rss_kb,
                              "tallies": [asdict(t) for t in tallies],
                              "attacks": [asdict(a) for a in campaign.attacks]}))
        else:
            print_table(tallies, campaign.attacks, campaign.broker.peak_rss_kb)
    ok = all(t.ok() for t in tallies) and all(a.ok() for a in campaign.attacks)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
