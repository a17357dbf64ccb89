"""The Cline CLI — a TypeScript coding agent compiled with Bun into a platform binary shipped on
npm — steered through the sidecar's model endpoint with no code in it (DESIGN §12), on both
relays.

``make test`` installs it with ``npm ci`` from ``cline/package-lock.json`` (``cline`` 3.0.65 and
its ``@cline/cli-linux-x64`` binary). Each test runs ``cline`` once, in task mode (a prompt
argument: act mode, its tools auto-approved, the answer printed on stdout), in a temp dir of its
own, its ``HOME`` there with two files where ``cline auth`` would write them:
``~/.cline/data/settings/providers.json`` picks the ``openai-compatible`` provider with the
sidecar's base URL, a key and a model, and ``global-settings.json`` opts out of its telemetry
and auto-update. ``CLINE_SESSION_BACKEND_MODE=local`` runs the session in the process (else
``cline`` starts a background hub daemon that outlives it). One lookup leaves all the same: its
feature flags, from its maintainers' analytics service, which nothing but its own test switch
(``IS_TEST=true``) turns off; offline it fails at once and Cline goes on.

What Cline 3.0.65 sends through the ``openai-compatible`` provider: Chat Completions, streamed,
with native tool calls (no XML-tagged tool uses in its text), the whole conversation on every
request: its system prompt, the task, each call with its result. It offers 25 tools; its shell
tool is ``run_commands`` (``{"commands": [...]}``, really run in the temp dir: each appends its
term to ``ran.txt``); an answer with no tool call ends the task, and ``cline`` prints it. Behind
the sidecar is the scripted upstream (:mod:`tests.frameworks.fakellm`), whose recorded request
bodies are what the model read.

Steered: a budget counts down and ends in the report, its calls batched or not; a tool cycle is
wound down, then its final request; a rule's abort is answered by the endpoint; a sub-agent of
its ``spawn_agent`` tool is a child run, counted down on its own; its history compacted keeps
its budget. Its OpenTelemetry is not a
user's to point anywhere (docs/frameworks.md: product analytics to Cline's own collector, or an
organization's remote config): it is opted out of, and only steered here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import clean_environ, installed_bin, run_coding_agent
from tests.frameworks.test_model_endpoint_frameworks import (  # noqa: F401 (its sidecars)
    BUDGET,
    KEY,
    LEFT,
    REPORT,
    budgeted,
    check_cycle_wound_down,
    check_no_control_text_in_user_messages,
    instructions,
    plain,
    run_ids,
    the_new_run,
)
from tests.frameworks.test_model_endpoint_qwen_code import Invocation
from tests.frameworks.test_model_endpoint_stop import NOTE, stopping  # noqa: F401
from tests.harness import RunningServer, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

CLINE_DIR = Path(__file__).resolve().parent / "cline"
CLINE = CLINE_DIR / "node_modules" / ".bin" / "cline"
TOOL = "run_commands"  # Cline's shell tool: {"commands": ["..."]}
# opted out of its telemetry (else sent to Cline's own collector) and of auto-update
GLOBAL_SETTINGS = {"telemetryOptOut": True, "autoUpdateEnabled": False}


def cline() -> Path:
    return installed_bin(CLINE)


def providers(base_url: str, model: str, key: str = KEY, **more: Any) -> dict[str, Any]:
    """``providers.json``, as ``cline auth -p openai-compatible -k KEY -m MODEL -b URL`` writes
    it (``updatedAt`` is required: without it Cline ignores the file and falls back to its own
    provider, which needs a login); ``more``: more of the provider's settings."""
    return {"version": 1, "lastUsedProvider": "openai-compatible", "modes": {},
            "providers": {"openai-compatible": {
                "settings": {"provider": "openai-compatible", "apiKey": key, "model": model,
                             "baseUrl": base_url, **more},
                "updatedAt": "2026-01-01T00:00:00.000Z", "tokenSource": "manual"}}}


