"""AMQP 0-9-1's queueing model on the log engine: classic queues with their journals,
stream queues (streams of the namespace), and virtual hosts that route between them."""

from mainstem.broker.amqp.queues.arguments import QueueArguments, parse_queue_arguments
from mainstem.broker.amqp.queues.manager import QueueManager
from mainstem.broker.amqp.queues.message import (
    PropertiesCodec,
    QueueMessage,
    register_properties_codec,
)
from mainstem.broker.amqp.queues.queue import ClassicQueue, Consumer
from mainstem.broker.amqp.queues.virtual_host import PublishOutcome, ResourceLocked, VirtualHost

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
