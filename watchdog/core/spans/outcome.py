"""How a span says its run ended: finish reasons, answers, tool requests and limit stops; and
how a tool result says its call failed.

Pure functions over values the normaliser (:mod:`watchdog.core.spans.conventions`) looked up with
the convention tables of :mod:`watchdog.core.spans.frameworks`, which also name every finish
reason, limit exception, status pattern, state field and prompt read here. JSON is parsed only
when a cheap substring test says the fact may be in it.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Mapping

from watchdog.core.spans.combined import TABLES
from watchdog.core.spans.record import SpanRecord

MAX_REASON_CHARS = 200
ANSWER_FINISH_REASONS = TABLES.answer_finish_reasons
TOOL_FINISH_REASONS = TABLES.tool_finish_reasons
LIMIT_FINISH_REASONS = TABLES.limit_finish_reasons
LIMIT_EXCEPTIONS = TABLES.limit_exceptions
LIMIT_STATUS = TABLES.limit_status
LIMIT_PHRASES = TABLES.limit_phrases
LIMIT_ERROR_JSON = TABLES.limit_error_json
ERROR_JSON = TABLES.error_json
STOPPED_STEPS = TABLES.stopped_steps
MAX_PHRASE_CHARS = 2000  # a limit told in words is looked for in this much of a message
LIMIT_ATTRIBUTE_KEYS = TABLES.limit_attributes
LIMIT_STATES = TABLES.limit_states
LIMIT_PROMPTS = TABLES.limit_prompts
LIMIT_SYSTEM_PROMPTS = TABLES.limit_system_prompts
LIMIT_ANSWERS = TABLES.limit_answers
LIMIT_ANSWER_PATTERNS = TABLES.limit_answer_patterns
CALL_LIMITS = TABLES.call_limits
STEP_CAPS = TABLES.step_caps
OUTPUT_ENVELOPES = TABLES.output_envelopes
TOOL_ERROR_FLAGS = TABLES.tool_error_flags
WRAPPED_EXCEPTIONS = TABLES.wrapped_exceptions
# (rule, the JSON texts of its values): a result must contain all of them to be parsed
TOOL_RESULT_ERROR_TEXTS = TABLES.tool_result_error_texts
TOOL_RESULT_ERRORS = tuple(
    (rule, tuple(json.dumps(value) for _, value in rule.where))
    for rule in TABLES.tool_result_errors)
PROMPT_TAIL_CHARS = 2048  # the first/last input message is looked for in this many characters
# What gives away a tool request inside a model's output, in the JSON shapes of OpenAI
# (tool_calls), GenAI parts ({"type": "tool_call"}), Bedrock/Strands (toolUse), Gemini
# (function_call; the Gemini API's own parts, functionCall: Gemini CLI's) and Anthropic
# (tool_use). Substrings first: the JSON is parsed only if one of them occurs.
TOOL_REQUEST_MARKERS = ('"tool_call', '"toolUse"', '"function_call"', '"tool_use"',
                        '"functionCall"')
TOOL_REQUEST_KEYS = frozenset({"tool_calls", "toolUse", "function_call", "tool_use",
                               "functionCall"})
TOOL_REQUEST_TYPES = frozenset({"tool_call", "function_call", "tool_use"})
MAX_JSON_DEPTH = 8  # how deep a model output is searched for a tool request or text
# A request for an output tool only (pydantic-ai's final_result, smolagents' final_answer) is
# the answer: its name, JSON-quoted, must occur in the output before it is parsed for names.
ANSWER_TOOLS = TABLES.answer_tools
ANSWER_TOOL_PREFIXES = TABLES.answer_tool_prefixes
_ANSWER_TOOL_NAMES = sorted({*ANSWER_TOOLS, *ANSWER_TOOL_PREFIXES})
# (a name that starts with another one is found by the other's test: "final_result_")
ANSWER_TOOL_MARKERS = tuple('"' + name for name in _ANSWER_TOOL_NAMES
                            if not any(name != other and name.startswith(other)
                                       for other in _ANSWER_TOOL_NAMES))


def _common_start(texts: tuple[str, ...]) -> str:
    if not texts:
        return ""
    first, last = min(texts), max(texts)
    end = 0
    while end < len(first) and first[end] == last[end]:
        end += 1
    return first[:end]


# Their common start ('"final_') is looked for first: one pass over an output without any.
ANSWER_TOOL_SCAN = _common_start(ANSWER_TOOL_MARKERS)


# The compiled matchers of LIMIT_PHRASES and LIMIT_STATUS (watchdog.core.spans.native installs
# them with the compiled decode): the index of the first pattern found, -1 none, -2 a text it
# cannot read.
compiled_phrases: Callable[[str], int] | None = None
compiled_status: Callable[[str], int] | None = None


def short_type(error_type: str) -> str:
    """``pydantic_ai.exceptions.UsageLimitExceeded`` -> ``UsageLimitExceeded``."""
    return error_type.rsplit(".", 1)[-1]


def status_limit(description: str) -> str | None:
    """The limit a span's status description names ("Max turns exceeded: ..."), if any."""
    index = compiled_status(description) if compiled_status is not None else -2
    if index >= 0:
        return LIMIT_STATUS[index][1]
    if index == -2:  # (not compiled, or a text with a lone surrogate)
        for pattern, limit in LIMIT_STATUS:
            if pattern.search(description):
                return limit
    head, sep, _ = description.partition(":")
    if sep and short_type(head.strip()) in LIMIT_EXCEPTIONS:  # "LlmCallsLimitExceededError: …"
        return short_type(head.strip())
    return phrase_limit(description)


