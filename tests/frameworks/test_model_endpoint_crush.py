"""Crush's requests — a Go coding agent on charm.land/fantasy — steered through the sidecar's
model endpoint with no code in it (DESIGN §12), on both relays.

Crush itself cannot be installed on the test machines: its npm package (``@charmland/crush``
0.96) ships no binary, its install script downloads one from the project's releases, and the Go
module proxy does not serve its module. What it sends can be run all the same: its engine,
fantasy (``go/fantasy/main.go``, pinned by its ``go.sum``, built by ``make fantasy-agent``,
part of ``make test``), driving the loop ``crush run`` drives against a provider of ``"type":
"openai"`` in its ``crush.json`` (:func:`config`, which it reads as Crush does; its source at
v0.90: ``internal/agent/agent.go`` and ``coordinator.go``): fantasy's OpenAI provider with the
Responses API allowed (used for the model names fantasy takes for OpenAI's,
``gpt-4…``/``gpt-5…``; Chat Completions for any other), streamed, the conversation sent whole,
its todo list's reminder its first user message and the task the second; its tools ``bash`` and
``view``, really run in a temp dir, and ``agent``, a sub-agent in a session of its own, its
task the call's ``prompt``; each request naming its session (``x-session-id``,
``x-session-affinity``); and, as its first request goes out, the session's title asked of its
small model in one message that wraps the task in its instruction, no tools, 40 tokens. Crush
emits no OpenTelemetry: it is steered and read through the endpoint alone. Behind the sidecar
is the scripted upstream (:mod:`tests.frameworks.fakellm`), whose recorded request bodies are
what the model read.

Steered: a budget counts down and ends in the report, on Chat Completions and the Responses
API; a tool cycle is wound down, then its final request; a rule's abort is answered by the
endpoint; a sub-agent is a child run of its caller's, with a budget of its own. Each
invocation is one run (and its sub-agents' child runs); its title is a model call of it, with
no note."""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, clean_environ
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

# (its shell tool is opencode's, `bash`, its arguments the same: a command and a description)
from tests.frameworks.test_model_endpoint_opencode import searching, shell
from tests.frameworks.test_model_endpoint_stop import NOTE, stopping  # noqa: F401
from tests.harness import RunningServer, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

FANTASY_DIR = Path(__file__).resolve().parent / "go" / "fantasy"
TASK = "Find the file."
TITLE = "Finding the file"  # what its small model answers when asked for a title
TITLE_ASKED = f"Generate a concise title for the following content:\n\n{TASK}\n <think>\n\n</think>"


def fantasy_agent() -> Path:
    """The agent ``make fantasy-agent`` built for ``go/fantasy/`` as it is now (the Makefile's
    hash: of main.go, go.mod and go.sum, in that order)."""
    sources = [FANTASY_DIR / "main.go", FANTASY_DIR / "go.mod", FANTASY_DIR / "go.sum"]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    binary = FANTASY_DIR.parents[3] / ".cache" / "fantasy-agent" / digest / "fantasy-agent"
    assert binary.exists(), f"{binary} is missing: `make fantasy-agent` builds it (make test does)"
    return binary


def config(base_url: str, model: str, small: str) -> dict[str, Any]:
    """Its ``crush.json``: a provider ``watchdog`` of type ``openai`` at ``base_url``, its key
    from ``OPENAI_API_KEY``, its models ``model`` (the large one, the agent's) and ``small``
    (the session's title); no provider list fetched, no usage metrics sent. ``crush run``
    approves every tool call of its session unasked (no ``--yolo`` needed)."""
    return {"$schema": "https://charm.land/crush.json",
            "providers": {"watchdog": {
                "type": "openai", "base_url": base_url, "api_key": "$OPENAI_API_KEY",
                "models": [{"id": name, "name": name, "context_window": 200000,
                            "default_max_tokens": 8192} for name in (model, small)]}},
            "models": {"large": {"provider": "watchdog", "model": model},
                       "small": {"provider": "watchdog", "model": small}},
            "options": {"disable_provider_auto_update": True, "disable_metrics": True}}


@dataclass(frozen=True)
class Invocation:
    ran: list[str]  # the terms its shell commands wrote
    printed: str  # its answer
    requests: list[dict[str, Any]]  # what the upstream read (the agent's model)
    headers: list[dict[str, str]]  # ... the headers of those requests
    titles: list[dict[str, Any]]  # what its small model read
    run: dict[str, Any]  # the sidecar's one run of it, ended
    after: int  # the requests the upstream had got once the run had ended


