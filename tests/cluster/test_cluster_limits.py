"""Limits are cluster-wide metadata: set through one node's management API, they hold on
every node (the catalog's "vhost_limit" and "user_limit" changes go through etcd like
users and permissions); cleared through another node, they are gone everywhere."""

from __future__ import annotations

import asyncio

import aiohttp

from mainstem.testing_cluster import LocalCluster

ADMIN = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}


async def listed(http: aiohttp.ClientSession, port: int, path: str) -> list[dict]:
    async with http.get(f"http://127.0.0.1:{port}/api/{path}") as response:
        assert response.status == 200
        rows: list[dict] = await response.json()
        return rows


async def until_listed(http: aiohttp.ClientSession, ports: list[int], path: str,
                       expected: list[dict]) -> None:
    for port in ports:
        for _ in range(100):
            if await listed(http, port, path) == expected:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{path} on port {port} is not {expected}")


async def test_limits_set_on_one_node_hold_on_every_node(cluster: LocalCluster) -> None:
    ports = [node.ports["admin"] for node in cluster.nodes.values()]
    async with aiohttp.ClientSession(headers=ADMIN) as http:
        first, second = (f"http://127.0.0.1:{port}/api" for port in ports[:2])
        assert (await http.put(f"{first}/vhosts/limited")).status in (201, 204)
        assert (await http.put(f"{first}/users/capped", json={
            "password": "capped", "tags": ""})).status in (201, 204)
        assert (await http.put(f"{first}/vhost-limits/limited/max-queues",
                               json={"value": 3})).status == 204
        assert (await http.put(f"{first}/user-limits/capped/max-channels",
                               json={"value": 2})).status == 204
        await until_listed(http, ports, "vhost-limits/limited",
                           [{"vhost": "limited", "value": {"max-queues": 3}}])
        await until_listed(http, ports, "user-limits/capped",
                           [{"user": "capped", "value": {"max-channels": 2}}])
        assert (await http.delete(f"{second}/vhost-limits/limited/max-queues")).status == 204
        assert (await http.delete(f"{second}/users/capped")).status == 204
        await until_listed(http, ports, "vhost-limits/limited", [])
        await until_listed(http, ports, "user-limits", [])
        assert (await http.delete(f"{first}/vhosts/limited")).status == 204
