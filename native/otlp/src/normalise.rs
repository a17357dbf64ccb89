//! `normalise` for the spans it can be sure of (`Span.record`): a model or tool call whose role
//! a convention's kind attribute names gets its record made here (its ids, times, run key, kind,
//! agent, session, parent run: `normalise`'s dispatch); then its failure or a limit stop its
//! status or exception names (`failures.rs`), and its role's facts: a tool call's (its name,
//! its arguments and result as hashes and briefs, whether a model asked for it, the call id it
//! answers) and a model call's that asked for tools or stopped at a limit (`model_calls.rs`).
//! What is left (a status or event it does not read, a model call's answer, an agent's facts)
//! is the Python `_fill_role`'s or `_fill_facts`', on the record made here. The tables are the
//! Python conventions' own, handed over once (`Normaliser`): no convention is written twice.
//! Where the dispatch reaches a branch this does not read (an attribute a table names for it,
//! a role other than a model or tool call), it answers None, "unsure", and the Python
//! `normalise` reads the span whole; where a status's or a role's facts do, it leaves them all
//! to Python, none set.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::agents::{self, Agents};
use crate::failures::{self, Failures, Status};
use crate::kernels::{canonical_text, hash_text, py_strings, untracked, Json};
use crate::model_calls::{self, ModelCalls};

/// The dispatch's places (`conventions.normalise`) and the tool readers' (`tool_calls`), by
/// their index in the first-present facts (`attributes.FIRST_FACTS`).
pub struct Facts {
    run_id: usize,
    agent_call_id: usize,
    agent_name: usize,
    session: usize,
    parent_run: usize,
    tool_name: usize,
    transfer_target: usize,
    tool_args: usize,
    tool_result: usize,
}

/// An ``UNASKED_TOOLS`` rule: (attribute, value, call id attributes).
type UnaskedRule = (Py<PyString>, Py<PyAny>, Vec<Py<PyString>>);

/// The tables `Span.record` reads, handed over once (`watchdog.core.spans.native`).
#[pyclass(frozen, module = "watchdog.core.spans._native")]
pub struct Normaliser {
    record_class: Py<PyAny>,
    /// SpanKind.LLM, TOOL, AGENT; KeySource.WATCHDOG, AGENT_CALL, TRACE; Role.LLM, TOOL, AGENT
    kinds: (Py<PyAny>, Py<PyAny>, Py<PyAny>),
    sources: (Py<PyAny>, Py<PyAny>, Py<PyAny>),
    roles: (Py<PyAny>, Py<PyAny>, Py<PyAny>),
    /// ``KIND_MAPS``: (attribute, {value: role}), the first that names a role wins
    kind_maps: Vec<(Py<PyString>, Py<PyDict>)>,
    /// attributes that take a span of any role down a branch read only by Python (JSON
    /// identity, a budget)
    dispatch_unsure: Vec<Py<PyString>>,
    /// an agent's span below the root: the attributes of ``NESTED_AGENT_ROLES``' rules, and
    /// the names of a step's span (``NESTED_STEP_SPAN_NAMES``, ``NESTED_STEP_SPAN_SUFFIXES``)
    agent_unsure: Vec<Py<PyString>>,
    step_names: Vec<String>,
    step_suffixes: Vec<String>,
    facts: Facts,
    /// ``AGENT_NAME_PLACEHOLDERS``: an agent named so names none (Python reads its span)
    agent_placeholders: Vec<String>,
    /// ``OUTPUT_TOOL_NAMES``, ``OUTPUT_TOOL_PREFIXES``; the names of the tools whose calls
    /// Python reads (``LOOP_END_TOOLS``, ``TOOL_NAME_PLACEHOLDERS``: named in their result)
    answer_tools: Vec<String>,
    answer_tool_prefixes: Vec<String>,
    left_tools: Vec<String>,
    /// attributes that take a tool span down a branch read only by Python (a declined call's
    /// flag, a framework's error flag or result status, a call id in the input JSON)
    tool_unsure: Vec<Py<PyString>>,
    /// (attribute, marker): a result text holding the marker may say the call failed
    result_texts: Vec<(Py<PyString>, String)>,
    /// ``HIDDEN_CONTENT``, and its placeholders as JSON strings (``tool_calls._HIDDEN_VALUES``)
    hidden: Vec<String>,
    hidden_values: Vec<String>,
    /// ``UNASKED_TOOLS``: (attribute, value, call id attributes)
    unasked: Vec<UnaskedRule>,
    /// ``TOOL_CALL_ID_KEYS``
    call_id_keys: Vec<Py<PyString>>,
    json: Py<Json>,
    /// ``redact.brief``
    brief: Py<PyAny>,
    max_name_chars: usize,
    max_brief_chars: usize,
    /// ``CLIENT_RUN_SPAN``: the client SDK's span framing a run starts so
    client_run_span: String,
    /// a model call's facts (``model_calls.rs``), an agent's (``agents.rs``), a failure's
    /// (``failures.rs``)
    model_calls: Py<ModelCalls>,
    agents: Py<Agents>,
    failures: Py<Failures>,
    /// ``SECOND_ROOTS``: a root named so is not its run's end; ``RUN_ENDS``: a span named so
    /// ends its run (``Convention.second_roots``)
    second_roots: Vec<String>,
    run_ends: Vec<String>,
    /// ``LOOP_CALLS``: an agent span named so is one call of a loop its application may run
    /// itself, a call a step (``Convention.loop_call_span_names``)
    loop_calls: Vec<String>,
}

