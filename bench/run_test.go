package bench

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/clock"
)

// e2eWorkload is 50 requests with distinct lengths; those asking for 5
// output tokens get HTTP 503 and those asking for 6 a truncated stream.
func e2eWorkload() []Request {
	reqs := make([]Request, 50)
	for i := range reqs {
		reqs[i] = Request{Index: i, InputTokens: 20 + 7*i, OutputTokens: 2 + i%9}
	}
	return reqs
}

func e2eBehave(maxTokens int) string {
	switch maxTokens {
	case 5:
		return behave503
	case 6:
		return behaveTruncate
	}
	return behaveStream
}

func newBuilder(t *testing.T) *PromptBuilder {
	t.Helper()
	b, err := NewPromptBuilder(storiesTokenizer(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRunEndToEnd(t *testing.T) {
	srv := newFakeServer(t, 2*time.Millisecond, e2eBehave)
	reqs := e2eWorkload()
	rep, err := Run(context.Background(), Options{
		BaseURL: srv.URL, Model: "stories260K", APIKey: "sk-test", Requests: reqs, Prompts: newBuilder(t),
		MaxConcurrency: 8, Report: ReportOptions{Percentiles: []float64{50, 99}},
	})
	if err != nil {
		t.Fatal(err)
	}

	var completed, failed503, truncated, in, out int
	for _, r := range reqs {
		switch r.OutputTokens {
		case 5:
			failed503++
		case 6:
			truncated++
		default:
			completed++
			in += r.InputTokens + 1 // the server counts BOS
			out += r.OutputTokens
		}
	}
	if rep.Completed != completed || rep.Failed != failed503+truncated {
		t.Fatalf("completed %d failed %d, want %d and %d", rep.Completed, rep.Failed, completed, failed503+truncated)
	}
	wantReasons := map[string]int{"HTTP 503 ServiceUnavailableError": failed503, "truncated stream": truncated}
	if len(rep.FailedByReason) != len(wantReasons) {
		t.Fatalf("failed_by_reason %v, want %v", rep.FailedByReason, wantReasons)
	}
	for k, v := range wantReasons {
		if rep.FailedByReason[k] != v {
			t.Fatalf("failed_by_reason %v, want %v", rep.FailedByReason, wantReasons)
		}
	}
	if rep.TotalInputTokens != in || rep.TotalOutputTokens != out {
		t.Fatalf("tokens in %d out %d, want %d and %d", rep.TotalInputTokens, rep.TotalOutputTokens, in, out)
	}
	s := rep.Duration.Seconds()
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"request_throughput", rep.RequestThroughput, float64(completed) / s},
		{"output_throughput", rep.OutputThroughput, float64(out) / s},
		{"total_token_throughput", rep.TotalTokenThroughput, float64(in+out) / s},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if m := srv.maxInflight.Load(); m != 8 {
		t.Errorf("server saw at most %d requests in flight, want 8 (the cap, reached)", m)
	}
	if len(rep.Requests) != len(reqs) {
		t.Fatalf("%d per-request results, want %d", len(rep.Requests), len(reqs))
	}
	nITL := 0
	for i, r := range rep.Requests {
		if r.Index != i || r.RequestedInputTokens != reqs[i].InputTokens {
			t.Fatalf("result %d is request %d with %d input tokens", i, r.Index, r.RequestedInputTokens)
		}
		if !r.OK() {
			continue
		}
		if r.OutputTokens != reqs[i].OutputTokens || len(r.ITL) != r.OutputTokens-1 || r.TTFT <= 0 || r.Latency < r.TTFT {
			t.Fatalf("request %d: %+v", i, r)
		}
		nITL += len(r.ITL)
	}
	if rep.ITL.Mean <= 0 || rep.TTFT.Percentiles[1] < rep.TTFT.Median || rep.MaxConcurrentRequests > 8 {
		t.Errorf("implausible stats: ttft %+v itl %+v peak concurrency %d", rep.TTFT, rep.ITL, rep.MaxConcurrentRequests)
	}
	// Every prompt reached the server at exactly its requested length, with
	// the fields every OpenAI-compatible server knows.
	bodies, auth := srv.requests()
	for _, b := range bodies {
		so, _ := b["stream_options"].(map[string]any)
		if b["stream"] != true || so["include_usage"] != true || b["temperature"] != 0.0 || b["model"] != "stories260K" {
			t.Fatalf("request body %v", b)
		}
		if _, ok := b["ignore_eos"]; ok {
			t.Fatalf("ignore_eos sent without --ignore-eos: %v", b)
		}
		if n := len(storiesTokenizer(t).Encode(b["prompt"].(string), false)); n != 20+7*indexOfPrompt(b) {
			t.Fatalf("prompt of %d tokens, want %d", n, 20+7*indexOfPrompt(b))
		}
	}
	for _, a := range auth {
		if a != "Bearer sk-test" {
			t.Fatalf("Authorization %q", a)
		}
	}
}

// indexOfPrompt recovers an e2eWorkload request's index from its prompt
// length in words (one token each).
func indexOfPrompt(body map[string]any) int {
	return (len(strings.Fields(body["prompt"].(string))) - 20) / 7
}

func TestRunChatIgnoreEOS(t *testing.T) {
	srv := newFakeServer(t, 0, nil)
	reqs := []Request{{Index: 0, InputTokens: 30, OutputTokens: 4}, {Index: 1, InputTokens: 40, OutputTokens: 1}}
	rep, err := Run(context.Background(), Options{
		BaseURL: srv.URL + "/", Endpoint: EndpointChatCompletions, Model: "stories260K",
		Requests: reqs, Prompts: newBuilder(t), IgnoreEOS: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != 2 || rep.TotalOutputTokens != 5 || rep.Backend != "openai-chat" {
		t.Fatalf("report %+v", rep)
	}
	if rep.Requests[0].TTFT <= 0 || len(rep.Requests[0].ITL) != 3 || len(rep.Requests[1].ITL) != 0 {
		t.Fatalf("the role-only delta counted as a token: %+v", rep.Requests)
	}
	bodies, _ := srv.requests()
	for _, b := range bodies {
		if b["ignore_eos"] != true || b["prompt"] != nil || b["max_tokens"] != nil {
			t.Fatalf("chat body %v", b)
		}
		msgs := b["messages"].([]any)
		if len(msgs) != 1 || msgs[0].(map[string]any)["role"] != "user" {
			t.Fatalf("messages %v", msgs)
		}
	}
}

// fakeSleep advances a fake clock instead of waiting.
func fakeSleep(c *clock.Fake) func(context.Context, time.Duration) error {
	return func(ctx context.Context, d time.Duration) error {
		c.Advance(d)
		return ctx.Err()
	}
}

func TestRunArrivalSchedule(t *testing.T) {
	srv := newFakeServer(t, 0, nil)
	reqs := []Request{
		{Index: 0, Arrival: 0, InputTokens: 8, OutputTokens: 2},
		{Index: 1, Arrival: 100 * time.Millisecond, InputTokens: 8, OutputTokens: 2},
		{Index: 2, Arrival: 250 * time.Millisecond, InputTokens: 8, OutputTokens: 2},
		{Index: 3, Arrival: 3 * time.Second, InputTokens: 8, OutputTokens: 2},
	}
	rateOffsets, err := Arrivals(len(reqs), 4, 0.5, 9)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Options
		want []time.Duration
	}{
		{"replay at 2x", Options{Replay: true, TimeScale: 2}, []time.Duration{0, 50 * time.Millisecond, 125 * time.Millisecond, 1500 * time.Millisecond}},
		{"gamma", Options{RequestRate: 4, Burstiness: 0.5, Seed: 9}, rateOffsets},
		{"all at once", Options{RequestRate: math.Inf(1)}, []time.Duration{0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
			o := tc.o
			o.BaseURL, o.Model, o.Requests, o.Prompts = srv.URL, "stories260K", reqs, newBuilder(t)
			o.Clock, o.Sleep = fc, fakeSleep(fc)
			rep, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range rep.Requests {
				if r.Start != tc.want[i] || !r.OK() {
					t.Fatalf("request %d sent at %v (%s), want %v", i, r.Start, r.Error, tc.want[i])
				}
			}
			if rep.Duration != tc.want[len(tc.want)-1] || rep.Date != "20250101-000000" {
				t.Fatalf("duration %v date %s", rep.Duration, rep.Date)
			}
		})
	}
}

func TestRunTimeoutAndConnectionError(t *testing.T) {
	srv := newFakeServer(t, 0, func(int) string { return behaveHang })
	rep, err := Run(context.Background(), Options{
		BaseURL: srv.URL, Model: "stories260K", Requests: []Request{{InputTokens: 5, OutputTokens: 3}},
		Prompts: newBuilder(t), RequestTimeout: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 1 || rep.FailedByReason["timeout"] != 1 || !strings.Contains(rep.Requests[0].Error, "timeout after 50ms") {
		t.Fatalf("report %+v", rep.Requests)
	}

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	rep, err = Run(context.Background(), Options{
		BaseURL: closed.URL, Model: "m", Requests: []Request{{InputTokens: 5, OutputTokens: 3}}, Prompts: newBuilder(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FailedByReason["connection error"] != 1 {
		t.Fatalf("failures %v", rep.FailedByReason)
	}
}

func TestRunCancel(t *testing.T) {
	// Requests asking for one token finish at once; the rest hang until
	// their client goes away.
	srv := newFakeServer(t, 0, func(maxTokens int) string {
		if maxTokens == 1 {
			return behaveStream
		}
		return behaveHang
	})
	reqs := make([]Request, 40)
	for i := range reqs {
		reqs[i] = Request{Index: i, InputTokens: 10, OutputTokens: 1}
		if i >= 4 {
			reqs[i].OutputTokens = 2
		}
	}
	builder := newBuilder(t)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for srv.received.Load() < 8 || srv.inflight.Load() < 4 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	done := make(chan struct{})
	var rep *Report
	var err error
	go func() {
		defer close(done)
		rep, err = Run(ctx, Options{BaseURL: srv.URL, Model: "stories260K", Requests: reqs, Prompts: builder, MaxConcurrency: 4})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if rep == nil || rep.Completed != 4 || rep.Failed != 0 || len(rep.Requests) != 4 {
		t.Fatalf("partial report %+v", rep)
	}
	if got := srv.received.Load(); got != 8 {
		t.Fatalf("server received %d requests, want 8 (4 done, then the 4-request cap)", got)
	}
	// Every goroutine Run started has ended (the server's connection
	// goroutines end once the client's connections close).
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	b := newBuilder(t)
	reqs := []Request{{InputTokens: 1, OutputTokens: 1}}
	for _, o := range []Options{
		{Model: "m", Requests: reqs, Prompts: b},
		{BaseURL: "http://x", Requests: reqs, Prompts: b},
		{BaseURL: "http://x", Model: "m", Prompts: b},
		{BaseURL: "http://x", Model: "m", Requests: reqs},
		{BaseURL: "http://x", Model: "m", Requests: reqs, Prompts: b, Endpoint: "/v1/embeddings"},
		{BaseURL: "http://x", Model: "m", Requests: reqs, Prompts: b, MaxConcurrency: -1},
		{BaseURL: "http://x", Model: "m", Requests: reqs, Prompts: b, RequestRate: -1},
		{BaseURL: "http://x", Model: "m", Requests: reqs, Prompts: b, Replay: true, TimeScale: -2},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) succeeded", o)
		}
	}
}

func TestLookahead(t *testing.T) {
	for _, tc := range []struct {
		n, tokens, want int
	}{
		{10, 1000, 10},            // small workloads are built whole before the clock starts
		{1000, 64 << 10, 512},     // as many as fit in the token budget
		{100, 1 << 20, 64},        // but at least 64
		{10, lookaheadTokens, 10}, // a few huge prompts: all of them
	} {
		reqs := make([]Request, tc.n)
		for i := range reqs {
			reqs[i].InputTokens = tc.tokens
		}
		if got := lookahead(reqs); got != min(tc.want, tc.n) {
			t.Errorf("%d requests of %d tokens: %d ahead, want %d", tc.n, tc.tokens, got, tc.want)
		}
	}
}

// stubbornVocab counts words as tokens up to four, then two tokens a word:
// no text of five or more tokens is odd.
type stubbornVocab struct{}

func (stubbornVocab) Encode(s string, _ bool) []int {
	n := len(strings.Fields(s))
	if n >= 5 {
		n *= 2
	}
	return make([]int, n)
}
func (stubbornVocab) Token(id int) string { return string(rune('a' + id)) }
func (stubbornVocab) VocabSize() int      { return 26 }

func TestRunPromptError(t *testing.T) {
	srv := newFakeServer(t, 0, nil)
	b, err := NewPromptBuilder(stubbornVocab{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []Request{{Index: 0, InputTokens: 3, OutputTokens: 1}, {Index: 1, InputTokens: 7, OutputTokens: 1}}
	rep, err := Run(context.Background(), Options{BaseURL: srv.URL, Model: "m", Requests: reqs, Prompts: b})
	if err == nil || rep != nil || !strings.Contains(err.Error(), "request 1: no text of 7 tokens") {
		t.Fatalf("report %v, err %v", rep, err)
	}
}
