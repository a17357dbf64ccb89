"""The core step: span records in, decisions, activity and finished runs out. Sans-IO.

Theory of operation
-------------------
:meth:`Core.apply` is the whole of what one batch of spans does to the watchdog's state: the
records are folded into runs (:class:`~watchdog.core.runs.tracker.RunTracker`), the rules are
evaluated for the runs whose signals changed, and the result comes back as a :class:`Step` —
the runs touched (to persist), the new activity entries (to persist), the decisions (to become
directives) and the runs that finished (to count and log). :meth:`Core.tick` does the same for
the timer (timed rules, expiry; :meth:`Core.fleet_tick` for the fleet's window). The batch's
tool calls feed the :class:`~watchdog.core.fleet.Fleet` (``fleet.*`` in rules): when a tool's
outage begins or ends, every active run that used it is evaluated. Nothing here reads a
clock, a file or a socket, and nothing calls back into the shell: the caller passes ``now``
and carries the step on.

What a step hands out about runs is frozen: one :class:`~watchdog.core.runs.view.RunView` per run
the step touched (of a batch of spans: that it finished or decided on), finished or decided on,
taken once when the step is done (:meth:`Core._seal`), so
nothing downstream reads or reaches back into the live :class:`~watchdog.core.runs.run.RunState`.
Every :class:`Decided` carries what delivery needs — the run's view (its budget view included)
and its most recent steps at the moment of the decision, frozen — so the outbox writes the
directive without asking anyone (no store read, no callback); the steps' lines and the report
prompt are made when the directive is read (:mod:`watchdog.core.directives.prompt`). The one
live hand-off is :attr:`Step.dirty`, for the state writer alone: it snapshots each changed run
once per flush rather than once per step.

A failure in one run's work (a bug, a value nothing should have let in) is that run's alone: it
is reported in :attr:`Step.failures` with the exception, and the other runs go on.

Sessions: a run's session (``session.*`` in rules) is read from the :class:`SessionBook`, the
in-memory side of the sessions; it loads a session from the store only when the session is
known to be there and not in memory (see :class:`~watchdog.core.sessions.SessionBook`).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import partial
from typing import Any

from watchdog.core.bounds import MAX_STOP_ANSWERS, MAX_STOP_NOTE_CHARS, MAX_STOPS_KEPT
from watchdog.core.cycles import CycleBook, Entry, Trail
from watchdog.core.fleet import FLEET_SLICE, Fleet, ToTell
from watchdog.core.handout import Failure, Step
from watchdog.core.reads import CoreReads
from watchdog.core.rules.decision import Action, Decided, Decision, counts_down, forced_state
from watchdog.core.rules.engine import MAX_ENDED_STATES, FiredRecord, RuleEngine
from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.changes import Snapshot, changed_signals, snapshot
from watchdog.core.runs.fields import NS
from watchdog.core.runs.pricing import Pricer, price_calls
from watchdog.core.runs.run import RunState
from watchdog.core.runs.steps import RecentSteps, StepLog
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import BatchResult, RunTracker
from watchdog.core.runs.view import OpenedRun, RunView
from watchdog.core.sessions import SessionBook
from watchdog.core.spans.record import ENDPOINT_SCOPE, KeySource, SpanKind, SpanRecord
from watchdog.core.sync import STOP_GRACE, RecentSpans, SpanLedger

RECENT_STEPS = 20  # activity entries of each active run kept in memory, for report prompts
# the states of a run that ended on its own: a late span may show it ended otherwise
ENDED_ON_ITS_OWN = frozenset({TerminalState.COMPLETED, TerminalState.NO_RESPONSE})
EMPTY_LOG = StepLog((), None)
SESSION_CHANGED = frozenset({"session"})  # what a checkpoint changes, for the rule engine
FLEET_CHANGED = frozenset({"fleet"})  # what a tool's outage beginning or ending changes


class Core(CoreReads):
    """Runs, rules and the sync ledger; one instance, used from one thread."""

    def __init__(self, tracker: RunTracker, sessions: SessionBook,
                 engine: RuleEngine | None = None, fleet: Fleet | None = None,
                 timer: Callable[[], float] = lambda: 0.0, pricer: Pricer | None = None
                 ) -> None:
        self.tracker = tracker
        self._timer = timer  # what Step.eval_seconds is measured with (the shell's perf clock)
        self.pricer = pricer  # what model calls cost (None: every call stays unpriced)
        self.sessions = sessions
        self.engine = engine
        self.fleet = fleet if fleet is not None else Fleet()  # tools failing across runs
        self._fleet_moved: set[str] = set()  # tools whose outage began or ended since the tick
        self._told_failing: set[str] = set()  # tools the runs were last told are failing
        self.to_tell = ToTell()  # runs an outage's change still concerns, told a slice a tick
        self.ledger = SpanLedger()  # spans of synced runs applied so far (DESIGN §8)
        self.recent = RecentSpans()  # the spans of any run applied last
        self.recent.held = self.tracker.held_keys  # (stored as applied once in a run's counts)
        self._stuck: dict[str, tuple[str, str]] = {}  # run -> (agent, reason) after wind_down/abort
        # ... of runs that ended since, the last MAX_ENDED_STATES (a run taken back: _resume)
        self._stuck_ended: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._recent: dict[str, RecentSteps] = {}
        self.cycles = CycleBook()  # loops across agents (session.agent_cycle)
        # what goes on from a model endpoint's stop answer (a digest, an id) -> its run
        self._stops: OrderedDict[str, str] = OrderedDict()

    # -- spans ----------------------------------------------------------------------------------

    def apply(self, records: Sequence[SpanRecord], now: float,
              late_content: Sequence[tuple[SpanRecord, SpanRecord]] = ()) -> Step:
        """Fold one batch of records in and evaluate the rules for the runs it changed;
        ``late_content``: model calls applied before the GenAI log events that brought their
        content, each with its span read again with it
        (:meth:`RunTracker.apply <watchdog.core.runs.tracker.RunTracker.apply>`)."""
        records = self.recent.admit(records)  # a span that came again: counted once
        if self.ledger:  # a synced span's second copy (sync, then OTLP, or the reverse)
            records = self.ledger.admit(records)
        price_calls(records, self.pricer)
        self._read_text_actions(records)
        rules = self._has_rules()
        before = self._snapshots([*records, *(record for record, _ in late_content)]
                                 if late_content else records) if rules else {}
        result = self.tracker.apply(records, now, late_content)
        step = Step(activity=result.activity, gone=result.absorbed, batch=result,
                    applied=len(records), dirty=result.touched, _view_touched=False,
                    conflicts=self.recent.conflicts)
        for key in result.absorbed:
            self._forget(key)
        self._note_sessions(result.touched.values(), now)
        cycled = self._note_cycles(result.touched.values())
        self.remember(result.activity)
        self._fleet_moved |= self._observe_tools(result, now)
        if rules:
            self._evaluate_batch(before, result, now, step)
            if cycled:  # the runs that can stop a cycle that grew: their session changed
                self._evaluate(cycled, now, step, changed=SESSION_CHANGED)
        finished = result.ended + result.evicted
        if rules and result.ended:
            self._rules_at_end(before, result.ended, step)
        if finished:
            self._finish(finished, step)
            step._evicted.extend(result.evicted)
        if rules:
            self._late_rules(before, result, finished, step)
        self._late_at_budget(result, finished)
        self._seal(step, now)
        return step

    def _rules_at_end(self, before: dict[str, Snapshot], ended: list[RunState],
                      step: Step) -> None:
        """A run that ended in the batch that made a rule with a ``terminal_state`` hold (its
        loop and its end in one export request: an agent that exports at its exit) is
        classified as that rule ends it live, when its spans come one by one (the rule's
        state is forced, over an answer, an error or a framework's limit): the rules reading
        a signal the batch changed (every rule, for a run the batch began), evaluated on the
        run as it was at its end (:meth:`_classify_at_end`). So the end state does not depend
        on how the spans were batched. (A run a rule forced already keeps that state.)"""
        engine = self.engine
        assert engine is not None
        for run in ended:
            if run.ended_at is None or run.forced_state is not None \
                    or run.terminal_state is TerminalState.ABANDONED:
                continue
            old = before.get(run.key)
            changed = None if old is None else changed_signals(
                old, run, bool(run.budget) or bool(engine.agent_budget(run.agent_name)))
            if changed is None or changed:
                self._classify_at_end(run, changed, step)

    def _late_rules(self, before: dict[str, Snapshot], result: BatchResult,
                    finished: list[RunState], step: Step) -> None:
        """A run that ended on its own (an answer, or none) before spans of it came that make
        a rule with a ``terminal_state`` hold (the arguments of a loop's tool calls, in log
        events that came after its end: Codex's) is classified again as that rule would have
        ended it live, had they come first: the rules reading a signal those spans changed,
        evaluated on the run as it was at its end (:meth:`_classify_at_end`). (A run that
        ended before a reload brought the rule, or changed it, keeps how it ended: the rule
        never read it.)"""
        engine = self.engine
        assert engine is not None
        done = {run.key for run in finished}
        for run in result.touched.values():
            if not run.ended or run.key in done or run.ended_at is None \
                    or run.terminal_state not in ENDED_ON_ITS_OWN \
                    or (old := before.get(run.key)) is None:
                continue
            changed = changed_signals(old, run, bool(run.budget)
                                      or bool(engine.agent_budget(run.agent_name)))
            if changed:
                self._classify_at_end(run, changed, step)

    def _classify_at_end(self, run: RunState, changed: AbstractSet[str] | None,
                         step: Step) -> None:
        """The ended ``run`` takes the state of the first rule (of those reading ``changed``,
        None: all) that holds on it as it was at its end, not ended, and has a
        ``terminal_state``; the rule is its reason. Nothing is decided for it (it is over: no
        directive, nothing fired), and a rule that aborts (``aborted``, its own or an abort's
        default) never stopped it. A run whose own end tells that state already (a framework's
        limit, its budget spent) keeps its own reason: the rule adds nothing to it."""
        engine = self.engine
        assert engine is not None and run.ended_at is not None
        live = run.copy()
        live.ended = False
        try:
            decisions = engine.would_decide(live, run.ended_at,
                                            partial(self._session_of, run, True),
                                            changed=changed, fleet=self.fleet.activation())
        except Exception as exc:  # (as on a live run: that run's failure alone)
            step.failures.append(Failure("rules", run.key, exc))
            return
        own = run.terminal_state
        if own in (TerminalState.COMPLETED, TerminalState.NO_RESPONSE) \
                and run.at_budget(self._defaults(run)):
            own = TerminalState.TOOL_LIMIT_REACHED  # (as :meth:`_finish` will classify it)
        ending = [decision for decision in decisions
                  if decision.terminal_state not in (None, TerminalState.ABORTED)
                  and engine.loaded_before(decision.rule, run.ended_at)]
        if not ending:
            return
        decision = ending[0]
        if len({decision.rule for decision in ending}) > 1:
            decision = self._first_to_hold(run, ending, run.ended_at, step) or decision
        if decision.terminal_state is not own:
            run.terminal_state, run.terminal_reason = decision.terminal_state, decision.rule

    def _first_to_hold(self, run: RunState, ending: list[Decision], now: float, step: Step
                       ) -> Decision | None:
        """Of ``ending`` (the decisions of several rules that hold on ``run`` at once, each
        ending it in a state of its own), the one whose rule held first as its spans came one
        by one, in the order they ended: the rule a span-by-span watch ends it by (a failing
        call repeated is a tool cycle at its 4th round before it is an error loop at its 5th
        error). Read from its records as its trace keeps them, folded one by one into a run of
        its own; None when they are not all kept (the first of the pack's order stands)."""
        engine = self.engine
        records = self.tracker.kept_records(run)
        if engine is None or not records:
            return None
        by_rule = {decision.rule: decision for decision in ending}
        # (a key the engine keeps no state of: the rules that fired on the run fire again)
        fresh = RunState(run.key + "\0replay", run.key_source, run.trace_id, run.first_seen)
        fresh.budget = dict(run.budget)
        session = partial(self._session_of, run, run.ended)
        fleet = self.fleet.activation()
        for record in sorted(records, key=lambda record: record.end_ns):
            fresh.apply(record, now)
            try:
                decided = engine.would_decide(fresh, now, session, fleet=fleet)
            except Exception as exc:  # (as on a live run: that run's failure alone)
                step.failures.append(Failure("rules", run.key, exc))
                return None
            for decision in decided:
                if decision.rule in by_rule:
                    return by_rule[decision.rule]
        return None

    def _late_at_budget(self, result: BatchResult, finished: list[RunState]) -> None:
        """A run that ended before spans of it came (an exporter's batches, two export
        paths: the tool calls that spent its budget after its end) is classified again as at
        its end (:meth:`_finish`), by the rule pack's budget for its agent too (the tracker's
        own late reading, :meth:`RunState.late_answer`, knows only the budget it announced)."""
        defaults = self._defaults
        done = {run.key for run in finished}
        for run in result.touched.values():
            if run.ended and run.key not in done and (budget := defaults(run)) is not None:
                run.ended_at_budget(budget)

    def _read_text_actions(self, records: Sequence[SpanRecord]) -> None:
        """A model call at the root of a trace of its own (a loose call: a client's
        instrumentation traced it, no span of the agent's around it) of an agent whose rule
        pack says it acts in its answers' text, whose answer holds an action
        (:func:`~watchdog.core.model.actions.acts_on_answer`): its agent runs that action, so
        the run goes on (``acted_on``), as the model endpoint reads such an answer; it ends
        with an answer that holds none, or ``loose_run_gap`` after its last call."""
        engine = self.engine
        if engine is None or not engine.ruleset.has_text_acting:
            return
        for record in records:
            if record.kind is SpanKind.LLM and record.parent_span_id is None \
                    and record.final_answer and record.final_output \
                    and record.scope != ENDPOINT_SCOPE and record.key_source is KeySource.TRACE:
                agent = record.agent or record.service
                entry = engine.ruleset.acts_in_text(agent) if agent else None
                if entry is None:
                    continue
                # (loaded with the model endpoint or with such a pack's first call: a sidecar
                # that needs neither never loads it)
                from watchdog.core.model.actions import acts_on_answer

                if acts_on_answer(entry, record.final_output):
                    record.acted_on = True

    def _has_rules(self) -> bool:
        return self.engine is not None and bool(self.engine.ruleset.rules)

    def _snapshots(self, records: Iterable[SpanRecord]) -> dict[str, Snapshot]:
        """The existing runs a batch names, as they are before it is applied."""
        before: dict[str, Snapshot] = {}
        get = self.tracker.get
        for record in records:
            key = record.run_key
            if key not in before:
                run = get(key)
                if run is not None:
                    before[key] = snapshot(run)
        return before

    def _evaluate_batch(self, before: dict[str, Snapshot], result: BatchResult, now: float,
                        step: Step) -> None:
        """Evaluate the runs a batch touched, each only for the rules whose signals changed
        (a run seen for the first time, or reached through another key: all rules)."""
        engine = self.engine
        assert engine is not None
        started = self._timer()
        for key, run in result.touched.items():
            old = before.get(key)
            changed = None if old is None else changed_signals(
                old, run, bool(run.budget) or bool(engine.agent_budget(run.agent_name)))
            if changed is not None and not changed:
                continue
            self._evaluate_run(engine, run, now, False, changed, step)
        self._after_evaluation(started, step)

    def _observe_tools(self, result: BatchResult, now: float) -> set[str]:
        """Hand the batch's tool calls to the fleet; the tools whose outage began or ended."""
        if not result.tool_results:
            return set()
        self.fleet.observe(result.tool_results, now)
        return self.fleet.changed()  # (the window is pruned by the timer: fleet_tick)

    def _tell_fleet(self, outages: set[str], now: float, step: Step) -> None:
        """A tool's outage began or ended: evaluate the rules reading ``fleet`` for every
        active run that has used one of those tools (the runs that used it are the ones to
        tell, and the ones whose note may fire again at its next outage)."""
        fleet = self.fleet
        step.outages.update({tool: fleet.is_failing(tool) for tool in outages})
        if not self._has_rules():
            return
        self.to_tell.add(run.key for run in self.tracker.active()
                         if any(tool in run.tools for tool in outages))

    def fleet_tick(self, now: float) -> Step:
        """The timer's turn for the fleet (every evaluation interval): failures older than the
        window are forgotten, and the runs that used a tool whose outage began or ended since
        the last turn are evaluated. Told here rather than at the span that moved the outage: a
        tool that flaps (fails for three runs, succeeds once, fails again) many times within
        one interval costs one evaluation of its runs, not one per flip. A turn tells at most
        ``FLEET_SLICE`` runs; more wait for the next turns (``to_tell``)."""
        step = Step()
        moved = self.fleet.advance(now) | self._fleet_moved
        self._fleet_moved = set()
        told = self._told_failing
        outages = {tool for tool in moved if self.fleet.is_failing(tool) != (tool in told)}
        for tool in outages:
            if tool in told:
                told.discard(tool)
            else:
                told.add(tool)
        if outages:
            self._tell_fleet(outages, now, step)
        if self.to_tell and self._has_rules():  # at most FLEET_SLICE runs a turn
            get = self.tracker.get
            runs = [run for key in self.to_tell.take(FLEET_SLICE)
                    if (run := get(key)) is not None and not run.ended]
            if runs:
                self._evaluate(runs, now, step, changed=FLEET_CHANGED)
        # the gauge: every tool that moved, as it is now (one that flapped within the interval
        # too, though its runs have nothing new to be told)
        step.outages.update({tool: self.fleet.is_failing(tool) for tool in moved})
        self._seal(step, now)
        return step

    def remember(self, activity: Iterable[ActivityEntry]) -> None:
        """Keep the last ``RECENT_STEPS`` of each run's activity (oldest first) for the report
        prompts of its directives; the shell gives back a restored run's stored steps."""
        recent = self._recent
        for entry in activity:
            steps = recent.get(entry.run_key)
            if steps is None:
                steps = recent[entry.run_key] = RecentSteps(RECENT_STEPS)
            steps.entries.append(entry)

    def restore(self, active: Iterable[dict[str, Any]], ended: Iterable[dict[str, Any]],
                unreadable: Callable[[str], None]) -> list[str]:
        """Take back the runs the store kept (snapshot rows: the active runs, then recently
        ended ones); returns the active runs' keys. A row that cannot be read back (an older
        build's, one damaged on disk) is skipped and reported to ``unreadable``, never a
        failed start."""
        def read(rows: Iterable[dict[str, Any]]) -> list[RunState]:
            runs = []
            for data in rows:
                try:
                    runs.append(RunState.from_dict(data))
                except Exception:
                    unreadable(str(data.get("key")))
            return runs

        restored = read(active)
        ended_runs = read(ended)
        self.tracker.restore(restored + ended_runs)
        for run in (*ended_runs, *restored):
            self._know_stop(run.key, run.stop_answers)
        return [run.key for run in restored]

    # -- client calls ---------------------------------------------------------------------------

    def heartbeat(self, key: str, messages: int, now: float, in_flight: int | None = None,
                  oldest_call_started: float | None = None,
                  announce: dict[str, Any] | None = None) -> tuple[RunView | None, Step]:
        """A client heartbeat. ``announce`` (agent, session, parent_run, budget, trace_id)
        registers a run that has no ended span yet, so it is watched from its first second."""
        step = Step()
        known = self.tracker.get(key) if self._has_rules() else None
        old = snapshot(known) if known is not None else None
        run, created = self.tracker.heartbeat(key, messages, now, in_flight,
                                              oldest_call_started, register=announce is not None)
        if run is None:
            return None, step
        if announce:
            self.ledger.register(key)
            announce = dict(announce)
            trace_id = announce.pop("trace_id", None)
            if trace_id:
                self.tracker.name_trace(trace_id, run, now)
            run.announce(**announce)
            self._note_sessions((run,), now)
        step.dirty[key] = run
        if created or announce:
            self._evaluate([run], now, step)
        elif old is not None and not run.ended and self.engine is not None and (
                changed := changed_signals(old, run, bool(run.budget) or bool(
                    self.engine.agent_budget(run.agent_name)))):
            self._evaluate([run], now, step, changed=changed)  # e.g. its messages grew
        self._seal(step, now)
        return step.touched.get(key), step

    def open_run(self, key: str, key_source: KeySource, trace_id: str, now: float,
                 agent: str | None, session: str | None, budget: dict[str, float] | None,
                 records: Sequence[SpanRecord] = (), going_on: bool = False,
                 parent: str | None = None) -> tuple[OpenedRun, Step]:
        """The model endpoint's run at a request (DESIGN §12), after ``records`` (what the
        request carried: its tool results) are applied in the same step: opened at its first
        request (no span has ended yet), told what the request's headers say, and evaluated
        when it is new or its budget changed, so its directives account for the request; what
        the endpoint reads of it after that (:class:`OpenedRun`). A run the client SDK frames
        is left as it is (its spans name it). ``going_on``: the request goes on from the run's
        own tool calls (its results answer calls the run handed over): a run ended at an answer
        is taken back too. ``parent``: the run whose child run it is (a sub-agent's caller's,
        as its requests name it), as a nested agent's in a trace: its own budget and counts."""
        resumed = self._resume((key,), now, going_on)  # (before its records: they count)
        step = self.apply(records, now) if records else Step()
        step.resumed.update(resumed)
        run, created = self.tracker.open(key, key_source, trace_id, now)
        if key in resumed:
            step.dirty[key] = run
        if run.framed and not created:
            return run.opened(now, self._defaults(run)), step
        if agent and run.agent is None:
            run.agent = agent
        if session and run.session is None:
            run.session = session
        if parent and run.parent_run is None and parent != key:
            run.parent_run = parent
            step.dirty[key] = run
        changed = budget is not None and any(run.budget.get(k) != v
                                             for k, v in budget.items())
        if budget is not None and changed:
            run.budget.update(budget)
        if created or changed or key in resumed:
            step.dirty[key] = run
            self._note_sessions((run,), now)
            if not run.ended:
                self._evaluate([run], now, step)
        self._seal(step, now)
        return run.opened(now, self._defaults(run)), step

    def model_records(self, records: Sequence[SpanRecord], now: float) -> Step:
        """:meth:`apply` for what the model endpoint saw: its agent acts now, so a run of
        it taken as abandoned is active again first (:meth:`_resume`)."""
        resumed = self._resume(dict.fromkeys(record.run_key for record in records), now)
        step = self.apply(records, now)
        step.resumed.update(resumed)
        return step

    def _resume(self, keys: Iterable[str], now: float, going_on: bool = False
                ) -> dict[str, tuple[str, str]]:
        """The runs of ``keys`` taken as ``abandoned`` (silent for ``run_end_timeout``, or
        evicted) or ``completed`` (at an answer) whose agent's model request or response comes
        now: it was slow, not gone (a tool that ran longer than the timeout), or (``going_on``:
        its request answers calls the run handed over) the answer was to a request aside (a
        summary it asked for) and it goes on. Each is active again,
        counts on and ends as a live run does, its rules evaluated again (what fired for it
        stays fired: :meth:`RuleEngine.take_back
        <watchdog.core.rules.engine.RuleEngine.take_back>`); a run whose spans
        say when it ends (a trace's, the client SDK's) is left as it is, as late spans are.
        Returns each resumed run's key, the state it had ended in and why (the shell says
        so)."""
        resumed: dict[str, tuple[str, str]] = {}
        for key in keys:
            back = self.tracker.resume(key, now, going_on)
            if back is not None:
                resumed[key] = back[1]
                if self.engine is not None:
                    self.engine.take_back(key)
                stuck = self._stuck_ended.pop(key, None)
                if stuck is not None:  # (a wind_down or abort it was sent holds)
                    self._stuck.setdefault(key, stuck)
        return resumed

    def quiet(self, key: str, records: Sequence[SpanRecord], until: float,
              tool_budget: bool = False, countdowns: set[str] | None = None) -> bool:
        """Whether the active run ``key`` is proved to get no decision of the rules, nor to be
        ended by the timer, from now up to ``until`` (this clock's): on the timer as it is
        now, and at a request that brings ``records`` (what the request carries: the results of
        the calls it handed over; each made at ``until``), whenever before then it comes.

        Exact by construction: the request's step is :meth:`open_run`'s, whose rules are
        evaluated (:meth:`_evaluate_batch`) on a copy of the run with the records folded in,
        for the signals they change, by the engine itself on a copy of its state for the run
        (:meth:`RuleEngine.decides`); the timer's on the run as it is. Time enters only
        through signals that grow with it, so, every timed rule of its agent being steady
        (:meth:`RuleEngine.steady`: each only turns true as they grow), none deciding at
        ``until`` means none before. An ended run is neither evaluated nor ended again, and
        a request of it that folds nothing in is evaluated by nothing. The fleet is read as
        it is now (when it moves, the shell takes back what it said on it), and none of the
        records' tools may be failing (a success could end its outage). Not for a run with a
        budget (its own or its pack's), but its pack's of tool calls alone with ``tool_budget``
        (the rules read it as they read any signal, on the copy, and may only count it down
        there: :func:`~watchdog.core.rules.decision.counts_down`, a directive whose message
        the request does not get, but which starts its budget's countdown: the budgets whose
        countdown the request's step would decide go to ``countdowns``, and what the request
        gets of them is the caller's to work out: :func:`watchdog.core.model.steer.decide`,
        on a board counting them down); never one the
        agent counts itself (``budget_used``), nor one it announced (a header on each request,
        which the relay does not send on ahead: not worth the proof)."""
        run = self.tracker.get(key)
        tracker = self.tracker
        engine = self.engine
        if run is None or run.framed:
            return False
        pack = engine.agent_budget(run.agent_name) if engine is not None else {}
        if run.budget or (pack and (not tool_budget or run.budget_used or any(
                name != "max_tool_calls" for name in pack))):
            return False
        if run.ended:  # (not evaluated, by the timer or at a request that folds nothing in)
            return not records
        if run.last_seen + min(tracker.loose_run_gap, tracker.run_end_timeout) <= until:
            return False
        fleet = self.fleet
        if any(fleet.is_failing(record.tool_name or "unknown") for record in records):
            return False
        if engine is None or not engine.ruleset.rules:
            return True
        if not engine.steady(run):
            return False
        cel_fleet = fleet.activation()
        if engine.decides(run, until, partial(self._session_of, run), timed_only=True,
                          fleet=cel_fleet):
            return False
        if not records:  # (the request's step folds nothing in: no rule evaluated)
            return True
        after = run.copy()
        for record in records:
            after.apply(record, until)
        # (the signals as the request's step reads them: the budget's too, with its pack's)
        changed = changed_signals(snapshot(run), after, bool(pack))

        def harmless(decision: Decision) -> bool:
            if not counts_down(decision):
                return False
            if countdowns is not None and decision.countdown is not None:
                countdowns.add(decision.countdown)
            return True

        return not changed or not engine.decides(after, until, partial(self._session_of, after),
                                                 changed=changed, fleet=cel_fleet,
                                                 harmless=harmless)

    def result_hashes(self, key: str) -> list[int]:
        """The hashes of the distinct results the run ``key``'s tools gave (bounded by
        ``MAX_DISTINCT_SIGNATURES``): a result like none of them counts as a new one."""
        run = self.tracker.get(key)
        return list(run.result_hashes()) if run is not None else []

    def recent_lines(self, key: str) -> tuple[str, ...]:
        """The run's last steps as report lines (redacted), oldest first."""
        run, recent = self.tracker.get(key), self._recent.get(key)
        if run is None or recent is None:
            return ()
        return recent.render(run.first_start_ns / NS if run.first_start_ns else None)[0]

    def client_stopped(self, key: str, stop: str, now: float) -> Step | None:
        """The client stopped the run by itself (DESIGN §8): at its tool budget it ends
        ``tool_limit_reached``; at the end of a wind_down's tool-call grace it ends as that
        wind_down's escalation would have ended it (the rule's terminal state), and the engine
        has nothing left to escalate for tool calls. None when the run is not known."""
        run = self.tracker.get(key)
        if run is None:
            return None
        if not run.ended:
            if stop == STOP_GRACE:
                kept = self.engine.grace_kept(key) if self.engine is not None else None
                if kept is not None:
                    run.force(*kept)
            else:
                run.force(TerminalState.TOOL_LIMIT_REACHED, stop)
        step = Step(dirty={key: run})
        self._seal(step, now)
        return step

    def model_stopped(self, key: str, now: float) -> Step | None:
        """The model endpoint answered run ``key``'s request with the stop of an abort (its
        agent has its final answer, the upstream was not called): the run ends now, as its
        abort said. None when it is not active."""
        run = self.tracker.end(key, now)
        if run is None:
            return None
        step = Step(dirty={key: run})
        self._finish([run], step)
        self._seal(step, now)
        return step

    def model_stop_answered(self, key: str, note: str, answers: Iterable[str],
                            now: float) -> Step | None:
        """The model endpoint answered run ``key`` with its stop ``note``; ``answers``: what a
        request that goes on from that answer carries (:meth:`stop_of`). Kept with the run
        (its snapshot), at most ``MAX_STOP_ANSWERS`` of them, the note cut to
        ``MAX_STOP_NOTE_CHARS``. None when the run is not in memory or nothing is new."""
        run = self.tracker.get(key)
        if run is None:
            return None
        known = run.stop_answers
        added = tuple(answer for answer in dict.fromkeys(answers) if answer not in known)
        added = added[:max(MAX_STOP_ANSWERS - len(known), 0)]
        note = note[:MAX_STOP_NOTE_CHARS]
        if not added and run.stop_note == note:
            return None
        run.stop_note, run.stop_answers = note, known + added
        self._know_stop(key, added)
        step = Step(dirty={key: run})
        self._seal(step, now)
        return step

    def stop_of(self, key: str | None, answers: Iterable[str] = ()
                ) -> tuple[str, str, tuple[str, ...]] | None:
        """The model endpoint's stop of run ``key``, else of the run whose stop answer one of
        ``answers`` is (a digest, an id): ``(run, note, answers)``; None: no such stop kept."""
        run = self.tracker.get(key) if key is not None else None
        if run is None or run.stop_note is None:
            found = next((self._stops[answer] for answer in answers if answer in self._stops),
                         None)
            run = self.tracker.get(found) if found is not None else None
        if run is None or run.stop_note is None:
            return None
        return run.key, run.stop_note, run.stop_answers

    def _know_stop(self, key: str, answers: Iterable[str]) -> None:
        stops = self._stops
        for answer in answers:
            stops[answer] = key
            stops.move_to_end(answer)
        while len(stops) > MAX_STOPS_KEPT:
            stops.popitem(last=False)

    def model_in_flight(self, key: str, calls: int, now: float,
                        since: float | None = None) -> None:
        """The model endpoint's word on what runs for ``key`` now (its model call, or the
        tools it handed over), as a client heartbeat tells it: a run waiting on them is not
        idle. ``since``: when the request whose call (or whose response's tool calls) this is
        arrived, on this clock (None: now): in flight from then, whichever relay read it
        when. (A run the client SDK frames is the client's to tell.)"""
        run = self.tracker.get(key)
        if run is not None and not run.ended and not run.framed:
            run.heartbeat(0, now, calls)
            if calls and since is not None:
                run.in_flight_since = min(since, now)
            if calls:
                self.tracker.asked(key)

    def model_failed(self, key: str, code: str, now: float) -> None:
        """The model endpoint answered the run ``key``'s request with an error (``code``): a
        run its agent sends no request after ends ``error`` (:meth:`RunTracker.asked_failed
        <watchdog.core.runs.tracker.RunTracker.asked_failed>`)."""
        self.tracker.asked_failed(key, code, now)

    def claim_session(self, key: str, session: str, now: float) -> Step:
        """A session checkpoint names ``key`` as its run: a run with no session of its own
        is the session's from now on."""
        step = Step()
        run = self.tracker.get(key)
        if run is not None and run.session is None:
            run.announce(session=session)
            step.dirty[key] = run
        self._seal(step, now)
        return step

    # -- after a restart ------------------------------------------------------------------------

    def restore_forced(self, fired: Iterable[FiredRecord]) -> None:
        """After a restart: the terminal state each stored directive decided for an active run.
        A run snapshot is flushed every ``state_flush_interval`` but a directive is stored at
        once, so after a crash the directive is the more recent truth. The runs a wind_down or
        abort was sent to count in :meth:`stuck_counts` again, as before the restart (``fired``
        oldest first: the last such directive's reason, as :meth:`_decide` keeps it)."""
        for record in fired:
            run = self.tracker.get(record.run_key)
            if run is None or run.ended:
                continue
            state = forced_state(record.action, record.terminal_state)
            if state is not None:
                run.force(state, record.rule)
            if record.action is not Action.NOTIFY:
                reason = record.terminal_state.value if record.terminal_state else record.rule
                self._stuck[run.key] = (run.agent_name, reason)

    # -- the timer ------------------------------------------------------------------------------

    def evaluate(self, runs: Iterable[RunState], now: float, step: Step,
                 timed_only: bool = False, changed: AbstractSet[str] | None = None) -> int:
        """Evaluate the rules for ``runs`` into ``step``; returns how many fired.
        ``changed``: only the rules reading these signals (None: all)."""
        fired = self._evaluate(runs, now, step, timed_only, changed)
        self._seal(step, now)
        return fired

    def evaluate_keys(self, keys: Iterable[str], now: float, timed_only: bool = False,
                      changed: AbstractSet[str] | None = None) -> Step:
        """:meth:`evaluate` for the runs named that are in memory and active."""
        get = self.tracker.get
        step = Step()
        self.evaluate([run for key in keys if (run := get(key)) is not None and not run.ended],
                      now, step, timed_only, changed)
        return step

    def _evaluate(self, runs: Iterable[RunState], now: float, step: Step,
                  timed_only: bool = False, changed: AbstractSet[str] | None = None) -> int:
        engine = self.engine
        if engine is None:
            return 0
        started = self._timer()
        fired = 0
        for run in runs:
            fired += self._evaluate_run(engine, run, now, timed_only, changed, step)
        self._after_evaluation(started, step)
        return fired

    def expire(self, now: float, step: Step) -> None:
        """End the runs that went silent (abandoned) or whose loose calls stopped."""
        expired = self.tracker.expire(now)
        for run in expired:
            step.dirty[run.key] = run
        if expired:
            self._finish(expired, step)
        self._seal(step, now)

    # -- rules ----------------------------------------------------------------------------------

    def _evaluate_run(self, engine: RuleEngine, run: RunState, now: float, timed_only: bool,
                      changed: AbstractSet[str] | None, step: Step) -> int:
        fired = 0
        try:
            decisions = engine.evaluate(run, now, partial(self._session_of, run),
                                        timed_only=timed_only, changed=changed,
                                        fleet=self.fleet.activation())
            forcing = [decision for decision in decisions
                       if forced_state(decision.action, decision.terminal_state) is not None]
            if run.forced_state is None and len({decision.rule for decision in forcing}) > 1:
                # (several at once, as a batch brings them: the state is that of the rule
                # that held first, as a span-by-span watch forces it)
                first = self._first_to_hold(run, forcing, now, step)
                state = forced_state(first.action, first.terminal_state) if first else None
                if first is not None and state is not None:
                    run.force(state, first.rule)
            for decision in decisions:
                self._decide(decision, run, now, step)
                fired += 1
        except Exception as exc:
            step.failures.append(Failure("rules", run.key, exc))
        if run.ended:
            self._forget(run.key)
        return fired

    def _after_evaluation(self, started: float, step: Step) -> None:
        assert self.engine is not None
        step.eval_seconds += self._timer() - started
        if self.engine.errors:
            errors = self.engine.drain_errors()
            step.rule_errors.update(errors)
            for rule in errors:
                step.rule_error_texts[rule] = (self.engine.last_error_runs.get(rule, ""),
                                               self.engine.last_errors.get(rule, ""))

    def _decide(self, decision: Decision, run: RunState, now: float, step: Step) -> None:
        state = forced_state(decision.action, decision.terminal_state)
        if state is not None:
            run.force(state, decision.rule)
            step.dirty[run.key] = run
        if decision.action is not Action.NOTIFY and not run.ended:
            reason = decision.terminal_state.value if decision.terminal_state else decision.rule
            self._stuck[run.key] = (run.agent_name, reason)
        recent = self._recent.get(run.key)
        log, earlier = recent.log(run.first_start_ns / NS if run.first_start_ns else None
                                  ) if recent is not None else (EMPTY_LOG, 0)
        step._decided.append((decision, run, log, earlier))

    def _finish(self, runs: list[RunState], step: Step) -> None:
        step._finished.extend(runs)
        defaults = self._defaults
        for run in runs:
            if (budget := defaults(run)) is not None:  # (the tracker knows no rule pack)
                run.ended_at_budget(budget)
            run.counted_state = run.terminal_state
            self._forget(run.key)

    def _seal(self, step: Step, now: float) -> None:
        """Take one view of each run the step touched, finished or decided on (again, for a
        step handed to a second call: its runs may have changed since). A run whose view
        cannot be taken (a value nothing should have let in) is left out, and reported in
        :attr:`Step.failures`: the other runs go on."""
        views: dict[str, RunView | None] = {}
        defaults = self._defaults

        def view(run: RunState) -> RunView | None:
            key = run.key
            if key in views:
                return views[key]
            try:
                taken: RunView | None = run.view(now, defaults(run))
            except Exception as exc:
                step.failures.append(Failure("view", key, exc))
                taken = None
            views[key] = taken
            return taken

        for run in step.dirty.values():
            # an ended run whose state moved since its end was handed out (late spans: its
            # answer, a limit, the budget it spent): the move is handed out, once
            counted = run.counted_state
            if counted is not None and run.ended and counted is not run.terminal_state:
                run.counted_state = run.terminal_state
                if (taken := view(run)) is not None:
                    step.reclassified.append((taken, counted.value))
        if step._view_touched:
            step.touched = {key: taken for key, run in step.dirty.items()
                            if (taken := view(run)) is not None}
        if step._finished:
            step.finished.extend(taken for run in step._finished
                                 if (taken := view(run)) is not None)
            step._finished.clear()
        if step._evicted:
            step.evicted.extend(taken for run in step._evicted
                                if (taken := view(run)) is not None)
            step._evicted.clear()
        if step._decided:
            step.decisions.extend(Decided(decision, taken, lines, now, earlier)
                                  for decision, run, lines, earlier in step._decided
                                  if (taken := view(run)) is not None)
            step._decided.clear()
        if not step._view_touched:
            step.touched = {key: taken for key, taken in views.items() if taken is not None}

    def _forget(self, key: str) -> None:
        if self.engine is not None:
            self.engine.forget(key)
        stuck = self._stuck.pop(key, None)
        if stuck is not None:
            self._stuck_ended[key] = stuck
            self._stuck_ended.move_to_end(key)
            while len(self._stuck_ended) > MAX_ENDED_STATES:
                self._stuck_ended.popitem(last=False)
        self._recent.pop(key, None)

    def stuck_counts(self) -> dict[tuple[str, str], int]:
        """Active runs a wind_down/abort was sent to, by agent and reason (runs_stuck)."""
        return dict(Counter(self._stuck.values()))

    # -- sessions -------------------------------------------------------------------------------

    def _note_sessions(self, runs: Iterable[RunState], now: float) -> None:
        """Count the runs of each session (``session.runs``) as they are first seen."""
        note_run = self.sessions.note_run
        for run in runs:
            if run.session is not None and not run.session_counted:
                run.session_counted = True
                note_run(run.session, run.key, now)

    def _session_of(self, run: RunState, at_end: bool = False) -> dict[str, Any] | None:
        """The CEL ``session`` of a run (None: the run has no session); ``at_end``: of the
        ended run as it was at its end, still running (:meth:`_classify_at_end`): the cycle's
        orchestrator is chosen as it was then, of the runs that had not ended before it (a
        loop whose runs all ended in one batch)."""
        live = run.ended_at if at_end else None
        if run.session is None:
            if self.cycles.cycling and (trail := self.cycles.get(self._group(run))) is not None \
                    and trail.repeats:  # a loop across the agents of a trace's runs
                return {"id": "", "agent_cycle": list(trail.cycle),
                        "agent_cycle_repeats": trail.repeats,
                        "cycle_orchestrator": self._orchestrator(trail, live) == run.key}
            return None
        state = self.sessions.get(run.session)
        if state is None:
            return {"id": run.session}
        activation = state.activation(run.key)
        if at_end and self.cycles.cycling and state.agent_cycle_repeats \
                and (trail := self.cycles.get(self._group(run))) is not None:
            activation["cycle_orchestrator"] = self._orchestrator(trail, live) == run.key
        return activation

    # -- loops across agents --------------------------------------------------------------------

    def _group(self, run: RunState) -> str:
        """Where ``run`` is looked at for loops across agents (see :mod:`watchdog.core.cycles`):
        its session, else its parent run's session, else its parent run, else itself (a
        parent's child runs are looked at with it)."""
        if run.session is not None:
            return "session:" + run.session
        if run.parent_run is None:
            return "run:" + run.key
        parent = self.tracker.get(run.parent_run)
        if parent is not None and parent.session is not None:
            return "session:" + parent.session
        return "run:" + run.parent_run

    def _note_cycles(self, runs: Iterable[RunState]) -> list[RunState]:
        """Enter each run whose agent and input are known into its group's trail; the runs
        that can stop a cycle that changed (to evaluate: their ``session`` changed)."""
        cycles = self.cycles
        orchestrators: dict[str, RunState] = {}
        for run in runs:
            if run.input_hash is None or run.agent is None or cycles.noted(run.key):
                continue
            group = self._group(run)
            trail = cycles.note(group, Entry(run.first_start_ns, run.agent, run.input_hash,
                                             run.key, run.parent_run), self._answered)
            if trail is None:
                continue
            key = self._orchestrator(trail) if trail.repeats else None
            if group.startswith("session:"):
                state = self.sessions.get_or_create(group.removeprefix("session:"))
                state.agent_cycle, state.agent_cycle_repeats = list(trail.cycle), trail.repeats
                state.cycle_orchestrator = key
                self.sessions.changed(state)
            orchestrator = self.tracker.get(key) if key is not None else None
            if orchestrator is not None:
                orchestrators[orchestrator.key] = orchestrator
        return list(orchestrators.values())

    def _answered(self, entry: Entry) -> bool:
        """Whether ``entry``'s run ended ``completed`` with its answer, started by no run of
        its group (its answer went to whoever started it: the same task again is a new one)."""
        run = self.tracker.get(entry.run)
        return run is not None and run.ended and entry.parent is None \
            and run.terminal_state is TerminalState.COMPLETED and run.has_final_answer

    def _orchestrator(self, trail: Trail, at: float | None = None) -> str | None:
        """The run that can stop ``trail``'s cycle: the cycling runs' parent while it runs,
        else the group's latest run still running (None: every one has ended); with ``at``,
        a run that ended then or later counts as running (as it was at ``at``)."""
        get = self.tracker.get

        def running(run: RunState) -> bool:
            return not run.ended or (at is not None and run.ended_at is not None
                                     and run.ended_at >= at)

        for entry in reversed(trail.cycling):
            if entry.parent is not None and (parent := get(entry.parent)) is not None \
                    and running(parent):
                return parent.key
        for entry in reversed(trail.entries):
            if (run := get(entry.run)) is not None and running(run):
                return run.key
        return None


def _progress(row: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return (row.get("spans") or 0, row.get("activity_seq") or 0, row.get("last_seen") or 0.0)


def newer_snapshot(candidate: Mapping[str, Any], stored: Mapping[str, Any] | None) -> bool:
    """Whether ``candidate``, a run's snapshot (:meth:`RunState.to_dict`), is further on than
    ``stored`` (None: there is none): more spans, more activity, or seen later. Of two equally
    far on, the stored one stands."""
    if stored is None:
        return True
    try:
        return bool(_progress(candidate) > _progress(stored))
    except TypeError:  # a value of the wrong type: the stored row stands
        return False
