"""The compiled decode (native/otlp, Rust): see watchdog.core.spans.native."""

from collections.abc import Callable, Iterable, Mapping

class Tables:
    def __init__(self, wanted: Iterable[str], scalars: Iterable[str],
                 json_encoded: Callable[[str, bool], object], max_name_chars: int,
                 min_time_ns: int,
                 firsts: Iterable[tuple[tuple[str, ...], bool]] | None = None) -> None: ...

def decode(body: bytes, tables: Tables) -> Request:
    """Raises ValueError (upb's words) for bytes that are no ExportTraceServiceRequest."""

class Request:
    @property
    def resource_spans(self) -> list[ResourceSpans]: ...

class ResourceSpans:
    @property
    def resource(self) -> Resource: ...
    @property
    def scope_spans(self) -> list[ScopeSpans]: ...
    @property
    def schema_url(self) -> str: ...

class Resource:
    @property
    def attributes(self) -> list[KeyValue]: ...
    @property
    def dropped_attributes_count(self) -> int: ...

class ScopeSpans:
    @property
    def scope(self) -> Scope: ...
    @property
    def spans(self) -> list[Span]: ...
    @property
    def schema_url(self) -> str: ...

class Scope:
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def attributes(self) -> list[KeyValue]: ...
    @property
    def dropped_attributes_count(self) -> int: ...

