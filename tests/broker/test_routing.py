"""AMQP 0-9-1 exchange routing semantics, checked against RabbitMQ's behaviour."""

from __future__ import annotations

import decimal
import json
import random
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mainstem.broker.amqp.routing import (
    Binding,
    DirectMatcher,
    ExchangeGraph,
    ExchangeType,
    FanoutMatcher,
    HeadersMatcher,
    TopicMatcher,
)
from mainstem.broker.errors import AccessRefused, InvalidArgument, NotFound, PreconditionFailed


def queues(destinations: set[tuple[str, str]]) -> set[str]:
    return {name for _kind, name in destinations}


def topic_with(patterns: dict[str, str]) -> TopicMatcher:
    """A topic matcher binding each pattern to the queue named by the dict value."""
    matcher = TopicMatcher()
    for pattern, queue in patterns.items():
        matcher.add_binding(Binding("t", queue, routing_key=pattern))
    return matcher


# -- direct and fanout ---------------------------------------------------------


def test_direct_routes_on_equal_keys_only() -> None:
    matcher = DirectMatcher()
    matcher.add_binding(Binding("x", "q1", routing_key="a"))
    matcher.add_binding(Binding("x", "q2", routing_key="a"))
    matcher.add_binding(Binding("x", "x2", "exchange", routing_key="b"))
    assert matcher.route("a") == {("queue", "q1"), ("queue", "q2")}
    assert matcher.route("b") == {("exchange", "x2")}
    assert matcher.route("A") == set()
    assert matcher.route("") == set()


def test_direct_keeps_a_destination_until_its_last_binding_goes() -> None:
    matcher = DirectMatcher()
    with_args = Binding("x", "q", routing_key="a", arguments={"v": 1})
    without_args = Binding("x", "q", routing_key="a")
    matcher.add_binding(with_args)
    matcher.add_binding(without_args)
    matcher.remove_binding(with_args)
    assert matcher.route("a") == {("queue", "q")}
    matcher.remove_binding(without_args)
    assert matcher.route("a") == set()


def test_fanout_routes_everywhere_whatever_the_key() -> None:
    matcher = FanoutMatcher()
    matcher.add_binding(Binding("x", "q1", routing_key="ignored"))
    matcher.add_binding(Binding("x", "q2"))
    assert queues(matcher.route("anything", {"h": 1})) == {"q1", "q2"}
    matcher.remove_binding(Binding("x", "q1", routing_key="ignored"))
    assert queues(matcher.route("")) == {"q2"}


# -- topic ---------------------------------------------------------------------

# RabbitMQ tutorial 5 ("Topics"): Q1 binds "*.orange.*", Q2 "*.*.rabbit" and "lazy.#".
TUTORIAL = {"*.orange.*": "Q1", "*.*.rabbit": "Q2", "lazy.#": "Q2"}


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("quick.orange.rabbit", {"Q1", "Q2"}),
        ("lazy.orange.elephant", {"Q1", "Q2"}),
        ("quick.orange.fox", {"Q1"}),
        ("lazy.brown.fox", {"Q2"}),
        ("lazy.pink.rabbit", {"Q2"}),
        ("quick.brown.fox", set()),
        ("orange", set()),
        ("quick.orange.new.rabbit", set()),
        ("lazy.orange.new.rabbit", {"Q2"}),
        ("lazy", {"Q2"}),
    ],
)
def test_topic_tutorial_cases(key: str, expected: set[str]) -> None:
    assert queues(topic_with(TUTORIAL).route(key)) == expected


