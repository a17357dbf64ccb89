//! Responses trimmed in flight so they hand the agent at most `keep` tool calls (DESIGN §12):
//! the twin of the Python relay's trimming (`watchdog/core/model/{chat,responses,messages}.py`
//! `trim` and the stream trimmers, `wire.SSEReader`, `shell/model/streams.py`), byte for byte.
//!
//! Pure: bytes in, bytes out. JSON is read as Python's `json.loads` reads it (object keys in
//! their order, a repeated key's last value in its first place, numbers as written) and what
//! is changed is written as `json.dumps(separators=(",", ":"), ensure_ascii=False)` writes it
//! (an integer as Python's `int`, a fraction or exponent as Python's `float` repr). JSON that
//! Python reads and this does not (`NaN`, `Infinity`, lone surrogate escapes, nesting past 128)
//! is `Unjudged`, and so is an event too long to read (`MAX_SSE_EVENT_BYTES`): the relay ends
//! the response there rather than pass a call it cannot judge.

use serde_json::{Map, Number, Value};

pub const MAX_SSE_EVENT_BYTES: usize = 4 * 1024 * 1024;
const MAX_TOOL_CALLS_SEEN: usize = 128;
const DONE_EVENTS: [&str; 3] = [
    "response.completed",
    "response.incomplete",
    "response.failed",
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Api {
    Chat,
    Responses,
    Messages,
}

impl Api {
    pub fn parse(name: &str) -> Option<Api> {
        match name {
            "chat" => Some(Api::Chat),
            "responses" => Some(Api::Responses),
            "messages" => Some(Api::Messages),
            _ => None,
        }
    }
}

/// The final-answer tools a request is read to offer, at most (Python's
/// `steer.MAX_ANSWERS_OFFERED`).
pub const MAX_ANSWERS_OFFERED: usize = 16;

/// The final-answer tools (the conventions' `answer_tools`, `answer_tool_prefixes`): never
/// trimmed, never counted.
#[derive(Clone, Default, Debug)]
pub struct Answers {
    pub names: Vec<String>,
    pub prefixes: Vec<String>,
}

impl Answers {
    /// These and `tool` (a request's own answer: its agent's finish that carries only the
    /// answer, offered so; Python's `steer.answers`).
    pub fn with(mut self, tool: Option<&str>) -> Self {
        if let Some(tool) = tool {
            self.names.push(tool.to_owned());
        }
        self
    }

    /// Those of these that a request offers (`offered`: the final-answer tools among its
    /// tools, Python's `Request.answers_offered`; None: all of these): a call of another is
    /// work (a tool the model made up), as Python's `steer.answers` reads it.
    pub fn offered(self, offered: Option<&[String]>) -> Self {
        match offered {
            None => self,
            Some(offered) => Answers {
                names: offered
                    .iter()
                    .filter(|n| self.is_named(n))
                    .cloned()
                    .collect(),
                prefixes: Vec::new(),
            },
        }
    }

    /// The final-answer tools among the names a request offers, as Python's
    /// `steer.answers_offered` reads them: each once, the first [`MAX_ANSWERS_OFFERED`].
    pub fn among(&self, names: &[String]) -> Vec<String> {
        let mut found: Vec<String> = Vec::new();
        for name in names {
            if self.is_named(name) && !found.contains(name) {
                found.push(name.clone());
                if found.len() == MAX_ANSWERS_OFFERED {
                    break;
                }
            }
        }
        found
    }

    fn is_named(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
            || self.prefixes.iter().any(|p| name.starts_with(p.as_str()))
    }

    fn is_answer(&self, name: Option<&Value>) -> bool {
        match name {
            Some(Value::String(name)) => self.is_named(name),
            _ => false,
        }
    }
}

/// What a successful response is trimmed of: the tool calls past `keep` (None: no bound), and,
/// in a stream asked for its usage on the client's behalf (`hide_usage`), the usage-only chunk.
#[derive(Clone, Copy, Debug)]
pub struct Trim {
    pub api: Api,
    pub keep: Option<usize>,
    pub hide_usage: bool,
}

/// JSON that Python reads and this cannot judge.
#[derive(Debug)]
pub struct Unjudged;

/// `json.loads` of a str: Some(value), None (Python fails too), or Unjudged.
pub(crate) fn loads(text: &str) -> Result<Option<Value>, Unjudged> {
    match serde_json::from_str::<Value>(text) {
        Ok(value) => Ok(Some(value)),
        Err(error) => {
            if error.to_string().contains("recursion limit")
                || text.contains("NaN")
                || text.contains("Infinity")
                || text.contains("\\ud")
                || text.contains("\\uD")
            {
                Err(Unjudged)
            } else {
                Ok(None)
            }
        }
    }
}

// -- json.dumps ---------------------------------------------------------------------------------

pub fn dumps(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_value(value, &mut out);
    out
}

fn write_value(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => write_number(number, out),
        Value::String(text) => write_str(text, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(key, out);
                out.push(b':');
                write_value(item, out);
            }
            out.push(b'}');
        }
    }
}

