"""The stores' schemas move on; a state dir written by the build before reads the same.

``tests/data/state_v4/`` is a real state dir that build wrote (``make.py`` there: the
workload's misbehaving agents through the real core, runs, activity, a session, directives
with report prompts' facts, webhook deliveries and an ack) with what it read back from it
(``expected.json``). This build migrates the files when it opens them (state schema 4 → 5:
activity chunks into a rowid table; 5 → 6: a ``session`` column, read out of the runs' rows
(6 → 7: with Python, of rows an older build wrote with NaN);
directives 1 → 2: records as MessagePack, a
``terminal_state`` column; 2 → 3: the runs' snapshots stored with their directives; 3 → 4: a
``grace`` column, the wind_downs' announced graces read out of their records) and must read
back the same, then keep writing into them."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from tests.test_directives_store import NOW, directive, make_run
from watchdog.core.directives.model import Directive
from watchdog.core.rules.decision import Action, Decision, Severity
from watchdog.core.rules.engine import FiredRecord
from watchdog.core.rules.model import Grace
from watchdog.core.runs.terminal import TerminalState
from watchdog.shell.directives import store as directive_store
from watchdog.shell.directives.store import AddResult, DirectiveStore
from watchdog.shell.state import store as state_store
from watchdog.shell.state.store import Store

OLD = Path(__file__).resolve().parent / "data" / "state_v4"


def old_state_dir(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A state dir the old build wrote, and what it held; its directives as read now: a
    directive stored before they said which budget they count down says none."""
    state = tmp_path / "state"
    state.mkdir()
    for name in (state_store.DB_FILE, directive_store.DB_FILE):
        shutil.copyfile(OLD / name, state / name)
    expected = json.loads((OLD / "expected.json").read_text())
    assert all("countdown" not in d for d in expected["directives"])
    expected["directives"] = [{**d, "countdown": None} for d in expected["directives"]]
    return state, expected


def version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def fired(record: FiredRecord) -> list[Any]:
    return [record.run_key, record.rule, record.dedup_key, record.action.value, record.fired_at,
            record.tool_calls_at,
            record.terminal_state.value if record.terminal_state is not None else None]


def as_json(value: Any) -> Any:
    """What JSON makes of a value (tuples are lists): how expected.json holds it."""
    return json.loads(json.dumps(value))


def record(d: Directive) -> dict[str, Any]:
    return as_json({**d.to_record(), "report_prompt": d.report_prompt})


def test_the_files_are_the_old_schemas() -> None:
    assert version(OLD / state_store.DB_FILE) == 4
    assert version(OLD / directive_store.DB_FILE) == 1


def test_a_state_dir_the_build_before_wrote_reads_the_same(tmp_path: Path) -> None:
    state, expected = old_state_dir(tmp_path)
    store = Store(str(state))
    keys = sorted(expected["runs"])
    assert len(keys) >= 10 and sum(map(len, expected["activity"].values())) >= 100
    assert {key: store.get_run(key) for key in keys} == expected["runs"]
    assert [row["key"] for row in store.load_runs(True, 1000)] == expected["active"]
    assert [row["key"] for row in store.load_runs(False, 1000)] == expected["ended"]
    assert {key: as_json(store.activity(key)) for key in keys} == expected["activity"]
    assert store.get_session("session-1") == expected["session"]
    # schema 6: each run's session read out of its old row, for the listing's filter
    for key in keys:
        session = expected["runs"][key]["session"]
        ended = key in expected["ended"]
        assert [row[1] for row in store.list_runs(ended, None, None, 100, session)] == [key]
    assert store.applied_spans() == ([], 0)  # schema 8: none stored by the old build
    store.close()
    assert version(state / state_store.DB_FILE) == state_store.SCHEMA_VERSION == 9

    directives = DirectiveStore(str(state))
    stored = directives.list_after(0, 10_000)
    assert len(stored) >= 10 and any(d.prompt_facts for d in stored)
    assert [record(d) for d in stored] == expected["directives"]
    assert {key: [d.seq for d in directives.list_for_run(key)] for key in keys} == \
        expected["by_run"]
    assert [fired(f) for f in directives.fired_records()] == expected["fired"]
    assert any(f[-1] for f in expected["fired"])  # a terminal state read out of the old JSON
    # the graces the wind_downs announced, read out of the old JSON (schema 4)
    graces = {f.action: f.grace for f in directives.fired_records()}
    assert graces == {Action.WIND_DOWN: Grace(tool_calls=2), Action.ABORT: None}
    assert as_json(directives.counters()) == expected["counters"]
    assert [[row.directive.global_seq, row.hook] for row in directives.due(NOW, 1000)] == \
        expected["due"]
    run_id, acked = expected["acked"]
    assert directives.acked(run_id) == acked
    directives.close()
    assert version(state / directive_store.DB_FILE) == directive_store.SCHEMA_VERSION == 4


