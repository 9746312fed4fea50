"""Virtual host and user limits, as RabbitMQ has them.

A virtual host may limit its connections and queues (`max-connections`, `max-queues`), a
user its connections and channels (`max-connections`, `max-channels`, counted over all the
user's connections). The values live in the catalog (so a cluster shares them); what they
are compared with is counted here, on this node: connections admitted and channels open.
A negative value means no limit and 0 allows none, as in RabbitMQ.

A vhost's connections are those that name it at login (AMQP, stream, BSON); Iggy and
segment logins name none and count under their user's limit only. Its queues are its
queues and streams however made: every protocol's new stream passes `check_queue`
(`BrokerCore.create_stream`), each protocol answering `LimitReached` its own way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from mainstem.broker.catalog import Catalog
from mainstem.broker.errors import InvalidArgument, LimitReached, NotAllowed

VHOST_LIMIT = "vhost_limit"
USER_LIMIT = "user_limit"
MAX_CONNECTIONS = "max-connections"
MAX_QUEUES = "max-queues"
MAX_CHANNELS = "max-channels"
NAMES = {VHOST_LIMIT: (MAX_CONNECTIONS, MAX_QUEUES), USER_LIMIT: (MAX_CONNECTIONS, MAX_CHANNELS)}


def checked_value(kind: str, name: str, value: object) -> int:
    """`value` as the integer stored for limit `name`; InvalidArgument for an unknown name
    or a value that is not an integer."""
    if name not in NAMES[kind]:
        known = ", ".join(NAMES[kind])
        raise InvalidArgument(f"unknown limit '{name}': expected one of {known}")
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"limit '{name}' must be an integer, got {value!r}")
    return value


class Limits:
    """The limits set, and this node's tallies of what they limit."""

    def __init__(self, catalog: Catalog, count_queues: Callable[[str], int]) -> None:
        self._catalog = catalog
        self._count_queues = count_queues  # queues and streams of a virtual host
        self._connections: Counter[tuple[str, str]] = Counter()  # (kind, owner) -> count
        self._channels: Counter[str] = Counter()  # user -> channels open

    async def set(self, kind: str, owner: str, name: str, value: object) -> None:
        """Set a limit, answered once made everywhere (`Catalog.set_limit_everywhere`)."""
        await self._catalog.set_limit_everywhere(kind, owner, name,
                                                 checked_value(kind, name, value))

    async def clear(self, kind: str, owner: str, name: str) -> None:
        await self._catalog.clear_limit_everywhere(kind, owner, name)

    def listed(self, kind: str, owner: str | None = None) -> dict[str, dict[str, int]]:
        return self._catalog.list_limits(kind, owner)

    def _reached(self, kind: str, owner: str, name: str, count: int) -> int | None:
        """The limit `count` has reached (no room for one more), None if there is room."""
        limit = self._catalog.list_limits(kind, owner).get(owner, {}).get(name)
        return limit if limit is not None and 0 <= limit <= count else None

    def admit_connection(self, user: str, vhost: str | None) -> Callable[[], None]:
        """Count a connection of `user` (to `vhost`, for the protocols that have one);
        NotAllowed with RabbitMQ's text when a limit is reached. Returns its release."""
        if vhost is not None:
            limit = self._reached(VHOST_LIMIT, vhost, MAX_CONNECTIONS,
                                  self._connections[VHOST_LIMIT, vhost])
            if limit is not None:
                raise NotAllowed(f"access to vhost '{vhost}' refused for user '{user}':"
                                 f" connection limit ({limit}) is reached")
        limit = self._reached(USER_LIMIT, user, MAX_CONNECTIONS,
                              self._connections[USER_LIMIT, user])
        if limit is not None:
            raise NotAllowed(f"Connection refused for user '{user}':"
                             f" user connection limit ({limit}) is reached")
        keys = [(USER_LIMIT, user)] + ([] if vhost is None else [(VHOST_LIMIT, vhost)])
        self._connections.update(keys)

        def release() -> None:
            self._connections -= Counter(keys)

        return release

    def open_channel(self, user: str) -> None:
        """Count a channel of `user`; NotAllowed (RabbitMQ's text) over `max-channels`."""
        limit = self._reached(USER_LIMIT, user, MAX_CHANNELS, self._channels[user])
        if limit is not None:
            raise NotAllowed(f"number of channels opened for user '{user}' has reached the"
                             f" maximum allowed user limit of ({limit})")
        self._channels[user] += 1

    def close_channel(self, user: str) -> None:
        self._channels -= Counter((user,))

    def check_queue(self, vhost: str, name: str) -> None:
        """Before a new queue or stream: LimitReached over the vhost's `max-queues`."""
        limit = self._reached(VHOST_LIMIT, vhost, MAX_QUEUES, self._count_queues(vhost))
        if limit is not None:
            raise LimitReached(f"cannot declare queue '{name}': queue limit in vhost"
                               f" '{vhost}' ({limit}) is reached")
