package sim

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sched"
)

func llama70B(t testing.TB) (*CostModel, RunOptions) {
	t.Helper()
	cfg, err := LookupModel("meta-llama/Llama-3.3-70B-Instruct")
	if err != nil {
		t.Fatal(err)
	}
	node, err := ParseNode("8xH200")
	if err != nil {
		t.Fatal(err)
	}
	prec, err := VLLMPrecision(cfg, "auto", "fp8", "auto")
	if err != nil {
		t.Fatal(err)
	}
	cm, err := NewCostModel(node, prec)
	if err != nil {
		t.Fatal(err)
	}
	return cm, RunOptions{Model: cfg, Cost: cm, Sched: sched.Config{MaxNumBatchedTokens: 2048, MaxNumSeqs: 256, EnablePrefixCaching: true}}
}

func synthetic(n, in, out int, rate float64, seed int64) []bench.Request {
	reqs := bench.Synthetic(bench.SyntheticSpec{N: n, InMin: in, InMax: in, OutMin: out, OutMax: out}, seed)
	offsets, _ := bench.Arrivals(n, rate, 1, seed)
	for i := range reqs {
		reqs[i].Arrival = offsets[i]
	}
	return reqs
}

// TestSingleRequestTimes: one request's TTFT is its prefill steps and its
// TPOT the mean decode step, both straight from the cost model.
func TestSingleRequestTimes(t *testing.T) {
	cm, opts := llama70B(t)
	opts.Plan = parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 8}
	opts.Requests = synthetic(1, 4096, 250, math.Inf(1), 1)
	res, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := cm.Layout(opts.Model, parallel.Standard(opts.Plan))
	if err != nil {
		t.Fatal(err)
	}
	ttft := lc.Step(&StepShape{Seqs: []Seq{{New: 2048}}}).Seconds + lc.Step(&StepShape{Seqs: []Seq{{Context: 2048, New: 2048, Logits: 1}}}).Seconds
	decode := 0.0
	for c := 4096; c < 4096+249; c++ {
		decode += lc.Step(&StepShape{Seqs: []Seq{{Context: c, New: 1, Logits: 1}}}).Seconds
	}
	rep := res.Report
	if rep.Completed != 1 || rep.TotalOutputTokens != 250 || res.Steps != 2+249 {
		t.Fatalf("completed %d, output %d, steps %d", rep.Completed, rep.TotalOutputTokens, res.Steps)
	}
	if got := rep.TTFT.Mean; math.Abs(got-1000*ttft) > 1e-3 {
		t.Fatalf("TTFT %.4f ms, cost model %.4f ms", got, 1000*ttft)
	}
	if got := rep.TPOT.Mean; math.Abs(got-1000*decode/249) > 1e-3 {
		t.Fatalf("TPOT %.4f ms, cost model %.4f ms", got, 1000*decode/249)
	}
}

