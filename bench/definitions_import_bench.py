"""A definitions import of many durable classic queues (each with a binding): the seconds
`import_definitions` takes on a broker opened in a temporary directory, the best of
--runs, and the rows the AMQP catalog tables hold after it.

    .venv/bin/python -m bench.definitions_import_bench [--queues 2000] [--runs 3]

Run it against two source trees (PYTHONPATH=<tree>/src:.) for a before/after ratio.
Prints one JSON line; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from mainstem.admin.definitions import import_definitions
from mainstem.broker.core import BrokerCore
from mainstem.broker.settings import CoreSettings


def definitions(queues: int) -> dict[str, Any]:
    names = [f"q{i:05d}" for i in range(queues)]
    return {
        "queues": [{"name": name, "vhost": "/", "durable": True, "auto_delete": False,
                    "arguments": {"x-max-length": 1000}} for name in names],
        "exchanges": [{"name": "fanout", "vhost": "/", "type": "direct", "durable": True,
                       "auto_delete": False, "internal": False, "arguments": {}}],
        "bindings": [{"source": "fanout", "vhost": "/", "destination": name,
                      "destination_type": "queue", "routing_key": name, "arguments": {}}
                     for name in names],
    }


async def one_import(queues: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as directory:
        core = await BrokerCore.open(Path(directory), CoreSettings())
        try:
            started = time.perf_counter()
            await import_definitions(core, definitions(queues))
            elapsed = time.perf_counter() - started
            rows = sum(len(record[kind]) for record in
                       (vhost.records() for vhost in core.queues.vhosts.values())
                       for kind in ("queues", "bindings"))
        finally:
            await core.close()
    return elapsed, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = [asyncio.run(one_import(args.queues)) for _ in range(args.runs)]
    print(json.dumps({"queues": args.queues, "best_s": round(min(r[0] for r in results), 3),
                      "runs_s": [round(r[0], 3) for r in results], "rows": results[0][1]}))


if __name__ == "__main__":
    main()
