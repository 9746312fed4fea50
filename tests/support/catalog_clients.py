"""Clients of the catalog in cluster tests and benches: management API calls (`call`
returns errors as answers, `api` raises them), etcd's own value of a catalog key, and etcd
freezing in short hiccups."""

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


def request(cluster: LocalCluster, node: str, method: str, at: str,
            body: object = None) -> Request:
    """A management API request to `node`, as guest, `body` as JSON."""
    port = cluster.nodes[node].ports["admin"]
    return Request(f"http://127.0.0.1:{port}{at}", method=method,
                   data=None if body is None else json.dumps(body).encode(),
                   headers={"Authorization": AUTH, "Content-Type": "application/json"})


def api(cluster: LocalCluster, node: str, method: str, at: str, body: object = None) -> Any:
    """The JSON body of one management API request; HTTPError for an error status."""
    with urlopen(request(cluster, node, method, at, body), timeout=CAP_S) as response:
        text = response.read()
    return json.loads(text) if text else None


def call(cluster: LocalCluster, node: str, method: str, at: str,
         body: object = None) -> tuple[int, Any]:
    """(status, JSON body) of one management API request; errors are answers too."""
    try:
        with urlopen(request(cluster, node, method, at, body), timeout=30) as response:
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


def contended_writes(cluster: LocalCluster, keys: int, rounds: int) -> list[int]:
    """Policy and user `contended-K` (K < keys) written through all three nodes at once,
    `rounds` times, each write a value of its own, etcd hiccuping: their statuses."""
    writes = [(kind, key, node, r) for r in range(rounds) for key in range(keys)
              for kind in ("policy", "user") for node in range(3)]

    def write(job: tuple[str, int, int, int]) -> int:
        kind, key, node, r = job
        value = (r * 3 + node) * 1000 + key
        if kind == "policy":
            return put_policy(cluster, NODES[node], f"contended-{key}", value)
        return put_user(cluster, NODES[node], f"contended-{key}", f"t{value}")

    with ThreadPoolExecutor(48) as pool, hiccups(cluster):
        return list(pool.map(write, writes))


def divergence(cluster: LocalCluster, keys: int) -> list[tuple[str, int, str]]:
    """(kind, key, node) of each node value of the contended keys that is not etcd's."""
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


def settled_divergence(cluster: LocalCluster, keys: int, wait_s: float = 10.0
                       ) -> list[tuple[str, int, str]]:
    """`divergence` once the watches had `wait_s` to catch up (they take moments)."""
    deadline = time.monotonic() + wait_s
    while (wrong := divergence(cluster, keys)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return wrong


def policies_until_killed(cluster: LocalCluster, node: str, answers: int, prefix: str
                          ) -> list[str]:
    """Policies `PREFIX-T-K` PUT through `node` from four threads, `node` SIGKILLed right
    after its `answers`-th 201: the names it answered 201 for."""
    answered: list[str] = []
    lock = threading.Lock()
    enough = threading.Event()

    def writer(thread: int) -> None:
        for k in range(10 * answers):
            try:
                status = put_policy(cluster, node, f"{prefix}-{thread}-{k}", k)
            except OSError:  # the node is gone
                return
            with lock:
                if status == 201:
                    answered.append(f"{prefix}-{thread}-{k}")
                if len(answered) >= answers:
                    enough.set()
            if enough.is_set():
                return

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    assert enough.wait(CAP_S), "the node answered too few"
    cluster.kill(node)
    for thread in threads:
        thread.join(CAP_S)
    with lock:
        return list(answered)


def missing_policies(cluster: LocalCluster, node: str, names: list[str]) -> list[str]:
    """Those of `names` that `node` has no policy of (in vhost /)."""
    held = {row["name"] for row in call(cluster, node, "GET", "/api/policies/%2F")[1]}
    return [name for name in names if name not in held]
