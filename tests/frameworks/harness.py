"""Driving real agent frameworks against a real sidecar, and checking the runs it saw.

A framework runs in its own venv (``.venvs/<env>``, made by ``make test`` from
``tests/frameworks/envs/<env>.txt``, because frameworks pin clashing dependencies) as a
process: ``drivers/<driver>.py SCENARIO``, forked from that venv's long-lived driver process
(``drivers/_forkserver.py``), which imported the framework (:data:`PRELOAD`) once for all the
test run's scenarios of that venv, whichever pytest worker runs them. It talks to the scripted
model server of this process (:mod:`tests.frameworks.fakellm`) and exports its own spans,
through the real OTLP exporter, to the sidecar under test. Nothing here shapes a span.

``RECORD_SPANS=1 pytest tests/frameworks`` also writes what each framework emitted to
``recordings/<driver>/<scenario>.jsonl`` (OTLP/JSON, one export request per line);
:func:`replay` feeds such a recording back through the OTLP/HTTP receiver.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import scenarios
from tests.frameworks.fakellm import FakeLLM, Script
from tests.harness import (
    RunningServer,
    http_request,
    http_served,
    run_directory,
    run_owner,
    running_server,
    sidecar_config,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DRIVERS = HERE / "drivers"
# the client distribution's source: framework venvs import the client from the checkout
CLIENT_SRC = ROOT / "client"
RECORDINGS = HERE / "recordings"
# every scenario's trust store (SSL_CERT_FILE): one certificate. The scenarios talk plain HTTP
# on 127.0.0.1, and the SSL context an SDK makes for each of its clients (httpx, the OpenAI
# SDK, Hermes for every request) parsed the whole system bundle: 30-40 ms each, 1 ms so
TRUST_STORE = HERE / "trust.pem"
VENVS = ROOT / ".venvs"
DRIVER_TIMEOUT = 240.0  # seconds; a framework's import alone can take several


def clean_environ(*prefixes: str) -> dict[str, str]:
    """This process's environment without what must not reach a framework (its own exporter
    settings, the watchdog's, pytest's per-test variables) and without ``prefixes``."""
    return {key: value for key, value in os.environ.items() if not key.startswith(
        ("OTEL_", "WATCHDOG_", "OPENAI_", "VIRTUAL_ENV", "PYTEST_", *prefixes))}


def go_agent(directory: Path, target: str) -> Path:
    """The binary ``make TARGET`` built for the Go module ``directory`` (of one ``main.go``)
    as it is now: ``.cache/TARGET/HASH/TARGET``, the Makefile's hash of its main.go, go.mod
    and go.sum, in that order."""
    sources = [directory / "main.go", directory / "go.mod", directory / "go.sum"]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    binary = directory.parents[3] / ".cache" / target / digest / target
    assert binary.exists(), f"{binary} is missing: `make {target}` builds it"
    return binary


def run_go_agent(directory: Path, target: str, env: Mapping[str, str], cwd: Path
                 ) -> tuple[list[dict[str, str]], list[str]]:
    """:func:`go_agent`'s binary run once in ``cwd`` with ``env``, which must exit 0: the JSON
    lines it printed (one per call: the output its caller got, the error) and the lines its
    tools wrote to ``ran.log`` there (what they were given)."""
    result = subprocess.run([str(go_agent(directory, target))], env=dict(env), cwd=cwd,
                            capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    ran = cwd / "ran.log"
    return ([json.loads(line) for line in result.stdout.splitlines()],
            ran.read_text().splitlines() if ran.exists() else [])


def venv_python(env: str) -> Path:
    python = VENVS / env / "bin" / "python"
    if not python.exists():  # never a skip: make test builds every venv before pytest runs
        raise AssertionError(f"{python} is missing: run `make frameworks` (part of `make test`)")
    return python


# what each venv's driver process imports before its first fork: the framework's heavy modules,
# those the drivers import before reading a scenario's settings (a venv whose framework reads
# them at import, as Haystack and Strands do, preloads only the OpenTelemetry SDK and the OpenAI
# SDK beneath it: half of Haystack's import; Semantic Kernel and Hermes, whose settings are the
# same for every scenario of a driver, are imported with those: IMPORT_SETTINGS); nothing here
# may start a thread at import (the driver process checks)
_OTEL = ("_otel",)
# what the HTTP and model SDKs import only at their first request, in every fork unless the
# driver process has: the OpenAI client's resources (its ``chat`` and ``responses``: 30-45 % of
# a CrewAI, LlamaIndex or Strands scenario's CPU seconds), httpx's transport and anyio's asyncio
# backend (``NAME?``: where installed), LiteLLM's proxy types
_HTTP = ("httpcore?", "httpcore2?", "anyio._backends._asyncio?")
_OPENAI = ("openai", "openai.resources", "openai.resources.chat", "openai.resources.chat.chat",
           "openai.resources.responses", "openai.resources.responses.responses", *_HTTP)
_LITELLM = ("litellm", "litellm.proxy._types")
_LANGCHAIN = (*_OTEL, "langchain.agents", "langchain_core.tools", "langchain_openai", *_OPENAI)
_OPENAI_AGENTS = (*_OTEL, "agents", *_OPENAI)
_SEMANTIC_KERNEL = ("semantic_kernel.agents", "semantic_kernel.connectors.ai",
                    "semantic_kernel.connectors.ai.open_ai", "semantic_kernel.functions")
PRELOAD: dict[str, tuple[str, ...]] = {
    # agent_framework.openai imports its client at first use: the OpenAI SDK is preloaded here
    # (Aider imports LiteLLM at its first model call: preloaded here)
    "aider": ("aider.main", "aider.coders", *_LITELLM, *_OPENAI),
    "atomic_agents": ("instructor", "atomic_agents.agents.base_agent", *_OPENAI),
    "ag2": (*_OTEL, "ag2", "ag2.config", "ag2.middleware.builtin", *_OPENAI),
    "agent_framework": (*_OTEL, "agent_framework", "agent_framework.openai", *_OPENAI),
    "agno": (*_OTEL, "openinference.instrumentation.agno", "agno.agent", "agno.models.openai",
             "agno.team", *_OPENAI),
    "agno_olm": (*_OTEL, "opentelemetry.instrumentation.agno",
                 "opentelemetry.instrumentation.openai", "agno.agent", "agno.models.openai",
                 "agno.team", *_OPENAI),
    "anthropic": (*_OTEL, "anthropic", *_HTTP),
    "anthropic_oi": (*_OTEL, "anthropic", "openinference.instrumentation.anthropic", *_HTTP),
    "agentscope": (*_OTEL, "agentscope.agent", "agentscope.middleware", "agentscope.model",
                   "agentscope.tool", *_OPENAI),
    "autogen": (*_OTEL, "opentelemetry.instrumentation.openai_v2", "autogen_agentchat.agents",
                "autogen_agentchat.teams", "autogen_ext.models.openai", *_OPENAI),
    "autogen_oi": (*_OTEL, "openinference.instrumentation.autogen_agentchat",
                   "openinference.instrumentation.openai", "autogen_agentchat.agents",
                   "autogen_agentchat.teams", "autogen_ext.models.openai", *_OPENAI),
    "beeai": (*_OTEL, "openinference.instrumentation.beeai", "beeai_framework.adapters.openai",
              "beeai_framework.agents.requirement", "beeai_framework.tools", *_LITELLM,
              *_OPENAI),
    "camel": ("_camel", *_OPENAI),
    "burr": (*_OTEL, "_burr", "burr.core", "burr.integrations.opentelemetry",
             "opentelemetry.instrumentation.openai", "opentelemetry.instrumentation.openai.v1",
             *_OPENAI),
    # AgentOps is imported by the driver, after smolagents (its init instruments those imported)
    "agentops_smolagents": (*_OTEL, *_LITELLM),
    "crewai": (*_OTEL, "crewai", "crewai.tools", "openinference.instrumentation.crewai",
               *_OPENAI),
    "crewai_openlit": (*_OTEL, "crewai", "crewai.tools", "openlit", *_OPENAI),
    "crewai_olm": (*_OTEL, "crewai", "crewai.tools", "opentelemetry.instrumentation.crewai",
                   *_OPENAI),
    "dspy": (*_OTEL, "openinference.instrumentation.dspy", "dspy", *_LITELLM,
             "openinference.instrumentation.litellm", *_OPENAI),
    "google_adk": (*_OTEL, "google.adk.agents", "google.adk.models.lite_llm",
                   "google.adk.runners", *_LITELLM, *_OPENAI),
    "google_adk_oi": (*_OTEL, "google.adk.agents", "google.adk.models.lite_llm",
                      "google.adk.runners", *_LITELLM, "openinference.instrumentation.google_adk",
                      *_OPENAI),
    "haystack": (*_OTEL, *_OPENAI),
    "hermes": (*_OTEL, *_OPENAI, "run_agent", "tools.registry"),
    "langchain": (*_LANGCHAIN, "opentelemetry.instrumentation.langchain"),
    "langroid": ("_langroid", *_OPENAI),
    # (minisweagent reads its settings from the environment at import: the driver imports it)
    "mini_swe_agent": (*_LITELLM, *_OPENAI),
    "open_interpreter": (*_OTEL, *_LITELLM, *_OPENAI, "interpreter"),
    "langchain_openlit": (*_LANGCHAIN, "openlit"),
    "langfuse": (*_LANGCHAIN, "langfuse", "langfuse.langchain"),
    "litellm_logfire": (*_OTEL, *_LITELLM, *_OPENAI),
    # Logfire and MLflow are imported by the drivers after they set the exporters' variables:
    # only the OpenAI SDK (and pydantic-ai) beneath them here
    "logfire": (*_OTEL, *_OPENAI),
    "mlflow": (*_OTEL, *_OPENAI),
    "pydantic_ai_logfire": (*_OTEL, "pydantic_ai", "pydantic_ai.models.openai", *_OPENAI),
    "pydantic_ai_langfuse": (*_OTEL, "pydantic_ai", "pydantic_ai.models.openai", "langfuse",
                             *_OPENAI),
    "llamaindex": (*_OTEL, "openinference.instrumentation.llama_index",
                   "openinference.instrumentation.llama_index._handler",
                   "llama_index.core.agent.workflow", "llama_index.llms.openai_like",
                   "_llamaindex_tokenizer", *_OPENAI),
    "llamaindex_olm": (*_OTEL, "opentelemetry.instrumentation.llamaindex",
                       "opentelemetry.instrumentation.openai", "llama_index.core.agent.workflow",
                       "llama_index.llms.openai_like", "_llamaindex_tokenizer", *_OPENAI),
    "llamaindex_legacy": (*_OTEL, "openinference.instrumentation.llama_index",
                          "openinference.instrumentation.llama_index._handler",
                          "llama_index.core.agent", "llama_index.llms.openai_like",
                          "_llamaindex_tokenizer", *_OPENAI),
    "openai_agents": _OPENAI_AGENTS,
    # OpenLLMetry's OpenAIInstrumentor imports its wrappers (.v1) when it instruments
    "openai_agents_olm": (*_OPENAI_AGENTS, "opentelemetry.instrumentation.openai_agents",
                          "opentelemetry.instrumentation.openai.v1"),
    "openai_agents_openlit": (*_OPENAI_AGENTS, "openlit"),
    # Logfire is imported by the driver after it sets the exporters' variables
    "openai_agents_logfire": _OPENAI_AGENTS,
    "openai_oi": (*_OTEL, *_OPENAI, "openinference.instrumentation.openai"),
    "openai_olm": (*_OTEL, *_OPENAI, "opentelemetry.instrumentation.openai",
                   "opentelemetry.instrumentation.openai.v1"),
    "openai_v2": (*_OTEL, *_OPENAI, "opentelemetry.instrumentation.openai_v2"),
    "instructor": ("instructor", *_OPENAI),
    "praisonai": ("praisonaiagents", "praisonaiagents.agent.agent", *_LITELLM, *_OPENAI),
    "pydantic_ai": (*_OTEL, "pydantic_ai", "pydantic_ai.models.openai", *_OPENAI),
    # (qwen_agent reads its limit of model calls per run from the environment at import: the
    # driver imports it; what it imports beneath is preloaded)
    "qwen_agent": ("numpy", "PIL.Image", "tiktoken", "json5", "dashscope", *_OPENAI),
    "pydantic_ai_oi": (*_OTEL, "pydantic_ai", "pydantic_ai.models.openai",
                       "openinference.instrumentation.pydantic_ai", *_OPENAI),
    "semantic_kernel": (*_OTEL, *_OPENAI, *_SEMANTIC_KERNEL),
    "semantic_kernel_137": (*_OTEL, *_OPENAI, *_SEMANTIC_KERNEL),
    "smolagents": (*_OTEL, "smolagents", "openinference.instrumentation.smolagents", *_OPENAI),
    "steering_langchain": (*_LANGCHAIN, "openinference.instrumentation.langchain"),
    "strands": (*_OTEL, *_OPENAI),
    # (swarms starts a loguru writer thread when imported: the driver imports it)
    "swarms": (*_LITELLM, *_OPENAI),
    "aisuite": ("aisuite", *_OPENAI),
}
# what the drivers set before importing those: no price list download or telemetry from
# LiteLLM, DSPy's cache out of the home directory, no CrewAI telemetry
PRELOAD_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
               "DSPY_CACHEDIR": str(Path(tempfile.gettempdir()) / "dspy-cache-tests"),
               "CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_DISABLE_TRACKING": "true",
               "CREWAI_TRACING_ENABLED": "false"}


@dataclass(frozen=True)
class Home:
    """A setting that names a directory: made once per test run (in :func:`homes`) holding
    ``files`` (name -> text), the same for every scenario of the driver that has it."""

    files: tuple[tuple[str, str], ...]


# the settings a driver's framework reads once, when imported, the same for all its scenarios:
# its driver process is started with them (one per driver then, as for any environment) and
# imports the framework (PRELOAD) with them, and each scenario starts from them. Semantic
# Kernel's diagnostics switches; Hermes' home (its config: the plugins it loads when imported),
# a directory of the run shared by the driver's scenarios, and the name the agento11y plugin
# reports. Every driver of a venv listed in IMPORTED_WITH_SETTINGS has its settings here.
_SK_DIAGNOSTICS = {"SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS": "true",
                   "SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE": "true"}
# Hermes' own probes stay off (no test reads them): the Python toolchain probe of its system
# prompt (it ran python3 and pip three times per agent, half a Hermes scenario's CPU seconds)
# and the context window's (eleven HTTP requests to the scripted model server per agent, which
# knows none: Hermes' default, 256,000 tokens, is what they found)
_HERMES_QUIET = ("agent:\n  environment_probe: false\n"
                 "model:\n  context_length: 256000\n")
_HERMES_PLUGINS = Home((("config.yaml",
                         "plugins:\n  enabled:\n    - agento11y\n" + _HERMES_QUIET),))
_HERMES_NO_PLUGINS = Home((("config.yaml", "plugins:\n  enabled: []\n" + _HERMES_QUIET),))
IMPORT_SETTINGS: dict[str, Mapping[str, str | Home]] = {
    "semantic_kernel_agent": _SK_DIAGNOSTICS,
    "semantic_kernel_137_agent": _SK_DIAGNOSTICS,
    "hermes_agento11y": {"HERMES_HOME": _HERMES_PLUGINS,
                         "AGENTO11Y_AGENT_NAME": "hermes-researcher"},
    "hermes_openai_v2": {"HERMES_HOME": _HERMES_NO_PLUGINS,
                         "AGENTO11Y_AGENT_NAME": "hermes-researcher"},
    "steering_hermes": {"HERMES_HOME": _HERMES_PLUGINS, "AGENTO11Y_AGENT_NAME": "explorer"},
}
IMPORTED_WITH_SETTINGS = frozenset({"semantic_kernel", "semantic_kernel_137", "hermes"})


def homes() -> Path:
    """Where this test run keeps the directories of :data:`IMPORT_SETTINGS` (removed when the
    run ends: tests/conftest.py)."""
    return run_directory() / "homes"


def import_settings(env: str, driver: str) -> dict[str, str]:
    """The environment ``driver``'s framework is imported with (:data:`IMPORT_SETTINGS`), its
    directories made."""
    settings = IMPORT_SETTINGS.get(driver)
    if settings is None:
        if env in IMPORTED_WITH_SETTINGS:  # its driver process would import with no settings
            raise AssertionError(f"driver {driver} of venv {env} has no IMPORT_SETTINGS "
                                 "(tests/frameworks/harness.py)")
        return {}
    made: dict[str, str] = {}
    for name, value in settings.items():
        if isinstance(value, str):
            made[name] = value
            continue
        digest = hashlib.sha256(repr(value.files).encode()).hexdigest()[:10]
        directory = homes() / f"{driver}-{name.lower()}-{digest}"
        directory.mkdir(parents=True, exist_ok=True)
        for file_name, text in value.files:  # the same text from every worker: replaced whole
            temporary = directory / f".{file_name}.{os.getpid()}"
            temporary.write_text(text, encoding="utf-8")
            os.replace(temporary, directory / file_name)
        made[name] = str(directory)
    return made


# venvs whose drivers run in a new interpreter each: LangSmith turns finished runs into spans
# on a background thread that a forked driver's exit under load did not always wait for (its
# error runs came without their error in two full suites)
FRESH_INTERPRETER = frozenset({"langsmith"})


class DriverProcess:
    """This test process's connection to venv ``env``'s driver process
    (``drivers/_forkserver.py``), which runs each driver command in a fork of itself. There is
    one driver process per venv and environment for the whole test run, whichever pytest worker
    asks: the first to need it starts it while the others wait on a file lock, and it ends with
    the run (its socket, log and CPU seconds in :func:`tests.harness.run_directory`)."""

    def __init__(self, env: str, env_vars: Mapping[str, str]) -> None:
        self.env = env
        digest = hashlib.sha256(json.dumps(sorted(env_vars.items())).encode()).hexdigest()[:10]
        directory = run_directory()
        directory.mkdir(exist_ok=True)
        self.socket_path = directory / f"{env}-{digest}.sock"
        self.log = directory / f"{env}-{digest}.log"
        with (directory / f"{env}-{digest}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            sock = self._connect()
            if sock is None:
                self._start(env_vars)
                sock = self._connect()
                assert sock is not None, self._ended("did not listen")
        self.sock = sock
        self.buffer = b""
        self.last: dict[str, Any] = {}  # the last answer

    def _connect(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.socket_path))
        except (FileNotFoundError, ConnectionRefusedError):  # none yet, or one that ended
            sock.close()
            self.socket_path.unlink(missing_ok=True)
            return None
        return sock

    def _start(self, env_vars: Mapping[str, str]) -> None:
        with self.log.open("ab") as log:
            process = subprocess.Popen(
                [str(venv_python(self.env)), str(DRIVERS / "_forkserver.py"),
                 str(self.socket_path), str(run_owner()), *PRELOAD.get(self.env, ())],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                env={**env_vars, **PRELOAD_ENV}, cwd=ROOT)
        _started.append(process)
        assert process.stdout is not None
        with process.stdout:
            if not select.select([process.stdout], [], [], DRIVER_TIMEOUT)[0]:
                process.kill()
                raise TimeoutError(f"the {self.env} driver process was not ready in time")
            line = process.stdout.readline()
        if not line:
            raise AssertionError(self._ended(f"ended ({process.wait()})"))
        assert "ready" in json.loads(line), (self.env, line)

    def _ended(self, what: str) -> str:
        log = self.log.read_bytes().decode(errors="replace") if self.log.exists() else ""
        return f"the {self.env} driver process {what}:\n{log[-6000:]}"

    def answer(self, key: str, deadline: float) -> int:
        """The next line the driver process says on this connection; it must carry ``key``."""
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise TimeoutError(f"the {self.env} driver process said nothing in time")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError(self._ended("closed its connection"))
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.last = message = json.loads(line)
        assert key in message, (self.env, key, message)
        return int(message[key])

    def run(self, argv: Sequence[str], env_vars: Mapping[str, str], timeout: float
            ) -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory(prefix="driver-") as out:
            stdout, stderr = Path(out) / "stdout", Path(out) / "stderr"
            request = {"argv": list(argv), "env": dict(env_vars), "cwd": str(ROOT),
                       "stdout": str(stdout), "stderr": str(stderr)}
            deadline = time.monotonic() + timeout
            pid = 0
            try:
                self.sock.sendall(json.dumps(request).encode() + b"\n")
                pid = self.answer("pid", deadline)
                returncode = self.answer("returncode", deadline)
                fork_cpu[0] += self.last["cpu"]
            except BaseException as exc:  # a timeout, or the test interrupted (pytest-timeout)
                # the scenario is killed, as subprocess.run kills its process, and this
                # connection closed: its next answer could still be this scenario's
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                self.close()
                if isinstance(exc, TimeoutError):
                    raise subprocess.TimeoutExpired(list(argv), timeout, stdout.read_bytes(),
                                                    stderr.read_bytes()) from None
                raise
            return subprocess.CompletedProcess(
                list(argv), returncode, stdout.read_text(encoding="utf-8", errors="replace"),
                stderr.read_text(encoding="utf-8", errors="replace"))

    def close(self) -> None:
        self.sock.close()


_driver_processes: dict[tuple[str, str], DriverProcess] = {}
fork_cpu = [0.0]  # the CPU seconds of the forks that ran this test process's scenarios
_started: list[subprocess.Popen[bytes]] = []  # the driver processes this test process started


def driver_process(env: str, env_vars: Mapping[str, str]) -> DriverProcess:
    """The connection to the driver process of venv ``env`` that imported its modules with
    ``env_vars`` (the environment every scenario run through it starts from)."""
    key = (env, json.dumps(sorted(env_vars.items())))
    process = _driver_processes.get(key)
    if process is None or process.sock.fileno() < 0:
        process = _driver_processes[key] = DriverProcess(env, env_vars)
    return process


def drive_command(env: str, driver: str, argument: str, base: Mapping[str, str],
                  env_vars: Mapping[str, str], check: bool = True
                  ) -> subprocess.CompletedProcess[str]:
    """``python drivers/<driver>.py ARGUMENT`` in venv ``env`` with ``env_vars``, forked from
    the driver process that imported the framework with ``base``; it must exit 0 when
    ``check`` (else its exit status is the caller's to judge)."""
    env_vars = {**env_vars, "SSL_CERT_FILE": str(TRUST_STORE)}
    if env in FRESH_INTERPRETER:
        result = subprocess.run([str(venv_python(env)), str(DRIVERS / f"{driver}.py"), argument],
                                env=dict(env_vars), capture_output=True, text=True,
                                timeout=DRIVER_TIMEOUT, check=False)
    else:
        result = driver_process(env, base).run([str(DRIVERS / f"{driver}.py"), argument],
                                               env_vars, DRIVER_TIMEOUT)
    if result.returncode != 0 and check:
        sys.stderr.write(result.stderr[-6000:])
        raise AssertionError(f"driver {driver} {argument} exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


@atexit.register
def _close_driver_processes() -> None:
    """This test process's connections (the driver processes end with the run)."""
    while _driver_processes:
        _driver_processes.popitem()[1].close()


def run_driver(env: str, driver: str, scenario: str, sidecar: RunningServer, llm: FakeLLM,
               model: str, extra_env: Mapping[str, str] | None = None,
               protocol: str = "http/protobuf") -> subprocess.CompletedProcess[str]:
    """Run ``drivers/<driver>.py <scenario>`` in venv ``env`` against ``sidecar`` and ``llm``."""
    base = clean_environ()
    base.update({"PYTHONPATH": str(DRIVERS), "PYTHONUNBUFFERED": "1",
                 **import_settings(env, driver)})
    env_vars = dict(base)
    endpoint = sidecar.otlp_http if protocol.startswith("http") else "http://" + \
        sidecar.grpc_target
    env_vars.update({
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "WATCHDOG_URL": sidecar.api,
        "FAKE_LLM_BASE_URL": llm.base_url,
        "FAKE_LLM_MODEL": model,
        "OPENAI_API_KEY": "sk-fake-for-tests",
        "OPENAI_BASE_URL": llm.base_url,
    })
    if os.environ.get("RECORD_SPANS"):
        target = RECORDINGS / driver / f"{scenario}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        env_vars["RECORD_SPANS"] = str(target)
    env_vars.update(extra_env or {})
    return drive_command(env, driver, scenario, base, env_vars)


def drive_and_check(sidecar: RunningServer, llm: FakeLLM, env: str, driver: str, scenario: str,
                    scripts: Mapping[str, Script], expected: Sequence[Expect]) -> None:
    """Register a scenario's scripts (``""`` for the agent under test, ``"-sub"`` etc. for the
    agents it hands off to), run its driver live, and check the runs the sidecar shows."""
    model = f"{driver}-{scenario}"
    for suffix, script in scripts.items():
        llm.script(model + suffix, script)
    run_driver(env, driver, scenario, sidecar, llm, model)
    check_runs(sidecar, expected)


def check_recorded(sidecar: RunningServer, driver: str, scenario: str,
                   expected: Sequence[Expect]) -> None:
    """Replay a committed recording and check the same runs as live."""
    replay(sidecar, RECORDINGS / driver / f"{scenario}.jsonl")
    check_runs(sidecar, expected)


def replay(sidecar: RunningServer, recording: Path, skew: float = 0.0,
           edit: Callable[[list[dict[str, Any]]], None] | None = None,
           after_each: Callable[[], None] | None = None) -> None:
    """Export a recording again, request by request, as OTLP/JSON — its timestamps moved to
    now, as if the framework had just run (the time-based rules read them); with ``skew``, as
    if on a host whose clock is that many seconds behind the sidecar's (negative: ahead);
    ``edit`` changes its spans (in export order) after that; ``after_each`` runs after each
    request is acknowledged."""
    requests = [json.loads(line) for line in recording.read_text(encoding="utf-8").splitlines()
                if line.strip()]
    times = [int(span["startTimeUnixNano"]) for span in _spans(requests)]
    shift = time.time_ns() - min(times) - 10**9 - int(skew * 10**9) if times else 0
    for span in _spans(requests):
        for key in ("startTimeUnixNano", "endTimeUnixNano"):
            span[key] = str(int(span[key]) + shift)
        for event in span.get("events", ()):
            event["timeUnixNano"] = str(int(event["timeUnixNano"]) + shift)
    if edit is not None:
        edit(list(_spans(requests)))
    for request in requests:
        status, body = http_request("POST", sidecar.otlp_http + "/v1/traces",
                                    json.dumps(request).encode(),
                                    {"Content-Type": "application/json"})
        assert status == 200, (status, body)
        if after_each is not None:
            after_each()


def replay_logs(sidecar: RunningServer, recording: Path) -> None:
    """Export a recording's log events again, request by request, as OTLP/JSON, unchanged."""
    for line in recording.read_text(encoding="utf-8").splitlines():
        if line.strip():
            status, body = http_request("POST", sidecar.otlp_http + "/v1/logs", line.encode(),
                                        {"Content-Type": "application/json"})
            assert status == 200, (status, body)


def replay_with_logs(sidecar: RunningServer, spans: Path, logs: Path, logs_first: bool) -> None:
    """Export a recording's spans and its log events again, the log events first or last (an
    agent's events joined to its spans in either arrival order)."""
    if logs_first:
        replay_logs(sidecar, logs)
    replay(sidecar, spans)
    if not logs_first:
        replay_logs(sidecar, logs)


def recorded_spans(recording: Path) -> list[dict[str, Any]]:
    """Every span of a recording, as OTLP/JSON, in export order (for tests of what a framework
    emitted)."""
    return list(_spans([json.loads(line) for line in
                        recording.read_text(encoding="utf-8").splitlines() if line.strip()]))


def _spans(requests: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for request in requests:
        for resource_spans in request.get("resourceSpans", ()):
            for scope_spans in resource_spans.get("scopeSpans", ()):
                yield from scope_spans.get("spans", ())


UNCHECKED: Any = object()  # an expectation field left out of the comparison


@dataclass(frozen=True)
class Expect:
    """What the sidecar must show for one run (compare with ``GET /v1/runs/{id}``)."""

    agent: str
    iterations: int
    tool_calls: int
    errors: int
    terminal_state: str
    has_final_answer: bool
    terminal_reason: Any = UNCHECKED
    parent_agent: Any = UNCHECKED  # the agent name of the parent run, None for a top run


def _seen(run: Mapping[str, Any], by_id: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    parent = run.get("parent_run")
    return {"agent": run["agent"], "iterations": run["iterations"],
            "tool_calls": run["tool_calls"], "errors": run["errors"],
            "terminal_state": run["terminal_state"], "has_final_answer": run["has_final_answer"],
            "terminal_reason": run["terminal_reason"],
            "parent_agent": by_id[parent]["agent"] if parent in by_id else parent}


def runs_seen(sidecar: RunningServer, count: int, timeout: float = 20.0
              ) -> list[dict[str, Any]]:
    """Every run the sidecar has, once ``count`` of them have ended (details, oldest first)."""
    def ended() -> list[dict[str, Any]] | None:
        sidecar.flush()
        runs = sidecar.get_json("/v1/runs?limit=1000")["runs"]
        done = [run for run in runs if run["state"] == "ended"]
        return runs if len(done) >= count else None

    try:
        summaries = wait_until(ended, timeout=timeout, what=f"{count} ended runs")
    except AssertionError:
        summaries = sidecar.get_json("/v1/runs?limit=1000")["runs"]
        raise AssertionError(f"expected {count} ended runs, the sidecar has: "
                             f"{json.dumps(summaries, indent=1)}") from None
    details = [sidecar.get_json(f"/v1/runs/{run['id']}") for run in summaries]
    return sorted(details, key=lambda run: (run["started_at"] or "", run["id"]))


def check_runs(sidecar: RunningServer, expected: Sequence[Expect],
               any_order: bool = False) -> list[dict[str, Any]]:
    """Assert the sidecar shows exactly the expected runs (in start order; ``any_order``: in
    some order, for runs that start in the same instant, whose order a live run does not
    fix); return them."""
    runs = runs_seen(sidecar, len(expected))
    by_id = {run["id"]: run for run in runs}
    seen = [_seen(run, by_id) for run in runs]
    if any_order and len(runs) == len(expected):
        for order in itertools.permutations(range(len(runs))):
            if all(_matches(expect, seen[index])
                   for expect, index in zip(expected, order, strict=True)):
                runs, seen = [runs[i] for i in order], [seen[i] for i in order]
                break
    wanted = []
    for expect, got in zip(expected, seen, strict=False):
        wanted.append({f.name: (got[f.name] if getattr(expect, f.name) is UNCHECKED
                                else getattr(expect, f.name)) for f in fields(expect)})
    assert len(runs) == len(expected) and seen == wanted, (
        "runs differ\nexpected: " + json.dumps(wanted, indent=1) + "\nseen: "
        + json.dumps(seen, indent=1) + "\nactive/ended: "
        + json.dumps([(r["id"], r["state"]) for r in runs]))
    return runs


def _matches(expect: Expect, got: Mapping[str, Any]) -> bool:
    return all(getattr(expect, f.name) is UNCHECKED or got[f.name] == getattr(expect, f.name)
               for f in fields(expect))


def loop_expected(agent: str, limit_state: str = "tool_limit_reached",
                  limit_reason: str | None = "max_steps"
                  ) -> dict[str, tuple[Expect, str | None]]:
    """What every tracing setup around the hand-written loop reads, scenario by scenario (the
    run, its answer's text): 4 model calls and 3 tools, answered; the loop's own cap of 5
    tools; a failing tool, then the answer. ``limit_*``: how the setup's limit run ends."""
    return {
        "three_tools": (Expect(agent, 4, 3, 0, "completed", True, None, None), scenarios.ANSWER),
        "limit": (Expect(agent, 5, 5, 0, limit_state, False, limit_reason, None), None),
        "tool_error": (Expect(agent, 2, 1, 1, "completed", True, None, None),
                       scenarios.ERROR_ANSWER),
    }


TS_DIR = HERE / "ts"


def driver_env(sidecar: RunningServer, llm: FakeLLM, driver: str, scenario: str, model: str,
               record_to: Path | None = None) -> dict[str, str]:
    """A compiled or node driver's environment: its spans exported to the sidecar over
    OTLP/HTTP, its model ``model`` served by ``llm``; with ``RECORD_SPANS`` set, the export
    recorded as ``driver``'s ``scenario`` (else with ``record_to``, there)."""
    env = clean_environ()
    env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": sidecar.otlp_http,
                "FAKE_LLM_BASE_URL": llm.base_url, "FAKE_LLM_MODEL": model})
    if record_to is not None:
        env["RECORD_SPANS"] = str(record_to)
    if os.environ.get("RECORD_SPANS"):
        target = RECORDINGS / driver / f"{scenario}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        env["RECORD_SPANS"] = str(target)
    return env


def run_ts_driver(script: str, driver: str, scenario: str, sidecar: RunningServer,
                  llm: FakeLLM, model: str, record_to: Path | None = None) -> str:
    """``tests/frameworks/ts/SCRIPT`` (node, tsx) on ``scenario``: its spans exported to the
    sidecar, its model ``model`` served by ``llm`` (with ``RECORD_SPANS``: the export recorded
    as ``driver``'s; else with ``record_to``, there); its stdout."""
    env = driver_env(sidecar, llm, driver, scenario, model, record_to)
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
    result = subprocess.run(["node", "--import", "tsx", str(TS_DIR / script), scenario],
                            env=env, capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
                            cwd=TS_DIR, check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-6000:])
        raise AssertionError(f"{driver} {scenario} exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


@contextlib.contextmanager
def tool_budget_sidecar(tmp_path: Path, agent: str, budget: int) -> Iterator[RunningServer]:
    """A sidecar whose rule pack gives ``agent`` a budget of ``budget`` tool calls."""
    pack = tmp_path / "budget.yaml"
    pack.write_text(f"apiVersion: agent-watchdog/v1\nkind: RulePack\nname: tool-budget\n"
                    f"budgets:\n  - agents: [{agent}]\n    max_tool_calls: {budget}\n")
    with running_server(sidecar_config(tmp_path / "state", rules=(str(pack),),
                                       eval_interval=0.2)) as server:
        yield server


def check_tool_budget(sidecar: RunningServer, driver: str, scenario: str, expected: Expect,
                      budget: int) -> None:
    """A recording replayed request by request (each applied before the next) to a
    :func:`tool_budget_sidecar`: its one run reads ``expected``, the budget used up, and the
    last directive the budget's abort."""
    replay(sidecar, RECORDINGS / driver / f"{scenario}.jsonl", after_each=sidecar.flush)
    sidecar.stored()  # (the API reads the directives from their store, written on its lane)
    (run,) = check_runs(sidecar, [expected])
    assert (run["budget"]["max_tool_calls"], run["budget"]["remaining_tool_calls"]) == (
        budget, 0), run["budget"]
    said = [(directive["action"], directive["rule"]) for directive in run["directives"]]
    assert said[-1] == ("abort", "budget-exhausted"), said


def top_answers(sidecar: RunningServer) -> list[Any]:
    """The answer (``final_output``) of each run the sidecar lists that has no parent run,
    most recent first."""
    runs = [sidecar.get_json(f"/v1/runs/{run['id']}")
            for run in sidecar.get_json("/v1/runs?limit=10")["runs"]]
    return [run["final_output"] for run in runs if run["parent_run"] is None]


def loop_tests(env: str, driver: str, expected: Mapping[str, tuple[Expect, str | None]]
               ) -> tuple[Callable[..., None], Callable[..., None]]:
    """``test_live`` and ``test_recorded`` of a tracing setup around the hand-written loop
    (``drivers/_handwritten_loop.py``): each scenario of ``expected`` — its run, and its
    answer's text — driven live and replayed from its recording."""
    def answer_read(sidecar: RunningServer, scenario: str) -> None:
        runs = [sidecar.get_json(f"/v1/runs/{run['id']}")
                for run in sidecar.get_json("/v1/runs?limit=10")["runs"]]
        assert runs[0]["final_output"] == expected[scenario][1], runs[0]["final_output"]

    @pytest.mark.parametrize("scenario", sorted(expected))
    def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
        drive_and_check(sidecar, llm, env, driver, scenario, {"": scenarios.script(scenario)},
                        [expected[scenario][0]])
        answer_read(sidecar, scenario)

    @pytest.mark.parametrize("scenario", sorted(expected))
    def test_recorded(sidecar: RunningServer, scenario: str) -> None:
        check_recorded(sidecar, driver, scenario, [expected[scenario][0]])
        answer_read(sidecar, scenario)

    return test_live, test_recorded


def scenario_tests(env: str, driver: str, scripts: Mapping[str, Mapping[str, Script]],
                   expected: Mapping[str, Expect],
                   read: Callable[[RunningServer, str], None]
                   ) -> tuple[Callable[..., None], Callable[..., None]]:
    """``test_live`` and ``test_recorded`` of a framework's driver whose scenarios each make one
    run: ``expected``'s, then ``read`` (what else the test checks of it); live, the model also
    got as many requests as the run has iterations."""
    @pytest.mark.parametrize("scenario", sorted(expected))
    def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
        drive_and_check(sidecar, llm, env, driver, scenario, scripts[scenario],
                        [expected[scenario]])
        read(sidecar, scenario)
        assert len(llm.requests(f"{driver}-{scenario}")) == expected[scenario].iterations

    @pytest.mark.parametrize("scenario", sorted(expected))
    def test_recorded(sidecar: RunningServer, scenario: str) -> None:
        check_recorded(sidecar, driver, scenario, [expected[scenario]])
        read(sidecar, scenario)

    return test_live, test_recorded


def request_body(handler: BaseHTTPRequestHandler) -> bytes:
    """A request's body, whether sized or chunked (some agents' OTLP exporters chunk theirs)."""
    if handler.headers.get("Transfer-Encoding", "").lower() != "chunked":
        return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
    body = bytearray()
    while size := int(handler.rfile.readline().split(b";")[0], 16):
        body += handler.rfile.read(size)
        handler.rfile.readline()
    handler.rfile.readline()
    return bytes(body)


@contextlib.contextmanager
def otlp_recorder(sidecar: RunningServer, files: Mapping[str, Path]) -> Iterator[str]:
    """A relay in front of the sidecar's OTLP/HTTP receiver, for an agent that exports OTLP/JSON
    with no driver of ours (a binary): each export request to a path of ``files``
    (``/v1/traces``, ``/v1/logs``) is written to that file, one request a line as the agent sent
    it; every request is passed on. Yields the relay's URL."""
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
    lock = threading.Lock()

    class Relay(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = request_body(self)
            if self.path in files:
                with lock, files[self.path].open("a", encoding="utf-8") as out:
                    out.write(json.dumps(json.loads(body), separators=(",", ":")) + "\n")
            status, answer = http_request("POST", sidecar.otlp_http + self.path, body,
                                          {"Content-Type": "application/json"})
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    with http_served(Relay) as url:
        yield url


@contextlib.contextmanager
def recording_to(sidecar: RunningServer, folder: str, scenario: str) -> Iterator[str]:
    """Where an agent with no driver of ours exports its OpenTelemetry (OTLP/JSON): the sidecar's
    OTLP/HTTP receiver; with ``RECORD_SPANS`` set, an :func:`otlp_recorder` in front of it that
    keeps its traces as ``recordings/FOLDER/SCENARIO.jsonl`` and its log events as
    ``SCENARIO.logs.jsonl`` (its metrics are passed on only)."""
    if not os.environ.get("RECORD_SPANS"):
        yield sidecar.otlp_http
        return
    target = RECORDINGS / folder
    with otlp_recorder(sidecar, {"/v1/traces": target / f"{scenario}.jsonl",
                                 "/v1/logs": target / f"{scenario}.logs.jsonl"}) as url:
        yield url


def installed_bin(binary: Path) -> Path:
    """An npm-installed agent's ``node_modules/.bin`` entry, which ``make test`` installs (never a
    skip: its absence fails, naming the make target)."""
    target = (binary.parents[1] / ".installed").relative_to(Path(__file__).resolve().parents[2])
    assert binary.exists(), f"{binary} is missing: run `make {target}` (part of `make test`)"
    return binary


def run_coding_agent(command: Sequence[str], env: Mapping[str, str], work: Path
                     ) -> tuple[list[str], str]:
    """A coding agent's CLI run once in ``work`` (no input; it must exit 0): the terms its
    shell commands appended to ``ran.txt``, and what it printed on stdout."""
    result = subprocess.run(list(command), env=dict(env), capture_output=True, text=True,
                            timeout=DRIVER_TIMEOUT, cwd=work, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-6000:])
        raise AssertionError(f"{Path(command[0]).name} exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    ran = work / "ran.txt"
    terms = ran.read_text().splitlines() if ran.exists() else []
    return terms, result.stdout.strip()
