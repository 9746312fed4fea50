"""A deep queue drained: the longest event-loop stall its page-ins cause, and its time.

    .venv/bin/python -m bench.page_in [--messages 100000] [--steps 10000,1024]

Writes a journal of `--messages` enqueues (as `bench.journal_replay` does), restores them
paged out, as a new leader or a restarted node holds them, and drains the queue's head as
a consumer does, a loop turn per 100 messages, once per page-in step (`PAGE_IN_STEP`; 10,000
is the memory bound, what one page-in read before). Prints one JSON line per step: the
drain's wall time and the longest single loop turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from bench.journal_replay import _journal, write
from mainstem.broker.amqp.queues import paging
from mainstem.broker.amqp.queues.paging import MemoryBound, ReadyMessages

PER_TURN = 100  # messages a consumer takes in one loop turn


async def drain(directory: Path, step: int) -> dict[str, float | int]:
    paging.PAGE_IN_STEP = step
    journal = _journal(directory)
    replay = await journal.replay_yielding()
    ready = ReadyMessages(1, MemoryBound(), journal, directory / "spill")
    ready.restore(replay, 0, None)
    taken, longest = 0, 0.0
    started = time.perf_counter()
    more = True
    while more:
        turn = time.perf_counter()
        for _ in range(PER_TURN):
            more = ready.head(0) is not None  # pages in when the head ran dry
            if not more:
                break
            ready.popleft(0)
            taken += 1
        longest = max(longest, time.perf_counter() - turn)
        await asyncio.sleep(0)
    took = time.perf_counter() - started
    await journal.close()
    return {"step": step, "messages": taken, "drain_s": round(took, 3),
            "longest_turn_s": round(longest, 4)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--steps", default="10000,1024")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary) / "journal"
        await write(directory, args.messages, 5)
        for step in (int(s) for s in args.steps.split(",")):
            print(json.dumps(await drain(directory, step)))


if __name__ == "__main__":
    asyncio.run(main())
