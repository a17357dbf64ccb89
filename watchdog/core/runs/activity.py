"""The activity log: one short line per step of a run, for progress reports and handoffs.

Entries are produced while spans are folded in and handed to the store, which keeps the last
``ACTIVITY_LOG_SIZE`` per run; the in-memory run state never holds them, so a run's memory does
not grow with its length.
"""

from __future__ import annotations

from typing import NamedTuple

from watchdog.core.spans.record import AGENT, LLM, TOOL, SpanRecord

ACTIVITY_LOG_SIZE = 200  # entries kept per run (a ring in the store)


class ActivityEntry(NamedTuple):
    """One line of the log. A named tuple: immutable, made once per span at tuple cost (a frozen
    dataclass pays ``object.__setattr__`` per field), and already the store's row."""

    run_key: str
    seq: int
    at: float  # span end, seconds since the epoch
    kind: str  # llm | tool | agent | answer
    name: str
    detail: str | None = None  # tool arguments brief, or tokens/finish reason for an LLM call
    result: str | None = None  # tool result brief or final answer brief
    error: str | None = None


def entry_for(record: SpanRecord, seq: int) -> ActivityEntry | None:
    """The activity line for a span, or None for spans that are not steps of the run."""
    error = None
    if record.error:
        error = f"{record.error_type}: {record.error_message}" if record.error_message \
            else record.error_type
    at = record.end_ns / 1e9
    if record.kind is TOOL:
        return ActivityEntry(record.run_key, seq, at, "tool", record.tool_name or "unknown",
                             record.args_brief, record.result_brief, error)
    if record.kind is LLM:
        parts = [f"in={record.input_tokens} out={record.output_tokens}"] \
            if record.input_tokens or record.output_tokens else []  # (none said: no tokens)
        if record.finish_reason:
            parts.append(f"finish={record.finish_reason}")
        return ActivityEntry(record.run_key, seq, at, "llm", record.name,
                             " ".join(parts) or None, None, error)
    if record.kind is AGENT:
        return ActivityEntry(record.run_key, seq, at, "agent", record.name, None,
                             record.final_output, error)
    if record.final_answer:
        return ActivityEntry(record.run_key, seq, at, "answer", record.tool_name or record.name,
                             None, record.final_output, error)
    return None
