// A tool-calling agent on Genkit for Go (github.com/firebase/genkit/go, its compat_oai OpenAI
// plugin) with Genkit's own OpenTelemetry spans (Genkit traces on the global tracer provider),
// exported over OTLP/HTTP protobuf to OTEL_EXPORTER_OTLP_ENDPOINT (the sidecar under test),
// flushed before exit (tests/frameworks/test_genkit_go.py). The agent is a flow,
// `genkit_researcher`, that runs `genkit.Generate` with the tool `lookup`; the model is
// `openai/<FAKE_LLM_MODEL>` on the scripted server at FAKE_LLM_BASE_URL. argv[1] is the
// scenario: `three_tools`, `limit` (`WithMaxTurns(3)`: Genkit fails when the model asks for a
// fourth round of tools), `tool_error` (the tool fails for "broken"), `subagent` (the tool
// `research` runs the flow `genkit_sub`, on FAKE_LLM_MODEL-sub, with `lookup`). With
// RECORD_SPANS set to a path, every export is also appended there as one OTLP/JSON export
// request per line. It prints one JSON line last: {"ran": [the keys its tool ran with],
// "output": the answer, "error": the flow's error's message or null}.
//
// `endpoint` and `endpoint_stream` (the model endpoint's tests): the same flow pointed at the
// watchdog's model endpoint by OPENAI_BASE_URL alone (the plugin's openai-go client reads it,
// and OPENAI_API_KEY), no telemetry; the model is `openai/<ENDPOINT_MODEL>`, the task
// ENDPOINT_TASK, the tool `search` (a term `q`), `WithMaxTurns(30)`; `endpoint_stream` streams
// the model's answers. It prints {"ran": [the search terms], "output": the answer}.
package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	"github.com/firebase/genkit/go/plugins/compat_oai/openai"
	"github.com/openai/openai-go/option"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// recorded sends each export to the sidecar (OTLP/HTTP protobuf) and, with RECORD_SPANS, also
// appends it to that file as OTLP/JSON (ids in hex, as OTLP/JSON writes them).
type recorded struct {
	otlp otlptrace.Client
	path string
	mu   sync.Mutex
}

func (c *recorded) Start(ctx context.Context) error { return c.otlp.Start(ctx) }
func (c *recorded) Stop(ctx context.Context) error  { return c.otlp.Stop(ctx) }

