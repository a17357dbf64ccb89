"""How a run counts: :meth:`RunCounts.apply` folds one ended span into a run's fields in O(1)
(model calls paired with their twins, tool calls matched to what the model asked for, an
exception's echoes counted once, repeats and cycles), and the client SDK's heartbeats and
announcements update them (see :mod:`watchdog.core.runs.run` for the theory of operation).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from watchdog.core.bounds import MAX_CYCLE_LENGTH, MAX_DISTINCT_SIGNATURES
from watchdog.core.runs.fields import (
    CLOCK_SKEW_TOLERANCE,
    MAX_ASKED,
    MAX_DISTINCT_TOOLS,
    NS,
    OTHER_TOOL,
    RECENT_ANSWERED,
    RECENT_FAILURES,
    RECENT_MODEL_CALLS,
    RECENT_TOOL_IDS,
    UNPRICED,
    USAGE_PAIR_SLACK_NS,
    Asked,
    RunFields,
)
from watchdog.core.spans import compiled
from watchdog.core.spans.record import AGENT, ENDPOINT_SCOPE, LLM, OTHER, TOOL, SpanRecord

# What a dated model id adds to its alias: a date (OpenAI's 2024-07-18, Anthropic's 20241022,
# OpenAI's older 0613, Mistral's 2411) or a version (Gemini's 001): not a size (70b) or a tier
MODEL_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}|\d{8}|\d{3,4}")


def _bump(counts: dict[int, int], key: int) -> int:
    """Increment ``counts[key]`` (within the bound) and return the new count."""
    count = counts.get(key)
    if count is None:
        if len(counts) >= MAX_DISTINCT_SIGNATURES:
            return 0
        count = 0
    count += 1
    counts[key] = count
    return count


def tool_signatures(call_counts: dict[int, int], recent: list[int], cycle_runs: list[int],
                    result_counts: dict[int, tuple[int, int]], call: int,
                    result: int | None) -> tuple[int, int, int]:
    """A tool call's signatures folded into its run's: ``call`` (its arguments' hash) counted
    in ``call_counts`` (within the bound), its cycles, and ``result`` (its result's hash, None:
    none or failed) counted in ``result_counts`` when it came after other arguments (the agent
    learns nothing). Returns the call's count (0: past the bound), the run's
    ``cycle_repeats`` and the result's count (0: none). The compiled twin
    (``native/otlp/src/signatures.rs``, ``compiled.signatures``) answers the same.

    For each cycle length L, ``cycle_runs[L-1]`` counts how many consecutive calls equalled the
    call L positions earlier; the tail then holds (run + L) // L repetitions."""
    count = _bump(call_counts, call)
    best = 0
    for index in range(MAX_CYCLE_LENGTH):
        length = index + 1
        if len(recent) >= length and recent[-length] == call:
            cycle_runs[index] += 1
            repeats = (cycle_runs[index] + length) // length
            if repeats >= 2 and repeats > best:
                best = repeats
        else:
            cycle_runs[index] = 0  # (0 + length) // length is one: no repeat
    recent.append(call)
    if len(recent) > MAX_CYCLE_LENGTH:
        del recent[0]
    if result is None:
        return count, best, 0
    entry = result_counts.get(result)
    if entry is None:
        if len(result_counts) >= MAX_DISTINCT_SIGNATURES:
            return count, best, 0
        counted = 1
        result_counts[result] = (counted, call)
    elif entry[1] != call:  # same result, other arguments: the agent learns nothing
        counted = entry[0] + 1
        result_counts[result] = (counted, call)
    else:
        counted = entry[0]
    return count, best, counted


def claimable(record: SpanRecord) -> bool:
    """Whether ``record``, a span of no kind, may be a tool's execution a model call asked for
    (:meth:`RunCounts.asked_for`)."""
    return not (record.creates_agent or record.workflow or record.final_answer
                or record.loop_end or record.run_frame or record.unasked
                or record.tool_name is not None)


class RunCounts(RunFields):
    """A run's fields and how what arrives (spans, heartbeats, announcements) folds into them."""

    __slots__ = ()

    # -- folding spans in ---------------------------------------------------------------------

    def apply(self, record: SpanRecord, now: float) -> None:
        """Fold one ended span into the signals (O(1))."""
        self.spans += 1
        self.last_seen = now
        if record.scope != ENDPOINT_SCOPE:
            self.agent_spans = True
        self.last_progress = now
        if not self.trace_id:  # a run the client SDK announced before any span arrived
            self.trace_id = record.trace_id
        if record.trace_id == self.trace_id and (
                self.root_span is None or record.start_ns < self.first_start_ns):
            self.root_span = record.span_id  # the run's root starts before what it ran
        if self.first_start_ns == 0 or record.start_ns < self.first_start_ns:
            self.first_start_ns = record.start_ns
        lag = now - record.end_ns / NS
        if lag >= -CLOCK_SKEW_TOLERANCE or record.start_ns / NS > now:
            lags = self.clock_lags
            if lags is None:
                self.clock_lags = [lag, lag]
            elif lag < lags[0]:  # (updated in place: no new object a span)
                lags[0] = lag
            elif lag > lags[1]:
                lags[1] = lag
        else:
            # It ends far after it arrived though it started before: its end is wrong (an
            # instrumentation's unit mix-up, year 2500), no word on the clock, and its start is
            # the one time it has (else a model call early in the run reads as its last).
            record.end_ns = record.start_ns
        if record.run_frame:  # the client SDK's own span: what it says is the client's word
            self.announce(record.agent, record.session, record.parent_run, record.budget)
        if record.agent is not None and (
                self.agent is None or (record.kind is AGENT and not self.framed
                                       and not ((record.workflow or self.ended)
                                                and self.named_by_agent))
                or (record.start_ns < self._agent_step_ns and record.kind is not AGENT)):
            # (a run the client SDK announced keeps the name it was given: an agent span of
            # the framework inside it names the framework's agent; a workflow span around the
            # agent names the workflow — the OpenAI Agents SDK's "Agent workflow" — and yields
            # to the agent span's name; an agent span that comes after the run ended, named by
            # one, is a nested agent's that came late: the run keeps its name)
            # (a run named only by its steps, each naming the agent whose step it is — an
            # AgentWorkflow's steps under OpenLLMetry, the writer's after the researcher's — is
            # named by the step that started first, whatever order they arrive in)
            self.agent = record.agent
            self._agent_step_ns = 0 if record.kind is AGENT else record.start_ns
            if record.kind is AGENT and not record.workflow:
                self.named_by_agent = True
        if record.service is not None and (
                self.service is None or (self._plumbing_service and record.kind is not OTHER)):
            # (the service of its agent, model or tool calls: a span of no kind, come first,
            # may be a library's of its own resource, LiteLLM's raw request)
            self.service = record.service
            self.instance = record.instance
            self._plumbing_service = record.kind is OTHER
        if self.session is None and record.session is not None:
            self.session = record.session
        if self.parent_run is None and record.parent_run is not None:
            self.parent_run = record.parent_run
        if record.budget:
            self.budget.update(record.budget)
        if record.budget_used:
            for key, used in record.budget_used.items():
                self.budget_used[key] = max(self.budget_used.get(key, 0.0), used)
        if record.messages > self.messages:
            self.messages = record.messages
        elif record.messages_delta:  # the call's new messages, then its answer
            self._delta_messages += record.messages_delta
            self.messages = max(self.messages, self._delta_messages + 1)

        kind = record.kind
        echo = False
        if record.error and record.exception_id is not None and kind is not AGENT:
            echo = self._echo(record)
            if echo and kind is not LLM:  # no second tool call either (a model call stays one:
                record.kind = kind = OTHER  # its twin was counted as one call already)
                record.tool_name = None
        if kind is TOOL and record.tool_call_id and self._counted_elsewhere(record):
            # the call the model endpoint handed over and the agent's span of running it (or
            # the other way round): one call, counted once, as it came first
            record.kind = kind = OTHER
            record.tool_name = None
        if kind is TOOL:
            if not record.named_tool and self.counted_around(record, record.tool_name):
                # the tool call around a call of the same tool counted directly inside it (a
                # span the tool's code made, named after it; a second tracer's tool span, as
                # OpenInference's tool decorator inside pydantic-ai's), or the call inside one
                # counted around it (come after it: a later request first): one execution, once
                # — the inner one's exception (no echo of the one around it: see _echo) is the
                # call's failure all the same, as it is when it comes first
                record.kind = kind = OTHER
                if not (record.error and record.exception_id is not None
                        and (record.parent_span_id, record.tool_name) in self._tool_spans):
                    record.tool_name = None
            else:
                name = record.tool_name or ""
                parent = record.parent_span_id or ""
                named = self._named  # (rings updated in place; a call of the same tool from
                if named:  # the same span as the last shares its entry: no new object)
                    last = named[-1]
                    entry = last if last[0] == parent and last[1] == name else (parent, name)
                    if len(named) >= RECENT_FAILURES:
                        del named[0]
                    named.append(entry)
                else:
                    self._named = [(parent, name)]
                spans = self._tool_spans
                if spans:
                    if len(spans) >= RECENT_FAILURES:
                        del spans[0]
                    spans.append((record.span_id, name))
                else:
                    self._tool_spans = [(record.span_id, name)]
        if record.loop_end:
            self._loop_ended = True
            if self._loop_capped:  # (it ended by this tool, not at its cap)
                self._loop_capped, self.limit_stop = False, None
        if kind is LLM:
            self._count_model_call(record)
            if record.end_ns > self._llm_end_ns:
                self._llm_start_ns, self._llm_end_ns = record.start_ns, record.end_ns
                self._llm_parent, self._llm_messages = record.parent_span_id, record.messages
                if self._cap_request is not None and self.limit_stop is None \
                        and record.parent_span_id == self._cap_request[1]:
                    self.limit_stop = self._cap_request[0]  # (its agent span told the cap)
            if self._step_stop_ns and record.start_ns > self._step_stop_ns:
                # a model call after the loop's call that told a limit: its application went
                # on with the loop (a call a step: its input the capped step's, then that
                # step's calls and their results), so that limit stopped no run; one whose
                # input does not go on so (a request of the application's own after the
                # stop: "summarise what you have") leaves it (its input not seen: taken back)
                stop_messages = self._step_stop_messages
                if not record.messages or not stop_messages \
                        or record.messages >= stop_messages + 2:
                    self.limit_stop = None
                self._step_stop_ns = self._step_stop_messages = 0
            self._read_model_content(record)
        elif kind is TOOL:
            self._apply_tool(record)
        elif record.final_answer and not (
                (record.unasked or record.workflow) and self._llm_said_ns):
            # What a framing span returned (a root CHAIN's output, a function that ran the
            # model loop: an unasked tool call made the invocation) is its answer only if the
            # model calls below it said nothing: when the last one asked for tools, the loop
            # stopped without an answer (OpenInference's Haystack Agent at max_agent_steps:
            # its CHAIN returns the whole result, the last message a tool's).
            self.explicit_final = True
        if record.final_output is not None and not (
                (record.unasked or (kind is LLM and self.explicit_final))
                and self.final_output is not None) \
                and record.end_ns >= self._final_end_ns:
            # (what the function returned, kept even if it is no answer yet: an export request
            # groups spans by scope, so the model call that answered may still come; a model
            # call's answer text is the run's only while no span of the agent gave its answer;
            # one that ended before the span that gave the run's text, come after it, gives
            # none: a step's or a task's output sent after the agent's)
            self.final_output = record.final_output
            self._final_end_ns = record.end_ns
        if record.limit_stop is not None and self.limit_stop is None:
            if not record.loop_call:
                self.limit_stop = record.limit_stop
            elif self._llm_start_ns <= record.end_ns:
                # (one call of a loop its application runs itself: no model call came after it
                # yet; one that comes takes the limit back)
                self.limit_stop, self._step_stop_ns = record.limit_stop, record.end_ns
                self._step_stop_messages = self._llm_messages  # (its last step's input)

        if record.error and (record.ends_run or kind is AGENT):
            # The span that closes the run failed, whatever its kind (a pydantic-ai agent span,
            # an OpenInference CHAIN root, a bare root span), or the run's own agent span did
            # below a root that ended OK (nested agents are child runs): the run ended in it.
            self.end_error_type = record.error_type or "error"
        if kind is AGENT:
            if record.model_calls > self.iterations:
                # A framework that emits no model-call span (crewai alone) reports its calls
                # on the agent span: they are the run's iterations (with no price known), and
                # a model-call span that comes after it is one of them (a later request)
                self.unpriced_calls += record.model_calls - self.iterations
                self._reported_calls += record.model_calls - self.iterations
                self.iterations = record.model_calls
            if record.finish_reason is not None:
                self.finish_reason = record.finish_reason
            if record.cap_request is not None and self.limit_stop is None:
                if self._llm_parent == record.span_id:
                    # the framework's request for an answer at its cap, the only model call
                    # that hangs from the agent span itself (smolagents at max_steps)
                    self.limit_stop = record.cap_request
                else:  # (its model calls may come after it: a later request first)
                    self._cap_request = (record.cap_request, record.span_id)
            if record.loop_cap is not None and self.limit_stop is None \
                    and not self._loop_ended:
                # the loop ended with no loop-end tool, after tools ran: at its cap (DSPy's
                # max_iters, its trajectory hidden); its tools not come yet (a later request),
                # told when they have (:meth:`loop_capped`)
                if self.tool_calls:
                    self.limit_stop, self._loop_capped = record.loop_cap, True
                else:
                    self._loop_cap = record.loop_cap
            if record.error and self.last_error is None:  # keep the error that led here
                self.last_error = _error_text(record)
            return  # the agent span repeats its children's errors: do not count them twice
        if record.error and not echo and (kind is not OTHER or record.tool_name is not None):
            # Only model and tool calls (output tools included) count: a failed HTTP or
            # framework span under them is the same failure seen from below.
            self.errors += 1
            self.consecutive_errors += 1
            if kind is TOOL:
                self._tool_error_streak = True
            self.last_error = _error_text(record)
            if record.error_signature is not None:
                count = _bump(self._error_counts, record.error_signature)
                if count > self.repeated_error:
                    self.repeated_error = count
        elif kind is TOOL or (kind is LLM and not self._tool_error_streak):
            # In an agent loop every failed tool call is followed by a (successful) model call
            # that reads the error; that call is no recovery, or consecutive_errors could
            # never pass 1 in a tool error loop. Only a tool call that works ends such a
            # streak; a working model call ends a streak of failed model calls.
            self.consecutive_errors = 0
            self._tool_error_streak = False

    def _read_model_content(self, record: SpanRecord) -> None:
        """What model call ``record`` says (its content): the tools it asked for, the run's
        input if it is the first call, its answer or tool request."""
        if record.asked_tools and record.scope != ENDPOINT_SCOPE:
            # (the model endpoint's call names what it handed over only to pair runs: it
            # records the tool calls themselves from the results the next request carries, so
            # no span of the agent's is taken for the execution of one of them)
            self._remember_asked(record)
        if self.input_hash is None or record.start_ns < self._input_start_ns:
            # the run's input: its first model call's request (see watchdog.core.cycles),
            # hashed from the span's input only now (the endpoint's calls come hashed;
            # the conventions load with the span pipeline, not at start)
            from watchdog.core.spans.model_calls import request_hash

            digest = record.input_hash if record.input_hash is not None \
                else request_hash(record.prompt)
            if digest is not None:
                self.input_hash, self._input_start_ns = digest, record.start_ns
        if (record.finish_reason is not None or record.final_answer
                or record.requested_tools) \
                and record.end_ns >= self._llm_said_ns:  # else: a stream that says nothing
            # (a tool that ran inside this call's span, or after it, ran at its request,
            # though it came first: see _apply_tool)
            self._llm_final = record.final_answer and not (
                self._tool_start_ns > record.start_ns or self._tool_end_ns > record.end_ns)
            self._llm_said_ns = record.end_ns
            self._llm_said_start_ns = record.start_ns
            if record.finish_reason is not None:
                self.finish_reason = record.finish_reason

    def read_content(self, record: SpanRecord) -> None:
        """The content of model call ``record``, folded in already without it (its GenAI log
        event came after its span: ``record`` has taken it, :meth:`SpanRecord.take_content`):
        what :meth:`apply` reads of a model call's content, and nothing it counts (the call,
        its tokens, its errors) again. Each content comes once (the log join hands it out
        once)."""
        if record.messages > self.messages:
            self.messages = record.messages
        elif record.messages_delta:
            self._delta_messages += record.messages_delta
            self.messages = max(self.messages, self._delta_messages + 1)
        self._read_model_content(record)
        if record.final_output is not None and not (
                self.explicit_final and self.final_output is not None) \
                and record.end_ns >= self._final_end_ns:
            self.final_output = record.final_output
            self._final_end_ns = record.end_ns
        if record.limit_stop is not None and self.limit_stop is None:
            self.limit_stop = record.limit_stop

    def read_answer(self, record: SpanRecord) -> None:
        """The answer of agent span ``record``, folded in already without it (an agent's own log
        event brought it after the span: ``record`` has taken it): the run's answer, as
        :meth:`apply` reads an agent span's, nothing counted again."""
        if record.final_answer and not record.workflow:
            self.explicit_final = True
        if record.final_output is not None and record.end_ns >= self._final_end_ns:
            self.final_output = record.final_output
            self._final_end_ns = record.end_ns

    @property
    def loop_cap_taken(self) -> str | None:
        """The loop cap taken as the run's limit before its loop-end tool came (None: none)."""
        return self.limit_stop if self._loop_capped else None

    def loop_capped(self) -> bool:
        """The loop cap its agent span told before its tools came, now that a batch brought
        them: at its cap if they ran and its loop-end tool did not. True if it was."""
        cap = self._loop_cap
        if cap is None:
            return False
        if self._loop_ended or self.limit_stop is not None:
            self._loop_cap = None  # it ended by its loop-end tool, or a limit said so first
            return False
        if not self.tool_calls:
            return False  # (still to come)
        self._loop_cap, self.limit_stop, self._loop_capped = None, cap, True
        return True

    def _count_model_call(self, record: SpanRecord) -> None:
        """One iteration and its usage, unless the span is the twin of a model call already
        counted: a model-call span directly inside another (or around one) is the same call
        traced by two instrumentations — a framework's and its client library's (DSPy's
        ``LM.__call__`` around LiteLLM's ``completion``), as are two with one response id (a
        client SDK's own span and an instrumentation's, each a trace of its own: the Anthropic
        SDK's and OpenLLMetry's). The pair counts once, its usage from
        whichever of the two reported more (the framework's span often reports none). The
        pipeline pairs the twins of one export request (``twin_tokens``); the run, a pair
        split between two requests (the last model call not paired in its request, and this
        one: a request groups spans by scope, so the framework's half of an earlier pair may
        come after the client library's half of the one split off; or, sent out of order, after
        other calls: one of the last ``RECENT_MODEL_CALLS``)."""
        twin = record.twin_tokens
        paired_in_request = twin is not None
        models = self._models
        match = -1
        if not paired_in_request and models:
            match = self._twin_of(record)
            if match >= 0:
                twin = models[match][2], models[match][3]
        input_tokens, output_tokens = record.input_tokens, record.output_tokens
        cost = record.cost_usd
        if twin is None:
            if self._reported_calls:  # one of the calls its agent span reported, now seen
                self._reported_calls -= 1
                self.unpriced_calls -= 1
            else:
                self.iterations += 1
            self.input_tokens += input_tokens
            self.output_tokens += output_tokens
            if cost is None:
                self.unpriced_calls += 1
            else:
                self.cost_usd += cost
        else:
            self.input_tokens += max(input_tokens - twin[0], 0)
            self.output_tokens += max(output_tokens - twin[1], 0)
            input_tokens, output_tokens = max(input_tokens, twin[0]), max(output_tokens, twin[1])
            if match >= 0:
                counted = models[match][6]
                cost = self._pair_cost(cost, None if counted < 0 else counted)
            else:
                cost = self._pair_cost(cost, record.twin_cost_usd)
        if not paired_in_request:
            call = (record.span_id, record.parent_span_id or "", input_tokens, output_tokens,
                    record.response_id or "", record.scope, UNPRICED if cost is None else cost,
                    record.start_ns, record.end_ns, record.model or "")
            if not models:
                self._models = [call]
            elif match >= 0:  # the pair is one call: its entry is the half that came last
                models[match] = call
            else:
                if len(models) >= RECENT_MODEL_CALLS:
                    del models[0]
                models.append(call)

    def _counted_elsewhere(self, record: SpanRecord) -> bool:
        """Whether tool call ``record`` (it carries its call's id) was counted already from
        another scope: the model endpoint's record of the call it handed over, and the agent's
        own span of running it (either first). Else its id is remembered
        (``RECENT_TOOL_IDS``)."""
        call_id, scope = record.tool_call_id or "", record.scope
        ids = self._tool_ids
        for known, known_scope in ids:
            if known == call_id and known_scope != scope:
                return True
        if not ids:
            self._tool_ids = [(call_id, scope)]
        else:
            if len(ids) >= RECENT_TOOL_IDS:
                del ids[0]
            ids.append((call_id, scope))
        return False

    def _pair_cost(self, cost: float | None, twin_cost: float | None) -> float | None:
        """The second half of a call traced twice: the pair is one call, priced by the half
        that costs more, and unpriced only when neither half has a price. ``twin_cost`` is the
        price the other half counted with (None: it counted as unpriced; a half paired in its
        request may count after this one, so ``unpriced_calls`` may dip below 0 in between —
        it is read as at least 0)."""
        if cost is None:
            return twin_cost
        if twin_cost is None:
            self.unpriced_calls -= 1
            self.cost_usd += cost
            return cost
        if cost > twin_cost:
            self.cost_usd += cost - twin_cost
            return cost
        return twin_cost

    def _twin_of(self, record: SpanRecord) -> int:
        """The index in ``_models`` of the model call ``record`` is the twin of (the same call
        traced by another instrumentation: inside it, around it, or with its response id from
        another scope), the most recent first; -1 if none. Two that name different responses
        are two calls. The model endpoint's record of a call and the agent's span of it that
        names no response (or the other way round) are twins by their usage, when they name
        the same model (if both name one: :func:`_same_model`) and ran at the same time
        (:data:`USAGE_PAIR_SLACK_NS`): of several such, the nearest in time."""
        models = self._models
        span, parent, response = record.span_id, record.parent_span_id, record.response_id
        scope = record.scope
        tokens = (record.input_tokens, record.output_tokens)
        endpoint = scope == ENDPOINT_SCOPE
        model, start, end = record.model or "", record.start_ns, record.end_ns
        nearest, apart = -1, 0
        index = len(models)
        for call in reversed(models):
            index -= 1
            if ((call[0] == parent or call[1] == span)
                    and not (response and call[4] and call[4] != response)) or (
                    response is not None and call[4] == response and call[5] != scope):
                return index
            if not (response and call[4]) and (call[5] == ENDPOINT_SCOPE) != endpoint \
                    and (call[2], call[3]) == tokens and tokens != (0, 0) \
                    and _same_model(model, call[9]) \
                    and (distance := _apart(start, end, call[7], call[8])) is not None \
                    and (nearest < 0 or distance < apart):
                nearest, apart = index, distance
        return nearest

    def answer_call(self) -> tuple[str, str, int, int] | None:
        """The model call that answered last: its response id ("" if none), instrumentation
        scope, start and end (None: no model call said anything)."""
        if not self._models or not self._llm_said_ns:
            return None
        last = self._models[-1]
        return last[4], last[5], self._llm_said_start_ns, self._llm_said_ns

    def only_twin_of(self, record: SpanRecord) -> bool:
        """Whether the run is one span, a model call that is ``record``'s twin."""
        return self.spans == 1 and self._twin_of(record) >= 0

    def models_besides_twin(self, record: SpanRecord) -> bool:
        """Whether the run counted a model call other than ``record``'s twin."""
        return self.iterations > 1 or (self.iterations == 1 and self._twin_of(record) < 0)

    def ran_tool_after_models_inside(self, record: SpanRecord) -> bool:
        """Whether the run's last tool call so far (to end) ran after its last model call and
        ended inside ``record``'s span: a model call's span closes with its response, before
        the tools it asked for run, so a span around both frames a loop."""
        return self._llm_end_ns <= self._tool_start_ns and self._tool_end_ns <= record.end_ns \
            and self.tool_calls > 0

    def ran_model_inside(self, record: SpanRecord) -> bool:
        """Whether the run's last model call so far (to end) ran inside ``record``'s span:
        started after it, ended before it did."""
        return record.start_ns < self._llm_start_ns and self._llm_end_ns <= record.end_ns

    def _echo(self, record: SpanRecord) -> bool:
        """Whether failed ``record`` repeats the exception of a counted failure on the span
        directly inside it or around it (one exception seen on a tool's span and on its
        framework's span around it): one failure, counted once. Remembers ``record`` (the
        next span around it may repeat it too; a framework's step around a tool counts
        nothing, and the tool call inside it, sent after it, still counts)."""
        span, parent, exception = record.span_id, record.parent_span_id or "", \
            record.exception_id or 0
        echo = False
        for seen in self._failures:  # (the exception first: it rarely matches)
            if seen[2] == exception and seen[3] and (
                    seen[1] == span or (parent and seen[0] == parent)):
                echo = True
                break
        counted = echo or record.kind is not OTHER or record.tool_name is not None
        failures = self._failures
        if not failures:
            self._failures = [(span, parent, exception, counted)]
            return echo
        if len(failures) >= RECENT_FAILURES:
            del failures[0]
        failures.append((span, parent, exception, counted))
        return echo

    def _remember_asked(self, record: SpanRecord) -> None:
        """Keep the tool calls model call ``record`` asked for (one asked for by a call's twin,
        the same call id, is kept once)."""
        asked = self._asked
        ids = {entry[1] for entry in asked} if asked else ()  # ("" in it: never asked for)
        start = record.start_ns
        new = tuple((name, call_id, start) for name, call_id in record.asked_tools
                    if not (call_id and call_id in ids))
        if new and self._answered:
            new = tuple(self._reopen(entry) for entry in new)
        if not new:
            return
        if not asked:
            self._asked = asked = list(new)
        else:
            asked.extend(new)
        if len(asked) > MAX_ASKED:
            del asked[:-MAX_ASKED]

    def _reopen(self, entry: Asked) -> Asked:
        """The request ``entry`` of a model call come after tool calls it asked for (its
        request sent after theirs, and after a call's before it): of the tool calls of its
        name answered by name, the first to start after it started that an earlier call's
        request was paired with is its own — that earlier request is open again (a tool call
        still to come answers it), and returned in its place."""
        name, call_id, start = entry
        answered = self._answered
        if not answered:
            return entry
        found, first = -1, 0
        for index, (tool, _, asked_at, tool_start) in enumerate(answered):
            if tool == name and asked_at < start <= tool_start \
                    and (found < 0 or tool_start < first):
                found, first = index, tool_start
        if found < 0:
            return entry
        tool, earlier_id, earlier_at, _ = answered[found]
        answered[found] = (name, call_id, start, first)
        return tool, earlier_id, earlier_at

    def counted_around(self, record: SpanRecord, tool: str | None) -> bool:
        """Whether span ``record`` of ``tool`` is a call of it counted already, seen from
        around or inside: a span of the same tool directly inside it, or directly around it,
        was counted lately (one execution traced twice)."""
        return bool(self._named) and (
            (record.span_id, tool) in self._named
            or (record.parent_span_id, tool) in self._tool_spans)

    def asked_for(self, record: SpanRecord) -> str | None:
        """The tool ``record``, a span of no kind, executed: one a model call asked for, not
        yet answered by a tool call — the call whose id the span carries, else one asked for
        before it started, its name the span's name or the first or last word of it (an
        instrumentation that traces the tool with no GenAI attributes: only its name, maybe
        generic input and output). A span that carries an id answers no call asked for with
        another id. None: none."""
        if not self._asked or not claimable(record):
            return None
        name, start, call_id = record.name, record.start_ns, record.tool_call_id
        if record.runs_asked:  # a framework's step that runs the tool asked last before it
            latest, asked_tool = -1, None
            for tool, _, asked_at in self._asked:
                if latest < asked_at <= start:
                    latest, asked_tool = asked_at, tool
            return asked_tool
        if call_id:
            for tool, asked_id, _ in self._asked:
                if asked_id == call_id:
                    return tool
        for tool, asked_id, asked_at in self._asked:
            if asked_at <= start and not (call_id and asked_id) and _named_after(name, tool):
                return tool
        return None

    def answers_asked(self, record: SpanRecord) -> bool:
        """Whether tool call ``record`` answers a call a model call of the run asked for, not
        yet answered: the one with its id, else (no id on either side) one of its tool asked
        for before it started."""
        call_id, tool, start = record.tool_call_id, record.tool_name, record.start_ns
        for name, asked_id, asked_at in self._asked:
            if call_id and asked_id:
                if asked_id == call_id:
                    return True
            elif name == tool and asked_at <= start:
                return True
        return False

    def named_after_a_tool(self, record: SpanRecord) -> bool:
        """Whether span ``record`` is named after a tool the run called (as :meth:`asked_for`
        reads a name)."""
        return any(_named_after(record.name, tool) for tool in self.tools)

    def _apply_tool(self, record: SpanRecord) -> None:
        # A tool ran after the last model call, or inside its span (started after it): that
        # call asked for it, whatever its finish reason said (google-adk says "stop" on tool
        # requests), so it was not the answer. (OpenInference's span of an ADK model call stays
        # open while the tools it asked for run; with content capture off nothing else says it
        # asked.) A tool that ended before the call, arriving after it, was asked for by an
        # earlier one.
        if record.end_ns >= self._llm_said_ns or record.start_ns > self._llm_said_start_ns:
            self._llm_final = False
        if record.end_ns > self._tool_end_ns:
            self._tool_start_ns, self._tool_end_ns = record.start_ns, record.end_ns
        self.tool_calls += 1
        tool = record.tool_name or "unknown"
        asked = self._asked
        # the call it answered: the one with its id, else the first of its name that the last
        # model call before it started asked for (several calls of one tool in one response
        # run in order), else any of its name; none that has another id when it has one
        answered, latest, call_id = -1, -1, record.tool_call_id
        for index, (name, asked_id, asked_at) in enumerate(asked):
            if call_id and asked_id == call_id:
                answered = index
                break
            if name == tool and not (call_id and asked_id):
                if asked_at <= record.start_ns:
                    if asked_at > latest:
                        answered, latest = index, asked_at
                elif answered < 0:
                    answered = index
        if answered >= 0 and asked:
            name, asked_id, asked_at = asked[answered]
            del asked[answered]
            if not call_id:  # (by name: a call that asked after that one may come yet)
                pair = (name, asked_id, asked_at, record.start_ns)
                pairs = self._answered
                if not pairs:
                    self._answered = [pair]
                else:
                    if len(pairs) >= RECENT_ANSWERED:
                        del pairs[0]
                    pairs.append(pair)
        if tool not in self.tools and len(self.tools) >= MAX_DISTINCT_TOOLS:
            tool = OTHER_TOOL
        self.tools[tool] = self.tools.get(tool, 0) + 1
        self._count_call(record)

    def read_tool_call(self, record: SpanRecord) -> None:
        """The arguments and result of tool call ``record``, counted already without them (an
        agent's own log event brought them after the span: ``record`` has taken them), for a
        run that cannot be folded again with them (still open, or its trace's records not all
        kept): its signature counted now, in the order the facts came (a loop of one call is
        seen; a cycle's order is the facts' arrival's), nothing else counted again."""
        self._count_call(record)

    def _count_call(self, record: SpanRecord) -> None:
        call = record.args_hash
        if call is None:
            return
        fold = compiled.signatures or tool_signatures
        count, self.cycle_repeats, results = fold(
            self._call_counts, self._recent_calls, self._cycle_runs, self._result_counts, call,
            None if record.error else record.result_hash)
        if count > self.repeated_tool_call:
            self.repeated_tool_call = count
        if results > self.repeated_tool_result:
            self.repeated_tool_result = results

    def result_hashes(self) -> Iterable[int]:
        """The hashes of the distinct tool results counted (``repeated_tool_result``)."""
        return self._result_counts.keys()

    def clock_skew(self) -> float:
        """How far the agent's clock is behind the sidecar's, in seconds (negative: ahead), as
        the run's spans tell it: the least time between a span's end and its arrival (the
        exporter's delay is least there), when every span arrived more than
        ``CLOCK_SKEW_TOLERANCE`` after it ended or every span ended more than that after it
        arrived; else 0. Time signals count in the agent's clock from its first span's start:
        an agent whose clock is two hours behind is not two hours into its run when its first
        span arrives. All spans must agree: one span whose end is wrong (an instrumentation's
        unit mix-up, year 2500) among the run's right ones leaves the sidecar's clock in
        charge, and so does a span that ends far after it arrived though it started before."""
        lags = self.clock_lags
        if lags is None:
            return 0.0
        least, most = lags
        if least > CLOCK_SKEW_TOLERANCE or most < -CLOCK_SKEW_TOLERANCE:
            return least
        return 0.0

    def heartbeat(self, messages: int, now: float, in_flight: int | None = None,
                  oldest_call_started: float | None = None) -> bool:
        """A sign of life from the client SDK; progress only if the conversation grew.

        ``in_flight`` (calls started, not ended) lets rules tell a slow call from a stuck run:
        the spans of calls in progress have not reached the watchdog yet.
        """
        self.last_seen = now
        if in_flight is not None:
            self.in_flight = in_flight
            # (the client's clock is its spans': on the sidecar's, its call started skew later)
            self.in_flight_since = (oldest_call_started + self.clock_skew()
                                    if oldest_call_started is not None
                                    else now) if in_flight else None
        if messages > self.messages:
            self.messages = messages
            self.last_progress = now
            return True
        return False

    def announce(self, agent: str | None = None, session: str | None = None,
                 parent_run: str | None = None, budget: dict[str, float] | None = None) -> None:
        """What the client SDK says about a run before its spans arrive (its spans carry only the
        run id: the agent, session, parent run and budget are here, and on the run's own span).
        The client names its run: what spans that arrived before the announcement said (a
        framework's agent name, its conversation id) yields."""
        self.framed = True
        if agent:
            self.agent = agent
            self._agent_step_ns = 0
        if session and session != self.session:
            self.session = session
            self.session_counted = False  # (counted in its session now)
        if parent_run:
            self.parent_run = parent_run
        if budget:
            self.budget.update(budget)


def _named_after(name: str, tool: str) -> bool:
    """Whether span name ``name`` is ``tool``'s: the tool's name, alone or as the first or last
    word (Logfire names a span after its message template: "lookup {key}")."""
    return name == tool or (name.startswith(tool) and name[len(tool):len(tool) + 1] == " ") \
        or (name.endswith(tool) and name[-len(tool) - 1:-len(tool)] == " ")


def _error_text(record: SpanRecord) -> str:
    if record.error_message:
        return f"{record.error_type}: {record.error_message}"
    return record.error_type or "error"


def _same_model(model: str, other: str) -> bool:
    """Whether two calls name the same model: one names none, the same, or a dated model id
    and its alias (``gpt-4o-mini-2024-07-18``, ``gpt-4o-mini``: a request names the alias,
    its response the dated id; ``gpt-4o-mini`` is not ``gpt-4o``, nor ``llama3-70b``
    ``llama3``: a size is no date)."""
    if not (model and other) or model == other:
        return True
    short, long = sorted((model, other), key=len)
    return long.startswith(short + "-") and MODEL_VERSION.fullmatch(long, len(short) + 1) \
        is not None


def _apart(start: int, end: int, other_start: int, other_end: int) -> int | None:
    """How far apart in time two calls ran, in ns (0: they overlap); None: further than
    :data:`USAGE_PAIR_SLACK_NS` (a time not known, 0, is no bar)."""
    if not (start and end and other_start and other_end):
        return 0
    gap = max(start - other_end, other_start - end, 0)
    return gap if gap <= USAGE_PAIR_SLACK_NS else None