fn write_str(text: &str, out: &mut Vec<u8>) {
    // serde_json escapes as Python does with ensure_ascii=False: \" \\ \b \f \n \r \t, the
    // other controls as \u00xx (lower case), nothing else
    serde_json::to_writer(&mut *out, text).expect("a string always writes");
}

fn is_float_text(text: &str) -> bool {
    text.contains(['.', 'e', 'E'])
}

fn write_number(number: &Number, out: &mut Vec<u8>) {
    let text = number.to_string();
    if !is_float_text(&text) {
        if text == "-0" {
            out.push(b'0');
        } else {
            out.extend_from_slice(text.as_bytes());
        }
        return;
    }
    let value: f64 = text.parse().unwrap_or(f64::NAN);
    out.extend_from_slice(python_float(value).as_bytes());
}

/// Python's `repr(float)` (and `json.dumps`'s `Infinity`).
pub fn python_float(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let shortest = format!("{value:e}"); // the shortest digits that read back: d.ddde-x
    let (mantissa, exponent) = shortest.split_once('e').unwrap_or((&shortest, "0"));
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let point = exponent + 1; // digits are 0.d1d2... times 10^point
    let mut out = String::with_capacity(digits.len() + 8);
    if negative {
        out.push('-');
    }
    if !(-4 < point && point <= 16) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exponent < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exponent.abs()));
    } else if point <= 0 {
        out.push_str("0.");
        out.push_str(&"0".repeat((-point) as usize));
        out.push_str(&digits);
    } else if point as usize >= digits.len() {
        out.push_str(&digits);
        out.push_str(&"0".repeat(point as usize - digits.len()));
        out.push_str(".0");
    } else {
        out.push_str(&digits[..point as usize]);
        out.push('.');
        out.push_str(&digits[point as usize..]);
    }
    out
}

/// `isinstance(value, int)` (a bool is one) and its value.
fn as_int(value: Option<&Value>) -> Option<i128> {
    match value? {
        Value::Bool(flag) => Some(i128::from(*flag)),
        Value::Number(number) => {
            let text = number.to_string();
            if is_float_text(&text) {
                None
            } else {
                text.parse().ok()
            }
        }
        _ => None,
    }
}

fn int_value(value: i128) -> Value {
    Value::Number(
        value
            .to_string()
            .parse()
            .expect("an integer is a JSON number"),
    )
}

/// Python's truth of a JSON value.
pub(crate) fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(flag) => *flag,
        Value::Number(number) => {
            let text = number.to_string();
            if is_float_text(&text) {
                !matches!(text.parse::<f64>(), Ok(v) if v == 0.0)
            } else {
                text.trim_start_matches('-').bytes().any(|b| b != b'0')
            }
        }
        Value::String(text) => !text.is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::Object(map) => !map.is_empty(),
    }
}

fn str_of(value: Option<&Value>) -> Option<&str> {
    match value {
        Some(Value::String(text)) => Some(text),
        _ => None,
    }
}

/// `closed_up`: the index an item keeps once the dropped ones before it are left out.
fn closed_up(index: i128, dropped: &[i128]) -> i128 {
    index - dropped.iter().filter(|gone| **gone < index).count() as i128
}

// -- whole responses ----------------------------------------------------------------------------

