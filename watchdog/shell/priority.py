"""Syncs first: bulk work on the event loop steps aside while an agent waits at its decision
point (DESIGN §8: ≤ 5 ms p99 under 10,000 spans/s of background load).

A sync is answered only after several turns of the event loop (its request read, its spans
applied, the directives they caused stored on the directive lane and published, the answer
written). Bulk work — an export request's spans, a flush's run snapshots, the timer's rules —
runs in slices of about a millisecond, and yields between two of them at :meth:`Priority.turn`.
Three things keep a sync from waiting behind many slices, or its agent behind the sidecar:

* **one slice per loop turn**: bulk work takes turns in order (FIFO), and the next slice is let
  go only on the loop turn after the last one, so the loop polls its sockets between any two
  slices — with five export requests in flight, a request that arrives waits for one slice, not
  five;
* **syncs first**: no slice is let go from the moment bytes reach the control API
  (:meth:`Priority.arrived`, told by the API's connections; most control requests are syncs)
  until that request reaches its handler (:meth:`Priority.dispatched`), nor while any sync is
  in flight (:meth:`Priority.sync`);
* **the answer on the wire, then the CPU handed over**: a sync's answer is written before bulk
  work may go on, and the sidecar then yields its CPU (:func:`hand_over`). A loopback socket
  wakes its reader as a *synchronous* wake-up: the kernel queues the agent on the CPU the
  sidecar runs on, expecting the writer to sleep next — but bulk work goes on, and the agent
  waited for the CPU until the scheduler's next tick (~4 ms: 1 % of syncs under load).

Bounded: bulk work is held at most ``MAX_PAUSE`` seconds at a time — a stream of syncs can slow
ingest but never stop it, and bytes that never make a request (a client that sends half a
request and stalls) hold nothing back past one pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TypeVar

MAX_PAUSE = 0.02  # seconds bulk work is held for syncs at one turn before it goes on anyway
SLICE_SECONDS = 0.001  # bulk work over many items yields this often (:meth:`Priority.sliced`)

T = TypeVar("T")
_yield_cpu = getattr(os, "sched_yield", None)  # POSIX; absent on Windows


def hand_over() -> None:
    """Give this CPU to a process the sidecar just woke (an agent reading a sync's answer)
    before going on with bulk work; a no-op where the platform has no ``sched_yield``."""
    if _yield_cpu is not None:
        _yield_cpu()


class Priority:
    def __init__(self, max_pause: float = MAX_PAUSE) -> None:
        self.max_pause = max_pause
        self._syncs = 0
        self._arrived = False  # control API bytes in, their request not yet at its handler
        self._waiting: deque[asyncio.Future[bool]] = deque()  # bulk work at its turn, in order
        self._next: asyncio.Handle | asyncio.TimerHandle | None = None  # the next _pass
        self._held_since: float | None = None

    async def turn(self) -> None:
        """Where bulk work yields before its next slice: goes on at a later loop turn, after
        the slices waiting before it, one per turn, and not while a sync is on its way or in
        flight (up to ``max_pause``)."""
        loop = asyncio.get_running_loop()
        first = False
        while True:
            turn: asyncio.Future[bool] = loop.create_future()
            if first:
                self._waiting.appendleft(turn)  # its place kept
            else:
                self._waiting.append(turn)
            if self._next is None:
                self._next = loop.call_soon(self._pass)
            forced = await turn  # cancelled with its task: _pass skips it
            if forced or not self.holding:
                return
            first = True  # a sync came in between its pass and its wake-up: it goes first

    async def sliced(self, items: Iterable[T]) -> AsyncIterator[T]:
        """``items``, with a :meth:`turn` whenever about ``SLICE_SECONDS`` of work on them
        (the caller's, between two items) has gone by."""
        clock = time.perf_counter
        due = clock() + SLICE_SECONDS
        for item in items:
            yield item
            if clock() >= due:
                await self.turn()
                due = clock() + SLICE_SECONDS

    def arrived(self) -> None:
        """Bytes reached the control API: hold bulk work back until their request is
        dispatched."""
        self._arrived = True

    def dispatched(self) -> None:
        """A control API request reached its handler."""
        self._arrived = False
        self._resume()

    @contextlib.contextmanager
    def sync(self) -> Iterator[None]:
        """Hold bulk work back while the block (one sync) runs."""
        self._syncs += 1
        self._arrived = False  # its bytes (the body may come after the headers) are in
        try:
            yield
        finally:
            self._syncs -= 1
            self._resume()

    @property
    def holding(self) -> bool:
        return self._arrived or self._syncs > 0

    def _pass(self) -> None:
        """Let the first bulk slice waiting go, unless a sync is on its way or in flight."""
        self._next = None
        waiting = self._waiting
        while waiting and waiting[0].done():
            waiting.popleft()
        if not waiting:
            return
        loop = asyncio.get_running_loop()
        forced = False
        if self.holding:
            now = loop.time()
            if self._held_since is None:
                self._held_since = now
            left = self._held_since + self.max_pause - now
            if left > 0:
                self._next = loop.call_later(left, self._pass)
                return
            self._arrived = False  # bytes that made no request in a whole pause hold no more
            forced = True
        self._held_since = None
        waiting.popleft().set_result(forced)
        if waiting:
            self._next = loop.call_soon(self._pass)

    def _resume(self) -> None:
        """Nothing holds bulk work back any more: let the next slice go at the next turn."""
        if self.holding or not isinstance(self._next, asyncio.TimerHandle):
            return
        self._next.cancel()
        self._next = asyncio.get_running_loop().call_soon(self._pass)
