"""The file IO pyiceberg writes a table's metadata through (`py-io-impl`): reads are
pyiceberg's own (`PyArrowFileIO`), every write is one put of the whole object to the tier,
made by the table writer (`broker/tables.py`): noted first as an upload, then `Tier.put`,
create-only and durable as a tiered segment's (a directory's fsynced and linked, S3's a
conditional PUT), so a metadata file, manifest list or manifest is written once, never
replaced, and never seen half-written. pyiceberg deletes nothing: the writer deletes
through the tier's garbage queue (grace period, each deletion logged).

pyiceberg makes its IO from string properties only, so the writer registers its put under
a token (`register`) and names the token in the catalog's properties (`PUT_PROPERTY`)."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from typing import Any

from pyiceberg.io import InputFile, OutputFile, OutputStream
from pyiceberg.io.pyarrow import PyArrowFileIO

IMPL = f"{__name__}.TierFileIO"
PUT_PROPERTY = "mainstem.put"
# (location, bytes) -> None once the object is durable under its key; raises if it exists
Put = Callable[[str, bytes], None]
_PUTS: dict[str, Put] = {}


def register(put: Put) -> str:
    """The token a catalog's `PUT_PROPERTY` names `put` by."""
    token = uuid.uuid4().hex
    _PUTS[token] = put
    return token


def unregister(token: str) -> None:
    _PUTS.pop(token, None)


class TierFileIO(PyArrowFileIO):
    def __init__(self, properties: dict[str, str]) -> None:
        super().__init__(properties)
        self._put = _PUTS[properties[PUT_PROPERTY]]

    def new_output(self, location: str) -> OutputFile:  # type: ignore[override]
        return _TierOutput(location, self._put, self.new_input)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        raise PermissionError("table objects are deleted through the tier's garbage queue")


class _TierOutput(OutputFile):
    def __init__(self, location: str, put: Put, reader: Callable[[str], InputFile]) -> None:
        super().__init__(location)
        self._put = put
        self._reader = reader

    def __len__(self) -> int:
        return len(self._reader(self.location))

    def exists(self) -> bool:
        return self._reader(self.location).exists()

    def to_input_file(self) -> InputFile:
        return self._reader(self.location)

    def create(self, overwrite: bool = False) -> OutputStream:
        # every key pyiceberg makes holds a random id; an existing one fails the put
        return _WholeObject(self.location, self._put)


class _WholeObject(io.BytesIO):
    """The object's bytes, put as one when closed."""

    def __init__(self, location: str, put: Put) -> None:
        super().__init__()
        self._location = location
        self._put_object = put

    def close(self) -> None:
        if not self.closed:
            data = self.getvalue()
            super().close()
            self._put_object(self._location, data)

    def __exit__(self, *exc: Any) -> None:
        self.close()
