"""The progress report of one run: what it did, what it found, what went wrong, what to do next.

Theory of operation
-------------------
:func:`build_report` turns a run's :class:`~watchdog.core.runs.view.RunView` and its activity log
(oldest first, as the store returns it) into a plain dict: the API's JSON form.
:func:`render_markdown` is a pure formatter over that dict, so the JSON and the Markdown can
never disagree. :func:`activity_lines` renders the compact step log that a ``report_prompt``
embeds for the model.

Every string here comes from briefs that were redacted at ingest; the report redacts again on
the way out (defence in depth: a pattern added to :mod:`watchdog.core.redact` later also
covers runs stored before it). The activity log is a ring, so a long run's first steps may be
gone: counts in the header come from the run's signals (complete), per-step detail from the log
(the last ``ACTIVITY_LOG_SIZE`` steps), and the report says when the two differ.

Pure: no IO, no clock (``now`` is an argument).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from watchdog.core.redact import mask, redact
from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.steps import (
    ENDED_AT,
    LINE_DETAIL_CHARS,
    LINE_RESULT_CHARS,
    format_duration,
    format_number,
    format_usd,
    one_line,
    step_line,
)
from watchdog.core.runs.view import RunView, iso, plain

MAX_FINDINGS = 20  # distinct tool results shown as partial findings, most recent first
MAX_DISTINCT_ERRORS = 20  # error groups shown
REPEAT_NOTE_MIN = 2  # an identical call (or error) seen this often earns a note
LOW_BUDGET_NOTE = 3  # remaining tool calls / iterations at or below which the report warns



# -- building ------------------------------------------------------------------------------------

def build_report(run: RunView, activity: Sequence[ActivityEntry],
                 children: Sequence[RunView] = (), trace_url: str | None = None,
                 directives: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The report as a JSON-ready dict (every string redacted), as of when ``run``'s view was
    taken. ``children``: the runs of the nested agents it delegated to, shown as a tree below
    it; ``trace_url``: the config's template of the run's link into the tracing UI;
    ``directives``: the run's (as the API lists them, oldest first), for what stopped it."""
    start = _start_of(run, activity)
    steps = [_step(entry, start) for entry in activity]
    tool_entries = [e for e in activity if e.kind == "tool"]
    first_seq = activity[0].seq if activity else 0
    stop = stop_of(directives)
    report: dict[str, Any] = {
        "run": _header(run),
        "stop": stop,
        "tools": _tool_usage(run, tool_entries),
        "steps": steps,
        "steps_omitted": max(first_seq - 1, 0),
        "findings": _findings(tool_entries, start),
        "final_output": _final_output(run, activity),
        "errors": _errors(activity, start),
        "next_steps": _next_steps(run, activity, tool_entries, stop),
        "parent_run": run.parent_run,
        "children": [_child(child) for child in children],
    }
    redacted: dict[str, Any] = _redact_all(report)
    redacted["run"]["trace_url"] = run.trace_url(trace_url)  # the operator's URL, and ids
    return redacted


