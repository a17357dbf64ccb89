"""Pass-through (DESIGN §2): what the OTLP receivers accept goes on, unchanged, to the platform's
OTLP/HTTP endpoint (``forward_endpoint``), so a sidecar as the agent's first hop does not cut
its tracing, metrics or logs.

Theory of operation
-------------------
* A receiver calls :meth:`Forwarder.offer` with the body it accepted — over HTTP the bytes the
  agent sent, still in their content coding (gzip, deflate), which goes with them; over gRPC
  the message grpcio inflated (gRPC's compression is the connection's, not the message's) —
  and answers the agent at once:
  ``offer`` appends to a queue and returns; it never awaits, so the upstream cannot delay or
  fail the agent's export.
* The queue is bounded by requests (``forward_queue_size``, default
  ``MAX_FORWARD_QUEUE_REQUESTS``) and by bytes (``MAX_FORWARD_QUEUE_BYTES``), the request being
  sent included. A request that does not fit is dropped at once and counted
  (``dropped_queue_full``): the newest is refused, as the SDK's batch processor and the
  Collector's sending queue do, so what waits keeps its order.
* One sender task posts the head of the queue to ``{forward_endpoint}/v1/{signal}`` with the
  request's ``Content-Type`` and ``Content-Encoding``: the body goes as it was offered, never
  compressed again (byte for byte what the agent sent over HTTP, but for the two forms a
  Collector does not read: :func:`~watchdog.core.spans.codings.forwardable`).
  One request in flight keeps the order; the throughput (one request per upstream round trip)
  is ample for a sidecar's one agent.
* Failures follow the OTLP/HTTP specification: 429, 502, 503, 504 and transport errors are
  retried after an exponential backoff with jitter, or the upstream's ``Retry-After`` if
  longer; any other status is permanent (``dropped_permanent``). A request is given up
  ``RETRY_MAX_ELAPSED`` seconds after it was offered (``dropped_retries_exhausted``), the
  Collector's ``retry_on_failure`` default.
* :meth:`Forwarder.stop` refuses new requests and keeps sending for at most its ``timeout``;
  what is still queued then is counted ``dropped_shutdown``.

:class:`RetryPolicy` and :func:`is_retryable` are pure; the sender is the shell around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

import aiohttp

from watchdog.core.durations import parse_retry_after
from watchdog.core.version import __version__
from watchdog.shell.config import DEFAULT_MAX_FORWARD_QUEUE_REQUESTS, Config, url_for_logs
from watchdog.shell.tls import context_for

log = logging.getLogger("watchdog.forward")

Signal = Literal["traces", "metrics", "logs"]
SIGNALS: tuple[Signal, ...] = ("traces", "metrics", "logs")

MAX_FORWARD_QUEUE_REQUESTS = DEFAULT_MAX_FORWARD_QUEUE_REQUESTS  # forward_queue_size default
# Memory the queue may hold: four requests of the largest size a receiver accepts (16 MiB).
MAX_FORWARD_QUEUE_BYTES = 64 * 1024 * 1024
REQUEST_TIMEOUT = 10.0  # seconds per attempt, the OTLP exporters' default
INITIAL_BACKOFF = 1.0  # seconds before the first retry, doubling up to MAX_BACKOFF
MAX_BACKOFF = 30.0
BACKOFF_JITTER = 0.2  # each backoff is scaled by a random factor in [0.8, 1.2]
RETRY_MAX_ELAPSED = 300.0  # seconds from offer to giving up (Collector: max_elapsed_time 5m)
SHUTDOWN_FLUSH_TIMEOUT = 5.0  # seconds stop() keeps sending what is queued
LOG_INTERVAL = 60.0  # seconds between repeated warnings about permanent failures
# OTLP/HTTP: "429, 502, 503, 504 ... the client SHOULD retry"; every other failure is final.
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
CODINGS = frozenset({"gzip", "deflate"})  # a body offered in one is sent with its header


class Outcome:
    """The ``outcome`` label of ``agent_watchdog_forwarded_total``."""

    SENT = "sent"
    RETRIED = "retried"  # one failed attempt that will be tried again
    DROPPED_QUEUE_FULL = "dropped_queue_full"
    DROPPED_PERMANENT = "dropped_permanent"
    DROPPED_RETRIES_EXHAUSTED = "dropped_retries_exhausted"
    DROPPED_SHUTDOWN = "dropped_shutdown"
    ALL = (SENT, RETRIED, DROPPED_QUEUE_FULL, DROPPED_PERMANENT, DROPPED_RETRIES_EXHAUSTED,
           DROPPED_SHUTDOWN)


class ForwardMetrics(Protocol):
    """What the forwarder reports; :class:`watchdog.shell.metrics.Metrics` implements it."""

    def forwarded(self, signal: str, outcome: str, count: int = 1) -> None: ...


def is_retryable(status: int | None) -> bool:
    """``None`` is a transport error (refused, reset, timed out): worth another try."""
    return status is None or status in RETRYABLE_STATUSES


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial_backoff: float = INITIAL_BACKOFF
    max_backoff: float = MAX_BACKOFF
    jitter: float = BACKOFF_JITTER
    max_elapsed: float = RETRY_MAX_ELAPSED

    def delay(self, attempts: int, retry_after: float | None, age: float,
              rand: float = 0.5) -> float | None:
        """Seconds before the next attempt after ``attempts`` failed ones of a request offered
        ``age`` seconds ago, or None when that attempt would come too late (give up).
        Never sooner than the upstream's ``Retry-After`` asks, nor than the backoff (a
        ``Retry-After: 0`` does not make a busy loop); ``rand`` is in [0, 1)."""
        wait = min(self.initial_backoff * 2.0 ** max(attempts - 1, 0), self.max_backoff)
        wait *= 1 - self.jitter + 2 * self.jitter * rand
        if retry_after is not None:
            wait = max(wait, retry_after)
        return wait if age + wait <= self.max_elapsed else None


@dataclass(slots=True)
class Pending:
    signal: Signal
    body: bytes
    content_type: str
    encoding: str  # the body's Content-Encoding: "" or "identity" (none sent), gzip, deflate
    offered_at: float  # monotonic seconds


def signal_url(endpoint: str, signal: Signal) -> str:
    """``http://collector:4318`` -> ``http://collector:4318/v1/traces``, as the OTLP exporters
    build their per-signal URLs from ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
    return endpoint.rstrip("/") + f"/v1/{signal}"


