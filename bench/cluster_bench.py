"""Replicated (three nodes, three replicas) against single-node stream publishing.

    .venv/bin/python -m bench.cluster_bench [--messages 300000] [--size 100] [--batch 100]
                                            [--in-flight 20]

Starts a real etcd and three `mainstem serve` nodes (mainstem.testing_cluster) and, in
the same run, one single-node `mainstem serve`; rstream publishes with confirms to the
stream's leader in batches, keeping `--in-flight` batches unconfirmed at most. Prints,
per setup: msgs/s, confirm latency p50/p99 (from sending a batch to its last confirm),
and broker CPU µs per message (the leader alone, and all nodes together). JSON lines.
Asserts nothing: performance is measured here, never in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from rstream import AMQPMessage, ConfirmationStatus, Producer

from bench.broker_process import cpu_seconds, start_server, stop_server
from mainstem.testing_cluster import LocalCluster


async def publish(port: int, n: int, size: int, batch: int, in_flight: int
                  ) -> tuple[float, list[float]]:
    """Publish n messages; returns (seconds, per-batch confirm latencies in ms)."""
    body = b"x" * size
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    window = asyncio.Semaphore(in_flight)
    done = asyncio.Event()
    confirmed = 0

    def on_confirm(status: ConfirmationStatus) -> None:
        nonlocal confirmed
        if not status.is_confirmed:
            return
        confirmed += 1
        if status.message_id % batch == 0:  # the batch's last message
            latencies.append((time.perf_counter() - sent_at.pop(status.message_id)) * 1000)
            window.release()
        if confirmed >= n:
            done.set()

    async with Producer("127.0.0.1", port, username="guest", password="guest") as producer:
        await producer.create_stream("bench")
        started = time.perf_counter()
        for first in range(1, n + 1, batch):
            await window.acquire()
            messages = []
            for i in range(first, first + batch):
                message = AMQPMessage(body=body)
                message.publishing_id = i
                messages.append(message)
            sent_at[first + batch - 1] = time.perf_counter()
            await producer.send_batch("bench", messages, "bench",
                                      on_publish_confirm=on_confirm)
        await asyncio.wait_for(done.wait(), 120)
        return time.perf_counter() - started, latencies


def row(setup: str, n: int, seconds: float, latencies: list[float], leader_cpu: float,
        total_cpu: float) -> dict[str, object]:
    cuts = statistics.quantiles(latencies, n=100)
    return {"setup": setup, "messages": n, "msgs_per_s": round(n / seconds),
            "confirm_p50_ms": round(statistics.median(latencies), 2),
            "confirm_p99_ms": round(cuts[98], 2),
            "leader_cpu_us_per_msg": round(leader_cpu / n * 1e6, 2),
            "all_nodes_cpu_us_per_msg": round(total_cpu / n * 1e6, 2)}


async def single_node(directory: Path, args: argparse.Namespace) -> dict[str, object]:
    server, ports = start_server(directory / "single", directory / "single.log")
    try:
        cpu0 = cpu_seconds(server.pid)
        seconds, latencies = await publish(ports["stream"], args.messages, args.size,
                                           args.batch, args.in_flight)
        cpu = cpu_seconds(server.pid) - cpu0
    finally:
        stop_server(server)
    return row("single node", args.messages, seconds, latencies, cpu, cpu)


async def replicated(directory: Path, args: argparse.Namespace) -> dict[str, object]:
    with LocalCluster(directory / "cluster") as cluster:
        nodes = list(cluster.nodes.values())
        before = [cpu_seconds(node.pid) for node in nodes]
        seconds, latencies = await publish(nodes[0].ports["stream"], args.messages,
                                           args.size, args.batch, args.in_flight)
        used = [cpu_seconds(node.pid) - cpu for node, cpu in zip(nodes, before, strict=True)]
    return row("3 nodes, 3 replicas", args.messages, seconds, latencies, used[0], sum(used))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--in-flight", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mainstem-cluster-bench-") as tmp:
        for measure in (single_node, replicated):
            print(json.dumps(await measure(Path(tmp), args)), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
