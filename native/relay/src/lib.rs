//! The model endpoint's compiled relay (DESIGN §12): the sockets, the HTTP/1.1 keep-alive
//! server, the upstream connection pool and the byte relay of responses, on threads of its own
//! that never take the GIL.
//!
//! Python decides; this crate moves bytes. Each request is read (bounded) and queued as an
//! event; a byte on a socket wakes the Python event loop, which takes the queued events
//! (`Relay.take`) and answers each request with `Relay.respond` (an answer of its own) or
//! `Relay.forward` (to a URL it names: the configured upstream, or its own relay for the
//! streams it must change in flight). A forwarded response is streamed back as it arrives;
//! with `observe` a copy of its bytes (bounded; a gzip or deflate body's inflated, module
//! `inflate`) comes back in the request's `done` event when it ends, is cut short, or the
//! client goes away (which drops the upstream request).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;
use tokio::sync::{oneshot, Notify};

mod admit;
mod failed;
mod inflate;
mod note;
mod observe;
mod trim;
use admit::{Admission, Settings, Verdict};
use inflate::{BadCoding, Coding, Inflater};
use observe::Seen;
use trim::{Answers, Api, LastEvent, StreamTrim, Trim};

/// RFC 9110 §7.6.1, and the framing hyper sets itself.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

type Headers = Vec<(String, String)>;

/// What the relay tells Python.
enum Event {
    /// A request read: method, target, headers, body (None: refused before it was read), the
    /// refusal ("" none, "too_large", "overloaded", "over_budget": past `max_inflight`,
    /// "unreadable", "body_late": its body did not arrive in time, "body_slow": it stalled or
    /// crawled (fewer bytes in a window than `window_least`), "bad_host": an HTTP/1.1
    /// request without one Host header), requests in flight.
    /// `learn`: the agent of a new conversation's first request, whose new runs the relay
    /// has not been told about (`Relay.admit_agent`). `arrived`: when its head came (Python
    /// is told how long ago, so its run's call is in flight from then, as on its own relay).
    Request {
        id: u64,
        method: String,
        target: String,
        headers: Headers,
        body: Option<Bytes>,
        refusal: &'static str,
        in_flight: usize,
        learn: Option<String>,
        arrived: Instant,
    },
    /// A new conversation's first request, sent on at once with the bound `keep` (-1: none)
    /// that its agent's new runs get (`admit`): Python reads it as a request it forwarded.
    /// `note`: the note written into it (the countdown; "" none).
    Taken {
        id: u64,
        method: String,
        target: String,
        headers: Headers,
        body: Bytes,
        in_flight: usize,
        keep: i64,
        arrived: Instant,
        continued: bool,
        note: String,
    },
    /// A forward failed before the client's answer began: no head in time ("timeout"), none
    /// at all ("unreachable"), its body stopped ("stalled") or broke off ("broken") while it
    /// was read whole, a response a bound cannot judge ("unjudged", `detail` what), or one
    /// past what the whole responses held at once may take ("held_full"): Python
    /// answers the request again with `respond`.
    Failed {
        id: u64,
        kind: &'static str,
        detail: String,
    },
    /// A forwarded response ended: its status (0: none came), "ok", "cut" or "cancelled", the
    /// bytes observed (with `observe`), its content type, seconds from forward to the end.
    /// With a bound on tool calls, whether the relay changed what it passed on. `seen`: what
    /// a successful stream of a known API said, read here (module `observe`; None: Python
    /// reads the bytes). `unread`: a Chat Completions response whose tool calls could not be
    /// read here (Python says which it handed over once booked: `Relay.sight`). `held`: a
    /// held answer (`forward`'s `hold`) whose client has nothing of its body yet: the relay
    /// waits for `Relay.release` (the held bytes, or what replaces them).
    Done {
        id: u64,
        status: u16,
        outcome: &'static str,
        body: Option<Bytes>,
        content_type: String,
        seconds: f64,
        changed: bool,
        seen: Option<Seen>,
        unread: bool,
        held: bool,
    },
    /// The client of a request still with the model ended its side of the connection (it
    /// half-closed, waiting for its answer, or went away: an SDK's timeout): Python may let
    /// the request go (`Relay.let_go`) when its client sends it, or its run's next, again.
    Ended { id: u64 },
    /// A request that continues the conversation `digest` waits for Python to book the call
    /// before it (`booked`): Python books that call first, before the events queued with
    /// this one, and says what the request gets.
    Awaited { digest: admit::Digest },
}

/// Python's answer to a request.
enum Reply {
    Respond {
        status: u16,
        headers: Headers,
        body: Bytes,
    },
    Forward {
        method: String,
        url: String,
        headers: Headers,
        body: Bytes,
        observe: bool,
        notify: bool,
        trim: Option<Trim>,
        watch: Option<Api>,
        unasked: Option<Bytes>,
        ahead: Option<admit::Digest>,
        hold: bool,
        /// The instructions the client sent, for those a Responses response echoes (None:
        /// the echo is the client's own).
        echo: Option<serde_json::Value>,
        /// The tool whose calls are the request's answer, not work: kept beside `keep`.
        answer: Option<String>,
        /// The final-answer tools the request offers (`Answers::offered`; None: all).
        offered: Option<Vec<String>>,
    },
}

struct Shared {
    events: Mutex<Vec<Event>>,
    armed: AtomicBool,
    wake: UnixStream,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    /// Held answers waiting for Python's word (`Relay.release`): None, the held bytes go;
    /// else what replaces them.
    releases: Mutex<HashMap<u64, oneshot::Sender<Option<Bytes>>>>,
    next_id: AtomicU64,
    /// Requests being served now: from their head until their response has ended.
    in_flight: AtomicUsize,
    /// Of those, the ones whose body has been read: a place each (`max_concurrent`), so a
    /// body still coming holds none.
    places: AtomicUsize,
    /// Of those, the ones whose body is being read (at most `max_reading`).
    reading: AtomicUsize,
    max_body: usize,
    max_concurrent: usize,
    /// `READING_PER_PLACE` × `max_concurrent`.
    max_reading: usize,
    /// The bytes of request bodies the requests in flight hold (`model_max_inflight_bytes`).
    held_bytes: Mutex<usize>,
    max_inflight: usize,
    observe_limit: usize,
    /// How long a request's body may take to arrive once its head has (`model_body_timeout`).
    body_timeout: Duration,
    /// The bytes a body must bring in each `rate_window` from its head (`model_body_min_rate`
    /// × `model_body_rate_window`): one that brings fewer stalled or crawled, and is 408.
    window_least: usize,
    rate_window: Duration,
    /// The bytes of whole responses the requests in flight hold, read before they are
    /// answered (`model_max_held_response_bytes`).
    held_responses: Mutex<usize>,
    max_held_responses: usize,
    /// How long a request waits for Python's word on it (the connect and read timeouts, so
    /// `model_upstream_timeout` + 30 s): past it, the relay answers it itself.
    decide_timeout: Duration,
    /// Set once, by `Relay.answer_tools` (or the constructor): Python reads them from the
    /// conventions at its first model request, and no response is trimmed before that.
    answers: OnceLock<Answers>,
    /// What goes upstream before Python has read it (None until `Relay.admission`).
    admission: Mutex<Option<Admission>>,
    /// Python said (or took back) what a conversation's next request gets.
    told: Notify,
    client: reqwest::Client,
    /// The upstream refused a request's `stream_options` (`Relay.usage_refused`).
    usage_refused: AtomicBool,
    /// The requests whose client's end is watched: their connection (`Relay.let_go`) and
    /// the watch (`watch_client`, ended with the request).
    watched: Mutex<HashMap<u64, (Arc<Client>, tokio::task::AbortHandle)>>,
    /// The relay is stopping (`Relay.drain`): it accepts no connection, a request that comes
    /// gets 503 with `Retry-After`, each connection closes once its request in flight is
    /// answered.
    draining: tokio::sync::watch::Sender<bool>,
}

/// A client's connection, as its requests know it: its socket (to watch for the client's
/// end) and what drops it (`Relay.let_go`: the connection closes, its request is cancelled).
struct Client {
    fd: std::os::fd::RawFd,
    drop: Notify,
}

/// Until the client of request `id` ends its side of the connection (`Event::Ended`), read
/// on a second descriptor of its socket: a peek, so hyper's reading is left as it was (it
/// reads nothing of a connection while it serves a request on it, `half_close`). Bytes the
/// client sends meanwhile (a request pipelined) end the watch: that client is still there.
/// A client that ended its side may have half-closed (it waits for its answer) or gone; one
/// gone resets the connection once something is written to it (the answer's head, as it
/// begins): then the connection is dropped at once (`client`'s, as `Relay.let_go` drops
/// it), which cancels its upstream request as a client gone mid-answer does, though
/// nothing more is written to it meanwhile (a final request's answer, held until it ends).
async fn watch_client(
    shared: Arc<Shared>,
    id: u64,
    socket: tokio::net::TcpStream,
    client: Arc<Client>,
) {
    let mut byte = [0u8; 1];
    let gone = match socket.peek(&mut byte).await {
        Ok(read) if read > 0 => return,
        Ok(_) => {
            shared.push(Event::Ended { id });
            // (a reset, when it comes: the socket's error; none for a half-closed client)
            socket.ready(tokio::io::Interest::ERROR).await.is_ok()
        }
        Err(_) => {
            shared.push(Event::Ended { id });
            true
        }
    };
    if gone {
        client.drop.notify_one();
    }
}

/// A second descriptor of the client's socket, to watch (None: none could be had, out of
/// descriptors: its end goes untold).
fn watch_socket(client: &Client) -> Option<tokio::net::TcpStream> {
    // (the connection, and its descriptor, outlive the request that asks: it is served on it)
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(client.fd) };
    let socket = std::net::TcpStream::from(fd.try_clone_to_owned().ok()?);
    socket.set_nonblocking(true).ok()?;
    tokio::net::TcpStream::from_std(socket).ok()
}

/// Counts what a request holds as `size` bytes where it held `held` (fewer) in `total`:
/// false, counting nothing, when that takes it past `most` while other requests hold some (a
/// request alone is always taken).
fn take_bytes(total: &Mutex<usize>, most: usize, held: usize, size: usize) -> bool {
    let mut total = total.lock().unwrap();
    if size <= held {
        return true;
    }
    if *total > held && *total + (size - held) > most {
        return false;
    }
    *total += size - held;
    true
}

impl Shared {
    /// Counts a request's body as `size` bytes where it held `held` (`take_bytes`, within
    /// `max_inflight`).
    fn hold(&self, held: usize, size: usize) -> bool {
        take_bytes(&self.held_bytes, self.max_inflight, held, size)
    }

    /// A body of `size` bytes would be held now, without taking the total past `max_inflight`
    /// (or no request holds any): `hold`'s test, counting nothing.
    fn fits(&self, size: usize) -> bool {
        let total = *self.held_bytes.lock().unwrap();
        total == 0 || total + size <= self.max_inflight
    }

    fn answers(&self) -> Answers {
        self.answers.get().cloned().unwrap_or_default()
    }

    fn push(&self, event: Event) {
        self.events.lock().unwrap().push(event);
        if !self.armed.swap(true, Ordering::SeqCst) {
            let _ = (&self.wake).write(b"!"); // full: a wake-up is pending already
        }
    }

