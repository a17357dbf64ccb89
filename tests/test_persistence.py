"""Runs and their activity logs survive a restart of the sidecar (same state dir)."""

from __future__ import annotations

import json
import sqlite3
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from tests.frameworks.harness import RECORDINGS, check_runs, recorded_spans, replay
from tests.frameworks.test_openai_agents import EXPECTED as EXPECTED_OPENAI_AGENTS
from tests.harness import (
    RunningServer,
    http_request,
    running_server,
    sidecar_config,
    wait_until,
)
from tests.processes import fresh_ports, running_sidecar, serve_env
from tests.test_encoding import stdlib_written_run
from watchdog.shell.state.store import DB_FILE


def tracer_to(server: RunningServer) -> tuple[TracerProvider, trace.Tracer]:
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=server.otlp_http + "/v1/traces")))
    return provider, provider.get_tracer("persistence-test")


def tool_span(tracer: trace.Tracer, run_id: str, tool: str, args: str, result: str,
              error: bool = False) -> None:
    with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
        "gen_ai.tool.call.arguments": args, "gen_ai.tool.call.result": result,
        "gen_ai.agent.call.id": run_id, "gen_ai.agent.name": "persistent",
    }) as span:
        if error:
            span.set_status(Status(StatusCode.ERROR, "disk full"))


def test_active_run_survives_restart_and_ends_with_full_counts(tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "state")
    run_id = "run-restart-1"
    with running_server(config) as first:
        provider, tracer = tracer_to(first)
        with tracer.start_as_current_span("invoke_agent persistent"):
            for i in range(3):
                tool_span(tracer, run_id, "read_file", f'{{"path": "/src/{i}.py"}}', f"file {i}")
            tool_span(tracer, run_id, "write_file", '{"path": "/src/x.py"}', "", error=True)
            provider.shutdown()  # the agent span itself never reaches this sidecar
        before = first.get_json(f"/v1/runs/{run_id}")
        assert before["state"] == "active"
        assert before["signals"]["tool_calls"] == 4

    with running_server(config) as second:
        after = second.get_json(f"/v1/runs/{run_id}")
        assert after["state"] == "active"
        assert after["signals"] == {**before["signals"],
                                    "elapsed_seconds": after["signals"]["elapsed_seconds"],
                                    "idle_seconds": after["signals"]["idle_seconds"]}
        provider, tracer = tracer_to(second)
        with tracer.start_as_current_span("invoke_agent persistent", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.call.id": run_id,
                "gen_ai.agent.name": "persistent", "final_result": "done"}):
            tool_span(tracer, run_id, "read_file", '{"path": "/src/0.py"}', "file 0")
        provider.shutdown()
        ended = second.get_json(f"/v1/runs/{run_id}")
        assert ended["state"] == "ended"
        assert ended["terminal_state"] == "completed"
        assert ended["signals"]["tool_calls"] == 5
        assert ended["signals"]["repeated_tool_call"] == 2
        assert ended["signals"]["errors"] == 1

    with running_server(config) as third:
        replay = third.get_json(f"/v1/runs/{run_id}")
        assert replay["terminal_state"] == "completed"
        assert replay["has_final_answer"] is True
        status, body = http_request("GET", third.api + f"/v1/runs/{run_id}/report")
        assert status == 200
        report = body.decode()
        # the whole activity log, from both lives of the sidecar, is in the report
        assert report.count("read_file") >= 4
        assert "/src/2.py" in report and "write_file" in report


def test_a_restored_runs_report_prompt_shows_its_steps_from_before_the_restart(
        tmp_path: Path) -> None:
    """A directive's report prompt is written from the run's last steps in memory; a run
    restored after a restart gets its stored steps back, so its first prompt is not blind."""
    config = sidecar_config(tmp_path / "state")
    run_id = "run-restart-prompt"
    with running_server(config) as first:
        provider, tracer = tracer_to(first)
        with tracer.start_as_current_span("invoke_agent persistent"):
            tool_span(tracer, run_id, "list_dir", '{"path": "/src/first-life"}', "a.py")
            for _ in range(3):
                tool_span(tracer, run_id, "read_file", '{"path": "/src/a.py"}', "file a")
            provider.shutdown()  # the agent span itself never reaches this sidecar
        assert first.get_json(f"/v1/runs/{run_id}/directives")["directives"] == []

    with running_server(config) as second:
        provider, tracer = tracer_to(second)
        with tracer.start_as_current_span("invoke_agent persistent"):
            tool_span(tracer, run_id, "read_file", '{"path": "/src/a.py"}', "file a")  # a loop
            provider.shutdown()
        directives = wait_until(lambda: second.get_json(
            f"/v1/runs/{run_id}/directives")["directives"], what="the loop's directive")
        assert [d["action"] for d in directives] == ["wind_down"], directives
        prompt = directives[0]["report_prompt"]
        assert "not available" not in prompt
        assert "/src/first-life" in prompt and prompt.count("/src/a.py") >= 4, prompt


