"""The model endpoint's pieces for agents that act in their answers' text (a rule pack's
``actions: text``), pure: the book hands each answer over as one ``text_action`` call and goes
on in the run at the next request; the tracker holds the run open after such an answer and
ends it ``loose_run_gap`` after its last call; the turn tells such a request the tool-call
countdown (it offers no tools) and asks its final request for the agent's own finish; the stop
answer takes the pack's form. The real agent's tests:
:mod:`tests.frameworks.test_model_endpoint_text_actions`."""

from __future__ import annotations

import json
from typing import Any

from watchdog.core.model.book import (
    TEXT_ACTION,
    Caller,
    EndpointRun,
    ModelBook,
    text_action,
    text_stop_answer,
)
from watchdog.core.model.chat import ChatWire
from watchdog.core.model.steer import TEXT_FINISH, Act, Board, Counts, decide
from watchdog.core.model.wire import Observation, Request
from watchdog.core.rules.decision import COUNTDOWN_TOOL_CALLS
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans.record import KeySource

SYSTEM = {"role": "system", "content": "Answer with one ```bash``` block."}
TASK = {"role": "user", "content": "Count the files."}


def not_ended(_key: str) -> bool:
    return False


def ended(_key: str) -> bool:
    return True


def request(*messages: dict[str, Any]) -> Request:
    return ChatWire().read_request({"model": "m", "messages": [SYSTEM, TASK, *messages]})


def said(text: str) -> Observation:
    return Observation(text=text, finish_reason="stop")


def acting_run() -> EndpointRun:
    return EndpointRun("model:" + "a" * 32, KeySource.WATCHDOG, "a" * 32, None,
                       acts_in_text=True)


def test_the_action_is_the_answers_fenced_blocks_else_its_text() -> None:
    state = acting_run()
    one = text_action(state, said("THOUGHT: look.\n\n```bash\nls  -la\n```"))
    other = text_action(state, said("THOUGHT: look again, differently.\n```bash\nls -la\n```"))
    assert one is not None and other is not None
    assert one.name == TEXT_ACTION and json.loads(one.arguments) == {"action": "ls -la"}
    assert one.arguments == other.arguments and one.call_id != other.call_id
    plain = text_action(state, said("Action: search\nAction Input: the file"))
    assert plain is not None and json.loads(plain.arguments) == {
        "action": "Action: search Action Input: the file"}
    # no action: another run's answer, one cut short, an empty one, the final's, a stop's
    assert text_action(EndpointRun("k", state.key_source, "t", None), said("ls")) is None
    assert text_action(state, Observation(text="```bash\nls", finish_reason="length")) is None
    assert text_action(state, said("  ")) is None
    state.final_used = True
    assert text_action(state, said("```bash\nls\n```")) is None


def test_each_answer_hands_one_action_over_and_the_next_request_goes_on_in_the_run() -> None:
    book = ModelBook()
    first = request()
    state = book.identify("chat", first, Caller(), "mini", not_ended)
    state.acts_in_text = True
    answer = "THOUGHT: fails.\n\n```bash\ncat missing.txt\n```"
    record = book.call_record(state, first, said(answer), [], 1, 2)
    # the run's answer so far, held open: its action handed over, no request aside
    assert (record.final_answer, record.acted_on, record.ends_run) == (True, True, False)
    assert [name for name, _ in record.asked_tools] == [TEXT_ACTION]
    assert (state.handed, state.aside) == (1, None)
    output = "Error: cat: missing.txt: No such file or directory"
    after = request({"role": "assistant", "content": answer},
                    {"role": "user", "content": output})
    assert book.identify("chat", after, Caller(), "mini", not_ended) is state
    [tool] = book.tool_records(state, after, 3)
    assert (tool.tool_name, tool.args_brief, tool.result_brief, tool.error) == (
        TEXT_ACTION, '{"action":"cat missing.txt"}', output, True)


def test_a_request_after_the_final_one_is_the_runs_not_the_next_runs() -> None:
    """The final request's answer was one more action: the agent's next request, with its
    output, is still the run's (answered with the stop), whether or not the run has ended."""
    book = ModelBook()
    first = request()
    state = book.identify("chat", first, Caller(), "mini", not_ended)
    state.acts_in_text, state.final_used = True, True
    book.call_record(state, first, said("```bash\nls\n```"), [], 1, 2)
    after = request({"role": "assistant", "content": "```bash\nls\n```"},
                    {"role": "user", "content": "a b c"})
    assert book.identify("chat", after, Caller(), "mini", ended) is state
    # an agent that does not act in text: its new user message starts the next run
    book = ModelBook()
    state = book.identify("chat", first, Caller(), "chat", not_ended)
    state.final_used = True
    book.call_record(state, first, said("an answer"), [], 1, 2)
    assert book.identify("chat", after, Caller(), "chat", ended) is not state


def test_the_tracker_holds_the_run_open_until_the_gap_passes_without_a_call() -> None:
    book, tracker = ModelBook(), RunTracker(loose_run_gap=120.0)
    first = request()
    state = book.identify("chat", first, Caller(), "mini", not_ended)
    state.acts_in_text = True
    tracker.apply([book.call_record(state, first, said("```bash\nls\n```"), [], 1, 2)], 100.0)
    run = tracker.get(state.key)
    assert run is not None and not run.ended and run.has_final_answer
    assert tracker.expire(219.0) == [] and not run.ended
    # its next call moves the end: it is counted from the last call
    tracker.apply([book.call_record(state, first, said("```bash\nls -a\n```"), [], 3, 4)],
                  200.0)
    assert tracker.expire(319.0) == [] and not run.ended
    assert tracker.expire(321.0) == [run] and run.ended
    assert run.terminal_state is TerminalState.COMPLETED


def test_the_countdown_reaches_a_request_without_tools_and_the_final_asks_for_the_finish(
        ) -> None:
    counts = Counts(used=2, handed=3, budget={"max_tool_calls": 5.0})
    counting = Board(counting=frozenset({COUNTDOWN_TOOL_CALLS}))  # (its countdown rule fired)
    told = decide(counts, counting, "", has_tools=False, acts_in_text=True)
    assert (told.act, told.keep) == (Act.NOTE, 2)  # (a note: there are no tools to withdraw)
    assert "[budget: 2 of 5 tool calls left" in told.text
    assert decide(counts, counting, "", has_tools=False).act is Act.PASS  # (another agent's)
    final = decide(Counts(used=5, handed=5, budget={"max_tool_calls": 5.0}), None, "",
                   has_tools=False, acts_in_text=True)
    assert final.act is Act.FINAL and final.text.endswith(TEXT_FINISH)
    assert "all 5 tool calls used" in final.text


def test_the_stop_answer_takes_the_packs_form_with_no_action_but_its_own() -> None:
    form = "${note}\n\n```bash\nsubmit\n```"
    note = "Stopped: a loop.\n\nLast answer:\n```bash\nrm -rf build\n```\nthen more."
    assert text_stop_answer(form, note) == \
        "Stopped: a loop.\n\nLast answer:\n\nthen more.\n\n```bash\nsubmit\n```"
