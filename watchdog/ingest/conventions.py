"""Normalise one OTLP span, in any supported convention, into a :class:`SpanRecord`.

Theory of operation
-------------------
Agents reach us through four families of instrumentation that name the same facts differently:

* OTel GenAI semantic conventions (``gen_ai.operation.name``, ``gen_ai.tool.name``, ...), with
  the legacy token names ``gen_ai.usage.prompt_tokens|completion_tokens``;
* OpenInference (``openinference.span.kind``, ``tool.name``, ``input.value``,
  ``llm.token_count.*``, flattened ``llm.input_messages.{i}.*``);
* OpenLLMetry / Traceloop (``traceloop.span.kind``, ``llm.request.type``,
  ``gen_ai.prompt.{i}.*``, ``llm.usage.total_tokens``);
* pydantic-ai, which follows GenAI but adds run-level ``gen_ai.aggregated_usage.*`` (never
  counted: the chat spans already carry it), the output tool ``final_result`` (a final answer,
  not a tool call) and, in older versions, ``agent run`` / ``running tool`` spans with
  ``tool_arguments`` / ``tool_response``.

Each fact is read from an ordered list of attribute names (first present wins), so supporting a
new convention is adding a name to a tuple. Tokens are taken from LLM spans only, which is what
keeps agent-level aggregates from being counted twice. This module is pure: one span and its
resource in, one record out (or :class:`SpanRejected`).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from watchdog.ingest.decode import any_value
from watchdog.ingest.redact import brief, mask, redact
from watchdog.runs.record import (
    AGENT,
    BUDGET_KEYS,
    KEY_AGENT_CALL,
    KEY_TRACE,
    KEY_WATCHDOG,
    LLM,
    OTHER,
    TOOL,
    KeySource,
    SpanKind,
    SpanRecord,
)

# Bounds on what one span may put into memory; longer strings are cut (and redacted) first.
MAX_NAME_CHARS = 200
MAX_BRIEF_CHARS = 500
MAX_ERROR_CHARS = 500

STATUS_CODE_ERROR = 2

# ---------------------------------------------------------------------------------------------
# Attribute names, in order of precedence.
RUN_ID_KEYS = ("watchdog.run.id",)
AGENT_CALL_ID_KEYS = ("gen_ai.agent.call.id",)
AGENT_NAME_KEYS = ("watchdog.agent.name", "gen_ai.agent.name", "agent.name", "agent_name")
SESSION_KEYS = ("watchdog.session.id", "gen_ai.conversation.id", "session.id")
PARENT_RUN_KEYS = ("watchdog.parent_run.id",)
TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name", "tool_name")
TOOL_ARGS_KEYS = ("gen_ai.tool.call.arguments", "tool_arguments", "input.value",
                  "traceloop.entity.input")
TOOL_RESULT_KEYS = ("gen_ai.tool.call.result", "tool_response", "output.value",
                    "traceloop.entity.output")
AGENT_OUTPUT_KEYS = ("final_result", "output.value", "traceloop.entity.output",
                     "gen_ai.output.messages")
INPUT_TOKEN_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens",
                    "llm.token_count.prompt", "llm.usage.prompt_tokens")
OUTPUT_TOKEN_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                     "llm.token_count.completion", "llm.usage.completion_tokens")
TOTAL_TOKEN_KEYS = ("llm.usage.total_tokens", "llm.token_count.total", "gen_ai.usage.total_tokens")
FINISH_REASON_KEYS = ("gen_ai.response.finish_reasons", "llm.finish_reason",
                      "gen_ai.completion.0.finish_reason", "llm.response.finish_reason")
MESSAGES_JSON_KEYS = ("gen_ai.input.messages", "pydantic_ai.all_messages")
OUTPUT_MESSAGES_JSON_KEYS = ("gen_ai.output.messages",)
# Flattened conventions: the message count is the highest index + 1.
FLAT_INPUT_PREFIXES = ("llm.input_messages.", "gen_ai.prompt.")
FLAT_OUTPUT_PREFIXES = ("llm.output_messages.", "gen_ai.completion.")

KIND_KEYS = ("gen_ai.operation.name", "openinference.span.kind", "traceloop.span.kind",
             "llm.request.type", "traceloop.entity.name", "error.type")


LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
# OpenLLMetry also sets llm.request.type on embedding and rerank calls: those are not iterations.
TRACELOOP_LLM_REQUEST_TYPES = frozenset({"chat", "completion"})
TOOL_OPERATIONS = frozenset({"execute_tool"})
AGENT_OPERATIONS = frozenset({"invoke_agent", "create_agent", "invoke_workflow"})
OPENINFERENCE_KINDS = {"LLM": SpanKind.LLM, "TOOL": SpanKind.TOOL, "AGENT": SpanKind.AGENT}
TRACELOOP_KINDS = {"tool": SpanKind.TOOL, "agent": SpanKind.AGENT, "workflow": SpanKind.AGENT}
LEGACY_SPAN_NAMES = {"agent run": SpanKind.AGENT, "running tool": SpanKind.TOOL}

# pydantic-ai's output tools deliver the final answer; they are not work the agent did.
OUTPUT_TOOL_NAMES = frozenset({"final_result"})
OUTPUT_TOOL_PREFIX = "final_result_"
# A model response that finished for one of these reasons is an answer, not a tool request.
ANSWER_FINISH_REASONS = frozenset({"stop", "end_turn", "complete", "completed", "eos"})


def select_attributes(key_values: Any) -> dict[str, object]:
    """Decode only the attributes normalisation reads.

    Real agent spans carry large attributes nothing here needs (tool definitions, JSON schemas,
    request parameters); skipping them avoids building a Python string for each. Flattened
    message keys (``llm.input_messages.{i}.*``) are not kept either: the rare LLM span without
    JSON messages walks its keys again (:func:`_fill_llm`), so no other span pays a prefix test
    per attribute.
    """
    wanted = WANTED_ATTRIBUTES
    selected: dict[str, object] = {}
    for kv in key_values:
        key = kv.key
        if key in wanted:
            value = kv.value
            # A non-empty string_value can only be the set member of the oneof; reading it first
            # spares the common case the WhichOneof dispatch.
            text = value.string_value
            selected[key] = text if text else any_value(value)
    return selected


class SpanRejected(ValueError):
    """A span that cannot be used; ``reason`` is the bounded metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _first(attrs: Mapping[str, object], keys: tuple[str, ...]) -> object | None:
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return value
    return None


