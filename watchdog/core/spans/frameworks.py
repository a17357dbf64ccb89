"""What each instrumentation convention and agent framework puts where: one table per entry.

Theory of operation
-------------------
Agents reach us through instrumentation that names the same facts differently (OTel GenAI,
OpenInference, OpenLLMetry) and through frameworks that add their own places on top (Strands'
span events, ADK's ``finish_reasons``, crewai's ``graph.node.id``, Hermes' exit reason...). Each
of them is one :class:`~watchdog.core.spans.schema.Convention`: data only, the agent
frameworks' below, the instrumentation conventions' in :mod:`watchdog.core.spans.instrumentations`.
:mod:`watchdog.core.spans.conventions` (the engine) reads
:data:`~watchdog.core.spans.combined.TABLES`, the entries combined once at import: attribute names
in order of precedence (entries earlier in :data:`CONVENTIONS` win), value maps and name sets
merged.

Facts carried by span events are named ``"<event name>:<attribute>"`` (e.g.
``"gen_ai.choice:finish_reason"``) and listed among the attribute names, after the attributes
themselves: the engine folds the few wanted event attributes into the span's attributes, only
for spans whose attributes lack the fact. Supporting the next framework is an entry here plus a test
on a recording of what it really emits — not another ``if`` in the engine.
"""

from __future__ import annotations

from watchdog.core.spans.instrumentations import (
    ANTHROPIC_SDK,
    GENAI,
    GENAI_NEWEST,
    GENERIC_LIMITS,
    MLFLOW,
    OPENINFERENCE,
    OPENLIT,
    OPENLLMETRY,
    WATCHDOG,
)
from watchdog.core.spans.schema import (
    Convention,
    ErrorResult,
    OutputEnvelope,
    Role,
    StepCap,
    StoppedStep,
)

# What no span carries the model endpoint still sees: the requests and responses themselves.
ON_NO_SPAN = (" (what no span carries, the [model endpoint](model-endpoint.md) sees in the "
              "requests and responses themselves)")

PYDANTIC_AI = Convention(
    name="pydantic-ai",
    emitted_by="pydantic-ai (GenAI, plus its own names)",
    span_names={"agent run": Role.AGENT, "running tool": Role.TOOL},
    span_name_prefixes=(("running tool", Role.TOOL), ("agent run", Role.AGENT)),
    agent_name=("agent_name",),
    tool_name=("tool_name",),
    tool_name_span_prefixes=("running tool: ", "running tool "),
    tool_args=("tool_arguments",),
    tool_result=("tool_response",),
    answer_tools=frozenset({"final_result"}),
    answer_tool_prefixes=("final_result_",),
    answer_ends_first=True,  # (its default end_strategy, "early": the other calls never run)
    answer=("final_result",),
    input_messages=("pydantic_ai.all_messages",),
    limit_exceptions=frozenset({"UsageLimitExceeded"}),
    notes="`gen_ai.aggregated_usage.*` on the agent span is never counted (the model calls "
          "carry it)",
)

HERMES = Convention(
    name="hermes-agent",
    emitted_by="grafana-agento11y-hermes plugin (sigil SDK); agent_watchdog_client.adapters.hermes",
    kinds={"gen_ai.operation.name": {"generateText": Role.LLM, "streamText": Role.LLM}},
    limit_states=(("hermes.turn_exit_reason", r"max_iterations_reached\b", "max_iterations"),
                  ("hermes.turn_exit_reason", r"budget_exhausted\b", "max_iterations")),
    limit_prompts=(("You've reached the maximum number of tool-calling iterations allowed",
                    "max_iterations"),),
    notes="no span for a turn: one trace per model call; the exit reason only via the adapter",
)

STRANDS = Convention(
    name="strands-agents",
    emitted_by="Strands' native tracer (default and `gen_ai_latest_experimental` formats)",
    # limits={"turns"|"total_tokens"|"output_tokens": n} stop the agent loop (no exception);
    # for TypeScript, `limits: { turns, totalTokens, outputTokens }`, its stop reasons camelCase
    # (`limitTurns`: read in lower case)
    limit_finish_reasons=frozenset({"limit_turns", "limit_total_tokens", "limit_output_tokens",
                                    "limitturns", "limittotaltokens", "limitoutputtokens"}),
    # `gen_ai_unredacted_attributes=<list>` in OTEL_SEMCONV_STABILITY_OPT_IN: every sensitive
    # attribute (and event attribute) not listed is "[REDACTED]" (on its tracer's spans: another
    # instrumentation's "[REDACTED]" is its content)
    hidden_content=frozenset({"[REDACTED]"}),
    scopes=("strands",),
    notes="default format: answers, finish reasons and tool arguments only in span events; "
          "latest format with redaction on: the finish reasons only inside the redacted "
          "`gen_ai.output.messages`: a run stopped by `limits` reads unanswered, not "
          "`tool_limit_reached` (a known gap)",
)

STRANDS_STRUCTURED = Convention(
    name="strands-agents (structured output)",
    emitted_by="Strands for TypeScript's structured output, read on any span and by the model "
               "endpoint",
    # `structuredOutputSchema`, and a Swarm's hand-off: the call ends the agent's invocation,
    # its arguments the result (no request follows it)
    answer_tools=frozenset({"strands_structured_output"}),
    notes="its call is the agent's answer, never work: a Swarm node's (hand-off or final) ends "
          "that node's run",
)

SEMANTIC_KERNEL = Convention(
    name="Semantic Kernel",
    emitted_by="Semantic Kernel's model diagnostics (Python; GenAI, with its own operation names)",
    # up to 1.37 every model call had an SK name; since 1.38 chat is GenAI's "chat" and text
    # completions are "text_completions" (read for any emitter: kinds are merged by attribute)
    kinds={"gen_ai.operation.name": {
        "chat.completions": Role.LLM, "chat.streaming_completions": Role.LLM,
        "text.completions": Role.LLM, "text.streaming_completions": Role.LLM,
        "text_completions": Role.LLM}},
    # one reason per choice, joined by commas, each the str() of SK's FinishReason enum
    finish_reasons=("gen_ai.response.finish_reason",),
    answer_finish_reasons=frozenset({"finishreason.stop"}),
    tool_finish_reasons=frozenset({"finishreason.tool_calls", "finishreason.function_call"}),
    notes="messages and answers of model calls only in log records, never on spans; the "
          "auto-invoke cap (`maximum_auto_invoke_attempts`) leaves no trace" + ON_NO_SPAN,
)

GOOGLE_ADK = Convention(
    name="google-adk",
    emitted_by="ADK's native tracer (GenAI), optionally with OpenInference",
    limit_exceptions=frozenset({"LlmCallsLimitExceededError"}),
    notes="every `generate_content` says `finish_reasons=['stop']`, tool requests included: "
          "a model call followed by a tool call is not the answer",
)

# ADK's own records on its tracer's spans (ADK for TypeScript, npm `@google/adk`: `call_llm`,
# `execute_tool <tool>`, GenAI names for the rest): a tool's arguments and result as JSON, a
# model call's whole response (`{"content": {"parts": [...]}, "usageMetadata": ...,
# "finishReason": ...}`); each `{}` with ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false (read on
# its scope alone: anyone may write `{}`)
GOOGLE_ADK_RECORDS = Convention(
    name="google-adk (its own records)",
    emitted_by="ADK for TypeScript's tracer (`gcp.vertex.agent`: its `gcp.vertex.agent.*` "
               "attributes)",
    scopes=("gcp.vertex.agent",),
    tool_args=("gcp.vertex.agent.tool_call_args",),
    tool_result=("gcp.vertex.agent.tool_response",),
    llm_output=("gcp.vertex.agent.llm_response",),
    hidden_content=frozenset({"{}"}),
    # ... but a tool that takes no arguments is given `{}` too: its result there, they are its
    no_arguments=frozenset({"{}"}),
    notes="ADK for TypeScript: a tool that throws ends its span OK with no attribute (its "
          "error only in the next model request, as the tool's response), and `maxLlmCalls` "
          "reached leaves an empty `call_llm` span, the error an event of ADK's own: neither "
          "is seen (a tool error reads as none, a capped run `no_response`), nor are the "
          "messages of its requests (`gcp.vertex.agent.llm_request`'s `contents`: the "
          "run's `messages` is 0): known gaps; "
          "a tool given no arguments (`{}`) is read so when its result is there (a loop of "
          "it repeats), as hidden when its result is `{}` too (content capture off, or a tool "
          "that returns `{}`)",
)

