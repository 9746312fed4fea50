"""The data source's options, parsed once: where the broker is, which streams, and offsets.

Offsets travel as Kafka's do: JSON ``{"<stream>": {"<partition>": offset}}`` where -2 means
earliest and -1 latest, or the words ``earliest`` / ``latest`` for every partition.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from mainstem.client.stream import Endpoint, StreamClient, StreamClientError

EARLIEST, LATEST = -2, -1
DEFAULT_URL = "rabbitmq-stream://guest:guest@127.0.0.1:5552/%2F"

OffsetMap = dict[str, dict[str, int]]  # stream -> partition index (as a string) -> offset


class SourceError(ValueError):
    """Bad options, or data the options ask for that is gone."""


@dataclass(frozen=True)
class TopicPartition:
    stream: str  # as the user named it (a super stream's name for its partitions)
    index: int
    physical: str  # the stream that holds this partition's data

    @property
    def key(self) -> str:
        return str(self.index)


@dataclass(frozen=True)
class SourceOptions:
    url: str
    streams: tuple[str, ...]
    fail_on_data_loss: bool
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, need_stream: bool = True) -> SourceOptions:
        get = _lower(options)
        url = get("url") or DEFAULT_URL
        namespace = get("namespace")
        if namespace is not None:
            endpoint = Endpoint.parse(url)
            url = (f"rabbitmq-stream://{quote(endpoint.user)}:{quote(endpoint.password)}@"
                   f"{endpoint.host}:{endpoint.port}/{quote(namespace, safe='')}")
        streams = tuple(s.strip() for s in (get("stream") or "").split(",") if s.strip())
        if need_stream and not streams:
            raise SourceError("option 'stream' is required (one stream or a comma list)")
        return cls(url, streams, _flag(get("failondataloss"), True),
                   _positive(get("maxrecordsperpartition"), "maxRecordsPerPartition"),
                   _positive(get("maxoffsetspertrigger"), "maxOffsetsPerTrigger"))

    def connect(self) -> StreamClient:
        return StreamClient.connect(self.url)


def _lower(options: Mapping[str, str]):
    lowered = {k.lower(): v for k, v in options.items()}
    return lowered.get


def _flag(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise SourceError(f"expected true or false, got {value!r}")
    return value.lower() == "true"


def _positive(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise SourceError(f"option {name} must be a positive integer, got {value!r}") from None
    if number <= 0:
        raise SourceError(f"option {name} must be a positive integer, got {value!r}")
    return number


def topic_partitions(client: StreamClient, streams: tuple[str, ...]) -> list[TopicPartition]:
    """Every partition of the streams; a super stream stands for its partition streams."""
    found = []
    for stream in streams:
        members = client.partitions(stream)
        if members:
            found += [TopicPartition(stream, i, name) for i, name in enumerate(members)]
            continue
        try:
            client.offsets(stream)
        except StreamClientError:
            raise SourceError(f"stream {stream!r} does not exist") from None
        found.append(TopicPartition(stream, 0, stream))
    return found


def parse_offsets(text: str | None, default: int, partitions: list[TopicPartition]
                  ) -> dict[TopicPartition, int]:
    """Resolve ``earliest``/``latest``/JSON to one (possibly symbolic) offset per partition."""
    if text is None or text.strip() in ("earliest", "latest"):
        word = (text or "").strip()
        value = default if not word else EARLIEST if word == "earliest" else LATEST
        return dict.fromkeys(partitions, value)
    try:
        given = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"offsets must be earliest, latest or JSON: {exc}") from None
    if not isinstance(given, dict):
        raise SourceError("offsets JSON must map streams to {partition: offset}")
    resolved = {}
    for tp in partitions:
        per_stream = given.get(tp.stream, {})
        value = per_stream.get(tp.key, default) if isinstance(per_stream, dict) else default
        if not isinstance(value, int) or value < EARLIEST:
            raise SourceError(f"bad offset {value!r} for {tp.stream} partition {tp.index}")
        resolved[tp] = value
    return resolved


def to_offset_map(offsets: Mapping[TopicPartition, int]) -> OffsetMap:
    result: OffsetMap = {}
    for tp, offset in offsets.items():
        result.setdefault(tp.stream, {})[tp.key] = offset
    return result


def from_offset_map(offsets: OffsetMap, partitions: list[TopicPartition]
                    ) -> dict[TopicPartition, int]:
    return {tp: offsets[tp.stream][tp.key] for tp in partitions
            if tp.key in offsets.get(tp.stream, {})}
