"""Messages per minute and per key over a mainstem stream, as a Spark streaming job.

    .venv/bin/python examples/windowed_counts.py --stream events
    spark-submit --master spark://host:7077 examples/windowed_counts.py --stream events

Prints each minute's counts as they complete (event time, with a one-minute watermark).
"""

from __future__ import annotations

import argparse

from mainstem.spark.options import DEFAULT_URL
from mainstem.spark.pipelines import spark_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--master", default=None)
    parser.add_argument("--checkpoint", default="/tmp/mainstem-windowed-counts")
    args = parser.parse_args()
    spark = spark_session(args.master, "mainstem-windowed-counts")
    counts = (spark.readStream.format("mainstem").option("url", args.url)
              .option("stream", args.stream).option("startingOffsets", "earliest").load()
              .withWatermark("timestamp", "1 minute")
              .groupBy("stream", "key", spark_window("timestamp"))
              .count())
    query = (counts.writeStream.outputMode("append").format("console")
             .option("truncate", "false").option("checkpointLocation", args.checkpoint)
             .start())
    query.awaitTermination()


def spark_window(column: str):
    from pyspark.sql.functions import window
    return window(column, "1 minute")


if __name__ == "__main__":
    main()
