"""What a model request gets, decided at the request (DESIGN §12). Pure: the run's counts, its
budget and its directives in, a :class:`Turn` out.

* ``pass``: forwarded as sent (byte for byte);
* ``note``: a budget's countdown (the true number of tool calls, dollars, tokens or model
  calls left, from the counts at the request, once a rule that declares itself that budget's
  countdown — ``countdown:`` in its pack — has fired for the run: the pack says from when; the
  rule's own message, true when it fired, is replaced by it), a wind-down's grace left, a
  wind-down's instruction — added to the instructions the model reads;
* ``final``: the budget is spent (tool calls, iterations, seconds, dollars), a wind-down's
  tool-call grace is used up, or a rule aborted the run at its budget: the request goes upstream
  once more with the tools withdrawn and the final-report instruction, and its answer is the
  run's result;
* ``abort``: any other abort, or any request after the final one: the upstream is not called,
  the agent gets a final answer with the stop note and the run's report (or an error).

``keep`` bounds the tool calls the response may hand to the agent (None: no bound), so no tool
call past the budget ever reaches it. The budget is spent by what was handed over as much as by
what the agent reported back (an agent may replay its calls as plain text); what the run's
requests still with the model may hand over (``Counts.reserved``: parallel agents of one run)
is kept from the calls left, which the countdown shows, but does not make a request final. A
request that carries the client SDK's own steering (its notes, its report request) is not
noted again, nor made final twice.

A call of a final-answer tool (the sidecar's conventions: pydantic-ai's ``final_result``,
smolagents' ``final_answer``; :func:`is_answer_tool`) is the agent's answer, not work: never
trimmed, never counted against the budget, and the response that asks only for such calls ends
the run with their arguments as its answer. A final request that offers one forces it, so an
agent that can only take a tool call still gets its report.
"""

from __future__ import annotations

import json
import random
import re
import shlex
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cache

from watchdog.core.directives.model import Directive
from watchdog.core.model.wire import ToolCall
from watchdog.core.rules.decision import (
    COUNTDOWN_COST,
    COUNTDOWN_ITERATIONS,
    COUNTDOWN_TOKENS,
    COUNTDOWN_TOOL_CALLS,
    GRACE_ENDS_AT,
    GRACE_TOOL_CALLS,
    Action,
    withdraws,
)
from watchdog.core.rules.model import REPORT_MARK, REPORT_SHELL_MARK, WORK_BESIDE_RUN, Finish
from watchdog.core.runs.steps import format_usd

# What the client SDK puts in the instructions it steers (agent_watchdog_client.steer)
SDK_MARKS = ("[agent-watchdog: system instruction", "[budget: ", "[grace: ")
# The tool-call countdown shows from this many left while the run's rules are behind the
# endpoint's count (``Counts.ruled``): the default pack's, as the client SDK's without the
# sidecar
COUNTDOWN_FROM = 3
REPORT_HEADER = ("[agent-watchdog: system instruction. This comes from the supervisor that "
                 "monitors this agent run, not from the user.]")
STOP_LINE = "This run is being stopped: "  # (an abort's report prompt opens with it too)
REPORT_PROMPT = REPORT_HEADER + """

This run is being stopped: {message}
Tools are withdrawn: no tool will run. Produce the structured progress report below as your
final answer, immediately, so that a follow-up run can continue from where you stopped.

Write the report in Markdown with exactly these sections:

## Task
## Completed Work
## Key Findings
(concrete facts exactly as observed: paths, values, identifiers, commands and results)
## Attempted but Inconclusive
## Not Started / Remaining
## Suggested Next Steps

Report only what you actually observed; mark anything uncertain as uncertain."""
# What the final request of an agent that acts on its answers' text is told besides: a report
# in plain text would be read as one more action (or a malformed one), so the answer must take
# the form the agent's own instructions give for ending its task
TEXT_FINISH = ("Your answer's text is read for your next action. Start no other action: end "
               "the task now, in the form your instructions give for finishing it (the command "
               "or answer that submits your work), with the report as its content.")


# Added to the final-report instruction of a request whose answer must follow a JSON format
# (Chat ``response_format``, Responses ``text.format``): the format is kept, since the agent
# parses its final answer by it, so the report is asked for in its terms.
STRUCTURED_REPORT = ("This request requires its answer in a JSON format (its response "
                     "format): answer in that format, never in plain text, and give the report "
                     "in its fields — in a text field as the sections above.")


