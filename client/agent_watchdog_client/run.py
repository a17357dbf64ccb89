"""One watched agent run: the context that gives its spans a run id, and the agent's view of
what the sidecar decided about it.

Theory of operation
-------------------
Entering ``with wd.run(...) as run`` puts the run into the OpenTelemetry context and starts
a span named ``watchdog.run <agent>``, so every span started inside — by pydantic-ai, the OpenAI
Agents SDK instrumentation, your own code — is stamped with ``watchdog.run.id`` by
:class:`~agent_watchdog_client.processor.WatchdogSpanProcessor`: the one attribute the sidecar needs
to give it to the run (each attribute costs every span its export: ~2 µs in the SDK's encoder).
The run's agent, session, parent and budget are on the run's own span and in its announcement.
A ``wd.run`` entered inside another run is a *child run* (a sub-agent): its own id and budget,
``watchdog.parent_run.id`` set.

The run announces itself with its budget (a heartbeat, sent by the Watchdog's reporter thread),
and a listener thread keeps :class:`~agent_watchdog_client.directive.DirectiveBoard` fresh.
Everything
the agent's thread calls here (``directive()``, ``budget_note()``, ``instructions()``,
``raise_if_aborted()``) reads the board and returns at once; only ``report()``,
``checkpoint()`` and ``resume_context()`` talk to the sidecar, with a short timeout, and return
``None`` when it does not answer.

A run ends on the sidecar when its own span arrives. When no agent span was started inside
the run (a home-grown loop), the run's own span becomes that agent span when the ``with``
block exits, carrying the exception if the block raised and ``set_final_answer()`` if given.
A run that synced sends that span with a last sync as it exits, so the sidecar hears the end
though the exporter never delivers it.
"""

from __future__ import annotations

import json
import logging
import math
import reprlib
import threading
import urllib.parse
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Status, StatusCode

from agent_watchdog_client.directive import Directive, DirectiveBoard
from agent_watchdog_client.listener import DirectiveListener
from agent_watchdog_client.reporter import Reporter
from agent_watchdog_client.steer import (
    STOP_BUDGET,
    ModelTurn,
    Steering,
    ToolRefused,
    WatchdogAbort,
)
from agent_watchdog_client.sync import SyncChannel
from agent_watchdog_client.tally import (
    LIVE_RUNS,
    OPEN_SPANS,
    RUN_ID_ATTRIBUTE,
    RUN_KEY,
    RunTally,
)
from agent_watchdog_client.transport import (
    EXPLICIT_TIMEOUT,
    REFUSED_STATUSES,
    SidecarUnavailable,
    Transport,
)

log = logging.getLogger("agent_watchdog_client")

BUDGET_KEYS = ("max_tool_calls", "max_iterations", "max_seconds", "max_tokens", "max_cost_usd")
WHOLE_BUDGET_KEYS = frozenset({"max_tool_calls", "max_iterations", "max_tokens"})  # counts
MAX_BUDGET = 1e12  # the largest budget the sidecar takes (a larger one is no budget to it)
MAX_FINAL_ANSWER_CHARS = 4000
# A checkpoint's state is flat facts the sidecar takes (watchdog/core/sessions.py): string keys
# of 1 to 200 characters; strings, numbers (finite; ints within 64 bits), booleans or None.
MAX_FACT_KEY_CHARS = 200
INT64 = 2**63
MAX_REPR_CHARS = 80  # of a refused value, in its error
# The client's own stop at the tool budget, on the run's agent span (and its own): the sidecar
# reads it as ``tool_limit_reached`` (the watchdog SDK's convention in
# ``watchdog/core/spans/instrumentations.py``) from the spans the exporter delivers, so the stop
# is known when no sync after it got through (the sidecar down, restarting or slow just then).
LIMIT_ATTRIBUTE = "watchdog.limit_reached"
# A tool call the run refused (``before_tool_call`` raised :class:`ToolRefused`), on the call's
# span: no tool ran, so the sidecar counts no tool call (the same convention's
# ``declined_tool_flags``), as this process does not.
REFUSED_ATTRIBUTE = "watchdog.tool.refused"

__all__ = ["BUDGET_KEYS", "ModelTurn", "Run", "RunHost", "ToolRefused", "WatchdogAbort",
           "current_run", "steered_run"]


