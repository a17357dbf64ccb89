"""The compiled relay reads a stream as Python does: every stream the tests have (the scripted
upstream's streams of the three APIs, the trim and wire tests' odd events, odd JSON of its own)
and variants of each (other line ends, comments, split ``data:`` lines, compact JSON, cut short
anywhere, bytes changed at random) give the same :class:`Observation` from the Rust reader
(``_relay.Relay.observed``, what the relay hands back in a stream's ``done`` event) and from
:func:`watchdog.core.model.wire.read_stream` with the API's accumulator — or the Rust reader
declines, and the event loop reads the bytes as before. The streams the scripted upstream sends,
as they are and in the common variants, are never declined."""

from __future__ import annotations

import http.client
import json
import random
import select
import threading
import time

import pytest

from tests.frameworks.fakellm import FakeLLM, Step, ToolCall
from tests.test_model_trim_native import ANY, LEGACY, MAKERS, ODD, WIRES, WITH_ANSWER, with_odd
from tests.test_model_wire import ODD_EVENTS, THREE, chat_stream
from watchdog.core.model.wire import Observation, observation_of, read_stream
from watchdog.shell.model._relay import Relay

STEPS = {
    "three": THREE,
    "answers": WITH_ANSWER,
    "text": Step(text="Héllo 😀 there, \"quoted\" \\ and \u2028 done."),
    "empty": Step(text=""),
    "many": Step(tool_calls=tuple(ToolCall(f"t{i}", {"i": i}) for i in range(140))),
    "long_text": Step(text=" ".join(["wörd😀" * 20] * 700)),
    "long_args": Step(tool_calls=(ToolCall("big", {"s": "é" * 70_000}), ToolCall("after", {}))),
    "length": Step(text="cut", finish_reason="length"),
}


def python(api: str, data: bytes) -> Observation:
    accumulator = WIRES[api].accumulator()
    read_stream(accumulator, data)
    return accumulator.observation


def rust(api: str, data: bytes) -> Observation | None:
    fields = Relay.observed(api, data)
    return None if fields is None else observation_of(fields)


def alike(api: str, data: bytes) -> bool:
    """The two readers agree on ``data`` (or the Rust one declines): whether it read it."""
    got = rust(api, data)
    if got is not None:
        assert got == python(api, data), data[:300]
    return got is not None


# -- variants of a stream ---------------------------------------------------------------------

def events_of(stream: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in stream.split(b"\n\n")[:-1]]


def compact(stream: bytes) -> bytes:
    """Each event's JSON written as the vendors write it: no spaces, non-ASCII as it is."""
    out = []
    for event in events_of(stream):
        head, _, data = event[:-2].rpartition(b"data: ")
        try:
            value = json.loads(data)
        except ValueError:
            out.append(event)
            continue
        out.append(head + b"data: " + json.dumps(value, separators=(",", ":"),
                                                 ensure_ascii=False).encode() + b"\n\n")
    return b"".join(out)


def split_data(stream: bytes) -> bytes:
    """Each JSON object over two ``data:`` lines."""
    return stream.replace(b"data: {", b"data: {\ndata: ")


def commented(stream: bytes) -> bytes:
    return b": keep-alive\n\n".join(events_of(stream)) + b"event: ping\ndata: {}\n\n"


