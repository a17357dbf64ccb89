"""Budgeted runs at once, on both relays: no tool call past the budget ever reaches an agent and
the countdown each upstream request carries is true, however the agents race the relay.

``RUNS`` hand-written agents (one thread each, each its own run: its own agent name, model and
conversation; some named by ``x-watchdog-run``, some continuing a Responses API response by
``previous_response_id``) start at the same moment against one sidecar, whose upstream
(:class:`~tests.frameworks.fakellm.FakeLLM`) answers every request that offers tools with two or
three tool calls, and a report otherwise. They cover the three APIs, streamed and whole, and the
ways an agent may go on once it has a response's last event (``[DONE]``, a Responses end event,
``message_stop``):

* ``end``: it reads the response to its end, then sends its next request on a new connection;
* ``keepalive``: the same, on the same connection;
* ``at_last``: it sends its next request at once, on a new connection, the first one left open
  and unread (the stream's end not waited for);
* ``close``: it closes the connection at the last event, then sends its next request;

and a third of the streams come from an upstream that keeps the connection open ``LINGER``
seconds after its last event. Each run has a budget of 3 to 5 tool calls
(``x-watchdog-budget-tool-calls``). Asserted per run: the agent got exactly ``min(calls, left)``
tool calls from each response (never more than the budget in all), each upstream request
carried the countdown of the calls handed over before it (``[budget: N of B tool calls
left``, from 3 left) and, at the budget, no tools and the report instruction; the report is the
agent's answer. Then the sidecar's word on each run: its record (tool calls, model calls, ended
with its answer) and its metrics (requests, steering: notes, trims, the final request) match
what the agents saw.

Each test costs a couple of seconds. Heavier: ``TRIM_STRESS_RUNS`` runs at once (default 36)
and ``TRIM_STRESS_ROUNDS`` rounds of them per relay (default 1), from the environment, e.g.
``TRIM_STRESS_RUNS=50 TRIM_STRESS_ROUNDS=20`` under a CPU hog on every core.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.frameworks.fakellm import FakeLLM, Step, ToolCall, answer, offers_tools
from tests.harness import RunningServer, http_request, running_server, sidecar_config, wait_until
from tests.model_relays import RELAYS
from watchdog.shell.state.store import StoreWriteError

RUNS = int(os.environ.get("TRIM_STRESS_RUNS", "36"))  # agents at once
ROUNDS = int(os.environ.get("TRIM_STRESS_ROUNDS", "1"))  # rounds of them, per relay
LINGER = 0.5  # seconds an upstream keeps a stream open after its last event
REPORT = "REPORT: done"
KEY = "sk-stress-0123456789abcdef"
COUNTDOWN_FROM = 3  # the countdown shows from this many tool calls left
STOPPED = re.compile(r"being stopped: ([^\]]*\])")
COUNTDOWN = re.compile(r"\[budget: (\d+) of (\d+) tool calls left")
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses",
         "messages": "/v1/messages"}
LAST_EVENTS = {"response.completed", "response.incomplete", "response.failed", "message_stop"}
# (api, stream, how the agent goes on at the response's last event, how the run is named)
SHAPES = [(api, stream, how, named)
          for api in ("chat", "responses", "messages")
          for stream, how in ((False, "end"), (False, "keepalive"), (True, "end"),
                              (True, "keepalive"), (True, "at_last"), (True, "close"))
          for named in ("conversation", "run")]
SHAPES += [("responses", True, "at_last", "previous"), ("responses", False, "end", "previous")]


def script(calls: int, tag: str) -> Any:
    """``calls`` tool calls for each request that offers tools, else the report."""
    def pick(index: int, body: dict[str, Any]) -> Step:
        if not offers_tools(body):
            return answer(REPORT)
        return Step(tool_calls=tuple(ToolCall("search", {"q": f"{tag} {index}.{n}"})
                                     for n in range(calls)))
    return pick


@dataclass
class Agent:
    """One run: a hand-written agent loop over raw HTTP (http.client)."""

    address: tuple[str, int]
    name: str
    model: str
    api: str
    stream: bool
    how: str
    named: str
    budget: int
    run: str | None = None
    header_budget: bool = True  # the budget in a header (else the sidecar's rule pack's)
    budget_of: str = "tool-calls"  # the budget header's kind: tool-calls, iterations
    after_first: Callable[[], None] | None = None  # called once the first response is read
    got: list[int] = field(default_factory=list)  # tool calls of each response
    output: str = ""
    failure: str = ""
    _open: list[http.client.HTTPConnection] = field(default_factory=list)

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "x-watchdog-agent": self.name}
        if self.header_budget:
            headers[f"x-watchdog-budget-{self.budget_of}"] = str(self.budget)
        if self.api == "messages":
            headers.update({"x-api-key": KEY, "anthropic-version": "2023-06-01"})
        else:
            headers["Authorization"] = f"Bearer {KEY}"
        if self.run is not None:
            headers["x-watchdog-run"] = self.run
        return headers

    def __call__(self, start: threading.Barrier) -> None:
        try:
            start.wait(30)
            self.loop()
        except Exception as exc:  # reported by the test, with the agent's name
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            for connection in self._open:
                connection.close()

    def loop(self) -> None:
        task = f"Find the answer for {self.model}."  # another task each round
        history: list[Any] = ([{"role": "system", "content": "You research."}]
                              if self.api == "chat" else [])
        history.append({"role": "user", "content": task})
        previous: str | None = None
        connection: http.client.HTTPConnection | None = None
        sent: list[Any] = list(history)
        for _ in range(12):
            body: dict[str, Any] = {"model": self.model, "stream": self.stream}
            if self.api == "chat":
                body.update(messages=sent, tools=[{"type": "function", "function": {
                    "name": "search", "parameters": {"type": "object"}}}])
            elif self.api == "responses":
                body.update(instructions="You research.", input=sent, tools=[
                    {"type": "function", "name": "search", "parameters": {"type": "object"}}])
                if previous is not None:
                    body["previous_response_id"] = previous
            else:
                body.update(system="You research.", max_tokens=256, messages=sent,
                            tools=[{"name": "search", "input_schema": {"type": "object"}}])
            if connection is None:
                connection = http.client.HTTPConnection(*self.address, timeout=30)
                self._open.append(connection)
            connection.request("POST", PATHS[self.api], json.dumps(body), self.headers())
            response = connection.getresponse()
            if response.status != 200:
                raise AssertionError(f"status {response.status}: {response.read()[:300]!r}")
            if self.stream:
                text, calls, response_id = self.read_stream(response)
            else:
                text, calls, response_id = self.read_whole(json.loads(response.read()))
            if self.how == "close":
                connection.close()
            if self.how != "keepalive":
                connection = None  # the next request on a new connection
            self.got.append(len(calls))
            if self.after_first is not None and len(self.got) == 1:
                self.after_first()
            if not calls:
                self.output = text
                return
            results = [f"result of {call_id}" for call_id, _ in calls]
            if self.api == "chat":
                history.append({"role": "assistant", "content": text or None, "tool_calls": [
                    {"id": call_id, "type": "function", "function": {
                        "name": "search", "arguments": arguments}}
                    for call_id, arguments in calls]})
                history += [{"role": "tool", "tool_call_id": call_id, "content": result}
                            for (call_id, _), result in zip(calls, results, strict=True)]
                sent = history
            elif self.api == "responses":
                outputs = [{"type": "function_call_output", "call_id": call_id,
                            "output": result}
                           for (call_id, _), result in zip(calls, results, strict=True)]
                if self.named == "previous":
                    previous, sent = response_id, outputs
                else:
                    for (call_id, arguments), output in zip(calls, outputs, strict=True):
                        history += [{"type": "function_call", "call_id": call_id,
                                     "name": "search", "arguments": arguments}, output]
                    sent = history
            else:
                history.append({"role": "assistant", "content": [
                    {"type": "tool_use", "id": call_id, "name": "search",
                     "input": json.loads(arguments or "{}")} for call_id, arguments in calls]})
                history.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": call_id, "content": result}
                    for (call_id, _), result in zip(calls, results, strict=True)]})
                sent = history
        raise AssertionError("the loop did not end")

    def read_whole(self, body: dict[str, Any]) -> tuple[str, list[tuple[str, str]], str]:
        if self.api == "chat":
            message = body["choices"][0]["message"]
            return message.get("content") or "", [
                (call["id"], call["function"]["arguments"])
                for call in message.get("tool_calls") or ()], body.get("id", "")
        if self.api == "responses":
            return "".join(part["text"] for item in body["output"] if item["type"] == "message"
                           for part in item["content"]), [
                (item["call_id"], item["arguments"]) for item in body["output"]
                if item["type"] == "function_call"], body["id"]
        return "".join(block["text"] for block in body["content"] if block["type"] == "text"), [
            (block["id"], json.dumps(block["input"])) for block in body["content"]
            if block["type"] == "tool_use"], body["id"]

    def read_stream(self, response: http.client.HTTPResponse
                    ) -> tuple[str, list[tuple[str, str]], str]:
        """The events up to the last one; then the rest of the stream as ``how`` says."""
        text, calls, whole = "", {}, None
        data: list[str] = []
        while True:
            line = response.readline()
            if not line:
                raise AssertionError("the stream ended before its last event")
            line = line.rstrip(b"\r\n")
            if line.startswith(b"data:"):
                data.append(line[5:].strip().decode())
                continue
            if line or not data:
                continue
            payload, data = "\n".join(data), []
            if payload == "[DONE]":
                break
            event = json.loads(payload)
            kind = event.get("type")
            if self.api == "chat":
                for choice in event.get("choices") or ():
                    text += choice["delta"].get("content") or ""
                    for part in choice["delta"].get("tool_calls") or ():
                        entry = calls.setdefault(part["index"], ["", ""])
                        entry[0] = part.get("id") or entry[0]
                        entry[1] += (part.get("function") or {}).get("arguments") or ""
            elif self.api == "responses":
                if kind == "response.output_item.done" and event["item"]["type"] == \
                        "function_call":
                    item = event["item"]
                    calls[len(calls)] = [item["call_id"], item["arguments"]]
                elif kind in LAST_EVENTS:
                    whole = event["response"]
            elif kind == "content_block_start" and event["content_block"]["type"] == "tool_use":
                calls[event["index"]] = [event["content_block"]["id"], ""]
            elif kind == "content_block_delta":
                delta = event["delta"]
                if delta["type"] == "text_delta":
                    text += delta["text"]
                elif event["index"] in calls:
                    calls[event["index"]][1] += delta["partial_json"]
            if kind in LAST_EVENTS:
                break
        if self.how in ("end", "keepalive"):
            rest = response.read()
            assert not rest.strip(), f"events after the last one: {rest[:200]!r}"
        elif self.how == "at_last":
            pass  # the connection left open, its end unread, while the agent goes on
        listed = [(call_id, arguments) for call_id, arguments in calls.values()]
        if whole is not None:  # the end event's response hands over the same calls
            text, ended = self.read_whole(whole)[:2]
            assert ended == listed, whole
        return text, listed, (whole or {}).get("id", "")


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def metric_samples(sidecar: RunningServer) -> dict[tuple[str, str, str], float]:
    """(sample name, agent, outcome or action) -> value, of the model endpoint's counters."""
    status, body = http_request("GET", sidecar.metrics + "/metrics")
    assert status == 200
    found: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name.endswith(("model_requests_total", "model_steered_total")):
                what = sample.labels.get("outcome") or sample.labels.get("action") or ""
                key = (sample.name, sample.labels.get("agent", ""), what)
                found[key] = found.get(key, 0.0) + sample.value
    return found


