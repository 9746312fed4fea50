"""A fence: proof that this node still owns a write to state other nodes share.

A node acts on shared objects (a tier's segments, their records) only under such proof,
never from its own view alone: a node frozen, restarted or cut off may still believe it
leads. The cluster hands a partition's leader its fence with its role (the leader key it
holds under its lease, with the value naming it and its epoch) and checks it in the same
transaction as the write it guards (a compare-and-swap), so a write made after the node
lost the lead fails instead of landing. The broker only carries fences; without a cluster
there are none, and this node owns what it writes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Fence:
    """Keys of the cluster's store that must hold exactly these values for a write made
    under this fence to happen; `epoch` the leader epoch it proves, for logs."""

    holds: tuple[tuple[str, bytes], ...]
    epoch: int


class FencedOut(Exception):
    """A write was refused: this node no longer owns it (another node leads), or the
    shared record it would replace is there already (records are written once)."""
