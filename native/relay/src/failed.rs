//! What Python reads in a tool result the relay checks before it sends a continuing request
//! on: whether it says the tool failed (`watchdog.core.model.failure.looks_failed`), and its
//! hash (`watchdog.core.spans.values.stable_hash`).
//!
//! `looks_failed` is a regular expression matched, case-insensitively and with Unicode
//! classes, at the start of the text's first 200 characters:
//!
//! ```text
//! ^\s*(?:error\b|exception\b|\[error\]|traceback \(most recent call last\)|
//!        [A-Za-z_][\w.]*(?:Error|Exception):|\{\s*"error"\s*:|mcp error -?\d+:|
//!        (?:the )?tool(?: [a-z]+){0,6} error:)
//! |^\s*(?-i:E[A-Z]{3,14}: [a-z][a-z ]*, [a-z])
//! ```
//!
//! The twin reads ASCII only: wherever the expression would look at a character that is not
//! ASCII (Unicode whitespace, word characters, letters that match ASCII ones case-insensitively,
//! such as the Kelvin sign for `k`) it answers None, unsure, and the request is Python's.

/// Characters of the text the expression reads at most (`text[:200]`).
const READ: usize = 200;

/// Whether Python's `looks_failed` says the text is a failed tool's (None: not sure).
pub fn looks_failed(text: &str) -> Option<bool> {
    let chars: Vec<char> = text.chars().take(READ).collect();
    let mut at = 0;
    while at < chars.len() && space(chars[at])? {
        at += 1;
    }
    let rest = &chars[at..];
    let mut unsure = false;
    for found in [
        word(rest, "error"),
        word(rest, "exception"),
        literal(rest, "[error]").map(|n| n.is_some()),
        literal(rest, "traceback (most recent call last)").map(|n| n.is_some()),
        named(rest),
        keyed(rest),
        mcp(rest),
        tool_lead(rest),
        Some(errno(rest)),
    ] {
        match found {
            Some(true) => return Some(true),
            Some(false) => {}
            None => unsure = true,
        }
    }
    if unsure {
        None
    } else {
        Some(false)
    }
}

/// Python's `\s` (str patterns) on a character: None when it is not ASCII.
fn space(c: char) -> Option<bool> {
    c.is_ascii().then_some(matches!(
        c,
        ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c' | '\x1c'..='\x1f'
    ))
}

/// Python's `\w` on a character: None when it is not ASCII.
fn word_char(c: char) -> Option<bool> {
    c.is_ascii().then(|| c.is_ascii_alphanumeric() || c == '_')
}

/// `pattern` (ASCII, lower case) at the start, case-insensitively: the characters after it.
fn literal<'a>(chars: &'a [char], pattern: &str) -> Option<Option<&'a [char]>> {
    for (index, expected) in pattern.chars().enumerate() {
        let Some(&c) = chars.get(index) else {
            return Some(None);
        };
        if !c.is_ascii() {
            return None;
        }
        if c.to_ascii_lowercase() != expected {
            return Some(None);
        }
    }
    Some(Some(&chars[pattern.len()..]))
}

/// `pattern\b` at the start.
fn word(chars: &[char], pattern: &str) -> Option<bool> {
    match literal(chars, pattern)? {
        None => Some(false),
        Some(after) => match after.first() {
            None => Some(true),
            Some(&c) => word_char(c).map(|inside| !inside),
        },
    }
}

/// `[A-Za-z_][\w.]*(?:Error|Exception):` at the start: the run of `[\w.]` characters from
/// the first (greedy, backtracking: any split) ends in one of the two words after its first
/// character, and a colon follows it.
fn named(chars: &[char]) -> Option<bool> {
    let Some(&first) = chars.first() else {
        return Some(false);
    };
    if !first.is_ascii() {
        return None;
    }
    if !(first.is_ascii_alphabetic() || first == '_') {
        return Some(false);
    }
    let mut end = 1;
    while end < chars.len() {
        let c = chars[end];
        if c != '.' && !word_char(c)? {
            break;
        }
        end += 1;
    }
    if chars.get(end) != Some(&':') {
        return Some(false);
    }
    let run: String = chars[1..end].iter().map(char::to_ascii_lowercase).collect();
    Some(run.ends_with("error") || run.ends_with("exception"))
}

/// `\{\s*"error"\s*:` at the start.
fn keyed(chars: &[char]) -> Option<bool> {
    if chars.first() != Some(&'{') {
        return Some(false);
    }
    let mut at = 1;
    while at < chars.len() && space(chars[at])? {
        at += 1;
    }
    let Some(after) = literal(&chars[at..], "\"error\"")? else {
        return Some(false);
    };
    let mut at = 0;
    while at < after.len() && space(after[at])? {
        at += 1;
    }
    Some(after.get(at) == Some(&':'))
}

/// `mcp error -?\d+:` at the start (an MCP SDK's error): None where `\d` would look at a
/// character that is not ASCII (Python's `\d` takes any decimal digit).
fn mcp(chars: &[char]) -> Option<bool> {
    let Some(after) = literal(chars, "mcp error ")? else {
        return Some(false);
    };
    let mut at = usize::from(after.first() == Some(&'-'));
    let digits = at;
    while let Some(&c) = after.get(at) {
        if !c.is_ascii() {
            return None;
        }
        if !c.is_ascii_digit() {
            break;
        }
        at += 1;
    }
    Some(at > digits && after.get(at) == Some(&':'))
}

