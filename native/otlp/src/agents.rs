//! An agent's facts (``agents._fill_agent``): its finish reason (its own, or its output's
//! last message's), its answer (the output's text parts where it is a GenAI message list, else
//! the output as written; none where a limit stopped it silently, its output is empty or is an
//! unawaited coroutine's repr), the limit its finish reason names, a cap it was asked for, its
//! message count, turns and caller. What a table's regex or a parse of an attribute decides
//! (``outcome._state_limit`` where one of its attributes is there, ``answer_limit`` where its
//! patterns are no ASCII match, ``error_limit`` where an error attribute may name a limit) is
//! asked of the Python function itself; a span whose output reports its model calls
//! (``CONVERSATION_OUTPUTS``), an agent a loop's cap is read for (``LOOP_CAPS``), an output that
//! is no text, or JSON the two read differently is left to ``_fill_agent``: `facts` answers
//! None, none set.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyString, PyTuple};

use crate::answers::{self, Doc, Ending, Output, Unsure};
use crate::kernels::{py_strings, Phrases};
use crate::model_calls::{count_messages, cut, name, reason, tokens};

/// The tables an agent's facts are read by, handed over once (``watchdog.core.spans.native``).
#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Agents {
    /// ``F_AGENT_OUTPUT``, ``F_FINISH_REASON``, ``F_MESSAGES``, ``F_TURN_COUNT``, ``F_CALLER``
    places: [usize; 5],
    /// ``LIMIT_FINISH_REASONS`` (lower case)
    limit_reasons: Vec<String>,
    /// the attributes ``_state_limit`` reads, and it
    state_keys: Vec<Py<PyString>>,
    state_limit: Py<PyAny>,
    /// ``LIMIT_ANSWER_PATTERNS`` anchored (None: one Rust's regex reads otherwise) and their
    /// limits, ``LIMIT_ANSWERS``, ``PROMPT_TAIL_CHARS``; ``answer_limit`` where they cannot say
    answer_patterns: Option<Py<Phrases>>,
    answer_pattern_limits: Vec<String>,
    limit_answers: Vec<(String, String)>,
    tail_chars: usize,
    answer_limit: Py<PyAny>,
    /// ``LIMIT_ERROR_JSON``: (attribute, the JSON key its path ends with, as JSON text, or
    /// None); ``error_limit`` where one may name a limit
    error_rules: Vec<(Py<PyString>, Option<String>)>,
    error_limit: Py<PyAny>,
    /// ``CAP_REQUESTS``, ``HIDDEN_ANSWERS``, ``LOOP_CAPS``' span names, ``CONVERSATION_OUTPUTS``
    /// (attribute, marker as JSON text), ``EMPTY_OUTPUTS``
    cap_requests: Vec<(Py<PyString>, String)>,
    hidden_answers: Vec<Py<PyString>>,
    loop_caps: Vec<String>,
    conversations: Vec<(Py<PyString>, String)>,
    empty_outputs: Vec<String>,
    /// ``HIDDEN_CONTENT``, ``HIDDEN_CONTENT_CHARS``, ``redact.brief``, ``MAX_BRIEF_CHARS``,
    /// ``MAX_REASON_CHARS``, ``MAX_NAME_CHARS``, ``MAX_TOKENS_PER_CALL``
    hidden: Vec<String>,
    hidden_chars: usize,
    brief: Py<PyAny>,
    max_brief_chars: usize,
    max_reason_chars: usize,
    max_name_chars: usize,
    max_tokens: i64,
}

