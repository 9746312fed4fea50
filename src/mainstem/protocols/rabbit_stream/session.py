"""What the command groups of one stream connection share: the session they serve (its
user and namespace, set once the connection opens), the way out (frames onto the paced
output), the look-ups every command starts with, and the tasks to stop on close."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from mainstem.broker.auth import User
from mainstem.broker.stream_service import PartitionService
from mainstem.broker.stream_service.subscription import sendfile_socket
from mainstem.broker.streams import Stream
from mainstem.protocols.base import ConnectionContext
from mainstem.protocols.paced_output import PacedOutput
from mainstem.protocols.rabbit_stream import frames as f
from mainstem.protocols.rabbit_stream.codec import encode
from mainstem.protocols.rabbit_stream.constants import ResponseCode
from mainstem.protocols.rabbit_stream.responses import PublishError


class Session:
    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        self.log = ctx.log
        self.user: User | None = None  # both set when the state says Opened
        self.namespace = "/"
        self.stats = ctx.core.counters.stream  # message counts for /metrics
        self.transport = ctx.writer.transport
        self.output = PacedOutput(ctx.writer, sendfile_socket(self.transport))
        self.tasks: list[asyncio.Task[None]] = []
        self._last_error: int | None = None  # the last error code sent, for /metrics

    def send(self, frame: f.Frame) -> None:
        codes = error_codes(frame)
        if codes and not (isinstance(frame, f.Close) and codes[0] == self._last_error):
            # (a Close after the error response it ends the connection for: one error)
            for code in codes:
                self.core.counters.stream_errors[code] += 1
            self._last_error = codes[-1]
        self.output.write(encode(frame))

    def respond(self, key: int, correlation_id: int, code: int = ResponseCode.OK) -> None:
        self.send(f.Response(key, correlation_id, code))

    def start(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run `work` until the connection closes."""
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.append(task)
        return task

    def resolve(self, name: str, *, checking: str | None = None
                ) -> tuple[Stream, PartitionService]:
        """The stream and partition `name` stands for; `checking` the user's permission on
        it (read, write) first, before the look-up as RabbitMQ does."""
        if checking is not None:
            self.check(checking, name)
        stream, index = self.core.streams.resolve(self.namespace, name)
        return stream, stream.services[index]

    def check(self, kind: str, name: str) -> None:
        assert self.user is not None
        self.core.auth.check(self.user, self.namespace, kind, name)  # type: ignore[arg-type]


def error_codes(frame: f.Frame) -> list[int]:
    """The codes other than OK a frame the server sends carries (what RabbitMQ's
    rabbitmq_global_stream_error_* count): a response's, each publish error's, a Close's."""
    if isinstance(frame, PublishError):
        return [code for _, code in frame.errors]
    code = frame.code if isinstance(frame, f.Close) else getattr(
        frame, "response_code", ResponseCode.OK)
    return [] if code == ResponseCode.OK else [code]
