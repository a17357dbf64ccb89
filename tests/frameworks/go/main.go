// Go tool-calling agents on the official SDKs, pointed at the watchdog's model endpoint by
// OPENAI_BASE_URL or ANTHROPIC_BASE_URL alone (no OpenTelemetry, no watchdog client). The model
// to ask is ENDPOINT_MODEL, the task ENDPOINT_TASK; argv[1] is the mode: `chat` or
// `chat_stream` (Chat Completions, openai-go), `responses` or `responses_stream` (the Responses
// API, the conversation sent whole, openai-go), `responses_chained` or `responses_chained_stream`
// (the Responses API, each request after the first only its new items and the previous
// response's id, openai-go), `messages` or `messages_stream` (Anthropic
// Messages, anthropic-sdk-go).
// It prints one JSON line last: {"ran": [the search terms its tool ran with], "output": answer}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

const (
	instructions = "You are a careful research agent. Use the search tool, then answer."
	description  = "Search the files for a term."
	maxSteps     = 30
	stopped      = "stopped at MAX_STEPS"
)

var (
	properties = map[string]any{"q": map[string]any{"type": "string", "description": "the term"}}
	parameters = map[string]any{"type": "object", "properties": properties, "required": []string{"q"}}
	ran        = []string{}
)

func search(arguments string) (string, error) {
	var args struct {
		Q string `json:"q"`
	}
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return "", fmt.Errorf("the search call's arguments %q: %w", arguments, err)
	}
	ran = append(ran, args.Q)
	return fmt.Sprintf("search #%d: no file matches '%s'", len(ran), args.Q), nil
}

type call struct{ id, name, arguments string }

func chat(ctx context.Context, client openai.Client, model, task string, stream bool) (string, error) {
	messages := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(instructions),
		openai.UserMessage(task),
	}
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(
		shared.FunctionDefinitionParam{Name: "search", Description: openai.String(description),
			Parameters: parameters})}
	for step := 0; step < maxSteps; step++ {
		params := openai.ChatCompletionNewParams{Model: model, Messages: messages, Tools: tools}
		text := ""
		var calls []call
		if stream {
			chunks := client.Chat.Completions.NewStreaming(ctx, params)
			for chunks.Next() {
				for _, choice := range chunks.Current().Choices {
					text += choice.Delta.Content
					for _, delta := range choice.Delta.ToolCalls {
						for int64(len(calls)) <= delta.Index {
							calls = append(calls, call{})
						}
						slot := &calls[delta.Index]
						if delta.ID != "" {
							slot.id = delta.ID
						}
						slot.name += delta.Function.Name
						slot.arguments += delta.Function.Arguments
					}
				}
			}
			if err := chunks.Err(); err != nil {
				return "", err
			}
		} else {
			completion, err := client.Chat.Completions.New(ctx, params)
			if err != nil {
				return "", err
			}
			if len(completion.Choices) == 0 {
				return "", errors.New("a chat completion without choices")
			}
			message := completion.Choices[0].Message
			text = message.Content
			for _, c := range message.ToolCalls {
				if c.Type == "function" {
					calls = append(calls, call{c.ID, c.Function.Name, c.Function.Arguments})
				}
			}
		}
		if len(calls) == 0 {
			return text, nil
		}
		assistant := openai.ChatCompletionAssistantMessageParam{}
		if text != "" {
			assistant.Content.OfString = openai.String(text)
		}
		for _, c := range calls {
			assistant.ToolCalls = append(assistant.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: c.id,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name: c.name, Arguments: c.arguments}}})
		}
		messages = append(messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &assistant})
		for _, c := range calls {
			result, err := search(c.arguments)
			if err != nil {
				return "", err
			}
			messages = append(messages, openai.ToolMessage(result, c.id))
		}
	}
	return stopped, nil
}

