"""Run identity (DESIGN §3), in the pure tracker: one run per agent invocation, nested agents as
child runs, no run split in two, no two invocations merged. Spans come from a real tracer and
end children first, as an exporter sends them; the real-framework matrix is in
tests/frameworks/."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace

from tests.frameworks.harness import RECORDINGS, replay, runs_seen
from tests.harness import RunningServer, http_request
from tests.otel import export_http
from tests.spans import T0, SpanMaker, chat_attrs, encode, records_of, tool_attrs
from watchdog.core.runs.run import RunState
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.decode import parse_json, parse_protobuf
from watchdog.core.spans.pipeline import slices_of

AGENT = "gen_ai.operation.name"


def agent_attrs(name: str) -> dict[str, str]:
    return {AGENT: "invoke_agent", "gen_ai.agent.name": name}


def runs_by_agent(tracker: RunTracker) -> dict[str, RunState]:
    runs = [*tracker.active(), *tracker.ended()]
    assert len({run.agent_name for run in runs}) == len(runs), [r.agent_name for r in runs]
    return {run.agent_name: run for run in runs}


def test_agent_as_tool_is_a_child_run_with_its_own_signals() -> None:
    maker = SpanMaker()
    tracker = RunTracker()
    with maker.agent(attrs=agent_attrs("planner")) as root:
        maker.span("chat", chat_attrs(), parent=root)
        delegate = maker.open("execute_tool research", tool_attrs("research", '{"q": "x"}'),
                              parent=root, start=T0 + 1)
        inner = maker.open("invoke_agent researcher", agent_attrs("researcher"), parent=delegate,
                           start=T0 + 1)
        for i in range(3):
            maker.span("chat", chat_attrs(), parent=inner, start=T0 + 2 + i)
            maker.span("execute_tool search", tool_attrs("search", f'{{"q": {i}}}'), parent=inner,
                       start=T0 + 2 + i)
        maker.span("chat", chat_attrs(finish="stop"), parent=inner, start=T0 + 6)
        inner.end(int((T0 + 7) * 1e9))
        delegate.end(int((T0 + 7) * 1e9))
        maker.span("chat", chat_attrs(finish="stop"), parent=root, start=T0 + 8)
    # children first: the inner agent's calls reach the tracker before its agent span
    tracker.apply(records_of(maker.take()), T0 + 100)

    runs = runs_by_agent(tracker)
    planner, researcher = runs["planner"], runs["researcher"]
    assert (planner.iterations, planner.tool_calls) == (2, 1)
    assert (researcher.iterations, researcher.tool_calls) == (4, 3)
    assert researcher.parent_run == planner.key and planner.parent_run is None
    assert planner.terminal_state is researcher.terminal_state is TerminalState.COMPLETED
    assert [run.key for run in tracker.children(planner.key)] == [researcher.key]


def test_the_inner_agent_ending_first_is_demoted_when_its_outer_agent_arrives() -> None:
    """Under a workflow root, the first agent span to end is taken as the run's own agent until
    one that encloses it arrives."""
    maker = SpanMaker()
    tracker = RunTracker()
    with maker.agent("workflow", attrs={"openinference.span.kind": "CHAIN", AGENT: ""}) as root:
        outer = maker.open("invoke_agent lead", agent_attrs("lead"), parent=root)
        inner = maker.open("invoke_agent helper", agent_attrs("helper"), parent=outer)
        maker.span("execute_tool t", tool_attrs("t", "{}"), parent=inner)
        inner.end(int((T0 + 2) * 1e9))
        tracker.apply(records_of(maker.take()), T0 + 10)  # the helper arrives alone first
        maker.span("execute_tool u", tool_attrs("u", "{}"), parent=outer)
        outer.end(int((T0 + 3) * 1e9))
    tracker.apply(records_of(maker.take()), T0 + 20)

    runs = runs_by_agent(tracker)
    lead, helper = runs["lead"], runs["helper"]
    assert (lead.tool_calls, helper.tool_calls) == (1, 1)
    assert helper.parent_run == lead.key and lead.ended and helper.ended


def test_a_handoff_is_a_child_run_and_the_first_agents_limit_is_the_runs_outcome() -> None:
    """The OpenAI Agents SDK shape: a workflow root that ends OK above agent spans; the limit
    stop lives only on the agent span's status."""
    maker = SpanMaker()
    tracker = RunTracker()
    with maker.agent("Agent workflow", attrs={"openinference.span.kind": "CHAIN",
                                              AGENT: ""}) as root:
        triage = maker.open("triage", {"openinference.span.kind": "AGENT", "agent.name": "triage"},
                            parent=root)
        maker.span("execute_tool transfer", tool_attrs("transfer_to_billing", "{}"), parent=triage)
        triage.end(int((T0 + 1) * 1e9))
        billing = maker.open("billing", {"openinference.span.kind": "AGENT",
                                         "agent.name": "billing"}, parent=root, start=T0 + 1)
        for i in range(3):
            maker.span("execute_tool lookup", tool_attrs("lookup", f'{{"n": {i}}}'),
                       parent=billing, start=T0 + 2)
        maker.span("chat", chat_attrs(finish="stop"), parent=billing, start=T0 + 3)
        billing.end(int((T0 + 4) * 1e9))
    tracker.apply(records_of(maker.take()), T0 + 10)

    runs = runs_by_agent(tracker)
    triage_run, billing_run = runs["triage"], runs["billing"]
    assert billing_run.parent_run == triage_run.key
    assert (triage_run.tool_calls, billing_run.tool_calls) == (1, 3)


