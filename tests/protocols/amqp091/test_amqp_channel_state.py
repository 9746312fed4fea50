"""A channel's delivery tags, publisher confirms, transactions, consumer tags and queue
names driven directly, against simple models of what a client sees: no socket, no event
loop."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mainstem.protocols.amqp091 import methods as m
from mainstem.protocols.amqp091.channel_state import (
    ConsumerTags,
    DeliveryTags,
    PublisherConfirms,
    QueueNames,
    Transaction,
)
from mainstem.protocols.amqp091.errors import AmqpCodecError, ChannelError
from mainstem.protocols.amqp091.events import ContentMessage
from mainstem.protocols.amqp091.methods import ReplyCode

# A step: deliver (kept or no-ack), or settle with a tag (multiple or not); the tag is
# drawn as a number the test maps onto the tags handed out so far.
steps = st.lists(st.one_of(
    st.tuples(st.just("deliver"), st.booleans()),
    st.tuples(st.just("ack"), st.integers(0, 40), st.booleans()),
), max_size=60)


@given(steps)
def test_settling_takes_exactly_the_tags_a_client_means(script: list[tuple]) -> None:
    tags: DeliveryTags[int] = DeliveryTags()
    kept: list[int] = []  # the model: tags awaiting acknowledgement, in order
    handed = 0
    for step in script:
        if step[0] == "deliver":
            tag = tags.deliver(handed + 1 if step[1] else None)
            handed += 1
            assert tag == handed  # every delivery gets the next tag, no-ack ones too
            if step[1]:
                kept.append(tag)
            continue
        _, tag, multiple = step
        method = m.BasicAck(tag, multiple)
        if multiple:
            expected = [k for k in kept if tag == 0 or k <= tag]
        elif tag in kept:
            expected = [tag]
        else:
            with pytest.raises(ChannelError) as refused:
                tags.tags_of(method)
            assert refused.value.code == ReplyCode.PRECONDITION_FAILED
            continue
        assert tags.take(tags.tags_of(method)) == expected  # what was kept: the tags
        kept = [k for k in kept if k not in expected]
        assert len(tags) == len(kept)
    assert tags.take_all() == kept and len(tags) == 0


def test_a_settle_held_by_a_transaction_takes_only_what_is_still_there() -> None:
    tags: DeliveryTags[str] = DeliveryTags()
    for name in "abc":
        tags.deliver(name)
    held = tags.tags_of(m.BasicAck(2, True))  # tx: settled at commit
    assert tags.take(tags.tags_of(m.BasicReject(1, False))) == ["a"]
    assert tags.take(held) == ["b"]
    assert list(tags) == ["c"]


# A read: its publishes, each with its writes (numbers; those in `failed` failed) and
# whether it was refused outright.
reads = st.lists(st.lists(st.tuples(st.lists(st.integers(0, 9), max_size=3), st.booleans()),
                          max_size=6), max_size=6)


@given(reads, st.sets(st.integers(0, 9)))
def test_every_publish_is_answered_once_and_acked_only_when_stored(
        script: list[list[tuple[list[int], bool]]], failed: set[int]) -> None:
    confirms: PublisherConfirms[int] = PublisherConfirms()
    confirms.select(m.ConfirmSelect(), transactional=False)
    outcome: dict[int, str] = {}  # the client's view: seq -> "ack" or "nack"
    expected: dict[int, str] = {}
    seq = 0
    for read in script:
        for writes, refused in read:
            confirms.published(writes, refused)
            seq += 1
            expected[seq] = "nack" if refused or failed.intersection(writes) else "ack"
        assert confirms.unconfirmed == seq - len(outcome)
        confirms.end_read()
        answers, confirmed = confirms.answer_over(lambda write: True, failed.__contains__)
        for answer in answers:  # as a client applies them, acks with multiple=true
            assert isinstance(answer, m.BasicAck | m.BasicNack)
            covered = ([s for s in range(1, answer.delivery_tag + 1) if s not in outcome]
                       if answer.multiple else [answer.delivery_tag])
            assert covered and not set(covered) & set(outcome)  # nothing answered twice
            kind = "ack" if isinstance(answer, m.BasicAck) else "nack"
            outcome.update(dict.fromkeys(covered, kind))
        assert confirmed == sum(1 for _, refused in read) - sum(
            1 for writes, refused in read if refused or failed.intersection(writes))
    assert outcome == expected and confirms.unconfirmed == 0


def test_confirm_mode_and_tx_mode_exclude_each_other() -> None:
    confirms: PublisherConfirms[int] = PublisherConfirms()
    assert confirms.select(m.ConfirmSelect(nowait=True), transactional=False) is None
    with pytest.raises(ChannelError, match="from confirm to tx"):
        Transaction().select(m.TxSelect(), confirming=True)
    with pytest.raises(ChannelError, match="from tx to confirm"):
        PublisherConfirms().select(m.ConfirmSelect(), transactional=True)


def test_a_transaction_holds_its_work_until_commit_and_drops_it_on_rollback() -> None:
    tx = Transaction()
    with pytest.raises(ChannelError, match="not transactional"):
        tx.commit(m.TxCommit())
    assert tx.select(m.TxSelect(), confirming=False) == m.TxSelectOk()
    publish = ContentMessage(1, m.BasicPublish(0, "", "q"), b"\x00\x00", b"body")
    assert tx.hold_publish(publish) and tx.hold_settle(m.BasicAck(1, False), [1])
    assert tx.commit(m.TxCommit()) == ([publish], [(m.BasicAck(1, False), [1])])
    assert tx.commit(m.TxCommit()) == ([], [])  # a commit starts the next transaction
    assert tx.hold_publish(publish)
    assert tx.rollback(m.TxRollback()) == m.TxRollbackOk()
    assert tx.commit(m.TxCommit()) == ([], [])


def test_outside_a_transaction_nothing_is_held() -> None:
    tx = Transaction()
    publish = ContentMessage(1, m.BasicPublish(0, "", "q"), b"\x00\x00", b"body")
    assert not tx.hold_publish(publish) and not tx.hold_settle(m.BasicAck(1, False), [1])
    assert (tx.publishes, tx.settles) == ([], [])


# Reads of one publish each, by the write it waits for; then the order the writes finish.
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(st.just(n), st.permutations(range(n)))))
def test_reads_are_answered_in_their_order_whatever_order_their_writes_end(
        script: tuple[int, list[int]]) -> None:
    reads, finishing = script
    confirms: PublisherConfirms[int] = PublisherConfirms()
    confirms.select(m.ConfirmSelect(), transactional=False)
    for write in range(reads):
        confirms.published([write], refused=False)
        assert confirms.end_read() == {write}
    assert confirms.end_read() is None  # a read that published nothing waits for nothing
    over: set[int] = set()
    acked = 0
    for write in finishing:
        over.add(write)
        answers, confirmed = confirms.answer_over(over.__contains__, lambda write: False)
        # Answered: every read up to the first whose write is not over, none beyond.
        answered = next((n for n in range(reads) if n not in over), reads)
        assert confirmed == answered - acked
        assert answers == [m.BasicAck(seq, True) for seq in range(acked + 1, answered + 1)]
        acked = answered
        assert confirms.waiting == (acked < reads)
    assert confirms.unconfirmed == 0


def test_consumer_tags_are_unique_on_a_channel_and_made_when_left_empty() -> None:
    tags: ConsumerTags[str] = ConsumerTags()
    made = {tags.tag_for(m.BasicConsume(queue="q", consumer_tag="")) for _ in range(50)}
    assert len(made) == 50 and all(tag.startswith("amq.ctag-") for tag in made)
    tag = tags.tag_for(m.BasicConsume(queue="q", consumer_tag="mine"))
    tags.add(tag, "consumer")
    with pytest.raises(AmqpCodecError) as reused:
        tags.tag_for(m.BasicConsume(queue="q", consumer_tag="mine"))
    assert reused.value.reply_code == ReplyCode.NOT_ALLOWED
    assert (len(tags), list(tags)) == (1, ["consumer"])
    assert tags.remove("mine") == "consumer" and tags.remove("mine") is None
    assert tags.tag_for(m.BasicConsume(queue="q", consumer_tag="mine")) == "mine"  # free again


def test_cancel_notices_wait_for_the_channels_own_queue_delete() -> None:
    tags: ConsumerTags[str] = ConsumerTags()
    assert tags.notices("a") == ["a"]
    tags.hold_notices()
    assert tags.notices("b") == [] and tags.notices("c") == []
    assert tags.release_notices() == ["b", "c"]
    assert tags.notices("d") == ["d"] and tags.release_notices() == []


def test_an_empty_queue_name_is_the_last_declared_one() -> None:
    names = QueueNames()
    with pytest.raises(ChannelError) as unknown:
        names.resolve("", m.QueueBind(queue="", exchange="x"))
    assert unknown.value.code == ReplyCode.NOT_FOUND
    names.declared("q1")
    assert names.resolve("", m.QueueBind(queue="", exchange="x")) == "q1"
    assert names.resolve("q2", m.QueueBind(queue="q2", exchange="x")) == "q2"


def test_declared_queue_names_are_made_or_checked() -> None:
    names = QueueNames()
    made = names.to_declare("", m.QueueDeclare())
    assert made.startswith("amq.gen-") and len(made) == len("amq.gen-") + 22
    assert names.to_declare("orders", m.QueueDeclare()) == "orders"
    with pytest.raises(ChannelError) as reserved:
        names.to_declare("amq.mine", m.QueueDeclare())
    assert reserved.value.code == ReplyCode.ACCESS_REFUSED
    with pytest.raises(AmqpCodecError) as not_text:
        names.to_declare("bad\udc80", m.QueueDeclare())
    assert not_text.value.reply_code == ReplyCode.SYNTAX_ERROR
