"""The sidecar killed mid-run (SIGKILL: no shutdown, no final flush) and started again on the
same state directory: no directive is lost or sent twice, and session memory is kept.

The sidecar is a real ``python -m watchdog serve`` process; the agent exports real OTLP/HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.frameworks.fakellm import FakeLLM, answer, steps
from tests.harness import wait_until
from tests.ports import free_port
from tests.processes import answers, fresh_ports
from tests.scripted import ScriptedAgent, api
from tests.test_exporter_faults import explorer_steps
from watchdog.shell.directives.store import DB_FILE as DIRECTIVES_FILE
from watchdog.shell.state.store import DB_FILE

READY_TIMEOUT = 30.0
SESSION = "kill-session"
STUCK = 'agent="exporter",reason="loop_detected"'  # runs_stuck's labels for the run
FACTS = {"project_path": "/srv/app", "db_host": "db-7.internal"}


@dataclass
class Sidecar:
    process: subprocess.Popen[bytes]
    api: str
    otlp_http: str
    metrics: str

    def stuck(self) -> dict[str, float]:
        """``agent_watchdog_runs_stuck`` as /metrics says it: {labels: value}."""
        with urllib.request.urlopen(self.metrics + "/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return {line.split("{", 1)[1].split("}", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines() if line.startswith("agent_watchdog_runs_stuck{")}

    def get(self, path: str) -> Any:
        status, body = api("GET", self.api + path)
        assert status == 200, (status, body)
        return body

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


@contextmanager
def sidecar(state_dir: Path, **extra: str) -> Iterator[Sidecar]:
    ports = fresh_ports()
    env = dict(os.environ, WATCHDOG_STATE_DIR=str(state_dir), WATCHDOG_LOG_LEVEL="warning",
               **{f"WATCHDOG_{name.upper()}_ADDRESS": f"127.0.0.1:{port}"
                  for name, port in ports.items()},
               **{f"WATCHDOG_{key.upper()}": value for key, value in extra.items()})
    process = subprocess.Popen([sys.executable, "-m", "watchdog", "serve"], env=env)
    try:
        ready = f"http://127.0.0.1:{ports['metrics']}/readyz"
        wait_until(lambda: process.poll() is not None or answers(ready),
                   what="the sidecar to be ready", timeout=READY_TIMEOUT, every=0.05)
        assert process.poll() is None, "the sidecar exited before it was ready"
        yield Sidecar(process, f"http://127.0.0.1:{ports['api']}",
                      f"http://127.0.0.1:{ports['otlp_http']}",
                      f"http://127.0.0.1:{ports['metrics']}")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def stored_run(state_dir: Path, run_id: str) -> dict[str, Any] | None:
    """The run as the sidecar last flushed it, read from its SQLite file (WAL: never blocks)."""
    db = sqlite3.connect(f"file:{state_dir / DB_FILE}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT data FROM runs WHERE key=?", (run_id,)).fetchone()
    except sqlite3.OperationalError:  # not created yet
        row = None
    finally:
        db.close()
    return json.loads(row[0]) if row else None


def snapshots_kept(state_dir: Path) -> list[str]:
    """The runs whose snapshot is stored with their directives (until a flush stores them)."""
    db = sqlite3.connect(f"file:{state_dir / DIRECTIVES_FILE}?mode=ro", uri=True)
    try:
        return [run for (run,) in db.execute("SELECT run_id FROM run_snapshots")]
    finally:
        db.close()


def error_loop(agent: ScriptedAgent, attempts: range) -> None:
    for attempt in attempts:
        agent.tool("write_file", {"path": f"/data/out-{attempt}.csv"},
                   error=f"disk full while writing /data/out-{attempt}.csv")


def test_killed_mid_run_and_restarted(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with sidecar(state, state_flush_interval="100ms") as first:
        agent = ScriptedAgent(first.otlp_http, "kill-1", "exporter", session=SESSION)
        agent.chat(messages=3)
        error_loop(agent, range(5))
        directives = wait_until(lambda: first.get("/v1/runs/kill-1/directives?after=0")[
            "directives"])
        assert [(d["rule"], d["action"]) for d in directives] == [("error-loop", "abort")]
        assert wait_until(lambda: first.stuck()) == {STUCK: 1.0}
        # the run's counters are flushed every state_flush_interval: wait until they are
        assert wait_until(lambda: (stored_run(state, "kill-1") or {}).get("forced_state"))
        # stored by the flush: the copy kept with the directive is forgotten
        wait_until(lambda: not snapshots_kept(state), what="the run's snapshot forgotten")
        status, _ = api("POST", f"{first.api}/v1/sessions/{SESSION}/checkpoints", {
            "remaining": "export the last two tables", "state": FACTS,
            "failed_approaches": ["write to /data"], "run_id": "kill-1"})
        assert status == 200
        first.kill()  # right after the answer: only what was stored synchronously is there
        agent.close()

    with sidecar(state, state_flush_interval="100ms") as second:
        after = second.get("/v1/runs/kill-1")
        assert after["state"] == "active"
        assert after["signals"]["repeated_error"] == 5
        assert [d["id"] for d in after["directives"]] == [d["id"] for d in directives]
        # still active and told to abort: counted stuck as before the kill (the alert's gauge)
        assert second.stuck() == {STUCK: 1.0}

        context = second.get(f"/v1/sessions/{SESSION}/context")
        assert context["facts"] == FACTS
        assert context["last_remaining"] == "export the last two tables"
        assert context["failed_approaches"] == ["write to /data"]
        assert (context["runs"], context["checkpoints"]) == (1, 1)

        # the same agent goes on failing: the abort already fired, it is not sent again
        again = ScriptedAgent(second.otlp_http, "kill-1", "exporter", session=SESSION)
        error_loop(again, range(5, 8))
        assert wait_until(lambda: second.get("/v1/runs/kill-1")["signals"]["repeated_error"]
                        == 8)
        poll = second.get("/v1/runs/kill-1/directives?after=1&wait=0.3")
        assert poll["directives"] == [] and poll["last_seq"] == 1
        again.finish(error_type="agent_watchdog_client.Aborted")
        ended = second.get("/v1/runs/kill-1")
        assert (ended["terminal_state"], ended["terminal_reason"]) == ("loop_detected",
                                                                       "error-loop")
        assert wait_until(lambda: second.stuck() == {STUCK: 0.0}, what="the run not stuck")

        # the session carries on: the next checkpoint compares with the one before the kill
        status, answer = api("POST", f"{second.api}/v1/sessions/{SESSION}/checkpoints",
                             {"remaining": "Export the last two tables"})
        assert status == 200
        assert (answer["zero_progress"], answer["zero_progress_streak"]) == (True, 1)


def test_killed_before_any_flush(tmp_path: Path) -> None:
    """Nothing of the run was flushed (the flush interval is an hour): the acknowledged
    checkpoint and the stored directive survive, and with the directive the run as the
    decision left it (its counters, the abort's terminal state to come)."""
    state = tmp_path / "state"
    with sidecar(state, state_flush_interval="1h") as first:
        agent = ScriptedAgent(first.otlp_http, "kill-2", "exporter", session=SESSION)
        error_loop(agent, range(5))
        directive = wait_until(lambda: first.get("/v1/runs/kill-2/directives?after=0")[
            "directives"])
        status, _ = api("POST", f"{first.api}/v1/sessions/{SESSION}/checkpoints",
                        {"remaining": 2, "state": FACTS, "run_id": "kill-2"})
        assert status == 200
        first.kill()
        agent.close()
        assert stored_run(state, "kill-2") is None  # really nothing flushed
        assert snapshots_kept(state) == ["kill-2"]  # but kept with its directive

    with sidecar(state, state_flush_interval="1h") as second:
        assert second.get(f"/v1/sessions/{SESSION}/context")["facts"] == FACTS
        listed = second.get("/v1/runs/kill-2/directives?after=0")["directives"]
        assert [d["id"] for d in listed] == [d["id"] for d in directive]
        run = second.get("/v1/runs/kill-2")  # the run is there, as the abort left it
        assert (run["state"], run["tool_calls"], run["errors"],
                run["signals"]["repeated_error"]) == ("active", 5, 5, 5)
        assert [d["id"] for d in run["directives"]] == [d["id"] for d in directive]
        assert any(row["id"] == "kill-2" for row in second.get("/v1/runs")["runs"])
        # the agent goes on: its calls add to the run's, the abort is not sent again
        again = ScriptedAgent(second.otlp_http, "kill-2", "exporter", session=SESSION)
        error_loop(again, range(5, 8))
        assert wait_until(lambda: second.get("/v1/runs/kill-2")["signals"]["tool_calls"]
                        == 8)
        poll = second.get("/v1/runs/kill-2/directives?after=1&wait=0.3")
        assert poll["directives"] == []
        again.finish()
        ended = second.get("/v1/runs/kill-2")
        assert (ended["terminal_state"], ended["terminal_reason"]) == ("loop_detected",
                                                                       "error-loop")



def test_a_trace_an_announcement_named_keeps_its_run_after_a_kill(tmp_path: Path) -> None:
    """Two client-SDK runs announced in one trace (a sub-agent's inside its caller's), stored
    by a flush, then the sidecar killed: started again, a model request that carries the
    trace's ``traceparent`` is the run announced last, as before the kill (not a run of the
    trace's own)."""
    state = tmp_path / "state"
    trace_id = "7c" * 16
    with FakeLLM() as llm:
        model = llm.script("named-trace", steps(answer("done")))
        extra = {"state_flush_interval": "100ms", "model_address": f"127.0.0.1:{free_port()}",
                 "model_upstream": llm.base_url}
        with sidecar(state, **extra) as first:
            for run_id in ("caller-run", "sub-run"):
                status, _ = api("POST", f"{first.api}/v1/runs/{run_id}/heartbeat", {
                    "messages": 0, "announce": {"agent": "nested"}, "trace_id": trace_id})
                assert status == 200
            wait_until(lambda: stored_run(state, "sub-run") is not None, "the flush")
            first.kill()
        with sidecar(state, **extra) as second:
            client = openai.OpenAI(base_url=f"http://{extra['model_address']}/v1",
                                   api_key="sk-kill", max_retries=0)
            client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "go"}],
                extra_headers={"traceparent": f"00-{trace_id}-{'1f' * 8}-01"})
            assert wait_until(lambda: second.get("/v1/runs/sub-run")["signals"]["iterations"]
                              == 1, "the call in the sub-agent's run")
            assert second.get("/v1/runs/caller-run")["signals"]["iterations"] == 0
            assert [run["id"] for run in second.get("/v1/runs")["runs"]
                    if run["id"].startswith("trace:")] == []


