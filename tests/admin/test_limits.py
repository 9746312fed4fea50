"""Virtual host and user limits as RabbitMQ has them: set through the management API,
`mainstem ctl` and definitions, and refused with RabbitMQ's codes and texts to real clients
(pika for AMQP 0-9-1, rstream for the stream protocol) against a real broker."""

from __future__ import annotations

import asyncio
import contextlib
import re

import aiohttp
import pika
import pytest
from apache_iggy import IggyClient as ApacheIggy
from apache_iggy import TcpConfig, TcpReconnectionConfig
from pika.exceptions import (
    ChannelClosedByBroker,
    ConnectionClosedByBroker,
    ProbableAccessDeniedError,
)
from rstream import Producer
from rstream import exceptions as stream_errors

from mainstem import Broker
from mainstem.client.events import EventsClient, EventsError
from mainstem.client.iggy import IggyClient, IggyClientError
from mainstem.client.segment import SegmentClient, SegmentClientError
from mainstem.protocols.iggy.codec import ErrorCode
from mainstem.protocols.segment import codec as sc
from tests.admin.test_admin_ctl import ctl
from tests.support.admin_http import call


async def amqp(broker: Broker, user: str = "guest", vhost: str = "/"
               ) -> pika.BlockingConnection:
    return await asyncio.to_thread(pika.BlockingConnection, pika.ConnectionParameters(
        "127.0.0.1", broker.ports["amqp"], vhost, pika.PlainCredentials(user, user)))


async def amqp_once_freed(broker: Broker, user: str = "guest") -> pika.BlockingConnection:
    """A connection once a closed one's place is given back (the broker sees the close a
    moment after the client)."""
    for _ in range(50):
        with contextlib.suppress(ProbableAccessDeniedError):
            return await amqp(broker, user)
        await asyncio.sleep(0.1)
    pytest.fail("a closed connection still counts")


async def add_user(http: aiohttp.ClientSession, name: str, vhost: str = "/") -> None:
    await call(http, "PUT", f"/api/users/{name}", {"password": name, "tags": ""}, status=201)
    await call(http, "PUT", f"/api/permissions/{vhost.replace('/', '%2F')}/{name}",
               {"configure": ".*", "write": ".*", "read": ".*"}, status=204)


async def test_limits_are_set_listed_and_cleared_through_the_api(broker, http):
    await call(http, "PUT", "/api/vhosts/team", status=201)
    await add_user(http, "bob")
    assert await call(http, "GET", "/api/vhost-limits") == []
    await call(http, "PUT", "/api/vhost-limits/team/max-queues", {"value": 5}, status=204)
    await call(http, "PUT", "/api/vhost-limits/team/max-connections", {"value": 2},
               status=204)
    await call(http, "PUT", "/api/user-limits/bob/max-channels", {"value": 3}, status=204)
    assert await call(http, "GET", "/api/vhost-limits") == [
        {"vhost": "team", "value": {"max-connections": 2, "max-queues": 5}}]
    assert await call(http, "GET", "/api/vhost-limits/team") == [
        {"vhost": "team", "value": {"max-connections": 2, "max-queues": 5}}]
    assert await call(http, "GET", "/api/vhost-limits/%2F") == []
    assert await call(http, "GET", "/api/user-limits/bob") == [
        {"user": "bob", "value": {"max-channels": 3}}]
    assert (await call(http, "GET", "/api/users/bob"))["limits"] == {"max-channels": 3}
    # what RabbitMQ refuses: an unknown limit, a value that is not an integer, no owner
    for path, body, status in (("/api/vhost-limits/team/max-channels", {"value": 1}, 400),
                               ("/api/user-limits/bob/max-queues", {"value": 1}, 400),
                               ("/api/vhost-limits/team/max-queues", {"value": "9"}, 400),
                               ("/api/vhost-limits/team/max-queues", {}, 400),
                               ("/api/vhost-limits/nowhere/max-queues", {"value": 1}, 404),
                               ("/api/user-limits/nobody/max-channels", {"value": 1}, 404)):
        await call(http, "PUT", path, body, status=status)
    await call(http, "GET", "/api/vhost-limits/nowhere", status=404)
    await call(http, "DELETE", "/api/vhost-limits/team/max-queues", status=204)
    await call(http, "DELETE", "/api/vhost-limits/team/max-queues", status=404)
    assert await call(http, "GET", "/api/vhost-limits/team") == [
        {"vhost": "team", "value": {"max-connections": 2}}]
    await call(http, "DELETE", "/api/users/bob", status=204)  # its limits go with it
    assert await call(http, "GET", "/api/user-limits") == []


