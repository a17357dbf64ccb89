"""A scripted OpenAI-compatible model server for driving real agent frameworks without a network.

Frameworks talk to it through their own OpenAI clients (``base_url = server.base_url``). Each
scenario is a *script* registered under a model name: a list of steps, each a text answer or a
set of tool calls; past its end the last step repeats (so a looping script loops until the
framework's own limit stops it). Every request body is recorded per model, so a test can assert
what the model saw at each request (its instructions, its tools, its messages).

Served: ``POST /v1/chat/completions`` (plain and streamed, with ``stream_options.include_usage``
and ``n`` answers, the same step in each with call ids of its own, a stream's chunks interleaved;
a request that offers legacy ``functions`` and no ``tools`` is answered in their shape: the first
call as ``message.function_call``, streamed as ``delta.function_call``, finish reason
``function_call``), ``POST /v1/responses`` (the OpenAI Responses API, plain and streamed:
``function_call`` items, a step's reasoning as a ``reasoning`` item), ``GET /v1/models`` and
Anthropic's Messages API, ``POST /v1/messages`` (plain and streamed: ``tool_use`` content
blocks, ``stop_reason`` ``tool_use`` / ``end_turn``) and Google's Gemini API,
``POST /v1beta/models/MODEL:generateContent`` and ``:streamGenerateContent`` (``?alt=sse``:
``functionCall`` parts, the model named by the path), from the same scripts;
the same paths without ``/v1`` too, for clients configured without it. A step may be an error
instead (``Step(status=429)``: that status, an OpenAI-shaped error body, ``retry-after-ms``).
Each request's raw body and headers are recorded too (:meth:`FakeLLM.raw_requests`,
:meth:`FakeLLM.request_headers`).
Standard library only: it runs inside the test process, whatever venv the framework lives in.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# ---------------------------------------------------------------------------------------------
# Scripts


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Step:
    """One model response: ``text`` (an answer) or ``tool_calls`` (a request to run tools)."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None  # default: "tool_calls" with calls, else "stop"
    # the model's reasoning first (Responses: a reasoning item; Chat Completions: the message's
    # ``reasoning_content``, streamed first, as vLLM's and DeepSeek's reasoning models give it)
    reasoning: str | None = None
    tokens: int | None = None  # the total tokens its usage reports (default: an estimate)
    # streamed: each newline a chunk of its own besides each word, as a model's tokens come
    # (an agent that parses code fences as they stream, Open Interpreter's, reads them so)
    lines_apart: bool = False
    # an error in place of a response: this HTTP status, an OpenAI-shaped error body, and
    # ``retry-after-ms: 1`` (a rate limit or an overload a client retries at once)
    status: int | None = None

    @property
    def finish(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


def answer(text: str) -> Step:
    return Step(text=text)


def call(name: str, **arguments: Any) -> Step:
    return Step(tool_calls=(ToolCall(name, arguments),))


# A script picks the response to request number ``index`` (0-based) from the request body.
Script = Callable[[int, dict[str, Any]], Step]


def steps(*sequence: Step) -> Script:
    """The steps in order; the last one repeats once the script runs out."""
    if not sequence:
        raise ValueError("a script needs at least one step")

    def pick(index: int, _body: dict[str, Any]) -> Step:
        return sequence[min(index, len(sequence) - 1)]

    return pick


def tools_then_answer(tool: str, argument_sets: Sequence[dict[str, Any]], text: str) -> Script:
    """One tool call per request with each argument set in turn, then the answer."""
    return steps(*(call(tool, **arguments) for arguments in argument_sets), answer(text))


def offers_tools(body: dict[str, Any]) -> bool:
    """Whether a request lets the model call tools: it has tools, and its ``tool_choice`` is
    not none (OpenAI ``"none"``, Anthropic ``{"type": "none"}``) — or legacy ``functions``
    and a ``function_call`` that is not ``"none"`` — as a real model reads it."""
    if legacy_functions(body):
        return body.get("function_call") != "none"
    choice = body.get("tool_choice")
    return bool(body.get("tools")) and choice != "none" and not (
        isinstance(choice, dict) and choice.get("type") == "none")


def legacy_functions(body: dict[str, Any]) -> bool:
    """Whether a chat request offers legacy ``functions`` and no ``tools``: it is answered in
    their shape."""
    return bool(body.get("functions")) and not body.get("tools")


def looping(tool: str, make_arguments: Callable[[int], dict[str, Any]],
            answer_without_tools: str | None = None, obeys_tool_choice: bool = True) -> Script:
    """Call ``tool`` on every request, forever (the framework's limit must stop it).

    A request that offers no tools cannot be answered with a call: it gets
    ``answer_without_tools`` (frameworks ask for a summary that way when they stop at a limit).
    ``obeys_tool_choice=False``: a model that still calls the tool when ``tool_choice`` is none
    (only a request with no tools at all gets the answer), as some models do.
    """
    def pick(index: int, body: dict[str, Any]) -> Step:
        tools_offered = offers_tools(body) if obeys_tool_choice else bool(body.get("tools"))
        if answer_without_tools is not None and not tools_offered:
            return answer(answer_without_tools)
        return call(tool, **make_arguments(index))

    return pick


# ---------------------------------------------------------------------------------------------
# Server


@dataclass
class _Model:
    script: Script
    delay: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)  # the bodies as received
    headers: list[dict[str, str]] = field(default_factory=list)  # (names lower-cased)
    on_request: Callable[[int], object] | None = None  # called with the request's index
    chunk_delay: float = 0.0  # seconds between the chunks of a streamed chat completion
    linger: float = 0.0  # seconds a stream's connection stays open after its last event


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # the listen backlog: 50 streams connect at once in the benchmark


