"""Anthropic Messages (``POST /v1/messages``): read, observe, steer, answer.

The instructions the model reads are ``system`` (a string or a list of text blocks); tools are
withdrawn with ``tool_choice: {"type": "none"}``, their definitions kept — or, when the request
offers a final-answer tool, ``tool_choice`` names it (the definitions kept: the history's
``tool_use`` blocks stay valid; the named choice leaves no other tool to call). Tool results are the
``tool_result`` blocks of the user message after the model's ``tool_use`` blocks; ``is_error``
says a tool failed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Container
from typing import Any

from watchdog.core.model.failure import looks_failed
from watchdog.core.model.steer import (
    answer_tool_offered,
    answer_tool_prompt,
    answers,
    answers_offered,
    forced_prompt,
)
from watchdog.core.model.wire import (
    FORCED_FORMAT,
    MAX_ANSWERS_SEEN,
    MAX_TOOL_CALLS_SEEN,
    Event,
    Observation,
    Request,
    ToolCall,
    ToolResult,
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

_FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length",
           "stop_sequence": "stop", "pause_turn": "pause_turn", "refusal": "content_filter"}


def _is_result_message(message: object) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content)


def _last_calls(last: object) -> tuple[str, ...]:
    """The ids of the ``tool_use`` blocks of ``last``, the conversation's last message, when it
    is the model's answer (:attr:`Request.last_calls`)."""
    content = last.get("content") if isinstance(last, dict) \
        and last.get("role") == "assistant" else None
    if not isinstance(content, list):
        return ()
    return tuple(str(block.get("id") or "") for block in content[:MAX_TOOL_CALLS_SEEN]
                 if isinstance(block, dict) and block.get("type") == "tool_use")


