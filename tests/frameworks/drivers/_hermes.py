"""hermes-agent (NousResearch) driven through its real ``AIAgent.run_conversation`` loop.

Shared by the drivers ``hermes_agento11y`` (the ``grafana-agento11y-hermes`` plugin, loaded by
Hermes' own plugin system from its entry point) and ``hermes_openai_v2``
(``opentelemetry-instrumentation-openai-v2`` around Hermes' OpenAI client). Scenarios (argv[1]):

* ``three_tools``: the tool ``lookup`` called 3 times, then an answer;
* ``limit``: the model calls ``lookup`` forever; Hermes' ``max_iterations`` (3) stops the turn and
  Hermes asks the model, without tools, for a summary (the fake model answers it);
* ``tool_error``: ``lookup`` raises; Hermes' registry turns the exception into a tool result
  (``{"error": "Tool execution failed: RuntimeError: ..."}``) and the model answers;

each with ``_adapter`` appended: the same turn inside ``agent_watchdog_client.adapters.hermes``.
Hermes has no agent-name setting of its own: the plugin reports ``AGENTO11Y_AGENT_NAME`` as
``gen_ai.agent.name``; openai-v2 spans name no agent (only the resource's ``service.name``); the
adapter names the run ``agent_name``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

AGENT_NAME = "hermes-researcher"
SERVICE_NAME = "hermes-service"  # not the agent name: the agent name must come from the spans
MAX_ITERATIONS = 3  # the limit scenario's; the others get room to finish
TOOLSET = "watchdog_tests"
LOOKUP_SCHEMA = {
    "name": "lookup",
    "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}},
                   "required": ["key"]},
}
PROMPTS = {
    "three_tools": "Look up a, b and c.",
    "limit": "Look up every key you can find.",
    "tool_error": "Look up broken.",
}


def lookup(args: dict, **_kwargs: object) -> str:
    key = str(args.get("key"))
    if key == "broken":
        raise RuntimeError(f"backend unavailable for {key}")
    return f"value of {key}"


def hermes_home(enable_plugins: list[str]) -> str:
    """A private HERMES_HOME: no user config, memory or skills; the given plugins enabled (the
    tests give one of their own instead, made once for all the driver's scenarios:
    ``IMPORT_SETTINGS`` in tests/frameworks/harness.py, with the same config)."""
    home = Path(tempfile.mkdtemp(prefix="hermes-home-"))
    lines = ["plugins:", "  enabled:"] + [f"    - {name}" for name in enable_plugins]
    if not enable_plugins:
        lines[1] = "  enabled: []"
    # no Python toolchain probe (python3 and pip in subprocesses) and no context-window probing
    # of the scripted model server (it knows none: Hermes' default is what they find)
    lines += ["agent:", "  environment_probe: false", "model:", "  context_length: 256000"]
    (home / "config.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(home)


def run(scenario: str, tracer: str) -> None:
    adapter = scenario.endswith("_adapter")
    base = scenario.removesuffix("_adapter")
    if "HERMES_HOME" not in os.environ:  # the tests give the home Hermes was imported with
        os.environ["HERMES_HOME"] = hermes_home(["agento11y"] if tracer == "agento11y" else [])
    os.environ.setdefault("AGENTO11Y_AGENT_NAME", AGENT_NAME)

    from _otel import model_settings, setup_tracing
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider

    provider = setup_tracing(SERVICE_NAME)
    metrics.set_meter_provider(MeterProvider())  # the plugin would install an OTLP one
    if tracer == "openai_v2":
        # The newer GenAI attributes with the messages on the span: without them nothing in a
        # chat span tells an answer from a tool request (Hermes streams; openai-v2 records no
        # finish reason for streams) or shows Hermes' summary request.
        os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
        OpenAIInstrumentor().instrument(tracer_provider=provider)

    from run_agent import AIAgent
    from tools.registry import registry

    registry.register(name="lookup", toolset=TOOLSET, schema=LOOKUP_SCHEMA, handler=lookup,
                      description="Look a key up.")
    base_url, model = model_settings()
    agent = AIAgent(base_url=base_url, api_key="sk-fake", provider="custom", model=model,
                    max_iterations=MAX_ITERATIONS if base == "limit" else 10,
                    enabled_toolsets=[TOOLSET], tool_delay=0,
                    quiet_mode=True, skip_context_files=True, skip_memory=True,
                    save_trajectories=False, session_id=f"hermes-session-{base}")
    if adapter:
        from agent_watchdog_client import Watchdog
        from agent_watchdog_client.adapters.hermes import watch_hermes

        watch_hermes(agent, Watchdog(tracer_provider=provider), agent_name=AGENT_NAME)
    result = agent.run_conversation(PROMPTS[base])
    print("turn_exit_reason:", result.get("turn_exit_reason"))
    print("api_calls:", result.get("api_calls"), "completed:", result.get("completed"))
    print("final_response:", result.get("final_response"))
    sys.stdout.flush()
    from grafana_agento11y_hermes import _otel as plugin_otel  # flushes what the plugin holds
    plugin_otel.force_flush(5000)
    provider.shutdown()
