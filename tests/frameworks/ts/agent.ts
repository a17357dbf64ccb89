// A TypeScript tool-calling agent on the `openai` npm package, pointed at the watchdog's model
// endpoint by OPENAI_BASE_URL alone (no OpenTelemetry, no watchdog client). The model to ask
// is ENDPOINT_MODEL, the task ENDPOINT_TASK; argv[2] is the mode: `chat` or `chat_stream`
// (Chat Completions), `responses` or `responses_stream` (the Responses API, the conversation
// sent whole), `responses_chained` or `responses_chained_stream` (the Responses API, each
// request after the first only its new items and the previous response's id).
// It prints one JSON line last: {"ran": [the search terms its tool ran with], "output": answer}.
import OpenAI from "openai";

const TASK = process.env.ENDPOINT_TASK ?? "Find the file.";
const INSTRUCTIONS = "You are a careful research agent. Use the search tool, then answer.";
const MAX_STEPS = 30;
const PARAMETERS = {
  type: "object",
  properties: { q: { type: "string", description: "the term" } },
  required: ["q"],
};
const ran: string[] = [];

function search(q: string): string {
  ran.push(q);
  return `search #${ran.length}: no file matches '${q}'`;
}

type Call = { id: string; name: string; arguments: string };

async function chat(client: OpenAI, model: string, stream: boolean): Promise<string> {
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
    { role: "system", content: INSTRUCTIONS },
    { role: "user", content: TASK },
  ];
  const tools: OpenAI.Chat.ChatCompletionTool[] = [{
    type: "function",
    function: { name: "search", description: "Search the files for a term.", parameters: PARAMETERS },
  }];
  for (let step = 0; step < MAX_STEPS; step++) {
    let text = "";
    const calls: Call[] = [];
    if (stream) {
      const chunks = await client.chat.completions.create({ model, messages, tools, stream: true });
      for await (const chunk of chunks) {
        for (const choice of chunk.choices) {
          text += choice.delta.content ?? "";
          for (const delta of choice.delta.tool_calls ?? []) {
            const slot = (calls[delta.index] ??= { id: "", name: "", arguments: "" });
            slot.id = delta.id ?? slot.id;
            slot.name += delta.function?.name ?? "";
            slot.arguments += delta.function?.arguments ?? "";
          }
        }
      }
    } else {
      const message = (await client.chat.completions.create({ model, messages, tools })).choices[0].message;
      text = message.content ?? "";
      for (const call of message.tool_calls ?? []) {
        if (call.type === "function") {
          calls.push({ id: call.id, name: call.function.name, arguments: call.function.arguments });
        }
      }
    }
    if (calls.length === 0) return text;
    messages.push({
      role: "assistant",
      content: text || null,
      tool_calls: calls.map((c) => ({ id: c.id, type: "function" as const,
                                     function: { name: c.name, arguments: c.arguments } })),
    });
    for (const c of calls) {
      messages.push({ role: "tool", tool_call_id: c.id, content: search(JSON.parse(c.arguments).q) });
    }
  }
  return "stopped at MAX_STEPS";
}

// The text of a response's messages (what the SDK's output_text gives, where it sets it).
function outputText(response: OpenAI.Responses.Response): string {
  return response.output
    .flatMap((item) => (item.type === "message" ? item.content : []))
    .map((part) => (part.type === "output_text" ? part.text : ""))
    .join("");
}

// `chained`: each request after the first sends only its new items (the tool results) and the
// previous response's id (`previous_response_id`), the conversation kept by the server.
async function responses(client: OpenAI, model: string, stream: boolean, chained: boolean): Promise<string> {
  let input: OpenAI.Responses.ResponseInputItem[] = [{ role: "user", content: TASK }];
  let previous: string | undefined;
  const tools: OpenAI.Responses.Tool[] = [{
    type: "function", name: "search", description: "Search the files for a term.",
    parameters: PARAMETERS, strict: false,
  }];
  for (let step = 0; step < MAX_STEPS; step++) {
    let response: OpenAI.Responses.Response | undefined;
    if (stream) {
      const events = await client.responses.create({
        model, instructions: INSTRUCTIONS, input, tools, stream: true, previous_response_id: previous });
      for await (const event of events) {
        if (event.type === "response.completed") response = event.response;
      }
      if (response === undefined) throw new Error("the stream ended without response.completed");
    } else {
      response = await client.responses.create({
        model, instructions: INSTRUCTIONS, input, tools, previous_response_id: previous });
    }
    const calls = response.output.filter((item) => item.type === "function_call");
    if (chained) {
      previous = response.id;
      input = [];
    } else {
      input.push(...(response.output as OpenAI.Responses.ResponseInputItem[]));
    }
    if (calls.length === 0) return outputText(response);
    for (const c of calls) {
      input.push({ type: "function_call_output", call_id: c.call_id, output: search(JSON.parse(c.arguments).q) });
    }
  }
  return "stopped at MAX_STEPS";
}

const mode = process.argv[2] ?? "chat";
const model = process.env.ENDPOINT_MODEL;
if (!model) throw new Error("ENDPOINT_MODEL is not set");
const client = new OpenAI(); // OPENAI_BASE_URL and OPENAI_API_KEY from the environment
const stream = mode.endsWith("_stream");
const output = mode.startsWith("chat") ? await chat(client, model, stream)
  : await responses(client, model, stream, mode.startsWith("responses_chained"));
console.log(JSON.stringify({ ran, output }));
