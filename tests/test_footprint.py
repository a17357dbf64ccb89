"""A served sidecar loads only what its configuration uses (docs/performance.md, Footprint).

Each test starts ``watchdog serve`` in a process of its own (``python -m watchdog serve``, run by
a small driver that prints the process's ``sys.modules`` on a signal) on free 127.0.0.1 ports
with a temporary state dir, and reads which libraries it holds. With the defaults, at idle, none
of those loaded on use: grpcio loads at the first connection to the gRPC port (which is bound
from the start), cel-expr-python when a rule first needs CEL (the shipped pack's checks ship with
it), genai-prices (and the pydantic it brings) once traffic has come, the compiled decode at the
first protobuf export, protobuf when a message needs it (OTLP/JSON, logs, an error's status),
decimal with genai-prices (the rules' and reports' rare uses load it then), and never
frozenlist's compiled module (aiohttp is imported with its Python twin), PyYAML (the default
pack is read ahead; a config file, ``WATCHDOG_WEBHOOKS`` or a rule file of yours loads it), the
webhooks' sender and the forwarder (each only when configured), the report prompts (at the
first directive), a run's report (at its first request), the model endpoint's steering (with
it), the span pipeline (the conventions and their tables: the first trace or logs export),
``hmac`` (where a bearer token is set), the IDNA codec (a listener's host that is not ASCII),
nor the directive store's reader thread (its first read) —
and then a model call is priced as the library itself prices it, a gRPC export is answered, a
rule decided by CEL fires, each export is read, a token is checked, a directive is delivered
to a webhook and carries its report prompt, an export is passed on upstream, and a report is
rendered.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from genai_prices import Usage, calc_price
from google.rpc import code_pb2
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.harness import http_request, run_detail, wait_until
from tests.ports import free_port
from tests.spans import T0, SpanMaker, chat_attrs, encode, tool_attrs
from tests.test_otlp_http import request_json
from watchdog.core.spans.logs import WAIT_SECONDS
from watchdog.shell.config import OFF, load
from watchdog.shell.errors import Code, ConfigError

ROOT = Path(__file__).resolve().parent.parent
WATCHED = ("grpc", "cel_expr_python", "genai_prices", "pydantic", "watchdog.shell.model.proxy",
           "google.protobuf", "watchdog.core.spans._native", "msgspec", "difflib", "decimal",
           "frozenlist._frozenlist", "yaml", "watchdog.shell.directives.webhooks",
           "watchdog.shell.receivers.forward", "watchdog.shell.receivers.passthrough",
           "watchdog.core.model.steer", "watchdog.core.runs.report",
           "watchdog.core.directives.prompt", "encodings.idna", "hmac")
# the span pipeline and the conventions with their tables, loaded by the first export (a trace
# or logs request, or a client's sync)
PIPELINE = ("watchdog.core.spans.pipeline", "watchdog.core.spans.conventions",
            "watchdog.core.spans.logs", "watchdog.core.spans.combined",
            "watchdog.core.spans.schema", "watchdog.core.spans.model_calls",
            "watchdog.core.spans.values")
# the sidecar's own modules loaded on use, but the compiled decode and the span pipeline
OWN = {name for name in WATCHED if name.startswith("watchdog.") and not name.endswith("_native")}
WATCHED += PIPELINE

# ``python -m watchdog serve``, with SIGUSR1 writing the names of the loaded modules to stdout
DRIVER = """
import json, runpy, signal, sys, threading
def show(*_):
    names = sorted(sys.modules)
    threads = sorted(thread.name for thread in threading.enumerate())
    sys.stdout.write(json.dumps({"modules": names, "threads": threads}) + "\\n")
    sys.stdout.flush()
signal.signal(signal.SIGUSR1, show)
sys.argv = ["watchdog", "serve"]
runpy.run_module("watchdog", run_name="__main__", alter_sys=True)
"""


class Served:
    def __init__(self, process: subprocess.Popen[str], ports: dict[str, int]) -> None:
        self.process = process
        self.ports = ports
        self.api = f"http://127.0.0.1:{ports['api']}"

    def modules(self) -> set[str]:
        """The modules the sidecar has imported, of those this test watches."""
        return {name for name in self._loaded()["modules"] if name in WATCHED}

    def threads(self) -> set[str]:
        """The names of the sidecar's threads."""
        return set(self._loaded()["threads"])

    def _loaded(self) -> dict[str, list[str]]:
        assert self.process.stdout is not None
        self.process.send_signal(signal.SIGUSR1)
        loaded: dict[str, list[str]] = json.loads(self.process.stdout.readline())
        return loaded

    def passes(self, task: str) -> float:
        """How many times the sidecar's timed loop ``task`` has passed (its metrics)."""
        status, body = http_request("GET", f"http://127.0.0.1:{self.ports['metrics']}/metrics")
        assert status == 200, body
        found = re.search(r'^agent_watchdog_background_passes_total\{outcome="ok",task="'
                          + re.escape(task) + r'"\} (\S+)$', body.decode(), re.M)
        return float(found.group(1)) if found else 0.0

    def export(self, body: bytes, content_type: str = "application/x-protobuf",
               path: str = "/v1/traces") -> bytes:
        status, answer = http_request(
            "POST", f"http://127.0.0.1:{self.ports['otlp_http']}{path}", body,
            {"Content-Type": content_type})
        assert status == 200, answer
        return answer


