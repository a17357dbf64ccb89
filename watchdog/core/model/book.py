"""Which run a model call belongs to, and the records it makes of it. Sans-IO.

Theory of operation
-------------------
A call names its run by, in order (DESIGN §12): its W3C ``traceparent`` (the run of that trace:
the records hang below the span the agent sent, pinned to the run the trace named at the
request, else keyed by the trace, so the tracker gives them to whatever run the trace's spans
name); ``x-watchdog-run``; the Responses API's
``previous_response_id`` (the run of the response it continues; with a new user message once
that run has ended, the next run of its session); else the conversation it continues — the
one its Responses ``conversation`` names by id, else the same first user message of the same
agent on the same API. A request that
carries a new user message (its last message is the user's) in a conversation whose run has
ended, or that is shorter than the conversation was (the agent started over; not when its tool
results answer calls its run handed over: the agent goes on from its history after a request
aside, a summary it asked the model for on that history), starts the conversation's next
run, in the conversation's session — unless it is the agent's own reply at once rejecting the
answer that ended the run at its budget or a stop (:func:`follows_at_once`): that is still the
run's, answered with its stop (a conversation the server keeps sends only its new items:
its length is not read); or its reply at once dropping the text answer that ended the run on
its own (:func:`rejects_answer`): the run goes on. So does a conversation's first
request (no longer than the one its run began with, no tool results) that comes while that run's
first request is still with the model or after the model answered it: another invocation with
the same first message (two agents started at the same moment), not the same one, which sends
its first request again only once it has failed. A request that carries tool results goes to
the run that handed those calls over (call ids are unique to a response), so such twins stay
apart for their whole conversation; a continuation without tool results (a new user message)
goes to the conversation's latest run. A conversation that opens with the model's answer to a
new user message of a run, before any user message, is that run's history compacted to that
summary: it goes on in the run (:meth:`ModelBook._compacted`). A conversation the book does not
know (lost in a restart, or let go) whose request goes on with it (tool results, or no new user
message) joins its session's active run, when the sidecar has one (it restored it); the tool
calls handed over before are not known, so their results count no tool call. In a session its
client names, a conversation's first request that offers no tools and quotes a user message of
another conversation's first request of the session, as a message of its own or on lines of
their own within its prompt (a side request: the title an agent asks its small model for) is a
model call of that conversation's run, not its answer: of the run while it goes, when it comes
after its first request; when it comes first, the run it starts is the one that conversation's
first request goes on in. A conversation whose first request begins with a text argument of a
tool call another run handed over and still waits for (a sub-agent its tool started, naming
nothing of its caller's) is a child run of that run. A run whose agent acts in text (each answer
an action, the run held open for the next request) goes on only in a request that carries its
latest answer (:func:`carries_answer`): an invocation whose requests begin as the run's did is
the next run; and a conversation's first request that quotes that answer (a commit message the
agent asks a model for, for the action it just ran) is a side request of the run
(:func:`quotes_answer`). So is a conversation's first request of the same agent, under
instructions of its own, that quotes a run's history (:func:`quotes_history`: a summariser of
the agent's own, while the run goes on; the one run it quotes alone); a conversation that then
opens with a model message holding that aside's answer goes on in the run
(:meth:`ModelBook._recap_of`).

Each response becomes one model-call record (tokens, finish reason, the tool calls asked, the
response id); each tool call the endpoint handed over becomes one tool-call record (name,
arguments, result, error) at the agent's next request of the run, which comes once it has run:
with the result that request carries for it (a tool message of the call's id; else, as agents
that replay results as plain text send them, the text after the last answer that names the
call's id, or that text whole when it answers the only call), else without one — each once (a
result that shows up later finds its call counted). A response that broke off before its end
handed nothing over (its agent saw a failed answer, and typically sends the request again): a
call it had begun counts only when the next request answers it. A response that asks only for
final-answer tools (:func:`~watchdog.core.model.steer.is_answer_tool`) is the run's answer,
their arguments its text; such a call is never a tool call of the run. All of this holds
unless the agent traces its calls itself (a ``traceparent``, or a run the client SDK
announced): then its spans count the tools, and the model call pairs with the agent's span
of the same call by its response id (another scope: a twin, counted once). A run the agent
sends no spans for is *loose*: it ends with its answer.

Everything is bounded (``MAX_*``), least recently used first out.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from watchdog.core.bounds import MAX_STOP_ANSWERS
from watchdog.core.model.actions import (
    MAX_ACTION_CHARS,
    MAX_PENDING_CALLS,
    json_answer,
    key_actions,
    read_actions,
    text_answer,
)
from watchdog.core.model.failure import looks_failed, refusal_of
from watchdog.core.model.steer import answer_of, answers, closing_call, runs_beside
from watchdog.core.model.wire import (
    CONVERSATION_ANCHOR,
    Observation,
    Request,
    ToolCall,
    ToolResult,
    answer_digest,
    random_hex,
    text_of,
)
from watchdog.core.redact import brief, mask
from watchdog.core.rules.model import STOP_NOTE_JSON_MARK, STOP_NOTE_MARK
from watchdog.core.spans.record import (
    ENDPOINT_SCOPE,
    MAX_ASKED_TOOLS,
    KeySource,
    SpanKind,
    SpanRecord,
)

MAX_MODEL_RUNS = 10_000  # runs whose endpoint state is kept (pending calls, counts)
MAX_CONVERSATIONS = 10_000  # conversation anchors remembered
MAX_CALLERS = 10_000  # sessions a client names whose callers' runs are remembered
MAX_CALLERS_PER_SESSION = 8  # ... the runs of each (two invocations sharing a session)
MAX_ACTING_PER_AGENT = 8  # an agent's latest runs acting in text whose answers side requests quote
MAX_RESPONSE_IDS = 20_000  # response id -> run, for previous_response_id
MAX_BRIEF_CHARS = 500
MAX_ASIDE_CHARS = 500  # of an aside's answer, kept to know the request that goes on from it
# ... and the least it must hold: a summary, not a word a person's next message may repeat
MIN_ASIDE_CHARS = 40
# an answer-shaped call's argument a stateless prompt quotes to go on from it
# (:func:`_shaped_value`): shorter ones are words any prompt may hold
MIN_SHAPED_VALUE_CHARS = 4
MAX_RECAP_ASIDES = 4  # a run's latest requests aside that quote its history (EndpointRun.asides)
CUT_SHORT = frozenset({"length", "max_tokens", "content_filter"})  # no answer: cut short
_FENCED_WHOLE = re.compile(r"```[^\n`]*\n.*?```", re.DOTALL)
# A heading an agent puts before a result it replays in text: a first line that is a label of
# at most 40 characters ending in a colon, and any rule of dashes, equals signs or underscores
# under it (langchain-rust's ConversationalAgent: "TOOL RESPONSE: \n-----\n<result>"); a result
# is judged after it too
_HEADING = re.compile(r"\A\s*[^\n:]{1,40}:[ \t]*\n(?:[ \t]*[-=_]{3,}[ \t]*\n)?")
_STOP_MARKS = re.compile(f"{re.escape(STOP_NOTE_JSON_MARK)}|{re.escape(STOP_NOTE_MARK)}")
_NO_BRACES = str.maketrans("{}", "()")  # (a stop note's steps for an agent acting in text)
MAX_ERROR_TYPE_CHARS = 200  # an error type the model API gave
MAX_SIDE_SAID = 8  # the messages of a side request kept (digests) to know what it quoted
# A tool call's text argument at least this long may be a task it hands a sub-agent (Crush's
# `agent` tool: its `prompt`), whose conversation begins with it: a child run of the caller's
# (:meth:`ModelBook._handed_task`); of each call, this many of its arguments are kept (digests)
MIN_HANDED_TASK_CHARS = 20
MAX_HANDED_TASKS_PER_CALL = 4
# ... and of a task, the chars kept (its lines, spacing aside) to know whether a message
# quotes it within a prompt of its own (:func:`_quotes`); of a side request's messages, twice
# that in all (the task and the prompt around it)
MAX_QUOTE_CHARS = 1_000
_CUT = "\0"  # the end of a message's lines cut at their bound (:func:`_lines`)
# A new user message that comes this soon after the answer that ended its run at its budget
# or a stop is the agent's own reply to that answer (a format error, a validation retry: no
# person reads a report and asks again this fast), so it is still that run's (its stop), not
# the session's next run: an agent that takes no answer as its end cannot go on run after
# run, each with a budget of its own (:func:`follows_at_once`); the default of the
# configuration's model_reply_window
AT_ONCE_NS = 5_000_000_000
# ... answered with the stop answer this many times (each reply at once to the answer before,
# the endpoint's own included), then with the error: an agent that drops the stop answer from
# its conversation and replies at once forever still ends
MAX_AT_ONCE_REPLIES = 3
# A conversation's runs in a row, each begun at once after the one before ended at its budget
# or a stop, past which a reply at once is held even when it keeps the answer in its history
MAX_CHAINED_RUNS = 2
SCOPE = ENDPOINT_SCOPE  # the records' instrumentation scope: another than any agent's span
# version-trace id-parent id-flags, lower-case hex (W3C Trace Context); a later version may add
# fields after a "-", version 00 none
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?",
                          re.DOTALL)
FAILED_TOOL = "ToolError"  # the error type of a tool result that says it failed
INCOMPLETE = "IncompleteResponse"  # the error type of a response that broke off before its end


# a run's stop as kept with the run (it outlives a restart): (the run, its stop note, what a
# request that goes on from its stop answer carries: :attr:`EndpointRun.stop_answers`)
Stop = tuple[str, str, tuple[str, ...]]


@dataclass(slots=True)
class Caller:
    """What the request's headers say about its run."""

    traceparent: str | None = None
    run: str | None = None
    agent: str | None = None
    # the client's own session, as a header of its requests names it (SESSION_HEADERS): the
    # session of the runs of its conversations, the one its spans name (session.id)
    session: str | None = None
    # the sub-agent it names within that session (SUBAGENT_HEADERS; None: the session's caller)
    subagent: str | None = None


@dataclass(frozen=True, slots=True)
class Unbooked:
    """A call whose response has ended, not recorded yet: its run, and what the relay read of
    its response (None: not read yet, so it may be any)."""

    run: EndpointRun
    response_id: str | None = None
    call_ids: frozenset[str] | None = None  # the tool calls it asked for