def _first_str(attrs: Mapping[str, object], keys: tuple[str, ...]) -> str | None:
    """:func:`_first` as a string (its own loop: called ~6 times per span)."""
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return value if isinstance(value, str) else str(value)
    return None


def _int(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float):
        return max(int(value), 0)
    if isinstance(value, str):
        try:
            return max(int(float(value)), 0)
        except ValueError:
            return 0
    return 0


_SIGNED_64 = struct.Struct(">q")  # the same value as int.from_bytes(..., "big", signed=True)


def stable_hash(text: str) -> int:
    """A 64-bit hash that is the same in every process (Python's ``hash`` is salted)."""
    digest = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).digest()
    value: int = _SIGNED_64.unpack(digest)[0]
    return value


# json.dumps builds a new encoder on every call with non-default options; this one is reused.
# Its values come from json.loads or OTLP AnyValues, which cannot be circular: no check.
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                   check_circular=False)
_JSON_DECODER = json.JSONDecoder()
_JSON_WHITESPACE = " \t\n\r"  # all the whitespace JSON allows around a value


def _load_json(text: str) -> Any:
    """``json.loads(text)``, without the ~0.8 µs its wrapper spends per call around
    ``raw_decode`` (a BOM test and two whitespace regexes); raises ``ValueError`` where it does.
    """
    start = len(text) - len(text.lstrip(_JSON_WHITESPACE))
    value, end = _JSON_DECODER.raw_decode(text, start)
    if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
        raise ValueError("extra data after the JSON value")
    return value


def canonical_arguments(raw: object) -> str:
    """Tool arguments as canonical JSON (sorted keys, no whitespace) so that the same call with
    keys in another order or other spacing counts as the same call."""
    value: Any = raw
    if isinstance(raw, str):
        try:
            value = _load_json(raw)
        except ValueError:
            return raw.strip()
    try:
        return _CANONICAL_JSON.encode(value)
    except (TypeError, ValueError):
        return str(raw)


