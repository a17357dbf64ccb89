package agent;

import com.anthropic.client.AnthropicClient;
import com.anthropic.client.okhttp.AnthropicOkHttpClient;
import com.anthropic.core.JsonValue;
import com.anthropic.core.http.StreamResponse;
import com.anthropic.helpers.MessageAccumulator;
import com.anthropic.models.messages.ContentBlock;
import com.anthropic.models.messages.ContentBlockParam;
import com.anthropic.models.messages.Message;
import com.anthropic.models.messages.MessageCreateParams;
import com.anthropic.models.messages.RawMessageStreamEvent;
import com.anthropic.models.messages.Tool;
import com.anthropic.models.messages.ToolResultBlockParam;
import com.anthropic.models.messages.ToolUseBlock;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * A tool loop on the anthropic-java SDK's Messages (its OkHttp client), the conversation sent
 * whole each step; {@code AnthropicOkHttpClient.fromEnv()} reads ANTHROPIC_BASE_URL and
 * ANTHROPIC_API_KEY.
 */
final class AnthropicAgent {
    static String run(String mode, String model, String task) {
        return run(mode, model, task, AnthropicOkHttpClient.builder().fromEnv().maxRetries(0).build());
    }

    static String run(String mode, String model, String task, AnthropicClient client) {
        boolean stream = switch (mode) {
            case "messages" -> false;
            case "messages_stream" -> true;
            default -> throw new IllegalArgumentException("no mode " + mode);
        };
        Tool search = Tool.builder()
                .name("search")
                .description(Main.TOOL_DESCRIPTION)
                .inputSchema(Tool.InputSchema.builder()
                        .properties(JsonValue.from(Map.of(
                                "q", Map.of("type", "string", "description", "the term"))))
                        .putAdditionalProperty("required", JsonValue.from(List.of("q")))
                        .build())
                .build();
        MessageCreateParams.Builder params = MessageCreateParams.builder()
                .model(model)
                .maxTokens(1024)
                .system(Main.INSTRUCTIONS)
                .addTool(search)
                .addUserMessage(task);
        for (int step = 0; step < Main.MAX_STEPS; step++) {
            Message message;
            if (stream) {
                MessageAccumulator accumulator = MessageAccumulator.create();
                try (StreamResponse<RawMessageStreamEvent> events =
                             client.messages().createStreaming(params.build())) {
                    events.stream().forEach(accumulator::accumulate);
                }
                message = accumulator.message();
            } else {
                message = client.messages().create(params.build());
            }
            params.addMessage(message);
            StringBuilder text = new StringBuilder();
            List<ContentBlockParam> results = new ArrayList<>();
            for (ContentBlock block : message.content()) {
                block.text().ifPresent(part -> text.append(part.text()));
                if (block.toolUse().isPresent()) {
                    ToolUseBlock call = block.toolUse().get();
                    @SuppressWarnings("unchecked")
                    Map<String, Object> input = call._input().convert(Map.class);
                    results.add(ContentBlockParam.ofToolResult(ToolResultBlockParam.builder()
                            .toolUseId(call.id())
                            .content(Main.search(String.valueOf(input.get("q"))))
                            .build()));
                }
            }
            if (results.isEmpty()) {
                return text.toString();
            }
            params.addUserMessageOfContentBlockParams(results);
        }
        return "stopped at MAX_STEPS";
    }

    private AnthropicAgent() {
    }
}
