"""The model endpoint's pieces for agents that end their task by a tool call (a rule pack's
``finish:``), and for agents that reject the answer that ended their run, pure: the pack reads
the declaration; the call carries the report (quoted for a shell: one word); the
endpoint's answers that carry it read back, as each API's own SDK and the endpoint's readers
read them, whole and streamed; a reply at once that drops the answer that ended its run at its
budget stays in that run (one that drops the model's own answer goes on in it), a question
that keeps it (or comes after a pause) is the next run.
The real agent's tests: :mod:`tests.frameworks.test_model_endpoint_finish_tool`."""

from __future__ import annotations

import json
import shlex
from typing import Any

import anthropic.types
import openai.types.chat
import openai.types.responses
import pytest

from watchdog.core.model.book import AT_ONCE_NS, MAX_CHAINED_RUNS, Caller, ModelBook
from watchdog.core.model.chat import ChatWire
from watchdog.core.model.messages import MessagesWire
from watchdog.core.model.responses import ResponsesWire
from watchdog.core.model.steer import (
    answer_of,
    closing_call,
    finish_call,
    kept_calls,
    runs_beside,
)
from watchdog.core.model.wire import (
    Observation,
    Request,
    ToolCall,
    Wire,
    read_stream,
    tool_parameters,
)
from watchdog.core.rules.model import WORK_BESIDE_RUN, WORK_BESIDE_SKIPPED, Finish
from watchdog.core.rules.pack import RulePackError, load_text

SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
FINISH = Finish("bash", (("command", f"printf '%s\\n' {SUBMIT} ${{report_shell}}"),))
REPORT = "It's done: 'quoted' $HOME `id` \"x\" ${report} ${report_shell}\n- line two"


def pack(entry: str) -> str:
    return f"apiVersion: agent-watchdog/v1\nkind: RulePack\nname: p\nbudgets:\n{entry}"


# -- the declaration --------------------------------------------------------------------------

def test_a_budgets_entry_names_its_agents_finish_call() -> None:
    rules = load_text(pack("""\
  - agents: ["mini*"]
    finish:
      tool: bash
      arguments: {command: "echo ${report_shell}"}
  - agents: ["other"]
    max_tool_calls: 3
"""))
    assert rules.finish_of("mini-swe-agent") == Finish("bash", (("command",
                                                                  "echo ${report_shell}"),))
    assert rules.budget_for("mini-swe-agent") == {}  # (finish alone: no limit)
    assert rules.finish_of("other") is None and rules.finish_of("nobody") is None


@pytest.mark.parametrize(("finish", "problem"), [
    ("finish: bash", "budgets: finish must be a mapping"),
    ("finish: {tool: bash}", "'arguments' is required"),
    ("finish: {arguments: {a: b}}", "'tool' is required"),
    ("finish: {tool: bash, arguments: {a: 1}}", "expected a mapping of 0 to 16 names to strings"),
    ("finish: {tool: bash, arguments: [a]}", "got a list"),
    ("finish: {tool: bash, arguments: x}", "got a str"),
    ("finish: {tool: bash, arguments: {a: b}, when: x}", "unknown key 'when'"),
    ("actions: text\n    finish: {tool: bash, arguments: {a: b}}",
     "finish: only for agents that act by tool calls"),
])
def test_a_bad_finish_is_told(finish: str, problem: str) -> None:
    with pytest.raises(RulePackError) as failure:
        load_text(pack(f"  - agents: [a]\n    {finish}\n"))
    assert problem in str(failure.value)


def test_the_call_carries_the_report_quoted_for_the_shell_never_run_as_code() -> None:
    call = finish_call(FINISH, REPORT)
    assert call.name == "bash" and call.call_id.startswith("call_watchdog_")
    command = json.loads(call.arguments)["command"]
    # (one word, as a POSIX shell splits it: nothing of it runs; the real agent's test runs it)
    assert shlex.split(command) == ["printf", "%s\\n", SUBMIT, REPORT]
    plain = finish_call(Finish("submit", (("answer", "Report: ${report}"),)), REPORT)
    assert json.loads(plain.arguments) == {"answer": f"Report: {REPORT}"}