class FakeLLM:
    """The server; ``with FakeLLM() as llm:`` starts it on a free loopback port (or ``port``)."""

    def __init__(self, port: int = 0) -> None:
        self._models: dict[str, _Model] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd = _Server(("127.0.0.1", port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fakellm",
                                        daemon=True)

    @property
    def base_url(self) -> str:
        """The OpenAI ``base_url`` (ends in ``/v1``)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, model: str, script: Script, delay: float = 0.0,
               on_request: Callable[[int], object] | None = None,
               chunk_delay: float = 0.0, linger: float = 0.0) -> str:
        """Serve ``script`` to requests naming ``model``; ``delay`` seconds per response;
        ``on_request(index)`` before each response (index from 0): a test's fault, at a step;
        ``chunk_delay`` seconds between the chunks of a streamed chat completion (a model's
        pace, for bench/model_endpoint.py); ``linger`` seconds a stream's connection stays
        open after its last event (its end comes late, as through a slow proxy)."""
        with self._lock:
            self._models[model] = _Model(script, delay, on_request=on_request,
                                         chunk_delay=chunk_delay, linger=linger)
        return model

    def requests(self, model: str) -> list[dict[str, Any]]:
        """The request bodies received for ``model``, in order."""
        with self._lock:
            return list(self._models[model].requests)

    def raw_requests(self, model: str) -> list[bytes]:
        """The request bodies received for ``model`` as bytes, exactly as they arrived."""
        with self._lock:
            return list(self._models[model].raw)

    def request_headers(self, model: str) -> list[dict[str, str]]:
        """The headers of each request for ``model`` (names lower-cased)."""
        with self._lock:
            return list(self._models[model].headers)

    def __enter__(self) -> FakeLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- answering ------------------------------------------------------------------------------

    def respond(self, body: dict[str, Any], raw: bytes = b"",
                headers: dict[str, str] | None = None, name: str | None = None
                ) -> tuple[_Model, Step]:
        """The step answering ``body``, for the model it names (``name``: the one its path
        names, Gemini's), the request recorded."""
        name = str(body.get("model", "")) if name is None else name
        with self._lock:
            model = self._models.get(name)
            if model is None:
                raise KeyError(name)
            index = len(model.requests)
            model.requests.append(body)
            model.raw.append(raw)
            model.headers.append(dict(headers or {}))
        return model, model.script(index, body)

    def next_id(self) -> str:
        return f"chatcmpl-fake{next(self._ids)}"


# what the OpenAI API's Chat Completions usage holds besides the counts (clients read them
# unchecked: swarms streamed)
USAGE_DETAILS = {"prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                 "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                               "accepted_prediction_tokens": 0,
                                               "rejected_prediction_tokens": 0}}


def _usage(body: dict[str, Any], step: Step) -> dict[str, int]:
    prompt = sum(len(json.dumps(m)) for m in body.get("messages", [])) // 4 + 1
    completion = len(step.text or "") // 4 + 8 * len(step.tool_calls) + 1
    if step.tokens is not None:  # (a context the agent must compact, say)
        prompt = max(step.tokens - completion, 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _tool_calls(step: Step, call_ids: list[str]) -> list[dict[str, Any]]:
    return [{"id": call_id, "type": "function",
             "function": {"name": tool.name, "arguments": json.dumps(tool.arguments)}}
            for call_id, tool in zip(call_ids, step.tool_calls, strict=True)]


def _legacy(step: Step) -> Step:
    """A step in the legacy shape: its first call only, finished by ``function_call``."""
    if not step.tool_calls:
        return step
    return Step(step.text, step.tool_calls[:1], step.finish_reason or "function_call")


def completion(model: str, response_id: str, step: Step, usage: dict[str, Any],
               legacy: bool = False) -> dict[str, Any]:
    """A chat completion; ``legacy``: its call as ``message.function_call``."""
    if legacy:
        step = _legacy(step)
    call_ids = [f"call_{response_id[-6:]}_{i}" for i in range(len(step.tool_calls))]
    message: dict[str, Any] = {"role": "assistant", "content": step.text}
    if step.reasoning:
        message["reasoning_content"] = step.reasoning
    if step.tool_calls and legacy:
        tool = step.tool_calls[0]
        message["function_call"] = {"name": tool.name, "arguments": json.dumps(tool.arguments)}
    elif step.tool_calls:
        message["tool_calls"] = _tool_calls(step, call_ids)
    return {"id": response_id, "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message,
                                          "finish_reason": step.finish, "logprobs": None}],
            "usage": usage}