#[pymethods]
impl Agents {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        places: [usize; 5],
        limit_reasons: Vec<String>,
        state_keys: &Bound<'_, PyAny>,
        state_limit: Py<PyAny>,
        answer_patterns: Option<Py<Phrases>>,
        answer_pattern_limits: Vec<String>,
        limit_answers: Vec<(String, String)>,
        tail_chars: usize,
        answer_limit: Py<PyAny>,
        error_rules: Vec<(Bound<'_, PyString>, Option<String>)>,
        error_limit: Py<PyAny>,
        cap_requests: Vec<(Bound<'_, PyString>, String)>,
        hidden_answers: &Bound<'_, PyAny>,
        loop_caps: Vec<String>,
        conversations: Vec<(Bound<'_, PyString>, String)>,
        empty_outputs: Vec<String>,
        hidden: Vec<String>,
        hidden_chars: usize,
        brief: Py<PyAny>,
        max_brief_chars: usize,
        max_reason_chars: usize,
        max_name_chars: usize,
        max_tokens: i64,
    ) -> PyResult<Self> {
        Ok(Agents {
            places,
            limit_reasons,
            state_keys: py_strings(state_keys)?,
            state_limit,
            answer_patterns,
            answer_pattern_limits,
            limit_answers,
            tail_chars,
            answer_limit,
            error_rules: error_rules
                .into_iter()
                .map(|(key, marker)| (key.unbind(), marker))
                .collect(),
            error_limit,
            cap_requests: cap_requests
                .into_iter()
                .map(|(key, name)| (key.unbind(), name))
                .collect(),
            hidden_answers: py_strings(hidden_answers)?,
            loop_caps,
            conversations: conversations
                .into_iter()
                .map(|(key, marker)| (key.unbind(), marker))
                .collect(),
            empty_outputs,
            hidden,
            hidden_chars,
            brief,
            max_brief_chars,
            max_reason_chars,
            max_name_chars,
            max_tokens,
        })
    }
}

/// An agent's facts, made before any is set.
pub struct AgentFacts<'py> {
    ending: Ending<'py>,
    cap_request: Option<String>,
    model_calls: i64,
    caller: Option<Bound<'py, PyAny>>,
}

impl AgentFacts<'_> {
    pub fn set(self, py: Python<'_>, record: &Bound<'_, PyAny>) -> PyResult<()> {
        self.ending.set(py, record)?;
        if let Some(cap) = self.cap_request {
            record.setattr(intern!(py, "cap_request"), cap)?;
        }
        if self.model_calls != 0 {
            record.setattr(intern!(py, "model_calls"), self.model_calls)?;
        }
        if let Some(caller) = self.caller {
            record.setattr(intern!(py, "caller"), caller)?;
        }
        Ok(())
    }
}

/// ``agents.UNAWAITED.fullmatch``: ``<coroutine object NAME at 0xHEX>`` (or a generator's);
/// Unsure where the name is not ASCII (``\w`` is Python's Unicode class).
fn unawaited(text: &str) -> Result<bool, Unsure> {
    let Some(rest) = text.strip_prefix('<') else {
        return Ok(false);
    };
    let Some(rest) = ["coroutine", "generator", "async_generator"]
        .iter()
        .find_map(|kind| rest.strip_prefix(kind)?.strip_prefix(" object "))
    else {
        return Ok(false);
    };
    let Some((object, rest)) = rest.split_once(' ') else {
        return Ok(false);
    };
    if !object.is_ascii() {
        return Err(Unsure);
    }
    let named = !object.is_empty()
        && object
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"_.<>".contains(&byte));
    let Some(hex) = rest
        .strip_prefix("at 0x")
        .and_then(|rest| rest.strip_suffix('>'))
    else {
        return Ok(false);
    };
    Ok(named
        && !hex.is_empty()
        && hex
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)))
}

/// A str fact or None (Python's value where it is the limit it names: text).
fn text_or_none<'py>(value: Bound<'py, PyAny>) -> Result<Option<Bound<'py, PyAny>>, Unsure> {
    if value.is_none() {
        return Ok(None);
    }
    if !value.is_instance_of::<PyString>() {
        return Err(Unsure);
    }
    Ok(Some(value))
}

