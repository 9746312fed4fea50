"""``mainstem spark-submit ARGS``: PySpark's own ``bin/spark-submit``, run so that a job
finds Spark and the ``mainstem`` source from any shell, ``env -i`` included.

PySpark's pip-installed ``spark-submit`` cannot do it by itself: before anything of
mainstem runs it finds ``SPARK_HOME`` with PATH's ``python3`` (which, outside an
activated venv, has no PySpark: "Could not find valid SPARK_HOME", exit 127), and then
runs the driver with ``spark.pyspark.python``, else ``PYSPARK_PYTHON``, else PATH's
``python3`` again (without mainstem: ``DATA_SOURCE_NOT_FOUND``). This command runs in the
venv's interpreter, so it sets what is unset: ``SPARK_HOME`` to its PySpark and
``PYSPARK_PYTHON`` to itself; a ``spark.pyspark.python`` given (a packed venv shipped
with ``--archives``) still wins, as Spark's precedence says.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

HELP = """usage: mainstem spark-submit [spark-submit options] job.py [job arguments]

PySpark's spark-submit with SPARK_HOME set to this environment's PySpark and the driver's
and workers' Python set to this interpreter (unless PYSPARK_PYTHON or
spark.pyspark.python say otherwise): a job run from a fresh shell finds Spark and the
mainstem data source. Every argument goes to spark-submit as given."""


def spark_submit(args: Sequence[str]) -> int:
    """Replace this process with spark-submit; returns only to refuse (exit status 2)."""
    if list(args[:1]) in (["-h"], ["--help"]):
        print(HELP)
        return 0
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        print("mainstem spark-submit needs the spark extra: pip install 'mainstem[spark]'",
              file=sys.stderr)
        return 2
    environment = dict(os.environ)
    home = environment.setdefault("SPARK_HOME", str(Path(spec.origin).parent))
    environment.setdefault("PYSPARK_PYTHON", sys.executable)
    command = str(Path(home, "bin", "spark-submit"))
    os.execve(command, [command, *args], environment)
