"""Every fenced block of README.md, client/README.md, helm/agent-watchdog/README.md and
docs/**/*.md is exercised as pasted.

A block is checked according to a marker, an HTML comment on the line right before its fence::

    <!-- snippet: KIND [key=value ...] [flag ...] -->

A ``sh``/``bash`` or ``python`` block without a marker is simply run; any other block without a
marker, or with a kind below that does not exist, fails :func:`test_every_block_has_a_check`, so
a new unexercised block cannot slip in, and a fence this parser would not take (indented in a
list, ``~~~``) fails :func:`test_every_fence_opens_or_closes_a_checked_block`. There is no kind
that skips a block, and :func:`test_a_changed_block_fails_its_check` shows each kind's check
failing on a changed block. The kinds:

``sh``
    Run with ``bash -e -o pipefail`` from the repository root (``cwd=scratch``: from the
    document's scratch directory, where ``file=`` blocks were written), with ``.venv/bin`` first
    on ``PATH`` and the environment of the running stack (below). ``stdout-has=A,B``: the output
    must contain each word; ``timeout=SECONDS`` (default 120).
``sh long-running ready=api|model``
    README only: started once per test module by the ``stack`` fixture, checked to come up
    (``api``: ``GET /v1/runs`` answers; ``model``: the scripted model's ``GET /v1/models``)
    and stopped at the end. ``make run`` is given free ports through ``WATCHDOG_*_ADDRESS`` and a
    temporary ``WATCHDOG_STATE_DIR``, and its model endpoint is on (``WATCHDOG_MODEL_ADDRESS``,
    its upstreams the scripted model); ``docs/examples/scripted_model.py`` is given
    ``SCRIPTED_MODEL_PORT``. Every other block of every document runs against these two.
``sh dry-run``
    Each line is ``make TARGET...`` (a comment may follow): ``make -n TARGET`` must succeed.
    For targets that cannot run inside the tests (``make test`` runs this very test).
``sh env``
    ``export`` lines: run, and each exported address compared with the default it stands for
    (the sidecar's ``otlp_http_address`` / ``api_address``; ``OPENAI_BASE_URL``: the scripted
    model's ``http://127.0.0.1:8000/v1``, or the model endpoint's ``http://127.0.0.1:9478/v1``;
    ``ANTHROPIC_BASE_URL``: the model endpoint's ``http://127.0.0.1:9478``); later blocks get the
    same variables with the stack's ports.
``python [venv=NAME] [agent=NAME] [model=endpoint]``
    Run in ``.venvs/NAME`` (a framework venv: ``make .venvs/NAME/.installed``; the client comes
    from ``client/`` on ``PYTHONPATH``) or in ``.venv``. ``model=endpoint``: ``OPENAI_BASE_URL``
    and ``ANTHROPIC_BASE_URL`` point at the sidecar's model endpoint (default: the scripted
    model itself). Its ``# pip install ...`` comment lines
    are checked like a ``pip`` block. ``agent=NAME``: the agent's run must end
    ``tool_limit_reached`` with an answer, its tool calls the block's ``max_tool_calls`` and
    one model call more, and the program must print the scripted model's report.
``output``
    The expected stdout of the block before it. Text is compared line by line and word by word,
    ``…`` standing for any one word; a ``json`` block is compared as JSON, a string containing
    ``…`` matching any text in its place.
``pip [venv=NAME]``
    ``pip install`` lines: ``agent-watchdog-client[EXTRAS]`` must name extras of
    ``client/pyproject.toml`` and ``agent-watchdog-sidecar`` the root distribution; every other
    requirement, and every requirement of the named extras, must be installed in the venv the
    snippets of that venv run in. ``agent-watchdog`` (someone else's project) is refused.
``rule-pack file=NAME`` / ``rule-test file=NAME``
    Written to the scratch directory and checked by ``watchdog rules check`` / run by
    ``watchdog rules test``, which must pass.
``config``
    Loaded by the sidecar's configuration loader (``watchdog.shell.config.load``).
``helm-values [under=KEY] [release=NAME]``
    The chart (``helm/agent-watchdog``) rendered with these values (``under``: the values of
    the agent's chart, the watchdog's under that key); every ``X: {enabled: true}`` section
    must render its resource.
``sidecar-chart part=Chart.yaml|values.yaml|templates/deployment.yaml``
    README: the three parts of an agent's chart. Assembled into a real chart next to a copy of
    the watchdog chart (its comment lines in the template replaced by a Deployment), its
    dependency built and rendered: the Deployment gets the watchdog sidecar and the agent env.
    :func:`test_readme_states_the_lines_the_agents_chart_needs` counts their lines.
``otel-collector``
    An OpenTelemetry Collector configuration: every watchdog host it names must be a Service
    the chart renders in gateway mode (release ``watchdog``), on a port the Service has.
``json directive``
    The keys of the product's directive JSON (``Directive.to_json``), exactly.
``tree``
    A picture of the source tree, two spaces per level: each line's first names (up to two
    spaces and a comment) must exist under the parent above them, and every package under the
    first line's folder must be drawn (a new package cannot be left out of the picture).
``qwen-settings``
    Qwen Code's ``settings.json`` telemetry, as JSON: exactly what its tests run it with
    (``tests/frameworks/test_model_endpoint_qwen_code.py``'s ``telemetry``), the sidecar's
    default OTLP/HTTP address in place of the test's.
``gemini-env``
    Gemini CLI's telemetry settings, as ``export NAME=VALUE`` lines: exactly what its tests run
    it with (``tests/frameworks/test_gemini_cli_otel.py``'s ``telemetry``), the sidecar's
    default OTLP/HTTP address in place of the test's.
``opencode-config``
    opencode's ``opencode.json``, as JSON: exactly what its tests run it with
    (``tests/frameworks/test_model_endpoint_opencode.py``'s ``config``), the sidecar's default
    model endpoint (``http://127.0.0.1:9478/v1``) in place of the test's, its models
    ``gpt-4.1`` and ``gpt-4.1-mini``.
``crush-config``
    Crush's ``crush.json``, as JSON: exactly what its requests' tests run with
    (``tests/frameworks/test_model_endpoint_crush.py``'s ``config``, which its engine's agent
    reads), the sidecar's default model endpoint (``http://127.0.0.1:9478/v1``) in place of
    the test's, its models ``gpt-4.1`` and ``gpt-4.1-mini``.
``aider-command``
    Aider's command line, ``NAME=VALUE`` assignments then ``aider`` and its arguments: exactly
    what its tests point it at the sidecar with and run it with
    (``tests/frameworks/test_model_endpoint_aider.py``'s ``command``), the sidecar's default
    model endpoint with ``/agent/aider/`` in place of the test's, its models ``gpt-4.1`` and
    ``gpt-4.1-mini``.
``continue-config``
    The Continue CLI's ``config.yaml``, as YAML text: exactly what its tests run it with
    (``tests/frameworks/test_model_endpoint_continue_cli.py``'s ``config``), the sidecar's
    default model endpoint (``http://127.0.0.1:9478/v1``) in place of the test's, its model
    ``gpt-4.1``.
``cline-settings``
    A file of the Cline CLI's ``~/.cline/data/settings/``, as JSON (``file=``: its name):
    exactly what its tests write (``tests/frameworks/test_model_endpoint_cline.py``'s
    ``providers`` and ``GLOBAL_SETTINGS``), the sidecar's default model endpoint
    (``http://127.0.0.1:9478/v1``) in place of the test's, its model ``gpt-4.1``, its key
    ``YOUR_API_KEY``.
``pi-models``
    pi's ``~/.pi/agent/models.json``, as JSON: exactly what its tests write
    (``tests/frameworks/test_model_endpoint_pi.py``'s ``models_json``), the sidecar's default
    model endpoint (``http://127.0.0.1:9478``) in place of the test's, its models ``gpt-4.1``
    and ``claude-sonnet-4-5``.
``langchaingo-env``
    What points LangChainGo at the sidecar, ``NAME=VALUE`` lines: exactly what its tests set
    (``tests/frameworks/test_langchaingo.py``'s ``pointed``), the sidecar's default model
    endpoint in place of the test's, the agent ``langchaingo``.
``langchain-rust-env``
    What points langchain-rust's ``OpenAI::default()`` at the sidecar, ``NAME=VALUE`` lines:
    exactly what its tests set (``tests/frameworks/test_model_endpoint_langchain_rust.py``'s
    ``pointed``), the sidecar's default model endpoint in place of the test's, the agent
    ``langchain-rust``.
``eino-config``
    What points Eino's OpenAI ``ChatModel`` (eino-ext's) at the sidecar, in Go: exactly the
    lines its tests' agent runs (``tests/frameworks/go/eino/main.go``, whitespace aside), its
    ``BaseURL`` read from ``OPENAI_BASE_URL`` there and written out here: ``test_eino.py``'s
    ``pointed`` of the sidecar's default model endpoint, the agent ``eino``.
``llamaindex-ts-config``
    What points a LlamaIndex.TS agent's LLM (``@llamaindex/openai``'s ``openai()``) at the
    sidecar, in TypeScript: exactly the lines its tests' agent runs
    (``tests/frameworks/ts/llamaindex/endpoint.ts``, whitespace aside), its ``baseURL`` read
    from ``AGENT_LLM_BASE_URL`` there and written out here: ``test_llamaindex_ts.py``'s
    ``pointed`` of the sidecar's default model endpoint, the agent ``llamaindex``.
``strands-ts-config``
    What points a Strands for TypeScript agent's model (``OpenAIModel``) at the sidecar, in
    TypeScript: exactly the lines its tests' agent runs (``tests/frameworks/ts/strands/agent.ts``,
    whitespace aside), its ``baseURL`` read from ``AGENT_LLM_BASE_URL`` there and written out
    here: ``test_strands_ts.py``'s ``pointed`` of the sidecar's default model endpoint, the agent
    ``strands-ts``.
``fast-agent-config``
    fast-agent's ``fastagent.config.yaml``: exactly what its tests write
    (``tests/frameworks/test_model_endpoint_fast_agent.py``'s ``config``) for its OpenAI
    provider, the sidecar's default model endpoint, the agent ``fast-agent``, the model
    ``gpt-4.1-mini``, its MCP server ``python files_server.py``.
``mcp-agent-config``
    mcp-agent's ``mcp_agent.config.yaml``: exactly what its tests write
    (``tests/frameworks/test_model_endpoint_fast_agent.py``'s ``mcp_agent_config``), the
    sidecar's default model endpoint, the agent ``mcp-agent``, the model ``gpt-4.1-mini``, its
    MCP server ``python files_server.py``.
``kaibanjs-config``
    What points a KaibanJS agent at the sidecar, in TypeScript: exactly the lines its tests'
    agent runs (``tests/frameworks/ts/kaibanjs/agent.ts``, whitespace aside), its
    ``llmConfig.apiBaseUrl`` read from ``AGENT_LLM_BASE_URL`` there and written out here:
    ``test_kaibanjs.py``'s ``pointed`` of the sidecar's default model endpoint, the agent
    ``kaibanjs``.
``agentkit-config``
    What points an Inngest AgentKit model at the sidecar, in TypeScript: exactly the lines its
    tests' agent runs (``tests/frameworks/ts/agentkit/agent.ts``, whitespace aside), its
    ``baseUrl`` read from ``AGENT_LLM_BASE_URL`` there and written out here: ``pointed`` of the
    sidecar's default model endpoint, the agent ``agentkit``.
``tiny-agents-config``
    A tiny-agents ``agent.json`` (JSON): exactly what its tests write
    (``tests/frameworks/test_tiny_agents.py``'s ``agent_json``), its ``endpointUrl`` the
    sidecar's default model endpoint with ``/agent/tiny-agents/``, its model ``gpt-4.1``, its
    MCP filesystem server on ``/home/me/project``.
``gptme-command``
    gptme's command line, ``NAME=VALUE`` assignments then ``gptme``, its arguments and the
    task: exactly what its tests point it at the sidecar with and run it with
    (``tests/frameworks/test_model_endpoint_gptme.py``'s ``command``), the sidecar's default
    model endpoint with ``/agent/gptme/`` in place of the test's, its model ``gpt-4.1``.
``llm-config``
    The ``llm`` CLI's ``extra-openai-models.yaml``, as YAML: exactly what its tests run it
    with (``tests/frameworks/test_model_endpoint_llm_cli.py``'s ``models``), the sidecar's
    default model endpoint with ``/agent/llm/`` in place of the test's, its model ``gpt-4.1``.
``open-interpreter-settings``
    Open Interpreter's settings in Python, ``from interpreter import interpreter`` then
    ``interpreter.NAME = VALUE`` lines: exactly what its tests set
    (``tests/frameworks/test_model_endpoint_open_interpreter.py``'s ``settings``), the
    sidecar's default model endpoint with ``/agent/open-interpreter/`` in place of the test's,
    its model ``gpt-4.1``.
``langroid-config``
    Langroid's settings in Python, ``import langroid as lr`` and ``import
    langroid.language_models as lm``, then ``llm = lm.OpenAIGPTConfig(...)`` and ``config =
    lr.ChatAgentConfig(llm=llm, ...)``, their keyword arguments literals: exactly what its tests
    set (``tests/frameworks/test_model_endpoint_langroid.py``'s ``settings``), the sidecar's
    default model endpoint with ``/agent/langroid/`` in place of the test's, its model
    ``gpt-4.1``.
``qwen-agent-config``
    Qwen-Agent's model in Python, ``import os`` and ``from qwen_agent.agents import
    Assistant``, then ``llm_cfg = {...}`` (its ``api_key`` ``os.environ[...]``, the rest
    literals) and ``agent = Assistant(llm=llm_cfg, ...)``: ``llm_cfg`` exactly what its tests
    set in text mode (``tests/frameworks/test_model_endpoint_qwen_agent.py``'s ``llm_cfg``), the
    sidecar's default model endpoint with ``/agent/qwen-agent/`` in place of the test's, its
    model ``qwen3-32b``.
``praisonai-env``
    PraisonAI Agents' environment, ``NAME=VALUE`` lines: exactly what its tests set
    (``tests/frameworks/test_model_endpoint_praisonai.py``'s ``pointed``), the sidecar's
    default model endpoint, the agent ``praisonai``.
``swarms-env``
    swarms' environment, ``NAME=VALUE`` lines: exactly what its tests set
    (``tests/frameworks/test_model_endpoint_swarms.py``'s ``pointed``), the sidecar's default
    model endpoint, the agent ``swarms``.
``aisuite-config``
    aisuite's client in Python, ``import aisuite as ai`` then ``client = ai.Client(<provider
    configs>)``: the configs exactly what its tests give (``tests/frameworks/
    test_model_endpoint_aisuite.py``'s ``provider_configs``), the sidecar's default model
    endpoint, the agent ``aisuite``.
``instructor-env``
    instructor's and Atomic Agents' environment, ``NAME=VALUE`` lines: exactly what their tests
    set (``tests/frameworks/test_model_endpoint_instructor.py``'s ``pointed``), the sidecar's
    default model endpoint, the agent ``instructor``.
``magentic-env``, ``mirascope-env``
    magentic's and Mirascope's environment, ``NAME=VALUE`` lines: exactly what their tests set
    (``tests/frameworks/test_model_endpoint_decorators.py``'s ``pointed``), the sidecar's
    default model endpoint, the agent ``magentic`` (its model ``gpt-4.1``) or ``mirascope``.
``agentscope-config``
    AgentScope's model in Python, ``import os``, its imports of ``OpenAICredential`` and
    ``OpenAIChatModel``, then ``credential = OpenAICredential(api_key=os.environ[...], ...)``
    and ``model = OpenAIChatModel(credential=credential, ...)``, the other keyword arguments
    literals: exactly what its tests set (``tests/frameworks/test_model_endpoint_agentscope.py``'s
    ``settings``), the sidecar's default model endpoint with ``/agent/agentscope/`` in place of
    the test's, its model ``gpt-4.1``.
``camel-config``
    CAMEL-AI's model in Python, ``import os``, its imports of ``ModelFactory`` and
    ``ModelPlatformType``, then ``model = ModelFactory.create(...)`` on
    ``ModelPlatformType.OPENAI_COMPATIBLE_MODEL`` with ``api_key=os.environ[...]``, the other
    keyword arguments literals: exactly what its tests set
    (``tests/frameworks/test_model_endpoint_camel.py``'s ``settings``), the sidecar's default
    model endpoint with ``/agent/camel/`` in place of the test's, its model ``gpt-4.1``.
``codex-config``
    The OpenAI Codex CLI's ``config.toml`` (TOML): a model provider it selects must be the
    sidecar's model endpoint (``base_url`` ``http://127.0.0.1:9478/v1``) on the Responses API
    with its key from the environment (``env_key``); its ``[otel]`` exporters must be OTLP/HTTP
    to the sidecar's default ``otlp_http_address``, ``/v1/logs`` and ``/v1/traces``.
``startup-error port=N``
    ``watchdog serve`` with that port taken by another socket (any free port standing for N)
    must exit 2 with exactly this line on stderr.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import io
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import http_request, wait_until
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = ROOT / ".venv" / "bin"
CHART = ROOT / "helm" / "agent-watchdog"
README = ROOT / "README.md"
DOCUMENTS = [README, ROOT / "client" / "README.md", CHART / "README.md",
             *sorted((ROOT / "docs").rglob("*.md"))]
SCRIPTED_MODEL_DEFAULT_PORT = 8000
MODEL_ENDPOINT_DEFAULT = "127.0.0.1:9478"  # the address the docs give model_address
READY_TIMEOUT = 300.0  # `make run` may (re)install the sidecar into .venv first

MARKER = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)\s*$")
KINDS = {"sh", "python", "output", "pip", "rule-pack", "rule-test", "config", "helm-values",
         "sidecar-chart", "otel-collector", "json", "startup-error", "tree", "qwen-settings",
         "gemini-env", "codex-config", "promql", "opencode-config", "aider-command",
         "crush-config", "continue-config", "cline-settings", "pi-models",
         "langchaingo-env", "eino-config", "open-interpreter-settings", "langroid-config",
         "agentscope-config", "llamaindex-ts-config", "camel-config", "praisonai-env",
         "instructor-env", "strands-ts-config", "tiny-agents-config", "qwen-agent-config",
         "gptme-command", "llm-config", "kaibanjs-config",
         "langchain-rust-env", "magentic-env", "mirascope-env", "agentkit-config",
         "fast-agent-config", "mcp-agent-config", "swarms-env", "aisuite-config"}
RUNNABLE = {"sh", "python"}
SHELLS = {"sh", "bash", "shell", "console"}


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, from 1
    lang: str
    text: str
    kind: str | None
    options: dict[str, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    end: int = 0  # the line of the closing fence, from 1

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def parse(path: Path) -> list[Block]:
    lines = path.read_text("utf-8").split("\n")
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        ticks, lang = opening.groups()
        end = index + 1
        while end < len(lines) and not closes(lines[end], ticks):
            end += 1
        assert end < len(lines), f"{path}:{index + 1}: unclosed fence"
        marker = MARKER.match(lines[index - 1]) if index else None
        kind: str | None
        options: dict[str, str] = {}
        flags: set[str] = set()
        if marker:
            words = marker.group(1).split()
            kind = words[0] if words else None
            for word in words[1:]:
                key, sep, value = word.partition("=")
                if sep:
                    options[key] = value
                else:
                    flags.add(word)
        elif lang in SHELLS:
            kind = "sh"
        elif lang == "python":
            kind = "python"
        else:
            kind = None
        found.append(Block(path, index + 1, lang, "\n".join(lines[index + 1:end]) + "\n",
                           kind, options, flags, end + 1))
        index = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for path in DOCUMENTS for block in parse(path)]


# -- the running stack: the README's `make run` and scripted model ------------------------------


@dataclass
class Stack:
    api: str
    otlp_http: str
    model_base_url: str
    model_endpoint: str  # the sidecar's model endpoint, http://host:port (no /v1)
    state_dir: Path
    started: list[str]  # the long-running blocks' texts, as started

    def env(self, extra: dict[str, str] | None = None, endpoint: bool = False
            ) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("OTEL_", "WATCHDOG_", "OPENAI_", "ANTHROPIC_", "PYTHON"))}
        env.update({
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "WATCHDOG_URL": self.api,
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.otlp_http,
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "OPENAI_BASE_URL": self.model_base_url,
            "ANTHROPIC_BASE_URL": self.model_base_url.removesuffix("/v1"),
            "OPENAI_API_KEY": "no-key-needed",
            "ANTHROPIC_API_KEY": "no-key-needed",
            "OPENAI_AGENTS_DONT_LOG_MODEL_DATA": "1",
            "PYTHONPATH": str(ROOT / "client"),
        })
        env.update(extra or {})
        if endpoint:
            env.update(OPENAI_BASE_URL=self.model_endpoint + "/v1",
                       ANTHROPIC_BASE_URL=self.model_endpoint)
        return env


def _long_running() -> dict[str, Block]:
    blocks = [b for b in parse(README) if b.kind == "sh" and "long-running" in b.flags]
    by_ready = {b.options.get("ready", ""): b for b in blocks}
    assert set(by_ready) == {"api", "model"} and len(blocks) == 2, (
        "README needs exactly two long-running blocks: ready=api (the sidecar) and ready=model")
    return by_ready


def _answers(url: str) -> bool:
    try:
        status, _ = http_request("GET", url, timeout=2)
    except OSError:
        return False
    return status == 200


def _start(text: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(["bash", "-e", "-c", text], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    blocks = _long_running()
    work = tmp_path_factory.mktemp("stack")
    ports = {name: free_port() for name in ("otlp_grpc", "otlp_http", "api", "metrics")}
    model_port, endpoint_port = free_port(), free_port()
    scripted = f"http://127.0.0.1:{model_port}"
    base = {key: value for key, value in os.environ.items()
            if not key.startswith(("WATCHDOG_", "OTEL_"))}
    sidecar_env = dict(base, **{f"WATCHDOG_{name.upper()}_ADDRESS": f"127.0.0.1:{port}"
                                for name, port in ports.items()},
                       WATCHDOG_STATE_DIR=str(work / "state"), STATE_DIR=str(work / "state"),
                       WATCHDOG_MODEL_ADDRESS=f"127.0.0.1:{endpoint_port}",
                       WATCHDOG_MODEL_UPSTREAM=scripted + "/v1",
                       WATCHDOG_MODEL_UPSTREAM_ANTHROPIC=scripted)
    model_env = dict(base, SCRIPTED_MODEL_PORT=str(model_port))
    stack = Stack(api=f"http://127.0.0.1:{ports['api']}",
                  otlp_http=f"http://127.0.0.1:{ports['otlp_http']}",
                  model_base_url=scripted + "/v1",
                  model_endpoint=f"http://127.0.0.1:{endpoint_port}", state_dir=work / "state",
                  started=[])
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for ready, env, url in (("api", sidecar_env, stack.api + "/v1/runs"),
                                ("model", model_env, stack.model_base_url + "/models")):
            log = work / f"{ready}.log"
            process = _start(blocks[ready].text, env, log)
            processes.append((process, log))

            def up(process: subprocess.Popen[bytes] = process, url: str = url,
                   log: Path = log, where: str = blocks[ready].where) -> bool:
                assert process.poll() is None, (
                    f"{where} exited: {log.read_text(errors='replace')[-3000:]}")
                return _answers(url)

            wait_until(up, what=f"{blocks[ready].where} to come up", timeout=READY_TIMEOUT)
            stack.started.append(blocks[ready].text)
        # the model endpoint passes /v1/models through to the scripted model
        wait_until(lambda: _answers(stack.model_endpoint + "/v1/models"),
                   what="the sidecar's model endpoint to reach the scripted model")
        yield stack
    finally:
        for process, _ in reversed(processes):
            _stop(process)


# -- checks per kind ------------------------------------------------------------------------------


@dataclass
class DocState:
    scratch: Path
    env_extra: dict[str, str] = field(default_factory=dict)
    last_stdout: str | None = None
    last_where: str = ""
    chart_parts: dict[str, str] = field(default_factory=dict)


def venv_python(block: Block) -> Path:
    name = block.options.get("venv")
    python = (ROOT / ".venvs" / name / "bin" / "python") if name else VENV_BIN / "python"
    assert python.exists(), (f"{block.where}: {python} is missing: "
                             f"make .venvs/{name}/.installed" if name else "make .venv")
    return python


def check_sh(block: Block, stack: Stack, state: DocState) -> None:
    if "long-running" in block.flags:
        assert block.path == README and block.text in stack.started, (
            f"{block.where}: a long-running block is started by the stack fixture, README only")
        state.last_stdout = None
        return
    if "dry-run" in block.flags:
        for line in block.text.splitlines():
            command = line.split("#", 1)[0].split()
            if not command:
                continue
            assert command[0] == "make", f"{block.where}: dry-run takes `make TARGET` lines"
            result = subprocess.run(["make", "-n", *command[1:]], cwd=ROOT, capture_output=True,
                                    text=True, timeout=60)
            assert result.returncode == 0, (block.where, result.stderr[-2000:])
        return
    if "env" in block.flags:
        check_env(block, stack, state)
        return
    cwd = state.scratch if block.options.get("cwd") == "scratch" else ROOT
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=cwd,
                            env=stack.env(state.env_extra), capture_output=True, text=True,
                            timeout=float(block.options.get("timeout", "120")))
    assert result.returncode == 0, (block.where, result.stdout[-3000:], result.stderr[-3000:])
    for word in filter(None, block.options.get("stdout-has", "").split(",")):
        assert word in result.stdout, (block.where, word, result.stdout[-3000:])
    state.last_stdout, state.last_where = result.stdout, block.where


def check_env(block: Block, stack: Stack, state: DocState) -> None:
    from watchdog.shell.config import Config

    defaults = Config()
    result = subprocess.run(["bash", "-e", "-c", block.text + "\nenv -0"], capture_output=True,
                            text=True, timeout=30, env={"PATH": os.environ.get("PATH", "")})
    assert result.returncode == 0, (block.where, result.stderr)
    exported = dict(item.split("=", 1) for item in result.stdout.split("\0") if "=" in item)
    names = re.findall(r"\b([A-Z][A-Z0-9_]*)=", block.text)
    assert names, f"{block.where}: an env block exports variables"
    stands_for = {
        ("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://{defaults.otlp_http_address}"): stack.otlp_http,
        ("WATCHDOG_URL", f"http://{defaults.api_address}"): stack.api,
        ("OPENAI_BASE_URL", f"http://127.0.0.1:{SCRIPTED_MODEL_DEFAULT_PORT}/v1"):
            stack.model_base_url,
        ("OPENAI_BASE_URL", f"http://{MODEL_ENDPOINT_DEFAULT}/v1"): stack.model_endpoint + "/v1",
        ("ANTHROPIC_BASE_URL", f"http://{MODEL_ENDPOINT_DEFAULT}"): stack.model_endpoint,
    }
    addresses = {name for name, _ in stands_for}
    for name in names:
        value = exported[name]
        if name in addresses:
            assert (name, value) in stands_for, (
                block.where, name, value, [d for n, d in stands_for if n == name])
            state.env_extra[name] = stands_for[(name, value)]
        else:
            state.env_extra[name] = value


def check_python(block: Block, stack: Stack, state: DocState) -> None:
    python = venv_python(block)
    for line in block.text.splitlines():
        if line.startswith("# pip install "):
            check_pip_line(block, line[2:])
    script = state.scratch / f"snippet_{block.line}.py"
    script.write_text(block.text)
    endpoint = block.options.get("model") == "endpoint"
    result = subprocess.run([str(python), str(script)], cwd=state.scratch,
                            env=stack.env(state.env_extra, endpoint=endpoint),
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, (block.where, result.stdout[-3000:], result.stderr[-4000:])
    state.last_stdout, state.last_where = result.stdout, block.where
    agent = block.options.get("agent")
    if agent:
        check_agent_run(block, stack, agent, result.stdout)


def check_agent_run(block: Block, stack: Stack, agent: str, stdout: str) -> None:
    sys.path.insert(0, str(ROOT / "docs" / "examples"))
    try:
        import scripted_model
    finally:
        sys.path.remove(str(ROOT / "docs" / "examples"))
    assert stdout.strip().splitlines()[-1] == scripted_model.REPORT, (block.where, stdout)
    budget = re.search(r"max_tool_calls=(\d+)", block.text)
    assert budget, f"{block.where}: an agent block announces max_tool_calls"

    def ended() -> list[dict[str, Any]] | None:
        status, body = http_request("GET", f"{stack.api}/v1/runs?agent={agent}&state=ended")
        runs: list[dict[str, Any]] = json.loads(body)["runs"] if status == 200 else []
        return runs or None

    runs = wait_until(ended, what=f"{block.where}: the run of {agent} to end")
    assert runs is not None and len(runs) == 1, (block.where, runs)
    run = runs[0]
    tools = int(budget.group(1))
    assert run["terminal_state"] == "tool_limit_reached" and run["has_final_answer"], (
        block.where, run)
    assert run["tool_calls"] == tools and run["iterations"] == tools + 1, (block.where, run)


def words_match(expected: str, actual: str) -> bool:
    if "…" not in expected:
        return expected == actual
    pattern = ".*".join(re.escape(part) for part in expected.split("…"))
    return re.fullmatch(pattern, actual, re.S) is not None


def json_match(expected: Any, actual: Any) -> bool:
    if isinstance(expected, dict):
        return (isinstance(actual, dict) and set(expected) == set(actual)
                and all(json_match(expected[key], actual[key]) for key in expected))
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(expected) == len(actual)
                and all(json_match(e, a) for e, a in zip(expected, actual, strict=True)))
    if isinstance(expected, str) and isinstance(actual, str):
        return words_match(expected, actual)
    return bool(expected == actual and type(expected) is type(actual))


def check_output(block: Block, stack: Stack, state: DocState) -> None:
    assert state.last_stdout is not None, (
        f"{block.where}: an output block follows a block that was run")
    actual = state.last_stdout
    if block.lang == "json":
        assert json_match(json.loads(block.text), json.loads(actual)), (
            block.where, state.last_where, actual)
    else:
        expected_lines = block.text.rstrip("\n").splitlines()
        actual_lines = actual.rstrip("\n").splitlines()
        assert len(expected_lines) == len(actual_lines), (block.where, actual)
        for want, got in zip(expected_lines, actual_lines, strict=True):
            want_words, got_words = want.split(), got.split()
            assert len(want_words) == len(got_words) and all(
                words_match(w, g) for w, g in zip(want_words, got_words, strict=True)), (
                block.where, want, got)
    state.last_stdout = None


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(python: Path, names: list[str]) -> dict[str, bool]:
    code = ("import importlib.metadata as m, json, sys\n"
            "def has(n):\n"
            "    try:\n        m.version(n); return True\n"
            "    except m.PackageNotFoundError:\n        return False\n"
            "print(json.dumps({n: has(n) for n in sys.argv[1:]}))")
    result = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    found: dict[str, bool] = json.loads(result.stdout)
    return found


def pip_line_requirements(block: Block, line: str) -> list[str]:
    """What a ``pip install`` line installs: its requirements, with the client's dependencies
    and those of the client extras it names (the client's own name last)."""
    from packaging.requirements import Requirement

    words = shlex.split(line.split(" #", 1)[0])
    assert words[:2] == ["pip", "install"], f"{block.where}: {line!r} is no `pip install` line"
    client = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    sidecar = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed: list[str] = []
    for word in words[2:]:
        assert not word.startswith("-"), f"{block.where}: no pip options in snippets ({word})"
        requirement = Requirement(word)
        name = _canonical(requirement.name)
        assert name != "agent-watchdog", (
            f"{block.where}: agent-watchdog on PyPI is someone else's project")
        if name == _canonical(client["name"]):
            extras = client["optional-dependencies"]
            unknown = requirement.extras - set(extras)
            assert not unknown, f"{block.where}: the client has no extras {sorted(unknown)}"
            needed += [*client["dependencies"],
                       *(dep for extra in requirement.extras for dep in extras[extra])]
            needed.append(client["name"])
        elif name == _canonical(sidecar["name"]):
            unknown = requirement.extras - set(sidecar.get("optional-dependencies", {}))
            assert not unknown, f"{block.where}: the sidecar has no extras {sorted(unknown)}"
        else:
            needed.append(word)
    return needed


FRAMEWORK_ENVS = ROOT / "tests" / "frameworks" / "envs"


def venv_list_not_installed(venv: str, needed: list[str]) -> list[str]:
    """What the list of the venv a snippet runs in (``tests/frameworks/envs/VENV.txt``) asks
    for that ``needed`` (a pip line's requirements) would not install as pasted into a fresh
    venv: a distribution or extra it does not name, or the specifier of one that keeps out the
    newest release (``<``, ``<=``, ``==``, ``~=``, ``!=``, ``===``), whole (its lower bound may
    be what lets pip take a pre-release), when it does not carry it: pip would pick another
    version than the one the snippet was run with. A lower bound alone is not asked for."""
    from packaging.requirements import Requirement

    given: dict[str, tuple[set[str], set[str]]] = {}  # name: (extras, clauses)
    for text in needed:
        requirement = Requirement(text)
        extras, clauses = given.setdefault(_canonical(requirement.name), (set(), set()))
        extras |= requirement.extras
        clauses |= {str(spec) for spec in requirement.specifier}
    missing = []
    for raw in (FRAMEWORK_ENVS / f"{venv}.txt").read_text("utf-8").splitlines():
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        requirement = Requirement(text)
        extras, clauses = given.get(_canonical(requirement.name), (set(), set()))
        upper = any(spec.operator not in (">=", ">") for spec in requirement.specifier)
        binding = {str(spec) for spec in requirement.specifier} if upper else set()
        if (_canonical(requirement.name) not in given or requirement.extras - extras
                or binding - clauses):
            missing.append(text)
    return missing


def check_pip_line(block: Block, line: str) -> None:
    from packaging.requirements import Requirement

    needed = pip_line_requirements(block, line)
    client = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    venv = block.options.get("venv")
    if venv:
        unlisted = venv_list_not_installed(venv, needed)
        assert not unlisted, (f"{block.where}: the venv {venv} the snippet runs in has "
                              f"{unlisted}, which {line!r} does not install as pasted")
    names = sorted({Requirement(dep).name for dep in needed})
    if venv and _canonical(client["name"]) in map(_canonical, names):
        # a framework venv gets the client from client/ on PYTHONPATH, as the tests run it
        names = [n for n in names if _canonical(n) != _canonical(client["name"])]
    missing = [name for name, ok in _installed(venv_python(block), names).items() if not ok]
    assert not missing, f"{block.where}: not installed where the snippets run: {missing}"


def check_pip(block: Block, stack: Stack, state: DocState) -> None:
    lines = [line for line in block.text.splitlines() if line.strip()
             and not line.lstrip().startswith("#")]
    assert lines, f"{block.where}: an empty pip block"
    for line in lines:
        check_pip_line(block, line)


def _write(block: Block, state: DocState) -> Path:
    name = block.options.get("file")
    assert name and "/" not in name, f"{block.where}: file=NAME is required"
    path = state.scratch / name
    path.write_text(block.text)
    return path


def _watchdog(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "watchdog"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def check_rule_pack(block: Block, stack: Stack, state: DocState) -> None:
    path = _write(block, state)
    result = _watchdog("rules", "check", path.name, cwd=state.scratch)
    assert result.returncode == 0, (block.where, result.stdout, result.stderr)


def check_rule_test(block: Block, stack: Stack, state: DocState) -> None:
    path = _write(block, state)
    result = _watchdog("rules", "test", path.name, cwd=state.scratch)
    assert result.returncode == 0 and "passed — ok" in result.stdout, (
        block.where, result.stdout, result.stderr)


def check_config(block: Block, stack: Stack, state: DocState) -> None:
    from watchdog.shell.config import load

    path = state.scratch / "watchdog.yaml"
    path.write_text(block.text)
    load(str(path), env={})


def _render(values: dict[str, Any] | None, release: str = "watchdog") -> list[dict[str, Any]]:
    import helm_python as helm

    with helm.Chart.load(CHART) as chart:
        files = chart.render(copy.deepcopy(values), name=release, namespace="agents")
    return [doc for path, text in sorted(files.items()) if not path.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text) if doc]


ENABLED_KIND = {"podMonitor": "PodMonitor", "serviceMonitor": "ServiceMonitor",
                "prometheusRule": "PrometheusRule", "dashboards": "ConfigMap"}


def check_helm_values(block: Block, stack: Stack, state: DocState) -> None:
    values = yaml.safe_load(block.text)
    assert isinstance(values, dict), f"{block.where}: values are a mapping"
    under = block.options.get("under")
    if under:
        assert set(values) == {under}, f"{block.where}: the values of the agent's chart"
        values = values[under]
    manifests = _render(values, block.options.get("release", "watchdog"))
    assert manifests, block.where
    kinds = {manifest["kind"] for manifest in manifests}
    for key, kind in ENABLED_KIND.items():
        if isinstance(values.get(key), dict) and values[key].get("enabled"):
            assert kind in kinds, (block.where, key, sorted(kinds))


CHART_PARTS = ("Chart.yaml", "values.yaml", "templates/deployment.yaml")
AGENT_DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  selector:
    matchLabels: {app: my-agent}
  template:
    metadata:
      labels: {app: my-agent}
    spec:
      containers:
        - name: agent
          image: registry.example.com/my-agent:1.0.0
"""


def check_sidecar_chart(block: Block, stack: Stack, state: DocState) -> None:
    import helm_python as helm

    part = block.options.get("part", "")
    assert part in CHART_PARTS and part not in state.chart_parts, (block.where, part)
    state.chart_parts[part] = block.text
    if len(state.chart_parts) < len(CHART_PARTS):
        return
    work = state.scratch / "charts"
    shutil.copytree(CHART, work / "agent-watchdog")
    agent = work / "my-agent"
    (agent / "templates").mkdir(parents=True)
    (agent / "Chart.yaml").write_text("apiVersion: v2\nname: my-agent\nversion: 1.0.0\n"
                                      + state.chart_parts["Chart.yaml"])
    (agent / "values.yaml").write_text(state.chart_parts["values.yaml"])
    template = "".join(AGENT_DEPLOYMENT if line.lstrip().startswith("#") else line + "\n"
                       for line in state.chart_parts["templates/deployment.yaml"].splitlines())
    (agent / "templates" / "deployment.yaml").write_text(template)
    helm.dependency_update(agent, skip_refresh=True)
    with helm.Chart.load(agent) as chart:
        files = chart.render(None, name="my-agent", namespace="agents")
    manifests = [doc for path, text in files.items() if not path.endswith("NOTES.txt")
                 for doc in yaml.safe_load_all(text) if doc]
    deployment = next(m for m in manifests if m["kind"] == "Deployment"
                      and m["metadata"]["name"] == "my-agent")
    pod = deployment["spec"]["template"]["spec"]
    images = [c["image"] for c in pod.get("initContainers", [])]
    assert any(image.startswith("REGISTRY/agent-watchdog-sidecar:") for image in images), images
    env = {e["name"] for e in pod["containers"][0].get("env", [])}
    stated = re.search(r"agent containers get ([^.]*)\.", README.read_text("utf-8"))
    assert stated, "README: which variables the agent containers get"
    assert env == set(re.findall(r"`(\w+)`", stated.group(1))), (block.where, sorted(env))


def check_otel_collector(block: Block, stack: Stack, state: DocState) -> None:
    config = yaml.safe_load(block.text)
    assert isinstance(config, dict) and config.get("exporters"), block.where
    services = {m["metadata"]["name"]: {p["port"] for p in m["spec"]["ports"]}
                for m in _render({"mode": "gateway", "auth": {"token": "t" * 32}})
                if m["kind"] == "Service"}
    hosts = re.findall(r"(watchdog-agent-watchdog[\w.-]*?)(?:\.NAMESPACE[\w.]*)?[\s:,]+(?:port: )?"
                       r"\"?(\d+)", block.text)  # (a port may be quoted: the DNS resolver's)
    assert hosts, f"{block.where}: names no watchdog host"
    for host, port in hosts:
        assert host in services and int(port) in services[host], (block.where, host, services)


def check_codex_config(block: Block, stack: Stack, state: DocState) -> None:
    from watchdog.shell.config import Config

    config = tomllib.loads(block.text)
    providers = config.get("model_providers", {})
    chosen = config.get("model_provider")
    assert chosen or config.get("otel"), f"{block.where}: neither a model provider nor [otel]"
    if chosen is not None:
        provider = providers.get(chosen)
        assert provider is not None, f"{block.where}: model_provider {chosen!r} is not defined"
        assert provider.get("base_url") == f"http://{MODEL_ENDPOINT_DEFAULT}/v1", block.where
        assert provider.get("wire_api") == "responses" and provider.get("env_key"), block.where
    otlp = f"http://{Config().otlp_http_address}"
    for key, path in (("exporter", "/v1/logs"), ("trace_exporter", "/v1/traces")):
        exporter = config.get("otel", {}).get(key)
        if exporter is None:
            continue
        http = exporter.get("otlp-http")
        assert isinstance(http, dict), f"{block.where}: otel.{key} is no otlp-http exporter"
        assert http.get("endpoint") == otlp + path, (block.where, key, http)
        assert http.get("protocol") in ("binary", "json"), (block.where, key, http)


def check_json(block: Block, stack: Stack, state: DocState) -> None:
    from watchdog.core.directives.model import Directive

    assert block.flags == {"directive"}, f"{block.where}: json blocks: `json directive`"
    shown = json.loads(block.text)
    values: dict[str, Any] = {f.name: None for f in dataclasses.fields(Directive)}
    values.update(created_at=0.0, escalation=False, budget={})
    product = Directive(**values).to_json()
    assert set(shown) == set(product), (block.where, sorted(set(shown) ^ set(product)))


def check_qwen_settings(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_qwen_code import telemetry

    assert json.loads(block.text) == telemetry("http://127.0.0.1:4318"), block.where


def check_gemini_env(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_gemini_cli_otel import telemetry

    shown = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1)
                 for line in block.text.splitlines() if line.strip())
    assert all(line.startswith("export ") for line in block.text.splitlines() if line.strip()), (
        block.where)
    assert shown == telemetry("http://127.0.0.1:4318"), block.where


def check_opencode_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_opencode import config

    assert json.loads(block.text) == config(f"http://{MODEL_ENDPOINT_DEFAULT}/v1", "gpt-4.1",
                                            "gpt-4.1-mini"), block.where


def check_aider_command(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_aider import command

    words = shlex.split(block.text)
    at = words.index("aider") if "aider" in words else len(words)
    shown = dict(word.split("=", 1) for word in words[:at])
    assert (shown, words[at + 1:]) == command(
        f"http://{MODEL_ENDPOINT_DEFAULT}/agent/aider/v1", "gpt-4.1", "gpt-4.1-mini"), \
        block.where


def check_gptme_command(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_gptme import command

    words = shlex.split(block.text)
    at = words.index("gptme") if "gptme" in words else len(words)
    shown = dict(word.split("=", 1) for word in words[:at])
    assert (shown, words[at + 1:-1]) == command(
        f"http://{MODEL_ENDPOINT_DEFAULT}/agent/gptme/v1", "gpt-4.1"), block.where


def check_llm_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_llm_cli import models

    assert yaml.safe_load(block.text) == models(
        f"http://{MODEL_ENDPOINT_DEFAULT}/agent/llm/v1", "gpt-4.1"), block.where


def check_langchaingo_env(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_langchaingo import pointed

    shown = dict(line.split("=", 1) for line in block.text.split("\n") if line.strip())
    assert shown == pointed(f"http://{MODEL_ENDPOINT_DEFAULT}", "langchaingo"), block.where


def check_langchain_rust_env(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_langchain_rust import pointed

    shown = dict(line.split("=", 1) for line in block.text.split("\n") if line.strip())
    assert shown == pointed(f"http://{MODEL_ENDPOINT_DEFAULT}", "langchain-rust"), block.where


def check_praisonai_env(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_praisonai import pointed

    shown = dict(line.split("=", 1) for line in block.text.split("\n") if line.strip())
    assert shown == pointed(f"http://{MODEL_ENDPOINT_DEFAULT}", "praisonai"), block.where


def check_swarms_env(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_swarms import pointed

    shown = dict(line.split("=", 1) for line in block.text.split("\n") if line.strip())
    assert shown == pointed(f"http://{MODEL_ENDPOINT_DEFAULT}", "swarms"), block.where


def check_aisuite_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_aisuite import provider_configs

    *imports, line = ast.parse(block.text).body
    assert [ast.unparse(statement) for statement in imports] == ["import aisuite as ai"], \
        block.where
    assert isinstance(line, ast.Assign) and isinstance(line.value, ast.Call), block.where
    assert [ast.unparse(target) for target in line.targets] == ["client"], block.where
    assert ast.unparse(line.value.func) == "ai.Client" and not line.value.keywords, block.where
    [configs] = line.value.args
    assert ast.literal_eval(configs) == provider_configs(
        f"http://{MODEL_ENDPOINT_DEFAULT}/agent/aisuite/v1"), block.where


def check_instructor_env(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_instructor import pointed

    shown = dict(line.split("=", 1) for line in block.text.split("\n") if line.strip())
    assert shown == pointed(f"http://{MODEL_ENDPOINT_DEFAULT}", "instructor"), block.where


def check_decorators_env(library: str) -> Callable[[Block, Stack, DocState], None]:
    def check(block: Block, stack: Stack, state: DocState) -> None:
        from tests.frameworks.test_model_endpoint_decorators import pointed

        shown = dict(line.split("=", 1) for line in block.text.split("\n") if line.strip())
        assert shown == pointed(library, f"http://{MODEL_ENDPOINT_DEFAULT}", library,
                                "gpt-4.1"), block.where
    return check


def check_eino_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_eino import AGENT_DIR, pointed

    url = json.dumps(pointed(f"http://{MODEL_ENDPOINT_DEFAULT}", "eino"))
    assert f"BaseURL: {url}," in block.text, block.where
    shown = " ".join(block.text.replace(url, 'os.Getenv("OPENAI_BASE_URL")').split())
    agent = " ".join((AGENT_DIR / "main.go").read_text().split())
    assert shown in agent, block.where


def _check_ts_config(block: Block, agent_file: Path, url: str, key: str = "baseURL") -> None:
    """A TypeScript agent's config as its tests' agent ``agent_file`` runs it (whitespace
    aside), its base URL ``key`` ``url`` read from ``AGENT_LLM_BASE_URL`` there."""
    url = json.dumps(url)
    assert f"{key}: {url} }}" in block.text, block.where
    agent = " ".join(agent_file.read_text().split())
    for line in block.text.replace(url, "process.env.AGENT_LLM_BASE_URL").splitlines():
        assert " ".join(line.split()) in agent, (block.where, line)


def check_llamaindex_ts_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_llamaindex_ts import AGENT, pointed

    _check_ts_config(block, AGENT, pointed(f"http://{MODEL_ENDPOINT_DEFAULT}", "llamaindex"))


def check_strands_ts_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_strands_ts import AGENT, pointed

    _check_ts_config(block, AGENT, pointed(f"http://{MODEL_ENDPOINT_DEFAULT}", "strands-ts"))


def check_fast_agent_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_fast_agent import config

    assert block.text.strip() == config(f"http://{MODEL_ENDPOINT_DEFAULT}", "fast-agent",
                                        "openai", "gpt-4.1-mini", "files_server.py",
                                        "python").strip(), block.where


def check_mcp_agent_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_fast_agent import mcp_agent_config

    assert block.text.strip() == mcp_agent_config(
        f"http://{MODEL_ENDPOINT_DEFAULT}", "mcp-agent", "gpt-4.1-mini", "files_server.py",
        "python").strip(), block.where


def check_kaibanjs_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_kaibanjs import AGENT, pointed

    _check_ts_config(block, AGENT, pointed(f"http://{MODEL_ENDPOINT_DEFAULT}", "kaibanjs"),
                     "apiBaseUrl")


def check_agentkit_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_eino import pointed
    from tests.frameworks.test_model_endpoint_agentkit import AGENT

    _check_ts_config(block, AGENT, pointed(f"http://{MODEL_ENDPOINT_DEFAULT}", "agentkit"),
                     "baseUrl")


def check_tiny_agents_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_eino import pointed
    from tests.frameworks.test_tiny_agents import agent_json

    assert json.loads(block.text) == agent_json(
        pointed(f"http://{MODEL_ENDPOINT_DEFAULT}", "tiny-agents"), "gpt-4.1",
        "/home/me/project"), block.where


def check_open_interpreter_settings(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_open_interpreter import settings

    first, *lines = ast.parse(block.text).body
    assert ast.unparse(first) == "from interpreter import interpreter", block.where
    shown: dict[str, object] = {}
    for line in lines:
        assert isinstance(line, ast.Assign) and len(line.targets) == 1, block.where
        name = ast.unparse(line.targets[0])
        assert name.startswith("interpreter."), block.where
        shown[name.removeprefix("interpreter.")] = ast.literal_eval(line.value)
    assert shown == settings(f"http://{MODEL_ENDPOINT_DEFAULT}/agent/open-interpreter/v1",
                             "gpt-4.1"), block.where


def check_langroid_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_langroid import settings

    *imports, llm, config = ast.parse(block.text).body
    assert [ast.unparse(line) for line in imports] == [
        "import langroid as lr", "import langroid.language_models as lm"], block.where
    shown: dict[str, dict[str, object]] = {}
    for line, name, call in ((llm, "llm", "lm.OpenAIGPTConfig"),
                             (config, "agent", "lr.ChatAgentConfig")):
        assert isinstance(line, ast.Assign) and isinstance(line.value, ast.Call), block.where
        assert ast.unparse(line.value.func) == call and not line.value.args, block.where
        assert [ast.unparse(target) for target in line.targets] == [
            "llm" if name == "llm" else "config"], block.where
        shown[name] = {keyword.arg: ast.literal_eval(keyword.value)
                       if keyword.arg != "llm" else ast.unparse(keyword.value)
                       for keyword in line.value.keywords if keyword.arg is not None}
    assert shown["agent"].pop("llm", None) == "llm", block.where
    assert shown == settings(f"http://{MODEL_ENDPOINT_DEFAULT}/agent/langroid/v1",
                             "gpt-4.1"), block.where


def check_agentscope_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_agentscope import settings

    *imports, credential, model = ast.parse(block.text).body
    assert [ast.unparse(line) for line in imports] == [
        "import os", "from agentscope.credential import OpenAICredential",
        "from agentscope.model import OpenAIChatModel"], block.where
    shown: dict[str, dict[str, object]] = {}
    for line, name, call in ((credential, "credential", "OpenAICredential"),
                             (model, "model", "OpenAIChatModel")):
        assert isinstance(line, ast.Assign) and isinstance(line.value, ast.Call), block.where
        assert ast.unparse(line.value.func) == call and not line.value.args, block.where
        assert [ast.unparse(target) for target in line.targets] == [name], block.where
        shown[name] = {keyword.arg: ast.unparse(keyword.value)
                       if keyword.arg in ("api_key", "credential")
                       else ast.literal_eval(keyword.value)
                       for keyword in line.value.keywords if keyword.arg is not None}
    assert shown["credential"].pop("api_key", None) == "os.environ['OPENAI_API_KEY']", \
        block.where
    assert shown["model"].pop("credential", None) == "credential", block.where
    assert shown == settings(f"http://{MODEL_ENDPOINT_DEFAULT}/agent/agentscope/v1",
                             "gpt-4.1"), block.where


def check_camel_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_camel import settings

    *imports, line = ast.parse(block.text).body
    assert [ast.unparse(statement) for statement in imports] == [
        "import os", "from camel.models import ModelFactory",
        "from camel.types import ModelPlatformType"], block.where
    assert isinstance(line, ast.Assign) and isinstance(line.value, ast.Call), block.where
    assert ast.unparse(line.value.func) == "ModelFactory.create" and not line.value.args, \
        block.where
    assert [ast.unparse(target) for target in line.targets] == ["model"], block.where
    shown = {keyword.arg: ast.unparse(keyword.value)
             if keyword.arg in ("api_key", "model_platform")
             else ast.literal_eval(keyword.value)
             for keyword in line.value.keywords if keyword.arg is not None}
    assert shown.pop("api_key", None) == "os.environ['OPENAI_API_KEY']", block.where
    assert shown.pop("model_platform", None) == "ModelPlatformType.OPENAI_COMPATIBLE_MODEL", \
        block.where
    assert shown == settings(f"http://{MODEL_ENDPOINT_DEFAULT}/agent/camel/v1",
                             "gpt-4.1"), block.where


def check_qwen_agent_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_qwen_agent import KEY, llm_cfg

    *imports, config, agent = ast.parse(block.text).body
    assert [ast.unparse(line) for line in imports] == [
        "import os", "from qwen_agent.agents import Assistant"], block.where
    assert isinstance(config, ast.Assign) and isinstance(config.value, ast.Dict), block.where
    assert [ast.unparse(target) for target in config.targets] == ["llm_cfg"], block.where
    shown = {ast.literal_eval(key): ast.unparse(value) if ast.unparse(key) == "'api_key'"
             else ast.literal_eval(value)
             for key, value in zip(config.value.keys, config.value.values, strict=True)
             if key is not None}
    assert shown.pop("api_key", None) == "os.environ['OPENAI_API_KEY']", block.where
    expected = llm_cfg(f"http://{MODEL_ENDPOINT_DEFAULT}/agent/qwen-agent/v1", "qwen3-32b",
                       "text")
    assert expected.pop("api_key") == KEY and shown == expected, block.where
    assert isinstance(agent, ast.Assign) and isinstance(agent.value, ast.Call), block.where
    assert [ast.unparse(target) for target in agent.targets] == ["agent"], block.where
    assert ast.unparse(agent.value.func) == "Assistant" and not agent.value.args, block.where
    assert {keyword.arg: ast.unparse(keyword.value) for keyword in agent.value.keywords
            if keyword.arg == "llm"} == {"llm": "llm_cfg"}, block.where


def check_crush_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_crush import config

    assert json.loads(block.text) == config(f"http://{MODEL_ENDPOINT_DEFAULT}/v1", "gpt-4.1",
                                            "gpt-4.1-mini"), block.where


def check_continue_config(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_continue_cli import config

    assert block.text.strip() == config(f"http://{MODEL_ENDPOINT_DEFAULT}/v1",
                                        "gpt-4.1").strip(), block.where


def check_cline_settings(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_cline import GLOBAL_SETTINGS, providers

    written = {"providers.json": providers(f"http://{MODEL_ENDPOINT_DEFAULT}/v1", "gpt-4.1",
                                           "YOUR_API_KEY"),
               "global-settings.json": GLOBAL_SETTINGS}
    assert json.loads(block.text) == written[block.options["file"]], block.where


def check_pi_models(block: Block, stack: Stack, state: DocState) -> None:
    from tests.frameworks.test_model_endpoint_pi import models_json

    assert json.loads(block.text) == models_json(f"http://{MODEL_ENDPOINT_DEFAULT}", "gpt-4.1",
                                                 "claude-sonnet-4-5"), block.where


def check_promql(block: Block, stack: Stack, state: DocState) -> None:
    from tests.test_prometheus import ENDED_BY_STATE

    # (the query a real Prometheus answers in test_prometheus, as the page shows it)
    assert block.flags == {"ended-by-state"}, \
        f"{block.where}: promql blocks: `promql ended-by-state`"
    assert " ".join(block.text.split()) == ENDED_BY_STATE, block.where


def check_startup_error(block: Block, stack: Stack, state: DocState) -> None:
    documented = block.options.get("port", "")
    assert documented.isdigit() and f":{documented}" in block.text, block.where
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        flags = {"otlp-grpc-address": free_port(), "otlp-http-address": free_port(),
                 "api-address": free_port(), "metrics-address": free_port()}
        for name, default in (("otlp-grpc-address", 4317), ("otlp-http-address", 4318),
                              ("api-address", 9477), ("metrics-address", 9464)):
            if default == int(documented):
                flags[name] = port
        args = [arg for name, value in flags.items()
                for arg in (f"--{name}", f"127.0.0.1:{value}")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
        result = subprocess.run([str(VENV_BIN / "watchdog"), "serve", "--state-dir", ":memory:",
                                 *args], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2, (block.where, result.stderr)
    assert result.stderr == block.text.replace(f":{documented}", f":{port}"), (
        block.where, result.stderr)


def check_tree(block: Block, stack: Stack, state: DocState) -> None:
    lines = [line for line in block.text.splitlines() if line.strip()]
    top = ROOT / lines[0].split()[0]
    assert top.is_dir(), block.where
    parents = {0: top}
    drawn = {top}
    for line in lines[1:]:
        depth = (len(line) - len(line.lstrip(" "))) // 2
        assert depth - 1 in parents, f"{block.where}: {line!r} is indented past its parent"
        parents = {d: p for d, p in parents.items() if d < depth}
        for name in re.split(r"\s{2,}", line.strip())[0].split():
            path = parents[depth - 1] / name.rstrip("/")
            assert path.exists(), f"{block.where}: {path.relative_to(ROOT)} does not exist"
            drawn.add(path)
            if name.endswith("/"):
                parents[depth] = path
    packages = {init.parent for init in top.rglob("__init__.py")
                if "__pycache__" not in init.parts and init.parent != top}
    missing = sorted(str(p.relative_to(ROOT)) for p in packages - drawn
                     if p.parent in drawn)  # a drawn folder's subpackages must all be drawn
    assert not missing, f"{block.where}: packages not drawn: {missing}"


CHECKS: dict[str, Callable[[Block, Stack, DocState], None]] = {
    "sh": check_sh, "python": check_python, "output": check_output, "pip": check_pip,
    "rule-pack": check_rule_pack, "rule-test": check_rule_test, "config": check_config,
    "helm-values": check_helm_values, "sidecar-chart": check_sidecar_chart,
    "otel-collector": check_otel_collector, "json": check_json,
    "startup-error": check_startup_error, "tree": check_tree,
    "qwen-settings": check_qwen_settings,
    "gemini-env": check_gemini_env,
    "codex-config": check_codex_config, "promql": check_promql,
    "opencode-config": check_opencode_config,
    "crush-config": check_crush_config,
    "continue-config": check_continue_config,
    "cline-settings": check_cline_settings,
    "pi-models": check_pi_models,
    "langchaingo-env": check_langchaingo_env,
    "praisonai-env": check_praisonai_env,
    "swarms-env": check_swarms_env,
    "aisuite-config": check_aisuite_config,
    "instructor-env": check_instructor_env,
    "magentic-env": check_decorators_env("magentic"),
    "mirascope-env": check_decorators_env("mirascope"),
    "eino-config": check_eino_config,
    "aider-command": check_aider_command,
    "gptme-command": check_gptme_command,
    "llm-config": check_llm_config,
    "open-interpreter-settings": check_open_interpreter_settings,
    "langroid-config": check_langroid_config,
    "agentscope-config": check_agentscope_config,
    "camel-config": check_camel_config,
    "qwen-agent-config": check_qwen_agent_config,
    "llamaindex-ts-config": check_llamaindex_ts_config,
    "strands-ts-config": check_strands_ts_config,
    "kaibanjs-config": check_kaibanjs_config,
    "langchain-rust-env": check_langchain_rust_env,
    "agentkit-config": check_agentkit_config,
    "fast-agent-config": check_fast_agent_config,
    "mcp-agent-config": check_mcp_agent_config,
    "tiny-agents-config": check_tiny_agents_config,
}
assert set(CHECKS) == KINDS


# -- tests ---------------------------------------------------------------------------------------


def test_every_block_has_a_check() -> None:
    problems = []
    previous: Block | None = None
    for block in all_blocks():
        if block.kind not in KINDS:
            problems.append(f"{block.where}: ```{block.lang} has no recognised snippet marker "
                            f"(kind {block.kind!r}); see tests/test_docs.py")
        elif block.kind == "output" and (previous is None or previous.path != block.path
                                         or previous.kind not in RUNNABLE):
            problems.append(f"{block.where}: an output block must follow a sh or python block")
        previous = block
    assert not problems, "\n".join(problems)


def test_a_block_without_a_check_fails() -> None:
    sample = ROOT / "README.md"
    block = Block(sample, 1, "yaml", "a: 1\n", None)
    assert block.kind not in KINDS
    assert parse(sample)  # the parser finds the README's blocks


FENCE_LIKE = re.compile(r"^\s*(`{3,}|~{3,})")


def opens(line: str) -> str | None:
    """The fence ``line`` opens, as CommonMark takes one: three or more backticks or tildes, and
    after backticks an info string without one (```` ```a` ```` is inline code, no fence)."""
    opening = FENCE_LIKE.match(line)
    if opening is None or (opening.group(1)[0] == "`" and "`" in line[opening.end():]):
        return None
    return opening.group(1)


def closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes the block ``fence`` opened (CommonMark): a run of its character at
    least as long, with nothing but spaces after it."""
    body = line.strip()
    run = len(body) - len(body.lstrip(fence[0]))
    return run >= len(fence) and run == len(body)


def fences_not_parsed(path: Path) -> list[str]:
    """Lines that look like a fence but open or close no block :func:`parse` found (indented, in
    a list; ``~~~``; an info string it does not take): a block there would go unchecked."""
    taken = {line for block in parse(path) for line in range(block.line, block.end + 1)}
    return [f"{path.name}:{number}: {line.strip()}"
            for number, line in enumerate(path.read_text("utf-8").split("\n"), 1)
            if FENCE_LIKE.match(line) and number not in taken]


def test_every_fence_opens_or_closes_a_checked_block() -> None:
    problems = [problem for path in DOCUMENTS for problem in fences_not_parsed(path)]
    assert not problems, "\n".join(problems)


def test_a_fence_the_parser_does_not_take_is_caught(tmp_path: Path) -> None:
    sample = tmp_path / "sample.md"
    sample.write_text("1. run it:\n\n   ```sh\n   false\n   ```\n\n~~~yaml\na: 1\n~~~\n\n"
                      "<!-- snippet: sh -->\n```sh\ntrue\n```\n")
    assert [block.end for block in parse(sample)] == [14]
    assert [problem.split(": ", 1)[0] for problem in fences_not_parsed(sample)] == [
        "sample.md:3", "sample.md:5", "sample.md:7", "sample.md:9"]


def _fake_stack(tmp_path: Path) -> Stack:
    """The stack's addresses, for the checks that read no running process."""
    return Stack(api="http://127.0.0.1:19477", otlp_http="http://127.0.0.1:14318",
                 model_base_url="http://127.0.0.1:18000/v1",
                 model_endpoint="http://127.0.0.1:19478", state_dir=tmp_path / "state",
                 started=[])


# A kind (with a flag of its own: "sh env"): the document whose block of that kind holding
# `old` is changed to hold `new`. Each is first checked as pasted (it passes), then changed (its
# check fails): a check that passes whatever the block says is caught. The blocks it builds on
# are checked with it: the rule pack before a rule test, the three parts of the agent's chart.
DOCS = ROOT / "docs"
CHANGES: dict[str, tuple[Path, str, str]] = {
    "config": (README, "run_end_timeout: 30m", "run_end_timout: 30m"),
    "rule-pack": (README, "action: wind_down", "action: wind-down"),
    "rule-test": (README, "{step: 3,", "{step: 2,"),
    "output": (README, "explorer", "explore"),
    "json": (DOCS / "steering.md", '"seq"', '"sequence"'),
    "qwen-settings": (DOCS / "frameworks.md", '"logPrompts": true', '"logPrompts": false'),
    "gemini-env": (DOCS / "frameworks.md", "TRACES_ENABLED=true", "TRACES_ENABLED=false"),
    "sh env": (README, "127.0.0.1:4318", "127.0.0.1:4319"),
    "sh dry-run": (DOCS / "testing.md", "make check ", "make checks "),
    "helm-values": (README, "mode: gateway", "mode: gatway"),
    "otel-collector": (DOCS / "kubernetes.md", ".svc:4317", ".svc:4316"),
    "sidecar-chart": (README, "REGISTRY/agent-watchdog-sidecar", "REGISTRY/agent-watchdog"),
    "startup-error": (DOCS / "configuration.md", "Address already in use", "Address in use"),
    "tree": (DOCS / "architecture.md", "    fleet.py", "    fleets.py"),
    "pip": (ROOT / "client" / "README.md", "[otlp]", "[otel]"),
    "codex-config": (DOCS / "frameworks.md", "4318/v1/traces", "4317/v1/traces"),
    "opencode-config": (DOCS / "agents.md", "9478/v1", "9478/v2"),
    "crush-config": (DOCS / "agents.md", '"type": "openai"', '"type": "openai-compat"'),
    "aider-command": (DOCS / "agents.md", "/agent/aider/v1", "/agent/aider/v2"),
    "gptme-command": (DOCS / "agents.md", "GPTME_TIKTOKEN_TIMEOUT=0", "GPTME_TIKTOKEN_TIMEOUT=1"),
    "llm-config": (DOCS / "agents.md", "api_key_name: openai", "api_key_name: llm"),
    "continue-config": (DOCS / "agents.md", "provider: openai", "provider: openai-compat"),
    "cline-settings": (DOCS / "agents.md", '"telemetryOptOut": true', '"telemetryOptOut": false'),
    "pi-models": (DOCS / "agents.md", '"api": "anthropic-messages"', '"api": "anthropic"'),
    "langchaingo-env": (DOCS / "agents.md", "/agent/langchaingo/v1", "/agent/langchain/v1"),
    "eino-config": (DOCS / "agents.md", "/agent/eino/v1", "/agent/eino/v2"),
    "open-interpreter-settings": (DOCS / "agents.md", "interpreter.auto_run = True",
                                  "interpreter.auto_run = False"),
    "langroid-config": (DOCS / "agents.md", 'handle_llm_no_tool="done"',
                        'handle_llm_no_tool="user"'),
    "agentscope-config": (DOCS / "agents.md", "/agent/agentscope/v1", "/agent/agentscope/v2"),
    "llamaindex-ts-config": (DOCS / "agents.md", "/agent/llamaindex/v1", "/agent/llamaindex/v2"),
    "tiny-agents-config": (DOCS / "agents.md", '"type": "stdio"', '"type": "sse"'),
    "camel-config": (DOCS / "agents.md", "/agent/camel/v1", "/agent/camel/v2"),
    "qwen-agent-config": (DOCS / "agents.md", "/agent/qwen-agent/v1", "/agent/qwen-agent/v2"),
    "praisonai-env": (DOCS / "agents.md", "/agent/praisonai/v1", "/agent/praisonai/v2"),
    "swarms-env": (DOCS / "agents.md", "SWARMS_TELEMETRY_ON=false", "SWARMS_TELEMETRY_ON=true"),
    "aisuite-config": (DOCS / "agents.md", "/agent/aisuite/v1", "/agent/aisuite/v2"),
    "instructor-env": (DOCS / "agents.md", "/agent/instructor/v1", "/agent/instructor/v2"),
    "magentic-env": (DOCS / "agents.md", "/agent/magentic/v1", "/agent/magentic/v2"),
    "mirascope-env": (DOCS / "agents.md", "/agent/mirascope/v1", "/agent/mirascope/v2"),
    "strands-ts-config": (DOCS / "agents.md", "/agent/strands-ts/v1", "/agent/strands-ts/v2"),
    "kaibanjs-config": (DOCS / "agents.md", "/agent/kaibanjs/v1", "/agent/kaibanjs/v2"),
    "langchain-rust-env": (DOCS / "agents.md", "/agent/langchain-rust/v1",
                           "/agent/langchain-rust/v2"),
    "agentkit-config": (DOCS / "agents.md", "/agent/agentkit/v1", "/agent/agentkit/v2"),
    "fast-agent-config": (DOCS / "agents.md", "/agent/fast-agent/v1", "/agent/fast-agent/v2"),
    "mcp-agent-config": (DOCS / "agents.md", "/agent/mcp-agent/v1", "/agent/mcp-agent/v2"),
}
BUILT_ON = {"rule-pack", "sidecar-chart"}


def _check_in_place(blocks: list[Block], target: Block, text: str, stack: Stack,
                    scratch: Path) -> None:
    state = DocState(scratch=scratch)
    scratch.mkdir()
    for block in blocks:
        if block is target:
            if block.kind == "output":  # the output it follows: a word for each …
                state.last_stdout = block.text.replace("…", "x")
            CHECKS[block.kind](dataclasses.replace(block, text=text), stack, state)
        elif block.kind in BUILT_ON and (block.kind == target.kind
                                         or blocks.index(block) < blocks.index(target)):
            CHECKS[block.kind](block, stack, state)


@pytest.mark.parametrize("kind", sorted(CHANGES))
def test_a_changed_block_fails_its_check(kind: str, tmp_path: Path) -> None:
    document, old, new = CHANGES[kind]
    name, *flag = kind.split()
    blocks = parse(document)
    target = next(b for b in blocks if b.kind == name and set(flag) <= b.flags
                  and old in b.text)
    stack = _fake_stack(tmp_path)
    _check_in_place(blocks, target, target.text, stack, tmp_path / "as-pasted")
    with pytest.raises(Exception):  # noqa: B017 (an assertion, or the loader's own error)
        _check_in_place(blocks, target, target.text.replace(old, new, 1), stack,
                        tmp_path / "changed")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_document_blocks_run_as_pasted(document: Path, stack: Stack,
                                       tmp_path: Path) -> None:
    state = DocState(scratch=tmp_path)
    for block in parse(document):
        assert block.kind in CHECKS, f"{block.where}: no check (test_every_block_has_a_check)"
        CHECKS[block.kind](block, stack, state)


def test_readme_states_the_lines_the_agents_chart_needs() -> None:
    text = README.read_text("utf-8")
    parts = [b for b in parse(README) if b.kind == "sidecar-chart"]
    assert [b.options["part"] for b in parts] == list(CHART_PARTS)
    counted = sum(1 for b in parts for line in b.text.splitlines()
                  if line.strip() and not line.lstrip().startswith("#"))
    stated = {int(n) for n in re.findall(r"\*\*(\d+) lines\*\*", text)}
    heading = {int(n) for n in re.findall(r"^### Sidecar: (\d+) lines", text, re.M)}
    assert stated == heading == {counted}, (stated, heading, counted)
    elsewhere = {f"{path.relative_to(ROOT)}: {n}" for path in DOCUMENTS
                 for n in re.findall(r"\b(\d+) lines (?:of the README|in the agent's chart)",
                                     path.read_text("utf-8")) if int(n) != counted}
    assert not elsewhere, (counted, elsewhere)


def test_readme_is_short_with_contents() -> None:
    text = README.read_text("utf-8")
    assert len(text.splitlines()) <= 300  # what it is, the two commands, then docs/
    assert "**Contents:**" in text.split("\n## ", 1)[0]
    for anchor in re.findall(r"\]\(#([\w-]+)\)", text):
        headings = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-")
                    for h in re.findall(r"^#+ (.+)$", text, re.M)}
        assert anchor in headings, anchor


