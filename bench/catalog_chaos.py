"""Catalog changes under faults (issue 39, items 3 and 4), counted.

    .venv/bin/python -m bench.catalog_chaos [--trials 3] [--keys 40] [--rounds 10]

Starts an etcd and three `mainstem serve` nodes on loopback (the tests' LocalCluster) and
runs each scenario `--trials` times, printing one JSON line per trial and a summary:

- contended: policies and users `contended-K` written through all three nodes at once,
  `--rounds` times, etcd frozen 0.1 s every 0.3 s; the node values left different from
  etcd's (each node's against etcd's own key).
- outage: policies PUT through node1 from four threads (at most 50 each) while etcd is
  frozen (SIGSTOP) for `--outage-s`; the answers by status, and once etcd is back how many
  policies every node holds, some node only (a disagreement), and answered 201 yet
  missing somewhere.
- outage_kill: the same, node1 SIGKILLed before etcd is resumed, then restarted.
- kill: policies PUT through node3 from four threads, node3 SIGKILLed right after its 40th
  answer (then restarted); the policies answered 201 that node1 or node2 lack.

The cluster stays up between scenarios (a fault is healed before the next). Separate from
`cluster_chaos` (stream publishing under random faults): these are catalog counts, each
scenario a fault of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from tests.support.catalog_clients import (
    NODES,
    call,
    contended_writes,
    missing_policies,
    policies_until_killed,
    put_policy,
    settled_divergence,
)

from mainstem.testing_cluster import LocalCluster

AGREE_S = 15.0  # for the nodes to agree once etcd is back


def contended(cluster: LocalCluster, keys: int, rounds: int) -> dict[str, object]:
    statuses = contended_writes(cluster, keys, rounds)
    wrong = settled_divergence(cluster, keys)
    return {"scenario": "contended", "writes": len(statuses),
            "answers": dict(Counter(statuses)), "node_values": keys * 2 * len(NODES),
            "divergent": len(wrong)}


def outage(cluster: LocalCluster, seconds: float, prefix: str, *, kill_writer: bool
           ) -> dict[str, object]:
    etcd = cluster.etcd.process
    assert etcd is not None
    answers: dict[str, int] = {}
    lock = threading.Lock()
    frozen_until = time.monotonic() + seconds

    def writer(thread: int) -> None:
        for k in range(50):
            if time.monotonic() > frozen_until:
                return
            name = f"{prefix}-{thread}-{k}"
            try:
                status = put_policy(cluster, "node1", name, k)
            except OSError:  # node1 killed
                return
            with lock:
                answers[name] = status

    os.kill(etcd.pid, signal.SIGSTOP)
    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    if kill_writer:
        cluster.kill("node1")
    os.kill(etcd.pid, signal.SIGCONT)
    for thread in threads:
        thread.join()
    if kill_writer:
        cluster.start("node1")
    holders = agreed_holders(cluster, list(answers))
    acknowledged = [name for name, status in answers.items() if status in (201, 204)]
    return {"scenario": "outage_kill" if kill_writer else "outage", "frozen_s": seconds,
            "answers": dict(Counter(answers.values())),
            "held_everywhere": sum(n == len(NODES) for n in holders.values()),
            "held_somewhere_only": sum(0 < n < len(NODES) for n in holders.values()),
            "acknowledged_missing": sum(holders[name] < len(NODES) for name in acknowledged)}


def agreed_holders(cluster: LocalCluster, names: list[str]) -> dict[str, int]:
    """How many nodes hold each of `names`, once they agree (or AGREE_S passed)."""
    deadline = time.monotonic() + AGREE_S
    while True:
        missing = {node: set(missing_policies(cluster, node, names)) for node in NODES}
        holders = {name: sum(name not in missing[node] for node in NODES) for name in names}
        if all(n in (0, len(NODES)) for n in holders.values()) or \
                time.monotonic() > deadline:
            return holders
        time.sleep(0.5)


def kill(cluster: LocalCluster, prefix: str) -> dict[str, object]:
    acknowledged = policies_until_killed(cluster, "node3", 40, prefix)
    time.sleep(1.0)  # what etcd holds reaches the watches
    lost = set(missing_policies(cluster, "node1", acknowledged)) | set(
        missing_policies(cluster, "node2", acknowledged))
    cluster.start("node3")
    return {"scenario": "kill", "acknowledged": len(acknowledged), "lost": len(lost)}


def tidy(cluster: LocalCluster) -> None:
    """Delete the policies a scenario left, so the next one lists few."""
    for row in call(cluster, "node1", "GET", "/api/policies/%2F")[1]:
        call(cluster, "node1", "DELETE", f"/api/policies/%2F/{row['name']}")


def run(directory: Path, trials: int, keys: int, rounds: int, outage_s: float
        ) -> dict[str, object]:
    totals: dict[str, Counter[str]] = {}
    with LocalCluster(directory) as cluster:
        for trial in range(trials):
            for result in (contended(cluster, keys, rounds),
                           outage(cluster, outage_s, f"outage{trial}", kill_writer=False),
                           outage(cluster, outage_s, f"dead{trial}", kill_writer=True),
                           kill(cluster, f"kill{trial}")):
                print(json.dumps({"trial": trial, **result}), flush=True)
                counts = totals.setdefault(str(result["scenario"]), Counter())
                counts.update({k: v for k, v in result.items() if isinstance(v, int)})
                tidy(cluster)
    return {"trials": trials, **{scenario: dict(counts) for scenario, counts in totals.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--outage-s", type=float, default=8.0)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="catalog-chaos-", dir=args.dir))
    summary = run(directory, args.trials, args.keys, args.rounds, args.outage_s)
    shutil.rmtree(directory)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
