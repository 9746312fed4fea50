"""`mainstem ctl`: operate a running broker over its HTTP management API.

Table output by default, `--json` for scripts. Exit code 0 on success, 1 when the API
refuses (the reason goes to stderr), 2 when the broker cannot be reached.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote, unquote, urlsplit, urlunsplit
from urllib.request import Request, urlopen

DEFAULT_URL = "http://127.0.0.1:15672"
_TIMEOUT_S = 30

# what a table shows for each listing: (column title, row key)
_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "users": [("name", "name"), ("tags", "tags")],
    "permissions": [("user", "user"), ("vhost", "vhost"), ("configure", "configure"),
                    ("write", "write"), ("read", "read")],
    "vhosts": [("name", "name")],
    "streams": [("vhost", "vhost"), ("name", "name"), ("partitions", "partition_count"),
                ("messages", "messages"), ("size_bytes", "size_bytes")],
    "queues": [("vhost", "vhost"), ("name", "name"), ("type", "type"),
               ("messages", "messages")],
    "connections": [("id", "id"), ("name", "name"), ("protocol", "protocol"), ("user", "user"),
                    ("vhost", "vhost"), ("recv_oct", "recv_oct"), ("send_oct", "send_oct")],
    "lag": [("vhost", "vhost"), ("stream", "stream"), ("partition", "partition"),
            ("reference", "reference"), ("offset", "offset"), ("lag", "lag")],
}


class ApiError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP {status}: {reason}")
        self.status = status


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """The URL without ``user:password@`` (safe to print), and the user and password."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.netloc.rpartition("@")[2]
    bare = urlunsplit(parts._replace(netloc=host))
    return bare, unquote(parts.username or ""), unquote(parts.password or "")


class Client:
    def __init__(self, url: str, user: str, password: str) -> None:
        """Credentials in the URL take the place of `user` and `password`."""
        url, url_user, url_password = split_credentials(url)
        user, password = url_user or user, url_password or password
        self.url = url.rstrip("/")  # without credentials: what messages show
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        self._auth = f"Basic {token}"

    def call(self, method: str, path: str, body: object = None,
             headers: dict[str, str] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = Request(self.url + path, data=data, method=method, headers={
            "Authorization": self._auth, "Content-Type": "application/json", **(headers or {})})
        try:
            with urlopen(request, timeout=_TIMEOUT_S) as response:
                payload = response.read()
        except HTTPError as exc:
            raise ApiError(exc.code, _reason(exc.read())) from None
        return json.loads(payload) if payload else None


def _reason(payload: bytes) -> str:
    try:
        return str(json.loads(payload).get("reason", payload.decode(errors="replace")))
    except (ValueError, AttributeError):
        return payload.decode(errors="replace")


def _q(name: str) -> str:
    return quote(name, safe="")


def add_ctl_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=os.environ.get("MAINSTEM_ADMIN_URL", DEFAULT_URL),
                        help=f"management API (default: $MAINSTEM_ADMIN_URL or {DEFAULT_URL})")
    parser.add_argument("--user", default=os.environ.get("MAINSTEM_ADMIN_USER", "guest"))
    parser.add_argument("--password", default=os.environ.get("MAINSTEM_ADMIN_PASS", "guest"))
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    groups = parser.add_subparsers(dest="group", metavar="GROUP", required=True)

    def action(group: str, name: str, run: Callable, *arguments: tuple) -> None:
        sub = subparsers[group].add_parser(name)
        for names, options in arguments:
            sub.add_argument(*names, **options)
        sub.set_defaults(ctl=run)

    subparsers = {}
    for group in ("users", "permissions", "vhosts", "streams", "queues", "connections"):
        subparsers[group] = groups.add_parser(group).add_subparsers(
            dest="action", metavar="ACTION", required=True)
    vhost = (("--vhost",), {"default": "/"})
    name: tuple[tuple[str, ...], dict[str, str]] = (("name",), {})
    # not "user": that is the login of --user
    user = (("target_user",), {"metavar": "USER"})
    action("users", "list", lambda c, a: c.call("GET", "/api/users"))
    action("users", "add", _add_user, name, (("new_password",), {"metavar": "PASSWORD"}),
           (("--tags",), {"default": ""}))
    action("users", "delete", lambda c, a: c.call("DELETE", f"/api/users/{_q(a.name)}"), name)
    action("permissions", "list", lambda c, a: c.call("GET", "/api/permissions"))
    action("permissions", "set", _set_permissions, user, vhost,
           *((("--" + kind,), {"default": ".*"}) for kind in ("configure", "write", "read")))
    action("permissions", "clear", lambda c, a: c.call(
        "DELETE", f"/api/permissions/{_q(a.vhost)}/{_q(a.target_user)}"), user, vhost)
    action("vhosts", "list", lambda c, a: c.call("GET", "/api/vhosts"))
    action("vhosts", "add", lambda c, a: c.call("PUT", f"/api/vhosts/{_q(a.name)}", {}), name)
    action("vhosts", "delete", lambda c, a: c.call("DELETE", f"/api/vhosts/{_q(a.name)}"), name)
    action("streams", "list", _list_streams)
    action("streams", "add", lambda c, a: c.call(
        "PUT", f"/api/streams/{_q(a.vhost)}/{_q(a.name)}", {"partitions": a.partitions}),
        name, vhost, (("--partitions",), {"type": int, "default": 1}))
    action("streams", "delete", lambda c, a: c.call(
        "DELETE", f"/api/streams/{_q(a.vhost)}/{_q(a.name)}"), name, vhost)
    action("queues", "list", lambda c, a: c.call("GET", "/api/queues"))
    action("queues", "delete", lambda c, a: c.call(
        "DELETE", f"/api/queues/{_q(a.vhost)}/{_q(a.name)}"), name, vhost)
    action("connections", "list", lambda c, a: c.call("GET", "/api/connections"))
    action("connections", "close", _close_connection, name,
           (("--reason",), {"default": "closed by mainstem ctl"}))
    lag = groups.add_parser("lag", help="consumer offsets and lag")
    lag.add_argument("stream", nargs="?")
    lag.add_argument("--vhost", default="/")
    lag.set_defaults(ctl=_lag, action="lag")


