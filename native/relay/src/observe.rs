//! What a relayed stream said, read where its bytes already are (DESIGN §12): the twin of
//! `wire.read_stream` with the APIs' accumulators (`ChatAccumulator`, `ResponsesAccumulator`,
//! `MessagesAccumulator`), field for field, so the event loop does not read the stream again.
//!
//! Pure: the bytes observed in, a `Seen` out, or `Declined` where this cannot be sure to read
//! it exactly as Python does (an event's bytes that are not UTF-8, JSON Python reads and
//! `serde_json` does not — `NaN`, lone surrogates, nesting past 128 —, integers Python refuses
//! or an index past `i128`, a value Python would write with `str()`): then Python reads the
//! bytes as it always has.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Number, Value};

use crate::trim::{self, event_end, parse_event, python_float, truthy, Api};

const MAX_TOOL_CALLS_SEEN: usize = 128;
const MAX_TEXT_CHARS: usize = 64 * 1024;
const MAX_ARGUMENT_CHARS: usize = 65536;
const MAX_MODEL_CHARS: usize = 200;
const MAX_TOKENS: u64 = 10_000_000;
/// The most digits of an integer Python converts (`sys.get_int_max_str_digits()`: 4300 unless
/// `PYTHONINTMAXSTRDIGITS` or `-X int_max_str_digits` says otherwise; 0, no limit, is
/// `usize::MAX`), set from the interpreter's when the module is imported
/// (`set_int_max_str_digits`): a run of digits longer than this is not read here, where Python
/// would refuse it.
static MAX_DIGIT_RUN: AtomicUsize = AtomicUsize::new(4300);
const DONE_EVENTS: [&str; 3] = [
    "response.completed",
    "response.incomplete",
    "response.failed",
];
/// A legacy function call's id (it has none): this and its function's name, which the
/// `function` message answering it names too (`chat.function_call_id`).
const LEGACY_CALL_ID: &str = "function_call:";
const PLAIN_DELTA: &str = "\"delta\":{\"content\":\"";

/// Python may read this otherwise: it reads the bytes itself.
#[derive(Debug)]
pub struct Declined;

type Out<T> = Result<T, Declined>;

#[derive(Default, Debug, Clone)]
pub struct Call {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    chars: usize,
}

/// `wire.Observation`.
#[derive(Default, Debug, Clone)]
pub struct Seen {
    pub response_id: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub model: Option<String>,
    pub finish_reason: Option<String>,
    pub calls: Vec<Call>,
    pub text: String,
    pub complete: bool,
    /// a `data:` line that is not JSON was passed on (no client reads it)
    pub unreadable: bool,
}

/// The answer text as the accumulators gather it: pieces added while fewer than
/// `MAX_TEXT_CHARS` characters are in, the text their join's first `MAX_TEXT_CHARS`.
#[derive(Default)]
struct Text {
    joined: String,
    chars: usize,
    set: bool, // the observation's text is this join's (the accumulator assigned it)
}

impl Text {
    fn add(&mut self, piece: &str) {
        if self.chars < MAX_TEXT_CHARS {
            self.joined.push_str(piece);
            self.chars += piece.chars().count();
            self.set = true;
        }
    }

    fn clipped(&self) -> String {
        first_chars(&self.joined, MAX_TEXT_CHARS)
    }
}

fn first_chars(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((at, _)) => text[..at].to_owned(),
        None => text.to_owned(),
    }
}

/// A whole stream that has ended, read as `wire.read_stream` reads it.
pub fn observe_stream(api: Api, data: &[u8]) -> Out<Seen> {
    let mut reader = Reader {
        api,
        seen: Seen::default(),
        text: Text::default(),
        slots: HashMap::new(),
    };
    if data.contains(&b'\r') {
        let mut start = 0;
        while let Some((end, size)) = event_end(data, start) {
            reader.feed_raw(&data[start..end + size])?;
            start = end + size;
        }
    } else {
        let mut parts: Vec<&[u8]> = split_blank(data);
        parts.pop(); // after the last blank line: an event cut short, never read
        for part in parts {
            reader.feed_part(part)?;
        }
    }
    let mut seen = reader.seen;
    if reader.text.set {
        seen.text = reader.text.clipped();
    }
    Ok(seen)
}