COMMON = {  # what servers send: never declined
    "as_is": lambda s: s, "compact": compact, "crlf": lambda s: s.replace(b"\n", b"\r\n"),
    "compact_crlf": lambda s: compact(s).replace(b"\n", b"\r\n"), "commented": commented,
    "split_data": split_data, "cr": lambda s: s.replace(b"\n", b"\r"),
}
ODDER = {  # what the tests' odd events make of it
    "odd": lambda s, api: with_odd(api, s),
    "odd_compact_crlf": lambda s, api: with_odd(api, compact(s)).replace(b"\n", b"\r\n"),
    **{f"wire_odd_{i}": (lambda s, api, odd=odd: odd + s[:len(s) // 2] + odd + s[len(s) // 2:])
       for i, odd in enumerate(ODD_EVENTS)},
}


@pytest.mark.parametrize("api", list(WIRES))
@pytest.mark.parametrize("step", list(STEPS))
@pytest.mark.parametrize("variant", list(COMMON))
def test_the_streams_servers_send_are_read_alike(api: str, step: str, variant: str) -> None:
    stream = COMMON[variant](MAKERS[api](STEPS[step]))
    assert alike(api, stream), "declined"
    assert alike(api, compact(stream)), "declined"


@pytest.mark.parametrize("api", list(WIRES))
@pytest.mark.parametrize("step", ["three", "answers", "text"])
@pytest.mark.parametrize("variant", list(ODDER))
def test_streams_with_odd_events_are_read_alike(api: str, step: str, variant: str) -> None:
    alike(api, ODDER[variant](MAKERS[api](STEPS[step]), api))


@pytest.mark.parametrize("api", list(WIRES))
@pytest.mark.parametrize("step", ["three", "answers", "long_args"])
def test_a_stream_cut_short_anywhere_is_read_alike(api: str, step: str) -> None:
    stream = compact(MAKERS[api](STEPS[step]))
    cuts = range(0, len(stream), max(1, len(stream) // 300))
    assert all(alike(api, stream[:cut]) for cut in cuts)  # a cut never makes it decline


@pytest.mark.parametrize("step", list(LEGACY))
@pytest.mark.parametrize("variant", [*COMMON, *ODDER])
def test_legacy_function_call_streams_are_read_alike(step: str, variant: str) -> None:
    """A stream in the legacy shape (``delta.function_call``): its call read alike, with the
    id of its own that the ``function`` message answering it names; as servers send it, never
    declined; cut short anywhere, read alike."""
    stream = chat_stream(LEGACY[step], legacy=True)
    if variant in COMMON:
        stream = COMMON[variant](stream)
        assert alike("chat", stream), "declined"
        calls = python("chat", stream).calls
        assert [(c.call_id, c.name) for c in calls] == [
            ("function_call:" + c.name, c.name) for c in LEGACY[step].tool_calls]
        assert [json.loads(c.arguments) for c in calls] == [
            c.arguments for c in LEGACY[step].tool_calls]
        cuts = range(0, len(stream), max(1, len(stream) // 100))
        assert all(alike("chat", stream[:cut]) for cut in cuts)
    else:
        alike("chat", ODDER[variant](stream, "chat"))


def mutated(stream: bytes, rng: random.Random) -> bytes:
    data = bytearray(stream)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data))
        choice = rng.random()
        if choice < 0.3:
            data[at] = rng.choice(b'{}[]":,\\\n\r0123456789-.eEaz \xc3\xff')
        elif choice < 0.5:
            del data[at:at + rng.randint(1, 12)]
        elif choice < 0.7:
            data[at:at] = rng.choice([b"\n\n", b"\r\n", b"data: ", b"\\u", b'"', b"NaN",
                                      b"\\ud800", b"1" * 30, b"true", b"\xc3\xa9"])
        else:
            end = min(len(data), at + rng.randint(1, 200))
            data[at:at] = data[at:end]  # a piece repeated
    return bytes(data)


@pytest.mark.parametrize("api", list(WIRES))
@pytest.mark.parametrize("variant", ["compact", "as_is", "crlf"])
def test_streams_changed_at_random_are_read_alike(api: str, variant: str) -> None:
    rng = random.Random(f"{api}-{variant}")
    read = 0
    for round_ in range(300):
        step = STEPS[rng.choice(["three", "answers", "text", "length"])]
        made = MAKERS[api](step)
        if api == "chat" and round_ % 4 == 1:  # in the legacy shape (delta.function_call)
            made = chat_stream(step, legacy=True)
        stream = COMMON[variant](made)
        if round_ % 3 == 0:
            stream = with_odd(api, stream)
        read += alike(api, mutated(stream, rng))
    assert read > 100  # most changes leave what the Rust reader can read


def chunk(**fields: object) -> bytes:
    return b"data: " + json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode() \
        + b"\n\n"


def delta(content: str | None = None, calls: list[object] | None = None,
          finish: str | None = None, **more: object) -> bytes:
    body: dict[str, object] = {}
    if content is not None:
        body["content"] = content
    if calls is not None:
        body["tool_calls"] = calls
    return chunk(id="c", choices=[{"index": 0, "delta": body, "finish_reason": finish}], **more)


HEAD = delta("", role="assistant")
# JSON each reader may read its own way: either they agree or the Rust reader declines
OWN: dict[str, list[bytes]] = {
    "chat": [
        HEAD + b'data: {"choices":[{"delta":{"content":"x"}}],"n":NaN}\n\n',
        HEAD + b'data: {"choices":[{"delta":{"content":"\\ud800"}}]}\n\n',
        HEAD + b'data: {"choices":[{"delta":{"content":"\\ud83d\\ude00 \\u00e9"}}]}\n\n',
        HEAD + b'data: {"choices":[{"delta":{"content":"deep"}}],"x":' + b"[" * 200
        + b"]" * 200 + b"}\n\n",
        HEAD + b'data: {"usage":{"prompt_tokens":' + b"9" * 5000 + b"}}\n\n",
        HEAD + b'data: {"choices":[],"usage":{"prompt_tokens":' + b"9" * 40 + b','
        b'"completion_tokens":1e3,"prompt_tokens_details":{"cached_tokens":true}}}\n\n',
        HEAD + b'data: {"choices":[],"usage":{"prompt_tokens":-5,"completion_tokens":12000000,'
        b'"prompt_tokens_details":{"cached_tokens":99}}}\n\n',
        HEAD + b'data: {"choices":[],"usage":0}\n\n' + b'data: {"choices":[],"usage":{}}\n\n',
        # parallel calls, their deltas interleaved and split; a bool index; custom tools
        delta(calls=[{"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}},
                     {"index": 1, "id": "b", "function": {"name": "g", "arguments": "{"}}])
        + delta(calls=[{"index": 1, "function": {"arguments": "}"}},
                       {"index": 0, "function": {"arguments": "{\"q\":1}"}}])
        + delta(calls=[{"index": True, "function": {"name": "h"}}, {"index": 1.0}, 7])
        + delta(calls=[{"index": 2, "custom": {"name": "patch", "input": "*** x"}},
                       {"index": 3, "function": {"name": "n", "arguments": None, "input": "i"}},
                       {"index": 4, "function": {"name": "m", "input": "only input"}}])
        + delta(calls=[{"index": 10 ** 30, "function": {"name": "huge"}}]),
        # plain text deltas the shortcut reads without parsing (in a stream read event by event)
        HEAD.replace(b"\n\n", b"\r\n\r\n") + b''.join(
            e.replace(b"\n\n", b"\r\n\r\n") for e in [
                b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"a\\"b\\u00e9\\n"},'
                b'"finish_reason":null}]}\n\n',
                b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"cut"}}]\n\n',
                b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"x"}}],"model":"m2"}'
                b'\n\n',
                b'data: {"id":"c","choices":[{"delta":{"content":"\\ud83d\\ude00"}}]}\n\n',
                b'data: {"id":"c","choices":[{"delta":{"content":"\\x"}}]}\n\n',
                b'data: {"id":"c","choices":[{"delta":{"content":"\\u12"}}]}\n\n',
                b'data: {"id":"c","choices":[{"delta":{"content":"tab\there"}}]}\n\n',
                b'data: {"id":"c","choices":[{"delta":{"content":""}}],"usage":null}\n\n',
                b'data: [{"choices":[{"delta":{"content":"list"}}]}]\n\n',
                b'data: {"id":"c","choices":[{"delta":{"content":"u"}}],"usage":{"a":1}}\n\n',
                b'data: {"id":"c","choices":[{"delta":{"content":"f","finish_reason":null}}],'
                b'"finish_reason":null}\n\n',
                b"data: [DONE]\n\n"]),
        (HEAD + b'data: {"id":"c","choices":[{"delta":{"content":"\\ud83d"}}]}\n\n')
        .replace(b"\n", b"\r\n"),  # a lone surrogate the text shortcut meets
        delta("m") + chunk(model="é" * 250, choices=[]) + chunk(model="", choices=[]),
        delta("x" * 70_000) + delta("more"),
        b'data: {"id":"c","choices":[{"delta":{"content":"a"}}]}\n\ndata: {"id":"c"} x\n\n',
        b'data: {"choices":[{"delta":{"content":"\xff"}}]}\n\n',
    ],
    "responses": [
        b'data: {"type":"response.created","response":{"id":"r1"}}\n\n'
        b'data: {"type":"response.output_text.delta","delta":"hi"}\n\n'
        b'data: {"type":"response.completed","response":{"id":"r2","model":"m","status":'
        b'"completed","usage":{"input_tokens":10,"output_tokens":2,"input_tokens_details":'
        b'{"cached_tokens":40}},"output":[{"type":"message","content":[{"type":"output_text",'
        b'"text":"a"},"s",{"content":[{"text":"n"}]},{"content":"c"},5]},{"type":"message",'
        b'"content":"whole"},{"type":"computer_call","call_id":"c1","action":{"y":2.50,"x":1,'
        b'"t":"\xc3\xa9\\u0001\\"","z":[1e400,-0,-0.0,1E5,null,true]}},{"type":"function_call",'
        b'"call_id":"f","name":"fn","arguments":null,"input":{"b":1}},{"type":"custom_tool_call",'
        b'"name":"","call_id":0},{"type":"shell_call"}]}}\n\n'
        b'data: {"type":"response.output_text.delta","delta":""}\n\n',
        b'data: {"type":"response.incomplete","response":{"status":"incomplete","output":[]}}'
        b'\n\n',
        b'data: {"type":"response.failed","response":{"output":[{"type":"function_call",'
        b'"name":5}]}}\n\n',
        b'data: {"type":"response.completed","response":{"output":[{"type":"function_call",'
        b'"name":"a","call_id":"x","arguments":"\\ud83d\\ude00"}]}}\n\n',
        b'data: {"type":"response.completed","response":[]}\n\n'
        b'data: {"type":["response.completed"],"response":{}}\n\n',
    ],
    "messages": [
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"m1","model":'
        b'"claude","usage":{"input_tokens":5,"cache_read_input_tokens":7,'
        b'"cache_creation_input_tokens":true,"output_tokens":1}}}\n\n'
        b'data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use",'
        b'"id":"t0","name":"a"}}\n\n'
        b'data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use",'
        b'"id":"t1","name":"b"}}\n\n'
        b'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
        b'"partial_json":"{\\"y\\""}}\n\n'
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta",'
        b'"partial_json":"{}"}}\n\n'
        b'data: {"type":"content_block_delta","index":true,"delta":{"type":"input_json_delta",'
        b'"partial_json":":1}"}}\n\n'
        b'data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use",'
        b'"id":"again"}}\n\n'
        b'data: {"type":"content_block_delta","index":9,"delta":{"type":"text_delta",'
        b'"text":"t"}}\n\n'
        b'data: {"type":"message_delta","delta":{"stop_reason":"pause_turn"},"usage":'
        b'{"output_tokens":3}}\n\n'
        b'data: {"type":"message_delta","delta":{"stop_reason":"new_reason"},"usage":{}}\n\n'
        b'data: {"type":"message_stop"}\n\n',
        b'data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use",'
        b'"id":7,"name":"a"}}\n\n',
        b'data: {"type":"message_start","message":{"usage":{"output_tokens":4}}}\n\n'
        b'data: {"type":"message_delta","delta":{"stop_reason":"refusal"},"usage":'
        b'{"output_tokens":-1}}\n\n',
    ],
}


