package agent;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.micrometer.observation.ObservationRegistry;
import io.micrometer.tracing.handler.DefaultTracingObservationHandler;
import io.micrometer.tracing.otel.bridge.OtelBaggageManager;
import io.micrometer.tracing.otel.bridge.OtelCurrentTraceContext;
import io.micrometer.tracing.otel.bridge.OtelTracer;
import io.opentelemetry.exporter.internal.otlp.traces.TraceRequestMarshaler;
import io.opentelemetry.exporter.otlp.http.trace.OtlpHttpSpanExporter;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.common.CompletableResultCode;
import io.opentelemetry.sdk.resources.Resource;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.BatchSpanProcessor;
import io.opentelemetry.sdk.trace.export.SpanExporter;
import java.io.ByteArrayOutputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.client.advisor.ToolCallingAdvisor;
import org.springframework.ai.model.tool.DefaultToolCallingManager;
import org.springframework.ai.model.tool.ToolCallingManager;
import org.springframework.ai.openai.OpenAiChatModel;
import org.springframework.ai.openai.OpenAiChatOptions;
import org.springframework.ai.tool.annotation.Tool;
import org.springframework.ai.tool.annotation.ToolParam;
import org.springframework.ai.tool.observation.ToolCallingContentObservationFilter;

/**
 * A Spring AI {@code ChatClient} agent with a {@code @Tool} method on its OpenAI chat model.
 *
 * <p>{@code java agent.Main SCENARIO}: traced by Spring AI's Micrometer observations through
 * Micrometer Tracing's OpenTelemetry bridge, as a Spring Boot application's tracing sets them up
 * (one {@code DefaultTracingObservationHandler} on the observation registry, the tracer of scope
 * {@code org.springframework.boot}, the OTLP/HTTP exporter, the service named as
 * {@code spring.application.name} names it), against the scripted model (FAKE_LLM_BASE_URL,
 * FAKE_LLM_MODEL), each tool call's arguments and result on its span (as
 * {@code spring.ai.tools.observations.include-content=true} has it). SCENARIO is
 * {@code three_tools}, {@code tool_error} (the tool throws for "broken"), {@code limit} (the
 * tool-calling manager's {@code maxTotalToolCalls(5)}: past it, the manager's message is the
 * answer), {@code repeat} (the same, one call repeated), {@code two_invocations} (two prompts
 * of the chat client, one after the other, in the application's one observation); ending
 * {@code _default}, without the
 * tools' content (Spring AI's default). The application runs each invocation inside an
 * observation of its own ({@code research}, as a web request's would be) unless the scenario ends
 * {@code _bare} (then without the tools' content either). With RECORD_SPANS set, every export is also
 * appended there as one OTLP/JSON request per line.
 *
 * <p>{@code java agent.Main endpoint call|stream}: the model endpoint's agent (no tracing), its
 * base URL OPENAI_BASE_URL, the model ENDPOINT_MODEL, the task ENDPOINT_TASK, one tool
 * {@code search}; it prints one JSON line last: {"ran": [the search terms], "output": answer}.
 */
public final class Main {
    static final String SERVICE = "spring_ai_researcher";
    static final Map<String, String> TASKS = Map.of(
            "three_tools", "Look up a, b and c.", "limit", "Look up every key you can find.",
            "repeat", "Look up every key you can find.", "tool_error", "Look up broken.",
            "two_invocations", "Look up a.");

    /** The scenarios' one tool, as every driver's ({@code drivers/_tools.py}). */
    static final class Lookup {
        @Tool(name = "lookup", description = "Look a key up.")
        String lookup(@ToolParam(description = "the key to look up") String key) {
            if (key.equals("broken")) {
                throw new IllegalStateException("backend unavailable for " + key);
            }
            return "value of " + key;
        }
    }

    /** The model endpoint's tool: it counts each of its executions. */
    static final class Search {
        final List<String> ran = new ArrayList<>();

        @Tool(name = "search", description = "Search the files for a term.")
        String search(@ToolParam(description = "the term") String q) {
            ran.add(q);
            return "search #" + ran.size() + ": no file matches '" + q + "'";
        }
    }

    /** Each export to the sidecar, and appended to RECORD_SPANS as the OTLP/JSON request the
     * OTLP exporters' own marshaler makes of it (one request a line). */
    record Tee(SpanExporter sidecar, OutputStream recording) implements SpanExporter {
        @Override
        public CompletableResultCode export(Collection<SpanData> spans) {
            try {  // (the marshaler closes the stream it writes to)
                ByteArrayOutputStream line = new ByteArrayOutputStream();
                TraceRequestMarshaler.create(spans).writeJsonTo(line);
                line.write('\n');
                line.writeTo(recording);
                recording.flush();
            } catch (IOException error) {
                throw new UncheckedIOException(error);
            }
            return sidecar.export(spans);
        }

        @Override
        public CompletableResultCode flush() {
            return sidecar.flush();
        }

        @Override
        public CompletableResultCode shutdown() {
            return sidecar.shutdown();
        }
    }

    static String env(String name) {
        String value = System.getenv(name);
        if (value == null || value.isEmpty()) {
            throw new IllegalStateException(name + " is not set");
        }
        return value;
    }

