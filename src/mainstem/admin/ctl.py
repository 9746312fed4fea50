"""`mainstem ctl`: operate a running broker over its HTTP management API.

The everyday tasks of rabbitmqctl and rabbitmqadmin, on RabbitMQ's documented API paths:
queues with ready/unacked/consumers, declare/purge/delete, connections and channels,
users, vhosts, permissions and policies, vhost and user limits, definitions export/import,
the node's status and effective configuration, plus mainstem's streams and consumer lag.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote, unquote, urlencode, urlsplit, urlunsplit
from urllib.request import Request, urlopen

DEFAULT_URL = "http://127.0.0.1:15672"
_TIMEOUT_S = 30

Argument = tuple[tuple[str, ...], dict[str, Any]]
Columns = tuple[tuple[str, str], ...]  # (column title, row key; dots go into nested objects)


class Refused(Exception):
    """An action that mainstem ctl itself declines (exit code 1, like an API refusal)."""


class ApiError(Refused):
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


# collections that RabbitMQ filters by vhost as /api/vhosts/VHOST/COLLECTION
_UNDER_VHOST = frozenset({"connections", "channels"})


def _in_vhost(args: argparse.Namespace, collection: str) -> str:
    """/api/COLLECTION, or with --vhost the path RabbitMQ gives that vhost's part."""
    vhost = getattr(args, "vhost", None)
    if not vhost:
        return f"/api/{collection}"
    if collection in _UNDER_VHOST:
        return f"/api/vhosts/{_q(vhost)}/{collection}"
    return f"/api/{collection}/{_q(vhost)}"


@dataclass(frozen=True, slots=True)
class Action:
    name: str
    help: str
    run: Callable[[Client, argparse.Namespace], Any]
    arguments: tuple[Argument, ...] = ()
    columns: Columns = ()  # how a table shows the rows the action returns
    text: Callable[[Any], str] | None = None  # how a result that is not rows shows


# -- arguments shared by many actions ---------------------------------------------------

NAME: Argument = (("name",), {"help": "the object's name"})
VHOST: Argument = (("--vhost",), {"default": "/", "help": "virtual host (default: /)"})
VHOST_FILTER: Argument = (("--vhost",), {"help": "only this virtual host (default: all)"})
# not "user": that is the login of --user
TARGET_USER: Argument = (("target_user",), {"metavar": "USER", "help": "the user"})
NEW_PASSWORD: Argument = (("new_password",), {
    "metavar": "PASSWORD", "nargs": "?",
    "help": "the password (default: the first line of stdin)"})
OPERATOR: Argument = (("--operator",), {
    "action": "store_true", "help": "an operator policy (what operators impose on users')"})
LIMIT: Argument = (("limit",), {"help": "max-connections, max-queues (vhosts) or"
                                        " max-channels (users)"})
OF_USER: Argument = (("--of-user",), {"metavar": "USER",
                                      "help": "a limit of this user, not of a vhost"})
ARGUMENT: Argument = (("--argument",), {
    "action": "append", "default": [], "metavar": "KEY=VALUE",
    "help": "an x-argument, e.g. x-max-length=1000 (VALUE is read as JSON if it parses,"
            " else as text); repeatable"})


def _arguments(pairs: Sequence[str]) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, equals, text = pair.partition("=")
        if not equals or not key:
            raise SystemExit(f"mainstem ctl: --argument wants KEY=VALUE, got {pair!r}")
        try:
            arguments[key] = json.loads(text)
        except ValueError:
            arguments[key] = text
    return arguments


# -- actions ----------------------------------------------------------------------------

def _new_password(args: argparse.Namespace) -> str:
    """PASSWORD from the command line, or else the first line of stdin (so that it need
    not show in the process list)."""
    if args.new_password is not None:
        return str(args.new_password)
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise Refused("no password given (as an argument or on stdin)")
    return password