@contextmanager
def served(tmp_path: Path, **settings: str) -> Iterator[Served]:
    ports = {name: free_port() for name in ("otlp_http", "otlp_grpc", "api", "metrics")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    env.update({f"WATCHDOG_{name.upper()}_ADDRESS": f"127.0.0.1:{port}"
                for name, port in ports.items()})
    env.update({f"WATCHDOG_{key.upper()}": value for key, value in settings.items()})
    env.update(WATCHDOG_STATE_DIR=str(tmp_path / "state"), WATCHDOG_LOG_LEVEL="warning",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "client")]))
    process = subprocess.Popen([sys.executable, "-c", DRIVER], env=env, cwd=tmp_path,
                               stdout=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _ready(process, ports["metrics"]), "the sidecar ready", timeout=30)
        assert process.poll() is None, "the sidecar exited"
        yield Served(process, ports)
    finally:
        process.terminate()
        process.wait(30)


def _ready(process: subprocess.Popen[str], port: int) -> bool:
    """Ready, or exited (which the caller then reports)."""
    if process.poll() is not None:
        return True
    try:
        return http_request("GET", f"http://127.0.0.1:{port}/readyz", timeout=1)[0] == 200
    except OSError:
        return False


def priced_run(run_id: str) -> bytes:
    """One run: an agent span around a gpt-4o chat call with 1,200 input and 300 output
    tokens."""
    return priced_request(run_id).SerializeToString()


def priced_request(run_id: str) -> ExportTraceServiceRequest:
    maker = SpanMaker()
    with maker.agent(attrs={"watchdog.run.id": run_id}, end=T0 + 5):
        maker.span("chat gpt-4o", chat_attrs(1200, 300, **{
            "gen_ai.request.model": "gpt-4o", "gen_ai.provider.name": "openai",
            "watchdog.run.id": run_id}), start=T0 + 1, end=T0 + 2)
    return encode(maker.take())


def test_the_compiled_decode_loads_at_the_first_export_and_protobuf_when_it_is_needed(
        tmp_path: Path) -> None:
    """Idle, neither the compiled decode nor protobuf (and the OTLP messages) is loaded. A
    protobuf export loads the compiled decode, which reads it without protobuf (its full
    success is the empty message); an OTLP/JSON export, or a logs export, loads protobuf; every
    one is read."""
    with served(tmp_path, otlp_grpc_address="off", default_rules="false") as sidecar:
        assert sidecar.modules() == set()
        assert sidecar.export(priced_run("lazy-protobuf")) == b""
        assert sidecar.modules() >= {"watchdog.core.spans._native", *PIPELINE}
        assert "google.protobuf" not in sidecar.modules()
        assert wait_until(lambda: run_detail(sidecar.api, "lazy-protobuf"), "the run")
        assert sidecar.export(request_json(priced_request("lazy-json")),
                              "application/json") == b"{}"
        assert "google.protobuf" in sidecar.modules()
        assert wait_until(lambda: run_detail(sidecar.api, "lazy-json"), "the run")
        assert sidecar.export(ExportLogsServiceRequest().SerializeToString(),
                              path="/v1/logs") == b""


def test_the_span_pipeline_loads_at_the_first_logs_export_and_reads_the_traces_after(
        tmp_path: Path) -> None:
    """Idle, the span pipeline (the conventions and their tables) is not loaded; a logs export
    before any trace export loads it and is answered, and the traces that follow are read."""
    with served(tmp_path, otlp_grpc_address="off", default_rules="false") as sidecar:
        assert sidecar.modules() == set()
        assert sidecar.export(ExportLogsServiceRequest().SerializeToString(),
                              path="/v1/logs") == b""
        assert sidecar.export(b"{}", "application/json", path="/v1/logs") == b"{}"
        assert set(PIPELINE) <= sidecar.modules()
        assert sidecar.export(priced_run("after-logs")) == b""
        assert wait_until(lambda: run_detail(sidecar.api, "after-logs"), "the run")


