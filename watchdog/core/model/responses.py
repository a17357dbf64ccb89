"""OpenAI Responses (``POST /v1/responses``): read, observe, steer, answer.

The instructions the model reads are ``instructions`` (and system/developer input items); tools
are withdrawn with ``tool_choice: "none"`` — or, when the request offers a final-answer tool,
``tool_choice`` names it and its definition is the only one left. A tool call is an output item
the agent carries out itself (:data:`CALL_ITEMS`: a function's, a custom tool's, and the
built-in tools that run at the client: computer use, the shell, apply_patch); tools the server
runs (web search, file search, code interpreter, MCP) are not the agent's calls. Tool results
are the ``*_output`` items after the model's last call items; a conversation that the server
keeps (``previous_response_id``, or ``conversation``: its id names the conversation) sends only
those.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Container
from typing import Any

from watchdog.core.model.chat import withdraw_function_tools
from watchdog.core.model.failure import looks_failed
from watchdog.core.model.steer import answers, answers_offered
from watchdog.core.model.wire import (
    CONVERSATION_ANCHOR,
    FORCED_FORMAT,
    MAX_ANSWERS_SEEN,
    MAX_TOOL_CALLS_SEEN,
    Event,
    Observation,
    Request,
    ToolCall,
    ToolResult,
    Unjudged,
    anchor_of,
    announced_limit,
    append_text,
    can_call,
    clipped,
    closed_up,
    dumps,
    forced_function,
    json_data,
    json_format,
    judged_data,
    offered_names,
    request_hash,
    sse,
    text_of,
    token,
    unreadable,
)

DONE_EVENTS = ("response.completed", "response.incomplete", "response.failed")
# The output items the agent carries out, and the input items that bring each one's result
CALL_ITEMS: dict[str, str] = {
    "function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output", "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output", "apply_patch_call": "apply_patch_call_output"}
RESULT_ITEMS = frozenset(CALL_ITEMS.values())
MAX_CONVERSATION_ID = 256
# what a built-in tool's call is named (a function's and a custom tool's calls name theirs)
BUILT_IN_TOOLS = {"computer_call": "computer", "local_shell_call": "local_shell",
                  "shell_call": "shell", "apply_patch_call": "apply_patch"}
# where each kind of call item holds its input
_INPUT_KEYS = ("arguments", "input", "action", "operation")


def conversation_of(body: dict[str, Any]) -> str | None:
    """The id of the conversation the server keeps that a request goes on with (its
    ``conversation``: the id, or an object with it), or None. Such a request sends only the
    new items (tool outputs, a new user message): the id, not a first user message, is the
    conversation's identity."""
    given = body.get("conversation")
    if isinstance(given, dict):
        given = given.get("id")
    return given[:MAX_CONVERSATION_ID] if isinstance(given, str) and given else None


def is_call(item: dict[str, Any], answer_tool: str | None = None,
            offered: Container[str] | None = None) -> bool:
    """Whether an output item is a tool call the agent carries out (answers' aside,
    :func:`~watchdog.core.model.steer.answers`: they end the run rather than spend its
    budget)."""
    return item.get("type") in CALL_ITEMS and not answers(item.get("name"), answer_tool, offered)


def call_of(item: dict[str, Any]) -> ToolCall:
    """The tool call an output item of :data:`CALL_ITEMS` asks for."""
    kind = str(item.get("type"))
    name = BUILT_IN_TOOLS.get(kind) or str(item.get("name") or "")
    given = next((item[key] for key in _INPUT_KEYS if item.get(key) is not None), "")
    return ToolCall(str(item.get("call_id") or ""), name,
                    given if isinstance(given, str) else json.dumps(given, sort_keys=True))


