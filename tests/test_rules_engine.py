"""The rule engine: for (Prometheus semantics), repeat once/on_change, grace escalation, agents
and budgets, rule errors, restore after a restart, hot reload, timed evaluation.

Runs are real: span records go into a real :class:`RunTracker` (and, in the end-to-end test,
real OpenTelemetry spans go through the OTLP encoder and the ingest pipeline first).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.spans import T0, SpanMaker, chat_attrs, records_of, tool_attrs
from watchdog.core.rules.decision import Action, Decision, Severity
from watchdog.core.rules.engine import (
    GRACE_SUFFIX,
    MAX_MESSAGE_CHARS,
    FiredRecord,
    RuleEngine,
    message_hash,
)
from watchdog.core.rules.model import Grace
from watchdog.core.rules.pack import RulePackError, RuleSet, load_rules, load_text
from watchdog.core.runs.fields import NS
from watchdog.core.runs.run import RunState
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.conventions import canonical_arguments, stable_hash
from watchdog.core.spans.record import KeySource, SpanKind, SpanRecord

HEADER = "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: test\n"


def rules(body: str) -> RuleSet:
    return load_text(HEADER + body)


class Agent:
    """One run fed span by span into a real tracker; each step returns the engine's decisions."""

    def __init__(self, engine: RuleEngine, agent: str = "agent", key: str = "run-1",
                 budget: dict[str, float] | None = None) -> None:
        self.engine = engine
        self.agent = agent
        self.key = key
        self.budget = budget
        self.tracker = RunTracker()
        self.spans = 0
        self.session: dict[str, Any] | None = None

    @property
    def run(self) -> RunState:
        run = self.tracker.get(self.key)
        assert run is not None
        return run

    def _record(self, at: float, kind: SpanKind, **fields: Any) -> SpanRecord:
        self.spans += 1
        ns = int((T0 + at) * NS)
        return SpanRecord(self.key, KeySource.WATCHDOG, "ab" * 16, f"{self.spans:016x}",
                          "f" * 16, kind.value, kind, ns, ns, agent=self.agent,
                          budget=dict(self.budget) if self.budget else None, **fields)

    def _apply(self, record: SpanRecord, at: float) -> list[Decision]:
        self.tracker.apply([record], T0 + at)
        return self.evaluate(at)

    def evaluate(self, at: float, timed_only: bool = False) -> list[Decision]:
        decisions = self.engine.evaluate(self.run, T0 + at, self.session, timed_only=timed_only)
        for decision in decisions:
            if decision.terminal_state is not None:
                self.run.force(decision.terminal_state, decision.rule)
        return decisions

    def tick(self, at: float) -> list[Decision]:
        return self.evaluate(at, timed_only=True)

    def tool(self, at: float, tool: str = "search", args: object = None,
             result: str | None = None, error: str | None = None) -> list[Decision]:
        canonical = canonical_arguments(args if args is not None else {"at": at})
        fields: dict[str, Any] = {"tool_name": tool,
                                  "args_hash": stable_hash(tool + "\0" + canonical)}
        if result is not None:
            fields["result_hash"] = stable_hash(tool + "\0" + result)
        if error is not None:
            fields.update(error=True, error_type="OSError", error_message=error,
                          error_signature=stable_hash("OSError:" + error))
        return self._apply(self._record(at, SpanKind.TOOL, **fields), at)

    def llm(self, at: float, messages: int = 0) -> list[Decision]:
        return self._apply(self._record(at, SpanKind.LLM, messages=messages), at)

    def end(self, at: float) -> list[Decision]:
        record = self._record(at, SpanKind.AGENT, final_answer=True)
        record.parent_span_id = None
        return self._apply(record, at)


def fired(decisions: list[Decision]) -> list[tuple[str, str]]:
    return [(d.rule, d.message) for d in decisions]


# -- repeat ---------------------------------------------------------------------------------------

def test_a_rule_fires_once_per_run() -> None:
    engine = RuleEngine(rules("""
rules:
  - {name: busy, when: run.tool_calls >= 2, action: notify, severity: info,
     message: "busy: ${run.tool_calls} calls"}
"""))
    agent = Agent(engine)
    assert agent.tool(1) == []
    (decision,) = agent.tool(2)
    assert decision == Decision("run-1", "busy", Action.NOTIFY, Severity.INFO, "busy: 2 calls",
                                None, "busy")
    assert agent.tool(3) == [] and agent.tool(4) == []
    other = Agent(engine, key="run-2")  # per run
    other.tool(1)
    assert fired(other.tool(2)) == [("busy", "busy: 2 calls")]


