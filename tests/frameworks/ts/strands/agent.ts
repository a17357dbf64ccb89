// Strands Agents for TypeScript (npm `@strands-agents/sdk`): an `Agent` on `OpenAIModel` with
// `api: 'chat'` (Chat Completions), pointed at the watchdog's model endpoint by the base URL
// alone: OPENAI_BASE_URL, which the OpenAI client reads itself, or, with AGENT_LLM_BASE_URL
// set, that URL as the model's `clientConfig.baseURL` (no watchdog client). Its tools are
// `tool()`s with a zod schema: `add` and `read_file` (the lines they are given go to the file
// AGENT_RAN_LOG). The model is OPENAI_MODEL; AGENT_TASKS a JSON list of tasks, each one
// `invoke()` (AGENT_STREAM=1: `stream()`, its events read to its result) of the same agent
// (AGENT_FRESH=1: a new agent for each, else the agent keeps its conversation, as a chat does).
// AGENT_KIND: `single` (one agent), `tool` (a `coordinator` whose tool `worker` is an agent:
// `asTool()`) or `swarm` (a `Swarm` whose `coordinator` hands off to `worker`, which has the
// tools: a hand-off is its structured output, the `strands_structured_output` tool).
// AGENT_TURNS: the invocation's own `limits.turns`. With AGENT_OTEL=1, Strands' own
// OpenTelemetry is on as its docs say (`telemetry.setupTracer({ exporters: { otlp: true } })`:
// OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT); with RECORD_SPANS set, a NodeTracerProvider of
// ../recording.ts's processors instead (the recording's). It prints one JSON line per task:
// {"output": the result's text, "stop": its stop reason, "error": its error}.
import { appendFileSync } from "node:fs";

import { Agent, Swarm, tool } from "@strands-agents/sdk";
import { OpenAIModel } from "@strands-agents/sdk/models/openai";
import { z } from "zod";

const MODEL = process.env.OPENAI_MODEL;
if (!MODEL) throw new Error("OPENAI_MODEL is not set");
const TASKS: string[] = JSON.parse(process.env.AGENT_TASKS ?? '["Add 100 to 0."]');
const KIND = process.env.AGENT_KIND ?? "single";
const STREAM = process.env.AGENT_STREAM === "1";
const TURNS = Number(process.env.AGENT_TURNS ?? 0);

let provider: { forceFlush(): Promise<void> } | undefined;
if (process.env.RECORD_SPANS) {
  const { NodeTracerProvider } = await import("@opentelemetry/sdk-trace-node");
  const { spanProcessors } = await import("../recording.ts");
  const node = new NodeTracerProvider({ spanProcessors: spanProcessors() });
  node.register();
  provider = node;
} else if (process.env.AGENT_OTEL === "1") {
  const { setupTracer } = await import("@strands-agents/sdk/telemetry");
  provider = setupTracer({ exporters: { otlp: true } });
}

const RAN = process.env.AGENT_RAN_LOG ?? "ran.log";
const ran = (line: string) => appendFileSync(RAN, `${line}\n`);
const add = tool({
  name: "add",
  description: "Add two numbers.",
  inputSchema: z.object({ a: z.number(), b: z.number() }),
  callback: ({ a, b }) => {
    ran(`add ${JSON.stringify({ a, b })}`);
    if (a < 0) throw new Error(`cannot add to ${a}`);
    return String(a + b);
  },
});
const readFile = tool({
  name: "read_file",
  description: "Read a file of the working directory.",
  inputSchema: z.object({ path: z.string() }),
  callback: ({ path }) => {
    ran(`read_file ${JSON.stringify({ path })}`);
    return "nothing here yet";
  },
});

// (no AGENT_LLM_BASE_URL: `baseURL` undefined, and the OpenAI client reads OPENAI_BASE_URL)
const model = new OpenAIModel({
  api: "chat", modelId: MODEL,
  clientConfig: { baseURL: process.env.AGENT_LLM_BASE_URL },
});
const tools = [add, readFile];

type Runner = {
  invoke(task: string, options?: object): Promise<unknown>;
  stream(task: string, options?: object): AsyncGenerator<unknown, unknown>;
};

function build(): Runner {
  if (KIND === "tool") {
    const worker = new Agent({
      model, name: "worker", tools, printer: false,
      description: "Does sums with the add tool.",
      systemPrompt: "You are the worker. Add with the add tool, then answer.",
    });
    return new Agent({
      model, name: "coordinator", tools: [worker.asTool({ name: "worker" })],
      printer: false, systemPrompt: "You are the coordinator. Ask the worker for the sums.",
    });
  }
  if (KIND === "swarm") {
    const coordinator = new Agent({
      model, id: "coordinator", name: "coordinator", printer: false,
      description: "Hands the sums to the worker.",
      systemPrompt: "You are the coordinator. Hand the sums to the worker.",
    });
    const worker = new Agent({
      model, id: "worker", name: "worker", tools, printer: false,
      description: "Does sums with the add tool.",
      systemPrompt: "You are the worker. Add with the add tool, then answer.",
    });
    return new Swarm({ nodes: [coordinator, worker], start: "coordinator", maxSteps: 4 });
  }
  return new Agent({
    model, name: "adder", tools, printer: false,
    systemPrompt: "You add numbers with the add tool, then answer.",
  });
}

// the result's text: an agent's last message's, or a swarm's content
function text(result: any): string {
  const blocks = result?.lastMessage?.content ?? result?.content ?? [];
  return blocks.filter((block: any) => block.type === "textBlock")
    .map((block: any) => block.text).join("");
}

let runner = build();
const options = TURNS ? { limits: { turns: TURNS } } : {};
for (const task of TASKS) {
  if (process.env.AGENT_FRESH === "1") runner = build();
  try {
    let result: any;
    if (STREAM) {
      const events = runner.stream(task, options);
      for (;;) {
        const next = await events.next();
        if (next.done) { result = next.value; break; }
      }
    } else {
      result = await runner.invoke(task, options);
    }
    console.log(JSON.stringify({ output: text(result), stop: result.stopReason ?? result.status,
                                 error: String(result.error ?? "") }));
  } catch (error) {
    console.log(JSON.stringify({ output: "", stop: "", error: String(error) }));
  }
}
await provider?.forceFlush();
