package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// RequestResult is what one request did, as a load generator measures it
// on the client or a simulator computes it. Times are from the start of the
// run; a failed request has Failure set and no tokens or latencies.
type RequestResult struct {
	Index                int             // the request's position in the workload
	RequestedInputTokens int             // prompt tokens the workload asked for
	InputTokens          int             // prompt tokens the server reported in usage, else RequestedInputTokens
	OutputTokens         int             // completion tokens: the server's usage count, else chunks with text
	Start                time.Duration   // when the request was sent
	Queue                time.Duration   // how long it waited for a --max-concurrency slot after arriving
	TTFT                 time.Duration   // send to the first chunk with text
	ITL                  []time.Duration // gaps between successive chunks with text
	Latency              time.Duration   // E2EL: send to the last chunk with text
	Failure              string          // "" on success; else its class, the key of failed_by_reason ("HTTP 503", "timeout", ...)
	Error                string          // the failure in full
}

// OK reports whether the request completed.
func (r *RequestResult) OK() bool { return r.Failure == "" }

// tpot is vLLM's time per output token after the first, in seconds: (E2EL −
// TTFT)/(output tokens − 1), and 0 for one output token.
func (r *RequestResult) tpot() float64 {
	if r.OutputTokens <= 1 {
		return 0
	}
	return (r.Latency - r.TTFT).Seconds() / float64(r.OutputTokens-1)
}

// SLO holds per-request service-level objectives for goodput; a zero field
// sets no objective.
type SLO struct {
	TTFT time.Duration // time to first token
	TPOT time.Duration // time per output token after the first
	E2EL time.Duration // end-to-end latency
}

// IsZero reports whether no objective is set.
func (s SLO) IsZero() bool { return s == SLO{} }

// ParseSLO reads vllm bench serve's --goodput pairs "ttft:MS", "tpot:MS",
// "e2el:MS" (milliseconds, positive), each item possibly holding several
// separated by commas or spaces.
func ParseSLO(pairs []string) (SLO, error) {
	var s SLO
	for _, item := range pairs {
		for _, kv := range strings.FieldsFunc(item, func(r rune) bool { return r == ',' || r == ' ' }) {
			k, v, ok := strings.Cut(kv, ":")
			ms, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil || !(ms > 0) || math.IsInf(ms, 1) {
				return s, fmt.Errorf("goodput %q: want KEY:MS with KEY ttft, tpot or e2el and MS a positive number of milliseconds", kv)
			}
			d := time.Duration(ms * float64(time.Millisecond))
			switch k {
			case "ttft":
				s.TTFT = d
			case "tpot":
				s.TPOT = d
			case "e2el":
				s.E2EL = d
			default:
				return s, fmt.Errorf("goodput %q: unknown metric %q (want ttft, tpot or e2el)", kv, k)
			}
		}
	}
	return s, nil
}

// meets reports whether a completed request meets every objective set.
func (s SLO) meets(r *RequestResult) bool {
	return (s.TTFT == 0 || r.TTFT <= s.TTFT) &&
		(s.TPOT == 0 || r.tpot() <= s.TPOT.Seconds()) &&
		(s.E2EL == 0 || r.Latency <= s.E2EL)
}

// Metrics that can be reported with percentiles, in vLLM's names.
var allMetrics = []string{"ttft", "tpot", "itl", "e2el"}