def send(target: Sidecar, batch: list[Any]) -> None:
    """Export ``batch`` to ``target`` by the real OTLP/HTTP exporter; it must be taken."""
    exporter = OTLPSpanExporter(endpoint=target.otlp_http + "/v1/traces", timeout=10)
    try:
        assert exporter.export(batch) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def test_a_batch_sent_again_after_a_kill_is_applied_once(tmp_path: Path) -> None:
    """The sidecar applied a batch, flushed its runs, and was killed before the exporter read
    its answer; the exporter (a Collector's queue) sends the batch again, re-cut, with a span
    more, to the next process: the span ids the flush stored with the run's counts tell it
    which spans were applied, and its calls count once, not twice."""
    maker, _root, _start = explorer_steps("killed", "across-kill", 4)
    spans = maker.take()
    flushed = spans[:6]  # three steps; the fourth comes only with the batch sent again

    def counts(target: Sidecar) -> tuple[int, int]:
        run = target.get("/v1/runs/across-kill")
        return run["signals"]["iterations"], run["signals"]["tool_calls"]

    state = tmp_path / "state"
    with sidecar(state, state_flush_interval="100ms") as first:
        send(first, flushed)
        wait_until(lambda: (stored_run(state, "across-kill") or {}).get("tool_calls") == 3,
                   what="the run's three calls flushed")
        first.kill()
    with sidecar(state, state_flush_interval="100ms") as second:
        assert counts(second) == (3, 3)
        send(second, spans[::-1])  # the whole batch again, re-cut: another body
        assert counts(second) == (4, 4)  # the fourth step, never applied before, counts
        send(second, flushed[:2])
        assert counts(second) == (4, 4)


