"""Decision logs: a real sidecar process with ``log_format: json``, a real agent exporting
OTLP/HTTP, a long-poll, an ack and a webhook receiver; every stderr line is one JSON object and
the decisions are there as events with their fields — and no secret is."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.harness import http_request, http_served, run_detail, wait_until
from tests.processes import fresh_ports, running_sidecar, serve_env
from tests.scripted import ScriptedAgent
from watchdog.shell import logs

RUN_ID = "job:logged-1"
HOOK_SECRET = "hook-secret-0123456789abcdef"
URL_TOKEN = "url-token-s3cr3t"
PACK = """apiVersion: agent-watchdog/v1
kind: RulePack
name: logs
rules:
  - name: two-tools-stop
    when: run.tool_calls >= 2
    action: abort
    severity: critical
    message: "stop: ${run.tool_calls} tool calls"
  - name: reads-a-tool-not-called
    when: run.tools["fetch"] > 0
    action: notify
    message: fetched
"""


@contextmanager
def webhook_receiver() -> Iterator[tuple[str, list[bytes]]]:
    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with http_served(Handler) as url:
        yield f"{url}/hook?token={URL_TOKEN}", received


def test_decisions_are_json_events(tmp_path: Path) -> None:
    pack = tmp_path / "pack.yaml"
    pack.write_text(PACK)
    ports = fresh_ports()
    log_file = tmp_path / "stderr.log"
    with webhook_receiver() as (hook_url, received), log_file.open("w") as stderr:
        hooks = json.dumps([{"name": "ops", "url": hook_url, "secret": HOOK_SECRET}])
        env = serve_env(tmp_path / "state", ports, WATCHDOG_LOG_FORMAT="json",
                        WATCHDOG_RULES=str(pack), WATCHDOG_DEFAULT_RULES="false",
                        WATCHDOG_WEBHOOKS=hooks)
        with running_sidecar(env, ports["metrics"], stderr=stderr):
            api = f"http://127.0.0.1:{ports['api']}"
            agent = ScriptedAgent(f"http://127.0.0.1:{ports['otlp_http']}", RUN_ID, "logger")
            agent.tool("search", {"q": 1})
            agent.tool("search", {"q": 2})
            status, body = http_request(
                "GET", f"{api}/v1/runs/{RUN_ID}/directives?after=0&wait=10")
            assert status == 200 and len(json.loads(body)["directives"]) == 1, body
            directive = json.loads(body)["directives"][0]
            status, _ = http_request("POST", f"{api}/v1/runs/{RUN_ID}/ack",
                                     json.dumps({"seq": 1}).encode(),
                                     {"Content-Type": "application/json"})
            assert status == 200
            agent.finish("partial answer")
            wait_until(lambda: (run_detail(api, RUN_ID) or {}).get("state") == "ended",
                       what="the run to end")
            wait_until(lambda: received, what="the webhook delivery")
            wait_until(lambda: '"channel": "webhook"' in log_file.read_text(),
                       what="the webhook delivery's log line")
    lines = log_file.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= record.keys() for record in records)
    events = {(r["event"], r.get("channel")): r for r in records if "event" in r}
    common = {"level": "info", "logger": "watchdog.decisions"}
    assert events[("rule_fired", None)].items() >= {
        **common, "rule": "two-tools-stop", "action": "abort", "severity": "critical",
        "run": RUN_ID, "agent": "logger", "escalation": False}.items()
    sent = {"id": directive["id"], "run": RUN_ID, "seq": 1, "action": "abort",
            "rule": "two-tools-stop"}
    assert events[("directive_sent", "longpoll")].items() >= {
        **common, **sent, "outcome": "sent"}.items()
    assert events[("directive_sent", "webhook")].items() >= {
        **common, **sent, "outcome": "delivered", "hook": "ops", "attempt": 1}.items()
    assert events[("directive_acked", None)].items() >= {
        **common, "run": RUN_ID, "seq": 1, "acked_seq": 1}.items()
    assert events[("run_ended", None)].items() >= {
        **common, "run": RUN_ID, "agent": "logger", "terminal_state": "aborted",
        "reason": "two-tools-stop", "has_final_answer": True}.items()
    # a rule that fails to evaluate (no "fetch" key) is said once, with the error and the run
    # (only rule_errors_total counted it: what failed, and where, was nowhere)
    failed = [r for r in records if r.get("event") == "rule_error"]
    assert len(failed) == 1, failed
    assert failed[0].items() >= {"level": "warning", "logger": "watchdog.decisions",
                                 "rule": "reads-a-tool-not-called", "errors": 1,
                                 "run": RUN_ID}.items()
    assert failed[0]["error"].startswith("when: ") and "fetch" in failed[0]["error"], failed
    text = log_file.read_text()
    for secret in (HOOK_SECRET, URL_TOKEN):
        assert secret not in text


@pytest.fixture
def root_logging() -> Iterator[None]:
    """``logs.setup`` configures the root logger (as ``watchdog serve`` does); put it back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_text_lines_and_exceptions_in_json(capsys: pytest.CaptureFixture[str],
                                           root_logging: None) -> None:
    """Text: ``event key=value ...`` (values with spaces quoted); JSON: a traceback is a
    field of its one line."""
    logs.setup("info", "text")
    logs.event("run_ended", run="job 7", agent="a", terminal_state=None)
    logs.setup("info", "json")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("watchdog").exception("it failed")
    out = capsys.readouterr().err.splitlines()
    assert out[0].endswith(' INFO watchdog.decisions: run_ended run="job 7" agent=a '
                           'terminal_state=-'), out
    assert len(out) == 2
    line = json.loads(out[1])
    assert line["message"] == "it failed" and "ValueError: boom" in line["exception"]


