// A tool-calling agent on VoltAgent (npm `@voltagent/core`), pointed at the watchdog's model
// endpoint by its base URL alone (no OpenTelemetry export, no watchdog client): the model is
// VoltAgent's model string `openai/<ENDPOINT_MODEL>`, whose OpenAI provider reads OPENAI_BASE_URL
// and OPENAI_API_KEY itself (the Responses API); `chat` modes give `@ai-sdk/openai-compatible`
// the same URL (Chat Completions). The task is ENDPOINT_TASK; argv[2] is the mode: `responses` or
// `chat`, with `generateText`, or with `streamText` as `<mode>_stream`. The tool loop is
// VoltAgent's own, to `maxSteps: 30` (ENDPOINT_OWN_LIMIT, if set, in place of 30): it ends when
// the model answers without a tool call. It prints one JSON line last: {"ran": [the search terms
// its tool ran with], "output": answer}.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { Agent, createTool } from "@voltagent/core";
import { z } from "zod";

const TASK = process.env.ENDPOINT_TASK ?? "Find the file.";
const MODEL = process.env.ENDPOINT_MODEL;
if (!MODEL) throw new Error("ENDPOINT_MODEL is not set");
const mode = process.argv[2] ?? "responses";
const MAX_STEPS = Number(process.env.ENDPOINT_OWN_LIMIT ?? 30); // its own `maxSteps`
const ran: string[] = [];

const search = createTool({
  name: "search",
  description: "Search the files for a term.",
  parameters: z.object({ q: z.string().describe("the term") }),
  execute: async ({ q }) => {
    ran.push(q);
    return `search #${ran.length}: no file matches '${q}'`;
  },
});
const provider = createOpenAICompatible({
  name: "endpoint", baseURL: process.env.OPENAI_BASE_URL ?? "",
  apiKey: process.env.OPENAI_API_KEY,
});
const agent = new Agent({
  name: "voltagent-endpoint",
  instructions: "You are a careful research agent. Use the search tool, then answer.",
  model: mode.startsWith("chat") ? provider.chatModel(MODEL) : `openai/${MODEL}`,
  tools: [search],
});

let output: string;
if (mode.endsWith("_stream")) {
  const stream = await agent.streamText(TASK, { maxSteps: MAX_STEPS });
  for await (const _chunk of stream.textStream) { /* the text as it comes */ }
  output = await stream.text;
} else {
  output = (await agent.generateText(TASK, { maxSteps: MAX_STEPS })).text;
}
console.log(JSON.stringify({ ran, output }));
// (VoltAgent keeps handles open: its observability's storage and timers)
process.exit(0);
