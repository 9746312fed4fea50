"""Spark side: the ``mainstem`` PySpark data source and the pipelines built on it."""
