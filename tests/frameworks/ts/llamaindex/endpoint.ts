// LlamaIndex.TS agents (npm `llamaindex` 0.12.1, `@llamaindex/workflow`'s `agent()` and
// `multiAgent()`, `@llamaindex/openai`'s `openai()` LLM), pointed at the watchdog's model
// endpoint by the base URL alone: OPENAI_BASE_URL, which `openai()` reads itself, or, with
// AGENT_LLM_BASE_URL set, that URL as the LLM's `baseURL` (no OpenTelemetry export, no watchdog
// client). Its tools are `tool()`s with a zod schema: `add` and `read_file` (the lines they
// are given go to the file AGENT_RAN_LOG). The model is OPENAI_MODEL; AGENT_TASKS a
// JSON list of tasks, each one `run()` (AGENT_STREAM=1: `runStream()`, its events read to its
// stop event) of the same agent; AGENT_KIND `single` (one `agent()`) or `multi` (a
// `multiAgent()` whose root, `supervisor`, can hand off to `worker`, which has the tools).
// With AGENT_CHAT=1 each task after the first is given the ones before as its `chatHistory`.
// It prints one JSON line per task: {"output": the result the caller got, "error": its error}.
import { appendFileSync } from "node:fs";
import { openai } from "@llamaindex/openai";
import { agent, multiAgent, stopAgentEvent } from "@llamaindex/workflow";
import { type ChatMessage, tool } from "llamaindex";
import { z } from "zod";

const MODEL = process.env.OPENAI_MODEL;
if (!MODEL) throw new Error("OPENAI_MODEL is not set");
const TASKS: string[] = JSON.parse(process.env.AGENT_TASKS ?? '["Add 100 to 0."]');
const KIND = process.env.AGENT_KIND ?? "single";
const STREAM = process.env.AGENT_STREAM === "1";

const RAN = process.env.AGENT_RAN_LOG ?? "ran.log";
const ran = (line: string) => appendFileSync(RAN, `${line}\n`);
const add = tool({
  name: "add",
  description: "Add two numbers.",
  parameters: z.object({ a: z.number(), b: z.number() }),
  execute: ({ a, b }) => {
    ran(`add ${JSON.stringify({ a, b })}`);
    return String(a + b);
  },
});
const readFile = tool({
  name: "read_file",
  description: "Read a file of the working directory.",
  parameters: z.object({ path: z.string() }),
  execute: ({ path }) => {
    ran(`read_file ${JSON.stringify({ path })}`);
    return "nothing here yet";
  },
});

// (no AGENT_LLM_BASE_URL: `baseURL` undefined, and the OpenAI client reads OPENAI_BASE_URL)
const llm = openai({ model: MODEL, baseURL: process.env.AGENT_LLM_BASE_URL });
const tools = [add, readFile];
const supervisor = agent({
  name: "supervisor", llm, tools: [], canHandoffTo: ["worker"],
  description: "Hands the sums to the worker.",
  systemPrompt: "You are the supervisor. Hand the sums to the worker.",
});
const worker = agent({
  name: "worker", llm, tools, description: "Does sums with the add tool.",
  systemPrompt: "You are the worker. Add with the add tool, then answer.",
});
const workflow = KIND === "multi"
  ? multiAgent({ agents: [supervisor, worker], rootAgent: supervisor })
  : agent({ name: "adder", llm, tools,
            systemPrompt: "You add numbers with the add tool, then answer." });

// AGENT_CHAT=1: each task after the first goes on from the ones before (their questions and
// results as its `chatHistory`), as a chat does
const history: ChatMessage[] = [];
for (const task of TASKS) {
  try {
    const params = process.env.AGENT_CHAT === "1" ? { chatHistory: [...history] } : {};
    let result: unknown;
    if (STREAM) {
      for await (const event of workflow.runStream(task, params)) {
        if (stopAgentEvent.include(event)) result = event.data.result;
      }
    } else {
      result = (await workflow.run(task, params)).data.result;
    }
    history.push({ role: "user", content: task }, { role: "assistant", content: String(result) });
    console.log(JSON.stringify({ output: String(result), error: "" }));
  } catch (error) {
    console.log(JSON.stringify({ output: "", error: String(error) }));
  }
}
