package sim

import (
	"math"
	"reflect"
	"testing"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sched"
)

// seesawBox is the paper's PCIe box for the Seesaw tests: CodeLlama-34B
// in float16 on 4 A10Gs, each on PCIe 4.0 x8.
func seesawBox(t *testing.T) (*model.Config, *CostModel) {
	t.Helper()
	cfg := preset(t, "codellama/CodeLlama-34b-hf")
	node, err := ParseNode("4xA10G@pcie4x8")
	if err != nil {
		t.Fatal(err)
	}
	prec, err := VLLMPrecision(cfg, "float16", "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	cm, err := NewCostModel(node, prec)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, cm
}

// TestSeesawSimulated runs Seesaw (pp=4 prefill, tp=4 decode) on 4 A10Gs
// with PCIe 4.0 x8 host links over an offline batch: every request
// completes, both placements run with transitions between them, each
// transition costs the slowest rank's weight reload from host memory,
// swaps move KV, and the run is deterministic.
func TestSeesawSimulated(t *testing.T) {
	cfg, cm := seesawBox(t)
	run := func() *RunResult { return runSeesawBox(t, 8<<30, 256, 200) }
	res := run()
	if res.Report.Completed != 200 || res.Report.Failed != 0 {
		t.Fatalf("completed %d, failed %d", res.Report.Completed, res.Report.Failed)
	}
	spans := map[string]int{}
	for _, s := range res.Timeline {
		spans[s.Plan]++
	}
	if spans["pp=4"] < 2 || spans["tp=4"] < 2 {
		t.Fatalf("plan spans %v: want the phases to cycle", spans)
	}
	// Transitions sit between spans of different plans and cost the
	// slowest rank's reload of the next plan's weights over its host link.
	reload := func(p parallel.Plan) float64 {
		slowest := 0.0
		for r := 0; r < p.Ranks(); r++ {
			s, err := cm.WeightReload(cfg, parallel.Standard(p), r)
			if err != nil {
				t.Fatal(err)
			}
			slowest = max(slowest, s)
		}
		return slowest
	}
	gaps := 0
	for i := 1; i < len(res.Timeline); i++ {
		prev, s := res.Timeline[i-1], res.Timeline[i]
		if prev.Plan == s.Plan {
			continue
		}
		want := reload(parallel.Plan{DP: 1, PP: 4, SP: 1, TP: 1})
		if s.Plan == "tp=4" {
			want = reload(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 4})
		}
		if gap := s.Start - prev.End; gap < want-1e-6 {
			t.Fatalf("%s → %s at %.3f s: %.3f s between the spans, a weight reload takes %.3f s", prev.Plan, s.Plan, s.Start, gap, want)
		}
		gaps++
	}
	if gaps == 0 {
		t.Fatal("no transition between spans")
	}
	// The per-phase breakdown accounts for every step, token and
	// transition of the run.
	steps, tokens := 0, int64(0)
	for _, p := range res.Placements {
		steps += p.Steps
		tokens += p.Tokens
	}
	if want := int64(200 * (1500 + 60 - 1)); steps != res.Steps || tokens != want {
		t.Fatalf("placement stats count %d steps and %d tokens, the run %d steps and %d tokens", steps, tokens, res.Steps, want)
	}
	if pp := res.Placements[0]; pp.Plan != "pp=4" || pp.DecodeSteps != 0 {
		t.Fatalf("prefill placement stats %+v: want pp=4 with no decode-only step", pp)
	}
	if tp := res.Placements[1]; tp.Plan != "tp=4" || tp.DecodeSteps != int64(tp.Steps) || tp.Decodes != int64(200*59) {
		t.Fatalf("decode placement stats %+v: want tp=4, decode-only steps, %d decodes", tp, 200*59)
	}
	h := res.Host
	if h.Transitions != gaps || h.TransitionSeconds <= 0 || h.SwapOutBytes <= 0 || h.SwapInBytes != h.SwapOutBytes || h.CopySeconds <= 0 {
		t.Fatalf("host stats %+v: want %d transitions and every parked byte brought back", h, gaps)
	}
	if again := run(); !reflect.DeepEqual(again.Report, res.Report) || !reflect.DeepEqual(again.Timeline, res.Timeline) {
		t.Fatal("two runs differ")
	}
	t.Logf("seesaw: %.1f s, %.0f tok/s, %d spans %v", res.SimDuration.Seconds(), res.Report.TotalTokenThroughput, len(res.Timeline), spans)
}

// TestSeesawAtSeqCap runs Seesaw with a small --max-num-seqs, so decode
// phases end with the running requests at the cap and requests waiting:
// every transition must lead to a span of steps (a prefill phase that
// admission cannot feed is not entered).
func TestSeesawAtSeqCap(t *testing.T) {
	res := runSeesawBox(t, 1<<30, 16, 96)
	if res.Report.Completed != 96 {
		t.Fatalf("completed %d of 96", res.Report.Completed)
	}
	gaps := 0
	for i := 1; i < len(res.Timeline); i++ {
		if res.Timeline[i].Plan != res.Timeline[i-1].Plan {
			gaps++
		}
	}
	if res.Host.Transitions != gaps || gaps < 2 {
		t.Fatalf("%d transitions, %d changes of plan between spans of steps", res.Host.Transitions, gaps)
	}
	t.Logf("%d transitions, each into a span of steps", gaps)
}

// runSeesawBox runs Seesaw (pp=4 prefill, tp=4 decode) on seesawBox over
// an offline batch of n requests of 1,500 prompt and 60 output tokens,
// with hostBytes of host KV store per rank and at most maxSeqs running.
func runSeesawBox(t *testing.T, hostBytes int64, maxSeqs, n int) *RunResult {
	t.Helper()
	cfg, cm := seesawBox(t)
	pol, err := policy.NewSeesaw(parallel.Plan{DP: 1, PP: 4, SP: 1, TP: 1}, parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 4})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(RunOptions{
		Model: cfg, Cost: cm, Plan: pol.Prefill.Plan, Policy: pol, HostKVBytes: hostBytes,
		Sched:    sched.Config{MaxNumBatchedTokens: 8192, MaxNumSeqs: maxSeqs},
		Requests: synthetic(n, 1500, 60, math.Inf(1), 3),
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
