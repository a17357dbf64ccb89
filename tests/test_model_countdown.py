"""A budget's countdown is what its rule pack declares (``countdown:`` on a rule), at the model
endpoint, on both relays: a pack that counts a budget of 8 tool calls down from 5 left has the
true note at every request from 5 left on and none before (the compiled relay's requests sent
on ahead alike), and a wind-down of the user's own whose name or message speaks of a budget
(``token-budget-guard``) is no countdown: its message reaches the model."""

from __future__ import annotations

import asyncio
import json
import random
import re
import sqlite3
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import openai
import pytest

from tests.frameworks.fakellm import FakeLLM, looping
from tests.harness import RunningServer, running_server, sidecar_config, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)
from watchdog.shell.directives.store import DB_FILE
from watchdog.shell.model.native import NativeEndpoint
from watchdog.shell.state import persist
from watchdog.shell.state.store import StoreWriteError, codecs

KEY = "sk-countdown-0123456789"
LEFT = re.compile(r"\[budget: (\d+ of \d+) tool calls left")
TOOLS = [{"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
GUARD = "[budget guard: 2 tool calls in, the token allowance runs low — summarise your findings]"

# On top of the default pack: its budget-countdown counts down from 5 left (the example of
# docs/rules.md), and a user's own wind-down that speaks of a budget but counts none down.
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: countdown-from-five
budgets:
  - agents: ["counted", "guarded"]
    max_tool_calls: 8
  - agents: ["tokened"]
    max_tokens: 1500
  - agents: ["priced"]
    max_cost_usd: 0.00025
rules:
  - name: budget-countdown
    countdown: tool_calls
    when: >-
      !run.ended && has(run.budget.remaining_tool_calls)
      && run.budget.remaining_tool_calls <= 5 && run.budget.remaining_tool_calls > 1
    action: wind_down
    severity: warning
    message: >-
      [budget: ${run.budget.remaining_tool_calls} of ${run.budget.max_tool_calls}
      tool calls left — wrap up soon]
    repeat: on_change
  - name: token-budget-guard
    agents: ["guarded"]
    when: "!run.ended && run.tool_calls >= 2"
    action: wind_down
    severity: warning
    message: >-
      [budget guard: ${run.tool_calls} tool calls in, the token allowance runs low —
      summarise your findings]
"""
# The same pack as one written before rules declared their countdown: its budget-countdown,
# which replaces the default pack's by name, keeps the countdown of the rule it replaces
PACKS = {"declared": PACK, "copied": PACK.replace("    countdown: tool_calls\n", "")}
# What each request of an agent with 8 tool calls, one per answer, is told: nothing at 8, 7
# and 6 left; the true count from 5 left; the ninth request is the final one (tools withdrawn)
COUNTED = [None, None, None, "5 of 8", "4 of 8", "3 of 8", "2 of 8", "1 of 8"]


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture(params=list(PACKS))
def pack(request: pytest.FixtureRequest) -> str:
    """The pack's text: its budget-countdown declaring ``countdown: tool_calls``, or copied
    from a pack of before the key (it keeps the countdown of the default pack's rule)."""
    text: str = PACKS[request.param]
    return text


@pytest.fixture
def sidecar(tmp_path: Path, llm: FakeLLM, pack: str) -> Iterator[RunningServer]:
    path = tmp_path / "countdown.yaml"
    path.write_text(pack)
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, model_agent_name="pod-agent",
                            rules=(str(path),))
    with running_server(config) as server:
        yield server


def agent_loop(sidecar: RunningServer, model: str, agent: str,
               between: Callable[[], None] | None = None) -> int:
    """A real OpenAI client's tool loop under ``agent`` (each result a new one), until an
    answer with no tool call; ``between``: called before each request but the first. The tool
    calls it ran."""
    client = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                           default_headers={"X-Watchdog-Agent": agent})
    messages: list[Any] = [{"role": "system", "content": "You are terse."},
                           {"role": "user", "content": f"find it ({model})"}]
    ran = 0
    for _ in range(12):
        if ran and between is not None:
            between()
        message = client.chat.completions.create(model=model, messages=messages,
                                                 tools=TOOLS).choices[0].message
        if not message.tool_calls:
            return ran
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [call.model_dump() for call in message.tool_calls]})
        for call in message.tool_calls:
            ran += 1
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": f"found {ran} for {call.function.arguments}"})
    raise AssertionError("no final answer")


