"""The store encodes snapshots and activity with msgspec, into the plain JSON the stdlib wrote:
a state dir an older (stdlib) build wrote loads, every row round-trips identically, and
Infinity/NaN are refused (snapshots) or kept (activity) exactly as ``json.dumps`` did."""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from bench.workload import batches
from tests.spans import T0, SpanMaker, chat_attrs, run_spans, tool_attrs
from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.run import RunState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.decode import parse_protobuf
from watchdog.core.spans.pipeline import records_from
from watchdog.shell.state.store import (
    DB_FILE,
    Store,
    decode,
    encode_items,
    encode_json,
    encode_row,
)

TEXT = "naïve café — 日本語のテキスト 😀 \"quoted\" \\ back\nslash\t\u0001"
LARGE_INTS = [2**63 - 1, -(2**63), 2**64 - 1, 10**30, -(10**40)]
FLOATS = [0.1, 1e300, 1e-7, 5e-324, -0.0, 1_795_836_009.040315, 123456789.12345679]


def tricky_row(key: str = "run-ü") -> dict[str, Any]:
    return {"key": key, "agent": TEXT, "ended": False, "last_seen": 1.7e9, "text": TEXT,
            "ints": LARGE_INTS, "floats": FLOATS, "nested": [[1, [2.5, [TEXT, None]]], [], {}],
            "by": {"ключ": {"deep": [True, False, None, 0, -1]}}, "empty": "",
            "parent_run": "parent-日本"}


def same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down (1 is not 1.0, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


def stdlib_row(row: dict[str, Any]) -> str:
    """How the store encoded a snapshot before msgspec (ASCII escapes, ``1e+300``)."""
    return json.dumps(row, separators=(",", ":"), allow_nan=False)


def stdlib_items(items: list[Any]) -> str:
    return json.dumps(items, separators=(",", ":"), ensure_ascii=False)


def test_a_snapshot_round_trips_identically_and_stays_plain_json(tmp_path: Path) -> None:
    row = tricky_row()
    text = encode_row(row)
    assert same(decode(text), row)
    assert same(json.loads(text), row)  # plain JSON: the stdlib reads it the same
    assert same(decode(stdlib_row(row)), row)  # and what the stdlib wrote reads the same
    store = Store(str(tmp_path))
    assert store.save([row], []) == []
    assert same(store.get_run(row["key"]), row)
    # SQLite's JSON functions read the rows too (the child-run query)
    assert [r["key"] for r in store.child_runs("parent-日本", 10)] == [row["key"]]
    store.close()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -math.nan])
@pytest.mark.parametrize("where", ["top", "list", "dict"])
def test_a_snapshot_with_infinity_or_nan_is_refused_as_json_dumps_refuses_it(
        tmp_path: Path, bad: float, where: str) -> None:
    row = tricky_row("run-bad")
    if where == "top":
        row["last_progress"] = bad
    elif where == "list":
        row["nested"][0][1][0] = bad
    else:
        row["budget"] = {"cost_usd": bad}
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        stdlib_row(row)  # today's rule ...
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        encode_row(row)  # ... kept
    store = Store(str(tmp_path))
    good = tricky_row("run-good")
    assert store.save([row, good], []) == ["run-bad"]  # refused; the rest is written
    assert store.get_run("run-bad") is None
    assert same(store.get_run("run-good"), good)
    with pytest.raises(ValueError):  # a session checkpoint holding one raises, as it did
        store.save_sessions([{"id": "s1", "updated_at": 1.0, "cost": bad}])
    store.close()


def test_a_directive_record_reads_back_as_json_dumps_of_it() -> None:
    """encode_json (directive records): msgspec's text where it reads back as the stdlib's;
    Infinity and NaN written as the stdlib writes them, and read back."""
    record = {**tricky_row(), "steps": [(1, 1.5, "tool", TEXT, None, "ok", None)]}
    assert same(json.loads(encode_json(record)), json.loads(json.dumps(record)))
    for bad in (math.inf, -math.inf):
        text = encode_json({"elapsed": bad, "steps": [(1, bad)]})
        assert text == json.dumps({"elapsed": bad, "steps": [(1, bad)]}, separators=(",", ":"))
        assert json.loads(text) == {"elapsed": bad, "steps": [[1, bad]]}
    assert math.isnan(json.loads(encode_json({"cost": math.nan}))["cost"])


