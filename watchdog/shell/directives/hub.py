"""In-memory fan-out of stored directives to long-poll waiters and Server-Sent Event streams.

Theory of operation
-------------------
The outbox calls :meth:`Hub.publish` only after a directive is stored, in ``global_seq`` order.
A :class:`Subscription` (one SSE stream or one long-poll request) is registered *before* it
reads its backlog from the store, so every directive is either in the backlog (stored before
the read) or arrives in the live queue (published after registration); the seam is closed by
skipping live items at or below the last position delivered. Hence no gap and no duplicate
when a stream resumes with ``Last-Event-ID``. A per-run subscription counts in ``seq``, the
global one in ``global_seq``.

Everything is bounded: each subscription's live queue holds at most ``queue_size`` directives
(a client that falls further behind is disconnected and counted, and resumes from the store by
reconnecting), and at most ``max_streams`` SSE streams and ``max_waiters`` long-poll requests are
open at once (more are refused with 503 + Retry-After).

Runs on the event loop thread; store reads go to one reader thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from types import TracebackType
from typing import Protocol

from watchdog.core.directives.model import Directive
from watchdog.shell.directives.store import DirectiveStore
from watchdog.shell.errors import Overloaded
from watchdog.shell.open_files import MAX_STREAMS, MAX_WAITERS
from watchdog.shell.state.lanes import Lane

log = logging.getLogger("watchdog.directives")

DEFAULT_MAX_STREAMS = MAX_STREAMS  # concurrent SSE streams (fewer where open files are short)
DEFAULT_MAX_WAITERS = MAX_WAITERS  # concurrent long-poll requests (likewise)
DEFAULT_QUEUE_SIZE = 1_000  # directives a subscriber may fall behind before it is disconnected
DEFAULT_HEARTBEAT = 15.0  # seconds between SSE keep-alive comments (proxies drop idle streams)
BACKLOG_PAGE = 500  # directives read from the store at a time while a stream catches up
STREAM_RETRY_AFTER = 5.0  # seconds a refused stream is told to wait


class DeliveryMetrics(Protocol):
    """The one metrics call the directive layer makes (``watchdog.shell.metrics.Metrics``)."""

    def directive_delivered(self, action: str, channel: str, outcome: str) -> None: ...


class NullMetrics:
    def directive_delivered(self, action: str, channel: str, outcome: str) -> None:
        pass


class StreamEnded(Exception):
    """The subscription ended: the hub closed (shutdown) or the subscriber fell behind."""


class SubscriberOverflow(StreamEnded):
    """More than ``queue_size`` directives waited for this subscriber; it must reconnect."""


class Subscription:
    """Directives for one run (``run_id``) or for all runs (``run_id=None``), in order, from
    ``after`` on: first the stored backlog, then live ones. Use as an async context manager
    (or call :meth:`close`); iterate with ``async for`` or :meth:`get` (which also reports
    heartbeat timeouts)."""

    def __init__(self, hub: Hub, run_id: str | None, after: int, queue_size: int,
                 channel: str, page: int) -> None:
        self.hub = hub
        self.run_id = run_id
        self.channel = channel
        self.position = after  # seq (per run) or global_seq (all runs) last delivered
        self.overflowed = False
        self.closed = False
        self._queue: deque[Directive] = deque()
        self._queue_size = queue_size
        self._backlog: deque[Directive] = deque()
        self._backlog_done = False
        self._page = page
        self._ready = asyncio.Event()

    def number(self, directive: Directive) -> int:
        """The directive's position in this subscription: the SSE ``id:``."""
        return directive.seq if self.run_id is not None else directive.global_seq

    # -- fed by the hub -----------------------------------------------------------------------

    def offer(self, directive: Directive) -> bool:
        """Queue a live directive; False (and disconnect) when the queue is full."""
        if self.closed or self.overflowed:
            return True
        if len(self._queue) >= self._queue_size:
            self.overflowed = True
            self._ready.set()
            return False
        self._queue.append(directive)
        self._ready.set()
        return True

    def wake(self) -> None:
        self._ready.set()

    # -- consumed by the API ------------------------------------------------------------------

    async def get(self, timeout: float | None = None) -> Directive | None:
        """The next directive; None if ``timeout`` seconds pass without one. Raises
        :class:`SubscriberOverflow` or :class:`StreamEnded` when the stream must end."""
        while True:
            if self.overflowed:
                raise SubscriberOverflow(f"subscriber fell more than {self._queue_size} "
                                         f"directives behind")
            if self.closed or self.hub.closed:
                raise StreamEnded("the directive hub is shutting down")
            directive = self._next_buffered()
            if directive is not None:
                return directive
            if not self._backlog_done:
                page = await self.hub.read(self.run_id, self.position, self._page)
                self._backlog_done = len(page) < self._page
                self._backlog.extend(page)
                continue
            self._ready.clear()
            if timeout is not None and timeout <= 0:
                return None
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return None

    def buffered(self, limit: int) -> list[Directive]:
        """Up to ``limit`` directives already at hand, in order, without waiting or reading
        the store (what a long-poll returns along with the first one)."""
        out: list[Directive] = []
        while len(out) < limit:
            directive = self._next_buffered()
            if directive is None:
                break
            out.append(directive)
        return out

    def _next_buffered(self) -> Directive | None:
        if self._backlog:
            directive = self._backlog.popleft()
            self.position = self.number(directive)
            return directive
        if not self._backlog_done:
            return None
        queue = self._queue
        while queue:
            directive = queue.popleft()
            number = self.number(directive)
            if number > self.position:  # at or below: already delivered from the backlog
                self.position = number
                return directive
        return None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.hub.unregister(self)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, value: BaseException | None,
                        traceback: TracebackType | None) -> None:
        self.close()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Directive:
        try:
            directive = await self.get()
        except StreamEnded:
            raise StopAsyncIteration from None
        assert directive is not None  # get() without a timeout only returns directives
        return directive


