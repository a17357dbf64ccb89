"""The progress report as a pure function of a run and its activity log."""

from __future__ import annotations

from typing import Any

from watchdog.core.redact import redact
from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.fields import NS
from watchdog.core.runs.report import activity_lines, render_markdown
from watchdog.core.runs.report import build_report as report_of
from watchdog.core.runs.run import RunState
from watchdog.core.runs.steps import RecentSteps, format_duration
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.spans.record import KeySource

T0 = 1_800_000_000.0
KEY = "run-1"


def make_run(tools: dict[str, int] | None = None, **fields: object) -> RunState:
    run = RunState(KEY, KeySource.WATCHDOG, "ab" * 16, T0)
    run.agent = "explorer"
    run.first_start_ns = int(T0 * NS)
    run.tools = dict(tools or {})
    run.tool_calls = sum(run.tools.values())
    for name, value in fields.items():
        setattr(run, name, value)
    return run


def build_report(run: RunState, activity: list[ActivityEntry], now: float) -> dict[str, Any]:
    """The report of ``run`` as it is at ``now``."""
    return report_of(run.view(now), activity)


def tool(seq: int, name: str, args: str | None, result: str | None = None,
         error: str | None = None, at: float | None = None) -> ActivityEntry:
    return ActivityEntry(KEY, seq, T0 + (seq if at is None else at), "tool", name, args, result,
                         error)


def llm(seq: int, detail: str = "in=100 out=20 finish=tool_calls") -> ActivityEntry:
    return ActivityEntry(KEY, seq, T0 + seq, "llm", "chat gpt-4o", detail)


def exploring_log() -> list[ActivityEntry]:
    return [
        llm(1),
        tool(2, "search_docs", '{"q":"retry policy"}', "docs/retry.md: backoff 2x, max 5"),
        llm(3),
        tool(4, "read_file", '{"path":"src/app.py"}', None,
             "FileNotFoundError: src/app.py"),
        tool(5, "read_file", '{"path":"src/main.py"}', None,
             "FileNotFoundError: src/main.py"),
        tool(6, "read_file", '{"path":"README.md"}', "# Demo\nRun with make run"),
        tool(7, "search_docs", '{"q":"retry policy"}', "docs/retry.md: backoff 2x, max 5"),
        llm(8, "in=400 out=50 finish=stop"),
    ]


def test_header_counts_come_from_the_run() -> None:
    run = make_run({"search_docs": 2, "read_file": 3}, iterations=3, input_tokens=600,
                   output_tokens=90, errors=2)
    report = build_report(run, exploring_log(), T0 + 10)
    header = report["run"]
    assert header["id"] == KEY and header["agent"] == "explorer"
    assert header["state"] == "active" and header["terminal_state"] is None
    assert header["elapsed_seconds"] == 10.0
    assert (header["iterations"], header["tool_calls"], header["total_tokens"],
            header["errors"]) == (3, 5, 690, 2)


def test_tool_usage_counts_calls_and_errors_per_tool() -> None:
    run = make_run({"search_docs": 2, "read_file": 3})
    report = build_report(run, exploring_log(), T0 + 10)
    assert report["tools"] == [{"name": "read_file", "calls": 3, "errors": 2},
                               {"name": "search_docs", "calls": 2, "errors": 0}]


def test_step_log_has_offsets_arguments_results_and_errors() -> None:
    report = build_report(make_run(), exploring_log(), T0 + 10)
    steps = report["steps"]
    assert [s["seq"] for s in steps] == list(range(1, 9))
    assert steps[1] == {"seq": 2, "offset_seconds": 2.0, "at": steps[1]["at"], "kind": "tool",
                        "name": "search_docs", "detail": '{"q":"retry policy"}',
                        "result": "docs/retry.md: backoff 2x, max 5", "error": None}
    assert steps[3]["error"] == "FileNotFoundError: src/app.py"
    assert report["steps_omitted"] == 0


def test_findings_are_successful_results_most_recent_first_without_duplicates() -> None:
    report = build_report(make_run(), exploring_log(), T0 + 10)
    findings = report["findings"]
    assert [(f["tool"], f["result"]) for f in findings] == [
        ("search_docs", "docs/retry.md: backoff 2x, max 5"),
        ("read_file", "# Demo\nRun with make run"),
    ]
    assert findings[0]["offset_seconds"] == 7.0  # the latest of the two identical results


