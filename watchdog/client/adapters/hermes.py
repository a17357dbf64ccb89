"""hermes-agent (NousResearch): each turn a run, with Hermes' own exit reason.

::

    from run_agent import AIAgent
    from watchdog.client import Watchdog
    from watchdog.client.adapters.hermes import watch_hermes

    wd = Watchdog()
    wd.setup_tracing(service_name="researcher")   # or your provider (plus a tracer: the
                                                  # grafana-agento11y-hermes plugin, or
                                                  # opentelemetry-instrumentation-openai-v2)
    agent = AIAgent(model=..., max_iterations=30)
    watch_hermes(agent, wd, agent_name="researcher")
    agent.run_conversation("...")                 # one run per call

Hermes emits no span for a turn: its tracers give one trace per model call, so without help the
sidecar can only guess where a turn starts and ends, and Hermes' exit reason
(``result["turn_exit_reason"]``, e.g. ``max_iterations_reached(30/30)``) is on no span. This
adapter wraps ``AIAgent.run_conversation`` (one call = one turn = one run):

* the turn runs inside ``wd.run(agent=..., session=agent.session_id,
  max_iterations=agent.max_iterations)``, so every span of the turn carries ``watchdog.run.id``;
* it opens the turn's ``invoke_agent`` span (``gen_ai.agent.name``, ``gen_ai.conversation.id``)
  and ends it with ``hermes.turn_exit_reason``, the answer (``output.value``) when there is one,
  and, when Hermes stopped the turn at ``max_iterations``, ``watchdog.limit_reached =
  "max_iterations"``: the sidecar reads that as ``tool_limit_reached`` (reason
  ``max_iterations``), with ``has_final_answer`` true when the summary Hermes then asks for came;
* the summary request Hermes sends at that limit is a ``user`` message it appends itself: spans
  started while it is asked carry ``hermes.summary_request = true`` so that request is never
  taken for a user turn;
* Hermes makes each model request in a ``threading.Thread`` of its own, which starts with an
  empty OpenTelemetry context: spans made there (``opentelemetry-instrumentation-openai-v2``'s
  chat spans) would belong to no run. When ``opentelemetry-instrumentation-threading`` is
  installed the adapter turns it on (process-wide, idempotent: every thread then starts in the
  context of the code that started it); without it, it says once that those spans go unmarked.
  Threads a turn starts and leaves running (Hermes' background memory/skill review) carry the
  turn's run too: their model calls after the turn arrive as late spans of that ended run.

It patches the one agent object it is given (``watch_hermes(agent, ...)`` is idempotent) and
nothing else in Hermes.

Not yet here: steering at the decision point (DESIGN §8, issue 9), which the other adapters
share through ``run.before_model_call()`` / ``run.before_tool_call()``. For Hermes the places
are this agent's ``_build_api_kwargs`` (or the ``pre_api_request`` hook: add the turn's
instructions as a system message, drop ``tools`` on the final turn) and the ``pre_tool_call``
hook (``{"action": "block", "message": refused.message}`` on :class:`~watchdog.client.
ToolRefused`); the tests would be those of ``tests/frameworks/test_steering_frameworks.py``.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from watchdog.client.run import Run
from watchdog.client.watchdog import Watchdog

LIMIT_ATTRIBUTE = "watchdog.limit_reached"
EXIT_REASON_ATTRIBUTE = "hermes.turn_exit_reason"
SUMMARY_ATTRIBUTE = "hermes.summary_request"
# Hermes' exit reasons that mean "a limit of Hermes stopped the turn", and the limit's name.
LIMIT_EXIT_REASONS = (
    (re.compile(r"max_iterations_reached\b"), "max_iterations"),
    (re.compile(r"budget_exhausted\b"), "max_iterations"),  # the shared IterationBudget
)
_MARK = "_watchdog_hermes"

log = logging.getLogger("watchdog.client")


def carry_context_into_threads() -> bool:
    """Have every new thread start in its starter's OpenTelemetry context (Hermes' API-call
    threads included), with ``opentelemetry-instrumentation-threading``; False without it."""
    try:
        from opentelemetry.instrumentation.threading import ThreadingInstrumentor
    except ImportError:
        log.warning("agent-watchdog: opentelemetry-instrumentation-threading is not installed: "
                    "spans Hermes makes in its API-call threads carry no run id")
        return False
    instrumentor = ThreadingInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()
    return True


def limit_of(exit_reason: object) -> str | None:
    """The name of the Hermes limit behind ``turn_exit_reason``, or None."""
    text = str(exit_reason or "")
    for pattern, limit in LIMIT_EXIT_REASONS:
        if pattern.match(text):
            return limit
    return None


def watch_hermes(agent: Any, watchdog: Watchdog | None = None, *,
                 agent_name: str = "hermes") -> Any:
    """Make each ``agent.run_conversation(...)`` of this Hermes ``AIAgent`` a watched run."""
    if getattr(agent, _MARK, None) is not None:
        return agent
    wd = watchdog or Watchdog()
    carry_context_into_threads()
    state: dict[str, Run | None] = {"run": None}
    run_conversation = agent.run_conversation
    handle_max_iterations = agent._handle_max_iterations

    @functools.wraps(run_conversation)
    def watched_turn(user_message: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        session = getattr(agent, "session_id", None) or None
        with wd.run(agent=agent_name, session=session,
                    max_iterations=getattr(agent, "max_iterations", None)) as run:
            attributes = {"gen_ai.operation.name": "invoke_agent",
                          "gen_ai.agent.name": agent_name}
            if session:
                attributes["gen_ai.conversation.id"] = session
            span = wd.tracer().start_span(f"invoke_agent {agent_name}", attributes=attributes)
            state["run"] = run
            try:
                with trace.use_span(span, end_on_exit=False):
                    result: dict[str, Any] = run_conversation(user_message, *args, **kwargs)
            except BaseException as exc:
                span.record_exception(exc)
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                span.end()
                raise
            finally:
                state["run"] = None
            _end_turn(run, span, result)
        return result

    @functools.wraps(handle_max_iterations)
    def summary_request(*args: Any, **kwargs: Any) -> Any:
        run = state["run"]
        if run is None:
            return handle_max_iterations(*args, **kwargs)
        run.span_attributes[SUMMARY_ATTRIBUTE] = True  # stamped on spans that start meanwhile
        try:
            return handle_max_iterations(*args, **kwargs)
        finally:
            run.span_attributes.pop(SUMMARY_ATTRIBUTE, None)

    agent.run_conversation = watched_turn
    agent._handle_max_iterations = summary_request
    setattr(agent, _MARK, wd)
    return agent


def _end_turn(run: Run, span: trace.Span, result: Any) -> None:
    result = result if isinstance(result, dict) else {}
    reason = result.get("turn_exit_reason")
    if reason:
        span.set_attribute(EXIT_REASON_ATTRIBUTE, str(reason)[:300])
    limit = limit_of(reason)
    if limit is not None:
        span.set_attribute(LIMIT_ATTRIBUTE, limit)
    answer = result.get("final_response")
    if isinstance(answer, str) and answer.strip() and not result.get("failed"):
        run.set_final_answer(answer)
    if result.get("failed") and not result.get("interrupted"):
        error = str(result.get("error") or reason or "failed")
        span.set_attribute("error.type", "HermesTurnFailed")
        span.set_status(Status(StatusCode.ERROR, error[:500]))
    span.end()