def test_openlit_openai_agents_turns_and_handoff_leave_one_run_per_agent() -> None:
    """OpenLIT's OpenAI Agents shape: a workflow root named after the SDK's trace, the SDK's
    task and turn spans as bare ``invoke_agent``, a handoff as ``invoke_agent <to>`` naming its
    source inside the first agent, the agent handed to a sibling after it."""
    maker = SpanMaker()
    tracker = RunTracker()
    bare = {AGENT: "invoke_agent"}
    with maker.agent("invoke_workflow Agent workflow", attrs={
            AGENT: "invoke_workflow", "gen_ai.workflow.name": "Agent workflow"}) as root:
        task = maker.open("invoke_agent", bare, parent=root)
        triage = maker.open("invoke_agent triage", agent_attrs("triage"), parent=task)
        turn = maker.open("invoke_agent", bare, parent=triage)
        maker.span("chat", chat_attrs(finish="tool_calls"), parent=turn)
        maker.span("invoke_agent billing", {**agent_attrs("billing"),
                                             "gen_ai.agent.source": "triage"}, parent=turn)
        turn.end(int((T0 + 1) * 1e9))
        triage.end(int((T0 + 1) * 1e9))
        billing = maker.open("invoke_agent billing", agent_attrs("billing"), parent=task,
                             start=T0 + 1)
        for i in range(2):
            turn = maker.open("invoke_agent", bare, parent=billing, start=T0 + 2)
            maker.span("chat", chat_attrs(finish="tool_calls" if i == 0 else "stop"),
                       parent=turn, start=T0 + 2)
            if i == 0:
                maker.span("execute_tool lookup", tool_attrs("lookup", "{}"), parent=turn,
                           start=T0 + 2)
            turn.end(int((T0 + 3) * 1e9))
        billing.end(int((T0 + 4) * 1e9))
        task.end(int((T0 + 5) * 1e9))
    tracker.apply(records_of(maker.take()), T0 + 10)

    runs = runs_by_agent(tracker)
    assert set(runs) == {"triage", "billing"}  # the workflow's name yields to its agent's
    triage_run, billing_run = runs["triage"], runs["billing"]
    assert billing_run.parent_run == triage_run.key
    assert (triage_run.iterations, triage_run.tool_calls) == (1, 1)  # the handoff
    assert (billing_run.iterations, billing_run.tool_calls) == (2, 1)
    assert billing_run.ended and billing_run.terminal_state is TerminalState.COMPLETED, (
        billing_run.ended, billing_run.terminal_state, billing_run.finish_reason)


def test_loose_model_calls_of_one_agent_are_one_run_until_it_answers() -> None:
    """A home-grown loop traced only by its OpenAI client's instrumentation: each model call is
    a trace of its own."""
    maker = SpanMaker({"service.name": "home-grown"})
    tracker = RunTracker(loose_run_gap=60.0)
    for invocation in (0, 5):  # two invocations, one after the other, in one export batch
        for step in range(3):
            maker.span("chat gpt", chat_attrs(finish="tool_calls"), start=T0 + invocation + step)
        maker.span("chat gpt", chat_attrs(finish="stop"), start=T0 + invocation + 4)
    tracker.apply(records_of(maker.take()), T0 + 10)
    maker.span("chat gpt", chat_attrs(finish="tool_calls"), start=T0 + 30)
    tracker.apply(records_of(maker.take()), T0 + 30)

    ended = list(tracker.ended())
    assert [run.iterations for run in ended] == [4, 4]
    assert all(run.terminal_state is TerminalState.COMPLETED for run in ended)
    (open_run,) = tracker.active()
    assert open_run.iterations == 1
    assert tracker.expire(T0 + 30 + 59) == []
    assert tracker.expire(T0 + 30 + 61) == [open_run]
    assert open_run.terminal_state is TerminalState.NO_RESPONSE  # it stopped; not abandoned


def test_loose_calls_of_two_agents_are_two_runs() -> None:
    maker = SpanMaker({"service.name": "home-grown"})
    tracker = RunTracker()
    for step in range(2):
        for name in ("alpha", "beta"):
            maker.span("chat", chat_attrs(finish="tool_calls", **{"gen_ai.agent.name": name}),
                       start=T0 + step)
    tracker.apply(records_of(maker.take()), T0 + 10)
    assert sorted((run.agent_name, run.iterations) for run in tracker.active()) == [
        ("alpha", 2), ("beta", 2)]