// respond is the Responses API's tool loop; chained: each request after the first sends only its
// new items (the tool results) and the previous response's id (previous_response_id).
func respond(ctx context.Context, client openai.Client, model, task string, stream, chained bool) (string, error) {
	input := responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage(task, responses.EasyInputMessageRoleUser)}
	tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{
		Name: "search", Description: openai.String(description), Parameters: parameters,
		Strict: openai.Bool(false)}}}
	previous := ""
	for step := 0; step < maxSteps; step++ {
		params := responses.ResponseNewParams{Model: model, Instructions: openai.String(instructions),
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input}, Tools: tools}
		if previous != "" {
			params.PreviousResponseID = openai.String(previous)
		}
		var response *responses.Response
		if stream {
			events := client.Responses.NewStreaming(ctx, params)
			for events.Next() {
				if event := events.Current(); event.Type == "response.completed" {
					completed := event.AsResponseCompleted().Response
					response = &completed
				}
			}
			if err := events.Err(); err != nil {
				return "", err
			}
			if response == nil {
				return "", errors.New("the stream ended without response.completed")
			}
		} else {
			var err error
			if response, err = client.Responses.New(ctx, params); err != nil {
				return "", err
			}
		}
		var calls []responses.ResponseFunctionToolCall
		for _, item := range response.Output {
			switch item.Type {
			case "message":
				message := item.AsMessage().ToParam()
				input = append(input, responses.ResponseInputItemUnionParam{OfOutputMessage: &message})
			case "function_call":
				c := item.AsFunctionCall()
				calls = append(calls, c)
				asked := c.ToParam()
				input = append(input, responses.ResponseInputItemUnionParam{OfFunctionCall: &asked})
			}
		}
		if len(calls) == 0 {
			return response.OutputText(), nil
		}
		if chained {
			previous, input = response.ID, nil
		}
		for _, c := range calls {
			result, err := search(c.Arguments)
			if err != nil {
				return "", err
			}
			output := responses.ResponseInputItemParamOfFunctionCallOutput(result)
			output.OfFunctionCallOutput.CallID = openai.String(c.CallID)
			input = append(input, output)
		}
	}
	return stopped, nil
}

func messages(ctx context.Context, client anthropic.Client, model, task string, stream bool) (string, error) {
	conversation := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(task))}
	tools := []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "search",
		Description: anthropic.String(description),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: properties, Required: []string{"q"}}}}}
	for step := 0; step < maxSteps; step++ {
		params := anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 1024,
			System: []anthropic.TextBlockParam{{Text: instructions}}, Messages: conversation,
			Tools: tools}
		message := &anthropic.Message{}
		if stream {
			events := client.Messages.NewStreaming(ctx, params)
			for events.Next() {
				if err := message.Accumulate(events.Current()); err != nil {
					return "", err
				}
			}
			if err := events.Err(); err != nil {
				return "", err
			}
		} else {
			var err error
			if message, err = client.Messages.New(ctx, params); err != nil {
				return "", err
			}
		}
		conversation = append(conversation, message.ToParam())
		var results []anthropic.ContentBlockParamUnion
		var text strings.Builder
		for _, block := range message.Content {
			switch block.Type {
			case "text":
				text.WriteString(block.AsText().Text)
			case "tool_use":
				use := block.AsToolUse()
				result, err := search(string(use.Input))
				if err != nil {
					return "", err
				}
				results = append(results, anthropic.NewToolResultBlock(use.ID, result, false))
			}
		}
		if len(results) == 0 {
			return text.String(), nil
		}
		conversation = append(conversation, anthropic.NewUserMessage(results...))
	}
	return stopped, nil
}

func run(mode string) (string, error) {
	model := os.Getenv("ENDPOINT_MODEL")
	if model == "" {
		return "", errors.New("ENDPOINT_MODEL is not set")
	}
	task := os.Getenv("ENDPOINT_TASK")
	if task == "" {
		task = "Find the file."
	}
	ctx := context.Background()
	stream := strings.HasSuffix(mode, "_stream")
	switch strings.TrimSuffix(mode, "_stream") {
	case "chat": // OPENAI_BASE_URL and OPENAI_API_KEY from the environment
		return chat(ctx, openai.NewClient(), model, task, stream)
	case "responses", "responses_chained":
		return respond(ctx, openai.NewClient(), model, task, stream,
			strings.HasPrefix(mode, "responses_chained"))
	case "messages": // ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY from the environment
		return messages(ctx, anthropic.NewClient(), model, task, stream)
	}
	return "", fmt.Errorf("unknown mode %q (chat, responses, responses_chained, messages; each with _stream)", mode)
}

func main() {
	mode := "chat"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	output, err := run(mode)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", mode, err)
		os.Exit(1)
	}
	line, err := json.Marshal(map[string]any{"ran": ran, "output": output})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(line))
}
