// A LangGraph.js ReAct agent (createReactAgent on @langchain/openai's ChatOpenAI) traced by
// OpenLLMetry's Node SDK (traceloop.initialize(), its LangChain instrumentation), pointed at the
// watchdog's model endpoint by its base URL alone: ChatOpenAI reads OPENAI_BASE_URL and
// OPENAI_API_KEY itself (Chat Completions). No span leaves the process (the test sets
// OTEL_SDK_DISABLED, and the SDK's tracing is off then), no watchdog client. The model is
// ENDPOINT_MODEL, the task ENDPOINT_TASK; argv[2] is the mode, `invoke`. The loop is LangGraph's
// own (recursionLimit 100): it ends when the model answers without a tool call. It prints one
// JSON line last: {"ran": [the search terms its tool ran with], "output": answer}.
import { tool } from "@langchain/core/tools";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { ChatOpenAI } from "@langchain/openai";
import * as traceloop from "@traceloop/node-server-sdk";
import { z } from "zod";

const TASK = process.env.ENDPOINT_TASK ?? "Find the file.";
const MODEL = process.env.ENDPOINT_MODEL;
if (!MODEL) throw new Error("ENDPOINT_MODEL is not set");
process.env.LANGCHAIN_CALLBACKS_BACKGROUND = "false";
traceloop.initialize({
  appName: "langgraphjs-endpoint",
  tracingEnabled: process.env.OTEL_SDK_DISABLED !== "true",
  silenceInitializationMessage: true,
  traceloopSyncEnabled: false,
});

const ran: string[] = [];
const search = tool(
  async ({ q }: { q: string }) => {
    ran.push(q);
    return `search #${ran.length}: no file matches '${q}'`;
  },
  {
    name: "search", description: "Search the files for a term.",
    schema: z.object({ q: z.string().describe("the term") }),
  },
);
const agent = createReactAgent({
  llm: new ChatOpenAI({ model: MODEL }), tools: [search], name: "langgraphjs-endpoint",
  prompt: "You are a careful research agent. Use the search tool, then answer.",
});
const out = await agent.invoke({ messages: [{ role: "user", content: TASK }] },
                               { recursionLimit: 100 });
console.log(JSON.stringify({ ran, output: String(out.messages[out.messages.length - 1].content) }));
