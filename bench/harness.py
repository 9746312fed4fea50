"""The shared broker harness, `../shared/bench/broker_bench.py`, as a function.

It runs from its own venv (pika, rstream, rbfly, psutil), so it is called as a
subprocess against any broker's AMQP and stream ports; its JSON rows come back as
dicts. `MAINSTEM_BENCH_HARNESS` and `MAINSTEM_BENCH_PYTHON` point elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HARNESS = Path(os.environ.get("MAINSTEM_BENCH_HARNESS",
                              Path(__file__).resolve().parents[2] / "shared/bench/broker_bench.py"))
BENCH_PYTHON = os.environ.get("MAINSTEM_BENCH_PYTHON", "/tmp/bench-venv/bin/python")
TIMEOUT_S = 1200


@dataclass(frozen=True)
class Broker:
    """A running broker the harness can drive."""

    label: str
    amqp_port: int
    stream_port: int
    pid: int


def run_harness(broker: Broker, scenarios: Sequence[str], flags: Sequence[str],
                work: Path) -> list[dict[str, Any]]:
    """One harness run of `scenarios` (in order) with extra `flags`; its result rows. The
    harness's own output goes to WORK/harness-LABEL.log."""
    out = work / f"harness-{broker.label}.jsonl"
    out.unlink(missing_ok=True)
    with open(work / f"harness-{broker.label}.log", "ab") as log:
        subprocess.run([BENCH_PYTHON, str(HARNESS), "--scenarios", ",".join(scenarios),
                        "--host", "127.0.0.1", "--amqp-port", str(broker.amqp_port),
                        "--stream-port", str(broker.stream_port),
                        "--broker-pid", str(broker.pid), "--label", broker.label,
                        "--json", str(out), *flags],
                       stdout=log, stderr=log, check=True, timeout=TIMEOUT_S)
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return [row for row in rows if "scenario" in row]
