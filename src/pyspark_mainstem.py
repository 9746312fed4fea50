"""PySpark finds data sources in top-level modules named ``pyspark_*`` that define
``DefaultSource``: with mainstem installed, ``spark.read.format("mainstem")`` needs no
register call."""

from mainstem.spark.source import MainstemDataSource as DefaultSource

__all__ = ["DefaultSource"]
