"""A declared schema for a table stream's JSON bodies (issue 42): `x-table-schema` (a stream
argument, `table-schema` on the stream protocol and as a policy key) names the body's fields
and their types, and each becomes a typed column of the table, after the source's own.

The shape, a JSON object (or its text) of field name to type:

    {"id": "long", "amount": "double", "customer": "string", "note": "string?"}

Types: `string`, `long` (64-bit integer), `double`, `boolean`, `timestamp` (an ISO-8601
text, kept as UTC microseconds). A `?` after the type makes the field optional (missing or
null gives a null); every other field must be there and not null.

A record whose body does not fit (no body, not one JSON object, a required field missing
or null, a value not of its type) is never dropped: its row is there with its `value` as
every row's, its typed columns null and `schema_error` saying why; `schema_error` is null
for every record that fits. Fields the schema does not name are left in `value` only.

Bodies are parsed by Arrow's JSON reader a batch at a time, as newline-delimited JSON (a
body's own line ends are whitespace between tokens, as JSON allows no other: when a batch
fails they become spaces); a batch with a record that does not fit is halved until the
records that do not are found one by one, so the same parser decides every record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

SCHEMA_ARGUMENT = "x-table-schema"
SCHEMA_POLICY_KEY = "table-schema"
ERROR_COLUMN = "schema_error"
# type -> (Arrow type, Spark SQL type)
TYPES: Mapping[str, tuple[pa.DataType, str]] = {
    "string": (pa.string(), "STRING"),
    "long": (pa.int64(), "BIGINT"),
    "double": (pa.float64(), "DOUBLE"),
    "boolean": (pa.bool_(), "BOOLEAN"),
    "timestamp": (pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
}
OPTIONAL = "?"
# The columns every table has (the Spark source's, spark/records.py's ARROW_SCHEMA; a
# test holds the two equal): a field may not take one of their names.
SOURCE_COLUMNS = ("key", "value", "stream", "topic", "partition", "offset", "timestamp",
                  "timestampType", "headers", "properties")
_NO_BODY = "no body"
_IN_ROW = re.compile(r" in row \d+$")  # Arrow's, of the one line it was handed


class SchemaError(ValueError):
    """A declared schema that is not one; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class BodyField:
    name: str
    type: str
    optional: bool

    @property
    def arrow(self) -> pa.Field:
        return pa.field(self.name, TYPES[self.type][0])


@dataclass(frozen=True, slots=True)
class BodySchema:
    """The declared fields of a stream's JSON bodies, in their order."""

    fields: tuple[BodyField, ...]

    def arrow_fields(self) -> list[pa.Field]:
        """The columns the schema adds: each field's, then `schema_error`."""
        return [*(field.arrow for field in self.fields), pa.field(ERROR_COLUMN, pa.string())]

    def spark_ddl(self) -> str:
        return ", ".join([*(f"`{field.name}` {TYPES[field.type][1]}" for field in self.fields),
                          f"{ERROR_COLUMN} STRING"])

    def as_json(self) -> dict[str, str]:
        return {field.name: field.type + (OPTIONAL if field.optional else "")
                for field in self.fields}

    def columns(self, values: pa.Array) -> list[pa.Array]:
        """The typed columns and `schema_error` of rows whose bodies are `values`."""
        rows = len(values)
        lines, errors = _lines(values)
        table, failed = _parse(lines, pa.schema([f.arrow for f in self.fields]), 0,
                               whole=True)
        parsed = {name: table.column(name).combine_chunks() for name in table.column_names}
        errors.update(failed)
        for field in self.fields:
            if field.optional or not parsed[field.name].null_count:
                continue
            for row in pc.indices_nonzero(pc.is_null(parsed[field.name])).to_pylist():
                errors.setdefault(row, f"field '{field.name}' is missing or null")
        if not errors:
            return [*(parsed[field.name] for field in self.fields), pa.nulls(rows, pa.string())]
        why = pa.array([errors.get(row) for row in range(rows)], pa.string())
        fits = pc.is_null(why)
        return [*(pc.if_else(fits, parsed[field.name], pa.scalar(None, field.arrow.type))
                  for field in self.fields), why]


def parse_schema(value: Any) -> BodySchema:
    """The schema `value` declares (a JSON object or its text); SchemaError, saying
    what is wrong, for anything else."""
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError as error:
            raise SchemaError(f"{SCHEMA_ARGUMENT} is not JSON: {error}") from None
    if not isinstance(value, Mapping) or not value:
        raise SchemaError(f"{SCHEMA_ARGUMENT} must be a JSON object of field name to "
                              f"type, as {{\"id\": \"long\", \"note\": \"string?\"}}")
    fields = []
    for name, kind in value.items():
        if not isinstance(name, str) or not name or name in SOURCE_COLUMNS \
                or name == ERROR_COLUMN:
            raise SchemaError(f"{SCHEMA_ARGUMENT}: field name {name!r} is empty or a "
                                  "column the table has already")
        optional = isinstance(kind, str) and kind.endswith(OPTIONAL)
        base = kind.removesuffix(OPTIONAL) if isinstance(kind, str) else kind
        if base not in TYPES:
            raise SchemaError(f"{SCHEMA_ARGUMENT}: field {name!r} has type {kind!r}, not "
                                  f"one of {', '.join(TYPES)} (with '?' when optional)")
        fields.append(BodyField(name, base, optional))
    return BodySchema(tuple(fields))


