"""A hand-written loop on the OpenAI client traced by OpenInference (driver
``openai_oi_metadata``, venv ``.venvs/openai_oi``), its agent named only in the ``metadata``
OpenInference's ``using_metadata`` puts on every span (issue 28, mechanism 7).

What it emits: one trace per invocation, the loop's ``answer question`` CHAIN span (OITracer;
its input and output, the cap's exception) > a ``ChatCompletion`` LLM span per model call and a
``lookup`` TOOL span per tool call (the failing call's exception an event, status ERROR); every
span carries ``metadata`` ``{"agent_name": "research-agent", "team": "research"}``.

The expectations are DESIGN §3's: one run per invocation, iterations = model calls, every tool
execution counted, the answer's text, the terminal state (the loop's own cap, told by the
exception its run span records, is ``tool_limit_reached``), and the agent's name from the
root's own metadata (no convention names it; else it would be ``service.name``,
``openai-oi-metadata``). Each scenario runs live and from its committed recording
(``recordings/openai_oi_metadata/``).
"""

from __future__ import annotations

from tests.frameworks.harness import loop_expected, loop_tests

ENV, DRIVER = "openai_oi", "openai_oi_metadata"
AGENT = "research-agent"  # the root's metadata names it

EXPECTED = loop_expected(AGENT)  # scenario -> (the run, its answer's text)

test_live, test_recorded = loop_tests(ENV, DRIVER, EXPECTED)
