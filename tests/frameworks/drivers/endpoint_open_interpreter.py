"""Open Interpreter's Python API (``from interpreter import interpreter``), set up as its docs
set it up for a local model and run unattended: ``OI_SETTINGS``, a JSON object of its
settings by their dotted names (``offline``, ``auto_run``, its model ``openai/<model>`` at
``llm.api_base``: LiteLLM's OpenAI provider beneath it, always streamed, its key from
``OPENAI_API_KEY``), from the directory ``OI_WORKDIR``, where the code it writes really runs
(Python in its Jupyter kernel, shell in a shell). Mode (argv[1]): ``text``, the model's code in its
answers' code blocks (``llm.supports_functions = False``, as for any model LiteLLM does not
know to call functions), or ``tools``, the model's code by its ``execute`` tool call (and,
for the scripted model's name LiteLLM does not know, its context window and answer length).

``OI_CHATS``, a JSON list of the
user's messages, each one ``interpreter.chat(message)`` in turn in the same process (the
conversation going on); ``OI_OTEL`` set: LiteLLM's own OpenTelemetry callback
(``litellm.callbacks = ["otel"]``), its spans exported by the standard ``OTEL_EXPORTER_OTLP_*``
variables, as LiteLLM's docs set it up (``RECORD_SPANS``: each export request recorded).
Prints one JSON line: what each ``chat`` returned (its new messages)."""

from __future__ import annotations

import json
import os
import sys


def main(mode: str) -> int:
    os.chdir(os.environ["OI_WORKDIR"])
    if os.environ.get("OI_OTEL"):
        # with RECORD_SPANS, the export requests recorded on their way (before LiteLLM reads
        # the endpoint)
        from _handwritten_loop import recording_relay

        recording_relay()
    import litellm
    from interpreter import interpreter

    if os.environ.get("OI_OTEL"):
        litellm.callbacks = ["otel"]
    for name, value in json.loads(os.environ["OI_SETTINGS"]).items():
        *path, last = name.split(".")
        owner = interpreter
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, last, value)
    interpreter.llm.supports_functions = mode == "tools"
    interpreter.llm.supports_vision = False
    interpreter.llm.context_window = 16000
    interpreter.llm.max_tokens = 1000
    said = []
    try:
        for message in json.loads(os.environ["OI_CHATS"]):
            said.append(interpreter.chat(message, display=False))
    finally:
        interpreter.computer.terminate()  # (its Jupyter kernel, its shell)
    print(json.dumps(said))
    if os.environ.get("OI_OTEL"):
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
        if hasattr(provider, "force_flush"):
            provider.force_flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
