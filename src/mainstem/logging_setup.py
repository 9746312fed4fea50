"""Structured logging: JSON lines or key=value text, and per-connection context.

Call sites pass fields with `extra=` (or bind them once with ContextLog); the formatters
print every attribute a record carries beyond the standard LogRecord ones.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

_STANDARD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class ContextLog(logging.LoggerAdapter[logging.Logger]):
    """Adds fixed fields (listener, conn_id, peer, user, ...) to every record it logs.

    Fields given at the call site with `extra=` win over the bound ones.
    """

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs

    def bind(self, **fields: object) -> ContextLog:
        """A logger with more context, e.g. `ctx.log = ctx.log.bind(user=..., namespace=...)`."""
        return ContextLog(self.logger, {**(self.extra or {}), **fields})


def record_fields(record: logging.LogRecord) -> dict[str, object]:
    """The structured fields of a record: everything beyond the standard attributes."""
    return {
        key: value
        for key, value in vars(record).items()
        if key not in _STANDARD_ATTRS and not key.startswith("_")
    }


def describe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, event, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = _base_entry(record)
        entry.update(record_fields(record))
        if record.exc_info and record.exc_info[1] is not None:
            entry.setdefault("error", describe_error(record.exc_info[1]))
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """key=value pairs on one line; a traceback, if any, follows on its own lines."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = _base_entry(record)
        entry.update(record_fields(record))
        traceback = ""
        if record.exc_info and record.exc_info[1] is not None:
            entry.setdefault("error", describe_error(record.exc_info[1]))
            traceback = "\n" + self.formatException(record.exc_info)
        return " ".join(f"{key}={_text_value(value)}" for key, value in entry.items()) + traceback


def _base_entry(record: logging.LogRecord) -> dict[str, object]:
    ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
    return {
        "ts": ts.replace("+00:00", "Z"),
        "level": record.levelname.lower(),
        "logger": record.name,
        "event": record.getMessage(),
    }


def _text_value(value: object) -> str:
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, default=str, separators=(",", ":"))
    text = str(value)
    if not text or any(c in text for c in ' ="\n'):
        return json.dumps(text)
    return text


def configure_logging(level: str = "info", fmt: str = "json", stream: TextIO | None = None) -> None:
    """Send every logger's records to `stream` (default stderr) in the chosen format."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
