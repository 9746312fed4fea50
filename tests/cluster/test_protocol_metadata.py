"""The protocols' own metadata is the cluster's: an Iggy stream, topic or consumer group,
a BSON binder or projection, a segment's seal or truncation made through one node holds
through every node. One cluster (real etcd, three real nodes) serves the module; each
test uses names of its own."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
from apache_iggy import (
    Consumer,
    IggyClient,
    PollingStrategy,
    SendMessage,
    TcpConfig,
    TcpReconnectionConfig,
)

from mainstem.broker import layout
from mainstem.broker.catalog import TIERED_SEGMENT
from mainstem.client.events import EventsClient
from mainstem.client.iggy import IggyClient as OwnIggyClient
from mainstem.client.segment import SegmentClient, SegmentClientError
from mainstem.cluster.etcd import EtcdClient
from mainstem.cluster.etcd_keys import path, prefix, segments
from mainstem.cluster.metadata.catalog_feed import AREA
from mainstem.log.tier_upload import TieredRecord
from mainstem.protocols.segment import codec as c
from mainstem.testing_cluster import LocalCluster

T = TypeVar("T")
NODES = ("node1", "node2", "node3")
SEEN_WITHIN_S = 10.0  # how long a change may take to reach another node's watch


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    directory: Path = tmp_path_factory.mktemp("metadata")
    with LocalCluster(directory / "cluster") as running:
        yield running


def port(cluster: LocalCluster, node: str, listener: str) -> int:
    return cluster.nodes[node].ports[listener]


async def eventually(probe: Callable[[], Awaitable[T]], holds: Callable[[T], bool],
                     what: str) -> T:
    """`probe()` once it `holds`; fails naming `what` if it never does."""
    deadline = asyncio.get_running_loop().time() + SEEN_WITHIN_S
    while True:
        value = await probe()
        if holds(value):
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what}: still {value!r}")
        await asyncio.sleep(0.05)


# -- Iggy ----------------------------------------------------------------------------------

async def iggy(cluster: LocalCluster, node: str) -> IggyClient:
    client = IggyClient(TcpConfig(server_address=f"127.0.0.1:{port(cluster, node, 'iggy')}",
                                  reconnection=TcpReconnectionConfig(enabled=False)))
    await client.connect()
    await client.login_user("guest", "guest")
    return client


async def own_iggy(cluster: LocalCluster, node: str) -> OwnIggyClient:
    client = await OwnIggyClient.connect("127.0.0.1", port(cluster, node, "iggy"))
    await client.login("guest", "guest")
    return client


async def payloads(client: IggyClient, stream: str | int, topic: str | int,
                   partition: int | None, consumer: Any, strategy: Any) -> list[bytes]:
    polled = await client.poll_messages(stream, topic, consumer=consumer,
                                        polling_strategy=strategy, count=100,
                                        auto_commit=True, partition_id=partition)
    return [m.payload() for m in polled]


async def test_an_iggy_stream_and_topic_made_on_one_node_serve_on_every_node(
        cluster: LocalCluster) -> None:
    a, b, c_ = [await iggy(cluster, node) for node in NODES]
    await b.create_stream("aside")  # ids given per node would now differ between nodes
    await a.create_stream("shop")
    await a.create_topic("shop", "orders", 2)
    topic = await eventually(lambda: b.get_topic("shop", "orders"), lambda t: t is not None,
                             "the topic through node2")
    stream = await b.get_stream("shop")
    assert stream is not None
    # by name and by id, through a node that did not create them
    await b.send_messages("shop", "orders", 0, [SendMessage(f"n{i}") for i in range(3)])
    await b.send_messages(stream.id, topic.id, 1, [SendMessage("by id")])
    ids = set()
    for client in (a, b, c_):
        found = await eventually(lambda cl=client: cl.get_topic("shop", "orders"),  # type: ignore[misc]
                                 lambda t: t is not None, "the topic everywhere")
        ids.add(((await client.get_stream("shop")).id, found.id))
        assert [t.name for t in await client.get_topics(stream.id)] == ["orders"]
    assert len(ids) == 1  # one id for the stream and one for the topic, on every node
    single = Consumer.Single("reader")
    first = await eventually(
        lambda: payloads(c_, "shop", "orders", 0, single, PollingStrategy.First()),
        lambda got: len(got) == 3, "node3 polling partition 0")
    assert first == [b"n0", b"n1", b"n2"]
    assert await eventually(
        lambda: payloads(c_, stream.id, topic.id, 1, single, PollingStrategy.First()),
        bool, "node3 polling partition 1 by id") == [b"by id"]

    # a consumer group made on node1, joined and read through node2, then node3
    await a.create_consumer_group("shop", "orders", "workers")
    group = Consumer.Group("workers")
    await eventually(lambda: b.get_consumer_group("shop", "orders", "workers"),
                     lambda g: g is not None, "the group through node2")
    await b.join_consumer_group("shop", "orders", "workers")
    assert await payloads(b, "shop", "orders", 0, group, PollingStrategy.Next()) == first
    await b.leave_consumer_group("shop", "orders", "workers")
    await a.send_messages("shop", "orders", 0, [SendMessage("after")])
    await c_.join_consumer_group("shop", "orders", "workers")
    await eventually(lambda: c_.get_consumer_group("shop", "orders", "workers"),
                     lambda g: g.members_count == 1, "node2's member gone on node3")
    # node3's member goes on from the offset the group stored through node2
    assert await eventually(
        lambda: payloads(c_, "shop", "orders", 0, group, PollingStrategy.Next()),
        bool, "the group's next message through node3") == [b"after"]
    group_ids = {(await client.get_consumer_group("shop", "orders", "workers")).id
                 for client in (a, b, c_)}
    assert len(group_ids) == 1

    # deleted through node3: gone through node1
    await c_.delete_topic("shop", "orders")
    await eventually(lambda: a.get_topic("shop", "orders"), lambda t: t is None,
                     "the deleted topic through node1")
    await c_.delete_stream("shop")
    await eventually(lambda: a.get_stream("shop"), lambda s: s is None,
                     "the deleted stream through node1")
    await a.create_stream("shop")  # its name is free again in the whole cluster
    assert (await a.get_stream("shop")) is not None


async def topic_with_group(maker: IggyClient, user: IggyClient, stream: str, topic: str,
                           partitions: int, group: str) -> None:
    """Stream, topic and consumer group made through `maker`, once `user` sees them."""
    await maker.create_stream(stream)
    await maker.create_topic(stream, topic, partitions)
    await maker.create_consumer_group(stream, topic, group)
    await eventually(lambda: user.get_consumer_group(stream, topic, group),
                     lambda g: g is not None, "the group through another node")


async def test_a_consumer_groups_members_on_every_node_share_its_partitions(
        cluster: LocalCluster) -> None:
    a, b, c_ = [await iggy(cluster, node) for node in NODES]
    await topic_with_group(a, b, "pairs", "jobs", 2, "crew")
    for partition in (0, 1):
        await a.send_messages("pairs", "jobs", partition, [SendMessage(f"p{partition}")])
    await a.join_consumer_group("pairs", "jobs", "crew")
    await b.join_consumer_group("pairs", "jobs", "crew")

    async def members(client: IggyClient, count: int) -> list[tuple[int, list[int]]]:
        group = await eventually(lambda: client.get_consumer_group("pairs", "jobs", "crew"),
                                 lambda g: g.members_count == count, f"{count} members")
        return sorted((m.id, list(m.partitions)) for m in group.members)

    views = [await members(client, 2) for client in (a, b, c_)]
    assert views[0] == views[1] == views[2]  # one assignment, seen alike on every node
    assert sorted(partitions for _, partitions in views[0]) == [[0], [1]]
    crew = Consumer.Group("crew")
    polled = [await eventually(
        lambda cl=client: payloads(cl, "pairs", "jobs", None, crew,  # type: ignore[misc]
                                   PollingStrategy.Next()), bool, "a member's partition")
        for client in (a, b)]
    assert sorted(polled) == [[b"p0"], [b"p1"]]  # each member read its own partition

    third = await own_iggy(cluster, "node3")  # a member that disconnects leaves the group
    await third.join_group("pairs", "jobs", "crew")
    assert len(await members(a, 3)) == 3
    await third.close()
    await b.leave_consumer_group("pairs", "jobs", "crew")
    assert [partitions for _, partitions in await members(c_, 1)] == [[0, 1]]


async def admin(cluster: LocalCluster, node: str, method: str, resource: str,
                expect: int) -> Any:
    """Call a node's management API; its JSON answer, if any."""
    headers = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    async with aiohttp.ClientSession(headers=headers) as http:
        url = f"http://127.0.0.1:{port(cluster, node, 'admin')}/api/{resource}"
        async with http.request(method, url) as response:
            assert response.status == expect
            return await response.json() if response.content_length else None


