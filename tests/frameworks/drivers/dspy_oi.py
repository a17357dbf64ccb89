"""DSPy agents (dspy 3.x ``dspy.ReAct`` with Python function tools) on ``dspy.LM`` (LiteLLM
inside) against the scripted model server, traced by OpenInference
(openinference-instrumentation-dspy, DSPy's documented OpenTelemetry route); scenarios ending in
``_litellm`` add openinference-instrumentation-litellm, which DSPy's tracing guides install
beside it. DSPy's ChatAdapter makes the model answer in text fields (``[[ ## next_tool_name ##
]]``...): the fake model's scripts answer in that format.

Scenarios (argv[1]):

* ``three_tools``: ``ReAct("question -> answer", tools=[lookup])`` looks a, b and c up, calls
  ReAct's own ``finish`` tool, then ReAct's extract step (a ``ChainOfThought``) answers;
  ``three_tools_async`` is the same through ``acall``;
* ``limit``: the model asks for ``lookup`` on every step; ``max_iters=3`` ends the loop after
  the third tool call, and ReAct's extract step answers from the trajectory anyway;
* ``tool_error``: ``lookup`` raises; ReAct catches it, shows the model the error as the
  observation, and the model finishes;
* ``subagent``: a ReAct (model ``<name>``) whose tool ``research`` runs another ReAct (model
  ``<name>-sub``, with ``lookup``): the researcher looks a up and answers, then the outer agent
  finishes and answers.

A scenario ending ``_otel`` also turns on LiteLLM's own OpenTelemetry callback
(``litellm.callbacks = ["otel"]``, DSPy driven through LiteLLM as LiteLLM's docs set it up), which
exports through a tracer provider of its own to the same endpoint (recorded through the relay of
``_handwritten_loop``).

A scenario ending ``_nocontent`` runs with content hidden, as a privacy-minded deployment sets
it: OpenInference's ``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS``/``_INPUT_MESSAGES``/
``_OUTPUT_MESSAGES``/``_INPUT_TEXT``/``_OUTPUT_TEXT`` (read by the instrumentors'
``TraceConfig``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile

from _otel import model_settings, setup_tracing
from _tools import TASKS, lookup
from openinference.instrumentation.dspy import DSPyInstrumentor

SERVICE_NAME = "dspy-service"  # not the agent name: that must come from the spans
QUESTIONS = {**TASKS, "subagent": "Find out a."}
CONTENT_OFF = {f"OPENINFERENCE_HIDE_{what}": "true"
               for what in ("INPUTS", "OUTPUTS", "INPUT_MESSAGES", "OUTPUT_MESSAGES",
                            "INPUT_TEXT", "OUTPUT_TEXT")}


def main(scenario: str) -> None:
    if scenario.endswith("_nocontent"):
        os.environ.update(CONTENT_OFF)
        scenario = scenario.removesuffix("_nocontent")
    litellm_otel = scenario.endswith("_otel")
    scenario = scenario.removesuffix("_otel")
    # (before dspy and LiteLLM are imported: LiteLLM would download its model price list, and
    # DSPy writes its cache under the home directory; cache=False below keeps every call live)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("DSPY_CACHEDIR", tempfile.mkdtemp(prefix="dspy-cache-"))
    provider = setup_tracing(SERVICE_NAME)
    DSPyInstrumentor().instrument(tracer_provider=provider)
    if scenario.endswith("_litellm"):
        from openinference.instrumentation.litellm import LiteLLMInstrumentor
        LiteLLMInstrumentor().instrument(tracer_provider=provider)
    import dspy

    if litellm_otel:
        os.environ["OTEL_METRICS_EXPORTER"] = "none"  # the sidecar takes traces only
        os.environ["OTEL_LOGS_EXPORTER"] = "none"
        import litellm
        from _handwritten_loop import recording_relay
        recording_relay()
        litellm.callbacks = ["otel"]
    base_url, name = model_settings()

    def lm(model: str) -> dspy.LM:
        return dspy.LM(f"openai/{model}", api_base=base_url, api_key="sk-fake", cache=False,
                       num_retries=0)

    dspy.configure(lm=lm(name))
    base = scenario.removesuffix("_litellm").removesuffix("_async")
    if base == "subagent":
        inner = dspy.ReAct("question -> answer", tools=[lookup])

        def research(question: str) -> str:
            """Research a question with a sub-agent."""
            with dspy.context(lm=lm(name + "-sub")):
                return str(inner(question=question).answer)

        agent = dspy.ReAct("question -> answer", tools=[research])
    else:
        agent = dspy.ReAct("question -> answer", tools=[lookup],
                           max_iters=3 if base == "limit" else 20)
    question = QUESTIONS[base]
    if scenario.endswith("_async"):
        result = asyncio.run(agent.acall(question=question))
    else:
        result = agent(question=question)
    print("answer:", result.answer)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
