"""``watchdog rules test`` drives the sidecar's own core (watchdog.core.step.Core): a rule test
decides what the sidecar decides, step for step — the change detection that skips rules whose
signals did not move, the timer, and the session book included."""

from __future__ import annotations

import textwrap
from pathlib import Path

from watchdog.core.rule_tests import TestResult, read_test_file, run_test
from watchdog.core.rules.pack import load_rules
from watchdog.core.rules.testfile import MAX_TEST_FILE_BYTES

HEADER = "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: mine\n"


def results(tmp_path: Path, rules: str, tests: str) -> list[TestResult]:
    (tmp_path / "mine.yaml").write_text(HEADER + textwrap.dedent(rules))
    (tmp_path / "t.test.yaml").write_text("rule_files: [mine.yaml]\ninclude_default: false\n"
                                          + textwrap.dedent(tests))
    test_file, problems = read_test_file(str(tmp_path / "t.test.yaml"))
    assert test_file is not None, problems
    ruleset = load_rules([str(tmp_path / "mine.yaml")], include_default=False)
    return [run_test(ruleset, test) for test in test_file.tests]


def fired(result: TestResult) -> list[tuple[int, str]]:
    return [(step, decision.rule) for step, decision in result.fired]


def test_a_held_condition_fires_when_the_sidecar_evaluates_it(tmp_path: Path) -> None:
    # The model call at 20 s moves no signal the rule reads, so the sidecar does not evaluate
    # the rule there: the timer's tick is where its `for` runs out.
    [result] = results(tmp_path, """\
        rules:
          - {name: two-calls, when: run.tool_calls >= 2, for: 10s, action: notify, message: m}
        """, """\
        tests:
          - name: held
            steps:
              - {at: 0, tool: a, args: {n: 1}}
              - {at: 1, tool: a, args: {n: 2}}
              - {at: 20, llm: {input_tokens: 5}}
              - {at: 30, tick: true}
            expect: [{step: 3, rule: two-calls}]
        """)
    assert result.passed, result.failures
    assert fired(result) == [(3, "two-calls")]


def test_sessions_come_from_the_session_book(tmp_path: Path) -> None:
    with_id, without_id = results(tmp_path, """\
        rules:
          - name: stalled
            when: session.zero_progress_streak >= 2 && session.run_checkpoints > 0
            action: abort
            terminal_state: intervention_required
            message: "${session.id}/${session.runs}/${session.checkpoints}"
        """, """\
        tests:
          - name: with an id
            session: {id: s1, runs: 3, checkpoints: 2}
            steps:
              - {at: 0, tool: a}
              - {at: 5, session: {checkpoints: 3, zero_progress_streak: 2}}
              - {at: 6, session: {run_checkpoints: 1}}
            expect: [{step: 2, rule: stalled, message: "s1/3/3"}]
            expect_terminal_state: intervention_required
          - name: fields without an id
            steps:
              - {at: 0, tool: a}
              - {at: 5, session: {zero_progress_streak: 2, run_checkpoints: 1}}
            expect: [{step: 1, rule: stalled, message: "/0/0"}]
        """)
    assert with_id.passed, with_id.failures  # seeing the run counts no new run of s1
    assert without_id.passed, without_id.failures


def test_a_heartbeat_that_grows_the_conversation_is_evaluated_at_once(tmp_path: Path) -> None:
    # The sidecar evaluates the rules reading what a heartbeat moved when it comes (not at
    # the run's next span), as it does for a span.
    [result] = results(tmp_path, """\
        rules:
          - {name: long-talk, when: run.messages >= 7, action: notify, message: m}
        """, """\
        tests:
          - name: grows
            steps:
              - {at: 0, llm: {messages: 3}}
              - {at: 5, heartbeat: {messages: 5}}
              - {at: 10, heartbeat: {messages: 7}}
              - {at: 20, llm: {input_tokens: 5}}
            expect: [{step: 2, rule: long-talk}]
        """)
    assert result.passed, result.failures
    assert fired(result) == [(2, "long-talk")]


def test_progress_ends_an_idle_stretch_at_once(tmp_path: Path) -> None:
    """A span is progress: rules on idle_seconds are evaluated there and see it false, so an
    each_time rule is armed again and a `for` starts over — at the span, not at the timer's
    next turn (a rule test has none between its steps: the second idle stretch fired nothing,
    and the `for` counted the first stretch into the second: it fired at 150)."""
    [result] = results(tmp_path, """\
        rules:
          - {name: idle-each, when: run.idle_seconds > 30.0, repeat: each_time, action: notify,
             message: "idle ${int(run.idle_seconds)}"}
          - {name: idle-held, when: run.idle_seconds > 30.0, for: 60s, action: notify,
             message: "held ${int(run.idle_seconds)}"}
        """, """\
        tests:
          - name: two idle stretches
            steps:
              - {at: 0, tool: search, args: {q: a}}
              - {at: 70, tick: true}
              - {at: 80, tool: search, args: {q: b}}
              - {at: 120, tick: true}
              - {at: 150, tick: true}
              - {at: 181, tick: true}
            expect: []
        """)
    # (step 2's empty notify withdraws idle-each's note: the run is no longer idle)
    assert [(step, d.rule, d.message) for step, d in result.fired] == [
        (1, "idle-each", "idle 70"), (2, "idle-each", ""), (3, "idle-each", "idle 40"),
        (5, "idle-held", "held 101")]


def test_a_test_file_too_large_is_told_so_whatever_byte_it_is_cut_at(tmp_path: Path) -> None:
    """A file one character past the limit, that character two bytes long: the read stops
    inside it (it was told "not UTF-8 text (unexpected end of data...)")."""
    path = tmp_path / "large.test.yaml"
    path.write_bytes(b"#" * MAX_TEST_FILE_BYTES + "\u00e9\n".encode())
    test_file, problems = read_test_file(str(path))
    assert test_file is None
    assert [p.message for p in problems] == [f"larger than {MAX_TEST_FILE_BYTES} bytes"]

