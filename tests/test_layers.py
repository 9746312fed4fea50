"""The floors of the house, checked: every import inside mainstem points down (or to the
side, for admin and spark), never up. docs/house.md draws the same floors.

A unit is a top-level module or package of mainstem, except that each protocol under
`protocols/` is a unit of its own, so that one protocol cannot lean on another.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import mainstem

SOURCE = Path(mainstem.__file__).parent

# The pieces every protocol shares: the connection base, the server's identity, the
# receive loop, the listener's protocol sniffing, the registry of live connections and
# output paced by the socket.
PROTOCOL_FLOOR = {"protocols.base", "protocols.identity", "protocols.receiver",
                  "protocols.sniff", "protocols.registry", "protocols.paced_output"}
PROTOCOLS = {"protocols.amqp091", "protocols.bson_events", "protocols.iggy",
             "protocols.rabbit_stream", "protocols.segment"}
CORE = {"formats", "log", "broker", "logging_setup"}
BELOW_THE_SERVER = CORE | {"cluster", "protocols", "handshakes", "config", "tls",
                           "workers", "admin", "spark", "client"} | PROTOCOL_FLOOR | PROTOCOLS

# unit -> the units it may import. Files know nothing of semantics; semantics nothing of
# wires; a protocol reaches partitions only through the broker (its stream service).
MAY_IMPORT: dict[str, set[str]] = {
    "formats": set(),
    "logging_setup": set(),
    "log": {"formats", "logging_setup"},
    "broker": {"log", "formats", "logging_setup"},
    "cluster": {"broker", "log", "formats", "logging_setup"},
    **{floor: {"broker", "formats", "logging_setup"} | PROTOCOL_FLOOR
       for floor in PROTOCOL_FLOOR},
    **{name: {"broker", "formats", "logging_setup"} | PROTOCOL_FLOOR for name in PROTOCOLS},
    "protocols": PROTOCOL_FLOOR | PROTOCOLS,
    # Clients reuse the protocols' codecs (tests/client/test_client_imports.py checks
    # they load no connection module) and the formats, nothing of the broker.
    "client": {"formats"} | PROTOCOLS,
    # On the side: management and Spark read the broker; Spark asks the management API,
    # and its executors read tiered segments straight from the object store (the log's
    # tier and chunk decoding).
    "admin": {"broker", "cluster", "formats", "logging_setup"} | PROTOCOL_FLOOR | PROTOCOLS,
    "spark": {"client", "formats", "log", "broker", "admin", "protocols.rabbit_stream"},
    "handshakes": {"broker"},
    "config": {"broker", "log", "formats", "protocols"} | PROTOCOL_FLOOR,
    "tls": {"config"},
    "workers": PROTOCOL_FLOOR | PROTOCOLS,
    "server": BELOW_THE_SERVER,
    "cli": BELOW_THE_SERVER | {"server"},
    "__main__": {"cli"},
    "__init__": {"server", "compiled"},  # the lazy export of Broker; the compiled build
    "compiled": set(),
    "testing_wait": set(),
    "testing_cluster": {"testing_wait"},
    "testing": {"server", "testing_cluster", "testing_wait"},
}
# Anyone may import the package itself (its __version__; Broker is exported lazily).
# An import made only for type annotations points the same way as any other.


def unit_of(module: str) -> str:
    parts = module.split(".")[1:] or ["__init__"]
    if parts[0] == "protocols" and len(parts) > 1:
        return f"protocols.{parts[1]}"
    return parts[0]


def module_of(path: Path, source: Path) -> str:
    parts = path.relative_to(source.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, source: Path, names_too: bool = False
            ) -> Iterator[tuple[str, int]]:
    """(module imported, line) of each mainstem import; with `names_too`, also each
    `package.name` a `from package import name` takes."""
    module = module_of(path, source)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            names = [base] + [f"{base}.{alias.name}" for alias in node.names if names_too]
        else:
            continue
        for name in names:
            if name == "mainstem" or name.startswith("mainstem."):
                yield name, node.lineno


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")[:len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def violations(source: Path = SOURCE) -> list[str]:
    found = []
    for path in sorted(source.rglob("*.py")):
        here = unit_of(module_of(path, source))
        for name, line in imports(path, source):
            there = unit_of(name)
            if there in (here, "__init__") or there in MAY_IMPORT.get(here, set()):
                continue
            found.append(f"{path.relative_to(source)}:{line}: {here} imports {name}")
    return found


def test_every_import_points_down() -> None:
    assert violations() == []


# Inside the broker, partitions are written and read through the stream service. The log's
# own objects (partitions, segment files, transfers, indexes) are reached only from it and
# from the modules that open partitions or lay out the data directory.
LOG_OBJECTS = ("mainstem.log.partition", "mainstem.log.segments", "mainstem.log.segment_file",
               "mainstem.log.reader", "mainstem.log.transfer", "mainstem.log.index",
               "mainstem.log.guard", "mainstem.log.writer_state", "mainstem.log.commit_view",
               "mainstem.log.epochs")
OPENS_PARTITIONS = {
    "mainstem.broker.streams",  # a stream's partitions
    "mainstem.broker.amqp.queues.journal",  # a durable queue's journal
    "mainstem.broker.amqp.queues.spill",  # a queue's paged-out messages
    "mainstem.broker.amqp.queues.manager",  # a quorum queue's journal, for the cluster
    "mainstem.broker.layout",  # storage names and their migration
    "mainstem.broker.legacy",  # an older data directory, converted at start
}


def test_the_broker_reaches_partitions_only_through_the_stream_service() -> None:
    found = []
    for path in sorted((SOURCE / "broker").rglob("*.py")):
        module = module_of(path, SOURCE)
        if module.startswith("mainstem.broker.stream_service") or module in OPENS_PARTITIONS:
            continue
        found += [f"{module} imports {name}" for name, _ in imports(path, SOURCE)
                  if name.startswith(LOG_OBJECTS)]
    assert found == []


def test_every_unit_has_its_floor_declared() -> None:
    units = {unit_of(module_of(path, SOURCE)) for path in SOURCE.rglob("*.py")}
    assert units - MAY_IMPORT.keys() == set()


def test_the_check_sees_upward_imports(tmp_path: Path) -> None:
    # The check itself must be able to fail: a protocol reading the log directly, the
    # broker reaching up to a protocol (relatively), a client loading the broker, the
    # management app reaching up to the server for a type alone.
    tree = {
        "protocols/iggy/records.py": "from mainstem.log.partition import Partition\n",
        "broker/core.py": "from ..protocols.iggy import codec\n",
        "client/stream.py": "if TYPE_CHECKING:\n    import mainstem.broker.auth\n",
        "admin/app.py": "if TYPE_CHECKING:\n    from mainstem.server import Broker\n",
    }
    write_tree(tmp_path / "mainstem", tree)
    assert violations(tmp_path / "mainstem") == [
        "admin/app.py:2: admin imports mainstem.server",
        "broker/core.py:1: broker imports mainstem.protocols.iggy",
        "client/stream.py:2: client imports mainstem.broker.auth",
        "protocols/iggy/records.py:1: protocols.iggy imports mainstem.log.partition",
    ]


# The cluster replicates a partition through its stream service's roles (`stand_by`,
# `lead`, `follow`): it never imports the partition, reaches a service's `.partition`, or
# sets an appender's `forwarder` itself.
def write_tree(root: Path, tree: dict[str, str]) -> None:
    """Made-up source files (path below `root` -> text), for a check to be shown failing."""
    for name, text in tree.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def cluster_reaches_past_the_service(source: Path = SOURCE) -> list[str]:
    found = []
    for path in sorted((source / "cluster").rglob("*.py")):
        where = path.relative_to(source)
        found += [f"{where}:{line}: imports {name}" for name, line in imports(path, source)
                  if name.startswith("mainstem.log.partition")]
        reaching = [node for node in ast.walk(ast.parse(path.read_text(), str(path)))
                    if isinstance(node, ast.Attribute) and _reaches_in(node)]
        found += [f"{where}:{node.lineno}: .{_name(node.value)}.{node.attr}"
                  for node in sorted(reaching, key=lambda node: node.lineno)]
    return found


def _reaches_in(node: ast.Attribute) -> bool:
    owner = _name(node.value)
    return ((node.attr == "partition" and owner.endswith("service"))
            or (node.attr == "forwarder" and owner.endswith("appender")))


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def test_the_cluster_changes_partitions_only_through_the_service_roles() -> None:
    assert cluster_reaches_past_the_service() == []


def test_the_role_check_sees_the_cluster_reaching_past_the_service(tmp_path: Path) -> None:
    tree = {
        "cluster/leader.py": "from mainstem.log.partition import Partition\n",
        "cluster/replica.py": ("def lead(role):\n    role.service.partition.writable = True\n"
                               "    service.appender.forwarder = None\n"),
        "cluster/wire.py": "def name(hello):\n    return hello.partition\n",  # a number
    }
    write_tree(tmp_path / "mainstem", tree)
    assert cluster_reaches_past_the_service(tmp_path / "mainstem") == [
        "cluster/leader.py:1: imports mainstem.log.partition",
        "cluster/replica.py:2: .service.partition",
        "cluster/replica.py:3: .appender.forwarder",
    ]


# The parts of a cluster node are handed small contexts (`cluster/context.py`, a
# replica's `ReplicaContext`), never the node: only node.py names ClusterNode or imports
# its module, so no part calls the node's private methods or reaches through it.
NODE_MODULE = "mainstem.cluster.node"


def cluster_parts_naming_the_node(source: Path = SOURCE) -> list[str]:
    found = []
    for path in sorted((source / "cluster").rglob("*.py")):
        if path.name == "node.py":
            continue
        where = path.relative_to(source)
        found += [f"{where}:{line}: imports the node's module" for line in sorted({
            line for name, line in imports(path, source, names_too=True)
            if name == NODE_MODULE or name.startswith(NODE_MODULE + ".")})]
        found += [f"{where}:{number}: names ClusterNode"
                  for number, text in enumerate(path.read_text().splitlines(), 1)
                  if re.search(r"\bClusterNode\b", text)]
    return found


def test_only_the_node_knows_the_cluster_node() -> None:
    assert cluster_parts_naming_the_node() == []


def test_the_node_check_sees_a_part_naming_the_node(tmp_path: Path) -> None:
    tree = {
        "cluster/node.py": "class ClusterNode:\n    pass\n",
        "cluster/replica.py": ("if TYPE_CHECKING:\n"
                               "    from mainstem.cluster.node import ClusterNode\n"),
        "cluster/leader.py": "from mainstem.cluster import node\n",
        "cluster/wire.py": "def lead(owner: 'ClusterNode') -> None:\n    pass\n",
    }
    write_tree(tmp_path / "mainstem", tree)
    assert cluster_parts_naming_the_node(tmp_path / "mainstem") == [
        "cluster/leader.py:1: imports the node's module",
        "cluster/replica.py:2: imports the node's module",
        "cluster/replica.py:2: names ClusterNode",
        "cluster/wire.py:1: names ClusterNode",
    ]
