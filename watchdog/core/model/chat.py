"""OpenAI Chat Completions (``POST /v1/chat/completions``): read, observe, steer, answer.

The instructions the model reads are the system (or developer) message; a note goes into the
first one, or a system message is put first. Tools are withdrawn with ``tool_choice: "none"``,
their definitions kept so the history's tool calls stay valid — unless the request offers a
final-answer tool: then ``tool_choice`` names it and its definition is the only one left, so an
agent that takes only tool calls gets its report as that call.

The legacy shape (``functions`` offered, ``function_call`` chosen; the answer's
``message.function_call``, streamed as ``delta.function_call``; its result a ``function``
message) is read as one more tool call, by the same code: a function call is the tool call
:data:`LEGACY` of its message (it has no index), with the id :func:`function_call_id` (it has
none), which the ``function`` message answering it names too; it is trimmed as any other, and
withdrawn with ``function_call: "none"`` (the definitions kept).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Container, Sequence
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
    forced_function,
    json_data,
    json_format,
    judged_data,
    offered_names,
    plain_content,
    request_hash,
    sse,
    text_of,
    token,
    unreadable,
)

INSTRUCTION_ROLES = ("system", "developer")
# A message's legacy function call, among its tool calls (keyed by their stream index): it has
# none, and there is at most one
LEGACY = None
LEGACY_CALL_ID = "function_call:"  # a function call's id: this and its function's name


def function_call_id(name: str) -> str:
    """The id of a legacy function call (the shape has none): its function's name, which is
    also all the ``function`` message that answers it names."""
    return LEGACY_CALL_ID + name


def _last_calls(last: object) -> tuple[str, ...]:
    """The ids of the tool calls of ``last``, the conversation's last message, when it is the
    model's answer (:attr:`Request.last_calls`)."""
    calls = last.get("tool_calls") if isinstance(last, dict) \
        and last.get("role") == "assistant" else None
    if not isinstance(calls, list):
        return ()
    return tuple(str(call.get("id") or "") for call in calls[:MAX_TOOL_CALLS_SEEN]
                 if isinstance(call, dict))


