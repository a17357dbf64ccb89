//! A model call's facts (``model_calls._fill_llm``) where they are table reads: a call whose
//! finish reason says it asked for tools or stopped at a limit, with its input messages as
//! JSON text (counted by their ``"role"`` keys) and its tool requests where the JSON kernel
//! reads them (`Json::asked`): its tokens, cost and cached tokens, model, provider, response
//! id, finish reason, limit stop or tool request and the tools asked for, its message count
//! and prompt; messages flattened into keys (``llm.input_messages.{i}...``) counted, and the
//! tool calls asked for read, from the span's keys as the decode holds them. Anything else (an
//! answer, whose text and request Python reads; no finish reason; a usage object; a number
//! written as text; a model named in JSON; an output that may ask only for the framework's
//! answer tool) is left to the Python ``_fill_llm``: `facts` answers None, none set.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::answers::{self, Doc, Ending, Output, Unsure};
use crate::kernels::{py_strings, Json};
use crate::wire;

/// ``model_calls.ASKED_TOOL_FLAT``: <prefix>{i}<infix>{j}<name or id suffix>.
struct AskedFlat {
    prefix: String,
    infix: String,
    suffixes: [String; 2],
}

/// Where ``_fill_llm`` reads each fact: its index in the first-present facts
/// (``attributes.FIRST_FACTS``).
struct Places {
    finish: usize,
    output_messages: usize,
    llm_output: usize,
    messages: usize,
    input_tokens: usize,
    output_tokens: usize,
    total_tokens: usize,
    reported_cost: usize,
    cache_read: usize,
    cache_write: usize,
    model: usize,
    provider: usize,
    response_id: usize,
    prompt: usize,
    outcome: usize,
    messages_delta: usize,
    llm_input: usize,
    answer_text: usize,
    prompt_text: usize,
}

/// The tables a model call's facts are read by, handed over once
/// (``watchdog.core.spans.native``).
#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct ModelCalls {
    places: Places,
    /// ``TOOL_FINISH_REASONS``, ``LIMIT_FINISH_REASONS`` (lower case)
    tool_reasons: Vec<String>,
    limit_reasons: Vec<String>,
    /// the attributes of ``USAGE_JSON``: a call with no token counts and one of them is
    /// Python's
    usage_keys: Vec<Py<PyString>>,
    /// ``REPORTED_COST_KEYS`` is not empty: the cost and cached tokens are read
    reports_cost: bool,
    /// ``ANSWER_TOOL_SCAN`` (None: no ``ANSWER_TOOL_MARKERS``)
    answer_tool_scan: Option<String>,
    max_reason_chars: usize,
    max_name_chars: usize,
    max_tokens: i64,
    max_cost: f64,
    /// ``FLAT_INPUT_PREFIXES``, ``FLAT_OUTPUT_PREFIXES``, ``FLAT_TOOL_CALLS``,
    /// ``ASKED_TOOL_FLAT``, ``MAX_ASKED_TOOLS``; ``MESSAGES_DELTA_KEYS`` is not empty
    flat_inputs: Vec<String>,
    flat_outputs: Vec<String>,
    flat_tool_calls: String,
    asked_flat: Vec<AskedFlat>,
    max_asked: usize,
    reports_delta: bool,
    answers: Answers,
}

/// ``Answers``' tables as handed over: (``ANSWER_FINISH_REASONS``, ``OUTPUT_ENVELOPES``'
/// attributes, ``HIDDEN_CONTENT``, ``HIDDEN_CONTENT_CHARS``, ``brief``, ``MAX_BRIEF_CHARS``,
/// ``LIMIT_PROMPTS``, ``LIMIT_SYSTEM_PROMPTS``, ``PROMPT_TAIL_CHARS``, ``LLM_SPAN_SUFFIXES``,
/// ``SpanKind.OTHER``, (``ANSWER_TOOLS``, ``ANSWER_TOOL_PREFIXES``, ``ANSWER_TOOL_MARKERS``)).
type AnswerTables<'py> = (
    Vec<String>,
    Bound<'py, PyAny>,
    Vec<String>,
    usize,
    Py<PyAny>,
    usize,
    Vec<(String, String)>,
    Vec<(String, String)>,
    usize,
    Vec<String>,
    Py<PyAny>,
    (Vec<String>, Vec<String>, Vec<String>),
);

