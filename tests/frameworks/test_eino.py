"""Eino (CloudWeGo's ``github.com/cloudwego/eino`` v0.7.36), steered through the model endpoint
with no code in it: ``go/eino/main.go``, a module of its own pinned by its ``go.sum``, built by
``make eino-agent``; its model eino-ext's OpenAI ``ChatModel`` (``components/model/openai``
v0.1.7), pointed at the sidecar by its ``BaseURL`` alone, which also names the agent
(``/agent/<name>/v1``). Its agents: ``flow/agent/react``'s ``NewAgent`` (``Generate`` and
``Stream``; its tool calls streamed in chunks) and ``adk``'s ``ChatModelAgent`` run by its
``Runner`` (streamed or not), their tools from ``utils.InferTool``; ``adk``'s supervisor
(``adk/prebuilt/supervisor``) and ``SequentialAgent``. Eino emits no OpenTelemetry of its own
(its callbacks are Go interfaces; the handlers that export, eino-ext's ``callbacks/*``, are not
served by the Go module proxy here): it is read through the endpoint alone.

* each ``Generate``/``Stream`` call (each ``Runner.Query``) is one run;
* a budget of 3: the true count at each request, 3 tools run, the 4th request final (its tools
  withdrawn, ``tool_choice: none``), its answer the output the caller gets,
  ``tool_limit_reached``;
* Eino's own limit first (react's ``MaxStep``, adk's ``MaxIterations``): the call fails with
  Eino's error and makes no request more: the run is held open for the tool call it last
  handed over, and ends ``abandoned`` at ``run_end_timeout``, that call not counted (known
  gap: nothing tells the endpoint);
* Eino's own limit declared as the pack's ``max_iterations`` (docs/agents.md's pack: the
  model calls it allows, react's ``MaxStep`` counting a model step and a tools step a call):
  its last model call is the run's final request, the report the output,
  ``tool_limit_reached``;
* a loop wound down by ``tool-cycle``, its final request's report the caller's output;
* an abort: the stop answer is the agent's final answer, not an error (with ``model_abort:
  error``, the call's error);
* an adk agent with ``adk.ExitTool``: its pack's ``finish:`` names the ``exit`` call, whose
  only argument is the report: the model's own ``exit`` is the run's answer, and the final
  report reaches it as that call;
* a supervisor and its worker (``transfer_to_agent`` a tool call) share one run while the
  worker's turn goes on; a turn that ends in an answer ends the run, so the next agent's turn
  is the session's next run, with a budget of its own (known gap), unless the budget was spent:
  then the next turn, at once, is answered with the run's report.

Nothing waits for a directive: what the upstream saw at each request is asserted.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import clean_environ, run_go_agent
from tests.frameworks.steering import (
    GRACE_LEFT,
    LEFT,
    check_ended_at_own_limit,
    check_last_model_call_final,
    documented_pack,
    instructions,
    user_text,
)
from tests.frameworks.test_langchaingo import LOOP_NOTE, STOPPED
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

AGENT_DIR = Path(__file__).resolve().parent / "go" / "eino"
KEY = "sk-eino-0123456789abcdefSECRET"
REPORT = "REPORT: 3 sums done; the rest remains."
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: eino
budgets:
  - agents: ["eino-budget"]
    max_tool_calls: 3
  - agents: ["eino-exit"]
    max_tool_calls: 3
    finish:                     # adk.ExitTool: its final_result is what the agent returns
      tool: exit
      arguments:
        final_result: "${report}"
rules:
  - name: two-calls-then-abort
    agents: ["eino-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 tool calls"
"""
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("eino"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def pointed(endpoint: str, agent: str) -> str:
    """The ``BaseURL`` of eino-ext's OpenAI ``ChatModelConfig`` that points the agent at the
    sidecar's model endpoint ``endpoint`` and names it ``agent`` (docs/steering.md shows it)."""
    return f"{endpoint}/agent/{agent}/v1"


@dataclass(frozen=True)
class Invocation:
    outcomes: list[dict[str, str]]  # per call: the output the caller got, the error
    ran: list[str]  # what its tools were given
    requests: list[dict[str, Any]]  # what the upstream read


def invoke(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
           tmp: Path, kind: str = "react", stream: bool = False, steps: int = 40,
           tasks: tuple[str, ...] = (), exits: bool = False) -> Invocation:
    """The agent once, in ``tmp``, named ``agent`` by its base URL: one call per task (by
    default one, a task of its own), its own limit ``steps`` (react's ``MaxStep``, adk's
    ``MaxIterations``), its model scripted by ``script``."""
    case = next(_CASES)
    tasks = tasks or (f"Add 100 to 0, 1 and 2 in turn (case {case}).",)
    model = llm.script(f"{agent}-{case}", script)
    (tmp / "notes.txt").write_text("nothing here yet\n")
    env = {**clean_environ(), "OPENAI_BASE_URL": pointed(sidecar.url("model"), agent),
           "OPENAI_API_KEY": KEY, "OPENAI_MODEL": model, "AGENT_KIND": kind,
           "AGENT_STREAM": "1" if stream else "0", "AGENT_TASKS": json.dumps(tasks),
           "AGENT_MAX_STEP": str(steps), "AGENT_EXIT": "1" if exits else "0"}
    outcomes, ran = run_go_agent(AGENT_DIR, "eino-agent", env, tmp)
    return Invocation(outcomes, ran, llm.requests(model))


def sums(index: int, body: dict[str, Any]) -> fakellm.Step:
    """``add`` while tools can be called, the report when not."""
    if not fakellm.offers_tools(body):
        return fakellm.answer(REPORT)
    return fakellm.call("add", a=index, b=100)


def rereading(_index: int, body: dict[str, Any]) -> fakellm.Step:
    """The same ``read_file`` call whatever it is told, while tools can be called."""
    if not fakellm.offers_tools(body):
        return fakellm.answer(REPORT)
    return fakellm.call("read_file", path="notes.txt")


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


def calls_asked(body: dict[str, Any]) -> int:
    return sum(1 for message in body["messages"]
               if message["role"] == "assistant" and message.get("tool_calls"))


def supervised(index: int, body: dict[str, Any]) -> fakellm.Step:
    """The supervisor hands the task to the worker; the worker adds (twice at most) and
    answers; back with it, the supervisor answers."""
    if not fakellm.offers_tools(body):
        return fakellm.answer(REPORT)
    if "add" in tool_names(body):
        return fakellm.answer("WORKER: sums done") if calls_asked(body) >= 2 else \
            fakellm.call("add", a=index, b=100)
    if "[worker] said" in json.dumps(body["messages"]):
        return fakellm.answer("FINAL: the worker did the sums")
    return fakellm.call("transfer_to_agent", agent_name="worker")


def piped(index: int, body: dict[str, Any]) -> fakellm.Step:
    """The researcher adds twice and answers; the writer (no tools) writes it up."""
    if not tool_names(body):
        return fakellm.answer("WRITEUP: the sums are 100 and 101")
    return fakellm.answer("RESEARCH: sums done") if calls_asked(body) >= 2 else \
        fakellm.call("add", a=index, b=100)


def added(count: int) -> list[str]:
    return [f'add {{"a":{index},"b":100}}' for index in range(count)]


def paired(index: int, body: dict[str, Any]) -> fakellm.Step:
    """Two sums asked at a time; the report once no tool is offered."""
    if not fakellm.offers_tools(body):
        return fakellm.answer(REPORT)
    return fakellm.Step(tool_calls=(fakellm.ToolCall("add", {"a": 2 * index, "b": 100}),
                                    fakellm.ToolCall("add", {"a": 2 * index + 1, "b": 100})))


def check_trimmed_to_the_budget(sidecar: RunningServer, before: set[str],
                                requests: list[dict[str, Any]],
                                outcomes: list[dict[str, str]]) -> None:
    """What the agent ran of :func:`paired` with a budget of 3 is what it was handed: 2 calls,
    then 1 (the second taken out of the answer), each with its result; the report its output."""
    assert [(message["role"], len(message.get("tool_calls") or ()))
            for message in requests[-1]["messages"][2:]] == [
        ("assistant", 2), ("tool", 0), ("tool", 0), ("assistant", 1), ("tool", 0)]
    assert outcomes == [{"output": REPORT, "error": ""}]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (3, "tool_limit_reached"), run


def check_wound_down_to_the_report(sidecar: RunningServer, before: set[str],
                                   requests: list[dict[str, Any]], ran: list[str],
                                   outcomes: list[dict[str, str]]) -> None:
    """:func:`rereading`'s loop: tool-cycle fires at the 4th identical call, the next 2
    requests are wound down (grace 2 and 1), the 7th is final, its tools withdrawn; the
    report is the agent's output and the run ends ``loop_detected``."""
    assert len(requests) == 7
    assert [LOOP_NOTE in instructions(body) for body in requests] == [False] * 4 + [True] * 3
    assert [GRACE_LEFT.findall(instructions(body)) for body in requests] == [[]] * 4 + [
        ["2"], ["1"], []]
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 6 + [False]
    assert ran == ['read_file {"path":"notes.txt"}'] * 6
    assert outcomes == [{"output": REPORT, "error": ""}]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        6, "loop_detected", REPORT), run