class ChatWire:
    api = "chat"

    def read_request(self, body: dict[str, Any]) -> Request:
        messages = body.get("messages")
        if not isinstance(messages, list):
            messages = []
        model = body.get("model")
        instructions: list[str] = []
        anchor = anchor_text = ""
        last_answer = -1
        answers: list[int] = []
        opening: object = None
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                continue
            role = message.get("role")
            if role in INSTRUCTION_ROLES:
                instructions.append(text_of(message.get("content")))
            elif role == "user" and not anchor:
                anchor = anchor_of(message.get("content"))
                anchor_text = text_of(message.get("content"))
            elif role == "assistant":
                if not answers and not anchor:  # (the model's, before any user message)
                    opening = message.get("content")
                last_answer = index
                answers.append(index)
        results: list[ToolResult] = []
        said: list[str] = []
        for message in messages[last_answer + 1:]:
            if not isinstance(message, dict) or len(results) + len(said) >= MAX_TOOL_CALLS_SEEN:
                continue
            role = message.get("role")
            if role in ("tool", "function"):
                text = text_of(message.get("content"))
                answered = str(message.get("tool_call_id") or "") if role == "tool" else \
                    function_call_id(str(message.get("name") or ""))
                results.append(ToolResult(answered, text, looks_failed(text)))
            elif role not in INSTRUCTION_ROLES:
                said.append(text_of(message.get("content")))
        last = messages[-1] if messages else None
        options = body.get("stream_options")
        forced = forced_function(body)
        return Request(
            model=model if isinstance(model, str) else "",
            stream=body.get("stream") is True,
            answers_offered=answers_offered(offered_names(body)),
            has_tools=can_call(body.get("tools"), body.get("tool_choice"))
            or can_call(body.get("functions"), body.get("function_call")),
            instructions="\n".join(instructions),
            anchor=anchor,
            anchor_text=anchor_text,
            messages=len(messages),
            last_is_user=isinstance(last, dict) and last.get("role") == "user",
            results=results,
            said=said,
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
            input_hash=request_hash(messages),
            answer_format=json_format(body.get("response_format"))
            or (FORCED_FORMAT if forced else None),
            forced=forced,
            limit=announced_limit(last, "\n".join(instructions)),
            last_answer=messages[last_answer].get("content") if last_answer >= 0 else None,
            answers=tuple(messages[index].get("content")
                          for index in answers[-MAX_ANSWERS_SEEN:]),
            opening=opening,
            last_calls=_last_calls(last))

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
        return withdraw_function_tools(body, prompt, self.add_note, (
            ("tools", "tool_choice",
             lambda name: {"type": "function", "function": {"name": name}}),
            ("functions", "function_call", lambda name: {"name": name})))

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
                for _, call in _calls_of(message)[:MAX_TOOL_CALLS_SEEN]:
                    if isinstance(call, dict):
                        function = _callee(call)
                        seen.calls.append(ToolCall(str(call.get("id") or ""),
                                                   str(function.get("name") or ""),
                                                   str(function.get("arguments")
                                                       or function.get("input") or "")))
        return seen

    def accumulator(self) -> ChatAccumulator:
        return ChatAccumulator()

    def trim(self, body: dict[str, Any], keep: int, answer_tool: str | None = None,
             offered: Container[str] | None = None) -> bool:
        """Leaves the first ``keep`` tool calls of each choice, and its answers' calls
        (:func:`~watchdog.core.model.steer.answers`)."""
        changed = False
        choices = body.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                continue
            calls = _calls_of(message)
            if not calls:
                continue
            kept, work = [], 0
            for index, call in calls:
                if answers(_name_of(call), answer_tool, offered):
                    kept.append((index, call))
                elif work < keep:
                    kept.append((index, call))
                    work += 1
            if len(kept) == len(calls):
                continue
            changed = True
            listed = [call for index, call in kept if index is not LEGACY]
            if listed:
                message["tool_calls"] = listed
            elif "tool_calls" in message and isinstance(message["tool_calls"], list):
                del message["tool_calls"]
            if not any(index is LEGACY for index, _ in kept):
                message.pop("function_call", None)
            if not kept and choice.get("finish_reason") in ("tool_calls", "function_call"):
                choice["finish_reason"] = "stop"
        return changed

    def stream_trimmer(self, keep: int, answer_tool: str | None = None,
                       offered: Container[str] | None = None) -> ChatTrimmer:
        return ChatTrimmer(keep, answer_tool, offered)

    def answer(self, model: str, text: str, request: Request, now: float,
               call: ToolCall | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if call is not None:
            message["tool_calls"] = [_call_of(call)]
        return {"id": _answer_id(), "object": "chat.completion", "created": int(now),
                "model": model, "choices": [{
                    "index": 0, "message": message,
                    "finish_reason": "stop" if call is None else "tool_calls",
                    "logprobs": None}],
                "usage": _no_usage()}

    def answer_stream(self, model: str, text: str, request: Request, now: float,
                      call: ToolCall | None = None) -> bytes:
        answer_id, created = _answer_id(), int(now)

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return sse({"id": answer_id, "object": "chat.completion.chunk", "created": created,
                        "model": model, "choices": [{"index": 0, "delta": delta,
                                                     "finish_reason": finish,
                                                     "logprobs": None}]})

        parts = [chunk({"role": "assistant", "content": ""}), chunk({"content": text})]
        if call is not None:
            parts.append(chunk({"tool_calls": [{"index": 0, **_call_of(call)}]}))
        parts.append(chunk({}, "stop" if call is None else "tool_calls"))
        if request.include_usage:
            parts.append(sse({"id": answer_id, "object": "chat.completion.chunk",
                              "created": created, "model": model, "choices": [],
                              "usage": _no_usage()}))
        parts.append(sse("[DONE]"))
        return b"".join(parts)

    def error(self, status: int, code: str, message: str) -> dict[str, Any]:
        kind = "invalid_request_error" if status < 500 else "api_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _no_usage() -> dict[str, Any]:
    """The usage of an answer the endpoint gives itself: no tokens, in the shape the API's
    usage has, its details included (clients read them unchecked: swarms' streamed
    ``usage.prompt_tokens_details.audio_tokens``)."""
    return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0}}