def test_a_migrated_state_dir_is_written_on_and_reopened(tmp_path: Path) -> None:
    state, expected = old_state_dir(tmp_path)
    directives = DirectiveStore(str(state))
    top, _runs = directives.counters()
    old = expected["directives"][0]
    # a decision the old file holds is still a duplicate; a new one is stored next to them
    again = directive(99, top + 1, run_key=old["run_id"], rule=old["rule"],
                      dedup_key=old["dedup_key"])
    new = directive(1, top + 2, run_key="run-new", terminal=TerminalState.LOOP_DETECTED)
    assert directives.add_many([(again, []), (new, ["hook-a"])], now=NOW,
                               runs=[("run-new", top + 2, '{"key":"run-new"}')]) == [
        AddResult.DUPLICATE, AddResult.STORED]
    directives.close()
    store = Store(str(state))
    store.save([{"key": "run-new", "agent": "a", "ended": False, "last_seen": NOW}], [])
    store.close()

    reopened = DirectiveStore(str(state))  # a current file: opened as it is
    assert [record(d) for d in reopened.list_after(0, 10_000)] == [
        *expected["directives"], record(new)]
    assert reopened.list_after(top + 1)[0].report_prompt == "prompt"
    assert fired(reopened.fired_records(["run-new"])[0])[-1] == "loop_detected"
    assert [row.directive.id for row in reopened.due(NOW, 1000)][-1] == new.id
    assert reopened.run_snapshots() == [("run-new", '{"key":"run-new"}')]
    reopened.close()
    again_store = Store(str(state))
    assert again_store.get_run("run-new") == {"key": "run-new", "agent": "a", "ended": False,
                                              "last_seen": NOW}
    assert again_store.activity(sorted(expected["activity"])[0]) != []
    again_store.close()


def test_a_version_8_files_span_ids_are_numbered_and_kept_within_the_bound(
        tmp_path: Path) -> None:
    """Schema 9 numbers the chunks of span ids a version 8 file holds (``upto``: the ids up to
    and with each), so the next flush cuts them by an index range: the newest
    ``MAX_RECENT_SPANS`` ids are kept, exactly, the oldest chunk left cut to its newest ids."""
    state, _expected = old_state_dir(tmp_path)
    path = state / state_store.DB_FILE
    db = sqlite3.connect(path, isolation_level=None)
    for step in range(5, 9):  # (the build before's file: schema 8)
        if state_store._MIGRATIONS[step]:
            db.executescript(state_store._MIGRATIONS[step])
        if step in state_store._PYTHON_MIGRATIONS:
            state_store._PYTHON_MIGRATIONS[step](db)
    db.execute("PRAGMA user_version=8")
    ids = [[f"{n:048x}", n, n + 1] for n in range(state_store.MAX_RECENT_SPANS)]
    for start in range(0, len(ids), 4096):
        chunk = ids[start:start + 4096]
        db.execute("INSERT INTO applied_spans (spans, data) VALUES (?, ?)",
                   (len(chunk), json.dumps(chunk)))
    db.close()
    store = Store(str(state))
    try:
        assert version(path) == 9
        assert [list(entry) for entry in store.applied_spans()[0]] == ids
        store.save([], [], applied=[(f"{n:048x}", n, n + 1) for n in range(16_384, 16_484)])
        kept, unread = store.applied_spans()
        assert len(kept) == state_store.MAX_RECENT_SPANS and unread == 0
        assert [start for _, start, _ in kept] == list(range(100, 16_484))
    finally:
        store.close()


def test_a_migration_that_committed_is_not_run_again(tmp_path: Path) -> None:
    """A sidecar stopped right after a migration's COMMIT, before the version was set after it:
    the next start reads the file on (adding the session column again failed: 'duplicate
    column name: session', no start until the file was moved aside)."""
    state, _expected = old_state_dir(tmp_path)
    path = state / state_store.DB_FILE
    db = sqlite3.connect(path, isolation_level=None)
    for step in (5, 6):  # (as Store does, and no further)
        db.executescript(state_store._MIGRATIONS[step])
    db.close()
    store = Store(str(state))
    try:
        assert version(path) == state_store.SCHEMA_VERSION
        sessions = {data.get("session") for _, _, data in store.list_runs(True, None, None, 500)}
        some = next(session for session in sessions if session)
        assert {data.get("session") for _, _, data in
                store.list_runs(True, None, None, 500, some)} == {some}
    finally:
        store.close()