def expected_steps(agent: Agent, calls: int) -> list[int]:
    """The tool calls each response hands over: all it asks for, until the budget's left."""
    got, left = [], agent.budget
    while left > 0:
        got.append(min(calls, left))
        left -= got[-1]
    return [*got, 0]


@pytest.mark.parametrize("relay", RELAYS)
def test_budgeted_runs_at_once_never_get_a_call_past_the_budget(
        tmp_path: Path, llm: FakeLLM, relay: str) -> None:
    config = sidecar_config(tmp_path / relay, model_address="127.0.0.1:0",
                            model_upstream=llm.base_url,
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1"),
                            model_relay=relay, model_max_concurrent=4 * RUNS)
    with running_server(config) as sidecar:
        host, port = sidecar.server.addresses["model"]
        known: dict[str, set[str]] = {}  # each agent's runs of the rounds before
        for round_ in range(ROUNDS):
            agents: list[tuple[Agent, int]] = []
            for n in range(RUNS):  # an agent a run; the next round's run of it its next
                api, stream, how, named = SHAPES[(n + round_) % len(SHAPES)]
                calls = 2 + (n // len(SHAPES) + n + round_) % 2
                tag = f"stress-{relay}-{round_}-{n}"
                model = llm.script(tag, script(calls, tag),
                                   linger=LINGER if stream and n % 3 == 0 else 0.0)
                agent = Agent((host, port), f"stress-{relay}-{n}", model, api, stream, how,
                              named, budget=3 + (n + round_) % 3,
                              run=f"stress-{relay}-{n}-{uuid.uuid4().hex[:8]}"
                              if named == "run" else None)
                agents.append((agent, calls))
            before = metric_samples(sidecar)
            start = threading.Barrier(len(agents))
            threads = [threading.Thread(target=agent, args=(start,), daemon=True)
                       for agent, _ in agents]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            check_runs(sidecar, llm, agents, before, known)


def check_runs(sidecar: RunningServer, llm: FakeLLM, agents: list[tuple[Agent, int]],
               before: dict[tuple[str, str, str], float], known: dict[str, set[str]] | None
               ) -> None:
    """What each agent got and what the upstream read; then (``known``: each agent's runs
    before these) the sidecar's records of them."""
    problems: list[str] = []
    for agent, calls in agents:
        shape = (f"{agent.model} ({agent.api}, {'stream' if agent.stream else 'whole'}, "
                 f"{agent.how}, {agent.named}, {calls} calls a response, budget "
                 f"{agent.budget})")
        if agent.failure:
            problems.append(f"{shape}: {agent.failure}")
            continue
        if sum(agent.got) > agent.budget:
            problems.append(f"{shape}: {sum(agent.got)} tool calls handed over: {agent.got}")
        if agent.got != expected_steps(agent, calls) or agent.output != REPORT:
            problems.append(f"{shape}: calls handed {agent.got}, expected "
                            f"{expected_steps(agent, calls)}; output {agent.output[:80]!r}")
        requests = llm.requests(agent.model)
        if len(requests) != len(agent.got):
            problems.append(f"{shape}: {len(requests)} upstream requests for "
                            f"{len(agent.got)} of the agent's")
        handed = 0
        for index, (body, got) in enumerate(zip(requests, agent.got, strict=False)):
            left, text = agent.budget - handed, json.dumps(body)
            countdown = [(int(n), int(of)) for n, of in COUNTDOWN.findall(text)]
            if left > 0:
                want = [(left, agent.budget)] if left <= COUNTDOWN_FROM else []
                if countdown != want or not offers_tools(body):
                    problems.append(f"{shape}: request {index} after {handed} calls carried "
                                    f"{countdown} (tools offered: {offers_tools(body)}) "
                                    f"{STOPPED.findall(text)[:1]}")
            elif offers_tools(body) or f"all {agent.budget} tool calls used" not in text:
                problems.append(f"{shape}: request {index} at the budget is not the final one")
            handed += got
    assert not problems, f"{len(problems)} of {len(agents)} runs:\n" + "\n".join(problems)
    check_records(sidecar, agents, before, known)


def check_records(sidecar: RunningServer, agents: list[tuple[Agent, int]],
                  before: dict[tuple[str, str, str], float], known: dict[str, set[str]] | None
                  ) -> None:
    """The sidecar's record and metrics of each run say what its agent saw (``before``: the
    metrics before the round; ``known``: each agent's runs before it, None: the runs are not
    recorded, only their metrics are read)."""
    for agent, _ in agents if known is not None else ():
        requests, seen = len(agent.got), known.setdefault(agent.name, set())

        def ended(agent: Agent = agent, seen: set[str] = seen) -> list[dict[str, Any]]:
            runs = [run for run in sidecar.get_json(f"/v1/runs?agent={agent.name}&limit=500")[
                "runs"] if run["id"] not in seen]
            return [run for run in runs if run["state"] == "ended"] if len(runs) == 1 else []

        run = wait_until(ended, f"{agent.name}: one new run, ended")[0]
        seen.add(run["id"])
        assert (run["tool_calls"], run["iterations"], run["has_final_answer"]) == (
            agent.budget, requests, True), (agent.name, run)
        if agent.run is not None:
            assert run["id"] == agent.run, run
    after = metric_samples(sidecar)
    samples = {key: value - before.get(key, 0.0) for key, value in after.items()}
    for agent, calls in agents:
        steps, left = expected_steps(agent, calls), agent.budget
        lefts = [left := left - got for got in [0, *steps[:-1]]]
        want = {"requests": float(len(steps)),
                "note": float(sum(1 for n in lefts if 0 < n <= COUNTDOWN_FROM)),
                "final": 1.0, "trim": float(sum(1 for n in lefts if 0 < n < calls))}
        requests_total = sum(value for (name, who, _), value in samples.items()
                             if who == agent.name and name.endswith("model_requests_total"))
        seen = {"requests": requests_total, **{action: samples.get(
            ("agent_watchdog_model_steered_total", agent.name, action), 0.0)
            for action in ("note", "final", "trim")}}
        assert seen == want, (agent.name, agent.api, agent.stream, calls, agent.budget, seen)


UNWRITABLE_PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: stress-budgets
budgets:
  - agents: ["unwritable-pack-chat", "unwritable-pack-messages"]
    max_tool_calls: 3
"""


@pytest.mark.parametrize("relay", RELAYS)
def test_a_state_that_cannot_be_written_still_never_lets_a_call_past_the_budget(
        tmp_path: Path, llm: FakeLLM, relay: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a run has begun its state cannot be written (a full disk: the records of its calls
    are refused): its requests are still steered by the endpoint's own counts, its budget
    from a header or from the rule pack as last read; the metrics still count them. (A run
    whose first request finds the state unwritable has no pack budget read yet: only a
    header's steers it.)"""
    pack = tmp_path / "pack.yaml"
    pack.write_text(UNWRITABLE_PACK)
    config = sidecar_config(tmp_path / relay, model_address="127.0.0.1:0",
                            model_upstream=llm.base_url,
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1"),
                            model_relay=relay, rules=(str(pack),))
    with running_server(config) as sidecar:
        service = sidecar.server.service
        assert service is not None

        def full(*args: object, **kwargs: object) -> None:
            raise StoreWriteError("database or disk is full")

        def unwritable() -> None:
            monkeypatch.setattr(service.store, "save", full)
            monkeypatch.setattr(service.store, "save_sessions", full)
            service.state.state_error = "database or disk is full"

        host, port = sidecar.server.addresses["model"]
        before = metric_samples(sidecar)
        agents = []
        for api, stream, header in (("chat", True, False), ("chat", False, True),
                                    ("messages", True, False), ("responses", True, True)):
            name = f"unwritable-{'header' if header else 'pack'}-{api}"
            tag = f"{name}-{relay}-{stream}"
            agent = Agent((host, port), name, llm.script(tag, script(2, tag)), api, stream,
                          "end", "conversation", budget=3, header_budget=header,
                          after_first=unwritable)
            try:
                agent(threading.Barrier(1))
            finally:  # writable again for the next run's start (the budget its run's has)
                monkeypatch.undo()
                service.state.state_error = None
            agents.append((agent, 2))
        check_runs(sidecar, llm, agents, before, None)


@pytest.mark.parametrize("relay", RELAYS)
def test_parallel_agents_of_one_run_never_get_more_than_its_budget_together(
        tmp_path: Path, llm: FakeLLM, relay: str) -> None:
    """Two agents of one run (one ``x-watchdog-run``: a main agent and a sub-agent it started)
    ask the model at the same moment, 1 of the run's 3 tool calls left: the calls the first
    request decided may hand over are kept from the second's, so together they hand over at
    most the one call left; the countdown each upstream request read says so (the one left
    none has its tools withdrawn), and neither is made the run's final request."""
    config = sidecar_config(tmp_path / relay, model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, model_relay=relay)
    model = llm.script(f"parallel-{relay}", script(2, f"parallel-{relay}"), delay=0.3)
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}",
               "x-watchdog-agent": "parallel", "x-watchdog-run": f"parallel-{relay}",
               "x-watchdog-budget-tool-calls": "3"}
    with running_server(config) as sidecar:
        url = sidecar.url("model") + "/v1/chat/completions"

        def ask(messages: list[Any]) -> list[Any]:
            status, body = http_request("POST", url, json.dumps(
                {"model": model, "messages": messages, "tools": tools}).encode(), headers)
            assert status == 200, body
            return list(json.loads(body)["choices"][0]["message"].get("tool_calls") or ())

        main = [{"role": "user", "content": "The main task."}]
        first = ask(main)
        main += [{"role": "assistant", "content": None, "tool_calls": first},
                 *({"role": "tool", "tool_call_id": call["id"], "content": "found"}
                   for call in first)]
        got: dict[str, int] = {}
        agents = [threading.Thread(target=lambda who=who, messages=messages: got.__setitem__(
            who, len(ask(messages)))) for who, messages in (
                ("main", main), ("sub", [{"role": "user", "content": "A sub-task."}]))]
        for thread in agents:
            thread.start()
        for thread in agents:
            thread.join(30)
    assert len(first) == 2 and sorted(got.values()) == [0, 1], (first, got)
    requests = llm.requests(model)
    assert [COUNTDOWN.findall(json.dumps(body)) for body in requests[:1]] == [[("3", "3")]]
    assert sorted(tuple(COUNTDOWN.findall(json.dumps(body))) for body in requests[1:]) == [
        (("0", "3"),), (("1", "3"),)]
    # the one that may hand over none has its tools withdrawn (it answers in text); neither is
    # the run's final request (its report instruction)
    left = {COUNTDOWN.findall(json.dumps(body))[0][0]: body for body in requests[1:]}
    assert offers_tools(requests[0]) and offers_tools(left["1"])
    assert left["0"]["tool_choice"] == "none" and left["0"]["tools"]
    assert not any("Tools are withdrawn" in json.dumps(body) for body in requests)


