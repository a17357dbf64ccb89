"""Sessions: what a task that spans many runs remembers between them (DESIGN §7).

Theory of operation
-------------------
A session (the run's ``session`` key: ``watchdog.session.id`` → ``gen_ai.conversation.id`` →
``session.id``) spans many runs — one per user message, or one per hand-off of a long task. The
agent posts **checkpoints**: what is left to do (``remaining``), flat facts it has established
(``state``: a project path, a branch, a ticket id) and approaches that failed. The session keeps:

* ``facts`` — every checkpoint's ``state`` merged in, later wins, ``null`` removes a key; bounded
  to :data:`MAX_FACTS` keys (the least recently set go first), each value to
  :data:`MAX_FACT_CHARS` and redacted. They are handed back *verbatim* to the next run, which is
  what lets it continue instead of rediscovering a path it already knew.
* ``failed_approaches`` — deduplicated (case and whitespace do not make a new one), the most
  recent :data:`MAX_FAILED_APPROACHES` kept.
* **zero progress** — a checkpoint whose ``remaining`` equals the previous checkpoint's (strings
  compared without case and with whitespace collapsed, numbers by value, ``"3"`` equals ``3``)
  sets ``zero_progress`` and adds one to ``zero_progress_streak``; any other checkpoint resets
  both. "Nothing left" (an empty string, or a number ≤ 0) is never zero progress: a finished
  task reported twice is not stuck. The comparison is with the session's last checkpoint, not
  the run's: the next run starts already knowing the last ``remaining``, so a hand-off loop
  (run after run reporting the same work left) is seen across runs and user messages.
* ``agent_cycle`` / ``agent_cycle_repeats`` — a loop across the session's agents
  (:mod:`watchdog.core.cycles` finds it; the core's step sets it here, with the run that can
  stop it, ``cycle_orchestrator``).
* ``runs`` — distinct runs seen in the session, ``checkpoints`` — how many were posted, and per
  recent run how many checkpoints were made during it (``run_checkpoints``). Rules read the
  latter so a zero-progress abort hits the runs that reported no progress, not a new run that
  starts with new user direction (see ``rules/default.yaml``, rule ``zero-progress``).

After zero progress the context carries a :meth:`SessionState.note` for the agent: follow new
user direction or explain the obstacle, instead of repeating the approach.

Everything here is pure: checkpoints and ``now`` in, session state and decisions out. The
service (the shell) persists states in the store and keeps at most
:data:`MAX_SESSIONS_IN_MEMORY` of them in a :class:`SessionBook` (LRU; the store is the source
of truth).
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeAlias

from watchdog.core.bounds import InvalidId, check_id, is_number
from watchdog.core.redact import REDACTED, brief, redact, secret_name
from watchdog.core.shown import shown

MAX_SESSIONS_IN_MEMORY = 10_000  # sessions cached; the rest are read back from the store
MAX_FACTS = 100  # facts kept per session; the least recently set are dropped first
MAX_FACT_CHARS = 500  # a fact's value (redacted, then cut)
MAX_FACT_KEY_CHARS = 200
MAX_FAILED_APPROACHES = 50  # the most recent are kept
MAX_APPROACH_CHARS = 500
MAX_REMAINING_CHARS = 2000
MAX_RECENT_RUNS = 64  # runs remembered per session, to count distinct runs (see note_run)
NOTE_APPROACHES = 10  # failed approaches named in the zero-progress note (all are in the context)

Remaining: TypeAlias = "str | int | float"
FactValue: TypeAlias = "str | int | float | bool"
ProgressKey: TypeAlias = "tuple[str, str | float]"


class CheckpointError(ValueError):
    """A checkpoint body that cannot be used; the message names the field and what is allowed."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One validated checkpoint: strings are redacted and cut to their bounds already."""

    remaining: Remaining
    state: dict[str, FactValue | None]  # None: forget the fact
    failed_approaches: tuple[str, ...]
    at: float
    run: str | None = None

    @classmethod
    def parse(cls, body: Mapping[str, Any], at: float) -> Checkpoint:
        """The ``POST /v1/sessions/{id}/checkpoints`` body; raises :class:`CheckpointError`."""
        allowed = ("remaining", "state", "failed_approaches", "run_id")
        for key in body:
            if key not in allowed:
                raise CheckpointError(f"{key} is not allowed: expected " + ", ".join(allowed))
        if "remaining" not in body:
            raise CheckpointError("remaining is required: a string or number saying what is "
                                  "left to do")
        return cls(_remaining(body["remaining"]), _state(body.get("state")),
                   _approaches(body.get("failed_approaches")), at, _run_id(body.get("run_id")))


