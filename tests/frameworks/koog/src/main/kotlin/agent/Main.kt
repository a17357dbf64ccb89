package agent

import ai.koog.agents.core.agent.AIAgent
import ai.koog.agents.core.agent.config.AIAgentConfig
import ai.koog.agents.core.tools.ToolRegistry
import ai.koog.agents.core.tools.annotations.LLMDescription
import ai.koog.agents.core.tools.annotations.Tool
import ai.koog.agents.core.tools.reflect.ToolSet
import ai.koog.agents.features.opentelemetry.feature.OpenTelemetry
import ai.koog.prompt.dsl.prompt
import ai.koog.prompt.executor.clients.openai.OpenAIClientSettings
import ai.koog.prompt.executor.clients.openai.OpenAILLMClient
import ai.koog.prompt.executor.llms.SingleLLMPromptExecutor
import ai.koog.prompt.llm.LLMCapability
import ai.koog.prompt.llm.LLMProvider
import ai.koog.prompt.llm.LLModel
import io.opentelemetry.exporter.internal.otlp.traces.TraceRequestMarshaler
import io.opentelemetry.exporter.otlp.http.trace.OtlpHttpSpanExporter
import io.opentelemetry.sdk.common.CompletableResultCode
import io.opentelemetry.sdk.trace.data.SpanData
import io.opentelemetry.sdk.trace.export.SpanExporter
import java.io.ByteArrayOutputStream
import java.io.FileOutputStream
import java.io.OutputStream
import kotlin.system.exitProcess
import kotlinx.coroutines.runBlocking

/*
 * A Koog agent (JetBrains' Kotlin agent framework: `AIAgent` with its default single-run strategy
 * on `OpenAILLMClient`, a `ToolSet` of `@Tool` methods).
 *
 * `agent.MainKt SCENARIO`: traced by Koog's own OpenTelemetry feature, installed as its docs set
 * it up (`install(OpenTelemetry) { setServiceInfo(...); addSpanExporter(OTLP/HTTP) }`, verbose:
 * the messages and the tools' arguments on the spans, but in the scenarios ending `_default`),
 * against the scripted model (FAKE_LLM_BASE_URL, FAKE_LLM_MODEL). SCENARIO is `three_tools`,
 * `tool_error` (the tool throws for "broken"), `limit` (the agent's `maxIterations` of 10: past
 * it, Koog throws), `two_runs` (one agent run twice). With RECORD_SPANS set, every export is
 * also appended there as one OTLP/JSON request per line.
 *
 * `agent.MainKt endpoint chat|responses|responses_bare`: the model endpoint's agent (no tracing;
 * responses_bare: no system prompt), its base URL
 * OPENAI_BASE_URL, the model ENDPOINT_MODEL (spoken to over Chat Completions or the Responses
 * API), the task ENDPOINT_TASK, one tool `search`; it prints one JSON line last:
 * {"ran": [the search terms], "output": answer}.
 */

const val SERVICE = "koog_researcher"
val TASKS = mapOf(
    "three_tools" to "Look up a, b and c.", "limit" to "Look up every key you can find.",
    "tool_error" to "Look up broken.", "two_runs" to "Look up a.",
)

/** The scenarios' one tool, as every driver's (`drivers/_tools.py`). */
@LLMDescription("Lookup tools")
class Lookup : ToolSet {
    @Tool
    @LLMDescription("Look a key up.")
    fun lookup(@LLMDescription("the key to look up") key: String): String {
        if (key == "broken") {
            throw IllegalStateException("backend unavailable for $key")
        }
        return "value of $key"
    }
}

/** The model endpoint's tool: it counts each of its executions. */
@LLMDescription("Search tools")
class Search : ToolSet {
    val ran = mutableListOf<String>()

    @Tool
    @LLMDescription("Search the files for a term.")
    fun search(@LLMDescription("the term") q: String): String {
        ran.add(q)
        return "search #${ran.size}: no file matches '$q'"
    }
}

/** Each export to the sidecar, and appended to RECORD_SPANS as the OTLP/JSON request the OTLP
 * exporters' own marshaler makes of it (one request a line). */
class Tee(private val sidecar: SpanExporter, private val recording: OutputStream) : SpanExporter {
    override fun export(spans: Collection<SpanData>): CompletableResultCode {
        synchronized(recording) {
            val line = ByteArrayOutputStream()  // (the marshaler closes the stream it writes to)
            TraceRequestMarshaler.create(spans).writeJsonTo(line)
            line.write('\n'.code)
            line.writeTo(recording)
            recording.flush()
        }
        return sidecar.export(spans)
    }

