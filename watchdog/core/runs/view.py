"""What the core hands out about a run: a frozen :class:`RunView`, and its JSON shapes in the
control API (``GET /v1/runs``, ``GET /v1/runs/{id}``).

A view is taken once, at a ``now``, from the live :class:`~watchdog.core.runs.run.RunState`
(:meth:`~watchdog.core.runs.run.RunState.view`): by the core, at the end of a step, for every run
the step touched, finished or decided on; by the queries, for the API. It holds plain values,
tuples and read-only mappings, so delivery (directives, report prompts), metrics, logs and the
API read it without reaching back into live state, and it stays as it was when the run changes
afterwards. Its ``signals`` are :meth:`RunState.signals <watchdog.core.runs.run.RunState.signals>`
at ``now`` (the ``run`` object of DESIGN §4); the typed accessors read them. This module imports
nothing that holds live state.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from string import Formatter
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

from watchdog.core.runs.terminal import TerminalState


class RunView(NamedTuple):
    """One run as it was at ``at`` (seconds since the epoch, the sidecar's clock).

    A named tuple rather than a frozen dataclass: the core takes one for every run each step
    touches, and a frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field) cost
    ~7x a named tuple's construction, about as much as building the signals it holds."""

    key: str
    trace_id: str
    agent: str  # the agent's name, else the service's, else "unknown"
    session: str | None
    parent_run: str | None
    spans: int
    activity_seq: int  # activity entries the run has had (0: none yet)
    signals: Mapping[str, Any]  # read-only; its ``tools`` and ``budget`` too
    terminal_state: TerminalState | None
    terminal_reason: str | None
    final_output: str | None
    first_seen: float
    started_at: float | None  # its first span's start (the agent's clock); None: no span yet
    last_seen: float
    last_progress: float
    ended_at: float | None
    at: float
    framed: bool = False  # the client SDK announced it (its spans count the tools)
    root_span: str | None = None  # its root span (else its first), in its first trace

    def trace_url(self, template: str | None) -> str | None:
        """The run's link into the tracing UI (config ``trace_url``; None: none configured,
        or no trace known yet)."""
        return trace_link(template, self.trace_id, self.root_span)

    @property
    def ended(self) -> bool:
        return bool(self.signals["ended"])

    @property
    def iterations(self) -> int:
        return int(self.signals["iterations"])

    @property
    def tool_calls(self) -> int:
        return int(self.signals["tool_calls"])

    @property
    def cost_usd(self) -> float:
        return float(self.signals["cost_usd"])

    @property
    def errors(self) -> int:
        return int(self.signals["errors"])

    @property
    def consecutive_errors(self) -> int:
        return int(self.signals["consecutive_errors"])

    @property
    def total_tokens(self) -> int:
        return int(self.signals["total_tokens"])

    @property
    def messages(self) -> int:
        return int(self.signals["messages"])

    @property
    def in_flight(self) -> int:
        return int(self.signals["in_flight"])

    @property
    def last_error(self) -> str:
        return str(self.signals["last_error"])

    @property
    def elapsed_seconds(self) -> float:
        return float(self.signals["elapsed_seconds"])

    @property
    def has_final_answer(self) -> bool:
        return bool(self.signals["has_final_answer"])

    @property
    def budget(self) -> Mapping[str, float]:
        """``max_*`` and ``remaining_*`` of each known budget (rule-pack defaults included)."""
        budget: Mapping[str, float] = self.signals["budget"]
        return budget

    def idle_seconds(self, now: float | None = None) -> float:
        """Seconds since the run's last progress, at ``now`` (default: when the view was taken);
        0 once it ended."""
        if self.ended:
            return 0.0
        return max((self.at if now is None else now) - self.last_progress, 0.0)


class OpenedRun(NamedTuple):
    """What the model endpoint reads of its run at a request (:meth:`Core.open_run
    <watchdog.core.step.Core.open_run>`): the few signals its steering counts, at ``now``, as a
    :class:`RunView` taken then holds them (a whole view reads every signal: ~4x these)."""

    key: str
    agent: str  # the agent's name, else the service's, else "unknown"
    framed: bool  # the client SDK announced it (its spans count the tools)
    terminal_state: TerminalState | None
    ended: bool
    iterations: int
    tool_calls: int
    cost_usd: float
    total_tokens: int
    budget: Mapping[str, float]  # read-only: ``max_*`` and ``remaining_*`` of each known budget


TRACE_URL_FIELDS = ("trace_id", "span_id")  # the placeholders of config ``trace_url``


def trace_url_problem(template: str) -> str | None:
    """What is wrong with a ``trace_url`` template (None: nothing): it names ``{trace_id}``,
    no placeholder but ``{trace_id}`` and ``{span_id}``, and is an http(s) URL."""
    try:
        names = [name for _, name, _, _ in Formatter().parse(template) if name is not None]
    except ValueError as exc:  # a lone { or }
        return f"{exc} (write a literal brace as {{{{ or }}}})"
    unknown = sorted({name for name in names if name not in TRACE_URL_FIELDS})
    if unknown:
        return (f"unknown placeholder {{{unknown[0]}}}: the placeholders are "
                + " and ".join(f"{{{name}}}" for name in TRACE_URL_FIELDS))
    if "trace_id" not in names:
        return "it must contain {trace_id}"
    if urlsplit(template).scheme not in ("http", "https") or not urlsplit(template).netloc:
        return "it must be an http:// or https:// URL"
    return None


def trace_link(template: str | None, trace_id: str, span_id: str | None) -> str | None:
    """``template`` with the run's trace and span ids (quoted for a URL); None without a
    template or a trace id."""
    if not template or not trace_id:
        return None
    return template.format(trace_id=quote(trace_id, safe=""),
                           span_id=quote(span_id or "", safe=""))


def plain(value: Any) -> Any:
    """A view's mapping as plain dicts (for JSON)."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    return value


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def run_summary(view: RunView, trace_url: str | None = None) -> dict[str, Any]:
    """The short form used in lists (``trace_url``: the config's template)."""
    return {
        "id": view.key,
        "agent": view.agent,
        "session": view.session,
        "trace_id": view.trace_id,
        "trace_url": view.trace_url(trace_url),
        "state": "ended" if view.ended else "active",
        "iterations": view.iterations,
        "tool_calls": view.tool_calls,
        "errors": view.errors,
        "total_tokens": view.total_tokens,
        "cost_usd": round(view.cost_usd, 6),  # the priced calls only
        "unpriced_calls": int(view.signals["unpriced_calls"]),  # model calls with no price
        "elapsed_seconds": round(view.elapsed_seconds, 3),
        "idle_seconds": round(view.idle_seconds(), 3),
        "terminal_state": view.terminal_state.value if view.terminal_state else None,
        "has_final_answer": view.has_final_answer,
    }


def run_detail(view: RunView, trace_url: str | None = None) -> dict[str, Any]:
    """Everything the API shows about one run."""
    signals = plain(view.signals)
    return {
        **run_summary(view, trace_url),
        "parent_run": view.parent_run,
        "started_at": iso(view.started_at if view.started_at is not None else view.first_seen),
        "ended_at": iso(view.ended_at),
        "last_seen_at": iso(view.last_seen),
        "spans": view.spans,
        "signals": signals,
        "budget": signals["budget"],
        "terminal_reason": view.terminal_reason,
        "final_output": view.final_output,
        "directives": [],
    }