def test_the_log_content_wait_default_is_the_pipelines() -> None:
    """The setting's default, read at start without the span pipeline, is the pipeline's own."""
    assert load(None, env={}).log_content_wait == WAIT_SECONDS


def test_a_listeners_ascii_host_is_resolved_without_the_idna_codec() -> None:
    """The start binds the gRPC port and probes the ports itself (``listen_addresses``): an
    ASCII host resolves as the IDNA codec would have encoded it, without loading the codec (the
    idle sidecars above never hold ``encodings.idna``); a name the codec refuses is an OSError
    (the start's one-line refusal), and a host that is not ASCII goes through the codec, as
    before."""
    script = """
import socket, sys
from watchdog.shell.receivers.lazy_grpc import listen_addresses
assert "encodings.idna" not in sys.modules
assert {a[4][0] for a in listen_addresses("127.0.0.1", 0)} == {"127.0.0.1"}
assert [a[4] for a in listen_addresses("localhost", 4317)] == [
    a[4] for a in socket.getaddrinfo(b"localhost", 4317, type=socket.SOCK_STREAM,
                                     flags=socket.AI_PASSIVE)]
assert "encodings.idna" not in sys.modules
for bad in ("a..b", "x" * 64 + ".example"):
    try:
        listen_addresses(bad, 0)
    except OSError:
        pass
    else:
        raise AssertionError(bad)
# (full-width digits: the codec's nameprep reads them as 127.0.0.1; no resolver is asked)
assert {a[4][0] for a in listen_addresses("\uff11\uff12\uff17.0.0.1", 0)} == {"127.0.0.1"}
assert "encodings.idna" in sys.modules
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_token_loads_the_comparison_which_checks_it(tmp_path: Path) -> None:
    """Without ``api_token`` (the defaults) no request is checked and ``hmac`` is not loaded;
    with one, each request's bearer token is compared with it."""
    token = "t" * 24
    with served(tmp_path, otlp_grpc_address="off", api_token=token) as sidecar:
        assert "hmac" not in sidecar.modules()
        assert http_request("GET", f"{sidecar.api}/v1/runs")[0] == 401
        assert http_request("GET", f"{sidecar.api}/v1/runs",
                            headers={"Authorization": f"Bearer {token}x"})[0] == 401
        assert http_request("GET", f"{sidecar.api}/v1/runs",
                            headers={"Authorization": f"Bearer {token}"})[0] == 200
        assert "hmac" in sidecar.modules()


def test_a_refusal_loads_protobuf_to_write_its_status(tmp_path: Path) -> None:
    """An export refused is answered a ``google.rpc.Status`` with its gRPC code: protobuf loads
    to write it."""
    with served(tmp_path, otlp_grpc_address="off") as sidecar:
        status, body = http_request(
            "POST", f"http://127.0.0.1:{sidecar.ports['otlp_http']}/v1/traces", b"\xff\xff",
            {"Content-Type": "application/x-protobuf"})
        assert status == 400
        answer = Status.FromString(body)
        assert answer.code == code_pb2.INVALID_ARGUMENT and "invalid OTLP" in answer.message
        assert "google.protobuf" in sidecar.modules()


def test_the_grpc_codes_are_google_rpcs() -> None:
    codes = {name: value for name, value in vars(Code).items() if name.isupper()}
    assert codes and codes == {name: getattr(code_pb2, name) for name in codes}


def test_without_grpc_or_rules_the_sidecar_loads_neither_grpcio_nor_cel(tmp_path: Path) -> None:
    with served(tmp_path, otlp_grpc_address="off", default_rules="false") as sidecar:
        assert sidecar.modules() == set()
        status, _ = http_request("GET", f"{sidecar.api}/v1/runs")
        assert status == 200


def test_with_the_defaults_nothing_loaded_on_use_is_loaded_at_idle(tmp_path: Path) -> None:
    with served(tmp_path, eval_interval="0.05", state_flush_interval="0.05") as sidecar:
        assert sidecar.modules() == set()
        # idle: the sidecar's own timed loops pass a few times and load nothing
        wait_until(lambda: min(sidecar.passes("evaluate"), sidecar.passes("state_flush")) >= 3,
                   "three passes of the evaluate and state_flush loops")
        assert sidecar.modules() == set()
        sidecar.export(priced_run("footprint-1"))
        assert {"genai_prices", "pydantic"} <= sidecar.modules()
        # the run is written at the next flush, by msgspec
        wait_until(lambda: "msgspec" in sidecar.modules(), "msgspec loaded to write the run")
        assert "grpc" not in sidecar.modules()  # OTLP/HTTP traffic leaves grpcio unloaded
        run: dict[str, Any] | None = wait_until(lambda: run_detail(sidecar.api, "footprint-1"),
                                                "the run")
        assert run is not None
        expected = float(calc_price(Usage(input_tokens=1200, output_tokens=300), "gpt-4o",
                                    provider_id="openai").total_price)
        assert abs(run["signals"]["cost_usd"] - expected) < 1e-12, run["signals"]
        assert "frozenlist._frozenlist" not in sidecar.modules()  # (its Python twin serves)


