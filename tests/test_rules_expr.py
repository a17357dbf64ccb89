"""CEL expressions of rules: the declared vocabulary, load-time checking with positions,
evaluation (errors are values), ``${expr}`` templates and how values read in messages."""

from __future__ import annotations

from typing import Any

import pytest

from tests.spans import T0, SpanMaker, chat_attrs, only_run, run_spans, tool_attrs
from watchdog.core.rules.expr import (
    EvalError,
    ExprError,
    Issue,
    activation,
    compile_expr,
    compile_template,
    format_value,
)
from watchdog.core.rules.signals import (
    BUDGET_SCHEMA,
    RUN_SCHEMA,
    SESSION_SCHEMA,
    run_activation,
    session_activation,
)
from watchdog.core.runs.catalogue import ListOf, MapOf, Maybe
from watchdog.core.runs.run import RunState
from watchdog.core.spans.record import BUDGET_KEYS, KeySource


def issues(source: str, condition: bool = True) -> list[Issue]:
    with pytest.raises(ExprError) as caught:
        compile_expr(source, condition=condition)
    return caught.value.issues


def one_issue(source: str) -> Issue:
    (issue,) = issues(source)
    return issue


def run_dict(**overrides: Any) -> dict[str, Any]:
    """A complete ``run`` activation, as :func:`run_activation` makes it."""
    run = RunState("r1", KeySource.WATCHDOG, "0" * 32, T0).signals(T0)
    run.update(overrides)
    return run_activation(run)


def evaluate(source: str, run: dict[str, Any] | None = None,
             session: dict[str, Any] | None = None) -> Any:
    return compile_expr(source).evaluate(activation(run or run_dict(),
                                                    session_activation(session)))


# -- the vocabulary ---------------------------------------------------------------------------

def _matches(value: object, kind: object) -> bool:
    if isinstance(kind, dict):
        return isinstance(value, dict) and set(value) <= set(kind) and all(
            _matches(v, kind[k]) for k, v in value.items())
    if isinstance(kind, Maybe):
        return _matches(value, kind.type)
    if isinstance(kind, ListOf):
        return isinstance(value, list) and all(type(item) is kind.item for item in value)
    if isinstance(kind, MapOf):
        return isinstance(value, dict) and all(
            type(k) is kind.key and type(v) is kind.value for k, v in value.items())
    return type(value) is kind


def _real_run(budget: bool) -> RunState:
    otel = SpanMaker()
    extra = {f"watchdog.budget.{k}": 10 for k in BUDGET_KEYS} if budget else {}
    with otel.agent(attrs={"watchdog.run.id": "r1", **extra}, end=T0 + 30) as root:
        otel.span("chat", chat_attrs(100, 20), parent=root, start=T0 + 1, end=T0 + 2)
        otel.span("execute_tool search", tool_attrs("search", '{"q": 1}', "hits", **extra),
                  parent=root, start=T0 + 3, end=T0 + 4)
        spans = otel.take()  # the agent span has not ended: the run is still going
    tracker, _ = run_spans(spans, now=T0 + 5)
    return only_run(tracker)


@pytest.mark.parametrize("budget", [False, True], ids=["no budget", "full budget"])
def test_run_signals_match_the_declared_schema_exactly(budget: bool) -> None:
    run = _real_run(budget)
    signals = run.signals(T0 + 10)
    assert set(signals) == set(RUN_SCHEMA)
    activated = run_activation(dict(signals))
    for key, kind in RUN_SCHEMA.items():
        assert _matches(activated[key], kind), (key, activated[key], kind)
    if budget:
        assert set(activated["budget"]) == set(BUDGET_SCHEMA)
        assert activated["budget"]["remaining_tool_calls"] == 9
        assert type(activated["budget"]["remaining_tool_calls"]) is int
    else:
        assert activated["budget"] == {}
    # Everything but the budget comes out of RunState.signals with its declared type already;
    # the budget's counts arrive as floats and run_activation makes them CEL ints.
    for key, kind in RUN_SCHEMA.items():
        if key != "budget":
            assert _matches(signals[key], kind), (key, signals[key], kind)


def test_session_defaults_and_schema() -> None:
    assert session_activation(None) == {"id": "", "runs": 0, "checkpoints": 0,
                                        "zero_progress": False, "zero_progress_streak": 0,
                                        "run_checkpoints": 0, "agent_cycle": [],
                                        "agent_cycle_repeats": 0, "cycle_orchestrator": False}
    session = session_activation({"id": "s1", "zero_progress_streak": 2.0, "other": 1})
    assert session["zero_progress_streak"] == 2 and type(session["zero_progress_streak"]) is int
    assert "other" not in session
    for key, kind in SESSION_SCHEMA.items():
        assert _matches(session[key], kind)


# -- load-time checking -------------------------------------------------------------------------

