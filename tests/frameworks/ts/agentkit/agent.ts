// Inngest AgentKit (npm `@inngest/agent-kit`), run standalone (no Inngest server: outside an
// Inngest function its model adapter's request is a plain fetch): `createAgent` with a
// `createTool` tool of a zod schema, `add` (each call appends a line to AGENT_RAN_LOG), its model
// `openai({ model, baseUrl })` pointed at the watchdog's model endpoint by the base URL alone
// (AGENT_LLM_BASE_URL), the key OPENAI_API_KEY, which the adapter reads itself.
// AGENT_MODE=agent: `agent.run(input, { maxIter: AGENT_MAX_ITER })` for each of AGENT_INPUTS (a
// JSON list) in turn; AGENT_MODE=network: `createNetwork({ agents: [adder, reporter], router,
// maxIter: AGENT_MAX_ITER })`, its router code (the adder while it calls tools, then the
// reporter, then done), `network.run(input)` for each input. It prints one JSON line per run:
// {"output": the last assistant text, "agents": the agents that ran, in turn}.
import { appendFileSync } from "node:fs";

import { createAgent, createNetwork, createTool, openai } from "@inngest/agent-kit";
import { z } from "zod";

const MODEL = process.env.OPENAI_MODEL;
if (!MODEL) throw new Error("OPENAI_MODEL is not set");
const INPUTS: string[] = JSON.parse(process.env.AGENT_INPUTS ?? '["Add 100 to 0."]');
const RAN = process.env.AGENT_RAN_LOG ?? "ran.log";
const MODE = process.env.AGENT_MODE ?? "agent";
const MAX_ITER = Number(process.env.AGENT_MAX_ITER ?? 10);

const model = () => openai({ model: MODEL, baseUrl: process.env.AGENT_LLM_BASE_URL });

const add = createTool({
  name: "add",
  description: "Add two numbers.",
  parameters: z.object({ a: z.number(), b: z.number() }),
  handler: async ({ a, b }) => {
    appendFileSync(RAN, `add ${JSON.stringify({ a, b })}\n`);
    return String(a + b);
  },
});

const adder = createAgent({
  name: "adder", description: "Does sums with the add tool.",
  system: "You are a calculator. Do sums with the add tool.", tools: [add], model: model(),
});
const reporter = createAgent({
  name: "reporter", description: "Reports the sums done.",
  system: "You report the sums done in one sentence.", model: model(),
});

type Message = { type: string; role: string; content?: unknown };
function text(messages: Message[]): string | null {
  const last = [...messages].reverse().find((m) => m.type === "text" && m.role === "assistant");
  if (!last) return null;
  return typeof last.content === "string" ? last.content
    : (last.content as { text: string }[]).map((c) => c.text).join("");
}

for (const input of INPUTS) {
  if (MODE === "routed") {
    // no router: AgentKit's routing agent (its model the network's defaultModel) picks each
    // turn's agent by its select_agent tool, or ends the network by its done tool
    const network = createNetwork({
      name: "sums", agents: [adder, reporter], maxIter: MAX_ITER, defaultModel: model(),
    });
    const run = await network.run(input);
    const results = run.state.results;
    console.log(JSON.stringify({
      output: results.length ? text(results[results.length - 1].output as Message[]) : null,
      agents: results.map((r) => r.agentName),
    }));
  } else if (MODE === "network") {
    const network = createNetwork({
      name: "sums", agents: [adder, reporter], maxIter: MAX_ITER,
      router: ({ lastResult, callCount }) => {
        if (callCount === 0) return adder;
        if (!lastResult || lastResult.agentName === "reporter") return undefined;
        return lastResult.toolCalls.length ? adder : reporter;
      },
    });
    const run = await network.run(input);
    const results = run.state.results;
    console.log(JSON.stringify({
      output: results.length ? text(results[results.length - 1].output as Message[]) : null,
      agents: results.map((r) => r.agentName),
    }));
  } else {
    const result = await adder.run(input, { maxIter: MAX_ITER });
    console.log(JSON.stringify({ output: text(result.output as Message[]), agents: ["adder"] }));
  }
}
