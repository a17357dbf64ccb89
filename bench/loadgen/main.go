// The model endpoint benchmark's load client and scripted upstream (bench/model_endpoint.py
// builds and runs them): compiled and lean, so that on a small machine they take little of the
// CPU the sidecar is measured on. Standard library only.
//
//	loadgen upstream -port P -chunks N -chunk-ms MS
//	loadgen client -url URL [-connections N] [-budget B] [-turns T] < phases (STREAMS CONCURRENCY FIRST SPREAD)
//	loadgen proxy -port P -upstream URL [-connections N]
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	key            = "sk-bench-0123456789abcdef"
	model          = "bench-stream"
	maxEvent       = 1 << 20 // bytes an SSE event (or a request body) may take, at most
	maxConcurrency = 10000
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: loadgen upstream|client|proxy [flags]")
	}
	switch os.Args[1] {
	case "upstream":
		upstream(os.Args[2:])
	case "client":
		client(os.Args[2:])
	case "proxy":
		proxy(os.Args[2:])
	default:
		fail("usage: loadgen upstream|client|proxy [flags]")
	}
}

// serve serves handler on 127.0.0.1:port until SIGTERM.
func serve(port int, handler http.Handler) {
	listener, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		fail(err.Error())
	}
	server := &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-stop; _ = server.Close() }()
	if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		fail(err.Error())
	}
}

// -- the floor: a bare proxy ---------------------------------------------------------

// proxy reads each request and forwards it to -upstream (its path appended to the upstream's),
// and streams the answer back as it comes (each read written and flushed at once): what any HTTP proxy in
// the agent's path adds on this machine, the floor the sidecar's figures are read against.
func proxy(args []string) {
	flags := flag.NewFlagSet("proxy", flag.ExitOnError)
	port := flags.Int("port", 0, "port on 127.0.0.1")
	target := flags.String("upstream", "", "the upstream's base URL")
	connections := flags.Int("connections", 100, "idle connections kept to the upstream")
	_ = flags.Parse(args)
	base, err := url.Parse(*target)
	if err != nil || base.Scheme != "http" || *connections < 1 {
		fail("-upstream http://HOST:PORT[/PATH], -connections >= 1")
	}
	pool := &http.Client{Transport: &http.Transport{MaxIdleConns: *connections,
		MaxIdleConnsPerHost: *connections, DisableCompression: true,
		IdleConnTimeout: time.Minute}}
	handler := func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxEvent))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := http.NewRequest(r.Method, base.String()+r.URL.RequestURI(),
			bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		response, err := pool.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer response.Body.Close()
		for name, values := range response.Header {
			w.Header()[name] = values
		}
		w.WriteHeader(response.StatusCode)
		flusher := w.(http.Flusher)
		buf := make([]byte, 32<<10)
		for {
			n, err := response.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				flusher.Flush()
			}
			if err != nil {
				return
			}
		}
	}
	serve(*port, http.HandlerFunc(handler))
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, "loadgen:", message)
	os.Exit(2)
}

// -- the upstream: a model API streaming chat completions -----------------------------------

// upstream serves until SIGTERM: every POST answered with a chunked text/event-stream of
// `chunks` events (a role chunk, words, a finish chunk, [DONE]) `chunk-ms` apart, each event
// one HTTP chunk written as it is made; a request that offers tools is handed a tool call of
// its first tool in its finish chunk (an id of its own, as a model's); anything else (the
// readiness probe) with {}.
func upstream(args []string) {
	flags := flag.NewFlagSet("upstream", flag.ExitOnError)
	port := flags.Int("port", 0, "port on 127.0.0.1")
	chunks := flags.Int("chunks", 20, "SSE events per stream (>= 3)")
	chunkMs := flags.Float64("chunk-ms", 5, "pause between events, ms")
	_ = flags.Parse(args)
	if *chunks < 3 || *chunkMs < 0 {
		fail("-chunks >= 3, -chunk-ms >= 0")
	}
	pause := time.Duration(*chunkMs * float64(time.Millisecond))
	var served atomic.Int64
	handler := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxEvent))
		if r.Method != http.MethodPost {
			w.Header()["Content-Type"] = []string{"application/json"}
			_, _ = w.Write([]byte("{}"))
			return
		}
		number := served.Add(1)
		id := fmt.Sprintf("chatcmpl-bench%x", number)
		offers := bytes.Contains(body, []byte(`"tools"`))
		header := w.Header()
		header["Content-Type"] = []string{"text/event-stream; charset=utf-8"}
		header["Cache-Control"] = []string{"no-cache"}
		header["x-request-id"] = []string{id}
		w.WriteHeader(http.StatusOK)
		flusher := w.(http.Flusher)
		for index := 0; index < *chunks-1; index++ {
			if index > 0 {
				time.Sleep(pause)
			}
			delta, finish := `{"content":"word`+strconv.Itoa(index-1)+` "}`, "null"
			if index == 0 {
				delta = `{"role":"assistant","content":""}`
			} else if index == *chunks-2 && offers {
				delta, finish = fmt.Sprintf(`{"tool_calls":[{"index":0,"id":"call_bench%x",`+
					`"type":"function","function":{"name":"search","arguments":`+
					`"{\"q\":\"%d\"}"}}]}`, number, number), `"tool_calls"`
			} else if index == *chunks-2 {
				delta, finish = "{}", `"stop"`
			}
			_, err := fmt.Fprintf(w, `data: {"id":"%s","object":"chat.completion.chunk",`+
				`"created":%d,"model":"%s","system_fingerprint":"fp_bench","choices":[{`+
				`"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}`+"\n\n",
				id, time.Now().Unix(), model, delta, finish)
			if err != nil {
				return // the client went away
			}
			flusher.Flush()
		}
		time.Sleep(pause)
		// not flushed: the server sends it with the chunked body's end, in one write
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	}
	serve(*port, http.HandlerFunc(handler))
}