def test_on_change_fires_again_for_each_new_message_only() -> None:
    engine = RuleEngine(rules("""
rules:
  - {name: calls, when: run.tool_calls >= 1, action: notify, repeat: on_change,
     message: "${run.tool_calls >= 3 ? 'many' : 'some'} calls"}
"""))
    agent = Agent(engine)
    (first,) = agent.tool(1)
    assert first.dedup_key == "calls#" + message_hash("some calls")
    assert len(first.dedup_key) == len("calls#") + 8
    assert agent.tool(2) == []  # same message
    assert fired(agent.tool(3)) == [("calls", "many calls")]
    assert agent.tool(4) == []



def test_a_message_cel_renders_is_rendered_again_whenever_a_value_it_reads_changes() -> None:
    """A message kept by the values it reads (the run's tools, ``fleet``) is the one CEL
    renders from the values of now: a tool's count, another tool, the fleet's outage moved;
    and the same values of another run give it without CEL. (The tools in an order of the
    message's own: CEL iterates a map in an order of its own, not always the same.)"""
    engine = RuleEngine(rules("""
rules:
  - {name: tools, when: run.tool_calls >= 1, action: notify, repeat: on_change,
     message: "${['search', 'fetch', 'other'].filter(t, t in run.tools).map(t,
       t + '=' + string(run.tools[t])).join(',')} | ${'fetch' in fleet.failing_tools
       ? 'fetch:' + string(fleet.failing_tools['fetch'].runs) : ''}"}
"""))
    agent = Agent(engine)
    renders = 0
    template = engine.ruleset.rules[0].message
    render = type(template).render

    def counted(self: Any, act: Any) -> Any:
        nonlocal renders
        renders += 1
        return render(self, act)

    outage = {"runs": 3, "errors": 3, "since": "2027-01-15T08:00:00Z", "error_type": "Boom"}

    def step(at: float, tool: str, fleet: dict[str, Any]) -> list[tuple[str, str]]:
        agent.tracker.apply([agent._record(at, SpanKind.TOOL, tool_name=tool,
                                           args_hash=stable_hash(f"{tool}{at}"))], T0 + at)
        return fired(engine.evaluate(agent.run, T0 + at, None, fleet=fleet))

    import unittest.mock
    with unittest.mock.patch.object(type(template), "render", counted):
        assert step(1, "search", {"failing_tools": {}}) == [("tools", "search=1 | ")]
        assert step(2, "search", {"failing_tools": {}}) == [("tools", "search=2 | ")]
        assert step(3, "fetch", {"failing_tools": {}}) == [("tools", "search=2,fetch=1 | ")]
        failing = {"failing_tools": {"fetch": outage}}
        assert step(4, "fetch", failing) == [("tools", "search=2,fetch=2 | fetch:3")]
        assert step(5, "other", {"failing_tools": {"fetch": {**outage, "runs": 4}}}) == [
            ("tools", "search=2,fetch=2,other=1 | fetch:4")]
        moved = {"failing_tools": {"fetch": {**outage, "runs": 5}}}  # the fleet alone moved
        assert fired(engine.evaluate(agent.run, T0 + 6, None, fleet=moved)) == [
            ("tools", "search=2,fetch=2,other=1 | fetch:5")]
        assert renders == 6
        other = Agent(engine, key="run-2")  # the same values: the message without CEL
        agent = other
        step(1, "search", {"failing_tools": {}})
        assert fired(engine.evaluate(other.run, T0 + 1, None, fleet={"failing_tools": {}})) \
            == []  # (on_change: said already)
        assert renders == 6
        assert step(2, "search", {"failing_tools": {}}) == [("tools", "search=2 | ")]
        assert renders == 6


def test_the_key_a_rendered_message_is_kept_by_tells_apart_what_cel_writes_apart() -> None:
    """``1``, ``1.0`` and ``True`` are equal to Python, and so are ``0.0`` and ``-0.0``: CEL
    writes each its own way, so each is a key of its own; and so is another order of a map."""
    from watchdog.core.rules.engine import _frozen

    values: list[object] = [1, 1.0, True, 0, 0.0, -0.0, False, None, "1", [1], (1,), {"a": 1},
                            {"a": 1.0}, {"a": True}, {1: "a"}, {True: "a"}]
    keys = [_frozen(value) for value in values]
    assert len(set(keys)) == len(values)
    assert _frozen({"a": 1, "b": 2}) != _frozen({"b": 2, "a": 1})
    assert _frozen({"a": [1, "x", None]}) == _frozen({"a": [1, "x", None]})


# -- for ------------------------------------------------------------------------------------------