def test_a_finish_that_carries_only_the_report_delivers_the_answer() -> None:
    """A finish call whose every argument is the report (adk.ExitTool's ``final_result``) does
    nothing but deliver the answer: the model's own call of it is the run's answer (the real
    agent's test: :mod:`tests.frameworks.test_eino`); a call that does work with the report
    in it (mini-swe-agent's ``bash`` command, a text around the report) is no answer."""
    exit_ = Finish("exit", (("final_result", "${report}"),))
    assert exit_.answers and not FINISH.answers
    assert not Finish("submit", (("answer", "Report: ${report}"),)).answers
    said = ToolCall("c1", "exit", json.dumps({"final_result": "the sums: 100, 101"}))
    work = ToolCall("c2", "add", json.dumps({"a": 1, "b": 2}))
    assert answer_of([said], "exit") == "the sums: 100, 101"
    assert answer_of([said]) is None and answer_of([said, work], "exit") is None
    assert answer_of([work], "add") == work.arguments  # (whatever its pack names)
    # a call that carries no text, a flag (tiny-agents' task_complete): the text beside it
    done = ToolCall("c3", "task_complete", json.dumps({"trigger": True}))
    assert answer_of([done], "task_complete", "DONE: 3 files") == "DONE: 3 files"
    assert answer_of([done], "task_complete", " ") == done.arguments
    assert answer_of([work], "add", "the sums") == "the sums"
    assert answer_of([said], "exit", "beside") == "the sums: 100, 101"
    # asked beside work: the answer after the work (adk runs each call, then ends at exit)
    assert closing_call([work, said], "exit") is said
    assert closing_call([said], "exit") is None and closing_call([work, said], None) is None
    assert closing_call([work], "exit") is None
    # ... kept beside the work the budget allows, never counted as one of the calls left
    more = ToolCall("c3", "add", json.dumps({"a": 3, "b": 4}))
    assert kept_calls([said, work, more], 1, "exit") == [said, work]
    assert kept_calls([work, more, said], 0, "exit") == [said]
    assert kept_calls([said, work, more], 1) == [said]  # (another request's: work)


def test_a_final_answer_tool_beside_work_ends_the_agent_as_its_conventions_or_pack_say(
        ) -> None:
    """pydantic-ai's output tool ends its agent before the calls beside it run (its default
    ``end_strategy="early"``: ``answer_ends_first``); its pack's ``work_beside_answer`` says
    otherwise (``exhaustive``). smolagents' ``final_answer`` beside work is refused by its
    agent, which goes on: not the answer, unless its pack says how its agent ends."""
    work = ToolCall("c1", "search", "{}")
    result = ToolCall("c2", "final_result", json.dumps({"answer": "done"}))
    final = ToolCall("c3", "final_answer", json.dumps({"answer": "done"}))
    assert closing_call([work, result], None) is result
    assert not runs_beside(result) and runs_beside(result, WORK_BESIDE_RUN)
    assert closing_call([work, final], None) is None
    assert closing_call([work, final], None, WORK_BESIDE_SKIPPED) is final
    assert runs_beside(final) and not runs_beside(final, WORK_BESIDE_SKIPPED)
    exit_ = ToolCall("c4", "exit", json.dumps({"final_result": "done"}))
    assert runs_beside(closing_call([work, exit_], "exit") or work)  # (adk's)


def test_a_finish_of_no_arguments_is_the_answer_its_text_beside_it() -> None:
    """A finish tool that takes no arguments (gptme's ``complete``): declared with
    ``arguments: {}``; the endpoint's call of it carries nothing, the report its text beside
    it; the model's own call of it, where the request offers it with no parameters, is the
    run's answer, the text beside it its output (the real agent's test:
    :mod:`tests.frameworks.test_model_endpoint_gptme`)."""
    rules = load_text(pack("  - agents: [gptme]\n    finish: {tool: complete, arguments: {}}\n"))
    complete = rules.finish_of("gptme")
    assert complete == Finish("complete", ())
    assert complete.answers and complete.describe() == {"tool": "complete", "arguments": {}}
    call = finish_call(complete, REPORT)
    assert (call.name, call.arguments) == ("complete", "{}")
    offered = {"tools": [{"type": "function", "function": {
        "name": "complete", "parameters": {"type": "object", "properties": {}}}}]}
    assert complete.answered_by(tool_parameters(offered, "complete"))
    taking = {"tools": [{"type": "function", "function": {
        "name": "complete", "parameters": {"properties": {"summary": {}}}}}]}
    assert not complete.answered_by(tool_parameters(taking, "complete"))
    assert not complete.answered_by(None)  # (not offered)
    said = ToolCall("c1", "complete", "{}")
    assert answer_of([said], "complete", "REPORT: 3 files") == "REPORT: 3 files"