// -- the client: phases of streams over kept connections ------------------------------------

// client runs phases of streamed chat completions, one a line of stdin: "STREAMS CONCURRENCY
// FIRST SPREAD": STREAMS streams, CONCURRENCY at a time, each worker starting its next as its
// last ends, the workers' first starts spread over SPREAD seconds (0: together, so they go in
// waves); each a new conversation (Task FIRST, FIRST+1, ...). For each stream it prints a JSON
// line of seconds: {"ttfb": to the first SSE event, "gaps": between consecutive events,
// "stream": first event to last, "final": a run's final request (-final), "turn": its place in
// its conversation}; then {"wall": the phase}. Connections are kept from one phase to the next
// (up to -connections idle), as an agent's HTTP client keeps them. It ends at the end of
// stdin, or with status 1 at a stream that fails.
func client(args []string) {
	flags := flag.NewFlagSet("client", flag.ExitOnError)
	base := flags.String("url", "", "the API's base URL (…/v1)")
	connections := flags.Int("connections", 50, "idle connections kept (the most at a time)")
	budget := flags.Int("budget", 0, "x-watchdog-budget-tool-calls on every request (0: none)")
	turns := flags.Int("turns", 1, "requests a conversation (each after the last's answer, "+
		"with a tool call and its result more)")
	final := flags.Bool("final", false, "a conversation's last request is its run's final one: "+
		"it offers the tool too (the sidecar withdraws it), and no call is read from its answer")
	limit := flags.Duration("stream-timeout", time.Minute, "the longest a stream may take")
	_ = flags.Parse(args)
	if *base == "" || *connections < 1 || *connections > maxConcurrency || *limit <= 0 ||
		*turns < 1 || *turns > 100 {
		fail(fmt.Sprintf("-url, 1 <= -connections <= %d, -stream-timeout > 0, "+
			"1 <= -turns <= 100", maxConcurrency))
	}
	pool := &http.Client{Timeout: *limit, Transport: &http.Transport{
		MaxIdleConns: *connections, MaxIdleConnsPerHost: *connections,
		DisableCompression: true,
	}}
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		var streams, concurrency, first int
		var spread float64
		_, err := fmt.Sscan(lines.Text(), &streams, &concurrency, &first, &spread)
		if err != nil || streams < 1 || concurrency < 1 || concurrency > maxConcurrency ||
			spread < 0 {
			fail(fmt.Sprintf("a phase is STREAMS CONCURRENCY FIRST SPREAD, STREAMS >= 1, "+
				"1 <= CONCURRENCY <= %d, SPREAD >= 0: %q", maxConcurrency, lines.Text()))
		}
		wall, err := phase(pool, *base, streams, concurrency, first, spread, *budget, *turns,
			*final)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", *base+":", err)
			os.Exit(1)
		}
		fmt.Printf("{\"wall\":%.9f}\n", wall.Seconds())
	}
}

// phase runs one phase, printing each stream's line as it ends: its wall time, or the first
// stream's error (the others then start no more). A worker takes a conversation and sends its
// `turns` requests one after the other (with `final`, the last its run's final one, which
// offers the tool too); STREAMS counts requests.
func phase(pool *http.Client, base string, streams, concurrency, first int, spread float64,
	budget, turns int, final bool) (time.Duration, error) {
	var (
		next    atomic.Int64
		out     sync.Mutex
		failed  error
		workers sync.WaitGroup
	)
	started := time.Now()
	for index := 0; index < concurrency; index++ {
		workers.Add(1)
		go func(index int) {
			defer workers.Done()
			time.Sleep(time.Duration(spread * float64(index) / float64(concurrency) * 1e9))
			buffer := make([]byte, 64<<10) // one a worker: garbage made per stream is GC's CPU
			for number := next.Add(1) - 1; number*int64(turns) < int64(streams); number = next.Add(1) - 1 {
				var history bytes.Buffer // the turns before: each the model's call and its result
				for turn := 1; turn <= turns && int(number)*turns+turn <= streams; turn++ {
					line, err := stream(pool, base, first+int(number), turn,
						turn < turns || final, turn < turns, budget, buffer, &history)
					out.Lock()
					if err != nil && failed == nil {
						failed = err
					} else if err == nil && failed == nil {
						_, _ = os.Stdout.Write(line)
					}
					stop := failed != nil
					out.Unlock()
					if stop {
						return
					}
				}
			}
		}(index)
	}
	workers.Wait()
	return time.Since(started), failed
}

