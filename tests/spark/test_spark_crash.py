"""A streaming query SIGKILLed mid-batch (driver, JVM and workers at once) and restarted
loses nothing and duplicates nothing in its Parquet output."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rstream import AMQPMessage, Producer

from mainstem.testing import ThreadedBroker

pytestmark = pytest.mark.spark
DRIVER = Path(__file__).with_name("spark_driver.py")


def publish(broker: ThreadedBroker, start: int, count: int) -> None:
    async def run() -> None:
        async with Producer("127.0.0.1", port=broker.ports["stream"], username="guest",
                            password="guest") as producer:
            await producer.create_stream("crash", exists_ok=True)
            for first in range(start, start + count, 100):
                await producer.send_batch("crash", [AMQPMessage(body=str(i).encode())
                                                    for i in range(first, first + 100)])
            await producer.send_wait("crash", AMQPMessage(body=b"end"))
    asyncio.run(run())


def driver(broker: ThreadedBroker, tmp_path: Path, *flags: str) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen(
        [sys.executable, str(DRIVER), "--url", broker.urls["stream"],
         "--out", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "cp"), *flags],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
        start_new_session=True)  # its own process group: the kill takes the JVM too


def test_sigkilled_query_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    with ThreadedBroker(tmp_path / "broker") as broker:
        publish(broker, 0, 3000)
        running = driver(broker, tmp_path, "--until-killed")
        try:
            assert running.stdout is not None and running.stdout.readline() == "started\n"
            commits = tmp_path / "cp" / "commits"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and len(list(commits.glob("[0-9]*"))) < 3:
                time.sleep(0.05)
            assert len(list(commits.glob("[0-9]*"))) >= 3, "the query made no progress"
            publish(broker, 3000, 1000)  # more arrives while it runs
            time.sleep(0.3)  # a micro-batch is likely in flight now
        finally:
            os.killpg(running.pid, signal.SIGKILL)
            running.wait(30)
        publish(broker, 4000, 500)  # and more while it is down
        restarted = driver(broker, tmp_path)
        out, _ = restarted.communicate(timeout=300)
    result = json.loads(out.strip().splitlines()[-1])
    expected = 4500 + 3  # three "end" markers
    assert result == {"rows": expected, "offsets": expected, "max": expected - 1}
