// The LangChainGo agent of the model endpoint's tests (tests/frameworks/test_langchaingo.py):
// github.com/tmc/langchaingo's agents, run by its Executor as a user runs them, its model
// OpenAI's client, pointed at the sidecar by OPENAI_BASE_URL alone (OPENAI_API_KEY,
// OPENAI_MODEL: the client reads them). AGENT_KIND picks the agent: "oneshot" (a ReAct agent:
// Thought / Action / Action Input in the model's text, the observation appended to its one
// prompt), "conversational" (the same, in its chat form, its memory the executor's), or
// "functions" (the API's tool calling). AGENT_TASKS (a JSON list) are its inputs, one Executor
// call each, with AGENT_MAX_ITERATIONS its own limit. Its tools: a calculator and a file
// reader, each appending what it was given to ran.log in the working directory. It prints one
// JSON line per call: the output the user gets and the error.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/llms/openai"
	"github.com/tmc/langchaingo/memory"
	"github.com/tmc/langchaingo/tools"
)

// logged appends each input to ran.log before its tool runs: what the agent really ran.
type logged struct{ tools.Tool }

func (l logged) Call(ctx context.Context, input string) (string, error) {
	file, err := os.OpenFile("ran.log", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(file, "%s %s\n", l.Name(), strings.ReplaceAll(input, "\n", " "))
	file.Close()
	return l.Tool.Call(ctx, input)
}

// reader reads a file of the working directory.
type reader struct{}

func (reader) Name() string { return "read_file" }
func (reader) Description() string {
	return "Reads a file of the working directory. The input is the file's name."
}
func (reader) Call(_ context.Context, input string) (string, error) {
	data, err := os.ReadFile(strings.TrimSpace(input))
	if err != nil {
		return "error: " + err.Error(), nil
	}
	return string(data), nil
}

type outcome struct {
	Output string `json:"output"`
	Error  string `json:"error"`
}

func main() {
	llm, err := openai.New()
	if err != nil {
		fail(err)
	}
	var tasks []string
	if err := json.Unmarshal([]byte(os.Getenv("AGENT_TASKS")), &tasks); err != nil {
		fail(fmt.Errorf("AGENT_TASKS: %w", err))
	}
	iterations, err := strconv.Atoi(os.Getenv("AGENT_MAX_ITERATIONS"))
	if err != nil {
		fail(fmt.Errorf("AGENT_MAX_ITERATIONS: %w", err))
	}
	toolset := []tools.Tool{logged{tools.Calculator{}}, logged{reader{}}}
	var agent agents.Agent
	options := []agents.Option{agents.WithMaxIterations(iterations)}
	switch kind := os.Getenv("AGENT_KIND"); kind {
	case "oneshot":
		agent = agents.NewOneShotAgent(llm, toolset)
	case "conversational":
		agent = agents.NewConversationalAgent(llm, toolset)
		options = append(options, agents.WithMemory(memory.NewConversationBuffer()))
	case "functions":
		agent = agents.NewOpenAIFunctionsAgent(llm, toolset)
	default:
		fail(fmt.Errorf("AGENT_KIND %q: oneshot, conversational or functions", kind))
	}
	executor := agents.NewExecutor(agent, options...)
	for _, task := range tasks {
		values, err := chains.Call(context.Background(), executor, map[string]any{"input": task})
		result := outcome{}
		if err != nil {
			result.Error = err.Error()
		}
		if output, ok := values["output"].(string); ok {
			result.Output = output
		}
		line, _ := json.Marshal(result)
		fmt.Println(string(line))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "langchaingo-agent:", err)
	os.Exit(2)
}