def run_cline(base_url: str, model: str, tmp: Path, **more: Any) -> tuple[list[str], str]:
    """``cline --json`` once in ``tmp`` against the OpenAI-compatible ``base_url``: the terms its
    shell commands appended to ``ran.txt``, and its answer (:func:`its_answer`). ``more``: more
    of its provider's settings."""
    work, home = tmp / "work", tmp / "home"
    work.mkdir()
    settings = home / ".cline" / "data" / "settings"
    settings.mkdir(parents=True)
    (settings / "providers.json").write_text(json.dumps(providers(base_url, model, **more)))
    (settings / "global-settings.json").write_text(json.dumps(GLOBAL_SETTINGS))
    env = {**clean_environ("CLINE_"), "HOME": str(home), "CLINE_SESSION_BACKEND_MODE": "local"}
    # (a task of its own: the same task again and again in one session, its runs ended at their
    # budget, is a loop across runs, agent-ping-pong, the third wound down)
    task = f"Find the file ({tmp.name})."
    ran, printed = run_coding_agent([str(cline()), "--json", task], env, work)
    return ran, its_answer(printed)


def its_answer(printed: str) -> str:
    """The answer ``cline --json`` ends its task with: its last event, ``run_result``, says the
    task completed, and the last ``done`` event carries the text (what plain ``cline`` prints
    after its tool log; a sub-agent's ``done`` comes before its caller's)."""
    events = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
    assert events[-1]["type"] == "run_result", events[-1]
    assert events[-1]["finishReason"] == "completed", events[-1]
    done = [event["event"] for event in events if event["type"] == "agent_event"
            and event["event"]["type"] == "done"]
    assert done and done[-1]["reason"] == "completed", done
    return str(done[-1]["text"])


def invoke(sidecar: RunningServer, llm: FakeLLM, script: fakellm.Script, tmp: Path
           ) -> Invocation:
    """``cline`` once through ``sidecar``'s model endpoint, its model ``script``."""
    model = llm.script(f"cline-{tmp.name}", script)
    before = run_ids(sidecar)
    ran, printed = run_cline(sidecar.url("model") + "/v1", model, tmp)
    requests = llm.requests(model)
    run = the_new_run(sidecar, before)
    return Invocation(ran, printed, requests, run, len(llm.requests(model)))


def shell(term: str) -> dict[str, Any]:
    return {"commands": [f"echo '{term}' >> ran.txt"]}


def searching() -> fakellm.Script:
    return fakellm.looping(TOOL, lambda i: shell(f"term {i}"), REPORT)


