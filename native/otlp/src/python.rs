//! `watchdog.core.spans._native`: the decoded request as objects that read like protobuf's
//! own messages (the fields the Python pipeline reads, by the same names), built lazily, and
//! the attributes the conventions name selected into a dict in one pass (`Span.selected`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};

use crate::agents::Agents;
use crate::failures::{Failures, Status as SpanStatus};
use crate::kernels::untracked;
use crate::model_calls::{Keys, ModelCalls};
use crate::normalise::{self, Normaliser};
use crate::wire;

/// The convention tables' attribute names (handed over once, at import): the wanted ones, each
/// as the Python string a selected dict is keyed by, whether it is a scalar (its string is
/// read as the JSON it may encode) and its slot; the first-present facts (``FIRST_FACTS``), each
/// as the slots of its names in order and whether it is read as text; and the function that
/// reads a JSON-encoded value.
#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Tables {
    wanted: HashMap<Box<[u8]>, (Py<PyString>, bool, usize), BuildHasherDefault<NameHasher>>,
    firsts: Vec<(Vec<usize>, bool)>,
    json_encoded: Py<PyAny>,
    /// a span's name is cut to this many characters (``values.MAX_NAME_CHARS``)
    max_name_chars: usize,
    /// the earliest time a span's may be (``bounds.MIN_SPAN_TIME_NS``)
    min_time_ns: u64,
}

#[pymethods]
impl Tables {
    #[new]
    #[pyo3(signature = (wanted, scalars, json_encoded, max_name_chars, min_time_ns, firsts=None))]
    fn new(
        wanted: &Bound<'_, PyAny>,
        scalars: &Bound<'_, PyAny>,
        json_encoded: Py<PyAny>,
        max_name_chars: usize,
        min_time_ns: u64,
        firsts: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut scalar_keys = std::collections::HashSet::new();
        for key in scalars.try_iter()? {
            scalar_keys.insert(key?.extract::<String>()?);
        }
        let mut table = HashMap::default();
        for key in wanted.try_iter()? {
            let key = key?;
            let text: String = key.extract()?;
            let scalar = scalar_keys.contains(&text);
            let slot = table.len();
            table
                .entry(text.into_bytes().into_boxed_slice())
                .or_insert((key.cast_into::<PyString>()?.unbind(), scalar, slot));
        }
        let mut facts = Vec::new();
        if let Some(firsts) = firsts {
            for fact in firsts.try_iter()? {
                let (keys, as_text): (Vec<String>, bool) = fact?.extract()?;
                // (a name no table selects is never present)
                let slots = keys
                    .iter()
                    .filter_map(|key| table.get(key.as_bytes()).map(|entry| entry.2))
                    .collect();
                facts.push((slots, as_text));
            }
        }
        Ok(Tables {
            wanted: table,
            firsts: facts,
            json_encoded,
            max_name_chars,
            min_time_ns,
        })
    }
}

/// The hash of an attribute's name looked up in the wanted table (FxHash's, a word at a time):
/// every span's every attribute name is hashed, and SipHash's defence against chosen collisions
/// buys nothing for a table that is only read (a name that collides costs a few comparisons).
#[derive(Default)]
struct NameHasher(u64);

impl Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut hash = self.0;
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            hash = (hash.rotate_left(5) ^ word).wrapping_mul(SEED);
        }
        for byte in words.remainder() {
            hash = (hash.rotate_left(5) ^ u64::from(*byte)).wrapping_mul(SEED);
        }
        self.0 = hash;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

fn text<'py>(py: Python<'py>, body: &[u8], slice: wire::Slice) -> Bound<'py, PyString> {
    PyString::new(py, slice.text(body))
}

fn bytes<'py>(py: Python<'py>, body: &[u8], slice: wire::Slice) -> Bound<'py, PyBytes> {
    PyBytes::new(py, slice.of(body))
}