def test_the_readme_points_agents_at_the_model_endpoint() -> None:
    """The one env line per API, checked like every ``sh env`` block, and the page's link."""
    text = README.read_text("utf-8")
    section = text.split("## Steer any agent with no code: the model endpoint\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    assert "(docs/model-endpoint.md)" in section
    env = [block for block in parse(README) if block.kind == "sh" and "env" in block.flags
           and block.text in section]
    assert len(env) == 1, env
    assert "export OPENAI_BASE_URL=http://127.0.0.1:9478/v1" in env[0].text
    assert "export ANTHROPIC_BASE_URL=http://127.0.0.1:9478" in env[0].text


def test_no_release_history_prose() -> None:
    history = re.compile(r"\b(this round|the round before|rounds? ago|last round|previous round"
                         r"|earlier rounds?|before issue \d+|now lives?|\d now)\b", re.I)
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in DOCUMENTS
             for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
             if history.search(line)]
    assert not found, "\n".join(found)


def _pip_lines_of_venv_blocks() -> list[tuple[Block, str]]:
    return [(block, line[2:] if block.kind == "python" else line)
            for block in all_blocks() if block.options.get("venv")
            for line in block.text.splitlines()
            if (block.kind == "python" and line.startswith("# pip install "))
            or (block.kind == "pip" and line.startswith("pip install "))]


