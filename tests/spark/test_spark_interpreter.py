"""``format("mainstem")`` resolves wherever people run Spark, each case a real process with
a bare environment (PATH's ``python3`` is the system one, without mainstem, and no Spark
variables): a job run with this venv's interpreter (its editable install's .pth); PySpark's
own spark-submit given only ``spark.pyspark.python`` (PySpark's lookup ignores it: the
driver registers the source); and the README's cluster block, which packs a venv holding
mainstem's wheel and ships it with ``--archives`` to a ``local-cluster`` master."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pyspark
import pytest

from mainstem.testing import ThreadedBroker
from tests.spark.test_spark import README, publish

pytestmark = pytest.mark.spark

SPARK_HOME = Path(pyspark.__file__).parent
PTH_NAME = "mainstem-spark-python.pth"
JOB = """
import os
from pyspark.sql import SparkSession
spark = (SparkSession.builder.config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
rows = (spark.read.format("mainstem").option("url", os.environ["MAINSTEM_STREAM_URL"])
        .option("stream", "s").load())
print("COLUMNS", ",".join(rows.columns))
print("VALUES", ",".join(sorted(bytes(r.value).decode() for r in rows.collect())))
spark.stop()
"""
COLUMNS = ("COLUMNS key,value,stream,topic,partition,offset,timestamp,timestampType,"
           "headers,properties")
VALUES = "VALUES a,b,c,last"


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[ThreadedBroker]:
    with ThreadedBroker(tmp_path_factory.mktemp("broker")) as running:
        publish(running, "s", [b"a", b"b", b"c"])
        yield running


def _bare_env(**extra: str | Path) -> dict[str, str]:
    """No venv on PATH, no PYSPARK_*, no PYTHONPATH: what a user's shell may well have."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"),
           "SPARK_LOCAL_IP": "127.0.0.1",
           **{k: v for k, v in os.environ.items() if k == "JAVA_HOME"}}
    return {**env, **{key: str(value) for key, value in extra.items()}}


def _run(command: list[str | Path] | str, cwd: Path, env: dict[str, str],
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    args = command if isinstance(command, str) else [str(part) for part in command]
    found = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout,
                           cwd=cwd, shell=isinstance(command, str))
    errors = [line for line in found.stderr.splitlines() if "Error" in line
              or "Exception:" in line]
    assert found.returncode == 0, (errors[:10], found.stdout[-2000:], found.stderr[-2000:])
    return found


def test_the_venvs_editable_install_carries_the_pth() -> None:
    """What scripts/test made: ``pip install -e`` installs the .pth beside the package's."""
    site = Path(sysconfig.get_paths()["purelib"])
    assert (site / PTH_NAME).read_text().startswith("import mainstem_spark_python;")
    assert list(site.glob("__editable__*mainstem*"))  # it is the editable install
    assert sorted(p.name for p in site.glob("*.pth")).index(PTH_NAME) > 0  # src comes first


def test_a_job_finds_the_source_run_directly_and_under_spark_submit(broker, tmp_path) -> None:
    """Before: both failed with DATA_SOURCE_NOT_FOUND (ClassNotFoundException:
    mainstem.DefaultSource); the second even with spark.pyspark.python set."""
    job = tmp_path / "job.py"
    job.write_text(JOB.replace('SparkSession.builder', 'SparkSession.builder.master("local[1]")'))
    direct = _run([sys.executable, job], tmp_path, _bare_env(
        MAINSTEM_STREAM_URL=broker.urls["stream"]))
    assert (COLUMNS in direct.stdout and VALUES in direct.stdout), direct.stdout
    job.write_text(JOB)  # spark-submit's master
    submitted = _run([SPARK_HOME / "bin" / "spark-submit", "--master", "local[1]",
                      "--conf", f"spark.pyspark.python={sys.executable}", job], tmp_path,
                     _bare_env(SPARK_HOME=SPARK_HOME, MAINSTEM_STREAM_URL=broker.urls["stream"]))
    assert (COLUMNS in submitted.stdout and VALUES in submitted.stdout), submitted.stdout


