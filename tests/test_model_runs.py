"""Which run a model call is (DESIGN §12), what it counts, and how the endpoint and an agent's
own spans or SDK steering share a run: real sidecar, real ``openai`` SDK, scripted upstream."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anthropic
import openai
import pytest
from agent_watchdog_client import Watchdog
from opentelemetry import propagate, trace

from tests.frameworks.fakellm import FakeLLM, Step, answer, call, looping, steps
from tests.harness import RunningServer, http_request, running_server, sidecar_config, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)
from tests.otel import export_http
from tests.spans import SpanMaker, chat_attrs, tool_attrs
from watchdog.shell.clock import ManualClock

KEY = "sk-runs-SECRET-0123456789"
LEFT = re.compile(r"\[budget: (\d+) of (\d+) tool calls left")
TOOLS = [{"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
def sidecar(tmp_path: Path, llm: FakeLLM) -> Iterator[RunningServer]:
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, model_agent_name="pod-agent")
    with running_server(config) as server:
        yield server


def chat(sidecar: RunningServer, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                         default_headers=headers or None)


def loop(client: openai.OpenAI, model: str, messages: list[Any],
         extra: dict[str, str] | None = None) -> str:
    for _ in range(10):
        message = client.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                                 extra_headers=extra).choices[0].message
        if not message.tool_calls:
            messages.append({"role": "assistant", "content": message.content})
            return message.content or ""
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [c.model_dump() for c in message.tool_calls]})
        for tool_call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": "ok"})
    raise AssertionError("no answer")


def ended_runs(sidecar: RunningServer, agent: str, token: str | None = None
               ) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return [run for run in sidecar.get_json(f"/v1/runs?agent={quote(agent)}", headers)["runs"]
            if run["state"] == "ended"]


def test_agent_name_from_config_and_a_new_user_message_starts_the_next_run(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    model = llm.script("conv", steps(call("search", q="a"), answer("first"),
                                     call("search", q="b"), answer("second")))
    client = chat(sidecar)
    messages: list[Any] = [{"role": "user", "content": "question one"}]
    assert loop(client, model, messages) == "first"
    messages.append({"role": "user", "content": "question two"})
    assert loop(client, model, messages) == "second"
    runs = wait_until(lambda: len(r := ended_runs(sidecar, "pod-agent")) == 2 and r,
                      "two runs of the conversation")
    assert {run["iterations"] for run in runs} == {2}
    assert {run["tool_calls"] for run in runs} == {1}
    assert len({run["session"] for run in runs}) == 1 and runs[0]["session"]


def test_an_agent_named_in_its_base_url_gets_its_runs_named(sidecar: RunningServer,
                                                            llm: FakeLLM) -> None:
    """An agent that can set only its base URL names itself in its path (the chart's
    ``agentEnv`` in gateway mode): ``/agent/<name>/v1``, percent-encoded, taken off before the
    upstream; an empty name (a pod without the label) names none."""
    model = llm.script("named", steps(call("search", q="a"), answer("one"), answer("two")))
    base = sidecar.url("model")
    named = openai.OpenAI(base_url=base + "/agent/billing%20bot%C3%A9/v1", api_key=KEY,
                          max_retries=0)
    assert loop(named, model, [{"role": "user", "content": "invoice"}]) == "one"
    unnamed = openai.OpenAI(base_url=base + "/agent//v1", api_key=KEY, max_retries=0)
    assert loop(unnamed, model, [{"role": "user", "content": "other"}]) == "two"
    run = wait_until(lambda: ended_runs(sidecar, "billing boté"),
                     "the named run")[0]
    assert (run["iterations"], run["tool_calls"]) == (2, 1)
    assert wait_until(lambda: ended_runs(sidecar, "pod-agent"), "the unnamed run")
    assert len(llm.requests(model)) == 3  # the upstream saw /v1/chat/completions


def test_concurrent_invocations_are_separate_runs(sidecar: RunningServer, llm: FakeLLM) -> None:
    model = llm.script("two", steps(call("search", q="a"), call("search", q="a"),
                                    answer("done"), answer("done")))
    client = chat(sidecar, **{"x-watchdog-agent": "twins"})
    first: list[Any] = [{"role": "user", "content": "task A"}]
    second: list[Any] = [{"role": "user", "content": "task B"}]
    message = client.chat.completions.create(model=model, messages=first, tools=TOOLS)
    first.append({"role": "assistant", "content": None, "tool_calls": [
        c.model_dump() for c in message.choices[0].message.tool_calls or ()]})
    message = client.chat.completions.create(model=model, messages=second, tools=TOOLS)
    second.append({"role": "assistant", "content": None, "tool_calls": [
        c.model_dump() for c in message.choices[0].message.tool_calls or ()]})
    for messages in (first, second):
        messages.append({"role": "tool", "tool_call_id": messages[-1]["tool_calls"][0]["id"],
                         "content": "ok"})
        client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    runs = wait_until(lambda: len(r := ended_runs(sidecar, "twins")) == 2 and r,
                      "two runs")
    assert [(run["iterations"], run["tool_calls"]) for run in runs] == [(2, 1), (2, 1)]


def test_identical_first_requests_at_the_same_moment_are_two_runs(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Two agents send the same first request at the same moment (one agent's name, one first
    message, nothing that names a run): the upstream holds both until both have come, so each
    is in flight while the other arrives. Two runs, each with its own call and answer; each
    agent's next request goes to its own run (by the call ids its tool results answer)."""
    both_in = threading.Barrier(2, timeout=10)

    def script(index: int, body: dict[str, Any]) -> Step:
        if index < 2:
            both_in.wait()
            return call("search", q=f"q{index}")
        return answer(f"done {index}")

    model = llm.script("same-first", script)
    client = chat(sidecar, **{"x-watchdog-agent": "same-first"})
    answers: list[str] = []

    def agent() -> None:
        answers.append(loop(client, model, [{"role": "user", "content": "the same task"}]))

    threads = [threading.Thread(target=agent) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(answers) == ["done 2", "done 3"]
    runs = wait_until(lambda: len(r := ended_runs(sidecar, "same-first")) == 2 and r,
                      "two runs")
    assert [(run["iterations"], run["tool_calls"]) for run in runs] == [(2, 1), (2, 1)]


def test_a_first_request_sent_again_after_it_failed_is_the_same_run(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """A first request the upstream refused, sent again (as an SDK retries it): one run, the
    refusal one of its model calls, failed."""
    def script(index: int, body: dict[str, Any]) -> Step:
        if index == 0:
            raise ValueError("overloaded, try again")
        return call("search", q="a") if index == 1 else answer("done")

    model = llm.script("retried-first", script)
    client = chat(sidecar, **{"x-watchdog-agent": "retried-first"})
    messages: list[Any] = [{"role": "user", "content": "a task"}]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    assert loop(client, model, messages) == "done"
    runs = wait_until(lambda: len(r := ended_runs(sidecar, "retried-first")) == 1 and r,
                      "one run")
    assert [(run["iterations"], run["tool_calls"], run["errors"]) for run in runs] == [
        (3, 1, 1)]
    # every request was booked before the client got its answer: the list, active runs
    # included, is complete now (no stray run of the refused request, waiting to end)
    assert len(sidecar.get_json("/v1/runs?agent=retried-first")["runs"]) == 1


def test_a_request_the_sdk_sends_again_after_its_timeout_is_the_same_run(
        sidecar: RunningServer, llm: FakeLLM, model_relay: str) -> None:  # noqa: F811
    """The SDK gives up on a request the model is slow to answer (its timeout) and sends it
    again while the first is still with the model: the first is its client's no more. The
    retry is the run's first request, not a twin run's, and the tool call the first would have
    handed over is not held against the budget: the retry gets its tool. (Both relays: the
    compiled one tells the sidecar that the first request's client ended its side.)"""
    retried = threading.Event()

    def script(index: int, body: dict[str, Any]) -> Step:
        if index == 0:  # slow: held past the client's timeout, until its retry arrives here
            retried.wait(10)
        else:
            retried.set()
        return call("search", q="a") if index < 2 else answer("done")

    model = llm.script("timed-out-first", script)
    client = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, timeout=1.5,
                           max_retries=1, default_headers={
                               "x-watchdog-agent": "timed-out-first",
                               "x-watchdog-budget-tool-calls": "1"})
    messages: list[Any] = [{"role": "user", "content": "a task"}]
    message = client.chat.completions.create(model=model, messages=messages,
                                             tools=TOOLS).choices[0].message
    assert [c.function.name for c in message.tool_calls or ()] == ["search"]
    messages.append({"role": "assistant", "content": None,
                     "tool_calls": [c.model_dump() for c in message.tool_calls or ()]})
    messages.append({"role": "tool", "tool_call_id": (message.tool_calls or [])[0].id,
                     "content": "found it"})
    assert client.chat.completions.create(model=model, messages=messages, tools=TOOLS
                                          ).choices[0].message.content == "done"
    runs = wait_until(lambda: len(r := ended_runs(sidecar, "timed-out-first")) >= 1 and r,
                      "the run ends")
    assert [(run["iterations"], run["tool_calls"]) for run in runs] == [(2, 1)]
    assert len(sidecar.get_json("/v1/runs?agent=timed-out-first")["runs"]) == 1


def test_a_conversation_goes_on_in_its_run_after_a_restart(tmp_path: Path,
                                                           llm: FakeLLM) -> None:
    """The sidecar restarts (same state dir) between an agent's first request and its next:
    the next request, with the tool result, goes on in the run the first one opened, which ends
    with the answer; no second run. (The tool call handed over before the restart is not
    counted: what was handed over is kept in memory only.)"""
    model = llm.script("restarted", steps(call("search", q="a"), answer("done")))
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, model_agent_name="restarted")
    messages: list[Any] = [{"role": "user", "content": "a task across a restart"}]
    with running_server(config) as first:
        message = chat(first).chat.completions.create(
            model=model, messages=messages, tools=TOOLS).choices[0].message
        before = wait_until(lambda: first.get_json("/v1/runs?agent=restarted")["runs"],
                            "the run")
    messages.append({"role": "assistant", "content": None,
                     "tool_calls": [c.model_dump() for c in message.tool_calls or ()]})
    messages.append({"role": "tool", "tool_call_id": messages[-1]["tool_calls"][0]["id"],
                     "content": "ok"})
    with running_server(config) as second:
        answered = chat(second).chat.completions.create(model=model, messages=messages,
                                                        tools=TOOLS)
        assert answered.choices[0].message.content == "done"
        runs = wait_until(lambda: len(r := ended_runs(second, "restarted")) == 1 and r,
                          "the run ends")
        assert [run["id"] for run in runs] == [before[0]["id"]]
        assert runs[0]["iterations"] == 2
        assert len(second.get_json("/v1/runs?agent=restarted")["runs"]) == 1