    /// Queues the request's event and waits for Python's reply, at most `decide_timeout`
    /// (None: the relay is closing, or Python did not answer in time; a reply that comes
    /// later finds the request gone, as if its client had gone away).
    async fn ask(&self, id: u64, event: Event) -> Option<Reply> {
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().unwrap().insert(id, tx);
        self.push(event);
        let reply = tokio::time::timeout(self.decide_timeout, rx).await;
        self.waiting.lock().unwrap().remove(&id);
        reply.ok().and_then(Result::ok)
    }
}

fn is_stream(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .eq_ignore_ascii_case("text/event-stream")
}

/// The observation as Python's `Observation` takes it: (response_id, input_tokens,
/// output_tokens, cache_read_tokens, cache_write_tokens, model, finish_reason,
/// [(call_id, name, arguments)], text, complete).
type SeenTuple = (
    Option<String>,
    u64,
    u64,
    u64,
    u64,
    Option<String>,
    Option<String>,
    Vec<(String, String, String)>,
    String,
    bool,
    bool,
);

fn seen_tuple(seen: Seen) -> SeenTuple {
    (
        seen.response_id,
        seen.input_tokens,
        seen.output_tokens,
        seen.cache_read_tokens,
        seen.cache_write_tokens,
        seen.model,
        seen.finish_reason,
        seen.calls
            .into_iter()
            .map(|call| (call.call_id, call.name, call.arguments))
            .collect(),
        seen.text,
        seen.complete,
        seen.unreadable,
    )
}

/// One request in flight: counted until its response has gone; a request dropped before its
/// end (the client went away) tells Python, which settles what it holds for it.
struct Ticket {
    shared: Arc<Shared>,
    id: u64,
    notify: bool,
    ended: bool,
    started: Instant,
    status: u16,
    content_type: String,
    observed: Option<Observed>,
    changed: bool,
    /// The API of an observed response, read here when it is a successful stream.
    api: Option<Api>,
    /// The bytes of its body counted in `held_bytes` (until the ticket is dropped).
    held: usize,
    /// Its client's end is watched (`Shared::watched`) from when it goes to the model.
    watched: bool,
    /// Its answer is held until Python releases it (`Event::Done`'s `held`).
    holding: bool,
    /// It holds a place (`Shared::places`): its body has been read.
    placed: bool,
    /// The bytes of its whole response held before they are answered, counted in
    /// `held_responses` (until the ticket is dropped).
    response_held: usize,
}

/// A request whose body is being read, counted in `Shared::reading` while it lives.
struct Reading(Arc<Shared>);

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.reading.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a response's observer holds: the bytes copied as they pass (bounded), or a whole
/// response read first: the bytes the client gets (shared, not copied: a whole response is
/// held once) or, for a compressed one, inflated.
enum Observed {
    Passing(BytesMut),
    Whole(Bytes),
}

/// What the observer of a whole response read first holds: for a plain one the very bytes
/// the client gets, for a gzip or deflate one its inflated bytes (at most `limit`); None:
/// it cannot be read (another coding, not valid data of its own, or too long once inflated).
fn whole_observed(read: &Bytes, coding: Coding, limit: usize) -> Option<Observed> {
    match coding {
        Coding::Identity => Some(Observed::Whole(read.clone())),
        Coding::Other => None,
        _ => inflate::inflate_whole(read, coding, limit)
            .ok()
            .map(|text| Observed::Whole(Bytes::from(text))),
    }
}

impl Ticket {
    /// Counts its response as holding `size` bytes (`take_bytes`, within
    /// `model_max_held_response_bytes`); false: they are not held.
    fn hold_response(&mut self, size: usize) -> bool {
        let shared = &self.shared;
        let taken = take_bytes(
            &shared.held_responses,
            shared.max_held_responses,
            self.response_held,
            size,
        );
        if taken {
            self.response_held = self.response_held.max(size);
        }
        taken
    }

    fn end(&mut self, outcome: &'static str) {
        if self.ended {
            return;
        }
        self.ended = true;
        if self.notify {
            let body = self.observed.take().map(|observed| match observed {
                Observed::Passing(bytes) => bytes.freeze(),
                Observed::Whole(bytes) => bytes,
            });
            let seen = match (&body, self.api) {
                (Some(data), Some(api))
                    if (200..300).contains(&self.status) && is_stream(&self.content_type) =>
                {
                    observe::observe_stream(api, data).ok()
                }
                _ => None,
            };
            let mut unread = false;
            if self.api == Some(Api::Chat) && (200..300).contains(&self.status) {
                // the tool calls it handed over, before its client has its end: a request
                // that answers one is that call's run's, which Python decides
                let ids = match (&seen, &body) {
                    (Some(seen), _) => {
                        Some(seen.calls.iter().map(|call| call.call_id.clone()).collect())
                    }
                    (None, Some(data)) if !is_stream(&self.content_type) => {
                        admit::response_call_ids(data)
                    }
                    _ => None,
                };
                if let Some(admission) = self.shared.admission.lock().unwrap().as_mut() {
                    unread = ids.is_none();
                    admission.handed(ids);
                }
            }
            self.shared.push(Event::Done {
                id: self.id,
                status: self.status,
                outcome,
                body,
                content_type: std::mem::take(&mut self.content_type),
                seconds: self.started.elapsed().as_secs_f64(),
                changed: self.changed,
                seen,
                unread,
                held: self.holding,
            });
        }
    }

    /// The held answer has ended: Python is told (`Event::Done`, `held`) and asked for its
    /// word (`Relay.release`), awaited at most `decide_timeout`. None: not asked (the ticket
    /// had ended, or tells nothing).
    fn ask_release(&mut self) -> Option<Release> {
        if self.ended || !self.notify {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        self.shared.releases.lock().unwrap().insert(self.id, tx);
        self.holding = true;
        self.end("ok");
        Some(Box::pin(tokio::time::timeout(
            self.shared.decide_timeout,
            rx,
        )))
    }
}

/// Python's word on a held answer, awaited (`Ticket::ask_release`).
type Release = Pin<Box<tokio::time::Timeout<oneshot::Receiver<Option<Bytes>>>>>;

/// What a release says to send: the replacement, or (None, Python said nothing in time or
/// is gone) the held bytes.
fn released(
    word: Result<Result<Option<Bytes>, oneshot::error::RecvError>, tokio::time::error::Elapsed>,
) -> Option<Bytes> {
    word.ok().and_then(Result::ok).flatten()
}

/// An answer held until its end (`forward`'s `hold`: the run's final request), as the Python
/// relay holds it: the trim's bytes, up to `limit` (past it, what was held goes on and the
/// rest as it comes); at the upstream's end Python is asked for its word (`release`) and the
/// held bytes, or what replaces them, go, then what the trim held back of an event cut
/// short (`rest`).
struct Hold {
    held: BytesMut,
    limit: usize,
    release: Option<Release>,
    rest: Option<Bytes>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.end("cancelled");
        if self.watched {
            if let Some((_, watch)) = self.shared.watched.lock().unwrap().remove(&self.id) {
                watch.abort();
            }
        }
        self.shared.waiting.lock().unwrap().remove(&self.id);
        if self.holding {
            self.shared.releases.lock().unwrap().remove(&self.id);
        }
        self.shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.placed {
            self.shared.places.fetch_sub(1, Ordering::SeqCst);
        }
        *self.shared.held_bytes.lock().unwrap() -= self.held;
        *self.shared.held_responses.lock().unwrap() -= self.response_held;
    }
}

/// A response body: bytes of Python's (or read ahead), then the upstream's as they come
/// (observed on the way; with a bound on tool calls, trimmed event by event).
struct RelayBody {
    whole: Option<Bytes>,
    upstream: Option<reqwest::Body>,
    ticket: Option<Ticket>,
    trim: Option<StreamTrim>,
    watch: Option<LastEvent>,
    /// A gzip or deflate body, inflated to be read (observed, watched, trimmed): with a trim
    /// the client gets the trim's bytes, plain; else the upstream's, as they came.
    inflate: Option<Inflater>,
    /// The upstream failed once the answer had begun: after what was held, the answer is
    /// broken off (the connection closed mid-body), so the client sees it cut, not ended.
    failed: bool,
    /// The failure has waited one poll, for hyper to write what it holds first.
    paused: bool,
    /// The answer is held until it ends (the run's final request).
    hold: Option<Hold>,
}

impl RelayBody {
    /// The upstream has ended (or failed once the answer began: `cut`): what the trim held
    /// back of an event cut short goes as it came.
    fn ended(&mut self, outcome: &'static str) -> Option<Bytes> {
        self.upstream = None;
        let rest = self
            .trim
            .take()
            .map(|trim| trim.rest().to_vec())
            .unwrap_or_default();
        if let Some(ticket) = self.ticket.as_mut() {
            ticket.end(outcome);
        }
        (!rest.is_empty()).then(|| Bytes::from(rest))
    }

    /// The held answer's upstream has ended: Python is asked for its word (the relay goes on
    /// once it has it), or, when it cannot be asked, the held bytes go at once.
    fn end_held(&mut self) {
        if let (Some(ticket), Some(hold)) = (self.ticket.as_mut(), self.hold.as_ref()) {
            if ticket.observed.is_none() {
                // the answer outgrew what the observer copies, its trim's bytes did not (the
                // calls asked for again, left out): those are read in its place, as the Python
                // relay reads every event, so an answer left empty is still the stop note
                ticket.observed = Some(Observed::Passing(hold.held.clone()));
            }
        }
        let release = self.ticket.as_mut().and_then(Ticket::ask_release);
        let rest = self.ended("ok");
        match release {
            Some(release) => {
                if let Some(hold) = self.hold.as_mut() {
                    hold.release = Some(release);
                    hold.rest = rest;
                }
            }
            None => self.unhold(rest),
        }
    }

    /// The held answer goes as it is (a failure, or no word to wait for), then `rest`.
    fn unhold(&mut self, rest: Option<Bytes>) {
        let Some(hold) = self.hold.take() else {
            self.whole = rest;
            return;
        };
        let mut out = hold.held;
        if let Some(rest) = rest {
            out.extend_from_slice(&rest);
        }
        self.whole = (!out.is_empty()).then(|| out.freeze());
    }

    /// A piece of the body as the upstream meant it (inflated): observed, watched for its last
    /// event, trimmed; the trim's bytes for it (None: no trim, the bytes pass as they came).
    fn read(&mut self, piece: &[u8]) -> Result<Option<Vec<u8>>, trim::Unjudged> {
        if let Some(ticket) = self.ticket.as_mut() {
            let limit = ticket.shared.observe_limit;
            if let Some(Observed::Passing(seen)) = ticket.observed.as_mut() {
                if seen.len() + piece.len() <= limit {
                    seen.extend_from_slice(piece);
                } else {
                    ticket.observed = None; // too long to read: passes unobserved
                }
            }
        }
        if let Some(watch) = self.watch.as_mut() {
            let last = watch.feed(piece);
            if last != Some(false) {
                self.watch = None; // its last event (told), or unreadable
            }
            if let (Some(true), Some(ticket)) = (last, self.ticket.as_mut()) {
                if self.hold.is_none() {
                    ticket.end("ok"); // told before the client has it
                }
            }
        }
        let Some(trim) = self.trim.as_mut() else {
            return Ok(None);
        };
        let out = trim.feed(piece)?;
        if let Some(ticket) = self.ticket.as_mut() {
            ticket.changed |= trim.changed;
            if trim.finished && self.hold.is_none() {
                // the response's last event: told before the client has it, so a request it
                // sends at once comes after this end (the upstream is still read to its end,
                // for the connection's reuse)
                ticket.end("ok");
            }
        }
        Ok(Some(out))
    }

