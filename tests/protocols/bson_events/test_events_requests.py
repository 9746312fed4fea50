"""The checks of a request's fields (requests.py) on bodies of any shape: each gives the
field typed as the protocol wants it, or a failed request naming the field; never another
exception."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import bson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mainstem.protocols.bson_events import requests as rq
from mainstem.protocols.bson_events.state import FrameFailed

# What a BSON document may hold under a key, booleans apart from integers as BSON keeps them.
values = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.text(max_size=8),
                   st.binary(max_size=4), st.floats(allow_nan=False),
                   st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
                   st.lists(st.integers(), max_size=2))
KEYS = ("rID", "event", "sessID", "name", "channel", "matcher", "durableID", "startPos",
        "startTimestamp", "queryID", "docs", "position")
bodies = st.dictionaries(st.sampled_from(KEYS), values)
# as BSON keys are: UTF-8 text without NUL
keys = st.text(st.characters(codec="utf-8", blacklist_characters="\x00"), max_size=4)


def outcome(check: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", check()
    except FrameFailed as failed:
        return failed.code, failed.message


@given(bodies)
def test_name_fields_are_non_empty_strings(body: dict[str, Any]) -> None:
    for check, key in ((lambda: rq.name(body, "name"), "name"),
                       (lambda: rq.channel_name(body), "channel")):
        kind, value = outcome(check)
        given_value = body.get(key)
        if kind == "ok":
            assert value == given_value and isinstance(value, str)
        else:
            assert kind == "INVALID_FRAME" and repr(key) in value
            assert not isinstance(given_value, str) or (key == "name" and not given_value)


@given(bodies)
def test_optional_fields_are_absent_or_of_their_type(body: dict[str, Any]) -> None:
    for check, key, kind_wanted in ((rq.matcher, "matcher", dict),
                                    (rq.durable_id, "durableID", str)):
        kind, value = outcome(partial(check, body))
        if body.get(key) is None or isinstance(body[key], kind_wanted):
            assert (kind, value) == ("ok", body.get(key))
        else:
            assert kind == "INVALID_FRAME" and repr(key) in value


@given(bodies)
def test_a_subscription_starts_at_its_position_else_its_time(body: dict[str, Any]) -> None:
    kind, start = outcome(lambda: rq.start(body))
    position, timestamp = body.get("startPos"), body.get("startTimestamp")
    if position is not None:
        valid = isinstance(position, int) and position >= 0
        assert (kind, start) == ("ok", rq.Start(position=position)) if valid else \
            kind == "INVALID_FRAME"
    elif timestamp is not None:
        valid = isinstance(timestamp, int)
        assert (kind, start) == ("ok", rq.Start(timestamp=timestamp)) if valid else \
            kind == "INVALID_FRAME"
    else:
        assert (kind, start) == ("ok", rq.Start())


@given(bodies, st.sets(st.integers(0, 5)))
def test_a_query_id_is_a_new_integer(body: dict[str, Any], open_queries: set[int]) -> None:
    kind, query_id = outcome(lambda: rq.new_query_id(body, open_queries))
    given_id = body.get("queryID")
    if isinstance(given_id, int) and given_id not in open_queries:
        assert (kind, query_id) == ("ok", given_id)
    else:
        assert kind == "INVALID_FRAME"


@given(bodies)
def test_a_handover_position_is_a_non_negative_integer(body: dict[str, Any]) -> None:
    kind, position = outcome(lambda: rq.position(body))
    given_position = body.get("position")
    if type(given_position) is int and given_position >= 0:
        assert (kind, position) == ("ok", given_position)
    else:
        assert kind == "INVALID_FRAME"


@given(st.lists(st.tuples(st.integers(), st.dictionaries(st.text(max_size=4), st.integers(),
                                                          max_size=2)), max_size=4))
def test_loaded_documents_come_as_id_and_document_pairs(pairs: list[tuple[int, dict]]) -> None:
    body = {"docs": [{"id": i, "doc": d} for i, d in pairs]}
    assert rq.docs(body) == pairs
    for broken in ([{"doc": {}}], [{"id": 1, "doc": 2}], {"id": 1}):
        with pytest.raises(FrameFailed, match="'docs'"):
            rq.docs({"docs": broken})


@given(st.dictionaries(keys, st.integers(-2**63, 2**63 - 1), max_size=3),
       st.integers(0, 2**31))
def test_a_published_event_is_stored_as_its_bson(event: dict[str, int], request_id: int) -> None:
    body = {"rID": request_id, "event": event}
    raw = rq.event_bytes(body, 1 << 20)
    assert raw == bson.encode(event)
    with pytest.raises(FrameFailed) as too_large:
        rq.event_bytes(body, len(raw) - 1)
    assert too_large.value.code == "EVENT_TOO_LARGE"
    for broken in ({"event": event}, {"rID": request_id, "event": 1},
                   {"rID": request_id, "event": event, "sessID": "s"}):
        with pytest.raises(FrameFailed) as invalid:
            rq.event_bytes(broken, 1 << 20)
        assert invalid.value.code == "INVALID_FRAME"


def test_a_session_is_an_integer_not_a_boolean() -> None:
    assert rq.session_of({"sessID": 7}) == 7
    for broken in ({}, {"sessID": True}, {"sessID": "7"}):
        with pytest.raises(FrameFailed, match="'sessID'"):
            rq.session_of(broken)