def test_the_readme_cluster_block_ships_mainstem_to_executors(broker, tmp_path, plain_wheel
                                                              ) -> None:
    """The block as written, on ``local-cluster[1,1,1024]`` (a master and a worker JVM, as
    a standalone cluster) instead of ``spark://host:7077``. The venv it packs gets the wheel
    without dependencies, the rest (pyspark, pyarrow...) from this venv's site-packages by
    a .pth path line (which runs none of that directory's .pth files: mainstem comes from
    the wheel alone). Before: without ``spark.pyspark.python`` the driver ran PATH's python3
    (``No module named 'mainstem'``)."""
    section = README.read_text().split("## Spark: the `mainstem` data source")[1]
    block = next(b for b in re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
                 if "--archives" in b)
    deps = Path(sysconfig.get_paths()["purelib"])
    env_site = f"env/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    substitutions = {
        "python3 -m venv env": f"{sys._base_executable} -m venv --without-pip env",
        "env/bin/pip install 'mainstem[spark]'":  # this venv's pip, into env
            f"{sys.executable} -m pip --python env/bin/python install -q --no-deps "
            f"--no-index {plain_wheel} "
            f"&& echo {deps} > {env_site}/shared-dependencies.pth",
        "spark-submit --master spark://host:7077":
            f"{SPARK_HOME}/bin/spark-submit --master 'local-cluster[1,1,1024]'",
        "rabbitmq-stream://guest:guest@broker:5552/%2F": broker.urls["stream"],
        "hdfs:///lake/orders": f"{tmp_path}/lake/orders",
        "hdfs:///lake/_cp": f"{tmp_path}/lake/_cp",
        "--stream orders": "--stream s --quiet",
    }
    for old, new in substitutions.items():
        assert old in block, old
        block = block.replace(old, new)
    submit = tmp_path / "submit"
    submit.mkdir()
    spark_home = tmp_path / "spark-home"  # a local-cluster's workers work in SPARK_HOME/work
    spark_home.mkdir()
    for entry in SPARK_HOME.iterdir():
        (spark_home / entry.name).symlink_to(entry)
    block = block.replace(str(SPARK_HOME), str(spark_home))
    _run(["bash", "-euc", block], submit, _bare_env(SPARK_HOME=spark_home))
    unpacked = list((spark_home / "work").glob("app-*/*/env/bin/python"))
    assert unpacked, "the executor did not unpack the archive"
    values = ds.dataset(tmp_path / "lake" / "orders", format="parquet",
                        partitioning="hive").to_table(columns=["value"]).column("value")
    assert sorted(values.to_pylist()) == [b"a", b"b", b"c", b"last"]


def _fresh_shell(**extra: str | Path) -> dict[str, str]:
    """What `env -i` leaves, and the job's own settings (loopback, the broker's url); the
    code under test on the path when the tests run it from a checkout."""
    return {**{key: os.environ[key] for key in ("PYTHONPATH",) if key in os.environ},
            "SPARK_LOCAL_IP": "127.0.0.1", **{key: str(value) for key, value in extra.items()}}


def test_mainstem_spark_submit_runs_a_job_from_a_fresh_shell(broker, tmp_path, plain_wheel
                                                            ) -> None:
    """The README's command, in the dev venv and in a venv holding the wheel: before,
    PySpark's own `.venv/bin/spark-submit job.py` exited 127 from `env -i` ("Could not find
    valid SPARK_HOME": its lookup runs PATH's python3), and with SPARK_HOME given, the
    driver ran PATH's python3 (DATA_SOURCE_NOT_FOUND)."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    bare = _fresh_shell(MAINSTEM_STREAM_URL=broker.urls["stream"])
    plain = subprocess.run([Path(sys.executable).parent / "spark-submit", job], env=bare,
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert plain.returncode == 127 and "Could not find valid SPARK_HOME" in plain.stderr
    dev = _run([Path(sys.executable).parent / "mainstem", "spark-submit", "--master",
                "local[1]", job], tmp_path, bare)
    assert COLUMNS in dev.stdout and VALUES in dev.stdout, dev.stdout
    deps = Path(sysconfig.get_paths()["purelib"])
    env_site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    venv = tmp_path / "wheel-venv"
    _run([sys._base_executable, "-m", "venv", "--without-pip", venv], tmp_path, {})
    _run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q",
          "--no-deps", "--no-index", plain_wheel], tmp_path, {**os.environ})
    (venv / env_site / "shared-dependencies.pth").write_text(f"{deps}\n")
    wheel = _run([venv / "bin" / "mainstem", "spark-submit", "--master", "local[1]", job],
                 tmp_path, {key: value for key, value in bare.items() if key != "PYTHONPATH"})
    assert COLUMNS in wheel.stdout and VALUES in wheel.stdout, wheel.stdout
