"""The background thread that tells the sidecar about runs: announcements, calls in flight,
heartbeats and acks.

The agent's thread never sends anything, and does not even wake this thread: it only changes
the run (a call started or ended, a directive was applied) and sets ``run.changed``. While any
run is open, this thread looks every ``REPORT_INTERVAL`` and sends one heartbeat per run whose
state differs from what the sidecar last heard — so a call that starts is reported within that
interval, however fast calls come and go, at no cost on the agent's path. A run with nothing new
still gets a heartbeat every ``HEARTBEAT_INTERVAL``, so the sidecar knows it is alive.

Heartbeat body (``POST /v1/runs/{id}/heartbeat``): ``messages``, ``in_flight``,
``oldest_call_started`` and, until the sidecar has accepted one, ``announce`` (agent, session,
parent run, budget) and ``trace_id`` (its span's trace) — so a run is known with its budget
before any of its spans has ended, and so is the trace a model request's ``traceparent`` names. A
404 means the sidecar does not know the run (it restarted without state, or missed the
announcement): the next heartbeat announces again; a 404 to an announcement means the run has
already ended there, and it is not reported any more. While the sidecar is unreachable the
thread backs off (``RETRY_FIRST`` doubling to ``RETRY_MAX``), and resumes as soon as another
request of the client (a sync, the directive stream) is answered.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from typing import Any, Protocol

from agent_watchdog_client.transport import SidecarUnavailable, Transport

log = logging.getLogger("agent_watchdog_client")

HEARTBEAT_INTERVAL = 5.0  # seconds between heartbeats of a run with nothing new to say
REPORT_INTERVAL = 0.05  # seconds between looks at open runs: a call's start is reported
#                         within this, and changes inside it coalesce into one heartbeat
RETRY_FIRST = 0.5  # seconds before trying an unreachable sidecar again, doubled up to RETRY_MAX
RETRY_MAX = 10.0
MAX_TRACKED_RUNS = 10_000  # runs open at once in one process; more are not reported


class Run(Protocol):
    """What the reporter reads of a run (:class:`agent_watchdog_client.Run`)."""

    id: str
    changed: bool
    announced: bool

    def heartbeat_body(self) -> dict[str, Any]: ...
    def announcement(self) -> dict[str, Any]: ...
    def trace_id(self) -> str | None: ...
    def pending_ack(self) -> int | None: ...
    def acked(self, seq: int) -> None: ...


class Reporter:
    """One per :class:`~agent_watchdog_client.Watchdog`, started with its first run."""

    def __init__(self, transport: Transport, heartbeat_interval: float = HEARTBEAT_INTERVAL,
                 retry_first: float = RETRY_FIRST) -> None:
        self.transport = transport
        self.heartbeat_interval = heartbeat_interval
        self.retry_first = retry_first
        self._lock = threading.Lock()
        self._wake = threading.Event()  # a run was added (the thread sleeps while none is open)
        self._halt = threading.Event()  # close()
        self._runs: dict[str, Run] = {}
        self._farewells: dict[str, Run] = {}  # ended runs with an ack still to send
        self._last_sent: dict[str, tuple[Any, ...]] = {}  # run id -> state the sidecar has
        self._next_beat: dict[str, float] = {}
        self._retry_at = 0.0
        self._retry_delay = retry_first
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
            self._next_beat[run.id] = 0.0  # announce at once
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, daemon=True,
                                                name="watchdog-reporter")
                self._thread.start()
        self._wake.set()

    def remove(self, run: Run) -> None:
        """Stop reporting ``run`` (it ended); an ack it still owes is sent first."""
        with self._lock:
            if self._runs.pop(run.id, None) is not None and run.pending_ack() is not None:
                self._farewells[run.id] = run
            self._next_beat.pop(run.id, None)
            self._last_sent.pop(run.id, None)
            farewell = run.id in self._farewells
        if farewell:
            self._wake.set()

    def poke(self, run: Run) -> None:
        """Something about ``run`` changed: report it at the next look."""
        run.changed = True

    def close(self, timeout: float = 1.0) -> None:
        self._halt.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the thread -----------------------------------------------------------------------------

    def _main(self) -> None:
        while not self._halt.is_set():
            now = time.monotonic()
            if now < self._retry_at and self.transport.health.reachable is not True:
                # (looked at every REPORT_INTERVAL: a sidecar heard again on another request
                # of this client — a sync, the directive stream — is back, so is the reporter)
                self._halt.wait(min(self._retry_at - now, REPORT_INTERVAL))
                continue
            with self._lock:
                runs = list(self._runs.values())
                farewells = list(self._farewells.values())
                self._farewells.clear()
                if not runs and not farewells:
                    self._wake.clear()
            if not runs and not farewells:
                self._wake.wait()
                continue
            self._say_farewell(farewells)
            self._report(runs, now)
            self._halt.wait(REPORT_INTERVAL)
        # close(): the acks still owed — of runs that ended just now, and of open ones — are
        # sent before the thread stops, so an acked directive never depends on timing
        with self._lock:
            owed = [*self._farewells.values(), *self._runs.values()]
            self._farewells.clear()
        self._say_farewell(owed)

    def _report(self, runs: list[Run], now: float) -> None:
        for run in runs:
            if run.id not in self._runs:
                continue  # ended meanwhile
            due = self._next_beat.get(run.id, 0.0) <= now
            if not (due or run.changed or run.pending_ack() is not None):
                continue
            try:
                self._send(run, due)
            except SidecarUnavailable:
                run.changed = True  # still to be said
                self._retry_at = time.monotonic() + self._retry_delay
                self._retry_delay = min(self._retry_delay * 2, RETRY_MAX)
                return
        self._retry_delay = self.retry_first
        self._retry_at = 0.0

    def _say_farewell(self, runs: list[Run]) -> None:
        for run in runs:
            ack = run.pending_ack()
            if ack is None:
                continue
            try:
                self._ack(run, ack)
            except SidecarUnavailable:
                return  # the sidecar is gone; so is the run

    def _ack(self, run: Run, seq: int) -> None:
        quoted = urllib.parse.quote(run.id, safe="")
        response = self.transport.request("POST", f"/v1/runs/{quoted}/ack", {"seq": seq})
        if response.ok:
            run.acked(seq)
            self.sent += 1

    def _send(self, run: Run, due: bool) -> None:
        run.changed = False  # before reading the state: a change from now on is seen next time
        ack = run.pending_ack()
        if ack is not None:
            self._ack(run, ack)
        quoted = urllib.parse.quote(run.id, safe="")
        body: dict[str, Any] = run.heartbeat_body()
        state = tuple(body.values())
        announcing = not run.announced
        if not (due or announcing) and self._last_sent.get(run.id) == state:
            return  # e.g. a call that started and ended between two looks
        if announcing:
            body["announce"] = run.announcement()
            trace_id = run.trace_id()
            if trace_id is not None:  # (beside it: a sidecar that predates it ignores it)
                body["trace_id"] = trace_id
        response = self.transport.request("POST", f"/v1/runs/{quoted}/heartbeat", body)
        with self._lock:
            if run.id in self._runs:
                self._next_beat[run.id] = time.monotonic() + self.heartbeat_interval
                self._last_sent[run.id] = state
        if response.ok:
            run.announced = True
            self.sent += 1
        elif response.status == 404:
            if announcing:  # the sidecar has already ended this run: nothing more to say
                self.remove(run)
            else:
                run.announced = False
                run.changed = True
        else:
            log.debug("heartbeat for run %s: HTTP %s %r", run.id, response.status,
                      response.body[:300])
