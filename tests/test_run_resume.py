"""A run taken as abandoned, or ended at an answer it goes on from, whose agent acts again
through the model endpoint (DESIGN §12) is active again (:meth:`Core._resume`): pure core, no
sidecar."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.core import step as core_step
from watchdog.core.bounds import MAX_STOP_ANSWERS, MAX_STOP_NOTE_CHARS
from watchdog.core.handout import Step
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import load_rules
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.sessions import SessionBook
from watchdog.core.spans.record import ENDPOINT_SCOPE, KeySource, SpanKind, SpanRecord
from watchdog.core.step import Core

T0 = 1_800_000_000.0
NS = 1_000_000_000


def core() -> Core:
    return Core(RunTracker(run_end_timeout=60.0), SessionBook(lambda _id: None),
                RuleEngine(load_rules([], True)))


def model_call(key: str, at: float, answer: bool = False) -> SpanRecord:
    record = SpanRecord(run_key=key, key_source=KeySource.WATCHDOG, trace_id="ab" * 16,
                        span_id=f"{int(at):016x}", parent_span_id=None, name="chat m",
                        kind=SpanKind.LLM, start_ns=int(at * NS), end_ns=int(at * NS),
                        agent="a", session=None, loose=True, scope=ENDPOINT_SCOPE)
    record.requested_tools = not answer
    if answer:
        record.final_answer, record.final_output = True, "done"
    return record


def abandoned(watchdog: Core, key: str) -> None:
    watchdog.open_run(key, KeySource.WATCHDOG, "ab" * 16, T0, "a", None, None)
    watchdog.model_records([model_call(key, T0)], T0)
    finished = watchdog.tracker.expire(T0 + 61)
    assert [run.key for run in finished] == [key]
    assert finished[0].terminal_state is TerminalState.ABANDONED


def test_the_next_request_of_an_abandoned_run_takes_it_back() -> None:
    watchdog = core()
    abandoned(watchdog, "model:1")
    view, step = watchdog.open_run("model:1", KeySource.WATCHDOG, "ab" * 16, T0 + 70, "a",
                                   None, None)
    assert step.resumed == {"model:1": ("abandoned", "run_end_timeout")}
    assert not view.ended and view.terminal_state is None
    assert [run.key for run in watchdog.tracker.active()] == ["model:1"]
    step = watchdog.model_records([model_call("model:1", T0 + 71, answer=True)], T0 + 71)
    run = watchdog.tracker.get("model:1")
    assert run is not None and run.ended and run.iterations == 2
    assert run.terminal_state is TerminalState.COMPLETED  # as it ended, once
    assert [finished.key for finished in step.finished] == ["model:1"]


def test_a_response_that_outlasted_the_timeout_takes_its_run_back() -> None:
    watchdog = core()
    abandoned(watchdog, "model:2")
    step = watchdog.model_records([model_call("model:2", T0 + 70)], T0 + 70)
    assert step.resumed == {"model:2": ("abandoned", "run_end_timeout")}
    run = watchdog.tracker.get("model:2")
    assert run is not None and not run.ended and run.iterations == 2


def test_a_run_ended_at_an_answer_it_goes_on_from_is_taken_back() -> None:
    """The answer was to a request aside (a summary the agent asked for): the agent's next
    request of the run, which answers calls the run handed over, takes it back, and it ends at
    its own answer; a request that answers none of them does not."""
    watchdog = core()
    watchdog.open_run("model:5", KeySource.WATCHDOG, "ab" * 16, T0, "a", None, None)
    watchdog.model_records([model_call("model:5", T0)], T0)
    watchdog.model_records([model_call("model:5", T0 + 1, answer=True)], T0 + 1)  # the aside's
    run = watchdog.tracker.get("model:5")
    assert run is not None and run.terminal_state is TerminalState.COMPLETED
    _view, step = watchdog.open_run("model:5", KeySource.WATCHDOG, "ab" * 16, T0 + 2, "a",
                                    None, None)  # (a request that answers none of its calls)
    assert step.resumed == {} and run.ended
    view, step = watchdog.open_run("model:5", KeySource.WATCHDOG, "ab" * 16, T0 + 2, "a",
                                   None, None, going_on=True)
    assert step.resumed == {"model:5": ("completed", "answer")}
    assert not view.ended and view.terminal_state is None
    watchdog.model_records([model_call("model:5", T0 + 3)], T0 + 3)  # it asks for tools
    assert not run.ended
    step = watchdog.model_records([model_call("model:5", T0 + 4, answer=True)], T0 + 4)
    assert run.ended and run.iterations == 4 and run.terminal_state is TerminalState.COMPLETED
    assert [finished.key for finished in step.finished] == ["model:5"]


def test_a_run_that_ended_otherwise_or_is_its_spans_to_end_is_not_taken_back() -> None:
    watchdog = core()
    watchdog.open_run("model:3", KeySource.WATCHDOG, "ab" * 16, T0, "a", None, None)
    watchdog.model_records([model_call("model:3", T0)], T0)
    run = watchdog.tracker.get("model:3")
    assert run is not None
    run.force(TerminalState.ABORTED, "stop")
    watchdog.tracker.end("model:3", T0 + 1)  # stopped: the endpoint answered an abort
    assert run.terminal_state is TerminalState.ABORTED
    _view, step = watchdog.open_run("model:3", KeySource.WATCHDOG, "ab" * 16, T0 + 70, "a",
                                    None, None, going_on=True)
    assert step.resumed == {} and run.terminal_state is TerminalState.ABORTED
    abandoned(watchdog, "model:4")  # the client SDK's run: its spans and heartbeats tell
    run = watchdog.tracker.get("model:4")
    assert run is not None
    run.framed = True
    _view, step = watchdog.open_run("model:4", KeySource.WATCHDOG, "ab" * 16, T0 + 70, "a",
                                    None, None)
    assert step.resumed == {} and run.terminal_state is TerminalState.ABANDONED


WOUND_DOWN = """apiVersion: agent-watchdog/v1
kind: RulePack
name: resumed
rules:
  - name: wrap-up
    when: run.iterations >= 1
    action: wind_down
    message: wrap up now
    grace: {tool_calls: 1}