    /// Whether anything still reads the body's bytes: its trim, its last event's watch, the
    /// copy observed of it (each gone once its bound is passed, or the bytes are unreadable).
    fn read_on(&self) -> bool {
        self.trim.is_some()
            || self.watch.is_some()
            || self
                .ticket
                .as_ref()
                .is_some_and(|ticket| matches!(ticket.observed, Some(Observed::Passing(_))))
    }

    /// A frame of a compressed body, read in its inflated pieces (`read`); with a trim, the
    /// trim's bytes for them (at most the observe limit a frame: past that it is unjudged).
    /// Bytes not of their coding: a trim's answer is unjudged; else the body passes unread
    /// from there. Once nothing reads it (`read_on`: an event past its bound, a copy past the
    /// observe limit), it passes unread from there too, inflated no further: a bomb's
    /// gigabytes cost what its bounds read, as in the Python relay.
    fn read_inflated(&mut self, data: &[u8]) -> Result<Option<Vec<u8>>, trim::Unjudged> {
        let Some(mut inflater) = self.inflate.take() else {
            return self.read(data);
        };
        if !self.read_on() {
            return Ok(None);
        }
        inflater.push(data);
        let mut trimmed = self.trim.is_some().then(Vec::new);
        loop {
            match inflater.next() {
                Ok(Some(piece)) => {
                    let out = self.read(&piece)?;
                    if !self.read_on() {
                        return Ok(None); // (no trim) passed on unread, the inflater dropped
                    }
                    if let (Some(out), Some(into)) = (out, trimmed.as_mut()) {
                        into.extend_from_slice(&out);
                        if self
                            .ticket
                            .as_ref()
                            .is_some_and(|ticket| into.len() > ticket.shared.observe_limit)
                        {
                            return Err(trim::Unjudged);
                        }
                    }
                }
                Ok(None) => break,
                Err(BadCoding) => {
                    if self.trim.is_some() {
                        return Err(trim::Unjudged);
                    }
                    if let Some(ticket) = self.ticket.as_mut() {
                        ticket.observed = None;
                    }
                    self.watch = None;
                    return Ok(None);
                }
            }
        }
        self.inflate = Some(inflater);
        Ok(trimmed)
    }
}

impl Body for RelayBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        loop {
            if let Some(hold) = this.hold.as_mut() {
                if let Some(release) = hold.release.as_mut() {
                    let word = match release.as_mut().poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(word) => released(word),
                    };
                    let hold = this.hold.take().expect("held");
                    let mut out = match word {
                        Some(replaced) => BytesMut::from(&replaced[..]),
                        None => hold.held,
                    };
                    if let Some(rest) = hold.rest {
                        out.extend_from_slice(&rest);
                    }
                    this.whole = (!out.is_empty()).then(|| out.freeze());
                    continue;
                }
            }
            if let Some(bytes) = this.whole.take() {
                if this.upstream.is_none() {
                    if let Some(ticket) = this.ticket.as_mut() {
                        ticket.end("ok"); // the last bytes: told before the client has them
                    }
                }
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            let Some(upstream) = this.upstream.as_mut() else {
                if this.failed && !std::mem::replace(&mut this.paused, true) {
                    // hyper is let write the head and what it holds of the body first (it
                    // flushes when the body is pending; an error would drop them), so the
                    // client sees its answer cut short, not no answer
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                if std::mem::take(&mut this.failed) {
                    return Poll::Ready(Some(Err(std::io::Error::other("the upstream failed"))));
                }
                if let Some(ticket) = this.ticket.as_mut() {
                    ticket.end("ok");
                }
                return Poll::Ready(None);
            };
            match Pin::new(upstream).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers: none passed
                    };
                    let last = this.upstream.as_ref().is_some_and(Body::is_end_stream);
                    let mut out = data;
                    match this.read_inflated(&out) {
                        Ok(Some(bytes)) => out = Bytes::from(bytes),
                        Ok(None) => {}
                        Err(trim::Unjudged) => {
                            // JSON this cannot judge (or bytes not of their coding): the
                            // answer is broken off here (the client sees it cut short, not
                            // ended), no call in it passed unjudged
                            this.trim = None;
                            this.ended("cut");
                            this.unhold(None); // (what was held goes first)
                            this.failed = true;
                            continue;
                        }
                    }
                    if let Some(hold) = this.hold.as_mut() {
                        let size = hold.held.len() + out.len();
                        if size <= hold.limit
                            && this
                                .ticket
                                .as_mut()
                                .is_none_or(|ticket| ticket.hold_response(size))
                        {
                            hold.held.extend_from_slice(&out);
                            if last {
                                this.end_held();
                            }
                            continue;
                        }
                        // too long to hold (or past what the whole responses held may take):
                        // what was held goes on, and the rest as it comes
                        let mut joined = std::mem::take(&mut hold.held);
                        joined.extend_from_slice(&out);
                        out = joined.freeze();
                        this.hold = None;
                    }
                    if last {
                        // told before the client can have it all: a request it sends next
                        // comes after this end
                        if let Some(rest) = this.ended("ok") {
                            let mut joined = BytesMut::from(&out[..]);
                            joined.extend_from_slice(&rest);
                            out = joined.freeze();
                        }
                    }
                    if out.is_empty() {
                        continue; // an event left out: nothing to send yet
                    }
                    return Poll::Ready(Some(Ok(Frame::data(out))));
                }
                Poll::Ready(Some(Err(_))) => {
                    // an upstream that fails once the answer has begun breaks it off there
                    // (after what was held)
                    let rest = this.ended("cut");
                    this.unhold(rest);
                    this.failed = true;
                }
                Poll::Ready(None) => {
                    if this.hold.is_some() {
                        this.end_held();
                        continue;
                    }
                    this.whole = this.ended("ok");
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.whole.is_none() && self.upstream.is_none() && !self.failed && self.hold.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.whole, &self.upstream) {
            _ if self.hold.is_some() => SizeHint::default(),
            (_, Some(_)) if self.trim.is_some() => SizeHint::default(),
            (_, None) if self.failed => SizeHint::default(),
            (Some(bytes), None) => SizeHint::with_exact(bytes.len() as u64),
            (Some(bytes), Some(upstream)) => {
                let (upstream, mut hint) = (upstream.size_hint(), SizeHint::new());
                hint.set_lower(upstream.lower() + bytes.len() as u64);
                if let Some(upper) = upstream.upper() {
                    hint.set_upper(upper + bytes.len() as u64);
                }
                hint
            }
            (None, Some(upstream)) => upstream.size_hint(),
            (None, None) => SizeHint::with_exact(0),
        }
    }
}

fn header_map(headers: &Headers) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            map.append(name, value);
        }
    }
    map
}

fn answer(status: u16, headers: &Headers, body: Bytes, ticket: Ticket) -> Response<RelayBody> {
    let mut response = Response::new(RelayBody {
        whole: Some(body),
        upstream: None,
        ticket: Some(ticket),
        trim: None,
        watch: None,
        inflate: None,
        failed: false,
        paused: false,
        hold: None,
    });
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    *response.headers_mut() = header_map(headers);
    response
}

/// The header names a message's `Connection` header lists (hop-by-hop too), lowercase.
fn connection_named(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("connection")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| {
            value
                .split(',')
                .map(|part| part.trim().to_ascii_lowercase())
        })
        .collect()
}

