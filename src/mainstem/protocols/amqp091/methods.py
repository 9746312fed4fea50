"""AMQP 0-9-1 constants, methods and content properties.

GENERATED from amqp0-9-1.xml by ``python -m mainstem.protocols.amqp091.generate``;
do not edit by hand.
"""

# fmt: off

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from struct import Struct
from typing import Any, ClassVar

from mainstem.protocols.amqp091.wire import (
    U16,
    MalformedData,
    Method,
    expect_end,
    read_longstr,
    read_shortstr,
    read_table,
    write_longstr,
    write_shortstr,
    write_table,
)

VERSION = (0, 9, 1)
FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_MIN_SIZE = 4096
FRAME_END = 206


class ReplyCode(enum.IntEnum):
    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541


HARD_ERRORS = frozenset({
    ReplyCode.CONNECTION_FORCED,
    ReplyCode.INVALID_PATH,
    ReplyCode.FRAME_ERROR,
    ReplyCode.SYNTAX_ERROR,
    ReplyCode.COMMAND_INVALID,
    ReplyCode.CHANNEL_ERROR,
    ReplyCode.UNEXPECTED_FRAME,
    ReplyCode.RESOURCE_ERROR,
    ReplyCode.NOT_ALLOWED,
    ReplyCode.NOT_IMPLEMENTED,
    ReplyCode.INTERNAL_ERROR,
})

_S_B = Struct(">B")
_S_BB = Struct(">BB")
_S_H = Struct(">H")
_S_HH = Struct(">HH")
_S_HIH = Struct(">HIH")
_S_I = Struct(">I")
_S_IHB = Struct(">IHB")
_S_II = Struct(">II")
_S_Q = Struct(">Q")
_S_QB = Struct(">QB")


class _ConnectionStartConstants(Method):
    __slots__ = ()
    NAME = "connection.start"
    CLASS_ID = 10
    METHOD_ID = 10
    INDEX = 655370
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("version_major", "octet"),
        ("version_minor", "octet"),
        ("server_properties", "table"),
        ("mechanisms", "longstr"),
        ("locales", "longstr"),
    )


@dataclass(slots=True)
class ConnectionStart(_ConnectionStartConstants):
    """connection.start (10, 10)"""

    version_major: int = 0
    version_minor: int = 0
    server_properties: dict[str, Any] = field(default_factory=dict)
    mechanisms: bytes = b""
    locales: bytes = b""

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionStart:
        offset = 0
        version_major, version_minor, = _S_BB.unpack_from(buf, offset)
        offset += _S_BB.size
        server_properties, offset = read_table(buf, offset)
        mechanisms, offset = read_longstr(buf, offset)
        locales, offset = read_longstr(buf, offset)
        expect_end(buf, offset)
        return cls(version_major, version_minor, server_properties, mechanisms, locales)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x0a"
        out += _S_BB.pack(self.version_major, self.version_minor)
        write_table(out, self.server_properties)
        write_longstr(out, self.mechanisms)
        write_longstr(out, self.locales)


class _ConnectionStartOkConstants(Method):
    __slots__ = ()
    NAME = "connection.start-ok"
    CLASS_ID = 10
    METHOD_ID = 11
    INDEX = 655371
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("client_properties", "table"),
        ("mechanism", "shortstr"),
        ("response", "longstr"),
        ("locale", "shortstr"),
    )


@dataclass(slots=True)
class ConnectionStartOk(_ConnectionStartOkConstants):
    """connection.start-ok (10, 11)"""

    client_properties: dict[str, Any] = field(default_factory=dict)
    mechanism: str = ""
    response: bytes = b""
    locale: str = ""

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionStartOk:
        offset = 0
        client_properties, offset = read_table(buf, offset)
        mechanism, offset = read_shortstr(buf, offset)
        response, offset = read_longstr(buf, offset)
        locale, offset = read_shortstr(buf, offset)
        expect_end(buf, offset)
        return cls(client_properties, mechanism, response, locale)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x0b"
        write_table(out, self.client_properties)
        write_shortstr(out, self.mechanism)
        write_longstr(out, self.response)
        write_shortstr(out, self.locale)


class _ConnectionSecureConstants(Method):
    __slots__ = ()
    NAME = "connection.secure"
    CLASS_ID = 10
    METHOD_ID = 20
    INDEX = 655380
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("challenge", "longstr"),)


@dataclass(slots=True)
class ConnectionSecure(_ConnectionSecureConstants):
    """connection.secure (10, 20)"""

    challenge: bytes = b""

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionSecure:
        offset = 0
        challenge, offset = read_longstr(buf, offset)
        expect_end(buf, offset)
        return cls(challenge)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x14"
        write_longstr(out, self.challenge)


class _ConnectionSecureOkConstants(Method):
    __slots__ = ()
    NAME = "connection.secure-ok"
    CLASS_ID = 10
    METHOD_ID = 21
    INDEX = 655381
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("response", "longstr"),)


@dataclass(slots=True)
class ConnectionSecureOk(_ConnectionSecureOkConstants):
    """connection.secure-ok (10, 21)"""

    response: bytes = b""

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionSecureOk:
        offset = 0
        response, offset = read_longstr(buf, offset)
        expect_end(buf, offset)
        return cls(response)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x15"
        write_longstr(out, self.response)


class _ConnectionTuneConstants(Method):
    __slots__ = ()
    NAME = "connection.tune"
    CLASS_ID = 10
    METHOD_ID = 30
    INDEX = 655390
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("channel_max", "short"), ("frame_max", "long"), ("heartbeat", "short"))


@dataclass(slots=True)
class ConnectionTune(_ConnectionTuneConstants):
    """connection.tune (10, 30)"""

    channel_max: int = 0
    frame_max: int = 0
    heartbeat: int = 0

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionTune:
        channel_max, frame_max, heartbeat, = _S_HIH.unpack(buf)
        return cls(channel_max, frame_max, heartbeat)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x1e"
        out += _S_HIH.pack(self.channel_max, self.frame_max, self.heartbeat)


class _ConnectionTuneOkConstants(Method):
    __slots__ = ()
    NAME = "connection.tune-ok"
    CLASS_ID = 10
    METHOD_ID = 31
    INDEX = 655391
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("channel_max", "short"), ("frame_max", "long"), ("heartbeat", "short"))


@dataclass(slots=True)
class ConnectionTuneOk(_ConnectionTuneOkConstants):
    """connection.tune-ok (10, 31)"""

    channel_max: int = 0
    frame_max: int = 0
    heartbeat: int = 0

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionTuneOk:
        channel_max, frame_max, heartbeat, = _S_HIH.unpack(buf)
        return cls(channel_max, frame_max, heartbeat)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x1f"
        out += _S_HIH.pack(self.channel_max, self.frame_max, self.heartbeat)


class _ConnectionOpenConstants(Method):
    __slots__ = ()
    NAME = "connection.open"
    CLASS_ID = 10
    METHOD_ID = 40
    INDEX = 655400
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("virtual_host", "shortstr"), ("reserved_1", "shortstr"), ("reserved_2", "bit"))


@dataclass(slots=True)
class ConnectionOpen(_ConnectionOpenConstants):
    """connection.open (10, 40)"""

    virtual_host: str = ""
    reserved_1: str = ""
    reserved_2: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionOpen:
        offset = 0
        virtual_host, offset = read_shortstr(buf, offset)
        reserved_1, offset = read_shortstr(buf, offset)
        bits_2_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        expect_end(buf, offset)
        return cls(virtual_host, reserved_1, bool(bits_2_0 & 1))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x28"
        write_shortstr(out, self.virtual_host)
        write_shortstr(out, self.reserved_1)
        out += _S_B.pack(bool(self.reserved_2))


