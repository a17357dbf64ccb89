"""A hand-written loop on the OpenAI client traced by MLflow and exported over OTLP (driver
``mlflow_loop``, venv ``.venvs/mlflow``).

What MLflow emits: one trace per invocation, the ``research_agent`` span (``mlflow.spanType``
``"AGENT"``) > a ``Completions`` span per model call (``CHAT_MODEL``; request and response as
JSON in ``mlflow.spanInputs``/``mlflow.spanOutputs``, usage in ``mlflow.chat.tokenUsage``) and
a ``lookup`` span per tool call (``TOOL``; its exception an event, status ERROR). Nothing but
``mlflow.*`` (and the request's own ``model``/``tools``): every value JSON-encoded, the span
type a quoted string. The cap's exception is on the agent span.

The expectations are DESIGN §3's: one run per invocation, iterations = model calls, every tool
execution counted (the failing one as one call and one error), the answer's text, the terminal
state (the loop's own cap, told by the exception its run span records, is
``tool_limit_reached``), the agent's name. Each scenario runs live and from its committed
recording (``recordings/mlflow_loop/``).
"""

from __future__ import annotations

from tests.frameworks.harness import loop_expected, loop_tests

ENV, DRIVER = "mlflow", "mlflow_loop"
AGENT = "research_agent"  # the @mlflow.trace(span_type=AGENT) function, named on its span

EXPECTED = loop_expected(AGENT)  # scenario -> (the run, its answer's text)

test_live, test_recorded = loop_tests(ENV, DRIVER, EXPECTED)
