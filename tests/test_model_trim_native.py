"""The compiled relay trims as the Python relay does: the same scripted responses (the fake
upstream's streams and whole bodies of the three APIs, with odd events, odd JSON and odd byte
splits mixed in) bounded to ``keep`` tool calls give the agent the same bytes, and the same
word on whether they were changed, from the Rust trim (``_relay.Relay.trimmed``, what the relay
runs on each response of a budgeted run) and from the wire modules as
``streams.relay_stream`` and ``relay_json`` drive them."""

from __future__ import annotations

import json
from collections.abc import Container

import pytest

from tests.frameworks.fakellm import (
    Step,
    ToolCall,
    anthropic_message,
    completion,
    response_object,
)
from tests.test_model_wire import THREE, anthropic_stream, chat_stream, responses_stream
from watchdog.core.model.chat import ChatWire, usage_only
from watchdog.core.model.messages import MessagesWire
from watchdog.core.model.responses import ResponsesWire
from watchdog.core.model.steer import answer_tools, kept_calls
from watchdog.core.model.wire import SSEReader, Unjudged, Wire, dumps, judged, read_stream
from watchdog.core.model.wire import ToolCall as Call
from watchdog.shell.model._relay import Relay

WIRES: dict[str, Wire] = {"chat": ChatWire(), "responses": ResponsesWire(),
                          "messages": MessagesWire()}
MAKERS = {"chat": chat_stream, "responses": responses_stream, "messages": anthropic_stream}
ANSWER_TOOLS, ANSWER_TOOL_PREFIXES = answer_tools()
ANSWERS = (sorted(ANSWER_TOOLS), list(ANSWER_TOOL_PREFIXES))
WITH_ANSWER = Step(text="Done.", tool_calls=(
    ToolCall("a", {"x": 1}), ToolCall("final_result", {"answer": "42"}),
    ToolCall("b", {"y": 2}), ToolCall("final_result_x", {"z": "é"}), ToolCall("c", {})))


def python_stream(api: str, keep: int | None, chunks: list[bytes], hide_usage: bool = False,
                  offered: Container[str] | None = None) -> tuple[bytes, bool] | None:
    """What :func:`watchdog.shell.model.streams.relay_stream` passes on with a bound (not a
    final request's; ``keep`` None: none) or asked for its usage (``hide_usage``): each chunk's
    events rewritten, the usage-only chunk left out, what is left of an event cut short at the
    end; and whether a call was trimmed. None: the answer ends (an event too long to read, or
    JSON it cannot judge). ``offered``: the final-answer tools the request offers (None: any,
    as the Rust trim here reads them)."""
    reader = SSEReader()
    trimmer = WIRES[api].stream_trimmer(keep, None, offered) if keep is not None else None
    out, changed = b"", False
    for chunk in chunks:
        events = reader.feed(chunk)
        if reader.broken:
            return None
        try:
            for event in events:
                if hide_usage and usage_only(event):
                    continue
                part = trimmer.rewrite(event) if trimmer is not None else event.raw
                changed = changed or part is not event.raw
                out += part
        except Unjudged:
            return None
    return out + reader.rest(), changed


def python_whole(api: str, keep: int, data: bytes, offered: Container[str] | None = None
                 ) -> tuple[bytes, bool] | None:
    """What :func:`watchdog.shell.model.streams.relay_json` passes on with a bound (None: a
    502, JSON it cannot judge; ``offered``: as for :func:`python_stream`)."""
    try:
        body = judged(data)
    except Unjudged:
        return None
    except ValueError:
        return data, False
    if isinstance(body, dict) and WIRES[api].trim(body, keep, None, offered):
        return dumps(body), True
    return data, False


def rust(api: str, keep: int | None, chunks: list[bytes], stream: bool,
         hide_usage: bool = False) -> tuple[bytes, bool] | None:
    return Relay.trimmed(api, keep, chunks, stream, *ANSWERS, hide_usage=hide_usage)


def split(data: bytes, size: int) -> list[bytes]:
    return [data[at:at + size] for at in range(0, len(data), size)] or [b""]