class _ConnectionOpenOkConstants(Method):
    __slots__ = ()
    NAME = "connection.open-ok"
    CLASS_ID = 10
    METHOD_ID = 41
    INDEX = 655401
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("reserved_1", "shortstr"),)


@dataclass(slots=True)
class ConnectionOpenOk(_ConnectionOpenOkConstants):
    """connection.open-ok (10, 41)"""

    reserved_1: str = ""

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionOpenOk:
        offset = 0
        reserved_1, offset = read_shortstr(buf, offset)
        expect_end(buf, offset)
        return cls(reserved_1)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x29"
        write_shortstr(out, self.reserved_1)


class _ConnectionCloseConstants(Method):
    __slots__ = ()
    NAME = "connection.close"
    CLASS_ID = 10
    METHOD_ID = 50
    INDEX = 655410
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("reply_code", "short"),
        ("reply_text", "shortstr"),
        ("class_id", "short"),
        ("method_id", "short"),
    )


@dataclass(slots=True)
class ConnectionClose(_ConnectionCloseConstants):
    """connection.close (10, 50)"""

    reply_code: int = 0
    reply_text: str = ""
    class_id: int = 0
    method_id: int = 0

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionClose:
        offset = 0
        reply_code, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        reply_text, offset = read_shortstr(buf, offset)
        class_id, method_id, = _S_HH.unpack_from(buf, offset)
        offset += _S_HH.size
        expect_end(buf, offset)
        return cls(reply_code, reply_text, class_id, method_id)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x32"
        out += _S_H.pack(self.reply_code)
        write_shortstr(out, self.reply_text)
        out += _S_HH.pack(self.class_id, self.method_id)


class _ConnectionCloseOkConstants(Method):
    __slots__ = ()
    NAME = "connection.close-ok"
    CLASS_ID = 10
    METHOD_ID = 51
    INDEX = 655411
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class ConnectionCloseOk(_ConnectionCloseOkConstants):
    """connection.close-ok (10, 51)"""

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionCloseOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x33"


class _ConnectionBlockedConstants(Method):
    __slots__ = ()
    NAME = "connection.blocked"
    CLASS_ID = 10
    METHOD_ID = 60
    INDEX = 655420
    SYNCHRONOUS = False
    HAS_CONTENT = False
    FIELDS = (("reason", "shortstr"),)


@dataclass(slots=True)
class ConnectionBlocked(_ConnectionBlockedConstants):
    """connection.blocked (10, 60)"""

    reason: str = ""

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionBlocked:
        offset = 0
        reason, offset = read_shortstr(buf, offset)
        expect_end(buf, offset)
        return cls(reason)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x3c"
        write_shortstr(out, self.reason)


class _ConnectionUnblockedConstants(Method):
    __slots__ = ()
    NAME = "connection.unblocked"
    CLASS_ID = 10
    METHOD_ID = 61
    INDEX = 655421
    SYNCHRONOUS = False
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class ConnectionUnblocked(_ConnectionUnblockedConstants):
    """connection.unblocked (10, 61)"""

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionUnblocked:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x3d"


class _ConnectionUpdateSecretConstants(Method):
    __slots__ = ()
    NAME = "connection.update-secret"
    CLASS_ID = 10
    METHOD_ID = 70
    INDEX = 655430
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("new_secret", "longstr"), ("reason", "shortstr"))


@dataclass(slots=True)
class ConnectionUpdateSecret(_ConnectionUpdateSecretConstants):
    """connection.update-secret (10, 70)"""

    new_secret: bytes = b""
    reason: str = ""

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionUpdateSecret:
        offset = 0
        new_secret, offset = read_longstr(buf, offset)
        reason, offset = read_shortstr(buf, offset)
        expect_end(buf, offset)
        return cls(new_secret, reason)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x46"
        write_longstr(out, self.new_secret)
        write_shortstr(out, self.reason)


class _ConnectionUpdateSecretOkConstants(Method):
    __slots__ = ()
    NAME = "connection.update-secret-ok"
    CLASS_ID = 10
    METHOD_ID = 71
    INDEX = 655431
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class ConnectionUpdateSecretOk(_ConnectionUpdateSecretOkConstants):
    """connection.update-secret-ok (10, 71)"""

    @classmethod
    def decode(cls, buf: memoryview) -> ConnectionUpdateSecretOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x0a\x00\x47"


class _ChannelOpenConstants(Method):
    __slots__ = ()
    NAME = "channel.open"
    CLASS_ID = 20
    METHOD_ID = 10
    INDEX = 1310730
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("reserved_1", "shortstr"),)


@dataclass(slots=True)
class ChannelOpen(_ChannelOpenConstants):
    """channel.open (20, 10)"""

    reserved_1: str = ""

    @classmethod
    def decode(cls, buf: memoryview) -> ChannelOpen:
        offset = 0
        reserved_1, offset = read_shortstr(buf, offset)
        expect_end(buf, offset)
        return cls(reserved_1)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x14\x00\x0a"
        write_shortstr(out, self.reserved_1)


class _ChannelOpenOkConstants(Method):
    __slots__ = ()
    NAME = "channel.open-ok"
    CLASS_ID = 20
    METHOD_ID = 11
    INDEX = 1310731
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("reserved_1", "longstr"),)


@dataclass(slots=True)
class ChannelOpenOk(_ChannelOpenOkConstants):
    """channel.open-ok (20, 11)"""

    reserved_1: bytes = b""

    @classmethod
    def decode(cls, buf: memoryview) -> ChannelOpenOk:
        offset = 0
        reserved_1, offset = read_longstr(buf, offset)
        expect_end(buf, offset)
        return cls(reserved_1)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x14\x00\x0b"
        write_longstr(out, self.reserved_1)


class _ChannelFlowConstants(Method):
    __slots__ = ()
    NAME = "channel.flow"
    CLASS_ID = 20
    METHOD_ID = 20
    INDEX = 1310740
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("active", "bit"),)


@dataclass(slots=True)
class ChannelFlow(_ChannelFlowConstants):
    """channel.flow (20, 20)"""

    active: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> ChannelFlow:
        bits_0_0, = _S_B.unpack(buf)
        return cls(bool(bits_0_0 & 1))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x14\x00\x14"
        out += _S_B.pack(bool(self.active))


class _ChannelFlowOkConstants(Method):
    __slots__ = ()
    NAME = "channel.flow-ok"
    CLASS_ID = 20
    METHOD_ID = 21
    INDEX = 1310741
    SYNCHRONOUS = False
    HAS_CONTENT = False
    FIELDS = (("active", "bit"),)


@dataclass(slots=True)
class ChannelFlowOk(_ChannelFlowOkConstants):
    """channel.flow-ok (20, 21)"""

    active: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> ChannelFlowOk:
        bits_0_0, = _S_B.unpack(buf)
        return cls(bool(bits_0_0 & 1))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x14\x00\x15"
        out += _S_B.pack(bool(self.active))


class _ChannelCloseConstants(Method):
    __slots__ = ()
    NAME = "channel.close"
    CLASS_ID = 20
    METHOD_ID = 40
    INDEX = 1310760
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("reply_code", "short"),
        ("reply_text", "shortstr"),
        ("class_id", "short"),
        ("method_id", "short"),
    )