fn split_blank(data: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut start = 0;
    for at in memchr::memmem::find_iter(data, b"\n\n") {
        if at >= start {
            // "\n\n\n": the split is at the first
            parts.push(&data[start..at]);
            start = at + 2;
        }
    }
    parts.push(&data[start..]);
    parts
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

struct Reader {
    api: Api,
    seen: Seen,
    text: Text,
    /// chat: a call's stream index -> its place in `seen.calls`; messages: a block's index
    slots: HashMap<Option<i128>, usize>,
}

impl Reader {
    /// One part between blank lines of a stream with no `\r`: one `data: {…}` line (after
    /// an `event:` line or none) parsed at once, any other as the SSE reader reads it.
    fn feed_part(&mut self, part: &[u8]) -> Out<()> {
        let at = if part.starts_with(b"event:") {
            find(part, b"\ndata: {").map_or(0, |at| at + 1)
        } else {
            0
        };
        if part[at..].starts_with(b"data: {")
            && !part[at..].contains(&b'\n')
            && find(&part[..at], b"data:").is_none()
        {
            let text = std::str::from_utf8(&part[at + 6..]).map_err(|_| Declined)?;
            if let Some(Value::Object(map)) = loads(text, self.keep())? {
                return self.feed_object(&map);
            } // not JSON: read as the reader reads it (chat's text shortcut may take it)
        }
        if part.is_empty() {
            return Ok(());
        }
        let mut raw = part.to_vec();
        raw.extend_from_slice(b"\n\n");
        self.feed_raw(&raw)
    }

    /// An event as `SSEReader` cuts it (terminator included): the accumulator's `feed`.
    fn feed_raw(&mut self, raw: &[u8]) -> Out<()> {
        if std::str::from_utf8(raw).is_err() {
            return Err(Declined); // Python reads it with U+FFFD in place of the bytes
        }
        let event = parse_event(raw);
        let Some(data) = event.data.as_deref() else {
            return Ok(());
        };
        if data == "[DONE]" {
            if self.api == Api::Chat {
                self.seen.complete = true;
            }
            return Ok(());
        }
        if self.api == Api::Chat && self.seen.response_id.is_some() {
            if let Some(piece) = plain_content(data)? {
                if !piece.is_empty() {
                    self.text.add(&piece);
                }
                return Ok(());
            }
        }
        match loads(data, self.keep())? {
            Some(Value::Object(map)) => self.feed_object(&map),
            Some(_) => Ok(()),
            None => {
                // (None: not JSON, or JSON the sparse reader did not take)
                if matches!(trim::loads(data), Ok(None)) {
                    self.seen.unreadable = true;
                }
                Ok(())
            }
        }
    }

    /// What of an event's JSON the API's accumulator reads.
    fn keep(&self) -> Keep {
        match self.api {
            Api::Chat => CHAT,
            Api::Responses => RESPONSES,
            Api::Messages => MESSAGES,
        }
    }

    fn feed_object(&mut self, data: &Map<String, Value>) -> Out<()> {
        match self.api {
            Api::Chat => self.chat(data),
            Api::Responses => self.responses(data),
            Api::Messages => self.messages(data),
        }
    }

    fn chat(&mut self, data: &Map<String, Value>) -> Out<()> {
        let seen = &mut self.seen;
        if seen.response_id.is_none() {
            if let Some(id) = str_of(data.get("id")) {
                seen.response_id = Some(id.to_owned());
            }
        }
        if let Some(model) = str_of(data.get("model")).filter(|model| !model.is_empty()) {
            seen.model = Some(first_chars(model, MAX_MODEL_CHARS));
        }
        // `if data.get("usage")`: an object with keys (an empty one, or another value: left)
        if let Some(Value::Object(usage)) = data.get("usage").filter(|usage| truthy(usage)) {
            seen.input_tokens = token(usage.get("prompt_tokens"));
            seen.output_tokens = token(usage.get("completion_tokens"));
            if let Some(Value::Object(details)) = usage.get("prompt_tokens_details") {
                seen.cache_read_tokens = token(details.get("cached_tokens")).min(seen.input_tokens);
            }
        }
        let Some(Value::Array(choices)) = data.get("choices") else {
            return Ok(());
        };
        let Some(choice) = first_choice(choices)? else {
            return Ok(());
        };
        if let Some(finish) = str_of(choice.get("finish_reason")) {
            seen.finish_reason = Some(finish.to_owned());
        }
        let Some(Value::Object(delta)) = choice.get("delta") else {
            return Ok(());
        };
        if let Some(content) = str_of(delta.get("content")).filter(|text| !text.is_empty()) {
            self.text.add(content);
        }
        // `_parts_of`: the tool calls' parts by their index, then a legacy `function_call`
        // (no index: the key None) as a tool call's part
        let mut parts: Vec<(Option<i128>, &Map<String, Value>)> = Vec::new();
        if let Some(Value::Array(listed)) = delta.get("tool_calls") {
            for part in listed {
                let Value::Object(part) = part else { continue };
                let Some(index) = py_int(part.get("index"))? else {
                    continue;
                };
                parts.push((Some(index), part));
            }
        }
        let legacy = match delta.get("function_call") {
            Some(Value::Object(function)) => Some(function),
            _ => None,
        };
        let mut legacy_part = Map::new();
        if let Some(function) = legacy {
            legacy_part.insert("function".into(), Value::Object(function.clone()));
            parts.push((None, &legacy_part));
        }
        for (index, part) in parts {
            let place = match self.slots.get(&index) {
                Some(place) => *place,
                None => {
                    if self.slots.len() >= MAX_TOOL_CALLS_SEEN {
                        continue;
                    }
                    self.seen.calls.push(Call::default());
                    self.slots.insert(index, self.seen.calls.len() - 1);
                    self.seen.calls.len() - 1
                }
            };
            let call = &mut self.seen.calls[place];
            if let Some(id) = str_of(part.get("id")) {
                call.call_id = id.to_owned();
            }
            let callee = ["function", "custom"]
                .iter()
                .find_map(|key| match part.get(*key) {
                    Some(Value::Object(f)) => Some(f),
                    _ => None,
                });
            let Some(function) = callee else { continue };
            if let Some(name) = str_of(function.get("name")) {
                call.name.push_str(name);
            }
            let given = if function.contains_key("arguments") {
                function.get("arguments")
            } else {
                function.get("input")
            };
            if let Some(given) = str_of(given) {
                if call.chars < MAX_ARGUMENT_CHARS {
                    call.arguments.push_str(given);
                    call.chars += given.chars().count();
                }
            }
            if index.is_none() {
                call.call_id = format!("{LEGACY_CALL_ID}{}", call.name);
            }
        }
        Ok(())
    }

    fn responses(&mut self, data: &Map<String, Value>) -> Out<()> {
        let kind = str_of(data.get("type")).unwrap_or("");
        match (kind, data.get("response"), data.get("delta")) {
            (kind, Some(Value::Object(response)), _) if DONE_EVENTS.contains(&kind) => {
                let unreadable = self.seen.unreadable;
                self.seen = read_response(response)?;
                self.seen.unreadable = unreadable;
                self.text.set = false; // the response's own text, until a delta comes
            }
            ("response.created", Some(Value::Object(response)), _) => {
                if let Some(id) = str_of(response.get("id")) {
                    self.seen.response_id = Some(id.to_owned());
                }
            }
            ("response.output_text.delta", _, Some(Value::String(delta))) => {
                self.text.add(delta);
            }
            _ => {}
        }
        Ok(())
    }

    fn messages(&mut self, data: &Map<String, Value>) -> Out<()> {
        let seen = &mut self.seen;
        match str_of(data.get("type")).unwrap_or("") {
            "message_start" => {
                let Some(Value::Object(message)) = data.get("message") else {
                    return Ok(());
                };
                if let Some(id) = str_of(message.get("id")) {
                    seen.response_id = Some(id.to_owned());
                }
                if let Some(model) = str_of(message.get("model")).filter(|m| !m.is_empty()) {
                    seen.model = Some(first_chars(model, MAX_MODEL_CHARS));
                }
                if let Some(Value::Object(usage)) = message.get("usage") {
                    if usage.contains_key("input_tokens") {
                        seen.cache_read_tokens = token(usage.get("cache_read_input_tokens"));
                        seen.cache_write_tokens = token(usage.get("cache_creation_input_tokens"));
                        seen.input_tokens = token(usage.get("input_tokens"))
                            + seen.cache_read_tokens
                            + seen.cache_write_tokens;
                    }
                    if usage.contains_key("output_tokens") {
                        seen.output_tokens = token(usage.get("output_tokens"));
                    }
                }
            }
            "content_block_start" => {
                let Some(Value::Object(block)) = data.get("content_block") else {
                    return Ok(());
                };
                if str_of(block.get("type")) != Some("tool_use") {
                    return Ok(());
                }
                let Some(index) = py_int(data.get("index"))? else {
                    return Ok(());
                };
                if self.slots.len() < MAX_TOOL_CALLS_SEEN {
                    let call = Call {
                        call_id: str_or_empty(block.get("id"))?,
                        name: str_or_empty(block.get("name"))?,
                        ..Call::default()
                    };
                    seen.calls.push(call);
                    self.slots.insert(Some(index), seen.calls.len() - 1);
                }
            }
            "content_block_delta" => {
                let Some(Value::Object(delta)) = data.get("delta") else {
                    return Ok(());
                };
                let kind = str_of(delta.get("type"));
                if kind == Some("text_delta") {
                    if let Some(text) = str_of(delta.get("text")) {
                        self.text.add(text);
                        return Ok(());
                    }
                }
                if kind != Some("input_json_delta") {
                    return Ok(());
                }
                let Some(index) = py_int(data.get("index"))? else {
                    return Ok(());
                };
                if let (Some(place), Some(partial)) = (
                    self.slots.get(&Some(index)),
                    str_of(delta.get("partial_json")),
                ) {
                    let call = &mut seen.calls[*place];
                    if call.chars < MAX_ARGUMENT_CHARS {
                        call.arguments.push_str(partial);
                        call.chars += partial.chars().count();
                    }
                }
            }
            "message_delta" => {
                if let Some(Value::Object(delta)) = data.get("delta") {
                    if let Some(stop) = str_of(delta.get("stop_reason")) {
                        seen.finish_reason = Some(messages_finish(stop).to_owned());
                    }
                }
                if let Some(Value::Object(usage)) = data.get("usage") {
                    if usage.contains_key("output_tokens") {
                        seen.output_tokens = token(usage.get("output_tokens"));
                    }
                }
            }
            "message_stop" => seen.complete = true,
            _ => {}
        }
        Ok(())
    }
}

fn messages_finish(stop: &str) -> &str {
    match stop {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        "refusal" => "content_filter",
        other => other, // pause_turn and the unknown ones as they are
    }
}

// -- the Responses API's final response object (`ResponsesWire.read_response`) --------------

const CALL_ITEMS: [&str; 6] = [
    "function_call",
    "custom_tool_call",
    "computer_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
];

fn built_in_tool(kind: &str) -> Option<&'static str> {
    match kind {
        "computer_call" => Some("computer"),
        "local_shell_call" => Some("local_shell"),
        "shell_call" => Some("shell"),
        "apply_patch_call" => Some("apply_patch"),
        _ => None,
    }
}

