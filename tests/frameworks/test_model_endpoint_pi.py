"""pi — a TypeScript coding agent on npm (``@mariozechner/pi-coding-agent``), its own tool loop
on its own model library, ``@mariozechner/pi-ai`` — steered through the sidecar's model endpoint
with no code in it (DESIGN §12), on both relays.

``make test`` installs it with ``npm ci`` from ``pi/package-lock.json`` (pi 0.73.1, its optional
clipboard package omitted). Each test runs ``pi -p`` (print mode: the task, then the last
answer on stdout) once in a temp dir of its own, its ``HOME`` there with the one file a user of
it writes to add a model server, ``~/.pi/agent/models.json``: the sidecar as a provider of
``"api": "openai-completions"`` (Chat Completions) and one of ``"api": "anthropic-messages"``
(Messages), their keys read from ``OPENAI_API_KEY`` and ``ANTHROPIC_API_KEY`` (a value that names
an environment variable is read from it); ``--model PROVIDER/MODEL`` picks one.
``PI_OFFLINE=1`` turns off its startup requests (update checks, its install ping): nothing
reaches the network.

What pi sends, on either API: every request streamed (pi-ai has no other mode), the whole
conversation each time: its system prompt (the countdown lands at its end), the task, each call
with its result. It offers 4 tools (``read``, ``bash``, ``edit``, ``write``); ``bash`` really
runs in the temp dir (each appends its term to ``ran.txt``). An answer with no tool call ends
the run. pi has no limit of its own on a run's turns (scripted to call tools for ever, it calls
them for ever), no sub-agents, no OpenTelemetry; behind the sidecar is the scripted upstream
(:mod:`tests.frameworks.fakellm`), whose recorded request bodies are what the model read.

Steered: a budget counts down and ends in the report (Chat Completions and Messages); a tool
cycle is wound down, then its final request; a rule's abort is answered by the endpoint, as an
answer or as the API's error; its history compacted when the model API refuses a request as
past its context window keeps its budget.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    DRIVER_TIMEOUT,
    clean_environ,
    installed_bin,
    run_coding_agent,
)
from tests.frameworks.test_model_endpoint_frameworks import (  # noqa: F401 (its sidecars)
    AGENT,
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
from tests.frameworks.test_model_endpoint_stop import NOTE, STOP_PACK, stopping  # noqa: F401
from tests.harness import RunningServer, endpoint_with_pack, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

PI_DIR = Path(__file__).resolve().parent / "pi"
PI = PI_DIR / "node_modules" / ".bin" / "pi"
TOOL = "bash"  # pi's shell tool: {"command": "..."}
PROVIDERS = {"openai": "watchdog", "anthropic": "watchdog-anthropic"}  # (models_json)


def pi() -> Path:
    return installed_bin(PI)


def models_json(url: str, openai_model: str, anthropic_model: str) -> dict[str, Any]:
    """``~/.pi/agent/models.json``: the sidecar's model endpoint at ``url`` as two providers,
    ``watchdog`` (``openai-completions``, Chat Completions: ``url`` and ``/v1``) and
    ``watchdog-anthropic`` (``anthropic-messages``, Messages: ``url``; its SDK adds ``/v1``),
    each key the value of the environment variable it names."""
    return {"providers": {
        "watchdog": {"baseUrl": url + "/v1", "api": "openai-completions",
                     "apiKey": "OPENAI_API_KEY", "models": [{"id": openai_model}]},
        "watchdog-anthropic": {"baseUrl": url, "api": "anthropic-messages",
                               "apiKey": "ANTHROPIC_API_KEY",
                               "models": [{"id": anthropic_model}]}}}


def pi_invocation(url: str, api: str, model: str, tmp: Path,
                  settings: dict[str, Any] | None = None, context_window: int | None = None,
                  task: str | None = None) -> tuple[list[str], dict[str, str], Path]:
    """``pi -p`` in ``tmp/work`` against the model endpoint at ``url`` on ``api``
    (``openai``: Chat Completions; ``anthropic``: Messages), as a user sets it up: its
    command, its environment and its directory. ``settings``: its ``settings.json``;
    ``context_window``: its models' ``contextWindow`` (else pi's default, 128,000 tokens);
    ``task``: its prompt (else one of ``tmp``'s own: the same task given again within
    ``model_reply_window`` of its run's end at the budget is a chain the endpoint holds at its
    third run, docs/model-endpoint.md, so each test's is its own)."""
    work, home = tmp / "work", tmp / "home"
    work.mkdir()
    agent_dir = home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    models = models_json(url, model, model)
    for provider in models["providers"].values():
        for entry in provider["models"]:
            entry.update({} if context_window is None else {"contextWindow": context_window})
    (agent_dir / "models.json").write_text(json.dumps(models))
    if settings is not None:
        (agent_dir / "settings.json").write_text(json.dumps(settings))
    env = {**clean_environ("PI_", "ANTHROPIC_"), "HOME": str(home), "PI_OFFLINE": "1",
           "OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY}
    task = f"Find the file ({tmp.name})." if task is None else task
    return [str(pi()), "-p", "--model", f"{PROVIDERS[api]}/{model}", task], env, work


def run_pi(url: str, api: str, model: str, tmp: Path, settings: dict[str, Any] | None = None,
           context_window: int | None = None, task: str | None = None
           ) -> tuple[list[str], str]:
    """``pi -p`` once (it must exit 0): the terms its shell commands appended to ``ran.txt``,
    and the answer it printed."""
    return run_coding_agent(*pi_invocation(url, api, model, tmp, settings, context_window,
                                           task))


def invoke(sidecar: RunningServer, llm: FakeLLM, script: fakellm.Script, tmp: Path,
           api: str = "openai", settings: dict[str, Any] | None = None,
           task: str | None = None) -> Invocation:
    """``pi -p`` once through ``sidecar``'s model endpoint on ``api`` (``openai``:
    Chat Completions; ``anthropic``: Messages), its model ``script``."""
    model = llm.script(f"pi-{api}-{tmp.name}", script)
    before = run_ids(sidecar)
    ran, printed = run_pi(sidecar.url("model"), api, model, tmp, settings, task=task)
    requests = llm.requests(model)
    run = the_new_run(sidecar, before)
    return Invocation(ran, printed, requests, run, len(llm.requests(model)))


def shell(term: str) -> dict[str, Any]:
    return {"command": f"echo '{term}' >> ran.txt"}


def searching() -> fakellm.Script:
    return fakellm.looping(TOOL, lambda i: shell(f"term {i}"), REPORT)


def cycling(work: Path) -> fakellm.Script:
    """Its shell tool, then its file-writing tool, with the same arguments round and round (a
    tool cycle; the report when no tools are offered)."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not fakellm.offers_tools(body):
            return fakellm.answer(REPORT)
        if index % 2 == 0:
            return fakellm.call(TOOL, **shell("the file"))
        return fakellm.call("write", path=str(work / "notes.txt"), content="searched")
    return pick


def messages(body: dict[str, Any]) -> int:
    return len(body["messages"])


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_pi_budget_counts_down_then_the_report_is_its_answer(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path, api: str) -> None:  # noqa: F811
    it = invoke(budgeted, llm, searching(), tmp_path, api)
    requests = it.requests
    assert it.ran == ["term 0", "term 1", "term 2"]  # never past the budget
    assert len(requests) == BUDGET + 1
    # what pi sends: the whole conversation, streamed, each call with its result (Chat
    # Completions: a message per result; Messages: the results in a user message)
    assert all(body.get("stream") is True for body in requests)
    assert [messages(body) for body in requests] == ([2, 4, 6, 8] if api == "openai"
                                                      else [1, 3, 5, 7])
    # the true number left, in the instructions of every request that offers tools
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * BUDGET + [False]
    assert f"all {BUDGET} tool calls used" in instructions(requests[-1])
    check_no_control_text_in_user_messages(requests)
    assert it.printed == REPORT  # the last upstream answer is what pi -p prints
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"],
            it.run["has_final_answer"]) == (BUDGET + 1, BUDGET, "tool_limit_reached", True)
    assert it.after == BUDGET + 1  # and nothing more reached the upstream


def test_two_pis_in_a_row_with_the_same_task_are_two_runs(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """On Messages pi marks its latest message for the prompt cache (``cache_control``): the
    task carries the marker at its first request only. The same task run twice in a row is
    two runs, each counted down from 3 to its report, each request in its own run."""
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        it = invoke(budgeted, llm, searching(), tmp_path / name, "anthropic",
                    task="Find the file.")
        assert "cache_control" in it.requests[0]["messages"][0]["content"][0]
        assert "cache_control" not in it.requests[1]["messages"][0]["content"][0]
        assert [LEFT.findall(instructions(body)) for body in it.requests] == [
            [("3", "3")], [("2", "3")], [("1", "3")], []], name
        assert (it.ran, it.printed) == (["term 0", "term 1", "term 2"], REPORT)
        assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"]) == (
            BUDGET + 1, BUDGET, "tool_limit_reached")


def test_a_looping_pi_is_wound_down_then_stopped(
        plain: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """tool-cycle fires at the 8th call (the pair 4 times), the next request winds down with a
    grace of 2, the 11th is the final request: no tools, its answer what ``pi -p`` prints."""
    it = invoke(plain, llm, cycling(tmp_path / "work"), tmp_path)
    check_cycle_wound_down(it.requests)
    assert it.ran == ["the file"] * 5  # the shell's half of the 10 calls, really run
    assert (tmp_path / "work" / "notes.txt").read_text() == "searched"
    check_no_control_text_in_user_messages(it.requests)
    assert it.printed == REPORT
    assert (it.run["tool_calls"], it.run["terminal_state"], it.run["has_final_answer"]) == (
        10, "loop_detected", True), it.run
    assert it.after == 11  # the upstream got nothing after the final request


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_stopped_pi_prints_the_stop_and_the_upstream_gets_nothing_more(
        stopping: RunningServer, llm: FakeLLM, tmp_path: Path, api: str) -> None:  # noqa: F811
    """A rule's abort at two tool calls: the endpoint answers pi's next request itself, a
    well-formed streamed answer carrying the stop note, which ``pi -p`` prints; the upstream
    got the run's calls before the stop and nothing after."""
    it = invoke(stopping, llm, searching(), tmp_path, api)
    assert it.ran == ["term 0", "term 1"]
    assert NOTE in it.printed, it.printed
    assert len(it.requests) == it.after == 2
    assert (it.run["tool_calls"], it.run["terminal_state"]) == (2, "loop_detected"), it.run


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_an_abort_as_the_apis_error_ends_pi_with_the_stop_note(
        llm: FakeLLM, tmp_path: Path, api: str, model_relay: str) -> None:  # noqa: F811
    """With ``model_abort: error`` the 3rd request is answered HTTP 400 ``watchdog_aborted``:
    pi does not retry it (its retries are for rate limits and server errors), prints the
    status and the stop note on stderr (Chat Completions: the error's message; Messages: the
    error's body) and exits 1; the upstream got 2 requests."""
    model = llm.script(f"pi-error-{api}-{tmp_path.name}", searching())
    (tmp_path / "sidecar").mkdir()
    with endpoint_with_pack(tmp_path / "sidecar", STOP_PACK, llm.base_url, model_relay,
                            model_abort="error", model_agent_name=AGENT,
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1")
                            ) as sidecar:
        before = run_ids(sidecar)
        command, env, work = pi_invocation(sidecar.url("model"), api, model, tmp_path)
        result = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True,
                                timeout=DRIVER_TIMEOUT, stdin=subprocess.DEVNULL)
        run = the_new_run(sidecar, before)
    assert result.returncode == 1 and result.stdout == "", result
    stopped = f"The agent-watchdog stopped this run: {NOTE}"
    if api == "openai":  # the OpenAI SDK's error: the status and the message
        assert result.stderr.startswith(f"400 {stopped}"), result
    else:  # the Anthropic SDK's: the status and the body
        status, body = result.stderr.split(" ", 1)
        error = json.loads(body)["error"]
        assert (status, error["code"]) == ("400", "watchdog_aborted"), result
        assert error["message"].startswith(stopped), result
    assert (work / "ran.txt").read_text().splitlines() == ["term 0", "term 1"]
    assert len(llm.requests(model)) == 2
    assert (run["tool_calls"], run["terminal_state"]) == (2, "loop_detected"), run


SUMMARY = ("## Goal\nFind the file.\n\n## Progress\nSearched twice with bash; nothing found "
           "yet.")
OVERFLOW = "This model's input exceeds the context window: 128000 tokens"  # (as OpenAI says)


def summarised(refuse: int | None = None) -> fakellm.Script:
    """Its shell tool; the summary when asked for one (no tools, the conversation written out
    in one user message), the report when no tools are offered otherwise. ``refuse``: that
    request (from 0) is refused once as past the model's context window (the scripted
    upstream's HTTP 400, its message OpenAI's)."""
    refused: list[int] = []

    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if "<conversation>" in json.dumps(body["messages"][-1]):
            return fakellm.answer(SUMMARY)
        if not fakellm.offers_tools(body):
            return fakellm.answer(REPORT)
        if index == refuse and not refused:
            refused.append(index)
            raise ValueError(OVERFLOW)
        return fakellm.call(TOOL, **shell(f"term {index}"))
    return pick


def run_and_summary(sidecar: RunningServer, before: set[str]) -> list[tuple[Any, ...]]:
    """The invocation's two runs once ended, its own and its summary request's, in the order
    they began: each one's model calls, tool calls, terminal state and answer."""
    def ended() -> list[dict[str, Any]] | None:
        runs = [sidecar.get_json(f"/v1/runs/{run['id']}")
                for run in sidecar.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        return runs if len(runs) == 2 and all(run["state"] == "ended" for run in runs) else None

    runs = sorted(wait_until(ended, what="its run and its summary's to end"),
                  key=lambda run: run["started_at"])
    return [(run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"])
            for run in runs]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_pi_history_compacted_at_an_overflow_keeps_its_budget(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path, api: str) -> None:  # noqa: F811
    """The model API refuses pi's 3rd request as past its context window (HTTP 400): pi
    compacts its history, asking for a summary in a conversation of its own (its own system
    prompt, the session written out in one user message, no tools), then sends the refused
    request again in a new conversation: the summary as its first user message, then the task
    and the calls with their results, kept. Those results are the ones the refused request
    carried: it goes on in the run, its count kept (1 left, then the final request), 3 calls
    run in all, the report the run's answer. Known gap: the summary request is a run of its
    own (``completed``, its answer the summary), not a model call of the run it summarises."""
    model = llm.script(f"pi-overflow-{api}-{tmp_path.name}", summarised(refuse=2))
    before = run_ids(budgeted)
    ran, printed = run_pi(budgeted.url("model"), api, model, tmp_path)
    requests = llm.requests(model)
    asides = ["<conversation>" in json.dumps(body["messages"]) for body in requests]
    assert asides == [False, False, False, True, False, False]
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], [], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [
        True, True, True, False, True, False]
    first = requests[4]["messages"][1 if api == "openai" else 0]  # (after Chat's system)
    assert (first["role"], first["content"][0]["text"].split(":")[0]) == (
        "user", "The conversation history before this point was compacted into the following "
        "summary")
    assert ran == ["term 0", "term 1", "term 4"]  # never past the budget
    # (pi's own: ``pi -p`` prints the last message it has when its task's first loop ends, at
    # the refusal, before it compacts and goes on: nothing, exit 0; the report is the run's)
    assert printed == ""

    assert run_and_summary(budgeted, before) == [(5, BUDGET, "tool_limit_reached", REPORT),
                                                 (1, 0, "completed", SUMMARY)]


def test_a_pi_history_compacted_after_its_answer_is_a_run_of_its_own(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """Past its threshold (``contextWindow`` 4,000 tokens less ``compaction.reserveTokens``
    3,000), pi compacts its history after the task's answer, the report: a summary request
    (no tools, the session written out in one user message) once the run has ended at its
    final request. Its run is as before; ``pi -p`` prints the report. Known gap: the summary
    request is a run of its own (``completed``, its answer the summary), its tokens not the
    run's."""
    model = llm.script(f"pi-threshold-{tmp_path.name}", summarised())
    before = run_ids(budgeted)
    ran, printed = run_pi(budgeted.url("model"), "openai", model, tmp_path,
                          {"compaction": {"reserveTokens": 3000, "keepRecentTokens": 100}},
                          context_window=4000)
    requests = llm.requests(model)
    assert ["<conversation>" in json.dumps(body["messages"]) for body in requests] == [
        False] * (BUDGET + 1) + [True]
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], [], []]
    assert ran == ["term 0", "term 1", "term 2"]
    assert printed == REPORT

    assert run_and_summary(budgeted, before) == [
        (BUDGET + 1, BUDGET, "tool_limit_reached", REPORT), (1, 0, "completed", SUMMARY)]