def split_recording(tmp_path: Path, recording: Path, cut: int) -> tuple[Path, Path, float]:
    """A recording's first ``cut`` export requests and the rest, as two recordings, and the
    ``skew`` to replay the rest with: replay moves a recording's first span to now, and so the
    rest keep their times after the first part's, less the gap the recording had between them.
    """
    lines = recording.read_text(encoding="utf-8").splitlines()
    before, after = tmp_path / f"before-{recording.name}", tmp_path / f"after-{recording.name}"
    before.write_text("\n".join(lines[:cut]) + "\n", encoding="utf-8")
    after.write_text("\n".join(lines[cut:]) + "\n", encoding="utf-8")
    first, rest = (min(int(span["startTimeUnixNano"]) for span in recorded_spans(path))
                   for path in (before, after))
    return before, after, -(rest - first) / 1e9


def test_a_run_of_loose_calls_goes_on_across_a_restart(tmp_path: Path) -> None:
    """A home-grown loop traced by opentelemetry-instrumentation-openai-v2 (each model call a
    trace of its own, recorded), the sidecar restarted between its second and third call: the
    calls after the restart are the same run, which ends answered with all four."""
    before, after, skew = split_recording(
        tmp_path, RECORDINGS / "openai_v2_loop" / "three_tools.jsonl", 2)
    config = sidecar_config(tmp_path / "state")
    with running_server(config) as first:
        replay(first, before)
        first.flush()
        (open_run,) = first.get_json("/v1/runs")["runs"]
        assert (open_run["state"], open_run["iterations"]) == ("active", 2)
    with running_server(config) as second:
        replay(second, after, skew=skew)
        second.flush()
        (run,) = second.get_json("/v1/runs")["runs"]
        assert (run["id"], run["state"], run["terminal_state"], run["iterations"],
                run["has_final_answer"]) == (open_run["id"], "ended", "completed", 4, True)


class SidecarProcess:
    """What the framework harness reads of a sidecar, for a ``python -m watchdog serve``."""

    def __init__(self, ports: dict[str, int]) -> None:
        self.otlp_http = f"http://127.0.0.1:{ports['otlp_http']}"
        self.api = f"http://127.0.0.1:{ports['api']}"

    def get_json(self, path: str) -> Any:
        status, body = http_request("GET", self.api + path)
        assert status == 200, (status, body)
        return json.loads(body)

    def flush(self) -> None:
        """(a process flushes on its own timer, state_flush_interval)"""


def test_a_handoff_in_progress_reads_the_same_after_a_clean_restart(tmp_path: Path) -> None:
    """The OpenAI Agents SDK's handoff (recorded; no span names its run) sent to a real
    ``watchdog serve``, stopped with SIGTERM after the researcher's first spans, before the
    triage agent's span that says they were a handoff's. The records the tracker retained of
    the trace are kept over the restart, so the researcher is still split out into a child run
    of its own."""
    before, after, skew = split_recording(
        tmp_path, RECORDINGS / "openai_agents_sdk" / "handoff.jsonl", 9)
    ports = fresh_ports()
    env = serve_env(tmp_path / "state", ports, WATCHDOG_STATE_FLUSH_INTERVAL="200ms")
    sidecar = SidecarProcess(ports)
    with running_sidecar(env, ports["metrics"]):
        replay(sidecar, before)
    with running_sidecar(env, ports["metrics"]):
        replay(sidecar, after, skew=skew)
        check_runs(sidecar, EXPECTED_OPENAI_AGENTS["handoff"])


def test_a_tracker_state_that_cannot_be_read_is_skipped_at_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = sidecar_config(tmp_path / "state")
    with running_server(config) as first:
        replay(first, RECORDINGS / "openai_agents_sdk" / "handoff.jsonl")
    db = sqlite3.connect(tmp_path / "state" / DB_FILE)
    db.execute("UPDATE tracker_state SET data = ?", (json.dumps(
        {"frames": [["t1", {"records": [{"kind": "llm"}]}], 7], "trace_runs": [[1]]}),))
    db.commit()
    db.close()
    with running_server(config) as second:
        assert sorted(run["agent"] for run in second.get_json("/v1/runs")["runs"]) == [
            "agents-researcher", "agents-triage"]
        replay(second, RECORDINGS / "openai_v2_loop" / "three_tools.jsonl")
        second.flush()
        assert len(second.get_json("/v1/runs")["runs"]) == 3
    assert "3 traces of the tracker state kept at the last shutdown cannot be read" in \
        caplog.text


def test_a_state_dir_the_stdlib_json_encoder_wrote_is_served_after_a_restart(
        tmp_path: Path) -> None:
    """Rows are encoded with msgspec now; a state dir of ASCII-escaped stdlib rows still loads
    (tests/test_encoding.py has the row-level cases)."""
    run, _ = stdlib_written_run(tmp_path / "state")
    with running_server(sidecar_config(tmp_path / "state")) as sidecar:
        path = f"/v1/runs/{urllib.parse.quote(run.key)}"
        detail = sidecar.get_json(path)
        assert detail["state"] == ("ended" if run.ended else "active")
        assert detail["agent"] == "agent-日本"
        assert detail["signals"]["tool_calls"] == 2
        assert detail["signals"]["errors"] == 1
        assert detail["signals"]["input_tokens"] == 1200
        status, report = http_request("GET", f"{sidecar.api}{path}/report")
        assert status == 200
        assert "naïve" in report.decode() and "agent-日本" in report.decode()