def test_the_grpc_port_is_bound_at_start_and_grpcio_loads_at_its_first_export(
        tmp_path: Path) -> None:
    with served(tmp_path) as sidecar:
        assert "grpc" not in sidecar.modules()
        with grpc.insecure_channel(f"127.0.0.1:{sidecar.ports['otlp_grpc']}") as channel:
            export = channel.unary_unary(
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                request_serializer=None, response_deserializer=None)
            for index in range(2):  # the first waits for grpcio, the second finds it
                answer = export(priced_run(f"footprint-grpc-{index}"), timeout=30)
                assert answer == b"", answer  # a full success: an empty response message
        assert "grpc" in sidecar.modules()
        for run_id in ("footprint-grpc-0", "footprint-grpc-1"):
            assert wait_until(functools.partial(run_detail, sidecar.api, run_id), run_id)


CEL_ONLY = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: cel-only
rules:
  - name: agent-a-repeats
    when: '!run.ended && string(run.repeated_tool_call).size() == 1 && run.repeated_tool_call >= 4'
    action: notify
    message: "a repeats"
"""


def _looping_export(sidecar: Served) -> None:
    maker = SpanMaker()
    now = time.time()
    root = maker.open("invoke_agent a", {"watchdog.run.id": "looping"}, start=now)
    for index in range(4):  # the same call 4 times
        maker.span("execute_tool fetch", tool_attrs("fetch", '{"q": 1}', "same",
                                                     **{"watchdog.run.id": "looping"}),
                   parent=root, start=now + index)
    sidecar.export(encode(maker.take()).SerializeToString())


def test_the_default_packs_loop_rules_fire_without_loading_cel(tmp_path: Path) -> None:
    with served(tmp_path, eval_interval="0.05") as sidecar:
        _looping_export(sidecar)
        fired = wait_until(lambda: _directives(sidecar.api, "looping"), "the directive")
        assert fired[0]["rule"] in ("tool-cycle", "repeated-tool-call"), fired
        assert "cel_expr_python" not in sidecar.modules()  # decided and rendered without it


def test_a_rule_only_cel_decides_fires_with_cel_loaded(tmp_path: Path) -> None:
    """An expression the shipped checks do not hold is checked by CEL at load (its clear
    message at start), so CEL is there when the rule is decided."""
    rules = tmp_path / "cel-only.yaml"
    rules.write_text(CEL_ONLY)
    with served(tmp_path, eval_interval="0.05", rules=str(rules),
                default_rules="false") as sidecar:
        _looping_export(sidecar)
        fired = wait_until(lambda: _directives(sidecar.api, "looping"), "the directive")
        assert [d["rule"] for d in fired] == ["agent-a-repeats"], fired
        assert {"cel_expr_python", "yaml"} <= sidecar.modules()  # (a rule file of yours: YAML)


def _directives(api: str, run_id: str) -> list[dict[str, Any]]:
    status, body = http_request("GET", f"{api}/v1/runs/{run_id}/directives")
    return json.loads(body)["directives"] if status == 200 else []  # type: ignore[no-any-return]


@pytest.mark.parametrize("relay", ["python", "native"])
def test_the_model_endpoints_modules_load_when_it_is_on(tmp_path: Path, relay: str) -> None:
    """Its own modules load with it; the conventions and their tables (what its wires hash a
    request with, its final-answer tools) at its first model request; the pipeline never."""
    port = free_port()
    with Upstream() as upstream, served(
            tmp_path, model_address=f"127.0.0.1:{port}", model_relay=relay,
            model_upstream=upstream.url + "/v1", otlp_grpc_address="off") as sidecar:
        assert sidecar.modules() == {"watchdog.shell.model.proxy", "watchdog.core.model.steer",
                                     "hmac"}
        status, _ = http_request("POST", f"http://127.0.0.1:{port}/v1/chat/completions",
                                 json.dumps({"model": "m", "messages": [
                                     {"role": "user", "content": "hi"}]}).encode(),
                                 {"Content-Type": "application/json"})
        assert status == 200 and [path for path, _ in upstream.received] == [
            "/v1/chat/completions"]
        loaded = sidecar.modules()
        assert {"watchdog.core.spans.conventions", "watchdog.core.spans.combined"} <= loaded
        assert "watchdog.core.spans.pipeline" not in loaded


def test_grpc_off_serves_without_grpcio_and_a_misspelling_is_refused(tmp_path: Path) -> None:
    with served(tmp_path, otlp_grpc_address="off") as sidecar:
        assert "grpc" not in sidecar.modules()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATCHDOG_")}
    env.update(WATCHDOG_OTLP_GRPC_ADDRESS="of", WATCHDOG_STATE_DIR=str(tmp_path / "state"),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "client")]))
    refused = subprocess.run([sys.executable, "-m", "watchdog", "serve"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "otlp_grpc_address='of' is not allowed" in refused.stderr
    assert "or off for no gRPC receiver" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_off_is_read_from_yaml_bare_or_quoted_and_from_the_environment(tmp_path: Path) -> None:
    for text in ("otlp_grpc_address: off\n", 'otlp_grpc_address: "off"\n'):
        path = tmp_path / "watchdog.yaml"
        path.write_text(text)
        assert load(str(path), env={}).otlp_grpc_address == OFF
    assert load(None, env={"WATCHDOG_OTLP_GRPC_ADDRESS": "off"}).otlp_grpc_address == OFF
    path.write_text("otlp_http_address: off\n")  # only the gRPC receiver can be off
    with pytest.raises(ConfigError, match="otlp_http_address=False is not allowed"):
        load(str(path), env={})


class Upstream:
    """An HTTP server on 127.0.0.1 that answers every POST 200 and keeps what it was sent
    (path and body): a forward endpoint's collector, or a webhook's receiver."""

    def __init__(self) -> None:
        self.received: list[tuple[str, bytes]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                received.append((self.path, self.rfile.read(length)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Upstream:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_first_directive_loads_the_report_prompts_and_the_first_report_the_report(
        tmp_path: Path) -> None:
    """Idle, neither a reporting directive's prompt nor a run's report is loaded; the first
    directive loads the prompts (a wind_down: its report prompt is made when it is read), the
    first request of a run's report the report. The steering board the model endpoint reads
    never loads without it."""
    with served(tmp_path, eval_interval="0.05") as sidecar:
        assert sidecar.modules() == set()
        # no runs to restore: the directive store's reader thread starts at its first read
        assert "watchdog-directives-read_0" not in sidecar.threads()
        _looping_export(sidecar)
        fired = wait_until(lambda: _directives(sidecar.api, "looping"), "the directive")
        assert "watchdog-directives-read_0" in sidecar.threads()
        assert fired[0]["action"] == "wind_down", fired
        assert fired[0]["report_prompt"].startswith("[agent-watchdog: system instruction."), fired
        assert sidecar.modules() & OWN == {"watchdog.core.directives.prompt"}
        status, body = http_request("GET", f"{sidecar.api}/v1/runs/looping/report")
        assert status == 200 and b"fetch" in body, body
        assert sidecar.modules() & OWN == {"watchdog.core.directives.prompt",
                                           "watchdog.core.runs.report"}


def test_a_forward_endpoint_loads_the_forwarder_which_passes_exports_on(tmp_path: Path) -> None:
    with Upstream() as upstream, served(tmp_path, forward_endpoint=upstream.url,
                                        otlp_grpc_address="off") as sidecar:
        # (not the webhooks' sender: the two read Retry-After with core.durations)
        assert sidecar.modules() == {"watchdog.shell.receivers.forward",
                                     "watchdog.shell.receivers.passthrough"}
        body = priced_run("forwarded")
        sidecar.export(body)
        wait_until(lambda: upstream.received, "the export passed on")
        assert upstream.received == [("/v1/traces", body)]


def test_a_webhook_loads_its_sender_which_delivers_the_directives(tmp_path: Path) -> None:
    """``WATCHDOG_WEBHOOKS`` is YAML: PyYAML loads to read it, and the webhooks' sender with
    it; a directive is then delivered."""
    with Upstream() as receiver:
        hooks = f"[{{url: '{receiver.url}/hook', secret: '{'s' * 32}'}}]"
        with served(tmp_path, eval_interval="0.05", webhooks=hooks) as sidecar:
            assert sidecar.modules() == {"yaml", "watchdog.shell.directives.webhooks", "hmac"}
            _looping_export(sidecar)
            wait_until(lambda: receiver.received, "the directive's webhook")
            path, body = receiver.received[0]
            assert path == "/hook" and json.loads(body)["run_id"] == "looping", body
