"""A catalog change a client is answered for is in etcd first (issue 39, items 3 and 4),
on a real three-node cluster and a real etcd, through the management API.

- etcd frozen: a policy, a limit, a user and a permission PUT through a node are refused
  (503), not acknowledged; once etcd answers again every node agrees on each (all have it
  or none).
- A node killed right after its answers: every change it acknowledged is on the others.
- Writes of the same keys through three nodes at once: every node ends on etcd's value.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.error import HTTPError
from urllib.parse import quote
from urllib.request import Request, urlopen

from mainstem.cluster.etcd_keys import path
from mainstem.testing_cluster import LocalCluster
from mainstem.testing_wait import CAP_S

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()
NODES = ("node1", "node2", "node3")
RABBIT_HASH = base64.b64encode(bytes(36)).decode()  # a salted sha256, as definitions hold


def call(cluster: LocalCluster, node: str, method: str, at: str,
         body: object = None) -> tuple[int, Any]:
    """(status, JSON body) of one management API request; errors are answers too."""
    port = cluster.nodes[node].ports["admin"]
    request = Request(f"http://127.0.0.1:{port}{at}", method=method,
                      data=None if body is None else json.dumps(body).encode(),
                      headers={"Authorization": AUTH, "Content-Type": "application/json"})
    try:
        with urlopen(request, timeout=30) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None
    except HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + CAP_S
    while not condition():
        assert time.monotonic() < deadline, f"not reached in time: {what}"
        time.sleep(0.2)


def etcd_row(cluster: LocalCluster, *key: str) -> Any:
    """The row etcd holds at a catalog key (None: no such key)."""
    request = Request(f"http://{cluster.etcd.endpoint}/v3/kv/range", method="POST",
                      data=json.dumps({"key": base64.b64encode(
                          path("catalog", *key).encode()).decode()}).encode())
    with urlopen(request, timeout=10) as response:
        kvs = json.load(response).get("kvs", [])
    return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None


def policy_limit(cluster: LocalCluster, node: str, name: str) -> int | None:
    status, row = call(cluster, node, "GET", f"/api/policies/%2F/{quote(name)}")
    return row["definition"]["max-length"] if status == 200 else None


def user_tags(cluster: LocalCluster, node: str, name: str) -> list[str] | None:
    status, row = call(cluster, node, "GET", f"/api/users/{quote(name)}")
    return row["tags"] if status == 200 else None


def put_policy(cluster: LocalCluster, node: str, name: str, limit: int) -> int:
    return call(cluster, node, "PUT", f"/api/policies/%2F/{quote(name)}",
                {"pattern": f"^{name}$", "definition": {"max-length": limit},
                 "apply-to": "queues"})[0]


def put_user(cluster: LocalCluster, node: str, name: str, tag: str) -> int:
    return call(cluster, node, "PUT", f"/api/users/{quote(name)}",
                {"password_hash": RABBIT_HASH, "tags": tag})[0]


# -- item 3: answered only once etcd holds it --------------------------------------------


def test_changes_while_etcd_is_frozen_are_refused_and_end_alike(
        restored_cluster: LocalCluster) -> None:
    cluster = restored_cluster
    assert call(cluster, "node2", "PUT", "/api/users/frozen-base",
                {"password_hash": RABBIT_HASH, "tags": ""})[0] == 201
    until(lambda: all(user_tags(cluster, n, "frozen-base") == [] for n in NODES),
          "the user everywhere")
    requests: dict[str, Callable[[], tuple[int, Any]]] = {
        "policy": lambda: call(cluster, "node1", "PUT", "/api/policies/%2F/frozen",
                               {"pattern": "^frozen", "definition": {"max-length": 7}}),
        "limit": lambda: call(cluster, "node1", "PUT", "/api/vhost-limits/%2F/max-queues",
                              {"value": 77}),
        "user": lambda: call(cluster, "node1", "PUT", "/api/users/frozen-user",
                             {"password_hash": RABBIT_HASH, "tags": "x"}),
        "permission": lambda: call(cluster, "node1", "PUT",
                                   "/api/permissions/%2F/frozen-base",
                                   {"configure": "^f", "write": "^f", "read": "^f"}),
    }
    etcd = cluster.etcd.process
    assert etcd is not None
    os.kill(etcd.pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(len(requests)) as pool:
            answers = dict(zip(requests, pool.map(lambda send: send(), requests.values()),
                               strict=True))
    finally:
        os.kill(etcd.pid, signal.SIGCONT)
    assert {what: status for what, (status, _) in answers.items()} == dict.fromkeys(
        requests, 503), answers
    assert all("metadata store did not answer" in body["reason"]
               for _, body in answers.values())

    def held() -> dict[str, list[bool]]:
        return {
            "policy": [policy_limit(cluster, n, "frozen") == 7 for n in NODES],
            "limit": [call(cluster, n, "GET", "/api/vhost-limits/%2F")[1] != [] for n in NODES],
            "user": [user_tags(cluster, n, "frozen-user") is not None for n in NODES],
            "permission": [call(cluster, n, "GET", "/api/permissions/%2F/frozen-base")[0]
                           == 200 for n in NODES],
        }

    until(lambda: all(len(set(on)) == 1 for on in held().values()),
          "every node agrees on each refused change")
    time.sleep(1.0)  # and goes on agreeing: nothing arrives late on one node only
    assert all(len(set(on)) == 1 for on in held().values()), held()
    for what in ("policy", "limit", "user"):  # tidy for the next test, where made
        if held()[what][0]:
            at = {"policy": "/api/policies/%2F/frozen", "limit":
                  "/api/vhost-limits/%2F/max-queues", "user": "/api/users/frozen-user"}[what]
            call(cluster, "node2", "DELETE", at)


def test_a_change_answered_just_before_its_node_dies_is_on_the_others(
        restored_cluster: LocalCluster) -> None:
    """Policies PUT through node3 from four threads; node3 is killed right after its
    40th answer: each one answered 201 is on node1 and node2."""
    cluster = restored_cluster
    answered: list[str] = []
    lock = threading.Lock()
    enough = threading.Event()

    def writer(thread: int) -> None:
        for k in range(100):
            name = f"dying-{thread}-{k}"
            try:
                status = put_policy(cluster, "node3", name, k)
            except OSError:  # node3 is gone
                return
            with lock:
                if status == 201:
                    answered.append(name)
                if len(answered) >= 40:
                    enough.set()
            if enough.is_set():
                return

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    assert enough.wait(CAP_S)
    cluster.kill("node3")
    for thread in threads:
        thread.join(CAP_S)
    with lock:
        acknowledged = list(answered)

    def missing(node: str) -> list[str]:
        held = {row["name"] for row in call(cluster, node, "GET", "/api/policies/%2F")[1]}
        return [name for name in acknowledged if name not in held]

    time.sleep(1.0)  # what etcd holds reaches the watches
    assert missing("node1") == [] and missing("node2") == [], (missing("node1"),
                                                               missing("node2"))


# -- item 4: contended writes end on etcd's value everywhere ------------------------------


@contextmanager
def hiccups(cluster: LocalCluster) -> Iterator[None]:
    """etcd frozen for 0.1 s every 0.3 s meanwhile (far below the lease TTL): each node's
    changes queue up behind its write, while its peers' writes of the same keys land,
    which is when a node's own echo and a peer's value cross."""
    etcd = cluster.etcd.process
    assert etcd is not None
    done = threading.Event()

    def freeze() -> None:
        while not done.wait(0.2):
            os.kill(etcd.pid, signal.SIGSTOP)
            time.sleep(0.1)
            os.kill(etcd.pid, signal.SIGCONT)

    thread = threading.Thread(target=freeze)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        os.kill(etcd.pid, signal.SIGCONT)


def test_contended_writes_end_on_etcd_value_on_every_node(cluster: LocalCluster) -> None:
    """20 policies and 20 users, each written through all three nodes at once, 5 rounds
    (600 writes): every node's value of each key is etcd's."""
    keys, rounds = 40, 10
    writes = [(kind, key, node, r) for r in range(rounds) for key in range(keys)
              for kind in ("policy", "user") for node in range(3)]

    def write(job: tuple[str, int, int, int]) -> int:
        kind, key, node, r = job
        value = (r * 3 + node) * 1000 + key
        if kind == "policy":
            return put_policy(cluster, NODES[node], f"contended-{key}", value)
        return put_user(cluster, NODES[node], f"contended-{key}", f"t{value}")

    with ThreadPoolExecutor(48) as pool, hiccups(cluster):
        statuses = list(pool.map(write, writes))
    assert set(statuses) <= {201, 204}, statuses

    def divergent() -> list[tuple[str, int, str]]:
        wrong = []
        for key in range(keys):
            name = f"contended-{key}"
            policy = etcd_row(cluster, "policy", "/", name)["definition"]["max-length"]
            tags = etcd_row(cluster, "user", name)["tags"]
            wrong += [("policy", key, node) for node in NODES
                      if policy_limit(cluster, node, name) != policy]
            wrong += [("user", key, node) for node in NODES
                      if user_tags(cluster, node, name) != tags]
        return wrong

    deadline = time.monotonic() + 10.0  # the watches catch up within moments
    while (wrong := divergent()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert wrong == [], f"{len(wrong)} of {keys * 2 * 3} node values differ from etcd's"
