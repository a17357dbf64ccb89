"""Embedded SQLite persistence: run snapshots, activity logs and sessions, so a restart loses no
run and no session memory (directives have a file of their own:
:mod:`watchdog.shell.directives.store`).

The store is synchronous. Writes go through one connection, called from a single worker thread
(the service's store lane) in batches, one transaction each. Reads use a second connection:
in WAL mode readers never wait for a writer, so the API can read on the event loop while a large
flush is being committed. The activity log is a ring per run, stored as *chunks*: one row per run
per flush holding that flush's entries (a JSON array of arrays), not one row per span; chunks
whose newest ``seq`` falls more than ``activity_log_size`` behind the run's newest are deleted
in the same transaction. Sessions are one JSON row each (:meth:`SessionState.to_dict`); a
checkpoint is written synchronously (:meth:`Store.save_sessions`) before the API acknowledges it.

Schema versions: 1 had runs and activity; 2 adds sessions; 3 stores activity in chunks; 4 adds
the tracker state; 5 keeps the chunks in a rowid table (appended, indexed by run); 6 adds the
runs' ``session`` column (read out of their rows); 7 reads it with Python from the rows an older
build wrote with Infinity/NaN, which SQLite's JSON cannot read; 8 adds the span ids applied
(``applied_spans``: one chunk per flush, the ids it stored the counts of; the last
:data:`~watchdog.core.sync.MAX_RECENT_SPANS` kept), read back at a start after a crash; 9 numbers
them (``upto``: the ids stored up to and with each chunk, since the table began), so a flush
deletes the chunks past the bound by a range of an index rather than a scan. An older
file is migrated in place when it is opened (:data:`_MIGRATIONS`); a newer one is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.sync import MAX_RECENT_SPANS

if TYPE_CHECKING:
    import msgspec

SCHEMA_VERSION = 9
DB_FILE = "watchdog.sqlite3"
HELD = "runs, activity and sessions"  # what the file holds (to say what moving it aside drops)
OWNER_FILE = "watchdog.lock"  # held (flock) by the one sidecar that uses the state dir
MAX_ENDED_RUNS_STORED = 100_000  # oldest ended runs beyond this are pruned (state_max_ended_runs)
MAX_SESSIONS_STORED = 100_000  # least recently updated sessions beyond this are pruned
# chunks of span ids applied kept (one a flush), however few ids each holds: a redelivery
# comes within minutes of its first copy, not this many flushes (17 minutes at one a second)
MAX_APPLIED_CHUNKS = 1024
# the writer's page cache (SQLite's default is 2 MiB): a flush rewrites every changed run's row
# and index entries, scattered over the file; a cache that holds them reads none back
CACHE_KIB = 8192

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    ended INTEGER NOT NULL,
    updated REAL NOT NULL,
    data TEXT NOT NULL,
    session TEXT  -- the run's session (NULL: none): GET /v1/runs?session=
);
CREATE INDEX IF NOT EXISTS runs_by_state ON runs (ended, updated);
CREATE TABLE IF NOT EXISTS activity_chunks (
    run TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    UNIQUE (run, last_seq)
);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    updated REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_update ON sessions (updated);
-- what the run tracker held beyond its runs at a clean shutdown (one row, taken at the start)
CREATE TABLE IF NOT EXISTS tracker_state (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    data TEXT NOT NULL
);
-- the span ids each flush stored the counts of (a JSON array of [trace + span id, start, end]);
-- upto: the ids stored up to and with this chunk since the table began (it holds the ids
-- numbered upto - spans + 1 to upto)
CREATE TABLE IF NOT EXISTS applied_spans (
    seq INTEGER PRIMARY KEY,
    spans INTEGER NOT NULL,
    upto INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS applied_spans_upto ON applied_spans (upto);
"""

