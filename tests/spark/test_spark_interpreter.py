"""A job run as ``.venv/bin/python job.py`` without an activated venv: PATH's ``python3`` is
the system one, without mainstem, yet Spark's workers find the ``mainstem`` data source
because the installed .pth points them at the driver's interpreter."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
JOB = """
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
print(",".join(spark.read.format("mainstem").option("stream", "s").load().columns))
spark.stop()
"""


def _setup_module():
    spec = importlib.util.spec_from_file_location("mainstem_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(job: Path, site_dir: Path | None) -> subprocess.CompletedProcess[str]:
    """The job under the venv's interpreter, with a bare PATH and no Spark variables; the
    site directory (if any) stands for site-packages holding the installed .pth."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"),
           "SPARK_LOCAL_IP": "127.0.0.1",
           **{k: v for k, v in os.environ.items() if k == "JAVA_HOME"}}
    prelude = f"import site; site.addsitedir({str(site_dir)!r}); " if site_dir else ""
    code = f"{prelude}import runpy; runpy.run_path({str(job)!r}, run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300, cwd=job.parent)


def test_workers_run_the_drivers_interpreter_without_an_activated_venv(tmp_path) -> None:
    setup = _setup_module()
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / setup.PTH_NAME).write_text(setup.PTH_LINE)
    job = tmp_path / "job.py"
    job.write_text(JOB)
    found = _run(job, site_dir)
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.strip().endswith("key,value,stream,topic,partition,offset,timestamp,"
                                         "timestampType,headers,properties")
    lost = _run(job, None)  # what users met before: the system python3 runs the lookup
    assert "DATA_SOURCE_NOT_FOUND" in lost.stdout + lost.stderr
