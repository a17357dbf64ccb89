//! Per-span kernels of the conventions, over the same tables the Python path reads (handed over
//! once, at start): the limit phrases a message may name, all in one pass (`Phrases`), and the
//! JSON a tool call's arguments and a model's tool requests are read from (`Json`), and the
//! 64-bit hash of a text (`stable_hash`). Each answers
//! exactly what its Python twin answers, or None where it cannot be sure it would (a value
//! serde_json and Python's json read differently: a float, a lone surrogate, NaN, a number too
//! long for Python's int): the caller then asks the Python twin.

use std::collections::BTreeSet;

use blake2::digest::{Update, VariableOutput};
use blake2::Blake2bVar;

use pyo3::exceptions::{PyImportError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The most digits of an integer Python's json converts (``sys.get_int_max_str_digits()``:
/// 4300 unless ``PYTHONINTMAXSTRDIGITS`` says otherwise; 0, no limit, is ``usize::MAX``), set
/// from the interpreter's when the module is imported: where a run of digits is longer, ask
/// Python (which refuses it).
static MAX_INT_DIGITS: AtomicUsize = AtomicUsize::new(4300);

/// Python's integer digit limit, read once at import (`register`).
fn set_int_max_str_digits(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let digits: usize = m
        .py()
        .import("sys")?
        .getattr("get_int_max_str_digits")?
        .call0()?
        .extract()?;
    MAX_INT_DIGITS.store(
        if digits == 0 { usize::MAX } else { digits },
        Ordering::Relaxed,
    );
    Ok(())
}

/// Whether ``text`` holds a run of more digits than Python's json converts.
pub(crate) fn long_digit_run(text: &str) -> bool {
    let most = MAX_INT_DIGITS.load(Ordering::Relaxed);
    if text.len() <= most {
        return false;
    }
    let mut run = 0;
    for byte in text.bytes() {
        run = if byte.is_ascii_digit() { run + 1 } else { 0 };
        if run > most {
            return true;
        }
    }
    false
}

/// A table of regexes (the limit phrases, the status patterns), in the tables' order: the first
/// that matches anywhere in a text wins, as the Python loop over them decides.
#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Phrases {
    set: regex::RegexSet,
}

#[pymethods]
impl Phrases {
    /// A ValueError where a pattern is no regex the compiled matcher reads as Python's `re`
    /// does (look-arounds, back-references): the Python loop then stays.
    #[new]
    fn new(patterns: Vec<String>) -> PyResult<Self> {
        let set = regex::RegexSet::new(&patterns)
            .map_err(|error| PyValueError::new_err(error.to_string()))?;
        Ok(Phrases { set })
    }

    /// The index of the first pattern found in `text`; -1 none is; -2 for the Python loop to
    /// read it: a text that is not ASCII, where the two engines' Unicode differs (`re`'s
    /// ignored case matches "ı" and "İ" for "i", its `\w` and `\s` are `str.isalnum` and
    /// `str.isspace`), or holds the separators `re`'s `\s` has and Unicode's has not.
    fn first(&self, text: &Bound<'_, PyString>) -> i64 {
        let Ok(text) = text.to_str() else {
            return -2;
        };
        self.first_of(text)
    }
}

impl Phrases {
    /// ``first`` of a text that is UTF-8.
    pub fn first_of(&self, text: &str) -> i64 {
        if !text.is_ascii() || text.bytes().any(|byte| (0x1c..=0x1f).contains(&byte)) {
            return -2;
        }
        match self.set.matches(text).iter().next() {
            Some(index) => index as i64,
            None => -1,
        }
    }
}

/// A rule pack's `action_pattern`, searched in time linear in the text (the `regex` crate
/// never backtracks): an answer of the model, outside data, cannot make it take longer, as it
/// can Python's `re` (a 16 KB answer against `(.*?)(.*?)Z`: minutes).
#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Searcher {
    regex: regex::Regex,
}