def test_a_call_id_keyed_child_learns_its_parent_from_the_span_it_hangs_from() -> None:
    """pydantic-ai stamps each agent run's own gen_ai.agent.call.id on its spans; the span a
    sub-agent's agent span hangs from (the parent's tool span) ends after it."""
    maker = SpanMaker()
    tracker = RunTracker()
    outer_id = {"gen_ai.agent.call.id": "call-outer"}
    inner_id = {"gen_ai.agent.call.id": "call-inner"}
    with maker.agent(attrs={**agent_attrs("boss"), **outer_id}) as root:
        tool = maker.open("execute_tool ask", {**tool_attrs("ask", "{}"), **outer_id},
                          parent=root)
        inner = maker.open("invoke_agent worker", {**agent_attrs("worker"), **inner_id},
                           parent=tool)
        maker.span("chat", {**chat_attrs(finish="stop"), **inner_id}, parent=inner)
        inner.end(int((T0 + 1) * 1e9))
        tracker.apply(records_of(maker.take()), T0 + 5)  # the child ends in its own batch
        tool.end(int((T0 + 2) * 1e9))
    tracker.apply(records_of(maker.take()), T0 + 10)

    worker, boss = tracker.get("call-inner"), tracker.get("call-outer")
    assert worker is not None and boss is not None
    assert worker.parent_run == "call-outer" and boss.tool_calls == 1 and boss.iterations == 0
    assert worker.iterations == 1


def test_the_api_lists_a_runs_children_and_the_report_shows_the_tree(
        sidecar: RunningServer) -> None:
    maker = SpanMaker()
    with maker.agent(attrs=agent_attrs("planner")) as root:
        delegate = maker.open("execute_tool research", tool_attrs("research", "{}"), parent=root)
        inner = maker.open("invoke_agent researcher", agent_attrs("researcher"), parent=delegate)
        maker.span("chat", chat_attrs(finish="stop"), parent=inner)
        inner.end(int((T0 + 1) * 1e9))
        delegate.end(int((T0 + 2) * 1e9))
    export_http(sidecar, maker.take())
    sidecar.flush()

    (top,) = [run for run in sidecar.get_json("/v1/runs")["runs"] if run["agent"] == "planner"]
    detail = sidecar.get_json(f"/v1/runs/{top['id']}")
    (child,) = detail["children"]
    assert child["agent"] == "researcher" and child["terminal_state"] == "completed"
    assert sidecar.get_json(f"/v1/runs/{child['id']}")["parent_run"] == top["id"]
    status, body = http_request("GET", f"{sidecar.api}/v1/runs/{top['id']}/report")
    assert status == 200
    tree = body.decode().split("## Run tree")[1].split("##")[0]
    assert f"**this run** `{top['id']}` (planner)" in tree
    assert f"`{child['id']}` (researcher): completed, 1 model calls, 0 tool calls" in tree


def test_tool_calls_hung_below_a_loose_model_call_join_its_run() -> None:
    """grafana-agento11y-hermes: one trace per model call, the tool calls it requested as its
    children (ending after it)."""
    maker = SpanMaker({"service.name": "hermes-service"})
    tracker = RunTracker()
    names = {"gen_ai.agent.name": "hermes", "gen_ai.conversation.id": "s1"}
    for step in range(3):
        model = maker.span("chat m", chat_attrs(finish="tool_calls", **names), start=T0 + step)
        maker.span("execute_tool lookup", tool_attrs("lookup", f'{{"k": {step}}}', **names),
                   parent=model, start=T0 + step + 0.5)
        tracker.apply(records_of(maker.take()), T0 + 10 + step)
    maker.span("chat m", chat_attrs(finish="stop", **names), start=T0 + 5)
    tracker.apply(records_of(maker.take()), T0 + 20)

    (run,) = tracker.ended()
    assert (run.iterations, run.tool_calls, run.terminal_state) == (
        4, 3, TerminalState.COMPLETED)
    assert list(tracker.active()) == []


def test_one_invocation_seen_by_two_instrumentations_is_one_run() -> None:
    """google-adk with OpenInference: ``agent_run [x]`` (OpenInference AGENT) around ADK's own
    ``invoke_agent x``, under a CHAIN root."""
    maker = SpanMaker()
    tracker = RunTracker()
    with maker.agent("invocation [app]", attrs={"openinference.span.kind": "CHAIN",
                                                AGENT: ""}) as root:
        wrapper = maker.open("agent_run [adk]", {"openinference.span.kind": "AGENT",
                                                 "agent.name": "adk"}, parent=root)
        native = maker.open("invoke_agent adk", agent_attrs("adk"), parent=wrapper)
        for i in range(2):
            maker.span("call_llm", {AGENT: "generate_content"}, parent=native, start=T0 + i)
            maker.span("execute_tool lookup", tool_attrs("lookup", f'{{"k": {i}}}'),
                       parent=native, start=T0 + i)
        native.end(int((T0 + 3) * 1e9))
        wrapper.end(int((T0 + 3) * 1e9))
    tracker.apply(records_of(maker.take()), T0 + 10)

    (run,) = tracker.ended()
    assert (run.agent_name, run.iterations, run.tool_calls) == ("adk", 2, 2)
    assert list(tracker.active()) == []


