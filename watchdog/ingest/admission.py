"""Admission control shared by the OTLP receivers, in two stages.

* **Processing**: a request being received, decoded and applied holds one of
  ``max_pending_requests`` slots — but an HTTP upload keeps its slot only while its body
  arrives at a useful rate (``otlp_http.MIN_UPLOAD_RATE``); a slower one gives it back, waits
  without it and takes one again once its body is complete. Fast exporters are thus bounded
  (and refused fast) as a whole, and slow uploaders never hold what the others need.
* **Uploads** (HTTP): every request whose body is still arriving holds an upload slot, bounded
  in total and per client address, for at most ``BODY_READ_TIMEOUT``. Waiting for a slow
  client costs a socket and its buffer, not a worker, so this bound is generous; the
  per-client bound keeps one host's slow uploads from taking every slot.

Past either bound a receiver answers with back-pressure (HTTP 503 + Retry-After, gRPC
UNAVAILABLE with RetryInfo) instead of queueing: OTLP exporters retry those with backoff.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from watchdog.errors import Overloaded

RETRY_AFTER_SECONDS = 1.0
MAX_UPLOADS = 1024  # HTTP request bodies being received at once, from all clients
MAX_UPLOADS_PER_CLIENT = 256  # ... from one client address


class Admission:
    def __init__(self, max_pending: int) -> None:
        self.max_pending = max_pending
        self.pending = 0

    def check(self) -> None:
        """Refuse now if no slot is free (before reading a body that could not be served)."""
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
    gives its slot back while it trickles in; see ``otlp_http``). ``release`` is idempotent."""

    __slots__ = ("admission", "held")

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.held = False

    def take(self) -> None:
        if not self.held:
            self.admission.__enter__()
            self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.admission.pending -= 1


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
