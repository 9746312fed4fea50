"""The stream service on real files: the Appender's batching, chunk cuts, writer
sequences, durability and alarm hold; a Subscription's credit, waiting, filtering and
sending a chunk after a protocol's frame header."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import struct
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mainstem.broker.alarms import ResourceAlarms
from mainstem.broker.stream_service import (
    ChunkLimits,
    PartitionClosed,
    PartitionService,
    WriteGate,
    WritesHeld,
)
from mainstem.broker.stream_service.forwarding import ForwardedAppend
from mainstem.formats.chunk import Chunk, encode_simple_entries
from mainstem.formats.osiris import HEADER_SIZE, MAX_CHUNK_ENTRIES
from mainstem.log.commit import FsyncTimings
from mainstem.log.partition import Partition
from mainstem.log.policy import DurabilityPolicy, FsyncMode
from mainstem.log.reader import PartitionReader
from mainstem.log.transfer import READ_WHOLE_UP_TO

NEVER = DurabilityPolicy(FsyncMode.NEVER)


def entry(body: bytes) -> bytes:
    return encode_simple_entries([body])


def chunks_of(partition: Partition) -> Iterator[Chunk]:
    reader = PartitionReader(partition, 0)
    while (chunk := reader.next_chunk_nowait()) is not None:
        yield chunk


def bodies(partition: Partition) -> list[bytes]:
    return [bytes(body) for chunk in chunks_of(partition) for _, body in chunk.records()]


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[PartitionService]:
    opened = PartitionService(Partition.open(tmp_path / "p"))
    yield opened
    await opened.close()


# -- the Appender --------------------------------------------------------------------


async def test_appends_of_one_turn_share_a_chunk_and_one_durability_wait(
        service: PartitionService) -> None:
    receipts = [service.appender.append_records([b"a%d" % i, b"b%d" % i]) for i in range(5)]
    assert len({id(receipt.durable) for receipt in receipts}) == 1
    assert service.partition.next_offset == 0  # staged until the turn ends
    await receipts[-1].durable
    assert [chunk.header.num_records for chunk in chunks_of(service.partition)] == [10]
    assert [receipt.first_offset for receipt in receipts] == [0, 2, 4, 6, 8]


async def test_appends_of_later_turns_go_in_later_chunks(service: PartitionService) -> None:
    await service.appender.append_records([b"x"]).durable
    second = service.appender.append_records([b"y", b"z"])
    await second.durable
    assert second.first_offset == 1
    assert [c.header.num_records for c in chunks_of(service.partition)] == [1, 2]


async def test_a_chunk_is_cut_at_the_entry_and_byte_bounds(service: PartitionService) -> None:
    appender = service.appender
    await appender.append_entries([entry(b"e%d" % i) for i in range(7)], all_simple=True,
                                  limits=ChunkLimits(entries=3)).durable
    big = ChunkLimits(entries=100, bytes=3 * 104)  # three entries of 100 bytes
    await appender.append_entries([entry(b"x" * 100) for _ in range(5)], all_simple=True,
                                  limits=big).durable
    assert [c.header.num_entries for c in chunks_of(service.partition)] == [3, 3, 1, 3, 2]


async def test_records_past_the_chunk_limit_spill_into_a_next_chunk(
        service: PartitionService) -> None:
    records = [b"%d" % i for i in range(MAX_CHUNK_ENTRIES + 2)]
    receipt = service.appender.append_records(records)
    await receipt.durable
    assert [c.header.num_records for c in chunks_of(service.partition)] == [
        MAX_CHUNK_ENTRIES, 2]
    assert bodies(service.partition) == records


async def test_records_appended_together_never_straddle_chunks(
        service: PartitionService) -> None:
    appender = service.appender
    appender.append_records([b"x"] * (MAX_CHUNK_ENTRIES - 1))
    together = appender.append_records([b"t1", b"t2"], together=True)
    await together.durable
    assert [c.header.num_records for c in chunks_of(service.partition)] == [
        MAX_CHUNK_ENTRIES - 1, 2]
    assert together.first_offset == MAX_CHUNK_ENTRIES - 1


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.lists(st.tuples(st.integers(1, 12), st.integers(0, 40)),
                               min_size=1, max_size=5), min_size=1, max_size=4),
       max_entries=st.integers(1, 8), max_bytes=st.integers(1, 200))
def test_chunks_respect_the_bounds_and_keep_every_record_in_order(
        tmp_path_factory: pytest.TempPathFactory, turns: list[list[tuple[int, int]]],
        max_entries: int, max_bytes: int) -> None:
    """Any appends, in any turns: every record stored once, in order, and no chunk over
    the bounds unless a single entry is bigger than the byte bound."""
    limits = ChunkLimits(entries=max_entries, bytes=max_bytes)

    async def run() -> None:
        service = PartitionService(Partition.open(tmp_path_factory.mktemp("p"),
                                                  durability=NEVER))
        sent: list[bytes] = []
        for turn in turns:
            receipts = []
            for count, size in turn:
                batch = [b"%d-" % len(sent) + b"x" * size for _ in range(count)]
                batch = [b"%d:" % (len(sent) + i) + body for i, body in enumerate(batch)]
                sent += batch
                receipts.append(service.appender.append_entries(
                    [entry(body) for body in batch], all_simple=True, limits=limits))
            await asyncio.gather(*(receipt.durable for receipt in receipts))
        for chunk in chunks_of(service.partition):
            assert chunk.header.num_entries <= max_entries
            assert chunk.header.num_entries == 1 or chunk.header.data_length <= max_bytes
        assert bodies(service.partition) == sent
        await service.close()

    asyncio.run(run())


async def test_writer_sequences_drop_repeats_within_and_across_batches(
        service: PartitionService) -> None:
    appender = service.appender

    def publish(ids: list[int]) -> asyncio.Future[None]:
        return appender.append_entries([entry(b"m%d" % i) for i in ids], all_simple=True,
                                       writer="w", sequences=ids).durable

    publish([1, 2, 3])
    publish([2, 3, 4, 4, 5])  # same batch: the staged sequence counts
    assert appender.sequence("w") == 5
    await publish([1])  # nothing new: done once what came before is durable
    await publish([5, 6, 3, 7])  # a later batch: the stored sequence counts
    assert bodies(service.partition) == [b"m%d" % i for i in range(1, 8)]
    assert service.partition.sequences == {"w": 7}


async def test_a_block_is_staged_whole_beside_entries_and_refused_when_it_cannot_be(
        service: PartitionService) -> None:
    appender = service.appender

    def block(ids: range) -> bytes:
        return b"".join(entry(b"b%d" % i) for i in ids)

    limits = ChunkLimits(entries=8)
    appender.append_entries([entry(b"m0")], all_simple=True, writer="w", sequences=[0])
    first = appender.append_block(block(range(1, 4)), 3, 3, writer="w", first=1, last=3,
                                  limits=limits)
    # A block does not straddle chunks: this one opens the next.
    second = appender.append_block(block(range(4, 10)), 6, 6, writer="w", first=4, last=9,
                                   limits=limits)
    assert first is not None and second is not None
    # The writer stored 9 already; the block alone exceeds the chunk: the caller must
    # append entry by entry (nothing was staged).
    assert appender.append_block(block(range(9, 11)), 2, 2, writer="w", first=9, last=10,
                                 limits=limits) is None
    assert appender.append_block(block(range(10, 19)), 9, 9, writer="w", first=10, last=18,
                                 limits=limits) is None
    await second.durable
    assert (first.first_offset, second.first_offset) == (1, 4)
    assert [c.header.num_entries for c in chunks_of(service.partition)] == [4, 6]
    assert bodies(service.partition) == [b"m0"] + [b"b%d" % i for i in range(1, 10)]
    assert service.partition.sequences == {"w": 9}


@settings(max_examples=40, deadline=None)
@given(turns=st.lists(st.lists(st.lists(st.integers(0, 30), max_size=8), min_size=1,
                               max_size=4), min_size=1, max_size=4))
def test_a_writer_stores_each_sequence_once_and_in_rising_order(
        turns: list[list[list[int]]]) -> None:
    """Whatever a publisher resends, in whichever turns: stored are exactly the entries
    whose sequence is above every one accepted before them, as Osiris keeps them."""
    expected: list[int] = []
    last = -1
    for publishes in turns:
        for ids in publishes:
            for pid in ids:
                if pid > last:
                    expected.append(pid)
                    last = pid

    async def run(directory: Path) -> None:
        service = PartitionService(Partition.open(directory, durability=NEVER))
        for publishes in turns:
            receipts = [service.appender.append_entries(
                [entry(b"%d" % pid) for pid in ids], all_simple=True, writer="w",
                sequences=ids) for ids in publishes]
            await asyncio.gather(*(receipt.durable for receipt in receipts))
        assert bodies(service.partition) == [b"%d" % pid for pid in expected]
        assert service.appender.sequence("w") == (expected[-1] if expected else None)
        await service.close()

    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(run(Path(directory)))


async def test_a_record_writer_repeating_its_sequence_stores_nothing(
        service: PartitionService) -> None:
    appender = service.appender
    await appender.append_records([b"a", b"b"], writer="seg", sequence=10).durable
    repeat = appender.append_records([b"b"], writer="seg", sequence=10)
    await repeat.durable
    await appender.append_records([b"c"], writer="seg", sequence=11).durable
    assert bodies(service.partition) == [b"a", b"b", b"c"]
    assert appender.sequence("seg") == 11


async def test_records_framed_by_the_protocol_are_stored_as_records_are(
        service: PartitionService) -> None:
    appender = service.appender
    receipt = appender.append_simple_entries([entry(b"a"), memoryview(entry(b"bc"))],
                                             writer="seg", sequence=3)
    await receipt.durable
    assert receipt.first_offset == 0
    assert (await appender.append_simple_entries([entry(b"bc")], writer="seg",
                                                 sequence=3).durable) is None  # a repeat
    await appender.append_records([b"d"], writer="seg", sequence=4).durable
    assert bodies(service.partition) == [b"a", b"bc", b"d"]
    assert appender.sequence("seg") == 4


async def test_a_replica_forwards_framed_records_as_bodies(service: PartitionService) -> None:
    forwarded: list[ForwardedAppend] = []

    class Leader:
        def forward(self, append: ForwardedAppend) -> asyncio.Future[int]:
            forwarded.append(append)
            answer = asyncio.get_running_loop().create_future()
            answer.set_result(7)
            return answer

        def sequence(self, writer: str) -> asyncio.Future[int | None]:
            raise AssertionError("not asked")

    service.stand_by(Leader())
    receipt = service.appender.append_simple_entries([entry(b"a"), entry(b"bc")],
                                                     writer="seg", sequence=5)
    await receipt.durable
    assert receipt.first_offset == 7
    (append,) = forwarded
    assert ([bytes(b) for b in append.entries], append.encoded, append.writer,
            append.sequence) == ([b"a", b"bc"], False, "seg", 5)


async def test_an_append_is_reported_only_once_its_chunk_is_durable(tmp_path: Path) -> None:
    fsyncs: list[float] = []
    timings = FsyncTimings()
    timings.observe(fsyncs.append)  # called once each fsync round has returned
    service = PartitionService(Partition.open(tmp_path / "p", fsync_timings=timings))
    receipt = service.appender.append_records([b"durable"])
    seen: list[tuple[int, int]] = []
    receipt.durable.add_done_callback(
        lambda _: seen.append((len(fsyncs), service.committed_offset)))
    await asyncio.sleep(0)
    assert not receipt.durable.done()
    await receipt.durable
    await service.close()
    assert seen[0][0] >= 1  # an fsync had finished
    assert seen[0][1] == 1  # and the record was committed


async def test_an_append_that_does_not_ask_for_durability_is_settled_unfsynced(
        tmp_path: Path) -> None:
    # A queue's journal: fsynced on demand, only for publishes that wait for a confirm.
    fsyncs: list[float] = []
    timings = FsyncTimings()
    timings.observe(fsyncs.append)
    service = PartitionService(Partition.open(tmp_path / "p", fsync_on_demand=True,
                                              fsync_timings=timings))
    unconfirmed = service.appender.write_records([b"a", b"b"], durable=False)
    assert unconfirmed.first_offset == 0  # written: the writer knows its offsets
    assert unconfirmed.durable.done()
    assert fsyncs == [] and service.committed_offset == 0
    confirmed = service.appender.append_records([b"c"])
    await confirmed.durable
    assert len(fsyncs) == 1 and service.committed_offset == 3
    assert [bytes(r) for _, r in service.read_written(0).records()] == [b"a", b"b"]
    await service.close()


async def test_writers_are_held_while_an_alarm_is_set(tmp_path: Path) -> None:
    alarms = ResourceAlarms()
    gate = WriteGate(alarms)
    service = PartitionService(Partition.open(tmp_path / "p"), gate)
    alarms.set("disk", True)
    assert gate.held
    with pytest.raises(WritesHeld):
        gate.check()
    receipt = service.appender.append_records([b"held"])
    await asyncio.sleep(0.05)
    assert not receipt.durable.done()
    assert service.partition.next_offset == 0  # nothing reached the log
    alarms.set("disk", False)
    await asyncio.wait_for(receipt.durable, 5)
    assert bodies(service.partition) == [b"held"]
    await service.close()


async def test_a_write_to_a_closed_partition_fails_its_receipt(
        service: PartitionService) -> None:
    service.partition.close()
    with pytest.raises(PartitionClosed):
        await service.appender.append_records([b"late"]).durable


@contextlib.contextmanager
def file_size_limit(size: int) -> Iterator[None]:
    """Files of this process cannot grow past `size` (writes get EFBIG, as on a full
    disk; Python ignores SIGXFSZ)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


