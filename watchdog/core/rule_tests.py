"""Rule unit tests: ``watchdog rules test FILE...``, the rule author's ``promtool test rules``.

A test file drives one synthetic run per test through the sidecar's own core
(:class:`~watchdog.core.step.Core`, with a :class:`RunTracker`, the :class:`RuleEngine` and a
:class:`SessionBook`) at ``start + at``, each step as the sidecar drives it: a span step is an
export request's batch (the rules reading a signal it moved are evaluated), a heartbeat a client
heartbeat, a session step a checkpoint (the rules reading ``session``), a tick the timer (timed
rules, then expiry). The decisions are compared with what the test expects. Every decision must
be expected and every expectation met; the diff says which are missing and which were not
expected. Format::

    rule_files: [my-rules.yaml]     # relative to this file; absent: the default pack alone
    include_default: true           # load the default pack before rule_files (default true)
    tests:
      - name: repeated call winds down then aborts
        agent: explorer             # the run's agent name (default "agent")
        budget: {max_tool_calls: 20}  # announced by the agent (watchdog.budget.*), optional
        session: {id: s1}           # the run's session (fields of `session`), optional
        steps:                      # in order; `at` = seconds since the run started
          - {at: 0, llm: {input_tokens: 100, output_tokens: 10, messages: 3}}
          - {at: 1, tool: search, args: {q: x}, result: "3 hits"}
          - {at: 2, tool: read, args: {path: /a}, error: {type: RuntimeError, message: "disk full"}}
          - {at: 3, tool: read, runs: 3, error: {type: RuntimeError, message: "disk full"}}
          - {at: 5, heartbeat: {messages: 7}}       # client SDK heartbeat (progress if it grew)
          - {at: 6, session: {zero_progress_streak: 2}}   # the session changed
          - {at: 400, tick: true}                   # time passes: the timer evaluates timed rules
          - {at: 401, end: {final_answer: true}}    # the agent span arrives: the run ends
        expect:                     # every decision, in any order; [] = nothing fires
          - {step: 3, rule: repeated-tool-call, action: wind_down, message: "same tool call"}
        expect_terminal_state: loop_detected        # optional

Steps: ``llm`` takes ``input_tokens``, ``output_tokens``, ``messages``, ``finish_reason`` (``stop``
marks a final answer) and ``error``; ``tool`` takes ``args`` (identical arguments, in any key
order, are the same call), ``result`` and ``error`` (``{type, message}``; ids, numbers and paths in
the message are masked, so "disk /tmp/a full" and "disk /tmp/b full" are the same error); any span
step takes ``duration`` (seconds, default 0). ``end`` takes ``final_answer``, ``output``,
``finish_reason`` and ``error``. A tool step with ``runs: N`` is the same call made by the
test's run and N-1 other runs of the fleet, in one batch (``fleet.failing_tools``); only the
test's run's decisions are compared. A decision with a ``terminal_state`` is applied to the run by
the core, as in the sidecar. Expectations match on ``step`` (the 0-based index of the step after
which the decision fired) and ``rule``, and optionally ``action``, ``severity``,
``terminal_state``, ``escalation`` (grace ran out) and ``message`` (a substring).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TextIO

from watchdog.core.handout import Step
from watchdog.core.redact import mask
from watchdog.core.rules.decision import Decision
from watchdog.core.rules.engine import RuleEngine
from watchdog.core.rules.pack import RulePackError, RuleSet, load_rules
from watchdog.core.rules.problem import suggest
from watchdog.core.rules.testfile import RuleTest, read_test_file
from watchdog.core.rules.testfile import Step as TestStep
from watchdog.core.runs.fields import NS
from watchdog.core.runs.tracker import RunTracker
from watchdog.core.sessions import SessionBook, SessionState
from watchdog.core.spans.attributes import ANSWER_FINISH_REASONS
from watchdog.core.spans.conventions import canonical_arguments, stable_hash
from watchdog.core.spans.record import KeySource, SpanKind, SpanRecord
from watchdog.core.step import SESSION_CHANGED, Core

START = 1_700_000_000.0  # the synthetic runs' wall-clock origin (seconds)


@dataclass(slots=True)
class TestResult:
    __test__ = False  # not a pytest test class
    test: RuleTest
    fired: list[tuple[int, Decision]]
    failures: list[str]
    notes: list[str]

    @property
    def passed(self) -> bool:
        return not self.failures


# -- running --------------------------------------------------------------------------------------

class _SyntheticRun:
    """Span records for one test run, as the ingest pipeline would make them."""

    def __init__(self, test: RuleTest, key: str) -> None:
        self.test = test
        self.key = key
        self.trace_id = stable_hash(key).to_bytes(8, "big", signed=True).hex() * 2
        self.session: str | None = (test.session or {}).get("id") or None
        self.spans = 0

    def records(self, step: TestStep) -> list[SpanRecord]:
        """The step's span, and with ``runs: N`` the same span of N-1 other runs."""
        record = self.record(step)
        others = []
        for index in range(1, step.data.get("runs", 1)):
            other = self.record(step, f"{self.key}~{index}")
            other.session = None
            others.append(other)
        return [record, *others]

    def record(self, step: TestStep, key: str | None = None) -> SpanRecord:
        self.spans += 1
        end_ns = int((START + step.at) * NS)
        start_ns = end_ns - int(step.duration * NS)
        data = step.data
        key = key or self.key
        record = SpanRecord(
            run_key=key, key_source=KeySource.WATCHDOG,
            trace_id=stable_hash(key).to_bytes(8, "big", signed=True).hex() * 2,
            span_id=f"{self.spans:016x}", parent_span_id="ffffffffffffffff",
            name=step.kind, kind=SpanKind.OTHER, start_ns=start_ns, end_ns=end_ns,
            agent=self.test.agent, session=self.session,
            budget=dict(self.test.budget) if self.test.budget else None)
        if step.kind == "llm":
            record.kind = SpanKind.LLM
            record.input_tokens = data.get("input_tokens") or 0
            record.output_tokens = data.get("output_tokens") or 0
            record.reported_cost_usd = data.get("cost_usd") or None  # the call's price
            record.messages = data.get("messages") or 0
            if data.get("finish_reason") is not None:
                record.finish_reason = data["finish_reason"]
                record.final_answer = data["finish_reason"].lower() in ANSWER_FINISH_REASONS
        elif step.kind == "tool":
            record.kind = SpanKind.TOOL
            tool = record.tool_name = data["tool"]
            if "args" in data:
                canonical = canonical_arguments(data["args"])
                record.args_hash = stable_hash(tool + "\0" + canonical)
                record.args_brief = canonical[:500]
            if "result" in data:
                text = _as_text(data["result"])
                record.result_hash = stable_hash(tool + "\0" + text)
                record.result_brief = text[:500]
        elif step.kind == "end":
            record.kind = SpanKind.AGENT
            record.parent_span_id = None  # the root: it closes the run
            record.start_ns = int(START * NS)
            record.final_answer = bool(data.get("final_answer"))
            record.final_output = data.get("output")
            record.finish_reason = data.get("finish_reason")
        error = data.get("error")
        if error is not None:
            error_type, message = error
            record.error, record.error_type, record.error_message = True, error_type, message
            # as watchdog.core.spans.conventions.normalise computes it
            record.error_signature = stable_hash(error_type + ":" + mask(message))
        return record


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    return canonical_arguments(value)


