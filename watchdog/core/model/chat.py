"""OpenAI Chat Completions (``POST /v1/chat/completions``): read, observe, steer, answer.

The instructions the model reads are the system (or developer) message; a note goes into the
first one, or a system message is put first. Tools are withdrawn with ``tool_choice: "none"``,
their definitions kept so the history's tool calls stay valid — unless the request offers a
final-answer tool: then ``tool_choice`` names it and its definition is the only one left, so an
agent that takes only tool calls gets its report as that call.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from watchdog.core.model.failure import looks_failed
from watchdog.core.model.steer import answer_tool_offered, answer_tool_prompt, is_answer_tool
from watchdog.core.model.wire import (
    MAX_TOOL_CALLS_SEEN,
    Event,
    Observation,
    Request,
    ToolCall,
    ToolResult,
    anchor_of,
    append_text,
    clipped,
    json_data,
    judged_data,
    plain_content,
    request_hash,
    sse,
    text_of,
    token,
)

INSTRUCTION_ROLES = ("system", "developer")


class ChatWire:
    api = "chat"

    def read_request(self, body: dict[str, Any]) -> Request:
        messages = body.get("messages")
        if not isinstance(messages, list):
            messages = []
        model = body.get("model")
        instructions: list[str] = []
        anchor = ""
        last_answer = -1
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                continue
            role = message.get("role")
            if role in INSTRUCTION_ROLES:
                instructions.append(text_of(message.get("content")))
            elif role == "user" and not anchor:
                anchor = anchor_of(message.get("content"))
            elif role == "assistant":
                last_answer = index
        results: list[ToolResult] = []
        said: list[str] = []
        for message in messages[last_answer + 1:]:
            if not isinstance(message, dict) or len(results) + len(said) >= MAX_TOOL_CALLS_SEEN:
                continue
            if message.get("role") == "tool":
                text = text_of(message.get("content"))
                results.append(ToolResult(str(message.get("tool_call_id") or ""), text,
                                          looks_failed(text)))
            elif message.get("role") not in INSTRUCTION_ROLES:
                said.append(text_of(message.get("content")))
        last = messages[-1] if messages else None
        options = body.get("stream_options")
        return Request(
            model=model if isinstance(model, str) else "",
            stream=body.get("stream") is True,
            has_tools=bool(body.get("tools")),
            instructions="\n".join(instructions),
            anchor=anchor,
            messages=len(messages),
            last_is_user=isinstance(last, dict) and last.get("role") == "user",
            results=results,
            said=said,
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
            input_hash=request_hash(messages))

    def add_note(self, body: dict[str, Any], note: str) -> dict[str, Any]:
        messages = body.get("messages")
        messages = list(messages) if isinstance(messages, list) else []
        for index, message in enumerate(messages):
            if isinstance(message, dict) and message.get("role") in INSTRUCTION_ROLES:
                content = message.get("content")
                if isinstance(content, list):
                    content = [*content, {"type": "text", "text": note}]
                else:
                    content = append_text(content if isinstance(content, str) else "", note)
                messages[index] = {**message, "content": content}
                break
        else:
            messages.insert(0, {"role": "system", "content": note})
        return {**body, "messages": messages}

    def withdraw_tools(self, body: dict[str, Any], prompt: str) -> dict[str, Any]:
        return withdraw_function_tools(
            body, prompt, self.add_note,
            lambda name: {"type": "function", "function": {"name": name}})

    def ask_usage(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """``stream_options.include_usage`` set on a streamed request that does not ask: the
        upstream then ends the stream with a usage-only chunk (:func:`usage_only`), which the
        relay reads and leaves out, so the client gets the stream it asked for."""
        options = body.get("stream_options")
        if body.get("stream") is not True or not isinstance(options, dict | None) or (
                options is not None and options.get("include_usage") is True):
            return None  # (stream_options of another type: the upstream's to refuse)
        return {**body, "stream_options": {**(options or {}), "include_usage": True}}

    def read_response(self, body: dict[str, Any]) -> Observation:
        seen = Observation(complete=True)
        if isinstance(body.get("id"), str):
            seen.response_id = body["id"]
        if isinstance(body.get("model"), str) and body["model"]:
            seen.model = body["model"][:200]
        _usage(seen, body.get("usage"))
        choices = body.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            choice = choices[0]
            finish = choice.get("finish_reason")
            seen.finish_reason = finish if isinstance(finish, str) else None
            message = choice.get("message")
            if isinstance(message, dict):
                seen.text = clipped(text_of(message.get("content")))
                calls = message.get("tool_calls")
                for call in calls[:MAX_TOOL_CALLS_SEEN] if isinstance(calls, list) else ():
                    if isinstance(call, dict):
                        function = _callee(call)
                        seen.calls.append(ToolCall(str(call.get("id") or ""),
                                                   str(function.get("name") or ""),
                                                   str(function.get("arguments")
                                                       or function.get("input") or "")))
        return seen

    def accumulator(self) -> ChatAccumulator:
        return ChatAccumulator()

    def trim(self, body: dict[str, Any], keep: int) -> bool:
        """Leaves the first ``keep`` tool calls of each choice, and its final-answer calls."""
        changed = False
        choices = body.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                continue
            calls = message.get("tool_calls")
            if not isinstance(calls, list):
                continue
            kept, work = [], 0
            for call in calls:
                if is_answer_tool(_name_of(call)):
                    kept.append(call)
                elif work < keep:
                    kept.append(call)
                    work += 1
            if len(kept) == len(calls):
                continue
            changed = True
            if kept:
                message["tool_calls"] = kept
            else:
                del message["tool_calls"]
                if choice.get("finish_reason") == "tool_calls":
                    choice["finish_reason"] = "stop"
        return changed

    def stream_trimmer(self, keep: int) -> ChatTrimmer:
        return ChatTrimmer(keep)

    def answer(self, model: str, text: str, request: Request, now: float) -> dict[str, Any]:
        return {"id": _answer_id(), "object": "chat.completion", "created": int(now),
                "model": model, "choices": [{
                    "index": 0, "message": {"role": "assistant", "content": text,
                                            "refusal": None},
                    "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

    def answer_stream(self, model: str, text: str, request: Request, now: float) -> bytes:
        answer_id, created = _answer_id(), int(now)

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return sse({"id": answer_id, "object": "chat.completion.chunk", "created": created,
                        "model": model, "choices": [{"index": 0, "delta": delta,
                                                     "finish_reason": finish,
                                                     "logprobs": None}]})

        parts = [chunk({"role": "assistant", "content": ""}), chunk({"content": text}),
                 chunk({}, "stop")]
        if request.include_usage:
            parts.append(sse({"id": answer_id, "object": "chat.completion.chunk",
                              "created": created, "model": model, "choices": [],
                              "usage": {"prompt_tokens": 0, "completion_tokens": 0,
                                        "total_tokens": 0}}))
        parts.append(sse("[DONE]"))
        return b"".join(parts)

    def error(self, status: int, code: str, message: str) -> dict[str, Any]:
        kind = "invalid_request_error" if status < 500 else "api_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _answer_id() -> str:
    return "chatcmpl-watchdog" + uuid.uuid4().hex[:20]


def withdraw_function_tools(body: dict[str, Any], prompt: str,
                            add_note: Callable[[dict[str, Any], str], dict[str, Any]],
                            forced: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """The budget's last request, for the OpenAI APIs (Chat Completions, Responses): the report
    instruction, and the tools withdrawn (``tool_choice: none``, the definitions kept) — or,
    when an answer tool is offered, only that tool left and forced (``forced(name)``)."""
    tools = body.get("tools")
    tools = tools if isinstance(tools, list) else []
    answer = answer_tool_offered(function_name(tool) for tool in tools)
    if answer is not None:
        edited = add_note(body, answer_tool_prompt(prompt, answer))
        edited["tools"] = [tool for tool in tools if function_name(tool) == answer][:1]
        edited["tool_choice"] = forced(answer)
    else:
        edited = add_note(body, prompt)
        if tools:
            edited["tool_choice"] = "none"
    if tools:
        edited.pop("parallel_tool_calls", None)
    return edited


def function_name(tool: object) -> object:
    """A function tool's name: Chat Completions' shape (``function.name``) or the Responses
    API's flat one (``name``); None: none."""
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name")