// stream sends one request and reads its SSE events as they arrive: its timings as a JSON line.
// Turn 1 of a conversation is a system and a user message; each later turn carries, for each
// turn before, the model's tool call and the tool's result, as a real agent sends them: the
// call the model handed over (its id, name and arguments, read from the stream) and a result
// of its own (`history` holds them; bench/model_endpoint.py's `one_stream` does the same). A
// turn with `tools` (all but a conversation's last, unless that is its run's final request)
// offers the model a tool, which the upstream calls; with `expect` (not the last) the call is
// read from the answer.
func stream(client *http.Client, base string, number, turn int, tools, expect bool,
	budget int, buf []byte, history *bytes.Buffer) ([]byte, error) {
	offered := ""
	if tools {
		offered = `, "tools": [{"type": "function", "function": {"name": "search", ` +
			`"parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]`
	}
	body := fmt.Sprintf(`{"model": "%s", "stream": true, "messages": [{"role": "system", `+
		`"content": "You are a benchmark."}, {"role": "user", "content": "Task %d: say the `+
		`words."}%s]%s}`, model, number, history.String(), offered)
	request, err := http.NewRequest(http.MethodPost, base+"/chat/completions",
		bytes.NewReader([]byte(body)))
	if err != nil {
		return nil, err
	}
	request.Header.Set("Authorization", "Bearer "+key)
	request.Header.Set("Content-Type", "application/json")
	if budget > 0 {
		request.Header.Set("x-watchdog-budget-tool-calls", strconv.Itoa(budget))
	}
	start := time.Now()
	response, err := client.Do(request)
	if err != nil {
		return nil, err
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		text, _ := io.ReadAll(io.LimitReader(response.Body, 2000))
		return nil, fmt.Errorf("HTTP %d: %s", response.StatusCode, text)
	}
	arrivals := make([]time.Time, 0, 64)
	var pending []byte
	var handed []byte // the event that handed a tool call over
	for {
		n, err := response.Body.Read(buf)
		if n > 0 {
			now := time.Now()
			pending = append(pending, buf[:n]...)
			for {
				end := bytes.Index(pending, []byte("\n\n"))
				if end < 0 {
					break
				}
				if expect && handed == nil && bytes.Contains(pending[:end], []byte(`"tool_calls"`)) {
					handed = append([]byte(nil), pending[:end]...)
				}
				pending = pending[end+2:]
				arrivals = append(arrivals, now)
			}
			if len(pending) > maxEvent {
				return nil, errors.New("an SSE event of more than 1 MiB")
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if len(arrivals) < 2 {
		return nil, fmt.Errorf("a stream of %d events", len(arrivals))
	}
	if expect {
		if err := answer(handed, history, turn); err != nil {
			return nil, err
		}
	}
	line := fmt.Appendf(nil, `{"ttfb":%.9f,"stream":%.9f,"final":%t,"turn":%d,"gaps":[`,
		arrivals[0].Sub(start).Seconds(), arrivals[len(arrivals)-1].Sub(arrivals[0]).Seconds(),
		tools && !expect, turn)
	for i := 1; i < len(arrivals); i++ {
		if i > 1 {
			line = append(line, ',')
		}
		line = strconv.AppendFloat(line, arrivals[i].Sub(arrivals[i-1]).Seconds(), 'f', 9, 64)
	}
	return append(line, "]}\n"...), nil
}

// answer adds to `history` the model's answer that handed the tool call in `event` (an SSE
// event) over, and the tool's result, as an agent sends them back.
func answer(event []byte, history *bytes.Buffer, turn int) error {
	var chunk struct {
		Choices []struct {
			Delta struct {
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"delta"`
		} `json:"choices"`
	}
	data := bytes.TrimPrefix(event, []byte("data: "))
	if err := json.Unmarshal(data, &chunk); err != nil || len(chunk.Choices) == 0 ||
		len(chunk.Choices[0].Delta.ToolCalls) == 0 {
		return fmt.Errorf("no tool call handed over: %.200s", event)
	}
	call := chunk.Choices[0].Delta.ToolCalls[0]
	quoted := func(text string) string { out, _ := json.Marshal(text); return string(out) }
	fmt.Fprintf(history, `, {"role": "assistant", "content": null, "tool_calls": [{"id": %s, `+
		`"type": "function", "function": {"name": %s, "arguments": %s}}]}, {"role": "tool", `+
		`"tool_call_id": %s, "content": "result %d"}`, quoted(call.ID),
		quoted(call.Function.Name), quoted(call.Function.Arguments), quoted(call.ID), turn)
	return nil
}