async def admin_delete(cluster: LocalCluster, node: str, resource: str) -> None:
    await admin(cluster, node, "DELETE", resource, 204)


async def created(make: Callable[[], Awaitable[None]]) -> bool:
    try:
        await make()
    except RuntimeError:
        return False
    return True


async def test_what_other_protocols_delete_frees_its_iggy_names(cluster: LocalCluster) -> None:
    a, c_ = await iggy(cluster, "node1"), await iggy(cluster, "node3")
    await a.create_stream("scratch")
    await a.create_topic("scratch", "notes", 1)
    await a.create_consumer_group("scratch", "notes", "readers")
    await admin_delete(cluster, "node2", "streams/scratch/notes")  # not through Iggy
    await eventually(lambda: created(lambda: c_.create_topic("scratch", "notes", 1)), bool,
                     "the topic's name free again through node3")
    await eventually(lambda: c_.get_consumer_group("scratch", "notes", "readers"),
                     lambda g: g is None, "the old topic's group gone through node3")
    await admin_delete(cluster, "node2", "vhosts/scratch")
    await eventually(lambda: created(lambda: c_.create_stream("scratch")), bool,
                     "the stream's name free again through node3")


async def partition_keys(cluster: LocalCluster, namespace: str, stream: str
                         ) -> dict[str, set[int]]:
    """Per kind (leaders, isr, epochs), the partitions etcd holds keys of."""
    storage = layout.storage_name("stream", namespace, stream)
    etcd = EtcdClient([cluster.etcd.endpoint])
    try:
        found: dict[str, set[int]] = {}
        for kind in ("leaders", "isr", "epochs"):
            kvs, _ = await etcd.get_prefix(f"/mainstem/{kind}/{storage}/")
            found[kind] = {int(kv.key.rpartition("/")[2]) for kv in kvs}
        kvs, _ = await etcd.get_prefix(prefix(AREA, TIERED_SEGMENT, namespace, stream))
        found["tiered"] = {int(segments(kv.key)[4]) for kv in kvs}
        return found
    finally:
        await etcd.close()


