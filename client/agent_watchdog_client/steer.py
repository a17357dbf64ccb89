"""The decision at each step of an agent run: what the next model request is told, whether it
may offer tools, and whether a tool may run. One core for every adapter.

Theory of operation
-------------------
An agent loop alternates model requests and tool calls. Before each model request the run syncs
with the sidecar (:mod:`agent_watchdog_client.sync`), so the directives on the board account
for every span that ended before it; then :meth:`Steering.turn` decides the :class:`ModelTurn`:

* the *instructions* — a budget note with the true number of tool calls left (once the
  sidecar has sent the tool-call budget's countdown: a directive whose rule declares
  ``countdown: tool_calls``, so its rule pack says from when; while the sidecar does not answer,
  once three or fewer are left), the latest wind-down's report prompt, a newer notice (until its
  rule withdraws it);
* whether the turn is *final*: after an abort, once the tool budget is used up, or once the
  tool-call grace of a wind-down is used up, the model is asked for its progress report with no
  tools offered, and its answer is the run's result.

A wind-down with a tool-call grace (a loop rule's ``grace: {tool_calls: 2}``) announces the
run's tool-call count at which the grace ends (``grace.ends_at_tool_calls``, fixed by the
sidecar when the rule fired). It is a hard cap like the budget: the model sees the true number
of grace calls left (``[grace: 2 tool calls left to wrap up]``, a note apart from the budget's
``[budget: N of M …]``), no tool runs past it, and the next request is the final one. The
sidecar is told (``stop=grace`` on the next sync), so it need not escalate to an abort; agents
without the client still get that escalation. A seconds grace stays the sidecar's business.

The number of tool calls used is the largest of what this process counted (tools admitted by
:meth:`Steering.admit_tool`, tool spans ended) and what the sidecar counted, so the countdown
and the hard cap hold with or without the sidecar. The budget is the one the run announced, or
the rule pack's default the sidecar reports.

A turn is decided once per model request: asking again before anything happened (no model call
started, no tool admitted, no call ended) returns the same turn, so adapters may ask from two
hooks of one request. Asking after a final turn was used raises :class:`WatchdogAbort`: the run
is over, and the exception carries the report. Pure: no IO, no clock, no threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent_watchdog_client.directive import ABORT, Directive, DirectiveBoard

COUNTDOWN_FROM = 3  # the budget note shows from this many tool calls left without the sidecar
LOCAL_RULE = "max_tool_calls"  # the rule name of the client's own stop at the budget
# what a sync's ``stop=`` says when the client stopped the run by itself (watchdog/core/sync.py)
STOP_BUDGET, STOP_GRACE = LOCAL_RULE, "grace"

REPORT_HEADER = ("[agent-watchdog: system instruction. This comes from the supervisor that "
                 "monitors this agent run, not from the user.]")
LOCAL_REPORT_PROMPT = REPORT_HEADER + """

This run is being stopped: {message}
Stop calling tools now: no tool will run. Produce the structured progress report below as your
final answer, immediately, so that a follow-up run can continue from where you stopped.

Write the report in Markdown with exactly these sections:

## Task
## Completed Work
## Key Findings
(concrete facts exactly as observed: paths, values, identifiers, commands and results)
## Attempted but Inconclusive
## Not Started / Remaining
## Suggested Next Steps

Report only what you actually observed; mark anything uncertain as uncertain."""
GRACE_REPORT_PROMPT = REPORT_HEADER + """

This run is being stopped: {message}
Stop calling tools now: no tool will run. Produce the progress report asked for below as your
final answer, immediately.

{report}"""


class WatchdogAbort(Exception):
    """The watchdog stopped the run; ``directive`` says why (rule, message, terminal state) and
    ``report`` is the model's progress report when it gave one."""

    def __init__(self, directive: Directive, report: str | None = None) -> None:
        super().__init__(f"agent-watchdog aborted run {directive.run_id}: {directive.message}")
        self.directive = directive
        self.report = report