/// The upstream's response headers that pass on: not hop-by-hop, nor any its Connection names.
fn passed_headers(upstream: &HeaderMap) -> HeaderMap {
    let named = connection_named(upstream);
    let mut out = HeaderMap::with_capacity(upstream.len());
    for (name, value) in upstream {
        let lower = name.as_str();
        if HOP_BY_HOP.contains(&lower) || named.iter().any(|n| n == lower) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// A request's body, read into one buffer (of its declared length, up to `RESERVED_AHEAD`:
/// past it, grown as it comes), counted in `held_bytes` as it comes (so a body declared large
/// and sent slowly holds what has come, not what it says); else why not (`too_large`,
/// `over_budget`, `unreadable`).
async fn read_body(
    shared: &Shared,
    ticket: &mut Ticket,
    declared: Option<u64>,
    incoming: &mut Incoming,
) -> Result<Bytes, &'static str> {
    let mut data = BytesMut::with_capacity(
        declared
            .map_or(0, |length| length as usize)
            .min(shared.max_body)
            .min(RESERVED_AHEAD),
    );
    // each window from its head must bring `window_least` bytes: a body that stalls or crawls
    // is 408 then, not at `model_body_timeout`
    let mut window_end = tokio::time::Instant::now() + shared.rate_window;
    let mut window_bytes = 0;
    loop {
        let frame = match tokio::time::timeout_at(window_end, incoming.frame()).await {
            Ok(Some(frame)) => Some(frame),
            Ok(None) => break,
            Err(_) => None, // the window ended with nothing more
        };
        window_bytes += frame
            .as_ref()
            .and_then(|frame| frame.as_ref().ok())
            .and_then(Frame::data_ref)
            .map_or(0, Bytes::len);
        if tokio::time::Instant::now() >= window_end {
            if window_bytes < shared.window_least {
                return Err("body_slow");
            }
            window_end = tokio::time::Instant::now() + shared.rate_window;
            window_bytes = 0;
        }
        let Some(frame) = frame else {
            continue;
        };
        let Ok(chunk) = frame.map_err(|_| "unreadable")?.into_data() else {
            continue;
        };
        if data.len() + chunk.len() > shared.max_body {
            return Err("too_large");
        }
        data.extend_from_slice(&chunk);
        if data.len() > ticket.held {
            if !shared.hold(ticket.held, data.len()) {
                return Err("over_budget");
            }
            ticket.held = data.len();
        }
    }
    Ok(data.freeze())
}

/// Reads a body to its end, dropping it (at most `most` bytes).
async fn drain(incoming: &mut Incoming, most: usize) {
    let mut seen = 0;
    while let Some(Ok(frame)) = incoming.frame().await {
        seen += frame.data_ref().map_or(0, Bytes::len);
        if seen > most {
            return;
        }
    }
}

async fn handle(
    shared: Arc<Shared>,
    client: Arc<Client>,
    request: Request<Incoming>,
) -> Result<Response<RelayBody>, Infallible> {
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    shared.in_flight.fetch_add(1, Ordering::SeqCst);
    let mut ticket = Ticket {
        shared: shared.clone(),
        id,
        notify: false,
        ended: false,
        started: Instant::now(),
        status: 0,
        content_type: String::new(),
        observed: None,
        changed: false,
        api: None,
        held: 0,
        watched: false,
        holding: false,
        placed: false,
        response_held: 0,
    };
    let (parts, incoming) = request.into_parts();
    let headers: Headers = parts
        .headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let declared = parts
        .headers
        .get("content-length")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    let mut refusal = "";
    let mut body = None;
    let waits = parts
        .headers
        .get(hyper::header::EXPECT)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if *shared.draining.borrow() {
        // stopping: its body read and dropped (briefly: the relay is on its way out), so its
        // client reads the 503 rather than a connection closed under it
        let mut incoming = incoming;
        let _ = tokio::time::timeout(
            shared.body_timeout.min(DRAIN_READ),
            drain(&mut incoming, shared.max_body),
        )
        .await;
        return Ok(stopping(&parts.uri, ticket));
    }
    // a place is taken once the body has been read (a body still coming holds none, so slow
    // clients cannot keep the others out); the bodies being read are bounded on their own,
    // and a client that waits for `100 Continue` is refused before it sends its body when
    // every place is taken now
    let reading = Reading(shared.clone());
    let readers = shared.reading.fetch_add(1, Ordering::SeqCst) + 1;
    let full = waits && shared.places.load(Ordering::SeqCst) >= shared.max_concurrent;
    // (a client that waits for `100 Continue` without the token: its 401 before its body,
    // which Python's door gives, as to one that sent it)
    let unauthorized = waits
        && shared
            .admission
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|admission| {
                admit::wrong_token(&admission.settings, &parts.uri.to_string(), &parts.headers)
            });
    if unauthorized {
        refusal = "unauthorized";
    } else if readers > shared.max_reading || full {
        refusal = if full { "overloaded" } else { "reading" };
        if !waits {
            // its body read and dropped first (at most `max_body`, within the time a body
            // has), as the Python relay does, so its client, still sending it, reads the
            // 503: a connection closed under it may lose it. (One that waits for `100
            // Continue` is refused before it sends it.)
            let mut incoming = incoming;
            let _ =
                tokio::time::timeout(shared.body_timeout, drain(&mut incoming, shared.max_body))
                    .await;
        }
    } else if parts.version == hyper::Version::HTTP_11
        && parts.headers.get_all(hyper::header::HOST).iter().count() != 1
    {
        refusal = "bad_host"; // RFC 9112 §3.2
    } else if declared.is_some_and(|length| length > shared.max_body as u64) {
        refusal = "too_large";
    } else {
        let mut incoming = incoming;
        // a client that waits for `100 Continue` is refused before it sends its body (hyper
        // says it only once the body is read): nothing of it to read and drop
        let before = waits && declared.is_some_and(|length| !shared.fits(length as usize));
        let read = async {
            if before {
                Err("over_budget")
            } else {
                read_body(&shared, &mut ticket, declared, &mut incoming).await
            }
        };
        let started = Instant::now();
        match tokio::time::timeout(shared.body_timeout, read).await {
            Ok(Ok(read)) => body = Some(read),
            Ok(Err(why)) => refusal = why,
            Err(_) => refusal = "body_late", // (its slot is freed with the answer)
        }
        if refusal == "over_budget" && !before {
            // the rest of its body read and dropped (within the time it had), so its client,
            // still sending it, reads the answer: a connection closed under it may lose it
            let left = shared.body_timeout.saturating_sub(started.elapsed());
            let _ = tokio::time::timeout(left, drain(&mut incoming, shared.max_body)).await;
        }
    }
    drop(reading);
    let mut in_flight = shared.places.load(Ordering::SeqCst) + 1;
    if refusal == "reading" {
        in_flight = readers; // (what its answer names)
    } else if refusal.is_empty() {
        in_flight = shared.places.fetch_add(1, Ordering::SeqCst) + 1;
        ticket.placed = true;
        if in_flight > shared.max_concurrent {
            refusal = "overloaded"; // (its body read: the connection stays open)
            body = None;
        }
    }
    let method = parts.method.as_str().to_owned();
    let target = parts.uri.to_string();
    let mut learn = None;
    let settings = shared
        .admission
        .lock()
        .unwrap()
        .as_ref()
        .map(|a| a.settings.clone());
    let first = match (&settings, &body) {
        (Some(settings), Some(body)) if refusal.is_empty() => {
            admit::read(settings, &method, &target, &parts.headers, body)
        }
        _ => None,
    };
    if let Some(digest) = first.as_ref().and_then(|first| first.continuing()) {
        booked(&shared, &digest).await;
    }
    let verdict = match first {
        Some(first) => shared
            .admission
            .lock()
            .unwrap()
            .as_mut()
            .map(|admission| admission.judge(first, &parts.headers)),
        None => {
            if let (true, Some(settings)) = (target.contains("/chat/completions"), &settings) {
                // (a request this cannot read may be of a conversation whose next request
                // Python said may go on: not before Python has read it. Of that conversation,
                // when this can tell which; else of any of its agent's)
                let agent = admit::agent_of(settings, &target, &parts.headers);
                let conversation = agent
                    .as_deref()
                    .zip(body.as_deref())
                    .and_then(|(agent, body)| admit::conversation_of(agent, &parts.headers, body));
                if let Some(admission) = shared.admission.lock().unwrap().as_mut() {
                    match conversation {
                        Some(digest) => admission.unread_conversation(&digest),
                        None => admission.unread(agent),
                    }
                }
            }
            None
        }
    };
    // (a countdown's note written into the body: if this cannot, the request is Python's)
    let sent = match (&verdict, &body) {
        (Some(Verdict::Admitted(admitted)), Some(body)) => match &admitted.note {
            None => Some(body.clone()),
            Some(note) => note::splice_read(body, note).map(Bytes::from), // (read: admit)
        },
        _ => None,
    };
    let verdict = match (verdict, &sent) {
        (Some(Verdict::Admitted(_)), None) => Some(Verdict::No),
        (verdict, _) => verdict,
    };
    let mut reply = match (verdict, body, sent) {
        (Some(Verdict::Admitted(admitted)), Some(body), Some(sent)) => {
            let keep = admitted.keep;
            let mut headers = headers;
            if let Some(named) = admitted.named {
                // (Python reads it as the header's)
                headers.push((admit::AGENT_HEADER.to_owned(), named));
            }
            shared.push(Event::Taken {
                id,
                method,
                target: admitted.target.to_owned(),
                headers,
                body: body.clone(),
                in_flight: in_flight - 1,
                keep,
                arrived: ticket.started,
                continued: admitted.continued,
                note: admitted.note.unwrap_or_default(),
            });
            Reply::Forward {
                method: "POST".to_owned(),
                url: admitted.url,
                headers: admitted.headers,
                body: sent,
                observe: true,
                notify: true,
                trim: usize::try_from(keep).ok().map(|keep| Trim {
                    api: admitted.api,
                    keep: Some(keep),
                    hide_usage: false,
                }),
                watch: (keep < 0).then_some(admitted.api),
                unasked: None,
                ahead: (admitted.api == Api::Chat).then_some(admitted.digest),
                hold: false,
                echo: None,
                answer: None,
                offered: Some(shared.answers().among(&admitted.offered)),
            }
        }
        (verdict, body, _) => {
            if let Some(Verdict::Learn(agent)) = verdict {
                learn = Some(agent);
            }
            let event = Event::Request {
                id,
                method,
                target,
                headers,
                body,
                refusal,
                in_flight: in_flight - 1,
                learn,
                arrived: ticket.started,
            };
            let Some(reply) = shared.ask(id, event).await else {
                return Ok(undecided(&parts.uri, ticket));
            };
            reply
        }
    };
    loop {
        match reply {
            Reply::Respond {
                status,
                headers,
                body,
            } => {
                return Ok(answer(status, &headers, body, ticket));
            }
            Reply::Forward {
                method,
                url,
                headers,
                body,
                observe,
                notify,
                mut trim,
                watch,
                unasked,
                ahead,
                hold,
                echo,
                answer,
                offered,
            } => {
                ticket.notify = notify;
                if notify && !ticket.watched {
                    // with the model from now: its client's end is told (Python's to judge)
                    if let Some(socket) = watch_socket(&client) {
                        let watch =
                            tokio::spawn(watch_client(shared.clone(), id, socket, client.clone()));
                        shared
                            .watched
                            .lock()
                            .unwrap()
                            .insert(id, (client.clone(), watch.abort_handle()));
                        ticket.watched = true;
                    }
                }
                if let Some(digest) = ahead {
                    // (its conversation's next request waits for the call's booking, which
                    // may say what it gets: from now, as its client may have the answer
                    // before the relay has seen its end)
                    if let Some(admission) = shared.admission.lock().unwrap().as_mut() {
                        admission.asked(digest);
                    }
                }
                ticket.started = Instant::now();
                let method =
                    reqwest::Method::from_bytes(method.as_bytes()).unwrap_or(reqwest::Method::POST);
                let client = &shared.client;
                let send = |body: Bytes| {
                    client
                        .request(method.clone(), &url)
                        .headers(header_map(&headers))
                        .body(body)
                        .send()
                };
                let mut sent = send(body).await;
                let mut read = None; // of an error's body, read to judge it
                let mut failed_body = None; // that read failed: the upstream had answered
                if let (Some(unasked), Ok(upstream)) = (unasked, sent.as_mut()) {
                    if matches!(upstream.status().as_u16(), 400 | 422) {
                        let coding = upstream
                            .headers()
                            .get("content-encoding")
                            .and_then(|value| value.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        match read_upto(upstream, MAX_REFUSAL_BYTES).await {
                            Ok((data, true)) if refuses_usage(&data, &coding) => {
                                // as its client sent it: its usage unasked
                                shared.usage_refused.store(true, Ordering::Relaxed);
                                trim = trim
                                    .map(|trim| Trim {
                                        hide_usage: false,
                                        ..trim
                                    })
                                    .filter(|trim| trim.keep.is_some() || echo.is_some());
                                sent = send(unasked).await;
                            }
                            Ok((data, _)) => read = Some(data),
                            Err(error) => failed_body = Some(body_failure(&error)),
                        }
                    }
                }
                let failure = match (sent, failed_body) {
                    (_, Some(failure)) => failure,
                    (Ok(upstream), None) => {
                        match relayed(
                            &shared,
                            upstream,
                            read,
                            ticket,
                            observe,
                            trim,
                            watch,
                            hold,
                            &echo,
                            answer.as_deref(),
                            offered.as_deref(),
                        )
                        .await
                        {
                            Ok(response) => return Ok(response),
                            Err((back, kind, detail)) => {
                                ticket = back;
                                (kind, detail)
                            }
                        }
                    }
                    (Err(error), None) => {
                        let kind = if error.is_timeout() {
                            "timeout"
                        } else {
                            "unreachable"
                        };
                        (kind, error_kind(&error))
                    }
                };
                ticket.notify = false;
                let (kind, detail) = failure;
                match shared.ask(id, Event::Failed { id, kind, detail }).await {
                    Some(next) => reply = next,
                    None => return Ok(undecided(&parts.uri, ticket)),
                }
            }
        }
    }
}

/// Until Python has said what the next request of the conversation `digest` gets, when it is
/// booking the call before it (at most `admit::WAIT_BOOKED`): that request is then judged on
/// what Python said, at once, rather than queued for Python behind that booking. Python is
/// told that the request waits (`Event::Awaited`), so it books that call before the others.
async fn booked(shared: &Shared, digest: &admit::Digest) {
    let deadline = tokio::time::Instant::now() + admit::WAIT_BOOKED;
    let mut told_python = false;
    loop {
        let told = shared.told.notified();
        tokio::pin!(told);
        told.as_mut().enable();
        let booking = shared
            .admission
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|admission| admission.booking(digest));
        if !booking {
            return;
        }
        if !told_python {
            shared.push(Event::Awaited { digest: *digest });
            told_python = true;
        }
        if tokio::time::timeout_at(deadline, told).await.is_err() {
            return;
        }
    }
}

