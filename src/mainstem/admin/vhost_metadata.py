"""A virtual host's metadata over HTTP, as RabbitMQ 3.11+ shows and takes it: its
description, tags and default queue type (the type a queue declared without x-queue-type
gets), on GET and PUT /api/vhosts/{vhost} and in definitions files."""

from __future__ import annotations

from typing import Any

from mainstem.broker.catalog import VhostMetadata
from mainstem.broker.errors import InvalidArgument
from mainstem.broker.policies import CLASSIC, QUORUM, STREAM


def vhost_fields(metadata: VhostMetadata) -> dict[str, Any]:
    """A vhost's metadata as RabbitMQ shows it: a queue declared without a type is
    classic unless the vhost says otherwise."""
    return {**metadata.row(), "default_queue_type": metadata.default_queue_type or CLASSIC}


def vhost_metadata(body: dict[str, Any], current: VhostMetadata) -> VhostMetadata:
    """The metadata a PUT /api/vhosts body (or a definitions file's vhost) sets: its
    description, tags and default_queue_type; a field it leaves out stays as it was."""
    description = body.get("description", current.description)
    if not isinstance(description, str):
        raise InvalidArgument("description must be a string")
    queue_type = body.get("default_queue_type", current.default_queue_type)
    if queue_type not in (None, CLASSIC, QUORUM, STREAM):
        raise InvalidArgument(
            f"default_queue_type must be one of {CLASSIC}, {QUORUM} or {STREAM}")
    tags = tag_list(body["tags"]) if "tags" in body else current.tags
    return VhostMetadata(description, tags, queue_type)


def tag_list(value: object) -> tuple[str, ...]:
    """Tags as RabbitMQ takes them: a comma-separated string or a list of strings."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(t, str) for t in items):
        raise InvalidArgument("tags must be a comma-separated string or a list of strings")
    return tuple(tag.strip() for tag in items if tag.strip())
