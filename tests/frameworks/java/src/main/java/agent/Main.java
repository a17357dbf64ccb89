package agent;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Java tool-calling agents pointed at the watchdog's model endpoint by their base URL alone (no
 * OpenTelemetry, no watchdog client): {@code java agent.Main DRIVER MODE}, DRIVER
 * {@code langchain4j} (an AiServices agent on OpenAiChatModel, MODE {@code chat}, or on
 * OpenAiStreamingChatModel, {@code chat_stream}; its base URL from OPENAI_BASE_URL) or
 * {@code anthropic-java} (a tool loop on the anthropic-java SDK's Messages, MODE {@code messages} or
 * {@code messages_stream}; the SDK reads ANTHROPIC_BASE_URL itself). The model to ask is
 * ENDPOINT_MODEL, the task ENDPOINT_TASK.
 *
 * <p>It prints one JSON line last: {"ran": [the search terms its tool ran with], "output": answer}.
 *
 * <p>{@code java agent.Main train}: every mode once against a scripted model of its own (the
 * build's class-data archive records the classes they load).
 */
public final class Main {
    static final String INSTRUCTIONS =
            "You are a careful research agent. Use the search tool, then answer.";
    static final String TOOL_DESCRIPTION = "Search the files for a term.";
    static final int MAX_STEPS = 30;

    /** The one tool: it counts each of its executions. */
    static final List<String> RAN = new ArrayList<>();

    static String search(String q) {
        RAN.add(q);
        return "search #" + RAN.size() + ": no file matches '" + q + "'";
    }

    static String env(String name) {
        String value = System.getenv(name);
        if (value == null || value.isEmpty()) {
            throw new IllegalStateException(name + " is not set");
        }
        return value;
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 1 && args[0].equals("train")) {
            Train.run();
            System.exit(0);
        }
        if (args.length != 2) {
            throw new IllegalArgumentException(
                    "usage: agent.Main langchain4j|anthropic-java MODE, or agent.Main train");
        }
        String task = System.getenv().getOrDefault("ENDPOINT_TASK", "Find the file.");
        String model = env("ENDPOINT_MODEL");
        String output = switch (args[0]) {
            case "langchain4j" -> LangChain4jAgent.run(args[1], model, task);
            case "anthropic-java" -> AnthropicAgent.run(args[1], model, task);
            default -> throw new IllegalArgumentException("no driver " + args[0]);
        };
        Map<String, Object> outcome = new LinkedHashMap<>();
        outcome.put("ran", RAN);
        outcome.put("output", output);
        System.out.println(new ObjectMapper().writeValueAsString(outcome));
        System.out.flush();
        // the HTTP clients' threads (OkHttp's pool, the JDK client's selector) end with the JVM
        System.exit(0);
    }

    private Main() {
    }
}