fn strings(value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    value.try_iter()?.map(|item| item?.extract()).collect()
}

#[pymethods]
impl Normaliser {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (record_class, kinds, sources, roles, kind_maps, dispatch_unsure,
                        agent_unsure, step_names, step_suffixes, facts, agent_placeholders,
                        answer_tools, answer_tool_prefixes, left_tools, tool_unsure,
                        result_texts, hidden, hidden_values, unasked, call_id_keys, json, brief,
                        max_name_chars, max_brief_chars, client_run_span, model_calls,
                        agents, failures, second_roots, run_ends, loop_calls))]
    fn new(
        record_class: Py<PyAny>,
        kinds: (Py<PyAny>, Py<PyAny>, Py<PyAny>),
        sources: (Py<PyAny>, Py<PyAny>, Py<PyAny>),
        roles: (Py<PyAny>, Py<PyAny>, Py<PyAny>),
        kind_maps: &Bound<'_, PyAny>,
        dispatch_unsure: &Bound<'_, PyAny>,
        agent_unsure: &Bound<'_, PyAny>,
        step_names: &Bound<'_, PyAny>,
        step_suffixes: &Bound<'_, PyAny>,
        facts: [usize; 9],
        agent_placeholders: &Bound<'_, PyAny>,
        answer_tools: &Bound<'_, PyAny>,
        answer_tool_prefixes: &Bound<'_, PyAny>,
        left_tools: &Bound<'_, PyAny>,
        tool_unsure: &Bound<'_, PyAny>,
        result_texts: &Bound<'_, PyAny>,
        hidden: &Bound<'_, PyAny>,
        hidden_values: &Bound<'_, PyAny>,
        unasked: &Bound<'_, PyAny>,
        call_id_keys: &Bound<'_, PyAny>,
        json: Py<Json>,
        brief: Py<PyAny>,
        max_name_chars: usize,
        max_brief_chars: usize,
        client_run_span: String,
        model_calls: Py<ModelCalls>,
        agents: Py<Agents>,
        failures: Py<Failures>,
        second_roots: &Bound<'_, PyAny>,
        run_ends: &Bound<'_, PyAny>,
        loop_calls: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let mut maps = Vec::new();
        for item in kind_maps.try_iter()? {
            let (key, map): (Bound<'_, PyString>, Bound<'_, PyDict>) = item?.extract()?;
            maps.push((key.unbind(), map.unbind()));
        }
        let mut texts = Vec::new();
        for item in result_texts.try_iter()? {
            let (key, marker): (Bound<'_, PyString>, String) = item?.extract()?;
            texts.push((key.unbind(), marker));
        }
        let mut rules = Vec::new();
        for item in unasked.try_iter()? {
            let (key, value, call_ids): (Bound<'_, PyString>, Py<PyAny>, Bound<'_, PyAny>) =
                item?.extract()?;
            rules.push((key.unbind(), value, py_strings(&call_ids)?));
        }
        let [run_id, agent_call_id, agent_name, session, parent_run, tool_name, transfer_target, tool_args, tool_result] =
            facts;
        Ok(Normaliser {
            record_class,
            kinds,
            sources,
            roles,
            kind_maps: maps,
            dispatch_unsure: py_strings(dispatch_unsure)?,
            agent_unsure: py_strings(agent_unsure)?,
            step_names: strings(step_names)?,
            step_suffixes: strings(step_suffixes)?,
            facts: Facts {
                run_id,
                agent_call_id,
                agent_name,
                session,
                parent_run,
                tool_name,
                transfer_target,
                tool_args,
                tool_result,
            },
            agent_placeholders: strings(agent_placeholders)?,
            answer_tools: strings(answer_tools)?,
            answer_tool_prefixes: strings(answer_tool_prefixes)?,
            left_tools: strings(left_tools)?,
            tool_unsure: py_strings(tool_unsure)?,
            result_texts: texts,
            hidden: strings(hidden)?,
            hidden_values: strings(hidden_values)?,
            unasked: rules,
            call_id_keys: py_strings(call_id_keys)?,
            json,
            brief,
            max_name_chars,
            max_brief_chars,
            client_run_span,
            model_calls,
            agents,
            failures,
            second_roots: strings(second_roots)?,
            run_ends: strings(run_ends)?,
            loop_calls: strings(loop_calls)?,
        })
    }
}

