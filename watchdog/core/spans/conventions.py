"""Normalise one OTLP span, in any supported convention, into a :class:`SpanRecord`.

Theory of operation
-------------------
This is the engine; what each convention and framework puts where is data, in
:mod:`watchdog.core.spans.frameworks` (OTel GenAI, OpenInference, OpenLLMetry, pydantic-ai, Hermes,
Strands, google-adk, crewai, smolagents, OpenAI Agents, LangGraph...), combined once at import
into ordered attribute names (first present wins), value maps and name sets. Per span:

1. the role (model call, tool call, agent invocation, agent creation) from the first convention
   that names it; only the attributes some table names are decoded (:func:`select_attributes`);
2. for spans that matter and have events, the few event attributes a table names are folded in
   as ``"<event>:<attribute>"`` facts (Strands puts answers and arguments only there);
3. identity, then the error (status ERROR, typed by ``error.type`` or the exception event, with
   an identity that is the same on every nested span the exception passes through);
4. by role: tool name/arguments/result (an answer tool is an answer, not work; a result that
   says the call failed, on a span that ended OK, is the tool's error); tokens, finish
   reason, answer or tool request (a "stop" whose output asks for tools is no answer; a stream
   without a finish reason whose output ends with text is one); the agent's answer;
5. a limit stop from wherever the framework says it: a limit exception, a status description,
   a finish reason, an explicit attribute or state field, the framework's own "give your final
   answer" request, or a conversation that reached the framework's cap.

Tokens are taken from LLM spans only, which keeps agent-level aggregates (pydantic-ai's
``gen_ai.aggregated_usage.*``, Strands' agent usage) from being counted twice. Large JSON is
parsed only when a fact needs it (a substring test decides first). This module is pure: one
span and its resource in, one record out (or :class:`SpanRejected`).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from watchdog.core.bounds import budget_limit, reported_cost, span_times, token_count
from watchdog.core.redact import brief, mask, redact
from watchdog.core.spans.decode import any_value
from watchdog.core.spans.frameworks import TABLES, Path, Role
from watchdog.core.spans.outcome import (
    LIMIT_EXCEPTIONS,
    agent_limit,
    answer_limit,
    answer_text,
    at_path,
    enveloped_output,
    error_limit,
    fill_model_outcome,
    fill_reported_calls,
    finish_reason,
    flagged_error,
    has_text,
    output_finish_reason,
    phrase_limit,
    prompt_limit,
    result_error,
    short_type,
    status_limit,
    unwrapped_exception,
)
from watchdog.core.spans.record import (
    AGENT,
    BUDGET_KEYS,
    EMPTY_OUTPUTS,
    KEY_AGENT_CALL,
    KEY_TRACE,
    KEY_WATCHDOG,
    LLM,
    MAX_ASKED_TOOLS,
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
# Attribute names, in order of precedence: the combined tables of watchdog.core.spans.frameworks.
# The run key (DESIGN §3) is not a convention's: it is the watchdog's contract.
RUN_ID_KEYS = ("watchdog.run.id",)
CLIENT_RUN_SPAN = "watchdog.run "  # the name of the span the client SDK frames its runs with
AGENT_CALL_ID_KEYS = ("gen_ai.agent.call.id",)
PARENT_RUN_KEYS = ("watchdog.parent_run.id",)
ERROR_TYPE_KEYS = ("error.type",)
AGENT_NAME_KEYS = TABLES.agent_name
AGENT_SPAN_NAME_KEYS = TABLES.agent_span_name
AGENT_SPAN_NAME_PATTERNS = TABLES.agent_span_name_patterns
AGENT_NAME_JSON = TABLES.agent_name_json
AGENT_INVOCATION_KEYS = TABLES.agent_name_invocations
WRAPPED_EXCEPTION_TYPES = frozenset(TABLES.wrapped_exceptions)
GRAPH_NODE_JSON = TABLES.graph_node_json
JSON_IDENTITY_KEYS = tuple(dict.fromkeys(key for key, _ in AGENT_NAME_JSON + GRAPH_NODE_JSON))
ROOT_AGENT_NAME_JSON = TABLES.root_agent_name_json
LIMIT_ERROR_JSON = TABLES.limit_error_json
SESSION_KEYS = TABLES.session
RESPONSE_ID_KEYS = TABLES.response_id
TOOL_NAME_KEYS = TABLES.tool_name
TOOL_ARGS_KEYS = TABLES.tool_args
TOOL_ARGS_ENVELOPES = TABLES.tool_args_envelopes
TOOL_RESULT_KEYS = TABLES.tool_result
AGENT_OUTPUT_KEYS = TABLES.answer
LLM_OUTPUT_KEYS = TABLES.llm_output
ANSWER_TEXT_KEYS = TABLES.answer_texts
LLM_INPUT_KEYS = TABLES.llm_input
INPUT_TOKEN_KEYS = TABLES.input_tokens
OUTPUT_TOKEN_KEYS = TABLES.output_tokens
TOTAL_TOKEN_KEYS = TABLES.total_tokens
USAGE_JSON = TABLES.usage_json
# What a model call is priced by (watchdog.core.runs.pricing)
MODEL_KEYS = TABLES.response_model + TABLES.request_model  # the answering model first
PROVIDER_KEYS = TABLES.provider
FINISH_REASON_KEYS = TABLES.finish_reasons
MESSAGES_JSON_KEYS = TABLES.input_messages
OUTPUT_MESSAGES_JSON_KEYS = TABLES.output_messages
# Flattened conventions: the message count is the highest index + 1.
FLAT_INPUT_PREFIXES = TABLES.flat_input_prefixes
FLAT_OUTPUT_PREFIXES = TABLES.flat_output_prefixes
FLAT_TOOL_CALLS = ".tool_calls."  # in a flattened output message's key: it asks for tools
CONVERSATION_OUTPUTS = TABLES.conversation_outputs
# Where a model call's last input message is looked for: JSON message lists, and raw requests
# whose message list ends near their end.
PROMPT_KEYS = (*MESSAGES_JSON_KEYS, *TABLES.input_messages_delta, *TABLES.llm_input)
# A model call whose attributes name none of these has its outcome looked for in its events.
OUTCOME_KEYS = (*FINISH_REASON_KEYS, *OUTPUT_MESSAGES_JSON_KEYS, *LLM_OUTPUT_KEYS)
KIND_KEYS = tuple(key for key, _ in TABLES.kinds + TABLES.root_kinds)
# Tool spans no model asked for (no call id): at a trace root, maybe the invocation.
UNASKED_TOOLS = tuple((rule.attribute, rule.value, rule.call_ids)
                      for rule in TABLES.unasked_tools)

# What a convention's role means for a run: a span creating an agent is no work of a run.
ROLE_KINDS: dict[Role | None, SpanKind] = {
    Role.LLM: LLM, Role.TOOL: TOOL, Role.AGENT: AGENT, Role.WORKFLOW: AGENT,
    Role.CREATE_AGENT: OTHER, None: OTHER}
KIND_MAPS = TABLES.kinds
ROOT_KIND_MAPS = TABLES.root_kinds
# Module globals: an enum member lookup costs ~50 ns, once per span.
CREATE_AGENT, WORKFLOW, AGENT_ROLE = Role.CREATE_AGENT, Role.WORKFLOW, Role.AGENT
SPAN_NAME_ROLES = TABLES.span_names
NESTED_AGENT_ROLES = TABLES.nested_agent_roles
NESTED_STEP_SPAN_NAMES = TABLES.nested_step_span_names
SPAN_NAME_PREFIX_ROLES = TABLES.span_name_prefixes
TOOL_NAME_SPAN_PREFIXES = TABLES.tool_name_span_prefixes
TOOL_NAME_SPAN_SUFFIXES = TABLES.tool_name_span_suffixes
LLM_SPAN_SUFFIXES = TABLES.llm_span_suffixes

# Output tools deliver the final answer (pydantic-ai final_result, smolagents final_answer);
# they are not work the agent did.
OUTPUT_TOOL_NAMES = TABLES.answer_tools
OUTPUT_TOOL_PREFIXES = TABLES.answer_tool_prefixes
LOOP_END_TOOLS = TABLES.loop_end_tools
# The texts instrumentations write in place of content they hide: no content.
HIDDEN_CONTENT = TABLES.hidden_content
CAP_REQUESTS = TABLES.cap_requests
LOOP_CAPS = TABLES.loop_caps
HIDDEN_ANSWERS = TABLES.hidden_answers
HIDDEN_CONTENT_CHARS = max(map(len, HIDDEN_CONTENT), default=-1)
# A model response that finished for one of these reasons is an answer, not a tool request.
ANSWER_FINISH_REASONS = TABLES.answer_finish_reasons  # (watchdog.core.rule_tests reads it)
# Span events read, by name, and the attributes read from them ("<event>:<attribute>" facts).
EVENT_FACTS = TABLES.events
# What an agent reports of itself (the newest GenAI conventions): its budget and how much of
# it it used, its turns, a call's cost and cache tokens, the new input messages of a call.
BUDGET_LIMIT_KEYS = TABLES.budget_limits
BUDGET_CONSUMED_KEYS = TABLES.budget_consumed
TURN_COUNT_KEYS = TABLES.turn_counts
REPORTED_COST_KEYS = TABLES.reported_cost
CACHE_READ_KEYS = TABLES.cache_read_tokens
CACHE_WRITE_KEYS = TABLES.cache_write_tokens
MESSAGES_DELTA_KEYS = TABLES.input_messages_delta
TRANSFER_TARGET_KEYS = TABLES.transfer_targets
CALLER_KEYS = TABLES.caller_names


def select_attributes(key_values: Any) -> dict[str, object]:
    """Decode only the attributes normalisation reads.

    Real agent spans carry large attributes nothing here needs (tool definitions, JSON schemas,
    request parameters); skipping them avoids building a Python string for each. Flattened
    message keys (``llm.input_messages.{i}.*``) are not kept either: the rare LLM span without
    JSON messages walks its keys again (:func:`_fill_llm`), so no other span pays a prefix test
    per attribute.
    """
    wanted = WANTED_ATTRIBUTES
    scalars = SCALAR_ATTRIBUTES
    selected: dict[str, object] = {}
    for kv in key_values:
        key = kv.key
        if key in wanted:
            value = kv.value
            # A non-empty string_value can only be the set member of the oneof; reading it first
            # spares the common case the WhichOneof dispatch.
            text = value.string_value
            if not text:
                selected[key] = any_value(value)
            elif text[0] == '"' or key in scalars:
                selected[key] = json_encoded(text, key in scalars)
            else:
                selected[key] = text
    return selected


_NUMBER_STARTS = frozenset("-0123456789")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_encoded(text: str, scalar: bool) -> object:
    """A value some SDKs JSON-encode (MLflow: every attribute) as the value it encodes: a
    JSON string (``"\\"TOOL\\""``) as its text, and where a number or flag is read
    (``scalar``) ``"12"`` as 12 and ``"true"`` as True; any other text as it is."""
    if text[0] == '"':
        if len(text) < 2 or text[-1] != '"':
            return text
        try:
            value = _load_json(text)
        except ValueError:
            return text
        if not isinstance(value, str) or ("\\u" in text and not _encodable(value)):
            return text  # (an escaped lone surrogate is no text a label or page can show)
        if not scalar or not value:
            return value
        text = value  # (a number JSON-encoded twice: "\\"12\\"")
    if not scalar:
        return text
    if text in ("true", "false"):
        return text == "true"
    if text[0] in _NUMBER_STARTS and len(text) <= 32:
        try:
            number = _load_json(text)
        except (ValueError, RecursionError):
            return text
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return number
    return text


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


def _content(attrs: Mapping[str, object], keys: tuple[str, ...]) -> object | None:
    """:func:`_first` of content (a message, an output, a tool's arguments or result): None
    where an instrumentation wrote its placeholder for hidden content (content capture off)."""
    value = _first(attrs, keys)
    if isinstance(value, str) and len(value) <= HIDDEN_CONTENT_CHARS and value in HIDDEN_CONTENT:
        return None
    return value


def _first_str(attrs: Mapping[str, object], keys: tuple[str, ...]) -> str | None:
    """:func:`_first` as a string (its own loop: called ~6 times per span)."""
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return value if isinstance(value, str) else str(value)
    return None


def _int(value: object) -> int:
    return token_count(value)  # finite, >= 0, bounded: never inf/NaN/overflow from a span


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
    try:
        value, end = _JSON_DECODER.raw_decode(text, start)
    except RecursionError:  # nested deeper than the parser goes: no JSON a span needs
        raise ValueError("JSON nested too deeply") from None
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
    if isinstance(value, dict) and TOOL_ARGS_ENVELOPES:
        value = _unwrapped(value)
    try:
        return _CANONICAL_JSON.encode(value)
    except (TypeError, ValueError):
        return str(raw)


def _unwrapped(value: dict[str, Any]) -> Any:
    """The arguments inside a call's envelope (LangChain's ``inputs``, smolagents' ``kwargs``):
    the envelope's ids and metadata would make every call look new."""
    for keys, inner in TOOL_ARGS_ENVELOPES:
        if inner in value and keys.issubset(value.keys()):  # (the cheap test first)
            return value[inner]
    return value


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


def role_of(name: str, attrs: Mapping[str, object], is_root: bool = False) -> Role | None:
    """What the span is, by the first convention that says so (None: plumbing)."""
    for key, roles in KIND_MAPS:
        value = attrs.get(key)
        if isinstance(value, str):
            role = roles.get(value)
            if role is not None:
                return role
    role = SPAN_NAME_ROLES.get(name)
    if role is not None:
        return role
    for prefix, prefix_role in SPAN_NAME_PREFIX_ROLES:
        if name.startswith(prefix):
            return prefix_role
    if is_root:
        # LangChain/LangGraph and ADK under OpenInference: the root CHAIN span is the whole
        # run, and its output.value the answer; nested CHAIN spans are plumbing.
        for key, roles in ROOT_KIND_MAPS:
            value = attrs.get(key)
            if isinstance(value, str):
                role = roles.get(value)
                if role is not None:
                    return role
    return None


def nested_agent_role(name: str, attrs: Mapping[str, object]) -> Role | None:
    """What a span of agent kind below the trace root is when a convention says it is no agent
    (:attr:`~watchdog.core.spans.frameworks.Convention.nested_agent_roles`): a step of the run it is
    in (None) or a tool call; AGENT otherwise."""
    for rule in NESTED_AGENT_ROLES:
        for key, value in rule.where:
            found = attrs.get(key)
            if found is None or (value is not None and found != value):
                break
        else:
            return rule.role
    if name in NESTED_STEP_SPAN_NAMES and _first_str(attrs, AGENT_NAME_KEYS) is None:
        return None
    return AGENT_ROLE


def unasked_tool(attrs: Mapping[str, object]) -> bool:
    """Whether a tool span is one no model asked for: of a kind some convention gives call ids
    to (:class:`~watchdog.core.spans.frameworks.UnaskedTool`), without one."""
    for key, value, call_ids in UNASKED_TOOLS:
        if attrs.get(key) == value:
            for call_id in call_ids:  # noqa: SIM110 (a generator costs ~3 % of normalise)
                if attrs.get(call_id):
                    return False
            return True
    return False


def classify(name: str, attrs: Mapping[str, object], is_root: bool = False) -> SpanKind:
    return ROLE_KINDS[role_of(name, attrs, is_root)]


def _json_identity(name: str, attrs: Mapping[str, object], role: Role | None
                   ) -> tuple[Role | None, str | None]:
    """The span's role and agent as JSON attributes tell them (:attr:`Convention.
    agent_name_json`, :attr:`Convention.graph_node_json`): a span named after the agent in its
    JSON is that agent's invocation; a span of agent kind named after its graph node is a step
    of the graph. Parsed only when the key's name occurs in the text."""
    parsed: dict[str, object] = {}

    def found(key: str, path: Path) -> object:
        raw = attrs.get(key)
        if not isinstance(raw, str) or f'"{path[-1]}"' not in raw:
            return None
        if key not in parsed:
            try:
                parsed[key] = _load_json(raw)
            except ValueError:
                parsed[key] = None
        return at_path(parsed[key], path)

    agent = None
    for key, path in AGENT_NAME_JSON:
        value = found(key, path)
        if isinstance(value, str) and value:
            agent = value
            break
    if role is AGENT_ROLE:
        if any(found(key, path) == name for key, path in GRAPH_NODE_JSON):
            role = None
    elif (role is None or role is WORKFLOW) and agent is not None \
            and agent[:MAX_NAME_CHARS] == name:
        role = AGENT_ROLE  # the agent itself, not a workflow around agents: one nested in it
    return role, agent


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


def _root_agent(attrs: Mapping[str, object]) -> str | None:
    """The agent a trace's root names in its own input or metadata (:attr:`Convention.
    root_agent_name_json`): parsed only when the key's name occurs in the text."""
    parsed: dict[str, object] = {}
    for key, path in ROOT_AGENT_NAME_JSON:
        raw = attrs.get(key)
        if isinstance(raw, str):
            if f'"{path[-1]}"' not in raw:
                continue
            if key not in parsed:
                try:
                    parsed[key] = _load_json(raw)
                except (ValueError, RecursionError):
                    parsed[key] = None
            raw = parsed[key]
        value = at_path(raw, path)
        if isinstance(value, str) and value.strip() and _encodable(value):
            return value.strip()
    return None


def _agent_from_span_name(name: str) -> str | None:
    for pattern in AGENT_SPAN_NAME_PATTERNS:
        match = pattern.match(name)
        if match:
            return match.group("name")
    return None


def _tool_name(name: str, attrs: Mapping[str, object]) -> str:
    tool = _first_str(attrs, TOOL_NAME_KEYS)
    if tool is None:
        for prefix in TOOL_NAME_SPAN_PREFIXES:
            if name.startswith(prefix):
                tool = name[len(prefix):]
                break
        else:  # OpenInference names a tool span after what it runs ("handoff to researcher")
            tool = name
            for suffix in TOOL_NAME_SPAN_SUFFIXES:  # ... or after its method ("lookup.acall")
                if tool.endswith(suffix) and len(tool) > len(suffix):
                    tool = tool[:-len(suffix)]
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


def _event_facts(events: Any) -> dict[str, object] | None:
    """The wanted attributes of the span's events, as ``"<event>:<attribute>"`` facts (the
    first event of a name that carries an attribute wins)."""
    facts: dict[str, object] | None = None
    for event in events:
        wanted = EVENT_FACTS.get(event.name)
        if wanted is None:
            continue
        for kv in event.attributes:
            if kv.key in wanted:
                key = event.name + ":" + kv.key
                if facts is None:
                    facts = {}
                if key not in facts:
                    value = kv.value
                    text = value.string_value
                    facts[key] = (json_encoded(text, False) if text[0] == '"' else text) \
                        if text else any_value(value)
    return facts


# Where a span says which of the model's tool calls it executes (SpanRecord.tool_call_id): an
# attribute (a tool span's convention, or a hand-traced span's generic one), else the span's
# input JSON: its ``tool_call_id``/``call_id``, or the id of a tool call object at its top or
# directly inside it (the loop traced the call as the model gave it). Read on tool spans and
# spans of no kind; an input is parsed only when it is short and holds an id key.
TOOL_CALL_ID_KEYS = ("gen_ai.tool.call.id", "tool_call_id", "tool_call.id", "call_id")
TOOL_CALL_INPUT_KEYS = ("input", "input.value", "mlflow.spanInputs", "traceloop.entity.input")
TOOL_CALL_ID_JSON_KEYS = ("tool_call_id", "call_id")
MAX_CALL_INPUT_CHARS = 16 * 1024

ANNOUNCED_BUDGET = tuple((key, "watchdog.budget." + key) for key in BUDGET_KEYS)
# Where a span names a budget: the client SDK's announcement, or the agent's own report
BUDGET_ATTRIBUTES = frozenset(
    [attribute for _, attribute in ANNOUNCED_BUDGET]
    + [attribute for attribute, _ in BUDGET_LIMIT_KEYS + BUDGET_CONSUMED_KEYS])

WANTED_ATTRIBUTES = frozenset(
    RUN_ID_KEYS + AGENT_CALL_ID_KEYS + AGENT_NAME_KEYS + AGENT_INVOCATION_KEYS + SESSION_KEYS
    + PARENT_RUN_KEYS + RESPONSE_ID_KEYS
    + TOOL_NAME_KEYS + TOOL_ARGS_KEYS + TOOL_RESULT_KEYS + AGENT_OUTPUT_KEYS + INPUT_TOKEN_KEYS
    + OUTPUT_TOKEN_KEYS + TOTAL_TOKEN_KEYS + FINISH_REASON_KEYS + MESSAGES_JSON_KEYS
    + OUTPUT_MESSAGES_JSON_KEYS + KIND_KEYS + ERROR_TYPE_KEYS + AGENT_SPAN_NAME_KEYS
    + LLM_OUTPUT_KEYS + tuple(rule.attribute for rule in TABLES.tool_result_errors)
    + TABLES.limit_attributes + tuple(key for key, _, _ in TABLES.limit_states)
    + tuple(key for key, _ in CONVERSATION_OUTPUTS)
    + tuple(key for key, _, _ in TABLES.call_limits) + JSON_IDENTITY_KEYS
    + tuple(call_id for _, _, call_ids in UNASKED_TOOLS for call_id in call_ids)
    + tuple(key for rule in NESTED_AGENT_ROLES for key, _ in rule.where)
    + tuple(key for flag, result, _ in TABLES.tool_error_flags for key in (flag, result))
    + tuple(rule.attribute for rule in TABLES.output_envelopes)
    + tuple(key for rule in TABLES.step_caps for key in (rule.steps, rule.cap, rule.exit_reason)
            if key)
    + tuple(key for key, _ in TABLES.cap_requests) + TABLES.hidden_answers
    + ANSWER_TEXT_KEYS + tuple(key for key, _, _ in USAGE_JSON)
    + tuple(key for key, _ in ROOT_AGENT_NAME_JSON) + tuple(key for key, _ in LIMIT_ERROR_JSON)
    + TOOL_CALL_ID_KEYS + TOOL_CALL_INPUT_KEYS
    + TURN_COUNT_KEYS + REPORTED_COST_KEYS + CACHE_READ_KEYS + CACHE_WRITE_KEYS
    + MESSAGES_DELTA_KEYS + TRANSFER_TARGET_KEYS + CALLER_KEYS + MODEL_KEYS + PROVIDER_KEYS
) | BUDGET_ATTRIBUTES
# Where a number or a flag is read: a JSON-encoded one ("12", "true") is decoded to it.
SCALAR_ATTRIBUTES = frozenset(
    INPUT_TOKEN_KEYS + OUTPUT_TOKEN_KEYS + TOTAL_TOKEN_KEYS
    + tuple(key for rule in TABLES.step_caps for key in (rule.steps, rule.cap))
    + tuple(key for key, _ in TABLES.cap_requests)
    + tuple(flag for flag, _, _ in TABLES.tool_error_flags)
    + TURN_COUNT_KEYS + REPORTED_COST_KEYS + CACHE_READ_KEYS + CACHE_WRITE_KEYS
) | BUDGET_ATTRIBUTES


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
    """The budget a span (or its resource) announces, or the agent reports as its own limits
    (an announcement wins)."""
    if not resource.announces_budget and BUDGET_ATTRIBUTES.isdisjoint(attrs):
        return None  # the common case, decided without a lookup per key
    budget = _budget_numbers(attrs, resource, BUDGET_LIMIT_KEYS)
    for key, attribute in ANNOUNCED_BUDGET:
        limit = budget_limit(attrs.get(attribute, resource.attrs.get(attribute)))
        if limit is not None:  # finite and in range, or not a budget
            if budget is None:
                budget = {}
            budget[key] = limit
    return budget


def _budget_numbers(attrs: Mapping[str, object], resource: Resource,
                    places: tuple[tuple[str, str], ...]) -> dict[str, float] | None:
    """Budget numbers at ``places`` (attribute, budget key), the first place of a key present
    wins; each finite and in range, else not read."""
    numbers: dict[str, float] | None = None
    for attribute, key in places:
        if numbers is not None and key in numbers:
            continue
        number = budget_limit(attrs.get(attribute, resource.attrs.get(attribute)))
        if number is not None:
            if numbers is None:
                numbers = {}
            numbers[key] = number
    return numbers


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
    times = span_times(span.start_time_unix_nano, span.end_time_unix_nano)
    if times is None:
        raise SpanRejected("invalid_timestamps",
                           f"span has no valid time: start {span.start_time_unix_nano} ns, end "
                           f"{span.end_time_unix_nano} ns since the epoch (nanoseconds from 2000 "
                           f"on; other units?)")
    start_ns, end_ns = times
    key, source = run_key(trace_id, attrs, resource)
    role = role_of(name, attrs, parent is None)
    step = False  # a span of agent kind that is a step or a tool call: the name it has is not
    if role is AGENT_ROLE and parent is not None:  # the run's agent (a node's, a handoff's)
        role = nested_agent_role(name, attrs)
        step = role is not AGENT_ROLE
    json_agent = None
    for json_key in JSON_IDENTITY_KEYS:
        if json_key in attrs:
            role, json_agent = _json_identity(name, attrs, role)
            break
    if role is None or role is WORKFLOW:
        for invocation_key in AGENT_INVOCATION_KEYS:
            invoked = attrs.get(invocation_key)
            if invoked is not None:
                if invoked == name:  # the agent itself, not one of its graph's steps
                    role = AGENT_ROLE
                break
    kind = ROLE_KINDS[role]
    # Positional: keyword arguments cost a dataclass __init__ twice as much, once per span.
    record = SpanRecord(key, source, trace_id, raw_span.hex(), parent, name, kind, start_ns,
                        end_ns)
    if source is KEY_WATCHDOG and name.startswith(CLIENT_RUN_SPAN):
        record.run_frame = True
    if role is CREATE_AGENT:
        record.creates_agent = True
    elif role is WORKFLOW:
        record.workflow = True

    agent = (None if step else _first_str(attrs, AGENT_NAME_KEYS)) or resource.agent \
        or json_agent
    if agent is None and kind is AGENT:
        agent = _first_str(attrs, AGENT_SPAN_NAME_KEYS)
        if agent is None and role is AGENT_ROLE and name not in SPAN_NAME_ROLES:
            # (a convention's own fixed span name, "haystack.agent.run", names no agent)
            # (a workflow's span name is the code that frames the run, "FunctionAgent.run"
            # in LlamaIndex: not an agent's name)
            agent = _agent_from_span_name(name)
    if agent is None and parent is None and ROOT_AGENT_NAME_JSON:
        agent = _root_agent(attrs)
    if agent:
        record.agent = agent[:MAX_NAME_CHARS]
    record.service = resource.service
    session = _first_str(attrs, SESSION_KEYS) or resource.session
    if session:
        record.session = session[:MAX_NAME_CHARS]
    record.parent_run = _first_str(attrs, PARENT_RUN_KEYS) or resource.parent_run
    if resource.announces_budget or not BUDGET_ATTRIBUTES.isdisjoint(attrs):
        record.budget = _budget(attrs, resource)
        record.budget_used = _budget_numbers(attrs, resource, BUDGET_CONSUMED_KEYS)

    status = span.status
    if status.code == STATUS_CODE_ERROR or (span.events and _wrapped_error(span.events)):
        # (an exporter that records only errors, in its wrapper, failed the span whatever its
        # status says: LangSmith's background workers can apply a later update to a span after
        # the one carrying the error, and the SDK lets that update's OK win)
        _fill_error(record, attrs, span.events, status.message)
    elif status.message:
        record.limit_stop = status_limit(status.message)
    elif span.events:
        # an exception recorded on a span whose status says no failure (LiteLLM's callback
        # sets the span around a call OK, and the SDK keeps an OK status): no error, but a stop
        # at a limit it names (by its type or in its message) is that limit
        exc_type, exc_message = _exception(span.events)
        if exc_type is not None and short_type(exc_type) in LIMIT_EXCEPTIONS:
            record.limit_stop = short_type(exc_type)
        elif exc_message:
            record.limit_stop = phrase_limit(exc_message)

    if kind is TOOL:
        if span.events and _first(attrs, TOOL_ARGS_KEYS) is None:
            attrs = _with_events(attrs, span.events)
        _fill_tool(record, name, attrs)
        if record.kind is TOOL:
            record.unasked = unasked_tool(attrs)
            record.tool_call_id = tool_call_id(attrs)
    elif kind is OTHER:  # maybe a tool traced by hand: which asked call it runs, if it says
        record.tool_call_id = tool_call_id(attrs)
        if name in NESTED_STEP_SPAN_NAMES and not record.error:
            # a span of agent kind read as a step of its run (it names no agent): the answer
            # it carries (an attribute, or only an event) is its run's
            _fill_step_answer(record, _with_events(attrs, span.events) if span.events
                              else attrs)
    elif kind is LLM:
        if span.events and _first(attrs, OUTCOME_KEYS) is None:
            attrs = _with_events(attrs, span.events)
        _fill_llm(record, attrs, span)
    elif kind is AGENT:
        if span.events:
            attrs = _with_events(attrs, span.events)
        _fill_agent(record, attrs)
    return record


def _with_events(attrs: Mapping[str, object], events: Any) -> Mapping[str, object]:
    """The attributes plus the facts some frameworks put only in span events (read only when
    the attributes lack them: most spans never pay for their events)."""
    facts = _event_facts(events)
    return attrs if facts is None else {**attrs, **facts}


def _wrapped_error(events: Any) -> bool:
    """Whether the span's exception is in the wrapper of an exporter that records only errors
    (the ``wrapped_exceptions`` of the conventions)."""
    exc_type, exc_message = _exception(events)
    if exc_type not in WRAPPED_EXCEPTION_TYPES or not exc_message:
        return False
    return unwrapped_exception(exc_type, exc_message) != (exc_type, exc_message)


def _fill_error(record: SpanRecord, attrs: Mapping[str, object], events: Any,
                status_message: str) -> None:
    exc_type, exc_message = _exception(events)
    if exc_type in WRAPPED_EXCEPTION_TYPES and exc_message:
        exc_type, exc_message = unwrapped_exception(exc_type, exc_message)
    status_stop = status_limit(status_message) if status_message else None
    # A limit only named by the status description ("Max turns exceeded: …") types the error.
    error_type = _first_str(attrs, ERROR_TYPE_KEYS) or exc_type or status_stop or "error"
    _failed(record, error_type, exc_message or status_message or "", exc_type)
    for candidate in (error_type, exc_type):
        if candidate and short_type(candidate) in LIMIT_EXCEPTIONS:
            record.limit_stop = short_type(candidate)
            return
    # (a limit told only in words: the exception's message, an error the span reports)
    record.limit_stop = status_stop or (phrase_limit(exc_message) if exc_message else None) \
        or error_limit(attrs)


def _failed(record: SpanRecord, error_type: str, message: str,
            exc_type: str | None = None) -> None:
    """Mark the span failed: its error, the signature repeats are counted by (type + masked
    message) and the identity of the exception (the same on every span it passed through)."""
    prefix = short_type(error_type) + ": "
    if message.startswith(prefix):  # "RuntimeError: boom" -> "boom"; the type is kept apart
        message = message[len(prefix):]
    record.error = True
    record.error_type = error_type[:MAX_NAME_CHARS]
    record.error_message = brief(message, MAX_ERROR_CHARS)
    record.error_signature = stable_hash(error_type + ":" + mask(record.error_message))
    record.exception_id = stable_hash((exc_type or error_type) + "\0" + message)


def _fill_tool(record: SpanRecord, name: str, attrs: Mapping[str, object]) -> None:
    tool = _tool_name(name, attrs)
    target = _first_str(attrs, TRANSFER_TARGET_KEYS)
    if target is not None:
        # a transfer to another agent: `execute_tool transfer_to_<agent> <agent>`
        target = target[:MAX_NAME_CHARS]
        record.handoff_to = target
        if tool.endswith(" " + target) and len(tool) > len(target) + 1:
            tool = tool[:-len(target) - 1]
    record.tool_name = tool
    if tool in OUTPUT_TOOL_NAMES or tool.startswith(OUTPUT_TOOL_PREFIXES):
        # The output tool carries the answer itself: a final answer, not agent work.
        record.kind = OTHER
        record.final_answer = not record.error
        args = _content(attrs, TOOL_ARGS_KEYS)
        if args is not None:
            record.final_output = brief(_as_text(args), MAX_BRIEF_CHARS)
        return
    if tool in LOOP_END_TOOLS and not record.error \
            and _is_loop_end(tool, name, attrs, _first(attrs, TOOL_RESULT_KEYS)):
        # The framework's own tool to end its loop (DSPy ReAct's `finish`): no agent work,
        # and no answer either (a later step extracts it).
        record.kind = OTHER
        record.loop_end = True
        return
    args = _content(attrs, TOOL_ARGS_KEYS)
    if args is not None:
        # Without arguments (content capture off) two calls cannot be told apart: no hash,
        # so they never count as repeats of each other.
        canonical = canonical_arguments(args)
        record.args_hash = stable_hash(tool + "\0" + canonical)
        record.args_brief = brief(canonical, MAX_BRIEF_CHARS)
    result = _content(attrs, TOOL_RESULT_KEYS)
    if result is not None:
        text = _as_text(result)
        record.result_hash = stable_hash(tool + "\0" + text)
        record.result_brief = brief(text, MAX_BRIEF_CHARS)
    if not record.error:
        # The framework caught the tool's exception and returned its text as the result
        # (LangChain's ToolMessage with status "error"): the call failed all the same.
        failure = result_error(attrs) or flagged_error(attrs)
        if failure is not None:
            _failed(record, *failure)


def _fill_price_facts(record: SpanRecord, attrs: Mapping[str, object]) -> None:
    """What the call is priced by (DESIGN §13): its model and provider; its cached tokens are
    part of its input (never more than it)."""
    model = _first_str(attrs, MODEL_KEYS)
    if model and model[0] == '"' and model[-1] == '"':  # JSON-encoded (MLflow's values)
        try:
            decoded = json.loads(model)
        except ValueError:
            decoded = None
        model = decoded if isinstance(decoded, str) else None
    if model:
        record.model = model[:MAX_NAME_CHARS]
    provider = _first_str(attrs, PROVIDER_KEYS)
    if provider:
        record.provider = provider[:MAX_NAME_CHARS]
    read = record.cache_read_tokens = min(record.cache_read_tokens, record.input_tokens)
    record.cache_write_tokens = min(record.cache_write_tokens, record.input_tokens - read)


def _is_loop_end(tool: str, name: str, attrs: Mapping[str, object], result: object) -> bool:
    """A loop-end tool's call: its own result, or (content capture off) a hidden result on a
    span named after the tool's method (DSPy's `finish.__call__`), no tool name recorded."""
    if result == LOOP_END_TOOLS[tool]:
        return True
    return isinstance(result, str) and result in HIDDEN_CONTENT \
        and _first(attrs, TOOL_NAME_KEYS) is None \
        and any(name == tool + suffix for suffix in TOOL_NAME_SPAN_SUFFIXES)


def _fill_llm(record: SpanRecord, attrs: Mapping[str, object], span: Any) -> None:
    response_id = _first_str(attrs, RESPONSE_ID_KEYS)
    if response_id:
        record.response_id = response_id[:MAX_NAME_CHARS]
    input_tokens = _first(attrs, INPUT_TOKEN_KEYS)
    output_tokens = _first(attrs, OUTPUT_TOKEN_KEYS)
    finish = _first(attrs, FINISH_REASON_KEYS)
    # (a hidden output is read as it is: the model said something, and the call is the answer
    # unless a tool call follows, as for any output that asks for no tool)
    output_messages = _first(attrs, OUTPUT_MESSAGES_JSON_KEYS)
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
    messages = _count_messages(_first(attrs, MESSAGES_JSON_KEYS))
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
            and _first(attrs, TOTAL_TOKEN_KEYS) is None \
            and _first(attrs, LLM_INPUT_KEYS) is not None \
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
        record.reported_cost_usd = reported_cost(_first(attrs, REPORTED_COST_KEYS))
        record.cache_read_tokens = _int(_first(attrs, CACHE_READ_KEYS))
        record.cache_write_tokens = _int(_first(attrs, CACHE_WRITE_KEYS))
    if not record.input_tokens and not record.output_tokens:
        # OpenLLMetry may report only a total; count it as input so totals stay right.
        record.input_tokens = _int(_first(attrs, TOTAL_TOKEN_KEYS))
    _fill_price_facts(record, attrs)
    output = output_messages if output_messages is not None else _first(attrs, LLM_OUTPUT_KEYS)
    fill_model_outcome(record, finish, output)
    if flat_tools and not record.requested_tools:
        # no finish reason, and an output text that hides its tool requests (a Python repr):
        # the flattened output messages still say the model asked for tools
        record.requested_tools = True
        record.final_answer = False
    if record.final_answer:
        # its text: the run's answer when no span of the agent carries one (a hand-written
        # loop, loose calls); never an instrumentation's placeholder for hidden content
        text = answer_text(_first(attrs, ANSWER_TEXT_KEYS) or output)
        if text is not None and not (len(text) <= HIDDEN_CONTENT_CHARS
                                     and text.strip() in HIDDEN_CONTENT):
            record.final_output = brief(text, MAX_BRIEF_CHARS)
    if record.requested_tools:
        record.asked_tools = asked_tools(output_messages, span.attributes)
    if messages:
        messages += max(flat_out, 1)
    elif MESSAGES_DELTA_KEYS:
        record.messages_delta = _count_messages(_first(attrs, MESSAGES_DELTA_KEYS))
    record.messages = messages
    record.input_hash = request_hash(_first(attrs, PROMPT_KEYS))
    if record.limit_stop is None and not record.requested_tools:
        # (a framework's "give your final answer" request offers no tools: never asks for any)
        prompt = _first_str(attrs, PROMPT_KEYS)
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
    if not text or (len(text) <= HIDDEN_CONTENT_CHARS and text in HIDDEN_CONTENT):
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
)
ASKED_TOOL_FLAT = (
    ("llm.output_messages.", ".message.tool_calls.", ".tool_call.function.name",
     ".tool_call.id"),  # OpenInference
    ("gen_ai.completion.", ".tool_calls.", ".name", ".id"),  # OpenLLMetry
)


