"""The background scrub's cost: stream publish and consume throughput of a real `mainstem
serve` with the scrub at a rate (default 16MiB/s) against the scrub off, runs alternated.

A log of `--prefill` bytes is written first, so the scrub has more to read than one
second's worth and keeps reading through each measured phase. Prints one JSON line per run
and the ratios of the medians (on / off).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer

from bench.broker_process import start_server, stop_server

BODY = b"x" * 1000
BATCH = 500


async def publish(port: int, stream: str, count: int) -> float:
    """Messages a second, each batch confirmed before the next is sent."""
    async with Producer("127.0.0.1", port, username="guest", password="guest") as producer:
        await producer.create_stream(stream, exists_ok=True)
        began = time.perf_counter()
        for _ in range(count // BATCH):
            await producer.send_batch(stream, [BODY] * BATCH)  # type: ignore[list-item]
        await producer.send_wait(stream, BODY)  # confirmed: everything before it is too
        return (count + 1) / (time.perf_counter() - began)


async def consume(port: int, stream: str, count: int) -> float:
    """Messages a second, read from the first offset."""
    received = 0
    done = asyncio.Event()

    async def on_message(message: bytes, context: object) -> None:
        nonlocal received
        received += 1
        if received >= count:
            done.set()

    async with Consumer("127.0.0.1", port, username="guest", password="guest") as consumer:
        await consumer.start()
        began = time.perf_counter()
        await consumer.subscribe(stream, on_message, offset_specification=(
            ConsumerOffsetSpecification(OffsetType.FIRST, None)))
        await asyncio.wait_for(done.wait(), 300)
        return count / (time.perf_counter() - began)


async def run(rate: str, count: int, prefill: int, directory: Path) -> dict[str, float]:
    directory.mkdir(parents=True, exist_ok=True)
    server, ports = start_server(directory / f"data-{rate}", directory / f"{rate}.log",
                                 "--scrub-rate", rate)
    try:
        port = ports["stream"]
        await publish(port, "prefill", prefill // len(BODY))
        return {"publish": await publish(port, "measured", count),
                "consume": await consume(port, "measured", count)}
    finally:
        stop_server(server)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default="16MiB")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--prefill", type=int, default=64 << 20, help="bytes")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"0": [], args.rate: []}
    with tempfile.TemporaryDirectory() as directory:
        for i in range(args.repeat):
            for rate in ("0", args.rate) if i % 2 == 0 else (args.rate, "0"):
                result = await run(rate, args.messages, args.prefill,
                                   Path(directory) / str(i))
                results[rate].append(result)
                print(json.dumps({"scrub_rate": rate, **result}), flush=True)
    for phase in ("publish", "consume"):
        on = statistics.median(r[phase] for r in results[args.rate])
        off = statistics.median(r[phase] for r in results["0"])
        print(json.dumps({"phase": phase, "on": round(on), "off": round(off),
                          "ratio": round(on / off, 3)}))


if __name__ == "__main__":
    asyncio.run(main())
