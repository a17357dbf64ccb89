// KaibanJS (npm `kaibanjs`): an `Agent` (its ReAct loop: each answer a JSON object in its text,
// `{"thought", "action", "actionInput"}` to run a tool, `{"finalAnswer"}` to end its task; no API
// tool calls, no streaming) with a `Task`, run by a `Team`'s `start()`, pointed at the watchdog's
// model endpoint by the base URL alone: with AGENT_LLM_BASE_URL set, the agent's
// `llmConfig.apiBaseUrl` (KaibanJS makes it the OpenAI client's `baseURL`), else OPENAI_BASE_URL,
// which the OpenAI client in its bundle reads itself. Its tool is LangChain's
// `DynamicStructuredTool` of a zod schema, `add` (each call appends a line to AGENT_RAN_LOG). The
// model is OPENAI_MODEL, the key the Team's `env` (OPENAI_API_KEY). AGENT_TASKS: a JSON list of
// task descriptions, each the one task of a `Team` started in turn (AGENT_ONE_TEAM=1: all of them
// tasks of one `Team`, started once, each with an agent of its own, run in turn).
// AGENT_MAX_ITERATIONS: the agent's own `maxIterations` (KaibanJS's default, 10). It prints one
// JSON line per start(): {"status": the workflow's status, "result": its result}.
import { appendFileSync } from "node:fs";

import { DynamicStructuredTool } from "@langchain/core/tools";
import { Agent, Task, Team } from "kaibanjs";
import { z } from "zod";

const MODEL = process.env.OPENAI_MODEL;
if (!MODEL) throw new Error("OPENAI_MODEL is not set");
const TASKS: string[] = JSON.parse(process.env.AGENT_TASKS ?? '["Add 100 to 0."]');
const RAN = process.env.AGENT_RAN_LOG ?? "ran.log";
const ONE_TEAM = process.env.AGENT_ONE_TEAM === "1";
const MAX = Number(process.env.AGENT_MAX_ITERATIONS ?? 0);

const add = new DynamicStructuredTool({
  name: "add",
  description: "Add two numbers.",
  schema: z.object({ a: z.number(), b: z.number() }),
  func: async ({ a, b }) => {
    appendFileSync(RAN, `add ${JSON.stringify({ a, b })}\n`);
    return String(a + b);
  },
});

function adder(): Agent {
  const agent = new Agent({
    name: "Adder", role: "Calculator", goal: "Do sums with the add tool.",
    background: "Arithmetic", tools: [add],
    ...(MAX ? { maxIterations: MAX } : {}),
    // (no AGENT_LLM_BASE_URL: no apiBaseUrl, and the OpenAI client reads OPENAI_BASE_URL)
    llmConfig: { provider: "openai", model: MODEL, apiBaseUrl: process.env.AGENT_LLM_BASE_URL },
  });
  return agent;
}

async function start(descriptions: string[]): Promise<void> {
  const agents = descriptions.map(() => adder());
  const tasks = descriptions.map(
    (description, index) => new Task({ description, expectedOutput: "The sums.", agent: agents[index] }));
  const team = new Team({
    name: "Sums", agents, tasks, env: { OPENAI_API_KEY: process.env.OPENAI_API_KEY ?? "" },
  });
  const output = await team.start();
  console.log(JSON.stringify({ status: output.status, result: output.result ?? null }));
}

if (ONE_TEAM) await start(TASKS);
else for (const description of TASKS) await start([description]);