def test_run_and_budget_headers(sidecar: RunningServer, llm: FakeLLM) -> None:
    model = llm.script("headers", looping("search", lambda i: {"q": str(i)},
                                          answer_without_tools="REPORT"))
    client = chat(sidecar, **{"x-watchdog-run": "run-from-header",
                              "x-watchdog-budget-tool-calls": "2"})
    assert loop(client, model, [{"role": "user", "content": "go"}]) == "REPORT"
    requests = llm.requests(model)
    assert len(requests) == 3
    assert "[budget: 2 of 2 tool calls left" in requests[0]["messages"][0]["content"]
    assert "[budget: 1 of 2 tool calls left" in requests[1]["messages"][0]["content"]
    assert requests[2]["tool_choice"] == "none"
    detail = wait_until(lambda: (d := sidecar.get_json("/v1/runs/run-from-header"))["state"]
                        == "ended" and d, "the run ends")
    assert detail["budget"]["max_tool_calls"] == 2 and detail["signals"]["tool_calls"] == 2
    assert detail["agent"] == "pod-agent"


def test_the_sdks_own_note_is_not_noted_again(sidecar: RunningServer, llm: FakeLLM) -> None:
    model = llm.script("sdk", steps(answer("fine")))
    client = chat(sidecar, **{"x-watchdog-budget-tool-calls": "2"})
    note = "You help.\n\n[budget: 2 of 2 tool calls left — wrap up soon]"
    client.chat.completions.create(model=model, tools=TOOLS, messages=[
        {"role": "system", "content": note}, {"role": "user", "content": "x"}])
    assert llm.requests(model)[0]["messages"][0]["content"] == note
    assert llm.raw_requests(model)[0].count(b"[budget:") == 1


@pytest.mark.parametrize("told_by", ["sync", "heartbeat"])
def test_a_client_sdk_run_whose_requests_carry_its_traceparent_is_one_run(
        sidecar: RunningServer, llm: FakeLLM, told_by: str) -> None:
    """An agent using the client SDK whose HTTP client sends the run's ``traceparent`` (OTel's
    HTTP instrumentation does) to the model endpoint: its first request comes before any span of
    the run has ended, and is still the SDK's run (its announcement names its trace: told by
    the sync before each model call, or by the reporter's heartbeat), not a run of the trace's
    own that lingers beside it."""
    model = llm.script("sdk-traced", steps(call("search", q="a"), answer("done")))
    wd = Watchdog(sidecar.api)
    provider = wd.setup_tracing("sdk-agent", endpoint=sidecar.otlp_http + "/v1/traces",
                                set_global=False)
    tracer = provider.get_tracer("agent")
    client = chat(sidecar)
    messages: list[Any] = [{"role": "user", "content": "find it"}]
    with wd.run(agent="sdk-traced") as run:
        if told_by == "heartbeat":
            wait_until(lambda: http_request("GET", f"{sidecar.api}/v1/runs/{run.id}")[0] == 200,
                       "the run announced")
        for _ in range(3):
            if told_by == "sync":
                run.before_model_call()
            headers: dict[str, str] = {}
            propagate.inject(headers)  # (the run's span is the current one)
            message = client.chat.completions.create(
                model=model, messages=messages, tools=TOOLS,
                extra_headers=headers).choices[0].message
            if not message.tool_calls:
                run.set_final_answer(message.content or "")
                break
            messages.append({"role": "assistant", "content": None,
                             "tool_calls": [c.model_dump() for c in message.tool_calls]})
            for tool_call in message.tool_calls:
                with tracer.start_as_current_span("execute_tool search", attributes=tool_attrs(
                        "search", tool_call.function.arguments, "ok")):
                    pass
                messages.append({"role": "tool", "tool_call_id": tool_call.id,
                                 "content": "ok"})
    wd.close()
    provider.shutdown()
    detail = wait_until(lambda: (d := sidecar.get_json(f"/v1/runs/{run.id}"))["state"]
                        == "ended" and d, "the SDK's run ends")
    assert detail["signals"]["iterations"] == 2 and detail["signals"]["tool_calls"] == 1
    assert [r["id"] for r in sidecar.get_json("/v1/runs?agent=sdk-traced")["runs"]] == [run.id]
    assert [r["id"] for r in sidecar.get_json("/v1/runs")["runs"]] == [run.id]


