"""Directive store benchmark: the directives a workload really makes, encoded and stored.

Run with ``.venv/bin/python bench/directive_store.py`` (``--help`` for the knobs). The workload
(:data:`bench.workload.WORKLOADS`, ``rules-firing`` by default) goes through the real core with the
default rules, 32 spans a step as the service applies them; every decision becomes the directive
the outbox would make (numbered, a wind_down's or abort's report prompt frozen as its facts).
Then, in CPU time of this process, alternating and the best of ``--repeat`` rounds counting:

* each directive's record (:meth:`Directive.to_record`) encoded by the stdlib :mod:`json`, orjson,
  msgspec and :func:`~watchdog.shell.state.store.encode_json` (msgspec, its check for
  Infinity/NaN included), each checked to read back as the stdlib's does; and the store's row
  (``_row``: the record but its columns as MessagePack, read back whole by the store);
* :meth:`DirectiveStore.add_many` of them all into a fresh store in a temporary directory, in
  batches of each ``--batch`` size (the outbox writes what waited while the last write was on
  its way: a few to a few dozen directives).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workload import WORKLOADS, batches
from watchdog.core.directives.model import REPORTING_ACTIONS, Directive
from watchdog.core.directives.prompt import decided_facts
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import load_rules
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.sessions import SessionBook
from watchdog.core.spans.decode import parse_protobuf
from watchdog.core.spans.pipeline import slices_of
from watchdog.core.step import Core
from watchdog.shell.directives.store import DirectiveStore, _directive, _row
from watchdog.shell.state.store import encode_json

SLICE = 32  # spans per core step (the service's INGEST_SLICE)


def directives(workload: str, runs: int, spans: int) -> list[Directive]:
    core = Core(RunTracker(max_runs=10 * runs), SessionBook(lambda _key: None),
                RuleEngine(load_rules([], include_default=True)))
    made: list[Directive] = []
    seqs: dict[str, int] = {}
    now = 1_795_320_000.0
    for body in batches(runs, 512, spans, workload=workload):
        for part in slices_of(parse_protobuf(body), SLICE):
            now += 0.0005
            for decided in core.apply(part.records, now).decisions:
                decision = decided.decision
                seq = seqs[decision.run_key] = seqs.get(decision.run_key, 0) + 1
                facts = decided_facts(decided) if decision.action.value in REPORTING_ACTIONS \
                    else None
                made.append(Directive.from_decision(decision, decided.run, decided.now, None,
                                                    seq, len(made) + 1, budget=decided.budget,
                                                    prompt_facts=facts))
    return made


def encoders() -> dict[str, Callable[[Any], str]]:
    fast = msgspec.json.Encoder()
    return {
        "json": lambda record: json.dumps(record, separators=(",", ":")),
        # (orjson refuses a named tuple, a step of a report prompt's facts: a list of it)
        "orjson": lambda record: orjson.dumps(record, default=list).decode(),
        "msgspec": lambda record: fast.encode(record).decode(),
        "store": encode_json,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=WORKLOADS, default="rules-firing")
    parser.add_argument("--runs", type=int, default=1000, help="concurrent runs in the workload")
    parser.add_argument("--spans", type=int, default=30_720)
    parser.add_argument("--batch", type=int, action="append",
                        help="directives per add_many (repeatable; default 1, 7 and 64)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best counts")
    args = parser.parse_args()
    made = directives(args.workload, args.runs, args.spans)
    if not made:
        raise SystemExit(f"{args.workload}: no rule fired, nothing to store")
    records = [directive.to_record() for directive in made]
    codecs = encoders()
    for record in records:
        expected = json.loads(codecs["json"](record))
        for name, encode in codecs.items():
            if json.loads(encode(record)) != expected:
                raise SystemExit(f"{name} reads back otherwise than the stdlib")
    for directive, record in zip(made, records, strict=True):
        if _directive(_row(directive)).to_record() != record:
            raise SystemExit("the store's row reads back otherwise than the record")
    sizes = sorted(len(codecs["json"](record)) for record in records)
    rows = sorted(len(_row(directive)[-1]) for directive in made)
    print(f"[{args.workload}] {len(made)} directives ({sum(1 for d in made if d.prompt_facts)} "
          f"with a report prompt's facts), records of {sizes[len(sizes) // 2]:,} bytes "
          f"as JSON, the store's rows' data {rows[len(rows) // 2]:,} bytes (medians)")
    best = {name: float("inf") for name in codecs}
    for _ in range(args.repeat):
        for name, encode in codecs.items():
            started = time.process_time()
            for record in records:
                encode(record)
            best[name] = min(best[name], time.process_time() - started)
    row_best = float("inf")
    for _ in range(args.repeat):
        started = time.process_time()
        for directive in made:
            _row(directive)
        row_best = min(row_best, time.process_time() - started)
    print("encode a record    µs    ratio to json")
    for name, seconds in best.items():
        print(f"  {name:<14}{seconds * 1e6 / len(records):8.1f}{best['json'] / seconds:9.2f}x")
    print(f"  {'store row':<14}{row_best * 1e6 / len(records):8.1f}    (to_record included)")
    print("add_many           CPU µs per directive (encoding, SQL, commit)")
    for size in args.batch or [1, 7, 64]:
        spent = float("inf")
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as state:
                store = DirectiveStore(state)
                started = time.process_time()
                for start in range(0, len(made), size):
                    store.add_many([(directive, ()) for directive in made[start:start + size]])
                spent = min(spent, time.process_time() - started)
                store.close()
        print(f"  batches of {size:<4}{spent * 1e6 / len(made):8.1f}")


if __name__ == "__main__":
    main()
