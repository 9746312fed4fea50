"""Fixtures of the cluster tests: `mainstem_cluster` (mainstem.testing) gives each test a
cluster of its own, for tests that kill, freeze or restart nodes; `cluster` gives every
test of a module the same one, for tests that leave it as they found it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mainstem.testing_cluster import LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """An etcd and three nodes on 127.0.0.1 for the whole module."""
    with LocalCluster(tmp_path_factory.mktemp("cluster") / "cluster") as shared:
        yield shared