CREWAI = Convention(
    name="crewai",
    emitted_by="openinference-instrumentation-crewai, OpenLLMetry's "
               "opentelemetry-instrumentation-crewai or OpenLIT",
    agent_span_name=("graph.node.id",),
    # crewai 1.x runs an agent's loop as a Flow of its own (`AgentExecutor`), which OpenLIT
    # traces as `invoke_workflow AgentExecutor` inside the agent's span: no agent of its own
    agent_span_name_placeholders=("AgentExecutor",),
    # ... and each of its methods as `invoke_agent <method>` naming no agent: steps; the one
    # that runs the tool the model asked for names no tool
    nested_step_span_names=("invoke_agent execute_native_tool",),
    tool_run_span_names=("invoke_agent execute_native_tool",),
    limit_prompts=(("Now it's time you MUST give your absolute best final answer", "max_iter"),),
    conversation_outputs=(("output.value", "expected_output"),),  # TaskOutput
    call_limits=(("input.value", ("agent", "max_iter"), "max_iter"),),
    # OpenInference's `<role>._execute_core` returns the TaskOutput: it ends OK only with one
    hidden_answers=("task_key",),
    notes="no model-call spans unless the OpenAI client is instrumented too; OpenLLMetry's "
          "instrumentation emits no tool span at all (workflow, task and agent spans, each "
          "`invoke_agent`, are one run): tool calls and tool errors are not seen (a known gap); "
          "OpenLIT's neither: its `invoke_agent <method>` spans of crewai's `AgentExecutor` "
          "flow name no tool (the `execute_native_tool` step is the tool the model call "
          "before it asked for, one per step; a failure is not seen, a known gap), the flow's "
          "`invoke_workflow` span no agent (one run); "
          "OpenInference with content hidden: `max_iter` is not seen (a capped run reads "
          "`completed`), nor, without the OpenAI instrumentation, any model call (known gaps)",
)

SMOLAGENTS = Convention(
    name="smolagents",
    emitted_by="openinference-instrumentation-smolagents",
    agent_span_name_patterns=(r"^(?P<name>.+)\.run$",),  # "<agent name>.run"
    tool_args_envelopes=((frozenset({"args", "kwargs", "sanitize_inputs_outputs"}), "kwargs"),),
    answer_tools=frozenset({"final_answer"}),
    limit_exceptions=frozenset({"AgentMaxStepsError"}),
    # at max_steps smolagents asks the model for an answer with its own system prompt
    limit_system_prompts=(("An agent tried to answer a user query but it got stuck and failed",
                           "max_steps"),),
    # ... from the agent span (`provide_final_answer`), every other model call in a `Step N`
    # span (planning calls too come before a step): what says it with content capture off
    cap_requests=(("smolagents.max_steps", "max_steps"),),
    notes="`max_steps` raises nothing: only the final request for an answer shows it (the only "
          "model call outside a `Step N` span)",
)

OPENAI_AGENTS = Convention(
    name="OpenAI Agents SDK",
    emitted_by="openinference-instrumentation-openai-agents, OpenLLMetry's "
               "opentelemetry-instrumentation-openai-agents or OpenLIT",
    limit_exceptions=frozenset({"MaxTurnsExceeded"}),
    # OpenInference writes the SDK's span error message; OpenLLMetry the repr of the whole
    # error dict (`{'message': 'Max turns exceeded', 'data': {'max_turns': 3}}`)
    limit_status=((r"^(?:\{'message': ')?Max turns exceeded\b", "MaxTurnsExceeded"),),
    # ... and Logfire the error dict as JSON (`error`, read by its entry's `limit_error_json`)
    limit_phrases=((r"^Max turns exceeded\b", "MaxTurnsExceeded"),),
    notes="the limit is only in the nested agent span's status description (under Logfire in "
          "its `error`); the root ends OK "
          "(the trace's run ends at the limit of the child run that ended last); "
          "OpenLLMetry hangs every agent span from the workflow root, never from the tool "
          "span that ran it: an agent used as a tool (`as_tool`) is told by its times (it ran "
          "inside its caller's tool call); its handoff span is a tool call",
)

LANGGRAPH = Convention(
    name="LangChain / LangGraph",
    emitted_by="OpenLLMetry (opentelemetry-instrumentation-langchain), OpenInference or OpenLIT",
    # A tool whose handle_tool_error catches its ToolException returns a ToolMessage with
    # status "error" (the exception's text as content); its span ends OK. Each tracer writes
    # that ToolMessage as the span's output, in its own shape:
    tool_result_errors=(
        # OpenInference: output.value = {"type": "tool", "data": {"content": …, "status": …}}
        ErrorResult("output.value", ((("type",), "tool"), (("data", "status"), "error")),
                    ("data", "content")),
        # OpenLLMetry: traceloop.entity.output = {"output": {"lc": 1, "type": "constructor",
        # "id": [… "ToolMessage"], "kwargs": {"content": …, "type": "tool", "status": …}}, …}
        ErrorResult("traceloop.entity.output",
                    ((("output", "kwargs", "type"), "tool"),
                     (("output", "kwargs", "status"), "error")),
                    ("output", "kwargs", "content")),
    ),
    # OpenLIT: gen_ai.tool.call.result = the ToolMessage's repr, ending with its status
    tool_result_error_texts=(
        ("gen_ai.tool.call.result", " status='error'",
         r"(?s)^content=(?P<q>['\"])(?P<message>.*)(?P=q) name=.* status='error'$"),),
    # OpenInference writes the runnable's metadata as JSON: create_agent(name=…) puts the
    # agent's name in every span's metadata (its graph span is named after it), and LangGraph
    # the node each span runs in — create_react_agent's model node is "agent", which
    # OpenInference gives the AGENT kind although it is one step of the graph.
    agent_name_json=(("metadata", ("lc_agent_name",)),),
    graph_node_json=(("metadata", ("langgraph_node",)),),
    # LangGraph.js under OpenInference marks no span AGENT and writes no lc_agent_name: the
    # graph's own root span (its metadata LangGraph's alone) is named after the graph
    # (createReactAgent({name})); "LangGraph" is the name of a graph given none
    root_graph_json=(("metadata", ("ls_integration",), "langgraph", "LangGraph"),),
    limit_exceptions=frozenset({"GraphRecursionError"}),
    limit_status=((r"^Recursion limit of \d+ reached", "GraphRecursionError"),),
    notes="a tool error the tool handles itself (`handle_tool_error`) is only in its result: "
          "a ToolMessage with status `error` on a span that ends OK; LangGraph.js under "
          "OpenInference marks no span AGENT and names the graph only in its root span's name; "
          "a graph invoked inside a tool is a trace of its own (no parent run: a known gap) "
          "unless the tool passes its config on, and then a span of LangGraph's metadata below "
          "the tool span, with model calls below it: a child run named after it; a graph "
          "root's output is its whole state (the answer is that JSON)",
)

LANGSMITH = Convention(
    name="LangSmith OpenTelemetry",
    emitted_by="LangSmith's own OpenTelemetry export (`langsmith[otel]`, `LANGSMITH_OTEL_ENABLED`"
               ", `LANGSMITH_OTEL_ONLY`) of LangChain/LangGraph runs",
    # every LangChain run is a span: `langsmith.span.kind` chain/llm/tool (GenAI's operation
    # names chat and execute_tool type the model and tool calls); the root chain is the
    # invocation (create_agent's and create_react_agent's graph, named after the agent)
    root_kinds={"langsmith.span.kind": {"chain": Role.WORKFLOW}},
    # create_agent(name=…) puts the agent's name in the metadata of every run of its graph
    agent_name=("langsmith.metadata.lc_agent_name",),
    agent_name_invocations=("langsmith.metadata.lc_agent_name",),
    agent_span_name=("langsmith.trace.name",),  # the run's name: the graph's name at the root
    # the run's inputs and outputs as JSON
    tool_args=("gen_ai.prompt",),
    tool_result=("gen_ai.completion",),
    answer=("gen_ai.completion",),
    # a handled tool error (handle_tool_error): {"output": {ToolMessage, "status": "error"}}
    tool_result_errors=(ErrorResult("gen_ai.completion",
                                    ((("output", "type"), "tool"),
                                     (("output", "status"), "error")),
                                    ("output", "content")),),
    # a model call's output is LangChain's LLMResult: the finish reason per generation
    output_envelopes=(OutputEnvelope("gen_ai.completion", ("generations", 0),
                                     ("generation_info", "finish_reason")),),
    # every error is recorded as `Exception(run.error)`: the exception's repr, then its traceback
    wrapped_exceptions=(("Exception", r"(?s)^(?P<type>[A-Za-z_][\w.]*)\((?P<message>.*?)\)"
                                      r"(?:Traceback \(most recent call last\)|$)"),),
    notes="no finish-reason or agent attribute: the finish reason is read from the model "
          "call's LLMResult (`gen_ai.completion`), the agent from `lc_agent_name` metadata "
          "(create_agent) or the root span's name (create_react_agent); errors are "
          "`exception` events of type `Exception` whose message is the real exception's repr "
          "and traceback: the type is read from the repr, and such an event fails its span even "
          "when a later update left the span OK; a create_react_agent run inside "
          "another's tool names no agent in its metadata: no child run (a known gap)",
)

