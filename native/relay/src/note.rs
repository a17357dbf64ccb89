//! A note written into a Chat Completions request as a splice of its bytes (DESIGN §12, "the
//! relay"): the countdown ("[budget: 3 of 20 tool calls left — wrap up soon]") goes where
//! Python's `ChatWire.add_note` puts it, and everything else of the body stays as it came,
//! byte for byte. Python's steering writes a note with this very function (`Relay.splice_note`)
//! and the relay writes the one of a countdown request it sends on before Python has read it,
//! so both send the upstream the same bytes.
//!
//! Where `add_note` puts it: into the first message whose role is `system` or `developer` (a
//! string's content gets `"\n\n"` and the note after it, an empty string's or one of another
//! type's is the note, a list of parts gets a text part more, a message without content gets
//! it as its content), else into a system message put first. The note is escaped as Python's
//! `json.dumps(..., ensure_ascii=False)` escapes a string.
//!
//! None, and Python's own edit (the body written anew), when this cannot be sure to edit what
//! Python reads: a body that is not JSON (or nests past serde_json's 128 levels), a top-level
//! `messages` named twice or not a list, a message before the one edited that names its role
//! or content twice.

/// The body with `note` written into its instructions as `add_note` writes it (None: not sure).
pub fn splice_note(body: &[u8], note: &str) -> Option<Vec<u8>> {
    serde_json::from_slice::<serde_json::Value>(body).ok()?;
    splice_read(body, note)
}

/// [`splice_note`] of a body read already as JSON (`serde_json::Value`: UTF-8, escapes,
/// nesting checked), as the relay's admission reads each request it sends on.
pub fn splice_read(body: &[u8], note: &str) -> Option<Vec<u8>> {
    let mut scan = Scan { data: body, at: 0 };
    let (start, end) = scan.member_of_top("messages")?;
    if body[start] != b'[' {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() + note.len() + 48);
    let mut items = Scan {
        data: body,
        at: start + 1,
    };
    let mut empty = true;
    while let Some((item, item_end)) = items.next_item(end - 1) {
        empty = false;
        if body[item] != b'{' {
            continue;
        }
        let message = read_message(body, item, item_end)?;
        if !message.instructions {
            continue;
        }
        let (at, insert, cut) = match message.content {
            None => (message.close, field(note), message.close),
            Some((from, to)) => match body[from] {
                b'"' if to - from == 2 => (from + 1, escaped(note), from + 1),
                b'"' => {
                    let mut text = b"\\n\\n".to_vec();
                    text.extend_from_slice(&escaped(note));
                    (to - 1, text, to - 1)
                }
                b'[' => {
                    let close = to - 1;
                    let mut inner = Scan {
                        data: body,
                        at: from + 1,
                    };
                    let mut part = if inner.next_item(close).is_some() {
                        b",".to_vec()
                    } else {
                        Vec::new()
                    };
                    part.extend_from_slice(b"{\"type\":\"text\",\"text\":\"");
                    part.extend_from_slice(&escaped(note));
                    part.extend_from_slice(b"\"}");
                    (close, part, close)
                }
                _ => {
                    let mut text = b"\"".to_vec();
                    text.extend_from_slice(&escaped(note));
                    text.push(b'"');
                    (from, text, to)
                }
            },
        };
        out.extend_from_slice(&body[..at]);
        out.extend_from_slice(&insert);
        out.extend_from_slice(&body[cut..]);
        return Some(out);
    }
    // none: a system message first
    out.extend_from_slice(&body[..start + 1]);
    out.extend_from_slice(b"{\"role\":\"system\",\"content\":\"");
    out.extend_from_slice(&escaped(note));
    out.extend_from_slice(b"\"}");
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(&body[start + 1..]);
    Some(out)
}

/// `,"content":"<note>"`, for a message that has none (Python's `{**message, "content": ...}`
/// puts it last).
fn field(note: &str) -> Vec<u8> {
    let mut text = b",\"content\":\"".to_vec();
    text.extend_from_slice(&escaped(note));
    text.push(b'"');
    text
}

/// What an object among the messages says: whether its role is an instruction's, where its
/// content's value is (None: it has none) and where it closes; None when it names its role or
/// its content twice (Python reads the last; this does not guess).
struct Message {
    instructions: bool,
    content: Option<(usize, usize)>,
    close: usize,
}

fn read_message(data: &[u8], start: usize, end: usize) -> Option<Message> {
    let mut scan = Scan {
        data,
        at: start + 1,
    };
    let mut role = None;
    let mut content = None;
    while let Some((key, value, value_end)) = scan.next_member(end - 1) {
        match key.as_str() {
            "role" => {
                if role.replace((value, value_end)).is_some() {
                    return None;
                }
            }
            "content" => {
                if content.replace((value, value_end)).is_some() {
                    return None;
                }
            }
            _ => {}
        }
    }
    let instructions = role.is_some_and(|(from, to)| {
        data[from] == b'"'
            && matches!(
                string_at(data, from, to).as_deref(),
                Some("system" | "developer")
            )
    });
    Some(Message {
        instructions,
        content,
        close: end - 1,
    })
}

/// The text of the JSON string at `from..to`.
fn string_at(data: &[u8], from: usize, to: usize) -> Option<String> {
    let raw = &data[from..to];
    if !raw[1..raw.len() - 1].contains(&b'\\') {
        return std::str::from_utf8(&raw[1..raw.len() - 1])
            .ok()
            .map(str::to_owned);
    }
    serde_json::from_slice::<String>(raw).ok()
}

