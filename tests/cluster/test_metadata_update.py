"""A stream's leader stepping down reaches its rstream publishers as RabbitMQ sends it: a
MetadataUpdate (key 16) that drops the publisher, after which rstream looks the leader up
again and publishes through it."""

from __future__ import annotations

import asyncio
import signal

from rstream import AMQPMessage, OnClosedErrorInfo, Producer
from rstream.exceptions import StreamNotAvailable

from mainstem.testing_cluster import LocalCluster
from tests.support.cluster_clients import wait_for_count
from tests.support.stream_crash import credentials

STREAM = "moving"


async def test_publishers_are_told_when_their_leader_steps_down(
        mainstem_cluster: LocalCluster) -> None:
    told: list[OnClosedErrorInfo] = []
    leader = mainstem_cluster.nodes["node1"]
    producer = Producer(**credentials(leader.ports["stream"]), on_close_handler=told.append)
    await producer.start()
    try:
        await producer.create_stream(STREAM)  # client-local: node1 leads
        for i in range(10):
            await producer.send_wait(STREAM, AMQPMessage(body=f"before{i}".encode()))
        etcd = mainstem_cluster.etcd.process
        assert etcd is not None
        etcd.send_signal(signal.SIGSTOP)
        try:
            for _ in range(300):
                if told:
                    break
                await asyncio.sleep(0.05)
        finally:
            etcd.send_signal(signal.SIGCONT)
        assert leader.log_events("replica.stepped_down")
        assert [(info.reason, info.streams) for info in told] == [
            ("Metadata Update", [STREAM])]
        # rstream declares a new publisher on the leader it looks up now; while the
        # election runs, Metadata says the stream is not available (as RabbitMQ's does)
        # and a client tries again.
        for attempt in range(100):
            try:
                await asyncio.wait_for(
                    producer.send_wait(STREAM, AMQPMessage(body=b"after")), 60)
                break
            except StreamNotAvailable:
                assert attempt < 99, "no leader elected in 20 s"
                await asyncio.sleep(0.2)
    finally:
        await asyncio.wait_for(producer.close(), 10)
    for node in mainstem_cluster.live():
        await wait_for_count(node.ports["stream"], STREAM, 11)
