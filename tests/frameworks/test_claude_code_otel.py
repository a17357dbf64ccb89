"""Claude Code watched through its own OpenTelemetry, read unchanged by the sidecar (no model
endpoint: it talks to the scripted upstream directly). Its spans (``claude_code.interaction``,
``claude_code.llm_request``, ``claude_code.tool``: a beta, ``CLAUDE_CODE_ENHANCED_TELEMETRY_BETA``)
and its log events go, as OTLP/JSON, through a tee that passes each export on to the sidecar
and keeps it: with ``RECORD_SPANS`` set, as ``recordings/claude_code/<scenario>.jsonl`` (spans)
and ``<scenario>.logs.jsonl`` (log events). Live and recorded, each scenario is one run of agent
``claude-code``:

* three_tools: three Bash commands, then the answer;
* loop: the same command six times — its repeats are seen (a Bash call's command is its
  arguments, ``OTEL_LOG_TOOL_DETAILS``);
* subagent: an ``Agent`` call whose sub-agent runs a command below that tool's span, then one
  more command: the sub-agent's calls (they name it: ``agent_id``) are a child run of the
  invocation's, as the model endpoint reads them (its requests name it).

No span carries the answer's text: its ``claude_code.assistant_response`` log event does
(``OTEL_LOG_ASSISTANT_RESPONSES``), naming the interaction's span, and is joined to it (the
conventions' ``log_events``): the run's final output is that text.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM, Step
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay, replay_logs
from tests.frameworks.test_claude_code import bash, run_claude, telemetry_env
from tests.harness import RunningServer, http_request, http_served

FOLDER = RECORDINGS / "claude_code"
ANSWER = "The file is /srv/a.txt."
SUBTASK = "Look in /srv."


def _turns(body: dict[str, Any]) -> int:
    return sum(1 for message in body.get("messages") or () if message.get("role") == "assistant")


def three_tools(index: int, body: dict[str, Any]) -> Step:
    turns = _turns(body)
    return bash(f"step {turns}") if turns < 3 else fakellm.answer(ANSWER)


def loop(index: int, body: dict[str, Any]) -> Step:
    return bash("the same") if _turns(body) < 6 else fakellm.answer(ANSWER)


def subagent(index: int, body: dict[str, Any]) -> Step:
    turns, first = _turns(body), json.dumps((body.get("messages") or [{}])[0])
    if SUBTASK in first and "Find the file." not in first:
        return bash("sub") if turns == 0 else fakellm.answer("Sub: found it.")
    if turns == 0:
        return fakellm.call("Agent", description="look in /srv", prompt=SUBTASK,
                            subagent_type="general-purpose", run_in_background=False)
    return bash("main") if turns == 1 else fakellm.answer(ANSWER)


SCENARIOS: dict[str, tuple[Callable[[int, dict[str, Any]], Step], list[Expect], list[str]]] = {
    "three_tools": (three_tools, [Expect("claude-code", 4, 3, 0, "completed", True)],
                    ["step 0", "step 1", "step 2"]),
    "loop": (loop, [Expect("claude-code", 7, 6, 0, "loop_detected", True)], ["the same"] * 6),
    # the main conversation's 3 model calls and 2 tools (`Agent`, `Bash`), the sub-agent's 2 and
    # 1 (`Bash`) in its child run, as the model endpoint counts them (test_claude_code.py)
    "subagent": (subagent, [Expect("claude-code", 3, 2, 0, "completed", True, None, None),
                            Expect("claude-code", 2, 1, 0, "completed", True, None,
                                   "claude-code")],
                 ["sub", "main"]),
}


class Tee:
    """An OTLP/HTTP receiver in front of the sidecar: each export passed on as it came, its
    answer the sidecar's, and kept (one line of OTLP/JSON per export) by signal."""

    def __init__(self, sidecar: RunningServer) -> None:
        self.kept: dict[str, list[str]] = {"traces": [], "logs": []}
        lock = threading.Lock()
        tee = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, answer = http_request("POST", sidecar.otlp_http + self.path, body,
                                              {"Content-Type": "application/json"})
                signal = self.path.rsplit("/", 1)[-1]
                if status == 200 and signal in tee.kept:
                    with lock:
                        tee.kept[signal].append(json.dumps(json.loads(body),
                                                           separators=(",", ":")))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.handler = Handler

    def write(self, scenario: str) -> None:
        FOLDER.mkdir(parents=True, exist_ok=True)
        for signal, suffix in (("traces", ""), ("logs", ".logs")):
            (FOLDER / f"{scenario}{suffix}.jsonl").write_text(
                "".join(line + "\n" for line in self.kept[signal]), encoding="utf-8")


@pytest.fixture
def tee(sidecar: RunningServer) -> Iterator[tuple[Tee, str]]:
    made = Tee(sidecar)
    with http_served(made.handler) as url:
        yield made, url


def _reads_as(sidecar: RunningServer, scenario: str) -> None:
    run, *children = check_runs(sidecar, SCENARIOS[scenario][1])
    detail = sidecar.get_json(f"/v1/runs/{run['id']}")
    assert [child["parent_run"] for child in children] == [run["id"]] * len(children)
    assert [each["id"] for each in detail["children"]] == [child["id"] for child in children]
    if children:
        assert (detail["signals"]["tools"], children[0]["signals"]["tools"]) == (
            {"Agent": 1, "Bash": 1}, {"Bash": 1}), (detail, children)
    assert detail.get("final_output") == ANSWER  # (its log event's, joined to its span)
    repeats = detail["signals"]["repeated_tool_call"]
    assert (repeats >= 4) is (scenario == "loop"), detail["signals"]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_live(sidecar: RunningServer, llm: FakeLLM, tee: tuple[Tee, str], tmp_path: Path,
              scenario: str) -> None:
    script, _expect, commands = SCENARIOS[scenario]
    model = llm.script(f"claude-code-otel-{scenario}", script)
    kept, url = tee
    output, ran = run_claude(tmp_path, llm.base_url.removesuffix("/v1"), model, "Find the file.",
                             telemetry_env(url, "http/json"), tools="Bash,Read,Agent")
    assert (output, ran) == (ANSWER, commands)
    assert kept.kept["traces"] and kept.kept["logs"]
    if os.environ.get("RECORD_SPANS"):
        kept.write(scenario)
    _reads_as(sidecar, scenario)


@pytest.mark.parametrize("logs_first", [False, True], ids=["spans-first", "logs-first"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_recorded(sidecar: RunningServer, scenario: str, logs_first: bool) -> None:
    """What Claude Code really exported, sent again unchanged: its spans, then its log events
    (as it sends them at exit: the run ended, its answer read into it when it comes), or the
    log events first (the answer waits for its span): the run the live one reads."""
    if logs_first:
        replay_logs(sidecar, FOLDER / f"{scenario}.logs.jsonl")
    replay(sidecar, FOLDER / f"{scenario}.jsonl")
    if not logs_first:
        replay_logs(sidecar, FOLDER / f"{scenario}.logs.jsonl")
    _reads_as(sidecar, scenario)