type Failure = (Ticket, &'static str, String);

/// How long the body of a request that comes while the relay stops is read, to drop it.
/// The request bodies being read at once, per place (`max_concurrent`): past them, 503 with
/// `Retry-After` (as the Python relay's `READING_PER_PLACE`).
const READING_PER_PLACE: usize = 2;

/// A request body's buffer, reserved at its head (at most its declared length): past it, it
/// grows as the body comes (a body declared large and sent slowly reserves no more).
const RESERVED_AHEAD: usize = 1 << 20;

const DRAIN_READ: Duration = Duration::from_secs(1);
/// The time a new connection has to begin its first request (the Python relay's).
const FIRST_REQUEST: Duration = Duration::from_secs(10);

/// A body read whole that failed once the upstream had answered: its kind (`Event::Failed`).
fn body_failure(error: &reqwest::Error) -> (&'static str, String) {
    (
        if error.is_timeout() {
            "stalled"
        } else {
            "broken"
        },
        error_kind(error),
    )
}

/// The relay's own answer to a request Python gave no word on (it is closing, or did not
/// answer within `decide_timeout`): 503, to retry, in the API's error shape.
fn undecided(uri: &hyper::Uri, ticket: Ticket) -> Response<RelayBody> {
    const WHY: &str = "the model endpoint did not decide on this request in time, or is \
                       stopping: retry shortly";
    unavailable(uri, WHY, "undecided", ticket)
}

/// The relay's answer to a request that comes while it stops (`Relay.drain`): 503, to retry
/// (elsewhere, or here once it is back), and the connection closes after it.
fn stopping(uri: &hyper::Uri, ticket: Ticket) -> Response<RelayBody> {
    const WHY: &str = "the model endpoint is stopping: retry shortly";
    let mut response = unavailable(uri, WHY, "stopping", ticket);
    response
        .headers_mut()
        .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// 503 with `Retry-After: 1` in the API's error shape.
fn unavailable(uri: &hyper::Uri, why: &str, code: &str, ticket: Ticket) -> Response<RelayBody> {
    let body = if uri.path().trim_end_matches('/').ends_with("/v1/messages") {
        format!(
            r#"{{"type":"error","error":{{"type":"overloaded_error","message":"{why}","code":"{code}"}}}}"#
        )
    } else {
        format!(
            r#"{{"error":{{"message":"{why}","type":"api_error","param":null,"code":"{code}"}}}}"#
        )
    };
    answer(
        503,
        &vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("Retry-After".to_owned(), "1".to_owned()),
        ],
        Bytes::from(body),
        ticket,
    )
}

/// An upstream's error read whole to judge whether it refuses `stream_options` (`plans`).
const MAX_REFUSAL_BYTES: usize = 64 * 1024;

/// `streams.read_upto`: the first bytes of the body, up to `limit` and one more, and whether
/// they are all of it (the rest is still the response's).
async fn read_upto(
    upstream: &mut reqwest::Response,
    limit: usize,
) -> Result<(Bytes, bool), reqwest::Error> {
    // the length said, reserved at once: the buffer is not grown (and copied) as it fills
    let said = upstream
        .content_length()
        .map_or(0, |length| length.min(limit as u64 + 1));
    let mut read = BytesMut::with_capacity(said as usize);
    while read.len() <= limit {
        match upstream.chunk().await? {
            Some(chunk) => read.extend_from_slice(&chunk),
            None => return Ok((read.freeze(), true)),
        }
    }
    Ok((read.freeze(), false))
}

/// How much of a whole response `read_held` read.
#[derive(PartialEq)]
enum Read {
    /// All of it.
    Whole,
    /// Past the limit: the rest is still the response's.
    Long,
    /// Past what the whole responses held at once may take (`model_max_held_response_bytes`):
    /// the rest is still the response's, what was read is counted no further.
    Full,
}

/// `read_upto`, its bytes counted as they come in what `ticket`'s response holds
/// (`Ticket::hold_response`); its buffer reserves at most `RESERVED_AHEAD` of the length said.
async fn read_held(
    upstream: &mut reqwest::Response,
    ticket: &mut Ticket,
    limit: usize,
) -> Result<(Bytes, Read), reqwest::Error> {
    let said = upstream
        .content_length()
        .map_or(0, |length| length.min(limit as u64 + 1));
    let mut read = BytesMut::with_capacity((said as usize).min(RESERVED_AHEAD));
    while read.len() <= limit {
        match upstream.chunk().await? {
            Some(chunk) => {
                let full = !ticket.hold_response(read.len() + chunk.len());
                read.extend_from_slice(&chunk);
                if full {
                    return Ok((read.freeze(), Read::Full));
                }
            }
            None => return Ok((read.freeze(), Read::Whole)),
        }
    }
    Ok((read.freeze(), Read::Long))
}

/// `plans.refuses_usage`: whether an error read whole (in its `Content-Encoding`, at most
/// `MAX_REFUSAL_BYTES` once inflated) says the upstream refuses `stream_options`.
fn refuses_usage(body: &[u8], coding: &str) -> bool {
    use std::io::Read;
    let limit = MAX_REFUSAL_BYTES as u64 + 1;
    let inflate = |reader: &mut dyn Read| {
        let mut out = Vec::new();
        reader.take(limit).read_to_end(&mut out).ok().map(|_| out)
    };
    let text = match coding.trim().to_ascii_lowercase().as_str() {
        "" | "identity" => Some(body.to_vec()),
        "gzip" => inflate(&mut flate2::read::MultiGzDecoder::new(body)),
        _ => inflate(&mut flate2::read::ZlibDecoder::new(body))
            .or_else(|| inflate(&mut flate2::read::DeflateDecoder::new(body))),
    };
    text.is_some_and(|text| {
        text.len() <= MAX_REFUSAL_BYTES && memchr::memmem::find(&text, b"stream_options").is_some()
    })
}

/// The upstream's response, passed on as it comes; with a bound on tool calls (`trim`), a
/// successful one trimmed: a stream event by event, a whole one read (bounded) first; one too
/// long to read, or JSON it cannot judge, is an unreachable upstream's failure (never passed).
/// A successful gzip or deflate body is inflated to be read (bounded alike); what the relay
/// changes goes on plain, what it does not as it came. In a coding it cannot read, it passes
/// unread, or with a trim is not passed (a stream is broken off at once). With `hold` (and a
/// trim: the run's final request), a successful answer is held until it ends and Python has
/// said what goes (`Relay.release`): the held bytes, or what replaces them.
#[allow(clippy::too_many_arguments)]
async fn relayed(
    shared: &Shared,
    upstream: reqwest::Response,
    read: Option<Bytes>,
    mut ticket: Ticket,
    observe: bool,
    trim: Option<Trim>,
    watch: Option<Api>,
    hold: bool,
    echo: &Option<serde_json::Value>,
    answer: Option<&str>,
    offered: Option<&[String]>,
) -> Result<Response<RelayBody>, Failure> {
    // a body framed two ways (RFC 9112 §6.3: smuggling or splitting): refused, as aiohttp
    // refuses it, never passed on with a length its body does not have
    if upstream.headers().contains_key("transfer-encoding")
        && upstream.headers().contains_key("content-length")
    {
        return Err((
            ticket,
            "unreachable",
            "Transfer-Encoding and Content-Length both".to_owned(),
        ));
    }
    let status = upstream.status();
    ticket.status = status.as_u16();
    if observe {
        ticket.observed = Some(Observed::Passing(BytesMut::new()));
        ticket.api = trim.map(|trim| trim.api).or(watch);
    }
    let kind = upstream
        .headers()
        .get("content-type")
        .map(|kind| String::from_utf8_lossy(kind.as_bytes()).into_owned())
        .unwrap_or_default();
    let mime = kind
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    ticket.content_type = kind;
    let mut headers = passed_headers(upstream.headers());
    let stream = mime == "text/event-stream";
    let coding = if status.is_success() {
        Coding::of(upstream.headers())
    } else {
        Coding::Identity
    }; // (an error's body is not read)
       // (a whole response is trimmed only with a bound, or its echo set back: its usage
       // came unasked; what it passes must be read, so one it cannot read is not passed on)
    let trim = trim
        .filter(|trim| status.is_success() && (stream || trim.keep.is_some() || echo.is_some()));
    let mut body = RelayBody {
        whole: None,
        upstream: None,
        ticket: None,
        trim: None,
        watch: None,
        inflate: None,
        failed: false,
        paused: false,
        hold: None,
    };
    match trim {
        // a whole successful response observed: read first (bounded), as the aiohttp relay
        // reads it, so one that stalls or breaks off before its end is a 504 or 502, never a
        // short answer that ended; one too long to read passes on as it comes, unobserved
        None if observe && status.is_success() && !stream => {
            // (one past what the whole responses held may take: on as it comes, too)
            let limit = shared.observe_limit;
            let mut upstream = upstream;
            let (read, whole) = match read_held(&mut upstream, &mut ticket, limit).await {
                Ok((read, how)) => (read, how == Read::Whole),
                Err(error) => {
                    ticket.observed = None;
                    let (kind, detail) = body_failure(&error);
                    return Err((ticket, kind, detail));
                }
            };
            ticket.observed = if whole {
                whole_observed(&read, coding, limit)
            } else {
                None
            };
            body.whole = Some(read);
            if !whole {
                body.upstream = Some(upstream.into());
            }
        }
        None => {
            if status.is_success() && stream {
                body.watch = watch.map(LastEvent::new);
            }
            if coding.inflated() {
                body.inflate = Some(Inflater::new(coding));
            } else if coding == Coding::Other {
                ticket.observed = None; // passes unread
                body.watch = None;
            }
            body.whole = read; // (what was read of it already goes first)
            body.upstream = Some(upstream.into());
        }
        Some(trim) if stream => {
            headers.remove("content-length");
            headers.remove("content-encoding"); // (what it passes on is plain)
            if coding == Coding::Other {
                // no call in it passes unjudged: broken off at once
                ticket.observed = None;
                body.ticket = Some(ticket);
                body.ended("cut");
                body.failed = true;
                let mut response = Response::new(body);
                *response.status_mut() = status;
                *response.headers_mut() = headers;
                return Ok(response);
            }
            if coding.inflated() {
                body.inflate = Some(Inflater::new(coding));
            }
            let mut trim = StreamTrim::new(trim, shared.answers().offered(offered).with(answer));
            trim.echo = echo.clone();
            body.trim = Some(trim);
            body.upstream = Some(upstream.into());
            if hold {
                body.hold = Some(Hold {
                    held: BytesMut::new(),
                    limit: shared.observe_limit,
                    release: None,
                    rest: None,
                });
            }
        }
        Some(Trim { api, keep, .. }) => {
            let keep = keep.unwrap_or(usize::MAX); // (Some: filtered above)
            let limit = shared.observe_limit;
            let mut upstream = upstream;
            // too long to read: its calls cannot be judged, so it is not passed on
            let unjudged = |mut ticket: Ticket, why: &str| {
                ticket.observed = None;
                Err((ticket, "unjudged", why.to_owned()))
            };
            const LONG: &str = "too long to read";
            if upstream
                .content_length()
                .is_some_and(|length| length > limit as u64)
            {
                return unjudged(ticket, LONG);
            }
            let read = match read_held(&mut upstream, &mut ticket, limit).await {
                Ok((read, Read::Whole)) => read,
                Ok((_, Read::Long)) => return unjudged(ticket, LONG),
                Ok((_, Read::Full)) => {
                    // never passed unjudged, never held past the budget: 503, retried
                    ticket.observed = None;
                    return Err((ticket, "held_full", String::new()));
                }
                Err(error) => {
                    let (kind, detail) = body_failure(&error);
                    return Err((ticket, kind, detail));
                }
            };
            let text = if coding == Coding::Identity {
                read.clone()
            } else {
                match inflate::inflate_whole(&read, coding, limit) {
                    Ok(text) => Bytes::from(text),
                    Err(BadCoding) => {
                        return unjudged(
                            ticket,
                            "not of its Content-Encoding, \
                                                              or too long once inflated",
                        )
                    }
                }
            };
            if observe {
                ticket.observed = Some(Observed::Whole(text.clone())); // (held once)
            }
            let answers = shared.answers().offered(offered).with(answer);
            let mut out = match trim::trim_whole_echo(api, &text, keep, &answers, echo.as_ref()) {
                Ok(Some((changed, trimmed))) => {
                    ticket.changed = trimmed;
                    headers.remove("content-encoding"); // (what it passes on is plain)
                    Bytes::from(changed)
                }
                Ok(None) => read, // as it came
                Err(trim::Unjudged) => return unjudged(ticket, "JSON it cannot judge"),
            };
            if hold {
                if let Some(release) = ticket.ask_release() {
                    if let Some(replaced) = released(release.await) {
                        headers.remove("content-encoding"); // (what replaces it is plain)
                        out = replaced;
                    }
                }
            }
            headers.remove("content-length");
            body.whole = Some(out);
        }
    }
    body.ticket = Some(ticket);
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok(response)
}

/// The error's kind, never its text (which may name the URL or what the server said).
fn error_kind(error: &reqwest::Error) -> String {
    if error.is_connect() {
        "ConnectError"
    } else if error.is_timeout() {
        "Timeout"
    } else if error.is_request() {
        "RequestError"
    } else if error.is_body() || error.is_decode() {
        "BodyError"
    } else {
        "Error"
    }
    .to_owned()
}

/// The compiled relay: ``Relay(host, port, max_body, max_concurrent, connect_timeout,
/// read_timeout, observe_limit)`` listens at once; ``fd`` is readable when events are queued.
#[pyclass(module = "watchdog.shell.model._relay")]
struct Relay {
    shared: Arc<Shared>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    stop: Arc<Notify>,
    wake_reader: UnixStream,
    #[pyo3(get)]
    port: u16,
}

#[pymethods]
impl Relay {
    #[new]
    #[pyo3(signature = (host, port, max_body, max_concurrent, connect_timeout, read_timeout,
                        observe_limit, threads=2, answer_tools=vec![],
                        answer_tool_prefixes=vec![], body_timeout=60.0,
                        max_inflight=usize::MAX, body_min_rate=0, body_rate_window=60.0,
                        max_held_responses=usize::MAX))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        host: &str,
        port: u16,
        max_body: usize,
        max_concurrent: usize,
        connect_timeout: f64,
        read_timeout: f64,
        observe_limit: usize,
        threads: usize,
        answer_tools: Vec<String>,
        answer_tool_prefixes: Vec<String>,
        body_timeout: f64,
        max_inflight: usize,
        body_min_rate: usize,
        body_rate_window: f64,
        max_held_responses: usize,
    ) -> PyResult<Self> {
        let seconds = |value: f64, name: &str| {
            if value.is_finite() && value > 0.0 && value < 1e9 {
                Ok(Duration::from_secs_f64(value))
            } else {
                Err(PyValueError::new_err(format!(
                    "{name} must be a positive number"
                )))
            }
        };
        let body_timeout = seconds(body_timeout, "body_timeout")?;
        let rate_window = seconds(body_rate_window, "body_rate_window")?;
        let window_least = (body_min_rate as f64 * rate_window.as_secs_f64()) as usize;
        let read = seconds(read_timeout, "read_timeout")?;
        // Python's word comes at once: this bound is a backstop, never met by a busy loop
        let decide_timeout = seconds(connect_timeout, "connect_timeout")? + read;
        let builder = || -> PyResult<reqwest::ClientBuilder> {
            Ok(reqwest::Client::builder()
                .connect_timeout(seconds(connect_timeout, "connect_timeout")?)
                .redirect(reqwest::redirect::Policy::none())
                .pool_idle_timeout(Duration::from_secs(60))
                .pool_max_idle_per_host(max_concurrent)
                .tcp_nodelay(true)
                .http1_title_case_headers())
        };
        let failed =
            |error: reqwest::Error| PyOSError::new_err(format!("the relay's HTTP client: {error}"));
        // the upstream: `read` is the longest wait for its head, and between its body's bytes
        let client = builder()?.read_timeout(read).build().map_err(failed)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("watchdog-relay")
            .enable_all()
            .build()
            .map_err(|error| PyOSError::new_err(error.to_string()))?;
        let address: SocketAddr = format!("{host}:{port}")
            .parse()
            .or_else(|_| format!("[{host}]:{port}").parse())
            .map_err(|_| PyValueError::new_err(format!("not an IP address: {host}")))?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(address))
            .map_err(|error| {
                PyOSError::new_err((error.raw_os_error().unwrap_or(0), error.to_string()))
            })?;
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(port);
        let (wake_reader, wake) =
            UnixStream::pair().map_err(|error| PyOSError::new_err(error.to_string()))?;
        wake.set_nonblocking(true)
            .map_err(|error| PyOSError::new_err(error.to_string()))?;
        wake_reader
            .set_nonblocking(true)
            .map_err(|error| PyOSError::new_err(error.to_string()))?;
        let answers = OnceLock::new();
        if !answer_tools.is_empty() || !answer_tool_prefixes.is_empty() {
            let _ = answers.set(Answers {
                names: answer_tools,
                prefixes: answer_tool_prefixes,
            });
        }
        let shared = Arc::new(Shared {
            events: Mutex::new(Vec::new()),
            armed: AtomicBool::new(false),
            wake,
            waiting: Mutex::new(HashMap::new()),
            releases: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            in_flight: AtomicUsize::new(0),
            places: AtomicUsize::new(0),
            reading: AtomicUsize::new(0),
            max_body,
            max_concurrent,
            max_reading: max_concurrent.saturating_mul(READING_PER_PLACE),
            held_bytes: Mutex::new(0),
            max_inflight,
            observe_limit,
            body_timeout,
            window_least,
            rate_window,
            held_responses: Mutex::new(0),
            max_held_responses,
            decide_timeout,
            answers,
            admission: Mutex::new(None),
            told: Notify::new(),
            client,
            usage_refused: AtomicBool::new(false),
            watched: Mutex::new(HashMap::new()),
            draining: tokio::sync::watch::Sender::new(false),
        });
        let stop = Arc::new(Notify::new());
        runtime.spawn(serve(listener, shared.clone(), stop.clone()));
        Ok(Relay {
            shared,
            runtime: Mutex::new(Some(runtime)),
            stop,
            wake_reader,
            port,
        })
    }

    /// The file descriptor the event loop watches: readable when events are queued.
    #[getter]
    fn fd(&self) -> i32 {
        self.wake_reader.as_raw_fd()
    }

    /// The queued events, oldest first, as tuples:
    /// ``("request", id, method, target, headers, body, refusal, in_flight, learn, waited)``,
    /// ``("taken", id, method, target, headers, body, in_flight, keep, waited, continued,
    /// note)`` (``waited``: seconds since the request's head came; ``body`` as it came,
    /// ``note`` the one written into what went upstream, "" none),
    /// ``("failed", id, kind, detail)``,
    /// ``("done", id, status, outcome, body, content_type, seconds, changed, seen, unread)``:
    /// ``seen`` what a successful stream of a known API said, as ``Relay.observed`` gives it
    /// (None: read ``body``); ``unread``: a Chat Completions response whose tool calls could
    /// not be read here, to be told once booked (``sight``);
    /// ``("ended", id)``: the client of a request forwarded (and not yet done) ended its side
    /// of the connection (``let_go``);
    /// ``("awaited", 0, conversation)``: a request continuing the conversation (its digest's
    /// 24 hex digits) waits for the booking of the call before it (``admit_next``).
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut sink = [0u8; 256];
        while matches!((&self.wake_reader).read_some(&mut sink), Some(n) if n > 0) {}
        self.shared.armed.store(false, Ordering::SeqCst);
        let events = std::mem::take(&mut *self.shared.events.lock().unwrap());
        let bytes = |body: Option<Bytes>| body.map(|b| PyBytes::new(py, &b));
        events
            .into_iter()
            .map(|event| {
                Ok(match event {
                    Event::Request {
                        id,
                        method,
                        target,
                        headers,
                        body,
                        refusal,
                        in_flight,
                        learn,
                        arrived,
                    } => (
                        "request",
                        id,
                        method,
                        target,
                        headers,
                        bytes(body),
                        refusal,
                        in_flight,
                        learn,
                        arrived.elapsed().as_secs_f64(),
                    )
                        .into_pyobject(py)?
                        .into_any(),
                    Event::Taken {
                        id,
                        method,
                        target,
                        headers,
                        body,
                        in_flight,
                        keep,
                        arrived,
                        continued,
                        note,
                    } => (
                        "taken",
                        id,
                        method,
                        target,
                        headers,
                        PyBytes::new(py, &body),
                        in_flight,
                        keep,
                        arrived.elapsed().as_secs_f64(),
                        continued,
                        note,
                    )
                        .into_pyobject(py)?
                        .into_any(),
                    Event::Failed { id, kind, detail } => {
                        ("failed", id, kind, detail).into_pyobject(py)?.into_any()
                    }
                    Event::Done {
                        id,
                        status,
                        outcome,
                        body,
                        content_type,
                        seconds,
                        changed,
                        seen,
                        unread,
                        held,
                    } => (
                        "done",
                        id,
                        status,
                        outcome,
                        bytes(body),
                        content_type,
                        seconds,
                        changed,
                        seen.map(seen_tuple),
                        unread,
                        held,
                    )
                        .into_pyobject(py)?
                        .into_any(),
                    Event::Ended { id } => ("ended", id).into_pyobject(py)?.into_any(),
                    Event::Awaited { digest } => ("awaited", 0u64, admit::hex(&digest))
                        .into_pyobject(py)?
                        .into_any(),
                })
            })
            .collect()
    }

    /// Lets request ``id`` go: its client's connection is closed, which cancels the request
    /// (its upstream request dropped; its ``done`` event comes, ``cancelled``), as when a
    /// client goes away. Only a request whose client's end is watched (one with the model);
    /// False for another, or one gone.
    fn let_go(&self, id: u64) -> bool {
        match self.shared.watched.lock().unwrap().get(&id) {
            Some((client, _)) => {
                client.drop.notify_one();
                true
            }
            None => false,
        }
    }

    /// Answers request ``id`` with this status, headers and body.
    fn respond(&self, id: u64, status: u16, headers: Headers, body: &[u8]) -> bool {
        self.reply(
            id,
            Reply::Respond {
                status,
                headers,
                body: Bytes::copy_from_slice(body),
            },
        )
    }

    /// Sends request ``id`` on to ``url``; with ``observe`` the response's bytes come back in
    /// its ``done`` event, which comes with ``notify`` (or ``observe``); ``api`` (chat,
    /// responses, messages) and ``keep`` >= 0: a successful response hands the agent at most
    /// ``keep`` tool calls (final-answer ones aside, and ``answer_tool``'s: the request's own
    /// answer), trimmed as the Python relay trims (``offered``: the final-answer tools the
    /// request offers, a call of another is work; None: all of them); with
    /// ``keep`` < 0 and ``watch``, a successful stream passes as it comes and its end is told
    /// at its last event; with ``unasked`` (a Chat Completions stream asked for its usage on
    /// the client's behalf: the body without that) the stream passes event by event, its
    /// usage-only chunk left out, and an upstream that refuses ``stream_options`` (400 or 422
    /// naming it) is sent ``unasked`` instead. With ``hold`` (and ``observe`` and ``keep`` >=
    /// 0: a run's final request) a successful answer is held until it has ended (up to the
    /// observe limit: past it, it passes on as it comes), its ``done`` event then comes with
    /// ``held`` and the relay waits for ``release``.
    #[pyo3(signature = (id, method, url, headers, body, observe=false, notify=true,
                        api="", keep=-1, answer_tool=None, watch=false, unasked=None,
                        ahead=None, hold=false, echo=None, offered=None))]
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        id: u64,
        method: String,
        url: String,
        headers: Headers,
        body: PyBackedBytes,
        observe: bool,
        notify: bool,
        api: &str,
        keep: i64,
        answer_tool: Option<String>,
        watch: bool,
        unasked: Option<&[u8]>,
        ahead: Option<&str>,
        hold: bool,
        echo: Option<&str>,
        offered: Option<Vec<String>>,
    ) -> PyResult<bool> {
        if hold && (keep < 0 || !observe) {
            return Err(PyValueError::new_err(
                "a held answer is observed and bounded (keep >= 0)",
            ));
        }
        let ahead = ahead
            .map(|session| {
                admit::parse_digest(session).ok_or_else(|| {
                    PyValueError::new_err(format!("not a session digest: {session:?}"))
                })
            })
            .transpose()?;
        let hide_usage = unasked.is_some();
        let echo = echo
            .map(|text| {
                serde_json::from_str::<serde_json::Value>(text)
                    .map_err(|_| PyValueError::new_err("echo is not JSON"))
            })
            .transpose()?;
        let parsed = || {
            Api::parse(api)
                .ok_or_else(|| PyValueError::new_err(format!("not a model API: {api:?}")))
        };
        let trim = if keep < 0 && !hide_usage && echo.is_none() {
            None
        } else {
            Some(Trim {
                api: parsed()?,
                keep: (keep >= 0).then(|| usize::try_from(keep).unwrap_or(usize::MAX)),
                hide_usage,
            })
        };
        let watch = if keep < 0 && watch {
            Some(parsed()?)
        } else {
            None
        };
        Ok(self.reply(
            id,
            Reply::Forward {
                method,
                url,
                headers,
                // (Python's bytes, shared: not copied)
                body: Bytes::from_owner(body),
                observe,
                notify: notify || observe,
                trim,
                watch,
                unasked: unasked.map(Bytes::copy_from_slice),
                ahead,
                hold,
                echo,
                answer: answer_tool,
                offered,
            },
        ))
    }

    /// The held answer of request ``id`` (its ``done`` event came with ``held``) goes on:
    /// as it was held (``body`` None), or ``body`` in its place. False: it is gone (its client
    /// went away, or the relay stopped waiting).
    #[pyo3(signature = (id, body=None))]
    fn release(&self, id: u64, body: Option<&[u8]>) -> bool {
        match self.shared.releases.lock().unwrap().remove(&id) {
            Some(tx) => tx.send(body.map(Bytes::copy_from_slice)).is_ok(),
            None => false,
        }
    }

    /// The bytes the relay hands on for a response of ``api`` bounded to ``keep`` tool calls
    /// (None: no bound; ``hide_usage``: a stream's usage-only chunk left out): a stream's
    /// ``chunks`` as they come (``stream``), else a whole body; and whether it trimmed them
    /// (None: it stops there, JSON it cannot judge). For tests.
    #[staticmethod]
    #[pyo3(signature = (api, keep, chunks, stream, answer_tools=vec![],
                        answer_tool_prefixes=vec![], hide_usage=false))]
    #[allow(clippy::too_many_arguments)]
    fn trimmed<'py>(
        py: Python<'py>,
        api: &str,
        keep: Option<usize>,
        chunks: Vec<Vec<u8>>,
        stream: bool,
        answer_tools: Vec<String>,
        answer_tool_prefixes: Vec<String>,
        hide_usage: bool,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, bool)>> {
        let api = Api::parse(api)
            .ok_or_else(|| PyValueError::new_err(format!("not a model API: {api:?}")))?;
        let answers = Answers {
            names: answer_tools,
            prefixes: answer_tool_prefixes,
        };
        if !stream {
            let data = chunks.concat();
            let Some(keep) = keep else {
                return Ok(Some((PyBytes::new(py, &data), false)));
            };
            return Ok(match trim::trim_whole(api, &data, keep, &answers) {
                Ok(Some(out)) => Some((PyBytes::new(py, &out), true)),
                Ok(None) => Some((PyBytes::new(py, &data), false)),
                Err(trim::Unjudged) => None,
            });
        }
        let mut trim = StreamTrim::new(
            Trim {
                api,
                keep,
                hide_usage,
            },
            answers,
        );
        let mut out = Vec::new();
        for chunk in &chunks {
            match trim.feed(chunk) {
                Ok(bytes) => out.extend_from_slice(&bytes),
                Err(trim::Unjudged) => return Ok(None),
            }
        }
        out.extend_from_slice(trim.rest());
        Ok(Some((PyBytes::new(py, &out), trim.changed)))
    }

    /// ``body`` (a Chat Completions request's) with ``note`` written into its instructions
    /// where ``ChatWire.add_note`` puts it, every other byte as it came (module `note`); None
    /// when this cannot be sure to edit what Python reads (Python then writes the body anew).
    #[staticmethod]
    fn splice_note<'py>(py: Python<'py>, body: &[u8], note: &str) -> Option<Bound<'py, PyBytes>> {
        note::splice_note(body, note).map(|out| PyBytes::new(py, &out))
    }

    /// What a stream of ``api`` that ended with these bytes said, read as the relay reads it
    /// for a ``done`` event: (response_id, input_tokens, output_tokens, cache_read_tokens,
    /// cache_write_tokens, model, finish_reason, [(call_id, name, arguments)], text,
    /// complete); None: Python reads it. For tests.
    #[staticmethod]
    fn observed(api: &str, data: &[u8]) -> PyResult<Option<SeenTuple>> {
        let api = Api::parse(api)
            .ok_or_else(|| PyValueError::new_err(format!("not a model API: {api:?}")))?;
        Ok(observe::observe_stream(api, data).ok().map(seen_tuple))
    }

    /// Sends a new conversation's first request on before Python has read it, once Python has
    /// said what a new run of its agent gets (module `admit`): ``openai``, ``anthropic``: the
    /// upstreams' base URLs; ``agent``: the agent of a request that names none; ``token``:
    /// (header, value) the endpoint requires, if any.
    #[pyo3(signature = (openai, anthropic, agent, token=None))]
    fn admission(
        &self,
        openai: String,
        anthropic: String,
        agent: String,
        token: Option<(String, String)>,
    ) {
        let token = token.map(|(name, value)| (name.to_ascii_lowercase(), value));
        *self.shared.admission.lock().unwrap() = Some(Admission::new(Settings {
            openai,
            anthropic,
            default_agent: agent,
            token,
        }));
    }

    /// A new run of ``agent`` gets the bound ``keep`` (-1: none) and nothing else but, with
    /// ``note``, that note (its rule pack's countdown, started at a new run) when it offers
    /// tools: its new conversations' first requests go on at once (with a note: those of Chat
    /// Completions that offer tools, the note written into them as ``splice_note`` writes it).
    #[pyo3(signature = (agent, keep, note=None))]
    fn admit_agent(&self, agent: String, keep: i64, note: Option<String>) {
        if let Some(admission) = self.shared.admission.lock().unwrap().as_mut() {
            admission.learn(agent, keep, note);
        }
    }

    /// The next request of the conversation ``session`` (its 24 hex digits) of ``agent`` goes
    /// on at once with the bound ``keep`` (-1: none) if it comes within ``seconds`` and, with
    /// ``calls`` (the tool calls the call booked handed over: id and tool name), carries just
    /// their results, none a failure, none with a hash in ``seen`` (the run's results so far)
    /// or another's; without, if it is longer than ``messages`` and answers no tool call
    /// handed over (module `admit`); once.
    /// With ``note``, such a request that offers tools gets that note too, written into its
    /// instructions (``splice_note``): the countdown.
    #[pyo3(signature = (session, keep, messages, agent, seconds=60.0, calls=None, seen=None,
                        note=None))]
    #[allow(clippy::too_many_arguments)]
    fn admit_next(
        &self,
        session: &str,
        keep: i64,
        messages: usize,
        agent: String,
        seconds: f64,
        calls: Option<Vec<(String, String)>>,
        seen: Option<Vec<i64>>,
        note: Option<String>,
    ) -> PyResult<()> {
        let digest = admit::parse_digest(session)
            .ok_or_else(|| PyValueError::new_err(format!("not a session digest: {session:?}")))?;
        let hold = std::time::Duration::try_from_secs_f64(seconds)
            .map_err(|_| PyValueError::new_err(format!("not a number of seconds: {seconds}")))?;
        let expect = calls.map(|calls| admit::Expect {
            calls,
            seen: seen.unwrap_or_default().into_iter().collect(),
        });
        if let Some(admission) = self.shared.admission.lock().unwrap().as_mut() {
            admission.admit_next(digest, keep, note, messages, agent, hold, expect);
        }
        self.shared.told.notify_waiters();
        Ok(())
    }

    /// Forgets what the next request of ``session`` (of every conversation, for None) gets.
    /// ``booked``: the call its next request waits for is booked and this is Python's word on
    /// it (that request waits no more); else Python takes back what it said, and a call of
    /// the conversation in flight still holds its next request until it is booked.
    #[pyo3(signature = (session=None, booked=false))]
    fn admit_next_clear(&self, session: Option<&str>, booked: bool) -> PyResult<()> {
        let digest = match session {
            Some(session) => Some(admit::parse_digest(session).ok_or_else(|| {
                PyValueError::new_err(format!("not a session digest: {session:?}"))
            })?),
            None => None,
        };
        if let Some(admission) = self.shared.admission.lock().unwrap().as_mut() {
            admission.next_clear(digest, booked);
        }
        self.shared.told.notify_waiters();
        Ok(())
    }

    /// False while a response whose tool calls could not be read here is still to be told
    /// (``sight``): meanwhile every continuing request waits for Python.
    #[getter]
    fn sighted(&self) -> bool {
        self.shared
            .admission
            .lock()
            .unwrap()
            .as_ref()
            .is_none_or(|admission| admission.sighted())
    }

    /// A response whose ``done`` event said ``unread``, booked: the tool-call ids Python read
    /// it as handing over (those it remembers; none if it read none). Once every such response
    /// is told, continuing requests go on ahead again.
    fn sight(&self, ids: Vec<String>) {
        if let Some(admission) = self.shared.admission.lock().unwrap().as_mut() {
            admission.sight(ids);
        }
    }

    /// The final-answer tools, never trimmed (the first value set holds: they are the
    /// conventions', which do not change while the process runs).
    fn answer_tools(&self, names: Vec<String>, prefixes: Vec<String>) {
        let _ = self.shared.answers.set(Answers { names, prefixes });
    }

    /// Forgets what new runs get (the rules or the fleet changed): Python decides again.
    fn admit_clear(&self) {
        if let Some(admission) = self.shared.admission.lock().unwrap().as_mut() {
            admission.clear();
        }
    }

    /// Conversations (sessions' 24 hex digits) that are not new; False once the relay
    /// remembers as many as it can (from then on every request waits for Python).
    fn known(&self, sessions: Vec<String>) -> PyResult<bool> {
        let mut guard = self.shared.admission.lock().unwrap();
        let Some(admission) = guard.as_mut() else {
            return Ok(true);
        };
        for session in sessions {
            let digest = admit::parse_digest(&session).ok_or_else(|| {
                PyValueError::new_err(format!("not a session digest: {session:?}"))
            })?;
            if !admission.know(digest) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The session digest (24 hex digits) of a request the relay reads as a new
    /// conversation's first, or None. For tests.
    #[staticmethod]
    #[pyo3(signature = (method, target, headers, body, agent="", token=None))]
    fn first_digest(
        method: &str,
        target: &str,
        headers: Headers,
        body: &[u8],
        agent: &str,
        token: Option<(String, String)>,
    ) -> Option<String> {
        let settings = Settings {
            openai: String::new(),
            anthropic: String::new(),
            default_agent: agent.to_owned(),
            token,
        };
        admit::read(&settings, method, target, &header_map(&headers), body).map(|first| first.hex())
    }

    /// What the relay reads in a tool result's text: whether Python's ``looks_failed`` says it
    /// is a failed tool's (None: not sure), and ``stable_hash`` of it. For tests.
    #[staticmethod]
    fn read_result(text: &str) -> (Option<bool>, i64) {
        (failed::looks_failed(text), failed::stable_hash(text))
    }

    /// Whether the upstream refused a request's ``stream_options`` (that request was sent
    /// again without it).
    #[getter]
    fn usage_refused(&self) -> bool {
        self.shared.usage_refused.load(Ordering::Relaxed)
    }

    /// Whether any event is queued and not yet taken (`take`).
    #[getter]
    fn queued(&self) -> bool {
        !self.shared.events.lock().unwrap().is_empty()
    }

    /// Requests queued for Python's decision and not yet taken (`take`).
    #[getter]
    fn queued_requests(&self) -> usize {
        self.shared
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|event| matches!(event, Event::Request { .. }))
            .count()
    }

    /// The conversations (their digests' 24 hex digits) of the continuing requests that wait
    /// for their call's booking, told to Python and not yet taken (`Event::Awaited`): Python
    /// looks between the events it takes, to book those calls before going on.
    #[getter]
    fn awaited(&self) -> Vec<String> {
        self.shared
            .events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|event| match event {
                Event::Awaited { digest } => Some(admit::hex(digest)),
                _ => None,
            })
            .collect()
    }

    /// Requests being served now.
    #[getter]
    fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// The bytes of whole responses the requests in flight hold before they are answered
    /// (`model_max_held_response_bytes`).
    #[getter]
    fn held_response_bytes(&self) -> usize {
        *self.shared.held_responses.lock().unwrap()
    }

    /// The bytes of request bodies the requests in flight hold (`model_max_inflight_bytes`).
    #[getter]
    fn held_bytes(&self) -> usize {
        *self.shared.held_bytes.lock().unwrap()
    }

    /// Starts stopping: the listener is closed, a request that comes on a connection already
    /// open gets 503 with `Retry-After` (and the connection closes), and each connection
    /// closes once its request in flight is answered; those go on as before (`in_flight`
    /// tells how many are left), until `close`.
    fn drain(&self) {
        self.shared.draining.send_replace(true);
    }

    /// Stops listening and ends the relay's threads (requests in flight are cut).
    fn close(&self, py: Python<'_>) {
        self.stop.notify_one();
        let runtime = self.runtime.lock().unwrap().take();
        if let Some(runtime) = runtime {
            py.detach(|| runtime.shutdown_timeout(Duration::from_secs(1)));
        }
        self.shared.waiting.lock().unwrap().clear();
        self.shared.releases.lock().unwrap().clear();
    }
}