async def test_ctl_sets_lists_and_clears_limits(broker):
    assert (await ctl(broker, "limits", "set", "max-queues", "10", "--vhost", "/"))[0] == 0
    assert (await ctl(broker, "limits", "set", "max-channels", "4", "--of-user", "guest"))[0] \
        == 0
    code, rows, _ = await ctl(broker, "limits", "list", json_output=True)
    assert code == 0
    assert rows == [{"vhost": "/", "user": "", "limit": "max-queues", "value": 10},
                    {"vhost": "", "user": "guest", "limit": "max-channels", "value": 4}]
    code, _, err = await ctl(broker, "limits", "set", "max-bananas", "1")
    assert code == 1 and "unknown limit 'max-bananas'" in err
    assert (await ctl(broker, "limits", "clear", "max-queues"))[0] == 0
    assert (await ctl(broker, "limits", "clear", "max-channels", "--of-user", "guest"))[0] == 0
    assert (await ctl(broker, "limits", "list", json_output=True))[1] == []


async def test_vhost_connection_limit_refuses_amqp_and_stream_clients(broker, http):
    await call(http, "PUT", "/api/vhost-limits/%2F/max-connections", {"value": 1}, status=204)
    first = await amqp(broker)
    try:
        with pytest.raises(ProbableAccessDeniedError, match=re.escape(
                "(530) \"NOT_ALLOWED - access to vhost '/' refused for user 'guest':"
                " connection limit (1) is reached\"")):
            await amqp(broker)
        producer = Producer("127.0.0.1", port=broker.ports["stream"], username="guest",
                            password="guest", vhost="/")
        with pytest.raises(stream_errors.VirtualHostAccessFailure):
            await asyncio.wait_for(producer.start(), 10)
        await producer.close()
    finally:
        await asyncio.to_thread(first.close)
    again = await amqp_once_freed(broker)  # the closed connection gave its place back
    await asyncio.to_thread(again.close)
    await call(http, "PUT", "/api/vhost-limits/%2F/max-connections", {"value": 0}, status=204)
    with pytest.raises(ProbableAccessDeniedError, match=re.escape("connection limit (0)")):
        await amqp(broker)  # 0: no connection at all, as in RabbitMQ
    await call(http, "PUT", "/api/vhost-limits/%2F/max-connections", {"value": -1}, status=204)
    again = await amqp(broker)  # negative: no limit
    await asyncio.to_thread(again.close)


async def test_user_limits_refuse_connections_and_channels(broker, http):
    await add_user(http, "bob")
    await call(http, "PUT", "/api/user-limits/bob/max-connections", {"value": 1}, status=204)
    await call(http, "PUT", "/api/user-limits/bob/max-channels", {"value": 2}, status=204)
    first = await amqp(broker, "bob")
    try:
        with pytest.raises(ProbableAccessDeniedError, match=re.escape(
                "(530) \"NOT_ALLOWED - Connection refused for user 'bob':"
                " user connection limit (1) is reached\"")):
            await amqp(broker, "bob")
        guest = await amqp(broker)  # another user is not limited by bob's limit
        await asyncio.to_thread(guest.close)
        channels = [await asyncio.to_thread(first.channel) for _ in range(2)]
        await asyncio.to_thread(channels[0].close)  # a closed channel frees its place
        await asyncio.to_thread(first.channel)
        with pytest.raises(ConnectionClosedByBroker) as refused:
            await asyncio.to_thread(first.channel)
        assert refused.value.reply_code == 530
        assert refused.value.reply_text == (
            "NOT_ALLOWED - number of channels opened for user 'bob' has reached the maximum"
            " allowed user limit of (2)")
    finally:
        if first.is_open:
            await asyncio.to_thread(first.close)
    # the refused connection's channels were given back with it
    second = await amqp_once_freed(broker, "bob")
    try:
        assert len([await asyncio.to_thread(second.channel) for _ in range(2)]) == 2
    finally:
        await asyncio.to_thread(second.close)


