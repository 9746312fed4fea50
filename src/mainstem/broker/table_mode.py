"""Whether a stream is also written as a table (issue 42): the `x-table` argument (`table`
on the stream protocol and as a policy key), checked when the stream is declared.

The only format is "parquet": Parquet data files with Iceberg v2 metadata in the tier
(`broker/tables.py`), optionally with typed columns from a declared schema of the JSON
bodies (`x-table-schema`, `formats/table_schema.py`). A stream's own argument wins over a
policy's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mainstem.broker.errors import InvalidArgument
from mainstem.formats.table_schema import SCHEMA_ARGUMENT, SchemaError, parse_schema

TABLE_ARGUMENT = "x-table"
TABLE_POLICY_KEY = "table"
TABLE_FORMATS = ("parquet",)


def is_table_format(value: Any) -> bool:
    return isinstance(value, str) and value in TABLE_FORMATS


def check_table_argument(arguments: Mapping[str, Any], writes_tables: bool) -> None:
    """InvalidArgument unless the stream's `x-table`, if given, names a known format and
    the broker `writes_tables` (it has a tier to write them into), and its
    `x-table-schema`, if given, is a schema (`formats/table_schema.py`)."""
    schema = arguments.get(SCHEMA_ARGUMENT)
    if schema is not None:
        try:
            parse_schema(schema)
        except SchemaError as error:
            raise InvalidArgument(str(error)) from None
    value = arguments.get(TABLE_ARGUMENT)
    if value is None:
        return
    if not is_table_format(value):
        raise InvalidArgument(f"{TABLE_ARGUMENT} must be one of "
                              f"{', '.join(map(repr, TABLE_FORMATS))}, not {value!r}")
    if not writes_tables:
        raise InvalidArgument(f"{TABLE_ARGUMENT} needs a tier to write the table into: "
                              "this broker has none (--tier-url)")


def table_format(arguments: Mapping[str, Any], definition: Mapping[str, Any]) -> str | None:
    """The stream's table format: its own argument, else its policy's; None: no table."""
    value = arguments.get(TABLE_ARGUMENT, definition.get(TABLE_POLICY_KEY))
    return value if is_table_format(value) else None
