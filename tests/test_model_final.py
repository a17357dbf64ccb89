"""A run's final request (its tools withdrawn, its answer held until it ends and replaced by the
stop note when the model leaves nothing of it), on both relays, at a model latency of 0, 20 and
150 ms, driven by the real ``openai`` and ``anthropic`` SDKs against the scripted model: the
upstream sees the tools offered at each request until the budget is spent and withdrawn at the
final one; the agent gets the model's report, or, when the model asks for tools again instead,
the stop note in its place. On the compiled relay the final request is carried by the relay
itself (``NativeEndpoint.finals``), its held answer released on Python's word."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.frameworks.fakellm import FakeLLM, looping
from tests.frameworks.fakellm import offers_tools as offered
from tests.harness import RunningServer, running_server, sidecar_config, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)
from tests.test_model_endpoint import (
    GIVEN_INSTRUCTIONS,
    RESPONSES_TOOLS,
    anthropic_loop,
    chained_loop,
    echoing_loop,
    read_echo,
)

KEY = "sk-final-0123456789"
BUDGET = 2
REPORT = "REPORT: searched pages 0 and 1"
STOPPED = "The agent-watchdog stopped this run: the model asked for tools again instead of its " \
          "final report"
TOOLS = [{"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811
    state: Path = tmp_path_factory.mktemp("final")
    config = sidecar_config(state, model_address="127.0.0.1:0", model_upstream=llm.base_url,
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1"))
    with running_server(config) as server:
        yield server


def headers(agent: str) -> dict[str, str]:
    return {"X-Watchdog-Agent": agent, "X-Watchdog-Budget-Tool-Calls": str(BUDGET)}


def openai_loop(sidecar: RunningServer, model: str, agent: str, stream: bool,
                messages: list[Any] | None = None) -> tuple[str, int]:
    """A real OpenAI client's tool loop until an answer with no tool call: its text, and the
    tool calls it ran; ``messages`` (given empty) is left with the conversation as last sent."""
    client = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                           default_headers=headers(agent))
    if messages is None:
        messages = []
    messages[:] = [{"role": "system", "content": "You are terse."},
                   {"role": "user", "content": "find it"}]
    ran = 0
    for _ in range(BUDGET + 3):
        if stream:
            with client.chat.completions.stream(model=model, messages=messages,
                                                tools=TOOLS) as events:
                message = events.get_final_completion().choices[0].message
        else:
            message = client.chat.completions.create(model=model, messages=messages,
                                                     tools=TOOLS).choices[0].message
        if not message.tool_calls:
            return message.content or "", ran
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [{"id": call.id, "type": "function",
                                         "function": {"name": call.function.name,
                                                      "arguments": call.function.arguments}}
                                        for call in message.tool_calls]})
        for call in message.tool_calls:
            ran += 1
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"page {ran}"})
    raise AssertionError("no final answer")


def claude_loop(sidecar: RunningServer, model: str, agent: str, stream: bool
                ) -> tuple[str, int]:
    """A real Anthropic client's tool loop, as :func:`openai_loop` (test_model_endpoint's)."""
    return anthropic_loop(sidecar, model, agent, stream, BUDGET + 3,
                          extra_headers={"X-Watchdog-Budget-Tool-Calls": str(BUDGET)})


LOOPS = {"openai": openai_loop, "anthropic": claude_loop}


def finals(sidecar: RunningServer) -> tuple[int, int]:
    """The final requests the compiled relay carried, and those whose answer it replaced with
    the stop note ((0, 0) on the aiohttp relay, which has no compiled relay)."""
    native = sidecar.server.native
    return (0, 0) if native is None else (native.finals, native.stopped)


@pytest.mark.parametrize("latency", [0.0, 0.02, 0.15])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("sdk", list(LOOPS))
def test_the_final_answer_is_held_and_an_empty_one_is_the_stop_note(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        sdk: str, stream: bool, latency: float) -> None:
    """Two runs of a budget of 2 tool calls: the model of the first answers the final request
    (its tools withdrawn) with its report, which the agent gets as it was; the model of the
    second asks for the tool again (trimmed: nothing is left of its answer), and the agent gets
    the stop note instead. The upstream saw the tools offered at the first two requests and
    withdrawn at the third, and nothing after."""
    name = f"{sdk}-{'stream' if stream else 'whole'}-{int(latency * 1000)}-{model_relay}"
    answers = llm.script(f"answers-{name}", looping(
        "search", lambda i: {"q": f"page {i}"}, answer_without_tools=REPORT), delay=latency)
    stubborn = llm.script(f"stubborn-{name}", looping(
        "search", lambda i: {"q": f"page {i}"}, obeys_tool_choice=False), delay=latency)
    before = finals(sidecar)
    loop = LOOPS[sdk]

    assert loop(sidecar, answers, f"reports-{name}", stream) == (REPORT, BUDGET)
    output, ran = loop(sidecar, stubborn, f"stubborn-{name}", stream)
    assert ran == BUDGET
    assert output.startswith(STOPPED + " (budget-exhausted)\n\nProgress so far: 2 model calls, "
                             "2 tool calls (search ×2).\n\nLast steps:\n- "), output

    for model in (answers, stubborn):
        seen = llm.requests(model)
        assert [offered(body) for body in seen] == [True, True, False], seen
        assert seen[-1]["tools"]  # withdrawn by tool_choice, the tools as the client sent them
    after = finals(sidecar)
    assert (after[0] - before[0], after[1] - before[1]) == (
        (2, 1) if model_relay == "native" else (0, 0))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("instructions", GIVEN_INSTRUCTIONS,
                         ids=["absent", "null", "string", "items"])
def test_the_stop_note_in_place_of_an_empty_final_answer_echoes_the_clients_instructions(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        stream: bool, instructions: Any) -> None:
    """On the Responses API, the stop note the endpoint answers in place of a final answer the
    model left empty (it asked for the tool again) echoes the ``instructions`` the client sent,
    as the model's own answers do (whose echo carried the note sent upstream, set back)."""
    name = f"echo-{stream}-{GIVEN_INSTRUCTIONS.index(instructions)}-{model_relay}"
    model = llm.script(name, looping("search", lambda i: {"q": f"page {i}"},
                                     obeys_tool_choice=False))
    chat = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                         default_headers=headers(name))
    output, echoed = echoing_loop(chat, model, stream, instructions)
    assert output.startswith(STOPPED), output
    assert [offered(body) for body in llm.requests(model)] == [True, True, False]
    given = None if instructions == "absent" else instructions
    assert [read_echo(each) for each in echoed] == [given] * len(echoed), echoed


