"""An upstream that compresses its answers though the endpoint asks for none (``Accept-Encoding:
identity``), on both relays, with the real ``openai`` and ``anthropic`` SDKs: with nothing to
change, the answer goes as it came (bytes and ``Content-Encoding``) and its call is booked from
its inflated bytes; with a bound on tool calls, a gzip or deflate answer is inflated, trimmed and
handed on plain; one in a coding the relays cannot read is not handed on (502, or a stream broken
off); a decompression bomb costs no more than the bounds."""

from __future__ import annotations

import gzip
import http.client
import itertools
import json
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import anthropic
import openai
import pytest

from tests.frameworks.fakellm import (
    Step,
    ToolCall,
    anthropic_events,
    anthropic_message,
    chunks,
    completion,
    response_events,
    response_object,
)
from tests.harness import RunningServer, http_served, running_server, sidecar_config, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)

KEY = "sk-compressed-0123456789"
TWO = Step(tool_calls=(ToolCall("search", {"q": "a"}), ToolCall("search", {"q": "b"})))
DONE = Step(text="The answer is 42.")
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}}]
ANTHROPIC_TOOLS = [{"name": "search", "input_schema": {"type": "object", "properties": {
    "q": {"type": "string"}}}}]
BOMB_BYTES = 80 * 1024 * 1024  # inflated: past the 64 MiB a whole response is read to
NUMBERS = itertools.count(100000)


def plain_answer(path: str, body: dict[str, Any]) -> bytes:
    """Two tool calls, or the answer once the request carries tool results."""
    last = body["messages"][-1]
    results = last.get("role") == "tool" or (isinstance(last.get("content"), list) and any(
        part.get("type") == "tool_result" for part in last["content"]))
    step = DONE if results else TWO
    number = next(NUMBERS)
    if path.endswith("/messages"):
        message = anthropic_message("m", f"msg-{number}", step, body)
        if not body.get("stream"):
            return json.dumps(message).encode()
        return b"".join(f"event: {name}\ndata: ".encode() + json.dumps(data).encode() + b"\n\n"
                        for name, data in anthropic_events(message))
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    if not body.get("stream"):
        return json.dumps(completion("m", f"chatcmpl-{number}", step, usage)).encode()
    asked = (body.get("stream_options") or {}).get("include_usage")
    return b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n"
                    for chunk in chunks("m", f"chatcmpl-{number}", step,
                                        usage if asked else None)) + b"data: [DONE]\n\n"


def compressed(data: bytes, coding: str) -> list[bytes]:
    """``data`` in ``coding``, in the pieces a streaming server sends (each event flushed)."""
    if coding == "br":  # (no brotli: bytes no relay reads, as a real br body would be)
        return [b"\x8b\x07\x80" + data]
    if coding == "bomb":
        return [BOMB]
    coding, _, tail = coding.partition("+")  # gzip+zeros: padded; gzip+junk: other bytes after
    if tail:
        return [*compressed(data, coding), b"\0" * 16 if tail == "zeros" else b"junk"]
    packer = zlib.compressobj(wbits=31 if coding == "gzip" else zlib.MAX_WBITS)
    pieces = [packer.compress(event + b"\n\n") + packer.flush(zlib.Z_SYNC_FLUSH)
              for event in data.split(b"\n\n") if event]
    return [*pieces, packer.flush()]


def send(handler: BaseHTTPRequestHandler, pieces: list[bytes], stream: bool,
         coding: str | None) -> None:
    """An answer of ``pieces`` in ``coding`` (None: plain), each sent at once, as a streaming
    server sends them."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream" if stream else "application/json")
    if coding is not None:
        handler.send_header("Content-Encoding", coding)
    handler.send_header("Content-Length", str(sum(map(len, pieces))))
    handler.end_headers()
    for piece in pieces:
        handler.wfile.write(piece)
        handler.wfile.flush()


BOMB = gzip.compress(b"data: " + b"0" * BOMB_BYTES, compresslevel=9)


class Upstream(BaseHTTPRequestHandler):
    """Answers in the coding the request's model names (gzip, deflate, br, bomb)."""

    protocol_version = "HTTP/1.1"
    sent: ClassVar[dict[str, bytes]] = {}  # each run's first answer, as it went

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        coding = body["model"]
        pieces = compressed(plain_answer(self.path, body), coding)
        data = b"".join(pieces)
        Upstream.sent[body["messages"][-1]["content"] if isinstance(
            body["messages"][-1]["content"], str) else "results"] = data
        send(self, pieces, bool(body.get("stream")),
             "gzip" if coding == "bomb" else coding.partition("+")[0])

    def log_message(self, format: str, *args: object) -> None:
        pass