def test_a_call_the_agent_also_traces_counts_once(sidecar: RunningServer,
                                                  llm: FakeLLM) -> None:
    """The agent sends its traceparent and exports its own spans of the same calls (with the
    response ids): model calls, tool calls and tokens count once."""
    model = llm.script("traced", steps(call("search", q="a"), call("search", q="b"),
                                       answer("traced answer")))
    maker = SpanMaker({"service.name": "traced-agent"})
    client = chat(sidecar)
    messages: list[Any] = [{"role": "user", "content": "trace me"}]
    start = time.time()
    with maker.agent("invoke_agent traced", {"gen_ai.agent.name": "traced-agent"},
                     start=start, end=start + 30) as root:
        headers: dict[str, str] = {}
        propagate.inject(headers, context=trace.set_span_in_context(root))
        tokens = 0
        for step in range(3):
            response = client.chat.completions.create(model=model, messages=messages,
                                                       tools=TOOLS, extra_headers=headers)
            usage = response.usage
            assert usage is not None
            tokens += usage.prompt_tokens + usage.completion_tokens
            at = start + step
            maker.span("chat m", chat_attrs(usage.prompt_tokens, usage.completion_tokens,
                                            response.choices[0].finish_reason,
                                            **{"gen_ai.response.id": response.id}),
                       start=at, end=at + 0.2)
            message = response.choices[0].message
            if not message.tool_calls:
                break
            messages.append({"role": "assistant", "content": None,
                             "tool_calls": [c.model_dump() for c in message.tool_calls]})
            for tool_call in message.tool_calls:
                maker.span("execute_tool search", tool_attrs("search", "{}", "ok"),
                           start=at + 0.3, end=at + 0.4)
                messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": "ok"})
    trace_id = f"{root.get_span_context().trace_id:032x}"
    export_http(sidecar, maker.take())
    detail = wait_until(lambda: (d := _run(sidecar, f"trace:{trace_id}")) is not None
                        and d["state"] == "ended" and d, "the traced run ends")
    assert detail["signals"]["iterations"] == 3
    assert detail["signals"]["tool_calls"] == 2
    assert detail["signals"]["total_tokens"] == tokens
    assert detail["has_final_answer"]
    runs = sidecar.get_json("/v1/runs")["runs"]
    assert [run["id"] for run in runs] == [f"trace:{trace_id}"]  # no second run