def test_conditions_compile_and_evaluate() -> None:
    run = run_dict(tool_calls=5, tools={"search": 4}, agent="explorer-1", idle_seconds=301.5)
    assert evaluate("run.tool_calls >= 5 && run.tools['search'] == 4", run) is True
    assert evaluate("'search' in run.tools && !('read' in run.tools)", run) is True
    assert evaluate("run.agent.startsWith('explorer') && run.agent.matches('^ex.*-[0-9]$')",
                    run) is True
    assert evaluate("run.idle_seconds > 300.0 && run.in_flight == 0", run) is True
    assert evaluate("run.agent.lowerAscii() == 'explorer-1'", run) is True  # strings extension
    assert evaluate("session.zero_progress_streak >= 2", run,
                    {"zero_progress_streak": 2}) is True


def test_unknown_variable_is_refused_with_its_position() -> None:
    issue = one_issue("run.tool_calls > 1 && runn.tool_calls > 3")
    assert (issue.line, issue.column) == (1, 27)
    assert "undeclared reference to 'runn.tool_calls'" in issue.message


def test_unknown_field_is_refused_with_a_suggestion() -> None:
    issue = one_issue("run.iteratons > 3")
    assert issue == Issue(1, 4, "unknown field 'iteratons' in run (did you mean 'iterations'?)")
    nested = one_issue("run.budget.max_tool_call > 3")
    assert nested.message == ("unknown field 'max_tool_call' in run.budget "
                              "(did you mean 'max_tool_calls'?)")
    assert "unknown field 'streak' in session" in one_issue("session.streak > 1").message


def test_type_errors_are_refused() -> None:
    assert one_issue("run.agent > 3").message == "no operator '>' for (string, int)"
    assert "must be a bool condition, but it is of type int" in one_issue(
        "run.tool_calls + 1").message


def test_int_and_double_get_a_hint_naming_the_literal() -> None:
    issue = one_issue("run.idle_seconds > 300")
    assert issue.column == 18
    assert issue.message.endswith("hint: CEL does not mix int and double; write 300.0")
    assert one_issue("300 < run.elapsed_seconds").message.endswith("write 300.0")
    # a double beside a count: the count is the int (not: write the literal as a double)
    assert one_issue("run.errors > 3.0").message.endswith(
        "CEL does not mix int and double; counts are ints: write 3")
    assert one_issue("5.0 <= run.tool_calls").message.endswith("counts are ints: write 5")
    assert one_issue("run.tool_calls > 2.5").message.endswith(
        "CEL does not mix int and double; counts are ints: compare double(COUNT) with 2.5")


def test_syntax_errors_are_short() -> None:
    issue = one_issue("run.iterations >")
    assert issue == Issue(1, 17, "syntax error: unexpected end of expression")


def test_every_problem_of_a_multi_line_expression_is_reported() -> None:
    found = issues("run.idle_seconds > 300\n  && runn.x > 2\n  && run.iteratons > 3")
    assert [(i.line, i.column) for i in found] == [(1, 18), (2, 10), (3, 9)]


def test_has_works_on_absent_budget_fields() -> None:
    guarded = "has(run.budget.remaining_tool_calls) && run.budget.remaining_tool_calls <= 3"
    assert evaluate(guarded) is False
    assert evaluate(guarded, run_dict(budget={"remaining_tool_calls": 3.0,
                                              "max_tool_calls": 20.0})) is True


def test_evaluation_errors_are_raised_as_eval_errors() -> None:
    with pytest.raises(EvalError, match=r"NOT_FOUND.*max_tool_calls"):
        compile_expr("run.budget.max_tool_calls > 3").matches(activation(run_dict(), {}))
    with pytest.raises(EvalError, match="divide by zero"):
        evaluate("run.tool_calls / 0 > 1")
    with pytest.raises(EvalError, match="regular expression"):
        evaluate("run.agent.matches('[')")


def test_budget_counts_are_ints_at_run_time() -> None:
    # Without run_activation the float 20.0 would make this an int/double overload error.
    run = run_dict(budget={"max_tool_calls": 20.0, "remaining_tool_calls": 3.0})
    assert evaluate("run.budget.max_tool_calls - run.budget.remaining_tool_calls == 17",
                    run) is True


def test_time_dependent_expressions_are_marked_timed() -> None:
    assert compile_expr("run.idle_seconds > 300.0").timed
    assert compile_expr("run.tool_calls > 3 || run.elapsed_seconds > 1.0").timed
    assert compile_expr("has(run.budget.remaining_seconds)").timed
    assert compile_expr("run.in_flight_seconds > 60.0").timed
    assert not compile_expr("run.tool_calls > 3 && run.budget.max_seconds > 1.0").timed
    assert not compile_expr("run.last_error.contains('idle_seconds')").timed


# -- templates ----------------------------------------------------------------------------------

def render(text: str, run: dict[str, Any] | None = None) -> tuple[str, list[str]]:
    return compile_template(text).render(activation(run or run_dict(), {}))