# events whose JSON is written back in another form when they are changed: numbers as Python
# writes them, escapes, repeated keys, a bool index, non-ASCII, bad UTF-8
ODD_JSON = ('"n":[1.50,1E5,-0,1e-7,1.0e16,12345678901234567890123,1e400,-0.0,0.0001,2.5E-5],'
            '"s":"\\u00e9\\u2028\\t\\u0001\\/\\"q\\"","d":1,"d":2,"u":"\xc3\xa9"')
ODD = {
    "chat": [
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"id":"q","function":'
        b'{"name":"zz","arguments":""}}]},"finish_reason":null}],' + ODD_JSON.encode() + b"}\n\n",
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":true,"function":'
        b'{"name":"t"}}, 7, {"index":1.0}]},"finish_reason":null}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":4,"function":'
        b'{"name":"final_result"}}],"role":""},"finish_reason":null}],"usage":{}}\n\n',
        b'data: {"choices":[{"delta":{},"finish_reason":"tool_calls"},"x",{"delta":[]}]}\n\n',
        b'data: {"choices":{"tool_calls":1}}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"tool\\u005fcalls":[{"index":9,"function":'
        b'{"name":"esc"}}]}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":5,"function":'
        b'{"name":"bad \xff\xfe utf8"}}]}}]}\n\n',
        # legacy function calls: one with odd JSON, its arguments apart, one of another
        # type, one whose key is escaped, a final answer's, a finish reason of their own
        b'data: {"choices":[{"index":0,"delta":{"function_call":{"name":"legacy","arguments":'
        b'"{\\"a\\": 1"}},"finish_reason":null}],' + ODD_JSON.encode() + b"}\n\n",
        b'data: {"choices":[{"index":0,"delta":{"function_call":{"arguments":"}"},'
        b'"content":null}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"function_call":"str","tool_calls":[]}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"function\\u005fcall":{"name":"esc"}}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"function_call":{"name":"final_result",'
        b'"arguments":""}}}]}\n\n',
        b'data: {"choices":[{"delta":{},"finish_reason":"function_call"}]}\n\n',
    ],
    "responses": [
        b'event: response.output_item.added\ndata: {"type":"response.output_item.added",'
        b'"output_index":7,"sequence_number":3,"item":{"type":"function_call","name":"late",'
        + ODD_JSON.encode() + b'}}\n\n',
        b'event:response.function_call_arguments.delta\ndata: {"type":'
        b'"response.function_call_arguments.delta","output_index":7,"delta":"{}"}\n\n',
        b'data: {"type":"response.output_item.added","output_index":true,"item":'
        b'{"type":"function_call","name":"final_result"}}\n\n',
        b'data: {"type":"response.completed","sequence_number":99,"response":{"output":'
        b'[{"type":"function_call","name":"p"},{"type":"function_call","name":"q"},'
        b'{"type":"message"}],"temperature":1.0,"top_p":1}}\n\n',
        # the calls of the tools the agent carries out, and of those the server runs
        b'data: {"type":"response.output_item.added","output_index":8,"item":{"type":'
        b'"custom_tool_call","call_id":"c8","name":"apply_patch","input":""}}\n\n',
        b'data: {"type":"response.custom_tool_call_input.delta","output_index":8,'
        b'"delta":"*** Begin"}\n\n',
        b'data: {"type":"response.output_item.added","output_index":9,"item":{"type":'
        b'"web_search_call","id":"ws_9"}}\n\n',
        b'data: {"type":"response.output_item.added","output_index":10,"item":{"type":'
        b'"computer_call","call_id":"c10","action":{"type":"click","x":1.50}}}\n\n',
        b'data: {"type":"response.output_item.done","output_index":11,"item":{"type":'
        b'"local_shell_call","call_id":"c11"}}\n\n',
        b'data: {"type":"response.output_item.added","output_index":12,"item":{"type":'
        b'"shell_call","call_id":"c12"}}\n\n',
        b'data: {"type":"response.output_item.added","output_index":13,"item":{"type":'
        b'"apply_patch_call","call_id":"c13"}}\n\n',
        b'data: {"type":"response.completed","response":{"output":[{"type":'
        b'"custom_tool_call","name":"x"},{"type":"web_search_call"},{"type":"computer_call"},'
        b'{"type":"shell_call"},{"type":"local_shell_call"},{"type":"apply_patch_call"},'
        b'{"type":"mcp_call","name":"m"},{"type":"function_call","name":"p"}]}}\n\n',
    ],
    "messages": [
        b'event: content_block_start\ndata: {"type":"content_block_start","index":5,'
        b'"content_block":{"type":"tool_use","name":"late","input":{},' + ODD_JSON.encode()
        + b'}}\n\n',
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":5,"delta":'
        b'{"type":"input_json_delta","partial_json":"{\\"a\\": 1.50}"}}\n\n',
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":6}\n\n',
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
        b'"tool_use"},"usage":{"output_tokens":1.0}}\n\n',
    ],
}
ANY = [b"data: [DONE]\n\n", b": comment\n\n", b"\n\n", b"data\n\n", b"id: 3\ndata: {}\n\n",
       b"data: {\"a\":1}\ndata: {\"b\":2}\n\n", b"data: [1, 2]\n\n", b"data:{\"x\":1}\r\n\r\n",
       b"data: {\"y\":2}\r\r", b"data: {\"z\":3}\r\n\n", b"event: \ndata: {}\n\n"]


