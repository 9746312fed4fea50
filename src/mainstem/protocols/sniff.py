"""What protocol a client's first bytes belong to, so a listener can say so when a client
dials the wrong port (an AMQP client on the stream port, HTTPS on a plain listener, ...).

`identify` knows the openings that cannot be mistaken for one another: AMQP's protocol
header, a TLS ClientHello, an HTTP request line, and the first frame of each mainstem
protocol's clients. Anything else is None: the listener's own codec judges it.
"""

from __future__ import annotations

import re
import struct

HEAD_SIZE = 16  # how many first bytes are kept for the log line

AMQP = "amqp"
TLS = "tls"
HTTP = "http"
STREAM = "stream"
IGGY = "iggy"
BSON = "bson"
SEGMENT = "segment"

_HTTP_REQUEST = re.compile(rb"(GET|POST|PUT|HEAD|DELETE|OPTIONS|PATCH|CONNECT|TRACE) \S")
_STREAM_OPENING_KEYS = (0x0011, 0x0012)  # PeerProperties, SaslHandshake (version 1)
_IGGY_LOGIN_USER = 38
_SEGMENT_AUTHENTICATE = 200
_MAX_OPENING_FRAME = 1 << 20  # an opening frame is small; a bigger length is not one
_STREAM_HEADER = struct.Struct(">IHH")  # size, key, version
_SEGMENT_HEADER = struct.Struct(">iI")  # type, length
_IGGY_HEADER = struct.Struct("<II")  # length, command


def identify(data: bytes) -> str | None:
    """The protocol whose opening `data` starts with, or None if it is none of those."""
    if data.startswith(b"AMQP"):
        return AMQP
    if len(data) >= 3 and data[0] == 0x16 and data[1] == 0x03 and data[2] <= 0x04:
        return TLS  # a handshake record: ClientHello, SSL 3.0 to TLS 1.3
    if _HTTP_REQUEST.match(data):
        return HTTP
    if len(data) < 8:
        return None
    size, key, version = _STREAM_HEADER.unpack_from(data)
    if key in _STREAM_OPENING_KEYS and version == 1 and size < _MAX_OPENING_FRAME:
        return STREAM
    kind, length = _SEGMENT_HEADER.unpack_from(data)
    if kind == _SEGMENT_AUTHENTICATE and length < _MAX_OPENING_FRAME:
        return SEGMENT
    if data[4:10] == b"\x02type\x00":  # a BSON document whose first field is "type"
        return BSON
    length, command = _IGGY_HEADER.unpack_from(data)
    if command == _IGGY_LOGIN_USER and length < _MAX_OPENING_FRAME:
        return IGGY
    return None