@pytest.mark.parametrize("latency", [0.0, 0.02, 0.15])
@pytest.mark.parametrize("stream", [False, True])
def test_the_final_requests_stop_note_sent_on_gets_the_error(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        stream: bool, latency: float) -> None:
    """The stop note that replaced the final request's answer is the endpoint's stop answer,
    as an abort's is: an agent that does not take it as its run's end (a framework's validation
    retry: the note failed its output's schema) sends it on with a retry prompt, and that
    request is the stopped run's: the API's error with the note, nothing upstream (not the
    session's next run with a budget anew, whose tools would run past the stop)."""
    name = f"resent-{'stream' if stream else 'whole'}-{int(latency * 1000)}-{model_relay}"
    model = llm.script(name, looping("search", lambda i: {"q": f"page {i}"},
                                     obeys_tool_choice=False), delay=latency)
    messages: list[Any] = []
    output, ran = openai_loop(sidecar, model, name, stream, messages)
    assert (ran, output.startswith(STOPPED)) == (BUDGET, True), output
    sent = len(llm.requests(model))
    messages += [{"role": "assistant", "content": "  " + output.replace("\n", " \n") + "\n"},
                 {"role": "user", "content": "Validation failed: answer with a JSON object."}]
    client = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                           default_headers=headers(name))
    with pytest.raises(openai.BadRequestError) as failure:
        client.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                       stream=stream)
    assert failure.value.code == "watchdog_aborted"
    assert STOPPED in failure.value.message
    assert len(llm.requests(model)) == sent  # nothing reached the upstream