@dataclass(slots=True)
class EndpointRun:
    """What the endpoint keeps of one run between its calls."""

    key: str
    key_source: KeySource
    trace_id: str
    parent_span_id: str | None  # below the agent's span (traceparent), else None
    session: str | None = None
    agent: str | None = None
    traced: bool = False  # the agent traces its own calls: its spans count the tools
    conversation: str | None = None
    # handed over, no result yet: by call id (a call whose id another one has, an upstream's
    # empty or repeated id, under that id and a number: :func:`_wait`, :func:`_answered`)
    pending: dict[str, ToolCall] = field(default_factory=dict)
    # the calls a response that broke off had begun: not handed over (the agent saw a failed
    # answer), counted only if its next request answers one
    begun: dict[str, ToolCall] = field(default_factory=dict)
    first: int = 0  # the length of its conversation at its first request
    asking: int = 0  # its requests taken and not yet settled (with the model, or answered)
    answered: int = 0  # its model calls recorded
    handed: int = 0  # tool calls handed to the agent
    reserved: int = 0  # tool calls its requests with the model may still hand over
    results: int = 0  # tool results the agent sent back
    messages: int = 0  # the conversation's length at its last request
    last_end_ns: int = 0  # when its last response ended
    final_used: bool = False  # the final (no tools) request went upstream
    final_rule: str = ""  # what made it final (its turn's rule: the stop note says why)
    report: str | None = None  # its answer
    stop: str | None = None  # the stop note of an abort answered by the endpoint
    # the digests of the answers it gave at the stop (:func:`answer_digest`; a text, a JSON
    # object) and their Responses ids: a request whose last model answer is one, or that
    # continues one by its id, goes on from the stop
    stop_answers: frozenset[str] = frozenset()
    # as last read from the tracker's run (they steer it while the state cannot take records):
    run_key: str | None = None  # the run's key
    tool_limit: float | None = None  # its max_tool_calls
    used: int = 0  # its tool calls made
    # the request identified last goes on from the run's own calls (its results answer calls
    # the run handed over): a run ended at an answer (to a request aside) is taken back
    going_on: bool = False
    # the answer to the run's latest request aside (one that offered no tools: a summary of
    # its history the agent asked for), its words, at most MAX_ASIDE_CHARS: a request whose new
    # user message quotes it goes on from it (the agent compacted its context to that summary)
    aside: str | None = None
    # what its last request carried past the model's last answer (:func:`_asked`): a request
    # that carries the same, answering none of the calls handed over since, sends it again
    asked: tuple[object, ...] | None = None
    # the results its latest request carried (each a digest of its call id and text), when
    # the model API refused that request as bad (past the model's context window): an agent
    # that compacts its history then sends them again in a conversation of its own
    # (:meth:`ModelBook._rewritten`); another task's result of a call given the same id is not
    # one of them; empty once a response of the run is recorded
    refused: frozenset[str] = frozenset()
    # its last answer passed on a line no client reads (:attr:`Observation.unreadable`): the
    # agent may send its request again (:func:`_sent_again`)
    unread: bool = False
    # a side request started it (a conversation's first request, no tools offered, in a
    # session its client names: a title the agent asks its small model for): the digests of
    # what that request said (:func:`_said_digest`, at most MAX_SIDE_SAID); the session's next
    # conversation whose first message it quoted goes on in this run (:meth:`ModelBook.
    # _side_of`). None once a request that offers tools is of it, or for any other run
    side: frozenset[str] | None = None
    # ... and those messages' lines (:func:`_lines`): a first message they quote on lines of
    # its own, within a prompt of the side request's (Crush's title), is quoted too
    side_lines: tuple[str, ...] = ()
    # a run of a session its client names whose conversation's first request offered tools:
    # the digest of that first message (:func:`_said_digest`), which a side request sent after
    # it quotes (:func:`is_side`); and what that request said (its user messages: the task
    # may follow a message the agent puts first, as Crush's todo reminder), their digests and
    # lines (:func:`_side_lines`), which a side request quotes, whole or within a prompt of
    # its own
    task: str | None = None
    task_said: frozenset[str] = frozenset()
    task_lines: tuple[str, ...] = ()
    # ... and of each of those cut (longer than kept), its whole lines' length and digest
    # (:func:`_whole`): a quote of its start must go on with the rest of it (None: not cut)
    task_whole: tuple[tuple[int, str] | None, ...] = ()
    # its agent acts on its answers' text (a rule pack's ``actions: text``): each answer
    # hands over one action (:data:`TEXT_ACTION`) and holds the run open for the next request
    acts_in_text: bool = False
    # the tool its rule pack's ``finish:`` names when that call carries only the report
    # (:attr:`~watchdog.core.rules.model.Finish.answers`): a response that asks only for it
    # (or final-answer tools) gives the run's answer, as a final-answer tool's (None: none)
    answer_tool: str | None = None
    # ... the regular expression its actions match (a rule pack's ``action_pattern``): an
    # answer it does not match holds no action, the run's answer (None: every answer is one)
    action_pattern: str | None = None
    # ... the key whose value names the tool a JSON object in its answer asks for (a rule
    # pack's ``action_key``): each such object is an action, an answer with none its answer
    # (with an ``action_pattern``: the objects in what it matches)
    action_key: str | None = None
    # ... the tools whose action is the agent's answer (a rule pack's ``answer_tools``:
    # Langroid's ``done_tool``): an answer whose actions are all theirs is the run's answer
    answer_tools: tuple[str, ...] = ()
    # ... the key of the JSON object that is its answer (a rule pack's ``answer_key``:
    # KaibanJS's ``finalAnswer``): an answer holding one is the run's answer, the key's value
    # its output; one holding neither an action nor one is a step (a model call, the run goes on)
    answer_key: str | None = None
    # ... whether it runs the calls asked beside its answer's (its rule pack's
    # ``work_beside_answer``; None: as the answer tool's conventions say, :func:`ends_first`)
    work_beside: str | None = None
    # ... by the code blocks in them (``actions: code``): an answer with none is its answer,
    # which ends the run, as a text answer ends a run whose agent calls tools
    acts_in_code: bool = False
    # its latest answer ended it (a loose run's answer, no tool call, no action in it): a new
    # user message is the next run's even before the tracker ends it (an evaluation interval
    # later), as a script's next ``chat`` at once is
    answered_last: bool = False
    # ... that answer's digest (:func:`answer_digest`): a reply at once that drops it rejects
    # it, and the run goes on (:func:`rejects_answer`)
    ending: str | None = None
    # ... the digest of the instructions of the request that answer came to: a reply under
    # other instructions is another agent's turn (a pipeline's next agent), never a rejection
    ending_prompt: str | None = None
    # ... that answer's words, at most MAX_ASIDE_CHARS (at least MIN_ASIDE_CHARS): a reply at
    # once that begins the conversation again and quotes them in a new user message is the
    # agent's own (:func:`begins_again_quoting`)
    ending_words: str | None = None
    # its budget covers its whole conversation (a rule pack's ``budget_per: conversation``):
    # every new user message in it goes on in the run (:func:`goes_on_in_conversation`)
    per_conversation: bool = False
    # ... the digest of its latest answer to a new user message, when a history may be
    # compacted to it (a text answer, at least MIN_ASIDE_CHARS): :meth:`ModelBook._compacted`
    summary: str | None = None
    # ... the words of its latest answer, at most MAX_ASIDE_CHARS (at least MIN_ASIDE_CHARS):
    # a conversation's first request that quotes them is a side request of it (:func:`is_side`)
    quote: str | None = None
    # ... the arguments of that answer's actions, when its agent names its tools by JSON
    # objects (``action_key``): a request whose model answer holds the same ones carries it,
    # written anew by its agent (:func:`carries_answer`); () for none
    acted: tuple[str, ...] = ()
    # ... the digest of the instructions (system prompt) of the request that answer came to
    # (:func:`_said_digest`): a request with the same instructions is the agent's own next
    # task, which may quote that answer whole (a plan handed on), not a side request of it
    prompt: str | None = None
    # ... when the request that answer came to carried no model answer, its history within
    # its one prompt (a ReAct agent's scratchpad: each answer and what its action gave, after
    # the task): that prompt's length up to its last line break and that part's digest, and
    # the answer's words: the first MAX_ASIDE_CHARS, their length and their digest. A
    # conversation's first request whose prompt begins with that part and goes on with the
    # answer goes on in the run (:func:`grows_from`)
    grown: tuple[int, str, str, int, str] | None = None
    # ... what the request that went on so (:meth:`ModelBook._grown`) says after that answer
    # (its action's result), read from its prompt: with that prompt's hash, the request it is
    # of (:func:`said_of`; the parsed request is the shell's, never written)
    heard: tuple[int, tuple[str, ...]] | None = None
    # the run of the caller whose sub-agent this run is (its requests name a sub-agent of
    # their session; the caller's name none): a child run of it (``parent_run``)
    parent: str | None = None
    # what a request aside that quotes its history must quote (:meth:`ModelBook._recapped`):
    # the first message of its latest request that carried tool results, that request's
    # latest result and the longest text argument of the call it answered (:func:`_action`;
    # "": none), their words (at most MAX_ASIDE_CHARS each), and the hash of that request's
    # instructions (an aside asks under its own); before a request of it carries a result,
    # its first calls handed over: its first message and the last call's text argument, no
    # result ("": :meth:`ModelBook._handed_first`); None before
    history: tuple[str, str, str, int] | None = None
    # ... the hashes of the first messages of its requests aside that quoted it (at most
    # MAX_RECAP_ASIDES): each such request is a model call of the run (:func:`recaps`)
    asides: tuple[int, ...] = ()
    # the hashes of the first messages of its side requests that quoted its latest answer (at
    # most MAX_RECAP_ASIDES; :meth:`ModelBook._quoted`): each is still its side request when
    # its answer comes, the run's latest answer another by then (:func:`quotes_answer`)
    quoted_by: tuple[int, ...] = ()
    # ... the latest one's answer (the summary of its history), as :attr:`grown` keeps one: its
    # first MAX_ASIDE_CHARS words, their length and digest; a conversation that opens with a
    # model message holding it goes on in the run (:meth:`ModelBook._compacted`). None once
    # another answer of the run came (the summary not taken up)
    recap: tuple[str, int, str] | None = None
    # ... and that answer's first words (at most MAX_ASIDE_CHARS), kept: the history its
    # conversation goes on from, which its next request aside may quote in place of its first
    # message (the Cline CLI's "Previous summary:"; :func:`quotes_history`)
    recapped: str | None = None
    # the request identified last is the agent's own reply to the answer that ended the run
    # at its budget or stop (:func:`follows_at_once`): its stop answer ends the chain
    at_once: bool = False
    replies: int = 0  # requests at once answered with its stop (MAX_AT_ONCE_REPLIES)
    # the runs before it in its conversation, in a row, each begun at once after the one
    # before it ended at its budget or a stop (MAX_CHAINED_RUNS)
    chain: int = 0


def parse_traceparent(value: str | None) -> tuple[str, str] | None:
    """(trace id, parent span id) of a W3C ``traceparent``, or None (absent, malformed as the
    spec says: upper-case hex, version ff, data after version 00's flags; or the all-zero ids
    it says to ignore)."""
    if not value:
        return None
    match = _TRACEPARENT.fullmatch(value.strip(" \t"))
    if match is None or match.group(1) == "ff" or (match.group(1) == "00" and match.group(4)) \
            or set(match.group(2)) == {"0"} or set(match.group(3)) == {"0"}:
        return None  # (version ff is invalid; version 00 has nothing after its flags)
    return match.group(2), match.group(3)