def notes(llm: FakeLLM, model: str) -> tuple[list[str | None], list[dict[str, Any]]]:
    """The countdown each request the upstream saw carried (None: none), and the requests."""
    requests = llm.requests(model)
    return [found.group(1) if (found := LEFT.search(request["messages"][0]["content"]))
            else None for request in requests], requests


def unrecorded_count(sidecar: RunningServer) -> float:
    """The model requests the endpoint took unrecorded so far (its metrics, as scraped)."""
    name = 'agent_watchdog_model_unrecorded_total{stage="request"} '
    with urllib.request.urlopen(sidecar.metrics + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(float(line[len(name):]) for line in text.splitlines() if line.startswith(name))


def native_of(sidecar: RunningServer) -> NativeEndpoint:
    native = sidecar.server.native
    assert native is not None
    return native


@pytest.mark.parametrize("latency", [0.0, 0.02, 0.15])
def test_the_countdown_starts_where_the_pack_says(sidecar: RunningServer, llm: FakeLLM,
                                                   model_relay: str, latency: float) -> None:  # noqa: F811
    """A budget of 8 tool calls counted down from 5 left (``countdown: tool_calls`` on the
    pack's budget-countdown), at a model latency of 0, 20 and 150 ms: the upstream sees the
    true note at every request from 5 left on and none before, then the final request with the
    tools withdrawn; the agent runs 8 tools. An agent sending each request as soon as it has
    the answer, and one waiting until the call is booked (the compiled relay then sends its
    requests on ahead, the countdown's note spliced in from 5 left: none went bare, none was
    decided otherwise)."""
    native = native_of(sidecar) if model_relay == "native" else None
    for paced in (False, True):
        model = llm.script(f"counted-{paced}", looping(
            "search", lambda i: {"q": f"page {i}"}, answer_without_tools="REPORT"), delay=latency)
        between = None
        if paced and native is not None:
            before = sidecar.call(lambda: (native.continued, native.noted))

            def between() -> None:
                wait_until(lambda: sidecar.call(lambda: not native.pending
                                                and not native.ended), "booked")
        assert agent_loop(sidecar, model, "counted", between) == 8
        seen, requests = notes(llm, model)
        assert seen == [*COUNTED, None], seen
        assert [request.get("tool_choice") for request in requests] == [None] * 8 + ["none"]
        for request, left in zip(requests, range(8, 0, -1), strict=False):
            if left <= 5:  # (the endpoint's own note, once: not the rule's message again)
                assert request["messages"][0]["content"].count("[budget:") == 1
        if paced and native is not None:
            # (its 7 continuing requests before the final one went on ahead, the 5 from 5 left
            # with the countdown's note spliced in)
            wait_until(lambda: sidecar.call(lambda: (
                native.continued - before[0], native.noted - before[1])) == (7, 5),  # noqa: B023
                lambda: f"{native.continued - before[0]} continued, "  # noqa: B023
                        f"{native.noted - before[1]} countdowns ahead")  # noqa: B023
    if native is not None:
        assert sidecar.call(lambda: native.missed) == 0


def filling(sidecar: RunningServer, native: NativeEndpoint | None, fill: int | None,
            monkeypatch: pytest.MonkeyPatch, behind: bool = False) -> Callable[[], None]:
    """What an agent loop calls before each request but the first: waits, with ``native``,
    until the call before is booked (the compiled relay then sends the request on ahead), and
    before the request ``fill`` (from 0) the state's writes fail (a full disk) from then on;
    ``behind``: the state falls behind instead (writable, more activity waiting for the store
    than it takes: :class:`Overloaded`)."""
    service = sidecar.server.service
    assert service is not None
    sent = iter(range(1, 100))

    def full(*args: object, **kwargs: object) -> None:
        raise StoreWriteError("database or disk is full")

    async def refuse() -> None:
        assert service is not None
        if behind:  # (told at the core's next step, as when the activity waiting grows)
            monkeypatch.setattr(persist, "MAX_PENDING_ACTIVITY", 0)
            return
        monkeypatch.setattr(service.state.store, "write", full)
        monkeypatch.setattr(service.state.store, "save_sessions", full)
        # told once the store's writes under way are done, as a write that fails is: a
        # flush's write begun before, done after, would say the state is writable again
        await service.state.in_lane(lambda: None)
        service.state.failed(StoreWriteError("database or disk is full"))

    def between() -> None:
        if native is not None:
            wait_until(lambda: sidecar.call(lambda: not native.pending and not native.ended),
                       "booked")
        if next(sent) == fill:
            asyncio.run_coroutine_threadsafe(refuse(), sidecar.loop).result(timeout=30)

    if fill == 0:  # before the first request
        asyncio.run_coroutine_threadsafe(refuse(), sidecar.loop).result(timeout=30)
    return between


def writable_again(sidecar: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state's writes work again (:func:`filling`'s undone), told once the store's writes
    under way are done: a flush's failing write begun before would, after, say the state is
    unwritable again (the next run's requests unrecorded from its first on)."""
    service = sidecar.server.service
    assert service is not None

    async def written() -> None:
        assert service is not None
        monkeypatch.undo()
        await service.state.in_lane(lambda: None)
        service.state._written()

    asyncio.run_coroutine_threadsafe(written(), sidecar.loop).result(timeout=30)


@pytest.mark.parametrize("fill", [0, 1])
def test_a_run_never_recorded_is_stopped_at_its_packs_budget(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, fill: int) -> None:
    """The state cannot be written from the run's first request on (``fill`` 0), or from its
    second (1: the first was recorded): no request of the run is recorded, so the tracker
    never read its budget; the endpoint steers it by the rule pack's budget for its agent
    all the same, counts each request unrecorded, and stops it at 8 tool calls (the count
    told from 3 left, then the final request)."""
    service = sidecar.server.service
    assert service is not None
    native = native_of(sidecar) if model_relay == "native" else None
    unrecorded = unrecorded_count(sidecar)
    counted_down_unrecorded(sidecar, llm, f"never-recorded-{fill}", native, fill, monkeypatch)
    assert unrecorded_count(sidecar) - unrecorded == 9 - fill


def counted_down_unrecorded(sidecar: RunningServer, llm: FakeLLM, name: str,
                            native: NativeEndpoint | None, fill: int,
                            monkeypatch: pytest.MonkeyPatch, behind: bool = False,
                            latency: float = 0.0) -> None:
    """The agent ``counted`` (8 tool calls) in a loop whose state cannot be written (or is
    behind) from its request ``fill`` on: 8 tool calls, the count told from 3 left (the rules
    never saw the calls), then the final request (tools withdrawn)."""
    model = llm.script(name, looping("search", lambda i: {"q": f"page {i}"},
                                     answer_without_tools="REPORT"), delay=latency)
    between = filling(sidecar, native, fill, monkeypatch, behind)
    try:
        ran = agent_loop(sidecar, model, "counted", between)
    finally:
        writable_again(sidecar, monkeypatch)
    assert ran == 8
    seen, requests = notes(llm, model)
    assert seen == [None] * 5 + ["3 of 8", "2 of 8", "1 of 8", None], seen
    assert [request.get("tool_choice") for request in requests] == [None] * 8 + ["none"]


@pytest.mark.parametrize("behind", [False, True])
@pytest.mark.parametrize("latency", [0.0, 0.02, 0.15])
def test_a_run_whose_state_cannot_be_written_still_counts_down(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str, latency: float,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, behind: bool) -> None:
    """The state cannot be written (a full disk) from the run's third request on, before its
    countdown has started (the pack's, from 5 left): the calls go unrecorded, so the rules
    never see them and no countdown rule fires. The endpoint steers them by its own counts,
    and tells the count from 3 left, as while a traced run's spans are behind; then the final
    request, and no tool call past the 8. On the compiled relay nothing is sent on ahead while
    the state cannot be written (what it was told is taken back when the write fails), so
    no request is decided otherwise; paced or not, at 0, 20 and 150 ms. The same while the
    state is behind (``behind``: writable, but more waiting for the store than it takes)."""
    service = sidecar.server.service
    assert service is not None
    native = native_of(sidecar) if model_relay == "native" else None

    for paced in (False, True):
        counted_down_unrecorded(sidecar, llm, f"unwritable-{paced}-{behind}",
                                native if paced else None, 2, monkeypatch, behind, latency)
    if native is not None:
        assert sidecar.call(lambda: native.missed) == 0


def generated_runs(seed: int, count: int) -> list[tuple[str, int, int, int | None, bool]]:
    """``count`` runs drawn from ``seed``: each an agent of its own with a budget of tool calls
    (2 to 9), counted down from a number of its pack (2 to 6), the state unwritable from one
    of its requests on (or never), paced (each request once the call before is booked: the
    compiled relay sends it on ahead) or not."""
    draw = random.Random(seed)
    runs = []
    for number in range(count):
        budget = draw.randint(2, 9)
        fill = draw.choice([None, None, *range(1, budget + 1)])
        runs.append((f"generated-{number}", budget, draw.randint(2, 6), fill,
                     draw.random() < 0.7))
    return runs


GENERATED = generated_runs(20251130, 14)


def generated_pack(runs: list[tuple[str, int, int, int | None, bool]]) -> str:
    """Each generated run's budget and its own countdown rule (the default pack's switched
    off, its last call's kept)."""
    lines = ["apiVersion: agent-watchdog/v1", "kind: RulePack", "name: generated",
             "disable: [budget-countdown]", "budgets:"]
    for agent, budget, _, _, _ in runs:
        lines += [f"  - agents: [{agent}]", f"    max_tool_calls: {budget}"]
    lines.append("rules:")
    for agent, _, start, _, _ in runs:
        lines += [f"  - name: countdown-{agent}", f"    agents: [{agent}]",
                  "    countdown: tool_calls",
                  "    when: >-", "      !run.ended && has(run.budget.remaining_tool_calls)",
                  f"      && run.budget.remaining_tool_calls <= {start}",
                  "      && run.budget.remaining_tool_calls > 1",
                  "    action: wind_down", "    severity: warning",
                  '    message: "[budget: counting down]"', "    repeat: on_change"]
    return "\n".join(lines) + "\n"


def test_the_ahead_proof_and_the_loops_decision_agree_over_generated_runs(
        tmp_path: Path, llm: FakeLLM, model_relay: str,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A differential of what the compiled relay is told a run's next request gets (the
    proof, ``NativeEndpoint._bound_next``) and what the loop decides once it reads that
    request (``decide``, by the rules' count or, while the state cannot be written, by the
    book's): over generated runs (budgets, where the pack starts counting down, the state
    unwritable from some request on, paced or not), no request sent on ahead is decided
    otherwise, and on both relays each request carries the true count exactly when it should
    (from the pack's number while the rules see the calls; once the state cannot be written,
    as the countdown stood, else from 3 left), no tool call runs past the budget and the
    final request withdraws the tools."""
    path = tmp_path / "generated.yaml"
    path.write_text(generated_pack(GENERATED))
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, rules=(str(path),))
    with running_server(config) as server:
        service = server.server.service
        assert service is not None
        native = server.server.native if model_relay == "native" else None
        for agent, budget, start, fill, paced in GENERATED:
            model = llm.script(agent, looping("search", lambda i: {"q": f"page {i}"},
                                              answer_without_tools="REPORT"))
            between = filling(server, native if paced else None, fill, monkeypatch)
            try:
                ran = agent_loop(server, model, agent, between)
            finally:
                writable_again(server, monkeypatch)
            assert ran == budget, (agent, ran)
            seen, requests = notes(llm, model)
            expected: list[str | None] = []
            started = False
            for index, left in enumerate(range(budget, 0, -1)):
                recorded = fill is None or index < fill
                started = started or (recorded and left <= start)
                expected.append(f"{left} of {budget}" if started or left == 1
                                or (not recorded and left <= 3) else None)
            assert seen == [*expected, None], (agent, budget, start, fill, paced, seen)
            assert [request.get("tool_choice") for request in requests] == \
                [None] * budget + ["none"]
        if native is not None:
            assert server.call(lambda: native.missed) == 0
            assert server.call(lambda: native.continued) > 0  # (the proofs were put to use)


def test_a_users_budget_named_wind_down_reaches_the_model(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """``token-budget-guard``, a wind-down of the user's whose name and message speak of a
    budget but which declares no countdown, fired after 2 tool calls: the model reads its
    message at the next request, with no tool-call countdown in its place (8 allowed, 6 left:
    the pack counts down from 5)."""
    model = llm.script("guarded", looping("search", lambda i: {"q": f"page {i}"},
                                          answer_without_tools="REPORT"))
    assert agent_loop(sidecar, model, "guarded") == 8
    seen, requests = notes(llm, model)
    assert seen == [*COUNTED, None], seen
    told = [GUARD in request["messages"][0]["content"] for request in requests]
    assert told[:2] == [False, False] and all(told[2:8]), told
    assert "tool calls left" not in requests[2]["messages"][0]["content"]
    wait_until(lambda: any(d["rule"] == "token-budget-guard" and d["countdown"] is None
                           for d in directives(sidecar, "guarded")), "the guard's directive")


def test_a_reload_that_makes_a_wind_down_a_countdown_leaves_no_stale_count(
        tmp_path: Path, llm: FakeLLM) -> None:
    """The pack's budget-countdown first says ``countdown: none`` (its message is told as a
    wind-down's: 5, then 4 of 8 left); a rules reload makes it the tool-call countdown before
    the request at 3 left. From then each request carries the true count once: the rule's
    earlier wind-down, which quotes a count no longer true, is not told beside it."""
    path = tmp_path / "countdown.yaml"
    path.write_text(PACK.replace("countdown: tool_calls", "countdown: none"))
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, rules=(str(path),))
    model = llm.script("reloaded", looping("search", lambda i: {"q": f"page {i}"},
                                           answer_without_tools="REPORT"))
    with running_server(config) as server:
        sent = iter(range(1, 12))

        def between() -> None:
            if next(sent) == 5:  # (before the sixth request: 3 of 8 left)
                path.write_text(PACK)
                ok, message = asyncio.run_coroutine_threadsafe(
                    server.server.reload_rules(), server.loop).result(10)
                assert ok, message

        assert agent_loop(server, model, "counted", between) == 8
    seen, requests = notes(llm, model)
    assert seen == [*COUNTED, None], seen
    for request in requests[5:8]:
        assert request["messages"][0]["content"].count("[budget:") == 1, request["messages"][0]


def traced_loop(sidecar: RunningServer, model: str, agent: str, trace: str,
                task: str) -> list[Any]:
    """A real OpenAI client's tool loop under ``agent`` that sends ``traceparent`` (of the
    trace ``trace``) on each request, whose spans never come, until an answer with no tool
    call: its responses."""
    client = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                           default_headers={"X-Watchdog-Agent": agent,
                                            "traceparent": f"00-{trace}-00f067aa0ba902b7-01"})
    messages: list[Any] = [{"role": "system", "content": "You are terse."},
                           {"role": "user", "content": task}]
    responses = []
    for _ in range(40):
        response = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        responses.append(response)
        message = response.choices[0].message
        if not message.tool_calls:
            return responses
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [call.model_dump() for call in message.tool_calls]})
        messages += [{"role": "tool", "tool_call_id": call.id, "content": "found"}
                     for call in message.tool_calls]
    raise AssertionError("no final answer")


def test_a_traced_runs_countdown_does_not_wait_for_its_spans(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """A traced agent (``traceparent`` on each request) whose spans have not come: the rules
    have counted none of its tool calls, so no countdown rule has fired, yet the endpoint
    knows what is left. It counts down from 3 left, as the client SDK does while the sidecar
    does not answer (the pack's "from 5" needs the spans); the final request as before."""
    model = llm.script("traced", looping("search", lambda i: {"q": f"page {i}"},
                                         answer_without_tools="REPORT"))
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    traced_loop(sidecar, model, "counted", trace, "find it, traced")
    seen, requests = notes(llm, model)
    assert seen == [None] * 5 + ["3 of 8", "2 of 8", "1 of 8", None], seen
    assert requests[-1].get("tool_choice") == "none"


# what a note says is left of a budget in tokens or dollars
LEFT_OF = {"tokens": re.compile(r"\[budget: (\d+) of \d+ tokens left"),
           "dollars": re.compile(r"\[budget: USD ([0-9.]+) of [0-9.]+ left")}


@pytest.mark.parametrize(("agent", "limit"), [("tokened", 1500.0), ("priced", 0.00025)])
def test_a_traced_runs_token_and_dollar_countdowns_do_not_wait_for_its_spans(
        sidecar: RunningServer, llm: FakeLLM, agent: str, limit: float) -> None:
    """A traced agent (``traceparent`` on each request) whose spans have not come, with a
    budget of 1,500 tokens or of USD 0.00025: each call's usage is the endpoint's to count
    (and to price, from the response's model), at the request, as for a run with no trace.
    The model reads the true amount left at every request from a quarter left (the default
    pack's countdowns), and none before; at the budget the tools are withdrawn."""
    service = sidecar.server.service
    assert service is not None
    kind = "tokens" if agent == "tokened" else "dollars"
    model = llm.script("gpt-4o-mini", looping("search", lambda i: {"q": f"page {i}"},  # priced
                                                 answer_without_tools="REPORT"))
    trace = "5bf92f3577b34da6a3ce929d0e0e4737" if kind == "tokens" else \
        "6bf92f3577b34da6a3ce929d0e0e4738"
    used: list[float] = []
    for response in traced_loop(sidecar, model, agent, trace, f"find it, traced, in {kind}"):
        usage = response.usage
        assert usage is not None
        cost = service.pricer(response.model, None, usage.prompt_tokens,
                              usage.completion_tokens, 0, 0, time.time_ns())
        assert cost is not None
        used.append(usage.total_tokens if kind == "tokens" else cost)
    requests = llm.requests(model)
    assert requests[-1].get("tool_choice") == "none" and len(requests) > 3
    told_at = []
    for index, request in enumerate(requests[:-1]):
        left = limit - sum(used[:index])
        told = LEFT_OF[kind].search(request["messages"][0]["content"])
        if left <= limit / 4:
            assert told is not None, (index, left)
            assert float(told.group(1)) == pytest.approx(left, rel=0.01), (index, left, told)
            told_at.append(index)
        else:
            assert told is None, (index, left, told)
    assert told_at, used
    assert sum(used[:-1]) >= limit > sum(used[:-2])


def directives(sidecar: RunningServer, agent: str) -> list[dict[str, Any]]:
    """The directives of ``agent``'s runs, as the API gives them."""
    found = []
    for run in sidecar.get_json(f"/v1/runs?agent={agent}")["runs"]:
        found += sidecar.get_json(f"/v1/runs/{quote(run['id'], safe='')}/directives")[
            "directives"]
    return found


def test_the_default_packs_budget_rules_declare_their_countdowns(sidecar: RunningServer,
                                                                  llm: FakeLLM) -> None:
    """What the API says a directive counts down is its rule's declaration: the countdown's
    wind-downs say ``tool_calls`` (a pack budget's: the wire's additive field)."""
    model = llm.script("declared", looping("search", lambda i: {"q": f"page {i}"},
                                           answer_without_tools="REPORT"))
    agent_loop(sidecar, model, "counted")
    said = wait_until(lambda: (d := directives(sidecar, "counted"))
                      and {x["rule"] for x in d} >= {"budget-countdown", "budget-last-call"}
                      and d, "the countdown's directives")
    assert {(d["rule"], d["countdown"]) for d in said} >= {
        ("budget-countdown", "tool_calls"), ("budget-last-call", "tool_calls")}
    assert json.dumps(said)  # (plain JSON)


def test_a_countdown_stored_before_directives_said_so_counts_down_after_a_restart(
        tmp_path: Path, llm: FakeLLM, pack: str) -> None:
    """A sidecar that stored the run's countdown before directives said what they count down
    is upgraded under a running agent: the restored countdown is its rule's (the pack's), so
    the next request gets the true count, not the countdown's stale words as a wind-down."""
    path = tmp_path / "countdown.yaml"
    path.write_text(pack)
    config = sidecar_config(tmp_path / "state-upgraded", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, rules=(str(path),))
    model = llm.script("upgraded", looping("search", lambda i: {"q": f"page {i}"},
                                           answer_without_tools="REPORT"))
    client_headers = {"X-Watchdog-Agent": "counted"}
    messages: list[Any] = [{"role": "system", "content": "You are terse."},
                           {"role": "user", "content": "find it across an upgrade"}]

    def ask(server: RunningServer) -> None:
        client = openai.OpenAI(base_url=server.url("model") + "/v1", api_key=KEY,
                               max_retries=0, default_headers=client_headers)
        message = client.chat.completions.create(model=model, messages=messages,
                                                 tools=TOOLS).choices[0].message
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [call.model_dump() for call in message.tool_calls or ()]})
        for call in message.tool_calls or ():
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": f"found {len(messages)}"})

    with running_server(config) as server:
        for _ in range(4):  # (the fourth request is told 5 of 8: the countdown has fired)
            ask(server)
        server.stored()
    store = sqlite3.connect(tmp_path / "state-upgraded" / DB_FILE)
    with store:  # (the records as a sidecar before the field stored them)
        for seq, data in store.execute("SELECT global_seq, data FROM directives").fetchall():
            record = codecs().unpacker.decode(data)
            assert record.pop("countdown") in ("tool_calls", None)
            store.execute("UPDATE directives SET data = ? WHERE global_seq = ?",
                          (codecs().packer.encode(record), seq))
    store.close()
    with running_server(config) as server:
        ask(server)
    seen, requests = notes(llm, model)
    # (the call handed over just before the restart is not counted: the endpoint keeps what
    # it handed over in memory, docs/model-endpoint.md; 5 left, as the restored run counts)
    assert seen == [*COUNTED[:4], "5 of 8"], seen
    assert "You must wind down now" not in requests[4]["messages"][0]["content"]


