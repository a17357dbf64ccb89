"""What a span is and whose: its role by the first convention that says so (:func:`role_of`),
the agent its JSON or its trace's root names, its run key (DESIGN §3), the facts spans fall back
on from their resource (:class:`Resource`) and the budget a span or its resource announces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from watchdog.core.bounds import budget_limit
from watchdog.core.spans.attributes import (
    AGENT_NAME_JSON,
    AGENT_NAME_KEYS,
    AGENT_NAME_PLACEHOLDERS,
    AGENT_ROLE,
    AGENT_SPAN_NAME_PATTERNS,
    ANNOUNCED_BUDGET,
    BUDGET_ATTRIBUTES,
    BUDGET_LIMIT_KEYS,
    F_AGENT_CALL_ID,
    F_RUN_ID,
    GRAPH_NODE_JSON,
    KIND_MAPS,
    MODEL_CALL_MARKS,
    NESTED_AGENT_ROLES,
    NESTED_STEP_SPAN_NAMES,
    NESTED_STEP_SPAN_SUFFIXES,
    PARENT_RUN_KEYS,
    RECORD_SPANS,
    ROLE_KINDS,
    ROOT_AGENT_NAME_JSON,
    ROOT_GRAPH_JSON,
    ROOT_KIND_MAPS,
    RUN_ID_KEYS,
    SESSION_KEYS,
    SPAN_NAME_PREFIX_ROLES,
    SPAN_NAME_ROLES,
    TOOL_CALL_MARKS,
    UNASKED_TOOLS,
    WORKFLOW,
)
from watchdog.core.spans.outcome import at_path
from watchdog.core.spans.record import (
    KEY_AGENT_CALL,
    KEY_TRACE,
    KEY_WATCHDOG,
    WHOLE_BUDGET_KEYS,
    KeySource,
    SpanKind,
)
from watchdog.core.spans.schema import Path, Role
from watchdog.core.spans.values import (
    MAX_NAME_CHARS,
    Firsts,
    FirstValues,
    _encodable,
    _first_str,
    _load_json,
)


def role_of(name: str, attrs: Mapping[str, object], is_root: bool = False) -> Role | None:
    """What the span is, by the first convention that says so (None: plumbing)."""
    for key, roles in KIND_MAPS:
        value = attrs.get(key)
        if isinstance(value, str):
            role = roles.get(value)
            if role is not None:
                return role
        elif isinstance(value, list):  # a string array (Griptape's `tags`): any string of it
            for item in value:
                role = roles.get(item) if isinstance(item, str) else None
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
    for key, value in RECORD_SPANS:
        if attrs.get(key) == value:
            return None
    for groups in MODEL_CALL_MARKS:
        if all(any(key in attrs for key in group) for group in groups):
            return Role.LLM
    for groups in TOOL_CALL_MARKS:
        if all(any(key in attrs for key in group) for group in groups):
            return Role.TOOL
    return None


def nested_agent_role(name: str, attrs: Mapping[str, object]) -> Role | None:
    """What a span of agent kind below the trace root is when a convention says it is no agent
    (:attr:`~watchdog.core.spans.schema.Convention.nested_agent_roles`): a step of the run it is
    in (None) or a tool call; AGENT otherwise."""
    for rule in NESTED_AGENT_ROLES:
        for key, value in rule.where:
            found = attrs.get(key)
            if found is None or (value is not None and found != value):
                break
        else:
            return rule.role
    if (name in NESTED_STEP_SPAN_NAMES or name.endswith(NESTED_STEP_SPAN_SUFFIXES)) \
            and _first_str(attrs, AGENT_NAME_KEYS) is None:
        return None
    return AGENT_ROLE


def unasked_tool(attrs: Mapping[str, object]) -> bool:
    """Whether a tool span is one no model asked for: of a kind some convention gives call ids
    to (:class:`~watchdog.core.spans.schema.UnaskedTool`), without one."""
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
        if not path:  # the attribute's own value (a flattened metadata key: Langfuse's)
            return raw
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


def _root_graph(name: str, attrs: Mapping[str, object]) -> str | None:
    """The graph a trace's root is the invocation of, by its name (:attr:`Convention.
    root_graph_json`): parsed only when the value occurs in the text."""
    for key, path, value, default in ROOT_GRAPH_JSON:
        raw = attrs.get(key)
        if not isinstance(raw, str) or (path and f'"{value}"' not in raw):
            continue
        found: object = raw  # an empty path: the attribute's own value (flattened metadata)
        if path:
            try:
                found = at_path(_load_json(raw), path)
            except (ValueError, RecursionError):
                continue
        if found == value and name and name != default and _encodable(name):
            return name[:MAX_NAME_CHARS]
    return None


def named(agent: str | None) -> str | None:
    """An agent's name as a span gives it, None for a stand-in that names no agent
    (:attr:`~watchdog.core.spans.schema.Convention.agent_name_placeholders`)."""
    return None if agent in AGENT_NAME_PLACEHOLDERS else agent


def _agent_from_span_name(name: str) -> str | None:
    for pattern in AGENT_SPAN_NAME_PATTERNS:
        match = pattern.match(name)
        if match:
            return named(match.group("name"))
    return None


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource's attributes and the facts spans fall back on, resolved once per resource
    rather than once for each of its spans."""

    attrs: Mapping[str, object]
    run_id: str | None
    agent: str | None
    service: str | None  # already cut to MAX_NAME_CHARS
    # which process of the service (OTel's service.namespace and service.instance.id): two
    # replicas of one service are two agents
    instance: str | None
    session: str | None
    parent_run: str | None
    announces_budget: bool

    @classmethod
    def of(cls, attrs: Mapping[str, object]) -> Resource:
        service = _first_str(attrs, ("service.name",))
        return cls(attrs=attrs, run_id=_first_str(attrs, RUN_ID_KEYS),
                   agent=named(_first_str(attrs, AGENT_NAME_KEYS)),
                   service=service[:MAX_NAME_CHARS] if service else None,
                   instance=_instance(attrs),
                   session=_first_str(attrs, SESSION_KEYS),
                   parent_run=_first_str(attrs, PARENT_RUN_KEYS),
                   announces_budget=not BUDGET_ATTRIBUTES.isdisjoint(attrs))


def _instance(attrs: Mapping[str, object]) -> str | None:
    """The process of its service a resource names (``service.namespace``,
    ``service.instance.id``), or None when it names none."""
    namespace = _first_str(attrs, ("service.namespace",))
    instance = _first_str(attrs, ("service.instance.id",))
    if namespace is None and instance is None:
        return None
    return f"{(namespace or '')[:MAX_NAME_CHARS]}/{(instance or '')[:MAX_NAME_CHARS]}"


def _budget(attrs: Mapping[str, object], resource: Resource) -> dict[str, float] | None:
    """The budget a span (or its resource) announces, or the agent reports as its own limits
    (an announcement wins)."""
    if not resource.announces_budget and BUDGET_ATTRIBUTES.isdisjoint(attrs):
        return None  # the common case, decided without a lookup per key
    budget = _budget_numbers(attrs, resource, BUDGET_LIMIT_KEYS)
    for key, attribute in ANNOUNCED_BUDGET:
        limit = budget_limit(attrs.get(attribute, resource.attrs.get(attribute)),
                             key in WHOLE_BUDGET_KEYS, text=True)
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
        number = budget_limit(attrs.get(attribute, resource.attrs.get(attribute)),
                              key in WHOLE_BUDGET_KEYS, text=True)
        if number is not None:
            if numbers is None:
                numbers = {}
            numbers[key] = number
    return numbers


def run_key(trace_id: str, attrs: Mapping[str, object], resource: Resource,
            firsts: FirstValues | None = None) -> tuple[str, KeySource]:
    if firsts is None:
        firsts = Firsts(attrs)
    # (never cut: an id too long is refused whole by the id rule, pipeline._checked; two ids
    # cut to one prefix would be one run)
    explicit = firsts[F_RUN_ID] or resource.run_id
    if explicit:
        return explicit, KEY_WATCHDOG
    call_id = firsts[F_AGENT_CALL_ID]
    if call_id:
        return call_id, KEY_AGENT_CALL
    return "trace:" + trace_id, KEY_TRACE
