"""A run's history summarised in a request aside (a summariser of the agent's own, a
conversation of its own quoting that history), then compacted to that summary in a new
conversation that opens with a model message holding it (CAMEL-AI's ``[CONTEXT_SUMMARY]``):
one run, its budget counted down across it (:meth:`ModelBook._recapped`,
:meth:`ModelBook._recap_of`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from watchdog.core.model.book import Caller, EndpointRun, ModelBook, aside_of, is_side
from watchdog.core.model.chat import ChatWire
from watchdog.core.model.wire import Observation, Request
from watchdog.core.model.wire import ToolCall as Call

SYSTEM = "You are a careful research agent."
SUMMARISER = "You are a helpful assistant that summarizes conversations"
SUMMARY = "Summary: the agent searched for the file twice, under two terms; nothing found yet."


def going(_key: str) -> bool:
    return False


def request(*messages: dict[str, Any], tools: bool = True, system: str = SYSTEM) -> Request:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "system", "content": system},
                                                       *messages]}
    if tools:
        body["tools"] = [{"type": "function", "function": {"name": "search"}}]
    return ChatWire().read_request(body)


def called(call_id: str, term: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": "search", "arguments": f'{{"q": "{term}"}}'}}]}


def result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def ask(book: ModelBook, sent: Request, answer: Observation, handed: list[Call],
        ended: Callable[[str], bool] = going) -> tuple[EndpointRun, list[Any], Any]:
    """One request of agent ``a``: its run, the tool records it made, the model call's."""
    state = book.identify("chat", sent, Caller(), "a", ended, None, 10)
    tools = book.tool_records(state, sent, 10)
    record = book.call_record(state, sent, answer, handed, 10, 20)
    book.settle(state)
    return state, tools, record


def searched(book: ModelBook, task: str) -> tuple[EndpointRun, list[dict[str, Any]]]:
    """A run of ``task`` that has searched once (its result carried, :func:`found`) and handed
    over a second search: its run and its conversation so far."""
    first, second = Call(f"{task}-1", "search", '{"q": "term 0"}'), Call(
        f"{task}-2", "search", '{"q": "term 1"}')
    history = [{"role": "user", "content": task}]
    run, _, _ = ask(book, request(*history), Observation(
        finish_reason="tool_calls", calls=[first], complete=True), [first])
    history += [called(first.call_id, "term 0"),
                result(first.call_id, found(task))]
    again, tools, _ = ask(book, request(*history), Observation(
        finish_reason="tool_calls", calls=[second], complete=True), [second])
    assert again is run and len(tools) == 1
    return run, history


def found(task: str) -> str:
    """What the search of ``task`` gave (its words of its own: task A's ``alpha``)."""
    return f"search #1: no file matches {'alpha' if task.endswith('A') else 'beta'!r}"


def summariser(task: str, quoted: str | None = None) -> Request:
    """CAMEL's summariser's request: its own instructions, the history written out in one
    user message (``quoted``: the task whose result it quotes), no tools."""
    return request({"role": "user", "content": (
        f"Summarize this conversation.\nuser: {task}\nassistant: search(q='term 0')\n"
        f"tool: {found(quoted or task)}\n")}, tools=False, system=SUMMARISER)


def compacted(task: str, summary: str = SUMMARY) -> Request:
    return request(
        {"role": "assistant", "content": f"[CONTEXT_SUMMARY] The following is a summary of "
                                         f"our conversation:\n{summary}\n(end of summary)"},
        {"role": "user", "content": f"Based on the previous CONTEXT_SUMMARY, continue: {task}"})


def summarised(book: ModelBook, task: str, summary: str = SUMMARY) -> EndpointRun:
    """The run of ``task`` summarised by its agent's summariser: the aside is the run's."""
    run, _ = searched(book, task)
    state, tools, record = ask(book, summariser(task), Observation(
        finish_reason="stop", text=summary, complete=True), [])
    assert state is run and tools == [] and not record.final_answer
    return run


def test_a_summary_asked_aside_is_the_runs_call_and_the_history_compacted_to_it_goes_on(
        ) -> None:
    """The summariser's request quotes the run's task and its latest result under its own
    instructions: a model call of the run (its tokens the run's), no answer of it (the run
    does not end, the call it waits for still out), no tool counted, steered as an aside.
    The conversation that opens with ``[CONTEXT_SUMMARY] <the summary>`` goes on in the run:
    the call it waited for counted there, its budget counted on."""
    book = ModelBook()
    run = summarised(book, "task A")
    aside = summariser("task A")
    assert is_side(run, aside) and aside_of(run, aside)
    assert not run.answered_last and run.handed == 2 and len(run.pending) == 1
    assert run.answered == 3  # (its model call counts: the aside's tokens are the run's)
    goes_on = compacted("task A")
    state, tools, _ = ask(book, goes_on, Observation(finish_reason="stop", text="REPORT",
                                                     complete=True), [])
    assert state is run and state.going_on and len(tools) == 1  # (the call it waited for)
    assert not aside_of(run, goes_on)
    later = request(  # (and the compacted conversation's next request: the same run)
        {"role": "assistant", "content": f"[CONTEXT_SUMMARY] The following is a summary of "
                                         f"our conversation:\n{SUMMARY}\n(end of summary)"},
        {"role": "user", "content": "Based on the previous CONTEXT_SUMMARY, continue: task A"},
        {"role": "assistant", "content": "REPORT"}, {"role": "user", "content": "And?"})
    assert book.identify("chat", later, Caller(), "a", lambda key: key == run.key, None,
                         10) is not run  # (the run ended at its answer: a next run)