/// What `Span.record` hands over of the span itself.
pub struct Head<'a> {
    pub trace_id: String,
    pub span_id: String,
    pub parent: Option<String>,
    pub name: &'a str,
    pub start: u64,
    pub end: u64,
}

fn cut(text: &str, chars: usize) -> &str {
    match text.char_indices().nth(chars) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// A text fact as ``str`` (the first-present facts read as text are ``str`` or None).
fn text_of<'py>(value: &Bound<'py, PyAny>) -> Option<Bound<'py, PyString>> {
    if value.is_none() {
        return None;
    }
    value.cast::<PyString>().ok().cloned()
}

/// ``a or b``, as Python reads it.
fn or<'py>(first: Bound<'py, PyAny>, second: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    Ok(if first.is_truthy()? { first } else { second })
}

/// What is left of a record `record` made: nothing (its status and facts filled here); its
/// role's facts (``conventions._fill_facts``), of a span without events or with them
/// (`FACTS_LEFT`, `EVENT_FACTS_LEFT`); or its status and events, then its role's facts
/// (``conventions._fill_role``).
pub const FILLED: u8 = 0;
pub const FACTS_LEFT: u8 = 1;
pub const STATUS_LEFT: u8 = 2;
pub const EVENT_FACTS_LEFT: u8 = 3;

