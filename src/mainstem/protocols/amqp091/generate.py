"""Generate ``methods.py`` from the AMQP 0-9-1 XML shipped in this package.

    python -m mainstem.protocols.amqp091.generate          # rewrite methods.py
    python -m mainstem.protocols.amqp091.generate --check  # exit 1 if methods.py is stale

Each method becomes a slotted dataclass with straight-line ``decode``/``encode_into``:
consecutive fixed-size fields (and packed bit octets) share one precompiled ``struct.Struct``,
so decoding Basic.Ack is a single ``unpack`` and no code dispatches on field types at run time.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from mainstem.protocols.amqp091.spec import AmqpSpec, ClassSpec, FieldSpec, MethodSpec, load_spec

OUTPUT = Path(__file__).with_name("methods.py")

_STRUCT_CODES = {"octet": "B", "short": "H", "long": "I", "longlong": "Q", "timestamp": "Q"}
_READERS = {"shortstr": "read_shortstr", "longstr": "read_longstr", "table": "read_table"}
_WRITERS = {"shortstr": "write_shortstr", "longstr": "write_longstr", "table": "write_table"}
_PY_TYPES = {
    "octet": "int", "short": "int", "long": "int", "longlong": "int", "timestamp": "int",
    "bit": "bool", "shortstr": "str", "longstr": "bytes", "table": "dict[str, Any]",
}  # fmt: skip
_DEFAULTS = {
    "int": "0", "bool": "False", "str": '""', "bytes": 'b""',
    "dict[str, Any]": "field(default_factory=dict)",
}  # fmt: skip
_MAX_LINE = 99


@dataclass
class _FixedRun:
    """Consecutive fixed-size fields read or written with one struct."""

    codes: str  # struct codes, one per slot
    slots: list[FieldSpec | list[FieldSpec]]  # a field, or the bits packed into one octet

    @property
    def struct_name(self) -> str:
        return f"_S_{self.codes}"


def _segments(fields: tuple[FieldSpec, ...]) -> list[_FixedRun | FieldSpec]:
    """Split fields into fixed runs and variable-size fields; pack bits 8 to an octet."""
    segments: list[_FixedRun | FieldSpec] = []
    previous_type = None
    for spec in fields:
        if spec.type in _READERS:
            segments.append(spec)
        else:
            run = segments[-1] if segments else None
            if not isinstance(run, _FixedRun):
                run = _FixedRun("", [])
                segments.append(run)
            octet = run.slots[-1] if previous_type == "bit" else None
            if spec.type != "bit":
                run.codes += _STRUCT_CODES[spec.type]
                run.slots.append(spec)
            elif isinstance(octet, list) and len(octet) < 8:
                octet.append(spec)
            else:
                run.codes += "B"
                run.slots.append([spec])
        previous_type = spec.type
    return segments


def _wrap(head: str, args: list[str], indent: str, tail: str = ")") -> list[str]:
    """``head(args)`` on one line if it fits, else one argument per line."""
    line = f"{indent}{head}{', '.join(args)}{tail}"
    if len(line) <= _MAX_LINE:
        return [line]
    return [f"{indent}{head}", *(f"{indent}    {arg}," for arg in args), f"{indent}{tail}"]


def _bit_var(run_index: int, slot_index: int) -> str:
    return f"bits_{run_index}_{slot_index}"


def _decode_lines(fields: tuple[FieldSpec, ...]) -> tuple[list[str], dict[str, str]]:
    """Decoder statements and, per field, the expression holding its value."""
    segments = _segments(fields)
    values: dict[str, str] = {}
    lines: list[str] = []
    if len(segments) == 1 and isinstance(segments[0], _FixedRun):
        # Only fixed fields: unpack() also checks the exact payload length.
        run = segments[0]
        targets = ", ".join(_run_targets(run, 0, values))
        lines.append(f"{targets}, = {run.struct_name}.unpack(buf)")
        return lines, values
    lines.append("offset = 0")
    for index, segment in enumerate(segments):
        if isinstance(segment, _FixedRun):
            targets = ", ".join(_run_targets(segment, index, values))
            lines.append(f"{targets}, = {segment.struct_name}.unpack_from(buf, offset)")
            lines.append(f"offset += {segment.struct_name}.size")
        else:
            lines.append(f"{segment.attr}, offset = {_READERS[segment.type]}(buf, offset)")
            values[segment.attr] = segment.attr
    lines.append("expect_end(buf, offset)")
    return lines, values


def _run_targets(run: _FixedRun, run_index: int, values: dict[str, str]) -> list[str]:
    targets = []
    for slot_index, slot in enumerate(run.slots):
        if isinstance(slot, FieldSpec):
            targets.append(slot.attr)
            values[slot.attr] = slot.attr
        else:
            var = _bit_var(run_index, slot_index)
            targets.append(var)
            for bit, spec in enumerate(slot):
                values[spec.attr] = f"bool({var} & {1 << bit})"
    return targets


def _encode_lines(fields: tuple[FieldSpec, ...]) -> list[str]:
    lines: list[str] = []
    for segment in _segments(fields):
        if isinstance(segment, _FixedRun):
            lines += _pack_lines(segment)
        else:
            lines.append(f"        {_WRITERS[segment.type]}(out, self.{segment.attr})")
    return lines


def _pack_lines(run: _FixedRun) -> list[str]:
    head = f"out += {run.struct_name}.pack("
    args = [_pack_terms(slot) for slot in run.slots]
    lines = _wrap(head, [" | ".join(terms) for terms in args], "        ")
    if all(len(line) <= _MAX_LINE for line in lines):
        return lines
    # A long bit octet: one term per line, continued with "|".
    lines = [f"        {head}"]
    for terms in args:
        lines += [f"            {terms[0]}", *(f"            | {term}" for term in terms[1:])]
        lines[-1] += ","
    return [*lines, "        )"]


def _pack_terms(slot: FieldSpec | list[FieldSpec]) -> list[str]:
    if isinstance(slot, FieldSpec):
        return [f"self.{slot.attr}"]
    terms = [f"bool(self.{spec.attr}) << {bit}" for bit, spec in enumerate(slot)]
    terms[0] = f"bool(self.{slot[0].attr})"
    return terms


def _field_declarations(fields: tuple[FieldSpec, ...]) -> list[str]:
    lines = []
    for spec in fields:
        py_type = _PY_TYPES[spec.type]
        lines.append(f"    {spec.attr}: {py_type} = {_DEFAULTS[py_type]}")
    return lines


def _field_tuple(fields: tuple[FieldSpec, ...], name: str = "FIELDS") -> list[str]:
    """`name` = the (attribute, type) pairs; a class attribute (the base class of the
    methods declares theirs ClassVar; compiled, an undeclared one is per instance)."""
    items = [f'("{f.attr}", "{f.type}")' for f in fields]
    if len(items) == 1:
        return [f"    {name} = ({items[0]},)"]
    return _wrap(f"{name} = (", items, "    ")


# A class's constants live in a base class of their own, not in the dataclass: compiled with
# mypyc, a dataclass takes every name in its body for a field, ClassVar or not.
def _render_method(method: MethodSpec) -> list[str]:
    name = method.python_name
    prefix = "".join(f"\\x{b:02x}" for b in (method.class_id << 16 | method.method_id).to_bytes(4))
    decode, values = _decode_lines(method.fields)
    lines = [
        "",
        "",
        f"class _{name}Constants(Method):",
        "    __slots__ = ()",
        f'    NAME = "{method.full_name}"',
        f"    CLASS_ID = {method.class_id}",
        f"    METHOD_ID = {method.method_id}",
        f"    INDEX = {method.class_id << 16 | method.method_id}",
        f"    SYNCHRONOUS = {method.synchronous}",
        f"    HAS_CONTENT = {method.has_content}",
        *_field_tuple(method.fields),
        "",
        "",
        "@dataclass(slots=True)",
        f"class {name}(_{name}Constants):",
        f'    """{method.full_name} ({method.class_id}, {method.method_id})"""',
    ]
    if method.fields:
        lines += ["", *_field_declarations(method.fields)]
    lines += [
        "",
        "    @classmethod",
        f"    def decode(cls, buf: memoryview) -> {name}:",
        *(f"        {line}" for line in decode),
        *_wrap("return cls(", [values[f.attr] for f in method.fields], "        "),
        "",
        "    def encode_into(self, out: bytearray) -> None:",
        f'        out += b"{prefix}"',
        *_encode_lines(method.fields),
    ]
    return lines


def _render_properties(amqp_class: ClassSpec) -> list[str]:
    properties = amqp_class.properties
    if len(properties) > 15:
        raise NotImplementedError("property flag continuation words are not generated")
    if any(p.type == "bit" for p in properties):
        raise NotImplementedError("bit properties are not generated")
    unknown_flags = (1 << (16 - len(properties))) - 1  # the unused low bits and continuation
    name = f"{amqp_class.name.capitalize()}Properties"
    lines = [
        "",
        "",
        f"class _{name}Constants:",
        "    __slots__ = ()",
        f"    CLASS_ID: ClassVar[int] = {amqp_class.class_id}",
        *_field_tuple(properties, "FIELDS: ClassVar[tuple[tuple[str, str], ...]]"),
        "",
        "",
        "@dataclass(slots=True)",
        f"class {name}(_{name}Constants):",
        f'    """Content header properties of class {amqp_class.name}; None means absent."""',
        "",
        *(f"    {p.attr}: {_PY_TYPES[p.type]} | None = None" for p in properties),
        "",
        "    @classmethod",
        f"    def decode(cls, buf: memoryview) -> {name}:",
        '        """Decode property flags and the property list (the header after body size)."""',
        "        (flags,) = U16.unpack_from(buf, 0)",
        f"        if flags & {unknown_flags:#06x}:",
        '            raise MalformedData(f"unknown property flags {flags:#06x}")',
        "        offset = 2",
    ]
    for index, prop in enumerate(properties):
        lines += [f"        {prop.attr} = None", f"        if flags & {1 << (15 - index):#06x}:"]
        if prop.type in _READERS:
            lines.append(f"            {prop.attr}, offset = {_READERS[prop.type]}(buf, offset)")
        else:
            struct_name = f"_S_{_STRUCT_CODES[prop.type]}"
            lines.append(f"            ({prop.attr},) = {struct_name}.unpack_from(buf, offset)")
            lines.append(f"            offset += {struct_name}.size")
    lines += [
        "        expect_end(buf, offset)",
        *_wrap("return cls(", [p.attr for p in properties], "        "),
        "",
        "    def encode_into(self, out: bytearray) -> None:",
        "        flags_at = len(out)",
        '        out += b"\\0\\0"  # flags, patched once we know which properties are present',
        "        flags = 0",
    ]
    for index, prop in enumerate(properties):
        lines += [
            f"        if self.{prop.attr} is not None:",
            f"            flags |= {1 << (15 - index):#06x}",
        ]
        if prop.type in _WRITERS:
            lines.append(f"            {_WRITERS[prop.type]}(out, self.{prop.attr})")
        else:
            lines.append(f"            out += _S_{_STRUCT_CODES[prop.type]}.pack(self.{prop.attr})")
    lines += [
        "        U16.pack_into(out, flags_at, flags)",
        "",
        "    def encode(self) -> bytes:",
        "        out = bytearray()",
        "        self.encode_into(out)",
        "        return bytes(out)",
    ]
    return lines


def _render_constants(spec: AmqpSpec) -> list[str]:
    def constant_name(name: str) -> str:
        return name.upper().replace("-", "_")

    reply_codes = [(n, v, c) for n, v, c in spec.constants if c or n.startswith("reply")]
    frame_constants = [(n, v) for n, v, c in spec.constants if (n, v, c) not in reply_codes]
    lines = [f"VERSION = {spec.version}"]
    lines += [f"{constant_name(n)} = {v}" for n, v in frame_constants]
    lines += ["", "", "class ReplyCode(enum.IntEnum):"]
    lines += [f"    {constant_name(n)} = {v}" for n, v, _ in reply_codes]
    hard = [f"ReplyCode.{constant_name(n)}" for n, _, c in reply_codes if c == "hard-error"]
    lines += ["", "", *_wrap("HARD_ERRORS = frozenset({", hard, "", "})")]
    return lines


def _struct_names(spec: AmqpSpec) -> list[str]:
    properties = [p for amqp_class in spec.classes for p in amqp_class.properties]
    codes = {_STRUCT_CODES[p.type] for p in properties if p.type in _STRUCT_CODES}
    for method in spec.methods:
        codes |= {s.codes for s in _segments(method.fields) if isinstance(s, _FixedRun)}
    return [f'_S_{code} = Struct(">{code}")' for code in sorted(codes)]


def render_module(spec: AmqpSpec) -> str:
    method_names = [m.python_name for m in spec.methods]
    property_classes = [c for c in spec.classes if c.properties]
    lines = [
        '"""AMQP 0-9-1 constants, methods and content properties.',
        "",
        "GENERATED from amqp0-9-1.xml by ``python -m mainstem.protocols.amqp091.generate``;",
        "do not edit by hand.",
        '"""',
        "",
        "# fmt: off",
        "",
        "from __future__ import annotations",
        "",
        "import enum",
        "from dataclasses import dataclass, field",
        "from struct import Struct",
        "from typing import Any, ClassVar",
        "",
        "from mainstem.protocols.amqp091.wire import (",
        "    U16,",
        "    MalformedData,",
        "    Method,",
        "    expect_end,",
        "    read_longstr,",
        "    read_shortstr,",
        "    read_table,",
        "    write_longstr,",
        "    write_shortstr,",
        "    write_table,",
        ")",
        "",
        *_render_constants(spec),
        "",
        *_struct_names(spec),
    ]
    for method in spec.methods:
        lines += _render_method(method)
    for amqp_class in property_classes:
        lines += _render_properties(amqp_class)
    lines += [
        "",
        "",
        "METHODS: tuple[type[Method], ...] = (",
        *(f"    {name}," for name in method_names),
        ")",
        "METHODS_BY_INDEX: dict[int, type[Method]] = {m.INDEX: m for m in METHODS}",
        *_wrap(
            "PROPERTIES_BY_CLASS_ID = {",
            [f"{c.class_id}: {c.name.capitalize()}Properties" for c in property_classes],
            "",
            "}",
        ),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if methods.py is stale")
    args = parser.parse_args(argv)
    source = render_module(load_spec())
    if args.check:
        current = OUTPUT.read_text("utf-8") if OUTPUT.exists() else ""
        if current != source:
            print(f"{OUTPUT} is stale; run python -m mainstem.protocols.amqp091.generate")
            return 1
        return 0
    OUTPUT.write_text(source, "utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
