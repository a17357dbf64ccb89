"""The rule engine: per run × rule state, evaluated at ``now`` into :class:`Decision` objects.

Theory of operation
-------------------
A rule is state plus ``evaluate(now)``, as in Prometheus' alerting rules. For each run the engine
keeps, only once something happened, a small :class:`_RunRules`:

* ``pending[rule]`` — when the condition of a rule with ``for`` was first seen true. It must hold
  on every evaluation until ``now - since >= for``; one evaluation where it is false (or fails)
  resets it. Time is read from ``now`` only.
* ``fired`` — the dedup keys already decided for the run: the rule name (``repeat: once``) or the
  rule name plus a hash of the rendered message (``repeat: on_change``). A key fires at most once
  per run; :meth:`RuleEngine.restore` refills it after a restart so nothing fires twice. A rule
  with ``repeat: each_time`` is taken out of ``fired`` again by an evaluation that finds its
  condition false, so it fires once each time the condition holds (a tool outage: once per
  outage); its decisions' keys carry the moment each one fired. A ``notify`` of such a rule is
  withdrawn by that evaluation: a notify with an empty message (``WITHDRAWN_MESSAGE``), which
  takes the rule's note out of the run's instructions (the outage is over).
* ``grace[rule]`` — when a ``wind_down`` with ``grace`` fired, and at which tool-call count. If the
  run goes on past the grace (more tool calls, or more seconds, than allowed) and has not ended
  or been aborted, an ``abort`` escalation fires once (dedup key ``RULE#grace``). The wind_down
  announces the tool-call count at which its grace ends (``ends_at_tool_calls``); an agent with
  the client SDK stops there by itself and says so (:meth:`RuleEngine.grace_kept`), so only
  un-steered agents, and seconds graces, need the escalation.
* ``aborted`` — an abort was decided (a rule's, or a grace's escalation): the run was told to
  stop, and its terminal state is set. Nothing more is decided for it: not the timers of a run
  whose end never comes (idle, total time), which would only repeat the stop under another
  name in the directives, ``rule_fired_total`` and ``runs_stuck``; not a notify, nor its
  withdrawal. The run ends as the abort said, when its end comes or it is abandoned.

One evaluation asks each rule that applies to the run's agent the fast path first
(:mod:`watchdog.core.rules.fast`), and builds the CEL activation (``run.signals`` + the session)
once, for the first rule only CEL can decide or render; the session is asked for only then, or
for a rule that reads it. Rules that already fired with ``repeat: once`` are skipped before
anything is built, so a run whose rules have all fired costs almost nothing.
``timed_only`` evaluations (the shell's timer) consider only rules that time alone can make fire
(see :attr:`Rule.timed`) plus grace deadlines; everything else changes only when spans arrive.

The engine is pure: no clock, no I/O. It is not thread-safe; the shell calls it from one place.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from watchdog.core.rules.decision import (
    GRACE_ENDS_AT,
    WITHDRAWN_MESSAGE,
    Action,
    Decision,
    Severity,
)
from watchdog.core.rules.expr import EvalError, Template, activation
from watchdog.core.rules.fast import rises_with_time
from watchdog.core.rules.model import Grace, Repeat, Rule, RuleSet
from watchdog.core.rules.signals import run_activation, session_activation
from watchdog.core.runs.catalogue import RUN_SIGNALS, SignalReader, reader
from watchdog.core.runs.run import RunState
from watchdog.core.runs.terminal import TerminalState

MAX_RUN_STATES = 100_000  # far above the tracker's bounds: only guards a shell that never forgets
# the states of runs that ended, kept for a run its agent takes back (Core._resume): as many as
# the tracker keeps ended runs in memory (MAX_ENDED_IN_MEMORY), the only ones taken back
MAX_ENDED_STATES = 2_000
MAX_CACHED_AGENTS = 4096  # agent names whose applicable rules are remembered; then start over
MAX_CACHED_CHANGES = 1024  # per agent: sets of changed signals whose rules are remembered
MESSAGE_HASH_BYTES = 4  # on_change dedup keys: rule#<8 hex>; collisions only merge two messages
MAX_MESSAGE_CHARS = 2000  # a rendered message is stored and sent; placeholders may be long
MAX_RENDERED = 256  # messages CEL rendered, kept by what they read (the oldest dropped first)
GRACE_SUFFIX = "#grace"
FLEET = "fleet"  # what a rule reading the CEL variable `fleet` reads (see signals_read)
EACH_TIME_MARK = "@"  # dedup keys of ``repeat: each_time``: rule@<seconds it fired>
WITHDRAWN_SUFFIX = "~withdrawn"  # rule@<seconds>~withdrawn: its notify's note withdrawn then
SESSION = "session"  # what a rule reading the CEL variable `session` reads (see signals_read)
# the CEL session of a run: the mapping (None: no session), or a function giving it when asked
Session = Mapping[str, Any] | None | Callable[[], Mapping[str, Any] | None]


@dataclass(frozen=True, slots=True)
class FiredRecord:
    """What the fired-rule log persists per decision, enough to restore the engine's state."""

    run_key: str
    rule: str
    dedup_key: str
    action: Action
    fired_at: float
    tool_calls_at: int
    terminal_state: TerminalState | None = None  # the rule's (restores a forced state)
    # a wind_down's grace as it announced it (``Grace()``: it announced none); None: not a
    # wind_down, or one an older build stored without it (its rule's grace is taken then)
    grace: Grace | None = None

    @classmethod
    def of(cls, decision: Decision, fired_at: float, tool_calls_at: int) -> FiredRecord:
        grace = None
        if decision.action is Action.WIND_DOWN:
            grace = Grace.announced(decision.grace or {})
        return cls(decision.run_key, decision.rule, decision.dedup_key, decision.action,
                   fired_at, tool_calls_at, decision.terminal_state, grace)