/// Decode an `ExportTraceServiceRequest`; a ValueError says why it is not one (upb's words).
#[pyfunction]
fn decode(py: Python<'_>, body: Bound<'_, PyBytes>, tables: Py<Tables>) -> PyResult<Request> {
    let request = {
        let data = body.as_bytes();
        wire::decode(data).map_err(|error| PyValueError::new_err(error.message()))?
    };
    let shared: Py<PyBytes> = body.unbind();
    let data = shared.bind(py).as_bytes();
    let resource_spans = PyList::empty(py);
    for item in request.resource_spans {
        let scope_spans = PyList::empty(py);
        for scoped in item.scope_spans {
            let spans = PyList::empty(py);
            for span in scoped.spans {
                // (out of the collector's walk: its `__traverse__` shows no reference, so no
                // cycle through it could be broken either way, and a request's spans live
                // through all of its slices)
                spans.append(untracked(Bound::new(
                    py,
                    Span {
                        body: shared.clone_ref(py),
                        tables: tables.clone_ref(py),
                        span,
                        attributes: PyOnceLock::new(),
                        events: PyOnceLock::new(),
                    },
                )?))?;
            }
            let scope = Scope {
                name: text(py, data, scoped.scope.name).unbind(),
                version: text(py, data, scoped.scope.version).unbind(),
                attributes: key_values(py, data, &scoped.scope.attributes)?.unbind(),
                dropped_attributes_count: scoped.scope.dropped_attributes_count,
            };
            scope_spans.append(ScopeSpans {
                scope: Py::new(py, scope)?,
                spans: spans.unbind(),
                schema_url: text(py, data, scoped.schema_url).unbind(),
            })?;
        }
        let resource = Resource {
            attributes: key_values(py, data, &item.resource.attributes)?.unbind(),
            dropped_attributes_count: item.resource.dropped_attributes_count,
        };
        resource_spans.append(ResourceSpans {
            resource: Py::new(py, resource)?,
            scope_spans: scope_spans.unbind(),
            schema_url: text(py, data, item.schema_url).unbind(),
        })?;
    }
    Ok(Request {
        resource_spans: resource_spans.unbind(),
    })
}

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Request {
    #[pyo3(get)]
    resource_spans: Py<PyList>,
}

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct ResourceSpans {
    #[pyo3(get)]
    resource: Py<Resource>,
    #[pyo3(get)]
    scope_spans: Py<PyList>,
    #[pyo3(get)]
    schema_url: Py<PyString>,
}

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Resource {
    #[pyo3(get)]
    attributes: Py<PyList>,
    #[pyo3(get)]
    dropped_attributes_count: u32,
}

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct ScopeSpans {
    #[pyo3(get)]
    scope: Py<Scope>,
    #[pyo3(get)]
    spans: Py<PyList>,
    #[pyo3(get)]
    schema_url: Py<PyString>,
}

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Scope {
    #[pyo3(get)]
    name: Py<PyString>,
    #[pyo3(get)]
    version: Py<PyString>,
    #[pyo3(get)]
    attributes: Py<PyList>,
    #[pyo3(get)]
    dropped_attributes_count: u32,
}

/// One span: its fields read from the body on demand (its attributes and events built once).
#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Span {
    body: Py<PyBytes>,
    tables: Py<Tables>,
    span: wire::Span,
    attributes: PyOnceLock<Py<PyList>>,
    events: PyOnceLock<Py<PyList>>,
}

