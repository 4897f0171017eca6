package server

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/sample"
)

// BenchmarkStreamedTokenOverhead measures what HTTP and SSE add per
// streamed token: one 400-token streaming completion over loopback HTTP
// against the same request through the engine directly.
func BenchmarkStreamedTokenOverhead(b *testing.B) {
	ts := newTestServer(b, serverOpts{})
	prompt := ts.m.Tokenizer.Encode("Once upon a time", true)
	const n = 400
	body := `{"model":"stories260K","prompt":"Once upon a time","max_tokens":400,"ignore_eos":true,"stream":true}`
	var httpTime, engineTime time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		chunks := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: {") {
				chunks++
			}
		}
		resp.Body.Close()
		httpTime += time.Since(start)
		if chunks < n/2 {
			b.Fatalf("%d chunks", chunks)
		}
		start = time.Now()
		if _, err := ts.eng.Generate(context.Background(), engine.Request{Prompt: prompt, MaxTokens: n, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}}, nil); err != nil {
			b.Fatal(err)
		}
		engineTime += time.Since(start)
	}
	b.ReportMetric(float64((httpTime-engineTime).Microseconds())/float64(b.N*n), "µs-overhead/token")
	b.ReportMetric(float64(engineTime.Microseconds())/float64(b.N*n), "µs-engine/token")
}
