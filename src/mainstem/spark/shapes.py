"""The common AMQP 1.0 message shapes decoded for many records at once by Arrow's kernels:
a Spark read's records with message annotations, properties and application properties.

A message is taken here when it is sections described by small ulongs, each non-body
section at most once and in any order (header, delivery annotations, message annotations,
properties, application properties), then one data section that ends the record; and
every value in those sections is a simple one (null, boolean, an integer of any width, a
timestamp, binary, string or symbol). Each step reads one thing of every record at once
(the next section, the next map or list member), so the Python work is per step, not per
record. Whatever else a record holds (floats, UUIDs, nested maps, several data sections,
amqp-value bodies, a footer, a malformed message) leaves it to the record-by-record decoder,
so the columns are the same as that decoder gives (``tests/spark/test_records.py`` holds
the two to the same rows on generated messages).
"""

from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mainstem.formats.amqp10 import Section

KEY_ANNOTATION = b"x-routing-key"
KEY_PROPERTY = b"key"
MAX_MEMBERS = 64  # a section with more members than this is left to the per-record decoder
MAX_HEADERS = 6  # application properties; more are left to the per-record decoder
MAX_SECTIONS = 6  # five non-body sections and the data section
HEADER_FIELDS = 5
PROPERTY_FIELDS = 13
# The properties column's names by field index, and their order in the column (as the
# per-record decoder lists them: the text fields, then creation and expiry time; never
# group-sequence).
PROPERTY_NAMES = ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id",
                  "content_type", "content_encoding", "absolute_expiry_time", "creation_time",
                  "group_id", None, "reply_to_group_id")
PROPERTY_RANK = (0, 1, 2, 3, 4, 5, 6, 7, 11, 10, 8, -1, 9)
ABSOLUTE_EXPIRY, CREATION = 8, 9
TIME_FIELDS = (ABSOLUTE_EXPIRY, CREATION)

# Kinds of simple values, by constructor.
UNSUPPORTED, NULL, TRUE, FALSE, BOOL_OCTET, UNSIGNED, SIGNED, TIMESTAMP, BINARY, STRING = \
    range(10)
_KIND = [UNSUPPORTED] * 256
_WIDTH = [0] * 256  # fixed: the value's width; variable: the length prefix's
_VARIABLE = [False] * 256
for _code, _kind, _width in (
        (0x40, NULL, 0), (0x41, TRUE, 0), (0x42, FALSE, 0), (0x43, UNSIGNED, 0),
        (0x44, UNSIGNED, 0), (0x50, UNSIGNED, 1), (0x51, SIGNED, 1), (0x52, UNSIGNED, 1),
        (0x53, UNSIGNED, 1), (0x54, SIGNED, 1), (0x55, SIGNED, 1), (0x56, BOOL_OCTET, 1),
        (0x60, UNSIGNED, 2), (0x61, SIGNED, 2), (0x70, UNSIGNED, 4), (0x71, SIGNED, 4),
        (0x80, UNSIGNED, 8), (0x81, SIGNED, 8), (0x83, TIMESTAMP, 8),
        (0xA0, BINARY, 1), (0xA1, STRING, 1), (0xA3, STRING, 1),
        (0xB0, BINARY, 4), (0xB1, STRING, 4), (0xB3, STRING, 4)):
    _KIND[_code], _WIDTH[_code] = _kind, _width
    _VARIABLE[_code] = _code >= 0xA0
KINDS = pa.array(_KIND, pa.int64())
WIDTHS = pa.array(_WIDTH, pa.int64())
VARIABLE = pa.array(_VARIABLE, pa.bool_())
_MAP_SECTIONS = (Section.DELIVERY_ANNOTATIONS, Section.MESSAGE_ANNOTATIONS,
                 Section.APPLICATION_PROPERTIES)
_LIST_SECTIONS = (Section.HEADER, Section.PROPERTIES)
_SECTIONS = (*_LIST_SECTIONS, *_MAP_SECTIONS)
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
_EIGHT = pa.scalar(8, pa.uint64())
_TRUE_FALSE = pa.array([b"false", b"true"], pa.binary())  # as JSON and Java write them


class _Invalid(Exception):
    """A string that is not UTF-8: the record-by-record decoder takes the whole lot."""


