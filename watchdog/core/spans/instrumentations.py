"""The conventions no single agent framework owns, one table entry each: the instrumentation
conventions (OTel GenAI, its newest attributes, OpenInference, OpenLLMetry, OpenLIT, MLflow
Tracing, the Anthropic SDK's own spans), the watchdog client SDK's attributes and the common
words for a stop at a limit. Their place in the order of precedence is
:data:`watchdog.core.spans.frameworks.CONVENTIONS`.
"""

from __future__ import annotations

from watchdog.core.spans.schema import Convention, NestedAgent, OutputEnvelope, Role, UnaskedTool

# The answer/tool-request finish reasons every provider family uses (OpenAI, Anthropic, Bedrock,
# Gemini). "length"/"max_tokens" is neither: a truncated response is not the run's answer, and
# not a limit stop of the run either (the loop may go on); the run ends no_response if it was
# the last word.
ANSWER_FINISH = frozenset({"stop", "end_turn", "complete", "completed", "eos", "stop_sequence"})
TOOL_FINISH = frozenset({"tool_calls", "tool_call", "tool_use", "function_call"})

GENAI = Convention(
    name="OTel GenAI",
    emitted_by="OTel GenAI semantic conventions (openai-v2, pydantic-ai, Strands, ADK, ...)",
    kinds={"gen_ai.operation.name": {
        "chat": Role.LLM, "text_completion": Role.LLM, "generate_content": Role.LLM,
        "completion": Role.LLM, "execute_tool": Role.TOOL, "invoke_agent": Role.AGENT,
        "invoke_workflow": Role.WORKFLOW, "create_agent": Role.CREATE_AGENT}},
    # (a span's name is `<operation> <entity>`: OpenLIT's LangGraph workflow span that ended in
    # an error has only its name left to say what it is)
    span_name_prefixes=(("execute_tool ", Role.TOOL), ("invoke_agent", Role.AGENT),
                        ("invoke_workflow", Role.WORKFLOW)),
    # Semantic Kernel's kernel.invoke_prompt: the prompt function's execute_tool frames the run
    unasked_tools=(UnaskedTool("gen_ai.operation.name", "execute_tool",
                               ("gen_ai.tool.call.id",)),),
    # an emitter that names no operation (older GenAI conventions, a toolkit's own telemetry):
    # a span with a model and its token usage is that model's call
    model_call_marks=(("gen_ai.request.model", "gen_ai.response.model"),
                      ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
                       "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens")),
    agent_name=("gen_ai.agent.name",),
    agent_span_name=("gen_ai.workflow.name",),
    session=("gen_ai.conversation.id",),
    response_id=("gen_ai.response.id",),
    tool_name=("gen_ai.tool.name",),
    tool_name_span_prefixes=("execute_tool ",),
    # the conventions' events as span events (Strands' tracer: a model call's answer and a
    # tool's result in `gen_ai.choice`, a tool's arguments in `gen_ai.tool.message`, its
    # latest format's messages in `gen_ai.client.inference.operation.details`): the conventions'
    # own names, so read on every span, whoever emits them
    tool_args=("gen_ai.tool.call.arguments", "gen_ai.tool.message:content"),
    tool_result=("gen_ai.tool.call.result", "gen_ai.choice:message"),
    answer=("gen_ai.output.messages", "gen_ai.choice:message",
            "gen_ai.client.inference.operation.details:gen_ai.output.messages"),
    llm_output=("gen_ai.choice:message",),
    finish_reasons=("gen_ai.response.finish_reasons", "gen_ai.choice:finish_reason"),
    input_messages=("gen_ai.input.messages",
                    "gen_ai.client.inference.operation.details:gen_ai.input.messages"),
    output_messages=("gen_ai.output.messages",
                     "gen_ai.client.inference.operation.details:gen_ai.output.messages"),
    input_tokens=("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
    output_tokens=("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
    total_tokens=("gen_ai.usage.total_tokens",),
    response_model=("gen_ai.response.model",),
    request_model=("gen_ai.request.model",),
    provider=("gen_ai.provider.name", "gen_ai.system"),
    answer_finish_reasons=ANSWER_FINISH,
    tool_finish_reasons=TOOL_FINISH,
    notes="`error.type`, status ERROR and `exception` events for errors; a tool call no "
          "model asked for (Semantic Kernel's `kernel.invoke_prompt`) with a model call inside "
          "is no tool call: at a trace root the invocation, its result the answer if its model "
          "calls say nothing; inside a run the frame of its model loop",
)

# The newest GenAI conventions, in their own repository (open-telemetry/semantic-conventions-
# genai): read in docs/gen-ai/non-normative/examples-agent-interactions.md (the execute_tool
# transfer span: `gen_ai.transfer.target.name`, `gen_ai.transfer.mode`; `gen_ai.caller.name` /
# `.type` on an invoke_agent CLIENT span) and model/gen-ai/registry.yaml (usage, messages; its
# `cache_creation` is `cache_write` in the newer text and its emitters); the budget, turn,
# cost and end-reason attributes are the proposals the repository's issues and pull requests
# name (#425/#439 budgets, #390 `gen_ai.agent.invocation.end_reason`), not yet in its registry.
GENAI_NEWEST = Convention(
    name="OTel GenAI (newest)",
    emitted_by="the GenAI conventions' newest attributes (semantic-conventions-genai): agent "
               "budgets, turn count, cost, end reason, messages delta, caller and transfer",
    kinds={"gen_ai.operation.name": {"handle_conversation_turn": Role.WORKFLOW}},
    # a framework's entry point (the `gen_ai.invocation.internal` span): it frames the
    # invocation, the agent span below it (if any) is the run's own
    span_name_prefixes=(("handle_conversation_turn", Role.WORKFLOW),),
    budget_limits=(("gen_ai.agent.iteration_budget.limit", "max_iterations"),
                   ("gen_ai.agent.iteration_budget", "max_iterations"),
                   ("gen_ai.agent.token_budget.limit", "max_tokens"),
                   ("gen_ai.agent.token_budget", "max_tokens")),
    budget_consumed=(("gen_ai.agent.iteration_budget.consumed", "max_iterations"),
                     ("gen_ai.agent.token_budget.consumed", "max_tokens")),
    turn_counts=("gen_ai.agent.turn.count",),
    reported_cost=("gen_ai.usage.cost.total", "gen_ai.usage.cost"),
    cache_read_tokens=("gen_ai.usage.cache_read.input_tokens",),
    cache_write_tokens=("gen_ai.usage.cache_write.input_tokens",
                        "gen_ai.usage.cache_creation.input_tokens"),
    input_messages_delta=("gen_ai.input.messages_delta",),
    transfer_targets=("gen_ai.transfer.target.name",),
    caller_names=("gen_ai.caller.name",),
    # a model call's content as a log record (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_
    # CONTENT=event_only`): the messages in and out, the finish reasons
    log_events=("gen_ai.client.inference.operation.details",),
    # how the invocation ended, as the agent says: a limit it reached is that limit
    limit_states=(
        ("gen_ai.agent.invocation.end_reason",
         r"(?i)(?:max_turns|turns?_limit|turns?_exceeded)\b", "max_turns"),
        ("gen_ai.agent.invocation.end_reason",
         r"(?i)(?:max_iterations|iterations?_(?:limit|budget|exceeded))\w*", "max_iterations"),
        ("gen_ai.agent.invocation.end_reason",
         r"(?i)(?:max_tool_calls|tool_(?:call_)?limit)\w*", "max_tool_calls"),
        ("gen_ai.agent.invocation.end_reason",
         r"(?i)(?:max_tokens|token_(?:limit|budget))\w*", "max_tokens"),
        ("gen_ai.agent.invocation.end_reason", r"(?i)budget_(?:exhausted|exceeded)\b",
         "budget"),
    ),
    notes="a budget the agent reports (`gen_ai.agent.iteration_budget.*`, `token_budget.*`) "
          "is the run's, as if announced; `gen_ai.agent.turn.count` its iterations when no "
          "model-call span says; `gen_ai.agent.invocation.end_reason` naming a limit ends the "
          "run `tool_limit_reached`; `gen_ai.usage.cost.*` is kept as the call's reported "
          "cost; the `execute_tool` transfer span is a tool call naming the agent it hands "
          "to; `handle_conversation_turn` frames the invocation",
)

OPENINFERENCE = Convention(
    name="OpenInference",
    emitted_by="Arize OpenInference instrumentations (OpenAI Agents, smolagents, crewai, "
               "LangChain, ADK, ...)",
    kinds={"openinference.span.kind": {"LLM": Role.LLM, "TOOL": Role.TOOL, "AGENT": Role.AGENT,
                                       "llm": Role.LLM, "tool": Role.TOOL, "agent": Role.AGENT}},
    root_kinds={"openinference.span.kind": {"CHAIN": Role.WORKFLOW, "chain": Role.WORKFLOW}},
    agent_name=("agent.name",),
    session=("session.id",),
    tool_name=("tool.name",),
    tool_args=("input.value",),
    tool_result=("output.value",),
    # OPENINFERENCE_HIDE_INPUTS / _OUTPUTS (TraceConfig.hide_inputs / hide_outputs): the values
    # become "__REDACTED__"; the flattened messages are dropped
    hidden_content=frozenset({"__REDACTED__"}),
    answer=("output.value",),
    llm_output=("output.value",),
    llm_input=("input.value",),
    finish_reasons=("llm.finish_reason",),
    flat_input_prefixes=("llm.input_messages.",),
    flat_output_prefixes=("llm.output_messages.",),
    input_tokens=("llm.token_count.prompt",),
    output_tokens=("llm.token_count.completion",),
    total_tokens=("llm.token_count.total",),
    response_model=("llm.model_name",),
    provider=("llm.provider",),
    cache_read_tokens=("llm.token_count.prompt_details.cache_read",),
    cache_write_tokens=("llm.token_count.prompt_details.cache_write",),
    reported_cost=("llm.cost.total",),
    answer_texts=("llm.output_messages.0.message.content",),
    notes="a root CHAIN span (LangChain/LangGraph, ADK `invocation`) is the invocation",
)

OPENLLMETRY = Convention(
    name="OpenLLMetry",
    emitted_by="Traceloop OpenLLMetry (opentelemetry-instrumentation-langchain, -openai, ...; "
               "the Node SDK `@traceloop/node-server-sdk` for LangChain.js)",
    kinds={"traceloop.span.kind": {"tool": Role.TOOL, "agent": Role.AGENT,
                                   "workflow": Role.WORKFLOW,
                                   # OpenAI Agents: the model's transfer_to_<agent> call
                                   "handoff": Role.TOOL},
           # embedding and rerank calls set llm.request.type too: they are not iterations
           "llm.request.type": {"chat": Role.LLM, "completion": Role.LLM}},
    # LlamaIndex's workflow agents: the step that runs a tool (`call_tool`) is a span of kind
    # "task" like every other step, told only by the tool's name and arguments it carries
    tool_call_marks=(("tool.name",), ("tool.arguments",)),
    # LangChain.js (@traceloop/instrumentation-langchain): every chain is a `workflow` span
    # named after its class (the graph, CompiledStateGraph, and its steps, RunnableSequence,
    # RunnableLambda), each hung from the active context (the application's span around the
    # invocation: `withAgent`), not from the chain that ran it: below the root, a step of its run
    nested_agent_roles=(NestedAgent((("traceloop.span.kind", "workflow"),
                                     ("gen_ai.provider.name", "langchain"))),),
    # LangChain/LangGraph: the agent whose graph ran the span, on every span of it
    agent_name=("traceloop.association.properties.lc_agent_name",),
    agent_span_name=("traceloop.entity.name",),
    # LlamaIndex: a span is named `<class>.<kind>` ("FunctionAgent.workflow", the workflow's
    # class), its entity name the same: no agent's name
    agent_span_name_placeholders=(r"\w+\.(?:workflow|task)",),
    tool_name=("traceloop.entity.name",),
    # LangChain.js: every tool span is named after the tool's class; its result, the
    # ToolMessage LangChain serialised, names the tool
    tool_name_placeholders=frozenset({"DynamicStructuredTool", "DynamicTool",
                                      "StructuredTool"}),
    tool_name_json=(("traceloop.entity.output", ("kwargs", "name")),),
    tool_args=("tool.arguments", "traceloop.entity.input"),
    tool_args_envelopes=((frozenset({"input_str", "inputs"}), "inputs"),),  # LangChain tools
    tool_result=("traceloop.entity.output",),
    answer=("traceloop.entity.output",),
    finish_reasons=("gen_ai.completion.0.finish_reason", "llm.response.finish_reason"),
    flat_input_prefixes=("gen_ai.prompt.",),
    flat_output_prefixes=("gen_ai.completion.",),
    answer_texts=("gen_ai.completion.0.content",),
    input_tokens=("llm.usage.prompt_tokens",),
    output_tokens=("llm.usage.completion_tokens",),
    total_tokens=("llm.usage.total_tokens",),
    cache_read_tokens=("gen_ai.usage.cache_read_input_tokens",),
    cache_write_tokens=("gen_ai.usage.cache_creation_input_tokens",),
    notes="LangChain.js (Node SDK): every span hangs from the active context, not from the chain "
          "that ran it: frame each invocation with `withAgent`/`withWorkflow` (without, each "
          "span is a trace of its own and every chain reads as a run: a known gap); a tool span "
          "is named after the tool's class (`DynamicStructuredTool`): its name is read from the "
          "ToolMessage it returned, and the model's call id that message names makes it a call "
          "a model asked for (a tool that raised returns none: it keeps the class's name); "
          "`withAgent` never ends its span when the invocation raises (LangGraph's recursion "
          "limit): the limit the graph's span told ends the run `loose_run_gap` after its last "
          "span"
)

WATCHDOG = Convention(
    name="watchdog client SDK",
    emitted_by="agent_watchdog_client and its adapters",
    agent_name=("watchdog.agent.name",),
    session=("watchdog.session.id",),
    limit_attributes=("watchdog.limit_reached",),
    limit_exceptions=frozenset({"ToolLimitReached"}),
    declined_tool_flags=("watchdog.tool.refused",),
)

OPENLIT = Convention(
    name="OpenLIT",
    emitted_by="OpenLIT (`openlit.init()`: GenAI spans for the OpenAI Agents SDK, LangChain, "
               "LangGraph, the OpenAI client, ...)",
    nested_agent_roles=(
        # OpenAI Agents: a handoff is `invoke_agent <to agent>` naming the agent it came from
        NestedAgent((("gen_ai.agent.source", None),), Role.TOOL),
        # LangGraph: every graph node runs in an `invoke_agent <node>` span (the graph is the
        # `invoke_workflow <agent>` root); LangChain: any chain whose name says "agent" (the
        # model node "agent" of create_react_agent) is `invoke_agent <chain>`. OpenLIT's spans
        # carry `gen_ai.application_name` (OpenLLMetry's agent spans say "langgraph" too)
        NestedAgent((("gen_ai.provider.name", "langgraph"), ("gen_ai.application_name", None))),
        NestedAgent((("gen_ai.provider.name", "langchain"), ("gen_ai.application_name", None))),
    ),
    # OpenAI Agents: the SDK's task and turn spans, which OpenLIT gives the agent operation
    nested_step_span_names=("invoke_agent",),
    notes="every span is GenAI: spans of agent kind that are no agent are read as steps (the "
          "OpenAI Agents SDK's task and turn spans, bare `invoke_agent`; LangGraph's graph "
          "nodes and LangChain's chains named \"agent\"), a handoff (`gen_ai.agent.source`) as "
          "a tool call; a LangGraph agent invoked inside a tool gets no span of its own: its "
          "model and tool calls are its caller's (a known gap)",
)

ANTHROPIC_SDK = Convention(
    name="Anthropic SDK",
    emitted_by="the Anthropic Python SDK's own spans (`anthropic.messages.create`, on by default "
               "once a tracer provider is set)",
    # OTel GenAI's operation name and usage; the stop reason only here (no output messages)
    finish_reasons=("anthropic.message.stop_reason",),
    notes="beside OpenLLMetry's span of the same call (a trace of its own) paired by "
          "`gen_ai.response.id` and counted once; inside OpenInference's, its twin",
)

def _limit_phrase(limit: str, unit: str) -> str:
    """A stop at a limit told in words: "Max turns (3) exceeded", "Reached the maximum number
    of iterations (5)", "stopped due to the turn limit", "was not able to resolve the task in
    4 iterations" (a failure in so many ``unit``; case-insensitive)."""
    said = r"(?:exceeded|reached|hit)"
    failed = r"(?:not able to|unable to|could not|couldn't|failed to|did not|didn't)"
    return (rf"(?i)\b(?:{limit})\b[^.\n]{{0,40}}?\b{said}\b"
            rf"|\b(?:{said}|stopped (?:due to|at|after))\b[^.\n]{{0,24}}?\b(?:{limit})\b"
            rf"|\b{failed}\b[^.\n]{{0,60}}?\b(?:with)?in \d+ (?:{unit})\b")


GENERIC_LIMITS = Convention(
    name="other limits",
    emitted_by="common names and words for a stop at a limit, and where agents name "
               "themselves in their own input or metadata",
    limit_exceptions=frozenset({"MaxIterationsExceeded", "RecursionLimitExceeded"}),
    # a framework that raises a generic exception (or none: an error in its output) and says
    # in its message that it stopped at its cap on turns, iterations or steps
    limit_phrases=(
        (_limit_phrase(r"max(?:imum)?[ _](?:number[ _]of[ _])?turns?|turns? limit",
                       r"turns?"), "max_turns"),
        (_limit_phrase(r"max(?:imum)?[ _](?:number[ _]of[ _])?(?:iterations?|iters?)"
                       r"|iterations? limit", r"iterations?"), "max_iterations"),
        (_limit_phrase(r"max(?:imum)?[ _](?:number[ _]of[ _])?steps?|steps? limit",
                       r"steps?"), "max_steps"),
    ),
    limit_error_json=(("gen_ai.framework.error.message", ()), ("output.value", ("error",)),
                      ("mlflow.spanOutputs", ("error",)),
                      ("traceloop.entity.output", ("error",))),
    # a root span whose input or metadata names the agent it runs (a hand-written loop's own
    # span, a framework that names its agent nowhere else)
    root_agent_name_json=(("metadata", ("agent_name",)), ("input.value", ("agent_name",)),
                          ("input.value", ("agent", "name")), ("input.value", ("name",)),
                          ("mlflow.spanInputs", ("agent_name",)),
                          ("mlflow.spanInputs", ("agent", "name")),
                          ("mlflow.spanInputs", ("name",))),
    notes="a limit told only in words (\"Max turns (3) exceeded\", \"Reached the maximum "
          "number of iterations\") in a failed span's status description or exception "
          "message, or in an `error` its output reports, is that limit, not an error",
)

MLFLOW = Convention(
    name="MLflow Tracing",
    emitted_by="MLflow Tracing (`@mlflow.trace`, `mlflow.<flavour>.autolog()`) exported over "
               "OTLP",
    # every attribute value is JSON-encoded (a type arrives as "\"TOOL\"", a count as "12"):
    # read decoded like any other
    kinds={"mlflow.spanType": {"LLM": Role.LLM, "CHAT_MODEL": Role.LLM, "TOOL": Role.TOOL,
                               "AGENT": Role.AGENT}},
    root_kinds={"mlflow.spanType": {"CHAIN": Role.WORKFLOW}},
    agent_span_name=("mlflow.spanFunctionName",),  # the traced function's name
    tool_args=("mlflow.spanInputs",),
    tool_result=("mlflow.spanOutputs",),
    answer=("mlflow.spanOutputs",),
    llm_output=("mlflow.spanOutputs",),
    llm_input=("mlflow.spanInputs",),
    input_messages=("mlflow.spanInputs",),
    # the OpenAI flavour's output is the ChatCompletion itself
    output_envelopes=(OutputEnvelope("mlflow.spanOutputs", ("choices",), ("finish_reason",)),),
    usage_json=(("mlflow.chat.tokenUsage", ("input_tokens",), ("output_tokens",)),),
    request_model=("mlflow.llm.model",),
    notes="only `mlflow.*` attributes, each value JSON-encoded; a tool is a `TOOL` span named "
          "after its function; a hand-written loop's own span (`@mlflow.trace`) is no agent "
          "span: its answer is its last model call's",
)