async def test_the_other_protocols_count_under_the_users_limit(broker, http):
    """Iggy and segment logins have no vhost: the user's max-connections; BSON's CONNECT
    names one: its vhost's too."""
    await add_user(http, "bob")
    await call(http, "PUT", "/api/user-limits/bob/max-connections", {"value": 1}, status=204)
    segment = await SegmentClient.connect("127.0.0.1", broker.ports["segment"], "bob", "bob")
    try:
        with pytest.raises(SegmentClientError, match=re.escape(
                "user connection limit (1) is reached")):
            await SegmentClient.connect("127.0.0.1", broker.ports["segment"], "bob", "bob")
        async with await IggyClient.connect("127.0.0.1", broker.ports["iggy"]) as iggy:
            with pytest.raises(IggyClientError):
                await iggy.login("bob", "bob")
        with pytest.raises(EventsError, match=re.escape("user connection limit (1)")):
            await EventsClient.connect("127.0.0.1", broker.ports["bson"], "bob", "bob")
    finally:
        await segment.close()
    await call(http, "PUT", "/api/vhost-limits/%2F/max-connections", {"value": 0}, status=204)
    with pytest.raises(EventsError, match=re.escape("connection limit (0) is reached")):
        await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest", "guest")
    # the segment connection gives its place back once the broker has seen it close
    async with await IggyClient.connect("127.0.0.1", broker.ports["iggy"]) as iggy:
        for _ in range(50):
            with contextlib.suppress(IggyClientError):
                await iggy.login("bob", "bob")
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the closed segment connection still counts")


async def test_vhost_queue_limit_refuses_queue_declare_and_stream_create(broker, http):
    await call(http, "PUT", "/api/vhosts/team", status=201)
    await add_user(http, "bob", "team")
    await call(http, "PUT", "/api/vhost-limits/team/max-queues", {"value": 2}, status=204)
    connection = await amqp(broker, "bob", "team")
    try:
        channel = await asyncio.to_thread(connection.channel)
        await asyncio.to_thread(channel.queue_declare, "q1")
        await asyncio.to_thread(channel.queue_declare, "s1",
                                arguments={"x-queue-type": "stream"}, durable=True)
        await asyncio.to_thread(channel.queue_declare, "q1")  # redeclaring is no new queue
        with pytest.raises(ChannelClosedByBroker) as refused:
            await asyncio.to_thread(channel.queue_declare, "q3")
        assert refused.value.reply_code == 406
        assert refused.value.reply_text == ("PRECONDITION_FAILED - cannot declare queue 'q3':"
                                            " queue limit in vhost 'team' (2) is reached")
    finally:
        await asyncio.to_thread(connection.close)
    producer = Producer("127.0.0.1", port=broker.ports["stream"], username="bob",
                        password="bob", vhost="team")
    async with producer:
        with pytest.raises(stream_errors.PreconditionFailed):
            await producer.create_stream("s2")
    await call(http, "PUT", "/api/streams/team/s3", {}, status=400)
    await call(http, "PUT", "/api/queues/team/q4", {}, status=400)
    await call(http, "DELETE", "/api/vhost-limits/team/max-queues", status=204)
    await call(http, "PUT", "/api/queues/team/q4", {}, status=201)


async def test_limits_travel_in_definitions(broker, http):
    await call(http, "PUT", "/api/vhosts/team", status=201)
    await add_user(http, "bob")
    await call(http, "PUT", "/api/vhost-limits/team/max-queues", {"value": 7}, status=204)
    await call(http, "PUT", "/api/user-limits/bob/max-connections", {"value": 3}, status=204)
    definitions = await call(http, "GET", "/api/definitions")
    assert {"vhost": "team", "component": "vhost-limits", "name": "limits",
            "value": {"max-queues": 7}} in definitions["parameters"]
    assert next(u for u in definitions["users"] if u["name"] == "bob")["limits"] == {
        "max-connections": 3}
    assert (await call(http, "GET", "/api/definitions/team"))["parameters"] == [
        {"component": "vhost-limits", "name": "limits", "value": {"max-queues": 7}}]
    await call(http, "DELETE", "/api/vhost-limits/team/max-queues", status=204)
    await call(http, "DELETE", "/api/user-limits/bob/max-connections", status=204)
    await call(http, "POST", "/api/definitions", definitions, status=204)
    assert await call(http, "GET", "/api/vhost-limits") == [
        {"vhost": "team", "value": {"max-queues": 7}}]
    assert await call(http, "GET", "/api/user-limits") == [
        {"user": "bob", "value": {"max-connections": 3}}]
    other = {**definitions, "parameters": [{"vhost": "team", "component": "federation",
                                            "name": "x", "value": {}}]}
    await call(http, "POST", "/api/definitions", other, status=400)  # still refused



