"""Policies and operator policies against a real broker: set over the management API
(urllib), each key's effect seen by pika, as RabbitMQ 4.x applies them: live, to queues
that exist and to those declared later, without a redeclare."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.error import HTTPError
from urllib.parse import quote
from urllib.request import Request, urlopen

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from mainstem.testing import ThreadedBroker
from tests.support.pika_channels import pika_channel

TIMEOUT_S = 15
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


@pytest.fixture
def channel(server: ThreadedBroker) -> Iterator[BlockingChannel]:
    yield from pika_channel(server.ports["amqp"])


@dataclass
class Response:
    status_code: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def api(server: ThreadedBroker, method: str, path: str, body: object = None,
        status: int | None = None) -> Response:
    request = Request(f"http://127.0.0.1:{server.ports['admin']}{path}", method=method,
                      data=None if body is None else json.dumps(body).encode(),
                      headers={"Authorization": AUTH, "Content-Type": "application/json"})
    try:
        with urlopen(request, timeout=TIMEOUT_S) as answer:
            response = Response(answer.status, answer.read().decode())
    except HTTPError as error:
        response = Response(error.code, error.read().decode())
    if status is not None:
        assert response.status_code == status, response.text
    return response


def set_policy(server: ThreadedBroker, name: str, pattern: str, definition: dict,
               priority: int = 0, apply_to: str = "queues", kind: str = "policies") -> None:
    body = {"pattern": pattern, "definition": definition, "priority": priority,
            "apply-to": apply_to}
    assert api(server, "PUT", f"/api/{kind}/%2F/{quote(name)}", body).status_code in (201, 204)


def queue_row(server: ThreadedBroker, name: str) -> dict:
    return api(server, "GET", f"/api/queues/%2F/{quote(name)}", status=200).json()


def ready(channel: BlockingChannel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


def publish(channel: BlockingChannel, queue: str, count: int, size: int = 10) -> None:
    for i in range(count):
        channel.basic_publish("", queue, str(i).encode().ljust(size, b"."))


def until(condition: Callable[[], bool], timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def bodies(channel: BlockingChannel, queue: str) -> list[bytes]:
    taken = []
    while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
        taken.append(got[2])
    return taken


def test_max_length_from_a_policy_set_before_the_queue(server, channel):
    set_policy(server, "cap", "^orders$", {"max-length": 10})
    channel.queue_declare("orders")
    publish(channel, "orders", 20)
    until(lambda: ready(channel, "orders") == 10)
    assert bodies(channel, "orders")[0].startswith(b"10")  # drop-head: the oldest went
    row = queue_row(server, "orders")
    assert row["policy"] == "cap" and row["operator_policy"] == ""
    assert row["effective_policy_definition"] == {"max-length": 10}


def test_a_policy_on_a_live_queue_holds_at_once_and_clearing_it_restores_the_argument(
        server, channel):
    channel.queue_declare("jobs", arguments={"x-max-length": 15})
    publish(channel, "jobs", 20)
    until(lambda: ready(channel, "jobs") == 15)
    set_policy(server, "tight", "^jobs", {"max-length": 5})
    until(lambda: ready(channel, "jobs") == 5)
    # the lower of argument and policy wins: a looser policy leaves the argument's 15
    set_policy(server, "tight", "^jobs", {"max-length": 50})
    publish(channel, "jobs", 20)
    until(lambda: ready(channel, "jobs") == 15)
    api(server, "DELETE", "/api/policies/%2F/tight", status=204)
    assert queue_row(server, "jobs")["policy"] == ""
    publish(channel, "jobs", 5)
    time.sleep(0.2)
    assert ready(channel, "jobs") == 15


def test_max_length_bytes_counts_bodies(server, channel):
    set_policy(server, "bytes", "^sized$", {"max-length-bytes": 100})
    channel.queue_declare("sized")
    publish(channel, "sized", 10, size=30)  # 300 bytes of bodies: the newest 3 fit
    until(lambda: ready(channel, "sized") == 3)
    assert queue_row(server, "sized")["message_bytes_ready"] == 90


def test_overflow_reject_publish_nacks_confirmed_publishes(server, channel):
    set_policy(server, "reject", "^bounded$", {"max-length": 2, "overflow": "reject-publish"})
    channel.queue_declare("bounded")
    channel.confirm_delivery()
    publish(channel, "bounded", 2)
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", "bounded", b"one too many")
    assert ready(channel, "bounded") == 2


def test_dead_letter_exchange_receives_what_the_length_limit_drops(server, channel):
    channel.exchange_declare("dlx", "fanout")
    channel.queue_declare("dead")
    channel.queue_bind("dead", "dlx")
    channel.queue_declare("work")
    set_policy(server, "dl", "^work$", {"max-length": 1, "dead-letter-exchange": "dlx"})
    publish(channel, "work", 3)
    until(lambda: ready(channel, "dead") == 2)
    assert [b[:1] for b in bodies(channel, "dead")] == [b"0", b"1"]


def test_reject_publish_dlx_dead_letters_the_refused(server, channel):
    channel.exchange_declare("dlx2", "fanout")
    channel.queue_declare("refused")
    channel.queue_bind("refused", "dlx2")
    set_policy(server, "full", "^capped$", {"max-length": 1, "overflow": "reject-publish-dlx",
                                            "dead-letter-exchange": "dlx2"})
    channel.queue_declare("capped")
    publish(channel, "capped", 3)
    until(lambda: ready(channel, "refused") == 2)
    assert ready(channel, "capped") == 1


def test_dead_letter_routing_key_and_argument_first(server, channel):
    """The queue's own x-dead-letter-exchange wins over the policy's, as in RabbitMQ;
    the policy's routing key fills in what the arguments leave out."""
    for name in ("mine", "theirs"):
        channel.exchange_declare(name, "direct")
        channel.queue_declare(f"{name}-dead")
        channel.queue_bind(f"{name}-dead", name, "rerouted")
    channel.queue_declare("argued", arguments={"x-dead-letter-exchange": "mine"})
    set_policy(server, "dl", "^argued$", {"dead-letter-exchange": "theirs",
                                          "dead-letter-routing-key": "rerouted",
                                          "message-ttl": 0})
    publish(channel, "argued", 1)
    until(lambda: ready(channel, "mine-dead") == 1)
    assert ready(channel, "theirs-dead") == 0


