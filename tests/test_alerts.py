"""The alert rules as the chart ships them: the groups of the PrometheusRule rendered with
``prometheusRule.enabled=true`` pass ``promtool check rules`` and the unit tests of
tests/promtool/alerts_test.yaml, in which every alert fires and stays silent; each alert has a
``for``, a severity, a summary, a description, an absolute runbook URL and a runbook section in
docs/alerts.md; aggregations keep ``cluster``.

The chart's per-alert values (kube-prometheus-stack's conventions) are rendered and run through
promtool too (tests/promtool/overrides_test.yaml): ``disabled``, ``customRules`` (``for``,
severity, labels), ``additionalRuleLabels``/``additionalRuleAnnotations``, and the absent
alert following ``sidecar.containerName``, and ``traceSearchUrl`` giving every per-agent alert a
link to that agent's traces (and no other alert).

(That every alert expression reads series a real sidecar exports is tests/test_dashboard.py.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.prom import ALERTS, CHART, ROOT, RUNBOOK_URL, alert_groups, alert_rules, binary

UNIT_TESTS = ROOT / "tests/promtool/alerts_test.yaml"
OVERRIDE_TESTS = ROOT / "tests/promtool/overrides_test.yaml"
RUNBOOK = ROOT / "docs/alerts.md"
SEVERITIES = {"warning", "critical"}
# The values of tests/promtool/overrides_test.yaml.
OVERRIDES: dict[str, Any] = {
    "prometheusRule": {
        "runbookUrl": "https://wiki.example.com/agents/alerts",
        "additionalRuleLabels": {"team": "platform"},
        "additionalRuleAnnotations": {"dashboard": "https://grafana.example.com/d/agent-watchdog"},
        "traceSearchUrl": "https://jaeger.example.com/search?service={agent}&tags=k8s.namespace:{namespace}",
        "disabled": {"AgentWatchdogErrorLoops": True},
        "customRules": {"AgentWatchdogRunStuck": {
            "for": "2m", "severity": "critical", "labels": {"page": "true"}}},
    },
    "sidecar": {"containerName": "wd"},
}


@pytest.fixture(scope="module")
def groups() -> list[dict[str, Any]]:
    return alert_groups()


def write_rule_file(tmp_path: Path, groups: list[dict[str, Any]], tests: Path) -> Path:
    """The rendered groups as a Prometheus rule file, with the unit tests next to it."""
    path = tmp_path / "agent-watchdog.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    unit_tests = yaml.safe_load(tests.read_text())
    assert unit_tests["rule_files"] == [path.name]
    (tmp_path / tests.name).write_text(yaml.safe_dump(unit_tests, sort_keys=False))
    return path


@pytest.fixture
def rule_file(tmp_path: Path, groups: list[dict[str, Any]]) -> Path:
    return write_rule_file(tmp_path, groups, UNIT_TESTS)


def promtool(*args: str | Path) -> str:
    done = subprocess.run([binary("promtool"), *map(str, args)], capture_output=True,
                          text=True, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def test_the_chart_ships_the_rule_file_with_absolute_runbook_urls(
        groups: list[dict[str, Any]]) -> None:
    shipped = yaml.safe_load(ALERTS.read_text())["groups"]
    for group in shipped:
        for rule in group["rules"]:
            assert "runbook_url" not in rule["annotations"], "the chart adds the runbook URL"
            rule["annotations"]["runbook_url"] = f"{RUNBOOK_URL}#{rule['alert'].lower()}"
    assert groups == shipped


def test_promtool_checks_the_rendered_rules(rule_file: Path,
                                            groups: list[dict[str, Any]]) -> None:
    output = promtool("check", "rules", rule_file)
    assert f"SUCCESS: {sum(len(g['rules']) for g in groups)} rules found" in output


def test_promtool_unit_tests_pass_on_the_rendered_rules(rule_file: Path) -> None:
    output = promtool("test", "rules", rule_file.parent / UNIT_TESTS.name)
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


def test_every_alert_has_for_severity_summary_description_and_runbook(
        groups: list[dict[str, Any]]) -> None:
    runbook = RUNBOOK.read_text()
    headings = set(re.findall(r"^## (\w+)$", runbook, re.MULTILINE))
    for rule in alert_rules(groups):
        name = rule["alert"]
        assert re.fullmatch(r"AgentWatchdog[A-Z]\w+", name), name
        assert re.fullmatch(r"([0-9]+[smhd])+", rule.get("for", "")), f"{name}: no `for`"
        assert rule["labels"]["severity"] in SEVERITIES, name
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], name
        assert annotations["runbook_url"] == f"{RUNBOOK_URL}#{name.lower()}", name
        assert name in headings, f"docs/alerts.md has no section '## {name}'"
        assert f"[{name}](#{name.lower()})" in runbook, f"{name} missing from the runbook table"
    assert headings == {rule["alert"] for rule in alert_rules(groups)}, "a stale runbook section"


def test_the_runbook_table_gives_each_alert_its_rules_severity_and_for() -> None:
    """docs/alerts.md's table: one row per shipped alert, in the rule file's order, with the
    severity and ``for`` of the rule file (the chart's file, as a reader copies it)."""
    shipped = [(rule["alert"], rule["labels"]["severity"], rule["for"])
               for group in yaml.safe_load(ALERTS.read_text())["groups"]
               for rule in group["rules"]]
    rows = re.findall(r"^\| \[(\w+)\]\(#\w+\) \| (\S+) \| .* \| (\S+) \|$",
                      RUNBOOK.read_text(), re.MULTILINE)
    assert rows == shipped


def test_every_aggregation_keeps_cluster_and_namespace(groups: list[dict[str, Any]]) -> None:
    for rule in alert_rules(groups):
        clauses = re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", rule["expr"])
        for clause in clauses:
            labels = [label.strip() for label in clause.split(",")]
            assert labels[:2] == ["cluster", "namespace"], (rule["alert"], clause)
        if not clauses:  # no aggregation: the series keep every label they have
            assert not re.search(r"\b(sum|max|min|count|avg)\b", rule["expr"]), rule["alert"]


def test_the_absent_alert_pages_for_a_running_pod_only(groups: list[dict[str, Any]]) -> None:
    """Agents scaled to zero and completed Jobs have no Running pod: nothing to page about."""
    [absent] = [r for r in alert_rules(groups) if r["alert"] == "AgentWatchdogAbsent"]
    assert "absent(" not in absent["expr"]
    assert 'kube_pod_status_phase{phase="Running"}' in absent["expr"]
    assert absent["expr"].count('container="watchdog"') == 2


# -- the per-alert values -------------------------------------------------------------------

@pytest.fixture(scope="module")
def overridden() -> list[dict[str, Any]]:
    return alert_groups(OVERRIDES)


def test_values_override_disable_and_label_alerts(overridden: list[dict[str, Any]],
                                                  groups: list[dict[str, Any]]) -> None:
    rules = {rule["alert"]: rule for rule in alert_rules(overridden)}
    defaults = {rule["alert"]: rule for rule in alert_rules(groups)}
    assert set(defaults) - set(rules) == {"AgentWatchdogErrorLoops"}
    stuck = rules["AgentWatchdogRunStuck"]
    assert (stuck["for"], stuck["labels"]) == ("2m", {
        "severity": "critical", "page": "true", "team": "platform"})
    for name, rule in rules.items():
        assert rule["labels"]["team"] == "platform"
        assert rule["annotations"]["runbook_url"] == (
            f"https://wiki.example.com/agents/alerts#{name.lower()}")
        assert rule["annotations"]["dashboard"] == "https://grafana.example.com/d/agent-watchdog"
        if name != "AgentWatchdogRunStuck":
            assert rule["for"] == defaults[name]["for"]
            assert rule["labels"]["severity"] == defaults[name]["labels"]["severity"]
    assert rules["AgentWatchdogAbsent"]["expr"].count('container="wd"') == 2


def test_per_agent_alerts_link_to_the_agents_traces(overridden: list[dict[str, Any]],
                                                     groups: list[dict[str, Any]]) -> None:
    linked = {rule["alert"]: rule["annotations"].get("trace_search_url")
              for rule in alert_rules(overridden)}
    per_agent = {name for name, rule in linked.items() if rule is not None}
    assert per_agent == {
        "AgentWatchdogRunStuck", "AgentWatchdogRunIdle", "AgentWatchdogAbortRateHigh",
        "AgentWatchdogBudgetExhaustionHigh", "AgentWatchdogSpendHigh",
        "AgentWatchdogModelUpstreamErrors", "AgentWatchdogInterventionRequired"}
    assert linked["AgentWatchdogRunIdle"] == (
        "https://jaeger.example.com/search?service={{ $labels.agent | urlquery }}"
        "&tags=k8s.namespace:{{ $labels.namespace | urlquery }}")
    # without the value, no alert carries the annotation
    assert all("trace_search_url" not in rule["annotations"] for rule in alert_rules(groups))


def test_promtool_unit_tests_pass_on_the_overridden_rules(
        tmp_path: Path, overridden: list[dict[str, Any]]) -> None:
    rule_file = write_rule_file(tmp_path, overridden, OVERRIDE_TESTS)
    assert "SUCCESS" in promtool("check", "rules", rule_file)
    assert "SUCCESS" in promtool("test", "rules", tmp_path / OVERRIDE_TESTS.name)


@pytest.mark.parametrize(("values", "message"), [
    ({"runbookUrl": "docs/alerts.md"}, "runbookUrl"),
    ({"traceSearchUrl": "https://jaeger.example.com/search"}, "traceSearchUrl"),
    ({"runbookUrl": RUNBOOK_URL, "disabled": {"AgentWatchdogRunStuk": True}},
     "no alert named AgentWatchdogRunStuk (the alerts: AgentWatchdogAbortRateHigh"),
    ({"runbookUrl": RUNBOOK_URL, "customRules": {"AgentWatchdogRunIdle": {"for": "5"}}},
     "for"),
    ({"runbookUrl": RUNBOOK_URL, "customRules": {"AgentWatchdogRunIdle": {"severity": "high"}}},
     "severity"),
])
def test_values_that_cannot_work_are_refused(values: dict[str, Any], message: str) -> None:
    with helm_python.Chart.load(str(CHART)) as chart, pytest.raises(Exception) as failure:
        chart.render({"prometheusRule": {"enabled": True, **values}}, name="watchdog",
                     namespace="agents")
    assert message in str(failure.value)