def test_a_version_1_record_with_infinity_keeps_its_terminal_state(tmp_path: Path) -> None:
    """The stdlib wrote Infinity into version 1's JSON; SQLite cannot read such a row, the
    migration reads its terminal state with the stdlib."""
    state, _expected = old_state_dir(tmp_path)
    db = sqlite3.connect(state / directive_store.DB_FILE)
    data, = db.execute("SELECT data FROM directives WHERE json_extract(data, '$.terminal_state')"
                       " IS NOT NULL LIMIT 1").fetchone()
    row = json.loads(data)
    row["budget"] = {"max_cost_usd": math.inf}
    db.execute("UPDATE directives SET data=? WHERE global_seq=?",
               (json.dumps(row, separators=(",", ":")), row["global_seq"]))
    db.commit()
    db.close()
    directives = DirectiveStore(str(state))
    kept = [d for d in directives.list_after(0, 10_000) if d.global_seq == row["global_seq"]]
    assert kept[0].budget == {"max_cost_usd": math.inf}
    assert kept[0].terminal_state == row["terminal_state"]
    assert next(f for f in directives.fired_records([row["run_id"]])
                if f.dedup_key == row["dedup_key"]).terminal_state == \
        TerminalState(row["terminal_state"])
    directives.close()


def test_records_keep_infinity_and_what_messagepack_cannot_hold(tmp_path: Path) -> None:
    directives = DirectiveStore(str(tmp_path))
    odd = directive(1, 1, message="half a pair \ud800")  # MessagePack refuses it: JSON text
    big = directive(2, 2, dedup_key="big")
    big.budget = {"max_tool_calls": math.inf}
    big.grace = {"tool_calls": 2.0, "seconds": math.nan}
    assert directives.add_many([(odd, []), (big, [])]) == [AddResult.STORED] * 2
    db = sqlite3.connect(tmp_path / directive_store.DB_FILE)
    assert [row[0] for row in db.execute("SELECT typeof(data) FROM directives "
                                         "ORDER BY global_seq")] == ["text", "blob"]
    db.close()
    first, second = directives.list_after(0)
    assert first.message == "half a pair \ud800" and first.report_prompt == "prompt"
    assert second.budget == {"max_tool_calls": math.inf}
    assert second.grace is not None and math.isnan(second.grace["seconds"])
    directives.close()


def test_a_version_3_file_keeps_the_graces_its_wind_downs_announced(tmp_path: Path) -> None:
    """Schema 3 kept a wind_down's grace only in its record (MessagePack): migrated, the fired
    log has it (the engine goes on with it after a restart, whatever its rule says now); a
    wind_down that announced none has none, and other actions' records no grace at all."""
    graced = Decision("run-1", "loop", Action.WIND_DOWN, Severity.WARNING, "wrap up",
                      TerminalState.LOOP_DETECTED, "loop",
                      grace={"tool_calls": 2, "seconds": 30.5, "ends_at_tool_calls": 9})
    bare = Decision("run-1", "countdown", Action.WIND_DOWN, Severity.WARNING, "3 left", None,
                    "countdown")
    stop = Decision("run-1", "stop", Action.ABORT, Severity.CRITICAL, "stop", None, "stop")
    made = [Directive.from_decision(d, make_run("run-1"), NOW, None, i, i)
            for i, d in enumerate((graced, bare, stop), 1)]
    state = tmp_path / "state"
    written = DirectiveStore(str(state))
    assert written.add_many([(d, []) for d in made]) == [AddResult.STORED] * 3
    current = [(f.rule, f.grace) for f in written.fired_records()]
    written.close()
    assert current == [("loop", Grace(2, 30.5)), ("countdown", Grace()), ("stop", None)]
    db = sqlite3.connect(state / directive_store.DB_FILE)  # as schema 3 left it
    db.execute("ALTER TABLE directives DROP COLUMN grace")
    db.execute("PRAGMA user_version=3")
    db.commit()
    db.close()
    migrated = DirectiveStore(str(state))
    assert [(f.rule, f.grace) for f in migrated.fired_records()] == current
    migrated.close()
    assert version(state / directive_store.DB_FILE) == 4


def test_old_rows_with_nan_are_listed_under_their_session(tmp_path: Path) -> None:
    """A run row an older build wrote with NaN or Infinity is no JSON to SQLite: the session
    such a row holds is read with Python when the file is migrated (from schema 4, and from a
    schema 6 file whose migration left it unread), so ?session= lists it at once, though an
    ended run is never written again."""
    for start in (4, 6):
        (tmp_path / str(start)).mkdir()
        state, _expected = old_state_dir(tmp_path / str(start))
        path = state / state_store.DB_FILE
        db = sqlite3.connect(path)
        key, data = db.execute("SELECT key, data FROM runs WHERE ended=1 AND "
                               "json_extract(data, '$.session') IS NOT NULL LIMIT 1").fetchone()
        row = json.loads(data)
        row["cost_usd"], row["duration_seconds"] = math.nan, math.inf
        db.execute("UPDATE runs SET data=? WHERE key=?", (json.dumps(row), key))
        db.commit()
        for step in range(5, start + 1):  # (the build before migrated it to 6)
            db.executescript(state_store._MIGRATIONS[step])
        db.close()
        store = Store(str(state))
        try:
            listed = [r[1] for r in store.list_runs(True, None, None, 500, row["session"])]
            assert key in listed, start
        finally:
            store.close()
        assert version(path) == state_store.SCHEMA_VERSION