# An agent span may carry its output attribute with nothing in it (no output messages).
EMPTY_OUTPUTS = frozenset({"[]", "{}", "null", '""'})


def _is_empty_output(value: object) -> bool:
    if isinstance(value, str):
        return value.strip() in EMPTY_OUTPUTS
    return isinstance(value, (list, dict)) and not value


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return str(value)


def _count_messages(value: object) -> int:
    """Length of a JSON-encoded message list without parsing it.

    In JSON an unescaped ``"role"`` token occurs only as a key (or the literal string "role"),
    and every chat message object has exactly one ``role``; counting it is ~100x cheaper than
    ``json.loads`` on conversations that grow to hundreds of KiB.
    """
    if isinstance(value, str):
        return value.count('"role"')
    if isinstance(value, list):
        return len(value)
    return 0


def _flat_count(keys: Iterable[str], prefixes: tuple[str, ...]) -> int:
    highest = -1
    for key in keys:
        for prefix in prefixes:
            if key.startswith(prefix):
                index, _, _ = key[len(prefix):].partition(".")
                if index.isdigit():
                    highest = max(highest, int(index))
    return highest + 1


def classify(name: str, attrs: Mapping[str, object]) -> SpanKind:
    operation = attrs.get("gen_ai.operation.name")
    if isinstance(operation, str):
        if operation in LLM_OPERATIONS:
            return LLM
        if operation in TOOL_OPERATIONS:
            return TOOL
        if operation in AGENT_OPERATIONS:
            return AGENT
    oi_kind = attrs.get("openinference.span.kind")
    if isinstance(oi_kind, str) and oi_kind.upper() in OPENINFERENCE_KINDS:
        return OPENINFERENCE_KINDS[oi_kind.upper()]
    tl_kind = attrs.get("traceloop.span.kind")
    if isinstance(tl_kind, str) and tl_kind in TRACELOOP_KINDS:
        return TRACELOOP_KINDS[tl_kind]
    request_type = attrs.get("llm.request.type")
    if isinstance(request_type, str) and request_type in TRACELOOP_LLM_REQUEST_TYPES:
        return LLM
    legacy = LEGACY_SPAN_NAMES.get(name)
    if legacy is not None:
        return legacy
    if name.startswith("running tool") or name.startswith("execute_tool "):
        return TOOL
    if name.startswith("invoke_agent") or name.startswith("agent run"):
        return AGENT
    return OTHER


def _is_chain(attrs: Mapping[str, object]) -> bool:
    oi_kind = attrs.get("openinference.span.kind")
    return isinstance(oi_kind, str) and oi_kind.upper() == "CHAIN"


def _tool_name(name: str, attrs: Mapping[str, object]) -> str:
    tool = _first_str(attrs, TOOL_NAME_KEYS)
    if tool is None and attrs.get("traceloop.span.kind") == "tool":
        tool = _first_str(attrs, ("traceloop.entity.name",))
    if tool is None:
        for prefix in ("execute_tool ", "running tool: ", "running tool "):
            if name.startswith(prefix):
                tool = name[len(prefix):]
                break
    return (tool or "unknown")[:MAX_NAME_CHARS]


def _exception(events: Any) -> tuple[str | None, str | None]:
    for event in events:
        if event.name == "exception":
            exc_type = exc_message = None
            for kv in event.attributes:
                if kv.key == "exception.type":
                    exc_type = kv.value.string_value
                elif kv.key == "exception.message":
                    exc_message = kv.value.string_value
            return exc_type, exc_message
    return None, None


BUDGET_ATTRIBUTES = frozenset("watchdog.budget." + key for key in BUDGET_KEYS)