async def put_tiered_record(cluster: LocalCluster, namespace: str, stream: str,
                            index: int) -> None:
    """A tiered segment's record of a partition, as its leader writes it (beyond any
    chunk the partition holds: nothing reads it here)."""
    first = 1 << 40
    record = TieredRecord(f"t/{index}/{first:020d}-1-0.segment", first, first + 1, 0, 1,
                          1, 1, 100, 0, 48, 1, 1, ((first, 1),))
    etcd = EtcdClient([cluster.etcd.endpoint])
    try:
        await etcd.put(path(AREA, TIERED_SEGMENT, namespace, stream, index, first),
                       json.dumps(dataclasses.asdict(record)).encode())
    finally:
        await etcd.close()


async def test_partitions_added_and_removed_through_one_node_are_every_nodes(
        cluster: LocalCluster) -> None:
    a, b, c_ = [await iggy(cluster, node) for node in NODES]
    await topic_with_group(a, b, "grow", "logs", 1, "all")
    await b.join_consumer_group("grow", "logs", "all")
    await a.create_partitions("grow", "logs", 2)
    for client in (a, b, c_):
        await eventually(lambda cl=client: cl.get_topic("grow", "logs"),  # type: ignore[misc]
                         lambda t: t is not None and t.partitions_count == 3,
                         "three partitions")
    assert await eventually(lambda: partition_keys(cluster, "grow", "logs"),
                            lambda keys: keys["leaders"] == {0, 1, 2},
                            "a leader for each partition") == \
        {"leaders": {0, 1, 2}, "isr": {0, 1, 2}, "epochs": {0, 1, 2}, "tiered": set()}
    for client in (b, c_):  # the group's member is dealt the new partitions everywhere
        await eventually(lambda cl=client: cl.get_consumer_group("grow", "logs", "all"),  # type: ignore[misc]
                         lambda g: [list(m.partitions) for m in g.members] == [[0, 1, 2]],
                         "the member's partitions")
    await b.send_messages("grow", "logs", 2, [SendMessage("on a new partition")])
    single = Consumer.Single("reader")
    for client in (a, c_):  # replicated like the first partition
        assert await eventually(
            lambda cl=client: payloads(cl, "grow", "logs", 2, single,  # type: ignore[misc]
                                       PollingStrategy.First()),
            bool, "the new partition's message") == [b"on a new partition"]
    # tiered segments' records of partitions 0 and 2, as a leader with a tier writes them
    for index in (0, 2):
        await put_tiered_record(cluster, "grow", "logs", index)
    await c_.delete_partitions("grow", "logs", 2)
    await eventually(lambda: a.get_topic("grow", "logs"), lambda t: t.partitions_count == 1,
                     "one partition left through node1")
    assert await eventually(lambda: partition_keys(cluster, "grow", "logs"),
                            lambda keys: keys["isr"] == {0}, "the removed partitions' keys gone"
                            ) == {"leaders": {0}, "isr": {0}, "epochs": {0}, "tiered": {0}}
    await b.send_messages("grow", "logs", 0, [SendMessage("still")])
    assert await eventually(
        lambda: payloads(c_, "grow", "logs", 0, single, PollingStrategy.First()), bool,
        "the first partition through node3") == [b"still"]


