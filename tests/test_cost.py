"""What a run cost (DESIGN §13): every model call priced from its model and token counts with
``genai-prices`` (the price data it ships), a cost the span reports winning, unknown models
counted as unpriced — never as free — and a dollar budget that stops the run.

The figures are checked against ``genai_prices.calc_price`` itself, on real recordings of the
frameworks (``tests/frameworks/recordings``) and on spans the OpenTelemetry SDK makes.
"""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage, calc_price

from tests.recorded import RECORDINGS
from tests.spans import T0, SpanMaker, chat_attrs, encode, tool_attrs
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import load_rules
from watchdog.core.runs.run import RunState
from watchdog.core.runs.terminal import TerminalState
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.sessions import SessionBook
from watchdog.core.spans.decode import parse_json
from watchdog.core.spans.pipeline import records_from
from watchdog.core.step import Core
from watchdog.shell.pricing import GenAIPrices

KNOWN = "gpt-4o-mini"  # a model genai-prices knows (openai)
PRICES = GenAIPrices()
ALL_RECORDINGS = sorted((path.parent.name, path.stem) for path in RECORDINGS.glob("*/*.jsonl")
                        if not path.stem.endswith(".logs"))  # (OTLP logs: no spans)


def library_price(model: str, input_tokens: int = 0, output_tokens: int = 0,
                  cache_read_tokens: int = 0, cache_write_tokens: int = 0) -> float:
    return float(calc_price(Usage(input_tokens=input_tokens, output_tokens=output_tokens,
                                  cache_read_tokens=cache_read_tokens,
                                  cache_write_tokens=cache_write_tokens), model).total_price)


def core(rules: bool = False) -> Core:
    engine = RuleEngine(load_rules([])) if rules else None
    return Core(RunTracker(), SessionBook(lambda _id: None), engine, pricer=GenAIPrices())


def named(line: str, model: str | None) -> bytes:
    """An export request of a recording, every model name the normaliser reads in it (an
    attribute, or a framework's own message objects: Haystack's replies) replaced by ``model``
    (None: as recorded)."""
    if model is None:
        return line.encode()
    names = {record.model for record in records_from(parse_json(line.encode())).records
             if record.model}
    for name in sorted(names, key=len, reverse=True):
        line = line.replace(name, model)
    return line.encode()


def recorded_runs(driver: str, scenario: str, model: str | None) -> list[RunState]:
    """The runs the recording makes, its requests applied as exported through the core's step
    (which prices the calls), every run ended."""
    step_core = core()
    lines = [line for line in (RECORDINGS / driver / f"{scenario}.jsonl").read_text(
        "utf-8").splitlines() if line.strip()]
    for now, line in enumerate(lines, start=1):
        decoded = records_from(parse_json(named(line, model)))
        assert all(not r.cache_read_tokens and not r.cache_write_tokens
                   for r in decoded.records)  # (as recorded: the fake model caches nothing)
        step_core.apply(decoded.records, float(now))
    step_core.tracker.expire(1e12)
    return list(step_core.tracker.ended())


def names_models(driver: str, scenario: str) -> bool:
    """Whether any model call of a recording names its model (rig's name none)."""
    return any(record.model for line in (RECORDINGS / driver / f"{scenario}.jsonl").read_text(
        "utf-8").splitlines() if line.strip()
        for record in records_from(parse_json(line.encode())).records)


@pytest.mark.parametrize(("driver", "scenario"), ALL_RECORDINGS)
def test_recorded_runs_cost_what_genai_prices_says(driver: str, scenario: str) -> None:
    """Every recorded run, its models named as one genai-prices knows: the run's dollars are
    the library's figure for the run's recorded token counts (its price is linear in them, so
    the calls' sum is the figure for their totals); a call that reported no usage is unpriced;
    so is every call of a recording whose model calls name no model (rig's)."""
    runs = recorded_runs(driver, scenario, KNOWN)
    assert runs
    if not names_models(driver, scenario):
        for run in runs:
            signals = run.signals(1e12)
            assert (signals["cost_usd"], signals["unpriced_calls"]) == (0.0, run.iterations)
        return
    for run in runs:
        signals = run.signals(1e12)
        expected = library_price(KNOWN, run.input_tokens, run.output_tokens)
        assert signals["cost_usd"] == pytest.approx(expected, rel=1e-9, abs=1e-15), run.key
        assert 0 <= signals["unpriced_calls"] <= run.iterations
        if run.total_tokens:
            assert signals["cost_usd"] > 0
    assert any(run.total_tokens for run in runs) == any(
        run.signals(1e12)["cost_usd"] > 0 for run in runs)