def asked_tools(output_messages: object, key_values: Any) -> tuple[tuple[str, str], ...]:
    """The tool calls (name, call id or "") a model call's output asks for, at most
    ``MAX_ASKED_TOOLS``, from its JSON output messages or else its flattened output keys."""
    asked: list[tuple[str, str]] = []
    messages: object = output_messages
    if isinstance(messages, str) and '"tool_call' in messages:
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
    for kv in key_values:
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


def tool_call_id(attrs: Mapping[str, object]) -> str | None:
    """The id of the model's tool call a span executes, where it says (see
    :data:`TOOL_CALL_ID_KEYS`), at most ``MAX_NAME_CHARS``; None where it does not."""
    for key in TOOL_CALL_ID_KEYS:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return value[:MAX_NAME_CHARS]
    for key in TOOL_CALL_INPUT_KEYS:
        value = attrs.get(key)
        if isinstance(value, str):
            if len(value) > MAX_CALL_INPUT_CHARS or 'id"' not in value:
                continue
            try:
                value = _load_json(value)
            except ValueError:
                continue
        if isinstance(value, dict):
            found = _input_call_id(value)
            if found:
                return found[:MAX_NAME_CHARS]
    return None


def _input_call_id(value: dict[str, Any]) -> str | None:
    """The call id in a tool span's input object, or one level down in it."""
    for candidate in (value, *(child for child in value.values() if isinstance(child, dict))):
        for key in TOOL_CALL_ID_JSON_KEYS:
            found = candidate.get(key)
            if isinstance(found, str) and found:
                return found
        if _is_tool_call(candidate):
            return str(candidate["id"])
    return None


