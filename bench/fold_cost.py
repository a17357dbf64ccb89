"""What the run tracker's fold costs a span, in instructions: ``bench/core_step.py``'s step with
each fold done twice, the second time by a shadow that is thrown away.

    valgrind --tool=callgrind python -B bench/fold_cost.py --part counts --shadow fold \\
        --decode --spans 4096 --repeat 2          # and --repeat 1, and --shadow copy

``--part counts`` shadows :meth:`RunCounts.apply <watchdog.core.runs.counts.RunCounts.apply>`
(a run's counting of one record: its counters, rings, twins, echoes, signatures): each record is
copied and folded into a shadow run of its own (one per run, new when the run is); ``--part
tracker`` shadows :meth:`RunTracker.apply <watchdog.core.runs.tracker.RunTracker.apply>` (a
slice's records placed in their runs and folded: the counting, the traces' frames, the activity
lines, the batch's counts) with a shadow tracker fed copies of the slice's records.
``--part rings`` is ``counts`` with the shadow runs' ring lookups answering at once (no
echo, no twin, no call id seen from another scope, no call around another, nothing asked for
kept): ``counts`` less ``rings`` (both ``--shadow fold``) is what those lookups cost.
``--shadow copy`` makes the copies (and the shadow runs) and folds nothing: what the fold costs
is ``--shadow fold`` less ``--shadow copy``, each ``--repeat 2`` less ``--repeat 1`` (one step
over the workload), divided by the spans; the other arguments are ``bench/core_step.py``'s. The
decisions it prints are the sidecar's (the shadow's records are copies: the real fold sees what
it would alone). Under callgrind with ``PYTHONHASHSEED=0``, as ``docs/performance.md`` says.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FunctionType

HERE = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], add_help=False)
    parser.add_argument("--part", choices=("counts", "rings", "tracker"), default="counts")
    parser.add_argument("--shadow", choices=("copy", "fold"), default="fold")
    args, rest = parser.parse_known_args()
    if "--tree" in rest or "--baseline" in rest:
        parser.error("this tree only (no --tree, no --baseline)")
    sys.path.insert(0, str(HERE))
    fold = args.shadow == "fold"
    if args.part != "tracker":
        _shadow_counts(fold, args.part == "rings")
    else:
        _shadow_tracker(fold)
    from bench import core_step

    sys.argv = [str(HERE / "bench" / "core_step.py"), *rest]
    core_step.main()


def _shadow_counts(fold: bool, rings: bool) -> None:
    from watchdog.core.runs.counts import RunCounts
    from watchdog.core.runs.fields import RunFields
    from watchdog.core.runs.run import RunState
    from watchdog.core.spans.record import SpanRecord

    def answer(value: object) -> Callable[..., object]:
        return lambda *_: value

    # The shadow runs are of a class of their own whose methods are copies of the run's (their
    # code objects apart): CPython specialises a function's instructions to the types it
    # meets, and the run's own, meeting two classes, would lose theirs to the shadow's.
    methods: dict[str, object] = {"__slots__": ()}
    for cls in (RunState, RunCounts, RunFields):
        for name, value in vars(cls).items():
            if name in methods:
                continue
            if isinstance(value, FunctionType):
                methods[name] = _copied(value)
            elif isinstance(value, property) and isinstance(value.fget, FunctionType):
                methods[name] = property(_copied(value.fget))
    if rings:  # the ring lookups answer at once, as if found in none
        methods.update(_echo=answer(False), _counted_elsewhere=answer(False),
                       counted_around=answer(False), _twin_of=answer(-1),
                       _remember_asked=answer(None))
    kind = type("ShadowRun", (RunState,), methods)
    apply = methods["apply"]
    real = RunCounts.apply

    shadows: dict[str, RunState] = {}  # (run key -> its shadow)

    def shadowed(run: RunCounts, record: SpanRecord, now: float) -> None:
        twin = copy.copy(record)  # (before the fold: it may change the record)
        shadow = shadows.get(run.key)
        if shadow is None or run.spans == 0:  # (a run new to this step: a new shadow)
            shadow = shadows[run.key] = kind(run.key, run.key_source, run.trace_id, now)
        if fold:
            apply(shadow, twin, now)  # type: ignore[operator]
        real(run, record, now)

    RunCounts.apply = shadowed  # type: ignore[method-assign]


def _copied(function: FunctionType) -> FunctionType:
    """``function`` with a code object of its own (specialised apart)."""
    return FunctionType(function.__code__.replace(), function.__globals__, function.__name__,
                        function.__defaults__, function.__closure__)


def _shadow_tracker(fold: bool) -> None:
    from watchdog.core.runs.tracker import BatchResult, RunTracker
    from watchdog.core.spans.record import SpanRecord

    apply = RunTracker.apply
    shadows: list[tuple[RunTracker, RunTracker]] = []  # (the step's tracker, its shadow)

    def shadowed(tracker: RunTracker, records: Iterable[SpanRecord], now: float,
                 late_content: Iterable[tuple[SpanRecord, SpanRecord]] = ()) -> BatchResult:
        records = list(records)
        twins = [copy.copy(record) for record in records]
        if not shadows or shadows[0][0] is not tracker:  # (a new core: a new shadow)
            shadows[:] = [(tracker, RunTracker(max_runs=tracker.max_runs))]
        if fold:
            apply(shadows[0][1], twins, now)
        return apply(tracker, records, now, late_content)

    RunTracker.apply = shadowed  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