# The binding table of RabbitMQ's own topic exchange test suite.
SUITE_BINDINGS = {
    "a.b.c": "t1",
    "a.*.c": "t2",
    "a.#.b": "t3",
    "a.b.b.c": "t4",
    "#": "t5",
    "#.#": "t6",
    "#.b": "t7",
    "*.*": "t8",
    "a.*": "t9",
    "*.b.c": "t10",
    "a.#": "t11",
    "a.#.#": "t12",
    "b.b.c": "t13",
    "a.b.b": "t14",
    "a.b": "t15",
    "b.c": "t16",
    "": "t17",
    "*.*.*": "t18",
    "vodka.martini": "t19",
    "*.#": "t21",
    "#.*.#": "t22",
    "*.#.#": "t23",
    "#.#.#": "t24",
    "*": "t25",
    "#.b.#": "t26",
}


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("a.b.c", "t1 t2 t5 t6 t10 t11 t12 t18 t21 t22 t23 t24 t26"),
        ("a.b", "t3 t5 t6 t7 t8 t9 t11 t12 t15 t21 t22 t23 t24 t26"),
        ("a.b.b", "t3 t5 t6 t7 t11 t12 t14 t18 t21 t22 t23 t24 t26"),
        ("", "t5 t6 t17 t24"),
        ("b.c.c", "t5 t6 t18 t21 t22 t23 t24 t26"),
        ("a.a.a.a.a", "t5 t6 t11 t12 t21 t22 t23 t24"),
        ("vodka.gin", "t5 t6 t8 t21 t22 t23 t24"),
        ("vodka.martini", "t5 t6 t8 t19 t21 t22 t23 t24"),
        ("b.b.c", "t5 t6 t10 t13 t18 t21 t22 t23 t24 t26"),
        ("nothing.here.at.all", "t5 t6 t21 t22 t23 t24"),
        ("oneword", "t5 t6 t21 t22 t23 t24 t25"),
    ],
)
def test_topic_rabbitmq_suite_cases(key: str, expected: str) -> None:
    assert queues(topic_with(SUITE_BINDINGS).route(key)) == set(expected.split())


@pytest.mark.parametrize(
    ("pattern", "matching", "not_matching"),
    [
        ("#", ["", "a", "a.b.c", "..", "a..b"], []),
        ("#.#", ["", "a", "a.b"], []),
        ("a.#.b", ["a.b", "a.x.b", "a.x.y.b", "a..b"], ["a", "b", "a.b.c", "x.a.b"]),
        ("#.a", ["a", "x.a", "x.y.a", ".a"], ["a.x", "", "a."]),
        ("a.*.#", ["a.b", "a.b.c.d", "a."], ["a", "b.a.c"]),
        ("a.#", ["a", "a.b", "a.", "a.b.c"], ["", "b", "ab"]),
        ("*", ["a", "x"], ["", "a.b", "."]),
        ("", [""], ["a", "."]),
        # Empty words are words: "a..b" is "a", "", "b".
        ("a..b", ["a..b"], ["a.b", "a...b"]),
        ("a.*.b", ["a..b", "a.x.b"], ["a.b", "a.x.y.b"]),
        ("a.", ["a."], ["a", "a.b"]),
        ("*.*", [".", "a.", ".b", "a.b"], ["", "a", "a.b.c"]),
        ("#.*", ["a", "a.b", "."], [""]),
        ("*.#.*", ["a.b", "a.b.c"], ["a", ""]),
    ],
)
def test_topic_wildcards_and_empty_words(
    pattern: str, matching: list[str], not_matching: list[str]
) -> None:
    matcher = topic_with({pattern: "q"})
    for key in matching:
        assert matcher.route(key) == {("queue", "q")}, key
    for key in not_matching:
        assert matcher.route(key) == set(), key


def test_topic_wildcard_characters_in_a_routing_key_are_plain_words() -> None:
    matcher = topic_with({"a.b": "literal", "a.*": "star", "#.c": "hash"})
    assert queues(matcher.route("a.*")) == {"star"}
    assert queues(matcher.route("#")) == set()
    assert queues(matcher.route("#.c")) == {"hash"}


def test_topic_removal_prunes_and_keeps_shared_paths() -> None:
    matcher = topic_with({"a.#": "q1", "a.#.b": "q2", "a.*": "q3"})
    matcher.remove_binding(Binding("t", "q1", routing_key="a.#"))
    assert queues(matcher.route("a.b")) == {"q2", "q3"}
    assert queues(matcher.route("a.x.b")) == {"q2"}
    matcher.remove_binding(Binding("t", "q2", routing_key="a.#.b"))
    matcher.remove_binding(Binding("t", "q3", routing_key="a.*"))
    assert queues(matcher.route("a.b")) == set()
    assert matcher._root.is_empty()  # nothing left behind


