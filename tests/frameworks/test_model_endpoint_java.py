"""Java agents steered through the sidecar's model endpoint with no code in them (DESIGN §12):
``java/`` (a Maven project, built by ``make test`` from Maven Central into the user's cache,
:mod:`tests.frameworks.jvm`), run by the JDK and pointed at a real sidecar by their base URL
alone, in front of the scripted upstream:

* LangChain4j: an ``AiServices`` agent with a ``@Tool`` method on ``OpenAiChatModel`` (``chat``)
  and ``OpenAiStreamingChatModel`` (``chat_stream``), ``baseUrl(OPENAI_BASE_URL)``, on its
  default HTTP client, the JDK's ``java.net.http.HttpClient``: every request of it is an
  HTTP/1.1 ``POST`` that also offers an upgrade to cleartext HTTP/2 (``Connection: Upgrade,
  HTTP2-Settings``, ``Upgrade: h2c``), which the endpoint declines by answering in HTTP/1.1;
* the anthropic-java SDK (its OkHttp client): a tool loop on Messages, streamed and not, its
  base URL ``ANTHROPIC_BASE_URL``.

A run, a JVM from start to exit, takes about 0.8 s (the build's class-data archive).

The three scenarios and the API key run with the other agents
(:mod:`tests.frameworks.test_model_endpoint_frameworks`); here, what the JDK's client sends, on
both relays."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest

from tests.frameworks import jvm
from tests.frameworks import test_model_endpoint_frameworks as shared
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.test_model_endpoint_frameworks import plain  # noqa: F401 (its sidecar)
from tests.harness import RunningServer
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

# -- what the JDK's HTTP client sends ---------------------------------------------------------

TAP_LIMIT = 1 << 20  # bytes kept per direction


class Tap:
    """A TCP relay in front of the sidecar's model port, keeping what went each way (its first
    MiB); it serves the one agent process of a test."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sent, self.answered = bytearray(), bytearray()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.threads: list[threading.Thread] = []
        self.sockets: list[socket.socket] = []
        self.closed = threading.Event()
        self.accepting = threading.Thread(target=self._accept, daemon=True)
        self.accepting.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target, timeout=30)
            self.sockets += [client, upstream]
            for source, sink, kept in ((client, upstream, self.sent),
                                       (upstream, client, self.answered)):
                thread = threading.Thread(target=self._pump, args=(source, sink, kept),
                                          daemon=True)
                thread.start()
                self.threads.append(thread)

    def _pump(self, source: socket.socket, sink: socket.socket, kept: bytearray) -> None:
        try:
            while data := source.recv(65536):
                if len(kept) < TAP_LIMIT:
                    kept.extend(data[:TAP_LIMIT - len(kept)])
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed.set()
        with suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.listener.close()
        self.accepting.join(timeout=10)
        for thread in self.threads:
            thread.join(timeout=10)
        for end in self.sockets:
            end.close()


@contextmanager
def tapped(sidecar: RunningServer) -> Iterator[Tap]:
    tap = Tap(sidecar.server.addresses["model"])
    try:
        yield tap
    finally:
        tap.close()


@pytest.mark.parametrize("mode", ["chat", "chat_stream"])
def test_the_jdk_clients_h2c_upgrade_offers_are_answered_in_http_1_1(
        plain: RunningServer, llm: FakeLLM, mode: str) -> None:  # noqa: F811
    """LangChain4j's default HTTP client, the JDK's, offers an upgrade to cleartext HTTP/2
    with every request to an ``http://`` URL, on a keep-alive connection: the endpoint answers
    each in HTTP/1.1 (never ``101 Switching Protocols``), the agent runs to its answer, and the
    offer's headers stay with the sidecar."""
    agent = shared.Agent("java", "langchain4j", mode)
    model = llm.script(f"{agent.name}-h2c", shared.counting(agent))
    env = shared.agent_env(plain, model)
    with tapped(plain) as tap:
        env["OPENAI_BASE_URL"] = tap.url + "/v1"
        result = jvm.run(agent.driver, agent.mode, env)
    assert result.stdout.splitlines()[-1] == (
        '{"ran":["alpha","beta"],"output":"' + shared.ANSWER + '"}')
    heads = re.findall(rb"POST /v1/chat/completions HTTP/1\.1\r\n(.*?)\r\n\r\n",
                       bytes(tap.sent), re.DOTALL)
    assert len(heads) == 3, bytes(tap.sent)[:2000]
    for head in heads:
        fields = {name.lower(): value for name, _, value in (
            line.decode().partition(": ") for line in head.split(b"\r\n"))}
        assert fields["upgrade"] == "h2c" and "http2-settings" in fields, fields
        assert {"upgrade", "http2-settings"} <= {
            token.strip().lower() for token in fields["connection"].split(",")}, fields
    statuses = re.findall(rb"HTTP/\d(?:\.\d)? \d{3}", bytes(tap.answered))
    assert statuses == [b"HTTP/1.1 200"] * 3, statuses
    for headers in llm.request_headers(model):
        assert not {"upgrade", "http2-settings"} & {name.lower() for name in headers}, headers