async def test_a_refused_write_fails_its_writer_until_it_resumes_and_settles(
        service: PartitionService) -> None:
    """The log refuses a chunk (the file cannot grow): its receipt fails, and so do the
    chunks staged after it in the same turn and the writer's later appends, even those
    that would fit: stored, their sequence would cover records that never were.
    `settled` returns (it does not wait forever nor say durable); other writers go on;
    `committed_sequence` gives the stored sequence and lets the writer resume."""
    appender = service.appender
    await appender.append_records([b"a" * 100], writer="w", sequence=1).durable
    size = service.partition.size_bytes
    with file_size_limit(size + 2000):
        big = appender.append_records([b"b" * 3000], writer="w", sequence=2)
        after = appender.append_records([b"c"] * MAX_CHUNK_ENTRIES, writer="v", sequence=1)
        with pytest.raises(OSError):
            await big.durable
        with pytest.raises(OSError):
            await after.durable
        await asyncio.wait_for(appender.settled(), 5)
        small = appender.append_records([b"d"], writer="w", sequence=3)
        other = appender.append_records([b"e"], writer="x", sequence=1)
        with pytest.raises(OSError):
            await small.durable
        await other.durable
        assert await appender.committed_sequence("w") == 1
        await appender.append_records([b"f"], writer="w", sequence=2).durable
    assert bodies(service.partition) == [b"a" * 100, b"e", b"f"]
    assert service.partition.sequences == {"w": 2, "x": 1}


