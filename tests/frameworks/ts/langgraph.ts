// A LangGraph.js ReAct agent (createReactAgent from @langchain/langgraph/prebuilt, on
// @langchain/openai's ChatOpenAI) traced by OpenInference (@arizeai/openinference-
// instrumentation-langchain, manuallyInstrument on @langchain/core's callback manager), exported
// by the OpenTelemetry Node SDK over OTLP/HTTP protobuf to OTEL_EXPORTER_OTLP_ENDPOINT. The model
// is FAKE_LLM_MODEL on the scripted server at FAKE_LLM_BASE_URL; argv[2] is the scenario
// (scripts in tests/frameworks/test_langgraphjs_oi.py): `three_tools`, `limit` (recursionLimit 8:
// GraphRecursionError), `tool_error` (the tool throws for "broken"; the prebuilt ToolNode hands the error to the
// model), `managed` (agent `lg_manager` has a tool `researcher` that invokes another ReAct agent
// `lg_researcher` on FAKE_LLM_MODEL-sub; `managed_config`: the same, the tool passing its config
// to the sub-agent's invoke). With RECORD_SPANS set, every span is also appended
// there as one OTLP/JSON export request per line.
import { LangChainInstrumentation } from "@arizeai/openinference-instrumentation-langchain";
import * as CallbackManagerModule from "@langchain/core/callbacks/manager";
import { tool } from "@langchain/core/tools";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { ChatOpenAI } from "@langchain/openai";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { z } from "zod";
import { spanProcessors } from "./recording.ts";

const processors = spanProcessors();
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "langgraphjs-service" }),
  spanProcessors: processors,
});
provider.register();
new LangChainInstrumentation({ tracerProvider: provider }).manuallyInstrument(
  CallbackManagerModule,
);

const scenario = process.argv[2] ?? "three_tools";
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
  tool_error: "Look up broken.",
  managed: "Look up a.",
  managed_config: "Look up a.",
};

async function main(): Promise<void> {
  let agent;
  if (scenario === "managed" || scenario === "managed_config") {
    const researcher = createReactAgent({
      llm: model(modelName + "-sub"), tools: [lookup], name: "lg_researcher",
    });
    const research = tool(
      async ({ task }: { task: string }, config) => {
        // `managed` invokes the sub-agent as most examples do; `managed_config` passes the
        // tool's RunnableConfig on (its callbacks: the sub-agent's runs hang below the tool's)
        const out = await researcher.invoke({ messages: [{ role: "user", content: task }] },
                                            scenario === "managed_config" ? config : undefined);
        return String(out.messages[out.messages.length - 1].content);
      },
      { name: "researcher", description: "Looks keys up.", schema: z.object({ task: z.string() }) },
    );
    agent = createReactAgent({ llm: model(modelName), tools: [research], name: "lg_manager" });
  } else {
    agent = createReactAgent({ llm: model(modelName), tools: [lookup], name: "lg_researcher" });
  }
  try {
    const out = await agent.invoke(
      { messages: [{ role: "user", content: TASKS[scenario] }] },
      scenario === "limit" ? { recursionLimit: 8 } : {},
    );
    console.log("answer:", String(out.messages[out.messages.length - 1].content));
  } catch (error) {
    console.log("raised:", (error as Error).name, (error as Error).message.split("\n")[0]);
  }
  await provider.forceFlush();
  await provider.shutdown();
}

await main();