def phrase_limit(text: str) -> str | None:
    """The limit a message names in words ("Max turns (3) exceeded", "Reached the maximum
    number of iterations"): :attr:`Convention.limit_phrases
    <watchdog.core.spans.schema.Convention.limit_phrases>`; its first characters only."""
    text = text[:MAX_PHRASE_CHARS]
    if compiled_phrases is not None:  # all of them in one pass
        index = compiled_phrases(text)
        if index != -2:  # (-2: no UTF-8, a lone surrogate: read below)
            return LIMIT_PHRASES[index][1] if index >= 0 else None
    for pattern, limit in LIMIT_PHRASES:
        if pattern.search(text):
            return limit
    return None


def error_limit(attrs: Mapping[str, object]) -> str | None:
    """The limit named in words by an error a span reports in an attribute (its output's JSON
    ``error``, a framework's error message) rather than by its status."""
    for key, path in LIMIT_ERROR_JSON:
        raw = attrs.get(key)
        if raw is None:
            continue
        if path:
            if not isinstance(raw, (str, dict)) or (
                    isinstance(raw, str) and f'"{path[-1]}"' not in raw):
                continue  # the common case: no JSON parse
            raw = at_path(_parsed(raw), path)
        text = _message_text(raw) if not isinstance(raw, dict) else json.dumps(
            raw, ensure_ascii=False, default=str)
        limit = phrase_limit(text) if text else None
        if limit is not None:
            return limit
    return None


def stopped_step(attrs: Mapping[str, object]) -> str | None:
    """The step limit a loop's step span tells by ending the loop after its model asked for
    tools (:attr:`Convention.stopped_steps
    <watchdog.core.spans.schema.Convention.stopped_steps>`), or None."""
    for rule in STOPPED_STEPS:
        continued = attrs.get(rule.continued)
        if continued is not False and continued != "false":
            continue  # (absent, or the loop went on)
        calls = at_path(_parsed(attrs.get(rule.output)), rule.tool_calls)
        if isinstance(calls, list) and calls:
            return rule.limit
    return None


def reported_error(attrs: Mapping[str, object]) -> str:
    """A failed span's error message as the framework reports it in an attribute
    (:attr:`Convention.error_json <watchdog.core.spans.schema.Convention.error_json>`), or ""."""
    for key, path in ERROR_JSON:
        raw = attrs.get(key)
        if raw is None:
            continue
        value = at_path(_parsed(raw), path) if path else raw
        if isinstance(value, str) and value.strip():
            return value
    return ""


def finish_reason(value: object) -> str | None:
    if isinstance(value, str) and value.startswith("["):
        # a list written as JSON text (Microsoft Agent Framework: '["tool_calls"]'), not the
        # array the conventions name
        parsed = _parsed(value)
        if isinstance(parsed, list) and all(isinstance(item, str) for item in parsed):
            value = parsed
    if isinstance(value, list):
        value = value[-1] if value else None
    if value is None:
        return None
    return str(value)[:MAX_REASON_CHARS]


