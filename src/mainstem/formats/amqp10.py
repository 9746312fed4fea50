"""AMQP 1.0 type system and message format: the stored format of stream messages.

Stream clients publish AMQP 1.0 encoded messages (a run of described sections) and the log
keeps those bytes unchanged; everything here is pure and sans-IO.

Python representation of AMQP 1.0 values (decoding produces exactly these, encoding accepts
them, so ``decode_value(encode_value(v)) == v`` with the same types):

======================  ===========================================================
AMQP type               Python
======================  ===========================================================
null                    ``None``
boolean                 ``bool``
ubyte/ushort/uint/ulong ``UByte`` / ``UShort`` / ``UInt`` / ``ULong`` (``int`` subclasses)
byte/short              ``Byte`` / ``Short`` (``int`` subclasses)
int                     plain ``int`` (plain ints encode as int, or long if they need 64 bits)
long                    ``Long`` (``int`` subclass)
float / double          ``Float32`` (``float`` subclass) / plain ``float``
decimal32/64/128        ``Decimal32`` / ``Decimal64`` / ``Decimal128`` (raw ``bytes``)
char                    ``Char`` (one-character ``str`` subclass)
timestamp               ``Timestamp`` (``int`` ms since the Unix epoch); ``datetime`` encodes too
uuid                    ``uuid.UUID``
binary                  ``bytes`` (``bytearray``/``memoryview`` encode too)
string                  plain ``str``
symbol                  ``Symbol`` (``str`` subclass)
list                    ``list`` (``tuple`` encodes too)
map                     ``dict``
array                   ``Array`` (``list`` subclass; elements typed as above)
described               ``Described(descriptor, value)``
======================  ===========================================================

Decoding is bounds-checked and raises only ``Amqp10DecodeError``; nesting is capped at
``MAX_DEPTH``. Encoding picks the smallest encoding (smalluint, str8, list8, ...), and
``Amqp10EncodeError`` reports values that cannot be encoded.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from struct import Struct
from typing import Any, TypeVar

_T = TypeVar("_T")

MAX_DEPTH = 64  # compound/described nesting; deeper is hostile and would exhaust the stack
# Zero-width array elements (null, true, list0...) cost no bytes, so a tiny array could claim
# billions of them; cap the count instead.
MAX_ZERO_WIDTH_ELEMENTS = 65536


class Amqp10DecodeError(ValueError):
    """The bytes are not a well-formed AMQP 1.0 value or message."""


class Amqp10EncodeError(ValueError):
    """The value cannot be represented in AMQP 1.0."""


# --- typed wrappers ---------------------------------------------------------------------------


class _Tagged:
    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({super().__repr__()})"


class UByte(_Tagged, int):
    __slots__ = ()


class UShort(_Tagged, int):
    __slots__ = ()


class UInt(_Tagged, int):
    __slots__ = ()


class ULong(_Tagged, int):
    __slots__ = ()


class Byte(_Tagged, int):
    __slots__ = ()


class Short(_Tagged, int):
    __slots__ = ()


class Long(_Tagged, int):
    __slots__ = ()


class Timestamp(_Tagged, int):
    """Milliseconds since the Unix epoch."""

    __slots__ = ()


class Float32(_Tagged, float):
    __slots__ = ()


class Char(_Tagged, str):
    __slots__ = ()


class Symbol(_Tagged, str):
    __slots__ = ()


class Decimal32(_Tagged, bytes):
    __slots__ = ()


class Decimal64(_Tagged, bytes):
    __slots__ = ()


class Decimal128(_Tagged, bytes):
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Described:
    descriptor: Any
    value: Any


class Array(list[Any]):
    """An AMQP array: elements share one type. ``code`` is the element constructor seen when
    decoding; encoding only uses it to type an empty array (non-empty ones are typed by their
    first element)."""

    __slots__ = ("code",)

    def __init__(self, items: Any = (), code: int | None = None) -> None:
        super().__init__(items)
        self.code = code

    def __repr__(self) -> str:
        return f"Array({list.__repr__(self)}, code={self.code!r})"


# --- encoding ---------------------------------------------------------------------------------

_U8 = Struct(">B")
_I8 = Struct(">b")
_U16 = Struct(">H")
_I16 = Struct(">h")
_U32 = Struct(">I")
_I32 = Struct(">i")
_U64 = Struct(">Q")
_I64 = Struct(">q")
_F32 = Struct(">f")
_F64 = Struct(">d")
_SIZE8_COUNT8 = Struct(">BB")
_SIZE32_COUNT32 = Struct(">II")

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

_Writer = Callable[[bytearray, Any], None]


def _packer(st: Struct) -> _Writer:
    pack = st.pack

    def write(out: bytearray, value: Any) -> None:
        out += pack(value)

    return write


def _raw(width: int) -> _Writer:
    def write(out: bytearray, value: bytes) -> None:
        if len(value) != width:
            raise Amqp10EncodeError(f"expected {width} raw bytes, got {len(value)}")
        out += value

    return write


def _text_bytes(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _write_vbin8(out: bytearray, value: Any) -> None:
    raw = _text_bytes(value)
    out += _U8.pack(len(raw))
    out += raw


def _write_vbin32(out: bytearray, value: Any) -> None:
    raw = _text_bytes(value)
    out += _U32.pack(len(raw))
    out += raw


def _write_nothing(out: bytearray, value: Any) -> None:
    pass


def _write_bool_octet(out: bytearray, value: Any) -> None:
    out.append(1 if value else 0)


def _write_char(out: bytearray, value: str) -> None:
    out += _U32.pack(ord(value))


def _write_timestamp(out: bytearray, value: Any) -> None:
    out += _I64.pack(_timestamp_ms(value))


def _write_uuid(out: bytearray, value: uuid.UUID) -> None:
    out += value.bytes


def _write_list32(out: bytearray, items: Any) -> None:
    body = _encode_items(items)
    out += _SIZE32_COUNT32.pack(len(body) + 4, len(items))
    out += body


def _write_map32(out: bytearray, mapping: Any) -> None:
    body = _encode_items(_flatten(mapping))
    out += _SIZE32_COUNT32.pack(len(body) + 4, 2 * len(mapping))
    out += body


def _write_array32(out: bytearray, items: Any) -> None:
    body = _array_body(items)
    out += _SIZE32_COUNT32.pack(len(body) + 4, len(items))
    out += body


# Payload writers (no constructor byte) for the element encodings arrays use.
_ELEMENT_WRITERS: dict[int, _Writer] = {
    0x40: _write_nothing,
    0x56: _write_bool_octet,
    0x50: _packer(_U8),
    0x51: _packer(_I8),
    0x60: _packer(_U16),
    0x61: _packer(_I16),
    0x70: _packer(_U32),
    0x71: _packer(_I32),
    0x72: _packer(_F32),
    0x73: _write_char,
    0x74: _raw(4),
    0x80: _packer(_U64),
    0x81: _packer(_I64),
    0x82: _packer(_F64),
    0x83: _write_timestamp,
    0x84: _raw(8),
    0x94: _raw(16),
    0x98: _write_uuid,
    0xA0: _write_vbin8,
    0xA1: _write_vbin8,
    0xA3: _write_vbin8,
    0xB0: _write_vbin32,
    0xB1: _write_vbin32,
    0xB3: _write_vbin32,
    0xD0: _write_list32,
    0xD1: _write_map32,
    0xF0: _write_array32,
}

# Array element type by Python type; fixed-width, so every element fits.
_FIXED_ELEMENT_CODE: dict[type, int] = {
    type(None): 0x40,
    bool: 0x56,
    UByte: 0x50,
    Byte: 0x51,
    UShort: 0x60,
    Short: 0x61,
    UInt: 0x70,
    Float32: 0x72,
    Char: 0x73,
    Decimal32: 0x74,
    ULong: 0x80,
    Long: 0x81,
    float: 0x82,
    Timestamp: 0x83,
    datetime.datetime: 0x83,
    Decimal64: 0x84,
    Decimal128: 0x94,
    uuid.UUID: 0x98,
    list: 0xD0,
    tuple: 0xD0,
    dict: 0xD1,
    Array: 0xF0,
}
# Variable-width element types: (8-bit-length code, 32-bit-length code).
_VARIABLE_ELEMENT_CODES: dict[type, tuple[int, int]] = {
    bytes: (0xA0, 0xB0),
    bytearray: (0xA0, 0xB0),
    memoryview: (0xA0, 0xB0),
    str: (0xA1, 0xB1),
    Symbol: (0xA3, 0xB3),
}
# Decoded element constructors mapped to the canonical one used to re-encode an empty array.
_CANONICAL_ELEMENT_CODE = {
    0x41: 0x56, 0x42: 0x56, 0x43: 0x70, 0x52: 0x70, 0x44: 0x80, 0x53: 0x80,
    0x54: 0x71, 0x55: 0x81, 0x45: 0xD0, 0xC0: 0xD0, 0xC1: 0xD1, 0xE0: 0xF0,
}  # fmt: skip


def _element_code(items: list[Any]) -> int:
    first = items[0]
    kind = type(first)
    if kind is int:
        return 0x71 if all(_INT32_MIN <= v <= _INT32_MAX for v in items) else 0x81
    code = _FIXED_ELEMENT_CODE.get(kind)
    if code is not None:
        return code
    codes = _VARIABLE_ELEMENT_CODES.get(kind)
    if codes is None:
        raise Amqp10EncodeError(f"cannot encode {kind.__name__} as an array element")
    fits_8bit = all(len(_text_bytes(v)) < 256 for v in items)
    return codes[0] if fits_8bit else codes[1]


def _array_body(items: list[Any]) -> bytearray:
    """Element constructor (with descriptor for described elements) then element payloads."""
    body = bytearray()
    if not items:
        code = getattr(items, "code", None) or 0x40
        if _DECODERS[code] is None:
            raise Amqp10EncodeError(f"unknown array element constructor {code:#04x}")
        body.append(_CANONICAL_ELEMENT_CODE.get(code, code))
        return body
    values = items
    if isinstance(items[0], Described):
        descriptor = items[0].descriptor
        if any(not isinstance(v, Described) or v.descriptor != descriptor for v in items):
            raise Amqp10EncodeError("described array elements must share one descriptor")
        body.append(0x00)
        _encode_value(body, descriptor)
        values = [v.value for v in items]
    kinds = {type(v) for v in values}
    if len(kinds) > 1 and not kinds <= {list, tuple} and not kinds <= {bytes, bytearray}:
        names = sorted(k.__name__ for k in kinds)
        raise Amqp10EncodeError(f"array elements of mixed types: {names}")
    code = _element_code(values)
    body.append(code)
    write = _ELEMENT_WRITERS[code]
    for value in values:
        write(body, value)
    return body


def _flatten(mapping: dict[Any, Any]) -> list[Any]:
    flat: list[Any] = []
    for key, value in mapping.items():
        flat.append(key)
        flat.append(value)
    return flat


def _encode_items(items: Any) -> bytearray:
    body = bytearray()
    for item in items:
        _encode_value(body, item)
    return body


def _write_compound(out: bytearray, small: int, large: int, count: int, body: bytearray) -> None:
    if count < 256 and len(body) < 255:
        out.append(small)
        out += _SIZE8_COUNT8.pack(len(body) + 1, count)
    else:
        out.append(large)
        out += _SIZE32_COUNT32.pack(len(body) + 4, count)
    out += body


def _enc_list(out: bytearray, items: Any) -> None:
    if not items:
        out.append(0x45)
        return
    _write_compound(out, 0xC0, 0xD0, len(items), _encode_items(items))


def _enc_map(out: bytearray, mapping: dict[Any, Any]) -> None:
    _write_compound(out, 0xC1, 0xD1, 2 * len(mapping), _encode_items(_flatten(mapping)))


def _enc_array(out: bytearray, items: list[Any]) -> None:
    _write_compound(out, 0xE0, 0xF0, len(items), _array_body(items))


def _enc_variable(small: int, large: int) -> _Writer:
    def write(out: bytearray, value: Any) -> None:
        raw = _text_bytes(value)
        if len(raw) < 256:
            out.append(small)
            out += _U8.pack(len(raw))
        else:
            out.append(large)
            out += _U32.pack(len(raw))
        out += raw

    return write


def _enc_fixed(code: int, write: _Writer) -> _Writer:
    def encode(out: bytearray, value: Any) -> None:
        out.append(code)
        write(out, value)

    return encode


def _enc_none(out: bytearray, value: None) -> None:
    out.append(0x40)


def _enc_bool(out: bytearray, value: bool) -> None:
    out.append(0x41 if value else 0x42)


def _enc_int(out: bytearray, value: int) -> None:
    if -128 <= value <= 127:
        out.append(0x54)
        out += _I8.pack(value)
    elif _INT32_MIN <= value <= _INT32_MAX:
        out.append(0x71)
        out += _I32.pack(value)
    else:
        out.append(0x81)
        out += _I64.pack(value)


def _enc_small_unsigned(zero: int, small: int, large: int, st: Struct) -> _Writer:
    def encode(out: bytearray, value: int) -> None:
        if value == 0:
            out.append(zero)
        elif 0 < value < 256:
            out.append(small)
            out.append(value)
        else:
            out.append(large)
            out += st.pack(value)

    return encode


def _enc_long(out: bytearray, value: int) -> None:
    if -128 <= value <= 127:
        out.append(0x55)
        out += _I8.pack(value)
    else:
        out.append(0x81)
        out += _I64.pack(value)


def _enc_described(out: bytearray, value: Described) -> None:
    out.append(0x00)
    _encode_value(out, value.descriptor)
    _encode_value(out, value.value)


_ENCODERS: dict[type, _Writer] = {
    type(None): _enc_none,
    bool: _enc_bool,
    int: _enc_int,
    UByte: _enc_fixed(0x50, _packer(_U8)),
    Byte: _enc_fixed(0x51, _packer(_I8)),
    UShort: _enc_fixed(0x60, _packer(_U16)),
    Short: _enc_fixed(0x61, _packer(_I16)),
    UInt: _enc_small_unsigned(0x43, 0x52, 0x70, _U32),
    ULong: _enc_small_unsigned(0x44, 0x53, 0x80, _U64),
    Long: _enc_long,
    Float32: _enc_fixed(0x72, _packer(_F32)),
    float: _enc_fixed(0x82, _packer(_F64)),
    Char: _enc_fixed(0x73, _write_char),
    Decimal32: _enc_fixed(0x74, _raw(4)),
    Decimal64: _enc_fixed(0x84, _raw(8)),
    Decimal128: _enc_fixed(0x94, _raw(16)),
    Timestamp: _enc_fixed(0x83, _write_timestamp),
    datetime.datetime: _enc_fixed(0x83, _write_timestamp),
    uuid.UUID: _enc_fixed(0x98, _write_uuid),
    bytes: _enc_variable(0xA0, 0xB0),
    bytearray: _enc_variable(0xA0, 0xB0),
    memoryview: _enc_variable(0xA0, 0xB0),
    str: _enc_variable(0xA1, 0xB1),
    Symbol: _enc_variable(0xA3, 0xB3),
    list: _enc_list,
    tuple: _enc_list,
    dict: _enc_map,
    Array: _enc_array,
    Described: _enc_described,
}


def _encode_value(out: bytearray, value: Any) -> None:
    encode = _ENCODERS.get(type(value))
    if encode is None:
        raise Amqp10EncodeError(f"cannot encode {type(value).__name__} as AMQP 1.0")
    encode(out, value)


def _timestamp_ms(value: Any) -> int:
    if isinstance(value, datetime.datetime):
        naive = value.tzinfo is None
        aware = value.replace(tzinfo=datetime.UTC) if naive else value  # naive means UTC
        return (aware - _EPOCH) // datetime.timedelta(milliseconds=1)
    return int(value)


def encode_value(value: Any) -> bytes:
    """Encode one AMQP 1.0 value (constructor included)."""
    out = bytearray()
    try:
        _encode_value(out, value)
    except (struct.error, OverflowError, TypeError, UnicodeError) as exc:
        raise Amqp10EncodeError(str(exc)) from exc
    return bytes(out)


# --- decoding ---------------------------------------------------------------------------------

# A decoder takes (buffer, position after the constructor, end of the enclosing value, depth)
# and returns (value, position after the value); `end` keeps compound members inside their parent.
_Decoder = Callable[[memoryview, int, int, int], tuple[Any, int]]


def _truncated() -> Amqp10DecodeError:
    return Amqp10DecodeError("value runs past the end of its buffer")


def _dec_constant(value: Any) -> _Decoder:
    def decode(buf: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
        return value, pos

    return decode


def _dec_empty_list(buf: memoryview, pos: int, end: int, depth: int) -> tuple[list[Any], int]:
    return [], pos


def _dec_fixed(st: Struct, wrap: Callable[[Any], Any] | None = None) -> _Decoder:
    size = st.size
    unpack = st.unpack_from

    if wrap is None:

        def decode(buf: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
            stop = pos + size
            if stop > end:
                raise _truncated()
            return unpack(buf, pos)[0], stop

    else:

        def decode(buf: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
            stop = pos + size
            if stop > end:
                raise _truncated()
            return wrap(unpack(buf, pos)[0]), stop

    return decode


def _dec_raw(width: int, wrap: Callable[[memoryview], Any]) -> _Decoder:
    def decode(buf: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
        stop = pos + width
        if stop > end:
            raise _truncated()
        return wrap(buf[pos:stop]), stop

    return decode


def _dec_bool_octet(buf: memoryview, pos: int, end: int, depth: int) -> tuple[bool, int]:
    if pos >= end:
        raise _truncated()
    octet = buf[pos]
    if octet > 1:
        raise Amqp10DecodeError(f"boolean octet {octet:#04x} is neither 0 nor 1")
    return octet == 1, pos + 1


def _dec_char(buf: memoryview, pos: int, end: int, depth: int) -> tuple[Char, int]:
    if pos + 4 > end:
        raise _truncated()
    (code_point,) = _U32.unpack_from(buf, pos)
    if code_point > 0x10FFFF:
        raise Amqp10DecodeError(f"char {code_point:#x} is not a Unicode code point")
    return Char(chr(code_point)), pos + 4


def _bytes(raw: memoryview) -> bytes:
    return bytes(raw)


def _uuid(raw: memoryview) -> uuid.UUID:
    return uuid.UUID(bytes=bytes(raw))


def _utf8(raw: memoryview) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as exc:
        raise Amqp10DecodeError(f"string is not valid UTF-8: {exc}") from None


def _symbol(raw: memoryview) -> Symbol:
    # Symbols are meant to be ASCII; accept any UTF-8 like RabbitMQ, which does not check.
    return Symbol(_utf8(raw))


def _dec_variable(length: Struct, convert: Callable[[memoryview], Any]) -> _Decoder:
    width = length.size
    unpack = length.unpack_from

    def decode(buf: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
        start = pos + width
        if start > end:
            raise _truncated()
        stop = start + unpack(buf, pos)[0]
        if stop > end:
            raise _truncated()
        return convert(buf[start:stop]), stop

    return decode


def _decode_at(buf: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
    if pos >= end:
        raise _truncated()
    decode = _DECODERS[buf[pos]]
    if decode is None:
        raise Amqp10DecodeError(f"unknown constructor {buf[pos]:#04x} at offset {pos}")
    return decode(buf, pos + 1, end, depth)


def _compound_bounds(buf: memoryview, pos: int, end: int, header: Struct) -> tuple[int, int, int]:
    """Read (size, count) and return (count, first member position, end of the compound)."""
    width = header.size
    if pos + width > end:
        raise _truncated()
    size, count = header.unpack_from(buf, pos)
    stop = pos + width // 2 + size  # size counts the bytes after itself, count included
    if size < width // 2 or stop > end:
        raise Amqp10DecodeError(f"compound size {size} does not fit its buffer")
    return count, pos + width, stop


def _decode_members(
    buf: memoryview, pos: int, stop: int, count: int, depth: int
) -> tuple[list[Any], int]:
    if depth >= MAX_DEPTH:
        raise Amqp10DecodeError(f"values nested deeper than {MAX_DEPTH}")
    if count > stop - pos:  # every member takes at least its constructor byte
        raise Amqp10DecodeError(f"{count} members cannot fit in {stop - pos} bytes")
    members = []
    depth += 1
    for _ in range(count):
        value, pos = _decode_at(buf, pos, stop, depth)
        members.append(value)
    if pos != stop:
        raise Amqp10DecodeError(f"{stop - pos} stray bytes at the end of a compound value")
    return members, stop


def _dec_list(header: Struct) -> _Decoder:
    def decode(buf: memoryview, pos: int, end: int, depth: int) -> tuple[list[Any], int]:
        count, pos, stop = _compound_bounds(buf, pos, end, header)
        return _decode_members(buf, pos, stop, count, depth)

    return decode


def _dec_map(header: Struct) -> _Decoder:
    def decode(buf: memoryview, pos: int, end: int, depth: int) -> tuple[dict[Any, Any], int]:
        count, pos, stop = _compound_bounds(buf, pos, end, header)
        if count % 2:
            raise Amqp10DecodeError(f"map with an odd number of members ({count})")
        members, stop = _decode_members(buf, pos, stop, count, depth)
        try:
            return dict(zip(members[::2], members[1::2], strict=True)), stop
        except TypeError:
            raise Amqp10DecodeError("map key is not hashable (a list or map key)") from None

    return decode


def _dec_array(header: Struct) -> _Decoder:
    def decode(buf: memoryview, pos: int, end: int, depth: int) -> tuple[Array, int]:
        count, pos, stop = _compound_bounds(buf, pos, end, header)
        if depth >= MAX_DEPTH:
            raise Amqp10DecodeError(f"values nested deeper than {MAX_DEPTH}")
        if count == 0 and pos == stop:  # tolerate an empty array without element constructor
            return Array(), stop
        descriptors, code, pos = _element_constructor(buf, pos, stop, depth + 1)
        element = _DECODERS[code]
        if element is None or code == 0x00:
            raise Amqp10DecodeError(f"unknown array element constructor {code:#04x}")
        limit = MAX_ZERO_WIDTH_ELEMENTS if code in _ZERO_WIDTH else stop - pos
        if count > limit:
            raise Amqp10DecodeError(f"array of {count} elements cannot fit in its size")
        items = Array(code=code)
        for _ in range(count):
            value, pos = element(buf, pos, stop, depth + 1)
            for descriptor in reversed(descriptors):
                value = Described(descriptor, value)
            items.append(value)
        if pos != stop:
            raise Amqp10DecodeError(f"{stop - pos} stray bytes at the end of an array")
        return items, stop

    return decode


def _element_constructor(
    buf: memoryview, pos: int, stop: int, depth: int
) -> tuple[list[Any], int, int]:
    """Read an array's element constructor: descriptors (outermost first) and format code."""
    descriptors: list[Any] = []
    while True:
        if pos >= stop:
            raise _truncated()
        code = buf[pos]
        pos += 1
        if code != 0x00:
            return descriptors, code, pos
        descriptor, pos = _decode_at(buf, pos, stop, depth + len(descriptors))
        descriptors.append(descriptor)