@cache
def answer_tools() -> tuple[frozenset[str], tuple[str, ...]]:
    """The final-answer tools' names and name prefixes, from the conventions' tables (loaded
    at the first model request: an endpoint that serves none holds none of them)."""
    from watchdog.core.spans.combined import TABLES

    return frozenset(TABLES.answer_tools), tuple(TABLES.answer_tool_prefixes)


@cache
def first_answer_tools() -> tuple[frozenset[str], tuple[str, ...]]:
    """The final-answer tools whose call ends the agent before the other calls beside it run
    (the conventions' ``answer_ends_first``: pydantic-ai's)."""
    from watchdog.core.spans.combined import TABLES

    return frozenset(TABLES.first_answer_tools), tuple(TABLES.first_answer_tool_prefixes)


def ends_first(name: str) -> bool:
    """Whether the agent ends at a call of this answer tool without running the calls asked
    beside it (else it runs them, then ends: smolagents' ``final_answer``, adk's ``exit``)."""
    names, prefixes = first_answer_tools()
    return name in names or name.startswith(prefixes)


def is_answer_tool(name: object) -> bool:
    """Whether a tool of this name delivers the agent's answer (not work it does)."""
    if not isinstance(name, str):
        return False
    names, prefixes = answer_tools()
    return name in names or name.startswith(prefixes)


MAX_ANSWERS_OFFERED = 16  # the final-answer tools a request is read to offer, at most


def answers_offered(names: Iterable[object]) -> tuple[str, ...]:
    """The final-answer tools among the names a request offers (``Request.answers_offered``),
    the first ``MAX_ANSWERS_OFFERED``."""
    found: list[str] = []
    for name in names:
        if is_answer_tool(name) and name not in found:
            found.append(str(name))
            if len(found) == MAX_ANSWERS_OFFERED:
                break
    return tuple(found)


def answers(name: object, answer_tool: str | None = None,
            offered: Container[str] | None = None) -> bool:
    """Whether a call of this name is an answer, not work: a final-answer tool's that the
    request offers (``offered``: ``Request.answers_offered``; None: any of them), or
    ``answer_tool``'s (the request's own: its agent's finish that carries only the answer,
    its rule pack says, offered so). A final-answer tool the request does not offer is one
    the model made up: its call is work, which the agent refuses as unknown."""
    return (is_answer_tool(name) and (offered is None or name in offered)) or (
        answer_tool is not None and name == answer_tool)


def kept_calls(calls: Sequence[ToolCall], keep: int | None,
               answer_tool: str | None = None,
               offered: Container[str] | None = None) -> list[ToolCall]:
    """The calls a response may hand over: every answer's (:func:`answers`), and the first
    ``keep`` of the others (all of them when ``keep`` is None)."""
    if keep is None:
        return list(calls)
    kept: list[ToolCall] = []
    work = 0
    for call in calls:
        if answers(call.name, answer_tool, offered):
            kept.append(call)
        elif work < keep:
            kept.append(call)
            work += 1
    return kept


def answer_of(calls: Iterable[ToolCall], answer_tool: str | None = None,
              beside: str = "", offered: Container[str] | None = None) -> str | None:
    """The answer a response gives through final-answer calls only (None: it asks for work,
    or for nothing): the first one's arguments — the text, when they hold only a text; the
    text ``beside`` the calls, when they hold no text at all (a flag: tiny-agents'
    ``task_complete`` ``{"trigger": true}`` ends its task, its answer the text it streamed).
    ``answer_tool``: one more tool that delivers the answer (the agent's, its pack says);
    ``offered``: the final-answer tools the request offers (:func:`answers`)."""
    found: list[ToolCall] = []
    for call in calls:
        if not answers(call.name, answer_tool, offered):
            return None
        found.append(call)
    if not found:
        return None
    arguments = found[0].arguments
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments
    if isinstance(value, dict) and len(value) == 1:
        (only,) = value.values()
        if isinstance(only, str):
            return only
    if isinstance(value, dict) and beside.strip() and not any(
            isinstance(given, (str, dict, list)) for given in value.values()):
        return beside
    return arguments


