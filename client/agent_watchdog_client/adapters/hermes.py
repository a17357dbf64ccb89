"""hermes-agent (NousResearch): each turn a run, with Hermes' own exit reason, steered at the
decision point.

::

    from run_agent import AIAgent
    from agent_watchdog_client import Watchdog
    from agent_watchdog_client.adapters.hermes import watch_hermes

    wd = Watchdog()
    wd.setup_tracing(service_name="researcher")   # or your provider (plus a tracer: the
                                                  # grafana-agento11y-hermes plugin, or
                                                  # opentelemetry-instrumentation-openai-v2)
    agent = AIAgent(model=..., max_iterations=60)
    watch_hermes(agent, wd, agent_name="researcher", max_tool_calls=20, max_cost_usd=0.50)
    result = agent.run_conversation("...")        # one run per call
    result["final_response"]                      # at the limit: the progress report

Hermes emits no span for a turn: its tracers give one trace per model call, so without help the
sidecar can only guess where a turn starts and ends, and Hermes' exit reason
(``result["turn_exit_reason"]``, e.g. ``max_iterations_reached(30/30)``) is on no span. This
adapter wraps ``AIAgent.run_conversation`` (one call = one turn = one run):

* the turn runs inside ``wd.run(agent=..., session=agent.session_id,
  max_iterations=agent.max_iterations, max_tool_calls=...)`` (and the ``max_seconds``,
  ``max_tokens`` and ``max_cost_usd`` given: US dollars, as the sidecar prices the turn's model
  calls), so every span of the turn carries ``watchdog.run.id`` (:func:`last_run` gives the run
  after the call);
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

Steering (DESIGN §8; ``steer=False`` turns it off) uses the two decision points every adapter
shares, ``run.before_model_call()`` and ``run.before_tool_call()``:

* before each model request — this agent's ``_build_api_kwargs``, which Hermes calls for every
  request of its loop (not for its own ``max_iterations`` summary) — the run syncs with the
  sidecar and the turn's instructions are appended to the request's *system* prompt (the first
  system message, or the Responses API's ``instructions``), never a user message. Hermes' own
  ``pre_api_request`` hook is an observer (its return value is ignored) and its ``llm_request``
  middleware is process-wide, so the agent's own method is the place;
* on the final request (an abort, or the tool budget used up) the request offers no tools; the
  model's text answer — the progress report — ends Hermes' loop as the turn's
  ``final_response``, and becomes the run's final answer. Should the model call a tool anyway,
  the call is refused, and the next request ends the turn: the adapter interrupts Hermes (so it
  closes the turn and saves the session) and ``run_conversation`` raises
  :class:`~agent_watchdog_client.WatchdogAbort` with the report;
* before each tool, a ``pre_tool_call`` hook (Hermes' plugin hook, registered once in Hermes'
  plugin manager for the process) admits the call or returns ``{"action": "block", "message":
  "Not run: …"}``: the tool does not run and the model gets the message as its result
  (``{"error": "Not run: …"}``). The hook finds the steered turn by the OpenTelemetry context it
  runs in, else by the hook's ``session_id``; other agents' tools pass.

It patches the one agent object it is given (``watch_hermes(agent, ...)`` is idempotent) and,
when steering, adds that one hook to Hermes' plugin manager.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from agent_watchdog_client.run import Run, current_run
from agent_watchdog_client.steer import ModelTurn, ToolRefused, WatchdogAbort
from agent_watchdog_client.watchdog import Watchdog

LIMIT_ATTRIBUTE = "watchdog.limit_reached"
EXIT_REASON_ATTRIBUTE = "hermes.turn_exit_reason"
SUMMARY_ATTRIBUTE = "hermes.summary_request"
# Hermes' exit reasons that mean "a limit of Hermes stopped the turn", and the limit's name.
LIMIT_EXIT_REASONS = (
    (re.compile(r"max_iterations_reached\b"), "max_iterations"),
    (re.compile(r"budget_exhausted\b"), "max_iterations"),  # the shared IterationBudget
)
# Request keys that offer tools, by Hermes' API mode (chat completions, Responses, Anthropic).
TOOL_KEYS = ("tools", "tool_choice", "parallel_tool_calls")
PLUGIN_NAME = "agent-watchdog"
_MARK = "_watchdog_hermes"

log = logging.getLogger("agent_watchdog_client")

# The steered turns under way, by run id: the pre_tool_call hook (one for the process) finds
# its turn here. An entry lives from a turn's start to its end.
_STEERED: dict[str, tuple[Any, Run]] = {}


class _TurnStopped(Exception):
    """Raised out of ``_build_api_kwargs`` once the run is over (Hermes has been interrupted,
    so its loop ends the turn instead of retrying)."""


@dataclass
class HermesTurns:
    """What the adapter keeps on the agent it patched."""

    watchdog: Watchdog
    agent_name: str
    steer: bool
    max_tool_calls: int | None = None
    max_seconds: float | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    run: Run | None = None  # the turn under way
    last: Run | None = None  # the latest turn's run, once started
    summary: bool = False  # Hermes is asking for its own max_iterations summary
    stopped: WatchdogAbort | None = None  # the run ended after its final turn


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


def last_run(agent: Any) -> Run | None:
    """The run of this watched agent's latest turn (under way or ended), or None."""
    turns = getattr(agent, _MARK, None)
    return turns.last if isinstance(turns, HermesTurns) else None