fn read_response(body: &Map<String, Value>) -> Out<Seen> {
    let mut seen = Seen {
        complete: true,
        ..Seen::default()
    };
    if let Some(id) = str_of(body.get("id")) {
        seen.response_id = Some(id.to_owned());
    }
    if let Some(model) = str_of(body.get("model")).filter(|model| !model.is_empty()) {
        seen.model = Some(first_chars(model, MAX_MODEL_CHARS));
    }
    if let Some(Value::Object(usage)) = body.get("usage") {
        seen.input_tokens = token(usage.get("input_tokens"));
        if let Some(Value::Object(details)) = usage.get("input_tokens_details") {
            seen.cache_read_tokens = token(details.get("cached_tokens")).min(seen.input_tokens);
        }
        seen.output_tokens = token(usage.get("output_tokens"));
    }
    let mut texts = String::new();
    if let Some(Value::Array(output)) = body.get("output") {
        for item in output {
            let Value::Object(item) = item else { continue };
            let kind = str_of(item.get("type"));
            if kind == Some("message") {
                texts.push_str(&text_of(item.get("content")));
            } else if let Some(kind) = kind.filter(|kind| CALL_ITEMS.contains(kind)) {
                if seen.calls.len() < MAX_TOOL_CALLS_SEEN {
                    seen.calls.push(call_of(kind, item)?);
                }
            }
        }
    }
    seen.text = first_chars(&texts, MAX_TEXT_CHARS);
    seen.finish_reason = Some(
        if !seen.calls.is_empty() {
            "tool_calls"
        } else if str_of(body.get("status")) == Some("incomplete") {
            "length"
        } else {
            "stop"
        }
        .to_owned(),
    );
    Ok(seen)
}

