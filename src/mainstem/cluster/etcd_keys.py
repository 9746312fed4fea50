"""Every key the cluster keeps in etcd, and writing them.

Names become path segments percent-encoded (`/` included), so a namespace, a stream or a
node name of any characters is one segment of its key. A write the client waits for is tried
again while etcd is briefly away, then reported as a broker error the protocol answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import quote, unquote

from mainstem.broker.errors import BrokerError
from mainstem.cluster.etcd import EtcdError

ROOT = "/mainstem/"
WRITE_TRIES = 20
RETRY_S = 0.5

T = TypeVar("T")


def path(*parts: object) -> str:
    """The key of `parts` under ROOT, each part one segment."""
    return ROOT + "/".join(quote(str(part), safe="") for part in parts)


def prefix(*parts: object) -> str:
    """The prefix of every key below `parts`."""
    return path(*parts) + "/"


def segments(key: str) -> list[str]:
    """The decoded segments of a key under ROOT."""
    return [unquote(part) for part in key[len(ROOT):].split("/")]


async def written(call: Callable[[], Awaitable[T]]) -> T:
    """Run an etcd call, again while etcd does not answer; BrokerError if it never does."""
    for _ in range(WRITE_TRIES - 1):
        try:
            return await call()
        except EtcdError:
            await asyncio.sleep(RETRY_S)
    try:
        return await call()
    except EtcdError as error:
        raise BrokerError(f"the cluster's metadata store is unavailable: {error}") from None
