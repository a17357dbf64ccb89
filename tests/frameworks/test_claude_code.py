"""Claude Code (``@anthropic-ai/claude-code``, ``claude -p``), an agent with no line of ours in
it: installed by ``make test`` from the npm registry (``ts/claude_code``, its version pinned by
``package-lock.json``: the package's launcher and its prebuilt binary for this platform, an
optional dependency of the same version), run with no internet (its telemetry to Anthropic,
its update checks and its other side traffic off: ``DISABLE_TELEMETRY``,
``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC``, ``DISABLE_AUTOUPDATER``) and an API key from the
environment, never a login.

Steered by ``ANTHROPIC_BASE_URL`` alone, on both relays, in front of the scripted upstream
(:mod:`tests.frameworks.fakellm`), whose model calls its own ``Bash`` tool, which Claude Code
really runs in a directory of the test's (each call appends a line to ``ran.txt``):

* budget: a rule pack gives it ``max_tool_calls: 3``; the model calls ``Bash`` forever — the
  countdown in the request's ``system`` is the true number left at each request, 3 commands
  ran, the 4th request withdraws the tools (``tool_choice: {"type": "none"}``) and its answer,
  the report, is what ``claude -p`` prints; one run, 4 model calls, 3 tool calls;
* loop: the model runs the same command again and again — ``tool-cycle`` winds it down at the
  4th, its grace of 2 counts down, the next request withdraws the tools and its answer is what
  ``claude -p`` prints; the upstream gets nothing after it;
* a sub-agent (its ``Agent`` tool) is a conversation of its own: a run of its own, with its own
  budget (a known limit, docs/model-endpoint.md);
* watched by its own OpenTelemetry too (:mod:`tests.frameworks.test_claude_code_otel` reads
  it alone): one run, its trace paired with the endpoint's run by the tool-call ids its tool
  spans carry, in the session its requests name (``X-Claude-Code-Session-Id``).

No side request reaches the upstream in ``claude -p`` with its non-essential traffic off (no
title, no token count, no small model's call): each test counts every request the scripted
model got (its small model is the same script).
"""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM, Step
from tests.frameworks.harness import DRIVER_TIMEOUT, clean_environ
from tests.frameworks.test_model_endpoint_frameworks import (
    AGENT,
    BUDGET,
    GRACE_LEFT,
    KEY,
    LEFT,
    LOOP_NOTE,
    REPORT,
    budgeted,  # noqa: F401 (its sidecars, a pair per relay)
    plain,  # noqa: F401
    run_ids,
    the_new_run,
)
from tests.harness import RunningServer, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

CLAUDE_CODE_DIR = Path(__file__).resolve().parent / "ts" / "claude_code"
CLAUDE = CLAUDE_CODE_DIR / "node_modules" / ".bin" / "claude"
_TASKS = itertools.count(1)


def claude_binary() -> Path:
    target = CLAUDE_CODE_DIR.relative_to(CLAUDE_CODE_DIR.parents[3]) / "node_modules/.installed"
    assert CLAUDE.exists(), f"{CLAUDE} is missing: `make {target}` installs it (make test does)"
    return CLAUDE


def claude_env(home: Path, base_url: str, model: str) -> dict[str, str]:
    """Claude Code's environment: the base URL, an API key, its models (the main one and the
    small one it uses for side requests, both scripted), no traffic but the model's."""
    env = clean_environ("ANTHROPIC_", "CLAUDE_", "OTEL_")
    env.update({
        "HOME": str(home),  # its settings and sessions: the test's, not the user's
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": KEY,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
    })
    return env


def run_claude(tmp: Path, base_url: str, model: str, task: str,
               extra: dict[str, str] | None = None, tools: str = "Bash,Read"
               ) -> tuple[str, list[str]]:
    """``claude -p TASK`` in a directory of its own; what it printed and the commands its
    ``Bash`` tool really ran (the lines they appended to ``ran.txt``). Each invocation's task
    is its own (the same input again and again is a loop across agents, which the default
    pack winds down)."""
    task = f"{task} (case {next(_TASKS)})"
    work, home = tmp / "work", tmp / "home"
    work.mkdir(parents=True)
    home.mkdir(parents=True)
    env = {**claude_env(home, base_url, model), **(extra or {})}
    result = subprocess.run(
        [str(claude_binary()), "-p", "--model", model, "--allowedTools", tools, "--", task],
        env=env, cwd=work, capture_output=True, text=True, timeout=DRIVER_TIMEOUT)
    assert result.returncode == 0, (result.returncode, result.stdout[-3000:],
                                    result.stderr[-3000:])
    ran = work / "ran.txt"
    return result.stdout.strip(), ran.read_text().splitlines() if ran.exists() else []