// ParseMetrics reads a --percentile-metrics list such as "ttft,tpot,itl".
func ParseMetrics(s string) ([]string, error) {
	var out []string
	for m := range strings.SplitSeq(s, ",") {
		m = strings.TrimSpace(m)
		if !slices.Contains(allMetrics, m) {
			return nil, fmt.Errorf("percentile metric %q: want a comma-separated list of %s", m, strings.Join(allMetrics, ", "))
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out, nil
}

// ParsePercentiles reads a --metric-percentiles list such as "50,90,99".
func ParsePercentiles(s string) ([]float64, error) {
	var out []float64
	for p := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v < 0 || v > 100 {
			return nil, fmt.Errorf("percentile %q: want numbers from 0 to 100 separated by commas", p)
		}
		out = append(out, v)
	}
	return out, nil
}

// ReportOptions says how to summarize a run.
type ReportOptions struct {
	Duration    time.Duration // the run's wall time; throughputs divide by it
	Percentiles []float64     // percentiles reported per metric; default 99
	Metrics     []string      // metrics whose statistics are reported; default ttft, tpot, itl, e2el
	SLO         SLO           // goodput objectives; none: request_goodput is null
}

// RunInfo describes a run; Report writes it under vLLM's keys (date
// through max_concurrency) and Gearbox's own.
type RunInfo struct {
	Date           string  // "20060102-150405", as vLLM writes it
	Backend        string  // "openai" (completions) or "openai-chat"
	Label          string  // "" is null
	ModelID        string  // the model name sent in requests
	TokenizerID    string  // where the tokenizer came from
	NumPrompts     int     // requests in the workload
	RequestRate    float64 // req/s; +Inf for all at once (written "inf")
	Burstiness     float64 // gamma shape of the arrival gaps
	MaxConcurrency int     // 0: unlimited (null)
	Dataset        string  // the dataset spec
	Endpoint       string  // e.g. "/v1/completions"
	BaseURL        string
	Replay         bool    // arrivals from the trace's timestamps
	TimeScale      float64 // replay speed-up
	Seed           int64
	IgnoreEOS      bool
}

// Stats summarizes one metric in milliseconds; Percentiles are parallel to
// Report.Percentiles. With no samples every value is 0, as in vLLM.
type Stats struct {
	Mean, Median, Std float64
	Percentiles       []float64
}

// Report is a run's summary in the terms of vllm bench serve: its JSON
// (MarshalJSON) uses the keys of vLLM's --save-result file, plus
// Gearbox's own (failed_by_reason, dataset, endpoint, slo, ...), and
// WriteTable prints vLLM's result table.
type Report struct {
	RunInfo

	Duration              time.Duration
	Completed             int
	Failed                int
	TotalInputTokens      int     // over completed requests
	TotalOutputTokens     int     // over completed requests
	RequestThroughput     float64 // completed requests/s
	RequestGoodput        float64 // completed requests meeting every SLO, per s; meaningless without SLOs
	OutputThroughput      float64 // output tokens/s
	TotalTokenThroughput  float64 // (input + output tokens)/s
	MaxOutputTokensPerS   float64 // most chunks with text in one whole second of the run
	MaxConcurrentRequests int     // most completed requests in flight at once

	// TTFT and E2EL over completed requests; TPOT over those with more than
	// one output token; ITL over every gap of every completed request.
	TTFT, TPOT, ITL, E2EL Stats

	FailedByReason map[string]int // failures by RequestResult.Failure
	SLO            SLO
	Percentiles    []float64
	Metrics        []string
	Requests       []RequestResult // in workload order
}

// ComputeReport summarizes per-request results the way vllm bench serve
// does; the caller fills Report.RunInfo. results are kept, in the order
// given, as Report.Requests.
func ComputeReport(results []RequestResult, opts ReportOptions) *Report {
	if opts.Percentiles == nil {
		opts.Percentiles = []float64{99}
	}
	if opts.Metrics == nil {
		opts.Metrics = allMetrics
	}
	rep := &Report{
		Duration: opts.Duration, SLO: opts.SLO, Percentiles: opts.Percentiles, Metrics: opts.Metrics,
		Requests: results, FailedByReason: map[string]int{},
	}
	var ttfts, tpots, itls, e2els []float64
	good := 0
	for i := range results {
		r := &results[i]
		if !r.OK() {
			rep.Failed++
			rep.FailedByReason[r.Failure]++
			continue
		}
		rep.Completed++
		rep.TotalInputTokens += r.InputTokens
		rep.TotalOutputTokens += r.OutputTokens
		ttfts = append(ttfts, ms(r.TTFT))
		e2els = append(e2els, ms(r.Latency))
		if r.OutputTokens > 1 {
			tpots = append(tpots, r.tpot()*1000)
		}
		for _, d := range r.ITL {
			itls = append(itls, ms(d))
		}
		if !opts.SLO.IsZero() && opts.SLO.meets(r) {
			good++
		}
	}
	if s := opts.Duration.Seconds(); s > 0 {
		rep.RequestThroughput = float64(rep.Completed) / s
		rep.RequestGoodput = float64(good) / s
		rep.OutputThroughput = float64(rep.TotalOutputTokens) / s
		rep.TotalTokenThroughput = float64(rep.TotalInputTokens+rep.TotalOutputTokens) / s
	}
	rep.TTFT = summarize(ttfts, opts.Percentiles)
	rep.TPOT = summarize(tpots, opts.Percentiles)
	rep.ITL = summarize(itls, opts.Percentiles)
	rep.E2EL = summarize(e2els, opts.Percentiles)
	rep.MaxOutputTokensPerS, rep.MaxConcurrentRequests = peaks(results)
	return rep
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func summarize(xs []float64, percentiles []float64) Stats {
	s := Stats{Percentiles: make([]float64, len(percentiles))}
	if len(xs) == 0 {
		return s
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	s.Mean = sum / float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - s.Mean) * (x - s.Mean)
	}
	s.Std = math.Sqrt(v / float64(len(xs)))
	s.Median = Percentile(sorted, 50)
	for i, p := range percentiles {
		s.Percentiles[i] = Percentile(sorted, p)
	}
	return s
}

// Percentile returns the p-th percentile (0 to 100) of sorted values by
// linear interpolation between closest ranks, as numpy.percentile does by
// default; 0 for no values.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(rank))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(rank-float64(lo))
}