fn call_of(kind: &str, item: &Map<String, Value>) -> Out<Call> {
    let name = match built_in_tool(kind) {
        Some(name) => name.to_owned(),
        None => str_or_empty(item.get("name"))?,
    };
    let given = ["arguments", "input", "action", "operation"]
        .iter()
        .find_map(|key| item.get(*key).filter(|value| !value.is_null()));
    let arguments = match given {
        None => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(value) => {
            let mut out = String::new();
            py_dumps_sorted(value, &mut out);
            out
        }
    };
    Ok(Call {
        call_id: str_or_empty(item.get("call_id"))?,
        name,
        arguments,
        chars: 0,
    })
}

/// `wire.text_of`: the text in a message's content (a string, or a list of text parts).
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            let mut texts: Vec<String> = Vec::new();
            for part in parts {
                match part {
                    Value::Object(part) => {
                        if let Some(text) = str_of(part.get("text")) {
                            texts.push(text.to_owned());
                        } else if matches!(
                            part.get("content"),
                            Some(Value::String(_) | Value::Array(_))
                        ) {
                            texts.push(text_of(part.get("content")));
                        }
                    }
                    Value::String(text) => texts.push(text.clone()),
                    _ => {}
                }
            }
            texts.join("\n")
        }
        _ => String::new(),
    }
}

