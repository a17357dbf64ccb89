"""What a step of the core hands out (:class:`Step`): the runs it touched, finished or decided on
as frozen views, the new activity, the decisions, and the failures of one run's work
(:class:`Failure`), for the shell to carry on. The step itself is :mod:`watchdog.core.step`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from watchdog.core.rules.decision import Decided, Decision
from watchdog.core.runs.activity import ActivityEntry
from watchdog.core.runs.run import RunState
from watchdog.core.runs.steps import StepLog
from watchdog.core.runs.tracker import BatchResult, Tally
from watchdog.core.runs.view import RunView
from watchdog.core.spans.record import SpanRecord


@dataclass(slots=True)
class Failure:
    """One run's work that failed; the shell counts and logs it."""

    stage: str  # ingest | rules | expire | view
    run_key: str
    error: BaseException


@dataclass(slots=True)
class Step:
    """What one :meth:`Core.apply` / :meth:`Core.tick` produced, for the shell to carry on."""

    # changed by the step; of a batch (Core.apply), those it decided on or finished: no one
    # reads the others' views, and taking one for each run of every batch cost ~5-10 % of it
    touched: dict[str, RunView] = field(default_factory=dict)
    activity: list[ActivityEntry] = field(default_factory=list)  # to persist
    decisions: list[Decided] = field(default_factory=list)  # to become directives
    finished: list[RunView] = field(default_factory=list)  # ended or evicted
    # runs that ended before this step and were classified again in it (late spans brought
    # their answer, or the budget they spent): each with the state its end was handed out in
    reclassified: list[tuple[RunView, str]] = field(default_factory=list)
    evicted: list[RunView] = field(default_factory=list)  # ... of those, evicted (the bound)
    gone: dict[str, str] = field(default_factory=dict)  # runs folded into another (not to keep)
    # runs taken as abandoned, or completed at an answer, whose agent acted again: active
    # again (key -> the state it had ended in, and why)
    resumed: dict[str, tuple[str, str]] = field(default_factory=dict)
    batch: BatchResult | None = None  # the tracker's counts (metrics)
    applied: int = 0  # records applied (a synced span's second copy is not)
    # records dropped as another span with an id already applied (RecentSpans.conflicts)
    conflicts: list[SpanRecord] = field(default_factory=list)
    rule_errors: Tally[str] = field(default_factory=Tally)
    # of each rule with errors: its latest error's run and text (for the log)
    rule_error_texts: dict[str, tuple[str, str]] = field(default_factory=dict)
    eval_seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    outages: dict[str, bool] = field(default_factory=dict)  # tool -> failing now (began/ended)
    # The touched runs themselves, for the state writer alone (it snapshots each once per
    # flush, not once per step); nothing else reads them.
    dirty: dict[str, RunState] = field(default_factory=dict)
    # What the core gathers during the step, made into views by Core._seal
    _finished: list[RunState] = field(default_factory=list, repr=False)
    _evicted: list[RunState] = field(default_factory=list, repr=False)
    _decided: list[tuple[Decision, RunState, StepLog, int]] = field(
        default_factory=list, repr=False)
    _view_touched: bool = field(default=True, repr=False)  # a view of every dirty run