class ModelBook:
    def __init__(self, max_runs: int = MAX_MODEL_RUNS, at_once_ns: int = AT_ONCE_NS) -> None:
        self.max_runs = max_runs
        self.at_once_ns = at_once_ns  # (follows_at_once: the config's model_reply_window)
        self._runs: OrderedDict[str, EndpointRun] = OrderedDict()
        self._conversations: OrderedDict[str, str] = OrderedDict()  # anchor digest -> run
        self._responses: OrderedDict[str, str] = OrderedDict()  # response id -> run
        self._calls: OrderedDict[str, str] = OrderedDict()  # tool call id handed -> run
        # a text argument of a tool call handed over (its agent's and its digest) -> its run,
        # the key the call waits under there and its arguments' digest (MAX_RESPONSE_IDS)
        self._handed_tasks: OrderedDict[str, tuple[str, str, str]] = OrderedDict()
        # such a call (its run's key and the key it waits under) -> the session of the child
        # run it handed its task to: one a call (MAX_RESPONSE_IDS)
        self._handed_to: OrderedDict[str, str] = OrderedDict()
        # session a client names -> the runs its latest requests naming no sub-agent were of,
        # latest last, at most MAX_CALLERS_PER_SESSION (the callers of its sub-agents)
        self._callers: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        # a session its client names -> the run a side request of it started last
        self._sides: OrderedDict[str, str] = OrderedDict()
        # ... -> its latest run whose first request offered tools (EndpointRun.task)
        self._tasks: OrderedDict[str, str] = OrderedDict()
        # an agent -> its latest runs acting in text whose answers have words to quote
        # (EndpointRun.quote), at most MAX_ACTING_PER_AGENT, latest last: the runs its side
        # requests quote (:meth:`_quoted`; two invocations of it at once, each its own)
        self._acting: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        # the digest of a text answer to a new user message (a summary an agent may compact its
        # history to) -> its run (MAX_RESPONSE_IDS): a conversation that opens with it as the
        # model's is that run's (:meth:`_compacted`)
        self._summaries: OrderedDict[str, str] = OrderedDict()
        # an agent -> its latest runs whose history a request aside may quote (EndpointRun.
        # history), at most MAX_ACTING_PER_AGENT, latest last (:meth:`_recapped`)
        self._histories: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        # told the key of each run let go (its bound), or whose conversation was: a request of
        # it is then read as new
        self.let_go: Callable[[str], None] | None = None
        # the stop kept with a run this book does not know (lost in a restart, or let go): of
        # the run named, else of the run whose stop answer one of these is; None: no such stop
        self.stops: Callable[[str | None, Sequence[str]], Stop | None] | None = None
        self._going_on = False  # (what _identify found of the request it reads)
        self._recapped_now = False  # (... that it opens with a request aside's answer)
        self._at_once = False
        self._now_ns: int | None = None

    def __len__(self) -> int:
        return len(self._runs)

    def get(self, key: str) -> EndpointRun | None:
        return self._runs.get(key)

    def latest(self, conversation: str) -> str | None:
        """The run a conversation's later requests sent whole go to (its latest)."""
        return self._conversations.get(conversation)

    def identify(self, api: str, request: Request, caller: Caller, agent: str | None,
                 ended: Callable[[str], bool],
                 resume: Callable[[str], str | None] | None = None,
                 now_ns: int | None = None) -> EndpointRun:
        """The run of this request. ``ended(key)``: whether the run ``key`` has ended (read
        for the run a conversation had so far); ``resume(session)``: the latest active run of
        a session (read for a conversation this book does not know that the request goes on
        with: the book was lost in a restart, or had let it go); ``now_ns``: when it came, on
        the clock of the records' times (None: not known, so never :func:`follows_at_once`).
        The request is taken until :meth:`settle`."""
        self._going_on = self._recapped_now = False
        self._now_ns = now_ns
        self._at_once = False
        state = self._identify(api, request, caller, agent, ended, resume)
        if state.parent is None and caller.subagent is None:
            state.parent = self._handed_task(state, request)
        state.going_on = self._going_on
        state.at_once = self._at_once
        state.asking += 1
        if caller.session is not None:
            self._caller_of(state, caller.session, caller.subagent, request.has_tools)
        return state

    def _caller_of(self, state: EndpointRun, session: str, subagent: str | None,
                   has_tools: bool) -> None:
        """A request of ``session`` (a client names it) naming no sub-agent and offering tools
        is of its caller: its run is the caller's from now on (one that offers none, a side
        call of the client's small model, hands no sub-agent its task); one naming a sub-agent
        is of a child run of the caller's run at its first request (kept: a caller's next run
        is not its parent). Of several callers in the session (two invocations that share it),
        the latest whose tool call (the one that started the sub-agent) is still out."""
        callers = self._callers
        if subagent is None:
            if not has_tools:
                return
            known = callers.get(session, ())
            callers[session] = (*(key for key in known if key != state.key),
                                state.key)[-MAX_CALLERS_PER_SESSION:]
            callers.move_to_end(session)
            while len(callers) > MAX_CALLERS:
                callers.popitem(last=False)
        elif state.parent is None:
            found = [key for key in reversed(callers.get(session, ())) if key != state.key]
            waiting = [key for key in found if (run := self._runs.get(key)) is not None
                       and run.pending]
            if found:
                state.parent = (waiting or found)[0]

    def _handed_task(self, state: EndpointRun, request: Request) -> str | None:
        """The run that handed ``request``'s conversation its task, or None: its first
        request, offering tools, begins with a text argument of a tool call that another run
        handed over and still waits for (a sub-agent its tool started, whose requests name
        nothing of its caller's: Crush's, a session of its own). A child run of that run; one
        a call: another session's conversation beginning so while the call waits is a run of
        its own (the same session's, begun again, is that child again)."""
        if request.results or request.last_answer is not None or not request.has_tools \
                or state.handed or state.pending \
                or len(request.anchor_text) < MIN_HANDED_TASK_CHARS:
            return None  # (its run may have begun at its title, a side request: no calls)
        handed = self._handed_tasks.get(_said_digest(f"{state.agent}\0{request.anchor_text}"))
        if handed is None:
            return None
        key, waiting, arguments = handed
        caller = self._runs.get(key)
        call = caller.pending.get(waiting) if caller is not None else None
        if caller is None or caller is state or call is None \
                or _said_digest(call.arguments) != arguments \
                or caller.conversation == state.conversation:
            return None  # (that call answered; the caller's own task run again at once)
        handing = f"{key}\0{waiting}"
        child = self._handed_to.get(handing)
        if child is not None and child != (state.session or ""):
            return None  # (that call's sub-agent began: another session's is not it)
        self._handed_to[handing] = state.session or ""
        self._handed_to.move_to_end(handing)
        while len(self._handed_to) > MAX_RESPONSE_IDS:
            self._handed_to.popitem(last=False)
        return caller.key

    def _handing(self, state: EndpointRun, call: ToolCall, waiting: str) -> None:
        """``call``, handed over by ``state``'s run and waiting under ``waiting`` in its
        pending calls: its text arguments, a task it may hand a sub-agent of its agent's
        (:meth:`_handed_task`), while that call waits."""
        if len(call.arguments) < MIN_HANDED_TASK_CHARS:
            return
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            return
        if not isinstance(arguments, dict):
            return
        texts = [value for value in arguments.values()
                 if isinstance(value, str) and len(value) >= MIN_HANDED_TASK_CHARS]
        handed = (state.key, waiting, _said_digest(call.arguments))
        for text in texts[:MAX_HANDED_TASKS_PER_CALL]:
            digest = _said_digest(f"{state.agent}\0{text}")
            self._handed_tasks[digest] = handed
            self._handed_tasks.move_to_end(digest)
        while len(self._handed_tasks) > MAX_RESPONSE_IDS:
            self._handed_tasks.popitem(last=False)

    @staticmethod
    def settle(state: EndpointRun) -> None:
        """A request :meth:`identify` took is over (answered, failed or cancelled)."""
        state.asking = max(0, state.asking - 1)

    def _identify(self, api: str, request: Request, caller: Caller, agent: str | None,
                  ended: Callable[[str], bool],
                  resume: Callable[[str], str | None] | None) -> EndpointRun:
        trace = parse_traceparent(caller.traceparent)
        if trace is not None:
            key = "trace:" + trace[0]
            state = self._runs.get(key)
            if state is None:
                state = self._keep(EndpointRun(key, KeySource.TRACE, trace[0], trace[1],
                                               agent=agent, traced=True))
            state.parent_span_id = trace[1]
            return self._touch(state)
        if caller.run is not None:
            state = self._runs.get(caller.run)
            if state is None:
                state = self._kept_stop(self._stop_of(caller.run, ()), agent, None,
                                        caller.session) \
                    or self._keep(EndpointRun(caller.run, KeySource.WATCHDOG,
                                              random_hex(128), None, agent=agent,
                                              session=caller.session))
            self._going_on = self._answers_calls_of(state, request)
            return self._touch(state)
        if request.previous_response_id is not None:
            previous = self._responses.get(request.previous_response_id)
            known = self._runs.get(previous) if previous is not None else None
            if known is None:  # (the response the endpoint's stop answer was, before a restart)
                known = self._kept_stop(self._stop_of(None, (request.previous_response_id,)),
                                        agent, None, None)
            if known is not None:
                if not (request.last_is_user and _over(known, ended)) \
                        or goes_on_from_stop(known, request) or self._follows(known, request):
                    self._going_on = self._answers_calls_of(known, request)
                    return self._touch(known)
                if goes_on_in_conversation(known, request):
                    return self._in_conversation(known)
                # a new user message in a conversation the server keeps, once its run has
                # ended: the next run of the session, as for a conversation sent whole (the
                # response it continues names that run now: the request sent again is in it)
                state = self._chained(self._next_run(known.conversation, known.session,
                                                     agent, request.messages), known, request)
                self._responses[request.previous_response_id] = state.key
                return state
        return self._conversation(api, request, agent, ended, resume, caller.session)

    def unbooked_of(self, api: str, request: Request, caller: Caller, agent: str | None,
                    calls: Sequence[Unbooked]) -> list[int]:
        """Which of ``calls`` (ended, not recorded yet) :meth:`identify` may give this request
        the run of, or whose records change what it reads: they must be recorded before it is
        identified. The calls of the run its trace or ``x-watchdog-run`` names; else of its
        conversation, the response it continues and the tool calls its results answer (a call
        the relay has not read yet may be any of these); for a conversation's first request
        that may be a sub-agent's, every call of its agent that handed tool calls over (one
        may have handed it its task: :meth:`_handed_task`); for one that offers no tools,
        every call of its agent's runs acting in text (its prompt may carry one's answer:
        :meth:`_grown`)."""
        if not calls:
            return []
        trace = parse_traceparent(caller.traceparent)
        if trace is not None or caller.run is not None:
            key = "trace:" + trace[0] if trace is not None else caller.run
            return [index for index, call in enumerate(calls) if call.run.key == key]
        digest = _digest(api, agent, request.anchor)
        previous = request.previous_response_id
        answered = {result.call_id for result in request.results}
        handed = caller.subagent is None and request.has_tools and not request.results \
            and request.last_answer is None \
            and len(request.anchor_text) >= MIN_HANDED_TASK_CHARS
        grows = not request.has_tools and not request.results and request.last_answer is None
        opens = request.opening is not None and not request.kept  # (a recap: _compacted)
        return [index for index, call in enumerate(calls)
                if call.run.conversation == digest
                or (previous is not None and call.response_id in (previous, None))
                or (answered and (call.call_ids is None
                                  or not answered.isdisjoint(call.call_ids)))
                or (handed and call.call_ids != frozenset() and call.run.agent == agent)
                or (grows and call.run.acts_in_text and call.run.agent == agent)
                or (opens and bool(call.run.asides) and call.run.agent == agent)]

    def _answers_calls_of(self, state: EndpointRun, request: Request) -> bool:
        """Whether ``request`` goes on from calls ``state``'s run handed over (its results
        answer them, no new user message): after an aside, as a conversation sent whole does
        (:meth:`_conversation`)."""
        return not request.last_is_user and any(
            self._calls.get(result.call_id) == state.key for result in request.results)

    @staticmethod
    def continues(api: str, request: Request, caller: Caller, agent: str | None,
                  state: EndpointRun) -> bool:
        """Whether ``request`` is of ``state``'s run or conversation: its trace's run, the
        run its ``x-watchdog-run`` names, else the same first user message of the same agent
        on the same API (a request sent again is, whatever else it carries)."""
        trace = parse_traceparent(caller.traceparent)
        if trace is not None:
            return state.key == "trace:" + trace[0]
        if caller.run is not None:
            return state.key == caller.run
        return state.conversation == _digest(api, agent, request.anchor)

    def _conversation(self, api: str, request: Request, agent: str | None,
                      ended: Callable[[str], bool],
                      resume: Callable[[str], str | None] | None,
                      client_session: str | None = None) -> EndpointRun:
        digest = _digest(api, agent, request.anchor)
        # (a client that names its session: its conversations' runs are that session's; such a
        # session has runs of several conversations at once, a sub-agent's beside its caller's,
        # so a conversation the book does not know is not taken for its active run)
        session = client_session or "model:" + digest[:24]
        compacted = self._compacted(request, agent, ended) \
            or self._rewritten(request, agent, digest, ended)
        if compacted is not None and (compacted.conversation != digest or self._recapped_now):
            # its history compacted to the summary it asked the model for, or rewritten around
            # a call it waits for: the run goes on in this conversation (taken back if that
            # answer ended it), whatever its length (compacted again to a request aside's
            # answer, its first user message may be the one it had: CAMEL-AI's)
            compacted.conversation = digest
            compacted.first = compacted.messages = request.messages
            self._conversations[digest] = compacted.key
            self._conversations.move_to_end(digest)
            self._going_on = True
            return self._touch(compacted)
        key = compacted.key if compacted is not None else self._conversations.get(digest)
        known = self._runs.get(key) if key is not None else None
        if known is not None and known.grown is not None and known.conversation != digest:
            # a prompt the run has grown past (:meth:`_grown`): another invocation's, of the
            # same task, that has come as far (a request sent again is of the latest prompt)
            key = None
        if key is None and resume is not None and client_session is None \
                and (request.results or not request.last_is_user):
            # a conversation going on that the book does not know: the session's active run
            # (the sidecar restored it), which the endpoint's records join by its key
            found = resume(session)
            if found is not None and found.startswith("model:"):
                self._keep(EndpointRun(found, KeySource.WATCHDOG, found.removeprefix("model:"),
                                       None, session=session, agent=agent,
                                       conversation=digest, messages=request.messages))
                self._conversations[digest] = key = found
        if key is None and (stop := self._stop_of(None, _stop_tokens(request))) is not None:
            # a conversation that goes on from a stop answer the book no longer knows (a
            # restart): the stopped run's, by the stop kept with it
            self._kept_stop(stop, agent, digest, session)
            self._conversations[digest] = key = stop[0]
        answers_its_calls = False  # its results answer calls its run handed over
        for result in request.results:  # the run that handed over the calls it answers
            handed = self._runs.get(self._calls.get(result.call_id) or "")
            if handed is not None and handed.conversation == digest:
                key, answers_its_calls = handed.key, True
                break
        state = self._runs.get(key) if key is not None else None
        if state is not None and (goes_on_from_stop(state, request)
                                  or goes_on_from_final(state, request)
                                  or self._follows(state, request)):
            self._conversations.move_to_end(digest)  # (its agent did not take the stop)
            return self._touch(state)
        if state is not None and (goes_on_in_conversation(state, request) or (
                self._now_ns is not None
                and begins_again_quoting(state, request, self._now_ns, self.at_once_ns))):
            self._conversations.move_to_end(digest)
            return self._in_conversation(state)
        if state is not None and (goes_on_from_aside(state, request) or (
                self._now_ns is not None
                and rejects_answer(state, request, self._now_ns, self.at_once_ns))):
            # its history compacted to the aside's answer: the run goes on (taken back if
            # that answer ended it), whatever the request's length
            self._conversations.move_to_end(digest)
            self._going_on, state.answered_last = True, False
            return self._touch(state)
        if state is not None and not (
                (request.last_is_user and _over(state, ended))
                or (request.last_is_user and not carries_answer(state, request))
                or (not request.kept and (
                    (request.messages < state.messages and not answers_its_calls)
                    or (request.messages <= state.first and not request.results
                        and (state.asking > 0 or state.answered > 0)
                        and not _sent_again(state, request))))):
            self._conversations.move_to_end(digest)
            self._going_on = answers_its_calls and not request.last_is_user
            return self._touch(state)
        # (a conversation's first request: no answer of the model in it yet; a side request's
        # prompt is the same one every time, a conversation the book may know already)
        first = not request.results and request.last_answer is None
        if first and (grown := self._grown(agent, request, digest, ended)) is not None:
            return grown
        if first and (quoted := self._quoted(agent, request, ended)) is not None:
            return quoted
        if first and (recapped := self._recapped(agent, request, ended)) is not None:
            return recapped
        if client_session is not None and first:
            side = self._side_of(client_session, request, digest, ended)
            if side is not None:
                return side
        state = self._chained(self._next_run(digest, session, agent, request.messages),
                              state, request)
        if client_session is not None and first:
            if request.has_tools:
                self._tasked(client_session, state, request)
            else:
                # a side request (a title of the session's task): the run of the conversation
                # whose first message it quotes, if that comes next (:meth:`_side_of`)
                # (what it quoted: its messages after its first, which it asked itself)
                said = request.said[:MAX_SIDE_SAID]
                state.side = frozenset(_said_digest(text) for text in said) - {
                    _said_digest(request.anchor_text)}
                state.side_lines = _side_lines(said)
                _remember(self._sides, client_session, state.key)
        return state

    def _in_conversation(self, state: EndpointRun) -> EndpointRun:
        """``state``'s run, whose budget covers its conversation, takes a new user message of
        it (:func:`goes_on_in_conversation`): it goes on (taken back if its answer ended it),
        or, its budget spent (its final request went upstream) or stopped, gets its stop."""
        self._going_on = not (state.final_used or state.stop is not None)
        if self._going_on:
            state.answered_last = False
        return self._touch(state)

    def _tasked(self, session: str, state: EndpointRun, request: Request) -> None:
        """``state``'s conversation, of ``session``, began with ``request``, which offers
        tools: a side request that quotes its first message is of it (:func:`is_side`)."""
        said = request.said[:MAX_SIDE_SAID] or [request.anchor_text]
        state.task = _said_digest(request.anchor_text)
        state.task_said = frozenset(_said_digest(text) for text in said)
        state.task_lines = _side_lines(said, MAX_QUOTE_CHARS)
        state.task_whole = tuple(_whole(text)[1:] if lines.endswith(_CUT) else None
                                 for text, lines in zip(said, state.task_lines, strict=False))
        _remember(self._tasks, session, state.key)

    def _side_of(self, session: str, request: Request, digest: str,
                 ended: Callable[[str], bool]) -> EndpointRun | None:
        """The run of ``session`` that ``request``, a conversation's first, goes to as a side
        request's, or None. A request that offers no tools and quotes the first message of the
        session's latest run whose first request offered tools, still going: a model call of
        that run (the title the agent asks its small model for, sent after its first request).
        A request that offers tools whose first message a side request of the session quoted
        before it (sent at the same time as it): its conversation goes on in the run that side
        request started (taken back if the side request's answer ended it)."""
        if not request.has_tools:
            key = self._tasks.get(session)
            state = self._runs.get(key) if key is not None else None
            said = request.said[:MAX_SIDE_SAID]
            if state is None or state.task is None or ended(state.key) \
                    or _said_digest(request.anchor_text) == state.task \
                    or (state.task_said.isdisjoint(_said_digest(text) for text in said)
                        and not any(_quotes(lines, task) and _quotes_whole(said, task, whole)
                                    for lines in _side_lines(said)
                                    for task, whole in zip(state.task_lines,
                                                           state.task_whole, strict=True))):
                return None  # (one that begins with the task asks it again: no side request)
            return self._touch(state)
        key = self._sides.get(session)
        state = self._runs.get(key) if key is not None else None
        said = request.said[:MAX_SIDE_SAID] or [request.anchor_text]
        if state is None or state.side is None or (
                state.side.isdisjoint(_said_digest(text) for text in said)
                and not any(_quotes(lines, _lines(text)) for lines in state.side_lines
                            for text in said)):
            return None
        del self._sides[session]
        state.side, state.side_lines, state.conversation = None, (), digest
        state.first = state.messages = request.messages
        self._tasked(session, state, request)
        self._conversations[digest] = state.key
        self._conversations.move_to_end(digest)
        # (its answer, the title, ended it: it goes on)
        self._going_on, state.answered_last = True, False
        return self._touch(state)

    def _compacted(self, request: Request, agent: str | None,
                   ended: Callable[[str], bool]) -> EndpointRun | None:
        """The run whose history ``request``'s conversation was compacted to: the one that
        conversation opens with the answer of, as the model's and before any user message
        model's and before any user message
        (:attr:`Request.opening`), an answer to a new user message of the run's (the summary
        the agent asked for, its tools offered or not: the Continue CLI sends its history's
        summary so, then a user message "continue"), or that holds the answer to the run's
        latest request aside that quoted its history (:meth:`_recap_of`: CAMEL-AI's summariser's,
        sent as ``[CONTEXT_SUMMARY] <it>``); the same agent's, not over by its final
        request or a stop, nor followed by its conversation's next run; that answer its latest
        to a new user message, and, when it ended the run, come just before (``at_once_ns``):
        an agent compacts its history and goes on at once. A conversation seeded with the
        model's message by design (a greeting, a transcript replayed) that an earlier run
        happened to answer with, or another invocation whose answers are the same, is not
        that run's."""
        if request.opening is None or request.kept:
            return None
        summary = answer_digest(request.opening)
        key = self._summaries.get(summary) if summary is not None else None
        state = self._runs.get(key) if key is not None else None
        if state is None or state.summary != summary:
            state = self._recap_of(agent, request.opening)
            self._recapped_now = state is not None
        if state is None or state.agent != agent or state.final_used or state.stop is not None \
                or self._conversations.get(state.conversation or "") != state.key:
            return None
        if (state.answered_last or ended(state.key)) and not (
                self._now_ns is not None
                and 0 <= self._now_ns - state.last_end_ns < self.at_once_ns):
            return None
        return state

    def _rewritten(self, request: Request, agent: str | None, digest: str,
                   ended: Callable[[str], bool]) -> EndpointRun | None:
        """The run whose history ``request``'s conversation, one the run is not of, rewrote:
        its results answer a call that run handed over and still waits for (the Cline CLI
        compacts its history to a summary of its own, sent as a new first user message, and
        keeps its latest call and result after it), or that the run's latest request answered
        when the model API refused it, the same result again (pi compacts its history so when
        told it is past the model's context window, then sends the refused request's results
        again); the same agent's, not over by its final request or a stop. A conversation the
        book knows is its own run's, never another's rewritten (two tasks whose model server
        gives their calls the same id, ``call_0``)."""
        if digest in self._conversations:
            return None
        for result in request.results:
            state = self._runs.get(self._calls.get(result.call_id) or "")
            if state is not None and state.conversation != digest and state.agent == agent \
                    and (_waits(state.pending, result.call_id)
                         or _result_digest(result) in state.refused) \
                    and not state.final_used and state.stop is None and not ended(state.key):
                return state
        return None

    def _act(self, state: EndpointRun, index: OrderedDict[str, tuple[str, ...]] | None = None
             ) -> None:
        """``state``, acting in text, has an answer its side requests may quote: its agent's
        latest such run (:attr:`_acting`; or, ``index``, the latest of that index's)."""
        index = self._acting if index is None else index
        agent = state.agent or ""
        runs = tuple(key for key in index.get(agent, ()) if key != state.key)
        index[agent] = (*runs[-(MAX_ACTING_PER_AGENT - 1):], state.key)
        index.move_to_end(agent)
        while len(index) > MAX_CONVERSATIONS:
            index.popitem(last=False)

    def _grown(self, agent: str | None, request: Request, digest: str,
               ended: Callable[[str], bool]) -> EndpointRun | None:
        """The run of ``agent`` acting in text whose history ``request``, a conversation's
        first, carries within its one prompt (:func:`grows_from`): the request goes on in it,
        its conversation now this prompt's, and what its prompt says after the run's latest
        answer is that answer's result (what the action gave: the ReAct ``Observation:``). A
        run over (its final request went upstream, or a stop) takes it too: it gets the stop.
        None for any other request."""
        for key in reversed(self._acting.get(agent or "", ())):
            state = self._runs.get(key)
            if state is None or (ended(key) and not state.final_used and state.stop is None):
                continue
            after = grows_from(state, request)
            if after is not None:
                state.heard = (hash(request.anchor_text), (after,) if after else ())
                state.conversation = digest
                self._conversations[digest] = state.key
                self._conversations.move_to_end(digest)
                while len(self._conversations) > MAX_CONVERSATIONS:
                    self._conversations.popitem(last=False)
                return self._touch(state)
        return None

    def _quoted(self, agent: str | None, request: Request,
                ended: Callable[[str], bool]) -> EndpointRun | None:
        """The run of ``agent`` acting in text whose latest answer ``request``, a
        conversation's first, quotes (:func:`quotes_answer`), while that run goes on: a side
        request of it (the agent asks a model about what it just did: Aider's commit message
        for the edit it applied, to its weak model). None for any other request."""
        for key in reversed(self._acting.get(agent or "", ())):
            state = self._runs.get(key)
            if state is not None and not ended(key) and quotes_answer(state, request):
                anchor = hash(request.anchor_text)
                state.quoted_by = (*(known for known in state.quoted_by if known != anchor),
                                   anchor)[-MAX_RECAP_ASIDES:]
                return self._touch(state)
        return None

    def _recapped(self, agent: str | None, request: Request,
                  ended: Callable[[str], bool]) -> EndpointRun | None:
        """The run of ``agent`` whose history ``request``, a conversation's first, quotes
        (:func:`quotes_history`) while that run goes on: a request aside of it, its tools
        offered or not (the agent asks a summariser of its own for a summary of that history,
        a conversation of its own: CAMEL-AI's, the Cline CLI's). Its model call is the run's,
        its answer not (:func:`recaps`). Of the agent's latest runs, the one it quotes alone:
        a history two of them share (the same task, the same result) is neither's. None for
        any other request. Cost: the request's messages' words joined once (O(its size)), then
        two substring searches in them for each of at most MAX_ACTING_PER_AGENT runs."""
        runs = self._histories.get(agent or "")
        if not runs:
            return None
        said = " ".join(" ".join(request.said[:MAX_SIDE_SAID]).split())
        instructions = hash(request.instructions)
        found = [state for key in runs if (state := self._runs.get(key)) is not None
                 and not _over(state, ended) and quotes_history(state, said, instructions)]
        if len(found) != 1:
            return None
        state = found[0]
        anchor = hash(request.anchor_text)
        state.asides = (*(known for known in state.asides if known != anchor),
                        anchor)[-MAX_RECAP_ASIDES:]
        return self._touch(state)

    def _recap_of(self, agent: str | None, opening: object) -> EndpointRun | None:
        """The run of ``agent`` whose latest request aside's answer (:attr:`EndpointRun.recap`)
        the model message ``opening`` holds (spacing aside, with words of its own around it:
        CAMEL-AI's ``[CONTEXT_SUMMARY] ...``), alone of the agent's latest runs; None when
        none or several do. Cost: the opening's words joined once, then for each of at most
        MAX_ACTING_PER_AGENT runs at most MAX_SIDE_SAID finds of its recap's start, each
        found hashed at its length."""
        recaps = [state for key in self._histories.get(agent or "", ())
                  if (state := self._runs.get(key)) is not None and state.recap is not None]
        if not recaps:
            return None
        words = " ".join(text_of(opening).split())
        found = [state for state in recaps if state.recap is not None
                 and _found(words, *state.recap) >= 0]
        return found[0] if len(found) == 1 else None

    def _chained(self, state: EndpointRun, before: EndpointRun | None,
                 request: Request) -> EndpointRun:
        """``state``, a new run of ``before``'s conversation begun by ``request``, one more of
        a chain when it came at once after ``before`` ended at its budget or a stop."""
        if before is not None and self._now_ns is not None \
                and at_once(before, request, self._now_ns, self.at_once_ns):
            state.chain = before.chain + 1
        return state

    def _follows(self, state: EndpointRun, request: Request) -> bool:
        """:func:`follows_at_once`, at the time :meth:`identify` was given (remembered)."""
        if self._now_ns is None \
                or not follows_at_once(state, request, self._now_ns, self.at_once_ns):
            return False
        self._at_once = True
        return True

    def _stop_of(self, key: str | None, answers: Sequence[str]) -> Stop | None:
        return self.stops(key, answers) if self.stops is not None and (key or answers) \
            else None

    def _kept_stop(self, stop: Stop | None, agent: str | None, conversation: str | None,
                   session: str | None) -> EndpointRun | None:
        """The book's run for a stop kept with its run (:attr:`stops`), or None."""
        if stop is None:
            return None
        key, note, answers = stop
        state = self._runs.get(key)
        if state is None:
            state = self._keep(EndpointRun(
                key, KeySource.WATCHDOG, key.removeprefix("model:") if key.startswith(
                    "model:") and len(key) == 38 else random_hex(128), None, session=session,
                agent=agent, conversation=conversation))
        state.stop = state.stop or note
        state.stop_answers |= frozenset(answers)
        return self._touch(state)

    def _next_run(self, conversation: str | None, session: str | None, agent: str | None,
                  messages: int) -> EndpointRun:
        """A new run of the conversation ``conversation`` (its anchor's digest), in
        ``session``; ``messages``: the length of the request that starts it. The
        conversation's later requests sent whole go to it."""
        trace_id = random_hex(128)
        state = self._keep(EndpointRun("model:" + trace_id, KeySource.WATCHDOG, trace_id, None,
                                       session=session, agent=agent, conversation=conversation,
                                       first=messages))
        if conversation is not None:
            self._conversations[conversation] = state.key
            self._conversations.move_to_end(conversation)
            while len(self._conversations) > MAX_CONVERSATIONS:
                _, key = self._conversations.popitem(last=False)
                if self.let_go is not None:
                    self.let_go(key)
        return state

    def _keep(self, state: EndpointRun) -> EndpointRun:
        self._runs[state.key] = state
        while len(self._runs) > self.max_runs:
            key, _ = self._runs.popitem(last=False)
            if self.let_go is not None:
                self.let_go(key)
        return state

    def _touch(self, state: EndpointRun) -> EndpointRun:
        self._runs.move_to_end(state.key)
        return state

    # -- records --------------------------------------------------------------------------------

    def tool_records(self, state: EndpointRun, request: Request, now_ns: int
                     ) -> list[SpanRecord]:
        """The tool calls handed over before this request: they have run by now. Each with
        the result this request carries for it, if any (a result that names no call, as
        Qwen-Agent's tool messages name theirs by ``id``, not ``tool_call_id``: the calls
        still waiting, in the order handed over); each once (a retried request, or a result
        that comes later, finds its call counted). None when the agent traces them itself."""
        if is_side(state, request):  # (it answers none of the run's calls)
            return []
        records: list[SpanRecord] = []
        answered: list[tuple[ToolCall, ToolResult | None]] = []
        for result in request.results:
            call = _answered(state.pending, result.call_id) \
                or _answered(state.begun, result.call_id)
            if call is not None:
                answered.append((call, result))
        for result in request.results:  # (no call id: the calls in the order handed over)
            if not result.call_id and state.pending:
                answered.append((state.pending.pop(next(iter(state.pending))), result))
        said = said_of(state, request)
        asked, state.asked = state.asked, _asked(request, said)
        retried: list[ToolCall] = []
        if state.pending and not answered and asked == state.asked and state.asking <= 1:
            # the request before, sent again (none other of the run with the model): the
            # agent did not take the answer it got (its client could not read it), so the
            # calls it handed over never ran. They are no longer handed over; as a broken-off
            # answer's, one counts if the next request answers it
            state.handed = max(state.handed - len(state.pending), 0)
            retried = list(state.pending.values())
            state.pending.clear()
        unanswered = list(state.pending.values())
        state.pending.clear()
        for call in unanswered:
            answered.append((call, _said_result(call, said, len(unanswered))))
        for call in state.begun.values():  # (a request sent again answers none of them)
            if (heard := _said_result(call, said, 0)) is not None:
                answered.append((call, heard))
        state.begun.clear()
        for call in retried:
            _wait(state.begun, call)
        for call, found in answered:
            state.results += 1
            if not state.traced:
                records.append(self._tool_record(state, call, found, now_ns))
        if request.results and not state.traced:
            self._heard(state, request, answered[-1][0] if answered else None)
        if request.messages:
            state.messages = request.messages
        return records

    def _heard(self, state: EndpointRun, request: Request, call: ToolCall | None) -> None:
        """``state``'s request carries tool results (``call``: the last call they answered):
        what a request aside that quotes the run's history must quote (:attr:`EndpointRun.
        history`), its agent's latest such run. Cost: at most 4 * MAX_ASIDE_CHARS chars of the
        first message, the latest result and the call's text arguments read, the call's
        arguments parsed (at most MAX_ACTION_CHARS), the instructions hashed."""
        task = _words(request.anchor_text)
        result = _words(request.results[-1].content)
        if task and result:
            state.history = (task, result, _action(call), hash(request.instructions))
            self._act(state, self._histories)

    def _handed_first(self, state: EndpointRun, request: Request, call: ToolCall) -> None:
        """``state``'s first calls are handed over (``call`` the last), before any request of
        it carries a result: its history as far as it goes (:attr:`EndpointRun.history`: its
        first message and the call's text argument, no result yet), so a request aside that
        quotes them, sent while the agent runs that call (gptme's title, asked by a thread of
        its own as its next request goes out), is the run's whichever comes first. Cost: as
        :meth:`_heard`'s, no result read."""
        task, action = _words(request.anchor_text), _action(call)
        if task and action:
            state.history = (task, "", action, hash(request.instructions))
            self._act(state, self._histories)

    def ran_before_answer(self, state: EndpointRun, handed: list[ToolCall], now_ns: int,
                          offered: Container[str] | None = None) -> list[SpanRecord]:
        """The work a response asks for beside its answer (:func:`closing_call`): the agent
        runs it, then ends, so no request brings its results. Each call a record of a tool run
        by ``now_ns`` (the answer's start: they are booked before it, which ends the run),
        without a result; none when the agent traces its tools itself, or when the answer
        ends it before the work runs (:func:`ends_first`). ``offered``: the final-answer tools
        its request offers (``Request.answers_offered``)."""
        closing = closing_call(handed, state.answer_tool, state.work_beside, offered)
        if state.traced or closing is None or not runs_beside(closing, state.work_beside):
            return []
        ran = [self._tool_record(state, call, None, now_ns) for call in handed
               if not answers(call.name, state.answer_tool, offered)]
        state.results += len(ran)
        return ran

    def answered_records(self, state: EndpointRun, now_ns: int, seen: Iterable[int]
                         ) -> list[SpanRecord] | None:
        """The records :meth:`tool_records` makes for a request that answers each of the run's
        pending calls with a result that is no failure and like no result in ``seen`` nor
        another's (each a fresh text: the rules count it as such a result, whatever it says),
        at ``now_ns``; None if the run traces its tools itself."""
        if state.traced:
            return None
        seen = set(seen)
        records = []
        for call in state.pending.values():
            record = self._tool_record(state, call, ToolResult(
                call.call_id, f"\0{random_hex(64)}", False), now_ns)
            if record.result_hash is None or record.result_hash in seen:
                return None  # (64 random bits that hash like a result seen: never)
            seen.add(record.result_hash)
            records.append(record)
        return records

    def stopped(self, state: EndpointRun, request: Request, answer: str,
                response_id: str | None = None) -> None:
        """The endpoint answered ``state``'s run with ``answer`` at its stop, for ``request``
        (``response_id``: the id it gave that answer, which a conversation the server keeps
        goes on from): a request that goes on from it is the stopped run's
        (:func:`goes_on_from_stop`). So is every later request of a conversation the server
        keeps by its id (``conversation``): the stop answer is not in it (the upstream never
        gave it), and its requests carry nothing else to go on from."""
        kept = request.anchor if request.anchor.startswith(CONVERSATION_ANCHOR) else None
        for known in (answer_digest(answer), response_id, kept):
            if known is not None and known not in state.stop_answers \
                    and len(state.stop_answers) < MAX_STOP_ANSWERS:
                state.stop_answers |= {known}
        if response_id is not None:
            self._responses[response_id] = state.key
            while len(self._responses) > MAX_RESPONSE_IDS:
                self._responses.popitem(last=False)

    def handed_by(self, call_id: str) -> str | None:
        """The run that last handed over the tool call ``call_id`` (as far as remembered)."""
        return self._calls.get(call_id)

    def handed_ids(self) -> list[str]:
        """The ids of every tool call handed over that :meth:`handed_by` remembers."""
        return list(self._calls)

    def _tool_record(self, state: EndpointRun, call: ToolCall, result: ToolResult | None,
                     now_ns: int) -> SpanRecord:
        record = self._record(state, SpanKind.TOOL, "execute_tool " + call.name[:200],
                              state.last_end_ns or now_ns, now_ns)
        record.tool_name = call.name[:200] or "unknown"
        record.tool_call_id = call.call_id[:200] or None  # (the agent's span of it pairs by it)
        canonical_arguments, stable_hash = _hashing()
        canonical = canonical_arguments(call.arguments)
        record.args_hash = stable_hash(record.tool_name + "\0" + canonical)
        record.args_brief = brief(canonical, MAX_BRIEF_CHARS)
        if result is None:
            return record
        record.result_hash = stable_hash(record.tool_name + "\0" + result.content)
        record.result_brief = brief(result.content, MAX_BRIEF_CHARS)
        if result.error:
            record.error = True
            record.error_type = FAILED_TOOL
            record.error_message = brief(result.content, MAX_BRIEF_CHARS)
            record.error_signature = stable_hash(FAILED_TOOL + ":" + record.error_message)
        return record

    def call_record(self, state: EndpointRun, request: Request, seen: Observation,
                    handed: list[ToolCall], start_ns: int, end_ns: int,
                    run_key: str | None = None) -> SpanRecord:
        """The model call, as handed to the agent (``handed``: the tool calls it kept;
        ``run_key``: the run its request was given, see :meth:`_record`)."""
        record = self._record(state, SpanKind.LLM, "chat " + request.model[:200], start_ns,
                              end_ns, run_key)
        record.input_tokens, record.output_tokens = seen.input_tokens, seen.output_tokens
        record.cache_read_tokens = min(seen.cache_read_tokens, seen.input_tokens)
        record.cache_write_tokens = min(seen.cache_write_tokens,
                                        seen.input_tokens - record.cache_read_tokens)
        record.model = seen.model or request.model[:200] or None  # priced by the core's step
        record.finish_reason = seen.finish_reason
        record.messages = request.messages + 1
        record.input_hash = request.input_hash  # the run's input, as a span's (cycles)
        record.response_id = seen.response_id
        offered = request.answers_offered
        work = [call for call in handed if not answers(call.name, state.answer_tool, offered)]
        side = is_side(state, request)
        if side:  # (an aside hands its run nothing: never against its budget)
            work = []
        record.requested_tools = bool(work)
        if side and recaps(state, request):  # (a summary of its history: the run goes on)
            words = " ".join(seen.text.split())
            state.recap = (words[:MAX_ASIDE_CHARS], len(words), _prompt_digest(words)) \
                if len(words) >= MIN_ASIDE_CHARS and not seen.broke_off else None
            state.recapped = state.recap[0] if state.recap is not None else state.recapped
        elif not side and not seen.broke_off:
            state.recap = None  # (another answer came: the summary was not taken up)
        reads = not handed and not seen.broke_off and not side
        acted = text_action(state, seen) if reads else []
        # (its final request's answer, an action of none, may still give it by one)
        said = text_answer(acted or (text_action(state, seen, last=True)
                                     if reads and state.answer_tools else []),
                           state.answer_tools, state.action_key)
        stepped = False
        if said is None and reads and state.answer_key is not None:
            said = json_answer(seen.text, state.answer_key)  # (its answer's object: its answer)
            stepped = said is None and not acted and steps(state, seen)
        if said is not None:  # (its own finishing action: its answer, no work)
            acted = []
        if state.acts_in_text and not side and not seen.broke_off:
            words = " ".join(seen.text.split())
            state.quote = words[:MAX_ASIDE_CHARS] if len(words) >= MIN_ASIDE_CHARS else None
            state.acted = tuple(call.arguments for call in acted) if state.action_key else ()
            state.prompt = _said_digest(request.instructions)
            state.grown = _grown_from(request.anchor_text, words) \
                if request.last_answer is None and request.anchor_text and words else None
            if state.quote is not None or state.grown is not None:
                self._act(state)
        if acted:  # (its text holds the actions the agent runs: tool calls of them)
            work, record.acted_on = acted, True
        elif stepped:  # (a step of its own, no action: the run goes on at its next request)
            record.acted_on = True
        shaped = [call for call in handed if call.name == request.forced] \
            if request.forced and not side and not state.final_used else []
        if shaped:
            # (an answer-shaped request's call: its answer, which the program may act on, as
            # a plan/act loop does: held open, a tool call of the run once a request goes on
            # from it; the final request's is the run's answer)
            work, record.acted_on = shaped, True
            value = _shaped_value(shaped[-1]) if request.last_answer is None \
                and not request.results and request.anchor_text else None
            if value is not None:
                # (a prompt of its own, no model answer in it: a loop of stateless prompts
                # goes on by the next one, its record of this step in the prompt: the run's
                # if it quotes the call's argument, :func:`grows_from`)
                state.grown = _grown_from(request.anchor_text, value)
                self._act(state)
        if not seen.broke_off:  # (what it handed over: an agent's span of running one pairs)
            record.asked_tools = tuple((call.name[:200], call.call_id[:200])
                                       for call in work[:MAX_ASKED_TOOLS])
        if request.limit is not None and not work and not side and not seen.broke_off \
                and not state.final_used:
            # (the final request of the agent's own limit, its words saying so: the run met
            # that limit, as a span of the call whose prompt says it, :func:`prompt_limit`;
            # when the endpoint made it the run's final request, its budget ended the run)
            record.limit_stop = request.limit
        broke = seen.broke_off
        answer = answer_of(handed, state.answer_tool, seen.text, offered) \
            if said is None else said
        closing = closing_call(handed, state.answer_tool, state.work_beside, offered)
        if closing is not None:  # (its work runs now, counted: :meth:`ran_before_answer`)
            answer = answer_of([closing], state.answer_tool, offered=offered)
        if request.last_is_user and not side:
            state.summary = None  # (its latest answer to a new user message: this one's)
        if broke:
            # the response broke off before its end (the upstream closed it or sent an error
            # event mid-stream, or the agent went away): a failed call, no answer; what it
            # asked for is counted if the agent's next request answers it, not handed
            record.error, record.error_type = True, INCOMPLETE
            record.error_message = "the model's response broke off before its end"
        elif answer is not None:  # asks only for final-answer tools: the run's answer
            record.final_answer = True
            record.final_output = brief(answer, MAX_BRIEF_CHARS)
        elif not handed and seen.text.strip() and seen.finish_reason not in CUT_SHORT \
                and not side:
            record.final_answer = True
            record.final_output = brief(seen.text, MAX_BRIEF_CHARS)
            words = " ".join(seen.text.split())
            if not request.has_tools and not acted and len(words) >= MIN_ASIDE_CHARS:
                state.aside = words[:MAX_ASIDE_CHARS]  # an aside's answer (it offered no tools)
            if request.last_is_user and not acted and len(words) >= MIN_ASIDE_CHARS:
                summary = state.summary = answer_digest(words)
                if summary is not None:  # (an answer a history may be compacted to)
                    self._summaries[summary] = state.key
                    self._summaries.move_to_end(summary)
                    while len(self._summaries) > MAX_RESPONSE_IDS:
                        self._summaries.popitem(last=False)
        if not side:
            state.answered_last = record.loose and record.final_answer and not record.acted_on
            # (the text answer that ended it, which a reply at once may drop: an answer
            # tool's call holds no text a history keeps as the model's, rejected or not; an
            # answer given by a finishing action in text does)
            state.ending = answer_digest(seen.text) \
                if state.answered_last and (answer is None or said is not None) else None
            state.ending_prompt = _said_digest(request.instructions) \
                if state.answered_last else None
            words = " ".join(seen.text.split()) if state.answered_last else ""
            state.ending_words = words[:MAX_ASIDE_CHARS] \
                if len(words) >= MIN_ASIDE_CHARS else None
        waiting = state.begun if broke else state.pending
        for call in work:
            waited = _wait(waiting, call) if len(waiting) < MAX_PENDING_CALLS \
                and (closing is None or broke) else None
            if call.call_id:
                self._calls[call.call_id] = state.key
            if waited is not None and not broke:
                self._handing(state, call, waited)
        while len(self._calls) > MAX_RESPONSE_IDS:
            self._calls.popitem(last=False)
        if not broke:  # (its request may be sent again: the same run's, not a twin's)
            state.handed += len(work)
            state.answered += 1
            if work and state.history is None and not state.traced:
                self._handed_first(state, request, work[-1])
        state.unread = seen.unreadable
        if not side:  # (an aside's answer, a summary pi asks for after the refusal, keeps it)
            state.refused = frozenset()
        state.last_end_ns = end_ns
        if seen.response_id:
            self._responses[seen.response_id] = state.key
            while len(self._responses) > MAX_RESPONSE_IDS:
                self._responses.popitem(last=False)
        return record

    def refused_record(self, state: EndpointRun, request: Request, status: int, body: bytes,
                       start_ns: int, end_ns: int, run_key: str | None = None) -> SpanRecord:
        """A request the model API refused as bad (:func:`~watchdog.core.model.failure.
        refused`): a failed model call of its run, free, its error the API's. The same bad
        request sent again and again is then a loop the rules see (``error-loop``), not a run
        gone quiet; sent again once mended, it is the same run's."""
        stable_hash = _hashing()[1]
        record = self._record(state, SpanKind.LLM, "chat " + request.model[:200], start_ns,
                              end_ns, run_key)
        record.model = request.model[:200] or None
        record.cost_usd = 0.0  # (a refused request is not billed)
        record.messages = request.messages
        kind, message = refusal_of(status, body)
        record.error, record.error_type = True, kind[:MAX_ERROR_TYPE_CHARS]
        record.error_message = brief(message, MAX_BRIEF_CHARS)
        record.error_signature = stable_hash(record.error_type + ":"
                                             + mask(record.error_message))
        if not is_side(state, request):  # (what a history rewritten then sends again)
            state.refused = frozenset(_result_digest(result)
                                      for result in request.results[:MAX_PENDING_CALLS])
        return record

    @staticmethod
    def _record(state: EndpointRun, kind: SpanKind, name: str, start_ns: int,
                end_ns: int, run_key: str | None = None) -> SpanRecord:
        """A record of ``state``'s; ``run_key``: the run its request was given. A call whose
        trace named a run at its request is pinned to that run: the trace may name another
        by the time its response ends (a nested client-SDK run announced meanwhile). One whose
        trace named none yet is keyed by the trace, and goes to the run its spans name."""
        loose = not state.traced
        record = SpanRecord(
            run_key=state.key, key_source=state.key_source, trace_id=state.trace_id,
            span_id=random_hex(64),
            # a loose run's records end it with its answer; a traced one's hang below the
            # agent's span, so its spans say when it ends
            parent_span_id=None if loose else (state.parent_span_id or "0" * 15 + "1"),
            name=name, kind=kind, start_ns=start_ns, end_ns=max(end_ns, start_ns),
            agent=state.agent, session=state.session, loose=loose, scope=SCOPE)
        if run_key is not None and run_key != state.key and state.key_source is KeySource.TRACE:
            # (named as the client SDK names its run: the run exists, opened at the request)
            record.run_key, record.key_source, record.pinned = run_key, KeySource.WATCHDOG, True
        return record


