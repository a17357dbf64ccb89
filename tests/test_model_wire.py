"""The model endpoint's wire modules and decision, sans IO: SSE split anywhere, each API's
streams and whole responses observed and trimmed into well-formed results, the steering
decision from counts and directives. The streams are the scripted upstream's own
(tests/frameworks/fakellm.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.trace import Span

from tests.frameworks.fakellm import (
    Step,
    ToolCall,
    anthropic_events,
    anthropic_message,
    chunks,
    completion,
    response_events,
    response_object,
)
from tests.spans import T0, SpanMaker, chat_attrs, records_of
from watchdog.core.directives.model import Directive
from watchdog.core.directives.prompt import bare_prompt
from watchdog.core.model.book import (
    MAX_QUOTE_CHARS,
    Caller,
    EndpointRun,
    ModelBook,
    Unbooked,
    is_side,
    parse_traceparent,
)
from watchdog.core.model.chat import ChatWire, usage_only
from watchdog.core.model.failure import refusal_of, refused
from watchdog.core.model.messages import MessagesWire
from watchdog.core.model.responses import ResponsesWire
from watchdog.core.model.steer import (
    MAX_ANSWERS_OFFERED,
    Act,
    Board,
    Counts,
    Turn,
    answer_of,
    answer_tools,
    decide,
    is_answer_tool,
    kept_calls,
)
from watchdog.core.model.wire import (
    Event,
    Observation,
    Request,
    SSEReader,
    ToolResult,
    Wire,
    abort_text,
    forced_function,
    read_stream,
    sse,
    text_of,
)
from watchdog.core.model.wire import ToolCall as Call
from watchdog.core.runs.book import TRACED_ANSWER_WAIT
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.conventions import request_hash
from watchdog.core.spans.record import SpanKind, SpanRecord

THREE = Step(text="Looking.", tool_calls=(ToolCall("a", {"x": 1}), ToolCall("b", {"y": 2}),
                                          ToolCall("c", {"z": 3})))


def chat_stream(step: Step, legacy: bool = False) -> bytes:
    """``legacy``: its first call as ``delta.function_call`` (a request offering functions)."""
    events = [b"data: " + json.dumps(c).encode() + b"\n\n"
              for c in chunks("m", "chatcmpl-1", step, {"prompt_tokens": 7,
                                                        "completion_tokens": 3}, legacy)]
    return b"".join(events) + b"data: [DONE]\n\n"


def anthropic_stream(step: Step) -> bytes:
    message = anthropic_message("m", "chatcmpl-2", step, {"messages": []})
    return b"".join(f"event: {name}\ndata: ".encode() + json.dumps(data).encode() + b"\n\n"
                    for name, data in anthropic_events(message))


def responses_stream(step: Step) -> bytes:
    response = response_object("m", "chatcmpl-3", step, {"input": "x"})
    return b"".join(f"event: {name}\ndata: ".encode()
                    + json.dumps({"type": name, **data}).encode() + b"\n\n"
                    for name, data in response_events(response))


STREAMS: list[tuple[Wire, Any]] = [(ChatWire(), chat_stream), (MessagesWire(), anthropic_stream),
                                   (ResponsesWire(), responses_stream)]


def feed(wire: Wire, stream: bytes, size: int, keep: int | None = None
         ) -> tuple[Any, bytes]:
    """The stream fed ``size`` bytes at a time: the observation, and what is passed on."""
    reader, accumulator = SSEReader(), wire.accumulator()
    trimmer = wire.stream_trimmer(keep) if keep is not None else None
    out = b""
    for start in range(0, len(stream), size):
        for event in reader.feed(stream[start:start + size]):
            accumulator.feed(event)
            out += trimmer.rewrite(event) if trimmer is not None else event.raw
    return accumulator.observation, out + reader.rest()


@pytest.mark.parametrize(("wire", "make"), STREAMS)
@pytest.mark.parametrize("size", [1, 7, 4096])
def test_a_stream_split_anywhere_is_observed_whole(wire: Wire, make: Any, size: int) -> None:
    stream = make(THREE)
    seen, out = feed(wire, stream, size)
    assert out == stream
    assert seen.complete and seen.text.startswith("Looking")
    assert [(c.name, json.loads(c.arguments)) for c in seen.calls] == [
        ("a", {"x": 1}), ("b", {"y": 2}), ("c", {"z": 3})]
    assert seen.finish_reason == "tool_calls"
    assert seen.response_id and seen.output_tokens > 0


ODD_EVENTS = [  # each read as the SSE reader reads it, in whatever company
    b"data: [DONE]\n\n", b": a comment\n\n", b"\n\n", b"data:{\"id\":\"no-space\"}\n\n",
    b"data: {\"id\":\"x\"} trailing\n\n", b"data: {\"id\":\"y\"}   \n\n",
    b"data: {\"a\":1}\ndata: {\"b\":2}\n\n", b"event: x\ndata: [1]\ndata: {\"id\":\"z\"}\n\n",
    b"data: {\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}\n\n", b"data: [1, 2]\n\n",
    b"data: {\"choices\":[{\"delta\":{\"content\":\"cut\"}}]\n\n", b"id: 3\ndata: {}\n\n",
    b"data: {\"choices\":[{\"delta\":{\"content\":\"crlf\"}}]}\r\n\r\n",
    b"data: {\"type\":\"message_start\",\"message\":{\"id\":\"half", ]


@pytest.mark.parametrize(("wire", "make"), STREAMS)
@pytest.mark.parametrize("odd", [None, *ODD_EVENTS])
def test_a_whole_stream_read_at_once_is_observed_as_the_reader_reads_it(
        wire: Wire, make: Any, odd: bytes | None) -> None:
    stream = make(THREE)
    if odd is not None:  # first, amid, and last
        events = stream.split(b"\n\n")
        stream = odd + b"\n\n".join(events[:3]) + b"\n\n" + odd + b"\n\n".join(events[3:]) \
            + odd
    reader, expected = SSEReader(), wire.accumulator()
    for event in reader.feed(stream):
        expected.feed(event)
    accumulator = wire.accumulator()
    read_stream(accumulator, stream)
    assert accumulator.observation == expected.observation
    assert len(expected.observation.calls) == 3


@pytest.mark.parametrize(("wire", "make"), STREAMS)
@pytest.mark.parametrize("keep", [0, 1, 2])
def test_a_trimmed_stream_is_well_formed_with_keep_calls(wire: Wire, make: Any,
                                                         keep: int) -> None:
    _, out = feed(wire, make(THREE), 13, keep)
    again, passed = feed(wire, out, 4096)
    assert passed == out
    assert [c.name for c in again.calls] == ["a", "b", "c"][:keep]
    assert again.complete and again.text.startswith("Looking")
    assert again.finish_reason == ("tool_calls" if keep else "stop")


def test_whole_responses_are_trimmed_with_keep_calls() -> None:
    for wire, body in ((ChatWire(), completion("m", "chatcmpl-9", THREE, {})),
                       (MessagesWire(), anthropic_message("m", "chatcmpl-9", THREE, {})),
                       (ResponsesWire(), response_object("m", "chatcmpl-9", THREE, {}))):
        assert not wire.trim(json.loads(json.dumps(body)), 3)
        for keep in (0, 2):
            trimmed = json.loads(json.dumps(body))
            assert wire.trim(trimmed, keep)
            seen = wire.read_response(trimmed)
            assert [c.name for c in seen.calls] == ["a", "b", "c"][:keep], wire.api
            assert seen.text == "Looking."
            assert seen.finish_reason == ("tool_calls" if keep else "stop"), wire.api


@pytest.mark.parametrize("wire", [ChatWire(), MessagesWire(), ResponsesWire()])
def test_answers_read_back_as_a_final_answer(wire: Wire) -> None:
    request = wire.read_request({"model": "m", "stream": True,
                                 "stream_options": {"include_usage": True}})
    whole = wire.read_response(wire.answer("m", "the report", request, 1_800_000_000.0))
    assert (whole.text, whole.calls, whole.finish_reason) == ("the report", [], "stop")
    seen, _ = feed(wire, wire.answer_stream("m", "the report", request, 1_800_000_000.0), 5)
    assert (seen.text, seen.calls, seen.complete) == ("the report", [], True)


ANSWER_FORMATS = [  # (a request body, the format its answer must follow)
    ({"messages": [], "response_format": {"type": "json_object"}}, "json_object"),
    ({"messages": [], "response_format": {"type": "json_schema", "json_schema": {}}},
     "json_schema"),
    ({"messages": [], "response_format": {"type": "text"}}, None),
    ({"messages": [], "response_format": "json_object"}, None),
]


@pytest.mark.parametrize(("body", "kind"), ANSWER_FORMATS)
def test_a_requests_json_format_is_read(body: dict[str, Any], kind: str | None) -> None:
    assert ChatWire().read_request(body).answer_format == kind
    text = {"input": [], "text": {"format": body["response_format"]}}
    assert ResponsesWire().read_request(text).answer_format == kind
    for messages in ({"messages": [], "output_config": {"format": body["response_format"]}},
                     {"messages": [], "output_format": body["response_format"]}):
        assert MessagesWire().read_request(messages).answer_format == kind


def test_an_aborts_answer_follows_the_requests_json_format() -> None:
    note = "The agent-watchdog stopped this run: [stopped]"
    assert abort_text(note, None) == note
    assert json.loads(abort_text(note, "json_object") or "") == {
        "code": "watchdog_aborted", "message": note}
    assert abort_text(note, "json_schema") is None  # answered as the API's error
    report = json.dumps({"answer": "pages 0-2 searched"})  # the model's report, in its format
    assert abort_text(report, "json_object") == abort_text(report, "json_schema") == report
    assert json.loads(abort_text("[1, 2]", "json_object") or "")["message"] == "[1, 2]"


def test_notes_go_into_the_instructions_never_a_user_message() -> None:
    note = "[budget: 2 of 3 tool calls left — wrap up soon]"
    chat = ChatWire().add_note({"messages": [{"role": "user", "content": "q"}]}, note)
    assert chat["messages"] == [{"role": "system", "content": note},
                                {"role": "user", "content": "q"}]
    chat = ChatWire().add_note({"messages": [
        {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": "q"}]}, note)
    assert chat["messages"][0]["content"][-1] == {"type": "text", "text": note}
    messages = MessagesWire().withdraw_tools({"system": "sys", "tools": [{"name": "t"}],
                                              "messages": []}, note)
    assert messages["system"] == "sys\n\n" + note
    assert messages["tool_choice"] == {"type": "none"} and messages["tools"]
    responses = ResponsesWire().withdraw_tools({"input": "q", "tools": [{"name": "t"}],
                                                "parallel_tool_calls": True}, note)
    assert responses["instructions"] == note and responses["tool_choice"] == "none"
    assert "parallel_tool_calls" not in responses


def test_a_responses_note_goes_where_the_agent_gave_its_instructions() -> None:
    """Into ``instructions`` when the agent gave them there, or gave none; else into its first
    system/developer input item (Koog's system prompt: its client cannot read back an
    ``instructions`` echoed as a string), unless the server keeps the conversation."""
    note = "[budget: 2 of 3 tool calls left — wrap up soon]"
    wire = ResponsesWire()
    developer = {"role": "developer", "content": [{"type": "input_text", "text": "be brief"}]}
    user = {"role": "user", "content": [{"type": "input_text", "text": "q"}]}
    noted = wire.add_note({"input": [developer, user]}, note)
    assert "instructions" not in noted and noted["input"] == [
        {**developer, "content": [*developer["content"], {"type": "input_text", "text": note}]},
        user]
    assert wire.read_request(noted).instructions == "be brief\n" + note
    system = wire.add_note({"input": [user, {"role": "system", "content": "sys"}]}, note)
    assert system["input"][1]["content"] == "sys\n\n" + note
    for body in ({"instructions": "You research.", "input": [developer, user]},
                 {"input": [user]}, {"input": "q"},
                 {"previous_response_id": "resp_1", "input": [developer, user]},
                 {"conversation": "conv_1", "input": [developer, user]}):
        told = wire.add_note(body, note)
        assert told["input"] == body["input"], told
        assert told["instructions"].endswith(note) and told["instructions"].startswith(
            body.get("instructions", note)), told
    # instructions as input items (as a response echoes a prompt's): kept, the note after them
    items = [{"role": "developer", "content": "Answer in French."}]
    told = wire.add_note({"instructions": items, "input": [user]}, note)
    assert told["instructions"] == [*items, {"role": "developer", "content": note}], told


def test_the_sidecars_own_responses_answer_says_its_text_format() -> None:
    """Its own answer (a stopped run's), whole and streamed, has every field the API's
    response always has, ``text`` among them: strict clients (Koog's) require it."""
    request = ResponsesWire().read_request({"model": "m", "input": "q"})
    whole = ResponsesWire().answer("m", "stopped", request, 0.0)
    assert {"id", "object", "created_at", "status", "model", "output", "parallel_tool_calls",
            "text"} <= whole.keys() and whole["text"] == {"format": {"type": "text"}}
    streamed = ResponsesWire().answer_stream("m", "stopped", request, 0.0).decode()
    completed = [json.loads(line.removeprefix("data: ")) for line in streamed.splitlines()
                 if line.startswith("data: ") and '"response.completed"' in line]
    assert [event["response"]["text"] for event in completed] == [{"format": {"type": "text"}}]


def test_requests_read_their_tool_results_since_the_last_answer() -> None:
    chat = ChatWire().read_request({"model": "m", "tools": [1], "messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [{"id": "1"}]},
        {"role": "tool", "tool_call_id": "1", "content": "old"},
        {"role": "assistant", "tool_calls": [{"id": "2"}, {"id": "3"}]},
        {"role": "tool", "tool_call_id": "2", "content": "fine"},
        {"role": "tool", "tool_call_id": "3", "content": "Error: no such file"}]})
    assert [(r.call_id, r.error) for r in chat.results] == [("2", False), ("3", True)]
    assert (chat.instructions, chat.anchor, chat.last_is_user) == ("sys", "q", False)
    claude = MessagesWire().read_request({"messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "boom"}],
                                      "is_error": True}]}]})
    assert [(r.call_id, r.content, r.error) for r in claude.results] == [("t1", "boom", True)]
    assert not claude.last_is_user
    responses = ResponsesWire().read_request({"previous_response_id": "resp_1", "input": [
        {"type": "function_call_output", "call_id": "c1", "output": "ok"}]})
    assert [r.call_id for r in responses.results] == ["c1"]
    assert responses.previous_response_id == "resp_1"