class RunHost(Protocol):
    """What a run needs from its :class:`~agent_watchdog_client.Watchdog` (kept to a protocol so
    this module does not import the watchdog module that creates runs)."""

    transport: Transport
    reporter: Reporter
    syncer: SyncChannel

    def tracer(self) -> trace.Tracer: ...

    def ensure_instrumented(self) -> None: ...


class Run:
    """Created by :meth:`agent_watchdog_client.Watchdog.run`; use it as a context manager."""

    def __init__(self, watchdog: RunHost, *, agent: str, budget: dict[str, float],
                 session: str | None = None, parent: Run | str | None = None,
                 run_id: str | None = None) -> None:
        self.watchdog = watchdog
        self.id = run_id or uuid.uuid4().hex
        self.agent = agent
        self.budget = budget
        self._parent_arg = parent
        self.session = session
        self.parent_id: str | None = None
        self.board = DirectiveBoard()
        self.tally = RunTally(self)
        self.steering = Steering(self.id, budget)
        self._steer_lock = threading.Lock()  # one decision at a time (parallel tool calls)
        # Written by the adapters, read by the reporter thread.
        self.messages = 0
        self.announced = False  # the reporter's: a heartbeat's announcement was answered
        self._sync_announced = False  # a sync's was (the sidecar may predate the header)
        self._ack_wanted = 0
        self._acked = 0
        self._final_answer: str | None = None
        self._span: trace.Span | None = None
        self._token: object | None = None
        self._listener: DirectiveListener | None = None
        self.active = False

    # -- what the span processor counted --------------------------------------------------------

    @property
    def span_attributes(self) -> dict[str, Any]:
        return self.tally.span_attributes

    @property
    def changed(self) -> bool:
        return self.tally.changed

    @changed.setter
    def changed(self, value: bool) -> None:
        self.tally.changed = value

    @property
    def calls(self) -> dict[int, int]:
        return self.tally.calls

    @property
    def agent_spans(self) -> int:
        return self.tally.agent_spans

    @property
    def local_tool_calls(self) -> int:
        """Tool calls this process counted (admitted by the adapters, or tool spans started)."""
        return self.steering.used(self.tally.tools_ended)

    @property
    def local_model_calls(self) -> int:
        return self.tally.model_spans

    # -- lifecycle --------------------------------------------------------------------------------

    def __enter__(self) -> Run:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.finish(exc)

    async def __aenter__(self) -> Run:
        return self.__enter__()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(exc_type, exc, tb)

    def start(self) -> None:
        if self.active:
            raise RuntimeError(f"run {self.id} has already started")
        outer = current_run()
        parent = self._parent_arg
        if parent is None:
            parent = outer
        if isinstance(parent, Run):
            self.parent_id = parent.id
            self.session = self.session or parent.session
        elif parent is not None:
            self.parent_id = str(parent)
        self.tally.span_attributes = {RUN_ID_ATTRIBUTE: self.id}
        watchdog = self.watchdog
        watchdog.ensure_instrumented()
        ctx = otel_context.set_value(RUN_KEY, self.tally)
        tracer = watchdog.tracer()
        self._span = tracer.start_span(f"watchdog.run {self.agent}", context=ctx,
                                       attributes=self._attributes())
        self._token = otel_context.attach(trace.set_span_in_context(self._span, ctx))
        self.active = True
        LIVE_RUNS[self.id] = self.tally
        watchdog.reporter.add(self)
        self._listener = DirectiveListener(watchdog.transport, self.id, self.board,
                                           self._on_directive)
        self._listener.start()

    def finish(self, error: BaseException | None = None) -> None:
        if not self.active:
            return
        self.active = False
        LIVE_RUNS.pop(self.id, None)
        if self._listener is not None:
            self._listener.stop()
        self.watchdog.reporter.remove(self)
        span = self._span
        if span is not None:
            if self.steering.local_stop is not None:
                span.set_attribute(LIMIT_ATTRIBUTE, STOP_BUDGET)
            if self.agent_spans == 0:  # nothing else will close the run on the sidecar
                span.set_attribute("gen_ai.operation.name", "invoke_agent")
                span.set_attribute("gen_ai.agent.name", self.agent)
                if self._final_answer is not None and error is None:
                    span.set_attribute("final_result", self._final_answer)
            if error is not None:
                span.record_exception(error)
                span.set_attribute("error.type", type(error).__qualname__)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            span.end()
            if self.tally.keep_spans and isinstance(span, ReadableSpan):
                # a steered run says its end with a last sync (its spans' end, its own span):
                # the sidecar ends it now, though its exporter may never deliver them
                with self._steer_lock:
                    self._sync(last=span)
        if self._token is not None:
            try:
                otel_context.detach(self._token)  # type: ignore[arg-type]
            except Exception:  # exited in another context (a generator); nothing to restore
                log.debug("run %s: context detach failed", self.id, exc_info=True)
            self._token = None

    def _attributes(self) -> dict[str, Any]:
        attributes: dict[str, Any] = {RUN_ID_ATTRIBUTE: self.id,
                                      "watchdog.agent.name": self.agent}
        if self.session:
            attributes["watchdog.session.id"] = self.session
        if self.parent_id:
            attributes["watchdog.parent_run.id"] = self.parent_id
        for key, value in self.budget.items():
            attributes["watchdog.budget." + key] = value
        return attributes

    # -- what the sidecar decided (non-blocking) --------------------------------------------------

    def directive(self) -> Directive | None:
        """The latest directive, or None."""
        return self.board.latest

    @property
    def stop(self) -> Directive | None:
        """What stopped the run: the sidecar's abort, or the client's own stop — at the tool
        budget, or at the end of a wind-down's tool-call grace, which the sidecar records as
        the same stop (no directive comes for it) — or None while the run may go on."""
        # (not under the decision lock, which a thread's sync holds: this returns at once; a
        # stop made here and by a decision at the same time is made twice, the same)
        return self.steering.stopped(self.board, self.tally.tools_ended)

    @property
    def aborted(self) -> bool:
        """Whether the run was stopped (:attr:`stop`), by the sidecar or by the client."""
        return self.stop is not None

    def raise_if_aborted(self) -> None:
        """Raise :class:`WatchdogAbort` (with the model's report, if it gave one) once the
        run was stopped (:attr:`stop`)."""
        stop = self.stop
        if stop is not None:
            self.applied(stop)
            raise WatchdogAbort(stop, self.steering.report)

    def remaining_tool_calls(self) -> int | None:
        """The true number of tool calls left (None without a tool budget)."""
        return self.steering.remaining(self.tally.tools_ended)

    def budget_note(self) -> str:
        """``"[budget: 3 of 20 tool calls left — wrap up soon]"`` once the sidecar has sent the
        tool-call budget's countdown (its rule pack says from when), or, while the sidecar does
        not answer, once three or fewer are left, with the true number; else ``""``."""
        remaining = self.remaining_tool_calls()
        limit = self.steering.max_tool_calls
        if remaining is None or limit is None or not self.steering.counting(self.board,
                                                                              remaining):
            return ""
        return Steering.note(self.board, remaining, limit)

    def instructions(self) -> str:
        """What the model would be told now, from what is known without a sync (adapters use
        :meth:`before_model_call`)."""
        return self.steering.compose(self.board, self.tally.tools_ended,
                                     self.tally.model_spans).instructions

    # -- the decision points (DESIGN §8) ----------------------------------------------------------

    def before_model_call(self, *, acknowledge: bool = True) -> ModelTurn:
        """Call right before each model request: syncs the run's ended spans with the sidecar
        (a few ms at most; skipped while it is down) and returns the :class:`ModelTurn` — the
        instructions to add as a system/developer instruction, and whether the request is the
        final one (offer no tools; its answer is the run's report, give it to
        :meth:`set_final_answer`). Raises :class:`WatchdogAbort` (with ``report``) when asked
        again after the final turn. Asking twice for one request returns the same turn.

        ``acknowledge`` (the default): the request is being made with this turn, so every
        directive the turn was composed from is *acked* — the sidecar hears (in the background,
        and before :meth:`Watchdog.close` returns) that this process put them into a model
        request. An adapter that only peeks at the turn (to decide which tools to offer) passes
        ``acknowledge=False``; the ack then comes with the request itself."""
        with self._steer_lock:
            key = self._turn_key()
            turn = self.steering.current(key)
            if turn is None:
                self._sync()
                turn = self.steering.turn(self.board, self.tally.tools_ended, self._turn_key(),
                                          self.tally.model_spans)
                if self.steering.unreported_stop is not None:  # stopped here, not by a directive
                    self._mark_budget_stop()
                    self._sync()
                    self.steering.keep(self._turn_key())  # asked again: still this turn
            if acknowledge:
                self._acknowledge(turn)
            return turn

    def _acknowledge(self, turn: ModelTurn) -> None:
        """The directives up to the newest the turn was composed from (the sidecar's abort it
        stops at, or the board's latest) are in the request being made."""
        latest = self.board.latest
        seq = max(turn.stop.seq if turn.stop is not None else 0,
                  latest.seq if latest is not None else 0)
        if seq:
            self._ack_up_to(seq)

    @property
    def turn(self) -> ModelTurn | None:
        """The turn last decided by :meth:`before_model_call`."""
        return self.steering.last_turn

    def before_tool_call(self, name: str = "") -> None:
        """Call right before a tool runs: counts it, or raises :class:`ToolRefused` (do not run
        the tool; give the model ``exc.message`` as its result) once the budget is used up or
        the run is stopped — with or without the sidecar."""
        with self._steer_lock:
            self.tally.keep_spans = True
            if self.tally.unsynced:  # a call ended since the last sync: its verdict first
                self._sync()
            try:
                self.steering.admit_tool(self.board, self.tally.tools_ended)
            except ToolRefused:
                self._mark_refused_call()
                raise
            finally:
                self._mark_budget_stop()
            self.steering.new_step()

    def _mark_refused_call(self) -> None:
        """The refused call's own span, when the framework traces it around the call (it is
        the current span here): :data:`REFUSED_ATTRIBUTE`, so the sidecar does not count a
        call no tool ran for."""
        span = trace.get_current_span()
        entry = OPEN_SPANS.get(span.get_span_context().span_id)
        if entry is not None and entry[0] is self.tally and entry[1] is not None \
                and entry[2] is not False:  # a tool call of this run (not a model call)
            span.set_attribute(REFUSED_ATTRIBUTE, True)

    def _mark_budget_stop(self) -> None:
        """Once the client stopped the run at its tool budget: say so on the agent span that
        will close the run on the sidecar (:data:`LIMIT_ATTRIBUTE`)."""
        if self.steering.local_stop is None:
            return
        span = self.tally.innermost_agent_span()
        if span is not None:
            span.set_attribute(LIMIT_ATTRIBUTE, STOP_BUDGET)

    def _turn_key(self) -> tuple[int, ...]:
        tally, steering = self.tally, self.steering
        return (tally.model_spans, steering.tools_admitted, steering.tools_refused,
                tally.ended_calls, self.board.last_seq)

    def _sync(self, last: ReadableSpan | None = None) -> None:
        """Send the ended spans not synced yet (and, as the run exits, the agent spans that
        ended in it and ``last``, its own span) and take the sidecar's answer."""
        tally = self.tally
        tally.keep_spans = True  # the run steers: from now on its ended calls wait for a sync
        spans = tally.take_unsynced()
        ends: list[ReadableSpan] = []
        if last is not None:  # the agent spans that ended in the run, then its own
            ends = [agent for agent in tally.ended_agents if isinstance(agent, ReadableSpan)]
            ends.append(last)
            spans.extend(ends)
        # a stop the run made by itself goes with the spans (the sidecar takes it first: a tool
        # call refused at the stop still ends a span), and again until a sync carried it
        stop = self.steering.unreported_stop
        # who the run is and its budget go with the syncs until the sidecar has heard them (the
        # reporter's announcement, on its own thread, may come after this sync's spans)
        # (apart from the heartbeat's: a sync answered by a sidecar that ignores the header, or
        # sent without it, is no announcement heard, and the heartbeat still makes one)
        announce = None if self.announced or self._sync_announced \
            else self.announcement(with_trace=True)
        answer = self.watchdog.syncer.sync(self.id, spans, self.board.last_seq, stop, announce)
        if answer is None:
            tally.give_back(spans[:len(spans) - len(ends)])
            self.steering.synced = False
            return
        self._sync_announced = True
        if stop is not None:
            self.steering.stop_reported(stop)
        for directive in answer.directives:
            if self.board.post(directive):
                self._on_directive(directive)
        self.steering.sidecar_said(answer.tool_calls, answer.budget, answer.iterations)

    # -- outcome ----------------------------------------------------------------------------------

    def applied(self, directive: Directive) -> None:
        """Tell the sidecar (in the background) the agent has applied ``directive``: put it
        into a model request, or stopped the run at it (an abort raised)."""
        self._ack_up_to(directive.seq)

    def _ack_up_to(self, seq: int) -> None:
        if seq > self._ack_wanted:
            self._ack_wanted = seq
            self.watchdog.reporter.poke(self)

    def set_final_answer(self, text: str) -> None:
        """The run's answer (after a final turn: its report): put on the innermost agent span
        still open (for instrumentation that does not record one, e.g. the OpenAI Agents
        SDK's) or, without one, on the run's own span (home-grown loops)."""
        self._final_answer = text[:MAX_FINAL_ANSWER_CHARS]
        if self.steering.final_used:
            self.steering.report = text
        span = self.tally.innermost_agent_span()
        if span is not None:
            span.set_attribute("output.value", self._final_answer)

    @property
    def report_text(self) -> str | None:
        """The model's answer to the final turn, once given."""
        return self.steering.report

    def note_messages(self, count: int) -> None:
        """The conversation's length; a growing one is progress to the sidecar."""
        if count > self.messages:
            self.messages = count
            self.watchdog.reporter.poke(self)

    @property
    def in_flight(self) -> int:
        return len(self.tally.calls)  # not on the span path: picked out of every run's calls

    # -- for the reporter thread ------------------------------------------------------------------

    def heartbeat_body(self) -> dict[str, Any]:
        starts = list(self.tally.calls.values())
        body: dict[str, Any] = {"messages": self.messages, "in_flight": len(starts)}
        if starts:
            body["oldest_call_started"] = min(starts) / 1e9
        return body

    def announcement(self, *, with_trace: bool = False) -> dict[str, Any]:
        """Who the run is; ``with_trace``: and the trace of its own span (a model request that
        carries its ``traceparent`` is this run's before any span of it has ended)."""
        announce: dict[str, Any] = {"agent": self.agent}
        if with_trace and (trace_id := self.trace_id()) is not None:
            announce["trace_id"] = trace_id
        if self.session:
            announce["session"] = self.session
        if self.parent_id:
            announce["parent_run"] = self.parent_id
        if self.budget:
            announce["budget"] = dict(self.budget)
        return announce

    def trace_id(self) -> str | None:
        """The trace of the run's own span, in hex (None before it started)."""
        span = self._span
        context = span.get_span_context() if span is not None else None
        return format(context.trace_id, "032x") if context is not None and context.is_valid \
            else None

    def pending_ack(self) -> int | None:
        wanted = self._ack_wanted
        return wanted if wanted > self._acked else None

    def acked(self, seq: int) -> None:
        self._acked = max(self._acked, seq)

    def _on_directive(self, directive: Directive) -> None:
        log.info("agent-watchdog %s for run %s (%s): %s", directive.action, self.id,
                 directive.rule, directive.message)

    # -- explicit calls to the sidecar (blocking, short timeout, None on failure) -----------------

    def report(self, *, as_json: bool = False) -> str | dict[str, Any] | None:
        """The sidecar's progress report of this run: Markdown (or the JSON form), or None."""
        accept = "application/json" if as_json else "text/markdown"
        response = self._call("GET", f"/v1/runs/{_quote(self.id)}/report", accept=accept)
        if response is None:
            return None
        if as_json:
            return _json_object(response)
        return response.decode("utf-8", "replace")

    def checkpoint(self, remaining: str | float, state: dict[str, Any] | None = None,
                   failed_approaches: list[str] | None = None) -> dict[str, Any] | None:
        """Record where the session's task stands (DESIGN §7); the sidecar's answer, or None."""
        if isinstance(failed_approaches, (str, bytes)) or not all(
                isinstance(approach, str) for approach in failed_approaches or ()):
            raise ValueError(f"failed_approaches={failed_approaches!r} is not allowed: expected "
                             f"a list of strings")
        if not (isinstance(remaining, str) or _is_number(remaining)):
            raise ValueError(f"remaining={_brief_repr(remaining)} is not allowed: expected a "
                             f"string or a finite number (what is left to do)")
        body = {"remaining": remaining, "state": _checked_state(state),
                "failed_approaches": list(failed_approaches or []), "run_id": self.id}
        response = self._call("POST", f"/v1/sessions/{_quote(self._session())}/checkpoints",
                              body=body)
        return None if response is None else _json_object(response)

    def resume_context(self) -> dict[str, Any] | None:
        """What the session knows (facts, failed approaches, a zero-progress note), or None."""
        response = self._call("GET", f"/v1/sessions/{_quote(self._session())}/context")
        return None if response is None else _json_object(response)

    def _session(self) -> str:
        if not self.session:
            raise ValueError(f"run {self.id} has no session: pass session= to wd.run() to use "
                             f"checkpoints and resume context")
        return self.session

    def _call(self, method: str, path: str, body: Any = None,
              accept: str = "application/json") -> bytes | None:
        try:
            response = self.watchdog.transport.request(method, path, body,
                                                       timeout=EXPLICIT_TIMEOUT, accept=accept)
        except SidecarUnavailable:
            return None
        if not response.ok:
            if response.status not in REFUSED_STATUSES:  # (a refused token is said once)
                log.warning("agent-watchdog: %s %s answered HTTP %s: %s", method, path,
                            response.status, response.body[:300].decode("utf-8", "replace"))
            return None
        return response.body


