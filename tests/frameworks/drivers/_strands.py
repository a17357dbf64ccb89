"""strands-agents with its native OpenTelemetry tracing, on its OpenAI model provider.

Shared by the drivers ``strands_default`` (Strands' default span format: answers, finish
reasons and tool arguments in span events) and ``strands_latest`` (the newer GenAI format,
``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``: ``gen_ai.input.messages`` /
``gen_ai.output.messages`` attributes). Scenarios (argv[1]):

* ``three_tools``: the tool ``lookup`` called 3 times, then an answer;
* ``limit``: the model calls ``lookup`` forever; Strands' own per-invocation cap
  ``limits={"turns": 3}`` stops the loop (``stop_reason = "limit_turns"``, no exception);
* ``tool_error``: ``lookup`` raises; Strands turns the exception into an error tool result and
  the model answers.

A scenario ending ``_nocontent`` runs it with Strands' redaction on for every sensitive
attribute (``gen_ai_unredacted_attributes=`` with an empty list in
``OTEL_SEMCONV_STABILITY_OPT_IN``): messages, answers, tool arguments and results become
``[REDACTED]``.

The agent is named with ``Agent(name=...)``.
"""

from __future__ import annotations

import os

AGENT_NAME = "strands-researcher"
SERVICE_NAME = "strands-service"  # not the agent name: the agent name must come from the spans
TURNS = 3
PROMPTS = {
    "three_tools": "Look up a, b and c.",
    "limit": "Look up every key you can find.",
    "tool_error": "Look up broken.",
}


def run(scenario: str, latest: bool) -> None:
    opt_in = ["gen_ai_latest_experimental"] if latest else []
    if scenario.endswith("_nocontent"):
        opt_in.append("gen_ai_unredacted_attributes=")  # nothing left unredacted
        scenario = scenario.removesuffix("_nocontent")
    if opt_in:
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = ",".join(opt_in)
    from _otel import model_settings, setup_tracing

    provider = setup_tracing(SERVICE_NAME)
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    @tool
    def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: the key to look up
        """
        if key == "broken":
            raise RuntimeError(f"backend unavailable for {key}")
        return f"value of {key}"

    base_url, model_name = model_settings()
    model = OpenAIModel(client_args={"base_url": base_url, "api_key": "sk-fake"},
                        model_id=model_name)
    agent = Agent(name=AGENT_NAME, model=model, tools=[lookup], callback_handler=None,
                  system_prompt="You look keys up.")
    limits = {"turns": TURNS} if scenario == "limit" else None
    result = agent(PROMPTS[scenario], limits=limits)
    print("stop_reason:", result.stop_reason)
    print("answer:", str(result))
    provider.shutdown()
