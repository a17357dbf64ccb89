package agent;

import com.anthropic.client.okhttp.AnthropicOkHttpClient;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;

/**
 * Every agent and mode once, each a tool call then an answer, against a scripted model on a
 * loopback port of its own: the build runs it under {@code -XX:ArchiveClassesAtExit}, so that
 * the class-data archive holds what a run loads and a run starts from it.
 */
final class Train {
    private static final ObjectMapper JSON = new ObjectMapper();

    private static final String CHAT_CALL = """
            {"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,\
            "message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1",\
            "type":"function","function":{"name":"search","arguments":"{\\"q\\":\\"x\\"}"}}]},\
            "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,\
            "total_tokens":2}}""";
    private static final String CHAT_ANSWER = """
            {"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,\
            "message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],\
            "usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}""";
    private static final String CHAT_CALL_STREAM = """
            data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":\
            [{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1",\
            "type":"function","function":{"name":"search","arguments":"{\\"q\\":\\"x\\"}"}}]},\
            "finish_reason":null}]}

            data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":\
            [{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

            data: [DONE]

            """;
    private static final String CHAT_ANSWER_STREAM = """
            data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":\
            [{"index":0,"delta":{"role":"assistant","content":"done"},"finish_reason":null}]}

            data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":\
            [{"index":0,"delta":{},"finish_reason":"stop"}]}

            data: [DONE]

            """;
    private static final String MESSAGE_CALL = """
            {"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":\
            "tool_use","id":"tu_1","name":"search","input":{"q":"x"}}],"stop_reason":"tool_use",\
            "stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}""";
    private static final String MESSAGE_ANSWER = """
            {"id":"msg_2","type":"message","role":"assistant","model":"m","content":[{"type":\
            "text","text":"done"}],"stop_reason":"end_turn","stop_sequence":null,\
            "usage":{"input_tokens":1,"output_tokens":1}}""";
    private static final String MESSAGE_START = """
            event: message_start
            data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":\
            "assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,\
            "usage":{"input_tokens":1,"output_tokens":0}}}

            """;
    private static final String MESSAGE_END = """
            event: content_block_stop
            data: {"type":"content_block_stop","index":0}

            event: message_delta
            data: {"type":"message_delta","delta":{"stop_reason":"%s","stop_sequence":null},\
            "usage":{"output_tokens":1}}

            event: message_stop
            data: {"type":"message_stop"}

            """;
    private static final String MESSAGE_CALL_STREAM = MESSAGE_START + """
            event: content_block_start
            data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use",\
            "id":"tu_1","name":"search","input":{}}}

            event: content_block_delta
            data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta",\
            "partial_json":"{\\"q\\":\\"x\\"}"}}

            """ + MESSAGE_END.formatted("tool_use");
    private static final String MESSAGE_ANSWER_STREAM = MESSAGE_START + """
            event: content_block_start
            data: {"type":"content_block_start","index":0,"content_block":{"type":"text",\
            "text":""}}

            event: content_block_delta
            data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",\
            "text":"done"}}

            """ + MESSAGE_END.formatted("end_turn");

    static void run() throws Exception {
        HttpServer server = HttpServer.create(
                new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        server.createContext("/", Train::answer);
        server.start();
        try {
            String base = "http://127.0.0.1:" + server.getAddress().getPort();
            for (String mode : new String[] {"chat", "chat_stream"}) {
                check(LangChain4jAgent.run(mode, "m", "train", base + "/v1", "k"));
            }
            for (String mode : new String[] {"messages", "messages_stream"}) {
                check(AnthropicAgent.run(mode, "m", "train", AnthropicOkHttpClient.builder()
                        .baseUrl(base).apiKey("k").maxRetries(0).build()));
            }
            JSON.writeValueAsString(Main.RAN);
        } finally {
            server.stop(0);
        }
    }

    private static void check(String output) {
        if (!"done".equals(output)) {
            throw new IllegalStateException("training run answered " + output);
        }
    }

    /** A tool call, or the answer once the conversation holds a tool's result. */
    private static void answer(HttpExchange exchange) throws IOException {
        JsonNode body = JSON.readTree(exchange.getRequestBody().readAllBytes());
        boolean stream = body.path("stream").asBoolean(false);
        boolean resulted = false;
        for (JsonNode message : body.path("messages")) {
            resulted |= message.path("role").asText().equals("tool")
                    || message.path("content").toString().contains("\"tool_result\"");
        }
        boolean messages = exchange.getRequestURI().getPath().endsWith("/messages");
        String text = messages
                ? (stream ? (resulted ? MESSAGE_ANSWER_STREAM : MESSAGE_CALL_STREAM)
                          : (resulted ? MESSAGE_ANSWER : MESSAGE_CALL))
                : (stream ? (resulted ? CHAT_ANSWER_STREAM : CHAT_CALL_STREAM)
                          : (resulted ? CHAT_ANSWER : CHAT_CALL));
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        exchange.getResponseHeaders().set("Content-Type",
                stream ? "text/event-stream" : "application/json");
        exchange.sendResponseHeaders(200, bytes.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(bytes);
        }
    }

    private Train() {
    }
}
