"""Waiting for a started process (mainstem.testing_wait): as long as it makes progress, its
log growing or its CPU time, however long a loaded machine makes that; not when it sleeps
or has exited. Real child processes; short stall and cap times keep the test fast."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mainstem.testing_wait import wait_while_progressing

STALL_S = 0.5
CAP_S = 10.0
SLOW_S = 1.5  # three stalls' worth: a fixed wait of STALL_S would give up

WRITES_THEN_READY = f"""
import sys, time
log = open(sys.argv[1], "a", buffering=1)
end = time.monotonic() + {SLOW_S}
while time.monotonic() < end:
    log.write("working\\n")
    time.sleep(0.1)
log.write("ready\\n")
time.sleep(30)
"""
COMPUTES_THEN_READY = f"""
import sys, time
end = time.monotonic() + {SLOW_S}
while time.monotonic() < end:
    pass
open(sys.argv[1], "a").write("ready\\n")
time.sleep(30)
"""
SLEEPS = "import time; time.sleep(30)"
EXITS = "pass"
WRITES_FOREVER = WRITES_THEN_READY.replace(f"+ {SLOW_S}", "+ 30")


@pytest.fixture
def child(tmp_path: Path) -> Iterator[Callable[[str], tuple[subprocess.Popen, Path]]]:
    """Run a script as a child process with its log path; stop it by pid afterwards."""
    log_path = tmp_path / "child.log"
    started: list[subprocess.Popen] = []

    def run(script: str) -> tuple[subprocess.Popen, Path]:
        process = subprocess.Popen([sys.executable, "-c", script, str(log_path)])
        started.append(process)
        return process, log_path

    yield run
    for process in started:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def _wait(process: subprocess.Popen, log_path: Path) -> tuple[str | None, float]:
    """"ready" once the log has it (or None), and the seconds the wait took."""

    def ready() -> str | None:
        text = log_path.read_text() if log_path.exists() else ""
        return "ready" if "ready" in text else None

    began = time.monotonic()
    found = wait_while_progressing(ready, lambda: process.poll() is None, process.pid,
                                   log_path, stall_s=STALL_S, cap_s=CAP_S)
    return found, time.monotonic() - began


@pytest.mark.parametrize("script", [WRITES_THEN_READY, COMPUTES_THEN_READY],
                         ids=["log-grows", "uses-cpu"])
def test_a_slow_start_that_makes_progress_is_waited_for(child, script: str) -> None:
    found, took = _wait(*child(script))
    assert found == "ready"
    assert took >= SLOW_S - 0.2  # longer than any single stall allowed


def test_a_process_that_makes_no_progress_is_given_up_on(child) -> None:
    found, took = _wait(*child(SLEEPS))
    assert found is None
    assert took < CAP_S / 2


def test_an_exited_process_ends_the_wait_at_once(child) -> None:
    process, log_path = child(EXITS)
    process.wait()
    found, took = _wait(process, log_path)
    assert found is None and took < STALL_S


def test_progress_is_waited_on_no_longer_than_the_cap(child) -> None:
    process, log_path = child(WRITES_FOREVER)
    began = time.monotonic()
    found = wait_while_progressing(lambda: None, lambda: process.poll() is None, process.pid,
                                   log_path, stall_s=STALL_S, cap_s=1.0)
    assert found is None
    assert 1.0 <= time.monotonic() - began < CAP_S / 2