def is_body_schema(value: Any) -> bool:
    try:
        parse_schema(value)
    except SchemaError:
        return False
    return True


def body_schema(arguments: Mapping[str, Any], definition: Mapping[str, Any]
                ) -> BodySchema | None:
    """The stream's declared body schema: its own argument, else its policy's."""
    value = arguments.get(SCHEMA_ARGUMENT, definition.get(SCHEMA_POLICY_KEY))
    if value is None:
        return None
    try:
        return parse_schema(value)
    except SchemaError:  # a policy's was checked when set; a bad one names no schema
        return None


def _lines(values: pa.Array) -> tuple[pa.Array, dict[int, str]]:
    """The bodies as lines of newline-delimited JSON, one a row, and the rows that are not
    a JSON object (no body, not UTF-8, not in braces), with why: their lines an empty object
    (Arrow's reader is handed objects only: a body of `null` alone crashes it)."""
    errors = {row: _NO_BODY for row in pc.indices_nonzero(pc.is_null(values)).to_pylist()}
    text = values.cast(pa.binary())
    try:
        strings = text.cast(pa.string())
    except pa.ArrowInvalid:  # rare: find the rows one by one
        for row, body in enumerate(text.to_pylist()):
            try:
                body is None or body.decode()
            except UnicodeDecodeError:
                errors[row] = "not UTF-8"
        strings = pc.if_else(_marked(errors, len(text)), None, text).cast(pa.string())
    trimmed = pc.utf8_trim_whitespace(strings)
    braced = pc.and_(pc.starts_with(trimmed, "{"), pc.ends_with(trimmed, "}"))
    for row in pc.indices_nonzero(pc.invert(pc.fill_null(braced, True))).to_pylist():
        errors[row] = "not a JSON object"
    if errors:
        strings = pc.if_else(_marked(errors, len(text)), None, strings)
    return _joined(pc.fill_null(strings, "{}")), errors


def _joined(strings: pa.Array) -> pa.Array:
    """`strings` each followed by a newline (its data is the lines)."""
    return pc.binary_join_element_wise(strings, "", "\n")


def _one_line_each(lines: pa.Array) -> pa.Array:
    """`lines` whose bodies' own line ends (whitespace between JSON tokens, as JSON allows
    no other) are spaces."""
    bodies = pc.utf8_slice_codeunits(lines, 0, -1)
    for end in ("\n", "\r"):
        if pc.any(pc.match_substring(bodies, end)).as_py():
            bodies = pc.replace_substring(bodies, end, " ")
    return _joined(bodies)


def _marked(errors: dict[int, str], rows: int) -> pa.Array:
    """A boolean mask of the rows in `errors`."""
    mask = [False] * rows
    for row in errors:
        mask[row] = True
    return pa.array(mask, pa.bool_())


def _bytes(lines: pa.Array) -> pa.Buffer:
    """The bytes of `lines` (a slice of a binary array), without a copy."""
    offsets = pa.Array.from_buffers(pa.int32(), len(lines) + 1, [None, lines.buffers()[1]],
                                    offset=lines.offset)
    first, last = offsets[0].as_py(), offsets[len(lines)].as_py()
    data = lines.buffers()[2]
    return pa.py_buffer(b"") if data is None else data.slice(first, last - first)


def _parse(lines: pa.Array, schema: pa.Schema, first: int, whole: bool = False
           ) -> tuple[pa.Table, dict[int, str]]:
    """The typed columns of `lines` (rows from `first` on), and the rows that do not parse,
    with why: all lines at once, else each half. The `whole` batch is tried first as it
    is: a body with line ends of its own gives more rows or fails (a line of it alone is no
    JSON object), and is then made one line before the halving."""
    rows = len(lines)
    data = _bytes(lines)
    try:
        table = pa_json.read_json(pa.BufferReader(data), read_options=pa_json.ReadOptions(
            use_threads=False, block_size=max(data.size, 1) + 1),
            parse_options=pa_json.ParseOptions(explicit_schema=schema,
                                               unexpected_field_behavior="ignore"))
    except pa.ArrowInvalid as error:
        failed = str(error)
    else:
        if table.num_rows == rows:
            return table, {}
        failed = "not one JSON object"
    if whole:
        return _parse(_one_line_each(lines), schema, first)
    if rows == 1:
        return (pa.table({field.name: pa.nulls(1, field.type) for field in schema}),
                {first: "does not fit: " + _IN_ROW.sub("", failed)})
    half = rows // 2
    head, head_errors = _parse(lines.slice(0, half), schema, first)
    tail, tail_errors = _parse(lines.slice(half), schema, first + half)
    return pa.concat_tables([head, tail]), head_errors | tail_errors
