"""Directives without a network: the model's JSON shape, the report prompt, and the store
(dedup, numbering, acks, the webhook outbox's bookkeeping, pruning, restart)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from watchdog.core.directives.model import Directive, iso_seconds
from watchdog.core.directives.prompt import PROMPT_MAX_LINES, bounded_log, report_prompt
from watchdog.core.rules.decision import Action, Decision, Severity
from watchdog.core.runs.run import RunState
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.view import RunView
from watchdog.core.spans.record import KeySource
from watchdog.shell.directives.store import AddResult, DeliveryState, DirectiveStore

NOW = 1_795_320_000.0  # 2026-11-22T04:00:00Z


def make_run(key: str = "run-1", tool_calls: int = 17, budget: float | None = 20) -> RunView:
    run = RunState(key, KeySource.WATCHDOG, "ab" * 16, NOW - 60)
    run.agent = "explorer"
    run.tool_calls = tool_calls
    run.iterations = 9
    run.errors = 2
    run.first_start_ns = int((NOW - 252) * 1e9)
    if budget is not None:
        run.budget = {"max_tool_calls": budget}
    return run.view(NOW)


def decision(run_key: str = "run-1", rule: str = "budget-countdown",
             action: Action = Action.WIND_DOWN, message: str = "3 of 20 tool calls left",
             dedup_key: str | None = None, terminal: TerminalState | None = None) -> Decision:
    return Decision(run_key, rule, action, Severity.WARNING, message, terminal,
                    dedup_key or rule)


def directive(seq: int = 1, global_seq: int = 1, run_key: str = "run-1", **kwargs: object
              ) -> Directive:
    made = decision(run_key=run_key, **kwargs)  # type: ignore[arg-type]
    return Directive.from_decision(made, make_run(run_key), NOW, "prompt", seq, global_seq)


# -- model --------------------------------------------------------------------------------------

def test_to_json_is_the_design_shape() -> None:
    d = Directive.from_decision(decision(), make_run(), NOW, "report please", 2, 7)
    body = d.to_json()
    assert list(body) == ["id", "run_id", "seq", "action", "rule", "severity", "message",
                          "terminal_state", "budget", "report_prompt", "created_at", "agent",
                          "escalation", "grace", "countdown"]
    assert body["seq"] == 2 and body["run_id"] == "run-1" and body["action"] == "wind_down"
    assert body["budget"] == {"max_tool_calls": 20, "remaining_tool_calls": 3}
    assert isinstance(body["budget"]["max_tool_calls"], int)  # 20, not 20.0
    assert body["created_at"] == "2026-11-22T04:00:00Z" == iso_seconds(NOW)
    assert len(body["id"]) == 32 and body["agent"] == "explorer"
    assert "tool_calls_at" not in body and "global_seq" not in body
    assert body["grace"] is None  # a wind_down without grace
    assert json.loads(json.dumps(body)) == body
    record = d.to_record()
    assert record["tool_calls_at"] == 17 and record["global_seq"] == 7
    assert Directive.from_record(json.loads(json.dumps(record))) == d


def test_a_grace_is_announced_as_an_absolute_cap_and_survives_the_store() -> None:
    """The wind_down's grace says at which tool-call count it ends, so a client re-reading the
    directive (reconnect, restart) gets the same cap; records stored before it still load."""
    made = Decision("run-1", "tool-cycle", Action.WIND_DOWN, Severity.WARNING, "Loop",
                    TerminalState.LOOP_DETECTED, "tool-cycle",
                    grace={"tool_calls": 2, "ends_at_tool_calls": 19})
    d = Directive.from_decision(made, make_run(), NOW, "prompt", 1, 1)
    assert d.to_json()["grace"] == {"tool_calls": 2, "ends_at_tool_calls": 19}
    record = json.loads(json.dumps(d.to_record()))
    assert Directive.from_record(record).to_json() == d.to_json()
    del record["grace"]  # stored by an earlier version
    assert Directive.from_record(record).grace is None


def test_a_countdown_is_on_the_wire_and_survives_the_store() -> None:
    """A directive says which budget its rule counts down (``countdown``); records stored
    before the field load with none."""
    made = Decision("run-1", "calls-left", Action.WIND_DOWN, Severity.WARNING, "3 left", None,
                    "calls-left", countdown="tool_calls")
    d = Directive.from_decision(made, make_run(), NOW, "prompt", 1, 1)
    assert d.to_json()["countdown"] == "tool_calls"
    record = json.loads(json.dumps(d.to_record()))
    assert Directive.from_record(record).countdown == "tool_calls"
    del record["countdown"]  # stored by an earlier version
    assert Directive.from_record(record).countdown is None


# -- report prompt --------------------------------------------------------------------------------

def test_wind_down_prompt_is_a_system_instruction_with_sections_log_and_counters() -> None:
    lines = [f"+{i}.0s tool read_file({{\"path\": \"/src/{i}.py\"}}) -> ok" for i in range(80)]
    text = report_prompt(make_run(), lines, "3 of 20 tool calls left", now=NOW)
    assert text.startswith("[agent-watchdog: system instruction")
    assert "not from the user" in text
    for section in ("## Task", "## Completed Work", "## Key Findings",
                    "## Attempted but Inconclusive", "## Not Started / Remaining",
                    "## Suggested Next Steps"):
        assert section in text
    assert "3 of 20 tool calls left" in text
    assert "tool calls 17 of 20 (3 left)" in text and "model calls 9" in text
    assert "errors 2" in text and "elapsed 4m12s" in text
    last = 80 - PROMPT_MAX_LINES
    assert "/src/79.py" in text and f"/src/{last}.py" in text  # the last PROMPT_MAX_LINES
    assert f"/src/{last - 1}.py" not in text
    assert f"{last} earlier steps omitted" in text
    assert "Stop calling tools now" not in text


def test_abort_prompt_says_stop_calling_tools_and_the_log_is_bounded() -> None:
    huge = ["+1.0s tool fetch() -> " + "x" * 1000] * PROMPT_MAX_LINES
    text = report_prompt(make_run(budget=None), huge, "error loop", action="abort", now=NOW)
    assert "Stop calling tools now" in text and "final answer" in text
    assert "tool calls 17;" in text  # no budget known: no "of N"
    log_part = text[text.index("Activity log"):]
    assert len(log_part) < 9 * 1024
    kept, omitted = bounded_log(huge)
    assert omitted == len(huge) - len(kept) and sum(len(line) + 1 for line in kept) <= 8192


def test_prompt_redacts_and_says_when_the_log_is_missing() -> None:
    text = report_prompt(make_run(), [], "key sk-abcdefghijklmnopqrstuvwx leaked", now=NOW,
                         log_available=False)
    assert "sk-abcdefghijklmnop" not in text and "not available" in text


# -- store ----------------------------------------------------------------------------------------

def test_a_decision_is_never_stored_twice() -> None:
    store = DirectiveStore(":memory:")
    first = directive(1, 1)
    assert store.add(first, ["hook-a"]) is AddResult.STORED
    again = directive(2, 2)  # same run, same dedup_key, fresh numbers
    assert store.add(again, ["hook-a"]) is AddResult.DUPLICATE
    other = directive(2, 3, dedup_key="budget-countdown#1 left")
    clash = directive(2, 4, dedup_key="another")  # seq 2 is taken by `other`
    assert store.add_many([(other, []), (clash, [])]) == [AddResult.STORED, AddResult.CONFLICT]
    assert [d.seq for d in store.list_for_run("run-1")] == [1, 2]
    assert [row.global_seq for row in store.deliveries()] == [1]  # none for the duplicate
    assert store.counters() == (3, {"run-1": 2})


def test_a_batch_is_stored_at_once_or_told_apart_row_by_row(tmp_path: Path) -> None:
    store = DirectiveStore(str(tmp_path))
    batch = [(directive(seq, seq, dedup_key=f"rule-{seq}"), ["hook-a", "hook-b"] if seq == 2
              else []) for seq in (1, 2, 3)]
    assert store.add_many(batch) == [AddResult.STORED] * 3  # one statement
    assert [(row.global_seq, row.hook) for row in store.deliveries()] == [
        (2, "hook-a"), (2, "hook-b")]
    # a duplicate and a taken number in one batch: nothing of the first try stays, and every
    # row is told apart; the rows that can be stored are, with their deliveries
    mixed = [(directive(4, 4, dedup_key="rule-4"), ["hook-a"]),
             (directive(5, 5, dedup_key="rule-1"), ["hook-a"]),  # rule-1: decided already
             (directive(3, 6, dedup_key="rule-6"), ["hook-a"]),  # seq 3 is taken
             (directive(5, 7, dedup_key="rule-7"), [])]
    assert store.add_many(mixed) == [AddResult.STORED, AddResult.DUPLICATE, AddResult.CONFLICT,
                                     AddResult.STORED]
    assert [d.global_seq for d in store.list_after(0)] == [1, 2, 3, 4, 7]
    assert [row.global_seq for row in store.deliveries()] == [2, 2, 4]
    assert store.list_for_run("run-1", 3)[0].report_prompt == "prompt"  # read back whole
    store.close()
    reopened = DirectiveStore(str(tmp_path))
    assert reopened.counters() == (7, {"run-1": 5})
    reopened.close()


def test_a_batch_without_deliveries_is_one_statement_and_still_told_apart(
        tmp_path: Path) -> None:
    store = DirectiveStore(str(tmp_path))
    assert store.add_many([(directive(seq, seq, dedup_key=f"rule-{seq}"), [])
                           for seq in (1, 2, 3)]) == [AddResult.STORED] * 3
    # a decision stored already is skipped by the statement; the rest stays stored
    assert store.add_many([(directive(4, 4, dedup_key="rule-4"), []),
                           (directive(5, 5, dedup_key="rule-2"), []),
                           (directive(6, 6, dedup_key="rule-6"), [])]) == [
        AddResult.STORED, AddResult.DUPLICATE, AddResult.STORED]
    # a taken number fails the whole statement: nothing of it stays, each row is told apart
    assert store.add_many([(directive(7, 7, dedup_key="rule-7"), []),
                           (directive(6, 8, dedup_key="rule-8"), [])]) == [
        AddResult.STORED, AddResult.CONFLICT]
    # more rows than one statement holds: one transaction of several statements
    many = [(directive(seq, seq, dedup_key=f"rule-{seq}"), []) for seq in range(8, 608)]
    assert store.add_many(many) == [AddResult.STORED] * 600
    assert [d.seq for d in store.list_for_run("run-1")] == [1, 2, 3, 4, 6, 7, *range(8, 102)]
    assert store.counters() == (607, {"run-1": 607})
    assert store.add_many([]) == []
    store.close()


@pytest.mark.parametrize("hooks", [[], ["hook-a"]], ids=["alone", "with-deliveries"])
def test_runs_snapshots_go_with_their_directives_and_are_forgotten_after_a_flush(
        tmp_path: Path, hooks: list[str]) -> None:
    store = DirectiveStore(str(tmp_path))
    store.add_many([(directive(1, 1, dedup_key="a"), hooks),
                    (directive(1, 2, run_key="run-2", dedup_key="a"), hooks)],
                   runs=[("run-1", 1, '{"key":"run-1","spans":3}'),
                         ("run-2", 2, '{"key":"run-2","spans":1}')])
    # a later decision's snapshot replaces the run's; an earlier one never does
    store.add_many([(directive(2, 3, dedup_key="b"), hooks)],
                   runs=[("run-1", 3, '{"key":"run-1","spans":5}')])
    store.add_many([(directive(3, 4, dedup_key="c"), hooks)],
                   runs=[("run-1", 2, '{"key":"run-1","spans":4}')])
    assert store.run_snapshots() == [("run-2", '{"key":"run-2","spans":1}'),
                                     ("run-1", '{"key":"run-1","spans":5}')]
    # a directive refused (its number taken) stores no snapshot: one transaction
    assert store.add_many([(directive(1, 9, dedup_key="d"), hooks)],
                          runs=[("run-1", 9, '{"key":"run-1","spans":9}')]
                          ) == [AddResult.CONFLICT]
    store.close()
    reopened = DirectiveStore(str(tmp_path))  # kept over a restart (a crash before the flush)
    assert [run for run, _data in reopened.run_snapshots()] == ["run-2", "run-1"]
    assert reopened.forget_snapshots(2) == 1  # the flush after directive 2 stored run-2
    assert reopened.run_snapshots() == [("run-1", '{"key":"run-1","spans":5}')]
    reopened.close()


def test_a_checkpoint_copies_what_was_written_and_skips_while_nothing_was(
        tmp_path: Path) -> None:
    """The log is copied into the database at open (the schema), and by each checkpoint after
    a write; a checkpoint with nothing written since the last whole copy runs none (an idle
    sidecar's checkpointer connection stays unused: docs/performance.md, Footprint)."""
    store = DirectiveStore(str(tmp_path))
    assert store._checkpointer is not None
    run: list[str] = []
    store._checkpointer.db.set_trace_callback(run.append)  # the checkpoints it runs
    store.checkpoint()
    assert run == []
    assert store.add_many([(directive(1, 1), [])]) == [AddResult.STORED]
    store.checkpoint()
    assert run == ["PRAGMA wal_checkpoint(PASSIVE)"]
    copy = tmp_path / "copy.sqlite3"  # the database file alone, without its log
    shutil.copy(tmp_path / "directives.sqlite3", copy)
    with sqlite3.connect(copy) as db:
        assert db.execute("SELECT global_seq FROM directives").fetchall() == [(1,)]
    store.checkpoint()
    assert len(run) == 1  # nothing new
    store.close()
    assert run[-1] == "PRAGMA wal_checkpoint(TRUNCATE)"  # closing copies and empties it


def test_listing_acks_and_fired_records(tmp_path: Path) -> None:
    store = DirectiveStore(str(tmp_path))
    for g, (run, seq) in enumerate([("a", 1), ("b", 1), ("a", 2), ("a", 3)], start=1):
        store.add(directive(seq, g, run_key=run, dedup_key=f"rule-{seq}"))
    assert [d.global_seq for d in store.list_after(1, 2)] == [2, 3]
    assert [d.seq for d in store.list_for_run("a", 1)] == [2, 3]
    assert store.latest_seq("a") == 3 and store.latest_seq("nobody") == 0
    assert store.ack("a", 2, NOW) == 2
    assert store.ack("a", 1, NOW) == 2  # acks only move forward
    assert store.acked("a") == 2 and store.acked("b") == 0
    fired = store.fired_records(["a"])
    assert [(f.run_key, f.dedup_key, f.tool_calls_at) for f in fired] == [
        ("a", "rule-1", 17), ("a", "rule-2", 17), ("a", "rule-3", 17)]
    store.close()
    reopened = DirectiveStore(str(tmp_path))  # a restart keeps everything
    assert reopened.counters() == (4, {"a": 3, "b": 1})
    assert len(reopened.fired_records()) == 4
    reopened.close()


def test_webhook_outbox_bookkeeping() -> None:
    store = DirectiveStore(":memory:")
    d = directive()
    store.add(d, ["hook-a", "hook-b"], now=NOW)
    due = store.due(NOW, 10)
    assert [(x.directive.id, x.hook, x.attempts) for x in due] == [
        (d.id, "hook-a", 0), (d.id, "hook-b", 0)]
    assert store.due(NOW, 10, exclude=[(1, "hook-a")])[0].hook == "hook-b"
    store.mark_retry(1, "hook-a", NOW + 2, "HTTP 503", NOW)
    store.mark_delivered(1, "hook-b", NOW)
    assert store.due(NOW + 1, 10) == []
    assert store.next_due_at() == NOW + 2
    assert store.due(NOW + 2, 10)[0].attempts == 1
    store.mark_failed(1, "hook-a", "HTTP 404", NOW + 2)
    store.mark_retry(1, "hook-a", NOW + 9, "late", NOW + 3)  # a finished delivery stays so
    rows = {row.hook: row for row in store.deliveries()}
    assert rows["hook-a"].state is DeliveryState.FAILED and rows["hook-a"].attempts == 2
    assert rows["hook-a"].last_error == "HTTP 404"
    assert rows["hook-b"].state is DeliveryState.DELIVERED
    assert store.next_due_at() is None


def test_prune_keeps_active_runs_and_pending_deliveries() -> None:
    store = DirectiveStore(":memory:")
    for g in range(1, 11):
        run = "active" if g == 1 else f"ended-{g}"
        store.add(directive(1, g, run_key=run), ["hook"] if g == 2 else [])
    pruned, emptied = store.prune(keep_runs=["active"], max_directives=3)
    # global 1 belongs to an active run, global 2 still has a pending delivery
    assert pruned == 5 and sorted(emptied) == [f"ended-{g}" for g in range(3, 8)]
    assert [d.global_seq for d in store.list_after(0, 100)] == [1, 2, 8, 9, 10]


def test_unusable_state_dir_is_reported(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RuntimeError, match="state_dir"):
        DirectiveStore(str(blocker / "sub"))