@pytest.mark.parametrize(("driver", "scenario"), ALL_RECORDINGS)
def test_recorded_models_unknown_to_genai_prices_are_unpriced_not_free(
        driver: str, scenario: str) -> None:
    """As recorded, the scripted fake model's names are no model genai-prices knows: no run is
    given a cost, every model call counts as unpriced (OpenLIT's own `gen_ai.usage.cost` of 0
    for a model its price list lacks is not taken as free)."""
    for run in recorded_runs(driver, scenario, None):
        signals = run.signals(1e12)
        assert signals["cost_usd"] == 0.0
        assert signals["unpriced_calls"] == run.iterations, run.key


def test_a_recording_names_a_model_the_price_data_knows_nowhere() -> None:
    """Why the test above renames the models: the recordings' model names are the fake model's
    (driver and scenario), so a test on them alone would price nothing."""
    priced = [(driver, scenario) for driver, scenario in ALL_RECORDINGS
              if any(run.cost_usd for run in recorded_runs(driver, scenario, None))]
    assert priced == []


# -- spans the OpenTelemetry SDK makes ------------------------------------------------------------

def run_of(spans: Any, rules: bool = False, now: float = T0 + 100) -> tuple[Core, RunState]:
    step_core = core(rules)
    step_core.apply(records_from(encode(spans)).records, now)
    runs = list(step_core.tracker.active()) + list(step_core.tracker.ended())
    assert len(runs) == 1
    return step_core, runs[0]


def test_cache_reads_and_writes_are_priced_as_genai_prices_prices_them() -> None:
    maker = SpanMaker()
    with maker.agent():
        maker.span("chat", chat_attrs(12_000, 800, **{
            "gen_ai.request.model": "claude-3-5-sonnet-20241022",
            "gen_ai.response.model": "claude-3-5-sonnet-20241022",
            "gen_ai.provider.name": "anthropic",
            "gen_ai.usage.cache_read.input_tokens": 6_000,
            "gen_ai.usage.cache_creation.input_tokens": 2_000}))
        maker.span("chat", chat_attrs(3_000, 100, **{"gen_ai.request.model": KNOWN}),
                   start=T0 + 1)
    _, run = run_of(maker.finished())
    expected = library_price("claude-3-5-sonnet", 12_000, 800, 6_000, 2_000) + library_price(
        KNOWN, 3_000, 100)
    assert run.signals(T0 + 100)["cost_usd"] == pytest.approx(expected, rel=1e-12)
    assert run.signals(T0 + 100)["unpriced_calls"] == 0
    # (the cached tokens are priced apart: the same tokens uncached cost more)
    assert expected < library_price("claude-3-5-sonnet", 12_000, 800) + library_price(
        KNOWN, 3_000, 100)


def test_the_response_model_is_priced_before_the_request_model() -> None:
    maker = SpanMaker()
    with maker.agent():
        maker.span("chat", chat_attrs(1_000, 1_000, **{"gen_ai.request.model": "gpt-4o",
                                                       "gen_ai.response.model": KNOWN}))
    _, run = run_of(maker.finished())
    assert run.cost_usd == pytest.approx(library_price(KNOWN, 1_000, 1_000), rel=1e-12)


@pytest.mark.parametrize(("reported", "priced"), [
    (0.25, True),  # a cost the span reports wins over the price
    ("0.25", True),  # ... a number as text too
    (0, False),  # an instrumentation's 0 (its price list lacks the model): not free
    (-1.0, False), (math.nan, False), (math.inf, False), ("a lot", False), (1e300, False),
])
def test_a_reported_cost_wins_when_it_is_a_cost(reported: object, priced: bool) -> None:
    """OpenInference's `llm.cost.total`, OpenLIT's `gen_ai.usage.cost`: taken when finite and
    above 0; anything else is no report, and the call is priced from its model."""
    maker = SpanMaker()
    with maker.agent():
        maker.span("chat", chat_attrs(1_000, 100, **{"gen_ai.request.model": KNOWN,
                                                     "llm.cost.total": reported}))
    _, run = run_of(maker.finished())
    expected = 0.25 if priced else library_price(KNOWN, 1_000, 100)
    assert run.cost_usd == pytest.approx(expected, rel=1e-12)


def test_unknown_models_no_model_and_no_usage_are_unpriced_and_say_so() -> None:
    maker = SpanMaker()
    with maker.agent():
        maker.span("chat", chat_attrs(1_000, 100, **{"gen_ai.request.model": "my-own-llm-7b"}))
        maker.span("chat", chat_attrs(1_000, 100), start=T0 + 1)  # names no model
        maker.span("chat", chat_attrs(0, 0, **{"gen_ai.request.model": KNOWN}), start=T0 + 2)
        maker.span("chat", chat_attrs(500, 50, **{"gen_ai.request.model": KNOWN}), start=T0 + 3)
    _, run = run_of(maker.finished())
    signals = run.signals(T0 + 100)
    assert signals["unpriced_calls"] == 3
    assert signals["cost_usd"] == pytest.approx(library_price(KNOWN, 500, 50), rel=1e-12)


