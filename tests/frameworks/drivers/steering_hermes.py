"""hermes-agent's real ``AIAgent.run_conversation`` loop steered by ``watch_hermes``; spans by
the grafana-agento11y-hermes plugin (loaded by Hermes' own plugin system: its tool spans carry
a failed tool's error, which the error-loop rule reads). See ``_steering.py`` for the scenarios;
two more are Hermes' own, with the tool ``search`` and a budget of 10:

* ``parallel``: the model asks for several searches per response (the calls past the budget
  must be refused);
* ``stubborn``: the model calls a tool even when none is offered (the final turn): the turn ends
  with ``WatchdogAbort``, printed as ``{"aborted": <rule>}`` in the result line;
* ``dollars``: no tool budget but ``max_cost_usd`` (:data:`DOLLARS`): the sidecar prices the
  turn's model calls and stops the loop when the dollars are spent.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from _hermes import hermes_home
from _otel import model_settings
from _steering import BUDGETS, fetch, list_dir, ran, read, report, scenario, search
from agent_watchdog_client import Watchdog, WatchdogAbort

TOOLSET = "watchdog_steering"
MAX_ITERATIONS = 60  # Hermes' own limit stays out of the way: the watchdog's budget stops it


def schema(name: str, description: str, parameter: str) -> dict[str, Any]:
    return {"name": name, "description": description,
            "parameters": {"type": "object", "properties": {parameter: {"type": "string"}},
                           "required": [parameter]}}


def handler(function: Callable[[str], str], parameter: str) -> Callable[..., str]:
    def handle(args: dict[str, Any], **_kwargs: object) -> str:
        return function(str(args.get(parameter)))  # Hermes' registry turns a raise into an error
    return handle


HERMES_BUDGETS = {"parallel": 10, "stubborn": 10, "dollars": None}
DOLLARS = 0.0002  # the dollars scenario's max_cost_usd
TOOLS = {"budget": [("search", search, "q")], "parallel": [("search", search, "q")],
         "stubborn": [("search", search, "q")], "dollars": [("search", search, "q")],
         "cycle": [("list", list_dir, "dir"), ("read", read, "path")],
         "errors": [("fetch", fetch, "url")]}


def main() -> None:
    name = sys.argv[1] if sys.argv[1:2] and sys.argv[1] in HERMES_BUDGETS else scenario()
    if "HERMES_HOME" not in os.environ:  # the tests give the home Hermes was imported with
        os.environ["HERMES_HOME"] = hermes_home(["agento11y"])
    os.environ.setdefault("AGENTO11Y_AGENT_NAME", "explorer")
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider

    wd = Watchdog()
    provider = wd.setup_tracing(service_name="steering-hermes")  # before the plugin loads
    metrics.set_meter_provider(MeterProvider())  # the plugin would install an OTLP one

    from agent_watchdog_client.adapters.hermes import last_run, watch_hermes
    from run_agent import AIAgent
    from tools.registry import registry

    for tool, function, parameter in TOOLS[name]:
        registry.register(name=tool, toolset=TOOLSET, handler=handler(function, parameter),
                          schema=schema(tool, function.__doc__ or tool, parameter),
                          description=function.__doc__ or tool)
    base_url, model = model_settings()
    agent = AIAgent(base_url=base_url, api_key="sk-fake", provider="custom", model=model,
                    max_iterations=MAX_ITERATIONS, enabled_toolsets=[TOOLSET], tool_delay=0,
                    quiet_mode=True, skip_context_files=True, skip_memory=True,
                    save_trajectories=False, session_id=f"hermes-steering-{name}")
    # Hermes sends every log record to its own files (logs/ in its home, which the tests share
    # among the driver's scenarios): the client's go to stderr as well, where the drivers of the
    # other frameworks have them
    echo = logging.StreamHandler(sys.stderr)
    echo.setLevel(logging.INFO)  # what Hermes' agent.log keeps
    echo.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.getLogger("agent_watchdog_client").addHandler(echo)
    watch_hermes(agent, wd, agent_name="explorer",
                 max_tool_calls={**BUDGETS, **HERMES_BUDGETS}[name],
                 max_cost_usd=DOLLARS if name == "dollars" else None)
    try:
        result = agent.run_conversation("Find the file.")
    except WatchdogAbort as abort:
        run = last_run(agent)
        assert run is not None
        print(json.dumps({"run_id": run.id, "ran": ran, "aborted": abort.directive.rule,
                          "report": abort.report}), flush=True)
    else:
        run = last_run(agent)
        assert run is not None
        report(run, result.get("final_response"))
    wd.close()
    from grafana_agento11y_hermes import _otel as plugin_otel  # flushes what the plugin holds
    plugin_otel.force_flush(5000)
    provider.shutdown()


if __name__ == "__main__":
    main()
