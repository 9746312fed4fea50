"""Stored formats: the Osiris chunk layout (`osiris`), AMQP 1.0 messages (`amqp10`) and
their AMQP 0-9-1 view (`amqp091_mapping`). Each is imported on its own, so that a
client reading chunks loads no message codec it does not use."""