def test_it_is_the_answer_only_where_the_request_offers_it_as_the_finish_takes_it() -> None:
    """The tool offered in each API's shape (Chat Completions, its legacy ``functions``,
    Responses, Messages) with the finish's arguments and no other: another ``exit`` (one
    that takes a ``code``), or none offered, is no answer (the real client's test, on both
    relays: :mod:`tests.test_model_finish_answer`)."""
    exit_ = Finish("exit", (("final_result", "${report}"),))
    schema = {"type": "object", "properties": {"final_result": {"type": "string"}}}
    for body in ({"tools": [{"type": "function", "function": {"name": "exit",
                                                              "parameters": schema}}]},
                 {"functions": [{"name": "exit", "parameters": schema}]},
                 {"tools": [{"type": "function", "name": "exit", "parameters": schema}]},
                 {"tools": [{"name": "exit", "input_schema": schema}]}):
        assert tool_parameters(body, "exit") == {"final_result"}
        assert exit_.answered_by(tool_parameters(body, "exit"))
    other = {"tools": [{"name": "exit", "input_schema": {"properties": {"code": {}}}}]}
    assert not exit_.answered_by(tool_parameters(other, "exit"))
    assert tool_parameters({"tools": [{"name": "exit"}, 3, None]}, "exit") == frozenset()
    assert tool_parameters({"tools": [{"name": "add"}]}, "exit") is None
    assert tool_parameters({"tools": "exit"}, "exit") is None
    assert not exit_.answered_by(None) and not FINISH.answered_by(frozenset({"command"}))


# -- the answers that carry it ----------------------------------------------------------------

