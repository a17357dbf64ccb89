"""A pack's ``finish:`` that carries only the report (``exit`` with ``final_result:
${report}``, adk.ExitTool's) is the run's answer when the model calls it itself, and only
when the request offers that tool as the finish takes it: the same name offered with other
arguments (an agent's ``exit`` that ends a process), or not offered at all (another agent
the same budgets entry matches; a model that makes the call up) is work the agent runs and
answers, and its run goes on. Driven by the real ``openai`` client (Chat Completions, whole
and streamed) through both relays against the scripted model; the run asserted as the
sidecar tells it once it has ended."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.frameworks.fakellm import FakeLLM, Step, answer, call
from tests.harness import RunningServer, endpoint_with_pack, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-finish-answer-0123456789"
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: exits
budgets:
  - agents: ["exit-*"]
    max_tool_calls: 5
    finish:
      tool: exit
      arguments:
        final_result: "${report}"
"""
DONE = "DONE: the sum is 102"


def tool(name: str, **properties: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {key: {"type": kind} for key, kind in properties.items()}}}}


ADD = tool("add", a="integer", b="integer")
OFFERS = {
    "own": [ADD, tool("exit", final_result="string")],  # the finish, as the pack takes it
    "other": [ADD, tool("exit", code="integer")],  # an exit that takes other arguments
    "none": [ADD],  # no exit offered: the model makes the call up
}


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811
    with endpoint_with_pack(tmp_path_factory.mktemp("exits"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def exits_then_answers(arguments: dict[str, Any]) -> Any:
    """``exit`` with ``arguments`` first, then (told its result) the answer."""
    def pick(index: int, _body: dict[str, Any]) -> Step:
        return call("exit", **arguments) if index == 0 else answer(DONE)
    return pick


def agent_loop(sidecar: RunningServer, model: str, agent: str, tools: list[dict[str, Any]],
               stream: bool) -> tuple[str, list[str]]:
    """The real client's tool loop: each call answered (an unknown tool with an error, as
    agents do), until an answer with no call, or a call of ``exit`` whose tool the request
    offered as the finish (the agent ends with its ``final_result``). Its output, and the
    tools it ran."""
    client = openai.OpenAI(base_url=f"{sidecar.url('model')}/agent/{agent}/v1", api_key=KEY,
                           max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "add 1 and 101, then exit"}]
    names = {item["function"]["name"]: item for item in tools}
    ran: list[str] = []
    for _ in range(4):
        if stream:
            with client.chat.completions.stream(model=model, messages=messages,
                                                tools=tools) as events:
                message = events.get_final_completion().choices[0].message
        else:
            message = client.chat.completions.create(model=model, messages=messages,
                                                     tools=tools).choices[0].message
        if not message.tool_calls:
            return message.content or "", ran
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c.id, "type": "function",
             "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls]})
        for asked in message.tool_calls:
            arguments = json.loads(asked.function.arguments)
            if asked.function.name == "exit" and names.get("exit") == OFFERS["own"][1]:
                return str(arguments["final_result"]), ran
            ran.append(asked.function.name)
            result = "exited 0" if asked.function.name in names else \
                f"error: no tool named {asked.function.name}"
            messages.append({"role": "tool", "tool_call_id": asked.id, "content": result})
    raise AssertionError("no answer")


def the_ended_run(sidecar: RunningServer, agent: str) -> dict[str, Any]:
    def ended() -> list[dict[str, Any]] | None:
        runs = [run for run in sidecar.get_json("/v1/runs?limit=1000")["runs"]
                if run["agent"] == agent]
        return runs if runs and all(run["state"] == "ended" for run in runs) else None

    runs = wait_until(ended, what=f"{agent}'s run to end")
    assert len(runs) == 1, json.dumps(runs)
    detail: dict[str, Any] = sidecar.get_json(f"/v1/runs/{runs[0]['id']}")
    return detail


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_offered_finish_called_by_the_model_is_the_runs_answer(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        stream: bool) -> None:
    agent = f"exit-own-{model_relay}-{stream}"
    model = llm.script(agent, exits_then_answers({"final_result": "the sum is 102"}))
    assert agent_loop(sidecar, model, agent, OFFERS["own"], stream) == ("the sum is 102", [])
    assert len(llm.requests(model)) == 1
    run = the_ended_run(sidecar, agent)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        0, "completed", "the sum is 102"), run


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("offers", "arguments"), [
    ("other", {"code": 0}), ("none", {"final_result": "made up"})])
def test_an_exit_the_request_does_not_offer_as_the_finish_is_work_and_the_run_goes_on(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        offers: str, arguments: dict[str, Any], stream: bool) -> None:
    """Before, any call named as the pack's finish ended the run with its arguments as the
    output, the agent's next request (the call's result) a run of its own or the ended one's
    reply; its tool uncounted."""
    agent = f"exit-{offers}-{model_relay}-{stream}"
    model = llm.script(agent, exits_then_answers(arguments))
    assert agent_loop(sidecar, model, agent, OFFERS[offers], stream) == (DONE, ["exit"])
    assert len(llm.requests(model)) == 2
    run = the_ended_run(sidecar, agent)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (2, 1, "completed", DONE), run
