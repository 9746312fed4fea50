"""An etcd v3 client over etcd's own JSON gateway (`/v3/...`), on aiohttp.

The gateway is part of every etcd server since 3.3 and speaks the same API as gRPC, so
the cluster needs no gRPC stack: keys and values travel base64-encoded, 64-bit numbers
as strings. Only what the cluster uses is here: ranges, puts, deletes, transactions,
leases and watches.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

MAX_TXN_OPS = 100  # etcd refuses a transaction of more than 128 operations by default


class EtcdError(Exception):
    """etcd refused a request, or none of its endpoints answered."""


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int

    def json(self) -> Any:
        return json.loads(self.value)


@dataclass(frozen=True, slots=True)
class Event:
    kind: str  # "PUT" or "DELETE"
    kv: KeyValue


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction: `target` of `key` compared with `value`.
    target: "CREATE" (create revision; 0 = absent), "MOD", "VERSION" or "VALUE"."""

    key: str
    target: str
    value: int | bytes
    result: str = "EQUAL"

    def encode(self) -> dict[str, Any]:
        field = {"CREATE": "create_revision", "MOD": "mod_revision",
                 "VERSION": "version", "VALUE": "value"}[self.target]
        value = _b64(self.value) if isinstance(self.value, bytes) else str(self.value)
        return {"key": _b64(self.key), "target": self.target, "result": self.result,
                field: value}


def put(key: str, value: bytes, lease: int = 0) -> dict[str, Any]:
    """A put operation for `txn`."""
    request: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        request["lease"] = str(lease)
    return {"request_put": request}


def delete(key: str) -> dict[str, Any]:
    """A delete operation for `txn`."""
    return {"request_delete_range": {"key": _b64(key)}}


def delete_prefix(prefix: str) -> dict[str, Any]:
    """A delete operation for `txn` of every key under `prefix`."""
    return {"request_delete_range": {"key": _b64(prefix),
                                     "range_end": _b64(_prefix_end(prefix))}}


class EtcdClient:
    def __init__(self, endpoints: Sequence[str], *, timeout: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("etcd needs at least one endpoint")
        self.endpoints = [e if "://" in e else f"http://{e}" for e in endpoints]
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._preferred = 0  # the endpoint that answered last

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to the first endpoint that answers, starting at the one that did last."""
        failure: Exception | None = None
        for k in range(len(self.endpoints)):
            index = (self._preferred + k) % len(self.endpoints)
            try:
                async with self._http().post(self.endpoints[index] + path, json=body,
                                             timeout=self._timeout) as response:
                    answer: dict[str, Any] = await response.json(content_type=None)
            except (TimeoutError, aiohttp.ClientError, ValueError) as error:
                failure = error
                continue
            self._preferred = index
            if "error" in answer or ("code" in answer and "message" in answer):
                raise EtcdError(f"etcd {path}: {answer.get('message') or answer.get('error')}")
            return answer
        raise EtcdError(f"no etcd endpoint answered {path}: {failure}")

    # -- keys ------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        return (await self.get_at(key))[0]

    async def get_at(self, key: str) -> tuple[KeyValue | None, int]:
        """A key (None when absent), and the store's revision it was read at."""
        answer = await self._call("/v3/kv/range", {"key": _b64(key)})
        kvs = answer.get("kvs", [])
        return (_kv(kvs[0]) if kvs else None), int(answer["header"]["revision"])

    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        """Every key under `prefix`, and the store's revision they were read at."""
        answer = await self._call("/v3/kv/range", {"key": _b64(prefix),
                                                   "range_end": _b64(_prefix_end(prefix))})
        revision = int(answer["header"]["revision"])
        return [_kv(kv) for kv in answer.get("kvs", [])], revision

    async def put(self, key: str, value: bytes, lease: int = 0) -> None:
        await self._call("/v3/kv/put", put(key, value, lease)["request_put"])

    async def delete(self, key: str) -> None:
        await self._call("/v3/kv/deleterange", {"key": _b64(key)})

    async def txn(self, compare: Sequence[Compare], success: Sequence[dict[str, Any]],
                  failure: Sequence[dict[str, Any]] = ()) -> bool:
        """Run `success` if every comparison holds, else `failure`; True when it held."""
        return await self.committed(compare, success, failure) is not None

    async def committed(self, compare: Sequence[Compare], success: Sequence[dict[str, Any]],
                        failure: Sequence[dict[str, Any]] = ()) -> int | None:
        """As `txn`: the store's revision after it when the comparisons held, else None."""
        answer = await self._call("/v3/kv/txn", {
            "compare": [c.encode() for c in compare], "success": list(success),
            "failure": list(failure)})
        return int(answer["header"]["revision"]) if answer.get("succeeded", False) else None

    # -- leases ----------------------------------------------------------------

    async def grant(self, ttl: int) -> int:
        answer = await self._call("/v3/lease/grant", {"TTL": str(ttl)})
        return int(answer["ID"])

    async def keep_alive(self, lease: int) -> int:
        """Renew the lease once; returns its TTL, 0 once it has expired."""
        answer = await self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(answer.get("result", {}).get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        await self._call("/v3/lease/revoke", {"ID": str(lease)})

    # -- watches ---------------------------------------------------------------

    async def watch_prefix(self, prefix: str, start_revision: int) -> AsyncIterator[Event]:
        """Every change under `prefix` from `start_revision` on; ends when the
        connection to etcd does (the caller reads again and resumes)."""
        body = {"create_request": {"key": _b64(prefix), "range_end": _b64(_prefix_end(prefix)),
                                   "start_revision": str(start_revision)}}
        endpoint = self.endpoints[self._preferred]
        async with self._http().post(endpoint + "/v3/watch", json=body,
                                     timeout=aiohttp.ClientTimeout(total=None)) as response:
            async for line in response.content:
                if not line.strip():
                    continue
                result = json.loads(line).get("result", {})
                for event in result.get("events", []):
                    yield Event(event.get("type", "PUT"), _kv(event["kv"]))


def _b64(value: str | bytes) -> str:
    raw = value.encode() if isinstance(value, str) else value
    return base64.b64encode(raw).decode()


def _prefix_end(prefix: str) -> bytes:
    """The range end covering every key that starts with `prefix`."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return bytes(raw)


def _kv(raw: dict[str, Any]) -> KeyValue:
    return KeyValue(base64.b64decode(raw["key"]).decode(),
                    base64.b64decode(raw.get("value", "")),
                    int(raw.get("create_revision", 0)), int(raw.get("mod_revision", 0)),
                    int(raw.get("lease", 0)))