impl Relay {
    fn reply(&self, id: u64, reply: Reply) -> bool {
        match self.shared.waiting.lock().unwrap().remove(&id) {
            Some(tx) => tx.send(reply).is_ok(),
            None => false, // the client went away meanwhile
        }
    }
}

trait ReadSome {
    fn read_some(self, buffer: &mut [u8]) -> Option<usize>;
}

impl ReadSome for &UnixStream {
    fn read_some(self, buffer: &mut [u8]) -> Option<usize> {
        std::io::Read::read(&mut { self }, buffer).ok()
    }
}

async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>, stop: Arc<Notify>) {
    let mut draining = shared.draining.subscribe();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.notified() => return,
            _ = draining.wait_for(|draining| *draining) => return, // (the listener closes)
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await; // out of descriptors: a pause
            continue;
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            // a connection that sends nothing is closed within the Python relay's bound
            // (`connections.FIRST_REQUEST_TIMEOUT`), or as an idle one is (below) if sooner
            let first = tokio::time::timeout(
                shared.body_timeout.min(FIRST_REQUEST),
                prior_knowledge(&stream),
            );
            let Ok(http2) = first.await else { return };
            if http2 {
                refuse_http2(stream).await;
                return;
            }
            // a request's head, as its body, arrives within model_body_timeout (and a
            // keep-alive connection idle that long is closed: aiohttp's closes at 75 s)
            let head_timeout = shared.body_timeout;
            let client = Arc::new(Client {
                fd: stream.as_raw_fd(),
                drop: Notify::new(),
            });
            let dropped = client.clone();
            let shared_of_connection = shared.clone();
            let service =
                service_fn(move |request| handle(shared.clone(), client.clone(), request));
            // a client may end its side once its request is sent (RFC 9112 §9.6): its answer
            // still goes to it (a client that closed is told apart when its answer is written;
            // its end is told to Python while its request is with the model: `watch_client`)
            let connection = http1::Builder::new()
                .keep_alive(true)
                .title_case_headers(true)
                .half_close(true)
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(head_timeout)
                .serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            let mut draining = shared_of_connection.draining.subscribe();
            tokio::select! {
                _ = connection.as_mut() => return,
                () = dropped.drop.notified() => return, // let go: the connection closes
                _ = draining.wait_for(|draining| *draining) => {}
            }
            // stopping: an idle connection closes now, a busy one once its answer is written
            connection.as_mut().graceful_shutdown();
            tokio::select! {
                _ = connection => {}
                () = dropped.drop.notified() => {}
            }
        });
    }
}