def chunks(model: str, response_id: str, step: Step, usage: dict[str, Any] | None,
           legacy: bool = False) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed response; with ``usage`` (asked
    for: ``stream_options.include_usage``), each says ``"usage": null`` and a usage-only chunk
    ends them, as OpenAI's do; ``legacy``: its call as ``delta.function_call``."""
    if legacy:
        step = _legacy(step)
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        made = {"id": response_id, "object": "chat.completion.chunk",
                "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                             "logprobs": None}]}
        if usage is not None:
            made["usage"] = None
        return made

    yield chunk({"role": "assistant", "content": ""})
    if step.reasoning:
        for word in step.reasoning.split(" "):
            yield chunk({"reasoning_content": word + " "})
    if step.text:
        words = step.text.split(" ")
        pieces = [word if i == len(words) - 1 else word + " " for i, word in enumerate(words)]
        if step.lines_apart:
            pieces = [part for piece in pieces for part in re.split(r"(\n)", piece) if part]
        for piece in pieces:
            yield chunk({"content": piece})
    call_ids = [f"call_{response_id[-6:]}_{i}" for i in range(len(step.tool_calls))]
    for index, (call_id, tool) in enumerate(zip(call_ids, step.tool_calls, strict=True)):
        arguments = json.dumps(tool.arguments)
        if legacy:
            yield chunk({"function_call": {"name": tool.name, "arguments": ""}})
            half = len(arguments) // 2
            for part in (arguments[:half], arguments[half:]):
                yield chunk({"function_call": {"arguments": part}})
            continue
        yield chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                     "function": {"name": tool.name, "arguments": ""}}]})
        half = len(arguments) // 2
        for part in (arguments[:half], arguments[half:]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
    yield chunk({}, step.finish)
    if usage is not None:
        yield {"id": response_id, "object": "chat.completion.chunk", "created": int(time.time()),
               "model": model, "choices": [], "usage": usage}


def _answers(body: dict[str, Any]) -> int:
    """How many answers a chat request asks for (``n``; 1 unless a small positive integer)."""
    n = body.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 8 else 1


def _as_choice(data: dict[str, Any], number: int) -> dict[str, Any]:
    """``data`` (a completion or a chunk) with its choice as choice ``number``: that index,
    and call ids of its own."""
    text = json.dumps(data).replace('"call_', f'"call_{number}')
    made: dict[str, Any] = json.loads(text)
    for choice in made.get("choices") or ():
        choice["index"] = number
    return made


def _several(completion_: dict[str, Any], answers: int) -> dict[str, Any]:
    """A completion with ``answers`` choices (``n``), the same step in each, call ids apart."""
    if answers == 1:
        return completion_
    choices = [_as_choice(completion_, number)["choices"][0] for number in range(answers)]
    return {**completion_, "choices": choices}


def _interleaved(pieces: Iterator[dict[str, Any]], answers: int) -> Iterator[dict[str, Any]]:
    """The chunks of ``answers`` choices (``n``), one chunk of each in turn, as OpenAI
    interleaves them; a usage-only chunk (no choices) once, last."""
    made = list(pieces)
    if answers == 1:
        yield from made
        return
    last = [piece for piece in made if not piece["choices"]]
    made = [piece for piece in made if piece["choices"]]
    for piece in made:
        for number in range(answers):
            yield _as_choice(piece, number)
    yield from last


_ANTHROPIC_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def anthropic_message(model: str, response_id: str, step: Step, body: dict[str, Any]
                      ) -> dict[str, Any]:
    """An Anthropic Messages API response: a text block (if any), one ``tool_use`` block per
    call, the stop reason mapped from the step's finish reason."""
    content: list[dict[str, Any]] = []
    if step.text:
        content.append({"type": "text", "text": step.text})
    for i, tool in enumerate(step.tool_calls):
        content.append({"type": "tool_use", "id": f"toolu_{response_id[-6:]}_{i}",
                        "name": tool.name, "input": tool.arguments})
    usage = _usage({"messages": [body.get("system", ""), *body.get("messages", [])]},
                   step)
    return {"id": "msg_" + response_id.rsplit("-", 1)[-1], "type": "message",
            "role": "assistant", "model": model, "content": content,
            "stop_reason": _ANTHROPIC_STOP.get(step.finish, step.finish), "stop_sequence": None,
            "usage": {"input_tokens": usage["prompt_tokens"],
                      "output_tokens": usage["completion_tokens"]}}


def anthropic_events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The Messages API stream of ``message`` (an :func:`anthropic_message`): message_start,
    each content block (text deltas word by word, tool input JSON in two halves), message_delta
    with the stop reason and usage, message_stop."""
    start = {**message, "content": [], "stop_reason": None,
             "usage": {"input_tokens": message["usage"]["input_tokens"], "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}
            words = block["text"].split(" ")
            for i, word in enumerate(words):
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "text_delta", "text": word if (
                                                  i == len(words) - 1) else word + " "}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "input": {}}}
            arguments = json.dumps(block["input"])
            half = len(arguments) // 2
            for part in (arguments[:half], arguments[half:]):
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "input_json_delta",
                                                        "partial_json": part}}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": message["stop_reason"],
                                      "stop_sequence": None},
                            "usage": {"output_tokens": message["usage"]["output_tokens"]}}
    yield "message_stop", {"type": "message_stop"}


def response_object(model: str, response_id: str, step: Step, body: dict[str, Any]
                    ) -> dict[str, Any]:
    """An OpenAI Responses API response: a reasoning item (if the step has reasoning: its
    summary, and its ``encrypted_content`` when the request's ``include`` asks for it), a
    message item (if the step has text), one ``function_call`` item per call."""
    output: list[dict[str, Any]] = []
    suffix = response_id[-6:]
    if step.reasoning:  # its summary; its content encrypted when the request asks for it
        item: dict[str, Any] = {"type": "reasoning", "id": f"rs_{suffix}", "summary": [
            {"type": "summary_text", "text": step.reasoning}]}
        if "reasoning.encrypted_content" in (body.get("include") or ()):
            item["encrypted_content"] = "enc:" + step.reasoning[::-1]
        output.append(item)
    if step.text:
        output.append({"type": "message", "id": f"msg_{suffix}", "status": "completed",
                       "role": "assistant", "content": [{"type": "output_text",
                                                         "text": step.text,
                                                         "annotations": []}]})
    for i, tool in enumerate(step.tool_calls):
        output.append({"type": "function_call", "id": f"fc_{suffix}_{i}",
                       "call_id": f"call_{suffix}_{i}", "name": tool.name,
                       "arguments": json.dumps(tool.arguments), "status": "completed"})
    items = body.get("input")
    usage = _usage({"messages": items if isinstance(items, list) else [items]}, step)
    return {"id": "resp_" + suffix, "object": "response", "created_at": int(time.time()),
            "status": "completed" if step.finish != "length" else "incomplete",
            "error": None, "incomplete_details": None,
            "instructions": body.get("instructions"), "model": model, "output": output,
            "parallel_tool_calls": True, "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "text": body.get("text") or {"format": {"type": "text"}},
            "previous_response_id": body.get("previous_response_id"),
            "usage": {"input_tokens": usage["prompt_tokens"],
                      "output_tokens": usage["completion_tokens"],
                      "total_tokens": usage["total_tokens"],
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


def response_events(response: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The Responses API stream of ``response``: created, each output item added, its text
    or arguments deltas, done, then completed (with the whole response)."""
    started = {**response, "status": "in_progress", "output": []}
    yield "response.created", {"response": started}
    for index, item in enumerate(response["output"]):
        if item["type"] == "reasoning":
            yield "response.output_item.added", {"output_index": index,
                                                 "item": {**item, "summary": []}}
            for part, summary in enumerate(item["summary"]):
                yield "response.reasoning_summary_text.delta", {
                    "output_index": index, "item_id": item["id"], "summary_index": part,
                    "delta": summary["text"]}
                yield "response.reasoning_summary_text.done", {
                    "output_index": index, "item_id": item["id"], "summary_index": part,
                    "text": summary["text"]}
        elif item["type"] == "message":
            text = item["content"][0]["text"]
            yield "response.output_item.added", {"output_index": index,
                                                 "item": {**item, "content": [],
                                                          "status": "in_progress"}}
            yield "response.content_part.added", {
                "output_index": index, "content_index": 0, "item_id": item["id"],
                "part": {"type": "output_text", "text": "", "annotations": []}}
            words = text.split(" ")
            for i, word in enumerate(words):  # the deltas add up to the text
                yield "response.output_text.delta", {
                    "output_index": index, "content_index": 0, "item_id": item["id"],
                    "delta": word if i == len(words) - 1 else word + " "}
            yield "response.output_text.done", {"output_index": index, "content_index": 0,
                                                "item_id": item["id"], "text": text}
        else:
            yield "response.output_item.added", {"output_index": index,
                                                 "item": {**item, "arguments": "",
                                                          "status": "in_progress"}}
            half = len(item["arguments"]) // 2
            for part in (item["arguments"][:half], item["arguments"][half:]):
                yield "response.function_call_arguments.delta", {
                    "output_index": index, "item_id": item["id"], "delta": part}
            yield "response.function_call_arguments.done", {
                "output_index": index, "item_id": item["id"], "arguments": item["arguments"]}
        yield "response.output_item.done", {"output_index": index, "item": item}
    yield "response.completed", {"response": response}


_GEMINI_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS"}
_GEMINI_PATH = re.compile(
    r"(?:/v1beta|/v1)?/models/([^/:]+):(generateContent|streamGenerateContent)")


def gemini_response(model: str, response_id: str, step: Step, body: dict[str, Any]
                    ) -> dict[str, Any]:
    """A Gemini API ``generateContent`` response: one candidate whose parts are the step's
    text (if any) and a ``functionCall`` per call (no call ids: the API gives none), its
    finish reason ``STOP`` (``MAX_TOKENS`` for a step cut at length), its usage."""
    parts: list[dict[str, Any]] = []
    if step.text:
        parts.append({"text": step.text})
    parts.extend({"functionCall": {"name": tool.name, "args": tool.arguments}}
                 for tool in step.tool_calls)
    usage = _usage({"messages": [body.get("systemInstruction", ""), *body.get("contents", [])]},
                   step)
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0,
                            "finishReason": _GEMINI_FINISH.get(step.finish, step.finish.upper())}],
            "usageMetadata": {"promptTokenCount": usage["prompt_tokens"],
                              "candidatesTokenCount": usage["completion_tokens"],
                              "totalTokenCount": usage["total_tokens"]},
            "modelVersion": model, "responseId": response_id}


