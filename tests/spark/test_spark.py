"""The mainstem PySpark data source against a real broker, with one real local SparkSession
for the module: batch reads with every offset option, streaming with checkpoints, writes
that survive task retries without duplicates."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Iterator

import bson
import mmh3
import pyarrow as pa
import pytest
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.streaming.datasource import ReadAllAvailable
from rstream import (
    AMQPMessage,
    Producer,
    RouteType,
    SuperStreamCreationOption,
    SuperStreamProducer,
)
from rstream._pyamqp.message import Properties

from mainstem.admin.ctl import Client
from mainstem.broker.events.projections import Projection
from mainstem.cli import main as cli_main
from mainstem.client.events import EventsClient
from mainstem.client.iggy import IggyClient
from mainstem.client.iggy import Message as IggyMessage
from mainstem.client.stream import StreamClient
from mainstem.spark.options import SourceOptions
from mainstem.spark.projection import fold_documents
from mainstem.spark.records import record_batches
from mainstem.spark.source import StreamReader, StreamWriter, publish_rows
from mainstem.testing import ThreadedBroker
from tests.support.readme import README, readme_python_blocks

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[ThreadedBroker]:
    with ThreadedBroker(tmp_path_factory.mktemp("broker")) as running:
        yield running


def publish(broker: ThreadedBroker, stream: str, bodies: list[bytes], **arguments) -> None:
    async def run() -> None:
        async with Producer("127.0.0.1", port=broker.ports["stream"], username="guest",
                            password="guest") as producer:
            await producer.create_stream(stream, exists_ok=True, arguments=arguments or None)
            for start in range(0, len(bodies), 20):  # a chunk per 20: segments can roll
                await producer.send_batch(stream, [AMQPMessage(
                    body=body, application_properties={"n": body.decode("latin-1")},
                    properties=Properties(message_id=body.decode("latin-1"),
                                          content_type="text/plain"))
                    for body in bodies[start:start + 20]])
            await producer.send_wait(stream, AMQPMessage(body=b"last"))
    asyncio.run(run())


def read(spark: SparkSession, broker: ThreadedBroker, **options: str):
    return (spark.read.format("mainstem").option("url", broker.urls["stream"])
            .options(**options).load())


def test_batch_read_every_offset_option(spark, broker) -> None:
    bodies = [f"m{i}".encode() for i in range(20)]
    before = int(time.time() * 1000)
    publish(broker, "batch", bodies)
    df = read(spark, broker, stream="batch")
    rows = df.orderBy("offset").collect()
    assert [r.value for r in rows] == [*bodies, b"last"]
    assert {(r.stream, r.partition) for r in rows} == {("batch", 0)}
    assert [r.offset for r in rows] == list(range(21))
    assert rows[0].headers == [{"key": "n", "value": b"m0"}] or \
        [h.asDict() for h in rows[0].headers] == [{"key": "n", "value": b"m0"}]
    assert rows[0].properties["message_id"] == "m0"
    assert rows[0].properties["content_type"] == "text/plain"
    assert rows[0].timestamp.timestamp() * 1000 >= before - 1000
    ranged = read(spark, broker, stream="batch", startingOffsets=json.dumps({"batch": {"0": 5}}),
                  endingOffsets=json.dumps({"batch": {"0": 8}}))
    assert sorted(r.offset for r in ranged.collect()) == [5, 6, 7]
    with pytest.raises(Exception, match="cannot start at latest"):  # as Kafka
        read(spark, broker, stream="batch", startingOffsets="latest").collect()
    split = read(spark, broker, stream="batch", maxRecordsPerPartition="4")
    assert split.rdd.getNumPartitions() == 6 and split.count() == 21
    future = str(int(time.time() * 1e3) + 60_000)
    with pytest.raises(Exception, match=r"option 'startingTimestamp': no record of stream "
                                        r"'batch' partition 0 is at or after \d+ ms; set option "
                                        "startingOffsetsByTimestampStrategy=latest"):
        read(spark, broker, stream="batch", startingTimestamp=future).collect()
    assert read(spark, broker, stream="batch", startingTimestamp=future,
                startingOffsetsByTimestampStrategy="latest").count() == 0
    past = read(spark, broker, stream="batch", startingTimestamp=str(before - 60_000))
    assert past.count() == 21
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,stream:string,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>,"
        "properties:map<string,string>>")


def test_kafka_options_mean_what_they_mean_for_kafka(spark, broker) -> None:
    publish(broker, "kafkaish", [f"k{i}".encode() for i in range(199)])  # 200 with "last"
    wide = read(spark, broker, subscribe="kafkaish", minPartitions="8")
    assert wide.rdd.getNumPartitions() == 8 and wide.count() == 200
    rows = wide.collect()
    assert {(r.topic, r.stream) for r in rows} == {("kafkaish", "kafkaish")}
    bare = read(spark, broker, stream="kafkaish", includeHeaders="false")
    assert "headers" not in bare.columns and bare.count() == 200
    with StreamClient.connect(broker.urls["stream"]) as client:
        middle = client.offset_for_timestamp("kafkaish", 0)
    by_time = read(spark, broker, stream="kafkaish",
                   startingOffsetsByTimestamp=json.dumps({"kafkaish": {"0": 0}}),
                   endingTimestamp=str(int(time.time() * 1000) + 60_000))
    assert by_time.count() == 200 - middle
    with pytest.raises(Exception, match=r"(?i)unknown option 'startingOffsets'.* valid options "
                                        r"are: url, namespace, .*, stream, topic,"):  # a write
        (spark.range(1).selectExpr("CAST(id AS STRING) AS value").write.format("mainstem")
         .option("url", broker.urls["stream"]).option("topic", "kafkaish")
         .option("startingOffsets", "earliest").mode("append").save())
    with pytest.raises(Exception, match="startingOffsets for stream 'kafkaish' partition 0 "
                                        "is 500, past its end 200"):
        read(spark, broker, stream="kafkaish",
             startingOffsets=json.dumps({"kafkaish": {"0": 500}})).collect()


def test_a_stream_pattern_picks_up_new_streams(spark, broker, tmp_path) -> None:
    for name in ("pat-a", "pat-b", "other-pat-c"):
        publish(broker, name, [name.encode()])
    admin = broker.urls["admin"]
    rows = read(spark, broker, subscribePattern="pat-.*", adminUrl=admin).collect()
    assert sorted((r.topic, r.value) for r in rows) == [
        ("pat-a", b"last"), ("pat-a", b"pat-a"), ("pat-b", b"last"), ("pat-b", b"pat-b")]
    by_port = read(spark, broker, subscribePattern="pat-.*", adminPort=str(broker.ports["admin"]))
    assert by_port.count() == 4  # the management API on the stream url's host
    with pytest.raises(Exception, match=r"option 'subscribePattern': cannot list the streams "
                                        r"through the management API at http://127\.0\.0\.1:1: "
                                        r"Connection refused; give its address with option "
                                        r"'adminUrl', or its port .* with 'adminPort'"):
        read(spark, broker, subscribePattern="pat-.*", adminPort="1").collect()

    def run() -> list:
        query = (spark.readStream.format("mainstem").option("url", broker.urls["stream"])
                 .option("streamPattern", "pat-.*").option("adminUrl", admin)
                 .option("startingOffsets", "earliest").load().select("value")
                 .writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        return sorted(r.value for r in spark.read.parquet(str(tmp_path / "out")).collect())

    assert run() == [b"last", b"last", b"pat-a", b"pat-b"]
    publish(broker, "pat-new", [b"pat-new"])  # a new stream joins from its first offset
    assert run() == [b"last", b"last", b"last", b"pat-a", b"pat-b", b"pat-new"]
    with pytest.raises(Exception, match=r"option 'streamPattern' is not a regular expression"):
        read(spark, broker, streamPattern="(", adminUrl=admin).schema  # noqa: B018


@pytest.mark.parametrize(("option", "value", "message"), [
    ("startingOffset", "latest", "unknown option 'startingoffset' \\(did you mean "
                                 "'startingOffsets'\\?\\); valid options are: url, "),
    ("kafka.bootstrap.servers", "h:9092", "unknown option 'kafka.bootstrap.servers'"),
    ("minPartitions", "0", "option 'minPartitions' must be a positive integer, got '0'"),
    ("failOnDataLoss", "yes", "option 'failOnDataLoss' must be true or false"),
    ("maxTriggerDelay", "soon", "option 'maxTriggerDelay' must be a duration"),
    ("startingOffsets", "{oops", "option 'startingOffsets' must be earliest, latest or JSON"),
    ("endingTimestamp", "noon", "option 'endingTimestamp' must be milliseconds"),
    ("startingOffsets", '{"checked": {"zero": 0}}', "partition 'zero' of stream 'checked' is "
                                                    "not a partition number"),
    ("endingOffsets", '{"checked": {"0": -3}}', "-3 for stream 'checked' partition 0 is not a "
                                                "number of -2 or more"),
    ("startingOffsets", "{}", "an object of streams is needed"),
    ("startingOffsetsByTimestampStrategy", "first", "option 'startingOffsetsByTimestampStrategy' "
                                                    "must be error or latest"),
])
def test_a_bad_option_fails_at_planning_naming_it(spark, broker, option, value,
                                                  message) -> None:
    publish(broker, "checked", [b"x"])
    with pytest.raises(Exception, match=message):
        read(spark, broker, stream="checked", **{option: value}).schema  # noqa: B018


def test_offsets_per_partition_name_exactly_the_partitions_read(spark, broker) -> None:
    """As Kafka's source: a stream not read, a partition that does not exist or one left
    out fail when the query is planned (they used to be ignored: the whole stream read)."""
    publish(broker, "exact", [b"e"])
    Client(broker.urls["admin"], "guest", "guest").call("PUT", "/api/streams/%2F/trio",
                                                        {"partitions": 3})
    cases = [
        ("exact", "startingOffsets", {"exactz": {"0": 1}},
         "option 'startingOffsets' names stream 'exactz', which the query does not read "
         "\\(it reads 'exact'\\)"),
        ("exact", "endingOffsets", {"exact": {"7": 0}},
         "option 'endingOffsets' names partition 7 of stream 'exact', which has partitions 0 "
         "to 0"),
        ("trio", "startingOffsets", {"trio": {"0": 0}},
         "option 'startingOffsets' must name every partition the query reads, as Kafka's "
         "source requires .*; missing: 'trio' partition 1, 'trio' partition 2"),
        ("exact,trio", "startingOffsetsByTimestamp", {"exact": {"0": 0}},
         "option 'startingOffsetsByTimestamp' must name every partition .* missing: 'trio' "
         "partition 0"),
    ]
    for stream, option, offsets, message in cases:
        with pytest.raises(Exception, match=message):
            read(spark, broker, stream=stream, **{option: json.dumps(offsets)}).collect()
    whole = {"exact": {"0": 1}, "trio": {"0": -2, "1": -2, "2": -2}}
    rows = read(spark, broker, stream="exact,trio", startingOffsets=json.dumps(whole)).collect()
    assert [r.value for r in rows] == [b"last"]


def test_a_stream_refuses_ending_offsets(spark, broker, tmp_path) -> None:
    """With Kafka's words, not PySpark's UnboundLocalError."""
    publish(broker, "endless", [b"e"])
    with pytest.raises(Exception) as caught:
        query = (spark.readStream.format("mainstem").option("url", broker.urls["stream"])
                 .option("stream", "endless").option("endingOffsets", "latest").load()
                 .writeStream.format("memory").queryName("endless")
                 .option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
    message = str(caught.value)
    assert "option 'endingOffsets': ending offset not valid in streaming queries" in message
    assert "UnboundLocalError" not in message


def test_a_streaming_start_past_the_end_is_data_loss(spark, broker, tmp_path) -> None:
    publish(broker, "ahead", [b"a"])
    start = json.dumps({"ahead": {"0": 50}})

    def run(*options: tuple[str, str]):
        reader = (spark.readStream.format("mainstem").option("url", broker.urls["stream"])
                  .option("stream", "ahead").option("startingOffsets", start))
        for name, value in options:
            reader = reader.option(name, value)
        query = (reader.load().writeStream.format("memory").queryName(f"ahead{len(options)}")
                 .option("checkpointLocation", str(tmp_path / str(len(options))))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)

    with pytest.raises(Exception, match="past its end 2; set failOnDataLoss=false"):
        run()
    run(("failOnDataLoss", "false"))
    assert spark.table("ahead1").count() == 0


def test_min_offsets_per_trigger_waits_for_records_or_the_delay(broker) -> None:
    publish(broker, "trickle", [b"t"] * 9)  # 10 records
    base = {"url": broker.urls["stream"], "stream": "trickle", "startingOffsets": "earliest",
            "minOffsetsPerTrigger": "11"}
    waiting = StreamReader(SourceOptions.parse({**base, "maxTriggerDelay": "1h"}))
    start = waiting.initialOffset()
    assert waiting.latestOffset(start, ReadAllAvailable()) == start  # 10 < 11: no batch
    publish(broker, "trickle", [])  # one more: 11
    assert waiting.latestOffset(start, ReadAllAvailable()) == {"trickle": {"0": 11}}
    hurried = StreamReader(SourceOptions.parse({**base, "maxTriggerDelay": "0ms"}))
    assert hurried.latestOffset(start, ReadAllAvailable()) == {"trickle": {"0": 11}}
    waiting.stop()
    hurried.stop()


def test_fetched_chunks_decode_as_record_by_record(broker) -> None:
    """Chunks fetched from the broker (vbin8 and vbin32 bodies, a batch of one size, an odd
    one out): every cut, a range starting or ending inside a chunk, gives the same columns
    from the vectorised decoder as from the record-by-record one."""
    async def run() -> None:
        async with Producer("127.0.0.1", port=broker.ports["stream"], username="guest",
                            password="guest") as producer:
            await producer.create_stream("alike")
            for size in (100, 300, 100):  # vbin8 bodies, then vbin32 ones
                await producer.send_batch("alike", [AMQPMessage(body=bytes([65 + i % 26])
                                                                * size) for i in range(50)])
            await producer.send_wait("alike", AMQPMessage(body=b"odd one"))
    asyncio.run(run())
    with StreamClient.connect(broker.urls["stream"]) as client:
        chunks = list(client.chunks("alike", 0, 151))

    def decoded(start: int, end: int, per_record: bool = False) -> pa.Table:
        return pa.Table.from_batches(list(record_batches(
            chunks, "alike", 0, start, end, per_record=per_record)))

    cuts = [(0, 151), (7, 151), (0, 120), (60, 61)]
    fast = [decoded(*cut) for cut in cuts]
    assert fast == [decoded(*cut, per_record=True) for cut in cuts]
    assert fast[0].column("value")[149].as_py() == b"X" * 100 and fast[0].num_rows == 151


def test_super_stream_and_comma_list(spark, broker) -> None:
    async def routing_key(message: AMQPMessage) -> str:
        return message.application_properties["id"]

    async def run() -> None:
        async with SuperStreamProducer(
                "127.0.0.1", port=broker.ports["stream"], username="guest", password="guest",
                super_stream="orders", routing=RouteType.Hash, routing_extractor=routing_key,
                super_stream_creation_option=SuperStreamCreationOption(3)) as producer:
            for i in range(30):
                await producer.send(AMQPMessage(body=f"o{i}".encode(),
                                                application_properties={"id": str(i)}))
            await asyncio.sleep(0.5)
    asyncio.run(run())
    publish(broker, "plain", [b"p"])
    time.sleep(0.3)
    rows = read(spark, broker, stream="orders,plain").collect()
    by_stream = {(r.stream, r.partition) for r in rows}
    assert {p for s, p in by_stream if s == "orders"} == {0, 1, 2}
    assert sorted(r.value for r in rows if r.stream == "orders") == sorted(
        f"o{i}".encode() for i in range(30))
    assert sorted(r.value for r in rows if r.stream == "plain") == [b"last", b"p"]


def test_fail_on_data_loss(spark, broker) -> None:
    publish(broker, "short", [os.urandom(400) for _ in range(200)],
            **{"max-length-bytes": "20000", "stream-max-segment-size-bytes": "4000"})
    with StreamClient.connect(broker.urls["stream"]) as client:
        assert client.offsets("short").first > 0  # retention removed the head
    with pytest.raises(Exception, match="removed by retention"):
        read(spark, broker, stream="short", startingOffsets=json.dumps(
            {"short": {"0": 0}})).collect()
    rows = read(spark, broker, stream="short", failOnDataLoss="false",
                startingOffsets=json.dumps({"short": {"0": 0}})).collect()
    assert 0 < len(rows) < 201 and min(r.offset for r in rows) > 0
    assert max(r.offset for r in rows) == 200


def test_streaming_query_restarts_exactly_where_it_stopped(spark, broker, tmp_path) -> None:
    publish(broker, "flow", [f"a{i}".encode() for i in range(50)])
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run_once() -> None:
        query = (spark.readStream.format("mainstem").option("url", broker.urls["stream"])
                 .option("stream", "flow").option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", "20").load()
                 .selectExpr("CAST(value AS STRING) AS value", "offset")
                 .writeStream.format("parquet").option("path", out)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        progress = query.recentProgress
        assert progress and all(p["numInputRows"] <= 20 for p in progress)

    run_once()
    assert spark.read.parquet(out).count() == 51
    publish(broker, "flow", [f"b{i}".encode() for i in range(30)])
    run_once()
    offsets = [r.offset for r in spark.read.parquet(out).collect()]
    assert sorted(offsets) == list(range(82))  # no loss, no duplicate


def test_key_and_timestamp_type_come_from_what_publishers_set(spark, broker) -> None:
    """rstream publishes: the key is the annotation x-routing-key, else the application
    property ``key``, else the message-id; timestampType is 0 (CreateTime) with the
    creation-time a publisher set, else 1 (LogAppendTime) with the chunk's time."""
    created = 1_600_000_000_123

    async def run() -> None:
        async with Producer("127.0.0.1", port=broker.ports["stream"], username="guest",
                            password="guest") as producer:
            await producer.create_stream("keyed", exists_ok=True)
            await producer.send_batch("keyed", [
                AMQPMessage(body=b"1", message_annotations={"x-routing-key": "routed"},
                            application_properties={"key": "app"}),
                AMQPMessage(body=b"2", application_properties={"key": "app", "n": 5},
                            properties=Properties(message_id="id-2")),
                AMQPMessage(body=b"3", properties=Properties(message_id="id-3",
                                                             creation_time=created)),
                AMQPMessage(body=b"4")])
            await producer.send_wait("keyed", AMQPMessage(body=b"5"))
    before = time.time()
    asyncio.run(run())
    rows = read(spark, broker, stream="keyed").orderBy("offset").collect()
    assert [r.key for r in rows] == [b"routed", b"app", b"id-3", None, None]
    assert [r.timestampType for r in rows] == [1, 1, 0, 1, 1]
    assert rows[2].timestamp.timestamp() == created / 1000
    assert rows[0].timestamp.timestamp() >= before - 1
    assert [(h.key, h.value) for h in rows[1].headers] == [("key", b"app"), ("n", b"5")]