def fill_model_outcome(record: SpanRecord, finish: object, output: object) -> None:
    """Finish reason, answer, tool request and limit stop of a model call.

    A finish reason of "stop" is not enough (google-adk says it on tool requests too): an
    output that asks for tools is no answer. Without a finish reason (a stream), an output
    that ends with text and asks for no tool is the answer.
    """
    reason = finish_reason(finish) if finish is not None else None
    if reason is None and ((isinstance(output, str) and '"finish_reason"' in output)
                           or isinstance(output, list)):  # (structured: a log event's)
        found = output_finish_reason(output)
        reason = finish_reason(found) if found is not None else None
    record.finish_reason = reason
    if reason is not None:
        lowered = reason.lower()
        if lowered in LIMIT_FINISH_REASONS:
            record.limit_stop = reason
        elif lowered in TOOL_FINISH_REASONS:
            record.requested_tools = True
        elif lowered in ANSWER_FINISH_REASONS:
            requests = _requests_tools(output)
            record.requested_tools = requests
            record.final_answer = not requests
    elif output is not None:
        requests = _requests_tools(output)
        record.requested_tools = requests
        record.final_answer = not requests and has_text(output)
    if record.requested_tools and isinstance(output, str) and _asks_answer_tools_only(output):
        # the model answered through the framework's output tool (pydantic-ai's structured
        # output opens no span for it, and without content capture the agent span does not
        # carry the result either): an answer, not a tool request
        record.requested_tools = False
        record.final_answer = True


def agent_limit(attrs: Mapping[str, object], finish: str | None) -> str | None:
    """A limit an agent span names: its finish reason, an explicit attribute, or a framework's
    state field (Hermes' ``turn_exit_reason``)."""
    if finish is not None and finish.lower() in LIMIT_FINISH_REASONS:
        return finish
    return state_limit(attrs)


def state_limit(attrs: Mapping[str, object]) -> str | None:
    """A limit named by the agent span itself: an explicit attribute, or a framework's state
    field (Hermes' ``turn_exit_reason``)."""
    for key in LIMIT_ATTRIBUTE_KEYS:
        limit = attrs.get(key)
        if isinstance(limit, str) and limit:
            return limit[:MAX_REASON_CHARS]
    for key, pattern, name in LIMIT_STATES:
        value = attrs.get(key)
        if isinstance(value, str) and pattern.match(value):
            return name
    for rule in STEP_CAPS:
        steps, cap = attrs.get(rule.steps), attrs.get(rule.cap)
        if isinstance(steps, int) and isinstance(cap, int) and 0 < cap <= steps \
                and not (rule.exit_reason and rule.exit_reason in attrs):
            # (with the framework's exit reason recorded, a limit_states rule read it above)
            return rule.limit
    return None


def enveloped_output(attrs: Mapping[str, object]
                     ) -> tuple[object, object, object, object, object] | None:
    """(finish reason, input tokens, output tokens, messages, model) of a model call's output
    that a framework wrote as its own message objects (Haystack's ``replies``), or None. One
    JSON parse of that output, only for a model call that names no finish reason and no
    usage."""
    for rule in OUTPUT_ENVELOPES:
        raw = attrs.get(rule.attribute)
        if not isinstance(raw, str) or not raw.startswith("{"):
            continue
        messages = at_path(_parsed(raw), rule.messages)
        if not isinstance(messages, list) or not messages:
            continue
        finish: object = None
        model: object = None
        input_tokens = output_tokens = 0
        for message in messages:
            finish = at_path(message, rule.finish_reason) or finish
            model = (at_path(message, rule.model) if rule.model else None) or model
            value = at_path(message, rule.input_tokens) if rule.input_tokens else None
            input_tokens += value if isinstance(value, int) else 0
            value = at_path(message, rule.output_tokens) if rule.output_tokens else None
            output_tokens += value if isinstance(value, int) else 0
        return (finish, input_tokens or None, output_tokens or None, messages, model)
    return None


def unwrapped_exception(exc_type: str, message: str) -> tuple[str, str]:
    """(type, message) of the exception an exporter recorded as a generic one with the real
    exception's repr as its message (LangSmith: ``Exception("RuntimeError('boom')Traceback…")``
    -> ``("RuntimeError", "boom")``); the exception itself when it is no such wrapper."""
    pattern = WRAPPED_EXCEPTIONS.get(exc_type)
    match = pattern.match(message) if pattern is not None else None
    if match is None:
        return exc_type, message
    inner = match.group("message").strip()
    if inner[:1] in ("'", '"'):  # the repr of a string argument: its text
        try:
            value = ast.literal_eval(inner)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = None
        if isinstance(value, str):
            inner = value
    return match.group("type"), inner


