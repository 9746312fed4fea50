"""A replicated partition's last known commit point, kept in a small file beside its
segments.

A replica holds chunks its replica set may never have committed (a leader's tail that no
majority acked). After a restart it serves only what lies below the point saved here until
the replica set tells it more; Kafka keeps its high watermark in a checkpoint file for
the same reason. The point only ever lags the truth: it is saved from what was committed
(so also durable here), and a stale one merely hides chunks until the leader confirms them.
"""

from __future__ import annotations

import os
from pathlib import Path
from struct import Struct

FILE_NAME = "commit-point"
_POINT = Struct(">Q")


def save(directory: Path, offset: int) -> None:
    """Replace the saved point (not fsynced: after a power loss an older one is fine)."""
    temporary = directory / (FILE_NAME + ".tmp")
    temporary.write_bytes(_POINT.pack(offset))
    os.replace(temporary, directory / FILE_NAME)


def load(directory: Path) -> int:
    """The saved point; 0 when none was saved or the file is damaged."""
    try:
        raw = (directory / FILE_NAME).read_bytes()
    except FileNotFoundError:
        return 0
    return _POINT.unpack(raw)[0] if len(raw) == _POINT.size else 0