def test_a_call_traced_twice_is_priced_once() -> None:
    """A framework's model-call span around its client library's (the same call): one call,
    priced once, from the half that reported usage; the outer names the model only."""
    maker = SpanMaker()
    with maker.agent():
        outer = maker.open("chat outer", {"gen_ai.operation.name": "chat",
                                          "gen_ai.request.model": KNOWN}, start=T0)
        maker.span("chat inner", chat_attrs(2_000, 300), parent=outer, start=T0 + 0.1,
                   end=T0 + 0.9)
        outer.end(end_time=int((T0 + 1) * 1e9))
    _, run = run_of(maker.finished())
    assert run.iterations == 1
    signals = run.signals(T0 + 100)
    assert signals["unpriced_calls"] == 0
    assert signals["cost_usd"] == pytest.approx(library_price(KNOWN, 2_000, 300), rel=1e-12)


def test_a_dollar_budget_counts_down_and_stops_the_run_as_its_tool_limit() -> None:
    """`watchdog.budget.max_cost_usd` announced (a resource attribute): the budget view in dollars,
    the default pack's countdown, last call and stop — `tool_limit_reached`, the cost budget's
    rule as the reason, and the report says what the run cost."""
    per_call = library_price(KNOWN, 100_000, 2_000)
    budget = round(per_call * 6.2, 6)
    maker = SpanMaker({"watchdog.budget.max_cost_usd": budget})
    step_core = core(rules=True)
    fired: list[tuple[str, str]] = []
    root = maker.open("invoke_agent spender", {"gen_ai.operation.name": "invoke_agent",
                                               "gen_ai.agent.name": "spender"})
    views = []
    for index in range(8):
        maker.span("chat", chat_attrs(100_000, 2_000, **{"gen_ai.request.model": KNOWN}),
                   parent=root, start=T0 + 2 * index)
        maker.span("execute_tool search", tool_attrs("search", f'{{"q": {index}}}',
                                                     f"found {index}"),
                   parent=root, start=T0 + 2 * index + 1)
        step = step_core.apply(records_from(encode(maker.take())).records, T0 + 2 * index + 1.5)
        fired += [(d.decision.rule, d.decision.message) for d in step.decisions]
        views += list(step.touched.values())
    (view,) = [v for v in views[-1:]]
    rules = [rule for rule, _ in fired]
    assert "budget-cost-countdown" in rules and "budget-cost-last-call" in rules
    assert rules.index("budget-cost-countdown") < rules.index("budget-cost-last-call") \
        < rules.index("budget-cost-exhausted")
    countdown = dict(fired)["budget-cost-countdown"]
    assert countdown.startswith("[budget: USD ") and f"of {budget:g} left" in countdown
    root.end(end_time=int((T0 + 20) * 1e9))
    step = step_core.apply(records_from(encode(maker.take())).records, T0 + 21)
    (ended,) = step.finished
    assert ended.terminal_state is TerminalState.TOOL_LIMIT_REACHED
    assert ended.terminal_reason == "budget-cost-exhausted"
    assert ended.signals["budget"]["max_cost_usd"] == pytest.approx(budget)
    assert ended.signals["budget"]["remaining_cost_usd"] == 0
    assert ended.signals["cost_usd"] == pytest.approx(per_call * 8, rel=1e-9)
    assert view.signals["unpriced_calls"] == 0


def test_the_shells_pricer_matches_the_library_across_its_models() -> None:
    """The rates the pricer takes from genai-prices (resolved once per model) give the
    library's own figure, call by call, for every model of the first providers it lists."""
    from genai_prices.data_snapshot import get_snapshot

    pricer = GenAIPrices()
    checked = 0
    for provider in get_snapshot().providers[:6]:
        for model in provider.models:
            counts = (123_456, 7_890, 23_456, 3_456)
            try:
                expected = calc_price(Usage(input_tokens=counts[0], output_tokens=counts[1],
                                            cache_read_tokens=counts[2],
                                            cache_write_tokens=counts[3]),
                                      model.id, provider_id=provider.id).total_price
            except (LookupError, ValueError):
                continue
            got = pricer(model.id, provider.id, *counts, int(T0 * 1e9))
            assert got is not None and Decimal(repr(got)) == pytest.approx(
                expected, rel=Decimal("1e-12")), (provider.id, model.id)
            checked += 1
    assert checked > 50
    assert pricer("no-such-model-anywhere", None, 10, 10, 0, 0, 0) is None
    assert pricer(KNOWN, None, 10, 10, 11, 0, 0) is None  # more cached than input: refused