def _add_user(client: Client, args: argparse.Namespace) -> None:
    client.call("PUT", f"/api/users/{_q(args.name)}",
                {"password": args.new_password, "tags": args.tags})


def _set_permissions(client: Client, args: argparse.Namespace) -> None:
    client.call("PUT", f"/api/permissions/{_q(args.vhost)}/{_q(args.target_user)}",
                {"configure": args.configure, "write": args.write, "read": args.read})


def _list_streams(client: Client, args: argparse.Namespace) -> list[dict]:
    rows = client.call("GET", "/api/streams")
    for row in rows:
        row["partition_count"] = len(row["partitions"])
    return rows


def _close_connection(client: Client, args: argparse.Namespace) -> None:
    client.call("DELETE", f"/api/connections/{_q(args.name)}", headers={"X-Reason": args.reason})


def _lag(client: Client, args: argparse.Namespace) -> list[dict]:
    if args.stream:
        return client.call("GET", f"/api/streams/{_q(args.vhost)}/{_q(args.stream)}/offsets")
    return client.call("GET", "/api/consumer-offsets")


def run_ctl(args: argparse.Namespace) -> int:
    client = Client(args.url, args.user, args.password)
    try:
        result = args.ctl(client, args)
    except ApiError as exc:
        print(f"mainstem ctl: {exc}", file=sys.stderr)
        return 1
    except (URLError, OSError) as exc:
        print(f"mainstem ctl: cannot reach {client.url}: {exc}", file=sys.stderr)
        return 2
    if result is None:
        if not args.json:
            print("ok")
        return 0
    group = "lag" if args.action == "lag" else args.group
    print(json.dumps(result, indent=2) if args.json else format_table(result, _COLUMNS[group]))
    return 0


def format_table(rows: Sequence[dict], columns: Sequence[tuple[str, str]]) -> str:
    cells = [[title for title, _ in columns]]
    for row in rows:
        cells.append([_cell(row.get(key)) for _, key in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths,
                                                                        strict=True)).rstrip()
                     for line in cells)


def _cell(value: object) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return "" if value is None else str(value)