#[pymethods]
impl Span {
    #[getter]
    fn trace_id<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        bytes(py, self.body.bind(py).as_bytes(), self.span.trace_id)
    }

    #[getter]
    fn span_id<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        bytes(py, self.body.bind(py).as_bytes(), self.span.span_id)
    }

    #[getter]
    fn parent_span_id<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        bytes(py, self.body.bind(py).as_bytes(), self.span.parent_span_id)
    }

    #[getter]
    fn trace_state<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        text(py, self.body.bind(py).as_bytes(), self.span.trace_state)
    }

    #[getter]
    fn name<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        text(py, self.body.bind(py).as_bytes(), self.span.name)
    }

    #[getter]
    fn flags(&self) -> u32 {
        self.span.flags
    }

    #[getter]
    fn kind(&self) -> i32 {
        self.span.kind
    }

    #[getter]
    fn start_time_unix_nano(&self) -> u64 {
        self.span.start_time_unix_nano
    }

    #[getter]
    fn end_time_unix_nano(&self) -> u64 {
        self.span.end_time_unix_nano
    }

    #[getter]
    fn dropped_attributes_count(&self) -> u32 {
        self.span.dropped_attributes_count
    }

    #[getter]
    fn dropped_events_count(&self) -> u32 {
        self.span.dropped_events_count
    }

    #[getter]
    fn dropped_links_count(&self) -> u32 {
        self.span.dropped_links_count
    }

    #[getter]
    fn attributes(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        if let Some(list) = self.attributes.get(py) {
            return Ok(list.clone_ref(py));
        }
        let list = key_values(py, self.body.bind(py).as_bytes(), &self.span.attributes)?.unbind();
        Ok(self.attributes.get_or_init(py, || list).clone_ref(py))
    }

    #[getter]
    fn events(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        if let Some(list) = self.events.get(py) {
            return Ok(list.clone_ref(py));
        }
        let data = self.body.bind(py).as_bytes();
        let list = PyList::empty(py);
        for event in &self.span.events {
            list.append(Event {
                time_unix_nano: event.time_unix_nano,
                name: text(py, data, event.name).unbind(),
                attributes: key_values(py, data, &event.attributes)?.unbind(),
                dropped_attributes_count: event.dropped_attributes_count,
            })?;
        }
        let list = list.unbind();
        Ok(self.events.get_or_init(py, || list).clone_ref(py))
    }

    #[getter]
    fn links<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let data = self.body.bind(py).as_bytes();
        let list = PyList::empty(py);
        for link in &self.span.links {
            list.append(Link {
                trace_id: bytes(py, data, link.trace_id).unbind(),
                span_id: bytes(py, data, link.span_id).unbind(),
                trace_state: text(py, data, link.trace_state).unbind(),
                attributes: key_values(py, data, &link.attributes)?.unbind(),
                dropped_attributes_count: link.dropped_attributes_count,
                flags: link.flags,
            })?;
        }
        Ok(list)
    }

    #[getter]
    fn status(&self, py: Python<'_>) -> Status {
        let data = self.body.bind(py).as_bytes();
        Status {
            code: self.span.status.code,
            message: text(py, data, self.span.status.message).unbind(),
        }
    }

    /// The span as protobuf bytes (as it came: a span is never merged), for protobuf's
    /// ``Span.FromString``.
    #[allow(non_snake_case)]
    fn SerializeToString<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        bytes(py, self.body.bind(py).as_bytes(), self.span.raw)
    }

    /// What ``conventions._head`` reads of the span: (trace id, span id and parent span id as
    /// hex, the parent None at a root; its name, cut; its start and end in ns, as
    /// ``bounds.span_times`` makes them); None where the span is refused (the Python reading
    /// then says why).
    fn head<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let data = self.body.bind(py).as_bytes();
        match self.head_of(data) {
            Some(head) => Ok(Some(
                (
                    head.trace_id,
                    head.span_id,
                    head.parent,
                    head.name,
                    head.start,
                    head.end,
                )
                    .into_pyobject(py)?,
            )),
            None => Ok(None),
        }
    }

    /// ``conventions.normalise`` of the span, with the attributes and first-present facts
    /// ``read`` made of it, where the compiled normalise is sure of it
    /// (``native/otlp/src/normalise.rs``): (the record, what is left to fill of it: 0 nothing,
    /// 1 its role's facts, 2 its status and events and its role's facts); None where the Python
    /// ``normalise`` reads it.
    fn record<'py>(
        &self,
        py: Python<'py>,
        attrs: &Bound<'py, PyDict>,
        firsts: &Bound<'py, PyTuple>,
        resource: &Bound<'py, PyAny>,
        normaliser: &Bound<'py, Normaliser>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, u8)>> {
        let span = &self.span;
        let body = self.body.bind(py);
        let data = body.as_bytes();
        let Some(head) = self.head_of(data) else {
            return Ok(None);
        };
        let status = SpanStatus {
            code: span.status.code,
            message: span.status.message.text(data),
            events: &span.events,
            data,
        };
        let keys = Keys {
            attributes: &span.attributes,
            data,
        };
        normalise::record(
            py,
            normaliser.get(),
            head,
            status,
            keys,
            attrs,
            firsts,
            resource,
        )
    }

    /// The attributes the convention tables name, as ``select_attributes`` reads them: a
    /// non-empty string as it is (or, a scalar's or one that starts with ``"``, the JSON it
    /// encodes), anything else as ``any_value`` reads it; a repeated key keeps its last value.
    fn selected<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.select(py, |_, _, _| {})
    }

    /// ``selected`` and, in the same pass, the first-present facts the tables name
    /// (``FIRST_FACTS``, by index): the first of a fact's names whose value is present and not
    /// ``""`` (as ``values._first`` reads it), as text where the fact is read as text
    /// (``values._first_str``); None where none is.
    fn read<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyTuple>)> {
        let tables = self.tables.get();
        // where each name's value (by its slot) is among the values selected, the last one
        // where a name repeats (NONE: not present); on the stack for tables of the usual size
        let mut stack = [NONE; STACK_SLOTS];
        let mut heap = Vec::new();
        let at: &mut [u32] = if tables.wanted.len() <= STACK_SLOTS {
            &mut stack[..tables.wanted.len()]
        } else {
            heap.resize(tables.wanted.len(), NONE);
            &mut heap
        };
        let mut values: Vec<(Bound<'py, PyAny>, Kind)> = Vec::with_capacity(16);
        let selected = self.select(py, |slot, value, kind| {
            at[slot] = values.len() as u32;
            values.push((value.clone(), kind));
        })?;
        let mut facts = Vec::with_capacity(tables.firsts.len());
        for (names, as_text) in &tables.firsts {
            let mut found = None;
            for slot in names {
                let index = at[*slot];
                if index == NONE {
                    continue;
                }
                let (value, kind) = &values[index as usize];
                match kind {
                    Kind::Absent => continue,
                    Kind::Text => {}
                    Kind::Other => {
                        if *as_text {
                            // (an integer is its digits; a flag, a double, a list is no text)
                            if !value.is_exact_instance_of::<PyInt>() {
                                continue;
                            }
                            found = Some(value.str()?.into_any());
                            break;
                        }
                    }
                    Kind::Unknown => {
                        if value.is_none() {
                            continue;
                        }
                        if value.is_instance_of::<PyString>() {
                            if value.len()? == 0 {
                                continue;
                            }
                        } else if *as_text {
                            if !value.is_exact_instance_of::<PyInt>() {
                                continue;
                            }
                            found = Some(value.str()?.into_any());
                            break;
                        }
                    }
                }
                found = Some(value.clone());
                break;
            }
            facts.push(found.unwrap_or_else(|| py.None().into_bound(py)));
        }
        Ok((selected, PyTuple::new(py, facts)?))
    }
}