def test_streaming_progress_reports_the_latest_offset(spark, broker, tmp_path) -> None:
    """As Kafka's source: a micro-batch's progress has the partitions' ends it saw
    (latestOffset) beside the end the read limit admitted (endOffset)."""
    publish(broker, "behind", [f"l{i}".encode() for i in range(59)])  # 60 with "last"
    query = (spark.readStream.format("mainstem").option("url", broker.urls["stream"])
             .option("stream", "behind").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "25").load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    sources = [p["sources"][0] for p in query.recentProgress if p["numInputRows"]]

    def parsed(value):
        return json.loads(value) if isinstance(value, str) else value

    assert [parsed(s["endOffset"]) for s in sources] == [
        {"behind": {"0": 25}}, {"behind": {"0": 50}}, {"behind": {"0": 60}}]
    assert [parsed(s["latestOffset"]) for s in sources] == [{"behind": {"0": 60}}] * 3
    assert all(not s.get("metrics") for s in sources)  # PySpark: no custom source metrics


def test_batch_write_then_read(spark, broker) -> None:
    publish(broker, "sink", [b"seed"])
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(100)], "key STRING, value STRING")
    (df.selectExpr("CAST(key AS BINARY) AS key", "CAST(value AS BINARY) AS value",
                   "array(named_struct('key', 'origin', 'value', CAST('spark' AS BINARY))) "
                   "AS headers")
     .write.format("mainstem").option("url", broker.urls["stream"]).option("stream", "sink")
     .mode("append").save())
    rows = read(spark, broker, stream="sink", startingOffsets=json.dumps(
        {"sink": {"0": 2}})).collect()
    assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(100))
    assert {r.key for r in rows} == {f"k{i}".encode() for i in range(100)}
    assert all(r.headers[0]["value"] == b"spark" for r in rows)


