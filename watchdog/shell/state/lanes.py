"""A worker lane: one named thread that runs blocking work (SQLite reads and writes) in the
order it was submitted, so the event loop never waits on disk.

The sidecar has four: ``watchdog-store`` (run state writes, :mod:`watchdog.shell.state.persist`),
``watchdog-reader`` (the API's run reads, :mod:`watchdog.shell.state.queries`),
``watchdog-directives`` (directive store writes, :mod:`watchdog.shell.directives.outbox`) and
``watchdog-directives-read`` (directive reads, :mod:`watchdog.shell.directives.hub`). One thread
per lane is what keeps a lane's writes in order (an older snapshot never lands after a newer one)
and its SQLite connection on one thread at a time. The thread is named ``<name>_0`` and started on
the first submission.

A lane queues what it is given: its bound is its caller's, which refuses work before it
reaches the lane (``MAX_PENDING_ACTIVITY`` for the store lane, ``max_pending`` for the
directive lane, the open-stream and waiter limits for the directive reader); the run reader
holds at most one read per API request waiting for it. An exception raised by the work is
raised to the awaiting caller unchanged; work submitted after :meth:`Lane.close` raises
``RuntimeError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Lane:
    """One named worker thread; ``await lane.run(work, *args)`` from the event loop."""

    __slots__ = ("_executor", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, work: Callable[[*Ts], T], *args: *Ts) -> T:
        """``work(*args)`` on the lane's thread, after everything submitted before it."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, work, *args)

    def close(self) -> None:
        """Wait for the work already submitted, then end the thread (idempotent)."""
        self._executor.shutdown(wait=True)

    def __repr__(self) -> str:
        return f"Lane({self.name!r})"
