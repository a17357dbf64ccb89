"""Signed webhook delivery of directives (Standard Webhooks, https://www.standardwebhooks.com).

Each directive is POSTed as JSON (:meth:`Directive.to_json`) with the headers

* ``webhook-id``: the directive id — the receiver's idempotency key (a retry repeats it);
* ``webhook-timestamp``: the attempt's time, integer unix seconds;
* ``webhook-signature``: ``v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>``, where the
  key is the base64-decoded part of a ``whsec_…`` secret, or the UTF-8 bytes of any other one.

:func:`sign` and :func:`verify` are pure; :func:`verify` is what a receiver (and the tests) run.

Theory of operation
-------------------
Deliveries live in the persisted outbox (:class:`~watchdog.shell.directives.store.DirectiveStore`),
inserted with their directive, so a restart continues where it stopped. :class:`WebhookSender`
picks due deliveries, attempts each (bounded concurrency), and records the outcome:

* 2xx → delivered;
* 408, 429, 5xx, a timeout or a network error → retried after an exponential backoff with
  jitter (1 s, 2 s, 4 s… capped at 5 min), or the receiver's ``Retry-After`` if longer; after
  ``max_attempts`` or ``max_age`` the delivery fails;
* any other status (3xx, 4xx) → failed at once: the receiver refused it and a retry would not
  change its mind.

Deliveries are at least once: a crash between the receiver's 2xx and the outbox update repeats
the POST with the same ``webhook-id``. On a clean shutdown attempts in flight finish first.
Deliveries of different directives are not ordered (retries overtake); receivers order by the
payload's ``seq``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import functools
import hashlib
import hmac
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

from watchdog.core.directives.model import Directive
from watchdog.core.durations import parse_retry_after
from watchdog.shell import logs
from watchdog.shell.clock import Clock, SystemClock
from watchdog.shell.config import WEBHOOK_SECRET_PREFIX, webhook_name
from watchdog.shell.directives.hub import DeliveryMetrics, NullMetrics
from watchdog.shell.directives.store import Delivery, DirectiveStore
from watchdog.shell.tls import context_for

log = logging.getLogger("watchdog.webhooks")

SIGNATURE_VERSION = "v1"
DEFAULT_TOLERANCE = 300.0  # seconds a receiver accepts between webhook-timestamp and its clock
REQUEST_TIMEOUT = 15.0  # seconds per attempt (the spec recommends 15-30 s)
MAX_CONCURRENT_ATTEMPTS = 16
DUE_BATCH = 64  # deliveries picked from the outbox at a time
IDLE_POLL = 1.0  # seconds between outbox checks when nothing is due and nothing wakes us
SHUTDOWN_GRACE = 5.0  # seconds attempts in flight get to finish on stop
MAX_RETRY_AFTER = 3600.0  # a receiver's Retry-After is honoured up to this many seconds

T = TypeVar("T")
Lane = Callable[..., Awaitable[Any]]


# -- signing (pure) ------------------------------------------------------------------------------

def secret_key(secret: str | bytes) -> bytes:
    """The HMAC key: ``whsec_<base64>`` decoded, raw bytes as they are, other strings as UTF-8."""
    if isinstance(secret, bytes):
        return secret
    if secret.startswith(WEBHOOK_SECRET_PREFIX):
        return base64.b64decode(secret[len(WEBHOOK_SECRET_PREFIX):])
    return secret.encode("utf-8")


def sign(msg_id: str, timestamp: int, body: bytes, secret: str | bytes) -> str:
    """The ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256>``."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode('ascii')}"


def signed_headers(msg_id: str, timestamp: int, body: bytes, secret: str | bytes
                   ) -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(msg_id, timestamp, body, secret),
            "content-type": "application/json"}