def test_a_write_creates_its_streams_when_asked(spark, broker) -> None:
    df = spark.createDataFrame([(f"c{i}",) for i in range(10)], "value STRING")

    def write(frame, **options: str) -> None:
        (frame.write.format("mainstem").option("url", broker.urls["stream"]).options(**options)
         .mode("append").save())

    with pytest.raises(Exception, match="stream 'copy' does not exist; set option "
                                        "createStream=true"):
        write(df, stream="copy")
    with pytest.raises(Exception, match=r"createStream: .*stream 'aged'"):
        write(df, stream="aged", createStream="true", maxAge="soon")
    write(df, stream="copy", createStream="true", maxAge="7D", maxBytes="1000000")
    write(df.selectExpr("value", "'by-row' AS stream"), createStream="true")
    assert sorted(r.value for r in read(spark, broker, stream="copy,by-row").collect()) == \
        sorted(2 * [f"c{i}".encode() for i in range(10)])


def test_the_sink_routes_by_topic_column_and_refuses_overwrite(spark, broker) -> None:
    """As Kafka's sink: a ``topic`` column routes each row, the ``topic`` option overrides it,
    and mode("overwrite") is refused (it used to append)."""
    for stream in ("to-a", "to-b"):
        publish(broker, stream, [b"seed"])
    rows = spark.createDataFrame([("to-a", "a1"), ("to-b", "b1"), ("to-a", "a2")],
                                 "topic STRING, value STRING")

    def stored(stream: str) -> list[bytes]:
        return sorted(r.value for r in read(spark, broker, stream=stream, startingOffsets=
                                            json.dumps({stream: {"0": 2}})).collect())

    def write(frame, mode: str, **options: str) -> None:
        (frame.write.format("mainstem").option("url", broker.urls["stream"]).options(**options)
         .mode(mode).save())

    write(rows, "append")
    assert (stored("to-a"), stored("to-b")) == ([b"a1", b"a2"], [b"b1"])
    write(rows, "append", topic="to-b")
    assert stored("to-b") == [b"a1", b"a2", b"b1", b"b1"]
    with pytest.raises(Exception, match='save mode "overwrite" is not allowed: a stream is only '
                                        'ever appended to; use mode\\("append"\\)'):
        write(rows, "overwrite")
    assert (len(stored("to-a")), len(stored("to-b"))) == (2, 4)


