"""A Spark driver for the crash test: stream a mainstem stream into Parquet. With
``--until-killed`` it runs micro-batches forever (the test SIGKILLs it); otherwise it drains
what is there (availableNow) and prints the output's row and distinct-offset counts."""

from __future__ import annotations

import argparse
import json
import os
import sys

from pyspark.sql import SparkSession


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--until-killed", action="store_true")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    stream = (spark.readStream.format("mainstem").option("url", args.url)
              .option("stream", "crash").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "300").load().select("value", "offset"))
    writer = (stream.writeStream.format("parquet").option("path", args.out)
              .option("checkpointLocation", args.checkpoint))
    if args.until_killed:
        query = writer.trigger(processingTime="100 milliseconds").start()
        print("started", flush=True)
        query.awaitTermination()
        return
    writer.trigger(availableNow=True).start().awaitTermination()
    rows = spark.read.parquet(args.out)
    print(json.dumps({"rows": rows.count(),
                      "offsets": rows.select("offset").distinct().count(),
                      "max": rows.agg({"offset": "max"}).collect()[0][0]}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