class MessagesWire:
    api = "messages"

    def read_request(self, body: dict[str, Any]) -> Request:
        messages = body.get("messages")
        if not isinstance(messages, list):
            messages = []
        model = body.get("model")
        anchor = anchor_text = ""
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "user":
                anchor = anchor_of(message.get("content"))
                anchor_text = text_of(message.get("content"))
                break
        results: list[ToolResult] = []
        said: list[str] = []
        answers = [message.get("content") for message in messages
                   if isinstance(message, dict) and message.get("role") == "assistant"]
        last = messages[-1] if messages else None
        if isinstance(last, dict) and last.get("role") == "user" and _is_result_message(last):
            for block in last["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result" \
                        and len(results) < MAX_TOOL_CALLS_SEEN:
                    text = text_of(block.get("content"))
                    error = block.get("is_error") is True or looks_failed(text)
                    results.append(ToolResult(str(block.get("tool_use_id") or ""), text, error))
        elif isinstance(last, dict) and last.get("role") == "user":
            said.append(text_of(last.get("content")))
        forced = forced_function(body)
        return Request(
            model=model if isinstance(model, str) else "",
            stream=body.get("stream") is True,
            answers_offered=answers_offered(offered_names(body)),
            has_tools=can_call(body.get("tools"), body.get("tool_choice")),
            instructions=text_of(body.get("system")),
            anchor=anchor,
            anchor_text=anchor_text,
            messages=len(messages),
            last_is_user=isinstance(last, dict) and last.get("role") == "user"
            and not _is_result_message(last),
            results=results,
            said=said,
            input_hash=request_hash(messages),
            answer_format=json_format(_output_format(body))
            or (FORCED_FORMAT if forced else None),
            forced=forced,
            limit=announced_limit(last, text_of(body.get("system"))),
            last_answer=answers[-1] if answers else None,
            answers=tuple(answers[-MAX_ANSWERS_SEEN:]),
            last_calls=_last_calls(last))

    def add_note(self, body: dict[str, Any], note: str) -> dict[str, Any]:
        system = body.get("system")
        if isinstance(system, list):
            edited: object = [*system, {"type": "text", "text": note}]
        else:
            edited = append_text(system if isinstance(system, str) else "", note)
        return {**body, "system": edited}

    def withdraw_tools(self, body: dict[str, Any], prompt: str) -> dict[str, Any]:
        tools = body.get("tools")
        tools = tools if isinstance(tools, list) else []
        forced = forced_function(body)  # (an answer-shaped request: its answer's shape stays)
        answer = forced or answer_tool_offered(
            tool.get("name") for tool in tools if isinstance(tool, dict))
        if answer is not None:
            edited = self.add_note(body, forced_prompt(prompt, answer) if forced
                                   else answer_tool_prompt(prompt, answer))
            edited["tool_choice"] = {"type": "tool", "name": answer}
        else:
            edited = self.add_note(body, prompt)
            if tools:
                edited["tool_choice"] = {"type": "none"}
        return edited

    def read_response(self, body: dict[str, Any]) -> Observation:
        seen = Observation(complete=True)
        if isinstance(body.get("id"), str):
            seen.response_id = body["id"]
        if isinstance(body.get("model"), str) and body["model"]:
            seen.model = body["model"][:200]
        _usage(seen, body.get("usage"))
        stop = body.get("stop_reason")
        seen.finish_reason = _FINISH.get(stop, stop) if isinstance(stop, str) else None
        texts: list[str] = []
        content = body.get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "tool_use" and len(seen.calls) < MAX_TOOL_CALLS_SEEN:
                seen.calls.append(ToolCall(str(block.get("id") or ""),
                                           str(block.get("name") or ""),
                                           dumps(block.get("input", {})).decode()))
        seen.text = clipped("".join(texts))
        return seen

    def accumulator(self) -> MessagesAccumulator:
        return MessagesAccumulator()

    def trim(self, body: dict[str, Any], keep: int, answer_tool: str | None = None,
             offered: Container[str] | None = None) -> bool:
        content = body.get("content")
        if not isinstance(content, list):
            return False
        uses = [i for i, block in enumerate(content) if isinstance(block, dict)
                and block.get("type") == "tool_use"
                and not answers(block.get("name"), answer_tool, offered)]
        if len(uses) <= keep:
            return False
        dropped = set(uses[keep:])
        body["content"] = [block for i, block in enumerate(content) if i not in dropped]
        if not any(isinstance(block, dict) and block.get("type") == "tool_use"
                   for block in body["content"]) and body.get("stop_reason") == "tool_use":
            body["stop_reason"] = "end_turn"
        return True

    def ask_usage(self, body: dict[str, Any]) -> None:
        return None  # a stream's usage comes unasked

    def stream_trimmer(self, keep: int, answer_tool: str | None = None,
                       offered: Container[str] | None = None) -> MessagesTrimmer:
        return MessagesTrimmer(keep, answer_tool, offered)

    def answer(self, model: str, text: str, request: Request, now: float,
               call: ToolCall | None = None) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        if call is not None:
            content.append({"type": "tool_use", "id": call.call_id, "name": call.name,
                            "input": json.loads(call.arguments)})
        return {"id": _answer_id(), "type": "message", "role": "assistant", "model": model,
                "content": content, "stop_reason": "end_turn" if call is None else "tool_use",
                "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}

    def answer_stream(self, model: str, text: str, request: Request, now: float,
                      call: ToolCall | None = None) -> bytes:
        message: dict[str, Any] = {
            "id": _answer_id(), "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0}}
        parts = [
            sse({"type": "message_start", "message": message}, "message_start"),
            sse({"type": "content_block_start", "index": 0,
                 "content_block": {"type": "text", "text": ""}}, "content_block_start"),
            sse({"type": "content_block_delta", "index": 0,
                 "delta": {"type": "text_delta", "text": text}}, "content_block_delta"),
            sse({"type": "content_block_stop", "index": 0}, "content_block_stop")]
        if call is not None:
            parts += [
                sse({"type": "content_block_start", "index": 1, "content_block": {
                    "type": "tool_use", "id": call.call_id, "name": call.name, "input": {}}},
                    "content_block_start"),
                sse({"type": "content_block_delta", "index": 1, "delta": {
                    "type": "input_json_delta", "partial_json": call.arguments}},
                    "content_block_delta"),
                sse({"type": "content_block_stop", "index": 1}, "content_block_stop")]
        parts += [
            sse({"type": "message_delta", "delta": {
                "stop_reason": "end_turn" if call is None else "tool_use",
                "stop_sequence": None}, "usage": {"output_tokens": 0}}, "message_delta"),
            sse({"type": "message_stop"}, "message_stop")]
        return b"".join(parts)

    def error(self, status: int, code: str, message: str) -> dict[str, Any]:
        kind = {400: "invalid_request_error", 401: "authentication_error",
                404: "not_found_error", 413: "request_too_large", 503: "overloaded_error",
                }.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message, "code": code}}


def _answer_id() -> str:
    return "msg_watchdog" + uuid.uuid4().hex[:20]


def _usage(seen: Observation, usage: object) -> None:
    if isinstance(usage, dict):
        if "input_tokens" in usage:
            seen.cache_read_tokens = token(usage.get("cache_read_input_tokens"))
            seen.cache_write_tokens = token(usage.get("cache_creation_input_tokens"))
            seen.input_tokens = token(usage.get("input_tokens")) + seen.cache_read_tokens \
                + seen.cache_write_tokens
        if "output_tokens" in usage:
            seen.output_tokens = token(usage.get("output_tokens"))


class MessagesAccumulator:
    def __init__(self) -> None:
        self.observation = Observation()
        self._blocks: dict[int, ToolCall] = {}
        self._text: list[str] = []
        self._size = 0

    def feed(self, event: Event) -> None:
        data = json_data(event)
        if data is not None:
            self.feed_object(data)
        elif unreadable(event):
            self.observation.unreadable = True

    def feed_object(self, data: dict[str, Any]) -> None:
        seen = self.observation
        kind = data.get("type")
        if kind == "message_start" and isinstance(data.get("message"), dict):
            message = data["message"]
            if isinstance(message.get("id"), str):
                seen.response_id = message["id"]
            if isinstance(message.get("model"), str) and message["model"]:
                seen.model = message["model"][:200]
            _usage(seen, message.get("usage"))
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            block, index = data["content_block"], data.get("index")
            if block.get("type") == "tool_use" and isinstance(index, int) \
                    and len(self._blocks) < MAX_TOOL_CALLS_SEEN:
                call = ToolCall(str(block.get("id") or ""), str(block.get("name") or ""), "")
                self._blocks[index] = call
                seen.calls.append(call)
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            delta, index = data["delta"], data.get("index")
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str) \
                    and self._size < 64 * 1024:
                self._text.append(delta["text"])
                self._size += len(delta["text"])
                seen.text = clipped("".join(self._text))
            elif delta.get("type") == "input_json_delta" and isinstance(index, int) \
                    and index in self._blocks and isinstance(delta.get("partial_json"), str):
                call = self._blocks[index]
                if len(call.arguments) < 65536:
                    call.arguments += delta["partial_json"]
        elif kind == "message_delta":
            delta = data.get("delta")
            stop = delta.get("stop_reason") if isinstance(delta, dict) else None
            if isinstance(stop, str):
                seen.finish_reason = _FINISH.get(stop, stop)
            usage = data.get("usage")
            if isinstance(usage, dict) and "output_tokens" in usage:
                seen.output_tokens = token(usage["output_tokens"])
        elif kind == "message_stop":
            seen.complete = True


