"""What the ingest path's metrics cost: the calls the service makes to the metrics per ingest
slice and per decision, in process, for instruction counts under callgrind.

``bench/metrics_cost.py --passes N`` makes 2,048 spans of ``--workload`` (default
``rules-firing``; :mod:`bench.workload`, its clock fixed), applies them through the core in the
sidecar's 32-span slices with the default rules, then makes, ``N`` times over, each slice's calls
(``spans_received``, ``batch_applied``, ``rule_eval``) and each decision's (``rule_fired``) to
one :class:`~watchdog.shell.metrics.Metrics`. Under ``valgrind --tool=callgrind`` (with
``PYTHONHASHSEED=0``), ``--passes 2`` less ``--passes 1`` is one pass; run from another tree
with ``PYTHONPATH=TREE:.`` and ``python -P`` to compare two builds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.append(str(Path(__file__).resolve().parent.parent))  # (after a PYTHONPATH tree)

import bench.workload
from bench.core_step import CLOCK_NS, SLICE, _core, modules
from bench.workload import WORKLOADS, batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--workload", choices=WORKLOADS, default="rules-firing")
    args = parser.parse_args()
    bench.workload.time = SimpleNamespace(time_ns=lambda: CLOCK_NS)  # type: ignore[attr-defined,assignment]
    from watchdog.core.spans.decode import parse_protobuf
    from watchdog.core.spans.pipeline import slices_of
    from watchdog.shell.metrics import Metrics

    parts = modules()
    core = _core(parts, parts["pack"].load_rules([], include_default=True))
    metrics = Metrics("bench")
    applied = []
    now = 1_000_000.0
    for body in batches(200, 512, 2048, workload=args.workload):
        for part in slices_of(parse_protobuf(body), SLICE):
            now += 0.001
            applied.append((part, core.apply(part.records, now)))
    decided = [(d.decision.rule, d.decision.action.value, d.run.agent, d.run.trace_id)
               for _part, step in applied for d in step.decisions]
    for _ in range(args.passes):
        for part, step in applied:
            metrics.spans_received("http", part, now)
            metrics.batch_applied(step.batch, step.evicted)
            metrics.rule_eval(step.eval_seconds)
        for rule, action, agent, trace_id in decided:
            metrics.rule_fired(rule, action, agent, trace_id)
    metrics.publish()
    import watchdog

    print(f"{args.workload}: {len(applied)} slices, {len(decided)} decisions, "
          f"{args.passes} passes ({Path(watchdog.__file__).parent})")


if __name__ == "__main__":
    main()
