"""PraisonAI Agents (``praisonaiagents`` 1.7.17, driver ``endpoint_praisonai``) steered through
the model endpoint by ``OPENAI_BASE_URL`` alone, on both relays, beyond what
test_model_endpoint_frameworks checks of every agent (counts, a budget of 3, a loop wound
down): its streamed ``start``, a rule's abort (answered, and as the API's error), its own
shapes: self-reflection, its own iteration limit, a team of two agents run sequentially and
hierarchically (a manager delegating). What the upstream saw is asserted at each request;
nothing waits for a directive.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import DRIVERS, clean_environ, drive_command
from tests.frameworks.test_model_endpoint_frameworks import instructions
from tests.frameworks.test_model_endpoint_text_actions import LEFT, new_runs, run_ids, the_ended_run
from tests.harness import RunningServer, endpoint_with_pack
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-praisonai-0123456789abcdefSECRET"
ANSWER = "The file is /srv/a.txt."
REPORT = "REPORT: searched 3 times; the rest remains."
STOPPED = "The agent-watchdog stopped this run"
PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: praisonai
budgets:
  - agents: ["praisonai-budget*"]
    max_tool_calls: 3
rules:
  - name: two-calls-then-abort
    agents: ["praisonai-abort"]
    when: "!run.ended && run.tool_calls >= 2"
    action: abort
    message: "Stopped by the test's rule after 2 tool calls"
"""
_CASES = itertools.count(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM,
            model_relay: str) -> Iterator[RunningServer]:  # noqa: F811 (a sidecar per relay)
    with endpoint_with_pack(tmp_path_factory.mktemp("praisonai"), PACK, llm.base_url,
                            model_relay) as server:
        yield server


def pointed(endpoint: str, agent: str) -> dict[str, str]:
    """What a user sets to point PraisonAI's ``Agent`` (a model name with no ``provider/``: its
    default client, the ``openai`` client) at the model endpoint ``endpoint``, named ``agent``:
    its environment. The tests run it so, and docs/agents.md shows it (``praisonai-env``,
    checked in tests/test_docs.py)."""
    return {"OPENAI_BASE_URL": f"{endpoint}/agent/{agent}/v1"}


def run_praisonai(sidecar: RunningServer, llm: FakeLLM, agent: str, script: fakellm.Script,
                  mode: str = "start", **settings: Any) -> tuple[dict[str, Any],
                                                                 list[dict[str, Any]]]:
    """One invocation (``mode``: the driver's), named ``agent`` by ``OPENAI_BASE_URL``;
    ``settings``: more of its ``Agent``'s keyword arguments. Returns what the driver printed
    and the upstream's requests."""
    case = next(_CASES)
    model = llm.script(f"praisonai-{agent}-{case}", script)
    base = {**clean_environ(), "PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1"}
    env = {**base, "OPENAI_API_KEY": KEY, "ENDPOINT_MODEL": model,
           **pointed(sidecar.url("model"), agent),
           "ENDPOINT_TASK": f"Find the file. (case {case})", "PA_AGENT": json.dumps(settings)}
    result = drive_command("praisonai", "endpoint_praisonai", mode, base, env)
    return json.loads(result.stdout.strip().splitlines()[-1]), llm.requests(model)


def searching(answer: str = ANSWER, report: str = REPORT) -> fakellm.Script:
    """Searches on and on (``term N``, N the tool results so far) while it has tools; a request
    with none (the endpoint's final, or PraisonAI's own tools-less follow-up) is answered: the
    report if asked for it."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not fakellm.offers_tools(body):
            return fakellm.answer(report if "[budget" in instructions(body)
                                  or "agent-watchdog" in instructions(body) else answer)
        return fakellm.call("search", q=f"term {_results(body)}")
    return pick


def _results(body: dict[str, Any]) -> int:
    return sum(message.get("role") == "tool" for message in body["messages"])


def test_streamed_it_runs_one_round_of_tools_then_asks_without_them(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Streamed, PraisonAI runs the tools of the first answer, then asks for the answer with no
    tools offered (its own follow-up: one round of tools a turn): one run, counted down from 3
    at the first request (the follow-up offers none: no note), ended ``completed`` by that
    answer, the user's output."""
    before = run_ids(sidecar)
    said, requests = run_praisonai(sidecar, llm, "praisonai-budget", searching(), "stream")
    assert said == {"ran": ["term 0"], "output": ANSWER}
    assert [(body["stream"], fakellm.offers_tools(body)) for body in requests] == [
        (True, True), (True, False)]
    assert [LEFT.findall(instructions(body)) for body in requests] == [[("3", "3")], []]
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (2, 1, "completed", ANSWER), run