/// The wire's `trim(body, keep)`: whether it changed the body.
pub fn trim_body(api: Api, body: &mut Map<String, Value>, keep: usize, answers: &Answers) -> bool {
    match api {
        Api::Chat => {
            let mut changed = false;
            let Some(Value::Array(choices)) = body.get_mut("choices") else {
                return false;
            };
            for choice in choices.iter_mut() {
                let Value::Object(choice) = choice else {
                    continue;
                };
                let Some(Value::Object(message)) = choice.get_mut("message") else {
                    continue;
                };
                // `_calls_of`: the listed calls, then a legacy `function_call` (None)
                let listed = match message.get("tool_calls") {
                    Some(Value::Array(calls)) => Some(calls),
                    _ => None,
                };
                let legacy = match message.get("function_call") {
                    Some(Value::Object(function)) => Some(function),
                    _ => None,
                };
                let mut calls: Vec<(Option<&Value>, Option<&Value>)> = listed
                    .iter()
                    .flat_map(|calls| calls.iter())
                    .map(|call| {
                        (
                            Some(call),
                            call.get("function")
                                .and_then(|f| f.as_object())
                                .and_then(|f| f.get("name")),
                        )
                    })
                    .collect();
                if let Some(function) = legacy {
                    calls.push((None, function.get("name")));
                }
                if calls.is_empty() {
                    continue;
                }
                let mut kept: Vec<Option<Value>> = Vec::with_capacity(calls.len());
                let mut work = 0;
                for (call, name) in &calls {
                    if answers.is_answer(*name) {
                        kept.push(call.cloned());
                    } else if work < keep {
                        kept.push(call.cloned());
                        work += 1;
                    }
                }
                if kept.len() == calls.len() {
                    continue;
                }
                changed = true;
                let legacy_kept = kept.iter().any(Option::is_none);
                let any_kept = !kept.is_empty();
                let listed: Vec<Value> = kept.into_iter().flatten().collect();
                if !listed.is_empty() {
                    message.insert("tool_calls".into(), Value::Array(listed));
                } else if matches!(message.get("tool_calls"), Some(Value::Array(_))) {
                    message.shift_remove("tool_calls");
                }
                if !legacy_kept {
                    message.shift_remove("function_call");
                }
                if !any_kept
                    && matches!(
                        str_of(choice.get("finish_reason")),
                        Some("tool_calls" | "function_call")
                    )
                {
                    choice.insert("finish_reason".into(), Value::String("stop".into()));
                }
            }
            changed
        }
        Api::Responses => {
            let Some(Value::Array(output)) = body.get("output") else {
                return false;
            };
            let calls: Vec<usize> = output
                .iter()
                .enumerate()
                .filter(|(_, item)| {
                    item.as_object().is_some_and(|item| {
                        is_call_item(str_of(item.get("type")))
                            && !answers.is_answer(item.get("name"))
                    })
                })
                .map(|(i, _)| i)
                .collect();
            if calls.len() <= keep {
                return false;
            }
            let dropped = &calls[keep..];
            let kept: Vec<Value> = output
                .iter()
                .enumerate()
                .filter(|(i, _)| !dropped.contains(i))
                .map(|(_, item)| item.clone())
                .collect();
            body.insert("output".into(), Value::Array(kept));
            true
        }
        Api::Messages => {
            let Some(Value::Array(content)) = body.get("content") else {
                return false;
            };
            let uses: Vec<usize> = content
                .iter()
                .enumerate()
                .filter(|(_, block)| {
                    block.as_object().is_some_and(|block| {
                        str_of(block.get("type")) == Some("tool_use")
                            && !answers.is_answer(block.get("name"))
                    })
                })
                .map(|(i, _)| i)
                .collect();
            if uses.len() <= keep {
                return false;
            }
            let dropped = &uses[keep..];
            let kept: Vec<Value> = content
                .iter()
                .enumerate()
                .filter(|(i, _)| !dropped.contains(i))
                .map(|(_, block)| block.clone())
                .collect();
            let any_use = kept.iter().any(|block| {
                block
                    .as_object()
                    .is_some_and(|block| str_of(block.get("type")) == Some("tool_use"))
            });
            body.insert("content".into(), Value::Array(kept));
            if !any_use && str_of(body.get("stop_reason")) == Some("tool_use") {
                body.insert("stop_reason".into(), Value::String("end_turn".into()));
            }
            true
        }
    }
}

/// A whole (not streamed) response as the Python relay hands it on: Some(new bytes) when the
/// trim changed it, None when its bytes pass as they came (not JSON, not an object, nothing
/// past `keep`).
pub fn trim_whole(
    api: Api,
    data: &[u8],
    keep: usize,
    answers: &Answers,
) -> Result<Option<Vec<u8>>, Unjudged> {
    Ok(trim_whole_echo(api, data, keep, answers, None)?.map(|(out, _)| out))
}