def _checked_state(state: object) -> dict[str, Any]:
    """A checkpoint's ``state`` as sent, or ``ValueError`` naming the first key that the
    sidecar would not take (nothing is sent then)."""
    if state is None:
        return {}
    if not isinstance(state, Mapping):
        raise ValueError(f"state={_brief_repr(state)} is not allowed: expected a dict of flat "
                         f"facts, e.g. {{'project_path': '/srv/app'}}")
    facts: dict[str, Any] = {}
    for key, value in state.items():
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_FACT_KEY_CHARS:
            raise ValueError(f"state key {_brief_repr(key)} is not allowed: expected a string "
                             f"of 1 to {MAX_FACT_KEY_CHARS} characters")
        if not (value is None or isinstance(value, (str, bool)) or _is_number(value)):
            raise ValueError(f"state[{_brief_repr(key)}]={_brief_repr(value)} is not allowed: "
                             f"expected a string, a finite number, a boolean or None (facts "
                             f"are flat: no objects or lists)")
        facts[key] = value
    return facts


def _is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -INT64 <= value < INT64
    return isinstance(value, float) and math.isfinite(value)


_REPR = reprlib.Repr()  # (its keyword arguments are Python 3.12's)
_REPR.maxstring = _REPR.maxother = MAX_REPR_CHARS
_REPR.maxlevel = 2


