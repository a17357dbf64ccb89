"""What the core hands out about runs is frozen: a step's views stay as they were when their
runs change afterwards, and one view per run and step. (That delivery code imports no live run
is an import rule: tests/test_architecture.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.workload import batches
from watchdog.core.directives.model import REPORTING_ACTIONS, Directive, prompt_for
from watchdog.core.directives.prompt import (
    PromptFacts,
    decided_facts,
    facts_of,
    prompt_text,
    report_prompt,
)
from watchdog.core.handout import Step
from watchdog.core.rules.decision import Action, Decided, Decision, Severity
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import load_rules
from watchdog.core.runs.steps import StepLog
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.runs.view import RunView, run_detail
from watchdog.core.sessions import SessionBook
from watchdog.core.spans.decode import parse_protobuf
from watchdog.core.spans.pipeline import slices_of
from watchdog.core.spans.record import KeySource, SpanRecord
from watchdog.core.step import Core

ROOT = Path(__file__).resolve().parent.parent
def misbehaving_slices(seed: int = 3) -> list[list[SpanRecord]]:
    """Runs the default rules fire on, in the slices the receivers apply."""
    bodies = batches(40, 256, 2048, workload="rules-firing", seed=seed)
    return [part.records for body in bodies for part in slices_of(parse_protobuf(body), 32)
            if part.records]


def new_core() -> Core:
    return Core(RunTracker(), SessionBook(lambda _id: None), RuleEngine(load_rules([])))


def frozen_copy(view: RunView) -> dict[str, object]:
    """Everything a view holds, as plain values (its mappings copied)."""
    return {**view._asdict(), "signals": run_detail(view)["signals"]}


def test_a_steps_views_do_not_change_when_their_runs_change_afterwards() -> None:
    core = new_core()
    slices = misbehaving_slices()
    start = max(record.end_ns for records in slices for record in records) / 1e9
    taken_at = 0  # the first batch that decided on a run (a batch's views are of those)
    while not (first := core.apply(slices[taken_at], start)).touched:
        taken_at += 1
    assert taken_at < len(slices) // 2
    taken = {key: frozen_copy(view) for key, view in first.touched.items()}
    for index, records in enumerate(slices[taken_at + 1:]):
        core.apply(records, start + index / 10)
    later = core.evaluate_keys(core.active_keys(), start + 3600, timed_only=True)
    expired = Step()
    core.expire(start + 7200, expired)
    assert later.decisions and expired.finished  # the runs went on, were decided on, ended
    changed = 0
    for key, view in first.touched.items():
        assert frozen_copy(view) == taken[key]
        now = core.view(key, start + 7200)
        if now is not None and now.signals != view.signals:
            changed += 1
    assert changed > len(first.touched) // 2  # (the live runs did change)


def test_a_view_cannot_be_changed() -> None:
    core = new_core()
    views: list[RunView] = []
    for records in misbehaving_slices():
        now = max(record.end_ns for record in records) / 1e9
        views += core.apply(records, now).touched.values()
    view = next(view for view in views if view.signals["tools"])
    with pytest.raises(AttributeError):
        view.key = "another"  # type: ignore[misc]
    with pytest.raises(TypeError):
        view.signals["tool_calls"] = 0  # type: ignore[index]
    with pytest.raises(TypeError):
        view.signals["tools"]["search"] = 0
    with pytest.raises(TypeError):
        view.budget["max_tool_calls"] = 0  # type: ignore[index]


def test_a_step_takes_one_view_per_run_for_what_it_touched_decided_and_finished() -> None:
    core = new_core()
    slices = misbehaving_slices()
    now = max(record.end_ns for records in slices for record in records) / 1e9
    decided = finished = 0
    for records in slices:
        step = core.apply(records, now)
        # of a batch: the runs it decided on or finished (no one reads the others' views)
        assert set(step.touched) == ({made.decision.run_key for made in step.decisions}
                                     | {view.key for view in step.finished})
        for made in step.decisions:
            assert made.run is step.touched[made.decision.run_key]
            assert made.budget is made.run.budget and made.now == made.run.at == now
            decided += 1
        for view in step.finished:
            assert view.ended and view.terminal_state is not None
            assert view is step.touched[view.key]
            finished += 1
    assert decided and finished


@pytest.mark.integration  # a fresh interpreter: what importing the prompt loads
def test_the_report_prompt_loads_without_the_run_module() -> None:
    code = ("import sys, watchdog.core.directives.prompt, watchdog.core.runs.view; "
            "print('watchdog.core.runs.run' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"



def test_a_run_whose_view_cannot_be_taken_is_reported_and_the_others_go_on() -> None:
    core = new_core()
    slices = misbehaving_slices()
    now = max(record.end_ns for records in slices for record in records) / 1e9
    for records in slices[:10]:
        core.apply(records, now)
    damaged, *healthy = core.active_keys()
    run = core.tracker.get(damaged)
    assert run is not None and healthy
    run.first_start_ns = "not a number"  # type: ignore[assignment]  # (a stored row's, say)
    step = Step()
    core.expire(now + 7200, step)
    assert [(failure.stage, failure.run_key) for failure in step.failures] == [("view", damaged)]
    assert {view.key for view in step.finished} == set(healthy)
    assert set(step.touched) == set(healthy) and set(step.dirty) == {damaged, *healthy}


def test_a_directives_report_prompt_is_made_when_read_and_the_same_from_the_store() -> None:
    """The core hands a decision its run's last steps frozen; the directive's prompt is made
    from them when first read — the text the decision's lines make — and a directive stored
    (its facts, not its text) and read back makes the same one."""
    core = new_core()
    slices = misbehaving_slices()
    now = max(record.end_ns for records in slices for record in records) / 1e9
    made: list[tuple[Decided, Directive]] = []
    for records in slices:
        for index, decided in enumerate(core.apply(records, now).decisions):
            if decided.decision.action.value not in REPORTING_ACTIONS:
                continue
            assert isinstance(decided.steps, StepLog)
            made.append((decided, Directive.from_decision(
                decided.decision, decided.run, now, None, 1, index + 1,
                prompt_facts=decided_facts(decided))))
        if len(made) >= 20:
            break
    assert made
    for decided, directive in made:
        record = json.loads(json.dumps(directive.to_record()))
        assert record["report_prompt"] is None and record["prompt_facts"]
        lines = decided.steps.lines() if isinstance(decided.steps, StepLog) else ()
        assert lines and all(line.startswith("+") for line in lines)
        expected = report_prompt(decided.run, lines, directive.message,
                                 action=directive.action, budget=directive.budget,
                                 earlier_steps=decided.earlier_steps)
        assert Directive.from_record(record).report_prompt == expected
        assert directive.report_prompt == expected == prompt_for(decided, directive)
        assert directive.to_json()["report_prompt"] == expected
        kept = json.loads(json.dumps(directive.to_record()))  # once made, the text is kept
        assert kept["report_prompt"] == expected and kept["prompt_facts"] is None


def test_a_prompt_whose_facts_cannot_be_made_into_text_is_the_bare_request() -> None:
    run = RunTracker().open("r1", KeySource.WATCHDOG, "ab" * 16, 1000.0)[0].view(1000.0)
    facts = decided_facts(Decided(Decision("r1", "loop", Action.ABORT, Severity.CRITICAL,
                                           "looping", None, "loop"), run, (), 1000.0))
    directive = Directive.from_decision(
        Decision("r1", "loop", Action.ABORT, Severity.CRITICAL, "looping", None, "loop"),
        run, 1000.0, None, 1, 1, prompt_facts=facts._replace(steps=(None,)))  # type: ignore[arg-type]
    text = directive.report_prompt
    assert text is not None and text.startswith("[agent-watchdog: system instruction")
    assert "looping" in text and "not available right now" in text


def test_a_report_prompt_counts_the_runs_dollars_against_its_cost_budget() -> None:
    """What the run's priced calls cost is in the prompt's counters, against a dollar budget
    when there is one, and survives the store (rows stored without it read as no cost)."""
    run = RunTracker().open("r1", KeySource.WATCHDOG, "ab" * 16, 1000.0)[0].view(1000.0)
    facts = facts_of(run)._replace(cost_usd=0.00042)
    text = prompt_text(facts, "over budget", Action.WIND_DOWN.value, {"max_cost_usd": 0.001})
    assert "cost USD 0.00042 of 0.001 (0.00058 left)" in text
    assert "cost USD" not in prompt_text(facts_of(run), "x", Action.WIND_DOWN.value, {})
    stored = json.loads(json.dumps(facts.to_list()))
    assert PromptFacts.from_list(stored) == facts
    assert PromptFacts.from_list(stored[:12]).cost_usd == 0.0