def test_a_traced_call_is_booked_to_the_run_its_request_was_given(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Two client-SDK runs in one trace (a sub-agent's ``wd.run`` inside its caller's), both
    announced with the trace: a call is its request's run's, though the nested run announced
    itself while the call was with the model (the trace names the nested run when the
    response ends)."""
    trace_id = "3e" * 16
    heartbeat = f"{sidecar.api}/v1/runs/{{}}/heartbeat"

    def announce(run_id: str) -> None:
        body = json.dumps({"messages": 0, "announce": {"agent": "nesting"},
                           "trace_id": trace_id}).encode()
        status, _ = http_request("POST", heartbeat.format(run_id), body,
                                 {"Content-Type": "application/json"})
        assert status == 200

    announce("outer-run")
    # the nested run begins while the outer run's call is with the model
    model = llm.script("nesting", steps(answer("outer's answer"), answer("inner's answer")),
                       on_request=lambda index: announce("inner-run") if index == 0 else None)
    client = chat(sidecar, traceparent=f"00-{trace_id}-{'5a' * 8}-01")
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "go"}])
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "sub"}])
    wait_until(lambda: sidecar.get_json("/v1/runs/inner-run")["signals"]["iterations"] == 1,
               "the nested run's call booked")
    assert sidecar.get_json("/v1/runs/outer-run")["signals"]["iterations"] == 1


def _run(sidecar: RunningServer, key: str) -> dict[str, Any] | None:
    status, body = http_request("GET", f"{sidecar.api}/v1/runs/{key}")
    return json.loads(body) if status == 200 else None


def test_metrics_count_requests_and_steering(tmp_path: Path, llm: FakeLLM) -> None:
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url)
    model = llm.script("metered", looping("search", lambda i: {"q": str(i)},
                                          answer_without_tools="REPORT"))
    with running_server(config) as sidecar:
        client = chat(sidecar, **{"x-watchdog-agent": "metered",
                                  "x-watchdog-budget-tool-calls": "1"})
        assert loop(client, model, [{"role": "user", "content": "go"}]) == "REPORT"
        _, text = http_request("GET", sidecar.metrics + "/metrics")
    metrics = text.decode()
    assert ('agent_watchdog_model_requests_total{agent="metered",api="chat",outcome="steered"}'
            ' 2.0') in metrics
    assert 'agent_watchdog_model_steered_total{action="note",agent="metered"} 1.0' in metrics
    assert 'agent_watchdog_model_steered_total{action="final",agent="metered"} 1.0' in metrics
    assert 'agent_watchdog_model_upstream_duration_seconds_count{api="chat"} 2.0' in metrics


def test_a_stream_the_client_closes_after_its_last_event_counts_as_passed(
        tmp_path: Path, llm: FakeLLM) -> None:
    """The ``openai`` SDK closes a stream's connection as soon as it has read ``[DONE]``: the
    call had it all, so it counts as passed, never as cancelled (on both relays)."""
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url)
    model = llm.script("closer", steps(answer("done")))
    with running_server(config) as sidecar:
        for index in range(20):
            client = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key="sk-x",
                                   max_retries=0, default_headers={
                                       "x-watchdog-agent": "closer",
                                       "x-watchdog-budget-tool-calls": "5"})
            with client.chat.completions.create(model=model, stream=True, messages=[
                    {"role": "user", "content": f"task {index}"}]) as events:
                assert "".join(chunk.choices[0].delta.content or "" for chunk in events
                               if chunk.choices) == "done"
            client.close()
        prefix = 'agent_watchdog_model_requests_total{agent="closer",api="chat",outcome='

        def outcomes() -> dict[str, float]:
            _, text = http_request("GET", sidecar.metrics + "/metrics")
            return {line[len(prefix):].split('"')[1]: float(line.rsplit(" ", 1)[1])
                    for line in text.decode().splitlines() if line.startswith(prefix)}
        wait_until(lambda: sum(outcomes().values()) == 20, lambda: f"counted: {outcomes()}")
        assert outcomes() == {"passed": 20.0}


def test_a_looping_agent_is_wound_down_then_stopped(sidecar: RunningServer,
                                                    llm: FakeLLM) -> None:
    """The default pack's loop rule: a wind-down with a grace of two tool calls in the
    instructions, then the final no-tools request; its answer is the run's, and the upstream
    gets nothing more of that run."""
    model = llm.script("loop", looping("search", lambda _i: {"q": "same"},
                                       answer_without_tools="REPORT: I was looping"))
    client = chat(sidecar, **{"x-watchdog-agent": "looper"})
    messages: list[Any] = [{"role": "user", "content": "loop"}]
    assert loop(client, model, messages) == "REPORT: I was looping"
    requests = llm.requests(model)
    systems = [next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
               for body in requests]
    noted = [i for i, text in enumerate(systems) if "[grace: " in text]
    assert noted, systems
    assert "Loop: the same" in systems[noted[0]]  # the wind-down's own words
    assert "[grace: 2 tool calls left to wrap up]" in systems[noted[0]]
    assert requests[-1]["tool_choice"] == "none"
    assert sum(1 for m in messages if m["role"] == "tool") == len(requests) - 1
    assert len(requests) - 1 == noted[0] + 2  # exactly the two calls of the grace ran
    count = len(requests)
    messages.pop()  # the same request again: the run is over, answered by the endpoint
    again = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    assert again.choices[0].message.content == "REPORT: I was looping"
    assert not again.choices[0].message.tool_calls
    assert len(llm.requests(model)) == count
    run = wait_until(lambda: ended_runs(sidecar, "looper"), "the run ends")[0]
    assert run["terminal_state"] == "loop_detected" and run["has_final_answer"]


def test_beyond_loopback_the_endpoint_needs_the_token(tmp_path: Path, llm: FakeLLM) -> None:
    token = "t0ken-for-the-model-endpoint-1234"
    config = sidecar_config(tmp_path / "state", model_address="0.0.0.0:0", api_token=token,
                            model_upstream=llm.base_url)
    model = llm.script("guarded", steps(answer("hello")))
    with running_server(config) as sidecar:
        port = sidecar.server.addresses["model"][1]
        base = f"http://127.0.0.1:{port}/v1"
        plain = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            plain.chat.completions.create(model=model, messages=[{"role": "user",
                                                                  "content": "x"}])
        guarded = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0,
                                default_headers={"x-watchdog-token": token})
        reply = guarded.chat.completions.create(model=model, messages=[{"role": "user",
                                                                        "content": "x"}])
        assert reply.choices[0].message.content == "hello"
        # an agent that can set only its base URL (the chart's agentEnv in gateway mode)
        in_path = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/token/{token}/v1",
                                api_key=KEY, max_retries=0)
        reply = in_path.chat.completions.create(model=model, messages=[{"role": "user",
                                                                        "content": "y"}])
        assert reply.choices[0].message.content == "hello"
        wrong = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/token/{token}x/v1",
                              api_key=KEY, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as refused:
            wrong.chat.completions.create(model=model, messages=[{"role": "user",
                                                                  "content": "x"}])
        assert token not in str(refused.value)
        named = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/token/{token}/agent/triage/v1",
                              api_key=KEY, max_retries=0)
        reply = named.chat.completions.create(model=model, messages=[{"role": "user",
                                                                      "content": "z"}])
        assert reply.choices[0].message.content == "hello"
        assert wait_until(lambda: ended_runs(sidecar, "triage", token), "the run named in the path")
        # the name alone is no token
        alone = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/agent/triage/v1",
                              api_key=KEY, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            alone.chat.completions.create(model=model, messages=[{"role": "user",
                                                                  "content": "x"}])
    assert len(llm.request_headers(model)) == 3
    assert all("x-watchdog-token" not in headers for headers in llm.request_headers(model))


def test_a_traced_run_is_steered_before_its_spans_come(sidecar: RunningServer,
                                                       llm: FakeLLM) -> None:
    """An agent that sends its traceparent exports its spans later (batched): until then the
    tool results in its requests are what the countdown counts."""
    model = llm.script("traced-budget", looping("search", lambda i: {"q": str(i)},
                                                answer_without_tools="REPORT"))
    traceparent = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    client = chat(sidecar, traceparent=traceparent,
                  **{"x-watchdog-budget-tool-calls": "2"})
    assert loop(client, model, [{"role": "user", "content": "go"}]) == "REPORT"
    requests = llm.requests(model)
    assert len(requests) == 3
    assert "[budget: 2 of 2 tool calls left" in requests[0]["messages"][0]["content"]
    assert "[budget: 1 of 2 tool calls left" in requests[1]["messages"][0]["content"]
    assert requests[2]["tool_choice"] == "none"
    assert llm.request_headers(model)[0]["traceparent"] == traceparent  # passed on


def test_a_run_waiting_on_its_tools_or_its_model_is_not_idle(tmp_path: Path,
                                                             llm: FakeLLM) -> None:
    pack = tmp_path / "idle.yaml"
    pack.write_text("""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: quick-idle
rules:
  - name: quick-idle
    description: A test's idle timeout of half a second.
    when: "!run.ended && run.idle_seconds > 0.5 && run.in_flight == 0"
    action: abort
    severity: critical
    terminal_state: idle_timeout
    message: "[idle]"
""")
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, rules=(str(pack),),
                            eval_interval=0.05)
    clock = ManualClock()
    running: list[RunningServer] = []

    def a_second_passes() -> None:  # and the sidecar's timed rules are evaluated then
        clock.advance(1.0)
        assert running[0].server.service is not None
        running[0].call(running[0].server.service.tick)

    def model_works(index: int) -> None:  # the first call is in flight for a second
        if index == 0:
            a_second_passes()

    model = llm.script("slow", steps(call("search", q="a"), answer("done")),
                       on_request=model_works)
    with running_server(config, clock) as sidecar:
        running.append(sidecar)
        client = chat(sidecar, **{"x-watchdog-agent": "patient"})
        messages: list[Any] = [{"role": "user", "content": "go"}]
        first = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        tool_calls = first.choices[0].message.tool_calls or []
        a_second_passes()  # the tool runs at the agent for a second
        messages += [{"role": "assistant", "content": None,
                      "tool_calls": [c.model_dump() for c in tool_calls]},
                     {"role": "tool", "tool_call_id": tool_calls[0].id, "content": "ok"}]
        second = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        assert second.choices[0].message.content == "done"  # from the upstream: not aborted
        assert len(llm.requests(model)) == 2


ANSWER_TOOLS = [*TOOLS, {"type": "function", "function": {
    "name": "final_answer",
    "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}}}}]


def forced_or_search(index: int, body: dict[str, Any]) -> Step:
    """A model that searches on, and calls the tool a request's ``tool_choice`` names."""
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return call(choice["function"]["name"], answer="REPORT: searched a and b")
    return call("search", q=f"term {index}")


def test_an_agent_that_replays_its_calls_as_text_is_counted_and_answers_by_its_tool(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """As smolagents does: ``tool_choice: "required"``, calls and results replayed as plain
    text, the answer through a ``final_answer`` call. Budget 2: both calls count when the next
    request comes, the third request forces ``final_answer`` alone, and its call is the run's
    answer (never trimmed, never counted); the upstream gets nothing more."""
    model = llm.script("replayer", forced_or_search)
    client = chat(sidecar, **{"x-watchdog-run": "replayer-run",
                              "x-watchdog-budget-tool-calls": "2"})
    messages: list[Any] = [{"role": "system", "content": "You search."},
                           {"role": "user", "content": "find it"}]
    answer_text = None
    for _ in range(6):
        message = client.chat.completions.create(
            model=model, messages=messages, tools=ANSWER_TOOLS,
            tool_choice="required").choices[0].message
        assert message.tool_calls, "an agent like this one takes only tool calls"
        tool_call = message.tool_calls[0]
        if tool_call.function.name == "final_answer":
            answer_text = json.loads(tool_call.function.arguments)["answer"]
            break
        messages.append({"role": "assistant", "content": f"Calling tools:\n[{{'id': "
                         f"'{tool_call.id}', 'name': '{tool_call.function.name}'}}]"})
        messages.append({"role": "user", "content": "Observation:\nno file matches"})
    assert answer_text == "REPORT: searched a and b"
    requests = llm.requests(model)
    assert len(requests) == 3
    assert "[budget: 1 of 2 tool calls left" in requests[1]["messages"][0]["content"]
    last = requests[-1]
    assert last["tool_choice"] == {"type": "function", "function": {"name": "final_answer"}}
    assert [tool["function"]["name"] for tool in last["tools"]] == ["final_answer"]
    assert "all 2 tool calls used" in last["messages"][0]["content"]
    detail = wait_until(lambda: (d := sidecar.get_json("/v1/runs/replayer-run"))["state"]
                        == "ended" and d, "the run ends")
    assert detail["signals"]["tool_calls"] == 2 and detail["has_final_answer"]
    assert detail["terminal_state"] == "tool_limit_reached"


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_that_ignores_the_withdrawal_gives_the_agent_a_stop_note(
        sidecar: RunningServer, llm: FakeLLM, stream: bool) -> None:
    """The final request withdraws the tools and the model asks for one anyway: its call is
    trimmed, and the agent gets the stop note with the run's progress, never an empty answer
    — streamed as the request asked."""
    model = llm.script(f"stubborn-{stream}", steps(call("search", q="again")))
    client = chat(sidecar, **{"x-watchdog-run": f"stubborn-{stream}",
                              "x-watchdog-budget-tool-calls": "1"})
    messages: list[Any] = [{"role": "user", "content": "go"}]
    first = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    tool_calls = first.choices[0].message.tool_calls or []
    assert len(tool_calls) == 1
    messages += [{"role": "assistant", "content": None,
                  "tool_calls": [c.model_dump() for c in tool_calls]},
                 {"role": "tool", "tool_call_id": tool_calls[0].id, "content": "ok"}]
    if stream:
        text, calls, finish = "", 0, None
        for chunk in client.chat.completions.create(model=model, messages=messages,
                                                    tools=TOOLS, stream=True):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                calls += len(choice.delta.tool_calls or ())
                finish = choice.finish_reason or finish
    else:
        final = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        text = final.choices[0].message.content or ""
        calls, finish = len(final.choices[0].message.tool_calls or ()), \
            final.choices[0].finish_reason
    assert llm.requests(model)[-1]["tool_choice"] == "none"
    assert (calls, finish) == (0, "stop")
    assert text.startswith("The agent-watchdog stopped this run: the model asked for tools "
                           "again instead of its final report"), text
    assert "1 tool calls" in text  # the run's progress
    detail = wait_until(lambda: (d := sidecar.get_json(f"/v1/runs/stubborn-{stream}"))[
        "state"] == "ended" and d, "the run ends")
    assert detail["has_final_answer"] and detail["signals"]["tool_calls"] == 1


def test_runs_seen_only_through_the_endpoint_enter_a_loop_across_agents(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """An agent invoked again and again with the same request, each time given up while its
    tool ran (no answer: a script that starts the task again on the same failing approach),
    its calls seen through the endpoint alone: each call's input is hashed as a span's is, so
    the conversation's runs (one session) form the cycle ``[support]``; at the third, the run
    still going is wound down by the default pack's agent-ping-pong rule, and its next request
    carries the note. (Runs that each gave their answer repeat nothing:
    tests/test_agent_cycles.py, tests/frameworks/test_langchaingo.py.)"""
    model = llm.script("again", steps(call("search", q="one"), call("search", q="two"),
                                      call("search", q="x"), answer("three")))
    client = chat(sidecar, **{"x-watchdog-agent": "support"})
    for _ in range(2):
        reply = client.chat.completions.create(
            model=model, tools=TOOLS, messages=[{"role": "user", "content": "Refund order 42"}])
        assert reply.choices[0].message.tool_calls  # (and the agent never came back)
    wait_until(lambda: len(sidecar.get_json("/v1/runs?agent=support")["runs"]) == 2,
               "two runs given up")
    before = {run["id"] for run in sidecar.get_json("/v1/runs?agent=support")["runs"]}
    messages: list[Any] = [{"role": "user", "content": "Refund order 42"}]
    message = client.chat.completions.create(model=model, tools=TOOLS,
                                             messages=messages).choices[0].message
    assert message.tool_calls
    [run] = wait_until(lambda: [run for run in sidecar.get_json("/v1/runs?agent=support")["runs"]
                                if run["id"] not in before], "the third run")

    def told() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = sidecar.get_json(
            f"/v1/runs/{run['id']}/directives?after=0")["directives"]
        return [d for d in found if d["rule"] == "agent-ping-pong"]

    [directive] = wait_until(told, "the third run is told")
    assert directive["message"].startswith(
        "Loop across agents: support 3 times in a row with the same input")
    messages.append({"role": "assistant", "content": None,
                     "tool_calls": [c.model_dump() for c in message.tool_calls]})
    messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "ok"})
    client.chat.completions.create(model=model, tools=TOOLS, messages=messages)
    system = next(m["content"] for m in llm.requests(model)[-1]["messages"]
                  if m["role"] == "system")
    assert "Loop across agents: support 3 times" in system


def test_an_agent_sending_a_request_the_model_refuses_again_and_again_is_stopped(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """An agent that sends the same bad request again and again (its conversation over the
    model's context window: the API answers 400 every time) is stuck, not quiet: each refusal
    is a failed model call of its run, and the default pack's error-loop rule stops it at the
    5th, its next request answered with the stop note instead of another 400. A rate limit
    (429), which says nothing of the request, is no failed call."""
    def refuse(_index: int, _body: dict[str, Any]) -> Step:
        raise ValueError("This model's maximum context length is 8192 tokens")

    model = llm.script("refused", refuse)
    client = chat(sidecar, **{"x-watchdog-agent": "refused"})
    messages: list[Any] = [{"role": "user", "content": "a task " * 50}]
    for _ in range(5):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    answer = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    text = answer.choices[0].message.content or ""
    assert "Error loop" in text and "maximum context length" in text, text
    assert len(llm.requests(model)) == 5  # (the stopped request never reached the model)
    [run] = wait_until(lambda: ended_runs(sidecar, "refused"), "the run ended")
    assert (run["iterations"], run["errors"], run["terminal_state"]) == (
        5, 5, "loop_detected"), run


def test_a_run_abandoned_while_its_agent_runs_a_tool_is_resumed_when_it_comes_back(
        tmp_path: Path, llm: FakeLLM) -> None:
    """A tool that runs longer than ``run_end_timeout``: the run is abandoned meanwhile (a call
    in flight does not hold it open), and the agent's next request takes it back: active
    again, counted and steered as a live run (the countdown, then the final turn with the
    run's report prompt), ending ``tool_limit_reached`` at its rule-pack budget, never
    ``completed``."""
    pack = tmp_path / "budget.yaml"
    pack.write_text("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: three\n"
                    "budgets:\n  - agents: [\"*\"]\n    max_tool_calls: 3\n")
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, rules=(str(pack),),
                            run_end_timeout=60.0)
    clock = ManualClock()
    model = llm.script("slow-tool", looping("search", lambda i: {"q": str(i)},
                                            answer_without_tools="REPORT"))
    with running_server(config, clock) as sidecar:
        client = chat(sidecar, **{"x-watchdog-agent": "slow-tool"})
        messages: list[Any] = [{"role": "user", "content": "go"}]
        first = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        calls = first.choices[0].message.tool_calls or []
        key = wait_until(lambda: sidecar.get_json("/v1/runs?agent=slow-tool")["runs"],
                         "the run")[0]["id"]
        clock.advance(61.0)  # the tool runs past run_end_timeout
        assert sidecar.server.service is not None
        sidecar.call(sidecar.server.service.tick)
        detail = _run(sidecar, key)
        assert detail is not None
        assert (detail["state"], detail["terminal_state"]) == ("ended", "abandoned")
        messages += [{"role": "assistant", "content": None,
                      "tool_calls": [c.model_dump() for c in calls]},
                     {"role": "tool", "tool_call_id": calls[0].id, "content": "ok"}]
        second = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        detail = _run(sidecar, key)
        assert detail is not None
        assert (detail["state"], detail["terminal_state"]) == ("active", None)
        assert detail["signals"]["tool_calls"] == 1  # counted in the run it reads as
        calls = second.choices[0].message.tool_calls or []
        messages += [{"role": "assistant", "content": None,
                      "tool_calls": [c.model_dump() for c in calls]},
                     {"role": "tool", "tool_call_id": calls[0].id, "content": "ok"}]
        assert loop(client, model, messages) == "REPORT"
        requests = llm.requests(model)
        assert len(requests) == 4 and requests[-1]["tool_choice"] == "none"
        final = requests[-1]["messages"][0]["content"]
        assert "Run counters: tool calls 3 of 3" in final, final
        detail = wait_until(lambda: (d := _run(sidecar, key)) is not None
                            and d["state"] == "ended" and d, "the run ends")
        assert detail["terminal_state"] == "tool_limit_reached", detail
        assert detail["signals"]["tool_calls"] == 3
        assert len(sidecar.get_json("/v1/runs?agent=slow-tool")["runs"]) == 1


def test_a_runs_call_is_in_flight_from_when_its_request_came(tmp_path: Path,
                                                            llm: FakeLLM) -> None:
    """``in_flight_seconds`` counts from the request's arrival, through its model call and
    the tool calls the response handed over, on either relay: not from when the sidecar got
    round to reading the request or booking its response."""
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url)
    clock = ManualClock()
    model = llm.script("timed", steps(call("search", q="a"), answer("done")),
                       on_request=lambda index: clock.advance(1.0) if index == 0 else None)
    with running_server(config, clock) as sidecar:
        client = chat(sidecar, **{"x-watchdog-agent": "timed"})
        first = client.chat.completions.create(  # the model works for a second
            model=model, messages=[{"role": "user", "content": "go"}], tools=TOOLS)
        assert first.choices[0].message.tool_calls
        key = wait_until(lambda: sidecar.get_json("/v1/runs?agent=timed")["runs"],
                         "the run")[0]["id"]
        wait_until(lambda: (d := _run(sidecar, key)) is not None
                   and d["signals"]["iterations"] == 1, "the call booked")
        clock.advance(2.0)  # the tool runs at the agent for two seconds
        signals = (_run(sidecar, key) or {})["signals"]
        assert signals["in_flight"] == 1
        assert abs(signals["in_flight_seconds"] - 3.0) < 0.5, signals["in_flight_seconds"]


