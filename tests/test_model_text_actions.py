"""The model endpoint's pieces for agents that act in their answers' text (a rule pack's
``actions: text``), pure: the book hands each answer over as one ``text_action`` call and goes
on in the run at the next request; the tracker holds the run open after such an answer and
ends it ``loose_run_gap`` after its last call; the turn tells such a request the tool-call
countdown (it offers no tools) and asks its final request for the agent's own finish; the stop
answer takes the pack's form. The real agent's tests:
:mod:`tests.frameworks.test_model_endpoint_text_actions`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from watchdog.core.model.actions import (
    MAX_PENDING_CALLS,
    TEXT_ACTION,
    acts_on_answer,
    json_actions,
)
from watchdog.core.model.book import (
    MAX_ACTING_PER_AGENT,
    Caller,
    EndpointRun,
    ModelBook,
    Unbooked,
    is_side,
    no_json,
    quotes_answer,
    text_action,
    text_stop_answer,
)
from watchdog.core.model.chat import ChatWire
from watchdog.core.model.steer import TEXT_FINISH, Act, Board, Counts, decide
from watchdog.core.model.wire import Observation, Request
from watchdog.core.rules.decision import COUNTDOWN_TOOL_CALLS
from watchdog.core.rules.model import TEXT_TEMPLATES
from watchdog.core.rules.pack import _action_pattern_problem, load_text
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.spans import native
from watchdog.core.spans.record import KeySource, SpanKind, SpanRecord

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
    [one] = text_action(state, said("THOUGHT: look.\n\n```bash\nls  -la\n```"))
    [other] = text_action(state, said("THOUGHT: look again, differently.\n```bash\nls -la\n```"))
    assert one.name == TEXT_ACTION and json.loads(one.arguments) == {"action": "ls -la"}
    assert one.arguments == other.arguments and one.call_id != other.call_id
    [plain] = text_action(state, said("Action: search\nAction Input: the file"))
    assert json.loads(plain.arguments) == {
        "action": "Action: search Action Input: the file"}
    # no action: another run's answer, one cut short, an empty one, the final's, a stop's
    assert text_action(EndpointRun("k", state.key_source, "t", None), said("ls")) == []
    assert text_action(state, Observation(text="```bash\nls", finish_reason="length")) == []
    assert text_action(state, said("  ")) == []
    state.final_used = True
    assert text_action(state, said("```bash\nls\n```")) == []


def test_the_packs_action_pattern_picks_the_action_out_and_an_answer_without_one_ends() -> None:
    """A pack's ``action_pattern`` (a ReAct agent's ``Action:`` / ``Action Input:``): the
    action is what it matches (its groups), the thought before it aside; an answer it does
    not match holds no action: the run's answer, which ends it."""
    state = acting_run()
    state.action_pattern = r"(?s)Action:\s*(.*?)\s*Action Input:\s*(.*)"
    [one] = text_action(state, said("Thought: first try.\nAction: read_file\nAction Input: a"))
    [other] = text_action(state, said("Thought: once more.\nAction: read_file\nAction Input: a"))
    assert one.arguments == other.arguments == json.dumps({"action": "read_file a"})
    assert text_action(state, said("Thought: done.\nFinal Answer: 42")) == []
    check_ends_the_run(state.action_pattern, "Thought: done.\nFinal Answer: 42")


def check_ends_the_run(pattern: str, answer: str) -> None:
    """An answer ``pattern`` finds no action in is the run's answer: it ends the run."""
    book = ModelBook()
    first = prompt_request(REACT)
    run = book.identify("chat", first, Caller(), "agent", not_ended)
    run.acts_in_text, run.action_pattern = True, pattern
    record = book.call_record(run, first, said(answer), [], 1, 2)
    assert (record.final_answer, record.acted_on, record.ends_run) == (True, False, True)


LANGROID_SAID = ('I search first.\n```json\n{"request": "shell", "command": '
                 '"awk \'{print $1}\' a.txt | grep -c \\"}\\""}\n```\nThen {this} one:\n'
                 '{"request": "shell", "command": "ls", "extra": {"nested": [1, {"x": 2}]}}\n'
                 'and I am done {soon}.')


def test_a_packs_action_key_makes_each_json_object_naming_a_tool_a_call_of_it() -> None:
    """A pack's ``action_key`` (Langroid's ``request``): each JSON object in the answer whose
    key names a tool, fenced or not, is a call of that tool, its arguments the object (keys
    sorted: the same object again is the same call); braces in strings, nested objects and
    the prose's own braces are read as JSON reads them. An answer with none holds no
    action: the run's answer."""
    state = acting_run()
    state.action_key = "request"
    calls = text_action(state, said(LANGROID_SAID))
    assert [(call.name, json.loads(call.arguments)) for call in calls] == [
        ("shell", {"request": "shell", "command": "awk '{print $1}' a.txt | grep -c \"}\""}),
        ("shell", {"request": "shell", "command": "ls", "extra": {"nested": [1, {"x": 2}]}})]
    [again] = text_action(state, said('Once more: {"command": "ls", "extra": {"nested": '
                                      '[1, {"x": 2}]}, "request": "shell"}'))
    assert again.arguments == calls[1].arguments and again.call_id != calls[1].call_id
    assert text_action(state, said("The answer is {42}: {\"no\": \"request\"}.")) == []
    assert text_action(state, said('{"request": 3} {"request": ""}')) == []  # no tool named
    # (an object the agent would repair is none: strict JSON alone)
    assert text_action(state, said("{'request': 'shell', 'command': 'ls'}")) == []
    book = ModelBook()
    first = request()
    run = book.identify("chat", first, Caller(), "langroid", not_ended)
    run.acts_in_text, run.action_key = True, "request"
    record = book.call_record(run, first, said(LANGROID_SAID), [], 1, 2)
    assert (record.acted_on, record.ends_run, [name for name, _ in record.asked_tools]) == (
        True, False, ["shell", "shell"])
    assert run.handed == 2
    record = book.call_record(run, first, said("All done: 2 files."), [], 3, 4)
    assert (record.final_answer, record.acted_on, record.ends_run) == (True, False, True)


