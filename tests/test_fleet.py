"""The fleet (DESIGN §13): a tool failing for many runs becomes ``fleet.failing_tools`` in
rules, and the default rule ``tool-outage`` tells every active run that has used it — once per
run per outage — until the tool succeeds again or the window passes without a failure.

Real spans (the OTel SDK, OTLP encoding, the ingest pipeline) through the pure core with the
shipped default pack; time is an argument."""

from __future__ import annotations

import re

import pytest
from agent_watchdog_client.directive import Directive as ClientDirective
from agent_watchdog_client.directive import DirectiveBoard
from agent_watchdog_client.steer import Steering
from opentelemetry.trace import Span

from tests.spans import T0, SpanMaker, chat_attrs, records_of, tool_attrs
from watchdog.core.directives.model import Directive
from watchdog.core.fleet import FLEET_SLICE, MAX_TOOLS, Fleet
from watchdog.core.handout import Step
from watchdog.core.model.steer import Board, Counts, decide
from watchdog.core.rules.decision import Decided
from watchdog.core.rules.engine import FiredRecord, RuleEngine
from watchdog.core.rules.expr import ExprError, compile_expr
from watchdog.core.rules.pack import load_rules, load_text
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.sessions import SessionBook
from watchdog.core.spans.record import AGENT, KEY_WATCHDOG, LLM, TOOL, SpanRecord
from watchdog.core.step import Core

NOTE = re.compile(r"^\[fleet: search has failed \((\w+)\) for (\d+) runs since "
                  r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) — don't retry it")