def check_the_stop_is_the_output(sidecar: RunningServer, before: set[str],
                                 outcomes: list[dict[str, str]]) -> None:
    """The rule's abort after 2 tool calls is the caller's output, no error; the run
    ``aborted``."""
    [outcome] = outcomes
    assert outcome["error"] == "", outcome
    assert outcome["output"].startswith(
        f"{STOPPED}: Stopped by the test's rule after 2 tool calls"), outcome
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


# -- one run per call; a budget -----------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
@pytest.mark.parametrize("kind", ["react", "adk"])
def test_each_call_is_a_run_its_budget_counted_down_to_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, kind: str, stream: bool) -> None:
    """Two calls of one agent, each a run with a budget of 3: the model reads the true count
    at each request, 3 tools run, the 4th request is final (tools withdrawn, their definitions
    kept) and its answer is the output the caller gets."""
    before = run_ids(sidecar)
    tasks = (f"Add 100 to 0, 1 and 2 ({kind}, {stream}).", f"And to 4, 5, 6 ({kind}, {stream}).")
    it = invoke(sidecar, llm, "eino-budget", sums, tmp_path, kind=kind, stream=stream,
                tasks=tasks)
    assert it.outcomes == [{"output": REPORT, "error": ""}] * 2
    assert it.ran == [f'add {{"a":{index},"b":100}}' for index in (0, 1, 2, 4, 5, 6)]
    assert [LEFT.findall(instructions(body)) for body in it.requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []] * 2
    assert [(fakellm.offers_tools(body), tool_names(body)) for body in it.requests] == (
        [(True, ["add", "read_file"])] * 3 + [(False, ["add", "read_file"])]) * 2
    assert all("[budget" not in user_text(body) for body in it.requests)
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"])
            for run in runs] == [(4, 3, "tool_limit_reached", REPORT)] * 2, runs


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_calls_past_the_budget_are_trimmed_from_the_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, stream: bool) -> None:
    """The model asks for two sums at a time: both run with 3 left; with 1 left, the second is
    taken out of the answer (streamed: out of its chunks) before Eino reads it."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "eino-budget", paired, tmp_path, stream=stream)
    assert sorted(it.ran) == added(3)
    assert [LEFT.findall(instructions(body)) for body in it.requests] == [
        [("3", "3")], [("1", "3")], []]
    check_trimmed_to_the_budget(sidecar, before, it.requests, it.outcomes)


@pytest.mark.parametrize(("kind", "steps", "error"), [
    ("react", 4, "[GraphRunError] exceeds max steps"),
    ("adk", 2, "[NodeRunError] run node[ChatModel] pre processor fail: exceeds max iterations"
               "\n------------------------\nnode path: [node_1, ChatModel]")])
def test_its_own_limit_first_fails_the_call_and_holds_the_run_open(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, kind: str, steps: int,
        error: str) -> None:
    """react's ``MaxStep`` (4: two model steps, two tool steps) or adk's ``MaxIterations``
    (2) under a budget of 3: Eino stops after 2 tool calls with no request more, and the
    caller gets its error and no output. Nothing tells the endpoint (known gap): the run, the
    second call handed over and never answered, is held open, not the budget's."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "eino-budget", sums, tmp_path, kind=kind, steps=steps)
    assert it.outcomes == [{"output": "", "error": error}]
    assert it.ran == added(2) and len(it.requests) == 2
    assert all(fakellm.offers_tools(body) for body in it.requests)
    [run] = new_runs(sidecar, before, lambda runs: runs[0]["tool_calls"] == 1)
    assert (run["state"], run["iterations"], run["signals"]["in_flight"]) == (
        "active", 2, 1), run


