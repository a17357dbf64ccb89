//! Requests sent on before Python has read them (DESIGN §12, "the relay"): the first request of
//! a new conversation, once Python has said what such a request of its agent gets.
//!
//! Python decides every request from its run. A new conversation's first request has no run
//! yet, so what it gets depends only on its agent (the rule pack's budgets and rules for a run
//! with nothing in it), on its session's earlier runs, and on the fleet. Python tells the relay
//! what a new run of an agent got (`admit_agent`, learned from a request it decided) and which
//! conversations are known (`known`: every one it has seen or restored, whose sessions may make
//! a difference); it takes that back when the rules or the fleet change (`admit_clear`). A
//! request that is plainly such a first request (no tool results, no history, no run or trace
//! named, no budget header, a conversation no one has seen) of an agent with a learned answer
//! goes upstream at once, with the bound it gets (and, when its rule pack's countdown starts
//! at a new run, the countdown's note written into it: only a Chat Completions request that
//! plainly offers tools); Python still reads it, opens its run and books its call as for any
//! other, and checks that its own decision is the same.
//!
//! A request that continues a run goes on at once too, when Python has said what the next
//! request of its conversation gets (`admit_next`, published when it booked the run's call):
//! only for a run whose next request cannot be decided otherwise by what it carries. Python
//! publishes that for a run with no budget, no directive, nothing left to answer (its last
//! call handed over no tool call), nothing in flight, not traced; a request of its
//! conversation that is longer than the one Python decided and ends with tool results (a new
//! user message may start the next run), none of which answers a call any response through
//! this relay handed over (`handed`: a result answering another run's call goes to that
//! run), gets it once. Any request of that conversation read here takes
//! the entry (it is used once); a Chat Completions request this cannot read takes those of
//! its agent (all, if it names a run or an agent this cannot read).
//!
//! Everything else, and anything this cannot read as plainly as Python does, goes to Python.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::header::HeaderMap;
use serde_json::{Map, Value};

use crate::trim::Api;
use crate::{connection_named, Headers, HOP_BY_HOP};

/// Conversations remembered: past this, nothing is sent on before Python has read it.
pub const MAX_KNOWN: usize = 1 << 18;
/// A body larger than this waits for Python: reading it here would hold one of the relay's
/// threads (and the streams it carries) for milliseconds.
pub const MAX_READ: usize = 256 * 1024;
/// The request headers the relay sets itself (with the hop-by-hop ones, never passed on).
const REQUEST_SET: [&str; 3] = ["host", "content-length", "expect"];
const WATCHDOG_PREFIX: &str = "x-watchdog-";
pub const AGENT_HEADER: &str = "x-watchdog-agent";
/// The path's token and agent, for an agent that can set only its base URL (Python's `door`).
const TOKEN_PATH: &str = "/token/";
const AGENT_PATH: &str = "/agent/";
/// An agent's name, as the header and the path may give it (Python's `MAX_AGENT_CHARS`).
const MAX_AGENT_CHARS: usize = 200;
/// What the client SDK writes into the instructions (`steer.SDK_MARKS`): a run it steers, which
/// Python judges request by request.
const SDK_MARKS: [&str; 3] = [
    "[agent-watchdog: system instruction",
    "[budget: ",
    "[grace: ",
];
/// Request headers in which a client names its own session (Python's `SESSION_HEADERS`,
/// `watchdog/shell/model/headers.py`): its new conversation's run is in a session that may have
/// runs already, so what its first request gets is Python's to say.
pub const SESSION_HEADERS: [&str; 2] = ["x-claude-code-session-id", "x-session-id"];
/// Request headers in which a client names a sub-agent within its session (Python's
/// `SUBAGENT_HEADERS`): its run is a child run of its caller's, so Python says what it gets.
pub const SUBAGENT_HEADERS: [&str; 1] = ["x-claude-code-agent-id"];
/// A session's id is `model:` and the first 12 bytes of its conversation's digest in hex.
pub type Digest = [u8; 12];
/// Conversations whose next request Python said may go on at once: past this, no more are
/// taken (Python publishes again at the run's next call).
pub const MAX_NEXT: usize = 1 << 16;
/// How long a continuing request waits for Python to book the call before it (and say what
/// it gets): then it is Python's to decide, as any other.
pub const WAIT_BOOKED: std::time::Duration = std::time::Duration::from_millis(50);
/// Tool-call ids handed over through the relay, remembered: the last half of them at least (two
/// generations of `MAX_HANDED / 2`; the older goes when the newer is full). Python forgets a
/// call's id once it has booked `MAX_RESPONSE_IDS` (20,000) newer ones
/// (`watchdog/core/model/book.py`), so every id it still reads a result as answering is one of
/// these: the relay reads each response's calls before Python books it.
pub const MAX_HANDED: usize = 1 << 18;

/// What Python set at start: the upstreams, the agent of a request that names none, the
/// endpoint's token header and value (when it has one).
pub struct Settings {
    pub openai: String,
    pub anthropic: String,
    pub default_agent: String,
    pub token: Option<(String, String)>,
}

/// What Python taught: what a new run of each agent gets (its bound: -1 none, and the
/// countdown's note a first request that offers tools gets), and the conversations known.
pub struct Admission {
    pub settings: Arc<Settings>,
    agents: HashMap<String, (i64, Option<String>)>,
    known: HashSet<Digest>,
    /// What the next request of a conversation gets, once (`admit_next`).
    next: HashMap<Digest, Next>,
    /// Conversations whose last call Python is to book: it then says what their next request
    /// gets, or that it does not say (`next_clear`).
    booking: HashSet<Digest>,
    /// The tool-call ids the Chat Completions responses through the relay handed over, the
    /// latest (`handed`) and the generation before them (`older`).
    handed: HashSet<String>,
    older: HashSet<String>,
    /// Responses whose tool calls could not be read here, until Python has booked each and
    /// said which ids it handed over (`sight`): meanwhile no continuing request goes on before
    /// Python has read it.
    unsighted: u64,
    /// The tool-call ids a conversation's next request is to answer (`Expect`), and whose:
    /// a response that hands one over again takes that back (the call is another run's).
    expecting: HashMap<String, Digest>,
}

/// The next request of a conversation, as Python published it: its bound, the length of
/// the request Python decided (the next one must be longer), until when it holds, and, when
/// the call booked handed tool calls over, the results it is to carry.
struct Next {
    keep: i64,
    /// The countdown's note a request that offers tools gets (module `note`), None: none.
    note: Option<String>,
    messages: usize,
    agent: String,
    until: Instant,
    expect: Option<Expect>,
}

/// The results a conversation's next request carries, as Python proved what it gets: the
/// model's answer that handed the calls over (right after the request decided), then one
/// result for each call and nothing else, none read as a failure
/// ([`crate::failed::looks_failed`]), none the same result (its hash) as one the run had
/// before or as another of them.
pub struct Expect {
    /// The calls handed over, in the answer's order: their ids and their tools' names.
    pub calls: Vec<(String, String)>,
    /// The hashes of the results the run had so far.
    pub seen: HashSet<i64>,
}