async def test_close_writes_what_was_staged(tmp_path: Path) -> None:
    service = PartitionService(Partition.open(tmp_path / "p"))
    receipt = service.appender.append_records([b"staged"])
    await service.close()
    await receipt.durable
    reopened = Partition.open(tmp_path / "p")
    assert bodies(reopened) == [b"staged"]
    reopened.close()


# -- Subscriptions -------------------------------------------------------------------


async def test_a_subscription_waits_for_credit_and_for_new_data(
        service: PartitionService) -> None:
    subscription = service.subscribe(0, credit=0)
    waiting = asyncio.ensure_future(subscription.next_view())
    await asyncio.sleep(0.02)
    assert not waiting.done()  # no data
    await service.appender.append_records([b"one"]).durable
    await asyncio.sleep(0.02)
    assert not waiting.done()  # data, but no credit
    subscription.grant(1)
    view = await asyncio.wait_for(waiting, 5)
    assert view.num_records == 1
    assert subscription.position == 1


async def test_a_filtered_subscription_skips_chunks_without_spending_credit(
        service: PartitionService) -> None:
    for region in ("us", "eu", "us"):
        await service.appender.append_entries([entry(region.encode())], all_simple=True,
                                              filter_values=[region]).durable
    subscription = service.subscribe(0, credit=5, filter_values=["eu"])
    view = await subscription.next_view()
    assert view.location.chunk_id == 1
    assert len(view.bloom) > 0


