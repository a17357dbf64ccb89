// A coding agent on charm.land/fantasy, the Go agent library Crush is built on, doing what
// Crush's `crush run` does against a provider of `"type": "openai"` (its source,
// internal/agent/agent.go and coordinator.go, at v0.90): fantasy's OpenAI provider with the
// Responses API allowed (used for the model names fantasy takes for OpenAI's: gpt-4…, gpt-5…;
// Chat Completions for any other), streamed; its shell tool `bash` and file tool `view` really
// run in the working directory; each request names its session (`x-session-id` and
// `x-session-affinity`, a hash of the session's id); and, as its first request goes out, the
// session's title asked of its small model (its title prompt, the task wrapped in one message,
// 40 tokens at most), in a goroutine of its own. Crush itself is not installable on the test
// machines (its npm package downloads its binary at install; the Go module proxy does not
// serve it): this is its engine and its requests.
//
// Its base URL is OPENAI_BASE_URL, its key OPENAI_API_KEY, its model ENDPOINT_MODEL, its small
// model ENDPOINT_SMALL_MODEL, its task ENDPOINT_TASK. It prints one JSON line last:
// {"output": its answer, "title": the session's title}.
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

func run() error {
	ctx := context.Background()
	provider, err := openai.New(openai.WithAPIKey(os.Getenv("OPENAI_API_KEY")),
		openai.WithUseResponsesAPI(), openai.WithBaseURL(os.Getenv("OPENAI_BASE_URL")))
	if err != nil {
		return err
	}
	large, err := provider.LanguageModel(ctx, os.Getenv("ENDPOINT_MODEL"))
	if err != nil {
		return err
	}
	small, err := provider.LanguageModel(ctx, os.Getenv("ENDPOINT_SMALL_MODEL"))
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
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // (as Crush's: started before the task's first request goes out)
		defer wg.Done()
		titled, titleErr = title(ctx, small, session, task)
	}()
	agent := fantasy.NewAgent(large, fantasy.WithSystemPrompt(system), fantasy.WithUserAgent(userAgent),
		fantasy.WithTools(
			fantasy.NewAgentTool("bash", "Executes a shell command in the working directory.", bash),
			fantasy.NewAgentTool("view", "Reads a file.", view)))
	result, err := agent.Stream(ctx, fantasy.AgentStreamCall{Prompt: task,
		Headers: sessionHeaders(session), StopWhen: []fantasy.StopCondition{repeated}})
	wg.Wait()
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