/// A Chat Completions request that continues its conversation: its length, and the tool
/// calls its results (after the model's last answer) answer, with where that answer is, the
/// ids of the tool calls it carries (None: not plainly that) and each result's text when its
/// content is a string.
pub struct Continues {
    messages: usize,
    answers: Vec<String>,
    last_answer: usize,
    calls: Option<Vec<String>>,
    texts: Vec<Option<String>>,
    /// Whether it offers tools, as Python reads it (`tools` or `functions` not empty); None:
    /// this cannot be sure (a number there).
    tools: Option<bool>,
}

impl Continues {
    /// Whether it carries exactly what `expect` says after the `messages` decided.
    fn carries(&self, messages: usize, expect: &Expect) -> bool {
        let calls = &expect.calls;
        if self.last_answer != messages
            || self.messages != messages + 1 + calls.len()
            || self.answers.len() != calls.len()
        {
            return false;
        }
        let Some(ids) = &self.calls else { return false };
        if ids.len() != calls.len() || ids.iter().zip(calls).any(|(id, (call, _))| id != call) {
            return false;
        }
        let mut answered = vec![false; calls.len()];
        let mut hashes = HashSet::with_capacity(calls.len());
        for (id, text) in self.answers.iter().zip(&self.texts) {
            let Some(index) = calls.iter().position(|(call, _)| call == id) else {
                return false;
            };
            let Some(text) = text else { return false };
            if std::mem::replace(&mut answered[index], true)
                || crate::failed::looks_failed(text) != Some(false)
            {
                return false;
            }
            let hash = crate::failed::stable_hash(&format!("{}\0{text}", calls[index].1));
            if expect.seen.contains(&hash) || !hashes.insert(hash) {
                return false;
            }
        }
        true
    }
}

/// A request read as a new conversation's first: its API, agent and conversation, and the
/// agent its path named (for Python, which reads the request as the header named it).
pub struct First {
    api: Api,
    agent: String,
    digest: Digest,
    named: Option<String>,
    /// None: a new conversation's first request; else one that continues its conversation.
    continues: Option<Continues>,
    /// A Chat Completions request's: whether it offers tools as Python reads it (None: this
    /// cannot be sure, or another API's).
    tools: Option<bool>,
    /// The names of the function tools it offers ([`offered_names`]).
    offered: Vec<String>,
}

impl First {
    /// Its conversation, if it continues one (a new conversation's first request: None).
    pub fn continuing(&self) -> Option<Digest> {
        self.continues.as_ref().map(|_| self.digest)
    }

    pub fn hex(&self) -> String {
        hex(&self.digest)
    }
}

/// A conversation's digest in hex: its session's id after `model:`.
pub fn hex(digest: &Digest) -> String {
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A request to send on now: where, with which headers, the API it speaks, its bound; the
/// API path (its target without the path's token and agent) and the agent the path named.
pub struct Admitted {
    pub url: String,
    pub headers: Headers,
    pub api: Api,
    pub keep: i64,
    /// The note to write into it (module `note`), for a countdown's request.
    pub note: Option<String>,
    pub target: &'static str,
    pub named: Option<String>,
    /// It continues its conversation (not a new conversation's first request).
    pub continued: bool,
    /// Its conversation.
    pub digest: Digest,
    /// The names of the function tools it offers ([`offered_names`]): its trim reads a call
    /// of a final-answer tool it does not offer as work (one the model made up).
    pub offered: Vec<String>,
}

/// What becomes of a new conversation's first request.
pub enum Verdict {
    Admitted(Admitted),
    /// Its agent's new runs are not judged yet: Python may teach the relay from its decision.
    Learn(String),
    No,
}

impl Admission {
    pub fn new(settings: Settings) -> Self {
        Admission {
            settings: Arc::new(settings),
            agents: HashMap::new(),
            known: HashSet::new(),
            next: HashMap::new(),
            booking: HashSet::new(),
            handed: HashSet::new(),
            older: HashSet::new(),
            unsighted: 0,
            expecting: HashMap::new(),
        }
    }

    /// The next request of the conversation `digest` gets the bound `keep` (-1: none) if it
    /// comes within `hold`: with `expect`, if it carries just that after the `messages`
    /// decided ([`Expect`]); without, if it is longer than `messages` and answers no call
    /// handed over. With `note`, such a request that offers tools gets that note too (the
    /// countdown), one that offers none gets none.
    #[allow(clippy::too_many_arguments)]
    pub fn admit_next(
        &mut self,
        digest: Digest,
        keep: i64,
        note: Option<String>,
        messages: usize,
        agent: String,
        hold: Duration,
        expect: Option<Expect>,
    ) {
        self.booking.remove(&digest);
        self.take(&digest);
        if self.next.len() >= MAX_NEXT
            || expect.as_ref().is_some_and(|expect| {
                expect
                    .calls
                    .iter()
                    .any(|(id, _)| self.expecting.contains_key(id))
            })
        {
            return; // (a call id another conversation's next request is to answer: Python's)
        }
        if let Some(expect) = &expect {
            for (id, _) in &expect.calls {
                self.expecting.insert(id.clone(), digest);
            }
        }
        self.next.insert(
            digest,
            Next {
                keep,
                note,
                messages,
                agent,
                until: Instant::now() + hold,
                expect,
            },
        );
    }

    /// Takes what the next request of `digest` gets (and the calls it was to answer).
    fn take(&mut self, digest: &Digest) -> Option<Next> {
        let next = self.next.remove(digest)?;
        if let Some(expect) = &next.expect {
            for (id, _) in &expect.calls {
                self.expecting.remove(id);
            }
        }
        Some(next)
    }

    /// Forgets what the next request of `digest` (all, for None) gets; with `booked`, Python
    /// booked the call `digest`'s next request waits for (`asked`) and says nothing of what
    /// that request gets: it waits no more. Without, Python takes back what it said: a call of
    /// the conversation in flight still holds its next request until it is booked (Python
    /// says then, or that it does not).
    pub fn next_clear(&mut self, digest: Option<Digest>, booked: bool) {
        match digest {
            Some(digest) => {
                self.take(&digest);
                if booked {
                    self.booking.remove(&digest);
                }
            }
            None => {
                self.next.clear();
                self.expecting.clear();
                self.booking.clear();
            }
        }
    }

    /// A call of the conversation `digest` goes upstream: once it is booked, Python says what
    /// the conversation's next request gets (or that it does not). What it said before is
    /// taken back: it was of the run as it was before this call (said, say, while Python
    /// decided this very request, having booked the call before it just then).
    pub fn asked(&mut self, digest: Digest) {
        self.take(&digest);
        if self.booking.len() < MAX_NEXT {
            self.booking.insert(digest);
        }
    }

    /// Whether Python is still to say what the next request of `digest` gets.
    pub fn booking(&self, digest: &Digest) -> bool {
        self.booking.contains(digest)
    }

    /// A Chat Completions request this cannot read, of the conversation `digest`
    /// ([`conversation_of`]): what its next request gets is forgotten.
    pub fn unread_conversation(&mut self, digest: &Digest) {
        self.take(digest);
    }

    /// A Chat Completions request this cannot read, nor tie to a conversation: what the next
    /// requests of its agent's conversations get is forgotten (of every agent's, for None: it
    /// may name a run).
    pub fn unread(&mut self, agent: Option<String>) {
        if self.next.is_empty() {
            return;
        }
        match agent {
            Some(agent) => {
                let gone: Vec<Digest> = self
                    .next
                    .iter()
                    .filter(|(_, next)| next.agent == agent)
                    .map(|(digest, _)| *digest)
                    .collect();
                for digest in gone {
                    self.take(&digest);
                }
            }
            None => {
                self.next.clear();
                self.expecting.clear();
            }
        }
    }

    /// The tool calls a response handed over (None: it could not be read here; Python says
    /// which, once it has booked it: [`Admission::sight`]).
    pub fn handed(&mut self, ids: Option<Vec<String>>) {
        match ids {
            Some(ids) => self.remember(ids),
            None => self.unsighted += 1,
        }
    }

    /// The tool calls Python read a response this could not read as handing over (`ids`:
    /// those it remembers, none if it read none): once each such response is told, continuing
    /// requests go on ahead again.
    pub fn sight(&mut self, ids: Vec<String>) {
        self.remember(ids);
        self.unsighted = self.unsighted.saturating_sub(1);
    }

    fn remember(&mut self, ids: Vec<String>) {
        for id in ids {
            if let Some(digest) = self.expecting.get(&id).copied() {
                self.take(&digest); // (handed over again: a result for it is another run's)
            }
            if self.handed.contains(&id) || self.older.contains(&id) {
                continue;
            }
            if self.handed.len() >= MAX_HANDED / 2 {
                self.older = std::mem::take(&mut self.handed);
            }
            self.handed.insert(id);
        }
    }

    fn was_handed(&self, id: &str) -> bool {
        self.handed.contains(id) || self.older.contains(id)
    }

    /// Whether continuing requests may go on before Python has read them (no response whose
    /// tool calls this could not read is still to be told by Python).
    pub fn sighted(&self) -> bool {
        self.unsighted == 0
    }

    /// A new run of `agent` gets the bound `keep` and, with `note`, that countdown's note (a
    /// Chat Completions request that offers tools only: any other is Python's).
    pub fn learn(&mut self, agent: String, keep: i64, note: Option<String>) {
        self.agents.insert(agent, (keep, note));
    }

    pub fn clear(&mut self) {
        self.agents.clear();
    }

    /// False once full (then nothing is admitted).
    pub fn know(&mut self, digest: Digest) -> bool {
        if self.known.len() >= MAX_KNOWN && !self.known.contains(&digest) {
            return false;
        }
        self.known.insert(digest);
        true
    }

    /// What becomes of a request [`read`] found to be a new conversation's first.
    pub fn judge(&mut self, first: First, headers: &HeaderMap) -> Verdict {
        // (any request of a conversation takes what its next one gets: it is used once)
        let next = if self.next.is_empty() {
            None
        } else {
            self.take(&first.digest)
        };
        let (keep, note) = if let Some(continues) = &first.continues {
            match next {
                Some(next)
                    if self.sighted()
                        && Instant::now() < next.until
                        && match &next.expect {
                            Some(expect) => continues.carries(next.messages, expect),
                            None => {
                                continues.messages > next.messages
                                    && !continues.answers.iter().any(|id| self.was_handed(id))
                            }
                        } =>
                {
                    match (next.note, continues.tools) {
                        (None, _) | (Some(_), Some(false)) => (next.keep, None),
                        (Some(note), Some(true)) => (next.keep, Some(note)),
                        (Some(_), None) => return Verdict::No,
                    }
                }
                _ => return Verdict::No,
            }
        } else {
            if self.known.contains(&first.digest) {
                return Verdict::No;
            }
            let Some((keep, note)) = self.agents.get(&first.agent) else {
                return Verdict::Learn(first.agent);
            };
            let (keep, note) = (*keep, note.clone());
            if note.is_some() && (first.api != Api::Chat || first.tools != Some(true)) {
                return Verdict::No; // (what it gets is Python's to say)
            }
            if !self.know(first.digest) {
                return Verdict::No;
            }
            (keep, note)
        };
        let settings = &self.settings;
        let target = api_path(first.api);
        let url = match first.api {
            Api::Messages => format!("{}{}", settings.anthropic, target),
            _ => format!("{}{}", settings.openai, &target[3..]),
        };
        Verdict::Admitted(Admitted {
            url,
            headers: sent_headers(headers),
            api: first.api,
            keep,
            note,
            target,
            named: first.named,
            continued: first.continues.is_some(),
            digest: first.digest,
            offered: first.offered,
        })
    }
}

fn api_path(api: Api) -> &'static str {
    match api {
        Api::Chat => "/v1/chat/completions",
        Api::Responses => "/v1/responses",
        Api::Messages => "/v1/messages",
    }
}

