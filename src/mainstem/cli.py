"""The `mainstem` command: `mainstem serve [flags]` runs the broker until SIGTERM/SIGINT;
`mainstem ctl GROUP ACTION` operates a running one over its management API;
`mainstem pipeline NAME` runs a Spark job over streams; `mainstem spark-submit ARGS` runs
PySpark's spark-submit with this environment's Spark and Python.

A server that cannot start (a bad flag, environment variable or TOML key, a port in use,
a data directory locked by another server, a TLS file missing) says why in one log line,
`server.cannot_start` (JSON on stderr unless the configuration read says otherwise), as
every other event, and exits 2."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

from mainstem import __version__
from mainstem.admin.ctl import add_ctl_arguments, run_ctl
from mainstem.broker.catalog import CatalogUnreadable
from mainstem.config import ConfigError, add_config_arguments, load_config
from mainstem.logging_setup import configure_logging
from mainstem.server import Broker, DataDirLocked, ListenerBindError
from mainstem.spark.pipelines import add_pipeline_arguments
from mainstem.spark.submit import spark_submit
from mainstem.tls import TlsSetupError

# Exit codes: 0 after a clean shutdown, 2 when the server cannot start.
EXIT_OK = 0
EXIT_CANNOT_START = 2

log = logging.getLogger("mainstem.server")
CANNOT_START = "server.cannot_start"
SPARK_SUBMIT = "spark-submit"


class _Parser(argparse.ArgumentParser):
    """argparse's parser; `serve`'s (`logs_errors`) reports a bad flag as the server's other
    start-up failures are reported: one log line."""

    logs_errors = False

    def error(self, message: str) -> NoReturn:
        if not self.logs_errors:
            super().error(message)
        configure_logging()  # the defaults: no configuration was read
        log.critical(CANNOT_START, extra={"error": message, "help": f"{self.prog} --help"})
        sys.exit(EXIT_CANNOT_START)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mainstem", description="A persistent message streaming broker.")
    parser.add_argument("--version", action="version", version=f"mainstem {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="run the broker",
        description="Run the broker until SIGTERM or SIGINT. Precedence: defaults < TOML file"
        " < MAINSTEM_* environment variables < these flags.",
    )
    add_config_arguments(serve)
    serve.logs_errors = True
    serve.set_defaults(run=_serve, parser=serve)
    ctl = commands.add_parser(
        "ctl", help="operate a running broker over its management API",
        description="The everyday tasks of rabbitmqctl and rabbitmqadmin over the HTTP"
        " management API: queues, exchanges, bindings, connections, channels, consumers,"
        " users, permissions, vhosts, definitions, and mainstem's streams and consumer lag."
        " `mainstem ctl GROUP --help` lists a group's actions.",
    )
    add_ctl_arguments(ctl)
    ctl.set_defaults(run=run_ctl)
    pipeline = commands.add_parser(
        "pipeline", help="run a Spark pipeline over streams (needs mainstem[spark])",
        description="Spark jobs: archive streams to Parquet; rebuild a binder from a "
        "channel's history and hand it over to the live projection.")
    add_pipeline_arguments(pipeline)
    commands.add_parser(  # listed here; its arguments go to spark-submit untouched (main)
        SPARK_SUBMIT, help="PySpark's spark-submit with this environment's Spark and Python "
        "(needs mainstem[spark])", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    if given[:1] == [SPARK_SUBMIT]:  # spark-submit's own options are not ours to parse
        return spark_submit(given[1:])
    parser = build_parser()
    args, unknown = parser.parse_known_args(given)
    if unknown:  # as parse_args says it, by the command's parser when it has its own say
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_CANNOT_START
    run: Callable[[argparse.Namespace], int] = args.run  # set by the command's parser
    return run(args)


def _serve(args: argparse.Namespace) -> int:
    try:
        config = load_config(args)
    except ConfigError as exc:
        configure_logging()  # the defaults: the configuration is what failed
        return _cannot_start(exc)
    configure_logging(config.log.level, config.log.format)
    try:
        _run(Broker(config=config).serve_forever())
    except (DataDirLocked, ListenerBindError, TlsSetupError) as exc:
        return _cannot_start(exc)
    except CatalogUnreadable as exc:
        # One line in the configured log format, naming the file; no traceback.
        log.critical("catalog.unreadable", extra={"path": str(exc.path), "error": exc.reason})
        return EXIT_CANNOT_START
    return EXIT_OK


def _cannot_start(error: Exception) -> int:
    log.critical(CANNOT_START, extra={"error": str(error), **_named_by(error)})
    return EXIT_CANNOT_START


def _named_by(error: Exception) -> dict[str, object]:
    """What the error names, as fields of its own."""
    if isinstance(error, DataDirLocked):
        return {"path": str(error.data_dir), "holder_pid": error.pid}
    if isinstance(error, ListenerBindError):
        return {"listener": error.listener, "host": error.host, "port": error.port}
    if isinstance(error, TlsSetupError) and error.path is not None:
        return {"path": str(error.path)}
    return {}


def _run(main_coroutine: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop when it is installed, else on asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main_coroutine)
    else:
        uvloop.run(main_coroutine)