@dataclass(slots=True)
class ChannelClose(_ChannelCloseConstants):
    """channel.close (20, 40)"""

    reply_code: int = 0
    reply_text: str = ""
    class_id: int = 0
    method_id: int = 0

    @classmethod
    def decode(cls, buf: memoryview) -> ChannelClose:
        offset = 0
        reply_code, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        reply_text, offset = read_shortstr(buf, offset)
        class_id, method_id, = _S_HH.unpack_from(buf, offset)
        offset += _S_HH.size
        expect_end(buf, offset)
        return cls(reply_code, reply_text, class_id, method_id)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x14\x00\x28"
        out += _S_H.pack(self.reply_code)
        write_shortstr(out, self.reply_text)
        out += _S_HH.pack(self.class_id, self.method_id)


class _ChannelCloseOkConstants(Method):
    __slots__ = ()
    NAME = "channel.close-ok"
    CLASS_ID = 20
    METHOD_ID = 41
    INDEX = 1310761
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class ChannelCloseOk(_ChannelCloseOkConstants):
    """channel.close-ok (20, 41)"""

    @classmethod
    def decode(cls, buf: memoryview) -> ChannelCloseOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x14\x00\x29"


class _ExchangeDeclareConstants(Method):
    __slots__ = ()
    NAME = "exchange.declare"
    CLASS_ID = 40
    METHOD_ID = 10
    INDEX = 2621450
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("reserved_1", "short"),
        ("exchange", "shortstr"),
        ("type", "shortstr"),
        ("passive", "bit"),
        ("durable", "bit"),
        ("auto_delete", "bit"),
        ("internal", "bit"),
        ("no_wait", "bit"),
        ("arguments", "table"),
    )


@dataclass(slots=True)
class ExchangeDeclare(_ExchangeDeclareConstants):
    """exchange.declare (40, 10)"""

    reserved_1: int = 0
    exchange: str = ""
    type: str = ""
    passive: bool = False
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    no_wait: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode(cls, buf: memoryview) -> ExchangeDeclare:
        offset = 0
        reserved_1, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        exchange, offset = read_shortstr(buf, offset)
        type, offset = read_shortstr(buf, offset)
        bits_3_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        arguments, offset = read_table(buf, offset)
        expect_end(buf, offset)
        return cls(
            reserved_1,
            exchange,
            type,
            bool(bits_3_0 & 1),
            bool(bits_3_0 & 2),
            bool(bits_3_0 & 4),
            bool(bits_3_0 & 8),
            bool(bits_3_0 & 16),
            arguments,
        )

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x28\x00\x0a"
        out += _S_H.pack(self.reserved_1)
        write_shortstr(out, self.exchange)
        write_shortstr(out, self.type)
        out += _S_B.pack(
            bool(self.passive)
            | bool(self.durable) << 1
            | bool(self.auto_delete) << 2
            | bool(self.internal) << 3
            | bool(self.no_wait) << 4,
        )
        write_table(out, self.arguments)


class _ExchangeDeclareOkConstants(Method):
    __slots__ = ()
    NAME = "exchange.declare-ok"
    CLASS_ID = 40
    METHOD_ID = 11
    INDEX = 2621451
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class ExchangeDeclareOk(_ExchangeDeclareOkConstants):
    """exchange.declare-ok (40, 11)"""

    @classmethod
    def decode(cls, buf: memoryview) -> ExchangeDeclareOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x28\x00\x0b"


class _ExchangeDeleteConstants(Method):
    __slots__ = ()
    NAME = "exchange.delete"
    CLASS_ID = 40
    METHOD_ID = 20
    INDEX = 2621460
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("reserved_1", "short"),
        ("exchange", "shortstr"),
        ("if_unused", "bit"),
        ("no_wait", "bit"),
    )


@dataclass(slots=True)
class ExchangeDelete(_ExchangeDeleteConstants):
    """exchange.delete (40, 20)"""

    reserved_1: int = 0
    exchange: str = ""
    if_unused: bool = False
    no_wait: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> ExchangeDelete:
        offset = 0
        reserved_1, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        exchange, offset = read_shortstr(buf, offset)
        bits_2_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        expect_end(buf, offset)
        return cls(reserved_1, exchange, bool(bits_2_0 & 1), bool(bits_2_0 & 2))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x28\x00\x14"
        out += _S_H.pack(self.reserved_1)
        write_shortstr(out, self.exchange)
        out += _S_B.pack(bool(self.if_unused) | bool(self.no_wait) << 1)


class _ExchangeDeleteOkConstants(Method):
    __slots__ = ()
    NAME = "exchange.delete-ok"
    CLASS_ID = 40
    METHOD_ID = 21
    INDEX = 2621461
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class ExchangeDeleteOk(_ExchangeDeleteOkConstants):
    """exchange.delete-ok (40, 21)"""

    @classmethod
    def decode(cls, buf: memoryview) -> ExchangeDeleteOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x28\x00\x15"


class _ExchangeBindConstants(Method):
    __slots__ = ()
    NAME = "exchange.bind"
    CLASS_ID = 40
    METHOD_ID = 30
    INDEX = 2621470
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("reserved_1", "short"),
        ("destination", "shortstr"),
        ("source", "shortstr"),
        ("routing_key", "shortstr"),
        ("no_wait", "bit"),
        ("arguments", "table"),
    )


@dataclass(slots=True)
class ExchangeBind(_ExchangeBindConstants):
    """exchange.bind (40, 30)"""

    reserved_1: int = 0
    destination: str = ""
    source: str = ""
    routing_key: str = ""
    no_wait: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode(cls, buf: memoryview) -> ExchangeBind:
        offset = 0
        reserved_1, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        destination, offset = read_shortstr(buf, offset)
        source, offset = read_shortstr(buf, offset)
        routing_key, offset = read_shortstr(buf, offset)
        bits_4_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        arguments, offset = read_table(buf, offset)
        expect_end(buf, offset)
        return cls(reserved_1, destination, source, routing_key, bool(bits_4_0 & 1), arguments)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x28\x00\x1e"
        out += _S_H.pack(self.reserved_1)
        write_shortstr(out, self.destination)
        write_shortstr(out, self.source)
        write_shortstr(out, self.routing_key)
        out += _S_B.pack(bool(self.no_wait))
        write_table(out, self.arguments)


class _ExchangeBindOkConstants(Method):
    __slots__ = ()
    NAME = "exchange.bind-ok"
    CLASS_ID = 40
    METHOD_ID = 31
    INDEX = 2621471
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class ExchangeBindOk(_ExchangeBindOkConstants):
    """exchange.bind-ok (40, 31)"""

    @classmethod
    def decode(cls, buf: memoryview) -> ExchangeBindOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x28\x00\x1f"


class _ExchangeUnbindConstants(Method):
    __slots__ = ()
    NAME = "exchange.unbind"
    CLASS_ID = 40
    METHOD_ID = 40
    INDEX = 2621480
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("reserved_1", "short"),
        ("destination", "shortstr"),
        ("source", "shortstr"),
        ("routing_key", "shortstr"),
        ("no_wait", "bit"),
        ("arguments", "table"),
    )


