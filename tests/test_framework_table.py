"""The "what is read from where, per framework" table of docs/frameworks.md is the convention
tables the normaliser reads (watchdog/core/spans/frameworks.py), rendered by
tools/frameworks_table.py."""

from __future__ import annotations

from tools import frameworks_table
from watchdog.core.spans.combined import TABLES
from watchdog.core.spans.frameworks import CONVENTIONS
from watchdog.core.spans.scopes import view_of


def test_readme_table_matches_the_tables() -> None:
    page = frameworks_table.PAGE.read_text("utf-8")
    assert frameworks_table.updated(page) == page, (
        "docs/frameworks.md's table is out of date: run python tools/frameworks_table.py")


def test_every_table_entry_has_a_readme_row() -> None:
    page = frameworks_table.PAGE.read_text("utf-8")
    for convention in CONVENTIONS:
        assert f"| **{convention.name}** (" in page


def test_combined_tables_keep_precedence_and_read_events_last() -> None:
    # DESIGN §3: watchdog.agent.name → gen_ai.agent.name → agent.name; event facts come after
    # every span attribute.
    assert TABLES.agent_name[:3] == ("watchdog.agent.name", "gen_ai.agent.name", "agent.name")
    assert TABLES.session[:3] == ("watchdog.session.id", "gen_ai.conversation.id", "session.id")
    assert TABLES.finish_reasons[-1] == "gen_ai.choice:finish_reason"
    # (the GenAI conventions' own event names, read on every span)
    assert TABLES.events["gen_ai.choice"] == frozenset({"finish_reason", "message"})
    assert view_of("any.other.scope").events["gen_ai.choice"] == frozenset(
        {"finish_reason", "message"})