def watch_hermes(agent: Any, watchdog: Watchdog | None = None, *, agent_name: str = "hermes",
                 steer: bool = True, max_tool_calls: int | None = None,
                 max_seconds: float | None = None, max_tokens: int | None = None,
                 max_cost_usd: float | None = None) -> Any:
    """Make each ``agent.run_conversation(...)`` of this Hermes ``AIAgent`` a watched run with
    the given budget (``max_cost_usd``: US dollars), steered unless ``steer=False``."""
    if getattr(agent, _MARK, None) is not None:
        return agent
    turns = HermesTurns(watchdog or Watchdog(), agent_name, steer, max_tool_calls, max_seconds,
                        max_tokens, max_cost_usd)
    carry_context_into_threads()
    run_conversation = agent.run_conversation
    handle_max_iterations = agent._handle_max_iterations

    @functools.wraps(run_conversation)
    def watched_turn(user_message: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        wd = turns.watchdog
        session = getattr(agent, "session_id", None) or None
        with wd.run(agent=agent_name, session=session,
                    max_iterations=getattr(agent, "max_iterations", None),
                    max_tool_calls=turns.max_tool_calls, max_seconds=turns.max_seconds,
                    max_tokens=turns.max_tokens, max_cost_usd=turns.max_cost_usd) as run:
            attributes = {"gen_ai.operation.name": "invoke_agent",
                          "gen_ai.agent.name": agent_name}
            if session:
                attributes["gen_ai.conversation.id"] = session
            span = wd.tracer().start_span(f"invoke_agent {agent_name}", attributes=attributes)
            turns.run, turns.last, turns.stopped = run, run, None
            if turns.steer:
                _admit_tools_by_hook()
                _STEERED[run.id] = (agent, run)
            try:
                with trace.use_span(span, end_on_exit=False):
                    result: dict[str, Any] = run_conversation(user_message, *args, **kwargs)
                if turns.stopped is not None:
                    raise turns.stopped
            except BaseException as exc:
                span.record_exception(exc)
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                span.end()
                raise
            finally:
                turns.run = None
                _STEERED.pop(run.id, None)
            _end_turn(run, span, result)
        return result

    @functools.wraps(handle_max_iterations)
    def summary_request(*args: Any, **kwargs: Any) -> Any:
        run = turns.run
        if run is None:
            return handle_max_iterations(*args, **kwargs)
        run.span_attributes[SUMMARY_ATTRIBUTE] = True  # stamped on spans that start meanwhile
        turns.summary = True
        try:
            return handle_max_iterations(*args, **kwargs)
        finally:
            turns.summary = False
            run.span_attributes.pop(SUMMARY_ATTRIBUTE, None)

    agent.run_conversation = watched_turn
    agent._handle_max_iterations = summary_request
    if steer:
        agent._build_api_kwargs = _steered_request(agent, turns, agent._build_api_kwargs)
    setattr(agent, _MARK, turns)
    return agent


# -- the model request ----------------------------------------------------------------------------

def _steered_request(agent: Any, turns: HermesTurns, build: Any) -> Any:
    @functools.wraps(build)
    def steered_kwargs(api_messages: list[Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        request: dict[str, Any] = build(api_messages, *args, **kwargs)
        run = turns.run
        if run is None or turns.summary:  # not in a turn, or Hermes' own summary request
            return request
        run.note_messages(len(api_messages))
        try:
            turn = run.before_model_call()
        except WatchdogAbort as abort:  # the final turn was used: end the turn, then raise
            turns.stopped = abort
            agent.interrupt()
            raise _TurnStopped(str(abort)) from None
        return with_turn(request, turn)

    return steered_kwargs


def with_turn(request: dict[str, Any], turn: ModelTurn) -> dict[str, Any]:
    """Hermes' provider kwargs carrying ``turn``: its instructions appended to the system
    prompt, no tools on a final turn. Copies what it changes (Hermes reuses the message list
    when it retries a request)."""
    if not turn.instructions and not turn.final:
        return request
    request = dict(request)
    if turn.instructions:
        _add_system_text(request, turn.instructions)
    if turn.final:
        for key in TOOL_KEYS:
            request.pop(key, None)
    return request


def _add_system_text(request: dict[str, Any], text: str) -> None:
    if isinstance(request.get("instructions"), str):  # the Responses API (codex_responses)
        request["instructions"] = _joined(request["instructions"], text)
        return
    if "system" in request:  # the Anthropic Messages API: a string or text blocks
        system = request["system"]
        if isinstance(system, list):
            request["system"] = [*system, {"type": "text", "text": text}]
        else:
            request["system"] = _joined(str(system or ""), text)
        return
    key = "messages" if isinstance(request.get("messages"), list) else "input"
    messages = list(request.get(key) or [])
    first = messages[0] if messages and isinstance(messages[0], dict) else None
    if first is not None and first.get("role") in ("system", "developer"):
        content = first.get("content")
        if isinstance(content, list):
            content = [*content, {"type": "text", "text": text}]
        else:
            content = _joined(str(content or ""), text)
        messages[0] = {**first, "content": content}
    else:
        messages.insert(0, {"role": "system", "content": text})
    request[key] = messages


def _joined(base: str, text: str) -> str:
    return f"{base}\n\n{text}" if base else text


# -- the tool call --------------------------------------------------------------------------------

def _admit_tools_by_hook() -> None:
    """Register :func:`_admit_tool` as a ``pre_tool_call`` hook, once (again after Hermes'
    plugin manager was reloaded, which clears its hooks)."""
    from hermes_cli.plugins import PluginContext, PluginManifest, get_plugin_manager

    manager = get_plugin_manager()
    hooks = getattr(manager, "_hooks", {})  # the manager has no public "is it registered"
    if _admit_tool in hooks.get("pre_tool_call", ()):
        return
    context = PluginContext(PluginManifest(name=PLUGIN_NAME, source="watchdog"), manager)
    context.register_hook("pre_tool_call", _admit_tool)


def _admit_tool(*, tool_name: str = "", session_id: str = "", **_: Any) -> dict[str, str] | None:
    """Hermes' ``pre_tool_call`` hook: count the call, or block it with the refusal."""
    run = _steered_run(session_id)
    if run is None:
        return None
    try:
        run.before_tool_call(tool_name)
    except ToolRefused as refused:
        return {"action": "block", "message": refused.message}
    return None


def _steered_run(session_id: str) -> Run | None:
    run = current_run()
    if run is not None and run.id in _STEERED:
        return run
    for agent, steered in list(_STEERED.values()):
        if session_id and (getattr(agent, "session_id", None) or "") == session_id:
            return steered
    return None


# -- the end of a turn ----------------------------------------------------------------------------

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