def test_install_lines_install_what_their_snippets_ran_with() -> None:
    """A snippet's ``pip install`` line, pasted into a fresh venv, installs what the venv the
    tests run the snippet in was made from (without a venv's pins, the snippet may not even
    import): checked without the venvs, so the unit tier sees it."""
    lines = _pip_lines_of_venv_blocks()
    assert lines
    problems = [f"{block.where}: {line!r} leaves out {missing} of "
                f"tests/frameworks/envs/{block.options['venv']}.txt"
                for block, line in lines
                if (missing := venv_list_not_installed(block.options["venv"],
                                                       pip_line_requirements(block, line)))]
    assert not problems, "\n".join(problems)


def test_an_install_line_without_its_venvs_pins_is_caught() -> None:
    block = Block(README, 1, "python", "", "python", {"venv": "openai_v2"})
    needed = pip_line_requirements(block, "pip install 'agent-watchdog-client[otlp]' openai "
                                          "opentelemetry-instrumentation-openai-v2")
    assert venv_list_not_installed("openai_v2", needed) == [
        "opentelemetry-util-genai>=0.4b0,<1", "httpx>=0.27"]
    # a lower bound alone is what pip picks anyway; an extra of the venv's must be named
    assert venv_list_not_installed("pydantic_ai", pip_line_requirements(
        block, "pip install 'agent-watchdog-client[otlp]' pydantic-ai-slim")) == [
        "pydantic-ai-slim[openai]>=1.0"]


