"""The S3 servers the tier's and the tables' S3 tests run against, one bucket each test:
moto's emulator (in this process: fast, but it checks only the requests obstore sends) and
Ceph's RADOS Gateway (a real S3 server, `radosgw.py`: what a user runs)."""

from __future__ import annotations

from dataclasses import dataclass

from mainstem.log.tier import Tier

SERVERS = ("moto", "rgw")


@dataclass(frozen=True)
class S3Server:
    name: str  # one of SERVERS
    endpoint: str
    bucket: str
    access_key_id: str
    secret_access_key: str

    @property
    def keys(self) -> dict[str, str]:
        """As `Tier.s3` and the tiering's settings take them."""
        return {"access_key_id": self.access_key_id,
                "secret_access_key": self.secret_access_key}

    @property
    def pyiceberg_properties(self) -> dict[str, str]:
        return {"s3.endpoint": self.endpoint, "s3.access-key-id": self.access_key_id,
                "s3.secret-access-key": self.secret_access_key, "s3.region": "us-east-1"}

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def tier(self, prefix: str = "tiered", timeout: float = 10.0) -> Tier:
        return Tier.s3(self.url(prefix), endpoint=self.endpoint, timeout=timeout, **self.keys)