def flagged_error(attrs: Mapping[str, object]) -> tuple[str, str] | None:
    """(error type, message) when a tool span that ended OK carries a framework's flag saying
    the call failed (Haystack's ``haystack.tool.error``), else None."""
    for flag, result, path in TOOL_ERROR_FLAGS:
        if attrs.get(flag) is True:
            message = at_path(_parsed(attrs.get(result)), path)
            return "tool_error", _message_text(message)
    return None


def prompt_limit(text: str) -> str | None:
    """The limit a framework announces in the last input message of a model call (Hermes'
    summary request, crewai's forced final answer, Agno's refusal of a call past its cap), or
    in the first (smolagents' system prompt)."""
    limit = _in_last_message(text, LIMIT_PROMPTS)
    if limit is None and LIMIT_SYSTEM_PROMPTS:
        head = text[:PROMPT_TAIL_CHARS]
        for prompt, system_limit in LIMIT_SYSTEM_PROMPTS:
            if prompt in head:
                return system_limit
    return limit


def announced_limit(last: str, instructions: str) -> str | None:
    """The limit a framework announces in a request it sends its model (the model endpoint's
    twin of :func:`prompt_limit`, on the request's own messages): in its last message (crewai's
    forced final answer, AgentScope's ``max_iters`` reminder, Agno's refusal of a call past its
    cap) or in its instructions (smolagents' system prompt at ``max_steps``)."""
    for needle, limit in LIMIT_PROMPTS:
        if needle in last:
            return limit
    head = instructions[:PROMPT_TAIL_CHARS]
    for prompt, system_limit in LIMIT_SYSTEM_PROMPTS:
        if prompt in head:
            return system_limit
    return None


def _in_last_message(text: str, table: tuple[tuple[str, str], ...]) -> str | None:
    """The limit of the first of ``table``'s texts found in the last message of ``text`` (a
    JSON message list, or a raw request whose messages end near its end)."""
    tail = text[-PROMPT_TAIL_CHARS:]
    last: str | None = None
    for needle, limit in table:
        if needle in tail:  # the common case: not there, and nothing is parsed
            if last is None:
                last = _last_message(text, tail)
            if needle in last:
                return limit
    return None


def answer_limit(output: object) -> str | None:
    """The limit a framework names by putting its own text in place of the answer, in the last
    message of an agent span's output (Microsoft Agent Framework's "Function invocation limit
    reached…" when its last request, without tools, still got no answer), or as the whole
    output (LlamaIndex's ``"None"`` response at ``max_function_calls``)."""
    if not isinstance(output, str):
        return None
    for pattern, limit in LIMIT_ANSWER_PATTERNS:
        if pattern.match(output):
            return limit
    return _in_last_message(output, LIMIT_ANSWERS)


def _last_message(text: str, tail: str) -> str:
    """The last message of a request's message list (a JSON list of messages, or an object
    holding one as ``messages``), as JSON text. Where a message's ``role`` key stands varies
    (Agno writes it after the content), so the list is parsed; a text that is no such JSON is
    read from its last ``"role"`` key on."""
    value = _parsed(text)
    messages = value.get("messages") if isinstance(value, dict) else value
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        return json.dumps(messages[-1], ensure_ascii=False)
    start = tail.rfind('"role"')
    return tail if start < 0 else tail[start:]


def result_error(attrs: Mapping[str, object]) -> tuple[str, str] | None:
    """(error type, message) when a tool span's result says the call failed though the span
    ended OK (LangChain's ToolMessage with status "error"), else None. Only a status field of
    the result's JSON says so: a result whose text mentions an error is a result."""
    for rule, markers in TOOL_RESULT_ERRORS:
        raw = attrs.get(rule.attribute)
        if isinstance(raw, str):
            if not _contains_all(raw, markers):
                continue  # the common case: no JSON parse
            value = _parsed(raw)
        elif isinstance(raw, dict):
            value = raw
        else:
            continue
        if all(at_path(value, path) == wanted for path, wanted in rule.where):
            return rule.error_type, _message_text(at_path(value, rule.message))
    for attribute, marker, pattern in TOOL_RESULT_ERROR_TEXTS:
        raw = attrs.get(attribute)
        if isinstance(raw, str) and marker in raw:
            match = pattern.match(raw)
            if match:
                return "tool_error", match.group("message")
    return None


