"""Issue 21's whole performance table in one command: every target's scenario, mainstem
against its reference, measured in one run.

    bench/run_all [--quick] [--no-rabbitmq] [--json PATH] [--only SECTION,...]
        [--serve-arg=--workers=2 ...] [--one-core-serve-arg=--workers=0 ...]

Sections, in order (`--only` picks some):
- `brokers`: the shared harness (`../shared/bench/broker_bench.py`) against mainstem
  and RabbitMQ 3.10.8: AMQP persistent publish with confirms, AMQP consume with acks,
  AMQP publish→deliver latency at 1,000 and 10,000 msg/s, rstream publish with confirms
  (100-byte bodies, batches of 100) and consume;
- `latency`: stream publish→deliver latency at 100,000 msg/s (`bench.stream_latency`),
  on both brokers;
- `multicore`: stream publish by 1 publisher to 1 stream and by 4 to 4 streams, lean
  publishers so that the broker sets the pace (`bench.multicore_bench`), on both; the
  target is 4 → 4 over one core's 1 → 1, measured on a second mainstem started with
  `--one-core-serve-arg` flags when given (else over the 1 → 1 of the same broker);
- `iggy`, `events`, `segment`: `bench.iggy_bench`, `bench.events_bench` and
  `bench.segment_bench` (each starts its own mainstem), compared with the issue's
  targets and, for segments, with raw writes and reads in the same directory.
mainstem runs as `mainstem serve` on loopback ephemeral ports with a fresh data
directory (`--serve-arg` adds flags); RabbitMQ is started by
`../shared/bench/start_rabbitmq.sh` (a fresh node on its fixed loopback ports) and
stopped by `stop_rabbitmq.sh`, unless `--no-rabbitmq`.

Prints the table (Markdown) and writes JSON lines to `--json` (default
`bench/results/DATE.jsonl`, appended): a `meta` line, every source row as measured
(`"source"`), then one line per table row (`"row"`). Bounded: about 8 minutes in full,
2 with `--quick`. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from bench import events_bench, iggy_bench, multicore_bench, segment_bench, stream_latency
from bench.broker_process import start_server, stop_server
from bench.harness import Broker, run_harness

ROOT = Path(__file__).resolve().parents[1]
SHARED_BENCH = ROOT.parent / "shared" / "bench"
RABBITMQ_DIR = Path(os.environ.get("BENCH_RMQ_DIR", "/var/tmp/bench-rabbitmq"))
RABBITMQ = "RabbitMQ 3.10.8"
SECTIONS = ("brokers", "latency", "multicore", "iggy", "events", "segment")
HARNESS_SCENARIOS = ("amqp_pub_confirm", "amqp_consume", "amqp_latency", "stream_pub",
                     "stream_consume")
SLOW_RATE, FAST_RATE = 1000, 10_000  # AMQP latency runs, msgs/s
STREAM_LATENCY_RATE = 100_000
ONE_CORE = "mainstem-one-core"  # the label of the broker measured for the multi-core base


@dataclass(frozen=True)
class Settings:
    """How long and how much each scenario runs."""

    publish_s: float  # each harness publish scenario
    amqp_consume_msgs: int
    stream_consume_msgs: int
    latency_s: float  # each paced latency run
    multicore_s: float
    iggy_messages: int
    bson_events: int
    segment_mib: int
    quiet_wait_s: float  # the harness waits up to this long for an idle machine
    retries: int  # harness re-runs of a scenario disturbed by other load


FULL = Settings(publish_s=10, amqp_consume_msgs=200_000, stream_consume_msgs=2_000_000,
                latency_s=10, multicore_s=8, iggy_messages=300_000, bson_events=50_000,
                segment_mib=256, quiet_wait_s=5, retries=1)
QUICK = Settings(publish_s=2, amqp_consume_msgs=20_000, stream_consume_msgs=200_000,
                 latency_s=2, multicore_s=2, iggy_messages=30_000, bson_events=5_000,
                 segment_mib=32, quiet_wait_s=0, retries=0)


# -- the table ------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """One of the issue's targets: `metric` (what `Row.measured` holds) against `limit`."""

    metric: str  # "broker_us", "p99_ms", "of_raw" or "scale"
    limit: float

    @property
    def lower_is_better(self) -> bool:
        return self.metric in ("broker_us", "p99_ms")

    def describe(self) -> str:
        return {"broker_us": f"≤ {self.limit:g} µs/msg", "p99_ms": f"p99 ≤ {self.limit:g} ms",
                "of_raw": f"≥ {self.limit:g} of raw",
                "scale": f"≥ {self.limit:g}x base 1 → 1"}[self.metric]

    def show(self, value: float) -> str:
        return {"broker_us": f"{value:.2f} µs", "p99_ms": f"{value:.2f} ms",
                "of_raw": f"{value:.2f}", "scale": f"{value:.2f}x"}[self.metric]

    def met(self, value: float) -> bool:
        return value <= self.limit if self.lower_is_better else value >= self.limit


