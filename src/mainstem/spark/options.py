"""The data source's options, parsed and checked once at planning time: where the broker is,
which streams, offsets and limits.

Options mean what Kafka's Structured Streaming source/sink options mean: offsets travel as
JSON ``{"<stream>": {"<partition>": offset}}`` where -2 means earliest and -1 latest, or the
words ``earliest`` / ``latest`` for every partition; ``subscribe`` is ``stream``'s Kafka
name and ``topic`` its name on writes. An option this source does not know, or a value it
cannot use, fails the query before it starts, naming the option and listing the valid ones.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mainstem.client.stream import Endpoint, StreamClient, StreamClientError, Tls
from mainstem.formats.table_schema import BodySchema, SchemaError, parse_schema
from mainstem.spark.tiered import TierCredentials

if TYPE_CHECKING:
    from mainstem.admin.ctl import Client

EARLIEST, LATEST = -2, -1
DEFAULT_URL = "rabbitmq-stream://guest:guest@127.0.0.1:5552/%2F"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Kafka's default: 15m
ADMIN_PORT = 15672  # the management API lists the streams a pattern is matched against
NO_MATCH_STRATEGIES = ("error", "latest")  # startingOffsetsByTimestampStrategy, as Kafka's

CONNECTION_OPTIONS = ("url", "namespace", "username", "password", "passwordFile",
                      "ssl.cafile", "ssl.certfile", "ssl.keyfile", "ssl.checkHostname")
READ_OPTIONS = (*CONNECTION_OPTIONS, "stream", "subscribe", "streamPattern", "subscribePattern",
                "adminUrl", "adminPort", "startingOffsets", "endingOffsets",
                "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
                "startingOffsetsByTimestampStrategy", "startingTimestamp",
                "endingTimestamp", "minPartitions", "maxRecordsPerPartition",
                "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
                "failOnDataLoss", "includeHeaders", "tier.direct", "tier.accessKeyId",
                "tier.secretAccessKey", "tier.instanceCredentials", "bodySchema")
WRITE_OPTIONS = (*CONNECTION_OPTIONS, "stream", "topic", "checkpointLocation", "createStream",
                 "maxAge", "maxBytes")
def _body_schema(get: Callable[[str], str | None]) -> BodySchema | None:
    """Option bodySchema: the JSON bodies' fields as typed columns (the shape of a table
    stream's x-table-schema, formats/table_schema.py)."""
    value = get("bodySchema")
    if value is None:
        return None
    try:
        return parse_schema(value)
    except SchemaError as error:
        raise SourceError(f"option 'bodySchema': {error}") from None


_DURATION = re.compile(r"(\d+)\s*(ms|s|m|min|h|d)?")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}

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
class Start:
    """One side (``starting``/``ending``) of a read, in Kafka's order of precedence: a time
    for every partition, a time per partition, then offsets (``earliest``/``latest``, or
    one per partition)."""

    side: str = "starting"
    timestamp: int | None = None
    by_timestamp: OffsetMap | None = None
    word: str | None = None
    by_offset: OffsetMap | None = None
    latest_on_no_match: bool = False  # startingOffsetsByTimestampStrategy=latest

    def given(self) -> list[str]:
        """The options that set this side, by name."""
        values = (("Timestamp", self.timestamp), ("OffsetsByTimestamp", self.by_timestamp),
                  ("Offsets", self.word or self.by_offset))
        return [f"{self.side}{suffix}" for suffix, value in values if value is not None]