def test_its_own_limit_leaves_the_run_to_run_end_timeout(
        llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    """The known gap's end: with no request after the call it last handed over, the run ends
    ``abandoned`` at ``run_end_timeout`` (2 s here), that call never counted (its result never
    came), as an agent that died mid-tool."""
    (tmp_path / "sidecar").mkdir()
    with endpoint_with_pack(tmp_path / "sidecar", PACK, llm.base_url, model_relay,
                            run_end_timeout=2.0) as sidecar:
        before = run_ids(sidecar)
        it = invoke(sidecar, llm, "eino-budget", sums, tmp_path, steps=4)
        assert it.outcomes == [{"output": "", "error": "[GraphRunError] exceeds max steps"}]
        run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["terminal_reason"], run["final_output"]) == (
        2, 1, "abandoned", "run_end_timeout", None), run


@pytest.mark.parametrize(("kind", "stream", "steps"), [
    ("react", False, "2N"), ("react", True, "2N"), ("react", False, "2N-1"),
    ("adk", False, "N"), ("adk", True, "N")])
def test_its_own_limit_declared_as_the_packs_ends_at_its_last_model_call_with_the_report(
        llm: FakeLLM, tmp_path: Path, model_relay: str, kind: str,  # noqa: F811
        stream: bool, steps: str) -> None:
    """docs/agents.md's pack (``eino-limit.yaml``, as pasted): ``max_iterations`` the model
    calls Eino's own limit allows: react's ``MaxStep`` counts graph steps, a model step and a
    tools step a call (``MaxStep`` 2N or 2N - 1: N calls); adk's ``MaxIterations`` counts
    model calls. The request with 2 calls left is told so, the last call's is the run's final
    request, tools withdrawn, its answer the call's output, no error: Eino's limit never cuts
    the call off, the run ends ``tool_limit_reached`` with the report."""
    pack = documented_pack("eino-limit.yaml")
    limit = int(yaml.safe_load(pack)["budgets"][0]["max_iterations"])
    (tmp_path / "sidecar").mkdir()
    with endpoint_with_pack(tmp_path / "sidecar", pack, llm.base_url, model_relay) as sidecar:
        before = run_ids(sidecar)
        it = invoke(sidecar, llm, "eino", sums, tmp_path, kind=kind, stream=stream,
                    steps={"2N": 2 * limit, "2N-1": 2 * limit - 1, "N": limit}[steps])
        run = the_ended_run(sidecar, before)
    assert it.outcomes == [{"output": REPORT, "error": ""}], it.outcomes
    assert it.ran == added(limit - 1)
    check_last_model_call_final(it.requests, limit)
    check_ended_at_own_limit(run, limit, REPORT)