def served(tmp_path_factory: pytest.TempPathFactory, upstream: type[BaseHTTPRequestHandler]
           ) -> Iterator[RunningServer]:
    """A sidecar whose model endpoint is in front of ``upstream`` (OpenAI and Anthropic)."""
    with http_served(upstream) as url:
        config = sidecar_config(tmp_path_factory.mktemp("state"), model_address="127.0.0.1:0",
                                model_upstream=url + "/v1", model_upstream_anthropic=url)
        with running_server(config) as server:
            yield server


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, model_relay: str  # noqa: F811
            ) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, Upstream)


def headers(run: str, budget: int | None) -> dict[str, str]:
    named = {"x-watchdog-run": run, "x-watchdog-agent": "compressed"}
    if budget is not None:
        named["x-watchdog-budget-tool-calls"] = str(budget)
    return named


def chat_turns(sidecar: RunningServer, coding: str, stream: bool, run: str,
               budget: int | None) -> list[str]:
    """An agent's two requests on the ``openai`` SDK: the ids of the calls it was handed."""
    client = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                           default_headers=headers(run, budget), timeout=30)
    messages: list[Any] = [{"role": "user", "content": run}]
    if stream:
        ids = [part.id for chunk in client.chat.completions.create(
            model=coding, messages=messages, tools=TOOLS, stream=True)
            for choice in chunk.choices for part in choice.delta.tool_calls or () if part.id]
    else:
        message = client.chat.completions.create(model=coding, messages=messages,
                                                 tools=TOOLS).choices[0].message
        ids = [part.id for part in message.tool_calls or ()]
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "search", "arguments": "{}"}}
        for i in ids]})
    messages += [{"role": "tool", "tool_call_id": i, "content": "found"} for i in ids]
    final = client.chat.completions.create(model=coding, messages=messages, tools=TOOLS)
    assert final.choices[0].message.content == DONE.text
    return ids