/// What an answer's facts are read by (``outcome.fill_model_outcome``, ``_fill_llm``'s
/// answer text and ``prompt_limit``).
struct Answers {
    /// ``ANSWER_FINISH_REASONS`` (lower case)
    reasons: Vec<String>,
    /// the attributes of ``OUTPUT_ENVELOPES``: one holding an object is Python's
    envelope_keys: Vec<Py<PyString>>,
    /// ``HIDDEN_CONTENT``, ``HIDDEN_CONTENT_CHARS``
    hidden: Vec<String>,
    hidden_chars: usize,
    /// ``redact.brief``, ``MAX_BRIEF_CHARS``
    brief: Py<PyAny>,
    max_brief_chars: usize,
    /// ``LIMIT_PROMPTS``, ``LIMIT_SYSTEM_PROMPTS``, ``PROMPT_TAIL_CHARS``
    last_prompts: Vec<(String, String)>,
    system_prompts: Vec<(String, String)>,
    prompt_chars: usize,
    /// ``LLM_SPAN_SUFFIXES``; ``SpanKind.OTHER``: a call that carries only its input is none
    call_suffixes: Vec<String>,
    other_kind: Py<PyAny>,
    /// ``ANSWER_TOOLS``, ``ANSWER_TOOL_PREFIXES``, ``ANSWER_TOOL_MARKERS``: a request for
    /// these alone is the answer
    tools: Vec<String>,
    tool_prefixes: Vec<String>,
    tool_markers: Vec<String>,
}

#[pymethods]
impl ModelCalls {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        places: [usize; 19],
        tool_reasons: Vec<String>,
        limit_reasons: Vec<String>,
        usage_keys: &Bound<'_, PyAny>,
        reports_cost: bool,
        answer_tool_scan: Option<String>,
        max_reason_chars: usize,
        max_name_chars: usize,
        max_tokens: i64,
        max_cost: f64,
        flat_inputs: Vec<String>,
        flat_outputs: Vec<String>,
        flat_tool_calls: String,
        asked_flat: Vec<(String, String, String, String)>,
        max_asked: usize,
        reports_delta: bool,
        answers: AnswerTables<'_>,
    ) -> PyResult<Self> {
        let [finish, output_messages, llm_output, messages, input_tokens, output_tokens, total_tokens, reported_cost, cache_read, cache_write, model, provider, response_id, prompt, outcome, messages_delta, llm_input, answer_text, prompt_text] =
            places;
        let (
            reasons,
            envelope_keys,
            hidden,
            hidden_chars,
            brief,
            max_brief_chars,
            last_prompts,
            system_prompts,
            prompt_chars,
            call_suffixes,
            other_kind,
            (tools, tool_prefixes, tool_markers),
        ) = answers;
        Ok(ModelCalls {
            places: Places {
                finish,
                output_messages,
                llm_output,
                messages,
                input_tokens,
                output_tokens,
                total_tokens,
                reported_cost,
                cache_read,
                cache_write,
                model,
                provider,
                response_id,
                prompt,
                outcome,
                messages_delta,
                llm_input,
                answer_text,
                prompt_text,
            },
            tool_reasons,
            limit_reasons,
            usage_keys: py_strings(usage_keys)?,
            reports_cost,
            answer_tool_scan,
            max_reason_chars,
            max_name_chars,
            max_tokens,
            max_cost,
            flat_inputs,
            flat_outputs,
            flat_tool_calls,
            asked_flat: asked_flat
                .into_iter()
                .map(|(prefix, infix, name, id)| AskedFlat {
                    prefix,
                    infix,
                    suffixes: [name, id],
                })
                .collect(),
            max_asked,
            reports_delta,
            answers: Answers {
                reasons,
                envelope_keys: py_strings(&envelope_keys)?,
                hidden,
                hidden_chars,
                brief,
                max_brief_chars,
                last_prompts,
                system_prompts,
                prompt_chars,
                call_suffixes,
                other_kind,
                tools,
                tool_prefixes,
                tool_markers,
            },
        })
    }
}

