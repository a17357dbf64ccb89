"""Inngest AgentKit (npm ``@inngest/agent-kit`` 0.13.2, its peers ``inngest`` and ``zod``),
steered through the model endpoint with no code in it: ``ts/agentkit/agent.ts``, its own
``package-lock.json``, installed by ``make tests/frameworks/ts/agentkit/node_modules/.installed``.
Run standalone (``agent.run`` / ``network.run`` from a Node script, no Inngest server: outside an
Inngest function its adapter's request is a plain ``fetch``), its model ``openai({ model,
baseUrl })`` pointed at the sidecar by the base URL alone, which also names the agent
(``/agent/<name>/v1``); its tool a ``createTool`` of a zod schema, really run (each call
appends to ``ran.log``).

What it sends (recorded): Chat Completions, not streamed, ``tools`` and ``tool_choice: auto``,
the conversation sent whole (its system prompt, the input, the agent's turns).

* ``agent.run(input, { maxIter })`` is one run: a budget of 3 counted down at each request, 3
  tools run, the 4th request offers none, its answer the agent's output, ``tool_limit_reached``;
* a loop wound down by ``tool-cycle``, then stopped: the stop answer is its output;
* an abort answered as the model's answer: the agent's output, no error;
* ``network.run`` of a network (``createNetwork``, a code router: the adder while it calls
  tools, then the reporter) is one run of its agents' model calls; a budget counts down across
  them; its own ``maxIter`` declared as the pack's ``max_iterations`` ends the run at its last
  call (below it, a known gap: the run is left open);
* with AgentKit's routing agent, its last request (its ``done`` call) is a run of its own, left
  open (a known gap).

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

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVER_TIMEOUT, clean_environ
from tests.frameworks.test_eino import pointed
from tests.frameworks.test_model_endpoint_frameworks import LEFT, instructions
from tests.frameworks.test_model_endpoint_text_actions import (
    check_loop_wound_down,
    new_runs,
    run_ids,
    the_ended_run,
)
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

TS_DIR = Path(__file__).resolve().parent / "ts"
AGENT = TS_DIR / "agentkit" / "agent.ts"  # tsx from TS_DIR's node_modules
KEY = "sk-agentkit-0123456789abcdefSECRET"
REPORT = "REPORT: 3 sums done; the rest remains."
STOP = "Stopped by the test's rule after 2 tool calls"
STOPPED = "The agent-watchdog stopped this run"
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: agentkit
budgets:
  - agents: ["ak-budget*"]
    max_tool_calls: 3
  - agents: ["ak-limited"]
    max_iterations: 3
rules:
  - name: two-calls-then-abort
    agents: ["ak-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "{STOP}"
"""
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("agentkit"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def run_agentkit(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
                 tmp: Path, inputs: tuple[str, ...] = (), mode: str = "agent",
                 max_iter: int = 10
                 ) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """The driver's runs, one per input in turn (``mode``: ``agent.run`` or ``network.run``),
    its model ``openai({ model, baseUrl })`` at the sidecar naming ``agent``: what each run
    returned, what its tool ran, what the upstream read."""
    assert (AGENT.parent / "node_modules" / "@inngest" / "agent-kit").is_dir(), (
        "run `make tests/frameworks/ts/agentkit/node_modules/.installed` (part of make test)")
    case = next(_CASES)
    inputs = inputs or (f"Add 100 to 0, 1 and 2 in turn (case {case}).",)
    model = llm.script(f"{agent}-{case}", script)
    environ = {**clean_environ(), "OPENAI_API_KEY": KEY, "OPENAI_MODEL": model,
               "AGENT_LLM_BASE_URL": pointed(sidecar.url("model"), agent),
               "AGENT_INPUTS": json.dumps(inputs), "AGENT_RAN_LOG": str(tmp / "ran.log"),
               "AGENT_MODE": mode, "AGENT_MAX_ITER": str(max_iter)}
    result = subprocess.run(["node", "--import", "tsx", str(AGENT)], env=environ, cwd=TS_DIR,
                            capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    ran = tmp / "ran.log"
    return ([json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")],
            ran.read_text().splitlines() if ran.exists() else [], llm.requests(model))


def sums(index: int, body: dict[str, Any]) -> fakellm.Step:
    """An add per request (0, 1, 2, ...) while tools are offered, then the report."""
    return fakellm.call("add", a=index, b=100) if fakellm.offers_tools(body) \
        else fakellm.answer(REPORT)


def looping(_index: int, _body: dict[str, Any]) -> fakellm.Step:
    """The same add at each request, asked for its final answer or not."""
    return fakellm.call("add", a=7, b=100)


def budget_left(requests: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    return [LEFT.findall(instructions(body)) for body in requests]


COUNTDOWN = [[("3", "3")], [("2", "3")], [("1", "3")], []]


def test_each_agent_run_is_a_run_its_budget_counted_down_to_the_report(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Two ``agent.run`` calls in turn, each a run with a budget of 3: the model reads the
    true count at each request, 3 adds run, the 4th request offers no tools and its answer is
    the agent's output; each run ends ``tool_limit_reached``."""
    before = run_ids(sidecar)
    inputs = ("Add 100 to 0, 1 and 2.", "And to 4, 5 and 6.")
    outputs, ran, requests = run_agentkit(sidecar, llm, "ak-budget", sums, tmp_path, inputs)
    assert outputs == [{"output": REPORT, "agents": ["adder"]}] * 2, outputs
    assert ran == [f'add {{"a":{a},"b":100}}' for a in (0, 1, 2, 4, 5, 6)]
    assert budget_left(requests) == COUNTDOWN * 2
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 3 + [False] + [
        True] * 3 + [False]
    assert not any(body.get("stream") for body in requests)
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert [(run["iterations"], run["tool_calls"], run["terminal_state"],
             run["final_output"]) for run in runs] == [(4, 3, "tool_limit_reached", REPORT)] * 2


def test_a_loop_is_wound_down_then_stopped(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The same add again and again, even when asked for its final answer: ``tool-cycle``
    winds it down, the 7th request is final (no tools) and, the model calling the tool once
    more, the stop answer (a text answer, the call taken out) is the agent's output, which ends
    its loop; nothing goes upstream after the 7th."""
    before = run_ids(sidecar)
    outputs, ran, requests = run_agentkit(sidecar, llm, "ak-loop", looping, tmp_path)
    check_loop_wound_down(requests, the_ended_run(sidecar, before))
    assert len(ran) == 6 and set(ran) == {'add {"a":7,"b":100}'}
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 6 + [False]
    assert outputs[0]["output"].startswith(STOPPED) and "6 tool calls" in outputs[0][
        "output"], outputs


def test_an_abort_is_answered_as_its_output(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """A rule's abort after 2 tool calls: the 3rd request is answered with the stop note,
    which AgentKit takes as the model's answer: the agent's output, no error."""
    before = run_ids(sidecar)
    outputs, ran, requests = run_agentkit(sidecar, llm, "ak-abort", sums, tmp_path)
    assert len(requests) == 2 and ran == ['add {"a":0,"b":100}', 'add {"a":1,"b":100}']
    assert outputs[0]["output"].startswith(f"{STOPPED}: {STOP}"), outputs
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


NET_SCRIPT = fakellm.steps(*(fakellm.call("add", a=a, b=100) for a in range(3)),
                           fakellm.answer("Sums: 100, 101, 102."), fakellm.answer(REPORT))


def test_a_network_run_is_one_run_of_its_agents(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """``network.run``: its router gives the adder a turn while it calls tools (each turn one
    model call, its tools run, AgentKit's ``maxIter: 0`` for an agent in a network), then the
    reporter, then ends. The agents share the network's conversation (its state's results),
    each request with the agent's own system prompt: one conversation, the first user message
    the input, so one run named by the base URL, its model calls all the agents' (the adder's
    4, the reporter's 1), its tool calls the adder's 3, its output the reporter's answer."""
    before = run_ids(sidecar)
    outputs, ran, requests = run_agentkit(sidecar, llm, "ak-net", NET_SCRIPT, tmp_path,
                                          mode="network")
    assert outputs == [{"output": REPORT, "agents": ["adder"] * 4 + ["reporter"]}], outputs
    assert ran == [f'add {{"a":{a},"b":100}}' for a in range(3)]
    assert [body["messages"][0]["content"].split(".")[0] for body in requests] == [
        "You are a calculator"] * 4 + ["You report the sums done in one sentence"]
    assert [len(body["messages"]) for body in requests] == [2, 4, 6, 8, 9]
    run = the_ended_run(sidecar, before)
    assert (run["agent"], run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == ("ak-net", 5, 3, "completed", REPORT), run


def test_a_networks_budget_counts_down_its_agents_then_its_report_is_the_output(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """A budget of 3 on the network's run: the adder reads 3, 2, 1 left, its 4th request
    offers no tools and its answer (the report) ends the run ``tool_limit_reached``; the
    router then gives the reporter its turn, whose request, in the run that ended, gets the
    run's final answer again, not the upstream: the network's output is the report."""
    before = run_ids(sidecar)
    outputs, ran, requests = run_agentkit(sidecar, llm, "ak-budget-net", sums, tmp_path,
                                          mode="network")
    assert outputs == [{"output": REPORT, "agents": ["adder"] * 4 + ["reporter"]}], outputs
    assert ran == [f'add {{"a":{a},"b":100}}' for a in range(3)]
    assert budget_left(requests) == COUNTDOWN
    assert [fakellm.offers_tools(body) for body in requests] == [True] * 3 + [False]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (4, 3, "tool_limit_reached", REPORT), run


def test_its_own_max_iter_declared_as_the_packs_ends_the_run_at_its_last_call(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """The network's ``maxIter`` (3) counts its agents' turns, each one model call with a code
    router: declared as the pack's ``max_iterations`` (3), its 3rd request is the run's final
    one, tools withdrawn, and its answer the network's output when ``maxIter`` stops it, the
    run ``tool_limit_reached``."""
    before = run_ids(sidecar)
    outputs, ran, requests = run_agentkit(sidecar, llm, "ak-limited", sums, tmp_path,
                                          mode="network", max_iter=3)
    assert outputs == [{"output": REPORT, "agents": ["adder"] * 3}], outputs
    assert len(ran) == 2
    assert [fakellm.offers_tools(body) for body in requests] == [True, True, False]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (3, 2, "tool_limit_reached", REPORT), run


def test_its_own_max_iter_below_the_packs_leaves_its_run_open_known_gap(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Known gap (docs/agents.md#inngest-agentkit): the network's ``maxIter`` (2) below the
    pack's ``max_iterations`` (3) stops the network after 2 model calls, the last one's tool
    run and no request more: nothing tells the endpoint, whose run waits for the call it last
    handed over (``abandoned`` after ``run_end_timeout``). The network's output is none."""
    before = run_ids(sidecar)
    outputs, ran, requests = run_agentkit(sidecar, llm, "ak-limited", sums, tmp_path,
                                          mode="network", max_iter=2)
    assert outputs == [{"output": None, "agents": ["adder"] * 2}], outputs
    assert len(ran) == 2 and len(requests) == 2
    [run] = new_runs(sidecar, before, lambda runs: True)
    assert (run["state"], run["iterations"], run["signals"]["in_flight"],
            run["signals"]["budget"]["max_iterations"]) == ("active", 2, 1, 3), run


def selects(agent: str) -> fakellm.Step:
    return fakellm.Step(tool_calls=(fakellm.ToolCall("select_agent", {"name": agent}),))


def test_a_routing_agents_last_call_is_a_run_of_its_own_known_gap(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Known gap (docs/agents.md#inngest-agentkit): no router, so AgentKit's routing agent (the
    network's ``defaultModel``) picks each turn's agent by its ``select_agent`` tool and ends
    the network by its ``done`` tool, ``tool_choice: required``, its requests the network's
    conversation under its own system prompt. The routing agent's requests and its agents'
    are one run up to the last agent's answer (6 model calls, the adder's 1 tool call; its
    ``select_agent`` calls are not the run's tool calls), which ends it ``completed`` with
    that answer; its last request, after that answer, is a run of its own, whose ``done``
    call no request follows (``abandoned`` after ``run_end_timeout``)."""
    before = run_ids(sidecar)
    script = fakellm.steps(selects("adder"), fakellm.call("add", a=0, b=100), selects("adder"),
                           fakellm.answer("Sums: 100."), selects("reporter"),
                           fakellm.answer(REPORT), fakellm.call("done", summary="All done."))
    outputs, ran, requests = run_agentkit(sidecar, llm, "ak-routed", script, tmp_path,
                                          mode="routed")
    assert outputs == [{"output": REPORT, "agents": ["adder", "adder", "reporter"]}], outputs
    assert ran == ['add {"a":0,"b":100}'] and len(requests) == 7
    assert [body.get("tool_choice") for body in requests] == ["required", "auto"] * 2 + [
        "required", None, "required"]
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2 and any(
        run["state"] == "ended" for run in runs))
    assert sorted((run["state"], run["iterations"], run["tool_calls"], run["terminal_state"],
                   run["final_output"], run["signals"]["in_flight"]) for run in runs) == [
        ("active", 1, 0, None, None, 1), ("ended", 6, 1, "completed", REPORT, 0)], runs
    assert len({run["session"] for run in runs}) == 1