def gemini_chunks(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The ``streamGenerateContent`` chunks of ``response`` (a :func:`gemini_response`): its
    text word by word, then its calls with the finish reason and the usage."""
    [candidate] = response["candidates"]
    parts = candidate["content"]["parts"]
    texts = [part["text"] for part in parts if "text" in part]
    calls = [part for part in parts if "functionCall" in part]
    words = " ".join(texts).split(" ") if texts else []
    for i, word in enumerate(words[:-1] if not calls else words):
        yield {"candidates": [{"content": {"role": "model", "parts": [
            {"text": word if i == len(words) - 1 else word + " "}]}, "index": 0}],
            "modelVersion": response["modelVersion"], "responseId": response["responseId"]}
    last = calls if calls else [{"text": words[-1]}] if words else []
    yield {**response, "candidates": [{**candidate, "content": {"role": "model",
                                                                "parts": last}}]}


def _handler_for(llm: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send_json(self, status: int, payload: dict[str, Any],
                       headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            for header, value in (headers or {}).items():
                self.send_header(header, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send_events(self, events: Iterable[tuple[str, dict[str, Any]]],
                         named: bool, linger: float = 0.0) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for kind, data in events:
                head = f"event: {kind}\n".encode() if named else b""
                self.wfile.write(head + b"data: " + json.dumps(data).encode() + b"\n\n")
                self.wfile.flush()
            time.sleep(linger)
            self.close_connection = True

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                with llm._lock:
                    names = list(llm._models)
                self._send_json(200, {"object": "list", "data": [
                    {"id": name, "object": "model", "owned_by": "fakellm"} for name in names]})
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            path = self.path.split("?")[0].rstrip("/")
            gemini = _GEMINI_PATH.fullmatch(path)
            if gemini is not None:
                self._gemini(raw, gemini[1], gemini[2] == "streamGenerateContent")
                return
            anthropic = path in ("/v1/messages", "/messages")
            responses = path in ("/v1/responses", "/responses")
            if not anthropic and not responses \
                    and path not in ("/v1/chat/completions", "/chat/completions"):
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(raw)
                model, step = llm.respond(body, raw, {k.lower(): v
                                                      for k, v in self.headers.items()})
            except (ValueError, KeyError) as exc:
                self._send_json(400, {"error": {"message": f"fakellm: {exc!r}",
                                                "type": "invalid_request_error"}})
                return
            if model.on_request is not None:
                model.on_request(len(llm.requests(str(body.get("model")))) - 1)
            if step.status is not None:
                self._send_json(step.status, {"error": {
                    "message": f"fakellm: scripted {step.status}", "type": "rate_limit_error",
                    "code": "rate_limit_exceeded"}}, {"retry-after-ms": "1"})
                return
            if model.delay:
                time.sleep(model.delay)
            response_id = llm.next_id()
            usage = _usage(body, step)
            name = str(body.get("model"))
            chat_usage = {**usage, **USAGE_DETAILS}
            if anthropic:
                message = anthropic_message(name, response_id, step, body)
                if body.get("stream"):
                    self._send_events(anthropic_events(message), named=True, linger=model.linger)
                else:
                    self._send_json(200, message)
                return
            if responses:
                response = response_object(name, response_id, step, body)
                if body.get("stream"):
                    self._send_events(
                        ((kind, {"type": kind, "sequence_number": number, **data})
                         for number, (kind, data) in enumerate(response_events(response))),
                        named=True, linger=model.linger)
                else:
                    self._send_json(200, response)
                return
            legacy = legacy_functions(body)
            answers = _answers(body)
            if not body.get("stream"):
                self._send_json(200, _several(completion(name, response_id, step, chat_usage,
                                                         legacy), answers))
                return
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for index, piece in enumerate(_interleaved(
                    chunks(name, response_id, step, chat_usage if include_usage else None,
                           legacy),
                    answers)):
                if index and model.chunk_delay:
                    time.sleep(model.chunk_delay)
                self.wfile.write(b"data: " + json.dumps(piece).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            time.sleep(model.linger)
            self.close_connection = True

        def _gemini(self, raw: bytes, name: str, stream: bool) -> None:
            try:
                body = json.loads(raw)
                model, step = llm.respond(body, raw, {k.lower(): v
                                                      for k, v in self.headers.items()}, name)
            except (ValueError, KeyError) as exc:
                self._send_json(400, {"error": {"code": 400, "message": f"fakellm: {exc!r}",
                                                "status": "INVALID_ARGUMENT"}})
                return
            if model.on_request is not None:
                model.on_request(len(llm.requests(name)) - 1)
            if model.delay:
                time.sleep(model.delay)
            response = gemini_response(name, llm.next_id(), step, body)
            if stream:
                self._send_events((("", chunk) for chunk in gemini_chunks(response)),
                                  named=False, linger=model.linger)
            else:
                self._send_json(200, response)

    return Handler
