"""Conditions decided without CEL (watchdog.rules.fast) decide exactly as CEL does.

Differential: the same conditions evaluated by the fast path on a RunState and by CEL on that
run's activation, over many runs (every condition of the default pack, and conditions generated
from the whole subset and accepted by the CEL checker); then the engine as a whole, with and
without the fast path, on a workload where the default rules fire on every run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest

from bench.workload import batches
from watchdog.core import Core
from watchdog.ingest.decode import parse_protobuf
from watchdog.ingest.pipeline import slices_of
from watchdog.rules.engine import RuleEngine
from watchdog.rules.expr import ExprError, activation, compile_expr
from watchdog.rules.fast import RUN_FIELDS, compile_fast
from watchdog.rules.pack import load_rules
from watchdog.rules.signals import RUN_SCHEMA, run_activation, session_activation
from watchdog.runs.record import KeySource
from watchdog.runs.run import RunState
from watchdog.runs.tracker import RunTracker
from watchdog.sessions import SessionBook

BOOL_FIELDS = sorted(f for f in RUN_FIELDS if RUN_SCHEMA[f] is bool)
INT_FIELDS = sorted(f for f in RUN_FIELDS if RUN_SCHEMA[f] is int)
# total_tokens and has_final_answer are RunState properties: set what they are made of
SETTABLE = [f for f in INT_FIELDS if f != "total_tokens"]


def random_run(rng: random.Random) -> RunState:
    run = RunState("run-1", KeySource.WATCHDOG, "ab" * 16, 1_700_000_000.0)
    for name in SETTABLE:
        setattr(run, name, rng.choice((0, 1, 2, 3, 4, 5, 6, 10, 100)))
    run.ended = rng.random() < 0.3
    run.explicit_final = rng.random() < 0.3
    return run


def cel_says(source: str, run: RunState) -> bool:
    act = activation(run_activation(run.signals(time.time())), session_activation(None))
    return compile_expr(source, condition=True).matches(act)


def test_the_fields_are_the_runs_own_attributes_with_the_signals_types() -> None:
    run = random_run(random.Random(1))
    signals = run.signals(time.time())
    for name in RUN_FIELDS:
        assert getattr(run, name) == signals[name]
        assert type(getattr(run, name)) is RUN_SCHEMA[name]


def test_every_default_counter_condition_decides_as_cel() -> None:
    rng = random.Random(7)
    conditions = [rule.when for rule in load_rules([]).rules if rule.when.fast is not None]
    # the loop rules of the default pack are all in the subset (budget/time/session rules not)
    assert {"error-loop", "repeated-tool-call", "repeated-tool-result", "tool-cycle"} <= {
        rule.name for rule in load_rules([]).rules if rule.when.fast is not None}
    outcomes = set()
    for _ in range(400):
        run = random_run(rng)
        for expr in conditions:
            assert expr.fast is not None
            fast = expr.fast(run)
            assert fast is cel_says(expr.source, run), expr.source
            outcomes.add(fast)
    assert outcomes == {True, False}


def generated(rng: random.Random, depth: int = 0) -> str:
    """A condition of the subset (bool-typed, so most pass the checker)."""
    roll = rng.random()
    if depth < 3 and roll < 0.35:
        glue = rng.choice((" && ", " || ", "&&", "||"))
        return generated(rng, depth + 1) + glue + generated(rng, depth + 1)
    if depth < 3 and roll < 0.45:
        return "!" + rng.choice(("", " ")) + f"({generated(rng, depth + 1)})"
    if roll < 0.55:
        return rng.choice(("run.ended", "run.has_final_answer", "true", "false",
                           "run.ended == false", "(run.has_final_answer != run.ended)"))
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


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_conditions_of_the_subset_decide_as_cel(seed: int) -> None:
    rng = random.Random(seed * 100)
    for source in checked_conditions(60, seed):
        fast = compile_fast(source)
        assert fast is not None, source
        for _ in range(25):
            run = random_run(rng)
            assert fast(run) is cel_says(source, run), source


@pytest.mark.parametrize("source", [
    "!run.ended && has(run.budget.remaining_tool_calls) && run.budget.remaining_tool_calls <= 3",
    "!run.ended && run.idle_seconds > 300.0 && run.in_flight == 0",
    "run.tool_calls - 1 > 3",
    "run.tool_calls > 0x10",
    "uint(run.tool_calls) > 3u",
    "size(run.tools) > 2",
    "run.tools['search'] > 2",
    "run.last_error.contains('auth')",
    'run.agent == "planner"',
    "session.zero_progress_streak >= 2",
    "run.tool_calls > 2 ? true : false",
    "run.tool_calls in [1, 2]",
    "[run].exists(r, r.tool_calls > 3)",
])
def test_conditions_outside_the_subset_are_left_to_cel(source: str) -> None:
    compile_expr(source, condition=True)  # valid CEL...
    assert compile_fast(source) is None  # ...that only CEL decides
    assert compile_expr(source, condition=True).fast is None


def test_the_engine_decides_the_same_with_and_without_the_fast_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Misbehaving agents (the default rules fire on every run): the same directives, the same
    rule errors, in the same order."""
    bodies = list(batches(300, 512, 8192, workload="rules-firing", seed=11))
    slices = [part.records for body in bodies for part in slices_of(parse_protobuf(body), 32)]

    def decisions(fast_rules: int) -> list[tuple[str, str, str, str]]:
        ruleset = load_rules([])
        assert sum(rule.when.fast is not None for rule in ruleset.rules) == fast_rules
        core = Core(RunTracker(), SessionBook(lambda _id: None), RuleEngine(ruleset))
        made = []
        now = 1_800_000_000.0
        for records in slices:
            step = core.apply(records, now)
            made += [(d.decision.run_key, d.decision.rule, d.decision.action.value,
                      d.decision.message) for d in step.decisions]
            assert not step.rule_errors
        return made

    fast = decisions(fast_rules=4)
    monkeypatch.setattr("watchdog.rules.expr.compile_fast", lambda source: None)
    slow = decisions(fast_rules=0)
    assert len(fast) > 500
    assert fast == slow