/// A target's `/token/<token>/` and then `/agent/<name>/` taken off as Python's `door` takes
/// them: the rest, the token given and the agent named (None for an empty name). None when
/// this cannot be sure to read them as Python does (a token with a percent-escape; a name that
/// is not 1-200 printable ASCII characters, or holds a `/` or `\\`, or is `.` or `..`):
/// Python reads such a request (and refuses it, if it must).
fn door(target: &str) -> Option<(&str, Option<&str>, Option<String>)> {
    let mut rest = target;
    let mut token = None;
    if let Some(after) = rest.strip_prefix(TOKEN_PATH) {
        let slash = after.find('/')?;
        let segment = &after[..slash];
        if segment.contains('%') {
            return None;
        }
        token = Some(segment);
        rest = &after[slash..];
    }
    let mut agent = None;
    if let Some(after) = rest.strip_prefix(AGENT_PATH) {
        let slash = after.find('/')?;
        let segment = &after[..slash];
        rest = &after[slash..];
        if !segment.is_empty() {
            agent = Some(path_agent(segment)?);
        }
    }
    Some((rest, token, agent))
}

fn path_agent(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut name = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        if byte == b'%' {
            let hex = std::str::from_utf8(bytes.get(index + 1..index + 3)?).ok()?;
            name.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else if byte.is_ascii_alphanumeric() || b"._~!$&'()*+,;=:@-".contains(&byte) {
            name.push(byte);
            index += 1;
        } else {
            return None;
        }
    }
    let printable = name.iter().all(|byte| (0x20..0x7f).contains(byte));
    let name = String::from_utf8(name).ok()?;
    (printable
        && (1..=MAX_AGENT_CHARS).contains(&name.len())
        && !name.contains(['/', '\\'])
        && name != "."
        && name != "..")
        .then_some(name)
}

/// The agent of a request [`read`] cannot read, as Python names it; None when this cannot be
/// sure, or the request names a run (it may be any agent's).
pub fn agent_of(settings: &Settings, target: &str, headers: &HeaderMap) -> Option<String> {
    if headers.contains_key("x-watchdog-run") {
        return None;
    }
    let (_, _, named) = door(target)?;
    let agent = match headers.get(AGENT_HEADER) {
        Some(value) => {
            let bytes = value.as_bytes();
            if !(1..=MAX_AGENT_CHARS).contains(&bytes.len())
                || !bytes.iter().all(|byte| (0x20..0x7f).contains(byte))
            {
                return None;
            }
            Some(String::from_utf8_lossy(bytes).into_owned())
        }
        None => named,
    };
    Some(
        agent
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| settings.default_agent.clone()),
    )
}

