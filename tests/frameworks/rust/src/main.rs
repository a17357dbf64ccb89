//! A Rust tool-calling agent on async-openai, pointed at the watchdog's model endpoint by
//! OPENAI_BASE_URL alone (no OpenTelemetry, no watchdog client): `OpenAIConfig::new()` reads
//! OPENAI_BASE_URL and OPENAI_API_KEY from the environment itself (async-openai's README, "Other
//! official environment variables supported"). The model to ask is ENDPOINT_MODEL, the task
//! ENDPOINT_TASK; argv[1] is the mode: `chat` or `chat_stream` (Chat Completions), `responses`
//! or `responses_stream` (the Responses API, the conversation sent whole).
//! It prints one JSON line last: {"ran": [the search terms its tool ran with], "output": answer}.

use std::error::Error;

use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls,
    ChatCompletionRequestAssistantMessageArgs, ChatCompletionRequestMessage,
    ChatCompletionRequestSystemMessage, ChatCompletionRequestToolMessageArgs,
    ChatCompletionRequestUserMessage, ChatCompletionTool, ChatCompletionTools,
    CreateChatCompletionRequestArgs, FunctionCall, FunctionObjectArgs,
};
use async_openai::types::responses::{
    CreateResponseArgs, EasyInputMessageArgs, FunctionCallOutput, FunctionCallOutputItemParam,
    FunctionToolArgs, InputItem, InputParam, Item, MessageItem, OutputItem, Response,
    ResponseStreamEvent, Role, Tool,
};
use async_openai::Client;
use futures::StreamExt;
use serde_json::{json, Value};

const INSTRUCTIONS: &str = "You are a careful research agent. Use the search tool, then answer.";
const DESCRIPTION: &str = "Search the files for a term.";
const MAX_STEPS: usize = 30;
const STOPPED: &str = "stopped at MAX_STEPS";

type Failure = Box<dyn Error>;

fn parameters() -> Value {
    json!({"type": "object",
           "properties": {"q": {"type": "string", "description": "the term"}},
           "required": ["q"]})
}

/// The agent's one tool: records the term it ran with.
fn search(ran: &mut Vec<String>, arguments: &str) -> Result<String, Failure> {
    let args: Value = serde_json::from_str(arguments)
        .map_err(|e| format!("the search call's arguments {arguments:?}: {e}"))?;
    let term = args
        .get("q")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("the search call's arguments {arguments:?} hold no q"))?;
    ran.push(term.to_string());
    Ok(format!("search #{}: no file matches '{}'", ran.len(), term))
}

async fn chat(
    client: &Client<OpenAIConfig>,
    model: &str,
    task: &str,
    stream: bool,
    ran: &mut Vec<String>,
) -> Result<String, Failure> {
    let mut messages: Vec<ChatCompletionRequestMessage> = vec![
        ChatCompletionRequestSystemMessage::from(INSTRUCTIONS).into(),
        ChatCompletionRequestUserMessage::from(task).into(),
    ];
    let tools = vec![ChatCompletionTools::Function(ChatCompletionTool {
        function: FunctionObjectArgs::default()
            .name("search")
            .description(DESCRIPTION)
            .parameters(parameters())
            .build()?,
    })];
    for _ in 0..MAX_STEPS {
        let request = CreateChatCompletionRequestArgs::default()
            .model(model)
            .messages(messages.clone())
            .tools(tools.clone())
            .build()?;
        let mut text = String::new();
        // (id, name, arguments) of each call, by index
        let mut calls: Vec<(String, String, String)> = Vec::new();
        if stream {
            let mut chunks = client.chat().create_stream(request).await?;
            while let Some(chunk) = chunks.next().await {
                for choice in chunk?.choices {
                    text.push_str(choice.delta.content.as_deref().unwrap_or(""));
                    for delta in choice.delta.tool_calls.unwrap_or_default() {
                        let index = delta.index as usize;
                        if calls.len() <= index {
                            calls.resize(index + 1, Default::default());
                        }
                        let slot = &mut calls[index];
                        if let Some(id) = delta.id {
                            slot.0 = id;
                        }
                        if let Some(function) = delta.function {
                            slot.1.push_str(function.name.as_deref().unwrap_or(""));
                            slot.2.push_str(function.arguments.as_deref().unwrap_or(""));
                        }
                    }
                }
            }
        } else {
            let completion = client.chat().create(request).await?;
            let choice = completion
                .choices
                .into_iter()
                .next()
                .ok_or("a chat completion without choices")?;
            text = choice.message.content.unwrap_or_default();
            for call in choice.message.tool_calls.unwrap_or_default() {
                if let ChatCompletionMessageToolCalls::Function(c) = call {
                    calls.push((c.id, c.function.name, c.function.arguments));
                }
            }
        }
        if calls.is_empty() {
            return Ok(text);
        }
        let mut assistant = ChatCompletionRequestAssistantMessageArgs::default();
        if !text.is_empty() {
            assistant.content(text);
        }
        assistant.tool_calls(
            calls
                .iter()
                .map(|(id, name, arguments)| {
                    ChatCompletionMessageToolCalls::Function(ChatCompletionMessageToolCall {
                        id: id.clone(),
                        function: FunctionCall {
                            name: name.clone(),
                            arguments: arguments.clone(),
                        },
                    })
                })
                .collect::<Vec<_>>(),
        );
        messages.push(assistant.build()?.into());
        for (id, _, arguments) in &calls {
            let result = search(ran, arguments)?;
            messages.push(
                ChatCompletionRequestToolMessageArgs::default()
                    .content(result)
                    .tool_call_id(id.clone())
                    .build()?
                    .into(),
            );
        }
    }
    Ok(STOPPED.to_string())
}