/// `trim_whole`, and the echoed `instructions` set back to the client's (`echo`:
/// `responses.restore_echo`): Some((new bytes, whether calls were trimmed)) when either
/// changed it.
pub fn trim_whole_echo(
    api: Api,
    data: &[u8],
    keep: usize,
    answers: &Answers,
    echo: Option<&Value>,
) -> Result<Option<(Vec<u8>, bool)>, Unjudged> {
    let Ok(text) = std::str::from_utf8(data) else {
        return Ok(None);
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text); // json.loads(bytes) skips a BOM
    let Some(Value::Object(mut body)) = loads(text)? else {
        return Ok(None);
    };
    let trimmed = trim_body(api, &mut body, keep, answers);
    let restored = echo.is_some_and(|echo| restore_echo(&mut body, echo));
    Ok((trimmed || restored).then(|| (dumps(&Value::Object(body)), trimmed)))
}

/// `responses.restore_echo`: a response object's echoed `instructions` set back to the
/// client's; whether that changed it.
pub fn restore_echo(response: &mut Map<String, Value>, echo: &Value) -> bool {
    match response.get_mut("instructions") {
        Some(given) if given != echo => {
            *given = echo.clone();
            true
        }
        _ => false,
    }
}

/// `responses.restored_event`: a stream event whose response object echoes the instructions,
/// with the client's instead; None: as it came (no such echo, or one that cannot be read).
fn restored_event(event: &Event, echo: &Value) -> Option<Event> {
    if !event.raw.windows(14).any(|w| w == b"\"instructions\"") {
        return None;
    }
    let mut data = json_data(event).ok()??;
    let Some(Value::Object(response)) = data.get_mut("response") else {
        return None;
    };
    if !restore_echo(response, echo) {
        return None;
    }
    let data = Value::Object(data);
    Some(Event {
        raw: sse(&data, event.name.as_deref()),
        name: event.name.clone(),
        data: Some(String::from_utf8(dumps(&data)).unwrap_or_default()),
    })
}

// -- SSE ----------------------------------------------------------------------------------------

/// One event: its bytes as received, its `event:` name, its `data:` (None: none).
pub struct Event {
    pub raw: Vec<u8>,
    pub name: Option<String>,
    pub data: Option<String>,
}

/// `wire.SSEReader`: events split at a blank line (`\n\n`, `\r\n\r\n`, `\r\r`), bounded.
pub struct SseReader {
    buffer: Vec<u8>,
    pub broken: bool,
}