@pytest.mark.parametrize(("withdrawn", "later", "named"), [
    (False, False, False), (True, False, False), (False, True, False), (False, True, True)])
def test_a_side_request_on_the_runs_history_does_not_split_the_run(
        tmp_path: Path, llm: FakeLLM, withdrawn: bool, later: bool, named: bool) -> None:
    """An agent that asks the model something aside midway (a summary of the work so far: its
    history and a user message of its own, with no tools or with them withdrawn) and then goes
    on from its history without that exchange: its next request is shorter than the side one
    was, but it answers the calls its run handed over, so it is the same run going on (not an
    agent that started over, with a budget of its own): one run, the true countdown, never a
    tool call past the budget, and the report as the agent's output. ``later``: it goes on
    only once the aside's answer has ended the run (a run seen through the endpoint alone
    ends at an answer): its next request takes the run back, to be steered by the rules and
    end at its budget (the rule pack's, which the run's own signals do not carry). ``named``: the
    run is the one its ``x-watchdog-run`` header names, which is taken back the same way."""
    with aside_sidecar(tmp_path, llm) as sidecar:
        aside_loop(sidecar, llm, withdrawn, later, "aside-run-1" if named else None)


def aside_sidecar(tmp_path: Path, llm: FakeLLM) -> Any:
    """A sidecar whose rule pack gives ``aside-agent`` a budget of 3 tool calls, as its model
    endpoint in front of ``llm``."""
    pack = tmp_path / "budgets.yaml"
    pack.write_text("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: aside\nbudgets:\n"
                    "  - agents: [aside-agent]\n    max_tool_calls: 3\n")
    return running_server(sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                                         model_upstream=llm.base_url, rules=(str(pack),)))


