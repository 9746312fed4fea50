"""mainstem: a persistent message streaming broker with one durable log under several protocols."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mainstem import compiled

__version__ = "0.1.0"

__all__ = ["Broker", "__version__"]

compiled.choose()  # before any compiled module is imported

if TYPE_CHECKING:
    from mainstem.server import Broker


def __getattr__(name: str) -> object:
    # Imported on first use: the clients (Spark executors) import mainstem.client.* and must
    # not load the server and the broker core with it.
    if name == "Broker":
        from mainstem.server import Broker

        return Broker
    raise AttributeError(f"module 'mainstem' has no attribute {name!r}")
