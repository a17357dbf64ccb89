"""The directive vocabulary is written once on each side of the wire: the sidecar's
(``watchdog.core.rules.decision``, ``watchdog.core.rules.engine.announced_grace``,
``watchdog.core.directives.model.Directive.to_json``) is the source; the agent-side client cannot
import it and keeps a copy (``agent_watchdog_client.directive``). These tests fail when the two
differ, so a new action, severity, grace key or directive field reaches both or neither."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

from agent_watchdog_client import directive as client

from watchdog.core.directives.model import Directive
from watchdog.core.model import steer
from watchdog.core.rules.decision import (
    BUDGET_MESSAGE_PREFIX,
    COUNTDOWN_BUDGETS,
    GRACE_KEYS,
    Action,
    Severity,
)
from watchdog.core.rules.engine import announced_grace
from watchdog.core.rules.model import Grace

# Fields the sidecar sends that the client does not model: it keeps them in ``Directive.raw``.
RAW_ONLY = frozenset({"agent", "escalation"})


def server_directive(action: Action = Action.WIND_DOWN) -> Directive:
    return Directive(
        id="0" * 32, run_id="run-1", seq=3, global_seq=7, action=action.value,
        rule="budget-countdown", severity=Severity.WARNING.value,
        message="[budget: 3 of 20 tool calls left — wrap up soon]",
        terminal_state="tool_limit_reached",
        budget={"max_tool_calls": 20, "remaining_tool_calls": 3},
        report_prompt="report now", created_at=1_795_000_000.0, dedup_key="budget-countdown",
        escalation=False, tool_calls_at=17, agent="explorer",
        grace=announced_grace(Grace(tool_calls=2, seconds=60), 17), countdown="tool_calls")


def test_the_actions_and_severities_are_the_sidecars() -> None:
    actions, severities = [action.value for action in Action], [s.value for s in Severity]
    assert actions == [client.NOTIFY, client.WIND_DOWN, client.ABORT]
    assert actions == list(client.ACTIONS)
    assert severities == [client.INFO, client.WARNING, client.CRITICAL]
    assert severities == list(client.SEVERITIES)


def test_the_grace_keys_are_the_ones_a_wind_down_announces() -> None:
    announced = announced_grace(Grace(tool_calls=2, seconds=60), 17)
    assert set(client.GRACE_KEYS) == set(announced)
    assert announced[client.GRACE_ENDS_AT] == 19


def test_the_client_models_every_field_the_sidecar_sends() -> None:
    sent = set(server_directive().to_json())
    modelled = {field.name for field in dataclasses.fields(client.Directive)} - {"raw"}
    assert modelled | RAW_ONLY == sent, (
        f"the sidecar sends {sorted(sent - modelled - RAW_ONLY)} that the client does not "
        f"model, and the client models {sorted(modelled - sent)} that the sidecar does not "
        f"send: add them to agent_watchdog_client.directive.Directive (or to RAW_ONLY)")
    assert not RAW_ONLY & modelled


def test_a_sent_directive_reads_back_whole_on_the_client() -> None:
    for action in Action:
        sent = server_directive(action).to_json()
        received = client.Directive.from_json(json.loads(json.dumps(sent)))
        for field in dataclasses.fields(client.Directive):
            if field.name != "raw":
                assert getattr(received, field.name) == sent[field.name], field.name
        assert received.is_abort == (action is Action.ABORT)
        assert received.is_wind_down == (action is Action.WIND_DOWN)
        assert received.is_budget
        assert received.grace_ends_at == (19 if action is Action.WIND_DOWN else None)
        assert {key: received.raw[key] for key in RAW_ONLY} == {"agent": "explorer",
                                                                "escalation": False}


def test_the_model_endpoint_reads_directives_in_the_one_vocabulary() -> None:
    """The model endpoint's steering (``watchdog.core.model.steer``) names no action, grace key
    or budget-message mark of its own: it reads the directive vocabulary
    (``watchdog.core.rules.decision``), so a renamed word reaches it too."""
    source = Path(steer.__file__).read_text(encoding="utf-8")
    words = {*(action.value for action in Action), *(s.value for s in Severity),
             *GRACE_KEYS, BUDGET_MESSAGE_PREFIX}
    literals = {node.value for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert not literals & words, sorted(literals & words)
    assert BUDGET_MESSAGE_PREFIX == client.BUDGET_MESSAGE_PREFIX
    assert tuple(GRACE_KEYS) == tuple(client.GRACE_KEYS)
    assert tuple(COUNTDOWN_BUDGETS) == tuple(client.COUNTDOWN_BUDGETS)
    assert COUNTDOWN_BUDGETS[0] == client.COUNTDOWN_TOOL_CALLS


def test_the_model_endpoint_reads_a_wind_down_and_an_abort_by_their_words() -> None:
    grace = announced_grace(Grace(tool_calls=2), 17)
    board = steer.Board()
    board.post(dataclasses.replace(server_directive(Action.WIND_DOWN), grace=grace))
    board.post(dataclasses.replace(server_directive(Action.ABORT), rule="loop-abort",
                                   message="stop"))
    assert board.countdown is not None and board.abort is not None
    assert board.grace is not None and steer.grace_end(board.grace) == 19
    assert steer.is_budget(dataclasses.replace(server_directive(), rule="own-rule"))
    # (what makes a countdown is its rule's declaration, never its name or its message)
    guard = dataclasses.replace(server_directive(), rule="token-budget-guard", countdown=None)
    assert not steer.is_budget(guard)


def test_a_countdown_is_what_the_directive_declares_on_the_client_too() -> None:
    """A sidecar's directive says whether it counts a budget down (``countdown``); a sidecar
    that predates the field is read as it meant it (a ``budget-*`` rule)."""
    guard = dataclasses.replace(server_directive(), rule="token-budget-guard", countdown=None,
                                grace=None)
    received = client.Directive.from_json(json.loads(json.dumps(guard.to_json())))
    assert not received.is_budget and not received.counts_tool_calls
    cost = dataclasses.replace(server_directive(), countdown="cost_usd", grace=None)
    received = client.Directive.from_json(json.loads(json.dumps(cost.to_json())))
    assert received.is_budget and not received.counts_tool_calls
    old = {key: value for key, value in server_directive().to_json().items()
           if key != "countdown"}
    received = client.Directive.from_json(old)
    assert received.is_budget and received.counts_tool_calls
