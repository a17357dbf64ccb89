"""The background thread that keeps a run's directives fresh.

It holds a Server-Sent Events stream open on ``GET /v1/runs/{id}/directives/stream`` and
resumes it with ``Last-Event-ID`` (the highest ``seq`` on the board) after any disconnect, so a
directive is neither lost nor applied twice. A sidecar (or a proxy in front of it) that does
not stream — a 404/405/501, or an answer that is not ``text/event-stream`` — is asked by
long-poll instead (``GET …/directives?after=SEQ&wait=S``). While the sidecar cannot be reached
the thread backs off (``BACKOFF_*``); the agent never waits for it.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator

from agent_watchdog_client.directive import Directive, DirectiveBoard
from agent_watchdog_client.transport import SidecarUnavailable, Transport, shutdown_quietly

log = logging.getLogger("agent_watchdog_client")

SSE_READ_TIMEOUT = 45.0  # seconds without a byte before the stream is presumed dead (the
#                          sidecar sends a keep-alive comment every 15 s)
CONNECT_TIMEOUT = 2.0
POLL_WAIT = 25.0  # seconds a long-poll may be held by the sidecar
BACKOFF_FIRST = 0.25  # seconds before reconnecting after a failure, doubled up to BACKOFF_MAX
BACKOFF_MAX = 5.0
MAX_EVENT_BYTES = 1024 * 1024  # one directive with its report prompt is a few KiB
NO_STREAM_STATUSES = frozenset({404, 405, 406, 501})


class StreamUnsupported(Exception):
    """The sidecar answered the stream request, but not with a stream."""


class DirectiveListener:
    """One daemon thread per run, started by the run and stopped when it ends."""

    def __init__(self, transport: Transport, run_id: str, board: DirectiveBoard,
                 on_directive: Callable[[Directive], None] | None = None) -> None:
        self.transport = transport
        self.run_id = run_id
        self.board = board
        self.on_directive = on_directive
        self.use_stream = True
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None  # of the open request, to unblock reads
        self._thread = threading.Thread(target=self._main, daemon=True,
                                        name=f"watchdog-directives-{run_id[:8]}")
        self._quoted = urllib.parse.quote(run_id, safe="")

    def start(self) -> None:
        self._thread.start()

    def stop(self, join_timeout: float = 0.2) -> None:
        """Stop listening; closes the open connection so a blocked read returns at once."""
        self._stop.set()
        with self._lock:
            sock = self._socket
        shutdown_quietly(sock)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(join_timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # -- the thread -----------------------------------------------------------------------------

    def _main(self) -> None:
        backoff = BACKOFF_FIRST
        while not self._stop.is_set():
            try:
                if self.use_stream:
                    self._stream()
                else:
                    self._poll()
                backoff = BACKOFF_FIRST  # the sidecar answered: reconnect at once
                continue
            except StreamUnsupported as exc:
                log.debug("directive stream unavailable (%s); long-polling instead", exc)
                self.use_stream = False
                continue
            except SidecarUnavailable:
                pass  # said once by the transport's Reachability
            except (OSError, http.client.HTTPException, ValueError) as exc:
                if self._stop.is_set():
                    return
                log.debug("directive stream for run %s broke: %s", self.run_id, exc)
            self._stop.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    def _deliver(self, data: str) -> None:
        try:
            directive = Directive.from_json(json.loads(data))
        except ValueError as exc:
            log.debug("ignoring an undecodable directive for run %s: %s", self.run_id, exc)
            return
        if self.board.post(directive) and self.on_directive is not None:
            self.on_directive(directive)

    def _open(self, path: str, headers: dict[str, str], timeout: float
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        transport = self.transport
        connection = transport.connect(CONNECT_TIMEOUT)
        started = transport.health.started()
        try:
            connection.connect()
            sock = connection.sock
            with self._lock:
                if self._stop.is_set():
                    connection.close()
                    raise SidecarUnavailable("stopped")
                # Kept here: http.client drops connection.sock once a response says it closes.
                self._socket = sock
            if sock is not None:
                sock.settimeout(timeout)
            connection.request("GET", transport.path(path), headers=transport.headers(headers))
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            if not self._stop.is_set():
                transport.health.failed(exc, started)
            raise SidecarUnavailable(str(exc)) from exc
        transport.health.answered(response.status, started)
        return connection, response

    def _release(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._socket = None
        connection.close()

    def _stream(self) -> None:
        headers = {"Accept": "text/event-stream"}
        if self.board.last_seq:
            headers["Last-Event-ID"] = str(self.board.last_seq)
        path = f"/v1/runs/{self._quoted}/directives/stream"
        connection, response = self._open(path, headers, SSE_READ_TIMEOUT)
        try:
            content_type = response.getheader("Content-Type", "")
            if response.status in NO_STREAM_STATUSES or (
                    response.status == 200 and "text/event-stream" not in content_type):
                raise StreamUnsupported(f"HTTP {response.status} {content_type}")
            if response.status != 200:
                raise ValueError(f"HTTP {response.status} {response.read(500)!r}")
            for data in sse_events(response):
                self._deliver(data)
        finally:
            self._release(connection)

    def _poll(self) -> None:
        path = (f"/v1/runs/{self._quoted}/directives?after={self.board.last_seq}"
                f"&wait={POLL_WAIT:g}")
        connection, response = self._open(path, {"Accept": "application/json"}, POLL_WAIT + 10)
        try:
            body = response.read(MAX_EVENT_BYTES * 10)
            if response.status != 200:
                raise ValueError(f"HTTP {response.status} {body[:500]!r}")
            answer = json.loads(body)
            for item in answer.get("directives", []) if isinstance(answer, dict) else []:
                self._deliver(json.dumps(item))
        finally:
            self._release(connection)


def sse_events(stream: http.client.HTTPResponse) -> Iterator[str]:
    """The ``data`` of each event of a ``text/event-stream`` (comments and ``retry:`` skipped;
    multi-line data joined with newlines, as EventSource does)."""
    data: list[str] = []
    size = 0
    while True:
        raw = stream.readline(MAX_EVENT_BYTES)
        if not raw:
            return  # the server closed the stream: reconnect with Last-Event-ID
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
            data, size = [], 0
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            value = value[1:] if value.startswith(" ") else value
            size += len(value)
            if size > MAX_EVENT_BYTES:
                raise ValueError("directive event larger than MAX_EVENT_BYTES")
            data.append(value)
