// A tool-calling agent on the Vercel AI SDK (npm `ai`, `@ai-sdk/openai-compatible`) with the
// SDK's own OpenTelemetry spans (`experimental_telemetry`), exported by the OpenTelemetry Node
// SDK over OTLP/HTTP protobuf to OTEL_EXPORTER_OTLP_ENDPOINT (the sidecar under test), flushed
// before exit (tests/frameworks/test_vercel_ai.py). The model is FAKE_LLM_MODEL on the scripted
// server at FAKE_LLM_BASE_URL; argv[2] is the scenario (tests/frameworks/scenarios.py):
// `three_tools`, `three_tools_stream` (streamText), `limit` (the step limit: stopWhen
// stepCountIs(5)), `limit_summary` (the same in a span of the application's, which then asks
// for a summary in a call of its own), `tool_error` (the tool throws for "broken");
// `_nocontent` after a scenario's
// name records no inputs or outputs (`recordInputs`/`recordOutputs` false); `subagent`: the
// agent's tool `research` runs another generateText (functionId `vercel_sub`, on the model
// FAKE_LLM_MODEL-sub) with `lookup`. With RECORD_SPANS set to a
// path, every span is also appended there as one OTLP/JSON export request per line.
// It prints one JSON line last: {"ran": [the keys its tool ran with], "output": the text}.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { trace } from "@opentelemetry/api";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { NodeTracerProvider, type ReadableSpan } from "@opentelemetry/sdk-trace-node";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";
import { spanProcessors } from "./recording.ts";

const AGENT = "vercel_researcher"; // the telemetry's functionId
const SUB_AGENT = "vercel_sub";
const STEP_LIMIT = 5;

// streamText ends its root span after the text is read (after onFinish): the driver waits for
// it before it shuts the exporters down
let rootEnded: () => void = () => {};
const rootSpanEnded = new Promise<void>((resolve) => { rootEnded = resolve; });
const processors = spanProcessors({
  onStart: () => {},
  onEnd: (span: ReadableSpan) => { if (span.parentSpanContext === undefined) rootEnded(); },
  forceFlush: async () => {},
  shutdown: async () => {},
});
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "vercel-ai-service" }),
  spanProcessors: processors,
});
provider.register();

const ran: string[] = [];
const tools = {
  lookup: tool({
    description: "Look a key up.",
    inputSchema: z.object({ key: z.string().describe("the key") }),
    execute: async ({ key }: { key: string }) => {
      ran.push(key);
      if (key === "broken") throw new Error("lookup backend unavailable");
      return `value of ${key}: unknown`;
    },
  }),
};

const fake = createOpenAICompatible({
  name: "fakellm",
  baseURL: process.env.FAKE_LLM_BASE_URL ?? "",
  apiKey: "sk-fake-for-tests",
  includeUsage: true,
});
const MODEL = process.env.FAKE_LLM_MODEL ?? "";

const research = tool({
  description: "Hand a topic to the research sub-agent.",
  inputSchema: z.object({ topic: z.string().describe("the topic") }),
  execute: async ({ topic }: { topic: string }) => (await generateText({
    model: fake.chatModel(MODEL + "-sub"),
    prompt: `Research ${topic} with the lookup tool.`,
    tools,
    stopWhen: stepCountIs(20),
    experimental_telemetry: { isEnabled: true, functionId: SUB_AGENT },
  })).text,
});

async function main(scenario: string): Promise<string> {
  const settings = {
    model: fake.chatModel(MODEL),
    system: "You are a careful research agent. Use the lookup tool, then answer.",
    prompt: "Look the keys up, then say what you found.",
    tools: scenario === "subagent" ? { ...tools, research } : tools,
    stopWhen: stepCountIs(scenario.startsWith("limit") ? STEP_LIMIT : 20),
    experimental_telemetry: {
      isEnabled: true,
      functionId: AGENT,
      recordInputs: !scenario.endsWith("_nocontent"),
      recordOutputs: !scenario.endsWith("_nocontent"),
    },
  };
  if (scenario.endsWith("_stream")) {
    const result = streamText(settings);
    return await result.text;
  }
  if (scenario === "limit_summary") {
    // the application's task (one span, so one trace): the call, and when the step limit
    // stopped it, a request of the application's own for a summary (no step of the loop)
    return await trace.getTracer("app").startActiveSpan("task", async (span) => {
      try {
        const result = await generateText(settings);
        if (result.finishReason !== "tool-calls") return result.text;
        return (await generateText({
          model: settings.model,
          system: settings.system,
          prompt: "Summarise what you found so far.",
          experimental_telemetry: settings.experimental_telemetry,
        })).text;
      } finally {
        span.end();
      }
    });
  }
  return (await generateText(settings)).text;
}

const scenario = process.argv[2] ?? "three_tools";
let output = "";
try {
  output = await main(scenario);
  await rootSpanEnded;
} finally {
  await provider.shutdown(); // every span exported before exit
}
console.log(JSON.stringify({ ran, output }));