// TestVirtualClockIsExact: sim.Run steps the real engine on a virtual
// clock. Three requests with known arrivals (one alone, then, after an
// idle gap the clock jumps over, a chunked prefill and a request arriving
// during its first chunk, which waits for the step boundary and then
// shares the second step) get TTFTs and latencies that are exactly sums of
// LayoutCost.Step's predictions for the steps' shapes, computed here
// independently (to the clock's nanosecond, once per step).
func TestVirtualClockIsExact(t *testing.T) {
	cm, opts := llama70B(t)
	opts.Plan = parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 8}
	gap, late := 10*time.Second, 10*time.Second+time.Millisecond
	opts.Requests = []bench.Request{
		{Index: 0, InputTokens: 1000, OutputTokens: 3},
		{Index: 1, InputTokens: 3000, OutputTokens: 2, Arrival: gap},
		{Index: 2, InputTokens: 500, OutputTokens: 2, Arrival: late},
	}
	res, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := cm.Layout(opts.Model, parallel.Standard(opts.Plan))
	if err != nil {
		t.Fatal(err)
	}
	step := func(seqs ...Seq) float64 { return lc.Step(&StepShape{Seqs: seqs}).Seconds }
	// Request 0 alone: its prefill, then two decodes.
	p0 := step(Seq{New: 1000, Logits: 1})
	e0 := p0 + step(Seq{Context: 1000, New: 1, Logits: 1}) + step(Seq{Context: 1001, New: 1, Logits: 1})
	// Request 1's first chunk fills the 2,048-token budget; request 2
	// arrives during it and joins the next step beside request 1's last
	// chunk; then both decode together.
	c1 := step(Seq{New: 2048})
	if late-gap >= seconds(c1) {
		t.Fatalf("request 2 arrives after request 1's first chunk (%.2f ms)", 1000*c1)
	}
	s2 := step(Seq{Context: 2048, New: 952, Logits: 1}, Seq{New: 500, Logits: 1})
	s3 := step(Seq{Context: 3000, New: 1, Logits: 1}, Seq{Context: 500, New: 1, Logits: 1})
	want := []struct {
		ttft, e2e float64 // seconds
		steps     int
	}{
		{p0, e0, 3},
		{c1 + s2, c1 + s2 + s3, 3},
		{c1 + s2 - (late - gap).Seconds(), c1 + s2 + s3 - (late - gap).Seconds(), 2},
	}
	if res.Steps != 6 || res.Report.Completed != 3 {
		t.Fatalf("%d steps, %d completed; want 6 and 3", res.Steps, res.Report.Completed)
	}
	for i, w := range want {
		r := res.Report.Requests[i]
		tol := time.Duration(w.steps) // the clock rounds each step to the nanosecond
		if d := r.TTFT - seconds(w.ttft); d < -tol || d > tol {
			t.Errorf("request %d: TTFT %v, the cost model's steps sum to %v", i, r.TTFT, seconds(w.ttft))
		}
		if d := r.Latency - seconds(w.e2e); d < -tol || d > tol {
			t.Errorf("request %d: latency %v, the cost model's steps sum to %v", i, r.Latency, seconds(w.e2e))
		}
	}
	if d := res.SimDuration - (gap + seconds(c1+s2+s3)); d < -3 || d > 3 {
		t.Errorf("simulated %v, want the idle gap plus request 1's steps, %v", res.SimDuration, gap+seconds(c1+s2+s3))
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// TestLoadedRunsComplete: under load every request finishes with its exact
// output length, DP replicas share the work, and Shift uses both plans.
func TestLoadedRunsComplete(t *testing.T) {
	_, opts := llama70B(t)
	opts.Requests = synthetic(400, 2000, 100, 20, 2)
	for _, c := range []struct {
		plan   parallel.Plan
		policy string
	}{
		{parallel.Plan{DP: 8, PP: 1, SP: 1, TP: 1}, "static"},
		{parallel.Plan{DP: 1, PP: 1, SP: 8, TP: 1}, "shift"},
		{parallel.Plan{DP: 2, PP: 1, SP: 2, TP: 2}, "shift"},
		{parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 4}, "static"},
	} {
		o := opts
		o.Plan = c.plan
		engine := c.plan
		engine.DP = 1
		if c.policy == "shift" {
			p, err := policy.NewShift(engine, 256)
			if err != nil {
				t.Fatal(err)
			}
			o.Policy = p
		}
		res, err := Run(o)
		if err != nil {
			t.Fatalf("%s: %v", c.plan, err)
		}
		if res.Report.Completed != 400 || res.Report.Failed != 0 || res.Report.TotalOutputTokens != 400*100 {
			t.Fatalf("%s: completed %d failed %d output %d", c.plan, res.Report.Completed, res.Report.Failed, res.Report.TotalOutputTokens)
		}
		plans := map[string]int{}
		steps := map[int]int{}
		for _, s := range res.Timeline {
			plans[s.Plan] += s.Steps
			steps[s.Replica] += s.Steps
			if s.End < s.Start {
				t.Fatalf("span %+v", s)
			}
		}
		if len(steps) != c.plan.DP {
			t.Fatalf("%s: %d replicas ran, want %d", c.plan, len(steps), c.plan.DP)
		}
		if c.policy == "shift" && len(plans) != 2 {
			t.Fatalf("%s shift: plans used %v", c.plan, plans)
		}
		again, _ := Run(o)
		if !reflect.DeepEqual(again.Report.TTFT, res.Report.TTFT) || again.Steps != res.Steps {
			t.Fatalf("%s: runs differ", c.plan)
		}
	}
}

