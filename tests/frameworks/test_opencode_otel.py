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
# trace's AI SDK spans by the Vercel AI SDK's convention, unchanged. opencode runs its loop
# itself, one `streamText` call a step (the title's first), each named `session.llm`, side by
# side in one trace: one run of its 4 model calls and 2 tool calls (`loop_call_span_names`), its
# steps that ended on `tool-calls` no stop (opencode went on), answered; its session.
TRACED_ALONE = [Expect("session.llm", 4, 2, 0, "completed", True, None, None)]


def check_traced_alone(runs: list[dict[str, Any]]) -> None:
    assert [_seen(run, {r["id"]: r for r in runs}) for run in runs] == [
        dataclasses.asdict(expect) for expect in TRACED_ALONE], runs
    [run] = runs
    assert run["final_output"] == ANSWER
    assert {**run["signals"]["tools"]} == {TOOL: 2}
    assert run["session"].startswith("ses_") and run["signals"]["input_tokens"] > 0


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
    # (EXIT: `opencode run` exits without a flush, so the spans of its last step, ended in its
    # last moments, may never come; its recording, below, reads whole)
    [run] = runs_seen(sidecar, 1)
    assert run["agent"] == "session.llm", run
    if run["iterations"] == 4:  # its 3 steps' calls and the title's
        assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
            2, "completed", ANSWER), run
    else:  # (EXIT; the last export, lost, may hold the second tool's span with the last step's)
        assert run["iterations"] == 3 and run["tool_calls"] in (1, 2), run


def test_opencode_recorded_reads_as_it_did_live(sidecar: RunningServer) -> None:
    """Its recording (``recordings/opencode/two_tools.jsonl``) exported again reads as the run
    did live (its log records, opencode's own log lines, carry nothing the sidecar reads)."""
    replay(sidecar, RECORDINGS / "opencode" / "two_tools.jsonl")
    check_traced_alone(runs_seen(sidecar, len(TRACED_ALONE)))