def reference_topic_match(pattern: str, key: str) -> bool:
    """The spec, plainly: every key word is followed by a ".", "*" eats one word,
    "#" any number of them."""
    words = key.split(".") if key else []
    subject = "".join(word + "." for word in words)
    wildcards = {"*": r"[^.]*\.", "#": r"(?:[^.]*\.)*"}
    parts = pattern.split(".") if pattern else []
    regex = "".join(wildcards.get(part, re.escape(part) + r"\.") for part in parts)
    return re.fullmatch(regex, subject) is not None


key_words = st.lists(st.sampled_from(["a", "b", "c", ""]), max_size=6)
pattern_words = st.lists(st.sampled_from(["a", "b", "", "*", "#"]), max_size=6)


@settings(max_examples=300, deadline=None)
@given(
    patterns=st.lists(pattern_words.map(".".join), min_size=1, max_size=25),
    keys=st.lists(key_words.map(".".join), min_size=1, max_size=10),
    removed=st.sets(st.integers(min_value=0, max_value=24)),
)
def test_topic_trie_agrees_with_a_regex_reference(
    patterns: list[str], keys: list[str], removed: set[int]
) -> None:
    bindings = [Binding("t", f"q{i}", routing_key=p) for i, p in enumerate(patterns)]
    matcher = TopicMatcher()
    for binding in bindings:
        matcher.add_binding(binding)
    for binding in bindings:
        if int(binding.destination[1:]) in removed:
            matcher.remove_binding(binding)
    live = [b for b in bindings if int(b.destination[1:]) not in removed]
    for key in keys:
        expected = {b.destination for b in live if reference_topic_match(b.routing_key, key)}
        assert queues(matcher.route(key)) == expected, (key, patterns)


def test_topic_routing_against_10000_bindings_is_fast() -> None:
    """Like a real topic space: mostly literal words, a wildcard in some keys."""
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(100)]

    def pattern() -> str:
        words = [rng.choice(vocabulary) for _ in range(rng.randint(2, 5))]
        if rng.random() < 0.5:
            words[rng.randrange(len(words))] = rng.choice(["*", "#"])
        return ".".join(words)

    matcher = TopicMatcher()
    for i in range(10_000):
        matcher.add_binding(Binding("t", f"q{i}", routing_key=pattern()))
    keys = [".".join(rng.choice(vocabulary) for _ in range(rng.randint(2, 6))) for _ in range(5000)]
    matched = 0
    start = time.perf_counter()
    for key in keys:
        matched += len(matcher.route(key))
    average = (time.perf_counter() - start) / len(keys)
    print(f"topic route over 10,000 bindings: {average * 1e6:.1f} µs/route, {matched} matches")
    assert average < 1e-3


# -- headers -------------------------------------------------------------------


def headers_with(arguments: dict) -> HeadersMatcher:
    matcher = HeadersMatcher()
    matcher.add_binding(Binding("h", "q", arguments=arguments))
    return matcher


def matches(arguments: dict, headers: dict | None) -> bool:
    return headers_with(arguments).route("", headers) == {("queue", "q")}


def test_headers_all_needs_every_key_with_an_equal_value() -> None:
    pattern = {"x-match": "all", "format": "pdf", "type": "report"}
    assert matches(pattern, {"format": "pdf", "type": "report", "other": 1})
    assert not matches(pattern, {"format": "pdf"})
    assert not matches(pattern, {"format": "pdf", "type": "log"})
    assert not matches(pattern, None)


def test_headers_all_is_the_default() -> None:
    assert not matches({"a": 1, "b": 2}, {"a": 1})
    assert matches({"a": 1, "b": 2}, {"a": 1, "b": 2})


def test_headers_any_needs_one_equal_value() -> None:
    pattern = {"x-match": "any", "format": "pdf", "type": "report"}
    assert matches(pattern, {"type": "report"})
    assert matches(pattern, {"format": "pdf", "type": "log"})
    assert not matches(pattern, {"format": "zip", "other": "pdf"})
    assert not matches(pattern, {})


