"""Fixtures shared by every test folder.

`broker` is the package's own pytest fixture (`mainstem.testing.mainstem_broker`): a real
server on 127.0.0.1 with ephemeral ports and its data under tmp_path, so the suite runs on
the same fixture that mainstem's users get; `server` is the same broker on a thread of its
own (`mainstem_server`), for blocking clients (pika, urllib). A folder or a file that needs
another configuration defines its own.

`s3` runs a test against each S3 server of `tests/support/s3_servers.py`: moto's emulator
and Ceph's RADOS Gateway, a real S3 server (`radosgw`, one a process, started on first use).

Every phase of every test runs under a `HangGuard`: one stuck for minutes fails with the
stacks of its threads and tasks instead of holding the run until CI's limit.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.log.tiering import BUCKET, KEYS, moto_s3
from tests.support.hang_guard import HangGuard
from tests.support.plain_wheel import build_plain_wheel
from tests.support.radosgw import RadosGateway
from tests.support.s3_servers import SERVERS, S3Server

if TYPE_CHECKING:
    from mainstem.server import Broker
    from mainstem.testing import ThreadedBroker


def _guarded(item: pytest.Item, phase: str) -> Generator[None, object, object]:
    with HangGuard(f"{item.nodeid} ({phase})") as guard:
        try:
            result = yield
        except BaseException:
            if guard.report is None:
                raise
    if guard.report is not None:  # even if the phase then ended well: it needed the guard
        pytest.fail(guard.report, pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item, "teardown"))


@pytest.fixture
def broker(mainstem_broker: Broker) -> Broker:
    return mainstem_broker


@pytest.fixture
def server(mainstem_server: ThreadedBroker) -> ThreadedBroker:
    return mainstem_server


@pytest.fixture(scope="session")
def plain_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mainstem's wheel, uncompiled, built once for the test process."""
    return build_plain_wheel(tmp_path_factory.mktemp("plain-wheel"))


@pytest.fixture(scope="session")
def radosgw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RadosGateway]:
    """One real S3 server (Ceph's gateway) for the test session's process, started when a
    test first asks for it."""
    gateway = RadosGateway(tmp_path_factory.mktemp("radosgw"))
    gateway.start()
    yield gateway
    gateway.stop()


@pytest.fixture(params=SERVERS)
def s3(request: pytest.FixtureRequest) -> Iterator[S3Server]:
    """An empty bucket on moto's emulator, then on Ceph's gateway."""
    if request.param == "rgw":
        gateway: RadosGateway = request.getfixturevalue("radosgw")
        yield S3Server("rgw", gateway.endpoint, gateway.new_bucket(), **gateway.keys)
        return
    with moto_s3() as (_, endpoint):
        yield S3Server("moto", endpoint, BUCKET, **KEYS)
