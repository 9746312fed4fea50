"""Progress of long pipelines on stderr: a tqdm bar with records done, total, rate and ETA
when the end is known, a live count and rate otherwise; nothing with ``--quiet``. tqdm comes
with the spark extra: imported when a bar is made, so the pipelines' parser loads without it."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Never, Protocol

if TYPE_CHECKING:
    from tqdm import tqdm

INTERVAL_S = 1.0


class Progress(Protocol):
    """What the jobs report to (a tqdm bar is one)."""

    total: float | None

    def update(self, n: float | None = 1) -> bool | None: ...

    def refresh(self) -> None: ...


def progress_bar(description: str, quiet: bool) -> tqdm[Never]:
    from tqdm import tqdm

    return tqdm(desc=description, unit=" records", unit_scale=True, disable=quiet,
                file=sys.stderr, mininterval=INTERVAL_S, dynamic_ncols=True)


@contextmanager
def reporting(count: Callable[[], int], progress: Progress) -> Iterator[None]:
    """While the block runs (a blocking Spark action), move `progress` to `count()` every
    interval, from a thread; once more at the end."""
    done = threading.Event()
    shown = 0

    def catch_up() -> None:
        nonlocal shown
        now = count()
        if now > shown:
            progress.update(now - shown)
            shown = now

    def poll() -> None:
        while not done.wait(INTERVAL_S):
            catch_up()

    watcher = threading.Thread(target=poll, name="mainstem-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        catch_up()
