"""A real Prometheus for tests, and the alert rules as the chart ships them.

``make test`` installs the Debian ``prometheus`` package (which brings ``promtool``); when the
binaries are missing the tests that need them fail rather than skip, because the contract of
DESIGN §9 is what Prometheus stores, not what the endpoint prints.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import http_request, wait_until
from tests.ports import free_port
from tests.processes import answers

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm/agent-watchdog"
ALERTS = CHART / "alerts/agent-watchdog.yaml"

SCRAPE_INTERVAL = "1s"
WAIT_SECONDS = 20.0  # scrape every 1 s: a healthy setup answers within ~2 s
POLL_SECONDS = 0.2


def binary(name: str) -> str:
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if path is None:
        pytest.fail(f"{name} is not installed; `make test` installs the Debian package "
                    "prometheus (or run `make system-deps`)")
    return path


class Prometheus:
    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    def api(self, path: str, **params: str) -> Any:
        status, body = http_request("GET", f"{self.url}/api/v1/{path}?"
                                    + urllib.parse.urlencode(params), timeout=5)
        assert status == 200, (path, params, status, body[:500])
        return json.loads(body)["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def scalar(self, expr: str) -> float | None:
        """The value of a query that yields one series, or None while it yields none."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def diagnosis(self) -> str:
        targets = self.api("targets")["activeTargets"]
        health = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets]
        return f"targets: {health}\nprometheus log tail:\n{self.log.read_text()[-2000:]}"

    def wait_for(self, expected: dict[str, float]) -> None:
        """Poll until every query returns its expected value (bounded)."""
        self.wait_until(expected, lambda seen: seen == expected)

    def wait_for_at_least(self, expected: dict[str, float]) -> None:
        """Poll until every query returns at least its expected value (bounded)."""
        self.wait_until(expected, lambda seen: all(
            seen[expr] is not None and seen[expr] >= value  # type: ignore[operator]
            for expr, value in expected.items()))

    def wait_until(self, expected: dict[str, float],
                   done: Callable[[dict[str, float | None]], bool]) -> None:
        seen: dict[str, float | None] = {}

        def answered() -> bool:
            seen.update({expr: self.scalar(expr) for expr in expected})
            return done(seen)

        wait_until(answered, lambda: f"Prometheus to answer {expected}; it answers {seen}\n"
                   + self.diagnosis(), timeout=WAIT_SECONDS, every=POLL_SECONDS)


def start_prometheus(tmp_path: Path, target: str, job: str = "watchdog") -> Prometheus:
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {SCRAPE_INTERVAL}\n"
        f"  scrape_timeout: {SCRAPE_INTERVAL}\n"
        "scrape_configs:\n"
        f"  - job_name: {job}\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n")
    port = free_port()
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [binary("prometheus"), f"--config.file={config}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}",
             "--enable-feature=exemplar-storage", "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT)
    prometheus = Prometheus(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_until(lambda: process.poll() is not None or answers(prometheus.url + "/-/ready"),
                   lambda: f"prometheus to be ready:\n{log.read_text()}",
                   timeout=WAIT_SECONDS, every=POLL_SECONDS)
    except AssertionError:
        stop(process)
        raise
    if process.poll() is not None:
        pytest.fail(f"prometheus exited with {process.returncode}:\n{log.read_text()}")
    return prometheus


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


# -- the alert rules ------------------------------------------------------------------------------

# The runbook base URL the alert tests render the chart with (prometheusRule.runbookUrl).
RUNBOOK_URL = "https://git.example.com/platform/agent-watchdog/blob/v0.1.0/docs/alerts.md"


def alert_groups(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The rule groups of the PrometheusRule the chart renders with
    ``prometheusRule.enabled=true`` and ``runbookUrl`` (rendered offline by the Helm v4 library
    of helm-python-sdk, as the chart tests do); ``values`` are merged over those."""
    import helm_python

    merged: dict[str, Any] = {"prometheusRule": {"enabled": True, "runbookUrl": RUNBOOK_URL}}
    for key, value in (values or {}).items():
        merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) else value
    with helm_python.Chart.load(str(CHART)) as chart:
        manifests = chart.render(merged, name="watchdog", namespace="agents")
    rules = [doc for path, text in manifests.items() if not path.endswith("NOTES.txt")
             for doc in yaml.safe_load_all(text)
             if isinstance(doc, dict) and doc.get("kind") == "PrometheusRule"]
    assert len(rules) == 1, f"expected one PrometheusRule, got {len(rules)}: {list(manifests)}"
    groups: list[dict[str, Any]] = rules[0]["spec"]["groups"]
    return groups


def alert_rules(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]