def closing_call(calls: Sequence[ToolCall], answer_tool: str | None,
                 beside: str | None = None,
                 offered: Container[str] | None = None) -> ToolCall | None:
    """The answer's call that a response asks for beside work and that ends the agent with
    its answer, no request following, None if none such: ``answer_tool``'s (the agent's
    finish that carries only its answer, its pack says: adk runs each call of a response,
    then ends at its ``exit``), or a final-answer tool's whose agent ends so: its conventions
    say it ends first (:func:`ends_first`: pydantic-ai's output tool), or its rule pack says
    whether it runs the work beside (``beside``: ``work_beside_answer``). Another's (smolagents
    runs the work, then refuses an answer beside it and goes on) is work's company: the run
    goes on. ``offered``: the final-answer tools the request offers (:func:`answers`)."""
    if answer_of(calls, answer_tool, offered=offered) is not None:
        return None
    return next((call for call in calls if call.name == answer_tool or (
        answers(call.name, None, offered) and (beside is not None or ends_first(call.name)))),
        None)


def runs_beside(closing: ToolCall, beside: str | None = None) -> bool:
    """Whether the agent runs the work asked beside ``closing`` (:func:`closing_call`) before
    it ends: as its rule pack says (``beside``), else unless its conventions say the answer
    ends it first."""
    return beside == WORK_BESIDE_RUN if beside is not None else not ends_first(closing.name)


FINISH_CALL_ID = "call_watchdog_"  # the id of a finish call the endpoint gives: it, 96 bits
_ids = random.Random()


def finish_call(finish: Finish, report: str) -> ToolCall:
    """The call of the agent's own finish (its rule pack's ``finish:``) that carries
    ``report``: each argument's value with the report where it says REPORT_MARK, or, quoted
    for a POSIX shell (a command the agent runs: the report is its words, never code),
    REPORT_SHELL_MARK."""
    quoted = shlex.quote(report)
    marks = re.compile(f"{re.escape(REPORT_SHELL_MARK)}|{re.escape(REPORT_MARK)}")
    arguments = {name: marks.sub(lambda m: quoted if m.group() == REPORT_SHELL_MARK else report,
                                 value) for name, value in finish.arguments}
    return ToolCall(f"{FINISH_CALL_ID}{_ids.getrandbits(96):024x}", finish.tool,
                    json.dumps(arguments, ensure_ascii=False))


def answer_tool_offered(names: Iterable[object]) -> str | None:
    """The first final-answer tool among the names a request offers (None: none)."""
    for name in names:
        if is_answer_tool(name):
            return str(name)
    return None


def forced_prompt(prompt: str, function: str) -> str:
    """The final-report instruction for an answer-shaped request, which forces ``function``
    (:func:`~watchdog.core.model.wire.forced_function`): the answer stays a call of it, the
    report in its arguments."""
    return (f"{prompt}\n\nThis request requires its answer as a call of the `{function}` "
            f"function, in its schema: call it, never answer in plain text, and give the "
            f"report in its arguments' fields — in a text field as the sections above. It is "
            f"the only function left, and it runs nothing.")


def answer_tool_prompt(prompt: str, tool: str) -> str:
    """The final-report instruction for a request forced to answer through ``tool``."""
    return (f"{prompt}\n\nGive the report as the answer argument of the `{tool}` tool: it is "
            f"the only tool left, and it runs nothing.")


class Act(StrEnum):
    PASS = "pass"
    NOTE = "note"
    # no tool call is left for this request (the run's others with the model hold the rest):
    # its tools withdrawn with the note, though it is not the run's final request
    WITHDRAW = "withdraw"
    FINAL = "final"
    ABORT = Action.ABORT.value


@dataclass(frozen=True, slots=True)
class Turn:
    act: Act
    text: str = ""  # the note, the final-report instruction, or the stop note
    keep: int | None = None  # tool calls the response may hand over
    rule: str = ""  # what decided it (a rule's name, max_tool_calls, ...)
    # the response's usage is needed (a budget in dollars or tokens counts every call's): asked
    # of an API that reports it in a stream only when asked (Chat Completions' include_usage)
    usage: bool = False


USAGE_BUDGETS = frozenset({"max_cost_usd", "max_tokens"})  # counted from each call's usage