class Forwarder:
    def __init__(self, endpoint: str, headers: Mapping[str, str], metrics: ForwardMetrics, *,
                 max_requests: int = MAX_FORWARD_QUEUE_REQUESTS,
                 max_bytes: int = MAX_FORWARD_QUEUE_BYTES,
                 retry: RetryPolicy | None = None,
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
        self.endpoint = endpoint
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.retry = retry or RetryPolicy()
        self._headers = {"User-Agent": f"agent-watchdog/{__version__}", **headers}
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._metrics = metrics
        self._queue: deque[Pending] = deque()  # the head is the request being sent
        self._queued_bytes = 0
        self._wake = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._failing = False  # the last attempt failed: log the recovery
        self._last_warning = -LOG_INTERVAL
        self._rng = random.Random()

    @classmethod
    def from_config(cls, config: Config, metrics: ForwardMetrics) -> Forwarder | None:
        """The forwarder ``config`` asks for, or None without ``forward_endpoint``."""
        if config.forward_endpoint is None:
            return None
        return cls(config.forward_endpoint, config.forward_headers, metrics,
                   max_requests=config.forward_queue_size)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def offer(self, signal: Signal, body: bytes, content_type: str, encoding: str = "") -> bool:
        """Queue one export request for the upstream (``body`` in its ``encoding``, sent so);
        False when it was dropped (counted)."""
        if self._closed:
            self._metrics.forwarded(signal, Outcome.DROPPED_SHUTDOWN)
            return False
        if (len(self._queue) >= self.max_requests
                or self._queued_bytes + len(body) > self.max_bytes):
            self._metrics.forwarded(signal, Outcome.DROPPED_QUEUE_FULL)
            return False
        self._queue.append(Pending(signal, body, content_type, encoding, time.monotonic()))
        self._queued_bytes += len(body)
        self._wake.set()
        return True

    async def start(self) -> None:
        for signal in SIGNALS:  # every series exists from the start, so rate() sees the first
            for outcome in Outcome.ALL:
                self._metrics.forwarded(signal, outcome, 0)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=await context_for([self.endpoint])),
            timeout=self._timeout, headers=self._headers)
        self._task = asyncio.create_task(self._run(), name="watchdog-forward")
        log.info("forwarding OTLP to %s", url_for_logs(self.endpoint))

    async def stop(self, timeout: float = SHUTDOWN_FLUSH_TIMEOUT) -> None:
        """Send what is queued for at most ``timeout`` seconds, then count the rest as dropped.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._wake.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        while self._queue:
            self._metrics.forwarded(self._pop().signal, Outcome.DROPPED_SHUTDOWN)
        if self._session is not None:
            await self._session.close()

    def _pop(self) -> Pending:
        item = self._queue.popleft()
        self._queued_bytes -= len(item.body)
        return item

    async def _run(self) -> None:
        while True:
            if not self._queue:
                if self._closed:
                    return  # flushed
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self._deliver(self._queue[0])
            except Exception:  # a bug here must not end forwarding for good; the log has it
                log.exception("forwarding failed")
                self._metrics.forwarded(self._queue[0].signal, Outcome.DROPPED_PERMANENT)
            self._pop()

    async def _deliver(self, item: Pending) -> None:
        """Attempt ``item`` until it is sent or given up; counts the outcome."""
        body = item.body  # as it came: never inflated and compressed again
        headers = {"Content-Type": item.content_type}
        if item.encoding in CODINGS:
            headers["Content-Encoding"] = item.encoding
        url = signal_url(self.endpoint, item.signal)
        attempts = 0
        while True:
            attempts += 1
            status, retry_after, reason = await self._post(url, body, headers)
            if status is not None and 200 <= status < 300:
                self._metrics.forwarded(item.signal, Outcome.SENT)
                if self._failing:
                    self._failing = False
                    log.info("forwarding to %s works again", url_for_logs(self.endpoint))
                return
            if not is_retryable(status):
                self._metrics.forwarded(item.signal, Outcome.DROPPED_PERMANENT)
                self._warn_permanent(item.signal, reason)
                return
            age = time.monotonic() - item.offered_at
            wait = self.retry.delay(attempts, retry_after, age, self._rng.random())
            if wait is None:
                self._metrics.forwarded(item.signal, Outcome.DROPPED_RETRIES_EXHAUSTED)
                log.warning("forwarding %s to %s: gave up after %d attempts in %.0fs (%s)",
                            item.signal, url_for_logs(self.endpoint), attempts, age, reason)
                return
            self._metrics.forwarded(item.signal, Outcome.RETRIED)
            if not self._failing:
                self._failing = True
                log.warning("forwarding %s to %s failed (%s); retrying, %d request(s) queued",
                            item.signal, url_for_logs(self.endpoint), reason, len(self._queue))
            await asyncio.sleep(wait)

    async def _post(self, url: str, body: bytes, headers: Mapping[str, str]
                    ) -> tuple[int | None, float | None, str]:
        """(status or None on a transport error, Retry-After seconds, a reason for logs)."""
        assert self._session is not None, "start() first"
        try:
            async with self._session.post(url, data=body, headers=headers,
                                          allow_redirects=False) as response:
                await response.read()  # drained, so the connection is reused
                retry_after = parse_retry_after(response.headers.get("Retry-After"), time.time())
                return response.status, retry_after, f"HTTP {response.status}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return None, None, f"{type(exc).__name__}: {exc}".strip(": ")

    def _warn_permanent(self, signal: str, reason: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= LOG_INTERVAL:
            self._last_warning = now
            log.warning("forwarding %s to %s refused (%s): dropped; a retry would not help "
                        "(further refusals are counted in agent_watchdog_forwarded_total)",
                        signal, url_for_logs(self.endpoint), reason)