QWEN_SAID = ('I list the records first: {"name": "a.txt"} is one.\n<tool_call>\n'
             '{"name": "shell", "arguments": {"command": "ls", "name": "x"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "shell", "arguments": {"command": "pwd"}}\n</tool_call>')


def test_an_action_key_with_an_action_pattern_reads_the_objects_in_what_it_matches() -> None:
    """An ``action_key`` with an ``action_pattern`` (Qwen-Agent's and Hermes'
    ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, the key ``name``): the JSON
    objects are read in what the pattern matches alone (its groups, else the match), each a
    call of the tool it names; the prose's objects that have the key are none (without the
    pattern, a call of ``a.txt``), nor is an answer the pattern does not match, whatever
    JSON it holds: the run's answer."""
    state = acting_run()
    state.action_key = "name"
    assert [call.name for call in text_action(state, said(QWEN_SAID))] == [
        "a.txt", "shell", "shell"]
    state.action_pattern = "(?s)<tool_call>.*</tool_call>"
    calls = text_action(state, said(QWEN_SAID))
    assert [(call.name, json.loads(call.arguments)) for call in calls] == [
        ("shell", {"name": "shell", "arguments": {"command": "ls", "name": "x"}}),
        ("shell", {"name": "shell", "arguments": {"command": "pwd"}})]
    assert text_action(state, said('The record: ```json\n{"name": "a.txt"}\n```')) == []
    state.action_pattern = r"(?s)<tool_call>(.*?)</tool_call>"  # (its group: the first only)
    [first] = text_action(state, said(QWEN_SAID))
    assert json.loads(first.arguments)["arguments"]["command"] == "ls"


def test_a_spans_answer_holds_an_action_as_the_packs_entry_reads_it() -> None:
    """``acts_on_answer``: what a traced model call answered, read by the agent's budgets
    entry as the endpoint reads a relayed answer: an action (Qwen-Agent's ``<tool_call>``, a
    bash block), or none (an answer; the agent's own finishing action)."""
    ruleset = load_text("""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: t
budgets:
  - agents: ["qwen"]
    actions: text
    action_pattern: '(?s)<tool_call>.*</tool_call>'
    action_key: name
  - agents: ["langroid"]
    actions: text
    action_key: request
    answer_tools: [done_tool]
  - agents: ["mini"]
    actions: text
  - agents: ["interpreter"]
    actions: code
""")
    qwen, langroid, mini, interpreter = (ruleset.acts_in_text(agent) for agent in (
        "qwen", "langroid", "mini", "interpreter"))
    assert qwen is not None and langroid is not None and mini is not None \
        and interpreter is not None
    assert acts_on_answer(qwen, QWEN_SAID)
    assert not acts_on_answer(qwen, 'Done: {"name": "a.txt"}')
    assert acts_on_answer(langroid, '{"request": "shell", "command": "ls"}')
    assert not acts_on_answer(langroid, '{"request": "done_tool", "content": "2 files."}')
    assert acts_on_answer(mini, "Anything at all.")
    assert acts_on_answer(interpreter, "```python\nprint(1)\n```")
    assert not acts_on_answer(interpreter, "All done.")


