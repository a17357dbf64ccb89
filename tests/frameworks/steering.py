"""Shared expectations of the steering tests (DESIGN §8): what the model must have received.

Every adapter is driven against the scripted model server (:mod:`tests.frameworks.fakellm`),
whose recorded request bodies are what the model really saw; nothing here waits for a directive.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from tests.frameworks import fakellm
from tests.frameworks.fakellm import Step
from tests.harness import RunningServer, run_detail, wait_until

LATENCIES = [0.0, 0.02, 0.3]  # seconds per model response
LATENCY_IDS = ["0ms", "20ms", "300ms"]
REPORT = ("## Task\nFind the file.\n\n## Completed Work\nSearched.\n\n## Key Findings\n"
          "/srv/a.txt\n\n## Not Started / Remaining\nNothing.")
STOP_MARKER = "This run is being stopped"
LEFT = re.compile(r"\[budget: (\d+) of (\d+) tool calls left")
GRACE_LEFT = re.compile(r"\[grace: (\d+) tool calls? left")


def instructions(body: dict[str, Any]) -> str:
    """The system/developer text of a chat-completions or responses request body."""
    texts: list[str] = []
    if isinstance(body.get("instructions"), str):
        texts.append(body["instructions"])
    for message in body.get("messages") or body.get("input") or []:
        if isinstance(message, dict) and message.get("role") in ("system", "developer"):
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(str(part.get("text", "")) for part in content
                                   if isinstance(part, dict))
            texts.append(str(content))
    return "\n".join(texts)


def user_text(body: dict[str, Any]) -> str:
    """Everything the request carries in user messages (control text must never be there)."""
    out: list[str] = []
    for message in body.get("messages") or body.get("input") or []:
        if isinstance(message, dict) and message.get("role") == "user":
            out.append(json.dumps(message.get("content")))
    return "\n".join(out)


def offers_tools(body: dict[str, Any]) -> bool:
    return bool(body.get("tools"))


def searching(answer_without_tools: str = REPORT) -> fakellm.Script:
    """Search with new terms on every request that offers tools; the report when none."""
    return fakellm.looping("search", lambda i: {"q": f"term {i}"}, answer_without_tools)


def cycling(answer_without_tools: str = REPORT) -> fakellm.Script:
    """``list`` then ``read`` with the same arguments, round and round (a tool cycle)."""
    def pick(index: int, body: dict[str, Any]) -> Step:
        if not body.get("tools"):
            return fakellm.answer(answer_without_tools)
        return fakellm.call("list", dir="/srv") if index % 2 == 0 else fakellm.call(
            "read", path="/srv/a.txt")
    return pick


def failing(answer_without_tools: str = REPORT) -> fakellm.Script:
    """Fetch the same URL on every request (the tool fails the same way each time)."""
    return fakellm.looping("fetch", lambda i: {"url": "http://backend/data"},
                           answer_without_tools)


def check_countdown(requests: Sequence[dict[str, Any]], tools_before: Callable[[int], int],
                    limit: int) -> None:
    """At every request with three or fewer tool calls left, the instructions say exactly how
    many are left; none says a wrong number."""
    for index, body in enumerate(requests):
        left = limit - tools_before(index)
        said = [(int(n), int(m)) for n, m in LEFT.findall(instructions(body))]
        if left <= 3:
            assert (left, limit) in said, (index, left, instructions(body)[:300])
        assert all(n == left for n, _m in said), (index, left, said)


GRACE_STOP = "This run is being stopped: [grace: the 2 tool calls allowed after the wind-down"
CYCLE_LOOP = "Loop: the same sequence of tool calls 4 times in a row"


def check_grace(requests: Sequence[dict[str, Any]], ran: int) -> None:
    """tool-cycle fires on the 8th call (list/read four times), so the very next request winds
    down, with the rule's grace of 2 tool calls as a hard cap: the model sees the true number
    left ("2", "1", then "0"), 10 tools ran, and the 11th request is the one final request (no
    tools) asking for the report, before the sidecar would have had to escalate."""
    assert ran == 10 and len(requests) == 11, (ran, len(requests))
    assert [CYCLE_LOOP in instructions(body) for body in requests[:9]] == [False] * 8 + [True]
    grace = [GRACE_LEFT.findall(instructions(body)) for body in requests]
    assert grace == [[]] * 8 + [["2"], ["1"], ["0"]], grace  # "0 … report now" at the end
    check_final(requests)
    assert GRACE_STOP in instructions(requests[-1])
    assert "Grace exceeded" not in "".join(instructions(body) for body in requests)


def check_final(requests: Sequence[dict[str, Any]], marker: str = STOP_MARKER) -> None:
    """Exactly one request offers no tools: the last, asking for the report (as a system or
    developer instruction, never in a user message)."""
    without = [i for i, body in enumerate(requests) if not offers_tools(body)]
    assert without == [len(requests) - 1], without
    last = requests[-1]
    assert marker in instructions(last), instructions(last)[:500]
    assert "## Key Findings" in instructions(last)
    for body in requests:
        assert STOP_MARKER not in user_text(body) and "[budget" not in user_text(body)


def ended(sidecar: RunningServer, run_id: str, flush: Callable[[], object]) -> dict[str, Any]:
    """The sidecar's record of the run once it has ended (the OTLP export ends it)."""
    flush()
    detail: dict[str, Any] = wait_until(
        lambda: (d := run_detail(sidecar.api, run_id)) and d["state"] == "ended" and d,
        what=f"run {run_id} to end")
    return detail