@dataclass(slots=True)
class ExchangeUnbind(_ExchangeUnbindConstants):
    """exchange.unbind (40, 40)"""

    reserved_1: int = 0
    destination: str = ""
    source: str = ""
    routing_key: str = ""
    no_wait: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode(cls, buf: memoryview) -> ExchangeUnbind:
        offset = 0
        reserved_1, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        destination, offset = read_shortstr(buf, offset)
        source, offset = read_shortstr(buf, offset)
        routing_key, offset = read_shortstr(buf, offset)
        bits_4_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        arguments, offset = read_table(buf, offset)
        expect_end(buf, offset)
        return cls(reserved_1, destination, source, routing_key, bool(bits_4_0 & 1), arguments)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x28\x00\x28"
        out += _S_H.pack(self.reserved_1)
        write_shortstr(out, self.destination)
        write_shortstr(out, self.source)
        write_shortstr(out, self.routing_key)
        out += _S_B.pack(bool(self.no_wait))
        write_table(out, self.arguments)


class _ExchangeUnbindOkConstants(Method):
    __slots__ = ()
    NAME = "exchange.unbind-ok"
    CLASS_ID = 40
    METHOD_ID = 51
    INDEX = 2621491
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class ExchangeUnbindOk(_ExchangeUnbindOkConstants):
    """exchange.unbind-ok (40, 51)"""

    @classmethod
    def decode(cls, buf: memoryview) -> ExchangeUnbindOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x28\x00\x33"


class _QueueDeclareConstants(Method):
    __slots__ = ()
    NAME = "queue.declare"
    CLASS_ID = 50
    METHOD_ID = 10
    INDEX = 3276810
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("reserved_1", "short"),
        ("queue", "shortstr"),
        ("passive", "bit"),
        ("durable", "bit"),
        ("exclusive", "bit"),
        ("auto_delete", "bit"),
        ("no_wait", "bit"),
        ("arguments", "table"),
    )


@dataclass(slots=True)
class QueueDeclare(_QueueDeclareConstants):
    """queue.declare (50, 10)"""

    reserved_1: int = 0
    queue: str = ""
    passive: bool = False
    durable: bool = False
    exclusive: bool = False
    auto_delete: bool = False
    no_wait: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode(cls, buf: memoryview) -> QueueDeclare:
        offset = 0
        reserved_1, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        queue, offset = read_shortstr(buf, offset)
        bits_2_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        arguments, offset = read_table(buf, offset)
        expect_end(buf, offset)
        return cls(
            reserved_1,
            queue,
            bool(bits_2_0 & 1),
            bool(bits_2_0 & 2),
            bool(bits_2_0 & 4),
            bool(bits_2_0 & 8),
            bool(bits_2_0 & 16),
            arguments,
        )

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x32\x00\x0a"
        out += _S_H.pack(self.reserved_1)
        write_shortstr(out, self.queue)
        out += _S_B.pack(
            bool(self.passive)
            | bool(self.durable) << 1
            | bool(self.exclusive) << 2
            | bool(self.auto_delete) << 3
            | bool(self.no_wait) << 4,
        )
        write_table(out, self.arguments)


class _QueueDeclareOkConstants(Method):
    __slots__ = ()
    NAME = "queue.declare-ok"
    CLASS_ID = 50
    METHOD_ID = 11
    INDEX = 3276811
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("queue", "shortstr"), ("message_count", "long"), ("consumer_count", "long"))


@dataclass(slots=True)
class QueueDeclareOk(_QueueDeclareOkConstants):
    """queue.declare-ok (50, 11)"""

    queue: str = ""
    message_count: int = 0
    consumer_count: int = 0

    @classmethod
    def decode(cls, buf: memoryview) -> QueueDeclareOk:
        offset = 0
        queue, offset = read_shortstr(buf, offset)
        message_count, consumer_count, = _S_II.unpack_from(buf, offset)
        offset += _S_II.size
        expect_end(buf, offset)
        return cls(queue, message_count, consumer_count)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x32\x00\x0b"
        write_shortstr(out, self.queue)
        out += _S_II.pack(self.message_count, self.consumer_count)


class _QueueBindConstants(Method):
    __slots__ = ()
    NAME = "queue.bind"
    CLASS_ID = 50
    METHOD_ID = 20
    INDEX = 3276820
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("reserved_1", "short"),
        ("queue", "shortstr"),
        ("exchange", "shortstr"),
        ("routing_key", "shortstr"),
        ("no_wait", "bit"),
        ("arguments", "table"),
    )


@dataclass(slots=True)
class QueueBind(_QueueBindConstants):
    """queue.bind (50, 20)"""

    reserved_1: int = 0
    queue: str = ""
    exchange: str = ""
    routing_key: str = ""
    no_wait: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode(cls, buf: memoryview) -> QueueBind:
        offset = 0
        reserved_1, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        queue, offset = read_shortstr(buf, offset)
        exchange, offset = read_shortstr(buf, offset)
        routing_key, offset = read_shortstr(buf, offset)
        bits_4_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        arguments, offset = read_table(buf, offset)
        expect_end(buf, offset)
        return cls(reserved_1, queue, exchange, routing_key, bool(bits_4_0 & 1), arguments)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x32\x00\x14"
        out += _S_H.pack(self.reserved_1)
        write_shortstr(out, self.queue)
        write_shortstr(out, self.exchange)
        write_shortstr(out, self.routing_key)
        out += _S_B.pack(bool(self.no_wait))
        write_table(out, self.arguments)


class _QueueBindOkConstants(Method):
    __slots__ = ()
    NAME = "queue.bind-ok"
    CLASS_ID = 50
    METHOD_ID = 21
    INDEX = 3276821
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class QueueBindOk(_QueueBindOkConstants):
    """queue.bind-ok (50, 21)"""

    @classmethod
    def decode(cls, buf: memoryview) -> QueueBindOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x32\x00\x15"


class _QueueUnbindConstants(Method):
    __slots__ = ()
    NAME = "queue.unbind"
    CLASS_ID = 50
    METHOD_ID = 50
    INDEX = 3276850
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("reserved_1", "short"),
        ("queue", "shortstr"),
        ("exchange", "shortstr"),
        ("routing_key", "shortstr"),
        ("arguments", "table"),
    )


@dataclass(slots=True)
class QueueUnbind(_QueueUnbindConstants):
    """queue.unbind (50, 50)"""

    reserved_1: int = 0
    queue: str = ""
    exchange: str = ""
    routing_key: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode(cls, buf: memoryview) -> QueueUnbind:
        offset = 0
        reserved_1, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        queue, offset = read_shortstr(buf, offset)
        exchange, offset = read_shortstr(buf, offset)
        routing_key, offset = read_shortstr(buf, offset)
        arguments, offset = read_table(buf, offset)
        expect_end(buf, offset)
        return cls(reserved_1, queue, exchange, routing_key, arguments)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x32\x00\x32"
        out += _S_H.pack(self.reserved_1)
        write_shortstr(out, self.queue)
        write_shortstr(out, self.exchange)
        write_shortstr(out, self.routing_key)
        write_table(out, self.arguments)


class _QueueUnbindOkConstants(Method):
    __slots__ = ()
    NAME = "queue.unbind-ok"
    CLASS_ID = 50
    METHOD_ID = 51
    INDEX = 3276851
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class QueueUnbindOk(_QueueUnbindOkConstants):
    """queue.unbind-ok (50, 51)"""

    @classmethod
    def decode(cls, buf: memoryview) -> QueueUnbindOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x32\x00\x33"


