"""Writes this folder's state dir with the build it runs (how it was made: the build before the
stores' schemas 5 and 2, ``PYTHONPATH=<that tree> python -P tests/data/state_v4/make.py``), and
``expected.json``: what that build read back from it. ``tests/test_store_schemas.py`` reads
the same files with the current build and expects the same."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.workload import batches
from watchdog.core.directives.model import REPORTING_ACTIONS, Directive
from watchdog.core.directives.prompt import decided_facts
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import load_rules
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.sessions import SessionBook, SessionState
from watchdog.core.spans.decode import parse_protobuf
from watchdog.core.spans.pipeline import slices_of
from watchdog.core.step import Core
from watchdog.shell.directives.store import DirectiveStore
from watchdog.shell.state.store import Store

HERE = Path(__file__).resolve().parent
NOW = 1_795_320_000.0


def fired(record: Any) -> list[Any]:
    """A fired record as JSON: its fields, the enums by value."""
    return [record.run_key, record.rule, record.dedup_key, record.action.value, record.fired_at,
            record.tool_calls_at,
            record.terminal_state.value if record.terminal_state is not None else None]


def main() -> None:
    core = Core(RunTracker(max_runs=100), SessionBook(lambda _key: None),
                RuleEngine(load_rules([], include_default=True)))
    made: list[Directive] = []
    seqs: dict[str, int] = {}
    dirty: dict[str, Any] = {}
    activity = []
    now = NOW
    for body in batches(6, 32, 192, workload="rules-firing"):
        for part in slices_of(parse_protobuf(body), 32):
            now += 0.5
            step = core.apply(part.records, now)
            dirty.update(step.dirty)
            activity.extend(step.activity)
            for decided in step.decisions:
                decision = decided.decision
                seq = seqs[decision.run_key] = seqs.get(decision.run_key, 0) + 1
                facts = decided_facts(decided) if decision.action.value in REPORTING_ACTIONS \
                    else None
                made.append(Directive.from_decision(decision, decided.run, decided.now, None,
                                                    seq, len(made) + 1, budget=decided.budget,
                                                    prompt_facts=facts))
    made[0].report_prompt = "a prompt given as text"  # stored as its text
    with tempfile.TemporaryDirectory() as state:
        store = Store(state)
        session = SessionState("session-1", runs=2, checkpoints=1, facts={"path": "/srv"},
                               updated_at=NOW)
        store.save([run.to_dict() for run in dirty.values()], activity, [session.to_dict()])
        directives = DirectiveStore(state)
        directives.add_many([(d, ["hook-a"] if d.global_seq % 5 == 0 else []) for d in made],
                            now=NOW)
        directives.ack(made[0].run_id, made[0].seq, NOW)
        keys = sorted(dirty)
        expected = {
            "runs": {key: store.get_run(key) for key in keys},
            "active": [row["key"] for row in store.load_runs(True, 1000)],
            "ended": [row["key"] for row in store.load_runs(False, 1000)],
            "activity": {key: [list(entry) for entry in store.activity(key)] for key in keys},
            "session": store.get_session("session-1"),
            "directives": [{**d.to_record(), "report_prompt": d.report_prompt}
                           for d in directives.list_after(0, 10_000)],
            "by_run": {key: [d.seq for d in directives.list_for_run(key)] for key in keys},
            "fired": [fired(record) for record in directives.fired_records()],
            "counters": directives.counters(),
            "due": [[row.directive.global_seq, row.hook] for row in directives.due(NOW, 1000)],
            "acked": [made[0].run_id, directives.acked(made[0].run_id)],
        }
        store.close()
        directives.close()
        for name in ("watchdog.sqlite3", "directives.sqlite3"):
            shutil.copyfile(Path(state) / name, HERE / name)
    (HERE / "expected.json").write_text(json.dumps(expected, sort_keys=True) + "\n")
    print(f"{len(keys)} runs, {len(activity)} activity entries, {len(made)} directives",
          file=sys.stderr)


if __name__ == "__main__":
    main()
