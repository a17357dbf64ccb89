"""A convention whose attribute names are generic words (Logfire's ``name``, ``input``,
``output``, ``error``, ``response``) or whose placeholder for hidden content is one anyone may
write (Mastra's and Strands' ``[REDACTED]``) names the instrumentation scopes that emit it
(``Convention.scopes``): on another scope's spans an attribute of the same name is that
instrumentation's own, read as nothing of the scoped convention's. Read on real recordings of
other frameworks whose spans carry such an attribute (set by the application, as
``span.set_attribute("name", …)``), which must read as the recording does without it; and on
the scoped frameworks' own recordings, which still read as they do (tests/frameworks)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.test_rebatching import as_exported, ended_runs
from watchdog.core.runs.run import RunState


def with_attribute(requests: list[ExportTraceServiceRequest], key: str, value: str,
                   only: str | None = None) -> list[ExportTraceServiceRequest]:
    """``requests`` with ``key`` set to ``value`` on every span (``only``: on spans whose
    attribute ``only`` is present: a tool's arguments)."""
    spliced = []
    for request in requests:
        copy = ExportTraceServiceRequest()
        copy.CopyFrom(request)
        for resource_spans in copy.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    keys = [kv.key for kv in span.attributes]
                    if only is None or only in keys:
                        span.attributes.append(KeyValue(key=key,
                                                        value=AnyValue(string_value=value)))
        spliced.append(copy)
    return spliced


def reading(runs: list[RunState]) -> list[tuple[Any, ...]]:
    return sorted((run.agent_name, run.tool_calls, run.repeated_tool_call, run.terminal_state,
                   run.final_output, run.errors, run.last_error) for run in runs)


@pytest.mark.parametrize(("driver", "scenario", "key", "value"), [
    # an agent span's `name` (Logfire's agent name) on CrewAI under OpenLIT, BeeAI under
    # OpenInference, AutoGen's team: read as the agent, it split every span into a run of its
    # own
    ("crewai_openlit", "three_tools", "name", "app-metadata"),
    ("beeai_oi", "three_tools", "name", "app-metadata"),
    ("autogen_oi", "team", "name", "app-metadata"),
    # a model call's `response` (Logfire's Responses API answer): the loop's answer lost
    ("anthropic_loop", "three_tools", "response", json.dumps({"id": "r-1"})),
    ("anthropic_oi", "tool_error", "response", json.dumps({"id": "r-1"})),
])
def test_another_frameworks_attribute_named_as_logfires_reads_as_nothing(
        driver: str, scenario: str, key: str, value: str) -> None:
    requests = as_exported(driver, scenario)
    assert reading(ended_runs(with_attribute(requests, key, value))) == \
        reading(ended_runs(requests))


def test_another_frameworks_redacted_value_is_its_content() -> None:
    """A tool argument of another framework's that is ``[REDACTED]`` (the application's own
    redaction) is content there: the same call repeated is still a repeat."""
    requests = as_exported("beeai_oi", "three_tools")
    before = ended_runs(requests)
    assert [run.repeated_tool_call for run in before] == [1]
    spliced = []
    for request in requests:
        copy = ExportTraceServiceRequest()
        copy.CopyFrom(request)
        for resource_spans in copy.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    for kv in span.attributes:
                        if kv.key == "input.value" and kv.value.string_value.startswith("{"):
                            args = json.loads(kv.value.string_value)
                            if isinstance(args, dict):
                                kv.value.string_value = json.dumps({**args, "token": "[REDACTED]"})
        spliced.append(copy)
    after = ended_runs(spliced)
    assert reading(after) == reading(before)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_a_scoped_entrys_event_facts_are_read_on_its_scopes_spans_alone(compiled: bool) -> None:
    """Claude Code names its answer ``assistant_response:response`` and a tool's output
    ``tool.output:output``: read from its own spans' events (and its log events), never from
    a span event of that name on another instrumentation's span (an application's own
    ``assistant_response`` event is no answer, its ``tool.output`` no tool's result)."""
    from tests.spans import SpanMaker, records_of, tool_attrs
    from tests.test_native import decoding
    from watchdog.core.spans.record import AGENT, TOOL

    def read(scope: str) -> tuple[Any, ...]:
        maker = SpanMaker(scope=scope)
        with maker.agent("invoke_agent helper", {"gen_ai.agent.name": "helper"}) as root:
            tool = maker.open("execute_tool search", tool_attrs("search"))
            tool.add_event("tool.output", {"output": "found it"})
            tool.end()
            root.add_event("assistant_response", {"response": "the answer, in an event"})
        records = {record.kind: record for record in records_of(maker.take())}
        agent, call = records[AGENT], records[TOOL]
        return agent.final_output, agent.final_answer, call.result_brief

    with decoding(compiled):
        assert read("my.app") == (None, False, None)
        claude = read("com.anthropic.claude_code")
    assert claude[:2] == ("the answer, in an event", True) and claude[2], claude