class _QueuePurgeConstants(Method):
    __slots__ = ()
    NAME = "queue.purge"
    CLASS_ID = 50
    METHOD_ID = 30
    INDEX = 3276830
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("reserved_1", "short"), ("queue", "shortstr"), ("no_wait", "bit"))


@dataclass(slots=True)
class QueuePurge(_QueuePurgeConstants):
    """queue.purge (50, 30)"""

    reserved_1: int = 0
    queue: str = ""
    no_wait: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> QueuePurge:
        offset = 0
        reserved_1, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        queue, offset = read_shortstr(buf, offset)
        bits_2_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        expect_end(buf, offset)
        return cls(reserved_1, queue, bool(bits_2_0 & 1))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x32\x00\x1e"
        out += _S_H.pack(self.reserved_1)
        write_shortstr(out, self.queue)
        out += _S_B.pack(bool(self.no_wait))


class _QueuePurgeOkConstants(Method):
    __slots__ = ()
    NAME = "queue.purge-ok"
    CLASS_ID = 50
    METHOD_ID = 31
    INDEX = 3276831
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("message_count", "long"),)


@dataclass(slots=True)
class QueuePurgeOk(_QueuePurgeOkConstants):
    """queue.purge-ok (50, 31)"""

    message_count: int = 0

    @classmethod
    def decode(cls, buf: memoryview) -> QueuePurgeOk:
        message_count, = _S_I.unpack(buf)
        return cls(message_count)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x32\x00\x1f"
        out += _S_I.pack(self.message_count)


class _QueueDeleteConstants(Method):
    __slots__ = ()
    NAME = "queue.delete"
    CLASS_ID = 50
    METHOD_ID = 40
    INDEX = 3276840
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("reserved_1", "short"),
        ("queue", "shortstr"),
        ("if_unused", "bit"),
        ("if_empty", "bit"),
        ("no_wait", "bit"),
    )


@dataclass(slots=True)
class QueueDelete(_QueueDeleteConstants):
    """queue.delete (50, 40)"""

    reserved_1: int = 0
    queue: str = ""
    if_unused: bool = False
    if_empty: bool = False
    no_wait: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> QueueDelete:
        offset = 0
        reserved_1, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        queue, offset = read_shortstr(buf, offset)
        bits_2_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        expect_end(buf, offset)
        return cls(reserved_1, queue, bool(bits_2_0 & 1), bool(bits_2_0 & 2), bool(bits_2_0 & 4))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x32\x00\x28"
        out += _S_H.pack(self.reserved_1)
        write_shortstr(out, self.queue)
        out += _S_B.pack(bool(self.if_unused) | bool(self.if_empty) << 1 | bool(self.no_wait) << 2)


class _QueueDeleteOkConstants(Method):
    __slots__ = ()
    NAME = "queue.delete-ok"
    CLASS_ID = 50
    METHOD_ID = 41
    INDEX = 3276841
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("message_count", "long"),)


@dataclass(slots=True)
class QueueDeleteOk(_QueueDeleteOkConstants):
    """queue.delete-ok (50, 41)"""

    message_count: int = 0

    @classmethod
    def decode(cls, buf: memoryview) -> QueueDeleteOk:
        message_count, = _S_I.unpack(buf)
        return cls(message_count)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x32\x00\x29"
        out += _S_I.pack(self.message_count)


class _BasicQosConstants(Method):
    __slots__ = ()
    NAME = "basic.qos"
    CLASS_ID = 60
    METHOD_ID = 10
    INDEX = 3932170
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("prefetch_size", "long"), ("prefetch_count", "short"), ("global_", "bit"))


@dataclass(slots=True)
class BasicQos(_BasicQosConstants):
    """basic.qos (60, 10)"""

    prefetch_size: int = 0
    prefetch_count: int = 0
    global_: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> BasicQos:
        prefetch_size, prefetch_count, bits_0_2, = _S_IHB.unpack(buf)
        return cls(prefetch_size, prefetch_count, bool(bits_0_2 & 1))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x0a"
        out += _S_IHB.pack(self.prefetch_size, self.prefetch_count, bool(self.global_))


class _BasicQosOkConstants(Method):
    __slots__ = ()
    NAME = "basic.qos-ok"
    CLASS_ID = 60
    METHOD_ID = 11
    INDEX = 3932171
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class BasicQosOk(_BasicQosOkConstants):
    """basic.qos-ok (60, 11)"""

    @classmethod
    def decode(cls, buf: memoryview) -> BasicQosOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x0b"


class _BasicConsumeConstants(Method):
    __slots__ = ()
    NAME = "basic.consume"
    CLASS_ID = 60
    METHOD_ID = 20
    INDEX = 3932180
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (
        ("reserved_1", "short"),
        ("queue", "shortstr"),
        ("consumer_tag", "shortstr"),
        ("no_local", "bit"),
        ("no_ack", "bit"),
        ("exclusive", "bit"),
        ("no_wait", "bit"),
        ("arguments", "table"),
    )


@dataclass(slots=True)
class BasicConsume(_BasicConsumeConstants):
    """basic.consume (60, 20)"""

    reserved_1: int = 0
    queue: str = ""
    consumer_tag: str = ""
    no_local: bool = False
    no_ack: bool = False
    exclusive: bool = False
    no_wait: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode(cls, buf: memoryview) -> BasicConsume:
        offset = 0
        reserved_1, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        queue, offset = read_shortstr(buf, offset)
        consumer_tag, offset = read_shortstr(buf, offset)
        bits_3_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        arguments, offset = read_table(buf, offset)
        expect_end(buf, offset)
        return cls(
            reserved_1,
            queue,
            consumer_tag,
            bool(bits_3_0 & 1),
            bool(bits_3_0 & 2),
            bool(bits_3_0 & 4),
            bool(bits_3_0 & 8),
            arguments,
        )

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x14"
        out += _S_H.pack(self.reserved_1)
        write_shortstr(out, self.queue)
        write_shortstr(out, self.consumer_tag)
        out += _S_B.pack(
            bool(self.no_local)
            | bool(self.no_ack) << 1
            | bool(self.exclusive) << 2
            | bool(self.no_wait) << 3,
        )
        write_table(out, self.arguments)


class _BasicConsumeOkConstants(Method):
    __slots__ = ()
    NAME = "basic.consume-ok"
    CLASS_ID = 60
    METHOD_ID = 21
    INDEX = 3932181
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("consumer_tag", "shortstr"),)


@dataclass(slots=True)
class BasicConsumeOk(_BasicConsumeOkConstants):
    """basic.consume-ok (60, 21)"""

    consumer_tag: str = ""

    @classmethod
    def decode(cls, buf: memoryview) -> BasicConsumeOk:
        offset = 0
        consumer_tag, offset = read_shortstr(buf, offset)
        expect_end(buf, offset)
        return cls(consumer_tag)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x15"
        write_shortstr(out, self.consumer_tag)


class _BasicCancelConstants(Method):
    __slots__ = ()
    NAME = "basic.cancel"
    CLASS_ID = 60
    METHOD_ID = 30
    INDEX = 3932190
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("consumer_tag", "shortstr"), ("no_wait", "bit"))


@dataclass(slots=True)
class BasicCancel(_BasicCancelConstants):
    """basic.cancel (60, 30)"""

    consumer_tag: str = ""
    no_wait: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> BasicCancel:
        offset = 0
        consumer_tag, offset = read_shortstr(buf, offset)
        bits_1_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        expect_end(buf, offset)
        return cls(consumer_tag, bool(bits_1_0 & 1))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x1e"
        write_shortstr(out, self.consumer_tag)
        out += _S_B.pack(bool(self.no_wait))


