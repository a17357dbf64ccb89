// A tool-calling agent on the OpenAI Agents SDK for JavaScript (npm `@openai/agents`) traced by
// OpenInference (`@arizeai/openinference-instrumentation-openai-agents`: a trace processor of
// the SDK's that turns its traces into OpenTelemetry spans), exported by the OpenTelemetry Node
// SDK over OTLP/HTTP protobuf to OTEL_EXPORTER_OTLP_ENDPOINT (the sidecar under test), flushed
// before exit (tests/frameworks/test_openai_agents_js_oi.py). The model is FAKE_LLM_MODEL on the
// scripted server at FAKE_LLM_BASE_URL, through the SDK's default model API (the Responses API).
// argv[2] is the scenario: `three_tools` (`three_tools_stream`: `run(..., { stream: true })`),
// `limit` (`maxTurns: 3` -> MaxTurnsExceededError),
// `tool_error` (the tool throws for "broken"), `handoff` (a triage agent hands off to the
// researcher, on FAKE_LLM_MODEL-billing), `agent_as_tool` (a manager calls the researcher, on
// FAKE_LLM_MODEL-sub, as its tool `research`). With RECORD_SPANS set to a path, every span is
// also appended there as one OTLP/JSON export request per line.
// It prints one JSON line last: {"ran": [the keys its tool ran with], "output": the answer,
// "error": the run's error's class name or null}.
import { OpenAIAgentsInstrumentation } from "@arizeai/openinference-instrumentation-openai-agents";
import * as agents from "@openai/agents";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import OpenAI from "openai";
import { z } from "zod";
import { spanProcessors } from "./recording.ts";

const { Agent, run, setDefaultOpenAIClient, tool } = agents;

const processors = spanProcessors();
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "openai-agents-js-service" }),
  spanProcessors: processors,
});
provider.register();
// exclusive: the SDK's own exporter (to OpenAI's backend) is replaced; there is no network here
new OpenAIAgentsInstrumentation({ tracerProvider: provider }).manuallyInstrument(agents);

const ran: string[] = [];
const lookup = tool({
  name: "lookup",
  description: "Look a key up.",
  parameters: z.object({ key: z.string().describe("the key") }),
  execute: async ({ key }) => {
    ran.push(key);
    if (key === "broken") throw new Error(`backend unavailable for ${key}`);
    return `value of ${key}`;
  },
});

setDefaultOpenAIClient(new OpenAI({ baseURL: process.env.FAKE_LLM_BASE_URL,
                                    apiKey: "sk-fake-for-tests" }));
const MODEL = process.env.FAKE_LLM_MODEL ?? "";
const scenario = process.argv[2] ?? "three_tools";
const researcher = new Agent({
  name: "agents-js-researcher",
  instructions: "Look things up, then answer.",
  model: scenario === "handoff" ? MODEL + "-billing"
    : scenario === "agent_as_tool" ? MODEL + "-sub" : MODEL,
  tools: [lookup],
});
let start: agents.Agent<any, any> = researcher;
if (scenario === "handoff") {
  start = new Agent({ name: "agents-js-triage", instructions: "Hand billing questions off.",
                      model: MODEL, handoffs: [researcher] });
} else if (scenario === "agent_as_tool") {
  start = new Agent({
    name: "agents-js-manager",
    instructions: "Use the research tool, then answer.",
    model: MODEL,
    tools: [researcher.asTool({ toolName: "research",
                                toolDescription: "Research a question." })],
  });
}
let output: unknown = null;
let error: string | null = null;
try {
  const maxTurns = scenario === "limit" ? 3 : 10;
  if (scenario.endsWith("_stream")) {
    const result = await run(start, "Look up a, b and c.", { stream: true, maxTurns });
    for await (const _event of result) { /* the events as they come, as a UI reads them */ }
    await result.completed;
    output = result.finalOutput;
  } else {
    output = (await run(start, "Look up a, b and c.", { maxTurns })).finalOutput;
  }
} catch (caught) {
  error = (caught as Error).constructor.name;
} finally {
  await provider.shutdown(); // every span exported before exit
}
console.log(JSON.stringify({ ran, output, error }));
