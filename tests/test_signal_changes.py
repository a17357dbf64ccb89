"""``changed_signals`` must report every signal ``RunState.apply`` can move: the rule engine
skips rules that read none of the changed signals, so a gap here would be a missed directive."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from watchdog.core.runs.changes import changed_signals, snapshot
from watchdog.core.runs.run import RunState
from watchdog.core.spans.conventions import stable_hash
from watchdog.core.spans.record import KeySource, SpanKind, SpanRecord

TIME_SIGNALS = {"elapsed_seconds", "idle_seconds", "in_flight_seconds"}
_ids = itertools.count(1)


def record(kind: SpanKind, **fields: Any) -> SpanRecord:
    n = next(_ids)
    base: dict[str, Any] = dict(run_key="r", key_source=KeySource.WATCHDOG, trace_id="ab" * 16,
                                span_id=f"{n:016x}", parent_span_id="ff" * 8, name=kind.value,
                                kind=kind, start_ns=n * 1000, end_ns=n * 1000 + 500)
    base.update(fields)
    return SpanRecord(**base)


def variants() -> list[SpanRecord]:
    out = []
    for error in (False, True):
        err = dict(error=True, error_type="RuntimeError", error_message="disk /tmp/x full",
                   error_signature=stable_hash("RuntimeError:disk")) if error else {}
        out += [
            record(SpanKind.LLM, input_tokens=10, output_tokens=3, messages=7,
                   finish_reason="stop", final_answer=True, agent="late-name", **err),
            record(SpanKind.LLM, finish_reason="tool_call", budget={"max_tokens": 99.0}, **err),
            record(SpanKind.TOOL, tool_name="search", args_hash=1, result_hash=2,
                   args_brief="{}", result_brief="x", session="s-1", **err),
            record(SpanKind.TOOL, tool_name="search", args_hash=3, result_hash=2,
                   budget={"max_tool_calls": 5.0}, **err),
            record(SpanKind.OTHER, tool_name="final_result", final_answer=True,
                   final_output="42", **err),
            record(SpanKind.OTHER, **err),
        ]
    return out


def comparable(signals: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in signals.items() if k not in TIME_SIGNALS}


@pytest.mark.parametrize("rec", variants(), ids=lambda r: f"{r.kind.value}-{r.error}")
@pytest.mark.parametrize("budget", [False, True])
def test_every_moved_signal_is_reported(rec: SpanRecord, budget: bool) -> None:
    run = RunState("r", KeySource.WATCHDOG, "ab" * 16, 100.0)
    for warmup in (record(SpanKind.TOOL, tool_name="search", args_hash=1, result_hash=9),
                   record(SpanKind.LLM, input_tokens=1, finish_reason="tool_call")):
        run.apply(warmup, 100.0)
    if budget:
        run.budget["max_tool_calls"] = 10.0
        run.budget["max_tokens"] = 1000.0
    before_signals = comparable(run.signals(101.0))
    before = snapshot(run)
    run.apply(rec, 101.0)
    after = comparable(run.signals(101.0))
    moved = {k for k in after if after[k] != before_signals[k]}
    assert moved <= changed_signals(before, run, has_budget=budget or bool(rec.budget))


def test_an_ending_span_reports_ended() -> None:
    run = RunState("r", KeySource.WATCHDOG, "ab" * 16, 100.0)
    before = snapshot(run)
    run.apply(record(SpanKind.AGENT, parent_span_id=None, final_answer=True), 101.0)
    run.end(101.0)
    assert {"ended", "has_final_answer"} <= changed_signals(before, run, has_budget=False)


def test_a_new_distinct_tool_call_moves_no_loop_signal() -> None:
    run = RunState("r", KeySource.WATCHDOG, "ab" * 16, 100.0)
    run.apply(record(SpanKind.TOOL, tool_name="read", args_hash=1, result_hash=2), 100.0)
    before = snapshot(run)
    run.apply(record(SpanKind.TOOL, tool_name="read", args_hash=3, result_hash=4), 100.0)
    assert changed_signals(before, run, has_budget=False) == {"tool_calls", "tools"}


def test_rules_read_only_the_signals_they_name() -> None:
    from watchdog.core.rules.expr import signals_read

    assert signals_read("run.tool_calls > 3 && has(run.budget.max_tool_calls)") == {
        "tool_calls", "budget"}
    assert signals_read('session.zero_progress && run.agent == "run.errors"') == {
        "session", "agent", "errors"}  # a name in a string counts: over-reading is safe
    assert signals_read("[run].exists(r, r.errors > 1)") is None  # run as a whole: everything


def test_the_engine_skips_rules_whose_signals_did_not_change() -> None:
    from watchdog.core.rules.engine import RuleEngine
    from watchdog.core.rules.pack import load_rules

    engine = RuleEngine(load_rules([]))
    run = RunState("r", KeySource.WATCHDOG, "ab" * 16, 100.0)
    for _ in range(4):
        run.apply(record(SpanKind.TOOL, tool_name="search", args_hash=7, result_hash=8), 100.0)
    assert engine.evaluate(run, 100.0, changed={"iterations", "input_tokens"}) == []
    fired = engine.evaluate(run, 100.0, changed={"repeated_tool_call", "cycle_repeats"})
    assert [d.rule for d in fired] == ["tool-cycle"]