#[pymethods]
impl Searcher {
    /// A ValueError where the pattern is no regex this matcher reads (a look-around, a
    /// back-reference) or compiles past its size limit.
    #[new]
    fn new(pattern: &str) -> PyResult<Self> {
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|error| PyValueError::new_err(error.to_string()))?;
        Ok(Searcher { regex })
    }

    /// The first match in `text` (leftmost, its alternatives and repeats preferred as Python's
    /// `re.search` prefers them): the match, then each group's text (None: a group that took
    /// no part); None when nothing matches.
    fn search(&self, text: &str) -> Option<Vec<Option<String>>> {
        self.regex.captures(text).map(|found| {
            found
                .iter()
                .map(|part| part.map(|part| part.as_str().to_owned()))
                .collect()
        })
    }
}

/// `object` taken out of the garbage collector's walk (`PyObject_GC_UnTrack`): for an object
/// no reference cycle can pass through, which the collector then never needs to look at. A
/// pyclass is always a GC type (PyO3 sets `Py_TPFLAGS_HAVE_GC` on every one), and one without
/// `__traverse__` shows the collector none of its references: tracked, it only costs the
/// walk. (Untracking one already untracked, as its dealloc does, is a no-op.)
pub(crate) fn untracked<T>(object: Bound<'_, T>) -> Bound<'_, T> {
    // SAFETY: `object` is a live object the caller owns a reference to, and only a GC type's
    // has the header untracking reads; untracking removes it from the collector's lists only,
    // which any GC object may be at any time
    unsafe {
        let raw = object.as_ptr();
        if pyo3::ffi::PyType_IS_GC(pyo3::ffi::Py_TYPE(raw)) != 0 {
            pyo3::ffi::PyObject_GC_UnTrack(raw.cast());
        }
    }
    object
}

/// A table's attribute names as Python strings (looked up in a span's attributes as they are).
pub(crate) fn py_strings(value: &Bound<'_, PyAny>) -> PyResult<Vec<Py<PyString>>> {
    value
        .try_iter()?
        .map(|item| Ok(item?.cast_into::<PyString>()?.unbind()))
        .collect()
}

#[derive(Clone)]
enum Step {
    Key(String),
    Index(i64),
}

fn path_of(path: &Bound<'_, PyAny>) -> PyResult<Vec<Step>> {
    let mut steps = Vec::new();
    for step in path.try_iter()? {
        let step = step?;
        if let Ok(key) = step.extract::<String>() {
            steps.push(Step::Key(key));
        } else {
            steps.push(Step::Index(step.extract::<i64>()?));
        }
    }
    Ok(steps)
}

/// ``outcome.at_path``: a key indexes an object, an int a list (from its end where negative).
fn at_path<'v>(mut value: &'v Value, path: &[Step]) -> Option<&'v Value> {
    for step in path {
        value = match (step, value) {
            (Step::Key(key), Value::Object(map)) => map.get(key)?,
            (Step::Index(index), Value::Array(items)) => {
                let len = items.len() as i64;
                if !(-len <= *index && *index < len) {
                    return None;
                }
                &items[if *index < 0 { len + index } else { *index } as usize]
            }
            _ => return None,
        };
    }
    Some(value)
}

/// Where a model's output message lists the tool calls it asks for
/// (``model_calls.ASKED_TOOL_LISTS``): the list's key, its items' type (None: any), the paths
/// of a call's name (the first that is text) and of its id.
struct AskedList {
    key: String,
    item_type: Option<String>,
    item_type_path: Vec<Step>, // ("type",)
    names: Vec<Vec<Step>>,
    id: Vec<Step>,
}

/// The JSON kernels: a tool call's arguments as canonical JSON (``values.canonical_arguments``)
/// and the tool calls a model's output messages ask for (``model_calls.asked_tools``).
#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Json {
    envelopes: Vec<(BTreeSet<String>, String)>,
    asked_lists: Vec<AskedList>,
    max_asked: usize,
    max_name: usize,
}

/// `text` parsed as Python's json parses it, or None where the two might differ.
fn parsed(text: &str) -> Option<Value> {
    if long_digit_run(text) {
        return None;
    }
    serde_json::from_str(text).ok()
}

fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(number) => number.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

