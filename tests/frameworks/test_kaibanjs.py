"""KaibanJS (npm ``kaibanjs`` 0.23.1), steered through the model endpoint with no code in it:
``ts/kaibanjs/agent.ts``, its own ``package-lock.json``, installed by ``make
tests/frameworks/ts/kaibanjs/node_modules/.installed``. An ``Agent`` with a ``Task``, run by a
``Team``'s ``start()``, pointed at the sidecar by the agent's ``llmConfig.apiBaseUrl`` or
``OPENAI_BASE_URL`` alone, which also names the agent (``/agent/<name>/v1``); its tool
LangChain's ``DynamicStructuredTool``, really run (each call appends to ``ran.log``).

What it sends (recorded): Chat Completions, not streamed, no ``tools``: its ReAct agent asks the
model, in its system prompt, for one JSON object per answer, ``{"thought", "action",
"actionInput"}`` to run a tool (its result the next user message: ``You got this result from
the tool: "..."``) and ``{"finalAnswer": "..."}`` to end its task, the conversation sent whole.
So its pack declares it ``actions: text`` with ``action_key: action``, ``answer_key:
finalAnswer`` and ``stop_answer: '{"finalAnswer": ${note_json}}'`` (docs/agents.md's pack).

* each ``start()`` of a team of one task is one run; a team of two tasks, two runs;
* a budget of 3: the true count at each request, 3 tools run, the 4th request told to finish,
  its ``finalAnswer`` the team's result, ``tool_limit_reached``;
* a loop wound down by ``tool-cycle``, then stopped: the stop answer is its result;
* an abort answered as its ``finalAnswer``: the team's result, no error;
* its observation step a model call of the run, which goes on;
* its own ``maxIterations`` asking for the final answer in its words (2 iterations before it):
  read as its limit, the answer there ends the run ``tool_limit_reached``.

Its ``{"finalAnswer"}`` is declared its answer by ``answer_key: finalAnswer`` (the run's
output its text), and so its ``{"observation": ...}`` step, which holds neither, is a step of
the run (a model call, no tool call): the run goes on.

Run with ``KAIBAN_TELEMETRY_OPT_OUT=1``: without it, its usage telemetry's send to
``nom.telemetrydeck.com`` fails offline and ends the process (an unhandled rejection).

Nothing waits for a directive: what the upstream saw at each request is asserted.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, clean_environ
from tests.frameworks.steering import documented_pack
from tests.frameworks.test_eino import pointed
from tests.frameworks.test_model_endpoint_text_actions import (
    LEFT,
    check_loop_wound_down,
    final_asked,
    instructions,
    new_runs,
    run_ids,
    the_ended_run,
)
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

TS_DIR = Path(__file__).resolve().parent / "ts"
AGENT = TS_DIR / "kaibanjs" / "agent.ts"  # tsx from TS_DIR's node_modules
KEY = "sk-kaibanjs-0123456789abcdefSECRET"
REPORT = "REPORT: 3 sums done; the rest remains."
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: kaibanjs
budgets:
  - agents: ["kb-budget"]
    max_tool_calls: 3
    actions: text
    action_key: action
    answer_key: finalAnswer
    stop_answer: '{"finalAnswer": ${note_json}}'
  - agents: ["kb*"]
    actions: text
    action_key: action
    answer_key: finalAnswer
    stop_answer: '{"finalAnswer": ${note_json}}'
rules:
  - name: two-actions-then-abort
    agents: ["kb-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 actions"
"""
STOPPED = "The agent-watchdog stopped this run"
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("kaibanjs"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def start(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
          tmp: Path, tasks: tuple[str, ...] = (), by_config: bool = False,
          one_team: bool = False, max_iterations: int = 0
          ) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """The agent's teams, in turn, one ``start()`` per task, named ``agent`` by the base URL
    (``by_config``: the agent's ``llmConfig.apiBaseUrl``, else ``OPENAI_BASE_URL``): what each
    returned, what its tool ran, what the upstream read. ``one_team``: the tasks those of one
    team, each with an agent of its own, started once; ``max_iterations``: the agent's own
    ``maxIterations`` (0: KaibanJS's default)."""
    assert (AGENT.parent / "node_modules" / "kaibanjs").is_dir(), (
        "run `make tests/frameworks/ts/kaibanjs/node_modules/.installed` (part of make test)")
    case = next(_CASES)
    tasks = tasks or (f"Add 100 to 0, 1 and 2 in turn (case {case}).",)
    model = llm.script(f"{agent}-{case}", script)
    url = pointed(sidecar.url("model"), agent)
    environ = {**clean_environ(), "OPENAI_API_KEY": KEY, "OPENAI_MODEL": model,
               "KAIBAN_TELEMETRY_OPT_OUT": "1", "AGENT_TASKS": json.dumps(tasks),
               "AGENT_RAN_LOG": str(tmp / "ran.log"), "AGENT_ONE_TEAM": "1" if one_team else "0",
               "AGENT_MAX_ITERATIONS": str(max_iterations),
               **({"AGENT_LLM_BASE_URL": url} if by_config else {"OPENAI_BASE_URL": url})}
    result = subprocess.run(["node", "--import", "tsx", str(AGENT)], env=environ, cwd=TS_DIR,
                            capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    ran = tmp / "ran.log"
    return ([json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")],
            ran.read_text().splitlines() if ran.exists() else [], llm.requests(model))


def action(a: int, thought: str = "The next sum.") -> fakellm.Step:
    return fakellm.answer(json.dumps({"thought": thought, "action": "add",
                                      "actionInput": {"a": a, "b": 100}}))


FINAL = fakellm.answer(json.dumps({"finalAnswer": REPORT}))


def sums(index: int, body: dict[str, Any]) -> fakellm.Step:
    """An add per request (0, 1, 2, ...) until the request asks it to finish: its final
    answer, the report."""
    return FINAL if final_asked(body) else action(index)


def looping(_index: int, _body: dict[str, Any]) -> fakellm.Step:
    return action(7, "Once more.")


def budget_left(requests: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    return [LEFT.findall(instructions(body)) for body in requests]


def answers(requests: list[dict[str, Any]]) -> list[str]:
    """What the agent sent back after each answer: its tool's result, as its next user
    message."""
    return [message["content"] for message in requests[-1]["messages"][2:]
            if message["role"] == "user"]


COUNTDOWN = [[("3", "3")], [("2", "3")], [("1", "3")], []]


@pytest.mark.parametrize("by_config", [False, True], ids=["OPENAI_BASE_URL", "apiBaseUrl"])
def test_each_start_is_a_run_its_budget_counted_down_to_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path, by_config: bool) -> None:
    """Two teams started in turn, each a run with a budget of 3: the model reads the true count
    at each request (no API tools: the countdown in the system message), 3 adds run, the 4th
    request asks it to finish and its ``finalAnswer`` is the team's result."""
    before = run_ids(sidecar)
    tasks = (f"Add 100 to 0, 1 and 2 ({by_config}).", f"And to 4, 5, 6 ({by_config}).")
    outputs, ran, requests = start(sidecar, llm, "kb-budget", sums, tmp_path, tasks, by_config)
    assert outputs == [{"status": "FINISHED", "result": REPORT}] * 2, outputs
    assert ran == [f'add {{"a":{a},"b":100}}' for a in (0, 1, 2, 4, 5, 6)]
    assert budget_left(requests) == COUNTDOWN * 2
    assert [final_asked(body) for body in requests] == [False, False, False, True] * 2
    assert not any(fakellm.offers_tools(body) or body.get("stream") for body in requests)
    assert answers(requests[:4]) == [
        'You got this result from the tool: "100"', 'You got this result from the tool: "101"',
        'You got this result from the tool: "102"']
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"]) for run in runs] == [
        (4, 3, "tool_limit_reached")] * 2, runs
    assert [run["final_output"] for run in runs] == [REPORT] * 2


def test_each_task_of_a_team_is_a_run_with_a_budget_of_its_own(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """One team of two tasks, each its agent's, started once: each task's conversation (a
    system prompt of its own agent's) is a run with a budget of its own, counted down to its
    report; the team's result is the last task's."""
    before = run_ids(sidecar)
    tasks = ("Add 100 to 0, 1 and 2 (team).", "And to 4, 5, 6 (team).")
    outputs, ran, requests = start(sidecar, llm, "kb-budget", sums, tmp_path, tasks,
                                   one_team=True)
    assert outputs == [{"status": "FINISHED", "result": REPORT}], outputs
    assert ran == [f'add {{"a":{a},"b":100}}' for a in (0, 1, 2, 4, 5, 6)]
    assert budget_left(requests) == COUNTDOWN * 2
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"]) for run in runs] == [
        (4, 3, "tool_limit_reached")] * 2, runs


def test_a_loop_is_wound_down_then_stopped_by_its_final_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The same add again and again: ``tool-cycle`` winds it down, the 7th request is final
    and, the model acting once more, the next gets the stop answer, a ``finalAnswer``: the
    team's result; the upstream gets nothing after the 7th (the run ended at its answer)."""
    before = run_ids(sidecar)
    outputs, ran, requests = start(sidecar, llm, "kb-loop", looping, tmp_path)
    run = the_ended_run(sidecar, before)
    check_loop_wound_down(requests, run)
    assert len(ran) == 7 and set(ran) == {'add {"a":7,"b":100}'}
    assert [output["status"] for output in outputs] == ["FINISHED"]
    assert outputs[0]["result"].startswith(f"{STOPPED}: the agent went on after its final "
                                           "request instead of ending (tool-cycle)"), outputs


def test_an_abort_is_answered_as_its_final_answer(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """A rule's abort after 2 actions: the 3rd request is answered with the stop answer, a
    ``finalAnswer``, which ends the team with the note as its result, no error; the upstream
    read 2 requests."""
    before = run_ids(sidecar)
    outputs, ran, requests = start(sidecar, llm, "kb-abort", sums, tmp_path)
    assert len(requests) == 2 and ran == ['add {"a":0,"b":100}', 'add {"a":1,"b":100}']
    assert [output["status"] for output in outputs] == ["FINISHED"]
    assert STOPPED in outputs[0]["result"] and "after 2 actions" in outputs[0]["result"]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_its_observation_is_a_step_of_the_run(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """KaibanJS's ``{"observation": ..., "isFinalAnswerReady": false}`` is a step (it asks the
    model again): it holds no action and no ``finalAnswer``, so, the pack giving its
    ``answer_key``, the run goes on at its next request, the step a model call and no tool
    call; the task's ``finalAnswer`` ends the one run with its text."""
    observe = fakellm.answer(json.dumps({"observation": "100 so far, two sums left.",
                                         "isFinalAnswerReady": False}))
    script = fakellm.steps(action(0), observe, action(1), FINAL)
    before = run_ids(sidecar)
    outputs, ran, requests = start(sidecar, llm, "kb-budget", script, tmp_path)
    assert outputs == [{"status": "FINISHED", "result": REPORT}]
    assert len(requests) == 4 and len(ran) == 2
    assert budget_left(requests) == [[("3", "3")], [("2", "3")], [("2", "3")], [("1", "3")]]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (4, 2, "completed", REPORT), run


FORCED = "We don't have more time to keep looking for the answer."


def obeying(index: int, body: dict[str, Any]) -> fakellm.Step:
    """An add per request until it is asked for its final answer, in KaibanJS's words or the
    endpoint's."""
    return FINAL if final_asked(body) or FORCED in str(body["messages"][-1]["content"]) \
        else action(index)


def test_its_own_limit_asking_for_the_final_answer_ends_the_run_at_it(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Its own ``maxIterations`` (5) with ``forceFinalAnswer``: 2 iterations before it,
    KaibanJS asks for the final answer in its own words (the request's last message, in place
    of the last add's result), read as its limit: the model's ``finalAnswer`` there is the
    team's result and the run ends ``tool_limit_reached`` with it."""
    before = run_ids(sidecar)
    outputs, ran, requests = start(sidecar, llm, "kb-own-limit", obeying, tmp_path,
                                   max_iterations=5)
    assert outputs == [{"status": "FINISHED", "result": REPORT}], outputs
    assert len(requests) == 4 and len(ran) == 3
    assert [FORCED in str(body["messages"][-1]["content"]) for body in requests] == [
        False, False, False, True]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (4, 3, "tool_limit_reached", REPORT), run


def test_the_pack_is_docs_agents_mds() -> None:
    """The entries these tests run declare KaibanJS as docs/agents.md's pack does."""
    [documented] = yaml.safe_load(documented_pack("kaibanjs.yaml"))["budgets"]
    keys = ("actions", "action_key", "answer_key", "stop_answer")
    for entry in yaml.safe_load(PACK)["budgets"]:
        assert {key: entry[key] for key in keys} == {key: documented[key] for key in keys}