@pytest.mark.parametrize("relay", RELAYS)
def test_a_stream_with_no_bound_on_its_tools_is_booked_at_its_last_event(
        tmp_path: Path, llm: FakeLLM, relay: str) -> None:
    """A run with a budget of model calls (no bound on its tool calls, so nothing is trimmed):
    its agent sends each next request at a stream's last event while the upstream keeps the
    stream open LINGER seconds more. Each request still finds the calls before it booked:
    the third of its 3 model calls is the final one (no tools, the report instruction)."""
    config = sidecar_config(tmp_path / relay, model_address="127.0.0.1:0",
                            model_upstream=llm.base_url,
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1"),
                            model_relay=relay)
    with running_server(config) as sidecar:
        host, port = sidecar.server.addresses["model"]
        problems = []
        for api in PATHS:
            tag = f"iterations-{relay}-{api}"
            agent = Agent((host, port), tag, llm.script(tag, script(1, tag), linger=LINGER),
                          api, True, "at_last", "conversation", budget=3,
                          budget_of="iterations")
            agent(threading.Barrier(1))
            requests = llm.requests(agent.model)
            final = [not offers_tools(body) and "this is the last of 3" in json.dumps(body)
                     for body in requests]
            if agent.failure or agent.got != [1, 1, 0] or final != [False, False, True]:
                problems.append(f"{api}: {agent.failure} calls {agent.got}, final {final}")
    assert not problems, problems
