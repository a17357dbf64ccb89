"""Every recording of a real framework reads the same however its spans are batched.

The recordings hold one export request per span, in the order the spans ended (what an
exporter sending each span as it ends sends). Real agents batch: the SDK's
``BatchSpanProcessor`` sends a whole short run in one request (its default delay is 5 s), grouped
by resource and scope rather than in end order, and a Collector merges requests and cuts them
anywhere. So each recording is also read as one request and cut into two at many points, and
the runs must be the same: agent, model and tool calls, errors, terminal state, answer, parent.

Each recording is also read span by span, as a ``SimpleSpanProcessor`` exports (Phoenix's
``register()`` default): a loose model call's twin inside it (the Anthropic SDK's own span under
OpenInference's) then comes a request before its root and opens a run of its trace, which the
root folds into its agent's run of loose calls.

Each is also read span by span with the tracker restarted between two spans, after a clean
shutdown and after a crash (a restarted sidecar has only what it stored).

Known gap, pinned as such: a nested agent split out of its trace's run, restarted mid-trace
after a crash (``test_a_recording_reads_the_same_across_a_restart``).

The metrics' counts (tool calls, tokens, errors) are the runs' counts in every delivery.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import ROOT, computed_once
from tests.recorded import RECORDINGS, ScopedSpan, recorded_lines, request_of
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import load_rules
from watchdog.core.runs.book import RUN_END_TIMEOUT
from watchdog.core.runs.run import RunState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.sessions import SessionBook
from watchdog.core.spans.decode import ExportTraceServiceRequest, parse_json
from watchdog.core.spans.pipeline import records_from, slices_of
from watchdog.core.spans.record import KEY_TRACE
from watchdog.core.step import Core
from watchdog.shell.service import INGEST_SLICE

MAX_CUTS = 40  # cut points tried per recording (every one, for shorter recordings)
ALL = sorted((path.parent.name, path.stem) for path in RECORDINGS.glob("*/*.jsonl"))

Runs = list[tuple[Any, ...]]


@functools.cache
def _exported(driver: str, scenario: str) -> tuple[bytes, ...]:
    """A recording's export requests, read from OTLP/JSON once per test process (kept as
    binary protobuf: every use parses messages of its own, quickly)."""
    return tuple(parse_json(line.encode()).SerializeToString()
                 for line in recorded_lines(driver, scenario))


def as_exported(driver: str, scenario: str) -> list[ExportTraceServiceRequest]:
    """A recording's export requests, as the framework sent them."""
    return [ExportTraceServiceRequest.FromString(data) for data in _exported(driver, scenario)]


def scoped_spans(driver: str, scenario: str) -> list[ScopedSpan]:
    """Every span of a recording with its resource and scope, in the order exported
    (:func:`tests.recorded.scoped_spans`, from :func:`as_exported`)."""
    return [(resource_spans.resource, scope_spans.scope, span)
            for request in as_exported(driver, scenario)
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans]


@functools.cache
def _read_as_exported(driver: str, scenario: str) -> tuple[tuple[Any, ...], ...]:
    return tuple(runs_read(as_exported(driver, scenario)))


def read_as_exported(driver: str, scenario: str) -> Runs:
    """:func:`runs_read` of the recording as exported (the reading every other delivery is
    compared with), made once per test process."""
    return list(_read_as_exported(driver, scenario))


def ended_runs(requests: list[ExportTraceServiceRequest], restart_at: int | None = None,
               clean: bool = False, stepped: bool = False) -> list[RunState]:
    """The runs a tracker makes of ``requests``, applied in turn, every run ended; with
    ``restart_at``, a restarted one goes on from the request after that many (``clean``: a
    clean shutdown's, which kept the tracker's state too); ``stepped``: through the core's
    whole step, as the sidecar applies them (spans that come again dropped first)."""
    assert not (stepped and restart_at is not None), "a restart replaces the tracker"
    tracker = RunTracker()
    core = Core(tracker, SessionBook(lambda _id: None)) if stepped else None
    for now, request in enumerate(requests, start=1):
        if now - 1 == restart_at:
            tracker = restarted(tracker, clean)
        records = records_from(request).records
        if core is not None:
            core.apply(records, float(now))
        else:
            tracker.apply(records, float(now))
    return ended_after(tracker)


