"""The durable catalog against real SQLite files: every method, restarts, cascades."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import tempfile
from collections.abc import Awaitable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mainstem.broker.catalog import (
    _MIGRATIONS,
    DEFAULT_NAMESPACE,
    MAX_OFFSET,
    SCHEMA_VERSION,
    Catalog,
    NamespaceRecord,
    PermissionRecord,
    StreamRecord,
    UserRecord,
    transaction,
)
from mainstem.broker.errors import (
    AlreadyExists,
    BrokerError,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
)
from mainstem.broker.policies import OPERATOR_POLICY, POLICY, parse_policy
from mainstem.log.tier_upload import TieredRecord

RETENTION = {"max-length-bytes": 20_000_000_000, "max-age": "7D", "nested": {"a": [1, 2]}}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "catalog.sqlite"


@pytest.fixture
def catalog(path: Path) -> Iterator[Catalog]:
    with Catalog.open(path) as opened:
        yield opened


def reopen(catalog: Catalog, path: Path) -> Catalog:
    catalog.close()
    return Catalog.open(path)


# -- opening --------------------------------------------------------------------------


def test_open_creates_wal_database_with_schema_version_and_default_namespace(path: Path) -> None:
    with Catalog.open(path) as catalog:
        assert [ns.name for ns in catalog.list_namespaces()] == [DEFAULT_NAMESPACE]
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        db.close()


def test_open_refuses_a_catalog_from_a_newer_broker(path: Path) -> None:
    Catalog.open(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(BrokerError, match="newer"):
        Catalog.open(path)


def test_reopen_does_not_duplicate_the_default_namespace(catalog: Catalog, path: Path) -> None:
    created_at = catalog.get_namespace(DEFAULT_NAMESPACE).created_at
    catalog = reopen(catalog, path)
    assert catalog.list_namespaces() == [NamespaceRecord(DEFAULT_NAMESPACE, created_at)]
    catalog.close()


# -- namespaces -----------------------------------------------------------------------


def test_namespace_add_get_list_delete(catalog: Catalog) -> None:
    added = catalog.add_namespace("prod")
    assert catalog.get_namespace("prod") == added
    assert [ns.name for ns in catalog.list_namespaces()] == ["/", "prod"]
    catalog.delete_namespace("prod")
    assert catalog.get_namespace("prod") is None
    with pytest.raises(NotFound, match="'prod'"):
        catalog.delete_namespace("prod")


def test_duplicate_namespace_is_refused(catalog: Catalog) -> None:
    catalog.add_namespace("prod")
    with pytest.raises(AlreadyExists, match="namespace 'prod' already exists"):
        catalog.add_namespace("prod")


def test_default_namespace_cannot_be_deleted(catalog: Catalog) -> None:
    with pytest.raises(PreconditionFailed):
        catalog.delete_namespace(DEFAULT_NAMESPACE)


@pytest.mark.parametrize("name", ["", "x" * 256, "é" * 128, "a\x00b", "\ud800"])
def test_invalid_names_are_refused(catalog: Catalog, name: str) -> None:
    with pytest.raises(InvalidArgument, match="namespace name"):
        catalog.add_namespace(name)
    with pytest.raises(InvalidArgument, match="stream name"):
        catalog.add_stream("/", name)
    with pytest.raises(InvalidArgument, match="user name"):
        catalog.put_user(UserRecord(name, "hash"))
    with pytest.raises(InvalidArgument, match="consumer reference name"):
        catalog.store_offset("/", "s", 0, name, 1)


def test_longest_valid_name_is_accepted(catalog: Catalog) -> None:
    name = "é" * 127 + "x"  # 255 bytes of UTF-8
    assert catalog.add_namespace(name).name == name


def test_deleting_a_namespace_cascades_to_streams_permissions_and_offsets(
    catalog: Catalog, path: Path
) -> None:
    catalog.add_namespace("prod")
    catalog.add_stream("prod", "orders")
    catalog.add_stream("/", "orders")
    catalog.put_user(UserRecord("bob", "hash"))
    catalog.set_permissions("bob", "prod", ".*", ".*", ".*")
    catalog.set_permissions("bob", "/", ".*", ".*", ".*")
    catalog.store_offset("prod", "orders", 0, "app", 42)
    catalog.store_offset("/", "orders", 0, "app", 7)

    catalog.delete_namespace("prod")
    catalog = reopen(catalog, path)

    assert catalog.get_stream("prod", "orders") is None
    assert catalog.get_permissions("bob", "prod") is None
    assert catalog.get_offset("prod", "orders", 0, "app") is None
    # A namespace re-created with the same name starts empty.
    catalog.add_namespace("prod")
    catalog.add_stream("prod", "orders")
    assert catalog.list_offsets("prod", "orders") == {}
    # Other namespaces are untouched.
    assert catalog.get_offset("/", "orders", 0, "app") == 7
    assert catalog.get_permissions("bob", "/") is not None
    catalog.close()


# -- streams --------------------------------------------------------------------------


def test_stream_add_get_list_delete(catalog: Catalog) -> None:
    added = catalog.add_stream("/", "orders", partitions=3, arguments=RETENTION)
    assert added == StreamRecord("/", "orders", 3, RETENTION, added.created_at)
    assert catalog.get_stream("/", "orders") == added
    catalog.add_stream("/", "audit")
    assert [s.name for s in catalog.list_streams("/")] == ["audit", "orders"]
    catalog.delete_stream("/", "orders")
    assert catalog.get_stream("/", "orders") is None
    with pytest.raises(NotFound, match="stream 'orders' not found in namespace '/'"):
        catalog.delete_stream("/", "orders")


def test_stream_defaults_to_one_partition_and_no_arguments(catalog: Catalog) -> None:
    record = catalog.add_stream("/", "s")
    assert (record.partitions, record.arguments) == (1, {})


def test_list_streams_of_every_namespace(catalog: Catalog) -> None:
    catalog.add_namespace("b")
    catalog.add_stream("b", "x")
    catalog.add_stream("/", "y")
    assert [(s.namespace, s.name) for s in catalog.list_streams()] == [("/", "y"), ("b", "x")]


def test_list_streams_of_unknown_namespace_is_not_found(catalog: Catalog) -> None:
    with pytest.raises(NotFound, match="namespace 'nope' not found"):
        catalog.list_streams("nope")


def test_duplicate_stream_is_refused_and_keeps_the_original(catalog: Catalog) -> None:
    catalog.add_stream("/", "orders", partitions=2)
    with pytest.raises(AlreadyExists, match="stream 'orders' already exists"):
        catalog.add_stream("/", "orders", partitions=5)
    assert catalog.get_stream("/", "orders").partitions == 2


def test_same_stream_name_in_two_namespaces(catalog: Catalog) -> None:
    catalog.add_namespace("other")
    catalog.add_stream("/", "orders")
    catalog.add_stream("other", "orders", partitions=4)
    assert catalog.get_stream("other", "orders").partitions == 4


def test_stream_in_unknown_namespace_is_not_found(catalog: Catalog) -> None:
    with pytest.raises(NotFound, match="namespace 'nope' not found"):
        catalog.add_stream("nope", "orders")


@pytest.mark.parametrize("partitions", [0, -1, True, 1.5, 2**31])
def test_invalid_partition_counts_are_refused(catalog: Catalog, partitions: object) -> None:
    with pytest.raises(InvalidArgument, match="partitions"):
        catalog.add_stream("/", "s", partitions=partitions)


@pytest.mark.parametrize(
    "arguments", [{1: "x"}, {"x": float("nan")}, {"x": object()}, ["not", "a", "dict"]]
)
def test_arguments_must_be_a_json_object(catalog: Catalog, arguments: object) -> None:
    with pytest.raises(InvalidArgument, match="arguments"):
        catalog.add_stream("/", "s", arguments=arguments)
    assert catalog.get_stream("/", "s") is None


def test_returned_arguments_are_copies(catalog: Catalog) -> None:
    catalog.add_stream("/", "s", arguments={"k": 1})
    catalog.get_stream("/", "s").arguments["k"] = 2
    assert catalog.get_stream("/", "s").arguments == {"k": 1}


def test_set_partitions_only_grows(catalog: Catalog) -> None:
    catalog.add_stream("/", "s", partitions=2, arguments={"k": 1})
    grown = catalog.set_partitions("/", "s", 5)
    assert grown.partitions == 5 and grown.arguments == {"k": 1}
    assert catalog.get_stream("/", "s") == grown
    assert catalog.set_partitions("/", "s", 5) == grown
    with pytest.raises(PreconditionFailed, match="cannot shrink"):
        catalog.set_partitions("/", "s", 4)
    assert catalog.get_stream("/", "s").partitions == 5
    with pytest.raises(NotFound):
        catalog.set_partitions("/", "missing", 3)


def test_deleting_a_stream_deletes_its_offsets(catalog: Catalog) -> None:
    catalog.add_stream("/", "s", partitions=2)
    catalog.store_offset("/", "s", 1, "app", 10)
    catalog.delete_stream("/", "s")
    catalog.add_stream("/", "s", partitions=2)
    assert catalog.get_offset("/", "s", 1, "app") is None


# -- users ----------------------------------------------------------------------------


def test_user_put_get_list_replace_delete(catalog: Catalog) -> None:
    bob = UserRecord("bob", "scrypt$h1", ("administrator", "monitoring"))
    catalog.put_user(bob)
    catalog.put_user(UserRecord("alice", "scrypt$h2"))
    assert catalog.get_user("bob") == bob
    assert [u.name for u in catalog.list_users()] == ["alice", "bob"]
    replaced = UserRecord("bob", "scrypt$h3", ())
    catalog.put_user(replaced)
    assert catalog.get_user("bob") == replaced
    catalog.delete_user("bob")
    assert catalog.get_user("bob") is None
    with pytest.raises(NotFound, match="user 'bob' not found"):
        catalog.delete_user("bob")


def test_user_needs_a_password_hash(catalog: Catalog) -> None:
    with pytest.raises(InvalidArgument, match="password hash"):
        catalog.put_user(UserRecord("bob", ""))


def test_deleting_a_user_deletes_its_permissions(catalog: Catalog) -> None:
    catalog.put_user(UserRecord("bob", "h"))
    catalog.set_permissions("bob", "/", ".*", ".*", ".*")
    catalog.delete_user("bob")
    catalog.put_user(UserRecord("bob", "h"))
    assert catalog.get_permissions("bob", "/") is None


# -- permissions ----------------------------------------------------------------------


def test_permissions_set_get_list_replace_clear(catalog: Catalog) -> None:
    catalog.add_namespace("prod")
    catalog.put_user(UserRecord("bob", "h"))
    catalog.put_user(UserRecord("eve", "h"))
    record = catalog.set_permissions("bob", "/", "^amq\\.gen", "", ".*")
    assert record == PermissionRecord("bob", "/", "^amq\\.gen", "", ".*")
    assert catalog.get_permissions("bob", "/") == record
    catalog.set_permissions("bob", "prod", "^$", "^$", "logs")
    catalog.set_permissions("eve", "prod", ".*", ".*", ".*")

    assert len(catalog.list_permissions()) == 3
    assert [p.namespace for p in catalog.list_permissions(user="bob")] == ["/", "prod"]
    assert [p.user for p in catalog.list_permissions(namespace="prod")] == ["bob", "eve"]
    assert catalog.list_permissions(user="bob", namespace="prod") == [
        PermissionRecord("bob", "prod", "^$", "^$", "logs")
    ]

    catalog.set_permissions("bob", "/", "a", "b", "c")
    assert catalog.get_permissions("bob", "/") == PermissionRecord("bob", "/", "a", "b", "c")
    catalog.clear_permissions("bob", "/")
    assert catalog.get_permissions("bob", "/") is None
    with pytest.raises(NotFound, match="no permissions"):
        catalog.clear_permissions("bob", "/")


def test_permissions_need_an_existing_user_and_namespace(catalog: Catalog) -> None:
    catalog.put_user(UserRecord("bob", "h"))
    with pytest.raises(NotFound, match="user 'eve' not found"):
        catalog.set_permissions("eve", "/", ".*", ".*", ".*")
    with pytest.raises(NotFound, match="namespace 'nope' not found"):
        catalog.set_permissions("bob", "nope", ".*", ".*", ".*")
    assert catalog.list_permissions() == []


# -- offsets --------------------------------------------------------------------------


def test_offsets_store_get_overwrite_list(catalog: Catalog) -> None:
    catalog.add_stream("/", "s", partitions=3)
    assert catalog.get_offset("/", "s", 0, "app") is None
    catalog.store_offset("/", "s", 0, "app", 5)
    catalog.store_offset("/", "s", 0, "app", 9)
    catalog.store_offset("/", "s", 2, "app", 0)
    catalog.store_offset("/", "s", 2, "other", MAX_OFFSET)
    assert catalog.get_offset("/", "s", 0, "app") == 9
    assert catalog.list_offsets("/", "s") == {
        (0, "app"): 9,
        (2, "app"): 0,
        (2, "other"): MAX_OFFSET,
    }
    # An offset may move backwards: a consumer may rewind on purpose.
    catalog.store_offset("/", "s", 0, "app", 1)
    assert catalog.get_offset("/", "s", 0, "app") == 1


def test_store_offset_on_missing_stream_or_partition_is_not_found(catalog: Catalog) -> None:
    with pytest.raises(NotFound, match="stream 'nope' not found"):
        catalog.store_offset("/", "nope", 0, "app", 1)
    catalog.add_stream("/", "s", partitions=2)
    with pytest.raises(NotFound, match="partition 2 not found"):
        catalog.store_offset("/", "s", 2, "app", 1)
    assert catalog.list_offsets("/", "s") == {}


@pytest.mark.parametrize(("partition", "offset"), [(-1, 0), (0, -1), (0, MAX_OFFSET + 1), (0, "1")])
def test_store_offset_validates_numbers(catalog: Catalog, partition: int, offset: int) -> None:
    catalog.add_stream("/", "s")
    with pytest.raises(InvalidArgument):
        catalog.store_offset("/", "s", partition, "app", offset)


def test_offsets_follow_grown_partitions(catalog: Catalog) -> None:
    catalog.add_stream("/", "s", partitions=1)
    catalog.set_partitions("/", "s", 2)
    catalog.store_offset("/", "s", 1, "app", 3)
    assert catalog.get_offset("/", "s", 1, "app") == 3


# -- durability -----------------------------------------------------------------------


def test_restart_keeps_everything(catalog: Catalog, path: Path) -> None:
    catalog.add_namespace("prod")
    stream = catalog.add_stream("prod", "orders", partitions=4, arguments=RETENTION)
    user = UserRecord("bob", "scrypt$hash", ("administrator",))
    catalog.put_user(user)
    permission = catalog.set_permissions("bob", "prod", "^amq\\.gen", "", "orders")
    catalog.store_offset("prod", "orders", 3, "app", 123_456)

    catalog = reopen(catalog, path)

    assert [ns.name for ns in catalog.list_namespaces()] == ["/", "prod"]
    assert catalog.get_stream("prod", "orders") == stream
    assert catalog.get_user("bob") == user
    assert catalog.get_permissions("bob", "prod") == permission
    assert catalog.list_offsets("prod", "orders") == {(3, "app"): 123_456}
    catalog.close()


def test_failed_change_leaves_nothing_behind(catalog: Catalog, path: Path) -> None:
    catalog.add_stream("/", "s")
    with pytest.raises(AlreadyExists):
        catalog.add_stream("/", "s")
    # The refused transaction was rolled back: later changes commit normally.
    catalog.add_stream("/", "t")
    catalog = reopen(catalog, path)
    assert [s.name for s in catalog.list_streams("/")] == ["s", "t"]
    catalog.close()


OFFSET_KEYS = st.tuples(st.integers(0, 2), st.sampled_from(["a", "b", "référence"]))
OFFSET_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("store"), OFFSET_KEYS, st.integers(0, MAX_OFFSET)),
        st.tuples(st.just("get"), OFFSET_KEYS, st.none()),
        st.tuples(st.just("reopen"), st.none(), st.none()),
    ),
    max_size=40,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=OFFSET_OPS)
def test_offsets_match_a_dict_model_across_reopens(tmp_path: Path, operations: list) -> None:
    # A fresh directory per example: the catalog's -wal and -shm files must not carry over.
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "catalog.sqlite"
    catalog = Catalog.open(path)
    catalog.add_stream("/", "s", partitions=3)
    model: dict[tuple[int, str], int] = {}
    try:
        for action, key, offset in operations:
            if action == "store":
                catalog.store_offset("/", "s", *key, offset)
                model[key] = offset
            elif action == "get":
                assert catalog.get_offset("/", "s", *key) == model.get(key)
            else:
                catalog = reopen(catalog, path)
        catalog = reopen(catalog, path)
        assert catalog.list_offsets("/", "s") == model
    finally:
        catalog.close()


# -- policies ---------------------------------------------------------------------------


def test_policies_are_stored_shared_and_go_with_their_namespace(path: Path) -> None:
    told: list[tuple[str, tuple, dict | None]] = []
    watched: list[str] = []
    with Catalog.open(path) as catalog:
        catalog.on_change = lambda kind, key, row: told.append((kind, key, row))
        catalog.policy_watchers.append(watched.append)
        catalog.add_namespace("shop")
        body = {"pattern": "^o", "definition": {"max-length": 5}, "apply-to": "queues"}
        catalog.put_policy(parse_policy(POLICY, "shop", "cap", body))
        catalog.put_policy(parse_policy(OPERATOR_POLICY, "shop", "ops",
                                        {**body, "definition": {"max-length": 2}}))
        assert catalog.policies.applied("shop", "orders", "quorum").fields() == {
            "policy": "cap", "operator_policy": "ops",
            "effective_policy_definition": {"max-length": 2}}
        assert told[-1] == (OPERATOR_POLICY, ("shop", "ops"), {
            "pattern": "^o", "apply-to": "queues", "priority": 0,
            "definition": {"max-length": 2}})
        with pytest.raises(NotFound):
            catalog.put_policy(parse_policy(POLICY, "nowhere", "cap", body))
    with Catalog.open(path) as catalog:  # read back after a restart
        assert [p.name for p in catalog.policies.list(POLICY)] == ["cap"]
        catalog.policy_watchers.append(watched.append)
        # another node's change: applied, told to watchers, not shared again
        told.clear()
        catalog.on_change = lambda kind, key, row: told.append((kind, key, row))
        catalog.apply(POLICY, ("shop", "cap"), None)
        assert catalog.policies.list(POLICY) == [] and told == []
        catalog.delete_namespace("shop")
        assert catalog.policies.list(OPERATOR_POLICY) == []
    with Catalog.open(path) as catalog:
        assert catalog.policies.list(OPERATOR_POLICY) == []
    assert watched == ["shop", "shop", "shop"]


# -- a client's changes, made everywhere -------------------------------------------------


async def test_a_clients_change_alone_is_made_at_once_and_checked(path: Path) -> None:
    with Catalog.open(path) as catalog:
        body = {"pattern": "^o", "definition": {"max-length": 5}}
        await catalog.put_policy_everywhere(parse_policy(POLICY, "/", "cap", body))
        await catalog.put_user_everywhere(UserRecord("ann", "hash"))
        await catalog.set_permissions_everywhere("ann", "/", ".*", "", "")
        await catalog.set_limit_everywhere("vhost_limit", "/", "max-queues", 3)
        assert [p.name for p in catalog.policies.list(POLICY)] == ["cap"]
        assert catalog.get_permissions("ann", "/") == PermissionRecord("ann", "/", ".*", "", "")
        assert catalog.list_limits("vhost_limit") == {"/": {"max-queues": 3}}
        with pytest.raises(NotFound):
            await catalog.put_policy_everywhere(parse_policy(POLICY, "nowhere", "cap", body))
        with pytest.raises(AlreadyExists):
            await catalog.add_namespace_everywhere("/")
        await catalog.delete_user_everywhere("ann")
        assert catalog.get_permissions("ann", "/") is None


async def test_in_a_cluster_a_clients_change_is_made_here_only_once_shared(path: Path) -> None:
    """The listener (the cluster's feed) gets the change not made here yet; the node
    makes it through `apply`, as another node's, once the cluster's store holds it."""
    told: list[tuple[str, tuple, dict | None, bool]] = []
    with Catalog.open(path) as catalog:
        catalog.put_user(UserRecord("ann", "hash"))

        async def stored() -> None:
            catalog.apply(*told[-1][:3])  # what the feed does once etcd holds it

        def feed(kind: str, key: tuple, row: dict | None, *, held_here: bool = True
                 ) -> Awaitable[None]:
            told.append((kind, key, row, held_here))
            assert catalog.get_permissions("ann", "/") is None  # not made here yet
            return stored()

        catalog.on_change = feed
        await catalog.set_permissions_everywhere("ann", "/", "^a", "^a", "^a")
        assert told == [("permission", ("ann", "/"),
                         {"configure": "^a", "write": "^a", "read": "^a"}, False)]
        assert catalog.get_permissions("ann", "/") == PermissionRecord("ann", "/", "^a", "^a",
                                                                       "^a")
        with pytest.raises(NotFound):  # checked here first: nothing told
            await catalog.clear_limit_everywhere("vhost_limit", "/", "max-queues")
        assert len(told) == 1


# -- tiered records --------------------------------------------------------------------


def tiered_record(first: int) -> TieredRecord:
    return TieredRecord(f"s/0/{first:020d}-1-ab.segment", first, first + 10, 0, 100, 1, 2,
                        120, 7, 48, 9, 2, ((first, 1),))


def test_records_of_a_catalog_before_migration_14_are_found_by_their_objects_index(
        path: Path) -> None:
    """A catalog written before the object key was indexed: its records are found by
    their objects (a segment's or its index's key) through the index, never a scan."""
    db = sqlite3.connect(path, isolation_level=None)
    for version, migration in enumerate(_MIGRATIONS[:13], start=1):
        with transaction(db):
            migration(db, path.parent)
            db.execute(f"PRAGMA user_version = {version}")
    db.execute("INSERT INTO namespaces (name, created_at) VALUES ('/', 0)")
    db.execute("INSERT INTO streams VALUES ('/', 's', 1, '{}', 0)")
    db.executemany("INSERT INTO tiered_segments VALUES ('/', 's', 0, ?, ?)",
                   [(first, json.dumps(dataclasses.asdict(tiered_record(first))))
                    for first in (0, 10)])
    db.close()
    with Catalog.open(path) as catalog:
        assert catalog.names_tiered(tiered_record(10).key)
        assert catalog.names_object(tiered_record(0).index_key)
        assert not catalog.names_object(tiered_record(20).key)
    db = sqlite3.connect(path)
    try:
        for table in ("tiered_segments", "table_files"):
            plan = db.execute(f"EXPLAIN QUERY PLAN SELECT 1 FROM {table}"
                              " WHERE object_key = ?", ("k",)).fetchall()
            assert plan[0][3].startswith(f"SEARCH {table} USING ")  # not SCAN
            assert f"INDEX {table}_object_key (object_key=?)" in plan[0][3]
    finally:
        db.close()