class MessagesTrimmer:
    """Leaves out the events of ``tool_use`` blocks past ``keep`` (they come after the text),
    closes up the index of the blocks after them (a final-answer block is kept), and says
    ``end_turn`` instead of ``tool_use`` when none is left."""

    def __init__(self, keep: int, answer_tool: str | None = None,
                 offered: Container[str] | None = None) -> None:
        self.keep, self.answer_tool, self.offered = keep, answer_tool, offered
        self._uses = 0
        self._answers = 0  # answers' tool_use blocks: always kept
        self._dropped: set[int] = set()

    def rewrite(self, event: Event) -> bytes:
        data = judged_data(event)
        if data is None:
            return event.raw
        kind, index = data.get("type"), data.get("index")
        if kind == "content_block_start" and isinstance(index, int):
            block = data.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                if answers(block.get("name"), self.answer_tool, self.offered):
                    self._answers += 1
                else:
                    self._uses += 1
                    if self._uses > self.keep:
                        self._dropped.add(index)
        if kind in ("content_block_start", "content_block_delta", "content_block_stop") \
                and isinstance(index, int):
            if index in self._dropped:
                return b""
            if (moved := closed_up(index, self._dropped)) != index:
                data["index"] = moved
                return sse(data, event.name)
        elif kind == "message_delta" and self.keep == 0 and self._dropped \
                and not self._answers:
            delta = data.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") == "tool_use":
                delta["stop_reason"] = "end_turn"
                return sse(data, event.name)
        return event.raw


def _output_format(body: dict[str, Any]) -> object:
    """A Messages request's answer format: ``output_config.format``, or the structured-outputs
    beta's ``output_format``."""
    config = body.get("output_config")
    if isinstance(config, dict) and "format" in config:
        return config["format"]
    return body.get("output_format")