#[pymethods]
impl Json {
    /// `envelopes`: ``TOOL_ARGS_ENVELOPES`` ((keys, inner key), ...); `asked_lists`:
    /// ``ASKED_TOOL_LISTS`` ((list key, item type or None, name paths, id path), ...).
    #[new]
    fn new(
        envelopes: &Bound<'_, PyAny>,
        asked_lists: &Bound<'_, PyAny>,
        max_asked: usize,
        max_name: usize,
    ) -> PyResult<Self> {
        let mut rules = Vec::new();
        for rule in envelopes.try_iter()? {
            let (keys, inner): (Bound<'_, PyAny>, String) = rule?.extract()?;
            let mut names = BTreeSet::new();
            for key in keys.try_iter()? {
                names.insert(key?.extract::<String>()?);
            }
            rules.push((names, inner));
        }
        let mut lists = Vec::new();
        for rule in asked_lists.try_iter()? {
            let (key, item_type, names, id): (
                String,
                Option<String>,
                Bound<'_, PyAny>,
                Bound<'_, PyAny>,
            ) = rule?.extract()?;
            let mut name_paths = Vec::new();
            for path in names.try_iter()? {
                name_paths.push(path_of(&path?)?);
            }
            lists.push(AskedList {
                key,
                item_type,
                item_type_path: vec![Step::Key("type".to_owned())],
                names: name_paths,
                id: path_of(&id)?,
            });
        }
        Ok(Json {
            envelopes: rules,
            asked_lists: lists,
            max_asked,
            max_name,
        })
    }

    /// Tool arguments given as JSON text, canonical (sorted keys, no whitespace, an envelope's
    /// inner value), as ``canonical_arguments`` writes them; None where Python should (not
    /// JSON, or a float: Python and serde_json write those differently).
    fn canonical(&self, text: &Bound<'_, PyString>) -> Option<String> {
        canonical_text(self, text.to_str().ok()?)
    }

    /// The (name, call id or "") of the tool calls a model's output messages (JSON text) ask
    /// for, at most `max_asked`; None where Python should read them (not a JSON list).
    pub fn asked<'py>(
        &self,
        py: Python<'py>,
        text: &Bound<'py, PyString>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Some(text) = text.to_str().ok().filter(|text| !long_digit_run(text)) else {
            return Ok(None);
        };
        // the messages' lists the tables name, parsed; everything else only checked
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let mut lists: Vec<Vec<Option<Value>>> = Vec::new();
        let messages = Messages {
            keys: &self.asked_lists,
            lists: &mut lists,
        };
        if deserializer.deserialize_any(messages).is_err() || deserializer.end().is_err() {
            return Ok(None);
        }
        let mut asked: Vec<(String, String)> = Vec::new();
        for message in &lists {
            for (rule, calls) in self.asked_lists.iter().zip(message) {
                let Some(Value::Array(calls)) = calls else {
                    continue;
                };
                for call in calls {
                    if let Some(wanted) = &rule.item_type {
                        match at_path(call, &rule.item_type_path) {
                            Some(Value::String(kind)) if kind == wanted => {}
                            _ => continue,
                        }
                    }
                    let name = rule
                        .names
                        .iter()
                        .find_map(|path| match at_path(call, path) {
                            Some(Value::String(name)) => Some(name),
                            _ => None,
                        });
                    let Some(name) = name else { continue };
                    if name.is_empty() || asked.len() >= self.max_asked {
                        continue;
                    }
                    let call_id = match at_path(call, &rule.id) {
                        Some(Value::String(id)) => cut(id, self.max_name),
                        _ => String::new(),
                    };
                    asked.push((cut(name, self.max_name), call_id));
                }
            }
        }
        Ok(Some(PyTuple::new(py, asked)?))
    }
}

impl Json {
    /// ``values._unwrapped``: the arguments inside the first envelope whose keys are all there.
    fn unwrapped(&self, map: &mut Map<String, Value>) -> Option<Value> {
        for (keys, inner) in &self.envelopes {
            if map.contains_key(inner) && keys.iter().all(|key| map.contains_key(key)) {
                return map.remove(inner);
            }
        }
        None
    }
}

