"""A run that ended on its own before the spans that show how it went came (Codex's tool
arguments, in log events after its end) is classified as its rules would have ended it live
(:meth:`Core._late_rules`), as the budget already is; so is a run whose loop and end come in
one batch (:meth:`Core._rules_at_end`): pure core, no sidecar. The real recordings, in both
orders: ``tests/frameworks/test_model_endpoint_codex.py``, ``test_qwen_code_otel.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.core.handout import Step
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import load_rules
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.sessions import SessionBook
from watchdog.core.spans.record import KeySource, SpanKind, SpanRecord
from watchdog.core.step import Core

T0 = 1_800_000_000.0
NS = 1_000_000_000
KEY = "run-1"


def span(index: int, kind: SpanKind, parent: str | None) -> SpanRecord:
    return SpanRecord(run_key=KEY, key_source=KeySource.WATCHDOG, trace_id="ab" * 16,
                      span_id=f"{index:016x}", parent_span_id=parent, name=f"s{index}",
                      kind=kind, start_ns=int((T0 + index) * NS), end_ns=int((T0 + index) * NS),
                      agent="a")


def ended_then_looped(engine: RuleEngine) -> tuple[Core, Step]:
    """The run's root (no answer) first, then the same tool call 4 times, late."""
    watchdog = Core(RunTracker(run_end_timeout=60.0), SessionBook(lambda _id: None), engine)
    root = span(10, SpanKind.AGENT, None)
    watchdog.apply([root], T0 + 10)
    calls = []
    for index in range(4):
        call = span(index + 1, SpanKind.TOOL, root.span_id)
        call.tool_name, call.args_hash = "shell", 7
        calls.append(call)
    return watchdog, watchdog.apply(calls, T0 + 11)


def test_a_loop_seen_after_its_run_ended_classifies_it_as_the_loop_rule_would_have() -> None:
    watchdog, step = ended_then_looped(RuleEngine(load_rules([], True)))
    run = watchdog.tracker.get(KEY)
    assert run is not None and run.ended and run.tool_calls == 4
    assert (run.terminal_state, run.terminal_reason) == (TerminalState.LOOP_DETECTED,
                                                         "tool-cycle")
    # handed out as a move (runs_reclassified_total, run_reclassified), nothing decided
    assert [(view.key, was) for view, was in step.reclassified] == [(KEY, "no_response")]
    assert not step.decisions and not step.failures


def test_a_rule_that_only_aborts_never_stopped_a_run_that_ended_before_it_could(
        tmp_path: Path) -> None:
    pack = tmp_path / "abort.yaml"
    pack.write_text(
        "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: abort\nrules:\n"
        "  - name: stop-repeats\n    when: \"!run.ended && run.repeated_tool_call >= 4\"\n"
        "    action: abort\n    severity: critical\n    message: stop\n", encoding="utf-8")
    watchdog, _ = ended_then_looped(RuleEngine(load_rules([str(pack)], False)))
    run = watchdog.tracker.get(KEY)
    assert run is not None and run.ended and run.tool_calls == 4
    assert run.terminal_state is TerminalState.NO_RESPONSE
    # nor one whose loop and end came in one batch (looped_and_ended)
    run = looped_and_ended(RuleEngine(load_rules([str(pack)], False)), False).tracker.get(KEY)
    assert run is not None and run.ended and run.tool_calls == 4
    assert run.terminal_state is TerminalState.NO_RESPONSE



NO_RULES = "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: loops\nrules: []\n"
LOOP_RULE = (
    "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: loops\nrules:\n"
    "  - name: repeats\n    when: run.repeated_tool_call >= 4\n    action: wind_down\n"
    "    message: stop\n    terminal_state: loop_detected\n")


@pytest.mark.parametrize(("before", "after", "state"), [
    (NO_RULES, LOOP_RULE, TerminalState.NO_RESPONSE),  # added by the reload
    (LOOP_RULE, LOOP_RULE.replace("stop", "stop now"), TerminalState.NO_RESPONSE),  # changed
    (LOOP_RULE, LOOP_RULE, TerminalState.LOOP_DETECTED),  # kept as it was
], ids=["added", "changed", "kept"])
def test_a_rule_a_reload_brought_after_the_run_ended_never_classifies_it(
        tmp_path: Path, before: str, after: str, state: TerminalState) -> None:
    """A rule loaded after the run ended (or changed since) never read it live: a late span
    that makes it hold leaves the run as it ended; a rule a reload kept as it was classifies
    it as before the reload."""
    pack = tmp_path / "loops.yaml"
    pack.write_text(before, encoding="utf-8")
    engine = RuleEngine(load_rules([str(pack)], False))
    watchdog = Core(RunTracker(run_end_timeout=60.0), SessionBook(lambda _id: None), engine)
    root = span(10, SpanKind.AGENT, None)
    watchdog.apply([root], T0 + 10)  # it ended (no answer) at T0 + 10
    pack.write_text(after, encoding="utf-8")
    engine.replace(load_rules([str(pack)], False), T0 + 10.5)
    calls = []
    for index in range(4):
        call = span(index + 1, SpanKind.TOOL, root.span_id)
        call.tool_name, call.args_hash = "shell", 7
        calls.append(call)
    watchdog.apply(calls, T0 + 11)
    run = watchdog.tracker.get(KEY)
    assert run is not None and run.ended and run.tool_calls == 4
    assert run.terminal_state is state


def looped_and_ended(engine: RuleEngine, per_span: bool, error: bool = False) -> Core:
    """The same tool call 4 times, then the run's root (an error ``error``, else no answer):
    in one batch, or each span in its own."""
    watchdog = Core(RunTracker(run_end_timeout=60.0), SessionBook(lambda _id: None), engine)
    root = span(10, SpanKind.AGENT, None)
    root.error_type = "RuntimeError" if error else None
    records = []
    for index in range(4):
        call = span(index + 1, SpanKind.TOOL, root.span_id)
        call.tool_name, call.args_hash = "shell", 7
        records.append(call)
    records.append(root)
    for part in ([record] for record in records) if per_span else [records]:
        step = watchdog.apply(part, T0 + 11)
        assert not step.failures
    return watchdog


@pytest.mark.parametrize("error", [False, True], ids=["no-answer", "error"])
def test_a_loop_and_its_end_in_one_batch_end_as_when_they_come_span_by_span(
        error: bool) -> None:
    """A loop whose run ends in the batch that shows it (an agent that exports at its exit)
    ends as a span-by-span watch ends it: ``tool-cycle``'s ``loop_detected``, over how its
    spans end it (no answer, an error), and nothing is decided for it (it is over)."""
    states = []
    for per_span in (False, True):
        watchdog = looped_and_ended(RuleEngine(load_rules([], True)), per_span, error)
        run = watchdog.tracker.get(KEY)
        assert run is not None and run.ended and run.tool_calls == 4
        states.append((run.terminal_state, run.terminal_reason))
    assert states == [(TerminalState.LOOP_DETECTED, "tool-cycle")] * 2

