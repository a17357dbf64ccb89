"""The sidecar's own HTTP clients verify ``https`` servers against the CAs the process is given
(``SSL_CERT_FILE``, else the system's): the forward, a webhook and the model endpoint's
upstream (on each of its relays), each from a real sidecar to a real TLS server whose
certificate a test CA (trustme) signed. Trusting that CA, each request arrives; trusting
another, none does: the handshake fails and each client says so as it says any failure (the
forward's metrics, the webhook's delivery, a 502 from the endpoint). aiohttp's own contexts,
which the clients never use, hold no CA (their memory: docs/performance.md, Footprint)."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trustme

from tests.harness import RunningServer, http_request, running_server, sidecar_config, wait_until
from tests.model_relays import model_relay  # noqa: F401 (the endpoint's tests on both relays)
from tests.test_directives_e2e import CALLS, SECRET, Agent
from watchdog.shell import tls

ANSWER = {"id": "chatcmpl-tls", "object": "chat.completion", "model": "gpt-4o", "choices": [
    {"index": 0, "finish_reason": "stop",
     "message": {"role": "assistant", "content": "over TLS"}}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}


@dataclass
class TLSServer:
    """An HTTPS server on 127.0.0.1 with a certificate of ``ca``: every request's path kept."""

    url: str
    paths: list[str] = field(default_factory=list)


@contextmanager
def https_served(ca: trustme.CA) -> Iterator[TLSServer]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            paths.append(self.path)
            body = json.dumps(ANSWER).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield TLSServer(f"https://127.0.0.1:{server.server_address[1]}", paths)
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def trusting(ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process trusts ``ca`` alone (``SSL_CERT_FILE``) while the clients' context is made."""
    bundle = tmp_path / "trusted.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    tls.client_context.cache_clear()
    try:
        yield
    finally:
        tls.client_context.cache_clear()


@contextmanager
def sidecar_to(server: TLSServer, tmp_path: Path) -> Iterator[RunningServer]:
    config = sidecar_config(tmp_path / "state", forward_endpoint=server.url,
                            model_address="127.0.0.1:0", model_upstream=server.url + "/v1",
                            webhooks=({"url": server.url + "/hook", "secret": SECRET,
                                       "name": "tls"},))
    with running_server(config) as sidecar:
        yield sidecar


def ask_model(sidecar: RunningServer) -> tuple[int, bytes]:
    return http_request("POST", sidecar.url("model") + "/v1/chat/completions", json.dumps({
        "model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}).encode(),
        {"Content-Type": "application/json", "Authorization": "Bearer sk-tls-test"})


def fire_a_directive(sidecar: RunningServer) -> None:
    """Spans (which the forward sends on) of a run whose budget counts down (3 of 6 left at
    its third call): a directive, which the webhook delivers."""
    agent = Agent(sidecar, "tls-run", "tls-agent", max_tool_calls=6)
    for tool, args, result in CALLS[:3]:
        agent.tool(tool, args, result)


def forward_retries(sidecar: RunningServer) -> float:
    _, body = http_request("GET", sidecar.metrics + "/metrics")
    prefix = 'agent_watchdog_forwarded_total{outcome="retried",signal="traces"} '
    return sum(float(line.removeprefix(prefix)) for line in body.decode().splitlines()
               if line.startswith(prefix))


def test_each_client_reaches_a_server_its_trusted_ca_signed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = trustme.CA()
    with https_served(ca) as server, trusting(ca, tmp_path, monkeypatch), \
            sidecar_to(server, tmp_path) as sidecar:
        status, body = ask_model(sidecar)
        assert status == 200 and json.loads(body) == ANSWER
        fire_a_directive(sidecar)
        wait_until(lambda: {"/v1/chat/completions", "/v1/traces", "/hook"} <= set(server.paths),
                   lambda: f"each client's request over TLS (arrived: {server.paths})")


def test_no_client_reaches_a_server_another_ca_signed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with https_served(trustme.CA()) as server, trusting(trustme.CA(), tmp_path, monkeypatch), \
            sidecar_to(server, tmp_path) as sidecar:
        status, body = ask_model(sidecar)
        assert status == 502, (status, body)
        fire_a_directive(sidecar)
        assert sidecar.server.outbox is not None
        store = sidecar.server.outbox.store
        wait_until(lambda: forward_retries(sidecar) >= 1, "the forward's failed attempt")
        failed = wait_until(lambda: [row.last_error for row in store.deliveries()
                                     if row.last_error], "the webhook's failed attempt")
        assert "CERTIFICATE_VERIFY_FAILED" in failed[0], failed
        assert server.paths == []


def test_the_model_endpoint_reaches_its_upstream_through_an_https_proxy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``http`` upstreams behind an ``https`` proxy (``HTTP_PROXY``): the TLS to the proxy is
    verified as an upstream's would be, and the request goes through it."""
    ca = trustme.CA()
    with https_served(ca) as proxy, trusting(ca, tmp_path, monkeypatch):
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # (the test's own requests go direct)
        monkeypatch.delenv("no_proxy", raising=False)
        config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                                model_upstream="http://upstream.invalid/v1",
                                model_upstream_anthropic="http://upstream.invalid")
        with running_server(config) as sidecar:
            status, body = ask_model(sidecar)
        assert status == 200 and json.loads(body) == ANSWER, (status, body)
        assert proxy.paths == ["http://upstream.invalid/v1/chat/completions"]


def test_aiohttps_own_contexts_hold_no_ca_and_the_environment_is_as_it_was() -> None:
    probe = ("import json, os, watchdog.shell, aiohttp.connector as c; print(json.dumps("
             "[c._SSL_CONTEXT_VERIFIED.cert_store_stats()['x509_ca'], "
             "c._SSL_CONTEXT_UNVERIFIED.cert_store_stats()['x509_ca'], "
             "os.environ.get('SSL_CERT_FILE'), os.environ.get('SSL_CERT_DIR'), "
             "watchdog.shell.tls.client_context().cert_store_stats()['x509_ca'] > 0]))")
    env = {**os.environ, "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}
    env.pop("SSL_CERT_DIR", None)
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == [0, 0, "/etc/ssl/certs/ca-certificates.crt", None, True]