@dataclass(frozen=True, slots=True)
class _Announced:
    """A grace as a ``wind_down`` announced it: when it fired, at which tool-call count, the
    limits, and the terminal state its escalation imposes. A reload that changes or removes the
    rule changes none of it: the agent was told."""

    fired_at: float
    calls_at: int
    grace: Grace
    terminal_state: TerminalState


@dataclass(slots=True)
class _RunRules:
    fired: set[str] = field(default_factory=set)
    pending: dict[str, float] = field(default_factory=dict)  # rule -> condition true since
    # what a wind_down announced: a reload keeps it, whatever it did to the rule
    grace: dict[str, _Announced] = field(default_factory=dict)
    aborted: bool = False  # an abort was decided: no grace escalation is needed any more
    kept: bool = False  # the agent's client stopped it at its tool-call grace (see grace_kept)


@dataclass(frozen=True, slots=True)
class _AgentView:
    """What applies to one agent name: its rules (all, timer-relevant) and default budget, and
    the rules to evaluate for each set of changed signals seen (:meth:`candidates`)."""

    rules: tuple[Rule, ...]
    timed: tuple[Rule, ...]
    budget: dict[str, float]
    reads: dict[str, frozenset[str] | None]  # rule name -> the signals it reads (None: all)
    # (changed signals, fleet quiet, timed only) -> the rules that may have changed outcome
    _candidates: dict[tuple[AbstractSet[str] | None, bool, bool], tuple[Rule, ...]] = field(
        default_factory=dict)

    def candidates(self, changed: AbstractSet[str] | None, quiet: bool,
                   timed_only: bool) -> tuple[Rule, ...]:
        """The rules reading a signal in ``changed`` (None: every rule); while the fleet is
        ``quiet`` (no tool failing and ``fleet`` not changed) not those reading ``fleet``."""
        if changed is not None and type(changed) is not frozenset:
            changed = frozenset(changed)  # (a key: the change detector's sets are frozen)
        key = (changed, quiet, timed_only)
        found = self._candidates.get(key)
        if found is None:
            rules = self.timed if timed_only else self.rules
            if changed is not None:
                reads = self.reads
                rules = tuple(r for r in rules
                              if (read := reads[r.name]) is None
                              or (not read.isdisjoint(changed)
                                  and not (quiet and FLEET in read)))
            if len(self._candidates) >= MAX_CACHED_CHANGES:
                self._candidates.clear()
            found = self._candidates[key] = rules
        return found


