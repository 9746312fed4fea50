"""AMQP traffic relayed to the node where a queue is live."""
