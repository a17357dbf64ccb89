"""The compiled fold of a tool call's signatures (``native/otlp/src/signatures.rs``) answers
as its Python twin, ``counts.tool_signatures``, and leaves the run's containers as it does.

Every recording of a real framework, in the five deliveries of ``tests/test_native.py`` (as
exported, one request, cut in two, span by span, backwards), and the bench's generated
workloads, go through the core's step (the tracker, the default rules, the decisions) with the
compiled fold and with the twin, the decode the same: the runs (whole snapshots, signals) and
the decisions must be the same. Generated sequences of calls and results (cycles, repeats, the
bounds passed, ints past 64 bits, a result of the same arguments) are folded by both, the
containers compared after every call; mutants planted in the twin are each told apart by them.
The fold reads no outside bytes (hashes the normalise made): there is nothing for a fuzzer.
"""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.test_native import ALL, NOT_BUILT, deliveries
from watchdog.core.bounds import MAX_CYCLE_LENGTH, MAX_DISTINCT_SIGNATURES
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import load_rules
from watchdog.core.runs import counts
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.sessions import SessionBook
from watchdog.core.spans import compiled as hooks
from watchdog.core.spans import native
from watchdog.core.spans.decode import parse_protobuf
from watchdog.core.spans.pipeline import records_from, slices_of
from watchdog.core.step import Core

ROOT = Path(__file__).resolve().parent.parent
Fold = Callable[..., tuple[int, int, int]]


def compiled_fold() -> Fold:
    assert native.AVAILABLE, NOT_BUILT
    native.use_native(True)
    fold = hooks.signatures
    assert fold is not None, "the compiled decode is on, its signatures' fold is not"
    return fold


@contextmanager
def folding(compiled: bool) -> Iterator[None]:
    """The compiled decode on (both ways read the same records), the signatures folded by the
    compiled fold or by the Python twin."""
    fold = compiled_fold()
    hooks.signatures = fold if compiled else None
    try:
        yield
    finally:
        hooks.signatures = fold


def stepped(bodies: list[bytes], compiled: bool, slice_spans: int | None = None
            ) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    """Each body through a core with the default rules: the decisions, and every run's
    snapshot at the end (the open ones, then the ended)."""
    with folding(compiled):
        core = Core(RunTracker(), SessionBook(lambda _id: None),
                    RuleEngine(load_rules([], include_default=True)))
        decided: list[tuple[Any, ...]] = []
        now = 1_000.0
        for body in bodies:
            request = parse_protobuf(body)
            parts = ([records_from(request).records] if slice_spans is None else
                     [part.records for part in slices_of(request, slice_spans)])
            for records in parts:
                now += 0.5
                step = core.apply(records, now)
                assert not step.failures, step.failures
                decided += [(d.run.key, d.decision.rule, d.decision.action,
                             d.decision.message, d.decision.dedup_key) for d in step.decisions]
        runs = [run.to_dict() for run in core.tracker.active()]
        core.tracker.expire(1e12)
        return decided, runs + [run.to_dict() for run in core.tracker.ended()]


@pytest.mark.parametrize(("driver", "scenario"), ALL, ids=[f"{d}-{s}" for d, s in ALL])
def test_a_recording_steps_the_same_with_either_fold(driver: str, scenario: str) -> None:
    for delivery, bodies in deliveries(driver, scenario).items():
        compiled = stepped(bodies, compiled=True)
        python = stepped(bodies, compiled=False)
        assert python[1], delivery
        assert compiled == python, delivery


@contextmanager
def folding_with(fold: Fold) -> Iterator[None]:
    compiled_fold()
    before = hooks.signatures
    hooks.signatures = fold
    try:
        yield
    finally:
        hooks.signatures = before


def test_a_mutant_fold_changes_what_a_recording_steps_to() -> None:
    """The recordings' differential can fail: a fold that counts each call once too often, put
    in the compiled fold's place, steps some recording to other runs than the twin does."""
    wrong = mutant("count = _bump(call_counts, call) => count = _bump(call_counts, call) + 1")
    for driver, scenario in ALL:
        bodies = deliveries(driver, scenario)["as exported"]
        reference = stepped(bodies, compiled=False)
        with folding_with(wrong):
            values_seen = stepped_as_is(bodies)
        if values_seen != reference:
            return
    raise AssertionError("no recording tells the mutant fold from the twin")


def stepped_as_is(bodies: list[bytes]) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    """:func:`stepped` with whatever fold is installed."""
    core = Core(RunTracker(), SessionBook(lambda _id: None),
                RuleEngine(load_rules([], include_default=True)))
    decided: list[tuple[Any, ...]] = []
    now = 1_000.0
    for body in bodies:
        now += 0.5
        step = core.apply(records_from(parse_protobuf(body)).records, now)
        decided += [(d.run.key, d.decision.rule, d.decision.action, d.decision.message,
                     d.decision.dedup_key) for d in step.decisions]
    runs = [run.to_dict() for run in core.tracker.active()]
    core.tracker.expire(1e12)
    return decided, runs + [run.to_dict() for run in core.tracker.ended()]