def _call_of(call: ToolCall) -> dict[str, Any]:
    return {"id": call.call_id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


def _answer_id() -> str:
    return "chatcmpl-watchdog" + uuid.uuid4().hex[:20]


# Where a request offers functions: the key of their definitions, the key of the choice among
# them, and the choice that forces one (by its name)
Offer = tuple[str, str, Callable[[str], object]]


def withdraw_function_tools(body: dict[str, Any], prompt: str,
                            add_note: Callable[[dict[str, Any], str], dict[str, Any]],
                            offers: Sequence[Offer]) -> dict[str, Any]:
    """The budget's last request, for the OpenAI APIs (Chat Completions, Responses): the report
    instruction, and the tools of each of ``offers`` withdrawn (its choice ``"none"``, the
    definitions kept) — or, when an answer tool is offered, only that tool left and forced;
    an answer-shaped request (:func:`~watchdog.core.model.wire.forced_function`) keeps its
    one function forced, the report asked for in its shape."""
    offered = [(offer, listed if isinstance(listed := body.get(offer[0]), list) else [])
               for offer in offers]
    shaped = forced_function(body)  # (an answer-shaped request: its answer's shape stays)
    answer = shaped or answer_tool_offered(
        function_name(tool) for _, tools in offered for tool in tools)
    edited = add_note(body, prompt if answer is None else forced_prompt(prompt, answer)
                      if shaped else answer_tool_prompt(prompt, answer))
    for (key, choice, forced), tools in offered:
        # (no answer tool: none is forced, not one without a function name, a hosted one)
        only = [tool for tool in tools if function_name(tool) == answer][:1] \
            if answer is not None else []
        if only:
            edited[key] = only
            edited[choice] = forced(str(answer))
        elif tools:
            edited[choice] = "none"
    if offered[0][1]:
        edited.pop("parallel_tool_calls", None)
    return edited


def function_name(tool: object) -> object:
    """A function tool's name: Chat Completions' shape (``function.name``) or the Responses
    API's flat one (``name``); None: none."""
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name")


def _calls_of(message: dict[str, Any]) -> list[tuple[int | None, object]]:
    """A message's tool calls, each with its place (its index in ``tool_calls``; its legacy
    ``function_call`` last, as :data:`LEGACY`, in the shape of a tool call with its id)."""
    listed = message.get("tool_calls")
    calls: list[tuple[int | None, object]] = list(enumerate(listed)) \
        if isinstance(listed, list) else []
    function = message.get("function_call")
    if isinstance(function, dict):
        calls.append((LEGACY, {"id": function_call_id(str(function.get("name") or "")),
                               "function": function}))
    return calls


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
        self._calls: dict[int | None, ToolCall] = {}  # by stream index (LEGACY: none)
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
        elif unreadable(event):
            self.observation.unreadable = True

    def feed_object(self, data: dict[str, Any]) -> None:
        seen = self.observation
        if seen.response_id is None and isinstance(data.get("id"), str):
            seen.response_id = data["id"]
        if isinstance(data.get("model"), str) and data["model"]:
            seen.model = data["model"][:200]
        if data.get("usage"):
            _usage(seen, data["usage"])
        choice = first_choice(data.get("choices"))
        if choice is None:
            return
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
        for index, part in _parts_of(delta):
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
            if index is LEGACY:
                call.call_id = function_call_id(call.name)


def first_choice(choices: object) -> dict[str, Any] | None:
    """A stream chunk's part of the answer that is read: its first choice, as a whole
    response's ``choices[0]``. With ``n`` > 1 each chunk carries the part of one choice (or
    of several), named by its ``index``: a choice whose index is another integer is another
    answer, not read (its text and calls are no part of the first's)."""
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict):
            return None
        index = choice.get("index")
        if not isinstance(index, int) or index == 0:
            return choice
    return None