/// HTTP/2's connection preface: a client that starts with it (prior knowledge) is told in its
/// own protocol that this endpoint speaks HTTP/1.1 (`watchdog/shell/model/http1.py`: the same
/// bytes).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const H2_WHY: &[u8] =
    b"this endpoint speaks HTTP/1.1: send the request without HTTP/2 prior knowledge";

/// Whether the connection's first bytes are (the start of) HTTP/2's preface.
async fn prior_knowledge(stream: &tokio::net::TcpStream) -> bool {
    let mut head = [0u8; 24];
    match stream.peek(&mut head).await {
        Ok(read) if read >= 4 => head[..read] == H2_PREFACE[..read],
        _ => false,
    }
}

/// SETTINGS, then GOAWAY with HTTP_1_1_REQUIRED and why (RFC 9113 §3.4, §7); what the client
/// still sends is read and dropped until it closes, or for a second at most.
async fn refuse_http2(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut refusal = vec![0, 0, 0, 4, 0, 0, 0, 0, 0];
    let length = (8 + H2_WHY.len()) as u32;
    refusal.extend_from_slice(&length.to_be_bytes()[1..]);
    // GOAWAY: its type and flags, stream 0; last stream 0, error HTTP_1_1_REQUIRED
    refusal.extend_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xd]);
    refusal.extend_from_slice(H2_WHY);
    if stream.write_all(&refusal).await.is_ok() && stream.shutdown().await.is_ok() {
        let mut sink = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while matches!(stream.read(&mut sink).await, Ok(read) if read > 0) {}
        })
        .await;
    }
}

