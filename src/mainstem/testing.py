"""A pytest plugin: a real mainstem broker in your test suite, no Docker needed.

Fixtures (the plugin is registered by installing mainstem):

- ``mainstem_broker`` (async): a running ``mainstem.Broker`` on 127.0.0.1 with ephemeral
  ports and its data under ``tmp_path``; it has ``.ports``, ``.urls`` and ``.core``.
  Needs pytest-asyncio.
- ``mainstem_server`` (sync): the same broker on its own event loop in a background thread,
  for synchronous clients (pika, kombu) and tests that do not use asyncio; it has
  ``.ports``, ``.urls`` and ``.data_dir``.
- ``mainstem_cluster`` (sync): a real etcd (Debian's etcd-server) and three ``mainstem
  serve`` processes joined in a cluster on loopback, each with its own data directory
  (see ``mainstem.testing_cluster.LocalCluster``: kill, restart and inspect nodes).

This module is imported by pytest at startup in every project that has mainstem
installed, so the server is imported only when a fixture is used.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mainstem.testing_wait import CAP_S

if TYPE_CHECKING:
    from mainstem.server import Broker

try:
    import pytest_asyncio
except ImportError:  # the sync fixture still works; the async one explains what is missing
    pytest_asyncio = None  # type: ignore[assignment]

_STOP_TIMEOUT_S = 30.0


class ThreadedBroker:
    """A Broker running on its own event loop in a daemon thread.

    Use it as a context manager; keyword arguments go to ``Broker``. Talk to it only over
    the network: its core belongs to the background loop.
    """

    def __init__(self, data_dir: Path | str, **broker_options: Any) -> None:
        self.data_dir = Path(data_dir)
        self._options = broker_options
        self._thread = threading.Thread(target=self._run, name="mainstem-broker", daemon=True)
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.ports: dict[str, int] = {}
        self.urls: dict[str, str] = {}

    def start(self, timeout: float = CAP_S) -> ThreadedBroker:
        """Run the broker; wait until it listens. A start that fails ends the wait at once
        (its error is raised here), so only a hung one waits the whole `timeout`: long, as
        a loaded machine takes many times the usual second."""
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError(f"mainstem broker did not start within {timeout} s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout: float = _STOP_TIMEOUT_S) -> None:
        if self._loop is not None and self._stop_requested is not None:
            self._loop.call_soon_threadsafe(self._stop_requested.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"mainstem broker did not stop within {timeout} s")

    def __enter__(self) -> ThreadedBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
        finally:
            self._started.set()

    async def _serve(self) -> None:
        from mainstem.server import Broker

        self._loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        async with Broker(self.data_dir, **self._options) as broker:
            self.ports = dict(broker.ports)
            self.urls = broker.urls
            self._started.set()
            await self._stop_requested.wait()


@pytest.fixture
def mainstem_server(tmp_path: Path) -> Iterator[ThreadedBroker]:
    """A broker in a background thread: 127.0.0.1, ephemeral ports, data in tmp_path."""
    with ThreadedBroker(tmp_path / "mainstem") as server:
        yield server


@pytest.fixture
def mainstem_cluster(tmp_path: Path) -> Iterator[Any]:
    """An etcd and three nodes on 127.0.0.1, ephemeral ports, data in tmp_path."""
    from mainstem.testing_cluster import LocalCluster

    with LocalCluster(tmp_path / "cluster") as cluster:
        yield cluster


if pytest_asyncio is not None:

    @pytest_asyncio.fixture
    async def mainstem_broker(tmp_path: Path) -> AsyncIterator[Broker]:
        """A running broker: 127.0.0.1, ephemeral ports, data in tmp_path."""
        from mainstem.server import Broker

        async with Broker(tmp_path / "mainstem") as broker:
            yield broker

else:

    @pytest.fixture
    def mainstem_broker() -> None:
        pytest.fail("the mainstem_broker fixture needs pytest-asyncio; "
                    "install it, or use the mainstem_server fixture")
