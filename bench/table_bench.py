"""Streams as tables: the broker's CPU per published message with the table on and off.

    .venv/bin/python -m bench.table_bench [--messages 200000] [--body 100] [--schema]

One run: a `mainstem serve` with a directory tier, rstream publishing --messages messages
of --body bytes (batches of 500, confirms awaited per 50 batches) into a stream declared
with `table: parquet`, and into one without. Each broker's CPU seconds (from /proc), two
ways: cold, from before the stream is declared (the table writer's one-time start, its
imports, counted in); warm, from after a first batch is in the stream (and, with a table,
in the table: the writer has started), which is the cost per message in steady state.
Both runs ask GET /api/tiering alike while publishing; the table's run then until it has
caught up (lag 0), once a second, and the plain run then waits as long (the broker's
background work, its scrub of what was written, goes on in both). Prints CPU per message
both ways, the ratios, the table's lag seen while publishing, and the rows/s DuckDB reads
the table at; asserts nothing. With --schema the bodies are JSON objects of --body bytes
(`{"id": .., "amount": .., "note": "xx.."}`) in both runs, and the table declares their
schema (`table-schema`): its typed columns are made too.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import duckdb
from rstream import AMQPMessage, Producer

from bench.broker_process import cpu_seconds, start_server, stop_server

BATCH = 500
SCHEMA = json.dumps({"id": "long", "amount": "long", "note": "string"})


def tables(admin: int) -> list[dict[str, Any]]:
    request = urllib.request.Request(f"http://127.0.0.1:{admin}/api/tiering", headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(request) as response:
        rows: list[dict[str, Any]] = json.load(response)["tables"]
        return rows


async def publish(port: int, stream: str, messages: int, body: bytes, admin: int) -> int:
    """Publish; the largest table lag seen between batches (0 without a table)."""
    worst = 0
    async with Producer("127.0.0.1", port, username="guest", password="guest") as producer:
        for start in range(0, messages, BATCH):
            await producer.send_batch(stream, [AMQPMessage(body=body)] * BATCH)
            if start % (BATCH * 50) == 0:
                worst = max(worst, 0, *(row["lag"] for row in await asyncio.to_thread(
                    tables, admin)))
    return worst


async def declare(port: int, stream: str, arguments: dict[str, str]) -> None:
    async with Producer("127.0.0.1", port, username="guest", password="guest") as producer:
        await producer.create_stream(stream, arguments=arguments)


def caught_up(admin: int, messages: int) -> dict[str, Any]:
    for _ in range(600):
        row = tables(admin)[0]
        if row["lag"] == 0 and row["ends"] == [messages] and row["metadata_location"]:
            return row
        time.sleep(1)
    raise AssertionError("the table never caught up")


def run(table: dict[str, str] | None, messages: int, body: bytes, root: Path,
        settle_s: float = 0.0) -> tuple[float, float, int, float, float]:
    """(cold and warm CPU seconds, worst lag, DuckDB rows/s, seconds from the last publish
    until the table caught up) of one broker, its stream declared with `table`'s
    arguments; without a table it waits `settle_s`."""
    data, tier, log = root / "data", root / "tier", root / "server.log"
    server, ports = start_server(data, log, "--tier-url", str(tier))
    try:
        cold = cpu_seconds(server.pid)
        asyncio.run(declare(ports["stream"], "bench", table or {}))
        asyncio.run(publish(ports["stream"], "bench", BATCH, body, ports["admin"]))
        if table:
            caught_up(ports["admin"], BATCH)
        warm = cpu_seconds(server.pid)
        worst = asyncio.run(publish(ports["stream"], "bench", messages, body, ports["admin"]))
        rate, published = 0.0, time.monotonic()
        if table:
            row = caught_up(ports["admin"], messages + BATCH)
            settle_s = time.monotonic() - published
        else:
            time.sleep(settle_s)
        now = cpu_seconds(server.pid)
        if table:
            files = row["location"].removeprefix("file://") + "/data/*/*.parquet"
            started = time.perf_counter()
            count = duckdb.sql(f"SELECT count(*), sum(octet_length(value)) FROM "
                               f"read_parquet('{files}')").fetchall()[0][0]
            rate = count / (time.perf_counter() - started)
        return now - cold, now - warm, worst, rate, settle_s
    finally:
        stop_server(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--schema", action="store_true",
                        help="JSON bodies, and a table declaring their schema")
    args = parser.parse_args()
    body = b"x" * args.body
    table = {"table": "parquet"}
    if args.schema:
        head = b'{"id": 12345, "amount": 678, "note": "'
        body = head + b"x" * max(0, args.body - len(head) - 2) + b'"}'
        table["table-schema"] = SCHEMA
    with tempfile.TemporaryDirectory() as plain_root, \
            tempfile.TemporaryDirectory() as table_root:
        table_cold, with_table, worst, rate, settle_s = run(table, args.messages, body,
                                                            Path(table_root))
        plain_cold, plain, _, _, _ = run(None, args.messages, body, Path(plain_root),
                                         settle_s)
    per = 1e6 / args.messages
    print(f"broker CPU per message, warm: without a table {plain * per:.2f} us, with "
          f"{with_table * per:.2f} us: {with_table / plain:.2f}x")
    print(f"cold (the writer's start counted in): without {plain_cold * per:.2f} us, with "
          f"{table_cold * per:.2f} us: {table_cold / plain_cold:.2f}x")
    print(f"worst table lag seen while publishing: {worst} records")
    print(f"DuckDB count + sum over the table: {rate / 1e6:.2f} M rows/s")


if __name__ == "__main__":
    main()
