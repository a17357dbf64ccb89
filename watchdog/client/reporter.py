"""The background thread that tells the sidecar about runs: announcements, calls in flight,
heartbeats and acks.

The agent's thread never sends anything itself. It marks a run *dirty* (a call started or
ended, a directive was applied) and sets an event; this thread wakes, takes every dirty run and
sends one heartbeat per run with the run's state at that moment. However fast calls start and
end, each run costs at most one request in flight at a time: bursts coalesce. Runs that stay
quiet still get a heartbeat every ``HEARTBEAT_INTERVAL`` so the sidecar knows they are alive.

Heartbeat body (``POST /v1/runs/{id}/heartbeat``): ``messages``, ``in_flight``,
``oldest_call_started`` and, until the sidecar has accepted one, ``announce`` (agent, session,
parent run, budget) — so a run is known with its budget before any of its spans has ended. A
404 means the sidecar does not know the run (it restarted without state, or missed the
announcement): the next heartbeat announces again; a 404 to an announcement means the run has
already ended there, and the run is not reported any more.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections import deque
from typing import TYPE_CHECKING, Any

from watchdog.client.transport import SidecarUnavailable, Transport

if TYPE_CHECKING:
    from watchdog.client.run import Run

log = logging.getLogger("watchdog.client")

HEARTBEAT_INTERVAL = 5.0  # seconds between heartbeats of a run with nothing new to say
RETRY_FIRST = 0.5  # seconds before trying an unreachable sidecar again, doubled up to RETRY_MAX
RETRY_MAX = 10.0
MAX_TRACKED_RUNS = 10_000  # runs open at once in one process; more are not reported
MAX_PENDING_POKES = 4096  # changes not yet picked up; beyond it the oldest are dropped (the
#                           periodic heartbeat still reports those runs)


class Reporter:
    """One per :class:`~watchdog.client.Watchdog`, started with its first run."""

    def __init__(self, transport: Transport, heartbeat_interval: float = HEARTBEAT_INTERVAL
                 ) -> None:
        self.transport = transport
        self.heartbeat_interval = heartbeat_interval
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._runs: dict[str, Run] = {}
        self._dirty: dict[str, Run] = {}  # runs to report, owned by the thread (under _lock)
        self._pokes: deque[Run] = deque(maxlen=MAX_PENDING_POKES)  # appended lock-free
        self._next_beat: dict[str, float] = {}
        self._retry_at = 0.0
        self._retry_delay = RETRY_FIRST
        self.dropped_runs = 0  # runs beyond MAX_TRACKED_RUNS
        self.sent = 0  # heartbeats and acks answered by the sidecar
        self._thread: threading.Thread | None = None

    # -- called from agent threads (cheap, never blocks on I/O) --------------------------------

    def add(self, run: Run) -> None:
        with self._lock:
            if len(self._runs) >= MAX_TRACKED_RUNS:
                self.dropped_runs += 1
                return
            self._runs[run.id] = run
            self._dirty[run.id] = run
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, daemon=True,
                                                name="watchdog-reporter")
                self._thread.start()
        self._wake.set()

    def remove(self, run: Run) -> None:
        with self._lock:
            self._runs.pop(run.id, None)
            self._dirty.pop(run.id, None)
            self._next_beat.pop(run.id, None)

    def poke(self, run: Run) -> None:
        """Something about ``run`` changed: report it soon."""
        self._pokes.append(run)  # deque.append is atomic; an overflow only drops a duplicate
        if not self._wake.is_set():
            self._wake.set()

    def close(self, timeout: float = 1.0) -> None:
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the thread -----------------------------------------------------------------------------

    def _main(self) -> None:
        while True:
            timeout = self._until_next(time.monotonic())
            self._wake.wait(timeout)
            self._wake.clear()
            with self._lock:
                if self._stopping:
                    return
                pokes = self._pokes
                while pokes:
                    run = pokes.popleft()
                    if run.id in self._runs:
                        self._dirty[run.id] = run
                now = time.monotonic()
                if now < self._retry_at:
                    continue  # the sidecar is down: keep what is dirty for later
                due = self._dirty
                self._dirty = {}
                for run_id, at in self._next_beat.items():
                    if at <= now and run_id not in due and run_id in self._runs:
                        due[run_id] = self._runs[run_id]
            self._send_all(due)

    def _until_next(self, now: float) -> float | None:
        with self._lock:
            if (self._dirty or self._pokes) and now >= self._retry_at:
                return 0.0
            times = list(self._next_beat.values())
        if now < self._retry_at:
            return self._retry_at - now
        return max(min(times) - now, 0.0) if times else None

    def _send_all(self, due: dict[str, Run]) -> None:
        for run_id, run in due.items():
            if run_id not in self._runs:
                continue  # ended meanwhile
            try:
                self._send(run)
            except SidecarUnavailable:
                with self._lock:  # keep everything not yet sent for the retry
                    for pending_id, pending in due.items():
                        if pending_id in self._runs:
                            self._dirty.setdefault(pending_id, pending)
                    self._retry_at = time.monotonic() + self._retry_delay
                    self._retry_delay = min(self._retry_delay * 2, RETRY_MAX)
                return
        self._retry_delay = RETRY_FIRST

    def _send(self, run: Run) -> None:
        quoted = urllib.parse.quote(run.id, safe="")
        ack = run.pending_ack()
        if ack is not None:
            response = self.transport.request("POST", f"/v1/runs/{quoted}/ack", {"seq": ack})
            if response.ok:
                run.acked(ack)
                self.sent += 1
        body: dict[str, Any] = run.heartbeat_body()
        announcing = not run.announced
        if announcing:
            body["announce"] = run.announcement()
        response = self.transport.request("POST", f"/v1/runs/{quoted}/heartbeat", body)
        with self._lock:
            if run.id in self._runs:
                self._next_beat[run.id] = time.monotonic() + self.heartbeat_interval
        if response.ok:
            run.announced = True
            self.sent += 1
        elif response.status == 404:
            if announcing:  # the sidecar has already ended this run: nothing more to say
                self.remove(run)
            else:
                run.announced = False
                self.poke(run)
        else:
            log.debug("heartbeat for run %s: HTTP %s %r", run.id, response.status,
                      response.body[:300])
