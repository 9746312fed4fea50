"""Settings of the broker core, filled in by the server from its configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mainstem.broker.amqp.queues.paging import MemoryBound
from mainstem.broker.streams import DEFAULT_MAX_PARTITIONS
from mainstem.log.policy import DurabilityPolicy, RetentionPolicy


@dataclass(frozen=True, slots=True)
class TieringSettings:
    """Where sealed segments go past their local bounds (see broker/tiering.py)."""

    url: str  # a directory, or s3://bucket/prefix
    endpoint: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = None
    timeout_s: float = 10.0
    cache_dir: Path = Path("data/tier-cache")
    cache_bytes: int = 1 << 30
    block_bytes: int = 1 << 20
    read_ahead: int = 2
    check_interval_s: float = 10.0
    clustered: bool = False  # only a partition's elected leader uploads, under its fence
    delete_grace_s: float = 300.0  # an object whose record went is deleted this much later


@dataclass(frozen=True, slots=True)
class CoreSettings:
    durability: DurabilityPolicy = field(default_factory=DurabilityPolicy)
    # Defaults for streams declared without their own retention arguments.
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    # Created with full permissions on "/" when the catalog has no users yet.
    bootstrap_user: str = "guest"
    bootstrap_password: str = "guest"
    # Users that may only connect from a loopback address, as RabbitMQ's loopback_users.
    loopback_users: tuple[str, ...] = ("guest",)
    # A refused login is answered after this delay; each client address, and each user
    # from it, may fail this many logins a minute (in bursts of as many), then waits longer
    # (`LoginThrottle`): a right password is never refused.
    failed_login_delay_s: float = 1.0
    failed_logins_per_minute: int = 30
    # Password checks an address may have queued for a thread or running; its others
    # wait in its own backlog (`PasswordChecks`).
    password_checks_per_address: int = 2
    # How often retention runs over every partition, besides on segment roll.
    retention_check_interval_s: float = 60.0
    max_partitions: int = DEFAULT_MAX_PARTITIONS  # per stream
    open_files: int = 0  # log-file descriptors kept open; 0: (RLIMIT_NOFILE - 128) / 4
    # How much of each classic queue's ready messages stays in memory; the rest is on disk.
    queue_memory: MemoryBound = field(default_factory=MemoryBound)
    tiering: TieringSettings | None = None  # None: every segment stays local
    # Bytes a second the background scrub reads back and checks (broker/scrub.py); 0: off.
    scrub_rate: int = 16 << 20
