"""A trace's frames (``watchdog.core.runs.frames``) outlive its run for spans that come after
the root: for ``LATE_SPAN_GRACE`` seconds and the last ``MAX_TRACES_ENDED`` traces, no more."""

from __future__ import annotations

from tests.recorded import request_of
from tests.test_rebatching import read_as_exported, scoped_spans
from watchdog.core.runs.frames import LATE_SPAN_GRACE, FrameBook
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.pipeline import records_from


def read_late(wait: float) -> list[tuple[str, int, int]]:
    """The Vercel AI SDK's sub-agent recording, its root sent first (with the caller's first
    model call) and the rest ``wait`` seconds later: each run's agent, model and tool calls."""
    spans = scoped_spans("vercel_ai", "subagent")
    tracker = RunTracker()
    tracker.apply(records_from(request_of(spans[:1] + spans[-1:])).records, 1.0)
    tracker.expire(1.0 + wait)
    tracker.apply(records_from(request_of(spans[1:-1])).records, 1.0 + wait)
    return sorted((run.agent_name, run.iterations, run.tool_calls) for run in tracker.ended())


def test_a_nested_agent_after_its_root_is_split_out_within_the_grace_alone() -> None:
    exported = sorted(run[:3] for run in read_as_exported("vercel_ai", "subagent"))
    assert exported == [("vercel_researcher", 2, 1), ("vercel_sub", 2, 1)]
    assert read_late(LATE_SPAN_GRACE - 1) == exported
    # past it, the sub-agent's spans fold into the run that ended
    assert read_late(LATE_SPAN_GRACE + 1) == [("vercel_researcher", 4, 2)]


def test_the_frames_of_ended_traces_are_bounded_oldest_dropped_first() -> None:
    book = FrameBook(max_ended=2)
    for at, trace in enumerate("abc"):
        book.of(trace).parents["s"] = None
        book.end(trace, float(at))
    assert [book.get(trace) is not None for trace in "abc"] == [False, True, True]
    assert book.of("b").parents == {"s": None}  # a late span of b finds b's frames
    book.expire(1.0 + LATE_SPAN_GRACE)
    assert [book.get(trace) is not None for trace in "abc"] == [False, False, True]
    assert len(book) == 0  # (traces in progress: none)