/// No value selected for a name (``Span.read``'s slots).
const NONE: u32 = u32::MAX;
/// Names of the tables (their slots) ``Span.read`` keeps on the stack (the tables name ~140).
const STACK_SLOTS: usize = 512;

/// What a selected value is known to be where it was made, so ``Span.read`` asks Python only
/// of the values a Python function made.
#[derive(Clone, Copy)]
enum Kind {
    /// a string that is not empty
    Text,
    /// None or ``""``
    Absent,
    /// neither None nor a string: a number, a flag, a list, a dict
    Other,
    /// what ``json_encoded`` made of a string, or bytes as hex (``""`` when empty)
    Unknown,
}

impl Span {
    /// What ``head`` answers (None: the span is refused).
    fn head_of<'a>(&self, data: &'a [u8]) -> Option<normalise::Head<'a>> {
        let tables = self.tables.get();
        let span = &self.span;
        let (trace, id) = (span.trace_id.of(data), span.span_id.of(data));
        if trace.len() != 16 || zero(trace) || id.len() != 8 || zero(id) {
            return None;
        }
        let (start, end) = (span.start_time_unix_nano, span.end_time_unix_nano);
        let minimum = tables.min_time_ns;
        let (start, end) = match (start >= minimum, end >= minimum) {
            (true, true) => (start, end.max(start)),
            (false, true) => (end, end),
            (true, false) => (start, start),
            (false, false) => return None,
        };
        let parent = span.parent_span_id.of(data);
        let parent = if parent.len() == 8 && !zero(parent) {
            Some(hex(parent))
        } else {
            None
        };
        let name = span.name.text(data);
        let name = match name.char_indices().nth(tables.max_name_chars) {
            Some((cut, _)) => &name[..cut],
            None => name,
        };
        Some(normalise::Head {
            trace_id: hex(trace),
            span_id: hex(id),
            parent,
            name,
            start,
            end,
        })
    }

    /// The selected dict, each value also handed to ``seen`` with its name's slot and what it
    /// is known to be.
    fn select<'py>(
        &self,
        py: Python<'py>,
        mut seen: impl FnMut(usize, &Bound<'py, PyAny>, Kind),
    ) -> PyResult<Bound<'py, PyDict>> {
        let tables = self.tables.get();
        let data = self.body.bind(py).as_bytes();
        let selected = PyDict::new(py);
        for kv in &self.span.attributes {
            let Some((key, scalar, slot)) = tables.wanted.get(kv.key.of(data)) else {
                continue;
            };
            let key = key.bind(py);
            let (value, kind) = match kv.value {
                wire::AnyValue::String(slice) if !slice.is_empty() => {
                    let value = slice.text(data);
                    if *scalar || value.as_bytes()[0] == b'"' {
                        let value = tables.json_encoded.bind(py).call1((value, *scalar))?;
                        (value, Kind::Unknown)
                    } else {
                        (PyString::new(py, value).into_any(), Kind::Text)
                    }
                }
                ref other => (plain(py, data, other)?, kind_of(other)),
            };
            seen(*slot, &value, kind);
            selected.set_item(key, value)?;
        }
        Ok(selected)
    }
}

