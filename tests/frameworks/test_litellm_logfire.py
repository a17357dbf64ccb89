"""A hand-written loop on LiteLLM's SDK traced by LiteLLM's own OpenTelemetry callback and by
Pydantic Logfire (driver ``litellm_logfire_loop``, venv ``.venvs/litellm_logfire``).

What it emits: one trace per invocation, the loop's ``research agent {task}`` span (Logfire's)
> a ``Chat Completion with {request_data[model]!r}`` span per model call (Logfire's
``instrument_openai``: LiteLLM's OpenAI provider posts through the openai client), a
``raw_gen_ai_request`` span per call (LiteLLM's: the raw response, ``llm.openai.*``) and a
``lookup {key}`` span per tool call (``@logfire.instrument``; its exception an event, status
ERROR). LiteLLM's callback writes every call's ``gen_ai.*`` attributes (``gen_ai.operation.name``
``chat``, usage, finish reasons, messages) onto the span active around the call, the loop's
own, and sets its status OK: the agent's root span arrives as a model call's (issue 28,
mechanism 4), the cap's exception an event on it.

The expectations are DESIGN §3's: one run per invocation that ends with its root, iterations =
model calls (the root's copied attributes no further call, its usage not counted again), every
tool execution counted, the answer's text, the terminal state (the loop's own cap, told by the
exception its root records, is ``tool_limit_reached``), the agent's name (``service.name``:
nothing else names it). Each scenario runs live and from its committed recording
(``recordings/litellm_logfire_loop/``).
"""

from __future__ import annotations

from tests.frameworks.harness import loop_expected, loop_tests

ENV, DRIVER = "litellm_logfire", "litellm_logfire_loop"
AGENT = "litellm-logfire-loop"  # nothing names an agent (spans are named after templates)

EXPECTED = loop_expected(AGENT)  # scenario -> (the run, its answer's text)

test_live, test_recorded = loop_tests(ENV, DRIVER, EXPECTED)