def messages_turns(sidecar: RunningServer, coding: str, stream: bool, run: str,
                   budget: int | None) -> list[str]:
    """The same agent on the ``anthropic`` SDK (Messages)."""
    client = anthropic.Anthropic(base_url=sidecar.url("model"), api_key=KEY, max_retries=0,
                                 default_headers=headers(run, budget), timeout=30)
    messages: list[Any] = [{"role": "user", "content": run}]
    if stream:
        with client.messages.stream(model=coding, max_tokens=100, messages=messages,
                                    tools=ANTHROPIC_TOOLS) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(model=coding, max_tokens=100, messages=messages,
                                         tools=ANTHROPIC_TOOLS)
    uses = [block for block in message.content if block.type == "tool_use"]
    messages.append({"role": "assistant", "content": [
        {"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}
        for use in uses]})
    messages.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": use.id, "content": "found"} for use in uses]})
    final = client.messages.create(model=coding, max_tokens=100, messages=messages,
                                   tools=ANTHROPIC_TOOLS)
    assert [block.text for block in final.content if block.type == "text"] == [DONE.text]
    return [use.id for use in uses]


TURNS = {"chat": chat_turns, "messages": messages_turns}


def booked(sidecar: RunningServer, run: str, tool_calls: int) -> dict[str, Any]:
    def read() -> dict[str, Any] | None:
        found = sidecar.get_json(f"/v1/runs/{run}")
        return found if (found["iterations"], found["tool_calls"], found["state"]) == (
            2, tool_calls, "ended") else None
    return wait_until(read, lambda: f"{run} booked: {sidecar.get_json('/v1/runs/' + run)}",
                      timeout=10)


@pytest.mark.parametrize("api", ["chat", "messages"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_answer_reaches_the_sdk_and_its_call_is_booked(
        sidecar: RunningServer, api: str, stream: bool, coding: str, model_relay: str  # noqa: F811
        ) -> None:
    run = f"free-{api}-{stream}-{coding}-{model_relay}"
    ids = TURNS[api](sidecar, coding, stream, run, None)
    assert len(ids) == 2 and len(set(ids)) == 2
    booked(sidecar, run, 2)


@pytest.mark.parametrize("api", ["chat", "messages"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_with_a_bound_a_compressed_answer_is_trimmed_and_handed_on_plain(
        sidecar: RunningServer, api: str, stream: bool, coding: str, model_relay: str  # noqa: F811
        ) -> None:
    run = f"bound-{api}-{stream}-{coding}-{model_relay}"
    ids = TURNS[api](sidecar, coding, stream, run, 1)
    assert len(ids) == 1
    booked(sidecar, run, 1)


def post(sidecar: RunningServer, run: str, coding: str, stream: bool, budget: int | None
         ) -> tuple[int, dict[str, str], bytes | Exception]:
    """A raw request: the status, headers and body the client got (or how reading it failed)."""
    connection = http.client.HTTPConnection("127.0.0.1", int(sidecar.url("model").rsplit(
        ":", 1)[1]), timeout=30)
    connection.request("POST", "/v1/chat/completions", json.dumps({
        "model": coding, "stream": stream, "messages": [{"role": "user", "content": run}],
        "tools": TOOLS}), {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}",
                           **headers(run, budget)})
    response = connection.getresponse()
    try:
        body: bytes | Exception = response.read()
    except http.client.HTTPException as exc:  # (an answer broken off)
        body = exc
    finally:
        connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("coding", ["gzip", "deflate", "br"])
def test_with_nothing_to_change_the_answer_goes_as_it_came(
        sidecar: RunningServer, stream: bool, coding: str, model_relay: str  # noqa: F811
        ) -> None:
    run = f"raw-{stream}-{coding}-{model_relay}"
    status, got, body = post(sidecar, run, coding, stream, None)
    assert status == 200 and got["content-encoding"] == coding
    assert body == Upstream.sent[run]


def broken_off(status: int, body: bytes | Exception) -> bool:
    """A stream broken off with no call in it: its head, then its body cut short."""
    return status == 200 and isinstance(body, http.client.IncompleteRead) \
        and b"search" not in body.partial


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_with_a_bound_a_coding_it_cannot_read_is_never_handed_on(
        sidecar: RunningServer, stream: bool, model_relay: str  # noqa: F811
        ) -> None:
    run = f"br-{stream}-{model_relay}"
    status, _, body = post(sidecar, run, "br", stream, 1)
    if stream:  # broken off: the client sees its answer cut short, with nothing of it
        assert broken_off(status, body), (status, body)
    else:
        assert status == 502 and isinstance(body, bytes)
        error = json.loads(body)["error"]
        assert error["code"] == "response_unjudged"
        assert "could not be checked against the run's tool-call budget" in error["message"]
        assert "cannot be reached" not in error["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_only_zero_padding_may_follow_the_compressed_data(
        sidecar: RunningServer, stream: bool, coding: str, model_relay: str  # noqa: F811
        ) -> None:
    """One rule for the bytes after the data (gzip's last member), whole or streamed, on both
    relays (``codings.inflate``, ``streams.Inflater``, the compiled relay's ``inflate.rs``):
    zero padding, which ``gzip -d`` takes, is read as the end; other bytes are of no coding
    (a whole answer too long to judge, a stream cut short)."""
    run = f"padded-{stream}-{coding}-{model_relay}"
    assert len(chat_turns(sidecar, coding + "+zeros", stream, run, 1)) == 1
    booked(sidecar, run, 1)
    run = f"junk-{stream}-{coding}-{model_relay}"
    status, _, body = post(sidecar, run, coding + "+junk", stream, 1)
    if stream:
        assert status == 200 and isinstance(body, http.client.IncompleteRead), (status, body)
    else:
        assert status == 502 and isinstance(body, bytes)
        error = json.loads(body)["error"]
        assert error["code"] == "response_unjudged"
        assert "not of its Content-Encoding" in error["message"], error


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("budget", [None, 1], ids=["free", "bound"])
def test_a_decompression_bomb_is_read_no_further_than_the_bounds(
        sidecar: RunningServer, stream: bool, budget: int | None,
        model_relay: str  # noqa: F811
        ) -> None:
    """80 MiB once inflated, from 80 KiB: with nothing to change it passes as it came; with a
    bound it is too long to judge (a whole response past 64 MiB, an event past 4 MiB), and
    the 502 says so (the aiohttp relay's said gzip was a coding it cannot read)."""
    run = f"bomb-{stream}-{budget}-{model_relay}"
    status, got, body = post(sidecar, run, "bomb", stream, budget)
    if budget is None:
        assert status == 200 and got["content-encoding"] == "gzip" and body == BOMB
    elif stream:
        assert broken_off(status, body), (status, body)
    else:
        assert status == 502 and isinstance(body, bytes)
        error = json.loads(body)["error"]
        assert error["code"] == "response_unjudged"
        assert "too long once inflated" in error["message"], error
        assert "cannot read" not in error["message"], error


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_stream_asked_for_its_usage_is_read_and_handed_on_without_it(
        sidecar: RunningServer, coding: str, model_relay: str  # noqa: F811
        ) -> None:
    """A budget in dollars: the endpoint asks the stream for its usage, reads it once inflated
    and leaves its usage-only chunk out (the client, which did not ask, never sees it)."""
    run = f"usage-{coding}-{model_relay}"
    client = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                           default_headers={**headers(run, None),
                                            "x-watchdog-budget-cost-usd": "5"}, timeout=30)
    got = list(client.chat.completions.create(model=coding, tools=TOOLS, stream=True,
                                              messages=[{"role": "user", "content": run}]))
    assert got and all(chunk.choices for chunk in got)  # no usage-only chunk
    assert sum(len(chunk.choices[0].delta.tool_calls or ()) for chunk in got) == 6  # 2 calls
    wait_until(lambda: sidecar.get_json(f"/v1/runs/{run}")["signals"]["total_tokens"] == 10,
               lambda: f"the stream's usage booked: {sidecar.get_json('/v1/runs/' + run)}",
               timeout=10)


class EchoingUpstream(Upstream):
    """A Responses API that echoes the ``instructions`` it was sent in every response object:
    whole, or streamed (``response.created``, ``.in_progress``, then ``.completed``,
    ``.incomplete`` or ``.failed``), in the coding its model names (``gzip:failed``...)."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        coding, _, end = body["model"].partition(":")
        response = response_object("m", f"resp_{next(NUMBERS)}", TWO, body)
        if body.get("stream"):
            started = {**response, "status": "in_progress", "output": []}
            ended = {**response, "status": end}
            text = b"".join(
                f"event: {name}\ndata: ".encode() + json.dumps({"type": name, **data}).encode()
                + b"\n\n" for name, data in (
                    ("response.created", {"response": started}),
                    ("response.in_progress", {"response": started}),
                    *[(name, data) for name, data in response_events(response)
                      if name.startswith("response.output_item")],
                    (f"response.{end}", {"response": ended})))
        else:
            text = json.dumps(response).encode()
        pieces = compressed(text, coding) if coding != "identity" else [text]
        send(self, pieces, bool(body.get("stream")), coding if coding != "identity" else None)


@pytest.fixture(scope="module")
def echoing_sidecar(tmp_path_factory: pytest.TempPathFactory, model_relay: str  # noqa: F811
            ) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, EchoingUpstream)


HUGE = "Follow the house style. " * 20_000  # ~480 KB of the client's own instructions


@pytest.mark.integration
@pytest.mark.parametrize("instructions", [
    "absent", None, "Be brief.", HUGE, [{"role": "developer", "content": "Be brief."}]],
    ids=["absent", "null", "short", "huge", "items"])
@pytest.mark.parametrize(("stream", "end"), [
    (False, "completed"), (True, "completed"), (True, "incomplete"), (True, "failed")],
    ids=["whole", "completed", "incomplete", "failed"])
@pytest.mark.parametrize("coding", ["identity", "gzip", "deflate"])
def test_the_echoed_instructions_are_the_clients_in_every_response_object_and_coding(
        echoing_sidecar: RunningServer, coding: str, stream: bool, end: str, instructions: Any
        ) -> None:
    """The note goes into ``instructions`` (a budget); the upstream echoes them, compressed or
    not, in each event that carries the response (created, in_progress, the terminal one
    whichever it is) or in the whole response: the client reads back only what it sent (none:
    null; input items: those items), never the note."""
    body: dict[str, Any] = {"model": f"{coding}:{end}", "input": "Find it.", "stream": stream,
                            "tools": [{"type": "function", "name": "search", "parameters": {
                                "type": "object", "properties": {}}}]}
    if instructions != "absent":
        body["instructions"] = instructions
    where = urlsplit(echoing_sidecar.url("model"))
    connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
    connection.request("POST", "/v1/responses", json.dumps(body), {
        "Authorization": f"Bearer {KEY}", "Content-Type": "application/json",
        "Accept-Encoding": "identity", "x-watchdog-budget-tool-calls": "3",
        "x-watchdog-run": f"echo-{coding}-{stream}-{end}-{len(str(instructions))}"})
    answer_ = connection.getresponse()
    data = answer_.read()
    connection.close()
    assert answer_.status == 200, data[:300]
    assert answer_.getheader("Content-Encoding") in (None, "identity"), "passed on plain"
    objects = [json.loads(line[6:])["response"] for line in data.split(b"\n")
               if line.startswith(b"data: ") and b'"response"' in line] if stream \
        else [json.loads(data)]
    expected = None if instructions == "absent" else instructions
    assert len(objects) == (3 if stream else 1), data[:300]
    assert [o["instructions"] for o in objects] == [expected] * len(objects)


NOTE_RULE = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: told
rules:
  - name: told-at-once
    description: A test's note for every request of its agent, with no bound on tool calls.
    when: "!run.ended && run.agent == 'told'"
    action: notify
    severity: warning
    message: "[fleet: search is slow today]"
"""


def decoded(data: bytes, coding: str) -> bytes:
    """A response's body as its coding says (br: as it came; the test's br is no real br)."""
    return gzip.decompress(data) if coding == "gzip" else data


@pytest.mark.integration
@pytest.mark.parametrize("coding", ["identity", "gzip", "br"])
@pytest.mark.parametrize("why", ["notify", "budget"])
def test_a_whole_response_whose_echo_cannot_be_set_back_is_not_passed_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_relay: str,  # noqa: F811
        why: str, coding: str) -> None:
    """A Responses request whose note went into ``instructions`` (a rule's ``notify``, with no
    bound on tool calls; or a budget's countdown), answered whole by an upstream that echoes
    them, in a response longer than the relays read (``MAX_RESPONSE_BYTES``, made 64 KiB
    here: the client's own instructions are ~480 KB) or in a coding they cannot read
    (``br``): its echo cannot be set back, so it is not passed on (502, ``response_unjudged``),
    as a stream whose events cannot be read is broken off; the note never reaches the client.
    One the relays can read gets its echo set back."""
    from watchdog.shell.model import native, streams
    for module in (native, streams):
        monkeypatch.setattr(module, "MAX_RESPONSE_BYTES", 64 * 1024)
    pack = tmp_path / "note.yaml"
    pack.write_text(NOTE_RULE)
    named = {"x-watchdog-agent": "told"} if why == "notify" else {
        "x-watchdog-budget-tool-calls": "3"}
    with http_served(EchoingUpstream) as url:
        config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                                model_upstream=url + "/v1", rules=(str(pack),))
        with running_server(config) as sidecar:
            where = urlsplit(sidecar.url("model"))
            for instructions, readable in ((HUGE, False), ("Be brief.", coding != "br")):
                connection = http.client.HTTPConnection(where.hostname or "", where.port,
                                                        timeout=30)
                connection.request("POST", "/v1/responses", json.dumps({
                    "model": f"{coding}:completed", "input": f"Find it {len(instructions)}.",
                    "instructions": instructions, "tools": [{
                        "type": "function", "name": "search", "parameters": {
                            "type": "object", "properties": {}}}]}), {
                    "Authorization": f"Bearer {KEY}", "Content-Type": "application/json",
                    "Accept-Encoding": "identity", **named})
                answer_ = connection.getresponse()
                data = decoded(answer_.read(), answer_.getheader("Content-Encoding") or "")
                connection.close()
                said = (instructions[:20], answer_.status, data[:300])
                assert b"[fleet:" not in data and b"[budget:" not in data, said
                if readable:
                    assert answer_.status == 200, said
                    assert json.loads(data)["instructions"] == instructions, said
                else:
                    assert answer_.status == 502, said
                    assert json.loads(data)["error"]["code"] == "response_unjudged", said