/// ``values.stable_hash``: BLAKE2b with an 8-byte digest of the text's UTF-8, as a signed
/// big-endian 64-bit int; None for a text that is no UTF-8 (a lone surrogate: Python replaces it).
#[pyfunction]
fn stable_hash(text: &Bound<'_, PyString>) -> Option<i64> {
    Some(hash_text(text.to_str().ok()?))
}

/// ``stable_hash`` of a text that is UTF-8.
pub fn hash_text(text: &str) -> i64 {
    let mut hasher = Blake2bVar::new(8).expect("8 is a BLAKE2b digest size");
    hasher.update(text.as_bytes());
    let mut digest = [0u8; 8];
    hasher
        .finalize_variable(&mut digest)
        .expect("the digest is 8 bytes");
    i64::from_be_bytes(digest)
}

/// ``Json.canonical`` of a text that is UTF-8.
pub fn canonical_text(json: &Json, text: &str) -> Option<String> {
    let value = parsed(text)?;
    if has_float(&value) {
        return None;
    }
    let value = match value {
        Value::Object(mut map) => json.unwrapped(&mut map).unwrap_or(Value::Object(map)),
        other => other,
    };
    serde_json::to_string(&value).ok()
}

/// A JSON message list read for the lists at the keys the tables name (a message's lists in
/// `lists`, by key, None where absent; a repeated key keeps its last value, as Python's dict
/// does); every other value checked as JSON and dropped. Anything but a list is an error.
struct Messages<'a> {
    keys: &'a [AskedList],
    lists: &'a mut Vec<Vec<Option<Value>>>,
}

impl<'de> DeserializeSeed<'de> for Messages<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Messages<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON list of messages")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        while let Some(found) = items.next_element_seed(Message { keys: self.keys })? {
            if let Some(found) = found {
                self.lists.push(found);
            }
        }
        Ok(())
    }
}

/// One item of the list: an object's lists at the keys (None: no object).
struct Message<'a> {
    keys: &'a [AskedList],
}

impl<'de> DeserializeSeed<'de> for Message<'_> {
    type Value = Option<Vec<Option<Value>>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Message<'_> {
    type Value = Option<Vec<Option<Value>>>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found: Vec<Option<Value>> = vec![None; self.keys.len()];
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let Some(first) = self.keys.iter().position(|list| list.key == key) else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let value: Value = map.next_value()?;
            for (list, slot) in self.keys.iter().zip(found.iter_mut()).skip(first + 1) {
                if list.key == key {
                    *slot = Some(value.clone()); // (two rules on one key: rare)
                }
            }
            found[first] = Some(value);
        }
        Ok(Some(found))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Self::Value, A::Error> {
        while items.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// serde_json as this crate declares it: without `preserve_order` (a map's keys sorted, which
/// `canonical_text` writes as Python's `sort_keys` does) and `arbitrary_precision` (numbers
/// handed to the readers' visitors as numbers, `1e400` refused as Python's reading refuses
/// it). The relay's serde_json has both, and cargo unifies features across the packages of one
/// build: a build of the workspace with this crate's `python` feature (`--workspace
/// --all-features`) would read JSON otherwise than the install's (`native/otlp` alone). Such a
/// module refuses to load (the Python decode is used), so it cannot change a result.
fn serde_json_as_declared() -> PyResult<()> {
    let first = serde_json::from_str::<Value>(r#"{"b":0,"a":0}"#)
        .ok()
        .and_then(|value| value.as_object()?.keys().next().cloned());
    let plain = serde_json::from_str::<Value>("1e400").is_err();
    if first.as_deref() == Some("a") && plain {
        return Ok(());
    }
    Err(PyImportError::new_err(
        "watchdog.core.spans._native was built with serde_json's preserve_order or \
         arbitrary_precision (unified in from native/relay by a build of the whole workspace): \
         build native/otlp alone (pip install -e ., or cargo build -p watchdog-otlp)",
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    serde_json_as_declared()?;
    set_int_max_str_digits(m)?;
    m.add_function(wrap_pyfunction!(stable_hash, m)?)?;
    m.add_class::<Phrases>()?;
    m.add_class::<Searcher>()?;
    m.add_class::<Json>()?;
    Ok(())
}