@dataclass(slots=True)
class Board:
    """A run's directives that matter at its next request (the latest of each kind), and the
    budgets whose countdown has started (a rule declaring it has fired for the run). A
    countdown's wind-down is kept apart (``countdown``): its note is the endpoint's own, so
    it takes the place of no other wind-down's instruction."""

    wind_down: Directive | None = None  # the latest wind-down that is no countdown
    abort: Directive | None = None
    grace: Directive | None = None  # the wind_down whose tool-call grace ends first
    notify: Directive | None = None  # (a fleet outage, a stalled session: told as a note)
    countdown: Directive | None = None  # the latest countdown's wind-down
    counting: frozenset[str] = frozenset()  # of COUNTDOWN_BUDGETS

    def post(self, directive: Directive) -> None:
        if directive.countdown is not None:
            self.counting |= {directive.countdown}
        if directive.action == Action.ABORT:
            if self.abort is None:
                self.abort = directive
        elif directive.action == Action.NOTIFY:
            if withdraws(directive.action, directive.message):
                if self.notify is not None and self.notify.rule == directive.rule:
                    self.notify = None  # its rule no longer holds (the outage is over)
            elif not is_budget(directive):
                self.notify = directive
        elif directive.action == Action.WIND_DOWN:
            if directive.countdown is not None:
                self.countdown = directive
                if self.wind_down is not None and self.wind_down.rule == directive.rule:
                    # (its rule told before a rules reload made it a countdown: the count it
                    # quotes is stale, and the note says the true one)
                    self.wind_down = None
            else:
                self.wind_down = directive
            ends = grace_end(directive)
            if ends is not None and (self.grace is None or ends < (grace_end(self.grace) or 0)):
                self.grace = directive


def grace_end(directive: Directive) -> int | None:
    ends = (directive.grace or {}).get(GRACE_ENDS_AT)
    return None if ends is None else int(ends)


def is_budget(directive: Directive) -> bool:
    """A directive of a budget's countdown (its rule declares ``countdown:``): a wind-down
    whose note the endpoint writes from the counts, an abort at the budget's end."""
    return directive.countdown is not None


def iterations_note(remaining: int, limit: int) -> str:
    """The model-call budget's countdown (the client SDK's words)."""
    if remaining == 1:
        return f"[budget: 1 of {limit} model calls left — finalize now]"
    return f"[budget: {remaining} of {limit} model calls left — wrap up soon]"


def budget_note(remaining: int, limit: int) -> str:
    if remaining <= 0:
        return f"[budget: 0 of {limit} tool calls left — no tool will run; report now]"
    if remaining == 1:
        return f"[budget: 1 of {limit} tool calls left — finalize now]"
    return f"[budget: {remaining} of {limit} tool calls left — wrap up soon]"


def cost_note(remaining: float, limit: float, per_call: float = 0.0) -> str:
    """The dollar budget's countdown (once its rule has fired: the default pack's from a quarter
    left); the last call once what is left pays for about one more at the run's average
    (``per_call``), as the default pack says."""
    if remaining <= 0:
        return f"[budget: all USD {format_usd(limit)} of the cost budget used — report now]"
    if per_call > 0 and remaining <= per_call:
        return (f"[budget: USD {format_usd(remaining)} of {format_usd(limit)} left, about one "
                f"model call — finalize now]")
    return f"[budget: USD {format_usd(remaining)} of {format_usd(limit)} left — wrap up soon]"


def token_note(remaining: int, limit: int, per_call: float = 0.0) -> str:
    """The token budget's countdown (once its rule has fired: the default pack's from a quarter
    left); the last call as for dollars."""
    if remaining <= 0:
        return f"[budget: all {limit} tokens used — report now]"
    if per_call > 0 and remaining <= per_call:
        return f"[budget: {remaining} of {limit} tokens left, about one model call — finalize now]"
    return f"[budget: {remaining} of {limit} tokens left — wrap up soon]"


def grace_note(left: int) -> str:
    if left <= 0:
        return "[grace: 0 tool calls left — no tool will run; report now]"
    if left == 1:
        return "[grace: 1 tool call left — finalize now]"
    return f"[grace: {left} tool calls left to wrap up]"


@dataclass(frozen=True, slots=True)
class Counts:
    """The run as the endpoint and the tracker see it at the request."""

    used: int  # tool calls made (the most either counted)
    handed: int  # tool calls handed to the agent so far
    budget: dict[str, float]  # the run's budget view (rule-pack defaults included)
    final_used: bool = False
    final_rule: str = ""  # what made its final request final (a rule's name, max_tool_calls)
    stop: str | None = None  # the endpoint already answered an abort with this note
    reserved: int = 0  # tool calls the run's requests still with the model may hand over
    per_call_usd: float = 0.0  # the run's model calls' average cost so far (0: none priced)
    per_call_tokens: float = 0.0  # and tokens
    # tool calls the run's rules have counted (None: as many as ``used``): fewer when a traced
    # run's spans have not come yet, so its countdown's rule cannot have fired on them
    ruled: int | None = None