@dataclass(slots=True)
class Shaped:
    """Columns of the records, valid where ``taken``: the others are left to the
    per-record decoder."""

    taken: pa.Array  # bool
    values: pa.Array
    keys: pa.Array
    headers: pa.Array
    properties: pa.Array
    created: pa.Array  # int64 ms (properties.creation-time), null when not set


@dataclass(slots=True)
class _Values:
    """One simple value of every record (where ``present``)."""

    present: pa.Array
    kind: pa.Array
    start: pa.Array  # the payload
    length: pa.Array
    code: pa.Array
    text: pa.Array | None = None  # see member_text


class _Buffer:
    """The bytes of the records, read at many positions at once."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.buffer = pa.py_buffer(data)
        self.octets = pa.Array.from_buffers(pa.uint8(), len(data), [None, self.buffer])
        self.last = len(data) - 1

    def at(self, pos: pa.Array, plus: int = 0) -> pa.Array:
        """The byte at ``pos + plus`` of each (0 past the end)."""
        where = pc.add(pos, plus) if plus else pos  # never negative
        try:  # bounds checked by take: clamped only when some are past the end
            found = pc.take(self.octets, where)
        except IndexError:
            found = pc.take(self.octets, pc.min_element_wise(where, self.last))
        return pc.cast(found, pa.int64())

    def u32(self, pos: pa.Array, plus: int = 0) -> pa.Array:
        value = self.at(pos, plus)
        for k in (1, 2, 3):
            value = pc.add(pc.shift_left(value, 8), self.at(pos, plus + k))
        return value

    def cut(self, start: pa.Array, length: pa.Array, where: pa.Array | None = None
            ) -> pa.Array:
        """The byte strings [start, start + length) of each (empty where not ``where``), as
        a binary array: the slices must not overlap and must come in the order of the data."""
        count = len(start)
        if count == 0:
            return pa.array([], pa.binary())
        if where is not None:
            start, length = pc.if_else(where, start, 0), pc.if_else(where, length, 0)
        bounds = pc.take(pa.concat_arrays([start, pc.add(start, length)]), _interleave(count))
        bounds = pc.min_element_wise(pc.cumulative_max(bounds), len(self.data))
        bounds = pc.cast(bounds, pa.int32())
        pairs = pa.BinaryArray.from_buffers(pa.binary(), 2 * count - 1,
                                            [None, bounds.buffers()[1], self.buffer])
        return pc.take(pairs, _evens(count))


_RAMP = [pa.array(range(1 << 18), pa.int64())]


def ramp(count: int) -> pa.Array:
    """0, 1, ... count - 1 (int64)."""
    if count > len(_RAMP[0]):
        _RAMP[0] = pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()),
                                                           2 * count)), 1)
    return _RAMP[0].slice(0, count)


@functools.lru_cache(maxsize=8)  # a batch cuts many columns of the same length
def _interleave(count: int) -> pa.Array:
    steps = ramp(2 * count)
    return pc.add(pc.shift_right(steps, 1), pc.multiply(pc.bit_wise_and(steps, 1), count))


@functools.lru_cache(maxsize=8)
def _evens(count: int) -> pa.Array:
    return pc.multiply(ramp(count), 2)


def _sum(arrays: list[pa.Array]) -> pa.Array:
    return functools.reduce(pc.add, arrays)


def _pick(found: list[pa.Array], arrays: list[pa.Array]) -> pa.Array:
    """Of each record, the value of the step that ``found`` it (0 where none did)."""
    picked = arrays[-1]
    for hit, array in zip(reversed(found), reversed(arrays), strict=True):
        picked = pc.if_else(hit, array, picked)
    return pc.if_else(functools.reduce(pc.or_, found), picked, 0)


def _any(mask: pa.Array) -> bool:
    return bool(pc.any(mask).as_py())


def _isin(values: pa.Array, codes: tuple[int, ...]) -> pa.Array:
    return pc.is_in(values, value_set=pa.array(codes, pa.int64()))


def decode(data: bytes, starts: pa.Array, ends: pa.Array) -> Shaped | None:
    """The records at [starts, ends) of ``data`` (int64 arrays, in the order of the data);
    None when a string is not UTF-8 (the per-record decoder then takes them all)."""
    try:
        return _decode(_Buffer(data), starts, ends)
    except _Invalid:
        return None


def _decode(buf: _Buffer, starts: pa.Array, ends: pa.Array) -> Shaped:
    count = len(starts)
    ok = pa.repeat(pa.scalar(True), count)
    pos = starts
    done = pa.repeat(pa.scalar(False), count)
    body_start, body_end = starts, starts
    sections: list[tuple[pa.Array, pa.Array, pa.Array, pa.Array]] = []
    for _ in range(MAX_SECTIONS):
        active = pc.and_(ok, pc.invert(done))
        if not _any(active):
            break
        described = pc.and_(pc.equal(buf.at(pos), 0), pc.equal(buf.at(pos, 1), 0x53))
        code = buf.at(pos, 2)
        value = pc.add(pos, 3)
        ctor = buf.at(value)
        step = _uniform_section(buf, value, ends, _same(code, active), _same(ctor, active))
        if step is None:
            step = _any_section(buf, code, value, ctor, ends)
        data_ok, start, data_stop, section_ok, first, members, stop = step
        body_start = pc.if_else(pc.and_(active, data_ok), start, body_start)
        body_end = pc.if_else(pc.and_(active, data_ok), data_stop, body_end)
        good = pc.and_(described, pc.or_(data_ok, section_ok))
        ok = pc.and_(ok, pc.or_(pc.invert(active), good))
        done = pc.or_(done, pc.and_(active, data_ok))
        kept = pc.and_(active, pc.and_(section_ok, described))
        sections.append((pc.if_else(kept, code, -1), first, members, stop))
        pos = pc.if_else(pc.and_(active, section_ok), stop, pos)
    ok = pc.and_(ok, done)
    places: dict[int, tuple[pa.Array, pa.Array, pa.Array, pa.Array]] = {}
    for section in _SECTIONS:
        found = [pc.equal(code, section) for code, *_ in sections]
        if not any(_any(hit) for hit in found):
            continue
        times = _sum([pc.cast(hit, pa.int64()) for hit in found])
        ok = pc.and_(ok, pc.less_equal(times, 1))  # a repeated section replaces: left alone
        has = pc.and_(ok, pc.equal(times, 1))
        first, members, stop = (_pick(found, [s[at] for s in sections]) for at in (1, 2, 3))
        places[section] = (has, first, members, stop)
    walked: dict[int, list[_Values]] = {}
    for section, (has, first, members, stop) in places.items():
        values, bad = _walk(buf, pc.and_(ok, has), first, members, stop)
        ok = pc.and_(ok, pc.invert(bad))
        walked[section] = values
    ok = _checked(buf, ok, walked)
    return _columns(buf, count, ok, walked, body_start, body_end)


_Step = tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array, pa.Array, pa.Array]


def _uniform_section(buf: _Buffer, value: pa.Array, ends: pa.Array, code: int | None,
                     ctor: int | None) -> _Step | None:
    """The next section of each record when all have the same descriptor and constructor
    (the common case: one publisher, one layout), with no per-constructor choice; None
    otherwise. As ``_any_section``: (data ok, body start, body stop, section ok, first
    member, members, section stop)."""
    if code is None or ctor is None:
        return None
    count = len(value)
    no = pa.repeat(pa.scalar(False), count)
    zero = pa.repeat(pa.scalar(0, pa.int64()), count)
    if code == Section.DATA and ctor in (0xA0, 0xB0):
        short = ctor == 0xA0
        start = pc.add(value, 2 if short else 5)
        stop = pc.add(start, buf.at(value, 1) if short else buf.u32(value, 1))
        return pc.equal(stop, ends), start, stop, no, zero, zero, zero
    listed = code in _LIST_SECTIONS and ctor in (0x40, 0x45, 0xC0, 0xD0)
    mapped = code in _MAP_SECTIONS and ctor in (0x40, 0xC1, 0xD1)
    if not (listed or mapped):
        return None
    if ctor in (0x40, 0x45):
        stop = pc.add(value, 1)
        return no, value, value, pc.less_equal(stop, ends), stop, zero, stop
    small = ctor in (0xC0, 0xC1)
    width = 1 if small else 4
    size = buf.at(value, 1) if small else buf.u32(value, 1)
    members = buf.at(value, 2) if small else buf.u32(value, 5)
    stop = pc.add(pc.add(value, 1 + width), size)
    fits = pc.and_(pc.and_(pc.less_equal(stop, ends), pc.greater_equal(size, width)),
                   pc.less_equal(members, MAX_MEMBERS))
    if mapped:
        fits = pc.and_(fits, pc.equal(pc.bit_wise_and(members, 1), 0))
    return no, value, value, fits, pc.add(value, 1 + 2 * width), members, stop


def _any_section(buf: _Buffer, code: pa.Array, value: pa.Array, ctor: pa.Array,
                 ends: pa.Array) -> _Step:
    """The next section of each record, whatever its descriptor and constructor."""
    # the data section: vbin8 or vbin32, ending the record
    short = pc.equal(ctor, 0xA0)
    size = pc.if_else(short, buf.at(value, 1), buf.u32(value, 1))
    start = pc.add(value, pc.if_else(short, 2, 5))
    data_stop = pc.add(start, size)
    is_data = pc.and_(pc.equal(code, Section.DATA), pc.or_(short, pc.equal(ctor, 0xB0)))
    data_ok = pc.and_(is_data, pc.equal(data_stop, ends))
    # a non-body section: null, list0, or a list/map with size and count
    small = _isin(ctor, (0xC0, 0xC1))
    bare = _isin(ctor, (0x40, 0x45))
    width = pc.if_else(small, 1, 4)
    size = pc.if_else(small, buf.at(value, 1), buf.u32(value, 1))
    members = pc.if_else(bare, 0, pc.if_else(small, buf.at(value, 2), buf.u32(value, 5)))
    first = pc.add(pc.add(value, 1), pc.multiply(width, 2))
    stop = pc.if_else(bare, pc.add(value, 1), pc.add(pc.add(value, 1), pc.add(width, size)))
    listed = pc.and_(_isin(code, _LIST_SECTIONS), _isin(ctor, (0x40, 0x45, 0xC0, 0xD0)))
    mapped = pc.and_(_isin(code, _MAP_SECTIONS), pc.and_(
        _isin(ctor, (0x40, 0xC1, 0xD1)), pc.equal(pc.bit_wise_and(members, 1), 0)))
    fits = pc.and_(pc.less_equal(stop, ends), pc.or_(bare, pc.greater_equal(size, width)))
    fits = pc.and_(fits, pc.less_equal(members, MAX_MEMBERS))
    section_ok = pc.and_(pc.or_(listed, mapped), fits)
    return data_ok, start, data_stop, section_ok, first, members, stop


def _walk(buf: _Buffer, has: pa.Array, pos: pa.Array, members: pa.Array, stop: pa.Array,
          ) -> tuple[list[_Values], pa.Array]:
    """The members of a list or map of every record (where ``has``), one member of all the
    records per step; ``bad``: records with a member not simple or not fitting."""
    bad = pa.repeat(pa.scalar(False), len(pos))
    found: list[_Values] = []
    most = pc.max(pc.if_else(has, members, 0)).as_py() or 0
    for index in range(most):
        present = pc.and_(pc.and_(has, pc.invert(bad)), pc.greater(members, index))
        code = buf.at(pos)
        same = _same(code, present)
        if same is not None and _KIND[same] != UNSUPPORTED:  # one constructor: the common case
            kind = pa.repeat(pa.scalar(_KIND[same], pa.int64()), len(pos))
            width = _WIDTH[same]
            if _VARIABLE[same]:
                length = buf.at(pos, 1) if width == 1 else buf.u32(pos, 1)
                start = pc.add(pos, 1 + width)
            else:
                length = pa.repeat(pa.scalar(width, pa.int64()), len(pos))
                start = pc.add(pos, 1)
            end = pc.add(start, length)
            wrong = pc.greater(end, stop)
            if _KIND[same] == BOOL_OCTET:
                wrong = pc.or_(wrong, pc.greater(buf.at(start), 1))
        else:
            kind, start, length, end, wrong = _member(buf, code, pos, stop, present)
        bad = pc.or_(bad, pc.and_(present, wrong))
        present = pc.and_(present, pc.invert(wrong))
        found.append(_Values(present, kind, start, length, code))
        pos = pc.if_else(present, end, pos)
    bad = pc.or_(bad, pc.and_(has, pc.not_equal(pos, stop)))  # stray bytes
    return found, bad


def _same(code: pa.Array, present: pa.Array) -> int | None:
    """The one constructor of the present members, if they have one."""
    extremes = pc.min_max(pc.if_else(present, code, None)).as_py()
    low, high = extremes["min"], extremes["max"]
    return int(low) if low is not None and low == high else None


def _member(buf: _Buffer, code: pa.Array, pos: pa.Array, stop: pa.Array, present: pa.Array
            ) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array]:
    """A member of each record of any constructor: its kind, payload and end, and whether
    it is wrong (not simple, or not fitting)."""
    kind = pc.take(KINDS, code)
    variable = pc.take(VARIABLE, code)
    width = pc.take(WIDTHS, code)
    if _any(pc.and_(present, pc.equal(width, 4))):
        length = pc.if_else(variable, pc.if_else(pc.equal(width, 1), buf.at(pos, 1),
                                                 buf.u32(pos, 1)), width)
    else:
        length = pc.if_else(variable, buf.at(pos, 1), width)
    start = pc.add(pc.add(pos, 1), pc.if_else(variable, width, 0))
    end = pc.add(start, length)
    wrong = pc.or_(pc.equal(kind, UNSUPPORTED), pc.greater(end, stop))
    octet = pc.and_(pc.equal(kind, BOOL_OCTET), pc.greater(buf.at(start), 1))
    return kind, start, length, end, pc.or_(wrong, octet)


def _checked(buf: _Buffer, ok: pa.Array, walked: dict[int, list[_Values]]) -> pa.Array:
    """Every string is UTF-8 (else _Invalid); lists not longer than their fields; binary
    property values that are UTF-8 (the per-record decoder replaces bad bytes)."""
    header = walked.get(Section.HEADER, [])
    if len(header) > HEADER_FIELDS:
        ok = pc.and_(ok, pc.invert(header[HEADER_FIELDS].present))
    properties = walked.get(Section.PROPERTIES, [])
    if len(properties) > PROPERTY_FIELDS:
        ok = pc.and_(ok, pc.invert(properties[PROPERTY_FIELDS].present))
    for index, field in enumerate(properties[:PROPERTY_FIELDS]):
        if index in TIME_FIELDS:  # ms for datetime: a timestamp, else left alone
            odd = pc.and_(field.present, pc.invert(_isin(field.kind, (NULL, TIMESTAMP))))
            ok = pc.and_(ok, pc.invert(odd))
    for section, members in walked.items():
        for member in members:
            strings = pc.and_(member.present, pc.equal(member.kind, STRING))
            if not _any(strings):
                continue
            binary = pc.and_(member.present, pc.equal(member.kind, BINARY))
            if section != Section.PROPERTIES and _any(binary):  # bytes may be anything
                checked = buf.cut(member.start, member.length, strings)
            else:  # the text the columns take (properties: binary decoded as UTF-8 too)
                checked = member_text(buf, member)
            try:
                pc.cast(checked, pa.string())
            except pa.ArrowInvalid:
                raise _Invalid from None
    for field in properties[:PROPERTY_FIELDS]:
        binary = pc.and_(field.present, pc.equal(field.kind, BINARY))
        if _any(binary):
            try:
                pc.cast(member_text(buf, field), pa.string())
            except pa.ArrowInvalid:
                raise _Invalid from None
    return ok


def _numbers(buf: _Buffer, values: _Values) -> tuple[pa.Array, pa.Array]:
    """The integer values, read unsigned and signed (the others: anything)."""
    width = pc.if_else(pc.equal(values.kind, BOOL_OCTET), 0, values.length)
    unsigned = pa.repeat(pa.scalar(0, pa.uint64()), len(width))
    numbers = pc.and_(values.present, _isin(values.kind, (UNSIGNED, SIGNED, TIMESTAMP)))
    widest = pc.max(pc.if_else(numbers, width, 0)).as_py() or 0
    for k in range(min(widest, 8)):
        byte = pc.cast(buf.at(values.start, k), pa.uint64())
        unsigned = pc.if_else(pc.greater(width, k),
                              pc.bit_wise_or(pc.shift_left(unsigned, _EIGHT), byte), unsigned)
    signed = unsigned.view(pa.int64())
    narrow = pc.and_(pc.equal(values.kind, SIGNED), pc.less(width, 8))
    full = pc.shift_left(1, pc.multiply(pc.min_element_wise(width, 7), 8))
    negative = pc.and_(narrow, pc.greater_equal(pc.multiply(signed, 2), full))
    return unsigned, pc.if_else(negative, pc.subtract(signed, full), signed)


def _integers(buf: _Buffer, values: _Values) -> pa.Array:
    """The integer values as decimal text (the others: anything)."""
    unsigned, signed = _numbers(buf, values)
    return pc.cast(pc.if_else(pc.equal(values.kind, UNSIGNED), pc.cast(unsigned, pa.string()),
                              pc.cast(signed, pa.string())), pa.binary())


def member_text(buf: _Buffer, values: _Values) -> pa.Array:
    """``texts`` of the present values, made once."""
    if values.text is None:
        values.text = texts(buf, values, values.present)
    return values.text


def texts(buf: _Buffer, values: _Values, where: pa.Array) -> pa.Array:
    """Each value (where ``where`` and not null) as the bytes the per-record decoder gives:
    binary as is, strings as UTF-8, integers and timestamps in decimal, booleans as
    ``true``/``false``."""
    present = pc.and_(pc.and_(where, values.present), pc.invert(pc.equal(values.kind, NULL)))
    variable = pc.and_(present, _isin(values.kind, (BINARY, STRING)))
    result = buf.cut(values.start, values.length, variable)
    numbers = pc.and_(present, _isin(values.kind, (UNSIGNED, SIGNED, TIMESTAMP)))
    if _any(numbers):
        result = pc.if_else(numbers, _integers(buf, values), result)
    truth = pc.and_(present, _isin(values.kind, (TRUE, FALSE, BOOL_OCTET)))
    if _any(truth):
        true = pc.or_(pc.equal(values.kind, TRUE), pc.and_(
            pc.equal(values.kind, BOOL_OCTET), pc.equal(buf.at(values.start), 1)))
        result = pc.if_else(truth, pc.take(_TRUE_FALSE, pc.cast(true, pa.int64())), result)
    return pc.if_else(present, result, pa.scalar(None, pa.binary()))


def _columns(buf: _Buffer, count: int, ok: pa.Array, walked: dict[int, list[_Values]],
             body_start: pa.Array, body_end: pa.Array) -> Shaped:
    values = buf.cut(body_start, pc.subtract(body_end, body_start))
    nothing = pa.nulls(count, pa.binary())
    annotation, application = nothing, nothing
    pairs = walked.get(Section.MESSAGE_ANNOTATIONS, [])
    for k in range(0, len(pairs), 2):  # the last x-routing-key wins, as in a dict
        annotation = _lookup(buf, pairs[k], pairs[k + 1], KEY_ANNOTATION, annotation)
    pairs = walked.get(Section.APPLICATION_PROPERTIES, [])
    ok, headers = _headers(buf, count, ok, pairs)
    for k in range(0, len(pairs), 2):
        application = _lookup(buf, pairs[k], pairs[k + 1], KEY_PROPERTY, application)
    fields = walked.get(Section.PROPERTIES, [])
    message_id = member_text(buf, fields[0]) if fields else nothing
    keys = pc.coalesce(annotation, application, message_id)
    properties, created = _properties(buf, count, fields)
    # a null (a bug) would leave a row to neither decoder: the per-record one takes it
    return Shaped(pc.fill_null(ok, False), values, keys, headers, properties, created)


def _lookup(buf: _Buffer, key: _Values, value: _Values, name: bytes,
            found: pa.Array) -> pa.Array:
    """``found`` replaced by the value of the members whose key is the string ``name``
    (a null value leaves a null, as a dict lookup gives None)."""
    hit = pc.and_(key.present, pc.and_(pc.equal(key.kind, STRING),
                                       pc.equal(key.length, len(name))))
    if not _any(hit):
        return found
    hit = pc.and_(hit, pc.fill_null(pc.equal(member_text(buf, key), name), False))
    return pc.if_else(hit, member_text(buf, value), found)


def _headers(buf: _Buffer, count: int, ok: pa.Array, pairs: list[_Values]
             ) -> tuple[pa.Array, pa.Array]:
    """The application properties as Kafka headers: a list of (key, value) per record,
    null when there are none. Keys must be strings and not repeat (a dict keeps one)."""
    if not pairs:
        return ok, pa.nulls(count, HEADER_TYPE)
    keys = pairs[0::2]
    for key in keys:
        ok = pc.and_(ok, pc.invert(pc.and_(key.present, pc.not_equal(key.kind, STRING))))
    if len(keys) > MAX_HEADERS:  # more: left to the per-record decoder
        ok = pc.and_(ok, pc.invert(keys[MAX_HEADERS].present))
        keys = keys[:MAX_HEADERS]
    names = [member_text(buf, key) for key in keys]
    for a in range(len(keys)):  # a repeated key (a dict keeps one): per-record decoder
        for b in range(a + 1, len(keys)):
            repeated = pc.and_(pc.and_(keys[a].present, keys[b].present),
                               pc.fill_null(pc.equal(names[a], names[b]), False))
            ok = pc.and_(ok, pc.invert(repeated))
    values = [member_text(buf, value) for value in pairs[1:2 * len(keys):2]]
    sizes = _sum([pc.cast(key.present, pa.int64()) for key in keys])
    offsets = pc.cumulative_sum(pa.concat_arrays([pa.array([0], pa.int64()), sizes]))
    total = offsets[-1].as_py()
    # entries record by record, key by key: key k of record r is at k * count + r
    parents = pc.list_parent_indices(pa.ListArray.from_arrays(pc.cast(offsets, pa.int32()),
                                                              ramp(total)))
    order = pc.add(pc.multiply(pc.subtract(ramp(total), pc.take(offsets, parents)), count),
                   parents)
    items = pc.take(pa.concat_arrays(values), order)
    flat = pc.take(pa.concat_arrays(names), order)
    offsets = pc.cast(offsets, pa.int32())
    structs = pa.StructArray.from_arrays([pc.cast(flat, pa.string()), items],
                                         fields=list(HEADER_TYPE.value_type))
    lists = pa.ListArray.from_arrays(offsets, structs, type=HEADER_TYPE,
                                     mask=pc.equal(sizes, 0))
    return ok, lists


def _properties(buf: _Buffer, count: int, fields: list[_Values]) -> tuple[pa.Array, pa.Array]:
    """The properties that are set, as text by name, and the creation time (ms)."""
    if not fields:
        return pa.nulls(count, PROPERTIES_TYPE), pa.nulls(count, pa.int64())
    found: dict[int, tuple[pa.Array, pa.Array]] = {}  # by rank: (present, text)
    created = pa.nulls(count, pa.int64())
    for index, field in enumerate(fields[:PROPERTY_FIELDS]):
        rank = PROPERTY_RANK[index]
        present = pc.and_(field.present, pc.not_equal(field.kind, NULL))
        if rank < 0 or not _any(present):
            continue
        if index in TIME_FIELDS:
            moments = _numbers(buf, field)[1]
            text = _isoformat(moments, present)
            if index == CREATION:
                created = pc.if_else(present, moments, pa.scalar(None, pa.int64()))
        else:
            text = pc.cast(member_text(buf, field), pa.string())
        found[rank] = (present, text)
    if not found:
        return pa.nulls(count, PROPERTIES_TYPE), created
    ranks = sorted(found)
    wide = len(ranks)
    # all fields of record 0 by rank, then of record 1, ...: element j is field j % wide
    # of record j // wide, at (j % wide) * count + j // wide of the fields laid end to end
    steps = ramp(wide * count)
    record = pc.divide(steps, wide)  # integer division
    field = pc.subtract(steps, pc.multiply(record, wide))
    across = pc.add(pc.multiply(field, count), record)
    present = pc.take(pa.concat_arrays([found[rank][0] for rank in ranks]), across)
    text = pc.filter(pc.take(pa.concat_arrays([found[rank][1] for rank in ranks]), across),
                     present)
    names = pc.filter(pc.take(pa.array([PROPERTY_NAMES[PROPERTY_RANK.index(rank)]
                                        for rank in ranks], pa.string()),
                              field),
                      present)
    sizes = _sum([pc.cast(found[rank][0], pa.int64()) for rank in ranks])
    offsets = pc.cast(pc.cumulative_sum(pa.concat_arrays([pa.array([0], pa.int64()), sizes])),
                      pa.int32())
    maps = pa.MapArray.from_arrays(offsets, names, text, type=PROPERTIES_TYPE,
                                   mask=pc.equal(sizes, 0))
    return maps, created


def _isoformat(moments: pa.Array, present: pa.Array) -> pa.Array:
    """Each time (ms) as the per-record decoder writes it: one Python call per distinct
    time, not per record."""
    distinct = pc.unique(pc.filter(moments, present))
    text = pa.array([isoformat(ms) for ms in distinct.to_pylist()], pa.string())
    return pc.take(text, pc.index_in(moments, value_set=distinct))


def isoformat(ms: Any) -> str:
    """A time in ms as ISO 8601 text; in decimal when out of datetime's range."""
    try:
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat()
    except (ValueError, OverflowError, OSError):
        return str(int(ms))
