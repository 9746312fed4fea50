"""``mainstem pipeline ...``: Spark jobs over streams, each a real Spark application.

    mainstem pipeline archive --stream orders --output /lake/orders --checkpoint /lake/_cp
    mainstem pipeline project --name totals --channel orders --binder totals --id-field id

runs locally (``--master local[*]`` by default) or, given to ``spark-submit``, on a cluster:

    spark-submit --master spark://host:7077 --archives env.tar.gz#env \
        --conf spark.pyspark.python=./env/bin/python "$(env/bin/python -c 'import
        mainstem.spark.pipelines as p; print(p.__file__)')" archive --stream orders ...

(``spark.pyspark.python`` runs the driver with mainstem; the README's Spark section packs
``env`` for the executors.)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from mainstem.broker.errors import InvalidArgument
from mainstem.broker.events.projections import FOLDS, Projection
from mainstem.spark.options import DEFAULT_URL, OffsetMap, SourceOptions, topic_partitions
from mainstem.spark.progress import INTERVAL_S, Progress, progress_bar
from mainstem.spark.projection import DEFAULT_EVENTS_PORT, RebuildError, rebuild
from mainstem_spark_python import point_workers_here, register

# What pyproject.toml's spark extra installs, as imported: the broker's base install lacks them.
SPARK_EXTRA_MODULES = ("pyspark", "pyarrow", "tqdm", "mmh3")

Pipeline = Callable[[argparse.Namespace], int]  # a job's run, given the parsed command line


def add_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    jobs = parser.add_subparsers(dest="pipeline", metavar="PIPELINE", required=True)
    archive = _job(
        jobs, "archive", run_archive, "copy streams into partitioned Parquet, incrementally",
        "Append every record not archived yet to Parquet files partitioned by stream and "
        "date. The checkpoint remembers where the last run stopped: running it again adds "
        "only new records.")
    archive.add_argument("--stream", required=True, help="a stream, or a comma list")
    archive.add_argument("--output", required=True, help="the Parquet directory")
    archive.add_argument("--checkpoint", required=True, help="the job's checkpoint directory")
    archive.add_argument("--max-records-per-batch", type=int, default=500_000,
                         help="records per micro-batch (bounds memory)")
    project = _job(
        jobs, "project", run_project, "rebuild a binder from a channel's history, then go on "
        "live", "Run a projection over the whole history of a BSON event channel on Spark, "
        "load the folded documents into the binder and hand over to the broker's live "
        "projection at the offset the job reached (the binder is swapped atomically). The "
        "URL's virtual host is the channel's namespace.")
    project.add_argument("--events-port", type=int, default=DEFAULT_EVENTS_PORT,
                         help="the broker's BSON event protocol port (same host)")
    project.add_argument("--name", required=True, help="the projection's name")
    project.add_argument("--channel", required=True)
    project.add_argument("--binder", required=True)
    project.add_argument("--id-field", required=True,
                         help="the event field (dot path) that gives the document id")
    project.add_argument("--fold", choices=FOLDS, default="merge")
    project.add_argument("--matcher", type=json.loads, default={},
                         help="a matcher document as JSON, e.g. '{\"kind\": \"order\"}'")
    project.add_argument("--partitions", type=int, default=None,
                         help="fold tasks (default: Spark's default parallelism)")


def _job(jobs: argparse._SubParsersAction[argparse.ArgumentParser], name: str, run: Pipeline,
         summary: str, description: str) -> argparse.ArgumentParser:
    """A pipeline's parser with the options every job shares."""
    job = jobs.add_parser(name, help=summary, description=description)
    job.add_argument("--url", default=os.environ.get("MAINSTEM_STREAM_URL", DEFAULT_URL),
                     help="the broker's stream-protocol URL with credentials")
    job.add_argument("--master", default=None,
                     help="Spark master (default local[*], or spark-submit's)")
    job.add_argument("--quiet", action="store_true",
                     help="no progress bar and no summary line (for cron); errors still show")
    job.set_defaults(run=run)
    return job