/// `json.dumps(value, sort_keys=True)`: ", " and ": " between, ASCII only.
fn py_dumps_sorted(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(flag) => out.push_str(if *flag { "true" } else { "false" }),
        Value::Number(number) => {
            let text = number.to_string();
            if is_float_text(&text) {
                out.push_str(&python_float(text.parse().unwrap_or(f64::NAN)));
            } else if text == "-0" {
                out.push('0');
            } else {
                out.push_str(&text);
            }
        }
        Value::String(text) => ascii_str(text, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_dumps_sorted(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                ascii_str(key, out);
                out.push_str(": ");
                py_dumps_sorted(&map[key], out);
            }
            out.push('}');
        }
    }
}

fn ascii_str(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

// -- JSON as Python reads it ------------------------------------------------------------------

/// `json.loads`, of the parts `keep` names (the rest checked, not kept): Some(value), None
/// (Python fails too); declined where Python may read what `serde_json` does not (as
/// `trim::loads` judges: `NaN`, a lone surrogate, deep nesting) or refuses what it reads (an
/// integer of too many digits).
fn loads(text: &str, keep: Keep) -> Out<Option<Value>> {
    if long_digit_run(text.as_bytes()) {
        return Err(Declined);
    }
    let mut reader = serde_json::Deserializer::from_str(text);
    match Sparse(keep)
        .deserialize(&mut reader)
        .and_then(|value| reader.end().map(|()| value))
    {
        Ok(value) => Ok(Some(value)),
        Err(_) => trim::loads(text).map(|_| None).map_err(|_| Declined),
    }
}

/// The parts of a JSON value kept: all of it, or of an object the keys named (each with what
/// of it is kept; a repeated key's last value, as Python's), of an array each item as that.
#[derive(Clone, Copy)]
enum Keep {
    All,
    Keys(&'static [(&'static str, Keep)]),
}

const CHAT: Keep = Keep::Keys(&[
    ("id", Keep::All),
    ("model", Keep::All),
    ("usage", Keep::All),
    (
        "choices",
        Keep::Keys(&[
            ("index", Keep::All),
            ("finish_reason", Keep::All),
            (
                "delta",
                Keep::Keys(&[
                    ("content", Keep::All),
                    ("tool_calls", Keep::All),
                    ("function_call", Keep::All),
                ]),
            ),
        ]),
    ),
]);
const RESPONSES: Keep = Keep::Keys(&[
    ("type", Keep::All),
    ("response", Keep::All),
    ("delta", Keep::All),
]);
const MESSAGES: Keep = Keep::Keys(&[
    ("type", Keep::All),
    ("index", Keep::All),
    (
        "message",
        Keep::Keys(&[
            ("id", Keep::All),
            ("model", Keep::All),
            ("usage", Keep::All),
        ]),
    ),
    (
        "content_block",
        Keep::Keys(&[("type", Keep::All), ("id", Keep::All), ("name", Keep::All)]),
    ),
    ("delta", Keep::All),
    ("usage", Keep::All),
]);