def run_test(ruleset: RuleSet, test: RuleTest, key: str = "test-run") -> TestResult:
    """Drive ``test`` through the sidecar's core; compare decisions with expectations."""
    engine = RuleEngine(ruleset)
    sessions = SessionBook(lambda _session_id: None)  # nothing stored: the test says it all
    core = Core(RunTracker(), sessions, engine)
    synthetic = _SyntheticRun(test, key)
    session = _test_session(test, sessions, key)
    if session is not None:
        synthetic.session = session.id
    fired: list[tuple[int, Decision]] = []
    rule_errors: Counter[str] = Counter()
    for step in test.steps:
        now = START + step.at
        if step.kind == "tick":  # the sidecar's timer
            result = Step()
            core.evaluate(list(core.tracker.active()), now, result, timed_only=True)
            core.expire(now, result)  # abandoned: silent for longer than run_end_timeout
        elif step.kind == "heartbeat":
            _run, result = core.heartbeat(key, step.data.get("messages") or 0, now)
        elif step.kind == "session":  # a checkpoint changed the session
            assert session is not None  # (a test with a session step has one)
            _update_session(session, key, step.data)
            result = Step()
            run = core.tracker.get(key)
            if run is not None and not run.ended:
                core.evaluate([run], now, result, changed=SESSION_CHANGED)
        else:
            result = core.apply(synthetic.records(step), now)
            told = core.fleet_tick(now)  # the sidecar tells outages at its timer's next turn
            result.decisions.extend(told.decisions)
            result.failures.extend(told.failures)
            result.rule_errors.update(told.rule_errors)
        if result.failures:
            raise result.failures[0].error
        fired += [(step.index, decided.decision) for decided in result.decisions
                  if decided.run.key == key]  # (not the other runs of a `runs:` step)
        rule_errors.update(result.rule_errors)
    failures = _compare(test, fired, ruleset)
    run = core.tracker.get(key)
    terminal = None
    if run is not None:
        terminal = run.terminal_state if run.ended else run.forced_state
    if test.expect_terminal_state is not None:
        got = terminal.value if terminal is not None else "none (the run has not ended)"
        if got != test.expect_terminal_state:
            failures.append(f"terminal state: expected {test.expect_terminal_state}, got {got}")
    notes = [f"rule {name} failed to evaluate {count} times (last: "
             f"{engine.last_errors.get(name, '?')})" for name, count in rule_errors.items()]
    return TestResult(test, fired, failures, notes)


