// A tool-calling agent on the OpenAI Agents SDK for JavaScript (npm `@openai/agents`), pointed at
// the watchdog's model endpoint by OPENAI_BASE_URL alone: the SDK's default client is the
// `openai` package's, made with `setDefaultOpenAIClient(new OpenAI())` here as an application
// does (OPENAI_BASE_URL and OPENAI_API_KEY from the environment). No OpenTelemetry, no watchdog
// client; the SDK's own tracing is off (OPENAI_AGENTS_DISABLE_TRACING, as the tests' environment
// sets it). The model is ENDPOINT_MODEL, the task ENDPOINT_TASK; argv[2] is the mode:
// `responses` (the SDK's default model API, the Responses API), `responses_stream`
// (`run(..., { stream: true })`), `chat` (`setOpenAIAPI("chat_completions")`), `chat_stream`;
// `responses_chained`: the task, then a follow-up turn by `previousResponseId` (its output is
// the follow-up's); `responses_conversation`: the same in a conversation by `conversationId`.
// It prints one JSON line last: {"ran": [the search terms its tool ran with], "output": answer}.
import { Agent, run, setDefaultOpenAIClient, setOpenAIAPI, tool } from "@openai/agents";
import OpenAI from "openai";
import { z } from "zod";

const TASK = process.env.ENDPOINT_TASK ?? "Find the file.";
const INSTRUCTIONS = "You are a careful research agent. Use the search tool, then answer.";
const FOLLOW_UP = "Now find the other one.";
const MAX_TURNS = Number(process.env.ENDPOINT_OWN_LIMIT ?? 30); // its own `maxTurns`
const ran: string[] = [];

const search = tool({
  name: "search",
  description: "Search the files for a term.",
  parameters: z.object({ q: z.string().describe("the term") }),
  execute: async ({ q }) => {
    ran.push(q);
    return `search #${ran.length}: no file matches '${q}'`;
  },
});

const mode = process.argv[2] ?? "responses";
const model = process.env.ENDPOINT_MODEL;
if (!model) throw new Error("ENDPOINT_MODEL is not set");
setDefaultOpenAIClient(new OpenAI());
if (mode.startsWith("chat")) setOpenAIAPI("chat_completions");
const agent = new Agent({ name: "researcher", instructions: INSTRUCTIONS, model, tools: [search] });
let output: unknown;
if (mode.endsWith("_stream")) {
  const result = await run(agent, TASK, { stream: true, maxTurns: MAX_TURNS });
  for await (const _event of result) { /* the events as they come, as a UI reads them */ }
  await result.completed;
  output = result.finalOutput;
} else if (mode === "responses_chained") {
  // two turns of a conversation the server keeps: the second sends only its new message and
  // the id of the first turn's last response (`previousResponseId`), as does every request
  // of the SDK's run after it
  const first = await run(agent, TASK, { maxTurns: MAX_TURNS });
  output = (await run(agent, FOLLOW_UP, { maxTurns: MAX_TURNS,
                                          previousResponseId: first.lastResponseId })).finalOutput;
} else if (mode === "responses_conversation") {
  // the same two turns in a conversation of the Conversations API (`conversationId`: every
  // request names it and sends only the new items); the fake upstream keeps nothing, so the
  // id is made up, one per task
  const conversationId = "conv_" + TASK.replace(/\W+/g, "_");
  await run(agent, TASK, { maxTurns: MAX_TURNS, conversationId });
  output = (await run(agent, FOLLOW_UP, { maxTurns: MAX_TURNS, conversationId })).finalOutput;
} else {
  output = (await run(agent, TASK, { maxTurns: MAX_TURNS })).finalOutput;
}
console.log(JSON.stringify({ ran, output }));