/// The facts of an agent's span, or None where Python reads them (see the module's comment);
/// `failed`, `stopped`: its status fails it, stops it at a limit.
pub fn facts<'py>(
    py: Python<'py>,
    agents: &Agents,
    attrs: &Bound<'py, PyDict>,
    firsts: &Bound<'py, PyTuple>,
    span_name: &str,
    (failed, stopped): (bool, bool),
) -> PyResult<Option<AgentFacts<'py>>> {
    Ok(read(py, agents, attrs, firsts, span_name, failed, stopped)?.ok())
}

fn read<'py>(
    py: Python<'py>,
    agents: &Agents,
    attrs: &Bound<'py, PyDict>,
    firsts: &Bound<'py, PyTuple>,
    span_name: &str,
    failed: bool,
    stopped: bool,
) -> PyResult<Result<AgentFacts<'py>, Unsure>> {
    let [output_at, finish_at, messages_at, turns_at, caller_at] = agents.places;
    if agents.loop_caps.iter().any(|name| name == span_name) {
        return Ok(Err(Unsure)); // (its loop's cap: read where its output is hidden)
    }
    for (key, marker) in &agents.conversations {
        if let Some(value) = attrs.get_item(key.bind(py))? {
            if let Ok(text) = value.cast::<PyString>() {
                let Ok(text) = text.to_str() else {
                    return Ok(Err(Unsure));
                };
                if text.contains(marker.as_str()) && text.contains("\"messages\"") {
                    return Ok(Err(Unsure)); // (a conversation that reports its model calls)
                }
            }
        }
    }
    let raw = firsts.get_item(output_at)?;
    let output = if raw.is_none() {
        None
    } else {
        let Ok(text) = raw.cast::<PyString>() else {
            return Ok(Err(Unsure)); // (no text: a list, a number; Python's)
        };
        let Ok(plain) = text.to_str() else {
            return Ok(Err(Unsure));
        };
        let hidden = plain.chars().count() <= agents.hidden_chars
            && agents.hidden.iter().any(|hidden| hidden == plain);
        (!hidden).then_some((text.clone(), plain))
    };
    let parsed = match output.as_ref().map(|(_, plain)| Output::read(plain)) {
        Some(Ok(parsed)) => Some(parsed),
        Some(Err(_)) => return Ok(Err(Unsure)),
        None => None,
    };
    let finish = firsts.get_item(finish_at)?;
    let finish_reason = if finish.is_none() {
        match (&output, &parsed) {
            (Some((_, plain)), Some(parsed)) if plain.contains("\"finish_reason\"") => {
                match parsed.finish_reason() {
                    None => None,
                    Some(Doc::Text(text)) if !text.starts_with('[') => {
                        Some(PyString::new(py, cut(text, agents.max_reason_chars)).into_any())
                    }
                    Some(_) => return Ok(Err(Unsure)),
                }
            }
            _ => None,
        }
    } else {
        match reason(py, &finish, agents.max_reason_chars) {
            Ok(found) => found,
            Err(_) => return Ok(Err(Unsure)),
        }
    };
    // outcome.agent_limit: its finish reason's limit, else its state's (Python's regexes)
    let mut limit = None;
    if let Some(finish) = &finish_reason {
        let text = finish.cast::<PyString>()?.to_str()?;
        if !text.is_ascii() {
            return Ok(Err(Unsure)); // (str.lower of Unicode)
        }
        if agents.limit_reasons.contains(&text.to_ascii_lowercase()) {
            limit = Some(finish.clone());
        }
    }
    if limit.is_none() {
        let mut read = false;
        for key in &agents.state_keys {
            read = read || attrs.contains(key.bind(py))?;
        }
        if read {
            match text_or_none(agents.state_limit.bind(py).call1((attrs,))?) {
                Ok(found) => limit = found,
                Err(unsure) => return Ok(Err(unsure)),
            }
        }
    }
    // outcome.answer_limit: the framework's text where no answer came
    let stand_in = match &output {
        None => None,
        Some((text, plain)) => {
            let index = match &agents.answer_patterns {
                Some(patterns) => patterns.get().first_of(plain),
                None => -2,
            };
            let found = if index >= 0 {
                Ok(Some(agents.answer_pattern_limits[index as usize].as_str()))
            } else if index == -1 {
                answers::prompt_limit(plain, &agents.limit_answers, &[], agents.tail_chars)
            } else {
                Err(answers::Unsure)
            };
            match found {
                Ok(found) => found.map(|limit| PyString::new(py, limit).into_any()),
                Err(_) => match text_or_none(agents.answer_limit.bind(py).call1((text,))?) {
                    Ok(found) => found,
                    Err(unsure) => return Ok(Err(unsure)),
                },
            }
        }
    };
    let mut limit_stop = None;
    if !stopped {
        limit_stop = match (&limit, &stand_in) {
            (Some(limit), _) if limit.is_truthy()? => Some(limit.clone()),
            (_, Some(stand_in)) if stand_in.is_truthy()? => Some(stand_in.clone()),
            _ => {
                let mut named = false;
                for (key, marker) in &agents.error_rules {
                    let Some(value) = attrs.get_item(key.bind(py))? else {
                        continue;
                    };
                    if value.is_none() {
                        continue;
                    }
                    named = named
                        || match (marker, value.cast::<PyString>()) {
                            (Some(marker), Ok(text)) => text
                                .to_str()
                                .map_or(true, |text| text.contains(marker.as_str())),
                            _ => true,
                        };
                }
                if named {
                    match text_or_none(agents.error_limit.bind(py).call1((attrs,))?) {
                        Ok(found) => found,
                        Err(unsure) => return Ok(Err(unsure)),
                    }
                } else {
                    None
                }
            }
        };
    }
    let mut cap_request = None;
    for (key, name) in &agents.cap_requests {
        if let Some(value) = attrs.get_item(key.bind(py))? {
            if value.is_instance_of::<PyInt>() {
                cap_request = Some(name.clone());
                break;
            }
        }
    }
    let stopped_silent = match (&limit, &finish_reason) {
        (Some(limit), Some(finish)) => limit.eq(finish)?,
        _ => false,
    } || stand_in.is_some();
    let (mut final_answer, mut final_output) = (false, None);
    if let (Some((_, plain)), Some(parsed)) = (&output, &parsed) {
        let empty = agents
            .empty_outputs
            .iter()
            .any(|empty| empty == answers::strip(plain));
        if !stopped_silent && !failed && !empty && parsed.has_text() {
            // (a GenAI message list by its text parts; anything else as it is written)
            let text = if plain.starts_with("[{") && plain.contains("\"parts\"") {
                parsed.answer_text().unwrap_or_else(|| (*plain).to_owned())
            } else {
                (*plain).to_owned()
            };
            match unawaited(&text) {
                Ok(true) => {}
                Ok(false) => {
                    final_answer = true;
                    final_output = Some(
                        agents
                            .brief
                            .bind(py)
                            .call1((text, agents.max_brief_chars))?,
                    );
                }
                Err(unsure) => return Ok(Err(unsure)),
            }
        }
    } else if output.is_none() && !failed && !stopped && limit_stop.is_none() && !raw.is_none() {
        // a hidden output of an agent span that ends OK only with its answer (crewai's)
        for key in &agents.hidden_answers {
            if attrs.contains(key.bind(py))? {
                final_answer = true;
                break;
            }
        }
    }
    let Ok(messages) = count_messages(&firsts.get_item(messages_at)?) else {
        return Ok(Err(Unsure));
    };
    let Ok(model_calls) = tokens(&firsts.get_item(turns_at)?, agents.max_tokens) else {
        return Ok(Err(Unsure));
    };
    let caller = firsts.get_item(caller_at)?;
    let caller = if caller.is_truthy()? {
        match name(py, &caller, agents.max_name_chars) {
            Ok(caller) => caller,
            Err(_) => return Ok(Err(Unsure)),
        }
    } else {
        None
    };
    Ok(Ok(AgentFacts {
        ending: Ending {
            finish_reason,
            limit_stop,
            final_answer,
            final_output,
            messages,
        },
        cap_request,
        model_calls,
        caller,
    }))
}
