//! ``redact.brief`` where it has nothing to redact: a text cut to a brief's length, found free
//! of every anchor a secret can start at (``redact.ANCHORS``, handed over once) in one pass of
//! the compiled matcher; the Python ``brief`` (the reference) reads every other text. Python's
//! ``redact`` returns a text whose lower case holds no anchor as it is, so for an ASCII text
//! (its lower case its ASCII lower case, a character a byte) the two answer the same.

use pyo3::prelude::*;
use pyo3::types::PyString;

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Briefs {
    anchors: regex::bytes::Regex,
    python: Py<PyAny>,
}

#[pymethods]
impl Briefs {
    /// ``anchors``: the words, in lower case; ``python``: ``redact.brief``.
    #[new]
    fn new(anchors: Vec<String>, python: Py<PyAny>) -> PyResult<Self> {
        let pattern = anchors
            .iter()
            .map(|word| regex::escape(word))
            .collect::<Vec<_>>()
            .join("|");
        let anchors = regex::bytes::RegexBuilder::new(&pattern)
            .case_insensitive(true)
            .unicode(false)
            .build()
            .map_err(|error| pyo3::exceptions::PyValueError::new_err(error.to_string()))?;
        Ok(Briefs { anchors, python })
    }

    /// ``brief(text, limit)``.
    fn __call__<'py>(
        &self,
        text: &Bound<'py, PyString>,
        limit: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = text.py();
        if limit > 0 {
            if let Ok(whole) = text.to_str() {
                if whole.is_ascii() {
                    let cut = &whole[..whole.len().min(limit.saturating_mul(4))];
                    if !self.anchors.is_match(cut.as_bytes()) {
                        if cut.len() > limit {
                            let shown = format!("{}…", &cut[..limit - 1]);
                            return Ok(PyString::new(py, &shown).into_any());
                        }
                        if cut.len() == whole.len() {
                            return Ok(text.clone().into_any());
                        }
                        return Ok(PyString::new(py, cut).into_any());
                    }
                }
            }
        }
        self.python.bind(py).call1((text, limit))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Briefs>()?;
    Ok(())
}