def test_for_needs_the_condition_to_hold_continuously() -> None:
    engine = RuleEngine(rules("""
rules:
  - {name: failing, when: run.consecutive_errors >= 1, for: 30s, action: notify,
     message: failing}
"""))
    agent = Agent(engine)
    assert agent.tool(0, error="boom") == []  # pending since 0
    assert agent.tool(10) == []  # a working call: the condition is false, pending resets
    assert agent.tool(15, error="boom") == []  # pending again, since 15
    assert agent.tick(40) == []  # 25 s
    assert agent.tick(44.9) == []
    assert fired(agent.tick(45)) == [("failing", "failing")]  # 30 s, time from `now` only
    assert agent.tick(100) == []


def test_for_resets_when_the_expression_fails() -> None:
    engine = RuleEngine(rules("""
rules:
  - {name: r, when: "run.tool_calls == 1 || run.budget.max_tool_calls > 0", for: 10s,
     action: notify, message: r}
"""))
    agent = Agent(engine)
    agent.tool(0)  # true, pending
    agent.tool(5)  # tool_calls == 2: the budget field is absent -> error -> not matching
    assert engine.errors["r"] == 1
    assert agent.tick(20) == []


# -- grace ----------------------------------------------------------------------------------------

LOOP_PACK = """
rules:
  - name: loop
    when: run.repeated_tool_call >= 2
    action: wind_down
    terminal_state: loop_detected
    grace: {tool_calls: 2, seconds: 60}
    message: loop
"""


def test_grace_escalates_after_more_tool_calls() -> None:
    agent = Agent(RuleEngine(rules(LOOP_PACK)))
    agent.tool(1, args={"q": 1})
    (wind_down,) = agent.tool(2, args={"q": 1})
    assert (wind_down.action, wind_down.escalation) == (Action.WIND_DOWN, False)
    assert agent.tool(3) == [] and agent.tool(4) == []  # two more calls are allowed
    (abort,) = agent.tool(5)
    assert abort == Decision(
        "run-1", "loop", Action.ABORT, Severity.CRITICAL,
        "Grace exceeded after wind_down (rule loop): 3 more tool calls / 3 s "
        "(grace: 2 tool calls / 60 s) — stop now",
        TerminalState.LOOP_DETECTED, "loop" + GRACE_SUFFIX, escalation=True)
    assert agent.tool(6) == [] and agent.tick(500) == []  # once


def test_a_reload_keeps_the_grace_a_wind_down_announced() -> None:
    """The agent was told its grace ends at the 4th tool call: a reload that gives the rule a
    longer grace (or a shorter one) changes no grace already announced; the next wind_down
    has the new one."""
    engine = RuleEngine(rules(LOOP_PACK))
    agent = Agent(engine)
    agent.tool(1, args={"q": 1})
    (wind_down,) = agent.tool(2, args={"q": 1})
    assert wind_down.grace is not None and wind_down.grace["ends_at_tool_calls"] == 4
    engine.replace(rules(LOOP_PACK.replace("tool_calls: 2", "tool_calls: 5")), 0.0)
    assert agent.tool(3) == [] and agent.tool(4) == []
    (abort,) = agent.tool(5)
    assert abort.escalation and "(grace: 2 tool calls / 60 s)" in abort.message
    fresh = Agent(engine, key="run-2")
    fresh.tool(1, args={"q": 1})
    (wind_down,) = fresh.tool(2, args={"q": 1})
    assert wind_down.grace is not None and wind_down.grace["ends_at_tool_calls"] == 7


def test_a_grace_announced_before_its_rule_was_removed_still_escalates() -> None:
    """A reload that removes the rule does not take back the grace its wind_down announced:
    past it (tool calls, or seconds on the timer) the run is aborted as the rule said."""
    engine = RuleEngine(rules(LOOP_PACK))
    agent = Agent(engine)
    agent.tool(1, args={"q": 1})
    agent.tool(2, args={"q": 1})
    engine.replace(rules("rules: []\n"), 0.0)
    assert agent.tool(3) == [] and agent.tool(4) == []
    (abort,) = agent.tool(5)
    assert (abort.rule, abort.action, abort.terminal_state, abort.escalation) == (
        "loop", Action.ABORT, TerminalState.LOOP_DETECTED, True)
    assert "(grace: 2 tool calls / 60 s)" in abort.message
    assert engine.grace_kept("run-1") == (TerminalState.LOOP_DETECTED, "loop")

    timed = RuleEngine(rules(LOOP_PACK))
    waiting = Agent(timed)
    waiting.tool(1, args={"q": 1})
    waiting.tool(2, args={"q": 1})
    timed.replace(rules("rules: []\n"), 0.0)
    assert waiting.tick(61) == []
    (abort,) = waiting.tick(63)
    assert abort.escalation and abort.terminal_state is TerminalState.LOOP_DETECTED