/// A model call's facts, made before any is set.
pub struct LlmFacts<'py> {
    /// ``SpanKind.OTHER`` where the call is none (nothing else set but its response id)
    kind: Option<Bound<'py, PyAny>>,
    response_id: Option<Bound<'py, PyAny>>,
    input_tokens: i64,
    output_tokens: i64,
    reported_cost: Option<f64>,
    cache_read: i64,
    cache_write: i64,
    model: Option<Bound<'py, PyAny>>,
    provider: Option<Bound<'py, PyAny>>,
    /// its finish reason, the limit it or its prompt names, its answer, its message count
    ending: Ending<'py>,
    /// it asked for tools (these, where read)
    requested_tools: bool,
    asked: Option<Bound<'py, PyTuple>>,
    messages_delta: i64,
    prompt: Bound<'py, PyAny>,
}

impl LlmFacts<'_> {
    pub fn set(self, py: Python<'_>, record: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Some(kind) = self.kind {
            record.setattr(intern!(py, "kind"), kind)?;
        }
        if let Some(response_id) = self.response_id {
            record.setattr(intern!(py, "response_id"), response_id)?;
        }
        if self.input_tokens != 0 {
            record.setattr(intern!(py, "input_tokens"), self.input_tokens)?;
        }
        if self.output_tokens != 0 {
            record.setattr(intern!(py, "output_tokens"), self.output_tokens)?;
        }
        if let Some(cost) = self.reported_cost {
            record.setattr(intern!(py, "reported_cost_usd"), cost)?;
        }
        if self.cache_read != 0 {
            record.setattr(intern!(py, "cache_read_tokens"), self.cache_read)?;
        }
        if self.cache_write != 0 {
            record.setattr(intern!(py, "cache_write_tokens"), self.cache_write)?;
        }
        if let Some(model) = self.model {
            record.setattr(intern!(py, "model"), model)?;
        }
        if let Some(provider) = self.provider {
            record.setattr(intern!(py, "provider"), provider)?;
        }
        self.ending.set(py, record)?;
        if self.requested_tools {
            record.setattr(intern!(py, "requested_tools"), true)?;
            if let Some(asked) = self.asked {
                record.setattr(intern!(py, "asked_tools"), asked)?;
            }
        }
        if self.messages_delta != 0 {
            record.setattr(intern!(py, "messages_delta"), self.messages_delta)?;
        }
        if !self.prompt.is_none() {
            record.setattr(intern!(py, "prompt"), self.prompt)?;
        }
        Ok(())
    }
}

/// ``bounds.token_count`` of a value that is an int, a flag or None.
pub(crate) fn tokens(value: &Bound<'_, PyAny>, most: i64) -> Result<i64, Unsure> {
    if value.is_none() || value.is_instance_of::<PyBool>() {
        return Ok(0);
    }
    if !value.is_instance_of::<PyInt>() {
        return Err(Unsure); // (a float, a numeric string: Python reads them)
    }
    let count: i64 = value.extract().map_err(|_| Unsure)?;
    Ok(count.clamp(0, most))
}

/// ``bounds.reported_cost`` of a value that is no string.
fn cost(value: &Bound<'_, PyAny>, most: f64) -> Result<Option<f64>, Unsure> {
    if value.is_none() || value.is_instance_of::<PyBool>() {
        return Ok(None);
    }
    let number = if value.is_instance_of::<PyInt>() {
        value.extract::<i64>().map_err(|_| Unsure)? as f64
    } else if value.is_instance_of::<PyFloat>() {
        value.extract::<f64>().map_err(|_| Unsure)?
    } else if value.is_instance_of::<PyString>() {
        return Err(Unsure);
    } else {
        return Ok(None);
    };
    Ok((0.0..=most).contains(&number).then_some(number))
}

/// A text fact (``str`` or None) cut to `chars`, where it is not empty.
pub(crate) fn name<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyAny>,
    chars: usize,
) -> Result<Option<Bound<'py, PyAny>>, Unsure> {
    if value.is_none() {
        return Ok(None);
    }
    let text = value.cast::<PyString>().map_err(|_| Unsure)?;
    let plain = text.to_str().map_err(|_| Unsure)?;
    if plain.is_empty() {
        return Ok(None);
    }
    Ok(Some(match plain.char_indices().nth(chars) {
        Some((end, _)) => PyString::new(py, &plain[..end]).into_any(),
        None => value.clone(),
    }))
}