LANGFUSE = Convention(
    name="Langfuse",
    emitted_by="the Langfuse SDK's own spans (Python, OpenTelemetry-based since v3: `@observe`, "
               "`start_as_current_observation`, its LangChain `CallbackHandler`), sent by an "
               "extra OTLP exporter on the tracer provider Langfuse uses",
    # only `langfuse.*` attributes: the observation's type says what a span is
    kinds={"langfuse.observation.type": {"generation": Role.LLM, "tool": Role.TOOL,
                                         "agent": Role.AGENT}},
    root_kinds={"langfuse.observation.type": {"chain": Role.WORKFLOW, "span": Role.WORKFLOW}},
    # the run's metadata flattened, one attribute per key: create_agent(name=…)'s on every span
    # of its graph, LangGraph's node names and integration
    agent_name=("langfuse.observation.metadata.lc_agent_name",),
    agent_name_invocations=("langfuse.observation.metadata.lc_agent_name",),
    graph_node_json=(("langfuse.observation.metadata.langgraph_node", ()),),
    root_graph_json=(("langfuse.observation.metadata.ls_integration", (), "langgraph",
                      "LangGraph"),),
    tool_args=("langfuse.observation.input",),
    tool_result=("langfuse.observation.output",),
    answer=("langfuse.observation.output",),
    llm_output=("langfuse.observation.output",),
    input_messages=("langfuse.observation.input",),
    request_model=("langfuse.observation.model.name",),
    usage_json=(("langfuse.observation.usage_details", ("input",), ("output",)),),
    # a handled tool error (handle_tool_error): the ToolMessage with status "error"
    tool_result_errors=(ErrorResult("langfuse.observation.output",
                                    ((("type",), "tool"), (("status",), "error")),
                                    ("content",)),),
    notes="no finish reason: a model call's output (LangChain's message as JSON) asking for "
          "tools is no answer; a failed span is status ERROR with the message alone "
          "(`langfuse.observation.level` ERROR, `status_message`), no exception type: a run "
          "a tool's exception ended reads `error` with no type (a known gap); LangGraph's "
          "recursion limit is in that message (`GraphRecursionError`); the CallbackHandler "
          "makes a chain whose name says \"agent\" an agent observation (create_react_agent's "
          "`agent` node): a step of its graph, by its `langgraph_node` metadata",
)

RIG = Convention(
    name="rig",
    emitted_by="rig's own GenAI tracing spans (Rust, rig-core's `Agent`: `invoke_agent`, "
               "`chat`, `execute_tool`) through `tracing-opentelemetry`",
    # a tool that returns an error: rig hands its text to the model as the result, "Toolset
    # error: ToolCallError: ToolCallError: <the error>", on a span that ends OK
    tool_result_error_texts=(
        ("gen_ai.tool.call.result", "ToolCallError: ",
         r"(?s)^Toolset error: (?:ToolCallError: )+(?P<message>.*)$"),),
    notes="rig makes its `invoke_agent` span the current span's when there is one and enters "
          "neither: its `chat` and `execute_tool` spans hang from the application's span around "
          "the invocation; without one (rig's own example) every span is a trace of its own "
          "(the model calls read as loose calls, the tools apart from them, the agent span a "
          "run with nothing in it: a known gap); `max_turns` returns an error the application "
          "records on its span (\"reached max turn limit\": `max_turns`); the model calls "
          "carry no finish reason, messages or model: the answer is the agent span's "
          "`gen_ai.completion`, and the calls are unpriced (a known gap; the [model endpoint]"
          "(model-endpoint.md) prices them by the model the request names)",
)

AGENTSCOPE = Convention(
    name="AgentScope",
    emitted_by="AgentScope 2's own GenAI spans (`TracingMiddleware` on the agent: "
               "`invoke_agent`, `chat`, `execute_tool`) on the global tracer provider",
    # a tool that raised: AgentScope hands the model its text as the result, the tool's span
    # ends OK and its gen_ai.tool.call.result (the ToolResponse as JSON) says "state": "error"
    tool_result_errors=(ErrorResult("gen_ai.tool.call.result", ((("state",), "error"),),
                                    ("content",)),),
    # max_iters' last call asked for a tool anyway (it runs): the reply ends with this text of
    # AgentScope's in place of an answer
    limit_answers=(("The maximum reasoning-acting iterations are exceeded.", "max_iters"),),
    # ... and at max_iters it asks for the answer in its own words (a reminder the request's
    # last message carries, which its spans leave out: the model endpoint reads it)
    limit_prompts=(("reasoning-acting iterations. Summarize the work and findings so far",
                    "max_iters"),
                   ("You have reached the maximum reasoning-acting iterations, so call",
                    "max_iters")),
    notes="a tool's exception is only in its result (`state` `error` on a span that ends OK); "
          "`max_iters` asks the model once more with `tool_choice` none and a hint the spans "
          "leave out of the input messages, and the reply's `exceed_max_iters` is on no span: "
          "the run reads `completed` with that last answer (a known gap)" + ON_NO_SPAN
          + "; a last call that asks for a tool anyway ends the reply with AgentScope's \"The "
          "maximum reasoning-acting iterations are exceeded.\": `max_iters`"
          + "; a tool function asks the user's permission unless given one: the reply parks "
          "(`agentscope.agent.hitl_pending_tools`) and reads `completed` with AgentScope's "
          "\"I'm waiting for your permission…\" as its answer (a known gap)",
)

AUTOGEN = Convention(
    name="AutoGen AgentChat",
    emitted_by="autogen-core's own GenAI spans; model calls by opentelemetry-instrumentation-"
               "openai-v2; or openinference-instrumentation-autogen-agentchat (with autogen-core's "
               "spans)",
    # openinference-instrumentation-autogen-agentchat: a team's run_stream is a root CHAIN
    # listing its participants
    team_members=("participant_names",),
    notes="`execute_tool` spans carry no arguments or result; `max_tool_iterations` ends the "
          "loop on no span (no answer: `no_response`)" + ON_NO_SPAN
          + "; a team run inside no span of the "
          "application's is one trace per runtime message, tied by span links only, which are "
          "not followed: one run per turn (run the team inside a span of your own, as "
          "AutoGen's tracing guide does: the first member's turn is the run, the next ones "
          "child runs); under OpenInference a team's root CHAIN lists its participants: the "
          "team's run (named after the service), each member's turn a child run of it, the "
          "team's answer its last member's; a turn's `invoke_agent` and OpenInference's "
          "`on_messages_stream` inside it are one agent",
)

AGNO = Convention(
    name="Agno",
    emitted_by="openinference-instrumentation-agno; OpenLLMetry (opentelemetry-instrumentation-"
               "agno)",
    # a tool that raised: OpenLLMetry writes Agno's ToolExecution (its repr) as the tool span's
    # output, "status='failure' result=None error='…' …", on a span that ends OK
    tool_result_error_texts=(
        ("traceloop.entity.output", "status='failure'",
         r"(?s)^status='failure' .*?\berror=(?P<q>['\"])(?P<message>.*?)(?P=q)(?= \w+=|$)"),),
    # OpenLLMetry: a team is a workflow span naming the team here (its leader's model calls
    # below it, beside the member's agent span)
    agent_name=("agno.team.name",),
    # tool_call_limit runs no call past the cap: Agno answers it with a tool message of its own
    # and asks the model again (tools still offered), which then answers
    limit_prompts=(("Tool call limit reached. Tool call ", "tool_call_limit"),),
    notes="`tool_call_limit` raises nothing and ends no loop: a call past it gets Agno's "
          "\"Tool call limit reached…\" as its result (no tool span) and the model is asked "
          "again, so the limit shows only in the input of the model call after it (a model that "
          "keeps asking is refused again and again: the run ends when it answers); a team "
          "member's agent span hangs from the team's agent span, not from "
          "`delegate_task_to_member`; a tool's exception leaves only its message (the status "
          "description): its type is `error`; with content hidden (OpenInference's "
          "`OPENINFERENCE_HIDE_*`) that input is too: a run refused at `tool_call_limit` reads "
          "`completed` (a known gap); under OpenLLMetry a team is a workflow span naming the "
          "team (`agno.team.name`) with the leader's model and delegation calls below it: the "
          "team's run, the member (its agent span beside the delegation, started after it "
          "ended) a child run",
)