/// `(?:the )?tool(?: [a-z]+){0,6} error:` at the start (a sentence that begins with the tool
/// and ends "error:": langchain-rust's "The tool return the following error: ..."). Each
/// `[a-z]+` is followed by a space, so it is a whole run of letters: the words are taken
/// greedily, " error:" looked for before each. None where it would look at a character that
/// is not ASCII (Python's `[a-z]` takes letters that match ASCII ones case-insensitively).
fn tool_lead(chars: &[char]) -> Option<bool> {
    let rest = literal(chars, "the ")?.unwrap_or(chars);
    let Some(mut rest) = literal(rest, "tool")? else {
        return Some(false);
    };
    for words in 0..=6 {
        if literal(rest, " error:")?.is_some() {
            return Some(true);
        }
        if words == 6 || rest.first() != Some(&' ') {
            return Some(false);
        }
        let mut at = 1;
        while let Some(&c) = rest.get(at) {
            if !c.is_ascii() {
                return None;
            }
            if !c.is_ascii_alphabetic() {
                break;
            }
            at += 1;
        }
        if at == 1 {
            return Some(false);
        }
        rest = &rest[at..];
    }
    Some(false)
}

/// `E[A-Z]{3,14}: [a-z][a-z ]*, [a-z]` at the start, case-sensitively and ASCII only (a
/// Node.js system error's message: `ENOENT: no such file or directory, open ...`).
fn errno(chars: &[char]) -> bool {
    if chars.first() != Some(&'E') {
        return false;
    }
    let code = chars[1..]
        .iter()
        .take_while(|c| c.is_ascii_uppercase())
        .count();
    if !(3..=14).contains(&code) {
        return false;
    }
    let rest = &chars[1 + code..];
    if rest.len() < 3 || rest[0] != ':' || rest[1] != ' ' || !rest[2].is_ascii_lowercase() {
        return false;
    }
    let words = rest[2..]
        .iter()
        .take_while(|c| c.is_ascii_lowercase() || **c == ' ')
        .count();
    let after = &rest[2 + words..];
    after.len() >= 3 && after[0] == ',' && after[1] == ' ' && after[2].is_ascii_lowercase()
}

/// Python's `stable_hash`: BLAKE2b with an 8-byte digest of the text's UTF-8, as a signed
/// big-endian 64-bit int.
pub fn stable_hash(text: &str) -> i64 {
    use blake2::digest::{Update, VariableOutput};
    let mut hasher = blake2::Blake2bVar::new(8).expect("8 is a BLAKE2b digest size");
    hasher.update(text.as_bytes());
    let mut digest = [0u8; 8];
    hasher
        .finalize_variable(&mut digest)
        .expect("the digest is 8 bytes");
    i64::from_be_bytes(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_read_as_python_reads_them_and_anything_not_ascii_on_the_way_is_unsure() {
        for failed in [
            "Error: no such file",
            "  error",
            "EXCEPTION raised",
            "{\"error\": 1}",
            "{ \"Error\"\t:",
            "Traceback (most recent call last):\n  File",
            "ValueError: bad",
            "requests.exceptions.HTTPError: 500",
            "_x.yError:",
            "\x1c error",
            "[ERROR] Error: cannot add",
            " [Error]x",
            "ENOENT: no such file or directory, open '/tmp/x'",
            " EISDIR: illegal operation on a directory, read",
            "MCP error -32602: Input validation error",
            "mcp error 5:",
            "The tool return the following error: no index",
            "Tool error: x",
            "TOOL EXECUTION ERROR:",
            "the tool a b c d e f error:",
            "tool error error:",
        ] {
            assert_eq!(looks_failed(failed), Some(true), "{failed:?}");
        }
        for fine in [
            "",
            "found 3 files",
            "errors: none",
            "error_count: 0",
            "Errors",
            "ValueError",
            "ValueError :",
            "1Error:",
            "{\"errors\": []}",
            "no error here",
            "ok é",
            "[ERROR",
            "[ error]",
            "[errors]",
            "ENV: set up, done",
            "ENOENT: no such file",
            "Enoent: no such file, open",
            "EABCDEFGHIJKLMNO: x, y",
            "MCP error -: x",
            "MCP error 12 x",
            "the tool a b c d e f g error:",
            "toolbox error:",
            "the tools error:",
            "The tool ran fine",
            "tool  error:",
            "tool error",
            "the error:",
        ] {
            assert_eq!(looks_failed(fine), Some(false), "{fine:?}");
        }
        for unsure in [
            "\u{a0}Error: x",
            "erroré",
            "Valueé Error:",
            "\u{17f}x",
            "ſError:",
            "é ok",
            "MCP error \u{661}:",
            "Tool \u{212a}ind error:",
            "the tool ran \u{17f}o error:",
        ] {
            assert_eq!(looks_failed(unsure), None, "{unsure:?}");
        }
        // past the 200 characters read, nothing counts
        let long = format!("A{}Error:", "b".repeat(198));
        assert_eq!(looks_failed(&long), Some(false));
        assert_eq!(
            looks_failed(&format!("A{}Error:", "b".repeat(193))),
            Some(true)
        );
    }

    #[test]
    fn the_hash_is_pythons() {
        // hashlib.blake2b(b"search\0found", digest_size=8), as a signed big-endian int
        assert_eq!(
            stable_hash("search\0found"),
            i64::from_be_bytes(*b"\xb1\x10\x68\xa7\x35\x6a\x01\xd1")
        );
    }
}
