"""A directive: one rule decision for one run, numbered, stored and delivered to the agent.

A :class:`~watchdog.core.rules.decision.Decision` says *that* a rule fired; a :class:`Directive` is
what the agent receives (DESIGN §6). Each has a per-run ``seq`` (1, 2, 3… — what long-poll
``after=`` and the per-run SSE ``id:`` use) and a ``global_seq`` across all runs (the global SSE
stream's ``id:``). Both are allocated by the outbox before the directive is stored, so a
directive never changes number once anyone has seen it.

:meth:`Directive.to_json` is the public shape; :meth:`to_record` adds the internal fields the
store keeps (``global_seq``, ``dedup_key``, ``tool_calls_at``) so the rule engine can be restored
from it after a restart (:class:`watchdog.core.rules.engine.FiredRecord`). Pure: no IO, no clock.

:meth:`Directive.to_json` is the source of the fields the agent-side client reads
(``agent_watchdog_client.directive.Directive``, which keeps the rest in ``raw``);
``tests/test_directive_vocabulary.py`` fails when the two differ.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from watchdog.core.bounds import plain_number
from watchdog.core.rules.decision import Action, Decided, Decision
from watchdog.core.runs.view import RunView

if TYPE_CHECKING:
    from watchdog.core.directives.prompt import PromptFacts

# A directive's id: this process's random prefix + its global_seq (unique within a state dir),
# 32 hex digits like a uuid4's, without a uuid4's os.urandom call per directive.
_ID_PREFIX = uuid.uuid4().hex[:20]

# Actions whose directive carries a report_prompt: the agent is asked to stop and report.
REPORTING_ACTIONS = frozenset({Action.WIND_DOWN.value, Action.ABORT.value})


@dataclass
class Directive:
    id: str  # 32 hex digits, unique: the webhook-id, the receiver's idempotency key
    run_id: str
    seq: int  # per run, from 1
    global_seq: int  # across all runs, monotonic
    action: str  # notify | wind_down | abort
    rule: str
    severity: str
    message: str
    terminal_state: str | None
    budget: dict[str, float]  # the run view's budget at decision time
    # wind_down and abort: the instruction to report, made from prompt_facts when first read
    # (then kept), or given as text; None otherwise
    report_prompt: str | None
    created_at: float  # seconds since the epoch
    dedup_key: str  # what makes a decision unique within its run (rule, or rule + message)
    escalation: bool  # an abort because a wind_down's grace ran out
    tool_calls_at: int  # run.tool_calls when it fired: the grace baseline after a restart
    agent: str
    # a wind_down's grace: {"tool_calls": 2, "seconds": 60, "ends_at_tool_calls": 10} (see
    # Decision.grace); None otherwise, and in records stored before it existed
    grace: dict[str, float] | None = None
    # the budget its rule counts down ("tool_calls", "cost_usd", "tokens", "iterations": the
    # rule's ``countdown``); None otherwise, and in records stored before it existed
    countdown: str | None = None
    # what the report prompt is made of, frozen at decision time (None: given as text)
    prompt_facts: PromptFacts | None = None

    @property
    def needs_report_prompt(self) -> bool:
        return self.action in REPORTING_ACTIONS

    @classmethod
    def from_decision(cls, decision: Decision, run: RunView, now: float,
                      report_prompt: str | None, seq: int, global_seq: int,
                      budget: Mapping[str, float] | None = None,
                      directive_id: str | None = None,
                      prompt_facts: PromptFacts | None = None) -> Directive:
        """``budget`` defaults to the view's; ``prompt_facts``: what the report prompt is made
        of when read (the text is ``report_prompt`` when given)."""
        view = run.budget if budget is None else budget
        return cls(
            id=directive_id or f"{_ID_PREFIX}{global_seq & 0xFFFFFFFFFFFF:012x}",
            run_id=decision.run_key,
            seq=seq,
            global_seq=global_seq,
            action=decision.action.value,
            rule=decision.rule,
            severity=decision.severity.value,
            message=decision.message,
            terminal_state=(decision.terminal_state.value
                            if decision.terminal_state is not None else None),
            budget={key: plain_number(value) for key, value in view.items()},
            report_prompt=report_prompt,
            created_at=now,
            dedup_key=decision.dedup_key,
            escalation=decision.escalation,
            tool_calls_at=run.tool_calls,
            agent=run.agent,
            grace=({key: plain_number(value) for key, value in decision.grace.items()}
                   if decision.grace is not None else None),
            countdown=decision.countdown,
            prompt_facts=prompt_facts,
        )

    def to_json(self) -> dict[str, Any]:
        """The DESIGN §6 shape (plus ``agent``, ``escalation``, ``grace`` and ``countdown``):
        API, SSE and webhooks."""
        return {
            "id": self.id,
            "run_id": self.run_id,
            "seq": self.seq,
            "action": self.action,
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "terminal_state": self.terminal_state,
            "budget": self.budget,
            "report_prompt": self.report_prompt,
            "created_at": iso_seconds(self.created_at),
            "agent": self.agent,
            "escalation": self.escalation,
            "grace": self.grace,
            "countdown": self.countdown,
        }

    def to_record(self) -> dict[str, Any]:
        """Every field, for the store: the report prompt as its text once made, else as
        what it is made of."""
        record = {name: getattr(self, name) for name in _RECORD_FIELDS}
        text = self.__dict__.get("_report_prompt")
        facts = self.prompt_facts
        record["report_prompt"] = text
        record["prompt_facts"] = facts.to_list() if facts is not None and text is None \
            else None
        return record

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Directive:
        facts = data.get("prompt_facts")
        if facts is None:
            return cls(**{**data, "prompt_facts": None})
        from watchdog.core.directives.prompt import PromptFacts  # (a reporting directive's)

        return cls(**{**data, "prompt_facts": PromptFacts.from_list(facts)})


def _report_prompt(self: Directive) -> str | None:
    """The instruction to report, made from ``prompt_facts`` when first read."""
    text: str | None = self.__dict__.get("_report_prompt")
    facts = self.prompt_facts
    if text is None and facts is not None:
        from watchdog.core.directives.prompt import bare_prompt, prompt_text

        try:
            text = prompt_text(facts, self.message, self.action, self.budget)
        except Exception:  # a bug here must not lose the request to report
            text = bare_prompt(self.message, self.action)
        self.__dict__["_report_prompt"] = text
    return text


def _set_report_prompt(self: Directive, text: str | None) -> None:
    self.__dict__["_report_prompt"] = text


# A property over the field: the dataclass's fields (and __init__) stay those of the record.
Directive.report_prompt = property(_report_prompt, _set_report_prompt)  # type: ignore[assignment]
_RECORD_FIELDS = tuple(f.name for f in fields(Directive)
                       if f.name not in ("report_prompt", "prompt_facts"))


def iso_seconds(seconds: float) -> str:
    """``2026-11-22T04:00:00Z`` — ISO-8601 UTC with whole seconds, as in DESIGN §6."""
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def prompt_for(decided: Decided, directive: Directive) -> str:
    """The report prompt of ``directive`` from what its decision carries, made now (a
    directive makes its own when read: ``Directive.report_prompt``)."""
    from watchdog.core.directives.prompt import decided_facts, prompt_text

    return prompt_text(decided_facts(decided), directive.message, directive.action,
                       directive.budget)