/// `text` as Python's `json.dumps(text, ensure_ascii=False)` writes it, without the quotes.
pub fn escaped(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 8);
    for &byte in text.as_bytes() {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0..=0x1f => out.extend_from_slice(format!("\\u{byte:04x}").as_bytes()),
            _ => out.push(byte),
        }
    }
    out
}

/// A cursor over JSON known to be valid (checked first).
struct Scan<'a> {
    data: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn skip_space(&mut self) {
        while self.at < self.data.len()
            && matches!(self.data[self.at], b' ' | b'\t' | b'\n' | b'\r')
        {
            self.at += 1;
        }
    }

    /// Skips the value at the cursor; its end.
    fn skip_value(&mut self) -> usize {
        let data = self.data;
        match data[self.at] {
            b'"' => self.skip_string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match data[self.at] {
                        b'"' => {
                            self.skip_string();
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.at += 1;
                                return self.at;
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                while self.at < data.len()
                    && !matches!(
                        data[self.at],
                        b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r'
                    )
                {
                    self.at += 1;
                }
                self.at
            }
        }
    }

    fn skip_string(&mut self) -> usize {
        self.at += 1;
        loop {
            match self.data[self.at] {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    return self.at;
                }
                _ => self.at += 1,
            }
        }
    }

    /// The next member of the object the cursor is in (before its `}` at `close`): its key,
    /// and where its value starts and ends.
    fn next_member(&mut self, close: usize) -> Option<(String, usize, usize)> {
        self.skip_space();
        if self.at < close && self.data[self.at] == b',' {
            self.at += 1;
            self.skip_space();
        }
        if self.at >= close || self.data[self.at] != b'"' {
            return None;
        }
        let from = self.at;
        let to = self.skip_string();
        let key = string_at(self.data, from, to)?;
        self.skip_space();
        self.at += 1; // ':'
        self.skip_space();
        let value = self.at;
        let end = self.skip_value();
        Some((key, value, end))
    }

    /// The next item of the array the cursor is in (before its `]` at `close`).
    fn next_item(&mut self, close: usize) -> Option<(usize, usize)> {
        self.skip_space();
        if self.at < close && self.data[self.at] == b',' {
            self.at += 1;
            self.skip_space();
        }
        if self.at >= close {
            return None;
        }
        let start = self.at;
        Some((start, self.skip_value()))
    }

    /// Where the value of the top-level object's member `name` is (its `[` and its end): None
    /// when it has none, or names it twice.
    fn member_of_top(&mut self, name: &str) -> Option<(usize, usize)> {
        self.skip_space();
        if self.data.get(self.at) != Some(&b'{') {
            return None;
        }
        let start = self.at;
        let end = self.skip_value();
        self.at = start + 1;
        let mut found = None;
        while let Some((key, value, value_end)) = self.next_member(end - 1) {
            if key == name && found.replace((value, value_end)).is_some() {
                return None;
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn spliced(body: &str, note: &str) -> Value {
        serde_json::from_slice(&splice_note(body.as_bytes(), note).unwrap()).unwrap()
    }

    #[test]
    fn the_note_goes_where_python_puts_it() {
        let note = "[budget: 3 of 20 tool calls left — wrap up soon]";
        assert_eq!(
            spliced(r#"{"messages":[{"role":"system","content":"s"}]}"#, note),
            json!({"messages": [{"role": "system", "content": format!("s\n\n{note}")}]})
        );
        assert_eq!(
            spliced(r#"{"messages":[{"role":"user","content":"u"}]}"#, note),
            json!({"messages": [{"role": "system", "content": note},
                                       {"role": "user", "content": "u"}]})
        );
        assert_eq!(
            spliced(r#"{"messages":[]}"#, note),
            json!({"messages": [{"role": "system", "content": note}]})
        );
        assert_eq!(
            spliced(
                r#" { "messages" : [ {"role":"developer","content": [ ] } ] } "#,
                "n"
            ),
            json!({"messages": [{"role": "developer",
                                        "content": [{"type": "text", "text": "n"}]}]})
        );
        assert_eq!(
            spliced(
                r#"{"messages":[{"content":null,"role":"system"}]}"#,
                "n\"\u{1}"
            ),
            json!({"messages": [{"content": "n\"\u{1}", "role": "system"}]})
        );
        assert_eq!(
            spliced(r#"{"messages":[{"role":"sys\u0074em"}]}"#, "n"),
            json!({"messages": [{"role": "system", "content": "n"}]})
        );
        assert_eq!(
            splice_note(br#"{"messages":[{"role":"system","content":""}]}"#, "n").unwrap(),
            br#"{"messages":[{"role":"system","content":"n"}]}"#
        );
    }

    #[test]
    fn what_it_cannot_be_sure_of_is_left_to_python() {
        for body in [
            r#"{"messages":[],"messages":[]}"#,
            r#"{"messages":{}}"#,
            r#"{}"#,
            r#"{"messages":[{"role":"user","role":"system"}]}"#,
            r#"[1]"#,
            r#"{"messages":[}"#,
            "{\"messages\":[NaN]}",
            "",
        ] {
            assert!(splice_note(body.as_bytes(), "n").is_none(), "{body}");
        }
    }
}
