"""What an agent span records (:func:`_fill_agent`): its answer, its finish reason and a stop at
a limit from wherever its framework says it, its turns, its caller and a conversation that
reports its model calls; and the answer of a span of agent kind read as a step of its run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from watchdog.core.redact import brief
from watchdog.core.spans.attributes import (
    AGENT_OUTPUT_KEYS,
    CAP_REQUESTS,
    CONVERSATION_OUTPUTS,
    F_AGENT_OUTPUT,
    F_CALLER,
    F_FINISH_REASON,
    F_MESSAGES,
    F_TURN_COUNT,
    HIDDEN_ANSWERS,
    HIDDEN_CONTENT,
    LOOP_CAPS,
)
from watchdog.core.spans.outcome import (
    agent_limit,
    answer_limit,
    answer_text,
    error_limit,
    fill_reported_calls,
    finish_reason,
    has_text,
    output_finish_reason,
)
from watchdog.core.spans.record import SpanRecord
from watchdog.core.spans.values import (
    MAX_BRIEF_CHARS,
    MAX_NAME_CHARS,
    FirstValues,
    _as_text,
    _content,
    _count_messages,
    _hidden,
    _int,
    _is_empty_output,
)

# What an instrumentation records as the output of an async method it wrapped as a plain one:
# the coroutine (or generator) object itself, never awaited by it (OpenLIT's spans of crewai's
# AgentExecutor flow methods): no output
UNAWAITED = re.compile(r"<(?:coroutine|generator|async_generator) object [\w.<>]+ at 0x[0-9a-f]+>")


def _answer_output(output: object) -> str:
    """What an agent span's output says as its answer: a message list in GenAI's shape
    (``gen_ai.output.messages``: ``[{"role": …, "parts": [{"type": "text", "content": …}]}]``)
    by its text parts, anything else as it is written."""
    text = _as_text(output)
    if text.startswith("[{") and '"parts"' in text:
        return answer_text(text) or text
    return text


def _fill_step_answer(record: SpanRecord, attrs: Mapping[str, object],
                      hidden: frozenset[str] = HIDDEN_CONTENT) -> None:
    output = _content(attrs, AGENT_OUTPUT_KEYS, hidden)
    if output is not None and not _is_empty_output(output) and has_text(output) \
            and answer_limit(output) is None:
        text = _answer_output(output)
        if not UNAWAITED.fullmatch(text):
            record.final_answer = True
            record.final_output = brief(text, MAX_BRIEF_CHARS)


def _fill_agent(record: SpanRecord, attrs: Mapping[str, object], firsts: FirstValues,
                hidden: frozenset[str] = HIDDEN_CONTENT) -> None:
    """``hidden``: the texts that are hidden content on this span (its scope's)."""
    output = _hidden(firsts[F_AGENT_OUTPUT], hidden)
    finish = firsts[F_FINISH_REASON]
    if isinstance(output, str) and finish is None and '"finish_reason"' in output:
        finish = output_finish_reason(output)
    if finish is not None:
        record.finish_reason = finish_reason(finish)
    limit = agent_limit(attrs, record.finish_reason)
    stand_in = answer_limit(output)  # the framework's text where no answer came
    if record.limit_stop is None:
        record.limit_stop = limit or stand_in or error_limit(attrs)
    for key, name in CAP_REQUESTS:
        if isinstance(attrs.get(key), int):
            record.cap_request = name
            break
    if LOOP_CAPS and record.name in LOOP_CAPS and output is None and not record.error \
            and record.limit_stop is None and firsts[F_AGENT_OUTPUT] in hidden:
        # its trajectory hidden: the run says if its loop ended by its loop-end tool
        record.loop_cap = LOOP_CAPS[record.name]
    stopped_silent = (limit is not None and limit == record.finish_reason) or stand_in is not None
    if (output is not None and not stopped_silent and not record.error
            and not _is_empty_output(output) and has_text(output)):
        # An agent stopped by a limit finish reason (Strands' limit_turns) gave no answer; one
        # whose state names a limit may still have answered (Hermes' summary).
        text = _answer_output(output)
        if not UNAWAITED.fullmatch(text):
            record.final_answer = True
            record.final_output = brief(text, MAX_BRIEF_CHARS)
    elif output is None and not record.error and record.limit_stop is None \
            and firsts[F_AGENT_OUTPUT] is not None \
            and any(key in attrs for key in HIDDEN_ANSWERS):
        # a hidden output of an agent span that ends OK only with its answer (crewai's)
        record.final_answer = True
    record.messages = _count_messages(firsts[F_MESSAGES])
    turns = _int(firsts[F_TURN_COUNT])
    if turns:
        record.model_calls = turns
    caller: str | None = firsts[F_CALLER]
    if caller:
        record.caller = caller[:MAX_NAME_CHARS]
    for key, marker in CONVERSATION_OUTPUTS:
        conversation = attrs.get(key)
        if isinstance(conversation, str) and f'"{marker}"' in conversation \
                and '"messages"' in conversation:
            fill_reported_calls(record, conversation, attrs)
            break
