"""What a tool span records (:func:`_fill_tool`): the tool's name, its arguments and result
as hashes and briefs, an answer tool's answer, the framework's loop-end tool, a result that says
the call failed; and which of the model's tool calls a span executes (:func:`tool_call_id`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from watchdog.core.redact import brief
from watchdog.core.spans.attributes import (
    DECLINED_TOOL_FLAGS,
    F_TOOL_ARGS,
    F_TOOL_NAME,
    F_TOOL_RESULT,
    F_TRANSFER_TARGET,
    HIDDEN_CONTENT,
    LOOP_END_TOOLS,
    MAX_CALL_INPUT_CHARS,
    OUTPUT_TOOL_NAMES,
    OUTPUT_TOOL_PREFIXES,
    TOOL_CALL_ID_JSON_KEYS,
    TOOL_CALL_ID_KEYS,
    TOOL_CALL_INPUT_KEYS,
    TOOL_NAME_JSON,
    TOOL_NAME_PLACEHOLDERS,
    TOOL_NAME_SPAN_PREFIXES,
    TOOL_NAME_SPAN_SUFFIXES,
)
from watchdog.core.spans.failures import _failed
from watchdog.core.spans.outcome import at_path, flagged_error, result_error
from watchdog.core.spans.record import OTHER, SpanRecord
from watchdog.core.spans.values import (
    MAX_BRIEF_CHARS,
    MAX_NAME_CHARS,
    FirstValues,
    _as_text,
    _hidden,
    _load_json,
    canonical_arguments,
    stable_hash,
)


def _tool_name(name: str, firsts: FirstValues) -> str:
    tool: str | None = firsts[F_TOOL_NAME]
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


def _named_in_json(attrs: Mapping[str, object]) -> str | None:
    """The tool's name where the span names only its class (:attr:`Convention.
    tool_name_placeholders`): in its result (:attr:`Convention.tool_name_json`), if there."""
    for key, path in TOOL_NAME_JSON:
        raw = attrs.get(key)
        if not isinstance(raw, str) or f'"{path[-1]}"' not in raw:
            continue
        try:
            value = at_path(_load_json(raw), path)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, str) and value.strip():
            return value.strip()[:MAX_NAME_CHARS]
    return None


def _fill_tool(record: SpanRecord, name: str, attrs: Mapping[str, object],
               firsts: FirstValues, hidden: frozenset[str] = HIDDEN_CONTENT,
               no_arguments: frozenset[str] = frozenset()) -> None:
    """``hidden``: the texts that are hidden content on this span (its scope's);
    ``no_arguments``: those that are the arguments of a call that took none when its result
    is there (:attr:`Convention.no_arguments`)."""
    tool = _tool_name(name, firsts)
    if tool in TOOL_NAME_PLACEHOLDERS:
        tool = _named_in_json(attrs) or tool
    target: str | None = firsts[F_TRANSFER_TARGET]
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
        args = _hidden(firsts[F_TOOL_ARGS], hidden)
        if args is not None:
            record.final_output = brief(_as_text(args), MAX_BRIEF_CHARS)
        return
    if any(attrs.get(flag) is True for flag in DECLINED_TOOL_FLAGS):
        # A call the agent's client refused (its budget, a stop): the model got the refusal
        # as its result, no tool ran — no agent work, as the client counts it.
        record.kind = OTHER
        return
    if tool in LOOP_END_TOOLS and not record.error \
            and _is_loop_end(tool, name, firsts, firsts[F_TOOL_RESULT], hidden):
        # The framework's own tool to end its loop (DSPy ReAct's `finish`): no agent work,
        # and no answer either (a later step extracts it).
        record.kind = OTHER
        record.loop_end = True
        return
    args = _hidden(firsts[F_TOOL_ARGS], hidden)
    result = _hidden(firsts[F_TOOL_RESULT], hidden)
    if args is None and result is not None and firsts[F_TOOL_ARGS] in no_arguments:
        args = firsts[F_TOOL_ARGS]  # (its result shown: content captured, the call took none)
    if args is not None:
        # Without arguments (content capture off) two calls cannot be told apart: no hash,
        # so they never count as repeats of each other. Nor with a value of them hidden (a
        # filter that redacts the values of keys it takes for secrets: Mastra's `key`):
        # calls that differ only there would look the same.
        canonical = canonical_arguments(args)
        if not _any_hidden_value(canonical, hidden):
            record.args_hash = stable_hash(tool + "\0" + canonical)
        record.args_brief = brief(canonical, MAX_BRIEF_CHARS)
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


def _any_hidden_value(canonical: str, hidden: frozenset[str]) -> bool:
    """Whether canonical JSON arguments hold a placeholder for hidden content (one of
    ``hidden``) as a value."""
    return any(f'"{text}"' in canonical for text in hidden
               if text and '"' not in text and "\\" not in text)


def _is_loop_end(tool: str, name: str, firsts: FirstValues, result: object,
                 hidden: frozenset[str]) -> bool:
    """A loop-end tool's call: its own result, or (content capture off) a hidden result on a
    span named after the tool's method (DSPy's `finish.__call__`), no tool name recorded."""
    if result == LOOP_END_TOOLS[tool]:
        return True
    return isinstance(result, str) and result in hidden \
        and firsts[F_TOOL_NAME] is None \
        and any(name == tool + suffix for suffix in TOOL_NAME_SPAN_SUFFIXES)


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


def result_call_id(result: object) -> str | None:
    """The id of the model's tool call a tool's result says it answers (LangChain's
    ToolMessage: its ``tool_call_id``, at the top or one level down), where it says."""
    if isinstance(result, str):
        if len(result) > MAX_CALL_INPUT_CHARS or 'call_id"' not in result:
            return None
        try:
            result = _load_json(result)
        except ValueError:
            return None
    if isinstance(result, dict):
        found = _input_call_id(result)
        return found[:MAX_NAME_CHARS] if found else None
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