# version -> the statements that bring a file of the version before it up to it. One that
# cannot run twice (a column added, a table dropped) sets its version in its own transaction:
# a sidecar stopped after its COMMIT does not run it again at its next start (which failed)
_MIGRATIONS: dict[int, str] = {
    2: """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    updated REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_update ON sessions (updated);
""",
    3: """
BEGIN;
CREATE TABLE IF NOT EXISTS activity_chunks (
    run TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run, last_seq)
) WITHOUT ROWID;
INSERT OR REPLACE INTO activity_chunks (run, last_seq, data)
    SELECT run, MAX(seq), json_group_array(json_array(seq, at, kind, name, detail, result, error))
    FROM (SELECT * FROM activity ORDER BY run, seq) GROUP BY run;
DROP TABLE activity;
PRAGMA user_version=3;
COMMIT;
""",
    4: """
-- what the run tracker held beyond its runs at a clean shutdown (one row, taken at the start)
CREATE TABLE IF NOT EXISTS tracker_state (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    data TEXT NOT NULL
);
""",
    # chunks in a rowid table: appended in the order they are written, with a small index to
    # find a run's, rather than each ~0.5-3 KiB chunk put at its run's place among the others
    5: """
BEGIN;
ALTER TABLE activity_chunks RENAME TO activity_chunks_v4;
CREATE TABLE activity_chunks (
    run TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    UNIQUE (run, last_seq)
);
INSERT INTO activity_chunks (run, last_seq, data)
    SELECT run, last_seq, data FROM activity_chunks_v4;
DROP TABLE activity_chunks_v4;
COMMIT;
""",
    # the run's session beside its agent, for the listing's filter (GET /v1/runs?session=);
    # a row an older build wrote with Infinity/NaN is no JSON to SQLite: 7 reads its session
    6: """
BEGIN;
ALTER TABLE runs ADD COLUMN session TEXT;
UPDATE runs SET session = CASE WHEN json_valid(data) THEN json_extract(data, '$.session') END;
PRAGMA user_version=6;
COMMIT;
""",
    7: "",  # (in Python: _read_old_sessions)
    8: """
CREATE TABLE IF NOT EXISTS applied_spans (
    seq INTEGER PRIMARY KEY,
    spans INTEGER NOT NULL,
    data TEXT NOT NULL
);
""",
    9: """
BEGIN;
CREATE TABLE applied_spans_v9 (
    seq INTEGER PRIMARY KEY,
    spans INTEGER NOT NULL,
    upto INTEGER NOT NULL,
    data TEXT NOT NULL
);
INSERT INTO applied_spans_v9 (seq, spans, upto, data)
    SELECT seq, spans, SUM(spans) OVER (ORDER BY seq), data FROM applied_spans;
DROP TABLE applied_spans;
ALTER TABLE applied_spans_v9 RENAME TO applied_spans;
CREATE INDEX applied_spans_upto ON applied_spans (upto);
PRAGMA user_version=9;
COMMIT;
""",
}


def _read_old_sessions(db: sqlite3.Connection) -> None:
    """Schema 7: the session of each run row an older build wrote with Infinity/NaN (no JSON
    to SQLite, so 6 left its ``session`` empty), read with Python, which reads such rows; an
    ended run is never written again, and would never be listed under its session."""
    db.execute("BEGIN")
    try:
        found: list[tuple[str, str]] = []
        for key, data in db.execute("SELECT key, data FROM runs WHERE session IS NULL "
                                    "AND NOT json_valid(data)"):
            try:
                row = decode(data)
            except UNREADABLE:  # (damaged: skipped at the restore, as before)
                continue
            session = row.get("session") if isinstance(row, dict) else None
            if isinstance(session, str):
                found.append((session, key))
        for start in range(0, len(found), ROWS_PER_STATEMENT):
            db.executemany("UPDATE runs SET session=? WHERE key=?",
                           found[start:start + ROWS_PER_STATEMENT])
        db.execute("PRAGMA user_version=7")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


_PYTHON_MIGRATIONS = {7: _read_old_sessions}


# Rows go into SQLite a statement per many rows: ``executemany`` runs its statement once per
# row, and each run lets go of the GIL and takes it back, which on a busy event loop costs a
# forced switch between threads every time (and the loop its turn) — CPU for nothing.
MAX_VARIABLES = 32_766  # SQLite's limit on a statement's parameters (3.32+)
ROWS_PER_STATEMENT = 256  # at most: one statement's text is cached per count of rows up to it