def _dec_described(buf: memoryview, pos: int, end: int, depth: int) -> tuple[Described, int]:
    if depth >= MAX_DEPTH:
        raise Amqp10DecodeError(f"values nested deeper than {MAX_DEPTH}")
    descriptor, pos = _decode_at(buf, pos, end, depth + 1)
    value, pos = _decode_at(buf, pos, end, depth + 1)
    return Described(descriptor, value), pos


_ZERO_WIDTH = frozenset((0x40, 0x41, 0x42, 0x43, 0x44, 0x45))

_DECODERS: list[_Decoder | None] = [None] * 256
for _code, _decoder in {
    0x00: _dec_described,
    0x40: _dec_constant(None),
    0x41: _dec_constant(True),
    0x42: _dec_constant(False),
    0x43: _dec_constant(UInt(0)),
    0x44: _dec_constant(ULong(0)),
    0x45: _dec_empty_list,
    0x50: _dec_fixed(_U8, UByte),
    0x51: _dec_fixed(_I8, Byte),
    0x52: _dec_fixed(_U8, UInt),
    0x53: _dec_fixed(_U8, ULong),
    0x54: _dec_fixed(_I8),
    0x55: _dec_fixed(_I8, Long),
    0x56: _dec_bool_octet,
    0x60: _dec_fixed(_U16, UShort),
    0x61: _dec_fixed(_I16, Short),
    0x70: _dec_fixed(_U32, UInt),
    0x71: _dec_fixed(_I32),
    0x72: _dec_fixed(_F32, Float32),
    0x73: _dec_char,
    0x74: _dec_raw(4, Decimal32),
    0x80: _dec_fixed(_U64, ULong),
    0x81: _dec_fixed(_I64, Long),
    0x82: _dec_fixed(_F64),
    0x83: _dec_fixed(_I64, Timestamp),
    0x84: _dec_raw(8, Decimal64),
    0x94: _dec_raw(16, Decimal128),
    0x98: _dec_raw(16, _uuid),
    0xA0: _dec_variable(_U8, _bytes),
    0xA1: _dec_variable(_U8, _utf8),
    0xA3: _dec_variable(_U8, _symbol),
    0xB0: _dec_variable(_U32, _bytes),
    0xB1: _dec_variable(_U32, _utf8),
    0xB3: _dec_variable(_U32, _symbol),
    0xC0: _dec_list(_SIZE8_COUNT8),
    0xC1: _dec_map(_SIZE8_COUNT8),
    0xD0: _dec_list(_SIZE32_COUNT32),
    0xD1: _dec_map(_SIZE32_COUNT32),
    0xE0: _dec_array(_SIZE8_COUNT8),
    0xF0: _dec_array(_SIZE32_COUNT32),
}.items():
    _DECODERS[_code] = _decoder