def test_headers_without_keys_all_matches_everything_any_nothing() -> None:
    assert matches({}, None)
    assert matches({"x-match": "all", "x-ignored": 1}, {"a": 1})
    assert not matches({"x-match": "any"}, {"a": 1})


def test_headers_x_keys_are_ignored_unless_with_x() -> None:
    assert matches({"x-match": "all", "x-tenant": "t1", "a": 1}, {"a": 1})
    assert not matches({"x-match": "any", "x-tenant": "t1"}, {"x-tenant": "t1"})
    assert matches({"x-match": "all-with-x", "x-tenant": "t1", "a": 1}, {"x-tenant": "t1", "a": 1})
    assert not matches({"x-match": "all-with-x", "x-tenant": "t1", "a": 1}, {"a": 1})
    assert matches({"x-match": "any-with-x", "x-tenant": "t1", "a": 1}, {"x-tenant": "t1"})
    assert not matches({"x-match": "any-with-x", "x-tenant": "t1"}, {"x-tenant": "t2"})
    # "x-match" itself is never a key to match, even with x.
    assert matches({"x-match": "all-with-x"}, {})


def test_headers_void_value_only_needs_the_key() -> None:
    assert matches({"a": None}, {"a": "anything"})
    assert matches({"a": None}, {"a": None})
    assert not matches({"a": None}, {"b": 1})
    assert matches({"x-match": "any", "a": None, "b": 2}, {"a": 0})


def test_headers_values_compare_exactly_like_erlang() -> None:
    assert matches({"n": 1}, {"n": 1})
    assert not matches({"n": 1}, {"n": 1.0})
    assert not matches({"n": 1}, {"n": True})
    assert not matches({"n": True}, {"n": 1})
    assert not matches({"n": "1"}, {"n": 1})
    assert matches({"s": "é"}, {"s": "é".encode()})  # both AMQP strings
    assert matches({"d": decimal.Decimal("1.5")}, {"d": decimal.Decimal("1.5")})
    assert not matches({"d": decimal.Decimal("1.5")}, {"d": decimal.Decimal("1.50")})
    assert matches({"t": {"k": [1, "a"]}}, {"t": {"k": [1, b"a"]}})
    assert not matches({"t": {"k": [1, "a"]}}, {"t": {"k": [1.0, "a"]}})


@pytest.mark.parametrize(
    ("x_match", "message"),
    [
        (
            "some",
            'Invalid x-match field value <<"some">>; expected all, any, all-with-x, or any-with-x',
        ),
        (1, "Invalid x-match field type long (value 1); expected longstr"),
    ],
)
def test_headers_binding_with_a_bad_x_match_is_refused(x_match: object, message: str) -> None:
    with pytest.raises(PreconditionFailed) as refused:
        headers_with({"x-match": x_match})
    assert refused.value.message == message


def test_headers_several_bindings_to_one_queue() -> None:
    matcher = HeadersMatcher()
    first = Binding("h", "q", arguments={"a": 1})
    second = Binding("h", "q", arguments={"b": 2})
    matcher.add_binding(first)
    matcher.add_binding(second)
    assert matcher.route("", {"b": 2}) == {("queue", "q")}
    matcher.remove_binding(second)
    assert matcher.route("", {"b": 2}) == set()
    assert matcher.route("", {"a": 1}) == {("queue", "q")}


# -- the exchange graph: declaring and deleting ----------------------------------


@pytest.fixture
def graph() -> ExchangeGraph:
    graph = ExchangeGraph("/")
    for name in ("q1", "q2", "q3"):
        graph.add_queue(name)
    return graph


def test_every_namespace_has_the_predeclared_exchanges(graph: ExchangeGraph) -> None:
    types = {exchange.name: exchange.type for exchange in graph.exchanges()}
    assert types == {
        "": ExchangeType.DIRECT,
        "amq.direct": ExchangeType.DIRECT,
        "amq.fanout": ExchangeType.FANOUT,
        "amq.topic": ExchangeType.TOPIC,
        "amq.headers": ExchangeType.HEADERS,
        "amq.match": ExchangeType.HEADERS,
    }


