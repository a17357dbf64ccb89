//! A langchain-rust agent (its `AgentExecutor`) on the watchdog's model endpoint, pointed at it
//! by OPENAI_BASE_URL alone: `OpenAI::default()` is async-openai's `OpenAIConfig::default()`,
//! which reads OPENAI_BASE_URL and OPENAI_API_KEY. argv[1] is the agent: `tools` (its
//! `OpenAiToolAgent`, the API's tool calls) or `chat` (its `ConversationalAgent`, actions as
//! JSON in the answer's text), each run by `invoke`, or `tools_stream` / `chat_stream`, run by
//! `stream_events` (its requests streamed); argv[2] the executor's `max_iterations`; ENDPOINT_MODEL the
//! model, ENDPOINT_TASK the task, ENDPOINT_DIR the directory its tool works in (each call
//! appends a line to ran.log there; a term that begins `fail` fails it: "no index for" the
//! term). It prints one JSON line last:
//! {"ran": [what its tool ran with], "output": the executor's answer} (or {"error": ...}).

use std::error::Error;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use langchain_rust::agent::{
    Agent, AgentExecutor, AgentStreamEvent, ConversationalAgentBuilder, OpenAiToolAgentBuilder,
};
use langchain_rust::chain::{Chain, ChainError};
use langchain_rust::prompt::PromptArgs;
use langchain_rust::llm::openai::OpenAI;
use langchain_rust::prompt_args;
use langchain_rust::tools::Tool;
use serde_json::{json, Value};

/// The agent's one tool: appends the term to ran.log in its directory, and says so.
struct Search {
    dir: PathBuf,
    ran: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Tool for Search {
    fn name(&self) -> String {
        "search".to_string()
    }

    fn description(&self) -> String {
        "Search the files for a term.".to_string()
    }

    async fn run(&self, input: Value) -> Result<String, Box<dyn Error>> {
        let term = match &input {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if term.starts_with("fail") {
            return Err(format!("no index for '{term}'").into());
        }
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("ran.log"))?;
        writeln!(log, "{term}")?;
        let mut ran = self.ran.lock().unwrap();
        ran.push(term.clone());
        Ok(format!("no file matches '{term}'"))
    }
}

/// One run of the executor: `invoke`, or `stream_events` to its `Finish` when `stream`.
async fn run<A: Agent + Send + Sync>(
    executor: AgentExecutor<A>,
    input: PromptArgs,
    stream: bool,
) -> Result<String, ChainError> {
    if !stream {
        return executor.invoke(input).await;
    }
    let mut events = executor.stream_events(input);
    while let Some(event) = events.next().await {
        if let AgentStreamEvent::Finish { output } = event? {
            return Ok(output);
        }
    }
    Err(ChainError::OtherError("the stream ended with no Finish".into()))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("tools");
    let max_iterations: i32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let model = std::env::var("ENDPOINT_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into());
    let task = std::env::var("ENDPOINT_TASK").unwrap_or_else(|_| "Find the term.".into());
    let dir = PathBuf::from(std::env::var("ENDPOINT_DIR").unwrap_or_else(|_| ".".into()));
    let ran = Arc::new(Mutex::new(Vec::new()));
    let tool: Arc<dyn Tool> = Arc::new(Search { dir, ran: ran.clone() });
    let llm = OpenAI::default().with_model(model);
    let input = prompt_args! {"input" => task};
    let stream = mode.ends_with("_stream");
    let result = match mode.trim_end_matches("_stream") {
        "chat" => {
            let agent = ConversationalAgentBuilder::new()
                .tools(&[tool])
                .build(llm)
                .expect("the agent");
            let executor = AgentExecutor::from_agent(agent).with_max_iterations(max_iterations);
            run(executor, input, stream).await
        }
        _ => {
            let agent = OpenAiToolAgentBuilder::new()
                .tools(&[tool])
                .build(llm)
                .expect("the agent");
            let executor = AgentExecutor::from_agent(agent).with_max_iterations(max_iterations);
            run(executor, input, stream).await
        }
    };
    let ran = ran.lock().unwrap().clone();
    let line = match result {
        Ok(output) => json!({"ran": ran, "output": output}),
        Err(e) => json!({"ran": ran, "error": e.to_string()}),
    };
    println!("{line}");
}