RESPONSES_TOOLS: list[Any] = [{"type": "function", "name": "search",
                               "parameters": {"type": "object",
                                              "properties": {"q": {"type": "string"}}}}]


def test_a_side_request_of_a_kept_conversation_does_not_split_the_run(
        tmp_path: Path, llm: FakeLLM) -> None:
    """The Responses API, the conversation kept by the server (``previous_response_id``): the
    agent asks for a summary aside on the response it continues (the tool outputs and a user
    message of its own), whose answer ends the run, then goes on from that response with the
    same outputs. That request takes the run back, as a conversation sent whole does: one run,
    the true countdown, ended at its budget."""
    with aside_sidecar(tmp_path, llm) as sidecar:
        model = llm.script("aside-kept", looping("search", lambda i: {"q": str(i)},
                                                 answer_without_tools="REPORT"))
        client = chat(sidecar, **{"x-watchdog-agent": "aside-agent"})
        response = client.responses.create(model=model, input="Find the config file.",
                                           tools=RESPONSES_TOOLS)
        handed = 0
        for step in range(8):
            outputs: list[Any] = [
                {"type": "function_call_output", "call_id": item.call_id, "output": "nothing"}
                for item in response.output if item.type == "function_call"]
            if not outputs:
                break
            handed += len(outputs)
            if step == 0:
                client.responses.create(model=model, previous_response_id=response.id,
                                        input=[*outputs, {"role": "user",
                                                          "content": "Summarise the work."}])
                wait_until(lambda: ended_runs(sidecar, "aside-agent"), "the aside ends the run")
            response = client.responses.create(model=model, previous_response_id=response.id,
                                               input=outputs, tools=RESPONSES_TOOLS)
        assert (response.output_text, handed) == ("REPORT", 3)
        said = [LEFT.findall(body.get("instructions") or "") for body in llm.requests(model)
                if body.get("tools") and body.get("tool_choice") != "none"]
        assert said == [[("3", "3")], [("2", "3")], [("1", "3")]], said
        runs = wait_until(lambda: (runs := [run for run in sidecar.get_json(
            "/v1/runs?agent=aside-agent")["runs"]]) and all(run["state"] == "ended"
                                                            for run in runs) and runs,
            "the run ends")
        assert [(run["tool_calls"], run["iterations"], run["terminal_state"])
                for run in runs] == [(3, 5, "tool_limit_reached")], runs


def aside_loop(sidecar: RunningServer, llm: FakeLLM, withdrawn: bool, later: bool,
               named: str | None = None) -> None:
    model = llm.script("aside", looping("search", lambda i: {"q": str(i)},
                                        answer_without_tools="REPORT"))
    headers = {"x-watchdog-agent": "aside-agent"}
    if named is not None:
        headers["x-watchdog-run"] = named
    client = chat(sidecar, **headers)

    def midway(step: int, messages: list[Any]) -> list[Any]:
        if step == 0:
            aside = [*messages, {"role": "user", "content": "Summarise the work so far."}]
            offered: dict[str, Any] = {"tools": TOOLS, "tool_choice": "none"} if withdrawn else {}
            client.chat.completions.create(model=model, messages=aside, **offered)
            if later:
                wait_until(lambda: ended_runs(sidecar, "aside-agent"), "the aside ends the run")
        return messages

    assert budget_loop(client, model, midway) == ("REPORT", 3)
    check_one_run_counted_down(sidecar, llm, model)


def budget_loop(client: Any, model: str, midway: Any) -> tuple[str | None, int]:
    """The aside agent's tool loop, its history sent whole; after each step's tool results,
    ``midway(step, messages)``: the messages it goes on with. Its answer, and the tool calls
    it was handed."""
    messages: list[Any] = [{"role": "system", "content": "S"},
                           {"role": "user", "content": "Find the config file."}]
    handed = 0
    for step in range(8):
        message = client.chat.completions.create(model=model, messages=messages,
                                                 tools=TOOLS).choices[0].message
        if not message.tool_calls:
            break
        handed += len(message.tool_calls)
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [c.model_dump() for c in message.tool_calls]})
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "nothing"}
                     for c in message.tool_calls]
        messages = midway(step, messages)
    return message.content, handed


