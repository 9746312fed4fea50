"""mainstem: a persistent message streaming broker with one durable log under several protocols."""

__version__ = "0.1.0"

from mainstem.server import Broker

__all__ = ["Broker", "__version__"]
