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

``--decode`` times each payload's decode and normalise too (in 32-span slices, as the sidecar
reads them, no log join) with the step: the in-process path of a span from its bytes on; under
callgrind, ``--repeat 2`` less ``--repeat 1`` as above. ``--ingest`` times the ingest instead:
each payload decoded and normalised in 32-span slices with the GenAI log join
(:mod:`watchdog.core.spans.logs`), as the receivers read it, its waits expired as the timer
does. ``--settled`` sets the garbage collector as ``watchdog serve`` does once started (what is
loaded frozen, full collections rare): the sidecar's; without it, CPython's defaults.
Each line also says how many collections of each generation the garbage collector made per
1,000 spans in the last run (young ones are what the spans' new objects cost it).
``--bare`` strips the model calls' content (``gen_ai.input.messages``,
``gen_ai.output.messages``) from the workload: each model call is then one the join keeps for
content that may come late in a log event. ``--baseline TREE`` runs this tree and ``TREE``
alternately (``--rounds`` times each, every run a process of its own) and prints each figure,
the ratio of the best of this tree's to the best of the baseline's, and the load average before
and after: a ratio from one machine state.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
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
    parser.add_argument("--ingest", action="store_true",
                        help="time the decode and normalise with the log join, not the step")
    parser.add_argument("--decode", action="store_true",
                        help="time the decode and normalise with the step")
    parser.add_argument("--bare", action="store_true", help="model calls without content")
    parser.add_argument("--settled", action="store_true",
                        help="the garbage collector as the sidecar sets it after its start "
                             "(what is loaded frozen, a full collection every 1,000 middle ones)")
    parser.add_argument("--baseline", help="a source tree to compare with, run alternately")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tree (--baseline)")
    args = parser.parse_args()
    if args.baseline:
        sys.exit(_compare(args))
    tree = str(Path(args.tree).resolve())
    if tree != str(HERE) and os.environ.get(CHILD) != tree:
        # the other tree in a process of its own: its watchdog first on the import path
        command = [sys.executable, "-P", str(Path(__file__).resolve()), *sys.argv[1:]]
        env = {**os.environ, "PYTHONPATH": f"{tree}:{HERE}", CHILD: tree}
        sys.exit(subprocess.run(command, env=env, check=False).returncode)
    if tree == str(HERE):
        sys.path.insert(0, str(HERE))
    workload = _this_workload()
    workload.time = SimpleNamespace(time_ns=lambda: CLOCK_NS)
    batches = workload.batches
    if args.workload not in workload.ALL_WORKLOADS:
        parser.error(f"--workload: one of {', '.join(workload.ALL_WORKLOADS)}")
    parts = modules()
    import watchdog

    where = Path(watchdog.__file__).resolve().parent.parent
    if str(where) != tree:
        raise SystemExit(f"imported {where}, not the tree {tree}")
    bodies = list(batches(args.runs, 512, args.spans, workload=args.workload))
    if args.bare:
        bodies = [_bare(body) for body in bodies]
    if args.ingest:
        _time_ingest(parts, bodies, args)
        return
    slices = [part.records for body in bodies
              for part in parts["pipeline"].slices_of(parts["decode"].parse_protobuf(body), SLICE)
              if part.records]
    spans = sum(len(records) for records in slices)
    rules = parts["pack"].load_rules([], include_default=True)
    best, decisions = float("inf"), 0
    collections = [0, 0, 0]
    for _ in range(args.repeat):
        core = _core(parts, rules)
        if args.settled:
            _settle()
        before = [generation["collections"] for generation in gc.get_stats()]
        now = 1_000_000.0
        started = time.process_time()
        decisions = 0
        for records in (_read(parts, bodies) if args.decode else slices):
            now += 0.0005
            decisions += len(core.apply(records, now).decisions)
        best = min(best, time.process_time() - started)
        collections = [generation["collections"] - was
                       for generation, was in zip(gc.get_stats(), before, strict=True)]
    if not args.repeat:  # the core made (the price data loaded), no step
        _core(parts, rules)
        print(f"{args.workload}: {spans} spans made and decoded, the core made; no step")
        return
    what = " with the decode" if args.decode else ""
    print(f"{args.workload}{what}: {best * 1e6 / spans:.2f} CPU µs per span "
          f"(best of {args.repeat}), "
          f"{spans} spans, {decisions} decisions; collections per 1,000 spans: "
          f"{', '.join(f'{count * 1000 / spans:.1f}' for count in collections)} "
          "(generations 0, 1, 2)")


