//! A rig agent (rig-core's `Agent` on its OpenAI provider, Chat Completions) exporting rig's own
//! GenAI tracing spans (`invoke_agent`, `chat`, `execute_tool`) through tracing-opentelemetry and
//! the OTLP/HTTP protobuf exporter to OTEL_EXPORTER_OTLP_ENDPOINT, as rig's own example
//! (agent_with_tools_otel) does. The model is FAKE_LLM_MODEL on the scripted server at
//! FAKE_LLM_BASE_URL; argv[1] is the scenario (scripts in tests/frameworks/test_rig.py):
//! `three_tools`, `limit` (max_turns 3: MaxTurnsError), `repeat` (the same call, max_turns 3),
//! `tool_error` (the tool fails for "broken"). rig makes its `invoke_agent` span the current
//! span's when there is one, and enters neither: its `chat` and `execute_tool` spans hang from
//! the current span. The invocation runs inside the application's own `invoke_agent` span (the
//! GenAI fields rig records declared on it), or, for a scenario ending `_bare`, inside none, as
//! rig's example has it (each span a trace of its own). With RECORD_SPANS set, every span is also appended
//! there as one OTLP/JSON export request per line.
//!
//! With argv[1] `endpoint` it is the model endpoint's agent instead
//! (tests/frameworks/test_model_endpoint_frameworks.py): no tracing, the OpenAI provider's base
//! URL OPENAI_BASE_URL (the sidecar), the model ENDPOINT_MODEL, the task ENDPOINT_TASK, one tool
//! `search`, max_turns 100; it prints one JSON line last: {"ran": [the search terms its tool ran
//! with], "output": answer}.
use std::fs::OpenOptions;
use std::io::Write;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use rig::client::CompletionClient;
use rig::completion::{Prompt, ToolDefinition};
use rig::providers::openai;
use rig::tool::Tool;
use serde::Deserialize;
use serde_json::json;
use std::future::IntoFuture;

use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Every export also appended to RECORD_SPANS as one OTLP/JSON request per line.
#[derive(Debug)]
struct Recorder {
    path: String,
    resource: ResourceAttributesWithSchema,
}

impl SpanExporter for Recorder {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let request = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(batch, &self.resource),
        };
        let line = serde_json::to_string(&request).expect("an OTLP/JSON request");
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .expect("the recording");
        writeln!(file, "{line}").expect("the recording written");
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}

#[derive(Deserialize)]
struct LookupArgs {
    key: String,
}

#[derive(Debug)]
struct BackendError(String);

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for BackendError {}

struct Lookup;

#[derive(Deserialize)]
struct SearchArgs {
    q: String,
}