def _test_session(test: RuleTest, sessions: SessionBook, key: str) -> SessionState | None:
    """The run's session as the test gives it (None: the test gives none). A test that gives
    session fields but no id has a session with id "", as a rule sees a run without one."""
    if test.session is None and not any(step.kind == "session" for step in test.steps):
        return None
    values = dict(test.session or {})
    session = sessions.get_or_create(values.get("id") or "")
    session.recent_runs[key] = 0  # the run is known to it: seeing the run counts no new one
    _update_session(session, key, values)
    return session


def _update_session(session: SessionState, key: str, values: dict[str, Any]) -> None:
    for name, value in values.items():
        if name == "run_checkpoints":  # checkpoints during the run being evaluated
            session.recent_runs[key] = value
        elif name == "cycle_orchestrator":  # whether the run is the one to stop the cycle
            session.cycle_orchestrator = key if value else None
        else:
            setattr(session, name, value)


def _compare(test: RuleTest, fired: list[tuple[int, Decision]], ruleset: RuleSet) -> list[str]:
    failures = []
    known = {r.name for r in ruleset.rules}
    unmatched = list(fired)
    for expectation in test.expect:
        if expectation.rule not in known:
            failures.append(f"line {expectation.line}: no enabled rule named "
                            f"{expectation.rule!r}{suggest(expectation.rule, known)}")
            continue
        match = next((f for f in unmatched if expectation.matches(*f)), None)
        if match is None:
            failures.append(f"missing:    {expectation}  (line {expectation.line})")
        else:
            unmatched.remove(match)
    for step, decision in unmatched:
        failures.append(f"unexpected: {_decision_text(step, decision)}")
    return failures


def _decision_text(step: int, decision: Decision) -> str:
    text = f"step {step} rule {decision.rule} action {decision.action.value} " \
           f"severity {decision.severity.value}"
    if decision.terminal_state is not None:
        text += f" terminal_state {decision.terminal_state.value}"
    if decision.escalation:
        text += " escalation true"
    return f"{text} message {decision.message!r}"


def run_files(paths: Iterable[str], out: TextIO, verbose: bool = False) -> int:
    """Run every test file; print results to ``out``. Returns the exit code (0 all passed)."""
    failed = False
    for path in paths:
        test_file, problems = read_test_file(path)
        if test_file is None:
            for problem in problems:
                print(problem, file=out)
            failed = True
            continue
        try:
            ruleset = load_rules(test_file.rule_files or [],
                                 include_default=test_file.include_default
                                 or test_file.rule_files is None)
        except RulePackError as exc:
            print(f"{path}: cannot load the rules under test:", file=out)
            for problem in exc.problems:
                print(f"  {problem}", file=out)
            failed = True
            continue
        passed = 0
        for index, test in enumerate(test_file.tests):
            result = run_test(ruleset, test, key=f"test-{index}")
            if result.passed:
                passed += 1
                if verbose:
                    print(f"ok   {path}:{test.line}: {test.name}", file=out)
            else:
                failed = True
                _print_failure(path, result, out)
            for note in result.notes:
                print(f"note {path}:{test.line}: {test.name}: {note}", file=out)
        total = len(test_file.tests)
        status = "ok" if passed == total else "FAILED"
        print(f"{path}: {passed} of {total} tests passed — {status}", file=out)
    return 1 if failed else 0


def _print_failure(path: str, result: TestResult, out: TextIO) -> None:
    test = result.test
    print(f"FAIL {path}:{test.line}: {test.name}", file=out)
    for failure in result.failures:
        print(f"  {failure}", file=out)
    print("  fired:" if result.fired else "  fired: nothing", file=out)
    for step, decision in result.fired:
        print(f"    {_decision_text(step, decision)}", file=out)


__all__ = ["TestResult", "read_test_file", "run_files", "run_test"]
