"""Every code block of the README's client section, run as pasted (DESIGN §8: a new user copies
them): each in its own Python process, with ``WATCHDOG_URL``, ``OTEL_EXPORTER_OTLP_ENDPOINT`` and
``OPENAI_BASE_URL`` pointing at a real sidecar and the scripted model server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.harness import RunningServer, wait_until

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = ("## Inside the agent: the client SDK", "## Configuration")
REPORT = "## Task\nFind the config file.\n\n## Key Findings\n/srv/app/config.yaml"


def client_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    start, end = text.index(SECTION[0]), text.index(SECTION[1])
    return re.findall(r"```python\n(.*?)```", text[start:end], re.S)


def test_client_section_has_the_blocks_a_user_needs() -> None:
    blocks = client_blocks()
    assert len(blocks) == 4
    assert any("Agent.instrument_all()" in block for block in blocks)
    assert any("before_model_call()" in block and "before_tool_call(" in block
               for block in blocks)


def test_every_client_block_runs_as_pasted(sidecar: RunningServer) -> None:
    with FakeLLM() as llm:
        llm.script("gpt-4o-mini", fakellm.looping("search", lambda i: {"q": f"config {i}"},
                                                  REPORT))
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("OTEL_", "WATCHDOG_", "OPENAI_"))}
        env.update({"WATCHDOG_URL": sidecar.api,
                    "OTEL_EXPORTER_OTLP_ENDPOINT": sidecar.otlp_http,
                    "OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "sk-fake",
                    "OPENAI_AGENTS_DONT_LOG_MODEL_DATA": "1"})
        outputs = []
        for block in client_blocks():
            result = subprocess.run([sys.executable, "-c", block], env=env, text=True,
                                    capture_output=True, timeout=120)
            assert result.returncode == 0, (block, result.stdout[-2000:], result.stderr[-4000:])
            outputs.append(result.stdout)
    assert outputs[2].strip() == REPORT and outputs[3].strip() == REPORT

    def explorer_runs() -> list[dict[str, str]] | None:
        runs = [run for run in sidecar.get_json("/v1/runs?agent=explorer&state=ended")["runs"]]
        return runs if len(runs) >= 4 else None

    runs = wait_until(explorer_runs, what="the README's four runs to end")
    states = sorted(run["terminal_state"] for run in runs)
    # the home-grown loop searches until its budget of 20 is used, then reports
    assert states.count("tool_limit_reached") == 1, states
