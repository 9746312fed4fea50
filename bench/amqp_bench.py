"""AMQP 0-9-1 benchmark of mainstem with the shared harness (pika clients).

    .venv/bin/python -m bench.amqp_bench [--scenarios amqp_pub_confirm,amqp_consume,amqp_latency]
        [--duration 10] [--latency-rates 1000,10000] [--profile DIR] [--src DIR]

Starts a real `mainstem serve` on loopback ports with a fresh data directory, runs each
scenario of `../shared/bench/broker_bench.py` against it from the bench venv (one harness
run per scenario; `amqp_latency` once per rate, named `amqp_latency@RATE`), prints one
JSON line per scenario (msgs/s, broker CPU µs per message, p50/p99 latency) and stops the
broker. `--profile DIR` records the broker with py-spy during each scenario (collapsed
stacks, DIR/SCENARIO.txt); `--src DIR` runs the broker from another checkout's `src`
(A/B against an older commit). Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.broker_process import start_server, stop_server

HARNESS = Path(os.environ.get("MAINSTEM_BENCH_HARNESS",
                              Path(__file__).resolve().parents[2] / "shared/bench/broker_bench.py"))
BENCH_PYTHON = os.environ.get("MAINSTEM_BENCH_PYTHON", "/tmp/bench-venv/bin/python")
PY_SPY = os.environ.get("MAINSTEM_PY_SPY", "/tmp/spy-venv/bin/py-spy")
SCENARIOS = ("amqp_pub_confirm", "amqp_consume", "amqp_latency")
REPORTED = ("scenario", "msgs", "seconds", "msgs_per_s", "broker_us_per_msg", "client_us_per_msg",
            "broker_cpu_pct", "p50_ms", "p99_ms", "p999_ms", "neighbour_cpu_pct",
            "broker_runq_s", "client_runq_s", "attempts", "notes", "error")


@contextmanager
def profiled(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy records the broker while the block runs (nothing if `out` is None)."""
    if out is None:
        yield
        return
    # --gil: only the thread holding the GIL, so waits in other threads are not counted
    spy = subprocess.Popen([PY_SPY, "record", "-p", str(pid), "-o", str(out), "--format", "raw",
                            "--gil", "--rate", "250"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()


def harness_row(ports: dict[str, int], pid: int, data_dir: Path, scenario: str,
                flags: list[str], work: Path) -> dict:
    """One harness run of one scenario; its result row."""
    out = work / f"{scenario}.jsonl"
    out.unlink(missing_ok=True)
    subprocess.run([BENCH_PYTHON, str(HARNESS), "--scenarios", scenario,
                    "--amqp-port", str(ports["amqp"]), "--stream-port", str(ports["stream"]),
                    "--broker-pid", str(pid), "--data-dir", str(data_dir), "--json", str(out),
                    "--label", "mainstem", *flags],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=600)
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    (row,) = [r for r in rows if "scenario" in r]
    return row


def run(scenarios: list[str] | tuple[str, ...] = SCENARIOS, *, duration: float = 10.0,
        latency_rates: list[float] | tuple[float, ...] = (1000.0, 10000.0),
        latency_seconds: float = 10.0, consume_msgs: int = 200_000, quiet_wait: float = 5.0,
        profile_dir: Path | None = None, src: Path | None = None) -> list[dict]:
    """Start mainstem, run the scenarios against it, stop it; one row per scenario run."""
    env_before = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = str(src)  # the server subprocess inherits it
    rows: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="amqp-bench-") as tmp:
            work = Path(tmp)
            server, ports = start_server(work / "data", work / "server.log")
            try:
                common = ["--duration", str(duration), "--consume-msgs", str(consume_msgs),
                          "--latency-seconds", str(latency_seconds),
                          "--quiet-wait", str(quiet_wait)]
                for scenario in scenarios:
                    runs = ([(f"{scenario}@{rate:g}", ["--latency-rate", str(rate)])
                             for rate in latency_rates] if scenario == "amqp_latency"
                            else [(scenario, [])])
                    for name, flags in runs:
                        out = profile_dir / f"{name}.txt" if profile_dir else None
                        with profiled(server.pid, out):
                            row = harness_row(ports, server.pid, work / "data", scenario,
                                              common + flags, work)
                        row["scenario"] = name
                        rows.append(row)
            finally:
                stop_server(server)
    finally:
        if env_before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env_before
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--latency-rates", default="1000,10000")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--consume-msgs", type=int, default=200_000)
    parser.add_argument("--quiet-wait", type=float, default=5.0)
    parser.add_argument("--profile", type=Path, help="py-spy collapsed stacks per scenario here")
    parser.add_argument("--src", type=Path, help="run the broker from this checkout's src")
    parser.add_argument("--label", default="", help="added to every row (e.g. base / new)")
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    rows = run(args.scenarios.split(","), duration=args.duration,
               latency_rates=[float(r) for r in args.latency_rates.split(",")],
               latency_seconds=args.latency_seconds, consume_msgs=args.consume_msgs,
               quiet_wait=args.quiet_wait, profile_dir=args.profile, src=args.src)
    for row in rows:
        print(json.dumps({"label": args.label, **{k: row[k] for k in REPORTED if k in row}}),
              flush=True)


if __name__ == "__main__":
    main()
