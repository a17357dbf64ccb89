"""One duration grammar (Prometheus') for configuration and rules: the same table is read by the
parser, by config keys (``WATCHDOG_EVAL_INTERVAL``) and by a rule's ``for:`` and ``grace``."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.core.durations import DURATION_HELP, SECONDS_HELP, DurationError, parse_duration
from watchdog.core.rules.pack import RulePackError, load_text
from watchdog.core.rules.testfile import read_test_file
from watchdog.shell.config import load, shown
from watchdog.shell.errors import ConfigError

HEADER = "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: t\n"

# text -> seconds, or None where Prometheus' model.ParseDuration refuses it too
DURATIONS: list[tuple[str, float | None]] = [
    ("0", 0.0), ("0s", 0.0), ("500ms", 0.5), ("30s", 30.0), ("1m30s", 90.0), ("15m", 900.0),
    ("1h", 3600.0), ("1h30m", 5400.0), ("1d", 86400.0), ("1w", 604800.0),
    ("1y", 365 * 86400.0), ("2d12h", 216000.0), ("1h0m5s250ms", 3605.25), (" 10m ", 600.0),
    ("", None), ("5 minutes", None), ("1.5h", None), ("30m1h", None), ("1h1h", None),
    ("-5s", None), ("5x", None), ("ms", None), ("1M", None), ("10S", None),
]


@pytest.mark.parametrize(("text", "seconds"), DURATIONS)
def test_the_grammar(text: str, seconds: float | None) -> None:
    if seconds is None:
        with pytest.raises(DurationError) as caught:
            parse_duration(text)
        assert caught.value.allowed == DURATION_HELP
    else:
        assert parse_duration(text) == seconds


@pytest.mark.parametrize(("text", "seconds"), DURATIONS)
def test_config_reads_the_same_grammar(text: str, seconds: float | None) -> None:
    env = {"WATCHDOG_RUN_END_TIMEOUT": text}
    if seconds is None or seconds == 0:  # run_end_timeout must also be > 0
        with pytest.raises(ConfigError, match=r"^run_end_timeout="):
            load(env=env)
    else:
        assert load(env=env).run_end_timeout == seconds


@pytest.mark.parametrize(("text", "seconds"), DURATIONS)
def test_rules_read_the_same_grammar(text: str, seconds: float | None) -> None:
    pack = (HEADER + "rules:\n  - {name: a, when: 'true', action: wind_down, message: m, "
            f"for: '{text}', grace: {{seconds: '{text}'}}}}\n")
    if seconds is None:
        with pytest.raises(RulePackError) as caught:
            load_text(pack)
        signed = "; a duration is written without a sign" if text.startswith("-") else ""
        assert [p.message for p in caught.value.problems] == [
            f"for: expected {DURATION_HELP}, got {text!r}{signed}",
            f"grace: seconds: expected {SECONDS_HELP}, got {text!r}{signed}"]
    else:
        rule = load_text(pack).rules[0]
        assert (rule.for_seconds, rule.grace and rule.grace.seconds) == (seconds, seconds)


def test_a_bare_number_is_seconds_only_where_the_key_says_seconds() -> None:
    """``for: 5`` has no unit (promtool refuses it); ``grace: {seconds: 60}``, a budget's
    ``max_seconds`` and config timers name their unit, so a number is read as seconds."""
    with pytest.raises(RulePackError) as caught:
        load_text(HEADER + "rules:\n  - {name: a, when: 'true', action: notify, message: m, "
                           "for: 5}\n")
    assert [p.message for p in caught.value.problems] == [
        f"for: expected {DURATION_HELP}, got 5; a bare number has no unit: write 5s"]
    rules = load_text(HEADER + "budgets: [{agents: ['*'], max_seconds: 600}]\nrules:\n"
                               "  - {name: a, when: 'true', action: wind_down, message: m, "
                               "grace: {seconds: 60}}\n")
    assert rules.rules[0].grace is not None and rules.rules[0].grace.seconds == 60.0
    assert rules.budgets[0].limits["max_seconds"] == 600.0
    assert load(env={"WATCHDOG_EVAL_INTERVAL": "0.25"}).eval_interval == 0.25
    assert load(env={"WATCHDOG_EVAL_INTERVAL": "2"}).eval_interval == 2.0


def test_rule_test_steps_take_durations_too(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(HEADER + "rules: []\n")
    tests = tmp_path / "p.test.yaml"
    tests.write_text("rule_files: [p.yaml]\ntests:\n  - name: t\n    steps:\n"
                     "      - {at: 0, llm: {input_tokens: 1, output_tokens: 1}}\n"
                     "      - {at: 1m30s, tool: search, duration: 500ms}\n"
                     "      - {at: 100, end: {final_answer: true}}\n")
    parsed, problems = read_test_file(str(tests))
    assert problems == [] and parsed is not None
    steps = parsed.tests[0].steps
    assert [(s.at, s.duration) for s in steps] == [(0.0, 0.0), (90.0, 0.5), (100.0, 0.0)]


HUGE = "1" + "0" * 400  # past any float: float() of it is inf, of the int it raises


def test_a_number_past_a_float_is_refused_where_a_duration_or_number_is_read() -> None:
    """A YAML integer of 400 digits, the same digits as text (an env var) and a duration of
    400 digits are a problem of the pack or the configuration, never an OverflowError (a
    traceback) nor an infinite budget, grace or timer."""
    too_large = "this one is too large for a number of seconds"
    with pytest.raises(RulePackError) as caught:
        load_text(HEADER + f"budgets: [{{agents: ['*'], max_seconds: {HUGE}, max_cost_usd: "
                           f"{HUGE}}}]\nrules:\n  - {{name: a, when: 'true', action: wind_down, "
                           f"message: m, for: '{HUGE}s', grace: {{seconds: '{HUGE}'}}}}\n")
    messages = [p.message for p in caught.value.problems]
    assert len(messages) == 4, messages
    assert all(too_large in message for message in messages if "cost" not in message), messages
    assert any(message.startswith("budgets: max_cost_usd: expected a number >= 0")
               for message in messages), messages
    with pytest.raises(RulePackError):
        load_text(HEADER + "budgets: [{agents: ['*'], max_cost_usd: .inf}]\n")
    for value in (HUGE, f"{HUGE}s", "99999999999999999999y"):
        with pytest.raises(ConfigError) as refused:
            load(env={"WATCHDOG_EVAL_INTERVAL": value})
        assert refused.value.message.startswith(
            f"eval_interval={shown(value)} is not allowed: expected a positive number of "
            f"seconds or a duration, at most 1y"), refused.value.message
    assert load(env={"WATCHDOG_EVAL_INTERVAL": "1y"}).eval_interval == 365 * 86400.0
