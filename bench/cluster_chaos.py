"""Faults at random under confirmed publishing, checked as Jepsen checks a history.

    .venv/bin/python -m bench.cluster_chaos [--seconds 300] [--seed N]

Starts an etcd and three `mainstem serve` nodes on loopback (the tests' LocalCluster), one
replicated stream, and a deduplicating rstream publisher that follows the leader. While it
publishes, a nemesis does one fault at a time, each healed before the next, so at most a
minority is down: SIGKILL a node (the leader more often than not) and restart it, freeze
a node (SIGSTOP/SIGCONT), freeze etcd. At the end everything is healed and every node's
copy of the stream is checked: every confirmed message present exactly once, in send
order, nothing that was never sent. Prints one JSON line per fault and a summary. It is a
soak, not a test: too long and too random for the suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import signal
import tempfile
import time
from pathlib import Path

from tests.support.cluster_clients import (
    FollowingPublisher,
    bodies_on,
    check_history,
    committed_end,
    stream_metadata,
    wait_for_count,
)

from mainstem.testing_cluster import LocalCluster

STREAM = "chaos"
CATCH_UP_S = 120  # for every node to serve every confirmed message once healed


async def leader_name(cluster: LocalCluster) -> str | None:
    for node in cluster.live():
        try:
            leader, _ = await stream_metadata(node.ports["stream"], STREAM)
        except Exception:
            continue
        return next((n.name for n in cluster.nodes.values()
                     if n.alive and n.ports.get("stream") == int(leader.port)), None)
    return None


async def fault(cluster: LocalCluster, rng: random.Random) -> dict[str, object]:
    """Do one fault and heal it; what was done."""
    kind = rng.choice(["kill_leader", "kill_leader", "kill_any", "freeze_node", "freeze_etcd"])
    hold = round(rng.uniform(1, 8), 1)
    name = (await leader_name(cluster) if kind == "kill_leader" else None) or rng.choice(
        [n.name for n in cluster.live()])
    if kind.startswith("kill"):
        cluster.kill(name)
        await asyncio.sleep(hold)
        await asyncio.to_thread(cluster.start, name)
    elif kind == "freeze_node":
        cluster.kill(name, signal.SIGSTOP)
        await asyncio.sleep(hold)
        cluster.kill(name, signal.SIGCONT)
    else:
        name = "etcd"
        process = cluster.etcd.process
        assert process is not None
        process.send_signal(signal.SIGSTOP)
        await asyncio.sleep(hold)
        process.send_signal(signal.SIGCONT)
    return {"fault": kind, "target": name, "seconds": hold}


async def publish_until(publisher: FollowingPublisher, deadline: float) -> None:
    while time.monotonic() < deadline:
        await publisher.publish(100)
        await asyncio.sleep(0.05)


async def run(directory: Path, seconds: float, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    with LocalCluster(directory) as cluster:
        publisher = FollowingPublisher(cluster, STREAM)
        await publisher.create()
        deadline = time.monotonic() + seconds
        publishing = asyncio.ensure_future(publish_until(publisher, deadline))
        faults = 0
        while time.monotonic() < deadline and not publishing.done():
            await asyncio.sleep(rng.uniform(2, 6))
            print(json.dumps(await fault(cluster, rng)), flush=True)
            faults += 1
        await publishing
        await publisher.settle(60)
        await publisher.close()
        for node in cluster.nodes.values():
            port = node.ports["stream"]
            try:
                await wait_for_count(port, STREAM, len(publisher.confirmed), CATCH_UP_S)
            except AssertionError:
                raise AssertionError(
                    f"{node.name} serves {committed_end(port, STREAM)} of "
                    f"{len(publisher.confirmed)} confirmed messages after {CATCH_UP_S} s; "
                    f"logs and data kept in {directory}") from None
            check_history(bodies_on(port, STREAM), publisher.confirmed, publisher.sent)
        return {"seed": seed, "seconds": seconds, "faults": faults, "sent": publisher.sent,
                "confirmed": len(publisher.confirmed), "checked_nodes": len(cluster.nodes),
                "result": "every confirmed message once, in order, on every node"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    directory = Path(tempfile.mkdtemp(prefix="chaos-", dir=args.dir))
    summary = asyncio.run(run(directory, args.seconds, seed))
    shutil.rmtree(directory)  # kept when the check failed
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