async def limited_vhost(http: aiohttp.ClientSession, vhost: str, max_queues: int) -> None:
    """A vhost (made unless it exists) where guest may do anything, with `max-queues`."""
    if (await http.get(f"/api/vhosts/{vhost}")).status == 404:
        await call(http, "PUT", f"/api/vhosts/{vhost}", status=201)
        await call(http, "PUT", f"/api/permissions/{vhost}/guest",
                   {"configure": ".*", "write": ".*", "read": ".*"}, status=204)
    await call(http, "PUT", f"/api/vhost-limits/{vhost}/max-queues", {"value": max_queues},
               status=204)


async def test_vhost_queue_limit_refuses_an_iggy_topic_with_too_many_topics(broker, http):
    """max-queues 3: three topics are made, the fourth is refused with Iggy's
    TooManyTopics (2021) on mainstem's client and the Apache SDK, and nothing is made; a
    name that exists still answers so."""
    iggy = await IggyClient.connect("127.0.0.1", broker.ports["iggy"])
    await iggy.login("guest", "guest")
    await iggy.create_stream("iggyhost", 1)  # an Iggy stream is a vhost
    await limited_vhost(http, "iggyhost", 3)
    for n in range(3):
        await iggy.create_topic(1, f"t{n}", topic_id=n + 1)
    with pytest.raises(IggyClientError) as refused:
        await iggy.create_topic(1, "t3", topic_id=4)
    assert refused.value.code == ErrorCode.TOO_MANY_TOPICS
    with pytest.raises(IggyClientError) as exists:
        await iggy.create_topic(1, "t0")
    assert exists.value.code == ErrorCode.TOPIC_NAME_ALREADY_EXISTS
    await iggy.close()
    apache = ApacheIggy(TcpConfig(server_address=f"127.0.0.1:{broker.ports['iggy']}",
                                  reconnection=TcpReconnectionConfig(enabled=False)))
    await apache.connect()
    await apache.login_user("guest", "guest")
    with pytest.raises(RuntimeError, match="Too many topics"):
        await apache.create_topic("iggyhost", "t4", 1)
    assert sorted(t.name for t in await apache.get_topics("iggyhost")) == ["t0", "t1", "t2"]
    assert len(await call(http, "GET", "/api/streams/iggyhost")) == 3


async def test_vhost_queue_limit_refuses_a_bson_channel_with_limit_reached(broker, http):
    await limited_vhost(http, "bsonhost", 3)
    async with await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest",
                                          "guest", namespace="bsonhost") as events:
        assert [await events.create_channel(f"c{n}") for n in range(3)] == [False] * 3
        with pytest.raises(EventsError) as failed:
            await events.create_channel("c3")
        assert failed.value.code == "LIMIT_REACHED"
        assert "queue limit in vhost 'bsonhost' (3) is reached" in str(failed.value)
        assert await events.create_channel("c0")  # it exists: answered so, as before
        assert sorted(await events.list_channels()) == ["c0", "c1", "c2"]
    assert len(await call(http, "GET", "/api/streams/bsonhost")) == 3


async def test_vhost_queue_limit_refuses_a_segment_with_operation_unsupported(broker, http):
    """A segment's scope is its vhost: the fourth stream of segments is refused."""
    await limited_vhost(http, "seghost", 3)
    segments = await SegmentClient.connect("127.0.0.1", broker.ports["segment"])
    try:
        for n in range(3):
            await segments.create(f"seghost/s{n}/0")
        with pytest.raises(SegmentClientError) as unsupported:
            await segments.create("seghost/s3/0")
        assert isinstance(unsupported.value.reply, sc.OperationUnsupported)
        assert "queue limit in vhost 'seghost' (3) is reached" in \
            unsupported.value.reply.message
        assert not (await segments.info("seghost/s3/0")).exists
        with pytest.raises(SegmentClientError) as exists:
            await segments.create("seghost/s0/0")
        assert isinstance(exists.value.reply, sc.SegmentAlreadyExists)
        await segments.create("/elsewhere/0")  # another vhost is not limited
    finally:
        await segments.close()
    assert len(await call(http, "GET", "/api/streams/seghost")) == 3
