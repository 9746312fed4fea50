"""Spark side: the ``mainstem`` PySpark data source and the pipelines built on it, and
``read_stream_table`` (a table-enabled stream's history through Spark's Parquet scan)."""

from typing import Any


def __getattr__(name: str) -> Any:
    """``read_stream_table`` imported when used: the pipelines' parser loads this package
    without PySpark."""
    if name == "read_stream_table":
        from mainstem.spark.history import read_stream_table

        return read_stream_table
    raise AttributeError(name)