def test_install_lines_use_this_projects_names() -> None:
    wrong = re.compile(r"pip install\s+['\"]?agent-watchdog(?![-\w])")
    found = [f"{path.relative_to(ROOT)}:{number}" for path in DOCUMENTS
             for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
             if wrong.search(line)]
    assert not found, found


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*]|\[([^]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a document's headings, as GitHub makes them: only outside fenced blocks
    (a ``# comment`` in a code block is no heading), a repeated one numbered (``-1``, ``-2``)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fence: str | None = None
    for line in text.split("\n"):
        if fence is None and (opening := opens(line)):
            fence = opening
        elif fence is not None and closes(line, fence):
            fence = None
        elif fence is None and (heading := re.match(r"^#{1,6} (.+)$", line)):
            slug = _slug(heading.group(1))
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return found


def link_problems(paths: list[Path], root: Path = ROOT) -> list[str]:
    """Relative links (inline, with a title or none, and reference-style) whose file or heading
    is not there, or whose file is outside the repository ``root`` (there on this machine, not
    where the repository is read)."""
    problems = []
    for path in paths:
        text = path.read_text("utf-8")
        targets = [*re.findall(r"\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)", text),
                   *re.findall(r"^\[[^]]+\]:\s*(\S+)", text, re.M)]
        for target in targets:
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.is_relative_to(root.resolve()):
                problems.append(f"{path.name}: {target}: outside the repository")
            elif not linked.exists():
                problems.append(f"{path.name}: {target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(
                    linked.read_text("utf-8")):
                problems.append(f"{path.name}: {target}: no such heading")
    return problems


def test_links_between_documents_resolve() -> None:
    """Every relative link and anchor of the documents, and of the changelog, whose entries
    link the sections that say more."""
    problems = link_problems([*DOCUMENTS, ROOT / "CHANGELOG.md"])
    assert not problems, "\n".join(problems)


CHART_REFERENCE = re.compile(r"(?<![\w/.])(README\.md|docs/[a-z-]+\.md)(?:#([a-z0-9-]+))?")
CHART_SECTION_BY_TITLE = re.compile(r"README(?:'s)?[,:]?\s+\"?[A-Z]")


def chart_reference_problems(chart: Path, root: Path) -> list[str]:
    """The chart's pointers into the documents (comments, NOTES.txt, the schema's
    descriptions: what `helm show values` and an editor show a user) that lead nowhere: a page
    or heading that does not exist, or a README section named by a title, which is not
    checked (the chart's said "Steering any agent" and "Deploy on Kubernetes", titles the
    README does not have)."""
    problems = []
    for path in sorted(chart.rglob("*")):
        if not path.is_file() or path.suffix not in (".md", ".txt", ".tpl", ".yaml", ".json"):
            continue
        text = path.read_text("utf-8")
        where = path.relative_to(chart)
        for match in CHART_SECTION_BY_TITLE.finditer(text):
            problems.append(f"{where}: {text[match.start():match.end() + 30].splitlines()[0]}: "
                            f"a section by its title: give its file and anchor")
        for match in CHART_REFERENCE.finditer(text):
            page, heading = match.group(1), match.group(2)
            if not (root / page).exists():
                problems.append(f"{where}: {match.group(0)}: no such file")
            elif heading and heading not in anchors((root / page).read_text("utf-8")):
                problems.append(f"{where}: {match.group(0)}: no such heading")
    return problems


def test_the_charts_pointers_into_the_documents_resolve() -> None:
    problems = chart_reference_problems(ROOT / "helm" / "agent-watchdog", ROOT)
    assert not problems, "\n".join(problems)


def test_a_charts_pointer_to_nowhere_is_caught(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "steering.md").write_text("# Steering\n\n## Directives\n")
    (chart / "values.yaml").write_text(
        '# -- webhooks (docs/steering.md#directives); the endpoint (README "Steering any agent")\n'
        "# see docs/steering.md#sessions and docs/nowhere.md\n")
    (chart / "templates" / "NOTES.txt").write_text('See the README, "Deploy on Kubernetes".\n')
    assert chart_reference_problems(chart, tmp_path) == [
        'templates/NOTES.txt: README, "Deploy on Kubernetes".: a section by its title: give its '
        "file and anchor",
        'values.yaml: README "Steering any agent"): a section by its title: give its file and '
        "anchor",
        "values.yaml: docs/steering.md#sessions: no such heading",
        "values.yaml: docs/nowhere.md: no such file"]


# What the code and its tools name of the documents, in messages, docstrings and the runbook
# URLs of the alert tests: a page moved or a section renamed must take them along. (The
# benches' and tests' sample texts, "docs/retry.md" in a tool result, are data: not read.)
POINTING = ("watchdog", "client/agent_watchdog_client", "tools", "native", "tests/promtool")


def source_reference_problems(root: Path, folders: tuple[str, ...] = POINTING,
                              files: tuple[str, ...] = ("Makefile", "pyproject.toml")
                              ) -> list[str]:
    paths = [path for folder in folders if (root / folder).is_dir()
             for path in sorted((root / folder).rglob("*"))
             if path.is_file() and path.suffix in (".py", ".pyi", ".c", ".rs", ".yaml", ".toml")
             and "target" not in path.relative_to(root).parts]
    paths += [root / name for name in files if (root / name).is_file()]
    problems = []
    for path in paths:
        for match in CHART_REFERENCE.finditer(path.read_text("utf-8", errors="replace")):
            page, heading = match.group(1), match.group(2)
            where = f"{path.relative_to(root)}: {match.group(0)}"
            if not (root / page).exists():
                problems.append(f"{where}: no such file")
            elif heading and heading not in anchors((root / page).read_text("utf-8")):
                problems.append(f"{where}: no such heading")
    return problems


def test_the_codes_pointers_into_the_documents_resolve() -> None:
    problems = source_reference_problems(ROOT)
    assert not problems, "\n".join(problems)


def test_a_codes_pointer_to_nowhere_is_caught(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "limits.md").write_text("# Limits\n\n## Disk\n")
    (tmp_path / "watchdog").mkdir()
    (tmp_path / "watchdog" / "config.py").write_text(
        '"""Bounds: docs/limits.md#disk, docs/limits.md#open-files and docs/gone.md."""\n')
    (tmp_path / "Makefile").write_text("# tiers: docs/limits.md\n")
    assert source_reference_problems(tmp_path) == [
        "watchdog/config.py: docs/limits.md#open-files: no such heading",
        "watchdog/config.py: docs/gone.md: no such file"]

def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n```python\n# not a heading\n```\n\n"
                    "[a](other.md#twice-1) [b](#page) [c](other.md#twice-2) [d](missing.md)\n"
                    "[e](#not-a-heading)\n\n[f]: other.md#nowhere\n")
    assert link_problems([page], tmp_path) == [
        "page.md: other.md#twice-2: no such heading", "page.md: missing.md: no such file",
        "page.md: #not-a-heading: no such heading", "page.md: other.md#nowhere: no such heading"]


def test_a_fence_closes_as_commonmark_says(tmp_path: Path) -> None:
    """A closing fence is a run of the opening's character at least as long, with nothing but
    spaces after it (CommonMark 4.5): ```` closes ```, ``` does not close ````, ~~~ does not
    close ```, and ```` ``` x ```` is text. Headings after a block are headings, in either
    reading (the anchors and the checked blocks)."""
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n```sh\ntrue\n````\n\n## After a longer close\n\n"
                    "````text\n```\n# inside\n~~~\n````  \n\n## After a tilde inside\n\n"
                    "```sh\ntrue\n``` x\n```\n\n## Last\n")
    assert anchors(page.read_text()) == {"page", "after-a-longer-close",
                                         "after-a-tilde-inside", "last"}
    assert [(block.line, block.end) for block in parse(page)] == [(3, 5), (9, 13), (17, 20)]
    assert fences_not_parsed(page) == []


def test_a_link_with_a_title_or_out_of_the_repository_is_checked(tmp_path: Path) -> None:
    """A link with a title (`[a](other.md "Other")`) is checked as one without; one to a file
    beside the repository (`../shared/DESIGN.md`: there on this machine) is refused."""
    repository = tmp_path / "repository"
    repository.mkdir()
    (tmp_path / "DESIGN.md").write_text("# Design\n")
    (repository / "other.md").write_text("# Other\n")
    page = repository / "page.md"
    page.write_text('[a](other.md "Other") [b](missing.md "Missing") [c](<other.md#nowhere>)\n'
                    "[d](../DESIGN.md) [e](../DESIGN.md#design)\n")
    assert link_problems([page], repository) == [
        "page.md: missing.md: no such file", "page.md: other.md#nowhere: no such heading",
        "page.md: ../DESIGN.md: outside the repository",
        "page.md: ../DESIGN.md#design: outside the repository"]


REPO_PATH = re.compile(r"`((?:watchdog|native|helm|rules|tests|bench|tools|client|docs|fuzz)/"
                       r"[\w./*-]+)`")


def missing_paths(paths: list[Path]) -> list[str]:
    """The repository files and folders ``paths`` name that are not there. A word in capitals
    that names no file of the repository (`NAME` of `envs/NAME.txt`; not `README`) is a
    placeholder: some file must fit it."""
    stems = set()
    for _, folders, files in os.walk(ROOT):
        folders[:] = [name for name in folders if not name.startswith(".")
                      and name not in {"node_modules", "target", "__pycache__"}]
        stems.update(name.split(".")[0] for name in files + folders)
    missing = []
    for path in paths:
        for named in REPO_PATH.findall(path.read_text("utf-8")):
            pattern = re.sub(r"\b[A-Z][A-Z0-9_]{2,}\b",
                             lambda word: word.group() if word.group() in stems else "*", named)
            if not any(ROOT.glob(pattern.rstrip("/"))):
                missing.append(f"{path.name}: {named}")
    return missing


def test_the_repository_paths_documents_name_exist() -> None:
    """A file or folder a document names (`watchdog/core/bounds.py`, `alerts/*.yaml` of the
    chart) is there; a placeholder in capitals (`envs/NAME.txt`) stands for any."""
    missing = missing_paths(DOCUMENTS)
    assert not missing, "\n".join(missing)


def test_a_missing_path_in_capitals_is_caught(tmp_path: Path) -> None:
    """`docs/README.md` (there is none) is no placeholder: README names files of the
    repository."""
    page = tmp_path / "page.md"
    page.write_text("`tests/frameworks/envs/NAME.txt`, `tests/frameworks/envs/NAME.toml`, "
                    "`docs/README.md`, `helm/agent-watchdog/README.md`, `docs/NAME.md`\n")
    assert missing_paths([page]) == ["page.md: tests/frameworks/envs/NAME.toml",
                                     "page.md: docs/README.md"]


# (any word after `watchdog `: a misspelt command, `watchdog run`, is a command line too)
INLINE_COMMAND = re.compile(r"`(?:kubectl [^`]*? -- )?(?:\.venv/bin/)?watchdog ([a-z][\w-]*\b"
                            r"[^`\[]*)`")


def commands_not_parsed(paths: list[Path]) -> list[str]:
    """The inline `watchdog ...` command lines of ``paths`` the CLI does not take."""
    from watchdog.shell.cli import build_parser

    wrong = []
    for path in paths:
        for command in INLINE_COMMAND.findall(path.read_text("utf-8")):
            args = [re.sub(r"^[A-Z][A-Z_]+$", "x", word.removesuffix("..."))
                    for word in command.replace("\\|", "|").split()]
            if args in (["rules", "check"], ["rules", "test"]):  # the command's name alone
                continue
            try:
                with redirect_stderr(io.StringIO()):  # (argparse's usage line)
                    build_parser().parse_args(args)
            except SystemExit:
                wrong.append(f"{path.name}: watchdog {command}")
    return wrong


def test_the_inline_watchdog_commands_parse() -> None:
    """`watchdog runs --state active --agent AGENT` and the like, anywhere in the prose (or
    after `kubectl exec ... --`), are command lines the CLI takes (a placeholder in capitals
    stands for any value)."""
    wrong = commands_not_parsed(DOCUMENTS)
    assert not wrong, "\n".join(wrong)


def unknown_variables(paths: list[Path]) -> list[str]:
    """The `WATCHDOG_*` variables ``paths`` name that are no configuration key's, none the
    sidecar, the client, the chart or the image names whole in its sources, and no Kubernetes
    service link (`WATCHDOG_SERVICE_HOST`, ..., which the configuration loader lets pass)."""
    from watchdog.shell.config import Config

    keys = {f"WATCHDOG_{f.name.upper()}" for f in dataclasses.fields(Config)}
    sources = "".join(path.read_text("utf-8", errors="replace") for folder in (
        "watchdog", "client/agent_watchdog_client", "helm/agent-watchdog/templates")
        for path in (ROOT / folder).rglob("*") if path.suffix in {".py", ".tpl", ".yaml", ".c"})
    sources += (ROOT / "Dockerfile").read_text("utf-8")
    # whole names: a part of one (`WATCHDOG_MODEL` of `WATCHDOG_MODEL_ADDRESS`) is none
    named = set(re.findall(r"\bWATCHDOG_[A-Z0-9_]*[A-Z0-9]\b", sources))
    return sorted({f"{path.name}: {name}" for path in paths
                   for name in re.findall(r"\bWATCHDOG_[A-Z0-9_]*[A-Z0-9]",
                                          path.read_text("utf-8"))
                   if name not in keys and name not in named
                   and not re.search(r"_SERVICE_HOST$|_SERVICE_PORT|_PORT$", name)})


def test_the_watchdog_variables_documents_name_exist() -> None:
    """A `WATCHDOG_*` variable a document names is one the sidecar, its client, chart or image
    reads."""
    unknown = unknown_variables(DOCUMENTS)
    assert not unknown, "\n".join(unknown)


@pytest.mark.parametrize(("check", "prose", "caught"), [
    ("commands", "`watchdog runs --state active`, `watchdog run --state active`, "
     "`watchdog runs --agent AGENT`, `watchdog report`, `watchdog serv`",
     ["watchdog run --state active", "watchdog report", "watchdog serv"]),
    ("variables", "`WATCHDOG_MODEL_ADDRESS`, `WATCHDOG_MODEL`, `WATCHDOG_EVAL_INTERVA`, "
     "`WATCHDOG_SERVICE_HOST`, `WATCHDOG_NO_SUCH_KEY`",
     ["WATCHDOG_EVAL_INTERVA", "WATCHDOG_MODEL", "WATCHDOG_NO_SUCH_KEY"]),
])
def test_a_wrong_name_in_the_prose_is_caught(check: str, prose: str, caught: list[str],
                                             tmp_path: Path) -> None:
    """A misspelt command (`watchdog run`) is a command line too; a part of a variable's name
    (`WATCHDOG_MODEL` of `WATCHDOG_MODEL_ADDRESS`) is no variable."""
    page = tmp_path / "page.md"
    page.write_text(prose + "\n")
    found = {"commands": commands_not_parsed, "variables": unknown_variables}[check]([page])
    assert found == [f"page.md: {name}" for name in caught]


def _control_api_routes() -> dict[tuple[str, str], set[str]]:
    """(method, path) of each route `watchdog/shell/api/app.py` adds: the query parameters it
    takes (path parameters as `{x}`)."""
    source = (ROOT / "watchdog" / "shell" / "api" / "app.py").read_text("utf-8")
    names = dict(re.findall(r'^([A-Z]+) = "([^"]+)"', source, re.M))
    routes = {}
    for method, expression, params in re.findall(
            r'add\("(\w+)", ([^,]+), [\w.]+((?:, "\w+")*)\)', source):
        path = "".join(names.get(part, part.strip('"')) for part in expression.split(" + "))
        routes[(method, re.sub(r"\{\w+(:[^}]*)?\}", "{x}", path))] = set(
            re.findall(r'"(\w+)"', params))
    return routes


def test_the_control_api_routes_documents_name_exist() -> None:
    """`GET /v1/runs/{id}/report` and the like: a route of the control API, with only query
    parameters it takes."""
    routes = _control_api_routes()
    assert len(routes) >= 13, routes
    wrong, named = [], 0
    for path in DOCUMENTS:
        text = path.read_text("utf-8").replace("\\|", "|")
        for method, route, query in re.findall(
                r"`(GET|POST) (/(?:v1/(?:runs|sessions|directives|rules)|-/)[^`?\s]*)"
                r"(?:\?([^`\s]*))?`", text):
            named += 1
            key = (method, re.sub(r"\{\w+\}", "{x}", route))
            params = {part.split("=")[0] for part in query.split("&") if part}
            if key not in routes or not params <= routes[key]:
                wrong.append(f"{path.relative_to(ROOT)}: {method} {route}?{query}")
    assert named > 20 and not wrong, "\n".join(wrong)


def test_the_log_events_are_documented_with_their_fields() -> None:
    """docs/configuration.md's table of decision events: every event the sources log
    (``logs.event("NAME", field=...)``), each with every field they give it, and no other."""
    import ast

    logged: dict[str, set[str]] = {}
    for source in (ROOT / "watchdog").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text("utf-8"))):
            if (isinstance(node, ast.Call) and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                    and (getattr(node.func, "id", None) == "event"
                         or getattr(node.func, "attr", None) == "event")):
                logged.setdefault(node.args[0].value, set()).update(
                    k.arg for k in node.keywords if k.arg and k.arg != "level")
    section = (ROOT / "docs" / "configuration.md").read_text("utf-8").split("\n## Logs\n")[1]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", section, re.M))
    rows.pop("event", None)  # the header
    assert len(logged) >= 10 and set(rows) == set(logged), sorted(set(rows) ^ set(logged))
    missing = {name: fields - set(re.findall(r"`(\w+)`", rows[name]))
               for name, fields in logged.items()}
    assert not any(missing.values()), missing