def test_a_managed_agent_under_a_step_of_an_agent_with_calls_of_its_own_is_a_child() -> None:
    """smolagents: a manager's step runs a managed agent directly (no tool span), and agent
    names are not always known: the manager's own model calls tell it is another invocation."""
    maker = SpanMaker()
    tracker = RunTracker()
    with maker.agent("manager.run", attrs={"openinference.span.kind": "AGENT", AGENT: ""}) as root:
        step = maker.open("Step 1", {"openinference.span.kind": "CHAIN"}, parent=root)
        maker.span("model", {"openinference.span.kind": "LLM"}, parent=step)
        inner = maker.open("researcher.run", {"openinference.span.kind": "AGENT"}, parent=step)
        maker.span("model", {"openinference.span.kind": "LLM"}, parent=inner)
        maker.span("lookup", {"openinference.span.kind": "TOOL", "tool.name": "lookup",
                              "input.value": "{}"}, parent=inner)
        inner.end(int((T0 + 2) * 1e9))
        step.end(int((T0 + 3) * 1e9))
    tracker.apply(records_of(maker.take()), T0 + 10)

    runs = sorted([*tracker.ended()], key=lambda run: run.iterations + run.tool_calls)
    manager, researcher = runs
    assert researcher.parent_run == manager.key
    assert (manager.iterations, manager.tool_calls) == (1, 0)
    assert (researcher.iterations, researcher.tool_calls) == (1, 1)


def test_an_empty_sub_agent_span_takes_the_spans_beside_it_that_carry_its_name() -> None:
    """LangGraph under OpenLLMetry: a sub-agent's ``invoke_agent`` span has nothing below it;
    its work hangs from a sibling task span, every span naming its agent."""
    maker = SpanMaker()
    tracker = RunTracker()
    lc = "traceloop.association.properties.lc_agent_name"
    with maker.agent(attrs=agent_attrs("manager")) as root:
        maker.span("chat", {**chat_attrs(), lc: "manager"}, parent=root)
        tool = maker.open("execute_tool research", {**tool_attrs("research", "{}"), lc: "manager"},
                          parent=root)
        task = maker.open("execute_task researcher", {lc: "researcher"}, parent=tool)
        for i in range(2):
            maker.span("chat", {**chat_attrs(), lc: "researcher"}, parent=task, start=T0 + i)
        maker.span("execute_tool lookup", {**tool_attrs("lookup", "{}"), lc: "researcher"},
                   parent=task)
        task.end(int((T0 + 3) * 1e9))
        maker.span("invoke_agent researcher", agent_attrs("researcher"), parent=tool)
        tool.end(int((T0 + 4) * 1e9))
        maker.span("chat", {**chat_attrs(finish="stop"), lc: "manager"}, parent=root)
    tracker.apply(records_of(maker.take()), T0 + 10)

    runs = runs_by_agent(tracker)
    manager, researcher = runs["manager"], runs["researcher"]
    assert researcher.parent_run == manager.key
    assert (manager.iterations, manager.tool_calls) == (2, 1)
    assert (researcher.iterations, researcher.tool_calls) == (2, 1)


def test_the_inner_view_of_an_invocation_ending_after_the_outer_is_still_one_run() -> None:
    """Async instrumentations may end the wrapper (OpenInference's ``agent_run``) before the
    framework's own ``invoke_agent`` inside it."""
    maker = SpanMaker()
    tracker = RunTracker()
    with maker.agent("invocation [app]", attrs={"openinference.span.kind": "CHAIN",
                                                AGENT: ""}) as root:
        wrapper = maker.open("agent_run [adk]", {"openinference.span.kind": "AGENT",
                                                 "agent.name": "adk"}, parent=root)
        native = maker.open("invoke_agent adk", agent_attrs("adk"), parent=wrapper)
        maker.span("call_llm", {AGENT: "generate_content"}, parent=native)
        maker.span("execute_tool lookup", tool_attrs("lookup", "{}"), parent=native)
        wrapper.end(int((T0 + 3) * 1e9))
        tracker.apply(records_of(maker.take()), T0 + 5)
        native.end(int((T0 + 3.1) * 1e9))
    tracker.apply(records_of(maker.take()), T0 + 10)

    (run,) = tracker.ended()
    assert (run.agent_name, run.iterations, run.tool_calls) == ("adk", 1, 1)