def test_redeclaring_with_the_same_properties_is_fine(graph: ExchangeGraph) -> None:
    first = graph.declare_exchange("x", "topic", arguments={"alternate-exchange": "ae"})
    again = graph.declare_exchange("x", ExchangeType.TOPIC, arguments={"alternate-exchange": "ae"})
    assert first == again
    # Clients may redeclare, not create, "amq." exchanges.
    graph.declare_exchange("amq.direct", "direct")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"exchange_type": "fanout"},
            "arg 'type' for exchange 'x' in vhost '/': received 'fanout' but current is 'direct'",
        ),
        (
            {"durable": False},
            "arg 'durable' for exchange 'x' in vhost '/': received 'false' but current is 'true'",
        ),
        (
            {"auto_delete": True},
            "arg 'auto_delete' for exchange 'x' in vhost '/': "
            "received 'true' but current is 'false'",
        ),
        (
            {"internal": True},
            "arg 'internal' for exchange 'x' in vhost '/': received 'true' but current is 'false'",
        ),
        (
            {"arguments": {"alternate-exchange": "other"}},
            "arg 'alternate-exchange' for exchange "
            "'x' in vhost '/': received 'other' but current is 'ae'",
        ),
        (
            {"arguments": {}},
            "arg 'alternate-exchange' for exchange 'x' in vhost '/': "
            "received none but current is the value 'ae' of type 'longstr'",
        ),
    ],
)
def test_redeclaring_differently_is_refused(
    graph: ExchangeGraph, change: dict, message: str
) -> None:
    properties = {"exchange_type": "direct", "arguments": {"alternate-exchange": "ae"}}
    graph.declare_exchange("x", **properties)
    with pytest.raises(PreconditionFailed) as refused:
        graph.declare_exchange("x", **(properties | change))
    assert refused.value.message == "inequivalent " + message


def test_arguments_other_than_the_alternate_exchange_are_not_compared(
    graph: ExchangeGraph,
) -> None:
    graph.declare_exchange("x", "direct", arguments={"x-custom": 1})
    assert graph.declare_exchange("x", "direct", arguments={"x-custom": 2}).arguments == {
        "x-custom": 1
    }


def test_declaring_a_new_alternate_exchange_of_the_wrong_type(graph: ExchangeGraph) -> None:
    with pytest.raises(PreconditionFailed, match="invalid type 'long' for arg 'alternate-exch"):
        graph.declare_exchange("x", "direct", arguments={"alternate-exchange": 5})


def test_unknown_exchange_types_are_refused(graph: ExchangeGraph) -> None:
    with pytest.raises(InvalidArgument, match="unknown exchange type 'x-delayed-message'"):
        graph.declare_exchange("x", "x-delayed-message")


def test_clients_cannot_create_amq_exchanges(graph: ExchangeGraph) -> None:
    with pytest.raises(AccessRefused, match=r"exchange name 'amq\.mine' contains reserved prefix"):
        graph.declare_exchange("amq.mine", "direct")
    graph.declare_exchange("amq.mine", "direct", by_client=False)
    assert graph.has_exchange("amq.mine")


def test_clients_cannot_delete_amq_exchanges(graph: ExchangeGraph) -> None:
    with pytest.raises(AccessRefused) as refused:
        graph.delete_exchange("amq.topic")
    assert (
        refused.value.message == "deletion of system exchange 'amq.topic' in vhost '/' not allowed"
    )


@pytest.mark.parametrize(
    "operation",
    [
        lambda g: g.declare_exchange("", "direct"),
        lambda g: g.passive_declare_exchange(""),
        lambda g: g.delete_exchange(""),
        lambda g: g.bind(Binding("", "q1", routing_key="q1")),
        lambda g: g.unbind(Binding("", "q1", routing_key="q1")),
        lambda g: g.bind(Binding("amq.direct", "", "exchange")),
    ],
)
def test_the_default_exchange_cannot_be_touched(graph: ExchangeGraph, operation) -> None:
    with pytest.raises(AccessRefused, match="operation not permitted on the default exchange"):
        operation(graph)


