"""Compiled ÷ pure Python of the per-message loops alone, in-process: no broker, no sockets.

    .venv/bin/python -m bench.hot_loops [--rounds 3] [--messages 1000] [--size 100]

The loops the profile names, on one frame or chunk of `--messages` messages of `--size`
bytes: a stream Publish read by the server (`PublishBlock._parse`, version 1 and 2 with a
filter value each), an Iggy 2024 SEND_MESSAGES body read into Osiris entries
(`read_each`), an apache-iggy 0.9 batch read the same way (`read_batch`), and a chunk of
Iggy records polled back and encoded as the 2024 reply (`read_chunk`, `polled`). Each
round runs a child interpreter with the compiled build and one with `MAINSTEM_PURE=1`,
the order alternating; a child reports the best of several timings per loop in ns per
message (a JSON line per child). The table gives compiled ÷ pure of the medians over
rounds. Where the whole
broker's CPU goes is `bench/compiled_ab.py`'s; this isolates the loops from a machine's
noise. Needs the compiled build (`scripts/build`). Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import timeit
from collections.abc import Callable

from mainstem import compiled

MODES = ("pure", "compiled")


def loops(messages: int, size: int) -> dict[str, Callable[[], object]]:
    """The loops, each on its input made once."""
    from mainstem.formats.chunk import Chunk, ChunkHeader
    from mainstem.protocols.iggy import batch, layouts, records
    from mainstem.protocols.iggy import codec as iggy
    from mainstem.protocols.rabbit_stream import codec, frames

    bodies = [(n, b"x" * size) for n in range(messages)]
    v1 = frames.Publish.of_bodies(1, bodies)
    v2 = frames.Publish.of_bodies(1, bodies)
    v2.filter_values = ["f"] * messages
    publish_v1, publish_v2 = memoryview(codec.encode(v1))[4:], memoryview(codec.encode(v2))[4:]
    send = b"".join(struct.pack("<16sII", (n + 1).to_bytes(16, "little"), 0, size) + body
                    for n, body in bodies)
    stored = [(n, (n + 1).to_bytes(16, "little"), b"", body) for n, body in bodies]
    vsr_batch = batch.encode_batch(0, 0, stored)
    entries = iggy.read_each(iggy.Reader(memoryview(send)), records.entry)
    data = b"".join(entries)
    chunk = Chunk(ChunkHeader(0, messages, messages, 0, 1, 0, 0, len(data), 0, 0),
                  memoryview(data), memoryview(b""))

    def poll() -> bytes:
        polled, _ = records.read_chunk(chunk, 0, messages, 1 << 30)
        return layouts.SEED.polled(0, messages, messages, [(0, polled)])

    return {
        "stream publish v1 (PublishBlock._parse)": lambda: codec.parse_frame(publish_v1),
        "stream publish v2, filter values": lambda: codec.parse_frame(publish_v2),
        "iggy 2024 send (read_each, entry)": lambda: iggy.read_each(
            iggy.Reader(memoryview(send)), records.entry),
        "iggy 0.9 send (read_batch, entry)": lambda: batch.read_batch(
            iggy.Reader(memoryview(vsr_batch)), records.entry),
        "iggy 2024 poll (read_chunk, polled)": poll,
    }


def child(messages: int, size: int) -> None:
    """One interpreter's timings: ns per message, the best of several runs of each loop."""
    timings = {name: min(timeit.repeat(run, number=20, repeat=7)) / 20 / messages * 1e9
               for name, run in loops(messages, size).items()}
    print(json.dumps({"compiled": compiled.COMPILED, "ns_per_msg": timings}))


def run_child(mode: str, messages: int, size: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    if mode == "pure":
        env[compiled.PURE_ENV] = "1"
    done = subprocess.run([sys.executable, "-m", "bench.hot_loops", "--child",
                           "--messages", str(messages), "--size", str(size)],
                          capture_output=True, text=True, env=env, check=True)
    report = json.loads(done.stdout)
    assert report["compiled"] is (mode == "compiled"), report
    timings: dict[str, float] = report["ns_per_msg"]
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.messages, args.size)
        return
    if not compiled.COMPILED:
        raise SystemExit(f"no compiled build to compare: {compiled.REASON}")
    results: dict[str, dict[str, list[float]]] = {}
    for round_number in range(args.rounds):
        for mode in MODES if round_number % 2 == 0 else MODES[::-1]:
            timings = run_child(mode, args.messages, args.size)
            print(json.dumps({"mode": mode, "round": round_number, "ns_per_msg": timings}),
                  flush=True)
            for name, ns in timings.items():
                results.setdefault(name, {}).setdefault(mode, []).append(ns)
    print("| loop | time per message compiled ÷ pure |")
    print("|---|---|")
    for name, by_mode in results.items():
        pure, built = (statistics.median(by_mode[mode]) for mode in MODES)
        print(f"| {name} | {built / pure:.2f} |")


if __name__ == "__main__":
    main()
