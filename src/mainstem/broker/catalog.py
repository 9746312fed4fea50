"""The durable catalog of the broker: namespaces, streams, users, permissions and topic
permissions, policies, limits, offsets.

One SQLite file in WAL mode, the broker's only metadata store: the other stores keep
their tables in it too (AMQP exchanges, queues and bindings, Iggy ids and consumer groups,
segment attributes, binders), each through a connection of its own (`Catalog.connect`).
Its schema has one version; each migration below is one step of it, run in a
transaction of its own with the version bump, so an interrupted upgrade resumes.

Metadata changes are committed with synchronous=FULL so a declared stream or a created
user survives a power cut. Consumer offsets are written far more often (per chunk),
through a second connection with synchronous=NORMAL: a commit then survives a process
crash, and after a power cut an offset may fall back a little, which at-least-once
consumers tolerate.

A write the disk refuses (full, a file too big, an I/O error) raises StorageFailed on
every connection to the catalog (`_CatalogConnection`), so each protocol answers it with
its own error and keeps the client's connection; SQLite has rolled the change back.

Methods are synchronous: SQLite answers in microseconds, so the event loop calls
them directly. A lock lets a thread (e.g. asyncio.to_thread) use the catalog too. The
`..._everywhere` methods, for a change a client is answered for, are async: in a cluster
they return once the cluster's store holds the change and this node has taken it from
there (see `ChangeNotifier._everywhere`). A set of them made all or none (a definitions
import) is `apply_changes_everywhere`: one transaction alone; in a cluster, etcd first one
by one, and those made put back on a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from mainstem.broker import legacy
from mainstem.broker.errors import (
    AlreadyExists,
    BrokerError,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    StorageFailed,
)
from mainstem.broker.fence import Fence, FencedOut
from mainstem.broker.policies import KINDS as POLICY_KINDS
from mainstem.broker.policies import Policy, PolicyBook, parse_policy
from mainstem.log.tier_upload import TieredRecord, segment_key_of

log = logging.getLogger("mainstem.broker")

DEFAULT_NAMESPACE = "/"
MAX_NAME_BYTES = 255
# Partition indexes are 32-bit signed on the wire protocols; offsets fit SQLite's int64.
MAX_PARTITIONS = 2**31 - 1
MAX_OFFSET = 2**63 - 1


class ChangeListener(Protocol):
    """Told (kind, key, row): "namespace", "user", "permission", "offset", "policy",
    "operator_policy", "vhost_limit" or "user_limit" (and the kinds of the other stores,
    see `broker.replicated`); row None when deleted. In a cluster it returns what
    completes once the cluster's store has it. `held_here` False: a change not made here
    yet, made here (through `Catalog.apply`, as on every node) once the cluster's store
    holds it."""

    def __call__(self, kind: str, key: tuple[Any, ...], row: dict[str, Any] | None, *,
                 held_here: bool = True) -> Awaitable[None] | None: ...


# A change made only under a fence: True once the cluster holds it, False if the fence no
# longer held (nothing changed). See broker.fence.
FencedListener = Callable[[str, tuple[Any, ...], dict[str, Any] | None, Fence],
                          Awaitable[bool]]
TIERED_SEGMENT = "tiered_segment"
TOPIC_PERMISSION = "topic_permission"
# One change of a catalog kind, as `ChangeListener` is told it: (kind, key, row or None).
Change = tuple[str, tuple[Any, ...], dict[str, Any] | None]
TABLE_FILE = "table_file"
TABLE_HEAD = "table_head"
SHARE_WAIT_S = 30.0  # a client's answer waits this long for the cluster's store

Migration = Callable[[sqlite3.Connection, Path], None]  # (connection, data directory)


def _script(sql: str) -> Migration:
    """A migration of plain SQL, run a statement at a time: executescript would commit the
    migration's transaction first."""
    def run(db: sqlite3.Connection, _directory: Path) -> None:
        statement = ""
        for line in sql.splitlines(keepends=True):
            statement += line
            if sqlite3.complete_statement(statement):
                db.execute(statement)
                statement = ""

    return run


