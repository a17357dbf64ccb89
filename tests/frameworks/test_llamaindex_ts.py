"""LlamaIndex.TS (npm ``llamaindex`` 0.12.1, ``@llamaindex/workflow`` 1.1.25,
``@llamaindex/openai`` 0.4.23), steered through the model endpoint with no code in it:
``ts/llamaindex/endpoint.ts``, its own ``package-lock.json``, installed by ``make
tests/frameworks/ts/llamaindex/node_modules/.installed``. Its agents: ``agent()`` (one
``FunctionAgent`` in an ``AgentWorkflow``) and ``multiAgent()`` (a supervisor that can hand off
to a worker), their tools ``tool()``s with a zod schema, their LLM ``openai()``, pointed at the
sidecar by ``OPENAI_BASE_URL`` or the LLM's ``baseURL`` alone, which also names the agent
(``/agent/<name>/v1``). The agent streams every model request (``stream: true``) whether the
caller ``run()``s or ``runStream()``s.

LlamaIndex.TS emits no OpenTelemetry of its own; OpenLLMetry's instrumentation of it is
``test_llamaindex_ts_olm.py``'s.

* each ``run()``/``runStream()`` is one run (its memory new each time);
* a budget of 3: the true count at each request, 3 tools run, the 4th request final (its tools
  withdrawn: ``tool_choice: none``, their definitions kept), its answer the result the caller
  gets, ``tool_limit_reached``; calls asked past the budget are trimmed from the answer;
* a loop wound down by ``tool-cycle``, its final request's report the caller's result; a model
  that asks for tools at the final request anyway is stopped, the stop note the result;
* an abort: the stop answer is the agent's result, not an error. With ``model_abort: error``
  the 400 does not reach the caller: LlamaIndex's workflow throws it out of its step handler,
  not through ``run()``, so the agent's process dies of the unhandled rejection (known gap, the
  framework's: keep the default);
* a chat (each ``run()`` given the ones before as ``chatHistory``): the next question is the
  next run, with a budget of its own; after an abort, it goes on from the stop answer and gets
  the 400 (known gap: the endpoint cannot tell it from a validation retry), which kills the
  process as above;
* ``multiAgent``: the supervisor's ``handOff`` is a tool call of the run and the worker's
  requests go on in it: one run per ``run()``, one budget for the agents together.

Nothing waits for a directive: what the upstream saw at each request is asserted.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, clean_environ
from tests.frameworks.steering import LEFT, instructions, user_text
from tests.frameworks.test_eino import (
    REPORT,
    added,
    calls_asked,
    check_the_stop_is_the_output,
    check_trimmed_to_the_budget,
    check_wound_down_to_the_report,
    paired,
    pointed,
    rereading,
    sums,
    tool_names,
)
from tests.frameworks.test_langchaingo import STOPPED
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

TS_DIR = Path(__file__).resolve().parent / "ts"
AGENT = TS_DIR / "llamaindex" / "endpoint.ts"  # tsx from TS_DIR's node_modules
KEY = "sk-llamaindex-0123456789abcdefSECRET"
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: llamaindex-ts
budgets:
  - agents: ["li-budget"]
    max_tool_calls: 3
rules:
  - name: two-calls-then-abort
    agents: ["li-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 tool calls"
"""
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("llamaindex-ts"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


@dataclass(frozen=True)
class Invocation:
    outcomes: list[dict[str, str]]  # per task: the output the caller got, the error
    ran: list[str]  # what its tools were given
    requests: list[dict[str, Any]]  # what the upstream read
    stderr: str


def invoke(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
           tmp: Path, kind: str = "single", stream: bool = False,
           tasks: tuple[str, ...] = (), by_llm: bool = False, exits: int = 0,
           chat: bool = False) -> Invocation:
    """The agent once, in ``tmp``, named ``agent`` by its base URL (``by_llm``: given as the
    LLM's ``baseURL``, else by ``OPENAI_BASE_URL``): one ``run()`` (``stream``:
    ``runStream()``) per task (by default one, a task of its own), its model scripted by
    ``script``; its process must exit ``exits``."""
    assert (AGENT.parent / "node_modules" / "@llamaindex" / "workflow").is_dir(), (
        "run `make tests/frameworks/ts/llamaindex/node_modules/.installed` (part of make test)")
    case = next(_CASES)
    tasks = tasks or (f"Add 100 to 0, 1 and 2 in turn (case {case}).",)
    model = llm.script(f"{agent}-{case}", script)
    url = pointed(sidecar.url("model"), agent)
    env = {**clean_environ(), "OPENAI_API_KEY": KEY, "OPENAI_MODEL": model,
           "AGENT_KIND": kind, "AGENT_STREAM": "1" if stream else "0",
           "AGENT_TASKS": json.dumps(tasks), "AGENT_RAN_LOG": str(tmp / "ran.log"),
           "AGENT_CHAT": "1" if chat else "0",
           **({"AGENT_LLM_BASE_URL": url} if by_llm else {"OPENAI_BASE_URL": url})}
    result = subprocess.run(["node", "--import", "tsx", str(AGENT)], env=env, cwd=TS_DIR,
                            capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == exits, (result.stdout[-3000:], result.stderr[-3000:])
    ran = tmp / "ran.log"
    return Invocation([json.loads(line) for line in result.stdout.splitlines()
                       if line.startswith("{")],
                      ran.read_text().splitlines() if ran.exists() else [],
                      llm.requests(model), result.stderr)


def stubborn(_index: int, _body: dict[str, Any]) -> fakellm.Step:
    """The same ``read_file`` call whatever it is told, tools or none."""
    return fakellm.call("read_file", path="notes.txt")


def budget_left(requests: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    return [LEFT.findall(instructions(body)) for body in requests]


COUNTDOWN = [[("3", "3")], [("2", "3")], [("1", "3")], []]


# -- one run per run(); a budget ------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["run", "runStream"])
def test_each_run_is_a_run_its_budget_counted_down_to_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, stream: bool) -> None:
    """Two ``run()``s (or ``runStream()``s) of one agent, each a run with a budget of 3: the
    model reads the true count at each request, 3 tools run, the 4th request is final (tools
    withdrawn, their definitions kept) and its answer is the result the caller gets."""
    before = run_ids(sidecar)
    tasks = (f"Add 100 to 0, 1 and 2 ({stream}).", f"And to 4, 5, 6 ({stream}).")
    it = invoke(sidecar, llm, "li-budget", sums, tmp_path, stream=stream, tasks=tasks)
    assert it.outcomes == [{"output": REPORT, "error": ""}] * 2
    assert it.ran == [f'add {{"a":{index},"b":100}}' for index in (0, 1, 2, 4, 5, 6)]
    assert budget_left(it.requests) == COUNTDOWN * 2
    assert [(fakellm.offers_tools(body), tool_names(body), body["stream"])
            for body in it.requests] == (
        [(True, ["add", "read_file"], True)] * 3 + [(False, ["add", "read_file"], True)]) * 2
    assert all("[budget" not in user_text(body) for body in it.requests)
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"])
            for run in runs] == [(4, 3, "tool_limit_reached", REPORT)] * 2, runs


@pytest.mark.parametrize("stream", [False, True], ids=["run", "runStream"])
def test_a_chats_next_question_is_the_next_run(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, stream: bool) -> None:
    """The second ``run()`` is given the first question and its result as ``chatHistory``:
    its requests carry the first conversation, and it is a run of its own with a budget of its
    own (3, 2, 1 left again), not the first run going on past its budget."""
    before = run_ids(sidecar)
    tasks = (f"Add 100 to 0, 1 and 2 (chat, {stream}).", f"Now to 4, 5, 6 (chat, {stream}).")
    it = invoke(sidecar, llm, "li-budget", sums, tmp_path, stream=stream, tasks=tasks,
                chat=True)
    assert it.outcomes == [{"output": REPORT, "error": ""}] * 2
    assert [message["content"] for message in it.requests[4]["messages"][1:4]] == [
        tasks[0], REPORT, tasks[1]]
    assert budget_left(it.requests) == COUNTDOWN * 2
    assert it.ran == [f'add {{"a":{index},"b":100}}' for index in (0, 1, 2, 4, 5, 6)]
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"])
            for run in runs] == [(4, 3, "tool_limit_reached", REPORT)] * 2, runs