def _view(buf: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(buf)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def decode_value(buf: bytes | bytearray | memoryview) -> Any:
    """Decode exactly one AMQP 1.0 value filling ``buf``."""
    view = _view(buf)
    try:
        value, pos = _decode_at(view, 0, len(view), 0)
    except Amqp10DecodeError:
        raise
    except (IndexError, struct.error, ValueError, OverflowError, RecursionError) as exc:
        raise Amqp10DecodeError(f"malformed AMQP 1.0 value: {exc!r}") from None
    if pos != len(view):
        raise Amqp10DecodeError(f"{len(view) - pos} trailing bytes after the value")
    return value


# --- skipping (for the body fast path) -------------------------------------------------------

_LENGTH8 = -1  # the constructor is followed by a 1-byte size of what comes next
_LENGTH32 = -4
_SKIP_WIDTH: list[int | None] = [None] * 256
for _code, _width in {
    0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x45: 0,
    0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1, 0x54: 1, 0x55: 1, 0x56: 1,
    0x60: 2, 0x61: 2, 0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x74: 4,
    0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8, 0x84: 8, 0x94: 16, 0x98: 16,
    0xA0: _LENGTH8, 0xA1: _LENGTH8, 0xA3: _LENGTH8, 0xC0: _LENGTH8, 0xC1: _LENGTH8,
    0xE0: _LENGTH8, 0xB0: _LENGTH32, 0xB1: _LENGTH32, 0xB3: _LENGTH32, 0xD0: _LENGTH32,
    0xD1: _LENGTH32, 0xF0: _LENGTH32,
}.items():  # fmt: skip
    _SKIP_WIDTH[_code] = _width


def _skip_value(buf: memoryview, pos: int, end: int, depth: int) -> int:
    """Position just after the value at ``pos``, without decoding it."""
    if pos >= end:
        raise _truncated()
    code = buf[pos]
    pos += 1
    if code == 0x00:
        if depth >= MAX_DEPTH:
            raise Amqp10DecodeError(f"values nested deeper than {MAX_DEPTH}")
        pos = _skip_value(buf, pos, end, depth + 1)
        return _skip_value(buf, pos, end, depth + 1)
    width = _SKIP_WIDTH[code]
    if width is None:
        raise Amqp10DecodeError(f"unknown constructor {code:#04x} at offset {pos - 1}")
    if width == _LENGTH8:
        if pos >= end:
            raise _truncated()
        pos += 1 + buf[pos]
    elif width == _LENGTH32:
        if pos + 4 > end:
            raise _truncated()
        pos += 4 + _U32.unpack_from(buf, pos)[0]
    else:
        pos += width
    if pos > end:
        raise _truncated()
    return pos


# --- message sections -------------------------------------------------------------------------


class Section:
    """Descriptor codes of the message sections (amqp:*:* ulong descriptors)."""

    HEADER = 0x70
    DELIVERY_ANNOTATIONS = 0x71
    MESSAGE_ANNOTATIONS = 0x72
    PROPERTIES = 0x73
    APPLICATION_PROPERTIES = 0x74
    DATA = 0x75
    AMQP_SEQUENCE = 0x76
    AMQP_VALUE = 0x77
    FOOTER = 0x78


_SECTION_BY_SYMBOL = {
    "amqp:header:list": Section.HEADER,
    "amqp:delivery-annotations:map": Section.DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": Section.MESSAGE_ANNOTATIONS,
    "amqp:properties:list": Section.PROPERTIES,
    "amqp:application-properties:map": Section.APPLICATION_PROPERTIES,
    "amqp:data:binary": Section.DATA,
    "amqp:amqp-sequence:list": Section.AMQP_SEQUENCE,
    "amqp:amqp-value:*": Section.AMQP_VALUE,
    "amqp:footer:map": Section.FOOTER,
}


class BodyKind(StrEnum):
    DATA = "data"  # body: bytes, the data sections joined
    SEQUENCE = "sequence"  # body: list of lists, one per amqp-sequence section
    VALUE = "value"  # body: the decoded amqp-value


@dataclass(slots=True)
class Header:
    durable: bool | None = None
    priority: int | None = None  # ubyte
    ttl: int | None = None  # uint, milliseconds
    first_acquirer: bool | None = None
    delivery_count: int | None = None  # uint


@dataclass(slots=True)
class Properties:
    message_id: Any = None  # ulong (int), uuid, binary or string
    user_id: bytes | None = None
    to: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    correlation_id: Any = None  # like message_id
    content_type: str | None = None  # symbol
    content_encoding: str | None = None  # symbol
    absolute_expiry_time: int | None = None  # ms since the epoch
    creation_time: int | None = None  # ms since the epoch
    group_id: str | None = None
    group_sequence: int | None = None  # uint
    reply_to_group_id: str | None = None


@dataclass(slots=True)
class Message:
    """A decoded AMQP 1.0 message; annotation maps are keyed by ``Symbol`` (or ``ULong``)."""

    body: Any = b""
    body_kind: BodyKind = BodyKind.DATA
    header: Header | None = None
    delivery_annotations: dict[Any, Any] | None = None
    message_annotations: dict[Any, Any] | None = None
    properties: Properties | None = None
    application_properties: dict[str, Any] | None = None
    footer: dict[Any, Any] | None = None


def _section_code(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """Read a section's descriptor; return (section code, position of the section value)."""
    if pos + 3 <= end and buf[pos] == 0x00 and buf[pos + 1] == 0x53:  # smallulong: the norm
        code, pos = buf[pos + 2], pos + 3
    elif buf[pos] != 0x00:
        raise Amqp10DecodeError(f"expected a described section at offset {pos}")
    else:
        descriptor, pos = _decode_at(buf, pos + 1, end, 1)
        if isinstance(descriptor, int) and not isinstance(descriptor, bool):
            code = descriptor
        elif isinstance(descriptor, Symbol):
            code = _SECTION_BY_SYMBOL.get(descriptor, -1)
        else:
            code = -1
    if not Section.HEADER <= code <= Section.FOOTER:
        raise Amqp10DecodeError(f"unknown message section descriptor {code!r}")
    return code, pos


_BODY_KIND = {
    Section.DATA: BodyKind.DATA,
    Section.AMQP_SEQUENCE: BodyKind.SEQUENCE,
    Section.AMQP_VALUE: BodyKind.VALUE,
}
_SECTION_VALUE_TYPE: dict[int, type] = {
    Section.HEADER: list,
    Section.DELIVERY_ANNOTATIONS: dict,
    Section.MESSAGE_ANNOTATIONS: dict,
    Section.PROPERTIES: list,
    Section.APPLICATION_PROPERTIES: dict,
    Section.DATA: bytes,
    Section.AMQP_SEQUENCE: list,
    Section.FOOTER: dict,
}


def _fields(cls: type, values: list[Any]) -> Any:
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    if len(values) > len(names):
        raise Amqp10DecodeError(f"{cls.__name__} has {len(values)} fields, at most {len(names)}")
    return cls(*values)


def _parse_message(view: memoryview, raw_body: bool) -> Message:
    """Decode the sections; with ``raw_body`` a non-data body stays encoded (see decode_message),
    which is what RabbitMQ hands AMQP 0-9-1 readers."""
    message = Message()
    chunks: list[bytes] = []
    body_kind: BodyKind | None = None
    body_parts: list[Any] = []
    pos, end = 0, len(view)
    while pos < end:
        code, value_pos = _section_code(view, pos, end)
        kind = _BODY_KIND.get(code)
        if kind is not None:
            if body_kind not in (None, kind) or (kind is BodyKind.VALUE and body_parts):
                raise Amqp10DecodeError("a message body mixes section kinds")
            body_kind = kind
            if raw_body and kind is not BodyKind.DATA:
                body_parts.append(bytes(view[pos:]))
                break
        value, pos = _decode_at(view, value_pos, end, 1)
        expected = _SECTION_VALUE_TYPE.get(code)
        # Only non-body sections may be null.
        if expected is not None and not isinstance(value, expected) and (kind or value is not None):
            raise Amqp10DecodeError(f"section {code:#04x} holds a {type(value).__name__}")
        if kind is BodyKind.DATA:
            chunks.append(value)
        elif kind is not None:
            body_parts.append(value)
        else:
            _set_section(message, code, value)
    message.body_kind = body_kind or BodyKind.DATA
    if message.body_kind is BodyKind.DATA:
        message.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    elif raw_body or message.body_kind is BodyKind.VALUE:
        message.body = body_parts[0]
    else:
        message.body = body_parts
    return message


def _set_section(message: Message, code: int, value: Any) -> None:
    if code == Section.HEADER:
        message.header = _fields(Header, value or [])
    elif code == Section.DELIVERY_ANNOTATIONS:
        message.delivery_annotations = value
    elif code == Section.MESSAGE_ANNOTATIONS:
        message.message_annotations = value
    elif code == Section.PROPERTIES:
        message.properties = _fields(Properties, value or [])
    elif code == Section.APPLICATION_PROPERTIES:
        message.application_properties = value
    else:
        message.footer = value


def _guarded(parse: Callable[[memoryview], _T], buf: bytes | bytearray | memoryview) -> _T:
    try:
        return parse(_view(buf))
    except Amqp10DecodeError:
        raise
    except (IndexError, struct.error, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise Amqp10DecodeError(f"malformed AMQP 1.0 message: {exc!r}") from None


def decode_message(
    buf: bytes | bytearray | memoryview, *, keep_encoded_body: bool = False
) -> Message:
    """Decode an AMQP 1.0 message. Sections are accepted in any order (rstream sends
    delivery-annotations last); a repeated non-body section replaces the earlier one.
    ``keep_encoded_body`` leaves an amqp-value/amqp-sequence body encoded: ``body`` is then
    the bytes from the first body section to the end."""
    return _guarded(lambda view: _parse_message(view, keep_encoded_body), buf)


def _data_payload(buf: memoryview, pos: int, end: int) -> tuple[memoryview, int]:
    if pos >= end:
        raise _truncated()
    code = buf[pos]
    if code == 0xA0:
        start = pos + 2
        if start > end:
            raise _truncated()
        stop = start + buf[pos + 1]
    elif code == 0xB0:
        start = pos + 5
        if start > end:
            raise _truncated()
        stop = start + _U32.unpack_from(buf, pos + 1)[0]
    else:
        raise Amqp10DecodeError(f"data section holds constructor {code:#04x}, not binary")
    if stop > end:
        raise _truncated()
    return buf[start:stop], stop


def _find_body(view: memoryview) -> memoryview:
    chunks = []
    pos, end = 0, len(view)
    while pos < end:
        code, value_pos = _section_code(view, pos, end)
        if code == Section.DATA:
            chunk, pos = _data_payload(view, value_pos, end)
            chunks.append(chunk)
        elif code in (Section.AMQP_SEQUENCE, Section.AMQP_VALUE):
            return view[pos:]
        else:
            pos = _skip_value(view, value_pos, end, 1)
    if len(chunks) == 1:
        return chunks[0]
    return memoryview(b"".join(chunks))


def message_body(buf: bytes | bytearray | memoryview) -> memoryview:
    """The body without decoding other sections: the data section's bytes (several joined); for
    an amqp-value/amqp-sequence body, its encoded sections onward, as RabbitMQ delivers them."""
    return _guarded(_find_body, buf)


# --- message encoding -------------------------------------------------------------------------


def _opt(wrap: Callable[[Any], Any], value: Any) -> Any:
    return None if value is None else wrap(value)


def _message_id(value: Any) -> Any:
    if isinstance(value, int) and type(value) is not bool and not isinstance(value, _Tagged):
        return ULong(value)
    return value


def _user_id(value: bytes | str) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _timestamp(value: Any) -> Timestamp:
    return Timestamp(_timestamp_ms(value))


def _plain_str(value: str) -> str:
    return str(value)  # a Symbol would otherwise encode as a symbol


def _header_list(header: Header) -> list[Any]:
    return _trim(
        [
            header.durable,
            _opt(UByte, header.priority),
            _opt(UInt, header.ttl),
            header.first_acquirer,
            _opt(UInt, header.delivery_count),
        ]
    )


def _properties_list(p: Properties) -> list[Any]:
    return _trim(
        [
            _opt(_message_id, p.message_id),
            _opt(_user_id, p.user_id),
            _opt(_plain_str, p.to),
            _opt(_plain_str, p.subject),
            _opt(_plain_str, p.reply_to),
            _opt(_message_id, p.correlation_id),
            _opt(Symbol, p.content_type),
            _opt(Symbol, p.content_encoding),
            _opt(_timestamp, p.absolute_expiry_time),
            _opt(_timestamp, p.creation_time),
            _opt(_plain_str, p.group_id),
            _opt(UInt, p.group_sequence),
            _opt(_plain_str, p.reply_to_group_id),
        ]
    )


def _trim(fields: list[Any]) -> list[Any]:
    """Drop trailing nulls: a shorter list means the same and is what clients send."""
    while fields and fields[-1] is None:
        fields.pop()
    return fields


def _annotation_key(key: Any) -> Any:
    if isinstance(key, str):
        return Symbol(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return ULong(key)
    raise Amqp10EncodeError(f"annotation keys are symbols or ulongs, not {type(key).__name__}")


def _annotations(mapping: dict[Any, Any]) -> dict[Any, Any]:
    return {_annotation_key(k): v for k, v in mapping.items()}


def _application_properties(mapping: dict[str, Any]) -> dict[str, Any]:
    for key in mapping:
        if not isinstance(key, str):
            raise Amqp10EncodeError(f"application-properties keys are strings, not {key!r}")
    return {str(k): v for k, v in mapping.items()}


def _section(out: bytearray, code: int, value: Any) -> None:
    out += b"\x00\x53"
    out.append(code)
    _encode_value(out, value)


def _body_sections(out: bytearray, message: Message) -> None:
    if message.body_kind is BodyKind.DATA:
        _section(out, Section.DATA, bytes(message.body))
    elif message.body_kind is BodyKind.VALUE:
        _section(out, Section.AMQP_VALUE, message.body)
    else:
        for sequence in message.body:
            _section(out, Section.AMQP_SEQUENCE, list(sequence))


def encode_message(
    message: Message, *, encoded_body: bytes | bytearray | memoryview | None = None
) -> bytes:
    """Encode a message: sections in the order of the spec, a data body as one data section.
    ``encoded_body``: body sections (and footer) already encoded, used instead of ``body``."""
    out = bytearray()
    try:
        if message.header is not None:
            _section(out, Section.HEADER, _header_list(message.header))
        if message.delivery_annotations:
            _section(out, Section.DELIVERY_ANNOTATIONS, _annotations(message.delivery_annotations))
        if message.message_annotations:
            _section(out, Section.MESSAGE_ANNOTATIONS, _annotations(message.message_annotations))
        if message.properties is not None:
            _section(out, Section.PROPERTIES, _properties_list(message.properties))
        if message.application_properties:
            props = _application_properties(message.application_properties)
            _section(out, Section.APPLICATION_PROPERTIES, props)
        if encoded_body is not None:
            out += encoded_body
            return bytes(out)
        _body_sections(out, message)
        if message.footer:
            _section(out, Section.FOOTER, _annotations(message.footer))
    except (struct.error, OverflowError, TypeError, UnicodeError) as exc:
        raise Amqp10EncodeError(str(exc)) from exc
    return bytes(out)
