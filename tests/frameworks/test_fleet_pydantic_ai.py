"""A tool failing for everyone (DESIGN §13 "The fleet") with ten real pydantic-ai agents.

Ten runs of a real pydantic-ai agent run at once against the scripted model server, each with
the client SDK (spans synced before every model request) and the real OTLP exporter. Their
shared ``search`` tool works once for every run, then its backend goes down: every call raises.
Once three runs have seen it fail, the default rule ``tool-outage`` tells every run that has
used it, in the step that saw the third failure; each model sees the note in its instructions
at its next request, and (a model that obeys) stops calling the tool. When the tool works again
for a new run, the outage ends: ``tools_failing`` drops to 0 and nobody is told again.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from agent_watchdog_client import Watchdog
from agent_watchdog_client.adapters.pydantic_ai import WatchdogCapability
from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM, Step
from tests.frameworks.steering import instructions
from tests.frameworks.test_steering_pydantic_ai import tracer_provider
from tests.harness import RunningServer, http_request, wait_until

RUNS = 10
NOTE = re.compile(r"\[fleet: search has failed \(([\w.]+)\) for (\d+) runs since "
                  r"(\S+) — don't retry it")
GIVE_UP = "search is down for everyone; finishing without it."


@pytest.fixture
def provider(sidecar: RunningServer) -> Iterator[TracerProvider]:
    provider = tracer_provider(sidecar.otlp_http)
    yield provider
    provider.shutdown()


def obeying(body: dict[str, Any], index: int) -> Step:
    """A model that searches until its instructions say the tool is down, then answers."""
    if NOTE.search(instructions(body)):
        return fakellm.answer(GIVE_UP)
    return fakellm.call("search", q=f"term {index}")


class Backend:
    """The shared search backend: every run's first call works; then it is down until
    ``recover()`` (the second calls wait for each other, so every first success has reached
    the sidecar, synced before the run's next model request, before any failure)."""

    def __init__(self) -> None:
        self.first = threading.Barrier(RUNS, timeout=60)
        self.second = threading.Barrier(RUNS, timeout=60)
        self.lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.down = True

    def search(self, run: str) -> str:
        with self.lock:
            self.calls[run] = index = self.calls.get(run, 0) + 1
        if index == 1 and self.down:
            self.first.wait()
            return "3 results"
        if index == 2 and self.down:
            self.second.wait()
        if self.down:
            raise ModelRetry("search backend unavailable: connection refused")
        return "3 results"


def agent_for(llm: FakeLLM, model: str, provider: TracerProvider, backend: Backend,
              run_name: str) -> Agent[None, str]:
    chat = OpenAIChatModel(model, provider=OpenAIProvider(base_url=llm.base_url,
                                                          api_key="sk-fake"))
    agent = Agent(chat, name="researcher", instructions="Research the question.",
                  capabilities=[Instrumentation(settings=InstrumentationSettings(
                      tracer_provider=provider)), WatchdogCapability()])

    @agent.tool_plain(retries=20)
    def search(q: str) -> str:
        return backend.search(run_name)

    return agent


def tools_failing(sidecar: RunningServer) -> float | None:
    with urllib.request.urlopen(sidecar.metrics + "/metrics", timeout=10) as response:
        text = response.read().decode()
    match = re.search(r'^agent_watchdog_tools_failing\{tool="search"\} (\S+)$', text, re.M)
    return float(match.group(1)) if match else None


def outage_notes(sidecar: RunningServer, run_id: str) -> list[dict[str, Any]]:
    status, body = http_request("GET", f"{sidecar.api}/v1/runs/{run_id}")
    assert status == 200, body
    return [d for d in json.loads(body)["directives"] if d["rule"] == "tool-outage"]


@pytest.mark.timeout(240)
def test_ten_runs_are_told_the_shared_tool_is_down_and_the_outage_clears(
        sidecar: RunningServer, llm: FakeLLM, provider: TracerProvider) -> None:
    backend = Backend()
    wd = Watchdog(sidecar.api, tracer_provider=provider)
    models = [llm.script(f"fleet-{i}", lambda index, body: obeying(body, index))
              for i in range(RUNS)]

    def one(i: int) -> tuple[str, str]:
        agent = agent_for(llm, models[i], provider, backend, f"run-{i}")
        with wd.run(agent="researcher", max_tool_calls=30) as run:
            result = agent.run_sync("What is new in the field?")
        return run.id, result.output

    with ThreadPoolExecutor(RUNS) as pool:
        done = list(pool.map(one, range(RUNS)))
    provider.force_flush()

    # every run's model saw the note at a request after its failed call, then stopped
    for i, (_run_id, output) in enumerate(done):
        assert output == GIVE_UP, (i, output)
        requests = llm.requests(models[i])
        seen = [bool(NOTE.search(instructions(body))) for body in requests]
        assert seen[-1] and not any(seen[:2]), (i, seen)  # not before the tool ever failed
        first = seen.index(True)
        assert all(seen[first:]), (i, seen)
        match = NOTE.search(instructions(requests[first]))
        assert match is not None and int(match.group(2)) >= 3, match
        assert backend.calls[f"run-{i}"] == first, (i, backend.calls, seen)  # no call after

    # each run was told once (when: the requests above show it was the first request after
    # its failed call; the API's created_at has whole seconds, too coarse to say more)
    notes = {run_id: outage_notes(sidecar, run_id) for run_id, _ in done}
    assert all(len(told) == 1 for told in notes.values()), notes
    assert {told[0]["action"] for told in notes.values()} == {"notify"}
    assert wait_until(lambda: tools_failing(sidecar) == 1.0, what="tools_failing 1")

    # the backend recovers: a new run's successful search ends the outage; no one is told
    backend.down = False
    recovering = llm.script("fleet-recovered", fakellm.steps(fakellm.call("search", q="again"),
                                                             fakellm.answer("found it")))
    agent = agent_for(llm, recovering, provider, backend, "run-new")
    with wd.run(agent="researcher", max_tool_calls=30) as run:
        assert agent.run_sync("And now?").output == "found it"
    provider.force_flush()
    wd.close()
    assert wait_until(lambda: tools_failing(sidecar) == 0.0, what="tools_failing back to 0")
    assert outage_notes(sidecar, run.id) == []
    assert not any(NOTE.search(instructions(body)) for body in llm.requests(recovering))
    assert {run_id: len(outage_notes(sidecar, run_id)) for run_id, _ in done} == {
        run_id: 1 for run_id, _ in done}