def test_passive_declare_of_a_missing_exchange(graph: ExchangeGraph) -> None:
    with pytest.raises(NotFound, match="no exchange 'nope' in vhost '/'"):
        graph.passive_declare_exchange("nope")


def test_delete_if_unused_refuses_an_exchange_that_is_a_source(graph: ExchangeGraph) -> None:
    graph.declare_exchange("x", "fanout")
    graph.declare_exchange("y", "fanout")
    graph.bind(Binding("x", "q1"))
    graph.bind(Binding("y", "x", "exchange"))
    with pytest.raises(PreconditionFailed, match="exchange 'x' in vhost '/' in use"):
        graph.delete_exchange("x", if_unused=True)
    graph.unbind(Binding("x", "q1"))
    graph.delete_exchange("x", if_unused=True)  # being a destination does not count
    assert not graph.has_exchange("x")
    assert graph.bindings("y") == []
    graph.delete_exchange("x")  # deleting a missing exchange is fine


# -- bindings --------------------------------------------------------------------


def test_binding_needs_both_ends(graph: ExchangeGraph) -> None:
    with pytest.raises(NotFound, match="no exchange 'nope' in vhost '/'"):
        graph.bind(Binding("nope", "q1"))
    with pytest.raises(NotFound, match="no queue 'nope' in vhost '/'"):
        graph.bind(Binding("amq.direct", "nope"))
    with pytest.raises(NotFound, match="no exchange 'nope' in vhost '/'"):
        graph.bind(Binding("amq.direct", "nope", "exchange"))
    with pytest.raises(NotFound):
        graph.unbind(Binding("amq.direct", "nope"))


def test_binding_twice_is_one_binding(graph: ExchangeGraph) -> None:
    binding = Binding("amq.direct", "q1", routing_key="k", arguments={"a": 1})
    graph.bind(binding)
    graph.bind(Binding("amq.direct", "q1", routing_key="k", arguments={"a": 1}))
    assert graph.bindings("amq.direct") == [binding]
    graph.unbind(binding)
    assert graph.route("amq.direct", "k") == set()
    graph.unbind(binding)  # unbinding a missing binding is fine


def test_an_invalid_headers_binding_leaves_no_trace(graph: ExchangeGraph) -> None:
    with pytest.raises(PreconditionFailed):
        graph.bind(Binding("amq.headers", "q1", arguments={"x-match": "most"}))
    assert graph.bindings("amq.headers") == []


# -- routing ---------------------------------------------------------------------


def test_the_default_exchange_routes_to_the_queue_named_by_the_key(graph: ExchangeGraph) -> None:
    assert graph.route("", "q1") == {"q1"}
    assert graph.route("", "missing") == set()
    assert graph.route("", "q1", cc=["q2", "missing"]) == {"q1", "q2"}


def test_publishing_to_a_missing_or_internal_exchange(graph: ExchangeGraph) -> None:
    with pytest.raises(NotFound, match="no exchange 'nope' in vhost '/'"):
        graph.route("nope", "k")
    graph.declare_exchange("inner", "fanout", internal=True)
    graph.bind(Binding("inner", "q1"))
    with pytest.raises(AccessRefused, match="cannot publish to internal exchange 'inner'"):
        graph.route("inner", "k")
    graph.bind(Binding("amq.fanout", "inner", "exchange"))
    assert graph.route("amq.fanout", "k") == {"q1"}


def test_each_exchange_type_through_the_graph(graph: ExchangeGraph) -> None:
    graph.bind(Binding("amq.direct", "q1", routing_key="k"))
    graph.bind(Binding("amq.fanout", "q2"))
    graph.bind(Binding("amq.topic", "q3", routing_key="*.k"))
    graph.bind(Binding("amq.match", "q1", arguments={"x-match": "any", "h": 1}))
    assert graph.route("amq.direct", "k") == {"q1"}
    assert graph.route("amq.fanout", "whatever") == {"q2"}
    assert graph.route("amq.topic", "a.k") == {"q3"}
    assert graph.route("amq.match", "", {"h": 1}) == {"q1"}
    assert graph.route("amq.match", "", {"h": 2}) == set()