class _BasicCancelOkConstants(Method):
    __slots__ = ()
    NAME = "basic.cancel-ok"
    CLASS_ID = 60
    METHOD_ID = 31
    INDEX = 3932191
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("consumer_tag", "shortstr"),)


@dataclass(slots=True)
class BasicCancelOk(_BasicCancelOkConstants):
    """basic.cancel-ok (60, 31)"""

    consumer_tag: str = ""

    @classmethod
    def decode(cls, buf: memoryview) -> BasicCancelOk:
        offset = 0
        consumer_tag, offset = read_shortstr(buf, offset)
        expect_end(buf, offset)
        return cls(consumer_tag)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x1f"
        write_shortstr(out, self.consumer_tag)


class _BasicPublishConstants(Method):
    __slots__ = ()
    NAME = "basic.publish"
    CLASS_ID = 60
    METHOD_ID = 40
    INDEX = 3932200
    SYNCHRONOUS = False
    HAS_CONTENT = True
    FIELDS = (
        ("reserved_1", "short"),
        ("exchange", "shortstr"),
        ("routing_key", "shortstr"),
        ("mandatory", "bit"),
        ("immediate", "bit"),
    )


@dataclass(slots=True)
class BasicPublish(_BasicPublishConstants):
    """basic.publish (60, 40)"""

    reserved_1: int = 0
    exchange: str = ""
    routing_key: str = ""
    mandatory: bool = False
    immediate: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> BasicPublish:
        offset = 0
        reserved_1, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        exchange, offset = read_shortstr(buf, offset)
        routing_key, offset = read_shortstr(buf, offset)
        bits_3_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        expect_end(buf, offset)
        return cls(reserved_1, exchange, routing_key, bool(bits_3_0 & 1), bool(bits_3_0 & 2))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x28"
        out += _S_H.pack(self.reserved_1)
        write_shortstr(out, self.exchange)
        write_shortstr(out, self.routing_key)
        out += _S_B.pack(bool(self.mandatory) | bool(self.immediate) << 1)


class _BasicReturnConstants(Method):
    __slots__ = ()
    NAME = "basic.return"
    CLASS_ID = 60
    METHOD_ID = 50
    INDEX = 3932210
    SYNCHRONOUS = False
    HAS_CONTENT = True
    FIELDS = (
        ("reply_code", "short"),
        ("reply_text", "shortstr"),
        ("exchange", "shortstr"),
        ("routing_key", "shortstr"),
    )


@dataclass(slots=True)
class BasicReturn(_BasicReturnConstants):
    """basic.return (60, 50)"""

    reply_code: int = 0
    reply_text: str = ""
    exchange: str = ""
    routing_key: str = ""

    @classmethod
    def decode(cls, buf: memoryview) -> BasicReturn:
        offset = 0
        reply_code, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        reply_text, offset = read_shortstr(buf, offset)
        exchange, offset = read_shortstr(buf, offset)
        routing_key, offset = read_shortstr(buf, offset)
        expect_end(buf, offset)
        return cls(reply_code, reply_text, exchange, routing_key)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x32"
        out += _S_H.pack(self.reply_code)
        write_shortstr(out, self.reply_text)
        write_shortstr(out, self.exchange)
        write_shortstr(out, self.routing_key)


class _BasicDeliverConstants(Method):
    __slots__ = ()
    NAME = "basic.deliver"
    CLASS_ID = 60
    METHOD_ID = 60
    INDEX = 3932220
    SYNCHRONOUS = False
    HAS_CONTENT = True
    FIELDS = (
        ("consumer_tag", "shortstr"),
        ("delivery_tag", "longlong"),
        ("redelivered", "bit"),
        ("exchange", "shortstr"),
        ("routing_key", "shortstr"),
    )


@dataclass(slots=True)
class BasicDeliver(_BasicDeliverConstants):
    """basic.deliver (60, 60)"""

    consumer_tag: str = ""
    delivery_tag: int = 0
    redelivered: bool = False
    exchange: str = ""
    routing_key: str = ""

    @classmethod
    def decode(cls, buf: memoryview) -> BasicDeliver:
        offset = 0
        consumer_tag, offset = read_shortstr(buf, offset)
        delivery_tag, bits_1_1, = _S_QB.unpack_from(buf, offset)
        offset += _S_QB.size
        exchange, offset = read_shortstr(buf, offset)
        routing_key, offset = read_shortstr(buf, offset)
        expect_end(buf, offset)
        return cls(consumer_tag, delivery_tag, bool(bits_1_1 & 1), exchange, routing_key)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x3c"
        write_shortstr(out, self.consumer_tag)
        out += _S_QB.pack(self.delivery_tag, bool(self.redelivered))
        write_shortstr(out, self.exchange)
        write_shortstr(out, self.routing_key)


class _BasicGetConstants(Method):
    __slots__ = ()
    NAME = "basic.get"
    CLASS_ID = 60
    METHOD_ID = 70
    INDEX = 3932230
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("reserved_1", "short"), ("queue", "shortstr"), ("no_ack", "bit"))


@dataclass(slots=True)
class BasicGet(_BasicGetConstants):
    """basic.get (60, 70)"""

    reserved_1: int = 0
    queue: str = ""
    no_ack: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> BasicGet:
        offset = 0
        reserved_1, = _S_H.unpack_from(buf, offset)
        offset += _S_H.size
        queue, offset = read_shortstr(buf, offset)
        bits_2_0, = _S_B.unpack_from(buf, offset)
        offset += _S_B.size
        expect_end(buf, offset)
        return cls(reserved_1, queue, bool(bits_2_0 & 1))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x46"
        out += _S_H.pack(self.reserved_1)
        write_shortstr(out, self.queue)
        out += _S_B.pack(bool(self.no_ack))


class _BasicGetOkConstants(Method):
    __slots__ = ()
    NAME = "basic.get-ok"
    CLASS_ID = 60
    METHOD_ID = 71
    INDEX = 3932231
    SYNCHRONOUS = True
    HAS_CONTENT = True
    FIELDS = (
        ("delivery_tag", "longlong"),
        ("redelivered", "bit"),
        ("exchange", "shortstr"),
        ("routing_key", "shortstr"),
        ("message_count", "long"),
    )


@dataclass(slots=True)
class BasicGetOk(_BasicGetOkConstants):
    """basic.get-ok (60, 71)"""

    delivery_tag: int = 0
    redelivered: bool = False
    exchange: str = ""
    routing_key: str = ""
    message_count: int = 0

    @classmethod
    def decode(cls, buf: memoryview) -> BasicGetOk:
        offset = 0
        delivery_tag, bits_0_1, = _S_QB.unpack_from(buf, offset)
        offset += _S_QB.size
        exchange, offset = read_shortstr(buf, offset)
        routing_key, offset = read_shortstr(buf, offset)
        message_count, = _S_I.unpack_from(buf, offset)
        offset += _S_I.size
        expect_end(buf, offset)
        return cls(delivery_tag, bool(bits_0_1 & 1), exchange, routing_key, message_count)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x47"
        out += _S_QB.pack(self.delivery_tag, bool(self.redelivered))
        write_shortstr(out, self.exchange)
        write_shortstr(out, self.routing_key)
        out += _S_I.pack(self.message_count)