async def test_streams_other_protocols_made_get_one_iggy_id_everywhere(
        cluster: LocalCluster) -> None:
    maker = await events(cluster, "node1")
    for channel in ("seen-a", "seen-b"):
        assert not await maker.create_channel(channel)
    await maker.close()
    one, two = await iggy(cluster, "node1"), await iggy(cluster, "node2")

    async def topic_ids(client: IggyClient, order: tuple[str, ...]) -> list[int]:
        found = [await eventually(lambda n=name: client.get_topic("/", n),  # type: ignore[misc]
                                  lambda t: t is not None, f"{name} as an Iggy topic")
                 for name in order]
        return [topic.id for topic in found]

    # first seen in another order on each node: ids given per node would differ
    await topic_ids(one, ("seen-a", "seen-b"))
    await topic_ids(two, ("seen-b", "seen-a"))

    async def both() -> list[list[int]]:
        return [await topic_ids(client, ("seen-a", "seen-b")) for client in (one, two)]

    settled = await eventually(both, lambda ids: ids[0] == ids[1], "one id per topic")
    assert len(set(settled[0])) == 2


async def test_two_nodes_creating_at_once_get_one_winner_or_distinct_ids(
        cluster: LocalCluster) -> None:
    one, two = await own_iggy(cluster, "node1"), await own_iggy(cluster, "node2")
    same = await asyncio.gather(one.create_stream("race"), two.create_stream("race"),
                                return_exceptions=True)
    assert sum(isinstance(result, Exception) for result in same) == 1, same
    await eventually(two.streams, lambda s: "race" in {n for _, n in s}, "race on node2")
    topics = await asyncio.gather(one.create_topic("race", "t", 2), two.create_topic("race", "t"),
                                  return_exceptions=True)
    assert sum(isinstance(result, Exception) for result in topics) == 1, topics
    same_id = await asyncio.gather(one.create_stream("left", 40), two.create_stream("right", 40),
                                   return_exceptions=True)
    assert sum(isinstance(result, Exception) for result in same_id) == 1, same_id
    await asyncio.gather(one.create_stream("north"), two.create_stream("south"))
    views = []
    for node in NODES:
        client = await own_iggy(cluster, node)
        views.append(await eventually(
            client.streams, lambda s: {"race", "north", "south"} <= {n for _, n in s},
            f"the streams through {node}"))
        await client.close()
    assert views[0] == views[1] == views[2]
    ids = {name: number for number, name in views[0]}
    assert ids["north"] != ids["south"]
    assert len(set(ids.values())) == len(ids)
    assert (ids.get("left") == 40) != (ids.get("right") == 40)  # one of them won id 40
    await one.close()
    await two.close()


# -- BSON events ---------------------------------------------------------------------------

async def events(cluster: LocalCluster, node: str) -> EventsClient:
    return await EventsClient.connect("127.0.0.1", port(cluster, node, "bson"), "guest",
                                      "guest")