@pytest.mark.parametrize("api", list(WIRES))
@pytest.mark.parametrize("variant", ["as_is", "crlf"])
def test_a_data_line_that_is_not_json_marks_the_answer_unreadable(api: str,
                                                                    variant: str) -> None:
    """A ``data:`` line no client reads (an SDK raises on it), at the start, mid-way or just
    before the end: both readers mark the answer unreadable, and read the rest as ever. JSON
    that is no object, ``[DONE]``, a comment: readable."""
    stream = MAKERS[api](STEPS["three"])
    events = events_of(stream)
    readable = python(api, stream)
    assert readable is not None and not readable.unreadable and readable.calls
    for at in (0, len(events) // 2, len(events) - 1):
        for line, unreadable in ((b"data: not json\n\n", True), (b"data: {\"a\": \n\n", True),
                                 (b"data: 5\n\n", False), (b"data: [DONE]\n\n", False),
                                 (b": keep-alive\n\n", False)):
            data = COMMON[variant](b"".join([*events[:at], line, *events[at:]]))
            seen, rusts = python(api, data), rust(api, data)
            assert rusts is not None and rusts == seen, (line, at)
            assert seen.unreadable is unreadable, (line, at)
            assert seen.calls == readable.calls, (line, at)


@pytest.mark.parametrize("api", list(WIRES))
def test_odd_json_is_read_alike_or_declined(api: str) -> None:
    cases = [*OWN[api], *OWN["chat"], *ODD[api], *ANY]
    for case in cases:
        for data in (case, case.replace(b"\n", b"\r\n"), with_odd(api, case)):
            alike(api, data)
    # what the Rust reader cannot be sure of, it leaves to Python
    assert rust("chat", OWN["chat"][0]) is None  # NaN
    assert rust("chat", OWN["chat"][1]) is None  # a lone surrogate
    assert rust("chat", OWN["chat"][3]) is None  # nesting past 128
    assert rust("chat", OWN["chat"][4]) is None  # an integer Python refuses
    assert rust("chat", OWN["chat"][2]) is not None  # a surrogate pair: read


def test_odd_json_the_rust_reader_reads_gives_what_python_reads() -> None:
    """A few of the odd cases, field by field (so a drift in one shows by name)."""
    seen = rust("responses", OWN["responses"][0])
    assert seen is not None and seen == python("responses", OWN["responses"][0])
    assert seen.response_id == "r2" and seen.cache_read_tokens == 10 and seen.text == "hi"
    assert [c.arguments for c in seen.calls][:2] == [
        '{"t": "\\u00e9\\u0001\\"", "x": 1, "y": 2.5, "z": [Infinity, 0, -0.0, 100000.0, '
        'null, true]}', '{"b": 1}']
    seen = rust("messages", OWN["messages"][0])
    assert seen == python("messages", OWN["messages"][0])
    assert seen is not None and seen.input_tokens == 12 and seen.finish_reason == "new_reason"
    assert [(c.call_id, c.arguments) for c in seen.calls] == [
        ("t0", "{}"), ("t1", '{"y":1}'), ("again", "")]
    assert rust("messages", OWN["messages"][1]) is None  # an id Python writes with str()
    chat = OWN["chat"][9]
    seen = rust("chat", chat)
    assert seen is not None and seen == python("chat", chat) and seen.complete


def n_choices_stream(chunk_per_choice: bool) -> bytes:
    """A stream of ``n`` = 2 answers: each a text and two calls, the second's named otherwise,
    their parts interleaved (a chunk for each choice's part, or one for both parts)."""
    def part(index: int, delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
        return {"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}

    rounds = [[part(choice, {"role": "assistant", "content": f"text{choice} "})
               for choice in range(2)],
              [part(choice, {"content": f"more{choice}"}) for choice in range(2)]]
    for call in range(2):
        rounds.append([part(choice, {"tool_calls": [{
            "index": call, "id": f"call_{choice}_{call}", "type": "function",
            "function": {"name": f"tool{choice}_{call}", "arguments": ""}}]})
            for choice in range(2)])
        rounds.append([part(choice, {"tool_calls": [{
            "index": call, "function": {"arguments": f'{{"c": {choice}}}'}}]})
            for choice in range(2)])
    rounds.append([part(1, {}, "length"), part(0, {}, "tool_calls")])
    chunks = [[one] for parts in rounds for one in parts] if chunk_per_choice else rounds
    events = [b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m",
                                      "choices": choices}, separators=(",", ":")).encode()
              + b"\n\n" for choices in chunks]
    return b"".join(events) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("chunk_per_choice", [True, False], ids=["chunk_each", "together"])
def test_a_stream_of_several_choices_is_read_as_its_first(chunk_per_choice: bool) -> None:
    """``n`` > 1: the answer read is the first choice's, as a whole response's ``choices[0]``
    is; another choice's text and calls (``index`` 1) are no part of it, by either reader (they
    were merged into the first's: a call named ``tool0_0tool1_0``, its arguments both)."""
    stream = n_choices_stream(chunk_per_choice)
    seen = python("chat", stream)
    assert seen.text == "text0 more0" and seen.finish_reason == "tool_calls" and seen.complete
    assert [(c.call_id, c.name, c.arguments) for c in seen.calls] == [
        ("call_0_0", "tool0_0", '{"c": 0}'), ("call_0_1", "tool0_1", '{"c": 0}')]
    assert rust("chat", stream) == seen


def test_a_bad_api_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not a model API"):
        Relay.observed("embeddings", b"")


def relayed(relay: Relay, url: str, body: dict[str, object], api: str,
            observe: bool = True) -> tuple[object, ...]:
    """``body`` sent through ``relay`` to ``url`` (forwarded with ``observe``, as the endpoint
    forwards a call of a run): the request's ``done`` event."""
    port = relay.port
    answer: list[bytes] = []

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("POST", "/v1/x", json.dumps(body), {"Content-Type": "application/json"})
        answer.append(connection.getresponse().read())
        connection.close()

    thread = threading.Thread(target=client)
    thread.start()
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            for event in relay.take():
                if event[0] == "request":
                    relay.forward(event[1], "POST", url, [("Content-Type", "application/json")],
                                  event[5], observe, api=api, watch=observe)
                elif event[0] == "done":
                    return tuple(event)
            select.select([relay.fd], [], [], max(deadline - time.monotonic(), 0))  # its wake
        raise AssertionError("no done event")
    finally:
        thread.join(10)


PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


@pytest.mark.integration  # a relay and a fake upstream on loopback ports
def test_a_relayed_stream_s_done_event_carries_what_it_said() -> None:
    """What the endpoint books a stream from: the relay's reading, Python's reading alike."""
    relay = Relay("127.0.0.1", 0, 1 << 20, 16, 5.0, 30.0, 1 << 22)
    try:
        with FakeLLM() as llm:
            llm.script("m", lambda index, body: THREE)
            for api, path in PATHS.items():
                url = llm.base_url + path
                done = relayed(relay, url, {"model": "m", "stream": True}, api)
                assert done[0:4] == ("done", done[1], 200, "ok") and done[8] is not None
                seen = observation_of(done[8])
                assert seen == python(api, done[4]) and len(seen.calls) == 3 and seen.complete
                # not observed, a whole response, an error: nothing read there
                assert relayed(relay, url, {"model": "m", "stream": True}, api,
                               observe=False)[8] is None
                assert relayed(relay, url, {"model": "m"}, api)[8] is None
                assert relayed(relay, url, {"model": "nobody", "stream": True}, api)[8] is None
    finally:
        relay.close()