def _remaining(value: object) -> Remaining:
    if isinstance(value, str):
        return brief(value, MAX_REMAINING_CHARS)
    if is_number(value):
        return value  # type: ignore[return-value]
    raise CheckpointError(f"remaining={shown(value)} is not allowed: expected a string or a finite "
                          f"number (what is left to do)")


def _state(value: object) -> dict[str, FactValue | None]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CheckpointError("state must be an object of flat facts, e.g. "
                              '{"project_path": "/srv/app"}')
    facts: dict[str, FactValue | None] = {}
    for key, item in value.items():
        if not key or len(key) > MAX_FACT_KEY_CHARS:
            raise CheckpointError(f"state key {shown(key[:40])} is not allowed: expected 1 to "
                                  f"{MAX_FACT_KEY_CHARS} characters")
        name = redact(key)  # a key may hold a secret too (a URL with its password)
        if item is None or isinstance(item, bool):
            facts[name] = item
        elif secret_name(key) and (isinstance(item, str) or is_number(item)):
            facts[name] = REDACTED  # (a secret's value, whatever it looks like)
        elif isinstance(item, str):
            facts[name] = brief(item, MAX_FACT_CHARS)
        elif is_number(item):
            facts[name] = item
        else:
            raise CheckpointError(f"state.{name} is not allowed: expected a string, number, "
                                  f"boolean or null (facts are flat: no objects or lists)")
    return facts


