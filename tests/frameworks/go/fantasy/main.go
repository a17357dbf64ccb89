// A coding agent on charm.land/fantasy, the Go agent library Crush is built on, doing what
// Crush's `crush run` does against a provider of `"type": "openai"` (its source,
// internal/agent/agent.go and coordinator.go, at v0.90): fantasy's OpenAI provider with the
// Responses API allowed (used for the model names fantasy takes for OpenAI's: gpt-4…, gpt-5…;
// Chat Completions for any other), streamed; its shell tool `bash` and file tool `view` really
// run in the working directory, and its `agent` tool, a sub-agent in a session of its own; each
// request names its session (`x-session-id` and `x-session-affinity`, a hash of the session's
// id); its todo list's reminder, the first user message of each conversation, the task the
// second; and, as its first request goes out, the session's title asked of its small model (its
// title prompt, the task wrapped in one message, 40 tokens at most), in a goroutine of its own.
// Crush itself is not installable on the test machines (its npm package downloads its binary at
// install; the Go module proxy does not serve it): this is its engine and its requests.
//
// Its provider and models are read from the crush.json of its working directory, as Crush
// reads them (the part of it this loop uses: `providers`, a provider of `"type": "openai"`
// with its `base_url` and its `api_key`, `$NAME` read from the environment; `models`, its
// `large` and `small` models of that provider); its task is ENDPOINT_TASK. It prints one JSON
// line last: {"output": its answer, "title": the session's title}.
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"

	"charm.land/fantasy"
	"charm.land/fantasy/providers/openai"
)

const (
	userAgent = "Charm-Crush/fantasy-agent (agent-watchdog tests)"
	system    = "You are Crush, a powerful AI Assistant that runs in the CLI. Use the tools " +
		"available to you to do the task, then answer."
	titlePrompt = "You will generate a short title based on the first message a user begins " +
		"a conversation with.\n\n<rules>\n- Ensure it is not more than 50 characters long.\n" +
		"- The entire text you return will be used as the title.\n</rules>"
	// the message Crush's main agent puts before the task in every conversation (agent.go
	// preparePrompt; a sub-agent's has none): its first user message is this, the task second
	reminder = "<system_reminder>This is a reminder that your todo list is currently empty. " +
		"DO NOT mention this to the user explicitly because they are already aware.\n" +
		"If you are working on tasks that would benefit from a todo list please use the " +
		"\"todos\" tool to create one.\nIf not, please feel free to ignore. Again do not " +
		"mention this message to the user.</system_reminder>"
	// Crush's own loop detection (internal/agent/loop_detection.go): in the last 10 steps, one
	// tool interaction (calls and results) more than 5 times ends the run
	loopWindow, loopRepeats = 10, 5
)

type bashParams struct {
	Description string `json:"description" description:"A brief description of what the command does"`
	Command     string `json:"command" description:"The command to execute"`
}

type viewParams struct {
	FilePath string `json:"file_path" description:"The path to the file to read"`
}

func bash(ctx context.Context, params bashParams, _ fantasy.ToolCall) (fantasy.ToolResponse, error) {
	out, err := exec.CommandContext(ctx, "sh", "-c", params.Command).CombinedOutput()
	if err != nil {
		return fantasy.NewTextErrorResponse(fmt.Sprintf("%s\n%v", out, err)), nil
	}
	if len(out) == 0 {
		return fantasy.NewTextResponse("no output"), nil
	}
	return fantasy.NewTextResponse(string(out)), nil
}

func view(_ context.Context, params viewParams, _ fantasy.ToolCall) (fantasy.ToolResponse, error) {
	data, err := os.ReadFile(params.FilePath)
	if err != nil {
		return fantasy.NewTextErrorResponse(err.Error()), nil
	}
	return fantasy.NewTextResponse(string(data)), nil
}

type agentParams struct {
	Prompt string `json:"prompt" description:"The task for the agent to perform"`
}

// subAgent is Crush's `agent` tool (coordinator.go runSubAgent): a sub-agent on the large model
// in a session of its own (its id from the call's), its file tool alone, no todo reminder, its
// title asked as its first request goes out; its answer is the call's result.
func subAgent(large, small fantasy.LanguageModel, titles *sync.WaitGroup) func(
	context.Context, agentParams, fantasy.ToolCall) (fantasy.ToolResponse, error) {
	return func(ctx context.Context, params agentParams, call fantasy.ToolCall) (fantasy.ToolResponse, error) {
		sum := sha256.Sum256([]byte("agent-tool$$" + call.ID))
		session := hex.EncodeToString(sum[:16])
		titles.Add(1)
		go func() {
			defer titles.Done()
			_, _ = title(context.WithoutCancel(ctx), small, session, params.Prompt)
		}()
		agent := fantasy.NewAgent(large, fantasy.WithUserAgent(userAgent),
			fantasy.WithSystemPrompt("You are an agent for Crush. Use the tools available to "+
				"you to do the task, then answer concisely."),
			fantasy.WithTools(fantasy.NewAgentTool("view", "Reads a file.", view)))
		result, err := agent.Stream(ctx, fantasy.AgentStreamCall{Prompt: params.Prompt,
			Headers: sessionHeaders(session)})
		if err != nil {
			return fantasy.NewTextErrorResponse(err.Error()), nil
		}
		return fantasy.NewTextResponse(result.Response.Content.Text()), nil
	}
}