class Hub:
    def __init__(self, store: DirectiveStore, *, metrics: DeliveryMetrics | None = None,
                 max_streams: int = DEFAULT_MAX_STREAMS, max_waiters: int = DEFAULT_MAX_WAITERS,
                 queue_size: int = DEFAULT_QUEUE_SIZE,
                 heartbeat: float = DEFAULT_HEARTBEAT) -> None:
        self.store = store
        self.metrics: DeliveryMetrics = metrics or NullMetrics()
        self.max_streams = max_streams
        self.max_waiters = max_waiters
        self.queue_size = queue_size
        self.heartbeat = heartbeat
        self.closed = False
        self.overflows = 0  # subscribers disconnected for falling behind
        self._by_run: dict[str, set[Subscription]] = {}
        self._all_runs: set[Subscription] = set()
        self._open = {"sse": 0, "longpoll": 0}
        self.reader = Lane("watchdog-directives-read")  # the store's reads; the outbox closes it

    # -- publishing (the outbox, after the store) -----------------------------------------------

    def publish(self, directive: Directive) -> None:
        subscribers = self._by_run.get(directive.run_id)
        if subscribers:
            for subscription in tuple(subscribers):
                self._offer(subscription, directive)
        for subscription in tuple(self._all_runs):
            self._offer(subscription, directive)

    def _offer(self, subscription: Subscription, directive: Directive) -> None:
        if not subscription.offer(directive):
            self.overflows += 1
            self.metrics.directive_delivered(directive.action, subscription.channel, "overflow")
            log.warning("a %s subscriber (%s) fell more than %d directives behind; "
                        "disconnecting it (it resumes from the store when it reconnects)",
                        subscription.channel, subscription.run_id or "all runs", self.queue_size)

    # -- subscribing (the API) ------------------------------------------------------------------

    def subscribe(self, run_id: str | None, after: int = 0, *, channel: str = "sse",
                  page: int = BACKLOG_PAGE) -> Subscription:
        """A subscription registered now (before its backlog is read; see the theory above).
        Raises :class:`Overloaded` beyond ``max_streams`` / ``max_waiters``."""
        if self.closed:
            raise Overloaded("the watchdog is shutting down", retry_after=STREAM_RETRY_AFTER)
        limit = self.max_waiters if channel == "longpoll" else self.max_streams
        if self._open.get(channel, 0) >= limit:
            what = "long-poll requests" if channel == "longpoll" else "directive streams"
            raise Overloaded(f"too many open {what} (max {limit}); retry shortly",
                             retry_after=STREAM_RETRY_AFTER)
        subscription = Subscription(self, run_id, max(after, 0), self.queue_size, channel, page)
        self._open[channel] = self._open.get(channel, 0) + 1
        if run_id is None:
            self._all_runs.add(subscription)
        else:
            self._by_run.setdefault(run_id, set()).add(subscription)
        return subscription

    def unregister(self, subscription: Subscription) -> None:
        self._open[subscription.channel] -= 1
        if subscription.run_id is None:
            self._all_runs.discard(subscription)
            return
        subscribers = self._by_run.get(subscription.run_id)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._by_run[subscription.run_id]

    def open_streams(self, channel: str = "sse") -> int:
        return self._open.get(channel, 0)

    async def wait_for_run(self, run_id: str, after_seq: int, timeout: float,
                           limit: int = 100) -> list[Directive]:
        """The run's directives after ``after_seq`` (at most ``limit``): at once if any are
        stored, else the first ones published within ``timeout`` seconds, else []."""
        with contextlib.closing(self.subscribe(run_id, after_seq, channel="longpoll",
                                     page=limit)) as subscription:
            try:
                first = await subscription.get(timeout)
            except SubscriberOverflow:
                return subscription.buffered(limit)  # the queue is a valid prefix
            except StreamEnded:
                return []
            if first is None:
                return []
            return [first, *subscription.buffered(limit - 1)]

    # -- reading the store (its own thread) -----------------------------------------------------

    async def read(self, run_id: str | None, after: int, limit: int) -> list[Directive]:
        if run_id is None:
            return await self.reader.run(self.store.list_after, after, limit)
        return await self.reader.run(self.store.list_for_run, run_id, after, limit)

    async def latest_seq(self, run_id: str) -> int:
        return await self.reader.run(self.store.latest_seq, run_id)

    async def latest_global_seq(self) -> int:
        return await self.reader.run(self.store.max_seq)

    # -- shutdown -------------------------------------------------------------------------------

    def close(self) -> None:
        """End every stream and long-poll (they answer at once); refuse new ones."""
        if self.closed:
            return
        self.closed = True
        for subscribers in list(self._by_run.values()):
            for subscription in subscribers:
                subscription.wake()
        for subscription in self._all_runs:
            subscription.wake()
