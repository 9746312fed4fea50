"""Authentication and authorization over a real catalog, with production KDF costs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mainstem.broker import auth as auth_module
from mainstem.broker.auth import (
    PRODUCTION_SCRYPT,
    Auth,
    ScryptParams,
    User,
    hash_password,
    is_loopback,
    verify_password,
)
from mainstem.broker.catalog import Catalog
from mainstem.broker.errors import (
    AccessRefused,
    AlreadyExists,
    AuthenticationFailed,
    InvalidArgument,
    NotFound,
)
from mainstem.broker.settings import CoreSettings

LOCAL = "127.0.0.1"
REMOTE = "10.0.0.5"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "catalog.sqlite"


@pytest.fixture
def catalog(path: Path) -> Iterator[Catalog]:
    with Catalog.open(path) as opened:
        yield opened


@pytest.fixture
def auth(catalog: Catalog) -> Auth:
    return Auth(catalog, CoreSettings())


@pytest.fixture
def kdf_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each real password verification (the slow KDF) that Auth performs."""
    calls: list[str] = []
    real_verify = auth_module.verify_password

    def counting_verify(password: str, password_hash: str) -> bool:
        calls.append(password)
        return real_verify(password, password_hash)

    monkeypatch.setattr(auth_module, "verify_password", counting_verify)
    return calls


# -- bootstrap ------------------------------------------------------------------------


def test_bootstrap_user_is_an_administrator_with_full_permissions_on_default_namespace(
    auth: Auth, catalog: Catalog
) -> None:
    guest = auth.authenticate("guest", "guest", LOCAL)
    assert guest == User("guest", ("administrator",))
    assert guest.is_administrator
    permission = catalog.get_permissions("guest", "/")
    assert (permission.configure, permission.write, permission.read) == (".*", ".*", ".*")
    auth.check_namespace_access(guest, "/")
    for kind in ("configure", "write", "read"):
        auth.check(guest, "/", kind, "any-stream")


def test_bootstrap_uses_the_configured_user(catalog: Catalog) -> None:
    settings = CoreSettings(bootstrap_user="root", bootstrap_password="s3cret", loopback_users=())
    auth = Auth(catalog, settings)
    assert auth.authenticate("root", "s3cret", REMOTE).is_administrator
    assert [user.name for user in catalog.list_users()] == ["root"]


def test_bootstrap_happens_only_on_a_catalog_without_users(auth: Auth, path: Path) -> None:
    auth.add_user("bob", "pw")
    auth.delete_user("guest")
    with Catalog.open(path) as reopened:
        Auth(reopened, CoreSettings())
        assert [user.name for user in reopened.list_users()] == ["bob"]


# -- authentication -------------------------------------------------------------------


def test_wrong_password_and_unknown_user_fail_alike(auth: Auth) -> None:
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        auth.authenticate("guest", "wrong", LOCAL)
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        auth.authenticate("nobody", "guest", LOCAL)
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        auth.authenticate("guest", "", LOCAL)


