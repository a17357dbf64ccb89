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

from tests.frameworks import scenarios
from tests.frameworks.harness import Expect, loop_tests

ENV, DRIVER = "openai_olm", "openai_olm_loop"
AGENT = "openai-olm-loop"  # nothing names an agent (a plain span's name is an operation)

# scenario -> (the run, its answer's text)
EXPECTED: dict[str, tuple[Expect, str | None]] = {
    "three_tools": (Expect(AGENT, 4, 3, 0, "completed", True, None, None), scenarios.ANSWER),
    "limit": (Expect(AGENT, 5, 5, 0, "tool_limit_reached", False, "max_steps", None), None),
    "tool_error": (Expect(AGENT, 2, 1, 1, "completed", True, None, None),
                   scenarios.ERROR_ANSWER),
}

test_live, test_recorded = loop_tests(ENV, DRIVER, EXPECTED)