// peaks returns vLLM's max_output_tokens_per_s (the most chunks with text
// that landed in one whole second, counted from the earliest send) and
// max_concurrent_requests (the most completed requests in flight at once,
// over half-open [send, last token) intervals).
func peaks(results []RequestResult) (float64, int) {
	type event struct {
		t     time.Duration
		delta int
	}
	var events []event
	var minStart, maxEnd time.Duration
	first := true
	for i := range results {
		r := &results[i]
		if !r.OK() {
			continue
		}
		if first || r.Start < minStart {
			minStart = r.Start
		}
		if first || r.Start+r.Latency > maxEnd {
			maxEnd = r.Start + r.Latency
		}
		first = false
		events = append(events, event{r.Start, 1}, event{r.Start + r.Latency, -1})
	}
	if first {
		return 0, 0
	}
	buckets := make([]int, int(math.Ceil((maxEnd-minStart).Seconds()))+1)
	for i := range results {
		r := &results[i]
		if !r.OK() {
			continue
		}
		t := r.Start + r.TTFT
		for k := 0; ; k++ {
			if b := int((t - minStart).Seconds()); b >= 0 && b < len(buckets) {
				buckets[b]++
			}
			if k == len(r.ITL) {
				break
			}
			t += r.ITL[k]
		}
	}
	sort.Slice(events, func(i, j int) bool {
		if events[i].t != events[j].t {
			return events[i].t < events[j].t
		}
		return events[i].delta < events[j].delta
	})
	cur, peak := 0, 0
	for _, e := range events {
		cur += e.delta
		peak = max(peak, cur)
	}
	return float64(slices.Max(buckets)), peak
}

// statsOf returns the statistics of a metric by its vLLM name.
func (r *Report) statsOf(metric string) Stats {
	switch metric {
	case "ttft":
		return r.TTFT
	case "tpot":
		return r.TPOT
	case "itl":
		return r.ITL
	default:
		return r.E2EL
	}
}

// metricTitles are vLLM's table headings and labels.
var metricTitles = map[string][2]string{
	"ttft": {"Time to First Token", "TTFT"},
	"tpot": {"Time per Output Token (excl. 1st token)", "TPOT"},
	"itl":  {"Inter-token Latency", "ITL"},
	"e2el": {"End-to-end Latency", "E2EL"},
}

// percentileWord is vLLM's name for a percentile: "99", "99.9".
func percentileWord(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) }

