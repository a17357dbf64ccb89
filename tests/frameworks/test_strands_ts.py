"""Strands Agents for TypeScript (npm ``@strands-agents/sdk`` 1.19.0), steered through the model
endpoint with no code in it: ``ts/strands/agent.ts``, its own ``package-lock.json``, installed
by ``make tests/frameworks/ts/strands/node_modules/.installed``. Its agent: an ``Agent`` on
``OpenAIModel`` with ``api: 'chat'`` (Chat Completions; the default is the Responses API), its
tools ``tool()``s with a zod schema, pointed at the sidecar by ``OPENAI_BASE_URL`` or the
model's ``clientConfig.baseURL`` alone, which also names the agent (``/agent/<name>/v1``).
It streams every model request (``stream: true``) whether the caller ``invoke()``s or
``stream()``s.

* each ``invoke()``/``stream()`` is one run;
* a budget of 3: the true count at each request, 3 tools run, the 4th request final (its tools
  withdrawn: ``tool_choice: none``, their definitions kept), its answer the result the caller
  gets, ``tool_limit_reached``; calls asked past the budget are trimmed from the answer;
* a loop wound down by ``tool-cycle``, its final request's report the caller's result;
* an abort: the stop answer is the agent's result, not an error; with ``model_abort: error``
  the 400 is ``invoke()``'s ``ModelError``;
* an agent invoked again keeps its conversation: the next question is a run of its own, with a
  budget of its own; an agent as a tool (``asTool()``) is a run of its own, with a budget of
  its own;
* its own ``limits.turns`` declared as the pack's ``max_iterations`` (docs/agents.md's pack):
  its last turn is the run's final request, the report its result, ``tool_limit_reached``;
* known gaps, Strands': of calls asked together it runs only the last (the run counts all);
  its ``limits.turns`` below the pack's (or with none) ends the invocation with no request
  more, leaving the run open;
* a ``Swarm``: each node a run with a budget of its own, ended by its structured output (a
  final-answer tool); at the budget the final request offers it alone, forced;
* a tool that throws: Strands hands the model ``[ERROR] Error: ...``, read as the call's failure;
* traced by its own OpenTelemetry too (``setupTracer``), its spans and the endpoint's calls are
  one run per invocation, counted once (watched only: ``test_strands_ts_otel.py``).

Nothing waits for a directive: what the upstream saw at each request is asserted.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, RECORDINGS, clean_environ
from tests.frameworks.steering import (
    LEFT,
    check_ended_at_own_limit,
    check_last_model_call_final,
    documented_pack,
    instructions,
    user_text,
)
from tests.frameworks.test_eino import (
    REPORT,
    added,
    calls_asked,
    check_the_stop_is_the_output,
    check_wound_down_to_the_report,
    paired,
    pointed,
    rereading,
    sums,
    tool_names,
)
from tests.frameworks.test_llamaindex_ts import Invocation
from tests.frameworks.test_llamaindex_ts_olm import three_sums
from tests.frameworks.test_model_endpoint_text_actions import new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

TS_DIR = Path(__file__).resolve().parent / "ts"
AGENT = TS_DIR / "strands" / "agent.ts"  # tsx from TS_DIR's node_modules
KEY = "sk-strands-0123456789abcdefSECRET"
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: strands-ts
budgets:
  - agents: ["st-budget"]
    max_tool_calls: 3
  - agents: ["st-limited"]
    max_iterations: 4
rules:
  - name: two-calls-then-abort
    agents: ["st-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 tool calls"
"""
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("strands-ts"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def invoke(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
           tmp: Path, kind: str = "single", stream: bool = False,
           tasks: tuple[str, ...] = (), by_model: bool = False, fresh: bool = True,
           turns: int = 0, env: dict[str, str] | None = None) -> Invocation:
    """The agent once, in ``tmp``, named ``agent`` by its base URL (``by_model``: given as the
    model's ``clientConfig.baseURL``, else by ``OPENAI_BASE_URL``): one ``invoke()``
    (``stream``: ``stream()``) per task (by default one, a task of its own), of a new agent
    each (``fresh``) or of one that keeps its conversation; its model scripted by ``script``."""
    assert (AGENT.parent / "node_modules" / "@strands-agents" / "sdk").is_dir(), (
        "run `make tests/frameworks/ts/strands/node_modules/.installed` (part of make test)")
    case = next(_CASES)
    tasks = tasks or (f"Add 100 to 0, 1 and 2 in turn (case {case}).",)
    model = llm.script(f"{agent}-{case}", script)
    url = pointed(sidecar.url("model"), agent) if by_model or not env else ""
    environ = {**clean_environ(), "OPENAI_API_KEY": KEY, "OPENAI_MODEL": model,
               "AGENT_KIND": kind, "AGENT_STREAM": "1" if stream else "0",
               "AGENT_TASKS": json.dumps(tasks), "AGENT_RAN_LOG": str(tmp / "ran.log"),
               "AGENT_FRESH": "1" if fresh else "0", "AGENT_TURNS": str(turns),
               **({"AGENT_LLM_BASE_URL": url} if by_model else {"OPENAI_BASE_URL": url}),
               **(env or {})}
    result = subprocess.run(["node", "--import", "tsx", str(AGENT)], env=environ, cwd=TS_DIR,
                            capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    ran = tmp / "ran.log"
    return Invocation([json.loads(line) for line in result.stdout.splitlines()
                       if line.startswith("{")],
                      ran.read_text().splitlines() if ran.exists() else [],
                      llm.requests(model), result.stderr)


def budget_left(requests: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    return [LEFT.findall(instructions(body)) for body in requests]


def results(it: Invocation) -> list[dict[str, str]]:
    """Each task's output and error, as the shared checks read them."""
    return [{"output": outcome["output"], "error": outcome["error"]} for outcome in it.outcomes]


COUNTDOWN = [[("3", "3")], [("2", "3")], [("1", "3")], []]
DONE = {"output": REPORT, "stop": "endTurn", "error": ""}


# -- one run per invoke(); a budget ---------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_each_invocation_is_a_run_its_budget_counted_down_to_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, stream: bool) -> None:
    """Two ``invoke()``s (or ``stream()``s), each of a new agent, each a run with a budget of
    3: the model reads the true count at each request, 3 tools run, the 4th request is final
    (tools withdrawn, their definitions kept) and its answer is the result the caller gets."""
    before = run_ids(sidecar)
    tasks = (f"Add 100 to 0, 1 and 2 ({stream}).", f"And to 4, 5, 6 ({stream}).")
    it = invoke(sidecar, llm, "st-budget", sums, tmp_path, stream=stream, tasks=tasks)
    assert it.outcomes == [DONE] * 2, it.stderr[-2000:]
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


def test_the_models_base_url_alone_points_it(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """``clientConfig: { baseURL }`` with no ``OPENAI_BASE_URL``: the same run, the same
    budget."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "st-budget", sums, tmp_path, by_model=True)
    assert it.outcomes == [DONE]
    assert it.ran == added(3) and budget_left(it.requests) == COUNTDOWN
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (3, "tool_limit_reached"), run


def test_of_calls_asked_together_it_runs_the_last_alone(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Known gap, Strands': its Chat Completions stream reader opens a block per tool call and
    closes them all at the finish, so of two calls asked together only the last is kept, run
    and answered (the next request carries it alone). The endpoint counts what the model asked:
    2, then 1 (the second of the next pair trimmed at 1 left): 3 counted, 2 run."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "st-budget", paired, tmp_path)
    assert it.ran == ['add {"a":1,"b":100}', 'add {"a":2,"b":100}']
    assert budget_left(it.requests) == [[("3", "3")], [("1", "3")], []]
    assert [(message["role"], len(message.get("tool_calls") or ()))
            for message in it.requests[-1]["messages"][2:]] == [
        ("assistant", 1), ("tool", 0), ("assistant", 1), ("tool", 0)]
    assert it.outcomes == [DONE]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (3, "tool_limit_reached"), run


# -- loops and aborts -----------------------------------------------------------------------------

def test_a_loop_is_wound_down_then_its_report_is_the_result(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "st", rereading, tmp_path, stream=True)
    check_wound_down_to_the_report(sidecar, before, it.requests, it.ran, results(it))
    assert [outcome["stop"] for outcome in it.outcomes] == ["endTurn"]


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_an_abort_is_the_agents_result(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, stream: bool) -> None:
    """The rule aborts after 2 tool calls: the 3rd request gets the stop answer, not the
    upstream, and Strands takes it as the model's last answer: the caller's result."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "st-abort", sums, tmp_path, stream=stream)
    assert len(it.requests) == 2 and it.ran == added(2)
    check_the_stop_is_the_output(sidecar, before, results(it))
    assert [outcome["stop"] for outcome in it.outcomes] == ["endTurn"]


def test_an_abort_as_the_apis_error_is_the_invocations_error(
        llm: FakeLLM, tmp_path: Path, model_relay: str) -> None:  # noqa: F811
    """With ``model_abort: error`` the 3rd request is answered HTTP 400 ``watchdog_aborted``:
    Strands throws it out of ``invoke()`` as its ``ModelError``, the stop note its message."""
    (tmp_path / "sidecar").mkdir()
    with endpoint_with_pack(tmp_path / "sidecar", PACK, llm.base_url, model_relay,
                            model_abort="error") as sidecar:
        before = run_ids(sidecar)
        it = invoke(sidecar, llm, "st-abort", sums, tmp_path)
        run = the_ended_run(sidecar, before)
    [outcome] = it.outcomes
    assert outcome["output"] == "" and "400" in outcome["error"], outcome
    assert "Stopped by the test's rule after 2 tool calls" in outcome["error"], outcome
    assert it.ran == added(2) and len(it.requests) == 2
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_its_own_turn_limit_declared_as_the_packs_ends_at_its_last_turn_with_the_report(
        llm: FakeLLM, tmp_path: Path, model_relay: str, stream: bool) -> None:  # noqa: F811
    """docs/agents.md's pack (``strands-ts-limit.yaml``, as pasted): ``max_iterations`` the
    invocation's own ``limits: { turns }`` (a turn a model call). The request with 2 calls left
    is told so, the last turn's is the run's final request, tools withdrawn, its answer the
    result (``endTurn``): Strands' own limit never cuts the invocation off, the run ends
    ``tool_limit_reached`` with the report."""
    pack = documented_pack("strands-ts-limit.yaml")
    limit = int(yaml.safe_load(pack)["budgets"][0]["max_iterations"])
    with endpoint_with_pack(tmp_path, pack, llm.base_url, model_relay) as sidecar:
        before = run_ids(sidecar)
        it = invoke(sidecar, llm, "strands-ts", sums, tmp_path, stream=stream, by_model=True,
                    turns=limit)
        run = the_ended_run(sidecar, before)
    assert it.outcomes == [{"output": REPORT, "stop": "endTurn", "error": ""}], it.outcomes
    assert it.ran == added(limit - 1)
    check_last_model_call_final(it.requests, limit)
    check_ended_at_own_limit(run, limit, REPORT)


def test_its_own_turn_limit_below_the_packs_leaves_the_run_open(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Known gap (as Eino's ``MaxStep``): ``limits: { turns: 2 }`` below the pack's
    ``max_iterations`` (4) ends the invocation after its 2nd model call's tool ran
    (``stopReason: 'limitTurns'``, no text) with no request more, so the run is held open for
    the call it last handed over (it ends ``abandoned`` after ``run_end_timeout``)."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "st-limited", sums, tmp_path, turns=2)
    assert it.outcomes == [{"output": "", "stop": "limitTurns", "error": ""}]
    assert it.ran == added(2) and len(it.requests) == 2
    [run] = new_runs(sidecar, before, lambda runs: runs[0]["iterations"] == 2)
    assert (run["state"], run["terminal_state"], run["signals"]["budget"]["max_iterations"]) == (
        "active", None, 4), run


def test_a_chats_next_question_is_the_next_run(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """One agent invoked twice keeps its conversation (its ``messages``): the second request
    carries the first question and its result, and it is a run of its own with a budget of its
    own (3, 2, 1 left again)."""
    before = run_ids(sidecar)
    tasks = ("Add 100 to 0, 1 and 2 (chat).", "Now to 4, 5, 6 (chat).")
    it = invoke(sidecar, llm, "st-budget", sums, tmp_path, tasks=tasks, fresh=False)
    assert it.outcomes == [DONE] * 2
    assert [message["role"] for message in it.requests[4]["messages"]][-3:] == [
        "tool", "assistant", "user"]
    assert budget_left(it.requests) == COUNTDOWN * 2
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"], run["final_output"])
            for run in runs] == [(4, 3, "tool_limit_reached", REPORT)] * 2, runs


def failing(index: int, _body: dict[str, Any]) -> fakellm.Step:
    """``add`` of -1 (its tool throws), then the answer; again for the next task."""
    return fakellm.answer(SORRY) if index % 2 else fakellm.call("add", a=-1, b=100)


SORRY = "SORRY: the sum failed"


def test_a_tool_that_throws_is_a_failed_call(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Strands hands a tool's exception to the model as its result, ``[ERROR] Error: ...``
    (the tool message's only text): the endpoint reads it as the call's failure, its error the
    run's last."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "st", failing, tmp_path)
    assert it.requests[1]["messages"][-1]["content"] == "[ERROR] Error: cannot add to -1"
    assert it.outcomes == [{"output": SORRY, "stop": "endTurn", "error": ""}]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        1, "completed", SORRY), run
    assert (run["signals"]["errors"], run["signals"]["last_error"]) == (
        1, "ToolError: [ERROR] Error: cannot add to -1"), run["signals"]


# -- several agents -------------------------------------------------------------------------------

def delegated(index: int, body: dict[str, Any]) -> fakellm.Step:
    """The coordinator asks its ``worker`` tool (an agent); the worker adds twice and answers;
    back with its answer, the coordinator answers."""
    if not fakellm.offers_tools(body):
        return fakellm.answer(REPORT)
    if "add" in tool_names(body):
        return fakellm.answer(WORKED) if calls_asked(body) >= 2 else \
            fakellm.call("add", a=index, b=100)
    if any(message["role"] == "tool" for message in body["messages"]):
        return fakellm.answer(FINAL)
    return fakellm.call("worker", input="Add 100 to 1 and 2")


WORKED = "WORKER: the sums are 101 and 102"
FINAL = "FINAL: the worker did the sums"


def test_an_agent_as_a_tool_is_a_run_of_its_own(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """``asTool()``: the coordinator's ``worker`` call is its run's tool call; the worker's
    requests are a conversation of their own (its instructions, the call's input as its task),
    so a run of their own with a budget of their own (3, 2, 1 left); the coordinator's next
    request counts the one call it made (2 left) and its answer is the caller's result."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "st-budget", delegated, tmp_path, kind="tool")
    assert [tool_names(body) for body in it.requests] == [["worker"]] + [
        ["add", "read_file"]] * 3 + [["worker"]]
    assert budget_left(it.requests) == [[("3", "3")], [("3", "3")], [("2", "3")],
                                        [("1", "3")], [("2", "3")]]
    assert it.ran == ['add {"a":1,"b":100}', 'add {"a":2,"b":100}']
    assert it.outcomes == [{"output": FINAL, "stop": "endTurn", "error": ""}]
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert sorted((run["iterations"], run["tool_calls"], run["terminal_state"],
                   run["final_output"], run["signals"]["tools"]) for run in runs) == [
        (2, 1, "completed", FINAL, {"worker": 1}),
        (3, 2, "completed", WORKED, {"add": 2})], runs


STRUCTURED = "strands_structured_output"  # a Swarm's hand-off, and its answer


def swarmed(index: int, body: dict[str, Any]) -> fakellm.Step:
    """The coordinator hands off to the worker by its structured output; the worker adds (twice,
    or, ``greedy``, while it may) and answers by its structured output, the report when only
    that is offered."""
    names = tool_names(body)
    if "add" not in names:
        return fakellm.call(STRUCTURED, message=REPORT) if body.get("tool_choice") else \
            fakellm.call(STRUCTURED, agentId="worker", message="Add 100 to 1 and 2")
    if calls_asked(body) >= 2 and not GREEDY.search(instructions(body)):
        return fakellm.call(STRUCTURED, message=WORKED)
    return fakellm.call("add", a=index, b=100)


GREEDY = re.compile(r"\[budget: ")


def check_nodes_runs(sidecar: RunningServer, before: set[str],
                     worker: tuple[int, int, str, str]) -> None:
    """The swarm's two runs, ended: the coordinator's (its hand-off its answer) and the
    worker's (``worker``: iterations, tool calls, terminal state, answer)."""
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert sorted((run["iterations"], run["tool_calls"], run["terminal_state"],
                   run["final_output"]) for run in runs) == [
        (1, 0, "completed", json.dumps({"agentId": "worker", "message": "Add 100 to 1 and 2"})),
        worker], runs


def test_a_swarms_nodes_are_a_run_each_ended_by_their_structured_output(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """A ``Swarm``: each node's agent is invoked with a conversation of its own, so a run of
    its own; its hand-off or its answer is its structured output, the
    ``strands_structured_output`` call that ends its invocation with no request more: that call
    is the run's answer (the conventions' final-answer tools), which ends it ``completed``
    (before, it was held open for the call until ``run_end_timeout``)."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "st", swarmed, tmp_path, kind="swarm")
    assert it.outcomes == [{"output": WORKED, "stop": "COMPLETED", "error": ""}]
    assert it.ran == ['add {"a":1,"b":100}', 'add {"a":2,"b":100}']
    check_nodes_runs(sidecar, before, (3, 2, "completed", WORKED))


def test_a_swarm_nodes_budget_ends_in_its_structured_output(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The worker's run has a budget of 3 (its own: the coordinator's hand-off was another
    run); its final request offers only the structured output, forced, and the report it
    carries is the swarm's result."""
    before = run_ids(sidecar)
    it = invoke(sidecar, llm, "st-budget", swarmed, tmp_path, kind="swarm")
    assert it.ran == added(4)[1:]
    final = it.requests[-1]
    assert tool_names(final) == [STRUCTURED] and final["tool_choice"] == {
        "type": "function", "function": {"name": STRUCTURED}}, final
    assert budget_left(it.requests[1:]) == COUNTDOWN
    assert it.outcomes == [{"output": REPORT, "stop": "COMPLETED", "error": ""}]
    check_nodes_runs(sidecar, before, (4, 3, "tool_limit_reached", REPORT))


# -- its own OpenTelemetry ------------------------------------------------------------------------

OTEL_DRIVER = "strands_ts"
RECORDING = RECORDINGS / OTEL_DRIVER / "two_runs.jsonl"


def check_watched(sidecar: RunningServer, before: set[str], agent: str = "adder") -> None:
    """Each invocation a run of its own, named by its agent: 4 model calls, 3 tool calls,
    ``completed`` with its answer, its tokens counted."""
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert sorted((run["agent"], run["iterations"], run["tool_calls"], run["terminal_state"],
                   run["final_output"], run["signals"]["tools"]) for run in runs) == [
        (agent, 4, 3, "completed", "SUMS 0", {"add": 3}),
        (agent, 4, 3, "completed", "SUMS 1", {"add": 3})], runs
    assert all(run["signals"]["total_tokens"] > 0 for run in runs), runs


def traced(sidecar: RunningServer, llm: FakeLLM, tmp: Path, record_to: Path | None = None,
           agent: str = "", script: fakellm.Script = three_sums,
           tasks: tuple[str, ...] = ("Add 100 to 0, 1, 2.", "Add 100 to 4, 5, 6."),
           turns: int = 0) -> Invocation:
    """Two invocations of the agent with Strands' telemetry on, exported to ``sidecar``: by
    ``setupTracer({ exporters: { otlp: true } })`` (OTLP/HTTP JSON), or, with ``record_to``,
    by ../recording.ts (OTLP/HTTP protobuf, and recorded there); its model the upstream
    itself, or, with ``agent``, the sidecar's endpoint naming it so."""
    assert (AGENT.parent / "node_modules" / "@opentelemetry" / "sdk-metrics").is_dir(), (
        "run `make tests/frameworks/ts/strands/node_modules/.installed` (part of make test)")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": sidecar.otlp_http,
           "OPENAI_BASE_URL": pointed(sidecar.url("model"), agent) if agent else llm.base_url,
           **({"RECORD_SPANS": str(record_to)} if record_to else {"AGENT_OTEL": "1"})}
    return invoke(sidecar, llm, agent or "watched", script, tmp, env=env, tasks=tasks,
                  turns=turns)


def test_steered_and_traced_each_invocation_is_one_run(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Its model the endpoint and its spans the same sidecar's: the spans and the endpoint's
    calls are one run per invocation, each model call and tool call counted once; the run
    takes the spans' agent name."""
    before = run_ids(sidecar)
    it = traced(sidecar, llm, tmp_path, agent="st-traced")
    assert results(it) == [{"output": "SUMS 0", "error": ""}, {"output": "SUMS 1", "error": ""}]
    assert len(it.requests) == 8
    check_watched(sidecar, before)
