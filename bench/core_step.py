"""The core's step in process: one workload's records through ``Core.apply``, as the sidecar does.

``bench/core_step.py --tree /path/to/tree --workload rules-firing`` generates the workload's
OTLP/HTTP payloads (:mod:`bench.workload`), decodes and normalises them once, in 32-span slices
as the sidecar applies them, then times ``Core.apply`` over all of them: the tracker, the rules
(the default pack), the decisions and the views they hand out, with the price data loaded. No
HTTP, no decode, no store. It prints the best of ``--repeat`` runs in CPU µs per span and the
decisions made. ``--tree`` is a source tree to import the sidecar from; it may be this build or
one with the flat layout (before ``watchdog/core/``), so two builds can be compared on one
machine state, e.g. under ``valgrind --tool=callgrind`` (instruction counts: repeatable on a
loaded machine): ``--repeat 2`` less ``--repeat 1``, one step over every slice on a new core,
with what a process loads at its first step (CEL, when a rule needs it) loaded already.
The workload's clock is fixed (``bench.workload`` dates each run's spans from the wall clock
when it makes the run), so each process makes the same spans and the same decisions.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent.parent
SLICE = 32  # the service's INGEST_SLICE
CLOCK_NS = 1_780_000_000_000_000_000  # the workload's wall clock, fixed
CHILD = "CORE_STEP_TREE"  # set in the process that runs another tree


def modules() -> dict[str, Any]:
    """What the step needs, from the tree on the import path (this layout or the flat one)."""
    names = {"core": ("watchdog.core.step", "watchdog.core"),
             "tracker": ("watchdog.core.runs.tracker", "watchdog.runs.tracker"),
             "engine": ("watchdog.core.rules.engine", "watchdog.rules.engine"),
             "pack": ("watchdog.core.rules.pack", "watchdog.rules.pack"),
             "sessions": ("watchdog.core.sessions", "watchdog.sessions"),
             "pipeline": ("watchdog.core.spans.pipeline", "watchdog.ingest.pipeline"),
             "decode": ("watchdog.core.spans.decode", "watchdog.ingest.decode")}
    found: dict[str, Any] = {}
    for key, (new, old) in names.items():
        try:
            found[key] = importlib.import_module(new)
        except ImportError:
            found[key] = importlib.import_module(old)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", default=str(HERE), help="source tree (default: this one)")
    parser.add_argument("--workload", default="rules-firing")
    parser.add_argument("--spans", type=int, default=30_720)
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    tree = str(Path(args.tree).resolve())
    if tree != str(HERE) and os.environ.get(CHILD) != tree:
        # the other tree in a process of its own: its watchdog first on the import path
        command = [sys.executable, "-P", str(Path(__file__).resolve()), *sys.argv[1:]]
        env = {**os.environ, "PYTHONPATH": f"{tree}:{HERE}", CHILD: tree}
        sys.exit(subprocess.run(command, env=env, check=False).returncode)
    if tree == str(HERE):
        sys.path.insert(0, str(HERE))
    import bench.workload
    from bench.workload import WORKLOADS, batches

    bench.workload.time = SimpleNamespace(time_ns=lambda: CLOCK_NS)  # type: ignore[attr-defined,assignment]

    if args.workload not in WORKLOADS:
        parser.error(f"--workload: one of {', '.join(WORKLOADS)}")
    parts = modules()
    import watchdog

    where = Path(watchdog.__file__).resolve().parent.parent
    if str(where) != tree:
        raise SystemExit(f"imported {where}, not the tree {tree}")
    bodies = list(batches(args.runs, 512, args.spans, workload=args.workload))
    slices = [part.records for body in bodies
              for part in parts["pipeline"].slices_of(parts["decode"].parse_protobuf(body), SLICE)
              if part.records]
    spans = sum(len(records) for records in slices)
    rules = parts["pack"].load_rules([], include_default=True)
    best, decisions = float("inf"), 0
    for _ in range(args.repeat):
        core = _core(parts, rules)
        now = 1_000_000.0
        started = time.process_time()
        decisions = 0
        for records in slices:
            now += 0.0005
            decisions += len(core.apply(records, now).decisions)
        best = min(best, time.process_time() - started)
    if not args.repeat:  # the core made (the price data loaded), no step
        _core(parts, rules)
        print(f"{args.workload}: {spans} spans made and decoded, the core made; no step")
        return
    print(f"{args.workload}: {best * 1e6 / spans:.2f} CPU µs per span (best of {args.repeat}), "
          f"{spans} spans, {decisions} decisions")


def _core(parts: dict[str, Any], rules: Any) -> Any:
    engine = parts["engine"].RuleEngine(rules)
    tracker = parts["tracker"].RunTracker(max_runs=10_000)
    sessions = parts["sessions"].SessionBook(lambda _id: None)
    try:
        from watchdog.core.fleet import Fleet
        from watchdog.shell.pricing import GenAIPrices
    except ImportError:  # the flat layout: no fleet, no prices
        return parts["core"].Core(tracker, sessions, engine)
    pricer = GenAIPrices()
    pricer._library()  # the price data, loaded before the clock starts
    return parts["core"].Core(tracker, sessions, engine, Fleet(600.0), pricer=pricer)


if __name__ == "__main__":
    main()