/// What ``plain`` makes of ``value``.
fn kind_of(value: &wire::AnyValue) -> Kind {
    match value {
        wire::AnyValue::String(slice) if !slice.is_empty() => Kind::Text,
        wire::AnyValue::String(_) | wire::AnyValue::Unset | wire::AnyValue::StringIndex(_) => {
            Kind::Absent
        }
        wire::AnyValue::Bool(_)
        | wire::AnyValue::Int(_)
        | wire::AnyValue::Double(_)
        | wire::AnyValue::Array(_)
        | wire::AnyValue::KvList(_) => Kind::Other,
        wire::AnyValue::Bytes(_) => Kind::Unknown,
    }
}

fn zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|byte| *byte == 0)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(DIGITS[(byte >> 4) as usize] as char);
        text.push(DIGITS[(byte & 15) as usize] as char);
    }
    text
}

/// An ``AnyValue`` as ``decode.any_value`` reads it: lists and dicts, bytes as hex.
fn plain<'py>(py: Python<'py>, data: &[u8], value: &wire::AnyValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        wire::AnyValue::String(slice) => text(py, data, *slice).into_any(),
        wire::AnyValue::Bool(flag) => flag.into_pyobject(py)?.to_owned().into_any(),
        wire::AnyValue::Int(number) => number.into_pyobject(py)?.into_any(),
        wire::AnyValue::Double(number) => number.into_pyobject(py)?.into_any(),
        wire::AnyValue::Array(values) => {
            let list = PyList::empty(py);
            for item in values {
                list.append(plain(py, data, item)?)?;
            }
            list.into_any()
        }
        wire::AnyValue::KvList(values) => {
            let dict = PyDict::new(py);
            for kv in values {
                dict.set_item(text(py, data, kv.key), plain(py, data, &kv.value)?)?;
            }
            dict.into_any()
        }
        wire::AnyValue::Bytes(slice) => {
            let hex: String = slice.of(data).iter().map(|b| format!("{b:02x}")).collect();
            PyString::new(py, &hex).into_any()
        }
        wire::AnyValue::Unset | wire::AnyValue::StringIndex(_) => py.None().into_bound(py),
    })
}

