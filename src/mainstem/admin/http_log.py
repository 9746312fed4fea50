"""The admin listener's HTTP server log: a request aiohttp cannot parse, or whose body the
client cut short, is one warning line.

aiohttp logs such a request at error level with a traceback, and for one it cannot parse
its message quotes the offending raw line, which can be an ``Authorization: Basic ...``
header. Any client can send them, so they are a warning naming the cause
(`http.malformed`, `http.cut_short`), the error's kind and the peer, never the request's
bytes, and at most `max_lines` per cause and `interval_s`; the lines left out are counted
in the next one of that cause. Everything else aiohttp logs passes unchanged.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

MAX_LINES = 10
INTERVAL_S = 60.0


class _Lines:
    """The lines of one cause: at most `max_lines` per `interval_s`, the rest counted."""

    def __init__(self, max_lines: int, interval_s: float) -> None:
        self._max_lines = max_lines
        self._interval_s = interval_s
        self._window_start = -interval_s
        self._lines = 0  # logged in the current window
        self.left_out = 0

    def take(self) -> bool:
        now = time.monotonic()
        if now - self._window_start >= self._interval_s:
            self._window_start, self._lines = now, 0
        if self._lines >= self._max_lines:
            self.left_out += 1
            return False
        self._lines += 1
        return True


class HttpServerLog(logging.LoggerAdapter[logging.Logger]):
    """The `logger` of one aiohttp server."""

    def __init__(self, logger: logging.Logger, max_lines: int = MAX_LINES,
                 interval_s: float = INTERVAL_S) -> None:
        super().__init__(logger, {})
        self._causes = {cause: _Lines(max_lines, interval_s)
                        for cause in ("http.malformed", "http.cut_short")}

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        error = _exception(kwargs.get("exc_info"))
        fields: dict[str, Any]
        if isinstance(error, HttpProcessingError):
            cause, fields = "http.malformed", {"status": error.code}
        elif isinstance(error, ConnectionError):  # aiohttp's "Connection lost" mid-body
            cause, fields = "http.cut_short", {}
        else:
            super().log(level, msg, *args, **kwargs)
            return
        level = min(level, logging.WARNING)
        lines = self._causes[cause]
        if not self.isEnabledFor(level) or not lines.take():
            return
        # aiohttp's message is "Error handling request from %s" with the peer
        fields |= {"peer": args[0] if args else None, "error": type(error).__name__}
        if lines.left_out:
            fields["left_out"], lines.left_out = lines.left_out, 0
        self.logger.log(level, cause, extra=fields)


def _exception(exc_info: object) -> BaseException | None:
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple):
        value: BaseException | None = exc_info[1]  # (type, value, traceback)
        return value
    return sys.exc_info()[1] if exc_info else None
