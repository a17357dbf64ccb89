//! How a span failed, or stopped at a limit its status or exception names, where it is a table
//! read: ``conventions._fill_role``'s first half and ``failures._fill_error``. The error's
//! brief and its masked message are the Python ``redact.brief`` and ``redact.mask``'s (called
//! from here: one redaction, written once), its limit patterns the compiled `Phrases`. An
//! exception in an exporter's wrapper (unwrapped by a regex and Python's literal reading), a
//! text the compiled phrases leave to Python's `re`, or an attribute that reports the error or
//! its limit in JSON is left to Python: `status` answers None, none set.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::kernels::{hash_text, py_strings, Phrases};
use crate::wire;

const STATUS_CODE_ERROR: i32 = 2;

/// The tables a failure is read by, handed over once (``watchdog.core.spans.native``).
#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Failures {
    /// ``WRAPPED_EXCEPTION_TYPES``
    wrapped: Vec<String>,
    /// ``LIMIT_STATUS`` and ``LIMIT_PHRASES`` compiled (None: a pattern the compiled matcher
    /// does not read), and the limit each names
    status: Option<Py<Phrases>>,
    status_limits: Vec<String>,
    phrases: Option<Py<Phrases>>,
    phrase_limits: Vec<String>,
    /// ``LIMIT_EXCEPTIONS``
    limit_exceptions: Vec<String>,
    /// ``ERROR_TYPE_KEYS``
    error_type_keys: Vec<Py<PyString>>,
    /// the attributes of ``ERROR_JSON`` and ``LIMIT_ERROR_JSON``: an error reported there is
    /// Python's
    reported_keys: Vec<Py<PyString>>,
    brief: Py<PyAny>,
    mask: Py<PyAny>,
    max_name_chars: usize,
    max_error_chars: usize,
    max_phrase_chars: usize,
}

#[pymethods]
impl Failures {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        wrapped: Vec<String>,
        status: Option<Py<Phrases>>,
        status_limits: Vec<String>,
        phrases: Option<Py<Phrases>>,
        phrase_limits: Vec<String>,
        limit_exceptions: Vec<String>,
        error_type_keys: &Bound<'_, PyAny>,
        reported_keys: &Bound<'_, PyAny>,
        brief: Py<PyAny>,
        mask: Py<PyAny>,
        max_name_chars: usize,
        max_error_chars: usize,
        max_phrase_chars: usize,
    ) -> PyResult<Self> {
        Ok(Failures {
            wrapped,
            status,
            status_limits,
            phrases,
            phrase_limits,
            limit_exceptions,
            error_type_keys: py_strings(error_type_keys)?,
            reported_keys: py_strings(reported_keys)?,
            brief,
            mask,
            max_name_chars,
            max_error_chars,
            max_phrase_chars,
        })
    }
}

/// The span's status and events, as the decode holds them.
pub struct Status<'a> {
    pub code: i32,
    pub message: &'a str,
    pub events: &'a [wire::Event],
    pub data: &'a [u8],
}

impl Status<'_> {
    /// An error, a status text or an event: something for `status` to read.
    pub fn eventful(&self) -> bool {
        self.code == STATUS_CODE_ERROR || !self.message.is_empty() || !self.events.is_empty()
    }

    /// ``failures._exception``: the type and message of the first ``exception`` event ("" as
    /// None: every reader takes them as truth values).
    fn exception(&self) -> (Option<&str>, Option<&str>) {
        let data = self.data;
        let Some(event) = self
            .events
            .iter()
            .find(|event| event.name.text(data) == "exception")
        else {
            return (None, None);
        };
        let (mut exc_type, mut exc_message) = ("", "");
        for kv in &event.attributes {
            let text = match kv.value {
                wire::AnyValue::String(slice) => slice.text(data),
                _ => "",
            };
            match kv.key.text(data) {
                "exception.type" => exc_type = text,
                "exception.message" => exc_message = text,
                _ => {}
            }
        }
        (
            (!exc_type.is_empty()).then_some(exc_type),
            (!exc_message.is_empty()).then_some(exc_message),
        )
    }
}

/// What the status says of the record: a failure, a limit stop, or nothing.
pub struct Failure<'py> {
    error: Option<Error<'py>>,
    limit_stop: Option<String>,
}

struct Error<'py> {
    error_type: String,
    message: Bound<'py, PyAny>,
    signature: i64,
    exception_id: i64,
}

impl Failure<'_> {
    /// Whether it fails the record, and whether it stops it at a limit.
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    pub fn stopped(&self) -> bool {
        self.limit_stop.is_some()
    }

    pub fn set(self, py: Python<'_>, record: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Some(error) = self.error {
            record.setattr(intern!(py, "error"), true)?;
            record.setattr(intern!(py, "error_type"), error.error_type)?;
            record.setattr(intern!(py, "error_message"), error.message)?;
            record.setattr(intern!(py, "error_signature"), error.signature)?;
            record.setattr(intern!(py, "exception_id"), error.exception_id)?;
        }
        if let Some(limit) = self.limit_stop {
            record.setattr(intern!(py, "limit_stop"), limit)?;
        }
        Ok(())
    }
}

/// Why a fact is left to Python.
struct Unsure;

fn short_type(error_type: &str) -> &str {
    error_type.rsplit('.').next().unwrap_or(error_type)
}

