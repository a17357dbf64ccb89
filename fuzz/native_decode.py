"""Fuzz target: the compiled decode (watchdog.core.spans._native, Rust) against the Python one
(protobuf's upb parser), on the same bytes. Coverage-guided with atheris (libFuzzer).

The contract checked: both refuse the bytes in the same words (the same ``DecodeError``), or
both read them into the same records and the same counted rejections (the compiled path with
its kernels of the conventions: limit phrases, tool JSON, the stable hash, a span's head), each
span with the same first-present facts (``FIRST_FACTS``: resolved by the compiled decode while
it selects the attributes, looked up by the Python path).
Any difference, or any other exception, is a crash: libFuzzer stops and saves the input.

    .venv/bin/python fuzz/native_decode.py -dict=fuzz/otlp.dict fuzz/corpus/native_decode
    .venv/bin/python fuzz/native_decode.py -help=1     # the libFuzzer options

The first byte picks the route: 0 the bytes as they are, 1 a request *built* from them (the
attributes normalisation reads, values of every type: :func:`ingest.built`). The Rust decoder
alone, with AddressSanitizer, is ``native/otlp/fuzz`` (cargo-fuzz).
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

with atheris.instrument_imports(include=["watchdog"]):
    from watchdog.core.spans import decode, native, values
    from watchdog.core.spans.attributes import FIRST_FACTS
    from watchdog.core.spans.pipeline import Decoded, records_from

from ingest import built

if not native.AVAILABLE:
    sys.exit("the compiled decode (watchdog.core.spans._native) is not built: run make")


def read(compiled: bool, body: bytes) -> str | tuple[Decoded, list[str]]:
    """The bytes read by the compiled decode and kernels, or by the Python path alone: the
    records, and each span's selected attributes and first-present facts (as reprs: NaN)."""
    native.use_native(compiled)
    try:
        request = decode.parse_protobuf(body)
    except decode.DecodeError as exc:
        return str(exc)
    facts = []
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attrs, firsts = values.read(span)
                found = firsts if firsts is not None else values.Firsts(attrs)
                facts.append(repr((attrs, [found[index] for index in range(len(FIRST_FACTS))])))
    return records_from(request), facts


def test_one_input(data: bytes) -> None:
    if not data:
        return
    body = data[1:]
    if data[0] % 2:
        body = built(atheris.FuzzedDataProvider(body)).SerializeToString()
    ours, reference = read(True, body), read(False, body)
    if isinstance(reference, str) or isinstance(ours, str):
        assert ours == reference, (ours, reference)
        return
    (ours, our_facts), (reference, their_facts) = ours, reference
    assert repr(ours.records) == repr(reference.records)  # (as reprs: a NaN is no equal of itself)
    assert (ours.rejected, ours.message()) == (reference.rejected, reference.message())
    assert our_facts == their_facts


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