LLAMAINDEX = Convention(
    name="LlamaIndex",
    emitted_by="openinference-instrumentation-llama-index (FunctionAgent, AgentWorkflow; the "
               "step-wise FunctionCallingAgent of llama-index-core 0.12); OpenLLMetry's "
               "opentelemetry-instrumentation-llamaindex (FunctionAgent, AgentWorkflow)",
    # run(max_iterations=n) with the default early_stopping_method="force" raises the generic
    # WorkflowRuntimeError: only its message names the limit
    limit_status=((r"^(?:[\w.]+: )?Max iterations of \d+ reached!", "max_iterations"),),
    # OpenLLMetry: the `call_tool` step's output is LlamaIndex's ToolCallResult event as JSON,
    # its `tool_output` saying `is_error` (the tool's exception caught, its text the result)
    tool_result_errors=(ErrorResult("traceloop.entity.output",
                                    ((("tool_output", "is_error"), True),),
                                    ("tool_output", "raw_output")),),
    # ... and each step's output the workflow's state, naming the agent whose step it is
    agent_name_json=(("traceloop.entity.output", ("current_agent_name",)),),
    # ... and with early_stopping_method="generate" appends a system message of its own and
    # asks the model once more
    limit_prompts=(("You have reached the maximum number of iterations (", "max_iterations"),),
    # a FunctionCallingAgent at max_function_calls runs no more tools and returns the text of
    # the model's last response, which asked for one and has none: its answer is "None"
    limit_answer_patterns=((r'\{"response": "None", "sources": \[', "max_function_calls"),),
    # the step-wise agents of llama-index-core 0.12 (AgentRunner: FunctionCallingAgent,
    # ReActAgent): every method the runner and its worker trace is an AGENT span below the
    # chat's; those of the task and step API are steps of the one chat (finalize_response, the
    # answer with nothing below it, is an unnamed agent span that only carries the answer: no
    # agent of its own, by the general rule)
    nested_step_span_suffixes=("._chat", "._achat", ".create_task", ".get_task", ".list_tasks",
                               ".delete_task", ".get_completed_steps", ".get_upcoming_steps",
                               "._run_step", "._arun_step", ".run_step", ".arun_step",
                               ".stream_step", ".astream_step", ".undo_step",
                               ".initialize_step", ".finalize_task"),
    notes="no span names the agent (only the repr of LlamaIndex's workflow events does): the "
          "run's agent is `service.name`; a step-wise agent (`AgentRunner`) traces every "
          "method of the runner and its worker as an agent span: its task and step methods are "
          "steps of the chat, `finalize_response` (the answer, nothing below it) no agent of its "
          "own; its `max_function_calls` leaves the model's last request for a tool unrun and "
          "answers `\"None\"` (with content hidden that is hidden too, and no model call "
          "records a finish reason: a capped run reads `completed`, a known gap" + ON_NO_SPAN
          + "); a failing one-argument tool is run again with its argument by keyword: two "
          "executions, two errors; an `AgentWorkflow` is one run, its agents' steps "
          "flat below the workflow span and a handoff a tool call (`handoff`): no child run "
          "per agent; every traced method of the LLM object is an LLM span: those with their "
          "input but no messages, finish reason or usage are no model call; LlamaIndex's "
          "native `llama-index-observability-otel` names no span kind (only its spans' names "
          "and LlamaIndex event names say what a span is): nothing is read from it, no run; "
          # a known gap (tests/frameworks/test_llamaindex.py, limit_generate_nocontent): the
          # limit_prompts entry above reads a message that content hiding removes
          "with content hidden (`OPENINFERENCE_HIDE_*`) the `generate` cap is not seen: its "
          "system message is in the hidden input (a capped run reads `completed`, a known gap); "
          "under OpenLLMetry every step is a `task` span (the `call_tool` one the tool call, "
          "by its `tool.name` and `tool.arguments`; its output LlamaIndex's ToolCallResult, "
          "`is_error` a failed call), the agent named in each step's output "
          "(`current_agent_name`: a handoff's one run is named by the step that started first), "
          "and a step that raised is never exported (OpenLLMetry does not end its span): "
          "`max_iterations` leaves no trace, the run reads `no_response`, a known gap",
)

DSPY = Convention(
    name="DSPy",
    emitted_by="openinference-instrumentation-dspy (`dspy.ReAct`), optionally with "
               "openinference-instrumentation-litellm",
    # ReAct offers the model a tool of its own, `finish` (no arguments, returns "Completed."),
    # to end its loop; the answer comes after it, from ReAct's extract step (a model call)
    # (its result is JSON-encoded, '"Completed."': read decoded, like every such value)
    loop_end_tools=(("finish", "Completed."),),
    # a tool span has no `tool.name`: it is named after the tool's method
    tool_name_span_suffixes=(".__call__", ".acall"),
    # the model call is `LM.__call__`/`LM.acall` (`<the LM's class>.…`): with content hidden it
    # records only its model name and its hidden input and output, yet it called the model
    llm_span_suffixes=(".__call__", ".acall"),
    # max_iters ends the loop silently and the extract step answers all the same: only the
    # trajectory in ReAct's output (the root CHAIN's `output.value`) shows that no step finished
    limit_states=(("output.value",
                   r'(?s)\{"trajectory": \{"thought_0": (?!.*"tool_name_\d+": "finish")',
                   "max_iters"),),
    # ... and with content hidden, from a run whose tools ran but never `finish`
    loop_caps=(("ReAct.forward", "max_iters"), ("ReAct.aforward", "max_iters")),
    notes="no AGENT span: the root `ReAct.forward` CHAIN is the invocation and no span names "
          "the agent (its name is `service.name`); the answer is the root's output (the whole "
          "`Prediction`, trajectory included); `max_iters` is read from a root trajectory "
          "without `finish` (a loop ended early for another reason — no valid tool named, "
          "context window exceeded — reads the same; a ReAct inside a program of the "
          "application's is not looked at); a ReAct run inside another's tool is a CHAIN "
          "below a TOOL span: no child run, its calls are the outer run's; a model call traced "
          "by both DSPy's `LM.__call__` and LiteLLM's `completion` counts once; without "
          "LiteLLM's instrumentation the model calls carry no token counts; with content "
          "hidden (`OPENINFERENCE_HIDE_*`) `LM.__call__` carries only its hidden input and "
          "output (still a model call), `finish` its hidden result (still the loop's end); "
          "the trajectory is hidden: `max_iters` is read from a run whose tools ran but never "
          "`finish` (with the same caveats)",
)

AGENT_FRAMEWORK = Convention(
    name="Microsoft Agent Framework",
    emitted_by="agent-framework-core's own GenAI spans (`agent_framework.observability`)",
    # max_iterations / max_function_calls / max_duration_seconds of the chat client's
    # function_invocation_configuration: one last model call with tool_choice="none"; when it
    # still asks for a tool (or says nothing) the framework answers with this text instead
    limit_answers=(("Function invocation limit reached before a final answer could be produced",
                    "function_invocation_limit"),),
    notes="`gen_ai.response.finish_reasons` is JSON text (`'[\"stop\"]'`), read as the list; "
          "the function-calling caps (`max_iterations`, `max_function_calls`, "
          "`max_duration_seconds`) end the loop with one more model call with "
          "`tool_choice=\"none\"`, on no span: a model that then answers leaves a run like any "
          "answered one (`completed`: a known gap); only the framework's stand-in text, when "
          "the model still asks for a tool, shows the limit (hidden with sensitive data off, "
          "the framework's default: such a run reads `no_response`, a known gap)" + ON_NO_SPAN
          + "; a workflow "
          "(`workflow.run`, no GenAI operation) is one run named after its first agent, each "
          "later agent a child run of it",
)