# Migration N (1-based) brings a catalog from user_version N-1 to N.
_MIGRATIONS: tuple[Migration, ...] = (
    _script("""
    CREATE TABLE namespaces (
        name TEXT PRIMARY KEY,
        created_at REAL NOT NULL
    );
    CREATE TABLE streams (
        namespace TEXT NOT NULL REFERENCES namespaces (name) ON DELETE CASCADE,
        name TEXT NOT NULL,
        partitions INTEGER NOT NULL CHECK (partitions >= 1),
        arguments TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (namespace, name)
    );
    CREATE TABLE users (
        name TEXT PRIMARY KEY,
        password_hash TEXT NOT NULL,
        tags TEXT NOT NULL
    );
    CREATE TABLE permissions (
        user TEXT NOT NULL REFERENCES users (name) ON DELETE CASCADE,
        namespace TEXT NOT NULL REFERENCES namespaces (name) ON DELETE CASCADE,
        configure TEXT NOT NULL,
        write TEXT NOT NULL,
        read TEXT NOT NULL,
        PRIMARY KEY (user, namespace)
    );
    CREATE INDEX permissions_by_namespace ON permissions (namespace);
    CREATE TABLE offsets (
        namespace TEXT NOT NULL,
        stream TEXT NOT NULL,
        partition INTEGER NOT NULL,
        reference TEXT NOT NULL,
        stored_offset INTEGER NOT NULL,
        PRIMARY KEY (namespace, stream, partition, reference),
        FOREIGN KEY (namespace, stream) REFERENCES streams (namespace, name) ON DELETE CASCADE
    );
    """),
    # 2: AMQP 0-9-1 durable objects (broker/amqp/metadata.py). Arguments are field tables
    # as typed JSON; rows keep their declaration order (rowid).
    _script("""
    CREATE TABLE amqp_exchanges (
        namespace TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL,
        durable INTEGER NOT NULL, auto_delete INTEGER NOT NULL, internal INTEGER NOT NULL,
        arguments TEXT NOT NULL,
        PRIMARY KEY (namespace, name)
    );
    CREATE TABLE amqp_queues (
        namespace TEXT NOT NULL, name TEXT NOT NULL, auto_delete INTEGER NOT NULL,
        arguments TEXT NOT NULL,
        PRIMARY KEY (namespace, name)
    );
    CREATE TABLE amqp_bindings (
        namespace TEXT NOT NULL, source TEXT NOT NULL, destination TEXT NOT NULL,
        destination_kind TEXT NOT NULL, routing_key TEXT NOT NULL, arguments TEXT NOT NULL
    );
    CREATE INDEX amqp_bindings_by_namespace ON amqp_bindings (namespace);
    """),
    # 3: Iggy's numeric ids of namespaces and streams, and its consumer groups
    # (broker/iggy/model.py).
    _script("""
    CREATE TABLE iggy_ids (
        kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, id INTEGER NOT NULL,
        PRIMARY KEY (kind, namespace, name), UNIQUE (kind, namespace, id)
    );
    CREATE TABLE iggy_groups (
        namespace TEXT NOT NULL, topic TEXT NOT NULL, id INTEGER NOT NULL, name TEXT NOT NULL,
        PRIMARY KEY (namespace, topic, id)
    );
    """),
    # 4: sealing and logical truncation of segments (broker/segment_store.py).
    _script("""
    CREATE TABLE segment_states (
        namespace TEXT NOT NULL, stream TEXT NOT NULL, number INTEGER NOT NULL,
        sealed INTEGER NOT NULL DEFAULT 0, truncated INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (namespace, stream, number)
    );
    """),
    # 5: binders, their documents (rows of a storage the binder points to), projection
    # positions, bulk loads, and storages waiting for garbage collection (broker/events/binders.py).
    _script("""
    CREATE TABLE binders (
        namespace TEXT NOT NULL, name TEXT NOT NULL, storage TEXT NOT NULL,
        PRIMARY KEY (namespace, name)
    );
    CREATE TABLE binder_documents (
        namespace TEXT NOT NULL, storage TEXT NOT NULL, id TEXT NOT NULL, body BLOB NOT NULL,
        PRIMARY KEY (namespace, storage, id)
    );
    CREATE TABLE binder_projections (
        namespace TEXT NOT NULL, name TEXT NOT NULL, definition BLOB NOT NULL,
        position INTEGER NOT NULL, PRIMARY KEY (namespace, name)
    );
    CREATE TABLE binder_loads (
        id TEXT PRIMARY KEY, namespace TEXT NOT NULL, binder TEXT NOT NULL
    );
    CREATE TABLE binder_garbage (
        namespace TEXT NOT NULL, storage TEXT NOT NULL, PRIMARY KEY (namespace, storage)
    );
    """),
    # 6: the content of the stores that had files of their own (broker/legacy.py).
    legacy.import_old_stores,
    # 7: policies and operator policies (broker/policies.py); kind is "policy" or
    # "operator_policy", definition a JSON object.
    _script("""
    CREATE TABLE policies (
        kind TEXT NOT NULL,
        namespace TEXT NOT NULL REFERENCES namespaces (name) ON DELETE CASCADE,
        name TEXT NOT NULL, pattern TEXT NOT NULL, apply_to TEXT NOT NULL,
        priority INTEGER NOT NULL, definition TEXT NOT NULL,
        PRIMARY KEY (kind, namespace, name)
    );
    """),
    # 8: virtual host and user limits (broker/limits.py): one row per limit set.
    _script("""
    CREATE TABLE vhost_limits (
        namespace TEXT NOT NULL REFERENCES namespaces (name) ON DELETE CASCADE,
        name TEXT NOT NULL, value INTEGER NOT NULL,
        PRIMARY KEY (namespace, name)
    );
    CREATE TABLE user_limits (
        user TEXT NOT NULL REFERENCES users (name) ON DELETE CASCADE,
        name TEXT NOT NULL, value INTEGER NOT NULL,
        PRIMARY KEY (user, name)
    );
    """),
    # 9: segments moved to a tier (broker/tiering.py): one row per verified upload, the
    # commit point of tiering (the local copy goes only once it is here).
    _script("""
    CREATE TABLE tiered_segments (
        namespace TEXT NOT NULL, stream TEXT NOT NULL, partition INTEGER NOT NULL,
        first_chunk_id INTEGER NOT NULL, record TEXT NOT NULL,
        PRIMARY KEY (namespace, stream, partition, first_chunk_id),
        FOREIGN KEY (namespace, stream) REFERENCES streams (namespace, name) ON DELETE CASCADE
    );
    """),
    # 10: this node's own tier bookkeeping, never shared: uploads begun and not yet
    # recorded (what a crash leaves of them is deleted at the next start, and nothing else
    # unnamed is), and objects waiting to be deleted, each due after a grace period.
    _script("""
    CREATE TABLE tier_uploads (key TEXT PRIMARY KEY, started_ms INTEGER NOT NULL);
    CREATE TABLE tier_garbage (
        key TEXT PRIMARY KEY, due_ms INTEGER NOT NULL, reason TEXT NOT NULL
    );
    """),
    # 11: a virtual host's metadata as RabbitMQ keeps it (description, tags,
    # default_queue_type): a JSON object, {} for none.
    _script("""
    ALTER TABLE namespaces ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
    """),
    # 12: topic permissions (RabbitMQ's): per user, vhost and topic exchange, the patterns
    # a publish's routing key (write) and a binding's key (read) must match.
    _script("""
    CREATE TABLE topic_permissions (
        user TEXT NOT NULL REFERENCES users (name) ON DELETE CASCADE,
        namespace TEXT NOT NULL REFERENCES namespaces (name) ON DELETE CASCADE,
        exchange TEXT NOT NULL, write TEXT NOT NULL, read TEXT NOT NULL,
        PRIMARY KEY (user, namespace, exchange)
    );
    """),
    # 13: streams as tables (broker/tables.py): one row per Parquet data file the table
    # holds, the commit point of a table write; and each version of the table's Iceberg
    # metadata, the newest its head (both shared, written once under the leader's fence).
    _script("""
    CREATE TABLE table_files (
        namespace TEXT NOT NULL, stream TEXT NOT NULL, partition INTEGER NOT NULL,
        first_offset INTEGER NOT NULL, record TEXT NOT NULL,
        PRIMARY KEY (namespace, stream, partition, first_offset),
        FOREIGN KEY (namespace, stream) REFERENCES streams (namespace, name) ON DELETE CASCADE
    );
    CREATE TABLE table_heads (
        namespace TEXT NOT NULL, stream TEXT NOT NULL, version INTEGER NOT NULL,
        metadata_location TEXT NOT NULL,
        PRIMARY KEY (namespace, stream, version),
        FOREIGN KEY (namespace, stream) REFERENCES streams (namespace, name) ON DELETE CASCADE
    );
    """),
    # 14: the tier object a tiered segment's or a table file's record names, a column of
    # its record, indexed: whether a record names an object is asked per object deleted
    # (a stream's thousands at once), which a scan of every record made quadratic.
    _script("""
    ALTER TABLE tiered_segments
        ADD COLUMN object_key TEXT GENERATED ALWAYS AS (json_extract(record, '$.key'));
    CREATE INDEX tiered_segments_object_key ON tiered_segments (object_key);
    ALTER TABLE table_files
        ADD COLUMN object_key TEXT GENERATED ALWAYS AS (json_extract(record, '$.key'));
    CREATE INDEX table_files_object_key ON table_files (object_key);
    """),
    # 15: a table head names every metadata object its Iceberg metadata reaches (metadata
    # files, manifest lists, manifests): they are kept while a head names them, and an
    # upload of one that a head names was committed.
    _script("""
    ALTER TABLE table_heads ADD COLUMN objects TEXT NOT NULL DEFAULT '[]';
    """),
)
SCHEMA_VERSION = len(_MIGRATIONS)
# A limit's kind -> (its table, the column naming what it limits)
_LIMIT_TABLES = {"vhost_limit": ("vhost_limits", "namespace"),
                 "user_limit": ("user_limits", "user")}

# One statement per store: the WHERE clause both checks that the partition exists
# and, as SQLite requires for an upsert fed by a SELECT, disambiguates ON CONFLICT.
_STORE_OFFSET = """
    INSERT INTO offsets (namespace, stream, partition, reference, stored_offset)
    SELECT ?1, ?2, ?3, ?4, ?5
    WHERE EXISTS (SELECT 1 FROM streams WHERE namespace = ?1 AND name = ?2 AND partitions > ?3)
    ON CONFLICT (namespace, stream, partition, reference)
    DO UPDATE SET stored_offset = excluded.stored_offset
"""


@dataclass(frozen=True, slots=True)
class VhostMetadata:
    """What RabbitMQ keeps of a virtual host besides its name; `default_queue_type` None
    leaves a queue declared without x-queue-type classic."""

    description: str = ""
    tags: tuple[str, ...] = ()
    default_queue_type: str | None = None

    def row(self) -> dict[str, Any]:
        return {"description": self.description, "tags": list(self.tags),
                "default_queue_type": self.default_queue_type}

    @classmethod
    def of(cls, row: dict[str, Any]) -> VhostMetadata:
        return cls(str(row.get("description", "")), tuple(row.get("tags", ())),
                   row.get("default_queue_type"))


@dataclass(frozen=True, slots=True)
class NamespaceRecord:
    name: str
    created_at: float  # Unix time, seconds
    metadata: VhostMetadata = VhostMetadata()


def _namespace(name: str, created_at: float, metadata: str) -> NamespaceRecord:
    return NamespaceRecord(name, created_at, VhostMetadata.of(json.loads(metadata)))


@dataclass(frozen=True, slots=True)
class StreamRecord:
    namespace: str
    name: str
    partitions: int
    arguments: dict[str, Any]  # a fresh copy per read: mutating it changes nothing stored
    created_at: float  # Unix time, seconds


@dataclass(frozen=True, slots=True)
class TableFile:
    """A Parquet data file of a stream's table: the partition's records in
    [first_offset, next_offset), under a key no other write makes."""

    key: str
    first_offset: int
    next_offset: int
    rows: int
    size: int


@dataclass(frozen=True, slots=True)
class TableHead:
    """A version of a table's Iceberg metadata: its file, and every metadata object it
    reaches (its own file, the older ones its log names, manifest lists, manifests)."""

    metadata_location: str
    objects: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class UserRecord:
    name: str
    password_hash: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PermissionRecord:
    user: str
    namespace: str
    configure: str
    write: str
    read: str


def _namespace_row(record: NamespaceRecord) -> dict[str, Any]:
    """A namespace as the cluster's store holds it."""
    return {"created_at": record.created_at, **record.metadata.row()}


@dataclass(frozen=True, slots=True)
class TopicPermissionRecord:
    user: str
    namespace: str
    exchange: str
    write: str
    read: str


def _tiered_key(namespace: str, stream: str, partition: int, first_chunk_id: int
                ) -> tuple[str, str, str, str]:
    return (namespace, stream, str(partition), str(first_chunk_id))