fn cut(text: &str, chars: usize) -> &str {
    match text.char_indices().nth(chars) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

impl Failures {
    fn is_limit(&self, error_type: &str) -> bool {
        self.limit_exceptions
            .iter()
            .any(|limit| limit == short_type(error_type))
    }

    /// ``outcome.phrase_limit``
    fn phrase_limit(&self, py: Python<'_>, text: &str) -> Result<Option<String>, Unsure> {
        let phrases = self.phrases.as_ref().ok_or(Unsure)?;
        match phrases
            .bind(py)
            .get()
            .first_of(cut(text, self.max_phrase_chars))
        {
            -2 => Err(Unsure),
            -1 => Ok(None),
            index => Ok(Some(self.phrase_limits[index as usize].clone())),
        }
    }

    /// ``outcome.status_limit``
    fn status_limit(&self, py: Python<'_>, description: &str) -> Result<Option<String>, Unsure> {
        let status = self.status.as_ref().ok_or(Unsure)?;
        match status.bind(py).get().first_of(description) {
            -2 => return Err(Unsure),
            -1 => {}
            index => return Ok(Some(self.status_limits[index as usize].clone())),
        }
        if let Some((head, _)) = description.split_once(':') {
            let head = short_type(head.trim());
            if self.is_limit(head) {
                return Ok(Some(head.to_owned()));
            }
        }
        self.phrase_limit(py, description)
    }

    /// Whether one of `keys` is among the attributes.
    fn any_of(py: Python<'_>, keys: &[Py<PyString>], attrs: &Bound<'_, PyDict>) -> PyResult<bool> {
        for key in keys {
            if attrs.contains(key.bind(py))? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// What `status` says of a span's record, or None where Python reads it (see the module's
/// comment).
pub fn status<'py>(
    py: Python<'py>,
    failures: &Failures,
    status: &Status<'_>,
    attrs: &Bound<'py, PyDict>,
) -> PyResult<Option<Failure<'py>>> {
    let (exc_type, exc_message) = status.exception();
    if exc_message.is_some()
        && exc_type.is_some_and(|found| failures.wrapped.iter().any(|wrapped| wrapped == found))
    {
        return Ok(None); // (maybe an exporter's wrapper: unwrapped_exception)
    }
    if status.code == STATUS_CODE_ERROR {
        return error(py, failures, status.message, exc_type, exc_message, attrs);
    }
    let limit = if !status.message.is_empty() {
        failures.status_limit(py, status.message)
    } else if exc_type.is_some_and(|found| failures.is_limit(found)) {
        Ok(exc_type.map(|found| short_type(found).to_owned()))
    } else if let Some(message) = exc_message {
        failures.phrase_limit(py, message)
    } else {
        Ok(None)
    };
    Ok(limit.ok().map(|limit_stop| Failure {
        error: None,
        limit_stop,
    }))
}

/// ``failures._fill_error``
fn error<'py>(
    py: Python<'py>,
    failures: &Failures,
    status_message: &str,
    exc_type: Option<&str>,
    exc_message: Option<&str>,
    attrs: &Bound<'py, PyDict>,
) -> PyResult<Option<Failure<'py>>> {
    let status_stop = if status_message.is_empty() {
        None
    } else {
        match failures.status_limit(py, status_message) {
            Ok(found) => found,
            Err(Unsure) => return Ok(None),
        }
    };
    let mut named = None;
    for key in &failures.error_type_keys {
        let Some(value) = attrs.get_item(key.bind(py))? else {
            continue;
        };
        if value.is_none() {
            continue;
        }
        let Ok(text) = value.cast::<PyString>() else {
            return Ok(None); // (str() of another value: Python's)
        };
        let text = text.to_str()?;
        if !text.is_empty() {
            named = Some(text.to_owned());
            break;
        }
    }
    let error_type = named
        .or_else(|| exc_type.map(str::to_owned))
        .or_else(|| status_stop.clone())
        .unwrap_or_else(|| "error".to_owned());
    let mut message = exc_message.unwrap_or(status_message);
    if message.is_empty() && Failures::any_of(py, &failures.reported_keys, attrs)? {
        return Ok(None); // (the framework's own report of the error: reported_error)
    }
    // (_failed)
    let prefix = format!("{}: ", short_type(&error_type));
    if let Some(rest) = message.strip_prefix(prefix.as_str()) {
        message = rest;
    }
    let brief = failures
        .brief
        .bind(py)
        .call1((message, failures.max_error_chars))?;
    let masked = failures.mask.bind(py).call1((&brief,))?;
    let Ok(masked) = masked.cast::<PyString>()?.to_str() else {
        return Ok(None);
    };
    let signature = hash_text(&format!("{error_type}:{masked}"));
    let exception_id = hash_text(&format!("{}\0{message}", exc_type.unwrap_or(&error_type)));
    let limit_stop = if failures.is_limit(&error_type) {
        Some(short_type(&error_type).to_owned())
    } else if exc_type.is_some_and(|found| failures.is_limit(found)) {
        exc_type.map(|found| short_type(found).to_owned())
    } else if status_stop.is_some() {
        status_stop
    } else {
        let by_message = match exc_message {
            Some(text) => match failures.phrase_limit(py, text) {
                Ok(found) => found,
                Err(Unsure) => return Ok(None),
            },
            None => None,
        };
        if by_message.is_none() && Failures::any_of(py, &failures.reported_keys, attrs)? {
            return Ok(None); // (a limit told in an attribute's JSON: error_limit)
        }
        by_message
    };
    Ok(Some(Failure {
        error: Some(Error {
            error_type: cut(&error_type, failures.max_name_chars).to_owned(),
            message: brief,
            signature,
            exception_id,
        }),
        limit_stop,
    }))
}
