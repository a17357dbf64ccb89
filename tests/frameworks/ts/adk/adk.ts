// A tool-calling agent on Google's Agent Development Kit for TypeScript (npm `@google/adk`) with
// ADK's own OpenTelemetry spans (tracer `gcp.vertex.agent`), exported by the span processors of
// ../recording.ts (OTLP/HTTP protobuf to OTEL_EXPORTER_OTLP_ENDPOINT, the sidecar under test) on
// a NodeTracerProvider, flushed before exit (tests/frameworks/test_google_adk_ts.py). ADK speaks
// only Google's Gemini API: its model is FAKE_LLM_MODEL on the scripted server, reached by
// GOOGLE_GEMINI_BASE_URL. The agent, `adk_researcher` (an LlmAgent, InMemoryRunner), has the
// tools `lookup` and `note`. argv[2] is the scenario: `three_tools`, `two_tools` (lookup, then
// note), `loop` (the same lookup four times), `limit` (lookup forever; RunConfig maxLlmCalls 3
// stops it), `tool_error` (lookup throws for "broken"), `subagent` (its sub-agent `adk_sub`, on
// FAKE_LLM_MODEL-sub with `lookup`, reached by ADK's own `transfer_to_agent`); a `_stream` suffix
// runs it with StreamingMode.SSE (streamGenerateContent), a `_nocontent` suffix with
// ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false (no arguments, results or responses on spans). It prints one JSON line last:
// {"ran": [the tools' arguments as run], "output": the last text, "error": the message or null}.
import { FunctionTool, Gemini, InMemoryRunner, LlmAgent, StreamingMode } from "@google/adk";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { z } from "zod";

import { spanProcessors } from "../recording.ts";

const scenario = process.argv[2] ?? "three_tools";
const base = scenario.replace(/_nocontent$/, "");
if (base !== scenario) process.env.ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS = "false";
const provider = new NodeTracerProvider({ spanProcessors: spanProcessors() });
provider.register();

const ran: string[] = [];
const lookup = new FunctionTool({
  name: "lookup",
  description: "Look a key up.",
  parameters: z.object({ key: z.string().describe("the key") }),
  execute: async ({ key }) => {
    ran.push(`lookup ${key}`);
    if (key === "broken") throw new Error(`backend unavailable for ${key}`);
    return { value: `value of ${key}` };
  },
});
const note = new FunctionTool({
  name: "note",
  description: "Write a note down.",
  parameters: z.object({ text: z.string().describe("the note") }),
  execute: async ({ text }) => {
    ran.push(`note ${text}`);
    return { saved: true };
  },
});
// the scripted server as the Gemini API (its paths without /v1), as a user points ADK elsewhere
process.env.GOOGLE_GEMINI_BASE_URL = (process.env.FAKE_LLM_BASE_URL ?? "").replace(/\/v1$/, "");
const model = (name: string) => new Gemini({ model: name, apiKey: "fake-key-for-tests" });
const sub = new LlmAgent({
  name: "adk_sub",
  description: "Researches one topic with the lookup tool.",
  instruction: "Research the topic with the lookup tool.",
  model: model(`${process.env.FAKE_LLM_MODEL ?? ""}-sub`),
  tools: [lookup],
});
const agent = new LlmAgent({
  name: "adk_researcher",
  description: "A careful research agent.",
  instruction: "You are a careful research agent. Use the lookup tool, then answer.",
  model: model(process.env.FAKE_LLM_MODEL ?? ""),
  tools: [lookup, note],
  ...(base.startsWith("subagent") ? { subAgents: [sub] } : {}),
});

const runner = new InMemoryRunner({ agent, appName: "adk_app" });
let output: string | null = null;
let error: string | null = null;
try {
  for await (const event of runner.runEphemeral({
    userId: "user",
    newMessage: { role: "user", parts: [{ text: "Look the keys a, b and c up, then say what you found." }] },
    runConfig: {
      maxLlmCalls: base.startsWith("limit") ? 3 : 20,
      streamingMode: base.endsWith("_stream") ? StreamingMode.SSE : StreamingMode.NONE,
    },
  })) {
    const text = (event.content?.parts ?? []).map((part) => part.text ?? "").join("");
    if (text && !event.partial) output = text;
  }
} catch (caught) {
  error = (caught as Error).message;
} finally {
  await provider.shutdown();
}
console.log(JSON.stringify({ ran, output, error }));
