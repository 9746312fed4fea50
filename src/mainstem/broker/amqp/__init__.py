"""AMQP 0-9-1 semantics: classic queues (with journals and paging), exchanges and
routing, and their durable definitions in the catalog."""
