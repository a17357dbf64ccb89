"""One signal catalogue (watchdog.core.runs.catalogue): the docs' table, the CEL declarations, the
activation, the change detection and the fast path are all made from it, so a signal added to
it appears in every one of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.core.rules.expr import ExprError, checker, compile_expr
from watchdog.core.rules.fast import RUN_FIELDS, compile_fast, fast_fields
from watchdog.core.rules.signals import (
    RUN_SCHEMA,
    SESSION_SCHEMA,
    TIME_DEPENDENT,
    run_schema,
    time_dependent,
)
from watchdog.core.runs.catalogue import RUN_SIGNALS, Signal, markdown_table, reader
from watchdog.core.runs.changes import ChangeDetector, changed_signals, snapshot
from watchdog.core.runs.fields import MAX_DISTINCT_TOOLS
from watchdog.core.runs.run import RunState
from watchdog.core.spans.record import KeySource, SpanKind, SpanRecord

DOCS = Path(__file__).resolve().parent.parent / "docs" / "rules.md"
NAMES = [signal.name for signal in RUN_SIGNALS]
NOW = 1_700_000_100.0
# a signal that is not in the catalogue: spans folded into the run so far
SPANS_SEEN = Signal("spans_seen", int, "run.spans", "spans folded in so far", ("run.spans",))
WAITING = Signal("waiting_seconds", float, "float(now - run.last_seen)",
                 "since the run was last heard from", timed=True)


def span(n: int, kind: SpanKind = SpanKind.TOOL) -> SpanRecord:
    end = int((NOW - 100 + n) * 1e9)
    return SpanRecord(run_key="r", key_source=KeySource.WATCHDOG, trace_id="ab" * 16,
                      span_id=f"{n:016x}", parent_span_id="ff" * 8, name="call", kind=kind,
                      start_ns=end - 1000, end_ns=end, tool_name="search", args_hash=n)


def a_run(spans: int) -> RunState:
    run = RunState("r", KeySource.WATCHDOG, "ab" * 16, NOW - 100)
    for n in range(spans):
        run.apply(span(n + 1), NOW - 100 + n)
    return run


def test_the_docs_table_is_the_catalogues() -> None:
    table = markdown_table()
    assert table in DOCS.read_text(), (
        "docs/rules.md's signal table differs from the catalogue; paste this one:\n" + table)
    assert f"{MAX_DISTINCT_TOOLS} names per run" in table


def test_every_signal_is_read_declared_documented_and_watched() -> None:
    signals = a_run(3).signals(NOW)
    assert list(signals) == NAMES == list(RUN_SCHEMA)
    table = markdown_table()
    for signal in RUN_SIGNALS:
        name = signal.name
        # declared for CEL: the checker accepts the field, whatever its type
        assert compile_expr(f"[run.{name}].size() == 1", condition=True).reads == {name}
        assert f"`run.{name}" in table
        if signal.type in (int, float, bool):
            assert RUN_FIELDS[name] == signal.read
            assert compile_fast(f"run.{name} == run.{name}") is not None
        # a signal that can change is compared or re-evaluated on the timer (id never changes)
        assert signal.moves_with or signal.timed or name == "id", name
    assert TIME_DEPENDENT["run"] == {"elapsed_seconds", "idle_seconds", "in_flight_seconds"}
    assert set(RUN_FIELDS) <= set(NAMES)


def test_a_new_entry_appears_everywhere() -> None:
    catalogue = (*RUN_SIGNALS, SPANS_SEEN, WAITING)
    run = a_run(2)
    # the activation (RunState.signals is this reader over RUN_SIGNALS)
    values = reader(catalogue)(run, NOW, None)
    assert values["spans_seen"] == 2 and values["waiting_seconds"] == pytest.approx(99.0)
    assert {k: v for k, v in values.items() if k in NAMES} == run.signals(NOW)
    # the change detection
    detector = ChangeDetector(catalogue)
    before = detector.snapshot(run)
    run.apply(span(3), NOW)
    assert detector.changed(before, run, has_budget=False) == {
        "spans_seen", "tool_calls", "tools", "idle_seconds"}  # (a span is progress)
    # the CEL declarations, and which rules the timer evaluates
    schemas = {"run": run_schema(catalogue), "session": SESSION_SCHEMA}
    checked = checker(schemas).compile("run.spans_seen > 2 && run.waiting_seconds > 1.0")
    assert checked.return_type().name() == "BOOL"
    with pytest.raises(ExprError, match="unknown field 'spans_seen'"):
        compile_expr("run.spans_seen > 2")  # not in the catalogue the sidecar uses
    assert time_dependent(catalogue)["run"] == TIME_DEPENDENT["run"] | {"waiting_seconds"}
    # the fast path
    fast = compile_fast("!run.ended && run.spans_seen >= 3", fast_fields(catalogue))
    assert fast is not None and fast(run, NOW) is True and fast(a_run(1), NOW) is False
    assert compile_fast("run.spans_seen >= 3") is None  # unknown to RUN_SIGNALS' fast path
    # the docs' table
    assert markdown_table(catalogue).endswith(
        "| `run.spans_seen` | spans folded in so far |\n"
        "| `run.waiting_seconds` | since the run was last heard from |\n")


def test_the_runs_change_detection_is_the_catalogues() -> None:
    run = a_run(2)
    before = snapshot(run)
    assert before == ChangeDetector(RUN_SIGNALS).snapshot(run)
    run.apply(span(2), NOW)  # the same call again
    assert changed_signals(before, run, has_budget=False) == {
        "tool_calls", "tools", "repeated_tool_call", "cycle_repeats", "idle_seconds"}
    before = snapshot(run)
    run.apply(span(4), NOW)
    assert "budget" in changed_signals(before, run, has_budget=True)  # remaining_* follow usage
