"""Stream protocol publish→deliver latency at a fixed publish rate, against any broker.

    .venv/bin/python -m bench.stream_latency [--port 5552] [--rate 100000] [--seconds 10]
        [--broker-pid PID]

Without --port it starts a real `mainstem serve` on loopback ports. A paced rstream
publisher (its own process) sends 100-byte bodies that start with their send time
(CLOCK_MONOTONIC), with confirms: whenever it wakes (every ~0.5 ms) what is due
goes out in one send_batch (of at most 100);
a consumer in this process, subscribed at `next` before the publisher starts,
records now - send time for every message. Prints one JSON line: p50/p99/p999/max
in ms, msgs/s delivered and, with a broker pid, the CPU µs per message of that
process and every process it started. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import queue
import struct
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.broker_process import start_server, stop_server
from bench.multicore_bench import broker_cpu

BODY_SIZE = 100
SEND_TIME = struct.Struct("<Q")  # monotonic ns at the start of the body; 0 marks the warm-up
MAX_BATCH = 100                  # messages per Publish frame at most
MAX_UNCONFIRMED = 50_000         # the publisher waits rather than buffer without bound


def percentiles(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)

    def at(fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] / 1e6, 3)

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "p999_ms": at(0.999),
            "max_ms": round(ordered[-1] / 1e6, 3)}


async def paced_publish(host: str, port: int, stream: str, rate: float, total: int) -> int:
    """Send `total` messages at `rate` msgs/s; returns how many were confirmed."""
    from rstream import Producer

    padding = b"x" * (BODY_SIZE - SEND_TIME.size)
    confirmed = 0

    def on_confirm(status: Any) -> None:
        nonlocal confirmed
        confirmed += status.is_confirmed

    async with Producer(host, port, username="guest", password="guest") as producer:
        await producer.send_wait(stream, SEND_TIME.pack(0) + padding)  # connects the publisher
        sent, started = 0, time.monotonic()
        while sent < total:
            due = min(total, int(rate * (time.monotonic() - started))) - sent
            if due <= 0 or sent - confirmed > MAX_UNCONFIRMED:
                await asyncio.sleep(0.0005)
                continue
            count = min(due, MAX_BATCH)
            body = SEND_TIME.pack(time.monotonic_ns()) + padding
            await producer.send_batch(stream, [body] * count, on_publish_confirm=on_confirm)
            sent += count
        deadline = time.monotonic() + 30
        while confirmed < sent and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    return confirmed


def publisher_process(host: str, port: int, stream: str, rate: float, total: int,
                      results: Any) -> None:
    results.put(asyncio.run(paced_publish(host, port, stream, rate, total)))


async def measure(host: str, port: int, rate: float, seconds: float,
                  broker_pid: int | None = None) -> dict[str, Any]:
    """One paced run on a fresh stream; the row of figures (the stream is deleted after)."""
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

    stream, total = f"latency-{uuid.uuid4().hex[:8]}", int(rate * seconds)
    confirmed = 0
    samples: list[int] = []
    everything = asyncio.Event()

    def on_message(body: bytes, _context: object) -> None:
        send_time = SEND_TIME.unpack_from(body)[0]
        if send_time:
            samples.append(time.monotonic_ns() - send_time)
            if len(samples) >= total:
                everything.set()

    async with Consumer(host, port, username="guest", password="guest") as consumer:
        await consumer.create_stream(stream)
        try:
            await consumer.subscribe(stream, on_message, initial_credit=10,
                                     offset_specification=ConsumerOffsetSpecification(
                                         OffsetType.NEXT))
            context = multiprocessing.get_context("spawn")
            results = context.Queue()
            publisher = context.Process(target=publisher_process, daemon=True,
                                        args=(host, port, stream, rate, total, results))
            cpu0, started = _cpu(broker_pid), time.monotonic()
            publisher.start()
            try:
                confirmed = await asyncio.to_thread(results.get, True, seconds + 60)
                await asyncio.wait_for(everything.wait(), 10)  # the last deliveries
            except (TimeoutError, queue.Empty):
                pass  # a short count in the row says so
            finally:
                elapsed, cpu = time.monotonic() - started, _cpu(broker_pid) - cpu0
                await asyncio.to_thread(publisher.join, 10)
                if publisher.is_alive():
                    publisher.kill()
        finally:
            await consumer.delete_stream(stream, missing_ok=True)
    row: dict[str, Any] = {"rate": rate, "messages": len(samples), "confirmed": confirmed,
                           "msgs_per_s": round(len(samples) / elapsed), **percentiles(samples)}
    if broker_pid is not None:
        row["broker_us_per_msg"] = round(cpu / max(len(samples), 1) * 1e6, 2)
    return row


def _cpu(pid: int | None) -> float:
    return broker_cpu(pid) if pid is not None else 0.0  # the server and its workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, help="a running broker's stream port")
    parser.add_argument("--broker-pid", type=int, help="that broker's pid, for its CPU")
    parser.add_argument("--rate", type=float, default=100_000)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    if args.port is not None:
        row = asyncio.run(measure("127.0.0.1", args.port, args.rate, args.seconds,
                                  args.broker_pid))
    else:
        with tempfile.TemporaryDirectory(prefix="stream-latency-") as tmp:
            server, ports = start_server(Path(tmp) / "data", Path(tmp) / "server.log")
            try:
                row = asyncio.run(measure("127.0.0.1", ports["stream"], args.rate,
                                          args.seconds, server.pid))
            finally:
                stop_server(server)
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