@dataclass(frozen=True)
class SourceOptions:
    endpoint: Endpoint  # its password is left out of repr: options may be logged
    streams: tuple[str, ...]
    fail_on_data_loss: bool = True
    max_records_per_partition: int | None = None
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    include_headers: bool = True
    starting: Start = Start("starting")
    ending: Start = Start("ending")
    create_stream: bool = False  # writes: create missing target streams with these arguments
    stream_arguments: tuple[tuple[str, str], ...] = ()
    pattern: str | None = None  # reads: every stream whose whole name matches, as they come
    pattern_option: str = "streamPattern"  # as the user wrote it, for messages
    admin_url: str | None = field(default=None, repr=False)  # it may hold credentials
    admin_port: int = ADMIN_PORT  # without admin_url: the management API on the url's host
    tier_direct: bool = True  # tiered ranges read from the object store, not the broker
    tier_credentials: TierCredentials | None = field(default=None, repr=False)
    tier_instance_credentials: bool = False  # obstore may ask the cloud's instance metadata
    body_schema: BodySchema | None = None  # typed columns from JSON bodies, as a table's

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """The options of a read."""
        get = _checked(options, READ_OPTIONS)
        named, (pattern_option, pattern) = get("stream") or get("subscribe"), _pattern(get)
        if named and pattern:
            raise SourceError("give 'stream' (or 'subscribe') or 'streamPattern' (or "
                              "'subscribePattern'), not both")
        if get("adminUrl") is not None and get("adminPort") is not None:
            raise SourceError("give option 'adminUrl' or 'adminPort', not both")
        return cls(
            _endpoint(get), _streams(named, "stream") if not pattern else (),
            pattern=pattern, pattern_option=pattern_option, admin_url=get("adminUrl"),
            admin_port=_positive(get, "adminPort") or ADMIN_PORT,
            fail_on_data_loss=_flag(get, "failOnDataLoss", True),
            max_records_per_partition=_positive(get, "maxRecordsPerPartition"),
            min_partitions=_positive(get, "minPartitions"),
            max_offsets_per_trigger=_positive(get, "maxOffsetsPerTrigger"),
            min_offsets_per_trigger=_positive(get, "minOffsetsPerTrigger"),
            max_trigger_delay_ms=_duration_ms(get, "maxTriggerDelay"),
            include_headers=_flag(get, "includeHeaders", True),
            starting=_start(get, "starting"), ending=_start(get, "ending"),
            tier_direct=_flag(get, "tier.direct", True), tier_credentials=_tier_keys(get),
            tier_instance_credentials=_flag(get, "tier.instanceCredentials", False),
            body_schema=_body_schema(get))

    @classmethod
    def parse_write(cls, options: Mapping[str, str]) -> SourceOptions:
        """The options of a write: the stream may come from each row instead."""
        get = _checked(options, WRITE_OPTIONS)
        stream = get("stream") or get("topic")
        create = _flag(get, "createStream", False)
        arguments = _stream_arguments(get)
        if arguments and not create:
            raise SourceError("options 'maxAge' and 'maxBytes' apply with createStream=true")
        return cls(_endpoint(get), _streams(stream, "stream") if stream else (),
                   create_stream=create, stream_arguments=arguments)

    def connect(self) -> StreamClient:
        return StreamClient(self.endpoint)

    def admin(self) -> Client:
        """The management API's client, at `adminUrl`, else on the url's host at
        `adminPort`, with the stream connection's user."""
        # Imported here: only the driver asks it, executors never load the admin client.
        from mainstem.admin.ctl import Client

        return Client(self.admin_url or f"http://{self.endpoint.host}:{self.admin_port}",
                      self.endpoint.user, self.endpoint.password)

    def current_streams(self) -> tuple[str, ...]:
        """The streams named, or those matching the pattern now (new ones join as Kafka's
        subscribePattern picks up new topics)."""
        if self.pattern is None:
            return self.streams
        admin = self.admin()
        try:
            listed = admin.call("GET", "/api/streams")
        except Exception as exc:
            raise SourceError(
                f"option {self.pattern_option!r}: cannot list the streams through the "
                f"management API at {admin.url}: {_reason(exc)}; give its address with option "
                "'adminUrl', or its port on the url's host with 'adminPort'") from None
        matcher = re.compile(self.pattern)
        return tuple(sorted(row["name"] for row in listed
                            if row["vhost"] == self.endpoint.vhost and
                            matcher.fullmatch(row["name"])))


