"""Where the normaliser looks for each fact: the attribute names of the combined convention
tables (:data:`~watchdog.core.spans.combined.TABLES`), in order of precedence, as module constants
the per-span code reads as globals; and the attributes a span is decoded for at all
(:data:`WANTED_ATTRIBUTES`, :data:`SCALAR_ATTRIBUTES`).
"""

from __future__ import annotations

from watchdog.core.spans.combined import TABLES
from watchdog.core.spans.record import AGENT, BUDGET_KEYS, LLM, OTHER, TOOL, SpanKind
from watchdog.core.spans.schema import Role

# ---------------------------------------------------------------------------------------------
# Attribute names, in order of precedence: the combined tables of watchdog.core.spans.combined.
# The run key (DESIGN §3) is not a convention's: it is the watchdog's contract.
RUN_ID_KEYS = ("watchdog.run.id",)
CLIENT_RUN_SPAN = "watchdog.run "  # the name of the span the client SDK frames its runs with
AGENT_CALL_ID_KEYS = ("gen_ai.agent.call.id",)
PARENT_RUN_KEYS = ("watchdog.parent_run.id",)
ERROR_TYPE_KEYS = ("error.type",)
AGENT_NAME_KEYS = TABLES.agent_name
AGENT_SPAN_NAME_KEYS = TABLES.agent_span_name
AGENT_SPAN_NAME_PATTERNS = TABLES.agent_span_name_patterns
AGENT_SPAN_NAME_PLACEHOLDERS = TABLES.agent_span_name_placeholders
AGENT_NAME_PLACEHOLDERS = TABLES.agent_name_placeholders
AGENT_NAME_JSON = TABLES.agent_name_json
AGENT_INVOCATION_KEYS = TABLES.agent_name_invocations
WRAPPED_EXCEPTION_TYPES = frozenset(TABLES.wrapped_exceptions)
GRAPH_NODE_JSON = TABLES.graph_node_json
JSON_IDENTITY_KEYS = tuple(dict.fromkeys(key for key, _ in AGENT_NAME_JSON + GRAPH_NODE_JSON))
ROOT_AGENT_NAME_JSON = TABLES.root_agent_name_json
ROOT_GRAPH_JSON = TABLES.root_graph_json
TEAM_MEMBER_KEYS = TABLES.team_members
LIMIT_ERROR_JSON = TABLES.limit_error_json
ERROR_JSON = TABLES.error_json
STOPPED_STEPS = TABLES.stopped_steps
SESSION_KEYS = TABLES.session
RESPONSE_ID_KEYS = TABLES.response_id
TOOL_NAME_KEYS = TABLES.tool_name
TOOL_ARGS_KEYS = TABLES.tool_args
TOOL_ARGS_ENVELOPES = TABLES.tool_args_envelopes
TOOL_RESULT_KEYS = TABLES.tool_result
AGENT_OUTPUT_KEYS = TABLES.answer
LLM_OUTPUT_KEYS = TABLES.llm_output
ANSWER_TEXT_KEYS = TABLES.answer_texts
LLM_INPUT_KEYS = TABLES.llm_input
INPUT_TOKEN_KEYS = TABLES.input_tokens
OUTPUT_TOKEN_KEYS = TABLES.output_tokens
TOTAL_TOKEN_KEYS = TABLES.total_tokens
USAGE_JSON = TABLES.usage_json
# What a model call is priced by (watchdog.core.runs.pricing)
MODEL_KEYS = TABLES.response_model + TABLES.request_model  # the answering model first
PROVIDER_KEYS = TABLES.provider
FINISH_REASON_KEYS = TABLES.finish_reasons
MESSAGES_JSON_KEYS = TABLES.input_messages
OUTPUT_MESSAGES_JSON_KEYS = TABLES.output_messages
# Flattened conventions: the message count is the highest index + 1.
FLAT_INPUT_PREFIXES = TABLES.flat_input_prefixes
FLAT_OUTPUT_PREFIXES = TABLES.flat_output_prefixes
FLAT_TOOL_CALLS = ".tool_calls."  # in a flattened output message's key: it asks for tools
CONVERSATION_OUTPUTS = TABLES.conversation_outputs
# Where a model call's last input message is looked for: JSON message lists, and raw requests
# whose message list ends near their end.
PROMPT_KEYS = (*MESSAGES_JSON_KEYS, *TABLES.input_messages_delta, *TABLES.llm_input)
# A model call whose attributes name none of these has its outcome looked for in its events.
OUTCOME_KEYS = (*FINISH_REASON_KEYS, *OUTPUT_MESSAGES_JSON_KEYS, *LLM_OUTPUT_KEYS)
KIND_KEYS = tuple(key for key, _ in TABLES.kinds + TABLES.root_kinds)
# Tool spans no model asked for (no call id): at a trace root, maybe the invocation.
UNASKED_TOOLS = tuple((rule.attribute, rule.value, rule.call_ids)
                      for rule in TABLES.unasked_tools)

