// A tool-calling agent on VoltAgent (npm `@voltagent/core`) with VoltAgent's own OpenTelemetry
// traces (its `VoltAgentObservability`, given the span processors of ../recording.ts: OTLP/HTTP
// protobuf to OTEL_EXPORTER_OTLP_ENDPOINT, the sidecar under test), flushed before exit
// (tests/frameworks/test_voltagent.py). The agent, `volt-researcher`, has the tool `lookup`;
// its model is FAKE_LLM_MODEL on the scripted server at FAKE_LLM_BASE_URL, through
// `@ai-sdk/openai-compatible` (Chat Completions). argv[2] is the scenario: `three_tools`
// (`generateText`; `three_tools_stream`: `streamText`), `limit` (`maxSteps: 5`: the loop ends
// after its fifth step, which asked for a tool), `tool_error` (the tool throws for "broken":
// VoltAgent hands the error to the model), `subagent` (the agent's sub-agent `volt-sub`, on
// FAKE_LLM_MODEL-sub with `lookup`, reached through VoltAgent's own `delegate_task` tool). It prints one JSON line last:
// {"ran": [the keys its tool ran with], "output": the answer, "error": the error's message or
// null}.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { Agent, createTool, VoltAgentObservability } from "@voltagent/core";
import { z } from "zod";

// (the sidecar's exporter and the recorder: ../recording.ts, on ../node_modules' OpenTelemetry
// JS 2.x, as VoltAgent's own)
import { spanProcessors } from "../recording.ts";

const scenario = process.argv[2] ?? "three_tools";
const provider = createOpenAICompatible({
  name: "fakellm", baseURL: process.env.FAKE_LLM_BASE_URL ?? "", apiKey: "sk-fake-for-tests",
});
const observability = new VoltAgentObservability({
  serviceName: "voltagent-service",
  spanProcessors: spanProcessors(),
});

const ran: string[] = [];
const lookup = createTool({
  name: "lookup",
  description: "Look a key up.",
  parameters: z.object({ key: z.string().describe("the key") }),
  execute: async ({ key }) => {
    ran.push(key);
    if (key === "broken") throw new Error(`backend unavailable for ${key}`);
    return `value of ${key}`;
  },
});
const sub = new Agent({
  name: "volt-sub",
  instructions: "Research the topic with the lookup tool.",
  model: provider.chatModel(`${process.env.FAKE_LLM_MODEL ?? ""}-sub`),
  tools: [lookup],
  observability,
});
const agent = new Agent({
  name: "volt-researcher",
  instructions: "You are a careful research agent. Use the lookup tool, then answer.",
  model: provider.chatModel(process.env.FAKE_LLM_MODEL ?? ""),
  tools: [lookup],
  ...(scenario === "subagent" ? { subAgents: [sub] } : {}),
  observability,
});

const task = "Look the keys a, b and c up, then say what you found.";
const options = { maxSteps: scenario === "limit" ? 5 : 10 };
let output: string | null = null;
let error: string | null = null;
try {
  if (scenario.endsWith("_stream")) {
    const stream = await agent.streamText(task, options);
    for await (const _chunk of stream.textStream) { /* the text as it comes, as a UI reads it */ }
    output = await stream.text;
  } else {
    output = (await agent.generateText(task, options)).text;
  }
} catch (caught) {
  error = (caught as Error).message;
} finally {
  await observability.shutdown();
}
console.log(JSON.stringify({ ran, output, error }));
// (VoltAgent keeps handles open: its observability's storage and timers)
process.exit(0);
