"""Which of mainstem's modules run compiled, and the switch that runs them as Python.

The modules in `MODULES` are where the broker spends its CPU per message (profiles in
docs/performance.md). The package build compiles them with mypyc into C extensions from the
same typed source and records a digest of that source beside them (`STAMP`). At import,
`mainstem/__init__.py` calls `choose()`, which keeps the compiled modules only when they
were built from the sources that are there now; otherwise, or with `MAINSTEM_PURE=1`, every
one of them is loaded from its `.py` file. It is all or none: compiled modules call each
other natively, so a compiled caller of a stale module would run the old code.

This module is read by setup.py by path (no package import) and is never compiled itself.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

MODULES: tuple[str, ...] = (
    # frames and wire codecs
    "mainstem.formats.chunk",
    "mainstem.formats.osiris",
    "mainstem.protocols.amqp091.codec",
    "mainstem.protocols.amqp091.wire",
    "mainstem.protocols.amqp091.methods",
    "mainstem.protocols.amqp091.properties",
    "mainstem.protocols.amqp091.encode",
    "mainstem.protocols.rabbit_stream.wire",
    "mainstem.protocols.rabbit_stream.frames",
    "mainstem.protocols.rabbit_stream.responses",
    "mainstem.protocols.rabbit_stream.codec",
    "mainstem.protocols.iggy.codec",
    "mainstem.protocols.iggy.commands",
    "mainstem.protocols.iggy.batch",
    "mainstem.protocols.iggy.records",
    "mainstem.protocols.iggy.layouts",
    # AMQP protocol state and connection
    "mainstem.protocols.amqp091.state",
    "mainstem.protocols.amqp091.channel_state",
    "mainstem.protocols.amqp091.channel",
    "mainstem.protocols.amqp091.consumers",
    "mainstem.protocols.amqp091.connection",
    # AMQP queues: journal, paging, routing into them
    "mainstem.broker.amqp.queues.journal",
    "mainstem.broker.amqp.queues.paging",
    "mainstem.broker.amqp.queues.virtual_host",
    "mainstem.broker.amqp.queues.live_offsets",
    "mainstem.broker.amqp.queues.credit_flow",
    # the stream service: appends and subscriptions
    "mainstem.broker.stream_service.appender",
    "mainstem.broker.stream_service.gate",
    "mainstem.broker.stream_service.subscription",
    "mainstem.broker.delivery_stats",
    "mainstem.broker.message_stats",
    "mainstem.broker.alarms",
    # the log
    "mainstem.log.commit",
    "mainstem.log.commit_view",
    "mainstem.log.descriptors",
    "mainstem.log.index",
    "mainstem.log.segment_file",
    "mainstem.log.partition",
    "mainstem.log.tiered_segment",  # its class inherits the compiled Segment
)
# A class run as Python cannot inherit from a compiled one (and a compiled class's methods
# take only instances of compiled classes), so these stay Python on purpose: log/errors.py
# (NotWritable and TierUnavailable have subclasses elsewhere), the AMQP queue and message
# (the cluster's relayed queues and messages, quorum queues, extend them dynamically).
STAMP = "compiled-sources.json"  # in the package directory: {module: sha256 of its source}
PURE_ENV = "MAINSTEM_PURE"

COMPILED = False  # whether the compiled modules are in use (set by `choose`)
STALE = False  # whether there is a compiled build, but of other sources
REASON = "not chosen yet"  # why, in words, for the server's start-up line


def source_path(root: Path, module: str) -> Path:
    """A module's `.py` file under `root` (the directory holding the `mainstem` package)."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def digests(root: Path, modules: Sequence[str] = MODULES) -> dict[str, str]:
    """The sha256 of every compiled module's source under `root`."""
    return {module: hashlib.sha256(source_path(root, module).read_bytes()).hexdigest()
            for module in modules}


def choose() -> bool:
    """Keep the compiled modules, or load all of them from source; record which and why."""
    global COMPILED, STALE, REASON
    root = Path(__file__).resolve().parents[1]
    COMPILED, REASON = _decide(root)
    STALE = REASON.startswith(_STALE)
    if not COMPILED:
        sys.meta_path.insert(0, _SourceOnly(frozenset(MODULES)))
    return COMPILED


def _decide(root: Path) -> tuple[bool, str]:
    stamp = root / "mainstem" / STAMP
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return False, f"{PURE_ENV} is set"
    if not stamp.exists() or not _built_here(root):
        return False, "no compiled build (pure Python)"
    try:
        recorded = json.loads(stamp.read_text())
        now = digests(root)
    except (OSError, ValueError) as error:
        return False, f"compiled build unreadable ({error}): pure Python"
    stale = sorted(module for module, digest in now.items() if recorded.get(module) != digest)
    if stale:
        named = ", ".join(stale[:3]) + (", ..." if len(stale) > 3 else "")
        return False, f"{_STALE} ({named}): pure Python until rebuilt (scripts/build)"
    return True, f"{len(MODULES)} modules compiled (mypyc)"


_STALE = "compiled build older than its sources"


def _built_here(root: Path) -> bool:
    """Whether the extension of the first module is next to its source."""
    package, _, name = MODULES[0].rpartition(".")
    folder = root.joinpath(*package.split("."))
    return any((folder / f"{name}{suffix}").exists()
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


class _SourceOnly:
    """A meta path finder that loads the compiled modules from their `.py` files."""

    def __init__(self, modules: frozenset[str]) -> None:
        self.modules = modules

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in self.modules or path is None:
            return None
        leaf = name.rpartition(".")[2]
        for folder in path:
            source = Path(folder, f"{leaf}.py")
            if source.exists():
                loader = importlib.machinery.SourceFileLoader(name, str(source))
                return importlib.util.spec_from_file_location(name, source, loader=loader)
        return None