class ResponsesWire:
    api = "responses"

    def read_request(self, body: dict[str, Any]) -> Request:
        model = body.get("model")
        items = body.get("input")
        instructions = [body["instructions"]] if isinstance(body.get("instructions"),
                                                             str) else []
        anchor = anchor_text = items if isinstance(items, str) else ""
        results: list[ToolResult] = []
        said: list[str] = []
        count, last_is_user = 1, isinstance(items, str)
        last_answer: object = None
        answers: list[object] = []
        opening: object = None  # (the model's message before any user message: Request)
        if isinstance(items, list):
            count = len(items)
            for item in items:
                if not isinstance(item, dict):
                    continue
                role, kind = item.get("role"), item.get("type")
                if role in ("system", "developer"):
                    instructions.append(text_of(item.get("content")))
                elif role == "user" and not anchor:
                    anchor = anchor_of(item.get("content"))
                    anchor_text = text_of(item.get("content"))
                if role == "assistant" or kind in CALL_ITEMS:
                    results, said = [], []
                    last_answer = item.get("content") if role == "assistant" else None
                    if role == "assistant":
                        if not answers and not anchor:
                            opening = last_answer
                        answers.append(last_answer)
                elif role == "user" and len(said) < MAX_TOOL_CALLS_SEEN:
                    said.append(text_of(item.get("content")))
                elif kind in RESULT_ITEMS and len(results) < MAX_TOOL_CALLS_SEEN:
                    output = item.get("output")
                    text = output if isinstance(output, str) else text_of(output)
                    results.append(ToolResult(str(item.get("call_id") or ""), text,
                                              looks_failed(text)
                                              or item.get("status") == "failed"))
            last = items[-1] if items else None
            last_is_user = isinstance(last, dict) and last.get("role") == "user"
        kept = conversation_of(body)
        if kept is not None:  # a conversation the server keeps is named by its id
            anchor = CONVERSATION_ANCHOR + kept
        previous = body.get("previous_response_id")
        forced = forced_function(body)
        return Request(
            model=model if isinstance(model, str) else "",
            stream=body.get("stream") is True,
            answers_offered=answers_offered(offered_names(body)),
            has_tools=can_call(body.get("tools"), body.get("tool_choice")),
            answer_format=(json_format(answer.get("format"))
                           if isinstance(answer := body.get("text"), dict) else None)
            or (FORCED_FORMAT if forced else None),
            forced=forced,
            limit=announced_limit(items[-1] if isinstance(items, list) and items else items,
                                  "\n".join(instructions)),
            instructions="\n".join(instructions),
            anchor=anchor,
            anchor_text=anchor_text,
            messages=count,
            last_is_user=last_is_user,
            results=results,
            said=said,
            previous_response_id=previous if isinstance(previous, str) and previous else None,
            kept=kept is not None or (isinstance(previous, str) and bool(previous)),
            input_hash=request_hash(items if isinstance(items, (str, list)) else None),
            last_answer=last_answer,
            answers=tuple(answers[-MAX_ANSWERS_SEEN:]),
            opening=opening,
            given_instructions=body.get("instructions"))

    def add_note(self, body: dict[str, Any], note: str) -> dict[str, Any]:
        """The note where the agent gave its instructions: in ``instructions`` when it gave
        them there (or gave none), else in its first system/developer input item (Koog's
        system prompt), so that the request's ``instructions`` stay the agent's own: the
        response echoes them, and a strict client reads them back as it sent them. A
        conversation the server keeps gets it in ``instructions`` (an item would stay in
        it). Instructions given as input items keep them, the note an item after them."""
        existing = body.get("instructions")
        items = body.get("input")
        if not (isinstance(existing, str) and existing) and isinstance(items, list) \
                and conversation_of(body) is None and not body.get("previous_response_id"):
            for index, item in enumerate(items):
                if isinstance(item, dict) and item.get("role") in ("system", "developer"):
                    noted = {**item, "content": _with_note(item.get("content"), note)}
                    return {**body, "input": [*items[:index], noted, *items[index + 1:]]}
        if isinstance(existing, list) and existing:  # input items (as a prompt's): kept
            return {**body, "instructions": [*existing, {"role": "developer", "content": note}]}
        return {**body, "instructions": append_text(
            existing if isinstance(existing, str) else "", note)}

    def withdraw_tools(self, body: dict[str, Any], prompt: str) -> dict[str, Any]:
        return withdraw_function_tools(body, prompt, self.add_note, (
            ("tools", "tool_choice", lambda name: {"type": "function", "name": name}),))

    def read_response(self, body: dict[str, Any]) -> Observation:
        seen = Observation(complete=True)
        if isinstance(body.get("id"), str):
            seen.response_id = body["id"]
        if isinstance(body.get("model"), str) and body["model"]:
            seen.model = body["model"][:200]
        usage = body.get("usage")
        if isinstance(usage, dict):
            seen.input_tokens = token(usage.get("input_tokens"))
            details = usage.get("input_tokens_details")
            if isinstance(details, dict):
                seen.cache_read_tokens = min(token(details.get("cached_tokens")),
                                             seen.input_tokens)
            seen.output_tokens = token(usage.get("output_tokens"))
        texts: list[str] = []
        output = body.get("output")
        for item in output if isinstance(output, list) else ():
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                texts.append(text_of(item.get("content")))
            elif item.get("type") in CALL_ITEMS and len(seen.calls) < MAX_TOOL_CALLS_SEEN:
                seen.calls.append(call_of(item))
        seen.text = clipped("".join(texts))
        status = body.get("status")
        seen.finish_reason = "tool_calls" if seen.calls else (
            "length" if status == "incomplete" else "stop")
        return seen

    def accumulator(self) -> ResponsesAccumulator:
        return ResponsesAccumulator(self)

    def trim(self, body: dict[str, Any], keep: int, answer_tool: str | None = None,
             offered: Container[str] | None = None) -> bool:
        output = body.get("output")
        if not isinstance(output, list):
            return False
        calls = [i for i, item in enumerate(output)
                 if isinstance(item, dict) and is_call(item, answer_tool, offered)]
        if len(calls) <= keep:
            return False
        dropped = set(calls[keep:])
        body["output"] = [item for i, item in enumerate(output) if i not in dropped]
        return True

    def ask_usage(self, body: dict[str, Any]) -> None:
        return None  # a stream's usage comes unasked

    def stream_trimmer(self, keep: int, answer_tool: str | None = None,
                       offered: Container[str] | None = None) -> ResponsesTrimmer:
        return ResponsesTrimmer(self, keep, answer_tool, offered)

    def answer(self, model: str, text: str, request: Request, now: float,
               call: ToolCall | None = None) -> dict[str, Any]:
        return _response(model, text, request.given_instructions, now, call)

    def answer_stream(self, model: str, text: str, request: Request, now: float,
                      call: ToolCall | None = None) -> bytes:
        whole = _response(model, text, request.given_instructions, now, call)
        item = whole["output"][0]
        part = item["content"][0]
        started = {**whole, "status": "in_progress", "output": []}
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"response": started}),
            ("response.in_progress", {"response": started}),
            ("response.output_item.added", {"output_index": 0,
                                            "item": {**item, "status": "in_progress",
                                                     "content": []}}),
            ("response.content_part.added", {"output_index": 0, "content_index": 0,
                                             "item_id": item["id"],
                                             "part": {**part, "text": ""}}),
            ("response.output_text.delta", {"output_index": 0, "content_index": 0,
                                            "item_id": item["id"], "delta": text}),
            ("response.output_text.done", {"output_index": 0, "content_index": 0,
                                           "item_id": item["id"], "text": text}),
            ("response.content_part.done", {"output_index": 0, "content_index": 0,
                                            "item_id": item["id"], "part": part}),
            ("response.output_item.done", {"output_index": 0, "item": item}),
        ]
        if call is not None:
            function = whole["output"][1]
            events += [
                ("response.output_item.added", {"output_index": 1, "item": {
                    **function, "arguments": "", "status": "in_progress"}}),
                ("response.function_call_arguments.delta", {
                    "output_index": 1, "item_id": function["id"], "delta": call.arguments}),
                ("response.function_call_arguments.done", {
                    "output_index": 1, "item_id": function["id"],
                    "arguments": call.arguments}),
                ("response.output_item.done", {"output_index": 1, "item": function})]
        events.append(("response.completed", {"response": whole}))
        return b"".join(sse({"type": name, "sequence_number": number, **data}, name)
                        for number, (name, data) in enumerate(events))

    def error(self, status: int, code: str, message: str) -> dict[str, Any]:
        kind = "invalid_request_error" if status < 500 else "api_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _with_note(content: object, note: str) -> object:
    """An input message's content with the note after it: a text's, a text part more in a
    list of parts, the note for anything else."""
    if isinstance(content, str):
        return append_text(content, note)
    if isinstance(content, list):
        return [*content, {"type": "input_text", "text": note}]
    return note