def _contains_all(text: str, parts: tuple[str, ...]) -> bool:
    for part in parts:  # noqa: SIM110 (on every tool result: an all() generator costs 4x)
        if part not in text:
            return False
    return True


def at_path(value: object, path: tuple[str | int, ...]) -> object:
    """``value[path[0]][path[1]]…``, or None where a key is missing or a level is no object
    (an int indexes a list: None where it is out of range or the level is no list)."""
    for key in path:
        if isinstance(key, int):
            if not isinstance(value, list) or not -len(value) <= key < len(value):
                return None
            value = value[key]
            continue
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _message_text(content: object) -> str:
    """A message's content as text: a string, or the text of its parts (LangChain's content
    blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part if isinstance(part, str) else part.get("text")
                 for part in content if isinstance(part, (str, dict))]
        return "\n".join(part for part in parts if isinstance(part, str))
    if content is None:
        return ""
    return json.dumps(content, ensure_ascii=False, default=str)


def fill_reported_calls(record: SpanRecord, conversation: str,
                         attrs: Mapping[str, object]) -> None:
    """Model calls an agent span reports in the conversation it returns (crewai's TaskOutput):
    one per assistant message, plus the answering call when the conversation ends with a tool
    result and there is an answer; and the framework's cap on them, if they reached it."""
    value = _parsed(conversation)
    messages = value.get("messages") if isinstance(value, dict) else None
    if not isinstance(messages, list) or not messages:
        return
    calls = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    last = messages[-1]
    if isinstance(last, dict) and last.get("role") == "tool" and record.final_answer:
        calls += 1
    record.model_calls = calls
    if record.limit_stop is not None:
        return
    for key, path, limit in CALL_LIMITS:
        cap: object = _parsed(attrs.get(key))
        for step in path:
            cap = cap.get(step) if isinstance(cap, dict) else None
        if isinstance(cap, int) and not isinstance(cap, bool) and 0 < cap <= calls - 1 \
                and isinstance(last, dict) and last.get("role") == "tool":
            # the cap's worth of calls asked for tools, then one more was made for the answer
            record.limit_stop = limit
            return


def _parsed(output: object) -> object:
    if isinstance(output, str):
        stripped = output.lstrip()
        if stripped[:1] in ("[", "{"):
            try:
                return json.loads(output)
            except (ValueError, RecursionError):  # (nested deeper than the parser goes)
                return output
    return output


def output_finish_reason(output: object) -> object:
    """The finish reason of the last message of a message list (JSON, or structured) that has
    one."""
    value = _parsed(output) if isinstance(output, str) else output
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list):
        for message in reversed(value):
            if isinstance(message, dict) and message.get("finish_reason"):
                return message["finish_reason"]
    return None


def _requests_tools(output: object) -> bool:
    if isinstance(output, str):
        if not any(marker in output for marker in TOOL_REQUEST_MARKERS):
            return False  # the common case: no JSON parse
        output = _parsed(output)
    return _has_tool_request(output, 0)


def _asks_answer_tools_only(output: str) -> bool:
    """Whether every tool a model's output (JSON) asks for is an output tool."""
    if not ANSWER_TOOL_MARKERS or ANSWER_TOOL_SCAN not in output:
        return False  # the common case: one pass over the text, no JSON parse
    for marker in ANSWER_TOOL_MARKERS:
        if marker in output:
            break
    else:
        return False
    names: list[object] = []
    _tool_request_names(_parsed(output), 0, names)
    return bool(names) and all(
        isinstance(name, str) and (name in ANSWER_TOOLS or name.startswith(ANSWER_TOOL_PREFIXES))
        for name in names)


def _tool_request_names(value: object, depth: int, names: list[object]) -> None:
    """The names of the tools a model's output asks for, in the shapes
    :func:`_has_tool_request` knows (None for a request whose name is not there)."""
    if depth > MAX_JSON_DEPTH:
        return
    if isinstance(value, dict):
        if _typed(value, TOOL_REQUEST_TYPES):
            names.append(_call_name(value))
            return
        for key, item in value.items():
            if key in TOOL_REQUEST_KEYS and item:
                if isinstance(item, list):
                    names.extend(_call_name(call) for call in item)
                else:
                    names.append(_call_name(item))
            elif isinstance(item, (dict, list)):
                _tool_request_names(item, depth + 1, names)
    elif isinstance(value, list):
        for item in value:
            _tool_request_names(item, depth + 1, names)


