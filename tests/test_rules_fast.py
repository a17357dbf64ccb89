"""Conditions decided without CEL (watchdog.core.rules.fast) decide exactly as CEL does.

Differential: the same conditions evaluated by the fast path on a RunState and by CEL on that
run's activation, over many runs (every condition of the default pack, and generated conditions
accepted by the CEL checker that mix what the fast path knows with what only CEL knows); then
the engine as a whole, with and without the fast path, on a workload where the default rules
fire on every run, with the timer's evaluations as time passes.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from bench.workload import batches
from watchdog.core.rules.decision import Decided
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.expr import (
    EvalError,
    ExprError,
    activation,
    compile_expr,
    compile_template,
)
from watchdog.core.rules.fast import RUN_FIELDS, VALUE_FIELDS, compile_fast
from watchdog.core.rules.pack import load_rules
from watchdog.core.rules.signals import RUN_SCHEMA, run_activation, session_activation
from watchdog.core.runs.run import RunState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.sessions import SessionBook
from watchdog.core.spans.decode import parse_protobuf
from watchdog.core.spans.pipeline import slices_of
from watchdog.core.spans.record import KeySource
from watchdog.core.step import Core

INT_FIELDS = sorted(f for f in RUN_FIELDS if RUN_SCHEMA[f] is int)
DOUBLE_FIELDS = sorted(f for f in RUN_FIELDS if RUN_SCHEMA[f] is float)
# total_tokens and has_final_answer are RunState properties: set what they are made of
SETTABLE = [f for f in INT_FIELDS if f != "total_tokens"]
NOW = 1_700_000_500.0


def random_run(rng: random.Random) -> RunState:
    run = RunState("run-1", KeySource.WATCHDOG, "ab" * 16, 1_700_000_000.0)
    for name in SETTABLE:
        setattr(run, name, rng.choice((0, 1, 2, 3, 4, 5, 6, 10, 100)))
    run.ended = rng.random() < 0.3
    run.explicit_final = rng.random() < 0.3
    run.first_start_ns = rng.choice((0, int((NOW - rng.choice((1, 100, 1000))) * 1e9)))
    run.last_progress = NOW - rng.choice((0.0, 1.0, 299.5, 400.0))
    run.in_flight_since = rng.choice((None, NOW - 1.0, NOW - 500.0))
    if rng.random() < 0.5:
        run.budget = {"max_tool_calls": float(rng.choice((3, 5, 20)))}
    if rng.random() < 0.3:
        run.budget["max_cost_usd"] = rng.choice((0.5, 2.0))
    run.cost_usd = rng.choice((0.0, 0.4, 1.0, 3.0))
    tools = rng.sample(("search", "fetch", "shell"), rng.randint(0, 2))
    run.tools.update(dict.fromkeys(tools, 1))
    return run


# What the engine hands the fast path besides the run: the rule pack's budget for the run's
# agent, the session mapping (None: the run has none), the CEL fleet (None: no tool failing).
Context = tuple[dict[str, float], "dict[str, object] | None", "dict[str, object] | None"]
NOTHING: Context = ({}, None, None)


def random_context(rng: random.Random) -> Context:
    budget = rng.choice(({}, {}, {"max_tool_calls": 4.0}, {"max_cost_usd": 1.0},
                         {"max_iterations": 3.0}, {"max_tokens": 200.0}))
    session: dict[str, object] | None = None
    if rng.random() < 0.5:
        session = {"id": "s-1"}
        for key in ("runs", "zero_progress_streak", "run_checkpoints", "agent_cycle_repeats"):
            if rng.random() < 0.6:  # an int, or what the store may give back: a float, a str
                session[key] = rng.choice((0, 1, 2, 3, 5, 2.0, "3", None))
        for key in ("cycle_orchestrator", "zero_progress"):
            if rng.random() < 0.6:
                session[key] = rng.choice((True, False, 1, None))
    failing = rng.choice(({}, {}, {"fetch": {"runs": 3, "errors": 5, "since": "now",
                                              "error_type": "Timeout"}}))
    fleet = rng.choice((None, {"failing_tools": failing}))
    return budget, session, fleet


def cel_says(source: str, run: RunState, context: Context = NOTHING) -> bool | str:
    """CEL's answer, or "error" (the engine counts a rule error and does not fire)."""
    budget, session, fleet = context
    act = activation(run_activation(run.signals(NOW, budget)), session_activation(session),
                     fleet)
    try:
        return compile_expr(source, condition=True).matches(act)
    except EvalError:
        return "error"