def test_a_span_held_out_of_every_run_is_applied_again_after_a_kill(tmp_path: Path) -> None:
    """A hand-traced tool's span (no GenAI attributes) sent before the model call that asked
    for it is held out of every run's counts until that call comes. The sidecar is killed
    after a flush: the span's id must not have been stored as applied (its counts are in no
    stored run), so when the exporter sends it again with the rest, it is held again and
    counted as the call's tool: one tool call, not none."""
    from tests.spans import SpanMaker, chat_attrs
    from tests.test_assembly_asked_tools import _asking_chat

    maker = SpanMaker({"service.name": "hand-loop"})
    t = time.time() - 20
    root = maker.open("research agent", start=t)
    maker.span("chat", _asking_chat(), parent=root, start=t, end=t + 1)
    call = maker.take()
    maker.span("lookup {key}", {"input": "{}"}, parent=root, start=t + 1.1, end=t + 1.2)
    tool = maker.take()
    maker.span("chat", chat_attrs(finish="stop", **{"gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": "done"}]}])}),
        parent=root, start=t + 2, end=t + 3)
    root.end(int((t + 4) * 1e9))
    rest = maker.take()
    marker, _root, _start = explorer_steps("hand-loop", "flushed-after", 1)
    flushed_after = marker.take()

    state = tmp_path / "state"
    with sidecar(state, state_flush_interval="100ms") as first:
        send(first, tool)
        send(first, flushed_after)  # a later flush than the one after the tool's request
        wait_until(lambda: stored_run(state, "flushed-after") is not None,
                   what="a flush after the tool's span was applied")
        first.kill()
    with sidecar(state, state_flush_interval="100ms") as second:
        send(second, tool)
        send(second, rest + call)
        (run,) = [run for run in second.get("/v1/runs")["runs"]
                  if run["id"] != "flushed-after"]
        assert (run["tool_calls"], run["iterations"]) == (1, 2), run