"""


def tool_call(key: str, at: float) -> SpanRecord:
    return SpanRecord(run_key=key, key_source=KeySource.WATCHDOG, trace_id="ab" * 16,
                      span_id=f"{int(at * 10):016x}", parent_span_id=None,
                      name="execute_tool search", kind=SpanKind.TOOL, start_ns=int(at * NS),
                      end_ns=int(at * NS), agent="a", tool_name="search", loose=True,
                      scope=ENDPOINT_SCOPE)


def test_a_run_taken_back_keeps_what_its_rules_decided(tmp_path: Path) -> None:
    """What fired for a run stays fired when its agent takes it back: its ``once`` rule does not
    fire again, and the grace its wind_down announced goes on from where it was announced
    (an abort when the agent goes past it), not from the request that took the run back."""
    pack = tmp_path / "pack.yaml"
    pack.write_text(WOUND_DOWN)
    watchdog = Core(RunTracker(run_end_timeout=60.0), SessionBook(lambda _id: None),
                    RuleEngine(load_rules([str(pack)], False)))
    key = "model:6"
    decided: list[tuple[str, str]] = []

    def note(step: Step) -> None:
        decided.extend((d.decision.rule, d.decision.action.value) for d in step.decisions)

    note(watchdog.open_run(key, KeySource.WATCHDOG, "ab" * 16, T0, "a", None, None)[1])
    note(watchdog.model_records([model_call(key, T0)], T0))  # wrap-up fires: 0 tool calls
    note(watchdog.model_records([tool_call(key, T0 + 0.5)], T0 + 0.5))  # one: the grace
    note(watchdog.model_records([model_call(key, T0 + 1, answer=True)], T0 + 1))  # the aside
    assert decided == [("wrap-up", "wind_down")]
    assert watchdog.stuck_counts() == {}  # (ended)
    run = watchdog.tracker.get(key)
    assert run is not None and run.terminal_state is TerminalState.COMPLETED
    _view, step = watchdog.open_run(key, KeySource.WATCHDOG, "ab" * 16, T0 + 2, "a", None,
                                    None, going_on=True)
    note(step)
    assert step.resumed == {key: ("completed", "answer")}
    assert watchdog.stuck_counts() == {("a", "wrap-up"): 1}  # (active again, wound down)
    note(watchdog.model_records([model_call(key, T0 + 3)], T0 + 3))
    assert decided == [("wrap-up", "wind_down")]  # (once: not again)
    note(watchdog.model_records([tool_call(key, T0 + 3.5)], T0 + 3.5))  # past its grace
    assert decided == [("wrap-up", "wind_down"), ("wrap-up", "abort")]


def test_a_rule_that_fired_at_a_late_span_keeps_what_fired_before(tmp_path: Path) -> None:
    """A late span of the ended run makes another rule fire for it: a run taken back after
    that still keeps what fired before it ended."""
    pack = tmp_path / "pack.yaml"
    pack.write_text(WOUND_DOWN + "  - name: a-tool\n    when: run.tool_calls >= 1\n"
                                 "    action: notify\n    message: a tool ran\n")
    watchdog = Core(RunTracker(run_end_timeout=60.0), SessionBook(lambda _id: None),
                    RuleEngine(load_rules([str(pack)], False)))
    key = "model:7"
    decided: list[str] = []

    def note(step: Step) -> None:
        decided.extend(d.decision.rule for d in step.decisions)

    note(watchdog.open_run(key, KeySource.WATCHDOG, "ab" * 16, T0, "a", None, None)[1])
    note(watchdog.model_records([model_call(key, T0)], T0))
    note(watchdog.model_records([model_call(key, T0 + 1, answer=True)], T0 + 1))
    note(watchdog.model_records([tool_call(key, T0 + 0.7)], T0 + 1.5))  # late, once ended
    assert decided == ["wrap-up", "a-tool"]
    note(watchdog.open_run(key, KeySource.WATCHDOG, "ab" * 16, T0 + 2, "a", None, None,
                           going_on=True)[1])
    note(watchdog.model_records([model_call(key, T0 + 3)], T0 + 3))
    assert decided == ["wrap-up", "a-tool"]


def test_a_model_endpoint_stop_is_kept_with_its_run_bounded_and_restored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What goes on from the endpoint's stop answer is kept with the run: at most
    ``MAX_STOP_ANSWERS`` of it, the note cut to ``MAX_STOP_NOTE_CHARS``, in its snapshot, and
    found again by any of it after a restore; the lookup across runs holds at most
    ``MAX_STOPS_KEPT``, the least recent out."""
    monkeypatch.setattr(core_step, "MAX_STOPS_KEPT", MAX_STOP_ANSWERS)
    watchdog = core()
    for key in ("model:a", "model:b"):
        watchdog.open_run(key, KeySource.WATCHDOG, "ab" * 16, T0, "a", None, None)
    many = [f"digest-{n}" for n in range(MAX_STOP_ANSWERS + 4)]
    assert watchdog.model_stop_answered("model:a", "N" * 10_000, many, T0) is not None
    assert watchdog.model_stop_answered("model:a", "N" * 10_000, many, T0) is None  # (known)
    key, note, answers = watchdog.stop_of(None, ["digest-0"]) or ("", "", ())
    assert (key, len(note), answers) == ("model:a", MAX_STOP_NOTE_CHARS,
                                         tuple(many[:MAX_STOP_ANSWERS]))
    assert watchdog.stop_of("model:a") == (key, note, answers)  # (by its run)
    assert watchdog.stop_of(None, [many[-1]]) is None  # (past the run's bound: not kept)
    watchdog.model_stop_answered("model:b", "stopped", ["resp_b"], T0)
    # the lookup across runs is bounded: the least recent of model:a's went out
    assert watchdog.stop_of(None, ["digest-0"]) is None
    assert watchdog.stop_of(None, ["resp_b"]) == ("model:b", "stopped", ("resp_b",))
    # restored from the run's snapshot, as after a restart
    row = watchdog.tracker.get("model:a")
    assert row is not None
    again = core()
    again.restore([row.to_dict()], [], lambda key: None)
    assert again.stop_of(None, ["digest-0"]) == ("model:a", note, answers)


