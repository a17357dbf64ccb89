"""The default rule pack end to end: real OTel SDK exporters feed a running sidecar, the
sidecar's rules decide, and the decisions come back as directives on the control API."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks.harness import RECORDINGS, replay
from tests.harness import RunningServer, http_request, running_server, sidecar_config, wait_until
from tests.scripted import ScriptedAgent
from watchdog.shell.clock import ManualClock


def directives(server: RunningServer, run_id: str) -> list[dict[str, Any]]:
    return server.get_json(f"/v1/runs/{run_id}/directives?after=0")["directives"]  # type: ignore[no-any-return]


@contextmanager
def sidecar_with_clock(tmp_path: Path, clock: ManualClock | None = None
                       ) -> Iterator[RunningServer]:
    config = sidecar_config(tmp_path / "state", eval_interval=3600.0)  # ticks only when asked
    with running_server(config, clock=clock) as server:
        yield server


def test_a_looping_agent_gets_wind_down_then_abort_with_loop_detected(tmp_path: Path) -> None:
    with sidecar_with_clock(tmp_path) as server:
        agent = ScriptedAgent(server.otlp_http, "loop-1", "looper")
        for _ in range(4):
            agent.tool("search", {"query": "the same thing", "page": 1}, result="no results")
        first = wait_until(lambda: directives(server, "loop-1"))
        assert [d["action"] for d in first] == ["wind_down"]
        assert first[0]["terminal_state"] == "loop_detected"
        assert first[0]["rule"] in ("tool-cycle", "repeated-tool-call")
        assert "report" in first[0]["report_prompt"].lower()

        for _ in range(2):  # the grace: two more tool calls are allowed...
            agent.tool("search", {"page": 1, "query": "the same thing"}, result="no results")
        assert len(directives(server, "loop-1")) == 1
        agent.tool("search", {"page": 1, "query": "the same thing"}, result="no results")  # past
        both = wait_until(lambda: len(directives(server, "loop-1")) >= 2 and
                        directives(server, "loop-1"))
        assert [d["action"] for d in both] == ["wind_down", "abort"]
        assert both[1]["escalation"] is True
        assert both[1]["terminal_state"] == "loop_detected"
        assert [d["seq"] for d in both] == [1, 2]

        agent.finish()
        run = server.get_json("/v1/runs/loop-1")
        assert run["terminal_state"] == "loop_detected"
        assert run["signals"]["repeated_tool_call"] == 7  # key order did not matter
        assert len(run["directives"]) == 2


def test_an_agent_failing_the_same_way_is_aborted_as_an_error_loop(tmp_path: Path) -> None:
    with sidecar_with_clock(tmp_path) as server:
        agent = ScriptedAgent(server.otlp_http, "errors-1", "failing")
        for attempt in range(5):
            agent.tool("write_file", {"path": f"/tmp/out-{attempt}.txt"},
                       error=f"disk full while writing /tmp/out-{attempt}.txt ({attempt} bytes)")
        found = wait_until(lambda: directives(server, "errors-1"))
        assert [(d["rule"], d["action"]) for d in found] == [("error-loop", "abort")]
        assert found[0]["terminal_state"] == "loop_detected"
        assert "disk full" in found[0]["message"]
        agent.finish()
        assert server.get_json("/v1/runs/errors-1")["terminal_state"] == "loop_detected"


def test_slow_but_progressing_is_not_aborted_while_stuck_is(tmp_path: Path) -> None:
    clock = ManualClock()
    with sidecar_with_clock(tmp_path, clock) as server:
        slow = ScriptedAgent(server.otlp_http, "slow-1", "researcher")
        stuck = ScriptedAgent(server.otlp_http, "stuck-1", "researcher")
        slow.chat(messages=3)
        stuck.chat(messages=3)
        # (both read before the clock moves: a run first seen later is idle for less)
        wait_until(lambda: {run["id"] for run in server.get_json("/v1/runs?state=active")["runs"]}
                   == {"slow-1", "stuck-1"}, "both runs read")
        assert server.server.service is not None
        tick = server.server.service.tick

        for minute in range(1, 8):  # 7 minutes: the slow one reports growth every minute
            clock.advance(60)
            status, _ = http_request("POST", server.api + "/v1/runs/slow-1/heartbeat",
                                     json.dumps({"messages": 3 + minute}).encode(),
                                     {"Content-Type": "application/json"})
            assert status == 200
            server.call(tick)
        server.stored()  # what the last tick decided

        assert directives(server, "slow-1") == []
        aborted = directives(server, "stuck-1")
        assert [(d["rule"], d["action"], d["terminal_state"]) for d in aborted] == [
            ("idle-timeout", "abort", "idle_timeout")]
        assert server.get_json("/v1/runs/slow-1")["signals"]["messages"] == 10
        stuck.finish()
        assert server.get_json("/v1/runs/stuck-1")["terminal_state"] == "idle_timeout"
        slow.chat(messages=11)
        slow.finish()
        assert server.get_json("/v1/runs/slow-1")["terminal_state"] in ("completed", "no_response")


def test_rules_listing_and_reload(tmp_path: Path) -> None:
    pack = tmp_path / "mine.yaml"
    pack.write_text("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: mine\n"
                    "disable: [idle-timeout]\n")
    config = sidecar_config(tmp_path / "state", rules=(str(pack),), rules_watch_interval=0.0)
    with running_server(config) as server:
        names = {r["name"]: r for r in server.get_json("/v1/rules")["rules"]}
        assert names["idle-timeout"]["enabled"] is False
        assert names["error-loop"]["enabled"] is not False

        pack.write_text(pack.read_text() + "rules:\n  - name: broken\n    when: run.nope > 1\n"
                        "    action: notify\n    message: x\n")
        status, body = http_request("POST", server.api + "/-/reload")
        assert status == 422
        assert "nope" in json.loads(body)["error"]["message"]
        assert "broken" not in {r["name"] for r in server.get_json("/v1/rules")["rules"]}
        status, body = http_request("GET", server.metrics + "/metrics")
        assert b"agent_watchdog_rules_reload_success 0.0" in body
        assert b'rule_errors_total{rule="broken"}' not in body  # a refused rule is not loaded

        pack.write_text(pack.read_text().replace("run.nope > 1", "run.tool_calls > 100"))
        status, _ = http_request("POST", server.api + "/-/reload")
        assert status == 200
        assert "broken" in {r["name"] for r in server.get_json("/v1/rules")["rules"]}
        # its error count is shown at 0 at once, so its first error is a step alerts see
        status, body = http_request("GET", server.metrics + "/metrics")
        assert b'agent_watchdog_rule_errors_total{rule="broken"} 0.0' in body.splitlines()


def test_a_reload_that_fails_keeps_the_rules_and_says_why(tmp_path: Path) -> None:
    """A pack whose expression holds what CEL cannot take (an unpaired surrogate, as YAML's
    escape writes it) is a pack problem with its line, not a failed request: 422, the rules
    kept, rules_reload_success 0."""
    pack = tmp_path / "mine.yaml"
    head = "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: mine\n"
    pack.write_text(head)
    config = sidecar_config(tmp_path / "state", rules=(str(pack),), rules_watch_interval=0.0)
    with running_server(config) as server:
        before = server.get_json("/v1/rules")["rules"]
        for when, message in (('"run.agent == \\"\\ud800\\""', "x"),
                              ("run.tool_calls > 3", '"\\udfff"')):
            pack.write_text(head + f"rules:\n  - name: odd\n    when: {when}\n"
                            f"    action: notify\n    message: {message}\n")
            status, body = http_request("POST", server.api + "/-/reload")
            assert status == 422, body
            said = json.loads(body)["error"]["message"]
            assert "keeping the previous rules" in said and "mine.yaml:" in said
            assert "unpaired surrogate" in said
            assert server.get_json("/v1/rules")["rules"] == before
            status, metrics = http_request("GET", server.metrics + "/metrics")
            assert b"agent_watchdog_rules_reload_success 0.0" in metrics


def test_a_reload_names_a_rule_file_whose_name_is_no_utf8_readably(tmp_path: Path) -> None:
    """A rule file in a watched directory named in another encoding (Latin-1 ``é``: byte
    0xE9) is named with a backslash escape in the 422, never a surrogate escape."""
    rules = tmp_path / "rules"
    rules.mkdir()
    config = sidecar_config(tmp_path / "state", rules=(str(rules),), rules_watch_interval=0.0)
    with running_server(config) as server:
        (rules / os.fsdecode(b"r\xe9gles.yaml")).write_text(
            "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: mine\n"
            "rules:\n  - {name: a, when: 'x >', action: notify, message: m}\n")
        status, body = http_request("POST", server.api + "/-/reload")
        assert status == 422, body
        said = json.loads(body)["error"]["message"]
        assert f"{rules}/r\\xe9gles.yaml:5: rule a: when: syntax error" in said, said
        assert "\\udc" not in body.decode() and "\udce9" not in said
        (rules / os.fsdecode(b"r\xe9gles.yaml")).write_text(
            "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: mine\n"
            "rules:\n  - {name: a, when: 'run.tool_calls > 9', action: notify, message: m}\n")
        status, body = http_request("POST", server.api + "/-/reload")
        assert status == 200, body
        listing = server.get_json("/v1/rules")
        assert {r["name"]: r["source"] for r in listing["rules"]}["a"] == (
            f"{rules}/r\\xe9gles.yaml:5")


def test_a_reload_is_enforced_at_once_on_the_active_runs(tmp_path: Path) -> None:
    """A budget lowered below what an active run used aborts it as the reload is answered, not
    at its next span (no timer here: the reload's own evaluation does it)."""
    pack = tmp_path / "budget.yaml"
    head = "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: mine\n"
    budget = "budgets:\n  - agents: [budgeted]\n    max_tool_calls: {n}\n"
    pack.write_text(head + budget.format(n=50))
    config = sidecar_config(tmp_path / "state", rules=(str(pack),), rules_watch_interval=0.0,
                            eval_interval=3600.0)
    with running_server(config) as server:
        agent = ScriptedAgent(server.otlp_http, "b-1", "budgeted")
        for i in range(10):
            agent.tool("search", {"q": i}, result=f"found {i}")
        wait_until(lambda: server.get_json("/v1/runs/b-1")["signals"]["tool_calls"] == 10)
        assert [d["rule"] for d in directives(server, "b-1")] == []
        pack.write_text(head + budget.format(n=5))
        status, _ = http_request("POST", server.api + "/-/reload")
        assert status == 200
        found = directives(server, "b-1")  # (as the reload is answered: no wait)
        assert [(d["rule"], d["action"], d["terminal_state"]) for d in found] == [
            ("budget-exhausted", "abort", "tool_limit_reached")]
        agent.close()


def test_a_grace_continues_after_a_restart_as_its_wind_down_announced_it(
        tmp_path: Path) -> None:
    """A wind_down announced a grace of 2 tool calls; the sidecar restarts on a rule file that
    now gives 20: the run is held to the 2 it was told (escalated at its 3rd call past the
    wind_down), not to what the rule says now."""
    pack = tmp_path / "grace.yaml"
    rule = ("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: mine\nrules:\n"
            "  - name: wrap-up\n    agents: [graced]\n    when: run.tool_calls >= 2\n"
            "    action: wind_down\n    terminal_state: tool_limit_reached\n"
            "    grace: {{tool_calls: {n}}}\n    message: wrap up\n")
    pack.write_text(rule.format(n=2))
    config = sidecar_config(tmp_path / "state", rules=(str(pack),), rules_watch_interval=0.0,
                            eval_interval=3600.0)
    with running_server(config) as server:
        agent = ScriptedAgent(server.otlp_http, "g-1", "graced")
        for i in range(2):
            agent.tool("search", {"q": i}, result=f"found {i}")
        (wind_down,) = wait_until(lambda: directives(server, "g-1"))
        assert wind_down["grace"] == {"tool_calls": 2, "ends_at_tool_calls": 4}
    pack.write_text(rule.format(n=20))
    with running_server(config) as server:
        again = ScriptedAgent(server.otlp_http, "g-1", "graced")
        for i in range(2, 5):
            again.tool("search", {"q": i}, result=f"found {i}")
        found = wait_until(lambda: len(directives(server, "g-1")) == 2
                           and directives(server, "g-1"), "the grace's escalation")
        assert [(d["action"], d["escalation"], d["terminal_state"]) for d in found] == [
            ("wind_down", False, "tool_limit_reached"), ("abort", True, "tool_limit_reached")]
        assert "grace: 2 tool calls" in found[1]["message"]
        again.close()


@pytest.mark.parametrize("announced", [False, True])
def test_a_run_that_spends_its_budget_in_its_last_batch_is_tool_limit_reached(
        tmp_path: Path, announced: bool) -> None:
    """pydantic-ai's recorded run (three tools, then its answer) sent in one request, so it
    ends in the step that spends its budget of 3, before a rule could stop it: the rule pack's
    budget classifies it as an announced one does (its answer kept)."""
    lines = (RECORDINGS / "pydantic_ai_native" / "three_tools.jsonl").read_text().splitlines()
    requests = [json.loads(line) for line in lines if line.strip()]
    if announced:  # the budget on the spans, and none in the pack
        budget = {"key": "watchdog.budget.max_tool_calls", "value": {"intValue": "3"}}
        for request in requests:
            for resource in request["resourceSpans"]:
                resource["resource"]["attributes"].append(budget)
    one = tmp_path / "one_request.jsonl"
    one.write_text(json.dumps({"resourceSpans": [
        resource for request in requests for resource in request["resourceSpans"]]}) + "\n")
    pack = tmp_path / "budget.yaml"
    pack.write_text("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: mine\n" + (
        "" if announced else "budgets:\n  - agents: [pa_researcher]\n    max_tool_calls: 3\n"))
    config = sidecar_config(tmp_path / "state", rules=(str(pack),), eval_interval=3600.0)
    with running_server(config) as server:
        replay(server, one)
        (run,) = wait_until(lambda: server.get_json("/v1/runs?state=ended")["runs"], "the run")
        detail = server.get_json(f"/v1/runs/{run['id']}")
    assert (detail["signals"]["tool_calls"], detail["terminal_state"], detail["terminal_reason"],
            detail["has_final_answer"]) == (3, "tool_limit_reached", "budget", True)
