// The model endpoint benchmark's load client and scripted upstream (bench/model_endpoint.py
// builds and runs them): compiled and lean, so that on a small machine they take little of the
// CPU the sidecar is measured on. Standard library only.
//
//	loadgen upstream -port P -chunks N -chunk-ms MS
//	loadgen client -url URL -streams N -concurrency C [-first K] [-spread S] [-budget B]
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	key      = "sk-bench-0123456789abcdef"
	model    = "bench-stream"
	maxEvent = 1 << 20 // bytes an SSE event may take before the stream is refused
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: loadgen upstream|client [flags]")
	}
	switch os.Args[1] {
	case "upstream":
		upstream(os.Args[2:])
	case "client":
		client(os.Args[2:])
	default:
		fail("usage: loadgen upstream|client [flags]")
	}
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, "loadgen:", message)
	os.Exit(2)
}

// -- the upstream: a model API streaming chat completions -----------------------------------

// upstream serves until SIGTERM: every POST answered with a chunked text/event-stream of
// `chunks` events (a role chunk, words, a finish chunk, [DONE]) `chunk-ms` apart, each event
// one HTTP chunk written as it is made; anything else (the readiness probe) with {}.
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
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxEvent))
		if r.Method != http.MethodPost {
			w.Header()["Content-Type"] = []string{"application/json"}
			_, _ = w.Write([]byte("{}"))
			return
		}
		id := fmt.Sprintf("chatcmpl-bench%x", served.Add(1))
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
	listener, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(*port))
	if err != nil {
		fail(err.Error())
	}
	server := &http.Server{Handler: http.HandlerFunc(handler), ReadHeaderTimeout: time.Minute}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-stop; _ = server.Close() }()
	if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		fail(err.Error())
	}
}

// -- the client: one phase of streams --------------------------------------------------------

// client runs `streams` streamed chat completions, `concurrency` at a time, each worker
// starting its next as its last ends, the workers' first starts spread over `spread` seconds
// (0: together, so they go in waves); each a new conversation (Task <first + i>). It prints
// one JSON line per stream, its seconds: {"ttfb": to the first SSE event, "gaps": between
// consecutive events, "stream": first event to last}, then {"wall": the phase}.
func client(args []string) {
	flags := flag.NewFlagSet("client", flag.ExitOnError)
	base := flags.String("url", "", "the API's base URL (…/v1)")
	streams := flags.Int("streams", 1, "streams in all")
	concurrency := flags.Int("concurrency", 1, "streams at a time")
	first := flags.Int("first", 0, "the first stream's task number")
	spread := flags.Float64("spread", 0, "seconds over which the workers' first starts spread")
	budget := flags.Int("budget", 0, "x-watchdog-budget-tool-calls on every request (0: none)")
	_ = flags.Parse(args)
	if *base == "" || *streams < 1 || *concurrency < 1 || *concurrency > 10000 || *spread < 0 {
		fail("-url, -streams >= 1, 1 <= -concurrency <= 10000, -spread >= 0")
	}
	pool := &http.Client{Transport: &http.Transport{
		MaxIdleConns: *concurrency, MaxIdleConnsPerHost: *concurrency,
		DisableCompression: true, ResponseHeaderTimeout: time.Minute,
	}}
	var (
		next     atomic.Int64
		out      sync.Mutex
		failures atomic.Int64
		workers  sync.WaitGroup
	)
	stdout := os.Stdout
	started := time.Now()
	for index := 0; index < *concurrency; index++ {
		workers.Add(1)
		go func(index int) {
			defer workers.Done()
			time.Sleep(time.Duration(*spread * float64(index) / float64(*concurrency) * 1e9))
			buffer := make([]byte, 64<<10) // one a worker: garbage made per stream is GC's CPU
			for {
				number := next.Add(1) - 1
				if number >= int64(*streams) || failures.Load() > 0 {
					return
				}
				line, err := stream(pool, *base, *first+int(number), *budget, buffer)
				if err != nil {
					if failures.Add(1) == 1 {
						fmt.Fprintln(os.Stderr, "loadgen:", *base+":", err)
					}
					return
				}
				out.Lock()
				_, _ = stdout.Write(line)
				out.Unlock()
			}
		}(index)
	}
	workers.Wait()
	if failures.Load() > 0 {
		os.Exit(1)
	}
	fmt.Fprintf(stdout, "{\"wall\":%.9f}\n", time.Since(started).Seconds())
}

// stream sends one request and reads its SSE events as they arrive: its timings as a JSON line.
func stream(client *http.Client, base string, number, budget int, buf []byte) ([]byte, error) {
	body := fmt.Sprintf(`{"model": "%s", "stream": true, "messages": [{"role": "system", `+
		`"content": "You are a benchmark."}, {"role": "user", "content": "Task %d: say the `+
		`words."}]}`, model, number)
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
	line := fmt.Appendf(nil, `{"ttfb":%.9f,"stream":%.9f,"gaps":[`,
		arrivals[0].Sub(start).Seconds(), arrivals[len(arrivals)-1].Sub(arrivals[0]).Seconds())
	for i := 1; i < len(arrivals); i++ {
		if i > 1 {
			line = append(line, ',')
		}
		line = strconv.AppendFloat(line, arrivals[i].Sub(arrivals[i-1]).Seconds(), 'f', 9, 64)
	}
	return append(line, "]}\n"...), nil
}