// WriteTable prints the report as vllm bench serve's result table, with
// the failures by reason after it.
func (r *Report) WriteTable(w io.Writer) error {
	var b bytes.Buffer
	row := func(label string, v any) {
		if f, ok := v.(float64); ok {
			v = strconv.FormatFloat(f, 'f', 2, 64)
		}
		fmt.Fprintf(&b, "%-40s %v\n", label, v)
	}
	b.WriteString(center(" Serving Benchmark Result ", '=') + "\n")
	row("Successful requests:", r.Completed)
	row("Failed requests:", r.Failed)
	if r.MaxConcurrency > 0 {
		row("Maximum request concurrency:", r.MaxConcurrency)
	}
	if !r.Replay && r.RequestRate > 0 && !math.IsInf(r.RequestRate, 1) {
		row("Request rate configured (RPS):", r.RequestRate)
	}
	if r.Replay {
		row("Trace replay speed-up:", r.TimeScale)
	}
	row("Benchmark duration (s):", r.Duration.Seconds())
	row("Total input tokens:", r.TotalInputTokens)
	row("Total generated tokens:", r.TotalOutputTokens)
	row("Request throughput (req/s):", r.RequestThroughput)
	if !r.SLO.IsZero() {
		row("Request goodput (req/s):", r.RequestGoodput)
	}
	row("Output token throughput (tok/s):", r.OutputThroughput)
	row("Peak output token throughput (tok/s):", r.MaxOutputTokensPerS)
	row("Peak concurrent requests:", float64(r.MaxConcurrentRequests))
	row("Total token throughput (tok/s):", r.TotalTokenThroughput)
	for _, m := range r.Metrics {
		st, t := r.statsOf(m), metricTitles[m]
		b.WriteString(center(t[0], '-') + "\n")
		row("Mean "+t[1]+" (ms):", st.Mean)
		row("Median "+t[1]+" (ms):", st.Median)
		for i, p := range r.Percentiles {
			row("P"+percentileWord(p)+" "+t[1]+" (ms):", st.Percentiles[i])
		}
	}
	if len(r.FailedByReason) > 0 {
		b.WriteString(center("Failed Requests by Reason", '-') + "\n")
		for _, k := range sortedKeys(r.FailedByReason) {
			row(k+":", r.FailedByReason[k])
		}
	}
	b.WriteString(strings.Repeat("=", 50) + "\n")
	_, err := w.Write(b.Bytes())
	return err
}

