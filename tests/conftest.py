"""Fixtures shared by every test folder.

`broker` is the package's own pytest fixture (`mainstem.testing.mainstem_broker`): a real
server on 127.0.0.1 with ephemeral ports and its data under tmp_path, so the suite runs on
the same fixture that mainstem's users get; `server` is the same broker on a thread of its
own (`mainstem_server`), for blocking clients (pika, urllib). A folder or a file that needs
another configuration defines its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mainstem.server import Broker
    from mainstem.testing import ThreadedBroker


@pytest.fixture
def broker(mainstem_broker: Broker) -> Broker:
    return mainstem_broker


@pytest.fixture
def server(mainstem_server: ThreadedBroker) -> ThreadedBroker:
    return mainstem_server
