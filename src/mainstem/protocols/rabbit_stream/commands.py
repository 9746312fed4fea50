"""What stream commands mean to the broker: its errors as response codes, the protocol's
stream arguments as the broker's, offset specs as offsets. Pure functions of their inputs.
"""

from __future__ import annotations

from typing import Any

from mainstem.broker.errors import (
    AccessRefused,
    AlreadyExists,
    BrokerError,
    NotFound,
    StorageFailed,
)
from mainstem.broker.stream_service import PartitionService
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream.constants import OffsetType, ResponseCode

# Stream-protocol argument names (no "x-" prefix) -> the broker's stream arguments.
STREAM_ARGUMENTS = {
    "max-length-bytes": "x-max-length-bytes",
    "max-age": "x-max-age",
    "stream-max-segment-size-bytes": "x-stream-max-segment-size-bytes",
    "tier-local-max-bytes": "x-tier-local-max-bytes",
    "tier-local-max-age": "x-tier-local-max-age",
    "table": "x-table",
    "table-schema": "x-table-schema",
}
INTEGER_ARGUMENTS = {"x-max-length-bytes", "x-stream-max-segment-size-bytes",
                     "x-tier-local-max-bytes"}


class CommandFailed(Exception):
    """A command refused with this response code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def response_code(error: BrokerError) -> ResponseCode:
    """The stream protocol's code for a broker error."""
    if isinstance(error, NotFound):
        return ResponseCode.STREAM_DOES_NOT_EXIST
    if isinstance(error, AccessRefused):
        return ResponseCode.ACCESS_REFUSED
    if isinstance(error, AlreadyExists):
        return ResponseCode.STREAM_ALREADY_EXISTS
    if isinstance(error, StorageFailed):  # the disk refused the catalog's write
        return ResponseCode.INTERNAL_ERROR
    return ResponseCode.PRECONDITION_FAILED


def stream_arguments(arguments: dict[str, str]) -> dict[str, Any]:
    """Retention arguments in broker form; others are accepted and ignored, as RabbitMQ does."""
    converted: dict[str, Any] = {}
    for name, value in arguments.items():
        key = STREAM_ARGUMENTS.get(name, name if name.startswith("x-") else None)
        if key is None:
            continue
        if key in INTEGER_ARGUMENTS:
            try:
                converted[key] = int(value)
            except ValueError:
                raise CommandFailed(ResponseCode.PRECONDITION_FAILED) from None
        else:
            converted[key] = value
    return converted


def resolve_offset(partition: PartitionService, spec: f.OffsetSpec) -> int:
    """The offset a spec names in this partition, now."""
    kind = spec.type
    if kind == OffsetType.FIRST:
        return partition.first_offset
    if kind == OffsetType.LAST:
        last = partition.committed_chunk_id
        return last if last >= 0 else partition.committed_offset
    if kind == OffsetType.OFFSET:
        return spec.value
    if kind == OffsetType.TIMESTAMP:
        return partition.offset_for_timestamp(spec.value)
    return partition.committed_offset  # NEXT, and NONE as "no preference"
