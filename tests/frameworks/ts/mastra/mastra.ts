// A tool-calling agent on Mastra (npm `@mastra/core`) with Mastra's own traces exported by
// `@mastra/otel-exporter` over OTLP/HTTP protobuf to OTEL_EXPORTER_OTLP_ENDPOINT (the sidecar
// under test), flushed before exit (tests/frameworks/test_mastra.py). The agent,
// `mastra-researcher`, has the tool `lookup`; its model is FAKE_LLM_MODEL on the scripted
// server at FAKE_LLM_BASE_URL, through Mastra's model router (an OpenAI-compatible provider
// given by its URL). argv[2] is the scenario: `three_tools` (`three_tools_stream`:
// `agent.stream`), `limit` (`maxSteps: 3`: the loop ends after its third step, which asked
// for a tool), `tool_error` and `error_loop` (the tool throws for "broken": Mastra hands the
// error to the model), `subagent` (the tool `research` runs the agent `mastra-sub`, on
// FAKE_LLM_MODEL-sub, with `lookup`, in the tool's tracing context). With RECORD_SPANS set to a path, every span is also
// appended there as one OTLP/JSON export request per line. It prints one JSON line last:
// {"ran": [the keys its tool ran with], "output": the answer, "finish": the finish reason,
// "error": the error's message or null}.
import { appendFileSync } from "node:fs";

import { Agent } from "@mastra/core/agent";
import { Mastra } from "@mastra/core/mastra";
import { createTool } from "@mastra/core/tools";
import { Observability } from "@mastra/observability";
import { OtelExporter } from "@mastra/otel-exporter";
import { type ExportResult, ExportResultCode } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import type { ReadableSpan, SpanExporter } from "@opentelemetry/sdk-trace-base";
import { z } from "zod";

const ENDPOINT = `${process.env.OTEL_EXPORTER_OTLP_ENDPOINT}/v1/traces`;

// The OTLP exporter the OtelExporter makes for `provider.custom` (the sidecar's endpoint), and
// the recording beside it
class Recorded implements SpanExporter {
  private readonly otlp = new OTLPTraceExporter({ url: ENDPOINT });

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    const path = process.env.RECORD_SPANS;
    if (path) {
      const body = JsonTraceSerializer.serializeRequest(spans);
      if (body !== undefined) appendFileSync(path, Buffer.from(body).toString("utf8") + "\n");
    }
    this.otlp.export(spans, done);
  }

  async forceFlush(): Promise<void> {
    await this.otlp.forceFlush();
  }

  async shutdown(): Promise<void> {
    await this.otlp.shutdown();
  }
}

const MODEL = process.env.FAKE_LLM_MODEL ?? "";
const scenario = process.argv[2] ?? "three_tools";
const model = (name: string) => ({
  id: `fakellm/${name}` as const, url: process.env.FAKE_LLM_BASE_URL, apiKey: "sk-fake-for-tests",
});

const ran: string[] = [];
const lookup = createTool({
  id: "lookup",
  description: "Look a key up.",
  inputSchema: z.object({ key: z.string().describe("the key") }),
  execute: async ({ key }) => {
    ran.push(key);
    if (key === "broken") throw new Error(`backend unavailable for ${key}`);
    return `value of ${key}`;
  },
});
const sub = new Agent({
  id: "mastra-sub", name: "mastra-sub", instructions: "Research the topic with the lookup tool.",
  model: model(`${MODEL}-sub`), tools: { lookup },
});
const research = createTool({
  id: "research",
  description: "Hand a topic to the research sub-agent.",
  inputSchema: z.object({ topic: z.string().describe("the topic") }),
  // (the tool's tracing context passed on, as Mastra's docs do for nested agents: without it
  // the sub-agent's run is a trace of its own)
  execute: async ({ topic }, context) => (await sub.generate(
    `Research ${topic}.`, { maxSteps: 10, tracingContext: context?.tracingContext })).text,
});
const researcher = new Agent({
  id: "mastra-researcher", name: "mastra-researcher",
  instructions: "You are a careful research agent. Use the lookup tool, then answer.",
  model: model(MODEL),
  tools: scenario === "subagent" ? { lookup, research } : { lookup },
});
const observability = new Observability({
  configs: {
    otel: {
      serviceName: "mastra-service",
      exporters: [new OtelExporter({ exporter: new Recorded(),
                                     provider: { custom: { endpoint: ENDPOINT,
                                                                protocol: "http/protobuf" } } })],
    },
  },
});
const mastra = new Mastra({ agents: { researcher, sub }, observability, logger: false });

const task = "Look the keys a, b and c up, then say what you found.";
const options = { maxSteps: scenario === "limit" ? 3 : 10 };
let output: string | null = null;
let finish: string | null = null;
let error: string | null = null;
try {
  const agent = mastra.getAgent("researcher");
  if (scenario.endsWith("_stream")) {
    const stream = await agent.stream(task, options);
    for await (const _chunk of stream.textStream) { /* the text as it comes, as a UI reads it */ }
    output = await stream.text;
    finish = (await stream.finishReason) ?? null;
  } else {
    const result = await agent.generate(task, options);
    output = result.text;
    finish = result.finishReason ?? null;
  }
} catch (caught) {
  error = (caught as Error).message;
} finally {
  await observability.shutdown();
}
console.log(JSON.stringify({ ran, output, finish, error }));
