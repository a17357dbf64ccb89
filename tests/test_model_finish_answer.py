"""A pack's ``finish:`` that carries only the report (``exit`` with ``final_result:
${report}``, adk.ExitTool's) is the run's answer when the model calls it itself, and only
when the request offers that tool as the finish takes it: the same name offered with other
arguments (an agent's ``exit`` that ends a process), or not offered at all (another agent
the same budgets entry matches; a model that makes the call up) is work the agent runs and
answers, and its run goes on; asked beside work, it is the answer after the work. Driven by
the real ``openai`` (Chat Completions, Responses) and ``anthropic`` (Messages) clients, whole
and streamed, through both relays against the scripted model; the run asserted as the
sidecar tells it once it has ended."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.frameworks.fakellm import FakeLLM, Step, ToolCall, answer, call
from tests.harness import RunningServer, endpoint_with_pack, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-finish-answer-0123456789"
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: exits
budgets:
  - agents: ["made-up-*"]
    max_tool_calls: 1
  - agents: ["exit-final-*"]
    max_tool_calls: 1
    finish:
      tool: exit
      arguments:
        final_result: "${report}"
  - agents: ["exit-*"]
    max_tool_calls: 5
    finish:
      tool: exit
      arguments:
        final_result: "${report}"
"""
DONE = "DONE: the sum is 102"


def schema(**properties: str) -> dict[str, Any]:
    return {"type": "object", "properties": {key: {"type": kind}
                                             for key, kind in properties.items()}}


ADD = ("add", schema(a="integer", b="integer"))
OWN_EXIT = ("exit", schema(final_result="string"))
OFFERS = {
    "own": [ADD, OWN_EXIT],  # the finish, as the pack takes it
    "other": [ADD, ("exit", schema(code="integer"))],  # an exit that takes other arguments
    "none": [ADD],  # no exit offered: the model makes the call up
}


def tools_of(api: str, offers: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The tools as each API's client offers them."""
    if api == "chat":
        return [{"type": "function", "function": {"name": name, "parameters": params}}
                for name, params in offers]
    if api == "responses":
        return [{"type": "function", "name": name, "parameters": params} for name, params in offers]
    return [{"name": name, "input_schema": params} for name, params in offers]


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811
    with endpoint_with_pack(tmp_path_factory.mktemp("exits"), PACK, llm.base_url, model_relay,
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1")) as server:
        yield server


def exits_then_answers(arguments: dict[str, Any]) -> Any:
    """``exit`` with ``arguments`` first, then (told its result) the answer."""
    def pick(index: int, _body: dict[str, Any]) -> Step:
        return call("exit", **arguments) if index == 0 else answer(DONE)
    return pick


def ask(sidecar: RunningServer, api: str, model: str, agent: str, history: list[Any],
        tools: list[dict[str, Any]], stream: bool) -> list[tuple[str, str, dict[str, Any]]]:
    """One request of the real client of ``api`` (whole or streamed): the tool calls the
    answer asks for (id, name, arguments), its items added to ``history``; none: its text
    added as ``("", "", {"text": ...})``."""
    base = f"{sidecar.url('model')}/agent/{agent}"
    if api == "messages":
        claude = anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0)
        if stream:
            with claude.messages.stream(model=model, max_tokens=99, messages=history,
                                        tools=tools) as events:
                message = events.get_final_message()
        else:
            message = claude.messages.create(model=model, max_tokens=99, messages=history,
                                             tools=tools)
        history.append({"role": "assistant", "content": [b.model_dump() for b in message.content]})
        uses = [(b.id, b.name, dict(b.input)) for b in message.content if b.type == "tool_use"]
        text = "".join(b.text for b in message.content if b.type == "text")
        return uses or [("", "", {"text": text})]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0)
    if api == "responses":
        if stream:
            with client.responses.stream(model=model, input=history, tools=tools) as events:
                response = events.get_final_response()
        else:
            response = client.responses.create(model=model, input=history, tools=tools)
        history.extend(item.model_dump(exclude_none=True) for item in response.output)
        calls = [(item.call_id, item.name, json.loads(item.arguments))
                 for item in response.output if item.type == "function_call"]
        return calls or [("", "", {"text": response.output_text})]
    if stream:
        with client.chat.completions.stream(model=model, messages=history,
                                            tools=tools) as chunks:
            message = chunks.get_final_completion().choices[0].message
    else:
        message = client.chat.completions.create(model=model, messages=history,
                                                 tools=tools).choices[0].message
    if not message.tool_calls:
        return [("", "", {"text": message.content or ""})]
    history.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": c.id, "type": "function",
         "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for c in message.tool_calls]})
    return [(c.id, c.function.name, json.loads(c.function.arguments))
            for c in message.tool_calls]


