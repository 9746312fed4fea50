"""Make ``format("mainstem")`` resolvable however a Spark job is started.

The installed ``mainstem-spark-python.pth`` (see setup.py; editable installs get it too)
calls :func:`at_interpreter_start` at every start of the environment's interpreter. Two
things, because PySpark has two places that run Python for a data source:

* The JVM finds ``pyspark_*`` modules (``pyspark_mainstem``) once per JVM, in a Python it
  starts with the JVM's own ``PYSPARK_PYTHON`` (else ``PYSPARK_DRIVER_PYTHON``, else
  ``python3`` from PATH); it ignores ``spark.pyspark.python``. A job run as
  ``.venv/bin/python job.py`` starts the JVM with the driver's environment, so
  :func:`point_workers_here` setting ``PYSPARK_PYTHON`` (when unset) to this interpreter
  fixes that lookup and the workers. Under ``spark-submit`` the JVM starts first, with the
  shell's environment, and the lookup runs PATH's ``python3``, which lacks mainstem.
* So every SparkSession this interpreter builds also registers the source from the
  driver (``spark.dataSource.register``): the registration carries the driver's worker
  Python (``spark.pyspark.python``, which spark-submit passes to the driver as
  ``PYSPARK_PYTHON``), so planning and tasks run there, a packed venv given with
  ``--archives`` included. :func:`register_on_session_start` hooks
  ``SparkSession.Builder.getOrCreate`` when ``pyspark.sql.session`` is first imported.
  It asks the JVM first whether PySpark's lookup found the source (registering over it
  logs a warning), which runs that lookup when the session starts rather than at the
  first format Spark does not know: 0-1.2 s once per JVM, measured on a loaded 2-core
  machine. A failure warns and leaves the session as it was.

A top-level module importing only what ``site`` already loaded, so an interpreter start
pays one entry on ``sys.meta_path``; a plain install without pyspark never goes further.
"""

import os
import sys

SESSION_MODULE = "pyspark.sql.session"


def at_interpreter_start() -> None:
    """What the .pth runs."""
    point_workers_here()
    register_on_session_start()


def point_workers_here() -> None:
    if sys.executable:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def register_on_session_start() -> None:
    module = sys.modules.get(SESSION_MODULE)
    if module is not None:
        _hook_builder(module)
    elif not any(isinstance(finder, _SessionModuleHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SessionModuleHook())


class _SessionModuleHook:
    """A meta path finder that only waits for ``pyspark.sql.session``: it lets the other
    finders find it, and hooks the builder once the module has run."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name != SESSION_MODULE:
            return None
        sys.meta_path.remove(self)  # once; and keeps find_spec below from finding us
        from importlib.util import find_spec

        spec = find_spec(name)
        loader = getattr(spec, "loader", None)
        run_module = getattr(loader, "exec_module", None)
        if run_module is None:
            return spec

        def exec_module(module: object) -> None:
            run_module(module)
            _hook_builder(module)

        loader.exec_module = exec_module  # type: ignore[union-attr]
        return spec


def _hook_builder(module: object) -> None:
    builder = getattr(getattr(module, "SparkSession", None), "Builder", None)
    get_or_create = getattr(builder, "getOrCreate", None)
    if get_or_create is None or getattr(get_or_create, "mainstem_registers", False):
        return

    def getOrCreate(self: object) -> object:
        session = get_or_create(self)
        try:
            register(session)
        except Exception as error:  # a session that would work without mainstem still does
            import warnings

            warnings.warn(f"mainstem: the data source was not registered: {error}",
                          RuntimeWarning, stacklevel=2)
        return session

    getOrCreate.__doc__ = get_or_create.__doc__
    getOrCreate.mainstem_registers = True  # type: ignore[attr-defined]
    builder.getOrCreate = getOrCreate  # type: ignore[union-attr]


def register(session: object) -> None:
    """Register the ``mainstem`` source on a session once (getOrCreate returns the same
    session again and again); nothing when mainstem's spark modules cannot import (the
    spark extra missing) or the session is not a classic one (Spark Connect)."""
    if getattr(session, "_mainstem_registered", False) or not hasattr(session, "_jsparkSession"):
        return
    try:
        from mainstem.spark.source import MainstemDataSource
    except ImportError:
        return
    try:  # found by PySpark's own lookup (the right Python ran it): registering would fail
        jvm = session._jsparkSession  # type: ignore[attr-defined]
        known = jvm.sessionState().dataSourceManager().dataSourceExists(MainstemDataSource.name())
    except Exception:  # that lookup could not run (no python3 on the JVM's PATH)
        known = False
    if not known:
        session.dataSource.register(MainstemDataSource)  # type: ignore[attr-defined]
    session._mainstem_registered = True  # type: ignore[attr-defined]