def test_one_exception_on_nested_spans_is_one_error_in_the_report_too(
        sidecar: RunningServer) -> None:
    """google-adk: a tool's RuntimeError is also on its agent and workflow spans."""
    replay(sidecar, RECORDINGS / "google_adk_native" / "tool_error.jsonl")
    (run,) = runs_seen(sidecar, 1)
    report = sidecar.get_json(f"/v1/runs/{run['id']}/report",
                              headers={"Accept": "application/json"})
    assert report["run"]["errors"] == run["errors"] == 1
    assert [(error["count"], error["names"]) for error in report["errors"]] == [(1, ["lookup"])]


def test_an_answer_that_arrives_after_the_run_ended_completes_it() -> None:
    """Spans can reach the sidecar out of the order they ended (a sync and an export, or two
    exporters): the agent span first, the model call that answered after it."""
    maker = SpanMaker()
    tracker = RunTracker()
    with maker.agent(attrs=agent_attrs("writer")) as root:
        maker.span("chat", chat_attrs(finish="stop"), parent=root)
    answer, agent = records_of(maker.take())
    tracker.apply([agent], T0 + 5)
    (run,) = tracker.ended()
    assert run.terminal_state is TerminalState.NO_RESPONSE
    tracker.apply([answer], T0 + 6)
    assert (run.terminal_state, run.has_final_answer) == (TerminalState.COMPLETED, True)


def _prompt_function(maker: SpanMaker, answer: str = "stop", *, call_ids: bool = True,
                     parent: trace.Span | None = None, start: float = T0,
                     **root_attrs: object) -> None:
    """Semantic Kernel's ``kernel.invoke_prompt`` with auto function calling: the prompt
    function's ``execute_tool`` (no call id: no model asked for it) is the trace root (or hangs
    from ``parent``), above the model calls and the tool calls they asked for (with call ids).
    """
    root = maker.open("execute_tool func3f2a",
                      {**tool_attrs("func3f2a", "{}", "[ChatMessageContent(content='done')]"),
                       **root_attrs}, parent=parent, start=start)
    for step, key in enumerate("abc"):
        maker.span("chat m", chat_attrs(finish="tool_calls", **root_attrs), parent=root,
                   start=start + step + 0.1)
        ids = {"gen_ai.tool.call.id": f"call_{key}"} if call_ids else {}
        maker.span("execute_tool lookup",
                   tool_attrs("lookup", f'{{"key": "{key}"}}', **ids, **root_attrs),
                   parent=root, start=start + step + 0.6)
    maker.span("chat m", chat_attrs(finish=answer, **root_attrs), parent=root, start=start + 3.1)
    root.end(int((start + 4) * 1e9))


def test_a_root_tool_call_no_model_asked_for_is_the_invocation() -> None:
    """Its model and tool calls are the run's, it is no tool call, and it ends the run; two
    invocations are two runs, in one batch or span by span."""
    for per_span in (False, True):
        maker = SpanMaker({"service.name": "sk-app"})
        tracker = RunTracker()
        _prompt_function(maker)
        _prompt_function(maker)
        spans = maker.take()
        for batch in ([[span] for span in spans] if per_span else [spans]):
            tracker.apply(records_of(batch), T0 + 10)
        runs = list(tracker.ended())
        assert not list(tracker.active())
        assert [(run.iterations, run.tool_calls, run.tools) for run in runs] == \
            [(4, 3, {"lookup": 3})] * 2
        assert all(run.terminal_state is TerminalState.COMPLETED and run.has_final_answer
                   and run.agent_name == "sk-app" for run in runs)
        # the answering model call carries no text: what the function returned is the output
        assert runs[0].final_output == "[ChatMessageContent(content='done')]"


def test_an_unasked_root_answers_only_if_its_model_calls_say_nothing() -> None:
    maker = SpanMaker()
    tracker = RunTracker()
    _prompt_function(maker, answer="tool_calls")  # the loop stopped at a tool request
    tracker.apply(records_of(maker.take()), T0 + 10)
    (run,) = tracker.ended()
    assert run.terminal_state is TerminalState.NO_RESPONSE and not run.has_final_answer
    assert run.final_output == "[ChatMessageContent(content='done')]"  # output, no answer

    maker = SpanMaker()
    tracker = RunTracker()
    root = maker.open("execute_tool func3f2a", tool_attrs("func3f2a", "{}", "the answer"))
    maker.span("chat m", {"gen_ai.operation.name": "chat"}, parent=root)  # says nothing
    root.end(int((T0 + 4) * 1e9))
    tracker.apply(records_of(maker.take()), T0 + 10)
    (run,) = tracker.ended()
    assert run.terminal_state is TerminalState.COMPLETED and run.final_output == "the answer"
    assert (run.iterations, run.tool_calls) == (1, 0)


