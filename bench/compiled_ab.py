"""Compiled ÷ pure Python: the same broker and the same source, its hot modules run as the
mypyc build and as Python (`MAINSTEM_PURE=1`), taking turns, in one run.

    .venv/bin/python -m bench.compiled_ab [--rounds 2] [--duration 8] [--quick]
        [--suites amqp,stream,iggy,bson,segment]

Rows: the shared harness's AMQP persistent publish with confirms, AMQP consume with acks,
rstream publish and consume (`bench.amqp_bench`), Iggy SEND/POLL (`bench.iggy_bench`),
BSON PUBLISH and delivery (`bench.events_bench`) and segment appends of 1 KiB events
(`bench.segment_bench`). Each round runs every row in both modes, the order alternating
between rounds; the table gives the medians over rounds of msgs/s and broker CPU per
message, and their ratios compiled ÷ pure. Needs the compiled build (`scripts/build`);
refuses to run without it. `--suites` keeps some rows (`stream,iggy`: the stream
protocol's and Iggy's). Asserts nothing. `bench/hot_loops.py` times the per-message loops
alone, in-process, which a busy machine disturbs less.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench import amqp_bench, events_bench, iggy_bench, segment_bench
from mainstem import compiled

MODES = ("pure", "compiled")
Row = dict[str, Any]


@contextmanager
def mode(name: str) -> Iterator[None]:
    """The broker processes started inside run `name` (they inherit the environment)."""
    before = os.environ.pop(compiled.PURE_ENV, None)
    if name == "pure":
        os.environ[compiled.PURE_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(compiled.PURE_ENV, None)
        if before is not None:
            os.environ[compiled.PURE_ENV] = before


HARNESS_ROWS = {"amqp": ("amqp_pub_confirm", "amqp_consume"),
                "stream": ("stream_pub", "stream_consume")}
SUITES = ("amqp", "stream", "iggy", "bson", "segment")


def harness_rows(scenarios: list[str], duration: float, consume_msgs: int) -> list[Row]:
    rows = amqp_bench.run(scenarios, duration=duration, consume_msgs=consume_msgs)
    return [{"row": row["scenario"], "msgs_per_s": row["msgs_per_s"],
             "broker_us_per_msg": row["broker_us_per_msg"]} for row in rows]


def iggy_rows(messages: int) -> list[Row]:
    return [{"row": f"iggy {row['phase']}", "msgs_per_s": row["msgs_per_s"],
             "broker_us_per_msg": row["broker_cpu_s_per_million"]}
            for row in iggy_bench.run(messages) if str(row["phase"]).startswith("iggy")]


def events_rows(events: int) -> list[Row]:
    return [{"row": f"bson {row['phase']}", "msgs_per_s": row["msgs_per_s"],
             "broker_us_per_msg": row["broker_us_per_msg"]}
            for row in events_bench.run(events, documents=10_000) if row.get("count")]


def segment_rows(mib: int) -> list[Row]:
    rows = []
    for row in segment_bench.run(mib, (1024,)):
        if row.get("broker_cpu_s") is None:
            continue
        events = row["MiB"] * 1024 * 1024 / row["event_bytes"]
        rows.append({"row": f"segment {row['phase']} 1 KiB", "msgs_per_s":
                     round(row["MiB_per_s"] * 1024), "broker_us_per_msg":
                     round(row["broker_cpu_s"] / events * 1e6, 3)})
    return rows


def measure(rounds: int, suites: list[Callable[[], list[Row]]]) -> dict[str, dict[str, list[Row]]]:
    """Every suite in both modes, `rounds` times, alternating which mode goes first."""
    results: dict[str, dict[str, list[Row]]] = {}
    for round_number in range(rounds):
        order = MODES if round_number % 2 == 0 else MODES[::-1]
        for suite in suites:
            for name in order:
                with mode(name):
                    for row in suite():
                        print(json.dumps({"mode": name, "round": round_number, **row}),
                              flush=True)
                        results.setdefault(row["row"], {}).setdefault(name, []).append(row)
    return results


def table(results: dict[str, dict[str, list[Row]]]) -> str:
    lines = ["| row | msgs/s compiled ÷ pure | broker CPU/msg compiled ÷ pure |",
             "|---|---|---|"]
    for name, by_mode in results.items():
        if set(by_mode) != set(MODES):
            continue
        median = {mode_name: {key: statistics.median(r[key] for r in rows)
                              for key in ("msgs_per_s", "broker_us_per_msg")}
                  for mode_name, rows in by_mode.items()}
        rate = median["compiled"]["msgs_per_s"] / max(median["pure"]["msgs_per_s"], 1e-9)
        cpu = (median["compiled"]["broker_us_per_msg"]
               / max(median["pure"]["broker_us_per_msg"], 1e-9))
        lines.append(f"| {name} | {rate:.2f} | {cpu:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--quick", action="store_true", help="smaller runs, for a check")
    parser.add_argument("--suites", default=",".join(SUITES),
                        help=f"comma-separated, of {', '.join(SUITES)}")
    args = parser.parse_args()
    if not compiled.COMPILED:
        raise SystemExit(f"no compiled build to compare: {compiled.REASON}")
    chosen = args.suites.split(",")
    if unknown := set(chosen) - set(SUITES):
        raise SystemExit(f"unknown suites: {', '.join(sorted(unknown))}")
    scale = 0.25 if args.quick else 1.0
    scenarios = [row for suite in ("amqp", "stream") if suite in chosen
                 for row in HARNESS_ROWS[suite]]
    suites: list[Callable[[], list[Row]]] = []
    if scenarios:
        suites.append(lambda: harness_rows(scenarios, args.duration * scale,
                                           int(200_000 * scale)))
    if "iggy" in chosen:
        suites.append(lambda: iggy_rows(int(400_000 * scale)))
    if "bson" in chosen:
        suites.append(lambda: events_rows(int(50_000 * scale)))
    if "segment" in chosen:
        suites.append(lambda: segment_rows(int(128 * scale)))
    print(table(measure(args.rounds, suites)))


if __name__ == "__main__":
    main()