def check_one_run_counted_down(sidecar: RunningServer, llm: FakeLLM, model: str) -> None:
    """The aside agent's requests that offered tools were told the true count, 3 to 1, and
    the sidecar saw one run, ended at its budget of 3 tool calls, 5 model calls."""
    said = [LEFT.findall(body["messages"][0]["content"]) for body in llm.requests(model)
            if body.get("tools") and body.get("tool_choice") != "none"]
    assert said == [[("3", "3")], [("2", "3")], [("1", "3")]], said
    runs = wait_until(lambda: (runs := [run for run in sidecar.get_json(
        "/v1/runs?agent=aside-agent")["runs"]]) and all(run["state"] == "ended" for run in runs)
        and runs, "the run ends")
    assert [(run["tool_calls"], run["iterations"], run["terminal_state"]) for run in runs] == [
        (3, 5, "tool_limit_reached")], runs


def test_a_context_compacted_to_the_runs_summary_keeps_its_budget(
        tmp_path: Path, llm: FakeLLM) -> None:
    """An agent that compacts its context (as the Codex CLI does): midway it asks the model for
    a summary of its history aside (no tools), whose answer ends the run, then replaces its
    history by that summary quoted in a user message of its own — no tool results, shorter
    than the conversation was. That request goes on from the run's aside, so it takes the run
    back: one run, the true countdown, never a tool call past the budget."""
    summary = "Searched the config directories twice; nothing found yet."
    with aside_sidecar(tmp_path, llm) as sidecar:
        model = llm.script("compacting", looping("search", lambda i: {"q": str(i)},
                                                 answer_without_tools=summary))
        client = chat(sidecar, **{"x-watchdog-agent": "aside-agent"})

        def compacted(step: int, messages: list[Any]) -> list[Any]:
            if step != 1:
                return messages
            compact = [*messages, {"role": "user", "content": "Summarise the work."}]
            said = client.chat.completions.create(model=model, messages=compact)
            assert said.choices[0].message.content == summary
            wait_until(lambda: ended_runs(sidecar, "aside-agent"), "the aside ends the run")
            return [*messages[:2], {"role": "user",
                                    "content": f"A summary of the work so far:\n\n{summary}\n"}]

        assert budget_loop(client, model, compacted) == (summary, 3)
        check_one_run_counted_down(sidecar, llm, model)


def test_a_context_compacted_to_the_models_summary_keeps_its_budget(
        tmp_path: Path, llm: FakeLLM) -> None:
    """An agent that compacts its context as the Continue CLI does: midway it asks for a
    summary with its tools still offered (its history and a user message asking for it), whose
    answer ends the run, then replaces its history by that summary sent as the model's own
    message, no user message before it (a conversation with no first user message), and later
    a user message of its own ("continue"): each of these conversations opens with the answer
    the run gave, so each goes on in the run — one run, the true countdown, never a tool call
    past the budget (before: three runs, a budget of 3 each)."""
    summary = "Searched the config directories twice; nothing found yet."
    with aside_sidecar(tmp_path, llm) as sidecar:
        model = llm.script("compacting-as-model", looping(
            "search", lambda i: {"q": str(i)}, answer_without_tools="REPORT"))
        summarised = llm.script("summary", steps(answer(summary)))
        client = chat(sidecar, **{"x-watchdog-agent": "aside-agent"})

        def compacted(step: int, messages: list[Any]) -> list[Any]:
            if step == 0:
                compact = [*messages, {"role": "user", "content": "Summarise the work."}]
                said = client.chat.completions.create(model=summarised, messages=compact,
                                                      tools=TOOLS)
                assert said.choices[0].message.content == summary
                wait_until(lambda: ended_runs(sidecar, "aside-agent"), "the summary ends it")
                return [messages[0], {"role": "assistant", "content": summary}]
            if step == 1:
                return [*messages, {"role": "user", "content": "continue"}]
            return messages

        assert budget_loop(client, model, compacted) == ("REPORT", 3)
        said = [LEFT.findall(body["messages"][0]["content"]) for body in llm.requests(model)]
        assert said == [[("3", "3")], [("2", "3")], [("1", "3")], []], said
        runs = wait_until(lambda: (runs := sidecar.get_json(
            "/v1/runs?agent=aside-agent")["runs"]) and all(
                run["state"] == "ended" for run in runs) and runs, "the run ends")
        assert [(run["tool_calls"], run["iterations"], run["terminal_state"])
                for run in runs] == [(3, 5, "tool_limit_reached")], runs


def test_a_summarised_conversation_named_by_its_run_header_keeps_its_budget(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """The remedy the known limits give for an agent that collapses its history into
    ``[system, user: summary]``: its ``x-watchdog-run`` keeps it in its run, so the summary
    goes on against what is left of the budget (without it, a new run with a new budget)."""
    model = llm.script("summariser", looping("search", lambda i: {"q": str(i)},
                                             answer_without_tools="REPORT"))
    client = chat(sidecar, **{"x-watchdog-run": "summarised-run",
                              "x-watchdog-budget-tool-calls": "3"})
    messages: list[Any] = [{"role": "system", "content": "S"},
                           {"role": "user", "content": "Find the config file."}]
    handed = 0
    for _ in range(2):
        message = client.chat.completions.create(model=model, messages=messages,
                                                 tools=TOOLS).choices[0].message
        handed += len(message.tool_calls or [])
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [c.model_dump() for c in message.tool_calls or []]})
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "nothing"}
                     for c in message.tool_calls or []]
    messages = [messages[0], {"role": "user", "content": "Summary of the work so far: "
                                                        "searched twice, nothing found."}]
    for _ in range(5):
        message = client.chat.completions.create(model=model, messages=messages,
                                                 tools=TOOLS).choices[0].message
        if not message.tool_calls:
            break
        handed += len(message.tool_calls)
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [c.model_dump() for c in message.tool_calls]})
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "nothing"}
                     for c in message.tool_calls]
    assert message.content == "REPORT" and handed == 3
    detail = wait_until(lambda: (d := _run(sidecar, "summarised-run")) is not None
                        and d["state"] == "ended" and d, "the run ends")
    assert detail["signals"]["tool_calls"] == 3
    assert detail["terminal_state"] == "tool_limit_reached"


def test_a_session_the_client_names_is_its_runs_session(sidecar: RunningServer,
                                                        llm: FakeLLM) -> None:
    """A client that names its session in a header of its requests (Claude Code's
    ``X-Claude-Code-Session-Id``, a generic ``x-session-id``): each of its conversations is a
    run of that session, the one its spans name. A request that names none (the plain
    ``openai`` SDK), or a value no session id may be, keeps the session of its conversation."""
    model = llm.script("sessions", steps(*[answer(f"answer {index}") for index in range(5)]))
    asked = [("main task", {"X-Claude-Code-Session-Id": "cc-session-1"}),
             ("a sub-agent's task", {"X-Claude-Code-Session-Id": "cc-session-1",
                                     "x-claude-code-agent-id": "agent-7"}),
             ("another client's task", {"x-session-id": "generic-session"}),
             ("a plain request", {}),
             ("a bad session", {"x-session-id": "s" * 300})]
    for task, headers in asked:
        chat(sidecar).chat.completions.create(
            model=model, messages=[{"role": "user", "content": task}], extra_headers=headers)

    def all_ended() -> list[dict[str, Any]] | None:
        runs = ended_runs(sidecar, "pod-agent")
        return runs if len(runs) == len(asked) else None

    runs = wait_until(all_ended, "the runs to end")
    by_answer = {sidecar.get_json(f"/v1/runs/{run['id']}")["final_output"]: run["session"]
                 for run in runs}
    sessions = [by_answer[f"answer {index}"] for index in range(len(asked))]
    assert sessions[:3] == ["cc-session-1", "cc-session-1", "generic-session"], sessions
    for session in sessions[3:]:  # (as without the header: the conversation's own)
        assert session.startswith("model:") and session not in sessions[:3], sessions
    assert sessions[3] != sessions[4]
    assert all(headers.get("x-claude-code-session-id") == "cc-session-1"  # (passed on)
               for headers in llm.request_headers(model)[:2])