def spark_session(master: str | None, name: str) -> Any:
    missing = [module for module in SPARK_EXTRA_MODULES if importlib.util.find_spec(module) is None]
    if missing:
        raise SystemExit(f"pipelines need the spark extra ({', '.join(missing)} missing): "
                         "pip install 'mainstem[spark]'")
    from pyspark.sql import SparkSession

    point_workers_here()  # as the .pth does, for an interpreter that did not run it
    builder = SparkSession.builder.appName(name).config("spark.ui.showConsoleProgress", "false")
    launched_by_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master or not launched_by_spark_submit:
        builder = builder.master(master or "local[*]")
    session = builder.getOrCreate()
    register(session)  # a no-op when the .pth's hook did it
    return session


def run_archive(args: argparse.Namespace) -> int:
    spark = spark_session(args.master, "mainstem-archive")
    records = (spark.readStream.format("mainstem").option("url", args.url)
               .option("stream", args.stream).option("startingOffsets", "earliest")
               .option("maxOffsetsPerTrigger", str(args.max_records_per_batch)).load()
               .selectExpr("*", "to_date(timestamp) AS date"))
    query = (records.writeStream.format("parquet").option("path", args.output)
             .option("checkpointLocation", args.checkpoint).partitionBy("stream", "date")
             .trigger(availableNow=True).queryName("mainstem-archive").start())
    with progress_bar("archive", args.quiet) as bar:
        total = _follow(query, bar, lambda start: _backlog(args.url, args.stream, start))
    if not args.quiet:
        print(f"archive: {total} records added to {args.output}", file=sys.stderr)
    return 0


def run_project(args: argparse.Namespace) -> int:
    try:
        projection = Projection(args.name, args.channel, args.binder, args.id_field,
                                args.fold, args.matcher)
    except InvalidArgument as exc:
        print(f"project: {exc.message}", file=sys.stderr)
        return 2
    spark = spark_session(args.master, "mainstem-project")
    try:
        with progress_bar("project", args.quiet) as bar:
            rebuilt = rebuild(spark, args.url, projection, events_port=args.events_port,
                              partitions=args.partitions, progress=bar)
    except RebuildError as exc:
        print(f"project: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"project: {rebuilt.documents} documents in binder {args.binder!r}; projection "
              f"{args.name!r} goes on live from offset {rebuilt.position}", file=sys.stderr)
    return 0


def _follow(query: Any, progress: Progress, backlog: Callable[[OffsetMap | None], int]
            ) -> int:
    """Report each micro-batch as it completes; the number of records written. The total
    is known at the first batch, which tells where the checkpoint had stopped."""
    seen: set[int] = set()
    total = 0
    while True:
        finished = query.awaitTermination(INTERVAL_S)
        for report in query.recentProgress:
            if report["batchId"] in seen:
                continue
            if not seen:
                start = report["sources"][0]["startOffset"]
                progress.total = backlog(json.loads(start) if start else None)
                progress.refresh()
            seen.add(report["batchId"])
            total += report["numInputRows"]
            progress.update(report["numInputRows"])
        if finished:
            break
    if query.exception() is not None:
        raise RuntimeError(f"the archive job failed: {query.exception()}")
    return total


def _backlog(url: str, streams: str, start: OffsetMap | None) -> int:
    """Records from `start` (the checkpoint's offsets; None: the first stored) to the end
    now: what an availableNow run reads."""
    options = SourceOptions.parse({"url": url, "stream": streams})
    total = 0
    with options.connect() as client:
        for tp in topic_partitions(client, options.streams):
            offsets = client.offsets(tp.physical)
            begin = (start or {}).get(tp.stream, {}).get(tp.key, offsets.first)
            total += max(offsets.end - begin, 0)
    return total


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``spark-submit pipelines.py PIPELINE ...``."""
    parser = argparse.ArgumentParser(prog="pipelines")
    add_pipeline_arguments(parser)
    args = parser.parse_args(argv)
    run: Pipeline = args.run  # set by the chosen pipeline's parser
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