def validate_name(name: str, what: str) -> None:
    """Raise InvalidArgument unless `name` is 1..255 bytes of UTF-8 without NUL."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"{what} name must be a non-empty string")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} name {name!r} is not valid UTF-8") from None
    if size > MAX_NAME_BYTES:
        raise InvalidArgument(f"{what} name is {size} bytes long, the limit is {MAX_NAME_BYTES}")
    if "\x00" in name:
        raise InvalidArgument(f"{what} name {name!r} contains a NUL character")


def _validate_int(value: int, what: str, low: int, high: int) -> None:
    # bool is an int subclass, but True partitions is a caller bug, not a number.
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidArgument(f"{what} must be an integer in [{low}, {high}], got {value!r}")


def _encode_arguments(arguments: dict[str, Any]) -> str:
    if not isinstance(arguments, dict) or not all(isinstance(key, str) for key in arguments):
        raise InvalidArgument("stream arguments must be a mapping with string keys")
    try:
        return json.dumps(arguments, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidArgument(f"stream arguments are not JSON serializable: {error}") from None


def _stream_from_row(row: tuple[Any, ...]) -> StreamRecord:
    namespace, name, partitions, arguments, created_at = row
    return StreamRecord(namespace, name, partitions, json.loads(arguments), created_at)


def _user_from_row(row: tuple[Any, ...]) -> UserRecord:
    name, password_hash, tags = row
    return UserRecord(name, password_hash, tuple(json.loads(tags)))


def _check_user(user: UserRecord) -> None:
    validate_name(user.name, "user")
    if not user.password_hash:
        raise InvalidArgument(f"user '{user.name}' needs a password hash")


def _no_permissions(user: str, namespace: str) -> NotFound:
    return NotFound(f"user '{user}' has no permissions in namespace '{namespace}'")


def _no_policy(kind: str, vhost: str, name: str) -> NotFound:
    return NotFound(f"{kind.replace('_', ' ')} '{name}' not found in vhost '{vhost}'")


def _no_limit(kind: str, owner: str, name: str) -> NotFound:
    return NotFound(f"no limit '{name}' set for {_owner_kind(kind)} '{owner}'")


def _owner_kind(limit_kind: str) -> str:
    return "virtual host" if limit_kind == "vhost_limit" else "user"


# What SQLite answers when the disk refuses a write: full, or the write itself failed (a
# file over its size limit gets EFBIG, which SQLite reports as an I/O error).
_DISK_REFUSALS = frozenset({sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR})


class _CatalogConnection(sqlite3.Connection):
    """A connection to the catalog whose writes the disk refuses raise StorageFailed, a
    broker error every protocol answers, rather than an error that ends the client's
    connection. SQLite has rolled the statement (and its transaction) back."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        with _disk_refusals():
            return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        with _disk_refusals():
            return super().executemany(sql, parameters)


@contextmanager
def _disk_refusals() -> Iterator[None]:
    try:
        yield
    except sqlite3.OperationalError as error:
        if error.sqlite_errorcode & 0xFF not in _DISK_REFUSALS:  # the primary code
            raise
        raise StorageFailed(f"the catalog could not store it: {error}") from error


def _connect(path: Path, synchronous: str) -> sqlite3.Connection:
    # isolation_level=None: autocommit, so a lone statement is its own transaction
    # and multi-statement changes use explicit BEGIN IMMEDIATE.
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                         factory=_CatalogConnection)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {synchronous}")
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA busy_timeout = 5000")
    except BaseException:
        db.close()
        raise
    return db


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE on an autocommit connection; COMMIT, or ROLLBACK on any error (a
    COMMIT the disk refused among them)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # SQLite ends it itself on some errors (a full disk)
            db.execute("ROLLBACK")
        raise


def _migrate(db: sqlite3.Connection, directory: Path) -> None:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise BrokerError(
            f"catalog schema version {version} is newer than this broker's {SCHEMA_VERSION}"
        )
    for target in range(version + 1, SCHEMA_VERSION + 1):
        with transaction(db):
            _MIGRATIONS[target - 1](db, directory)
            db.execute(f"PRAGMA user_version = {target}")
    # Only now, with their content committed here, may the old stores' files go.
    legacy.remove_old_stores(directory)


class CatalogUnreadable(BrokerError):
    """The catalog file cannot be opened or read as this broker's catalog (not SQLite,
    damaged, unreadable, or of a newer schema). The server does not start."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"catalog {path} cannot be opened: {reason}")
        self.path = path
        self.reason = reason


async def held_everywhere(shared: Awaitable[None]) -> None:
    """Wait for a change to reach the cluster's store, as a client's answer does."""
    try:
        async with asyncio.timeout(SHARE_WAIT_S):
            await asyncio.shield(shared)
    except TimeoutError:
        raise PreconditionFailed("the cluster's metadata store did not answer: the change "
                                 "holds on this node and reaches the others once it does"
                                 ) from None


class ChangeNotifier:
    """Tells `on_change` of the changes made on this node (in a cluster, to share them),
    not of those applied from another node."""

    on_change: ChangeListener | None = None
    on_fenced: FencedListener | None = None  # set in a cluster
    _applying = False

    def _changed(self, kind: str, key: tuple[Any, ...], row: dict[str, Any] | None) -> None:
        if self.on_change is not None and not self._applying:
            self.on_change(kind, key, row)

    async def _shared(self, kind: str, key: tuple[Any, ...],
                      row: dict[str, Any] | None) -> None:
        """As `_changed`, returning once the change is in the cluster's store (a change
        the client must not be told of before every node can know it)."""
        if self.on_change is None or self._applying:
            return
        shared = self.on_change(kind, key, row)
        if shared is not None:
            await held_everywhere(shared)

    async def _fenced(self, kind: str, key: tuple[Any, ...], row: dict[str, Any] | None,
                      fence: Fence | None) -> None:
        """Make a change in the cluster's store only under `fence` (FencedOut if it no
        longer holds, and then nothing changed); it returns once the store holds it, never
        before, since what follows relies on it. Without a cluster it always holds."""
        if self.on_fenced is None:
            return
        if fence is None:
            raise FencedOut(f"{kind} {key}: this node does not lead")
        if not await self.on_fenced(kind, key, row, fence):
            raise FencedOut(f"{kind} {key}: this node no longer leads epoch {fence.epoch}, "
                            "or the record exists")

    async def _everywhere(self, kind: str, key: tuple[Any, ...], row: dict[str, Any] | None,
                          make_here: Callable[[], object]) -> None:
        """A client's change, checked already, answered once made: alone, made here at
        once (`make_here`); in a cluster, written to the cluster's store first and made
        here, as on every node, from there (no node holds what the cluster does not)."""
        if self.on_change is None or self._applying:
            make_here()
            return
        shared = self.on_change(kind, key, row, held_here=False)
        if shared is not None:
            await held_everywhere(shared)

    @contextmanager
    def applying(self) -> Iterator[None]:
        """Changes made inside are another node's: not told again."""
        self._applying = True
        try:
            yield
        finally:
            self._applying = False


