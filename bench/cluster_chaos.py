"""Faults at random under confirmed publishing, checked as Jepsen checks a history.

    .venv/bin/python -m bench.cluster_chaos [--seconds 300] [--seed N] [--via leader|any]
                                            [--tier]
    .venv/bin/python -m bench.cluster_chaos --etcd-outage 8 [--rounds 3]

Starts an etcd and three `mainstem serve` nodes on loopback (the tests' LocalCluster), one
replicated stream, and a deduplicating publisher: rstream following the leader, or
(`--via any`) one that publishes through random nodes, which forward to the leader. While it
publishes, a nemesis does one fault at a time, each healed before the next, so at most a
minority is down: SIGKILL a node (the leader more often than not) and restart it, freeze
a node (SIGSTOP/SIGCONT), freeze etcd. At the end everything is healed and every node's
copy of the stream is checked: every confirmed message present exactly once, in send
order, nothing that was never sent. Meanwhile a reader per node polls what that node
serves as committed; every record any of them saw must be in the final log at the same
offset (no reader saw a record that a failover later cut). Prints one JSON line per fault
and a summary. It is a soak, not a test: too long and too random for the suite.

`--tier` gives the nodes one shared directory tier and the stream small segments that
tier almost at once, and adds a fault: the leader SIGKILLed the instant a new object
appears in the tier (mid-round), restarted after the hold. At the end the tier is checked
too (issue 39): every record names an object of its recorded size and CRC-32, no object
present at a fault was replaced later (same inode), and none is left that no record names.

`--etcd-outage SECONDS` runs one scenario instead, measured: etcd stopped for SECONDS
under confirmed AMQP publishing to a stream queue (through its leader and a replica),
then started again; prints, per round, the seconds from etcd's return to the first
confirm (issue 39: 12-23 s for an 8 s outage, before leases were replaced at once).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import signal
import sqlite3
import tempfile
import time
from pathlib import Path

from tests.support.cluster_clients import (
    FollowingPublisher,
    amqp_message,
    bodies_on,
    check_history,
    committed_end,
    stream_client,
    stream_metadata,
    wait_for_count,
)
from tests.support.etcd_outage import first_confirm_after_etcd_returns

from mainstem.client.stream import Endpoint, StreamClient
from mainstem.log.tier import file_crc32
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


TIER_ARGUMENTS = {"stream-max-segment-size-bytes": 64_000, "tier-local-max-bytes": 128_000}


def tier_objects(tier: Path) -> dict[str, int]:
    """key -> inode of every segment and index object in the tier."""
    return {str(path.relative_to(tier)): path.stat().st_ino
            for pattern in ("*.segment", "*.index") for path in tier.rglob(pattern)}


async def kill_at_upload(cluster: LocalCluster, tier: Path, name: str) -> None:
    """SIGKILL node `name` the instant a new object appears in the tier (or after 10 s)."""
    before = set(tier_objects(tier))
    for _ in range(2000):
        if set(tier_objects(tier)) - before:
            break
        await asyncio.sleep(0.005)
    cluster.kill(name)


def check_tier(tier: Path, records: list[dict[str, object]], seen: dict[str, int]) -> int:
    """Every record's objects there, as recorded; none seen earlier replaced; none left
    unnamed. How many objects were checked."""
    objects = tier_objects(tier)
    named: dict[str, tuple[object, object]] = {}
    for record in records:
        key = str(record["key"])
        named[key] = (record["segment_size"], record["segment_crc"])
        named[key.removesuffix(".segment") + ".index"] = (record["index_size"],
                                                          record["index_crc"])
    assert set(named) == set(objects), (
        f"recorded but missing: {sorted(set(named) - set(objects))[:5]}; "
        f"there but unrecorded: {sorted(set(objects) - set(named))[:5]}")
    for key, (size, crc) in named.items():
        stored = (tier / key).stat().st_size, file_crc32(tier / key)
        assert stored == (size, crc), f"{key} holds {stored}, recorded {(size, crc)}"
    replaced = [key for key, inode in seen.items() if key in objects and objects[key] != inode]
    assert not replaced, f"objects replaced after they were written: {replaced[:5]}"
    return len(objects)


def recorded_on(cluster: LocalCluster, name: str) -> list[dict[str, object]]:
    path = cluster.nodes[name].data_dir / "catalog.sqlite"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return [json.loads(row[0]) for row in db.execute("SELECT record FROM tiered_segments")]


async def fault(cluster: LocalCluster, rng: random.Random, tier: Path | None = None,
                seen: dict[str, int] | None = None) -> dict[str, object]:
    """Do one fault and heal it; what was done."""
    kinds = ["kill_leader", "kill_leader", "kill_any", "freeze_node", "freeze_etcd"]
    kind = rng.choice(kinds + ["kill_leader_at_upload"] * 2 if tier is not None else kinds)
    hold = round(rng.uniform(1, 8), 1)
    name = (await leader_name(cluster) if kind.startswith("kill_leader") else None) or \
        rng.choice([n.name for n in cluster.live()])
    if tier is not None and seen is not None:
        seen.update(tier_objects(tier))
    if kind == "kill_leader_at_upload":
        assert tier is not None
        await kill_at_upload(cluster, tier, name)
        await asyncio.sleep(hold)
        await asyncio.to_thread(cluster.start, name)
    elif kind.startswith("kill"):
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


def read_new(port: int, seen: dict[int, bytes]) -> None:
    """Record every committed record the node at `port` serves past what was seen."""
    client = stream_client(port)
    try:
        start = max(seen, default=-1) + 1
        end = client.offsets(STREAM).end
        for chunk in client.chunks(STREAM, start, end):
            for offset, entry in enumerate(chunk.entries(), chunk.chunk_id):
                if start <= offset < end:
                    seen[offset] = bytes(entry.body)
    finally:
        client.close()


async def read_until(cluster: LocalCluster, name: str, seen: dict[int, bytes],
                     stop: asyncio.Event) -> None:
    while not stop.is_set():
        node = cluster.nodes[name]
        if node.alive:
            with contextlib.suppress(Exception):  # a node down or frozen: read later
                await asyncio.wait_for(
                    asyncio.to_thread(read_new, node.ports["stream"], seen), 10)
        await asyncio.sleep(0.5)


def check_reads(final: list[bytes], reads: dict[str, dict[int, bytes]]) -> int:
    """Every record a reader saw is the final log's record at that offset."""
    checked = 0
    for name, seen in reads.items():
        for offset, body in seen.items():
            assert offset < len(final) and final[offset] == body, (
                f"a reader on {name} saw offset {offset} as {body!r}, which the final log "
                f"has as {final[offset] if offset < len(final) else None!r}")
            checked += 1
    return checked


