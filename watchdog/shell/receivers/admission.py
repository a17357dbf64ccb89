"""Admission control shared by the OTLP receivers, in two stages.

* **Processing**: a request being received, decoded and applied holds one of
  ``max_pending_requests`` slots — but an HTTP upload keeps its slot only while its body
  arrives at a useful rate (``MIN_UPLOAD_RATE``); a slower one gives it back at the end of its
  rate window, or at once when a newcomer finds every slot taken (it is *behind*: fewer bytes
  than the rate since its window began), waits without it and takes one again once its body is
  complete. Fast exporters are thus bounded (and refused fast) as a whole, and slow uploaders
  never hold what the others need, not even for one window.
* **Uploads** (HTTP): every request whose body is still arriving holds an upload slot, bounded
  in total and per client address, for at most ``BODY_READ_TIMEOUT``. Waiting for a slow
  client costs a socket and its buffer, not a worker, so this bound is generous; the
  per-client bound keeps one host's slow uploads from taking every slot.

Past either bound a receiver answers with back-pressure (HTTP 503 + Retry-After, gRPC
UNAVAILABLE with RetryInfo) instead of queueing: OTLP exporters retry those with backoff.

A request over ``max_request_bytes`` is refused for good (a retry would not fit either); the
receivers count it and log the first of them each ``LOG_INTERVAL`` (:class:`Oversize`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from watchdog.shell.errors import Overloaded

log = logging.getLogger("watchdog.receivers")

RETRY_AFTER_SECONDS = 1.0
# An upload keeps its processing slot only while its body arrives at least this fast (bytes
# per second): 64 KiB/s is far below any local exporter and far above a slow-loris client.
MIN_UPLOAD_RATE = 64 * 1024
# ... judged no sooner than this after its window began (a fast body's first bytes follow its
# headers within a fraction of this)
BEHIND_GRACE = 0.01  # seconds
MAX_UPLOADS = 1024  # HTTP request bodies being received at once, from all clients
MAX_UPLOADS_PER_CLIENT = 256  # ... from one client address
LOG_INTERVAL = 60.0  # seconds between two warnings of requests refused as too large


class Admission:
    def __init__(self, max_pending: int) -> None:
        self.max_pending = max_pending
        self.pending = 0
        self.reading: set[Slot] = set()  # slots whose upload's body is still arriving
        self._oversize: dict[str, Oversize] = {}

    def oversize(self, transport: str, limit: int) -> Oversize:
        """The too-large warning of ``transport``, one for all its receivers (gRPC's two
        servers, every signal's service)."""
        warning = self._oversize.get(transport)
        if warning is None:
            warning = self._oversize[transport] = Oversize(transport, limit)
        return warning

    def check(self) -> None:
        """Refuse now if no slot is free (before reading a body that could not be served); a
        slot held by an upload that is behind is taken from it first."""
        if self.pending >= self.max_pending:
            now = time.monotonic()
            for slot in self.reading:
                if slot.behind(now):
                    slot.release()  # it reads on without one, and takes one again when complete
                    break
        if self.pending >= self.max_pending:
            raise Overloaded(f"{self.pending} export requests in progress (max_pending_requests="
                             f"{self.max_pending}); retry later", retry_after=RETRY_AFTER_SECONDS)

    def __enter__(self) -> Admission:
        self.check()
        self.pending += 1
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.pending -= 1

    def slot(self) -> Slot:
        return Slot(self)


class Slot:
    """One processing slot that can be given back and taken again (an upload that slows down
    gives its slot back while it trickles in; see ``otlp_http``). ``release`` is idempotent.

    While its upload's body arrives (``start_reading`` .. ``stop_reading``) the slot counts the
    bytes of the current rate window (``window_start``, ``window_bytes``)."""

    __slots__ = ("admission", "held", "window_bytes", "window_start")

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.held = False
        self.window_start = 0.0
        self.window_bytes = 0

    def take(self) -> None:
        if not self.held:
            self.admission.__enter__()
            self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.admission.pending -= 1

    def start_reading(self) -> None:
        self.new_window()
        self.admission.reading.add(self)

    def stop_reading(self) -> None:
        self.admission.reading.discard(self)

    def new_window(self) -> None:
        self.window_start, self.window_bytes = time.monotonic(), 0

    def slow(self) -> bool:
        """At the end of a window: it arrived slower than ``MIN_UPLOAD_RATE``."""
        return self.window_bytes < MIN_UPLOAD_RATE * (time.monotonic() - self.window_start)

    def behind(self, now: float) -> bool:
        """Held by an upload that has received fewer bytes than the rate since its window
        began (judged after ``BEHIND_GRACE``): a newcomer may take its slot."""
        elapsed = now - self.window_start
        return (self.held and elapsed >= BEHIND_GRACE
                and self.window_bytes < MIN_UPLOAD_RATE * elapsed)


class Uploads:
    """Upload slots: at most ``max_total`` bodies arriving, ``max_per_client`` per address."""

    def __init__(self, max_total: int | None = None, max_per_client: int | None = None) -> None:
        self.max_total = MAX_UPLOADS if max_total is None else max_total
        self.max_per_client = MAX_UPLOADS_PER_CLIENT if max_per_client is None else max_per_client
        self.by_client: Counter[str] = Counter()
        self.total = 0

    @contextmanager
    def slot(self, client: str) -> Iterator[None]:
        if self.total >= self.max_total:
            raise Overloaded(f"{self.total} request bodies are being received (at most "
                             f"{self.max_total}); retry later", retry_after=RETRY_AFTER_SECONDS)
        if self.by_client[client] >= self.max_per_client:
            raise Overloaded(f"{self.by_client[client]} request bodies are being received from "
                             f"{client} (at most {self.max_per_client} per client); retry later",
                             retry_after=RETRY_AFTER_SECONDS)
        self.total += 1
        self.by_client[client] += 1
        try:
            yield
        finally:
            self.total -= 1
            self.by_client[client] -= 1
            if not self.by_client[client]:
                del self.by_client[client]


class Oversize:
    """The warning for export requests refused over ``max_request_bytes``: the first is logged,
    then at most one each ``LOG_INTERVAL``, which says how many came since (every one is
    counted in ``export_requests_total{outcome="too_large"}``)."""

    def __init__(self, transport: str, limit: int) -> None:
        self.transport = transport  # "HTTP" or "gRPC", for the log
        self.limit = limit
        self._last = -LOG_INTERVAL
        self._refused = 0  # since the last warning

    def refused(self, size: int | None) -> None:
        """One request refused; ``size`` its bytes (after decompression) where they are known
        (an HTTP body is refused as soon as it is over, not read to its end)."""
        self._refused += 1
        now = time.monotonic()
        if now - self._last < LOG_INTERVAL:
            return
        self._last, count, self._refused = now, self._refused, 0
        log.warning("OTLP/%s: %d export request(s) refused over max_request_bytes=%d%s; the "
                    "exporter drops them: send smaller batches or raise the limit (each is "
                    "counted in agent_watchdog_export_requests_total{outcome=\"too_large\"}; "
                    "this is logged at most every %.0f s)", self.transport, count, self.limit,
                    "" if size is None else f" (the last: {size} bytes)", LOG_INTERVAL)
