"""Every convention combined once at import (:data:`TABLES`), in the shape the engine
(:mod:`watchdog.core.spans.conventions`) reads per span: attribute names in order of precedence
(entries earlier in :data:`~watchdog.core.spans.frameworks.CONVENTIONS` win), value maps and name
sets merged, patterns compiled.

An entry with ``scopes`` is combined with its span attributes renamed to their *aliases*
(:data:`SCOPED_MARK` + the name): no span carries those, so no other instrumentation's
attribute of the same name is read as the entry's; the spans of its scopes get them
(:mod:`watchdog.core.spans.scopes`, from :data:`Tables.scopes`). Its hidden texts are left out of
``hidden_content`` (every span's) and listed with its scopes instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from types import MappingProxyType

from watchdog.core.spans.frameworks import CONVENTIONS
from watchdog.core.spans.schema import (
    Convention,
    ErrorResult,
    Names,
    NestedAgent,
    OutputEnvelope,
    Path,
    Role,
    StepCap,
    StoppedStep,
    UnaskedTool,
)

# An attribute of a scoped entry, as the tables name it: never an attribute's own name (a control
# character), so only the spans of the entry's scopes, which get it, have it
SCOPED_MARK = "\x1f"
# The fields of an entry that name span attributes, and those whose entries' first item is one
# (attribute, path in its JSON): what an entry with scopes may set, besides its hidden texts
# and the fields that name none (SCOPE_FREE); its event attributes (`event:attribute`) are
# read from its scopes' spans' events (Scoped.events) and its scopes' log events alone
_SCOPED_NAMES = ("agent_name", "agent_span_name", "session", "response_id", "tool_name",
                 "tool_args", "tool_result", "answer", "llm_output", "answer_texts",
                 "finish_reasons", "input_messages", "output_messages", "input_tokens",
                 "output_tokens", "total_tokens", "response_model", "request_model", "provider",
                 "subagent_ids")
_SCOPED_PAIRS = ("agent_name_json", "error_json", "limit_error_json", "usage_json")
SCOPE_FREE = frozenset({"name", "emitted_by", "notes", "scopes", "hidden_content", "log_events",
                        "chunked_answers", "no_arguments",
                        "log_event_keys",
                        "limit_finish_reasons", "answer_finish_reasons", "tool_finish_reasons",
                        "limit_exceptions", "limit_status", "limit_phrases"})


def alias(name: str) -> str:
    """A scoped entry's attribute as its tables hold it (an event's attribute as it is)."""
    return name if ":" in name else SCOPED_MARK + name


def scoped(convention: Convention) -> Convention:
    """``convention`` as it is combined: with ``scopes``, its attributes renamed to their
    aliases and its hidden texts left out (they are its scopes')."""
    if not convention.scopes:
        if convention.chunked_answers:  # (read by scope alone: Scoped.chunked_answers)
            raise ValueError(f"convention {convention.name!r}: chunked_answers needs scopes")
        if convention.no_arguments:  # (read by scope alone: Scoped.no_arguments)
            raise ValueError(f"convention {convention.name!r}: no_arguments needs scopes")
        return convention
    default = Convention(convention.name, convention.emitted_by)
    unscopable = [field.name for field in fields(Convention)
                  if field.name not in SCOPE_FREE and field.name not in _SCOPED_NAMES
                  and field.name not in _SCOPED_PAIRS
                  and field.name not in ("kinds", "stopped_steps")
                  and getattr(convention, field.name) != getattr(default, field.name)]
    if unscopable:
        raise ValueError(f"convention {convention.name!r} has scopes: its {unscopable} "
                         f"cannot be read by scope (see combined.scoped)")
    changes: dict[str, object] = {
        name: tuple(alias(attribute) for attribute in getattr(convention, name))
        for name in _SCOPED_NAMES}
    changes.update({name: tuple((alias(entry[0]), *entry[1:])
                                for entry in getattr(convention, name))
                    for name in _SCOPED_PAIRS})
    changes["kinds"] = {alias(key): values for key, values in convention.kinds.items()}
    changes["stopped_steps"] = tuple(replace(step, continued=alias(step.continued),
                                             output=alias(step.output))
                                     for step in convention.stopped_steps)
    changes["hidden_content"] = frozenset()
    return replace(convention, **changes)  # type: ignore[arg-type]


ENTRIES = tuple(scoped(convention) for convention in CONVENTIONS)


@dataclass(frozen=True, slots=True)
class Scoped:
    """What the spans of an entry's scopes read that others do not: its attributes under
    their aliases, and its hidden texts."""

    scopes: Names  # scope names, or their beginnings
    aliases: tuple[tuple[str, str], ...]  # (attribute, its alias)
    hidden_content: frozenset[str]
    events: Mapping[str, frozenset[str]]  # its span events' facts (Tables.events)
    chunked_answers: bool  # (Convention.chunked_answers)
    no_arguments: frozenset[str]  # (Convention.no_arguments)


# The facts a span's events may bring (``<event>:<attribute>``)
_EVENT_FIELDS = ("tool_args", "tool_result", "answer", "llm_output", "finish_reasons",
                 "input_messages", "output_messages")


def _event_reads(entries: Iterable[Convention]) -> Mapping[str, frozenset[str]]:
    """Span event name -> the attributes ``entries`` read from such events."""
    wanted: dict[str, set[str]] = {}
    for entry in entries:
        for field_name in _EVENT_FIELDS:
            for name in getattr(entry, field_name):
                event, sep, attribute = name.partition(":")
                if sep:
                    wanted.setdefault(event, set()).add(attribute)
    return MappingProxyType({event: frozenset(attributes)
                             for event, attributes in wanted.items()})


def _scoped_reads(convention: Convention, entry: Convention) -> Scoped:
    names: dict[str, None] = {}
    for field in fields(Convention):
        value = getattr(entry, field.name)
        items = value.keys() if field.name == "kinds" else value \
            if isinstance(value, tuple) else ()
        for item in items:
            if field.name == "stopped_steps":
                names.update(dict.fromkeys((item.continued, item.output)))
            elif isinstance(item, str):
                names[item] = None
            elif isinstance(item, tuple) and item and isinstance(item[0], str):
                names[item[0]] = None
    aliases = tuple((name[len(SCOPED_MARK):], name) for name in names
                    if name.startswith(SCOPED_MARK))
    return Scoped(convention.scopes, aliases, convention.hidden_content, _event_reads([entry]),
                  convention.chunked_answers, convention.no_arguments)


def _names(attribute: str) -> Names:
    seen: dict[str, None] = {}
    events: dict[str, None] = {}
    for convention in ENTRIES:
        for name in getattr(convention, attribute):
            (events if ":" in name else seen)[name] = None
    return tuple(seen) + tuple(events)  # span attributes before event attributes


def _union(attribute: str) -> frozenset[str]:
    merged: set[str] = set()
    for convention in ENTRIES:
        merged |= getattr(convention, attribute)
    return frozenset(merged)


def _kind_maps(attribute: str) -> tuple[tuple[str, Mapping[str, Role]], ...]:
    merged: dict[str, dict[str, Role]] = {}
    for convention in ENTRIES:
        for key, values in getattr(convention, attribute).items():
            merged.setdefault(key, {}).update(values)
    return tuple((key, MappingProxyType(values)) for key, values in merged.items())


def _any_of(patterns: Names) -> re.Pattern[str] | None:
    """One regex matching a whole text that any of ``patterns`` matches whole (None: none)."""
    return re.compile("|".join(f"(?:{pattern})" for pattern in patterns)) if patterns else None


@dataclass(frozen=True, slots=True)
class Tables:
    """Every convention combined, in the shape the engine reads per span."""

    kinds: tuple[tuple[str, Mapping[str, Role]], ...]
    root_kinds: tuple[tuple[str, Mapping[str, Role]], ...]
    span_names: Mapping[str, Role]
    span_name_prefixes: tuple[tuple[str, Role], ...]
    unasked_tools: tuple[UnaskedTool, ...]
    model_call_marks: tuple[tuple[tuple[str, ...], ...], ...]
    tool_call_marks: tuple[tuple[tuple[str, ...], ...], ...]
    records: tuple[tuple[str, str], ...]
    nested_agent_roles: tuple[NestedAgent, ...]
    nested_step_span_names: frozenset[str]
    tool_run_span_names: frozenset[str]
    second_roots: frozenset[str]  # (Convention.second_roots' names, and the spans that end
    run_ends: frozenset[str]  # their runs)
    loop_calls: frozenset[str]  # (Convention.loop_call_span_names)
    nested_step_span_suffixes: Names
    agent_name: Names
    agent_span_name: Names
    agent_span_name_patterns: tuple[re.Pattern[str], ...]
    agent_span_name_placeholders: re.Pattern[str] | None
    agent_name_placeholders: frozenset[str]
    agent_name_json: tuple[tuple[str, Path], ...]
    root_agent_name_json: tuple[tuple[str, Path], ...]
    root_graph_json: tuple[tuple[str, Path, str, str], ...]
    agent_name_invocations: Names
    graph_node_json: tuple[tuple[str, Path], ...]
    wrapped_exceptions: Mapping[str, re.Pattern[str]]
    session: Names
    response_id: Names
    tool_name: Names
    tool_name_span_prefixes: Names
    tool_name_span_suffixes: Names
    tool_name_placeholders: frozenset[str]
    tool_name_json: tuple[tuple[str, Path], ...]
    tool_args: Names
    tool_args_envelopes: tuple[tuple[frozenset[str], str], ...]
    tool_result: Names
    tool_result_errors: tuple[ErrorResult, ...]
    tool_result_error_texts: tuple[tuple[str, str, re.Pattern[str]], ...]
    tool_error_flags: tuple[tuple[str, str, Path], ...]
    answer_tools: frozenset[str]
    answer_tool_prefixes: Names
    # ... those of conventions whose answer ends the agent first (``answer_ends_first``)
    first_answer_tools: frozenset[str]
    first_answer_tool_prefixes: Names
    hidden_content: frozenset[str]
    loop_end_tools: Mapping[str, str]
    llm_span_suffixes: Names
    answer: Names
    llm_output: Names
    answer_texts: Names
    llm_input: Names
    finish_reasons: Names
    input_messages: Names
    output_messages: Names
    output_envelopes: tuple[OutputEnvelope, ...]
    flat_input_prefixes: Names
    flat_output_prefixes: Names
    input_tokens: Names
    output_tokens: Names
    total_tokens: Names
    usage_json: tuple[tuple[str, Path, Path], ...]
    response_model: Names
    request_model: Names
    provider: Names
    answer_finish_reasons: frozenset[str]
    tool_finish_reasons: frozenset[str]
    limit_finish_reasons: frozenset[str]
    limit_exceptions: frozenset[str]
    limit_status: tuple[tuple[re.Pattern[str], str], ...]
    limit_phrases: tuple[tuple[re.Pattern[str], str], ...]
    limit_error_json: tuple[tuple[str, Path], ...]
    error_json: tuple[tuple[str, Path], ...]
    limit_attributes: Names
    declined_tool_flags: Names
    limit_states: tuple[tuple[str, re.Pattern[str], str], ...]
    step_caps: tuple[StepCap, ...]
    stopped_steps: tuple[StoppedStep, ...]
    cap_requests: tuple[tuple[str, str], ...]
    loop_caps: Mapping[str, str]
    hidden_answers: Names
    team_members: Names
    limit_prompts: tuple[tuple[str, str], ...]
    limit_system_prompts: tuple[tuple[str, str], ...]
    limit_answers: tuple[tuple[str, str], ...]
    limit_answer_patterns: tuple[tuple[re.Pattern[str], str], ...]
    conversation_outputs: tuple[tuple[str, str], ...]
    call_limits: tuple[tuple[str, tuple[str, ...], str], ...]
    budget_limits: tuple[tuple[str, str], ...]
    budget_consumed: tuple[tuple[str, str], ...]
    turn_counts: Names
    reported_cost: Names
    cache_read_tokens: Names
    cache_write_tokens: Names
    input_messages_delta: Names
    transfer_targets: Names
    caller_names: Names
    subagent_ids: Names
    log_events: Names
    log_event_keys: Names
    scopes: tuple[Scoped, ...]  # the entries with scopes: what their spans read besides

    # span event name -> the attributes read from such events, on every span: the entries
    # without scopes' (a scoped entry's are read on its scopes' spans alone: Scoped.events)
    events: Mapping[str, frozenset[str]]


def combine() -> Tables:
    return Tables(
        kinds=_kind_maps("kinds"),
        root_kinds=_kind_maps("root_kinds"),
        span_names=MappingProxyType({name: role for convention in ENTRIES
                                     for name, role in convention.span_names.items()}),
        span_name_prefixes=tuple(pair for convention in ENTRIES
                                 for pair in convention.span_name_prefixes),
        unasked_tools=tuple(rule for convention in ENTRIES
                            for rule in convention.unasked_tools),
        model_call_marks=tuple(convention.model_call_marks for convention in ENTRIES
                               if convention.model_call_marks),
        tool_call_marks=tuple(convention.tool_call_marks for convention in ENTRIES
                              if convention.tool_call_marks),
        records=tuple(pair for convention in ENTRIES for pair in convention.records),
        nested_agent_roles=tuple(rule for convention in ENTRIES
                                 for rule in convention.nested_agent_roles),
        nested_step_span_names=frozenset(_names("nested_step_span_names")),
        tool_run_span_names=frozenset(_names("tool_run_span_names")),
        second_roots=frozenset(name for convention in ENTRIES for name in convention.second_roots),
        run_ends=frozenset(name for convention in ENTRIES
                           for name in convention.second_roots.values()),
        loop_calls=frozenset(_names("loop_call_span_names")),
        nested_step_span_suffixes=_names("nested_step_span_suffixes"),
        agent_name=_names("agent_name"),
        agent_span_name=_names("agent_span_name"),
        agent_span_name_patterns=tuple(re.compile(pattern) for convention in ENTRIES
                                       for pattern in convention.agent_span_name_patterns),
        agent_span_name_placeholders=_any_of(_names("agent_span_name_placeholders")),
        agent_name_placeholders=frozenset(_names("agent_name_placeholders")),
        agent_name_json=tuple(pair for convention in ENTRIES
                              for pair in convention.agent_name_json),
        root_agent_name_json=tuple(pair for convention in ENTRIES
                                   for pair in convention.root_agent_name_json),
        root_graph_json=tuple(rule for convention in ENTRIES
                              for rule in convention.root_graph_json),
        agent_name_invocations=_names("agent_name_invocations"),
        graph_node_json=tuple(pair for convention in ENTRIES
                              for pair in convention.graph_node_json),
        wrapped_exceptions=MappingProxyType({
            exc_type: re.compile(pattern) for convention in ENTRIES
            for exc_type, pattern in convention.wrapped_exceptions}),
        session=_names("session"),
        response_id=_names("response_id"),
        tool_name=_names("tool_name"),
        tool_name_span_prefixes=_names("tool_name_span_prefixes"),
        tool_name_span_suffixes=_names("tool_name_span_suffixes"),
        tool_name_placeholders=_union("tool_name_placeholders"),
        tool_name_json=tuple(pair for convention in CONVENTIONS
                             for pair in convention.tool_name_json),
        tool_args=_names("tool_args"),
        tool_args_envelopes=tuple(pair for convention in ENTRIES
                                  for pair in convention.tool_args_envelopes),
        tool_result=_names("tool_result"),
        tool_result_errors=tuple(entry for convention in ENTRIES
                                 for entry in convention.tool_result_errors),
        tool_result_error_texts=tuple((attribute, end, re.compile(pattern))
                                      for convention in ENTRIES
                                      for attribute, end, pattern
                                      in convention.tool_result_error_texts),
        tool_error_flags=tuple(entry for convention in ENTRIES
                               for entry in convention.tool_error_flags),
        answer_tools=_union("answer_tools"),
        loop_end_tools=MappingProxyType({name: result for convention in ENTRIES
                                         for name, result in convention.loop_end_tools}),
        answer_tool_prefixes=_names("answer_tool_prefixes"),
        first_answer_tools=frozenset(name for convention in ENTRIES
                                     if convention.answer_ends_first
                                     for name in convention.answer_tools),
        first_answer_tool_prefixes=tuple(prefix for convention in ENTRIES
                                         if convention.answer_ends_first
                                         for prefix in convention.answer_tool_prefixes),
        hidden_content=_union("hidden_content"),
        llm_span_suffixes=_names("llm_span_suffixes"),
        answer=_names("answer"),
        llm_output=_names("llm_output"),
        answer_texts=_names("answer_texts"),
        llm_input=_names("llm_input"),
        finish_reasons=_names("finish_reasons"),
        input_messages=_names("input_messages"),
        output_messages=_names("output_messages"),
        output_envelopes=tuple(entry for convention in ENTRIES
                               for entry in convention.output_envelopes),
        flat_input_prefixes=_names("flat_input_prefixes"),
        flat_output_prefixes=_names("flat_output_prefixes"),
        input_tokens=_names("input_tokens"),
        output_tokens=_names("output_tokens"),
        total_tokens=_names("total_tokens"),
        usage_json=tuple(entry for convention in ENTRIES for entry in convention.usage_json),
        response_model=_names("response_model"),
        request_model=_names("request_model"),
        provider=_names("provider"),
        answer_finish_reasons=_union("answer_finish_reasons"),
        tool_finish_reasons=_union("tool_finish_reasons"),
        limit_finish_reasons=_union("limit_finish_reasons"),
        limit_exceptions=_union("limit_exceptions"),
        limit_status=tuple((re.compile(pattern), limit) for convention in ENTRIES
                           for pattern, limit in convention.limit_status),
        limit_phrases=tuple((re.compile(pattern), limit) for convention in ENTRIES
                            for pattern, limit in convention.limit_phrases),
        limit_error_json=tuple(pair for convention in ENTRIES
                               for pair in convention.limit_error_json),
        error_json=tuple(pair for convention in ENTRIES for pair in convention.error_json),
        limit_attributes=_names("limit_attributes"),
        declined_tool_flags=_names("declined_tool_flags"),
        limit_states=tuple((attribute, re.compile(pattern), limit)
                           for convention in ENTRIES
                           for attribute, pattern, limit in convention.limit_states),
        step_caps=tuple(entry for convention in ENTRIES for entry in convention.step_caps),
        stopped_steps=tuple(entry for convention in ENTRIES
                            for entry in convention.stopped_steps),
        cap_requests=tuple(pair for convention in ENTRIES
                           for pair in convention.cap_requests),
        loop_caps=MappingProxyType({name: limit for convention in ENTRIES
                                    for name, limit in convention.loop_caps}),
        hidden_answers=_names("hidden_answers"),
        team_members=_names("team_members"),
        limit_prompts=tuple(pair for convention in ENTRIES
                            for pair in convention.limit_prompts),
        limit_system_prompts=tuple(pair for convention in ENTRIES
                                   for pair in convention.limit_system_prompts),
        limit_answers=tuple(pair for convention in ENTRIES
                            for pair in convention.limit_answers),
        limit_answer_patterns=tuple((re.compile(pattern), limit) for convention in ENTRIES
                                    for pattern, limit in convention.limit_answer_patterns),
        conversation_outputs=tuple(pair for convention in ENTRIES
                                   for pair in convention.conversation_outputs),
        call_limits=tuple(entry for convention in ENTRIES
                          for entry in convention.call_limits),
        budget_limits=tuple(pair for convention in ENTRIES
                            for pair in convention.budget_limits),
        budget_consumed=tuple(pair for convention in ENTRIES
                              for pair in convention.budget_consumed),
        turn_counts=_names("turn_counts"),
        reported_cost=_names("reported_cost"),
        cache_read_tokens=_names("cache_read_tokens"),
        cache_write_tokens=_names("cache_write_tokens"),
        input_messages_delta=_names("input_messages_delta"),
        transfer_targets=_names("transfer_targets"),
        caller_names=_names("caller_names"),
        subagent_ids=_names("subagent_ids"),
        log_events=_names("log_events"),
        log_event_keys=_names("log_event_keys"),
        events=_event_reads(entry for entry in ENTRIES if not entry.scopes),
        scopes=tuple(_scoped_reads(convention, entry)
                     for convention, entry in zip(CONVENTIONS, ENTRIES, strict=True)
                     if convention.scopes),
    )


TABLES = combine()