def test_the_readme_spark_examples_run(spark, tmp_path, monkeypatch) -> None:
    """The blocks run in order in one namespace, as a reader would paste them (the
    fourth, a table's, by tests/spark/test_spark_table.py)."""
    blocks = readme_python_blocks("Spark: the `mainstem` data source")[:3]
    with ThreadedBroker(tmp_path / "broker") as fresh:
        publish(fresh, "orders", [f"o{i}".encode() for i in range(30)])
        publish(fresh, "payments", [f"p{i}".encode() for i in range(5)])
        monkeypatch.setenv("MAINSTEM_STREAM_URL", fresh.urls["stream"])
        monkeypatch.setenv("LAKE", str(tmp_path / "lake"))
        namespace: dict = {}
        for block in blocks:
            exec(compile(block, str(README), "exec"), namespace)
        assert namespace["df"].count() == 37
        assert spark.read.parquet(str(tmp_path / "lake" / "orders")).count() == 31
        copied = read(spark, fresh, stream="copy").collect()
        assert sorted(r.value for r in copied) == sorted(r.value for r in namespace["df"]
                                                         .collect())


# What a Kafka job changes to run on mainstem: its format and its connection option.
CONNECTION = re.compile(r'\.format\("(kafka|mainstem)"\)'
                        r'|\.option\("(kafka\.bootstrap\.servers|url)", [^)]*\)')


