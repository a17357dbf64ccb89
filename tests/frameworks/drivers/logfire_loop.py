"""A hand-written agent loop on the OpenAI client, traced by Pydantic Logfire and exported to
the sidecar only (``send_to_logfire=False``; Logfire adds an OTLP exporter of its own for the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT``).

``logfire.instrument_openai()`` traces each model call (``Chat Completion with {model!r}``:
``request_data``/``response_data`` as JSON, ``gen_ai.*`` request/usage attributes),
``logfire.span`` the agent run and ``@logfire.instrument`` the tool (``logfire.msg_template``,
``code.function``, the arguments as attributes; the exception recorded when it raises). At
its own cap (``limit``) the loop raises, and the agent span records it.
Scenarios (argv[1]): three_tools / limit / tool_error.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from _handwritten_loop import StepLimitReached, recording_relay, run_loop
from _tools import TASKS, lookup

recording_relay()
os.environ["OTEL_METRICS_EXPORTER"] = "none"  # the sidecar takes traces only
os.environ["OTEL_LOGS_EXPORTER"] = "none"

import logfire  # noqa: E402


@logfire.instrument("lookup {key}")
def traced_lookup(key: str) -> str:
    return lookup(key)


def call_tool(name: str, args: dict[str, Any]) -> str:
    return traced_lookup(**args)


def main(scenario: str) -> None:
    logfire.configure(send_to_logfire=False, service_name="logfire-loop", console=False)
    logfire.instrument_openai()
    try:
        with logfire.span("research agent {task}", task=TASKS[scenario]) as run:
            answer = run_loop(scenario, call_tool)
            run.set_attribute("answer", answer)
        print("answer:", answer)
    except StepLimitReached as exc:
        print("stopped:", exc)
    logfire.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