@functools.lru_cache(maxsize=1024)
def rows_statement(head: str, width: int, rows: int, tail: str = "") -> str:
    """``head VALUES (?,…),(?,…)… tail`` for ``rows`` rows of ``width`` values."""
    one = "(" + ",".join("?" * width) + ")"
    return f"{head} VALUES {','.join([one] * rows)} {tail}".rstrip()


def execute_rows(db: sqlite3.Connection, head: str, rows: Sequence[Sequence[Any]],
                 tail: str = "") -> int:
    """Run ``head VALUES … tail`` over ``rows`` (all of one width) in as few statements as
    SQLite takes; returns how many rows they changed."""
    if not rows:
        return 0
    width = len(rows[0])
    step = max(1, min(ROWS_PER_STATEMENT, MAX_VARIABLES // width))
    changed = 0
    for start in range(0, len(rows), step):
        part = rows[start:start + step]
        changed += db.execute(rows_statement(head, width, len(part), tail),
                              [value for row in part for value in row]).rowcount
    return changed


class StoreError(RuntimeError):
    """The state directory cannot be used (permissions, a newer schema, a corrupt file)."""


class NewerSchema(StoreError):
    """A state file was written by a newer agent-watchdog than this one: it is left as it is,
    for that build (or a newer one) to run on; nothing is lost."""

    def __init__(self, path: str | Path, version: int, known: int) -> None:
        super().__init__(
            f"{path} has schema version {version}; this build knows {known}: a newer "
            f"agent-watchdog wrote it. Run that build (or a newer one) on this state_dir; the "
            f"files are left as they are, with everything they hold")


class StateFileUnreadable(StoreError):
    """A state file is not a SQLite database, or a damaged one: nothing can start on it. It is
    left as it is, for the operator to move aside (a new one is made in its place) or recover
    from; the message says which file and how."""

    def __init__(self, path: str | Path, what: str, error: BaseException) -> None:
        self.path = str(path)
        super().__init__(
            f"{self.path} cannot be read ({error}); it is left as it is. To start afresh "
            f"without the {what} it holds, move it aside, with its -wal and -shm files if "
            f"there are any (mv {self.path} {self.path}.damaged), and start again: a new one is "
            f"made; keep the moved file to recover what it can give (sqlite3 "
            f"{self.path}.damaged .recover)")


# SQLite's primary result codes of a file that is no database, or a damaged one
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


def unreadable_file(error: BaseException) -> bool:
    """Whether a SQLite error says its file is no database, or a damaged one (not a file that
    cannot be opened or written: those are the directory's or the disk's)."""
    code = getattr(error, "sqlite_errorcode", None)
    return isinstance(error, sqlite3.DatabaseError) and code is not None and (
        code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB))


class StoreWriteError(StoreError):
    """A write failed (disk full, read-only file system, I/O error); nothing of it is stored.
    Callers keep what they tried to write and try again later."""


# Snapshots and activity are encoded with msgspec (~4-10x the stdlib's speed on these rows, see
# docs/performance.md) into the same plain JSON text; the stdlib takes over wherever the two would
# differ, so what is stored, refused or raised stays what json.dumps does.
class Codecs:
    """msgspec's encoders and decoders (:func:`codecs`): made at the first row encoded or read,
    so a sidecar that has stored nothing yet idles without msgspec (docs/performance.md,
    Footprint)."""

    __slots__ = ("decode_error", "json_decoder", "json_encoder", "packer", "unpacker")

    def __init__(self) -> None:
        import msgspec

        self.json_encoder: msgspec.json.Encoder = msgspec.json.Encoder()
        self.json_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder()
        self.packer: msgspec.msgpack.Encoder = msgspec.msgpack.Encoder()
        # (a directive's record: watchdog.shell.directives.store)
        self.unpacker = msgspec.msgpack.Decoder(dict[str, Any])
        self.decode_error: type[msgspec.DecodeError] = msgspec.DecodeError


@functools.cache
def codecs() -> Codecs:
    return Codecs()


# msgspec writes Infinity and NaN as null, silently. Its MessagePack form of the same row keeps
# them: a float is 0xcb and its IEEE 754 bits, big-endian, and an exponent of all ones (the first
# byte's low 7 bits, the second's high 4) is an infinity or a NaN. Those bytes can also sit inside
# a 64-bit integer; such a row merely takes the stdlib's path.
_NON_FINITE = re.compile(rb"\xcb[\x7f\xff][\xf0-\xff]")
# what msgspec raises where the stdlib may still encode (a lone surrogate, an int beyond 64 bits
# in MessagePack, a None or bool dict key) or raise in its own way
_FAST_REFUSED = (TypeError, ValueError, OverflowError, RecursionError)


def _fast_json(value: object) -> str | None:
    """``value`` as compact JSON text by msgspec, or None when the stdlib must encode it."""
    fast = codecs()
    try:
        if _NON_FINITE.search(fast.packer.encode(value)) is None:
            return fast.json_encoder.encode(value).decode()
    except _FAST_REFUSED:
        pass
    return None


def encode_json(value: object) -> str:
    """``value`` as compact JSON text that reads back as ``json.dumps`` of it does (Infinity
    and NaN too: the stdlib writes those), made by msgspec wherever the two would read back
    alike: directive records (:mod:`watchdog.shell.directives.store`)."""
    text = _fast_json(value)
    if text is None:
        text = json.dumps(value, separators=(",", ":"))
    return text


def encode_row(row: dict[str, Any]) -> str:
    """A run or session snapshot as compact JSON text. Infinity/NaN are not JSON: a row holding
    one raises ValueError (``json.dumps(allow_nan=False)``) and is refused, not stored to poison
    every later read (and restart) of it; a value JSON cannot hold raises TypeError.
    (msgspec would store an enum, set, date or dataclass that the stdlib refuses; snapshots are
    built of JSON types only: tests/test_encoding.py.)"""
    text = _fast_json(row)
    if text is None:
        text = json.dumps(row, separators=(",", ":"), allow_nan=False)
    return text


def encode_items(items: list[tuple[Any, ...]]) -> str:
    """Activity entries (without their run key) as one JSON array of arrays. An entry's only
    number is its span's end time (finite); nothing here may fail the write."""
    text = _fast_json(items)
    if text is None:
        text = json.dumps(items, separators=(",", ":"), ensure_ascii=False)
    return text


# what reading a damaged row raises: not JSON, or nested past the stdlib's recursion limit
UNREADABLE = (ValueError, RecursionError)


def decode(text: str) -> Any:
    """A stored row. Rows are strict JSON but for ones older builds wrote with Infinity/NaN,
    which the stdlib reads (as it always did)."""
    fast = codecs()
    try:
        return fast.json_decoder.decode(text)
    except fast.decode_error:
        return json.loads(text)


class Rows:
    """One write's rows, encoded (JSON) before the store lane gets them: a caller on the event
    loop adds them a few at a time between yields, and the lane only runs SQL."""

    __slots__ = ("activity_log_size", "applied", "chunks", "gone", "refused", "runs",
                 "sessions", "trims")

    def __init__(self, activity_log_size: int) -> None:
        self.activity_log_size = activity_log_size
        self.runs: list[tuple[str, str, int, float, str, str | None]] = []
        self.chunks: list[tuple[str, int, str]] = []  # one row per run: its new entries
        self.trims: list[tuple[str, int]] = []
        self.sessions: list[tuple[str, float, str]] = []
        self.refused: list[str] = []  # runs whose snapshot cannot be encoded (not written)
        self.gone: list[tuple[str]] = []  # runs to delete, with their activity (after it)
        self.applied: list[tuple[int, str]] = []  # span ids applied: (how many, JSON)

    def __bool__(self) -> bool:
        return bool(self.runs or self.chunks or self.sessions or self.gone or self.applied)

    def add_run(self, r: dict[str, Any]) -> None:
        try:
            session = r.get("session")
            self.runs.append((r["key"], r.get("agent") or r.get("service") or "unknown",
                              int(bool(r["ended"])), float(r["last_seen"]), encode_row(r),
                              session if isinstance(session, str) else None))
        except (TypeError, ValueError, OverflowError):
            self.refused.append(str(r.get("key")))

    def add_activity(self, by_run: Iterable[tuple[str, Sequence[ActivityEntry]]]) -> None:
        """Each run's new entries (oldest first) as one row: a row per span was the store's
        hottest write."""
        size = self.activity_log_size
        for run, entries in by_run:
            newest = max(entry.seq for entry in entries)
            self.chunks.append((run, newest, encode_items([entry[1:] for entry in entries])))
            if newest > size:
                self.trims.append((run, newest - size))

    def add_sessions(self, sessions: Iterable[dict[str, Any]]) -> None:
        self.sessions.extend(_session_rows(sessions))

    def add_applied(self, spans: Sequence[tuple[str, int, int]]) -> None:
        """Span ids applied (:meth:`~watchdog.core.sync.RecentSpans.take_new`): one chunk,
        JSON by msgspec alone (a text and two integers each: nothing the stdlib writes
        otherwise)."""
        if spans:
            self.applied.append((len(spans), codecs().json_encoder.encode(spans).decode()))


def _store_applied(db: sqlite3.Connection, chunks: Sequence[tuple[int, str]]) -> None:
    """Append the chunks of span ids a flush applied (within the caller's transaction), and keep
    the newest ``MAX_RECENT_SPANS`` ids exactly, in the newest ``MAX_APPLIED_CHUNKS`` chunks at
    most: the older chunks go by a range of ``upto`` (its index) and of ``seq`` (the table's
    key), and the oldest chunk left keeps only its ids within the bound (rewritten)."""
    top = db.execute("SELECT MAX(upto) FROM applied_spans").fetchone()[0] or 0
    numbered = []
    for spans, data in chunks:
        top += spans
        numbered.append((spans, top, data))
    execute_rows(db, "INSERT INTO applied_spans (spans, upto, data)", numbered)
    cutoff = top - MAX_RECENT_SPANS  # the ids numbered up to this go
    db.execute("DELETE FROM applied_spans WHERE upto <= ?", (cutoff,))
    db.execute("DELETE FROM applied_spans WHERE seq <= (SELECT MAX(seq) FROM applied_spans) - ?",
               (MAX_APPLIED_CHUNKS,))
    oldest = db.execute("SELECT seq, spans, upto, data FROM applied_spans ORDER BY seq LIMIT 1"
                        ).fetchone()
    if oldest is not None and oldest[2] - oldest[1] < cutoff:  # it holds ids past the bound
        seq, _, upto, data = oldest
        try:
            ids = decode(data)
        except UNREADABLE:
            ids = None
        keep = upto - cutoff
        if isinstance(ids, list) and len(ids) >= keep:
            db.execute("UPDATE applied_spans SET spans=?, data=? WHERE seq=?",
                       (keep, codecs().json_encoder.encode(ids[-keep:]).decode(), seq))
        else:  # (damaged: it cannot be cut, so it goes)
            db.execute("DELETE FROM applied_spans WHERE seq=?", (seq,))


def _delete_runs(db: sqlite3.Connection, keys: Sequence[tuple[str]]) -> None:
    """Delete runs and their activity log (within the caller's transaction)."""
    db.executemany("DELETE FROM runs WHERE key=?", keys)
    db.executemany("DELETE FROM activity_chunks WHERE run=?", keys)


def _by_run(activity: Iterable[ActivityEntry]) -> dict[str, list[ActivityEntry]]:
    by_run: dict[str, list[ActivityEntry]] = {}
    for entry in activity:
        by_run.setdefault(entry.run_key, []).append(entry)
    return by_run


def dir_problem(state_dir: str, exc: OSError) -> str:
    """Why ``state_dir`` could not be made a directory: a file where it, or a directory above
    it, should be is named as such (the OS says "File exists" or "Not a directory"); other
    errors as the OS words them (permission denied, read-only file system)."""
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        path = Path(state_dir)
        for blocker in (path, *path.parents):
            if blocker.exists() and not blocker.is_dir():
                what = "is" if blocker == path else f"is under {str(blocker)!r}, which is"
                return f"state_dir {state_dir!r} {what} a file, not a directory"
    return f"state_dir {state_dir!r}: {exc.strerror}"


def own(state_dir: str) -> IO[bytes] | None:
    """The state dir held for this process (None for ``:memory:``): a lock file it holds until
    it closes the file (or ends), so a second sidecar started on the same state dir is refused
    before it reads or writes anything there (two would steer the same runs and mix their
    writes). :class:`StoreError` says which process holds it."""
    if state_dir == ":memory:":
        return None
    directory = Path(state_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        owner = open(directory / OWNER_FILE, "a+b")  # noqa: SIM115 (held open: the lock)
    except OSError as exc:
        raise StoreError(dir_problem(state_dir, exc)) from None
    try:
        fcntl.flock(owner.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        owner.seek(0)
        holder = owner.read(32).decode(errors="replace").strip()
        owner.close()
        raise StoreError(f"state_dir {state_dir!r} is in use by another watchdog"
                         f"{f' (pid {holder})' if holder.isdigit() else ''}: give each sidecar "
                         f"a state dir of its own") from None
    try:  # (its first write: a full disk, or a file size limit, says so here)
        owner.truncate(0)
        owner.write(str(os.getpid()).encode())
        owner.flush()
    except OSError as exc:
        with contextlib.suppress(OSError):  # (its close writes the buffer again, and fails)
            owner.close()
        raise StoreError(f"state_dir {state_dir!r}: {exc.strerror}") from None
    return owner


class Store:
    def __init__(self, state_dir: str, activity_log_size: int = 200) -> None:
        self.activity_log_size = activity_log_size
        if state_dir == ":memory:":
            # A named shared-cache memory database, so the reader connection sees the writes.
            target = f"file:watchdog-{id(self):x}?mode=memory&cache=shared"
            self.path: Path | None = None
        else:
            directory = Path(state_dir)
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(dir_problem(state_dir, exc)) from None
            self.path = directory / DB_FILE
            target = self.path.absolute().as_uri()
        opened: list[sqlite3.Connection] = []
        try:
            self._db = sqlite3.connect(target, check_same_thread=False, isolation_level=None,
                                       uri=True)
            opened.append(self._db)
            # read before anything is written: a file that is no database, or a damaged one,
            # is refused as it is (its schema is read whole here; a damaged page elsewhere is
            # found when it is read, at the restore: Service.restore)
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(f"PRAGMA cache_size={-CACHE_KIB}")
            if version > SCHEMA_VERSION:
                raise NewerSchema(self.path or target, version, SCHEMA_VERSION)
            if version == 0:
                self._db.executescript(_SCHEMA)
            else:
                for step in range(version + 1, SCHEMA_VERSION + 1):
                    if _MIGRATIONS[step]:
                        self._db.executescript(_MIGRATIONS[step])
                    if step in _PYTHON_MIGRATIONS:
                        _PYTHON_MIGRATIONS[step](self._db)
            if version != SCHEMA_VERSION:
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._reader = sqlite3.connect(target, check_same_thread=False,
                                           isolation_level=None, uri=True)
        except sqlite3.Error as exc:
            for connection in opened:
                connection.close()
            if unreadable_file(exc) and self.path is not None:
                raise StateFileUnreadable(self.path, HELD, exc) from None
            raise StoreError(f"state_dir {state_dir!r}: {exc}") from None
        except BaseException:
            for connection in opened:
                connection.close()
            raise
        self._lock = threading.Lock()  # the writer connection
        self._read_lock = threading.Lock()  # the reader connection

    def close(self) -> None:
        with self._read_lock:
            self._reader.close()
        with self._lock:
            self._db.close()

    # -- writes ---------------------------------------------------------------------------------

    def save(self, runs: Iterable[dict[str, Any]], activity: Iterable[ActivityEntry],
             sessions: Iterable[dict[str, Any]] = (), gone: Iterable[str] = (),
             applied: Sequence[tuple[str, int, int]] = ()) -> list[str]:
        """Upsert run and session snapshots and append activity entries, and delete the runs
        ``gone`` (folded into another run), in one transaction.
        Returns the keys of runs whose snapshot could not be encoded (skipped, the rest is
        written); raises :class:`StoreWriteError` when nothing could be written."""
        rows = Rows(self.activity_log_size)
        for run in runs:
            rows.add_run(run)
        rows.add_activity(_by_run(activity).items())
        rows.add_sessions(sessions)
        rows.gone.extend((key,) for key in gone)
        rows.add_applied(applied)
        self.write(rows)
        return rows.refused

    def write(self, rows: Rows) -> None:
        """Write encoded rows in one transaction: SQL only, so the thread calling it holds the
        GIL little (the encoding is done where it can be sliced: :class:`Rows`)."""
        with self._transaction() as db:
            execute_rows(db, "INSERT INTO runs (key, agent, ended, updated, data, session)",
                         rows.runs,
                         "ON CONFLICT(key) DO UPDATE SET agent=excluded.agent, "
                         "ended=excluded.ended, updated=excluded.updated, data=excluded.data, "
                         "session=excluded.session")
            execute_rows(db, "INSERT OR REPLACE INTO activity_chunks (run, last_seq, data)",
                         rows.chunks)
            execute_rows(db, "DELETE FROM activity_chunks WHERE rowid IN (SELECT c.rowid FROM (",
                         rows.trims, ") AS t JOIN activity_chunks c "
                         "ON c.run = t.column1 AND c.last_seq <= t.column2)")
            execute_rows(db, _UPSERT_SESSION_HEAD, rows.sessions, _UPSERT_SESSION_TAIL)
            _delete_runs(db, rows.gone)
            if rows.applied:
                _store_applied(db, rows.applied)

    def save_sessions(self, sessions: Iterable[dict[str, Any]]) -> None:
        """Upsert session snapshots (a checkpoint: before the API answers)."""
        rows = _session_rows(sessions)
        with self._transaction() as db:
            execute_rows(db, _UPSERT_SESSION_HEAD, rows, _UPSERT_SESSION_TAIL)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """The writer connection in one transaction: committed at the end, or rolled back (a
        store failure raised as :class:`StoreWriteError`)."""
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException as exc:
                _rollback(db)
                if isinstance(exc, (sqlite3.Error, OSError)):
                    raise StoreWriteError(str(exc)) from exc
                raise

    def prune(self, max_ended: int = MAX_ENDED_RUNS_STORED,
              max_sessions: int = MAX_SESSIONS_STORED) -> int:
        """Delete the oldest ended runs beyond ``max_ended`` and the least recently updated
        sessions beyond ``max_sessions``; returns how many runs went."""
        with self._lock:
            self._db.execute(
                "DELETE FROM sessions WHERE id IN (SELECT id FROM sessions "
                "ORDER BY updated DESC LIMIT -1 OFFSET ?)", (max_sessions,))
            rows = self._db.execute(
                "SELECT key FROM runs WHERE ended=1 ORDER BY updated DESC LIMIT -1 OFFSET ?",
                (max_ended,)).fetchall()
            if not rows:
                return 0
            self._db.execute("BEGIN")
            try:
                _delete_runs(self._db, rows)
                self._db.execute("COMMIT")
            except BaseException:
                _rollback(self._db)  # never leave the writer inside a transaction
                raise
            return len(rows)

    def save_tracker_state(self, data: str) -> None:
        """Keep what the run tracker holds beyond its runs (JSON) for the next start (a clean
        shutdown); replaces what an earlier one kept."""
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO tracker_state (id, data) VALUES (0, ?)", (data,))

    def applied_spans(self) -> tuple[list[Any], int]:
        """The span ids the flushes stored (:meth:`Rows.add_applied`), oldest first, and how
        many chunks cannot be read (damaged: skipped)."""
        spans: list[Any] = []
        unread = 0
        with self._read_lock:
            rows = self._reader.execute("SELECT data FROM applied_spans ORDER BY seq").fetchall()
        for (data,) in rows:
            try:
                chunk = decode(data)
            except UNREADABLE:
                chunk = None
            if isinstance(chunk, list):
                spans.extend(chunk)
            else:
                unread += 1
        return spans, unread

    def take_tracker_state(self) -> str | None:
        """What :meth:`save_tracker_state` kept, removed from the store as it is read: it is
        the state at that shutdown, stale once spans have come since."""
        with self._lock:
            row = self._db.execute("SELECT data FROM tracker_state").fetchone()
            if row is not None:
                self._db.execute("DELETE FROM tracker_state")
        return row[0] if row else None

    # -- reads ----------------------------------------------------------------------------------

    def load_runs(self, active: bool, limit: int) -> list[dict[str, Any]]:
        """Run snapshots, most recently updated first."""
        with self._read_lock:
            rows = self._reader.execute(
                "SELECT key, data FROM runs WHERE ended=? ORDER BY updated DESC LIMIT ?",
                (0 if active else 1, limit)).fetchall()
        return [_row_or_key(key, data) for key, data in rows]

    def get_run(self, key: str) -> dict[str, Any] | None:
        with self._read_lock:
            row = self._reader.execute("SELECT data FROM runs WHERE key=?", (key,)).fetchone()
        return _row_or_key(key, row[0]) if row else None

    def list_runs(self, ended: bool, agent: str | None, before: tuple[float, str] | None,
                  limit: int, session: str | None = None
                  ) -> list[tuple[float, str, dict[str, Any]]]:
        """At most ``limit`` stored runs as ``(updated, key, snapshot)``, the most recently
        updated first (ties: the greatest key first), only those below ``before`` (a page's
        last ``(updated, key)``): one page of a key-set listing (``runs_by_state`` finds it);
        ``agent``, ``session``: only the runs of that agent, of that session."""
        sql, args = "SELECT updated, key, data FROM runs WHERE ended=?", list[object]([int(ended)])
        if agent:
            sql += " AND agent=?"
            args.append(agent)
        if session:
            sql += " AND session=?"
            args.append(session)
        if before is not None:
            sql += " AND (updated < ? OR (updated = ? AND key < ?))"
            args.extend((before[0], before[0], before[1]))
        sql += " ORDER BY updated DESC, key DESC LIMIT ?"
        args.append(limit)
        with self._read_lock:
            rows = self._reader.execute(sql, args).fetchall()
        return [(float(updated), key, _row_or_key(key, data)) for updated, key, data in rows]

    def child_runs(self, parent: str, limit: int) -> list[dict[str, Any]]:
        """Stored runs whose ``parent_run`` is ``parent`` (a scan: read per detail request)."""
        with self._read_lock:
            rows = self._reader.execute(
                # json_valid first: a row an older build wrote with Infinity/NaN is not JSON to
                # SQLite, and json_extract would fail the query for every run
                "SELECT key, data FROM runs WHERE CASE WHEN json_valid(data) THEN "
                "json_extract(data, '$.parent_run') END = ? "
                "ORDER BY updated LIMIT ?", (parent, limit)).fetchall()
        return [_row_or_key(key, data) for key, data in rows]

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        with self._read_lock:
            row = self._reader.execute("SELECT data FROM sessions WHERE id=?",
                                       (session_id,)).fetchone()
        return decode(row[0]) if row else None

    def session_ids(self) -> list[str]:
        with self._read_lock:
            return [row[0] for row in self._reader.execute("SELECT id FROM sessions")]

    def activity(self, key: str, limit: int | None = None) -> list[ActivityEntry]:
        """The run's activity log, oldest first (the last ``limit`` entries)."""
        limit = limit or self.activity_log_size
        entries: dict[int, ActivityEntry] = {}
        with self._read_lock:
            cursor = self._reader.execute(
                "SELECT data FROM activity_chunks WHERE run=? ORDER BY last_seq DESC", (key,))
            for (data,) in cursor:  # newest chunk first, until enough entries are read
                for item in decode(data):
                    entries.setdefault(item[0], ActivityEntry(key, *item))
                if len(entries) >= limit:
                    break
        newest = sorted(entries)[-limit:]
        return [entries[seq] for seq in newest]


def _row_or_key(key: str, data: str) -> dict[str, Any]:
    """A stored run's snapshot; one that is not JSON (damaged on disk) as its key alone, which
    the reader cannot make a run of (it is counted, and the others are read)."""
    try:
        row = decode(data)
    except UNREADABLE:
        return {"key": key}
    return row if isinstance(row, dict) else {"key": key}


_UPSERT_SESSION_HEAD = "INSERT INTO sessions (id, updated, data)"
_UPSERT_SESSION_TAIL = "ON CONFLICT(id) DO UPDATE SET updated=excluded.updated, data=excluded.data"


def _session_rows(sessions: Iterable[dict[str, Any]]) -> list[tuple[str, float, str]]:
    return [(s["id"], float(s.get("updated_at") or 0.0), encode_row(s)) for s in sessions]


def _rollback(db: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open (SQLite ends it itself on some errors, such as
    a full disk, and a second error here would hide the first)."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
