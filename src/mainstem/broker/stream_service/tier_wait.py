"""Push consumers wait out an unavailable tier instead of failing.

A consumer that the broker pushes to (a stream subscription, an AMQP stream queue
consumer, a projection folding a channel) has no reply to carry an error, and its client
would only subscribe again from where it was. So a read of a tiered chunk that fails with
`TierUnavailable` is tried again until the tier answers; the reader took nothing on
failure, so nothing is lost or sent twice. Request/response protocols answer the error
instead (each in its own way).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from mainstem.log.errors import TierUnavailable

T = TypeVar("T")

RETRY_S = 1.0  # between tries while the tier is unavailable


async def waiting_out_tier(read: Callable[[], Awaitable[T]],
                           log: logging.Logger | logging.LoggerAdapter[logging.Logger],
                           retry_s: float = RETRY_S) -> T:
    """`read()`, tried again every `retry_s` while the tier is unavailable; the wait is
    logged once as `tier.unavailable`, its end as `tier.available`."""
    try:
        return await read()
    except TierUnavailable as error:
        log.warning("tier.unavailable", extra={"tier": error.tier, "key": error.key,
                                               "error": str(error)})
    tries = 1
    while True:
        await asyncio.sleep(retry_s)
        tries += 1
        try:
            result = await read()
        except TierUnavailable:
            continue
        log.info("tier.available", extra={"tries": tries})
        return result
