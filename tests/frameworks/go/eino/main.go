// The Eino agent of the model endpoint's tests (tests/frameworks/test_eino.py): CloudWeGo's
// github.com/cloudwego/eino, its agents run as a user runs them, its model eino-ext's OpenAI
// ChatModel pointed at the sidecar by its BaseURL alone (from OPENAI_BASE_URL; its key
// OPENAI_API_KEY, its model OPENAI_MODEL). AGENT_KIND picks the agent: "react"
// (flow/agent/react's NewAgent, MaxStep AGENT_MAX_STEP), "adk" (adk's ChatModelAgent run by
// its Runner, MaxIterations AGENT_MAX_STEP), "supervisor" (adk/prebuilt/supervisor: a
// supervisor ChatModelAgent that transfers to a worker with the tools, which comes back) or
// "sequential" (adk's SequentialAgent: a researcher with the tools, then a writer without).
// AGENT_EXIT=1 gives adk's agents adk.ExitTool (the call that ends them). AGENT_STREAM=1
// streams (react: Stream; adk: the Runner's EnableStreaming). AGENT_TASKS (a JSON list) are
// its inputs, one call each. Its tools, from utils.InferTool: add and read_file, each
// appending what it was given to ran.log in the working directory. It prints one JSON line
// per call: the output the caller gets and the error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/cloudwego/eino-ext/components/model/openai"
	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/adk/prebuilt/supervisor"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/flow/agent/react"
	"github.com/cloudwego/eino/schema"
)

type sum struct {
	A int `json:"a" jsonschema:"description=the first number"`
	B int `json:"b" jsonschema:"description=the second number"`
}

type file struct {
	Path string `json:"path" jsonschema:"description=the file's name"`
}

// ran appends a tool's name and input to ran.log before it runs: what the agent really ran.
func ran(name string, input any) {
	out, err := os.OpenFile("ran.log", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fail(err)
	}
	given, _ := json.Marshal(input)
	fmt.Fprintf(out, "%s %s\n", name, given)
	out.Close()
}

func tools() []tool.BaseTool {
	add, err := utils.InferTool("add", "Adds two numbers.",
		func(_ context.Context, in sum) (int, error) {
			ran("add", in)
			return in.A + in.B, nil
		})
	if err != nil {
		fail(err)
	}
	read, err := utils.InferTool("read_file", "Reads a file of the working directory.",
		func(_ context.Context, in file) (string, error) {
			ran("read_file", in)
			data, err := os.ReadFile(strings.TrimSpace(in.Path))
			if err != nil {
				return "error: " + err.Error(), nil
			}
			return string(data), nil
		})
	if err != nil {
		fail(err)
	}
	return []tool.BaseTool{add, read}
}

type outcome struct {
	Output string `json:"output"`
	Error  string `json:"error"`
}