@pytest.mark.parametrize("filtered", [False, True])
@pytest.mark.parametrize("bodies", [[b"hello", b"world"], [b"h" * 40_000, b"w" * 40_000]],
                         ids=["read whole", "sendfile"])
async def test_a_transfer_puts_the_frame_header_before_the_chunk_and_leaves_the_filter_out(
        service: PartitionService, filtered: bool, bodies: list[bytes]) -> None:
    await service.appender.append_entries(
        [entry(body) for body in bodies], all_simple=True,
        filter_values=["f", None] if filtered else None).durable
    subscription = service.subscribe(0, credit=2)
    view = await subscription.next_view()
    assert bool(view.bloom) is filtered
    assert (view.whole is not None) is (view.location.send_size <= READ_WHOLE_UP_TO)
    frame_header = struct.pack(">I", view.wire_size) + b"HDR"
    expected = frame_header + view.header + encode_simple_entries(bodies)

    taken = subscription.transfer(view, frame_header)  # through a writer, piece by piece
    pieces = []
    while taken.remaining:
        pieces.append(taken.take(7_000))
    taken.release()
    assert b"".join(pieces) == expected
    assert max(len(piece) for piece in pieces) <= 7_000
    assert view.wire_size == HEADER_SIZE + len(encode_simple_entries(bodies))

    received: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.set_result(await reader.readexactly(len(expected)))
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = subscription.transfer(view, frame_header)
    assert sent.send_now(writer.get_extra_info("socket").fileno())  # by sendfile, on TCP
    sent.release()
    assert await asyncio.wait_for(received, 5) == expected
    assert subscription.credit == 0
    writer.close()
    server.close()
    await server.wait_closed()


async def test_a_transfer_reads_its_chunk_after_retention_deleted_the_segment(
        service: PartitionService) -> None:
    await service.appender.append_entries([entry(b"x" * 100_000)], all_simple=True).durable
    subscription = service.subscribe(0)
    view = await subscription.next_view()
    sending = subscription.transfer(view, b"")
    first = sending.take(10)
    view.location.segment.delete()  # as retention does, while the socket waits
    rest = sending.take(sending.remaining)
    sending.release()
    assert len(first + rest) == view.wire_size
    assert (first + rest)[HEADER_SIZE:] == entry(b"x" * 100_000)
