"""Spark's Python workers run the interpreter that started the driver.

PySpark starts its workers (and the one that finds ``pyspark_*`` data sources) with
``spark.pyspark.python``, else ``PYSPARK_PYTHON``, else ``python3`` from PATH: a job run as
``.venv/bin/python job.py`` without activating the venv gets the system Python, which lacks
mainstem (``DATA_SOURCE_NOT_FOUND``). The installed ``mainstem-spark-python.pth`` (see
setup.py) calls this at every start of the environment's interpreter; a chosen interpreter
(the variable or the Spark setting) is left alone. A top-level module importing only what
``site`` already loaded, so every interpreter start pays nothing.
"""

import os
import sys


def point_workers_here() -> None:
    if sys.executable:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