def test_grace_escalates_after_seconds_on_the_timer() -> None:
    engine = RuleEngine(rules(LOOP_PACK))
    assert engine.timed_rules_exist  # grace seconds need the timer
    agent = Agent(engine)
    agent.tool(1, args={"q": 1})
    agent.tool(2, args={"q": 1})
    assert agent.tick(62) == []
    (abort,) = agent.tick(62.5)
    assert abort.escalation and "0 more tool calls / 60 s" in abort.message


def test_no_escalation_once_the_run_ended_or_was_aborted() -> None:
    agent = Agent(RuleEngine(rules(LOOP_PACK)))
    agent.tool(1, args={"q": 1})
    agent.tool(2, args={"q": 1})
    assert agent.end(3) == []
    assert agent.tick(500) == []
    assert agent.run.terminal_state is TerminalState.LOOP_DETECTED

    engine = RuleEngine(rules(LOOP_PACK + """
  - {name: stop, when: run.tool_calls >= 3, action: abort, message: stop}
"""))
    aborted = Agent(engine)
    aborted.tool(1, args={"q": 1})
    aborted.tool(2, args={"q": 1})
    assert fired(aborted.tool(3)) == [("stop", "stop")]
    assert aborted.tool(4) == [] and aborted.tool(5) == [] and aborted.tick(500) == []


def test_a_wind_down_announces_where_its_tool_call_grace_ends() -> None:
    agent = Agent(RuleEngine(rules(LOOP_PACK)))
    agent.tool(1, args={"q": 1})
    (wind_down,) = agent.tool(2, args={"q": 1})
    assert wind_down.grace == {"tool_calls": 2, "seconds": 60, "ends_at_tool_calls": 4}
    seconds_only = Agent(RuleEngine(rules(LOOP_PACK.replace("tool_calls: 2, ", ""))))
    seconds_only.tool(1, args={"q": 1})
    (wind_down,) = seconds_only.tool(2, args={"q": 1})
    assert wind_down.grace == {"seconds": 60}  # no cap for the client: the timer's business


def test_a_grace_kept_by_the_client_is_not_escalated_but_its_seconds_are() -> None:
    agent = Agent(RuleEngine(rules(LOOP_PACK)))
    assert agent.engine.grace_kept("run-1") is None  # no grace yet
    agent.tool(1, args={"q": 1})
    agent.tool(2, args={"q": 1})
    assert agent.engine.grace_kept("run-1") == (TerminalState.LOOP_DETECTED, "loop")
    # the client refused the 5th call: its span still counts, but it never ran
    assert agent.tool(3) == [] and agent.tool(4) == [] and agent.tool(5) == []
    (abort,) = agent.tick(62.5)
    assert abort.escalation and "60 s" in abort.message


def test_a_repeated_wind_down_announces_the_same_grace_end_after_a_restart() -> None:
    pack = rules("""
rules:
  - name: loop
    when: run.repeated_tool_call >= 2
    action: wind_down
    repeat: on_change
    terminal_state: loop_detected
    grace: {tool_calls: 3}
    message: "loop ${run.repeated_tool_call}"
""")
    agent = Agent(RuleEngine(pack))
    agent.tool(1, args={"q": 1})
    (first,) = agent.tool(2, args={"q": 1})
    assert first.grace == {"tool_calls": 3, "ends_at_tool_calls": 5}
    agent.engine = RuleEngine(pack)
    agent.engine.restore([FiredRecord.of(first, T0 + 2, 2)])
    (again,) = agent.tool(3, args={"q": 1})
    assert again.message == "loop 3" and again.grace == first.grace


def test_an_escalated_wind_down_without_terminal_state_aborts_as_aborted() -> None:
    agent = Agent(RuleEngine(rules("""
rules:
  - {name: w, when: run.tool_calls >= 1, action: wind_down, grace: {tool_calls: 0},
     message: w}
""")))
    assert [d.terminal_state for d in agent.tool(1)] == [None]
    (abort,) = agent.tool(2)
    assert abort.terminal_state is TerminalState.ABORTED


# -- agents and budgets ---------------------------------------------------------------------------

