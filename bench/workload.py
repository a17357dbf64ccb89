"""Realistic GenAI span batches for the benchmarks (OTel GenAI semconv, as pydantic-ai emits).

Each run is an agent loop: a chat span whose ``gen_ai.input.messages`` grows with the
conversation, then one or two ``execute_tool`` spans with JSON arguments and a result of a few
hundred bytes, now and then a failing tool; the ``invoke_agent`` root span ends the run.

Workloads (:data:`WORKLOADS`) vary what real traffic varies:

* ``clean`` — the loop above: varied calls, results of ordinary code;
* ``trigger-words`` — arguments and results mention words that make a redactor look twice
  ("auth", "key", "token", "password": no real secrets), as real tool output does;
* ``rules-firing`` — misbehaving agents: the same call over and over and the same error again
  and again, so the default rules fire on every run and directives (with report prompts) are
  written — the case the watchdog exists for; with trigger words too;
* ``trace-keyed`` — no run ids on the spans (OpenInference/OpenLLMetry style): runs are told
  apart by trace, and a sub-agent in every other run becomes a child run;
* ``answers`` — short runs (one to three tool steps) whose last model call answers in text
  (finish reason ``stop``, the answer as a text part, as pydantic-ai's recordings have it):
  a model call's answer and an agent's are a third of the spans.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

TOOLS = ("read_file", "search_code", "run_tests", "list_dir", "write_file", "grep")
# What pydantic-ai puts on every chat span besides the conversation: tool schemas, request
# parameters and a JSON schema for Logfire. Receivers must walk past them cheaply.
TOOL_DEFINITIONS = json.dumps([
    {"type": "function", "name": name, "description": f"{name.replace('_', ' ')} in the repo",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                     "line": {"type": "integer"}},
                    "required": ["path"], "additionalProperties": False}}
    for name in TOOLS])
REQUEST_PARAMETERS = json.dumps({"function_tools": json.loads(TOOL_DEFINITIONS),
                                 "output_mode": "text", "allow_text_output": True})
JSON_SCHEMA = json.dumps({"type": "object", "properties": {
    k: {"type": "array"} for k in ("gen_ai.input.messages", "gen_ai.output.messages",
                                   "model_request_parameters", "gen_ai.tool.definitions")}})


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, (list, tuple)):
        from opentelemetry.proto.common.v1.common_pb2 import ArrayValue
        return KeyValue(key=key, value=AnyValue(array_value=ArrayValue(
            values=[AnyValue(string_value=str(v)) for v in value])))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


# (the benches run the first four by default)
WORKLOADS = ("clean", "trigger-words", "rules-firing", "trace-keyed")
ALL_WORKLOADS = (*WORKLOADS, "answers")
TRIGGER_RESULT = ("# auth settings: see docs/auth.md; the api key and the token come from the "
                  "vault, never from the password file\nAuthorization is checked by middleware "
                  "(key rotation: weekly; token ttl: 1h)\n")


class RunScript:
    """Produces the spans of one run, step by step."""

    def __init__(self, index: int, rng: random.Random, with_root: bool = True,
                 start_ns: int = 0, workload: str = "clean") -> None:
        self.workload = workload
        self.triggers = workload in ("trigger-words", "rules-firing")
        self.looping = workload == "rules-firing"
        self.keyed = workload != "trace-keyed"
        self.sub_agent = not self.keyed and index % 2 == 0
        self.sub_id = rng.randbytes(8)
        self.index = index
        self.rng = rng
        self.trace_id = rng.randbytes(16)
        self.root_id = rng.randbytes(8)
        self.call_id = f"run-{index:06d}-{rng.getrandbits(32):08x}"
        self.agent = f"agent-{index % 8}"
        self.messages: list[dict[str, object]] = [
            {"role": "system", "parts": [{"type": "text", "content": "You are a coding agent."}]},
            {"role": "user", "parts": [{"type": "text", "content": f"Fix issue #{index}"}]},
        ]
        self.t = (start_ns or time.time_ns()) + (index % 1000) * 1_000_000
        self.answers = workload == "answers"  # its last model call answers
        self.steps = rng.randint(1, 3) if self.answers else rng.randint(6, 14)
        self.sub_steps = self.steps - 3  # the sub-agent's three steps come first
        self.with_root = with_root
        self.done = False

    def _span(self, name: str, attrs: list[KeyValue], error: str | None = None) -> Span:
        start = self.t
        self.t += self.rng.randint(5_000_000, 900_000_000)
        common = [_kv("gen_ai.agent.name", self.agent),
                  _kv("gen_ai.conversation.id", f"conv-{self.index}")]
        if self.keyed:
            common.append(_kv("gen_ai.agent.call.id", self.call_id))
        # In a trace-keyed run with a sub-agent, the first steps are the sub-agent's.
        parent = self.sub_id if self.sub_agent and self.steps >= self.sub_steps else self.root_id
        span = Span(trace_id=self.trace_id, span_id=self.rng.randbytes(8),
                    parent_span_id=parent, name=name, kind=Span.SPAN_KIND_INTERNAL,
                    start_time_unix_nano=start, end_time_unix_nano=self.t,
                    attributes=common + attrs)
        if error:
            span.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message=error))
            span.events.add(name="exception", time_unix_nano=self.t, attributes=[
                _kv("exception.type", "RuntimeError"), _kv("exception.message", error)])
        return span

    def _answer(self) -> Span:
        """The model call that answers: its text, no tool asked for."""
        output = [{"role": "assistant", "parts": [{"type": "text", "content": (
            f"Fixed issue #{self.index}: patched src/pkg/module.py, the tests pass.")}],
            "finish_reason": "stop"}]
        return self._span("chat gpt-4o", [
            _kv("gen_ai.operation.name", "chat"), _kv("gen_ai.system", "openai"),
            _kv("gen_ai.request.model", "gpt-4o"), _kv("gen_ai.response.model", "gpt-4o"),
            _kv("gen_ai.response.id", f"chatcmpl-{self.index}"),
            _kv("gen_ai.usage.input_tokens", 800 + 150 * len(self.messages)),
            _kv("gen_ai.usage.output_tokens", self.rng.randint(20, 400)),
            _kv("gen_ai.response.finish_reasons", ["stop"]),
            _kv("gen_ai.input.messages", json.dumps(self.messages)),
            _kv("gen_ai.tool.definitions", TOOL_DEFINITIONS),
            _kv("model_request_parameters", REQUEST_PARAMETERS),
            _kv("logfire.json_schema", JSON_SCHEMA),
            _kv("gen_ai.output.messages", json.dumps(output))])

    def next_spans(self) -> list[Span]:
        """The spans that end in the next step of the loop."""
        rng = self.rng
        if self.sub_agent and self.steps == self.sub_steps:
            self.sub_agent = False  # its steps are done: its agent span ends
            sub = self._span("invoke_agent researcher", [
                _kv("gen_ai.operation.name", "invoke_agent"),
                _kv("gen_ai.agent.name", "researcher"), _kv("final_result", "found it")])
            sub.span_id = self.sub_id
            return [sub]
        if self.steps == 0 and self.answers:
            self.answers = False
            return [self._answer()]
        if self.steps == 0:
            self.done = True
            if not self.with_root:
                return []
            root = self._span(f"invoke_agent {self.agent}", [
                _kv("gen_ai.operation.name", "invoke_agent"), _kv("agent_name", self.agent),
                _kv("final_result", "Fixed it: patched src/module.py and tests pass."),
                _kv("pydantic_ai.all_messages", json.dumps(self.messages)),
                _kv("gen_ai.aggregated_usage.input_tokens", 12000)])
            root.span_id, root.parent_span_id = self.root_id, b""
            return [root]
        self.steps -= 1
        tool = rng.choice(TOOLS)
        args: dict[str, object] = {"path": f"src/pkg/module_{rng.randint(0, 30)}.py",
                                   "line": rng.randint(1, 400)}
        if self.looping:  # the same call again and again
            tool, args = "read_file", {"path": "src/auth/keys.py", "line": 1}
        elif self.triggers:
            args["query"] = rng.choice(("auth token refresh", "api key lookup",
                                        "password reset flow", "session key"))
        output = [{"role": "assistant", "parts": [
            {"type": "tool_call", "id": "c1", "name": tool, "arguments": args}],
            "finish_reason": "tool_call"}]
        spans = [self._span("chat gpt-4o", [
            _kv("gen_ai.operation.name", "chat"), _kv("gen_ai.system", "openai"),
            _kv("gen_ai.request.model", "gpt-4o"), _kv("gen_ai.response.model", "gpt-4o"),
            _kv("gen_ai.usage.input_tokens", 800 + 150 * len(self.messages)),
            _kv("gen_ai.usage.output_tokens", rng.randint(20, 400)),
            _kv("gen_ai.response.finish_reasons", ["tool_call"]),
            _kv("gen_ai.input.messages", json.dumps(self.messages)),
            _kv("gen_ai.system_instructions",
                '[{"type":"text","content":"Fix the issue. Run the tests before answering."}]'),
            _kv("gen_ai.tool.definitions", TOOL_DEFINITIONS),
            _kv("model_request_parameters", REQUEST_PARAMETERS),
            _kv("logfire.json_schema", JSON_SCHEMA),
            _kv("gen_ai.output.messages", json.dumps(output))])]
        self.messages.extend(output)
        failing = rng.random() < (0.5 if self.looping else 0.08)
        body = TRIGGER_RESULT if self.triggers else \
            "def handler(event):\n    return process(event)\n" * 6
        result = "" if failing else f"# {args['path']}:{args['line']}\n" + body
        spans.append(self._span(f"execute_tool {tool}", [
            _kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", tool),
            _kv("gen_ai.tool.call.id", f"call_{rng.getrandbits(40):x}"),
            _kv("gen_ai.tool.call.arguments", json.dumps(args)),
            *([] if failing else [_kv("gen_ai.tool.call.result", result)])],
            error=(f"file src/pkg/module_{rng.randint(0, 30)}.py is locked" if not self.looping
                   else "auth token expired for key ring main") if failing else None))
        self.messages.append({"role": "user", "parts": [
            {"type": "tool_call_response", "id": "c1", "name": tool, "result": result[:200]}]})
        if len(self.messages) > 24:  # keep conversations realistic but bounded
            del self.messages[2:4]
        return spans


def batches(runs: int, batch_size: int, total_spans: int, seed: int = 7,
            with_root: bool = True, workload: str = "clean") -> Iterator[bytes]:
    """Serialized ExportTraceServiceRequests of ``batch_size`` spans from ``runs`` concurrent
    runs (a finished run is replaced by a new one), until ``total_spans`` were produced."""
    rng = random.Random(seed)
    scripts = [RunScript(i, rng, with_root, workload=workload) for i in range(runs)]
    next_index = runs
    produced = 0
    pending: list[Span] = []
    cursor = 0
    while produced < total_spans:
        while len(pending) < batch_size:
            script = scripts[cursor]
            pending.extend(script.next_spans())
            if script.done:
                scripts[cursor] = RunScript(next_index, rng, with_root, workload=workload)
                next_index += 1
            cursor = (cursor + 1) % runs
        chunk, pending = pending[:batch_size], pending[batch_size:]
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.extend([_kv("service.name", "coding-agents"),
                                                   _kv("telemetry.sdk.language", "python")])
        scope = resource_spans.scope_spans.add()
        scope.scope.name = "pydantic-ai"
        scope.spans.extend(chunk)
        produced += len(chunk)
        yield request.SerializeToString()
