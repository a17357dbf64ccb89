// A tool-calling agent on the Vercel AI SDK (npm `ai` with its `@ai-sdk/openai` and
// `@ai-sdk/anthropic` providers), pointed at the watchdog's model endpoint by its base URL alone
// (no OpenTelemetry, no watchdog client): `@ai-sdk/openai` reads OPENAI_BASE_URL and
// OPENAI_API_KEY itself; `@ai-sdk/anthropic` is given `baseURL` ANTHROPIC_BASE_URL + "/v1" (its
// base URL ends in /v1, where the Anthropic SDKs' does not) and reads ANTHROPIC_API_KEY.
// The model to ask is ENDPOINT_MODEL, the task ENDPOINT_TASK; argv[2] is the mode:
// `responses` (`openai(model)`: the Responses API), `chat` (`openai.chat(model)`: Chat
// Completions), `messages` (`anthropic(model)`: Anthropic Messages), each with `generateText`,
// or with `streamText` as `<mode>_stream`; `agent` is the SDK's ToolLoopAgent on `openai(model)`
// (generate), `agent_stream` the same streamed. The tool loop is the SDK's own, to
// `stopWhen: stepCountIs(30)` (ENDPOINT_OWN_LIMIT, if set, in place of 30): it ends when the
// model answers without a tool call.
// It prints one JSON line last: {"ran": [the search terms its tool ran with], "output": answer}.
import { createAnthropic } from "@ai-sdk/anthropic";
import { openai } from "@ai-sdk/openai";
import { type LanguageModel, generateText, stepCountIs, streamText, tool, ToolLoopAgent } from "ai";
import { z } from "zod";

const TASK = process.env.ENDPOINT_TASK ?? "Find the file.";
const INSTRUCTIONS = "You are a careful research agent. Use the search tool, then answer.";
const MAX_STEPS = Number(process.env.ENDPOINT_OWN_LIMIT ?? 30);
const ran: string[] = [];

const tools = {
  search: tool({
    description: "Search the files for a term.",
    inputSchema: z.object({ q: z.string().describe("the term") }),
    execute: async ({ q }: { q: string }) => {
      ran.push(q);
      return `search #${ran.length}: no file matches '${q}'`;
    },
  }),
};

function languageModel(mode: string, model: string): LanguageModel {
  if (mode.startsWith("chat")) return openai.chat(model);
  if (mode.startsWith("messages")) {
    const base = process.env.ANTHROPIC_BASE_URL;
    if (!base) throw new Error("ANTHROPIC_BASE_URL is not set");
    return createAnthropic({ baseURL: base.replace(/\/+$/, "") + "/v1" })(model);
  }
  return openai(model); // `responses`, `agent`
}

async function main(mode: string, model: string): Promise<string> {
  const settings = {
    model: languageModel(mode, model),
    tools,
    stopWhen: stepCountIs(MAX_STEPS),
  };
  const stream = mode.endsWith("_stream");
  if (mode.startsWith("agent")) {
    const agent = new ToolLoopAgent({ ...settings, instructions: INSTRUCTIONS });
    if (stream) return await (await agent.stream({ prompt: TASK })).text;
    return (await agent.generate({ prompt: TASK })).text;
  }
  if (stream) {
    let failure: unknown;
    const result = streamText({ ...settings, system: INSTRUCTIONS, prompt: TASK,
                                onError: ({ error }) => { failure = error; } });
    const text = await result.text;
    if (failure !== undefined) throw failure;
    return text;
  }
  return (await generateText({ ...settings, system: INSTRUCTIONS, prompt: TASK })).text;
}

const mode = process.argv[2] ?? "responses";
const model = process.env.ENDPOINT_MODEL;
if (!model) throw new Error("ENDPOINT_MODEL is not set");
const output = await main(mode, model);
console.log(JSON.stringify({ ran, output }));