def decide(counts: Counts, board: Board | None, instructions: str, has_tools: bool,
           structured: bool = False, acts_in_text: bool = False, aside: bool = False) -> Turn:
    """The turn of one request; ``has_tools``: it can call tools (offered, not withdrawn by
    its ``tool_choice``); ``structured``: its answer must follow a JSON format;
    ``acts_in_text``: its agent acts on the answer's text (each answer an action, a tool call
    of the run: told the tool-call countdown and grace as a request that offers tools is, its
    final request asked to end the task in the agent's own form); ``aside``: a side request
    of such a run (it asks a model about the run's last action: Aider's commit message), which
    is neither a step of the run nor its answer: it goes as it came, whatever the run's
    state."""
    turn = Turn(Act.PASS) if aside else _decide(counts, board, instructions, has_tools,
                                                 acts_in_text)
    if turn.act is Act.FINAL and structured:
        turn = replace(turn, text=f"{turn.text}\n\n{STRUCTURED_REPORT}")
    if turn.act is Act.FINAL and acts_in_text:
        turn = replace(turn, text=f"{turn.text}\n\n{TEXT_FINISH}")
    if turn.act is not Act.ABORT and not USAGE_BUDGETS.isdisjoint(counts.budget):
        return replace(turn, usage=True)
    return turn


def _decide(counts: Counts, board: Board | None, instructions: str, has_tools: bool,
            acts_in_text: bool = False) -> Turn:
    limit_value = counts.budget.get("max_tool_calls")
    limit = None if limit_value is None else int(limit_value)
    spent = max(counts.used, counts.handed)  # handed over is spent, reported back or not
    keep = None if limit is None else max(limit - spent - counts.reserved, 0)
    if counts.stop is not None:
        return Turn(Act.ABORT, counts.stop, 0, "stopped")
    sdk = any(mark in instructions for mark in SDK_MARKS)
    if counts.final_used:
        if sdk and REPORT_HEADER in instructions:  # the SDK's own final request
            return Turn(Act.PASS, keep=0)
        # (why, as the stop note of a final answer trimmed empty says it: the agent acting
        # on its final answer's text, or sending its report's request again, is told so too)
        return Turn(Act.ABORT, f"the agent went on after its final request instead of ending "
                    f"({counts.final_rule})" if counts.final_rule else "", 0, "after_final")
    board = board or Board()
    abort = board.abort
    if abort is not None and not (is_budget(abort) or (abort.escalation and board.grace)):
        return Turn(Act.ABORT, abort.message, 0, abort.rule)
    if sdk and REPORT_HEADER in instructions and not has_tools:
        return Turn(Act.PASS, keep=0)  # the SDK asks for its report: it steers this run
    final = _final(counts, board, limit, spent)
    if final is not None:
        return final
    if sdk:
        return Turn(Act.PASS, keep=keep)
    parts: list[str] = []
    # (each budget's countdown once its rule has fired: the tool-call one and a grace's to a
    # request that offers tools; one that offers none, a title or a summary the agent asks
    # for, has nothing to count down. A request that may hand over no tool call, the run's
    # others with the model holding the rest, is told so whether or not the countdown has
    # started: its tools are withdrawn, and the note says why. While the rules have counted
    # fewer calls than the endpoint, a traced run's spans not in yet, from COUNTDOWN_FROM left)
    counting = board.counting
    behind = counts.ruled is not None and counts.ruled < spent
    can_act = has_tools or acts_in_text
    if can_act and limit is not None and keep is not None and (
            COUNTDOWN_TOOL_CALLS in counting or keep == 0
            or (behind and keep <= COUNTDOWN_FROM)):
        parts.append(budget_note(keep, limit))
    dollars, dollar_limit = counts.budget.get("remaining_cost_usd"), counts.budget.get(
        "max_cost_usd")
    if dollars is not None and dollar_limit is not None and COUNTDOWN_COST in counting:
        parts.append(cost_note(dollars, dollar_limit, counts.per_call_usd))
    tokens, token_limit = counts.budget.get("remaining_tokens"), counts.budget.get("max_tokens")
    if tokens is not None and token_limit is not None and COUNTDOWN_TOKENS in counting:
        parts.append(token_note(int(tokens), int(token_limit), counts.per_call_tokens))
    calls, calls_limit = (counts.budget.get("remaining_iterations"),
                          counts.budget.get("max_iterations"))
    if calls is not None and calls_limit is not None and COUNTDOWN_ITERATIONS in counting:
        parts.append(iterations_note(int(calls), int(calls_limit)))
    grace = board.grace
    ends = grace_end(grace) if grace is not None else None
    if ends is not None:
        left = max(ends - counts.handed - counts.reserved, 0)
        if can_act:  # (what this request may hand over: the run's others hold the rest)
            parts.append(grace_note(min(ends - spent, left)))
        keep = left if keep is None else min(keep, left)
    wind_down = board.wind_down
    if wind_down is not None:
        parts.append(wind_down.report_prompt or wind_down.message)
    # (the latest wind-down, a countdown's too: what the turn is told under)
    latest = max((d for d in (wind_down, board.countdown) if d is not None),
                 key=lambda d: d.seq, default=None)
    notify = board.notify  # shown until a newer wind_down (as the client SDK shows it)
    if notify is not None and latest is not None and latest.seq > notify.seq:
        notify = None
    if notify is not None:
        parts.append(notify.message)
    if not parts:
        return Turn(Act.PASS, keep=keep)
    act = Act.WITHDRAW if has_tools and keep == 0 else Act.NOTE
    rule = latest.rule if latest else notify.rule if notify else "budget"
    return Turn(act, "\n\n".join(parts), keep, rule)


