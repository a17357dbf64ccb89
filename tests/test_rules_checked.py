"""The shipped packs' checks (watchdog/core/rules/checked.py): current, used, and never a way
around the check of any other expression."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from watchdog.core.rules import checked, expr, pack, write_checked
from watchdog.core.rules.expr import ExprError, compile_expr
from watchdog.core.rules.pack import RulePackError, load_rules, load_text


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


def test_the_default_pack_read_ahead_is_current() -> None:
    assert pack.DEFAULT_AHEAD.read_text(encoding="utf-8") == write_checked.render_ahead(), (
        "packs/default.json is stale: python -m watchdog.core.rules.write_checked writes it again")


def _same_pack(ahead: Any, read: Any) -> None:
    assert (ahead.file, ahead.name, ahead.budgets, ahead.disable) == (
        read.file, read.name, read.budgets, read.disable)
    assert [(r.describe(), r.file, r.line) for r in ahead.rules] == [
        (r.describe(), r.file, r.line) for r in read.rules]
    assert [(r.when.timed, r.when.reads, r.message.timed, r.reads) for r in ahead.rules] == [
        (r.when.timed, r.when.reads, r.message.timed, r.reads) for r in read.rules]


def test_the_default_pack_read_ahead_is_what_its_yaml_gives() -> None:
    file = str(pack.DEFAULT_PACK)
    ahead = pack.read_ahead(file)
    [read] = pack.read_yaml(file)
    assert ahead is not None and len(ahead.rules) >= 15
    _same_pack(ahead, read)
    loaded = load_rules([])
    assert [r.describe() for r in loaded.rules] == [r.describe() for r in read.rules]
    assert loaded.budgets == tuple(read.budgets)


def test_an_edited_default_pack_is_read_from_its_yaml(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The form read ahead holds the SHA-256 of the ``default.yaml`` it was made from: a pack
    edited in place is read from its YAML, and its problems are named with their lines."""
    edited = tmp_path / "default.yaml"
    text = pack.DEFAULT_PACK.read_text(encoding="utf-8")
    edited.write_text(text.replace("wrap up soon]", "wrap up now]", 1), encoding="utf-8")
    monkeypatch.setattr(pack, "DEFAULT_PACK", edited)
    assert pack.read_ahead(str(edited)) is None
    countdown = load_rules([]).get("budget-countdown")
    assert countdown is not None and countdown.message.text.endswith("wrap up now]")
    lines = text.splitlines()
    line = next(i for i, line in enumerate(lines, 1) if line.strip() == "- name: idle-timeout")
    lines.insert(line, "    colour: red")
    edited.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(RulePackError) as caught:
        load_rules([])
    assert str(caught.value) == f"{edited}:{line + 1}: rule idle-timeout: unknown key 'colour'"


def test_a_default_pack_read_ahead_that_cannot_be_read_is_read_from_its_yaml(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ahead = tmp_path / "default.json"
    for text in ("{not json", '{"sha256": 1}', "[]"):
        ahead.write_text(text, encoding="utf-8")
        monkeypatch.setattr(pack, "DEFAULT_AHEAD", ahead)
        assert pack.read_ahead(str(pack.DEFAULT_PACK)) is None
        assert load_rules([]).get("idle-timeout") is not None