def test_a_chats_question_after_an_abort_gets_the_error(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Known gap: the first ``run()`` aborted (its result the stop note); the next question,
    given it as ``chatHistory``, goes on from the stop answer, which the endpoint cannot tell
    from a framework's validation retry after it: it is the stopped run's and gets the 400
    ``watchdog_aborted``, nothing upstream; LlamaIndex throws it out of its workflow, and the
    process dies (its unhandled rejection). A chat whose history leaves the stop note out is
    a conversation of its own."""
    before = run_ids(sidecar)
    tasks = ("Add 100 to 0, 1 and 2 (chat abort).", "Now to 4, 5, 6 (chat abort).")
    it = invoke(sidecar, llm, "li-abort", sums, tmp_path, tasks=tasks, chat=True, exits=1)
    [outcome] = it.outcomes
    assert outcome["output"].startswith(f"{STOPPED}: Stopped by the test's rule"), outcome
    assert "code: 'watchdog_aborted'" in it.stderr
    assert len(it.requests) == 2 and it.ran == added(2)
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_the_llms_base_url_alone_points_it(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """``openai({ baseURL })`` with no ``OPENAI_BASE_URL``: the same run, the same budget."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "li-budget", sums, tmp_path, by_llm=True)
    assert it.outcomes == [{"output": REPORT, "error": ""}]
    assert it.ran == added(3) and budget_left(it.requests) == COUNTDOWN
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (3, "tool_limit_reached"), run


def test_calls_past_the_budget_are_trimmed_from_the_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The model asks for two sums at a time: both run with 3 left; with 1 left, the second is
    taken out of the streamed answer before LlamaIndex reads it."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "li-budget", paired, tmp_path)
    assert sorted(it.ran) == added(3)
    assert budget_left(it.requests) == [[("3", "3")], [("1", "3")], []]
    check_trimmed_to_the_budget(sidecar, before, it.requests, it.outcomes)


# -- loops and aborts -----------------------------------------------------------------------------

def test_a_loop_is_wound_down_then_its_report_is_the_result(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "li", rereading, tmp_path, stream=True)
    check_wound_down_to_the_report(sidecar, before, it.requests, it.ran, it.outcomes)


def test_a_loop_that_asks_for_tools_at_the_final_request_is_stopped(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The model calls ``read_file`` at the final request too: the call is taken out of the
    answer, which is the stop note; LlamaIndex, handed no call, ends with it as the result
    and sends no request more."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "li", stubborn, tmp_path)
    assert len(it.requests) == 7 and not fakellm.offers_tools(it.requests[-1])
    assert it.ran == ['read_file {"path":"notes.txt"}'] * 6
    [outcome] = it.outcomes
    assert outcome["error"] == "" and outcome["output"].startswith(STOPPED), outcome
    assert "asked for tools again instead of its final report" in outcome["output"], outcome
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (6, "loop_detected"), run


@pytest.mark.parametrize(("kind", "stream"), [("single", False), ("multi", True)])
def test_an_abort_is_the_agents_result(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, kind: str, stream: bool) -> None:
    """The rule aborts after 2 tool calls: the 3rd request gets the stop answer, not the
    upstream, and LlamaIndex takes it as the model's last answer: the caller's result, no
    error."""
    before = run_ids(sidecar)
    script = supervised if kind == "multi" else sums
    it = invoke(sidecar, llm, "li-abort", script, tmp_path, kind=kind, stream=stream)
    assert len(it.requests) == 2
    assert it.ran == (['add {"a":1,"b":100}'] if kind == "multi" else added(2))
    check_the_stop_is_the_output(sidecar, before, it.outcomes)


def test_an_abort_as_the_apis_error_kills_the_agents_process(
        llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    """Known gap, LlamaIndex's: with ``model_abort: error`` the 3rd request is answered HTTP
    400 ``watchdog_aborted`` (the OpenAI client does not retry it); LlamaIndex's workflow
    throws it out of its step handler, not through ``run()``/``runStream()``, so the caller's
    ``catch`` never sees it: the process dies of the unhandled rejection (with a handler for
    it, ``run()`` never settles). The run is ``aborted`` all the same."""
    (tmp_path / "sidecar").mkdir()
    with endpoint_with_pack(tmp_path / "sidecar", PACK, llm.base_url, model_relay,
                            model_abort="error") as sidecar:
        before = run_ids(sidecar)
        it = invoke(sidecar, llm, "li-abort", sums, tmp_path, stream=True, exits=1)
        run = the_ended_run(sidecar, before)
    assert it.outcomes == []  # no outcome line: neither a result nor a caught error
    assert ("BadRequestError: 400 The agent-watchdog stopped this run: Stopped by the test's "
            "rule after 2 tool calls") in it.stderr and "code: 'watchdog_aborted'" in it.stderr
    assert it.ran == added(2) and len(it.requests) == 2
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


# -- several agents -------------------------------------------------------------------------------

def supervised(index: int, body: dict[str, Any]) -> fakellm.Step:
    """The supervisor hands the task to the worker by ``handOff``; the worker adds (twice at
    most) and answers."""
    if not fakellm.offers_tools(body):
        return fakellm.answer(REPORT)
    if "add" in tool_names(body):
        return fakellm.answer(WORKED) if calls_asked(body) >= 3 else \
            fakellm.call("add", a=index, b=100)
    return fakellm.call("handOff", toAgent="worker", reason="it does sums")


WORKED = "WORKER: the sums are 101 and 102"


@pytest.mark.parametrize("stream", [False, True], ids=["run", "runStream"])
def test_a_hand_off_shares_the_run_and_its_budget(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, stream: bool) -> None:
    """``multiAgent``: the supervisor's ``handOff`` is the run's first tool call; the worker's
    requests (its own instructions, the supervisor's call and its result kept) go on in that
    run: 2 left, 1 left, then its final request, whose report is the caller's result."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "li-budget", supervised, tmp_path, kind="multi", stream=stream)
    assert [tool_names(body) for body in it.requests] == [["handOff"]] + [
        ["add", "read_file"]] * 3
    assert [instructions(body).startswith("You are the worker") for body in it.requests] == [
        False, True, True, True]
    assert budget_left(it.requests) == COUNTDOWN
    assert not fakellm.offers_tools(it.requests[-1])
    assert it.ran == ['add {"a":1,"b":100}', 'add {"a":2,"b":100}']
    assert it.outcomes == [{"output": REPORT, "error": ""}]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert run["signals"]["tools"] == {"handOff": 1, "add": 2}, run["signals"]


def test_each_run_of_a_multi_agent_is_a_run(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Unbudgeted, the worker answers after its 2 sums: that answer ends the run and is the
    caller's result; the next ``run()`` (the supervisor again) is the next run."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "li", supervised, tmp_path, kind="multi",
                tasks=("Add 100 to 1 and 2.", "Add 100 to 1 and 2 again."))
    assert it.outcomes == [{"output": WORKED, "error": ""}] * 2
    assert len(it.requests) == 8
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"])
            for run in runs] == [(4, 3, "completed", WORKED)] * 2, runs