def test_errors_are_grouped_when_only_paths_differ() -> None:
    report = build_report(make_run(), exploring_log(), T0 + 10)
    (error,) = report["errors"]
    assert error["count"] == 2
    assert error["error"] == "FileNotFoundError: src/main.py"  # latest wording
    assert error["names"] == ["read_file"]


def test_next_steps_name_repeated_calls_and_errors() -> None:
    report = build_report(make_run(), exploring_log(), T0 + 10)
    notes = "\n".join(report["next_steps"])
    assert "`search_docs` was called 2 times with the same arguments" in notes
    assert "same error occurred 2 times" in notes


def test_next_steps_for_a_clean_completed_run() -> None:
    run = make_run({"search_docs": 1})
    run.explicit_final = True
    run.final_output = "The retry policy is exponential backoff."
    run.end(T0 + 5)
    assert run.terminal_state is TerminalState.COMPLETED
    log = [tool(1, "search_docs", '{"q":"x"}', "found"),
           ActivityEntry(KEY, 2, T0 + 5, "answer", "final_result", None,
                         "The retry policy is exponential backoff.")]
    report = build_report(run, log, T0 + 100)
    assert report["run"]["state"] == "ended"
    assert report["run"]["elapsed_seconds"] == 5.0
    assert report["final_output"] == "The retry policy is exponential backoff."
    assert report["next_steps"] == [
        "The run completed with a final answer; nothing is left to continue."]


def test_ended_without_answer_points_at_partial_findings() -> None:
    run = make_run({"search_docs": 1})
    run.end(T0 + 5)
    report = build_report(run, [tool(1, "search_docs", '{"q":"x"}', "found")], T0 + 6)
    assert report["run"]["terminal_state"] == "no_response"
    assert "without a final answer" in report["next_steps"][0]


def test_low_budget_and_cycles_are_noted() -> None:
    run = make_run({"a": 4, "b": 4}, budget={"max_tool_calls": 10.0}, cycle_repeats=4)
    notes = "\n".join(build_report(run, [], T0 + 1)["next_steps"])
    assert "Only 2 of 10 tool calls are left" in notes
    assert "cycle" in notes


def test_same_result_for_different_arguments_is_noted() -> None:
    log = [tool(i, "grep", f'{{"pattern":"p{i}"}}', "no matches") for i in range(1, 5)]
    notes = "\n".join(build_report(make_run({"grep": 4}), log, T0 + 9)["next_steps"])
    assert "`grep` returned the same result for 4 different arguments" in notes


def test_a_truncated_log_says_how_many_steps_are_gone() -> None:
    log = [tool(seq, "ls", f'{{"n":{seq}}}', "x") for seq in range(301, 306)]
    report = build_report(make_run({"ls": 305}), log, T0 + 400)
    assert report["steps_omitted"] == 300
    assert report["tools"] == [{"name": "ls", "calls": 305, "errors": 0}]
    assert "the first 300 steps are no longer in the log" in render_markdown(report)


def test_secrets_are_redacted_again_in_json_and_markdown() -> None:
    secret = "sk-proj-abcdefghijklmnop1234567890"
    log = [tool(1, "env", '{"name":"OPENAI_API_KEY"}', f"value {secret}")]
    run = make_run({"env": 1}, final_output=f"key is {secret}")
    report = build_report(run, log, T0 + 2)
    text = render_markdown(report)
    assert secret not in repr(report) and secret not in text
    assert "[REDACTED]" in report["steps"][0]["result"]
    assert "[REDACTED]" in text
    assert all(secret not in line for line in activity_lines(log))


def test_markdown_sections_and_content() -> None:
    run = make_run({"search_docs": 2, "read_file": 3}, iterations=3, errors=2)
    text = render_markdown(build_report(run, exploring_log(), T0 + 10))
    for heading in ("# Progress report: run-1", "## Tool usage", "## Step-by-step log",
                    "## Partial findings", "## Errors", "## Suggested next steps"):
        assert heading in text
    assert "| read_file | 3 | 2 |" in text
    assert '`read_file` {"path":"src/app.py"} → **error:** FileNotFoundError: src/app.py' in text
    assert "- 2× FileNotFoundError: src/main.py (`read_file`)" in text
    assert "# Demo Run with make run" in text  # multi-line results are kept on one line
    assert "- **State:** active" in text and "- **Elapsed:** 10.0s" in text


def test_markdown_of_an_ordinary_run_is_not_touched_by_redaction() -> None:
    run = make_run({"search_docs": 2, "read_file": 3}, budget={"max_tool_calls": 20.0})
    run.end(T0 + 12)
    text = render_markdown(build_report(run, exploring_log(), T0 + 12))
    assert redact(text) == text and "[REDACTED]" not in text