def run_agent(sidecar: RunningServer, model: str, small: str, tmp: Path) -> str:
    """The agent once, in ``tmp``, through ``sidecar``'s model endpoint (its ``crush.json``
    naming ``model`` and ``small``): its answer."""
    (tmp / "crush.json").write_text(json.dumps(config(sidecar.url("model") + "/v1", model,
                                                      small)))
    env = {**clean_environ(), "OPENAI_API_KEY": KEY, "ENDPOINT_TASK": TASK}
    result = subprocess.run([str(fantasy_agent())], env=env, cwd=tmp, capture_output=True,
                            text=True, timeout=DRIVER_TIMEOUT, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["title"] == TITLE  # (its small model answered, through the endpoint)
    printed: str = outcome["output"]
    return printed


def invoke(sidecar: RunningServer, llm: FakeLLM, script: fakellm.Script, tmp: Path,
           model: str = "crush") -> Invocation:
    """The agent once, in ``tmp``, through ``sidecar``'s model endpoint: its model ``script``
    (named ``model`` and the test's: a ``gpt-5`` name takes fantasy to the Responses API), its
    small model answering :data:`TITLE`."""
    model = llm.script(f"{model}-{tmp.name}", script)
    small = llm.script(f"{model}-small-{tmp.name}", fakellm.steps(fakellm.answer(TITLE)))
    before = run_ids(sidecar)
    printed = run_agent(sidecar, model, small, tmp)
    ran = tmp / "ran.txt"
    run = the_new_run(sidecar, before)  # (one run: the title is no run of its own)
    requests = llm.requests(model)
    return Invocation(ran.read_text().splitlines() if ran.exists() else [], printed,
                      requests, llm.request_headers(model), llm.requests(small), run,
                      len(requests))


def check_title(it: Invocation) -> None:
    """Its side request, the session's title: once, to its small model, as Crush sends it (no
    tools, no note: not a step of the agent's), naming the session its requests name."""
    [title] = it.titles
    assert not fakellm.offers_tools(title)
    assert "[budget" not in instructions(title) and "[grace" not in instructions(title)
    asked = title.get("messages") or title.get("input")
    assert [message for message in asked if message.get("role") == "user"] in (
        [{"role": "user", "content": TITLE_ASKED}],  # Chat Completions
        [{"role": "user", "content": [{"type": "input_text", "text": TITLE_ASKED}]}])
    assert {headers.get("x-session-id") for headers in it.headers} != {None}
    assert len({headers.get("x-session-id") for headers in it.headers}) == 1


@pytest.mark.parametrize("model", ["crush", "gpt-5-crush"], ids=["chat", "responses"])
def test_crush_budget_counts_down_then_the_report_is_its_answer(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path, model: str) -> None:  # noqa: F811
    it = invoke(budgeted, llm, searching(), tmp_path, model)
    requests = it.requests
    assert it.ran == ["term 0", "term 1", "term 2"]  # never past the budget
    assert len(requests) == BUDGET + 1
    assert all(body.get("stream") is True for body in requests)
    assert all(("input" in body) is (model != "crush") for body in [*requests, *it.titles])
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * BUDGET + [False]
    assert f"all {BUDGET} tool calls used" in instructions(requests[-1])
    check_no_control_text_in_user_messages(requests)
    assert it.printed == REPORT  # the last upstream answer is what it prints
    check_title(it)
    # one run: the agent's 4 requests and the title, a model call of it, 3 tool calls
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"],
            it.run["has_final_answer"]) == (BUDGET + 2, BUDGET, "tool_limit_reached", True)
    assert it.run["final_output"] == REPORT, it.run
    assert it.after == BUDGET + 1  # and nothing more reached the upstream


def cycling(work: Path) -> fakellm.Script:
    """Its shell tool, then its file tool, with the same arguments round and round (a tool
    cycle; the report when no tools are offered)."""
    (work / "notes.txt").write_text("searched\n")

    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not fakellm.offers_tools(body):
            return fakellm.answer(REPORT)
        if index % 2 == 0:
            return fakellm.call("bash", **shell("the file"))
        return fakellm.call("view", file_path=str(work / "notes.txt"))
    return pick