# -- loops and aborts -----------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_a_loop_is_wound_down_then_its_report_is_the_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, stream: bool) -> None:
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "eino", rereading, tmp_path, stream=stream)
    check_wound_down_to_the_report(sidecar, before, it.requests, it.ran, it.outcomes)


@pytest.mark.parametrize(("kind", "stream"), [("react", False), ("react", True), ("adk", True)])
def test_an_abort_is_the_agents_final_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, kind: str, stream: bool) -> None:
    """The rule aborts after 2 tool calls: the 3rd request gets the stop answer, not the
    upstream, and Eino takes it as the model's last answer: the caller's output, no error."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "eino-abort", sums, tmp_path, kind=kind, stream=stream)
    assert it.ran == added(2) and len(it.requests) == 2
    check_the_stop_is_the_output(sidecar, before, it.outcomes)


def test_an_abort_as_the_apis_error_is_the_calls_error(
        llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    """With ``model_abort: error`` the 3rd request is answered HTTP 400 ``watchdog_aborted``:
    Eino's OpenAI client does not retry it, and the call fails with it, the note its message
    (the code, ``watchdog_aborted``, is not in Eino's error text)."""
    (tmp_path / "sidecar").mkdir()
    with endpoint_with_pack(tmp_path / "sidecar", PACK, llm.base_url, model_relay,
                            model_abort="error") as sidecar:
        before = run_ids(sidecar)
        it = invoke(sidecar, llm, "eino-abort", sums, tmp_path)
        run = the_ended_run(sidecar, before)
    assert it.ran == added(2) and len(it.requests) == 2
    [outcome] = it.outcomes
    assert outcome["output"] == "" and outcome["error"].startswith(
        "[NodeRunError] error, status code: 400, status: 400 Bad Request, message: "
        f"{STOPPED}: Stopped by the test's rule after 2 tool calls"), outcome
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


# -- several agents -------------------------------------------------------------------------------

def test_a_supervisor_and_its_worker_share_the_run_and_its_budget(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """adk's supervisor hands the task over by ``transfer_to_agent``, a tool call of the run;
    the worker's requests (the task, the hand-over as ``For context:`` user messages, its own
    calls) go on in that run: 2 left, 1 left, then its final request, whose report is its
    answer. Back with it at once, the supervisor's request is answered with the run's report,
    not the upstream: the caller's output."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "eino-budget", supervised, tmp_path, kind="supervisor")
    assert [tool_names(body) for body in it.requests] == [["transfer_to_agent"]] + [
        ["add", "read_file"]] * 3
    assert [LEFT.findall(instructions(body)) for body in it.requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert not fakellm.offers_tools(it.requests[-1])
    assert it.ran == ['add {"a":1,"b":100}', 'add {"a":2,"b":100}']
    assert it.outcomes == [{"output": REPORT, "error": ""}]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"]) == (
        4, 3, "tool_limit_reached"), run
    assert run["signals"]["tools"] == {"transfer_to_agent": 1, "add": 2}, run["signals"]


def test_a_pipelines_agents_are_a_run_each(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """adk's ``SequentialAgent``: the researcher's turn ends in its answer, which ends its run
    (2 of 3 tool calls used); the writer's request (the researcher's work as ``For context:``
    user messages) is the session's next run, counted down from a budget of its own (known
    gap: the endpoint sees no invocation around the agents' turns)."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "eino-budget", piped, tmp_path, kind="sequential")
    assert it.outcomes == [{"output": "WRITEUP: the sums are 100 and 101", "error": ""}]
    # (the writer offers no tools: its request is told no count)
    assert [LEFT.findall(instructions(body)) for body in it.requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert "[researcher] said: RESEARCH: sums done" in user_text(it.requests[-1])
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert sorted((run["iterations"], run["tool_calls"], run["terminal_state"],
                   run["budget"]["remaining_tool_calls"], run["session"]) for run in runs) == [
        (1, 0, "completed", 3, runs[0]["session"]),
        (3, 2, "completed", 1, runs[0]["session"])], runs



# -- an agent that ends by its exit tool ----------------------------------------------------------

EXITED = "EXITED: the sums are 100 and 101"


def exiting(index: int, body: dict[str, Any]) -> fakellm.Step:
    """Two sums, then ``exit`` with the answer as its ``final_result``."""
    if not fakellm.offers_tools(body):
        return fakellm.answer(REPORT)
    if calls_asked(body) >= 2:
        return fakellm.call("exit", final_result=EXITED)
    return fakellm.call("add", a=index, b=100)


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_its_own_exit_call_is_the_runs_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, stream: bool) -> None:
    """adk's ``ChatModelAgent`` with ``Exit: adk.ExitTool{}`` ends when the model calls
    ``exit``: Eino returns its ``final_result`` and sends no request more. Its pack's
    ``finish:`` names that call with the report as its only argument: the model's own call of
    it is the run's answer, as a final-answer tool's (no tool call; its argument the run's
    output), which ends the run. (Before, the call was handed over as work and the run held
    open for a result that never comes, till ``run_end_timeout`` took it as abandoned.)"""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "eino-exit", exiting, tmp_path, kind="adk", stream=stream,
                exits=True)
    assert it.outcomes == [{"output": EXITED, "error": ""}]
    assert it.ran == added(2) and len(it.requests) == 3
    assert [tool_names(body) for body in it.requests] == [["add", "read_file", "exit"]] * 3
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"],
            run["signals"]["tools"]) == (3, 2, "completed", EXITED, {"add": 2}), run