HAYSTACK = Convention(
    name="Haystack",
    emitted_by="Haystack's own tracer (`haystack.tracing`; the OpenTelemetryTracer of "
               "`opentelemetry-haystack` in 3.x), or openinference-instrumentation-haystack",
    span_names={"haystack.agent.run": Role.AGENT, "haystack.agent.step.llm": Role.LLM,
                "haystack.agent.step.tool": Role.TOOL},
    tool_name=("haystack.tool.name",),
    # content tracing only (HAYSTACK_CONTENT_TRACING_ENABLED=true), as are the model outputs
    tool_args=("haystack.agent.step.tool.input",),
    tool_result=("haystack.agent.step.tool.output",),
    # raise_on_tool_invocation_failure=False (the default): the error text goes to the model
    tool_error_flags=(("haystack.tool.error", "haystack.agent.step.tool.output", ("error",)),),
    llm_output=("haystack.agent.step.llm.output",),
    output_envelopes=(OutputEnvelope("haystack.agent.step.llm.output", ("replies",),
                                     ("meta", "finish_reason"),
                                     ("meta", "usage", "prompt_tokens"),
                                     ("meta", "usage", "completion_tokens"),
                                     ("meta", "model")),),
    # max_agent_steps raises nothing: the agent's result says why it stopped (content
    # tracing), its span how many steps it took of how many allowed
    limit_states=(("haystack.agent.output", r'(?s).*"exit_reason": "max_agent_steps"',
                   "max_agent_steps"),
                  # OpenInference: the Agent's CHAIN span, its result as JSON of reprs
                  ("output.value", r'(?s)\{"messages": .*"exit_reason": "max_agent_steps"',
                   "max_agent_steps")),
    step_caps=(StepCap("haystack.agent.steps_taken", "haystack.agent.max_steps",
                       "max_agent_steps", exit_reason="haystack.agent.output"),),
    notes="`max_agent_steps` raises nothing and asks for no last answer; without content "
          "tracing (Haystack's default) the model calls carry nothing: no run reads as "
          "answered (`no_response`), and a model that answers in the cap's last step reads as "
          "stopped by it" + ON_NO_SPAN
          + "; no span names the agent (its name is `service.name`); the model "
          "calls' input is a Python repr (no message count); openinference-instrumentation-"
          "haystack makes the Agent a CHAIN and its model calls LLM spans but gives its tools "
          "no span: no tool calls, no tool failures",
)

VERCEL_AI = Convention(
    name="Vercel AI SDK",
    emitted_by="the AI SDK's own telemetry (npm `ai`: `experimental_telemetry` on "
               "generateText/streamText)",
    # no GenAI operation name: `ai.operationId` (the span's name) says what a span is. The call
    # (every step of its tool loop) is the run, each `do*` a model call, `ai.toolCall` a tool
    kinds={"ai.operationId": {
        "ai.generateText": Role.AGENT, "ai.streamText": Role.AGENT,
        "ai.generateObject": Role.AGENT, "ai.streamObject": Role.AGENT,
        "ai.generateText.doGenerate": Role.LLM, "ai.streamText.doStream": Role.LLM,
        "ai.generateObject.doGenerate": Role.LLM, "ai.streamObject.doStream": Role.LLM,
        "ai.toolCall": Role.TOOL}},
    # an application may run the loop itself, one call a step (opencode: `stopWhen` at one
    # step, its own loop around it): calls of one agent side by side are one run, and a step
    # that ends on `tool-calls` stopped the run only if no model call came after it
    loop_call_span_names=("ai.generateText", "ai.streamText", "ai.generateObject",
                          "ai.streamObject"),
    agent_name=("ai.telemetry.functionId",),
    tool_name=("ai.toolCall.name",),
    tool_args=("ai.toolCall.args",),
    tool_result=("ai.toolCall.result",),
    # the call's and each model call's text (`gen_ai.usage.*` and `gen_ai.response.*` on the
    # model calls are GenAI's; the call's `ai.usage.*` adds its model calls up: never counted)
    answer=("ai.response.text",),
    llm_output=("ai.response.text",),
    input_messages=("ai.prompt.messages",),
    finish_reasons=("ai.response.finishReason",),
    tool_finish_reasons=frozenset({"tool-calls"}),
    # a stop condition (`stopWhen: stepCountIs(n)`, `maxSteps`) ends the loop after a step whose
    # tools ran, without asking the model again: the call ends on that step's finish reason
    limit_states=(("ai.response.finishReason", r"tool-calls$", "stop_when"),),
    notes="the agent is the call's `functionId` (else `service.name`); a call that ends on "
          "`tool-calls` was stopped by its `stopWhen` condition (`tool_limit_reached`) unless a "
          "model call of its run comes after it whose input goes on from that step's (an "
          "application that runs the loop itself, a call a step: calls of one agent side by "
          "side are one run; a request of its own after the stop, a summary, is not; with "
          "`recordInputs` off any model call after it is), and so reads one whose "
          "last tool has no `execute` (the application runs it: a known gap); "
          "a tool that throws fails its span and the SDK hands the error to the model; with "
          "`recordInputs`/`recordOutputs` off no span carries text, arguments or results (no "
          "answer text, no repeated calls seen), the finish reasons and usage still",
)

GENKIT = Convention(
    name="Genkit",
    emitted_by="Genkit's own telemetry (npm `genkit`: `enableTelemetry` from `genkit/tracing`; "
               "Genkit for Go on the global tracer provider)",
    # no GenAI or OpenInference attribute: `genkit:metadata:subtype` says what an action's span
    # is (a flow the invocation, a model a model call, a tool a tool call: `tool.v2` in Go);
    # `generate` (a util, no subtype in TypeScript) frames each turn of the tool loop, nested
    # one in the other in TypeScript, one for the whole loop in Go
    kinds={"genkit:metadata:subtype": {
        "flow": Role.AGENT, "model": Role.LLM, "tool": Role.TOOL, "tool.v2": Role.TOOL}},
    agent_span_name=("genkit:name",),
    tool_name=("genkit:name",),
    tool_args=("genkit:input",),
    tool_result=("genkit:output",),
    answer=("genkit:output",),
    # (a model call's `finishReason` is `stop` whether it answers or asks for tools: not read,
    # a tool call after it says which)
    usage_json=(("genkit:output", ("usage", "inputTokens"), ("usage", "outputTokens")),),
    # a model action's name is the model, after its plugin's (`googleai/gemini-2.5-flash`)
    request_model=("genkit:name",),
    # `maxTurns` reached: GenkitError ABORTED, every span up to the flow ends ERROR with it
    # ("Exceeded …" in TypeScript, "exceeded …" in Go)
    limit_phrases=((r"(?i)exceeded maximum tool call iterations", "max_turns"),),
    notes="the agent is the flow (`genkit:name`); a model call's output is Genkit's response "
          "JSON, its `finishReason` `stop` whether it answers or asks for tools (a tool call "
          "after it says which; not read); a tool that throws fails the whole call (Genkit "
          "hands no error to the model); a flow run inside a tool is a child run",
)

LOGFIRE = Convention(
    name="Logfire",
    emitted_by="Pydantic Logfire's integrations: `logfire.instrument_openai_agents()` (the OpenAI "
               "Agents SDK)",
    # no GenAI operation or span kind: a Logfire span is named after its message template
    # (`logfire.msg_template`, fixed per kind of span), its arguments its attributes. The SDK's
    # agent runs, function tools, handoffs and model calls (Chat Completions or Responses API)
    # each have one; its trace is the root (`Task: Agent workflow` and each agent's
    # `Turn {turn} for agent <name>` are steps)
    # (its attribute names are the words of its message templates, `name`, `input`, `output`,
    # `error`, `response`: read on Logfire's spans alone, never another instrumentation's)
    scopes=("logfire",),
    kinds={"logfire.msg_template": {
        "Agent run: {name!r}": Role.AGENT,
        "Function: {name}": Role.TOOL,
        "Handoff: {from_agent} → {to_agent}": Role.TOOL,
        "Chat completion with {gen_ai.request.model!r}": Role.LLM,
        "Responses API with {gen_ai.request.model!r}": Role.LLM,
        "OpenAI Agents trace: {name}": Role.WORKFLOW}},
    agent_span_name=("name",),
    tool_name=("name",),
    tool_args=("input",),
    tool_result=("output",),
    # a model call's messages in and out, as the SDK sends and receives them (JSON)
    input_messages=("input",),
    output_messages=("output",),
    # a failed span's error is the SDK's error dict as JSON (`{"message": "Max turns exceeded",
    # "data": {…}}`), not its status description
    limit_error_json=(("error", ("message",)),),
    error_json=(("error", ("message",)),),
    # a Responses API call's answer is in the whole response it records (its `output` items)
    answer_texts=("response",),
    notes="spans named after Logfire's message templates (`logfire.msg_template`), no GenAI "
          "operation; an agent's name is the `name` of its `Agent run` span; a failed span's "
          "error is the SDK's error dict (`error`), the `max_turns` stop's too",
)

