// A LangGraph.js ReAct agent (createReactAgent from @langchain/langgraph/prebuilt, on
// @langchain/openai's ChatOpenAI) traced by OpenLLMetry's Node SDK (@traceloop/node-server-sdk:
// traceloop.initialize(), whose LangChain instrumentation is always on), exported over OTLP/HTTP
// protobuf to OTEL_EXPORTER_OTLP_ENDPOINT by the SDK's own batch processor (the exporter is ours:
// the OTLP one, and the recording beside it). The model is FAKE_LLM_MODEL on the scripted server
// at FAKE_LLM_BASE_URL; argv[2] is the scenario (scripts in tests/frameworks/test_langchainjs_olm.py):
// `three_tools`, `limit` and `repeat` (recursionLimit 8: GraphRecursionError; `repeat` calls
// lookup("a") every time), `tool_error` (the tool throws for "broken"; the prebuilt ToolNode
// hands the error to the model), `managed_config` (agent `lg_manager` has a tool `researcher`
// that invokes another ReAct agent `lg_researcher` on FAKE_LLM_MODEL-sub, passing its config on).
// Each invocation runs inside traceloop.withAgent({name}), as OpenLLMetry's docs show: the
// LangChain instrumentation starts its spans in the active context and links them to nothing
// else (a scenario ending `_bare` invokes the agent without it). With RECORD_SPANS set, every export request is also appended there as one OTLP/JSON line.
import { appendFileSync } from "node:fs";

import { tool } from "@langchain/core/tools";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { ChatOpenAI } from "@langchain/openai";
import { type ExportResult } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import type { ReadableSpan, SpanExporter } from "@opentelemetry/sdk-trace-base";
import * as traceloop from "@traceloop/node-server-sdk";
import { z } from "zod";

process.env.OTEL_BSP_SCHEDULE_DELAY ??= "50"; // the SDK's batch processor reads it
// LangChain.js runs its callbacks in the background by default; awaited here, as serverless
// deployments set it (the instrumentation loses a model call's span now and then either way:
// tests/frameworks/test_langchainjs_olm.py)
process.env.LANGCHAIN_CALLBACKS_BACKGROUND = "false";

class Recorded implements SpanExporter {
  private readonly otlp = new OTLPTraceExporter({
    url: `${process.env.OTEL_EXPORTER_OTLP_ENDPOINT}/v1/traces`,
  });

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

traceloop.initialize({
  appName: "langchainjs-service",
  exporter: new Recorded(),
  silenceInitializationMessage: true,
  traceloopSyncEnabled: false,
});
// the LangChain instrumentation patches the ESM callback manager from a dynamic import
await import("@langchain/core/callbacks/manager");
await new Promise((resolve) => setTimeout(resolve, 0));

const argument = process.argv[2] ?? "three_tools";
const bare = argument.endsWith("_bare");
const scenario = argument.replace(/_bare$/, "");
// the agent's invocation as the application frames it (or not: `_bare`)
const framed = <T>(name: string, run: () => Promise<T>): Promise<T> =>
  bare ? run() : traceloop.withAgent({ name }, run);
const baseURL = process.env.FAKE_LLM_BASE_URL!;
const modelName = process.env.FAKE_LLM_MODEL!;
const model = (name: string) =>
  new ChatOpenAI({ model: name, apiKey: "sk-fake", configuration: { baseURL } });

const lookup = tool(
  async ({ key }: { key: string }) => {
    if (key === "broken") throw new Error(`backend unavailable for ${key}`);
    return `value of ${key}`;
  },
  { name: "lookup", description: "Look a key up.", schema: z.object({ key: z.string() }) },
);
const TASKS: Record<string, string> = {
  three_tools: "Look up a, b and c.",
  limit: "Look up every key you can find.",
  repeat: "Look up a until it changes.",
  tool_error: "Look up broken.",
  managed_config: "Look up a.",
};

async function main(): Promise<void> {
  let agent;
  if (scenario === "managed_config") {
    const researcher = createReactAgent({
      llm: model(modelName + "-sub"), tools: [lookup], name: "lg_researcher",
    });
    const research = tool(
      async ({ task }: { task: string }, config) => {
        const out = await framed("lg_researcher", () => researcher.invoke(
          { messages: [{ role: "user", content: task }] }, config));
        return String(out.messages[out.messages.length - 1].content);
      },
      { name: "researcher", description: "Looks keys up.", schema: z.object({ task: z.string() }) },
    );
    agent = createReactAgent({ llm: model(modelName), tools: [research], name: "lg_manager" });
  } else {
    agent = createReactAgent({ llm: model(modelName), tools: [lookup], name: "lg_researcher" });
  }
  try {
    const name = scenario === "managed_config" ? "lg_manager" : "lg_researcher";
    const out = await framed(name, () => agent.invoke(
      { messages: [{ role: "user", content: TASKS[scenario] }] },
      scenario === "limit" || scenario === "repeat" ? { recursionLimit: 8 } : {},
    ));
    console.log("answer:", String(out.messages[out.messages.length - 1].content));
  } catch (error) {
    console.log("raised:", (error as Error).name, (error as Error).message.split("\n")[0]);
  }
  await traceloop.forceFlush();
}

await main();
