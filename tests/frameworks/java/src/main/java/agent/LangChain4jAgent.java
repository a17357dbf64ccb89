package agent;

import dev.langchain4j.agent.tool.P;
import dev.langchain4j.agent.tool.Tool;
import dev.langchain4j.memory.chat.MessageWindowChatMemory;
import dev.langchain4j.model.openai.OpenAiChatModel;
import dev.langchain4j.model.openai.OpenAiStreamingChatModel;
import dev.langchain4j.service.AiServices;
import dev.langchain4j.service.SystemMessage;
import dev.langchain4j.service.TokenStream;
import dev.langchain4j.service.UserMessage;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * An AiServices agent with a {@code @Tool} method, on LangChain4j's OpenAI models with their
 * default HTTP client (the JDK's java.net.http.HttpClient), pointed at the endpoint by
 * {@code baseUrl(OPENAI_BASE_URL)}.
 */
final class LangChain4jAgent {
    interface Assistant {
        @SystemMessage(Main.INSTRUCTIONS)
        String chat(@UserMessage String task);
    }

    interface StreamingAssistant {
        @SystemMessage(Main.INSTRUCTIONS)
        TokenStream chat(@UserMessage String task);
    }

    static final class Tools {
        @Tool(name = "search", value = Main.TOOL_DESCRIPTION)
        String search(@P("the term") String q) {
            return Main.search(q);
        }
    }

    static String run(String mode, String model, String task) throws Exception {
        return run(mode, model, task, Main.env("OPENAI_BASE_URL"), Main.env("OPENAI_API_KEY"));
    }

    static String run(String mode, String model, String task, String baseUrl, String apiKey)
            throws Exception {
        switch (mode) {
            case "chat": {
                OpenAiChatModel chatModel = OpenAiChatModel.builder()
                        .baseUrl(baseUrl).apiKey(apiKey).modelName(model).maxRetries(0).build();
                Assistant assistant = AiServices.builder(Assistant.class)
                        .chatModel(chatModel)
                        .chatMemory(MessageWindowChatMemory.withMaxMessages(4 * Main.MAX_STEPS))
                        .tools(new Tools())
                        .maxSequentialToolsInvocations(Main.MAX_STEPS)
                        .build();
                return assistant.chat(task);
            }
            case "chat_stream": {
                OpenAiStreamingChatModel chatModel = OpenAiStreamingChatModel.builder()
                        .baseUrl(baseUrl).apiKey(apiKey).modelName(model).build();
                StreamingAssistant assistant = AiServices.builder(StreamingAssistant.class)
                        .streamingChatModel(chatModel)
                        .chatMemory(MessageWindowChatMemory.withMaxMessages(4 * Main.MAX_STEPS))
                        .tools(new Tools())
                        .maxSequentialToolsInvocations(Main.MAX_STEPS)
                        .build();
                CompletableFuture<String> answer = new CompletableFuture<>();
                assistant.chat(task)
                        .onPartialResponse(text -> { })
                        .onCompleteResponse(response -> answer.complete(response.aiMessage().text()))
                        .onError(answer::completeExceptionally)
                        .start();
                return answer.get(120, TimeUnit.SECONDS);
            }
            default:
                throw new IllegalArgumentException("no mode " + mode);
        }
    }

    private LangChain4jAgent() {
    }
}