impl SseReader {
    pub fn new() -> Self {
        SseReader {
            buffer: Vec::new(),
            broken: false,
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Event> {
        if self.broken {
            return Vec::new();
        }
        self.buffer.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some((end, size)) = event_end(&self.buffer, start) {
            events.push(parse_event(&self.buffer[start..end + size]));
            start = end + size;
        }
        self.buffer.drain(..start);
        if self.buffer.len() > MAX_SSE_EVENT_BYTES {
            self.broken = true;
            self.buffer = Vec::new();
        }
        events
    }

    pub fn rest(&self) -> &[u8] {
        &self.buffer
    }
}

impl Default for SseReader {
    fn default() -> Self {
        Self::new()
    }
}

pub(crate) fn event_end(buffer: &[u8], start: usize) -> Option<(usize, usize)> {
    let mut at = start;
    while at + 1 < buffer.len() {
        match (buffer[at], buffer[at + 1]) {
            (b'\n', b'\n') | (b'\r', b'\r') => return Some((at, 2)),
            (b'\r', b'\n') if buffer[at..].starts_with(b"\r\n\r\n") => return Some((at, 4)),
            _ => at += 1,
        }
    }
    None
}

pub(crate) fn parse_event(raw: &[u8]) -> Event {
    let text = String::from_utf8_lossy(raw);
    let mut name = None;
    let mut data: Vec<&str> = Vec::new();
    for line in text.split("\r\n").flat_map(|part| part.split(['\r', '\n'])) {
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (key, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        if key == "data" {
            data.push(value);
        } else if key == "event" {
            name = Some(value.to_owned());
        }
    }
    let data = if data.is_empty() {
        None
    } else {
        Some(data.join("\n"))
    };
    Event {
        raw: raw.to_vec(),
        name,
        data,
    }
}

/// One SSE event of JSON data.
fn sse(data: &Value, name: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(name) = name.filter(|n| !n.is_empty()) {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    write_value(data, &mut out);
    out.extend_from_slice(b"\n\n");
    out
}

/// `json_data`: an event's data as a JSON object.
fn json_data(event: &Event) -> Result<Option<Map<String, Value>>, Unjudged> {
    match event.data.as_deref() {
        None | Some("[DONE]") => Ok(None),
        Some(text) => Ok(match loads(text)? {
            Some(Value::Object(map)) => Some(map),
            _ => None,
        }),
    }
}

/// `chat.usage_only`: the usage-only chunk that ends a Chat Completions stream asked for its
/// usage (no choices; a usage object).
fn usage_only(event: &Event) -> Result<bool, Unjudged> {
    let Some(data) = json_data(event)? else {
        return Ok(false);
    };
    Ok(
        matches!(data.get("choices"), Some(Value::Array(choices)) if choices.is_empty())
            && matches!(data.get("usage"), Some(Value::Object(_))),
    )
}

/// Whether the event ends the response, for the client (its type read only where the data
/// names it as is: an end spelled with escapes is told at the stream's end, as any other).
fn is_last(api: Api, event: &Event) -> bool {
    let Some(data) = event.data.as_deref() else {
        return false;
    };
    let kinds: &[&str] = match api {
        Api::Chat => return data == "[DONE]",
        Api::Responses => &DONE_EVENTS,
        Api::Messages => &["message_stop"],
    };
    if !kinds.iter().any(|kind| data.contains(kind)) {
        return false;
    }
    matches!(loads(data), Ok(Some(Value::Object(map)))
             if str_of(map.get("type")).is_some_and(|kind| kinds.contains(&kind)))
}

/// A stream passed as it comes, read only for its last event (a run's call with no bound on
/// its tool calls: its end is told at that event, before the client has it, as a trimmed
/// stream's is).
pub struct LastEvent {
    api: Api,
    reader: SseReader,
}

impl LastEvent {
    pub fn new(api: Api) -> Self {
        LastEvent {
            api,
            reader: SseReader::new(),
        }
    }

    /// Whether this chunk holds the response's last event (None: an event too long to read,
    /// the end is told at the stream's end).
    pub fn feed(&mut self, chunk: &[u8]) -> Option<bool> {
        let events = self.reader.feed(chunk);
        if self.reader.broken {
            return None;
        }
        Some(events.iter().any(|event| is_last(self.api, event)))
    }
}

/// A stream's rewriter (the wire's `stream_trimmer`): the bytes to send for each event
/// (empty: dropped), None for the event's own.
enum Rewriter {
    /// Each choice's calls (by its index: `n` > 1), and the calls seen of all of them.
    Chat {
        choices: Vec<(i128, ChatChoice)>,
        seen: usize,
    },
    Responses {
        calls: usize,
        dropped: Vec<i128>,
        skipped: i128,
    },
    Messages {
        uses: usize,
        answers: usize,
        dropped: Vec<i128>,
    },
}

/// A streamed response trimmed event by event, as `streams.relay_stream` does with a bound.
pub struct StreamTrim {
    api: Api,
    keep: Option<usize>,
    hide_usage: bool,
    answers: Answers,
    reader: SseReader,
    rewriter: Rewriter,
    /// The instructions the client sent, for those a Responses stream's response objects
    /// echo (`responses.restored_event`; not counted in `changed`).
    pub echo: Option<Value>,
    /// Whether any event was changed or left out.
    pub changed: bool,
    /// Whether the response's last event has come (`[DONE]`, a Responses end event,
    /// `message_stop`): the client may send its next request as soon as it has it.
    pub finished: bool,
}

impl StreamTrim {
    pub fn new(trim: Trim, answers: Answers) -> Self {
        let Trim {
            api,
            keep,
            hide_usage,
        } = trim;
        let rewriter = match api {
            Api::Chat => Rewriter::Chat {
                choices: Vec::new(),
                seen: 0,
            },
            Api::Responses => Rewriter::Responses {
                calls: 0,
                dropped: Vec::new(),
                skipped: 0,
            },
            Api::Messages => Rewriter::Messages {
                uses: 0,
                answers: 0,
                dropped: Vec::new(),
            },
        };
        StreamTrim {
            api,
            keep,
            hide_usage,
            answers,
            reader: SseReader::new(),
            rewriter,
            echo: None,
            changed: false,
            finished: false,
        }
    }

    /// The bytes to send for this chunk of the upstream's.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<u8>, Unjudged> {
        let events = self.reader.feed(chunk);
        if self.reader.broken {
            return Err(Unjudged); // an event too long to read: no call in it passed unjudged
        }
        let mut out = Vec::with_capacity(chunk.len());
        for event in &events {
            self.finished = self.finished || self.is_last(event);
            if self.hide_usage && usage_only(event)? {
                continue; // read already (the upstream's bytes are observed), not asked for
            }
            let restored = self
                .echo
                .as_ref()
                .and_then(|echo| restored_event(event, echo));
            let event = restored.as_ref().unwrap_or(event);
            match self.rewrite(event)? {
                Some(bytes) => {
                    self.changed = true;
                    out.extend_from_slice(&bytes);
                }
                None => out.extend_from_slice(&event.raw),
            }
        }
        Ok(out)
    }

    /// What came after the last whole event (a stream cut short), sent as it came.
    pub fn rest(&self) -> &[u8] {
        self.reader.rest()
    }

    fn rewrite(&mut self, event: &Event) -> Result<Option<Vec<u8>>, Unjudged> {
        let Some(keep) = self.keep else {
            return Ok(None);
        };
        if !self.may_change(event) {
            return Ok(None);
        }
        let Some(mut data) = json_data(event)? else {
            return Ok(None);
        };
        let (answers, api) = (&self.answers, self.api);
        match &mut self.rewriter {
            Rewriter::Chat { choices, seen } => {
                Ok(chat_rewrite(&mut data, keep, answers, choices, seen))
            }
            Rewriter::Responses {
                calls,
                dropped,
                skipped,
            } => {
                let kind = str_of(data.get("type")).map(str::to_owned);
                let index = as_int(data.get("output_index"));
                if kind.as_deref() == Some("response.output_item.added") && index.is_some() {
                    if let Some(Value::Object(item)) = data.get("item") {
                        if is_call_item(str_of(item.get("type")))
                            && !answers.is_answer(item.get("name"))
                        {
                            *calls += 1;
                            let index = index.unwrap_or_default();
                            if *calls > keep && !dropped.contains(&index) {
                                dropped.push(index); // a set: each index once
                            }
                        }
                    }
                }
                if let Some(index) = index {
                    if dropped.contains(&index) {
                        *skipped += 1;
                        return Ok(Some(Vec::new()));
                    }
                }
                let mut changed = false;
                if kind.as_deref().is_some_and(|k| DONE_EVENTS.contains(&k)) {
                    if let Some(Value::Object(response)) = data.get_mut("response") {
                        changed = trim_body(api, response, keep, answers);
                    }
                }
                if let Some(index) = index {
                    let moved = closed_up(index, dropped);
                    if moved != index {
                        data.insert("output_index".into(), int_value(moved));
                        changed = true;
                    }
                }
                if *skipped > 0 {
                    if let Some(sequence) = as_int(data.get("sequence_number")) {
                        data.insert("sequence_number".into(), int_value(sequence - *skipped));
                        changed = true;
                    }
                }
                Ok(changed.then(|| sse(&Value::Object(data), event.name.as_deref())))
            }
            Rewriter::Messages {
                uses,
                answers: answer_blocks,
                dropped,
            } => {
                let kind = str_of(data.get("type")).map(str::to_owned);
                let index = as_int(data.get("index"));
                if kind.as_deref() == Some("content_block_start") && index.is_some() {
                    if let Some(Value::Object(block)) = data.get("content_block") {
                        if str_of(block.get("type")) == Some("tool_use") {
                            if answers.is_answer(block.get("name")) {
                                *answer_blocks += 1;
                            } else {
                                *uses += 1;
                                let index = index.unwrap_or_default();
                                if *uses > keep && !dropped.contains(&index) {
                                    dropped.push(index); // a set: each index once
                                }
                            }
                        }
                    }
                }
                let block_event = matches!(
                    kind.as_deref(),
                    Some("content_block_start" | "content_block_delta" | "content_block_stop")
                );
                if block_event && index.is_some() {
                    let index = index.unwrap_or_default();
                    if dropped.contains(&index) {
                        return Ok(Some(Vec::new()));
                    }
                    let moved = closed_up(index, dropped);
                    if moved != index {
                        data.insert("index".into(), int_value(moved));
                        return Ok(Some(sse(&Value::Object(data), event.name.as_deref())));
                    }
                } else if kind.as_deref() == Some("message_delta")
                    && keep == 0
                    && !dropped.is_empty()
                    && *answer_blocks == 0
                {
                    if let Some(Value::Object(delta)) = data.get_mut("delta") {
                        if str_of(delta.get("stop_reason")) == Some("tool_use") {
                            delta.insert("stop_reason".into(), Value::String("end_turn".into()));
                            return Ok(Some(sse(&Value::Object(data), event.name.as_deref())));
                        }
                    }
                }
                Ok(None)
            }
        }
    }

    fn is_last(&self, event: &Event) -> bool {
        is_last(self.api, event)
    }

    /// Whether an event can be changed (else it is not parsed): one whose data names none of
    /// what a rewrite reads, and holds no escape that could spell it, passes as it came.
    fn may_change(&self, event: &Event) -> bool {
        let Some(data) = event.data.as_deref() else {
            return false;
        };
        if data.contains('\\') {
            return true;
        }
        match (&self.rewriter, self.api) {
            (Rewriter::Chat { .. }, _) => {
                data.contains("tool_calls") || data.contains("function_call")
            }
            (
                Rewriter::Responses {
                    skipped, dropped, ..
                },
                _,
            ) => {
                *skipped > 0
                    || !dropped.is_empty()
                    || data.contains("_call\"")
                    || data.contains("response.completed")
                    || data.contains("response.incomplete")
                    || data.contains("response.failed")
            }
            (Rewriter::Messages { dropped, .. }, _) => {
                !dropped.is_empty() || data.contains("tool_use")
            }
        }
    }
}

/// The Responses output items the agent carries out itself: a tool call each (as
/// `watchdog.core.model.responses.CALL_ITEMS` names them).
const CALL_ITEMS: [&str; 6] = [
    "function_call",
    "custom_tool_call",
    "computer_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
];

fn is_call_item(kind: Option<&str>) -> bool {
    kind.is_some_and(|kind| CALL_ITEMS.contains(&kind))
}

/// A chat stream's calls so far, of one choice (`chat._Choice`): each call's index (None: a
/// legacy `function_call`) and the index it is handed on at (None: dropped), the calls that
/// are not final answers seen, the indexed calls kept, and all calls kept.
#[derive(Default)]
struct ChatChoice {
    slots: Vec<(Option<i128>, Option<i128>)>,
    work: usize,
    kept: i128,
    handed: usize,
}

fn chat_slot(
    call: &Map<String, Value>,
    number: i128,
    index: Option<i128>,
    keep: usize,
    answers: &Answers,
    states: &mut Vec<(i128, ChatChoice)>,
    seen: &mut usize,
) -> Option<i128> {
    let at = states.iter().position(|(n, _)| *n == number);
    if let Some(at) = at {
        if let Some((_, slot)) = states[at].1.slots.iter().find(|(i, _)| *i == index) {
            return *slot;
        }
    }
    if *seen >= MAX_TOOL_CALLS_SEEN {
        return None;
    }
    *seen += 1; // (so a choice is kept only with a call: they are bounded too)
    let at = at.unwrap_or_else(|| {
        states.push((number, ChatChoice::default()));
        states.len() - 1
    });
    let state = &mut states[at].1;
    let name = call
        .get("function")
        .and_then(|f| f.as_object())
        .and_then(|f| f.get("name"));
    let mut taken = answers.is_answer(name);
    if !taken {
        taken = state.work < keep;
        state.work += 1;
    }
    let mut slot = None;
    if taken {
        slot = Some(if index.is_some() { state.kept } else { 0 });
        if index.is_some() {
            state.kept += 1;
        }
        state.handed += 1;
    }
    state.slots.push((index, slot));
    slot
}

fn chat_rewrite(
    data: &mut Map<String, Value>,
    keep: usize,
    answers: &Answers,
    states: &mut Vec<(i128, ChatChoice)>,
    seen: &mut usize,
) -> Option<Vec<u8>> {
    let Some(Value::Array(choices)) = data.get_mut("choices") else {
        return None;
    };
    let single = choices.len() == 1;
    let (mut changed, mut empty) = (false, false);
    for choice in choices.iter_mut() {
        let Value::Object(choice) = choice else {
            continue;
        };
        let number = as_int(choice.get("index")).unwrap_or(0);
        let finish_none = matches!(choice.get("finish_reason"), None | Some(Value::Null));
        if let Some(Value::Object(delta)) = choice.get_mut("delta") {
            let mut emptied = false;
            if let Some(Value::Array(calls)) = delta.get("tool_calls") {
                let mut out = Vec::with_capacity(calls.len());
                let mut moved = false;
                for call in calls {
                    let index = call.as_object().and_then(|c| as_int(c.get("index")));
                    let (Some(map), Some(index)) = (call.as_object(), index) else {
                        out.push(call.clone());
                        continue;
                    };
                    match chat_slot(map, number, Some(index), keep, answers, states, seen) {
                        None => moved = true,
                        Some(slot) if slot != index => {
                            let mut renumbered = map.clone();
                            renumbered.insert("index".into(), int_value(slot));
                            out.push(Value::Object(renumbered));
                            moved = true;
                        }
                        Some(_) => out.push(call.clone()),
                    }
                }
                if moved {
                    changed = true;
                    if out.is_empty() {
                        delta.shift_remove("tool_calls");
                        emptied = true;
                    } else {
                        delta.insert("tool_calls".into(), Value::Array(out));
                    }
                }
            }
            if let Some(Value::Object(function)) = delta.get("function_call") {
                let mut call = Map::new();
                call.insert("function".into(), Value::Object(function.clone()));
                if chat_slot(&call, number, None, keep, answers, states, seen).is_none() {
                    delta.shift_remove("function_call");
                    changed = true;
                    emptied = true;
                }
            }
            if emptied {
                empty = !delta.values().any(truthy) && finish_none;
            }
        }
        let handed = states
            .iter()
            .find(|(n, _)| *n == number)
            .map_or(0, |(_, c)| c.handed);
        if handed == 0
            && matches!(
                str_of(choice.get("finish_reason")),
                Some("tool_calls" | "function_call")
            )
        {
            choice.insert("finish_reason".into(), Value::String("stop".into()));
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    if empty && single && !data.get("usage").is_some_and(truthy) {
        return Some(Vec::new());
    }
    Some(sse(&Value::Object(std::mem::take(data)), None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_answer_tools_a_request_offers_are_read_as_python_reads_them() {
        let all = Answers {
            names: vec!["final_answer".into()],
            prefixes: vec!["final_result_".into()],
        };
        let mut names: Vec<String> = ["search", "final_answer", "final_answer"]
            .map(str::to_owned)
            .into();
        names.extend((0..20).map(|n| format!("final_result_{n}")));
        let found = all.among(&names);
        assert_eq!(found.len(), MAX_ANSWERS_OFFERED);
        assert_eq!(found[..2], ["final_answer", "final_result_0"]);
        assert_eq!(found.last().unwrap(), "final_result_14");
    }

    #[test]
    fn a_final_answer_tool_the_request_does_not_offer_is_work() {
        let all = Answers {
            names: vec!["final_answer".into(), "final_result".into()],
            prefixes: vec!["final_result_".into()],
        };
        let offered = ["search".to_owned(), "final_answer".to_owned()];
        let answers = all.clone().offered(Some(&offered)).with(Some("exit"));
        let name = |n: &str| Value::String(n.into());
        for (tool, answer) in [
            ("final_answer", true),
            ("exit", true),
            ("final_result", false),
            ("final_result_x", false),
            ("search", false),
        ] {
            assert_eq!(answers.is_answer(Some(&name(tool))), answer, "{tool}");
        }
        let any = all.offered(None);
        assert!(any.is_answer(Some(&name("final_result_x"))));
        let mut body = serde_json::json!({"choices": [{"message": {"tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "final_result", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "search", "arguments": "{}"}},
        ]}}]});
        assert!(trim_body(
            Api::Chat,
            body.as_object_mut().unwrap(),
            1,
            &answers
        ));
        let kept = &body["choices"][0]["message"]["tool_calls"];
        assert_eq!(kept.as_array().unwrap().len(), 1);
        assert_eq!(kept[0]["function"]["name"], "final_result");
    }

    #[test]
    fn floats_as_python_writes_them() {
        for (value, text) in [
            (1.0, "1.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.5, "1.5"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (123.456, "123.456"),
            (1.5e-7, "1.5e-07"),
            (1e100, "1e+100"),
            (0.1, "0.1"),
        ] {
            assert_eq!(python_float(value), text);
        }
    }

    #[test]
    fn sse_split() {
        let mut reader = SseReader::new();
        let events = reader.feed(b"data: a\n\nevent: x\r\ndata: b\r\n\r\ndata: c");
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].name.as_deref(), Some("x"));
        assert_eq!(reader.rest(), b"data: c");
    }
}