def verify(body: bytes, headers: Mapping[str, str], secret: str | bytes, *,
           now: float | None = None, tolerance: float = DEFAULT_TOLERANCE) -> bool:
    """True if ``headers`` carry a valid Standard Webhooks signature of ``body`` with a
    timestamp within ``tolerance`` seconds of ``now`` (default: the current time).

    ``body`` must be the raw request body, not re-serialised JSON. Header names are matched
    case-insensitively; any of several space-separated ``v1,…`` signatures may match (secret
    rotation). Receivers should also drop a repeated ``webhook-id``.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id")
    timestamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not msg_id or not timestamp or not signatures or not timestamp.isdigit():
        return False
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > tolerance:
        return False
    expected = sign(msg_id, int(timestamp), body, secret).encode()
    return any(hmac.compare_digest(expected, candidate.encode())
               for candidate in signatures.split() if candidate.startswith("v1,"))


# -- policy (pure) -------------------------------------------------------------------------------

class Outcome:
    DELIVERED = "delivered"
    RETRY = "retry"
    FAILED = "failed"


def classify(status: int) -> str:
    """What an HTTP status means for a delivery."""
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status in (408, 429) or status >= 500:
        return Outcome.RETRY
    return Outcome.FAILED


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial_delay: float = 1.0  # seconds before the first retry
    max_delay: float = 300.0  # backoff cap (5 min)
    jitter: float = 0.2  # each delay is scaled by a random factor in [1 - jitter, 1 + jitter]
    max_attempts: int = 300  # with the 5-min cap this is ~24 h: max_age usually ends it first
    max_age: float = 24 * 3600.0  # seconds from enqueue after which a delivery fails

    def delay(self, attempts: int, retry_after: float | None = None,
              rand: float = 0.5) -> float:
        """Seconds before the next attempt after ``attempts`` failed ones (``rand`` in [0, 1))."""
        backoff = min(self.initial_delay * 2.0 ** max(attempts - 1, 0), self.max_delay)
        backoff *= 1 - self.jitter + 2 * self.jitter * rand
        if retry_after is not None:
            backoff = max(backoff, min(retry_after, MAX_RETRY_AFTER))
        return backoff

    def gives_up(self, attempts: int, enqueued_at: float, next_at: float) -> bool:
        return attempts >= self.max_attempts or next_at - enqueued_at > self.max_age


# -- targets -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class WebhookTarget:
    name: str  # the outbox's key for this hook
    url: str
    secret: str
    actions: frozenset[str] | None = None  # None: every action
    agents: tuple[str, ...] | None = None  # globs on the agent name; None: every agent

    def wants(self, directive: Directive) -> bool:
        if self.actions is not None and directive.action not in self.actions:
            return False
        return self.agents is None or any(fnmatch.fnmatchcase(directive.agent, pattern)
                                          for pattern in self.agents)

    def __repr__(self) -> str:  # never the secret, nor a URL that may hold a token
        return f"WebhookTarget(name={self.name!r})"


def targets_from_config(hooks: Iterable[Mapping[str, Any]]) -> list[WebhookTarget]:
    """Targets from ``Config.webhooks`` (already validated by ``Config.validate``)."""
    targets = []
    for hook in hooks:
        actions = hook.get("actions")
        agents = hook.get("agents")
        targets.append(WebhookTarget(
            name=webhook_name(hook), url=str(hook["url"]), secret=str(hook["secret"]),
            actions=frozenset(actions) if actions else None,
            agents=tuple(agents) if agents else None))
    return targets


# -- delivery (the shell) ------------------------------------------------------------------------

class WebhookSender:
    """Delivers what the persisted outbox says is due. Store calls go through ``lane`` (the
    outbox's single store thread); ``notify()`` says new deliveries were stored."""

    def __init__(self, store: DirectiveStore, targets: Sequence[WebhookTarget], lane: Lane, *,
                 metrics: DeliveryMetrics | None = None, clock: Clock | None = None,
                 retry: RetryPolicy | None = None, request_timeout: float = REQUEST_TIMEOUT,
                 max_concurrent: int = MAX_CONCURRENT_ATTEMPTS,
                 rng: random.Random | None = None) -> None:
        self.store = store
        self.targets = {target.name: target for target in targets}
        self._lane = lane
        self.metrics: DeliveryMetrics = metrics or NullMetrics()
        self.clock: Clock = clock or SystemClock()
        self.retry = retry or RetryPolicy()
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._max_concurrent = max_concurrent
        # each webhook's share of the attempts at once: a slow receiver holds at most its own,
        # never the slots the others' deliveries need
        self._per_hook = max(1, max_concurrent // max(len(self.targets), 1))
        self._rng = rng or random.Random()
        self._wake = asyncio.Event()
        self._in_flight: dict[tuple[int, str], asyncio.Task[None]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False

    def hooks_for(self, directive: Directive) -> list[str]:
        return [name for name, target in self.targets.items() if target.wants(directive)]

    def notify(self) -> None:
        self._wake.set()

    async def start(self) -> None:
        if self._loop_task is not None:
            return
        failed = await self._lane(self.store.fail_unknown_hooks, list(self.targets),
                                  self.clock.now())
        if failed:
            log.warning("%d pending webhook deliveries were for webhooks no longer configured; "
                        "marked failed", failed)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                ssl=await context_for(target.url for target in self.targets.values())),
            timeout=self._timeout)
        self._loop_task = asyncio.create_task(self._run(), name="watchdog-webhooks")

    async def stop(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Stop picking deliveries; attempts in flight get ``grace`` seconds to finish (the
        rest stay pending in the outbox and are retried after a restart)."""
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        if self._in_flight:
            _done, pending = await asyncio.wait(list(self._in_flight.values()), timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()  # before looking: a wake-up while we look is not lost
            try:
                wait = await self._pick()
            except Exception:  # a failing loop must not stop deliveries for good; it says why
                log.exception("webhook delivery loop failed; retrying in %.0f s", IDLE_POLL)
                wait = IDLE_POLL
            if wait > 0 and not self._stopping:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)

    async def _pick(self) -> float:
        """Start attempts for due deliveries; returns how long to wait before looking again
        (new deliveries and finished attempts wake the loop sooner)."""
        now = self.clock.now()
        free = self._max_concurrent - len(self._in_flight)
        if free <= 0:
            return IDLE_POLL
        busy = list(self._in_flight)
        held = Counter(hook for _, hook in busy)
        full = [hook for hook, count in held.items() if count >= self._per_hook]
        due: list[Delivery] = await self._lane(self.store.due, now, min(free, DUE_BATCH), busy,
                                               full)
        for delivery in due:
            if held[delivery.hook] >= self._per_hook:
                continue  # (its share taken by this batch: the next pick takes it)
            held[delivery.hook] += 1
            key = (delivery.directive.global_seq, delivery.hook)
            task = asyncio.create_task(self._attempt(delivery))
            self._in_flight[key] = task
            task.add_done_callback(functools.partial(self._attempt_done, key))
        if due:
            return 0.0
        next_at: float | None = await self._lane(self.store.next_due_at, busy, full)
        if next_at is None:
            return IDLE_POLL
        return min(max(next_at - now, 0.0), IDLE_POLL)

    def _attempt_done(self, key: tuple[int, str], _task: asyncio.Task[None]) -> None:
        self._in_flight.pop(key, None)
        self._wake.set()

    async def _attempt(self, delivery: Delivery) -> None:
        directive = delivery.directive
        target = self.targets.get(delivery.hook)
        if target is None:
            await self._record(delivery, Outcome.FAILED, "webhook no longer configured", None)
            return
        outcome, error, retry_after = await self._post(target, directive)
        await self._record(delivery, outcome, error, retry_after)

    async def _post(self, target: WebhookTarget, directive: Directive
                    ) -> tuple[str, str | None, float | None]:
        body = json.dumps(directive.to_json(), separators=(",", ":")).encode()
        now = self.clock.now()
        headers = signed_headers(directive.id, int(now), body, target.secret)
        assert self._session is not None  # set by start()
        try:
            async with self._session.post(target.url, data=body, headers=headers,
                                          allow_redirects=False) as response:
                status = response.status
                retry_after = parse_retry_after(response.headers.get("Retry-After"), now)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return Outcome.RETRY, f"{type(exc).__name__}: {exc}".strip(": "), None
        outcome = classify(status)
        return outcome, None if outcome == Outcome.DELIVERED else f"HTTP {status}", retry_after

    async def _record(self, delivery: Delivery, outcome: str, error: str | None,
                      retry_after: float | None) -> None:
        directive = delivery.directive
        now = self.clock.now()
        attempts = delivery.attempts + 1
        seq, hook = directive.global_seq, delivery.hook
        if outcome == Outcome.DELIVERED:
            await self._lane(self.store.mark_delivered, seq, hook, now)
        elif outcome == Outcome.RETRY:
            next_at = now + self.retry.delay(attempts, retry_after, self._rng.random())
            if self.retry.gives_up(attempts, delivery.enqueued_at, next_at):
                outcome = Outcome.FAILED
                error = f"{error}; gave up after {attempts} attempts"
                await self._lane(self.store.mark_failed, seq, hook, error, now)
            else:
                await self._lane(self.store.mark_retry, seq, hook, next_at, error or "", now)
        else:
            await self._lane(self.store.mark_failed, seq, hook, error or "", now)
        self.metrics.directive_delivered(directive.action, "webhook", outcome)
        logs.directive_sent(directive, "webhook", outcome, hook=hook, attempt=attempts)
        if outcome == Outcome.FAILED:
            log.warning("webhook %s: directive %s (run %s, seq %d) not delivered: %s",
                        hook, directive.id, directive.run_id, directive.seq, error)
