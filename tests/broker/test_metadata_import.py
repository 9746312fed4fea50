"""One metadata store: a data directory written with the old stores (an AMQP pickle,
iggy.sqlite, segments.json, binders.sqlite) opens with everything in the catalog, seen
through real clients; the import survives a SIGKILL before and after its commit; AMQP field
values keep their types."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import math
import signal
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from apache_iggy import IggyClient as ApacheIggy
from apache_iggy import TcpConfig, TcpReconnectionConfig
from iggy_py import IggyClient as PyIggy
from iggy_py import PollingStrategy

from mainstem import Broker
from mainstem.broker import legacy
from mainstem.broker.amqp import metadata as amqp_metadata
from mainstem.broker.amqp.metadata import decode_table, encode_table
from mainstem.broker.amqp.routing.model import canonical_value
from mainstem.broker.catalog import _MIGRATIONS, SCHEMA_VERSION, Catalog, transaction
from mainstem.broker.core import BrokerCore
from mainstem.broker.settings import CoreSettings
from mainstem.client.events import EventsClient
from mainstem.client.segment import SegmentClient, SegmentClientError
from mainstem.config import ServerConfig
from tests.broker.fixtures.make_old_stores import HEADERS

FIXTURE = Path(__file__).parent / "fixtures" / "old-stores.tar.gz"
OLD_FILES = (legacy.AMQP_FILE, legacy.IGGY_FILE, legacy.SEGMENTS_FILE, legacy.BINDERS_FILE)
TIMEOUT_S = 10


def old_data_dir(tmp_path: Path) -> Path:
    """The data directory the broker of commit 91b0f9e wrote (see fixtures/)."""
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / "data"


def broker_on(data_dir: Path) -> Broker:
    return Broker(config=ServerConfig.defaults(host="127.0.0.1", port=0, data_dir=data_dir))


async def check_amqp(broker: Broker, messages: int) -> None:
    connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{broker.ports['amqp']}/")
    channel = await connection.channel(publisher_confirms=True)
    queue = await channel.declare_queue("eu-orders", durable=True,
                                        arguments={"x-max-length": 1000})  # equivalent
    assert queue.declaration_result.message_count == messages
    orders = await channel.get_exchange("orders")
    typed = await channel.get_exchange("typed")
    # orders -(eu.#)-> relay -(eu.de)-> eu-orders; unroutable orders go to spare -> leftovers
    await orders.publish(aio_pika.Message(b"new"), routing_key="eu.de")
    await orders.publish(aio_pika.Message(b"stray"), routing_key="us.ny")
    # the header binding's decimal, float, bool, timestamp and nested table match exactly
    headers = {k: v for k, v in HEADERS.items() if k != "x-match"}
    await typed.publish(aio_pika.Message(b"typed", headers=headers), routing_key="")
    await typed.publish(aio_pika.Message(b"float", headers={**headers, "price": 1.5}),
                        routing_key="")
    bodies = {}
    for name in ("eu-orders", "leftovers", "typed-q"):
        queue = await channel.declare_queue(name, durable=True, passive=True)
        bodies[name] = []
        while (message := await queue.get(fail=False, no_ack=True)) is not None:
            bodies[name].append(message.body)
    assert bodies == {"eu-orders": [f"order {i}".encode() for i in range(messages)] + [b"new"],
                      "leftovers": [b"stray"], "typed-q": [b"typed"]}
    await connection.close()


async def check_iggy(broker: Broker) -> None:
    client = PyIggy(f"127.0.0.1:{broker.ports['iggy']}")
    await client.connect()
    await client.login_user("guest", "guest")
    assert (await client.get_stream(7)).name == "shop"
    topic = await client.get_topic(7, 3)
    assert (topic.id, topic.name) == (3, "orders")
    polled = await client.poll_messages(7, 3, 2, PollingStrategy.First(), 10, False)
    assert [m.payload() for m in polled] == [f"m{i}".encode() for i in range(4)]
    apache = ApacheIggy(TcpConfig(server_address=f"127.0.0.1:{broker.ports['iggy']}",
                                  reconnection=TcpReconnectionConfig(enabled=False)))
    await apache.connect()
    await apache.login_user("guest", "guest")
    group = await apache.get_consumer_group("shop", "orders", "workers")
    assert group is not None and group.id == 1


async def check_segments(broker: Broker) -> None:
    client = await SegmentClient.connect("127.0.0.1", broker.ports["segment"])
    sealed = await client.info("shop/sealed/0")
    cut = await client.info("/cut/0")
    assert (sealed.sealed, sealed.start_offset) == (True, 0)
    assert (cut.sealed, cut.start_offset) == (False, 13)
    with pytest.raises(SegmentClientError):
        await client.read("/cut/0", 0)
    await client.close()


async def check_binders(broker: Broker, clicks: int) -> None:
    client = await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest", "guest")
    assert await client.list_binders() == ["per_page", "rebuilt"]
    assert await client.find_by_id("per_page", "a") == {"page": "a", "n": clicks}
    # the projection resumes at its stored position: one more click counts once
    await client.publish("clicks", {"page": "a", "n": 1})
    for _ in range(int(TIMEOUT_S / 0.05)):
        document = await client.find_by_id("per_page", "a")
        if document["n"] == clicks + 1:
            break
        await asyncio.sleep(0.05)
    assert document == {"page": "a", "n": clicks + 1}
    await client.close()


async def test_an_old_data_directory_opens_with_everything_moved_into_the_catalog(
        tmp_path: Path) -> None:
    data_dir = old_data_dir(tmp_path)
    async with broker_on(data_dir) as broker:
        assert not any((data_dir / name).exists() for name in OLD_FILES)
        await check_amqp(broker, messages=3)
        await check_iggy(broker)
        await check_segments(broker)
        await check_binders(broker, clicks=3)
    async with broker_on(data_dir) as broker:  # what it wrote since is in the catalog too
        await check_amqp(broker, messages=0)
        await check_segments(broker)
        await check_binders(broker, clicks=4)
    with sqlite3.connect(data_dir / "catalog.sqlite") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        # the bulk load in progress came along, its staged document with it
        assert db.execute("SELECT COUNT(*) FROM binder_loads").fetchone()[0] == 1
        assert db.execute("SELECT id FROM binder_documents WHERE storage LIKE 'load:%'"
                          ).fetchall() == [("x",)]


# Opens the catalog in a child process that SIGKILLs itself at one point of the import.
_KILLED_AT = """
import os, signal, sys
from pathlib import Path
from mainstem.broker import catalog, legacy
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
setattr(legacy, sys.argv[2], die)
catalog.Catalog.open(Path(sys.argv[1]))
"""


def open_killed_at(data_dir: Path, function: str) -> None:
    child = subprocess.run([sys.executable, "-c", _KILLED_AT, str(data_dir / "catalog.sqlite"),
                            function], timeout=60, check=False)
    assert child.returncode == -signal.SIGKILL


def catalog_rows(data_dir: Path) -> tuple[int, int, int]:
    """The schema version, and how many AMQP queues and Iggy ids the catalog holds."""
    with sqlite3.connect(data_dir / "catalog.sqlite") as db:
        return tuple(db.execute(query).fetchone()[0] for query in (
            "PRAGMA user_version", "SELECT COUNT(*) FROM amqp_queues",
            "SELECT COUNT(*) FROM iggy_ids"))


async def test_an_import_killed_before_its_commit_leaves_the_old_files_as_the_state(
        tmp_path: Path) -> None:
    data_dir = old_data_dir(tmp_path)
    before = {name: (data_dir / name).read_bytes() for name in OLD_FILES}
    open_killed_at(data_dir, "_import_sqlite")  # after the AMQP and segment rows
    before_import = _MIGRATIONS.index(legacy.import_old_stores)  # the version it starts from
    assert catalog_rows(data_dir) == (before_import, 0, 0)
    assert {name: (data_dir / name).read_bytes() for name in OLD_FILES} == before
    async with broker_on(data_dir) as broker:
        assert catalog_rows(data_dir) == (SCHEMA_VERSION, 3, 2)
        await check_amqp(broker, messages=3)
        await check_iggy(broker)


async def test_an_import_killed_after_its_commit_leaves_the_catalog_as_the_state(
        tmp_path: Path) -> None:
    data_dir = old_data_dir(tmp_path)
    open_killed_at(data_dir, "remove_old_stores")
    assert catalog_rows(data_dir) == (SCHEMA_VERSION, 3, 2)
    assert all((data_dir / name).exists() for name in OLD_FILES)
    async with broker_on(data_dir) as broker:  # leftovers are removed, not imported again
        assert not any((data_dir / name).exists() for name in OLD_FILES)
        assert catalog_rows(data_dir) == (SCHEMA_VERSION, 3, 2)
        await check_segments(broker)
        await check_binders(broker, clicks=3)


def test_field_values_keep_their_types() -> None:
    table = {"int": 1, "float": 1.0, "bool": True, "decimal": decimal.Decimal("1.00"),
             "other_scale": decimal.Decimal("1.0"), "text": "é\udcff", "bytes": b"\x00\xff",
             "void": None, "nan": math.nan, "inf": -math.inf,
             "at": datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC),
             "array": [1, "a", [True]], "table": {"nested": {"x": 2**62}}}
    decoded = decode_table(encode_table(table))
    assert list(decoded) == list(table)
    compared = set(table) - {"nan", "text"}  # NaN != NaN; a lone surrogate has no UTF-8
    assert canonical_value({k: decoded[k] for k in compared}) == \
        canonical_value({k: table[k] for k in compared})
    assert math.isnan(decoded["nan"]) and decoded["text"] == table["text"]
    assert decoded["decimal"].as_tuple() != decoded["other_scale"].as_tuple()
    assert encode_table(table).isascii()



def amqp_objects() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    exchange = {"name": "e", "type": "topic", "durable": True, "auto_delete": False,
                "internal": False, "arguments": {"alternate-exchange": "ae"}}
    queue = {"name": "q", "auto_delete": False, "arguments": {"x-max-length": 5}}
    binding = {"source": "e", "destination": "q", "destination_kind": "queue",
               "routing_key": "#", "arguments": {}}
    return exchange, queue, binding


def saved(db: sqlite3.Connection, stored: amqp_metadata.StoredObjects,
          records: amqp_metadata.Records) -> tuple[amqp_metadata.StoredObjects, int]:
    """`records` saved over `stored`; the rows the save wrote."""
    before = db.total_changes
    with transaction(db):
        stored = stored.write(db, records)
    return stored, db.total_changes - before


def test_stored_amqp_objects_are_replaced_as_a_whole(tmp_path: Path) -> None:
    exchange, queue, binding = amqp_objects()
    with Catalog.open(tmp_path / "catalog.sqlite") as catalog:
        db = catalog.connect()
        stored, _ = saved(db, amqp_metadata.StoredObjects.read(db),
                          {"gone": {"exchanges": [exchange], "queues": [], "bindings": []}})
        kept = {"exchanges": [exchange], "queues": [queue], "bindings": [binding]}
        saved(db, stored, {"/": kept})
        assert amqp_metadata.read(db) == {"/": kept}
        db.close()


def test_a_save_writes_only_the_rows_that_changed(tmp_path: Path) -> None:
    exchange, queue, binding = amqp_objects()
    queues = [{**queue, "name": f"q{i}"} for i in range(50)]
    record = {"exchanges": [exchange], "queues": queues, "bindings": [binding]}
    with Catalog.open(tmp_path / "catalog.sqlite") as catalog:
        db = catalog.connect()
        stored, written = saved(db, amqp_metadata.StoredObjects.read(db), {"/": record})
        assert written == 52
        stored, written = saved(db, stored, {"/": {**record, "queues": [
            *queues, {**queue, "name": "new"}]}})
        assert written == 1  # the new queue's row, not the 52 others again
        # an argument of another type is a change (1 == True, but not as stored)
        changed = [{**queues[0], "arguments": {"x-max-length": True}}, *queues[1:]]
        stored, written = saved(db, stored, {"/": {**record, "queues": changed}})
        assert written == 2  # that queue's row, and the new queue's gone
        assert amqp_metadata.read(db)["/"]["queues"] == changed
        # a store read back from the catalog writes nothing for what it holds
        assert saved(db, amqp_metadata.StoredObjects.read(db),
                     {"/": {**record, "queues": changed}})[1] == 0
        db.close()


async def test_declarations_in_one_save_are_stored_once_at_its_end(tmp_path: Path) -> None:
    core = await BrokerCore.open(tmp_path / "data", CoreSettings())
    try:
        host, db = core.queues.vhost("/"), core.catalog.connect()
        with core.queues.one_save():
            for name in ("a", "b", "c"):
                host.declare_queue(name, durable=True, exclusive=False, auto_delete=False,
                                   arguments={}, owner=None)
            assert amqp_metadata.read(db) == {}  # nothing written yet
        assert [q["name"] for q in amqp_metadata.read(db)["/"]["queues"]] == ["a", "b", "c"]
        db.close()
    finally:
        await core.close()
