"""The broker's write path in one process, without sockets or clients: what a message
costs the loop between a protocol's decoder and its confirm.

    .venv/bin/python -m bench.write_path_bench [--rounds 20000] [--records 200000]

Phases (each the median of --repeat runs, CPU time of the whole process, threads too):
- group-commit rounds: `written` then `wait` on a GroupCommit whose sync does nothing,
  one round at a time: the CPU µs and the wall µs (p50, p99) of a round's hand-off to the
  fsync thread and back;
- appender records: 1 KiB records (memoryviews into a read buffer, as the BSON protocol
  hands them over) appended 500 at a time through an Appender to a partition with fsync
  `never` in a temporary directory: CPU µs per record, from staging to written.
Run it with another checkout's `src` first on PYTHONPATH to compare. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import uvloop

from mainstem.broker.stream_service.appender import Appender
from mainstem.log.commit import GroupCommit
from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, FsyncMode

RECORD = 1024
PER_APPEND = 500


async def commit_rounds(rounds: int) -> dict[str, float]:
    commit = GroupCommit(DurabilityPolicy(), lambda: None, lambda mark: None)
    walls = []
    started = time.process_time()
    for mark in range(1, rounds + 1):
        sent = time.perf_counter()
        commit.written(mark)
        await commit.wait(mark)
        walls.append(time.perf_counter() - sent)
    cpu = time.process_time() - started
    walls.sort()
    return {"cpu_us_per_round": cpu / rounds * 1e6,
            "p50_us": walls[len(walls) // 2] * 1e6,
            "p99_us": walls[int(len(walls) * 0.99)] * 1e6}


async def appender_records(records: int) -> dict[str, float]:
    read_buffer = memoryview(bytes(RECORD * PER_APPEND))
    batch = [read_buffer[i * RECORD:(i + 1) * RECORD] for i in range(PER_APPEND)]
    with tempfile.TemporaryDirectory() as directory:
        partition = Partition.open(Path(directory),
                                   durability=DurabilityPolicy(FsyncMode.NEVER))
        appender = Appender(partition)
        started = time.process_time()
        for _ in range(records // PER_APPEND):
            await appender.append_records(batch).durable
        cpu = time.process_time() - started
        await partition.aclose()
    return {"cpu_us_per_record": cpu / records * 1e6}


def median_of(repeat: int, phase: Callable[[], Coroutine[Any, Any, dict[str, float]]]
              ) -> dict[str, float]:
    runs = [uvloop.run(phase()) for _ in range(repeat)]
    return {key: round(statistics.median(run[key] for run in runs), 2) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = [{"phase": "group-commit rounds",
             **median_of(args.repeat, lambda: commit_rounds(args.rounds))},
            {"phase": "appender records 1 KiB",
             **median_of(args.repeat, lambda: appender_records(args.records))}]
    for row in rows:
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
