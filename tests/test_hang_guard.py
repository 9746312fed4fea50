"""The suite's hang guard: a stuck test ends, and the report says where it waited."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.support.hang_guard import HangGuard


async def never_answered(future: asyncio.Future[None]) -> None:
    await future


async def test_an_async_test_waiting_forever_is_cancelled_with_its_tasks_stacks() -> None:
    future = asyncio.get_running_loop().create_future()
    with pytest.raises(asyncio.CancelledError), HangGuard("waiting", after=0.3) as guard:
        await asyncio.gather(never_answered(future))
    assert guard.report is not None
    assert "waiting hung" in guard.report and "in never_answered" in guard.report
    assert "0 scheduled" in guard.report  # nothing was due: the future was the wait


def test_a_blocking_test_is_interrupted() -> None:
    with pytest.raises(KeyboardInterrupt), HangGuard("blocked", after=0.3) as guard:
        threading.Event().wait(30)
    assert guard.report is not None and "blocked hung" in guard.report


async def test_a_test_that_ends_in_time_is_left_alone() -> None:
    with HangGuard("quick", after=5) as guard:
        await asyncio.sleep(0.01)
    assert guard.report is None