def test_rules_apply_to_matching_agents_only() -> None:
    engine = RuleEngine(rules("""
rules:
  - {name: explorers, agents: ["explorer-*"], when: "true", action: notify, message: e}
  - {name: all, when: "true", action: notify, message: a}
"""))
    assert [d.rule for d in Agent(engine, agent="explorer-1").tool(1)] == ["explorers", "all"]
    assert [d.rule for d in Agent(engine, agent="writer", key="w").tool(1)] == ["all"]


COUNTDOWN = """
budgets:
  - {agents: ["explorer-*"], max_tool_calls: 4}
  - {agents: ["*"], max_tool_calls: 100}
rules:
  - name: countdown
    when: has(run.budget.remaining_tool_calls) && run.budget.remaining_tool_calls <= 2
    action: wind_down
    repeat: on_change
    message: "${run.budget.remaining_tool_calls} of ${run.budget.max_tool_calls} left"
"""


def test_pack_budgets_per_agent_first_match_wins() -> None:
    engine = RuleEngine(rules(COUNTDOWN))
    assert engine.default_budget("explorer-1") == {"max_tool_calls": 4.0}
    assert engine.default_budget("writer") == {"max_tool_calls": 100.0}
    explorer = Agent(engine, agent="explorer-1")
    assert explorer.tool(1) == []
    assert fired(explorer.tool(2)) == [("countdown", "2 of 4 left")]
    assert fired(explorer.tool(3)) == [("countdown", "1 of 4 left")]
    writer = Agent(engine, agent="writer", key="w")
    assert [writer.tool(i) for i in range(5)] == [[]] * 5


def test_an_announced_budget_beats_the_pack_budget() -> None:
    agent = Agent(RuleEngine(rules(COUNTDOWN)), agent="explorer-1", budget={"max_tool_calls": 6})
    assert [fired(agent.tool(i)) for i in range(1, 6)] == [
        [], [], [], [("countdown", "2 of 6 left")], [("countdown", "1 of 6 left")]]


# -- rule errors ----------------------------------------------------------------------------------

def test_failing_rules_count_as_not_matching_and_are_counted() -> None:
    engine = RuleEngine(rules("""
rules:
  - {name: unguarded, when: run.budget.remaining_tool_calls < 3, action: notify, message: u}
  - {name: fine, when: run.tool_calls >= 2, action: notify, message: f}
"""))
    agent = Agent(engine)
    agent.tool(1)
    assert fired(agent.tool(2)) == [("fine", "f")]
    assert engine.errors == {"unguarded": 2}
    assert "remaining_tool_calls" in engine.last_errors["unguarded"]
    assert engine.drain_errors() == {"unguarded": 2}
    assert not engine.errors


def test_a_failing_placeholder_still_fires_and_counts_an_error() -> None:
    engine = RuleEngine(rules("""
rules:
  - {name: r, when: run.tool_calls >= 1, action: notify,
     message: "max ${run.budget.max_tool_calls}"}
"""))
    assert fired(Agent(engine).tool(1)) == [("r", "max <error>")]
    assert engine.errors == {"r": 1}


def test_the_default_pack_raises_no_rule_errors_without_a_budget() -> None:
    engine = RuleEngine(load_rules([]))
    agent = Agent(engine)
    for i in range(30):
        agent.llm(i * 20, messages=i + 2)
        agent.tool(i * 20 + 1)
        agent.tick(i * 20 + 10)
    agent.end(700)
    assert not engine.errors, engine.last_errors


# -- restart and reload ---------------------------------------------------------------------------

def test_restore_prevents_firing_twice_and_continues_grace() -> None:
    pack = rules(LOOP_PACK + """
  - {name: busy, when: run.tool_calls >= 1, action: notify, message: busy}
""")
    agent = Agent(RuleEngine(pack))
    log: list[FiredRecord] = []
    for at in (1, 2):
        log += [FiredRecord.of(d, T0 + at, agent.run.tool_calls)
                for d in agent.tool(at, args={"q": 1})]
    assert [(r.rule, r.action, r.tool_calls_at) for r in log] == [
        ("busy", Action.NOTIFY, 1), ("loop", Action.WIND_DOWN, 2)]

    agent.engine = RuleEngine(pack)  # a restart: the run comes back from the store, the
    agent.engine.restore(log)        # engine from the fired log
    assert agent.tool(3) == [] and agent.tool(4) == []  # nothing fires twice
    (abort,) = agent.tool(5)  # the grace counts from the restored tool-call count
    assert abort.escalation and "3 more tool calls" in abort.message

    agent.engine = RuleEngine(pack)
    agent.engine.restore([*log, FiredRecord.of(abort, T0 + 5, 5)])
    assert agent.tool(6) == []  # the escalation fired before this restart


