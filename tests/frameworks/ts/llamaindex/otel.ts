// A LlamaIndex.TS agent (`@llamaindex/workflow`'s `agent()` on `@llamaindex/openai`'s
// `openai()`, its tool `add` a `tool()` with a zod schema) traced by OpenLLMetry's
// `@traceloop/instrumentation-llamaindex` (`manuallyInstrument`: the modules are ES modules),
// its spans exported by ../recording.ts (OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT; RECORD_SPANS:
// a recording). The model is FAKE_LLM_MODEL at FAKE_LLM_BASE_URL (the LLM's `baseURL`); two
// tasks, each one `run()` of the same agent. It prints one JSON line per task: {"output": the
// result}.
import * as liOpenAI from "@llamaindex/openai";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { LlamaIndexInstrumentation } from "@traceloop/instrumentation-llamaindex";
import * as llamaindex from "llamaindex";
import { z } from "zod";

import { spanProcessors } from "../recording.ts";

const provider = new NodeTracerProvider({ spanProcessors: spanProcessors() });
const instrumentation = new LlamaIndexInstrumentation();
instrumentation.setTracerProvider(provider);
instrumentation.manuallyInstrument(llamaindex as never, liOpenAI as never);
// (the workflow after the instrumentation: its agents take the patched LLM class)
const { agent } = await import("@llamaindex/workflow");

const MODEL = process.env.FAKE_LLM_MODEL;
if (!MODEL) throw new Error("FAKE_LLM_MODEL is not set");
const TASKS = ["Add 100 to 0, 1 and 2.", "Add 100 to 4, 5 and 6."];
const add = llamaindex.tool({
  name: "add",
  description: "Add two numbers.",
  parameters: z.object({ a: z.number(), b: z.number() }),
  execute: ({ a, b }) => String(a + b),
});
const adder = agent({ name: "adder", llm: liOpenAI.openai({
  model: MODEL, baseURL: process.env.FAKE_LLM_BASE_URL, apiKey: "sk-fake" }), tools: [add],
                      systemPrompt: "You add numbers with the add tool, then answer." });
for (const task of TASKS) {
  console.log(JSON.stringify({ output: String((await adder.run(task)).data.result) }));
}
await provider.shutdown();