def test_a_model_named_after_its_provider_or_plugin_is_priced_as_the_model() -> None:
    """``openai/gpt-4o`` (LiteLLM's, OpenRouter's names) and ``googleai/gemini-2.5-flash``
    (Genkit's model actions: the plugin, then the model) cost what the model after the slash
    costs; a name whose last part is no model is still unpriced."""
    pricer = GenAIPrices()
    for named, model in (("openai/gpt-4o", "gpt-4o"),
                         ("googleai/gemini-2.5-flash", "gemini-2.5-flash"),
                         ("fakellm/openrouter/gpt-4o", "gpt-4o")):
        got = pricer(named, None, 1000, 100, 0, 0, int(T0 * 1e9))
        assert got is not None and got == pricer(model, None, 1000, 100, 0, 0, int(T0 * 1e9))
    assert pricer("fakellm/genkit-three_tools", None, 1000, 100, 0, 0, 0) is None
    assert pricer("openai/", None, 1000, 100, 0, 0, 0) is None


def test_pack_budgets_take_dollars_and_refuse_what_is_no_amount(tmp_path: Path) -> None:
    from watchdog.core.rules.pack import RulePackError

    good = tmp_path / "good.yaml"
    good.write_text("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: t\nbudgets:\n"
                    "  - agents: ['*']\n    max_cost_usd: 0.5\n")
    ruleset = load_rules([str(good)])
    assert ruleset.budget_for("anyone") == {"max_cost_usd": 0.5}
    for bad in ("-1", ".nan", ".inf", "'a dollar'", "0", "1e13"):
        path = tmp_path / "bad.yaml"
        path.write_text("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: t\nbudgets:\n"
                        f"  - agents: ['*']\n    max_cost_usd: {bad}\n")
        with pytest.raises(RulePackError, match="max_cost_usd"):
            load_rules([str(path)])


# -- the client SDK, the control API and the metrics ----------------------------------------------

def test_the_client_sdk_takes_a_dollar_budget_and_refuses_what_is_no_amount() -> None:
    from agent_watchdog_client import Watchdog

    wd = Watchdog("http://127.0.0.1:9")  # never reached: no run is entered
    try:
        run = wd.run(agent="spender", max_cost_usd=0.5)
        assert run.budget == {"max_cost_usd": 0.5}
        for bad in (math.nan, math.inf, -0.01, "1"):
            with pytest.raises(ValueError, match="max_cost_usd"):
                wd.run(agent="spender", max_cost_usd=bad)  # type: ignore[arg-type]
    finally:
        wd.close()


def test_an_announced_dollar_budget_is_taken_and_a_bad_one_refused() -> None:
    from watchdog.shell.api.runs import _announcement
    from watchdog.shell.errors import BadRequest

    announced = _announcement({"agent": "spender", "budget": {"max_cost_usd": 0.25}})
    assert announced is not None and announced["budget"] == {"max_cost_usd": 0.25}
    for bad in (-1, "0.25", None, 1e13):
        with pytest.raises(BadRequest, match="max_cost_usd"):
            _announcement({"agent": "spender", "budget": {"max_cost_usd": bad}})


def test_cost_usd_total_counts_dollars_per_agent_and_capped_model() -> None:
    from prometheus_client import CollectorRegistry

    from watchdog.shell.metrics import MAX_TOOLS_PER_AGENT, Metrics

    registry = CollectorRegistry()
    metrics = Metrics("test", registry)
    step_core = core()
    maker = SpanMaker()
    models = [f"gpt-4o-mini-{i}" for i in range(MAX_TOOLS_PER_AGENT + 5)]
    with maker.agent(attrs={"gen_ai.agent.name": "spender"}):
        maker.span("chat", chat_attrs(1_000, 100, **{"gen_ai.request.model": KNOWN}))
        for index, model in enumerate(models):  # names genai-prices does not know
            maker.span("chat", chat_attrs(10, 1, **{"gen_ai.request.model": model,
                                                    "llm.cost.total": 0.5}),
                       start=T0 + 1 + index * 0.01)
    step = step_core.apply(records_from(encode(maker.finished())).records, T0 + 100)
    assert step.batch is not None
    metrics.batch_applied(step.batch, [])
    metrics.publish()
    values = {sample.labels["model"]: sample.value
              for family in registry.collect() if family.name == "agent_watchdog_cost_usd"
              for sample in family.samples if sample.name.endswith("_total")}
    assert values[KNOWN] == pytest.approx(library_price(KNOWN, 1_000, 100), rel=1e-12)
    assert len(values) == MAX_TOOLS_PER_AGENT + 1 and "_other" in values
    assert sum(values.values()) == pytest.approx(
        library_price(KNOWN, 1_000, 100) + 0.5 * len(models), rel=1e-12)
