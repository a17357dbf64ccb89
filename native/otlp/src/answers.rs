//! A model's output read for its answer (``outcome.answer_text``, ``has_text``,
//! ``_requests_tools``) and a prompt for the limit a framework announces in it
//! (``outcome.prompt_limit``), as the Python twins read them: a JSON output parsed in document
//! order (`Doc`: a Python dict's order), its text parts joined as Python joins them, blank as
//! ``str.strip`` says. Where the two could differ (JSON Python reads and serde_json does not:
//! NaN, a lone surrogate, a number too long; a key written twice; a prompt whose last message
//! Python parses) the answer is `Unsure` and Python reads the output.

use pyo3::intern;
use pyo3::prelude::*;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// How a model call or an agent's run ended, as its record holds it (set where not the default).
#[derive(Default)]
pub struct Ending<'py> {
    pub finish_reason: Option<Bound<'py, PyAny>>,
    /// the limit it stopped at
    pub limit_stop: Option<Bound<'py, PyAny>>,
    /// it answered (this text, where it has one)
    pub final_answer: bool,
    pub final_output: Option<Bound<'py, PyAny>>,
    pub messages: i64,
}

impl Ending<'_> {
    pub fn set(self, py: Python<'_>, record: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Some(finish) = self.finish_reason {
            record.setattr(intern!(py, "finish_reason"), finish)?;
        }
        if let Some(limit) = self.limit_stop {
            record.setattr(intern!(py, "limit_stop"), limit)?;
        }
        if self.final_answer {
            record.setattr(intern!(py, "final_answer"), true)?;
        }
        if let Some(text) = self.final_output {
            record.setattr(intern!(py, "final_output"), text)?;
        }
        if self.messages != 0 {
            record.setattr(intern!(py, "messages"), self.messages)?;
        }
        Ok(())
    }
}

/// Why a value is left to Python (its reader answers None, none set).
pub struct Unsure;

/// ``str.isspace`` of one character: Unicode's White_Space and the four separators
/// (U+001C..U+001F) Python counts as space too.
fn python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// ``text.strip()``.
pub fn strip(text: &str) -> &str {
    text.trim_matches(python_space)
}

/// ``not text.strip()``.
pub fn blank(text: &str) -> bool {
    text.chars().all(python_space)
}

/// A JSON value as Python's json makes it, in document order; a number only as its truth.
pub enum Doc {
    Null,
    Bool(bool),
    Number(bool),
    Text(String),
    List(Vec<Doc>),
    Object(Vec<(String, Doc)>),
}

impl Doc {
    /// ``bool(value)``
    fn truthy(&self) -> bool {
        match self {
            Doc::Null => false,
            Doc::Bool(flag) | Doc::Number(flag) => *flag,
            Doc::Text(text) => !text.is_empty(),
            Doc::List(items) => !items.is_empty(),
            Doc::Object(entries) => !entries.is_empty(),
        }
    }

    fn get(&self, key: &str) -> Option<&Doc> {
        match self {
            Doc::Object(entries) => entries
                .iter()
                .find(|(name, _)| name == key)
                .map(|(_, value)| value),
            _ => None,
        }
    }

    /// ``_typed``: whether an object's ``type`` is a text among `types`.
    fn typed(&self, types: &[&str]) -> bool {
        matches!(self.get("type"), Some(Doc::Text(kind)) if types.contains(&kind.as_str()))
    }

    fn container(&self) -> bool {
        matches!(self, Doc::List(_) | Doc::Object(_))
    }
}

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DocVisitor)
    }
}