class _BasicGetEmptyConstants(Method):
    __slots__ = ()
    NAME = "basic.get-empty"
    CLASS_ID = 60
    METHOD_ID = 72
    INDEX = 3932232
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("reserved_1", "shortstr"),)


@dataclass(slots=True)
class BasicGetEmpty(_BasicGetEmptyConstants):
    """basic.get-empty (60, 72)"""

    reserved_1: str = ""

    @classmethod
    def decode(cls, buf: memoryview) -> BasicGetEmpty:
        offset = 0
        reserved_1, offset = read_shortstr(buf, offset)
        expect_end(buf, offset)
        return cls(reserved_1)

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x48"
        write_shortstr(out, self.reserved_1)


class _BasicAckConstants(Method):
    __slots__ = ()
    NAME = "basic.ack"
    CLASS_ID = 60
    METHOD_ID = 80
    INDEX = 3932240
    SYNCHRONOUS = False
    HAS_CONTENT = False
    FIELDS = (("delivery_tag", "longlong"), ("multiple", "bit"))


@dataclass(slots=True)
class BasicAck(_BasicAckConstants):
    """basic.ack (60, 80)"""

    delivery_tag: int = 0
    multiple: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> BasicAck:
        delivery_tag, bits_0_1, = _S_QB.unpack(buf)
        return cls(delivery_tag, bool(bits_0_1 & 1))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x50"
        out += _S_QB.pack(self.delivery_tag, bool(self.multiple))


class _BasicRejectConstants(Method):
    __slots__ = ()
    NAME = "basic.reject"
    CLASS_ID = 60
    METHOD_ID = 90
    INDEX = 3932250
    SYNCHRONOUS = False
    HAS_CONTENT = False
    FIELDS = (("delivery_tag", "longlong"), ("requeue", "bit"))


@dataclass(slots=True)
class BasicReject(_BasicRejectConstants):
    """basic.reject (60, 90)"""

    delivery_tag: int = 0
    requeue: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> BasicReject:
        delivery_tag, bits_0_1, = _S_QB.unpack(buf)
        return cls(delivery_tag, bool(bits_0_1 & 1))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x5a"
        out += _S_QB.pack(self.delivery_tag, bool(self.requeue))


class _BasicRecoverAsyncConstants(Method):
    __slots__ = ()
    NAME = "basic.recover-async"
    CLASS_ID = 60
    METHOD_ID = 100
    INDEX = 3932260
    SYNCHRONOUS = False
    HAS_CONTENT = False
    FIELDS = (("requeue", "bit"),)


@dataclass(slots=True)
class BasicRecoverAsync(_BasicRecoverAsyncConstants):
    """basic.recover-async (60, 100)"""

    requeue: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> BasicRecoverAsync:
        bits_0_0, = _S_B.unpack(buf)
        return cls(bool(bits_0_0 & 1))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x64"
        out += _S_B.pack(bool(self.requeue))


class _BasicRecoverConstants(Method):
    __slots__ = ()
    NAME = "basic.recover"
    CLASS_ID = 60
    METHOD_ID = 110
    INDEX = 3932270
    SYNCHRONOUS = False
    HAS_CONTENT = False
    FIELDS = (("requeue", "bit"),)


@dataclass(slots=True)
class BasicRecover(_BasicRecoverConstants):
    """basic.recover (60, 110)"""

    requeue: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> BasicRecover:
        bits_0_0, = _S_B.unpack(buf)
        return cls(bool(bits_0_0 & 1))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x6e"
        out += _S_B.pack(bool(self.requeue))


class _BasicRecoverOkConstants(Method):
    __slots__ = ()
    NAME = "basic.recover-ok"
    CLASS_ID = 60
    METHOD_ID = 111
    INDEX = 3932271
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class BasicRecoverOk(_BasicRecoverOkConstants):
    """basic.recover-ok (60, 111)"""

    @classmethod
    def decode(cls, buf: memoryview) -> BasicRecoverOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x6f"


class _BasicNackConstants(Method):
    __slots__ = ()
    NAME = "basic.nack"
    CLASS_ID = 60
    METHOD_ID = 120
    INDEX = 3932280
    SYNCHRONOUS = False
    HAS_CONTENT = False
    FIELDS = (("delivery_tag", "longlong"), ("multiple", "bit"), ("requeue", "bit"))


@dataclass(slots=True)
class BasicNack(_BasicNackConstants):
    """basic.nack (60, 120)"""

    delivery_tag: int = 0
    multiple: bool = False
    requeue: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> BasicNack:
        delivery_tag, bits_0_1, = _S_QB.unpack(buf)
        return cls(delivery_tag, bool(bits_0_1 & 1), bool(bits_0_1 & 2))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x3c\x00\x78"
        out += _S_QB.pack(self.delivery_tag, bool(self.multiple) | bool(self.requeue) << 1)


class _TxSelectConstants(Method):
    __slots__ = ()
    NAME = "tx.select"
    CLASS_ID = 90
    METHOD_ID = 10
    INDEX = 5898250
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class TxSelect(_TxSelectConstants):
    """tx.select (90, 10)"""

    @classmethod
    def decode(cls, buf: memoryview) -> TxSelect:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x5a\x00\x0a"


class _TxSelectOkConstants(Method):
    __slots__ = ()
    NAME = "tx.select-ok"
    CLASS_ID = 90
    METHOD_ID = 11
    INDEX = 5898251
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class TxSelectOk(_TxSelectOkConstants):
    """tx.select-ok (90, 11)"""

    @classmethod
    def decode(cls, buf: memoryview) -> TxSelectOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x5a\x00\x0b"


class _TxCommitConstants(Method):
    __slots__ = ()
    NAME = "tx.commit"
    CLASS_ID = 90
    METHOD_ID = 20
    INDEX = 5898260
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class TxCommit(_TxCommitConstants):
    """tx.commit (90, 20)"""

    @classmethod
    def decode(cls, buf: memoryview) -> TxCommit:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x5a\x00\x14"


class _TxCommitOkConstants(Method):
    __slots__ = ()
    NAME = "tx.commit-ok"
    CLASS_ID = 90
    METHOD_ID = 21
    INDEX = 5898261
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class TxCommitOk(_TxCommitOkConstants):
    """tx.commit-ok (90, 21)"""

    @classmethod
    def decode(cls, buf: memoryview) -> TxCommitOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x5a\x00\x15"


class _TxRollbackConstants(Method):
    __slots__ = ()
    NAME = "tx.rollback"
    CLASS_ID = 90
    METHOD_ID = 30
    INDEX = 5898270
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class TxRollback(_TxRollbackConstants):
    """tx.rollback (90, 30)"""

    @classmethod
    def decode(cls, buf: memoryview) -> TxRollback:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x5a\x00\x1e"


class _TxRollbackOkConstants(Method):
    __slots__ = ()
    NAME = "tx.rollback-ok"
    CLASS_ID = 90
    METHOD_ID = 31
    INDEX = 5898271
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class TxRollbackOk(_TxRollbackOkConstants):
    """tx.rollback-ok (90, 31)"""

    @classmethod
    def decode(cls, buf: memoryview) -> TxRollbackOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x5a\x00\x1f"


class _ConfirmSelectConstants(Method):
    __slots__ = ()
    NAME = "confirm.select"
    CLASS_ID = 85
    METHOD_ID = 10
    INDEX = 5570570
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = (("nowait", "bit"),)


