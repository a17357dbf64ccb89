"""The chart's PrometheusRule with and without ``prometheusRule.runbookUrl``: optional, as in
kube-prometheus-stack. Given, each alert links to its section of docs/alerts.md; not given, the
same alerts render without the link. On the chart directory and on its package, with the
helpers of tests/test_helm_chart.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.test_dist import packaged_chart
from tests.test_helm_chart import CHART, RUNBOOK_URL, ChartSource, one, render, validate


@pytest.fixture(scope="module", params=["directory", "package"])
def source(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> ChartSource:
    if request.param == "directory":
        return ChartSource(CHART, None)
    archive = packaged_chart()
    expanded: Path = tmp_path_factory.mktemp("package")
    helm.expand(expanded, archive)
    return ChartSource(expanded / CHART.name, archive)


@pytest.fixture(scope="module")
def chart(source: ChartSource) -> Iterator[helm.Chart]:
    with helm.Chart.load(source.loadable) as loaded:
        yield loaded


KUBE_PROMETHEUS_STACK = {"prometheusRule": {"enabled": True,
                                            "labels": {"release": "kube-prometheus-stack"}}}


def shipped_alerts(source: ChartSource) -> list[dict[str, Any]]:
    return [rule for path in sorted((source.directory / "alerts").glob("*.yaml"))
            for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"] if "alert" in rule]


def rendered_alerts(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [rule for group in one(manifests, "PrometheusRule")["spec"]["groups"]
            for rule in group["rules"] if "alert" in rule]


def test_alerts_render_without_a_runbook_url(source: ChartSource, chart: helm.Chart) -> None:
    manifests = render(chart, KUBE_PROMETHEUS_STACK)
    validate(manifests)
    alerts = rendered_alerts(manifests)
    shipped = shipped_alerts(source)
    assert alerts and len(alerts) == len(shipped)
    for rendered, original in zip(alerts, shipped, strict=True):
        assert "runbook_url" not in rendered["annotations"], rendered
        assert rendered["annotations"] == original.get("annotations", {})
        assert {k: rendered[k] for k in ("alert", "expr", "for", "labels")} == {
            k: original[k] for k in ("alert", "expr", "for", "labels")}
    assert one(manifests, "PrometheusRule")["metadata"]["labels"]["release"] == \
        "kube-prometheus-stack"


def test_a_runbook_url_links_each_alert_to_its_section(chart: helm.Chart) -> None:
    plain = rendered_alerts(render(chart, KUBE_PROMETHEUS_STACK))
    values = {"prometheusRule": {**KUBE_PROMETHEUS_STACK["prometheusRule"],
                                 "runbookUrl": RUNBOOK_URL}}
    manifests = render(chart, values)
    validate(manifests)
    linked = rendered_alerts(manifests)
    for with_link, without in zip(linked, plain, strict=True):
        url = with_link["annotations"].pop("runbook_url")
        assert url == f"{RUNBOOK_URL}#{with_link['alert'].lower()}"
        assert with_link == without  # the link is all that differs


def test_an_annotation_of_ones_own_is_kept_without_a_runbook_url(chart: helm.Chart) -> None:
    values = {"prometheusRule": {"enabled": True, "additionalRuleAnnotations": {
        "runbook_url": "https://runbooks.example.com/agents"}}}
    for alert in rendered_alerts(render(chart, values)):
        assert alert["annotations"]["runbook_url"] == "https://runbooks.example.com/agents"


@pytest.mark.parametrize("url", ["docs/alerts.md", "https://wiki.example.com/alerts#top",
                                 "ftp://wiki.example.com/alerts"])
def test_the_schema_refuses_a_runbook_url_that_is_not_one(chart: helm.Chart, url: str) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        render(chart, {"prometheusRule": {"enabled": True, "runbookUrl": url}})
    assert "/prometheusRule/runbookUrl" in str(refused.value)
