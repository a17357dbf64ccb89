//! OTLP trace export requests (protobuf) decoded without copying: every string and bytes
//! field is a [`Slice`] of the body, validated once (UTF-8 where the field is a `string`).
//!
//! What is accepted and what is refused is upb's (the Python reference path, protobuf's upb
//! backend), so both paths answer a request alike:
//! - a known field on an unexpected wire type is an unknown field, skipped;
//! - unknown fields are skipped, groups included (to their matching end);
//! - a message field seen twice is merged, a scalar's last value wins, a oneof's last member
//!   wins (a message member merged into the same member);
//! - at most [`MAX_DEPTH`] nested messages, else [`Error::TooDeep`] (groups count, and a
//!   group too deep is [`Error::Malformed`]);
//! - a tag is a varint of at most 5 bytes (32 bits) and names field 1 or more; a value varint
//!   is at most 10 bytes; a length is at most 5 bytes and below 2^31; anything else, a
//!   truncated field, wire type 6 or 7, or an end-group tag outside its group is
//!   [`Error::Malformed`].
//!
//! The message types mirror `opentelemetry/proto/{collector/trace,trace,common,resource}/v1`
//! (field numbers in the comments), as `opentelemetry-proto`'s Python descriptors hold them.

/// The nesting of messages upb allows (protobuf's Python default recursion limit).
pub const MAX_DEPTH: u32 = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    Malformed,
    BadUtf8,
    TooDeep,
}

impl Error {
    /// upb's words for the failure (what protobuf's Python `DecodeError` says after the type).
    pub fn message(self) -> &'static str {
        match self {
            Error::Malformed => "Wire format was corrupt",
            Error::BadUtf8 => "String field had bad UTF-8",
            Error::TooDeep => "Exceeded upb_DecodeOptions_MaxDepth",
        }
    }
}

type Result<T> = std::result::Result<T, Error>;

/// A field's bytes in the body: `body[start..end]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slice {
    pub start: u32,
    pub end: u32,
}

impl Slice {
    pub fn of(self, body: &[u8]) -> &[u8] {
        &body[self.start as usize..self.end as usize]
    }