WANTED_ATTRIBUTES = frozenset(
    RUN_ID_KEYS + AGENT_CALL_ID_KEYS + AGENT_NAME_KEYS + SESSION_KEYS + PARENT_RUN_KEYS
    + TOOL_NAME_KEYS + TOOL_ARGS_KEYS + TOOL_RESULT_KEYS + AGENT_OUTPUT_KEYS + INPUT_TOKEN_KEYS
    + OUTPUT_TOKEN_KEYS + TOTAL_TOKEN_KEYS + FINISH_REASON_KEYS + MESSAGES_JSON_KEYS
    + OUTPUT_MESSAGES_JSON_KEYS + KIND_KEYS) | BUDGET_ATTRIBUTES


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource's attributes and the facts spans fall back on, resolved once per resource
    rather than once for each of its spans."""

    attrs: Mapping[str, object]
    run_id: str | None
    agent: str | None
    service: str | None  # already cut to MAX_NAME_CHARS
    session: str | None
    parent_run: str | None
    announces_budget: bool

    @classmethod
    def of(cls, attrs: Mapping[str, object]) -> Resource:
        service = _first_str(attrs, ("service.name",))
        return cls(attrs=attrs, run_id=_first_str(attrs, RUN_ID_KEYS),
                   agent=_first_str(attrs, AGENT_NAME_KEYS),
                   service=service[:MAX_NAME_CHARS] if service else None,
                   session=_first_str(attrs, SESSION_KEYS),
                   parent_run=_first_str(attrs, PARENT_RUN_KEYS),
                   announces_budget=not BUDGET_ATTRIBUTES.isdisjoint(attrs))


def _budget(attrs: Mapping[str, object], resource: Resource) -> dict[str, float] | None:
    if not resource.announces_budget and BUDGET_ATTRIBUTES.isdisjoint(attrs):
        return None  # the common case, decided without a lookup per key
    budget: dict[str, float] | None = None
    for key in BUDGET_KEYS:
        value = attrs.get("watchdog.budget." + key, resource.attrs.get("watchdog.budget." + key))
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            if budget is None:
                budget = {}
            budget[key] = float(value)
    return budget


def run_key(trace_id: str, attrs: Mapping[str, object],
            resource: Resource) -> tuple[str, KeySource]:
    explicit = _first_str(attrs, RUN_ID_KEYS) or resource.run_id
    if explicit:
        return explicit[:MAX_NAME_CHARS], KEY_WATCHDOG
    call_id = _first_str(attrs, AGENT_CALL_ID_KEYS)
    if call_id:
        return call_id[:MAX_NAME_CHARS], KEY_AGENT_CALL
    return "trace:" + trace_id, KEY_TRACE


def normalise(span: Any, attrs: Mapping[str, object], resource: Resource) -> SpanRecord:
    """One OTLP ``Span`` (with its decoded attributes and its resource) as a record."""
    raw_trace, raw_span = span.trace_id, span.span_id
    if len(raw_trace) != 16 or raw_trace == b"\0" * 16:
        raise SpanRejected("invalid_trace_id", "span has no valid 16-byte trace_id")
    if len(raw_span) != 8 or raw_span == b"\0" * 8:
        raise SpanRejected("invalid_span_id", "span has no valid 8-byte span_id")
    trace_id = raw_trace.hex()
    raw_parent = span.parent_span_id
    parent = raw_parent.hex() if len(raw_parent) == 8 and raw_parent != b"\0" * 8 else None
    name = span.name[:MAX_NAME_CHARS]
    start_ns = span.start_time_unix_nano
    key, source = run_key(trace_id, attrs, resource)
    kind = classify(name, attrs)
    if kind is OTHER and parent is None and _is_chain(attrs):
        # LangChain/LangGraph under OpenInference: the root CHAIN span is the whole run, and
        # its output.value the answer; nested CHAIN spans are plumbing and stay OTHER.
        kind = AGENT
        workflow = True
    else:
        workflow = kind is AGENT and (attrs.get("gen_ai.operation.name") == "invoke_workflow"
                                      or attrs.get("traceloop.span.kind") == "workflow")
    # Positional: keyword arguments cost a dataclass __init__ twice as much, once per span.
    record = SpanRecord(key, source, trace_id, raw_span.hex(), parent, name, kind, start_ns,
                        max(span.end_time_unix_nano, start_ns))
    if workflow:
        record.workflow = True

    agent = _first_str(attrs, AGENT_NAME_KEYS) or resource.agent
    if agent is None and kind is AGENT and "traceloop.span.kind" in attrs:
        agent = _first_str(attrs, ("traceloop.entity.name",))
    if agent:
        record.agent = agent[:MAX_NAME_CHARS]
    record.service = resource.service
    session = _first_str(attrs, SESSION_KEYS) or resource.session
    if session:
        record.session = session[:MAX_NAME_CHARS]
    record.parent_run = _first_str(attrs, PARENT_RUN_KEYS) or resource.parent_run
    record.budget = _budget(attrs, resource)

    if span.status.code == STATUS_CODE_ERROR:
        exc_type, exc_message = _exception(span.events)
        error_type = _first_str(attrs, ("error.type",)) or exc_type or "error"
        message = exc_message or span.status.message or ""
        prefix = error_type.rsplit(".", 1)[-1] + ": "
        if message.startswith(prefix):  # "RuntimeError: boom" -> "boom"; the type is kept apart
            message = message[len(prefix):]
        record.error = True
        record.error_type = error_type[:MAX_NAME_CHARS]
        record.error_message = brief(message, MAX_ERROR_CHARS)
        record.error_signature = stable_hash(error_type + ":" + mask(record.error_message))

    if kind is TOOL:
        _fill_tool(record, name, attrs)
    elif kind is LLM:
        _fill_llm(record, attrs, span)
    elif kind is AGENT:
        output = _first(attrs, AGENT_OUTPUT_KEYS)
        if output is not None and not record.error and not _is_empty_output(output):
            record.final_answer = True
            record.final_output = brief(_as_text(output), MAX_BRIEF_CHARS)
        record.messages = _count_messages(_first(attrs, MESSAGES_JSON_KEYS))
        finish = _first(attrs, FINISH_REASON_KEYS)
        if finish is not None:
            record.finish_reason = _finish_reason(finish)
    return record


def _finish_reason(value: object) -> str | None:
    if isinstance(value, list):
        value = value[-1] if value else None
    if value is None:
        return None
    return str(value)[:MAX_NAME_CHARS]


def _fill_tool(record: SpanRecord, name: str, attrs: Mapping[str, object]) -> None:
    tool = _tool_name(name, attrs)
    record.tool_name = tool
    if tool in OUTPUT_TOOL_NAMES or tool.startswith(OUTPUT_TOOL_PREFIX):
        # The output tool carries the answer itself: a final answer, not agent work.
        record.kind = OTHER
        record.final_answer = not record.error
        args = _first(attrs, TOOL_ARGS_KEYS)
        if args is not None:
            record.final_output = brief(_as_text(args), MAX_BRIEF_CHARS)
        return
    args = _first(attrs, TOOL_ARGS_KEYS)
    if args is not None:
        # Without arguments (content capture off) two calls cannot be told apart: no hash,
        # so they never count as repeats of each other.
        canonical = canonical_arguments(args)
        record.args_hash = stable_hash(tool + "\0" + canonical)
        record.args_brief = brief(canonical, MAX_BRIEF_CHARS)
    result = _first(attrs, TOOL_RESULT_KEYS)
    if result is not None:
        text = _as_text(result)
        record.result_hash = stable_hash(tool + "\0" + text)
        record.result_brief = brief(text, MAX_BRIEF_CHARS)


def _fill_llm(record: SpanRecord, attrs: Mapping[str, object], span: Any) -> None:
    record.input_tokens = _int(_first(attrs, INPUT_TOKEN_KEYS))
    record.output_tokens = _int(_first(attrs, OUTPUT_TOKEN_KEYS))
    if not record.input_tokens and not record.output_tokens:
        # OpenLLMetry may report only a total; count it as input so totals stay right.
        record.input_tokens = _int(_first(attrs, TOTAL_TOKEN_KEYS))
    finish = _first(attrs, FINISH_REASON_KEYS)
    if finish is not None:
        record.finish_reason = _finish_reason(finish)
        record.final_answer = (record.finish_reason or "").lower() in ANSWER_FINISH_REASONS
    messages = _count_messages(_first(attrs, MESSAGES_JSON_KEYS))
    if messages:
        messages += max(_count_messages(_first(attrs, OUTPUT_MESSAGES_JSON_KEYS)), 1)
    else:  # flattened conventions: the count is in the keys, walked only now
        keys = [kv.key for kv in span.attributes]
        flat_in = _flat_count(keys, FLAT_INPUT_PREFIXES)
        if flat_in:
            messages = flat_in + max(_flat_count(keys, FLAT_OUTPUT_PREFIXES), 1)
    record.messages = messages


__all__ = ["Resource", "SpanRejected", "canonical_arguments", "classify", "normalise", "redact",
           "run_key", "select_attributes", "stable_hash"]