def message_hash(message: str) -> str:
    return hashlib.blake2b(message.encode("utf-8", "replace"),
                           digest_size=MESSAGE_HASH_BYTES).hexdigest()


class RuleEngine:
    def __init__(self, ruleset: RuleSet) -> None:
        self.errors: Counter[str] = Counter()  # rule -> evaluation errors since last drained
        self.last_errors: dict[str, str] = {}  # rule -> its latest evaluation error (for humans)
        self.last_error_runs: dict[str, str] = {}  # rule -> the run of its latest error
        self._runs: OrderedDict[str, _RunRules] = OrderedDict()
        self._ended: OrderedDict[str, _RunRules] = OrderedDict()  # (forget, take_back)
        self._agents: dict[str, _AgentView] = {}
        # a template's message rendered by CEL, by the values it reads (_rendered)
        self._rendered: dict[tuple[Any, ...], tuple[str, list[str]]] = {}
        self._install(ruleset)
        # rule name -> when its definition as it is now was loaded (:meth:`replace`'s ``now``;
        # the first set's: -inf), so a run that ended before is not read by it (loaded_before)
        self._since: dict[str, float] = dict.fromkeys(self._by_name, -math.inf)

    # -- rule set -----------------------------------------------------------------------------

    @property
    def ruleset(self) -> RuleSet:
        return self._ruleset

    def _install(self, ruleset: RuleSet) -> None:
        self._ruleset = ruleset
        self._by_name = {rule.name: rule for rule in ruleset.rules}
        self.last_errors = {k: v for k, v in self.last_errors.items() if k in self._by_name}
        self.last_error_runs = {k: v for k, v in self.last_error_runs.items()
                                if k in self._by_name}
        self._agents = {}
        self._rendered = {}
        self._readers: dict[Template, SignalReader | None] = {
            rule.message: _values_read(rule.message) for rule in ruleset.rules}
        self.timed_rules_exist = any(
            rule.timed or (rule.grace is not None and rule.grace.seconds is not None)
            for rule in ruleset.rules)

    def replace(self, ruleset: RuleSet, now: float) -> None:
        """Hot reload at ``now``: per-run state of rules whose name still exists is kept (what
        fired is always kept, so a rule that comes back does not fire again); an announced grace
        is kept even when its rule is gone, and still escalates. A rule new or changed is
        loaded at ``now`` (:meth:`loaded_before`); one as it was keeps its time."""
        old, since = self._by_name, self._since
        self._install(ruleset)
        self._since = {
            name: since[name] if (was := old.get(name)) is not None
            and _definition(was) == _definition(rule) else now
            for name, rule in self._by_name.items()}
        names = self._by_name
        for state in (*self._runs.values(), *self._ended.values()):
            for name in [n for n in state.pending if n not in names]:
                del state.pending[name]

    def loaded_before(self, rule: str, at: float) -> bool:
        """Whether the rule named ``rule``, as it is now, was loaded before ``at`` (a run that
        ended at ``at`` was read by it live)."""
        return self._since.get(rule, math.inf) < at

    def _view(self, agent: str) -> _AgentView:
        view = self._agents.get(agent)
        if view is None:
            rules = tuple(r for r in self._ruleset.rules if r.applies_to(agent))
            view = _AgentView(rules, tuple(r for r in rules if r.timed),
                              self._ruleset.budget_for(agent), {r.name: r.reads for r in rules})
            if len(self._agents) >= MAX_CACHED_AGENTS:
                self._agents.clear()
            self._agents[agent] = view
        return view

    def default_budget(self, agent: str) -> dict[str, float]:
        """The rule packs' budget for ``agent`` (used where the run announces none)."""
        return dict(self._view(agent).budget)

    def agent_budget(self, agent: str) -> dict[str, float]:
        """:meth:`default_budget` without the copy, for the core's every touched run: the
        engine's own, read only."""
        return self._view(agent).budget

    # -- per-run state ------------------------------------------------------------------------

    def _state(self, run_key: str) -> _RunRules:
        state = self._runs.get(run_key)
        if state is None:
            state = self._runs[run_key] = _RunRules()
            while len(self._runs) > MAX_RUN_STATES:
                self._runs.popitem(last=False)
        return state

    def forget(self, run_key: str) -> None:
        """The run ended (and was evaluated) or was evicted: its state is dropped, and kept
        aside (the last :data:`MAX_ENDED_STATES`) for :meth:`take_back`."""
        state = self._runs.pop(run_key, None)
        if state is not None:
            earlier = self._ended.get(run_key)
            if earlier is not None:  # (evaluated again once ended: what fired before holds)
                state.fired |= earlier.fired
                for name, announced in earlier.grace.items():
                    state.grace.setdefault(name, announced)
                state.aborted |= earlier.aborted
            self._ended[run_key] = state
            self._ended.move_to_end(run_key)
            while len(self._ended) > MAX_ENDED_STATES:
                self._ended.popitem(last=False)

    def take_back(self, run_key: str) -> None:
        """The ended run is active again (its agent went on with it): what fired for it stays
        fired (a ``once`` rule does not fire again, an announced grace goes on); a ``for`` is
        timed afresh (nothing was evaluated while it had ended)."""
        state = self._ended.pop(run_key, None)
        if state is not None and run_key not in self._runs:
            state.pending.clear()
            self._runs[run_key] = state
            while len(self._runs) > MAX_RUN_STATES:
                self._runs.popitem(last=False)

    def restore(self, fired: Iterable[FiredRecord]) -> None:
        """After a restart: what already fired, so nothing fires twice, and each grace goes on
        as its wind_down announced it (whatever its rule says now, or if it is gone; a record
        stored without its grace takes its rule's)."""
        for record in fired:
            state = self._state(record.run_key)
            if record.dedup_key.endswith(WITHDRAWN_SUFFIX):  # (its note withdrawn since)
                state.fired.discard(record.rule)
                continue
            state.fired.add(record.dedup_key.partition(EACH_TIME_MARK)[0])
            action = Action(record.action)
            if action is Action.ABORT:
                state.aborted = True
            elif action is Action.WIND_DOWN and not record.dedup_key.endswith(GRACE_SUFFIX):
                started = state.grace.get(record.rule)
                if started is not None and started.fired_at <= record.fired_at:
                    continue  # (the first wind_down of a rule announced its grace)
                grace, terminal = record.grace, record.terminal_state
                if grace is None:  # (stored without it)
                    rule = self._by_name.get(record.rule)
                    grace = rule.grace if rule is not None else None
                    terminal = terminal or (rule.terminal_state if rule is not None else None)
                if grace is not None and grace.limits:
                    state.grace[record.rule] = _Announced(
                        record.fired_at, record.tool_calls_at, grace,
                        terminal or TerminalState.ABORTED)

    def grace_kept(self, run_key: str) -> tuple[TerminalState, str] | None:
        """The agent's client stopped the run at the tool-call grace its wind_down announced
        (``ends_at_tool_calls``): tool calls counted after that were refused, never run, so
        they are no overrun to escalate (a seconds grace still is). Returns the terminal state
        the escalation would have imposed, and the rule, or None without a grace."""
        state = self._runs.get(run_key)
        if state is None or not state.grace:
            return None
        state.kept = True
        name, announced = next(iter(state.grace.items()))
        return announced.terminal_state, name

    def drain_errors(self) -> Counter[str]:
        errors, self.errors = self.errors, Counter()
        return errors

    # -- evaluation ---------------------------------------------------------------------------

    def evaluate(self, run: RunState, now: float, session: Session = None,
                 timed_only: bool = False, changed: AbstractSet[str] | None = None,
                 fleet: dict[str, Any] | None = None) -> list[Decision]:
        """The decisions for ``run`` at ``now``: after its spans changed (all rules), or on the
        timer (``timed_only``: rules time alone can make fire, and grace deadlines).

        ``changed`` names the signals that changed since the run was last evaluated (None:
        unknown, evaluate every rule); rules reading none of them cannot have changed their
        outcome and are skipped — on the ingest path most spans then cost no CEL at all.
        ``session`` is the session mapping (None: the run has none), or a function giving it,
        called only when a rule reads ``session`` or CEL runs.
        ``fleet`` is the CEL ``fleet`` (:meth:`Fleet.activation
        <watchdog.core.fleet.Fleet.activation>`; None: no tool failing).
        """
        state = self._runs.get(run.key)
        if state is not None and state.aborted:
            return []  # told to stop: an abort is the run's last word (see module docstring)
        view = self._view(run.agent_name)
        # while no tool fails, a rule reading `fleet` waits for the fleet to change (an
        # outage beginning or ending): a tool call per run would otherwise cost it an
        # evaluation with nothing to find
        quiet = changed is not None and FLEET not in changed and not (
            fleet and fleet.get("failing_tools"))
        candidates = view.candidates(changed, quiet, timed_only)
        decisions: list[Decision] = []
        if candidates:
            act = None  # built for the first rule CEL evaluates: most runs need none
            budget = view.budget
            fired = state.fired if state is not None else None
            for rule in candidates:
                if fired and rule.repeat is Repeat.ONCE and rule.name in fired:
                    continue  # decided once for the run: nothing more to decide
                when = rule.when
                fast = when.fast
                if fast is not None:
                    if callable(session) and (when.reads is None or SESSION in when.reads):
                        session = session()
                    known = fast(run, now, budget, session, fleet)
                else:
                    known = None
                if known is False:  # as CEL says (None: ask it)
                    if state is not None and (state.pending or rule.repeat is Repeat.EACH_TIME):
                        withdrawn = _lapsed(rule, state, run, now)
                        if withdrawn is not None:
                            decisions.append(withdrawn)
                    continue
                decision, act = self._evaluate_rule(rule, run, now, act, state, known,
                                                    budget, session, fleet)
                if decision is not None:
                    decisions.append(decision)
                if state is None:  # the rule may have created it (fired, or pending a `for`)
                    state = self._runs.get(run.key)
        if state is not None and state.grace and not state.aborted and not run.ended:
            escalation = self._escalate(run, now, state)
            if escalation is not None:
                decisions.append(escalation)
        return decisions

    def steady(self, run: RunState) -> bool:
        """Whether what the rules decide for ``run`` changes with time only as each of its
        timed rules' conditions turns true (:meth:`decides` at a later time covers the time
        before it): no ``for`` waiting, no grace announced, and every timed rule of its agent
        either fired already (``once``) or :func:`~watchdog.core.rules.fast.rises_with_time`
        with no ``for`` of its own."""
        state = self._runs.get(run.key)
        if state is not None and state.aborted:
            return True  # nothing more is decided for it
        if state is not None and (state.pending or state.grace):
            return False
        fired = state.fired if state is not None else ()
        return all((rule.repeat is Repeat.ONCE and rule.name in fired)
                   or (rule.for_seconds == 0 and rises_with_time(rule.when.source))
                   for rule in self._view(run.agent_name).timed)

    def decides(self, run: RunState, now: float, session: Session = None,
                timed_only: bool = False, changed: AbstractSet[str] | None = None,
                fleet: dict[str, Any] | None = None,
                harmless: Callable[[Decision], bool] | None = None) -> bool:
        """Whether :meth:`evaluate` would decide anything (but decisions ``harmless`` says
        are), with the engine left as it was (:meth:`would_decide`)."""
        decisions = self.would_decide(run, now, session, timed_only, changed, fleet)
        return any(harmless is None or not harmless(decision) for decision in decisions)

    def would_decide(self, run: RunState, now: float, session: Session = None,
                     timed_only: bool = False, changed: AbstractSet[str] | None = None,
                     fleet: dict[str, Any] | None = None) -> list[Decision]:
        """What :meth:`evaluate` would decide, with the engine left as it was (the run's rule
        state evaluated on a copy, no error counted): ``run`` may be a run as it would be, not
        the tracker's."""
        runs, errors, last_errors = self._runs, self.errors, self.last_errors
        state = runs.get(run.key)
        self._runs = OrderedDict() if state is None else OrderedDict(
            {run.key: copy.deepcopy(state)})
        self.errors, self.last_errors = Counter(), {}
        try:
            return self.evaluate(run, now, session, timed_only, changed, fleet)
        finally:
            self._runs, self.errors, self.last_errors = runs, errors, last_errors

    def _evaluate_rule(self, rule: Rule, run: RunState, now: float, act: Any,
                       state: _RunRules | None, known: bool | None,
                       budget: dict[str, float], session: Session,
                       fleet: dict[str, Any] | None) -> tuple[Decision | None, Any]:
        """``rule``'s decision for ``run`` (``known``: its condition as the fast path decided
        it, None: CEL's to say), and the activation, built here when CEL first needs it."""
        name = rule.name
        if known is None:
            if act is None:
                act = _activation(run, now, budget, session, fleet)
            try:
                matched = rule.when.matches(act)
            except EvalError as exc:
                self.errors[name] += 1
                self.last_errors[name] = f"when: {exc}"
                self.last_error_runs[name] = run.key
                matched = False
        else:
            matched = known
        if not matched:
            return (_lapsed(rule, state, run, now) if state is not None else None), act
        if rule.for_seconds > 0:
            state = state if state is not None else self._state(run.key)
            since = state.pending.setdefault(name, now)
            if now - since < rule.for_seconds:
                return None, act
        each_time = rule.repeat is Repeat.EACH_TIME
        if each_time and state is not None and name in state.fired:
            return None, act  # this time it holds was decided already
        template = rule.message
        message = template.render_fast(run, now, budget)
        if message is None:
            message, errors, act = self._render(template, run, now, act, budget, session, fleet)
        else:
            errors = []
        if not message:  # (an empty notify withdraws a note: a rule's says at least its name)
            message = f"[{name}]"
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[:MAX_MESSAGE_CHARS - 1] + "…"
        if errors:
            self.errors[name] += 1
            self.last_errors[name] = f"message: {errors[0]}"
            self.last_error_runs[name] = run.key
        if rule.repeat is Repeat.ON_CHANGE:
            dedup_key = f"{name}#{message_hash(message)}"
        else:  # each time it holds is a decision of its own: its key says when it began
            dedup_key = f"{name}{EACH_TIME_MARK}{now:.3f}" if each_time else name
        state = state if state is not None else self._state(run.key)
        if dedup_key in state.fired:
            return None, act
        state.fired.add(name if each_time else dedup_key)
        if rule.action is Action.ABORT:
            state.aborted = True
        grace: dict[str, float] | None = None
        if rule.action is Action.WIND_DOWN and rule.grace is not None:
            given = state.grace.setdefault(name, _Announced(
                now, run.tool_calls, rule.grace, rule.terminal_state or TerminalState.ABORTED))
            grace = announced_grace(given.grace, given.calls_at)
        return Decision(run.key, name, rule.action, rule.severity, message, rule.terminal_state,
                        dedup_key, grace=grace, countdown=rule.countdown), act

    def _render(self, template: Template, run: RunState, now: float, act: Any,
                budget: dict[str, float], session: Session,
                fleet: dict[str, Any] | None) -> tuple[str, list[str], Any]:
        """``template`` rendered by CEL on the run's activation (built here if it is not yet),
        with the errors of its placeholders, and the activation. A message that reads no time,
        no ``session`` and no run as a whole is what CEL renders from the values it reads
        (the run's signals it names, ``fleet``), the same each time they are the same: kept by
        them (an outage's note is rendered for every run that calls the tool, from the same
        few values)."""
        read = self._readers.get(template)
        key = None
        if read is not None:
            key = _frozen_key(template, read(run, now, budget), fleet)
            if key is not None:
                found = self._rendered.get(key)
                if found is not None:
                    return found[0], found[1], act
        if act is None:
            act = _activation(run, now, budget, session, fleet)
        message, errors = template.render(act)
        if key is not None:
            rendered = self._rendered
            if len(rendered) >= MAX_RENDERED:
                del rendered[next(iter(rendered))]
            rendered[key] = (message, errors)
        return message, errors, act

    def _escalate(self, run: RunState, now: float, state: _RunRules) -> Decision | None:
        """An abort when a run went on past the grace of a wind_down it was sent."""
        for name, announced in state.grace.items():
            fired_at, calls_at, grace = announced.fired_at, announced.calls_at, announced.grace
            dedup_key = name + GRACE_SUFFIX
            if dedup_key in state.fired:
                continue
            # (the grace the wind_down announced, not the reloaded rule's, if any: the agent
            # was told)
            more_calls = run.tool_calls - calls_at
            waited = max(now - fired_at, 0.0)
            over_calls = (grace.tool_calls is not None and not state.kept
                          and more_calls > grace.tool_calls)
            over_time = grace.seconds is not None and waited > grace.seconds
            if not (over_calls or over_time):
                continue
            state.fired.add(dedup_key)
            state.aborted = True
            message = (f"Grace exceeded after wind_down (rule {name}): {more_calls} more tool "
                       f"calls / {waited:.0f} s (grace: {_grace_text(grace)}) — stop now")
            return Decision(run.key, name, Action.ABORT, Severity.CRITICAL, message,
                            announced.terminal_state, dedup_key, escalation=True)
        return None