def _response(model: str, text: str, instructions: object, now: float,
              call: ToolCall | None = None) -> dict[str, Any]:
    """The endpoint's own answer, completed; ``instructions`` echoed as the client sent them,
    as the API echoes them (a client may read them back: Koog); ``call``: the agent's finish
    after its text."""
    output: list[dict[str, Any]] = [{
        "type": "message", "id": "msg_watchdog" + uuid.uuid4().hex[:20],
        "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]}]
    if call is not None:
        output.append({"type": "function_call", "id": "fc_watchdog" + uuid.uuid4().hex[:20],
                       "call_id": call.call_id, "name": call.name,
                       "arguments": call.arguments, "status": "completed"})
    return {"id": "resp_watchdog" + uuid.uuid4().hex[:20], "object": "response",
            "created_at": int(now), "status": "completed", "error": None,
            "incomplete_details": None, "instructions": instructions, "model": model,
            "output": output,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            # (the API's every response says its text format; strict clients, Koog's,
            # require it)
            "text": {"format": {"type": "text"}},
            "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
                      "input_tokens_details": {"cached_tokens": 0,
                                               "cache_write_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


class ResponsesAccumulator:
    def __init__(self, wire: ResponsesWire) -> None:
        self.wire = wire
        self.observation = Observation()
        self._text: list[str] = []
        self._size = 0

    def feed(self, event: Event) -> None:
        data = json_data(event)
        if data is not None:
            self.feed_object(data)
        elif unreadable(event):
            self.observation.unreadable = True

    def feed_object(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind in DONE_EVENTS and isinstance(data.get("response"), dict):
            unread = self.observation.unreadable
            self.observation = self.wire.read_response(data["response"])
            self.observation.unreadable = unread
        elif kind == "response.created" and isinstance(data.get("response"), dict):
            if isinstance(data["response"].get("id"), str):
                self.observation.response_id = data["response"]["id"]
        elif kind == "response.output_text.delta" and isinstance(data.get("delta"), str) \
                and self._size < 64 * 1024:
            self._text.append(data["delta"])
            self._size += len(data["delta"])
            self.observation.text = clipped("".join(self._text))


class ResponsesTrimmer:
    """Leaves out the events of tool call items past ``keep`` and those items from
    the final response object; the items after them and the events' ``sequence_number``
    closed up, so what is passed on is numbered without gaps."""

    def __init__(self, wire: ResponsesWire, keep: int, answer_tool: str | None = None,
                 offered: Container[str] | None = None) -> None:
        self.wire = wire
        self.keep, self.answer_tool, self.offered = keep, answer_tool, offered
        self._calls = 0
        self._dropped: set[int] = set()
        self._skipped = 0  # events left out: the later sequence numbers move down by as many

    def rewrite(self, event: Event) -> bytes:
        data = judged_data(event)
        if data is None:
            return event.raw
        kind, index = data.get("type"), data.get("output_index")
        if kind == "response.output_item.added" and isinstance(index, int):
            item = data.get("item")
            if isinstance(item, dict) and is_call(item, self.answer_tool, self.offered):
                self._calls += 1
                if self._calls > self.keep:
                    self._dropped.add(index)
        if isinstance(index, int) and index in self._dropped:
            self._skipped += 1
            return b""
        changed = False
        if kind in DONE_EVENTS and isinstance(data.get("response"), dict):
            changed = self.wire.trim(data["response"], self.keep, self.answer_tool,
                                     self.offered)
        if isinstance(index, int) and (moved := closed_up(index, self._dropped)) != index:
            data["output_index"], changed = moved, True
        sequence = data.get("sequence_number")
        if self._skipped and isinstance(sequence, int):
            data["sequence_number"], changed = sequence - self._skipped, True
        return sse(data, event.name) if changed else event.raw


# -- the instructions a response echoes --------------------------------------------------------

def echo_of(given: dict[str, Any], sent: dict[str, Any]) -> str | None:
    """The ``instructions`` the agent gave (JSON text: ``null`` for none), when the request
    sent upstream (``sent``, of the agent's ``given``) carries others (a note went there): the
    response echoes what it was sent, and the agent must get back what it sent (a client may
    read the echo: Koog takes a string there for a list). None: they are the agent's own."""
    before = given.get("instructions")
    return None if sent.get("instructions") == before else dumps(before).decode()


def restore_echo(response: dict[str, Any], echo: str) -> bool:
    """A response object's echoed ``instructions`` set back to the agent's (``echo``:
    :func:`echo_of`'s); whether that changed it."""
    if "instructions" not in response:
        return False
    given = json.loads(echo)
    if response["instructions"] == given:
        return False
    response["instructions"] = given
    return True


def restored_event(event: Event, echo: str) -> Event:
    """A stream event whose response object (``response.created``, ``.in_progress``,
    ``.completed``...) echoes the instructions: with the agent's instead (:func:`restore_echo`);
    any other event, or one that cannot be read, as it came."""
    if b'"instructions"' not in event.raw:
        return event
    try:
        data = judged_data(event)
    except Unjudged:
        return event
    response = data.get("response") if data is not None else None
    if data is None or not isinstance(response, dict) or not restore_echo(response, echo):
        return event
    return Event(sse(data, event.name), event.name, dumps(data).decode())
