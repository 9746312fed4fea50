"""Property test: the compact set of a queue journal's live offsets agrees with a plain set
under random in-order adds and any-order settles (its floor decides which segments go)."""

from __future__ import annotations

from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from mainstem.broker.queues import live_offsets
from mainstem.broker.queues.live_offsets import LiveOffsets


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 50), st.integers(1, 5)), max_size=300))
def test_live_offsets_agree_with_a_set(steps: list[tuple[bool, int, int]]) -> None:
    with mock.patch.object(live_offsets, "_COMPACT_AT", 8):  # shift the array often
        check(steps)


def check(steps: list[tuple[bool, int, int]]) -> None:
    compact, model = LiveOffsets(), set()
    next_offset = 0
    for add, pick, gap in steps:
        if add or not model:
            next_offset += gap
            compact.add(next_offset)
            model.add(next_offset)
        else:
            settled = sorted(model)[pick % len(model)]
            model.remove(settled)
            compact.discard(settled)
        assert compact.floor() == min(model, default=None)
        assert len(compact) == len(model)
        assert list(compact) == sorted(model)