/// serde_json's name for a number it hands over as written (`arbitrary_precision`).
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

struct Sparse(Keep);

impl<'de> DeserializeSeed<'de> for Sparse {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<Value, D::Error> {
        match self.0 {
            Keep::All => Value::deserialize(reader),
            Keep::Keys(keys) => reader.deserialize_any(SparseVisitor(keys)),
        }
    }
}

struct SparseVisitor(&'static [(&'static str, Keep)]);

impl<'de> Visitor<'de> for SparseVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(item) = items.next_element_seed(Sparse(Keep::Keys(self.0)))? {
            out.push(item);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = entries.next_key_seed(KeySeed)? {
            if key == NUMBER_TOKEN {
                let written: String = entries.next_value()?;
                return written
                    .parse::<Number>()
                    .map(Value::Number)
                    .map_err(de::Error::custom);
            }
            match self.0.iter().find(|(name, _)| *name == key) {
                Some((name, keep)) => {
                    let value = entries.next_value_seed(Sparse(*keep))?;
                    out.insert((*name).to_owned(), value);
                }
                None => entries.next_value_seed(Skip)?,
            }
        }
        Ok(Value::Object(out))
    }
}

/// A value not kept: read through (as deep as serde_json reads a kept one), nothing made.
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<(), D::Error> {
        reader.deserialize_any(Skip)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        while items.next_element_seed(Skip)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<(), A::Error> {
        while entries.next_key::<IgnoredAny>()?.is_some() {
            entries.next_value_seed(Skip)?;
        }
        Ok(())
    }
}

/// An object's key, borrowed from the text where it has no escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<Cow<'de, str>, D::Error> {
        reader.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Cow<'de, str>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, value: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(value))
    }

    fn visit_str<E>(self, value: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(value))
    }
}

/// Python's integer digit limit (`sys.get_int_max_str_digits()`, 0: none), for
/// `long_digit_run`.
pub fn set_int_max_str_digits(digits: usize) {
    MAX_DIGIT_RUN.store(
        if digits == 0 { usize::MAX } else { digits },
        Ordering::Relaxed,
    );
}