def _brief_repr(value: object) -> str:
    """A repr for an error message, of bounded length, that cannot raise."""
    try:
        text = _REPR.repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= MAX_REPR_CHARS else text[:MAX_REPR_CHARS - 3] + "..."


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def current_run() -> Run | None:
    """The run whose context the caller is in, or None."""
    tally = otel_context.get_value(RUN_KEY)
    run = tally.owner if isinstance(tally, RunTally) else None
    return run if isinstance(run, Run) else None


_warned_contextless = threading.Event()


def steered_run(pinned: Run | None = None) -> Run | None:
    """The run an adapter steers: ``pinned``, else the current one. None while a run is open
    in this process means the agent's code runs outside the run's context — a thread started
    with ``threading.Thread`` begins with an empty one — so it is not steered (no countdown,
    no cap) and its spans are another run: said once, with the ways out."""
    run = pinned or current_run()
    if run is None and LIVE_RUNS and not _warned_contextless.is_set():
        _warned_contextless.set()
        open_run = next(iter(list(LIVE_RUNS.values())), None)
        owner = getattr(open_run, "owner", None)
        log.warning(
            "agent-watchdog: an agent step runs outside any run's context while run %s (%s) "
            "is open, so it is not steered (no countdown, no tool cap) and its spans are "
            "not that run's; a thread started inside `with wd.run(...)` does not carry the "
            "run: start it with contextvars.copy_context().run, or enter wd.run in it, or pin "
            "the run on the adapter", getattr(owner, "id", "?"), getattr(owner, "agent", "?"))
    return run