def _final(counts: Counts, board: Board, limit: int | None, spent: int) -> Turn | None:
    """The final turn, if the run's budget or grace is spent (or a rule aborted it at its
    budget): its report instruction."""
    abort = board.abort
    if abort is not None:  # at its budget, or a grace's escalation
        return Turn(Act.FINAL, _report(abort.message, abort.report_prompt), 0, abort.rule)
    grace = board.grace
    ends = grace_end(grace) if grace is not None else None
    if grace is not None and ends is not None and spent >= ends:
        allowed = int((grace.grace or {}).get(GRACE_TOOL_CALLS, 0))
        message = (f"[grace: the {allowed} tool calls allowed after the wind-down "
                   f"({grace.rule}) are used — stop and report]")
        return Turn(Act.FINAL, _report(message, grace.report_prompt), 0, grace.rule)
    budget = counts.budget
    if limit is not None and spent >= limit:
        return Turn(Act.FINAL, _report(f"[budget: all {limit} tool calls used — stop and "
                                       f"report]", None), 0, "max_tool_calls")
    iterations = budget.get("remaining_iterations")
    if iterations is not None and iterations <= 1:
        return Turn(Act.FINAL, _report(f"[budget: model calls used — this is the last of "
                                       f"{int(budget['max_iterations'])}: report]", None), 0,
                    "max_iterations")
    seconds = budget.get("remaining_seconds")
    if seconds is not None and seconds <= 0:
        return Turn(Act.FINAL, _report(f"[budget: the {budget['max_seconds']:g} s allowed are "
                                       f"used — stop and report]", None), 0, "max_seconds")
    tokens = budget.get("remaining_tokens")
    if tokens is not None and tokens <= 0:
        return Turn(Act.FINAL, _report(f"[budget: all {int(budget['max_tokens'])} tokens used — "
                                       f"stop and report]", None), 0, "max_tokens")
    dollars = budget.get("remaining_cost_usd")
    if dollars is not None and dollars <= 0:
        return Turn(Act.FINAL, _report(f"[budget: all USD {format_usd(budget['max_cost_usd'])} "
                                       f"of the cost budget used — stop and report]", None), 0,
                    "max_cost_usd")
    return None


def _report(message: str, prompt: str | None) -> str:
    """The final-report instruction: the directive's own report prompt (with the run's
    activity log) under the stop notice, else the plain one."""
    if prompt:
        body = prompt.removeprefix(REPORT_HEADER).lstrip()
        if body.startswith(STOP_LINE):  # an abort's prompt says so already: said here once
            body = body.partition("\n\n")[2]
        return (f"{REPORT_HEADER}\n\nThis run is being stopped: {message}\nTools are "
                f"withdrawn: no tool will run. Produce the report asked for below as your "
                f"final answer, immediately.\n\n{body}")
    return REPORT_PROMPT.format(message=message)