def test_a_root_tool_call_without_model_calls_below_stays_a_tool_call() -> None:
    """A tool call that lost its context (or code calling a plain function): nothing to
    frame, so it is counted as the loose tool call it is, with no call id or with one."""
    maker = SpanMaker()
    tracker = RunTracker(loose_run_gap=60.0)
    maker.span("chat m", chat_attrs(finish="tool_calls"), start=T0)
    maker.span("execute_tool lookup", tool_attrs("lookup", '{"key": "a"}', "x"), start=T0 + 1)
    maker.span("execute_tool lookup", tool_attrs("lookup", '{"key": "b"}', "y",
                                                 **{"gen_ai.tool.call.id": "call_b"}),
               start=T0 + 2)
    tracker.apply(records_of(maker.take()), T0 + 10)
    (run,) = tracker.active()
    assert (run.iterations, run.tool_calls) == (1, 2)


@pytest.mark.parametrize("key", ["watchdog.run.id", "gen_ai.agent.call.id"])
def test_an_unasked_tool_call_inside_a_named_run_is_the_frame_of_its_model_loop(key: str) -> None:
    """The client SDK's run around ``kernel.invoke_prompt`` (twice): the prompt function runs
    the model loop, it is no tool call of the run — applied whole, span by span, and with
    its request sliced every way."""
    maker = SpanMaker()
    with maker.agent(attrs={key: "r1"}) as run_span:
        _prompt_function(maker, parent=run_span, **{key: "r1"})
        _prompt_function(maker, parent=run_span, start=T0 + 5, **{key: "r1"})
    spans = maker.take()
    request = parse_protobuf(encode(spans).SerializeToString())
    batches = [[records_of([span]) for span in spans]] + [
        [decoded.records for decoded in slices_of(request, size)] for size in range(1, 20)]
    for records in batches:
        tracker = RunTracker()
        for batch in records:
            tracker.apply(batch, T0 + 20)
        run = tracker.get("r1")
        assert run is not None and (run.iterations, run.tool_calls, run.tools) == (
            8, 6, {"lookup": 6})
        assert run.terminal_state is TerminalState.COMPLETED and run.has_final_answer


def test_an_unasked_tool_call_with_no_model_call_inside_stays_a_tool_call() -> None:
    """A home-grown loop's tool span without a call id, after the model call that asked for
    it; a sub-agent called as a tool (an agent ran inside it): tool calls."""
    maker = SpanMaker()
    with maker.agent(attrs={"watchdog.run.id": "r1"}) as run_span:
        maker.span("chat m", chat_attrs(finish="tool_calls"), parent=run_span, start=T0)
        maker.span("execute_tool lookup", tool_attrs("lookup", "{}", "x"), parent=run_span,
                   start=T0 + 0.5)
        delegate = maker.open("execute_tool research", tool_attrs("research", "{}"),
                              parent=run_span, start=T0 + 1)
        with trace.use_span(delegate, end_on_exit=False):
            inner = maker.open("invoke_agent researcher", agent_attrs("researcher"),
                               start=T0 + 1.1)
            maker.span("chat m", chat_attrs(finish="stop"), parent=inner, start=T0 + 1.2)
            inner.end(int((T0 + 2) * 1e9))
        delegate.end(int((T0 + 2.5) * 1e9))
        maker.span("chat m", chat_attrs(finish="stop"), parent=run_span, start=T0 + 3)
    tracker = RunTracker()
    tracker.apply(records_of(maker.take()), T0 + 10)
    run = tracker.get("r1")
    assert run is not None and run.tools == {"lookup": 1, "research": 1}


@pytest.mark.parametrize("split", [None, 1, 2], ids=["one-request", "calls-first", "call-first"])
def test_a_run_id_on_the_root_alone_names_its_trace_however_it_is_exported(
        split: int | None) -> None:
    """``watchdog.run.id`` on the agent root span alone, its model and tool calls naming none:
    one run of that id, whether the calls come in the root's request or in earlier ones (an
    exporter sends children first): the run they opened under the trace's key is folded into
    the named one when the root comes."""
    maker = SpanMaker()
    with maker.agent(attrs={"watchdog.run.id": "r1"}, end=T0 + 5) as run_span:
        maker.span("chat m", chat_attrs(finish="tool_calls"), parent=run_span, start=T0)
        maker.span("execute_tool lookup", tool_attrs("lookup", "{}", "x"), parent=run_span,
                   start=T0 + 1)
        maker.span("chat m", chat_attrs(finish="stop"), parent=run_span, start=T0 + 2)
    records = records_of(maker.take())
    assert [record.run_key for record in records][-1] == "r1"
    tracker = RunTracker()
    parts = [records] if split is None else [records[:split], records[split:-1], records[-1:]]
    for now, part in enumerate(parts):
        if part:
            tracker.apply(part, T0 + 10 + now)
    tracker.expire(1e12)
    assert [(run.key, run.iterations, run.tool_calls, run.terminal_state)
            for run in tracker.ended()] == [("r1", 2, 1, TerminalState.COMPLETED)]


