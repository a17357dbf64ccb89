"""The alert rules as the chart ships them: the groups of the PrometheusRule rendered with
``prometheusRule.enabled=true`` pass ``promtool check rules`` and the unit tests of
tests/promtool/alerts_test.yaml, in which every alert fires and stays silent; each alert has a
severity, a summary, a description and a runbook section in docs/alerts.md.

(That every alert expression reads series a real sidecar exports is tests/test_dashboard.py.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.prom import ALERTS, ROOT, alert_groups, alert_rules, binary

UNIT_TESTS = ROOT / "tests/promtool/alerts_test.yaml"
RUNBOOK = ROOT / "docs/alerts.md"
SEVERITIES = {"warning", "critical"}


@pytest.fixture(scope="module")
def groups() -> list[dict[str, Any]]:
    return alert_groups()


@pytest.fixture
def rule_file(tmp_path: Path, groups: list[dict[str, Any]]) -> Path:
    """The rendered groups as a Prometheus rule file, with the unit tests next to it."""
    path = tmp_path / "agent-watchdog.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    tests["rule_files"] = [path.name]
    (tmp_path / "alerts_test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    return path


def promtool(*args: str | Path) -> str:
    done = subprocess.run([binary("promtool"), *map(str, args)], capture_output=True,
                          text=True, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def test_the_chart_ships_the_rule_file_unchanged(groups: list[dict[str, Any]]) -> None:
    assert groups == yaml.safe_load(ALERTS.read_text())["groups"]


def test_promtool_checks_the_rendered_rules(rule_file: Path,
                                            groups: list[dict[str, Any]]) -> None:
    output = promtool("check", "rules", rule_file)
    assert f"SUCCESS: {sum(len(g['rules']) for g in groups)} rules found" in output


def test_promtool_unit_tests_pass_on_the_rendered_rules(rule_file: Path) -> None:
    output = promtool("test", "rules", rule_file.parent / "alerts_test.yaml")
    assert "SUCCESS" in output


def test_every_alert_is_shown_firing_and_not_firing(groups: list[dict[str, Any]]) -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for case in test.get("alert_rule_test", ()):
            (firing if case["exp_alerts"] else silent).add(case["alertname"])
    alerts = {rule["alert"] for rule in alert_rules(groups)}
    assert alerts - firing == set(), "alerts never shown firing"
    assert alerts - silent == set(), "alerts never shown staying silent"
    assert firing | silent <= alerts


def test_every_alert_has_severity_summary_description_and_runbook(
        groups: list[dict[str, Any]]) -> None:
    runbook = RUNBOOK.read_text()
    headings = set(re.findall(r"^## (\w+)$", runbook, re.MULTILINE))
    for rule in alert_rules(groups):
        name = rule["alert"]
        assert re.fullmatch(r"AgentWatchdog[A-Z]\w+", name), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], name
        assert annotations["runbook_url"] == f"docs/alerts.md#{name.lower()}", name
        assert name in headings, f"docs/alerts.md has no section '## {name}'"
        assert f"[{name}](#{name.lower()})" in runbook, f"{name} missing from the runbook table"
    assert headings == {rule["alert"] for rule in alert_rules(groups)}, "a stale runbook section"
