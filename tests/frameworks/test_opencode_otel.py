"""opencode watched through its own OpenTelemetry, read unchanged by the sidecar (no model
endpoint, so no relay to vary: it talks to the scripted upstream directly). With
``OTEL_EXPORTER_OTLP_ENDPOINT`` set it exports its runtime's spans (every function it traces: its
session loop, its database queries, its HTTP server) and log records, OTLP/HTTP as JSON;
``experimental.openTelemetry`` in its ``opencode.json`` adds the AI SDK's (``ai.streamText`` a
step, ``ai.streamText.doStream`` its model call, ``ai.toolCall`` a tool call), which the
sidecar reads by the Vercel AI SDK's convention. With ``RECORD_SPANS`` set, a relay keeps its
traces as ``recordings/opencode/<scenario>.jsonl`` and its log records as
``<scenario>.logs.ndjson``. Steered and watched at once: ``test_model_endpoint_opencode.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    RECORDINGS,
    Expect,
    _seen,
    otlp_recorder,
    replay,
    runs_seen,
)
from tests.frameworks.test_model_endpoint_frameworks import ANSWER
from tests.frameworks.test_model_endpoint_opencode import TITLE, TOOL, run_opencode, shell
from tests.harness import RunningServer


@contextlib.contextmanager
def recording(sidecar: RunningServer, scenario: str) -> Iterator[str]:
    """Where opencode exports its OpenTelemetry (OTLP/HTTP, JSON): the sidecar's receiver;
    with ``RECORD_SPANS`` set, a relay in front of it that writes each export request as
    opencode sent it to ``recordings/opencode/SCENARIO.jsonl`` (its traces) and
    ``SCENARIO.logs.ndjson`` (its log records, which are no GenAI events)."""
    if not os.environ.get("RECORD_SPANS"):
        yield sidecar.otlp_http
        return
    target = RECORDINGS / "opencode"
    with otlp_recorder(sidecar, {"/v1/traces": target / f"{scenario}.jsonl",
                                 "/v1/logs": target / f"{scenario}.logs.ndjson"}) as url:
        yield url



# opencode traced alone (its model the scripted upstream itself), as the sidecar reads it: its
# trace's AI SDK spans by the Vercel AI SDK's convention, unchanged. Right: each model call (its
# tokens, its finish reason), each tool call (its name, its arguments), the answer, its session.
# Two misreads, named and left (docs/frameworks.md): opencode runs its loop itself, one
# `streamText` call a step, and names each `session.llm`:
# - SPLIT: the call of its first step (after the title's, which the trace's run starts with) is
#   read as a sub-agent's run, a child of the run, with that step's model call and tool call (2
#   runs, the model calls shared out 3 + 1 and the tools 1 + 1, not one run of 4 and 2);
# - STOP_WHEN: a call that ends on `tool-calls` is read as stopped by the AI SDK's `stopWhen`
#   (`tool_limit_reached`), the run so too, though opencode went on and answered.
TRACED_ALONE = [
    Expect("session.llm", 3, 1, 0, "tool_limit_reached", True, "stop_when", None),
    Expect("session.llm", 1, 1, 0, "tool_limit_reached", False, "stop_when", "session.llm")]


def check_traced_alone(runs: list[dict[str, Any]]) -> None:
    assert [_seen(run, {r["id"]: r for r in runs}) for run in runs] == [
        dataclasses.asdict(expect) for expect in TRACED_ALONE], runs
    root, child = runs
    assert root["final_output"] == ANSWER
    assert {**root["signals"]["tools"]} == {TOOL: 1} == child["signals"]["tools"]
    assert root["session"] == child["session"] and root["session"].startswith("ses_")
    assert root["signals"]["input_tokens"] > 0 and child["signals"]["input_tokens"] > 0


def test_opencode_traced_by_its_own_opentelemetry_alone(
        sidecar: RunningServer, llm: FakeLLM, tmp_path: Path) -> None:
    """opencode's own OpenTelemetry (``experimental.openTelemetry``: the AI SDK's spans beside
    its runtime's, 1,200 spans for a run of 4 model calls) exported to the sidecar, its model
    the scripted upstream itself: read as :data:`TRACED_ALONE` says. Recorded (``RECORD_SPANS``)
    under ``recordings/opencode/``."""
    model = llm.script(f"opencode-{tmp_path.name}", fakellm.steps(
        fakellm.call(TOOL, **shell("alpha")), fakellm.call(TOOL, **shell("beta")),
        fakellm.answer(ANSWER)))
    small = llm.script(f"opencode-small-{tmp_path.name}", fakellm.steps(fakellm.answer(TITLE)))
    with recording(sidecar, "two_tools") as otel:
        ran, printed = run_opencode(llm.base_url, model, small, tmp_path, otel=otel)
    assert (ran, printed) == (["alpha", "beta"], ANSWER)
    # (live, how its steps' calls are shared out between the two runs depends on when its spans
    # come, each export request being read as it comes; and EXIT: `opencode run` exits without
    # a flush, so the spans of its last step, ended in its last moments, may never come. Its
    # recording, below, reads as pinned)
    runs = runs_seen(sidecar, 1)
    assert {run["agent"] for run in runs} == {"session.llm"}, runs
    assert sum(run["tool_calls"] for run in runs) == 2, runs  # (ended before its last step)
    # (STOP_WHEN; a run still open, its end to come, has none yet)
    assert {run["terminal_reason"] for run in runs if run["state"] == "ended"} == {
        "stop_when"}, runs
    if sum(run["iterations"] for run in runs) == 4:  # its 3 steps' calls and the title's
        assert ANSWER in [run["final_output"] for run in runs], runs
    else:
        assert sum(run["iterations"] for run in runs) == 3, runs  # (EXIT)


def test_opencode_recorded_reads_as_it_did_live(sidecar: RunningServer) -> None:
    """Its recording (``recordings/opencode/two_tools.jsonl``) exported again reads as the run
    did live (its log records, opencode's own log lines, carry nothing the sidecar reads)."""
    replay(sidecar, RECORDINGS / "opencode" / "two_tools.jsonl")
    check_traced_alone(runs_seen(sidecar, len(TRACED_ALONE)))