def test_call_ids_lost_below_an_unasked_root_still_one_run() -> None:
    # the tool calls' own ids do not matter: no model call ran inside them
    maker = SpanMaker()
    tracker = RunTracker()
    _prompt_function(maker, call_ids=False)
    tracker.apply(records_of(maker.take()), T0 + 10)
    (run,) = tracker.ended()
    assert (run.iterations, run.tool_calls, run.terminal_state) == (
        4, 3, TerminalState.COMPLETED)


def test_an_unasked_root_before_its_last_model_calls_in_a_batch() -> None:
    """An export request groups spans by instrumentation scope: Semantic Kernel's prompt
    function shares its scope with the tool calls, so it may come before the model calls that
    ended before it. The run ends with it, and the late answer completes it."""
    maker = SpanMaker()
    tracker = RunTracker()
    _prompt_function(maker)
    records = records_of(maker.take())
    tracker.apply(records[:2], T0 + 5)  # a model call and the tool call it asked for
    rest = records[2:]
    tools = [record for record in rest if record.name != "chat m"]  # and the root, last
    tracker.apply(tools + [record for record in rest if record.name == "chat m"], T0 + 10)
    (run,) = tracker.ended()
    assert (run.iterations, run.tool_calls, run.terminal_state, run.has_final_answer) == (
        4, 3, TerminalState.COMPLETED, True)
    assert run.final_output == "[ChatMessageContent(content='done')]"


# -- a request's order is by scope, not by end time ----------------------------------------------

def _first_reported(bodies: list[bytes], size: int | None) -> dict[str, tuple[object, ...]]:
    """Each run's outcome as first reported ended (what metrics and the run_ended event see),
    with every request applied ``size`` spans at a time, as the receivers slice them."""
    tracker = RunTracker()
    seen: dict[str, tuple[object, ...]] = {}
    for index, body in enumerate(bodies):
        request = parse_json(body) if body.startswith(b"{") else parse_protobuf(body)
        for part in slices_of(request, size):
            for run in tracker.apply(part.records, T0 + index).ended:
                seen.setdefault(run.key, (run.terminal_state, run.has_final_answer,
                                          run.iterations, run.tool_calls))
    return seen


def test_an_agent_span_before_its_answer_in_one_request_ends_the_run_answered() -> None:
    """An exporter groups a request's spans by instrumentation scope: the agent framework's
    span may come before the model instrumentation's answer. However the request is sliced,
    the run is reported ended once, with its answer."""
    agent_maker = SpanMaker()
    model_tracer = agent_maker.provider.get_tracer("model-instrumentation")
    root = agent_maker.open("invoke_agent helper", {"gen_ai.operation.name": "invoke_agent"})
    context = trace.set_span_in_context(root)
    for index, finish in enumerate(("tool_calls", "stop")):
        chat = model_tracer.start_span("chat m", context=context, attributes=chat_attrs(
            finish=finish), start_time=int((T0 + 2 * index) * 1e9))
        chat.end(end_time=int((T0 + 2 * index + 1) * 1e9))
    root.end(end_time=int((T0 + 10) * 1e9))
    spans = agent_maker.take()
    ordered = [spans[-1], *spans[:-1]]  # the agent's scope first, as the SDK groups them
    body = encode(ordered).SerializeToString()
    whole = _first_reported([body], None)
    assert list(whole.values()) == [(TerminalState.COMPLETED, True, 2, 0)]
    for size in (1, 2):
        assert _first_reported([body], size) == whole


def test_every_recording_reads_the_same_however_its_requests_are_sliced() -> None:
    """Every committed recording of a real framework, its requests applied whole and one span
    at a time: the same runs, reported ended with the same outcome."""
    for directory in sorted(path for path in RECORDINGS.iterdir() if path.is_dir()):
        for recording in sorted(directory.glob("*.jsonl")):
            lines = [line.encode() for line in recording.read_text("utf-8").splitlines()
                     if line.strip()]
            assert _first_reported(lines, 1) == _first_reported(lines, None), recording.name


@pytest.mark.parametrize(("recording", "parent", "child"), [
    ("pydantic_ai_agent/subagent", "pydantic-coordinator", "pydantic-researcher"),
    ("agno_oi/team", "agno_team", "agno_researcher")])
def test_a_sub_agent_is_adopted_when_its_whole_trace_comes_in_one_request(
        recording: str, parent: str, child: str) -> None:
    """pydantic-ai's sub-agent (its own gen_ai.agent.call.id) hangs from the coordinator's tool
    span, which ends after it; an Agno team member's agent span from the team's agent span: in
    one request, however sliced, the child run still finds its parent (the recording's
    requests merged into one, in their order)."""
    merged: dict[str, list[object]] = {"resourceSpans": []}
    for line in (RECORDINGS / f"{recording}.jsonl").read_text().splitlines():
        if line.strip():
            merged["resourceSpans"].extend(json.loads(line)["resourceSpans"])
    body = json.dumps(merged).encode()
    for size in (None, 1, 3):
        tracker = RunTracker()
        for part in slices_of(parse_json(body), size):
            tracker.apply(part.records, T0)
        runs = {run.agent_name: run for run in tracker.ended()}
        assert set(runs) == {parent, child}, size
        assert runs[child].parent_run == runs[parent].key, size


