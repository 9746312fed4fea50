"""AMQP 0-9-1 primitive types: strings, field tables, and the base class of generated methods.

Decoders take a ``memoryview`` and an offset and return ``(value, new_offset)``; they raise
``MalformedData`` (or ``struct.error`` on a short buffer, which the codec maps the same way).
Encoders append to a ``bytearray`` so a whole frame is built in one buffer.

Python types used for AMQP values:
- shortstr -> ``str`` (UTF-8; invalid bytes survive as lone surrogates via "surrogateescape",
  so any name round-trips byte for byte)
- longstr method fields -> ``bytes`` (SASL responses and the like are binary)
- table 'S' long string -> ``str`` decoded the same way as shortstr (pika sends ``str`` as 'S');
  table 'x' byte array -> ``bytes``
- table 'T' -> aware UTC ``datetime``; the basic ``timestamp`` property -> ``int`` seconds
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable
from struct import Struct
from struct import error as StructError
from typing import Any, ClassVar, Self

U8 = Struct("B")
U16 = Struct(">H")
U32 = Struct(">I")
U64 = Struct(">Q")
_DECIMAL = Struct(">Bi")  # scale, signed mantissa: what pika and pamqp send

# Nesting deeper than this is hostile, not useful; it also keeps recursion bounded.
MAX_TABLE_DEPTH = 64

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class MalformedData(ValueError):
    """The bytes do not follow the AMQP grammar."""


class Method:
    """Base of the generated method classes (see ``methods.py``)."""

    __slots__ = ()
    NAME: ClassVar[str]  # "basic.publish"
    CLASS_ID: ClassVar[int]
    METHOD_ID: ClassVar[int]
    INDEX: ClassVar[int]  # CLASS_ID << 16 | METHOD_ID, the key of METHODS_BY_INDEX
    SYNCHRONOUS: ClassVar[bool]
    HAS_CONTENT: ClassVar[bool]
    FIELDS: ClassVar[tuple[tuple[str, str], ...]]  # (attribute, primitive type), in wire order

    @classmethod
    def decode(cls, buf: memoryview) -> Self:
        """Decode the arguments that follow the class and method ids."""
        raise NotImplementedError

    def encode_into(self, out: bytearray) -> None:
        """Append class id, method id and arguments."""
        raise NotImplementedError

    def encode(self) -> bytes:
        out = bytearray()
        self.encode_into(out)
        return bytes(out)


def expect_end(buf: memoryview, offset: int) -> None:
    if offset != len(buf):
        raise MalformedData(f"{len(buf) - offset} unexpected trailing bytes")


def _decode_text(raw: memoryview) -> str:
    return str(raw, "utf-8", "surrogateescape")


def _encode_text(value: str) -> bytes:
    return value.encode("utf-8", "surrogateescape")


def _slice(buf: memoryview, start: int, length: int) -> memoryview:
    end = start + length
    if end > len(buf):
        raise MalformedData("length runs past the end of the frame")
    return buf[start:end]


def read_shortstr(buf: memoryview, offset: int) -> tuple[str, int]:
    length = buf[offset]
    return _decode_text(_slice(buf, offset + 1, length)), offset + 1 + length


def read_longstr(buf: memoryview, offset: int) -> tuple[bytes, int]:
    (length,) = U32.unpack_from(buf, offset)
    return bytes(_slice(buf, offset + 4, length)), offset + 4 + length


def read_table(buf: memoryview, offset: int, depth: int = 0) -> tuple[dict[str, Any], int]:
    (size,) = U32.unpack_from(buf, offset)
    body = _slice(buf, offset + 4, size)
    table = {}
    pos = 0
    while pos < size:
        key, pos = read_shortstr(body, pos)
        table[key], pos = _read_value(body, pos, depth)
    return table, offset + 4 + size


def _read_array(buf: memoryview, offset: int, depth: int) -> tuple[list[Any], int]:
    (size,) = U32.unpack_from(buf, offset)
    body = _slice(buf, offset + 4, size)
    items = []
    pos = 0
    while pos < size:
        item, pos = _read_value(body, pos, depth)
        items.append(item)
    return items, offset + 4 + size


_Reader = Callable[[memoryview, int, int], tuple[Any, int]]


def _read_nested(reader: _Reader) -> _Reader:
    def read(buf: memoryview, offset: int, depth: int) -> tuple[Any, int]:
        if depth >= MAX_TABLE_DEPTH:
            raise MalformedData(f"field tables nested deeper than {MAX_TABLE_DEPTH}")
        return reader(buf, offset, depth + 1)

    return read


def _read_bool(buf: memoryview, offset: int, _depth: int) -> tuple[bool, int]:
    return buf[offset] != 0, offset + 1


def _read_decimal(buf: memoryview, offset: int, _depth: int) -> tuple[decimal.Decimal, int]:
    scale, mantissa = _DECIMAL.unpack_from(buf, offset)
    return decimal.Decimal(mantissa).scaleb(-scale), offset + _DECIMAL.size


def _read_long_text(buf: memoryview, offset: int, _depth: int) -> tuple[str, int]:
    (length,) = U32.unpack_from(buf, offset)
    return _decode_text(_slice(buf, offset + 4, length)), offset + 4 + length


def _read_bytes(buf: memoryview, offset: int, _depth: int) -> tuple[bytes, int]:
    return read_longstr(buf, offset)


def _read_timestamp(buf: memoryview, offset: int, _depth: int) -> tuple[datetime.datetime, int]:
    (seconds,) = U64.unpack_from(buf, offset)
    try:
        return _EPOCH + datetime.timedelta(seconds=seconds), offset + 8
    except OverflowError as exc:
        raise MalformedData(f"timestamp {seconds} out of range") from exc


def _read_void(_buf: memoryview, offset: int, _depth: int) -> tuple[None, int]:
    return None, offset


# RabbitMQ's field types (not the 0-9-1 spec's, which differ for 's', 'U', 'L').
_FIXED_VALUES = {
    ord(tag): Struct(fmt)
    for tag, fmt in {
        "b": ">b", "B": ">B", "s": ">h", "u": ">H", "I": ">i",
        "i": ">I", "l": ">q", "f": ">f", "d": ">d",
    }.items()
}  # fmt: skip
_VARIABLE_VALUES = {
    ord("t"): _read_bool,
    ord("D"): _read_decimal,
    ord("S"): _read_long_text,
    ord("x"): _read_bytes,
    ord("T"): _read_timestamp,
    ord("V"): _read_void,
    ord("A"): _read_nested(_read_array),
    ord("F"): _read_nested(read_table),
}


def _read_value(buf: memoryview, offset: int, depth: int) -> tuple[Any, int]:
    tag = buf[offset]
    offset += 1
    fixed = _FIXED_VALUES.get(tag)
    if fixed is not None:
        return fixed.unpack_from(buf, offset)[0], offset + fixed.size
    reader = _VARIABLE_VALUES.get(tag)
    if reader is None:
        raise MalformedData(f"unknown field value type {chr(tag)!r}")
    return reader(buf, offset, depth)


def write_shortstr(out: bytearray, value: str) -> None:
    raw = _encode_text(value)
    if len(raw) > 255:
        raise ValueError(f"shortstr longer than 255 bytes: {value[:40]!r}...")
    out.append(len(raw))
    out += raw


def write_longstr(out: bytearray, value: bytes | str) -> None:
    raw = _encode_text(value) if isinstance(value, str) else value
    out += U32.pack(len(raw))
    out += raw


def write_table(out: bytearray, table: dict[str, Any] | None) -> None:
    size_at = len(out)
    out += b"\0\0\0\0"  # patched below once the size is known
    for key, value in (table or {}).items():
        write_shortstr(out, key)
        _write_value(out, value)
    U32.pack_into(out, size_at, len(out) - size_at - 4)


def encode_table(table: dict[str, Any]) -> bytes:
    out = bytearray()
    write_table(out, table)
    return bytes(out)


def _write_array(out: bytearray, items: list[Any] | tuple[Any, ...]) -> None:
    size_at = len(out)
    out += b"\0\0\0\0"
    for item in items:
        _write_value(out, item)
    U32.pack_into(out, size_at, len(out) - size_at - 4)


def _write_int(out: bytearray, value: int) -> None:
    if _INT32_MIN <= value <= _INT32_MAX:
        out += b"I"
        out += _FIXED_VALUES[ord("I")].pack(value)
    elif _INT64_MIN <= value <= _INT64_MAX:
        out += b"l"
        out += _FIXED_VALUES[ord("l")].pack(value)
    else:
        raise ValueError(f"integer {value} does not fit a signed 64-bit table value")


def _write_decimal(out: bytearray, value: decimal.Decimal) -> None:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"cannot encode {value} as an AMQP decimal")
    mantissa = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    if exponent > 0:
        mantissa, exponent = mantissa * 10**exponent, 0
    out += b"D"
    try:
        out += _DECIMAL.pack(-exponent, mantissa)
    except StructError as exc:
        raise ValueError(f"decimal {value} exceeds AMQP's scale or 32-bit mantissa") from exc


def _write_timestamp(out: bytearray, value: datetime.datetime) -> None:
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)  # naive means UTC, as pika and pamqp assume
    out += b"T"
    out += U64.pack(int(value.timestamp()))


def _write_value(out: bytearray, value: Any) -> None:
    # The Python-type -> AMQP-type mapping RabbitMQ uses; bool before int (bool is an int).
    if isinstance(value, str):
        out += b"S"
        write_longstr(out, value)
    elif isinstance(value, bool):
        out += b"t\x01" if value else b"t\x00"
    elif isinstance(value, int):
        _write_int(out, value)
    elif isinstance(value, dict):
        out += b"F"
        write_table(out, value)
    elif isinstance(value, list | tuple):
        out += b"A"
        _write_array(out, value)
    elif isinstance(value, bytes | bytearray | memoryview):
        out += b"x"
        write_longstr(out, bytes(value))
    elif isinstance(value, float):
        out += b"d"
        out += _FIXED_VALUES[ord("d")].pack(value)
    elif isinstance(value, datetime.datetime):
        _write_timestamp(out, value)
    elif value is None:
        out += b"V"
    elif isinstance(value, decimal.Decimal):
        _write_decimal(out, value)
    else:
        raise TypeError(f"cannot encode {type(value).__name__} in an AMQP field table")
