"""LlamaIndex.TS (``ts/llamaindex/otel.ts``: ``@llamaindex/workflow``'s ``agent()`` on
``@llamaindex/openai``'s ``openai()``), which emits no OpenTelemetry of its own, traced by
OpenLLMetry's ``@traceloop/instrumentation-llamaindex`` 0.27.0 (by ``manuallyInstrument``: the
modules are ES modules), exported over OTLP/HTTP. It traces the LLM alone: one ``chat <model>``
span per model request, each the root of a trace of its own (no span for the agent, its workflow
or its tools), GenAI semantic conventions (``gen_ai.input.messages``/``gen_ai.output.messages``,
finish reason ``tool_call``), the tool calls in neither (its output messages hold the text
alone; its input messages the tools' results as user text, their calls dropped). The sidecar
reads each ``run()`` as a run of its own (loose model calls, a new conversation each), its model
calls counted, ``completed`` with its answer; its tool calls are nowhere in its spans, so a run
of them reads none (known gap, the instrumentation's: the model endpoint sees them). Each case
runs live (one node process) and from its committed recording. Its steering through the model
endpoint: ``test_llamaindex_ts.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, TS_DIR, recorded_spans, replay, run_ts_driver
from tests.frameworks.test_model_endpoint_text_actions import new_runs
from tests.harness import RunningServer, running_server, sidecar_config

OTEL_DRIVER = "llamaindex_ts_olm"
RECORDING = RECORDINGS / OTEL_DRIVER / "two_runs.jsonl"


@pytest.fixture
def watching(tmp_path: Path) -> Iterator[RunningServer]:
    """A sidecar that ends a run of loose model calls 1 s after its last (conftest's)."""
    config = sidecar_config(tmp_path / "state", loose_run_gap=1.0, eval_interval=0.2)
    with running_server(config) as server:
        yield server


def three_sums(index: int, _body: dict[str, Any]) -> fakellm.Step:
    """Three sums, then the answer; again for the next task."""
    return fakellm.answer(f"SUMS {index // 4}") if index % 4 == 3 else fakellm.call(
        "add", a=index, b=100)


def check_watched(sidecar: RunningServer) -> None:
    """Each ``run()`` a run of its own: its 4 model calls, no tool call (none is in its spans),
    ``completed`` with its answer."""
    runs = new_runs(sidecar, set(), lambda runs: len(runs) == 2
                    and all(run["state"] == "ended" for run in runs))
    assert sorted((run["iterations"], run["tool_calls"], run["terminal_state"],
                   run["final_output"]) for run in runs) == [
        (4, 0, "completed", "SUMS 0"), (4, 0, "completed", "SUMS 1")], runs


def test_its_openllmetry_spans_are_read_live(watching: RunningServer, llm: FakeLLM) -> None:
    assert (TS_DIR / "llamaindex" / "node_modules" / "@traceloop").is_dir(), (
        "run `make tests/frameworks/ts/llamaindex/node_modules/.installed` (part of make test)")
    model = llm.script("li-otel", three_sums)
    out = run_ts_driver("llamaindex/otel.ts", OTEL_DRIVER, "two_runs", watching, llm, model)
    assert [json.loads(line) for line in out.splitlines() if line.startswith("{")] == [
        {"output": "SUMS 0"}, {"output": "SUMS 1"}]
    check_watched(watching)


def test_its_openllmetry_recording(watching: RunningServer) -> None:
    """What it emitted (the recording): a root ``chat`` span per request, the tool calls in
    none of them; read as the live export is."""
    spans = recorded_spans(RECORDING)
    assert [(span["name"], span.get("parentSpanId") or None) for span in spans] == [
        ("chat li-otel", None)] * 8
    assert len({span["traceId"] for span in spans}) == 8
    attributes = [{item["key"]: item["value"] for item in span["attributes"]} for span in spans]
    assert [attribute["gen_ai.response.finish_reasons"]["arrayValue"]["values"][0]["stringValue"]
            for attribute in attributes] == (["tool_call"] * 3 + ["stop"]) * 2
    assert all("tool_call" not in attribute["gen_ai.output.messages"]["stringValue"].replace(
        '"finish_reason":"tool_call"', "") for attribute in attributes)
    replay(watching, RECORDING)
    check_watched(watching)
