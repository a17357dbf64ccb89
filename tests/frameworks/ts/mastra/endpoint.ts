// A tool-calling agent on Mastra (npm `@mastra/core`), pointed at the watchdog's model endpoint
// by its base URL alone (no OpenTelemetry, no watchdog client): the model is Mastra's router
// string `openai/<ENDPOINT_MODEL>`, whose OpenAI provider reads OPENAI_BASE_URL and
// OPENAI_API_KEY itself (the Responses API); `chat` modes give the router the same URL as an
// OpenAI-compatible endpoint (`{ id, url }`: Chat Completions). The task is ENDPOINT_TASK;
// argv[2] is the mode: `responses` or `chat`, with `agent.generate`, or with `agent.stream` as
// `<mode>_stream`. The tool loop is Mastra's own, to `maxSteps: 30` (ENDPOINT_OWN_LIMIT, if set,
// in place of 30): it ends when the model answers without a tool call. It prints one JSON line
// last: {"ran": [the search terms its tool ran with], "output": answer}.
import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { z } from "zod";

const TASK = process.env.ENDPOINT_TASK ?? "Find the file.";
const MODEL = process.env.ENDPOINT_MODEL;
if (!MODEL) throw new Error("ENDPOINT_MODEL is not set");
const mode = process.argv[2] ?? "responses";
const MAX_STEPS = Number(process.env.ENDPOINT_OWN_LIMIT ?? 30); // its own `maxSteps`
const ran: string[] = [];

const search = createTool({
  id: "search",
  description: "Search the files for a term.",
  inputSchema: z.object({ q: z.string().describe("the term") }),
  execute: async ({ q }) => {
    ran.push(q);
    return `search #${ran.length}: no file matches '${q}'`;
  },
});
const agent = new Agent({
  id: "mastra-endpoint", name: "mastra-endpoint",
  instructions: "You are a careful research agent. Use the search tool, then answer.",
  model: mode.startsWith("chat")
    ? { id: `endpoint/${MODEL}` as const, url: process.env.OPENAI_BASE_URL,
        apiKey: process.env.OPENAI_API_KEY }
    : `openai/${MODEL}` as const,
  tools: { search },
});

let output: string;
if (mode.endsWith("_stream")) {
  const stream = await agent.stream(TASK, { maxSteps: MAX_STEPS });
  for await (const _chunk of stream.textStream) { /* the text as it comes */ }
  output = await stream.text;
} else {
  output = (await agent.generate(TASK, { maxSteps: MAX_STEPS })).text;
}
console.log(JSON.stringify({ ran, output }));
