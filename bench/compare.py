"""Two builds of the sidecar on the same payloads, alternating: spans per CPU-second, same run.

``bench/compare.py --build base=/path/to/old/tree --build head=. --rounds 4`` generates each
workload's OTLP/HTTP payloads once (:mod:`bench.workload`), then feeds them end to end
(:func:`bench.ingest.end_to_end`: a ``watchdog serve`` subprocess, default rules, every span
accounted for) to each build in turn, A B A B ..., starting each round with the other build, so
both see the same machine state. A build is a source tree: the sidecar runs with it as its
``PYTHONPATH``. Speed is the sidecar process's own CPU time (user + system), which other
processes on a shared machine disturb far less than wall time.

It prints each build's spans per CPU-second per workload (median and range over the rounds) and
the ratio of the medians of the second build to the first, and the median of the rounds' own
ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ingest import end_to_end
from bench.workload import WORKLOADS, batches


def build(text: str) -> tuple[str, str]:
    """``NAME=TREE``, or ``NAME=TREE,KEY=VALUE,...``: the tree's sidecar with those settings
    (``py=.,native=false``: the same tree on its Python decode)."""
    name, sep, spec = text.partition("=")
    tree, *settings = spec.split(",")
    path = Path(tree)
    if not sep or not name or not (path / "watchdog" / "__main__.py").is_file() \
            or not all("=" in setting for setting in settings):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected NAME=TREE[,KEY=VALUE...], TREE a source tree holding "
            f"watchdog/__main__.py, KEY a configuration key")
    return name, ",".join([str(path.resolve()), *settings])


def run_build(bodies: list[bytes], spans: int, spec: str) -> float:
    tree, *settings = spec.split(",")
    extra = dict(setting.split("=", 1) for setting in settings)
    return end_to_end(bodies, spans, tree=tree, extra=extra)["spans_per_cpu_s"]


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", type=build, action="append", required=True,
                        help="NAME=TREE, given twice: the first is the one compared against")
    parser.add_argument("--workload", choices=WORKLOADS, action="append",
                        help="repeatable; default: every workload")
    parser.add_argument("--rounds", type=positive, default=4)
    parser.add_argument("--spans", type=positive, default=30_720)
    parser.add_argument("--batch", type=positive, default=512)
    parser.add_argument("--runs", type=positive, default=1000, help="concurrent runs")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if len(args.build) != 2:
        parser.error("give --build exactly twice")
    (first, first_tree), (second, second_tree) = args.build
    trees = {first: first_tree, second: second_tree}
    results: dict[str, Any] = {"builds": trees, "rounds": args.rounds, "workloads": {}}
    for workload in args.workload or WORKLOADS:
        bodies = list(batches(args.runs, args.batch, args.spans, workload=workload))
        spans = len(bodies) * args.batch
        rates: dict[str, list[float]] = {first: [], second: []}
        for index in range(args.rounds):
            order = (first, second) if index % 2 == 0 else (second, first)
            for name in order:
                rates[name].append(run_build(bodies, spans, trees[name]))
                print(f"{workload} round {index + 1} {name}: {rates[name][-1]:,.0f} spans/CPU-s",
                      file=sys.stderr, flush=True)
        pairs = [b / a for a, b in zip(rates[first], rates[second], strict=True)]
        results["workloads"][workload] = {
            "spans": spans, "spans_per_cpu_s": rates,
            "ratio_of_medians": statistics.median(rates[second]) / statistics.median(rates[first]),
            "median_pair_ratio": statistics.median(pairs)}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'workload':<16}{first:>22}{second:>22}{'ratio':>8}{'pairs':>8}")
    for workload, r in results["workloads"].items():
        cells = [f"{statistics.median(r['spans_per_cpu_s'][n]):,.0f} "
                 f"({min(r['spans_per_cpu_s'][n]):,.0f}-{max(r['spans_per_cpu_s'][n]):,.0f})"
                 for n in (first, second)]
        print(f"{workload:<16}{cells[0]:>22}{cells[1]:>22}{r['ratio_of_medians']:>8.2f}"
              f"{r['median_pair_ratio']:>8.2f}")


if __name__ == "__main__":
    main()