class ToolRefused(Exception):
    """A tool call the run does not allow (the budget is used up, or the run was stopped): the
    tool must not run. ``message`` is what to give the model as the call's result."""

    def __init__(self, message: str, directive: Directive) -> None:
        super().__init__(message)
        self.message = message
        self.directive = directive


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """What the next model request must carry."""

    instructions: str  # for the system/developer instructions ("" when nothing to say)
    final: bool  # offer no tools: the answer is the run's progress report
    remaining_tool_calls: int | None  # the true number left, when the run has a tool budget
    stop: Directive | None = None  # the abort (sidecar or local) that made the turn final


def grace_note(left: int) -> str:
    if left <= 0:
        return "[grace: 0 tool calls left — no tool will run; report now]"
    if left == 1:
        return "[grace: 1 tool call left — finalize now]"
    return f"[grace: {left} tool calls left to wrap up]"


def iterations_note(remaining: int, limit: int) -> str:
    """The model-call budget's count at a request (the default pack's last-call note, told
    again with the true number)."""
    if remaining <= 0:
        return f"[budget: all {limit} model calls used — give your final answer now]"
    if remaining == 1:
        return f"[budget: 1 of {limit} model calls left — finalize now]"
    return f"[budget: {remaining} of {limit} model calls left — wrap up soon]"


def budget_note(remaining: int, limit: int) -> str:
    if remaining <= 0:
        return f"[budget: 0 of {limit} tool calls left — no tool will run; report now]"
    if remaining == 1:
        return f"[budget: 1 of {limit} tool calls left — finalize now]"
    return f"[budget: {remaining} of {limit} tool calls left — wrap up soon]"