MASTRA = Convention(
    name="Mastra",
    emitted_by="Mastra's own traces exported by `@mastra/otel-exporter` (npm `@mastra/core`'s "
               "observability)",
    # GenAI operation names for the agent (`invoke_agent`), its model calls (`chat`) and tools
    # (`execute_tool`); each step of the tool loop an `agent_step` span saying whether the loop
    # goes on after it. `maxSteps` (or a `stopWhen` condition) ends the loop after a step whose
    # model asked for tools, once they ran, without asking the model again: nothing fails
    stopped_steps=(StoppedStep("mastra.model_step.is_continued", "mastra.model_step.output",
                               ("toolCalls",), "max_steps"),),
    # its default SensitiveDataFilter writes this for the value of every key it takes for a
    # secret (`key`, `token`, `password`…), tool arguments included (its exporter's spans:
    # another instrumentation's "[REDACTED]" is its content)
    hidden_content=frozenset({"[REDACTED]"}),
    scopes=("@mastra/", "mastra"),
    notes="the loop's `maxSteps`/`stopWhen` stop is the last step's (`agent_step`): its model "
          "asked for tools and the loop did not go on (`max_steps`), with or without an "
          "answer (and so reads a loop that a tool suspended, awaiting approval or run by the "
          "application itself: a known gap); a tool argument whose value the default "
          "SensitiveDataFilter redacted (`[REDACTED]`: keys such as `key`, `token`, `secret`) "
          "makes its call one that cannot "
          "be told from another (no repeats); the exporter sends every 5 s (its own setting, "
          "not `OTEL_BSP_SCHEDULE_DELAY`): the watchdog sees a run up to 5 s late, a short one "
          "only once it has ended (steer such runs through the [model endpoint]"
          "(model-endpoint.md)); an agent run inside a tool is a child run when the tool passes "
          "its `tracingContext` on (as Mastra's docs show), else a trace and a run of its own",
)

SPRING_AI = Convention(
    name="Spring AI",
    emitted_by="Spring AI's Micrometer observations (Java: `ChatClient`, its advisors, the chat "
               "model, each tool call) through Micrometer Tracing's OpenTelemetry bridge",
    # a ChatClient call is one invocation (its `gen_ai.operation.name` is "framework", as its
    # advisors' are): two of them in one web request's trace are two runs
    kinds={"spring.ai.kind": {"chat_client": Role.AGENT}},
    # each tool call's arguments and result, when the application asks for them
    # (spring.ai.tools.observations.include-content=true); the span's name gives the tool
    tool_args=("spring.ai.tool.call.arguments",),
    tool_result=("spring.ai.tool.call.result",),
    notes="Spring AI has no agent name: the run is named after the service "
          "(`spring.application.name`), and no session; each `spring_ai chat_client` span is "
          "an invocation (`spring.ai.kind`), below a web request's span or the trace's root "
          "(a second one below the same span reads as the first's child run); its advisors' "
          "spans are steps of it. By default no content is on the spans: the tools' arguments "
          "and results only with `spring.ai.tools.observations.include-content=true` (without "
          "them a repeated call cannot be told from another); never the answer. A tool's "
          "exception is handed to the model as its message, on a span that ends OK, and "
          "`maxTotalToolCalls` ends the invocation with its own message as the answer: neither "
          "is told by a span (a known gap: the run reads answered, or `no_response` when the "
          "last model call asked for tools)" + ON_NO_SPAN,
)

AG2 = Convention(
    name="AG2",
    emitted_by="AG2 1.x's `TelemetryMiddleware` (`ag2[tracing]`: GenAI spans, `ag2.span.type`)",
    # its `record_usage model_call` span repeats the usage of the `chat` span beside it (a
    # model and its tokens, no operation): a record, not a second model call
    records=(("ag2.usage.kind", "model_call"),),
    # the middleware's name for an agent it was given none for (`invoke_agent unknown`)
    agent_name_placeholders=("unknown",),
    notes="GenAI spans (`invoke_agent`, `chat`, `execute_tool`); each model call's usage is "
          "recorded again on a `record_usage model_call` span beside it, which is no model "
          "call; the agent's name is the middleware's `agent_name` (without it AG2 writes "
          "`unknown`, which names no agent: the run is named after the service), not the "
          "`Agent`'s; AG2's loop "
          "has no cap of its own; a tool's exception fails its span and is handed to the "
          "model, whose answer ends the run; `record_usage` spans of spend no model-call span "
          "carries (a subtask's rollup, compaction) are read as model calls",
)

GRIPTAPE = Convention(
    name="Griptape",
    emitted_by="Griptape's `OpenTelemetryObservabilityDriver` (a span per `@observable` method, "
               "named `<class>.<method>()`)",
    # no GenAI attribute at all: only the decorator's `tags` (a string array) says which
    # spans are the prompt driver's calls and the tools' runs
    kinds={"tags": {"PromptDriver.run()": Role.LLM, "Tool.run()": Role.TOOL}},
    # a tool's span is named after the tool and the method: `LookupTool.try_run()`
    tool_name_span_suffixes=(".try_run()",),
    notes="its spans carry no model, tokens, messages, tool name, arguments or result: the run "
          "is the trace (named after the service), its model calls those tagged "
          "`PromptDriver.run()`, its tool calls those tagged `Tool.run()` (named after the "
          "tool, `LookupTool`, not its activity: the model's `LookupTool_lookup`); a tool's "
          "exception fails its span and Griptape hands the error to the model; the task's "
          "`max_subtasks` stop is an `ErrorArtifact` output, on no span (the run reads "
          "unanswered); several `Agent.run` calls in one `Observability` block are one trace, "
          "so one run" + ON_NO_SPAN,
)

VOLTAGENT = Convention(
    name="VoltAgent",
    emitted_by="VoltAgent's own traces (npm `@voltagent/core`'s `VoltAgentObservability`, an "
               "OTLP span processor given to it)",
    # its own attribute names, generic words (`input`, `output`, `span.type`): read on its
    # scope's spans alone
    scopes=("@voltagent/",),
    # the agent's span carries no `span.type`; the loop's one `llm:generateText` span (or
    # `llm:streamText`) and each tool's `tool.execution:<tool>` do. A sub-agent's span
    # (`subagent:<name>`, below its `delegate_task` tool call) is the one of its spans with
    # `subagent.type` and no `span.type`
    kinds={"span.type": {"llm": Role.LLM, "tool": Role.TOOL},
           "subagent.type": {"agent": Role.AGENT}},
    # (a sub-agent's spans name their parent in `entity.name`, themselves in `subagent.name`)
    agent_name=("subagent.name", "entity.name"),
    tool_name=("tool.name",),
    tool_args=("input",),
    tool_result=("output",),
    answer=("output",),
    finish_reasons=("llm.finish_reason", "ai.response.finish_reason"),
    input_tokens=("llm.usage.prompt_tokens",),
    output_tokens=("llm.usage.completion_tokens",),
    request_model=("llm.model",),
    notes="one model-call span for the whole tool loop of a `generateText`/`streamText` (its "
          "finish reason and usage the last step's), not one per step: a run reads one model "
          "call unless the agent's span counts its steps (`voltagent.step_count`, written when "
          "`maxSteps` stopped it); `maxSteps` ends the loop after a step whose model asked for "
          "tools, once they ran: the agent's span ends OK with finish reason `tool-calls` "
          "(`max_steps`); a tool's exception fails its span and VoltAgent hands the error to "
          "the model; a sub-agent (`subAgents`, reached by its `delegate_task` tool) is a "
          "child run named by `subagent.name` (its spans' `entity.name` is the parent's)"
          + ON_NO_SPAN,
)

# The VoltAgent agent's own span, by names of VoltAgent's alone (read on every scope): the
# trace root that names an entity of type `agent` is the agent's invocation, ended by `maxSteps`
# when its loop's last step asked for tools; the steps it counts are its model calls
VOLTAGENT_AGENT = Convention(
    name="VoltAgent (the agent's span)",
    emitted_by="VoltAgent's own traces (npm `@voltagent/core`)",
    root_kinds={"entity.type": {"agent": Role.AGENT}},
    limit_states=(("ai.response.finish_reason", r"tool-calls$", "max_steps"),),
    turn_counts=("voltagent.step_count",),
)