def test_templates_render_values() -> None:
    run = run_dict(budget={"remaining_tool_calls": 3.0, "max_tool_calls": 20.0},
                   idle_seconds=301.75, last_error="OSError: disk full", ended=False)
    text, errors = render("[budget: ${run.budget.remaining_tool_calls} of "
                          "${run.budget.max_tool_calls} tool calls left — wrap up soon]", run)
    assert (text, errors) == ("[budget: 3 of 20 tool calls left — wrap up soon]", [])
    assert render("idle ${int(run.idle_seconds)}s (${run.idle_seconds})", run)[0] == \
        "idle 301s (301.75)"
    assert render("last: ${run.last_error}, ended ${run.ended}", run)[0] == \
        "last: OSError: disk full, ended false"
    assert render("no placeholders") == ("no placeholders", [])


def test_templates_allow_braces_and_quotes_inside_placeholders() -> None:
    assert render('${ {"a": "}"}["a"] } and ${"x" + \'}\'}')[0] == "} and x}"
    assert render("literal $${run.id} stays")[0] == "literal ${run.id} stays"


def test_failing_placeholders_render_as_error_and_are_reported() -> None:
    text, errors = render("max ${run.budget.max_tool_calls}!")
    assert text == "max <error>!"
    assert len(errors) == 1 and "max_tool_calls" in errors[0]


def test_template_problems_have_positions_within_the_text() -> None:
    with pytest.raises(ExprError) as caught:
        compile_template("ok ${run.id}\nthen ${run.nope + 1} and ${}")
    first, second = caught.value.issues
    assert (first.line, first.column) == (2, 11)
    assert first.message.startswith("${run.nope + 1}: unknown field 'nope' in run")
    assert second.message.endswith("empty expression")
    with pytest.raises(ExprError, match="unclosed"):
        compile_template("count ${run.tool_calls")


def test_template_timed_when_a_placeholder_reads_time() -> None:
    assert compile_template("idle ${int(run.idle_seconds)}s").timed
    assert not compile_template("${run.tool_calls} calls").timed


@pytest.mark.parametrize(("value", "text"), [
    (3, "3"), (3.0, "3"), (301.5, "301.5"), (1e6, "1000000"), (1.5e-7, "0.00000015"),
    (0.1 + 0.2, "0.3"), (-2.25, "-2.25"), (float("nan"), "NaN"), (float("inf"), "Infinity"),
    (True, "true"), (None, "null"), ("x", "x"), ([1, "a"], '[1, "a"]'), ({"a": 1}, '{"a": 1}'),
])
def test_values_read_naturally_in_messages(value: object, text: str) -> None:
    assert format_value(value) == text


# -- cost -----------------------------------------------------------------------------------------

TENFOLD = '.replace("a", "aaaaaaaaaa")'  # each call makes a string of "a"s ten times longer


def test_an_expression_that_can_grow_without_bound_is_refused_at_load() -> None:
    """cel-expr-python has no cost limit: a chain of replaces that multiplies a signal's
    string is refused at load, at the call where what it builds passes the bound."""
    issue = one_issue("!run.ended\n  && run.last_error" + TENFOLD * 5 + ".size() > 3")
    assert issue.line == 2 and issue.message.startswith(
        "too costly: one evaluation could build ")
    assert "(at most 10,000,000)" in issue.message
    assert issue.column == len("  && run.last_error" + TENFOLD * 4) + len(".replace") + 1
    # a comprehension over a grown list, and one nested in another, are bounded alike
    assert one_issue("run.tools.all(a, run.tools.all(b, run.tools.all(c, (a + b + c)"
                     + TENFOLD * 2 + " != '')))").message.startswith("too costly")
    assert one_issue("(run.agent" + TENFOLD * 3 + ").split('').map(x, x" + TENFOLD
                     + ").size() > 0").message.startswith("too costly")
    with pytest.raises(ExprError, match="too costly"):
        compile_template("${run.last_error" + TENFOLD * 6 + "}")


def test_the_cost_bound_holds_and_useful_rules_are_far_below_it() -> None:
    """What an accepted expression builds is within its bound, at the longest string a
    signal holds; the default pack's expressions (checked anew) cost a fraction of it."""
    from watchdog.core.rules.cost import MAX_COST, STRING_CHARS, check_cost
    from watchdog.core.rules.expr import _environments
    from watchdog.core.rules.pack import load_rules
    from watchdog.core.spans.values import MAX_ERROR_CHARS, MAX_NAME_CHARS

    assert max(MAX_ERROR_CHARS, MAX_NAME_CHARS) <= STRING_CHARS
    grown = "run.last_error" + TENFOLD * 3
    compile_expr(grown + ".size() > 3")  # accepted
    cost = check_cost(_environments().checker.compile(grown + ".size() > 3").serialize())
    built = evaluate(grown + ".size()", run_dict(last_error="a" * MAX_ERROR_CHARS))
    assert built == MAX_ERROR_CHARS * 1000 <= cost <= MAX_COST
    sources = [part.source for rule in load_rules([]).rules
               for part in (rule.when, *(p for p in rule.message._parts if not isinstance(p, str)))]
    assert len(sources) > 20
    assert max(check_cost(_environments().checker.compile(s).serialize())
               for s in sources) < MAX_COST / 5