def _parts_of(delta: dict[str, Any]) -> list[tuple[int | None, dict[str, Any]]]:
    """A stream delta's parts of tool calls, each with its call's index (a legacy
    ``function_call`` last, as :data:`LEGACY`, in the shape of a tool call's part)."""
    listed = delta.get("tool_calls")
    parts: list[tuple[int | None, dict[str, Any]]] = [
        (part["index"], part) for part in (listed if isinstance(listed, list) else ())
        if isinstance(part, dict) and isinstance(part.get("index"), int)]
    function = delta.get("function_call")
    if isinstance(function, dict):
        parts.append((LEGACY, {"function": function}))
    return parts


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
    """Drops the tool-call deltas of calls past ``keep`` (answers' calls are always
    kept; a call is judged by its first delta, which names it), numbers the kept ones without
    gaps, and says "stop" instead of "tool_calls" (or "function_call") when none is left; an
    event left with nothing to say is dropped. A legacy ``function_call`` is one more call,
    with no index to number. Each choice (``n`` > 1: told by its ``index``) is trimmed apart,
    as :meth:`ChatWire.trim` trims a whole response's."""

    def __init__(self, keep: int, answer_tool: str | None = None,
                 offered: Container[str] | None = None) -> None:
        self.keep, self.answer_tool, self.offered = keep, answer_tool, offered
        self._choices: dict[int, _Choice] = {}  # by the choice's index (not an int: 0)
        self._seen = 0  # calls seen, of all choices

    def _slot(self, number: int, index: int | None, call: dict[str, Any]) -> int | None:
        choice = self._choices.get(number)
        if choice is not None and index in choice.slots:
            return choice.slots[index]
        if self._seen >= MAX_TOOL_CALLS_SEEN:  # more calls than are read: dropped
            return None
        self._seen += 1  # (so a choice is kept only with a call: they are bounded too)
        if choice is None:
            choice = self._choices[number] = _Choice()
        kept = answers(_name_of(call), self.answer_tool, self.offered)
        if not kept:
            kept = choice.work < self.keep
            choice.work += 1
        slot: int | None = None
        if kept:
            slot = choice.kept if index is not LEGACY else 0
            choice.kept += index is not LEGACY
            choice.handed += 1
        choice.slots[index] = slot
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
            number = choice.get("index")
            number = number if isinstance(number, int) else 0
            delta, emptied = choice.get("delta"), False
            if isinstance(delta, dict) and isinstance(delta.get("tool_calls"), list):
                calls = delta["tool_calls"]
                kept, moved = [], False
                for call in calls:
                    if not (isinstance(call, dict) and isinstance(call.get("index"), int)):
                        kept.append(call)
                        continue
                    slot = self._slot(number, call["index"], call)
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
                        emptied = True
            if isinstance(delta, dict) and isinstance(delta.get("function_call"), dict) \
                    and self._slot(number, LEGACY, {"function": delta["function_call"]}) is None:
                del delta["function_call"]
                changed = emptied = True
            if emptied and isinstance(delta, dict):
                empty = not any(value for value in delta.values()) \
                    and choice.get("finish_reason") is None
            handed = self._choices[number].handed if number in self._choices else 0
            if handed == 0 and choice.get("finish_reason") in ("tool_calls", "function_call"):
                choice["finish_reason"] = "stop"
                changed = True
        if not changed:
            return event.raw
        if empty and len(choices) == 1 and not data.get("usage"):
            return b""
        return sse(data)


class _Choice:
    """What :class:`ChatTrimmer` keeps of one choice's calls: the upstream's index of each
    (LEGACY: none) -> the one handed on (None: dropped), the calls that are not final answers
    seen, the indexed calls kept, and all calls kept."""

    __slots__ = ("handed", "kept", "slots", "work")

    def __init__(self) -> None:
        self.slots: dict[int | None, int | None] = {}
        self.work = 0
        self.kept = 0
        self.handed = 0