@pytest.mark.parametrize("peer", ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1", None])
def test_loopback_user_may_connect_locally(auth: Auth, peer: str | None) -> None:
    assert auth.authenticate("guest", "guest", peer).name == "guest"


@pytest.mark.parametrize("peer", ["10.0.0.5", "::ffff:10.0.0.5", "2001:db8::1", "localhost", ""])
def test_loopback_user_is_refused_from_elsewhere(auth: Auth, peer: str) -> None:
    with pytest.raises(AuthenticationFailed, match="can only connect via localhost"):
        auth.authenticate("guest", "guest", peer)


def test_other_users_may_connect_from_anywhere(auth: Auth) -> None:
    auth.add_user("bob", "pw")
    assert auth.authenticate("bob", "pw", REMOTE) == User("bob", ())


@pytest.mark.parametrize(
    ("peer", "expected"),
    [("127.0.0.1", True), ("::1", True), ("::ffff:127.0.0.1", True), (None, True),
     ("192.168.1.1", False), ("::ffff:192.168.1.1", False), ("not an ip", False)],
)  # fmt: skip
def test_is_loopback(peer: str | None, expected: bool) -> None:
    assert is_loopback(peer) is expected


def test_stored_hash_is_not_the_password_and_verifies_after_reopen(
    auth: Auth, catalog: Catalog, path: Path
) -> None:
    auth.add_user("bob", "correct horse", ("monitoring",))
    stored = catalog.get_user("bob").password_hash
    assert "correct horse" not in stored
    assert stored.startswith("scrypt$16384$8$1$")
    catalog.close()

    with Catalog.open(path) as reopened:
        fresh = Auth(reopened, CoreSettings())  # empty cache: runs the real KDF
        assert fresh.authenticate("bob", "correct horse", REMOTE) == User("bob", ("monitoring",))
        with pytest.raises(AuthenticationFailed):
            fresh.authenticate("bob", "correct horsE", REMOTE)


def test_repeated_logins_pay_the_kdf_once(auth: Auth, kdf_calls: list[str]) -> None:
    for _ in range(5):
        auth.authenticate("guest", "guest", LOCAL)
    assert kdf_calls == ["guest"]
    # A wrong password is never answered from the cache.
    with pytest.raises(AuthenticationFailed):
        auth.authenticate("guest", "guesT", LOCAL)
    assert kdf_calls == ["guest", "guesT"]


def test_an_unknown_user_costs_a_kdf_as_a_wrong_password_does(
    auth: Auth, kdf_calls: list[str]
) -> None:
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        auth.authenticate("nobody", "secret", LOCAL)
    assert kdf_calls == ["secret"]


def test_cached_logins_are_answered_without_the_kdf(auth: Auth, kdf_calls: list[str]) -> None:
    assert auth.authenticate_cached("guest", "guest", LOCAL) is None  # never verified yet
    auth.authenticate("guest", "guest", LOCAL)
    assert auth.authenticate_cached("guest", "guest", LOCAL) == User("guest", ("administrator",))
    assert auth.authenticate_cached("guest", "wrong", LOCAL) is None
    assert auth.authenticate_cached("nobody", "guest", LOCAL) is None
    with pytest.raises(AuthenticationFailed, match="only connect via localhost"):
        auth.authenticate_cached("guest", "guest", REMOTE)
    assert kdf_calls == ["guest"]


def test_password_change_invalidates_the_cache(auth: Auth, kdf_calls: list[str]) -> None:
    auth.add_user("bob", "old")
    auth.authenticate("bob", "old", REMOTE)
    auth.change_password("bob", "new")
    with pytest.raises(AuthenticationFailed):
        auth.authenticate("bob", "old", REMOTE)
    assert auth.authenticate("bob", "new", REMOTE).name == "bob"
    assert kdf_calls == ["old", "old", "new"]


def test_password_changed_by_another_auth_invalidates_the_cache(
    auth: Auth, catalog: Catalog
) -> None:
    auth.add_user("bob", "old")
    auth.authenticate("bob", "old", REMOTE)
    Auth(catalog, CoreSettings()).change_password("bob", "new")
    with pytest.raises(AuthenticationFailed):
        auth.authenticate("bob", "old", REMOTE)


def test_deleted_user_cannot_log_in(auth: Auth) -> None:
    auth.add_user("bob", "pw")
    auth.authenticate("bob", "pw", REMOTE)
    auth.delete_user("bob")
    with pytest.raises(AuthenticationFailed):
        auth.authenticate("bob", "pw", REMOTE)


def test_change_password_keeps_tags(auth: Auth) -> None:
    auth.add_user("bob", "old", ("administrator",))
    auth.change_password("bob", "new")
    assert auth.authenticate("bob", "new", REMOTE).is_administrator


def test_user_management_errors(auth: Auth) -> None:
    with pytest.raises(AlreadyExists, match="user 'guest' already exists"):
        auth.add_user("guest", "x")
    with pytest.raises(NotFound, match="user 'nobody' not found"):
        auth.change_password("nobody", "x")
    with pytest.raises(NotFound, match="user 'nobody' not found"):
        auth.delete_user("nobody")
    with pytest.raises(InvalidArgument):
        auth.add_user("", "x")


# -- password hashes ------------------------------------------------------------------


def test_production_kdf_cost_is_the_default() -> None:
    assert (PRODUCTION_SCRYPT.n, PRODUCTION_SCRYPT.r, PRODUCTION_SCRYPT.p) == (2**14, 8, 1)
    assert PRODUCTION_SCRYPT.salt_bytes == 16


def test_hashes_are_salted_and_carry_their_cost() -> None:
    cheap = ScryptParams(n=2**4)
    first, second = hash_password("pw", cheap), hash_password("pw", cheap)
    assert first != second
    assert first.startswith("scrypt$16$8$1$")
    assert verify_password("pw", first) and verify_password("pw", second)
    assert not verify_password("pW", first)


def test_auth_hashes_with_the_given_cost(catalog: Catalog) -> None:
    auth = Auth(catalog, CoreSettings(), kdf=ScryptParams(n=2**10))
    auth.add_user("bob", "pw")
    assert catalog.get_user("bob").password_hash.startswith("scrypt$1024$")
    assert auth.authenticate("bob", "pw", REMOTE).name == "bob"


@pytest.mark.parametrize(
    "stored",
    ["", "plain", "bcrypt$16$8$1$c2FsdA==$a2V5", "scrypt$16$8$1$not base64$a2V5",
     "scrypt$15$8$1$c2FsdA==$a2V5", "scrypt$x$8$1$c2FsdA==$a2V5", "scrypt$16$8$1$c2FsdA=="],
)  # fmt: skip
def test_malformed_hashes_never_verify(stored: str) -> None:
    assert verify_password("pw", stored) is False


# -- authorization --------------------------------------------------------------------


@pytest.fixture
def bob(auth: Auth) -> User:
    auth.add_user("bob", "pw")
    return auth.authenticate("bob", "pw", REMOTE)


def test_user_without_permission_row_is_refused(auth: Auth, catalog: Catalog, bob: User) -> None:
    with pytest.raises(AccessRefused, match="access to namespace '/' refused for user 'bob'"):
        auth.check_namespace_access(bob, "/")
    with pytest.raises(AccessRefused, match="stream 'orders' in namespace '/' refused for user"):
        auth.check(bob, "/", "read", "orders")
    # An administrator tag does not replace a permission row, as in RabbitMQ.
    catalog.add_namespace("prod")
    guest = auth.authenticate("guest", "guest", LOCAL)
    with pytest.raises(AccessRefused):
        auth.check_namespace_access(guest, "prod")


def test_unknown_namespace_is_not_found(auth: Auth, bob: User) -> None:
    with pytest.raises(NotFound, match="namespace 'nope' not found"):
        auth.check_namespace_access(bob, "nope")


def test_permissions_grant_namespace_access(auth: Auth, catalog: Catalog, bob: User) -> None:
    catalog.add_namespace("prod")
    auth.set_permissions("bob", "prod", "", "", "")  # deny-all still opens the namespace
    auth.check_namespace_access(bob, "prod")
    with pytest.raises(AccessRefused):
        auth.check_namespace_access(bob, "/")
    auth.clear_permissions("bob", "prod")
    with pytest.raises(AccessRefused):
        auth.check_namespace_access(bob, "prod")


@pytest.mark.parametrize(
    ("pattern", "resource", "allowed"),
    [
        (".*", "orders", True),
        ("^amq\\.gen", "amq.gen-JzTY20BRgKO", True),
        ("^amq\\.gen", "my.amq.gen", False),
        ("^amq\\.gen", "amqXgen", False),
        ("orders", "eu-orders-2024", True),  # unanchored, as Erlang re:run
        ("^orders$", "orders-dlq", False),
        ("^(orders|audit)$", "audit", True),
        ("^$", "orders", False),
        ("", "orders", False),
    ],
)
def test_permission_patterns(
    auth: Auth, bob: User, pattern: str, resource: str, allowed: bool
) -> None:
    auth.set_permissions("bob", "/", configure=pattern, write=pattern, read=pattern)
    for kind in ("configure", "write", "read"):
        if allowed:
            auth.check(bob, "/", kind, resource)
        else:
            with pytest.raises(AccessRefused, match=f"{kind} access to stream '{resource}'"):
                auth.check(bob, "/", kind, resource)


def test_permission_kinds_are_independent(auth: Auth, bob: User) -> None:
    auth.set_permissions("bob", "/", configure="^$", write="^logs", read=".*")
    auth.check(bob, "/", "read", "orders")
    auth.check(bob, "/", "write", "logs.app")
    with pytest.raises(AccessRefused):
        auth.check(bob, "/", "write", "orders")
    with pytest.raises(AccessRefused, match="configure access to queue 'q'"):
        auth.check(bob, "/", "configure", "q", resource_type="queue")


def test_permissions_are_per_namespace(auth: Auth, catalog: Catalog, bob: User) -> None:
    catalog.add_namespace("prod")
    auth.set_permissions("bob", "/")
    auth.check(bob, "/", "write", "orders")
    with pytest.raises(AccessRefused, match="in namespace 'prod'"):
        auth.check(bob, "prod", "write", "orders")


def test_permission_changes_apply_to_existing_users(auth: Auth, bob: User) -> None:
    auth.set_permissions("bob", "/")
    auth.check(bob, "/", "read", "orders")
    auth.set_permissions("bob", "/", read="^audit$")
    with pytest.raises(AccessRefused):
        auth.check(bob, "/", "read", "orders")


def test_invalid_regex_is_refused_and_nothing_is_stored(
    auth: Auth, catalog: Catalog, bob: User
) -> None:
    with pytest.raises(InvalidArgument, match="write permission '\\(' is not a valid regex"):
        auth.set_permissions("bob", "/", write="(")
    assert catalog.get_permissions("bob", "/") is None


def test_unknown_permission_kind_is_refused(auth: Auth, bob: User) -> None:
    auth.set_permissions("bob", "/")
    with pytest.raises(InvalidArgument, match="unknown permission kind"):
        auth.check(bob, "/", "delete", "orders")


def test_set_permissions_for_unknown_user_or_namespace(auth: Auth) -> None:
    with pytest.raises(NotFound, match="user 'nobody'"):
        auth.set_permissions("nobody", "/")
    with pytest.raises(NotFound, match="namespace 'nope'"):
        auth.set_permissions("guest", "nope")


def test_pattern_edited_into_the_catalog_by_hand_fails_closed(
    auth: Auth, catalog: Catalog, bob: User
) -> None:
    catalog.set_permissions("bob", "/", "[", "[", "[")
    with pytest.raises(AccessRefused):
        auth.check(bob, "/", "read", "[")


def test_permission_checks_follow_every_change(auth: Auth, catalog: Catalog, bob: User) -> None:
    """Checks are answered from a cache; each kind of change must reach it."""
    catalog.add_namespace("prod")
    auth.set_permissions("bob", "prod", "", "^orders$", "")
    auth.check(bob, "prod", "write", "orders")  # now cached
    auth.set_permissions("bob", "prod", "", "^payments$", "")
    with pytest.raises(AccessRefused):
        auth.check(bob, "prod", "write", "orders")
    auth.check(bob, "prod", "write", "payments")
    auth.clear_permissions("bob", "prod")
    with pytest.raises(AccessRefused):
        auth.check(bob, "prod", "write", "payments")
    auth.set_permissions("bob", "prod", ".*", ".*", ".*")
    auth.check(bob, "prod", "read", "x")
    catalog.delete_namespace("prod")
    catalog.add_namespace("prod")  # recreated: the old grant went with it
    with pytest.raises(AccessRefused):
        auth.check(bob, "prod", "read", "x")
    auth.set_permissions("bob", "prod", ".*", ".*", ".*")
    auth.check(bob, "prod", "read", "x")
    auth.delete_user("bob")
    with pytest.raises(AccessRefused):
        auth.check(bob, "prod", "read", "x")
