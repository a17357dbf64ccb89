"""The agent-side client of agent-watchdog (DESIGN §8).

It needs only the OpenTelemetry API/SDK and the standard library — none of the sidecar's
dependencies — so agents can install it next to any framework::

    from agent_watchdog_client import Watchdog

    wd = Watchdog()                              # WATCHDOG_URL, WATCHDOG_API_TOKEN
    wd.setup_tracing(service_name="explorer")    # or wd.instrument(your_tracer_provider)
    with wd.run(agent="explorer", max_tool_calls=20) as run:
        ...                                      # spans here carry watchdog.* attributes
        run.budget_note()                        # "[budget: 3 of 20 tool calls left — ...]"
        run.raise_if_aborted()

Adapters for pydantic-ai, the OpenAI Agents SDK, LangChain, smolagents and hermes-agent are in
:mod:`agent_watchdog_client.adapters`.
"""

from agent_watchdog_client.directive import Directive
from agent_watchdog_client.processor import WatchdogSpanProcessor
from agent_watchdog_client.run import Run, current_run
from agent_watchdog_client.steer import ModelTurn, ToolRefused, WatchdogAbort
from agent_watchdog_client.transport import DEFAULT_URL
from agent_watchdog_client.watchdog import Watchdog

__all__ = ["DEFAULT_URL", "Directive", "ModelTurn", "Run", "ToolRefused", "Watchdog",
           "WatchdogAbort", "WatchdogSpanProcessor", "current_run"]