# Qwen-Agent's system message in the Hermes ("nous") template, as it writes it
HERMES_SYSTEM = {"role": "system", "content": (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"type": "function", "function": {"name": "shell", "parameters": {}}}\n</tools>\n\n'
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')}
TEXT_TEMPLATE_PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: t
budgets:
  - agents: ["declared"]
    actions: text
    action_key: name
  - agents: ["said-tools"]
    max_tool_calls: 3
    actions: tools
  - agents: ["budget-only"]
    max_tool_calls: 3
"""


def test_the_hermes_template_in_the_instructions_is_read_unless_the_pack_says_actions() -> None:
    """A request whose instructions carry the Hermes template's markers (``<tools>``,
    ``<tool_call>``) is read as a pack entry declaring it would read it (``actions: text``,
    the ``<tool_call>`` blocks' ``action_pattern``, ``action_key: name``), for an agent with no
    entry or one that says nothing of how it acts; the entry that says ``actions:`` wins (text:
    its own reading; tools: none)."""
    ruleset = load_text(TEXT_TEMPLATE_PACK)
    hermes = ChatWire().read_request({"model": "m", "messages": [HERMES_SYSTEM, TASK]})
    for agent in ("assistant", "budget-only"):
        reading = ruleset.text_acting(agent, hermes.instructions)
        assert reading is not None and reading.actions == "text", agent
        assert (reading.action_pattern, reading.action_key) == (
            "(?s)<tool_call>.*</tool_call>", "name")
        assert acts_on_answer(reading, QWEN_SAID)
        assert not acts_on_answer(reading, 'Done: {"name": "a.txt"}')  # (no <tool_call>)
    assert ruleset.budget_for("budget-only") == {"max_tool_calls": 3.0}
    declared = ruleset.text_acting("declared", hermes.instructions)
    assert declared is not None and (declared.action_key, declared.action_pattern) == (
        "name", None)
    assert acts_on_answer(declared, 'Done: {"name": "a.txt"}')  # (its own reading)
    assert ruleset.text_acting("said-tools", hermes.instructions) is None
    # one marker alone is no template; an entry declaring text acts so without the markers
    for content in ("Call tools in <tools>.", "Write <tool_call> blocks.", "Be brief."):
        plain = ChatWire().read_request({"model": "m", "messages": [
            {"role": "system", "content": content}, TASK]})
        assert ruleset.text_acting("assistant", plain.instructions) is None, content
        assert ruleset.text_acting("declared", plain.instructions) is declared
    # each template's pattern is one a pack may give (the compiled matcher takes it)
    for template in TEXT_TEMPLATES:
        pattern = template.reading.action_pattern
        assert pattern is not None and _action_pattern_problem(pattern) is None, template


def test_a_users_prose_about_the_template_is_no_instruction_of_it() -> None:
    """The markers in a user's message (a question about the template), not in the system or
    developer messages the request's instructions are: no template read."""
    ruleset = load_text(TEXT_TEMPLATE_PACK)
    asked = ChatWire().read_request({"model": "m", "messages": [SYSTEM, {
        "role": "user", "content": "What do <tools> and <tool_call> mean in Hermes prompts?"}]})
    assert "<tool_call>" not in asked.instructions
    assert ruleset.text_acting("assistant", asked.instructions) is None
    developer = ChatWire().read_request({"model": "m", "messages": [
        {"role": "developer", "content": HERMES_SYSTEM["content"]}, TASK]})
    assert ruleset.text_acting("assistant", developer.instructions) is not None


def test_a_regular_expression_over_json_takes_the_wrong_action_out() -> None:
    """Why ``action_key`` and not an ``action_pattern`` for actions as JSON objects: a
    regular expression does not know JSON's nesting nor its strings. A lazy one stops at the
    first closing brace (one in a string); a greedy one runs to the answer's last (the prose
    after it, the second object with it): either way one action where the agent runs two."""
    state = acting_run()
    state.action_pattern = r'(?s)(\{\s*"request".*?\})'
    [lazy] = text_action(state, said(LANGROID_SAID))
    assert json.loads(lazy.arguments)["action"] == (
        '{"request": "shell", "command": "awk \'{print $1}')
    state.action_pattern = r'(?s)(\{\s*"request".*\})'
    [greedy] = text_action(state, said(LANGROID_SAID))
    assert greedy.arguments.count("request") == 2 and "Then {this} one" in greedy.arguments


def test_an_answer_tools_action_is_the_runs_answer_not_a_call() -> None:
    """A pack's ``answer_tools`` (Langroid's ``done_tool``; the tool an ``action_pattern``'s
    first group names, an XML agent's ``attempt_completion``): an answer whose actions are all
    of them is the run's answer, its content the output (a JSON object's one field but the
    key; the pattern's groups after the first), no tool call, and it ends the run at once;
    so with other actions beside it, none of them counted (the agent's task ends at it)."""
    done = 'Finished.\n```json\n{"request": "done_tool", "content": "2 files."}\n```'
    xml = "<attempt_completion>\n<result>\n2 files.\n</result>\n</attempt_completion>"
    pattern = ("(?s)<(execute_command|attempt_completion)>(.*?)"
               "</(?:execute_command|attempt_completion)>")
    for key, form, answer, output in (
            ("request", None, done, "2 files."),
            ("request", None, done.replace('"content": "2 files."',
                                          '"content": "2 files.", "n": 2'),
             '{"content": "2 files.", "n": 2}'),
            (None, pattern, xml, "<result>\n2 files.\n</result>")):
        book = ModelBook()
        first = request()
        run = book.identify("chat", first, Caller(), "agent", not_ended)
        run.acts_in_text, run.action_key, run.action_pattern = True, key, form
        run.answer_tools = ("done_tool", "attempt_completion")
        record = book.call_record(run, first, said(answer), [], 1, 2)
        assert (record.final_answer, record.final_output, record.acted_on, record.ends_run,
                record.asked_tools, run.handed) == (True, output, False, True, (), 0), answer
    book = ModelBook()
    first = request()
    run = book.identify("chat", first, Caller(), "agent", not_ended)
    run.acts_in_text, run.action_key, run.answer_tools = True, "request", ("done_tool",)
    record = book.call_record(run, first, said('{"request": "shell", "command": "ls"} '
                                               + done), [], 1, 2)
    assert (record.ends_run, record.final_output, record.acted_on, record.asked_tools,
            run.handed) == (True, "2 files.", False, (), 0)
    # (its final request answered by it: the report its content, as with a plain answer)
    run.final_used = True
    record = book.call_record(run, first, said(done), [], 3, 4)
    assert (record.final_answer, record.final_output, record.acted_on) == (
        True, "2 files.", False)


def test_an_answer_key_object_is_the_runs_answer_and_an_answer_of_neither_a_step() -> None:
    """A pack's ``answer_key`` (KaibanJS's ``finalAnswer``): an answer holding an object with
    it is the run's answer, its value the output, no tool call, even beside an action (and as
    its final request's answer); an answer holding neither an action nor one is a step: a model
    call, no tool call, the run going on (``acted_on``); at its final request, its answer."""
    final = 'Done.\n```json\n{"finalAnswer": "2 files."}\n```'
    observe = '{"observation": "one file so far, a second to read.", "isFinalAnswerReady": false}'
    act = '{"thought": "list", "action": "shell", "actionInput": {"command": "ls"}}'
    for answer, output, acted_on, asked in (
            (final, "2 files.", False, ()),
            (act + " " + final, "2 files.", False, ()),
            ('{"finalAnswer": {"files": 2}}', '{"files": 2}', False, ()),
            (observe, observe, True, ()),
            (act, act, True, ("shell",))):
        book = ModelBook()
        first = request()
        run = book.identify("chat", first, Caller(), "agent", not_ended)
        run.acts_in_text, run.action_key, run.answer_key = True, "action", "finalAnswer"
        record = book.call_record(run, first, said(answer), [], 1, 2)
        assert (record.final_output, record.acted_on, record.ends_run,
                tuple(name for name, _ in record.asked_tools)) == (
            output, acted_on, not acted_on, asked), answer
    run.final_used = True  # (its final request's answer: its last, whatever it holds)
    record = book.call_record(run, first, said(observe), [], 3, 4)
    assert (record.final_output, record.acted_on, record.ends_run) == (observe, False, True)
    # (without it, an answer of no action is the run's answer, the object its text)
    book = ModelBook()
    run = book.identify("chat", first, Caller(), "agent", not_ended)
    run.acts_in_text, run.action_key = True, "action"
    record = book.call_record(run, first, said(observe), [], 1, 2)
    assert (record.final_output, record.acted_on, record.ends_run) == (observe, False, True)
    # (read so on spans: a step is acted on, the answer object is not)
    ruleset = load_text("""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: t
budgets:
  - agents: ["kaibanjs"]
    actions: text
    action_key: action
    answer_key: finalAnswer
  - agents: ["other"]
    actions: text
    action_key: action
""")
    entry, other = ruleset.acts_in_text("kaibanjs"), ruleset.acts_in_text("other")
    assert entry is not None and other is not None
    assert [acts_on_answer(entry, text) for text in (final, observe, act)] == [
        False, True, True]
    assert not acts_on_answer(other, observe)


def test_an_action_key_searches_a_long_answer_in_time_linear_in_it() -> None:
    """A model's answer is outside data: braces that begin no JSON object are tried at most
    MAX_JSON_STARTS times, objects read once each, within the answer's first
    MAX_ACTION_CHARS, so an answer of braces, of deep nesting or of an unclosed string costs
    time linear in it (pytest's timeout ends a quadratic search of these)."""
    state = acting_run()
    state.action_key = "request"
    for text in ("{" * 200_000, '{"a": "' * 50_000, "[" * 100_000, '{"x": 1} ' * 20_000):
        assert text_action(state, said(text)) == []
    many = text_action(state, said('{"request": "t"} ' * 2_000))
    assert len(many) == MAX_PENDING_CALLS  # (as many as one response's tool calls waiting)


def test_an_action_pattern_searches_a_long_answer_in_time_linear_in_it() -> None:
    """A model's answer is outside data: a pack's ``action_pattern`` that a backtracking
    search takes polynomial or exponential time in (two lazy repeats: cubic; the ReAct
    pattern on an answer of ``Action:`` again and again: quadratic) is searched by the
    compiled matcher, in time linear in the answer (Python's ``re`` took minutes on this one
    and held every run of the endpoint up: pytest's timeout ends it). What it finds is what
    ``re`` finds."""
    assert native.searcher("x") is not None  # (the test tree builds the compiled module)
    state = acting_run()
    state.action_pattern = r"(?s)(.*?)(.*?)Z"
    assert text_action(state, said("a " * 50_000)) == []  # 100 KB, no Z: no action
    state.action_pattern = r"(?s)Action:\s*(.*?)\s*Action Input:\s*(.*)"
    assert text_action(state, said("Action: " * 12_500)) == []
    [found] = text_action(state, said("Thought: Action: x\nAction: read_file\nAction Input: a"))
    assert found.arguments == json.dumps(
        {"action": "x Action: read_file a"})  # (as re.search: the first Action:, lazily)

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


def test_an_agent_acting_by_code_blocks_ends_its_run_with_an_answer_holding_none() -> None:
    """``actions: code`` (Open Interpreter): an answer's code block is an action, held open
    for the next request; an answer with none is the run's answer, which ends it at once; the
    agent's next message (a script's next ``chat``, at once) is the next run, before the
    tracker has ended the run."""
    book = ModelBook()
    first = request()
    state = book.identify("chat", first, Caller(), "oi", not_ended)
    state.acts_in_text = state.acts_in_code = True
    code = "I look.\n\n```shell\nls\n```"
    record = book.call_record(state, first, said(code), [], 1, 2)
    assert (record.acted_on, record.ends_run) == (True, False)
    after = request({"role": "assistant", "content": code}, {"role": "user", "content": "a b"})
    assert book.identify("chat", after, Caller(), "oi", not_ended) is state
    book.tool_records(state, after, 3)
    record = book.call_record(state, after, said("There are 2 files."), [], 3, 4)
    assert (record.acted_on, record.final_answer, record.ends_run) == (False, True, True)
    assert text_action(state, said("There are 2 files.")) == []
    again = request({"role": "assistant", "content": code}, {"role": "user", "content": "a b"},
                    {"role": "assistant", "content": "There are 2 files."},
                    {"role": "user", "content": "And the folders?"})
    assert book.identify("chat", again, Caller(), "oi", not_ended) is not state
    # (actions: text: the same answer is one more action, the run held open)
    state.acts_in_code = False
    assert text_action(state, said("There are 2 files.")) != []


def test_an_agents_span_of_a_call_whose_answer_it_acts_on_does_not_end_the_run() -> None:
    """The agent's own span of the call (LiteLLM's callback's: a trace of its own, no parent)
    comes after the endpoint's record of it, which said the agent acts on that answer: the
    two are one call, and the run goes on."""
    book, tracker = ModelBook(), RunTracker()
    first = request()
    state = book.identify("chat", first, Caller(), "oi", not_ended)
    state.acts_in_text = state.acts_in_code = True
    tracker.open(state.key, state.key_source, state.trace_id, 0.5)  # (as the endpoint does)
    code = "I look.\n\n```shell\nls\n```"
    record = book.call_record(state, first, Observation(text=code, finish_reason="stop",
                                                        response_id="chatcmpl-1"), [], 1, 2)
    tracker.apply([record], 1.0)
    span = SpanRecord(run_key="trace:" + "b" * 32, key_source=KeySource.TRACE,
                      trace_id="b" * 32, span_id="c" * 16, parent_span_id=None,
                      name="litellm_request", kind=SpanKind.LLM, start_ns=1, end_ns=2,
                      agent="oi", final_answer=True, final_output=code,
                      response_id="chatcmpl-1", scope="litellm")
    tracker.apply([span], 2.0)
    run = tracker.get(state.key)
    assert run is not None and not run.ended and run.iterations == 1


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


def test_a_side_request_quoting_the_latest_answer_is_the_runs_and_goes_as_it_came() -> None:
    """A conversation's first request that quotes the latest answer of a run acting in text
    (Aider's commit message: the edit it applied, for its weak model) is a model call of that
    run: not a run of its own, no action, not the run's answer, never told its countdown nor
    made its final request; the action it quotes still waits for its result."""
    book = ModelBook()
    first = request()
    state = book.identify("chat", first, Caller(), "aider", not_ended)
    state.acts_in_text = True
    answer = ("I bump it.\n\nhello.py\n```python\n<<<<<<< SEARCH\nv0\n=======\nv1\n"
              ">>>>>>> REPLACE\n```")
    book.call_record(state, first, said(answer), [], 1, 2)
    commit = ChatWire().read_request({"model": "weak", "messages": [
        {"role": "system", "content": "Write a one-line commit message."},
        {"role": "user", "content": f"# Context:\nUSER: Bump it.\nASSISTANT: {answer}\n"
                                    "# Diffs:\n-v0\n+v1"}]})
    assert book.identify("chat", commit, Caller(), "aider", not_ended) is state
    assert quotes_answer(state, commit) and is_side(state, commit)
    assert book.tool_records(state, commit, 3) == []  # (the edit's action still runs)
    record = book.call_record(state, commit, said("Bump the version"), [], 3, 4)
    assert (record.acted_on, record.final_answer, len(state.pending)) == (False, False, 1)
    spent = Counts(used=5, handed=5, budget={"max_tool_calls": 5.0})
    assert decide(spent, None, "", has_tools=False, acts_in_text=True, aside=True).act \
        is Act.PASS
    # its run's next request goes on, its result the edit's; another agent's, or one that
    # quotes nothing of the run, or once the run has ended, is a run of its own
    assert book.identify("chat", commit, Caller(), "another", not_ended) is not state
    other = ChatWire().read_request({"model": "weak", "messages": [
        {"role": "user", "content": "Summarise: nothing of the run here, said at length."}]})
    assert book.identify("chat", other, Caller(), "aider", not_ended) is not state
    assert book.identify("chat", commit, Caller(), "aider", ended) is not state


def test_a_side_request_whose_answer_comes_after_the_runs_next_answer_is_still_aside() -> None:
    """gptme asks for its title by a thread of its own, quoting its first answer, while its
    next request is with the model: that request's answer is booked first, so the run's
    latest answer is another when the title's answer comes. The title is still the side
    request it was: a model call of the run, no action, not its answer."""
    book = ModelBook()
    first = request()
    state = book.identify("chat", first, Caller(), "gptme", not_ended)
    state.acts_in_text = True
    answer = "Step 0.\n\n```shell\necho step0 >> ran.log\n```"
    book.call_record(state, first, said(answer), [], 1, 2)
    title = ChatWire().read_request({"model": "m", "messages": [
        {"role": "system", "content": "Generate concise conversation titles."},
        {"role": "user", "content": f"Create a title.\nUser: Count the files.\n"
                                    f"Assistant: {answer}\n"}]})
    second = request({"role": "assistant", "content": answer},
                     {"role": "system", "content": "Ran command: echo step0 >> ran.log"})
    assert book.identify("chat", second, Caller(), "gptme", not_ended) is state
    assert book.identify("chat", title, Caller(), "gptme", not_ended) is state
    book.tool_records(state, second, 3)
    book.call_record(state, second, said("Step 1.\n\n```shell\necho step1 >> ran.log\n```"),
                     [], 3, 4)
    assert is_side(state, title)  # (the run's latest answer is step 1's by now)
    handed = state.handed
    record = book.call_record(state, title, said("Counting files"), [], 4, 5)
    assert (record.acted_on, record.final_answer, state.handed) == (False, False, handed)


def test_a_request_that_begins_as_the_run_did_without_its_latest_answer_is_the_next_run(
        ) -> None:
    """An agent whose every request begins with the same messages (Aider's examples): the
    request that goes on carries the run's latest answer; another invocation's first request,
    however long, does not, and starts the next run (the run before it not ended, held open
    after its action). A request that ends the run's final answer's action goes on likewise."""
    examples = ({"role": "user", "content": "Change get_factorial() to use math.factorial"},
                {"role": "assistant", "content": "To make this change we need to modify it."})
    answer = ("I bump it.\n\n```python\n<<<<<<< SEARCH\nv0\n=======\nv1\n"
              ">>>>>>> REPLACE\n```")

    def aider(*messages: dict[str, Any]) -> Request:
        return ChatWire().read_request({"model": "m", "messages": [SYSTEM, *examples,
                                                                   *messages]})

    book = ModelBook()
    first = aider({"role": "user", "content": "Bump the version."})
    state = book.identify("chat", first, Caller(), "aider", not_ended)
    state.acts_in_text = True
    book.call_record(state, first, said(answer), [], 1, 2)
    lint = aider({"role": "user", "content": "Bump the version."},
                 {"role": "assistant", "content": answer},
                 {"role": "user", "content": "I updated the files."},
                 {"role": "assistant", "content": "Ok."},
                 {"role": "user", "content": "# Fix any errors below, if possible."})
    assert state.quote is not None and book.identify("chat", lint, Caller(), "aider",
                                                     not_ended) is state
    book.call_record(state, lint, said(answer.replace("v1", "v2")), [], 3, 4)
    another = aider({"role": "user", "content": "notes.md is read-only: its text."},
                    {"role": "assistant", "content": "Ok."},
                    {"role": "user", "content": "I have added hello.py to the chat."},
                    {"role": "assistant", "content": "Ok."},
                    {"role": "user", "content": "Bump the version."},
                    {"role": "assistant", "content": "Ok."},
                    {"role": "user", "content": "Bump it again."})
    assert another.messages > lint.messages
    assert book.identify("chat", another, Caller(), "aider", not_ended) is not state
    # after its final request: the agent's next request with its output is the run's (the
    # stop), another invocation's is the next run
    book = ModelBook()
    state = book.identify("chat", first, Caller(), "aider", not_ended)
    state.acts_in_text, state.final_used = True, True
    book.call_record(state, first, said(answer), [], 1, 2)
    assert book.identify("chat", lint, Caller(), "aider", ended) is state
    assert book.identify("chat", another, Caller(), "aider", ended) is not state


def test_an_answer_its_agent_writes_anew_with_the_same_json_actions_goes_on_in_the_run(
        ) -> None:
    """An agent that names its tools by JSON objects and sends each answer back as it parsed
    it (Qwen-Agent: the call as ``json.dumps`` writes it, the name first, the prose after it
    dropped): a request whose model answer holds the same actions, in the same order, goes on
    in the run; one whose answer holds other actions (another invocation's step), or the same
    with one missing, does not, and starts the next run."""
    pattern = "(?s)<tool_call>.*</tool_call>"
    answer = ('Two now:\n<tool_call>{"arguments":{"command":"ls"},"name":"shell"}</tool_call>\n'
              '<tool_call>{"name":"shell","arguments":{"command":"pwd"}}</tool_call>\nThen I see.')

    def written(*commands: str) -> str:
        return "Two now:\n" + "\n".join("<tool_call>\n" + json.dumps(
            {"name": "shell", "arguments": {"command": command}}) + "\n</tool_call>"
            for command in commands)

    def after(text: str) -> Request:
        return request({"role": "assistant", "content": text},
                       {"role": "user", "content": "<tool_response>\nx\n</tool_response>"})

    for anew, goes_on in ((written("ls", "pwd"), True), (written("pwd", "ls"), False),
                          (written("ls"), False), (written("ls", "pwd", "id"), False)):
        book = ModelBook()
        first = request()
        state = book.identify("chat", first, Caller(), "qwen", not_ended)
        state.acts_in_text, state.action_key, state.action_pattern = True, "name", pattern
        record = book.call_record(state, first, said(answer), [], 1, 2)
        assert record.acted_on and len(state.acted) == 2
        assert state.quote is not None and state.quote not in " ".join(anew.split())
        assert (book.identify("chat", after(anew), Caller(), "qwen", not_ended)
                is state) == goes_on, anew


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


def test_a_json_stop_answer_takes_the_note_as_a_json_string() -> None:
    """``${note_json}``: the note quoted and escaped, so a form that is a JSON object stays
    one whatever the note holds (quotes, lines, a mark of its own); ``"${note}"`` would not."""
    form = '{"request": "done_tool", "content": ${note_json}}'
    note = 'Stopped: "a loop".\n\nLast step: echo "${note}" ${note_json} \\ done'
    assert json.loads(text_stop_answer(form, note)) == {"request": "done_tool", "content": note}
    with pytest.raises(ValueError):
        json.loads(text_stop_answer('{"content": "${note}"}', note))


def test_a_stop_notes_steps_quote_no_json_object_an_agent_acting_in_text_would_run() -> None:
    """The stop note's last steps quote each call's arguments: for an agent that reads its
    actions from text, with no JSON object left (Langroid ran ``shell({"command": ...})``
    from the note, its tool's fields enough: its real test,
    :mod:`tests.frameworks.test_model_endpoint_langroid`, aborts and stops it)."""
    line = ('+0.3s tool shell({"command":"echo tried >> ran.log","request":"shell"}) -> '
            'exit 1 {"error": "missing.txt"}')
    assert json_actions(line, "request") != []
    shown = no_json(line)
    assert shown == ('+0.3s tool shell(("command":"echo tried >> ran.log","request":"shell")) '
                     '-> exit 1 ("error": "missing.txt")')
    assert json_actions(shown, "request") == [] and json_actions(shown, "command") == []


def test_a_task_that_quotes_the_latest_answer_in_the_agents_own_prompt_is_the_next_run(
        ) -> None:
    """The agent's next task that quotes its latest answer whole (a script that hands the
    plan one run answered to the next run: 'Carry out this plan: ...'), sent while that run
    is held open after its answer, begins as the agent's every conversation does (its own
    system prompt): the next run, told its own countdown, not a side request of the last."""
    book = ModelBook()
    first = request()
    state = book.identify("chat", first, Caller(), "mini", not_ended)
    state.acts_in_text = True
    plan = "Plan: list the files, count the Python ones, then write the count to count.txt."
    book.call_record(state, first, said(plan), [], 1, 2)
    task = ChatWire().read_request({"model": "m", "messages": [
        SYSTEM, {"role": "user", "content": f"Carry out this plan: {plan}"}]})
    assert state.quote is not None and not quotes_answer(state, task)
    nxt = book.identify("chat", task, Caller(), "mini", not_ended)
    assert nxt is not state


def test_a_side_request_goes_to_the_run_whose_answer_it_quotes_of_two_of_one_agent() -> None:
    """Two invocations of one agent at once (two Aider processes on one base URL): each one's
    commit message request quotes its own run's latest answer and goes to that run, whichever
    answered last."""
    book = ModelBook()
    runs, answers = [], []
    for file in ("one.py", "two.py"):
        first = ChatWire().read_request({"model": "m", "messages": [
            SYSTEM, {"role": "user", "content": f"Bump the version in {file}."}]})
        state = book.identify("chat", first, Caller(), "aider", not_ended)
        state.acts_in_text = True
        answer = (f"I bump it.\n\n{file}\n```python\n<<<<<<< SEARCH\nv0\n=======\nv1\n"
                  ">>>>>>> REPLACE\n```")
        book.call_record(state, first, said(answer), [], 1, 2)
        runs.append(state)
        answers.append(answer)
    assert runs[0] is not runs[1]
    for state, answer in zip(runs, answers, strict=True):
        commit = ChatWire().read_request({"model": "weak", "messages": [
            {"role": "system", "content": "Write a one-line commit message."},
            {"role": "user", "content": f"# Context:\nASSISTANT: {answer}\n# Diffs:\n-v0\n+v1"}]})
        assert book.identify("chat", commit, Caller(), "aider", not_ended) is state
    # (the runs kept for it are the agent's latest, bounded)
    for index in range(2 * MAX_ACTING_PER_AGENT):
        first = ChatWire().read_request({"model": "m", "messages": [
            SYSTEM, {"role": "user", "content": f"Bump the version in file{index}.py."}]})
        state = book.identify("chat", first, Caller(), "aider", not_ended)
        state.acts_in_text = True
        book.call_record(state, first, said(f"{answers[0]} {index}"), [], 1, 2)
    assert len(book._acting["aider"]) == MAX_ACTING_PER_AGENT
    assert book._acting["aider"][-1] == state.key


REACT = ("Answer the question. Use the format: Thought: / Action: / Action Input: / "
         "Observation: / Final Answer:\n\nBegin!\n\nQuestion: add 100 to 0 and 1.\n")
STEP = "Thought: I add 0 to 100 first.\nAction: calculator\nAction Input: 0 + 100"


def prompt_request(text: str) -> Request:
    """A request of an agent that sends its history within one prompt (LangChainGo's and
    LangChain's ReAct agents): one user message, no model answer in it."""
    return ChatWire().read_request({"model": "m", "stop": ["\nObservation:"],
                                    "messages": [{"role": "user", "content": text}]})


def test_a_prompt_grown_by_the_latest_answer_and_its_observation_goes_on_in_the_run() -> None:
    """A ReAct agent's next request is a conversation's first (one user message): its prompt
    is the one before with the answer and its action's ``Observation:`` appended (the
    scratchpad). It goes on in the run, the observation the action's result; a request that
    begins with the same prompt without that answer (another invocation of the same task), or
    whose prompt differs before it, is the next run; after the final request, even once the
    run has ended, the grown prompt is still the run's (it gets the stop)."""
    book = ModelBook()
    first = prompt_request(REACT)
    state = book.identify("chat", first, Caller(), "react", not_ended)
    state.acts_in_text = True
    book.call_record(state, first, said(STEP), [], 1, 2)
    grown = prompt_request(f"{REACT}\n{STEP}\nObservation: 100\n")
    parsed = list(grown.said)
    assert book.identify("chat", grown, Caller(), "react", not_ended) is state
    assert grown.said == parsed  # (the book reads the request the shell parsed, never writes it)
    [tool] = book.tool_records(state, grown, 3)
    assert (tool.tool_name, tool.result_brief, tool.error) == (
        TEXT_ACTION, "Observation: 100", False)
    step = STEP.replace("0 + 100", "1 + 100")
    book.call_record(state, grown, said(step), [], 4, 5)
    again = prompt_request(f"{REACT}\n{STEP}\nObservation: 100\n")  # (not this answer)
    assert book.identify("chat", again, Caller(), "react", not_ended) is not state
    other = prompt_request(f"{REACT.replace('and 1', 'and 2')}\n{step}\nObservation: 101\n")
    assert book.identify("chat", other, Caller(), "react", not_ended) is not state
    # another invocation of the same task, come as far as a prompt the run has grown past:
    # the next run, not this one (the same prompt sent again, the latest, is this run's)
    assert book.identify("chat", prompt_request(f"{REACT}\n{STEP}\nObservation: 100\n"),
                         Caller(), "react", not_ended) is not state
    state.final_used = True
    last = prompt_request(f"{REACT}\n{STEP}\nObservation: 100\n\n{step}\nObservation: 101\n")
    assert book.identify("chat", last, Caller(), "react", ended) is state
    # the cue on the prompt's last line written anew after the observation (LangChainGo's
    # conversational agent: "Observation: 100\nThought:", then "Observation: 100Thought: ...")
    book = ModelBook()
    cued = prompt_request(f"{REACT}Thought:")
    state = book.identify("chat", cued, Caller(), "react", not_ended)
    state.acts_in_text = True
    book.call_record(state, cued, said(STEP), [], 1, 2)
    grown = prompt_request(f"{REACT}Thought:{STEP}\nObservation: 100\nThought:")
    assert book.identify("chat", grown, Caller(), "react", not_ended) is state
    assert len(book.tool_records(state, grown, 3)) == 1
    book.call_record(state, grown, said(step), [], 3, 4)
    again = prompt_request(f"{REACT}Thought:{STEP}\nObservation: 100{step}\nObservation: 101"
                           "\nThought:")
    assert book.identify("chat", again, Caller(), "react", not_ended) is state
    [tool] = book.tool_records(state, again, 5)
    assert tool.result_brief == "Observation: 101 Thought:"
    # an agent not declared to act in text: each step a run of its own, as before
    book = ModelBook()
    state = book.identify("chat", first, Caller(), "react", not_ended)
    book.call_record(state, first, said(STEP), [], 1, 2)
    grown = prompt_request(f"{REACT}\n{STEP}\nObservation: 100\n")
    assert book.identify("chat", grown, Caller(), "react", not_ended) is not state


def test_the_same_action_and_output_again_in_a_grown_prompt_is_one_more_action() -> None:
    """A ReAct agent that loops sends the same observation after the same action at each
    step, one user message each time: each request is a step of its own (its prompt grown),
    not the one before sent again, so each action counts (the loop rules see them)."""
    book = ModelBook()
    text = REACT
    state = book.identify("chat", prompt_request(text), Caller(), "react", not_ended)
    state.acts_in_text = True
    counted = []
    for index in range(4):
        asked = prompt_request(text)
        if index:
            assert book.identify("chat", asked, Caller(), "react", not_ended) is state
        counted += book.tool_records(state, asked, 2 * index)
        book.call_record(state, asked, said(STEP), [], 2 * index, 2 * index + 1)
        text = f"{text}\n{STEP}\nObservation: 100\n"
    assert len(counted) == 3 and len({record.args_hash for record in counted}) == 1


def test_a_prompt_that_may_grow_from_an_unbooked_answer_waits_for_its_booking() -> None:
    """The native relay books ended calls in batches: a conversation's first request that
    offers no tools, of an agent with runs acting in text, may carry the answer of one not
    booked yet (a ReAct step sent at once): those calls are booked before it is identified,
    else it would find no answer to grow from and start a run of its own."""
    book = ModelBook()
    first = prompt_request(REACT)
    state = book.identify("chat", first, Caller(), "react", not_ended)
    state.acts_in_text = True
    grown = prompt_request(f"{REACT}\n{STEP}\nObservation: 100\n")
    other = EndpointRun("model:" + "b" * 32, KeySource.WATCHDOG, "b" * 32, None, agent="react")
    calls = [Unbooked(other), Unbooked(state)]
    assert book.unbooked_of("chat", grown, Caller(), "react", calls) == [1]
    assert book.unbooked_of("chat", grown, Caller(), "another", calls) == []


def test_a_long_answer_goes_on_only_when_the_prompt_carries_it_whole() -> None:
    """Of a long answer the run keeps its start and its digest: a prompt that carries its
    start with another end (another invocation's answer, the same reasoning at first) is not
    the run's; one that carries it whole is, what follows it the action's result."""
    book = ModelBook()
    first = prompt_request(REACT)
    state = book.identify("chat", first, Caller(), "react", not_ended)
    state.acts_in_text = True
    answer = "Thought: " + "think more. " * 60 + "\nAction: calculator\nAction Input: 1 + 1"
    book.call_record(state, first, said(answer), [], 1, 2)
    other = prompt_request(f"{REACT}\n{answer.replace('1 + 1', '2 + 2')}\nObservation: 4\n")
    assert book.identify("chat", other, Caller(), "react", not_ended) is not state
    grown = prompt_request(f"{REACT}\n{answer}\nObservation: 2\n")
    assert book.identify("chat", grown, Caller(), "react", not_ended) is state
    [tool] = book.tool_records(state, grown, 3)
    assert tool.result_brief == "Observation: 2"


# an agent that writes its tool uses as XML tags in its answers (the format Cline's VS Code
# extension prompts for, and its forks'), its finish a tool use of its own the pattern leaves
# out: docs/agents.md's xml-tool-agents.yaml
XML_TOOL_USE = (r"(?s)<(execute_command|read_file|write_to_file|replace_in_file|search_files|"
                r"list_files)>(.*?)</(?:execute_command|read_file|write_to_file|replace_in_file|"
                r"search_files|list_files)>")
XML_STOP = "<attempt_completion>\n<result>\n${note}\n</result>\n</attempt_completion>"
DOCS_AGENTS = Path(__file__).resolve().parents[1] / "docs" / "agents.md"


def test_an_xml_tool_use_is_an_action_and_attempt_completion_the_answer() -> None:
    """XML-tagged tool uses are read by the pack's ``action_pattern`` alone: the tool and its
    parameters are the action, the thinking around them aside; ``<attempt_completion>`` is
    none of the pattern's tools, so it holds no action: the run's answer, which ends it."""
    state = acting_run()
    state.action_pattern = XML_TOOL_USE
    use = "<execute_command>\n<command>ls -la</command>\n</execute_command>"
    [one] = text_action(state, said(f"<thinking>List them.</thinking>\n\n{use}"))
    [other] = text_action(state, said(f"I will look again.\n{use}\n"))
    assert one.arguments == other.arguments == json.dumps(
        {"action": "execute_command <command>ls -la</command>"})
    [edit] = text_action(state, said("<write_to_file>\n<path>a.txt</path>\n<content>x\n"
                                     "</content>\n</write_to_file>"))
    assert json.loads(edit.arguments)["action"].startswith("write_to_file")
    done = "<attempt_completion>\n<result>\nThe file is a.txt.\n</result>\n</attempt_completion>"
    assert text_action(state, said(done)) == []
    check_ends_the_run(XML_TOOL_USE, done)
    # (the pattern is the one docs/agents.md gives such an agent's pack)
    docs = DOCS_AGENTS.read_text("utf-8")
    assert f"action_pattern: '{XML_TOOL_USE}'" in docs
    assert "stop_answer: " + json.dumps(XML_STOP) in docs
    assert text_stop_answer(XML_STOP, "[stopped: two tool calls are enough]") == (
        "<attempt_completion>\n<result>\n[stopped: two tool calls are enough]\n</result>\n"
        "</attempt_completion>")
    assert text_action(state, said(XML_STOP)) == []  # (an abort's answer: no action in it)
