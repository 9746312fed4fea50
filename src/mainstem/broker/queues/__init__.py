"""AMQP 0-9-1's queueing model on the log engine: classic queues with their journals,
stream queues (streams of the namespace), and virtual hosts that route between them."""

from mainstem.broker.queues.arguments import QueueArguments, parse_queue_arguments
from mainstem.broker.queues.manager import QueueManager
from mainstem.broker.queues.message import (
    PropertiesCodec,
    QueueMessage,
    register_properties_codec,
)
from mainstem.broker.queues.queue import ClassicQueue, Consumer
from mainstem.broker.queues.virtual_host import PublishOutcome, ResourceLocked, VirtualHost

__all__ = [
    "ClassicQueue",
    "Consumer",
    "PropertiesCodec",
    "PublishOutcome",
    "QueueArguments",
    "QueueManager",
    "QueueMessage",
    "ResourceLocked",
    "VirtualHost",
    "parse_queue_arguments",
    "register_properties_codec",
]