def test_a_request_quoting_another_runs_history_is_that_runs_aside_or_none() -> None:
    """Two tasks of one agent at once, each summarised: each summary request is the aside of
    the run whose task and result it quotes, and each compacted conversation goes on in its
    own run. A request that quotes one's task and another's result is neither's; a history
    two runs share is neither's; a request under the run's own instructions (its agent's next
    task, handed that work) is no aside."""
    book = ModelBook()
    one = summarised(book, "task A", SUMMARY + " (A)")
    two = summarised(book, "task B", SUMMARY + " (B)")
    assert one is not two
    assert ask(book, compacted("task B", SUMMARY + " (B)"), Observation(
        finish_reason="stop", text="REPORT B", complete=True), [])[0] is two
    assert ask(book, compacted("task A", SUMMARY + " (A)"), Observation(
        finish_reason="stop", text="REPORT A", complete=True), [])[0] is one
    mixed = ModelBook()
    first, _ = searched(mixed, "task A")
    second, _ = searched(mixed, "task B")
    crossed = mixed.identify("chat", summariser("task A", "task B"), Caller(), "a", going)
    assert crossed not in (first, second)
    shared = ModelBook()
    runs = [searched(shared, "task A")[0] for _ in range(2)]  # (the same task twice at once)
    assert runs[0] is not runs[1]
    assert shared.identify("chat", summariser("task A"), Caller(), "a", going) not in runs
    own = ModelBook()
    run, _ = searched(own, "task A")
    handed_on = request({"role": "user", "content": summariser("task A").anchor_text},
                        tools=False)  # (the run's own instructions)
    assert own.identify("chat", handed_on, Caller(), "a", going) is not run


def test_a_summary_not_taken_up_or_reused_once_the_run_ended_starts_a_run_of_its_own(
        ) -> None:
    """A summary whose run went on in its own conversation instead (another answer of the run
    came) is no history of it; nor is one reused once the run ended, or the same summary of
    two runs at once (neither's). An aside of a run over (its final request went upstream)
    is a run of its own."""
    book = ModelBook()
    run, history = searched(book, "task A")
    ask(book, summariser("task A"), Observation(finish_reason="stop", text=SUMMARY,
                                                complete=True), [])
    history += [called("task A-2", "term 1"), result("task A-2", "search #2: nothing")]
    third = Call("task A-3", "search", '{"q": "term 2"}')
    assert ask(book, request(*history), Observation(finish_reason="tool_calls", calls=[third],
                                                    complete=True), [third])[0] is run
    assert book.identify("chat", compacted("task A"), Caller(), "a", going) is not run
    ended = ModelBook()
    over = summarised(ended, "task A")
    assert ended.identify("chat", compacted("task A"), Caller(), "a",
                          lambda key: key == over.key) is not over
    twins = ModelBook()
    both = [summarised(twins, task) for task in ("task A", "task B")]
    assert twins.identify("chat", compacted("task A"), Caller(), "a", going) not in both
    final = ModelBook()
    spent, _ = searched(final, "task A")
    spent.final_used = True
    assert final.identify("chat", summariser("task A"), Caller(), "a", going) is not spent


def test_an_aside_quoting_the_first_call_handed_over_before_its_result_is_the_runs() -> None:
    """gptme asks for its conversation's title by a thread of its own as soon as its first
    answer's call runs: the title request (its own instructions, no tools) quotes the task and
    that call's text argument, and may come before the run's next request brings the call's
    result. It is the run's model call all the same (no run of its own), its answer not the
    run's; a request that quotes the task and another command is not."""
    book = ModelBook()
    first = Call("c-1", "search", '{"q": "the file named alpha.txt"}')
    run, _, _ = ask(book, request({"role": "user", "content": "task A"}), Observation(
        finish_reason="tool_calls", calls=[first], complete=True), [first])
    other = request({"role": "user", "content": (
        "Create a title.\nUser: task A\nAssistant: @search: {\"q\": \"the file named beta\"}")},
        tools=False, system="Generate concise conversation titles.")
    assert book.identify("chat", other, Caller(), "a", going, None, 10) is not run
    title = request({"role": "user", "content": (
        "Create a title.\nUser: task A\nAssistant: @search: "
        "{\"q\": \"the file named alpha.txt\"}")},
        tools=False, system="Generate concise conversation titles.")
    state, tools, record = ask(book, title, Observation(
        finish_reason="stop", text="File search", complete=True), [])
    assert state is run and tools == [] and not record.final_answer
    assert len(run.pending) == 1 and not run.answered_last  # (its call still out)