def text_action(state: EndpointRun, seen: Observation, last: bool = False) -> list[ToolCall]:
    """The actions a text answer hands over, for a run whose agent acts on its answers' text
    (:attr:`EndpointRun.acts_in_text`): a call of :data:`TEXT_ACTION` whose arguments are the
    answer's fenced code blocks (```` ``` ````), else its whole text, spacing aside (so the same
    command under other reasoning is the same call: the loop rules see it repeat) — or, when
    its rule pack gives the actions' pattern (:attr:`EndpointRun.action_pattern`, searched in
    the answer's first MAX_ACTION_CHARS), what it matches: its groups, else the match (a
    ReAct agent's ``Action:`` and ``Action Input:``, its ``Thought:`` aside); an answer it does
    not match holds no action (the agent's ``Final Answer:``) — or, when it gives the key
    that names an action's tool (:attr:`EndpointRun.action_key`), a call per JSON object in
    the answer that has that key (:func:`json_actions`); with a pattern too, per such object
    in what the pattern matches (its groups, else the match: Qwen-Agent's and Hermes'
    ``<tool_call>`` blocks, the prose's JSON no action), an answer it does not match holding
    none. Its result is what the agent's
    next request says after the answer (its output). None for another run, an answer with no
    text or one cut short, and for the run's final request or stop: that answer is its
    last; and, for a run whose agent acts by the code blocks in its answers
    (:attr:`EndpointRun.acts_in_code`), an answer with none: its answer. ``last``: read the
    answer of the run's final request or stop too (for the answer it gives by an action)."""
    if not state.acts_in_text or (not last and (state.final_used or state.stop is not None)) \
            or not seen.text.strip() or seen.finish_reason in CUT_SHORT:
        return []
    return read_actions(seen.text, in_code=state.acts_in_code, pattern=state.action_pattern,
                        key=state.action_key, answer_tools=state.answer_tools)