def answered(api: str, history: list[Any], results: list[tuple[str, str]]) -> None:
    """The tools' results sent back, as each API takes them."""
    if api == "messages":
        history.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": text}
            for call_id, text in results]})
    elif api == "responses":
        history.extend({"type": "function_call_output", "call_id": call_id, "output": text}
                       for call_id, text in results)
    else:
        history.extend({"role": "tool", "tool_call_id": call_id, "content": text}
                       for call_id, text in results)


def agent_loop(sidecar: RunningServer, api: str, model: str, agent: str, offers: str,
               stream: bool) -> tuple[str, list[str]]:
    """The agent: each call answered (an unknown tool with an error, as agents do) until an
    answer with no call, or one with a call of ``exit`` whose tool it offers as the finish
    (it runs the others, then ends with its ``final_result``, as adk does). Its output, and
    the tools it ran."""
    names = dict(OFFERS[offers])
    history: list[Any] = [{"role": "user", "content": "add 1 and 101, then exit"}]
    ran: list[str] = []
    for _ in range(4):
        calls = ask(sidecar, api, model, agent, history, tools_of(api, OFFERS[offers]), stream)
        if calls[0][1] == "":
            return str(calls[0][2]["text"]), ran
        results, output = [], None
        for call_id, name, arguments in calls:
            if name == "exit" and names.get("exit") == OWN_EXIT[1]:
                output = str(arguments["final_result"])
                continue
            ran.append(name)
            results.append((call_id, "exited 0" if name in names else f"error: no tool {name}"))
        if output is not None:
            return output, ran
        answered(api, history, results)
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


STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
APIS = pytest.mark.parametrize("api", ["chat", "responses", "messages"])


@STREAMS
@APIS
def test_the_offered_finish_called_by_the_model_is_the_runs_answer(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        api: str, stream: bool) -> None:
    agent = f"exit-own-{model_relay}-{api}-{stream}"
    model = llm.script(agent, exits_then_answers({"final_result": "the sum is 102"}))
    assert agent_loop(sidecar, api, model, agent, "own", stream) == ("the sum is 102", [])
    assert len(llm.requests(model)) == 1
    run = the_ended_run(sidecar, agent)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        0, "completed", "the sum is 102"), run


@STREAMS
@APIS
def test_the_offered_finish_asked_beside_work_is_the_answer_after_the_work(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        api: str, stream: bool) -> None:
    """The agent runs ``add``, then ends with ``exit``'s answer: no request follows. Before,
    the run was held open for ``add``'s result, its call uncounted."""
    agent = f"exit-beside-{model_relay}-{api}-{stream}"
    model = llm.script(agent, lambda _index, _body: Step(tool_calls=(
        ToolCall("add", {"a": 1, "b": 101}), ToolCall("exit", {"final_result": DONE}))))
    assert agent_loop(sidecar, api, model, agent, "own", stream) == (DONE, ["add"])
    assert len(llm.requests(model)) == 1
    run = the_ended_run(sidecar, agent)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"],
            run["signals"]["tools"]) == (1, "completed", DONE, {"add": 1}), run


@STREAMS
@APIS
@pytest.mark.parametrize(("offers", "arguments"), [
    ("other", {"code": 0}), ("none", {"final_result": "made up"})])
def test_an_exit_the_request_does_not_offer_as_the_finish_is_work_and_the_run_goes_on(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        offers: str, arguments: dict[str, Any], api: str, stream: bool) -> None:
    """Before, any call named as the pack's finish ended the run with its arguments as the
    output, the agent's next request (the call's result) a run of its own or the ended one's
    reply; its tool uncounted."""
    agent = f"exit-{offers}-{model_relay}-{api}-{stream}"
    model = llm.script(agent, exits_then_answers(arguments))
    assert agent_loop(sidecar, api, model, agent, offers, stream) == (DONE, ["exit"])
    assert len(llm.requests(model)) == 2
    run = the_ended_run(sidecar, agent)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (2, 1, "completed", DONE), run


@STREAMS
@APIS
def test_the_finish_asked_at_the_final_request_carries_the_models_report(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        api: str, stream: bool) -> None:
    """A budget of 1: the final request (tools withdrawn) answered with ``exit`` and the
    report anyway, as a model that ignores ``tool_choice`` does: the agent gets the report as
    the finish call, the run's output the report."""
    agent = f"exit-final-{model_relay}-{api}-{stream}"
    model = llm.script(agent, lambda index, _body: call("add", a=1, b=101) if index == 0
                       else call("exit", final_result=DONE))
    assert agent_loop(sidecar, api, model, agent, "own", stream) == (DONE, ["add"])
    run = the_ended_run(sidecar, agent)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        1, "tool_limit_reached", DONE), run