/// The conversation of a Chat Completions request [`read`] cannot read, as Python's book names
/// it (the digest of its agent and its first user message), when this can be sure of it: no
/// trace or run named (Python takes the run of those), a body in no coding that reads as JSON,
/// its first user message with text a string (one whose text is empty is passed over, as
/// Python passes it), and no larger than [`read`] reads. None otherwise: then the request may
/// be of any of its agent's.
pub fn conversation_of(agent: &str, headers: &HeaderMap, body: &[u8]) -> Option<Digest> {
    if body.len() > MAX_READ
        || headers.contains_key("traceparent")
        || headers.contains_key("x-watchdog-run")
        || headers.get_all("content-encoding").iter().any(|value| {
            !value
                .as_bytes()
                .trim_ascii()
                .eq_ignore_ascii_case(b"identity")
        })
    {
        return None;
    }
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    for message in body.get("messages")?.as_array()? {
        let Some(message) = message.as_object() else {
            continue;
        };
        if message.get("role").and_then(Value::as_str) != Some("user") {
            continue;
        }
        match message.get("content") {
            Some(Value::String(text)) if text.is_empty() => {}
            Some(Value::String(text)) => return Some(digest(Api::Chat, agent, text)),
            _ => return None, // (Python's anchor is then the content's JSON, not written here)
        }
    }
    None
}

/// The request, if it is plainly a new conversation's first (read without the lock).
pub fn read(
    settings: &Settings,
    method: &str,
    target: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<First> {
    if method != "POST" || body.len() > MAX_READ {
        return None;
    }
    let (target, path_token, named) = door(target)?;
    let api = match target {
        "/v1/chat/completions" => Api::Chat,
        "/v1/responses" => Api::Responses,
        "/v1/messages" => Api::Messages,
        _ => return None,
    };
    let token = settings.token.as_ref();
    let mut agent = None;
    for (name, value) in headers {
        let name = name.as_str();
        if name == AGENT_HEADER {
            // a name Python takes for sure (1-200 printable ASCII characters), else Python
            // reads the request (and refuses it, if it must)
            let bytes = value.as_bytes();
            if !(1..=MAX_AGENT_CHARS).contains(&bytes.len())
                || !bytes.iter().all(|byte| (0x20..0x7f).contains(byte))
            {
                return None;
            }
            agent = Some(String::from_utf8_lossy(bytes).into_owned());
        } else if name == "traceparent"
            || SESSION_HEADERS.contains(&name)
            || SUBAGENT_HEADERS.contains(&name)
            || (name.starts_with(WATCHDOG_PREFIX) && !token.is_some_and(|t| t.0 == name))
            || (name == "content-encoding"
                && !value
                    .as_bytes()
                    .trim_ascii()
                    .eq_ignore_ascii_case(b"identity"))
        {
            return None; // a run, a trace or a budget named; a body to inflate
        }
    }
    if let Some((name, token)) = token {
        let given = path_token.map(str::as_bytes).unwrap_or_else(|| {
            headers
                .get(name.as_str())
                .map(|v| v.as_bytes())
                .unwrap_or(b"")
        });
        if !same(given, token.as_bytes()) {
            return None;
        }
    }
    // (the header's name wins over the path's, as in Python)
    let named = if agent.is_some() { None } else { named };
    let agent = agent
        .or_else(|| named.clone())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| settings.default_agent.clone());
    if crate::observe::long_digit_run(body) {
        return None; // an integer Python may not read: its loop judges the request
    }
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    if !body.values().all(python_reads) {
        return None; // a number past a double's range: Python's endpoint does not read it
    }
    let tools = if api == Api::Chat {
        offers_tools(&body)
    } else {
        None
    };
    let (anchor, continues) = match first_request(api, &body) {
        Some(anchor) => (anchor, None),
        None if api == Api::Chat => {
            let (anchor, mut continues) = continuing(body.get("messages")?.as_array()?)?;
            continues.tools = tools;
            (anchor, Some(continues))
        }
        None => return None,
    };
    let digest = digest(api, &agent, anchor);
    Some(First {
        api,
        agent,
        digest,
        named,
        continues,
        tools,
        offered: offered_names(&body),
    })
}

/// The names of the function tools a request offers that are text, as Python's
/// `wire.offered_names` reads them (any API: `tools` and the legacy `functions`, each tool's
/// `function` where that is an object, else the tool itself); as many as the body read
/// ([`MAX_READ`]) holds, each request's own until it is sent on.
fn offered_names(body: &Map<String, Value>) -> Vec<String> {
    ["tools", "functions"]
        .iter()
        .filter_map(|key| body.get(*key)?.as_array())
        .flatten()
        .filter_map(|tool| {
            let tool = tool.as_object()?;
            let spec = tool
                .get("function")
                .and_then(Value::as_object)
                .unwrap_or(tool);
            spec.get("name")?.as_str()
        })
        .map(str::to_owned)
        .collect()
}

/// A Chat Completions request that continues its conversation, as Python reads it: messages
/// of the system and developer (plain strings), the user (the first one a string: the
/// anchor), the model and tools only, the model's among them; after its last answer, only
/// tool results (each naming its call by a string), at least one. Its anchor, length and the
/// calls its results answer; None for anything else.
fn continuing(messages: &[Value]) -> Option<(&str, Continues)> {
    let mut anchor = None;
    let mut last_answer = None;
    for (index, message) in messages.iter().enumerate() {
        let message = message.as_object()?;
        match message.get("role")?.as_str()? {
            "system" | "developer" => plain(message.get("content")?)?,
            "user" => {
                if anchor.is_none() {
                    anchor = Some(non_empty(message.get("content")?)?);
                }
            }
            "assistant" => last_answer = Some(index),
            "tool" => {}
            _ => return None,
        }
    }
    let last_answer = last_answer?;
    let mut answers = Vec::new();
    let mut texts = Vec::new();
    for message in &messages[last_answer + 1..] {
        let message = message.as_object()?;
        (message.get("role")?.as_str()? == "tool").then_some(())?;
        answers.push(message.get("tool_call_id")?.as_str()?.to_owned());
        texts.push(
            message
                .get("content")
                .and_then(Value::as_str)
                .map(str::to_owned),
        );
    }
    // (tool results last: a new user message may start the conversation's next run)
    (!answers.is_empty()).then_some(())?;
    Some((
        anchor?,
        Continues {
            messages: messages.len(),
            answers,
            last_answer,
            calls: answer_calls(&messages[last_answer]),
            texts,
            tools: None,
        },
    ))
}

/// Whether Python's endpoint reads `value` (`bounds.load_json`): not when it holds a number
/// written with a point or an exponent that is past a double's range (`1e400`: `inf` to
/// `json.loads`, which the endpoint refuses, passing the request on unread); an integer is
/// Python's at any length up to Python's limit (`observe::long_digit_run`, checked before).
fn python_reads(value: &Value) -> bool {
    match value {
        Value::Number(number) => {
            // (only a float with an exponent or more than 308 digits is past a double)
            let text = number.as_str();
            !((text.contains(['e', 'E']) || (text.len() > 308 && text.contains('.')))
                && number.as_f64().is_none())
        }
        Value::Array(items) => items.iter().all(python_reads),
        Value::Object(members) => members.values().all(python_reads),
        _ => true,
    }
}