def test_activity_with_a_non_finite_time_is_written_as_json_dumps_wrote_it(
        tmp_path: Path) -> None:
    items = [(1, math.inf, "tool", TEXT, None, "ok", None), (2, 1.5, "llm", "m", "in=1", None,
                                                              None)]
    assert encode_items(items) == stdlib_items(items)  # Infinity, as before
    store = Store(str(tmp_path))
    store.save([], [ActivityEntry("run-a", *item) for item in items])
    assert [tuple(entry[1:]) for entry in store.activity("run-a")] == items
    store.close()


def test_values_msgspec_cannot_encode_take_the_stdlib_path() -> None:
    lone = "\ud800 half a pair"
    assert encode_row({"key": lone}) == stdlib_row({"key": lone})
    assert decode(encode_row({"key": lone})) == {"key": lone}
    assert encode_row({"n": 2**70}) == stdlib_row({"n": 2**70})  # beyond 64 bits
    assert encode_row({"d": {None: 1, True: 2}}) == stdlib_row({"d": {None: 1, True: 2}})
    with pytest.raises(TypeError):
        encode_row({"o": object()})  # not JSON: refused as before
    assert decode('{"old":Infinity,"n":NaN}')["old"] == math.inf  # an older build's row


def real_snapshots() -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """Snapshots and activity chunks of a real ingest (the benchmark's misbehaving agents)."""
    tracker = RunTracker(max_runs=10_000)
    snapshots: list[dict[str, Any]] = []
    chunks: list[list[Any]] = []
    for body in batches(100, 256, 4096, workload="rules-firing"):
        result = tracker.apply(records_from(parse_protobuf(body)).records, time.time())
        snapshots.extend(run.to_dict() for run in result.touched.values())
        by_run: dict[str, list[Any]] = {}
        for entry in result.activity:
            by_run.setdefault(entry.run_key, []).append(entry[1:])
        chunks.extend(by_run.values())
    return snapshots, chunks