def _add_user(client: Client, args: argparse.Namespace) -> None:
    """As rabbitmqctl add_user: a user that exists is refused, not changed (a PUT would
    replace its password and tags)."""
    try:
        client.call("GET", f"/api/users/{_q(args.name)}")
    except ApiError as exc:
        if exc.status != 404:
            raise
    else:
        raise Refused(f"user '{args.name}' already exists")
    client.call("PUT", f"/api/users/{_q(args.name)}",
                {"password": _new_password(args), "tags": args.tags})


def _set_password(client: Client, args: argparse.Namespace) -> None:
    """As rabbitmqctl change_password: the tags stay (the API's PUT replaces both)."""
    user = client.call("GET", f"/api/users/{_q(args.name)}")
    client.call("PUT", f"/api/users/{_q(args.name)}",
                {"password": _new_password(args), "tags": user["tags"]})


def _set_tags(client: Client, args: argparse.Namespace) -> None:
    """As rabbitmqctl set_user_tags: the password stays (a PUT without one keeps it)."""
    client.call("GET", f"/api/users/{_q(args.name)}")  # 404 for an unknown user
    client.call("PUT", f"/api/users/{_q(args.name)}", {"tags": list(args.tags)})


def _list_permissions(client: Client, args: argparse.Namespace) -> Any:
    if args.target_user:
        return client.call("GET", f"/api/users/{_q(args.target_user)}/permissions")
    if args.vhost:
        return client.call("GET", f"/api/vhosts/{_q(args.vhost)}/permissions")
    return client.call("GET", "/api/permissions")


def _set_permissions(client: Client, args: argparse.Namespace) -> None:
    client.call("PUT", f"/api/permissions/{_q(args.vhost)}/{_q(args.target_user)}",
                {"configure": args.configure, "write": args.write, "read": args.read})


def _policies(args: argparse.Namespace) -> str:
    return "operator-policies" if args.operator else "policies"


def _set_policy(client: Client, args: argparse.Namespace) -> None:
    """As rabbitmqctl set_policy: NAME PATTERN DEFINITION (a JSON object)."""
    try:
        definition = json.loads(args.definition)
    except ValueError:
        raise Refused(f"the definition is not JSON: {args.definition!r}") from None
    client.call("PUT", f"/api/{_policies(args)}/{_q(args.vhost)}/{_q(args.name)}",
                {"pattern": args.pattern, "definition": definition,
                 "priority": args.priority, "apply-to": args.apply_to})


def _add_vhost(client: Client, args: argparse.Namespace) -> None:
    metadata = {"description": args.description, "tags": args.tags,
                "default_queue_type": args.default_queue_type}
    client.call("PUT", f"/api/vhosts/{_q(args.name)}",
                {key: value for key, value in metadata.items() if value is not None})


