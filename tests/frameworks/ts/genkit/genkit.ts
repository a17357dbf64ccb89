// A tool-calling agent on Genkit (npm `genkit`, `@genkit-ai/compat-oai`'s OpenAI-compatible
// plugin) with Genkit's own OpenTelemetry spans, exported (`enableTelemetry` from
// `genkit/tracing`, its NodeSDK) over OTLP/HTTP protobuf to OTEL_EXPORTER_OTLP_ENDPOINT (the
// sidecar under test), flushed before exit (tests/frameworks/test_genkit.py). The agent is a
// flow, `genkit_researcher`, that runs `ai.generate` with the tool `lookup`; the model is
// FAKE_LLM_MODEL on the scripted server at FAKE_LLM_BASE_URL. argv[2] is the scenario:
// `three_tools` (`three_tools_stream`: `ai.generateStream`), `limit` (`maxTurns: 3`: Genkit
// throws when the model asks for a fourth round of tools), `tool_error` (the tool throws for
// "broken"), `subagent` (the tool `research` runs the flow `genkit_sub`, on FAKE_LLM_MODEL-sub,
// with `lookup`). With RECORD_SPANS set to a path, every span is also appended there as one
// OTLP/JSON export request per line. It prints one JSON line last: {"ran": [the keys its tool ran
// with], "output": the answer, "error": the flow's error's message or null}.
import { appendFileSync } from "node:fs";

import { openAICompatible } from "@genkit-ai/compat-oai";
import { type ExportResult, ExportResultCode } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import {
  BatchSpanProcessor,
  type ReadableSpan,
  SimpleSpanProcessor,
  type SpanExporter,
  type SpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { genkit, z } from "genkit";
import { enableTelemetry, flushTracing } from "genkit/tracing";

class JsonLinesExporter implements SpanExporter {
  constructor(private readonly path: string) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    const body = JsonTraceSerializer.serializeRequest(spans);
    if (body !== undefined) appendFileSync(this.path, Buffer.from(body).toString("utf8") + "\n");
    done({ code: ExportResultCode.SUCCESS });
  }

  async shutdown(): Promise<void> {}
}

const processors: SpanProcessor[] = [
  new BatchSpanProcessor(new OTLPTraceExporter(), { scheduledDelayMillis: 50 }),
];
if (process.env.RECORD_SPANS) {
  processors.push(new SimpleSpanProcessor(new JsonLinesExporter(process.env.RECORD_SPANS)));
}
await enableTelemetry({ serviceName: "genkit-service", spanProcessors: processors });

const ai = genkit({
  plugins: [openAICompatible({ name: "fakellm", apiKey: "sk-fake-for-tests",
                               baseURL: process.env.FAKE_LLM_BASE_URL })],
});
const MODEL = process.env.FAKE_LLM_MODEL ?? "";
const scenario = process.argv[2] ?? "three_tools";

const ran: string[] = [];
const lookup = ai.defineTool(
  { name: "lookup", description: "Look a key up.",
    inputSchema: z.object({ key: z.string().describe("the key") }), outputSchema: z.string() },
  async ({ key }) => {
    ran.push(key);
    if (key === "broken") throw new Error(`backend unavailable for ${key}`);
    return `value of ${key}`;
  },
);
const sub = ai.defineFlow({ name: "genkit_sub", inputSchema: z.string() }, async (topic) =>
  (await ai.generate({ model: `fakellm/${MODEL}-sub`, tools: [lookup], maxTurns: 10,
                       prompt: `Research ${topic} with the lookup tool.` })).text);
const research = ai.defineTool(
  { name: "research", description: "Hand a topic to the research sub-agent.",
    inputSchema: z.object({ topic: z.string().describe("the topic") }), outputSchema: z.string() },
  async ({ topic }) => await sub(topic),
);
const researcher = ai.defineFlow({ name: "genkit_researcher", inputSchema: z.string() },
  async (task) => {
    const request = {
      model: `fakellm/${MODEL}`,
      system: "You are a careful research agent. Use the lookup tool, then answer.",
      prompt: task,
      tools: scenario === "subagent" ? [lookup, research] : [lookup],
      maxTurns: scenario === "limit" ? 3 : 10,
    };
    if (!scenario.endsWith("_stream")) return (await ai.generate(request)).text;
    const { stream, response } = ai.generateStream(request);
    for await (const _chunk of stream) { /* the chunks as they come, as a UI reads them */ }
    return (await response).text;
  });

let output: string | null = null;
let error: string | null = null;
try {
  output = await researcher("Look the keys a, b and c up, then say what you found.");
} catch (caught) {
  error = (caught as Error).message;
} finally {
  await flushTracing();
  await Promise.all(processors.map((processor) => processor.shutdown()));
}
console.log(JSON.stringify({ ran, output, error }));