# A Responses answer with a call of each kind the agent carries out, around the tools the server
# runs (not the agent's calls): as the OpenAI Agents SDK's computer, shell and apply_patch
# tools and Codex's custom (freeform) tools get them
CLIENT_CALLS = [
    {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{\"k\": 1}"},
    {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin"},
    {"type": "computer_call", "call_id": "c3", "action": {"type": "click", "x": 1, "y": 2}},
    {"type": "file_search_call", "id": "fs_1", "status": "completed"},
    {"type": "local_shell_call", "call_id": "c4", "action": {"type": "exec", "command": ["ls"]}},
    {"type": "shell_call", "call_id": "c5", "action": {"commands": ["pwd"]}},
    {"type": "apply_patch_call", "call_id": "c6",
     "operation": {"type": "update_file", "path": "a.py", "diff": "-x\n+y"}},
    {"type": "mcp_call", "id": "mcp_1", "name": "remote", "arguments": "{}"}]


def test_a_conversation_opening_with_the_models_message_reads_it() -> None:
    """A history compacted to the model's summary (the Continue CLI's: the summary as the
    model's message, before any user message) is read as its opening, on Chat Completions and
    the Responses API; a conversation whose first message is the user's has none (one the
    server keeps sends only its new items: the book does not read its opening)."""
    summary = "Searched the config directories twice; nothing found yet."
    chat = ChatWire().read_request({"model": "m", "messages": [
        {"role": "system", "content": "S"}, {"role": "assistant", "content": summary},
        {"role": "assistant", "content": "REPORT"}, {"role": "user", "content": "continue"}]})
    assert (chat.opening, chat.anchor) == (summary, "continue")
    responses = ResponsesWire().read_request({"model": "m", "input": [
        {"role": "developer", "content": "S"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": summary}]}]})
    assert text_of(responses.opening) == summary
    told = [{"role": "user", "content": "Find the file."},
            {"role": "assistant", "content": summary}]
    assert ChatWire().read_request({"model": "m", "messages": told}).opening is None
    assert ResponsesWire().read_request({"model": "m", "input": told}).opening is None


def test_responses_count_every_call_the_agent_carries_out() -> None:
    wire = ResponsesWire()
    body = {"id": "resp_1", "status": "completed", "output": CLIENT_CALLS}
    seen = wire.read_response(json.loads(json.dumps(body)))
    assert [(c.call_id, c.name) for c in seen.calls] == [
        ("c1", "lookup"), ("c2", "apply_patch"), ("c3", "computer"), ("c4", "local_shell"),
        ("c5", "shell"), ("c6", "apply_patch")]
    assert seen.calls[1].arguments == "*** Begin"
    assert json.loads(seen.calls[2].arguments) == {"type": "click", "x": 1, "y": 2}
    assert seen.finish_reason == "tool_calls"
    trimmed = json.loads(json.dumps(body))
    assert wire.trim(trimmed, 2)  # the server's tools stay; the agent's past the first two go
    assert [item.get("call_id") or item["id"] for item in trimmed["output"]] == [
        "ws_1", "c1", "c2", "fs_1", "mcp_1"]
    results = wire.read_request({"input": [
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": ""},
        {"type": "computer_call", "call_id": "c3", "action": {}},
        {"type": "apply_patch_call", "call_id": "c6", "operation": {}},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done!"},
        {"type": "computer_call_output", "call_id": "c3",
         "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AA"}},
        {"type": "apply_patch_call_output", "call_id": "c6", "status": "failed",
         "output": "no such file: a.py"}]}).results
    assert [(r.call_id, r.error) for r in results] == [("c2", False), ("c3", False),
                                                        ("c6", True)]


def test_chat_reads_custom_tool_calls_as_calls() -> None:
    custom = {"id": "call_2", "type": "custom", "custom": {"name": "apply_patch",
                                                          "input": "*** Begin"}}
    body = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": "{}"}}, custom]}}]}
    seen = ChatWire().read_response(body)
    assert [(c.call_id, c.name, c.arguments) for c in seen.calls] == [
        ("call_1", "lookup", "{}"), ("call_2", "apply_patch", "*** Begin")]
    accumulator = ChatWire().accumulator()
    for delta in ({"index": 0, **custom, "custom": {"name": "apply_patch", "input": "*** "}},
                  {"index": 0, "custom": {"input": "Begin"}}):
        accumulator.feed_object({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]})
    assert [(c.call_id, c.name, c.arguments) for c in accumulator.observation.calls] == [
        ("call_2", "apply_patch", "*** Begin")]


def test_a_responses_stream_is_trimmed_of_every_kind_of_call() -> None:
    response = {"id": "resp_1", "status": "completed", "output": CLIENT_CALLS}
    events = [("response.created", {"response": {**response, "output": []}})]
    for index, item in enumerate(CLIENT_CALLS):
        events += [("response.output_item.added", {"output_index": index, "item": item}),
                   ("response.output_item.done", {"output_index": index, "item": item})]
    events.append(("response.completed", {"response": response}))
    stream = b"".join(sse({"type": name, "sequence_number": number, **data}, name)
                      for number, (name, data) in enumerate(events))
    trimmer = ResponsesWire().stream_trimmer(1)
    out = b"".join(trimmer.rewrite(event) for event in SSEReader().feed(stream))
    accumulator = ResponsesWire().accumulator()
    read_stream(accumulator, out)
    assert [c.call_id for c in accumulator.observation.calls] == ["c1"]
    added = [json.loads(event.data or "")["item"] for event in SSEReader().feed(out)
             if event.name == "response.output_item.added"]
    assert [item["type"] for item in added] == [
        "web_search_call", "function_call", "file_search_call", "mcp_call"]


def test_hostile_shapes_read_as_nothing() -> None:
    for wire in (ChatWire(), MessagesWire(), ResponsesWire()):
        for body in ({}, {"messages": "x", "input": 5, "system": 7, "tools": "y"},
                     {"messages": [None, 1, {"role": 5}], "input": [None, {"role": []}]}):
            request = wire.read_request(body)
            assert request.results == []
        for body in ({"choices": "x", "content": 5, "output": None},
                     {"choices": [{"message": {"tool_calls": [None, 3]}}], "usage": [1]}):
            assert wire.read_response(body).calls == []


def directive(action: str, rule: str, message: str, **extra: Any) -> Directive:
    values: dict[str, Any] = dict(
        id="d", run_id="r", seq=1, global_seq=1, action=action, rule=rule, severity="warning",
        message=message, terminal_state=None, budget={}, report_prompt=None, created_at=0.0,
        dedup_key=rule, escalation=False, tool_calls_at=0, agent="a")
    values.update(extra)
    return Directive(**values)


def counting(*budgets: str) -> Board:
    """A run's board once its budgets' countdown rules have fired."""
    return Board(counting=frozenset(budgets))


def test_the_decision() -> None:
    budget = {"max_tool_calls": 5.0, "remaining_tool_calls": 2.0}
    note = decide(Counts(used=3, handed=3, budget=budget), counting("tool_calls"), "", True)
    assert (note.act, note.keep) == (Act.NOTE, 2) and "2 of 5 tool calls left" in note.text
    # (no countdown before its rule has fired: the pack says from when)
    assert decide(Counts(used=3, handed=3, budget=budget), None, "", True) == Turn(
        Act.PASS, keep=2)
    assert decide(Counts(used=1, handed=1, budget=budget), None, "", True).act is Act.PASS
    final = decide(Counts(used=5, handed=5, budget=budget), None, "", True)
    assert (final.act, final.keep) == (Act.FINAL, 0)
    board = Board()
    board.post(directive("abort", "stop-it", "[stopped]"))
    abort = decide(Counts(used=1, handed=1, budget={}), board, "", True)
    assert (abort.act, abort.text) == (Act.ABORT, "[stopped]")
    board = Board()
    board.post(directive("abort", "budget-exhausted", "[budget: all 5 tool calls used]",
                         report_prompt="REPORT PLEASE", countdown="tool_calls"))
    final = decide(Counts(used=5, handed=5, budget=budget), board, "", True)
    assert final.act is Act.FINAL and "REPORT PLEASE" in final.text
    board = Board()  # an abort's own report prompt, which says the run is being stopped
    board.post(directive("abort", "budget-exhausted", "[budget: all 5 tool calls used]",
                         report_prompt=bare_prompt("[budget: all 5 tool calls used]",
                                                   "abort"), countdown="tool_calls"))
    final = decide(Counts(used=5, handed=5, budget=budget), board, "", True)
    assert final.text.count("This run is being stopped") == 1, final.text
    assert final.text.count("[budget: all 5 tool calls used]") == 1
    assert "Tools are withdrawn" in final.text and "## Key Findings" in final.text
    assert decide(Counts(used=5, handed=5, budget=budget, final_used=True), board, "",
                  False).act is Act.ABORT
    # a request after the final one is stopped saying why: what made that request final
    after = decide(Counts(used=5, handed=5, budget=budget, final_used=True,
                          final_rule="budget-exhausted"), board, "", False)
    assert after == Turn(Act.ABORT, "the agent went on after its final request instead of "
                         "ending (budget-exhausted)", 0, "after_final")
    board = Board()
    board.post(directive("wind_down", "tool-cycle", "Loop", grace={"tool_calls": 2,
                                                                   "ends_at_tool_calls": 6}))
    grace_board = board
    grace = decide(Counts(used=5, handed=5, budget={}), board, "", True)
    assert grace.act is Act.NOTE and "[grace: 1 tool call left" in grace.text
    assert grace.keep == 1
    assert decide(Counts(used=6, handed=6, budget={}), board, "", True).act is Act.FINAL
    sdk = decide(Counts(used=3, handed=3, budget=budget), None,
                 "[budget: 2 of 5 tool calls left — wrap up soon]", True)
    assert (sdk.act, sdk.keep) == (Act.PASS, 2)  # noted by the SDK, still bounded
    # a request that offers no tools: no tool-call countdown, no grace's; still bounded, and the
    # final request stands
    untooled = decide(Counts(used=3, handed=3, budget=budget), None, "", False)
    assert (untooled.act, untooled.keep) == (Act.PASS, 2)
    # (the wind-down's own instruction stands, bounded by its grace, without the grace's count)
    assert decide(Counts(used=5, handed=5, budget={}), grace_board, "", False) == (
        Turn(Act.NOTE, "Loop", 1, "tool-cycle"))
    assert decide(Counts(used=5, handed=5, budget=budget), None, "", False).act is Act.FINAL


def test_a_dollar_budget_asks_for_the_usage_that_prices_a_call() -> None:
    """With a budget in dollars or tokens every turn that goes upstream asks for its response's
    usage; without one, none does; an abort goes nowhere."""
    priced = {"max_cost_usd": 1.0, "remaining_cost_usd": 0.9}
    assert decide(Counts(used=0, handed=0, budget=priced), None, "", True) == Turn(
        Act.PASS, usage=True)
    assert decide(Counts(used=0, handed=0, budget={**priced, "remaining_cost_usd": 0.1}),
                  None, "", True).usage  # (the cost countdown's note)
    assert decide(Counts(used=0, handed=0, budget={**priced, "remaining_cost_usd": 0.0}),
                  None, "", True).act is Act.FINAL
    assert decide(Counts(used=0, handed=0, budget={**priced, "remaining_cost_usd": 0.0}),
                  None, "", True).usage
    assert decide(Counts(used=0, handed=0, budget={"max_tokens": 1000.0}), None, "",
                  True).usage  # (counted from each call's usage too)
    tokens = {"max_tokens": 1000.0, "remaining_tokens": 200.0}
    assert decide(Counts(used=0, handed=0, budget=tokens), None, "", True).act is Act.PASS
    note = decide(Counts(used=0, handed=0, budget=tokens), counting("tokens"), "", True)
    assert note.act is Act.NOTE and "[budget: 200 of 1000 tokens left — wrap up soon]" in note.text
    # what is left covers about one more call at the run's average: the last call, as the
    # default pack's rules say it (dollars and tokens)
    last = decide(Counts(used=0, handed=0, budget=tokens, per_call_tokens=250.0),
                  counting("tokens"), "", True)
    assert "[budget: 200 of 1000 tokens left, about one model call — finalize now]" in last.text
    last = decide(Counts(used=0, handed=0, budget={**priced, "remaining_cost_usd": 0.05},
                         per_call_usd=0.06), counting("cost_usd"), "", True)
    assert "[budget: USD 0.05 of 1.00 left, about one model call — finalize now]" in last.text
    final = decide(Counts(used=0, handed=0, budget={**tokens, "remaining_tokens": 0.0}), None,
                   "", True)
    assert (final.act, final.rule) == (Act.FINAL, "max_tokens")
    assert "[budget: all 1000 tokens used — stop and report]" in final.text
    assert not decide(Counts(used=0, handed=0, budget={"max_tool_calls": 3.0}), None, "",
                      True).usage
    board = Board()
    board.post(directive("abort", "stop-it", "[stopped]"))
    assert decide(Counts(used=0, handed=0, budget=priced), board, "", True) == Turn(
        Act.ABORT, "[stopped]", 0, "stop-it")


@pytest.mark.parametrize(("body", "asked"), [
    ({"stream": True}, {"stream": True, "stream_options": {"include_usage": True}}),
    ({"stream": True, "stream_options": None},
     {"stream": True, "stream_options": {"include_usage": True}}),
    ({"stream": True, "stream_options": {"include_usage": False, "other": 1}},
     {"stream": True, "stream_options": {"include_usage": True, "other": 1}}),
    ({"stream": True, "stream_options": {"include_usage": True}}, None),  # asked already
    ({"stream": False}, None), ({}, None), ({"stream": "yes"}, None),  # no stream: usage comes
    ({"stream": True, "stream_options": "usage"}, None),  # the upstream's to refuse
])
def test_chat_asks_a_stream_for_its_usage_only_where_the_client_did_not(
        body: dict[str, Any], asked: dict[str, Any] | None) -> None:
    messages = [{"role": "user", "content": "hi"}]
    got = ChatWire().ask_usage({"model": "m", "messages": messages, **body})
    assert got == (None if asked is None else {"model": "m", "messages": messages, **asked})
    for wire in (ResponsesWire(), MessagesWire()):  # they report a stream's usage unasked
        assert wire.ask_usage({"model": "m", **body}) is None


@pytest.mark.parametrize(("data", "only"), [
    ('{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}', True),
    ('{ "choices" : [ ] , "usage" : { } }', True),
    ('{"choices":[],"usage":null}', False),
    ('{"choices":[{"index":0,"delta":{}}],"usage":{"prompt_tokens":3}}', False),
    ('{"usage":{"prompt_tokens":3}}', False),
    ('{"choices":{},"usage":{"prompt_tokens":3}}', False),
    ("[DONE]", False), ("not json", False), ('[{"choices":[]}]', False),
])
def test_the_usage_only_chunk_is_told_apart(data: str, only: bool) -> None:
    assert usage_only(Event(f"data: {data}\n\n".encode(), None, data)) is only


# -- agents with other wire habits ----------------------------------------------------------

WORK_THEN_ANSWER = Step(tool_calls=(ToolCall("search", {"q": "a"}),
                                    ToolCall("final_answer", {"answer": "done"}),
                                    ToolCall("search", {"q": "b"})))


def test_answer_tools_are_the_conventions_ones() -> None:
    assert is_answer_tool("final_answer") and is_answer_tool("final_result")
    assert is_answer_tool("final_result_Report")  # pydantic-ai's per-type output tools
    assert not is_answer_tool("search") and not is_answer_tool(None)


@pytest.mark.parametrize(("wire", "make"), STREAMS)
@pytest.mark.parametrize("keep", [0, 1])
def test_a_final_answer_call_is_never_trimmed_from_a_stream(wire: Wire, make: Any,
                                                            keep: int) -> None:
    _, out = feed(wire, make(WORK_THEN_ANSWER), 11, keep)
    again, passed = feed(wire, out, 4096)
    assert passed == out and again.complete
    assert [c.name for c in again.calls] == ["search", "final_answer"][1 - keep:]
    assert again.finish_reason == "tool_calls"  # the answer call is still asked for
    if wire.api == "chat":  # the kept calls are numbered without a gap
        indices = [call["index"] for chunk in out.split(b"\n\n")
                   if chunk.startswith(b"data: {")
                   for choice in json.loads(chunk[6:])["choices"]
                   for call in choice["delta"].get("tool_calls") or ()]
        assert sorted(set(indices)) == list(range(1 + keep))


def test_a_final_answer_call_is_never_trimmed_from_a_whole_response() -> None:
    for wire, body in ((ChatWire(), completion("m", "c-1", WORK_THEN_ANSWER, {})),
                       (MessagesWire(), anthropic_message("m", "c-1", WORK_THEN_ANSWER, {})),
                       (ResponsesWire(), response_object("m", "c-1", WORK_THEN_ANSWER, {}))):
        trimmed = json.loads(json.dumps(body))
        assert wire.trim(trimmed, 0)
        seen = wire.read_response(trimmed)
        assert [c.name for c in seen.calls] == ["final_answer"], wire.api
        assert seen.finish_reason == "tool_calls", wire.api


def test_the_final_request_forces_an_offered_answer_tool() -> None:
    prompt = "[agent-watchdog: system instruction] Tools are withdrawn: report."
    search = {"type": "function", "function": {"name": "search", "parameters": {}}}
    answer = {"type": "function", "function": {"name": "final_answer", "parameters": {}}}
    chat = ChatWire().withdraw_tools({"messages": [{"role": "user", "content": "q"}],
                                      "tools": [search, answer], "tool_choice": "required",
                                      "parallel_tool_calls": False}, prompt)
    assert chat["tools"] == [answer]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "final_answer"}}
    assert "parallel_tool_calls" not in chat
    system = chat["messages"][0]["content"]
    assert prompt in system and "`final_answer` tool" in system
    responses = ResponsesWire().withdraw_tools({"input": "q", "tools": [
        {"type": "function", "name": "search"}, {"type": "function", "name": "final_result"}]},
        prompt)
    assert responses["tools"] == [{"type": "function", "name": "final_result"}]
    assert responses["tool_choice"] == {"type": "function", "name": "final_result"}
    claude = MessagesWire().withdraw_tools({"messages": [], "tools": [
        {"name": "search"}, {"name": "final_answer"}]}, prompt)
    assert claude["tool_choice"] == {"type": "tool", "name": "final_answer"}
    assert len(claude["tools"]) == 2  # the history's tool_use blocks stay valid
    # no answer tool offered: tools withdrawn as before
    assert ChatWire().withdraw_tools({"messages": [], "tools": [search]},
                                     prompt)["tool_choice"] == "none"


def test_an_answer_shaped_request_forces_the_one_function_it_offers() -> None:
    """A request whose choice forces the one function it offers (instructor's ``Mode.TOOLS``)
    is answer-shaped, in each API's shape: its call is its answer, its answer format that
    function's schema. Forcing one of several, or a choice that names none, is not."""
    found = {"type": "function", "function": {"name": "Found", "parameters": {}}}
    search = {"type": "function", "function": {"name": "search", "parameters": {}}}
    forced = {"type": "function", "function": {"name": "Found"}}
    chat = ChatWire().read_request({"messages": [{"role": "user", "content": "q"}],
                                    "tools": [found], "tool_choice": forced})
    assert (chat.forced, chat.answer_format, chat.has_tools, chat.structured) == (
        "Found", "json_schema", True, False)
    assert forced_function({"tools": [found, search], "tool_choice": forced}) is None
    assert forced_function({"tools": [found], "tool_choice": "required"}) is None
    assert forced_function({"tools": [search], "tool_choice": forced}) is None
    assert forced_function({"functions": [{"name": "Found"}],
                            "function_call": {"name": "Found"}}) == "Found"
    responses = ResponsesWire().read_request({"input": "q", "tools": [
        {"type": "function", "name": "Found"}], "tool_choice": {"type": "function",
                                                                "name": "Found"}})
    assert (responses.forced, responses.answer_format) == ("Found", "json_schema")
    claude = MessagesWire().read_request({"messages": [{"role": "user", "content": "q"}],
                                          "tools": [{"name": "Found", "input_schema": {}}],
                                          "tool_choice": {"type": "tool", "name": "Found"}})
    assert (claude.forced, claude.answer_format) == ("Found", "json_schema")
    plain = ChatWire().read_request({"messages": [], "tools": [found]})
    assert (plain.forced, plain.answer_format) == (None, None)


def test_the_final_request_keeps_an_answer_shaped_requests_function_forced() -> None:
    """Never ``tool_choice: none`` for a request whose answer is a call of the function it
    forces (its client parses that call alone): the function stays, forced, and the report
    is asked in its fields."""
    prompt = "[agent-watchdog: system instruction] Tools are withdrawn: report."
    found = {"type": "function", "function": {"name": "Found", "parameters": {}}}
    forced = {"type": "function", "function": {"name": "Found"}}
    chat = ChatWire().withdraw_tools({"messages": [{"role": "user", "content": "q"}],
                                      "tools": [found], "tool_choice": forced}, prompt)
    assert chat["tools"] == [found] and chat["tool_choice"] == forced
    system = chat["messages"][0]["content"]
    assert prompt in system and "as a call of the `Found` function" in system
    responses = ResponsesWire().withdraw_tools({"input": "q", "tools": [
        {"type": "function", "name": "Found"}], "tool_choice": {"type": "function",
                                                                "name": "Found"}}, prompt)
    assert responses["tool_choice"] == {"type": "function", "name": "Found"}
    assert "`Found` function" in responses["instructions"]
    claude = MessagesWire().withdraw_tools({"messages": [], "tools": [{"name": "Found"}],
                                            "tool_choice": {"type": "tool", "name": "Found"}},
                                           prompt)
    assert claude["tool_choice"] == {"type": "tool", "name": "Found"}
    assert "`Found` function" in claude["system"]


def test_a_tool_with_no_function_name_is_not_forced_when_no_answer_tool_is_offered() -> None:
    """A hosted tool (the Responses API's ``web_search``, Chat's ``custom`` tool: no function
    name) beside the function tools, and no final-answer tool: the final request withdraws
    them all (``tool_choice: none``, every definition kept), never forces a tool named None."""
    prompt = "[agent-watchdog: system instruction] Tools are withdrawn: report."
    hosted = {"type": "web_search"}
    tools = [hosted, {"type": "function", "name": "search"}]
    responses = ResponsesWire().withdraw_tools({"input": "q", "tools": tools}, prompt)
    assert responses["tool_choice"] == "none" and responses["tools"] == tools
    custom = {"type": "custom", "custom": {"name": "grep"}}
    search = {"type": "function", "function": {"name": "search", "parameters": {}}}
    chat = ChatWire().withdraw_tools({"messages": [], "tools": [search, custom]}, prompt)
    assert chat["tool_choice"] == "none" and chat["tools"] == [search, custom]


def test_legacy_functions_are_tool_calls_of_their_own_id_and_withdrawn_as_tools() -> None:
    """The legacy Chat Completions shape: ``functions`` offered are tools; the answer's
    ``function_call`` is a tool call with an id of its own, which the next request's
    ``function`` message (a name, no call id) answers, so the book pairs them; the final
    request withdraws them with ``function_call: "none"``, their definitions kept — or forces
    an offered answer function."""
    wire, book = ChatWire(), ModelBook()
    functions = [{"name": "search", "parameters": {}}]
    asking = {"model": "m", "functions": functions, "messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]}
    first = wire.read_request(asking)
    assert first.has_tools and not first.results
    seen = wire.read_response(json.loads(json.dumps(completion(
        "m", "chatcmpl-1", Step(tool_calls=(ToolCall("search", {"q": "a"}),)), {},
        legacy=True))))
    assert seen.calls == [Call("function_call:search", "search", '{"q": "a"}')]
    assert seen.finish_reason == "function_call"
    state = book.identify("chat", first, Caller(), "a", lambda _key: False)
    book.call_record(state, first, seen, seen.calls, 1, 2)
    assert state.handed == 1
    answered = wire.read_request({**asking, "messages": [
        *asking["messages"],
        {"role": "assistant", "content": None,
         "function_call": {"name": "search", "arguments": '{"q": "a"}'}},
        {"role": "function", "name": "search", "content": "Error: no such page"}]})
    assert answered.results == [ToolResult("function_call:search", "Error: no such page", True)]
    assert answered.said == []
    assert book.identify("chat", answered, Caller(), "a", lambda _key: False) is state
    [record] = book.tool_records(state, answered, 3)
    assert (record.tool_name, record.result_brief, record.error) == (
        "search", "Error: no such page", True)
    prompt = "[agent-watchdog: system instruction] Tools are withdrawn: report."
    final = wire.withdraw_tools({**asking, "function_call": "auto"}, prompt)
    assert final["function_call"] == "none" and final["functions"] == functions
    assert "tools" not in final and "tool_choice" not in final
    assert prompt in final["messages"][0]["content"]
    answer = {"name": "final_result", "parameters": {}}
    forced = wire.withdraw_tools({**asking, "functions": [*functions, answer]}, prompt)
    assert forced["functions"] == [answer]
    assert forced["function_call"] == {"name": "final_result"}
    assert "`final_result` tool" in forced["messages"][0]["content"]
    # a whole answer past the budget: its call left out, its finish reason "stop"
    body = completion("m", "chatcmpl-2", Step(text="Let me look.", tool_calls=(
        ToolCall("search", {"q": "b"}),)), {}, legacy=True)
    assert wire.trim(body, 0)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Let me look."}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert not wire.trim(body, 0)


def test_a_request_with_no_tool_call_left_has_its_tools_withdrawn() -> None:
    """The run's other requests with the model hold what is left of its budget (or of a
    grace): this one can hand over none, so its tools are withdrawn with the note (it answers
    in text), though it is not the run's final request; one that offers no tools passes."""
    budget = {"max_tool_calls": 4.0}
    turn = decide(Counts(used=1, handed=1, budget=budget, reserved=3), None, "", True)
    assert (turn.act, turn.keep) == (Act.WITHDRAW, 0)
    assert "[budget: 0 of 4 tool calls left — no tool will run; report now]" in turn.text
    assert decide(Counts(used=1, handed=1, budget=budget, reserved=2), counting("tool_calls"),
                  "", True).act is Act.NOTE
    assert decide(Counts(used=1, handed=1, budget=budget, reserved=3), None, "",
                  False).act is Act.PASS
    board = Board()
    board.post(directive("wind_down", "tool-cycle", "Loop", grace={"tool_calls": 2,
                                                                   "ends_at_tool_calls": 6}))
    grace = decide(Counts(used=4, handed=4, budget={}, reserved=2), board, "", True)
    assert (grace.act, grace.keep) == (Act.WITHDRAW, 0)
    assert "[grace: 0 tool calls left — no tool will run; report now]" in grace.text


def test_the_decision_counts_what_was_handed_over() -> None:
    budget = {"max_tool_calls": 3.0}
    # the agent reported nothing back (it replays its calls as text): handed over is spent
    final = decide(Counts(used=0, handed=3, budget=budget), None, "", True)
    assert (final.act, final.keep) == (Act.FINAL, 0)
    assert "all 3 tool calls used" in final.text
    note = decide(Counts(used=0, handed=2, budget=budget), counting("tool_calls"), "", True)
    assert (note.act, note.keep) == (Act.NOTE, 1) and "1 of 3 tool calls left" in note.text
    board = Board()
    board.post(directive("wind_down", "tool-cycle", "Loop", grace={"tool_calls": 2,
                                                                   "ends_at_tool_calls": 6}))
    assert decide(Counts(used=4, handed=6, budget={}), board, "", True).act is Act.FINAL


def chat_request(*messages: dict[str, Any]) -> Any:
    return ChatWire().read_request({"model": "m", "tools": [1], "messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "task"}, *messages]})


def test_a_history_compacted_to_a_runs_answer_goes_on_in_that_run() -> None:
    """A conversation that opens with the model's answer to a new user message of a run (its
    summary, 40 characters or more), before any user message, is that run's: of the same
    agent, while the run is not over by its final request or a stop. A short answer, another
    agent's conversation, or one after the run's final request starts a run of its own."""
    summary = "Searched the config directories twice; nothing found yet."

    def answered(book: ModelBook, request: Request, text: str) -> EndpointRun:
        state = book.identify("chat", request, Caller(), "a", lambda _key: False)
        book.call_record(state, request, Observation(finish_reason="stop", text=text,
                                                     complete=True), [], 1, 2)
        return state

    def compacted(opening: str) -> Request:
        return ChatWire().read_request({"model": "m", "tools": [1], "messages": [
            {"role": "system", "content": "sys"}, {"role": "assistant", "content": opening}]})

    asked = chat_request({"role": "user", "content": "Summarise the work."})
    book = ModelBook()
    run = answered(book, asked, summary)
    # (at once: the summary ended the run, its agent goes on in the compacted history)
    assert book.identify("chat", compacted(summary), Caller(), "a",
                         lambda _key: False, None, 3) is run
    # (and later requests of it: a user message of its own, a new first user message)
    later = ChatWire().read_request({"model": "m", "tools": [1], "messages": [
        {"role": "system", "content": "sys"}, {"role": "assistant", "content": summary},
        {"role": "assistant", "content": "REPORT"}, {"role": "user", "content": "continue"}]})
    assert book.identify("chat", later, Caller(), "a", lambda _key: False, None, 4) is run
    assert book.identify("chat", compacted(summary), Caller(), "b",
                         lambda _key: False) is not run  # another agent's
    short = ModelBook()
    alone = answered(short, asked, "Nothing yet.")
    assert short.identify("chat", compacted("Nothing yet."), Caller(), "a",
                          lambda _key: False) is not alone
    over = ModelBook()
    ended = answered(over, asked, summary)
    ended.final_used = True  # (its final request went upstream: the run is over)
    assert over.identify("chat", compacted(summary), Caller(), "a",
                         lambda _key: False) is not ended


def test_a_history_rewritten_around_a_call_the_run_waits_for_goes_on_in_that_run() -> None:
    """A conversation the book does not know whose tool results answer a call a run handed
    over and still waits for is that run's history rewritten (the Cline CLI compacts its
    history to a summary of its own, sent as a new first user message, and keeps its latest
    call and result after it): the run goes on in it, its calls counted on. Another agent's
    conversation, or one whose call has had its result already, is not that run's."""
    def handing(book: ModelBook, agent: str, call_id: str) -> EndpointRun:
        request = chat_request()
        state = book.identify("chat", request, Caller(), agent, lambda _key: False)
        call = Call(call_id, "run_commands", '{"commands": ["ls"]}')
        book.call_record(state, request, Observation(finish_reason="tool_calls", calls=[call],
                                                     complete=True), [call], 1, 2)
        return state

    def rewritten(call_id: str) -> Request:
        return ChatWire().read_request({"model": "m", "tools": [1], "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "Context summary:\n\nListed the files."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "run_commands", "arguments": '{"commands": ["ls"]}'}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "a.txt"}]})

    book = ModelBook()
    run = handing(book, "a", "call_1")
    going = book.identify("chat", rewritten("call_1"), Caller(), "a", lambda _key: False)
    assert going is run and going.going_on
    assert going.conversation == book.identify(  # (its later requests: the same conversation)
        "chat", rewritten("call_1"), Caller(), "a", lambda _key: False).conversation
    other = ModelBook()
    mine = handing(other, "a", "call_2")
    assert other.identify("chat", rewritten("call_2"), Caller(), "b",
                          lambda _key: False) is not mine  # another agent's
    answered = ModelBook()
    done = handing(answered, "a", "call_3")
    done.pending.clear()  # (its result came in its own conversation)
    assert answered.identify("chat", rewritten("call_3"), Caller(), "a",
                             lambda _key: False) is not done


def test_a_first_message_whose_cache_marker_moves_on_is_one_conversation() -> None:
    """On Messages a client marks its latest message for the prompt cache (``cache_control``),
    so the task carries the marker at its first request and not after (pi): the conversation
    is the same. Two invocations of one task in a row are two runs, each invocation's
    requests in its own. (Before, the second's next request was taken for the first's, over,
    and began a third run: the second's first call uncounted, its run never ended.)"""
    marker = {"type": "ephemeral"}

    def request(cached: bool, *messages: dict[str, Any]) -> Request:
        task = {"type": "text", "text": "Find the file.",
                **({"cache_control": marker} if cached else {})}
        return MessagesWire().read_request({"model": "m", "tools": [{"name": "bash"}],
                                            "system": "sys", "messages": [
            {"role": "user", "content": [task]}, *messages]})

    def invocation(book: ModelBook, call_id: str) -> list[EndpointRun]:
        call = Call(call_id, "bash", '{"command": "ls"}')
        first = request(True)
        run = book.identify("messages", first, Caller(), "a", lambda _key: False)
        book.call_record(run, first, Observation(finish_reason="tool_use", calls=[call],
                                                 complete=True), [call], 1, 2)
        going = request(False, {"role": "assistant", "content": [
            {"type": "tool_use", "id": call_id, "name": "bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id,
                                          "content": "a.txt", "cache_control": marker}]})
        assert going.anchor == first.anchor  # (the marker aside)
        after = book.identify("messages", going, Caller(), "a", lambda _key: False)
        book.call_record(after, going, Observation(finish_reason="end_turn", text="Found.",
                                                   complete=True), [], 3, 4)
        return [run, after]

    book = ModelBook()
    one, two = invocation(book, "toolu_1"), invocation(book, "toolu_2")
    assert one[0] is one[1] and two[0] is two[1] and one[0] is not two[0]


def test_a_history_rewritten_after_a_refusal_goes_on_in_that_run() -> None:
    """A run's request that carried a call's result, refused by the model API as past its
    context window: a conversation the book does not know that carries that result again is
    the run's history rewritten (pi compacts its history so, the summary a new first user
    message, then sends the refused request's calls and results again), its call counted
    once. Once a response of the run has come, or for another agent, it is not."""
    call = Call("call_4", "bash", '{"command": "ls"}')
    asked = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_4", "type": "function",
         "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}
    result = {"role": "tool", "tool_call_id": "call_4", "content": "a.txt"}
    rewritten = ChatWire().read_request({"model": "m", "tools": [1], "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "The conversation history was compacted: listed."},
        {"role": "user", "content": "task"}, asked, result]})

    def refused_after_a_call(book: ModelBook) -> EndpointRun:
        request = chat_request()
        state = book.identify("chat", request, Caller(), "a", lambda _key: False)
        book.call_record(state, request, Observation(finish_reason="tool_calls", calls=[call],
                                                     complete=True), [call], 1, 2)
        going = chat_request(asked, result)
        assert book.identify("chat", going, Caller(), "a", lambda _key: False) is state
        assert len(book.tool_records(state, going, 3)) == 1
        book.refused_record(state, going, 400, b'{"error": {"message": "This model\'s input '
                            b'exceeds the context window"}}', 3, 4)
        return state

    book = ModelBook()
    run = refused_after_a_call(book)
    assert book.identify("chat", rewritten, Caller(), "a", lambda _key: False) is run
    assert book.tool_records(run, rewritten, 5) == []  # (its call counted once, before)
    other = ModelBook()
    mine = refused_after_a_call(other)
    assert other.identify("chat", rewritten, Caller(), "b", lambda _key: False) is not mine
    later = ModelBook()
    answered = refused_after_a_call(later)
    sent_again = chat_request(asked, result)  # (the refused request sent again, answered)
    assert later.identify("chat", sent_again, Caller(), "a", lambda _key: False) is answered
    later.call_record(answered, sent_again, Observation(finish_reason="stop", text="Done.",
                                                        complete=True), [], 5, 6)
    assert later.identify("chat", rewritten, Caller(), "a", lambda _key: False) \
        is not answered


def test_another_tasks_history_rewritten_with_a_refused_call_id_is_not_that_run() -> None:
    """Two tasks of one agent at once, their model server giving their calls the same id
    (``call_4``): the first task's request carrying its result is refused (past the context
    window), then the second compacts its history, carrying its own result of its own
    ``call_4``: that result is not the refused request's (its text differs), so the second
    task's rewritten history never goes on in the first's run (before, it did: two tasks one
    run, one budget). The first's own history rewritten, its result again, still does."""
    call = Call("call_4", "bash", '{"command": "ls"}')
    asked = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_4", "type": "function",
         "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}

    def task(name: str, *messages: dict[str, Any]) -> Request:
        return ChatWire().read_request({"model": "m", "tools": [1], "messages": [
            {"role": "system", "content": "sys"}, *messages[:1],
            {"role": "user", "content": name}, *messages[1:]]})

    def result(text: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": "call_4", "content": text}

    def summary(of: str) -> dict[str, Any]:
        return {"role": "user", "content": f"The history of {of} was compacted: listed."}

    book = ModelBook()
    second = book.identify("chat", task("task b"), Caller(), "a", lambda _key: False)
    book.call_record(second, task("task b"), Observation(
        finish_reason="tool_calls", calls=[call], complete=True), [call], 1, 2)
    first = book.identify("chat", task("task a"), Caller(), "a", lambda _key: False)
    assert first is not second
    book.call_record(first, task("task a"), Observation(
        finish_reason="tool_calls", calls=[call], complete=True), [call], 3, 4)
    going = ChatWire().read_request({"model": "m", "tools": [1], "messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "task a"}, asked,
        result("a.txt")]})
    assert book.identify("chat", going, Caller(), "a", lambda _key: False) is first
    book.tool_records(first, going, 5)
    book.refused_record(first, going, 400, b'{"error": {"message": "This model\'s input '
                        b'exceeds the context window"}}', 5, 6)
    theirs = task("task b", summary("task b"), asked, result("b.txt"))
    assert book.identify("chat", theirs, Caller(), "a", lambda _key: False) is not first
    mine = task("task a", summary("task a"), asked, result("a.txt"))
    assert book.identify("chat", mine, Caller(), "a", lambda _key: False) is first


def test_what_a_run_keeps_of_a_refused_requests_results_is_bounded() -> None:
    """A refused request's results are kept to know its history rewritten: at most
    MAX_PENDING_CALLS of them, each a digest of a fixed size whatever the call id and text the
    client sent (ids of 100 000 characters), and a rewritten history that carries one of
    them again is still known."""
    from watchdog.core.model.actions import MAX_PENDING_CALLS

    long_id = "call_" + "x" * 100_000
    call = Call(long_id, "bash", "{}")
    asked = {"role": "assistant", "content": None, "tool_calls": [
        {"id": long_id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}
    results = [{"role": "tool", "tool_call_id": f"{long_id}{index}", "content": "y" * 1000}
               for index in range(MAX_PENDING_CALLS + 5)]
    results[0]["tool_call_id"] = long_id
    book = ModelBook()
    state = book.identify("chat", chat_request(), Caller(), "a", lambda _key: False)
    book.call_record(state, chat_request(), Observation(finish_reason="tool_calls",
                                                        calls=[call], complete=True),
                     [call], 1, 2)
    going = chat_request(asked, *results)
    assert book.identify("chat", going, Caller(), "a", lambda _key: False) is state
    book.refused_record(state, going, 400, b'{"error": {"message": "too long"}}', 3, 4)
    assert len(state.refused) == MAX_PENDING_CALLS
    assert sum(len(repr(kept)) for kept in state.refused) <= 100 * MAX_PENDING_CALLS
    rewritten = ChatWire().read_request({"model": "m", "tools": [1], "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "The conversation history was compacted."},
        {"role": "user", "content": "task"}, asked, results[0]]})
    assert book.identify("chat", rewritten, Caller(), "a", lambda _key: False) is state


def test_a_known_conversation_whose_call_id_another_run_waits_for_stays_its_own() -> None:
    """Two tasks of one agent at once, their model server giving each answer's call the same
    id (``call_0``): the first task's next request, its result of its own ``call_0``, goes on
    in its own run, never taken for the other's history rewritten. (Before, it moved into
    the run that last handed ``call_0`` over: two tasks one run, one budget.)"""
    call = Call("call_0", "run_commands", '{"commands": ["ls"]}')
    asked = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function",
         "function": {"name": "run_commands", "arguments": '{"commands": ["ls"]}'}}]}

    def task(name: str, *messages: dict[str, Any]) -> Request:
        return ChatWire().read_request({"model": "m", "tools": [1], "messages": [
            {"role": "system", "content": "sys"}, {"role": "user", "content": name},
            *messages]})

    book = ModelBook()
    runs = []
    for name in ("task A", "task B"):
        request = task(name)
        state = book.identify("chat", request, Caller(), "a", lambda _key: False)
        book.call_record(state, request, Observation(finish_reason="tool_calls", calls=[call],
                                                     complete=True), [call], 1, 2)
        runs.append(state)
    assert runs[0] is not runs[1]
    for state, name in zip(runs, ("task A", "task B"), strict=True):
        going = book.identify("chat", task(name, asked, {"role": "tool", "tool_call_id": "call_0",
                                                          "content": "a.txt"}),
                              Caller(), "a", lambda _key: False)
        assert going is state, name


def test_a_conversation_seeded_with_an_earlier_runs_answer_is_a_run_of_its_own() -> None:
    """A conversation that opens with the model's message by design (a chat seeded with the
    agent's greeting, a transcript replayed) whose words an earlier run of the agent happened
    to answer with, to a new user message: that run ended with it, long before; the
    conversation is a run of its own, and the ended run is not taken back. So is one that
    comes at once, after that run's conversation went on to its next run, and another
    invocation's whose answers are the same (the latest run's, ended)."""
    greeting = "Hello! I am the billing assistant. How can I help you today?"
    second = 10**9

    def answered(book: ModelBook, said: str, text: str, at: int) -> EndpointRun:
        request = chat_request(*([{"role": "user", "content": "hi"},
                                  {"role": "assistant", "content": greeting}]
                                 if said != "hi" else []), {"role": "user", "content": said})
        state = book.identify("chat", request, Caller(), "a", lambda _key: False, None, at)
        book.call_record(state, request, Observation(finish_reason="stop", text=text,
                                                     complete=True), [], at, at + 1)
        return state

    def seeded(at: int, book: ModelBook, ended: Callable[[str], bool]) -> EndpointRun:
        request = ChatWire().read_request({"model": "m", "messages": [
            {"role": "system", "content": "sys"}, {"role": "assistant", "content": greeting},
            {"role": "user", "content": "My order 42 never came."}]})
        return book.identify("chat", request, Caller(), "a", ended, None, at)

    book = ModelBook()
    hello = answered(book, "hi", greeting, 0)
    assert seeded(600 * second, book, lambda key: key == hello.key) is not hello
    # ... nor at once, once its conversation has gone on to its next run
    going = ModelBook()
    run = answered(going, "hi", greeting, 0)
    assert answered(going, "and?", "Tell me what went wrong with your order, please.",
                    2) is not run
    assert seeded(3, going, lambda _key: False) is not run
    # ... and two invocations answering the same: the latest one ended, long before
    twice = ModelBook()
    answered(twice, "hi", greeting, 0)
    latest = answered(twice, "hi", greeting, 5 * second)
    assert seeded(900 * second, twice, lambda _key: True) is not latest

def test_a_request_that_may_continue_a_run_is_told_apart_from_a_new_one() -> None:
    """What the native endpoint books first: the ended calls a request may continue."""
    book = ModelBook()
    first = chat_request()
    state = book.identify("chat", first, Caller(), "a", lambda _key: False)
    unread = [Unbooked(state)]  # its response not read yet: it may be any
    assert book.unbooked_of("chat", first, Caller(), "a", []) == []
    assert book.unbooked_of("chat", chat_request({"role": "assistant", "content": "done"},
                                                 {"role": "user", "content": "more"}),
                            Caller(), "a", unread) == [0]  # its conversation
    other = ChatWire().read_request({"model": "m", "messages": [
        {"role": "user", "content": "another task"}]})
    assert book.unbooked_of("chat", other, Caller(), "a", unread) == []
    assert book.unbooked_of("chat", first, Caller(), "b", unread) == []  # another agent's
    assert book.unbooked_of("responses", first, Caller(), "a", unread) == []  # another API's
    assert book.unbooked_of("chat", other, Caller(run=state.key), "a", unread) == [0]
    assert book.unbooked_of("chat", other, Caller(run="elsewhere"), "a", unread) == []
    answering = chat_request(
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "t", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"})
    # another agent's conversation whose results answer a call: the call that asked for it
    read = [Unbooked(state, "r1", frozenset({"c2"})), Unbooked(state, "r2", frozenset({"c1"}))]
    assert book.unbooked_of("chat", answering, Caller(), "z", unread) == [0]
    assert book.unbooked_of("chat", answering, Caller(), "z", read) == [1]
    continued = ResponsesWire().read_request({"model": "m", "previous_response_id": "r2",
                                             "input": "go on"})
    assert book.unbooked_of("responses", continued, Caller(), "z", read) == [1]
    assert book.unbooked_of("responses", continued, Caller(), "z",
                            [*read, Unbooked(state)]) == [1, 2]
    traced = book.identify("chat", other, Caller(traceparent="00-" + "1" * 32 + "-" + "2" * 16
                                                 + "-01"), "a", lambda _key: False)
    assert book.unbooked_of("chat", other, Caller(traceparent="00-" + "1" * 32 + "-" + "3" * 16
                                                  + "-01"), "a", [Unbooked(traced)]) == [0]
    assert book.unbooked_of("chat", first, Caller(traceparent="00-" + "4" * 32 + "-"
                                                  + "3" * 16 + "-01"), "a",
                            [Unbooked(traced)]) == []


def test_calls_handed_over_count_at_the_next_request_once() -> None:
    book = ModelBook()
    first = chat_request()
    state = book.identify("chat", first, Caller(), "a", lambda _key: False)
    assert book.tool_records(state, first, 1) == []
    book.call_record(state, first, Observation(finish_reason="tool_calls"), [
        Call("call_1", "search", '{"q": "a"}')], 1, 2)
    # the agent replays the call and its result as plain text, not as a tool message
    replay = chat_request(
        {"role": "assistant", "content": "Calling tools:\n[{'id': 'call_1', ...}]"},
        {"role": "user", "content": [{"type": "text", "text": "Observation:\nno match"}]})
    [record] = book.tool_records(state, replay, 3)
    assert (record.tool_name, record.result_brief, record.error) == (
        "search", "Observation:\nno match", False)
    assert state.results == 1 and not state.pending
    # a result that shows up later (or the same request again) finds its call counted
    late = chat_request({"role": "assistant", "tool_calls": [{"id": "call_1"}]},
                        {"role": "tool", "tool_call_id": "call_1", "content": "no match"})
    assert book.tool_records(state, late, 4) == [] and state.results == 1
    # two calls, plain text naming one of them (an error), nothing for the other
    book.call_record(state, late, Observation(complete=True), [
        Call("call_2", "search", "{}"), Call("call_3", "search", "{}")], 5, 6)
    named = chat_request({"role": "assistant", "content": "Calling tools"},
                         {"role": "user", "content": "Call id: call_3\nError:\nboom"})
    records = book.tool_records(state, named, 7)
    assert [(r.result_brief, r.error) for r in records] == [
        (None, False), ("Call id: call_3\nError:\nboom", True)]
    assert state.results == 3 and state.handed == 3


def test_tool_messages_that_name_no_call_answer_the_calls_in_order() -> None:
    """Tool messages with no ``tool_call_id`` (Qwen-Agent's, which name their call by ``id``):
    each answers the next call still waiting, in the order the calls were handed over; one
    past them answers none. A result that names its call takes that one first."""
    book = ModelBook()
    first = chat_request()
    state = book.identify("chat", first, Caller(), "a", lambda _key: False)
    book.call_record(state, first, Observation(finish_reason="tool_calls"), [
        Call("call_1", "search", '{"q": "a"}'), Call("call_2", "fetch", '{"u": "b"}'),
        Call("call_3", "read", "{}")], 1, 2)
    going = chat_request(
        {"role": "assistant", "tool_calls": [{"id": "call_1"}, {"id": "call_2"},
                                             {"id": "call_3"}]},
        {"role": "tool", "id": "call_1", "content": "found a"},
        {"role": "tool", "tool_call_id": "call_3", "content": "read it"},
        {"role": "tool", "id": "call_2", "content": "Error: fetch failed"},
        {"role": "tool", "id": "call_9", "content": "one more"})
    records = book.tool_records(state, going, 3)
    assert sorted((r.tool_name, r.result_brief, r.error) for r in records) == [
        ("fetch", "Error: fetch failed", True), ("read", "read it", False),
        ("search", "found a", False)]
    assert state.results == 3 and not state.pending


def test_a_request_sent_again_is_a_retry_whose_calls_never_ran() -> None:
    """The request before sent again, nothing of the calls handed over since in it (its client
    could not read the answer): those calls are handed over no more and count nothing; one
    that the next request answers after all counts then. Not so while another request of the
    run is with the model (parallel agents of one run may send the same request)."""
    book = ModelBook()
    asked = chat_request({"role": "assistant", "tool_calls": [{"id": "call_0"}]},
                         {"role": "tool", "tool_call_id": "call_0", "content": "found"})
    state = book.identify("chat", asked, Caller(), "a", lambda _key: False)
    book.tool_records(state, asked, 1)
    book.call_record(state, asked, Observation(complete=True), [
        Call("call_1", "search", "{}"), Call("call_2", "search", "{}")], 2, 3)
    book.settle(state)
    assert state.handed == 2
    again = book.identify("chat", asked, Caller(), "a", lambda _key: False)
    assert again is state and book.tool_records(state, asked, 4) == []
    assert (state.handed, state.results, list(state.pending)) == (0, 0, [])
    book.call_record(state, asked, Observation(complete=True), [
        Call("call_3", "search", "{}")], 5, 6)
    book.settle(state)
    answered = chat_request(
        {"role": "assistant", "tool_calls": [{"id": "call_0"}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "found"},
        {"role": "assistant", "tool_calls": [{"id": "call_3"}, {"id": "call_1"}]},
        {"role": "tool", "tool_call_id": "call_3", "content": "three"},
        {"role": "tool", "tool_call_id": "call_1", "content": "one, run after all"})
    book.identify("chat", answered, Caller(), "a", lambda _key: False)
    records = book.tool_records(state, answered, 7)
    assert [record.result_brief for record in records] == ["three", "one, run after all"]
    assert (state.handed, state.results) == (1, 2)
    # parallel: the same request while another of the run is with the model is no retry
    book.call_record(state, answered, Observation(complete=True), [
        Call("call_4", "search", "{}")], 8, 9)
    book.identify("chat", answered, Caller(), "a", lambda _key: False)
    book.identify("chat", answered, Caller(), "a", lambda _key: False)
    assert state.asking == 3
    [record] = book.tool_records(state, answered, 10)
    assert record.tool_name == "search" and state.handed == 2


def test_a_response_asking_only_for_the_answer_tool_is_the_answer() -> None:
    book = ModelBook()
    request = ChatWire().read_request({"model": "m", "messages": [
        {"role": "user", "content": "task"}], "tools": [
        {"type": "function", "function": {"name": name}} for name in ("search", "final_answer")]})
    assert request.answers_offered == ("final_answer",)
    state = book.identify("chat", request, Caller(), "a", lambda _key: False)
    record = book.call_record(state, request, Observation(finish_reason="tool_calls"), [
        Call("call_9", "final_answer", '{"answer": "The file is /srv/a.txt."}')], 1, 2)
    assert (record.requested_tools, record.final_answer) == (False, True)
    assert record.final_output == "The file is /srv/a.txt."
    assert state.handed == 0 and not state.pending  # not a tool call, not budgeted
    mixed = book.call_record(state, request, Observation(finish_reason="tool_calls"), [
        Call("call_8", "search", "{}"), Call("call_9", "final_answer", "{}")], 3, 4)
    assert (mixed.requested_tools, mixed.final_answer) == (True, False)
    assert state.handed == 1 and list(state.pending) == ["call_8"]


def test_a_final_answer_tool_the_request_does_not_offer_is_work() -> None:
    """A call of a final-answer tool the request does not offer (one the model made up,
    which the agent refuses as unknown) is a tool call: not the run's answer, counted as
    handed over and trimmed as work; the request reads the final-answer tools it offers, the
    first MAX_ANSWERS_OFFERED, each once."""
    names = ["search", "final_result_0", *(f"final_result_{n}" for n in range(20))]
    many = ChatWire().read_request({"model": "m", "messages": [], "functions": [
        {"name": name} for name in names]})
    assert many.answers_offered == tuple(f"final_result_{n}" for n in range(MAX_ANSWERS_OFFERED))
    book = ModelBook()
    request = ChatWire().read_request({"model": "m", "messages": [
        {"role": "user", "content": "task"}], "tools": [
        {"type": "function", "function": {"name": "search"}}]})
    assert request.answers_offered == ()
    state = book.identify("chat", request, Caller(), "a", lambda _key: False)
    made_up = [Call("call_8", "search", "{}"), Call("call_9", "final_result", '{"a": "x"}')]
    record = book.call_record(state, request, Observation(finish_reason="tool_calls"),
                              made_up, 1, 2)
    assert (record.requested_tools, record.final_answer, record.final_output) == (
        True, False, None)
    assert state.handed == 2 and list(state.pending) == ["call_8", "call_9"]
    assert kept_calls(made_up[::-1], 1, None, request.answers_offered) == [made_up[1]]
    assert kept_calls(made_up[::-1], 1) == made_up[::-1]  # (no request at hand: any)


WITH_ANSWER = Step(text="Looking.", tool_calls=(*THREE.tool_calls,
                                                 ToolCall("final_answer", {"answer": "done"})))


def sdk_snapshot(wire: Wire, stream: bytes) -> list[tuple[str, str | None]]:
    """What the vendor's own SDK makes of a stream (its accumulator indexes the items or
    blocks by the numbers in the events): each item's or block's type and tool name."""
    events = [json.loads(event.data) for event in SSEReader().feed(stream)
              if event.data and event.data != "[DONE]"]
    if isinstance(wire, ResponsesWire):
        from openai import omit
        from openai._models import construct_type
        from openai.lib.streaming.responses._responses import ResponseStreamState
        from openai.types.responses import ResponseStreamEvent
        state: Any = ResponseStreamState(input_tools=omit, text_format=omit)
        for data in events:
            state.handle_event(construct_type(type_=ResponseStreamEvent, value=data))
        items = state._completed_response.output if state._completed_response else []
        added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
        assert added == list(range(len(added))), added  # what the SDK indexes by
        numbers = [e["sequence_number"] for e in events if "sequence_number" in e]
        if numbers:  # numbered: without a gap
            assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
        return [(item.type, getattr(item, "name", None)) for item in items]
    from anthropic._models import construct_type as construct
    from anthropic.lib.streaming._messages import accumulate_event
    from anthropic.types import RawMessageStreamEvent
    snapshot: Any = None
    buffers: dict[int, bytes] = {}
    for data in events:
        snapshot = accumulate_event(event=construct(type_=RawMessageStreamEvent, value=data),
                                    current_snapshot=snapshot, json_bufs=buffers)
    return [(block.type, getattr(block, "name", None)) for block in snapshot.content]


@pytest.mark.parametrize(("wire", "make"), STREAMS[1:])
@pytest.mark.parametrize("keep", [0, 1, 3])
def test_a_trimmed_stream_reads_right_in_the_vendors_sdk(wire: Wire, make: Any,
                                                        keep: int) -> None:
    """Calls past ``keep`` left out, the final-answer call after them kept, and the SDK's own
    accumulator (which indexes by ``output_index`` / ``index``) sees every item in place."""
    _, out = feed(wire, make(WITH_ANSWER), 11, keep)
    seen = sdk_snapshot(wire, out)
    calls = [name for kind, name in seen if kind in ("function_call", "tool_use")]
    assert calls == [*["a", "b", "c"][:keep], "final_answer"]
    assert sdk_snapshot(wire, make(WITH_ANSWER)) == sdk_snapshot(wire, feed(wire, make(
        WITH_ANSWER), 11, None)[1])


SPAN_PROMPT = json.dumps([{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": "Refund order 42"}])


@pytest.mark.parametrize(("wire", "body"), [
    (ChatWire(), {"messages": [{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": "Refund  ORDER 42 "}]}),
    (ResponsesWire(), {"instructions": "Be brief.", "input": "Refund order 42"}),
    (ResponsesWire(), {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "Refund order 42"}]}]}),
    (MessagesWire(), {"system": "Be brief.", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Refund order 42"}]}]}),
], ids=["chat", "responses-text", "responses-items", "messages"])
def test_a_requests_input_is_hashed_as_a_spans_is(wire: Wire, body: dict[str, Any]) -> None:
    """A call through the endpoint has the input hash a span of the same call has (its last
    user message, case and spacing ignored): runs seen only through the endpoint enter the
    loops across agents (session.agent_cycle) like traced ones; the call record carries it."""
    request = wire.read_request(body)
    assert request.input_hash is not None and request.input_hash == request_hash(SPAN_PROMPT)
    book = ModelBook()
    state = book.identify(wire.api, request, Caller(), "support", lambda _key: False)
    record = book.call_record(state, request, Observation(text="Done."), [], 1, 2)
    assert record.input_hash == request.input_hash
    other = wire.read_request(json.loads(json.dumps(body).replace("42", "43")))
    assert other.input_hash != request.input_hash
    assert wire.read_request({}).input_hash is None


DEEP = "[" * 5000 + "]" * 5000  # deeper than Python's parser goes (RecursionError)


@pytest.mark.parametrize("wire", [ChatWire(), ResponsesWire(), MessagesWire()],
                         ids=["chat", "responses", "messages"])
def test_json_nested_past_the_parsers_depth_reads_as_unreadable_not_a_crash(wire: Wire) -> None:
    """An upstream event, a whole response or a final answer's arguments nested deeper than
    the JSON parser goes: read as JSON that is not there, as any unreadable JSON is."""
    stream = f'data: {{"x": {DEEP}}}\n\ndata: {DEEP}\n\n'.encode()
    for size in (7, len(stream)):
        seen, out = feed(wire, stream, size)
        assert out == stream and not seen.calls
    accumulator = wire.accumulator()
    read_stream(accumulator, stream)
    assert not accumulator.observation.calls
    name = sorted(answer_tools()[0])[0]
    assert answer_of([Call("c1", name, DEEP)]) == DEEP


@pytest.mark.parametrize(("value", "read"), [
    ("00-" + "a" * 32 + "-" + "b" * 16 + "-01", ("a" * 32, "b" * 16)),
    (" 00-" + "a" * 32 + "-" + "b" * 16 + "-00 ", ("a" * 32, "b" * 16)),  # (optional spaces)
    ("01-" + "a" * 32 + "-" + "b" * 16 + "-01-later", ("a" * 32, "b" * 16)),  # a later version
    ("00-" + "A" * 32 + "-" + "b" * 16 + "-01", None),  # upper case
    ("ff-" + "a" * 32 + "-" + "b" * 16 + "-01", None),  # version ff
    ("00-" + "a" * 32 + "-" + "b" * 16 + "-01-more", None),  # data after version 00's flags
    ("00-" + "a" * 32 + "-" + "b" * 16 + "-01x", None),
    ("00-" + "0" * 32 + "-" + "b" * 16 + "-01", None),  # all-zero ids
    ("00-" + "a" * 32 + "-" + "0" * 16 + "-01", None),
    ("00-" + "a" * 32 + "-" + "b" * 16 + "-1", None),
    ("", None), (None, None),
])
def test_a_traceparent_is_read_as_w3c_trace_context_says(value: str | None,
                                                         read: tuple[str, str] | None) -> None:
    """The run of a request's trace is taken only from a traceparent the spec calls valid: an
    invalid one is ignored, as the spec says (the request is then a run of its own)."""
    assert parse_traceparent(value) == read


@pytest.mark.parametrize("agent_spans", [False, True])
def test_a_traced_run_whose_agent_sends_no_spans_ends_after_its_answer(agent_spans: bool
                                                                        ) -> None:
    """A request's traceparent names its run, whose spans end it at the trace's root. An
    agent whose spans go elsewhere (its HTTP client sends the traceparent, its exporter
    another backend) sends none here: its run ends ``TRACED_ANSWER_WAIT`` after the answer the
    endpoint saw, not at ``run_end_timeout``. One whose spans come is ended by them."""
    book = ModelBook()
    tracker = RunTracker()
    request = chat_request()
    state = book.identify("chat", request, Caller(traceparent="00-" + "1" * 32 + "-"
                                                  + "2" * 16 + "-01"), "a", lambda _key: False)
    records = [book.call_record(state, request, Observation(text="Done.", complete=True), [],
                                10**9, 2 * 10**9)]
    if agent_spans:  # a span of the agent's, of the same trace (its root still to come)
        records.append(SpanRecord(run_key=state.key, key_source=state.key_source,
                                  trace_id=state.trace_id, span_id="3" * 16,
                                  parent_span_id="2" * 16, name="step", kind=SpanKind.OTHER,
                                  start_ns=10**9, end_ns=2 * 10**9))
    tracker.apply(records, 100.0)
    assert not tracker.expire(100.0 + TRACED_ANSWER_WAIT - 1)
    ended = tracker.expire(100.0 + TRACED_ANSWER_WAIT + 1)
    if agent_spans:
        assert not ended and tracker.get(state.key) in list(tracker.active())
    else:
        assert [(run.key, run.terminal_state) for run in ended] == [
            (state.key, TerminalState.COMPLETED)]


def test_a_response_that_broke_off_is_a_failed_call_that_hands_nothing_over() -> None:
    """A stream that ended before its API's end (the upstream closed it or sent an error event
    mid-way, or the agent went away) is a failed model call: no answer (the run goes on), the
    tool calls it began not charged as handed over (counted if the next request answers one),
    and not an answered request (the same request sent again is its run's, not a twin's)."""
    book = ModelBook()
    request = chat_request()
    state = book.identify("chat", request, Caller(), "a", lambda _key: False)
    record = book.call_record(state, request, Observation(text="The answer is"), [
        Call("call_1", "search", "{}")], 1, 2)
    assert (record.error, record.error_type, record.final_answer) == (
        True, "IncompleteResponse", False)
    assert (state.handed, state.answered) == (0, 0) and "call_1" in state.begun
    book.settle(state)
    again = book.identify("chat", request, Caller(), "a", lambda _key: False)
    assert again is state
    assert book.tool_records(state, request, 3) == []  # sent again: call_1 never ran
    whole = book.call_record(state, request, Observation(text="The answer is 4.",
                                                         complete=True), [], 3, 4)
    assert (whole.error, whole.final_answer, state.answered) == (False, True, 1)
    # one the agent ran all the same (its SDK gave it the call's deltas) counts, once
    book.call_record(state, request, Observation(), [Call("call_2", "search", "{}")], 5, 6)
    ran = chat_request({"role": "assistant", "tool_calls": [{
        "id": "call_2", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "found"})
    assert [record.tool_name for record in book.tool_records(state, ran, 7)] == ["search"]
    assert book.tool_records(state, ran, 8) == []


@pytest.mark.parametrize(("status", "body", "read"), [
    (400, b'{"error": {"message": "too long", "type": "invalid_request_error", '
          b'"code": "context_length_exceeded"}}', ("HTTP 400 context_length_exceeded", "too long")),
    (400, b'{"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}',
     ("HTTP 400 invalid_request_error", "bad")),
    (404, b'{"error": "no such model"}', ("HTTP 404", "no such model")),
    (422, b"<html>unprocessable</html>", ("HTTP 422", "<html>unprocessable</html>")),
    (400, b'{"error": {"code": 12}}', ("HTTP 400", '{"error": {"code": 12}}')),
])
def test_a_refusal_is_read_as_the_model_apis_say_it(status: int, body: bytes,
                                                    read: tuple[str, str]) -> None:
    assert refusal_of(status, body) == read
    assert refused(status) and not refused(429) and not refused(500) and not refused(408)


def test_a_late_response_of_an_evicted_run_goes_where_the_runs_own_late_span_goes() -> None:
    """A call whose ``traceparent`` named a run at its request is pinned to that run (its
    record names it as the client SDK's spans do). Its response ends after the run was
    evicted: the record is the evicted run's late call and opens no run of that key again;
    once memory has let the run go, it goes where a late span of the run's own goes (the
    run's key opened again either way): pinning opens no run its spans would not."""
    maker = SpanMaker()

    def sdk_run(tracker: RunTracker, key: str, at: float) -> Span:
        ids = {"watchdog.run.id": key, "gen_ai.agent.name": "a"}
        root = maker.open("invoke_agent a", {"gen_ai.operation.name": "invoke_agent", **ids},
                          start=at)
        maker.span("chat m", chat_attrs(finish="tool_calls", **ids), parent=root, start=at,
                   end=at + 0.5)
        tracker.apply(records_of(maker.take()), at + 1)
        return root

    tracker = RunTracker(max_runs=2, max_ended=1)
    context = sdk_run(tracker, "run-r", T0).get_span_context()
    trace = f"{context.trace_id:032x}"
    request = chat_request()
    book = ModelBook()
    state = book.identify("chat", request, Caller(
        traceparent=f"00-{trace}-{context.span_id:016x}-01"), "a", lambda _key: False)
    named = tracker.trace_run(trace)  # (the run the trace names at the request)
    assert named == "run-r"

    def response(at: float) -> SpanRecord:
        record = book.call_record(state, request, Observation(
            finish_reason="stop", text="hi", complete=True), [], int(at * 1e9),
            int((at + 0.1) * 1e9), named)
        assert (record.run_key, record.pinned) == ("run-r", True)
        return record

    sdk_run(tracker, "run-x", T0 + 2)
    sdk_run(tracker, "run-y", T0 + 3)  # three active runs, two allowed: run-r is evicted
    evicted = tracker.get("run-r")
    assert evicted is not None and (evicted.ended, evicted.terminal_reason) == (True, "evicted")
    late = tracker.apply([response(T0 + 4)], T0 + 5)
    assert (late.late_spans, late.started) == (1, [])
    assert [run.key for run in tracker.active()] == ["run-x", "run-y"]
    assert evicted.iterations == 2 and evicted.ended

    # run-x evicted in turn, the one ended run memory keeps: run-r is gone from memory
    sdk_run(tracker, "run-z", T0 + 6)
    assert tracker.get("run-r") is None
    pinned = tracker.apply([response(T0 + 7)], T0 + 8)
    # the same history, and then a late span of the run's own instead
    again = RunTracker(max_runs=2, max_ended=1)
    for key, at in (("run-r", T0), ("run-x", T0 + 2), ("run-y", T0 + 3), ("run-z", T0 + 6)):
        sdk_run(again, key, at)
    assert again.get("run-r") is None
    ids = {"watchdog.run.id": "run-r", "gen_ai.agent.name": "a"}
    maker.span("chat m", chat_attrs(finish="stop", **ids), start=T0 + 7, end=T0 + 7.1)
    own = again.apply(records_of(maker.take()), T0 + 8)
    assert [run.key for run in pinned.started] == [run.key for run in own.started] == ["run-r"]


def test_a_sub_agent_a_client_names_is_a_child_run_of_its_callers() -> None:
    """Requests of one session its client names (``Caller.session``): those naming no
    sub-agent are the caller's; a sub-agent's (``Caller.subagent``) run is a child of the
    caller's run at its first request, kept when the caller goes on to its next run; a
    sub-agent named with no session, or in another session, has no parent. A caller hands its
    sub-agent a task by a tool: a request that offers none (Claude Code's small-model side
    calls: a title, a command's prefix) is no caller's."""
    wire, book = ChatWire(), ModelBook()
    bash = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]

    def asking(task: str, tools: bool) -> Request:
        return wire.read_request({"model": "m", **({"tools": bash} if tools else {}),
                                  "messages": [{"role": "user", "content": task}]})

    def identify(task: str, session: str | None, subagent: str | None = None,
                 tools: bool = True) -> Any:
        state = book.identify("chat", asking(task, tools),
                              Caller(session=session, subagent=subagent), "a",
                              lambda _key: False)
        book.settle(state)
        return state

    main = identify("main task", "s-1")
    side = identify("Command: ls /srv. Its prefix?", "s-1", tools=False)
    sub = identify("look in /srv", "s-1", "agent-1")
    assert (main.parent, sub.parent) == (None, main.key) and side.key != main.key
    assert identify("look in /srv", "s-1", "agent-1") is sub  # its next request: the same run
    later = identify("the next task", "s-1")  # the caller's next run: the child's parent stays
    assert later.key != main.key and sub.parent == main.key
    assert identify("another sub-task", "s-1", "agent-2").parent == later.key
    assert identify("no session", None, "agent-3").parent is None
    assert identify("another session", "s-2", "agent-4").parent is None


def test_a_sub_agent_of_one_of_two_callers_in_a_session_is_the_child_of_the_one_waiting(
        ) -> None:
    """Two invocations that share a session (two ``claude`` processes given one session id):
    a sub-agent's parent is the caller whose tool call (the one that started it) is still out,
    not merely the one that sent a request last."""
    wire, book = ChatWire(), ModelBook()
    tools = [{"type": "function", "function": {"name": "Agent", "parameters": {}}}]

    def first(task: str, subagent: str | None = None) -> Any:
        request = wire.read_request({"model": "m", "tools": tools, "messages": [
            {"role": "user", "content": task}]})
        return request, book.identify("chat", request, Caller(session="s-1", subagent=subagent),
                                      "a", lambda _key: False)

    asked, one = first("task one")
    seen = wire.read_response(json.loads(json.dumps(completion(
        "m", "chatcmpl-1", Step(tool_calls=(ToolCall("Agent", {"task": "look"}),)), {}))))
    book.call_record(one, asked, seen, seen.calls, 1, 2)
    book.settle(one)
    _, other = first("task two")  # the other invocation's request, with the model
    assert other.key != one.key
    _, sub = first("look in /srv", "agent-1")
    assert sub.parent == one.key


def test_a_sub_agent_before_its_callers_first_request_gets_its_parent_after_it() -> None:
    """After a restart the book knows no caller: a sub-agent's request that comes first is a
    run with no parent; its requests after one of its caller's (a sub-agent in the
    background, its caller going on) are of a child of the caller's run (docs/model-endpoint)."""
    wire, book = ChatWire(), ModelBook()
    bash = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]

    def identify(subagent: str | None, *messages: dict[str, Any]) -> Any:
        request = wire.read_request({"model": "m", "tools": bash, "messages": list(messages)})
        state = book.identify("chat", request, Caller(session="s-1", subagent=subagent), "a",
                              lambda _key: False)
        book.settle(state)
        return state

    task = {"role": "user", "content": "look in /srv"}
    sub = identify("agent-1", task)
    assert sub.parent is None
    main = identify(None, {"role": "user", "content": "main task"})
    assert identify("agent-1", task, {"role": "assistant", "content": "looking"},
                    {"role": "user", "content": "go on"}) is sub
    assert sub.parent == main.key


def _side_and_first(task: str, quoted: str, session: str | None, tools: bool = True
                    ) -> tuple[Any, Any, Any]:
    """A side request (its own system prompt, a user message of its own and ``quoted``, no
    tools) answered, then the first request of a conversation whose task is ``task``."""
    wire, book = ChatWire(), ModelBook()
    caller = Caller(session=session)
    side = wire.read_request({"model": "small", "messages": [
        {"role": "system", "content": "You are a title generator."},
        {"role": "user", "content": "Generate a title for this conversation:\n"},
        {"role": "user", "content": quoted}]})
    titled = book.identify("chat", side, caller, "a", lambda _key: False)
    seen = wire.read_response(json.loads(json.dumps(completion(
        "small", "chatcmpl-1", Step(text="Finding the file"), {}))))
    book.call_record(titled, side, seen, seen.calls, 1, 2)
    book.settle(titled)
    first = wire.read_request({"model": "m", **({"tools": [
        {"type": "function", "function": {"name": "bash", "parameters": {}}}]} if tools else {}),
        "messages": [{"role": "system", "content": "You are an agent."},
                     {"role": "user", "content": task}]})
    return book, titled, book.identify("chat", first, caller, "a", lambda _key: True)


def test_a_side_request_is_a_model_call_of_the_run_it_is_about() -> None:
    """A conversation's first request that offers no tools, in a session its client names,
    quoting the first message of the session's next conversation (opencode's title of its
    session): that conversation, when its first request offers tools, goes on in the side
    request's run (taken back: its answer, the title, ended it), not a run of its own."""
    book, titled, run = _side_and_first("Find the file.", " Find  the\nfile. ", "ses_1")
    assert run is titled and run.going_on and run.side is None
    assert run.first == run.messages == 2  # (the conversation's own length from now on)
    # its next request, its tools' results, goes on in it as any conversation's does
    assert book.identify("chat", ChatWire().read_request({"model": "m", "tools": [
        {"type": "function", "function": {"name": "bash", "parameters": {}}}], "messages": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Find the file."},
        {"role": "user", "content": "And the other one."}]}),
        Caller(session="ses_1"), "a", lambda _key: False) is titled


@pytest.mark.parametrize(("task", "session", "tools"), [
    ("Find another file.", "ses_1", True),  # it quoted another task
    ("Find the file.", None, True),  # no session named: nothing says they are one invocation
    ("Find the file.", "ses_1", False)],  # a plain question (a chat, no tools): its own run
    ids=["another-task", "no-session", "no-tools"])
def test_a_side_request_is_a_run_of_its_own_otherwise(task: str, session: str | None,
                                                      tools: bool) -> None:
    _book, titled, run = _side_and_first(task, "Find the file.", session, tools)
    assert run is not titled and not run.going_on


def test_a_side_request_sent_after_its_runs_first_request_is_a_model_call_of_it() -> None:
    """The title sent once the conversation's first request (tools offered) has started its
    run, which is still going: a model call of that run, neither its answer nor an answer to
    its tool calls; a title of another task, or after the run has ended, is a run of its own."""
    wire, book = ChatWire(), ModelBook()
    caller = Caller(session="ses_1")
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    first = wire.read_request({"model": "m", "tools": tools, "messages": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Find the file."}]})
    run = book.identify("chat", first, caller, "a", lambda _key: False)
    seen = wire.read_response(json.loads(json.dumps(completion(
        "m", "chatcmpl-1", Step(tool_calls=(ToolCall("bash", {"command": "ls"}),)), {}))))
    book.call_record(run, first, seen, seen.calls, 1, 2)

    def title(task: str) -> Any:
        return wire.read_request({"model": "small", "messages": [
            {"role": "system", "content": "You are a title generator."},
            {"role": "user", "content": "Generate a title for this conversation:\n"},
            {"role": "user", "content": task}]})

    side = title("Find the file.")
    assert book.identify("chat", side, caller, "a", lambda _key: False) is run
    assert book.tool_records(run, side, 3) == []  # (its call is still pending)
    answer = wire.read_response(json.loads(json.dumps(completion(
        "small", "chatcmpl-2", Step(text="Finding the file"), {}))))
    record = book.call_record(run, side, answer, answer.calls, 3, 4)
    assert not record.final_answer and run.handed == 1 and len(run.pending) == 1
    assert book.identify("chat", title("Find another file."), caller, "a",
                         lambda _key: False) is not run
    assert book.identify("chat", title("Find the file."), caller, "a",
                         lambda _key: True) is not run  # (its run has ended)


def test_a_plain_question_of_a_runs_own_task_is_not_its_side_request() -> None:
    """Two users of one session name asking the same first question, the second with no tools
    (a chat): its own run, not a model call of the first one's run; its answer is not that
    run's, and the call that run handed over is not taken for run by it."""
    wire, book = ChatWire(), ModelBook()
    caller = Caller(session="ses_1")
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    messages = [{"role": "system", "content": "You are an agent."},
                {"role": "user", "content": "Find the file."}]
    first = wire.read_request({"model": "m", "tools": tools, "messages": messages})
    run = book.identify("chat", first, caller, "a", lambda _key: False)
    seen = wire.read_response(json.loads(json.dumps(completion(
        "m", "chatcmpl-1", Step(tool_calls=(ToolCall("bash", {"command": "ls"}),)), {}))))
    book.call_record(run, first, seen, seen.calls, 1, 2)
    chat = wire.read_request({"model": "m", "messages": messages})
    other = book.identify("chat", chat, caller, "a", lambda _key: False)
    assert other is not run and len(run.pending) == 1


def test_a_plain_question_before_a_task_of_the_same_words_is_no_side_request() -> None:
    """A conversation of a session its client names that begins, offering no tools, with the
    question the session's next conversation (tools offered) begins with (an eval harness's
    sample asked plainly, then to an agent): two runs; the first quoted nothing, it asked
    (a side request quotes the task in a message after its own first)."""
    wire, book = ChatWire(), ModelBook()
    caller = Caller(session="ses_1")
    plain = wire.read_request({"model": "small", "messages": [
        {"role": "user", "content": "Find the file."}]})
    asked = book.identify("chat", plain, caller, "a", lambda _key: False)
    seen = wire.read_response(json.loads(json.dumps(completion(
        "small", "chatcmpl-1", Step(text="It is in /tmp."), {}))))
    book.call_record(asked, plain, seen, seen.calls, 1, 2)
    book.settle(asked)
    task = wire.read_request({"model": "m", "tools": [
        {"type": "function", "function": {"name": "bash", "parameters": {}}}],
        "messages": [{"role": "system", "content": "You are an agent."},
                     {"role": "user", "content": "Find the file."}]})
    agent = book.identify("chat", task, caller, "b", lambda _key: True)
    assert agent is not asked and not agent.going_on


def test_each_invocation_of_a_side_requesting_agent_is_one_run() -> None:
    """The side request's prompt is the same every time, and so may the task be: a second
    invocation (another session) is one run of its own all the same, its title in it."""
    wire, book = ChatWire(), ModelBook()
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    runs = []
    for session in ("ses_1", "ses_2"):
        caller = Caller(session=session)
        side = wire.read_request({"model": "small", "messages": [
            {"role": "system", "content": "You are a title generator."},
            {"role": "user", "content": "Generate a title for this conversation:\n"},
            {"role": "user", "content": "Find the file."}]})
        titled = book.identify("chat", side, caller, "a", lambda _key: True)
        book.settle(titled)
        first = wire.read_request({"model": "m", "tools": tools, "messages": [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Find the file."}]})
        run = book.identify("chat", first, caller, "a", lambda _key: True)
        assert run is titled, session
        runs.append(run)
    assert runs[0] is not runs[1]


def crush_title(task: str) -> dict[str, Any]:
    """Crush's title request (its source, internal/agent/agent.go ``GenerateTitle``): its own
    system prompt, one user message wrapping the task in its instruction, no tools."""
    return {"model": "small", "max_tokens": 40, "messages": [
        {"role": "system", "content": "You will generate a short title based on the first "
                                      "message a user begins a conversation with.\n /no_think"},
        {"role": "user", "content": "Generate a concise title for the following content:\n\n"
                                    f"{task}\n <think>\n\n</think>"}]}


CRUSH_REMINDER = ("<system_reminder>This is a reminder that your todo list is currently "
                  "empty.</system_reminder>")


@pytest.mark.parametrize("reminder", [True, False], ids=["reminder-first", "task-alone"])
@pytest.mark.parametrize("title_first", [True, False], ids=["title-first", "task-first"])
def test_a_title_that_wraps_the_task_in_its_prompt_is_a_side_request(
        title_first: bool, reminder: bool) -> None:
    """Crush asks its small model for the session's title in one message that quotes the task
    on lines of its own within its instruction, sent as the task's first request goes out
    (either may come first), both naming the session (``x-session-id``): a model call of the
    task's run, not a run of its own. Its main agent's conversation begins with its todo
    list's reminder, the task the second message: quoted all the same."""
    wire, book = ChatWire(), ModelBook()
    caller = Caller(session="1f0c2e")
    task = "Find the file\n  named notes.txt."
    first = wire.read_request({"model": "m", "tools": [
        {"type": "function", "function": {"name": "bash", "parameters": {}}}], "messages": [
        {"role": "system", "content": "You are Crush."},
        *([{"role": "user", "content": CRUSH_REMINDER}] if reminder else []),
        {"role": "user", "content": task}]})
    side = wire.read_request(crush_title(task))
    if title_first:
        titled = book.identify("chat", side, caller, "a", lambda _key: False)
        run = book.identify("chat", first, caller, "a", lambda _key: False)
        assert run is titled and run.side is None and run.side_lines == ()
    else:
        run = book.identify("chat", first, caller, "a", lambda _key: False)
        assert book.identify("chat", side, caller, "a", lambda _key: False) is run
    assert is_side(run, side)


@pytest.mark.parametrize("quoted", [
    "Find the other file.",  # another task
    "Title: Find the file.",  # the task's words within a line of the prompt's
    "Find the file. And another.",
], ids=["another-task", "within-a-line", "more-on-its-line"])
@pytest.mark.parametrize("title_first", [True, False], ids=["title-first", "task-first"])
def test_a_prompt_that_quotes_not_the_task_on_lines_of_its_own_is_no_side_request(
        quoted: str, title_first: bool) -> None:
    wire, book = ChatWire(), ModelBook()
    caller = Caller(session="1f0c2e")
    first = wire.read_request({"model": "m", "tools": [
        {"type": "function", "function": {"name": "bash", "parameters": {}}}], "messages": [
        {"role": "system", "content": "You are Crush."},
        {"role": "user", "content": "Find the file."}]})
    side = wire.read_request({"model": "small", "messages": [
        {"role": "system", "content": "Titles."},
        {"role": "user", "content": f"Generate a concise title for:\n\n{quoted}\n"}]})
    if title_first:
        titled = book.identify("chat", side, caller, "a", lambda _key: False)
        assert book.identify("chat", first, caller, "a", lambda _key: False) is not titled
    else:
        run = book.identify("chat", first, caller, "a", lambda _key: False)
        assert book.identify("chat", side, caller, "a", lambda _key: False) is not run


@pytest.mark.parametrize("title_first", [True, False], ids=["title-first", "task-first"])
def test_a_responses_title_of_input_text_parts_is_a_side_request(title_first: bool) -> None:
    """The same on the Responses API, each message's content a list of ``input_text`` parts
    (fantasy's, Crush's engine, for OpenAI's model names): what the task's message says is
    its parts' text, not their JSON."""
    wire, book = ResponsesWire(), ModelBook()
    caller = Caller(session="1f0c2e")

    def said(text: str) -> list[dict[str, str]]:
        return [{"type": "input_text", "text": text}]

    first = wire.read_request({"model": "gpt-5", "tools": [
        {"type": "function", "name": "bash", "parameters": {}}], "input": [
        {"role": "developer", "content": "You are Crush."},
        {"role": "user", "content": said("Find the file.")}]})
    title = crush_title("Find the file.")
    side = wire.read_request({"model": "gpt-5-mini", "input": [
        {"role": "system", "content": title["messages"][0]["content"]},
        {"role": "user", "content": said(title["messages"][1]["content"])}]})
    assert first.anchor_text == "Find the file."
    if title_first:
        titled = book.identify("responses", side, caller, "a", lambda _key: False)
        assert book.identify("responses", first, caller, "a", lambda _key: False) is titled
    else:
        run = book.identify("responses", first, caller, "a", lambda _key: False)
        assert book.identify("responses", side, caller, "a", lambda _key: False) is run


@pytest.mark.parametrize("handed", [True, False], ids=["its-task", "another-task"])
def test_a_sub_agent_whose_task_a_tool_call_handed_over_is_a_child_run(handed: bool) -> None:
    """Crush's ``agent`` tool runs a sub-agent in a session of its own (``x-session-id`` names
    it, nothing names its caller): its conversation's first request, offering tools, begins
    with the ``prompt`` its caller's tool call handed over, which still waits for its result:
    a child run of the caller's run. Another task, or once that call has its result: a run of
    its own."""
    wire, book = ChatWire(), ModelBook()
    tools = [{"type": "function", "function": {"name": "view", "parameters": {}}}]
    prompt = "Look for notes.txt in this directory and say what it holds."
    first = wire.read_request({"model": "m", "tools": tools, "messages": [
        {"role": "user", "content": CRUSH_REMINDER}, {"role": "user", "content": "Find it."}]})
    caller = book.identify("chat", first, Caller(session="aa"), "a", lambda _key: False)
    seen = wire.read_response(json.loads(json.dumps(completion(
        "m", "chatcmpl-1", Step(tool_calls=(ToolCall("agent", {"prompt": prompt}),)), {}))))
    book.call_record(caller, first, seen, seen.calls, 1, 2)
    book.settle(caller)
    asked = prompt if handed else "Look for other.txt in this directory and say what it holds."
    sub = book.identify("chat", wire.read_request({"model": "m", "tools": tools, "messages": [
        {"role": "system", "content": "You are a sub-agent."},
        {"role": "user", "content": asked}]}), Caller(session="bb"), "a", lambda _key: False)
    assert sub is not caller and sub.parent == (caller.key if handed else None)
    if handed:  # one child a call: its conversation begun again is, another conversation not
        assert book.identify("chat", wire.read_request({"model": "m", "tools": tools,
            "messages": [{"role": "system", "content": "You are a sub-agent."},
                         {"role": "user", "content": asked}]}), Caller(session="bb"), "a",
            lambda _key: False).parent == caller.key
        second = book.identify("chat", wire.read_request({"model": "m", "tools": tools,
            "messages": [{"role": "system", "content": "You are a reviewer."},
                         {"role": "user", "content": asked}]}), Caller(session="dd"), "a",
            lambda _key: False)
        assert second not in (sub, caller) and second.parent is None
    # (answered, the caller's call has its result: a later run with that task is no child)
    [call_id] = caller.pending
    done = wire.read_request({"model": "m", "tools": tools, "messages": [
        {"role": "user", "content": CRUSH_REMINDER}, {"role": "user", "content": "Find it."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type":
            "function", "function": {"name": "agent", "arguments": json.dumps(
                {"prompt": prompt})}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "It holds a list."}]})
    assert book.identify("chat", done, Caller(session="aa"), "a", lambda _key: False) is caller
    book.tool_records(caller, done, 3)
    later = book.identify("chat", wire.read_request({"model": "m", "tools": tools, "messages": [
        {"role": "system", "content": "You are another agent."},
        {"role": "user", "content": prompt}]}), Caller(session="cc"), "a", lambda _key: False)
    assert later.parent is None


def test_a_first_request_that_may_be_a_sub_agents_books_the_calls_that_handed_tools() -> None:
    """A conversation's first request that offers tools and begins with a task long enough to
    be a tool call's argument may be a sub-agent's whose caller's call is still unbooked (the
    compiled relay holds ended calls): every call of its agent that handed tool calls over, or
    was not read yet, is booked first; one that handed none, another agent's, or a request too
    short, books nothing."""
    book = ModelBook()
    state = book.identify("chat", chat_request(), Caller(), "a", lambda _key: False)
    held = [Unbooked(state, "r1", frozenset({"c1"})), Unbooked(state, "r2", frozenset()),
            Unbooked(state)]
    sub = ChatWire().read_request({"model": "m", "tools": [1], "messages": [
        {"role": "user", "content": "Look for notes.txt in this directory."}]})
    assert book.unbooked_of("chat", sub, Caller(session="bb"), "a", held) == [0, 2]
    assert book.unbooked_of("chat", sub, Caller(session="bb", subagent="x"), "a", held) == []
    assert book.unbooked_of("chat", sub, Caller(session="bb"), "z", held) == []  # (another's)
    short = ChatWire().read_request({"model": "m", "tools": [1], "messages": [
        {"role": "user", "content": "Look."}]})
    assert book.unbooked_of("chat", short, Caller(), "z", held) == []


def test_a_long_task_is_quoted_by_its_start() -> None:
    """A task longer than the lines kept of it (``MAX_QUOTE_CHARS``): a title request that
    quotes it whole is its side request; the bounds hold (what a run keeps of it)."""
    wire, book = ChatWire(), ModelBook()
    caller = Caller(session="1f0c2e")
    task = "\n".join(f"Step {i}: look in directory number {i} for the file." for i in range(200))
    first = wire.read_request({"model": "m", "tools": [
        {"type": "function", "function": {"name": "bash", "parameters": {}}}], "messages": [
        {"role": "user", "content": task}]})
    run = book.identify("chat", first, caller, "a", lambda _key: False)
    assert [len(lines) for lines in run.task_lines] == [MAX_QUOTE_CHARS + 1]  # (cut)
    side = wire.read_request(crush_title(task))
    assert book.identify("chat", side, caller, "a", lambda _key: False) is run


@pytest.mark.parametrize("case", ["another-agent", "same-task", "another-call"])
def test_a_conversation_that_begins_as_a_tool_argument_is_no_child_of_an_unrelated_run(
        case: str) -> None:
    """A conversation whose first request begins with a tool call's text argument is a child
    of that call's run only when it may be that call's sub-agent: of the same agent, while
    that very call waits (another call of the run, handed later, started no such sub-agent),
    and not another invocation of the caller's own task (the same task run twice at once, the
    first passing its task to a tool: each its own run, not a child run grouped with the
    first for loops across agents)."""
    wire, book = ChatWire(), ModelBook()
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    task = "Summarise the file README.md in three lines."
    first = wire.read_request({"model": "m", "tools": tools, "messages": [
        {"role": "user", "content": task}]})
    caller = book.identify("chat", first, Caller(), "a", lambda _key: False)
    argument = task if case == "same-task" else "summarise the file README.md"
    seen = wire.read_response(json.loads(json.dumps(completion(
        "m", "chatcmpl-1", Step(tool_calls=(ToolCall("search", {"query": argument}),)), {}))))
    book.call_record(caller, first, seen, seen.calls, 1, 2)
    book.settle(caller)
    if case == "another-call":  # (the call answered, the run hands another and waits)
        [call_id] = caller.pending
        done = wire.read_request({"model": "m", "tools": tools, "messages": [
            {"role": "user", "content": task},
            {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type":
                "function", "function": {"name": "search", "arguments": json.dumps(
                    {"query": argument})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "No README.md here."}]})
        assert book.identify("chat", done, Caller(), "a", lambda _key: False) is caller
        book.tool_records(caller, done, 3)
        seen = wire.read_response(json.loads(json.dumps(completion(
            "m", "chatcmpl-2", Step(tool_calls=(ToolCall("search", {"query": "readme"}),)),
            {}))))
        book.call_record(caller, done, seen, seen.calls, 3, 4)
        book.settle(caller)
        assert caller.pending
    other = book.identify("chat", wire.read_request({"model": "m", "tools": tools, "messages": [
        {"role": "user", "content": argument}]}), Caller(),
        "b" if case == "another-agent" else "a", lambda _key: False)
    assert other is not caller and other.parent is None


def test_a_request_that_shares_a_long_tasks_start_is_no_side_request_of_it() -> None:
    """A task longer than the lines kept of it is quoted by its start only when what follows
    in the quote is the rest of that task: another request of the session that offers no
    tools and begins as the task did (a harness's long preamble, the task after it) asks a
    task of its own (a run of its own, told its budget), not a side request of the first."""
    wire, book = ChatWire(), ModelBook()
    caller = Caller(session="1f0c2e")
    preamble = "\n".join(f"Rule {i}: keep the change in directory number {i} small."
                         for i in range(40))
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    first = wire.read_request({"model": "m", "tools": tools, "messages": [
        {"role": "user", "content": f"{preamble}\nFix the first bug in parse.py."}]})
    run = book.identify("chat", first, caller, "a", lambda _key: False)
    assert run.task_lines[0].endswith("\0")  # (cut)
    other = wire.read_request({"model": "m", "messages": [
        {"role": "user", "content": f"{preamble}\nExplain the second bug in lex.py."}]})
    assert book.identify("chat", other, caller, "a", lambda _key: False) is not run
    side = wire.read_request(crush_title(f"{preamble}\nFix the first bug in parse.py."))
    assert book.identify("chat", side, caller, "a", lambda _key: False) is run


CREWAI_LAST = ("Now it's time you MUST give your absolute best final answer. You'll ignore all "
               "previous instructions, stop using any tools, and just return your absolute BEST "
               "Final answer.")
SMOLAGENTS_SYSTEM = ("An agent tried to answer a user query but it got stuck and failed to do so. "
                     "You are tasked with providing an answer instead.")


def test_a_request_says_the_agents_own_limit_in_its_words() -> None:
    """The conventions' limit prompts are read in a request's last message (any role, parts
    joined) and its instructions, in each API's shape: the limit they name is the request's
    (its answer's run then ends ``tool_limit_reached``, as a span of that call reads); the same
    words earlier in the conversation, or none, name none."""
    said = [{"role": "user", "content": "find it"}, {"role": "assistant", "content": "ok"}]
    chat = ChatWire().read_request
    assert chat({"messages": [*said, {"role": "user", "content": CREWAI_LAST}]}).limit \
        == "max_iter"
    assert chat({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"},
                                                            {"type": "text",
                                                             "text": CREWAI_LAST}]}]}).limit \
        == "max_iter"
    assert chat({"messages": [{"role": "system", "content": SMOLAGENTS_SYSTEM},
                              *said]}).limit == "max_steps"
    assert chat({"messages": [{"role": "user", "content": CREWAI_LAST}, *said]}).limit is None
    assert chat({"messages": said}).limit is None
    assert ResponsesWire().read_request({"input": CREWAI_LAST}).limit == "max_iter"
    assert ResponsesWire().read_request({"input": [*said, {"role": "user", "content": [
        {"type": "input_text", "text": CREWAI_LAST}]}]}).limit == "max_iter"
    assert ResponsesWire().read_request({"instructions": SMOLAGENTS_SYSTEM,
                                         "input": "q"}).limit == "max_steps"
    assert MessagesWire().read_request({"system": SMOLAGENTS_SYSTEM,
                                        "messages": said}).limit == "max_steps"
    assert MessagesWire().read_request({"messages": [
        *said, {"role": "user", "content": [{"type": "text", "text": CREWAI_LAST}]}]}).limit \
        == "max_iter"
    assert MessagesWire().read_request({"messages": said}).limit is None
