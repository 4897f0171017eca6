package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func msd(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }

func gaps(n int, each float64) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = msd(each)
	}
	return out
}

// handResults are four completed requests and one failure whose metrics
// are worked out by hand below.
func handResults() []RequestResult {
	return []RequestResult{
		{Index: 0, InputTokens: 100, OutputTokens: 5, Start: 0, TTFT: msd(100), ITL: gaps(4, 100), Latency: msd(500)},
		{Index: 1, InputTokens: 200, OutputTokens: 11, Start: 0, TTFT: msd(200), ITL: gaps(10, 100), Latency: msd(1200)},
		{Index: 2, InputTokens: 300, OutputTokens: 1, Start: msd(1000), TTFT: msd(50), Latency: msd(50)},
		{Index: 3, InputTokens: 400, OutputTokens: 5, Start: msd(2000), TTFT: msd(400), ITL: gaps(4, 500), Latency: msd(2400)},
		{Index: 4, InputTokens: 500, Failure: "HTTP 503", Error: "HTTP 503 Service Unavailable: busy"},
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

func TestComputeReportByHand(t *testing.T) {
	rep := ComputeReport(handResults(), ReportOptions{
		Duration: 10 * time.Second, Percentiles: []float64{50, 90, 99},
		SLO: SLO{TTFT: msd(200), TPOT: msd(100)},
	})
	if rep.Completed != 4 || rep.Failed != 1 || rep.FailedByReason["HTTP 503"] != 1 {
		t.Fatalf("completed %d failed %d %v", rep.Completed, rep.Failed, rep.FailedByReason)
	}
	// TTFT 100, 200, 50, 400 ms: sorted 50, 100, 200, 400; mean 187.5,
	// squared deviations 7656.25 + 156.25 + 18906.25 + 45156.25 = 71875.
	// TPOT (E2EL−TTFT)/(out−1): 400/4 = 100, 1000/10 = 100, 2000/4 = 500
	// (the one-token request has none). ITL: fourteen 100s and four 500s.
	// Goodput (TTFT ≤ 200, TPOT ≤ 100): requests 0, 1 and 2 (TPOT 0).
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"request_throughput", rep.RequestThroughput, 0.4},
		{"request_goodput", rep.RequestGoodput, 0.3},
		{"output_throughput", rep.OutputThroughput, 2.2},
		{"total_token_throughput", rep.TotalTokenThroughput, (1000 + 22) / 10.0},
		{"mean_ttft", rep.TTFT.Mean, 187.5},
		{"median_ttft", rep.TTFT.Median, 150},
		{"std_ttft", rep.TTFT.Std, math.Sqrt(71875.0 / 4)},
		{"p50_ttft", rep.TTFT.Percentiles[0], 150},
		{"p90_ttft", rep.TTFT.Percentiles[1], 340}, // rank 2.7: 200 + 0.7·200
		{"p99_ttft", rep.TTFT.Percentiles[2], 394}, // rank 2.97: 200 + 0.97·200
		{"mean_tpot", rep.TPOT.Mean, 700.0 / 3},
		{"median_tpot", rep.TPOT.Median, 100},
		{"p99_tpot", rep.TPOT.Percentiles[2], 492}, // rank 1.98: 100 + 0.98·400
		{"mean_itl", rep.ITL.Mean, 3400.0 / 18},
		{"median_itl", rep.ITL.Median, 100},
		{"p99_itl", rep.ITL.Percentiles[2], 500},
		{"mean_e2el", rep.E2EL.Mean, 4150.0 / 4},
		{"median_e2el", rep.E2EL.Median, 850},
		{"p90_e2el", rep.E2EL.Percentiles[1], 1200 + 0.7*1200}, // sorted 50, 500, 1200, 2400
		// Tokens land at 100…500 ms (5) and 200…900 ms (8) in second 0.
		{"max_output_tokens_per_s", rep.MaxOutputTokensPerS, 13},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if rep.TotalInputTokens != 1000 || rep.TotalOutputTokens != 22 || rep.MaxConcurrentRequests != 2 {
		t.Errorf("tokens %d/%d peak concurrency %d", rep.TotalInputTokens, rep.TotalOutputTokens, rep.MaxConcurrentRequests)
	}
	// E2EL objective only: 500, 1200, 50 pass 1200 ms; 2400 fails.
	rep = ComputeReport(handResults(), ReportOptions{Duration: 10 * time.Second, SLO: SLO{E2EL: msd(1200)}})
	if !near(rep.RequestGoodput, 0.3) {
		t.Errorf("e2el goodput %v", rep.RequestGoodput)
	}
}

func TestComputeReportEmpty(t *testing.T) {
	rep := ComputeReport([]RequestResult{{Failure: "timeout"}}, ReportOptions{Duration: time.Second})
	if rep.Completed != 0 || rep.TTFT.Mean != 0 || rep.TTFT.Percentiles[0] != 0 || rep.MaxOutputTokensPerS != 0 {
		t.Fatalf("%+v", rep)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
}

func TestPercentileMatchesNumpy(t *testing.T) {
	// numpy.percentile([1, 2, 3, 4, 10], p) for p = 0, 25, 50, 90, 99, 100.
	xs := []float64{1, 2, 3, 4, 10}
	for p, want := range map[float64]float64{0: 1, 25: 2, 50: 3, 90: 7.6, 99: 9.76, 100: 10} {
		if got := Percentile(xs, p); !near(got, want) {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if Percentile([]float64{7}, 99) != 7 || Percentile(nil, 50) != 0 {
		t.Error("one or no values")
	}
}

func TestReportJSONKeys(t *testing.T) {
	rep := ComputeReport(handResults(), ReportOptions{Duration: 10 * time.Second, Percentiles: []float64{50, 99.9}, Metrics: []string{"ttft", "e2el"}})
	rep.RunInfo = RunInfo{Backend: "openai", ModelID: "m", NumPrompts: 5, RequestRate: math.Inf(1), Burstiness: 1, Dataset: "synthetic"}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{
		"date", "backend", "model_id", "num_prompts", "duration", "completed", "failed", "total_input_tokens",
		"total_output_tokens", "request_throughput", "output_throughput", "total_token_throughput",
		"mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p99.9_ttft_ms", "mean_e2el_ms", "p99.9_e2el_ms",
		"input_lens", "output_lens", "ttfts", "itls", "errors", "failed_by_reason", "dataset", "endpoint",
	} {
		if _, ok := m[k]; !ok {
			t.Errorf("no key %q in %s", k, b)
		}
	}
	for _, k := range []string{"mean_tpot_ms", "p99_ttft_ms", "mean_itl_ms"} {
		if _, ok := m[k]; ok {
			t.Errorf("unselected key %q present", k)
		}
	}
	if m["request_goodput"] != nil || m["max_concurrency"] != nil || m["slo"] != nil || m["request_rate"] != "inf" {
		t.Errorf("request_goodput %v max_concurrency %v slo %v request_rate %v", m["request_goodput"], m["max_concurrency"], m["slo"], m["request_rate"])
	}
	if m["completed"] != 4.0 || m["mean_ttft_ms"] != 187.5 {
		t.Errorf("completed %v mean_ttft_ms %v", m["completed"], m["mean_ttft_ms"])
	}
	itls := m["itls"].([]any)
	if len(itls) != 5 || len(itls[1].([]any)) != 10 || itls[1].([]any)[0] != 0.1 || len(itls[4].([]any)) != 0 {
		t.Errorf("itls %v", itls)
	}
	errs := m["errors"].([]any)
	if errs[0] != "" || errs[4] != "HTTP 503 Service Unavailable: busy" || m["output_lens"].([]any)[4] != 0.0 || m["ttfts"].([]any)[0] != 0.1 {
		t.Errorf("errors %v output_lens %v", errs, m["output_lens"])
	}
	// The keys keep vLLM's order.
	if i, j := bytes.Index(b, []byte(`"date"`)), bytes.Index(b, []byte(`"completed"`)); i != 1 || j < i {
		t.Errorf("key order: %s", b[:80])
	}

	rep.SLO, rep.MaxConcurrency, rep.RequestRate = SLO{TTFT: msd(200)}, 8, 2.5
	b, _ = json.Marshal(rep)
	m = nil
	json.Unmarshal(b, &m)
	if m["request_goodput"] == nil || m["max_concurrency"] != 8.0 || m["request_rate"] != 2.5 || m["slo"].(map[string]any)["ttft_ms"] != 200.0 {
		t.Errorf("request_goodput %v max_concurrency %v request_rate %v slo %v", m["request_goodput"], m["max_concurrency"], m["request_rate"], m["slo"])
	}
}

func TestWriteTable(t *testing.T) {
	rep := ComputeReport(handResults(), ReportOptions{Duration: 10 * time.Second, SLO: SLO{TTFT: msd(200)}})
	rep.MaxConcurrency = 8
	rep.RequestRate = 4
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"============ Serving Benchmark Result ============\n",
		"Successful requests:                     4\n",
		"Failed requests:                         1\n",
		"Maximum request concurrency:             8\n",
		"Request rate configured (RPS):           4.00\n",
		"Benchmark duration (s):                  10.00\n",
		"Request goodput (req/s):                 0.30\n",
		"Total token throughput (tok/s):          102.20\n",
		"---------------Time to First Token----------------\n",
		"Mean TTFT (ms):                          187.50\n",
		"P99 TTFT (ms):                           394.00\n",
		"-----Time per Output Token (excl. 1st token)------\n",
		"----------------End-to-end Latency----------------\n",
		"HTTP 503:                                1\n",
		"==================================================\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestParseFlagsHelpers(t *testing.T) {
	s, err := ParseSLO([]string{"ttft:500", "tpot:50,e2el:2000.5"})
	if err != nil || s != (SLO{TTFT: msd(500), TPOT: msd(50), E2EL: msd(2000.5)}) {
		t.Fatalf("ParseSLO = %+v, %v", s, err)
	}
	for _, bad := range []string{"ttft", "ttft:x", "ttft:-1", "ttft:0", "queue:5"} {
		if _, err := ParseSLO([]string{bad}); err == nil {
			t.Errorf("ParseSLO(%q) succeeded", bad)
		}
	}
	if m, err := ParseMetrics("ttft,e2el,ttft"); err != nil || len(m) != 2 {
		t.Errorf("ParseMetrics = %v, %v", m, err)
	}
	if _, err := ParseMetrics("ttft,queue"); err == nil {
		t.Error("ParseMetrics accepted queue")
	}
	if p, err := ParsePercentiles("50, 90,99.9"); err != nil || len(p) != 3 || p[2] != 99.9 {
		t.Errorf("ParsePercentiles = %v, %v", p, err)
	}
	if _, err := ParsePercentiles("101"); err == nil {
		t.Error("ParsePercentiles accepted 101")
	}
}