def test_the_readme_kafka_job_differs_only_in_format_and_connection(spark, tmp_path) -> None:
    text = README.read_text()
    (diff,) = re.findall(r"```diff\n(.*?)```", text[text.index("## Spark: the `mainstem`"):],
                         re.DOTALL)
    lines = diff.splitlines()
    kafka = [line[1:] for line in lines if line[0] in " -"]
    mainstem = [line[1:] for line in lines if line[0] in " +"]
    changed = [line[1:] for line in lines if line[0] in "-+"]
    assert len(changed) == 2 and len(kafka) == len(mainstem)
    assert {CONNECTION.sub("", line).strip() for line in changed} == {""}  # nothing else
    assert all(CONNECTION.search(line) for line in changed)
    with ThreadedBroker(tmp_path / "broker") as fresh:
        publish(fresh, "orders", [f"o{i}".encode() for i in range(30)])
        lake = tmp_path / "lake"
        exec(compile("\n".join(mainstem), str(README), "exec"),
             {"spark": spark, "url": fresh.urls["stream"], "lake": str(lake)})
    rows = spark.read.parquet(str(lake / "orders_by_key")).collect()
    assert sorted(r.value for r in rows) == sorted([f"o{i}" for i in range(30)] + ["last"])
    assert {(r.topic, r.partition, r.timestampType) for r in rows} == {("orders", 0, 1)}


