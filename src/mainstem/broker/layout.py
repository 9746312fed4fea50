"""Where each object's files live under the data directory: never a path made of user text.

A stream's or a durable queue's directory is named by a hash of its kind, namespace and
name (as RabbitMQ names a classic queue's directory by a hash of its resource name), so
no name can reach another object's files: `.`, `..`, `/`, a name whose escaped form is
too long for the file system, or two names that escape alike all get a directory of
their own, of the same fixed length. The catalog (streams) and the AMQP metadata
(queues) map names to objects; the hash maps an object to its directory, so no mapping
has to be stored, and none can get out of step with the files.

Data directories written before this layout named directories after the escaped names.
They are moved once, on the first start with this version, rather than kept readable
through a mapping: a mapping would keep a name-derived path alive forever. Each move is
a rename (atomic), the parent directories are fsynced, and a marker file written last
says the root is done; a crash in between repeats the moves still to do on the next
start. An old directory that was not the object's alone (`.` and `..` made the old
layout share directories between objects, even across vhosts) gives its log files to
the one object that claims it; when several do, the files stay where they are and an
error is logged, since no one can tell whose messages they hold.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from mainstem.log.segment_file import INDEX_SUFFIX, SEGMENT_SUFFIX
from mainstem.log.segments import fsync_directory

log = logging.getLogger("mainstem.broker")

MARKER = "layout"
VERSION = "2"


def storage_name(kind: str, namespace: str, name: str) -> str:
    """The directory name of an object: 32 hex digits of a hash of (kind, namespace, name).
    JSON keeps the three apart and encodes any string, lone surrogates included."""
    key = json.dumps([kind, namespace, name]).encode("ascii")
    return hashlib.sha256(key).hexdigest()[:32]


def migrate(root: Path, objects: Iterable[tuple[Sequence[str], Path]]) -> None:
    """Move old directories to storage names, once per root. `objects` pairs each object's
    old path (its escaped components under `root`) with its new directory."""
    if (root / MARKER).exists():
        return
    claims: dict[Path, list[Path]] = {}
    shared: set[Path] = set()
    for parts, new in objects:
        old = Path(os.path.normpath(os.path.join(root, *parts)))
        claims.setdefault(old, []).append(new)
        if any(part in (".", "..") for part in parts):
            shared.add(old)
    for old, news in claims.items():
        if not old.is_dir():
            continue
        if len(news) > 1:
            # its files are left there for manual recovery
            log.error("layout.shared_directory", extra={"directory": str(old),
                                                        "objects": len(news)})
        elif old in shared:
            _move_log_files(old, news[0])
        elif news[0].exists():
            log.error("layout.target_exists", extra={"directory": str(old),
                                                     "target": str(news[0])})
        else:
            _move_directory(old, news[0])
            if old.parent != root:
                with contextlib.suppress(OSError):  # an old namespace directory, if empty
                    old.parent.rmdir()
    _mark_current(root)


def _move_directory(old: Path, new: Path) -> None:
    new.parent.mkdir(parents=True, exist_ok=True)
    os.rename(old, new)
    fsync_directory(old.parent)
    fsync_directory(new.parent)


def _move_log_files(old: Path, new: Path) -> None:
    """Move the segment and index files lying directly in `old` into `new`."""
    files = [p for p in old.iterdir() if p.suffix in (SEGMENT_SUFFIX, INDEX_SUFFIX)]
    if not files:
        return
    new.mkdir(parents=True, exist_ok=True)
    for path in files:
        os.rename(path, new / path.name)
    fsync_directory(new)
    fsync_directory(new.parent)
    fsync_directory(old)


def _mark_current(root: Path) -> None:
    """Record that every directory under `root` has its storage name; durably."""
    root.mkdir(parents=True, exist_ok=True)
    temporary = root / (MARKER + ".tmp")
    with open(temporary, "w", encoding="ascii") as file:
        file.write(VERSION + "\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, root / MARKER)
    fsync_directory(root)