def test_a_run_whose_budget_tool_came_after_its_end_is_at_its_packs_budget(
        tmp_path: Path) -> None:
    """A run that ended at its answer before the span of a tool call that spent its rule
    pack's budget came (an exporter's batch, after the endpoint's answer) is classified again
    as at its end: ``tool_limit_reached`` (budget), as a run that announced that budget is."""
    pack = tmp_path / "pack.yaml"
    pack.write_text("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: late\nbudgets:\n"
                    "  - agents: [a]\n    max_tool_calls: 1\n")
    watchdog = Core(RunTracker(run_end_timeout=60.0), SessionBook(lambda _id: None),
                    RuleEngine(load_rules([str(pack)], False)))
    key = "model:8"
    watchdog.open_run(key, KeySource.WATCHDOG, "ab" * 16, T0, "a", None, None)
    watchdog.model_records([model_call(key, T0)], T0)
    watchdog.model_records([model_call(key, T0 + 1, answer=True)], T0 + 1)
    run = watchdog.tracker.get(key)
    assert run is not None and run.ended
    assert run.terminal_state is TerminalState.COMPLETED  # (its tool call not in yet)
    step = watchdog.model_records([tool_call(key, T0 + 0.5)], T0 + 1.5)  # late, once ended
    assert (run.terminal_state, run.terminal_reason) == (TerminalState.TOOL_LIMIT_REACHED,
                                                         "budget")
    assert key in step.dirty and run.tool_calls == 1  # (the shell stores it again)
    # its end was handed out as completed: the move is handed out, once (runs_finished_total)
    assert [(view.key, view.terminal_state, was) for view, was in step.reclassified] == [
        (key, TerminalState.TOOL_LIMIT_REACHED, "completed")]
    assert watchdog.model_records([tool_call(key, T0 + 0.7)], T0 + 2).reclassified == []