@dataclass(slots=True)
class ConfirmSelect(_ConfirmSelectConstants):
    """confirm.select (85, 10)"""

    nowait: bool = False

    @classmethod
    def decode(cls, buf: memoryview) -> ConfirmSelect:
        bits_0_0, = _S_B.unpack(buf)
        return cls(bool(bits_0_0 & 1))

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x55\x00\x0a"
        out += _S_B.pack(bool(self.nowait))


class _ConfirmSelectOkConstants(Method):
    __slots__ = ()
    NAME = "confirm.select-ok"
    CLASS_ID = 85
    METHOD_ID = 11
    INDEX = 5570571
    SYNCHRONOUS = True
    HAS_CONTENT = False
    FIELDS = ()


@dataclass(slots=True)
class ConfirmSelectOk(_ConfirmSelectOkConstants):
    """confirm.select-ok (85, 11)"""

    @classmethod
    def decode(cls, buf: memoryview) -> ConfirmSelectOk:
        offset = 0
        expect_end(buf, offset)
        return cls()

    def encode_into(self, out: bytearray) -> None:
        out += b"\x00\x55\x00\x0b"


class _BasicPropertiesConstants:
    __slots__ = ()
    CLASS_ID: ClassVar[int] = 60
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("content_type", "shortstr"),
        ("content_encoding", "shortstr"),
        ("headers", "table"),
        ("delivery_mode", "octet"),
        ("priority", "octet"),
        ("correlation_id", "shortstr"),
        ("reply_to", "shortstr"),
        ("expiration", "shortstr"),
        ("message_id", "shortstr"),
        ("timestamp", "timestamp"),
        ("type", "shortstr"),
        ("user_id", "shortstr"),
        ("app_id", "shortstr"),
        ("cluster_id", "shortstr"),
    )


@dataclass(slots=True)
class BasicProperties(_BasicPropertiesConstants):
    """Content header properties of class basic; None means absent."""

    content_type: str | None = None
    content_encoding: str | None = None
    headers: dict[str, Any] | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None
    message_id: str | None = None
    timestamp: int | None = None
    type: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    cluster_id: str | None = None

    @classmethod
    def decode(cls, buf: memoryview) -> BasicProperties:
        """Decode property flags and the property list (the header after body size)."""
        (flags,) = U16.unpack_from(buf, 0)
        if flags & 0x0003:
            raise MalformedData(f"unknown property flags {flags:#06x}")
        offset = 2
        content_type = None
        if flags & 0x8000:
            content_type, offset = read_shortstr(buf, offset)
        content_encoding = None
        if flags & 0x4000:
            content_encoding, offset = read_shortstr(buf, offset)
        headers = None
        if flags & 0x2000:
            headers, offset = read_table(buf, offset)
        delivery_mode = None
        if flags & 0x1000:
            (delivery_mode,) = _S_B.unpack_from(buf, offset)
            offset += _S_B.size
        priority = None
        if flags & 0x0800:
            (priority,) = _S_B.unpack_from(buf, offset)
            offset += _S_B.size
        correlation_id = None
        if flags & 0x0400:
            correlation_id, offset = read_shortstr(buf, offset)
        reply_to = None
        if flags & 0x0200:
            reply_to, offset = read_shortstr(buf, offset)
        expiration = None
        if flags & 0x0100:
            expiration, offset = read_shortstr(buf, offset)
        message_id = None
        if flags & 0x0080:
            message_id, offset = read_shortstr(buf, offset)
        timestamp = None
        if flags & 0x0040:
            (timestamp,) = _S_Q.unpack_from(buf, offset)
            offset += _S_Q.size
        type = None
        if flags & 0x0020:
            type, offset = read_shortstr(buf, offset)
        user_id = None
        if flags & 0x0010:
            user_id, offset = read_shortstr(buf, offset)
        app_id = None
        if flags & 0x0008:
            app_id, offset = read_shortstr(buf, offset)
        cluster_id = None
        if flags & 0x0004:
            cluster_id, offset = read_shortstr(buf, offset)
        expect_end(buf, offset)
        return cls(
            content_type,
            content_encoding,
            headers,
            delivery_mode,
            priority,
            correlation_id,
            reply_to,
            expiration,
            message_id,
            timestamp,
            type,
            user_id,
            app_id,
            cluster_id,
        )

    def encode_into(self, out: bytearray) -> None:
        flags_at = len(out)
        out += b"\0\0"  # flags, patched once we know which properties are present
        flags = 0
        if self.content_type is not None:
            flags |= 0x8000
            write_shortstr(out, self.content_type)
        if self.content_encoding is not None:
            flags |= 0x4000
            write_shortstr(out, self.content_encoding)
        if self.headers is not None:
            flags |= 0x2000
            write_table(out, self.headers)
        if self.delivery_mode is not None:
            flags |= 0x1000
            out += _S_B.pack(self.delivery_mode)
        if self.priority is not None:
            flags |= 0x0800
            out += _S_B.pack(self.priority)
        if self.correlation_id is not None:
            flags |= 0x0400
            write_shortstr(out, self.correlation_id)
        if self.reply_to is not None:
            flags |= 0x0200
            write_shortstr(out, self.reply_to)
        if self.expiration is not None:
            flags |= 0x0100
            write_shortstr(out, self.expiration)
        if self.message_id is not None:
            flags |= 0x0080
            write_shortstr(out, self.message_id)
        if self.timestamp is not None:
            flags |= 0x0040
            out += _S_Q.pack(self.timestamp)
        if self.type is not None:
            flags |= 0x0020
            write_shortstr(out, self.type)
        if self.user_id is not None:
            flags |= 0x0010
            write_shortstr(out, self.user_id)
        if self.app_id is not None:
            flags |= 0x0008
            write_shortstr(out, self.app_id)
        if self.cluster_id is not None:
            flags |= 0x0004
            write_shortstr(out, self.cluster_id)
        U16.pack_into(out, flags_at, flags)

    def encode(self) -> bytes:
        out = bytearray()
        self.encode_into(out)
        return bytes(out)


METHODS: tuple[type[Method], ...] = (
    ConnectionStart,
    ConnectionStartOk,
    ConnectionSecure,
    ConnectionSecureOk,
    ConnectionTune,
    ConnectionTuneOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionBlocked,
    ConnectionUnblocked,
    ConnectionUpdateSecret,
    ConnectionUpdateSecretOk,
    ChannelOpen,
    ChannelOpenOk,
    ChannelFlow,
    ChannelFlowOk,
    ChannelClose,
    ChannelCloseOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    ExchangeBind,
    ExchangeBindOk,
    ExchangeUnbind,
    ExchangeUnbindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueBind,
    QueueBindOk,
    QueueUnbind,
    QueueUnbindOk,
    QueuePurge,
    QueuePurgeOk,
    QueueDelete,
    QueueDeleteOk,
    BasicQos,
    BasicQosOk,
    BasicConsume,
    BasicConsumeOk,
    BasicCancel,
    BasicCancelOk,
    BasicPublish,
    BasicReturn,
    BasicDeliver,
    BasicGet,
    BasicGetOk,
    BasicGetEmpty,
    BasicAck,
    BasicReject,
    BasicRecoverAsync,
    BasicRecover,
    BasicRecoverOk,
    BasicNack,
    TxSelect,
    TxSelectOk,
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
    ConfirmSelect,
    ConfirmSelectOk,
)
METHODS_BY_INDEX: dict[int, type[Method]] = {m.INDEX: m for m in METHODS}
PROPERTIES_BY_CLASS_ID = {60: BasicProperties}
