"""A hand-written loop on the OpenAI client traced by OpenLLMetry's
opentelemetry-instrumentation-openai (driver ``openai_olm_loop``, venv ``.venvs/openai_olm``).

What it emits: one trace per invocation, the loop's plain ``research-agent`` span (generic
``input``/``output`` attributes only) > an ``openai.chat`` span per model call (``gen_ai.*``
with the messages as JSON, the tool calls asked for in ``gen_ai.output.messages``) and the
loop's plain ``lookup`` span per tool call (``input``/``output``; its exception an event,
status ERROR). The cap's exception is on the run span.

The expectations are DESIGN §3's: one run per invocation, iterations = model calls, every tool
execution counted (the failing one as one call and one error), the answer's text, the terminal
state (the loop's own cap, told by the exception its run span records, is
``tool_limit_reached``), the agent's name. Each scenario runs live and from its committed
recording (``recordings/openai_olm_loop/``).
"""

from __future__ import annotations

from tests.frameworks.harness import loop_expected, loop_tests

ENV, DRIVER = "openai_olm", "openai_olm_loop"
AGENT = "openai-olm-loop"  # nothing names an agent (a plain span's name is an operation)

EXPECTED = loop_expected(AGENT)  # scenario -> (the run, its answer's text)

test_live, test_recorded = loop_tests(ENV, DRIVER, EXPECTED)