WIRES: dict[str, tuple[Wire, dict[str, Any]]] = {
    "chat": (ChatWire(), {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    "responses": (ResponsesWire(), {"model": "m", "input": "hi"}),
    "messages": (MessagesWire(), {"model": "m", "max_tokens": 9,
                                  "messages": [{"role": "user", "content": "hi"}]}),
}
SDK_TYPES: dict[str, Any] = {
    "chat": openai.types.chat.ChatCompletion,
    "responses": openai.types.responses.Response,
    "messages": anthropic.types.Message,
}


def sdk_call(api: str, body: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The call as the API's own SDK reads the answer: (id, name, arguments)."""
    # (validated strictly, its usage too; the clients read leniently)
    parsed = SDK_TYPES[api].model_validate(body, strict=True)
    if api == "chat":
        [call] = parsed.choices[0].message.tool_calls
        return call.id, call.function.name, json.loads(call.function.arguments)
    if api == "responses":
        [call] = [item for item in parsed.output if item.type == "function_call"]
        return call.call_id, call.name, json.loads(call.arguments)
    [call] = [block for block in parsed.content if block.type == "tool_use"]
    return call.id, call.name, dict(call.input)


@pytest.mark.parametrize("api", list(WIRES))
@pytest.mark.parametrize("stream", [False, True])
def test_the_endpoints_answer_carries_the_call_whole_and_streamed(api: str,
                                                                  stream: bool) -> None:
    wire, body = WIRES[api]
    request: Request = wire.read_request(body)
    call = finish_call(FINISH, REPORT)
    if stream:
        accumulator = wire.accumulator()
        read_stream(accumulator, wire.answer_stream("m", REPORT, request, 1.0, call))
        seen: Observation = accumulator.observation
        assert seen.complete
    else:
        whole = wire.answer("m", REPORT, request, 1.0, call)
        assert sdk_call(api, whole) == (call.call_id, "bash", json.loads(call.arguments))
        seen = wire.read_response(whole)
    assert seen.text == REPORT
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in seen.calls] == [
        (call.call_id, "bash", json.loads(call.arguments))]
    # without the call: the text answer, as before
    plain = wire.read_response(wire.answer("m", REPORT, request, 1.0))
    assert (plain.text, plain.calls) == (REPORT, [])


# -- a reply at once to the answer that ended the run ------------------------------------------

SYSTEM = {"role": "system", "content": "Call bash."}
TASK = {"role": "user", "content": "Count the files."}
STEP = {"role": "assistant", "content": None, "tool_calls": [{
    "id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
FORMAT_ERROR = {"role": "user", "content": "No tool calls found in the response."}


def chat(*messages: dict[str, Any]) -> Request:
    return ChatWire().read_request({"model": "m", "messages": [SYSTEM, TASK, *messages]})


def not_ended(_key: str) -> bool:
    return False


def ended_at_its_budget(book: ModelBook, first: Request, report: str, end_ns: int) -> Any:
    """A run of ``first``'s conversation whose final request the model answered with
    ``report`` at ``end_ns``."""
    state = book.identify("chat", first, Caller(), "mini", not_ended, now_ns=0)
    state.final_used, state.report = True, report
    book.call_record(state, first, Observation(text=report, finish_reason="stop"), [], 1,
                     end_ns)
    book.settle(state)
    return state


def test_a_reply_at_once_that_drops_the_answer_stays_in_the_run() -> None:
    book = ModelBook()
    final = chat(STEP, RESULT)
    state = ended_at_its_budget(book, final, "REPORT", 10)
    # mini: the answer dropped, a format error in its place, at once
    reply = chat(STEP, RESULT, FORMAT_ERROR)
    assert book.identify("chat", reply, Caller(), "mini", not_ended,
                         now_ns=10 + AT_ONCE_NS - 1) is state
    assert state.at_once
    # the same, after a pause: a person's next message, the next run
    book = ModelBook()
    state = ended_at_its_budget(book, final, "REPORT", 10)
    later = book.identify("chat", reply, Caller(), "mini", not_ended, now_ns=10 + AT_ONCE_NS)
    assert later is not state and not later.at_once and later.chain == 0


def test_how_soon_is_at_once_is_the_configured_window() -> None:
    """``model_reply_window`` (the book's ``at_once_ns``): an agent that replies 20 s after
    the answer (a slow model of its own between) is still held with a window of 30 s, and is
    the next run by the default 5 s."""
    final, reply = chat(STEP, RESULT), chat(STEP, RESULT, FORMAT_ERROR)
    late = 10 + 20 * 10**9
    for book, held in ((ModelBook(at_once_ns=30 * 10**9), True), (ModelBook(), False)):
        state = ended_at_its_budget(book, final, "REPORT", 10)
        found = book.identify("chat", reply, Caller(), "mini", not_ended, now_ns=late)
        assert (found is state, found.at_once) == (held, held)


def test_a_question_that_keeps_the_answer_is_the_next_run_until_the_chain_is_too_long() -> None:
    book = ModelBook()
    history: list[dict[str, Any]] = [STEP, RESULT]
    state = ended_at_its_budget(book, chat(*history), "REPORT", 10)
    runs = [state]
    for number in range(1, MAX_CHAINED_RUNS + 1):
        history += [{"role": "assistant", "content": "REPORT"},
                    {"role": "user", "content": f"Task {number}."}]
        nxt = book.identify("chat", chat(*history), Caller(), "mini", not_ended,
                            now_ns=runs[-1].last_end_ns + 1)
        assert nxt is not runs[-1] and nxt.chain == number and not nxt.at_once
        book.settle(nxt)
        nxt.final_used, nxt.report = True, "REPORT"
        book.call_record(nxt, chat(*history), Observation(text="REPORT", finish_reason="stop"),
                         [], 1, runs[-1].last_end_ns + 2)
        runs.append(nxt)
    # the next one at once, its answer kept: held in the last run (the chain is long enough)
    history += [{"role": "assistant", "content": "REPORT"},
                {"role": "user", "content": "Task again."}]
    assert book.identify("chat", chat(*history), Caller(), "mini", not_ended,
                         now_ns=runs[-1].last_end_ns + 1) is runs[-1]


def ended_on_its_own(book: ModelBook) -> Any:
    """A run whose model answered in text at 10, tools still offered (no budget spent)."""
    own = book.identify("chat", chat(STEP, RESULT), Caller(), "mini", not_ended, now_ns=0)
    book.tool_records(own, chat(STEP, RESULT), 0)  # (as the endpoint reads each request)
    book.call_record(own, chat(STEP, RESULT), Observation(text="done", finish_reason="stop"),
                     [], 1, 10)
    book.settle(own)
    assert own.answered_last
    return own


def test_a_reply_at_once_that_drops_an_answer_the_run_ended_on_goes_on_in_the_run() -> None:
    """A run that ended on its own is never held with a stop; the agent's reply at once that
    drops its answer (mini's format error) takes it back (it goes on, with its budget), even
    once the tracker has ended it; a question that keeps the answer (a script's next
    ``chat``), a reply after a pause, or another agent's turn under its own instructions, is
    the next run."""
    book = ModelBook()
    own = ended_on_its_own(book)
    went = book.identify("chat", chat(STEP, RESULT, FORMAT_ERROR), Caller(), "mini",
                         lambda _key: True, now_ns=11)
    assert (went is own, went.going_on, went.at_once, went.answered_last) == (
        True, True, False, False)
    kept = chat(STEP, RESULT, {"role": "assistant", "content": "done"},
                {"role": "user", "content": "Once more, please."})
    # a pipeline's next agent at once, the first one's work retold as user messages under
    # instructions of its own (Eino's SequentialAgent): another agent's turn, not a rejection
    handed_on = ChatWire().read_request({"model": "m", "messages": [
        {"role": "system", "content": "Write it up."}, TASK,
        {"role": "user", "content": "For context: [mini] called bash."},
        {"role": "user", "content": "For context: [mini] bash returned ok."},
        {"role": "user", "content": "For context: [mini] said: done"}]})
    for request, now_ns in ((kept, 11), (chat(STEP, RESULT, FORMAT_ERROR), 10 + AT_ONCE_NS),
                            (handed_on, 11)):
        book = ModelBook()
        own = ended_on_its_own(book)
        found = book.identify("chat", request, Caller(), "mini", lambda _key: True,
                              now_ns=now_ns)
        assert found is not own and not found.going_on


def test_a_reply_at_once_that_begins_again_quoting_the_answer_goes_on_in_the_run() -> None:
    """An agent that reflects on its answer on the run's first messages alone, a new user
    message quoting the answer (PraisonAI's self-reflection, then its regeneration): at once,
    that conversation goes on in the run the answer ended (its budget, or its stop when the
    budget is spent); after a pause, without the quote, with a quote shorter than 40
    characters, or with the answer as its first user message (another invocation's task), it
    is the next run."""
    answer = "The files are counted: 42 of them, in three directories."
    reflect = {"role": "user", "content": f"Reflect on your previous response: '{answer}'."}
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]

    def asked(*messages: dict[str, Any]) -> Request:  # (its tools offered: no aside)
        return ChatWire().read_request({"model": "m", "messages": list(messages),
                                        "tools": tools})

    def ended(book: ModelBook, text: str, budget: bool) -> Any:
        state = book.identify("chat", asked(SYSTEM, TASK, STEP, RESULT), Caller(),
                              "mini", not_ended, now_ns=0)
        book.tool_records(state, asked(SYSTEM, TASK, STEP, RESULT), 0)
        state.final_used = budget
        book.call_record(state, asked(SYSTEM, TASK, STEP, RESULT),
                         Observation(text=text, finish_reason="stop"), [], 1, 10)
        book.settle(state)
        return state

    for budget in (False, True):
        book = ModelBook()
        state = ended(book, answer, budget)
        went = book.identify("chat", asked(SYSTEM, TASK, reflect), Caller(), "mini",
                             lambda _key: True, now_ns=11)
        assert (went is state, went.going_on) == (True, not budget), budget
    short = {"role": "user", "content": "Reflect on 'Counted: 42.'"}
    for text, request, now_ns in (
            (answer, asked(SYSTEM, TASK, reflect), 10 + AT_ONCE_NS),
            (answer, asked(SYSTEM, TASK, {"role": "user", "content": "Reflect."}), 11),
            ("Counted: 42.", asked(SYSTEM, TASK, short), 11),
            (answer, asked(SYSTEM, {"role": "user", "content": answer}), 11)):
        book = ModelBook()
        state = ended(book, text, False)
        found = book.identify("chat", request, Caller(), "mini", lambda _key: True,
                              now_ns=now_ns)
        assert found is not state and not found.going_on, (text, now_ns)


def test_the_next_question_after_an_answer_tools_call_is_the_next_run() -> None:
    """A run that ended on the model's call of a final-answer tool (pydantic-ai's
    ``final_result``, a pack's ``exit``): the script's next question at once, with that call
    and its result kept in the history (``message_history``), is the next run. The call's
    message has no text, so nothing there is the answer "kept": before, it read as the agent
    dropping its answer, and the next task went on in the ended run with what was left of its
    budget."""
    for name, answer_tool in (("final_result", None), ("exit", "exit")):
        said = ToolCall("c9", name, json.dumps({"final_result": "done"}))
        book = ModelBook()
        # (the request offers the tool: a final-answer tool it does not offer is work)
        asked = ChatWire().read_request({"model": "m", "messages": [SYSTEM, TASK, STEP, RESULT],
                                         "tools": [{"type": "function",
                                                    "function": {"name": name}}]})
        own = book.identify("chat", asked, Caller(), "mini", not_ended, now_ns=0)
        own.answer_tool = answer_tool
        book.tool_records(own, asked, 0)
        book.call_record(own, asked, Observation(
            finish_reason="tool_calls", calls=[said], complete=True), [said], 1, 10)
        book.settle(own)
        assert own.answered_last, name
        kept = chat(STEP, RESULT, {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c9", "type": "function", "function": {
                "name": name, "arguments": said.arguments}}]},
            {"role": "tool", "tool_call_id": "c9", "content": "Final result processed."},
            {"role": "user", "content": "And the next one?"})
        found = book.identify("chat", kept, Caller(), "mini", lambda _key: True, now_ns=11)
        assert found is not own and not found.going_on, name


def test_a_budget_per_conversation_takes_every_new_message_of_it_into_its_run() -> None:
    """``budget_per: conversation`` (:attr:`EndpointRun.per_conversation`): a new user message
    that keeps the answer, long after it, goes on in the run (a nudge, a person's next
    question: one budget); once the budget is spent (its final request went upstream) it is
    still the run's, which answers with its stop; a conversation begun again (shorter: another
    invocation with the same task) is the next run."""
    book = ModelBook()
    own = ended_on_its_own(book)
    own.per_conversation = True
    kept = chat(STEP, RESULT, {"role": "assistant", "content": "done"},
                {"role": "user", "content": "continue"})
    went = book.identify("chat", kept, Caller(), "mini", lambda _key: True,
                         now_ns=10 + 100 * AT_ONCE_NS)
    assert (went is own, went.going_on, went.answered_last) == (True, True, False)
    book.tool_records(own, kept, 0)
    book.settle(own)
    own.final_used = True
    again = chat(STEP, RESULT, {"role": "assistant", "content": "done"},
                 {"role": "user", "content": "continue"}, {"role": "assistant", "content": "x"},
                 {"role": "user", "content": "continue"})
    late = 10 + 200 * AT_ONCE_NS
    stopped = book.identify("chat", again, Caller(), "mini", lambda _key: True, now_ns=late)
    assert (stopped is own, stopped.going_on, stopped.at_once) == (True, False, False)
    book.settle(own)
    fresh = book.identify("chat", chat(), Caller(), "mini", lambda _key: True, now_ns=late)
    assert fresh is not own


@pytest.mark.parametrize("per_conversation", [False, True])
def test_a_budget_per_conversation_holds_in_a_conversation_the_server_keeps(
        per_conversation: bool) -> None:
    """A Responses conversation chained by ``previous_response_id``: a new user message after
    the answer that ended the run is the next run, or, the budget covering the conversation,
    goes on in the run (its length is not read: the chain names the run)."""
    book = ModelBook()
    wire = ResponsesWire()
    first = wire.read_request({"model": "m", "input": "Count the files.", "tools": []})
    state = book.identify("responses", first, Caller(), "mini", not_ended, now_ns=0)
    state.per_conversation = per_conversation
    book.tool_records(state, first, 0)
    book.call_record(state, first, Observation(text="done", finish_reason="stop",
                                               response_id="resp_1"), [], 1, 10)
    book.settle(state)
    nudge = wire.read_request({"model": "m", "previous_response_id": "resp_1",
                               "input": [{"role": "user", "content": "continue"}]})
    found = book.identify("responses", nudge, Caller(), "mini", lambda _key: True,
                          now_ns=10 + 100 * AT_ONCE_NS)
    assert (found is state, found.going_on) == (per_conversation, per_conversation)
