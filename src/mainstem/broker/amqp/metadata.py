"""The durable AMQP 0-9-1 objects of every namespace, as rows of the catalog.

The durable exchanges, queue definitions and bindings of all namespaces are saved
together in one transaction on each change, writing only the rows that changed, so a
crash leaves the last committed set. Arguments are AMQP field tables, whose values have
more types than JSON (bytes, decimals, timestamps, and integers, floats and booleans that
must stay apart for equivalence checks), so each value is stored as a typed JSON pair.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

# vhost name -> {"exchanges": [...], "bindings": [...], "queues": [...]}, the records of
# ExchangeGraph.to_records and VirtualHost.records.
Records = dict[str, dict[str, list[dict[str, Any]]]]

_EXCHANGE_COLUMNS = ("name", "type", "durable", "auto_delete", "internal", "arguments")
_QUEUE_COLUMNS = ("name", "auto_delete", "arguments")
_BINDING_COLUMNS = ("source", "destination", "destination_kind", "routing_key", "arguments")
_TABLES = {"exchanges": ("amqp_exchanges", _EXCHANGE_COLUMNS),
           "queues": ("amqp_queues", _QUEUE_COLUMNS),
           "bindings": ("amqp_bindings", _BINDING_COLUMNS)}
_BOOLEANS = frozenset(("durable", "auto_delete", "internal"))


def _tagged(value: Any) -> list[Any]:
    # bool before int: a bool is an int.
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, int):
        return ["int", value]
    if isinstance(value, float):
        return ["float", value.hex()]  # exact, NaN and infinities included
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, bytes | bytearray | memoryview):
        return ["bytes", base64.b64encode(value).decode("ascii")]
    if isinstance(value, decimal.Decimal):
        return ["decimal", str(value)]  # keeps the scale: 1.0 and 1.00 differ
    if isinstance(value, datetime.datetime):
        return ["timestamp", value.isoformat()]
    if value is None:
        return ["void", None]
    if isinstance(value, list | tuple):
        return ["array", [_tagged(item) for item in value]]
    if isinstance(value, Mapping):
        return ["table", [[key, _tagged(item)] for key, item in value.items()]]
    raise TypeError(f"cannot store a {type(value).__name__} in an AMQP field table")


def _untagged(pair: list[Any]) -> Any:
    tag, value = pair
    return _DECODERS[tag](value)


_DECODERS: Mapping[str, Callable[[Any], Any]] = {
    "bool": bool, "int": int, "float": float.fromhex, "str": str,
    "bytes": base64.b64decode, "decimal": decimal.Decimal,
    "timestamp": datetime.datetime.fromisoformat, "void": lambda _: None,
    "array": lambda items: [_untagged(item) for item in items],
    "table": lambda items: {key: _untagged(item) for key, item in items},
}


def encode_table(table: Mapping[str, Any]) -> str:
    """A field table as typed JSON (ASCII: lone surrogates of undecodable text survive)."""
    return json.dumps(_tagged(dict(table)))


def decode_table(text: str) -> dict[str, Any]:
    table: dict[str, Any] = _untagged(json.loads(text))
    return table


class StoredObjects:
    """The AMQP tables' rows as last written, so that a save writes only the rows that
    changed: declarations come one at a time (thousands in a definitions import), and
    rewriting every row for each made an import quadratic. A row's key is its object's
    (a binding's is all of it); whether a row changed is told by the repr of its object,
    which tells apart what == does not (1, 1.0 and True), as the stored form does."""

    def __init__(self, held: dict[str, dict[tuple[Any, ...], tuple[str, int]]]) -> None:
        self._held = held  # kind -> row key -> (fingerprint, rowid)

    @classmethod
    def read(cls, db: sqlite3.Connection) -> StoredObjects:
        """What `db` holds now."""
        held: dict[str, dict[tuple[Any, ...], tuple[str, int]]] = {}
        for kind, (table, columns) in _TABLES.items():
            rows = held[kind] = {}
            for rowid, namespace, *values in db.execute(
                    f"SELECT rowid, namespace, {', '.join(columns)} FROM {table}"):
                item = {column: _value(column, value)
                        for column, value in zip(columns, values, strict=True)}
                rows[_key(kind, namespace, item)] = (_fingerprint(item), rowid)
        return cls(held)

    def write(self, db: sqlite3.Connection, records: Records) -> StoredObjects:
        """Within a transaction: make the stored objects `records` (a namespace left out,
        such as one deleted since its objects were stored, keeps none); what is stored
        once it commits."""
        written = {kind: dict(rows) for kind, rows in self._held.items()}
        for kind, rows in written.items():
            _write_changes(db, kind, rows, records)
        return StoredObjects(written)


def _write_changes(db: sqlite3.Connection, kind: str,
                   held: dict[tuple[Any, ...], tuple[str, int]], records: Records) -> None:
    table, columns = _TABLES[kind]
    wanted = {_key(kind, namespace, item): (namespace, item)
              for namespace, record in records.items() for item in record.get(kind, [])}
    for key in held.keys() - wanted.keys():
        db.execute(f"DELETE FROM {table} WHERE rowid = ?", (held.pop(key)[1],))
    for key, (namespace, item) in wanted.items():
        fingerprint, found = _fingerprint(item), held.get(key)
        if found is not None and found[0] == fingerprint:
            continue
        row = (namespace, *(_column(item, column) for column in columns))
        if found is None:
            rowid = db.execute(f"INSERT INTO {table} (namespace, {', '.join(columns)})"
                               f" VALUES (?{', ?' * len(columns)})", row).lastrowid
            assert rowid is not None
        else:
            rowid = found[1]
            db.execute(f"UPDATE {table} SET (namespace, {', '.join(columns)})"
                       f" = (?{', ?' * len(columns)}) WHERE rowid = ?", (*row, rowid))
        held[key] = (fingerprint, rowid)


def _key(kind: str, namespace: str, item: Mapping[str, Any]) -> tuple[Any, ...]:
    if kind == "bindings":
        return (namespace, *(item[column] for column in _BINDING_COLUMNS[:-1]),
                _fingerprint(item["arguments"]))
    return (namespace, item["name"])


def _fingerprint(value: Any) -> str:
    """A text that differs wherever the stored form would: a repr, unless something in
    `value` has none of its content (an object's <...>)."""
    text = repr(value)
    return text if "<" not in text else json.dumps(_tagged(value))


def _column(item: Mapping[str, Any], column: str) -> Any:
    return encode_table(item[column]) if column == "arguments" else item[column]


def read(db: sqlite3.Connection) -> Records:
    """Every namespace's stored objects, in the order they were written."""
    records: Records = {}
    for kind, (table, columns) in _TABLES.items():
        for row in db.execute(f"SELECT namespace, {', '.join(columns)} FROM {table}"
                              " ORDER BY rowid"):
            item = {column: _value(column, value) for column, value in zip(columns, row[1:],
                                                                             strict=True)}
            namespace = records.setdefault(row[0], {name: [] for name in _TABLES})
            namespace[kind].append(item)
    return records


def _value(column: str, value: Any) -> Any:
    if column == "arguments":
        return decode_table(value)
    return bool(value) if column in _BOOLEANS else value