/// What a record's role reads, made here.
enum RoleFacts<'py> {
    Tool(ToolFacts<'py>),
    Llm(model_calls::LlmFacts<'py>),
    Agent(agents::AgentFacts<'py>),
}

/// The record of `head`, or None where Python must read the span (see the module's comment);
/// with it what is left of it to fill (`FILLED`, `FACTS_LEFT`, `STATUS_LEFT`,
/// `EVENT_FACTS_LEFT`; `status`: the span's status and events; `keys`: its attributes as the
/// decode holds them).
#[allow(clippy::too_many_arguments)]
pub fn record<'py>(
    py: Python<'py>,
    normaliser: &Normaliser,
    head: Head<'_>,
    status: Status<'_>,
    keys: model_calls::Keys<'_>,
    attrs: &Bound<'py, PyDict>,
    firsts: &Bound<'py, PyTuple>,
    resource: &Bound<'py, PyAny>,
) -> PyResult<Option<(Bound<'py, PyAny>, u8)>> {
    let Some(role) = role_of(py, normaliser, attrs)? else {
        return Ok(None);
    };
    if role == Role::Agent && !sure_agent(py, normaliser, head.name, head.parent.is_some(), attrs)?
    {
        return Ok(None);
    }
    let tool = role == Role::Tool;
    for key in &normaliser.dispatch_unsure {
        if attrs.contains(key.bind(py))? {
            return Ok(None);
        }
    }
    if resource
        .getattr(intern!(py, "announces_budget"))?
        .is_truthy()?
    {
        return Ok(None);
    }
    let facts = &normaliser.facts;
    let agent = or(
        firsts.get_item(facts.agent_name)?,
        resource.getattr(intern!(py, "agent"))?,
    )?;
    let agent = text_of(&agent);
    if agent.is_none() && (head.parent.is_none() || role == Role::Agent) {
        // (a root's own JSON may name its agent, _root_agent; an agent's span its name)
        return Ok(None);
    }
    let agent = match agent {
        Some(agent) => {
            let Ok(text) = agent.to_str() else {
                return Ok(None);
            };
            if normaliser
                .agent_placeholders
                .iter()
                .any(|name| name == text)
            {
                return Ok(None);
            }
            let short = cut(text, normaliser.max_name_chars);
            if text.is_empty() {
                None
            } else if short.len() == text.len() {
                Some(agent.into_any())
            } else {
                Some(PyString::new(py, short).into_any())
            }
        }
        None => None,
    };
    // (its failure or limit stop, where its status and events say it as a table reads it;
    // then its role's facts where this reads them all; else `_fill_role`'s, `_fill_facts`')
    let events = !status.events.is_empty();
    let failure = if status.eventful() {
        failures::status(py, normaliser.failures.get(), &status, attrs)?
    } else {
        None
    };
    let status_read = failure.is_some() || !status.eventful();
    let filled = if !status_read {
        None
    } else if tool {
        if events && firsts.get_item(facts.tool_args)?.is_none() {
            None // (its arguments may be an event's: _with_events)
        } else {
            tool_facts(py, normaliser, attrs, firsts)?.map(RoleFacts::Tool)
        }
    } else if role == Role::Llm {
        model_calls::facts(
            py,
            normaliser.model_calls.get(),
            normaliser.json.get(),
            attrs,
            firsts,
            events,
            &keys,
            head.name,
            failure.as_ref().map_or((false, false), |failure| {
                (failure.failed(), failure.stopped())
            }),
        )?
        .map(RoleFacts::Llm)
    } else if events {
        None // (its facts may be its events': _with_events)
    } else {
        agents::facts(
            py,
            normaliser.agents.get(),
            attrs,
            firsts,
            head.name,
            failure.as_ref().map_or((false, false), |failure| {
                (failure.failed(), failure.stopped())
            }),
        )?
        .map(RoleFacts::Agent)
    };

    let explicit = or(
        firsts.get_item(facts.run_id)?,
        resource.getattr(intern!(py, "run_id"))?,
    )?;
    let (key, source) = if explicit.is_truthy()? {
        (explicit, &normaliser.sources.0)
    } else {
        let call_id = firsts.get_item(facts.agent_call_id)?;
        if call_id.is_truthy()? {
            (call_id, &normaliser.sources.1)
        } else {
            let key = PyString::new(py, &format!("trace:{}", head.trace_id)).into_any();
            (key, &normaliser.sources.2)
        }
    };
    let watchdog_key = source.is(&normaliser.sources.0);
    let kind = match role {
        Role::Llm => &normaliser.kinds.0,
        Role::Tool => &normaliser.kinds.1,
        Role::Agent => &normaliser.kinds.2,
    };
    // Out of the collector's walk (a record lives through its request's slices, ~66 slots to
    // traverse at every young collection): no reference cycle can pass through a record, as
    // every value one holds is a string, a number, a flag, None, an enum member, or a tuple,
    // dict or list made of the span's own values (tool calls' names and ids, a budget, a
    // model call's prompt as read from its attributes: trees that never hold a record), and
    // the core sets only such values on it (`SpanRecord`'s fields)
    let root = head.parent.is_none();
    let record = untracked(normaliser.record_class.bind(py).call1((
        key,
        source.bind(py),
        head.trace_id,
        head.span_id,
        head.parent,
        head.name,
        kind.bind(py),
        head.start,
        head.end,
    ))?);
    if watchdog_key && head.name.starts_with(&normaliser.client_run_span) {
        record.setattr(intern!(py, "run_frame"), true)?;
    }
    if normaliser.run_ends.iter().any(|name| name == head.name) {
        record.setattr(intern!(py, "ends_its_run"), true)?;
    } else if root && normaliser.second_roots.iter().any(|name| name == head.name) {
        record.setattr(intern!(py, "second_root"), true)?;
    }
    if role == Role::Agent && normaliser.loop_calls.iter().any(|name| name == head.name) {
        record.setattr(intern!(py, "loop_call"), true)?;
    }
    if let Some(agent) = agent {
        record.setattr(intern!(py, "agent"), agent)?;
    }
    record.setattr(
        intern!(py, "service"),
        resource.getattr(intern!(py, "service"))?,
    )?;
    let session = or(
        firsts.get_item(facts.session)?,
        resource.getattr(intern!(py, "session"))?,
    )?;
    if session.is_truthy()? {
        record.setattr(intern!(py, "session"), session)?;
    }
    record.setattr(
        intern!(py, "parent_run"),
        or(
            firsts.get_item(facts.parent_run)?,
            resource.getattr(intern!(py, "parent_run"))?,
        )?,
    )?;
    if let Some(failure) = failure {
        failure.set(py, &record)?;
    }
    let left = match filled {
        Some(RoleFacts::Tool(filled)) => {
            filled.set(py, &record)?;
            FILLED
        }
        Some(RoleFacts::Llm(filled)) => {
            filled.set(py, &record)?;
            FILLED
        }
        Some(RoleFacts::Agent(filled)) => {
            filled.set(py, &record)?;
            FILLED
        }
        None if !status_read => STATUS_LEFT,
        None if events => EVENT_FACTS_LEFT,
        None => FACTS_LEFT,
    };
    Ok(Some((record, left)))
}

/// The roles this makes records of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Llm,
    Tool,
    Agent,
}