def make_rules() -> set[str]:
    """The targets the Makefile has a rule for, by make's own database (``make -p``): a
    folder or file of the same name without one (`docs`, `tests`) is none."""
    database = subprocess.run(["make", "-npq", ".DEFAULT"], cwd=ROOT, capture_output=True,
                              text=True, timeout=60).stdout
    rules: set[str] = set()
    before = ""
    for line in database.split("\n"):
        rule = re.match(r"^([^#\s:%=][^:=]*?):(?![=:])", line)
        if rule and not before.startswith("# Not a target:"):
            rules.update(rule.group(1).split())
        before = line
    return rules


def targets_not_made(targets: set[str]) -> list[str]:
    """Of ``targets``, those the Makefile has no rule for, or that `make -n` refuses."""
    rules = make_rules()
    return [target for target in sorted(targets)
            if target not in rules
            or subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True,
                              timeout=60).returncode != 0]


def test_the_make_targets_documents_name_exist() -> None:
    """`make TARGET` anywhere, and the README's list of the other targets: each is a rule of the
    Makefile that `make -n` takes."""
    targets = {target for path in DOCUMENTS
               for target in re.findall(r"`make ([a-z][\w./-]*)", path.read_text("utf-8"))}
    listed = re.search(r"Also `make demo`, (.*)$", README.read_text("utf-8"), re.M)
    assert listed, "README: the other targets"
    targets |= set(re.findall(r"`(\w[\w-]*)`", listed.group(1)))
    failed = targets_not_made(targets)
    assert not failed, failed