@dataclass
class Row:
    """One line of the table. `value` and `reference` are in `unit` (throughput, or p99
    for a latency row); `measured` is what the target is checked on."""

    key: str
    title: str
    unit: str  # "msgs/s", "MiB/s" or "ms"
    value: float | None = None
    broker_us: float | None = None
    reference_name: str = ""
    reference: float | None = None
    reference_broker_us: float | None = None
    target: Target | None = None
    measured: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.reference:
            return None
        return self.value / self.reference

    @property
    def met(self) -> bool | None:
        if self.target is None or self.measured is None:
            return None
        return self.target.met(self.measured)

    def as_json(self) -> dict[str, Any]:
        row = asdict(self)
        row["target"] = None if self.target is None else self.target.describe()
        row.update(row=self.key, ratio=_rounded(self.ratio, 3), met=self.met)
        return row


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _amount(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "ms":
        return f"p99 {value:.2f} ms"
    if unit == "MiB/s":
        return f"{value:,.0f} MiB/s"
    return f"{value:,.0f}/s"


def markdown(rows: list[Row]) -> str:
    lines = ["| scenario | mainstem | broker µs/msg | reference | ratio | target | measured "
             "| met |", "|---|---:|---:|---|---:|---|---:|---|"]
    for row in rows:
        reference = "—"
        if row.reference is not None:
            reference = f"{row.reference_name}: {_amount(row.reference, row.unit)}"
            if row.reference_broker_us is not None:
                reference += f", {row.reference_broker_us:.2f} µs/msg"
        ratio = "—" if row.ratio is None else f"{row.ratio:.2f}"
        target = "—" if row.target is None else row.target.describe()
        measured = ("—" if row.target is None or row.measured is None
                    else row.target.show(row.measured))
        met = {None: "—", True: "yes", False: "**no**"}[row.met]
        broker = "—" if row.broker_us is None else f"{row.broker_us:.2f}"
        title = row.title + "".join(f" ({note})" for note in row.notes)
        lines.append(f"| {title} | {_amount(row.value, row.unit)} | {broker} | {reference} "
                     f"| {ratio} | {target} | {measured} | {met} |")
    return "\n".join(lines)


# -- recording ----------------------------------------------------------------------

class Recorder:
    """Source rows as they are measured: kept for the table and appended to the JSON file."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.rows: list[dict[str, Any]] = []

    def write(self, line: dict[str, Any]) -> None:
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()

    def add(self, source: str, broker: str, row: dict[str, Any]) -> None:
        row = {"source": source, "broker": broker, **row}
        self.rows.append(row)
        self.write(row)

    def add_all(self, source: str, broker: str, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self.add(source, broker, row)

    def find(self, source: str, broker: str, **match: Any) -> dict[str, Any] | None:
        for row in self.rows:
            if (row["source"], row["broker"]) == (source, broker) and all(
                    row.get(key) == value for key, value in match.items()):
                return row
        return None


def _say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _section(recorder: Recorder, name: str, work: Callable[[], None]) -> None:
    """Run one section; a failure is recorded and the run goes on with the next."""
    _say(f"{name}: start")
    try:
        work()
    except Exception as error:  # one broken section must not lose the rest
        traceback.print_exc()
        recorder.write({"error": f"{name}: {type(error).__name__}: {error}"})
    _say(f"{name}: done")


# -- the brokers ----------------------------------------------------------------------

@contextmanager
def mainstem_broker(work: Path, serve_args: list[str], label: str = "mainstem"
                    ) -> Iterator[Broker]:
    server, ports = start_server(work / label, work / f"{label}.log", *serve_args)
    try:
        yield Broker(label, ports["amqp"], ports["stream"], server.pid)
    finally:
        stop_server(server)


@contextmanager
def rabbitmq_broker() -> Iterator[Broker]:
    """A fresh RabbitMQ node from the shared scripts, stopped on the way out."""
    env = {**os.environ, "BENCH_RMQ_FRESH": "1"}
    try:
        subprocess.run([str(SHARED_BENCH / "start_rabbitmq.sh")], env=env, check=True,
                       timeout=300, stdout=sys.stderr)
        pid = int((RABBITMQ_DIR / "rabbit.pid").read_text())
        yield Broker("rabbitmq", 5672, 5552, pid)
    finally:
        subprocess.run([str(SHARED_BENCH / "stop_rabbitmq.sh")], timeout=120,
                       stdout=sys.stderr)


def measure_broker(broker: Broker, settings: Settings, sections: set[str], work: Path,
                   recorder: Recorder) -> None:
    if "brokers" in sections:
        _section(recorder, f"{broker.label}: harness",
                 lambda: _harness(broker, settings, work, recorder))
    if "latency" in sections:
        _section(recorder, f"{broker.label}: stream latency",
                 lambda: recorder.add("stream_latency", broker.label, asyncio.run(
                     stream_latency.measure("127.0.0.1", broker.stream_port,
                                            STREAM_LATENCY_RATE, settings.latency_s,
                                            broker.pid))))
    if "multicore" in sections:
        _section(recorder, f"{broker.label}: multicore",
                 lambda: _multicore(broker, settings, recorder))


def _harness(broker: Broker, settings: Settings, work: Path, recorder: Recorder) -> None:
    common = ["--duration", str(settings.publish_s),
              "--consume-msgs", str(settings.amqp_consume_msgs),
              "--stream-consume-msgs", str(settings.stream_consume_msgs),
              "--latency-seconds", str(settings.latency_s),
              "--quiet-wait", str(settings.quiet_wait_s), "--retries", str(settings.retries)]
    runs = [(HARNESS_SCENARIOS, SLOW_RATE), (("amqp_latency",), FAST_RATE)]
    for scenarios, rate in runs:
        for row in run_harness(broker, scenarios, [*common, "--latency-rate", str(rate)], work):
            if row["scenario"] == "amqp_latency":
                row["scenario"] = f"amqp_latency@{rate}"
            recorder.add("harness", broker.label, row)


def _multicore(broker: Broker, settings: Settings, recorder: Recorder,
               publisher_counts: tuple[int, ...] = (1, 4)) -> None:
    url = f"rabbitmq-stream://guest:guest@127.0.0.1:{broker.stream_port}/%2F"
    tag = f"{broker.label}-{os.getpid()}"
    for publishers in publisher_counts:
        row = multicore_bench.run_case(url, broker.pid, publishers, publishers,
                                       settings.multicore_s, 20_000, f"{tag}-{publishers}")
        recorder.add("multicore", broker.label, row)


def measure_mainstem_only(settings: Settings, sections: set[str], recorder: Recorder) -> None:
    if "iggy" in sections:
        _section(recorder, "iggy", lambda: recorder.add_all(
            "iggy", "mainstem", iggy_bench.run(settings.iggy_messages)))
    if "events" in sections:
        _section(recorder, "events", lambda: recorder.add_all(
            "events", "mainstem", events_bench.run(settings.bson_events, settings.bson_events)))
    if "segment" in sections:
        _section(recorder, "segment", lambda: recorder.add_all(
            "segment", "mainstem", segment_bench.run(settings.segment_mib, (1024, 65536))))


# -- from source rows to table rows ---------------------------------------------------

def table_rows(recorder: Recorder) -> list[Row]:
    return [*_harness_rows(recorder), *_mainstem_rows(recorder), *_segment_rows(recorder),
            *_multicore_rows(recorder), *_latency_rows(recorder)]


def _harness_row(recorder: Recorder, key: str, title: str, target: Target) -> Row:
    ours = recorder.find("harness", "mainstem", scenario=key) or {}
    theirs = recorder.find("harness", "rabbitmq", scenario=key) or {}
    latency = target.metric == "p99_ms"
    figure = "p99_ms" if latency else "msgs_per_s"
    row = Row(key, title, "ms" if latency else "msgs/s", ours.get(figure),
              ours.get("broker_us_per_msg"), RABBITMQ, theirs.get(figure),
              theirs.get("broker_us_per_msg"), target,
              ours.get("p99_ms" if latency else "broker_us_per_msg"))
    row.notes += [note for note in ours.get("notes", []) if note != "deadline reached"]
    if ours.get("noisy"):
        row.notes.append("noisy run")
    return row


def _harness_rows(recorder: Recorder) -> list[Row]:
    return [
        _harness_row(recorder, "stream_pub", "stream publish, confirms (rstream, 100 B, "
                     "batches of 100)", Target("broker_us", 1.5)),
        _harness_row(recorder, "stream_consume", "stream consume (rstream)",
                     Target("broker_us", 0.3)),
        _harness_row(recorder, "amqp_pub_confirm", "AMQP persistent publish, confirms (pika)",
                     Target("broker_us", 15)),
        _harness_row(recorder, "amqp_consume", "AMQP consume, acks (pika)",
                     Target("broker_us", 10)),
    ]


def _mainstem_rows(recorder: Recorder) -> list[Row]:
    rows = []
    for source, phase, title, limit in (
            ("iggy", "iggy send", "Iggy send (batches of 1,000)", 1.5),
            ("iggy", "iggy poll", "Iggy poll", 1.5),
            ("events", "publish 1 KiB pipelined", "BSON PUBLISH (1 KiB, pipelined)", 4),
            ("events", "subscription delivery", "BSON delivery", 2)):
        found = recorder.find(source, "mainstem", phase=phase) or {}
        broker_us = found.get("broker_us_per_msg", found.get("broker_cpu_s_per_million"))
        rows.append(Row(phase.replace(" ", "_"), title, "msgs/s", found.get("msgs_per_s"),
                        broker_us, target=Target("broker_us", limit), measured=broker_us))
    return rows


def _segment_rows(recorder: Recorder) -> list[Row]:
    """Each segment phase against the raw phase of the same event size it is compared with
    (append: raw write; `segment read X`: `raw read X`)."""
    rows = []
    for found in recorder.rows:
        phase = found.get("phase", "")
        if found["source"] != "segment" or not phase.startswith("segment"):
            continue
        size = found["event_bytes"]
        raw_phase = "raw write" if phase == "segment append" else phase.replace("segment", "raw")
        raw = recorder.find("segment", "mainstem", phase=raw_phase, event_bytes=size) or {}
        events = found["MiB"] * (1 << 20) / size
        broker_us = (found["broker_cpu_s"] * 1e6 / events if "broker_cpu_s" in found
                     else None)
        ratio = (found["MiB_per_s"] / raw["MiB_per_s"]) if raw.get("MiB_per_s") else None
        limit = 0.6 if phase == "segment append" else 0.8
        rows.append(Row(f"{phase.replace(' ', '_')}@{size}", f"{phase}, {size // 1024} KiB events",
                        "MiB/s", found["MiB_per_s"], _rounded(broker_us, 2), raw_phase,
                        raw.get("MiB_per_s"), target=Target("of_raw", limit), measured=ratio))
    return rows


def _multicore_rows(recorder: Recorder) -> list[Row]:
    """1 → 1 and 4 → 4; the target's base is one core's 1 → 1 when it was measured (see
    --one-core-serve-arg), else the 1 → 1 of the broker as configured."""
    rows = []
    one_core = recorder.find("multicore", ONE_CORE, publishers=1)
    if one_core is not None:
        rows.append(Row("multicore_1x1_one_core", "stream publish, 1 publisher → 1 stream, "
                        "one core (lean client)", "msgs/s", one_core["msgs_per_s"],
                        one_core.get("broker_us_per_msg")))
    single = one_core or recorder.find("multicore", "mainstem", publishers=1) or {}
    for publishers, title in ((1, "stream publish, 1 publisher → 1 stream (lean client)"),
                              (4, "stream publish, 4 publishers → 4 streams (lean clients)")):
        ours = recorder.find("multicore", "mainstem", publishers=publishers) or {}
        theirs = recorder.find("multicore", "rabbitmq", publishers=publishers) or {}
        scale = (ours["msgs_per_s"] / single["msgs_per_s"]
                 if publishers > 1 and ours and single.get("msgs_per_s") else None)
        rows.append(Row(f"multicore_{publishers}x{publishers}", title, "msgs/s",
                        ours.get("msgs_per_s"), ours.get("broker_us_per_msg"), RABBITMQ,
                        theirs.get("msgs_per_s"), theirs.get("broker_us_per_msg"),
                        Target("scale", 1.6) if publishers > 1 else None, scale))
    return rows


def _latency_rows(recorder: Recorder) -> list[Row]:
    rows = [
        _harness_row(recorder, f"amqp_latency@{SLOW_RATE}",
                     f"AMQP publish→deliver at {SLOW_RATE:,} msg/s", Target("p99_ms", 1)),
        _harness_row(recorder, f"amqp_latency@{FAST_RATE}",
                     f"AMQP publish→deliver at {FAST_RATE:,} msg/s", Target("p99_ms", 5)),
    ]
    ours = recorder.find("stream_latency", "mainstem") or {}
    theirs = recorder.find("stream_latency", "rabbitmq") or {}
    rows.append(Row("stream_latency", f"stream publish→deliver at {STREAM_LATENCY_RATE:,} "
                    "msg/s (rstream)", "ms", ours.get("p99_ms"), ours.get("broker_us_per_msg"),
                    RABBITMQ, theirs.get("p99_ms"), theirs.get("broker_us_per_msg"),
                    Target("p99_ms", 2), ours.get("p99_ms")))
    return rows


# -- the run --------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "")
    return {"cpus": os.cpu_count(), "cpu_model": model, "kernel": platform.release(),
            "python": platform.python_version(), "load_average": os.getloadavg()}


def git_commit() -> str:
    described = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                               capture_output=True, text=True)
    return described.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-rabbitmq", action="store_true",
                        help="skip RabbitMQ (its reference columns stay empty)")
    parser.add_argument("--json", type=Path, help="JSON lines go here (appended)")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma list of sections: {','.join(SECTIONS)}")
    parser.add_argument("--serve-arg", action="append", default=[],
                        help="an extra `mainstem serve` flag for the brokers run_all starts "
                        "itself (repeatable), e.g. --serve-arg=--workers=2")
    parser.add_argument("--one-core-serve-arg", action="append", default=[],
                        help="flags (repeatable) of a second mainstem that uses one core, "
                        "e.g. --one-core-serve-arg=--workers=0: its 1 -> 1 stream publish "
                        "is the base of the multi-core target (default: the 1 -> 1 of the "
                        "broker as configured)")
    args = parser.parse_args()
    sections = set(args.only.split(","))
    if unknown := sections - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    settings = QUICK if args.quick else FULL
    json_path = args.json or ROOT / "bench" / "results" / f"{time.strftime('%Y-%m-%d')}.jsonl"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(json_path, "a") as out, tempfile.TemporaryDirectory(prefix="run-all-") as tmp:
        recorder = Recorder(out)
        recorder.write({"meta": True, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "commit": git_commit(), "machine": machine(), "quick": args.quick,
                        "rabbitmq": not args.no_rabbitmq, "serve_args": args.serve_arg,
                        "sections": sorted(sections), "settings": asdict(settings)})
        work = Path(tmp)
        broker_sections = sections & {"brokers", "latency", "multicore"}
        if broker_sections:
            with mainstem_broker(work, args.serve_arg) as broker:
                measure_broker(broker, settings, broker_sections, work, recorder)
            if args.one_core_serve_arg and "multicore" in sections:
                with mainstem_broker(work, args.one_core_serve_arg, ONE_CORE) as broker:
                    _section(recorder, f"{ONE_CORE}: multicore",
                             lambda: _multicore(broker, settings, recorder, (1,)))
            if not args.no_rabbitmq:
                with rabbitmq_broker() as broker:
                    measure_broker(broker, settings, broker_sections, work, recorder)
        measure_mainstem_only(settings, sections, recorder)
        rows = [row for row in table_rows(recorder) if row.value is not None]
        for row in rows:
            recorder.write(row.as_json())
        recorder.write({"meta": True, "end": True, "minutes": round(
            (time.monotonic() - started) / 60, 1), "load_average": os.getloadavg()})
    print(markdown(rows))
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine()['cpus']} cores "
          f"({machine()['cpu_model']}), load average at the end "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {git_commit()}; "
          f"{(time.monotonic() - started) / 60:.1f} min; JSON lines in {json_path}")


if __name__ == "__main__":
    main()