fn key_values<'py>(
    py: Python<'py>,
    data: &[u8],
    list: &[wire::KeyValue],
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for kv in list {
        out.append(KeyValue {
            key: text(py, data, kv.key).unbind(),
            value: Py::new(py, any_value(py, data, &kv.value)?)?,
            key_strindex: kv.key_strindex,
        })?;
    }
    Ok(out)
}

fn any_value(py: Python<'_>, data: &[u8], value: &wire::AnyValue) -> PyResult<AnyValue> {
    Ok(AnyValue {
        value: match value {
            wire::AnyValue::Unset => Value::Unset,
            wire::AnyValue::String(slice) => Value::String(text(py, data, *slice).unbind()),
            wire::AnyValue::Bool(flag) => Value::Bool(*flag),
            wire::AnyValue::Int(number) => Value::Int(*number),
            wire::AnyValue::Double(number) => Value::Double(*number),
            wire::AnyValue::Array(values) => {
                let list = PyList::empty(py);
                for item in values {
                    list.append(any_value(py, data, item)?)?;
                }
                Value::Array(Py::new(
                    py,
                    ArrayValue {
                        values: list.unbind(),
                    },
                )?)
            }
            wire::AnyValue::KvList(values) => Value::KvList(Py::new(
                py,
                KeyValueList {
                    values: key_values(py, data, values)?.unbind(),
                },
            )?),
            wire::AnyValue::Bytes(slice) => Value::Bytes(bytes(py, data, *slice).unbind()),
            wire::AnyValue::StringIndex(index) => Value::StringIndex(*index),
        },
    })
}

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Status {
    #[pyo3(get)]
    code: i32,
    #[pyo3(get)]
    message: Py<PyString>,
}

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Event {
    #[pyo3(get)]
    time_unix_nano: u64,
    #[pyo3(get)]
    name: Py<PyString>,
    #[pyo3(get)]
    attributes: Py<PyList>,
    #[pyo3(get)]
    dropped_attributes_count: u32,
}

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Link {
    #[pyo3(get)]
    trace_id: Py<PyBytes>,
    #[pyo3(get)]
    span_id: Py<PyBytes>,
    #[pyo3(get)]
    trace_state: Py<PyString>,
    #[pyo3(get)]
    attributes: Py<PyList>,
    #[pyo3(get)]
    dropped_attributes_count: u32,
    #[pyo3(get)]
    flags: u32,
}

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct KeyValue {
    #[pyo3(get)]
    key: Py<PyString>,
    #[pyo3(get)]
    value: Py<AnyValue>,
    #[pyo3(get)]
    key_strindex: i32,
}

enum Value {
    Unset,
    String(Py<PyString>),
    Bool(bool),
    Int(i64),
    Double(f64),
    Array(Py<ArrayValue>),
    KvList(Py<KeyValueList>),
    Bytes(Py<PyBytes>),
    StringIndex(i32),
}

