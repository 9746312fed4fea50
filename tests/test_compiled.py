"""The compiled hot modules (src/mainstem/compiled.py): every one of them runs compiled or
every one from its source, never a mix, and the package says which and why."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from mainstem import compiled

SRC = Path(compiled.__file__).resolve().parents[1]
PROBE = """
import importlib, json, mainstem.compiled as c
files = [importlib.import_module(m).__file__ for m in c.MODULES]
print(json.dumps({"compiled": c.COMPILED, "stale": c.STALE, "reason": c.REASON,
                  "files": files}))
"""


def probe(root: Path, **env: str) -> dict:
    """What a fresh interpreter with `root` first on its path loads."""
    clean = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env={**clean, "PYTHONPATH": str(root), **env}, timeout=60,
                          check=True)
    return json.loads(done.stdout)


def is_extension(path: str) -> bool:
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def test_every_compiled_module_is_loaded_the_same_way() -> None:
    files = [importlib.import_module(module).__file__ or "" for module in compiled.MODULES]
    assert [is_extension(path) for path in files] == [compiled.COMPILED] * len(files)
    # scripts/test builds the compiled modules and says so: there they must be in use
    assert compiled.COMPILED or os.environ.get("MAINSTEM_EXPECT_COMPILED") != "1", \
        compiled.REASON


def test_mainstem_pure_loads_every_compiled_module_from_its_source() -> None:
    loaded = probe(SRC, MAINSTEM_PURE="1")
    assert loaded["compiled"] is False and loaded["reason"] == "MAINSTEM_PURE is set"
    assert all(path.endswith(".py") for path in loaded["files"])


def copy_of_the_package(tmp_path: Path) -> Path:
    """src (the package, its extensions and their digest) copied as it is."""
    root = tmp_path / "src"
    shutil.copytree(SRC / "mainstem", root / "mainstem",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for shared in SRC.glob("*__mypyc*"):
        shutil.copy(shared, root / shared.name)
    return root


def test_an_edited_source_runs_every_compiled_module_from_source(tmp_path: Path) -> None:
    root = copy_of_the_package(tmp_path)
    original, as_built = probe(SRC), probe(root)
    assert as_built["compiled"] is original["compiled"]  # the copy loads as the original
    edited = compiled.source_path(root, compiled.MODULES[-1])
    edited.write_text(edited.read_text() + "\n# edited after the build\n")
    loaded = probe(root)
    assert loaded["compiled"] is False
    assert all(path.endswith(".py") for path in loaded["files"])
    if original["compiled"]:  # a compiled build, now stale: it says which module changed
        assert loaded["stale"] is True and compiled.MODULES[-1] in loaded["reason"]
    else:
        assert loaded["reason"] == original["reason"]

