"""The compiled decode against the Python one, in one process, alternating: spans per
CPU-second of the per-span path they share (OTLP protobuf bytes -> records), and of that path
with the run tracker after it.

    python -P bench/native.py [--workload rules-firing] [--spans 30720] [--rounds 6]
    valgrind --tool=callgrind python -P bench/native.py --only native --passes 2 --spans 2048

Under callgrind, ``--passes`` reads the payloads that many times (decode + normalise alone) and
prints nothing: instructions per span are (the run with ``--passes 2`` less the one with
``--passes 0``) / (2 x spans), so what the process does besides cancels out.

The sidecar end to end, compiled against Python: ``bench/compare.py --build py=.,native=false
--build native=.`` (the same tree twice, one on its Python decode).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workload import ALL_WORKLOADS, batches
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans import native
from watchdog.core.spans.decode import parse_protobuf
from watchdog.core.spans.pipeline import records_from


def decode_normalise(bodies: list[bytes]) -> float:
    start = time.process_time()
    for body in bodies:
        records_from(parse_protobuf(body))
    return time.process_time() - start


def with_tracker(bodies: list[bytes]) -> float:
    tracker = RunTracker(max_runs=1_000_000)
    now = 1_900_000_000.0
    start = time.process_time()
    for body in bodies:
        tracker.apply(records_from(parse_protobuf(body)).records, now)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=ALL_WORKLOADS, action="append")
    parser.add_argument("--spans", type=int, default=30_720)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--only", choices=("native", "python"), help="one decode (callgrind)")
    parser.add_argument("--passes", type=int, help="with --only: decode + normalise the payloads "
                        "this many times, nothing else (callgrind)")
    args = parser.parse_args()
    if not native.AVAILABLE:
        raise SystemExit("the compiled decode is not built (make builds it with cargo)")
    if args.passes is not None:
        if args.only is None or args.passes < 0 or len(args.workload or ()) > 1:
            parser.error("--passes takes --only, at most one --workload and a count >= 0")
        native.use_native(args.only == "native")
        bodies = list(batches(args.runs, args.batch, args.spans,
                              workload=(args.workload or ["rules-firing"])[0]))
        for _ in range(args.passes):
            decode_normalise(bodies)
        return
    decodes = [args.only == "native"] if args.only else [False, True]
    print(f"{'workload':<14}{'path':<18}{'python':>12}{'compiled':>12}{'ratio':>8}")
    for workload in args.workload or ("rules-firing", "clean"):
        bodies = list(batches(args.runs, args.batch, args.spans, workload=workload))
        spans = len(bodies) * args.batch
        for name, step in (("decode+normalise", decode_normalise), ("+tracker", with_tracker)):
            rates: dict[bool, list[float]] = {False: [], True: []}
            for index in range(args.rounds):
                for compiled in decodes if index % 2 == 0 else decodes[::-1]:
                    native.use_native(compiled)
                    rates[compiled].append(spans / step(bodies))
            python, compiled = (statistics.median(rates[c]) if rates[c] else float("nan")
                                for c in (False, True))
            print(f"{workload:<14}{name:<18}{python:>12,.0f}{compiled:>12,.0f}"
                  f"{compiled / python:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