/// ``values._count_messages`` of a JSON text or a list.
pub(crate) fn count_messages(value: &Bound<'_, PyAny>) -> Result<i64, Unsure> {
    if let Ok(text) = value.cast::<PyString>() {
        let text = text.to_str().map_err(|_| Unsure)?;
        return Ok(text.matches("\"role\"").count() as i64);
    }
    if let Ok(list) = value.cast::<PyList>() {
        return Ok(list.len() as i64);
    }
    Ok(0)
}

/// ``outcome.finish_reason`` of a string that is no JSON list, or a list of strings.
pub(crate) fn reason<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyAny>,
    chars: usize,
) -> Result<Option<Bound<'py, PyAny>>, Unsure> {
    let from_list = value.is_instance_of::<PyList>();
    let value = if let Ok(list) = value.cast::<PyList>() {
        let Some(last) = list.iter().last() else {
            return Ok(None);
        };
        last
    } else {
        value.clone()
    };
    let text = value.cast::<PyString>().map_err(|_| Unsure)?;
    let plain = text.to_str().map_err(|_| Unsure)?;
    if plain.starts_with('[') && !from_list {
        // a list written as JSON text (Microsoft Agent Framework: '["tool_calls"]'): its last
        // item where every item is text
        match answers::parsed(plain).map_err(|_| Unsure)? {
            Some(Doc::List(items)) if items.iter().all(|item| matches!(item, Doc::Text(_))) => {
                let Some(Doc::Text(last)) = items.last() else {
                    return Ok(None);
                };
                return Ok(Some(PyString::new(py, cut(last, chars)).into_any()));
            }
            _ => {}
        }
    } else if plain.starts_with('[') {
        return Err(Unsure); // (an array's last item written as a list: Python's)
    }
    name(py, &value, chars).map(|found| found.or_else(|| Some(PyString::new(py, "").into_any())))
}

/// ``outcome.output_finish_reason`` of a parsed output, then ``finish_reason`` of it: the
/// last message's that has one, as text; None where none has; Unsure where it is no text.
fn output_reason<'py>(
    py: Python<'py>,
    output: &Output<'_>,
    chars: usize,
) -> Result<Option<Bound<'py, PyAny>>, Unsure> {
    match output.finish_reason() {
        None => Ok(None),
        Some(Doc::Text(text)) if !text.starts_with('[') => {
            Ok(Some(PyString::new(py, cut(text, chars)).into_any()))
        }
        Some(_) => Err(Unsure),
    }
}

/// The span's attribute keys and values as the decode holds them (``span.attributes``: a
/// flattened convention's messages are counted by their keys).
pub struct Keys<'a> {
    pub attributes: &'a [wire::KeyValue],
    pub data: &'a [u8],
}

/// ``values._flat_count``: one more than the highest index after one of `prefixes`.
fn flat_count(keys: &Keys<'_>, prefixes: &[String]) -> Result<i64, Unsure> {
    let mut highest: i64 = -1;
    for kv in keys.attributes {
        let key = kv.key.text(keys.data);
        for prefix in prefixes {
            let Some(rest) = key.strip_prefix(prefix.as_str()) else {
                continue;
            };
            let index = rest.split('.').next().unwrap_or("");
            if !index.is_ascii() {
                return Err(Unsure); // (str.isdigit of Unicode digits)
            }
            if !index.is_empty() && index.bytes().all(|byte| byte.is_ascii_digit()) {
                let index: i64 = index.parse().map_err(|_| Unsure)?;
                highest = highest.max(index);
            }
        }
    }
    Ok(highest + 1)
}