def test_a_looping_crush_is_wound_down_then_stopped(
        plain: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """tool-cycle fires at the 8th call (the pair 4 times), the next request winds down with a
    grace of 2, the 11th is the final request: no tools, its answer what it prints; the
    upstream gets nothing after it (Crush's own loop check, one call and its result more than
    5 times in 10 steps, never fires on a pair)."""
    it = invoke(plain, llm, cycling(tmp_path), tmp_path)
    requests = it.requests
    check_cycle_wound_down(requests)
    assert it.ran == ["the file"] * 5  # the shell's half of the 10 calls, really run
    # the file tool's half, really run: each result the file's line
    reads = [message for message in requests[-1]["messages"]
             if message["role"] == "tool" and "searched" in str(message["content"])]
    assert len(reads) == 5, requests[-1]["messages"]
    check_no_control_text_in_user_messages(requests)
    check_title(it)
    assert it.printed == REPORT
    assert (it.run["iterations"], it.run["tool_calls"], it.run["terminal_state"],
            it.run["has_final_answer"]) == (12, 10, "loop_detected", True), it.run
    assert it.after == 11


def test_a_stopped_crush_prints_the_stop_and_the_upstream_gets_nothing_more(
        stopping: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """A rule's abort at two tool calls: the endpoint answers its next request itself, a
    well-formed streamed answer carrying the stop note, which it prints; the upstream got the
    run's calls before the stop and nothing after."""
    it = invoke(stopping, llm, searching(), tmp_path)
    assert it.ran == ["term 0", "term 1"]
    assert NOTE in it.printed, it.printed
    assert len(it.requests) == it.after == 2
    check_title(it)
    assert (it.run["tool_calls"], it.run["terminal_state"]) == (2, "loop_detected"), it.run


SUB_TASK = "Look for notes.txt in this directory and say what it holds."
SUB_ANSWER = "notes.txt holds one line: searched."


def delegating(work: Path) -> fakellm.Script:
    """Its ``agent`` tool once, with :data:`SUB_TASK`, then the report; the sub-agent's
    conversation (it begins with that task): its file tool once, then its answer."""
    (work / "notes.txt").write_text("searched\n")

    def pick(_index: int, body: dict[str, Any]) -> fakellm.Step:
        users = [message["content"] for message in body["messages"]
                 if message["role"] == "user"]
        answered = any(message["role"] == "tool" for message in body["messages"])
        if users[0] == SUB_TASK:
            return fakellm.answer(SUB_ANSWER) if answered else fakellm.call(
                "view", file_path=str(work / "notes.txt"))
        return fakellm.answer(REPORT) if answered else fakellm.call("agent", prompt=SUB_TASK)
    return pick


def test_a_crush_sub_agent_is_a_child_run_of_its_caller(
        budgeted: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:  # noqa: F811
    """Its ``agent`` tool runs a sub-agent in a session of its own, its requests naming nothing
    of its caller's; its conversation begins with the prompt its caller's call handed over,
    which waits for its result: a child run of the caller's (its own budget, counted down from
    3 with no note from the caller's), each with its title as a model call, no run of its own."""
    model = llm.script(f"crush-{tmp_path.name}", delegating(tmp_path))
    small = llm.script(f"crush-small-{tmp_path.name}", fakellm.steps(fakellm.answer(TITLE)))
    before = run_ids(budgeted)
    assert run_agent(budgeted, model, small, tmp_path) == REPORT

    def ended() -> list[dict[str, Any]] | None:
        runs = [budgeted.get_json(f"/v1/runs/{run['id']}")
                for run in budgeted.get_json("/v1/runs?limit=1000")["runs"]
                if run["id"] not in before]
        return runs if len(runs) >= 2 and all(run["state"] == "ended" for run in runs) \
            else None

    runs = wait_until(ended, what="the caller's and the sub-agent's runs to end")
    assert len(runs) == 2, runs  # (the two titles: model calls of their runs)
    [main] = [run for run in runs if run["parent_run"] is None]
    [child] = [run for run in runs if run["parent_run"] == main["id"]]
    assert (main["tool_calls"], main["signals"]["tools"], main["final_output"]) == (
        1, {"agent": 1}, REPORT), main
    assert (child["tool_calls"], child["signals"]["tools"], child["final_output"]) == (
        1, {"view": 1}, SUB_ANSWER), child
    requests = llm.requests(model)
    sub = [body for body in requests if body["messages"][1]["content"] == SUB_TASK]
    assert [LEFT.findall(instructions(body)) for body in sub] == [[("3", "3")], [("2", "3")]]
    assert len(llm.requests(small)) == 2
