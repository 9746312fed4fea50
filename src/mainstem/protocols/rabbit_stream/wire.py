"""Primitive types of the stream protocol: big-endian integers, strings, bytes, arrays, maps.

`Reader` walks one frame body (a memoryview that ends where the frame ends), so running past
the end of a field is always a malformed frame, never a read into the next frame.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from mainstem.protocols.rabbit_stream.constants import ResponseCode

U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
I16 = struct.Struct(">h")
U32 = struct.Struct(">I")
I32 = struct.Struct(">i")
U64 = struct.Struct(">Q")
I64 = struct.Struct(">q")
KEY_VERSION = struct.Struct(">HH")
SIZE_KEY_VERSION = struct.Struct(">IHH")
CORR_CODE = struct.Struct(">IH")  # correlation id + response code, the start of most responses


class FrameError(Exception):
    """A frame the codec cannot accept; `code` is what the connection closes with."""

    def __init__(self, code: ResponseCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class MalformedFrame(FrameError):
    def __init__(self, message: str) -> None:
        super().__init__(ResponseCode.UNKNOWN_FRAME, message)


class FrameTooLarge(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            ResponseCode.FRAME_TOO_LARGE, f"frame of {size} bytes exceeds the limit of {limit}"
        )
        self.size = size
        self.limit = limit


class Reader:
    """Cursor over one frame body. Integer reads past the end raise struct.error, which the
    frame parser turns into MalformedFrame; length-prefixed reads check their bounds here."""

    __slots__ = ("pos", "view")

    def __init__(self, view: memoryview, pos: int = 0) -> None:
        self.view = view
        self.pos = pos

    def remaining(self) -> int:
        return len(self.view) - self.pos

    def _unpack(self, st: struct.Struct) -> int:
        value: int
        (value,) = st.unpack_from(self.view, self.pos)
        self.pos += st.size
        return value

    def u8(self) -> int:
        return self._unpack(U8)

    def u16(self) -> int:
        return self._unpack(U16)

    def i16(self) -> int:
        return self._unpack(I16)

    def u32(self) -> int:
        return self._unpack(U32)

    def u64(self) -> int:
        return self._unpack(U64)

    def i64(self) -> int:
        return self._unpack(I64)

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.view):
            raise MalformedFrame(f"field of {n} bytes runs past the end of the frame")
        chunk = self.view[self.pos : end]
        self.pos = end
        return chunk

    def nullable_string(self) -> str | None:
        n = self.i16()
        if n == -1:
            return None
        return str(self.take(n), "utf-8")

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise MalformedFrame("null string where a value is required")
        return value

    def nullable_bytes(self) -> bytes | None:
        n = self._unpack(I32)
        if n == -1:
            return None
        return bytes(self.take(n))

    def count(self, min_item_size: int) -> int:
        """An array length, checked against the bytes left so a forged count fails at once."""
        n = self._unpack(I32)
        if n < 0 or n * min_item_size > self.remaining():
            raise MalformedFrame(f"array of {n} items cannot fit in {self.remaining()} bytes")
        return n

    def strings(self) -> list[str]:
        return [self.string() for _ in range(self.count(2))]

    def string_map(self) -> dict[str, str]:
        return {self.string(): self.string() for _ in range(self.count(4))}

    def expect_end(self) -> None:
        if self.pos != len(self.view):
            raise MalformedFrame(f"{len(self.view) - self.pos} unexpected bytes at end of frame")


def string(value: str | None) -> bytes:
    if value is None:
        return I16.pack(-1)
    raw = value.encode()
    return I16.pack(len(raw)) + raw


def nullable_bytes(value: bytes | None) -> bytes:
    if value is None:
        return I32.pack(-1)
    return I32.pack(len(value)) + value


def strings(values: Iterable[str]) -> bytes:
    encoded = [string(v) for v in values]
    return I32.pack(len(encoded)) + b"".join(encoded)


def string_map(values: Mapping[str, str]) -> bytes:
    parts = [I32.pack(len(values))]
    for key, value in values.items():
        parts.append(string(key))
        parts.append(string(value))
    return b"".join(parts)