def test_the_fields_read_as_the_signals_read_them() -> None:
    rng = random.Random(1)
    for _ in range(50):
        run = random_run(rng)
        signals = run_activation(run.signals(NOW))
        for name, code in RUN_FIELDS.items():
            value = eval(code, {"float": float}, {"run": run, "now": NOW})
            assert value == signals[name] and type(value) is type(signals[name]), name
            assert type(value) is RUN_SCHEMA[name], name


def test_every_default_condition_decides_as_cel_when_it_decides() -> None:
    rng = random.Random(7)
    rules = load_rules([]).rules
    assert all(rule.when.fast is not None for rule in rules)  # each starts with !run.ended
    answers: dict[str, set[bool | None]] = {rule.name: set() for rule in rules}
    for _ in range(400):
        run = random_run(rng)
        context = random_context(rng)
        for rule in rules:
            assert rule.when.fast is not None
            fast = rule.when.fast(run, NOW, *context)
            if fast is not None:
                assert fast is cel_says(rule.when.source, run, context), rule.when.source
            answers[rule.name].add(fast)
    # the loop, time, tool-budget and fleet rules are decided entirely without CEL; the cost
    # and token rules that divide and the session rules (a session value of another type)
    # where their guards say so
    known = {"error-loop", "repeated-tool-call", "repeated-tool-result", "tool-cycle",
             "idle-timeout", "total-timeout", "budget-countdown", "budget-last-call",
             "budget-exhausted", "budget-cost-exhausted", "budget-iterations-countdown",
             "budget-iterations-last-call",
             "budget-tokens-exhausted", "tool-outage"}
    assert {name for name, seen in answers.items() if None not in seen} == known
    assert all(seen == {True, False} for name, seen in answers.items() if name in known)
    assert all({False, None} <= seen for name, seen in answers.items() if name not in known)
    assert answers["zero-progress"] == answers["agent-ping-pong"] == {True, False, None}
    assert answers["zero-progress-note"] == {True, False, None}


def test_every_default_condition_is_decided_without_cel_for_a_plain_run() -> None:
    """A run with no budget and no session while no tool fails: every default rule is
    answered by the fast path (the guards: has(run.budget.*), session.*, fleet.*), so the
    engine builds no CEL activation for it until one fires."""
    rng = random.Random(3)
    rules = load_rules([]).rules
    for _ in range(200):
        run = random_run(rng)
        run.budget = {}
        for context in (NOTHING, ({}, None, {"failing_tools": {}})):
            for rule in rules:
                assert rule.when.fast is not None
                fast = rule.when.fast(run, NOW, *context)
                assert fast is cel_says(rule.when.source, run, context), rule.when.source


UNKNOWN_ATOMS = (  # valid CEL the fast path does not know: CEL alone decides these parts
    "run.budget.max_cost_usd / 4.0 > 0.1",
    "size(session.agent_cycle) > 1", "run.tools.exists_one(t, t in fleet.failing_tools)",
    "size(run.tools) > 1", "run.tool_calls - 1 > 3", "run.tool_calls * 2 == 6",
    "run.tool_calls in [1, 2]", "[run].exists(r, r.tool_calls > 3 && r.ended)",
    "(run.tool_calls > 2 ? run.ended : !run.ended)", "uint(run.tool_calls) > 3u",
    "double(run.errors) >= 2.5", "run.tool_calls > 0x03",
)
GUARD_ATOMS = (  # known at some evaluations: from the budget, the session, the fleet
    "has(run.budget.remaining_tool_calls)", "has(run.budget.max_cost_usd)",
    "run.budget.remaining_tool_calls <= 3", "run.budget.max_tool_calls > 4",
    "run.budget.max_seconds > 1.5", "run.budget.remaining_cost_usd == 0.0",
    "!has(run.budget.remaining_cost_usd)", "session.runs > 1", "2 <= session.zero_progress_streak",
    "session.cycle_orchestrator", "session.run_checkpoints == session.agent_cycle_repeats",
    "run.tools.exists(t, t in fleet.failing_tools)",
    "run.tools.all(t, !(t in fleet.failing_tools))",
    "run.tools.exists(t, t in fleet.failing_tools && run.tool_calls > 2)",
)