/// The ``value`` oneof, read as protobuf reads it: a member not set reads as its default.
#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct AnyValue {
    value: Value,
}

#[pymethods]
impl AnyValue {
    #[getter]
    fn string_value(&self, py: Python<'_>) -> Py<PyString> {
        match &self.value {
            Value::String(text) => text.clone_ref(py),
            _ => PyString::new(py, "").unbind(),
        }
    }

    #[getter]
    fn bool_value(&self) -> bool {
        matches!(self.value, Value::Bool(true))
    }

    #[getter]
    fn int_value(&self) -> i64 {
        match self.value {
            Value::Int(number) => number,
            _ => 0,
        }
    }

    #[getter]
    fn double_value(&self) -> f64 {
        match self.value {
            Value::Double(number) => number,
            _ => 0.0,
        }
    }

    #[getter]
    fn string_value_strindex(&self) -> i32 {
        match self.value {
            Value::StringIndex(index) => index,
            _ => 0,
        }
    }

    #[getter]
    fn array_value(&self, py: Python<'_>) -> PyResult<Py<ArrayValue>> {
        match &self.value {
            Value::Array(array) => Ok(array.clone_ref(py)),
            _ => Py::new(
                py,
                ArrayValue {
                    values: PyList::empty(py).unbind(),
                },
            ),
        }
    }

    #[getter]
    fn kvlist_value(&self, py: Python<'_>) -> PyResult<Py<KeyValueList>> {
        match &self.value {
            Value::KvList(list) => Ok(list.clone_ref(py)),
            _ => Py::new(
                py,
                KeyValueList {
                    values: PyList::empty(py).unbind(),
                },
            ),
        }
    }

    #[getter]
    fn bytes_value(&self, py: Python<'_>) -> Py<PyBytes> {
        match &self.value {
            Value::Bytes(data) => data.clone_ref(py),
            _ => PyBytes::new(py, b"").unbind(),
        }
    }

    /// The member of the ``value`` oneof that is set (None: none is).
    #[allow(non_snake_case)]
    fn WhichOneof(&self, name: &str) -> PyResult<Option<&'static str>> {
        if name != "value" {
            return Err(PyValueError::new_err(format!(
                "Protocol message has no \"{name}\" field."
            )));
        }
        Ok(match self.value {
            Value::Unset => None,
            Value::String(_) => Some("string_value"),
            Value::Bool(_) => Some("bool_value"),
            Value::Int(_) => Some("int_value"),
            Value::Double(_) => Some("double_value"),
            Value::Array(_) => Some("array_value"),
            Value::KvList(_) => Some("kvlist_value"),
            Value::Bytes(_) => Some("bytes_value"),
            Value::StringIndex(_) => Some("string_value_strindex"),
        })
    }
}

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct ArrayValue {
    #[pyo3(get)]
    values: Py<PyList>,
}

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct KeyValueList {
    #[pyo3(get)]
    values: Py<PyList>,
}

#[pymodule]
#[pyo3(name = "_native")]
fn native_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_class::<Tables>()?;
    m.add_class::<Normaliser>()?;
    m.add_class::<ModelCalls>()?;
    m.add_class::<Agents>()?;
    m.add_class::<Failures>()?;
    m.add_class::<Request>()?;
    m.add_class::<ResourceSpans>()?;
    m.add_class::<Resource>()?;
    m.add_class::<ScopeSpans>()?;
    m.add_class::<Scope>()?;
    m.add_class::<Span>()?;
    m.add_class::<Status>()?;
    m.add_class::<Event>()?;
    m.add_class::<Link>()?;
    m.add_class::<KeyValue>()?;
    m.add_class::<AnyValue>()?;
    m.add_class::<ArrayValue>()?;
    m.add_class::<KeyValueList>()?;
    crate::kernels::register(m)?;
    crate::signatures::register(m)?;
    crate::briefs::register(m)?;
    Ok(())
}
