"""Directive persistence: the directives themselves, acks, and the webhook delivery outbox.

A SQLite file of its own (``state_dir/directives.sqlite3``) with its own connections, so a
directive write never waits behind the runs database's large activity flushes: the directive
path has a latency target (receipt → SSE p99 ≤ 5 ms), the activity path has throughput.

Theory of operation
-------------------
* ``directives`` is the fired-rule log as well: ``UNIQUE(run_id, dedup_key)`` means a decision
  can never be stored twice, and :meth:`DirectiveStore.fired_records` is what the rule engine
  reloads after a restart so it neither loses nor repeats a decision.
* Numbers (``seq``, ``global_seq``) are allocated in memory by the outbox before the insert; the
  store only checks them (``UNIQUE(run_id, seq)``, ``global_seq`` primary key).
* A row is the columns the queries read and the rest of the record as MessagePack (schema 2;
  a version 1 file is migrated when opened, its rows' JSON text read as it was); a wind_down's
  ``grace`` column (schema 4) is the grace it announced, which the engine goes on with after a
  restart. A batch goes in
  as one multi-row statement: ``executemany`` would run a statement, and hand the GIL back and
  forth, per row.
* ``deliveries`` is the persisted webhook outbox: one row per (directive, hook), inserted in the
  same transaction as its directive, so "stored" always includes "will be sent". Its state
  machine is pending → delivered | failed, with ``attempts`` and ``next_attempt_at`` while
  pending.
* Two connections on a file database (WAL: readers never block the writer): the writer is used
  from the outbox's single store lane, the reader from the stream hub's reader thread. An
  in-memory database has one connection for both (tests).
* ``run_snapshots`` holds, per run, the run's snapshot (the runs database's row) as it was when
  its latest directive was decided, written in the same transaction as the directive: the runs
  database is flushed every ``state_flush_interval``, so after a crash this is what keeps a run
  a stored directive speaks of, and the terminal state it decided (:meth:`DirectiveStore.
  run_snapshots`, read at the start). Rows are removed once a flush of the runs database has
  stored a newer snapshot of their run (:meth:`DirectiveStore.forget_snapshots`), so the table
  holds the runs decided on since the last flush.
* WAL checkpoints are taken off the write path: SQLite's automatic checkpoint runs inside the
  commit that crosses the threshold and fsyncs, which made ~1% of directive writes take
  several milliseconds. The writer has autocheckpoint off; the outbox calls
  :meth:`DirectiveStore.checkpoint` (a third connection, PASSIVE: it never blocks the writer)
  from another thread once a second.

Synchronous: callers run it on worker threads.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from watchdog.core.directives.model import Directive
from watchdog.core.rules.decision import Action
from watchdog.core.rules.engine import FiredRecord
from watchdog.core.rules.model import Grace
from watchdog.core.runs.terminal import TerminalState
from watchdog.shell.state.store import (
    ROWS_PER_STATEMENT,
    NewerSchema,
    StateFileUnreadable,
    codecs,
    encode_json,
    execute_rows,
    rows_statement,
    unreadable_file,
)

SCHEMA_VERSION = 4
DB_FILE = "directives.sqlite3"
HELD = "directives, acks and webhook deliveries"  # what the file holds
MEMORY = ":memory:"
MAX_DIRECTIVES_STORED = 100_000  # oldest directives of ended runs beyond this are pruned (the
# default; the sidecar prunes to state_max_ended_runs)
MAX_ERROR_CHARS = 500  # last_error kept per delivery
_IN_CHUNK = 500  # run ids per "IN (...)" query (SQLite's variable limit is 32766; stay small)
# the writer's page cache (SQLite's default is 2 MiB): the two unique indexes take a directive
# at a random place each, and a cache that holds them writes a batch without reading pages back
CACHE_KIB = 8192

_DIRECTIVES_TABLE = """
CREATE TABLE IF NOT EXISTS directives (
    global_seq INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    rule TEXT NOT NULL,
    action TEXT NOT NULL,
    dedup_key TEXT NOT NULL,
    tool_calls_at INTEGER NOT NULL,
    created_at REAL NOT NULL,
    terminal_state TEXT,
    data BLOB NOT NULL,
    grace TEXT,
    UNIQUE (run_id, dedup_key),
    UNIQUE (run_id, seq)
);
"""

# version 2's (and 3's) table, as migration 2 makes it: version 4 adds its grace column
_DIRECTIVES_TABLE_V2 = _DIRECTIVES_TABLE.replace("    grace TEXT,\n", "")

# (a rowid table: a snapshot is a few KiB, more than a WITHOUT ROWID table's row should be)
_SNAPSHOTS_TABLE = """
CREATE TABLE IF NOT EXISTS run_snapshots (
    run_id TEXT PRIMARY KEY,
    global_seq INTEGER NOT NULL,
    data TEXT NOT NULL
);
"""

_SCHEMA = _DIRECTIVES_TABLE + _SNAPSHOTS_TABLE + """
CREATE TABLE IF NOT EXISTS acks (
    run_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deliveries (
    global_seq INTEGER NOT NULL,
    hook TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    enqueued_at REAL NOT NULL,
    next_attempt_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    last_error TEXT,
    PRIMARY KEY (global_seq, hook)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries (state, next_attempt_at);
"""

# version -> the statements that bring a file of the version before it up to it. 2: the record
# as MessagePack, the columns the queries read only (the id, made of global_seq, is no longer a
# unique index of its own; terminal_state, which fired_records read out of the JSON, is one);
# version 1's rows keep their JSON text, which reads as it did. 3: the runs' snapshots as their
# latest directives were decided. 4: a wind_down's grace as it announced it (JSON: what
# fired_records read to go on with it after a restart), read out of the stored records.
_MIGRATIONS: dict[int, str] = {
    2: "BEGIN;\nALTER TABLE directives RENAME TO directives_v1;\n" + _DIRECTIVES_TABLE_V2 + """
INSERT INTO directives (global_seq, run_id, seq, rule, action, dedup_key, tool_calls_at,
                        created_at, terminal_state, data)
    SELECT global_seq, run_id, seq, rule, action, dedup_key, tool_calls_at, created_at,
           CASE WHEN json_valid(data) THEN json_extract(data, '$.terminal_state') END, data
    FROM directives_v1;
DROP TABLE directives_v1;
""",
    3: "BEGIN;\n" + _SNAPSHOTS_TABLE,
    4: "BEGIN;\nALTER TABLE directives ADD COLUMN grace TEXT;\n",
}


def _migrated_terminal_states(db: sqlite3.Connection) -> None:
    """The terminal states of version 1 rows SQLite cannot read as JSON (an Infinity or NaN the
    stdlib wrote), read by the stdlib (within the migration's transaction)."""
    rows = db.execute("SELECT global_seq, data FROM directives WHERE typeof(data) = 'text' "
                      "AND NOT json_valid(data)").fetchall()
    for global_seq, data in rows:
        try:
            terminal = json.loads(data).get("terminal_state")
        except (ValueError, AttributeError):  # unreadable as it was: listed as it was
            continue
        db.execute("UPDATE directives SET terminal_state=? WHERE global_seq=?",
                   (terminal, global_seq))


def _migrated_graces(db: sqlite3.Connection) -> None:
    """The graces the stored wind_downs announced, read out of their records (within the
    migration's transaction): MessagePack (version 2 on), or JSON text (version 1's rows, and
    the rare record MessagePack cannot hold). A record from before directives carried their
    grace keeps none (NULL: its rule's is taken); one that cannot be read, likewise."""
    rows = db.execute("SELECT global_seq, data FROM directives WHERE action=?",
                      (Action.WIND_DOWN.value,)).fetchall()
    graces: list[tuple[str, int]] = []
    for global_seq, data in rows:
        try:
            record = codecs().unpacker.decode(data) if isinstance(data, bytes) \
                else json.loads(data)
        except (ValueError, TypeError, RecursionError):
            continue
        if isinstance(record, dict) and "grace" in record:
            graces.append((grace_column(record["grace"], Action.WIND_DOWN.value) or "{}",
                           global_seq))
    db.executemany("UPDATE directives SET grace=? WHERE global_seq=?", graces)


def grace_column(grace: object, action: str) -> str | None:
    """What a directive's ``grace`` column holds: a wind_down's grace as it announced it (JSON;
    ``{}`` when it announced none), NULL for other actions."""
    if action != Action.WIND_DOWN.value:
        return None
    return encode_json(Grace.announced(grace).describe() if isinstance(grace, dict) else {})


def _migrate(db: sqlite3.Connection, version: int) -> None:
    """Bring a file of ``version`` up to :data:`SCHEMA_VERSION`, a version per transaction."""
    for step in range(version + 1, SCHEMA_VERSION + 1):
        try:
            db.executescript(_MIGRATIONS[step])  # begins the transaction it leaves open
            if step == 2:
                _migrated_terminal_states(db)
            elif step == 4:
                _migrated_graces(db)
            db.execute(f"PRAGMA user_version={step}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise


class AddResult(StrEnum):
    STORED = "stored"
    DUPLICATE = "duplicate"  # this (run_id, dedup_key) is already stored: the decision was made
    CONFLICT = "conflict"  # its id, seq or global_seq is taken (two processes on one state dir?)


class DeliveryState(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One pending webhook delivery, with its directive."""

    directive: Directive
    hook: str
    attempts: int  # made so far
    enqueued_at: float


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    """A delivery's bookkeeping (inspection and tests)."""

    global_seq: int
    hook: str
    state: DeliveryState
    attempts: int
    next_attempt_at: float
    last_error: str | None


class DirectiveStoreError(RuntimeError):
    """The directive database cannot be used (permissions, newer schema, corrupt file)."""


class _Connection:
    """A SQLite connection and the lock that serialises its use across threads."""

    def __init__(self, target: str) -> None:
        self.db = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            self.db.execute("BEGIN")
            try:
                yield self.db
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise


_INSERT_HEAD = ("INSERT INTO directives (global_seq, run_id, seq, rule, action, dedup_key, "
                "tool_calls_at, created_at, terminal_state, grace, data)")
_INSERT_TAIL = "ON CONFLICT (run_id, dedup_key) DO NOTHING"
_INSERT = f"{_INSERT_HEAD} VALUES (?,?,?,?,?,?,?,?,?,?,?) {_INSERT_TAIL}"
_INSERT_DELIVERIES = ("INSERT OR IGNORE INTO deliveries (global_seq, hook, state, attempts, "
                      "enqueued_at, next_attempt_at, updated_at)")
# the columns a directive's row has, in this order, before its data: what the data leaves out
_COLUMNS = ("global_seq", "run_id", "seq", "rule", "action", "dedup_key", "tool_calls_at",
            "created_at", "terminal_state")
_SELECT = f"SELECT {', '.join(_COLUMNS)}, data FROM directives"

# (the columns, the grace column: fired_records' alone, the record has it too; then the data)
_Row = tuple[int, str, int, str, str, str, int, float, str | None, str | None, bytes | str]
RunSnapshot = tuple[str, int, str]  # (run_id, global_seq of its latest directive, snapshot)
_UPSERT_SNAPSHOT_HEAD = "INSERT INTO run_snapshots (run_id, global_seq, data)"
_UPSERT_SNAPSHOT_TAIL = ("ON CONFLICT (run_id) DO UPDATE SET global_seq=excluded.global_seq, "
                         "data=excluded.data WHERE excluded.global_seq > global_seq")


def _row(directive: Directive) -> _Row:
    """The directive's row: the columns, then the rest of its record as MessagePack (which
    keeps Infinity and NaN as they are); a record MessagePack cannot hold (an int beyond 64
    bits, a lone surrogate) is stored whole as JSON text, as version 1 stored every record."""
    record = directive.to_record()
    columns = tuple(record.pop(name) for name in _COLUMNS)
    try:
        data: bytes | str = codecs().packer.encode(record)
    except (TypeError, ValueError, OverflowError):
        data = encode_json({**dict(zip(_COLUMNS, columns, strict=True)), **record})
    return (*columns, grace_column(directive.grace, directive.action), data)


def _directive(row: Sequence[Any]) -> Directive:
    """A directive from its row (as :data:`_SELECT` reads it): version 2's MessagePack with the
    columns, or a whole record as JSON text (version 1's rows, and the rare record
    MessagePack cannot hold)."""
    data = row[-1]
    if isinstance(data, bytes):
        record = codecs().unpacker.decode(data)
        record.update(zip(_COLUMNS, row, strict=False))
    else:
        record = json.loads(data)
    return Directive.from_record(record)


def _grace(column: str | None) -> Grace | None:
    """The grace a ``grace`` column holds (None: none stored, or one that cannot be read)."""
    if column is None:
        return None
    try:
        described = json.loads(column)
    except ValueError:
        return None
    return Grace.announced(described) if isinstance(described, dict) else None


def _add_one(db: sqlite3.Connection, row: _Row) -> AddResult:
    try:
        cursor = db.execute(_INSERT, row)
    except sqlite3.IntegrityError:  # a number is taken: only the statement fails
        return AddResult.CONFLICT
    return AddResult.STORED if cursor.rowcount == 1 else AddResult.DUPLICATE


class DirectiveStore:
    def __init__(self, state_dir: str) -> None:
        if state_dir == MEMORY:
            target = MEMORY
            self.path: Path | None = None
        else:
            directory = Path(state_dir)
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise DirectiveStoreError(f"state_dir {state_dir!r}: {exc.strerror}") from None
            self.path = directory / DB_FILE
            target = str(self.path)
        self._checkpointer: _Connection | None = None
        opened: list[_Connection] = []
        try:
            self._writer = _Connection(target)
            opened.append(self._writer)
            db = self._writer.db
            # read before anything is written: a file that is no database, or a damaged one,
            # is refused as it is (StateFileUnreadable)
            version = db.execute("PRAGMA user_version").fetchone()[0]
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            if version > SCHEMA_VERSION:
                raise NewerSchema(target, version, SCHEMA_VERSION)
            db.execute(f"PRAGMA cache_size={-CACHE_KIB}")
            if version == 0:
                db.executescript(_SCHEMA)
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            else:
                _migrate(db, version)
            self._reader = self._writer if target == MEMORY else _Connection(target)
            opened.append(self._reader)
            # the writer's total_changes when the log was last copied whole (-1: not yet)
            self._copied_changes = -1
            if target != MEMORY:
                self._reader.db.execute("PRAGMA query_only=ON")
                db.execute("PRAGMA wal_autocheckpoint=0")
                self._checkpointer = _Connection(target)
                opened.append(self._checkpointer)
                # what the schema (or a process before) left in the log, copied now, before
                # anything else uses the store: the checkpoints then skip while nothing is
                # written, and the checkpointer's connection stays unused (its page cache,
                # some 0.1 MB) until something is
                self._copied(db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone(),
                             db.total_changes)
        except BaseException as exc:
            for connection in {id(c): c for c in opened}.values():
                connection.db.close()
            if not isinstance(exc, sqlite3.Error):
                raise
            if unreadable_file(exc) and target != MEMORY:
                raise StateFileUnreadable(target, HELD, exc) from None
            raise DirectiveStoreError(f"state_dir {state_dir!r}: {exc}") from None

    def close(self) -> None:
        self.checkpoint(truncate=True)
        connections = (self._checkpointer, self._reader, self._writer)
        for connection in {id(c): c for c in connections if c is not None}.values():
            with connection.lock:
                connection.db.close()

    def checkpoint(self, truncate: bool = False) -> None:
        """Copy the write-ahead log into the database (PASSIVE: skips what readers still use
        and never blocks the writer; TRUNCATE on close also empties the log file)."""
        if self._checkpointer is None:
            return
        with self._writer.lock:  # (read before: a write after it is copied at the next one)
            changes = self._writer.db.total_changes
        if not truncate and changes == self._copied_changes:
            return  # nothing written since the log was last copied whole
        mode = "TRUNCATE" if truncate else "PASSIVE"
        # busy: the next round will do it
        with self._checkpointer.lock, contextlib.suppress(sqlite3.OperationalError):
            self._copied(self._checkpointer.db.execute(f"PRAGMA wal_checkpoint({mode})")
                         .fetchone(), changes)

    def _copied(self, result: tuple[int, int, int], changes: int) -> None:
        """Note a checkpoint's ``(busy, frames in the log, frames copied)``: the log copied
        whole, up to the writer's ``changes``."""
        busy, frames, copied = result
        if not busy and frames == copied:
            self._copied_changes = changes

    # -- directives: writes (the store lane) ------------------------------------------------------

    def add(self, directive: Directive, hooks: Sequence[str] = (), now: float | None = None
            ) -> AddResult:
        """Store one directive (and its webhook deliveries)."""
        return self.add_many([(directive, hooks)], now)[0]

    def add_many(self, items: Sequence[tuple[Directive, Sequence[str]]],
                 now: float | None = None, runs: Sequence[RunSnapshot] = ()
                 ) -> list[AddResult]:
        """Store directives and their webhook deliveries, and the snapshots of ``runs`` (the
        runs decided on, each with the ``global_seq`` of its latest directive here), in one
        transaction. Anything but ``STORED`` means the directive was not stored and must not be
        published. Deliveries are due at ``now`` (default: the directive's creation). The batch
        goes in as one statement (:func:`~watchdog.shell.state.store.execute_rows`); only when
        some of it cannot be stored (a duplicate, a taken number) is it taken back and stored
        one by one, to say which."""
        rows = [_row(directive) for directive, _hooks in items]
        if not rows:
            return []
        if not any(hooks for _directive, hooks in items):
            results = self._add_alone(rows, runs)
            if results is not None:
                return results
        with self._writer.transaction() as db:
            results = None
            if len(rows) > 1:
                try:
                    if execute_rows(db, _INSERT_HEAD, rows, _INSERT_TAIL) == len(rows):
                        results = [AddResult.STORED] * len(rows)
                except sqlite3.IntegrityError:
                    pass
                if results is None:  # take it back and tell the rows apart
                    db.execute("ROLLBACK")
                    db.execute("BEGIN")
            if results is None:
                results = [_add_one(db, row) for row in rows]
            if runs:  # (a directive refused as a clash stores no snapshot)
                clashed = {directive.global_seq for (directive, _hooks), result
                           in zip(items, results, strict=True) if result is AddResult.CONFLICT}
                execute_rows(db, _UPSERT_SNAPSHOT_HEAD,
                             [run for run in runs if run[1] not in clashed],
                             _UPSERT_SNAPSHOT_TAIL)
            deliveries = [
                (directive.global_seq, hook, DeliveryState.PENDING.value, 0, due, due, due)
                for (directive, hooks), result in zip(items, results, strict=True)
                if hooks and result is AddResult.STORED
                for due in (directive.created_at if now is None else now,) for hook in hooks]
            execute_rows(db, _INSERT_DELIVERIES, deliveries)
        return results

    def _add_alone(self, rows: list[_Row], runs: Sequence[RunSnapshot] = ()
                   ) -> list[AddResult] | None:
        """Directives without deliveries stored by one statement (the common case: one SQLite
        call, its own transaction; with the runs' snapshots, one transaction of the two), or
        None when a number is taken (nothing stored: the caller tells the rows apart). Rows
        skipped as duplicates are told apart from the stored ones by their ``global_seq``: a
        taken one would have failed the statement."""
        if len(rows) > ROWS_PER_STATEMENT:  # more than one statement: not one transaction
            return None
        with self._writer.lock:
            db = self._writer.db
            if runs:
                db.execute("BEGIN")
            try:
                stored = db.execute(rows_statement(_INSERT_HEAD, len(rows[0]), len(rows),
                                                   _INSERT_TAIL),
                                    [value for row in rows for value in row]).rowcount
                if runs:
                    execute_rows(db, _UPSERT_SNAPSHOT_HEAD, runs, _UPSERT_SNAPSHOT_TAIL)
                    db.execute("COMMIT")
            except sqlite3.IntegrityError:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                return None
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            if stored == len(rows):
                return [AddResult.STORED] * len(rows)
            numbers = [row[0] for row in rows]
            found = {seq for (seq,) in db.execute(
                f"SELECT global_seq FROM directives WHERE global_seq IN "
                f"({','.join('?' * len(numbers))})", numbers)}
        return [AddResult.STORED if row[0] in found else AddResult.DUPLICATE for row in rows]

    def forget_snapshots(self, up_to: int) -> int:
        """Remove the run snapshots written with directives up to ``global_seq`` ``up_to``: a
        flush of the runs database has stored newer ones. Returns how many went."""
        with self._writer.transaction() as db:
            return db.execute("DELETE FROM run_snapshots WHERE global_seq <= ?",
                              (up_to,)).rowcount

    def ack(self, run_id: str, seq: int, now: float) -> int:
        """Record that the agent has seen ``seq``; acks only move forward. Returns the acked seq."""
        with self._writer.transaction() as db:
            db.execute("INSERT INTO acks (run_id, seq, at) VALUES (?,?,?) ON CONFLICT (run_id) "
                       "DO UPDATE SET seq=excluded.seq, at=excluded.at WHERE excluded.seq > seq",
                       (run_id, seq, now))
            row = db.execute("SELECT seq FROM acks WHERE run_id=?", (run_id,)).fetchone()
        return int(row[0])

    def prune(self, keep_runs: Iterable[str] = (),
              max_directives: int = MAX_DIRECTIVES_STORED) -> tuple[int, list[str]]:
        """Delete the oldest directives beyond ``max_directives``, except those of ``keep_runs``
        (active runs: the rule engine needs them after a restart) and those with a webhook
        delivery still pending. Returns how many went and the runs left with none."""
        with self._writer.transaction() as db:
            row = db.execute("SELECT global_seq FROM directives ORDER BY global_seq DESC "
                             "LIMIT 1 OFFSET ?", (max_directives,)).fetchone()
            if row is None:
                return 0, []
            db.execute("CREATE TEMP TABLE IF NOT EXISTS keep_runs (run_id TEXT PRIMARY KEY)")
            db.execute("DELETE FROM keep_runs")
            db.executemany("INSERT OR IGNORE INTO keep_runs VALUES (?)",
                           [(run,) for run in keep_runs])
            condition = ("global_seq <= ? AND run_id NOT IN (SELECT run_id FROM keep_runs) "
                         "AND global_seq NOT IN (SELECT global_seq FROM deliveries WHERE state=?)")
            args = (row[0], DeliveryState.PENDING.value)
            touched = [run for (run,) in db.execute(
                f"SELECT DISTINCT run_id FROM directives WHERE {condition}", args)]
            pruned = db.execute(f"DELETE FROM directives WHERE {condition}", args).rowcount
            db.execute("DELETE FROM deliveries WHERE global_seq NOT IN "
                       "(SELECT global_seq FROM directives)")
            db.execute("DELETE FROM acks WHERE run_id NOT IN (SELECT run_id FROM directives)")
            db.execute("DELETE FROM keep_runs")
            emptied = [run for run in touched if db.execute(
                "SELECT 1 FROM directives WHERE run_id=? LIMIT 1", (run,)).fetchone() is None]
        return pruned, emptied

    # -- directives: reads ------------------------------------------------------------------------

    def counters(self) -> tuple[int, dict[str, int]]:
        """The highest ``global_seq``, and the highest ``seq`` of every run (to continue from)."""
        with self._reader.lock:
            db = self._reader.db
            top = db.execute("SELECT COALESCE(MAX(global_seq), 0) FROM directives").fetchone()[0]
            rows = db.execute("SELECT run_id, MAX(seq) FROM directives GROUP BY run_id").fetchall()
        return int(top), {run: int(seq) for run, seq in rows}

    def max_seq(self) -> int:
        with self._reader.lock:
            row = self._reader.db.execute(
                "SELECT COALESCE(MAX(global_seq), 0) FROM directives").fetchone()
        return int(row[0])

    def latest_seq(self, run_id: str) -> int:
        with self._reader.lock:
            row = self._reader.db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM directives WHERE run_id=?",
                (run_id,)).fetchone()
        return int(row[0])

    def list_for_run(self, run_id: str, after_seq: int = 0, limit: int = 100) -> list[Directive]:
        """The run's directives with ``seq > after_seq``, oldest first."""
        with self._reader.lock:
            rows = self._reader.db.execute(
                f"{_SELECT} WHERE run_id=? AND seq>? ORDER BY seq LIMIT ?",
                (run_id, after_seq, limit)).fetchall()
        return [_directive(row) for row in rows]

    def newest_for_run(self, run_id: str, limit: int) -> tuple[list[Directive], int]:
        """The run's newest ``limit`` directives, oldest first, and how many older ones there
        are besides."""
        with self._reader.lock:
            db = self._reader.db
            rows = db.execute(f"{_SELECT} WHERE run_id=? ORDER BY seq DESC LIMIT ?",
                              (run_id, limit)).fetchall()
            total = db.execute("SELECT COUNT(*) FROM directives WHERE run_id=?",
                               (run_id,)).fetchone()[0]
        rows.reverse()
        return [_directive(row) for row in rows], int(total) - len(rows)

    def first_stop(self, run_id: str) -> Directive | None:
        """The run's first directive that decides how it ends (an abort, or a rule's terminal
        state), however many came after it: what its report says stopped it."""
        with self._reader.lock:
            row = self._reader.db.execute(
                f"{_SELECT} WHERE run_id=? AND (action=? OR terminal_state IS NOT NULL) "
                "ORDER BY seq LIMIT 1", (run_id, Action.ABORT.value)).fetchone()
        return None if row is None else _directive(row)

    def list_after(self, global_seq: int = 0, limit: int = 100) -> list[Directive]:
        """All runs' directives with ``global_seq`` above the given one, oldest first."""
        with self._reader.lock:
            rows = self._reader.db.execute(
                f"{_SELECT} WHERE global_seq>? ORDER BY global_seq LIMIT ?",
                (global_seq, limit)).fetchall()
        return [_directive(row) for row in rows]

    def directives_of(self, run_ids: Iterable[str]) -> list[Directive]:
        """These runs' directives, oldest first (across runs, as they were decided)."""
        rows: list[Any] = []
        runs = list(dict.fromkeys(run_ids))
        with self._reader.lock:
            db = self._reader.db
            for start in range(0, len(runs), _IN_CHUNK):
                chunk = runs[start:start + _IN_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows += db.execute(f"{_SELECT} WHERE run_id IN ({marks})", chunk).fetchall()
        directives = [_directive(row) for row in rows]
        directives.sort(key=lambda directive: directive.global_seq)
        return directives

    def fired_records(self, run_ids: Iterable[str] | None = None) -> list[FiredRecord]:
        """What the rule engine fired for these runs (all runs when None), oldest first."""
        columns = ("SELECT global_seq, run_id, rule, dedup_key, action, created_at, "
                   "tool_calls_at, terminal_state, grace FROM directives")
        rows: list[tuple[int, str, str, str, str, float, int, str | None, str | None]] = []
        with self._reader.lock:
            db = self._reader.db
            if run_ids is None:
                rows = db.execute(columns + " ORDER BY global_seq").fetchall()
            else:
                runs = list(dict.fromkeys(run_ids))
                for start in range(0, len(runs), _IN_CHUNK):
                    chunk = runs[start:start + _IN_CHUNK]
                    marks = ",".join("?" * len(chunk))
                    rows += db.execute(f"{columns} WHERE run_id IN ({marks})", chunk).fetchall()
                rows.sort()
        return [FiredRecord(run, rule, key, Action(action), created_at, tool_calls_at,
                            TerminalState(terminal) if terminal else None, _grace(grace))
                for _seq, run, rule, key, action, created_at, tool_calls_at, terminal, grace
                in rows]

    def run_snapshots(self) -> list[tuple[str, str]]:
        """``(run_id, snapshot)`` of the runs decided on since the runs database was last
        flushed (the snapshot is the runs database's row text), oldest decision first."""
        with self._reader.lock:
            return self._reader.db.execute(
                "SELECT run_id, data FROM run_snapshots ORDER BY global_seq").fetchall()

    def acked(self, run_id: str) -> int:
        """The highest seq the agent acknowledged (0: none)."""
        with self._reader.lock:
            row = self._reader.db.execute("SELECT seq FROM acks WHERE run_id=?",
                                          (run_id,)).fetchone()
        return int(row[0]) if row else 0

    # -- webhook outbox (the store lane) ----------------------------------------------------------

    def enqueue(self, global_seq: int, hooks: Iterable[str], now: float) -> None:
        """Add deliveries for an already stored directive (normally :meth:`add_many` does it)."""
        with self._writer.transaction() as db:
            db.executemany(
                f"{_INSERT_DELIVERIES} VALUES (?,?,?,0,?,?,?)",
                [(global_seq, hook, DeliveryState.PENDING.value, now, now, now)
                 for hook in hooks])

    def due(self, now: float, limit: int = 100, exclude: Iterable[tuple[int, str]] = (),
            hooks_full: Sequence[str] = ()) -> list[Delivery]:
        """Pending deliveries whose time has come, earliest first, minus ``exclude`` (those
        being attempted right now) and those of ``hooks_full`` (webhooks at their share of
        the attempts at once)."""
        skip = set(exclude)
        not_full = f" AND d.hook NOT IN ({', '.join('?' * len(hooks_full))})" if hooks_full \
            else ""
        with self._writer.lock:
            rows = self._writer.db.execute(
                f"SELECT d.hook, d.attempts, d.enqueued_at, "
                f"{', '.join(f'x.{name}' for name in _COLUMNS)}, x.data "
                f"FROM deliveries d JOIN directives x ON x.global_seq = d.global_seq "
                f"WHERE d.state=? AND d.next_attempt_at<=?{not_full} "
                f"ORDER BY d.next_attempt_at, d.global_seq LIMIT ?",
                (DeliveryState.PENDING.value, now, *hooks_full, limit + len(skip))).fetchall()
        due = [Delivery(_directive(row[3:]), row[0], row[1], row[2]) for row in rows
               if (row[3], row[0]) not in skip]
        return due[:limit]

    def next_due_at(self, exclude: Iterable[tuple[int, str]] = (),
                    hooks_full: Sequence[str] = ()) -> float | None:
        """When the earliest pending delivery not in ``exclude``, nor of ``hooks_full``, is
        due (None: none)."""
        skip = set(exclude)
        not_full = f" AND hook NOT IN ({', '.join('?' * len(hooks_full))})" if hooks_full \
            else ""
        with self._writer.lock:
            rows = self._writer.db.execute(
                f"SELECT global_seq, hook, next_attempt_at FROM deliveries WHERE state=?"
                f"{not_full} ORDER BY next_attempt_at LIMIT ?",
                (DeliveryState.PENDING.value, *hooks_full, len(skip) + 1)).fetchall()
        for global_seq, hook, next_at in rows:
            if (global_seq, hook) not in skip:
                return float(next_at)
        return None

    def mark_delivered(self, global_seq: int, hook: str, now: float) -> None:
        self._finish(global_seq, hook, DeliveryState.DELIVERED, now, None, now)

    def mark_retry(self, global_seq: int, hook: str, next_at: float, error: str,
                   now: float) -> None:
        self._finish(global_seq, hook, DeliveryState.PENDING, now, error, next_at)

    def mark_failed(self, global_seq: int, hook: str, error: str, now: float) -> None:
        self._finish(global_seq, hook, DeliveryState.FAILED, now, error, now)

    def _finish(self, global_seq: int, hook: str, state: DeliveryState, now: float,
                error: str | None, next_at: float) -> None:
        """Record one attempt's outcome; only a pending delivery moves."""
        with self._writer.transaction() as db:
            db.execute(
                "UPDATE deliveries SET state=?, attempts=attempts+1, next_attempt_at=?, "
                "updated_at=?, last_error=? WHERE global_seq=? AND hook=? AND state=?",
                (state.value, next_at, now, error[:MAX_ERROR_CHARS] if error else None,
                 global_seq, hook, DeliveryState.PENDING.value))

    def fail_unknown_hooks(self, known: Iterable[str], now: float) -> int:
        """Pending deliveries to hooks no longer configured will never be sent: fail them."""
        names = list(known)
        marks = ",".join("?" * len(names))
        where = f" AND hook NOT IN ({marks})" if names else ""
        with self._writer.transaction() as db:
            cursor = db.execute(
                f"UPDATE deliveries SET state=?, updated_at=?, "
                f"last_error='webhook no longer configured' WHERE state=?{where}",
                (DeliveryState.FAILED.value, now, DeliveryState.PENDING.value, *names))
        return cursor.rowcount

    def deliveries(self, global_seq: int | None = None) -> list[DeliveryRow]:
        sql = ("SELECT global_seq, hook, state, attempts, next_attempt_at, last_error "
               "FROM deliveries")
        args: tuple[int, ...] = ()
        if global_seq is not None:
            sql += " WHERE global_seq=?"
            args = (global_seq,)
        with self._reader.lock:
            rows = self._reader.db.execute(sql + " ORDER BY global_seq, hook", args).fetchall()
        return [DeliveryRow(seq, hook, DeliveryState(state), attempts, next_at, error)
                for seq, hook, state, attempts, next_at, error in rows]
