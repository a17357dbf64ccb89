"""How an agent that acts in its answers' text acts: the actions an answer hands over, and
the answer it gives by one. Pure: text in, calls out.

An agent acts in text when its rule pack's budgets entry says ``actions: text`` or ``code``, or
when its instructions carry a template that says so (:data:`~watchdog.core.rules.model.
TEXT_TEMPLATES`): each answer is an action, read by the entry's ``action_pattern``,
``action_key``, ``answer_tools`` and ``answer_key`` (:class:`~watchdog.core.rules.model.Budget`).
Two paths read answers so, the same way: the model endpoint's booking
(:func:`watchdog.core.model.book.text_action`: the answers it relays), and the core's step
(:meth:`watchdog.core.step.Core.apply`: what a model call's span says the model answered,
:func:`acts_on_answer`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import cast

from watchdog.core.model.wire import ToolCall, random_hex
from watchdog.core.rules.model import ACTIONS_CODE, Budget

# An answer whose text the agent acts on hands over a call of this tool (text_action): the
# tool's name in the run's counts and reports, its call ids this prefix and 64 random bits
TEXT_ACTION = "text_action"
TEXT_ACTION_ID = "text_action:"
MAX_ACTION_CHARS = 16_384  # of an action's text, hashed as its arguments
MAX_JSON_STARTS = 64  # braces of an answer tried that begin no JSON object (an action_key's)
MAX_PENDING_CALLS = 128  # tool calls of one response waiting for their results
_FENCED = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)  # a fenced block's content


def read_actions(text: str, *, in_code: bool = False, pattern: str | None = None,
                 key: str | None = None, answer_tools: tuple[str, ...] = ()) -> list[ToolCall]:
    """The actions an answer's ``text`` hands over: a call of :data:`TEXT_ACTION` whose
    arguments are the answer's fenced code blocks (```` ``` ````), else its whole text, spacing
    aside (so the same command under other reasoning is the same call: the loop rules see it
    repeat) — or, given the actions' ``pattern`` (searched in the answer's first
    MAX_ACTION_CHARS), what it matches: its groups, else the match (a ReAct agent's
    ``Action:`` and ``Action Input:``, its ``Thought:`` aside); an answer it does not match
    holds no action (the agent's ``Final Answer:``); a match whose first group names one of
    ``answer_tools`` is a call of that tool, its other groups the answer — or, given the
    ``key`` that names an action's tool, a call per JSON object in the answer that has that
    key (:func:`key_actions`). ``in_code``: the agent acts by the code blocks in its answers
    alone, an answer with none its answer."""
    if key:
        return key_actions(text, key, pattern)
    search = action_search(pattern) if pattern else None
    if search is not None:
        found = search(text[:MAX_ACTION_CHARS])
        if found is None:
            return []
        if len(found) > 1 and found[1] in answer_tools:  # (its answer's: its first group)
            rest = "\n".join(part.strip() for part in found[2:] if part and part.strip())
            return [ToolCall(TEXT_ACTION_ID + random_hex(64), found[1],
                             json.dumps({"answer": rest[:MAX_ACTION_CHARS]}))]
        parts = [part for part in found[1:] if part] or [found[0] or ""]
    else:
        blocks = _FENCED.findall(text)
        if in_code and not blocks:
            return []
        parts = blocks or [text]
    action = " ".join(" ".join(parts).split())
    return [ToolCall(TEXT_ACTION_ID + random_hex(64), TEXT_ACTION,
                     json.dumps({"action": action[:MAX_ACTION_CHARS]}))]


def acts_on_answer(entry: Budget, text: str) -> bool:
    """Whether a whole answer's ``text`` holds an action its agent runs, by its rule pack's
    budgets entry of an agent that acts in text (``entry``), as the model endpoint reads the
    answers it relays: an answer that gives the agent's answer (its ``answer_key``'s object,
    or its own finishing action) holds none; with an ``answer_key``, an answer of neither is
    a step (the agent asks the model again). What a span of the agent's model call says the
    model answered is read so (:meth:`~watchdog.core.step.Core.apply` marks it ``acted_on``:
    the run goes on)."""
    if not text.strip():
        return False
    if entry.answer_key is not None and json_answer(text, entry.answer_key) is not None:
        return False
    acted = read_actions(text, in_code=entry.actions == ACTIONS_CODE,
                         pattern=entry.action_pattern, key=entry.action_key,
                         answer_tools=entry.answer_tools)
    if not acted:
        return entry.answer_key is not None
    return text_answer(acted, entry.answer_tools, entry.action_key) is None


def json_answer(text: str, key: str) -> str | None:
    """The answer an agent gives by a JSON object in its answer's ``text`` (a rule pack's
    ``answer_key``: KaibanJS's ``{"finalAnswer": "..."}``): the first top-level object, fenced
    or not, in the text's first MAX_ACTION_CHARS, that has ``key``: its value, the text when
    it is one, else as JSON; None: none has it. Strict JSON alone, as :func:`json_actions`
    reads, in time linear in the text."""
    text = text[:MAX_ACTION_CHARS]
    decoder, at, misses = json.JSONDecoder(), 0, 0
    while misses < MAX_JSON_STARTS:
        start = text.find("{", at)
        if start < 0:
            break
        try:
            value, at = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            at, misses = start + 1, misses + 1
            continue
        if isinstance(value, dict) and key in value:
            found = value[key]
            return found if isinstance(found, str) else json.dumps(found, sort_keys=True)
    return None


def key_actions(text: str, key: str, pattern: str | None) -> list[ToolCall]:
    """The actions in an answer's ``text`` of an agent that names its tools by JSON objects
    (an ``action_key``: ``key``; :func:`json_actions`), read in what its ``action_pattern``
    (``pattern``) matches alone when it has one (its groups, else the match: Qwen-Agent's
    ``<tool_call>`` blocks, the prose's objects none), none when that does not match; in the
    text's first MAX_ACTION_CHARS."""
    text = text[:MAX_ACTION_CHARS]
    search = action_search(pattern) if pattern else None
    if search is not None:
        where = search(text)
        if where is None:
            return []
        text = "\n".join([part for part in where[1:] if part] or [where[0] or ""])
    return json_actions(text, key)


def json_actions(text: str, key: str) -> list[ToolCall]:
    """The actions in ``text`` when an agent asks for its tools by JSON objects in its
    answers (a rule pack's ``action_key``: Langroid's ``{"request": "<tool>", ...}``): each
    top-level JSON object in it, fenced or not, whose ``key`` is a string, in order, is a call
    of the tool it names, its arguments the object (keys sorted: the same object is the same
    call, the loop rules see it repeat). Strict JSON alone (an object the agent would repair,
    single quotes or a trailing comma, is none); at most MAX_PENDING_CALLS, and the search
    tries at most MAX_JSON_STARTS opening braces that begin no JSON object (prose's braces),
    so a long answer costs time linear in it."""
    decoder, at, misses = json.JSONDecoder(), 0, 0
    found: list[ToolCall] = []
    while len(found) < MAX_PENDING_CALLS and misses < MAX_JSON_STARTS:
        start = text.find("{", at)
        if start < 0:
            break
        try:
            value, at = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            at, misses = start + 1, misses + 1
            continue
        name = value.get(key) if isinstance(value, dict) else None
        if isinstance(name, str) and name:
            found.append(ToolCall(TEXT_ACTION_ID + random_hex(64), name[:200],
                                  json.dumps(value, sort_keys=True)[:MAX_ACTION_CHARS]))
    return found


def text_answer(acted: Sequence[ToolCall], answer_tools: Sequence[str],
                action_key: str | None) -> str | None:
    """The answer a text answer gives by the agent's own finishing action (a rule pack's
    ``answer_tools``: Langroid's ``{"request": "done_tool", "content": "..."}``) among its
    actions (:func:`text_action`): the first one's content — a JSON object's fields but
    ``action_key``, the text when they hold only a text (an action_pattern's: its groups
    after the first) — else None (no such action). The actions beside it are none the
    agent runs: its task ends at it (Langroid runs none of them)."""
    found = next((call for call in acted if call.name in answer_tools), None)
    if found is None:
        return None
    try:
        value = json.loads(found.arguments)
    except (ValueError, RecursionError):
        return found.arguments
    if isinstance(value, dict):
        value.pop(action_key or "", None)
        if len(value) == 1:
            (only,) = value.values()
            if isinstance(only, str):
                return only
        if not value:
            return ""
    return json.dumps(value, sort_keys=True)


@lru_cache(maxsize=64)
def action_search(pattern: str) -> Callable[[str], Sequence[str | None] | None] | None:
    """A rule pack's ``action_pattern``, compiled: what it finds in a text, the match then
    each group's (None: nothing found); searched in time linear in the text where the
    compiled module is built (:func:`~watchdog.core.spans.native.searcher`: a model's answer
    cannot hold the endpoint up), else by Python's ``re``. None: not a regular expression
    (the pack's reader refused it)."""
    from watchdog.core.spans.native import searcher

    try:
        compiled = searcher(pattern)
        python = re.compile(pattern) if compiled is None else None
    except (ValueError, re.error):
        return None
    if compiled is not None:
        return cast(Callable[[str], Sequence[str | None] | None], compiled.search)
    assert python is not None

    def search(text: str) -> Sequence[str | None] | None:
        found = python.search(text)
        return None if found is None else (found.group(0), *found.groups())

    return search