@pytest.mark.parametrize("after", ["a longer grace", "no grace", "the rule removed"])
def test_a_restored_grace_is_the_one_its_wind_down_announced(after: str) -> None:
    """After a restart the grace goes on as the wind_down announced it (2 tool calls, 60 s,
    ``loop_detected``), whatever the rule file says by then."""
    agent = Agent(RuleEngine(rules(LOOP_PACK)))
    agent.tool(1, args={"q": 1})
    log = [FiredRecord.of(d, T0 + 2, 2) for d in agent.tool(2, args={"q": 1})]
    assert [r.grace for r in log] == [Grace(tool_calls=2, seconds=60)]
    now = {"a longer grace": LOOP_PACK.replace("tool_calls: 2, seconds: 60",
                                               "tool_calls: 20, seconds: 600"),
           "no grace": LOOP_PACK.replace("    grace: {tool_calls: 2, seconds: 60}\n", ""),
           "the rule removed": "rules: []\n"}[after]
    agent.engine = RuleEngine(rules(now))
    agent.engine.restore(log)
    assert agent.tool(3) == [] and agent.tool(4) == []
    (abort,) = agent.tool(5)
    assert abort.escalation and abort.terminal_state is TerminalState.LOOP_DETECTED
    assert "grace: 2 tool calls / 60 s" in abort.message


def test_a_wind_down_that_announced_no_grace_gets_none_after_a_restart() -> None:
    """A rule given a grace after its wind_down was sent: the run was told of none."""
    pack = LOOP_PACK.replace("    grace: {tool_calls: 2, seconds: 60}\n", "")
    agent = Agent(RuleEngine(rules(pack)))
    agent.tool(1, args={"q": 1})
    log = [FiredRecord.of(d, T0 + 2, 2) for d in agent.tool(2, args={"q": 1})]
    assert [r.grace for r in log] == [Grace()]
    agent.engine = RuleEngine(rules(LOOP_PACK))
    agent.engine.restore(log)
    assert [agent.tool(at) for at in range(3, 8)] == [[]] * 5
    assert agent.tick(100) == []


def test_a_record_stored_without_its_grace_takes_its_rules() -> None:
    agent = Agent(RuleEngine(rules(LOOP_PACK)))
    agent.tool(1, args={"q": 1})
    assert [d.action for d in agent.tool(2, args={"q": 1})] == [Action.WIND_DOWN]
    agent.engine = RuleEngine(rules(LOOP_PACK))
    agent.engine.restore([FiredRecord("run-1", "loop", "loop", Action.WIND_DOWN, T0 + 2, 2)])
    assert agent.tool(3) == [] and agent.tool(4) == []
    (abort,) = agent.tool(5)
    assert abort.escalation and abort.terminal_state is TerminalState.LOOP_DETECTED

def test_replace_keeps_state_of_rules_that_still_exist() -> None:
    first = rules("""
rules:
  - {name: slow, when: run.tool_calls >= 1, for: 60s, action: notify, message: slow}
  - {name: once, when: run.tool_calls >= 1, action: notify, message: once}
  - {name: gone, when: run.tool_calls >= 1, for: 60s, action: notify, message: gone}
""")
    engine = RuleEngine(first)
    agent = Agent(engine)
    assert fired(agent.tool(0)) == [("once", "once")]  # slow and gone are pending
    engine.replace(rules("""
rules:
  - {name: slow, when: run.tool_calls >= 1, for: 60s, action: notify, message: "slow v2"}
  - {name: once, when: run.tool_calls >= 1, action: notify, message: "once v2"}
"""), 0.0)
    assert fired(agent.tick(60)) == [("slow", "slow v2")]  # pending since 0 was kept
    engine.replace(first, 0.0)
    assert agent.tick(61) == []  # `gone` starts pending again; `once` already fired
    assert fired(agent.tick(121)) == [("gone", "gone")]


def test_forget_drops_a_runs_state() -> None:
    engine = RuleEngine(rules("rules: [{name: r, when: 'true', action: notify, message: r}]"))
    agent = Agent(engine)
    assert len(agent.tool(1)) == 1 and agent.tool(2) == []
    engine.forget("run-1")
    assert len(agent.tool(3)) == 1


# -- timed evaluation, ended runs, sessions -------------------------------------------------------