def steps(state: EndpointRun, seen: Observation) -> bool:
    """Whether an answer that holds no action and no answer object (:func:`json_answer`) is a
    step of the agent's, for a run whose rule pack gives an ``answer_key``
    (:attr:`EndpointRun.answer_key`: KaibanJS's ``{"observation": ...}``, after which it asks
    the model again): a model call, no tool call, the run going on at its next request. Not
    the answer to the run's final request or stop (its last), nor an empty or cut-short one."""
    return state.answer_key is not None and state.acts_in_text \
        and not (state.final_used or state.stop is not None) \
        and bool(seen.text.strip()) and seen.finish_reason not in CUT_SHORT


def _asked(request: Request, said: Sequence[str]) -> tuple[object, ...]:
    """What a request carries past the model's last answer, as far as it tells one request
    sent again from the next: its length, the response it continues, the calls its results
    answer and what else it says there, the calls it ends with when it sends them back
    without their results (:attr:`Request.last_calls`); and its first user message (an agent
    that sends its history within one prompt grows it at each step, the same output after the
    same action again and again: :func:`grows_from`)."""
    return (request.messages, request.previous_response_id,
            tuple(result.call_id for result in request.results), hash(tuple(said)),
            hash(request.anchor), request.last_calls)


def _sent_again(state: EndpointRun, request: Request) -> bool:
    """Whether ``request`` sends again the request before of ``state``'s run, whose answer the
    endpoint saw its client could not read (it passed on a line that is not JSON): it carries
    what that one did, no other of the run is with the model, and the calls that answer
    handed over wait for their results. A first request sent again so is its run's, not a
    twin's (:meth:`ModelBook.tool_records` takes its calls back). Equal content alone is no
    evidence: a second invocation with the same first request is the next run."""
    return state.unread and state.asking == 0 and bool(state.pending) \
        and state.asked == _asked(request, said_of(state, request))