class AnyNodePublisher:
    """Publishes through a node picked at random, live or not, a batch at a time, each
    waiting for its confirms (a replica forwards to the leader); on any error it moves to
    another node and resends from its oldest unconfirmed message, in order."""

    def __init__(self, cluster: LocalCluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.sent = 0
        self.confirmed_up_to = 0  # each batch waits for its confirms: they come in order
        self._client: StreamClient | None = None

    @property
    def confirmed(self) -> set[int]:
        return set(range(1, self.confirmed_up_to + 1))

    def _connect(self) -> StreamClient:
        if self._client is None:
            node = self.rng.choice(list(self.cluster.nodes.values()))
            client = StreamClient(Endpoint.parse(
                f"rabbitmq-stream://guest:guest@127.0.0.1:{node.ports['stream']}/%2F"),
                timeout=5.0)
            try:
                client.declare_publisher(1, "any-node", STREAM)
            except BaseException:
                client.close()
                raise
            self._client = client
        return self._client

    def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def publish(self, count: int) -> None:
        self.sent += count
        for _ in range(600):  # bounded: a healed cluster answers within seconds
            if self.confirmed_up_to == self.sent:
                return
            try:
                client = self._connect()
                for start in range(self.confirmed_up_to + 1, self.sent + 1, 100):
                    ids = range(start, min(start + 99, self.sent) + 1)
                    client.publish(1, [(i, amqp_message(f"m{i}".encode())) for i in ids])
                    self.confirmed_up_to = ids[-1]
            except Exception:
                self._drop()
                time.sleep(0.2)
        raise AssertionError("no node took the publisher's messages")

    async def create(self) -> None:
        await FollowingPublisher(self.cluster, STREAM).create()

    async def settle(self, timeout_s: float) -> None:
        await asyncio.to_thread(self.publish, 0)

    async def close(self) -> None:
        self._drop()


Publisher = FollowingPublisher | AnyNodePublisher


async def publish_until(publisher: Publisher, deadline: float) -> None:
    while time.monotonic() < deadline:
        if isinstance(publisher, AnyNodePublisher):
            await asyncio.to_thread(publisher.publish, 100)
        else:
            await publisher.publish(100)
        await asyncio.sleep(0.05)


def raw_bodies(port: int) -> list[bytes]:
    """The node's whole committed log, entry bodies by offset."""
    seen: dict[int, bytes] = {}
    read_new(port, seen)
    return [seen[offset] for offset in range(len(seen))]


async def run(directory: Path, seconds: float, seed: int, via: str, tiered: bool
              ) -> dict[str, object]:
    rng = random.Random(seed)
    tier = directory / "tier" if tiered else None
    extra = () if tier is None else ("--tier-url", str(tier), "--tier-check-interval-ms", "50",
                                     "--tier-delete-grace-ms", "0")
    seen: dict[str, int] = {}
    with LocalCluster(directory, extra_args=extra) as cluster:
        publisher: Publisher = (FollowingPublisher(cluster, STREAM) if via == "leader"
                                else AnyNodePublisher(cluster, random.Random(seed + 1)))
        if isinstance(publisher, FollowingPublisher):
            await publisher.create(TIER_ARGUMENTS if tier is not None else None)
        else:
            await publisher.create()
        deadline = time.monotonic() + seconds
        publishing = asyncio.ensure_future(publish_until(publisher, deadline))
        reads: dict[str, dict[int, bytes]] = {name: {} for name in cluster.nodes}
        stop_reading = asyncio.Event()
        readers = [asyncio.ensure_future(read_until(cluster, name, seen, stop_reading))
                   for name, seen in reads.items()]
        faults = 0
        while time.monotonic() < deadline and not publishing.done():
            await asyncio.sleep(rng.uniform(2, 6))
            print(json.dumps(await fault(cluster, rng, tier, seen)), flush=True)
            faults += 1
        await publishing
        await publisher.settle(60)
        await publisher.close()
        stop_reading.set()
        await asyncio.gather(*readers)
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
        checked = check_reads(raw_bodies(cluster.nodes["node1"].ports["stream"]), reads)
        objects = 0
        if tier is not None:
            await asyncio.sleep(2)  # the last round's deletes of unrecorded uploads
            leader = await leader_name(cluster) or "node1"
            objects = check_tier(tier, recorded_on(cluster, leader), seen)
        return {"seed": seed, "via": via, "seconds": seconds, "faults": faults,
                "tier_objects_checked": objects,
                "sent": publisher.sent,
                "confirmed": len(publisher.confirmed), "checked_nodes": len(cluster.nodes),
                "reads_checked": checked,
                "result": "every confirmed message once, in order, on every node"}


async def etcd_outages(directory: Path, down_s: float, rounds: int) -> dict[str, object]:
    with LocalCluster(directory) as cluster:
        waits = []
        for round_ in range(rounds):
            waited = await first_confirm_after_etcd_returns(cluster, f"outage{round_}", down_s)
            print(json.dumps({"round": round_, "etcd_down_s": down_s,
                              "first_confirm_after_return_s": round(waited, 2)}), flush=True)
            waits.append(round(waited, 2))
            await asyncio.sleep(3)  # every node registered again, leaders elected
        return {"scenario": "etcd-outage", "etcd_down_s": down_s,
                "first_confirm_after_return_s": waits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--via", choices=("leader", "any"), default="leader",
                        help="publish to the leader (rstream, following Metadata) or through "
                             "random nodes (forwarded by replicas)")
    parser.add_argument("--tier", action="store_true",
                        help="a shared directory tier, and the leader killed at upload time")
    parser.add_argument("--etcd-outage", type=float, default=None, metavar="SECONDS",
                        help="measure confirms resuming after etcd is down SECONDS instead")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.etcd_outage is not None:
        directory = Path(tempfile.mkdtemp(prefix="etcd-outage-", dir=args.dir))
        print(json.dumps(asyncio.run(etcd_outages(directory, args.etcd_outage, args.rounds))))
        shutil.rmtree(directory)
        return
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    directory = Path(tempfile.mkdtemp(prefix="chaos-", dir=args.dir))
    summary = asyncio.run(run(directory, args.seconds, seed, args.via, args.tier))
    shutil.rmtree(directory)  # kept when the check failed
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