async def test_a_binder_and_projection_made_on_one_node_fill_on_every_node(
        cluster: LocalCluster) -> None:
    a, b, c_ = [await events(cluster, node) for node in NODES]
    assert not await a.create_channel("sales")
    assert not await a.create_binder("audit")
    await a.create_projection("totals", "sales", "stock", "sku", fold="increment")
    await eventually(c_.list_binders, lambda names: {"audit", "stock"} <= set(names),
                     "the binders through node3")
    await eventually(b.list_channels, lambda names: "sales" in names, "the channel on node2")
    await b.publish_many("sales", [{"sku": "pen", "n": 1}, {"sku": "pen", "n": 2},
                                   {"sku": "ink", "n": 5}])
    subscription = await c_.subscribe("sales", start_pos=0)
    assert [(await subscription.next()).event["n"] for _ in range(3)] == [1, 2, 5]
    for client in (a, b, c_):  # each node's projection folded the channel into its binder
        pen = await eventually(lambda cl=client: cl.find_by_id("stock", "pen"),  # type: ignore[misc]
                               lambda doc: doc is not None and doc["n"] == 3, "pen's total")
        assert pen["sku"] == "pen"

    await admin_delete(cluster, "node2", "binders/%2F/audit")
    await admin_delete(cluster, "node2", "projections/%2F/totals")
    await eventually(a.list_binders, lambda names: "audit" not in names,
                     "the deleted binder through node1")
    for node in NODES:  # the deletion reaches each node in its own time: publish after
        await eventually(lambda n=node: admin(cluster, n, "GET", "projections", 200),  # type: ignore[misc]
                         lambda rows: not rows, f"no projection left on {node}")
    await b.publish("sales", {"sku": "pen", "n": 10})
    await eventually(lambda: c_.find_by_id("stock", "pen"), lambda d: d is not None,
                     "pen through node3")
    await asyncio.sleep(0.5)  # room for a projection that should be gone to fold it
    for client in (a, c_):
        assert (await client.find_by_id("stock", "pen"))["n"] == 3
    for client in (a, b, c_):
        await client.close()


# -- segments ------------------------------------------------------------------------------

async def segment_client(cluster: LocalCluster, node: str) -> SegmentClient:
    return await SegmentClient.connect("127.0.0.1", port(cluster, node, "segment"))


async def test_a_seal_through_one_node_refuses_appends_through_another(
        cluster: LocalCluster) -> None:
    a, b, c_ = [await segment_client(cluster, node) for node in NODES]
    name = "/sealed/0"
    await a.create(name)
    await eventually(lambda: b.info(name), lambda info: info.exists, "the segment on node2")
    early = await b.appender(name)  # set up before the seal
    early.append_block([b"e1", b"e2"])
    await early.flush()
    await a.seal(name)
    await eventually(lambda: b.info(name), lambda info: info.sealed, "the seal on node2")
    with pytest.raises(SegmentClientError, match="SegmentIsSealed"):
        await b.appender(name)
    early.append_block([b"late"])
    refused = await b.replies.get()
    assert isinstance(refused, c.SegmentIsSealed)
    got = await eventually(lambda: c_.read(name, 0), lambda r: r.end_of_segment,
                           "the seal seen by reads on node3")
    assert bytes(got.data) == c.Event(b"e1").encode() + c.Event(b"e2").encode()
    for client in (a, b, c_):
        await client.close()


async def three_events_seen_on_node2(a: SegmentClient, b: SegmentClient, name: str) -> int:
    """Segment `name` made through `a` with events e1..e3, once `b` sees them; its end."""
    await a.create(name)
    appender = await a.appender(name)
    appender.append_block([b"e1", b"e2", b"e3"])
    end = await appender.flush()
    await eventually(lambda: b.info(name), lambda info: info.write_offset == end,
                     "the events on node2")
    return end


async def test_a_truncation_through_one_node_is_seen_by_reads_on_another(
        cluster: LocalCluster) -> None:
    a, b, c_ = [await segment_client(cluster, node) for node in NODES]
    name = "/cut/0"
    end = await three_events_seen_on_node2(a, b, name)
    await b.truncate(name, 10)
    info = await eventually(lambda: c_.info(name), lambda info: info.start_offset == 10,
                            "the truncation on node3")
    assert info.write_offset == end
    with pytest.raises(SegmentClientError, match="SegmentIsTruncated"):
        await c_.read(name, 0)
    assert bytes((await c_.read(name, 10)).data).startswith(c.Event(b"e2").encode())
    for client in (a, b, c_):
        await client.close()


async def test_a_seal_and_a_truncation_at_once_through_two_nodes_both_hold(
        cluster: LocalCluster) -> None:
    """One segment's state is one key, merged in etcd: neither change undoes the other."""
    a, b, c_ = [await segment_client(cluster, node) for node in NODES]
    name = "/both/0"
    end = await three_events_seen_on_node2(a, b, name)
    await asyncio.gather(a.seal(name), b.truncate(name, 10))
    for client in (a, b, c_):
        info = await eventually(lambda: client.info(name),  # noqa: B023 (awaited here)
                                lambda info: info.sealed and info.start_offset == 10,
                                "the seal and the truncation")
        assert info.write_offset == end
    etcd = EtcdClient([cluster.etcd.endpoint])
    held = await etcd.get("/mainstem/catalog/segment/%2F/both/0")
    await etcd.close()
    assert held is not None and held.json() == {"sealed": True, "truncated": 10}
    for client in (a, b, c_):
        await client.close()