func sessionHeaders(session string) map[string]string {
	return map[string]string{"x-session-id": session, "x-session-affinity": session}
}

// repeated is Crush's stop condition: the same tool interaction too often in the last steps.
func repeated(steps []fantasy.StepResult) bool {
	if len(steps) < loopWindow {
		return false
	}
	counts := map[string]int{}
	for _, step := range steps[len(steps)-loopWindow:] {
		calls := step.Content.ToolCalls()
		if len(calls) == 0 {
			continue
		}
		results := map[string]string{}
		for _, result := range step.Content.ToolResults() {
			text, _ := json.Marshal(result.Result)
			results[result.ToolCallID] = string(text)
		}
		h := sha256.New()
		for _, call := range calls {
			fmt.Fprintf(h, "%s\x00%s\x00%s\x00", call.ToolName, call.Input, results[call.ToolCallID])
		}
		sig := hex.EncodeToString(h.Sum(nil))
		if counts[sig]++; counts[sig] > loopRepeats {
			return true
		}
	}
	return false
}

func title(ctx context.Context, model fantasy.LanguageModel, session, task string) (string, error) {
	agent := fantasy.NewAgent(model, fantasy.WithSystemPrompt(titlePrompt+"\n /no_think"),
		fantasy.WithMaxOutputTokens(40), fantasy.WithUserAgent(userAgent))
	result, err := agent.Stream(ctx, fantasy.AgentStreamCall{
		Prompt: fmt.Sprintf("Generate a concise title for the following content:\n\n%s\n "+
			"<think>\n\n</think>", task),
		Headers: sessionHeaders(session)})
	if err != nil {
		return "", err
	}
	return result.Response.Content.Text(), nil
}

type config struct {
	Providers map[string]struct {
		Type    string `json:"type"`
		BaseURL string `json:"base_url"`
		APIKey  string `json:"api_key"`
		Models  []struct {
			ID string `json:"id"`
		} `json:"models"`
	} `json:"providers"`
	Models map[string]struct {
		Provider string `json:"provider"`
		Model    string `json:"model"`
	} `json:"models"`
}

// models are the large and small models crush.json selects, on the provider it configures.
func models(ctx context.Context) (fantasy.LanguageModel, fantasy.LanguageModel, error) {
	data, err := os.ReadFile("crush.json")
	if err != nil {
		return nil, nil, err
	}
	var cfg config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, nil, fmt.Errorf("crush.json: %w", err)
	}
	picked := [2]fantasy.LanguageModel{}
	for i, slot := range []string{"large", "small"} {
		selected, ok := cfg.Models[slot]
		provider, known := cfg.Providers[selected.Provider]
		if !ok || !known || provider.Type != "openai" {
			return nil, nil, fmt.Errorf("crush.json: no %s model of a provider of type openai", slot)
		}
		listed := false
		for _, model := range provider.Models {
			listed = listed || model.ID == selected.Model
		}
		if !listed {
			return nil, nil, fmt.Errorf("crush.json: %s is not a model of %s", selected.Model, selected.Provider)
		}
		// (as Crush builds its provider of type openai: coordinator.go buildOpenaiProvider)
		client, err := openai.New(openai.WithAPIKey(os.ExpandEnv(provider.APIKey)),
			openai.WithUseResponsesAPI(), openai.WithBaseURL(os.ExpandEnv(provider.BaseURL)))
		if err != nil {
			return nil, nil, err
		}
		if picked[i], err = client.LanguageModel(ctx, selected.Model); err != nil {
			return nil, nil, err
		}
	}
	return picked[0], picked[1], nil
}

func run() error {
	ctx := context.Background()
	large, small, err := models(ctx)
	if err != nil {
		return err
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return err
	}
	session, task := hex.EncodeToString(id), os.Getenv("ENDPOINT_TASK")

	var titled string
	var titleErr error
	var wg, subTitles sync.WaitGroup
	wg.Add(1)
	go func() { // (as Crush's: started before the task's first request goes out)
		defer wg.Done()
		titled, titleErr = title(ctx, small, session, task)
	}()
	agent := fantasy.NewAgent(large, fantasy.WithSystemPrompt(system), fantasy.WithUserAgent(userAgent),
		fantasy.WithTools(
			fantasy.NewAgentTool("bash", "Executes a shell command in the working directory.", bash),
			fantasy.NewAgentTool("view", "Reads a file.", view),
			fantasy.NewAgentTool("agent", "Launches a new agent that has access to read-only "+
				"tools.", subAgent(large, small, &subTitles))))
	result, err := agent.Stream(ctx, fantasy.AgentStreamCall{Prompt: task,
		Messages: []fantasy.Message{fantasy.NewUserMessage(reminder)},
		Headers:  sessionHeaders(session), StopWhen: []fantasy.StopCondition{repeated}})
	wg.Wait()
	subTitles.Wait()
	if err != nil {
		return err
	}
	if titleErr != nil {
		return fmt.Errorf("the title: %w", titleErr)
	}
	line, err := json.Marshal(map[string]string{"output": result.Response.Content.Text(),
		"title": titled})
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
