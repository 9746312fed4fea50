"""Fixtures of the cluster tests: `mainstem_cluster` (mainstem.testing) gives each test a
cluster of its own; `cluster` gives every test of a module the same one, for tests that
leave it as they found it; `restored_cluster` is that one for a test that kills, freezes
or restarts nodes or etcd: after the test they run again and every node sees the others."""

from __future__ import annotations

import base64
import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator

import pytest

from mainstem.testing_cluster import LocalCluster
from mainstem.testing_wait import CAP_S

AUTH = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """An etcd and three nodes on 127.0.0.1 for the whole module."""
    with LocalCluster(tmp_path_factory.mktemp("cluster") / "cluster") as shared:
        yield shared


@pytest.fixture
def restored_cluster(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The module's cluster, brought back whole after the test, pass or fail."""
    yield cluster
    restore(cluster)


def restore(cluster: LocalCluster) -> None:
    """Resume or restart etcd and the nodes (dead nodes together: each start takes
    seconds), and wait until every node lists them all, so the next test finds three
    joined nodes."""
    etcd = cluster.etcd.process
    if etcd is None or etcd.poll() is not None:
        cluster.etcd.start()
    else:
        os.kill(etcd.pid, signal.SIGCONT)
    dead = [name for name, node in cluster.nodes.items() if not node.alive]
    for node in cluster.live():
        os.kill(node.pid, signal.SIGCONT)
    for name in dead:
        cluster.start(name, wait=False)
    for name in dead:
        cluster.wait_started(name)
    for node in cluster.nodes.values():
        wait_listing(node.ports["admin"], set(cluster.nodes))


def wait_listing(admin_port: int, names: set[str]) -> None:
    """Until GET /api/nodes on `admin_port` names every one of `names`."""
    request = urllib.request.Request(f"http://127.0.0.1:{admin_port}/api/nodes",
                                     headers=AUTH)
    deadline = time.monotonic() + CAP_S  # nodes started on a loaded machine take long
    while True:
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                if {row["name"] for row in json.load(response)} >= names:
                    return
        except OSError:  # not answering yet
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"admin port {admin_port} does not list {sorted(names)}")
        time.sleep(0.1)