// center pads s to 50 columns with c, the extra one on the right, as
// Python's "{:c^50}" does.
func center(s string, c byte) string {
	n := 50 - len([]rune(s))
	if n <= 0 {
		return s
	}
	return strings.Repeat(string(c), n/2) + s + strings.Repeat(string(c), n-n/2)
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// MarshalJSON writes the report with vllm bench serve's --save-result keys,
// in its order: date, endpoint_type, backend, label, model_id,
// tokenizer_id, num_prompts, request_rate ("inf" when unbounded),
// burstiness, max_concurrency (null when unlimited), duration (s),
// completed, failed, total_input_tokens, total_output_tokens,
// request_throughput, request_goodput (null without SLOs),
// output_throughput, total_token_throughput, the per-request arrays
// input_lens, output_lens, ttfts (s), itls (s), latencies (s), start_times
// (s from the start of the run), queue_times (s), errors, then
// max_output_tokens_per_s, max_concurrent_requests and, for each selected
// metric, mean_X_ms, median_X_ms, std_X_ms and pNN_X_ms. Gearbox's keys
// follow: failed_by_reason, dataset, endpoint, base_url, slo (ms, null
// when none), replay_timestamps, time_scale, seed, ignore_eos,
// requested_input_lens, percentile_metrics, metric_percentiles.
func (r *Report) MarshalJSON() ([]byte, error) {
	var o object
	o.add("date", r.Date)
	o.add("endpoint_type", r.Backend)
	o.add("backend", r.Backend)
	o.add("label", nullIf(r.Label, r.Label == ""))
	o.add("model_id", r.ModelID)
	o.add("tokenizer_id", r.TokenizerID)
	o.add("num_prompts", r.NumPrompts)
	o.add("request_rate", orInf(r.RequestRate))
	if math.IsInf(r.Burstiness, 1) {
		o.add("burstiness", "inf")
	} else {
		o.add("burstiness", r.Burstiness)
	}
	o.add("max_concurrency", nullIf(r.MaxConcurrency, r.MaxConcurrency <= 0))
	o.add("duration", r.Duration.Seconds())
	o.add("completed", r.Completed)
	o.add("failed", r.Failed)
	o.add("total_input_tokens", r.TotalInputTokens)
	o.add("total_output_tokens", r.TotalOutputTokens)
	o.add("request_throughput", r.RequestThroughput)
	o.add("request_goodput", nullIf(r.RequestGoodput, r.SLO.IsZero()))
	o.add("output_throughput", r.OutputThroughput)
	o.add("total_token_throughput", r.TotalTokenThroughput)

	n := len(r.Requests)
	inputLens, outputLens, requested := make([]int, n), make([]int, n), make([]int, n)
	ttfts, latencies, starts, queues := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	itls, errs := make([][]float64, n), make([]string, n)
	for i := range r.Requests {
		q := &r.Requests[i]
		inputLens[i], requested[i] = q.InputTokens, q.RequestedInputTokens
		starts[i], queues[i], errs[i] = q.Start.Seconds(), q.Queue.Seconds(), q.Error
		itls[i] = []float64{}
		if q.OK() {
			outputLens[i], ttfts[i], latencies[i] = q.OutputTokens, q.TTFT.Seconds(), q.Latency.Seconds()
			for _, d := range q.ITL {
				itls[i] = append(itls[i], d.Seconds())
			}
		}
	}
	o.add("input_lens", inputLens)
	o.add("output_lens", outputLens)
	o.add("ttfts", ttfts)
	o.add("itls", itls)
	o.add("latencies", latencies)
	o.add("start_times", starts)
	o.add("queue_times", queues)
	o.add("errors", errs)
	o.add("max_output_tokens_per_s", r.MaxOutputTokensPerS)
	o.add("max_concurrent_requests", r.MaxConcurrentRequests)
	for _, m := range r.Metrics {
		st := r.statsOf(m)
		o.add("mean_"+m+"_ms", st.Mean)
		o.add("median_"+m+"_ms", st.Median)
		o.add("std_"+m+"_ms", st.Std)
		for i, p := range r.Percentiles {
			o.add("p"+percentileWord(p)+"_"+m+"_ms", st.Percentiles[i])
		}
	}

	o.add("failed_by_reason", r.FailedByReason)
	o.add("dataset", r.Dataset)
	o.add("endpoint", r.Endpoint)
	o.add("base_url", r.BaseURL)
	if r.SLO.IsZero() {
		o.add("slo", nil)
	} else {
		var slo object
		for _, s := range []struct {
			k string
			d time.Duration
		}{{"ttft_ms", r.SLO.TTFT}, {"tpot_ms", r.SLO.TPOT}, {"e2el_ms", r.SLO.E2EL}} {
			if s.d > 0 {
				slo.add(s.k, ms(s.d))
			}
		}
		o.add("slo", slo)
	}
	o.add("replay_timestamps", r.Replay)
	o.add("time_scale", nullIf(r.TimeScale, !r.Replay))
	o.add("seed", r.Seed)
	o.add("ignore_eos", r.IgnoreEOS)
	o.add("requested_input_lens", requested)
	o.add("percentile_metrics", r.Metrics)
	o.add("metric_percentiles", r.Percentiles)
	return o.MarshalJSON()
}

// orInf writes a rate of +Inf or 0 (all at once) as vLLM's "inf", since
// JSON has no infinities.
func orInf(x float64) any {
	if x <= 0 || math.IsInf(x, 1) {
		return "inf"
	}
	return x
}

func nullIf(v any, null bool) any {
	if null {
		return nil
	}
	return v
}

// object is a JSON object that keeps its keys in the order added.
type object []struct {
	key string
	val any
}

func (o *object) add(k string, v any) {
	*o = append(*o, struct {
		key string
		val any
	}{k, v})
}

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, kv := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv.key)
		v, err := json.Marshal(kv.val)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kv.key, err)
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
