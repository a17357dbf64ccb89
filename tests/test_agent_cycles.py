"""Loops across agents (DESIGN §13): the trail of a group's runs and the cycle at its tail
(watchdog.core.cycles), the run's input (a model call's request), and the core's step over what
the real OpenAI Agents SDK emitted in a triage/billing ping-pong and a healthy handoff chain
(tests/frameworks/recordings/openai_agents_sdk/ping_pong.jsonl, chain.jsonl)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.recorded import recorded_lines, records_of_lines
from watchdog.core.cycles import MAX_TRAIL, CycleBook, Entry, Trail, tail_cycle
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import load_rules
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.sessions import SessionBook, SessionState
from watchdog.core.spans.conventions import request_hash
from watchdog.core.spans.record import AGENT, KEY_WATCHDOG, LLM, SpanRecord
from watchdog.core.step import Core

T0 = 1_700_000_000.0
TRIAGE, BILLING = "agents-triage", "agents-billing"


def entries(agents: str, inputs: str | None = None) -> list[tuple[str, int]]:
    """``"ABAB"`` with inputs ``"xxxx"``: one (agent, input) per letter (inputs: all 0)."""
    return [(agent, ord(inputs[i]) if inputs else 0) for i, agent in enumerate(agents)]


@pytest.mark.parametrize(("agents", "inputs", "expected"), [
    ("ABABAB", None, (2, 3)),  # a ping-pong, three times
    ("AAAA", None, (1, 4)),  # one agent run again and again with the same input: a cycle of one
    ("XYZABCABC", None, (3, 2)),  # a healthy start, then a cycle of three twice
    ("ABABA", None, (2, 2)),  # the tail's [B, A] twice
    ("ABC", None, (0, 0)),  # a healthy chain
    ("ABA", "xxy", (0, 0)),  # A again, with another input: no cycle
    ("ABAB", "xxyy", (0, 0)),  # the same agents with new inputs each round: no cycle
    ("ABCDEABCDE", None, (0, 0)),  # longer than MAX_CYCLE_AGENTS: not looked for
    ("", None, (0, 0)),
])
def test_the_cycle_at_the_tail(agents: str, inputs: str | None,
                               expected: tuple[int, int]) -> None:
    assert tail_cycle(entries(agents, inputs)) == expected


def test_a_trail_orders_runs_by_start_and_keeps_a_bounded_tail() -> None:
    trail = Trail()
    # the runs arrive out of order (a child's agent span ends before the one it hands back to)
    for start, agent in [(2, BILLING), (1, TRIAGE), (4, BILLING), (3, TRIAGE)]:
        trail.add(Entry(start, agent, 7, f"run-{start}", "parent"))
    assert trail.cycle == (TRIAGE, BILLING) and trail.repeats == 2
    assert [e.run for e in trail.cycling] == ["run-1", "run-2", "run-3", "run-4"]
    for start in range(5, 5 + MAX_TRAIL * 2):
        trail.add(Entry(start, TRIAGE if start % 2 else BILLING, 7, f"run-{start}", "parent"))
    assert len(trail.entries) == MAX_TRAIL
    assert trail.repeats == MAX_TRAIL // 2


def test_the_book_notes_a_run_once_and_forgets_the_least_recent_group() -> None:
    book = CycleBook(max_groups=2)
    for index in range(3):
        changed = book.note("g1", Entry(index, "A", 1, f"r{index}", None))
        assert (changed is not None) == (index >= 1)  # 2 repeats, then 3
    assert book.note("g1", Entry(9, "A", 1, "r2", None)) is None  # r2 is in already
    trail = book.get("g1")
    assert trail is not None and not trail.add(Entry(9, "A", 1, "r1", None))  # ... and r1
    assert [e.run for e in trail.entries] == ["r0", "r1", "r2"]
    assert book.cycling == 1
    book.note("g2", Entry(0, "B", 1, "s0", None))
    book.note("g3", Entry(0, "C", 1, "t0", None))
    assert len(book) == 2 and book.get("g1") is None and book.cycling == 0


def test_a_model_calls_request_is_its_last_user_message_case_and_spacing_ignored() -> None:
    messages = [{"role": "system", "content": "Hand billing questions off."},
                {"role": "user", "content": "Refund  order 42"},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "c1", "function": {"name": "transfer_to_billing"}}]},
                {"role": "tool", "content": "{'assistant': 'billing'}"}]
    same = request_hash(json.dumps(messages))
    assert same is not None
    assert request_hash(json.dumps([{"role": "user", "content": "refund order 42 "}])) == same
    # OTel GenAI parts, and a plain prompt
    assert request_hash(json.dumps([{"role": "user", "parts": [
        {"type": "text", "content": "Refund order 42"}]}])) == same
    assert request_hash("Refund order 42") == same
    assert request_hash(json.dumps([{"role": "user", "content": "Refund order 43"}])) != same
    # unknown: hidden content, no user message, an input too long to read, not text
    assert request_hash("__REDACTED__") is None
    assert request_hash(json.dumps([{"role": "system", "content": "x"}])) is None
    assert request_hash(json.dumps([{"role": "user", "content": "x" * 70_000}])) is None
    # a long conversation is read for its last user message alone, in either key order, past
    # braces in the content; a human message (LangChain's) in a short one
    history = [{"role": "assistant", "content": "{not json} " * 1000}] * 2
    assert request_hash(json.dumps(
        [*history, {"content": "Refund {order} 42", "role": "user"}, *history])) == \
        request_hash("refund {order} 42")
    assert request_hash(json.dumps([{"role": "human", "content": "Refund order 42"}])) == same
    assert request_hash(None) is None and request_hash(12) is None


def replay(scenario: str) -> tuple[Core, list[tuple[int, str, str, str]]]:
    """The recording's export requests, one step each, through a core with the default rules;
    the decisions as (request index, rule, run, message)."""
    core = Core(RunTracker(), SessionBook(lambda _id: None), RuleEngine(load_rules([], True)))
    decided = []
    for index, line in enumerate(recorded_lines("openai_agents_sdk", scenario)):
        step = core.apply(records_of_lines([line]), T0 + index)
        assert not step.failures, step.failures
        decided += [(index, d.decision.rule, d.run.key, d.decision.message)
                    for d in step.decisions]
    return core, decided


def test_the_recorded_ping_pong_winds_down_the_run_the_handoffs_hang_from() -> None:
    core, decided = replay("ping_pong")
    trace_run = next(key for key in core.tracker._ended if ":" not in key.removeprefix("trace:"))
    assert [(rule, key) for _index, rule, key, _message in decided] == [
        ("agent-ping-pong", trace_run)]
    index, _rule, _key, message = decided[0]
    assert message.startswith(f"Loop across agents: {TRIAGE} → {BILLING} 3 times in a row")
    # ... as soon as billing's third run arrived: its agent span, the 6th agent span exported
    agent_spans = [i for i, line in enumerate(recorded_lines("openai_agents_sdk", "ping_pong"))
                   if f'"name": "{BILLING}"' in line or f'"name": "{TRIAGE}"' in line]
    assert index == agent_spans[5]
    trail = core.cycles.get("run:" + trace_run)
    # eight round trips, the last one triage's answer: at the end, billing → triage 7 times
    assert trail is not None and trail.cycle == (BILLING, TRIAGE) and trail.repeats == 7
    assert [e.agent for e in trail.entries] == [TRIAGE, BILLING] * 7 + [TRIAGE]


def test_the_recorded_healthy_chain_is_never_flagged() -> None:
    core, decided = replay("chain")
    assert decided == []
    assert core.cycles.cycling == 0
    (trail,) = core.cycles._trails.values()
    assert [e.agent for e in trail.entries] == [TRIAGE, BILLING, "agents-researcher"]


def test_a_sessions_cycle_is_kept_with_the_session() -> None:
    """A session's runs: the cycle goes into its state (persisted with it, read by its rules),
    with the run that can stop it."""
    state = SessionState("chat-7", agent_cycle=[TRIAGE, BILLING], agent_cycle_repeats=3,
                         cycle_orchestrator="run-1")
    again = SessionState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again.activation("run-1")["cycle_orchestrator"] is True
    assert again.activation("run-2")["cycle_orchestrator"] is False
    assert again.activation("run-2")["agent_cycle"] == [TRIAGE, BILLING]
    assert again.activation("run-2")["agent_cycle_repeats"] == 3


def test_a_sessions_runs_the_latest_running_one_is_told() -> None:
    """Runs of one session (each its own trace, no parent run): triage and billing answer the
    same request in turn; the latest run still running is the one told, and the session keeps
    the cycle."""
    sessions = SessionBook(lambda _id: None)
    core = Core(RunTracker(), sessions, RuleEngine(load_rules([], True)))
    decided = []
    for index in range(6):
        key, start = f"run-{index}", int((T0 + index) * 1e9)
        agent = TRIAGE if index % 2 == 0 else BILLING
        records = [SpanRecord(key, KEY_WATCHDOG, f"{index:032x}", f"{index:015x}1", "a", "chat",
                              LLM, start, start + 1000, agent=agent, session="chat-7",
                              input_hash=request_hash("Refund order 42"))]
        if index < 5:  # the last run is still going
            records.append(SpanRecord(key, KEY_WATCHDOG, f"{index:032x}", "a", None, agent,
                                      AGENT, start, start + 2000, agent=agent,
                                      session="chat-7"))
        step = core.apply(records, T0 + index)
        decided += [(d.decision.rule, d.run.key) for d in step.decisions]
    assert decided == [("agent-ping-pong", "run-5")]
    state = sessions.get("chat-7")
    assert state is not None
    assert (state.agent_cycle, state.agent_cycle_repeats, state.cycle_orchestrator) == (
        [TRIAGE, BILLING], 3, "run-5")


def _session_runs(ends: list[SpanRecord | None], agent: str = "oi") -> list[tuple[str, str]]:
    """Runs of one session, one agent, the same task each (as the model endpoint puts a
    script's invocations of it), one after the other: each run's model call, then how it
    ended (None: still going); the decisions."""
    core = Core(RunTracker(), SessionBook(lambda _id: None), RuleEngine(load_rules([], True)))
    decided = []
    for index, end in enumerate(ends):
        key, start = f"run-{index}", int((T0 + index) * 1e9)
        records = [SpanRecord(key, KEY_WATCHDOG, f"{index:032x}", f"{index:015x}1", "a", "chat",
                              LLM, start, start + 1000, agent=agent, session="endpoint:oi",
                              input_hash=request_hash("Sum the numbers in data.txt"))]
        if end is not None:
            records.append(replace(end, run_key=key, trace_id=f"{index:032x}",
                                   start_ns=start, end_ns=start + 2000))
        step = core.apply(records, T0 + index)
        decided += [(d.decision.rule, d.run.key) for d in step.decisions]
    return decided


def _ended(final_answer: bool, error_type: str | None = None) -> SpanRecord:
    return SpanRecord("", KEY_WATCHDOG, "", "a", None, "oi", AGENT, 0, 0, agent="oi",
                      session="endpoint:oi", final_answer=final_answer, error_type=error_type)


def test_the_same_task_run_again_after_each_answer_is_no_loop() -> None:
    """A script or an evaluation harness runs one agent on one task three times, each run to
    its answer (``completed``): the third is a new task, not a loop across runs; nor after a
    failed run between two answered ones."""
    assert _session_runs([_ended(True), _ended(True), None]) == []
    assert _session_runs([_ended(True), _ended(False, "Timeout"), _ended(True), None]) == []


def test_the_same_task_run_again_after_runs_that_gave_no_answer_is_a_loop() -> None:
    """A resume loop: the task started again each time its run failed (no answer); the third
    is wound down, however many answered runs came before them."""
    failed = _ended(False, "ToolError")
    assert _session_runs([failed, failed, None]) == [("agent-ping-pong", "run-2")]
    assert _session_runs([_ended(True), failed, failed, None]) == [("agent-ping-pong", "run-3")]