KOOG = Convention(
    name="Koog",
    emitted_by="Koog's own OpenTelemetry feature (`install(OpenTelemetry)`: GenAI spans "
               "`create_agent`, `invoke_agent`, `chat`, `execute_tool`, and its own `strategy`, "
               "`node` spans)",
    # the agent's `maxIterations` (its graph's steps) fails the `invoke_agent` span with
    # `error.type` the (qualified) exception class
    limit_exceptions=frozenset({"AIAgentMaxNumberOfIterationsReachedException"}),
    # without `setVerbose(true)` (its default) every message, tool argument and result, on the
    # spans and in their events, is this placeholder (its instrumentation scope is the
    # application's service name, so the placeholder is read on every scope)
    hidden_content=frozenset({"HIDDEN:non-empty"}),
    notes="the spans name no agent (`gen_ai.agent.id` is the agent's id, a random UUID unless "
          "given one): the run is named after the service; a tool's exception fails its "
          "`execute_tool` span as `AIAgentError` with the message `Unknown error` (the "
          "exception's own message reaches the model in the next request, on no span of the "
          "tool's); the messages and the tools' arguments and results are on the spans only "
          "with `setVerbose(true)`" + ON_NO_SPAN,
)

CLAUDE_CODE = Convention(
    name="Claude Code",
    emitted_by="Claude Code's own OpenTelemetry (npm `@anthropic-ai/claude-code`: "
               "`CLAUDE_CODE_ENABLE_TELEMETRY=1`; its spans with "
               "`CLAUDE_CODE_ENHANCED_TELEMETRY_BETA=1` and `OTEL_TRACES_EXPORTER=otlp`: "
               "`claude_code.interaction`, `claude_code.llm_request`, `claude_code.tool`)",
    scopes=("com.anthropic.claude_code",),
    # GenAI operation names for the prompt's interaction (`invoke_agent`), its model calls
    # (`chat`) and tools (`execute_tool`); a tool's call is its command, on the tool's span
    # with `OTEL_LOG_TOOL_DETAILS=1` (the Bash tool's; no other tool's arguments are on a
    # span), its output a `tool.output` event with `OTEL_LOG_TOOL_CONTENT=1`
    tool_args=("full_command",),
    tool_result=("tool.output:output",),
    # a sub-agent's model calls and tools name it (`agent_id`, the id its requests' header
    # `x-claude-code-agent-id` carries), below its `Agent` tool call's execution
    subagent_ids=("agent_id",),
    # the answer: only in its `assistant_response` log event (`OTEL_LOGS_EXPORTER`; its body
    # `claude_code.assistant_response`, of its scope `com.anthropic.claude_code.events`), which
    # names the interaction's span: read as that span's output (its text with
    # `OTEL_LOG_ASSISTANT_RESPONSES=1`, hidden without)
    answer=("assistant_response:response",),
    log_events=("assistant_response",),
    # what it writes for a prompt or an answer it does not log (without
    # `OTEL_LOG_USER_PROMPTS`, `OTEL_LOG_ASSISTANT_RESPONSES`)
    hidden_content=frozenset({"<REDACTED>"}),
    notes="the spans name no agent: the run is named after the service (`claude-code`), its "
          "session Claude Code's (`session.id`); a sub-agent (its `Agent` tool) runs below "
          "that tool's span, its model calls and tools naming it (`agent_id`): a child run of "
          "the invocation's, as the model endpoint makes it; the "
          "answer is its `assistant_response` log event's, joined to the "
          "interaction's span it names; no span carries the arguments of a tool other than "
          "Bash (only the `claude_code.tool_result` log event has them, naming no tool's "
          "span): a repeated call of another tool cannot be told from another" + ON_NO_SPAN,
)

QWEN_CODE = Convention(
    name="Qwen Code",
    emitted_by="Qwen Code's own OpenTelemetry (npm `@qwen-code/qwen-code`, its settings' "
               "`telemetry`: `qwen-code.interaction`, `qwen-code.llm_request`, "
               "`qwen-code.tool`, GenAI operation names; its log events)",
    scopes=("qwen-code",),
    # its spans carry no content: a model call's output text is its `qwen-code.api_response`
    # log event's, a tool's arguments its `qwen-code.tool_call` event's, each naming the span
    answer_texts=("qwen-code.api_response:response_text",),
    tool_args=("qwen-code.tool_call:function_args",),
    log_events=("qwen-code.api_response", "qwen-code.tool_call"),
    notes="its spans are read as the GenAI conventions' (`invoke_agent`, `chat`, "
          "`execute_tool`); the answer and a tool's arguments come from its log events, joined "
          "to the spans they name (`qwen-code.api_response`'s `response_text`, "
          "`qwen-code.tool_call`'s `function_args`): with no logs exported, no answer text and "
          "a repeated tool call not told from another",
)

GEMINI_CLI = Convention(
    name="Gemini CLI",
    emitted_by="Gemini CLI's own OpenTelemetry (npm `@google/gemini-cli`: "
               "`GEMINI_TELEMETRY_ENABLED`, its spans' content with "
               "`GEMINI_TELEMETRY_TRACES_ENABLED`: `llm_call`, `tool_call`; its log events)",
    # its own operation names, generic words: read on its scope's spans alone
    scopes=("gemini-cli",),
    kinds={"gen_ai.operation.name": {"llm_call": Role.LLM, "tool_call": Role.TOOL}},
    # a tool call's request and its outcome as JSON objects of its own (the request's
    # `args`: GEMINI_CLI_RECORDS)
    tool_args=("gen_ai.input.messages",),
    tool_result=("gen_ai.output.messages",),
    chunked_answers=True,  # (a streamed answer: a message a chunk, its text as it came)
    notes="no span for an invocation: each model call (`llm_call`) a trace of its own, read as "
          "loose calls of its agent (`gen_ai.agent.name` `gemini-cli`, its session "
          "`gen_ai.conversation.id`), each batch of tools another (`schedule_tool_calls`, a "
          "`tool_call` per tool below it), joined to that run by the call ids its model calls' "
          "`functionCall` parts asked for; its spans' content only with "
          "`GEMINI_TELEMETRY_TRACES_ENABLED`; no finish reason on any span; each chunk of a "
          "streamed answer a message of its own, their texts joined as they came "
          "(`chunked_answers`); its log events add nothing its spans lack",
)

# Gemini CLI's records of a tool call, read on every span (no entry with scopes may say how a
# JSON value is read): its request `{"callId", "name", "args", ...}`, the arguments its `args`;
# its outcome `{"status": "error", "response": {"responseParts": [{"functionResponse":
# {"response": {"error": ...}}}], ...}}` a failed call, on a span that ended OK
GEMINI_CLI_RECORDS = Convention(
    name="Gemini CLI (its tool calls' records)",
    emitted_by="Gemini CLI's own OpenTelemetry (its `tool_call` spans' content)",
    tool_args_envelopes=((frozenset({"callId", "name", "args"}), "args"),),
    tool_result_errors=(ErrorResult(
        "gen_ai.output.messages", ((("status",), "error"),),
        ("response", "responseParts", 0, "functionResponse", "response", "error")),),
)

CODEX = Convention(
    name="Codex CLI",
    emitted_by="the OpenAI Codex CLI's own traces (Rust; its `[otel]` `trace_exporter`: its "
               "`tracing` spans, a turn's `run_turn`, each model request's HTTP span, each "
               "tool's dispatch span)",
    # the model call: the span of the HTTP request itself, whose context the request's
    # `traceparent` carries (the model endpoint's call hangs below it: its twin, counted
    # once), not the `run_sampling_request` around it, which also spans the tools it ran
    span_names={"run_turn": Role.AGENT,
                "endpoint_session.stream_encoded_json_with": Role.LLM},
    kinds={"codex.tool.phase": {"dispatch": Role.TOOL}},
    # its turn's trace has a second root: the request that started the turn, ended before
    # its work; the turn's end is its run's
    second_roots={"turn/start": "run_turn"},
    notes="a turn (`run_turn`, one `codex exec`) is a run, named after the service "
          "(`codex_exec`: no span names an agent), each model request (its HTTP span, "
          "`endpoint_session.stream_encoded_json_with`) a model call, each tool's dispatch "
          "span (`codex.tool.phase: dispatch`) a tool call; a tool's arguments and output come "
          "from its `codex.tool_result` log event, joined to the tool's span by its `call_id` "
          "(with no logs exported, a loop of one command is not told from new commands); no "
          "span or joinable event carries a model call's tokens, finish reason, messages or "
          "the answer: traced alone, a run ends `no_response`, its calls unpriced (known "
          "gaps: `codex.sse_event`, a response's tokens, names no trace or span; the "
          "`handle_responses` spans that carry them are no model call's); the turn's trace "
          "has a second root, `turn/start` (the request that started the turn, ended before "
          "its work: `second_roots`), which does not end the run: the end of its turn "
          "(`run_turn`) does" + ON_NO_SPAN,
)

