"""The audit log: one `admin.change` line per change of the broker's objects a client made,
whichever way: the management API (`protocol` http, `admin/audit.py`) or a wire protocol
(`ConnectionContext.audit`: AMQP declares, binds and deletes, stream creates and deletes,
Iggy's and the BSON protocol's creates). Each names the `protocol`, the `user`, the `peer`,
the `action` (`KIND.VERB`) and the `object` (vhost, name, ...)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("mainstem.admin.audit")


def log_change(protocol: str, user: str, peer: str | None, action: str,
               names: dict[str, Any], **fields: Any) -> None:
    log.info("admin.change", extra={"protocol": protocol, "user": user, "peer": peer,
                                    "action": action, "object": names, **fields})