def _name_of(item: object) -> object:
    """The function name of a tool definition or a tool call (None: none)."""
    function = item.get("function") if isinstance(item, dict) else None
    return function.get("name") if isinstance(function, dict) else None


def _usage(seen: Observation, usage: object) -> None:
    if isinstance(usage, dict):
        seen.input_tokens = token(usage.get("prompt_tokens"))
        seen.output_tokens = token(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            seen.cache_read_tokens = min(token(details.get("cached_tokens")), seen.input_tokens)


class ChatAccumulator:
    def __init__(self) -> None:
        self.observation = Observation()
        self._calls: dict[int, ToolCall] = {}
        self._text: list[str] = []
        self._size = 0

    def feed(self, event: Event) -> None:
        seen = self.observation
        if event.data == "[DONE]":
            seen.complete = True
            return
        quick = plain_content(event.data) if seen.response_id is not None else None
        if quick is not None:  # a text delta and nothing else: not parsed
            if quick and self._size < 64 * 1024:
                self._text.append(quick)
                self._size += len(quick)
                seen.text = clipped("".join(self._text))
            return
        data = json_data(event)
        if data is not None:
            self.feed_object(data)

    def feed_object(self, data: dict[str, Any]) -> None:
        seen = self.observation
        if seen.response_id is None and isinstance(data.get("id"), str):
            seen.response_id = data["id"]
        if isinstance(data.get("model"), str) and data["model"]:
            seen.model = data["model"][:200]
        if data.get("usage"):
            _usage(seen, data["usage"])
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        if isinstance(choice.get("finish_reason"), str):
            seen.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        content = delta.get("content")
        if isinstance(content, str) and content and self._size < 64 * 1024:
            self._text.append(content)
            self._size += len(content)
            seen.text = clipped("".join(self._text))
        calls = delta.get("tool_calls")
        for part in calls if isinstance(calls, list) else ():
            if not isinstance(part, dict) or not isinstance(part.get("index"), int):
                continue
            index = part["index"]
            call = self._calls.get(index)
            if call is None:
                if len(self._calls) >= MAX_TOOL_CALLS_SEEN:
                    continue
                call = self._calls[index] = ToolCall("", "", "")
                seen.calls.append(call)
            if isinstance(part.get("id"), str):
                call.call_id = part["id"]
            function = _callee(part)
            if isinstance(function.get("name"), str):
                call.name += function["name"]
            given = function.get("arguments", function.get("input"))
            if isinstance(given, str) and len(call.arguments) < 65536:
                call.arguments += given


def _callee(call: dict[str, Any]) -> dict[str, Any]:
    """What a tool call calls: a function (``function``: name, arguments) or a custom tool
    (``custom``: name, input)."""
    for key in ("function", "custom"):
        callee = call.get(key)
        if isinstance(callee, dict):
            return callee
    return {}


def usage_only(event: Event) -> bool:
    """Whether ``event`` is the usage-only chunk that ends a stream asked for usage (no
    choices; a usage); :class:`Unjudged` for one that cannot be judged."""
    data = judged_data(event)
    return data is not None and data.get("choices") == [] and isinstance(data.get("usage"),
                                                                        dict)


class ChatTrimmer:
    """Drops the tool-call deltas of calls past ``keep`` (final-answer calls are always
    kept; a call is judged by its first delta, which names it), numbers the kept ones without
    gaps, and says "stop" instead of "tool_calls" when none is left; an event left with
    nothing to say is dropped."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._slots: dict[int, int | None] = {}  # the upstream's index -> the one handed on
        self._work = 0  # calls (not final-answer ones) seen
        self._kept = 0

    def _slot(self, call: dict[str, Any]) -> int | None:
        index = call["index"]
        if index in self._slots:
            return self._slots[index]
        if len(self._slots) >= MAX_TOOL_CALLS_SEEN:  # more calls than are read: dropped
            return None
        slot: int | None = None
        if is_answer_tool(_name_of(call)):
            slot = self._kept
        elif self._work < self.keep:
            slot = self._kept
            self._work += 1
        else:
            self._work += 1
        if slot is not None:
            self._kept += 1
        self._slots[index] = slot
        return slot

    def rewrite(self, event: Event) -> bytes:
        data = judged_data(event)
        choices = data.get("choices") if data is not None else None
        if data is None or not isinstance(choices, list):
            return event.raw
        changed = empty = False
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("tool_calls"), list):
                calls = delta["tool_calls"]
                kept, moved = [], False
                for call in calls:
                    if not (isinstance(call, dict) and isinstance(call.get("index"), int)):
                        kept.append(call)
                        continue
                    slot = self._slot(call)
                    if slot is None:
                        moved = True
                    elif slot != call["index"]:
                        kept.append({**call, "index": slot})
                        moved = True
                    else:
                        kept.append(call)
                if moved:
                    changed = True
                    if kept:
                        delta["tool_calls"] = kept
                    else:
                        del delta["tool_calls"]
                        empty = not any(value for value in delta.values()) \
                            and choice.get("finish_reason") is None
            if self._kept == 0 and choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
                changed = True
        if not changed:
            return event.raw
        if empty and len(choices) == 1 and not data.get("usage"):
            return b""
        return sse(data)