/// The endpoint agent's one tool: every execution counted (its terms, in order).
struct Search(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Tool for Search {
    const NAME: &'static str = "search";
    type Error = BackendError;
    type Args = SearchArgs;
    type Output = String;

    async fn definition(&self, _prompt: String) -> ToolDefinition {
        ToolDefinition {
            name: "search".to_string(),
            description: "Search the files for a term.".to_string(),
            parameters: json!({"type": "object",
                               "properties": {"q": {"type": "string", "description": "the term"}},
                               "required": ["q"]}),
        }
    }

    async fn call(&self, args: Self::Args) -> Result<Self::Output, Self::Error> {
        let mut ran = self.0.lock().expect("the terms");
        ran.push(args.q.clone());
        Ok(format!(
            "search #{}: no file matches '{}'",
            ran.len(),
            args.q
        ))
    }
}

/// The model endpoint's agent: rig's loop on the OpenAI provider at OPENAI_BASE_URL.
async fn endpoint() {
    let ran = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let client = openai::Client::builder()
        .api_key(std::env::var("OPENAI_API_KEY").unwrap_or_else(|_| "sk-none".to_string()))
        .base_url(std::env::var("OPENAI_BASE_URL").expect("the sidecar's model endpoint"))
        .build()
        .expect("the OpenAI client")
        .completions_api();
    let agent = client
        .agent(std::env::var("ENDPOINT_MODEL").expect("ENDPOINT_MODEL"))
        .name("rig-endpoint")
        .preamble("You are a careful research agent. Use the search tool, then answer.")
        .tool(Search(ran.clone()))
        .build();
    let task = std::env::var("ENDPOINT_TASK").unwrap_or_else(|_| "Find the file.".to_string());
    let output = match agent.prompt(task.as_str()).max_turns(100).await {
        Ok(answer) => answer,
        Err(error) => format!("stopped: {error}"),
    };
    let ran = ran.lock().expect("the terms").clone();
    println!("{}", json!({"ran": ran, "output": output}));
}

impl Tool for Lookup {
    const NAME: &'static str = "lookup";
    type Error = BackendError;
    type Args = LookupArgs;
    type Output = String;

    async fn definition(&self, _prompt: String) -> ToolDefinition {
        ToolDefinition {
            name: "lookup".to_string(),
            description: "Look a key up.".to_string(),
            parameters: json!({"type": "object", "properties": {"key": {"type": "string"}},
                               "required": ["key"]}),
        }
    }

    async fn call(&self, args: Self::Args) -> Result<Self::Output, Self::Error> {
        if args.key == "broken" {
            return Err(BackendError(format!(
                "backend unavailable for {}",
                args.key
            )));
        }
        Ok(format!("value of {}", args.key))
    }
}

#[tokio::main]
async fn main() {
    let argument = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "three_tools".to_string());
    if argument == "endpoint" {
        return endpoint().await;
    }
    let bare = argument.ends_with("_bare");
    let scenario = argument.trim_end_matches("_bare").to_string();
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").expect("the sidecar");
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(format!("{endpoint}/v1/traces"))
        .build()
        .expect("the OTLP exporter");
    let mut builder = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name("rig-service").build());
    if let Ok(path) = std::env::var("RECORD_SPANS") {
        builder = builder.with_simple_exporter(Recorder {
            path,
            resource: (&Resource::builder_empty().build()).into(),
        });
    }
    let provider = builder.build();
    tracing_subscriber::registry() // INFO and above, as rig's example filters
        .with(tracing_subscriber::filter::LevelFilter::INFO)
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("rig-agent")))
        .init();

    let client = openai::Client::builder()
        .api_key("sk-fake")
        .base_url(std::env::var("FAKE_LLM_BASE_URL").expect("the model server"))
        .build()
        .expect("the OpenAI client")
        .completions_api();
    let agent = client
        .agent(std::env::var("FAKE_LLM_MODEL").expect("the model"))
        .name("rig_researcher")
        .preamble("You look keys up with the lookup tool, then answer.")
        .tool(Lookup)
        .build();
    let task = match scenario.as_str() {
        "tool_error" => "Look up broken.",
        "repeat" => "Look up a until it changes.",
        _ => "Look up a, b and c.",
    };
    let turns = if scenario == "limit" || scenario == "repeat" {
        3
    } else {
        10
    };
    let request = agent.prompt(task).max_turns(turns).into_future();
    let outcome = if bare {
        request.await
    } else {
        let span = tracing::info_span!(
            "invoke_agent",
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = "rig_researcher",
            gen_ai.prompt = tracing::field::Empty,
            gen_ai.completion = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
            gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_message = tracing::field::Empty,
        );
        let outcome = request.instrument(span.clone()).await;
        if let Err(error) = &outcome {
            // the application records the failure on its span
            span.record("otel.status_code", "ERROR");
            span.record("otel.status_message", error.to_string());
        }
        outcome
    };
    match outcome {
        Ok(answer) => println!("answer: {answer}"),
        Err(error) => println!("stopped: {error}"),
    }
    provider.shutdown().expect("the spans exported");
}
