"""Protocol-neutral routing semantics of AMQP 0-9-1 exchanges (RabbitMQ 4.x).

Works on plain values, a routing key and already-decoded headers, and answers
with destination names; the AMQP 0-9-1 connection maps its frames onto it.
"""

from mainstem.broker.amqp.routing.exchanges import DEFAULT_EXCHANGE, PREDECLARED, ExchangeGraph
from mainstem.broker.amqp.routing.headers import HeadersMatcher
from mainstem.broker.amqp.routing.matchers import DirectMatcher, FanoutMatcher, Matcher
from mainstem.broker.amqp.routing.model import (
    Binding,
    Destination,
    DestinationKind,
    Exchange,
    ExchangeType,
)
from mainstem.broker.amqp.routing.topic import TopicMatcher, split_topic_key

__all__ = [
    "DEFAULT_EXCHANGE",
    "PREDECLARED",
    "Binding",
    "Destination",
    "DestinationKind",
    "DirectMatcher",
    "Exchange",
    "ExchangeGraph",
    "ExchangeType",
    "FanoutMatcher",
    "HeadersMatcher",
    "Matcher",
    "TopicMatcher",
    "split_topic_key",
]
