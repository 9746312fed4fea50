"""Ships ``mainstem-spark-python.pth`` beside the packages (pyproject.toml has the rest):
Python runs it at every start of the environment it is installed in, pointing Spark's Python
workers at that interpreter (see ``src/mainstem_spark_python.py``)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH_NAME = "mainstem-spark-python.pth"
PTH_LINE = "import mainstem_spark_python; mainstem_spark_python.point_workers_here()\n"


class BuildWithPth(build_py):
    def run(self) -> None:
        super().run()
        Path(self.build_lib, PTH_NAME).write_text(PTH_LINE)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib, PTH_NAME))]


if __name__ == "__main__":  # as setuptools runs it; tests import the names above
    setup(cmdclass={"build_py": BuildWithPth})