func (c *recorded) UploadTraces(ctx context.Context, spans []*tracepb.ResourceSpans) error {
	if c.path != "" {
		request := &collectortrace.ExportTraceServiceRequest{ResourceSpans: spans}
		raw, err := protojson.MarshalOptions{UseEnumNumbers: true}.Marshal(request)
		if err != nil {
			return err
		}
		var tree any
		if err := json.Unmarshal(raw, &tree); err != nil {
			return err
		}
		line, err := json.Marshal(hexIDs(tree))
		if err != nil {
			return err
		}
		c.mu.Lock()
		file, err := os.OpenFile(c.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = file.Write(append(line, '\n'))
			file.Close()
		}
		c.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return c.otlp.UploadTraces(ctx, spans)
}

// hexIDs: protobuf's JSON mapping writes bytes (trace and span ids) as base64, OTLP/JSON as hex.
func hexIDs(value any) any {
	switch v := value.(type) {
	case map[string]any:
		for key, item := range v {
			if text, ok := item.(string); ok && (key == "traceId" || key == "spanId" || key == "parentSpanId") {
				if raw, err := base64.StdEncoding.DecodeString(text); err == nil {
					v[key] = hex.EncodeToString(raw)
				}
				continue
			}
			v[key] = hexIDs(item)
		}
	case []any:
		for i, item := range v {
			v[i] = hexIDs(item)
		}
	}
	return value
}

type lookupInput struct {
	Key string `json:"key" jsonschema_description:"the key"`
}

type searchInput struct {
	Q string `json:"q" jsonschema_description:"the term"`
}

// endpoint runs the agent of the model endpoint's tests (see the file's comment).
func endpoint(ctx context.Context, stream bool) {
	g := genkit.Init(ctx, genkit.WithPlugins(&openai.OpenAI{}))
	ran := []string{}
	search := genkit.DefineTool(g, "search", "Search the files for a term.",
		func(ctx *ai.ToolContext, in searchInput) (string, error) {
			ran = append(ran, in.Q)
			return fmt.Sprintf("search #%d: no file matches '%s'", len(ran), in.Q), nil
		})
	options := []ai.GenerateOption{ai.WithModelName("openai/" + os.Getenv("ENDPOINT_MODEL")),
		ai.WithSystem("You are a careful research agent. Use the search tool, then answer."),
		ai.WithPrompt(os.Getenv("ENDPOINT_TASK")), ai.WithTools(search), ai.WithMaxTurns(30)}
	if stream {
		options = append(options, ai.WithStreaming(
			func(ctx context.Context, chunk *ai.ModelResponseChunk) error { return nil }))
	}
	agent := genkit.DefineFlow(g, "genkit_endpoint", func(ctx context.Context, _ string) (string, error) {
		return genkit.GenerateText(ctx, g, options...)
	})
	output, err := agent.Run(ctx, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	line, _ := json.Marshal(map[string]any{"ran": ran, "output": output})
	fmt.Println(string(line))
}

type researchInput struct {
	Topic string `json:"topic" jsonschema_description:"the topic"`
}

func main() {
	ctx := context.Background()
	scenario := "three_tools"
	if len(os.Args) > 1 {
		scenario = os.Args[1]
	}
	if scenario == "endpoint" || scenario == "endpoint_stream" {
		endpoint(ctx, scenario == "endpoint_stream")
		return
	}
	model := os.Getenv("FAKE_LLM_MODEL")

	exporter, err := otlptrace.New(ctx, &recorded{otlp: otlptracehttp.NewClient(),
		path: os.Getenv("RECORD_SPANS")})
	if err != nil {
		panic(err)
	}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter, sdktrace.WithBatchTimeout(50_000_000)),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("genkit-go-service"))))
	otel.SetTracerProvider(provider)

	g := genkit.Init(ctx, genkit.WithPlugins(&openai.OpenAI{APIKey: "sk-fake-for-tests",
		Opts: []option.RequestOption{option.WithBaseURL(os.Getenv("FAKE_LLM_BASE_URL"))}}))

	ran := []string{}
	var mu sync.Mutex
	lookup := genkit.DefineTool(g, "lookup", "Look a key up.",
		func(ctx *ai.ToolContext, in lookupInput) (string, error) {
			mu.Lock()
			ran = append(ran, in.Key)
			mu.Unlock()
			if in.Key == "broken" {
				return "", fmt.Errorf("backend unavailable for %s", in.Key)
			}
			return "value of " + in.Key, nil
		})
	sub := genkit.DefineFlow(g, "genkit_sub", func(ctx context.Context, topic string) (string, error) {
		return genkit.GenerateText(ctx, g, ai.WithModelName("openai/"+model+"-sub"),
			ai.WithPrompt("Research %s with the lookup tool.", topic), ai.WithTools(lookup),
			ai.WithMaxTurns(10))
	})
	research := genkit.DefineTool(g, "research", "Hand a topic to the research sub-agent.",
		func(ctx *ai.ToolContext, in researchInput) (string, error) {
			return sub.Run(ctx, in.Topic)
		})
	tools := []ai.ToolRef{lookup}
	if scenario == "subagent" {
		tools = append(tools, research)
	}
	turns := 10
	if scenario == "limit" {
		turns = 3
	}
	researcher := genkit.DefineFlow(g, "genkit_researcher", func(ctx context.Context, task string) (string, error) {
		return genkit.GenerateText(ctx, g, ai.WithModelName("openai/"+model),
			ai.WithSystem("You are a careful research agent. Use the lookup tool, then answer."),
			ai.WithPrompt(task), ai.WithTools(tools...), ai.WithMaxTurns(turns))
	})

	said := map[string]any{"output": nil, "error": nil}
	output, err := researcher.Run(ctx, "Look the keys a, b and c up, then say what you found.")
	if err != nil {
		said["error"] = err.Error()
	} else {
		said["output"] = output
	}
	if err := provider.Shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "export:", err)
	}
	said["ran"] = ran
	line, _ := json.Marshal(said)
	fmt.Println(string(line))
}