def generated(rng: random.Random, depth: int = 0) -> str:
    """A bool condition mixing known parts (counters, flags, literals) and unknown ones."""
    roll = rng.random()
    if depth < 3 and roll < 0.35:
        glue = rng.choice((" && ", " || ", "&&", "||"))
        return generated(rng, depth + 1) + glue + generated(rng, depth + 1)
    if depth < 3 and roll < 0.45:
        return "!" + rng.choice(("", " ")) + f"({generated(rng, depth + 1)})"
    if roll < 0.55:
        return rng.choice(("run.ended", "run.has_final_answer", "true", "false",
                           "!run.ended", "run.ended == false",
                           "(run.has_final_answer != run.ended)"))
    if roll < 0.62:
        return rng.choice(UNKNOWN_ATOMS)
    if roll < 0.7:
        return rng.choice(GUARD_ATOMS)
    if rng.random() < 0.3:
        field = "run." + rng.choice(DOUBLE_FIELDS)
        literal = rng.choice(("0.0", "1.0", "299.5", "300.0", "-1.5", "1e3", "1.5e2", ".5"))
    else:
        field = "run." + rng.choice(INT_FIELDS)
        literal = str(rng.choice((-1, 0, 1, 2, 3, 4, 5, 7, 99)))
    left, right = (field, literal) if rng.random() < 0.7 else (literal, field)
    return f"{left} {rng.choice(('==', '!=', '<', '<=', '>', '>='))} {right}"


