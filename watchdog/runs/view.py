"""The JSON shape of a run in the control API (``GET /v1/runs/{id}``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from watchdog.runs.run import NS, RunState


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def run_summary(run: RunState, now: float) -> dict[str, Any]:
    """The short form used in lists."""
    return {
        "id": run.key,
        "agent": run.agent_name,
        "session": run.session,
        "trace_id": run.trace_id,
        "state": "ended" if run.ended else "active",
        "iterations": run.iterations,
        "tool_calls": run.tool_calls,
        "errors": run.errors,
        "total_tokens": run.total_tokens,
        "elapsed_seconds": round(run.elapsed_seconds(now), 3),
        "idle_seconds": round(run.idle_seconds(now), 3),
        "terminal_state": run.terminal_state.value if run.terminal_state else None,
        "has_final_answer": run.has_final_answer,
    }


def run_detail(run: RunState, now: float,
               default_budget: dict[str, float] | None = None) -> dict[str, Any]:
    """Everything the API shows about one run."""
    signals = run.signals(now, default_budget)
    return {
        **run_summary(run, now),
        "parent_run": run.parent_run,
        "started_at": iso(run.first_start_ns / NS if run.first_start_ns else run.first_seen),
        "ended_at": iso(run.ended_at),
        "last_seen_at": iso(run.last_seen),
        "spans": run.spans,
        "signals": signals,
        "budget": signals["budget"],
        "terminal_reason": run.terminal_reason,
        "final_output": run.final_output,
        "directives": [],
    }
