"""A trace whose agent calls one nested agent many times: what each later span beside them costs.

``bench/nested_agents.py`` builds one trace (ids of its own, no HTTP): an agent span that calls
a nested agent of one name ``N`` times (each with three model calls below it, a child run
split out of the trace's run), then spans of that nested agent's name beside them (under the
root, in no agent span), which the tracker checks against every nested agent
(``TraceFrames.beside_child``). It prints the CPU µs per such span for a few ``N`` and the
ratio of the largest ``N``'s to the smallest's, in the same run: the goal is a cost that grows
with the trace's retained records, not with records times nested agents (the ratio at most
``GOAL``; it was 125 for 120 nested agents over 10: a walk over the records per agent).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.record import KEY_TRACE, SpanKind, SpanRecord

TRACE = "ab" * 16
ROOT = "r" * 16
SLICE = 32  # the service's INGEST_SLICE
GOAL = 20.0  # the largest N's cost per span over the smallest's, at most


def record(span_id: str, parent: str, kind: SpanKind, start: int, name: str) -> SpanRecord:
    made = SpanRecord("trace:" + TRACE, KEY_TRACE, TRACE, span_id, parent, name, kind, start,
                      start + 1)
    made.agent = "helper"
    return made


def per_span(nested: int, beside: int) -> float:
    """CPU µs per span beside ``nested`` nested agents of one name."""
    tracker = RunTracker()
    spans: list[SpanRecord] = []
    for index in range(nested):
        agent = f"a{index:015d}"
        spans.extend(record(f"l{index:07d}{call:08d}", agent, SpanKind.LLM,
                            10 + index * 100 + call, "chat") for call in range(3))
        spans.append(record(agent, ROOT, SpanKind.AGENT, 10 + index * 100,
                            "invoke_agent helper"))
    for at in range(0, len(spans), SLICE):
        tracker.apply(spans[at:at + SLICE], 1.0)
    later = [record(f"b{index:015d}", ROOT, SpanKind.OTHER, 10**6 + index, "step")
             for index in range(beside)]
    cpu = time.process_time()
    for at in range(0, len(later), SLICE):
        tracker.apply(later[at:at + SLICE], 2.0)
    return (time.process_time() - cpu) / beside * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nested", type=int, nargs="+", default=[10, 40, 120])
    parser.add_argument("--beside", type=int, default=300)
    args = parser.parse_args()
    costs = {nested: per_span(nested, args.beside) for nested in args.nested}
    for nested, cost in costs.items():
        print(f"{nested:5d} nested agents: {cost:9.1f} CPU µs per span beside them")
    ratio = costs[max(costs)] / costs[min(costs)]
    print(f"ratio {max(costs)} / {min(costs)}: {ratio:.1f} (goal: at most {GOAL:g})")
    sys.exit(0 if ratio <= GOAL else 1)


if __name__ == "__main__":
    main()
