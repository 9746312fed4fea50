"""`pip install mainstem` without extras runs a broker: the wheel built from this checkout,
installed with its base dependencies from the package index into a fresh venv (no system
site-packages), answers `serve --help` and `ctl --help`, starts a broker on loopback, and
`mainstem pipeline` names the extra it needs instead of failing at import."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mainstem.protocols import all_protocols
from tests.support.plain_wheel import copy_checkout, plain_env
from tests.support.server_process import kill, start_server, started_ports

INSTALL_TIMEOUT_S = 180


def _run(*command: str | Path, timeout: float = INSTALL_TIMEOUT_S
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True,
                          timeout=timeout, env=plain_env())


@pytest.fixture(scope="module")
def base_install(plain_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a venv holding mainstem's wheel and its base dependencies."""
    venv = tmp_path_factory.mktemp("base-install") / "venv"
    created = _run(sys.executable, "-m", "venv", venv)
    assert created.returncode == 0, created.stderr
    installed = _run(venv / "bin" / "python", "-m", "pip", "install", "-q", plain_wheel)
    assert installed.returncode == 0, installed.stderr
    return venv / "bin"


def test_serve_and_ctl_answer_help_without_the_extras(base_install: Path) -> None:
    absent = _run(base_install / "python", "-c", "import tqdm")
    assert absent.returncode != 0, "the venv has the spark extra: the test proves nothing"
    for command in ("serve", "ctl"):
        helped = _run(base_install / "mainstem", command, "--help", timeout=30)
        assert helped.returncode == 0, helped.stderr
        assert f"usage: mainstem {command}" in helped.stdout


def test_a_broker_starts_from_the_base_install(base_install: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    process = start_server(tmp_path / "data", log_path, mainstem=base_install / "mainstem",
                           env=plain_env())
    try:
        ports = started_ports(process, log_path)
        assert set(ports) == {spec.name for spec in all_protocols()} | {
            "admin", "prometheus"}
        assert all(port > 0 for port in ports.values())
    finally:
        kill(process, signal.SIGTERM)
    assert process.returncode == 0, log_path.read_text()


def test_a_pipeline_names_the_extra_it_needs(base_install: Path, tmp_path: Path) -> None:
    helped = _run(base_install / "mainstem", "pipeline", "archive", "--help", timeout=30)
    assert helped.returncode == 0, helped.stderr
    ran = _run(base_install / "mainstem", "pipeline", "archive", "--stream", "s", "--output",
               tmp_path / "out", "--checkpoint", tmp_path / "cp", timeout=30)
    assert ran.returncode != 0
    assert "pip install 'mainstem[spark]'" in ran.stderr
    assert "Traceback" not in ran.stderr, ran.stderr


def test_scripts_run_installs_the_plain_package(tmp_path: Path) -> None:
    """A fresh clone's `scripts/run` installs the broker alone, not the test extra (1.25 GB,
    90 s before anything listened): pytest and pyspark stay out of its venv."""
    clone = copy_checkout(tmp_path / "clone", "scripts")
    helped = _run("bash", clone / "scripts" / "run", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "usage: mainstem serve" in helped.stdout
    for extra in ("pytest", "pyspark"):
        absent = _run(clone / ".venv" / "bin" / "python", "-c", f"import {extra}", timeout=30)
        assert absent.returncode != 0, f"scripts/run installed {extra}"