async def test_a_restarted_node_holds_what_the_cluster_holds(cluster: LocalCluster) -> None:
    """Made before node3 stops, kept; deleted while it is down, gone once it is back."""
    a = await iggy(cluster, "node1")
    for name in ("kept", "gone"):
        await a.create_stream(name)
    ids = {s.name: s.id for s in await a.get_streams()}
    events_a, segments_a = await events(cluster, "node1"), await segment_client(cluster, "node1")
    for binder in ("kept", "gone"):
        await events_a.create_binder(binder)
    await segments_a.create("/kept/0")
    await segments_a.seal("/kept/0")
    c_ = await iggy(cluster, "node3")
    await eventually(lambda: c_.get_stream("gone"), lambda s: s is not None, "gone on node3")
    events_c = await events(cluster, "node3")
    await eventually(events_c.list_binders, lambda b: "gone" in b, "the binder on node3")
    await events_c.close()

    cluster.kill("node3", signal.SIGTERM)
    await a.delete_stream("gone")
    await admin_delete(cluster, "node1", "binders/%2F/gone")
    cluster.start("node3")

    c_ = await iggy(cluster, "node3")
    assert (await c_.get_stream("kept")).id == ids["kept"]
    assert await c_.get_stream("gone") is None
    assert await c_.get_stream(ids["gone"]) is None
    events_c = await events(cluster, "node3")
    binders = await events_c.list_binders()
    assert "kept" in binders and "gone" not in binders
    segments_c = await segment_client(cluster, "node3")
    assert (await segments_c.info("/kept/0")).sealed
    for client in (events_a, events_c, segments_a, segments_c):
        await client.close()


async def test_a_user_and_its_permissions_made_while_a_node_was_away_reach_it(
        cluster: LocalCluster) -> None:
    """At start a node applies the catalog in the order it was written (a user before its
    permissions), not in the order of etcd's keys."""
    headers = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    cluster.kill("node3", signal.SIGTERM)
    async with aiohttp.ClientSession(headers=headers) as http:
        api = f"http://127.0.0.1:{port(cluster, 'node1', 'admin')}/api"
        made = await http.put(f"{api}/users/away", json={"password": "pw", "tags": ""})
        assert made.status in (201, 204)
        granted = await http.put(f"{api}/permissions/%2F/away",
                                 json={"configure": "c.*", "write": "w.*", "read": "r.*"})
        assert granted.status in (201, 204)
        cluster.start("node3")
        api = f"http://127.0.0.1:{port(cluster, 'node3', 'admin')}/api"

        async def permission() -> dict[str, Any] | None:
            async with http.get(f"{api}/permissions/%2F/away") as found:
                return await found.json() if found.status == 200 else None

        there = await eventually(permission, lambda found: found is not None,
                                 "the permission on node3")
        assert there is not None and (there["configure"], there["write"], there["read"]) == (
            "c.*", "w.*", "r.*")


async def test_many_quick_changes_of_one_key_keep_the_catalog_flowing(
        cluster: LocalCluster) -> None:
    """Changes queued while one is written go in batches, each naming a key once (etcd
    refuses a transaction naming one twice): the last of them, and what follows, reach
    every node."""
    headers = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
    async with aiohttp.ClientSession(headers=headers) as http:
        one = f"http://127.0.0.1:{port(cluster, 'node1', 'admin')}/api"
        made = await asyncio.gather(*(
            http.put(f"{one}/users/quick", json={"password": "pw", "tags": f"t{i}"})
            for i in range(30)))
        assert all(response.status in (201, 204) for response in made)
        last = (await (await http.get(f"{one}/users/quick")).json())["tags"]
        assert (await http.put(f"{one}/users/after", json={"password": "pw", "tags": ""})
                ).status in (201, 204)
        three = f"http://127.0.0.1:{port(cluster, 'node3', 'admin')}/api"

        async def on_node3() -> tuple[Any, int]:
            async with http.get(f"{three}/users/quick") as quick, \
                    http.get(f"{three}/users/after") as after:
                return (await quick.json())["tags"] if quick.status == 200 else None, \
                    after.status

        assert await eventually(on_node3, lambda got: got == (last, 200),
                                "the users on node3") == (last, 200)