@pytest.mark.parametrize("latency", [0.0, 0.02, 0.15])
def test_a_final_request_while_the_state_cannot_be_written_is_held_and_stopped(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str, latency: float,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The state cannot be written from the run's third request on, and its model asks for the
    tool again at the final request (its tools withdrawn): the agent gets the stop note in place
    of the answer, on either relay (the compiled one carries the final and holds it), the final
    request sent again is answered by the endpoint, and the validation retry after the note
    gets the error; the upstream saw 8 requests with tools and one without, and nothing after."""
    service = sidecar.server.service
    assert service is not None
    native = native_of(sidecar) if model_relay == "native" else None
    for paced in (False, True):
        model = llm.script(f"unwritable-final-{paced}", looping(
            "search", lambda i: {"q": f"page {i}"}, obeys_tool_choice=False), delay=latency)
        between = filling(sidecar, native if paced else None, 2, monkeypatch)
        client = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY,
                               max_retries=0, default_headers={"X-Watchdog-Agent": "counted"})
        messages: list[Any] = [{"role": "system", "content": "You are terse."},
                               {"role": "user", "content": f"find it ({model})"}]
        ran, finals = 0, (native.finals, native.stopped) if native is not None else (0, 0)
        try:
            for _ in range(12):
                if ran:
                    between()
                message = client.chat.completions.create(model=model, messages=messages,
                                                         tools=TOOLS).choices[0].message
                if not message.tool_calls:
                    break
                messages.append({"role": "assistant", "content": None, "tool_calls": [
                    call.model_dump() for call in message.tool_calls]})
                for call in message.tool_calls:
                    ran += 1
                    messages.append({"role": "tool", "tool_call_id": call.id,
                                     "content": f"found {ran}"})
            output = message.content or ""
            assert (ran, output.startswith("The agent-watchdog stopped this run: the model "
                                           "asked for tools again")) == (8, True), output
            again = client.chat.completions.create(model=model, messages=messages,
                                                   tools=TOOLS).choices[0].message
            assert again.content == output  # the final sent again: the endpoint's answer
            messages += [{"role": "assistant", "content": output},
                         {"role": "user", "content": "Validation failed: answer in JSON."}]
            with pytest.raises(openai.BadRequestError) as failure:
                client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
            assert failure.value.code == "watchdog_aborted"
        finally:
            writable_again(sidecar, monkeypatch)
        seen, requests = notes(llm, model)
        assert seen == [None] * 5 + ["3 of 8", "2 of 8", "1 of 8", None], seen
        assert [request.get("tool_choice") for request in requests] == [None] * 8 + ["none"]
        if native is not None:
            assert (native.finals - finals[0], native.stopped - finals[1]) == (1, 1)
    if native is not None:
        assert sidecar.call(lambda: native.missed) == 0
