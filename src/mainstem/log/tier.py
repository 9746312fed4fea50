"""A tier: files kept elsewhere, in an object store, for segments sealed long ago.

A directory (any mount, NFS included: the embedded default) or an S3-compatible bucket,
through obstore (Rust's object_store): async, range GETs, and puts that are atomic (a
directory's object is written under a hidden temporary name, fsynced and linked to its key;
S3 shows an object only once its PUT or multipart upload completed), so no reader ever sees
half an object under its key, and an object whose put returned survives a crash of the
machine. An object, once there, is never replaced: a directory's put of a key that exists
fails (`ObjectExists`), and so does a small put to S3 (a conditional PUT); segments' keys
are made unique by their uploader (`log.tier_upload`), so no other upload can name them.
A directory's whole-object puts and reads are mainstem's own (obstore's local store
neither fsyncs nor copies in the kernel, and reads back a few times slower); ranges, sizes,
lists and deletes go through obstore for every tier.

Every call is bounded by `timeout`: a store that does not answer, or fails, raises
`TierUnavailable` naming the tier and the key, never hangs a reader.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import obstore
from isal.isal_zlib import crc32
from obstore.store import LocalStore, S3Store

from mainstem.log.errors import ObjectExists, TierUnavailable

if TYPE_CHECKING:
    from obstore.store import ClientConfig, ObjectStore, RetryConfig

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0  # seconds for one call, retries included
UPLOAD_PART = 8 * 1024 * 1024  # multipart upload above this (S3's minimum part is 5 MiB)
STREAM_PART = 8 * 1024 * 1024  # a whole object read back in pieces this large (or larger)


class Tier:
    """One object store, with the keys relative to its root (or bucket prefix)."""

    def __init__(self, store: ObjectStore, name: str, timeout: float = DEFAULT_TIMEOUT,
                 root: Path | None = None) -> None:
        self._store = store
        self.name = name  # for errors and logs: the directory or the URL, never a secret
        self.timeout = timeout
        self._root = root  # a directory tier's, for its own puts

    @classmethod
    def directory(cls, root: Path, timeout: float = DEFAULT_TIMEOUT) -> Tier:
        root.mkdir(parents=True, exist_ok=True)
        return cls(LocalStore(root), str(root), timeout, root)

    @classmethod
    def s3(cls, url: str, *, endpoint: str | None = None, region: str = "us-east-1",
           access_key_id: str | None = None, secret_access_key: str | None = None,
           timeout: float = DEFAULT_TIMEOUT) -> Tier:
        """`s3://bucket/prefix`; credentials from the arguments or the usual AWS_*
        environment. Requests time out and stop retrying within `timeout`."""
        client: ClientConfig = {"timeout": timedelta(seconds=timeout),
                                "connect_timeout": timedelta(seconds=min(timeout, 5.0))}
        if endpoint is not None and endpoint.startswith("http://"):
            client["allow_http"] = True
        retry: RetryConfig = {"max_retries": 3, "retry_timeout": timedelta(seconds=timeout)}
        options: dict[str, str] = {"region": region}
        if endpoint is not None:
            options["endpoint"] = endpoint
        if access_key_id is not None and secret_access_key is not None:
            options["access_key_id"] = access_key_id
            options["secret_access_key"] = secret_access_key
        store = S3Store.from_url(url, client_options=client, retry_config=retry,
                                 **options)  # type: ignore[arg-type]
        return cls(store, url, timeout)

    @classmethod
    def open(cls, url: str, *, endpoint: str | None = None, region: str = "us-east-1",
             access_key_id: str | None = None, secret_access_key: str | None = None,
             timeout: float = DEFAULT_TIMEOUT) -> Tier:
        """The tier a URL names: `s3://bucket/prefix`, or a directory (a path, or
        `file:///path`)."""
        if url.startswith("s3://"):
            return cls.s3(url, endpoint=endpoint, region=region, access_key_id=access_key_id,
                          secret_access_key=secret_access_key, timeout=timeout)
        if "://" in url and not url.startswith("file://"):
            raise ValueError(f"a tier is s3://bucket/prefix or a directory, not {url!r}")
        return cls.directory(Path(url.removeprefix("file://")), timeout)

    async def put(self, key: str, content: Path | bytes) -> None:
        """Put a local file (large ones in parts) or bytes under a new `key`, atomically;
        `ObjectExists` if the key is taken (an S3 multipart upload cannot check: its key
        must be one no other upload makes)."""
        if self._root is not None:
            await self._call(key, asyncio.to_thread(_put_file, self._root, key, content))
            return
        small = isinstance(content, bytes) and len(content) <= UPLOAD_PART
        try:
            await self._call(key, obstore.put_async(self._store, key, content,
                                                    chunk_size=UPLOAD_PART,
                                                    mode="create" if small else None))
        except TierUnavailable as error:
            if isinstance(error.__cause__, obstore.exceptions.AlreadyExistsError):
                raise ObjectExists(self.name, key, "the key is taken") from None
            raise

    async def size(self, key: str) -> int:
        meta = await self._call(key, obstore.head_async(self._store, key))
        return meta["size"]

    async def get_ranges(self, key: str, starts: Sequence[int], ends: Sequence[int]
                         ) -> list[memoryview]:
        """Bytes [start, end) of `key` for each pair, as few requests as the store needs
        (neighbouring ranges go in one)."""
        got = await self._call(key, obstore.get_ranges_async(self._store, key, starts=starts,
                                                             ends=ends))
        return [memoryview(part) for part in got]

    async def get(self, key: str) -> bytes:
        result = await self._call(key, obstore.get_async(self._store, key))
        return bytes(await self._call(key, result.bytes_async()))

    async def crc32(self, key: str) -> int:
        """CRC-32 of the whole object as the store returns it, read as a stream."""
        if self._root is not None:
            return await self._call(key, asyncio.to_thread(file_crc32, self._root / key))

        async def stream() -> int:
            crc = 0
            result = await obstore.get_async(self._store, key)
            async for part in result.stream(min_chunk_size=STREAM_PART):
                crc = crc32(part, crc)
            return crc
        return await self._call(key, stream())

    def delete_temporary(self, key: str) -> None:
        """Remove what a directory put of `key` cut short by a crash left (its own
        temporary file: no other put makes that name)."""
        if self._root is not None:
            (self._root / temporary_name(key)).unlink(missing_ok=True)

    async def delete(self, key: str) -> None:
        """Delete `key`; a key already gone counts as deleted (a retried delete)."""
        try:
            await self._call(key, obstore.delete_async(self._store, key))
        except TierUnavailable as error:
            if not _not_found(error):
                raise

    async def exists(self, key: str) -> bool:
        try:
            await self.size(key)
        except TierUnavailable as error:
            if not _not_found(error):
                raise
            return False
        return True

    async def list(self, prefix: str) -> list[str]:
        """The keys under `prefix` (a path: `a/b` holds `a/b/c`, not `a/bc`)."""
        pages = obstore.list(self._store, prefix)
        return await self._call(prefix, _keys(pages))

    async def _call(self, key: str, call: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self.timeout):
                return await call
        except TimeoutError:
            raise TierUnavailable(self.name, key, f"no answer in {self.timeout}s") from None
        except (obstore.exceptions.BaseError, OSError) as e:
            raise TierUnavailable(self.name, key, _first_line(e)) from e


def _not_found(error: TierUnavailable) -> bool:
    """Whether the store answered that the key does not exist (rather than failing)."""
    return isinstance(error.__cause__, FileNotFoundError | obstore.exceptions.NotFoundError)


def file_crc32(path: Path, size: int | None = None) -> int:
    """CRC-32 of a file's first `size` bytes (all of it by default), on a descriptor of
    its own (for a worker thread)."""
    crc = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while size is None or size > 0:
            part = os.read(fd, STREAM_PART if size is None else min(STREAM_PART, size))
            if not part:
                break
            crc = crc32(part, crc)
            size = None if size is None else size - len(part)
    finally:
        os.close(fd)
    return crc


def temporary_name(key: str) -> str:
    """A directory put's temporary file for `key`: hidden, as obstore lists no name ending
    in `#` and digits (its own temporary names)."""
    return f"{key}#0"


def _put_file(root: Path, key: str, content: Path | bytes) -> None:
    """Write `content` under `root/key` durably, never over an object there: a hidden
    temporary file, fsynced, hard-linked to its key (which fails if the key exists), the
    temporary name unlinked, the directory fsynced. A root that is gone is not made
    again: the tier is unavailable."""
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is gone")
    target = root / key
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = root / temporary_name(key)
    if isinstance(content, Path):
        shutil.copyfile(content, temporary)  # copy_file_range: in the kernel
    else:
        temporary.write_bytes(content)
    fd = os.open(temporary, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temporary, target)
    except FileExistsError:
        raise ObjectExists(str(root), key, "the key is taken") from None
    finally:
        temporary.unlink()
    fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def _keys(pages: obstore.ListStream[Sequence[obstore.ObjectMeta]]) -> list[str]:
    return [meta["path"] async for page in pages for meta in page]


def _first_line(error: Exception) -> str:
    """obstore's messages carry a debug dump after the first line."""
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