def _wait(waiting: dict[str, ToolCall], call: ToolCall) -> str:
    """``call`` waits for its result: under its id, or, when a call handed over before has the
    same id (an upstream that gives none, or the same one to each call), under its id and a
    number, so that each call counts once. The key it waits under."""
    key, number = call.call_id, len(waiting)
    while key in waiting:
        key, number = f"{call.call_id}\0{number}", number + 1
    waiting[key] = call
    return key


def _waits(waiting: dict[str, ToolCall], call_id: str) -> bool:
    """Whether a call of ``call_id`` waits for its result (:func:`_wait`)."""
    prefix = call_id + "\0"
    return call_id in waiting or any(key.startswith(prefix) for key in waiting)


def _answered(waiting: dict[str, ToolCall], call_id: str) -> ToolCall | None:
    """The call waiting that a result of ``call_id`` answers (the first of that id), taken."""
    call = waiting.pop(call_id, None)
    if call is None:
        prefix = call_id + "\0"
        key = next((key for key in waiting if key.startswith(prefix)), None)
        call = waiting.pop(key) if key is not None else None
    return call


def goes_on_from_stop(state: EndpointRun, request: Request) -> bool:
    """Whether ``request`` goes on from the answer the endpoint gave at ``state``'s stop: its
    conversation's last model answer is that answer. An agent that sends it on did not take it
    as the run's end (a framework's validation retry: the stop answer failed its output's
    schema, and a retry prompt follows as a user message), so it is still the stopped run's,
    not the next run's."""
    if not state.stop_answers:
        return False
    if (request.previous_response_id is not None and request.previous_response_id \
            in state.stop_answers) or request.anchor in state.stop_answers:
        return True  # (an anchor there: a conversation the server keeps by its id)
    return request.last_answer is not None \
        and answer_digest(request.last_answer) in state.stop_answers