/// ``model_calls.asked_tools``' reading of flattened output keys.
fn asked_flat<'py>(
    py: Python<'py>,
    calls: &ModelCalls,
    keys: &Keys<'_>,
) -> PyResult<Bound<'py, PyTuple>> {
    let mut flat: Vec<(String, [String; 2])> = Vec::new(); // (index, [name, id]) in order
    for kv in keys.attributes {
        let key = kv.key.text(keys.data);
        for rule in &calls.asked_flat {
            if !key.starts_with(rule.prefix.as_str()) || !key.contains(rule.infix.as_str()) {
                continue;
            }
            for (slot, suffix) in rule.suffixes.iter().enumerate() {
                if !key.ends_with(suffix.as_str()) {
                    continue;
                }
                let (start, end) = (rule.prefix.len(), key.len() - suffix.len());
                let index = if start < end { &key[start..end] } else { "" };
                let text = match kv.value {
                    wire::AnyValue::String(slice) => slice.text(keys.data),
                    _ => "",
                };
                let known = flat.iter().position(|(seen, _)| seen == index);
                if !text.is_empty() && (known.is_some() || flat.len() < calls.max_asked) {
                    let at = known.unwrap_or_else(|| {
                        flat.push((index.to_owned(), [String::new(), String::new()]));
                        flat.len() - 1
                    });
                    flat[at].1[slot] = cut(text, calls.max_name_chars).to_owned();
                }
                break;
            }
        }
    }
    let asked: Vec<(String, String)> = flat
        .into_iter()
        .filter(|(_, [name, _])| !name.is_empty())
        .map(|(_, [name, id])| (name, id))
        .collect();
    PyTuple::new(py, asked)
}

pub(crate) fn cut(text: &str, chars: usize) -> &str {
    match text.char_indices().nth(chars) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// What a call's finish reason says.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Said {
    Limit,
    Tools,
    Answer,
    /// a reason no table names
    Other,
    /// no finish reason: the output tells
    Nothing,
}

/// What a finish reason (text) says, as ``fill_model_outcome`` reads it.
fn said_by(calls: &ModelCalls, finish: &Bound<'_, PyAny>) -> Result<Said, Unsure> {
    let text = finish.cast::<PyString>().map_err(|_| Unsure)?;
    let text = text.to_str().map_err(|_| Unsure)?;
    if !text.is_ascii() {
        return Err(Unsure); // (str.lower of Unicode)
    }
    let lowered = text.to_ascii_lowercase();
    Ok(if calls.limit_reasons.contains(&lowered) {
        Said::Limit
    } else if calls.tool_reasons.contains(&lowered) {
        Said::Tools
    } else if calls.answers.reasons.contains(&lowered) {
        Said::Answer
    } else {
        Said::Other
    })
}

/// The facts of a model call, or None where Python reads them (see the module's comment);
/// `events`: the span has events (an output only an event carries is Python's); `failed`,
/// `stopped`: its status fails it, stops it at a limit.
#[allow(clippy::too_many_arguments)]
pub fn facts<'py>(
    py: Python<'py>,
    calls: &ModelCalls,
    json: &Json,
    attrs: &Bound<'py, PyDict>,
    firsts: &Bound<'py, PyTuple>,
    events: bool,
    keys: &Keys<'_>,
    span_name: &str,
    (failed, stopped): (bool, bool),
) -> PyResult<Option<LlmFacts<'py>>> {
    Ok(read(
        py, calls, json, attrs, firsts, events, keys, span_name, failed, stopped,
    )?
    .ok())
}

/// ``outcome.answer_text`` of a text, Unsure where Python must read it.
fn answer_of(text: &Bound<'_, PyString>) -> Result<Option<String>, Unsure> {
    let plain = text.to_str().map_err(|_| Unsure)?;
    Ok(Output::read(plain).map_err(|_| Unsure)?.answer_text())
}