# -- an agent's own step limit declared as the pack's model-call budget ----------------------------

CALLS_LEFT = re.compile(r"\[budget: (\d+) of (\d+) model calls left")


def documented_pack(file: str) -> str:
    """The text of docs/agents.md's rule pack ``<!-- snippet: rule-pack file=FILE -->`` (also
    checked by ``watchdog rules check`` in tests/test_docs.py): a test runs it as pasted."""
    from tests.test_docs import DOCS, parse

    [block] = [block for block in parse(DOCS / "agents.md")
               if block.kind == "rule-pack" and block.options.get("file") == file]
    return block.text


def check_last_model_call_final(requests: Sequence[dict[str, Any]], limit: int,
                                answered: bool = True) -> None:
    """A model-call budget of ``limit`` (``max_iterations``) the agent's own limit: ``limit``
    requests, the one with 2 calls left told so (``budget-iterations-countdown``, the true
    count), none before it told anything, and the last the run's final request: tools
    withdrawn (``tool_choice: none``, or none offered), its instructions saying it is the last.
    ``answered``: every request but the last offered tools."""
    assert len(requests) == limit, len(requests)
    told = [[(int(n), int(m)) for n, m in CALLS_LEFT.findall(instructions(body))]
            for body in requests]
    assert told == [[]] * (limit - 2) + [[(2, limit)], []], told
    assert f"this is the last of {limit}" in instructions(requests[-1])
    last = requests[-1]
    assert not offers_tools(last) or last.get("tool_choice") == "none", last.get("tool_choice")
    if answered:
        assert all(offers_tools(body) and body.get("tool_choice") != "none"
                   for body in requests[:-1])
    for body in requests:
        assert "[budget" not in user_text(body)


def check_ended_at_own_limit(run: dict[str, Any], limit: int, report: str) -> None:
    """The run the agent's limit bounded: ``limit`` model calls, one tool call each but the
    last, ended ``tool_limit_reached`` at the budget, the report its answer."""
    assert (run["state"], run["iterations"], run["tool_calls"], run["terminal_state"],
            run["terminal_reason"], run["has_final_answer"], run["final_output"]) == (
        "ended", limit, limit - 1, "tool_limit_reached", "budget", True, report), run