@pytest.mark.parametrize("stream", [False, True])
def test_a_chained_conversation_that_goes_on_from_the_final_stop_note_gets_the_error(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        stream: bool) -> None:
    """The Responses API chained by ``previous_response_id``: the final request's answer
    replaced by the stop note has an id of the endpoint's, and a retry prompt that goes on from
    it is the stopped run's (the error with the note, nothing upstream)."""
    name = f"chained-{'stream' if stream else 'whole'}-{model_relay}"
    model = llm.script(name, looping("search", lambda i: {"q": f"page {i}"},
                                     obeys_tool_choice=False))
    client = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                           default_headers=headers(name))
    sent: list[tuple[str | None, list[Any]]] = []
    response = chained_loop(client, model, BUDGET + 1, stream, sent)
    assert (response.output_text.startswith(STOPPED), [
        item for item in response.output if item.type == "function_call"]) == (True, []), response
    assert [offered(body) for body in llm.requests(model)] == [True, True, False]
    # the final request sent again gets the note again from the endpoint, under an id of its own
    again = client.responses.create(model=model, previous_response_id=sent[-1][0],
                                    input=sent[-1][1], tools=RESPONSES_TOOLS)  # type: ignore[arg-type]
    assert (again.output_text, again.id != response.id) == (response.output_text, True)
    for previous in (response.id, again.id):
        with pytest.raises(openai.BadRequestError) as failure:
            client.responses.create(model=model, previous_response_id=previous, input=[
                {"role": "user", "content": "Validation failed: answer in the schema."}],
                tools=RESPONSES_TOOLS)  # type: ignore[arg-type]
        assert failure.value.code == "watchdog_aborted"
        assert STOPPED in failure.value.message
    assert len(llm.requests(model)) == BUDGET + 1  # nothing more reached the upstream


@pytest.mark.integration
@pytest.mark.parametrize("stream", [False, True])
def test_a_final_answer_past_the_bound_read_is_judged_or_refused_alike(
        tmp_path: Path, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch,
        model_relay: str, stream: bool) -> None:  # noqa: F811
    """The final request's answer is a tool call asked for again whose arguments outgrow what
    the relays read (``MAX_RESPONSE_BYTES``, made 64 KiB here): streamed, the call is trimmed
    event by event, so what is held stays small and the agent gets the stop note; whole, it
    cannot be judged, so both relays answer 502 (no call passes), and the final request, which
    had no answer, goes upstream again when sent again."""
    from watchdog.shell.model import native, streams
    for module in (native, streams):
        monkeypatch.setattr(module, "MAX_RESPONSE_BYTES", 64 * 1024)
    name = f"past-bound-{model_relay}-{stream}"
    model = llm.script(name, looping("search", lambda i: {"q": f"page {i}", "pad": "x" * (
        200_000 if i >= BUDGET else 10)}, obeys_tool_choice=False))
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, model_relay=model_relay)
    with running_server(config) as sidecar:
        if stream:
            output, ran = openai_loop(sidecar, model, name, stream)
            assert (ran, output.startswith(STOPPED)) == (BUDGET, True), output[:300]
            assert [offered(body) for body in llm.requests(model)] == [True, True, False]
            return
        with pytest.raises(openai.InternalServerError) as failure:
            openai_loop(sidecar, model, name, stream)
        assert failure.value.status_code == 502
        assert b"response_unjudged" in failure.value.response.content
        assert [offered(body) for body in llm.requests(model)] == [True, True, False]


@pytest.mark.integration
def test_a_held_final_whose_client_went_away_cancels_its_upstream_request(
        tmp_path: Path) -> None:
    """The run's final request (its model-call budget of 1: the first is its last), its
    streamed answer held until it ends; the model takes long (30 s). The client goes away
    meanwhile (it closes its connection: the answer's head, written as it begins, meets a
    reset): the upstream request is cancelled then, as a stream passed on as it comes is, not
    kept until the upstream ends or times out. (A whole answer's client gone is noticed at
    its end, held or not: a close and a half-close look the same until something is
    written.)"""
    import socket

    from tests.test_model_proxy import RawUpstream, endless

    raw = RawUpstream(endless)
    try:
        config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                                model_upstream=raw.base + "/v1")
        with running_server(config) as server:
            host, port = server.server.addresses["model"]
            body = json.dumps({"model": "m", "stream": True, "tools": TOOLS, "messages": [
                {"role": "user", "content": "find it"}]}).encode()
            with socket.create_connection((host, port), timeout=5) as sock:
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Type: application/json\r\nX-Watchdog-Agent: gone\r\n"
                             b"X-Watchdog-Budget-Iterations: 1\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
                wait_until(lambda: raw.seen, "the final request upstream")
                sock.recv(1, socket.MSG_PEEK)  # the answer's head has come, unread
            # (closed with the head unread, the client's end resets the connection; one that
            # ends its side before the head may be waiting for the answer: RFC 9112 §9.6)
            assert json.loads(raw.seen[0].body)["tool_choice"] == "none"  # (the final)
            assert raw.broken_pipe.wait(10), "the upstream request was not cancelled"
    finally:
        raw.close()