CODEX_NAMES = Convention(
    name="Codex CLI (its tool names, its log events)",
    emitted_by="the OpenAI Codex CLI's own traces and log events (its `[otel]` `exporter`)",
    # its own generic name (`tool_name`): read on its scope's spans alone (the tracer is
    # named after the binary: `codex_exec` for `codex exec`; its log scope `codex_otel.*`)
    scopes=("codex",),
    tool_name=("tool_name",),
    # a tool's arguments and output: only in its `codex.tool_result` log event (its name in
    # the `event.name` attribute: the record's field holds a source location), which names
    # the tool's child span (`dispatch_tool_call_with_state`), not the tool's: joined to the
    # tool's span by the `call_id` both carry
    tool_args=("codex.tool_result:arguments",),
    tool_result=("codex.tool_result:output",),
    log_events=("codex.tool_result",),
    log_event_keys=("codex.tool_result:call_id",),
)

AGENTOPS = Convention(
    name="AgentOps",
    emitted_by="the AgentOps SDK's own tracing (its decorators `@trace`, `@agent`, "
               "`@operation`/`@task`, `@tool`, `@workflow`; its own OpenAI instrumentation; "
               "its smolagents instrumentation)",
    # its own names, generic words (`operation.name`): read on its scopes' spans alone (the
    # decorators' `agentops`, its OpenAI wrappers' `agentops.instrumentation...`)
    scopes=("agentops",),
    # the `@trace` span (`<name>.session`) frames the invocation; `@agent` on a class spans
    # the agent's methods (`<name>.agent`); `@tool` spans an execution (`<name>.tool`)
    # Its smolagents instrumentation writes no `agentops.span.kind`: an agent's span
    # (`<name>.run`) has its `agent.role` (`executor`, a managed agent's `managed`), a tool's
    # (`tool.execute`) its `tool.status`, `tool.name`, `tool.parameters` and `tool.result`
    kinds={"agentops.span.kind": {"session": Role.WORKFLOW, "workflow": Role.WORKFLOW,
                                  "agent": Role.AGENT, "tool": Role.TOOL},
           "agent.role": {"executor": Role.AGENT, "managed": Role.AGENT},
           "tool.status": {"success": Role.TOOL, "error": Role.TOOL}},
    agent_span_name=("operation.name",),
    tool_name=("operation.name", "tool.name"),
    tool_args=("agentops.tool.input", "tool.parameters"),
    tool_result=("agentops.tool.output", "tool.result"),
    answer=("agentops.entity.output",),
    # what the smolagents instrumentation writes for arguments it could not read (every
    # call's): no arguments, not empty ones (such calls are no repeats of each other; a
    # decorated function's are `{"args": [], "kwargs": {}}`)
    hidden_content=frozenset({"{}"}),
    notes="each model call is its OpenAI instrumentation's `openai.chat.completion` span (the "
          "messages as indexed `gen_ai.prompt.N`/`gen_ai.completion.N`), with a "
          "`tool_call.<name>` span below it per tool call the model asked for (a request, "
          "no execution: what runs is the `@tool` span); a tool's exception fails its span "
          "(and is recorded on it twice); the arguments are the decorated function's "
          "(`{\"args\": [...], \"kwargs\": {...}}`); its smolagents instrumentation "
          "names no tool (`tool.name` `unknown`: its wrapper reads a `ToolCall` smolagents no "
          "longer passes) and no arguments (`{}`): the `final_answer` call is a tool call like "
          "the others and no call a repeat of another, and the agent is named on the agent's "
          "span alone (it ends last: a budget for its name applies once the run is over); "
          "`max_steps` ends the loop with a last request offering no tools (on no span: the "
          "run reads `completed`, answered by that request's text; a known gap)" + ON_NO_SPAN,
)

LAMINAR = Convention(
    name="Laminar",
    emitted_by="Laminar's own spans (`lmnr`: `Laminar.initialize()`; its trace processor for the "
               "OpenAI Agents SDK)",
    # its words (`lmnr.span.input`, `lmnr.span.output`): read on its scope's spans alone
    scopes=("lmnr",),
    # what a span is: `lmnr.span.type` LLM or TOOL (a handoff too); everything else DEFAULT
    kinds={"lmnr.span.type": {"LLM": Role.LLM, "TOOL": Role.TOOL}},
    # an agent's span (named after it, DEFAULT) records the agent as its input: {"name": …,
    # "tools": […]}; the span so named is the agent's invocation
    agent_name_json=(("lmnr.span.input", ("name",)),),
    tool_args=("lmnr.span.input",),
    tool_result=("lmnr.span.output",),
    notes="a span's kind is `lmnr.span.type` (`LLM`, `TOOL`, else `DEFAULT`): an agent's span "
          "is a `DEFAULT` one named after the agent whose input names it (`{\"name\": …}`); "
          "`service.name` is the script's path unless set; the answer is the last model call's "
          "output (the agent's span records none)",
)

LANGTRACE = Convention(
    name="Langtrace",
    emitted_by="Langtrace's own instrumentation (`langtrace-python-sdk`: `langtrace.init()`; "
               "its Agno and OpenAI instrumentations)",
    # Agno's agent span (`Agent.run`) names its agent; no span carries a kind of any convention
    # (`langtrace.service.type` says `framework` or `llm`)
    agent_name=("agno.agent.name",),
    # a model call's messages are in its span events, as JSON lists
    input_messages=("gen_ai.content.prompt:gen_ai.prompt",),
    output_messages=("gen_ai.content.completion:gen_ai.completion",),
    notes="a model call's messages only in its `gen_ai.content.prompt`/`gen_ai.content.completion` "
          "events, no finish reason; its Agno instrumentation (written for Agno 1.x) traces the "
          "agent's run and no tool: the model's requests for tools are in its output messages "
          "alone, no tool call is seen (a known gap)" + ON_NO_SPAN,
)

KAIBANJS = Convention(
    name="KaibanJS",
    emitted_by="none of its own (npm `kaibanjs`): its words, read by the model endpoint",
    # maxIterations (10) with forceFinalAnswer (its default): 2 iterations before its limit, it
    # asks for the final answer in its own words, the request's last message
    limit_prompts=(("We don't have more time to keep looking for the answer. Please use all "
                    "the information you have gathered", "maxIterations"),),
    notes="no spans: its `maxIterations` is read at the model endpoint, from the words it asks "
          "for its final answer in 2 iterations before it (`forceFinalAnswer`)",
)

# Order is precedence: the first entry naming a fact wins when a span carries several.
CONVENTIONS: tuple[Convention, ...] = (
    WATCHDOG, GENAI, GENAI_NEWEST, OPENINFERENCE, OPENLLMETRY, PYDANTIC_AI, HERMES, STRANDS,
    STRANDS_STRUCTURED,
    SEMANTIC_KERNEL, GOOGLE_ADK, CREWAI, SMOLAGENTS, OPENAI_AGENTS, LANGGRAPH, LANGSMITH,
    GOOGLE_ADK_RECORDS,
    LANGFUSE, GENERIC_LIMITS, AUTOGEN, AGNO, LLAMAINDEX, DSPY, AGENT_FRAMEWORK, HAYSTACK,
    OPENLIT, ANTHROPIC_SDK, MLFLOW, VERCEL_AI, GENKIT, LOGFIRE, MASTRA, RIG, AGENTSCOPE,
    SPRING_AI, AG2, GRIPTAPE, VOLTAGENT, VOLTAGENT_AGENT, KOOG, CODEX, CODEX_NAMES,
    AGENTOPS, LAMINAR, LANGTRACE, CLAUDE_CODE, QWEN_CODE, GEMINI_CLI,
    GEMINI_CLI_RECORDS, KAIBANJS,
)
