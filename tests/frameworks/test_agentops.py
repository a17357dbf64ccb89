"""A hand-written loop on the OpenAI client traced by the AgentOps SDK (driver
``agentops_loop``, venv ``.venvs/agentops``): ``agentops.init`` with its own exporter pointed at
the sidecar (``exporter_endpoint``; no AgentOps account), its decorators on the agent.

What it emits, all of its own names on the scope ``agentops``: ``research.session`` (``@trace``:
``agentops.span.kind`` session, ``operation.name``, ``agentops.entity.input``/``output``) >
``research-agent.agent`` (``@agent``: kind agent) > ``run.task`` (``@operation``: kind task,
``agentops.task.input``/``output``) > each model call ``openai.chat.completion`` (its own OpenAI
instrumentation, scope ``openai``: indexed ``gen_ai.prompt.N``/``gen_ai.completion.N``) with a
``tool_call.lookup`` span below it per tool call the model asked for (``tool.name``,
``tool.parameters``: a request, not an execution) and, beside it, each execution
``lookup.tool`` (``@tool``: kind tool, ``agentops.tool.input``; the exception fails it). The
loop's own cap raises out of the decorated methods: the ``run.task`` span fails with its
message, while the agent's and the session's end OK (``agentops.session.end_state``
``Indeterminate``).

The expectations are DESIGN §3's: one run per invocation named after the ``@agent``,
iterations = model calls, every tool execution counted once (the model's requests are no
executions), the failing one as one call and one error, the answer's text, the terminal state.
Each scenario runs live and from its committed recording (``recordings/agentops_loop/``).
"""

from __future__ import annotations

from tests.frameworks.harness import loop_expected, loop_tests

ENV, DRIVER = "agentops", "agentops_loop"
AGENT = "research-agent"  # the @agent's name

EXPECTED = loop_expected(AGENT)  # scenario -> (the run, its answer's text)

test_live, test_recorded = loop_tests(ENV, DRIVER, EXPECTED)
