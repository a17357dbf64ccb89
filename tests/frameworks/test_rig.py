"""A rig agent (Rust: rig-core's ``Agent`` on its OpenAI provider, Chat Completions) exporting
rig's own GenAI tracing spans through ``tracing-opentelemetry`` and the OTLP/HTTP protobuf
exporter, as rig's own example does: ``rust/rig``, built by ``make rig-agent`` (part of ``make
test``) from its Cargo.lock.

rig 0.35 is the last release whose agent is in rig-core (0.44 moved it to the rig-agent crate).
What it emits (details: the recordings): rig makes its ``invoke_agent`` span the current span's
when there is one and enters neither, so its ``chat`` and ``execute_tool`` spans hang from the
current span: the driver runs the invocation inside its own ``invoke_agent`` span (with the GenAI
fields rig records on it declared; a failure recorded as its status), the scenarios ending
``_bare`` inside none, as rig's example does (every span a trace of its own: the known gap
pinned below). The agent span carries ``gen_ai.agent.name``, the prompt and the answer
(``gen_ai.completion``) and the usage; a ``chat`` span its usage and response id, no finish
reason and no messages; an ``execute_tool`` span the tool's name, call id, arguments and result.
A tool's error is handed to the model as the result, "Toolset error: ToolCallError: …", on a
span that ends OK; ``max_turns`` is an error of the invocation ("reached max turn limit"), which
the application records on its span.

The expectations are DESIGN §3's: one run per invocation named after the agent, iterations =
model calls, tool calls, errors, terminal state and reason, the repeated call; each case runs
live and from its committed recording.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm, scenarios
from tests.frameworks.fakellm import FakeLLM, Script
from tests.frameworks.harness import (
    DRIVER_TIMEOUT,
    UNCHECKED,
    Expect,
    check_recorded,
    check_runs,
    driver_env,
)
from tests.harness import RunningServer

DRIVER = "rig"
AGENT = "rig_researcher"
RIG_DIR = Path(__file__).resolve().parent / "rust" / "rig"
SCRIPTS: dict[str, Script] = {
    **{name: scenarios.script(name) for name in ("three_tools", "limit", "tool_error")},
    "three_tools_bare": scenarios.script("three_tools"),
    "repeat": fakellm.looping("lookup", lambda index: {"key": "a"},
                              answer_without_tools=scenarios.SUMMARY),
}
EXPECTED: dict[str, list[Expect]] = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # max_turns(3): rig asks the model five times (a tool round each), then fails with
    # "reached max turn limit"
    "limit": [Expect(AGENT, 5, 5, 0, "tool_limit_reached", False, "max_turns", None)],
    # the same call five times: rig's max_turns or the default pack's tool-cycle rule ends it,
    # whichever the spans' timing lets come first (both are read)
    "repeat": [Expect(AGENT, 5, 5, 0, UNCHECKED, False, UNCHECKED, None)],
    # the tool's error is handed to the model as its result (the span ends OK): one failed
    # call, and the model answers
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
    # known gap, pinned: with no span of the application's around the invocation (rig's own
    # example) every span is a trace of its own: the agent span a run with nothing in it, the
    # model calls a run of loose calls (no finish reason: unanswered), the tools (no agent
    # name) another
    "three_tools_bare": [Expect(AGENT, 0, 0, 0, "completed", True, None, None),
                         Expect(AGENT, 4, 0, 0, "no_response", False, UNCHECKED, None),
                         Expect("rig-service", 0, 3, 0, "no_response", False, UNCHECKED, None)],
}


def rig_agent() -> Path:
    """The agent ``make rig-agent`` built for ``rust/rig`` as it is now (the Makefile's hash: of
    Cargo.toml, Cargo.lock and its sources' bytes, in the order of their paths)."""
    sources = [RIG_DIR / "Cargo.toml", RIG_DIR / "Cargo.lock",
               *sorted((RIG_DIR / "src").glob("*.rs"))]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    binary = RIG_DIR.parents[3] / ".cache" / "rig-agent" / digest / "rig-agent"
    assert binary.exists(), f"{binary} is missing: `make rig-agent` builds it (make test does)"
    return binary


def drive(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> str:
    """Run the agent once on the scenario's script; its stdout."""
    model = llm.script(f"{DRIVER}-{scenario}", SCRIPTS[scenario])
    env = driver_env(sidecar, llm, DRIVER, scenario, model)
    result = subprocess.run([str(rig_agent()), scenario], env=env, capture_output=True,
                            text=True, timeout=DRIVER_TIMEOUT, check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-6000:])
        raise AssertionError(f"{DRIVER} {scenario} exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


def repeats_read(sidecar: RunningServer) -> None:
    """The repeated call: lookup("a") five times, the same call; the run stopped by rig's limit,
    the default pack's loop rule holding before it: ``loop_detected`` (a rule's state wins over
    the framework's limit, whether the rule saw the loop before the end or in its request)."""
    run: dict[str, Any] = sidecar.get_json(
        f"/v1/runs/{sidecar.get_json('/v1/runs')['runs'][0]['id']}")
    assert run["signals"]["repeated_tool_call"] == 5, run["signals"]
    assert (run["terminal_state"], run["terminal_reason"]) == ("loop_detected", "tool-cycle"), run


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    said = drive(sidecar, llm, scenario)
    # (bare: the agent span and the first model call, each a trace of its own, start some 75 us
    # apart: runs that start within one `started_at` tick are ordered by their random ids)
    check_runs(sidecar, EXPECTED[scenario], any_order=scenario == "three_tools_bare")
    if scenario in ("limit", "repeat"):  # rig's own max_turns stopped the loop
        assert "stopped:" in said
        assert len(llm.requests(f"{DRIVER}-{scenario}")) == 5
    if scenario == "repeat":
        repeats_read(sidecar)


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, EXPECTED[scenario])
    if scenario == "repeat":
        repeats_read(sidecar)

