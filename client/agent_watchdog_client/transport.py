"""HTTP to the sidecar's control API, with the standard library only, failing open.

Every request has a short timeout and either answers or raises :class:`SidecarUnavailable`;
nothing here retries (the background threads decide when to try again). :class:`Reachability`
is what makes the client say *once* that the sidecar cannot be reached, instead of once per
call: the first failure after a success (or at start) logs one warning, later failures are
silent, and the first success after an outage logs that it is back.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import math
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("agent_watchdog_client")

DEFAULT_URL = "http://127.0.0.1:9477"
BACKGROUND_TIMEOUT = 2.0  # seconds for heartbeats and acks: a sidecar on localhost answers in ms
EXPLICIT_TIMEOUT = 5.0  # seconds for report(), checkpoint(), resume_context()
MAX_RESPONSE_BYTES = 4 * 1024 * 1024  # a report is the largest answer; anything bigger is wrong
REFUSED_STATUSES = frozenset({401, 403})  # the sidecar's answer to a missing or wrong token


class SidecarUnavailable(Exception):
    """The sidecar could not be reached, or did not answer in time."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class Reachability:
    """Whether the sidecar answered last time; logs the change, not every failure. Each request
    takes :meth:`started` before it goes out: an answer to a request sent before the latest
    failed one is old news (it was on its way when the sidecar went away) and says nothing."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._reachable: bool | None = None  # None: not tried yet
        self._failed_since = -1  # when the latest failed request started (monotonic ns)
        self._told_not_the_api = False

    @property
    def reachable(self) -> bool | None:
        return self._reachable

    @staticmethod
    def started() -> int:
        """A request's start, for :meth:`failed` and :meth:`succeeded`."""
        return time.monotonic_ns()

    def failed(self, error: BaseException, started: int) -> None:
        if self._mark_failed(started):
            log.warning("agent-watchdog sidecar unreachable at %s: %s; continuing without it",
                        self.url, _describe(error))

    def answered(self, status: int, started: int, body: bytes = b"") -> None:
        """An answer with ``status``: the sidecar is there, unless it refused this client's
        token (401, 403), which leaves the agent as unwatched as a sidecar that is down and is
        said once the same way (every later request is refused alike). A 404 that is not the
        control API's word on a run (``WATCHDOG_URL`` with a path, or another server's port)
        leaves it unwatched too, and is said once."""
        if status == 404 and not self._told_not_the_api and not _a_runs_404(body):
            self._told_not_the_api = True
            log.warning("agent-watchdog: %s answers HTTP 404 where the control API has a "
                        "route: WATCHDOG_URL is the API's base URL, with no path (default %s); "
                        "continuing without it", self.url, DEFAULT_URL)
        if status not in REFUSED_STATUSES:
            self.succeeded(started)
        elif self._mark_failed(started):
            log.warning("agent-watchdog sidecar at %s refused this client (HTTP %s): set "
                        "WATCHDOG_API_TOKEN (or Watchdog(token=...)) to the sidecar's "
                        "api_token; continuing without it", self.url, status)

    def _mark_failed(self, started: int) -> bool:
        """Whether this failure is news (the first since a success, or at start)."""
        with self._lock:
            self._failed_since = max(self._failed_since, started)
            if self._reachable is False:
                return False
            self._reachable = False
        return True

    def succeeded(self, started: int) -> None:
        if self._reachable is True:
            return
        with self._lock:
            if started < self._failed_since:
                return
            was = self._reachable
            self._reachable = True
        if was is False:
            log.info("agent-watchdog sidecar reachable again at %s", self.url)


def _a_runs_404(body: bytes) -> bool:
    """Whether a 404's body is the control API's answer about a run (``no run 'x'``: it has
    ended, or was never seen), not its own or another server's "no such endpoint"."""
    try:
        error = json.loads(body)["error"]
        return bool(error["code"] == "not_found"
                    and not str(error["message"]).startswith("no such endpoint"))
    except (ValueError, KeyError, TypeError):
        return False


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text if isinstance(error, SidecarUnavailable) else f"{type(error).__name__}: {text}"


