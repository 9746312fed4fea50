"""Errors of the broker core; each protocol adapter maps them to its own codes."""

from __future__ import annotations

import os


class BrokerError(Exception):
    """Base of every error the broker reports; the message is meant for the client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(BrokerError):
    """A namespace, stream, user, permission or offset does not exist."""


class AlreadyExists(BrokerError):
    """Creating something whose name is taken."""


class AccessRefused(BrokerError):
    """An authenticated user lacks the permission for an operation."""


class AuthenticationFailed(BrokerError):
    """Unknown user, wrong password, or a login from a refused address."""


class PreconditionFailed(BrokerError):
    """The request is well formed but conflicts with the current state."""


class LimitReached(PreconditionFailed):
    """A new queue or stream over its virtual host's `max-queues` (AMQP and the stream
    protocol answer it as PreconditionFailed; Iggy, BSON and segments have codes of their
    own)."""


class NotAllowed(BrokerError):
    """A connection or channel over a virtual host's or user's limit (AMQP NOT_ALLOWED)."""


class InvalidArgument(BrokerError):
    """A malformed name, number or pattern."""


class Unavailable(BrokerError):
    """A store the answer waits for (the cluster's metadata store) did not answer in time;
    the message says whether the change is made nowhere or its outcome is unknown."""


class StorageFailed(BrokerError):
    """The disk refused a metadata write (full, a file too big, an I/O error): nothing
    changed. Each protocol answers it with its error for a failed write and keeps the
    connection; the same request succeeds once the disk takes writes again."""


def storage_failure(error: BaseException) -> str:
    """What a client is told of records the log could not store: the cause, never a path
    (the server log has the whole error)."""
    if isinstance(error, OSError) and error.errno is not None:
        return f"the log could not store it: {os.strerror(error.errno)}"
    if isinstance(error, OSError):
        return "the log could not store it: the write was cut short (disk full?)"
    return "the log could not store it"