# What a convention's role means for a run: a span creating an agent is no work of a run.
ROLE_KINDS: dict[Role | None, SpanKind] = {
    Role.LLM: LLM, Role.TOOL: TOOL, Role.AGENT: AGENT, Role.WORKFLOW: AGENT,
    Role.CREATE_AGENT: OTHER, None: OTHER}
KIND_MAPS = TABLES.kinds
ROOT_KIND_MAPS = TABLES.root_kinds
# Module globals: an enum member lookup costs ~50 ns, once per span.
CREATE_AGENT, WORKFLOW, AGENT_ROLE = Role.CREATE_AGENT, Role.WORKFLOW, Role.AGENT
SPAN_NAME_ROLES = TABLES.span_names
NESTED_AGENT_ROLES = TABLES.nested_agent_roles
NESTED_STEP_SPAN_NAMES = TABLES.nested_step_span_names
TOOL_RUN_SPAN_NAMES = TABLES.tool_run_span_names
SECOND_ROOTS = TABLES.second_roots  # roots that are not their run's end (Convention.second_roots)
RUN_ENDS = TABLES.run_ends  # ... and the spans whose end is their run's
LOOP_CALLS = TABLES.loop_calls  # agent spans that are one step of a loop (loop_call_span_names)
NESTED_STEP_SPAN_SUFFIXES = TABLES.nested_step_span_suffixes
SPAN_NAME_PREFIX_ROLES = TABLES.span_name_prefixes
MODEL_CALL_MARKS = TABLES.model_call_marks
RECORD_SPANS = TABLES.records
TOOL_CALL_MARKS = TABLES.tool_call_marks
TOOL_NAME_SPAN_PREFIXES = TABLES.tool_name_span_prefixes
TOOL_NAME_SPAN_SUFFIXES = TABLES.tool_name_span_suffixes
TOOL_NAME_PLACEHOLDERS = TABLES.tool_name_placeholders
TOOL_NAME_JSON = TABLES.tool_name_json
LLM_SPAN_SUFFIXES = TABLES.llm_span_suffixes

# Output tools deliver the final answer (pydantic-ai final_result, smolagents final_answer);
# they are not work the agent did.
OUTPUT_TOOL_NAMES = TABLES.answer_tools
OUTPUT_TOOL_PREFIXES = TABLES.answer_tool_prefixes
LOOP_END_TOOLS = TABLES.loop_end_tools
DECLINED_TOOL_FLAGS = TABLES.declined_tool_flags
# The texts instrumentations write in place of content they hide: no content.
HIDDEN_CONTENT = TABLES.hidden_content
CAP_REQUESTS = TABLES.cap_requests
LOOP_CAPS = TABLES.loop_caps
HIDDEN_ANSWERS = TABLES.hidden_answers
# ... and those of scoped entries, hidden content on their scopes' spans only
SCOPED_HIDDEN_CONTENT = frozenset(text for scoped in TABLES.scopes
                                  for text in scoped.hidden_content)
# (a request that is a placeholder, whoever wrote it, is no request: request_hash)
ANY_HIDDEN_CONTENT = HIDDEN_CONTENT | SCOPED_HIDDEN_CONTENT
HIDDEN_CONTENT_CHARS = max(map(len, ANY_HIDDEN_CONTENT), default=-1)
# A model response that finished for one of these reasons is an answer, not a tool request.
ANSWER_FINISH_REASONS = TABLES.answer_finish_reasons  # (watchdog.core.rule_tests reads it)
# What an agent reports of itself (the newest GenAI conventions): its budget and how much of
# it it used, its turns, a call's cost and cache tokens, the new input messages of a call.
BUDGET_LIMIT_KEYS = TABLES.budget_limits
BUDGET_CONSUMED_KEYS = TABLES.budget_consumed
TURN_COUNT_KEYS = TABLES.turn_counts
REPORTED_COST_KEYS = TABLES.reported_cost
CACHE_READ_KEYS = TABLES.cache_read_tokens
CACHE_WRITE_KEYS = TABLES.cache_write_tokens
MESSAGES_DELTA_KEYS = TABLES.input_messages_delta
TRANSFER_TARGET_KEYS = TABLES.transfer_targets
CALLER_KEYS = TABLES.caller_names
SUBAGENT_ID_KEYS = TABLES.subagent_ids  # the sub-agent a model or tool call ran in
# Where a span says which of the model's tool calls it executes (SpanRecord.tool_call_id): an
# attribute (a tool span's convention, or a hand-traced span's generic one), else the span's
# input JSON: its ``tool_call_id``/``call_id``, or the id of a tool call object at its top or
# directly inside it (the loop traced the call as the model gave it). Read on tool spans and
# spans of no kind; an input is parsed only when it is short and holds an id key.
# (Gemini CLI's tool spans: `gen_ai.tool.call_id`; the Vercel AI SDK's `ai.toolCall` span:
# `ai.toolCall.id`)
TOOL_CALL_ID_KEYS = ("gen_ai.tool.call.id", "tool_call_id", "tool_call.id", "call_id",
                     "gen_ai.tool.call_id", "ai.toolCall.id")
