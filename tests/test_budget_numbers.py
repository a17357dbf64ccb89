"""One number format for budgets everywhere: an integral budget is an integer (``5``, never
``5.0``) in the API's signals and lists, the sync answer, the rules listing, directives and
their messages, reports and the CLI; only the seconds left may be a fraction. Through a real
sidecar (a rule pack's default budget and one a run announces in its spans) and the real CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.harness import RunningServer, http_request, running_server, sidecar_config, wait_until
from tests.spans import SpanMaker, encode, tool_attrs
from watchdog.core.bounds import budget_limit
from watchdog.shell.cli import main

PACK = """apiVersion: agent-watchdog/v1
kind: RulePack
name: budgets
budgets:
  - agents: ["*"]
    max_tool_calls: 5
    max_seconds: 3600
"""
RUN = "budgeted"
ANNOUNCED = "announced"


def budgets_in(document: Any) -> list[dict[str, Any]]:
    """Every ``budget`` mapping anywhere in an API answer."""
    found: list[dict[str, Any]] = []
    if isinstance(document, dict):
        for key, value in document.items():
            if key in ("budget", "budgets"):
                found.extend(value if isinstance(value, list) else [value])
            else:
                found.extend(budgets_in(value))
    elif isinstance(document, list):
        for item in document:
            found.extend(budgets_in(item))
    return found


def assert_integral(document: Any, at_least: int = 1) -> None:
    budgets = [b for b in budgets_in(document) if b]
    assert len(budgets) >= at_least, document
    for budget in budgets:
        for key, value in budget.items():
            if key == "agents":
                continue
            if key == "remaining_seconds":
                assert isinstance(value, (int, float)), budget
            else:
                assert type(value) is int, (key, value, budget)


def export(sidecar: RunningServer, run_id: str, attrs: dict[str, Any], tools: int) -> None:
    maker = SpanMaker()
    run = {"watchdog.run.id": run_id, "watchdog.agent.name": "counter", **attrs}
    root = maker.open("invoke_agent counter", {**run, "gen_ai.operation.name": "invoke_agent"})
    for index in range(tools):
        maker.span(f"execute_tool t{index}",
                   {**run, **tool_attrs(f"t{index}", json.dumps({"n": index}))}, parent=root)
    status, _ = http_request("POST", sidecar.otlp_http + "/v1/traces",
                             encode(maker.take()).SerializeToString(),
                             {"Content-Type": "application/x-protobuf"})
    assert status == 200


@pytest.fixture
def budgeted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("WATCHDOG_URL", raising=False)
    monkeypatch.delenv("WATCHDOG_API_TOKEN", raising=False)
    pack = tmp_path / "budgets.yaml"
    pack.write_text(PACK)
    with running_server(sidecar_config(tmp_path / "state", rules=(str(pack),))) as sidecar:
        export(sidecar, RUN, {}, 2)
        export(sidecar, ANNOUNCED, {"watchdog.budget.max_tool_calls": 8.0,
                                    "watchdog.budget.max_tokens": 1000}, 5)
        sidecar.flush()
        wait_until(lambda: len(sidecar.get_json(f"/v1/runs/{RUN}")["directives"]) >= 1,
                   what="the budget countdown")
        yield sidecar


def test_the_api_shows_integral_budgets_as_integers(budgeted: RunningServer) -> None:
    detail = budgeted.get_json(f"/v1/runs/{RUN}")
    assert detail["signals"]["budget"]["max_tool_calls"] == 5
    assert detail["signals"]["budget"]["remaining_tool_calls"] == 3
    assert detail["signals"]["budget"]["max_seconds"] == 3600
    assert_integral(detail, at_least=3)  # signals, the run, the countdown directive
    announced = budgeted.get_json(f"/v1/runs/{ANNOUNCED}")
    assert announced["signals"]["budget"]["max_tool_calls"] == 8  # announced as 8.0
    assert_integral(announced)
    assert_integral(budgeted.get_json("/v1/runs"), at_least=0)  # the list has no budgets
    assert_integral(budgeted.get_json("/v1/rules"))
    status, body = http_request("POST", f"{budgeted.api}/v1/runs/{RUN}/sync", b"",
                                {"Content-Type": "application/x-protobuf"})
    assert status == 200
    assert_integral(json.loads(body))
    status, body = http_request("GET", f"{budgeted.api}/v1/runs/{RUN}/report",
                                headers={"Accept": "application/json"})
    assert status == 200
    assert_integral(json.loads(body))
    (countdown, *_) = detail["directives"]
    assert "3 of 5 tool calls left" in countdown["message"]
    assert ".0" not in countdown["message"] and "5.0" not in countdown["report_prompt"]


def test_the_cli_shows_integral_budgets_as_integers(budgeted: RunningServer,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--url", budgeted.api]
    assert main(["report", RUN, *url]) == 0
    markdown = capsys.readouterr().out
    assert "tool calls 3 of 5 left" in markdown and "seconds " in markdown
    assert "5.0" not in markdown and "3600.0" not in markdown
    for argv, at_least in ((["report", RUN, "--json"], 1), (["runs", "-o", "json"], 0),
                           (["directives", RUN, "-o", "json"], 1)):
        assert main([*argv, *url]) == 0
        assert_integral(json.loads(capsys.readouterr().out), at_least)
    assert main(["directives", RUN, *url, "-o", "wide"]) == 0
    table = capsys.readouterr().out
    assert "3 of 5 tool calls left" in table and "5.0" not in table


def test_a_budget_set_in_otel_resource_attributes_is_a_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``OTEL_RESOURCE_ATTRIBUTES`` gives every value as a string: a budget written there is
    read as its number (through the OTel SDK's own resource and exporter), and a count that is
    no whole number is no budget (as ``4.5`` tool calls written as a number is not)."""
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES",
                       "service.name=env-agent,watchdog.run.id=env-run,"
                       "watchdog.budget.max_tool_calls=2,watchdog.budget.max_cost_usd=0.5,"
                       "watchdog.budget.max_tokens=4.5")
    resource = Resource.create()
    assert resource.attributes["watchdog.budget.max_tool_calls"] == "2"  # (a string)
    with running_server(sidecar_config(tmp_path / "state")) as sidecar:
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
            endpoint=sidecar.otlp_http + "/v1/traces", timeout=10)))
        tracer = provider.get_tracer("env-agent")
        for index in range(2):
            with tracer.start_as_current_span("execute_tool search", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                    "gen_ai.tool.call.arguments": json.dumps({"q": index})}):
                pass
        provider.shutdown()
        run = wait_until(lambda: sidecar.get_json("/v1/runs/env-run")
                         if http_request("GET", sidecar.api + "/v1/runs/env-run")[0] == 200
                         else None, "the run")
        wait_until(lambda: sidecar.get_json("/v1/runs/env-run")["signals"]["tool_calls"] == 2,
                   "both tool calls")
        budget = sidecar.get_json("/v1/runs/env-run")["signals"]["budget"]
        assert {key: budget.get(key) for key in ("max_tool_calls", "max_cost_usd",
                                                  "max_tokens")} == {
            "max_tool_calls": 2, "max_cost_usd": 0.5, "max_tokens": None}, run
        assert budget["remaining_tool_calls"] == 0
        # (each tool span a root of its own: the run ends with the second, at its budget)
        assert sidecar.get_json("/v1/runs/env-run")["terminal_state"] == "tool_limit_reached"


@pytest.mark.parametrize(("value", "whole", "text", "limit"), [
    (2, True, False, 2.0), (2.0, True, False, 2.0), (4.5, True, False, None),
    (4.5, False, False, 4.5), ("2", True, True, 2.0), (" 20 ", True, True, 20.0),
    ("2", True, False, None), ("4.5", True, True, None), ("0.5", False, True, 0.5),
    ("abc", False, True, None), ("nan", False, True, None), ("inf", False, True, None),
    ("1e99", False, True, None), (-1, False, False, None), (True, False, True, None),
])
def test_a_budget_limit_is_a_finite_number_in_range_whole_for_counts(
        value: object, whole: bool, text: bool, limit: float | None) -> None:
    assert budget_limit(value, whole, text) == limit