class Catalog(ChangeNotifier):
    """Durable broker metadata in one SQLite file. Create with Catalog.open(path)."""

    def __init__(self, path: Path, metadata: sqlite3.Connection,
                 offsets: sqlite3.Connection) -> None:
        self.path = path
        self._db = metadata
        self._offsets_db = offsets
        self._lock = threading.RLock()
        # Every publish checks a permission: read once, kept until a change that may
        # touch permissions (setting, clearing, deleting a user or a namespace).
        self._permissions: dict[tuple[str, str], PermissionRecord | None] = {}
        self._topic_permissions: dict[tuple[str, str, str], TopicPermissionRecord | None] = {}
        # False while none was ever held: a publish then looks none up (`Auth.check_topic`)
        self.holds_topic_permissions = bool(self.list_topic_permissions())
        # In a cluster: told of every change to namespaces, users, permissions and offsets
        # made here, to share it (a change applied from elsewhere is not told again).
        self.on_change = None
        # Policies of every vhost in memory (matched on each declaration); told to each
        # watcher on every change, made here or applied from another node (by vhost).
        self.policies = PolicyBook(self._read_policies())
        self.policy_watchers: list[Callable[[str], None]] = []
        # Inside `policy_changes_held`: the vhosts whose policies changed, told at its end
        self._held_policy_vhosts: set[str] | None = None

    def apply(self, kind: str, key: Sequence[Any], row: dict[str, Any] | None) -> None:
        """Apply a change another node made (see `on_change`); one that no longer applies
        (its user or stream is gone already) is skipped. Namespace deletions go through
        the broker core instead, which closes their streams first."""
        with self.applying(), contextlib.suppress(NotFound, AlreadyExists):
            self._apply(kind, key, row)

    def _apply(self, kind: str, key: Sequence[Any], row: dict[str, Any] | None) -> None:
        if kind == "namespace" and row is not None and "description" in row:
            self.put_namespace(key[0], VhostMetadata.of(row))
        elif kind == "namespace" and row is not None:  # one without metadata (older nodes)
            self.add_namespace(key[0])
        elif kind == "user":
            if row is None:
                self.delete_user(key[0])
            else:
                self.put_user(UserRecord(key[0], row["password_hash"], tuple(row["tags"])))
        elif kind == "permission":
            if row is None:
                self.clear_permissions(key[0], key[1])
            else:
                self.set_permissions(key[0], key[1], row["configure"], row["write"],
                                     row["read"])
        elif kind == TOPIC_PERMISSION:
            if row is None:
                self.clear_topic_permission(key[0], key[1], key[2])
            else:
                self.set_topic_permission(TopicPermissionRecord(
                    key[0], key[1], key[2], row["write"], row["read"]))
        elif kind in POLICY_KINDS:
            if row is None:
                self.delete_policy(kind, key[0], key[1])
            else:
                self.put_policy(parse_policy(kind, key[0], key[1], row))
        elif kind in _LIMIT_TABLES:
            if row is None:
                self.clear_limit(kind, key[0], key[1])
            else:
                self.set_limit(kind, key[0], key[1], int(row["value"]))
        elif kind == TIERED_SEGMENT:
            if row is None:
                self.delete_tiered(key[0], key[1], int(key[2]), int(key[3]))
            else:
                self.add_tiered(key[0], key[1], int(key[2]), TieredRecord(**row))
        elif kind == TABLE_FILE:
            if row is None:
                self.delete_table_file(key[0], key[1], int(key[2]), int(key[3]))
            else:
                self.add_table_file(key[0], key[1], int(key[2]), TableFile(**row))
        elif kind == TABLE_HEAD:
            if row is None:
                self.delete_table_head(key[0], key[1], int(key[2]))
            else:
                self.add_table_head(key[0], key[1], int(key[2]), TableHead(
                    row["metadata_location"], tuple(row.get("objects", ()))))
        elif kind == "offset":
            if row is None:
                self.delete_offset(key[0], key[1], int(key[2]), key[3])
            else:
                self.store_offset(key[0], key[1], int(key[2]), key[3], int(row["offset"]))

    @classmethod
    def open(cls, path: Path) -> Catalog:
        """Open or create the catalog at `path`, migrating its schema to the current one
        (which takes in the old stores' files beside it, see `legacy`).

        Raises CatalogUnreadable, naming the file, when SQLite cannot use it; the file is
        left as it was, for the operator to restore or move aside."""
        try:
            return cls._open(path)
        except sqlite3.DatabaseError as error:
            raise CatalogUnreadable(path, str(error)) from None
        except BrokerError as error:  # a schema newer than this broker's
            raise CatalogUnreadable(path, error.message) from None

    @classmethod
    def _open(cls, path: Path) -> Catalog:
        metadata = _connect(path, "FULL")
        try:
            _migrate(metadata, path.parent)
            metadata.execute(
                "INSERT INTO namespaces (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (DEFAULT_NAMESPACE, time.time()),
            )
            offsets = _connect(path, "NORMAL")
        except BaseException:
            metadata.close()
            raise
        return cls(path, metadata, offsets)

    def connect(self) -> sqlite3.Connection:
        """A connection of its own to this catalog, for a store whose tables live here
        (changes committed as durably as the catalog's own)."""
        return _connect(self.path, "FULL")

    def close(self) -> None:
        with self._lock:
            self._offsets_db.close()
            self._db.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._db.in_transaction:  # inside `apply_changes`: its one transaction
                yield self._db
                return
            with transaction(self._db) as db:
                yield db

    def _write(self, sql: str, params: Iterable[Any]) -> int:
        """Run one autocommitted statement; return the number of rows it changed."""
        with self._lock:
            return self._db.execute(sql, tuple(params)).rowcount

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, tuple(params)).fetchall()

    def _row(self, sql: str, params: Iterable[Any]) -> tuple[Any, ...] | None:
        with self._lock:
            row: tuple[Any, ...] | None = self._db.execute(sql, tuple(params)).fetchone()
            return row

    # -- namespaces ---------------------------------------------------------------

    def add_namespace(self, name: str, metadata: VhostMetadata | None = None
                      ) -> NamespaceRecord:
        validate_name(name, "namespace")
        record = NamespaceRecord(name, time.time(), metadata or VhostMetadata())
        added = self._write(
            "INSERT INTO namespaces (name, created_at, metadata) VALUES (?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (record.name, record.created_at, json.dumps(record.metadata.row())),
        )
        if not added:
            raise AlreadyExists(f"namespace '{name}' already exists")
        self._changed("namespace", (name,), _namespace_row(record))
        return record

    def put_namespace(self, name: str, metadata: VhostMetadata) -> bool:
        """Add a namespace or set an existing one's metadata; True if it was added."""
        validate_name(name, "namespace")
        existing = self.get_namespace(name)
        if existing is None:
            self.add_namespace(name, metadata)
            return True
        self._write("UPDATE namespaces SET metadata = ? WHERE name = ?",
                    (json.dumps(metadata.row()), name))
        self._changed("namespace", (name,),
                      _namespace_row(dataclasses.replace(existing, metadata=metadata)))
        return False

    def delete_namespace(self, name: str) -> None:
        """Delete a namespace with its streams, permissions and offsets."""
        self._drop_namespace(name)
        self._changed("namespace", (name,), None)

    async def delete_namespace_everywhere(self, name: str) -> None:
        """As `delete_namespace`, answered once the cluster's store holds the deletion.
        Made here first (the broker core has closed its streams already); when the store
        does not answer, the deletion reaches it later (PreconditionFailed says so)."""
        self._drop_namespace(name)
        await self._shared("namespace", (name,), None)

    def _drop_namespace(self, name: str) -> None:
        # Deleting "/" would only last until the next open recreates it, empty.
        if name == DEFAULT_NAMESPACE:
            raise PreconditionFailed(
                f"the default namespace '{DEFAULT_NAMESPACE}' cannot be deleted"
            )
        self._forget_permissions()
        if not self._write("DELETE FROM namespaces WHERE name = ?", (name,)):
            raise NotFound(f"namespace '{name}' not found")
        self.policies.drop_vhost(name)

    def get_namespace(self, name: str) -> NamespaceRecord | None:
        row = self._row("SELECT name, created_at, metadata FROM namespaces WHERE name = ?",
                        (name,))
        return _namespace(*row) if row else None

    def list_namespaces(self) -> list[NamespaceRecord]:
        rows = self._rows("SELECT name, created_at, metadata FROM namespaces ORDER BY name")
        return [_namespace(*row) for row in rows]

    def _require_namespace(self, name: str) -> None:
        if self._row("SELECT 1 FROM namespaces WHERE name = ?", (name,)) is None:
            raise NotFound(f"namespace '{name}' not found")

    # -- streams ------------------------------------------------------------------

    def add_stream(self, namespace: str, name: str, partitions: int = 1,
                   arguments: dict[str, Any] | None = None) -> StreamRecord:
        validate_name(name, "stream")
        _validate_int(partitions, "partitions", 1, MAX_PARTITIONS)
        encoded = _encode_arguments(arguments or {})
        record = StreamRecord(namespace, name, partitions, json.loads(encoded), time.time())
        with self._transaction() as db:
            self._require_namespace(namespace)
            added = db.execute(
                "INSERT INTO streams (namespace, name, partitions, arguments, created_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (namespace, name, partitions, encoded, record.created_at),
            ).rowcount
            if not added:
                raise AlreadyExists(f"stream '{name}' already exists in namespace '{namespace}'")
        return record

    def delete_stream(self, namespace: str, name: str) -> None:
        """Delete a stream and its consumer offsets."""
        deleted = self._write(
            "DELETE FROM streams WHERE namespace = ? AND name = ?", (namespace, name)
        )
        if not deleted:
            raise NotFound(f"stream '{name}' not found in namespace '{namespace}'")

    def get_stream(self, namespace: str, name: str) -> StreamRecord | None:
        row = self._row(
            "SELECT namespace, name, partitions, arguments, created_at FROM streams"
            " WHERE namespace = ? AND name = ?",
            (namespace, name),
        )
        return _stream_from_row(row) if row else None

    def list_streams(self, namespace: str | None = None) -> list[StreamRecord]:
        """Streams of one namespace, or of every namespace when `namespace` is None."""
        select = "SELECT namespace, name, partitions, arguments, created_at FROM streams"
        if namespace is None:
            rows = self._rows(f"{select} ORDER BY namespace, name")
        else:
            with self._lock:
                self._require_namespace(namespace)
                rows = self._rows(f"{select} WHERE namespace = ? ORDER BY name", (namespace,))
        return [_stream_from_row(row) for row in rows]

    # -- tiered segments ---------------------------------------------------------------

    async def record_tiered(self, namespace: str, stream: str, partition: int,
                            record: TieredRecord, fence: Fence | None) -> None:
        """Record a verified upload: from now on the segment is read from the tier. In a
        cluster the record is written once, under the leader's `fence` (FencedOut
        otherwise), and this returns once the cluster's store holds it, since the local
        copy goes next."""
        await self._fenced(TIERED_SEGMENT, _tiered_key(namespace, stream, partition,
                                                       record.first_chunk_id),
                           dataclasses.asdict(record), fence)
        self.add_tiered(namespace, stream, partition, record)

    async def expire_tiered(self, namespace: str, stream: str, partition: int,
                            record: TieredRecord, fence: Fence | None, due_ms: int,
                            reason: str) -> None:
        """Retention dropped a tiered segment: its record goes (in a cluster under the
        leader's `fence`, FencedOut otherwise), then its objects wait to be deleted."""
        await self._fenced(TIERED_SEGMENT, _tiered_key(namespace, stream, partition,
                                                       record.first_chunk_id), None, fence)
        with self._transaction() as db:
            self._delete_tiered(db, namespace, stream, partition, record.first_chunk_id)
            self._add_garbage(db, (record.key, record.index_key), due_ms, reason)

    def add_tiered(self, namespace: str, stream: str, partition: int,
                   record: TieredRecord) -> None:
        """Store a record, as `record_tiered` does, without telling the cluster (a record
        another node made)."""
        self._write("INSERT INTO tiered_segments (namespace, stream, partition, first_chunk_id,"
                    " record) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET"
                    " record = excluded.record",
                    (namespace, stream, partition, record.first_chunk_id,
                     json.dumps(dataclasses.asdict(record))))

    def delete_tiered(self, namespace: str, stream: str, partition: int,
                      first_chunk_id: int) -> None:
        """Forget a record another node's retention dropped (its objects are its own to
        delete)."""
        with self._transaction() as db:
            self._delete_tiered(db, namespace, stream, partition, first_chunk_id)

    @staticmethod
    def _delete_tiered(db: sqlite3.Connection, namespace: str, stream: str, partition: int,
                       first_chunk_id: int) -> None:
        db.execute("DELETE FROM tiered_segments WHERE namespace = ? AND stream = ? AND"
                   " partition = ? AND first_chunk_id = ?",
                   (namespace, stream, partition, first_chunk_id))

    def any_tiered(self) -> bool:
        """Whether any object is recorded in the tier: a tiered segment or a table's file."""
        return self._row("SELECT 1 FROM tiered_segments UNION ALL SELECT 1 FROM table_files"
                         " LIMIT 1", ()) is not None

    def names_tiered(self, key: str) -> bool:
        """Whether a record names the object `key` (a segment or its index)."""
        return self._row("SELECT 1 FROM tiered_segments WHERE object_key = ? LIMIT 1",
                         (segment_key_of(key),)) is not None

    def names_object(self, key: str) -> bool:
        """Whether a record names the tier object `key`: a tiered segment's, a table's
        data file, or a metadata object a table head reaches."""
        return self.names_tiered(key) or self._row(
            "SELECT 1 FROM table_files WHERE object_key = ?1 UNION ALL"
            " SELECT 1 FROM table_heads, json_each(table_heads.objects)"
            " WHERE json_each.value = ?1 LIMIT 1", (key,)) is not None

    # -- tables --------------------------------------------------------------------------

    async def record_table_file(self, namespace: str, stream: str, partition: int,
                                file: TableFile, fence: Fence | None) -> None:
        """Commit a written data file to the table: in a cluster once, under the leader's
        `fence` (FencedOut otherwise); here with the end of its upload, in one transaction,
        so a crash leaves it either committed or an upload to discard."""
        await self._fenced(TABLE_FILE, _table_file_key(namespace, stream, partition, file),
                           dataclasses.asdict(file), fence)
        with self._transaction() as db:
            self._insert_table_file(db, namespace, stream, partition, file)
            db.execute("DELETE FROM tier_uploads WHERE key = ?", (file.key,))

    def add_table_file(self, namespace: str, stream: str, partition: int,
                       file: TableFile) -> None:
        """Store a data file's record another node committed."""
        with self._transaction() as db:
            self._insert_table_file(db, namespace, stream, partition, file)

    @staticmethod
    def _insert_table_file(db: sqlite3.Connection, namespace: str, stream: str,
                           partition: int, file: TableFile) -> None:
        db.execute("INSERT INTO table_files (namespace, stream, partition, first_offset,"
                   " record) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                   (namespace, stream, partition, file.first_offset,
                    json.dumps(dataclasses.asdict(file))))

    async def expire_table_files(self, namespace: str, stream: str, partition: int,
                                 files: Sequence[TableFile], fence: Fence | None,
                                 due_ms: int, reason: str) -> None:
        """Data files that hold no record the table keeps (retention, a rebuild): each
        record goes (in a cluster under the leader's `fence`, FencedOut otherwise, and
        the files not yet gone stay), then its object waits to be deleted."""
        for file in files:
            await self._fenced(TABLE_FILE, _table_file_key(namespace, stream, partition, file),
                               None, fence)
            with self._transaction() as db:
                self._delete_table_file(db, namespace, stream, partition, file.first_offset)
                self._add_garbage(db, (file.key,), due_ms, reason)

    def drop_table_files(self, namespace: str, stream: str, first_partition: int,
                         due_ms: int, reason: str) -> list[TableFile]:
        """The data files of a stream's partitions from `first_partition` on, which were
        removed: their records go and their objects wait to be deleted, in one transaction
        (in a cluster their records left etcd with the partitions' keys). The files."""
        with self._transaction() as db:
            rows = db.execute("DELETE FROM table_files WHERE namespace = ? AND stream = ? AND"
                              " partition >= ? RETURNING record",
                              (namespace, stream, first_partition)).fetchall()
            files = [TableFile(**json.loads(row[0])) for row in rows]
            self._add_garbage(db, [file.key for file in files], due_ms, reason)
        return files

    def delete_table_file(self, namespace: str, stream: str, partition: int,
                          first_offset: int) -> None:
        """Forget a data file another node expired (its object is its own to delete)."""
        with self._transaction() as db:
            self._delete_table_file(db, namespace, stream, partition, first_offset)

    @staticmethod
    def _delete_table_file(db: sqlite3.Connection, namespace: str, stream: str,
                           partition: int, first_offset: int) -> None:
        db.execute("DELETE FROM table_files WHERE namespace = ? AND stream = ? AND"
                   " partition = ? AND first_offset = ?",
                   (namespace, stream, partition, first_offset))

    def table_files(self, namespace: str, stream: str) -> dict[int, list[TableFile]]:
        """A stream's committed data files by partition, oldest first."""
        found: dict[int, list[TableFile]] = {}
        for partition, record in self._rows(
                "SELECT partition, record FROM table_files WHERE namespace = ? AND stream = ?"
                " ORDER BY partition, first_offset", (namespace, stream)):
            found.setdefault(partition, []).append(TableFile(**json.loads(record)))
        return found

    def table_end(self, namespace: str, stream: str, partition: int) -> int | None:
        """Where the partition's committed table files end; None: no file yet."""
        row = self._row("SELECT max(json_extract(record, '$.next_offset')) FROM table_files"
                        " WHERE namespace = ? AND stream = ? AND partition = ?",
                        (namespace, stream, partition))
        return None if row is None or row[0] is None else int(row[0])

    def table_head(self, namespace: str, stream: str) -> tuple[int, str] | None:
        """The newest version of the stream's Iceberg metadata and where it is."""
        row = self._row("SELECT version, metadata_location FROM table_heads WHERE"
                        " namespace = ? AND stream = ? ORDER BY version DESC LIMIT 1",
                        (namespace, stream))
        return None if row is None else (int(row[0]), str(row[1]))

    def table_heads(self, namespace: str, stream: str) -> dict[int, TableHead]:
        """Every head version of the stream's table still recorded, oldest first."""
        return {int(version): TableHead(location, tuple(json.loads(objects)))
                for version, location, objects in self._rows(
                    "SELECT version, metadata_location, objects FROM table_heads WHERE"
                    " namespace = ? AND stream = ? ORDER BY version", (namespace, stream))}

    async def record_table_head(self, namespace: str, stream: str, version: int,
                                head: TableHead, written: Sequence[str],
                                fence: Fence | None) -> None:
        """A new version of the table's Iceberg metadata: in a cluster written once,
        under the leader's `fence` (FencedOut if it no longer leads, or another node
        wrote this version: Iceberg's compare-and-swap of the current metadata); here
        with the end of the uploads of the objects it `written`, in one transaction."""
        await self._fenced(TABLE_HEAD, (namespace, stream, str(version)),
                           {"metadata_location": head.metadata_location,
                            "objects": list(head.objects)}, fence)
        with self._transaction() as db:
            self._insert_table_head(db, namespace, stream, version, head)
            db.executemany("DELETE FROM tier_uploads WHERE key = ?",
                           [(key,) for key in written])

    def add_table_head(self, namespace: str, stream: str, version: int, head: TableHead
                       ) -> None:
        with self._transaction() as db:
            self._insert_table_head(db, namespace, stream, version, head)

    @staticmethod
    def _insert_table_head(db: sqlite3.Connection, namespace: str, stream: str,
                           version: int, head: TableHead) -> None:
        db.execute("INSERT INTO table_heads (namespace, stream, version, metadata_location,"
                   " objects) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                   (namespace, stream, version, head.metadata_location,
                    json.dumps(list(head.objects))))

    async def drop_table_heads(self, namespace: str, stream: str, heads: dict[int, TableHead],
                               kept: set[str], fence: Fence | None, due_ms: int,
                               reason: str) -> None:
        """Older head versions no reader is pointed to any more: each record goes (in a
        cluster under `fence`, FencedOut otherwise, and the heads not yet gone stay),
        then its objects but the `kept` wait to be deleted."""
        for version, head in heads.items():
            await self._fenced(TABLE_HEAD, (namespace, stream, str(version)), None, fence)
            with self._transaction() as db:
                db.execute("DELETE FROM table_heads WHERE namespace = ? AND stream = ? AND"
                           " version = ?", (namespace, stream, version))
                self._add_garbage(db, [key for key in head.objects if key not in kept],
                                  due_ms, reason)

    def delete_table_head(self, namespace: str, stream: str, version: int) -> None:
        self._write("DELETE FROM table_heads WHERE namespace = ? AND stream = ? AND"
                    " version = ?", (namespace, stream, version))

    # -- this node's tier bookkeeping ----------------------------------------------------

    def begin_upload(self, key: str) -> None:
        """An upload to `key` starts: until it is recorded or discarded, a crash leaves
        objects the next start knows to be this node's own, and deletes."""
        self._write("INSERT OR IGNORE INTO tier_uploads (key, started_ms) VALUES (?, ?)",
                    (key, int(time.time() * 1000)))

    def end_upload(self, key: str) -> None:
        self._write("DELETE FROM tier_uploads WHERE key = ?", (key,))

    def uploads(self) -> list[str]:
        """Uploads begun and neither recorded nor discarded."""
        return [row[0] for row in self._rows("SELECT key FROM tier_uploads ORDER BY key")]

    def discard_upload(self, key: str, objects: Sequence[str], reason: str) -> None:
        """An upload to `key` was not recorded: its `objects` (this node's own, under keys
        no other upload makes) are deleted at once."""
        with self._transaction() as db:
            db.execute("DELETE FROM tier_uploads WHERE key = ?", (key,))
            self._add_garbage(db, objects, int(time.time() * 1000), reason)

    def add_garbage(self, objects: Sequence[str], due_ms: int, reason: str) -> None:
        with self._transaction() as db:
            self._add_garbage(db, objects, due_ms, reason)

    @staticmethod
    def _add_garbage(db: sqlite3.Connection, objects: Iterable[str], due_ms: int,
                     reason: str) -> None:
        db.executemany("INSERT OR IGNORE INTO tier_garbage (key, due_ms, reason)"
                       " VALUES (?, ?, ?)", [(key, due_ms, reason) for key in objects])

    def due_garbage(self, now_ms: int) -> list[tuple[str, str]]:
        """(key, reason) of the objects due for deletion by `now_ms`, oldest due first."""
        return [(row[0], row[1]) for row in self._rows(
            "SELECT key, reason FROM tier_garbage WHERE due_ms <= ? ORDER BY due_ms, key",
            (now_ms,))]

    def garbage_done(self, key: str) -> None:
        self._write("DELETE FROM tier_garbage WHERE key = ?", (key,))

    def garbage_count(self) -> int:
        row = self._row("SELECT count(*) FROM tier_garbage", ())
        return int(row[0]) if row else 0

    def tiered(self, namespace: str, stream: str, partition: int) -> list[TieredRecord]:
        """A partition's tiered segments, oldest first."""
        rows = self._rows("SELECT record FROM tiered_segments WHERE namespace = ? AND"
                          " stream = ? AND partition = ? ORDER BY first_chunk_id",
                          (namespace, stream, partition))
        return [TieredRecord(**json.loads(row[0])) for row in rows]

    def set_partitions(self, namespace: str, name: str, partitions: int) -> StreamRecord:
        """Grow a stream to `partitions`; shrinking would orphan data and is refused."""
        return self._resize(namespace, name, partitions, grow=True)

    def remove_partitions(self, namespace: str, name: str, partitions: int) -> StreamRecord:
        """Shrink a stream to its first `partitions` partitions, dropping the offsets
        stored for the removed ones (Iggy's DELETE_PARTITIONS) and their tiered records."""
        record = self._resize(namespace, name, partitions, grow=False)
        self._write("DELETE FROM tiered_segments WHERE namespace = ? AND stream = ? AND"
                    " partition >= ?", (namespace, name, partitions))
        with self._lock:
            self._offsets_db.execute(
                "DELETE FROM offsets WHERE namespace = ? AND stream = ? AND partition >= ?",
                (namespace, name, partitions))
        return record

    def _resize(self, namespace: str, name: str, partitions: int, *, grow: bool
                ) -> StreamRecord:
        _validate_int(partitions, "partitions", 1, MAX_PARTITIONS)
        with self._transaction() as db:
            current = self.get_stream(namespace, name)
            if current is None:
                raise NotFound(f"stream '{name}' not found in namespace '{namespace}'")
            if grow and partitions < current.partitions:
                raise PreconditionFailed(
                    f"stream '{name}' in namespace '{namespace}' has {current.partitions}"
                    f" partitions and cannot shrink to {partitions}"
                )
            if not grow and partitions > current.partitions:
                raise PreconditionFailed(f"stream '{name}' has only {current.partitions}"
                                         " partitions")
            db.execute("UPDATE streams SET partitions = ? WHERE namespace = ? AND name = ?",
                       (partitions, namespace, name))
        return dataclasses.replace(current, partitions=partitions)

    # -- users --------------------------------------------------------------------

    def put_user(self, user: UserRecord) -> None:
        """Create the user or replace its password hash and tags."""
        _check_user(user)
        self._write(
            "INSERT INTO users (name, password_hash, tags) VALUES (?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE"
            " SET password_hash = excluded.password_hash, tags = excluded.tags",
            (user.name, user.password_hash, json.dumps(list(user.tags))),
        )
        self._changed("user", (user.name,), {"password_hash": user.password_hash,
                                             "tags": list(user.tags)})

    def get_user(self, name: str) -> UserRecord | None:
        row = self._row("SELECT name, password_hash, tags FROM users WHERE name = ?", (name,))
        return _user_from_row(row) if row else None

    def list_users(self) -> list[UserRecord]:
        rows = self._rows("SELECT name, password_hash, tags FROM users ORDER BY name")
        return [_user_from_row(row) for row in rows]

    def delete_user(self, name: str) -> None:
        """Delete a user and its permissions."""
        self._forget_permissions()
        if not self._write("DELETE FROM users WHERE name = ?", (name,)):
            raise NotFound(f"user '{name}' not found")
        self._changed("user", (name,), None)

    # -- permissions --------------------------------------------------------------

    def set_permissions(
        self, user: str, namespace: str, configure: str, write: str, read: str
    ) -> PermissionRecord:
        """Store the user's permission patterns on a namespace (Auth validates them)."""
        record = PermissionRecord(user, namespace, configure, write, read)
        self._forget_permissions()
        with self._transaction() as db:
            self._require_user_and_namespace(user, namespace)
            db.execute(
                "INSERT INTO permissions (user, namespace, configure, write, read)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (user, namespace) DO UPDATE"
                " SET configure = excluded.configure, write = excluded.write,"
                " read = excluded.read",
                (user, namespace, configure, write, read),
            )
        self._changed("permission", (user, namespace),
                      {"configure": configure, "write": write, "read": read})
        return record

    def _forget_permissions(self) -> None:
        self._permissions.clear()
        self._topic_permissions.clear()

    def _require_user_and_namespace(self, user: str, namespace: str) -> None:
        if self.get_user(user) is None:
            raise NotFound(f"user '{user}' not found")
        self._require_namespace(namespace)

    def clear_permissions(self, user: str, namespace: str) -> None:
        self._forget_permissions()
        cleared = self._write(
            "DELETE FROM permissions WHERE user = ? AND namespace = ?", (user, namespace)
        )
        if not cleared:
            raise _no_permissions(user, namespace)
        self._changed("permission", (user, namespace), None)

    def get_permissions(self, user: str, namespace: str) -> PermissionRecord | None:
        key = (user, namespace)
        if key not in self._permissions:
            row = self._row(
                "SELECT user, namespace, configure, write, read FROM permissions"
                " WHERE user = ? AND namespace = ?",
                key,
            )
            self._permissions[key] = PermissionRecord(*row) if row else None
        return self._permissions[key]

    def list_permissions(
        self, user: str | None = None, namespace: str | None = None
    ) -> list[PermissionRecord]:
        """Permission rows, optionally only those of one user and/or one namespace."""
        rows = self._rows(
            "SELECT user, namespace, configure, write, read FROM permissions"
            " WHERE (?1 IS NULL OR user = ?1) AND (?2 IS NULL OR namespace = ?2)"
            " ORDER BY user, namespace",
            (user, namespace),
        )
        return [PermissionRecord(*row) for row in rows]

    # -- topic permissions (RabbitMQ's, checked on topic exchanges) -----------------

    def set_topic_permission(self, record: TopicPermissionRecord) -> None:
        """Store a user's topic permission on one exchange of a namespace (Auth checks the
        patterns)."""
        self._forget_permissions()
        self.holds_topic_permissions = True
        with self._transaction() as db:
            self._require_user_and_namespace(record.user, record.namespace)
            db.execute("INSERT INTO topic_permissions (user, namespace, exchange, write, read)"
                       " VALUES (?, ?, ?, ?, ?) ON CONFLICT (user, namespace, exchange)"
                       " DO UPDATE SET write = excluded.write, read = excluded.read",
                       dataclasses.astuple(record))
        self._changed(TOPIC_PERMISSION, (record.user, record.namespace, record.exchange),
                      {"write": record.write, "read": record.read})

    def clear_topic_permission(self, user: str, namespace: str, exchange: str) -> None:
        self._forget_permissions()
        if not self._write("DELETE FROM topic_permissions WHERE user = ? AND namespace = ?"
                           " AND exchange = ?", (user, namespace, exchange)):
            raise NotFound(f"no topic permission of user '{user}' on exchange '{exchange}'"
                           f" in namespace '{namespace}'")
        self._changed(TOPIC_PERMISSION, (user, namespace, exchange), None)

    def get_topic_permission(self, user: str, namespace: str, exchange: str
                             ) -> TopicPermissionRecord | None:
        """Read once per key until a change of permissions (a publish asks each time)."""
        key = (user, namespace, exchange)
        if key not in self._topic_permissions:
            self._topic_permissions[key] = next(iter(self.list_topic_permissions(*key)), None)
        return self._topic_permissions[key]

    def list_topic_permissions(self, user: str | None = None, namespace: str | None = None,
                               exchange: str | None = None) -> list[TopicPermissionRecord]:
        rows = self._rows(
            "SELECT user, namespace, exchange, write, read FROM topic_permissions"
            " WHERE (?1 IS NULL OR user = ?1) AND (?2 IS NULL OR namespace = ?2)"
            " AND (?3 IS NULL OR exchange = ?3) ORDER BY user, namespace, exchange",
            (user, namespace, exchange))
        return [TopicPermissionRecord(*row) for row in rows]

    # -- policies and operator policies -------------------------------------------

    def _read_policies(self) -> list[Policy]:
        rows = self._rows("SELECT kind, namespace, name, pattern, apply_to, priority,"
                          " definition FROM policies")
        return [Policy(namespace, name, pattern, json.loads(definition), priority, apply_to,
                       kind)
                for kind, namespace, name, pattern, apply_to, priority, definition in rows]

    def put_policy(self, policy: Policy) -> None:
        """Create or replace a policy (or operator policy) of a vhost."""
        validate_name(policy.name, "policy")
        with self._transaction() as db:
            self._require_namespace(policy.vhost)
            db.execute(
                "INSERT INTO policies (kind, namespace, name, pattern, apply_to, priority,"
                " definition) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (kind, namespace, name) DO UPDATE SET pattern = excluded.pattern,"
                " apply_to = excluded.apply_to, priority = excluded.priority,"
                " definition = excluded.definition",
                (policy.kind, policy.vhost, policy.name, policy.pattern, policy.apply_to,
                 policy.priority, json.dumps(dict(policy.definition))))
        self.policies.put(policy)
        self._changed(policy.kind, (policy.vhost, policy.name), policy.row())
        self._policies_changed(policy.vhost)

    def delete_policy(self, kind: str, vhost: str, name: str) -> None:
        if not self._write("DELETE FROM policies WHERE kind = ? AND namespace = ? AND name = ?",
                           (kind, vhost, name)):
            raise _no_policy(kind, vhost, name)
        self.policies.remove(kind, vhost, name)
        self._changed(kind, (vhost, name), None)
        self._policies_changed(vhost)

    def _policies_changed(self, vhost: str) -> None:
        if self._held_policy_vhosts is not None:
            self._held_policy_vhosts.add(vhost)
            return
        for watcher in self.policy_watchers:
            watcher(vhost)

    # -- limits -------------------------------------------------------------------

    def set_limit(self, kind: str, owner: str, name: str, value: int) -> None:
        """Store a "vhost_limit" of a namespace or a "user_limit" of a user (broker/limits.py
        checks names and values)."""
        table, column = _LIMIT_TABLES[kind]
        try:
            self._write(f"INSERT INTO {table} ({column}, name, value) VALUES (?, ?, ?)"
                        f" ON CONFLICT ({column}, name) DO UPDATE SET value = excluded.value",
                        (owner, name, value))
        except sqlite3.IntegrityError:  # the foreign key: no such namespace or user
            raise NotFound(f"{_owner_kind(kind)} '{owner}' not found") from None
        self._changed(kind, (owner, name), {"value": value})

    def clear_limit(self, kind: str, owner: str, name: str) -> None:
        table, column = _LIMIT_TABLES[kind]
        if not self._write(f"DELETE FROM {table} WHERE {column} = ? AND name = ?", (owner, name)):
            raise _no_limit(kind, owner, name)
        self._changed(kind, (owner, name), None)

    def list_limits(self, kind: str, owner: str | None = None) -> dict[str, dict[str, int]]:
        """{owner: {limit name: value}} of every namespace or user with limits, or of one."""
        table, column = _LIMIT_TABLES[kind]
        limits: dict[str, dict[str, int]] = {}
        for who, name, value in self._rows(
                f"SELECT {column}, name, value FROM {table} WHERE ?1 IS NULL OR {column} = ?1"
                f" ORDER BY {column}, name", (owner,)):
            limits.setdefault(who, {})[name] = value
        return limits

    # -- consumer offsets ---------------------------------------------------------

    def store_offset(
        self, namespace: str, stream: str, partition: int, reference: str, offset: int
    ) -> None:
        """Remember `offset` for a consumer `reference` on one partition of a stream."""
        validate_name(reference, "consumer reference")
        _validate_int(partition, "partition", 0, MAX_PARTITIONS - 1)
        _validate_int(offset, "offset", 0, MAX_OFFSET)
        with self._lock:
            stored = self._offsets_db.execute(
                _STORE_OFFSET, (namespace, stream, partition, reference, offset)
            ).rowcount
        if not stored:
            self._raise_missing_partition(namespace, stream, partition)
        self._changed("offset", (namespace, stream, partition, reference), {"offset": offset})

    def delete_offset(self, namespace: str, stream: str, partition: int, reference: str) -> None:
        """Forget a consumer's stored offset (a deleted durable subscription)."""
        with self._lock:
            self._offsets_db.execute(
                "DELETE FROM offsets WHERE namespace = ? AND stream = ? AND partition = ?"
                " AND reference = ?", (namespace, stream, partition, reference))
        self._changed("offset", (namespace, stream, partition, reference), None)

    def _raise_missing_partition(self, namespace: str, stream: str, partition: int) -> None:
        record = self.get_stream(namespace, stream)
        if record is None:
            raise NotFound(f"stream '{stream}' not found in namespace '{namespace}'")
        raise NotFound(
            f"partition {partition} not found in stream '{stream}' of namespace"
            f" '{namespace}', which has {record.partitions}"
        )

    def get_offset(self, namespace: str, stream: str, partition: int, reference: str) -> int | None:
        with self._lock:
            row = self._offsets_db.execute(
                "SELECT stored_offset FROM offsets"
                " WHERE namespace = ? AND stream = ? AND partition = ? AND reference = ?",
                (namespace, stream, partition, reference),
            ).fetchone()
        return row[0] if row else None

    def list_offsets(self, namespace: str, stream: str) -> dict[tuple[int, str], int]:
        """Every stored offset of a stream, keyed by (partition, reference)."""
        with self._lock:
            rows = self._offsets_db.execute(
                "SELECT partition, reference, stored_offset FROM offsets"
                " WHERE namespace = ? AND stream = ?",
                (namespace, stream),
            ).fetchall()
        return {(partition, reference): offset for partition, reference, offset in rows}

    # -- a client's changes: answered once made everywhere ---------------------------------
    # Each checks the change here, then `_everywhere`: alone, the method above; in a cluster,
    # the cluster's store first, and this node (as every node) takes it from there.

    async def add_namespace_everywhere(self, name: str,
                                       metadata: VhostMetadata | None = None) -> None:
        validate_name(name, "namespace")
        if self.get_namespace(name) is not None:
            raise AlreadyExists(f"namespace '{name}' already exists")
        record = NamespaceRecord(name, time.time(), metadata or VhostMetadata())
        await self._everywhere("namespace", (name,), _namespace_row(record),
                               partial(self.add_namespace, name, record.metadata))

    async def put_namespace_everywhere(self, name: str, metadata: VhostMetadata) -> bool:
        """As `put_namespace`, answered once the cluster holds it; True if it was added."""
        existing = self.get_namespace(name)
        if existing is None:
            await self.add_namespace_everywhere(name, metadata)
            return True
        await self._everywhere("namespace", (name,),
                               _namespace_row(dataclasses.replace(existing, metadata=metadata)),
                               partial(self.put_namespace, name, metadata))
        return False

    async def put_user_everywhere(self, user: UserRecord) -> None:
        _check_user(user)
        await self._everywhere("user", (user.name,), {"password_hash": user.password_hash,
                                                      "tags": list(user.tags)},
                               partial(self.put_user, user))

    async def delete_user_everywhere(self, name: str) -> None:
        if self.get_user(name) is None:
            raise NotFound(f"user '{name}' not found")
        await self._everywhere("user", (name,), None, partial(self.delete_user, name))

    async def set_permissions_everywhere(self, user: str, namespace: str, configure: str,
                                         write: str, read: str) -> None:
        self._require_user_and_namespace(user, namespace)
        await self._everywhere("permission", (user, namespace),
                               {"configure": configure, "write": write, "read": read},
                               partial(self.set_permissions, user, namespace, configure,
                                       write, read))

    async def clear_permissions_everywhere(self, user: str, namespace: str) -> None:
        if self.get_permissions(user, namespace) is None:
            raise _no_permissions(user, namespace)
        await self._everywhere("permission", (user, namespace), None,
                               partial(self.clear_permissions, user, namespace))

    async def put_policy_everywhere(self, policy: Policy) -> None:
        validate_name(policy.name, "policy")
        self._require_namespace(policy.vhost)
        await self._everywhere(policy.kind, (policy.vhost, policy.name), policy.row(),
                               partial(self.put_policy, policy))

    async def delete_policy_everywhere(self, kind: str, vhost: str, name: str) -> None:
        if all(policy.name != name for policy in self.policies.list(kind, vhost)):
            raise _no_policy(kind, vhost, name)
        await self._everywhere(kind, (vhost, name), None,
                               partial(self.delete_policy, kind, vhost, name))

    async def set_limit_everywhere(self, kind: str, owner: str, name: str, value: int) -> None:
        """As `set_limit` (broker/limits.py checks names and values)."""
        held = self.get_namespace(owner) if kind == "vhost_limit" else self.get_user(owner)
        if held is None:
            raise NotFound(f"{_owner_kind(kind)} '{owner}' not found")
        await self._everywhere(kind, (owner, name), {"value": value},
                               partial(self.set_limit, kind, owner, name, value))

    async def clear_limit_everywhere(self, kind: str, owner: str, name: str) -> None:
        if name not in self.list_limits(kind, owner).get(owner, {}):
            raise _no_limit(kind, owner, name)
        await self._everywhere(kind, (owner, name), None,
                               partial(self.clear_limit, kind, owner, name))

    async def store_offset_everywhere(self, namespace: str, stream: str, partition: int,
                                      reference: str, offset: int) -> None:
        """As `store_offset`, for a client answered once it is stored."""
        validate_name(reference, "consumer reference")
        _validate_int(partition, "partition", 0, MAX_PARTITIONS - 1)
        _validate_int(offset, "offset", 0, MAX_OFFSET)
        record = self.get_stream(namespace, stream)
        if record is None or partition >= record.partitions:
            self._raise_missing_partition(namespace, stream, partition)
        await self._everywhere("offset", (namespace, stream, partition, reference),
                               {"offset": offset},
                               partial(self.store_offset, namespace, stream, partition,
                                       reference, offset))

    # -- a set of changes, all or none ------------------------------------------------------

    def prior(self, change: Change) -> Change:
        """The change that puts back what `change`'s key holds now (None: nothing)."""
        kind, key, _ = change
        return kind, key, self._row_of(kind, key)

    def _row_of(self, kind: str, key: tuple[Any, ...]) -> dict[str, Any] | None:
        if kind == "namespace":
            space = self.get_namespace(key[0])
            return None if space is None else _namespace_row(space)
        if kind == "user":
            user = self.get_user(key[0])
            return None if user is None else {"password_hash": user.password_hash,
                                              "tags": list(user.tags)}
        if kind == "permission":
            granted = self.get_permissions(key[0], key[1])
            return None if granted is None else {
                "configure": granted.configure, "write": granted.write, "read": granted.read}
        if kind == TOPIC_PERMISSION:
            topic = self.get_topic_permission(key[0], key[1], key[2])
            return None if topic is None else {"write": topic.write, "read": topic.read}
        if kind in POLICY_KINDS:
            found = [p.row() for p in self.policies.list(kind, key[0]) if p.name == key[1]]
            return found[0] if found else None
        if kind in _LIMIT_TABLES:
            value = self.list_limits(kind, key[0]).get(key[0], {}).get(key[1])
            return None if value is None else {"value": value}
        raise InvalidArgument(f"{kind} changes are not made in sets")

    def _make(self, kind: str, key: tuple[Any, ...], row: dict[str, Any] | None) -> None:
        """One change made here; a namespace's deletion too (which a cluster's feed hands
        to the broker core instead, `apply`)."""
        if kind == "namespace" and row is None:
            self.delete_namespace(key[0])
        else:
            self._apply(kind, key, row)

    @contextmanager
    def policy_changes_held(self) -> Iterator[None]:
        """Policy watchers are told of the changes made inside only at its end: a watcher
        acts on queues (drops messages past a new length limit), so a set of changes put
        back before the end (`apply_changes`, a refused import) changes none of them."""
        if self._held_policy_vhosts is not None:  # held already, by an outer one
            yield
            return
        self._held_policy_vhosts = held = set[str]()
        try:
            yield
        finally:
            self._held_policy_vhosts = None
            for vhost in held:
                self._policies_changed(vhost)

    def apply_changes(self, changes: Sequence[Change]) -> None:
        """Make `changes` here in one transaction: every one, or (on any error) none; the
        policies held in memory are put back as they were too."""
        policies = {(kind, key): self._row_of(kind, key)
                    for kind, key, _ in changes if kind in POLICY_KINDS}
        with self._lock, self.policy_changes_held():
            try:
                with transaction(self._db):
                    for change in changes:
                        self._make(*change)
            except BaseException:
                self._forget_permissions()
                self._restore_policies(policies)
                raise

    def _restore_policies(self, rows: dict[tuple[str, tuple[Any, ...]], dict[str, Any] | None]
                          ) -> None:
        for (kind, (vhost, name)), row in rows.items():
            self.policies.remove(kind, vhost, name)
            if row is not None:
                self.policies.put(parse_policy(kind, vhost, name, row))

    async def apply_changes_everywhere(self, changes: Sequence[Change]) -> None:
        """As `apply_changes`, answered once made everywhere. Alone: one transaction. In a
        cluster etcd holds one key per change, so they are made one by one, each etcd
        first (as every `_everywhere` change); on a failure, those made and the one that
        failed (its outcome may be unknown) are put back as they were, the same way,
        newest first, before the failure is raised. Check the whole set before: what
        fails then is the cluster's store, not the changes."""
        if self.on_change is None or self._applying:
            self.apply_changes(changes)
            return
        undo: list[Change] = []
        try:
            for change in changes:
                undo.append(self.prior(change))
                await self._everywhere(*change, partial(self._make, *change))
        except BaseException:
            await self._put_back_everywhere(reversed(undo))
            raise

    async def _put_back_everywhere(self, undo: Iterable[Change]) -> None:
        for change in undo:
            try:
                await self._everywhere(*change, partial(self._make, *change))
            except BrokerError as error:  # the store is down: say what may be left
                log.error("catalog.undo_failed", extra={"kind": change[0],
                                                        "key": list(change[1]),
                                                        "reason": error.message})


def _table_file_key(namespace: str, stream: str, partition: int,
                    file: TableFile) -> tuple[str, ...]:
    """The etcd key parts of a table data file's record."""
    return (namespace, stream, str(partition), str(file.first_offset))
