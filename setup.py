"""Compiles the hot modules and ships ``mainstem-spark-python.pth`` (pyproject.toml has the rest).

The modules ``src/mainstem/compiled.py`` names are compiled with mypyc into C extensions
from the same source, beside a digest of that source (``compiled.STAMP``) by which the
package knows at import whether the extensions match the ``.py`` files. The extensions are
optional: without a C compiler, or with ``MAINSTEM_COMPILE=0``, the package installs and
runs as pure Python. ``MAINSTEM_OPT_LEVEL`` sets mypyc's C optimisation (default 3).

The ``.pth`` file sits beside the packages:
Python runs it at every start of the environment it is installed in, so Spark jobs find the
``mainstem`` data source (see ``src/mainstem_spark_python.py``). Wheels get it from
build_py; editable installs (``pip install -e``, as scripts/run and scripts/test make) do not
copy build_py's outputs, so their wheel gets the file beside setuptools' own
``__editable__.*.pth``, which sorts first and puts ``src`` on the path the line imports from.
"""

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH_NAME = "mainstem-spark-python.pth"
PTH_LINE = "import mainstem_spark_python; mainstem_spark_python.at_interpreter_start()\n"


SRC = Path(__file__).resolve().parent / "src"
# The build type-checks only to compile: without a package's type information (pip's
# isolated build has mypy, not the broker's dependencies) its names are Any, which compiles
# the same. `mypy --strict` with every dependency is scripts/test's job.
MYPYC_FLAGS = ["--ignore-missing-imports", "--no-warn-unused-ignores", "--no-warn-return-any",
               "--allow-subclassing-any", "--allow-untyped-decorators"]


def compiled_list() -> Any:
    """``src/mainstem/compiled.py``, loaded by path: the package itself may not import yet."""
    spec = importlib.util.spec_from_file_location("_mainstem_compiled",
                                                  SRC / "mainstem/compiled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compiled_extensions() -> list[Extension]:
    """The mypyc extensions of the hot modules; none when compiling is off or impossible."""
    if os.environ.get("MAINSTEM_COMPILE", "1") == "0":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("mainstem: mypyc is not installed: pure Python build", file=sys.stderr)
        return []
    compiled = compiled_list()
    paths = [str(compiled.source_path(Path("src"), module)) for module in compiled.MODULES]
    extensions: list[Extension] = mypycify(
        [*MYPYC_FLAGS, *paths], opt_level=os.environ.get("MAINSTEM_OPT_LEVEL", "3"))
    for extension in extensions:
        extension.optional = True  # a failed C build leaves the pure modules to serve
    return extensions


class BuildExtWithStamp(build_ext):
    """Builds the extensions, then records the digest of the sources they came from, where
    the package is loaded from (the build tree, or ``src`` for an editable or in-place
    build). Nothing is recorded unless every extension was built."""

    def run(self) -> None:
        if self._into_src():
            self._remove_old_extensions()
        super().run()
        if not self.extensions or not all(Path(self.get_ext_fullpath(ext.name)).exists()
                                          for ext in self.extensions):
            return
        compiled = compiled_list()
        stamp = Path("mainstem", compiled.STAMP)
        target = SRC / stamp if self._into_src() else Path(self.build_lib, stamp)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(compiled.digests(SRC), indent=1, sort_keys=True) + "\n")
        self._stamp = str(target)

    def _into_src(self) -> bool:
        return bool(self.inplace or getattr(self, "editable_mode", False))

    @staticmethod
    def _remove_old_extensions() -> None:
        """A module taken off the list would otherwise load its old extension from src."""
        for old in [*SRC.glob("*__mypyc*"), *SRC.glob("mainstem/**/*.so")]:
            old.unlink()

    def get_outputs(self) -> list[str]:
        stamp = getattr(self, "_stamp", None)
        return [*super().get_outputs(), *([stamp] if stamp else [])]


class BuildWithPth(build_py):
    def run(self) -> None:
        super().run()
        Path(self.build_lib, PTH_NAME).write_text(PTH_LINE)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib, PTH_NAME))]


class _WithPth:
    """Wraps setuptools' editable strategy (a static .pth, a finder or a link tree: all
    write the wheel in ``__call__``) so the editable wheel also holds the .pth."""

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy

    def __call__(self, wheel: Any, files: Any, mapping: Any) -> object:
        result = self.strategy(wheel, files, mapping)
        wheel.writestr(PTH_NAME, PTH_LINE)
        return result

    def __enter__(self) -> "_WithPth":
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> object:
        return self.strategy.__exit__(*exc_info)


class EditableWithPth(editable_wheel):
    def _select_strategy(self, *args: Any, **kwargs: Any) -> Any:
        return _WithPth(super()._select_strategy(*args, **kwargs))


if __name__ == "__main__":  # as setuptools runs it; tests import the names above
    setup(cmdclass={"build_py": BuildWithPth, "build_ext": BuildExtWithStamp,
                    "editable_wheel": EditableWithPth},
          ext_modules=compiled_extensions())