def _typed(value: dict[str, object], types: frozenset[str]) -> bool:
    """Whether a part's ``type`` is one of ``types`` (it may be of any JSON type: a list is
    none, and no error)."""
    kind = value.get("type")
    return isinstance(kind, str) and kind in types


def _call_name(call: object) -> object:
    """A tool request's tool name: ``name``, or OpenAI's ``function.name``."""
    if not isinstance(call, dict):
        return None
    name = call.get("name")
    if name is None and isinstance(call.get("function"), dict):
        name = call["function"].get("name")
    return name


def _has_tool_request(value: object, depth: int) -> bool:
    if depth > MAX_JSON_DEPTH:
        return False
    if isinstance(value, dict):
        if _typed(value, TOOL_REQUEST_TYPES):
            return True
        for key, item in value.items():
            if key in TOOL_REQUEST_KEYS and item:
                return True
            if isinstance(item, (dict, list)) and _has_tool_request(item, depth + 1):
                return True
    elif isinstance(value, list):
        return any(_has_tool_request(item, depth + 1) for item in value)
    return False


ANSWER_SKIP_TYPES = TOOL_REQUEST_TYPES | {"reasoning", "thinking", "redacted_thinking"}
ANSWER_SKIP_KEYS = TOOL_REQUEST_KEYS | {"arguments", "input", "usage", "role", "id"}
MAX_ANSWER_PARTS = 64


def answer_text(output: object, chunked: bool = False) -> str | None:
    """The text of a model call's answer: the output itself when it is plain text, else the
    text parts of its messages in the shapes of GenAI (``parts[].content``), OpenAI (``content``
    or ``choices[].message.content``), Anthropic (``content[].text``) and the Responses API
    (``output[].content[].text``): tool requests and reasoning left out, a line each, or, when
    they are a streamed answer's chunks (``chunked``), joined as they came. None when it has no
    text (a structured output, a tool request)."""
    value = _parsed(output)
    if isinstance(value, str):
        return value if value.strip() else None
    texts: list[str] = []
    _answer_parts(value, 0, texts)
    joined = "".join(texts).strip() if chunked \
        else "\n".join(text for text in texts if text.strip())
    # (JSON may escape a lone surrogate: no text a page or a label can encode)
    return joined.encode("utf-8", "replace").decode("utf-8") if joined else None


def _answer_parts(value: object, depth: int, texts: list[str]) -> None:
    if depth > MAX_JSON_DEPTH or len(texts) >= MAX_ANSWER_PARTS:
        return
    if isinstance(value, dict):
        if _typed(value, ANSWER_SKIP_TYPES):
            return
        for key, item in value.items():
            if key in ANSWER_SKIP_KEYS:
                continue
            if key in TEXT_KEYS and isinstance(item, str):
                texts.append(item)
            elif isinstance(item, (dict, list)):
                _answer_parts(item, depth + 1, texts)
    elif isinstance(value, list):
        for item in value:
            _answer_parts(item, depth + 1, texts)


def has_text(output: object) -> bool:
    """Whether an output says anything: a message list (GenAI ``output.messages``) needs a
    non-empty text part (an agent stopped at its limit may end with an empty one); any other
    non-empty value is an answer (structured output included)."""
    value = _parsed(output)
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list) and value and all(
            isinstance(message, dict) and "role" in message for message in value):
        # an instruction is no answer (Koog's agent span's output is its system prompt)
        return _text_in([message for message in value if not _instruction(message)], 0)
    return True


TEXT_KEYS = frozenset({"text", "content"})
# the roles of a message list's instructions to the model (any case: Koog writes `System`)
INSTRUCTION_ROLES = frozenset({"system", "developer"})


def _instruction(message: Mapping[str, object]) -> bool:
    role = message.get("role")
    return isinstance(role, str) and role.lower() in INSTRUCTION_ROLES


def _text_in(value: object, depth: int) -> bool:
    if depth > MAX_JSON_DEPTH:
        return False
    if isinstance(value, dict):
        for key, item in value.items():
            if key in TEXT_KEYS and isinstance(item, str) and item.strip():
                return True
            if isinstance(item, (dict, list)) and _text_in(item, depth + 1):
                return True
        return False
    if isinstance(value, list):
        return any(_text_in(item, depth + 1) for item in value)
    return value is not None and not isinstance(value, bool)