class _DeadlineSocket(socket.socket):
    """A connected socket whose reads share one deadline (:attr:`deadline`, monotonic): the
    standard library times each read alone, so a peer that trickles a byte a second holds a
    caller for as long as it likes (a port that answers garbage slowly)."""

    deadline = math.inf  # (none: each read is timed alone, as a stream's are)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        if self.deadline != math.inf:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no whole answer in time")
            self.settimeout(left)
        return super().recv_into(buffer, nbytes, flags)


class DeadlineConnection(http.client.HTTPConnection):
    """An HTTP connection whose answer must come whole within the timeout of the request
    (:meth:`begin`): each request of the agent's thread waits that long at most."""

    def connect(self) -> None:
        super().connect()
        plain = self.sock
        if type(plain) is socket.socket:
            self.sock = _DeadlineSocket(plain.family, plain.type, plain.proto,
                                        fileno=plain.detach())
            self.sock.settimeout(self.timeout)

    def begin(self, timeout: float) -> None:
        """Connect if need be; the answer to the next request must be read by ``timeout``
        seconds from now."""
        if self.sock is None:
            self.connect()
        if isinstance(self.sock, _DeadlineSocket):
            self.sock.deadline = time.monotonic() + timeout
            # (sending times out alone, with the whole timeout: the reads of the answer before,
            # on a kept-alive connection, left the socket's at what was left of their deadline)
            self.sock.settimeout(timeout)


class Transport:
    """Requests to one sidecar. Thread-safe: each request opens its own connection (the
    client sends a few requests per run, so keeping connections alive is not worth a pool)."""

    def __init__(self, url: str, token: str | None = None) -> None:
        try:  # (urllib's own errors, an unclosed [ or a port out of range, name no setting)
            parsed = urllib.parse.urlsplit(url)
            port = parsed.port
        except ValueError:
            parsed, port = urllib.parse.urlsplit(""), None
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"WATCHDOG_URL={url!r} is not allowed: expected "
                             f"http://HOST:PORT or https://HOST:PORT")
        self.url = url.rstrip("/")
        self._https = parsed.scheme == "https"
        self._host = parsed.hostname
        self._port = port or (443 if self._https else 80)
        self._prefix = parsed.path.rstrip("/")
        self._headers = {"User-Agent": "agent-watchdog-client"}
        if token:
            if not (token.isascii() and token.isprintable()):
                # (http.client would refuse the header at the first request, on the agent's
                # thread; the token itself is a secret, never shown)
                raise ValueError("WATCHDOG_API_TOKEN is not allowed: it holds a control or "
                                 "non-ASCII character (a line break?); a token is printable "
                                 "ASCII")
            self._headers["Authorization"] = f"Bearer {token}"
        self.health = Reachability(self.url)

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:  # (TLS reads its socket itself: there, each read is timed alone)
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        return DeadlineConnection(self._host, self._port, timeout=timeout)

    def path(self, path: str) -> str:
        return self._prefix + path

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**self._headers, **extra} if extra else dict(self._headers)

    def request(self, method: str, path: str, body: Any = None, *,
                timeout: float = BACKGROUND_TIMEOUT, accept: str = "application/json"
                ) -> Response:
        """One request; raises :class:`SidecarUnavailable` when there is no answer."""
        headers = self.headers({"Accept": accept})
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        connection = self.connect(timeout)
        started = self.health.started()
        try:
            if isinstance(connection, DeadlineConnection):
                connection.begin(timeout)
            connection.request(method, self.path(path), body=data, headers=headers)
            answer = connection.getresponse()
            payload = answer.read(MAX_RESPONSE_BYTES)
            response = Response(answer.status, payload, answer.getheader("Content-Type", ""))
        except (OSError, http.client.HTTPException) as exc:
            self.health.failed(exc, started)
            raise SidecarUnavailable(_describe(exc)) from exc
        finally:
            connection.close()
        self.health.answered(response.status, started, response.body)
        return response


def shutdown_quietly(sock: socket.socket | None) -> None:
    """Unblock a thread reading from ``sock`` (another thread's connection)."""
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