#[pymodule]
fn _relay(module: &Bound<'_, PyModule>) -> PyResult<()> {
    // (the interpreter's own limit: a body Python refuses is never read here)
    let digits = module
        .py()
        .import("sys")?
        .getattr("get_int_max_str_digits")?
        .call0()?;
    observe::set_int_max_str_digits(digits.extract()?);
    module.add_class::<Relay>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_takes_one_holder_alone_whatever_its_size_and_others_within_it() {
        let total = Mutex::new(0);
        assert!(take_bytes(&total, 10, 0, 25)); // alone: taken past the budget
        assert!(!take_bytes(&total, 10, 0, 1)); // another, with 25 held: refused
        assert_eq!(*total.lock().unwrap(), 25);
        assert!(take_bytes(&total, 10, 25, 30)); // the one holding it all grows on
        *total.lock().unwrap() -= 30;
        assert!(take_bytes(&total, 10, 0, 6));
        assert!(take_bytes(&total, 10, 0, 4)); // 10: within it
        assert!(!take_bytes(&total, 10, 6, 7)); // one more byte of the first: past it
        assert!(take_bytes(&total, 10, 6, 6)); // no more than it held: nothing to take
        assert_eq!(*total.lock().unwrap(), 10);
    }

    #[test]
    fn a_whole_plain_response_is_held_once() {
        // what the observer holds of a plain whole response is the client's bytes, not a copy
        let read = Bytes::from(vec![b'x'; 1 << 20]);
        let Some(Observed::Whole(seen)) = whole_observed(&read, Coding::Identity, 1 << 21) else {
            panic!("a plain whole response is observed")
        };
        assert_eq!(seen.as_ptr(), read.as_ptr());
        assert_eq!(seen.len(), read.len());
        assert!(whole_observed(&read, Coding::Other, 1 << 21).is_none());
        assert!(whole_observed(&read, Coding::Gzip, 1 << 21).is_none()); // not gzip data
    }

    /// A stream's body as the relay reads it when nothing bounds its tool calls: its last
    /// event watched, gzip inflated to be read.
    fn watched_gzip_stream() -> RelayBody {
        RelayBody {
            whole: None,
            upstream: None,
            ticket: None,
            trim: None,
            watch: Some(LastEvent::new(trim::Api::Chat)),
            inflate: Some(Inflater::new(Coding::Gzip)),
            failed: false,
            paused: false,
            hold: None,
        }
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gzip.write_all(data).unwrap();
        gzip.finish().unwrap()
    }

    #[test]
    fn a_compressed_stream_bomb_passed_on_is_inflated_no_further_than_its_event_bound() {
        // one event of zeros that never ends, a gzip member a MiB: past the event bound
        // (4 MiB) nothing reads it, so what comes after passes on unread, not inflated (a
        // 16 GiB bomb cost seconds of a core)
        let member = gzip(&vec![0u8; 1 << 20]);
        let mut body = watched_gzip_stream();
        let mut read = 0;
        while body.inflate.is_some() && read < 64 {
            assert!(matches!(body.read_inflated(&member), Ok(None))); // passed on as it came
            read += 1;
        }
        assert!(body.watch.is_none(), "the event outgrew its bound");
        assert_eq!(
            read,
            trim::MAX_SSE_EVENT_BYTES / (1 << 20) + 1,
            "inflated no further"
        );
        assert!(matches!(body.read_inflated(&member), Ok(None)));
        assert!(body.inflate.is_none());
    }

    #[test]
    fn a_compressed_stream_is_inflated_while_its_last_event_is_watched() {
        // a long stream of readable events goes on being inflated until its last one
        let mut body = watched_gzip_stream();
        let events = b"data: {\"choices\":[]}\n\n".repeat(1 << 16);
        for _ in 0..8 {
            assert!(matches!(body.read_inflated(&gzip(&events)), Ok(None)));
            assert!(body.inflate.is_some() && body.watch.is_some());
        }
        assert!(matches!(
            body.read_inflated(&gzip(b"data: [DONE]\n\n")),
            Ok(None)
        ));
        assert!(body.watch.is_none(), "its last event told");
    }

    #[test]
    fn a_whole_compressed_response_is_observed_inflated() {
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(b"{\"id\":\"r1\"}").unwrap();
        let read = Bytes::from(gzip.finish().unwrap());
        let Some(Observed::Whole(seen)) = whole_observed(&read, Coding::Gzip, 1 << 20) else {
            panic!("a gzip whole response is observed")
        };
        assert_eq!(&seen[..], b"{\"id\":\"r1\"}");
    }
}