def ended_after(tracker: RunTracker) -> list[RunState]:
    """Every run of ``tracker``, its active ones expired."""
    tracker.expire(1e12)
    return list(tracker.ended())


def runs_read(requests: list[ExportTraceServiceRequest], restart_at: int | None = None,
              clean: bool = False, stepped: bool = False) -> Runs:
    """What :func:`ended_runs` makes of ``requests``, as comparable tuples."""
    return runs_of(ended_runs(requests, restart_at, clean, stepped))


def runs_of(runs: list[RunState]) -> Runs:
    """``runs`` as comparable tuples."""
    agents = {run.key: run.agent_name for run in runs}
    return sorted(((run.agent_name, run.iterations, run.tool_calls, run.errors,
                    str(run.terminal_state), run.has_final_answer,
                    agents.get(run.parent_run) if run.parent_run else None) for run in runs),
                  key=repr)  # (a top run and a child run may differ by their parent alone)


def restarted(tracker: RunTracker, clean: bool) -> RunTracker:
    """The tracker a restarted sidecar has: its runs from their stored snapshots, and after a
    clean shutdown the state it kept (JSON, as stored)."""
    fresh = RunTracker()
    fresh.restore(RunState.from_dict(json.loads(json.dumps(run.to_dict())))
                  for run in (*tracker.active(), *tracker.ended()))
    if clean:
        assert fresh.restore_state(json.loads(json.dumps(tracker.state()))) == 0
    return fresh


def split_from_frames(driver: str, scenario: str) -> bool:
    """Whether a nested agent of the recording is a child run split out of its trace's run
    (from the records the tracker retains of the trace, which a restart loses)."""
    return any(run.parent_run and run.key_source is KEY_TRACE
               for run in ended_runs(as_exported(driver, scenario)))


def counted(requests: list[ExportTraceServiceRequest]) -> tuple[dict[str, int], dict[str, int]]:
    """What the batches of ``requests`` counted for the metrics (tool calls, tokens, errors),
    and what the runs they made count, every run ended."""
    tracker = RunTracker()
    metrics: Counter[str] = Counter()
    for now, request in enumerate(requests, start=1):
        result = tracker.apply(records_from(request).records, float(now))
        metrics["tool_calls"] += sum(result.tool_calls.values())
        for (_, direction), tokens in result.tokens.items():
            metrics[f"{direction}_tokens"] += tokens
        metrics["errors"] += sum(result.errors.values())
    tracker.expire(1e12)
    runs = list(tracker.ended())
    names = ("tool_calls", "input_tokens", "output_tokens", "errors")
    totals = {name: sum(getattr(run, name) for run in runs) for name in names}
    return ({name: count for name, count in metrics.items() if count},
            {name: count for name, count in totals.items() if count})


def assert_as_pinned(misread: Counter[str], pinned: dict[str, int], name: str) -> None:
    """Each driver misreads no more recordings than ``pinned`` says, and no fewer (a change
    that reads more of them right lowers the pin)."""
    worse = {d: (n, pinned.get(d, 0)) for d, n in misread.items() if n > pinned.get(d, 0)}
    assert not worse, f"(misread, pinned) per driver: {worse}"
    better = {d: (misread[d], n) for d, n in pinned.items() if misread[d] < n}
    assert not better, f"(misread, pinned): fewer than pinned, lower {name} {better}"


def cuts(spans: list[ScopedSpan]) -> list[int]:
    points = list(range(1, len(spans)))
    if len(points) <= MAX_CUTS:
        return points
    step = len(points) / MAX_CUTS
    return [points[int(i * step)] for i in range(MAX_CUTS)]


@pytest.mark.parametrize(("driver", "scenario"), ALL, ids=[f"{d}-{s}" for d, s in ALL])
def test_a_recording_reads_the_same_however_it_is_batched(driver: str, scenario: str) -> None:
    exported = read_as_exported(driver, scenario)
    spans = scoped_spans(driver, scenario)
    assert runs_read([request_of(spans)]) == exported, "all in one request"
    assert runs_read([request_of([span]) for span in spans]) == exported, "span by span"
    differ = [cut for cut in cuts(spans)
              if runs_read([request_of(spans[:cut]), request_of(spans[cut:])]) != exported]
    assert differ == BATCH_MISREAD.get((driver, scenario), []), f"cut after these spans: {differ}"


