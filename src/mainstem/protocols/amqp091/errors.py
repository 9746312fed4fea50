"""The protocol's exceptions: the codec's (connection.close) and a channel's (channel.close)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mainstem.protocols.amqp091.methods import ChannelClose, ConnectionClose, ReplyCode

if TYPE_CHECKING:
    from mainstem.protocols.amqp091.wire import Method


class AmqpCodecError(Exception):
    """A protocol violation; the connection answers with Connection.Close and closes.

    ``class_id``/``method_id`` (or ``method``) name the offending method when it is known
    (0 otherwise), as Connection.Close wants.
    """

    def __init__(self, reply_code: ReplyCode, reply_text: str, *, class_id: int = 0,
                 method_id: int = 0, method: Method | None = None) -> None:
        super().__init__(f"{reply_code.name} - {reply_text}")
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = method.CLASS_ID if method else class_id
        self.method_id = method.METHOD_ID if method else method_id

    def close_method(self) -> ConnectionClose:
        # RabbitMQ's reply texts look like "FRAME_ERROR - ..."; a shortstr holds 255 bytes.
        text = str(self).encode("utf-8", "replace")[:255].decode("utf-8", "ignore")
        return ConnectionClose(self.reply_code, text, self.class_id, self.method_id)


class ProtocolHeaderMismatch(AmqpCodecError):
    """The peer did not open with AMQP 0-9-1's header: send ``PROTOCOL_HEADER`` and close,
    without Connection.Close (the spec's answer to an unsupported protocol)."""

    def __init__(self, received: bytes) -> None:
        super().__init__(ReplyCode.FRAME_ERROR, f"bad protocol header {received!r}")
        self.received = received


class ChannelError(Exception):
    """A channel exception: the connection answers with channel.close, the connection
    stays."""

    def __init__(self, code: ReplyCode, text: str, method: Method | None = None) -> None:
        super().__init__(f"{code.name} - {text}")
        self.code = code
        self.method = method

    def close_method(self) -> ChannelClose:
        text = str(self).encode("utf-8", "replace")[:255].decode("utf-8", "ignore")
        method = self.method
        return ChannelClose(self.code, text, method.CLASS_ID if method else 0,
                            method.METHOD_ID if method else 0)