def _list_streams(client: Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = client.call("GET", _in_vhost(args, "streams"))
    for row in rows:
        row["partition_count"] = len(row["partitions"])
    return rows


def _stream_replicas(client: Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per partition: where it lives in a cluster, and how far behind each
    follower is (known to the node that leads it: ask that node for lag)."""
    rows = []
    for stream in client.call("GET", _in_vhost(args, "streams")):
        for partition in stream["partitions"]:
            lag = partition.get("replica_lag") or {}
            rows.append({
                "vhost": stream["vhost"], "stream": stream["name"],
                "partition": partition["index"], "leader": partition.get("leader") or "",
                "epoch": partition.get("epoch", ""),
                "replicas": ",".join(partition.get("replicas", [])),
                "in_sync": ",".join(partition.get("in_sync", [])),
                "lag": ",".join(f"{node}={behind}" for node, behind in sorted(lag.items())),
            })
    return rows


def _verify_streams(client: Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per partition: what the scrub checked and found (`--now`: a pass first)."""
    path = f"/api/streams/{_q(args.vhost)}/{_q(args.name)}/verify"
    report = client.call("POST" if args.now else "GET", path)
    return [{**row, "damaged_chunk_ids": ",".join(map(str, row["damaged_chunk_ids"])),
             "repaired": ",".join(str(r["chunk_id"]) for r in row["repaired"])}
            for row in report["partitions"]]


_TIER_STATS: Columns = (("uploads", "uploads"), ("uploaded_bytes", "uploaded_bytes"),
                        ("upload_lag_bytes", "upload_lag_bytes"), ("errors", "errors"),
                        ("deletes_pending", "deletes_pending"), ("deleted", "deleted"),
                        ("fenced", "fenced"), ("last_error", "last_error"))
_TIER_PARTITIONS: Columns = (
    ("vhost", "vhost"), ("stream", "stream"), ("partition", "partition"),
    ("local_bytes", "local_bytes"), ("tiered_bytes", "tiered_bytes"),
    ("tiered_segments", "tiered_segments"), ("local_first_offset", "local_first_offset"))


def _tiering_text(tiering: dict[str, Any]) -> str:
    """The tier and its counters, then one row per partition."""
    if tiering["url"] is None:
        head = "tier: none (every stream is on local disk)"
    else:
        head = f"tier: {tiering['url']}\n{format_table([tiering['stats']], _TIER_STATS)}"
    return f"{head}\n\n{format_table(tiering['partitions'], _TIER_PARTITIONS)}"


def _declare_queue(client: Client, args: argparse.Namespace) -> None:
    arguments = _arguments(args.argument)
    if args.type:
        arguments["x-queue-type"] = args.type
    client.call("PUT", f"/api/queues/{_q(args.vhost)}/{_q(args.name)}", {
        "durable": args.durable, "auto_delete": args.auto_delete, "arguments": arguments})


def _delete_queue(client: Client, args: argparse.Namespace) -> None:
    conditions = {key: "true" for key, wanted in (("if-unused", args.if_unused),
                                                   ("if-empty", args.if_empty)) if wanted}
    query = "?" + urlencode(conditions) if conditions else ""
    client.call("DELETE", f"/api/queues/{_q(args.vhost)}/{_q(args.name)}{query}")


def _declare_exchange(client: Client, args: argparse.Namespace) -> None:
    client.call("PUT", f"/api/exchanges/{_q(args.vhost)}/{_q(args.name)}", {
        "type": args.type, "durable": args.durable, "auto_delete": args.auto_delete,
        "internal": args.internal, "arguments": _arguments(args.argument)})


def _declare_binding(client: Client, args: argparse.Namespace) -> None:
    kind = "e" if args.destination_type == "exchange" else "q"
    client.call("POST", f"/api/bindings/{_q(args.vhost)}/e/{_q(args.source)}/{kind}/"
                f"{_q(args.destination)}", {"routing_key": args.routing_key,
                                            "arguments": _arguments(args.argument)})


def _close_connection(client: Client, args: argparse.Namespace) -> None:
    client.call("DELETE", f"/api/connections/{_q(args.name)}", headers={"X-Reason": args.reason})


def _export_definitions(client: Client, args: argparse.Namespace) -> None:
    definitions = client.call("GET", _in_vhost(args, "definitions"))
    text = json.dumps(definitions, indent=2) + "\n"
    if args.file == "-":
        sys.stdout.write(text)
    else:
        Path(args.file).write_text(text)
        print(f"definitions written to {args.file}", file=sys.stderr)


def _import_definitions(client: Client, args: argparse.Namespace) -> None:
    source = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    try:
        definitions = json.loads(source)
    except ValueError as exc:
        raise SystemExit(f"mainstem ctl: {args.file} is not JSON: {exc}") from None
    answer = client.call("POST", _in_vhost(args, "definitions"), definitions)
    for warning in (answer or {}).get("warnings", []):  # what was ignored, per policy
        print(f"warning: {warning}", file=sys.stderr)


def _limit_path(args: argparse.Namespace) -> str:
    """A user's limit with --of-user, else the vhost's (--vhost)."""
    if args.of_user:
        return f"/api/user-limits/{_q(args.of_user)}/{_q(args.limit)}"
    return f"/api/vhost-limits/{_q(args.vhost)}/{_q(args.limit)}"


def _list_limits(client: Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per limit set: its vhost or user, its name and value."""
    return [{"vhost": row.get("vhost", ""), "user": row.get("user", ""), "limit": name,
             "value": value}
            for path in ("/api/vhost-limits", "/api/user-limits")
            for row in client.call("GET", path) for name, value in row["value"].items()]


def _lag(client: Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    path = (f"/api/streams/{_q(args.vhost)}/{_q(args.stream)}/offsets" if args.stream
            else "/api/consumer-offsets")
    rows: list[dict[str, Any]] = client.call("GET", path)
    return rows


def _list(collection: str) -> Callable[[Client, argparse.Namespace], Any]:
    return lambda client, args: client.call("GET", _in_vhost(args, collection))


def _delete(collection: str) -> Callable[[Client, argparse.Namespace], Any]:
    return lambda client, args: client.call(
        "DELETE", f"/api/{collection}/{_q(args.vhost)}/{_q(args.name)}")


def _durability(noun: str) -> tuple[Argument, Argument]:
    return ((("--durable",), {"action": argparse.BooleanOptionalAction, "default": True,
                              "help": f"the {noun} survives a restart (default: durable)"}),
            (("--auto-delete",), {"action": "store_true",
                                  "help": f"delete the {noun} when its last user goes"}))


# group -> (help, actions); the order here is the order of --help
GROUPS: dict[str, tuple[str, tuple[Action, ...]]] = {
    "overview": ("node totals: connections, queues, messages ready and unacked", (
        Action("show", "the node's overview, as rabbitmqadmin show overview",
               lambda c, a: [c.call("GET", "/api/overview")],
               columns=(("version", "product_version"), ("node", "node"),
                        ("connections", "object_totals.connections"),
                        ("channels", "object_totals.channels"),
                        ("queues", "object_totals.queues"),
                        ("consumers", "object_totals.consumers"),
                        ("messages", "queue_totals.messages"),
                        ("ready", "queue_totals.messages_ready"),
                        ("unacked", "queue_totals.messages_unacknowledged"))),
    )),
    "queues": ("classic queues and streams: list, declare, purge, delete", (
        Action("list", "queues with messages ready, unacknowledged and consumers",
               _list("queues"), (VHOST_FILTER,),
               (("vhost", "vhost"), ("name", "name"), ("type", "type"),
                ("messages", "messages"), ("ready", "messages_ready"),
                ("unacked", "messages_unacknowledged"), ("consumers", "consumers"))),
        Action("declare", "declare a queue (PUT /api/queues/VHOST/NAME)", _declare_queue,
               (NAME, VHOST, *_durability("queue"),
                (("--type",), {"choices": ("classic", "quorum", "stream"),
                               "help": "x-queue-type (default: the broker's, classic)"}),
                ARGUMENT)),
        Action("purge", "delete every ready message of a queue", lambda c, a: c.call(
            "DELETE", f"/api/queues/{_q(a.vhost)}/{_q(a.name)}/contents"), (NAME, VHOST)),
        Action("delete", "delete a queue with its messages", _delete_queue,
               (NAME, VHOST,
                (("--if-unused",), {"action": "store_true",
                                    "help": "only if it has no consumers"}),
                (("--if-empty",), {"action": "store_true",
                                   "help": "only if it holds no ready messages"}))),
    )),
    "exchanges": ("exchanges: list, declare, delete", (
        Action("list", "exchanges with their type and durability", _list("exchanges"),
               (VHOST_FILTER,),
               (("vhost", "vhost"), ("name", "name"), ("type", "type"),
                ("durable", "durable"), ("auto_delete", "auto_delete"))),
        Action("declare", "declare an exchange (PUT /api/exchanges/VHOST/NAME)",
               _declare_exchange,
               (NAME, VHOST,
                (("--type",), {"default": "direct",
                               "help": "direct, fanout, topic or headers (default: direct)"}),
                *_durability("exchange"),
                (("--internal",), {"action": "store_true",
                                   "help": "only other exchanges may publish to it"}),
                ARGUMENT)),
        Action("delete", "delete an exchange and its bindings", _delete("exchanges"),
               (NAME, VHOST)),
    )),
    "bindings": ("bindings between exchanges and queues: list, declare", (
        Action("list", "every binding, the default exchange's included", _list("bindings"),
               (VHOST_FILTER,),
               (("vhost", "vhost"), ("source", "source"), ("destination", "destination"),
                ("type", "destination_type"), ("routing_key", "routing_key"))),
        Action("declare", "bind a queue (or exchange) to an exchange", _declare_binding,
               ((("source",), {"help": "the exchange messages come from"}),
                (("destination",), {"help": "the queue (or exchange) they go to"}), VHOST,
                (("--destination-type",), {"choices": ("queue", "exchange"),
                                           "default": "queue",
                                           "help": "what the destination is (default: queue)"}),
                (("--routing-key",), {"default": "", "help": "the binding key"}), ARGUMENT)),
    )),
    "connections": ("client connections of every protocol: list, close", (
        Action("list", "open connections with their client-provided name and traffic",
               _list("connections"), (VHOST_FILTER,),
               (("id", "id"), ("name", "name"), ("protocol", "protocol"), ("user", "user"),
                ("vhost", "vhost"), ("client", "user_provided_name"),
                ("recv_oct", "recv_oct"), ("send_oct", "send_oct"))),
        Action("close", "close a connection, by name or id, telling the client why",
               _close_connection,
               ((("name",), {"help": "the connection's name or numeric id"}),
                (("--reason",), {"default": "closed by mainstem ctl",
                                 "help": "what the client is told"}))),
    )),
    "channels": ("AMQP 0-9-1 channels", (
        Action("list", "open channels with consumers, unacknowledged messages and prefetch",
               _list("channels"), (VHOST_FILTER,),
               (("name", "name"), ("vhost", "vhost"), ("user", "user"),
                ("consumers", "consumer_count"), ("unacked", "messages_unacknowledged"),
                ("prefetch", "prefetch_count"))),
    )),
    "consumers": ("consumers and subscriptions of every protocol", (
        Action("list", "consumers with their queue, connection and acknowledgement mode",
               _list("consumers"), (VHOST_FILTER,),
               (("vhost", "queue.vhost"), ("queue", "queue.name"), ("tag", "consumer_tag"),
                ("connection", "channel_details.connection_name"),
                ("ack_required", "ack_required"), ("prefetch", "prefetch_count"))),
    )),
    "users": ("users: list, add, set-password, set-tags, delete", (
        Action("list", "users and their tags", lambda c, a: c.call("GET", "/api/users"),
               columns=(("name", "name"), ("tags", "tags"))),
        Action("add", "add a user (refused if it exists)", _add_user,
               (NAME, NEW_PASSWORD,
                (("--tags",), {"default": "",
                               "help": "comma-separated, e.g. administrator,monitoring"}))),
        Action("set-password", "change a user's password, keeping its tags", _set_password,
               (NAME, NEW_PASSWORD)),
        Action("set-tags", "replace a user's tags (none: clear them), keeping its password",
               _set_tags, (NAME, (("tags",), {
                   "nargs": "*", "metavar": "TAG",
                   "help": "e.g. administrator monitoring; none clears the tags"}))),
        Action("delete", "delete a user with its permissions", lambda c, a: c.call(
            "DELETE", f"/api/users/{_q(a.name)}"), (NAME,)),
    )),
    "permissions": ("what users may configure, write and read in each vhost", (
        Action("list", "permissions of every user in every vhost (or of one of them)",
               _list_permissions,
               ((("target_user",), {"metavar": "USER", "nargs": "?",
                                    "help": "only this user's"}), VHOST_FILTER),
               (("user", "user"), ("vhost", "vhost"), ("configure", "configure"),
                ("write", "write"), ("read", "read"))),
        Action("set", "set a user's permissions in a vhost (regular expressions)",
               _set_permissions,
               (TARGET_USER, VHOST,
                *((("--" + kind,), {"default": ".*", "help": f"{kind} pattern (default: .*)"})
                  for kind in ("configure", "write", "read")))),
        Action("clear", "remove a user's permissions in a vhost", lambda c, a: c.call(
            "DELETE", f"/api/permissions/{_q(a.vhost)}/{_q(a.target_user)}"),
            (TARGET_USER, VHOST)),
    )),
    "policies": ("policies and operator policies (--operator): list, set, clear", (
        Action("list", "policies of every vhost (or of one)",
               lambda c, a: c.call("GET", _in_vhost(a, _policies(a))), (VHOST_FILTER, OPERATOR),
               (("vhost", "vhost"), ("name", "name"), ("pattern", "pattern"),
                ("apply-to", "apply-to"), ("priority", "priority"),
                ("definition", "definition"))),
        Action("set", "set a policy, as rabbitmqctl set_policy", _set_policy,
               (NAME, (("pattern",), {"help": "regular expression on object names"}),
                (("definition",), {"help": "a JSON object, e.g. '{\"max-length\": 1000}'"}),
                VHOST, OPERATOR,
                (("--priority",), {"type": int, "default": 0, "help": "default: 0"}),
                (("--apply-to",), {"default": "all", "choices": (
                    "all", "queues", "classic_queues", "quorum_queues", "streams",
                    "exchanges"), "help": "default: all"}))),
        Action("clear", "remove a policy", lambda c, a: c.call(
            "DELETE", f"/api/{_policies(a)}/{_q(a.vhost)}/{_q(a.name)}"),
            (NAME, VHOST, OPERATOR)),
    )),
    "vhosts": ("virtual hosts: list, add, delete", (
        Action("list", "virtual hosts with their metadata",
               lambda c, a: c.call("GET", "/api/vhosts"),
               columns=(("name", "name"), ("default_queue_type", "default_queue_type"),
                        ("tags", "tags"), ("description", "description"))),
        Action("add", "add a virtual host, or set its metadata", _add_vhost,
               (NAME, (("--description",), {"help": "what the vhost is for"}),
                (("--tags",), {"help": "comma-separated"}),
                (("--default-queue-type",), {
                    "choices": ("classic", "quorum", "stream"),
                    "help": "the type of a queue declared without x-queue-type"}))),
        Action("delete", "delete a virtual host and everything in it", lambda c, a: c.call(
            "DELETE", f"/api/vhosts/{_q(a.name)}"), (NAME,)),
    )),
    "streams": ("mainstem's streams (partitioned logs): list, add, delete, replicas, tiering,"
                " verify", (
        Action("list", "streams with partitions, messages and size", _list_streams,
               (VHOST_FILTER,),
               (("vhost", "vhost"), ("name", "name"), ("partitions", "partition_count"),
                ("messages", "messages"), ("size_bytes", "size_bytes"))),
        Action("add", "create a stream", lambda c, a: c.call(
            "PUT", f"/api/streams/{_q(a.vhost)}/{_q(a.name)}", {"partitions": a.partitions}),
            (NAME, VHOST, (("--partitions",), {"type": int, "default": 1,
                                               "help": "number of partitions (default: 1)"}))),
        Action("delete", "delete a stream with its data", _delete("streams"), (NAME, VHOST)),
        Action("replicas", "each partition's leader, epoch, replicas, in-sync set and "
               "followers' lag (in a cluster)", _stream_replicas, (VHOST_FILTER,),
               (("vhost", "vhost"), ("stream", "stream"), ("partition", "partition"),
                ("leader", "leader"), ("epoch", "epoch"), ("replicas", "replicas"),
                ("in_sync", "in_sync"), ("lag", "lag"))),
        Action("tiering", "the broker's tier and counters; each partition's bytes local and"
               " tiered, tiered segments and first local offset", _list("tiering"),
               (VHOST_FILTER,), text=_tiering_text),
        Action("verify", "per partition: chunks checked, damaged chunk ids, repaired chunk"
               " ids, last full pass of the background scrub", _verify_streams,
               (NAME, VHOST, (("--now",), {"action": "store_true",
                                           "help": "check every chunk now, then report"})),
               (("partition", "name"), ("chunks_checked", "chunks_checked"),
                ("damaged", "damaged_chunk_ids"), ("repaired", "repaired"),
                ("last_full_pass", "last_full_pass"))),
    )),
    "tables": ("streams written as tables (Parquet and Iceberg metadata in the tier): list,"
               " rebuild", (
        Action("list", "each table's lag, data files, rows, bytes, errors and metadata",
               _list("tables"), (VHOST_FILTER,),
               (("vhost", "vhost"), ("stream", "stream"), ("lag", "lag"), ("files", "files"),
                ("rows", "rows"), ("bytes", "bytes"), ("errors", "errors"),
                ("last_error", "last_error"), ("metadata", "metadata_location"))),
        Action("rebuild", "drop a stream's table and write it again from the stream's start"
               " (on the node leading the stream)", lambda c, a: [c.call(
                   "POST", f"/api/tables/{_q(a.vhost)}/{_q(a.name)}/rebuild")],
               (NAME, VHOST), (("vhost", "vhost"), ("stream", "stream"),
                               ("dropped_files", "dropped_files"))),
    )),
    "limits": ("limits of vhosts (max-connections, max-queues) and users (max-connections,"
               " max-channels)", (
        Action("list", "every limit set", _list_limits, (),
               (("vhost", "vhost"), ("user", "user"), ("limit", "limit"), ("value", "value"))),
        Action("set", "set a vhost's limit (or a user's, with --of-user); 0 allows none, a"
               " negative value any number", lambda c, a: c.call(
                   "PUT", _limit_path(a), {"value": a.value}),
               (LIMIT, (("value",), {"type": int, "help": "the limit"}), VHOST, OF_USER)),
        Action("clear", "remove a vhost's limit (or a user's, with --of-user)", lambda c, a:
               c.call("DELETE", _limit_path(a)), (LIMIT, VHOST, OF_USER)),
    )),
    "nodes": ("the cluster's live nodes (this node alone without a cluster)", (
        Action("list", "live nodes with their host and whether they run",
               lambda c, a: c.call("GET", "/api/nodes"), (),
               (("name", "name"), ("running", "running"), ("host", "host"))),
    )),
    "definitions": ("users, vhosts, permissions, queues, exchanges and bindings as JSON, in"
                    " RabbitMQ's definitions format", (
        Action("export", "write the definitions to FILE (- for stdout)", _export_definitions,
               ((("file",), {"nargs": "?", "default": "-", "help": "default: stdout"}),
                VHOST_FILTER)),
        Action("import", "load definitions from FILE (- for stdin), e.g. one exported from"
               " RabbitMQ", _import_definitions,
               ((("file",), {"help": "a definitions JSON file, - for stdin"}),
                VHOST_FILTER)),
    )),
}

def _status(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    """What rabbitmqctl status shows first: the node, its version and uptime, listeners,
    memory, disk space and alarms (from /api/overview and this node's /api/nodes row)."""
    overview = client.call("GET", "/api/overview")
    node = client.call("GET", "/api/nodes")[0]
    return {
        "node": node["name"], "product": overview["product_name"],
        "version": overview["product_version"],
        "rabbitmq_version": overview["rabbitmq_version"],
        "uptime_s": node["uptime"] // 1000,
        "listeners": [{key: listener[key] for key in ("protocol", "ip_address", "port")}
                      for listener in overview["listeners"]],
        "memory": {"used": node.get("mem_used"), "limit": node.get("mem_limit")},
        "disk_free": {"free": node.get("disk_free"), "limit": node.get("disk_free_limit")},
        "alarms": node.get("alarms", []),
    }


def _status_text(status: dict[str, Any]) -> str:
    listeners = [f"  {row['protocol']:<12} {row['ip_address'] or '*'}:{row['port']}"
                 for row in status["listeners"]]
    memory, disk = status["memory"], status["disk_free"]
    return "\n".join([
        f"Status of node {status['node']}",
        f"Version: {status['product']} {status['version']}"
        f" (RabbitMQ {status['rabbitmq_version']})",
        f"Uptime: {status['uptime_s']} s",
        "Listeners:", *(listeners or ["  (none)"]),
        f"Memory: {_bytes(memory['used'])} used, limit {_bytes(memory['limit'])}",
        f"Disk free: {_bytes(disk['free'])}, limit {_bytes(disk['limit'])}",
        f"Alarms: {', '.join(status['alarms']) or 'none'}",
    ])


def _bytes(count: int | None) -> str:
    return "unknown" if count is None else f"{count / 2**20:.1f} MiB"


def _environment_text(environment: dict[str, Any]) -> str:
    """One `section.key = value` line per setting, as in the TOML file (values as JSON)."""
    return "\n".join(f"{key} = {json.dumps(value)}"
                     for key, value in sorted(_flat(environment).items()))


def _flat(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


# commands without actions: group -> what it runs
COMMANDS: dict[str, Action] = {
    "status": Action("status", "the node: name, version, uptime, listeners, memory, disk"
                     " free and alarms, as rabbitmqctl status", _status, text=_status_text),
    "environment": Action("environment", "the node's effective configuration, secrets"
                          " redacted, as rabbitmqctl environment",
                          lambda c, a: c.call("GET", "/api/environment"),
                          text=_environment_text),
}
_LAG_COLUMNS: Columns = (("vhost", "vhost"), ("stream", "stream"), ("partition", "partition"),
                         ("reference", "reference"), ("offset", "offset"), ("lag", "lag"))


def add_ctl_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=os.environ.get("MAINSTEM_ADMIN_URL", DEFAULT_URL),
                        help=f"management API (default: $MAINSTEM_ADMIN_URL or {DEFAULT_URL})")
    parser.add_argument("--user", default=os.environ.get("MAINSTEM_ADMIN_USER", "guest"),
                        help="login (default: $MAINSTEM_ADMIN_USER or guest)")
    parser.add_argument("--password", default=os.environ.get("MAINSTEM_ADMIN_PASS", "guest"),
                        help="password (default: $MAINSTEM_ADMIN_PASS or guest)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    groups = parser.add_subparsers(dest="group", metavar="GROUP", required=True,
                                   title="groups")
    for group, (summary, actions) in GROUPS.items():
        group_parser = groups.add_parser(group, help=summary, description=summary)
        subparsers = group_parser.add_subparsers(dest="action", metavar="ACTION",
                                                 required=True, title="actions")
        for action in actions:
            sub = subparsers.add_parser(action.name, help=action.help, description=action.help)
            for names, options in action.arguments:
                sub.add_argument(*names, **options)
            sub.set_defaults(ctl=action)
    for name, command in COMMANDS.items():
        groups.add_parser(name, help=command.help, description=command.help).set_defaults(
            ctl=command, action=name)
    lag = groups.add_parser("lag", help="stored consumer offsets of streams and their lag",
                            description="stored consumer offsets of streams and their lag")
    lag.add_argument("stream", nargs="?", help="only this stream's (default: every stream)")
    lag.add_argument("--vhost", default="/", help="the stream's virtual host (default: /)")
    lag.set_defaults(ctl=Action("lag", "", _lag, columns=_LAG_COLUMNS), action="lag")


def run_ctl(args: argparse.Namespace) -> int:
    client = Client(args.url, args.user, args.password)
    action: Action = args.ctl
    try:
        result = action.run(client, args)
    except Refused as exc:
        print(f"mainstem ctl: {exc}", file=sys.stderr)
        return 1
    except (URLError, OSError) as exc:
        print(f"mainstem ctl: cannot reach {client.url}: {exc}", file=sys.stderr)
        return 2
    if result is None:
        if not args.json and action.run not in _SILENT:
            print("ok")
        return 0
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(action.text(result) if action.text else format_table(result, action.columns))
    return 0


_SILENT = (_export_definitions,)  # their output is the definitions themselves


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    cells = [[title for title, _ in columns]]
    for row in rows:
        cells.append([_cell(_lookup(row, key)) for _, key in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths,
                                                                        strict=True)).rstrip()
                     for line in cells)


def _lookup(row: dict[str, Any], key: str) -> object:
    value: object = row
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _cell(value: object) -> str:
    """A value as a table shows it: a list comma-separated, an object (a policy's
    definition) as JSON."""
    if isinstance(value, dict) or (isinstance(value, list | tuple)
                                   and any(isinstance(item, dict | list) for item in value)):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return "" if value is None else str(value)