async fn respond(
    client: &Client<OpenAIConfig>,
    model: &str,
    task: &str,
    stream: bool,
    ran: &mut Vec<String>,
) -> Result<String, Failure> {
    let mut input: Vec<InputItem> = vec![EasyInputMessageArgs::default()
        .role(Role::User)
        .content(task)
        .build()?
        .into()];
    let tools = vec![Tool::from(
        FunctionToolArgs::default()
            .name("search")
            .description(DESCRIPTION)
            .parameters(parameters())
            .strict(false)
            .build()?,
    )];
    for _ in 0..MAX_STEPS {
        let request = CreateResponseArgs::default()
            .model(model)
            .instructions(INSTRUCTIONS)
            .input(InputParam::Items(input.clone()))
            .tools(tools.clone())
            .build()?;
        let response: Response = if stream {
            let mut events = client.responses().create_stream(request).await?;
            let mut completed = None;
            while let Some(event) = events.next().await {
                if let ResponseStreamEvent::ResponseCompleted(event) = event? {
                    completed = Some(event.response);
                }
            }
            completed.ok_or("the stream ended without response.completed")?
        } else {
            client.responses().create(request).await?
        };
        let mut calls = Vec::new();
        for item in &response.output {
            match item {
                OutputItem::Message(message) => input.push(InputItem::Item(Item::Message(
                    MessageItem::Output(message.clone()),
                ))),
                OutputItem::FunctionCall(call) => {
                    calls.push(call.clone());
                    input.push(InputItem::Item(Item::FunctionCall(call.clone())));
                }
                _ => {}
            }
        }
        if calls.is_empty() {
            return Ok(response.output_text().unwrap_or_default());
        }
        for call in calls {
            let result = search(ran, &call.arguments)?;
            input.push(InputItem::Item(Item::FunctionCallOutput(
                FunctionCallOutputItemParam {
                    call_id: Some(call.call_id),
                    output: FunctionCallOutput::Text(result),
                    id: None,
                    status: None,
                    name: None,
                    namespace: None,
                    caller: None,
                },
            )));
        }
    }
    Ok(STOPPED.to_string())
}

async fn run(mode: &str, ran: &mut Vec<String>) -> Result<String, Failure> {
    let model = std::env::var("ENDPOINT_MODEL").map_err(|_| "ENDPOINT_MODEL is not set")?;
    let task = std::env::var("ENDPOINT_TASK").unwrap_or_else(|_| "Find the file.".to_string());
    // OPENAI_BASE_URL and OPENAI_API_KEY from the environment (OpenAIConfig::new reads them)
    let client = Client::with_config(OpenAIConfig::new());
    let stream = mode.ends_with("_stream");
    match mode.trim_end_matches("_stream") {
        "chat" => chat(&client, &model, &task, stream, ran).await,
        "responses" => respond(&client, &model, &task, stream, ran).await,
        _ => Err(format!("unknown mode {mode:?} (chat, responses; each with _stream)").into()),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mode = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "chat".to_string());
    let mut ran = Vec::new();
    match run(&mode, &mut ran).await {
        Ok(output) => println!("{}", json!({"ran": ran, "output": output})),
        Err(error) => {
            eprintln!("{mode}: {error}");
            std::process::exit(1);
        }
    }
}