def _definition(rule: Rule) -> dict[str, Any]:
    """What a rule does (:meth:`Rule.describe` but where it is written)."""
    described = rule.describe()
    del described["source"]
    return described


def _activation(run: RunState, now: float, budget: dict[str, float], session: Session,
                fleet: dict[str, Any] | None) -> Any:
    """The CEL activation of one run evaluation (``run``, ``session``, ``fleet``)."""
    if callable(session):
        session = session()
    return activation(run_activation(run.signals(now, budget)), session_activation(session),
                      fleet)


def _values_read(template: Template) -> SignalReader | None:
    """The reader of the run's signals ``template``'s CEL placeholders read (as
    :meth:`RunState.signals` reads them), where those and ``fleet`` are all they read: no time,
    no ``session``, no run as a whole; None otherwise."""
    reads = template.reads
    if template.timed or reads is None or SESSION in reads:
        return None
    return reader(signal for signal in RUN_SIGNALS if signal.name in reads)


class _Unfrozen(Exception):
    """A value :func:`_frozen` has no key for."""


def _frozen_key(template: Template, signals: dict[str, Any],
                fleet: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """The key of ``template`` rendered on these values: equal only where each value is
    equal in type and order too (``1``, ``1.0`` and ``True`` are equal to Python, not to what
    CEL writes); None where a value has no key."""
    try:
        return (template, _frozen(signals), _frozen(fleet))
    except _Unfrozen:
        return None


_ATOMS = frozenset({str, int, bool, type(None)})


def _frozen(value: Any) -> Any:
    kind = type(value)
    if kind in _ATOMS:
        return value if kind is str or value is None else (kind, value)
    if kind is dict:
        return (dict, *((_frozen(key), _frozen(item)) for key, item in value.items()))
    if kind is list or kind is tuple:
        return (kind, *(_frozen(item) for item in value))
    if kind is float:
        return (float, repr(value))  # (-0.0 is 0.0 to Python; NaN equal to itself here)
    raise _Unfrozen


def _lapsed(rule: Rule, state: _RunRules, run: RunState, now: float) -> Decision | None:
    """``rule``'s condition is false for the run: a ``for`` starts over, and a rule with
    ``repeat: each_time`` may fire again the next time it holds. A ``notify`` of such a rule
    that told the run while it held is withdrawn (its note is no longer true: the outage is
    over), unless the run has ended."""
    name = rule.name
    if name in state.pending:
        del state.pending[name]
    if rule.repeat is not Repeat.EACH_TIME or name not in state.fired:
        return None
    state.fired.discard(name)
    if rule.action is not Action.NOTIFY or run.ended:
        return None
    return Decision(run.key, name, Action.NOTIFY, Severity.INFO, WITHDRAWN_MESSAGE, None,
                    f"{name}{EACH_TIME_MARK}{now:.3f}{WITHDRAWN_SUFFIX}")


def announced_grace(grace: Grace, calls_at: int) -> dict[str, float]:
    """The grace as the wind_down directive announces it: the rule's limits, and the tool-call
    count at which a tool-call grace ends (the engine's own baseline, so the agent's cap and
    the escalation agree: a client that stops there leaves nothing to escalate)."""
    announced: dict[str, float] = dict(grace.describe())
    if grace.tool_calls is not None:
        announced[GRACE_ENDS_AT] = calls_at + grace.tool_calls
    return announced


def _grace_text(grace: Grace) -> str:
    parts = []
    if grace.tool_calls is not None:
        parts.append(f"{grace.tool_calls} tool calls")
    if grace.seconds is not None:
        parts.append(f"{grace.seconds:g} s")
    return " / ".join(parts)