def cycling(work: Path) -> fakellm.Script:
    """Its shell tool, then its file editor, with the same arguments round and round (a tool
    cycle; the report when no tools are offered)."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not fakellm.offers_tools(body):
            return fakellm.answer(REPORT)
        if index % 2 == 0:
            return fakellm.call(TOOL, **shell("the file"))
        return fakellm.call("editor", path=str(work / "notes.txt"), new_text="searched")
    return pick


def test_cline_budget_counts_down_then_the_report_is_its_answer(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    it = invoke(budgeted, llm, searching(), tmp_path)
    requests = it.requests
    assert it.ran == ["term 0", "term 1", "term 2"]  # never past the budget
    assert len(requests) == BUDGET + 1
    # what Cline sends: the whole conversation, streamed, each call with its result
    assert all(body.get("stream") is True for body in requests)
    assert [len(body["messages"]) for body in requests] == [2, 4, 6, 8]
    # the true number left, at the end of its system prompt (after its plan/act modes), in
    # every request that offers tools
    system = [body["messages"][0] for body in requests]
    assert all(message["role"] == "system" for message in system)
    assert [LEFT.findall(message["content"].rsplit("\n\n", 1)[-1]) for message in system] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * BUDGET + [False]
    assert f"all {BUDGET} tool calls used" in instructions(requests[-1])
    check_no_control_text_in_user_messages(requests)
    assert it.printed == REPORT  # the last upstream answer is the one cline ends with
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"],
            it.run["has_final_answer"]) == (BUDGET + 1, BUDGET, "tool_limit_reached", True)
    assert it.after == BUDGET + 1  # and nothing more reached the upstream


def test_a_looping_cline_is_wound_down_then_stopped(
        plain: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """tool-cycle fires at the 8th call (the pair 4 times), the next request winds down with a
    grace of 2, the 11th is the final request: no tools, its answer what ``cline`` ends with."""
    it = invoke(plain, llm, cycling(tmp_path / "work"), tmp_path)
    check_cycle_wound_down(it.requests)
    assert it.ran == ["the file"] * 5  # the shell's half of the 10 calls, really run
    assert (tmp_path / "work" / "notes.txt").read_text() == "searched"
    check_no_control_text_in_user_messages(it.requests)
    assert it.printed == REPORT
    assert (it.run["tool_calls"], it.run["terminal_state"], it.run["has_final_answer"]) == (
        10, "loop_detected", True), it.run
    assert it.after == 11  # the upstream got nothing after the final request


def test_a_stopped_cline_ends_with_the_stop_and_the_upstream_gets_nothing_more(
        stopping: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """A rule's abort at two tool calls: the endpoint answers Cline's next request itself, a
    well-formed streamed answer carrying the stop note, which ``cline`` ends with; the upstream
    got the run's calls before the stop and nothing after."""
    it = invoke(stopping, llm, searching(), tmp_path)
    assert it.ran == ["term 0", "term 1"]
    assert NOTE in it.printed, it.printed
    assert len(it.requests) == it.after == 2
    assert (it.run["tool_calls"], it.run["terminal_state"]) == (2, "loop_detected"), it.run