/// Whether a Chat Completions request can call tools as Python's `read_request` reads it
/// (`can_call(tools, tool_choice) or can_call(functions, function_call)`: offered, and not
/// withdrawn by a choice `"none"` or `{"type": "none"}`); None when this cannot be sure (a
/// number: Python's truth of `0.0e5` is not worth a twin).
fn offers_tools(body: &Map<String, Value>) -> Option<bool> {
    let truth = |key: &str| match body.get(key) {
        None | Some(Value::Null) => Some(false),
        Some(Value::Bool(value)) => Some(*value),
        Some(Value::String(text)) => Some(!text.is_empty()),
        Some(Value::Array(items)) => Some(!items.is_empty()),
        Some(Value::Object(members)) => Some(!members.is_empty()),
        Some(Value::Number(_)) => None,
    };
    let withdrawn = |key: &str| match body.get(key) {
        Some(Value::String(choice)) => choice == "none",
        Some(Value::Object(choice)) => choice.get("type").and_then(Value::as_str) == Some("none"),
        _ => false,
    };
    if truth("tools")? && !withdrawn("tool_choice") {
        return Some(true);
    }
    Some(truth("functions")? && !withdrawn("function_call"))
}

/// The ids of the tool calls a model's answer carries, in order, when it plainly carries
/// them as Python reads them (a list of calls each with a string id; no legacy function call).
fn answer_calls(message: &Value) -> Option<Vec<String>> {
    let message = message.as_object()?;
    if message
        .get("function_call")
        .is_some_and(|call| !call.is_null())
    {
        return None;
    }
    message
        .get("tool_calls")?
        .as_array()?
        .iter()
        .map(|call| call.as_object()?.get("id")?.as_str().map(str::to_owned))
        .collect()
}

/// The tool-call ids a whole Chat Completions response hands over (every choice's, a superset
/// of what Python reads); None when this cannot be sure to read them all as Python does.
pub fn response_call_ids(data: &[u8]) -> Option<Vec<String>> {
    if crate::observe::long_digit_run(data) {
        return None;
    }
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(data) else {
        return None;
    };
    let mut ids = Vec::new();
    let Some(choices) = body.get("choices") else {
        return Some(ids);
    };
    for choice in choices.as_array()? {
        let Some(message) = choice.get("message").filter(|message| !message.is_null()) else {
            continue;
        };
        let message = message.as_object()?;
        if message
            .get("function_call")
            .is_some_and(|call| !call.is_null())
        {
            return None; // (a legacy call: Python names it by its function)
        }
        match message.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(calls) => {
                for call in calls.as_array()? {
                    match call.get("id") {
                        Some(Value::String(id)) => ids.push(id.clone()),
                        None | Some(Value::Null) => {}
                        Some(_) => return None, // (Python writes it with `str()`)
                    }
                }
            }
        }
    }
    Some(ids)
}

/// A new conversation's first request, as Python reads it (no tool results, no answer of the
/// model's before it, its last message the user's): its anchor, the first user message's text.
/// None for anything else, or anything less plain (content in parts, a continued response).
fn first_request(api: Api, body: &Map<String, Value>) -> Option<&str> {
    match api {
        Api::Chat => messages_anchor(body.get("messages")?.as_array()?, |_| true),
        Api::Responses => {
            if ["previous_response_id", "conversation"]
                .iter()
                .any(|key| body.contains_key(*key))
            {
                return None;
            }
            body.get("instructions").map_or(Some(()), plain)?;
            match body.get("input")? {
                Value::Array(items) => messages_anchor(items, |item| {
                    item.get("type")
                        .is_none_or(|kind| kind.as_str() == Some("message"))
                }),
                input => non_empty(input),
            }
        }
        Api::Messages => {
            body.get("system").map_or(Some(()), plain)?;
            let messages = body.get("messages")?.as_array()?;
            let [only] = messages.as_slice() else {
                return None;
            };
            let only = only.as_object()?;
            (only.get("role")?.as_str()? == "user").then_some(())?;
            non_empty(only.get("content")?)
        }
    }
}

/// Messages of the system, developer and user only, each one string (and `plain`, what `also`
/// asks of each), the user's last: the first user message's text.
fn messages_anchor(messages: &[Value], also: impl Fn(&Map<String, Value>) -> bool) -> Option<&str> {
    let mut anchor = None;
    for message in messages {
        let message = message.as_object().filter(|message| also(message))?;
        match message.get("role")?.as_str()? {
            "system" | "developer" => plain(message.get("content")?)?,
            "user" => {
                if anchor.is_none() {
                    anchor = Some(non_empty(message.get("content")?)?);
                }
            }
            _ => return None,
        }
    }
    let last = messages.last()?.as_object()?;
    (last.get("role")?.as_str()? == "user").then_some(())?;
    anchor
}

/// Instructions in one string that the client SDK did not write.
fn plain(value: &Value) -> Option<()> {
    let text = value.as_str()?;
    (!SDK_MARKS.iter().any(|mark| text.contains(mark))).then_some(())
}

fn non_empty(value: &Value) -> Option<&str> {
    value.as_str().filter(|text| !text.is_empty())
}

/// The conversation's digest as Python's book makes it (`_digest`): its first 12 bytes.
fn digest(api: Api, agent: &str, anchor: &str) -> Digest {
    let name = match api {
        Api::Chat => "chat",
        Api::Responses => "responses",
        Api::Messages => "messages",
    };
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    context.update(name.as_bytes());
    context.update(b"\0");
    context.update(agent.as_bytes());
    context.update(b"\0");
    context.update(anchor.as_bytes());
    let mut out = [0u8; 12];
    out.copy_from_slice(&context.finish().as_ref()[..12]);
    out
}