func main() {
	ctx := context.Background()
	model, err := openai.NewChatModel(ctx, &openai.ChatModelConfig{
		BaseURL: os.Getenv("OPENAI_BASE_URL"),
		APIKey:  os.Getenv("OPENAI_API_KEY"), Model: os.Getenv("OPENAI_MODEL")})
	if err != nil {
		fail(err)
	}
	var tasks []string
	if err := json.Unmarshal([]byte(os.Getenv("AGENT_TASKS")), &tasks); err != nil {
		fail(fmt.Errorf("AGENT_TASKS: %w", err))
	}
	steps, err := strconv.Atoi(os.Getenv("AGENT_MAX_STEP"))
	if err != nil {
		fail(fmt.Errorf("AGENT_MAX_STEP: %w", err))
	}
	stream := os.Getenv("AGENT_STREAM") == "1"
	var call func(task string) (string, error)
	switch kind := os.Getenv("AGENT_KIND"); kind {
	case "react":
		agent, err := react.NewAgent(ctx, &react.AgentConfig{
			ToolCallingModel: model, MaxStep: steps,
			ToolsConfig: compose.ToolsNodeConfig{Tools: tools()},
		})
		if err != nil {
			fail(err)
		}
		call = func(task string) (string, error) {
			input := []*schema.Message{
				schema.SystemMessage("You are a careful assistant. Use the tools."),
				schema.UserMessage(task)}
			if !stream {
				answer, err := agent.Generate(ctx, input)
				if err != nil {
					return "", err
				}
				return answer.Content, nil
			}
			reader, err := agent.Stream(ctx, input)
			if err != nil {
				return "", err
			}
			defer reader.Close()
			var text strings.Builder
			for {
				chunk, err := reader.Recv()
				if errors.Is(err, io.EOF) {
					return text.String(), nil
				}
				if err != nil {
					return text.String(), err
				}
				text.WriteString(chunk.Content)
			}
		}
	case "adk", "supervisor", "sequential":
		agent := adkAgent(ctx, kind, model, steps)
		runner := adk.NewRunner(ctx, adk.RunnerConfig{Agent: agent, EnableStreaming: stream})
		call = func(task string) (string, error) {
			return drain(runner.Query(ctx, task))
		}
	default:
		fail(fmt.Errorf("AGENT_KIND %q: react, adk, supervisor or sequential", kind))
	}
	for _, task := range tasks {
		output, err := call(task)
		result := outcome{Output: output}
		if err != nil {
			result.Error = err.Error()
		}
		line, _ := json.Marshal(result)
		fmt.Println(string(line))
	}
}

func chatAgent(ctx context.Context, name, instruction string, model *openai.ChatModel,
	steps int, withTools bool) *adk.ChatModelAgent {
	config := &adk.ChatModelAgentConfig{
		Name: name, Description: "The " + name + ".", Instruction: instruction,
		Model: model, MaxIterations: steps,
	}
	if withTools {
		config.ToolsConfig = adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: tools()}}
	}
	if os.Getenv("AGENT_EXIT") == "1" {
		config.Exit = adk.ExitTool{} // the agent ends by its exit tool's final_result
	}
	agent, err := adk.NewChatModelAgent(ctx, config)
	if err != nil {
		fail(err)
	}
	return agent
}

func adkAgent(ctx context.Context, kind string, model *openai.ChatModel, steps int) adk.Agent {
	switch kind {
	case "adk":
		return chatAgent(ctx, "assistant", "You are a careful assistant. Use the tools.", model,
			steps, true)
	case "supervisor":
		worker := chatAgent(ctx, "worker", "You do the sums with the tools.", model, steps, true)
		boss := chatAgent(ctx, "supervisor", "You hand the work to the worker.", model, steps,
			false)
		agent, err := supervisor.New(ctx, &supervisor.Config{Supervisor: boss,
			SubAgents: []adk.Agent{worker}})
		if err != nil {
			fail(err)
		}
		return agent
	default:
		researcher := chatAgent(ctx, "researcher", "You do the sums with the tools.", model,
			steps, true)
		writer := chatAgent(ctx, "writer", "You write up the researcher's sums.", model, steps,
			false)
		agent, err := adk.NewSequentialAgent(ctx, &adk.SequentialAgentConfig{
			Name: "pipeline", Description: "Sums, then the write-up.",
			SubAgents: []adk.Agent{researcher, writer}})
		if err != nil {
			fail(err)
		}
		return agent
	}
}

// drain reads a Runner's events to their end: the last assistant answer is the output, an
// event's error the error.
func drain(events *adk.AsyncIterator[*adk.AgentEvent]) (string, error) {
	var output string
	for {
		event, ok := events.Next()
		if !ok {
			return output, nil
		}
		if event.Err != nil {
			return output, event.Err
		}
		if event.Output == nil || event.Output.MessageOutput == nil {
			continue
		}
		message, err := event.Output.MessageOutput.GetMessage()
		if err != nil {
			return output, err
		}
		if message.Role == schema.Assistant && len(message.ToolCalls) == 0 ||
			message.Role == schema.Tool && event.Output.MessageOutput.ToolName == "exit" {
			output = message.Content // (its exit tool's result is the final_result it ended with)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "eino-agent:", err)
	os.Exit(2)
}