    override fun flush(): CompletableResultCode = sidecar.flush()

    override fun shutdown(): CompletableResultCode = sidecar.shutdown()
}

fun env(name: String): String =
    System.getenv(name)?.takeIf { it.isNotEmpty() } ?: throw IllegalStateException("$name is not set")

/** The scripted (or the endpoint's) model as an OpenAI model Koog speaks to over `api`. */
fun model(id: String, api: LLMCapability): LLModel = LLModel(
    LLMProvider.OpenAI, id,
    listOf(LLMCapability.Completion, LLMCapability.Tools, LLMCapability.ToolChoice, api),
    128_000L,
)

fun executor(baseUrl: String, apiKey: String): SingleLLMPromptExecutor =
    SingleLLMPromptExecutor(OpenAILLMClient(apiKey, OpenAIClientSettings(baseUrl = baseUrl.removeSuffix("/v1"),
        chatCompletionsPath = "v1/chat/completions", responsesAPIPath = "v1/responses")))

fun traced(scenario: String) {
    val verbose = !scenario.endsWith("_default")
    val base = scenario.removeSuffix("_default")
    val task = TASKS[base] ?: throw IllegalArgumentException("no scenario $scenario")
    var exporter: SpanExporter = OtlpHttpSpanExporter.builder()
        .setEndpoint(env("OTEL_EXPORTER_OTLP_ENDPOINT") + "/v1/traces").build()
    val record = System.getenv("RECORD_SPANS")
    val recording = if (record.isNullOrEmpty()) null else FileOutputStream(record, true)
    if (recording != null) {
        exporter = Tee(exporter, recording)
    }
    val agent = AIAgent(
        promptExecutor = executor(env("FAKE_LLM_BASE_URL"), "sk-fake-for-tests"),
        llmModel = model(env("FAKE_LLM_MODEL"), LLMCapability.OpenAIEndpoint.Completions),
        toolRegistry = ToolRegistry { tools(Lookup()) },
        systemPrompt = "You are a careful research agent.",
        maxIterations = if (base == "limit") 10 else 50,
    ) {
        install(OpenTelemetry) {
            setServiceInfo(SERVICE, "1.0.0")
            addSpanExporter(exporter)
            setVerbose(verbose)
        }
    }
    val said = runBlocking {
        try {
            if (base == "two_runs") agent.run(task) + " / " + agent.run("Look up b.") else agent.run(task)
        } catch (error: Exception) {
            "stopped: $error"
        }
    }
    println(said)
    runBlocking { agent.close() }  // the feature's SDK flushes and shuts down with the agent
}

fun endpoint(mode: String) {
    val api = when (mode) {
        "chat" -> LLMCapability.OpenAIEndpoint.Completions
        "responses", "responses_bare" -> LLMCapability.OpenAIEndpoint.Responses
        else -> throw IllegalArgumentException("no mode $mode")
    }
    val search = Search()
    // (responses_bare: a prompt with no system message, so the request has no instructions
    // of its own: the endpoint's note goes into `instructions`, which the response echoes)
    val agent = if (mode == "responses_bare") AIAgent(
        promptExecutor = executor(env("OPENAI_BASE_URL"), env("OPENAI_API_KEY")),
        agentConfig = AIAgentConfig(prompt = prompt("bare") {}, model = model(env("ENDPOINT_MODEL"), api),
            maxAgentIterations = 50),
        toolRegistry = ToolRegistry { tools(search) },
    ) else AIAgent(
        promptExecutor = executor(env("OPENAI_BASE_URL"), env("OPENAI_API_KEY")),
        llmModel = model(env("ENDPOINT_MODEL"), api),
        toolRegistry = ToolRegistry { tools(search) },
        systemPrompt = "You are a careful research agent. Use the search tool, then answer.",
    )
    val output = runBlocking { agent.run(System.getenv("ENDPOINT_TASK") ?: "Find the file.") }
    val ran = search.ran.joinToString(",") { "\"" + it.replace("\\", "\\\\").replace("\"", "\\\"") + "\"" }
    val said = output.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")
    println("{\"ran\": [$ran], \"output\": \"$said\"}")
}

fun main(args: Array<String>) {
    when {
        args.size == 2 && args[0] == "endpoint" -> endpoint(args[1])
        args.size == 1 -> traced(args[0])
        else -> throw IllegalArgumentException("usage: agent.MainKt SCENARIO | endpoint chat|responses")
    }
    System.out.flush()
    exitProcess(0)  // the HTTP client's and the exporter's threads end with the JVM
}