def plain_json_types(value: Any) -> bool:
    if isinstance(value, dict):
        return all(type(k) is str and plain_json_types(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(map(plain_json_types, value))
    return type(value) in (str, int, float, bool, type(None))


def test_real_snapshots_are_plain_json_types_and_encode_as_the_stdlib_does() -> None:
    snapshots, chunks = real_snapshots()
    assert len(snapshots) > 500 and len(chunks) > 500
    # msgspec would store an enum, a set or a date the stdlib refuses: snapshots hold none
    assert all(plain_json_types(row) for row in snapshots)
    for row in snapshots:
        assert same(decode(encode_row(row)), json.loads(stdlib_row(row)))
        assert same(RunState.from_dict(decode(encode_row(row))).to_dict(),
                    json.loads(stdlib_row(row)))
    for items in chunks:
        assert same(decode(encode_items(items)), json.loads(stdlib_items(items)))


def stdlib_state_dir(state: Path, tracker: RunTracker, entries: list[ActivityEntry]) -> None:
    """A state dir as the stdlib build wrote it: its schema, its encodings."""
    Store(str(state)).close()  # the schema
    with contextlib.closing(sqlite3.connect(state / DB_FILE)) as db, db:
        for run in [*tracker.active(), *tracker.ended()]:
            row = run.to_dict()
            db.execute("INSERT INTO runs (key, agent, ended, updated, data) VALUES (?,?,?,?,?)",
                       (run.key, run.agent or "unknown", int(run.ended), run.last_seen,
                        stdlib_row(row)))
            mine = [entry[1:] for entry in entries if entry.run_key == run.key]
            db.execute("INSERT INTO activity_chunks VALUES (?,?,?)",
                       (run.key, max(item[0] for item in mine), stdlib_items(mine)))


def stdlib_written_run(state: Path) -> tuple[RunState, list[ActivityEntry]]:
    """A run with non-ASCII text everywhere, in a state dir the stdlib build wrote."""
    maker = SpanMaker({"service.name": "encoding-test"})
    ids = {"gen_ai.agent.call.id": "run-ünïcode-1", "gen_ai.agent.name": "agent-日本"}
    now = time.time()
    maker.span("chat m", {**chat_attrs(1200, 34), **ids}, start=now - 30)
    maker.span("execute_tool read_file", {
        **tool_attrs("read_file", '{"path": "/src/naïve.py"}', f"{TEXT} " * 20), **ids},
        start=now - 20)
    maker.span("execute_tool write_file", {**tool_attrs("write_file", '{"p": "é"}'), **ids},
               start=now - 10, error="disque plein — 满了")
    tracker, result = run_spans(maker.take(), now=now)
    run = tracker.get("run-ünïcode-1")
    assert run is not None
    assert "\\u" in stdlib_row(run.to_dict())  # the old rows are ASCII-escaped: the case
    stdlib_state_dir(state, tracker, result.activity)
    return run, result.activity


def test_a_state_dir_the_stdlib_wrote_loads(tmp_path: Path) -> None:
    run, activity = stdlib_written_run(tmp_path)
    store = Store(str(tmp_path))
    loaded = store.get_run(run.key)
    assert same(loaded, json.loads(stdlib_row(run.to_dict())))
    assert loaded is not None and same(RunState.from_dict(loaded).to_dict(), loaded)
    assert store.activity(run.key) == activity
    assert [r["key"] for r in store.load_runs(active=not run.ended, limit=10)] == [run.key]
    store.close()


def test_a_row_an_older_build_wrote_with_infinity_loads(tmp_path: Path) -> None:
    maker = SpanMaker()
    maker.span("chat m", {**chat_attrs(), "gen_ai.agent.call.id": "run-inf"}, start=T0)
    tracker, _ = run_spans(maker.take())
    row = tracker.get("run-inf")
    assert row is not None
    data = row.to_dict()
    data["budget"] = {"max_cost_usd": math.inf}  # before bounds.budget_limit
    text = json.dumps(data, separators=(",", ":"))  # allow_nan: what that build wrote
    assert "Infinity" in text
    store = Store(str(tmp_path))
    with contextlib.closing(sqlite3.connect(tmp_path / DB_FILE)) as db, db:
        db.execute("INSERT INTO runs (key, agent, ended, updated, data) "
                   "VALUES ('run-inf', 'a', 0, 1.0, ?)", (text,))
    loaded = store.get_run("run-inf")
    assert loaded is not None and loaded["budget"] == {"max_cost_usd": math.inf}
    assert RunState.from_dict(loaded).budget == {}
    assert store.child_runs("x", 10) == []  # not JSON to SQLite: skipped, not an error
    store.close()


def test_the_flush_s_row_of_a_run_encodes_as_its_snapshot_does() -> None:
    """``RunState.to_row`` (what the state flush and a directive's snapshot encode at once)
    leaves tuples and integer keys as they are: the text stored, by msgspec or by the stdlib,
    is :meth:`RunState.to_dict`'s to the byte, for the runs of every workload (ended, stopped
    and still running), and a value JSON refuses is refused alike."""
    from bench.workload import WORKLOADS
    from watchdog.core.rules.engine import RuleEngine
    from watchdog.core.rules.pack import load_rules
    from watchdog.core.sessions import SessionBook
    from watchdog.core.step import Core

    runs: list[RunState] = []
    for workload in WORKLOADS:
        core = Core(RunTracker(max_runs=10_000), SessionBook(lambda _key: None),
                    RuleEngine(load_rules([], include_default=True)))
        now = time.time()
        for body in batches(100, 256, 4096, workload=workload):
            now += 0.05
            core.apply(records_from(parse_protobuf(body)).records, now)
        runs.extend([*core.tracker.active(), *core.tracker.ended()])
    held = {name: sum(1 for run in runs if run.to_dict()[name]) for name in (
        "_call_counts", "_error_counts", "_result_counts", "clock_lags", "_models", "_asked",
        "_named", "_tool_spans", "_failures", "forced_state", "terminal_state")}
    assert all(held.values()), held  # each conversion to_dict makes is met
    for run in runs:
        assert encode_row(run.to_row()) == encode_row(run.to_dict())
        assert stdlib_row(run.to_row()) == stdlib_row(run.to_dict())
    run = runs[0]
    run.budget = {"max_tool_calls": math.nan}
    for row in (run.to_row(), run.to_dict()):
        with pytest.raises(ValueError):
            encode_row(row)