@STREAMS
def test_the_next_question_at_once_after_the_finish_is_the_next_run(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        stream: bool) -> None:
    """A chat's next question, sent at once with the ``exit`` call and its result kept in the
    history: the next run. (Before, a call's message holding no text read as the answer
    dropped, the agent rejecting it: the next task went on in the run that had ended.)"""
    agent = f"exit-next-{model_relay}-{stream}"
    model = llm.script(agent, lambda index, _body: call("exit", final_result=DONE)
                       if index == 0 else answer("SECOND"))
    history: list[Any] = [{"role": "user", "content": "add 1 and 101, then exit"}]
    tools = tools_of("chat", OFFERS["own"])
    [(call_id, name, arguments)] = ask(sidecar, "chat", model, agent, history, tools, stream)
    assert (name, arguments) == ("exit", {"final_result": DONE})
    answered("chat", history, [(call_id, "ok")])
    history.append({"role": "user", "content": "and now 2 and 102?"})
    assert ask(sidecar, "chat", model, agent, history, tools, stream) == [
        ("", "", {"text": "SECOND"})]

    def ended() -> list[dict[str, Any]] | None:
        runs = [run for run in sidecar.get_json("/v1/runs?limit=1000")["runs"]
                if run["agent"] == agent]
        return runs if len(runs) == 2 and all(run["state"] == "ended" for run in runs) \
            else None

    runs = wait_until(ended, what=f"{agent}'s two runs to end")
    assert sorted(sidecar.get_json(f"/v1/runs/{run['id']}")["final_output"]
                  for run in runs) == [DONE, "SECOND"], runs


@STREAMS
@APIS
@pytest.mark.parametrize("asked", [("exit", "add"), ("add", "add", "exit")],
                         ids=["exit-first", "exit-last"])
def test_trimmed_to_the_calls_left_the_finish_is_kept_beside_the_work(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        asked: tuple[str, ...], api: str, stream: bool) -> None:
    """A budget of 1, the model asks for ``exit`` beside more work than is left: the trim
    keeps the work the budget allows and ``exit`` (an answer, not work), so the agent runs
    one ``add`` and ends with the answer. Before, ``exit`` counted as one of the calls left:
    asked first, it was kept alone (the agent ended without the work); asked last, it was
    trimmed (the run went on past its answer)."""
    agent = f"exit-final-trim-{model_relay}-{api}-{stream}-{len(asked)}"
    calls = tuple(ToolCall("exit", {"final_result": DONE}) if name == "exit"
                  else ToolCall("add", {"a": 1, "b": 101}) for name in asked)
    model = llm.script(agent, lambda _index, _body: Step(tool_calls=calls))
    assert agent_loop(sidecar, api, model, agent, "own", stream) == (DONE, ["add"])
    assert len(llm.requests(model)) == 1
    run = the_ended_run(sidecar, agent)
    assert (run["tool_calls"], run["final_output"], run["signals"]["tools"]) == (
        1, DONE, {"add": 1}), run


MADE_UP = ToolCall("final_result", {"answer": "made up"})  # pydantic-ai's answer tool


@STREAMS
@APIS
def test_a_final_answer_tool_the_request_does_not_offer_is_work_and_the_run_goes_on(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        api: str, stream: bool) -> None:
    """A conventions' final-answer tool (``final_result``, whose agent ends at it) that the
    request does not offer is a tool the model made up: the agent runs ``add`` beside it,
    answers it with an error, and the run goes on to its answer. Before, the run ended
    ``completed`` at the made-up call, its arguments the output, ``add`` uncounted, and the
    agent's next request began a run of its own."""
    agent = f"exit-madeup-{model_relay}-{api}-{stream}"
    model = llm.script(agent, lambda index, _body: Step(tool_calls=(
        ToolCall("add", {"a": 1, "b": 101}), MADE_UP)) if index == 0 else answer(DONE))
    assert agent_loop(sidecar, api, model, agent, "none", stream) == (
        DONE, ["add", "final_result"])
    assert len(llm.requests(model)) == 2
    run = the_ended_run(sidecar, agent)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (2, 2, "completed", DONE), run


@STREAMS
@APIS
def test_trimmed_to_the_calls_left_a_final_answer_tool_not_offered_counts_as_work(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        api: str, stream: bool) -> None:
    """A budget of 1 (no finish), the model asks for a made-up ``final_result`` first, then
    ``add``: the
    made-up call is the one call left (work, as each relay's trim reads it), ``add`` is
    trimmed, and the run answers at its final request. Before, the trim kept it beside
    ``add`` as an answer, and the run ended at it."""
    agent = f"made-up-{model_relay}-{api}-{stream}"
    model = llm.script(agent, lambda index, _body: Step(tool_calls=(
        MADE_UP, ToolCall("add", {"a": 1, "b": 101}))) if index == 0 else answer(DONE))
    assert agent_loop(sidecar, api, model, agent, "none", stream) == (DONE, ["final_result"])
    assert len(llm.requests(model)) == 2
    run = the_ended_run(sidecar, agent)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        1, "tool_limit_reached", DONE), run