TOOL_CALL_INPUT_KEYS = ("input", "input.value", "mlflow.spanInputs", "traceloop.entity.input")
TOOL_CALL_ID_JSON_KEYS = ("tool_call_id", "call_id")
MAX_CALL_INPUT_CHARS = 16 * 1024

ANNOUNCED_BUDGET = tuple((key, "watchdog.budget." + key) for key in BUDGET_KEYS)
# Where a span names a budget: the client SDK's announcement, or the agent's own report
BUDGET_ATTRIBUTES = frozenset(
    [attribute for _, attribute in ANNOUNCED_BUDGET]
    + [attribute for attribute, _ in BUDGET_LIMIT_KEYS + BUDGET_CONSUMED_KEYS])

WANTED_ATTRIBUTES = frozenset(
    RUN_ID_KEYS + AGENT_CALL_ID_KEYS + AGENT_NAME_KEYS + AGENT_INVOCATION_KEYS + SESSION_KEYS
    + PARENT_RUN_KEYS + RESPONSE_ID_KEYS
    + TOOL_NAME_KEYS + TOOL_ARGS_KEYS + TOOL_RESULT_KEYS + AGENT_OUTPUT_KEYS + INPUT_TOKEN_KEYS
    + OUTPUT_TOKEN_KEYS + TOTAL_TOKEN_KEYS + FINISH_REASON_KEYS + MESSAGES_JSON_KEYS
    + OUTPUT_MESSAGES_JSON_KEYS + KIND_KEYS + ERROR_TYPE_KEYS + AGENT_SPAN_NAME_KEYS
    + LLM_OUTPUT_KEYS + tuple(rule.attribute for rule in TABLES.tool_result_errors)
    + tuple(key for key, _, _ in TABLES.tool_result_error_texts)
    + TABLES.limit_attributes + tuple(key for key, _, _ in TABLES.limit_states)
    + DECLINED_TOOL_FLAGS
    + tuple(key for key, _ in CONVERSATION_OUTPUTS)
    + tuple(key for key, _, _ in TABLES.call_limits) + JSON_IDENTITY_KEYS
    + tuple(call_id for _, _, call_ids in UNASKED_TOOLS for call_id in call_ids)
    + tuple(key for rule in NESTED_AGENT_ROLES for key, _ in rule.where)
    + tuple(key for flag, result, _ in TABLES.tool_error_flags for key in (flag, result))
    + tuple(rule.attribute for rule in TABLES.output_envelopes)
    + tuple(key for rule in TABLES.step_caps for key in (rule.steps, rule.cap, rule.exit_reason)
            if key)
    + tuple(key for key, _ in TABLES.cap_requests) + TABLES.hidden_answers
    + ANSWER_TEXT_KEYS + tuple(key for key, _, _ in USAGE_JSON)
    + tuple(key for key, _ in ROOT_AGENT_NAME_JSON) + tuple(key for key, _ in LIMIT_ERROR_JSON)
    + tuple(key for key, _ in ERROR_JSON) + tuple(key for key, _ in TOOL_NAME_JSON)
    + tuple(key for rule in STOPPED_STEPS for key in (rule.continued, rule.output))
    + tuple(key for key, _, _, _ in ROOT_GRAPH_JSON) + TEAM_MEMBER_KEYS
    + TOOL_CALL_ID_KEYS + TOOL_CALL_INPUT_KEYS
    + TURN_COUNT_KEYS + REPORTED_COST_KEYS + CACHE_READ_KEYS + CACHE_WRITE_KEYS
    + MESSAGES_DELTA_KEYS + TRANSFER_TARGET_KEYS + CALLER_KEYS + MODEL_KEYS + PROVIDER_KEYS
    + SUBAGENT_ID_KEYS
    + tuple(key for marks in TOOL_CALL_MARKS for group in marks for key in group)
    + tuple(key for key, _ in RECORD_SPANS)
) | BUDGET_ATTRIBUTES
# Where a number or a flag is read: a JSON-encoded one ("12", "true") is decoded to it.
SCALAR_ATTRIBUTES = frozenset(
    INPUT_TOKEN_KEYS + OUTPUT_TOKEN_KEYS + TOTAL_TOKEN_KEYS
    + tuple(key for rule in TABLES.step_caps for key in (rule.steps, rule.cap))
    + tuple(key for key, _ in TABLES.cap_requests)
    + tuple(flag for flag, _, _ in TABLES.tool_error_flags) + DECLINED_TOOL_FLAGS
    + TURN_COUNT_KEYS + REPORTED_COST_KEYS + CACHE_READ_KEYS + CACHE_WRITE_KEYS
) | BUDGET_ATTRIBUTES
# A scoped entry's attributes (combined.alias): decoded under their own names, given their
# aliases on the spans of its scopes (watchdog.core.spans.scopes)
ALIASED = {alias: name for scoped in TABLES.scopes for name, alias in scoped.aliases}
WANTED_ATTRIBUTES |= frozenset(ALIASED[key] for key in WANTED_ATTRIBUTES if key in ALIASED)
SCALAR_ATTRIBUTES |= frozenset(ALIASED[key] for key in SCALAR_ATTRIBUTES if key in ALIASED)

