//! Any bytes into the OTLP decoder: a request or an error, never a panic, and everything a
//! decoded request points at lies in the body (and reads as UTF-8 where it is a string).
//!
//!     RUSTC_BOOTSTRAP=1 cargo fuzz run decode ../../fuzz/corpus/native_decode   (in native/otlp)
//!
//! (cargo-fuzz builds with AddressSanitizer: a nightly flag; RUSTC_BOOTSTRAP=1 lets the stable
//! toolchain take it.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use watchdog_otlp::wire::{decode, AnyValue, KeyValue, Slice};

fn text(body: &[u8], slice: Slice) {
    assert!(slice.start <= slice.end && slice.end as usize <= body.len());
    assert!(std::str::from_utf8(slice.of(body)).is_ok());
}

fn key_values(body: &[u8], list: &[KeyValue]) {
    for kv in list {
        text(body, kv.key);
        value(body, &kv.value);
    }
}

fn value(body: &[u8], value: &AnyValue) {
    match value {
        AnyValue::String(slice) => text(body, *slice),
        AnyValue::Bytes(slice) => assert!(slice.of(body).len() <= body.len()),
        AnyValue::Array(values) => values.iter().for_each(|item| self::value(body, item)),
        AnyValue::KvList(values) => key_values(body, values),
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    // (the first byte: fuzz/native_decode.py's route, so both share fuzz/corpus/native_decode)
    let body = data.get(1..).unwrap_or(&[]);
    if let Ok(request) = decode(body) {
        for resource_spans in &request.resource_spans {
            key_values(body, &resource_spans.resource.attributes);
            for scope_spans in &resource_spans.scope_spans {
                text(body, scope_spans.scope.name);
                key_values(body, &scope_spans.scope.attributes);
                for span in &scope_spans.spans {
                    text(body, span.name);
                    text(body, span.status.message);
                    key_values(body, &span.attributes);
                    assert!(span.raw.of(body).len() <= body.len());
                    for event in &span.events {
                        text(body, event.name);
                        key_values(body, &event.attributes);
                    }
                    for link in &span.links {
                        key_values(body, &link.attributes);
                    }
                }
            }
        }
    }
});