def sums_and_exit(index: int, body: dict[str, Any]) -> fakellm.Step:
    """A sum, then another sum and ``exit`` asked together in one answer."""
    if calls_asked(body) >= 1:
        return fakellm.Step(tool_calls=(fakellm.ToolCall("add", {"a": 1, "b": 100}),
                                        fakellm.ToolCall("exit", {"final_result": EXITED})))
    return fakellm.call("add", a=index, b=100)


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_its_exit_asked_beside_work_is_the_runs_answer_after_the_work(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, stream: bool) -> None:
    """The model asks for a sum and ``exit`` in one answer: Eino runs both calls, then ends
    with ``exit``'s ``final_result``, and sends no request more. The run ends with that answer,
    the sum counted. (Before, the answer was taken for work only: the run was held open for
    results that never come, its last sum uncounted, till ``run_end_timeout`` took it as
    abandoned.)"""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "eino-exit", sums_and_exit, tmp_path, kind="adk", stream=stream,
                exits=True)
    assert it.outcomes == [{"output": EXITED, "error": ""}]
    assert it.ran == [*added(1), 'add {"a":1,"b":100}'] and len(it.requests) == 2
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"],
            run["signals"]["tools"]) == (2, 2, "completed", EXITED, {"add": 2}), run


def exit_and_more_sums(index: int, body: dict[str, Any]) -> fakellm.Step:
    """Two sums, then ``exit`` asked first beside two more sums: more than the 1 call left."""
    if calls_asked(body) >= 2:
        return fakellm.Step(tool_calls=(fakellm.ToolCall("exit", {"final_result": EXITED}),
                                        fakellm.ToolCall("add", {"a": 2, "b": 100}),
                                        fakellm.ToolCall("add", {"a": 3, "b": 100})))
    return fakellm.call("add", a=index, b=100)


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_its_exit_beside_more_work_than_is_left_keeps_the_work_left(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, stream: bool) -> None:
    """A budget of 3, 2 used: the model asks for ``exit`` then two sums. The answer is
    trimmed to the 1 call left and ``exit`` (the answer, not work): Eino runs the third sum,
    then ends with ``exit``'s ``final_result``. (Before, ``exit`` counted as the call left:
    the sums were trimmed and the agent ended without the work.)"""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "eino-exit", exit_and_more_sums, tmp_path, kind="adk",
                stream=stream, exits=True)
    assert it.outcomes == [{"output": EXITED, "error": ""}]
    assert it.ran == added(3) and len(it.requests) == 3
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"],
            run["signals"]["tools"]) == (3, "tool_limit_reached", EXITED, {"add": 3}), run


def test_its_final_report_is_given_as_its_exit_call(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """At the budget, the final request's report reaches the agent as the ``exit`` call its
    pack names: Eino returns it as the caller's output."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "eino-exit", sums, tmp_path, kind="adk", exits=True)
    assert it.outcomes == [{"output": REPORT, "error": ""}]
    assert it.ran == added(3)
    assert [LEFT.findall(instructions(body)) for body in it.requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        3, "tool_limit_reached", REPORT), run