def checked_conditions(count: int, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    made = 0
    while made < count:
        source = generated(rng)
        try:
            compile_expr(source, condition=True)
        except ExprError:
            continue
        made += 1
        yield source


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_generated_conditions_decide_as_cel_whenever_they_decide(seed: int) -> None:
    """A definite answer is CEL's answer (never where CEL would fail: that is a rule error
    the engine must count); None sends the rule to CEL."""
    rng = random.Random(seed * 100)
    answers: dict[object, int] = {True: 0, False: 0, None: 0}
    for source in checked_conditions(80, seed):
        fast = compile_fast(source)
        for _ in range(25):
            run = random_run(rng)
            context = random_context(rng)
            answer = None if fast is None else fast(run, NOW, *context)
            if answer is not None:
                assert answer is cel_says(source, run, context), source
            answers[answer] += 1
    assert min(answers.values()) > 100, answers  # each kind of answer, many times


@pytest.mark.parametrize("source", ["(run.tool_calls > 2) && !run.ended",
                                    "!(run.ended || (run.errors >= 5 && run.tool_calls > 1))",
                                    "((run.ended)) || (run.tool_calls > 2 && (run.errors < 1))"])
def test_brackets_are_decided_without_cel(source: str) -> None:
    """Bracketed parts are taken apart, not left to CEL: on every run the fast path answers,
    and as CEL does."""
    fast = compile_fast(source)
    assert fast is not None
    rng = random.Random(7)
    for _ in range(200):
        run = random_run(rng)
        answer = fast(run, NOW)
        assert answer is not None, source
        assert answer == cel_says(source, run), source


@pytest.mark.parametrize("source", [*UNKNOWN_ATOMS, 'run.agent == "planner" && run.ended',
                                    "run.ended && run.tool_calls > 2 ? true : false",
                                    "session.zero_progress_streak >= 2 ? true : false",
                                    "run.tools.exists(run, run.size() > 2)"])
def test_what_only_cel_can_decide_gets_no_fast_path(source: str) -> None:
    compile_expr(source, condition=True)  # valid CEL...
    assert compile_fast(source) is None  # ...that only CEL decides
    assert compile_expr(source, condition=True).fast is None


@pytest.mark.parametrize(("source", "expected"), [
    ("!" * 3001 + "(run.errors > 1)", False),  # CEL folds the chain; fast.py recursed on it
    ("!" * 3000 + "(run.errors > 1)", True),
    (" || ".join(f"session.runs > {i}" for i in range(3000)) + " || run.errors > 1", True),
    ("!" * 250 + "(session.runs > 1 || run.errors > 1)", True),  # 250 nested _not(...) calls
])
def test_conditions_nested_deeper_than_python_compiles_load_and_cel_decides_them(
        source: str, expected: bool) -> None:
    """A condition CEL accepts whose fast code Python cannot compile (nested too deep) has no
    fast path: it loads, and CEL decides it (its load raised RecursionError: a traceback at
    `watchdog rules check`, at start, and a failed reload the gauge did not tell)."""
    expr = compile_expr(source, condition=True)
    assert expr.fast is None
    run = RunState("run-1", KeySource.WATCHDOG, "ab" * 16, 1_700_000_000.0)
    run.errors = 2
    assert cel_says(source, run) is expected


def test_plain_placeholders_render_as_cel_renders_them() -> None:
    """``${run.<field>}`` of every scalar signal, and the default pack's messages: rendered
    from the RunState exactly as CEL renders them on the run's activation (a value of another
    type than the signal's is left to CEL)."""
    rng = random.Random(5)
    templates = [compile_template(f"{name}=${{run.{name}}}.") for name in VALUE_FIELDS]
    rules = load_rules([]).rules
    templates += [rule.message for rule in rules]
    fast_messages = {rule.name for rule in rules if rule.message.render_fast(
        random_run(rng), NOW, {}) is not None}
    assert {"error-loop", "repeated-tool-call", "repeated-tool-result",
            "tool-cycle"} <= fast_messages
    assert "tool-outage" not in fast_messages and "budget-countdown" not in fast_messages
    rendered = 0
    for _ in range(200):
        run = random_run(rng)
        run.last_error = rng.choice((None, "", "TimeoutError: took 30 s", "ünïcode ${x}"))
        run.finish_reason = rng.choice((None, "stop", "tool_calls"))
        budget = rng.choice(({}, {"max_tool_calls": 4.0}))
        act = activation(run_activation(run.signals(NOW, budget)), session_activation(None))
        for template in templates:
            fast = template.render_fast(run, NOW, budget)
            if fast is not None:
                assert (fast, []) == template.render(act), template.text
                rendered += 1
    assert rendered > 200 * len(VALUE_FIELDS)


def test_the_fleet_rule_is_decided_without_cel() -> None:
    """``run.tools.exists(t, t in fleet.failing_tools)``: whether one of the run's tools is
    failing, with or without failing tools, as CEL says."""
    source = "!run.ended && run.tools.exists(t, t in fleet.failing_tools)"
    fast = compile_fast(source)
    assert fast is not None
    outage = {"runs": 3, "errors": 5, "since": "now", "error_type": "Timeout"}
    run = RunState("run-1", KeySource.WATCHDOG, "ab" * 16, NOW)
    for tools in ({}, {"fetch": 2}, {"search": 1}, {"search": 1, "fetch": 1}):
        run.tools = dict(tools)
        for fleet in (None, {"failing_tools": {}}, {"failing_tools": {"fetch": outage}}):
            answer = fast(run, NOW, {}, None, fleet)
            assert answer is cel_says(source, run, ({}, None, fleet)), (tools, fleet)
            assert answer is ("fetch" in tools and fleet is not None
                              and "fetch" in fleet["failing_tools"])


def test_the_engine_decides_the_same_with_and_without_the_fast_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Misbehaving agents (the default rules fire on every run) and the timer's evaluations
    as time passes (idle and total timeouts fire): the same directives, in the same order, and
    no rule errors."""
    bodies = list(batches(300, 512, 8192, workload="rules-firing", seed=11))
    slices = [part.records for body in bodies for part in slices_of(parse_protobuf(body), 32)]
    start = max(record.end_ns for records in slices for record in records) / 1e9

    def decisions(fast_rules: int) -> list[tuple[str, str, str, str]]:
        ruleset = load_rules([])
        assert sum(rule.when.fast is not None for rule in ruleset.rules) == fast_rules
        core = Core(RunTracker(), SessionBook(lambda _id: None), RuleEngine(ruleset))
        made: list[Decided] = []
        now = start
        for index, records in enumerate(slices):
            step = core.apply(records, now)
            if index % 4 == 3:  # the timer, 25 s later each time (an aborted run hears no more)
                now += 25.0
                core.evaluate(list(core.tracker.active()), now, step, timed_only=True)
            assert not step.rule_errors
            made += step.decisions
        return [(d.decision.run_key, d.decision.rule, d.decision.action.value,
                 d.decision.message) for d in made]

    fast = decisions(fast_rules=21)
    monkeypatch.setattr("watchdog.core.rules.expr.compile_fast", lambda source: None)
    monkeypatch.setattr("watchdog.core.rules.expr.compile_fast_value", lambda source: None)
    slow = decisions(fast_rules=0)
    assert len(fast) > 500
    assert {"idle-timeout", "total-timeout", "tool-cycle", "error-loop"} <= {d[1] for d in fast}
    assert fast == slow


RISING_CASES = [
    ("!run.ended && run.idle_seconds > 300.0 && run.in_flight == 0", True),
    ("!run.ended && run.elapsed_seconds > 900.0", True),
    ("120.0 <= run.in_flight_seconds && run.iterations > 1", True),
    ("run.iterations >= 3", True),  # (no time in it: constant while the run stands still)
    ("run.elapsed_seconds < 900.0", False),
    ("run.elapsed_seconds > 60.0 || run.iterations > 2", False),
    ("!(run.elapsed_seconds > 60.0)", False),
    ("run.elapsed_seconds > 60.0 && run.elapsed_seconds < 600.0", False),
    ("run.idle_seconds > run.elapsed_seconds", False),
    ("has(run.budget.remaining_seconds) && run.budget.remaining_seconds < 30.0", False),
    ("run.elapsed_seconds * 2.0 > 60.0", False),
    ("run.elapsed_seconds > 60.0 ? true : false", False),
]


@pytest.mark.parametrize(("source", "rising"), RISING_CASES)
def test_a_condition_known_to_rise_with_time_only_turns_true_as_time_goes_on(
        source: str, rising: bool) -> None:
    """rises_with_time: which conditions turn from false to true at most once as time goes on
    for a run that stands still (the proof the model endpoint's relay relies on to send a
    continuing request on ahead); CEL, at second after second, agrees for those it says so of,
    and each one it refuses has a run for which it turns back or is not known to rise."""
    from watchdog.core.rules.engine import _activation
    from watchdog.core.rules.fast import rises_with_time

    assert rises_with_time(source) is rising
    if not rising:
        return
    expression = compile_expr(source, condition=True)
    rng = random.Random(source)
    for _ in range(20):
        run = RunState("r", KeySource.WATCHDOG, "t", 0.0)
        run.first_start_ns = rng.randrange(0, 10**12)
        run.last_progress = rng.uniform(0, 1000)
        run.in_flight = rng.choice((0, 1))
        run.in_flight_since = rng.choice((None, rng.uniform(0, 1000)))
        run.iterations = rng.randrange(4)
        seen = [expression.matches(_activation(run, float(now), {}, None, None))
                for now in range(1000, 3000, 7)]
        assert seen == sorted(seen), (source, seen)  # False... then True...
