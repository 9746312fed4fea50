"""Read the AMQP 0-9-1 XML specification (RabbitMQ's extended edition) into a small model.

Used by the generator that writes ``methods.py`` and by the tests that check the
generated module still matches the XML.
"""

from __future__ import annotations

import keyword
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from importlib import resources

SPEC_RESOURCE = "amqp0-9-1.xml"

PRIMITIVE_TYPES = frozenset(
    {"octet", "short", "long", "longlong", "bit", "shortstr", "longstr", "timestamp", "table"}
)

# The XML calls the last basic property "reserved"; RabbitMQ and every client call it cluster-id.
PROPERTY_RENAMES = {"reserved": "cluster-id"}


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str  # as in the XML: "routing-key"
    type: str  # one of PRIMITIVE_TYPES
    reserved: bool

    @property
    def attr(self) -> str:
        """The Python attribute name: "routing-key" -> "routing_key", "global" -> "global_"."""
        name = self.name.replace("-", "_")
        return name + "_" if keyword.iskeyword(name) else name


@dataclass(frozen=True, slots=True)
class MethodSpec:
    class_name: str
    class_id: int
    name: str
    method_id: int
    synchronous: bool
    has_content: bool
    fields: tuple[FieldSpec, ...]

    @property
    def full_name(self) -> str:
        return f"{self.class_name}.{self.name}"

    @property
    def python_name(self) -> str:
        """The class name: "basic" + "get-ok" -> "BasicGetOk"."""
        words = [self.class_name, *self.name.split("-")]
        return "".join(word.capitalize() for word in words)


@dataclass(frozen=True, slots=True)
class ClassSpec:
    name: str
    class_id: int
    methods: tuple[MethodSpec, ...]
    properties: tuple[FieldSpec, ...]


@dataclass(frozen=True, slots=True)
class AmqpSpec:
    version: tuple[int, int, int]
    constants: tuple[tuple[str, int, str | None], ...]  # name, value, error class
    classes: tuple[ClassSpec, ...]

    @property
    def methods(self) -> list[MethodSpec]:
        return [method for amqp_class in self.classes for method in amqp_class.methods]


def load_spec(xml_text: str | None = None) -> AmqpSpec:
    """Parse the spec; by default the copy shipped inside this package."""
    if xml_text is None:
        xml_text = resources.files(__package__).joinpath(SPEC_RESOURCE).read_text("utf-8")
    root = ElementTree.fromstring(xml_text)
    domains = {_attr(d, "name"): _attr(d, "type") for d in root.iter("domain")}
    constants = tuple(
        (_attr(c, "name"), int(_attr(c, "value")), c.get("class")) for c in root.iter("constant")
    )
    classes = tuple(_parse_class(element, domains) for element in root.iter("class"))
    version = (int(_attr(root, "major")), int(_attr(root, "minor")),
               int(_attr(root, "revision")))
    return AmqpSpec(version, constants, classes)


def _parse_class(element: ElementTree.Element, domains: dict[str, str]) -> ClassSpec:
    class_name = _attr(element, "name")
    class_id = int(_attr(element, "index"))
    methods = tuple(
        MethodSpec(
            class_name=class_name,
            class_id=class_id,
            name=_attr(method, "name"),
            method_id=int(_attr(method, "index")),
            synchronous=method.get("synchronous") == "1",
            has_content=method.get("content") == "1",
            fields=tuple(_parse_field(f, domains) for f in method.findall("field")),
        )
        for method in element.findall("method")
    )
    properties = tuple(_parse_field(f, domains, PROPERTY_RENAMES) for f in element.findall("field"))
    return ClassSpec(class_name, class_id, methods, properties)


def _parse_field(
    element: ElementTree.Element, domains: dict[str, str], renames: dict[str, str] | None = None
) -> FieldSpec:
    name = _attr(element, "name")
    # A field names either a domain or, for reserved fields, a primitive type directly.
    field_type = element.get("type") or domains[_attr(element, "domain")]
    while field_type not in PRIMITIVE_TYPES:
        field_type = domains[field_type]
    return FieldSpec(
        name=(renames or {}).get(name, name),
        type=field_type,
        reserved=element.get("reserved") == "1",
    )


def _attr(element: ElementTree.Element, name: str) -> str:
    """An attribute the spec always gives; a spec without it is not one we can read."""
    value = element.get(name)
    if value is None:
        raise ValueError(f"AMQP spec: <{element.tag}> has no {name!r} attribute")
    return value