def with_odd(api: str, stream: bytes) -> bytes:
    """``stream`` with the odd events of its API and of any first, amid and last."""
    events = stream.split(b"\n\n")
    odd = b"".join(ODD[api]) + b"".join(ANY)
    return odd + b"\n\n".join(events[:3]) + b"\n\n" + odd + b"\n\n".join(events[3:]) + odd


@pytest.mark.parametrize("api", list(WIRES))
@pytest.mark.parametrize("keep", [0, 1, 2, 3, 9])
@pytest.mark.parametrize("step", [THREE, WITH_ANSWER], ids=["three", "answers"])
@pytest.mark.parametrize("odd", [False, True])
@pytest.mark.parametrize("size", [1, 7, 100_000])
def test_streams_trimmed_alike(api: str, keep: int, step: Step, odd: bool, size: int) -> None:
    stream = MAKERS[api](step)
    if odd:
        stream = with_odd(api, stream)
    chunks = split(stream, size)
    expected = python_stream(api, keep, chunks)
    assert rust(api, keep, chunks, True) == expected
    if not odd:  # the agent is handed at most keep calls (and every final-answer call)
        accumulator = WIRES[api].accumulator()
        read_stream(accumulator, expected[0])
        names = [c.name for c in accumulator.observation.calls]
        assert names == [c.name for c in kept_calls(
            [Call("", c.name, "") for c in step.tool_calls], keep)]
        assert expected[1] == (keep < 3)