    /// A `string` field's text (validated when it was decoded).
    pub fn text(self, body: &[u8]) -> &str {
        std::str::from_utf8(self.of(body)).unwrap_or("")
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

/// Whether `bytes` are UTF-8: every byte of a string field is checked, and most are ASCII,
/// which `is_ascii` tells a word at a time (`from_utf8` checks the rest).
fn utf8(bytes: &[u8]) -> bool {
    bytes.is_ascii() || std::str::from_utf8(bytes).is_ok()
}

#[derive(Debug, Default, PartialEq)]
pub struct Request {
    pub resource_spans: Vec<ResourceSpans>, // 1
}

#[derive(Debug, Default, PartialEq)]
pub struct ResourceSpans {
    pub resource: Resource,           // 1
    pub scope_spans: Vec<ScopeSpans>, // 2
    pub schema_url: Slice,            // 3
}

#[derive(Debug, Default, PartialEq)]
pub struct Resource {
    pub attributes: Vec<KeyValue>, // 1
    pub dropped_attributes_count: u32, // 2
                                   // 3 entity_refs: validated, not kept
}

#[derive(Debug, Default, PartialEq)]
pub struct ScopeSpans {
    pub scope: Scope,      // 1
    pub spans: Vec<Span>,  // 2
    pub schema_url: Slice, // 3
}

#[derive(Debug, Default, PartialEq)]
pub struct Scope {
    pub name: Slice,                   // 1
    pub version: Slice,                // 2
    pub attributes: Vec<KeyValue>,     // 3
    pub dropped_attributes_count: u32, // 4
}

#[derive(Debug, Default, PartialEq)]
pub struct Span {
    pub trace_id: Slice,               // 1
    pub span_id: Slice,                // 2
    pub trace_state: Slice,            // 3
    pub parent_span_id: Slice,         // 4
    pub flags: u32,                    // 16
    pub name: Slice,                   // 5
    pub kind: i32,                     // 6
    pub start_time_unix_nano: u64,     // 7
    pub end_time_unix_nano: u64,       // 8
    pub attributes: Vec<KeyValue>,     // 9
    pub dropped_attributes_count: u32, // 10
    pub events: Vec<Event>,            // 11
    pub dropped_events_count: u32,     // 12
    pub links: Vec<Link>,              // 13
    pub dropped_links_count: u32,      // 14
    pub status: Status,                // 15
    /// the span's own encoding (one element of a repeated field: never merged)
    pub raw: Slice,
}

#[derive(Debug, Default, PartialEq)]
pub struct Status {
    pub message: Slice, // 2
    pub code: i32,      // 3
}

#[derive(Debug, Default, PartialEq)]
pub struct Event {
    pub time_unix_nano: u64,           // 1
    pub name: Slice,                   // 2
    pub attributes: Vec<KeyValue>,     // 3
    pub dropped_attributes_count: u32, // 4
}

#[derive(Debug, Default, PartialEq)]
pub struct Link {
    pub trace_id: Slice,               // 1
    pub span_id: Slice,                // 2
    pub trace_state: Slice,            // 3
    pub attributes: Vec<KeyValue>,     // 4
    pub dropped_attributes_count: u32, // 5
    pub flags: u32,                    // 6
}

#[derive(Debug, Default, PartialEq)]
pub struct KeyValue {
    pub key: Slice,        // 1
    pub value: AnyValue,   // 2
    pub key_strindex: i32, // 3
}

/// The `value` oneof; `Unset` when no member is (an absent `value` reads the same).
#[derive(Debug, Default, PartialEq)]
pub enum AnyValue {
    #[default]
    Unset,
    String(Slice),         // 1
    Bool(bool),            // 2
    Int(i64),              // 3
    Double(f64),           // 4
    Array(Vec<AnyValue>),  // 5 ArrayValue.values (1)
    KvList(Vec<KeyValue>), // 6 KeyValueList.values (1)
    Bytes(Slice),          // 7
    StringIndex(i32),      // 8
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
const FIXED32: u8 = 5;

/// Decode an `ExportTraceServiceRequest`.
pub fn decode(body: &[u8]) -> Result<Request> {
    if body.len() > i32::MAX as usize {
        return Err(Error::Malformed);
    }
    let mut reader = Reader { body, pos: 0 };
    let mut request = Request::default();
    reader.message(body.len(), MAX_DEPTH, |r, field, wire, end, depth| {
        if field == 1 && wire == LEN {
            let (_, stop) = r.sub(end, depth)?;
            let mut item = ResourceSpans::default();
            r.resource_spans(&mut item, stop, depth - 1)?;
            request.resource_spans.push(item);
            return Ok(true);
        }
        Ok(false)
    })?;
    Ok(request)
}

struct Reader<'a> {
    body: &'a [u8],
    pos: usize,
}

/// What one message's fields are read with: `Ok(false)` leaves the field to be skipped.
type Fields<'f, 'a> = dyn FnMut(&mut Reader<'a>, u32, u8, usize, u32) -> Result<bool> + 'f;

impl<'a> Reader<'a> {
    /// (Fields are read to the body's end, not their message's: a field that runs past its
    /// message is refused once read, as upb does; see [`Reader::fields`].)
    fn byte(&mut self, _end: usize) -> Result<u8> {
        if self.pos >= self.body.len() {
            return Err(Error::Malformed);
        }
        let byte = self.body[self.pos];
        self.pos += 1;
        Ok(byte)
    }

    /// A varint of at most `max` bytes, modulo 2^64.
    fn varint_of(&mut self, end: usize, max: u32) -> Result<u64> {
        let mut value: u64 = 0;
        for index in 0..max {
            let byte = self.byte(end)?;
            value |= u64::from(byte & 0x7f).wrapping_shl(7 * index);
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(Error::Malformed)
    }

    fn varint(&mut self, end: usize) -> Result<u64> {
        self.varint_of(end, 10)
    }

    fn fixed<const N: usize>(&mut self, _end: usize) -> Result<[u8; N]> {
        if self.body.len() - self.pos < N {
            return Err(Error::Malformed);
        }
        let mut bytes = [0u8; N];
        bytes.copy_from_slice(&self.body[self.pos..self.pos + N]);
        self.pos += N;
        Ok(bytes)
    }

    fn fixed64(&mut self, end: usize) -> Result<u64> {
        Ok(u64::from_le_bytes(self.fixed::<8>(end)?))
    }

    fn fixed32(&mut self, end: usize) -> Result<u32> {
        Ok(u32::from_le_bytes(self.fixed::<4>(end)?))
    }

    /// A length-delimited field's extent.
    fn len(&mut self, end: usize) -> Result<(usize, usize)> {
        let size = self.varint_of(end, 5)?;
        if size >= i32::MAX as u64 || size as usize > self.body.len() - self.pos {
            return Err(Error::Malformed);
        }
        let start = self.pos;
        self.pos += size as usize;
        Ok((start, self.pos))
    }

    fn bytes(&mut self, end: usize) -> Result<Slice> {
        let (start, stop) = self.len(end)?;
        Ok(Slice {
            start: start as u32,
            end: stop as u32,
        })
    }

    /// A `string` field. Its UTF-8 is checked before its end is: one that runs past its
    /// message (not past the body) and is no UTF-8 is [`Error::BadUtf8`], as upb has it.
    fn string(&mut self, end: usize) -> Result<Slice> {
        let size = self.varint_of(end, 5)?;
        if size >= i32::MAX as u64 || size as usize > self.body.len() - self.pos {
            return Err(Error::Malformed);
        }
        let (start, stop) = (self.pos, self.pos + size as usize);
        if !utf8(&self.body[start..stop]) {
            return Err(Error::BadUtf8);
        }
        if stop > end {
            return Err(Error::Malformed);
        }
        self.pos = stop;
        Ok(Slice {
            start: start as u32,
            end: stop as u32,
        })
    }

    /// A submessage's extent, one level deeper (`depth`: the levels left at the parent); the
    /// reader stays at its start, for the submessage to be read.
    /// A submessage must end within its parent.
    fn sub(&mut self, end: usize, depth: u32) -> Result<(usize, usize)> {
        let size = self.varint_of(end, 5)?;
        if size >= i32::MAX as u64 || self.pos > end || size as usize > end - self.pos {
            return Err(Error::Malformed);
        }
        if depth == 0 {
            return Err(Error::TooDeep);
        }
        Ok((self.pos, self.pos + size as usize))
    }

    /// The fields up to `end` (a message), each handed to `read` with its number and wire
    /// type; what it leaves is skipped. `group`: the field number of the group being read
    /// (its end-group tag ends it), 0 for a length-delimited message.
    fn message(
        &mut self,
        end: usize,
        depth: u32,
        mut read: impl FnMut(&mut Reader<'a>, u32, u8, usize, u32) -> Result<bool>,
    ) -> Result<()> {
        self.fields(end, depth, 0, &mut read)
    }

    fn fields(
        &mut self,
        end: usize,
        depth: u32,
        group: u32,
        read: &mut Fields<'_, 'a>,
    ) -> Result<()> {
        while self.pos < end {
            let tag = self.varint_of(end, 5)?;
            if tag > u64::from(u32::MAX) {
                return Err(Error::Malformed);
            }
            let field = (tag >> 3) as u32;
            let wire = (tag & 7) as u8;
            if field == 0 {
                return Err(Error::Malformed);
            }
            if wire == END_GROUP {
                if group == field {
                    return Ok(());
                }
                return Err(Error::Malformed);
            }
            if !read(self, field, wire, end, depth)? {
                self.skip(field, wire, end, depth)?;
            }
            if self.pos > end {
                return Err(Error::Malformed); // the field ran past its message
            }
        }
        if group != 0 {
            return Err(Error::Malformed); // the group's end is missing
        }
        Ok(())
    }

    fn skip(&mut self, field: u32, wire: u8, end: usize, depth: u32) -> Result<()> {
        match wire {
            VARINT => {
                self.varint(end)?;
            }
            FIXED64 => {
                self.fixed::<8>(end)?;
            }
            LEN => {
                self.len(end)?;
            }
            START_GROUP => {
                if depth == 0 {
                    return Err(Error::Malformed); // (upb's words for a group too deep)
                }
                self.fields(end, depth - 1, field, &mut |_, _, _, _, _| Ok(false))?;
            }
            FIXED32 => {
                self.fixed::<4>(end)?;
            }
            _ => return Err(Error::Malformed),
        }
        Ok(())
    }

    fn resource_spans(&mut self, into: &mut ResourceSpans, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, depth| {
            match (field, wire) {
                (1, LEN) => {
                    let (_, stop) = r.sub(end, depth)?;
                    r.resource(&mut into.resource, stop, depth - 1)?;
                }
                (2, LEN) => {
                    let (_, stop) = r.sub(end, depth)?;
                    let mut item = ScopeSpans::default();
                    r.scope_spans(&mut item, stop, depth - 1)?;
                    into.scope_spans.push(item);
                }
                (3, LEN) => into.schema_url = r.string(end)?,
                _ => return Ok(false),
            }
            Ok(true)
        })
    }

    fn resource(&mut self, into: &mut Resource, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, depth| {
            match (field, wire) {
                (1, LEN) => r.key_value_into(&mut into.attributes, end, depth)?,
                (2, VARINT) => into.dropped_attributes_count = r.varint(end)? as u32,
                (3, LEN) => {
                    let (_, stop) = r.sub(end, depth)?;
                    r.entity_ref(stop, depth - 1)?;
                }
                _ => return Ok(false),
            }
            Ok(true)
        })
    }

    /// An `EntityRef` (`schema_url`, `type`, `id_keys`, `description_keys`: strings), checked.
    fn entity_ref(&mut self, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, _| {
            if (1..=4).contains(&field) && wire == LEN {
                r.string(end)?;
                return Ok(true);
            }
            Ok(false)
        })
    }

    fn scope_spans(&mut self, into: &mut ScopeSpans, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, depth| {
            match (field, wire) {
                (1, LEN) => {
                    let (_, stop) = r.sub(end, depth)?;
                    r.scope(&mut into.scope, stop, depth - 1)?;
                }
                (2, LEN) => {
                    let (start, stop) = r.sub(end, depth)?;
                    let mut span = Span {
                        raw: Slice {
                            start: start as u32,
                            end: stop as u32,
                        },
                        ..Span::default()
                    };
                    r.span(&mut span, stop, depth - 1)?;
                    into.spans.push(span);
                }
                (3, LEN) => into.schema_url = r.string(end)?,
                _ => return Ok(false),
            }
            Ok(true)
        })
    }

    fn scope(&mut self, into: &mut Scope, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, depth| {
            match (field, wire) {
                (1, LEN) => into.name = r.string(end)?,
                (2, LEN) => into.version = r.string(end)?,
                (3, LEN) => r.key_value_into(&mut into.attributes, end, depth)?,
                (4, VARINT) => into.dropped_attributes_count = r.varint(end)? as u32,
                _ => return Ok(false),
            }
            Ok(true)
        })
    }

