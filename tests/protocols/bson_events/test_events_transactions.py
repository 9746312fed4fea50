"""A connection's transactions driven directly, against a model: no socket, no event
loop. (A PUBLISH's checks: test_events_requests.py.)"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mainstem.protocols.bson_events.state import FrameFailed
from mainstem.protocols.bson_events.transactions import MAX_TX_EVENTS, Transactions

operations = st.lists(st.one_of(
    st.tuples(st.just("start"), st.integers(0, 2)),
    st.tuples(st.just("publish"), st.integers(0, 2), st.sampled_from("abc")),
    st.tuples(st.just("commit"), st.integers(0, 2)),
    st.tuples(st.just("abort"), st.integers(0, 2)),
), max_size=40)


@given(operations)
def test_a_commit_stores_what_its_session_published_by_channel(script: list[tuple]) -> None:
    transactions: Transactions[str] = Transactions()
    model: dict[int, list[tuple[str, bytes]]] = {}
    for n, (kind, session, *channel) in enumerate(script):
        expected_code = None
        if kind == "start" and session in model:
            expected_code = "TX_IN_PROGRESS"
        elif kind != "start" and session not in model:
            expected_code = "NO_TX"
        try:
            if kind == "start":
                transactions.start(session)
                model[session] = []
            elif kind == "publish":
                transactions.add(session, channel[0], bytes([n]))
                model[session].append((channel[0], bytes([n])))
            elif kind == "commit":
                grouped = transactions.commit(session)
                events = model.pop(session)
                order = list(dict.fromkeys(c for c, _ in events))
                assert grouped == [(c, [raw for e, raw in events if e == c]) for c in order]
            else:
                transactions.abort(session)
                del model[session]
        except FrameFailed as failed:
            assert failed.code == expected_code
        else:
            assert expected_code is None


def test_a_transaction_holds_one_chunk_at_most() -> None:
    transactions: Transactions[str] = Transactions()
    transactions.start(1)
    for _ in range(MAX_TX_EVENTS):
        transactions.add(1, "c", b"e")
    with pytest.raises(FrameFailed) as failed:
        transactions.add(1, "c", b"one too many")
    assert failed.value.code == "TX_TOO_LARGE"
    assert [len(events) for _, events in transactions.commit(1)] == [MAX_TX_EVENTS]