def test_a_target_the_makefile_has_no_rule_for_is_caught() -> None:
    """`make docs` would print "Nothing to be done" and succeed (the folder is there): no rule."""
    assert targets_not_made({"lint", "bench", "docs", "tests", "no-such-target"}) == [
        "docs", "no-such-target", "tests"]


def test_bench_and_tool_commands_exist() -> None:
    """Every `bench/X.py --flag ...` or `tools/X.py --flag` a document gives: the script, and
    each flag among its options."""
    commands = [(path, *command) for path in DOCUMENTS
                for command in re.findall(r"`((?:bench|tools)/[\w.]+\.py)((?: --?[\w-]+(?: "
                                          r"[\w.=-]+)?)*)", path.read_text("utf-8"))]
    assert commands
    wrong = []
    for path, script, args in commands:
        source = (ROOT / script).read_text("utf-8")
        wrong += [f"{path.relative_to(ROOT)}: {script} {flag}"
                  for flag in re.findall(r"(?<![\w-])--[\w-]+", args)
                  if f'"{flag}"' not in source]
    assert not wrong, "\n".join(wrong)


def test_metrics_reference_lists_every_metric() -> None:
    from watchdog.shell.metrics import PREFIX, Metrics

    text = (ROOT / "docs" / "metrics.md").read_text("utf-8")
    names = {family.name.removeprefix(PREFIX) for family in Metrics("docs").registry.collect()
             if family.name.startswith(PREFIX)}
    missing = sorted(name for name in names
                     if not re.search(rf"`{re.escape(name)}(_total)?`", text))
    assert not missing, missing


