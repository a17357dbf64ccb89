"""Aider's ``aider`` command: its ``main``, called as the ``aider`` script calls it, with the
command line in ``AIDER_ARGS`` (a JSON list), from the directory ``AIDER_WORKDIR`` (the files
it edits, its git repository). Mode (argv[1]): ``cli``.

Aider never uses the API's tool calling: the model answers with edit blocks in its text
(SEARCH/REPLACE in the ``diff`` edit format), which Aider applies to the files; it then lints
them and, while the lint fails, sends the errors back as a new user message (at most 3 such
reflections). Its model is LiteLLM's SDK (``openai/<model>``), which reads ``OPENAI_API_BASE``:
the sidecar's. This driver prints nothing of its own; Aider's exit status is the process's."""

from __future__ import annotations

import json
import os
import sys


def main(_mode: str) -> int:
    os.chdir(os.environ["AIDER_WORKDIR"])
    from aider.main import main as aider

    return aider(json.loads(os.environ["AIDER_ARGS"])) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