def bash(line: str) -> Step:
    return fakellm.call("Bash", command=f"echo '{line}' >> ran.txt", description="note it")


def system_text(body: dict[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, list):
        return "\n".join(str(block.get("text", "")) for block in system
                         if isinstance(block, dict))
    return str(system or "")


def searching(index: int, body: dict[str, Any]) -> Step:
    """A new command on every request that offers tools; the report when none does."""
    return bash(f"term {index}") if fakellm.offers_tools(body) else fakellm.answer(REPORT)


def repeating(index: int, body: dict[str, Any]) -> Step:
    return bash("the same") if fakellm.offers_tools(body) else fakellm.answer(REPORT)


def invoke(sidecar: RunningServer, llm: FakeLLM, tmp: Path, name: str,
           script: fakellm.Script) -> tuple[str, list[str], list[dict[str, Any]], set[str]]:
    """Claude Code on ``script`` (its model ``name``) through ``sidecar``'s endpoint: what it
    printed, the commands it ran, what the upstream got, and the runs there were before."""
    model = llm.script(name, script)
    before = run_ids(sidecar)
    output, ran = run_claude(tmp, sidecar.url("model"), model, "Find the file.")
    return output, ran, llm.requests(model), before


def test_a_budget_counts_claude_code_down_and_its_report_is_the_output(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    output, ran, requests, before = invoke(budgeted, llm, tmp_path,
                                           f"claude-code-budget-{model_relay}", searching)
    assert ran == ["term 0", "term 1", "term 2"], ran
    assert output == REPORT
    assert len(requests) == BUDGET + 1
    said = [LEFT.findall(system_text(body)) for body in requests]
    assert said == [[("3", "3")], [("2", "3")], [("1", "3")], []], said
    assert [fakellm.offers_tools(body) for body in requests] == [True] * BUDGET + [False]
    assert "This run is being stopped" in system_text(requests[-1])
    run = the_new_run(budgeted, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        BUDGET + 1, BUDGET, "tool_limit_reached"), run


def test_a_looping_claude_code_is_wound_down_then_stopped(
        plain: RunningServer, llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    output, ran, requests, before = invoke(plain, llm, tmp_path,
                                           f"claude-code-loop-{model_relay}", repeating)
    assert output == REPORT
    assert ran == ["the same"] * 6, ran
    assert [LOOP_NOTE in system_text(body) for body in requests][:6] == [False] * 4 + [True] * 2
    assert [GRACE_LEFT.findall(system_text(body)) for body in requests] == [
        []] * 4 + [["2"], ["1"], []]
    assert "the 2 tool calls allowed after the wind-down (tool-cycle) are used" in system_text(
        requests[-1])
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 6 + [False]
    run = the_new_run(plain, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        7, 6, "loop_detected"), run
    assert len(llm.requests(f"claude-code-loop-{model_relay}")) == 7  # nothing after the final


SUBTASK = "Look in /srv."


def delegating(index: int, body: dict[str, Any]) -> Step:
    """The main conversation hands a sub-agent the subtask (the ``Agent`` tool, in the
    foreground), then searches; the sub-agent runs two commands and answers."""
    messages = body.get("messages") or []
    turns = sum(1 for message in messages if message.get("role") == "assistant")
    if not fakellm.offers_tools(body):
        return fakellm.answer(REPORT)
    if SUBTASK in json.dumps(messages[0]) and "Find the file." not in json.dumps(messages[0]):
        return bash(f"sub {turns}") if turns < 2 else fakellm.answer("Sub: /srv/a.txt.")
    if turns == 0:
        return fakellm.call("Agent", description="look in /srv", prompt=SUBTASK,
                            subagent_type="general-purpose", run_in_background=False)
    return bash(f"main {turns}")


def test_a_sub_agent_is_a_child_run_of_its_callers(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    """Claude Code's sub-agent (its ``Agent`` tool) is a conversation of its own, in the same
    process: its own system prompt and first message; its requests name it within the session
    (``x-claude-code-agent-id``; the main conversation's name none). It is a child run of the
    main conversation's run (``parent_run``), as a nested agent is in a trace: each with its
    own budget, counted down truly: the main one's 3 tool calls (the ``Agent`` call and two
    commands), then its report; the sub-agent's 2 commands and its answer."""
    model = llm.script(f"claude-code-sub-agent-{model_relay}", delegating)
    before = run_ids(budgeted)
    output, ran = run_claude(tmp_path, budgeted.url("model"), model, "Find the file.",
                             tools="Bash,Read,Agent")
    assert output == REPORT
    assert ran == ["sub 0", "sub 1", "main 1", "main 2"], ran
    requests = llm.requests(model)
    sub = [SUBTASK in json.dumps(body["messages"][0]) for body in requests]
    assert sub == [False, True, True, True, False, False, False], sub
    said = [LEFT.findall(system_text(body)) for body in requests]
    assert said == [[("3", "3")], [("3", "3")], [("2", "3")], [("1", "3")], [("2", "3")],
                    [("1", "3")], []], said

    def ended() -> list[dict[str, Any]] | None:
        runs = [run for run in budgeted.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        return runs if len(runs) == 2 and all(run["state"] == "ended" for run in runs) \
            else None

    runs = sorted(wait_until(ended, what="the two runs"), key=lambda run: -run["iterations"])
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"]) for run in runs] == [
        (BUDGET + 1, BUDGET, "tool_limit_reached"), (3, 2, "completed")], runs
    # both in the session its requests name (X-Claude-Code-Session-Id, the sub-agent's too)
    sessions = {headers["x-claude-code-session-id"] for headers in llm.request_headers(model)}
    assert len(sessions) == 1 and [run["session"] for run in runs] == [*sessions] * 2, runs
    # the sub-agent's requests name it, the main conversation's none: its run is the child
    named = [headers.get("x-claude-code-agent-id") for headers in llm.request_headers(model)]
    assert [name is not None for name in named] == sub and len(set(named) - {None}) == 1, named
    main, child = (budgeted.get_json(f"/v1/runs/{run['id']}") for run in runs)
    assert (main["parent_run"], child["parent_run"]) == (None, main["id"]), (main, child)
    assert [each["id"] for each in main["children"]] == [child["id"]], main["children"]


# -- watched through its own OpenTelemetry ---------------------------------------------------

def telemetry_env(otlp_http: str, protocol: str) -> dict[str, str]:
    """Claude Code's own OpenTelemetry, to the sidecar: its log events and (beta) its spans,
    the Bash tool's command and the tools' output on them, its answers' text in its
    ``assistant_response`` log events."""
    return {"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1",
            "OTEL_TRACES_EXPORTER": "otlp", "OTEL_LOGS_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none", "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_http,
            "OTEL_LOG_TOOL_DETAILS": "1", "OTEL_LOG_TOOL_CONTENT": "1",
            "OTEL_LOG_ASSISTANT_RESPONSES": "1"}


def test_watched_and_steered_at_once_is_one_run(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    """Its own spans (OTLP/HTTP protobuf) to the sidecar that steers it: the steering is as
    above, and it is one run, counted once. No request names its trace (Claude Code sends no
    ``traceparent``) and no span its response (no ``gen_ai.response.id``), but each of its
    tool spans carries the id of the tool call the endpoint handed over
    (``gen_ai.tool.call.id``): the endpoint's run takes its trace, its model-call spans pair
    with the endpoint's calls by their usage, its tool spans with the calls handed over by
    id. The run is in Claude Code's session, which its requests name
    (``X-Claude-Code-Session-Id``) as its spans do."""
    model = llm.script(f"claude-code-both-{model_relay}", searching)
    before = run_ids(budgeted)
    output, ran = run_claude(tmp_path, budgeted.url("model"), model, "Find the file.",
                             telemetry_env(budgeted.otlp_http, "http/protobuf"))
    assert ran == ["term 0", "term 1", "term 2"], ran
    assert output == REPORT
    assert not any("traceparent" in headers for headers in llm.request_headers(model))
    session = llm.request_headers(model)[0]["x-claude-code-session-id"]

    endpoint_records = 2 * BUDGET + 1  # (its model calls and the tool calls handed over)

    def joined() -> list[dict[str, Any]] | None:
        runs = [run for run in budgeted.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        # (its spans come as claude exits: the run has them when it holds more records than
        # the endpoint made, and its trace's run would be a second by then)
        return runs if any(run["state"] == "ended" and budgeted.get_json(
            f"/v1/runs/{run['id']}")["spans"] > endpoint_records for run in runs) else None

    runs = wait_until(joined, what="its spans to join its run")
    # (its spans name no agent, only their service: the endpoint's name, that its budget is
    # the rule pack's for, stays)
    assert [(run["id"].split(":")[0], run["agent"], run["session"], run["iterations"],
             run["tool_calls"], run["terminal_state"]) for run in runs] == [
        ("model", AGENT, session, BUDGET + 1, BUDGET, "tool_limit_reached")], runs
    detail = budgeted.get_json(f"/v1/runs/{runs[0]['id']}")
    assert detail["signals"]["tools"] == {"Bash": BUDGET}, detail["signals"]
    # the tokens the upstream billed (its usage: a quarter of each request's system and
    # messages), once
    assert detail["signals"]["input_tokens"] == sum(
        sum(len(json.dumps(part)) for part in [body.get("system", ""), *body["messages"]]) // 4
        + 1 for body in llm.requests(model)), detail["signals"]


def test_watched_and_steered_with_a_sub_agent(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    """A sub-agent, watched and steered: its conversation is a child run of the main
    conversation's at the endpoint (3 model calls, 2 commands), and Claude Code's trace of the
    whole invocation joins the main conversation's run, but for the spans that ran in the
    sub-agent (below the ``Agent`` call's span, beside the sub-agent's command whose call id its
    run handed over): those are the child run's, each call counted once there. The two readings
    agree: the main run 4 calls and 3 tool calls (the ``Agent`` call among them), the
    sub-agent's 3 and 2, as at the endpoint alone. Both runs are in Claude Code's session."""
    model = llm.script(f"claude-code-sub-both-{model_relay}", delegating)
    before = run_ids(budgeted)
    output, ran = run_claude(tmp_path, budgeted.url("model"), model, "Find the file.",
                             telemetry_env(budgeted.otlp_http, "http/protobuf"),
                             tools="Bash,Read,Agent")
    assert (output, ran) == (REPORT, ["sub 0", "sub 1", "main 1", "main 2"]), (output, ran)
    session = llm.request_headers(model)[0]["x-claude-code-session-id"]
    endpoint_records = 2 * BUDGET + 1  # (the main run's model calls and tool calls handed over)

    def joined() -> list[dict[str, Any]] | None:
        runs = [run for run in budgeted.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        return runs if len(runs) == 2 and all(run["state"] == "ended" for run in runs) and any(
            budgeted.get_json(f"/v1/runs/{run['id']}")["spans"] > endpoint_records
            for run in runs) else None

    runs = sorted(wait_until(joined, what="its spans to join the main run"),
                  key=lambda run: -run["iterations"])
    assert [(run["session"], run["iterations"], run["tool_calls"], run["terminal_state"])
            for run in runs] == [(session, BUDGET + 1, BUDGET, "tool_limit_reached"),
                                 (session, 3, 2, "completed")], runs
    main, child = (budgeted.get_json(f"/v1/runs/{run['id']}") for run in runs)
    assert [main["signals"]["tools"], child["signals"]["tools"]] == [
        {"Agent": 1, "Bash": 2}, {"Bash": 2}], (main["signals"], child["signals"])
    assert (main["parent_run"], child["parent_run"]) == (None, main["id"]), (main, child)
    # the sub-agent's spans came to its run: more records than the endpoint's 5 there
    assert child["spans"] > 5, child
