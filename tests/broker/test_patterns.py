"""User-supplied regular expressions against a real broker (issue 40): a policy's pattern
with catastrophic backtracking, matched against long queue names declared through pika,
answers at once while another client's round trips keep being answered; a pattern only a
backtracking engine can run (a backreference, a lookaround) is refused with 400 and the
reason wherever it is given: policy, operator policy, permissions, definitions import."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from pika.adapters.blocking_connection import BlockingChannel

from mainstem.testing import ThreadedBroker
from tests.admin.test_policies import api, set_policy
from tests.support.pika_channels import pika_channel

# Python's re took 0.45 s for this pattern on a 23-character name and doubles per
# character: 26 characters is several seconds before the fix, long enough to fail the bound.
CATASTROPHIC = "(a+)+$"
SHORT_NAME = "a" * 26 + "!"
LONG_NAME = "a" * 254 + "!"  # AMQP's longest name: hours for a backtracking engine
# Generous for a loaded machine; a linear engine answers in milliseconds.
BOUND_S = 2.0


@pytest.fixture
def attacker(server: ThreadedBroker) -> Iterator[BlockingChannel]:
    yield from pika_channel(server.ports["amqp"])


@pytest.fixture
def bystander(server: ThreadedBroker) -> Iterator[BlockingChannel]:
    yield from pika_channel(server.ports["amqp"])


def timed_while_probing(attack: Callable[[], object], probe: Callable[[], object]
                        ) -> tuple[float, float]:
    """(seconds the attack took, the slowest probe round trip while it ran): the attack
    runs in a thread, the probe in a loop here until the attack is done (at least once)."""
    took: list[float] = []

    def run() -> None:
        started = time.monotonic()
        attack()
        took.append(time.monotonic() - started)

    thread = threading.Thread(target=run, daemon=True)
    slowest = 0.0
    thread.start()
    while True:
        started = time.monotonic()
        probe()
        slowest = max(slowest, time.monotonic() - started)
        if not thread.is_alive():
            break
        time.sleep(0.01)
    thread.join()
    assert took, "the attack failed"
    return took[0], slowest


@pytest.mark.parametrize("name", [SHORT_NAME, LONG_NAME], ids=["short", "long"])
def test_catastrophic_policy_pattern_leaves_the_loop_free(
        server: ThreadedBroker, attacker: BlockingChannel, bystander: BlockingChannel,
        name: str) -> None:
    bystander.queue_declare("bystander")
    set_policy(server, "hostile", CATASTROPHIC, {"max-length": 5})
    took, slowest = timed_while_probing(
        lambda: attacker.queue_declare(name),
        lambda: bystander.queue_declare("bystander", passive=True))
    assert took < BOUND_S, f"a declare took {took:.2f} s"
    assert slowest < BOUND_S, f"another client waited {slowest:.2f} s"
    # Matching is still a search, as RabbitMQ's: the pattern applies to names it matches.
    attacker.queue_declare("aaa")
    assert api(server, "GET", "/api/queues/%2F/aaa", status=200).json()["policy"] == "hostile"
    assert api(server, "GET", f"/api/queues/%2F/{name}", status=200).json()["policy"] == ""


REFUSED = {  # pattern -> what the 400's reason must say
    r"^(a)\1$": "backreference",
    r"^(?P<x>a)(?P=x)$": "backreference",
    r"^(?=amq)": "lookahead",
    r"^(?!amq)": "lookahead",
    r"(?<=amq\.)gen": "lookbehind",
    r"(?<!amq\.)gen": "lookbehind",
}


@pytest.mark.parametrize(("pattern", "reason"), REFUSED.items())
@pytest.mark.parametrize("kind", ["policies", "operator-policies"])
def test_a_policy_only_backtracking_can_match_is_refused(
        server: ThreadedBroker, pattern: str, reason: str, kind: str) -> None:
    body = {"pattern": pattern, "definition": {"max-length": 5}}
    answer = api(server, "PUT", f"/api/{kind}/%2F/refused", body, status=400)
    assert reason in answer.json()["reason"]
    assert api(server, "GET", f"/api/{kind}/%2F").json() == []


def test_a_permission_only_backtracking_can_match_is_refused(server: ThreadedBroker) -> None:
    body = {"configure": ".*", "write": r"^(?!amq\.)", "read": ".*"}
    answer = api(server, "PUT", "/api/permissions/%2F/guest", body, status=400)
    assert "lookahead" in answer.json()["reason"]
    assert api(server, "GET", "/api/permissions/%2F/guest", status=200).json()["write"] == ".*"


def test_definitions_with_a_backreference_are_refused(server: ThreadedBroker) -> None:
    definitions = {"policies": [{"vhost": "/", "name": "refused", "pattern": r"(a)\1",
                                 "definition": {"max-length": 5}}]}
    answer = api(server, "POST", "/api/definitions", definitions, status=400)
    assert "backreference" in answer.json()["reason"]
    assert api(server, "GET", "/api/policies/%2F").json() == []


def test_a_pattern_that_is_no_regex_is_refused_with_the_engines_reason(
        server: ThreadedBroker) -> None:
    body = {"pattern": "amq.(", "definition": {"max-length": 5}}
    answer = api(server, "PUT", "/api/policies/%2F/broken", body, status=400)
    assert "is not a valid regex" in answer.json()["reason"]
    assert "missing )" in answer.json()["reason"]