def _approaches(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CheckpointError("failed_approaches must be a list of strings")
    return tuple(brief(item.strip(), MAX_APPROACH_CHARS) for item in value if item.strip())


def _run_id(value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise CheckpointError(f"run_id must be a string (a run id), not {type(value).__name__}")
    return _checked_id(value, "run_id")


def check_session_id(session_id: str) -> str:
    return _checked_id(session_id, "session id")


def _checked_id(value: str, what: str) -> str:
    try:
        return check_id(value, what)
    except InvalidId as exc:
        raise CheckpointError(str(exc)) from None


def progress_key(remaining: Remaining | None) -> ProgressKey | None:
    """What two ``remaining`` values are compared by; None for "nothing left" (done)."""
    if remaining is None:
        return None
    if isinstance(remaining, str):
        text = " ".join(remaining.split()).casefold()
        if not text:
            return None
        try:
            number = float(text)
        except ValueError:
            return ("text", text)
    else:
        number = float(remaining)
    if not math.isfinite(number):
        return ("text", str(number))
    return None if number <= 0 else ("number", number)


def _approach_key(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass(frozen=True, slots=True)
class CheckpointOutcome:
    """What one checkpoint changed: whether it was zero progress, and for which runs."""

    zero_progress: bool
    zero_progress_streak: int
    runs: tuple[str, ...]  # the runs it was attributed to (their rules read the session)


@dataclass(slots=True)
class SessionState:
    id: str
    runs: int = 0
    checkpoints: int = 0
    zero_progress: bool = False
    zero_progress_streak: int = 0
    last_remaining: Remaining | None = None
    last_checkpoint_at: float | None = None
    last_checkpoint_run: str | None = None
    facts: dict[str, FactValue] = field(default_factory=dict)
    failed_approaches: list[str] = field(default_factory=list)
    recent_runs: dict[str, int] = field(default_factory=dict)  # run -> checkpoints during it
    updated_at: float = 0.0
    # a loop across the session's agents, as watchdog.core.cycles last found it
    agent_cycle: list[str] = field(default_factory=list)
    agent_cycle_repeats: int = 0
    cycle_orchestrator: str | None = None  # the run that can stop it

    # -- runs -----------------------------------------------------------------------------------

    def note_run(self, run_key: str, now: float) -> bool:
        """A run of this session was seen; True if it is new (``runs`` grew).

        Distinct runs are told apart among the :data:`MAX_RECENT_RUNS` most recent ones, so a
        session's memory does not grow with its number of runs.
        """
        if run_key in self.recent_runs:
            return False
        self.recent_runs[run_key] = 0
        while len(self.recent_runs) > MAX_RECENT_RUNS:
            del self.recent_runs[next(iter(self.recent_runs))]
        self.runs += 1
        self.updated_at = now
        return True

    # -- checkpoints ----------------------------------------------------------------------------

    def checkpoint(self, checkpoint: Checkpoint, active_runs: Iterable[str] = ()
                   ) -> CheckpointOutcome:
        """Fold one checkpoint in. It counts for its ``run``, or, when it names none, for
        ``active_runs`` (the session's runs in progress, as the shell knows them)."""
        key = progress_key(checkpoint.remaining)
        repeated = (self.checkpoints > 0 and key is not None
                    and key == progress_key(self.last_remaining))
        self.zero_progress = repeated
        self.zero_progress_streak = self.zero_progress_streak + 1 if repeated else 0
        self.checkpoints += 1
        self.last_remaining = checkpoint.remaining
        self.last_checkpoint_at = checkpoint.at
        self.last_checkpoint_run = checkpoint.run
        self.updated_at = checkpoint.at
        self._merge_facts(checkpoint.state)
        self._add_approaches(checkpoint.failed_approaches)
        runs = (checkpoint.run,) if checkpoint.run else tuple(active_runs)
        for run in runs:
            self.note_run(run, checkpoint.at)
            self.recent_runs[run] += 1
        return CheckpointOutcome(self.zero_progress, self.zero_progress_streak, runs)

    def _merge_facts(self, state: Mapping[str, FactValue | None]) -> None:
        facts = self.facts
        for key, value in state.items():
            facts.pop(key, None)  # re-inserted last: the most recently set survive the bound
            if value is not None:
                facts[key] = value
        while len(facts) > MAX_FACTS:
            del facts[next(iter(facts))]

    def _add_approaches(self, approaches: Iterable[str]) -> None:
        known = self.failed_approaches
        for approach in approaches:
            key = _approach_key(approach)
            known[:] = [a for a in known if _approach_key(a) != key]
            known.append(approach)
        del known[:-MAX_FAILED_APPROACHES]

    # -- views ----------------------------------------------------------------------------------

    def activation(self, run_key: str | None = None) -> dict[str, Any]:
        """The CEL ``session`` variable for one of its runs (DESIGN §4)."""
        return {"id": self.id, "runs": self.runs, "checkpoints": self.checkpoints,
                "zero_progress": self.zero_progress,
                "zero_progress_streak": self.zero_progress_streak,
                "run_checkpoints": self.recent_runs.get(run_key, 0) if run_key else 0,
                "agent_cycle": self.agent_cycle, "agent_cycle_repeats": self.agent_cycle_repeats,
                "cycle_orchestrator": run_key is not None
                and run_key == self.cycle_orchestrator}

    def note(self) -> str | None:
        """What the next run is told after zero progress (None while the session progresses)."""
        if not self.zero_progress:
            return None
        times = self.zero_progress_streak + 1
        text = (f"No progress: the last {times} checkpoints of this session reported the same "
                f"remaining work: {_quoted(self.last_remaining)}. Do not repeat the approach "
                f"that led here. If the user has given new direction, follow it; otherwise "
                f"explain to the user what blocks progress and what you need from them, "
                f"instead of trying again.")
        failed = self.failed_approaches[-NOTE_APPROACHES:]
        if failed:
            text += " Approaches that already failed: " + "; ".join(failed) + "."
        return text

    def context(self) -> dict[str, Any]:
        """``GET /v1/sessions/{id}/context``: what the next run should start from."""
        return {
            "session": self.id,
            "runs": self.runs,
            "checkpoints": self.checkpoints,
            "facts": dict(self.facts),
            "failed_approaches": list(self.failed_approaches),
            "zero_progress": self.zero_progress,
            "zero_progress_streak": self.zero_progress_streak,
            "last_remaining": self.last_remaining,
            "last_checkpoint_at": _iso(self.last_checkpoint_at),
            "last_checkpoint_run": self.last_checkpoint_run,
            "note": self.note(),
        }

    # -- persistence ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {name: _copy(getattr(self, name)) for name in self.__slots__}

    @classmethod
    def from_dict(cls, data: object) -> SessionState:
        """A stored :meth:`to_dict`; :class:`UnreadableSession` if it is not one (damaged on
        disk, or written by a build that kept other fields)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("id"), str):
            raise UnreadableSession("not a stored session")
        state = cls(data["id"])
        for name, allowed in _STORED_TYPES.items():
            if name in data:
                value = data[name]
                if not isinstance(value, allowed) or (isinstance(value, bool)
                                                      and bool not in allowed):
                    raise UnreadableSession(f"{name} is a {type(value).__name__}")
                items = _STORED_ITEMS.get(name)
                if items is not None and not all(isinstance(item, items)
                                                 for item in _held(data[name])):
                    raise UnreadableSession(f"{name} holds a value of another type")
                setattr(state, name, _copy(value))
        return state


def _held(value: Any) -> Iterable[Any]:
    """What a stored list holds, or a stored dict's values."""
    return value.values() if isinstance(value, dict) else value


class UnreadableSession(ValueError):
    """A stored session that cannot be made a :class:`SessionState` again."""


_NUMBER = (int, float)
# what each stored field may hold (a bool is an int to isinstance: allowed only where named)
_STORED_TYPES: dict[str, tuple[type, ...]] = {
    "runs": (int,), "checkpoints": (int,), "zero_progress": (bool,),
    "zero_progress_streak": (int,), "last_remaining": (str, *_NUMBER, type(None)),
    "last_checkpoint_at": (*_NUMBER, type(None)), "last_checkpoint_run": (str, type(None)),
    "facts": (dict,), "failed_approaches": (list,), "recent_runs": (dict,),
    "updated_at": _NUMBER, "agent_cycle": (list,), "agent_cycle_repeats": (int,),
    "cycle_orchestrator": (str, type(None)),
}
_STORED_ITEMS: dict[str, tuple[type, ...]] = {  # what a list holds; a dict, as its values
    "facts": (str, *_NUMBER), "failed_approaches": (str,), "recent_runs": (int,),
    "agent_cycle": (str,),
}


def empty_context(session_id: str) -> dict[str, Any]:
    """The context of a session nothing is known about yet: zero counts, no facts, no note."""
    return SessionState(session_id).context()


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value


def _quoted(remaining: Remaining | None) -> str:
    return json.dumps(remaining, ensure_ascii=False)


def _iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


class SessionBook:
    """The sessions the shell works with: an LRU of :class:`SessionState` in front of the store.

    ``load`` reads a stored session (a :meth:`SessionState.to_dict` mapping, or None; a
    ``ValueError`` or ``RecursionError`` if the stored row cannot be read). A changed session is
    *dirty* until the shell takes it (:meth:`take_dirty`) to persist it; a dirty session evicted
    from the LRU stays reachable through the dirty set, so nothing is lost between two flushes.

    A stored session that cannot be read is reported to ``unreadable`` once and then known as
    such (:meth:`cannot_be_read`): to :meth:`get` it is unknown, and :meth:`get_or_create`
    starts it afresh, which replaces the stored row at the next write.
    """

    def __init__(self, load: Callable[[str], object],
                 max_sessions: int = MAX_SESSIONS_IN_MEMORY,
                 unreadable: Callable[[str, Exception], None] | None = None) -> None:
        self._load = load
        self._on_unreadable = unreadable
        # stored sessions found unreadable, until started afresh (bounded by the store's ids)
        self._unreadable: set[str] = set()
        self.max_sessions = max_sessions
        self._cache: OrderedDict[str, SessionState] = OrderedDict()
        self._dirty: dict[str, SessionState] = {}
        self.evicted = 0  # sessions dropped from memory (they remain in the store)
        # ids the store may hold that memory does not (stored before the start, or evicted);
        # None: unknown, so every miss asks the store
        self._stored: set[str] | None = None

    def know(self, stored_ids: Iterable[str]) -> None:
        """The ids of the sessions in the store (at start): a session not among them and not in
        memory is new, and is not looked up in the store (no read on the ingest path)."""
        self._stored = set(stored_ids)

    def ids(self, prefix: str) -> list[str]:
        """The ids starting with ``prefix`` of the sessions in memory and in the store at
        start."""
        return [sid for sid in {*(self._stored or ()), *self._cache} if sid.startswith(prefix)]

    def __len__(self) -> int:
        return len(self._cache)

    def get(self, session_id: str) -> SessionState | None:
        """The session, from memory or the store; None if nothing is known about it."""
        cache = self._cache
        state = cache.get(session_id)
        if state is not None:
            cache.move_to_end(session_id)
            return state
        state = self._dirty.get(session_id)
        if state is None:
            if (self._stored is not None and session_id not in self._stored) \
                    or session_id in self._unreadable:
                return None
            try:
                data = self._load(session_id)
                if data is None:
                    return None
                state = SessionState.from_dict(data)
            except (ValueError, RecursionError) as exc:
                self._unreadable.add(session_id)
                if self._on_unreadable is not None:
                    self._on_unreadable(session_id, exc)
                return None
        self._remember(state)
        return state

    def cannot_be_read(self, session_id: str) -> bool:
        """Whether the store holds ``session_id`` in a row that cannot be read (as :meth:`get`
        found it), not started afresh since."""
        return session_id in self._unreadable

    def get_or_create(self, session_id: str) -> SessionState:
        state = self.get(session_id)
        if state is None:
            state = SessionState(session_id)
            self._remember(state)
        return state

    def _remember(self, state: SessionState) -> None:
        self._unreadable.discard(state.id)
        self._cache[state.id] = state
        while len(self._cache) > self.max_sessions:
            evicted, _state = self._cache.popitem(last=False)
            self.evicted += 1
            if self._stored is not None:
                self._stored.add(evicted)

    def note_run(self, session_id: str, run_key: str, now: float) -> SessionState | None:
        """A run of ``session_id`` was seen; returns the session if that was news."""
        state = self.get_or_create(session_id)
        if not state.note_run(run_key, now):
            return None
        self._dirty[session_id] = state
        return state

    def changed(self, state: SessionState) -> None:
        self._dirty[state.id] = state

    def take_dirty(self) -> list[SessionState]:
        """The sessions changed since the last call, to persist (their snapshots are the
        caller's to take: :meth:`SessionState.to_dict`)."""
        dirty, self._dirty = self._dirty, {}
        return list(dirty.values())

    def requeue(self, states: Iterable[SessionState]) -> None:
        """Sessions taken by :meth:`take_dirty` that could not be stored: dirty again (each is
        the live state, so its changes since are kept)."""
        for state in states:
            self._dirty.setdefault(state.id, state)