def _answer_id(sidecar: RunningServer, model: str, api: str, stream: bool) -> str:
    """One request of an agent's (no ``traceparent``), answered with no tool call: the id of
    the response it got, as its SDK read it."""
    if api == "messages":
        import anthropic

        claude = anthropic.Anthropic(base_url=sidecar.url("model"), api_key=KEY, max_retries=0)
        asked: dict[str, Any] = {"model": model, "max_tokens": 100,
                                 "messages": [{"role": "user", "content": "paired by id"}]}
        if stream:
            with claude.messages.stream(**asked) as events:
                return events.get_final_message().id
        return claude.messages.create(**asked).id
    client = chat(sidecar)
    if api == "responses":
        if stream:
            return next(event.response.id for event in client.responses.create(
                model=model, input="paired by id", stream=True)
                        if event.type == "response.completed")
        return client.responses.create(model=model, input="paired by id").id
    messages: list[Any] = [{"role": "user", "content": "paired by id"}]
    if stream:
        return next(chunk.id for chunk in client.chat.completions.create(
            model=model, messages=messages, stream=True))
    return client.chat.completions.create(model=model, messages=messages).id


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_a_call_traced_without_traceparent_is_paired_by_the_response_id_relayed(
        tmp_path: Path, llm: FakeLLM, api: str, stream: bool) -> None:
    """The agent sends no ``traceparent`` and exports its own span of the call, naming the
    response it got (``gen_ai.response.id``) and other token counts than the endpoint read (so
    only the id pairs them): its trace is the endpoint's run, one run, one model call, on each
    API, whole or streamed, on both relays (each records the id of the response it relayed)."""
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url,
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1"),
                            model_agent_name="pod-agent")
    model = llm.script(f"paired-{api}", steps(answer("the answer")))
    with running_server(config) as sidecar:
        response_id = _answer_id(sidecar, model, api, stream)
        wait_until(lambda: ended_runs(sidecar, "pod-agent"), "the endpoint's run ends")
        maker = SpanMaker({"service.name": "paired-agent"})
        start = time.time() - 5
        with maker.agent("invoke_agent paired", {"gen_ai.agent.name": "paired-agent"},
                         start=start, end=start + 2):
            maker.span("chat m", chat_attrs(1, 1, "stop", **{"gen_ai.response.id": response_id}),
                       start=start + 0.5, end=start + 1)
        export_http(sidecar, maker.take())
        detail = wait_until(lambda: (runs := sidecar.get_json("/v1/runs")["runs"]) and (
            d := sidecar.get_json(f"/v1/runs/{runs[0]['id']}"))["spans"] > 1 and d,
            "the span joins the run")
        runs = sidecar.get_json("/v1/runs")["runs"]
    assert [run["id"].split(":")[0] for run in runs] == ["model"], runs
    assert (detail["agent"], detail["signals"]["iterations"]) == ("paired-agent", 1), detail


def _iterations_then_runs(sidecar: RunningServer, agent: str, iterations: int
                          ) -> list[tuple[int, int]]:
    """(iterations, tool calls) of each of ``agent``'s ended runs, once they count
    ``iterations`` model calls in all."""
    runs = wait_until(lambda: (r := ended_runs(sidecar, agent)) and sum(
        run["iterations"] for run in r) == iterations and r, "the model calls recorded")
    return sorted((run["iterations"], run["tool_calls"]) for run in runs)


@pytest.mark.parametrize("delay", [0.0, 0.02, 0.15])
@pytest.mark.parametrize("api", ["chat", "messages"])
def test_a_person_who_quotes_the_agents_answer_asks_the_next_run(
        tmp_path: Path, llm: FakeLLM, api: str, delay: float) -> None:
    """A chat agent that offers no tools: each answer is its run's end. The person pastes that
    answer into their next message (the conversation sent whole, the answer in it as the
    model's), on the Chat and Messages APIs, the model answering in 0 to 150 ms: a new user
    message after the run ended, the next run — not the run taken back as an agent that
    compacted its context to a summary it asked for aside is."""
    said = "The config file is at /etc/app/config.yaml and it sets the port to 8080."
    model = llm.script(f"quoted-{api}-{delay}", steps(answer(said), answer("Port 8080.")),
                       delay=delay)
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, model_agent_name="pod-agent",
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1"))
    with running_server(config) as sidecar:
        def ask(messages: list[Any]) -> str | None:
            if api == "chat":
                return chat(sidecar).chat.completions.create(
                    model=model, messages=messages).choices[0].message.content
            message = anthropic.Anthropic(base_url=sidecar.url("model"), api_key=KEY,
                                          max_retries=0).messages.create(
                model=model, max_tokens=100, messages=messages)
            return "".join(block.text for block in message.content if block.type == "text")

        messages: list[Any] = [{"role": "user", "content": "Where is the config file?"}]
        assert ask(messages) == said
        wait_until(lambda: ended_runs(sidecar, "pod-agent"), "the answer ends the run")
        messages += [{"role": "assistant", "content": said},
                     {"role": "user", "content": f"You wrote:\n> {said}\nWhich port, in short?"}]
        assert ask(messages) == "Port 8080."
        assert _iterations_then_runs(sidecar, "pod-agent", 2) == [(1, 0), (1, 0)]


def test_two_invocations_whose_first_message_holds_the_first_ones_answer_are_two_runs(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """An agent asked to quote from its input, with no tools: its answer is in its first user
    message. A second invocation with the same first message quotes that answer as a new user
    message, but starts over (no longer than the first run's conversation): the next run."""
    quote_ = "the port is set to 8080 in the file /etc/app/config.yaml"
    ask = f"Quote the sentence about the port: 'Defaults: {quote_}. Logs go to stderr.'"
    model = llm.script("quoting", steps(answer(quote_)))
    client = chat(sidecar)
    for _ in range(2):
        said = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": ask}])
        assert said.choices[0].message.content == quote_
        wait_until(lambda: ended_runs(sidecar, "pod-agent"), "the answer ends the run")
    assert _iterations_then_runs(sidecar, "pod-agent", 2) == [(1, 0), (1, 0)]


def test_a_loop_that_sends_its_latest_call_back_without_its_result_counts_each_call(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """An agent that sends back, at each request, its task and only the model's latest answer,
    its tool calls, without their results (Inngest AgentKit's own loop): from the 3rd request
    on each is as long as the one before, but it ends with another call, the one it goes on
    from, so it is not that request sent again: each call handed over counts, one run."""
    model = llm.script("latest-call-only", steps(*(call("search", q=f"q{i}") for i in range(4)),
                                                 answer("done")))
    client = chat(sidecar, **{"x-watchdog-agent": "latest-call-only"})
    task: list[Any] = [{"role": "user", "content": "a task"}]
    history: list[Any] = []
    for _ in range(5):
        message = client.chat.completions.create(model=model, messages=task + history,
                                                 tools=TOOLS).choices[0].message
        if not message.tool_calls:
            break
        history = [message.model_dump(exclude_none=True)]
    assert message.content == "done"
    runs = wait_until(lambda: len(r := ended_runs(sidecar, "latest-call-only")) == 1 and r,
                      "one run")
    assert [(run["iterations"], run["tool_calls"]) for run in runs] == [(5, 4)]
