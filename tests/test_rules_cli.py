"""``watchdog rules check`` and ``watchdog rules test``: exit codes, one problem per line with
file and line, a readable diff when a rule test fails, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from watchdog.core.rule_tests import read_test_file, run_test
from watchdog.core.rules.pack import load_rules
from watchdog.shell.cli import main

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TESTS = REPO / "rules" / "default.test.yaml"
HEADER = "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: mine\n"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(path: Path, text: str, header: bool = False) -> str:
    path.write_text((HEADER if header else "") + textwrap.dedent(text))
    return str(path)


# -- rules check ----------------------------------------------------------------------------------

def test_check_accepts_the_default_pack(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "rules", "check", str(REPO / "rules" / "default.yaml"))
    assert (code, err) == (0, "")
    assert out == "ok: 21 rules enabled, 0 disabled, 0 budgets, from 1 files\n"


def test_check_a_user_pack_over_the_default(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    pack = write(tmp_path / "mine.yaml", HEADER + "disable: [tool-cycle]\n"
                 "budgets: [{agents: ['*'], max_tool_calls: 40}]\n")
    code, out, _ = cli(capsys, "rules", "check", pack)
    assert code == 0
    assert out == "ok: 20 rules enabled, 1 disabled, 1 budgets, from 2 files\n"
    code, _, err = cli(capsys, "rules", "check", "--no-default", pack)
    assert code == 1
    assert err.splitlines() == [
        f"{pack}:4: disable: no rule named 'tool-cycle' in this or an earlier pack",
        "1 problem found"]


@pytest.mark.parametrize(("rule", "line", "message"), [
    ("{name: a, when: run.tool_calls > 3, action: explode, message: m}", 5,
     "rule a: action: 'explode' is not one of notify, wind_down, abort"),
    ("{name: a, when: 'run.tool_calls >', action: notify, message: m}", 5,
     "rule a: when: syntax error: unexpected end of expression (column 17)"),
    ("{name: a, when: foo > 3, action: notify, message: m}", 5,
     "rule a: when: undeclared reference to 'foo' (the variables are run, session and fleet) "
     "(column 1)"),
    ("{name: a, when: run.tool_calss > 3, action: notify, message: m}", 5,
     "rule a: when: unknown field 'tool_calss' in run (did you mean 'tool_calls'?) (column 4)"),
    ("{name: a, when: 'true', for: 5x, action: notify, message: m}", 5,
     "rule a: for: expected a duration like 500ms, 30s, 1m30s, 1h, 1d (units ms s m h d w y, "
     "largest first), got '5x'"),
    ("{name: a, agents: ['ex[', 'ok'], when: 'true', action: notify, message: m}", 5,
     "rule a: agents: bad glob 'ex[': unclosed '['"),
])
def test_check_reports_broken_packs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    rule: str, line: int, message: str) -> None:
    pack = write(tmp_path / "broken.yaml", HEADER + f"rules:\n  - {rule}\n")
    code, out, err = cli(capsys, "rules", "check", pack)
    assert (code, out) == (1, "")
    assert err.splitlines() == [f"{pack}:{line}: {message}", "1 problem found"]


def test_check_reports_duplicates_and_bad_yaml_in_one_go(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dup = write(tmp_path / "dup.yaml", header=True, text="""\
        rules:
          - {name: a, when: 'true', action: notify, message: m}
          - {name: a, when: 'true', action: notify, message: m}
    """)
    bad = write(tmp_path / "bad.yaml", "rules: [\n")
    code, _, err = cli(capsys, "rules", "check", dup, bad, str(tmp_path / "nope.yaml"))
    assert code == 1
    assert err.splitlines() == [
        f"{dup}:6: rule a: duplicate rule name (first defined on line 5)",
        f"{bad}:2: bad YAML: while parsing a flow node expected the node content, but found "
        f"'<stream end>'",
        f"{tmp_path / 'nope.yaml'}: no such file or directory",
        "3 problems found",
    ]


def test_check_as_a_process_never_shows_a_traceback(tmp_path: Path) -> None:
    pack = write(tmp_path / "broken.yaml", HEADER + "rules:\n  - {name: a, when: 'x >', "
                 "action: notify, message: m}\n")
    done = subprocess.run([sys.executable, "-m", "watchdog", "rules", "check", pack],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"{pack}:5: rule a: when: syntax error")


def test_check_names_a_file_whose_name_is_no_utf8_readably(tmp_path: Path) -> None:
    """A file name in another encoding (Latin-1 ``é``) is shown with a backslash escape, as
    ``ls`` shows it, and the process neither fails to print it nor writes a surrogate."""
    pack = tmp_path / os.fsdecode(b"r\xe9gles.yaml")
    write(pack, HEADER + "rules:\n  - {name: a, when: 'x >', action: notify, message: m}\n")
    for locale in ("C.UTF-8", "C"):
        done = subprocess.run([sys.executable, "-m", "watchdog", "rules", "check", str(tmp_path)],
                              capture_output=True, timeout=60,
                              env={**os.environ, "LC_ALL": locale, "PYTHONIOENCODING": ""})
        assert done.returncode == 1, done.stderr
        assert b"Traceback" not in done.stderr
        assert done.stderr.startswith(
            os.fsencode(tmp_path) + b"/r\\xe9gles.yaml:5: rule a: when: syntax error"), done.stderr


# -- rules test -----------------------------------------------------------------------------------

def test_the_default_pack_passes_its_rule_tests(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "rules", "test", str(DEFAULT_TESTS))
    assert code == 0, out
    assert out.endswith("tests passed — ok\n")


def test_the_default_rule_tests_cover_every_default_rule_without_rule_errors() -> None:
    test_file, problems = read_test_file(str(DEFAULT_TESTS))
    assert test_file is not None, problems
    ruleset = load_rules([])
    expected = {e.rule for t in test_file.tests for e in t.expect}
    assert expected == {r.name for r in ruleset.rules}
    for test in test_file.tests:
        result = run_test(ruleset, test)
        assert result.passed and not result.notes, (test.name, result.failures, result.notes)


def test_a_wrong_expectation_fails_with_a_diff(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    tests = write(tmp_path / "t.test.yaml", """\
        tests:
          - name: loop
            steps:
              - {at: 0, llm: {}}
              - {at: 1, tool: s, args: {q: 1}}
              - {at: 2, tool: s, args: {q: 1}}
              - {at: 3, tool: s, args: {q: 1}}
              - {at: 4, tool: s, args: {q: 1}}
            expect:
              - {step: 3, rule: tool-cycle, action: abort}
            expect_terminal_state: completed
    """)
    code, out, _ = cli(capsys, "rules", "test", tests)
    assert code == 1
    assert out.splitlines() == [
        f"FAIL {tests}:2: loop",
        "  missing:    step 3 rule tool-cycle action abort  (line 10)",
        "  unexpected: step 4 rule tool-cycle action wind_down severity warning terminal_state "
        "loop_detected message 'Loop: the same sequence of tool calls 4 times in a row — "
        "change approach or wrap up'",
        "  terminal state: expected completed, got loop_detected",
        "  fired:",
        "    step 4 rule tool-cycle action wind_down severity warning terminal_state "
        "loop_detected message 'Loop: the same sequence of tool calls 4 times in a row — "
        "change approach or wrap up'",
        f"{tests}: 0 of 1 tests passed — FAILED",
    ]


def test_rule_files_are_relative_to_the_test_file(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "packs").mkdir()
    write(tmp_path / "packs" / "mine.yaml", header=True, text="""\
        budgets: [{agents: ["explorer-*"], max_tool_calls: 4}]
        disable: [budget-last-call]
        rules:
          - name: explorer-errors
            agents: ["explorer-*"]
            when: run.errors >= 2
            action: notify
            message: "${run.errors} errors, last ${run.last_error}"
    """)
    tests = write(tmp_path / "mine.test.yaml", """\
        rule_files: [packs/mine.yaml]
        tests:
          - name: explorer
            agent: explorer-1
            steps:
              - {at: 0, tool: read, args: {p: 1}, error: {type: OSError, message: "gone 1"}}
              - {at: 1, tool: read, args: {p: 2}, error: {type: OSError, message: "gone 2"}}
            expect:
              - {step: 0, rule: budget-countdown, message: "3 of 4"}
              - {step: 1, rule: explorer-errors, message: "2 errors, last OSError: gone 2"}
              - {step: 1, rule: budget-countdown, message: "2 of 4"}
          - name: others are not explorers
            agent: writer
            steps:
              - {at: 0, tool: read, args: {p: 1}, error: {type: OSError, message: "gone 1"}}
              - {at: 1, tool: read, args: {p: 2}, error: {type: OSError, message: "gone 2"}}
    """)
    code, out, _ = cli(capsys, "rules", "test", "-v", tests)
    assert code == 0, out
    assert out.splitlines() == [f"ok   {tests}:3: explorer",
                                f"ok   {tests}:12: others are not explorers",
                                f"{tests}: 2 of 2 tests passed — ok"]


def test_bad_test_files_are_reported_with_lines(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    tests = write(tmp_path / "bad.test.yaml", """\
        tests:
          - name: bad
            steps:
              - {at: 0, tool: read, heartbeat: {messages: 1}}
              - {at: -1, llm: {tokens: 3}}
              - {at: 5, end: {final_answer: true}}
              - {at: 6, tick: true}
            expect:
              - {step: 9, rule: nope}
    """)
    code, out, _ = cli(capsys, "rules", "test", tests)
    assert code == 1
    assert out.splitlines() == [
        f"{tests}:4: test 'bad': step 0: needs exactly one of llm, tool, heartbeat, tick, end, "
        f"session (has tool, heartbeat)",
        f"{tests}:5: test 'bad': step 1: at: expected a number of seconds >= 0 or a duration "
        f"like 500ms, 30s, 1m30s, 1h, 1d (units ms s m h d w y, largest first), got -1; this one "
        f"is negative",
        f"{tests}:5: test 'bad': step 1: llm: unknown key 'tokens' (did you mean "
        f"'input_tokens'?)",
        f"{tests}:7: test 'bad': step 3: comes after 'end' (step 2): the run has ended",
        f"{tests}:9: test 'bad': expect: step 9 does not exist (the test has 4 steps, 0-3)",
    ]


def test_an_expectation_in_a_test_of_no_steps_says_so(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    tests = write(tmp_path / "empty.test.yaml", """\
        tests:
          - name: empty
            steps: []
            expect:
              - {step: 0, rule: idle-timeout}
    """)
    code, out, _ = cli(capsys, "rules", "test", tests)
    assert code == 1
    assert out.splitlines() == [f"{tests}:5: test 'empty': expect: step 0 does not exist (the "
                                f"test has no steps: nothing can fire)"]


def test_yaml_that_expands_or_nests_without_end_is_refused_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tool call's arguments that aliases expand to 9^9 strings (the test ran for ever,
    encoding them), or that contain themselves; nesting 10,000 deep (a traceback); a file
    that is not UTF-8 (no line)."""
    levels = ["&a0 [x, x, x, x, x, x, x, x, x]"] + [
        f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    tests = write(tmp_path / "bomb.test.yaml", f"""\
        tests:
          - name: bomb
            steps:
              - {{at: 0, tool: search, args: {{q: [{", ".join(levels)}]}}, result: x}}
              - {{at: 1, tool: search, args: &self {{q: *self}}}}
            expect: []
    """)
    code, out, _ = cli(capsys, "rules", "test", tests)
    assert (code, out.splitlines()) == (1, [
        f"{tests}:4: test 'bomb': step 0: args: an unreadable value (its aliases expand it to "
        f"more than 100,000 values, more than 100 levels deep, or into itself)",
        f"{tests}:5: test 'bomb': step 1: args: an unreadable value (its aliases expand it to "
        f"more than 100,000 values, more than 100 levels deep, or into itself)"])
    # anchors chained 3,000 deep, each list holding the one before (a RecursionError out of
    # counting what it expands to: a traceback)
    chain = ["x-chain:", "  - &c0 [x]"] + [f"  - &c{i} [*c{i - 1}]" for i in range(1, 3000)]
    chained = write(tmp_path / "chain.test.yaml", "\n".join(chain) + "\n" + textwrap.dedent("""\
        tests:
          - name: chained
            steps:
              - {at: 0, tool: search, args: {q: *c2999}, result: x}
            expect: []
    """))
    code, out, _ = cli(capsys, "rules", "test", chained)
    assert code == 1 and f"{chained}:3005: test 'chained': step 0: args: an unreadable value (" \
        f"its aliases expand it to more than 100,000 values, more than 100 levels deep, or " \
        f"into itself)" in out.splitlines(), out
    deep = write(tmp_path / "deep.test.yaml", "tests:\n  - " + "[" * 10_000 + "]" * 10_000)
    code, out, _ = cli(capsys, "rules", "test", deep)
    assert (code, out) == (1, f"{deep}:2: bad YAML: nested more than 100 levels deep\n")
    latin = tmp_path / "latin.test.yaml"
    latin.write_bytes("tests:\n  - name: caf\xe9\n".encode("latin-1"))
    code, out, _ = cli(capsys, "rules", "test", str(latin))
    assert (code, out) == (1, f"{latin}:2: not UTF-8 text (invalid continuation byte at byte "
                              f"20); save it as UTF-8\n")


def test_a_pack_budget_past_the_bound_is_a_problem_and_the_default_rules_still_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A budget is a finite number up to MAX_BUDGET (10^12) wherever it comes from: a pack's
    count past it was taken, and every default budget rule for its agents then failed to
    evaluate (CEL's int is 64 bits) while `rules check` said ok."""
    pack = write(tmp_path / "huge.yaml", HEADER + "budgets:\n  - agents: ['x*']\n"
                 "    max_tool_calls: 99999999999999999999999999\n"
                 "    max_tokens: 1000000000001\n    max_iterations: 1000000000000\n")
    code, _, err = cli(capsys, "rules", "check", pack)
    assert (code, err.splitlines()) == (1, [
        f"{pack}:6: budgets: max_tool_calls: must be at most 1e+12",
        f"{pack}:7: budgets: max_tokens: must be at most 1e+12", "2 problems found"])
    write(tmp_path / "huge.yaml", HEADER + "budgets:\n  - agents: ['x*']\n"
          "    max_tool_calls: 1000000000000\n    max_tokens: 1000000000000\n")
    tests = write(tmp_path / "huge.test.yaml", """\
        rule_files: [huge.yaml]
        tests:
          - name: the largest budgets count down
            agent: x1
            steps:
              - {at: 0, llm: {input_tokens: 100, output_tokens: 10}}
              - {at: 1, tool: search, args: {q: a}, result: r}
            expect: []
    """)
    code, out, _ = cli(capsys, "rules", "test", "-v", tests)
    assert code == 0 and "failed to evaluate" not in out, out


def test_a_pack_time_or_grace_past_the_bound_is_a_problem_as_a_count_budget_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A pack's ``max_seconds``, a rule's ``for`` and its grace (tool calls, seconds) are bounded
    by MAX_BUDGET (10^12) as its count budgets and an announced budget are: ``max_seconds:
    1.0e+300`` and ``grace: {tool_calls: 10^23}`` were taken, the grace's end reaching the
    directives' JSON (``ends_at_tool_calls``) as an integer no 64-bit client reads."""
    pack = write(tmp_path / "huge.yaml", HEADER + "budgets:\n  - agents: ['x*']\n"
                 "    max_seconds: 1.0e+300\nrules:\n  - name: slow\n"
                 "    when: run.errors > 1\n    action: wind_down\n    message: m\n"
                 "    for: 99999999y\n"
                 "    grace: {tool_calls: 100000000000000000000000, seconds: 1000000000001}\n")
    code, _, err = cli(capsys, "rules", "check", pack)
    assert (code, err.splitlines()) == (1, [
        f"{pack}:6: budgets: max_seconds: must be at most 1e+12 seconds",
        f"{pack}:12: rule slow: for: must be at most 1e+12 seconds",
        f"{pack}:13: rule slow: grace: tool_calls: must be at most 1e+12",
        f"{pack}:13: rule slow: grace: seconds: must be at most 1e+12 seconds",
        "4 problems found"]), err
    write(tmp_path / "huge.yaml", HEADER + "budgets:\n  - agents: ['x*']\n"
          "    max_seconds: 1000000000000\nrules:\n  - name: slow\n"
          "    when: run.errors > 1\n    action: wind_down\n    message: m\n"
          "    for: 1000000000000s\n"
          "    grace: {tool_calls: 1000000000000, seconds: 1000000000000}\n")
    code, out, err = cli(capsys, "rules", "check", pack)
    assert code == 0, (out, err)


def test_a_step_time_past_the_bound_is_a_problem_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A step's ``at`` and ``duration`` are seconds up to MAX_BUDGET (10^12, a budget's largest
    ``max_seconds``), as other numbers from outside are bounded: ``at: 1e23`` passed, on a
    clock that no longer tells its seconds apart."""
    write(tmp_path / "p.yaml", HEADER + "budgets:\n  - agents: ['*']\n"
          "    max_seconds: 1000000000000\nrules: []\n")
    tests = write(tmp_path / "p.test.yaml", """\
        rule_files: [p.yaml]
        tests:
          - name: t
            steps:
              - {at: 0, llm: {input_tokens: 1, output_tokens: 1}}
              - {at: 1000000000001, tool: search, duration: 99999999999999999999999}
              - {at: 1.0e+23, end: {final_answer: true}}
    """)
    code, out, err = cli(capsys, "rules", "test", tests)
    assert (code, out.splitlines()) == (1, [
        f"{tests}:6: test 't': step 1: at: must be at most 1e+12 seconds, not 1000000000001",
        f"{tests}:6: test 't': step 1: duration: must be at most 1e+12 seconds, not 1e+23",
        f"{tests}:7: test 't': step 2: at: must be at most 1e+12 seconds, not 1e+23"]), (out, err)
    write(tmp_path / "p.test.yaml", """\
        rule_files: [p.yaml]
        tests:
          - name: the bound itself
            steps:
              - {at: 0, llm: {input_tokens: 1, output_tokens: 1}}
              - {at: 1000000000000, tool: search, duration: 1000000000000}
            expect: []
    """)
    code, out, err = cli(capsys, "rules", "test", tests)
    assert code == 0 and "1 of 1 tests passed" in out, (out, err)


def test_an_integer_of_more_digits_than_python_reads_is_a_problem_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """YAML's integer of 5,000 digits: Python's int() refuses past 4,300 (a ValueError, a
    traceback at `rules check`); in a pack and in a rule test's step alike."""
    digits = "9" * 5000
    pack = write(tmp_path / "big.yaml", HEADER + f"budgets: [{{agents: ['*'], max_tool_calls: "
                                                 f"{digits}}}]\n")
    code, _, err = cli(capsys, "rules", "check", pack)
    assert (code, err.splitlines()) == (1, [
        f"{pack}:4: budgets: max_tool_calls: expected an integer >= 1, got an unreadable value "
        f"(an integer of 5000 characters is too...", "1 problem found"])
    tests = write(tmp_path / "big.test.yaml", f"""\
        tests:
          - name: big
            steps:
              - {{at: 0, tool: search, args: {{q: {digits}}}, result: x}}
            expect: []
    """)
    code, out, _ = cli(capsys, "rules", "test", tests)
    assert code == 1 and out.startswith(f"{tests}:4: test 'big': step 0: args: an unreadable "
                                        f"value"), out


def test_a_test_without_its_steps_says_so(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    tests = write(tmp_path / "nosteps.test.yaml", """\
        tests:
          - name: no steps yet
            agent: a
    """)
    code, out, _ = cli(capsys, "rules", "test", tests)
    assert code == 1
    assert out.splitlines() == [f"{tests}:2: test: 'steps' is required"]


def test_unknown_rules_in_expectations_and_unloadable_rule_files_fail(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tests = write(tmp_path / "t.test.yaml", """\
        tests:
          - name: typo
            steps: [{at: 0, llm: {}}]
            expect: [{step: 0, rule: idle-timout}]
    """)
    code, out, _ = cli(capsys, "rules", "test", tests)
    assert code == 1
    assert "  line 4: no enabled rule named 'idle-timout' (did you mean 'idle-timeout'?)" in \
        out.splitlines()
    broken = write(tmp_path / "u.test.yaml", "rule_files: [missing.yaml]\ntests: []\n")
    code, out, _ = cli(capsys, "rules", "test", broken, str(tmp_path / "absent.test.yaml"))
    assert code == 1
    assert out.splitlines() == [
        f"{broken}: cannot load the rules under test:",
        f"  {tmp_path / 'missing.yaml'}: no such file or directory",
        f"{tmp_path / 'absent.test.yaml'}: cannot read: No such file or directory",
    ]
