"""mini-swe-agent's ``mini`` command: its Typer app, called as the ``mini`` script calls it,
with the command line in ``MINI_ARGS`` (a JSON list), from the directory ``MINI_WORKDIR`` (its
``LocalEnvironment`` runs each command there). Mode (argv[1]): ``cli``.

Run text-based (``-c mini_textbased.yaml --model-class litellm_textbased``), the agent never
uses the API's tool calling: the model answers with one bash block in its text, the agent runs
it and sends its output back as the next user message, until a command prints
``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` first. Its model is LiteLLM's SDK
(``openai/<model>``), which reads ``OPENAI_BASE_URL``: the sidecar's. What it did is in the
trajectory file it writes (``-o``); this driver prints nothing of its own."""

from __future__ import annotations

import json
import os
import sys


def main(_mode: str) -> None:
    os.chdir(os.environ["MINI_WORKDIR"])
    # (imported here: minisweagent reads its settings from the environment at import)
    from minisweagent.run.mini import app

    app(json.loads(os.environ["MINI_ARGS"]), standalone_mode=False)


if __name__ == "__main__":
    main(sys.argv[1])