def test_a_client_run_ends_with_its_own_span_not_with_an_agent_span_inside_it() -> None:
    """A run the client SDK announced is framed by its ``watchdog.run <agent>`` span: an agent
    called as a tool inside it (whose agent span ends first) does not end it, and its own span
    ends it even below a web request's span. A run nobody announced ends with its agent span."""
    for announced in (True, False):
        maker = SpanMaker()
        ids = {"watchdog.run.id": "r1", "watchdog.agent.name": "lead"}
        with maker.agent("POST /ask", attrs={}) as request:
            frame = maker.open("watchdog.run lead", ids, parent=request, start=T0)
            lead = maker.open("invoke_agent lead", {**agent_attrs("lead"), **ids}, parent=frame,
                              start=T0 + 0.1)
            maker.span("chat m", chat_attrs(finish="tool_calls", **ids), parent=lead,
                       start=T0 + 0.2)
            tool = maker.open("execute_tool researcher", tool_attrs("researcher", "{}", **{
                **ids, "gen_ai.tool.call.id": "call_1"}), parent=lead, start=T0 + 1)
            inner = maker.open("invoke_agent researcher", {**agent_attrs("researcher"), **ids},
                               parent=tool, start=T0 + 1.1)
            maker.span("chat m", chat_attrs(finish="stop", **ids), parent=inner, start=T0 + 1.2)
            inner.end(int((T0 + 2) * 1e9))
            tool.end(int((T0 + 2.1) * 1e9))
            spans = maker.take()  # exported while the lead still works
            maker.span("chat m", chat_attrs(finish="stop", **ids), parent=lead, start=T0 + 3)
            lead.end(int((T0 + 4) * 1e9))
            frame.end(int((T0 + 4.1) * 1e9))
        tracker = RunTracker()
        if announced:
            run, _ = tracker.heartbeat("r1", 0, T0, register=True)
            assert run is not None
            run.announce(agent="lead")
        tracker.apply(records_of(spans), T0 + 2.5)
        run = tracker.get("r1")
        assert run is not None and run.ended is not announced
        if not announced:
            continue
        late = maker.take()
        tracker.apply(records_of(late[:-2]), T0 + 4.5)  # the lead's own agent span: still on
        assert not run.ended
        tracker.apply(records_of(late[-2:-1]), T0 + 5)  # the client's span
        assert run.ended and run.terminal_state is TerminalState.COMPLETED
        assert (run.iterations, run.tool_calls, run.agent_name) == (3, 1, "lead")


def test_a_sub_agent_arriving_after_its_root_ended_the_run_is_still_a_child() -> None:
    """An exporter that sends parents before children (LangSmith's, which turns finished runs
    into spans in the order they started): the root agent span comes first, alone, and ends
    the trace's run; the agent a tool invoked comes later and is split out all the same, its
    calls following it. A trace whose root came last forgets its frames when the run ends."""
    maker = SpanMaker()
    with maker.agent(attrs=agent_attrs("planner")) as root:
        maker.span("chat", chat_attrs(finish="tool_calls"), parent=root, start=T0 + 0.1)
        delegate = maker.open("execute_tool research", tool_attrs("research", '{"q": "x"}'),
                              parent=root, start=T0 + 1)
        inner = maker.open("invoke_agent researcher", agent_attrs("researcher"), parent=delegate,
                           start=T0 + 1.1)
        maker.span("chat", chat_attrs(finish="tool_calls"), parent=inner, start=T0 + 2)
        maker.span("execute_tool search", tool_attrs("search", "{}"), parent=inner,
                   start=T0 + 3)
        maker.span("chat", chat_attrs(finish="stop"), parent=inner, start=T0 + 4)
        inner.end(int((T0 + 5) * 1e9))
        delegate.end(int((T0 + 5) * 1e9))
        maker.span("chat", chat_attrs(finish="stop"), parent=root, start=T0 + 6)
    spans = maker.take()
    records = sorted(records_of(spans), key=lambda record: record.start_ns)
    tracker = RunTracker()
    for record in records:  # parents first, one request each
        tracker.apply([record], T0 + 100)
    runs = runs_by_agent(tracker)
    planner, researcher = runs["planner"], runs["researcher"]
    assert not list(tracker.active())
    assert (planner.iterations, planner.tool_calls, planner.has_final_answer) == (2, 1, True)
    assert (researcher.iterations, researcher.tool_calls, researcher.has_final_answer) == (
        2, 1, True)
    assert researcher.parent_run == planner.key
    assert planner.terminal_state is researcher.terminal_state is TerminalState.COMPLETED

    tracker = RunTracker()
    tracker.apply(records_of(spans), T0 + 100)  # children first, in one request
    assert len(runs_by_agent(tracker)) == 2 and len(tracker._frames) == 0