class Span:
    @property
    def trace_id(self) -> bytes: ...
    @property
    def span_id(self) -> bytes: ...
    @property
    def parent_span_id(self) -> bytes: ...
    @property
    def trace_state(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def flags(self) -> int: ...
    @property
    def kind(self) -> int: ...
    @property
    def start_time_unix_nano(self) -> int: ...
    @property
    def end_time_unix_nano(self) -> int: ...
    @property
    def attributes(self) -> list[KeyValue]: ...
    @property
    def dropped_attributes_count(self) -> int: ...
    @property
    def events(self) -> list[Event]: ...
    @property
    def dropped_events_count(self) -> int: ...
    @property
    def links(self) -> list[Link]: ...
    @property
    def dropped_links_count(self) -> int: ...
    @property
    def status(self) -> Status: ...
    def SerializeToString(self) -> bytes: ...
    def selected(self) -> dict[str, object]: ...
    def read(self) -> tuple[dict[str, object], tuple[object, ...]]:
        """``selected()`` and the tables' first-present facts, by index."""
    def head(self) -> tuple[str, str, str | None, str, int, int] | None: ...
    def record(self, attrs: dict[str, object], firsts: tuple[object, ...], resource: object,
               normaliser: Normaliser) -> tuple[object, int] | None:
        """``normalise`` of the span where the compiled normalise is sure of it: (the record,
        what is left to fill: 0 nothing, 1 its role's facts, 2 its status and events and its
        role's facts, 3 its role's facts with its events); None: unsure."""

class Status:
    @property
    def code(self) -> int: ...
    @property
    def message(self) -> str: ...

class Event:
    @property
    def time_unix_nano(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def attributes(self) -> list[KeyValue]: ...
    @property
    def dropped_attributes_count(self) -> int: ...

class Link:
    @property
    def trace_id(self) -> bytes: ...
    @property
    def span_id(self) -> bytes: ...
    @property
    def trace_state(self) -> str: ...
    @property
    def attributes(self) -> list[KeyValue]: ...
    @property
    def dropped_attributes_count(self) -> int: ...
    @property
    def flags(self) -> int: ...

class KeyValue:
    @property
    def key(self) -> str: ...
    @property
    def value(self) -> AnyValue: ...
    @property
    def key_strindex(self) -> int: ...

class AnyValue:
    @property
    def string_value(self) -> str: ...
    @property
    def bool_value(self) -> bool: ...
    @property
    def int_value(self) -> int: ...
    @property
    def double_value(self) -> float: ...
    @property
    def array_value(self) -> ArrayValue: ...
    @property
    def kvlist_value(self) -> KeyValueList: ...
    @property
    def bytes_value(self) -> bytes: ...
    @property
    def string_value_strindex(self) -> int: ...
    def WhichOneof(self, name: str) -> str | None: ...

class ArrayValue:
    @property
    def values(self) -> list[AnyValue]: ...

class KeyValueList:
    @property
    def values(self) -> list[KeyValue]: ...

class Normaliser:
    """The tables ``Span.record`` reads (see ``watchdog.core.spans.native._normaliser``)."""
    def __init__(self, record_class: type, kinds: tuple[object, object, object],
                 sources: tuple[object, object, object], roles: tuple[object, object, object],
                 kind_maps: Iterable[tuple[str, dict[str, object]]],
                 dispatch_unsure: Iterable[str], agent_unsure: Iterable[str],
                 step_names: Iterable[str], step_suffixes: Iterable[str],
                 facts: tuple[int, int, int, int, int, int, int, int, int],
                 agent_placeholders: Iterable[str], answer_tools: Iterable[str],
                 answer_tool_prefixes: Iterable[str],
                 left_tools: Iterable[str], tool_unsure: Iterable[str],
                 result_texts: Iterable[tuple[str, str]], hidden: Iterable[str],
                 hidden_values: Iterable[str],
                 unasked: Iterable[tuple[str, object, Iterable[str]]],
                 call_id_keys: Iterable[str], json: Json, brief: Callable[[str, int], str],
                 max_name_chars: int, max_brief_chars: int, client_run_span: str,
                 model_calls: ModelCalls, agents: Agents, failures: Failures,
                 second_roots: Iterable[str], run_ends: Iterable[str],
                 loop_calls: Iterable[str]) -> None: ...

class ModelCalls:
    """The tables a model call's facts are read by (``native/otlp/src/model_calls.rs``)."""
    def __init__(self, places: tuple[int, ...], tool_reasons: list[str],
                 limit_reasons: list[str], usage_keys: Iterable[str], reports_cost: bool,
                 answer_tool_scan: str | None, max_reason_chars: int, max_name_chars: int,
                 max_tokens: int, max_cost: float, flat_inputs: Iterable[str],
                 flat_outputs: Iterable[str], flat_tool_calls: str,
                 asked_flat: Iterable[tuple[str, str, str, str]], max_asked: int,
                 reports_delta: bool,
                 answers: tuple[list[str], Iterable[str], list[str], int,
                                Callable[[str, int], str], int, list[tuple[str, str]],
                                list[tuple[str, str]], int, Iterable[str], object,
                                tuple[list[str], list[str], list[str]]]
                 ) -> None: ...

class Agents:
    """The tables an agent's facts are read by (``native/otlp/src/agents.rs``)."""
    def __init__(self, places: tuple[int, ...], limit_reasons: list[str],
                 state_keys: Iterable[str],
                 state_limit: Callable[[Mapping[str, object]], str | None],
                 answer_patterns: Phrases | None, answer_pattern_limits: list[str],
                 limit_answers: list[tuple[str, str]], tail_chars: int,
                 answer_limit: Callable[[object], str | None],
                 error_rules: list[tuple[str, str | None]],
                 error_limit: Callable[[Mapping[str, object]], str | None],
                 cap_requests: list[tuple[str, str]], hidden_answers: Iterable[str],
                 loop_caps: list[str], conversations: list[tuple[str, str]],
                 empty_outputs: list[str], hidden: list[str], hidden_chars: int,
                 brief: Callable[[str, int], str], max_brief_chars: int,
                 max_reason_chars: int, max_name_chars: int, max_tokens: int) -> None: ...

class Failures:
    """The tables a failure is read by (``native/otlp/src/failures.rs``)."""
    def __init__(self, wrapped: list[str], status: Phrases | None, status_limits: list[str],
                 phrases: Phrases | None, phrase_limits: list[str],
                 limit_exceptions: list[str], error_type_keys: Iterable[str],
                 reported_keys: Iterable[str], brief: Callable[[str, int], str],
                 mask: Callable[[str], str], max_name_chars: int, max_error_chars: int,
                 max_phrase_chars: int) -> None: ...

class Phrases:
    """The limit phrases' regexes in one pass; ValueError for one Rust's regex does not read."""
    def __init__(self, patterns: list[str]) -> None: ...
    def first(self, text: str) -> int:
        """The first pattern found; -1 none; -2 a text that is no UTF-8."""

class Searcher:
    """A rule pack's action_pattern, searched in linear time; ValueError for one it does not
    read."""
    def __init__(self, pattern: str) -> None: ...
    def search(self, text: str) -> list[str | None] | None:
        """The first match and its groups' texts; None: no match."""

class Json:
    """Tool arguments' canonical JSON and a model output's tool calls, read by serde_json."""
    def __init__(self, envelopes: Iterable[tuple[frozenset[str], str]],
                 asked_lists: Iterable[tuple[str, str | None, tuple[tuple[str | int, ...], ...],
                                             tuple[str | int, ...]]],
                 max_asked: int, max_name: int) -> None: ...
    def canonical(self, text: str) -> str | None: ...
    def asked(self, text: str) -> tuple[tuple[str, str], ...] | None: ...

class Signatures:
    """A run's tool-call signatures folded in Rust (``counts.tool_signatures``'s twin)."""
    def __init__(self, max_distinct: int, max_cycle: int) -> None: ...
    def fold(self, call_counts: dict[int, int], recent: list[int], cycle_runs: list[int],
             result_counts: dict[int, tuple[int, int]], call: int,
             result: int | None) -> tuple[int, int, int]:
        """(the call's count or 0, the cycle repeats, the result's count or 0); the dict and
        lists changed as the twin changes them."""

class Briefs:
    """``redact.brief`` answered in Rust for an ASCII text with none of ``anchors`` in it."""
    def __init__(self, anchors: list[str], python: Callable[[str, int], str]) -> None: ...
    def __call__(self, text: str, limit: int) -> str: ...

def stable_hash(text: str) -> int | None:
    """BLAKE2b-64 of the text's UTF-8, signed; None for a text with a lone surrogate."""