# Where RabbitMQ's Java stream client routes these keys among 3 partitions: the murmur3
# x86 32-bit hash of the key's UTF-8 bytes, seed 104729, and its unsigned remainder
# (Integer.remainderUnsigned, since the client's issue #199, before RabbitMQ 3.11), in the
# order of the super stream's partitions. Computed by a murmur3 written from the algorithm,
# not by mmh3; "key-0" is one whose hash has its top bit set, where `(hash & 0x7FFFFFFF) % 3`
# (the formula before that fix) gives 0, and "über" pins UTF-8.
JAVA_CLIENT_ROUTES = {
    "key-0": 2, "key-1": 1, "key-2": 0, "key-3": 1, "key-4": 2, "key-5": 1, "key-6": 1,
    "key-7": 2, "key-8": 2, "key-9": 2, "key-10": 0, "key-11": 2, "key-12": 0, "key-13": 1,
    "key-14": 2, "key-15": 2, "key-16": 1, "key-17": 2, "key-18": 1, "key-19": 2, "über": 2,
}


def test_writes_to_a_super_stream_route_by_key_or_partition(spark, broker) -> None:
    Client(broker.urls["admin"], "guest", "guest").call("PUT", "/api/streams/%2F/routed",
                                                        {"partitions": 3})
    assert mmh3.hash("key-0", 104729, signed=False) == 0xEFDCAA7E  # the vectors' hash
    assert mmh3.hash("key-0", 104729, signed=True) & 0x7FFFFFFF == 0x6FDCAA7E
    assert (0x6FDCAA7E % 3, 0xEFDCAA7E % 3) == (0, 2)
    keys = [*JAVA_CLIENT_ROUTES] * 3
    rows = spark.createDataFrame([(k, f"v{i}") for i, k in enumerate(keys)], "key STRING, "
                                 "value STRING")
    (rows.write.format("mainstem").option("url", broker.urls["stream"])
     .option("stream", "routed").mode("append").save())
    (spark.createDataFrame([("pinned", 2)], "value STRING, partition INT").write
     .format("mainstem").option("url", broker.urls["stream"]).option("stream", "routed")
     .mode("append").save())
    stored = read(spark, broker, stream="routed").collect()
    assert len(stored) == 3 * len(JAVA_CLIENT_ROUTES) + 1
    by_key: dict[bytes, set[int]] = {}
    for row in stored:
        by_key.setdefault(row.key or row.value, set()).add(row.partition)
    assert by_key.pop(b"pinned") == {2}
    assert {key.decode(): partitions for key, partitions in by_key.items()} == {
        key: {partition} for key, partition in JAVA_CLIENT_ROUTES.items()}
    assert {p for ps in by_key.values() for p in ps} == {0, 1, 2}
    with pytest.raises(Exception, match="a row for super stream 'routed' needs a key or a "
                                        "partition"):
        (spark.createDataFrame([("x",)], "value STRING").write.format("mainstem")
         .option("url", broker.urls["stream"]).option("stream", "routed").mode("append")
         .save())


