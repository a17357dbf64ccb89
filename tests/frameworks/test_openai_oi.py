"""A hand-written loop on the OpenAI client traced by OpenInference's
openinference-instrumentation-openai, its tool calls by OpenInference's ``OITracer.tool``
(driver ``openai_oi_loop``, venv ``.venvs/openai_oi``).

What it emits: no span for the loop; each model call a ``ChatCompletion`` LLM span and each
tool call a ``lookup`` TOOL span, every one a trace of its own (the failing call's exception an
event, status ERROR). The calls are one run, grouped as loose calls. The loop's own cap is on
no span: a run stopped by it simply ends without an answer (``no_response``, after
``loose_run_gap``); only the model endpoint (docs/model-endpoint.md) would see it.

The expectations are DESIGN §3's: one run per invocation, iterations = model calls, every tool
execution counted (the failing one as one call and one error), the answer's text, the terminal
state (the loop's own cap, on no span, cannot be told from a run that stopped
without answering), the agent's name. Each scenario runs live and from its committed
recording (``recordings/openai_oi_loop/``).
"""

from __future__ import annotations

from tests.frameworks.harness import loop_expected, loop_tests

ENV, DRIVER = "openai_oi", "openai_oi_loop"
AGENT = "openai-oi-loop"  # nothing names an agent: the service name

EXPECTED = loop_expected(AGENT, "no_response", None)  # scenario -> (the run, its answer's text)

test_live, test_recorded = loop_tests(ENV, DRIVER, EXPECTED)