def _this_workload() -> Any:
    """This bench's workload (``bench/workload.py`` beside this file), whichever tree runs: two
    trees compared read the same spans."""
    spec = importlib.util.spec_from_file_location("bench_workload", HERE / "bench" / "workload.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CONTENT = frozenset({"gen_ai.input.messages", "gen_ai.output.messages"})


def _bare(body: bytes) -> bytes:
    """``body`` with its spans' model-call content taken out."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest.FromString(body)
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                kept = [kv for kv in span.attributes if kv.key not in CONTENT]
                del span.attributes[:]
                span.attributes.extend(kept)
    data: bytes = request.SerializeToString()
    return data


def _time_ingest(parts: dict[str, Any], bodies: list[bytes], args: Any) -> None:
    try:
        logs: Any = importlib.import_module("watchdog.core.spans.logs")
    except ImportError:  # the flat layout: no log join
        logs = None
    parse, slices_of = parts["decode"].parse_protobuf, parts["pipeline"].slices_of
    best, spans = float("inf"), 0
    for _ in range(args.repeat):
        join = logs.LogJoin() if logs is not None else None
        now = 1_000_000.0
        spans = 0
        started = time.process_time()
        for body in bodies:
            now += 0.01
            for part in slices_of(parse(body), SLICE, join, now):
                spans += len(part.records)
            if join is not None:
                join.expired(now)
        best = min(best, time.process_time() - started)
    print(f"{args.workload}{' bare' if args.bare else ''} ingest: "
          f"{best * 1e6 / spans:.2f} CPU µs per span (best of {args.repeat}), {spans} spans")


def _compare(args: Any) -> int:
    """This tree against ``--baseline``, alternately; the ratio of the bests."""
    import re

    skip = {"--baseline", "--rounds", "--tree"}  # (the rest goes to every run)
    passed: list[str] = []
    argv, index = sys.argv[1:], 0
    while index < len(argv):
        arg = argv[index]
        if arg in skip:
            index += 2
            continue
        if arg.split("=", 1)[0] not in skip:
            passed.append(arg)
        index += 1
    trees = {"this": str(Path(args.tree).resolve()), "baseline": str(Path(args.baseline).resolve())}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    best = {name: float("inf") for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--tree", tree,
                                   *passed], capture_output=True, text=True, check=False)
            line = (done.stdout.strip().splitlines() or [done.stderr.strip()])[-1]
            print(f"{name:8} {line}")
            found = re.search(r"([\d.]+) CPU µs per span", line)
            if done.returncode or found is None:
                return 1
            best[name] = min(best[name], float(found.group(1)))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"ratio this/baseline (best of {args.rounds}): {best['this'] / best['baseline']:.3f}")
    return 0


def _read(parts: dict[str, Any], bodies: list[bytes]) -> Iterator[list[Any]]:
    """Each payload decoded and normalised, its records in the sidecar's slices."""
    parse, slices_of = parts["decode"].parse_protobuf, parts["pipeline"].slices_of
    for body in bodies:
        for part in slices_of(parse(body), SLICE):
            if part.records:
                yield part.records


def _settle() -> None:
    """The collector as ``watchdog serve`` sets it once started (``settle_collector``), what is
    loaded so far frozen; the flat layout has none: the same done here."""
    try:
        from watchdog.shell.server import settle_collector
    except ImportError:
        gc.collect()
        gc.freeze()
        gc.set_threshold(700, 10, 1000)
    else:
        settle_collector()


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
