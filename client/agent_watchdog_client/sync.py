"""The agent's side of read-your-writes (DESIGN §8): before a model request, the run's call
spans that ended since its last sync go to ``POST /v1/runs/{id}/sync?after=SEQ`` as an OTLP
protobuf body, and the sidecar answers once it has applied them, with the directives they
caused and the run's budget view (see ``watchdog/core/sync.py`` on the sidecar).

The same spans still go through the agent's OTLP exporter; the sidecar applies each span once,
whichever copy comes first. Each agent thread keeps one connection open (a sync is a few
hundred microseconds on loopback; a new TCP connection would double it). When the sidecar
cannot be reached, syncs are skipped for a while (``RETRY_FIRST`` doubling to ``RETRY_MAX``)
so a dead sidecar costs the agent nothing per step: the run steers by its local counts, and the
transport's :class:`~agent_watchdog_client.transport.Reachability` says so once.

Encoding needs ``opentelemetry-exporter-otlp-proto-common`` (every OTLP exporter depends on
it); without it the run still syncs its directives, with an empty body.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from agent_watchdog_client.directive import Directive
from agent_watchdog_client.transport import (
    MAX_RESPONSE_BYTES,
    DeadlineConnection,
    Transport,
)

log = logging.getLogger("agent_watchdog_client")

SYNC_TIMEOUT = 2.0  # seconds; the sidecar answers a sync in milliseconds, or is in trouble
RETRY_FIRST = 0.5  # seconds without syncing after a failure, doubled up to RETRY_MAX
RETRY_MAX = 10.0
ANNOUNCE_HEADER = "X-Watchdog-Announce"  # the run's announcement (JSON), on its first syncs
MAX_ANNOUNCE_HEADER = 4096  # characters; JSON escapes make it ASCII, well inside header limits

Encoder = Callable[[Sequence[ReadableSpan]], bytes]


def _load_encoder() -> Encoder | None:
    try:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    except ImportError:
        return None

    def encode(spans: Sequence[ReadableSpan]) -> bytes:
        body: bytes = encode_spans(spans).SerializeToString()
        return body

    return encode


@dataclass(frozen=True, slots=True)
class SyncAnswer:
    tool_calls: int
    budget: dict[str, Any]
    directives: list[Directive] = field(default_factory=list)
    ended: bool = False
    iterations: int = 0  # the run's model calls, as the sidecar counted them

    @classmethod
    def from_json(cls, data: Any) -> SyncAnswer:
        if not isinstance(data, dict):
            raise ValueError("a sync answer must be a JSON object")
        directives = []
        for item in data.get("directives") or ():
            directives.append(Directive.from_json(item))
        budget = data.get("budget")
        return cls(tool_calls=_count(data.get("tool_calls")),
                   budget=budget if isinstance(budget, dict) else {},
                   directives=directives, ended=bool(data.get("ended")),
                   iterations=_count(data.get("iterations")))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class SyncChannel:
    """One per :class:`~agent_watchdog_client.Watchdog`; thread-safe (a connection per thread)."""

    def __init__(self, transport: Transport, timeout: float = SYNC_TIMEOUT,
                 retry_first: float = RETRY_FIRST) -> None:
        self.transport = transport
        self.timeout = timeout
        self.retry_first = retry_first
        self.encode = _load_encoder()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._skip_until = 0.0
        self._retry_delay = retry_first
        self.failures = 0
        self.sent = 0

    @property
    def available(self) -> bool:
        """False while the sidecar is presumed down (a sync would be skipped): after a failed
        sync, until the retry delay has passed or the sidecar answered another request of this
        client since (a heartbeat, the directive stream: it is back)."""
        return time.monotonic() >= self._skip_until or self.transport.health.reachable is True

    def sync(self, run_id: str, spans: Sequence[ReadableSpan], after: int,
             stop: str | None = None, announce: dict[str, Any] | None = None
             ) -> SyncAnswer | None:
        """Send ``spans`` (and ``stop``: the run stopped itself at its budget; ``announce``: who
        the run is and its budget, until the sidecar has heard it); the answer, or None when
        the sidecar could not be asked (the caller keeps the spans for the next sync)."""
        if not self.available:
            return None
        body = self.encode(spans) if self.encode is not None and spans else b""
        path = self.transport.path(
            f"/v1/runs/{urllib.parse.quote(run_id, safe='')}/sync?after={after}"
            + (f"&stop={stop}" if stop else ""))
        headers = self.transport.headers({"Content-Type": "application/x-protobuf",
                                          "Accept": "application/json"})
        said = json.dumps(announce, separators=(",", ":")) if announce is not None else ""
        if said and len(said) <= MAX_ANNOUNCE_HEADER:  # (longer: the heartbeat's body says it)
            headers[ANNOUNCE_HEADER] = said  # (a header: a sidecar that predates it ignores it)
        started = self.transport.health.started()
        try:
            status, payload = self._post(path, body, headers)
            if status == 400 and ANNOUNCE_HEADER in headers:
                # an announcement the sidecar refuses (the heartbeat's answer says why): the
                # spans go without it, as they did before syncs announced, not never
                del headers[ANNOUNCE_HEADER]
                status, payload = self._post(path, body, headers)
        except (OSError, http.client.HTTPException) as exc:
            self._failed(exc, started)
            return None
        self.transport.health.answered(status, started, payload)
        self._retry_delay = self.retry_first
        if status != 200:
            log.debug("sync for run %s: HTTP %s %r", run_id, status, payload[:300])
            return None
        try:
            answer = SyncAnswer.from_json(json.loads(payload))
        except ValueError as exc:
            log.debug("sync for run %s: undecodable answer: %s", run_id, exc)
            return None
        self.sent += 1
        return answer

    def _post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        fresh = connection is None
        for _attempt in range(2):
            if connection is None:
                connection = self.transport.connect(self.timeout)
                self._local.connection = connection
            try:
                if isinstance(connection, DeadlineConnection):
                    connection.begin(self.timeout)
                connection.request("POST", path, body=body, headers=headers)
                response = connection.getresponse()
                payload = response.read(MAX_RESPONSE_BYTES)
                if response.will_close:
                    connection.close()
                    self._local.connection = None
                return response.status, payload
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                self._local.connection = connection = None
                if fresh or isinstance(exc, TimeoutError):
                    raise  # (a sidecar that did not answer in time: not tried again at once)
                fresh = True  # a kept-alive connection the server closed: once more, anew
        raise http.client.HTTPException("unreachable")  # pragma: no cover - loop returns/raises

    def _failed(self, exc: BaseException, started: int) -> None:
        self.failures += 1
        self.transport.health.failed(exc, started)
        with self._lock:
            self._skip_until = time.monotonic() + self._retry_delay
            self._retry_delay = min(self._retry_delay * 2, RETRY_MAX)

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None