def test_metrics_reference_gives_each_metrics_type_and_labels() -> None:
    """The table's type and labels columns are the metric's own: a label the docs name
    differently (or leave out) is a query that matches nothing. Labels come from each metric
    as declared; a collector's family (read at scrape time) is checked where it has samples."""
    from prometheus_client.metrics import MetricWrapperBase

    from watchdog.shell.metrics import PREFIX, Metrics

    metrics = Metrics("docs")
    declared: dict[str, tuple[str, set[str]]] = {}
    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase):
            declared[metric._name.removeprefix(PREFIX)] = (metric._type, set(metric._labelnames))
    for family in metrics.registry.collect():
        name = family.name.removeprefix(PREFIX)
        if family.name.startswith(PREFIX) and name not in declared and family.samples:
            declared[name] = (family.type, set().union(
                *(sample.labels for sample in family.samples)) - {"le"})
    text = (ROOT / "docs" / "metrics.md").read_text("utf-8")
    problems, seen = [], set()
    for row in re.findall(r"^\| (`[a-z_]+`(?:, `[a-z_]+`)*) \| ([a-z, ]*) \| ([^|]*) \|", text,
                          re.M):
        names = [n.removesuffix("_total") for n in re.findall(r"`([a-z_]+)`", row[0])]
        types = [t.strip() for t in row[1].split(",")]
        labels = {label.strip() for label in row[2].split(",")} - {"—", ""}
        for name, kind in zip(names, types * len(names) if len(types) == 1 else types,
                              strict=True):
            if name in declared:
                seen.add(name)
                if declared[name] != (kind, labels):
                    problems.append(f"{name}: docs {kind} {sorted(labels)}, the metric "
                                    f"{declared[name][0]} {sorted(declared[name][1])}")
    assert not problems, "\n".join(problems)
    assert seen == set(declared), sorted(set(declared) - seen)