def test_timed_only_evaluates_rules_time_alone_can_make_fire() -> None:
    engine = RuleEngine(rules("""
rules:
  - {name: idle, when: run.idle_seconds > 10.0, action: notify, message: idle}
  - {name: calls, when: run.tool_calls >= 1, action: notify, message: calls}
"""))
    assert engine.timed_rules_exist
    agent = Agent(engine)
    agent.llm(0)
    assert fired(agent.tool(1)) == [("calls", "calls")]
    assert fired(agent.tick(20)) == [("idle", "idle")]
    untimed = RuleEngine(rules("rules: [{name: c, when: run.tool_calls >= 1, action: notify, "
                               "message: c}]"))
    assert not untimed.timed_rules_exist
    other = Agent(untimed)
    other.llm(0)
    assert other.tick(5) == []
    other.tracker.apply([other._record(6, SpanKind.TOOL, tool_name="search")], T0 + 6)
    assert other.tick(6) == []  # not a timed rule: only span batches evaluate it
    assert fired(other.evaluate(7)) == [("c", "c")]


def test_an_ended_run_is_evaluated_once_more() -> None:
    engine = RuleEngine(rules("""
rules:
  - {name: unanswered, when: run.ended && run.tool_calls > 1, action: notify,
     message: "ended after ${run.tool_calls} calls"}
"""))
    agent = Agent(engine)
    agent.tool(1)
    agent.tool(2)
    assert fired(agent.end(3)) == [("unanswered", "ended after 2 calls")]


def test_session_signals() -> None:
    engine = RuleEngine(rules("""
rules:
  - {name: stuck, when: session.zero_progress_streak >= 2, action: abort,
     terminal_state: intervention_required, message: "session ${session.id}"}
  - {name: lone, when: session.id == '' && session.runs == 0, action: notify, message: lone}
"""))
    agent = Agent(engine)
    assert fired(agent.tool(1)) == [("lone", "lone")]
    agent.session = {"id": "s-1", "runs": 3, "zero_progress_streak": 2}
    (decision,) = agent.tool(2)
    assert (decision.message, decision.terminal_state) == (
        "session s-1", TerminalState.INTERVENTION_REQUIRED)


# -- end to end with real spans and the default pack ----------------------------------------------

def test_default_pack_on_real_spans_counts_down_the_announced_budget() -> None:
    otel = SpanMaker({"watchdog.run.id": "real-1", "watchdog.agent.name": "explorer",
                      "watchdog.budget.max_tool_calls": 5})
    engine = RuleEngine(load_rules([]))
    tracker = RunTracker()
    seen: list[tuple[int, str, str]] = []
    with otel.agent(start=T0) as root:
        otel.span("chat", chat_attrs(100, 10), parent=root, start=T0, end=T0 + 1)
        for i in range(5):
            otel.span("execute_tool search",
                      tool_attrs("search", json.dumps({"q": i}), f"{i} hits"), parent=root,
                      start=T0 + 2 + i, end=T0 + 2.5 + i)
            now = T0 + 3 + i
            tracker.apply(records_of(otel.take()), now)
            run = tracker.get("real-1")
            assert run is not None
            for decision in engine.evaluate(run, now):
                seen.append((i + 1, decision.action.value, decision.message))
                if decision.terminal_state is not None:
                    run.force(decision.terminal_state, decision.rule)
    tracker.apply(records_of(otel.take()), T0 + 60)
    assert seen == [
        (2, "wind_down", "[budget: 3 of 5 tool calls left — wrap up soon]"),
        (3, "wind_down", "[budget: 2 of 5 tool calls left — wrap up soon]"),
        (4, "wind_down", "[budget: 1 of 5 tool calls left — finalize now]"),
        (5, "abort", "[budget: all 5 tool calls used — stop and report]"),
    ]
    run = tracker.get("real-1")
    assert run is not None and run.terminal_state is TerminalState.TOOL_LIMIT_REACHED


@pytest.mark.parametrize("timed_only", [False, True])
def test_a_run_whose_rules_all_fired_costs_no_activation(timed_only: bool) -> None:
    engine = RuleEngine(rules("""
rules:
  - {name: a, when: run.tool_calls >= 1, action: notify,
     message: "${run.budget.max_tool_calls}"}
"""))
    agent = Agent(engine)
    agent.tool(1)
    assert engine.errors == {"a": 1}  # the message failed to render, once
    agent.tool(2)
    agent.evaluate(3, timed_only=timed_only)
    assert engine.errors == {"a": 1}  # not rendered again: the rule was skipped


def test_messages_are_bounded_and_bad_session_values_read_as_defaults() -> None:
    long_message = "x" * 5000
    engine = RuleEngine(rules("rules:\n  - {name: long, when: 'session.runs == 0 && "
                              "session.id == \"7\"', action: notify, message: " + long_message
                              + "}\n"))
    agent = Agent(engine)
    agent.session = {"runs": "many", "id": 7}
    (decision,) = agent.tool(1)
    assert len(decision.message) == MAX_MESSAGE_CHARS and decision.message.endswith("x…")


