"""Sessions: the pure core (checkpoints in, state and zero-progress out), their persistence in
the store (with the v1 → v2 migration) and the control API's two session routes."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    RunningServer,
    http_request,
    running_server,
    sidecar_config,
    wait_until,
)
from watchdog.core import sessions
from watchdog.core.rules.decision import Action, Decided, Decision, Severity
from watchdog.core.rules.signals import SESSION_SCHEMA, session_activation
from watchdog.core.runs.run import RunState
from watchdog.core.sessions import (
    MAX_FACT_CHARS,
    MAX_FACTS,
    MAX_FAILED_APPROACHES,
    MAX_RECENT_RUNS,
    Checkpoint,
    CheckpointError,
    SessionBook,
    SessionState,
    progress_key,
)
from watchdog.core.spans.record import KeySource
from watchdog.shell.directives.outbox import MAX_RUN_DIRECTIVES
from watchdog.shell.state.store import DB_FILE, SCHEMA_VERSION, Store

T0 = 1_800_000_000.0


def checkpoint(remaining: Any, at: float = T0, run: str | None = None,
               **fields: Any) -> Checkpoint:
    return Checkpoint.parse({"remaining": remaining, **fields, **({"run_id": run} if run
                                                                  else {})}, at)


# -- the pure core ------------------------------------------------------------------------------

def test_remaining_is_compared_without_case_whitespace_or_number_format() -> None:
    assert progress_key("  Deploy the  FIX\n") == progress_key("deploy the fix")
    assert progress_key(3) == progress_key(3.0) == progress_key(" 3 ")
    assert progress_key("deploy the fix") != progress_key("deploy the fix to prod")
    assert progress_key(3) != progress_key(2)
    for done in ("", "   ", 0, 0.0, -1, "0"):  # nothing left: never "the same work again"
        assert progress_key(done) is None


def test_the_same_remaining_twice_is_zero_progress_and_progress_resets_the_streak() -> None:
    session = SessionState("s")
    outcomes = [session.checkpoint(checkpoint(text, T0 + i)) for i, text in enumerate(
        ["fix the login bug", "Fix the login bug", "fix  the login bug", "write the tests",
         "write the tests"])]
    assert [(o.zero_progress, o.zero_progress_streak) for o in outcomes] == [
        (False, 0), (True, 1), (True, 2), (False, 0), (True, 1)]
    assert session.checkpoints == 5
    assert session.last_remaining == "write the tests"


def test_a_finished_task_reported_twice_is_not_zero_progress() -> None:
    session = SessionState("s")
    for remaining in ("", 0, ""):
        assert session.checkpoint(checkpoint(remaining)).zero_progress is False
    assert session.note() is None


def test_zero_progress_carries_across_runs_and_counts_per_run_checkpoints() -> None:
    session = SessionState("s")
    assert session.note_run("run-1", T0) is True
    assert session.note_run("run-1", T0) is False  # the same run again: not a new run
    session.checkpoint(checkpoint("migrate the database", T0, run="run-1"))
    session.note_run("run-2", T0 + 60)
    second = session.checkpoint(checkpoint("Migrate the database", T0 + 120, run="run-2"))
    assert (second.zero_progress, second.zero_progress_streak, second.runs) == (True, 1,
                                                                                ("run-2",))
    assert session.runs == 2
    session.note_run("run-3", T0 + 180)  # a new run, nothing checkpointed yet
    assert session.activation("run-2") == {
        "id": "s", "runs": 3, "checkpoints": 2, "zero_progress": True,
        "zero_progress_streak": 1, "run_checkpoints": 1, "agent_cycle": [],
        "agent_cycle_repeats": 0, "cycle_orchestrator": False}
    assert session.activation("run-3")["run_checkpoints"] == 0
    # a checkpoint naming no run counts for the session's active runs, as the shell says
    third = session.checkpoint(checkpoint("migrate the database", T0 + 240),
                               active_runs=["run-3", "run-4"])
    assert third.runs == ("run-3", "run-4") and third.zero_progress_streak == 2
    assert session.runs == 4  # run-4 was first heard of through the checkpoint
    assert session.activation("run-4")["run_checkpoints"] == 1


def test_the_activation_is_what_rules_may_read() -> None:
    session = SessionState("s", runs=2, checkpoints=3, zero_progress=True,
                           zero_progress_streak=2, recent_runs={"r": 1})
    activation = session.activation("r")
    assert set(activation) == set(SESSION_SCHEMA)
    assert session_activation(activation) == activation  # already of the declared types


def test_distinct_runs_are_counted_with_a_bounded_memory() -> None:
    session = SessionState("s")
    for index in range(MAX_RECENT_RUNS * 3):
        session.note_run(f"run-{index}", T0)
        session.note_run(f"run-{index}", T0)
    assert session.runs == MAX_RECENT_RUNS * 3
    assert len(session.recent_runs) == MAX_RECENT_RUNS


def test_facts_merge_later_wins_null_forgets_and_values_are_bounded_and_redacted() -> None:
    session = SessionState("s")
    session.checkpoint(checkpoint("x", state={"project_path": "/srv/app", "branch": "main",
                                              "tests_pass": False, "open_issues": 3}))
    session.checkpoint(checkpoint("x", state={"branch": "fix/login", "open_issues": None,
                                              "db_url": "postgres://app:s3cret-pw@db:5432/app",
                                              "log": "y" * 2000}))
    facts = session.facts
    assert facts["project_path"] == "/srv/app"  # verbatim
    assert facts["branch"] == "fix/login" and facts["tests_pass"] is False
    assert "open_issues" not in facts
    assert facts["db_url"] == "postgres://app:[REDACTED]@db:5432/app"
    assert isinstance(facts["log"], str) and len(facts["log"]) == MAX_FACT_CHARS

    # a fact whose key names a secret: its value never kept, whatever it looks like
    session.checkpoint(checkpoint("x", state={
        "db_password": "correcthorse", "client_secret": "abcd1234efgh",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMIK7MDENG", "pin_PASSWD": 1234, "token_count": 4096,
        "api_key_set": True}))
    facts = session.facts
    assert [facts[key] for key in ("db_password", "client_secret", "AWS_SECRET_ACCESS_KEY",
                                   "pin_PASSWD")] == ["[REDACTED]"] * 4
    assert facts["token_count"] == 4096 and facts["api_key_set"] is True

    # secrets inside a JSON-encoded value, and in a key
    session.checkpoint(checkpoint("x", state={
        "settings": json.dumps({"db": {"host": "db", "password": "my pass phrase"}}),
        "cloned https://bob:s3cretpw@git.example/app": True}))
    shown = json.dumps(session.context())
    assert "pass phrase" not in shown and "s3cretpw" not in shown
    assert json.loads(session.facts["settings"]) == {"db": {"host": "db",
                                                            "password": "[REDACTED]"}}
    assert session.facts["cloned https://bob:[REDACTED]@git.example/app"] is True

    session.checkpoint(checkpoint("x", state={f"k{i}": i for i in range(MAX_FACTS + 20)}))
    session.checkpoint(checkpoint("x", state={"project_path": "/srv/app2"}))
    assert len(session.facts) == MAX_FACTS
    assert session.facts["project_path"] == "/srv/app2"  # the most recently set survive
    assert "k0" not in session.facts and f"k{MAX_FACTS + 19}" in session.facts


def test_failed_approaches_are_deduplicated_and_the_most_recent_kept() -> None:
    session = SessionState("s")
    session.checkpoint(checkpoint("x", failed_approaches=["restart the service", "grep logs"]))
    session.checkpoint(checkpoint("x", failed_approaches=["Restart  the service", "  "]))
    assert session.failed_approaches == ["grep logs", "Restart  the service"]
    session.checkpoint(checkpoint("x", failed_approaches=[f"idea {i}" for i in range(80)]))
    assert len(session.failed_approaches) == MAX_FAILED_APPROACHES
    assert session.failed_approaches[-1] == "idea 79"
    assert "grep logs" not in session.failed_approaches


def test_the_note_names_the_repeated_work_and_failed_approaches_until_progress() -> None:
    session = SessionState("s")
    session.checkpoint(checkpoint("get the staging deploy green",
                                  failed_approaches=["re-run the pipeline"]))
    assert session.note() is None
    session.checkpoint(checkpoint("Get the staging deploy green",
                                  failed_approaches=["bump the timeout"]))
    note = session.note()
    assert note is not None
    assert '"Get the staging deploy green"' in note
    assert "new direction" in note and "explain" in note
    assert "re-run the pipeline; bump the timeout" in note
    session.checkpoint(checkpoint("only the docs are left"))
    assert session.note() is None
    assert session.context()["zero_progress"] is False


def test_a_session_round_trips_through_json() -> None:
    session = SessionState("s")
    session.note_run("run-1", T0)
    session.checkpoint(checkpoint("a", run="run-1", state={"path": "/a", "n": 1.5},
                                  failed_approaches=["b"]))
    session.checkpoint(checkpoint("A", run="run-1"))
    again = SessionState.from_dict(json.loads(json.dumps(session.to_dict())))
    assert again == session
    assert again.context() == session.context()
    # every field is read back: from_dict reads only those it knows the stored type of
    assert set(SessionState.__slots__) - {"id"} == set(sessions._STORED_TYPES)


def test_the_report_of_a_run_stopped_for_no_progress_says_so(sidecar: RunningServer) -> None:
    status, _ = post(sidecar, "/v1/runs/stalled-1/heartbeat",
                     {"messages": 3, "announce": {"agent": "deployer", "session": "task-9"}})
    assert status == 200
    for _ in range(3):
        post(sidecar, "/v1/sessions/task-9/checkpoints",
             {"remaining": "deploy to staging", "run_id": "stalled-1"})
    stop = wait_until(lambda: sidecar.get_json("/v1/runs/stalled-1")["directives"])
    assert [d["rule"] for d in stop] == ["zero-progress"]

    status, body = http_request("GET", sidecar.api + "/v1/runs/stalled-1/report")
    report = body.decode()
    assert status == 200
    assert ("- **Stopped by:** zero-progress (abort, intervention_required): No progress "
            "across 2 checkpoints of session task-9") in report
    assert "The watchdog stopped this run (zero-progress, intervention_required)" in report
    assert "can carry on" not in report  # (what an active run nothing stopped is told)
    stop = sidecar.get_json("/v1/runs/stalled-1/report",
                            headers={"Accept": "application/json"})["stop"]
    assert (stop["action"], stop["rule"], stop["terminal_state"], stop["seq"]) == (
        "abort", "zero-progress", "intervention_required", 1)


def test_the_report_names_the_first_stop_however_many_directives_came_after(
        sidecar: RunningServer) -> None:
    # (the report read the run's newest MAX_RUN_DIRECTIVES only: a stop older than those was
    # not there, and the report said nothing stopped the run)
    post(sidecar, "/v1/runs/stalled-2/heartbeat",
         {"messages": 3, "announce": {"agent": "deployer", "session": "task-10"}})
    for _ in range(3):
        post(sidecar, "/v1/sessions/task-10/checkpoints",
             {"remaining": "deploy to staging", "run_id": "stalled-2"})
    wait_until(lambda: sidecar.get_json("/v1/runs/stalled-2")["directives"])
    outbox = sidecar.server.outbox
    assert outbox is not None
    now = time.time()
    view = RunState("stalled-2", KeySource.WATCHDOG, "", now).view(now)
    for i in range(MAX_RUN_DIRECTIVES + 1):  # (a notify rule of one's own, run after run)
        made = Decision("stalled-2", "nudge", Action.NOTIFY, Severity.INFO, f"nudge {i}", None,
                        f"nudge#{i}")
        assert sidecar.call(lambda made=made: outbox.submit(Decided(made, view, (), now)))
    sidecar.stored()
    stop = sidecar.get_json("/v1/runs/stalled-2/report",
                            headers={"Accept": "application/json"})["stop"]
    assert stop is not None
    assert (stop["action"], stop["rule"], stop["seq"]) == ("abort", "zero-progress", 1)


@pytest.mark.parametrize(("body", "message"), [
    ({}, "remaining is required"),
    ({"remaining": None}, "remaining=null is not allowed"),
    ({"remaining": True}, "remaining=true is not allowed"),
    ({"remaining": ["a"]}, "expected a string or a finite number"),
    ({"remaining": "x", "state": ["a"]}, "state must be an object"),
    ({"remaining": "x", "state": {"a": {"b": 1}}}, "state.a is not allowed"),
    ({"remaining": "x", "state": {"": 1}}, 'state key "" is not allowed'),
    ({"remaining": "x", "failed_approaches": "tried"}, "failed_approaches must be a list"),
    ({"remaining": "x", "failed_approaches": [1]}, "failed_approaches must be a list"),
    ({"remaining": "x", "run_id": 7}, "run_id must be a string"),
    ({"remaining": "x", "facts": {}}, "facts is not allowed: expected remaining, state"),
])
def test_bad_checkpoints_are_refused_naming_the_field(body: dict[str, Any],
                                                      message: str) -> None:
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(").replace("[", r"\[")):
        Checkpoint.parse(body, T0)


def test_the_book_is_an_lru_in_front_of_the_store_and_keeps_dirty_sessions() -> None:
    stored: dict[str, dict[str, Any]] = {"old": SessionState("old", runs=7).to_dict()}
    loads: list[str] = []

    def load(session_id: str) -> dict[str, Any] | None:
        loads.append(session_id)
        return stored.get(session_id)

    book = SessionBook(load, max_sessions=2)
    assert book.get("nope") is None
    old = book.get("old")
    assert old is not None and old.runs == 7
    assert book.get("old") is old and loads == ["nope", "old"]  # cached now

    assert book.note_run("a", "run-a", T0) is not None
    assert book.note_run("a", "run-a", T0) is None  # nothing new: not dirty again
    book.note_run("b", "run-b", T0)
    book.note_run("c", "run-c", T0)  # "old" and "a" leave the cache...
    assert len(book) == 2 and book.evicted == 2
    loads.clear()
    a = book.get("a")  # ...but "a" is dirty: it comes back from memory, not the store
    assert a is not None and a.runs == 1 and loads == []
    assert sorted(state.id for state in book.take_dirty()) == ["a", "b", "c"]
    assert book.take_dirty() == []


@pytest.mark.parametrize("fields", [
    {"facts": {"repo": ["/src"]}}, {"failed_approaches": [1]}, {"recent_runs": {"r": "1"}},
    {"agent_cycle": [None]}, {"runs": True}, {"zero_progress": 1}])
def test_a_stored_session_holding_a_value_of_another_type_cannot_be_read(
        fields: dict[str, Any]) -> None:
    """What a stored session's fields hold is checked as the fields are (a list in a fact, a
    number among the failed approaches would raise wherever the context or the note is
    made); a bool is no count, nor a count a bool."""
    with pytest.raises(sessions.UnreadableSession):
        SessionState.from_dict({**SessionState("s").to_dict(), **fields})


def test_a_session_that_could_not_be_read_is_read_again_once_started_afresh() -> None:
    """A stored row that cannot be read is unknown to the book until the session starts
    afresh; once it has (its new row stored), the book reads it from the store again after it
    left the LRU, rather than taking it for unreadable still."""
    stored: dict[str, object] = {"s": "{"}
    told: list[str] = []

    def load(session_id: str) -> object:
        data = stored.get(session_id)
        if data == "{":
            raise ValueError("not JSON")
        return data

    book = SessionBook(load, max_sessions=1, unreadable=lambda sid, _exc: told.append(sid))
    assert book.get("s") is None and book.cannot_be_read("s") and told == ["s"]
    assert book.note_run("s", "run-s", T0) is not None  # its next run starts it afresh
    (written,) = book.take_dirty()
    stored["s"] = written.to_dict()
    book.note_run("other", "run-o", T0)  # "s" leaves the LRU
    again = book.get("s")
    assert again is not None and again.runs == 1 and not book.cannot_be_read("s")
    assert told == ["s"]


# -- the store ----------------------------------------------------------------------------------

V1_SCHEMA = """
CREATE TABLE runs (key TEXT PRIMARY KEY, agent TEXT NOT NULL, ended INTEGER NOT NULL,
                   updated REAL NOT NULL, data TEXT NOT NULL);
