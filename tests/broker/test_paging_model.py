"""Property tests of the compact structures behind queue paging, against plain models: the
live offsets of a journal (their floor decides which segments go) and a level's paged-out
messages (taken back a batch at a time, bounded by count and bytes)."""

from __future__ import annotations

from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from mainstem.broker.amqp.queues import live_offsets, paging
from mainstem.broker.amqp.queues.live_offsets import LiveOffsets
from mainstem.broker.amqp.queues.paging import PagedRun


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 50), st.integers(1, 5)), max_size=300))
def test_live_offsets_agree_with_a_set(steps: list[tuple[bool, int, int]]) -> None:
    with mock.patch.object(live_offsets, "BLOCK_OFFSETS", 4):  # many blocks
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


@given(st.lists(st.one_of(st.tuples(st.just("add"), st.integers(0, 9)),
                          st.tuples(st.integers(-1, 7), st.integers(0, 20))), max_size=200))
def test_paged_run_takes_what_fits(steps: list[tuple]) -> None:
    with mock.patch.object(paging, "BLOCK_ENTRIES", 3):
        run, model = PagedRun(), []
        seq = 0
        for step in steps:
            if step[0] == "add":
                seq += 1
                run.append(seq, seq * 10, step[1], None, True)
                model.append((seq, step[1]))
            elif model:
                count, size = step
                fits = 0  # the longest prefix within both limits, but at least one
                while fits < min(count, len(model)) and \
                        sum(s for _, s in model[:fits + 1]) <= size:
                    fits += 1
                expected = max(fits, 1)
                taken = run.take(count, size)
                assert [(s, loc) for s, loc, _, _ in taken] == \
                    [(s, s * 10) for s, _ in model[:expected]]
                del model[:expected]
            assert len(run) == len(model)
            assert run.journal_offsets() == [s * 10 for s, _ in model]