class Agents:
    """Runs of one agent, each a trace whose root stays open (active runs)."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.maker = SpanMaker()
        self.roots: list[Span] = []

    def start(self, count: int) -> None:
        for _ in range(count):
            self.roots.append(self.maker.open("invoke_agent demo",
                                              {"gen_ai.operation.name": "invoke_agent",
                                               "gen_ai.agent.name": "demo"}, start=T0))

    def tool(self, index: int, at: float, error: BaseException | None = None,
             tool: str = "search") -> Step:
        """Run ``index`` calls ``tool`` at ``at`` (a model call first, asking for it)."""
        root = self.roots[index]
        self.maker.span("chat m", chat_attrs(finish="tool_calls"), parent=root, start=at - 1,
                        end=at - 0.5)
        self.maker.span(f"execute_tool {tool}", tool_attrs(tool, '{"q": "x"}',
                                                          None if error else "ok"),
                        parent=root, start=at - 0.4, end=at, exception=error)
        step = self.core.apply(records_of(self.maker.take()), at)
        told = self.core.fleet_tick(at)  # the timer's next turn tells the outages that moved
        step.decisions.extend(told.decisions)
        step.outages.update(told.outages)
        step.rule_errors.update(told.rule_errors)
        return step

    def key(self, index: int) -> str:
        return f"trace:{self.roots[index].get_span_context().trace_id:032x}"


def core(window: float = 300.0) -> Core:
    return Core(RunTracker(), SessionBook(lambda _id: None), RuleEngine(load_rules([])),
                Fleet(window))


def told(step: Step) -> dict[str, str]:
    return {d.run.key: d.decision.message for d in step.decisions
            if d.decision.rule == "tool-outage" and d.decision.message}


def withdrawn(step: Step) -> set[str]:
    """The runs whose outage note ``step`` withdraws (a notify with an empty message)."""
    return {d.run.key for d in step.decisions
            if d.decision.rule == "tool-outage" and not d.decision.message}


def test_every_run_that_used_the_tool_is_told_once_when_the_third_run_sees_it_fail() -> None:
    watchdog = core()
    agents = Agents(watchdog)
    agents.start(5)
    agents.tool(3, T0 + 1)  # run 3 used search (it worked then); run 4 never uses it
    steps = [agents.tool(i, T0 + 10 + i, TimeoutError("upstream timed out")) for i in range(3)]
    assert told(steps[0]) == told(steps[1]) == {}
    assert steps[0].outages == steps[1].outages == {}
    # the success of run 3 came before the failures: they count
    notes = told(steps[2])
    assert sorted(notes) == sorted(agents.key(i) for i in range(4))
    for message in notes.values():
        match = NOTE.match(message)
        assert match is not None, message
        assert match.groups() == ("TimeoutError", "3", "2027-01-15T08:00:10Z")
    assert steps[2].outages == {"search": True}
    assert watchdog.fleet.failing()["search"] == {
        "runs": 3, "errors": 3, "since": "2027-01-15T08:00:10Z", "error_type": "TimeoutError"}
    # more failures of the same outage tell no one again
    again = agents.tool(3, T0 + 20, TimeoutError("upstream timed out"))
    assert told(again) == {} and again.outages == {}
    assert watchdog.fleet.failing()["search"]["runs"] == 4
    # a run that first uses the tool during the outage is told then
    agents.start(1)
    assert set(told(agents.tool(5, T0 + 21, TimeoutError("x")))) == {agents.key(5)}


def test_a_success_ends_the_outage_and_the_next_outage_tells_the_runs_again() -> None:
    watchdog = core()
    agents = Agents(watchdog)
    agents.start(3)
    for i in range(3):
        last = agents.tool(i, T0 + 10 + i, ConnectionError("refused"))
    assert len(told(last)) == 3
    recovered = agents.tool(0, T0 + 30)
    assert recovered.outages == {"search": False} and told(recovered) == {}
    assert withdrawn(recovered) == {agents.key(i) for i in range(3)}
    assert watchdog.fleet.failing() == {}
    # failures before the success no longer count: two new ones are not an outage
    assert told(agents.tool(1, T0 + 31, ConnectionError("refused"))) == {}
    assert told(agents.tool(2, T0 + 32, ConnectionError("refused"))) == {}
    assert watchdog.fleet.failing() == {}
    third = agents.tool(0, T0 + 33, ConnectionError("refused"))
    assert sorted(told(third)) == sorted(agents.key(i) for i in range(3))
    assert NOTE.match(next(iter(told(third).values()))).group(3) == "2027-01-15T08:00:31Z"


def test_different_error_types_are_not_one_outage_and_the_window_forgets() -> None:
    watchdog = core(window=60.0)
    agents = Agents(watchdog)
    agents.start(4)
    agents.tool(0, T0 + 1, TimeoutError("t"))
    agents.tool(1, T0 + 2, ConnectionError("c"))
    assert told(agents.tool(2, T0 + 3, ValueError("v"))) == {}
    # one run failing three times is one run
    for at in (4, 5, 6):
        assert told(agents.tool(3, T0 + at, TimeoutError("t"))) == {}
    # two more runs, but the first TimeoutError is out of the window by now
    assert told(agents.tool(1, T0 + 62, TimeoutError("t"))) == {}
    step = agents.tool(2, T0 + 63, TimeoutError("t"))
    assert len(told(step)) == 4 and step.outages == {"search": True}
    assert watchdog.fleet.failing()["search"]["since"] == "2027-01-15T08:00:04Z"
    # the window passes with no failure: the timer ends the outage
    assert watchdog.fleet_tick(T0 + 100).outages == {}
    ended = watchdog.fleet_tick(T0 + 124)
    assert ended.outages == {"search": False} and watchdog.fleet.failing() == {}


def test_the_fleet_is_bounded_and_refuses_bad_settings() -> None:
    fleet = Fleet(60.0)
    fleet.observe([(f"tool-{i}", f"run-{j}", "Boom") for i in range(MAX_TOOLS + 50)
                   for j in range(3)], T0)
    changed = fleet.advance(T0)
    assert len(fleet.failing()) == MAX_TOOLS
    assert len(changed) == MAX_TOOLS + 50  # the ones forgotten ended (so their gauge drops)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="fleet window"):
            Fleet(bad)


def test_rules_read_fleet_failing_tools_and_wrong_fields_are_refused_at_load() -> None:
    expr = compile_expr('"search" in fleet.failing_tools && '
                        'fleet.failing_tools["search"].runs >= 5', condition=True)
    assert "fleet" in (expr.reads or ())
    with pytest.raises(ExprError, match=r"unknown field 'rnus' in fleet.failing_tools\[\*\] "
                                        r"\(did you mean 'runs'\?\)"):
        compile_expr('fleet.failing_tools["search"].rnus > 1')
    pack = load_text("""
apiVersion: agent-watchdog/v1
kind: RulePack
name: own
rules:
  - name: many-failing
    when: "size(fleet.failing_tools) >= 2"
    action: notify
    message: "${size(fleet.failing_tools)} tools are down"