def test_configuration_reference_lists_every_key() -> None:
    from watchdog.shell.config import Config, load

    text = (ROOT / "docs" / "configuration.md").read_text("utf-8")
    missing = [f.name for f in dataclasses.fields(Config) if f"| `{f.name}` |" not in text]
    assert not missing, missing
    wrong = []
    for f in dataclasses.fields(Config):
        default = getattr(Config(), f.name)
        row = re.search(rf"^\| `{f.name}` \| (`[^`]*`|—) \|", text, re.M)
        assert row, f"{f.name}: its row gives its default as `VALUE` or —"
        if row.group(1) == "—":  # none: unset, or an empty list or mapping
            if default not in (None, (), {}):
                wrong.append(f"{f.name}: — documented, the default is {default!r}")
            continue
        # the documented default, read as the sidecar reads that value (`15m`, `true`, ...)
        documented = getattr(load(None, env={f"WATCHDOG_{f.name.upper()}":
                                             row.group(1).strip("`")}), f.name)
        if documented != default:
            wrong.append(f"{f.name}: {row.group(1)} documented, the default is {default!r}")
    assert not wrong, "\n".join(wrong)


def reference_table_problems(text: str) -> list[str]:
    """The configuration reference's key table (``| key | default | meaning |``) beside the
    configuration: a row for a key it does not have (removed, misspelt), a key given two rows
    (the check above reads the first), and the integer maxima the prose gives beside
    ``INT_MAXIMUMS``."""
    from watchdog.shell.config import INT_MAXIMUMS, Config

    table = text.split("\n| key | default | meaning |\n", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \|", table, re.M)
    keys = {f.name for f in dataclasses.fields(Config)}
    problems = [f"{row}: no such key" for row in rows if row not in keys]
    problems += [f"{row}: {rows.count(row)} rows" for row in sorted(set(rows))
                 if rows.count(row) > 1]
    prose = re.search(r"Integers are from 1 to a maximum of their own: (.*?)\.\s", text, re.S)
    assert prose, "the integer keys' maxima"
    maxima: dict[str, int] = {}
    for names, most in re.findall(r"((?:`\w+`(?:\s+and\s+|,\s+)?)+)\s+(\d+)",
                                  prose.group(1)):
        maxima.update(dict.fromkeys(re.findall(r"`(\w+)`", names), int(most)))
    if maxima != INT_MAXIMUMS:
        problems.append(f"the integer maxima: {maxima} documented, {INT_MAXIMUMS} read")
    return problems


def test_the_configuration_reference_table_holds_the_keys_alone() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text("utf-8")
    assert not reference_table_problems(text)
    wrong = (text.replace("| `max_runs` |", "| `max_run` |", 1)
             .replace("`forward_queue_size` 1000000", "`forward_queue_size` 100000", 1)
             + "\n\n| key | default | meaning |\n|---|---|---|\n| `eval_interval` | x | y |\n")
    assert wrong != text and len(reference_table_problems(wrong)) == 2, \
        reference_table_problems(wrong)  # the stale row and the maximum (the second table: none)
    doubled = text.replace("| `max_runs` |", "| `eval_interval` | `1s` | x |\n| `max_runs` |", 1)
    assert reference_table_problems(doubled) == ["eval_interval: 2 rows"]


def test_the_open_files_figures_are_the_sidecars() -> None:
    """docs/limits.md's open files: what `watchdog serve` needs to start, per model request,
    and in all with the defaults and the model endpoint, as `watchdog/shell/open_files.py`
    counts them."""
    from watchdog.shell import connections, open_files
    from watchdog.shell.config import Config

    text = (ROOT / "docs" / "limits.md").read_text("utf-8")
    bullet = " ".join(text.split("\n### Open files\n", 1)[1].split("\n#", 1)[0].split())
    with_model = dataclasses.replace(Config(), model_address="127.0.0.1:9478")
    assert re.search(
        rf"needs {open_files.START_FILES} to start .*?{open_files.START_FILES} \+ "
        rf"`max_pending_requests` \+ {open_files.FILES_PER_MODEL_REQUEST} per "
        rf"`model_max_concurrent` with the model endpoint \+ the control API's "
        rf"{open_files.MAX_STREAMS:,} directive streams and {open_files.MAX_WAITERS:,} long-polls "
        rf"\({open_files.needed(with_model)} with the defaults\).*?below "
        rf"{open_files.START_FILES} is one line", bullet), bullet
    first = connections.FIRST_REQUEST_TIMEOUT
    assert f"sends no request head within {first:g} s is closed" in bullet, bullet
    from watchdog.shell.server import METRICS_KEEPALIVE

    assert f"a metrics connection (all interfaces, no token) {METRICS_KEEPALIVE:g} s after its " \
        "last request" in bullet, bullet


if __name__ == "__main__":  # python -m tests.test_docs: list the blocks and how each is checked
    for found in all_blocks():
        print(found.where, found.lang, found.kind, found.options, sorted(found.flags))
    sys.exit(0)