def test_cc_keys_route_like_the_routing_key(graph: ExchangeGraph) -> None:
    graph.bind(Binding("amq.direct", "q1", routing_key="a"))
    graph.bind(Binding("amq.direct", "q2", routing_key="b"))
    assert graph.route("amq.direct", "a", cc=["b", "c"]) == {"q1", "q2"}


def test_exchange_to_exchange_chains_and_cycles(graph: ExchangeGraph) -> None:
    for name in ("x1", "x2", "x3"):
        graph.declare_exchange(name, "topic")
    graph.bind(Binding("x1", "x2", "exchange", routing_key="a.#"))
    graph.bind(Binding("x2", "x3", "exchange", routing_key="#"))
    graph.bind(Binding("x3", "x1", "exchange", routing_key="#"))  # a cycle
    graph.bind(Binding("x1", "x1", "exchange", routing_key="#"))  # a self loop
    graph.bind(Binding("x2", "q1", routing_key="a.*"))
    graph.bind(Binding("x3", "q2", routing_key="#"))
    graph.bind(Binding("x1", "q3", routing_key="b"))
    assert graph.route("x1", "a.b") == {"q1", "q2"}
    assert graph.route("x1", "b") == {"q3"}
    assert graph.route("x2", "b") == {"q2", "q3"}
    assert graph.route("x3", "a.b.c") == {"q2"}


def test_a_queue_reached_twice_gets_the_message_once(graph: ExchangeGraph) -> None:
    graph.declare_exchange("left", "fanout")
    graph.declare_exchange("right", "fanout")
    graph.bind(Binding("amq.fanout", "left", "exchange"))
    graph.bind(Binding("amq.fanout", "right", "exchange"))
    graph.bind(Binding("left", "q1"))
    graph.bind(Binding("right", "q1"))
    assert graph.route("amq.fanout", "") == {"q1"}


def test_alternate_exchange_takes_unroutable_messages(graph: ExchangeGraph) -> None:
    graph.declare_exchange("ae", "fanout")
    graph.declare_exchange("x", "direct", arguments={"alternate-exchange": "ae"})
    graph.bind(Binding("x", "q1", routing_key="known"))
    graph.bind(Binding("ae", "q2"))
    assert graph.route("x", "known") == {"q1"}
    assert graph.route("x", "unknown") == {"q2"}


def test_alternate_exchanges_chain_and_their_cycles_end(graph: ExchangeGraph) -> None:
    graph.declare_exchange("a", "direct", arguments={"alternate-exchange": "b"})
    graph.declare_exchange("b", "direct", arguments={"alternate-exchange": "c"})
    graph.declare_exchange("c", "direct", arguments={"alternate-exchange": "a"})
    assert graph.route("a", "k") == set()
    graph.bind(Binding("c", "q3", routing_key="k"))
    assert graph.route("a", "k") == {"q3"}
    assert graph.route("b", "k") == {"q3"}
    assert graph.route("c", "other") == set()


def test_a_missing_alternate_exchange_is_ignored(graph: ExchangeGraph) -> None:
    graph.declare_exchange("x", "direct", arguments={"alternate-exchange": "not-yet"})
    assert graph.route("x", "k") == set()


def test_alternate_exchange_is_not_used_when_routing_reaches_an_exchange(
    graph: ExchangeGraph,
) -> None:
    """RabbitMQ: the alternate exchange is for an exchange with no destination at
    all; a bound exchange that routes nowhere uses its own alternate, if any."""
    graph.declare_exchange("ae", "fanout")
    graph.bind(Binding("ae", "q1"))
    graph.declare_exchange("x", "fanout", arguments={"alternate-exchange": "ae"})
    graph.declare_exchange("empty", "direct")
    graph.bind(Binding("x", "empty", "exchange"))
    assert graph.route("x", "k") == set()
    graph.delete_exchange("empty")
    assert graph.route("x", "k") == {"q1"}