# The facts the dispatch and the model-call and tool readers look up by first presence (the
# first of a fact's attribute names whose value is present and not ""), each read as it is or
# as text (``values._first_str``). Looked up by index (the constants below, in this order): the
# compiled decode resolves them all in the pass that selects the attributes
# (``Span.read``); the Python path reads each when it is asked for (``values.Firsts``).
FIRST_FACTS: tuple[tuple[tuple[str, ...], bool], ...] = (
    (AGENT_NAME_KEYS, True),
    (AGENT_SPAN_NAME_KEYS, True),
    (SESSION_KEYS, True),
    (PARENT_RUN_KEYS, True),
    (TOOL_ARGS_KEYS, False),
    (OUTCOME_KEYS, False),
    (RESPONSE_ID_KEYS, True),
    (INPUT_TOKEN_KEYS, False),
    (OUTPUT_TOKEN_KEYS, False),
    (FINISH_REASON_KEYS, False),
    (OUTPUT_MESSAGES_JSON_KEYS, False),
    (MESSAGES_JSON_KEYS, False),
    (TOTAL_TOKEN_KEYS, False),
    (LLM_INPUT_KEYS, False),
    (REPORTED_COST_KEYS, False),
    (CACHE_READ_KEYS, False),
    (CACHE_WRITE_KEYS, False),
    (MODEL_KEYS, True),
    (PROVIDER_KEYS, True),
    (LLM_OUTPUT_KEYS, False),
    (ANSWER_TEXT_KEYS, False),
    (MESSAGES_DELTA_KEYS, False),
    (PROMPT_KEYS, False),
    (PROMPT_KEYS, True),
    (TOOL_NAME_KEYS, True),
    (TRANSFER_TARGET_KEYS, True),
    (TOOL_RESULT_KEYS, False),
    (RUN_ID_KEYS, True),
    (AGENT_CALL_ID_KEYS, True),
    (AGENT_OUTPUT_KEYS, False),
    (TURN_COUNT_KEYS, False),
    (CALLER_KEYS, True),
    (SUBAGENT_ID_KEYS, True),
)
(F_AGENT_NAME, F_AGENT_SPAN_NAME, F_SESSION, F_PARENT_RUN, F_TOOL_ARGS, F_OUTCOME, F_RESPONSE_ID,
 F_INPUT_TOKENS, F_OUTPUT_TOKENS, F_FINISH_REASON, F_OUTPUT_MESSAGES, F_MESSAGES, F_TOTAL_TOKENS,
 F_LLM_INPUT, F_REPORTED_COST, F_CACHE_READ, F_CACHE_WRITE, F_MODEL, F_PROVIDER, F_LLM_OUTPUT,
 F_ANSWER_TEXT, F_MESSAGES_DELTA, F_PROMPT, F_PROMPT_TEXT, F_TOOL_NAME, F_TRANSFER_TARGET,
 F_TOOL_RESULT, F_RUN_ID, F_AGENT_CALL_ID, F_AGENT_OUTPUT, F_TURN_COUNT,
 F_CALLER, F_SUBAGENT) = range(len(FIRST_FACTS))