CREATE INDEX runs_by_state ON runs (ended, updated);
CREATE TABLE activity (run TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL,
                       kind TEXT NOT NULL, name TEXT NOT NULL, detail TEXT, result TEXT,
                       error TEXT, PRIMARY KEY (run, seq)) WITHOUT ROWID;
PRAGMA user_version=1;
"""


def test_a_version_1_state_file_is_migrated_and_keeps_its_runs(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / DB_FILE)
    db.executescript(V1_SCHEMA)
    db.execute("INSERT INTO runs VALUES ('r1', 'agent', 1, 1.0, ?)",
               (json.dumps({"key": "r1", "answer": 42}),))
    db.commit()
    db.close()

    store = Store(str(tmp_path))
    assert store.get_run("r1") == {"key": "r1", "answer": 42}
    session = SessionState("s", checkpoints=1, facts={"path": "/srv/app"}, updated_at=5.0)
    store.save_sessions([session.to_dict()])
    assert store.get_session("s") == session.to_dict()
    store.close()
    check = sqlite3.connect(tmp_path / DB_FILE)
    assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 9
    check.close()
    reopened = Store(str(tmp_path))  # opening a current file again changes nothing
    assert reopened.get_session("s") == session.to_dict()
    reopened.close()


def test_sessions_are_saved_with_the_runs_and_pruned_least_recent_first() -> None:
    store = Store(":memory:")
    store.save([], [], [SessionState(f"s{i}", updated_at=float(i)).to_dict() for i in range(5)])
    assert store.get_session("s4") is not None
    store.prune(max_sessions=2)
    assert [store.get_session(f"s{i}") is not None for i in range(5)] == [
        False, False, False, True, True]
    store.close()


# -- the control API ----------------------------------------------------------------------------

def post(server: RunningServer, path: str, body: object) -> tuple[int, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, answer = http_request("POST", server.api + path, raw,
                                  {"Content-Type": "application/json"})
    return status, json.loads(answer)


def test_an_unknown_session_has_an_empty_context(sidecar: RunningServer) -> None:
    assert sidecar.get_json("/v1/sessions/never-seen/context") == {
        "session": "never-seen", "runs": 0, "checkpoints": 0, "facts": {},
        "failed_approaches": [], "zero_progress": False, "zero_progress_streak": 0,
        "last_remaining": None, "last_checkpoint_at": None, "last_checkpoint_run": None,
        "note": None, "active_runs": []}


def test_checkpoints_over_the_api(sidecar: RunningServer) -> None:
    status, first = post(sidecar, "/v1/sessions/task-7/checkpoints", {
        "remaining": "ship the release notes",
        "state": {"project_path": "/srv/app", "ticket": "OPS-12", "retries": 2},
        "failed_approaches": ["ask the bot"]})
    assert status == 200
    assert first["checkpoints"] == 1 and first["zero_progress"] is False
    status, second = post(sidecar, "/v1/sessions/task-7/checkpoints",
                          {"remaining": "Ship the release notes", "state": {"retries": 3}})
    assert status == 200
    assert (second["zero_progress"], second["zero_progress_streak"]) == (True, 1)

    context = sidecar.get_json("/v1/sessions/task-7/context")
    assert context["facts"] == {"project_path": "/srv/app", "ticket": "OPS-12", "retries": 3}
    assert context["failed_approaches"] == ["ask the bot"]
    assert context["last_remaining"] == "Ship the release notes"
    assert context["checkpoints"] == 2 and context["zero_progress_streak"] == 1
    assert "ship the release notes" in context["note"].lower()


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "request body is not valid JSON"),
    (b"[1, 2]", "request body must be a JSON object"),
    ({"state": {}}, "remaining is required"),
    ({"remaining": "x", "state": {"nested": {"a": 1}}}, "state.nested is not allowed"),
])
def test_bad_checkpoint_requests_get_400_with_the_reason(sidecar: RunningServer, body: object,
                                                         message: str) -> None:
    status, answer = post(sidecar, "/v1/sessions/s/checkpoints", body)
    assert status == 400
    assert answer["error"]["code"] == "bad_request"
    assert message in answer["error"]["message"]
    assert sidecar.get_json("/v1/sessions/s/context")["checkpoints"] == 0


def test_a_huge_refused_value_is_not_echoed_whole(sidecar: RunningServer) -> None:
    status, answer = post(sidecar, "/v1/sessions/s/checkpoints",
                          {"remaining": list(range(100_000))})
    assert status == 400
    message = answer["error"]["message"]
    assert message.startswith("remaining=[0, 1, 2, ") and message.endswith("(what is left to do)")
    assert "..." in message and len(message) < 300


def test_a_too_long_session_id_is_refused(sidecar: RunningServer) -> None:
    status, answer = post(sidecar, "/v1/sessions/" + "x" * 300 + "/checkpoints",
                          {"remaining": "x"})
    assert status == 400 and "session id" in answer["error"]["message"]


def test_session_memory_survives_a_restart(tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "state")
    with running_server(config) as first:
        for _ in range(2):
            post(first, "/v1/sessions/kept/checkpoints",
                 {"remaining": 4, "state": {"project_path": "/srv/app"}})
        before = first.get_json("/v1/sessions/kept/context")
    with running_server(config) as second:
        assert second.get_json("/v1/sessions/kept/context") == before
        status, third = post(second, "/v1/sessions/kept/checkpoints", {"remaining": 4.0})
        assert status == 200 and third["zero_progress_streak"] == 2


V2_ACTIVITY = """
INSERT INTO activity VALUES ('r1', 1, 10.0, 'tool', 'read', '{"path":"/a"}', 'x = 1', NULL);
INSERT INTO activity VALUES ('r1', 2, 11.0, 'llm', 'chat', 'in=1 out=2', NULL, 'Boom: no');
INSERT INTO activity VALUES ('r2', 1, 12.0, 'answer', 'final', NULL, 'done', NULL);
PRAGMA user_version=2;
"""


def test_a_version_2_activity_log_is_migrated_into_chunks(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / DB_FILE)
    db.executescript(V1_SCHEMA)
    db.executescript(V2_ACTIVITY)
    db.commit()
    db.close()

    store = Store(str(tmp_path))
    assert [tuple(entry) for entry in store.activity("r1")] == [
        ("r1", 1, 10.0, "tool", "read", '{"path":"/a"}', "x = 1", None),
        ("r1", 2, 11.0, "llm", "chat", "in=1 out=2", None, "Boom: no")]
    assert [entry.result for entry in store.activity("r2")] == ["done"]
    store.close()
    check = sqlite3.connect(tmp_path / DB_FILE)
    tables = {row[0] for row in check.execute("SELECT name FROM sqlite_master")}
    assert "activity" not in tables and "activity_chunks" in tables
    assert "tracker_state" in tables  # (version 4)
    check.close()