// TestPaperOrdering: the Shift paper's 8×H200 FP8 Llama-70B ordering at
// 4k/250: TTFT SP < TP < DP for one request, throughput DP > Shift > TP.
func TestPaperOrdering(t *testing.T) {
	_, opts := llama70B(t)
	run := func(plan parallel.Plan, shift bool, reqs []bench.Request) *bench.Report {
		o := opts
		o.Plan, o.Requests = plan, reqs
		if shift {
			p, _ := policy.NewShift(plan, 256)
			o.Policy = p
		}
		res, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		return res.Report
	}
	one := synthetic(1, 4096, 250, math.Inf(1), 3)
	many := synthetic(600, 4096, 250, math.Inf(1), 3)
	dp, tp, sp := parallel.Plan{DP: 8, PP: 1, SP: 1, TP: 1}, parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 8}, parallel.Plan{DP: 1, PP: 1, SP: 8, TP: 1}
	tDP, tTP, tShift := run(dp, false, one).TTFT.Mean, run(tp, false, one).TTFT.Mean, run(sp, true, one).TTFT.Mean
	if !(tShift < tTP && tTP < tDP) {
		t.Fatalf("TTFT: shift %.1f, TP %.1f, DP %.1f ms", tShift, tTP, tDP)
	}
	xDP, xTP, xShift := run(dp, false, many).TotalTokenThroughput, run(tp, false, many).TotalTokenThroughput, run(sp, true, many).TotalTokenThroughput
	if !(xDP > xShift && xShift > xTP) {
		t.Fatalf("throughput: DP %.0f, shift %.0f, TP %.0f tok/s", xDP, xShift, xTP)
	}
	t.Logf("TTFT TP/shift %.2f (paper 1.56), DP/shift %.2f (≈6); throughput loss vs DP: TP %.0f%% (46%%), shift %.0f%% (18%%)",
		tTP/tShift, tDP/tShift, 100*(1-xTP/xDP), 100*(1-xShift/xDP))
}

// BenchmarkRun replays 2,000 requests arriving at 4 req/s (about the
// Azure code trace's rate over 8 minutes) on 8×H200 under Shift.
func BenchmarkRun(b *testing.B) {
	_, opts := llama70B(b)
	opts.Plan = parallel.Plan{DP: 1, PP: 1, SP: 8, TP: 1}
	p, _ := policy.NewShift(opts.Plan, 256)
	opts.Policy = p
	opts.Requests = synthetic(2000, 2000, 30, 4, 4)
	steps := 0
	start := time.Now()
	for i := 0; i < b.N; i++ {
		res, err := Run(opts)
		if err != nil {
			b.Fatal(err)
		}
		steps += res.Steps
	}
	b.ReportMetric(float64(steps)/time.Since(start).Seconds(), "steps/s")
}

// TestOverlapLimitsPerVirtualEngine: with overlapping steps a PP
// deployment's engine limits apply per virtual engine, as vLLM's: eight
// requests under --max-num-seqs 4 on pp=2 all decode at once (one wave of
// about 64 steps), where without overlap they take two waves.
func TestOverlapLimitsPerVirtualEngine(t *testing.T) {
	_, opts := llama70B(t)
	opts.Plan = parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 4}
	opts.Requests = synthetic(8, 16, 64, math.Inf(1), 1)
	opts.Sched.MaxNumSeqs = 4
	steps := map[bool]int{}
	for _, overlap := range []bool{false, true} {
		o := opts
		o.OverlapSteps = overlap
		res, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if res.Report.Completed != 8 {
			t.Fatalf("overlap %v: %d of 8 completed", overlap, res.Report.Completed)
		}
		steps[overlap] = res.Steps
	}
	if steps[true] > 70 || steps[false] < 120 {
		t.Fatalf("steps: %d with overlap (want one wave, ≤ 70), %d without (want two waves, ≥ 120)", steps[true], steps[false])
	}
}