# -- auto-delete -------------------------------------------------------------------


def test_auto_delete_exchange_goes_with_its_last_binding(graph: ExchangeGraph) -> None:
    graph.declare_exchange("ad", "direct", auto_delete=True)
    graph.bind(Binding("ad", "q1", routing_key="a"))
    graph.bind(Binding("ad", "q2", routing_key="b"))
    graph.unbind(Binding("ad", "q1", routing_key="a"))
    assert graph.has_exchange("ad")
    graph.unbind(Binding("ad", "q2", routing_key="b"))
    assert not graph.has_exchange("ad")


def test_auto_delete_exchange_never_bound_stays(graph: ExchangeGraph) -> None:
    graph.declare_exchange("ad", "direct", auto_delete=True)
    graph.remove_queue("q1")
    assert graph.has_exchange("ad")


def test_removing_a_queue_cascades_through_auto_delete_exchanges(graph: ExchangeGraph) -> None:
    graph.declare_exchange("outer", "fanout", auto_delete=True)
    graph.declare_exchange("inner", "fanout", auto_delete=True)
    graph.declare_exchange("kept", "fanout")
    graph.bind(Binding("outer", "inner", "exchange"))
    graph.bind(Binding("kept", "inner", "exchange"))
    graph.bind(Binding("inner", "q1"))
    graph.remove_queue("q1")
    assert not graph.has_queue("q1")
    assert not graph.has_exchange("inner")
    assert not graph.has_exchange("outer")
    assert graph.has_exchange("kept")
    assert graph.bindings() == []


def test_auto_delete_cycle_is_deleted_with_its_last_outside_binding(
    graph: ExchangeGraph,
) -> None:
    graph.declare_exchange("a", "fanout", auto_delete=True)
    graph.declare_exchange("b", "fanout", auto_delete=True)
    graph.bind(Binding("a", "b", "exchange"))
    graph.bind(Binding("b", "a", "exchange"))
    graph.bind(Binding("a", "q1"))
    graph.delete_exchange("a")
    assert not graph.has_exchange("b")  # its only binding pointed at "a"


# -- persistence ---------------------------------------------------------------------


def test_records_keep_durable_things_and_rebuild_the_graph() -> None:
    graph = ExchangeGraph("vh")
    graph.add_queue("durable-q")
    graph.add_queue("transient-q", durable=False)
    graph.declare_exchange("ae", "fanout")
    graph.declare_exchange(
        "logs", "topic", auto_delete=True, arguments={"alternate-exchange": "ae"}
    )
    graph.declare_exchange("transient", "fanout", durable=False)
    graph.bind(Binding("logs", "durable-q", routing_key="*.error"))
    graph.bind(Binding("logs", "transient-q", routing_key="#"))
    graph.bind(Binding("logs", "transient", "exchange"))
    graph.bind(Binding("amq.topic", "logs", "exchange", routing_key="app.#"))
    graph.bind(Binding("ae", "durable-q"))
    graph.bind(Binding("amq.match", "durable-q", arguments={"x-match": "any", "k": "v"}))

    records = json.loads(json.dumps(graph.to_records()))
    assert [r["name"] for r in records["exchanges"]] == ["ae", "logs"]
    assert len(records["bindings"]) == 4

    restored = ExchangeGraph.from_records(records, namespace="vh", durable_queues=["durable-q"])
    assert restored.namespace == "vh"
    assert restored.get_exchange("logs") == graph.get_exchange("logs")
    assert restored.route("amq.topic", "app.error") == {"durable-q"}
    assert restored.route("logs", "app.info") == {"durable-q"}  # via the alternate exchange
    assert restored.route("amq.match", "", {"k": "v"}) == {"durable-q"}
    assert restored.to_records() == records


def test_restoring_drops_bindings_to_queues_that_did_not_come_back() -> None:
    graph = ExchangeGraph()
    graph.add_queue("gone")
    graph.bind(Binding("amq.direct", "gone", routing_key="k"))
    restored = ExchangeGraph.from_records(graph.to_records())
    assert restored.bindings() == []