def test_an_abort_is_answered_with_the_stop_note_which_is_its_output(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    before = run_ids(sidecar)
    said, requests = run_praisonai(sidecar, llm, "praisonai-abort", searching())
    assert said["ran"] == ["term 0", "term 1"]
    assert len(requests) == 2  # the 3rd request got the stop answer, not the upstream
    assert said["output"].startswith(f"{STOPPED}: Stopped by the test's rule after 2 tool calls")
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_an_abort_as_the_apis_error(llm: FakeLLM, tmp_path: Path,
                                    model_relay: str) -> None:  # noqa: F811
    """With ``model_abort: error`` the 3rd request is answered HTTP 400 ``watchdog_aborted``:
    the openai client does not retry it, and PraisonAI's ``start`` catches it, shows it as its
    error panel and returns None: the user gets no output."""
    (tmp_path / "sidecar").mkdir()
    with endpoint_with_pack(tmp_path / "sidecar", PACK, llm.base_url, model_relay,
                            model_abort="error") as sidecar:
        before = run_ids(sidecar)
        said, requests = run_praisonai(sidecar, llm, "praisonai-abort", searching())
        run = the_ended_run(sidecar, before)
    assert said == {"ran": ["term 0", "term 1"], "output": "None"}
    assert len(requests) == 2
    assert (run["tool_calls"], run["terminal_state"]) == (2, "aborted"), run


def test_its_own_iteration_limit_asks_for_the_answer_within_the_run(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """``execution={"max_iter": 4}``: before its 4th request PraisonAI adds a user message
    asking to stop calling tools (they are still offered); the model answers: one run, the
    new user message in it, ``completed`` with that answer."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if "maximum number of tool-use steps" in json.dumps(body["messages"][-1]):
            return fakellm.answer(ANSWER)
        return fakellm.call("search", q=f"term {index}")

    before = run_ids(sidecar)
    said, requests = run_praisonai(sidecar, llm, "praisonai", pick,
                                   execution={"max_iter": 4})
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": ANSWER}
    assert [body["messages"][-1]["role"] for body in requests] == [
        "user", "tool", "tool", "user"]
    assert all(fakellm.offers_tools(body) for body in requests)
    run = the_ended_run(sidecar, before)
    assert (run["iterations"], run["tool_calls"], run["terminal_state"],
            run["final_output"]) == (4, 3, "completed", ANSWER), run


def manager(script: fakellm.Script) -> fakellm.Script:
    """As a model does as PraisonAI's hierarchical manager: each request asking for its
    ``ManagerInstructions`` JSON names the next task not completed and its agent."""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        text = json.dumps(body["messages"])
        if "ManagerInstructions" in text:
            done = min(text.count("'status': 'completed'"), 1)
            return fakellm.answer(json.dumps({"task_id": done, "agent_name": [
                "Researcher", "Writer"][done], "action": "execute"}))
        return script(index, body)
    return pick


def check_team(sidecar: RunningServer, before: set[str], said: dict[str, Any],
               requests: list[dict[str, Any]], asides: int) -> None:
    """The researcher's task is a run of its own under the agent's budget (3 searches, then
    its report); the writer's, given that report as its input, a run of its own; and each of
    ``asides`` other requests (the manager's) a run of its own, answered at once."""
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": ANSWER}
    researching = [body for body in requests if "tools" in body]
    assert [LEFT.findall(instructions(body)) for body in researching] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    assert researching[-1]["tool_choice"] == "none"
    [writing] = [body for body in requests if "Write the report." in json.dumps(body)
                 and "ManagerInstructions" not in json.dumps(body)]
    assert REPORT in json.dumps(writing["messages"][-1])
    assert len(requests) == 5 + asides
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 2 + asides
                    and all(run["state"] == "ended" for run in runs))
    found = sorted((run["iterations"], run["tool_calls"], run["terminal_state"])
                   for run in runs)
    assert found == [(1, 0, "completed")] * (1 + asides) + [(4, 3, "tool_limit_reached")], runs


def test_a_sequential_teams_tasks_are_a_run_each_on_its_own_budget(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    before = run_ids(sidecar)
    said, requests = run_praisonai(sidecar, llm, "praisonai-budget", manager(searching(
        ANSWER, REPORT)), "sequential")
    check_team(sidecar, before, said, requests, 0)


def test_a_hierarchical_managers_decisions_are_runs_of_their_own(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """The manager (its LLM class on LiteLLM, streamed, by ``manager_llm``) first answers its
    own task, then is asked which task is next before each: three conversations of one
    request each, none offering tools; each is a run of its own, ``completed`` by its
    answer. The delegated tasks are as in a sequential team: a run each."""
    before = run_ids(sidecar)
    said, requests = run_praisonai(sidecar, llm, "praisonai-budget", manager(searching(
        ANSWER, REPORT)), "hierarchical")
    decisions = [body for body in requests if "ManagerInstructions" in json.dumps(body)]
    assert [body.get("stream") for body in decisions] == [True, True]
    check_team(sidecar, before, said, requests, 3)


def test_self_reflection_and_its_regeneration_go_on_in_the_run(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """PraisonAI's self-reflection asks, after the answer, ``Reflect on your previous
    response: '<the answer>'`` on the run's first messages alone (its tool turns left out;
    structured output, no tools), then ``Now regenerate your response`` with its tools: a
    conversation begun again at once, its new user message quoting the answer that ended the
    run (40 characters or more). The reflection and the regeneration go on in the run (its
    second search counted in it). Known gap: PraisonAI then sends the regeneration's request
    again, the same as before (it runs its tools again), after the answer that ended the run:
    that starts a run of its own (a request sent again after a whole answer is another
    invocation's), and so does the reflection on its answer, which quotes it after a message of
    PraisonAI's own as the model's."""
    reflections = iter(["no", "yes"])

    def pick(_index: int, body: dict[str, Any]) -> fakellm.Step:
        if body.get("response_format"):
            return fakellm.answer(json.dumps({"reflection": "Search once more.",
                                              "satisfactory": next(reflections)}))
        if fakellm.offers_tools(body) and not _results(body):
            return fakellm.call("search", q=f"term {len(body['messages'])}")
        return fakellm.answer(REPORT)

    before = run_ids(sidecar)
    said, requests = run_praisonai(sidecar, llm, "praisonai", pick,
                                   reflection={"max_iterations": 3})
    assert said == {"ran": ["term 2", "term 5", "term 5"], "output": REPORT}
    assert [(len(body["messages"]), bool(body.get("response_format")))
            for body in requests] == [(2, False), (4, False), (3, True), (5, False), (7, False),
                                      (5, False), (7, False), (6, True)]
    runs = new_runs(sidecar, before, lambda runs: len(runs) == 3
                    and all(run["state"] == "ended" for run in runs))
    assert sorted((run["iterations"], run["tool_calls"], run["terminal_state"])
                  for run in runs) == [(1, 0, "completed"), (2, 1, "completed"),
                                       (5, 2, "completed")], runs


def test_self_reflection_after_the_budget_gets_the_stop_and_runs_no_more_tools(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Under a budget of 3, the reflection on the report (its final request's answer) goes on
    in the spent run: it gets the stop answer, not the upstream, which PraisonAI cannot parse
    as its reflection; it asks again and gets the stop, up to its own limit, and returns the
    report: 3 searches, one run. (Each reflection began a run of its own, with a budget of its
    own: 9 searches.)"""
    def pick(index: int, body: dict[str, Any]) -> fakellm.Step:
        if body.get("response_format"):
            return fakellm.answer(json.dumps({"reflection": "Search more.",
                                              "satisfactory": "no"}))
        return searching()(index, body)

    before = run_ids(sidecar)
    said, requests = run_praisonai(sidecar, llm, "praisonai-budget", pick,
                                   reflection={"max_iterations": 2})
    assert said == {"ran": ["term 0", "term 1", "term 2"], "output": REPORT}
    assert len(requests) == 4 and not any(body.get("response_format") for body in requests)
    assert [LEFT.findall(instructions(body)) for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []]
    run = the_ended_run(sidecar, before)
    assert (run["tool_calls"], run["terminal_state"], run["final_output"]) == (
        3, "tool_limit_reached", REPORT), run