/// The span's role by the first of ``KIND_MAPS`` that names one, by a string or one of a string
/// array's (``identity.role_of``'s first loop); None for any other role, or none named.
fn role_of(
    py: Python<'_>,
    normaliser: &Normaliser,
    attrs: &Bound<'_, PyDict>,
) -> PyResult<Option<Role>> {
    for (key, roles) in &normaliser.kind_maps {
        let Some(value) = attrs.get_item(key.bind(py))? else {
            continue;
        };
        let roles = roles.bind(py);
        let role = if value.is_instance_of::<PyString>() {
            roles.get_item(&value)?
        } else if let Ok(items) = value.cast::<PyList>() {
            // a string array (Griptape's `tags`): the first of its strings the map names
            let mut found = None;
            for item in items.iter() {
                if item.is_instance_of::<PyString>() {
                    found = roles.get_item(&item)?;
                    if found.is_some() {
                        break;
                    }
                }
            }
            found
        } else {
            None
        };
        let Some(role) = role else {
            continue;
        };
        if role.is(&normaliser.roles.0) {
            return Ok(Some(Role::Llm));
        }
        if role.is(&normaliser.roles.1) {
            return Ok(Some(Role::Tool));
        }
        if role.is(&normaliser.roles.2) {
            return Ok(Some(Role::Agent));
        }
        return Ok(None);
    }
    Ok(None)
}

/// Whether an agent's span is the agent's own (``identity.nested_agent_role`` says AGENT of a
/// span below the root by none of its rules and neither by its name): where a rule's attribute
/// is there, or the name is a step's, Python reads it.
fn sure_agent(
    py: Python<'_>,
    normaliser: &Normaliser,
    name: &str,
    nested: bool,
    attrs: &Bound<'_, PyDict>,
) -> PyResult<bool> {
    if !nested {
        return Ok(true);
    }
    for key in &normaliser.agent_unsure {
        if attrs.contains(key.bind(py))? {
            return Ok(false);
        }
    }
    Ok(!normaliser.step_names.iter().any(|step| step == name)
        && !normaliser
            .step_suffixes
            .iter()
            .any(|suffix| name.ends_with(suffix.as_str())))
}

/// A tool call's facts, as ``tool_calls._fill_tool``, ``identity.unasked_tool`` and
/// ``tool_calls.tool_call_id`` read them, made before any is set.
struct ToolFacts<'py> {
    tool_name: String,
    args: Option<(Option<i64>, Bound<'py, PyAny>)>,
    result: Option<(i64, Bound<'py, PyAny>)>,
    unasked: bool,
    call_id: Option<Bound<'py, PyAny>>,
}

impl ToolFacts<'_> {
    fn set(self, py: Python<'_>, record: &Bound<'_, PyAny>) -> PyResult<()> {
        record.setattr(intern!(py, "tool_name"), self.tool_name)?;
        if let Some((hash, brief)) = self.args {
            if let Some(hash) = hash {
                record.setattr(intern!(py, "args_hash"), hash)?;
            }
            record.setattr(intern!(py, "args_brief"), brief)?;
        }
        if let Some((hash, brief)) = self.result {
            record.setattr(intern!(py, "result_hash"), hash)?;
            record.setattr(intern!(py, "result_brief"), brief)?;
        }
        if self.unasked {
            record.setattr(intern!(py, "unasked"), true)?;
        }
        if let Some(call_id) = self.call_id {
            record.setattr(intern!(py, "tool_call_id"), call_id)?;
        }
        Ok(())
    }
}

impl Normaliser {
    fn is_hidden(&self, text: &str) -> bool {
        self.hidden.iter().any(|hidden| hidden == text)
    }
}

/// Content as text, or None where it is absent or hidden; Err(()) where it is no text.
fn content<'py>(
    normaliser: &Normaliser,
    value: &Bound<'py, PyAny>,
) -> Result<Option<Bound<'py, PyString>>, ()> {
    if value.is_none() {
        return Ok(None);
    }
    let Ok(text) = value.cast::<PyString>() else {
        return Err(());
    };
    let Ok(plain) = text.to_str() else {
        return Err(()); // (no UTF-8: Python's hash replaces its lone surrogates)
    };
    if normaliser.is_hidden(plain) {
        return Ok(None);
    }
    Ok(Some(text.clone()))
}

