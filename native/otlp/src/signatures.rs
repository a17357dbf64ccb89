//! A run's tool-call signatures, folded in Rust: ``counts.tool_signatures`` (its Python twin,
//! the reference) for a tool call with an arguments hash. The run's own containers (its call
//! counts, its last calls, its cycle runs, its result counts) stay the Python dict and lists
//! the run holds, persists and copies; this reads and writes them through the C API, with
//! Python's equality and hashing of their keys, and answers what the twin answers. The bounds
//! are the run's (`fields.py`), handed over once.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Signatures {
    max_distinct: usize,
    max_cycle: usize,
}

#[pymethods]
impl Signatures {
    #[new]
    fn new(max_distinct: usize, max_cycle: usize) -> Self {
        Signatures {
            max_distinct,
            max_cycle,
        }
    }

    /// (the call's count, the cycle repeats, the result's count or 0): `tool_signatures`.
    fn fold(
        &self,
        call_counts: &Bound<'_, PyDict>,
        recent: &Bound<'_, PyList>,
        cycle_runs: &Bound<'_, PyList>,
        result_counts: &Bound<'_, PyDict>,
        call: &Bound<'_, PyAny>,
        result: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(i64, i64, i64)> {
        let py = call.py();
        // the call's count (_bump): within the bound, else 0
        let count = match call_counts.get_item(call)? {
            Some(count) => count.extract::<i64>()? + 1,
            None if call_counts.len() >= self.max_distinct => 0,
            None => 1,
        };
        if count > 0 {
            call_counts.set_item(call, count)?;
        }
        // the cycles (_track_cycle)
        let mut best = 0i64;
        let len = recent.len();
        for index in 0..self.max_cycle {
            let length = index + 1;
            if len >= length && recent.get_item(len - length)?.eq(call)? {
                let runs = cycle_runs.get_item(index)?.extract::<i64>()? + 1;
                cycle_runs.set_item(index, runs)?;
                let repeats = (runs + length as i64).div_euclid(length as i64);
                if repeats >= 2 && repeats > best {
                    best = repeats;
                }
            } else {
                cycle_runs.set_item(index, 0)?;
            }
        }
        recent.append(call)?;
        if recent.len() > self.max_cycle {
            recent.del_item(0)?;
        }
        // the result's count: the same result after other arguments
        let Some(result) = result else {
            return Ok((count, best, 0));
        };
        let counted = match result_counts.get_item(result)? {
            None => {
                if result_counts.len() >= self.max_distinct {
                    return Ok((count, best, 0));
                }
                result_counts.set_item(
                    result,
                    PyTuple::new(py, [1i64.into_pyobject(py)?.into_any(), call.clone()])?,
                )?;
                1
            }
            Some(entry) => {
                let entry = entry.cast_into::<PyTuple>()?;
                let seen = entry.get_item(0)?.extract::<i64>()?;
                if entry.get_item(1)?.ne(call)? {
                    let seen = seen + 1;
                    result_counts.set_item(
                        result,
                        PyTuple::new(py, [seen.into_pyobject(py)?.into_any(), call.clone()])?,
                    )?;
                    seen
                } else {
                    seen
                }
            }
        };
        Ok((count, best, counted))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Signatures>()?;
    Ok(())
}