#[allow(clippy::too_many_arguments)]
fn read<'py>(
    py: Python<'py>,
    calls: &ModelCalls,
    json: &Json,
    attrs: &Bound<'py, PyDict>,
    firsts: &Bound<'py, PyTuple>,
    events: bool,
    keys: &Keys<'_>,
    span_name: &str,
    failed: bool,
    stopped: bool,
) -> PyResult<Result<LlmFacts<'py>, Unsure>> {
    let at = &calls.places;
    let answers = &calls.answers;
    if events && firsts.get_item(at.outcome)?.is_none() {
        return Ok(Err(Unsure)); // (its outcome may be an event's: _with_events)
    }
    let finish = firsts.get_item(at.finish)?;
    let unnamed = finish.is_none(); // (no finish reason of its own)
    let (mut finish, mut said) = if finish.is_none() {
        (None, Said::Nothing)
    } else {
        let finish = match reason(py, &finish, calls.max_reason_chars) {
            Ok(Some(finish)) => finish,
            _ => return Ok(Err(Unsure)), // (an empty list: the output's reason, Python's)
        };
        let Ok(said) = said_by(calls, &finish) else {
            return Ok(Err(Unsure));
        };
        (Some(finish), said)
    };
    let output_messages = firsts.get_item(at.output_messages)?;
    if said == Said::Nothing && output_messages.is_none() {
        for key in &answers.envelope_keys {
            if let Some(value) = attrs.get_item(key.bind(py))? {
                if let Ok(text) = value.cast::<PyString>() {
                    if text.to_str().map_or(true, |text| text.starts_with('{')) {
                        return Ok(Err(Unsure)); // (a framework's message objects: enveloped_output)
                    }
                }
            }
        }
    }
    let Ok(mut messages) = count_messages(&firsts.get_item(at.messages)?) else {
        return Ok(Err(Unsure));
    };
    let counted = if messages == 0 {
        // flattened conventions: the count is in the keys
        (|| -> Result<_, Unsure> {
            let inputs = flat_count(keys, &calls.flat_inputs)?;
            let outputs = flat_count(keys, &calls.flat_outputs)?;
            let tools = outputs > 0
                && keys.attributes.iter().any(|kv| {
                    let key = kv.key.text(keys.data);
                    key.contains(calls.flat_tool_calls.as_str())
                        && calls
                            .flat_outputs
                            .iter()
                            .any(|prefix| key.starts_with(prefix.as_str()))
                });
            Ok((inputs, outputs, tools))
        })()
    } else if output_messages.is_none() {
        Ok((messages, 0, false))
    } else {
        count_messages(&output_messages).map(|outputs| (messages, outputs, false))
    };
    let Ok((counted, flat_out, flat_tools)) = counted else {
        return Ok(Err(Unsure));
    };
    messages = counted;
    if said == Said::Limit && flat_tools {
        return Ok(Err(Unsure)); // (its flattened output asks for tools all the same)
    }
    let output = if output_messages.is_none() {
        firsts.get_item(at.llm_output)?
    } else {
        output_messages.clone()
    };
    let output_text = output.cast::<PyString>().ok().cloned();
    // (an output the finish reason leaves unread; else one read as text, or none)
    let read_output = matches!(said, Said::Answer | Said::Nothing);
    if read_output && output_text.is_none() && !output.is_none() {
        return Ok(Err(Unsure)); // (a list, a log event's structured output: Python's)
    }
    let plain = match &output_text {
        Some(text) => match text.to_str() {
            Ok(plain) => Some(plain),
            Err(_) => return Ok(Err(Unsure)), // (a lone surrogate)
        },
        None => None,
    };
    let mut parsed = match plain.filter(|_| read_output).map(Output::read) {
        Some(Ok(parsed)) => Some(parsed),
        Some(Err(_)) => return Ok(Err(Unsure)),
        None => None,
    };
    if said == Said::Nothing && plain.is_some_and(|plain| plain.contains("\"finish_reason\"")) {
        // its output names its finish reason (the last message's that has one)
        let found = match parsed.as_ref() {
            Some(parsed) => output_reason(py, parsed, calls.max_reason_chars),
            None => Ok(None),
        };
        match found {
            Ok(Some(found)) => {
                let Ok(found_said) = said_by(calls, &found) else {
                    return Ok(Err(Unsure));
                };
                (finish, said) = (Some(found), found_said);
            }
            Ok(None) => {}
            Err(_) => return Ok(Err(Unsure)),
        }
    }
    let requests = parsed.as_ref().is_some_and(Output::requests_tools);
    let (mut requested, mut final_answer) = match said {
        Said::Limit | Said::Other => (false, false),
        Said::Tools => (true, false),
        Said::Answer => (requests, !requests),
        Said::Nothing => match &parsed {
            Some(parsed) => (requests, !requests && parsed.has_text()),
            None => (false, false),
        },
    };
    if requested {
        if let (Some(scan), Some(plain)) = (&calls.answer_tool_scan, plain) {
            if plain.contains(scan.as_str())
                && answers
                    .tool_markers
                    .iter()
                    .any(|marker| plain.contains(marker.as_str()))
            {
                // the model may have answered through the framework's output tool
                if parsed.is_none() {
                    match Output::read(plain) {
                        Ok(read) => parsed = Some(read),
                        Err(_) => return Ok(Err(Unsure)),
                    }
                }
                if parsed.as_ref().is_some_and(|parsed| {
                    parsed.asks_answer_tools_only(&answers.tools, &answers.tool_prefixes)
                }) {
                    requested = false;
                    final_answer = true;
                }
            }
        }
    }
    if flat_tools && !requested {
        // (no finish reason, and an output that hides its tool requests: the flattened
        // output messages still say the model asked for tools)
        requested = true;
        final_answer = false;
    }
    let mut asked = None;
    if requested {
        let text = if output_messages.is_none() {
            None
        } else {
            let Ok(text) = output_messages.cast::<PyString>() else {
                return Ok(Err(Unsure)); // (a list: Python reads it)
            };
            let Ok(plain) = text.to_str() else {
                return Ok(Err(Unsure));
            };
            // (``ASKED_TOOL_MARKERS``)
            (plain.contains("\"tool_call") || plain.contains("\"functionCall\""))
                .then_some(text)
        };
        asked = Some(match text {
            Some(text) => match json.asked(py, text)? {
                Some(found) => found,
                None => return Ok(Err(Unsure)),
            },
            None => asked_flat(py, calls, keys)?, // (no JSON tool calls: the flattened keys)
        });
    }
    let mut final_output = None;
    if final_answer {
        // its text: the answer attribute's where it has one, else the output's
        let answer = firsts.get_item(at.answer_text)?;
        let text = if answer.is_none() {
            None
        } else if let Ok(answer) = answer.cast::<PyString>() {
            if answer.is_empty()? {
                None
            } else {
                match answer_of(answer) {
                    Ok(text) => Some(text),
                    Err(unsure) => return Ok(Err(unsure)),
                }
            }
        } else {
            return Ok(Err(Unsure)); // (no text: Python's)
        };
        let text = match text {
            Some(text) => text,
            None => parsed.as_ref().and_then(Output::answer_text),
        };
        if let Some(text) = text {
            let hidden = text.chars().count() <= answers.hidden_chars
                && answers
                    .hidden
                    .iter()
                    .any(|hidden| hidden == answers::strip(&text));
            if !hidden {
                final_output = Some(
                    answers
                        .brief
                        .bind(py)
                        .call1((text, answers.max_brief_chars))?,
                );
            }
        }
    }
    let input = firsts.get_item(at.input_tokens)?;
    let output = firsts.get_item(at.output_tokens)?;
    if input.is_none() && output.is_none() {
        for key in &calls.usage_keys {
            if attrs.contains(key.bind(py))? {
                return Ok(Err(Unsure)); // (a usage object: _usage)
            }
        }
        if unnamed
            && output_messages.is_none()
            && messages == 0
            && flat_out == 0
            && !failed
            && firsts.get_item(at.total_tokens)?.is_none()
            && !firsts.get_item(at.llm_input)?.is_none()
            && !answers
                .call_suffixes
                .iter()
                .any(|suffix| span_name.ends_with(suffix.as_str()))
        {
            // Its input recorded, yet nothing a model call carries: a traced method of a model
            // object that called none (OpenInference's LlamaIndex), no model call
            let Ok(response_id) = firsts
                .get_item(at.response_id)
                .map_err(|_| Unsure)
                .and_then(|id| name(py, &id, calls.max_name_chars))
            else {
                return Ok(Err(Unsure));
            };
            return Ok(Ok(LlmFacts {
                kind: Some(answers.other_kind.bind(py).clone()),
                response_id,
                input_tokens: 0,
                output_tokens: 0,
                reported_cost: None,
                cache_read: 0,
                cache_write: 0,
                model: None,
                provider: None,
                ending: Ending::default(),
                requested_tools: false,
                asked: None,
                messages_delta: 0,
                prompt: py.None().into_bound(py),
            }));
        }
    }
    let read = || -> Result<_, Unsure> {
        let input_tokens = tokens(&input, calls.max_tokens)?;
        let output_tokens = tokens(&output, calls.max_tokens)?;
        Ok((input_tokens, output_tokens))
    };
    let (mut input_tokens, output_tokens) = match read() {
        Ok(found) => found,
        Err(unsure) => return Ok(Err(unsure)),
    };
    let (mut reported_cost, mut cache_read, mut cache_write) = (None, 0, 0);
    if calls.reports_cost {
        let found = (|| -> Result<_, Unsure> {
            Ok((
                cost(
                    &firsts.get_item(at.reported_cost).map_err(|_| Unsure)?,
                    calls.max_cost,
                )?,
                tokens(
                    &firsts.get_item(at.cache_read).map_err(|_| Unsure)?,
                    calls.max_tokens,
                )?,
                tokens(
                    &firsts.get_item(at.cache_write).map_err(|_| Unsure)?,
                    calls.max_tokens,
                )?,
            ))
        })();
        match found {
            Ok(found) => (reported_cost, cache_read, cache_write) = found,
            Err(unsure) => return Ok(Err(unsure)),
        }
    }
    if input_tokens == 0 && output_tokens == 0 {
        match tokens(&firsts.get_item(at.total_tokens)?, calls.max_tokens) {
            Ok(total) => input_tokens = total,
            Err(unsure) => return Ok(Err(unsure)),
        }
    }
    let model = firsts.get_item(at.model)?;
    if let Ok(text) = model.cast::<PyString>() {
        if text
            .to_str()
            .map_or(true, |text| text.starts_with('"') || text.ends_with('"'))
        {
            return Ok(Err(Unsure)); // (JSON-encoded: MLflow's)
        }
    }
    let names = (|| -> Result<_, Unsure> {
        Ok((
            name(
                py,
                &firsts.get_item(at.response_id).map_err(|_| Unsure)?,
                calls.max_name_chars,
            )?,
            name(py, &model, calls.max_name_chars)?,
            name(
                py,
                &firsts.get_item(at.provider).map_err(|_| Unsure)?,
                calls.max_name_chars,
            )?,
        ))
    })();
    let Ok((response_id, model, provider)) = names else {
        return Ok(Err(Unsure));
    };
    let mut messages_delta = 0;
    if messages != 0 {
        messages += flat_out.max(1);
    } else if calls.reports_delta {
        match count_messages(&firsts.get_item(at.messages_delta)?) {
            Ok(count) => messages_delta = count,
            Err(unsure) => return Ok(Err(unsure)),
        }
    }
    let limit_stop = if said == Said::Limit {
        finish.clone()
    } else if stopped || requested {
        None
    } else {
        // (a framework's "give your final answer" request offers no tools: never asks for any)
        let prompt = firsts.get_item(at.prompt_text)?;
        if prompt.is_none() {
            None
        } else {
            let Ok(prompt) = prompt.cast::<PyString>() else {
                return Ok(Err(Unsure));
            };
            let Ok(prompt) = prompt.to_str() else {
                return Ok(Err(Unsure));
            };
            match answers::prompt_limit(
                prompt,
                &answers.last_prompts,
                &answers.system_prompts,
                answers.prompt_chars,
            ) {
                Ok(limit) => limit.map(|limit| PyString::new(py, limit).into_any()),
                Err(_) => return Ok(Err(Unsure)),
            }
        }
    };
    cache_read = cache_read.min(input_tokens);
    cache_write = cache_write.min(input_tokens - cache_read);
    Ok(Ok(LlmFacts {
        kind: None,
        response_id,
        input_tokens,
        output_tokens,
        reported_cost,
        cache_read,
        cache_write,
        model,
        provider,
        ending: Ending {
            finish_reason: finish,
            limit_stop,
            final_answer,
            final_output,
            messages,
        },
        requested_tools: requested,
        asked,
        messages_delta,
        prompt: firsts.get_item(at.prompt)?,
    }))
}