def _reason(exc: Exception) -> str:
    """Why a call failed, without urllib's wrapping (``<urlopen error ...>``)."""
    reason = getattr(exc, "reason", None)
    if isinstance(reason, OSError):
        return reason.strerror or str(reason)
    return str(reason or exc)


Getter = Callable[[str], str | None]


def _checked(options: Mapping[str, str], valid: tuple[str, ...]) -> Getter:
    """A case-insensitive getter, after refusing options that are not in `valid`."""
    known = {name.lower(): name for name in valid}
    for name in options:  # Spark hands them over lower-cased
        if name.lower() not in known:
            close = difflib.get_close_matches(name.lower(), known, n=1)
            hint = f" (did you mean {known[close[0]]!r}?)" if close else ""
            raise SourceError(f"unknown option {name!r}{hint}; valid options are: "
                              f"{', '.join(valid)}")
    lowered = {k.lower(): v for k, v in options.items()}
    return lambda name: lowered.get(name.lower())


def _endpoint(get: Getter) -> Endpoint:
    """The URL, with what the other connection options change: the namespace (virtual
    host), the user, the password (given, or read from a file so that it stays out of job
    code), and TLS settings (which need a ``rabbitmq-stream+tls://`` URL)."""
    endpoint = Endpoint.parse(get("url") or DEFAULT_URL)
    changes: dict[str, object] = {}
    if get("namespace") is not None:
        changes["vhost"] = get("namespace")
    if get("username") is not None:
        changes["user"] = get("username")
    password = _password(get)
    if password is not None:
        changes["password"] = password
    tls = _tls(get)
    if tls is not None:
        if endpoint.tls is None:
            raise SourceError("the ssl.* options need a rabbitmq-stream+tls:// url")
        changes["tls"] = tls
    return dataclasses.replace(endpoint, **changes)  # type: ignore[arg-type]


def _password(get: Getter) -> str | None:
    given, path = get("password"), get("passwordFile")
    if given is not None and path is not None:
        raise SourceError("give option 'password' or 'passwordFile', not both")
    if path is None:
        return given
    try:
        return Path(path).read_text().rstrip("\r\n")
    except OSError as exc:
        raise SourceError(f"option 'passwordFile': cannot read {path!r}: "
                          f"{exc.strerror}") from None


def _tls(get: Getter) -> Tls | None:
    files = {name: get(f"ssl.{name}") for name in ("cafile", "certfile", "keyfile")}
    if all(value is None for value in files.values()) and get("ssl.checkHostname") is None:
        return None
    for name, path in files.items():
        if path is not None and not Path(path).is_file():
            raise SourceError(f"option 'ssl.{name}': no file {path!r}")
    return Tls(**files, check_hostname=_flag(get, "ssl.checkHostname", True))


def _tier_keys(get: Getter) -> TierCredentials | None:
    """The object store's keys for the executors' tier reads; without them obstore reads the
    AWS_* environment (a directory tier needs none)."""
    key, secret = get("tier.accessKeyId"), get("tier.secretAccessKey")
    if (key is None) != (secret is None):
        raise SourceError("give options 'tier.accessKeyId' and 'tier.secretAccessKey' together")
    return None if key is None or secret is None else TierCredentials(key, secret)


def _streams(value: str | None, name: str) -> tuple[str, ...]:
    streams = tuple(s.strip() for s in (value or "").split(",") if s.strip())
    if not streams:
        raise SourceError(f"option {name!r} (or Kafka's 'subscribe'; or 'streamPattern') is "
                          "required: one stream or a comma list")
    return streams


def _pattern(get: Getter) -> tuple[str, str | None]:
    """The pattern option as the user named it, and its regular expression if given."""
    name = "streamPattern" if get("streamPattern") is not None else "subscribePattern"
    pattern = get(name)
    if pattern is None:
        return name, None
    try:
        re.compile(pattern)
    except re.error as exc:
        raise SourceError(f"option {name!r} is not a regular expression: {exc}") from None
    return name, pattern


