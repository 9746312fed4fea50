"""A quorum queue journal's replay: the longest event-loop stall it causes, and its time.

    .venv/bin/python -m bench.journal_replay [--messages 120000] [--per-chunk 5]

Writes a journal of `--messages` enqueues, `--per-chunk` to a chunk (a leader under many
small publishes writes small chunks), a tenth of them settled, then replays it twice while
a probe task on the same loop wakes every millisecond: in one go (`QueueJournal.replay`,
what a new leader did before issue 39) and in slices (`replay_yielding`, what it does now).
Prints one JSON line per way: the replay's wall time and the probe's longest wait.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from mainstem.broker.amqp.queues.journal import QueueJournal, Replay, open_partition
from mainstem.broker.amqp.queues.message import QueueMessage
from mainstem.broker.stream_service import PartitionService
from mainstem.log.policy import DurabilityPolicy

PROBE_S = 0.001


def _journal(directory: Path) -> QueueJournal:
    return QueueJournal(PartitionService(open_partition(directory, DurabilityPolicy(),
                                                        fsync_on_demand=False)))


async def write(directory: Path, messages: int, per_chunk: int) -> None:
    journal = _journal(directory)
    written = []
    for i in range(messages):
        message = QueueMessage("", "q", b"", f"message-{i:08d}".encode() * 4, persistent=True)
        written.append(message)
        journal.enqueue(message, confirm=False)
        if i % per_chunk == per_chunk - 1:
            await asyncio.sleep(0)  # one loop turn's enqueues are one chunk
    await asyncio.sleep(0)
    for message in written[:messages // 10]:
        journal.settle(message)
    await asyncio.sleep(0)  # the settles' write
    await journal.close()


async def probed(replay: Callable[[], Awaitable[Replay]]) -> dict[str, float | int]:
    """Run `replay` while a probe measures how late the loop wakes it."""
    loop = asyncio.get_running_loop()
    longest = 0.0

    async def probe() -> None:
        nonlocal longest
        while True:
            before = loop.time()
            await asyncio.sleep(PROBE_S)
            longest = max(longest, loop.time() - before - PROBE_S)

    probing = loop.create_task(probe())
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    result = await replay()
    took = time.perf_counter() - started
    await asyncio.sleep(PROBE_S * 10)  # the probe wakes (late) after a replay in one go
    probing.cancel()
    return {"messages": len(result.offsets), "replay_s": round(took, 3),
            "longest_stall_s": round(longest, 4)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=120_000)
    parser.add_argument("--per-chunk", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary) / "journal"
        await write(directory, args.messages, args.per_chunk)
        for way in ("at_once", "in_slices"):
            journal = _journal(directory)

            async def at_once(journal: QueueJournal = journal) -> Replay:
                return journal.replay()

            replay = at_once if way == "at_once" else journal.replay_yielding
            print(json.dumps({"way": way, "per_chunk": args.per_chunk, **await probed(replay)}))
            await journal.close()


if __name__ == "__main__":
    asyncio.run(main())
