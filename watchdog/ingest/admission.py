"""Admission control shared by the OTLP receivers: a bound on export requests in progress.

Past the bound a receiver answers with back-pressure (HTTP 503 + Retry-After, gRPC UNAVAILABLE
with RetryInfo) instead of queueing: OTLP exporters retry those with backoff.
"""

from __future__ import annotations

from types import TracebackType

from watchdog.errors import Overloaded

RETRY_AFTER_SECONDS = 1.0


class Admission:
    def __init__(self, max_pending: int) -> None:
        self.max_pending = max_pending
        self.pending = 0

    def __enter__(self) -> Admission:
        if self.pending >= self.max_pending:
            raise Overloaded(f"{self.pending} export requests in progress (max_pending_requests="
                             f"{self.max_pending}); retry later", retry_after=RETRY_AFTER_SECONDS)
        self.pending += 1
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.pending -= 1