    fn span(&mut self, into: &mut Span, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, depth| {
            match (field, wire) {
                (1, LEN) => into.trace_id = r.bytes(end)?,
                (2, LEN) => into.span_id = r.bytes(end)?,
                (3, LEN) => into.trace_state = r.string(end)?,
                (4, LEN) => into.parent_span_id = r.bytes(end)?,
                (16, FIXED32) => into.flags = r.fixed32(end)?,
                (5, LEN) => into.name = r.string(end)?,
                (6, VARINT) => into.kind = r.varint(end)? as i32,
                (7, FIXED64) => into.start_time_unix_nano = r.fixed64(end)?,
                (8, FIXED64) => into.end_time_unix_nano = r.fixed64(end)?,
                (9, LEN) => r.key_value_into(&mut into.attributes, end, depth)?,
                (10, VARINT) => into.dropped_attributes_count = r.varint(end)? as u32,
                (11, LEN) => {
                    let (_, stop) = r.sub(end, depth)?;
                    let mut event = Event::default();
                    r.event(&mut event, stop, depth - 1)?;
                    into.events.push(event);
                }
                (12, VARINT) => into.dropped_events_count = r.varint(end)? as u32,
                (13, LEN) => {
                    let (_, stop) = r.sub(end, depth)?;
                    let mut link = Link::default();
                    r.link(&mut link, stop, depth - 1)?;
                    into.links.push(link);
                }
                (14, VARINT) => into.dropped_links_count = r.varint(end)? as u32,
                (15, LEN) => {
                    let (_, stop) = r.sub(end, depth)?;
                    r.status(&mut into.status, stop, depth - 1)?;
                }
                _ => return Ok(false),
            }
            Ok(true)
        })
    }

    fn status(&mut self, into: &mut Status, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, _| {
            match (field, wire) {
                (2, LEN) => into.message = r.string(end)?,
                (3, VARINT) => into.code = r.varint(end)? as i32,
                _ => return Ok(false),
            }
            Ok(true)
        })
    }

    fn event(&mut self, into: &mut Event, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, depth| {
            match (field, wire) {
                (1, FIXED64) => into.time_unix_nano = r.fixed64(end)?,
                (2, LEN) => into.name = r.string(end)?,
                (3, LEN) => r.key_value_into(&mut into.attributes, end, depth)?,
                (4, VARINT) => into.dropped_attributes_count = r.varint(end)? as u32,
                _ => return Ok(false),
            }
            Ok(true)
        })
    }

    fn link(&mut self, into: &mut Link, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, depth| {
            match (field, wire) {
                (1, LEN) => into.trace_id = r.bytes(end)?,
                (2, LEN) => into.span_id = r.bytes(end)?,
                (3, LEN) => into.trace_state = r.string(end)?,
                (4, LEN) => r.key_value_into(&mut into.attributes, end, depth)?,
                (5, VARINT) => into.dropped_attributes_count = r.varint(end)? as u32,
                (6, FIXED32) => into.flags = r.fixed32(end)?,
                _ => return Ok(false),
            }
            Ok(true)
        })
    }

    /// One more `KeyValue` (a repeated field's element) onto `list`.
    fn key_value_into(&mut self, list: &mut Vec<KeyValue>, end: usize, depth: u32) -> Result<()> {
        let (_, stop) = self.sub(end, depth)?;
        let mut item = KeyValue::default();
        self.key_value(&mut item, stop, depth - 1)?;
        list.push(item);
        Ok(())
    }

    fn key_value(&mut self, into: &mut KeyValue, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, depth| {
            match (field, wire) {
                (1, LEN) => into.key = r.string(end)?,
                (2, LEN) => {
                    let (_, stop) = r.sub(end, depth)?;
                    r.any_value(&mut into.value, stop, depth - 1)?;
                }
                (3, VARINT) => into.key_strindex = r.varint(end)? as i32,
                _ => return Ok(false),
            }
            Ok(true)
        })
    }

    fn any_value(&mut self, into: &mut AnyValue, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, depth| {
            match (field, wire) {
                (1, LEN) => *into = AnyValue::String(r.string(end)?),
                (2, VARINT) => *into = AnyValue::Bool(r.varint(end)? != 0),
                (3, VARINT) => *into = AnyValue::Int(r.varint(end)? as i64),
                (4, FIXED64) => *into = AnyValue::Double(f64::from_bits(r.fixed64(end)?)),
                (5, LEN) => {
                    let (_, stop) = r.sub(end, depth)?;
                    if !matches!(into, AnyValue::Array(_)) {
                        *into = AnyValue::Array(Vec::new());
                    }
                    if let AnyValue::Array(values) = into {
                        r.array(values, stop, depth - 1)?;
                    }
                }
                (6, LEN) => {
                    let (_, stop) = r.sub(end, depth)?;
                    if !matches!(into, AnyValue::KvList(_)) {
                        *into = AnyValue::KvList(Vec::new());
                    }
                    if let AnyValue::KvList(values) = into {
                        r.kvlist(values, stop, depth - 1)?;
                    }
                }
                (7, LEN) => *into = AnyValue::Bytes(r.bytes(end)?),
                (8, VARINT) => *into = AnyValue::StringIndex(r.varint(end)? as i32),
                _ => return Ok(false),
            }
            Ok(true)
        })
    }

    fn array(&mut self, values: &mut Vec<AnyValue>, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, depth| {
            if field == 1 && wire == LEN {
                let (_, stop) = r.sub(end, depth)?;
                let mut item = AnyValue::Unset;
                r.any_value(&mut item, stop, depth - 1)?;
                values.push(item);
                return Ok(true);
            }
            Ok(false)
        })
    }

    fn kvlist(&mut self, values: &mut Vec<KeyValue>, end: usize, depth: u32) -> Result<()> {
        self.message(end, depth, |r, field, wire, end, depth| {
            if field == 1 && wire == LEN {
                r.key_value_into(values, end, depth)?;
                return Ok(true);
            }
            Ok(false)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_and_its_attributes() {
        // resource_spans { scope_spans { spans { name: "x" attributes { key: "k" value { int_value: 3 } } } } }
        let span = [0x2a, 1, b'x', 0x4a, 7, 0x0a, 1, b'k', 0x12, 2, 0x18, 3];
        let mut scope = vec![0x12, span.len() as u8];
        scope.extend_from_slice(&span);
        let mut resource = vec![0x12, scope.len() as u8];
        resource.extend_from_slice(&scope);
        let mut body = vec![0x0a, resource.len() as u8];
        body.extend_from_slice(&resource);
        let request = decode(&body).unwrap();
        let span = &request.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(span.name.text(&body), "x");
        assert_eq!(span.attributes[0].key.text(&body), "k");
        assert_eq!(span.attributes[0].value, AnyValue::Int(3));
    }

    #[test]
    fn refusals_say_what_upb_says() {
        assert_eq!(decode(&[0xff]), Err(Error::Malformed));
        assert_eq!(decode(&[0x0c]), Err(Error::Malformed)); // an end group outside one
        assert_eq!(decode(&[0x0b, 0x0c]), Ok(Request::default())); // an unknown group
        assert_eq!(decode(&[0x08, 0x01]), Ok(Request::default())); // field 1 as a varint
        assert_eq!(decode(&[0x0a, 0x05, 0x1a]), Err(Error::Malformed)); // truncated
        assert_eq!(decode(&[0x0a, 0x03, 0x1a, 0x01, 0xff]), Err(Error::BadUtf8));
    }
}
