"""Waiting for a projection to catch up: polls a binder document over the events client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from mainstem.client.events import EventsClient

POLL_S = 0.05
TIMEOUT_S = 10.0


async def wait_for_document(client: EventsClient, binder: str, doc_id: Any,
                            check: Callable[[dict], bool]) -> dict:
    """The document once `check` holds for it; fails after TIMEOUT_S."""
    document = None
    for _ in range(int(TIMEOUT_S / POLL_S)):
        document = await client.find_by_id(binder, doc_id)
        if document is not None and check(document):
            return document
        await asyncio.sleep(POLL_S)
    raise AssertionError(f"{binder}/{doc_id} never got there: {document}")
