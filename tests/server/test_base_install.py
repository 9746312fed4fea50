"""`pip install mainstem` without extras runs a broker: the wheel built from this checkout,
installed with its base dependencies from the package index into a fresh venv (no system
site-packages), answers `serve --help` and `ctl --help`, starts a broker on loopback, and
`mainstem pipeline` names the extra it needs instead of failing at import."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mainstem.protocols import all_protocols
from tests.support.server_process import kill, start_server, started_ports

ROOT = Path(__file__).resolve().parents[2]
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md")
INSTALL_TIMEOUT_S = 180


def _env() -> dict[str, str]:
    """No MAINSTEM_* settings and no PYTHONPATH: the venv runs only what it installed. The
    builds here skip compiling (MAINSTEM_COMPILE=0, minutes of mypyc): what is tested is
    what the plain package installs; the suite itself runs on the compiled build."""
    return {**{key: value for key, value in os.environ.items()
               if not key.startswith("MAINSTEM_") and key not in ("PYTHONPATH", "VIRTUAL_ENV")},
            "MAINSTEM_COMPILE": "0"}


def _run(*command: str | Path, timeout: float = INSTALL_TIMEOUT_S
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True,
                          timeout=timeout, env=_env())


@pytest.fixture(scope="module")
def base_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a venv holding mainstem's wheel and its base dependencies."""
    work = tmp_path_factory.mktemp("base-install")
    source = work / "source"  # a copy: building leaves build/ and *.egg-info behind
    shutil.copytree(ROOT / "src", source / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so",
                                                  "compiled-sources.json"))
    for name in BUILD_INPUTS:
        shutil.copy(ROOT / name, source / name)
    built = _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", work / "dist",
                 source)
    assert built.returncode == 0, built.stderr
    venv = work / "venv"
    created = _run(sys.executable, "-m", "venv", venv)
    assert created.returncode == 0, created.stderr
    installed = _run(venv / "bin" / "python", "-m", "pip", "install", "-q",
                     *(work / "dist").glob("mainstem-*.whl"))
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
                           env=_env())
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
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "src", clone / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so",
                                                  "compiled-sources.json"))
    shutil.copytree(ROOT / "scripts", clone / "scripts")
    for name in BUILD_INPUTS:
        shutil.copy(ROOT / name, clone / name)
    helped = _run("bash", clone / "scripts" / "run", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "usage: mainstem serve" in helped.stdout
    for extra in ("pytest", "pyspark"):
        absent = _run(clone / ".venv" / "bin" / "python", "-c", f"import {extra}", timeout=30)
        assert absent.returncode != 0, f"scripts/run installed {extra}"
