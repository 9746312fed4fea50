"""Authentication and per-namespace authorization, with RabbitMQ's semantics.

Passwords are stored as scrypt hashes; hashes imported from RabbitMQ's definitions files
(salted SHA-256, SHA-512 or MD5) are kept as they are and verified as RabbitMQ does. A
successful login is remembered in memory,
so a client that reconnects often pays the deliberately slow KDF once, not per
connection. Permissions are three regular expressions (configure, write, read) per
user and namespace, matched unanchored against the resource name as RabbitMQ does, by RE2
(`broker/patterns.py`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal

from mainstem.broker.catalog import DEFAULT_NAMESPACE, Catalog, UserRecord
from mainstem.broker.errors import (
    AccessRefused,
    AlreadyExists,
    AuthenticationFailed,
    InvalidArgument,
    NotFound,
)
from mainstem.broker.patterns import name_pattern
from mainstem.broker.settings import CoreSettings

PermissionKind = Literal["configure", "write", "read"]
PERMISSION_KINDS: tuple[PermissionKind, ...] = ("configure", "write", "read")
ADMINISTRATOR_TAG = "administrator"
_SCRYPT_PREFIX = "scrypt"
# RabbitMQ's hashing algorithms: base64(4-byte salt + H(salt + UTF-8 password))
RABBIT_HASHING = {"rabbit_password_hashing_sha256": "sha256",
                  "rabbit_password_hashing_sha512": "sha512",
                  "rabbit_password_hashing_md5": "md5"}
MAINSTEM_HASHING = "mainstem_password_hashing_scrypt"
DEFAULT_HASHING = "rabbit_password_hashing_sha256"  # RabbitMQ's, for a hash without one
_RABBIT_PREFIX = "rabbit_"
_RABBIT_SALT_BYTES = 4


@dataclass(frozen=True, slots=True)
class ScryptParams:
    """Cost of new password hashes; verification reads the cost stored in each hash."""

    n: int = 2**14
    r: int = 8
    p: int = 1
    salt_bytes: int = 16
    key_bytes: int = 32


PRODUCTION_SCRYPT = ScryptParams()


@dataclass(frozen=True, slots=True)
class User:
    """An authenticated user, as protocol connections hold it."""

    name: str
    tags: tuple[str, ...] = ()

    @property
    def is_administrator(self) -> bool:
        return ADMINISTRATOR_TAG in self.tags


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int, key_bytes: int) -> bytes:
    # OpenSSL refuses more than 32 MiB by default; allow exactly what these costs need.
    needed_memory = 128 * r * (n + p + 2) + 1024
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=needed_memory, dklen=key_bytes
    )


def hash_password(password: str, params: ScryptParams = PRODUCTION_SCRYPT) -> str:
    """Return "scrypt$n$r$p$salt_b64$hash_b64" for `password` with a fresh random salt."""
    salt = secrets.token_bytes(params.salt_bytes)
    key = _scrypt(password, salt, params.n, params.r, params.p, params.key_bytes)
    return "$".join(
        (_SCRYPT_PREFIX, str(params.n), str(params.r), str(params.p), _b64(salt), _b64(key))
    )


def verify_password(password: str, password_hash: str) -> bool:
    """True if `password` produces `password_hash`; False also for a malformed hash."""
    if password_hash.startswith(_RABBIT_PREFIX):
        return _verify_rabbit_hash(password, password_hash)
    try:
        prefix, n, r, p, salt, expected = password_hash.split("$")
        if prefix != _SCRYPT_PREFIX:
            return False
        expected_key = base64.b64decode(expected, validate=True)
        key = _scrypt(password, base64.b64decode(salt, validate=True), int(n), int(r), int(p),
                      len(expected_key))
    # wrong field count, bad base64 or integers, costs OpenSSL refuses
    except (ValueError, OverflowError):
        return False
    return hmac.compare_digest(key, expected_key)


def _verify_rabbit_hash(password: str, stored: str) -> bool:
    prefix, _, encoded = stored.partition("$")
    salted = base64.b64decode(encoded)
    salt, expected = salted[:_RABBIT_SALT_BYTES], salted[_RABBIT_SALT_BYTES:]
    digest = hashlib.new(prefix.removeprefix(_RABBIT_PREFIX), salt + password.encode("utf-8"))
    return hmac.compare_digest(digest.digest(), expected)


def import_password_hash(password_hash: str, algorithm: str) -> str:
    """A definitions file's password hash as mainstem stores it; "" stays "" (a user who
    cannot log in with a password, as in RabbitMQ)."""
    if not password_hash:
        return ""
    if algorithm == MAINSTEM_HASHING:
        if not password_hash.startswith(_SCRYPT_PREFIX + "$"):
            raise InvalidArgument("password_hash is not a mainstem scrypt hash")
        return password_hash
    digest = RABBIT_HASHING.get(algorithm)
    if digest is None:
        known = ", ".join([*RABBIT_HASHING, MAINSTEM_HASHING])
        raise InvalidArgument(f"unknown hashing_algorithm '{algorithm}': expected one of {known}")
    try:
        salted = base64.b64decode(password_hash, validate=True)
    except ValueError:
        raise InvalidArgument("password_hash is not base64") from None
    if len(salted) != _RABBIT_SALT_BYTES + hashlib.new(digest).digest_size:
        raise InvalidArgument(f"password_hash is not a salted {digest} hash")
    return f"{_RABBIT_PREFIX}{digest}${password_hash}"


def export_password_hash(stored: str) -> tuple[str, str]:
    """(password_hash, hashing_algorithm) of a stored hash, for a definitions file."""
    if stored.startswith(_RABBIT_PREFIX):
        prefix, _, encoded = stored.partition("$")
        return encoded, f"rabbit_password_hashing_{prefix.removeprefix(_RABBIT_PREFIX)}"
    return stored, MAINSTEM_HASHING


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def is_loopback(peer_host: str | None) -> bool:
    """True for a loopback IP (IPv4-mapped included) and for None, an in-process peer."""
    if peer_host is None:
        return True
    try:
        address = ipaddress.ip_address(peer_host)
    except ValueError:  # a host name or garbage: not provably local
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


@lru_cache(maxsize=4096)
def _permits(pattern: str, resource: str) -> bool:
    """Whether a permission pattern grants `resource`; kept, as a publisher asks per batch."""
    # RabbitMQ turns "" into "^$"; resource names are never empty, so "" denies all.
    if not pattern:
        return False
    try:
        return name_pattern(pattern, "permission").search(resource)
    except InvalidArgument:  # stored before RE2 refused it, or edited by hand: fail closed
        return False


def check_patterns(configure: str, write: str, read: str) -> None:
    """Raise InvalidArgument unless each permission pattern is one RE2 can match."""
    for kind, pattern in zip(PERMISSION_KINDS, (configure, write, read), strict=True):
        name_pattern(pattern, f"{kind} permission")


class Auth:
    """Users, passwords and permissions of the broker, stored in the catalog."""

    def __init__(
        self, catalog: Catalog, settings: CoreSettings, kdf: ScryptParams = PRODUCTION_SCRYPT
    ) -> None:
        self._catalog = catalog
        self._kdf = kdf
        self._loopback_users = frozenset(settings.loopback_users)
        # user -> (digest of the password that verified, the stored hash it verified).
        # Keyed by user, so the cache holds at most one entry per user.
        self._verified: dict[str, tuple[bytes, str]] = {}
        # Keyed HMAC rather than a bare sha256: the digests in memory are useless
        # to anyone who reads them without this process's key.
        self._cache_key = secrets.token_bytes(32)
        if not catalog.list_users():
            self._bootstrap(settings)

    def _bootstrap(self, settings: CoreSettings) -> None:
        self.add_user(settings.bootstrap_user, settings.bootstrap_password, (ADMINISTRATOR_TAG,))
        self.set_permissions(settings.bootstrap_user, DEFAULT_NAMESPACE)

    # -- authentication -----------------------------------------------------------

    def authenticate(self, username: str, password: str, peer_host: str | None) -> User:
        """Check a login; `peer_host` is the client's IP, None for in-process clients.

        Raises AuthenticationFailed, with the same message for an unknown user and a
        wrong password so that a client cannot probe which users exist. An unknown user
        costs the same KDF as a wrong password, so the answer's timing tells nothing either.
        """
        record = self._catalog.get_user(username)
        if record is None:
            verify_password(password, self._dummy_hash)
            raise self._invalid(username)
        if not self._cached_match(record, password):
            if not verify_password(password, record.password_hash):
                raise self._invalid(username)
            self._verified[record.name] = (self._digest(password), record.password_hash)
        return self._admitted(record, peer_host)

    def authenticate_cached(self, username: str, password: str, peer_host: str | None
                            ) -> User | None:
        """The login's User if this password verified before, without the KDF; None when
        only authenticate() can tell. Raises AuthenticationFailed as authenticate() does."""
        record = self._catalog.get_user(username)
        if record is None or not self._cached_match(record, password):
            return None
        return self._admitted(record, peer_host)

    @cached_property
    def _dummy_hash(self) -> str:
        return hash_password(secrets.token_urlsafe(16), self._kdf)

    def _admitted(self, record: UserRecord, peer_host: str | None) -> User:
        if record.name in self._loopback_users and not is_loopback(peer_host):
            raise AuthenticationFailed(f"user '{record.name}' can only connect via localhost")
        return User(record.name, record.tags)

    @staticmethod
    def _invalid(username: str) -> AuthenticationFailed:
        return AuthenticationFailed(f"user '{username}' - invalid credentials")

    def _digest(self, password: str) -> bytes:
        return hmac.digest(self._cache_key, password.encode("utf-8"), "sha256")

    def _cached_match(self, record: UserRecord, password: str) -> bool:
        cached = self._verified.get(record.name)
        # Comparing the stored hash too makes a password changed elsewhere a cache miss.
        return (
            cached is not None
            and cached[1] == record.password_hash
            and hmac.compare_digest(cached[0], self._digest(password))
        )

    # -- users --------------------------------------------------------------------

    def add_user(self, name: str, password: str, tags: Iterable[str] = ()) -> User:
        if self._catalog.get_user(name) is not None:
            raise AlreadyExists(f"user '{name}' already exists")
        user = User(name, tuple(tags))
        self._catalog.put_user(UserRecord(name, hash_password(password, self._kdf), user.tags))
        return user

    def hashed(self, password: str) -> str:
        """`password` hashed as this broker stores it."""
        return hash_password(password, self._kdf)

    def change_password(self, name: str, password: str) -> None:
        record = self._catalog.get_user(name)
        if record is None:
            raise NotFound(f"user '{name}' not found")
        self._catalog.put_user(UserRecord(name, hash_password(password, self._kdf), record.tags))
        self._verified.pop(name, None)

    def delete_user(self, name: str) -> None:
        """Delete the user and its permissions; open connections keep their User."""
        self._catalog.delete_user(name)
        self._verified.pop(name, None)

    # -- authorization ------------------------------------------------------------

    def set_permissions(self, user: str, namespace: str, configure: str = ".*", write: str = ".*",
                        read: str = ".*") -> None:
        """Grant access to `namespace`; each pattern is a regex, "" or "^$" denies."""
        check_patterns(configure, write, read)
        self._catalog.set_permissions(user, namespace, configure, write, read)

    def clear_permissions(self, user: str, namespace: str) -> None:
        self._catalog.clear_permissions(user, namespace)

    def check_namespace_access(self, user: User, namespace: str) -> None:
        """Raise unless `user` may open a connection to `namespace` (RabbitMQ vhost)."""
        if self._catalog.get_namespace(namespace) is None:
            raise NotFound(f"namespace '{namespace}' not found")
        if self._catalog.get_permissions(user.name, namespace) is None:
            raise AccessRefused(f"access to namespace '{namespace}' refused for user '{user.name}'")

    def check(self, user: User, namespace: str, kind: PermissionKind, resource: str,
              resource_type: str = "stream") -> None:
        """Raise AccessRefused unless `user` has `kind` permission on `resource`.

        `resource_type` only words the message ("stream", "queue", "exchange").
        The AMQP default exchange "" must be checked as "amq.default", as RabbitMQ does.
        """
        if kind not in PERMISSION_KINDS:
            raise InvalidArgument(f"unknown permission kind {kind!r}")
        permission = self._catalog.get_permissions(user.name, namespace)
        if permission is not None and _permits(getattr(permission, kind), resource):
            return
        raise AccessRefused(
            f"{kind} access to {resource_type} '{resource}' in namespace '{namespace}'"
            f" refused for user '{user.name}'"
        )
