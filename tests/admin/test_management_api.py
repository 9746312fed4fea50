"""RabbitMQ's management API as mainstem answers it: status codes and JSON errors,
declare/bind/publish/get over HTTP, definitions in RabbitMQ's format, health checks,
pagination, and message_stats with rates, driven by aiohttp and pika against a real broker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pika
import pytest

from mainstem import Broker
from mainstem.admin.app import ROUTE_TABLES, create_app
from mainstem.admin.openapi import openapi_document
from mainstem.admin.state import AdminState
from mainstem.broker.errors import AuthenticationFailed
from tests.support.admin_http import call

FIXTURES = Path(__file__).parent / "fixtures"
TIMEOUT_S = 15


async def until(condition, timeout: float = TIMEOUT_S) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


def amqp(broker: Broker, user: str = "guest", password: str = "guest",
         vhost: str = "/") -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", broker.ports["amqp"], vhost, pika.PlainCredentials(user, password)))


async def test_errors_are_json_with_rabbitmqs_status_codes(broker, http):
    assert await call(http, "GET", "/api/nothing/here", status=404) == {
        "error": "Object Not Found", "reason": "Not Found"}
    assert (await call(http, "PATCH", "/api/overview", status=405))["error"]
    await call(http, "PUT", "/api/queues/%2F/q1", "not an object", status=400)
    await call(http, "PUT", "/api/queues/%2F/q1", {"durable": "maybe"}, status=400)
    await call(http, "PUT", "/api/queues/%2F/q1", {"durable": True}, status=201)
    await call(http, "PUT", "/api/queues/%2F/q1", {"durable": True}, status=204)
    inequivalent = await call(http, "PUT", "/api/queues/%2F/q1", {"durable": False},
                              status=400)
    assert inequivalent["error"] == "bad_request" and "durable" in inequivalent["reason"]
    await call(http, "PUT", "/api/exchanges/%2F/x1", {"type": "nonsense"}, status=400)
    await call(http, "PUT", "/api/queues/%2F/amq.mine", {}, status=403)
    await call(http, "PUT", "/api/exchanges/%2F/amq.mine", {"type": "direct"}, status=403)
    await call(http, "PUT", "/api/queues/nowhere/q1", {}, status=404)
    await call(http, "GET", "/api/exchanges/%2F/missing", status=404)
    async with aiohttp.ClientSession() as anonymous:
        url = f"http://127.0.0.1:{broker.ports['admin']}/api/queues"
        async with anonymous.get(url) as response:
            assert response.status == 401 and "WWW-Authenticate" in response.headers
    assert await call(http, "GET", "/api/whoami") == {"name": "guest",
                                                      "tags": ["administrator"]}


async def test_bindings_exchanges_publish_and_get(broker, http):
    await call(http, "PUT", "/api/exchanges/%2F/shop", {"type": "topic"}, status=201)
    await call(http, "PUT", "/api/exchanges/%2F/all", {"type": "fanout"}, status=201)
    await call(http, "PUT", "/api/queues/%2F/paid", {}, status=201)
    await call(http, "PUT", "/api/queues/%2F/dead", {}, status=201)
    await call(http, "PUT", "/api/queues/%2F/checked", {
        "arguments": {"x-dead-letter-exchange": "all"}}, status=201)
    async with http.post("/api/bindings/%2F/e/shop/q/paid",
                         json={"routing_key": "order.paid"}) as response:
        assert response.status == 201
        location = response.headers["Location"]
    assert location == "/api/bindings/%2F/e/shop/q/paid/order.paid"
    binding = await call(http, "GET", location)
    assert binding["routing_key"] == "order.paid" and binding["properties_key"] == "order.paid"
    await call(http, "POST", "/api/bindings/%2F/e/shop/e/all", {"routing_key": "#"},
               status=201)
    await call(http, "POST", "/api/bindings/%2F/e/all/q/dead", {}, status=201)
    await call(http, "POST", "/api/bindings/%2F/e/shop/q/missing", {}, status=404)
    sources = await call(http, "GET", "/api/exchanges/%2F/shop/bindings/source")
    assert sorted(b["destination"] for b in sources) == ["all", "paid"]
    assert [b["source"] for b in await call(
        http, "GET", "/api/exchanges/%2F/all/bindings/destination")] == ["shop"]
    assert [b["source"] for b in await call(http, "GET", "/api/queues/%2F/paid/bindings")] \
        == ["", "shop"]

    routed = await call(http, "POST", "/api/exchanges/%2F/shop/publish", {
        "routing_key": "order.paid", "payload": "//7/", "payload_encoding": "base64",
        "properties": {"delivery_mode": 2, "headers": {"tenant": "acme"},
                       "content_type": "application/octet-stream"}})
    assert routed == {"routed": True}
    assert await call(http, "POST", "/api/exchanges/%2F/amq.default/publish", {
        "routing_key": "nowhere", "payload": "x", "payload_encoding": "string",
        "properties": {}}) == {"routed": False}
    await call(http, "POST", "/api/exchanges/%2F/shop/publish", {
        "routing_key": "k", "payload": "x", "properties": {"colour": "red"}}, status=400)

    got = await call(http, "POST", "/api/queues/%2F/paid/get",
                     {"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"})
    assert len(got) == 1 and got[0]["payload_encoding"] == "base64"
    assert got[0]["payload"] == "//7/" and got[0]["payload_bytes"] == 3  # not UTF-8
    assert got[0]["properties"] == {"content_type": "application/octet-stream",
                                    "headers": {"tenant": "acme"}, "delivery_mode": 2}
    await call(http, "POST", "/api/queues/%2F/paid/get", {"ackmode": "sideways"}, status=400)
    await call(http, "POST", "/api/exchanges/%2F/amq.default/publish", {
        "routing_key": "checked", "payload": "0123456789", "properties": {}})
    truncated = await call(http, "POST", "/api/queues/%2F/checked/get",
                           {"count": 1, "ackmode": "ack_requeue_true", "truncate": 4})
    assert truncated[0]["payload"] == "0123" and truncated[0]["payload_bytes"] == 10
    await call(http, "POST", "/api/queues/%2F/checked/get",
               {"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
    dead = await call(http, "POST", "/api/queues/%2F/dead/get",
                      {"count": 10, "ackmode": "ack_requeue_false", "encoding": "auto"})
    # the rejected message and the routed one (shop -> all -> dead) both reached it
    assert sorted(m["payload_bytes"] for m in dead) == [3, 10]

    await call(http, "PUT", "/api/queues/%2F/brief", {}, status=201)
    for expiration, status in (("0", 200), ("soon", 400)):
        await call(http, "POST", "/api/exchanges/%2F/amq.default/publish", {
            "routing_key": "brief", "payload": "x",
            "properties": {"expiration": expiration}}, status=status)
    assert await call(http, "POST", "/api/queues/%2F/brief/get", {"count": 1}) == []
    stats = (await call(http, "GET", "/api/queues/%2F/checked"))["message_stats"]
    assert stats["get"] == 2 and stats["redeliver"] == 1

    await call(http, "DELETE", location, status=204)
    await call(http, "GET", location, status=404)
    await call(http, "POST", "/api/exchanges/%2F/amq.default/publish", {
        "routing_key": "paid", "payload": "x", "properties": {}})
    await call(http, "DELETE", "/api/queues/%2F/paid?if-empty=true", status=400)
    await call(http, "DELETE", "/api/queues/%2F/paid/contents", status=204)
    await call(http, "DELETE", "/api/queues/%2F/paid?if-empty=true", status=204)
    await call(http, "DELETE", "/api/exchanges/%2F/shop", status=204)
    await call(http, "DELETE", "/api/exchanges/%2F/shop", status=404)


async def test_rabbitmq_definitions_import_log_in_and_round_trip(broker, http):
    rabbit = json.loads((FIXTURES / "rabbitmq-3.10-definitions.json").read_text())
    await call(http, "POST", "/api/definitions", rabbit, status=204)
    queues = {q["name"]: q for q in await call(http, "GET", "/api/queues/shop")}
    assert queues["audit"]["type"] == "stream"
    assert queues["billing.invoices"]["arguments"]["x-max-length"] == 10000
    assert "tasks" in {q["name"] for q in await call(http, "GET", "/api/queues/%2F")}
    assert {(b["source"], b["destination"]) for b in await call(http, "GET",
                                                                "/api/bindings/shop")
            if b["source"]} == {("orders", "billing.invoices"), ("orders", "audit-in"),
                                ("audit-in", "audit"), ("dead", "billing.dead")}
    for user, password, vhost in (("ops", "ops-secret", "shop"),  # SHA-256
                                  ("billing", "billing-secret", "shop"),  # SHA-512
                                  ("legacy", "legacy-secret", "/")):  # MD5
        connection = await asyncio.to_thread(amqp, broker, user, password, vhost)
        await asyncio.to_thread(connection.close)
    with pytest.raises(AuthenticationFailed):
        await broker.core.login("ops", "wrong", "127.0.0.1")

    exported = await call(http, "GET", "/api/definitions")
    assert exported["rabbitmq_version"] and exported["policies"] == []
    ops = next(u for u in exported["users"] if u["name"] == "ops")
    assert ops == rabbit["users"][0]  # RabbitMQ's hash goes back out as it came in
    shop_only = await call(http, "GET", "/api/definitions/shop")
    assert "users" not in shop_only and all("vhost" not in q for q in shop_only["queues"])

    # an administrator too deletes as its permissions allow, as in RabbitMQ
    await call(http, "PUT", "/api/permissions/shop/guest",
               {"configure": ".*", "write": ".*", "read": ".*"}, status=204)
    for queue in ("billing.invoices", "billing.dead", "audit"):
        await call(http, "DELETE", f"/api/queues/shop/{queue}", status=204)
    for exchange in ("orders", "dead", "audit-in"):
        await call(http, "DELETE", f"/api/exchanges/shop/{exchange}", status=204)
    await call(http, "POST", "/api/definitions/shop", shop_only, status=204)
    again = await call(http, "GET", "/api/definitions")
    assert sorted(json.dumps(q, sort_keys=True) for q in again["queues"]) == \
        sorted(json.dumps(q, sort_keys=True) for q in exported["queues"])
    assert again["bindings"] == exported["bindings"]
    assert again["exchanges"] == exported["exchanges"]


async def test_definitions_with_parameters_or_unknown_policy_keys_are_refused(http):
    body = {"parameters": [{"name": "up", "vhost": "/", "component": "federation-upstream",
                            "value": {"uri": "amqp://elsewhere"}}]}
    answer = await call(http, "POST", "/api/definitions", body, status=400)
    assert "parameters" in answer["reason"]
    body = {"policies": [{"name": "ttl", "vhost": "/", "pattern": ".*",
                          "definition": {"message-ttl": 1, "x-unknown": 1}}]}
    answer = await call(http, "POST", "/api/definitions", body, status=400)
    assert "x-unknown" in answer["reason"]


async def test_pagination_filtering_sorting_and_columns(http):
    for name in ("alpha", "beta", "gamma", "delta", "epsilon"):
        await call(http, "PUT", f"/api/queues/%2F/{name}", {}, status=201)
    page = await call(http, "GET", "/api/queues?page=2&page_size=2&sort=name")
    assert {k: page[k] for k in ("filtered_count", "item_count", "page", "page_count",
                                 "page_size", "total_count")} == {
        "filtered_count": 5, "item_count": 2, "page": 2, "page_count": 3, "page_size": 2,
        "total_count": 5}
    assert [q["name"] for q in page["items"]] == ["delta", "epsilon"]
    regex = await call(http, "GET", "/api/queues?page=1&name=^(a|b)&use_regex=true")
    assert [q["name"] for q in regex["items"]] == ["alpha", "beta"]
    assert regex["filtered_count"] == 2 and regex["total_count"] == 5
    plain = await call(http, "GET", "/api/queues?name=ta&sort=name&sort_reverse=true"
                                    "&columns=name,vhost")
    assert plain == [{"name": "delta", "vhost": "/"}, {"name": "beta", "vhost": "/"}]
    for query in ("page=1&page_size=501", "page=0", "page=x", "page=9",
                  "page=1&name=(&use_regex=true"):
        assert (await call(http, "GET", f"/api/queues?{query}", status=400))["error"] == \
            "bad_request"


async def test_health_checks_and_aliveness(broker, http):
    for check in ("alarms", "local-alarms", "virtual-hosts", "is-in-service",
                  "node-is-quorum-critical",
                  "node-is-mirror-sync-critical", "protocol-listener/amqp091",
                  "protocol-listener/stream", "protocol-listener/iggy",
                  f"port-listener/{broker.ports['amqp']}",
                  "certificate-expiration/1/months"):
        assert await call(http, "GET", f"/api/health/checks/{check}") == {"status": "ok"}
    missing = await call(http, "GET", "/api/health/checks/protocol-listener/mqtt", status=503)
    assert missing["status"] == "failed" and "mqtt" in missing["reason"]
    await call(http, "GET", "/api/health/checks/port-listener/1", status=503)
    await call(http, "GET", "/api/health/checks/certificate-expiration/1/eons", status=400)
    broker.core.alarms.set("memory", True)
    try:
        alarmed = await call(http, "GET", "/api/health/checks/alarms", status=503)
        assert alarmed["alarms"][0]["resource"] == "memory"
    finally:
        broker.core.alarms.set("memory", False)
    assert await call(http, "GET", "/api/aliveness-test/%2F") == {"status": "ok"}
    await call(http, "GET", "/api/aliveness-test/nowhere", status=404)


async def test_message_stats_and_unacked_totals(broker, http):
    await call(http, "PUT", "/api/queues/%2F/work", {}, status=201)
    await call(http, "PUT", "/api/queues/%2F/events", {"arguments": {
        "x-queue-type": "stream"}}, status=201)
    connection = await asyncio.to_thread(amqp, broker)
    try:
        channel = await asyncio.to_thread(connection.channel)
        await asyncio.to_thread(channel.confirm_delivery)
        for i in range(3):
            await asyncio.to_thread(channel.basic_publish, "", "events", b"e%d" % i)
        published = 0

        async def rated() -> bool:  # rates need publishes across two samples
            nonlocal published
            await asyncio.to_thread(channel.basic_publish, "", "work", b"%d" % published)
            published += 1
            queue = await call(http, "GET", "/api/queues/%2F/work")
            return published >= 10 and queue["message_stats"]["publish_details"]["rate"] > 0

        await until(rated)
        await asyncio.to_thread(channel.basic_qos, prefetch_count=5)
        await asyncio.to_thread(channel.basic_consume, "work", lambda *a: None)
        await asyncio.to_thread(connection.process_data_events, 0.3)
        queue = await call(http, "GET", "/api/queues/%2F/work")
        assert queue["message_stats"]["publish"] == published
        assert queue["message_stats"]["deliver_get"] == 5
        assert queue["messages_unacknowledged"] == 5
        assert queue["messages_ready"] == published - 5
        [consumer] = queue["consumer_details"]
        assert consumer["prefetch_count"] == 5 and consumer["ack_required"] is True
        overview = await call(http, "GET", "/api/overview")
        assert overview["queue_totals"] == {"messages": published + 3,
                                            "messages_ready": published - 5 + 3,
                                            "messages_unacknowledged": 5}
        assert overview["object_totals"]["channels"] == 1
        assert overview["message_stats"]["publish"] == published + 3
        assert overview["message_stats"]["confirm"] == published + 3
        assert overview["message_stats"]["deliver_get"] == 5
        assert overview["rabbitmq_version"] and overview["product_name"] == "mainstem"
        events = await call(http, "GET", "/api/queues/%2F/events")
        assert events["message_stats"]["publish"] == 3
        [row] = await call(http, "GET", "/api/channels")
        assert row["message_stats"]["publish"] == published + 3
        assert row["prefetch_count"] == 5
        assert row["messages_unacknowledged"] == 5 and row["confirm"] is True
        one = await call(http, "GET", "/api/channels/" + quote(row["name"], safe=""))
        assert one["name"] == row["name"] and one["number"] == 1
        default = await call(http, "GET", "/api/exchanges/%2F/amq.default")
        assert default["name"] == "" and default["message_stats"]["publish_in"] == \
            published + 3
        [conn] = await call(http, "GET", "/api/connections")
        assert conn["channels"] == 1 and conn["recv_oct"] > 0 and "recv_oct_details" in conn
        [listed] = await call(http, "GET", f"/api/connections/{conn['id']}/channels")
        assert listed["name"] == row["name"]
    finally:
        await asyncio.to_thread(connection.close)
    overview = await call(http, "GET", "/api/overview")
    assert overview["message_stats"]["publish"] == published + 3  # closed channels count
    assert overview["queue_totals"]["messages_unacknowledged"] == 0


async def test_openapi_lists_every_path(broker, http):
    document = await call(http, "GET", "/api/openapi.json")
    state = AdminState(core=broker.core, connections=broker.connections, monitor=None,
                       listeners=broker.ports, hosts=broker.hosts)
    app = create_app(state, served_metrics="authenticated", per_object_metrics=False)
    api_paths = {resource.canonical for resource in app.router.resources()
                 if resource.canonical.startswith("/api/")}
    assert api_paths <= set(document["paths"])
    assert document == json.loads(json.dumps(openapi_document(ROUTE_TABLES)))