def test_a_decision_at_a_runs_end_carries_the_state_its_rule_pack_budget_gives_it() -> None:
    """A run that ends on its own, its answer given, having spent the rule pack's tool budget
    is ``tool_limit_reached`` (the core's end, after the batch's rules ran); no rule can read
    a terminal state (it is no signal: refused at load), and what a rule decided in that
    batch hands out the run as it ended — the reclassified state, not the one before."""
    from watchdog.core.sessions import SessionBook
    from watchdog.core.step import Core

    with pytest.raises(RulePackError, match="terminal_state"):
        load_text(PACK_HEAD + """
  - name: reads-state
    when: run.terminal_state == "completed"
    action: notify
    message: x
""")
    core = Core(RunTracker(), SessionBook(lambda _id: None), RuleEngine(load_text(
        PACK_HEAD + """
  - name: at-end
    when: run.ended
    action: notify
    message: ended
""")))
    maker = SpanMaker()
    root = maker.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent",
                                         "gen_ai.agent.name": "a"}, start=T0)
    maker.span("chat m", chat_attrs(finish="tool_calls"), parent=root, start=T0, end=T0 + 1)
    for n in (1, 2):
        maker.span("execute_tool t", tool_attrs("t", f'{{"n": {n}}}', "ok"), parent=root,
                   start=T0 + n, end=T0 + n + 0.5)
    maker.span("chat m", chat_attrs(finish="stop"), parent=root, start=T0 + 3, end=T0 + 4)
    root.set_attribute("gen_ai.output.messages", json.dumps([
        {"role": "assistant", "parts": [{"type": "text", "content": "done"}]}]))
    root.end(int((T0 + 5) * NS))
    step = core.apply(records_of(maker.take()), T0 + 6)
    assert [(view.terminal_state, view.terminal_reason) for view in step.finished] == [
        (TerminalState.TOOL_LIMIT_REACHED, "budget")]
    assert [(d.decision.rule, d.run.terminal_state) for d in step.decisions] == [
        ("at-end", TerminalState.TOOL_LIMIT_REACHED)]


PACK_HEAD = """
apiVersion: agent-watchdog/v1
kind: RulePack
name: end
budgets:
  - agents: ["*"]
    max_tool_calls: 2
rules:"""


def test_the_fleets_notes_are_the_messages_cel_renders_each_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Erring agents with a tool failing for the fleet (the default pack's ``tool-outage`` notes
    every run that calls it, the outage's run count moving), the timer between slices: the same
    decisions, in the same order, with the rendered messages kept by what they read as with
    every message rendered by CEL, from a few renders for hundreds of notes."""
    from bench.workload import batches
    from watchdog.core.fleet import Fleet
    from watchdog.core.rules.expr import Template
    from watchdog.core.sessions import SessionBook
    from watchdog.core.spans.decode import parse_protobuf
    from watchdog.core.spans.pipeline import slices_of
    from watchdog.core.step import Core

    bodies = list(batches(300, 512, 8192, workload="rules-firing", seed=5))
    slices = [part.records for body in bodies for part in slices_of(parse_protobuf(body), 32)]
    start = max(record.end_ns for records in slices for record in records) / 1e9
    render = Template.render
    renders = 0

    def counted(self: Template, act: Any) -> Any:
        nonlocal renders
        renders += "fleet." in self.text  # (the timeouts' messages read the time: each new)
        return render(self, act)

    monkeypatch.setattr(Template, "render", counted)

    def decisions() -> list[tuple[str, str, str, str, str]]:
        core = Core(RunTracker(), SessionBook(lambda _id: None), RuleEngine(load_rules([])),
                    Fleet(600.0))
        made = []
        now = start
        for index, records in enumerate(slices):
            step = core.apply(records, now)
            if index % 4 == 3:
                now += 25.0
                core.fleet_tick(now)
                core.evaluate(list(core.tracker.active()), now, step, timed_only=True)
            assert not step.rule_errors
            made += step.decisions
        return [(d.decision.run_key, d.decision.rule, d.decision.action.value,
                 d.decision.message, d.decision.dedup_key) for d in made]

    kept = decisions()
    kept_renders, renders = renders, 0
    monkeypatch.setattr("watchdog.core.rules.engine._values_read", lambda template: None)
    every = decisions()
    notes = [d for d in every if d[1] == "tool-outage"]
    assert len(notes) > 150 and len({d[3] for d in notes}) > 10
    assert renders >= len(notes) > 2 * kept_renders
    assert kept == every