def _flag(get: Getter, name: str, default: bool) -> bool:
    value = get(name)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise SourceError(f"option {name!r} must be true or false, got {value!r}")
    return value.strip().lower() == "true"


def _positive(get: Getter, name: str) -> int | None:
    value = get(name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise SourceError(f"option {name!r} must be a positive integer, got {value!r}")
    return number


def _stream_arguments(get: Getter) -> tuple[tuple[str, str], ...]:
    """Retention of a stream a write creates, as the stream protocol's arguments (the
    broker checks the age: ``7D``, ``12h``, ...)."""
    arguments = []
    if get("maxAge") is not None:
        arguments.append(("max-age", str(get("maxAge")).strip()))
    max_bytes = _positive(get, "maxBytes")
    if max_bytes is not None:
        arguments.append(("max-length-bytes", str(max_bytes)))
    return tuple(arguments)


def _timestamp(get: Getter, name: str) -> int | None:
    value = get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise SourceError(f"option {name!r} must be milliseconds since the epoch, got "
                          f"{value!r}") from None


def _duration_ms(get: Getter, name: str) -> int:
    """Spark's time strings: ``500ms``, ``30s``, ``15m``, ``1h``, ``1d`` (a bare number is ms)."""
    value = get(name)
    if value is None:
        return DEFAULT_MAX_TRIGGER_DELAY_MS
    match = _DURATION.fullmatch(value.strip().lower())
    if not match:
        raise SourceError(f"option {name!r} must be a duration such as 500ms, 30s, 15m, 1h or "
                          f"1d, got {value!r}")
    return int(match[1]) * _UNIT_MS[match[2] or "ms"]


def _start(get: Getter, side: str) -> Start:
    """One side (``starting``/``ending``) of the range: its options, checked."""
    offsets = get(f"{side}Offsets")
    word = offsets.strip() if offsets is not None and offsets.strip() in (
        "earliest", "latest") else None
    by_offset = _offset_json(offsets, f"{side}Offsets", EARLIEST) \
        if offsets is not None and word is None else None
    by_timestamp = get(f"{side}OffsetsByTimestamp")
    return Start(side, _timestamp(get, f"{side}Timestamp"),
                 _offset_json(by_timestamp, f"{side}OffsetsByTimestamp", 0)
                 if by_timestamp is not None else None,
                 word, by_offset, side == "starting" and _no_match_strategy(get) == "latest")


def _no_match_strategy(get: Getter) -> str:
    name = "startingOffsetsByTimestampStrategy"
    value = (get(name) or "error").strip().lower()
    if value not in NO_MATCH_STRATEGIES:
        raise SourceError(f"option {name!r} must be error or latest, got {get(name)!r}")
    return value


def _offset_json(text: str, name: str, least: int) -> OffsetMap:
    """``{"stream": {"partition": number}}``: partitions as numbers in strings, numbers
    `least` or more; partitions are keyed by their canonical number."""
    problem: str | None
    try:
        given = json.loads(text)
    except json.JSONDecodeError as exc:
        given, problem = None, f"not JSON: {exc.msg} at character {exc.pos}"
    else:
        problem = _offset_json_problem(given, least)
    if problem is not None:
        words = "" if name.endswith("ByTimestamp") else "earliest, latest or "
        raise SourceError(f"option {name!r} must be {words}JSON such as "
                          f"{{\"stream\": {{\"0\": 42}}}}, got {text!r} ({problem})")
    return {stream: {str(int(key)): value for key, value in parts.items()}
            for stream, parts in given.items()}


def _offset_json_problem(given: object, least: int) -> str | None:
    if not isinstance(given, dict) or not given:
        return "an object of streams is needed"
    for stream, parts in given.items():
        if not isinstance(parts, dict) or not parts:
            return f"stream {stream!r} needs an object of partitions"
        for key, value in parts.items():
            if not (key.isascii() and key.isdigit()):
                return f"partition {key!r} of stream {stream!r} is not a partition number"
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                return f"{value!r} for stream {stream!r} partition {key} is not a number " \
                       f"of {least} or more"
    return None


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
        except StreamClientError as exc:  # in words: "stream 'x' does not exist", ...
            raise SourceError(str(exc)) from None
        found.append(TopicPartition(stream, 0, stream))
    return found


def resolve(client: StreamClient, side: Start, default: int, partitions: list[TopicPartition],
            ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """One offset per partition for a side of the range: a real offset, or EARLIEST/LATEST.
    A time maps to the first offset of the first chunk at or after it; when there is none,
    an ending side (or the latest strategy) takes the end, a starting side fails."""
    if side.timestamp is not None:
        name, times = f"{side.side}Timestamp", dict.fromkeys(partitions, side.timestamp)
    elif side.by_timestamp is not None:
        name = f"{side.side}OffsetsByTimestamp"
        _check_covers(side.by_timestamp, partitions, name)
        times = {tp: side.by_timestamp[tp.stream][tp.key] for tp in partitions}
    elif side.by_offset is not None:
        _check_covers(side.by_offset, partitions, f"{side.side}Offsets")
        return {tp: side.by_offset[tp.stream][tp.key] for tp in partitions}
    else:
        value = {None: default, "earliest": EARLIEST, "latest": LATEST}[side.word]
        return dict.fromkeys(partitions, value)
    return {tp: _offset_at(client, side, name, tp, ms, ends[tp]) for tp, ms in times.items()}


def _offset_at(client: StreamClient, side: Start, name: str, tp: TopicPartition, ms: int,
               end: int) -> int:
    """The offset a time maps to (the end when no record is that recent), or, for a start
    with the default strategy, an error when there is none (as Kafka's source)."""
    offset = client.offset_for_timestamp(tp.physical, ms)
    if offset < end or side.side == "ending" or side.latest_on_no_match:
        return offset
    raise SourceError(f"option {name!r}: no record of stream {tp.stream!r} partition "
                      f"{tp.index} is at or after {ms} ms; set option "
                      "startingOffsetsByTimestampStrategy=latest to start at its end instead")


def _check_covers(given: OffsetMap, partitions: list[TopicPartition], name: str) -> None:
    """As Kafka's source: offsets given per partition name exactly the partitions read."""
    read: dict[str, set[str]] = {}
    for tp in partitions:
        read.setdefault(tp.stream, set()).add(tp.key)
    for stream, parts in given.items():
        if stream not in read:
            raise SourceError(f"option {name!r} names stream {stream!r}, which the query does "
                              f"not read (it reads {', '.join(map(repr, read))})")
        unknown = sorted(set(parts) - read[stream], key=int)
        if unknown:
            raise SourceError(f"option {name!r} names partition {unknown[0]} of stream "
                              f"{stream!r}, which has partitions 0 to {len(read[stream]) - 1}")
    missing = [f"{tp.stream!r} partition {tp.index}" for tp in partitions
               if tp.key not in given.get(tp.stream, {})]
    if missing:
        raise SourceError(f"option {name!r} must name every partition the query reads, as "
                          "Kafka's source requires (-2 for earliest, -1 for latest); missing: "
                          f"{', '.join(missing)}")


def to_offset_map(offsets: Mapping[TopicPartition, int]) -> OffsetMap:
    result: OffsetMap = {}
    for tp, offset in offsets.items():
        result.setdefault(tp.stream, {})[tp.key] = offset
    return result


def from_offset_map(offsets: OffsetMap, partitions: list[TopicPartition]
                    ) -> dict[TopicPartition, int]:
    return {tp: offsets[tp.stream][tp.key] for tp in partitions
            if tp.key in offsets.get(tp.stream, {})}