fn tool_facts<'py>(
    py: Python<'py>,
    normaliser: &Normaliser,
    attrs: &Bound<'py, PyDict>,
    firsts: &Bound<'py, PyTuple>,
) -> PyResult<Option<ToolFacts<'py>>> {
    let facts = &normaliser.facts;
    let Some(tool) = text_of(&firsts.get_item(facts.tool_name)?) else {
        return Ok(None); // (named after the span: _tool_name)
    };
    if !firsts.get_item(facts.transfer_target)?.is_none() {
        return Ok(None);
    }
    for key in &normaliser.tool_unsure {
        if attrs.contains(key.bind(py))? {
            return Ok(None);
        }
    }
    let Ok(tool) = tool.to_str() else {
        return Ok(None);
    };
    let tool = cut(tool, normaliser.max_name_chars).to_owned();
    if normaliser.answer_tools.contains(&tool)
        || normaliser.left_tools.contains(&tool)
        || normaliser
            .answer_tool_prefixes
            .iter()
            .any(|prefix| tool.starts_with(prefix.as_str()))
    {
        return Ok(None);
    }
    let brief = normaliser.brief.bind(py);
    let result_value = firsts.get_item(facts.tool_result)?;
    if let Ok(text) = result_value.cast::<PyString>() {
        if text
            .to_str()
            .map_or(true, |text| text.contains("call_id\""))
        {
            return Ok(None); // (the result may name the call it answers: result_call_id)
        }
    }
    let args_value = firsts.get_item(facts.tool_args)?;
    let Ok(args) = content(normaliser, &args_value) else {
        return Ok(None);
    };
    let args = match args {
        None => None,
        Some(text) => {
            let Ok(plain) = text.to_str() else {
                return Ok(None);
            };
            let Some(canonical) = canonical_text(normaliser.json.get(), plain) else {
                return Ok(None); // (no JSON, or a float: Python writes it)
            };
            let hidden = normaliser
                .hidden_values
                .iter()
                .any(|value| canonical.contains(value.as_str()));
            let hash = (!hidden).then(|| hash_text(&format!("{tool}\0{canonical}")));
            let short = brief.call1((canonical, normaliser.max_brief_chars))?;
            Some((hash, short))
        }
    };
    let Ok(result) = content(normaliser, &result_value) else {
        return Ok(None);
    };
    let result = match result {
        None => None,
        Some(text) => {
            let Ok(plain) = text.to_str() else {
                return Ok(None);
            };
            let hash = hash_text(&format!("{tool}\0{plain}"));
            Some((hash, brief.call1((text, normaliser.max_brief_chars))?))
        }
    };
    for (key, marker) in &normaliser.result_texts {
        if let Some(value) = attrs.get_item(key.bind(py))? {
            if let Ok(text) = value.cast::<PyString>() {
                if text
                    .to_str()
                    .map_or(true, |text| text.contains(marker.as_str()))
                {
                    return Ok(None); // (the result's text may say the call failed)
                }
            }
        }
    }
    let mut unasked = false;
    for (key, value, call_ids) in &normaliser.unasked {
        let found = attrs.get_item(key.bind(py))?;
        let matches = match found {
            Some(found) => found.eq(value.bind(py))?,
            None => value.bind(py).is_none(),
        };
        if matches {
            unasked = true;
            for call_id in call_ids {
                if let Some(found) = attrs.get_item(call_id.bind(py))? {
                    if found.is_truthy()? {
                        unasked = false;
                        break;
                    }
                }
            }
            break;
        }
    }
    let mut call_id = None;
    for key in &normaliser.call_id_keys {
        if let Some(value) = attrs.get_item(key.bind(py))? {
            if let Ok(text) = value.cast::<PyString>() {
                let Ok(plain) = text.to_str() else {
                    return Ok(None);
                };
                if !plain.is_empty() {
                    let short = cut(plain, normaliser.max_name_chars);
                    call_id = Some(if short.len() == plain.len() {
                        value.clone()
                    } else {
                        PyString::new(py, short).into_any()
                    });
                    break;
                }
            }
        }
    }
    Ok(Some(ToolFacts {
        tool_name: tool,
        args,
        result,
        unasked,
        call_id,
    }))
}