def bench_workload() -> Any:
    spec = importlib.util.spec_from_file_location("bench_workload", ROOT / "bench" / "workload.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.time = SimpleNamespace(time_ns=lambda: 1_780_000_000_000_000_000)
    return module


@pytest.mark.parametrize("workload", ["rules-firing", "clean", "trigger-words", "trace-keyed"])
def test_generated_spans_step_the_same_with_either_fold(workload: str) -> None:
    bodies = list(bench_workload().batches(40, 256, 3072, workload=workload))
    compiled = stepped(bodies, compiled=True, slice_spans=32)
    python = stepped(bodies, compiled=False, slice_spans=32)
    assert compiled == python
    signals = [run for run in python[1] if run["tool_calls"]]
    assert signals, "the workload calls tools"
    if workload == "rules-firing":  # what the fold decides is what the rules read
        assert any(run["repeated_tool_call"] > 2 for run in signals)
        assert any(run["cycle_repeats"] >= 2 for run in signals)
        assert python[0], "rules fire"


State = tuple[dict[Any, Any], list[Any], list[int], dict[Any, Any]]


def new_state() -> State:
    return {}, [], [0] * MAX_CYCLE_LENGTH, {}


def sequences(seed: int) -> Iterator[list[tuple[int, int | None]]]:
    """Sequences of (arguments hash, result hash or None) made to reach every branch: cycles of
    each length and longer, repeats, results of other arguments and of the same, every bound."""
    rng = random.Random(seed)
    big = [2**63 - 1, -(2**63), 2**64 + 5, -(2**70), 0, -1]
    for _ in range(60):
        alphabet = rng.choice([1, 2, 3, 4, 5, 6, 12, 300])
        calls = [rng.choice([rng.randrange(-2**63, 2**63), rng.choice(big)])
                 for _ in range(alphabet)]
        results = [rng.randrange(-5, 5) for _ in range(rng.choice([1, 3, 200]))]
        length = rng.choice([1, 5, 40, 400])
        cycle = rng.randrange(1, MAX_CYCLE_LENGTH + 3)
        sequence = []
        for index in range(length):
            call = calls[index % min(cycle, alphabet)] if rng.random() < 0.7 \
                else rng.choice(calls)
            result = None if rng.random() < 0.2 else rng.choice(results) \
                if len(results) < 10 else rng.randrange(-2**40, 2**40)
            sequence.append((call, result))
        yield sequence


def differs(fold: Fold, reference: Fold, seed: int = 7) -> str | None:
    """Where ``fold`` answers or leaves the containers otherwise than ``reference`` over the
    generated sequences (None: nowhere)."""
    for number, sequence in enumerate(sequences(seed)):
        ours, theirs = new_state(), new_state()
        for index, (call, result) in enumerate(sequence):
            got = fold(*ours, call, result)
            want = reference(*theirs, call, result)
            if got != want or ours != theirs \
                    or [type(v) for v in ours[2]] != [type(v) for v in theirs[2]]:
                return f"sequence {number}, call {index}: {got} != {want}"
    return None


def test_the_compiled_fold_answers_as_its_python_twin() -> None:
    assert differs(compiled_fold(), counts.tool_signatures) is None
    assert differs(compiled_fold(), counts.tool_signatures, seed=11) is None


def test_the_bounds_hold_on_both_folds() -> None:
    for fold in (compiled_fold(), counts.tool_signatures):
        state = new_state()
        for call in range(MAX_DISTINCT_SIGNATURES + 10):
            answer = fold(*state, call, call)
            assert answer[0] == (1 if call < MAX_DISTINCT_SIGNATURES else 0)
            assert answer[2] == (1 if call < MAX_DISTINCT_SIGNATURES else 0)
        assert len(state[0]) == len(state[3]) == MAX_DISTINCT_SIGNATURES
        assert len(state[1]) == MAX_CYCLE_LENGTH
        assert fold(*state, 0, 0) == (2, 0, 1)  # (the same arguments: no new result count)
        assert fold(*state, 1, 0) == (2, 0, 2)  # (another's: the agent learns nothing)


def mutant(change: str) -> Fold:
    """``counts.tool_signatures`` with one planted change."""
    source = Path(counts.__file__).read_text("utf-8")
    start = source.index("def tool_signatures(")
    body = source[start:source.index("\ndef ", start + 1)]
    old, new = change.split(" => ")
    assert old in body, old
    space: dict[str, Any] = {"_bump": counts._bump, "MAX_CYCLE_LENGTH": MAX_CYCLE_LENGTH,
                             "MAX_DISTINCT_SIGNATURES": MAX_DISTINCT_SIGNATURES}
    exec(compile("from __future__ import annotations\n" + body.replace(old, new, 1),
                 "mutant", "exec"), space)
    fold: Fold = space["tool_signatures"]
    return fold


MUTANTS = [
    "count = _bump(call_counts, call) => count = _bump(call_counts, call) if recent else 1",
    "repeats >= 2 and => repeats >= 1 and",
    "(cycle_runs[index] + length) // length => (cycle_runs[index] + length) // (length + 1)",
    "cycle_runs[index] = 0 => cycle_runs[index] = max(cycle_runs[index] - 1, 0)",
    "len(recent) > MAX_CYCLE_LENGTH => len(recent) > MAX_CYCLE_LENGTH + 1",
    "len(result_counts) >= MAX_DISTINCT_SIGNATURES => len(result_counts) > "
    "MAX_DISTINCT_SIGNATURES",
    "elif entry[1] != call: => elif True:",
    "counted = entry[0]\n => counted = entry[0] + 1\n",
    "result_counts[result] = (counted, call)\n    elif => result_counts[result] = (counted, 0)\n"
    "    elif",
    "if result is None: => if result is None or result < -4:",
]


@pytest.mark.parametrize("change", MUTANTS)
def test_a_planted_mutant_is_told_apart(change: str) -> None:
    assert differs(mutant(change), counts.tool_signatures) is not None
    assert differs(mutant(change), compiled_fold()) is not None
