"""Qwen Code watched through its own OpenTelemetry, read unchanged by the sidecar (no model
endpoint, so no relay to vary: it talks to the scripted upstream directly). Its spans, log events
and metrics go to the sidecar's OTLP/HTTP receiver as OTLP/JSON (in chunked requests); with
``RECORD_SPANS`` set, through a relay that keeps its traces as
``recordings/qwen_code/<scenario>.jsonl`` and its log events, which are no GenAI events, as
``<scenario>.logs.ndjson``. Steered and watched at once: ``test_model_endpoint_qwen_code.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay
from tests.frameworks.test_model_endpoint_frameworks import ANSWER
from tests.frameworks.test_model_endpoint_qwen_code import TOOL, invoke, shell
from tests.harness import RunningServer, http_request, http_served


def chunked_body(handler: BaseHTTPRequestHandler) -> bytes:
    """A request's body, whether sized or chunked (Qwen Code's OTLP exporters chunk theirs)."""
    if handler.headers.get("Transfer-Encoding", "").lower() != "chunked":
        return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
    body = bytearray()
    while size := int(handler.rfile.readline().split(b";")[0], 16):
        body += handler.rfile.read(size)
        handler.rfile.readline()
    handler.rfile.readline()
    return bytes(body)


@contextlib.contextmanager
def recording(sidecar: RunningServer, scenario: str) -> Iterator[str]:
    """Where Qwen Code exports its OpenTelemetry: the sidecar's OTLP/HTTP receiver; with
    ``RECORD_SPANS`` set, a relay in front of it that writes each export request, OTLP/JSON as
    Qwen Code sent it, to ``recordings/qwen_code/SCENARIO.jsonl`` (its traces; its log events,
    which are no GenAI events, to ``SCENARIO.logs.ndjson``; its metrics are passed on only)."""
    if not os.environ.get("RECORD_SPANS"):
        yield sidecar.otlp_http
        return
    target = RECORDINGS / "qwen_code"
    target.mkdir(parents=True, exist_ok=True)
    files = {"/v1/traces": target / f"{scenario}.jsonl",
             "/v1/logs": target / f"{scenario}.logs.ndjson"}
    for path in files.values():
        path.unlink(missing_ok=True)
    lock = threading.Lock()

    class Relay(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = chunked_body(self)
            if self.path in files:
                with lock, files[self.path].open("a", encoding="utf-8") as out:
                    out.write(json.dumps(json.loads(body), separators=(",", ":")) + "\n")
            status, answer = http_request("POST", sidecar.otlp_http + self.path, body,
                                          {"Content-Type": "application/json"})
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    with http_served(Relay) as url:
        yield url


def counting() -> fakellm.Script:
    return fakellm.steps(fakellm.call(TOOL, **shell("alpha")), fakellm.call(TOOL, **shell("beta")),
                         fakellm.answer(ANSWER))


def test_qwen_code_traced_by_its_own_opentelemetry_is_one_run_with_its_tools(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """Qwen Code's own telemetry to the sidecar, its model the scripted upstream itself: its
    trace (``qwen-code.interaction``, an ``invoke_agent`` span; a ``qwen-code.llm_request``
    per model call, with its model and tokens, the HTTP client's span under it; a
    ``qwen-code.tool`` per tool, its execution and hook spans under it) is one run of its model
    calls and tools, read unchanged: named after the agent it names, its session the
    conversation id; its hooks' spans (status error when no hook is configured) no errors.
    A named gap: no span carries the answer's text (its ``qwen-code.api_response`` log event
    does, which is no GenAI event), nor any message. Once: no model relay between it and its
    upstream."""
    with recording(sidecar, "two_tools") as otel:
        it = invoke(sidecar, llm, counting(), tmp_path, base_url=llm.base_url, otel=otel)
    assert (it.ran, it.printed) == (["alpha", "beta"], ANSWER)
    run = it.run
    assert (run["agent"], run["iterations"], run["tool_calls"], run["errors"]) == (
        "qwen-code", 3, 2, 0), run
    assert run["signals"]["tools"] == {TOOL: 2}, run["signals"]
    assert run["session"] and run["total_tokens"] > 0 and run["unpriced_calls"] == 3, run
    assert (run["terminal_state"], run["has_final_answer"]) == ("completed", True), run
    assert (run["final_output"], run["signals"]["messages"]) == (None, 0), run  # the gap


def test_qwen_code_recorded_reads_as_the_same_run(sidecar: RunningServer) -> None:
    """Its recording (``recordings/qwen_code/two_tools.jsonl``) exported again reads as the
    run it was live."""
    replay(sidecar, RECORDINGS / "qwen_code" / "two_tools.jsonl")
    [run] = check_runs(sidecar, [Expect("qwen-code", 3, 2, 0, "completed", True)])
    assert run["signals"]["tools"] == {TOOL: 2} and run["final_output"] is None, run
