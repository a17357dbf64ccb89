"""The shipped packs' checks (watchdog/core/rules/checked.py): current, used, and never a way
around the check of any other expression."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.core.rules import checked, expr, write_checked
from watchdog.core.rules.expr import ExprError, compile_expr
from watchdog.core.rules.pack import RulePackError, load_text


def test_the_shipped_checks_are_what_cel_says() -> None:
    current = write_checked.render(write_checked.check_shipped())
    assert checked.CHECKED.read_text(encoding="utf-8") == current, (
        "packs/checked.json is stale: python -m watchdog.core.rules.write_checked writes it again")
    assert len(checked.shipped()) >= 20  # the default pack's conditions and placeholders


def test_a_shipped_expression_is_taken_from_the_checks_and_compiled_at_its_first_use() -> None:
    source, (result_type, timed) = next(iter(checked.shipped().items()))
    compiled = compile_expr(source)
    assert (compiled.result_type, compiled.timed) == (result_type, timed)
    assert compiled._program is None
    assert compiled.program is compiled.program  # compiled once, then kept


def test_a_shipped_expression_that_is_not_a_bool_is_still_no_condition() -> None:
    source = next(s for s, (kind, _) in checked.shipped().items() if kind != "BOOL")
    with pytest.raises(ExprError, match="must be a bool condition, but it is of type"):
        compile_expr(source, condition=True)


def test_any_other_expression_is_checked_at_load_with_its_clear_message() -> None:
    pack = """
apiVersion: agent-watchdog/v1
kind: RulePack
rules:
  - name: typo
    when: run.tool_cals > 3
    action: warn
"""
    with pytest.raises(RulePackError, match=r"unknown field 'tool_cals' in run \(did you mean "
                                            r"'tool_calls'\?\)"):
        load_text(pack, include_default=True)


def test_checks_made_for_another_build_are_not_used(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    source = next(iter(checked.shipped()))
    stale = tmp_path / "checked.json"
    text = checked.CHECKED.read_text(encoding="utf-8")
    stale.write_text(text.replace(checked.fingerprint(), "0" * 64), encoding="utf-8")
    monkeypatch.setattr(checked, "CHECKED", stale)
    checked.shipped.cache_clear()
    try:
        assert checked.shipped() == {}
        assert compile_expr(source)._program is not None  # checked (and compiled) by CEL
        stale.write_text("{not json", encoding="utf-8")
        checked.shipped.cache_clear()
        assert checked.shipped() == {}
    finally:
        checked.shipped.cache_clear()
    assert expr.recorded is None