    static OpenAiChatModel model(String baseUrl, String apiKey, String model,
                                 ObservationRegistry registry, ToolCallingManager tools) {
        return OpenAiChatModel.builder()
                .options(OpenAiChatOptions.builder().baseUrl(baseUrl).apiKey(apiKey).model(model)
                        .maxRetries(0).build())
                .observationRegistry(registry)
                .toolCallingManager(tools)
                .build();
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 2 && args[0].equals("endpoint")) {
            endpoint(args[1]);
        } else if (args.length == 1) {
            traced(args[0]);
        } else {
            throw new IllegalArgumentException("usage: agent.Main SCENARIO | endpoint call|stream");
        }
        System.out.flush();
        System.exit(0);  // OkHttp's pool and the exporter's threads end with the JVM
    }

    static void traced(String scenario) throws Exception {
        boolean bare = scenario.endsWith("_bare");
        String base = scenario.replaceFirst("_(bare|default)$", "");
        String task = TASKS.get(base);
        if (task == null) {
            throw new IllegalArgumentException("no scenario " + scenario);
        }
        SpanExporter exporter = OtlpHttpSpanExporter.builder()
                .setEndpoint(env("OTEL_EXPORTER_OTLP_ENDPOINT") + "/v1/traces").build();
        String record = System.getenv("RECORD_SPANS");
        OutputStream recording = null;
        if (record != null && !record.isEmpty()) {
            recording = new FileOutputStream(record, true);
            exporter = new Tee(exporter, recording);
        }
        SdkTracerProvider provider = SdkTracerProvider.builder()
                .setResource(Resource.getDefault().toBuilder().put("service.name", SERVICE).build())
                .addSpanProcessor(BatchSpanProcessor.builder(exporter)
                        .setScheduleDelay(Duration.ofMillis(50)).build())
                .build();
        OpenTelemetrySdk sdk = OpenTelemetrySdk.builder().setTracerProvider(provider).build();
        OtelCurrentTraceContext current = new OtelCurrentTraceContext();
        OtelTracer tracer = new OtelTracer(sdk.getTracer("org.springframework.boot"), current,
                event -> { }, new OtelBaggageManager(current, List.of(), List.of()));
        ObservationRegistry registry = ObservationRegistry.create();
        registry.observationConfig().observationHandler(new DefaultTracingObservationHandler(tracer));
        if (!bare && !scenario.endsWith("_default")) {
            // what spring.ai.tools.observations.include-content=true registers: each tool call's
            // arguments and result on its span
            registry.observationConfig().observationFilter(
                    new ToolCallingContentObservationFilter());
        }

        DefaultToolCallingManager.Builder manager = DefaultToolCallingManager.builder()
                .observationRegistry(registry);
        if (base.equals("limit") || base.equals("repeat")) {
            manager.maxTotalToolCalls(5);
        }
        ToolCallingManager tools = manager.build();
        OpenAiChatModel chatModel = model(env("FAKE_LLM_BASE_URL"), "sk-fake-for-tests",
                env("FAKE_LLM_MODEL"), registry, tools);
        ChatClient client = ChatClient.builder(chatModel, registry, null, null,
                        ToolCallingAdvisor.builder().toolCallingManager(tools))
                .defaultSystem("You are a careful research agent.")
                .defaultTools(new Lookup())
                .build();
        String said;
        try {
            if (bare) {
                said = client.prompt().user(task).call().content();
            } else {
                said = io.micrometer.observation.Observation.createNotStarted("research", registry)
                        .observe(() -> base.equals("two_invocations")
                                ? client.prompt().user(task).call().content() + " / "
                                        + client.prompt().user("Look up b.").call().content()
                                : client.prompt().user(task).call().content());
            }
        } catch (RuntimeException error) {
            said = "stopped: " + error;
        }
        System.out.println(said);
        provider.forceFlush().join(30, TimeUnit.SECONDS);
        provider.shutdown().join(30, TimeUnit.SECONDS);
        if (recording != null) {
            recording.close();
        }
    }

    static void endpoint(String mode) throws Exception {
        ObservationRegistry registry = ObservationRegistry.NOOP;
        ToolCallingManager tools = DefaultToolCallingManager.builder().build();
        OpenAiChatModel chatModel = model(env("OPENAI_BASE_URL"), env("OPENAI_API_KEY"),
                env("ENDPOINT_MODEL"), registry, tools);
        Search search = new Search();
        ChatClient client = ChatClient.builder(chatModel)
                .defaultSystem("You are a careful research agent. Use the search tool, then answer.")
                .defaultTools(search)
                .build();
        String task = System.getenv().getOrDefault("ENDPOINT_TASK", "Find the file.");
        String output = switch (mode) {
            case "call" -> client.prompt().user(task).call().content();
            case "stream" -> String.join("", client.prompt().user(task).stream().content()
                    .collectList().block(Duration.ofSeconds(120)));
            default -> throw new IllegalArgumentException("no mode " + mode);
        };
        Map<String, Object> outcome = new LinkedHashMap<>();
        outcome.put("ran", search.ran);
        outcome.put("output", output);
        System.out.println(new ObjectMapper().writeValueAsString(outcome));
    }

    private Main() {
    }
}