/// The headers that go upstream, as Python's `request_headers` leaves them, with the response
/// asked for unencoded (it is read).
fn sent_headers(headers: &HeaderMap) -> Headers {
    let named = connection_named(headers);
    let mut out: Headers = headers
        .iter()
        .map(|(name, value)| (name.as_str(), value))
        .filter(|(name, _)| {
            !name.starts_with(WATCHDOG_PREFIX)
                && !HOP_BY_HOP.contains(name)
                && !REQUEST_SET.contains(name)
                && *name != "accept-encoding"
                && !named.iter().any(|n| n == name)
        })
        .map(|(name, value)| {
            (
                name.to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    out.push(("accept-encoding".to_owned(), "identity".to_owned()));
    out
}

/// Equal, in a time that does not depend on where they differ.
/// Whether a request surely does not carry the endpoint's token (Python's `door` refuses it
/// 401, once it has the request): the path's `/token/<token>/`, else the token header, ASCII
/// and not the token. False when this cannot be sure to read them as Python does (a target
/// `door` here does not read; a token that is not ASCII): Python judges the request.
pub fn wrong_token(settings: &Settings, target: &str, headers: &HeaderMap) -> bool {
    let Some((name, token)) = settings.token.as_ref() else {
        return false;
    };
    let Some((_, path_token, _)) = door(target) else {
        return false;
    };
    let given = path_token.map(str::as_bytes).unwrap_or_else(|| {
        headers
            .get(name.as_str())
            .map(|v| v.as_bytes())
            .unwrap_or(b"")
    });
    given.is_ascii() && !same(given, token.as_bytes())
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A session's 24 hex digits.
pub fn parse_digest(hex: &str) -> Option<Digest> {
    if hex.len() != 24 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 12];
    for (index, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            openai: "http://up/v1".into(),
            anthropic: "http://up".into(),
            default_agent: "bot".into(),
            token: None,
        }
    }

    fn body(after: &str) -> Vec<u8> {
        format!(
            r#"{{"model":"m","messages":[{{"role":"system","content":"s"}},
                   {{"role":"user","content":"task"}}{after}]}}"#
        )
        .into_bytes()
    }

    const HOLD: Duration = Duration::from_secs(60);

    #[test]
    fn a_token_surely_wrong_is_told_before_the_body() {
        let with_token = Settings {
            token: Some(("x-watchdog-token".into(), "t0ken".into())),
            ..settings()
        };
        let mut given = HeaderMap::new();
        given.insert("x-watchdog-token", "t0ken".parse().unwrap());
        let mut wrong = HeaderMap::new();
        wrong.insert("x-watchdog-token", "other".parse().unwrap());
        let none = HeaderMap::new();
        let chat = "/v1/chat/completions";
        assert!(!wrong_token(&with_token, chat, &given));
        assert!(!wrong_token(
            &with_token,
            "/token/t0ken/agent/a/v1/chat/completions",
            &none
        ));
        assert!(wrong_token(&with_token, chat, &wrong));
        assert!(wrong_token(&with_token, chat, &none));
        assert!(wrong_token(
            &with_token,
            "/token/other/v1/chat/completions",
            &given
        ));
        // (what this cannot read as Python does is Python's to judge)
        assert!(!wrong_token(
            &with_token,
            "/token/t0%6Ben/v1/chat/completions",
            &none
        ));
        assert!(!wrong_token(&settings(), chat, &none)); // (no token: none to miss)
    }

    const ANSWERED: &str = r#",{"role":"assistant","content":"done"},
                              {"role":"tool","tool_call_id":"own_1","content":"r"}"#;

    fn read_chat(body: &[u8]) -> Option<First> {
        read(
            &settings(),
            "POST",
            "/v1/chat/completions",
            &HeaderMap::new(),
            body,
        )
    }

    #[test]
    fn the_tools_a_request_offers_are_named_as_python_reads_them() {
        let offers = br#"{"model":"m","messages":[{"role":"user","content":"q"}],
            "tools":[{"type":"function","function":{"name":"search"}},{"name":"final_result"},
                     {"function":{"name":7}},"odd",{"type":"function","function":"flat",
                      "name":"answer"}],
            "functions":[{"name":"legacy"}]}"#;
        let first = read_chat(offers).unwrap();
        assert_eq!(
            first.offered,
            ["search", "final_result", "answer", "legacy"].map(str::to_owned)
        );
        assert!(read_chat(&body("")).unwrap().offered.is_empty());
    }

    #[test]
    fn a_continuing_request_is_read_with_its_length_and_the_calls_its_results_answer() {
        let first = read_chat(&body(ANSWERED)).unwrap();
        let continues = first.continues.as_ref().unwrap();
        assert_eq!(continues.messages, 4);
        assert_eq!(continues.answers, vec!["own_1".to_owned()]);
        // the same conversation as its first request
        assert_eq!(first.digest, read_chat(&body("")).unwrap().digest);
        assert!(read_chat(&body("")).unwrap().continues.is_none());
    }

    #[test]
    fn a_request_that_may_start_a_run_or_is_not_plain_is_not_read() {
        for after in [
            r#",{"role":"assistant","content":"done"},{"role":"user","content":"next"}"#,
            r#",{"role":"assistant","content":"done"}"#,
            r#",{"role":"assistant","content":"d"},{"role":"tool","tool_call_id":1,"content":"r"}"#,
            r#",{"role":"assistant","content":"d"},{"role":"function","name":"f","content":"r"}"#,
            r#",{"role":"assistant","content":"d"},{"role":"system","content":"s"},
               {"role":"tool","tool_call_id":"x","content":"r"}"#,
            r#",{"role":"assistant","content":"d"},{"role":"developer","content":"[budget: 1"},
               {"role":"tool","tool_call_id":"x","content":"r"}"#,
        ] {
            assert!(read_chat(&body(after)).is_none(), "{after}");
        }
    }

    #[test]
    fn a_request_that_names_its_clients_session_or_sub_agent_is_not_read() {
        // (its run is in a session that may have runs already, or a child of its caller's:
        // Python says what it gets)
        assert!(read_chat(&body("")).is_some());
        for name in SESSION_HEADERS.iter().chain(&SUBAGENT_HEADERS) {
            let mut headers = HeaderMap::new();
            headers.insert(*name, "a-session".parse().unwrap());
            let first = read(
                &settings(),
                "POST",
                "/v1/chat/completions",
                &headers,
                &body(""),
            );
            assert!(first.is_none(), "{name}");
        }
    }

    #[test]
    fn a_number_past_a_doubles_range_is_not_read() {
        let with = |number: &str| {
            format!(
                r#"{{"model":"m","temperature":{number},
            "messages":[{{"role":"user","content":"task"}}],"metadata":{{"n":[{number}]}}}}"#
            )
            .into_bytes()
        };
        for number in [
            "1e400",
            "-1E309",
            "0.1e310",
            &format!("{}.5", "1".repeat(310)),
        ] {
            assert!(read_chat(&with(number)).is_none(), "{number}");
        }
        for number in ["1e308", "1e-400", "-0.0", &"1".repeat(400)] {
            assert!(read_chat(&with(number)).is_some(), "{number}");
        }
    }

    #[test]
    fn what_python_said_goes_once_to_a_longer_request_that_answers_no_call_handed_over() {
        let headers = HeaderMap::new();
        let mut admission = Admission::new(settings());
        let digest = read_chat(&body("")).unwrap().digest;
        let judged = |admission: &mut Admission, body: &[u8]| {
            matches!(
                admission.judge(read_chat(body).unwrap(), &headers),
                Verdict::Admitted(_)
            )
        };
        assert!(!judged(&mut admission, &body(ANSWERED)), "not told");
        admission.admit_next(digest, -1, None, 4, "bot".into(), HOLD, None);
        assert!(!judged(&mut admission, &body(ANSWERED)), "not longer");
        admission.admit_next(digest, -1, None, 2, "bot".into(), HOLD, None);
        assert!(judged(&mut admission, &body(ANSWERED)));
        assert!(!judged(&mut admission, &body(ANSWERED)), "once");
        admission.handed(Some(vec!["own_1".into()]));
        admission.admit_next(digest, -1, None, 2, "bot".into(), HOLD, None);
        assert!(
            !judged(&mut admission, &body(ANSWERED)),
            "a call handed over"
        );
        admission.admit_next(digest, -1, None, 2, "bot".into(), HOLD, None);
        admission.unread(Some("other".into()));
        admission.handed(Some(vec![]));
        let other = body(
            r#",{"role":"assistant","content":"d"},
                            {"role":"tool","tool_call_id":"own_2","content":"r"}"#,
        );
        assert!(
            judged(&mut admission, &other),
            "another agent's unread request"
        );
        admission.admit_next(digest, -1, None, 2, "bot".into(), HOLD, None);
        admission.unread(Some("bot".into()));
        assert!(
            !judged(&mut admission, &other),
            "its agent's unread request"
        );
        admission.admit_next(digest, -1, None, 2, "bot".into(), HOLD, None);
        admission.handed(None);
        assert!(!admission.sighted());
        admission.admit_next(digest, -1, None, 2, "bot".into(), HOLD, None);
        assert!(
            !judged(&mut admission, &other),
            "a response it could not read"
        );
        // Python booked it and said which calls it handed over: sighted again
        admission.handed(None);
        admission.sight(vec![]);
        assert!(!admission.sighted(), "one of two told");
        admission.sight(vec!["own_2".into()]);
        assert!(admission.sighted());
        admission.admit_next(digest, -1, None, 2, "bot".into(), HOLD, None);
        assert!(
            !judged(&mut admission, &other),
            "its call, as Python read it"
        );
        let third = body(
            r#",{"role":"assistant","content":"d"},
                            {"role":"tool","tool_call_id":"own_3","content":"r"}"#,
        );
        admission.admit_next(digest, -1, None, 2, "bot".into(), HOLD, None);
        assert!(
            judged(&mut admission, &third),
            "a call no response handed over"
        );
    }

    #[test]
    fn a_request_not_read_is_tied_to_its_conversation_only_when_python_would_tie_it_so() {
        let plain = HeaderMap::new();
        let digest = read_chat(&body("")).unwrap().digest;
        // a system message in parts: not read, but its conversation is the first request's
        let parts = br#"{"messages":[{"role":"system","content":[{"type":"text","text":"s"}]},
                        {"role":"user","content":""},{"role":"user","content":"task"}]}"#;
        assert!(read_chat(parts).is_none());
        assert_eq!(conversation_of("bot", &plain, parts), Some(digest));
        assert_ne!(conversation_of("other", &plain, parts), Some(digest));
        for (headers, body) in [
            (
                vec![(
                    "traceparent",
                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                )],
                &parts[..],
            ),
            (vec![("x-watchdog-run", "r")], &parts[..]),
            (vec![("content-encoding", "gzip")], &parts[..]),
            (
                vec![],
                br#"{"messages":[{"role":"user","content":[{"text":"task"}]}]}"#,
            ),
            (vec![], br#"{"messages":[{"role":"user"}]}"#),
            (vec![], br#"{"messages":"task"}"#),
            (vec![], b"not json"),
        ] {
            let mut map = HeaderMap::new();
            for (name, value) in headers {
                map.insert(name, value.parse().unwrap());
            }
            assert_eq!(
                conversation_of("bot", &map, body),
                None,
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
        // what Python said of that conversation goes; another conversation's stays
        let mut admission = Admission::new(settings());
        let other = read_chat(
            br#"{"messages":[{"role":"system","content":"s"},
                                     {"role":"user","content":"another task"}]}"#,
        )
        .unwrap()
        .digest;
        admission.admit_next(digest, -1, None, 2, "bot".into(), HOLD, None);
        admission.admit_next(other, -1, None, 2, "bot".into(), HOLD, None);
        admission.unread_conversation(&digest);
        assert!(admission.take(&digest).is_none() && admission.take(&other).is_some());
    }

    #[test]
    fn a_countdown_goes_to_a_request_that_offers_tools_only() {
        let headers = HeaderMap::new();
        let mut admission = Admission::new(settings());
        let digest = read_chat(&body("")).unwrap().digest;
        let note = "[budget: 3 of 9 tool calls left — wrap up soon]".to_owned();
        let with = |tools: &str| {
            let text = String::from_utf8(body(ANSWERED)).unwrap();
            text.replacen(r#"{"model":"m","#, &format!(r#"{{"model":"m",{tools}"#), 1)
                .into_bytes()
        };
        for (tools, wanted) in [
            (r#""tools":[{"type":"function"}],"#, Some(Some(&note))),
            (
                r#""tools":[],"functions":[{"name":"f"}],"#,
                Some(Some(&note)),
            ),
            (r#""tools":[],"#, Some(None)),
            ("", Some(None)),
            (r#""tools":null,"functions":{},"#, Some(None)),
            (r#""tools":0,"#, None),
            (
                r#""tools":[{"type":"function"}],"tool_choice":"none","#,
                Some(None),
            ),
            (
                r#""tools":[{"type":"function"}],"tool_choice":{"type":"none"},"#,
                Some(None),
            ),
            (
                r#""tools":[{"type":"function"}],"tool_choice":"auto","#,
                Some(Some(&note)),
            ),
            (
                r#""tools":[],"functions":[{"name":"f"}],"function_call":"none","#,
                Some(None),
            ),
        ] {
            admission.admit_next(digest, 3, Some(note.clone()), 2, "bot".into(), HOLD, None);
            match admission.judge(read_chat(&with(tools)).unwrap(), &headers) {
                Verdict::Admitted(admitted) => {
                    assert_eq!(Some(admitted.note.as_ref()), wanted, "{tools}");
                    assert_eq!(admitted.keep, 3);
                }
                _ => assert_eq!(wanted, None, "{tools}"),
            }
        }
    }

    #[test]
    fn a_new_runs_countdown_goes_to_a_first_request_that_offers_tools_only() {
        let headers = HeaderMap::new();
        let note = "[budget: 3 of 3 tool calls left — wrap up soon]".to_owned();
        let first = |task: &str, tools: &str| {
            let text = String::from_utf8(body("")).unwrap();
            text.replacen(r#"{"model":"m","#, &format!(r#"{{"model":"m",{tools}"#), 1)
                .replacen("task", task, 1)
                .into_bytes()
        };
        for (number, (tools, wanted)) in [
            (r#""tools":[{"type":"function"}],"#, Some(&note)),
            (r#""tools":[],"functions":[{"name":"f"}],"#, Some(&note)),
            (r#""tools":[],"#, None),
            ("", None),
            (r#""tools":0,"#, None),
            (
                r#""tools":[{"type":"function"}],"tool_choice":"none","#,
                None,
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let mut admission = Admission::new(settings());
            admission.learn("bot".into(), 3, Some(note.clone()));
            let request = read_chat(&first(&format!("task {number}"), tools)).unwrap();
            match admission.judge(request, &headers) {
                Verdict::Admitted(admitted) => {
                    assert_eq!(admitted.note.as_ref(), wanted, "{tools}");
                    assert_eq!((admitted.keep, admitted.continued), (3, false));
                }
                _ => assert_eq!(wanted, None, "{tools}"),
            }
            // without a note: the bound alone, whatever it offers
            admission.learn("bot".into(), 3, None);
            let request = read_chat(&first(&format!("other {number}"), tools)).unwrap();
            assert!(
                matches!(admission.judge(request, &headers),
                         Verdict::Admitted(admitted) if admitted.note.is_none()),
                "{tools}"
            );
        }
        // another API's first request is Python's when a note is learned
        let mut admission = Admission::new(settings());
        admission.learn("bot".into(), 3, Some(note));
        let messages = br#"{"model":"m","max_tokens":9,"tools":[{"name":"f"}],
                            "messages":[{"role":"user","content":"task"}]}"#;
        let request = read(&settings(), "POST", "/v1/messages", &headers, messages).unwrap();
        assert!(matches!(admission.judge(request, &headers), Verdict::No));
    }

    #[test]
    fn a_conversation_is_told_to_python_as_its_sessions_hex_digits() {
        let first = read_chat(&body("")).unwrap();
        let told = hex(&first.digest);
        assert_eq!(told, first.hex());
        assert_eq!(told.len(), 24);
        assert_eq!(parse_digest(&told), Some(first.digest));
    }

    #[test]
    fn taking_back_what_was_told_leaves_a_call_in_flight_holding_the_next_request() {
        let mut admission = Admission::new(settings());
        let digest = read_chat(&body("")).unwrap().digest;
        admission.admit_next(digest, 3, None, 2, "bot".into(), HOLD, None);
        admission.asked(digest); // (a call of it goes upstream: what was told is used)
        assert!(admission.booking(&digest));
        admission.next_clear(Some(digest), false); // taken back: the call still holds it
        assert!(admission.booking(&digest));
        admission.next_clear(Some(digest), true); // booked, nothing said: it waits no more
        assert!(!admission.booking(&digest));
        admission.asked(digest);
        admission.next_clear(None, false); // every conversation forgotten
        assert!(!admission.booking(&digest));
    }

    #[test]
    fn the_ids_handed_over_are_remembered_in_two_generations() {
        let mut admission = Admission::new(settings());
        admission.handed(Some(
            (0..MAX_HANDED / 2).map(|n| format!("id_{n}")).collect(),
        ));
        admission.handed(Some(vec!["id_0".into()])); // (known: not again)
        assert!(admission.was_handed("id_0") && admission.older.is_empty());
        admission.handed(Some(vec!["next_0".into()]));
        assert!(admission.was_handed("id_0") && admission.was_handed("next_0"));
        assert!(admission.sighted(), "never blind for their number");
        admission.handed(Some(
            (1..MAX_HANDED / 2).map(|n| format!("next_{n}")).collect(),
        ));
        admission.handed(Some(vec!["last".into()]));
        assert!(!admission.was_handed("id_0") && admission.was_handed("next_0"));
        assert!(admission.handed.len() + admission.older.len() <= MAX_HANDED);
    }

    #[test]
    fn a_whole_responses_tool_calls_are_read_or_it_is_not_sure() {
        let calls = br#"{"choices":[{"message":{"tool_calls":[{"id":"a"},{"id":"b"}]}},
                        {"message":{"tool_calls":[{"id":"c"}]}}]}"#;
        assert_eq!(
            response_call_ids(calls),
            Some(vec!["a".into(), "b".into(), "c".into()])
        );
        assert_eq!(
            response_call_ids(br#"{"choices":[{"message":{"content":"x"}}]}"#),
            Some(vec![])
        );
        for unsure in [
            &br#"{"choices":[{"message":{"tool_calls":[{"id":1}]}}]}"#[..],
            br#"{"choices":[{"message":{"function_call":{"name":"f"}}}]}"#,
            br#"{"choices":[{"message":{"tool_calls":[{"id":"a"}]}"#,
            b"NaN",
        ] {
            assert_eq!(response_call_ids(unsure), None);
        }
    }

    /// The model's answer handing over the calls `ids` (of the tool "search"), then a result
    /// for each of `results` (id, content as JSON).
    fn handed_turn(ids: &[&str], results: &[(&str, &str)]) -> Vec<u8> {
        let calls: Vec<String> = ids
            .iter()
            .map(|id| {
                format!(r#"{{"id":"{id}","type":"function","function":{{"name":"search","#)
                    .to_owned()
                    + r#""arguments":"{}"}}"#
            })
            .collect();
        let mut after = format!(
            r#",{{"role":"assistant","content":null,"tool_calls":[{}]}}"#,
            calls.join(",")
        );
        for (id, content) in results {
            after.push_str(&format!(
                r#",{{"role":"tool","tool_call_id":"{id}","content":{content}}}"#
            ));
        }
        body(&after)
    }

    fn expect(ids: &[&str], seen: &[i64]) -> Option<Expect> {
        Some(Expect {
            calls: ids
                .iter()
                .map(|id| ((*id).to_owned(), "search".to_owned()))
                .collect(),
            seen: seen.iter().copied().collect(),
        })
    }

    #[test]
    fn a_request_answering_the_calls_handed_over_goes_on_only_as_python_proved_it() {
        let headers = HeaderMap::new();
        let mut admission = Admission::new(settings());
        let digest = read_chat(&body("")).unwrap().digest;
        let judged = |admission: &mut Admission, body: &[u8]| {
            read_chat(body).is_some_and(|first| {
                matches!(admission.judge(first, &headers), Verdict::Admitted(_))
            })
        };
        let good = handed_turn(&["a", "b"], &[("b", r#""two""#), ("a", r#""one""#)]);
        let tell = |admission: &mut Admission, seen: &[i64]| {
            admission.handed(Some(vec!["a".into(), "b".into()]));
            admission.admit_next(
                digest,
                -1,
                None,
                2,
                "bot".into(),
                HOLD,
                expect(&["a", "b"], seen),
            );
        };
        tell(&mut admission, &[]);
        assert!(
            judged(&mut admission, &good),
            "its calls' results, in any order"
        );
        assert!(!judged(&mut admission, &good), "once");
        let hash = crate::failed::stable_hash("search\0one");
        for (case, bad, seen) in [
            ("a result the run had", good.clone(), vec![hash]),
            (
                "a failed result",
                handed_turn(&["a", "b"], &[("a", r#""Error: no""#), ("b", r#""two""#)]),
                vec![],
            ),
            (
                "an unsure one",
                handed_turn(&["a", "b"], &[("a", "\"\u{a0}x\""), ("b", r#""t""#)]),
                vec![],
            ),
            (
                "the same result twice",
                handed_turn(&["a", "b"], &[("a", r#""x""#), ("b", r#""x""#)]),
                vec![],
            ),
            (
                "a result missing",
                handed_turn(&["a", "b"], &[("a", r#""x""#)]),
                vec![],
            ),
            (
                "one answered twice",
                handed_turn(&["a", "b"], &[("a", r#""x""#), ("a", r#""y""#)]),
                vec![],
            ),
            (
                "another call",
                handed_turn(&["a", "c"], &[("a", r#""x""#), ("c", r#""y""#)]),
                vec![],
            ),
            (
                "content in parts",
                handed_turn(
                    &["a", "b"],
                    &[("a", r#"[{"type":"text","text":"x"}]"#), ("b", r#""y""#)],
                ),
                vec![],
            ),
        ] {
            tell(&mut admission, &seen);
            assert!(!judged(&mut admission, &bad), "{case}");
        }
        // a message more before the answer: not right after the request decided
        tell(&mut admission, &[]);
        let good_text = String::from_utf8(good.clone()).unwrap();
        let longer = good_text.replacen(
            r#"{"role":"assistant""#,
            r#"{"role":"assistant","content":"hm"},{"role":"assistant""#,
            1,
        );
        assert!(
            !judged(&mut admission, longer.as_bytes()),
            "an extra message"
        );
        // handed over again by another response: that call's result is another run's
        tell(&mut admission, &[]);
        admission.handed(Some(vec!["b".into()]));
        assert!(!judged(&mut admission, &good), "handed over again");
        // a call of the conversation gone upstream since (Python decided the request itself)
        tell(&mut admission, &[]);
        admission.asked(digest);
        assert!(
            !judged(&mut admission, &good),
            "said before a call went upstream"
        );
        // past its hold
        admission.handed(Some(vec!["a".into(), "b".into()]));
        admission.admit_next(
            digest,
            -1,
            None,
            2,
            "bot".into(),
            Duration::ZERO,
            expect(&["a", "b"], &[]),
        );
        assert!(!judged(&mut admission, &good), "too late");
    }
}