struct DocVisitor;

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Doc, E> {
        Ok(Doc::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Doc, E> {
        Ok(Doc::Number(value != 0))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Doc, E> {
        Ok(Doc::Number(value != 0))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Doc, E> {
        Ok(Doc::Number(value != 0.0))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Doc, E> {
        Ok(Doc::Text(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Doc, E> {
        Ok(Doc::Text(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Doc, A::Error> {
        let mut list = Vec::new();
        while let Some(item) = items.next_element()? {
            list.push(item);
        }
        Ok(Doc::List(list))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut entries: Vec<(String, Doc)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if entries.iter().any(|(seen, _)| *seen == key) {
                // (Python keeps the first place and the last value: rare, Python's)
                return Err(de::Error::custom("a key written twice"));
            }
            let value = map.next_value()?;
            entries.push((key, value));
        }
        Ok(Doc::Object(entries))
    }
}

/// ``outcome._parsed`` of a text: Ok(None) where Python keeps it as text (it opens with no
/// ``[`` or ``{``), the value where it is JSON both read alike, else Unsure.
pub fn parsed(text: &str) -> Result<Option<Doc>, Unsure> {
    let first = text.chars().find(|c| !python_space(*c));
    if !matches!(first, Some('[' | '{')) {
        return Ok(None);
    }
    if crate::kernels::long_digit_run(text) {
        return Err(Unsure); // an integer Python's json refuses
    }
    match serde_json::from_str(text) {
        Ok(doc) => Ok(Some(doc)),
        Err(error) if no_json(text, &error) => Ok(None),
        // (serde_json refuses what Python's json may read: NaN, 1e400, a lone surrogate,
        // deeper than 128; and a key written twice, refused above)
        Err(_) => Err(Unsure),
    }
}

/// Whether a text serde_json refuses is no JSON to Python's json either: a syntax error, in a
/// text without the literals, escapes and numbers only Python's reads.
fn no_json(text: &str, error: &serde_json::Error) -> bool {
    use serde_json::error::Category;
    if !matches!(error.classify(), Category::Syntax | Category::Eof) {
        return false; // (a key written twice)
    }
    let message = error.to_string();
    if message.starts_with("number out of range") || message.starts_with("recursion limit") {
        return false;
    }
    if text.contains("NaN") || text.contains("Infinity") {
        return false;
    }
    // (an escaped surrogate, \uD800 to \uDFFF, may stand alone: Python reads it)
    let bytes = text.as_bytes();
    !bytes.windows(4).any(|four| {
        four[0] == b'\\'
            && four[1] == b'u'
            && matches!(four[2], b'd' | b'D')
            && matches!(four[3], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
    })
}

/// ``outcome.MAX_JSON_DEPTH``, ``MAX_ANSWER_PARTS``; the keys and types the readers look for.
const MAX_JSON_DEPTH: usize = 8;
const MAX_ANSWER_PARTS: usize = 64;
const TOOL_REQUEST_MARKERS: [&str; 5] = [
    "\"tool_call",
    "\"toolUse\"",
    "\"function_call\"",
    "\"tool_use\"",
    "\"functionCall\"",
];
const TOOL_REQUEST_KEYS: [&str; 5] = [
    "tool_calls",
    "toolUse",
    "function_call",
    "tool_use",
    "functionCall",
];
const TOOL_REQUEST_TYPES: [&str; 3] = ["tool_call", "function_call", "tool_use"];
const ANSWER_SKIP_TYPES: [&str; 6] = [
    "tool_call",
    "function_call",
    "tool_use",
    "reasoning",
    "thinking",
    "redacted_thinking",
];
const ANSWER_SKIP_KEYS: [&str; 10] = [
    "tool_calls",
    "toolUse",
    "function_call",
    "tool_use",
    "functionCall",
    "arguments",
    "input",
    "usage",
    "role",
    "id",
];
const TEXT_KEYS: [&str; 2] = ["text", "content"];
/// ``INSTRUCTION_ROLES``
const INSTRUCTION_ROLES: [&str; 2] = ["system", "developer"];

/// A model's output (a text) read once: parsed where a reader needs it.
pub struct Output<'a> {
    text: &'a str,
    doc: Option<Doc>,
}

impl<'a> Output<'a> {
    pub fn read(text: &'a str) -> Result<Self, Unsure> {
        Ok(Output {
            text,
            doc: parsed(text)?,
        })
    }

    /// ``outcome.output_finish_reason``: the finish reason of the last message (of a list, or
    /// the one object) that has one.
    pub fn finish_reason(&self) -> Option<&Doc> {
        let doc = self.doc.as_ref()?;
        let messages = match doc {
            Doc::Object(_) => std::slice::from_ref(doc),
            Doc::List(items) => items.as_slice(),
            _ => return None,
        };
        messages.iter().rev().find_map(|message| {
            message
                .get("finish_reason")
                .filter(|reason| reason.truthy())
        })
    }

    /// ``_asks_answer_tools_only`` of an output whose text names one of the answer tools:
    /// whether every tool it asks for is one (``ANSWER_TOOLS``, ``ANSWER_TOOL_PREFIXES``).
    pub fn asks_answer_tools_only(&self, tools: &[String], prefixes: &[String]) -> bool {
        let Some(doc) = &self.doc else {
            return false;
        };
        let mut names: Vec<Option<&Doc>> = Vec::new();
        tool_request_names(doc, 0, &mut names);
        !names.is_empty()
            && names.iter().all(|name| match name {
                Some(Doc::Text(name)) => {
                    tools.contains(name)
                        || prefixes
                            .iter()
                            .any(|prefix| name.starts_with(prefix.as_str()))
                }
                _ => false,
            })
    }

    /// ``_requests_tools``
    pub fn requests_tools(&self) -> bool {
        if !TOOL_REQUEST_MARKERS
            .iter()
            .any(|marker| self.text.contains(marker))
        {
            return false;
        }
        self.doc
            .as_ref()
            .is_some_and(|doc| has_tool_request(doc, 0))
    }

    /// ``has_text``
    pub fn has_text(&self) -> bool {
        match &self.doc {
            None => !blank(self.text),
            Some(Doc::List(items))
                if !items.is_empty()
                    && items.iter().all(|item| {
                        matches!(item, Doc::Object(_)) && item.get("role").is_some()
                    }) =>
            {
                // an instruction is no answer (Koog's agent span's output is its system prompt)
                items
                    .iter()
                    .any(|item| !instruction(item) && text_in(item, 1))
            }
            Some(_) => true,
        }
    }

    /// ``answer_text``
    pub fn answer_text(&self) -> Option<String> {
        let Some(doc) = &self.doc else {
            return (!blank(self.text)).then(|| self.text.to_owned());
        };
        let mut texts: Vec<&str> = Vec::new();
        answer_parts(doc, 0, &mut texts);
        let joined = texts
            .into_iter()
            .filter(|text| !blank(text))
            .collect::<Vec<_>>()
            .join("\n");
        (!joined.is_empty()).then_some(joined)
    }
}

fn has_tool_request(value: &Doc, depth: usize) -> bool {
    if depth > MAX_JSON_DEPTH {
        return false;
    }
    match value {
        Doc::Object(entries) => {
            if value.typed(&TOOL_REQUEST_TYPES) {
                return true;
            }
            entries.iter().any(|(key, item)| {
                (TOOL_REQUEST_KEYS.contains(&key.as_str()) && item.truthy())
                    || (item.container() && has_tool_request(item, depth + 1))
            })
        }
        Doc::List(items) => items.iter().any(|item| has_tool_request(item, depth + 1)),
        _ => false,
    }
}

/// ``_tool_request_names``: None for a request whose name is not there.
fn tool_request_names<'d>(value: &'d Doc, depth: usize, names: &mut Vec<Option<&'d Doc>>) {
    if depth > MAX_JSON_DEPTH {
        return;
    }
    match value {
        Doc::Object(entries) => {
            if value.typed(&TOOL_REQUEST_TYPES) {
                names.push(call_name(value));
                return;
            }
            for (key, item) in entries {
                if TOOL_REQUEST_KEYS.contains(&key.as_str()) && item.truthy() {
                    match item {
                        Doc::List(calls) => names.extend(calls.iter().map(call_name)),
                        _ => names.push(call_name(item)),
                    }
                } else if item.container() {
                    tool_request_names(item, depth + 1, names);
                }
            }
        }
        Doc::List(items) => {
            for item in items {
                tool_request_names(item, depth + 1, names);
            }
        }
        _ => {}
    }
}

/// ``_call_name``: ``name``, or OpenAI's ``function.name``; None for none (or null).
fn call_name(call: &Doc) -> Option<&Doc> {
    let Doc::Object(_) = call else {
        return None;
    };
    match call.get("name") {
        None | Some(Doc::Null) => match call.get("function") {
            Some(function @ Doc::Object(_)) => function
                .get("name")
                .filter(|name| !matches!(name, Doc::Null)),
            _ => None,
        },
        name => name,
    }
}

/// ``_instruction``: a message whose role (in any case) is one of ``INSTRUCTION_ROLES``.
fn instruction(message: &Doc) -> bool {
    matches!(message.get("role"), Some(Doc::Text(role))
        if INSTRUCTION_ROLES.iter().any(|wanted| role.eq_ignore_ascii_case(wanted)))
}

fn text_in(value: &Doc, depth: usize) -> bool {
    if depth > MAX_JSON_DEPTH {
        return false;
    }
    match value {
        Doc::Object(entries) => entries.iter().any(|(key, item)| {
            (TEXT_KEYS.contains(&key.as_str()) && matches!(item, Doc::Text(text) if !blank(text)))
                || (item.container() && text_in(item, depth + 1))
        }),
        Doc::List(items) => items.iter().any(|item| text_in(item, depth + 1)),
        Doc::Null | Doc::Bool(_) => false,
        _ => true,
    }
}

fn answer_parts<'d>(value: &'d Doc, depth: usize, texts: &mut Vec<&'d str>) {
    if depth > MAX_JSON_DEPTH || texts.len() >= MAX_ANSWER_PARTS {
        return;
    }
    match value {
        Doc::Object(entries) => {
            if value.typed(&ANSWER_SKIP_TYPES) {
                return;
            }
            for (key, item) in entries {
                if ANSWER_SKIP_KEYS.contains(&key.as_str()) {
                    continue;
                }
                match item {
                    Doc::Text(text) if TEXT_KEYS.contains(&key.as_str()) => texts.push(text),
                    _ if item.container() => answer_parts(item, depth + 1, texts),
                    _ => {}
                }
            }
        }
        Doc::List(items) => {
            for item in items {
                answer_parts(item, depth + 1, texts);
            }
        }
        _ => {}
    }
}

/// The first and last `chars` characters of a text (``text[:chars]``, ``text[-chars:]``).
fn head(text: &str, chars: usize) -> &str {
    match text.char_indices().nth(chars) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

fn tail(text: &str, chars: usize) -> &str {
    match chars
        .checked_sub(1)
        .and_then(|skip| text.char_indices().rev().nth(skip))
    {
        Some((start, _)) => &text[start..],
        None => text,
    }
}

/// Whether a text is found in a value's JSON (``json.dumps(value, ensure_ascii=False)``) by
/// looking in its strings alone: it has none of the characters JSON escapes and at least one
/// that no number, literal or separator between strings is written with.
pub fn found_in_strings_alone(needle: &str) -> bool {
    !needle
        .chars()
        .any(|c| c == '"' || c == '\\' || (c as u32) < 0x20)
        && needle
            .chars()
            .any(|c| !"{}[],: 0123456789.eE+-truefalsn".contains(c))
}

/// Whether one of a value's strings (an object's keys too) contains `needle`.
fn in_strings(value: &Doc, needle: &str) -> bool {
    match value {
        Doc::Text(text) => text.contains(needle),
        Doc::List(items) => items.iter().any(|item| in_strings(item, needle)),
        Doc::Object(entries) => entries
            .iter()
            .any(|(key, item)| key.contains(needle) || in_strings(item, needle)),
        _ => false,
    }
}

/// ``outcome.prompt_limit``: the limit of the first of `last` (``LIMIT_PROMPTS``) found in the
/// last message of a prompt (a JSON message list, or an object holding one as ``messages``;
/// else the text from its tail's last ``"role"`` key on), else of the first of `system` found
/// in its first `chars` characters. Unsure where Python might read the prompt otherwise: a
/// JSON list serde_json does not read, a text of `last` that the message's JSON writes
/// otherwise (`found_in_strings_alone`).
pub fn prompt_limit<'t>(
    text: &str,
    last: &'t [(String, String)],
    system: &'t [(String, String)],
    chars: usize,
) -> Result<Option<&'t str>, Unsure> {
    let end = tail(text, chars);
    if last.iter().any(|(needle, _)| end.contains(needle.as_str())) {
        // (the common case: none there, and nothing is parsed)
        let doc = parsed(text)?;
        let messages = match &doc {
            Some(object @ Doc::Object(_)) => object.get("messages"),
            other => other.as_ref(),
        };
        let message = match messages {
            Some(Doc::List(items)) => items.last().filter(|last| matches!(last, Doc::Object(_))),
            _ => None,
        };
        for (needle, limit) in last {
            if !end.contains(needle.as_str()) {
                continue;
            }
            let found = match message {
                Some(message) => {
                    if !found_in_strings_alone(needle) {
                        return Err(Unsure);
                    }
                    in_strings(message, needle)
                }
                None => {
                    let from = end.rfind("\"role\"").unwrap_or(0);
                    end[from..].contains(needle.as_str())
                }
            };
            if found {
                return Ok(Some(limit));
            }
        }
    }
    if system.is_empty() {
        return Ok(None);
    }
    let start = head(text, chars);
    Ok(system
        .iter()
        .find(|(prompt, _)| start.contains(prompt.as_str()))
        .map(|(_, limit)| limit.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_strips_what_unicode_and_its_separators_call_space() {
        assert_eq!(strip("\u{1c} a\u{3000}"), "a");
        assert!(blank("\u{85}\u{a0}\t") && !blank("\u{200b}"));
    }

    #[test]
    fn answers_keep_the_documents_order_and_leave_twice_written_keys_to_python() {
        let output = Output::read(r#"[{"role": "a", "content": "x", "text": "y"}]"#)
            .ok()
            .unwrap();
        assert_eq!(output.answer_text().as_deref(), Some("x\ny"));
        assert!(Output::read(r#"{"a": 1, "a": 2}"#).is_err());
        assert!(Output::read("[NaN]").is_err());
        assert!(Output::read("not [json").ok().unwrap().has_text());
        assert!(Output::read("[[ ## thought ## ]]").ok().unwrap().has_text());
        assert!(Output::read("[NaN").is_err() && Output::read(r#"["\udc00"#).is_err());
    }

    #[test]
    fn a_prompts_head_and_tail_are_counted_in_characters() {
        assert_eq!(tail("éab", 2), "ab");
        assert_eq!(head("éab", 2), "éa");
        assert_eq!(tail("ab", 5), "ab");
        let system = [("stuck".to_owned(), "max_steps".to_owned())];
        assert!(matches!(
            prompt_limit("é stuck", &[], &system, 7),
            Ok(Some("max_steps"))
        ));
        assert!(matches!(prompt_limit("é stuck", &[], &system, 3), Ok(None)));
        let last = [("MUST answer".to_owned(), "max_iter".to_owned())];
        let prompt =
            r#"[{"role": "user", "content": "MUST answer"}, {"role": "a", "content": "x"}]"#;
        assert!(matches!(
            prompt_limit(prompt, &last, &system, 2048),
            Ok(None)
        ));
        let prompt = r#"{"messages": [{"content": "now MUST answer", "role": "user"}]}"#;
        assert!(matches!(
            prompt_limit(prompt, &last, &system, 2048),
            Ok(Some("max_iter"))
        ));
        assert!(matches!(
            prompt_limit("MUST answer \"role\" x", &last, &system, 2048),
            Ok(None)
        ));
        assert!(prompt_limit("[NaN, \"MUST answer\"]", &last, &system, 2048).is_err());
    }
}