def test_message_ttl_expires(server, channel):
    set_policy(server, "ttl", "^short", {"message-ttl": 100})
    channel.queue_declare("short-lived")
    publish(channel, "short-lived", 5)
    time.sleep(0.4)
    assert channel.basic_get("short-lived", auto_ack=True)[0] is None


def test_expires_deletes_an_idle_queue(server, channel):
    channel.queue_declare("idle")
    set_policy(server, "expire", "^idle$", {"expires": 200})
    until(lambda: api(server, "GET", "/api/queues/%2F/idle").status_code == 404)


def test_operator_policy_stricter_value_wins(server, channel):
    set_policy(server, "user", "^capped", {"max-length": 10, "message-ttl": 60_000})
    set_policy(server, "ops", "^capped", {"max-length": 4, "message-ttl": 120_000},
               kind="operator-policies")
    channel.queue_declare("capped-by-ops")
    publish(channel, "capped-by-ops", 20)
    until(lambda: ready(channel, "capped-by-ops") == 4)
    row = queue_row(server, "capped-by-ops")
    assert (row["policy"], row["operator_policy"]) == ("user", "ops")
    assert row["effective_policy_definition"] == {"max-length": 4, "message-ttl": 60_000}
    # an operator policy sets only the keys RabbitMQ allows it
    refused = api(server, "PUT", "/api/operator-policies/%2F/bad", {
        "pattern": ".*", "definition": {"dead-letter-exchange": "x"}}, status=400)
    assert "dead-letter-exchange" in refused.json()["reason"]


def test_the_higher_priority_applies_and_ties_go_by_name(server, channel):
    set_policy(server, "low", "^prio", {"max-length": 3}, priority=1)
    set_policy(server, "high", "^prio", {"max-length": 7}, priority=5)
    channel.queue_declare("prio")
    publish(channel, "prio", 20)
    until(lambda: ready(channel, "prio") == 7)
    assert queue_row(server, "prio")["policy"] == "high"
    set_policy(server, "a-tie", "^prio", {"max-length": 2}, priority=5)
    until(lambda: ready(channel, "prio") == 2)
    assert queue_row(server, "prio")["policy"] == "a-tie"


def test_apply_to_picks_the_queue_type(server, channel):
    set_policy(server, "quorum-only", "^typed", {"max-length": 1}, apply_to="quorum_queues")
    channel.queue_declare("typed-classic")
    channel.queue_declare("typed-quorum", durable=True, arguments={"x-queue-type": "quorum"})
    assert queue_row(server, "typed-classic")["policy"] == ""
    assert queue_row(server, "typed-quorum")["policy"] == "quorum-only"


def test_delivery_limit_dead_letters_a_quorum_queues_message_returned_too_often(
        server, channel):
    channel.exchange_declare("poison", "fanout")
    channel.queue_declare("poisoned")
    channel.queue_bind("poisoned", "poison")
    set_policy(server, "limit", "^tasks$", {"delivery-limit": 1,
                                            "dead-letter-exchange": "poison"},
               apply_to="quorum_queues")
    channel.queue_declare("tasks", durable=True, arguments={"x-queue-type": "quorum"})
    channel.confirm_delivery()
    publish(channel, "tasks", 1)
    for _ in range(2):  # two unsuccessful deliveries: one more than the limit
        until(lambda: ready(channel, "tasks") == 1)
        method, _, _ = channel.basic_get("tasks")
        channel.basic_nack(method.delivery_tag, requeue=True)
    until(lambda: ready(channel, "poisoned") == 1)
    assert ready(channel, "tasks") == 0