""")
    assert pack.get("many-failing") is not None


def test_while_no_tool_fails_rules_reading_fleet_wait_for_the_fleet_to_change() -> None:
    """A tool call changes ``run.tools`` on every span; a rule that also reads ``fleet`` is not
    evaluated for it while nothing fails (no CEL per tool call), only when an outage begins or
    ends (and for a run seen for the first time). The rule below fails whenever it is
    evaluated, which counts a rule error: the count says when it was."""
    pack = load_text("""
apiVersion: agent-watchdog/v1
kind: RulePack
name: own
rules:
  - name: probe
    when: 'run.tool_calls > 0 && fleet.failing_tools["nothing"].runs > 0'
    action: notify
    message: m
""")
    watchdog = Core(RunTracker(), SessionBook(lambda _id: None), RuleEngine(pack), Fleet())
    agents = Agents(watchdog)
    agents.start(3)
    first = agents.tool(0, T0 + 1)
    assert first.rule_errors == {"probe": 1}  # a new run: every rule
    assert agents.tool(0, T0 + 2).rule_errors == {}  # quiet: not evaluated
    agents.tool(1, T0 + 3, TimeoutError("t"))
    agents.tool(2, T0 + 4, TimeoutError("t"))
    begins = agents.tool(0, T0 + 5, TimeoutError("t"))  # (a success of run 0 came first)
    assert begins.outages == {"search": True}
    assert begins.rule_errors["probe"] >= 3  # each run that used search, at the outage
    assert agents.tool(0, T0 + 6, TimeoutError("t")).rule_errors == {"probe": 1}  # not quiet


def test_an_outage_for_ten_thousand_runs_is_told_a_bounded_slice_a_tick() -> None:
    """10,000 active runs used search; it starts failing for three (told at once): each turn
    of the timer then tells at most FLEET_SLICE of the others (0.1-0.4 s a turn measured, not
    3-4 s in one), every run once, in the order they came; a run that ended while it
    waited is not told."""
    watchdog = core()
    count = 10_000
    records = []
    for index in range(count):
        key, start = f"run-{index}", int((T0 + 1) * 1e9) + index
        records += [SpanRecord(key, KEY_WATCHDOG, f"{index:032x}", f"{index:015x}1", "a",
                               "chat m", LLM, start, start + 10, agent="demo"),
                    SpanRecord(key, KEY_WATCHDOG, f"{index:032x}", f"{index:015x}2", "a",
                               "execute_tool search", TOOL, start + 20, start + 30,
                               agent="demo", tool_name="search")]
    watchdog.apply(records, T0 + 2)
    assert told(watchdog.fleet_tick(T0 + 2)) == {}
    failures = [SpanRecord(f"run-{index}", KEY_WATCHDOG, f"{index:032x}", f"{index:015x}3",
                           "a", "execute_tool search", TOOL, int((T0 + 10) * 1e9),
                           int((T0 + 11) * 1e9), agent="demo", tool_name="search", error=True,
                           error_type="TimeoutError") for index in range(3)]
    seen = list(told(watchdog.apply(failures, T0 + 11)))  # the three that saw it fail: at once
    assert seen == ["run-0", "run-1", "run-2"]
    ticks = 0
    while (ticks == 0 or len(watchdog.to_tell)) and ticks < 100:
        ticks += 1
        step = watchdog.fleet_tick(T0 + 11 + ticks)
        notes = told(step)
        assert 0 < len(notes) <= FLEET_SLICE
        seen += notes
        if ticks == 1:
            assert step.outages == {"search": True}
            # a run that ends while it waits is not told
            watchdog.apply([SpanRecord(f"run-{count - 1}", KEY_WATCHDOG, f"{count - 1:032x}",
                                       "a", None, "invoke_agent demo", AGENT,
                                       int((T0 + 1) * 1e9), int((T0 + 12) * 1e9),
                                       agent="demo")], T0 + 12)
    assert ticks == count // FLEET_SLICE  # (each turn takes FLEET_SLICE of the 10,000)
    assert seen == [f"run-{index}" for index in range(count - 1)]
    assert len(watchdog.to_tell) == 0 and told(watchdog.fleet_tick(T0 + 200)) == {}


def instructions(decided: list[Decided]) -> tuple[str, str]:
    """What a run's next model request would carry after ``decided`` (its directives in order),
    as the model endpoint steers it and as the client SDK does."""
    endpoint, client = Board(), DirectiveBoard()
    for seq, one in enumerate(decided, 1):
        directive = Directive.from_decision(one.decision, one.run, one.now, None, seq, seq)
        endpoint.post(directive)
        client.post(ClientDirective.from_json(directive.to_json()))
    turn = decide(Counts(used=1, handed=1, budget={}), endpoint, "", has_tools=True)
    return turn.text, Steering("r", {}).compose(client, 1).instructions


def test_the_tools_next_success_withdraws_the_outage_note_from_the_runs_instructions() -> None:
    watchdog = core()
    agents = Agents(watchdog)
    agents.start(3)
    decided: dict[str, list[Decided]] = {agents.key(i): [] for i in range(3)}
    for step in [agents.tool(i, T0 + 10 + i, ConnectionError("refused")) for i in range(3)]:
        for one in step.decisions:
            decided[one.run.key].append(one)
    for key in decided:
        endpoint, client = instructions(decided[key])
        assert NOTE.match(endpoint) and NOTE.match(client)
    recovered = agents.tool(0, T0 + 30)
    assert recovered.outages == {"search": False}
    for one in recovered.decisions:
        decided[one.run.key].append(one)
    for key in decided:  # every run told of the outage hears it is over: no note left
        assert instructions(decided[key]) == ("", "")
    # the next outage tells them again
    third = [agents.tool(i, T0 + 40 + i, TimeoutError("x")) for i in range(3)][-1]
    for one in third.decisions:
        decided[one.run.key].append(one)
    for key in decided:
        endpoint, client = instructions(decided[key])
        assert "(TimeoutError)" in endpoint and "(TimeoutError)" in client


def test_a_restart_after_the_withdrawal_tells_the_runs_at_the_next_outage() -> None:
    """What fired is restored from its records (the fired-rule log): a note withdrawn before
    the restart does not count as told, so the next outage tells the runs again."""
    watchdog = core()
    agents = Agents(watchdog)
    agents.start(3)
    records = []
    steps = [agents.tool(i, T0 + 10 + i, ConnectionError("refused")) for i in range(3)]
    steps.append(agents.tool(0, T0 + 30))
    assert withdrawn(steps[-1]) == {agents.key(i) for i in range(3)}
    for step in steps:
        records += [FiredRecord.of(one.decision, one.now, 0) for one in step.decisions]
    restarted = RuleEngine(load_rules([]))
    restarted.restore(records)
    watchdog.engine = restarted
    third = [agents.tool(i, T0 + 40 + i, TimeoutError("x")) for i in range(3)][-1]
    assert sorted(told(third)) == sorted(agents.key(i) for i in range(3))


def test_a_note_of_two_failing_tools_reads_the_same_whatever_order_the_runs_used_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tools failing for the fleet: the ``tool-outage`` note of every run that used both
    names them in one order, whichever it called first (the order CEL iterates a map in follows
    the order its keys were put in, and a run's ``tools`` come in the order the run first
    called them), each note rendered by CEL (no note kept by the values it read)."""
    monkeypatch.setattr("watchdog.core.rules.engine._values_read", lambda template: None)
    watchdog = core()
    agents = Agents(watchdog)
    agents.start(5)
    for index, tools in enumerate((("search", "fetch"), ("fetch", "search"))):
        for offset, tool in enumerate(tools):
            agents.tool(index, T0 + 1 + offset, tool=tool)
    # both outages begin before the timer's next turn: it tells the runs of both at once
    for index in (2, 3, 4):
        for tool in ("search", "fetch"):
            agents.maker.span("chat m", chat_attrs(finish="tool_calls"), parent=agents.roots[index],
                              start=T0 + 9, end=T0 + 9.5)
            agents.maker.span(f"execute_tool {tool}", tool_attrs(tool, '{"q": "x"}'),
                              parent=agents.roots[index], start=T0 + 9.6, end=T0 + 10,
                              exception=TimeoutError("upstream timed out"))
            watchdog.apply(records_of(agents.maker.take()), T0 + 10)
    notes = told(watchdog.fleet_tick(T0 + 10))
    assert {agents.key(0), agents.key(1)} <= set(notes), notes
    assert len(set(notes.values())) == 1, notes
    (note,) = set(notes.values())
    assert "fetch has failed" in note and "search has failed" in note, note