def text_stop_answer(form: str, note: str) -> str:
    """The stop answer of a run whose agent acts on its answers' text: ``form`` (its rule
    pack's ``stop_answer``, the form that ends the agent's task) with the stop note where it
    says STOP_NOTE_MARK, and as a JSON string (quoted, escaped: a form that is a JSON object,
    which the agent parses) where it says STOP_NOTE_JSON_MARK; in one pass, so a mark the note
    holds stays its text. The note's own fenced blocks are left out (the model's last answer,
    when it is the run's report, may hold one): the agent must find no action but the
    form's."""
    said = _FENCED_WHOLE.sub("", note).strip()
    quoted = json.dumps(said, ensure_ascii=False)
    return _STOP_MARKS.sub(lambda m: quoted if m.group() == STOP_NOTE_JSON_MARK else said, form)


def no_json(line: str) -> str:
    """A line of a stop note for an agent that reads its actions from its answers' text (a
    rule pack's ``actions: text`` or ``code``), with no JSON object in it: its braces shown as
    parentheses. A step's arguments, quoted as JSON (``shell({"command": ...})``), are what
    such an agent runs when it finds them (Langroid reads a JSON object whose fields are a
    tool's as a call of it, its ``request`` key or not): the stop's answer must hand over
    nothing to run."""
    return line.translate(_NO_BRACES)


def goes_on_from_final(state: EndpointRun, request: Request) -> bool:
    """Whether ``request`` goes on, with the output of what it ran, from the final answer of a
    run whose agent acts on its answers' text: the answer was one more action, not the end
    of its task, so the request is still the run's (answered with its stop), not the next
    run's. The conversation sent whole, longer than at the final request."""
    return state.acts_in_text and state.final_used and request.last_is_user \
        and not request.kept and request.messages > state.messages \
        and carries_answer(state, request)


def carries_answer(state: EndpointRun, request: Request) -> bool:
    """Whether ``request``, of the conversation of ``state``'s run, carries that run's latest
    answer (:attr:`EndpointRun.quote`) among its model answers, spacing aside, as every
    request that goes on in a run whose agent acts in text does (its conversation sent whole,
    the answer it acted on in it). One that does not is another invocation of the agent that
    begins as its conversation began (Aider's every request begins with the same examples):
    the next run. True when the run has no such answer, or the server keeps the conversation.
    An agent that names its tools by JSON objects may send that answer back written anew, as it
    parsed it (Qwen-Agent: its text before the call, then the call as ``json.dumps`` writes
    it, the prose after it dropped): a model answer that holds the same actions, the same
    objects in the same order (:attr:`EndpointRun.acted`, keys sorted), carries it too."""
    if state.quote is None or request.kept:
        return True
    if any(state.quote in " ".join(text_of(content).split()) for content in request.answers):
        return True
    return bool(state.acted) and any(
        tuple(call.arguments for call in key_actions(text_of(content), state.action_key or "",
                                                state.action_pattern)) == state.acted
        for content in request.answers)


def grows_from(state: EndpointRun, request: Request) -> str | None:
    """What ``request`` says after the latest answer of ``state``'s run, whose agent sends
    its history within one prompt (:attr:`EndpointRun.grown`; spacing aside, "" for nothing),
    or None when it does not go on so: a conversation's first request whose prompt (its first
    user message) begins with that answer's prompt up to its last line break, exactly, and
    goes on with the answer (spacing aside). A ReAct agent's next step sends just that: its
    prompt, the scratchpad at its end grown by the answer and the ``Observation:`` of its
    action (the cue on the prompt's last line, ``Thought:``, may be written anew after it).
    Another invocation with the same task begins with that prompt too, but without the
    answer after it."""
    grown = state.grown
    if grown is None or request.last_answer is not None or request.results \
            or request.kept or not request.last_is_user:
        return None
    size, digest, start, length, answer = grown
    prompt = request.anchor_text
    if len(prompt) <= size or _prompt_digest(prompt[:size]) != digest:
        return None
    rest = " ".join(prompt[size:].split())
    end = _found(rest, start, length, answer)
    return rest[end:].strip() if end >= 0 else None


def _found(words: str, start: str, length: int, digest: str) -> int:
    """Where in ``words`` the text of ``length`` chars that begins with ``start`` and has the
    digest ``digest`` (:func:`_prompt_digest`) ends, or -1: at most MAX_SIDE_SAID places
    where ``start`` is tried (bounded: a start repeated)."""
    at, tries = words.find(start), MAX_SIDE_SAID
    while at >= 0 and tries:
        tries -= 1
        if _prompt_digest(words[at:at + length]) == digest:
            return at + length
        at = words.find(start, at + 1)
    return -1


def _grown_from(prompt: str, words: str) -> tuple[int, str, str, int, str]:
    """:attr:`EndpointRun.grown` of an answer (its words) to ``prompt``: the prompt up to its
    last line break (the whole of one that has none)."""
    size = prompt.rfind("\n")
    size = size if size > 0 else len(prompt)
    return (size, _prompt_digest(prompt[:size]), words[:MAX_ASIDE_CHARS], len(words),
            _prompt_digest(words))


def _shaped_value(call: ToolCall) -> str | None:
    """What a program that acts on an answer-shaped call would write of it in its next
    prompt: the longest of its arguments' string values (the latest of the longest), spacing
    aside, at least :data:`MIN_SHAPED_VALUE_CHARS` long, at most MAX_ASIDE_CHARS kept; None
    when it has none so long."""
    try:
        arguments = json.loads(call.arguments[:MAX_ACTION_CHARS])
    except ValueError:
        return None
    if not isinstance(arguments, dict):
        return None
    best = ""
    for value in arguments.values():
        words = " ".join(value.split())[:MAX_ASIDE_CHARS] if isinstance(value, str) else ""
        if len(words) >= max(len(best), MIN_SHAPED_VALUE_CHARS):
            best = words
    return best or None


def _prompt_digest(text: str) -> str:
    """A prompt's digest, exactly as sent (:attr:`EndpointRun.grown`)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def at_once(state: EndpointRun, request: Request, now_ns: int,
            window_ns: int = AT_ONCE_NS) -> bool:
    """Whether ``request`` is a new user message less than ``window_ns`` (by default
    :data:`AT_ONCE_NS`) after the answer that ended ``state``'s run at its budget (its final
    request's) or at a stop."""
    return request.last_is_user and (state.final_used or state.stop is not None) \
        and state.answered > 0 and 0 <= now_ns - state.last_end_ns < window_ns


def follows_at_once(state: EndpointRun, request: Request, now_ns: int,
                    window_ns: int = AT_ONCE_NS) -> bool:
    """Whether ``request``, a new user message in the conversation of ``state``'s run, is the
    agent's own reply to the answer that ended that run at its budget or at a stop, rejecting
    it: it comes :func:`at_once`, and its conversation (sent whole, longer than before) does
    not hold that answer as its last (the agent dropped it: a format error in its place), or
    the run is the :data:`MAX_CHAINED_RUNS`-th in a row begun so. It is still the run's, and
    gets its stop, not the upstream. A person's next question comes after a real pause, or
    holds the answer it follows (a chat sends it whole); it starts the session's next run,
    with a budget of its own. A run that ended on its own (the model's answer, no budget
    spent) is never held so. ``window_ns``: how soon is at once (``model_reply_window``)."""
    if not at_once(state, request, now_ns, window_ns):
        return False
    if state.chain >= MAX_CHAINED_RUNS:
        return True
    if request.kept or request.messages <= state.messages:
        return False  # (its history is the server's, or the agent started over)
    last = answer_digest(request.last_answer)
    return last is None or last != answer_digest(state.report or "")


def rejects_answer(state: EndpointRun, request: Request, now_ns: int,
                   window_ns: int = AT_ONCE_NS) -> bool:
    """Whether ``request``, a new user message in the conversation of ``state``'s run, is the
    agent's own reply rejecting the answer that ended the run on its own (the model's text,
    no budget spent, no stop): it comes less than ``window_ns`` after that answer, under the
    instructions that answer came to (under others it is another agent's turn: a pipeline's
    next agent, given the first one's work), and its conversation, sent whole and longer than
    the run's was, does not hold that answer as its last (the agent dropped it: mini-swe-agent's
    format error when its model answers without a tool call). The run goes on with what is
    left of its budget: an agent that takes no answer as its end cannot begin run after run,
    each with a budget of its own. A new message
    that keeps the answer in its history (a script's next ``chat``, a person's next question)
    is the session's next run: nothing in it tells a nudge from a new task."""
    return state.answered_last and not state.final_used and state.stop is None \
        and state.ending is not None and request.last_is_user and not request.kept \
        and request.messages > state.messages and 0 <= now_ns - state.last_end_ns < window_ns \
        and answer_digest(request.last_answer) != state.ending \
        and _said_digest(request.instructions) == state.ending_prompt


def begins_again_quoting(state: EndpointRun, request: Request, now_ns: int,
                         window_ns: int = AT_ONCE_NS) -> bool:
    """Whether ``request`` begins the conversation of ``state``'s run again (no model answer
    in it) with a new user message after the first that quotes the text answer that ended the
    run (:attr:`EndpointRun.ending_words`, spacing aside), less than ``window_ns`` after it,
    under the instructions that answer came to: the agent's own reply to its answer, on the
    run's first messages alone (PraisonAI's self-reflection: "Reflect on your previous
    response: '<the answer>'", then its regeneration with its tools). It goes on in the run,
    or gets its stop if the run is over by its budget or a stop. Another invocation that begins
    as the run began holds no quote of its answer after its first message."""
    quote = state.ending_words
    return quote is not None and request.last_is_user and not request.kept \
        and request.last_answer is None and 0 <= now_ns - state.last_end_ns < window_ns \
        and _said_digest(request.instructions) == state.ending_prompt \
        and any(quote in " ".join(text.split()) for text in request.said[1:MAX_SIDE_SAID])


def goes_on_in_conversation(state: EndpointRun, request: Request) -> bool:
    """Whether ``request``, a new user message in the conversation of ``state``'s run, goes on
    in that run because its budget covers the whole conversation (``budget_per:
    conversation``): the conversation sent whole, longer than the run's was (another
    invocation that begins as it began is shorter: the next run), or one the server keeps (by
    ``previous_response_id`` or ``conversation``: its length is not read). Its nudges
    ("continue", the task again) and a person's next question alike: one budget for all."""
    return state.per_conversation and request.last_is_user \
        and (request.kept or request.messages > state.messages)