/// Whether ``text`` holds a run of more than ``MAX_DIGIT_RUN`` digits (an integer Python may not
/// convert).
pub(crate) fn long_digit_run(text: &[u8]) -> bool {
    let most = MAX_DIGIT_RUN.load(Ordering::Relaxed);
    if text.len() <= most {
        return false;
    }
    let mut run = 0;
    for &byte in text {
        if byte.is_ascii_digit() {
            run += 1;
            if run > most {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

fn is_float_text(text: &str) -> bool {
    text.contains(['.', 'e', 'E'])
}

fn str_of(value: Option<&Value>) -> Option<&str> {
    match value {
        Some(Value::String(text)) => Some(text),
        _ => None,
    }
}

/// `str(value or "")`: a string as it is, any false value "" (other values declined: Python
/// writes them with `str()`).
fn str_or_empty(value: Option<&Value>) -> Out<String> {
    match value {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(value) if truthy(value) => Err(Declined),
        _ => Ok(String::new()),
    }
}

/// `isinstance(value, int)` (a bool is one) and its value; an integer past `i128` declined.
fn py_int(value: Option<&Value>) -> Out<Option<i128>> {
    match value {
        Some(Value::Bool(flag)) => Ok(Some(i128::from(*flag))),
        Some(Value::Number(number)) => {
            let text = number.to_string();
            if is_float_text(&text) {
                Ok(None)
            } else {
                text.parse().map(Some).map_err(|_| Declined)
            }
        }
        _ => Ok(None),
    }
}

/// `wire.token`: a count of tokens (an integer, not a bool, >= 0), at most 10 million.
fn token(value: Option<&Value>) -> u64 {
    let Some(Value::Number(number)) = value else {
        return 0;
    };
    let text = number.to_string();
    if is_float_text(&text) || text.starts_with('-') {
        return 0;
    }
    text.parse::<u64>()
        .map_or(MAX_TOKENS, |count| count.min(MAX_TOKENS))
}

/// `chat.first_choice`: the first choice of a chunk (a choice whose `index` is another
/// integer is another answer of `n` > 1, not read); Ok(None): none is read.
fn first_choice(choices: &[Value]) -> Out<Option<&Map<String, Value>>> {
    for choice in choices {
        let Value::Object(choice) = choice else {
            return Ok(None);
        };
        match py_int(choice.get("index"))? {
            Some(index) if index != 0 => continue,
            _ => return Ok(Some(choice)),
        }
    }
    Ok(None)
}

/// `wire.plain_content`: the text of a chat chunk whose delta is only its content, cut out
/// without parsing the chunk (Ok(None): the chunk is read whole).
fn plain_content(data: &str) -> Out<Option<String>> {
    if data.matches("\"delta\"").count() != 1
        || data.matches("\"choices\"").count() != 1
        || data.contains("\"tool_calls\"")
    {
        return Ok(None);
    }
    for key in ["\"finish_reason\"", "\"usage\""] {
        let count = data.matches(key).count();
        if count > 1 || (count == 1 && !data.contains(&format!("{key}:null"))) {
            return Ok(None);
        }
    }
    let count = data.matches("\"index\"").count(); // (another choice's text: not the first's)
    if count > 1 || (count == 1 && !data.contains("\"index\":0,") && !data.contains("\"index\":0}"))
    {
        return Ok(None);
    }
    let Some(at) = data.find(PLAIN_DELTA) else {
        return Ok(None);
    };
    if !data[..at].contains("\"choices\":[") {
        return Ok(None);
    }
    Ok(match scan_string(data, at + PLAIN_DELTA.len())? {
        Some((text, end)) if data[end..].starts_with('}') => Some(text),
        _ => None,
    })
}

/// The C scanner's JSON string from just after its opening quote: (the string, the index
/// after its closing quote); Ok(None): Python fails on it; a lone surrogate declined.
fn scan_string(data: &str, start: usize) -> Out<Option<(String, usize)>> {
    let bytes = data.as_bytes();
    let mut out = String::new();
    let mut at = start;
    let mut plain = start; // the start of the run of plain characters not yet copied
    loop {
        let Some(&byte) = bytes.get(at) else {
            return Ok(None);
        };
        match byte {
            b'"' => {
                out.push_str(&data[plain..at]);
                return Ok(Some((out, at + 1)));
            }
            0..=0x1f => return Ok(None),
            b'\\' => {
                out.push_str(&data[plain..at]);
                let Some(&kind) = bytes.get(at + 1) else {
                    return Ok(None);
                };
                at += 2;
                match kind {
                    b'"' => out.push('"'),
                    b'\\' => out.push('\\'),
                    b'/' => out.push('/'),
                    b'b' => out.push('\u{8}'),
                    b'f' => out.push('\u{c}'),
                    b'n' => out.push('\n'),
                    b'r' => out.push('\r'),
                    b't' => out.push('\t'),
                    b'u' => {
                        let Some(unit) = hex4(bytes, at) else {
                            return Ok(None);
                        };
                        at += 4;
                        let code = if (0xd800..0xdc00).contains(&unit) {
                            let low = if bytes.get(at..at + 2) == Some(b"\\u") {
                                hex4(bytes, at + 2)
                            } else {
                                None
                            };
                            match low {
                                Some(low) if (0xdc00..0xe000).contains(&low) => {
                                    at += 6;
                                    0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00)
                                }
                                _ => return Err(Declined), // a lone surrogate
                            }
                        } else if (0xdc00..0xe000).contains(&unit) {
                            return Err(Declined);
                        } else {
                            unit
                        };
                        out.push(char::from_u32(code).ok_or(Declined)?);
                    }
                    _ => return Ok(None),
                }
                plain = at;
                continue;
            }
            _ => {}
        }
        at += 1;
    }
}

fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = bytes.get(at..at + 4)?;
    digits.iter().try_fold(0u32, |value, digit| {
        Some(value * 16 + (*digit as char).to_digit(16)?)
    })
}