def choices_stream(answers: list[list[str]], together: bool) -> tuple[bytes, bytes]:
    """A Chat Completions answer of ``n`` = len(answers) choices, each calling the tools it
    names: streamed (a chunk for each choice's part, or one for the parts of all choices at
    once) and whole."""
    def call(choice: int, at: int, name: str) -> dict[str, object]:
        return {"index": at, "id": f"call_{choice}_{at}", "type": "function",
                "function": {"name": name, "arguments": "{}"}}

    rounds = [[{"index": choice, "delta": {"tool_calls": [call(choice, at, name)]},
                "finish_reason": None} for choice, names in enumerate(answers)
               if at < len(names) for name in [names[at]]]
              for at in range(max(map(len, answers)))]
    rounds.append([{"index": choice, "delta": {},
                    "finish_reason": "tool_calls" if answers[choice] else "stop"}
                   for choice in reversed(range(len(answers)))])
    chunks = rounds if together else [[one] for parts in rounds for one in parts]
    stream = b"".join(b"data: %s\n\n" % json.dumps(
        {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": parts}).encode()
        for parts in chunks) + b"data: [DONE]\n\n"
    whole = json.dumps({"id": "c", "object": "chat.completion", "model": "m", "choices": [
        {"index": choice, "finish_reason": "tool_calls" if names else "stop", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [call(choice, at, name) for at, name in enumerate(names)]}}
        for choice, names in enumerate(answers)]}).encode()
    return stream, whole


@pytest.mark.parametrize("together", [False, True], ids=["chunk_each", "together"])
@pytest.mark.parametrize("keep", [0, 1, 2])
@pytest.mark.parametrize("answers", [
    [["final_result"], ["search", "search", "search"]],
    [["search", "search"], ["final_result", "search", "search"]],
    [[], ["search", "search"], ["search"]]], ids=["answer_first", "answer_second", "three"])
def test_the_choices_of_a_stream_are_trimmed_each_as_a_whole_answers_are(
        keep: int, answers: list[list[str]], together: bool) -> None:
    """``n`` > 1: each choice of a stream is handed at most the calls left (and its
    final-answer calls), as each choice of a whole response is, by both trimmers. (The calls
    were counted across choices by their index alone: a choice whose first call was another's
    final answer was handed one more.)"""
    stream, whole = choices_stream(answers, together)
    trimmed = python_stream("chat", keep, [stream])
    assert trimmed is not None and rust("chat", keep, [stream], True) == trimmed
    handed: dict[int, list[tuple[int, str]]] = {}
    finish: dict[int, str] = {}
    for event in trimmed[0].split(b"\n\n"):
        if not event.startswith(b"data: {"):
            continue
        for choice in json.loads(event[6:])["choices"]:
            handed.setdefault(choice["index"], []).extend(
                (call["index"], call["function"]["name"])
                for call in choice["delta"].get("tool_calls", ()))
            if choice["finish_reason"]:
                finish[choice["index"]] = choice["finish_reason"]
    expected = python_whole("chat", keep, whole)
    assert expected is not None
    for message in json.loads(expected[0])["choices"]:
        calls = message["message"].get("tool_calls", [])
        assert handed.get(message["index"], []) == [
            (at, call["function"]["name"]) for at, call in enumerate(calls)]
        assert finish[message["index"]] == message["finish_reason"]


LEGACY = {"call": Step(tool_calls=(ToolCall("search", {"q": "é"}),)),
          "answer": Step(text="Done.", tool_calls=(ToolCall("final_result", {"answer": "42"}),)),
          "text": Step(text="No call.")}


@pytest.mark.parametrize("keep", [0, 1])
@pytest.mark.parametrize("step", list(LEGACY))
@pytest.mark.parametrize("odd", [False, True])
@pytest.mark.parametrize("size", [1, 7, 100_000])
def test_legacy_function_calls_trimmed_alike(keep: int, step: str, odd: bool,
                                             size: int) -> None:
    """A Chat Completions response in the legacy shape (``delta.function_call``,
    ``message.function_call``): its call past the budget left out by both relays alike,
    streamed and whole, its finish reason then "stop"; a final answer's call kept."""
    stream = chat_stream(LEGACY[step], legacy=True)
    if odd:
        stream = with_odd("chat", stream)
    chunks = split(stream, size)
    expected = python_stream("chat", keep, chunks)
    assert expected is not None
    assert rust("chat", keep, chunks, True) == expected
    data = json.dumps(completion("m", "chatcmpl-1", LEGACY[step], {"prompt_tokens": 7},
                                 legacy=True)).encode()
    whole_expected = python_whole("chat", keep, data)
    assert whole_expected is not None
    assert rust("chat", keep, split(data, 5), False) == whole_expected
    if odd:
        return
    trimmed = keep == 0 and step == "call"
    accumulator = WIRES["chat"].accumulator()
    read_stream(accumulator, expected[0])
    for seen, changed in ((accumulator.observation, expected[1]),
                          (WIRES["chat"].read_response(json.loads(whole_expected[0])),
                           whole_expected[1])):
        assert [c.name for c in seen.calls] == ([] if trimmed else [
            c.name for c in LEGACY[step].tool_calls])
        assert changed == trimmed
        assert seen.finish_reason == ("stop" if trimmed or step == "text" else "function_call")


USAGE_ODD = [  # usage-only chunks written otherwise, and chunks that are not one
    b'data: { "choices" : [ ] , "usage" : {"prompt_tokens": 1.50} }\n\n',
    b'data: {"choices":[],"\\u0075sage":{}}\r\n\r\n',
    b'data: {"choices":[],"usage":null}\n\n',
    b'data: {"usage":{"prompt_tokens":2}}\n\n',
    b'data: {"choices":[{"index":0,"delta":{}}],"usage":{"prompt_tokens":3}}\n\n',
    b'data: {"choices":{},"usage":{}}\n\n',
    b'event: usage\ndata: {"choices":[],"usage":{"completion_tokens":4},"id":"\xc3\xa9"}\n\n',
]


@pytest.mark.parametrize("keep", [None, 0, 1, 9])
@pytest.mark.parametrize("odd", [False, True])
@pytest.mark.parametrize("size", [1, 7, 100_000])
def test_streams_asked_for_usage_are_handed_on_alike_without_it(keep: int | None, odd: bool,
                                                                size: int) -> None:
    """A Chat Completions stream asked for its usage on the client's behalf: both relays leave
    out every usage-only chunk (and nothing else), trim as they trim, and call it trimmed only
    for tool calls left out."""
    stream = chat_stream(THREE)  # (asked for usage: "usage": null in each chunk, then its own)
    if odd:
        stream = with_odd("chat", stream).replace(b"data: [DONE]", b"".join(USAGE_ODD)
                                                  + b"data: [DONE]", 1)
    chunks = split(stream, size)
    expected = python_stream("chat", keep, chunks, hide_usage=True)
    assert expected is not None
    assert rust("chat", keep, chunks, True, hide_usage=True) == expected
    reader = SSEReader()
    kept = reader.feed(expected[0])
    assert not [event for event in kept if usage_only(event)]
    if keep is None:  # nothing else changed: the stream less its usage-only chunks
        assert expected == (b"".join(event.raw for event in reader.feed(stream)
                                     if not usage_only(event)), False)
        assert len(kept) == len(SSEReader().feed(stream)) - (4 if odd else 1)
    elif not odd:
        assert expected[1] == (keep < 3)
    # a whole response's usage came unasked: it passes as the bound has it
    data = whole("chat", THREE)
    assert rust("chat", keep, [data], False, hide_usage=True) == (
        (data, False) if keep is None else python_whole("chat", keep, data))


@pytest.mark.parametrize("api", list(WIRES))
@pytest.mark.parametrize("keep", [0, 1, 2])
@pytest.mark.parametrize("size", [1, 100_000])
def test_a_requests_own_answer_tool_is_kept_alike(api: str, keep: int, size: int) -> None:
    """A request's own answer tool (its pack's finish that carries only the report, offered
    so: ``Relay.forward(answer_tool=...)``, Python's ``steer.answers``) is kept and not
    counted by both trims, streamed and whole: the Rust trim's answers with it
    (``Answers::with``) give the agent the bytes the wire's trim with ``answer_tool`` gives."""
    own = "b"
    names = ([*sorted(ANSWER_TOOLS), own], list(ANSWER_TOOL_PREFIXES))
    chunks = split(MAKERS[api](THREE), size)
    reader, trimmer = SSEReader(), WIRES[api].stream_trimmer(keep, own)
    out = b"".join(trimmer.rewrite(event) for chunk in chunks for event in reader.feed(chunk))
    expected = out + reader.rest()
    streamed = Relay.trimmed(api, keep, chunks, True, *names)
    assert streamed is not None and streamed[0] == expected
    accumulator = WIRES[api].accumulator()
    read_stream(accumulator, expected)
    handed = [c.name for c in accumulator.observation.calls]
    assert handed == [c.name for c in kept_calls(
        [Call("", c.name, "") for c in THREE.tool_calls], keep, own)]
    assert own in handed
    body = json.loads(whole(api, THREE))
    changed = WIRES[api].trim(body, keep, own)
    assert changed == (keep < 2)  # (a and c the work: b is not counted)
    assert Relay.trimmed(api, keep, [whole(api, THREE)], False, *names) == (
        (dumps(body), True) if changed else (whole(api, THREE), False))


def whole(api: str, step: Step) -> bytes:
    if api == "chat":
        body = completion("m", "chatcmpl-1", step, {"prompt_tokens": 7, "completion_tokens": 3})
    elif api == "responses":
        body = response_object("m", "resp-1", step, {"input": "x"})
    else:
        body = anthropic_message("m", "msg-1", step, {"messages": []})
    return json.dumps(body).encode()


@pytest.mark.parametrize("api", list(WIRES))
@pytest.mark.parametrize("keep", [0, 1, 2, 3, 9])
@pytest.mark.parametrize("step", [THREE, WITH_ANSWER], ids=["three", "answers"])
def test_whole_responses_trimmed_alike(api: str, keep: int, step: Step) -> None:
    data = whole(api, step)
    expected = python_whole(api, keep, data)
    assert rust(api, keep, split(data, 5), False) == expected
    assert expected[1] == (keep < 3)
    seen = WIRES[api].read_response(json.loads(expected[0]))
    work = [c for c in seen.calls if c.name not in ANSWER_TOOLS
            and not c.name.startswith(ANSWER_TOOL_PREFIXES)]
    assert len(work) == min(keep, 3)


def odd_whole(api: str) -> list[bytes]:
    body = json.loads(whole(api, THREE))
    text = json.dumps(body)
    return [
        text.replace('"id"', '"n": [1.50, 1E5, -0, 1e-7, 1.0e16, 1e400, 12345678901234567890123]'
                     ', "s": "\\u00e9\\u2028\\t\\u0001", "d": 1, "d": 2, "id"', 1).encode(),
        b"\xef\xbb\xbf" + text.encode(),  # a byte order mark
        text.encode() + b" \n",
        text.encode() + b" trailing",
        text.encode()[:-9],  # cut short
        text.replace('"m"', '"\xff"', 1).encode("latin-1", "replace"),
        b"[1, 2]", b"", b"null", text.encode("utf-16"),
    ]


@pytest.mark.parametrize("api", list(WIRES))
@pytest.mark.parametrize("keep", [0, 2])
@pytest.mark.parametrize("case", range(10))
def test_odd_whole_responses_trimmed_alike(api: str, keep: int, case: int) -> None:
    data = odd_whole(api)[case]
    expected = python_whole(api, keep, data) if case != 9 else (data, False)
    # (UTF-16 JSON, which Python reads and no model API sends, passes as it came)
    assert rust(api, keep, [data], False) == expected


def test_an_event_too_long_to_read_ends_the_answer() -> None:
    """An event that grows past 4 MiB before it ends is not read, so its tool calls cannot be
    judged: with a bound, both relays end the answer there (``cut``). One that came whole in
    one chunk was read: judged as any other."""
    stream = chat_stream(THREE)
    huge = b"data: {\"pad\":\"" + b"x" * (4 * 1024 * 1024 + 100_000) + b"\"}\n\n"
    for chunks in (split(stream + huge + stream, 65536), [stream, huge[:-3], huge[-3:] + stream]):
        assert python_stream("chat", 0, chunks) is None
        assert rust("chat", 0, chunks, True) is None
    whole = [stream + huge + stream]
    assert rust("chat", 0, whole, True) == python_stream("chat", 0, whole) is not None


@pytest.mark.parametrize("odd", [b"1" * 4301, b"[" * 5000 + b"]" * 5000])
def test_json_the_python_relay_cannot_judge_ends_its_answer(odd: bytes) -> None:
    """An integer of more than 4,300 digits, nesting past the parser's depth: JSON a client
    may read that Python cannot judge. With a bound, the Python relay ends a stream there and
    answers a whole response 502; the compiled relay judges the integer (byte for byte) and
    not the nesting (past 128 levels)."""
    first = chat_stream(THREE).split(b"\n\n")[0] + b"\n\n"
    event = (b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"a"}}]}}],'
             b'"x":' + odd + b"}\n\n")
    assert python_stream("chat", 0, [first, event]) is None
    assert python_whole("chat", 0, event[6:-2]) is None
    # the compiled relay: its one call, past a bound of 0, left out with its event
    assert rust("chat", 0, [first, event], True) == ((first, True) if odd.startswith(b"1")
                                                     else None)


@pytest.mark.parametrize("data", [
    b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"a"}}]},'
    b'"x":NaN}]}\n\n',
    b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"\\ud800"}}]}}]}'
    b'\n\n',
    b'data: {"choices":[{"delta":{"tool_calls":[{"index":0}]}}],"x":' + b"[" * 200 + b"]" * 200
    + b"}\n\n"])
def test_json_python_reads_and_the_relay_cannot_judge_ends_the_answer(data: bytes) -> None:
    """No call is passed unjudged: the relay ends the answer there (``cut``)."""
    first = chat_stream(THREE).split(b"\n\n")[0] + b"\n\n"
    assert rust("chat", 0, [first, data], True) is None
    assert rust("chat", 0, [data[6:-2]], False) is None


def test_a_bad_api_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not a model API"):
        Relay.trimmed("completions", 0, [b""], True)