def test_a_failing_rule_is_logged_at_its_first_error_then_once_a_minute(
        capsys: pytest.CaptureFixture[str], root_logging: None) -> None:
    """Every failure counts in rule_errors_total; the log says the first, then at most one line
    each RULE_ERROR_LOG_INTERVAL per rule with the failures since, however often it fails."""
    logs.setup("info", "json")
    failing = logs.RuleErrorLog()
    for second in range(0, 150):  # three failures a second for 150 s, of two rules
        failing.failed("a", 2, f"run-{second}", "when: no such key: 'fetch'", 1000.0 + second)
        failing.failed("b", 1, f"run-{second}", "message: ${x}: bad", 1000.0 + second)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(r["rule"], r["errors"], r["run"], r["level"]) for r in lines] == [
        ("a", 2, "run-0", "warning"), ("b", 1, "run-0", "warning"),
        ("a", 120, "run-60", "warning"), ("b", 60, "run-60", "warning"),
        ("a", 120, "run-120", "warning"), ("b", 60, "run-120", "warning")]
    assert lines[0]["error"] == "when: no such key: 'fetch'"


def test_a_text_line_never_carries_a_spans_control_characters(tmp_path: Path) -> None:
    """A name is the agent's to choose: one with ESC, a carriage return, DEL or a C1 control
    and no space is quoted and escaped in a text line as one with a space is, never written raw
    (to a terminal that tails the log, ESC clears the screen and CR draws over the line)."""
    agent_name = "ag\x1b[2J\x1b]0;t\x07\rrun_ended\x7f\x9b"
    ports = fresh_ports()
    log_file = tmp_path / "stderr.log"
    with log_file.open("w") as stderr:
        env = serve_env(tmp_path / "state", ports, WATCHDOG_LOG_FORMAT="text")
        with running_sidecar(env, ports["metrics"], stderr=stderr):
            agent = ScriptedAgent(f"http://127.0.0.1:{ports['otlp_http']}", RUN_ID, agent_name)
            agent.tool("search", {"q": 1})
            agent.finish("done")
            wait_until(lambda: "run_ended" in log_file.read_text(), what="the run's end")
    [line] = [line for line in log_file.read_text().splitlines() if "run_ended run=" in line]
    assert "agent=\"ag\\u001b[2J\\u001b]0;t\\u0007\\rrun_ended\\u007f\\u009b\" " in line, line
    assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in line), line