def test_markdown_for_an_empty_run() -> None:
    text = render_markdown(build_report(make_run(), [], T0))
    assert "No tool calls." in text and "No steps recorded yet." in text
    assert "No results yet." in text and "No errors." in text


def test_activity_lines_are_compact() -> None:
    lines = activity_lines(exploring_log())
    assert lines[0] == "+0.0s llm chat gpt-4o (in=100 out=20 finish=tool_calls)"
    assert lines[1] == ('+1.0s tool search_docs({"q":"retry policy"}) -> '
                        "docs/retry.md: backoff 2x, max 5")
    assert lines[3] == '+3.0s tool read_file({"path":"src/app.py"}) -> ERROR FileNotFoundError: ' \
                       "src/app.py"
    assert lines[5].endswith("-> # Demo Run with make run")
    assert activity_lines([]) == []
    assert activity_lines(exploring_log(), start=T0)[0].startswith("+1.0s ")


def test_activity_lines_are_in_the_order_the_steps_ended() -> None:
    """Steps arrive in the order of their export request (grouped by instrumentation scope, some
    held to its end), not in the order they ended: the lines follow the end times."""
    log = exploring_log()
    arrived = [entry for entry in log if entry.kind == "llm"] + \
        [entry for entry in log if entry.kind != "llm"]
    assert activity_lines(arrived) == activity_lines(log)


def test_activity_lines_cut_long_briefs() -> None:
    (line,) = activity_lines([tool(1, "cat", '{"f":"x"}', "y" * 500)])
    assert len(line) < 260 and line.endswith("…")


def test_format_duration() -> None:
    assert format_duration(4.25) == "4.2s"
    assert format_duration(185) == "3m05s"
    assert format_duration(7620) == "2h07m"


def test_recent_steps_are_the_activity_lines_of_the_last_steps() -> None:
    """A run's recent steps (kept by the core for its report prompts) render as the activity
    lines of the steps kept, in the order they ended, with the steps before them counted; a
    step's name is redacted (its fields were at ingest)."""
    secret = "sk-" + "a1B2c3D4" * 5
    log = [*exploring_log(), tool(9, secret, '{"n":1}', "ok")]
    steps = RecentSteps(4)
    for entry in [*log[:7], log[8], log[7]]:  # arrival order is not step order
        steps.append(entry)
    lines, earlier = steps.render()
    assert lines == tuple(activity_lines(log[5:])) and secret not in lines[-1]
    assert earlier == 5 and lines[0].startswith("+0.0s ")
    lines, earlier = steps.render(start=T0)
    assert lines == tuple(activity_lines(log[5:], start=T0)) and lines[0].startswith("+6.0s ")
    assert steps.render(start=T0 - 10)[0][0].startswith("+16.0s ")  # another start


def test_recent_steps_keep_the_lines_of_the_steps_they_keep() -> None:
    steps = RecentSteps(3)
    for seq in range(1, 101):
        steps.append(tool(seq, "read_file", f'{{"n":{seq}}}', "x"))
        steps.render(start=T0)
    assert steps.lines is not None and len(steps.lines) <= 6
    assert steps.render(start=T0)[0] == tuple(activity_lines([tool(seq, "read_file",
                                                                    f'{{"n":{seq}}}', "x")
                                                               for seq in (98, 99, 100)], T0))


def test_a_model_call_that_reported_no_tokens_shows_none() -> None:
    """A call whose usage nobody reported (a stream not asked for it, an instrumentation that
    records none) is shown without token counts, not as one of 0 tokens."""
    from watchdog.core.runs.activity import entry_for
    from watchdog.core.spans.record import SpanKind, SpanRecord

    def call(input_tokens: int, output_tokens: int, finish: str | None) -> str | None:
        entry = entry_for(SpanRecord(
            run_key="r", key_source=KeySource.WATCHDOG, trace_id="t" * 32, span_id="s" * 16,
            parent_span_id=None, name="chat m", kind=SpanKind.LLM, start_ns=1, end_ns=2,
            input_tokens=input_tokens, output_tokens=output_tokens, finish_reason=finish), 1)
        assert entry is not None
        return entry.detail

    assert call(0, 0, "stop") == "finish=stop"
    assert call(0, 0, None) is None
    assert call(12, 0, "tool_calls") == "in=12 out=0 finish=tool_calls"
