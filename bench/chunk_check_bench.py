"""What checking a chunk's CRCs before sending it raw costs a stream consumer.

    .venv/bin/python -m bench.chunk_check_bench [--messages 500000] [--batch 100] [--repeat 3]

A broker (`mainstem serve`) is filled with one stream of 100-byte messages, `--batch` to a
chunk, and restarted: the new process wrote none of its chunks, so none is known sound and
the first read of each checks it (`chunk_stream.check_chunk`, from the page cache, warmed
first). Then two passes of one lean consumer (mainstem's blocking stream client) read the
whole stream: the first checks every chunk, the second finds every chunk marked sound and
checks none, the path a consumer at the tail of chunks written here always takes. For each
pass: msgs/s and the broker's CPU microseconds per message, one JSON line each; `--repeat`
restarts for more pairs; then a summary row (medians, ratio of checked to unchecked).
Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.broker_process import cpu_seconds, start_server, stop_server
from mainstem.client.stream import Endpoint, StreamClient

STREAM = "check-bench"
BODY = b"x" * 100


def fill(port: int, messages: int, batch: int) -> None:
    with StreamClient(Endpoint("127.0.0.1", port, "guest", "guest", "/")) as client:
        client.create_stream(STREAM)
        client.declare_publisher(1, "", STREAM)
        for first in range(0, messages, batch):
            client.publish(1, [(i, BODY) for i in range(first, min(first + batch, messages))])


def consume(port: int, pid: int, messages: int, kind: str) -> dict[str, Any]:
    """One pass over the stream: msgs/s and the broker's CPU per message."""
    with StreamClient(Endpoint("127.0.0.1", port, "guest", "guest", "/")) as client:
        cpu, start = cpu_seconds(pid), time.perf_counter()
        read = sum(chunk.header.num_records for chunk in client.chunks(STREAM, 0, messages))
        wall, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu
    assert read >= messages
    return {"pass": kind, "msgs_per_s": round(read / wall),
            "broker_cpu_us_per_msg": round(cpu / read * 1e6, 3)}


def warm(data: Path) -> None:
    """The segments in the page cache, as a consumer that keeps up finds them."""
    for path in data.rglob("*.segment"):
        path.read_bytes()


def run(messages: int, batch: int, repeat: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as work:
        data, log = Path(work) / "data", Path(work) / "broker.log"
        server, ports = start_server(data, log)
        try:
            fill(ports["stream"], messages, batch)
        finally:
            stop_server(server)
        for _ in range(repeat):
            server, ports = start_server(data, log)
            try:
                warm(data)
                for kind in ("checked", "known sound"):
                    rows.append(consume(ports["stream"], server.pid, messages, kind))
                    print(json.dumps(rows[-1]), flush=True)
            finally:
                stop_server(server)
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def median(kind: str, key: str) -> float:
        return statistics.median(row[key] for row in rows if row["pass"] == kind)

    return {"summary": True,
            "throughput_checked_over_sound": round(
                median("checked", "msgs_per_s") / median("known sound", "msgs_per_s"), 3),
            "broker_cpu_checked_over_sound": round(
                median("checked", "broker_cpu_us_per_msg")
                / median("known sound", "broker_cpu_us_per_msg"), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--batch", type=int, default=100, help="messages a chunk")
    parser.add_argument("--repeat", type=int, default=3)
    arguments = parser.parse_args()
    print(json.dumps(summary(run(arguments.messages, arguments.batch, arguments.repeat))))


if __name__ == "__main__":
    main()