def stop_of(directives: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """What the watchdog stopped the run for: its first directive that decides how it ends (an
    abort, or a rule's terminal state), as the run's terminal state takes the first; None if
    none did (a countdown note is no stop)."""
    for directive in directives:
        if directive.get("action") == "abort" or directive.get("terminal_state"):
            return _stop(directive)
    return None


def _stop(directive: Mapping[str, Any]) -> dict[str, Any]:
    return {key: directive.get(key) for key in ("action", "rule", "message", "terminal_state",
                                                "seq", "created_at")}


def _child(run: RunView) -> dict[str, Any]:
    return {"id": run.key, "agent": run.agent, "state": "ended" if run.ended else "active",
            "terminal_state": run.terminal_state.value if run.terminal_state else None,
            "terminal_reason": run.terminal_reason, "has_final_answer": run.has_final_answer,
            "iterations": run.iterations, "tool_calls": run.tool_calls, "errors": run.errors,
            "elapsed_seconds": run.elapsed_seconds}


def _start_of(run: RunView, activity: Sequence[ActivityEntry]) -> float:
    if run.started_at is not None:
        return run.started_at
    if activity:
        return activity[0].at
    return run.first_seen


def _header(run: RunView) -> dict[str, Any]:
    signals = run.signals
    return {
        "id": run.key,
        "agent": run.agent,
        "session": run.session,
        "trace_id": run.trace_id,
        "parent_run": run.parent_run,
        "state": "ended" if run.ended else "active",
        "terminal_state": run.terminal_state.value if run.terminal_state else None,
        "terminal_reason": run.terminal_reason,
        "has_final_answer": run.has_final_answer,
        "finish_reason": signals["finish_reason"] or None,
        "started_at": iso(run.started_at if run.started_at is not None else run.first_seen),
        "ended_at": iso(run.ended_at),
        "elapsed_seconds": round(run.elapsed_seconds, 3),
        "idle_seconds": round(run.idle_seconds(), 3),
        "iterations": run.iterations,
        "tool_calls": run.tool_calls,
        "messages": run.messages,
        "input_tokens": signals["input_tokens"],
        "output_tokens": signals["output_tokens"],
        "total_tokens": run.total_tokens,
        "cost_usd": round(signals["cost_usd"], 6),
        "unpriced_calls": signals["unpriced_calls"],
        "errors": run.errors,
        "last_error": run.last_error or None,
        "budget": plain(run.budget),
    }


def _step(entry: ActivityEntry, start: float) -> dict[str, Any]:
    return {"seq": entry.seq, "offset_seconds": round(entry.at - start, 3), "at": iso(entry.at),
            "kind": entry.kind, "name": entry.name, "detail": entry.detail,
            "result": entry.result, "error": entry.error}


def _tool_usage(run: RunView, tool_entries: Sequence[ActivityEntry]) -> list[dict[str, Any]]:
    """Per tool: calls (from the run's complete counts) and errors (from the log)."""
    calls: Counter[str] = Counter(run.signals["tools"])
    logged: Counter[str] = Counter(e.name for e in tool_entries)
    errors: Counter[str] = Counter(e.name for e in tool_entries if e.error)
    for name, count in logged.items():
        if calls[name] < count:  # a restored or partial run: never show fewer than were logged
            calls[name] = count
    return [{"name": name, "calls": count, "errors": errors[name]}
            for name, count in sorted(calls.items(), key=lambda item: (-item[1], item[0]))]


def _findings(tool_entries: Sequence[ActivityEntry], start: float) -> list[dict[str, Any]]:
    """Results of successful calls, most recent first; a result seen again is listed once,
    at its latest call."""
    findings: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for entry in reversed(tool_entries):
        if entry.error or not entry.result or not entry.result.strip():
            continue
        key = (entry.name, entry.result)
        if key in seen:
            continue
        seen.add(key)
        findings.append({"tool": entry.name, "arguments": entry.detail, "result": entry.result,
                         "offset_seconds": round(entry.at - start, 3)})
        if len(findings) >= MAX_FINDINGS:
            break
    return findings


def _final_output(run: RunView, activity: Sequence[ActivityEntry]) -> str | None:
    if run.final_output:
        return run.final_output
    for entry in reversed(activity):
        if entry.kind in ("answer", "agent") and entry.result and not entry.error:
            return entry.result
    return None


def _errors(activity: Sequence[ActivityEntry], start: float) -> list[dict[str, Any]]:
    """Distinct errors (same text once ids, numbers and paths are masked), most frequent first;
    each shows its latest wording. Only failed model and tool calls, as the header counts them:
    an agent span repeats the failure of the call below it (the run's end shows in its state)."""
    groups: dict[str, dict[str, Any]] = {}
    for entry in activity:
        if not entry.error or entry.kind == "agent":
            continue
        signature = mask(entry.error)
        group = groups.get(signature)
        if group is None:
            if len(groups) >= MAX_DISTINCT_ERRORS:
                continue
            group = groups[signature] = {"error": entry.error, "count": 0, "names": [],
                                         "last_offset_seconds": 0.0}
        group["count"] += 1
        group["error"] = entry.error
        group["last_offset_seconds"] = round(entry.at - start, 3)
        if entry.name not in group["names"]:
            group["names"].append(entry.name)
    return sorted(groups.values(), key=lambda g: -g["count"])


# -- suggested next steps -----------------------------------------------------------------------

def _next_steps(run: RunView, activity: Sequence[ActivityEntry],
                tool_entries: Sequence[ActivityEntry], stop: Mapping[str, Any] | None
                ) -> list[str]:
    notes: list[str] = []
    if stop is not None and not run.ended:
        told = ("stopped this run" if stop["action"] == "abort"
                else "told this run to wrap up")
        notes.append(f"The watchdog {told} ({stop['rule']}, {stop['terminal_state']}): "
                     f"{one_line(stop['message'] or '', LINE_RESULT_CHARS)} It should end with "
                     f"its report; a follow-up should start from this report, not repeat its "
                     f"steps.")
    if run.ended:
        state = run.terminal_state.value if run.terminal_state else "ended"
        if run.has_final_answer and state == "completed":
            notes.append("The run completed with a final answer; nothing is left to continue.")
        elif run.has_final_answer:
            notes.append(f"The run stopped as {state} but did produce an answer: check it is "
                         f"complete before relying on it.")
        else:
            notes.append(f"The run ended ({state}) without a final answer: a follow-up should "
                         f"start from the partial findings of this report instead of repeating "
                         f"the calls.")
    notes.extend(_repeat_notes(run, tool_entries))
    notes.extend(_error_notes(run, activity))
    cycle_repeats = run.signals["cycle_repeats"]
    if cycle_repeats >= REPEAT_NOTE_MIN:
        notes.append(f"The tool calls go round in a cycle (the same sequence {cycle_repeats} "
                     f"times): the agent is not converging; change the plan.")
    notes.extend(_budget_notes(run))
    if not notes:
        notes.append("Nothing in the log suggests a problem; the run can carry on.")
    return notes


def _repeat_notes(run: RunView, tool_entries: Sequence[ActivityEntry]) -> list[str]:
    notes: list[str] = []
    calls = Counter((e.name, e.detail) for e in tool_entries if e.detail is not None)
    repeated = [(key, n) for key, n in calls.most_common(3) if n >= REPEAT_NOTE_MIN]
    for (name, detail), count in repeated:
        notes.append(f"`{name}` was called {count} times with the same arguments "
                     f"({one_line(detail or '', LINE_DETAIL_CHARS)}): reuse the earlier result "
                     f"instead of calling it again.")
    repeated_call = run.signals["repeated_tool_call"]
    if not repeated and repeated_call >= REPEAT_NOTE_MIN:
        notes.append(f"One tool call was repeated {repeated_call} times with identical "
                     f"arguments (before the steps still in the log).")
    results: dict[tuple[str, str], set[str | None]] = {}
    for entry in tool_entries:
        if entry.result and not entry.error:
            results.setdefault((entry.name, entry.result), set()).add(entry.detail)
    for (name, result), arguments in results.items():
        if len(arguments) >= REPEAT_NOTE_MIN + 1:
            notes.append(f"`{name}` returned the same result for {len(arguments)} different "
                         f"arguments ({one_line(result, 80)}): varying the arguments is not "
                         f"finding anything new.")
    return notes


def _error_notes(run: RunView, activity: Sequence[ActivityEntry]) -> list[str]:
    notes: list[str] = []
    counts = Counter(mask(e.error) for e in activity if e.error)
    latest = {mask(e.error): e.error for e in activity if e.error}
    for signature, count in counts.most_common(2):
        if count >= REPEAT_NOTE_MIN:
            notes.append(f"The same error occurred {count} times ("
                         f"{one_line(latest[signature], LINE_RESULT_CHARS)}): retrying will not "
                         f"fix it; change the approach or report it.")
    if run.consecutive_errors >= REPEAT_NOTE_MIN and not run.ended:
        notes.append(f"The last {run.consecutive_errors} steps all failed.")
    return notes


def _budget_notes(run: RunView) -> list[str]:
    if run.ended:
        return []
    budget = run.budget
    notes: list[str] = []
    for what, label in (("tool_calls", "tool calls"), ("iterations", "model calls")):
        remaining = budget.get("remaining_" + what)
        if remaining is not None and remaining <= LOW_BUDGET_NOTE:
            notes.append(f"Only {format_number(remaining)} of "
                         f"{format_number(budget['max_' + what])} {label} are "
                         f"left: wrap up and report what was found.")
    return notes


# -- rendering ------------------------------------------------------------------------------------

def activity_lines(activity: Sequence[ActivityEntry], start: float | None = None) -> list[str]:
    """One compact line per step, e.g. ``+12.3s tool read_file({"path":"a.py"}) -> 'x = 1'``,
    each whole line redacted. Offsets count from ``start`` (default: the first entry)."""
    if not activity:
        return []
    # In the order the steps ended: an export request groups spans by instrumentation scope,
    # and the ingest holds some back to the request's end, so arrival order is not step order.
    activity = sorted(activity, key=ENDED_AT)
    origin = activity[0].at if start is None else start
    return [redact(step_line(entry, origin)) for entry in activity]


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown, for humans and for a model's context."""
    run = report["run"]
    out: list[str] = [f"# Progress report: {run['id']}", ""]
    out += _header_lines(run)
    stop = report.get("stop")
    if stop is not None:
        out.append(f"- **Stopped by:** {stop['rule']} ({stop['action']}, "
                   f"{stop['terminal_state']}): {one_line(stop['message'] or '')}")
    if report["parent_run"] or report["children"]:
        out += ["", "## Run tree", "", *_tree_lines(run, report)]
    out += ["", "## Tool usage", ""]
    if report["tools"]:
        out += ["| tool | calls | errors |", "|---|---:|---:|"]
        out += [f"| {_cell(t['name'])} | {t['calls']} | {t['errors']} |" for t in report["tools"]]
    else:
        out.append("No tool calls.")
    out += ["", "## Step-by-step log", ""]
    if report["steps_omitted"]:
        out.append(f"(the first {report['steps_omitted']} steps are no longer in the log)")
        out.append("")
    if report["steps"]:
        out += [f"{step['seq']}. {_step_text(step)}" for step in report["steps"]]
    else:
        out.append("No steps recorded yet.")
    out += ["", "## Partial findings", ""]
    if report["final_output"]:
        out.append(f"- **Final output:** {one_line(report['final_output'])}")
    for finding in report["findings"]:
        args = one_line(finding["arguments"] or "", LINE_DETAIL_CHARS)
        out.append(f"- `{one_line(finding['tool'])}`({args}) at "
                   f"+{format_duration(finding['offset_seconds'])}: {one_line(finding['result'])}")
    if not report["final_output"] and not report["findings"]:
        out.append("No results yet.")
    out += ["", "## Errors", ""]
    if report["errors"]:
        for error in report["errors"]:
            names = ", ".join(f"`{one_line(n)}`" for n in error["names"])
            out.append(f"- {error['count']}× {one_line(error['error'], LINE_RESULT_CHARS)} "
                       f"({names})")
    else:
        out.append("No errors.")
    out += ["", "## Suggested next steps", ""]
    out += [f"- {note}" for note in report["next_steps"]]
    return redact("\n".join(out) + "\n")


def _tree_lines(run: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """This run under its parent, its nested agents' runs under it."""
    lines, indent = [], ""
    if report["parent_run"]:
        lines.append(f"- parent run `{report['parent_run']}`")
        indent = "  "
    lines.append(f"{indent}- **this run** `{run['id']}` ({one_line(run['agent'])})")
    for child in report["children"]:
        state = child["terminal_state"] or f"{child['state']}"
        if child["terminal_reason"]:
            state += f" ({child['terminal_reason']})"
        lines.append(f"{indent}  - `{child['id']}` ({one_line(child['agent'])}): {state}, "
                     f"{child['iterations']} model calls, {child['tool_calls']} tool calls, "
                     f"{child['errors']} errors, final answer "
                     f"{'yes' if child['has_final_answer'] else 'no'}")
    return lines


def _header_lines(run: dict[str, Any]) -> list[str]:
    if run["state"] == "ended":
        state = f"ended: {run['terminal_state']}"
        if run["terminal_reason"]:
            state += f" ({run['terminal_reason']})"
    else:
        state = f"active, idle {format_duration(run['idle_seconds'])}"
    lines = [
        f"- **Agent:** {one_line(run['agent'])}",
        f"- **State:** {state}",
        f"- **Final answer:** {'yes' if run['has_final_answer'] else 'no'}",
        f"- **Elapsed:** {format_duration(run['elapsed_seconds'])}",
        f"- **Iterations:** {run['iterations']}",
        f"- **Tool calls:** {run['tool_calls']}",
        f"- **Tokens used:** {run['total_tokens']} (in {run['input_tokens']}, "
        f"out {run['output_tokens']})",
        f"- **Cost:** USD {format_usd(run['cost_usd'])}" + (
            f" ({run['unpriced_calls']} model calls unpriced: no known price, not counted)"
            if run["unpriced_calls"] else ""),
        f"- **Errors:** {run['errors']}",
    ]
    if run["session"]:
        lines.insert(1, f"- **Session:** {one_line(run['session'])}")
    if run.get("trace_url"):
        lines.append(f"- **Trace:** <{run['trace_url']}>")
    budget = run["budget"]
    limits = [f"{key[len('max_'):].replace('_', ' ')} "
              f"{shown(budget['remaining_' + key[4:]])} of {shown(value)} left"
              for key, value in budget.items() if key.startswith("max_")
              for shown in (format_usd if key == "max_cost_usd" else format_number,)]
    if limits:
        lines.append(f"- **Budget:** {'; '.join(limits)}")
    return lines


def _step_text(step: dict[str, Any]) -> str:
    offset = "+" + format_duration(max(step["offset_seconds"], 0.0))
    text = f"`{offset}` **{step['kind']}** `{one_line(step['name'])}`"
    if step["detail"]:
        text += f" {one_line(step['detail'], LINE_DETAIL_CHARS)}"
    if step["error"]:
        text += f" → **error:** {one_line(step['error'], LINE_RESULT_CHARS)}"
    elif step["result"]:
        text += f" → {one_line(step['result'], LINE_RESULT_CHARS)}"
    return text


def _cell(text: str) -> str:
    return one_line(text).replace("|", "\\|")


def _redact_all(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redact_all(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_redact_all(item) for item in value]
    return value
