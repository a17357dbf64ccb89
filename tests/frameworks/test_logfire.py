"""A hand-written loop on the OpenAI client traced by Pydantic Logfire, exported over OTLP
to the sidecar only (driver ``logfire_loop``, venv ``.venvs/logfire``).

What Logfire emits: one trace per invocation, the ``research agent {task}`` span (Logfire names
a span after its message template; ``logfire.msg``, ``code.*``, the arguments as attributes) >
a ``Chat Completion with {request_data[model]!r}`` span per model call (``request_data`` as
JSON, ``gen_ai.*`` request, usage and messages) and a ``lookup {key}`` span per tool call
(``@logfire.instrument``: no GenAI attribute; its exception an event, status ERROR). The cap's
exception is on the run span.

The expectations are DESIGN §3's: one run per invocation, iterations = model calls, every tool
execution counted (the failing one as one call and one error), the answer's text, the terminal
state (the loop's own cap, told by the exception its run span records, is
``tool_limit_reached``), the agent's name. Each scenario runs live and from its committed
recording (``recordings/logfire_loop/``).
"""

from __future__ import annotations

from tests.frameworks.harness import loop_expected, loop_tests

ENV, DRIVER = "logfire", "logfire_loop"
AGENT = "logfire-loop"  # nothing names an agent (spans are named after templates)

EXPECTED = loop_expected(AGENT)  # scenario -> (the run, its answer's text)

test_live, test_recorded = loop_tests(ENV, DRIVER, EXPECTED)