class Steering:
    """The per-run decision state; the run feeds it counts and sync answers."""

    def __init__(self, run_id: str, budget: Mapping[str, float]) -> None:
        self.run_id = run_id
        limit = budget.get("max_tool_calls")
        self.max_tool_calls: int | None = None if limit is None else int(limit)
        self.tools_admitted = 0
        self.tools_refused = 0
        self.sidecar_tool_calls = 0
        self.sidecar_iterations = 0
        self.local_stop: Directive | None = None  # the client's own abort at the budget
        self.grace_stop: Directive | None = None  # ... and at the end of a wind-down's grace
        self.unreported_stop: str | None = None  # a stop the sidecar has not been told of
        self.final_used = False  # a final turn was handed out
        self.synced = False  # the last sync was answered (the sidecar's rules count down)
        self.report: str | None = None  # the answer to the final turn
        self._turn: ModelTurn | None = None
        self._turn_key: tuple[int, ...] = ()
        self._tools_at_turn = 0  # tool calls admitted and refused when the turn was decided

    # -- inputs ---------------------------------------------------------------------------------

    def sidecar_said(self, tool_calls: int, budget: Mapping[str, object],
                     iterations: int = 0) -> None:
        """A sync answer: the sidecar's counts, and its budget (a rule pack default counts when
        the run announced none)."""
        self.synced = True
        self.sidecar_tool_calls = max(self.sidecar_tool_calls, tool_calls)
        self.sidecar_iterations = max(self.sidecar_iterations, iterations)
        limit = budget.get("max_tool_calls")
        if self.max_tool_calls is None and isinstance(limit, (int, float)):
            self.max_tool_calls = int(limit)

    def used(self, tool_spans: int) -> int:
        return max(self.tools_admitted, tool_spans - self.tools_refused, self.sidecar_tool_calls)

    def remaining(self, tool_spans: int) -> int | None:
        if self.max_tool_calls is None:
            return None
        return max(self.max_tool_calls - self.used(tool_spans), 0)

    def recounted(self, wind_down: Directive, model_calls: int) -> str | None:
        """The true model-call note, when ``wind_down`` quotes the model calls left as they
        were when it was decided (``1 of 2 model calls``) and that number is no longer true:
        the run's model calls are the most this process (``model_calls`` started) or the
        sidecar counted."""
        said = wind_down.budget.get("remaining_iterations")
        limit = wind_down.budget.get("max_iterations")
        if said is None or limit is None:
            return None
        said, limit = int(said), int(limit)
        if f"{said} of {limit} model calls" not in wind_down.message:
            return None
        left = max(limit - max(model_calls, self.sidecar_iterations), 0)
        return iterations_note(left, limit) if left < said else None

    def counting(self, board: DirectiveBoard, remaining: int) -> bool:
        """Whether the tool-call countdown shows: the sidecar sent it (its rule fired), or the
        sidecar does not answer and three or fewer calls are left."""
        return board.latest_budget is not None or (not self.synced
                                                    and remaining <= COUNTDOWN_FROM)

    def grace_left(self, board: DirectiveBoard, tool_spans: int) -> int | None:
        """Tool calls left before the tightest wind-down grace ends (None without one)."""
        wind_down = board.grace
        ends = wind_down.grace_ends_at if wind_down is not None else None
        if ends is None:
            return None
        return max(ends - self.used(tool_spans), 0)

    def stop_reported(self, stop: str) -> None:
        """The sidecar has been told of ``stop`` (a sync carried it)."""
        if self.unreported_stop == stop:
            self.unreported_stop = None

    # -- decisions ------------------------------------------------------------------------------

    def current(self, key: tuple[int, ...]) -> ModelTurn | None:
        """The turn decided for ``key`` (the run's counts), if nothing happened since."""
        return self._turn if self._turn is not None and key == self._turn_key else None

    def turn(self, board: DirectiveBoard, tool_spans: int, key: tuple[int, ...],
             model_calls: int = 0) -> ModelTurn:
        """The next model request's turn; raises :class:`WatchdogAbort` once the final turn has
        been used (see the module doc)."""
        if self.final_used:
            stop = self._stop(board, tool_spans)
            assert stop is not None  # a final turn always had a stop
            raise WatchdogAbort(stop, self.report)
        turn = self.compose(board, tool_spans, model_calls)
        self.final_used = turn.final
        self._turn, self._turn_key = turn, key
        self._tools_at_turn = self.tools_admitted + self.tools_refused
        return turn

    @property
    def tools_since_turn(self) -> int:
        """Tool calls admitted or refused since the last turn was decided: none while the
        calls its request's answer asked for are still to run."""
        return self.tools_admitted + self.tools_refused - self._tools_at_turn

    def compose(self, board: DirectiveBoard, tool_spans: int, model_calls: int = 0) -> ModelTurn:
        """The turn the board and the counts call for now (no bookkeeping); ``model_calls``:
        the run's model calls started before this request."""
        remaining = self.remaining(tool_spans)
        stop = self._stop(board, tool_spans)
        parts: list[str] = []
        note = ""
        if remaining is not None and self.max_tool_calls is not None and self.counting(
                board, remaining):
            note = self.note(board, remaining, self.max_tool_calls)
            parts.append(note)
        grace_left = self.grace_left(board, tool_spans)
        if grace_left is not None:
            parts.append(grace_note(grace_left))
        if stop is not None:
            parts.append(stop.instruction())
        else:
            wind_down = board.latest_wind_down
            if wind_down is not None:
                text = wind_down.instruction()
                if note and wind_down.counts_tool_calls and wind_down.message != note:
                    # a countdown decided on fewer spans than have ended: its report prompt
                    # quotes a stale number, the note says the true one
                    text = text.replace(wind_down.message, note)
                recounted = self.recounted(wind_down, model_calls)
                if recounted is not None:  # a last-call note, and this request is past it
                    text = text.replace(wind_down.message, recounted)
                parts.append(text)
            notify = board.latest_notify
            if notify is not None and not notify.is_budget and (
                    wind_down is None or notify.seq > wind_down.seq):
                parts.append(notify.message)
        return ModelTurn("\n\n".join(parts), stop is not None, remaining, stop)

    def keep(self, key: tuple[int, ...]) -> None:
        """The turn just decided stays this request's under ``key`` (what reporting the run's
        own stop brought back, the sidecar's word on that stop, is no news for the request)."""
        if self._turn is not None:
            self._turn_key = key

    @property
    def last_turn(self) -> ModelTurn | None:
        return self._turn

    def new_step(self) -> None:
        """A tool was admitted: the next request is a new turn."""
        self._turn_key = ()

    def admit_tool(self, board: DirectiveBoard, tool_spans: int) -> None:
        """Count a tool call that is about to run, or raise :class:`ToolRefused`. ``tool_spans``
        counts tool spans that have *ended* (the span of this very call may have started)."""
        stop = self._stop(board, tool_spans)
        if stop is None and self.final_used:
            stop = self.local_stop or self.grace_stop
        if stop is not None:
            self.tools_refused += 1
            raise ToolRefused(f"Not run: {stop.message} Write your progress report now.", stop)
        self.tools_admitted += 1

    def stopped(self, board: DirectiveBoard, tool_spans: int) -> Directive | None:
        """What stops the run now (None: it may go on); see :meth:`_stop`."""
        return self._stop(board, tool_spans)

    def _stop(self, board: DirectiveBoard, tool_spans: int) -> Directive | None:
        """What stops the run now: an abort, else the end of a wind-down's grace (the sidecar
        decided it first: its terminal state is the run's), else the end of the budget."""
        if board.abort is not None:
            return board.abort
        grace_left = self.grace_left(board, tool_spans)
        if grace_left is not None and grace_left <= 0:
            return self._grace_stop(board)
        remaining = self.remaining(tool_spans)
        if remaining is not None and remaining <= 0:
            return self._local_stop(board)
        return None

    def _grace_stop(self, board: DirectiveBoard) -> Directive:
        """The client's abort at the end of the grace: the wind-down's rule and terminal state,
        and its report prompt under a stop notice."""
        if self.grace_stop is None:
            wind_down = board.grace
            assert wind_down is not None  # only called with a grace on the board
            allowed = int(wind_down.grace.get("tool_calls", 0))
            message = (f"[grace: the {allowed} tool calls allowed after the wind-down "
                       f"({wind_down.rule}) are used — stop and report]")
            if wind_down.report_prompt:
                report = wind_down.report_prompt.removeprefix(REPORT_HEADER).lstrip()
                prompt = GRACE_REPORT_PROMPT.format(message=message, report=report)
            else:
                prompt = LOCAL_REPORT_PROMPT.format(message=message)
            self.grace_stop = Directive(
                id="", run_id=self.run_id, seq=0, action=ABORT, rule=wind_down.rule,
                severity="critical", message=message, terminal_state=wind_down.terminal_state,
                budget=wind_down.budget, report_prompt=prompt, created_at="", raw={},
                grace=wind_down.grace)
            self.unreported_stop = STOP_GRACE
        return self.grace_stop

    def _local_stop(self, board: DirectiveBoard) -> Directive:
        if self.local_stop is None:
            limit = self.max_tool_calls or 0
            message = f"[budget: all {limit} tool calls used — stop and report]"
            self.local_stop = Directive(
                id="", run_id=self.run_id, seq=0, action=ABORT, rule=LOCAL_RULE,
                severity="critical", message=message, terminal_state="tool_limit_reached",
                budget={"max_tool_calls": limit, "remaining_tool_calls": 0},
                report_prompt=LOCAL_REPORT_PROMPT.format(message=message), created_at="",
                raw={})
            self.unreported_stop = STOP_BUDGET
        return self.local_stop

    @staticmethod
    def note(board: DirectiveBoard, remaining: int, limit: int) -> str:
        """The sidecar's countdown message when it states the true number, else our own."""
        directive = board.latest_budget
        if directive is not None and not directive.is_abort:
            said = directive.budget.get("remaining_tool_calls")
            if said is not None and int(said) == remaining:
                return directive.message
        return budget_note(remaining, limit)
