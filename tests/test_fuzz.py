"""A short coverage-guided fuzz run of each in-tree target (``fuzz/``), as part of the suite.

Each target runs in a subprocess (libFuzzer ends its process when done) from a copy of the seed
corpus, for a fixed number of inputs and a fixed seed; a crash makes libFuzzer exit non-zero
with the input and its traceback, which fails the test. The input count is printed. The longer
run is in docs/limits.md ("Fuzzing"). Below them, what the targets found, each a test of its
own.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from tests.fuzzing import finished
from tests.spans import T0, SpanMaker, chat_attrs, encode
from tests.test_genai_conventions import DETAILS, InMemoryLogs
from watchdog.core.spans.logs import ExportLogsServiceRequest, LogJoin
from watchdog.core.spans.pipeline import released, slices_of

ROOT = Path(__file__).resolve().parent.parent
RUNS = {"ingest": 10_000, "otlp_json": 5_000, "control": 50_000, "otlp_logs": 2_000}
# about 5 s, 3 s, 1 s and 4 s (unloaded); fuzz/otlp_json.py is the OTLP/JSON decode edge alone,
# fuzz/otlp_logs.py OTLP logs through the join with their spans


@pytest.mark.parametrize("target", sorted(RUNS))
def test_fuzz_target_finds_no_crash(target: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    runs = RUNS[target]
    corpus = tmp_path / "corpus"
    shutil.copytree(ROOT / "fuzz" / "corpus" / target, corpus)
    result = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / f"{target}.py"), str(corpus), f"-runs={runs}",
         f"-dict={ROOT / 'fuzz' / 'otlp.dict'}",
         "-seed=1", "-max_len=8192", f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=170)
    log = result.stderr + result.stdout
    assert result.returncode == 0, f"fuzz target {target} crashed:\n{log[-6000:]}"
    finished(log, runs, target, capsys)


def _details_event(span: Any, text: str) -> ExportLogsServiceRequest:
    """What the SDK's OTLP log exporter sends for a model call's ``gen_ai.client.inference.
    operation.details`` event (the service of :class:`~tests.spans.SpanMaker`)."""
    memory = InMemoryLogs()
    provider = LoggerProvider(resource=Resource.create({"service.name": "test-agent"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    context = span.get_span_context()
    provider.get_logger("genai").emit(LogRecord(
        event_name=DETAILS, trace_id=context.trace_id, span_id=context.span_id,
        trace_flags=context.trace_flags, attributes={"gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": text}]}])}))
    request = ExportLogsServiceRequest()
    request.ParseFromString(encode_logs(memory.get_finished_logs()).SerializeToString())
    return request


def test_a_trace_a_log_pushes_out_of_the_join_goes_on_with_that_log() -> None:
    """Found by fuzz/otlp_logs.py: a log's content that pushed a held trace out of the join's
    bounds left it behind (no tick released it), its spans never applied."""
    maker = SpanMaker()
    join = LogJoin(max_bytes=2048)
    join.add(_details_event(maker.span("chat m", chat_attrs()), "earlier"), T0)  # the service
    maker.take()
    with maker.agent(attrs={"gen_ai.agent.name": "planner"}):
        first = maker.span("chat m", {"gen_ai.operation.name": "chat"}, start=T0 + 1)
        maker.span("chat m", {"gen_ai.operation.name": "chat"}, start=T0 + 2)
    assert next(slices_of(encode(maker.take()), None, join, T0)).records == []
    assert join.held_traces == 1  # the trace waits for both calls' content
    out = join.add(_details_event(first, "x" * 4000), T0 + 0.1)  # beyond the bound: out
    records = released(out, join, T0 + 0.1).records
    assert [record.kind.value for record in records] == ["llm", "llm", "agent"]
    assert (records[0].final_output or "").startswith("x" * 100)  # read with its content
    assert join.held_traces == 0 and not join.overflow and join.expired(T0 + 10) == []


@pytest.mark.parametrize("messages", [
    '[{"role": "assistant", "parts": [{"type": ["tool_call"], "content": "x"}]}]',
    '[{"role": ["user"], "parts": [{"type": "text", "content": "x"}]}]'])
@pytest.mark.parametrize("key", ["gen_ai.input.messages", "gen_ai.output.messages"])
def test_message_parts_of_any_json_type_are_read_without_a_failure(messages: str,
                                                                   key: str) -> None:
    """Found by fuzz/otlp_logs.py (a log's structured content): a part's ``type`` or a
    message's ``role`` that is a list failed the span's reading (TypeError: an HTTP 500)."""
    maker = SpanMaker()
    maker.span("chat m", chat_attrs(**{key: messages}))
    decoded = next(slices_of(encode(maker.take()), None))
    (record,) = decoded.records
    assert record.kind.value == "llm" and not decoded.rejected
