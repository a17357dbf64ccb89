"""The compiled decode (Rust, ``native/otlp``): OTLP protobuf request bytes straight to objects
that read as protobuf's messages do, and a span's attributes the convention tables name
selected in the same pass (:meth:`Span.selected <watchdog.core.spans._native.Span.selected>`,
what :func:`~watchdog.core.spans.values.select_attributes` does). The tables are handed over once,
here: a new framework is still one table entry. Everything after (the conventions, the runs)
is the same Python for both paths.

Built by ``pip install`` where a Rust toolchain is found (an optional extension); without one,
or with ``native: false`` (``WATCHDOG_NATIVE=off``), the Python path (protobuf's upb parser)
reads every request. :func:`use_native` switches; :func:`native_state` says which is on.

Loading the compiled module maps some 3 MB and compiles the tables' patterns: a sidecar loads it
with its first protobuf request (``use_native(True, at_first_request=True)``, as importing this
module does), not while it idles (docs/performance.md, Footprint). Until then the kernels'
Python twins answer, as they answer the same. This module imports none of the conventions
(their tables and kernels, some 1.2 MB, load with the span pipeline at the first export): the
start switches the decode without them, and they are imported when the compiled decode loads.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from importlib.util import find_spec
from typing import Any

from watchdog.core.bounds import MIN_SPAN_TIME_NS
from watchdog.core.spans import compiled, decode
from watchdog.core.spans.record import MAX_ASKED_TOOLS

# Built (without a Rust toolchain, or for another platform, it is not): found, not loaded
AVAILABLE = find_spec("watchdog.core.spans._native") is not None
_native: Any = None  # the compiled module, once loaded (_load)

# (ExportTraceServiceRequest.DESCRIPTOR.full_name, without loading protobuf to read it)
_REQUEST_TYPE = "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest"


def _load() -> bool:
    """Load the compiled module (once); False where it is not built or does not load."""
    global AVAILABLE, _native
    if not AVAILABLE:
        return False
    if _native is None:
        try:
            from watchdog.core.spans import _native as module
        except ImportError:  # found, but built for another interpreter or platform
            AVAILABLE = False
        else:
            from watchdog.core.spans import values

            values.NATIVE_SPAN = module.Span
            _native = module
    return _native is not None


@cache
def _compiled() -> Callable[[bytes], Any]:
    assert _native is not None
    from watchdog.core.spans.attributes import FIRST_FACTS, SCALAR_ATTRIBUTES, WANTED_ATTRIBUTES
    from watchdog.core.spans.values import MAX_NAME_CHARS, json_encoded

    tables = _native.Tables(WANTED_ATTRIBUTES, SCALAR_ATTRIBUTES, json_encoded, MAX_NAME_CHARS,
                            MIN_SPAN_TIME_NS, FIRST_FACTS)
    native_decode = _native.decode
    prefix = f"invalid OTLP protobuf payload: Error parsing message with type '{_REQUEST_TYPE}'"

    def parse(body: bytes) -> Any:
        try:
            return native_decode(body, tables)
        except ValueError as exc:  # upb's words, as protobuf's DecodeError has them
            raise decode.DecodeError(f"{prefix}: {exc}") from None

    return parse


def searcher(pattern: str) -> Any:
    """A rule pack's ``action_pattern`` compiled by the matcher that searches in time linear
    in the text (:class:`~watchdog.core.spans._native.Searcher`); None where the compiled
    module is not built (Python's ``re`` searches it). ValueError where that matcher does not
    read it (a look-around, a back-reference)."""
    if not _load():
        return None
    return _native.Searcher(pattern)


def _patterns(table: tuple[tuple[re.Pattern[str], str], ...]) -> Any:
    """A table's regexes matched in one pass; None where one is a regex Rust's reads otherwise
    (a look-around, a back-reference): Python's loop reads them."""
    assert _native is not None
    try:
        return _native.Phrases([pattern.pattern for pattern, _ in table])
    except ValueError:
        return None


def _anchored(table: tuple[tuple[re.Pattern[str], str], ...]) -> Any:
    """A table's regexes matched at a text's start (``re.match``), in one pass; None where one
    is a regex Rust's reads otherwise (flags, an end anchor, a look-around): Python reads them."""
    assert _native is not None
    if any(pattern.flags != re.UNICODE or "$" in pattern.pattern or "\\Z" in pattern.pattern
           for pattern, _ in table):
        return None
    try:
        return _native.Phrases([rf"\A(?:{pattern.pattern})" for pattern, _ in table])
    except ValueError:
        return None


@cache
def _kernels() -> tuple[Any, Any, Any]:
    """The compiled kernels of the conventions (``native/otlp/src/kernels.rs``), over the same
    tables: the limit phrases and status patterns, each table in one pass; tool arguments'
    canonical JSON and a model output's tool calls read by serde_json. Each answers as its
    Python twin does, or leaves the value to it."""
    assert _native is not None
    from watchdog.core.spans import model_calls, outcome
    from watchdog.core.spans.attributes import TOOL_ARGS_ENVELOPES
    from watchdog.core.spans.values import MAX_NAME_CHARS

    json = _native.Json(TOOL_ARGS_ENVELOPES, model_calls.ASKED_TOOL_LISTS, MAX_ASKED_TOOLS,
                        MAX_NAME_CHARS)
    return _patterns(outcome.LIMIT_PHRASES), _patterns(outcome.LIMIT_STATUS), json


@cache
def _normaliser(phrases: Any, status: Any, json: Any) -> Any:
    """The compiled normalise's tables (``native/otlp/src/normalise.rs``, ``model_calls.rs``,
    ``failures.rs``): the conventions' own, and what takes a span down a branch it leaves to
    the Python ``normalise``."""
    assert _native is not None
    from watchdog.core import redact
    from watchdog.core.bounds import MAX_REPORTED_COST, MAX_TOKENS_PER_CALL
    from watchdog.core.redact import mask
    from watchdog.core.spans import attributes as a
    from watchdog.core.spans import model_calls as model_calls_tables
    from watchdog.core.spans import outcome, values
    from watchdog.core.spans.record import EMPTY_OUTPUTS, KeySource, SpanKind, SpanRecord
    from watchdog.core.spans.schema import Role

    # redact.brief, answered in Rust where a text has nothing to redact (briefs.rs)
    brief = _native.Briefs(redact.ANCHORS, redact.brief)
    facts = (a.F_RUN_ID, a.F_AGENT_CALL_ID, a.F_AGENT_NAME, a.F_SESSION, a.F_PARENT_RUN,
             a.F_TOOL_NAME, a.F_TRANSFER_TARGET, a.F_TOOL_ARGS, a.F_TOOL_RESULT)
    # a branch of the dispatch it does not read: an agent named in JSON, a budget, a sub-agent
    # (a sub-agent's id on a call: read by Python alone)
    dispatch_unsure = (*a.JSON_IDENTITY_KEYS, *sorted(a.BUDGET_ATTRIBUTES), *a.SUBAGENT_ID_KEYS)
    # ... and of a tool call's: a declined call, a framework's error flag or result status, a
    # call id in the input's JSON, a tool named in its result
    tool_unsure = (*a.DECLINED_TOOL_FLAGS, *(rule.attribute for rule, _ in
                                             outcome.TOOL_RESULT_ERRORS),
                   *(flag for flag, _, _ in outcome.TOOL_ERROR_FLAGS), *a.TOOL_CALL_INPUT_KEYS,
                   *(key for key, _ in a.TOOL_NAME_JSON))
    # the placeholders for hidden content as JSON strings (tool_calls._any_hidden_value)
    hidden_values = tuple(f'"{text}"' for text in sorted(a.HIDDEN_CONTENT)
                          if text and '"' not in text and "\\" not in text)
    # ... and of an agent's span below the root: a rule that makes it no agent's, a step's name
    agent_unsure = tuple(dict.fromkeys(key for rule in a.NESTED_AGENT_ROLES
                                       for key, _ in rule.where))
    model_calls = _native.ModelCalls(
        (a.F_FINISH_REASON, a.F_OUTPUT_MESSAGES, a.F_LLM_OUTPUT, a.F_MESSAGES, a.F_INPUT_TOKENS,
         a.F_OUTPUT_TOKENS, a.F_TOTAL_TOKENS, a.F_REPORTED_COST, a.F_CACHE_READ,
         a.F_CACHE_WRITE, a.F_MODEL, a.F_PROVIDER, a.F_RESPONSE_ID, a.F_PROMPT, a.F_OUTCOME,
         a.F_MESSAGES_DELTA, a.F_LLM_INPUT, a.F_ANSWER_TEXT, a.F_PROMPT_TEXT),
        sorted(outcome.TOOL_FINISH_REASONS), sorted(outcome.LIMIT_FINISH_REASONS),
        [key for key, _, _ in a.USAGE_JSON], bool(a.REPORTED_COST_KEYS),
        outcome.ANSWER_TOOL_SCAN if outcome.ANSWER_TOOL_MARKERS else None,
        outcome.MAX_REASON_CHARS, values.MAX_NAME_CHARS, MAX_TOKENS_PER_CALL, MAX_REPORTED_COST,
        a.FLAT_INPUT_PREFIXES, a.FLAT_OUTPUT_PREFIXES, a.FLAT_TOOL_CALLS,
        model_calls_tables.ASKED_TOOL_FLAT, MAX_ASKED_TOOLS, bool(a.MESSAGES_DELTA_KEYS),
        (sorted(outcome.ANSWER_FINISH_REASONS),
         [rule.attribute for rule in outcome.OUTPUT_ENVELOPES], sorted(a.HIDDEN_CONTENT),
         a.HIDDEN_CONTENT_CHARS, brief, values.MAX_BRIEF_CHARS,
         list(outcome.LIMIT_PROMPTS), list(outcome.LIMIT_SYSTEM_PROMPTS),
         outcome.PROMPT_TAIL_CHARS, a.LLM_SPAN_SUFFIXES, SpanKind.OTHER,
         (sorted(outcome.ANSWER_TOOLS), list(outcome.ANSWER_TOOL_PREFIXES),
          list(outcome.ANSWER_TOOL_MARKERS))))
    agents = _native.Agents(
        (a.F_AGENT_OUTPUT, a.F_FINISH_REASON, a.F_MESSAGES, a.F_TURN_COUNT, a.F_CALLER),
        sorted(outcome.LIMIT_FINISH_REASONS),
        tuple(dict.fromkeys((
            *outcome.LIMIT_ATTRIBUTE_KEYS, *(key for key, _, _ in outcome.LIMIT_STATES),
            *(key for rule in outcome.STEP_CAPS for key in (rule.steps, rule.cap))))),
        outcome.state_limit, _anchored(outcome.LIMIT_ANSWER_PATTERNS),
        [limit for _, limit in outcome.LIMIT_ANSWER_PATTERNS], list(outcome.LIMIT_ANSWERS),
        outcome.PROMPT_TAIL_CHARS, outcome.answer_limit,
        [(key, f'"{path[-1]}"' if path else None) for key, path in outcome.LIMIT_ERROR_JSON],
        outcome.error_limit, list(a.CAP_REQUESTS), a.HIDDEN_ANSWERS, sorted(a.LOOP_CAPS),
        [(key, f'"{marker}"') for key, marker in a.CONVERSATION_OUTPUTS],
        sorted(EMPTY_OUTPUTS), sorted(a.HIDDEN_CONTENT), a.HIDDEN_CONTENT_CHARS, brief,
        values.MAX_BRIEF_CHARS, outcome.MAX_REASON_CHARS, values.MAX_NAME_CHARS,
        MAX_TOKENS_PER_CALL)
    failures = _native.Failures(
        sorted(a.WRAPPED_EXCEPTION_TYPES), status, [limit for _, limit in outcome.LIMIT_STATUS],
        phrases, [limit for _, limit in outcome.LIMIT_PHRASES], sorted(outcome.LIMIT_EXCEPTIONS),
        a.ERROR_TYPE_KEYS,
        tuple(dict.fromkeys(key for key, _ in (*outcome.ERROR_JSON, *outcome.LIMIT_ERROR_JSON))),
        brief, mask, values.MAX_NAME_CHARS, values.MAX_ERROR_CHARS, outcome.MAX_PHRASE_CHARS)
    return _native.Normaliser(
        SpanRecord, (SpanKind.LLM, SpanKind.TOOL, SpanKind.AGENT),
        (KeySource.WATCHDOG, KeySource.AGENT_CALL, KeySource.TRACE),
        (Role.LLM, Role.TOOL, Role.AGENT), [(key, dict(roles)) for key, roles in a.KIND_MAPS],
        dispatch_unsure, agent_unsure, sorted(a.NESTED_STEP_SPAN_NAMES),
        a.NESTED_STEP_SPAN_SUFFIXES, facts, sorted(a.AGENT_NAME_PLACEHOLDERS),
        sorted(a.OUTPUT_TOOL_NAMES),
        a.OUTPUT_TOOL_PREFIXES, sorted({*a.LOOP_END_TOOLS, *a.TOOL_NAME_PLACEHOLDERS}),
        tool_unsure,
        [(key, marker) for key, marker, _ in outcome.TOOL_RESULT_ERROR_TEXTS],
        sorted(a.HIDDEN_CONTENT), hidden_values, a.UNASKED_TOOLS,
        a.TOOL_CALL_ID_KEYS, json, brief, values.MAX_NAME_CHARS, values.MAX_BRIEF_CHARS,
        a.CLIENT_RUN_SPAN, model_calls, agents, failures, sorted(a.SECOND_ROOTS),
        sorted(a.RUN_ENDS), sorted(a.LOOP_CALLS))


def _use_kernels(on: bool) -> None:
    """The compiled kernels on (and the 64-bit stable hash, the compiled normalise), or the
    Python twins alone."""
    from watchdog.core.spans import model_calls, outcome, values

    phrases, status, json = _kernels() if on else (None, None, None)
    values.compiled_normaliser = _normaliser(phrases, status, json) if json is not None else None
    outcome.compiled_phrases = phrases.first if phrases is not None else None
    outcome.compiled_status = status.first if status is not None else None
    values.compiled_canonical = json.canonical if json is not None else None
    model_calls.compiled_asked = json.asked if json is not None else None
    values.compiled_hash = _native.stable_hash if on and _native is not None else None
    compiled.signatures = _signatures() if on and _native is not None else None


@cache
def _signatures() -> Callable[..., tuple[int, int, int]]:
    """The compiled fold of a tool call's signatures (``native/otlp/src/signatures.rs``), with
    the run's bounds (``watchdog.core.runs.fields``, read as data: no import of the runs)."""
    assert _native is not None
    from watchdog.core.bounds import MAX_CYCLE_LENGTH, MAX_DISTINCT_SIGNATURES

    fold: Callable[..., tuple[int, int, int]] = _native.Signatures(
        MAX_DISTINCT_SIGNATURES, MAX_CYCLE_LENGTH).fold
    return fold


def use_native(on: bool, *, at_first_request: bool = False) -> bool:
    """Read protobuf requests with the compiled decode and kernels (``on``, where they are
    built) or the Python ones; whether the compiled ones are now on. ``at_first_request``:
    they load when the first protobuf request is read (:func:`_first_request`)."""
    if on and at_first_request and AVAILABLE:
        if decode.compiled is None:
            decode.compiled = _first_request
        return True
    decode.compiled = _compiled() if on and _load() else None
    _use_kernels(decode.compiled is not None)
    return decode.compiled is not None


def _first_request(body: bytes) -> Any:
    """The compiled decode until it is loaded: loads it and its kernels, then reads ``body``
    (with the Python decode if it does not load)."""
    if use_native(True) and decode.compiled is not None:
        return decode.compiled(body)
    return decode.parse_protobuf_python(body)


def native_state() -> str:
    """``on``, ``off`` (switched off) or ``unavailable`` (not built: no Rust toolchain)."""
    if decode.compiled is not None:
        return "on"
    return "off" if AVAILABLE else "unavailable"


use_native(True, at_first_request=True)
