"""Ships ``mainstem-spark-python.pth`` beside the packages (pyproject.toml has the rest):
Python runs it at every start of the environment it is installed in, so Spark jobs find the
``mainstem`` data source (see ``src/mainstem_spark_python.py``). Wheels get it from
build_py; editable installs (``pip install -e``, as scripts/run and scripts/test make) do not
copy build_py's outputs, so their wheel gets the file beside setuptools' own
``__editable__.*.pth``, which sorts first and puts ``src`` on the path the line imports from.
"""

from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH_NAME = "mainstem-spark-python.pth"
PTH_LINE = "import mainstem_spark_python; mainstem_spark_python.at_interpreter_start()\n"


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
    setup(cmdclass={"build_py": BuildWithPth, "editable_wheel": EditableWithPth})