def ruled(requests: list[ExportTraceServiceRequest]) -> list[tuple[str, str, str | None]]:
    """How the default rules end the runs ``requests`` make, applied in turn through the
    core: each run's terminal state and reason (the rule that ended it)."""
    core = Core(RunTracker(), SessionBook(lambda _id: None), RuleEngine(load_rules([], True)))
    for now, request in enumerate(requests, start=1):
        core.apply(records_from(request).records, float(now))
    keys = [run.key for run in (*core.tracker.active(), *core.tracker.ended())]
    return sorted((key, str(view.terminal_state), view.terminal_reason) for key in keys
                  if (view := core.view(key, 1e12)) is not None)


@pytest.mark.parametrize(("driver", "scenario"), [
    ("openai_agents_js_oi", "error_loop"), ("openai_agents_logfire", "error_loop"),
    ("openai_agents_sdk", "ping_pong")])
def test_a_loop_ends_by_the_same_rule_however_its_spans_are_batched(
        driver: str, scenario: str) -> None:
    """A run whose end comes in the request that makes several rules hold is read at that end
    (:meth:`Core._rules_at_end`) by the rule that held first as its spans came one by one:
    a failing call repeated is ``tool-cycle`` (at its 4th round) before ``error-loop`` (at its
    5th error); and a loop across agents whose runs all end in that request is still the
    orchestrating run's ``agent-ping-pong``. All in one request, span by span, or cut in two
    anywhere: the same states and reasons."""
    spans = scoped_spans(driver, scenario)
    one_by_one = ruled([request_of([span]) for span in spans])
    assert ruled([request_of(spans)]) == one_by_one
    assert [cut for cut in range(1, len(spans))
            if ruled([request_of(spans[:cut]), request_of(spans[cut:])]) != one_by_one] == []
    reasons = {reason for _, _, reason in one_by_one if reason}
    assert reasons == ({"agent-ping-pong"} if scenario == "ping_pong" else {"tool-cycle"})


# GAP (pinned): the recordings cut in two at these spans read otherwise than as exported
# (none: keep it so; a cut that misreads is named here, exactly, until a change reads it right).
BATCH_MISREAD: dict[tuple[str, str], list[int]] = {}


