"""Untrusted input to the management API: random bodies, paths and Authorization headers
get a 4xx answer, never a 500, and the API keeps serving."""

from __future__ import annotations

import json
import random
from pathlib import Path

import aiohttp

from mainstem import Broker

ADMIN = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
TARGETS = ["/api/vhosts/v{n}", "/api/users/u{n}", "/api/permissions/%2F/guest",
           "/api/streams/%2F/s{n}", "/api/connections/{n}", "/api/queues/%2F/q{n}"]


def random_body(rng: random.Random) -> bytes:
    choices = [
        lambda: rng.randbytes(rng.randint(0, 64)),
        lambda: json.dumps(rng.choice([[], 1, "x", None, True])).encode(),
        lambda: json.dumps({"password": rng.choice([1, None, [], "p", ""]),
                            "tags": rng.choice([1, {}, ["a", 2], "administrator", None]),
                            "partitions": rng.choice([0, -1, "3", 2**70, 1.5, True, 2]),
                            "arguments": rng.choice([[], "x", {"x-max-age": "nonsense"}]),
                            "configure": rng.choice(["(", ".*", 5, ""]),
                            "write": "[", "read": None}).encode(),
    ]
    return rng.choice(choices)()


async def test_random_requests_never_break_the_api(tmp_path: Path):
    rng = random.Random(9)
    async with Broker(data_dir=tmp_path / "data") as broker, aiohttp.ClientSession(
            f"http://127.0.0.1:{broker.ports['admin']}") as http:
        for n in range(300):
            method = rng.choice(["PUT", "DELETE", "GET", "POST"])
            path = rng.choice(TARGETS).format(n=n)
            headers = ADMIN if rng.random() < 0.8 else {
                "Authorization": rng.choice(["Basic " + rng.randbytes(12).hex(), "Bearer x",
                                             "Basic Z3Vlc3Q=", ""])}
            async with http.request(method, path, data=random_body(rng),
                                    headers=headers) as response:
                assert response.status < 500, (method, path, await response.text())
        async with http.get("/api/overview", headers=ADMIN) as response:
            assert response.status == 200