def _is_tool_call(value: dict[str, Any]) -> bool:
    """A tool call as a model API gives it: an id with a function (OpenAI's chat), or with a
    name and arguments or input (Anthropic's tool_use, OpenAI's Responses)."""
    call_id = value.get("id")
    return isinstance(call_id, str) and bool(call_id) and (
        isinstance(value.get("function"), dict)
        or ("name" in value and ("arguments" in value or "input" in value)))


def _fill_step_answer(record: SpanRecord, attrs: Mapping[str, object]) -> None:
    output = _content(attrs, AGENT_OUTPUT_KEYS)
    if output is not None and not _is_empty_output(output) and has_text(output) \
            and answer_limit(output) is None:
        record.final_answer = True
        record.final_output = brief(_as_text(output), MAX_BRIEF_CHARS)


def _fill_agent(record: SpanRecord, attrs: Mapping[str, object]) -> None:
    output = _content(attrs, AGENT_OUTPUT_KEYS)
    finish = _first(attrs, FINISH_REASON_KEYS)
    if isinstance(output, str) and finish is None and '"finish_reason"' in output:
        finish = output_finish_reason(output)
    if finish is not None:
        record.finish_reason = finish_reason(finish)
    limit = agent_limit(attrs, record.finish_reason)
    stand_in = answer_limit(output)  # the framework's text where no answer came
    if record.limit_stop is None:
        record.limit_stop = limit or stand_in or error_limit(attrs)
    for key, name in CAP_REQUESTS:
        if isinstance(attrs.get(key), int):
            record.cap_request = name
            break
    if LOOP_CAPS and record.name in LOOP_CAPS and output is None and not record.error \
            and record.limit_stop is None and _first(attrs, AGENT_OUTPUT_KEYS) in HIDDEN_CONTENT:
        # its trajectory hidden: the run says if its loop ended by its loop-end tool
        record.loop_cap = LOOP_CAPS[record.name]
    stopped_silent = (limit is not None and limit == record.finish_reason) or stand_in is not None
    if (output is not None and not stopped_silent and not record.error
            and not _is_empty_output(output) and has_text(output)):
        # An agent stopped by a limit finish reason (Strands' limit_turns) gave no answer; one
        # whose state names a limit may still have answered (Hermes' summary).
        record.final_answer = True
        record.final_output = brief(_as_text(output), MAX_BRIEF_CHARS)
    elif output is None and not record.error and record.limit_stop is None \
            and _first(attrs, AGENT_OUTPUT_KEYS) is not None \
            and any(key in attrs for key in HIDDEN_ANSWERS):
        # a hidden output of an agent span that ends OK only with its answer (crewai's)
        record.final_answer = True
    record.messages = _count_messages(_first(attrs, MESSAGES_JSON_KEYS))
    turns = _int(_first(attrs, TURN_COUNT_KEYS))
    if turns:
        record.model_calls = turns
    caller = _first_str(attrs, CALLER_KEYS)
    if caller:
        record.caller = caller[:MAX_NAME_CHARS]
    for key, marker in CONVERSATION_OUTPUTS:
        conversation = attrs.get(key)
        if isinstance(conversation, str) and f'"{marker}"' in conversation \
                and '"messages"' in conversation:
            fill_reported_calls(record, conversation, attrs)
            break


__all__ = ["Resource", "SpanRejected", "canonical_arguments", "classify", "normalise", "redact",
           "request_hash", "role_of", "run_key", "select_attributes", "short_type", "stable_hash",
           "unasked_tool"]
