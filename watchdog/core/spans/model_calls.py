"""What a model-call span records (:func:`_fill_llm`): its tokens, its cost and what it is
priced by, its message count, its finish reason and answer or tool request, the tool calls it
asked for (:func:`asked_tools`), its request as a hash (:func:`request_hash`) and a framework's
"give your final answer" request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import Any

from watchdog.core.bounds import reported_cost
from watchdog.core.redact import brief
from watchdog.core.spans.attributes import (
    ANY_HIDDEN_CONTENT,
    F_ANSWER_TEXT,
    F_CACHE_READ,
    F_CACHE_WRITE,
    F_FINISH_REASON,
    F_INPUT_TOKENS,
    F_LLM_INPUT,
    F_LLM_OUTPUT,
    F_MESSAGES,
    F_MESSAGES_DELTA,
    F_MODEL,
    F_OUTPUT_MESSAGES,
    F_OUTPUT_TOKENS,
    F_PROMPT,
    F_PROMPT_TEXT,
    F_PROVIDER,
    F_REPORTED_COST,
    F_RESPONSE_ID,
    F_TOTAL_TOKENS,
    FLAT_INPUT_PREFIXES,
    FLAT_OUTPUT_PREFIXES,
    FLAT_TOOL_CALLS,
    HIDDEN_CONTENT,
    HIDDEN_CONTENT_CHARS,
    LLM_SPAN_SUFFIXES,
    MESSAGES_DELTA_KEYS,
    REPORTED_COST_KEYS,
    USAGE_JSON,
)
from watchdog.core.spans.outcome import (
    answer_text,
    at_path,
    enveloped_output,
    fill_model_outcome,
    prompt_limit,
)
from watchdog.core.spans.record import MAX_ASKED_TOOLS, OTHER, SpanRecord
from watchdog.core.spans.schema import Path
from watchdog.core.spans.values import (
    _JSON_DECODER,
    MAX_BRIEF_CHARS,
    MAX_NAME_CHARS,
    FirstValues,
    _count_messages,
    _flat_count,
    _int,
    _load_json,
    stable_hash,
)


def _usage(attrs: Mapping[str, object]) -> tuple[object, object]:
    """(input, output) tokens of a usage object (:attr:`Convention.usage_json`), or Nones."""
    for key, input_path, output_path in USAGE_JSON:
        raw = attrs.get(key)
        if isinstance(raw, str) and raw.startswith("{"):
            try:
                raw = _load_json(raw)
            except (ValueError, RecursionError):
                continue
        if isinstance(raw, dict):
            return at_path(raw, input_path), at_path(raw, output_path)
    return None, None


def _fill_price_facts(record: SpanRecord, firsts: FirstValues) -> None:
    """What the call is priced by (DESIGN §13): its model and provider; its cached tokens are
    part of its input (never more than it)."""
    model: str | None = firsts[F_MODEL]
    if model and model[0] == '"' and model[-1] == '"':  # JSON-encoded (MLflow's values)
        try:
            decoded = json.loads(model)
        except ValueError:
            decoded = None
        model = decoded if isinstance(decoded, str) else None
    if model:
        record.model = model[:MAX_NAME_CHARS]
    provider = firsts[F_PROVIDER]
    if provider:
        record.provider = provider[:MAX_NAME_CHARS]
    read = record.cache_read_tokens = min(record.cache_read_tokens, record.input_tokens)
    record.cache_write_tokens = min(record.cache_write_tokens, record.input_tokens - read)


def _fill_llm(record: SpanRecord, attrs: Mapping[str, object], firsts: FirstValues,
              span: Any, hidden: frozenset[str] = HIDDEN_CONTENT, chunked: bool = False) -> None:
    """``hidden``: the texts that are hidden content on this span (its scope's); ``chunked``:
    its output messages are a streamed answer's chunks (its scope's entry says so)."""
    response_id = firsts[F_RESPONSE_ID]
    if response_id:
        record.response_id = response_id[:MAX_NAME_CHARS]
    input_tokens = firsts[F_INPUT_TOKENS]
    output_tokens = firsts[F_OUTPUT_TOKENS]
    finish = firsts[F_FINISH_REASON]
    # (a hidden output is read as it is: the model said something, and the call is the answer
    # unless a tool call follows, as for any output that asks for no tool)
    output_messages = firsts[F_OUTPUT_MESSAGES]
    if finish is None and output_messages is None:
        # a framework's own message objects (Haystack's replies, LangChain's LLMResult): one
        # parse of the output, its usage where the attributes name none
        envelope = enveloped_output(attrs)
        if envelope is not None:
            finish, envelope_input, envelope_output, output_messages, model = envelope
            if input_tokens is None and output_tokens is None:
                input_tokens, output_tokens = envelope_input, envelope_output
            if isinstance(model, str) and model:
                record.model = model[:MAX_NAME_CHARS]
    if input_tokens is None and output_tokens is None and USAGE_JSON:
        input_tokens, output_tokens = _usage(attrs)
    messages = _count_messages(firsts[F_MESSAGES])
    flat_out = 0
    flat_tools = False
    if not messages:  # flattened conventions: the count is in the keys, walked only now
        keys = [kv.key for kv in span.attributes]
        messages = _flat_count(keys, FLAT_INPUT_PREFIXES)
        flat_out = _flat_count(keys, FLAT_OUTPUT_PREFIXES)
        # an output message with tool calls (llm.output_messages.{i}.message.tool_calls.*)
        flat_tools = flat_out > 0 and any(FLAT_TOOL_CALLS in key for key in keys
                                          if key.startswith(FLAT_OUTPUT_PREFIXES))
    elif output_messages is not None:
        flat_out = _count_messages(output_messages)
    if not messages and not flat_out and finish is None and output_messages is None \
            and input_tokens is None and output_tokens is None and not record.error \
            and firsts[F_TOTAL_TOKENS] is None \
            and firsts[F_LLM_INPUT] is not None \
            and not (LLM_SPAN_SUFFIXES and span.name.endswith(LLM_SPAN_SUFFIXES)):
        # Its input recorded (content capture is on), yet nothing a model call carries: no
        # messages in or out, no finish reason, no usage. An instrumentation that gives the
        # model kind to every traced method of a model object made it (OpenInference's
        # LlamaIndex: `_prepare_chat_with_tools`, and an `astream_chat` wrapping the one that
        # called the model): no model call. (A span that records nothing at all, the OpenAI
        # Agents SDK's `generation` for a model of the application's own, stays one.)
        record.kind = OTHER
        return
    record.input_tokens = _int(input_tokens)
    record.output_tokens = _int(output_tokens)
    if REPORTED_COST_KEYS:
        record.reported_cost_usd = reported_cost(firsts[F_REPORTED_COST])
        record.cache_read_tokens = _int(firsts[F_CACHE_READ])
        record.cache_write_tokens = _int(firsts[F_CACHE_WRITE])
    if not record.input_tokens and not record.output_tokens:
        # OpenLLMetry may report only a total; count it as input so totals stay right.
        record.input_tokens = _int(firsts[F_TOTAL_TOKENS])
    _fill_price_facts(record, firsts)
    output = output_messages if output_messages is not None else firsts[F_LLM_OUTPUT]
    fill_model_outcome(record, finish, output)
    if flat_tools and not record.requested_tools:
        # no finish reason, and an output text that hides its tool requests (a Python repr):
        # the flattened output messages still say the model asked for tools
        record.requested_tools = True
        record.final_answer = False
    if record.final_answer:
        # its text: the run's answer when no span of the agent carries one (a hand-written
        # loop, loose calls); never an instrumentation's placeholder for hidden content
        text = answer_text(firsts[F_ANSWER_TEXT] or output, chunked)
        if text is not None and not (len(text) <= HIDDEN_CONTENT_CHARS
                                     and text.strip() in hidden):
            record.final_output = brief(text, MAX_BRIEF_CHARS)
    if record.requested_tools:
        record.asked_tools = asked_tools(output_messages, span)
    if messages:
        messages += max(flat_out, 1)
    elif MESSAGES_DELTA_KEYS:
        record.messages_delta = _count_messages(firsts[F_MESSAGES_DELTA])
    record.messages = messages
    record.prompt = firsts[F_PROMPT]
    if record.limit_stop is None and not record.requested_tools:
        # (a framework's "give your final answer" request offers no tools: never asks for any)
        prompt = firsts[F_PROMPT_TEXT]
        if prompt is not None:
            record.limit_stop = prompt_limit(prompt)


# A model call's input longer than this is not read for its request (SpanRecord.input_hash); one
# without the JSON of a user message in a form looked for first (USER_MARKERS) is parsed whole
# only up to MAX_PARSED_REQUEST_CHARS. A run's request is its first model call's.
MAX_REQUEST_CHARS = 65_536
MAX_PARSED_REQUEST_CHARS = 16_384
USER_ROLES = frozenset({"user", "human"})
# An unescaped "role" occurs in JSON text only as a key: the last of these is the last user
# message, decoded alone from the "{" that opens it (a few tried, nearest first).
USER_MARKERS = ('"role": "user"', '"role":"user"')
MAX_MESSAGE_STARTS = 8


def request_hash(value: object) -> int | None:
    """The request a model call was given — the text of its last user message (or its whole
    input, when that is plain text), case and spacing ignored — as a 64-bit hash; None when it
    is unknown, too long to read or hidden."""
    if isinstance(value, str):
        if len(value) > MAX_REQUEST_CHARS:
            return None
        message = _last_user_message(value)
        if message is not None:
            value = [message]
        elif value.lstrip()[:1] in ("[", "{") and len(value) <= MAX_PARSED_REQUEST_CHARS:
            with suppress(ValueError):  # (not JSON: a plain prompt)
                value = _load_json(value)
    if isinstance(value, dict):
        value = value.get("messages", value.get("input"))
    text: str | None = None
    if isinstance(value, str):
        text = value
    elif isinstance(value, list):
        for item in reversed(value):
            if isinstance(item, dict) and str(item.get("role")) in USER_ROLES:
                text = answer_text(item)
                break
    if text is None:
        return None
    text = " ".join(text.split())
    if not text or (len(text) <= HIDDEN_CONTENT_CHARS and text in ANY_HIDDEN_CONTENT):
        return None
    return stable_hash(text.casefold())


def _last_user_message(text: str) -> dict[str, Any] | None:
    """The last user message of a JSON message list, without parsing the list (a long
    conversation's input is parsed for one message)."""
    at = max(text.rfind(marker) for marker in USER_MARKERS)
    start = at
    for _ in range(MAX_MESSAGE_STARTS if at >= 0 else 0):
        start = text.rfind("{", 0, start)
        if start < 0:
            break
        try:
            value, end = _JSON_DECODER.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if end > at and isinstance(value, dict) and value.get("role") == "user":
            return value
    return None

# Where a model call's output names the tool calls it asked for (SpanRecord.asked_tools). In a
# JSON message list: the list at a message's key, its items of a type (None: any), the name and
# the call id at the first path present. Flattened: <prefix>{i}<infix>{j}<name or id suffix>.
ASKED_TOOL_LISTS: tuple[tuple[str, str | None, tuple[Path, ...], Path], ...] = (
    ("parts", "tool_call", (("name",),), ("id",)),  # OTel GenAI
    ("tool_calls", None, (("function", "name"), ("name",)), ("id",)),  # OpenAI's messages
    ("parts", None, (("functionCall", "name"),), ("functionCall", "id")),  # the Gemini API's
)
# what an output that asks for a tool by one of those lists contains (else not parsed for them)
ASKED_TOOL_MARKERS = ('"tool_call', '"functionCall"')
ASKED_TOOL_FLAT = (
    ("llm.output_messages.", ".message.tool_calls.", ".tool_call.function.name",
     ".tool_call.id"),  # OpenInference
    ("gen_ai.completion.", ".tool_calls.", ".name", ".id"),  # OpenLLMetry
)


# The compiled reading of a JSON output's tool calls (watchdog.core.spans.native installs it with
# the compiled decode): what asked_tools returns, or None where this Python must read them.
compiled_asked: Callable[[str], tuple[tuple[str, str], ...] | None] | None = None


def asked_tools(output_messages: object, span: Any) -> tuple[tuple[str, str], ...]:
    """The tool calls (name, call id or "") a model call's output asks for, at most
    ``MAX_ASKED_TOOLS``, from its JSON output messages or else its span's flattened output keys
    (its attributes read only then: the compiled decode builds them on demand)."""
    asked: list[tuple[str, str]] = []
    messages: object = output_messages
    if isinstance(messages, str) and any(marker in messages for marker in ASKED_TOOL_MARKERS):
        if compiled_asked is not None and (found := compiled_asked(messages)) is not None:
            return found
        try:
            messages = _load_json(messages)
        except ValueError:
            messages = None
    if isinstance(messages, list):
        for message in messages:
            for list_key, item_type, name_paths, id_path in ASKED_TOOL_LISTS:
                calls = message.get(list_key) if isinstance(message, dict) else None
                for call in calls if isinstance(calls, list) else ():
                    if item_type is not None and at_path(call, ("type",)) != item_type:
                        continue
                    name = next((value for path in name_paths
                                 if isinstance(value := at_path(call, path), str)), None)
                    call_id = at_path(call, id_path)
                    if name and len(asked) < MAX_ASKED_TOOLS:
                        asked.append((name[:MAX_NAME_CHARS],
                                      call_id[:MAX_NAME_CHARS] if isinstance(call_id, str)
                                      else ""))
        return tuple(asked)
    flat: dict[str, list[str]] = {}  # "<i>.<j>" -> [name, id]
    for kv in span.attributes if span is not None else ():
        key = kv.key
        for prefix, infix, name_suffix, id_suffix in ASKED_TOOL_FLAT:
            if not key.startswith(prefix) or infix not in key:
                continue
            for slot, suffix in ((0, name_suffix), (1, id_suffix)):
                if key.endswith(suffix):
                    index = key[len(prefix):len(key) - len(suffix)]
                    text = kv.value.string_value
                    if text and (index in flat or len(flat) < MAX_ASKED_TOOLS):
                        flat.setdefault(index, ["", ""])[slot] = text[:MAX_NAME_CHARS]
                    break
    return tuple((name, call_id) for name, call_id in flat.values() if name)
