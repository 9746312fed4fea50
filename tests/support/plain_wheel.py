"""mainstem's wheel as a plain `pip install` gets it, built once per test process from a
copy of this checkout (building leaves build/ and *.egg-info behind) and without compiling
(minutes of mypyc: what these tests check is the same either way; the suite itself runs on
the compiled build)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md")
BUILD_TIMEOUT_S = 300


def plain_env() -> dict[str, str]:
    """No MAINSTEM_* settings and no PYTHONPATH: a venv runs only what it installed; and
    MAINSTEM_COMPILE=0 for whatever it builds."""
    return {**{key: value for key, value in os.environ.items()
               if not key.startswith("MAINSTEM_") and key not in ("PYTHONPATH", "VIRTUAL_ENV")},
            "MAINSTEM_COMPILE": "0"}


def copy_checkout(to: Path, *folders: str) -> Path:
    """The sources (no compiled extensions, caches or their digests), the build inputs and
    `folders`, copied to `to`."""
    shutil.copytree(ROOT / "src", to / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so",
                                                  "compiled-sources.json"))
    for folder in folders:
        shutil.copytree(ROOT / folder, to / folder)
    for name in BUILD_INPUTS:
        shutil.copy(ROOT / name, to / name)
    return to


def build_plain_wheel(work: Path) -> Path:
    source = copy_checkout(work / "source")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                            str(work / "dist"), str(source)], capture_output=True, text=True,
                           timeout=BUILD_TIMEOUT_S, env=plain_env())
    assert built.returncode == 0, built.stderr
    return next((work / "dist").glob("mainstem-*.whl"))