def test_a_smaller_x_delivery_limit_argument_wins_over_the_policy(server, channel):
    set_policy(server, "loose", "^strict$", {"delivery-limit": 5}, apply_to="quorum_queues")
    channel.queue_declare("strict", durable=True,
                          arguments={"x-queue-type": "quorum", "x-delivery-limit": 0})
    channel.confirm_delivery()
    publish(channel, "strict", 1)
    until(lambda: ready(channel, "strict") == 1)
    method, _, _ = channel.basic_get("strict")
    channel.basic_nack(method.delivery_tag, requeue=True)  # returned once: over the limit
    until(lambda: ready(channel, "strict") == 0)
    assert channel.basic_get("strict")[0] is None


def test_alternate_exchange_by_policy(server, channel):
    channel.exchange_declare("orders-x", "direct")
    channel.exchange_declare("ae", "fanout")
    channel.queue_declare("unrouted")
    channel.queue_bind("unrouted", "ae")
    set_policy(server, "ae", "^orders-x$", {"alternate-exchange": "ae"}, apply_to="exchanges")
    channel.basic_publish("orders-x", "no.such.key", b"lost?")
    until(lambda: ready(channel, "unrouted") == 1)
    row = api(server, "GET", "/api/exchanges/%2F", status=200).json()
    assert next(x for x in row if x["name"] == "orders-x")["policy"] == "ae"
    api(server, "DELETE", "/api/policies/%2F/ae", status=204)
    channel.basic_publish("orders-x", "no.such.key", b"lost")
    time.sleep(0.2)
    assert ready(channel, "unrouted") == 1


def test_a_streams_segments_go_by_max_age(server, channel):
    channel.queue_declare("history", durable=True, arguments={"x-queue-type": "stream"})
    set_policy(server, "age", "^history$", {"max-age": "1s",
                                            "stream-max-segment-size-bytes": 2000},
               apply_to="streams")
    assert queue_row(server, "history")["effective_policy_definition"]["max-age"] == "1s"
    channel.confirm_delivery()
    publish(channel, "history", 30, size=300)
    time.sleep(1.5)
    publish(channel, "history", 10, size=300)  # rolling a segment runs retention
    until(lambda: queue_row(server, "history")["messages"] < 30)


def test_policy_api_lists_validates_and_deletes(server):
    body = {"pattern": "^a", "definition": {"max-length": 1}, "priority": 2,
            "apply-to": "classic_queues"}
    api(server, "PUT", "/api/policies/%2F/p1", body, status=201)
    api(server, "PUT", "/api/policies/%2F/p1", body, status=204)
    row = {"vhost": "/", "name": "p1", **body}
    assert api(server, "GET", "/api/policies", status=200).json() == [row]
    assert api(server, "GET", "/api/policies/%2F", status=200).json() == [row]
    assert api(server, "GET", "/api/policies/%2F/p1", status=200).json() == row
    assert api(server, "GET", "/api/operator-policies", status=200).json() == []
    for bad in ({**body, "pattern": "("}, {**body, "apply-to": "everything"},
                {**body, "definition": {"max-length": -1}},
                {**body, "definition": {"no-such-key": 1}}, {**body, "definition": {}}):
        api(server, "PUT", "/api/policies/%2F/bad", bad, status=400)
    api(server, "PUT", "/api/policies/nowhere/p1", body, status=404)
    api(server, "DELETE", "/api/policies/%2F/p1", status=204)
    api(server, "DELETE", "/api/policies/%2F/p1", status=404)
    api(server, "GET", "/api/policies/%2F/p1", status=404)


def test_policies_survive_a_restart(tmp_path):
    with ThreadedBroker(tmp_path / "data") as first:
        set_policy(first, "kept", "^k", {"max-length": 3})
    with ThreadedBroker(tmp_path / "data") as second:
        connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", second.ports["amqp"]))
        try:
            channel = connection.channel()
            channel.queue_declare("k1")
            publish(channel, "k1", 10)
            until(lambda: ready(channel, "k1") == 3)
        finally:
            connection.close()


def test_definitions_carry_policies(server, tmp_path):
    set_policy(server, "exported", "^e", {"max-length": 3})
    set_policy(server, "imposed", "^e", {"max-length": 2}, kind="operator-policies")
    exported = api(server, "GET", "/api/definitions", status=200).json()
    assert [p["name"] for p in exported["policies"]] == ["exported"]
    assert [(p["component"], p["name"], p["value"]["definition"])
            for p in exported["parameters"]] == [("operator_policy", "imposed",
                                                  {"max-length": 2})]
    api(server, "DELETE", "/api/policies/%2F/exported", status=204)
    api(server, "DELETE", "/api/operator-policies/%2F/imposed", status=204)
    api(server, "POST", "/api/definitions", exported, status=204)
    assert api(server, "GET", "/api/policies/%2F/exported", status=200).json()[
        "definition"] == {"max-length": 3}
    assert api(server, "GET", "/api/definitions/%2F", status=200).json()["policies"] == [
        {"name": "exported", "pattern": "^e", "apply-to": "queues", "priority": 0,
         "definition": {"max-length": 3}}]
