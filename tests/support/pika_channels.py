"""pika channels for tests that drive a broker from blocking clients."""

from __future__ import annotations

from collections.abc import Iterator

import pika
from pika.adapters.blocking_connection import BlockingChannel


def pika_channel(port: int) -> Iterator[BlockingChannel]:
    """A channel of a new connection (as guest) to 127.0.0.1:`port`, its connection closed
    after: a fixture yields from it."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        yield connection.channel()
    finally:
        connection.close()