@pytest.mark.parametrize(("driver", "scenario"), ALL, ids=[f"{d}-{s}" for d, s in ALL])
def test_a_recording_sent_again_in_part_reads_the_same(driver: str, scenario: str) -> None:
    """An exporter's retry re-cut, or a collector's re-send: the recording as exported, then its
    second half again in one request, and its first span twice in one request, through the
    core's step as the sidecar applies them: the same runs, every span counted once."""
    requests = as_exported(driver, scenario)
    spans = scoped_spans(driver, scenario)
    exported = read_as_exported(driver, scenario)
    assert runs_read(requests, stepped=True) == exported
    again = [request_of(spans[:1] * 2), *requests, request_of(spans[len(spans) // 2:])]
    assert runs_read(again, stepped=True) == exported


@pytest.mark.parametrize(("driver", "scenario"), ALL, ids=[f"{d}-{s}" for d, s in ALL])
def test_the_metrics_count_what_the_runs_count(driver: str, scenario: str) -> None:
    """Tool calls, tokens and errors are counted for the metrics as the runs count them, once:
    not again for the spans moved into a nested agent's child run, nor for a second
    instrumentation's span of a model call; so in each delivery."""
    spans = scoped_spans(driver, scenario)
    for delivery in (as_exported(driver, scenario),
                     [request_of(spans)], [request_of([span]) for span in spans]):
        metrics, runs = counted(delivery)
        assert metrics == runs


RESTART_CUTS = 10  # restart points tried per recording, span by span
# GAP (pinned): the cut points after which a crash misreads these recordings: pydantic-ai's agent
# run (keyed by its call id) below the application's Langfuse observation (keyed by the trace)
# is placed in that observation's run by the records the tracker retains of the trace; restarted
# after a crash before the observation's span comes, the observation is a run of its own (named
# after the service) and the agent's run its child. Take a recording out when it reads right.
CRASH_MISREAD = {("pydantic_ai_langfuse", "limit"): [7],
                 ("pydantic_ai_langfuse", "three_tools"): [8],
                 ("pydantic_ai_langfuse", "tool_error"): [3]}


@pytest.mark.parametrize(("driver", "scenario"), ALL, ids=[f"{d}-{s}" for d, s in ALL])
def test_a_recording_reads_the_same_across_a_restart(driver: str, scenario: str) -> None:
    """Span by span, the tracker restarted between two spans: after a clean shutdown (its
    runs' snapshots and the state it kept), every recording reads the same. After a crash (the
    runs' snapshots only) too: a run of loose calls goes on (its agent's, its last call's tool
    calls its own), the twin of its answer is still no next run, a child run still finds its
    parent.

    GAP (pinned): after a crash, a nested agent split out of its trace's run lacks the records
    the tracker retained of the trace: restarted mid-trace, the nested agent stays in its
    parent's run, or the parent keeps only the calls since the restart."""
    exported = read_as_exported(driver, scenario)
    spans = scoped_spans(driver, scenario)
    requests = [request_of([span]) for span in spans]
    every = max(len(spans) // RESTART_CUTS, 1)
    cut_points = range(1, len(spans), every)
    clean = [cut for cut in cut_points
             if runs_read(requests, restart_at=cut, clean=True) != exported]
    assert not clean, f"restarted cleanly after these spans: {clean}"
    crashed = [cut for cut in cut_points if runs_read(requests, restart_at=cut) != exported]
    if (driver, scenario) in CRASH_MISREAD:
        assert crashed == CRASH_MISREAD[driver, scenario], crashed
    elif split_from_frames(driver, scenario):
        assert crashed, "the known gap is closed: take it out of this test and the README"
    else:
        assert not crashed, f"restarted after a crash after these spans: {crashed}"


@pytest.mark.parametrize("restart", [None, "clean"])
def test_an_invocation_traced_as_a_root_tool_span_that_comes_first_is_no_tool_call(
        restart: str | None) -> None:
    """Semantic Kernel traces ``kernel.invoke_prompt`` as a root ``execute_tool`` span no model
    asked for, around the model loop. Sent first (its own request before the loop's), it is
    a loose tool call until the loop's model calls come: then it is the invocation, the
    trace's run ended by it with its answer, and not a tool call — over a clean restart in
    between too (the tracker keeps it for its trace)."""
    for scenario in ("kernel_tool_error", "kernel_three_tools"):
        spans = scoped_spans("semantic_kernel_agent", scenario)
        requests = [request_of(spans[-1:]), request_of(spans[:-1])]
        assert runs_read(requests, restart_at=None if restart is None else 1,
                         clean=restart == "clean") \
            == read_as_exported("semantic_kernel_agent", scenario)


def test_the_state_kept_over_a_restart_is_bounded_most_recent_traces_first() -> None:
    tracker = RunTracker()
    for now, (driver, scenario) in enumerate(
            [("openai_agents_sdk", "handoff"), ("openai_agents_sdk", "agent_as_tool")], start=1):
        spans = scoped_spans(driver, scenario)
        tracker.apply(records_from(request_of(spans[:5])).records, float(now))
    _, last = (trace for trace, _ in tracker.state()["frames"])
    kept = tracker.state(max_records=5)
    assert [trace for trace, _ in kept["frames"]] == [last] and kept["left_out"] == 1
    assert len(kept["frames"][0][1]["records"]) == 5
    assert len(tracker.state(max_records=4)["frames"]) == 0


LOOSE = [tuple(case) for case in computed_once(  # read once, not by every worker collecting this
    "rebatching-loose", [*RECORDINGS.glob("*/*.jsonl"), *ROOT.glob("watchdog/**/*.py"),
                         ROOT / "tests" / "recorded.py", Path(__file__)],
    lambda: [(driver, scenario) for driver, scenario in ALL
             if all(run.loose_trace is not None
                    for run in ended_runs(as_exported(driver, scenario)))])]


@pytest.mark.parametrize(("driver", "scenario"), LOOSE, ids=[f"{d}-{s}" for d, s in LOOSE])
def test_a_loose_loop_reads_the_same_when_its_later_calls_come_first(
        driver: str, scenario: str) -> None:
    """A home-grown loop (each model call a trace of its own) cut in two, the second part sent
    first (a Collector retries a request the sidecar refused after later ones went through):
    the calls that ended before the answer, and after the answer before it, are its run's,
    late; they open no run of their own. A call traced twice (the Anthropic SDK's span and
    OpenLLMetry's or OpenInference's) whose halves the cut parts, other calls between them,
    still counts once."""
    exported = read_as_exported(driver, scenario)
    spans = scoped_spans(driver, scenario)
    differ = [cut for cut in cuts(spans)
              if runs_read([request_of(spans[cut:]), request_of(spans[:cut])]) != exported]
    assert differ == LOOSE_MISREAD.get((driver, scenario), []), (
        f"second part first, cut after these spans: {differ}")


# GAP (pinned): Gemini CLI's tool calls (a trace per batch, below its `schedule_tool_calls`)
# join the loose run whose model call asked for them when that call came first; sent before it
# (the cut right after that call's span), a batch is a run of its own. Exactly these cuts: lower
# them when a change reads them right.
# LlamaIndex.TS traced by OpenLLMetry's JS instrumentation: each model call a root span of its
# own, no agent or tool span, no tool call in its messages (tests/frameworks/recordings/README):
# nothing ties a call to its run but the order the calls end in (an answer ends the run), so two
# runs' calls sent the later ones first split and join otherwise, at every cut.
LOOSE_MISREAD = {("gemini_cli", "loop"): [1, 4, 7, 10], ("gemini_cli", "tool_error"): [1],
                 ("gemini_cli", "two_tools"): [1, 4],
                 ("llamaindex_ts_olm", "two_runs"): [1, 2, 3, 4, 5, 6, 7]}


# (recording, cut) whose second part, sent first, has the root and the first part a span that
# tells the limit the run stopped at (a limit exception on a child, a finish reason, the model
# call that hangs from the agent span itself, its cap on the root: smolagents with content
# hidden)
LATE_LIMITS = [("crewai_openinference", "limit", 4), ("crewai_openllmetry", "limit", 4),
               ("llamaindex_oi", "limit_generate", 25), ("smolagents_oi", "limit", 10),
               ("smolagents_oi", "limit_nocontent", 10),
               ("openai_agents_openllmetry", "limit", 10)]


@pytest.mark.parametrize(("driver", "scenario", "cut"), LATE_LIMITS,
                         ids=[f"{d}-{s}-{c}" for d, s, c in LATE_LIMITS])
def test_a_limit_told_by_a_span_after_the_root_still_classifies_the_run(
        driver: str, scenario: str, cut: int) -> None:
    exported = read_as_exported(driver, scenario)
    assert {run[4] for run in exported} == {"tool_limit_reached"}
    spans = scoped_spans(driver, scenario)
    assert runs_read([request_of(spans[cut:]), request_of(spans[:cut])]) == exported


# GAP (pinned): requests applied out of order, other than the loose loops, limits and twins
# above. Of the recordings cut in two (every third cut point) and sent second part first, this
# many per driver read otherwise: a root or agent span that comes before the calls that tell
# how the run ended (Haystack's agent at its step limit). (Agents below a workflow root sent
# first are placed as in order; in hand-written loops a tool span taken by an earlier model
# call, sent before the call that asked for it, is that call's when it comes,
# RunCounts._reopen, and a loop's span made a model call's, sent first, is the loop's when its
# other calls come, RunTracker._frames_lone.)
# Lower a count when a change reads more of them right; never raise one (a new recording adds
# its own).
# A trace's frames outlive its run by LATE_SPAN_GRACE, so a nested agent whose spans come
# after the root is still split out (test_batches_in_any_order_...).
# A second invocation of Spring AI's chat client in one trace, sent before the first, joins it
# (one run of both); pydantic-ai's agent run (keyed by its call id) below the application's
# Langfuse observation, at its limit, sent after that observation, leaves it a run of its own.
# Gemini CLI's tool batch sent before the model call that asked for it is a run of its own
# (LOOSE_MISREAD). The Vercel AI SDK's summary call after a step-capped call, sent before the
# capped steps, reads as their continuation: the stop taken back, the run `completed`.
# LlamaIndex.TS's calls through OpenLLMetry as LOOSE_MISREAD.
OUT_OF_ORDER_MISREAD = {"gemini_cli": 7, "haystack_oi": 1, "llamaindex_ts_olm": 3,
                        "pydantic_ai_langfuse": 1, "spring_ai": 2, "vercel_ai": 1}


def test_out_of_order_requests_misread_no_more_runs_than_pinned() -> None:
    misread: Counter[str] = Counter()
    for driver, scenario in ALL:
        exported = read_as_exported(driver, scenario)
        spans = scoped_spans(driver, scenario)
        for cut in cuts(spans)[::3]:
            misread[driver] += runs_read([request_of(spans[cut:]),
                                          request_of(spans[:cut])]) != exported
    assert_as_pinned(misread, OUT_OF_ORDER_MISREAD, "OUT_OF_ORDER_MISREAD")


# GAP (pinned): of the out-of-order deliveries above that read the same runs, this many per
# driver read another answer text (``final_output``): a run's answer is the one the span that
# ended last gave, not the one that arrived last (a step's or a task's output sent after the
# agent's; Mastra's agent span sent first, its sub-agent's answer later: the sub-agent's taken
# for its own). Lower a count when a change reads more of them right; never raise one.
ANSWER_OUT_OF_ORDER_MISREAD = {"anthropic_loop": 1, "mastra": 1, "openai_agents_oi": 1}


def answers_of(runs: list[RunState]) -> list[tuple[str, str]]:
    return sorted((run.agent_name or "", run.final_output or "") for run in runs)


def test_out_of_order_requests_misread_no_more_answers_than_pinned() -> None:
    misread: Counter[str] = Counter()
    for driver, scenario in ALL:
        spans = scoped_spans(driver, scenario)
        exported = ended_runs([request_of(spans)])
        for cut in cuts(spans)[::3]:
            runs = ended_runs([request_of(spans[cut:]), request_of(spans[:cut])])
            misread[driver] += runs_of(runs) == runs_of(exported) \
                and answers_of(runs) != answers_of(exported)
    assert_as_pinned(misread, ANSWER_OUT_OF_ORDER_MISREAD, "ANSWER_OUT_OF_ORDER_MISREAD")


# GAP (pinned): a run exported in three batches that arrive in any other order (an exporter
# sends its batches side by side, or retries one after a later one). Of every order of the
# three parts, cut at two of every sixth cut point, this many per driver read otherwise:
# Semantic Kernel's two invocations of one service, each a root tool span sent before its model
# loop (the second's first), join one run of loose calls (a lone root is kept for a group's
# only trace). Lower a count when a change reads more of them right; never raise one.
# The same as above for Spring AI's two invocations in one trace and pydantic-ai's agent run
# below the application's Langfuse observation; Gemini CLI's and LlamaIndex.TS's (through
# OpenLLMetry) as LOOSE_MISREAD.
BATCH_ORDER_MISREAD = {"gemini_cli": 5, "llamaindex_ts_olm": 5, "pydantic_ai_langfuse": 2,
                       "semantic_kernel_137_agent": 1, "semantic_kernel_agent": 1, "spring_ai": 6}


def batch_orders(spans: list[ScopedSpan]) -> Iterator[list[ExportTraceServiceRequest]]:
    """The recording cut into three batches, sent in every order but the one it ended in."""
    for first, second in itertools.combinations(cuts(spans)[::6], 2):
        parts = [spans[:first], spans[first:second], spans[second:]]
        for order in itertools.permutations(range(3)):
            if order != (0, 1, 2):
                yield [request_of(parts[index]) for index in order]


def test_batches_in_any_order_misread_no_more_runs_than_pinned() -> None:
    misread: Counter[str] = Counter()
    for driver, scenario in ALL:
        exported = read_as_exported(driver, scenario)
        for requests in batch_orders(scoped_spans(driver, scenario)):
            misread[driver] += runs_read(requests) != exported
    assert_as_pinned(misread, BATCH_ORDER_MISREAD, "BATCH_ORDER_MISREAD")


def test_other_services_in_one_request_read_as_each_alone() -> None:
    """A Collector batches many agents' spans into one request. The scripted model of the
    recordings numbers its responses the same way in every recording (as Ollama numbers them
    from a small range), so the same response id comes from several services: each is a call
    of its own service, not the twin of another service's call."""
    chosen: list[tuple[str, str]] = []
    services: set[str] = set()
    for driver, scenario in ALL:
        if scenario != "three_tools":
            continue
        spans = scoped_spans(driver, scenario)
        names = {attribute.value.string_value for resource, _, _ in spans
                 for attribute in resource.attributes if attribute.key == "service.name"}
        if names & services:
            continue
        services |= names
        chosen.append((driver, scenario))
    assert len(chosen) > 20
    merged = request_of([span for chosen_one in chosen for span in scoped_spans(*chosen_one)])
    alone = [run for chosen_one in chosen
             for run in runs_read([request_of(scoped_spans(*chosen_one))])]
    assert runs_read([merged]) == sorted(alone, key=repr)


# GAP (pinned): a run whose ending span comes after ``run_end_timeout`` of silence (a slow
# last step, an exporter that held the root back) is taken as abandoned, then classified as it
# ended. This many recordings per driver read otherwise: runs made of several traces or of
# loose calls (each trace's root ends a run of its own there: the late one starts another),
# and Semantic Kernel's root tool span (its twin inside is told apart by the trace's frames,
# gone with the silence).
# (Gemini CLI: its model calls held back, its tool batches come first: LOOSE_MISREAD)
SILENCE_MISREAD = {
    "anthropic_oi": 3, "gemini_cli": 3, "hermes_agento11y": 2, "litellm_logfire_loop": 3,
    "semantic_kernel_137_agent": 6, "semantic_kernel_agent": 6,
}


def read_after_silence(driver: str, scenario: str) -> Runs | None:
    """The recording with the spans that end its runs held back past ``run_end_timeout``
    (the runs expire as abandoned), then sent; None if no span of it ends a run, or its runs
    ended without those."""
    spans = scoped_spans(driver, scenario)
    ending = [any(record.ends_run and record.parent_span_id is None and not record.loose
                  for record in records_from(request_of([span])).records) for span in spans]
    if not any(ending):
        return None
    held = [span for span, ends in zip(spans, ending, strict=True) if ends]
    tracker = RunTracker()
    tracker.apply(records_from(request_of(
        [span for span, ends in zip(spans, ending, strict=True) if not ends])).records, 1.0)
    if not tracker.expire(2.0 + RUN_END_TIMEOUT):
        return None  # its runs ended without those spans
    tracker.apply(records_from(request_of(held)).records, 3.0 + RUN_END_TIMEOUT)
    return runs_of(ended_after(tracker))


def test_a_run_whose_end_comes_after_a_long_silence_reads_as_it_ended() -> None:
    misread: Counter[str] = Counter()
    abandoned = 0
    for driver, scenario in ALL:
        read = read_after_silence(driver, scenario)
        abandoned += read is not None
        misread[driver] += read is not None and read != read_as_exported(driver, scenario)
    # (most recordings: loose calls' have no span that ends a run, LiteLLM's callback's)
    assert abandoned > len(ALL) * 0.85
    assert_as_pinned(misread, SILENCE_MISREAD, "SILENCE_MISREAD")


def test_a_run_named_only_by_its_steps_takes_the_name_of_the_step_that_started_first() -> None:
    """LlamaIndex's AgentWorkflow under OpenLLMetry: no span names an agent but each step's
    output (the researcher's steps, then, after the handoff, the writer's); the one run is the
    researcher's whichever of them arrives first (the writer's steps sent first had named it)."""
    spans = scoped_spans("llamaindex_olm", "handoff")
    writer_first = [span for span in spans if "li_writer" in str(span[2])]
    assert writer_first
    rest = [span for span in spans if "li_writer" not in str(span[2])]
    for requests in ([request_of(writer_first), request_of(rest)],
                     [request_of(list(reversed(spans)))]):
        assert runs_read(requests) == read_as_exported("llamaindex_olm", "handoff") == [
            ("li_researcher", 5, 4, 0, "completed", True, None)]


@pytest.mark.parametrize("scenario", ["three_tools_nocontent", "three_tools_litellm_nocontent",
                                      "tool_error_nocontent", "limit_nocontent"])
def test_a_loop_end_tool_that_comes_after_the_loops_cap_was_taken_says_it_was_not(
        scenario: str) -> None:
    """DSPy's ReAct with its trajectory hidden tells its cap (``max_iters``) on its root: the
    loop ended at it unless its loop-end tool (``finish``) ran. The root sent first, then the
    tools before ``finish``, then ``finish``: the run that finished is completed, not at its
    cap (it read ``tool_limit_reached``), and one that ran to its cap is still at it."""
    spans = scoped_spans("dspy_oi", scenario)
    exported = read_as_exported("dspy_oi", scenario)
    differ = [(first, second) for first, second in itertools.combinations(cuts(spans), 2)
              if runs_read([request_of(part) for part in (
                  spans[second:], spans[:first], spans[first:second])]) != exported]
    assert not differ, f"cut after these spans: {differ}"


@pytest.mark.parametrize("scenario", ["loop", "two_tools"])
def test_a_codex_turn_is_one_run_until_its_turn_ends(scenario: str) -> None:
    """The Codex CLI's turn trace has a second root, ``turn/start`` (the request that started
    the turn, ended before its work: ``second_roots``). Sent as each span ends (an exporter
    that exports while the turn runs), the run is active from its first span to the end of its
    turn (``run_turn``), which ends it, once; it reads as the recording exported whole."""
    spans = sorted(scoped_spans("codex", scenario), key=lambda scoped: scoped[2].end_time_unix_nano)
    tracker = RunTracker()
    ends: list[str] = []
    for now, scoped in enumerate(spans, start=1):
        result = tracker.apply(records_from(request_of([scoped])).records, float(now))
        ends += [scoped[2].name for run in result.ended]
    assert ends == ["run_turn"]
    assert runs_of(ended_after(tracker)) == read_as_exported("codex", scenario)


def test_both_normalisers_read_a_second_root_and_the_span_that_ends_its_run() -> None:
    """``second_roots`` is read by the compiled normalise as by ``normalise``: spans it is sure
    of (a model call of a named agent at the root, its kind an attribute's; a Codex tool call's
    dispatch span) named as the second root, at the root, is one; named as the span that ends
    the run, it ends the run."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    from tests.test_native import normalised_both_ways

    resource, scope, dispatch = next(
        scoped for scoped in scoped_spans("codex", "loop")
        if any(kv.key == "codex.tool.phase" for kv in scoped[2].attributes))
    root, end = type(dispatch)(), type(dispatch)()
    root.CopyFrom(dispatch)
    end.CopyFrom(dispatch)
    root.name, root.parent_span_id, root.span_id = "turn/start", b"", b"\x01" * 8
    del root.attributes[:]
    root.attributes.extend(KeyValue(key=key, value=AnyValue(string_value=value)) for key, value in (
        ("gen_ai.operation.name", "chat"), ("gen_ai.agent.name", "a")))
    end.name, end.span_id = "run_turn", b"\x02" * 8
    read = list(normalised_both_ways(request_of(
        [(resource, scope, root), (resource, scope, end)]).SerializeToString()))
    assert all(both is not None and both[0] == both[1] for both in read), read
    second, ends = (records_from(request_of([(resource, scope, span)])).records[0]
                    for span in (root, end))
    assert (second.second_root, second.ends_its_run) == (True, False)
    assert (ends.second_root, ends.ends_its_run, ends.ends_run) == (False, True, True)
    assert ", second_root=True" in read[0][0] and ", ends_its_run=True" in read[1][0]


def sliced_runs(request: ExportTraceServiceRequest, size: int | None) -> Runs:
    """The runs a tracker makes of one request applied ``size`` records at a time, as the
    sidecar applies a large request (``slices_of``, ``INGEST_SLICE``; None: at once)."""
    tracker = RunTracker()
    for part in slices_of(request, size):
        tracker.apply(part.records, 1.0)
    return runs_of(ended_after(tracker))


@pytest.mark.parametrize("before", range(20, 32))
def test_a_trace_in_a_large_request_is_applied_whole(before: int) -> None:
    """A request of many traces is applied in slices (the event loop served in between), in
    end order: ADK for TypeScript's sub-agent hangs below its caller's model call, which ends
    after the caller's agent span. ``before`` one-span traces that ended earlier come first
    in the request, so a slice of ``INGEST_SLICE`` records ends anywhere in the trace (between
    that agent span and its model call, too): the trace is applied whole all the same, and its
    runs read as in a request of their own (the sub-agent a child run of the caller)."""
    spans = scoped_spans("google_adk_ts", "subagent")
    resource, scope, lookup = spans[1]
    others = []
    for number in range(before):
        other = type(lookup)()
        other.CopyFrom(lookup)
        other.trace_id, other.parent_span_id = (number + 1).to_bytes(16, "big"), b""
        other.start_time_unix_nano -= 10**9
        other.end_time_unix_nano -= 10**9
        others.append((resource, scope, other))
    alone = runs_read([request_of(spans)])
    assert [run[0] for run in alone if run[6] is not None] == ["adk_sub"], alone
    request = request_of(others + spans)
    read = sliced_runs(request, INGEST_SLICE)
    assert read == sliced_runs(request, None)
    assert [run for run in read if run[0].startswith("adk_")] == alone