def replied_at_once(state: EndpointRun, now_ns: int) -> bool:
    """The endpoint answers ``state``'s run's request that :func:`follows_at_once` with its
    stop at ``now_ns``: the next reply at once is timed from this answer. False when that
    request is one too many (:data:`MAX_AT_ONCE_REPLIES`): it gets the error."""
    state.last_end_ns = max(state.last_end_ns, now_ns)
    state.replies += 1
    return state.replies <= MAX_AT_ONCE_REPLIES


def asks_again(state: EndpointRun, request: Request) -> bool:
    """Whether ``request``, which goes on from ``state``'s stop answer, carries nothing after
    it (no user message, no tool result: the agent asks its model to go on from its own
    answer, as tiny-agents does once after a text answer that followed tool results): it gets
    the stop answer again, not the error (it did not reject it), up to
    :data:`MAX_AT_ONCE_REPLIES` times a run."""
    if request.last_is_user or request.results or request.said or request.kept:
        return False
    state.replies += 1
    return state.replies <= MAX_AT_ONCE_REPLIES


def _stop_tokens(request: Request) -> tuple[str, ...]:
    """What ``request`` may go on from a stop answer by: its last answer's digest, the id of
    the response it continues, the id of the conversation the server keeps."""
    tokens: list[str] = []
    if request.last_answer is not None and (digest := answer_digest(request.last_answer)):
        tokens.append(digest)
    if request.previous_response_id is not None:
        tokens.append(request.previous_response_id)
    if request.anchor.startswith(CONVERSATION_ANCHOR):
        tokens.append(request.anchor)
    return tuple(tokens)


def goes_on_from_aside(state: EndpointRun, request: Request) -> bool:
    """Whether ``request`` goes on from the answer to ``state``'s latest request aside: a new
    user message after its last model answer quotes that answer (spacing aside), as an agent
    that compacts its context sends it — its history replaced by the summary it asked the
    model for (Codex: "Another language model started to solve this problem and produced a
    summary ..."), no tool results, shorter than its conversation was. It is still the run's,
    not the next run's, unless the run is over by its final request or a stop. A request no
    shorter (a person who quotes the answer in their next message, the conversation sent whole;
    another invocation whose first message holds that answer) or whose length is not read (a
    conversation the server keeps) is not: the quote alone does not tell it."""
    aside = state.aside
    if not aside or not request.last_is_user or state.final_used or state.stop is not None \
            or request.kept or request.messages >= state.messages:
        return False
    return any(aside in " ".join(text.split()) for text in request.said)


def _over(state: EndpointRun, ended: Callable[[str], bool]) -> bool:
    """Whether a run is over for a new user message: its final request went upstream, the
    endpoint answered it with a stop, its latest answer ended it, or it has ended."""
    return state.final_used or state.stop is not None or state.answered_last \
        or ended(state.key)


@cache
def _hashing() -> tuple[Callable[[Any], str], Callable[[str], int]]:
    """The conventions' ``canonical_arguments`` and ``stable_hash``, loaded at the first record
    that needs them, not with the endpoint (an import statement at each record cost 1-2 µs)."""
    from watchdog.core.spans.conventions import canonical_arguments, stable_hash

    return canonical_arguments, stable_hash


def is_side(state: EndpointRun, request: Request) -> bool:
    """Whether ``request`` is a side request of ``state``'s run: it offers no tools and begins
    with another message than the run's conversation (:attr:`EndpointRun.task`; it quoted
    that), or it is a request aside (:func:`aside_of`). It answers none of the run's tool
    calls, and its answer is not the run's."""
    return (state.task is not None and not request.has_tools and not request.results
            and _said_digest(request.anchor_text) != state.task) or aside_of(state, request)


def aside_of(state: EndpointRun, request: Request) -> bool:
    """Whether ``request`` is a request aside of ``state``'s run, steered as none (no
    countdown, its tools left as they are): it quotes the run's latest answer
    (:func:`quotes_answer`) or its history (:func:`recaps`)."""
    return quotes_answer(state, request) or recaps(state, request)


def recaps(state: EndpointRun, request: Request) -> bool:
    """Whether ``request`` is a request aside that quoted the history of ``state``'s run
    (:meth:`ModelBook._recapped`): a conversation's first request, no model answer in it, no
    tool results, whose first message is one such a request had."""
    return bool(state.asides) and not request.results and request.last_answer is None \
        and hash(request.anchor_text) in state.asides


def quotes_history(state: EndpointRun, said: str, instructions: int) -> bool:
    """Whether a conversation's first request, its messages' words ``said`` (spacing aside)
    under instructions of the hash ``instructions``, quotes the history of ``state``'s run
    (:attr:`EndpointRun.history`): the first message of its latest request that carried
    tool results (or the answer of the run's latest request aside, the summary its history
    went on from: :attr:`EndpointRun.recapped`), and the latest result it carried or the
    text argument of the call that result answered (the Cline CLI writes its session out
    without the tools' output; before any result, the text argument of the last call handed
    over), under other instructions than the run's (under the same it is the agent's next
    task, handed that work)."""
    history, recapped = state.history, state.recapped
    return history is not None and history[3] != instructions \
        and (history[0] in said or (recapped is not None and recapped in said)) \
        and ((bool(history[1]) and history[1] in said) or (bool(history[2])
                                                           and history[2] in said))


def quotes_answer(state: EndpointRun, request: Request) -> bool:
    """Whether ``request`` is a side request of ``state``'s run, whose agent acts in text: a
    conversation's first request (no model answer in it, no tool results) that offers no
    tools and quotes the run's latest answer (:attr:`EndpointRun.quote`), spacing aside,
    under other instructions than the run's (:attr:`EndpointRun.prompt`: one under the same
    is the agent's next task, which may quote that answer); or one that quoted it when it
    came (:attr:`EndpointRun.quoted_by`), its own answer read after the run's next one (gptme's
    title, sent by a thread of its own while the agent's next request is with the model). No
    request of the run's own conversation is: each carries the model's answers."""
    if request.has_tools or request.results or request.last_answer is not None:
        return False
    if hash(request.anchor_text) in state.quoted_by:  # (it quoted the answer latest then)
        return True
    return state.quote is not None and _said_digest(request.instructions) != state.prompt \
        and state.quote in " ".join(" ".join(said_of(state, request)[:MAX_SIDE_SAID]).split())


def said_of(state: EndpointRun, request: Request) -> Sequence[str]:
    """What ``request`` says after the model's last answer, as ``state``'s run reads it: for a
    prompt grown by the run's latest answer (:attr:`EndpointRun.heard`), what follows that
    answer in it; else what the request says after its last answer (:attr:`Request.said`)."""
    heard = state.heard
    if heard is not None and heard[0] == hash(request.anchor_text):
        return heard[1]
    return request.said


def _remember(index: OrderedDict[str, str], session: str, key: str) -> None:
    index[session] = key
    index.move_to_end(session)
    while len(index) > MAX_CONVERSATIONS:
        index.popitem(last=False)


def _lines(text: str, limit: int = MAX_QUOTE_CHARS) -> str:
    """A message's lines, spacing within each aside and blank ones dropped, at most ``limit``
    chars of them (the form :func:`_quotes` compares); cut there, it ends in :data:`_CUT`."""
    kept: list[str] = []
    size, cut = 0, len(text) > 4 * limit
    for line in text[:4 * limit].splitlines():
        if words := line.split():
            kept.append(" ".join(words))
            size += len(kept[-1]) + 1
            if size > limit:
                cut = True
                break
    lines = "\n".join(kept)
    return lines[:limit] + _CUT if cut else lines


def _side_lines(said: Sequence[str], each: int = 2 * MAX_QUOTE_CHARS) -> tuple[str, ...]:
    """A request's messages (:func:`_lines`), each at most ``each`` chars (a task's, a side
    request's quote of it and the prompt around it), twice :data:`MAX_QUOTE_CHARS` in all."""
    kept: list[str] = []
    left = 2 * MAX_QUOTE_CHARS
    for text in said:
        if left <= 0:
            break
        kept.append(_lines(text, min(left, each)))
        left -= len(kept[-1]) + 1
    return tuple(kept)


def _quotes(message: str, task: str | None) -> bool:
    """Whether ``message`` (:func:`_lines`) quotes ``task`` (a message of a conversation's
    first request, the same) within a prompt of its own: on lines of their own, with more
    around them (a title request that wraps the task in its instruction, as Crush's does). A
    message that is the task alone asks it, it quotes nothing; a task cut short is quoted by
    its start."""
    if not task or message == task:
        return False
    if task.endswith(_CUT):
        return f"\n{task[:-1]}" in f"\n{message}"
    return f"\n{task}\n" in f"\n{message}\n"


def _whole(text: str) -> tuple[str, int, str]:
    """A message's lines (:func:`_lines`), all of them, their length and digest."""
    lines = _lines(text, len(text) + 1)
    return lines, len(lines), hashlib.sha256(lines.encode("utf-8", "surrogatepass")).hexdigest()


def _quotes_whole(said: Sequence[str], task: str, whole: tuple[int, str] | None) -> bool:
    """Whether a message of ``said`` quotes the task cut short to ``task`` (:func:`_lines`)
    whole (``whole``: its lines' length and digest) on lines of their own, not only its start
    (a request that begins as a long task did, a preamble, and goes on with another). A task
    not cut: True (:func:`_quotes` read it whole)."""
    if whole is None:
        return True
    size, digest = whole
    start = task[:-1]
    for text in said[:MAX_SIDE_SAID]:
        lines = f"\n{_whole(text)[0]}\n"
        at, tries = lines.find(f"\n{start}"), MAX_SIDE_SAID  # (bounded: a start repeated)
        while at >= 0 and tries:
            tries -= 1
            quoted = lines[at + 1:at + 1 + size]
            if lines[at + 1 + size:at + 2 + size] == "\n" and hashlib.sha256(
                    quoted.encode("utf-8", "surrogatepass")).hexdigest() == digest:
                return True
            at = lines.find(f"\n{start}", at + 1)
    return False


def _words(text: str) -> str:
    """A text's first words, spacing aside, at most MAX_ASIDE_CHARS (its start read only)."""
    return " ".join(text[:4 * MAX_ASIDE_CHARS].split())[:MAX_ASIDE_CHARS]


def _action(call: ToolCall | None) -> str:
    """The longest text argument of ``call`` (a string value of its arguments' object, or
    within a list there: a command it ran), its words (:func:`_words`), when at least
    MIN_HANDED_TASK_CHARS long; else ""."""
    if call is None or len(call.arguments) > MAX_ACTION_CHARS:
        return ""
    try:
        arguments = json.loads(call.arguments)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(arguments, dict):
        return ""
    texts = [text for value in list(arguments.values())[:MAX_SIDE_SAID]
             for text in (value[:MAX_SIDE_SAID] if isinstance(value, list) else [value])
             if isinstance(text, str)]
    longest = max(texts, key=len, default="")
    return _words(longest) if len(longest) >= MIN_HANDED_TASK_CHARS else ""


def _said_digest(text: str) -> str:
    """What a message said, spacing aside (a side request quotes the task as it was sent)."""
    return hashlib.sha256(" ".join(text.split()).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _result_digest(result: ToolResult) -> str:
    """A tool result's call id and text, spacing aside in the text: what a history rewritten
    after a refusal sends again (:attr:`EndpointRun.refused`), of a fixed size."""
    return _said_digest(f"{result.call_id}\0{result.content}")


def _digest(api: str, agent: str | None, anchor: str) -> str:
    """A conversation's anchor: its first user message, of one agent on one API."""
    return hashlib.sha256("\0".join((api, agent or "", anchor)).encode(
        "utf-8", "surrogatepass")).hexdigest()[:32]


def _said_result(call: ToolCall, said: Sequence[str], calls: int) -> ToolResult | None:
    """A call's result as an agent replays it in plain text: the text after the last answer
    that names the call's id, else all of that text when this was the only call handed over;
    None when the request carries none."""
    if len(call.call_id) >= 4:
        for text in said:
            if call.call_id in text:  # "Call id: <id>\nError: ...": judged after the id
                after = text.split(call.call_id, 1)[1]
                return ToolResult(call.call_id, text, looks_failed(text) or looks_failed(after))
    if calls == 1 and any(text.strip() for text in said):
        text = "\n".join(said)
        return ToolResult(call.call_id, text, looks_failed(text)
                          or looks_failed(_HEADING.sub("", text, count=1)))
    return None