def test_streaming_write_survives_a_task_retry(spark, broker, tmp_path) -> None:
    """Spark retries a write task whose first attempt failed; the output has every row once.
    (Spark hands the writer its input only once the failing upstream task is done, so the
    failed attempt stores nothing here; the replay test below covers a partial attempt.)"""
    publish(broker, "upstream", [f"u{i}".encode() for i in range(300)])
    publish(broker, "downstream", [b"seed"])
    url, marker = broker.urls["stream"], tmp_path / "failed"

    def fail_first_attempt(value: bytes) -> bytes:
        if value == b"u150" and TaskContext.get().attemptNumber() == 0:
            marker.touch()
            raise RuntimeError("injected task failure")
        return value

    source = (spark.readStream.format("mainstem").option("url", url)
              .option("stream", "upstream").option("startingOffsets", "earliest").load()
              .select(udf(fail_first_attempt, "binary")("value").alias("value")))
    query = (source.writeStream.format("mainstem").option("url", url)
             .option("stream", "downstream")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None and marker.exists()
    values = [r.value for r in read(spark, broker, stream="downstream",
                                    startingOffsets=json.dumps({"downstream": {"0": 2}})
                                    ).collect()]
    assert sorted(values) == sorted([f"u{i}".encode() for i in range(300)] + [b"last"])


def test_a_replayed_task_stores_nothing_twice(broker) -> None:
    """The same task of the same micro-batch, run again after it stored part of its rows
    (a retry or a replay after a crash), adds only what is missing."""
    publish(broker, "replayed", [b"seed"])
    options = SourceOptions.parse({"url": broker.urls["stream"], "stream": "replayed"})
    writer = StreamWriter(options, "spark-sink-test")
    rows = pa.RecordBatch.from_pydict({"value": [f"r{i}".encode() for i in range(100)]})
    first = publish_rows(options, writer.reference, 7, iter([rows.slice(0, 40)]))
    again = publish_rows(options, writer.reference, 7, iter([rows]))
    assert (first.rows, first.skipped) == (40, 0)
    assert (again.rows, again.skipped) == (100, 40)
    with StreamClient.connect(broker.urls["stream"]) as client:
        stored = [bytes(record) for chunk in client.chunks("replayed", 2, 102)
                  for _, record in chunk.records()]
    assert len(stored) == 100


def test_archive_pipeline_adds_only_new_data(spark, broker, tmp_path, capsys) -> None:
    publish(broker, "archived", [f"a{i}".encode() for i in range(40)])
    arguments = ["pipeline", "archive", "--url", broker.urls["stream"], "--stream", "archived",
                 "--output", str(tmp_path / "lake"), "--checkpoint", str(tmp_path / "cp"),
                 "--max-records-per-batch", "25"]
    assert cli_main(arguments) == 0
    err = capsys.readouterr().err
    assert "41 records added" in err
    assert re.search(r"archive: 100%.* 41\.0/41\.0 \[.* records/s\]", err)  # the bar
    publish(broker, "archived", [f"b{i}".encode() for i in range(9)])
    assert cli_main(arguments) == 0
    err = capsys.readouterr().err
    assert "10 records added" in err and re.search(r" 10\.0/10\.0 \[", err)  # from the cp
    publish(broker, "archived", [b"quiet"])
    assert cli_main([*arguments, "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    lake = spark.read.parquet(str(tmp_path / "lake"))
    assert sorted(r.offset for r in lake.collect()) == list(range(53))
    assert {r.stream for r in lake.select("stream").collect()} == {"archived"}
    assert (tmp_path / "lake" / "stream=archived").is_dir()


def test_a_bson_channel_read_by_spark(spark, broker) -> None:
    async def run() -> None:
        client = await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest", "guest")
        await client.create_channel("events")
        await client.publish_many("events", [{"i": i, "kind": "bson"} for i in range(5)])
        await client.close()
    asyncio.run(run())
    rows = read(spark, broker, stream="events").orderBy("offset").collect()
    assert [bson.decode(r.value) for r in rows] == [{"i": i, "kind": "bson"} for i in range(5)]


def test_an_iggy_topic_read_by_spark(spark, broker) -> None:
    async def run() -> None:
        client = await IggyClient.connect("127.0.0.1", broker.ports["iggy"])
        await client.login("guest", "guest")
        await client.create_stream("shop", 3)
        await client.create_topic(3, "orders", partitions=2, topic_id=1)
        for partition in (1, 2):  # Iggy counts partitions from 1, the log from 0
            await client.send(3, 1, [IggyMessage(f"p{partition}-{i}".encode())
                                     for i in range(3)], partition=partition)
    asyncio.run(run())
    rows = read(spark, broker, namespace="shop", stream="orders").collect()
    assert sorted((r.partition, r.value) for r in rows) == [
        (p - 1, f"p{p}-{i}".encode()) for p in (1, 2) for i in range(3)]


def bson_events(broker: ThreadedBroker, channel: str, events: list[dict],
                projections: list[tuple[str, str, str, str, dict]] = ()) -> None:
    async def run() -> None:
        client = await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest", "guest")
        await client.create_channel(channel)
        for name, binder, id_field, fold, matcher in projections:
            await client.create_projection(name, channel, binder, id_field, fold, matcher)
        for start in range(0, len(events), 97):  # many chunks
            await client.publish_many(channel, events[start:start + 97])
        await client.close()
    asyncio.run(run())


def binder_contents(broker: ThreadedBroker, binder: str) -> dict:
    async def run() -> dict:
        client = await EventsClient.connect("127.0.0.1", broker.ports["bson"], "guest", "guest")
        try:
            return {repr(d["user"]["id"]) if "user" in d else None: d
                    async for d in client.query(binder)}
        finally:
            await client.close()
    return asyncio.run(run())


def settled(broker: ThreadedBroker, binder: str, done) -> dict:
    """The binder once `done(contents)` holds, or as it is after 10 s."""
    for _ in range(200):
        contents = binder_contents(broker, binder)
        if done(contents):
            break
        time.sleep(0.05)
    return contents


def clicks_of_user_1(events: int) -> int:
    return len([i for i in range(events) if i % 5 == 0 and i % 3 in (0, 1)])


def click(i: int) -> dict:
    user = [1, 2, "1", "x", True][i % 5]  # ids of several BSON types stay apart
    return {"user": {"id": user}, "clicks": 1, "weight": 0.5, "last": i, "kind": i % 3,
            f"tag{i % 4}": i}


def test_spark_projection_agrees_with_the_live_one_and_hands_over(spark, broker,
                                                                  capsys) -> None:
    matcher = {"kind": {"$in": [0, 1]}}
    events = [click(i) for i in range(1_000)] + [{"no": "id"}, {"user": {"id": 1}, "kind": 2}]
    folds = ("replace", "merge", "increment")
    bson_events(broker, "clicks", events,
                [(f"live-{fold}", f"live-{fold}", "user.id", fold, matcher) for fold in folds])
    for fold in folds:  # the Spark fold, collected, equals the broker's own projection
        projection = Projection(f"spark-{fold}", "clicks", f"spark-{fold}", "user.id", fold,
                                matcher)
        records = read(spark, broker, stream="clicks")
        rebuilt = {repr(doc_id): bson.decode(raw) for doc_id, raw in
                   fold_documents(records, projection, 3).collect()}
        assert len(rebuilt) == 5
        assert settled(broker, f"live-{fold}", rebuilt.__eq__) == rebuilt
    assert rebuilt[repr(1)]["clicks"] == clicks_of_user_1(1_000)
    # The CLI job rebuilds a binder and hands over to a live projection at its end.
    url = f"rabbitmq-stream://guest:guest@127.0.0.1:{broker.ports['stream']}/%2F"
    assert cli_main(["pipeline", "project", "--url", url, "--events-port",
                     str(broker.ports["bson"]), "--name", "handed", "--channel", "clicks",
                     "--binder", "handed", "--id-field", "user.id", "--fold", "increment",
                     "--matcher", json.dumps(matcher), "--partitions", "2"]) == 0
    bar = re.search(r"project: 100%.* (\S+)/(\S+) \[", capsys.readouterr().err)
    assert bar and bar[1] == bar[2] == "1.00k"  # every record read, of the known total
    assert binder_contents(broker, "handed") == binder_contents(broker, "live-increment")
    more = [click(i) for i in range(1_000, 1_100)]
    bson_events(broker, "clicks", more)  # the handed-over projection goes on live
    live = settled(broker, "live-increment",
                   lambda c: c[repr(1)]["clicks"] == clicks_of_user_1(1_100))
    assert live[repr(1)]["clicks"] == clicks_of_user_1(1_100)
    assert settled(broker, "handed", live.__eq__) == live