def in_pairs() -> fakellm.Script:
    """Two shell calls in each answer, as Cline's system prompt asks its model to batch what is
    independent (the report when no tools are offered)."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not fakellm.offers_tools(body):
            return fakellm.answer(REPORT)
        return fakellm.Step(tool_calls=tuple(
            fakellm.ToolCall(TOOL, shell(f"term {index}{half}")) for half in "ab"))
    return pick


def test_cline_batching_its_calls_runs_none_past_the_budget(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """Two calls an answer with a budget of 3: both of the first answer run, the second answer
    is trimmed to the one call left (Cline runs what it is handed), and the next request is
    the final one."""
    it = invoke(budgeted, llm, in_pairs(), tmp_path)
    requests = it.requests
    assert it.ran == ["term 0a", "term 0b", "term 1a"]
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, False]
    # what Cline sent back: each call it ran with its result, the trimmed one never seen
    assert [len(body["messages"]) for body in requests] == [2, 5, 7]
    assert it.printed == REPORT
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"],
            it.run["has_final_answer"]) == (3, BUDGET, "tool_limit_reached", True)
    assert it.after == 3


SUB_SYSTEM = "You search files."
SUB_TASK = "Find the file named a.txt in the workspace and say where it is."
SUB_ANSWER = "It is ./a.txt."


def delegating(index: int, body: dict[str, Any]) -> fakellm.Step:
    """Its ``spawn_agent`` tool first (a sub-agent with a system prompt and a task of its own,
    which runs one shell command and answers), then one shell command, then the report."""
    results = sum(1 for message in body["messages"] if message["role"] == "tool")
    if instructions(body).startswith(SUB_SYSTEM):  # the sub-agent's conversation
        return fakellm.answer(SUB_ANSWER) if results else fakellm.call(TOOL, **shell("sub-agent"))
    return [fakellm.call("spawn_agent", systemPrompt=SUB_SYSTEM, task=SUB_TASK),
            fakellm.call(TOOL, **shell("caller")), fakellm.answer(REPORT)][results]


def test_a_cline_sub_agent_is_a_child_run_counted_down_on_its_own(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """``spawn_agent`` starts a sub-agent in the same process whose conversation is its own
    (its system prompt and its task, from the call's arguments): the endpoint tells it from
    its caller by that task, a text argument of the call its caller waits for, and makes it a
    child run with a budget of its own; the ``spawn_agent`` call is one of its caller's."""
    model = llm.script(f"cline-{tmp_path.name}", delegating)
    before = run_ids(budgeted)
    ran, printed = run_cline(budgeted.url("model") + "/v1", model, tmp_path)
    requests = llm.requests(model)
    assert (ran, printed) == (["sub-agent", "caller"], REPORT)
    sub = [instructions(body).startswith(SUB_SYSTEM) for body in requests]
    assert sub == [False, True, True, False, False]
    # each counted down on its own: the sub-agent from 3, its caller's 2nd call after spawn
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("3", "3")], [("2", "3")], [("2", "3")], [("1", "3")]]

    def ended() -> list[dict[str, Any]] | None:
        runs = [budgeted.get_json(f"/v1/runs/{run['id']}")
                for run in budgeted.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        return runs if len(runs) == 2 and all(run["state"] == "ended" for run in runs) else None

    runs = wait_until(ended, what="the caller's run and its sub-agent's to end")
    caller = next(run for run in runs if run["parent_run"] is None)
    child = next(run for run in runs if run["parent_run"] == caller["id"])
    assert (caller["signals"]["tools"], caller["final_output"]) == (
        {"spawn_agent": 1, "run_commands": 1}, REPORT)
    assert (child["signals"]["tools"], child["final_output"]) == (
        {"run_commands": 1}, SUB_ANSWER)
    assert [(run["iterations"], run["terminal_state"]) for run in (caller, child)] == [
        (3, "completed"), (2, "completed")]


SUMMARISING = "Summarize the provided coding session"  # Cline's compaction's system prompt
SUMMARY = "## Task\nFind the file.\n\n## Completed Work\nSearched twice; nothing found yet."


def summarised() -> fakellm.Script:
    """Its shell tool, each command printing 7 KB (so that Cline compacts its history, its
    context window small), the summary when its compaction asks, the report when no tools
    are offered."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if instructions(body).startswith(SUMMARISING):
            return fakellm.answer(SUMMARY)
        if not fakellm.offers_tools(body):
            return fakellm.answer(REPORT)
        return fakellm.call(TOOL, commands=[f"echo 'term {index}' >> ran.txt; seq 1 1500"])
    return pick


def test_a_cline_history_compacted_keeps_its_budget(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """With a context window of 12,000 tokens Cline compacts its history after two calls: it
    asks for a summary in a conversation of its own (its own system prompt, the session
    written out, no tools), then goes on in a new conversation (the summary as its first user
    message, its latest call and result after it). The new conversation answers the call the
    run waits for: it goes on in that run, its count kept (1 left, then the final request),
    3 calls run in all. Each summary request quotes the run's task and the command it ran
    (not its output: Cline leaves that out) under its own instructions: a request aside of
    the run, its model call the run's (one run of 6 calls), its answer not the run's."""
    model = llm.script(f"cline-{tmp_path.name}", summarised())
    before = run_ids(budgeted)
    ran, printed = run_cline(budgeted.url("model") + "/v1", model, tmp_path,
                             contextWindow=12_000)
    requests = llm.requests(model)
    asides = [instructions(body).startswith(SUMMARISING) for body in requests]
    assert asides == [False, False, True, False, True, False]
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [], [("1", "3")], [], []]
    assert [fakellm.offers_tools(body) for body in requests] == [
        True, True, False, True, False, False]
    assert requests[3]["messages"][1]["content"].startswith(f"Context summary:\n\n{SUMMARY}")
    assert ran == ["term 0", "term 1", "term 3"]  # never past the budget
    assert printed == REPORT

    def ended() -> list[dict[str, Any]] | None:
        runs = [budgeted.get_json(f"/v1/runs/{run['id']}")
                for run in budgeted.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        return runs if runs and all(run["state"] == "ended" for run in runs) else None

    runs = wait_until(ended, what="its run to end")
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"])
            for run in runs] == [(6, BUDGET, "tool_limit_reached", REPORT)], runs
