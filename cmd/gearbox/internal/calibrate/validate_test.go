package calibrate

import (
	"bytes"
	"context"
	"math"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sim"
	"github.com/gearboxlm/gearbox/tensor"
)

var quickProfile struct {
	once sync.Once
	p    *sim.Profile
	err  error
}

// testProfile is one quick profile of this machine shared by the tests.
func testProfile(t testing.TB) *sim.Profile {
	t.Helper()
	quickProfile.once.Do(func() {
		quickProfile.p, quickProfile.err = Measure(context.Background(), Options{Quick: true})
	})
	if quickProfile.err != nil {
		t.Fatal(quickProfile.err)
	}
	return quickProfile.p
}

// smallShape keeps the tests' engine steps to milliseconds.
var smallShape = Shape{Hidden: 256, Intermediate: 512, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, Vocab: 1024, MaxPositions: 512}

// TestValidateStepsSmall runs a small sweep end to end: every case is
// measured and predicted, under every plan, and the tables print.
func TestValidateStepsSmall(t *testing.T) {
	p := testProfile(t)
	plans := []parallel.Plan{parallel.Single, {DP: 1, PP: 1, SP: 1, TP: 2}, {DP: 1, PP: 1, SP: 2, TP: 1}}
	res, err := ValidateSteps(context.Background(), p, StepOptions{
		Shape: smallShape, Plans: plans, Prefill: []int{16, 64}, Decode: []int{1, 8}, DecodeContext: 64, Rounds: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3*4 {
		t.Fatalf("%d results, want 12", len(res))
	}
	for _, r := range res {
		if !(r.Measured > 0) || !(r.Predicted > 0) || math.IsInf(r.Error(), 0) {
			t.Errorf("%s %s: measured %g s, predicted %g s", r.Plan, r.StepCase, r.Measured, r.Predicted)
		}
		sum := 0.0
		for _, v := range r.Parts {
			sum += v
		}
		if !(sum > 0) || sum > r.Predicted*(1+1e-9) {
			t.Errorf("%s %s: components sum to %g s of a %g s step", r.Plan, r.StepCase, sum, r.Predicted)
		}
		if tp := r.Parts[sim.CompAllReduce]; (r.Plan.TP > 1) != (tp > 0) {
			t.Errorf("%s %s: all-reduce time %g", r.Plan, r.StepCase, tp)
		}
		if sp := r.Parts[sim.CompAllToAll]; (r.Plan.SP > 1) != (sp > 0) {
			t.Errorf("%s %s: all-to-all time %g", r.Plan, r.StepCase, sp)
		}
	}
	if g := ByPlan(res); len(g) != 3 || g[1][0].Plan != plans[1] || len(g[2]) != 4 {
		t.Errorf("ByPlan: %d groups", len(g))
	}
	var b bytes.Buffer
	if err := WriteStepTable(&b, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| tp=2 | decode 8 @ 64 |", "| all | 12 |", "median absolute error"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestValidateStepsWeightFormats runs a step sweep with the matrices in
// bfloat16, float16 and Q8_0: the engine runs them (the executor takes the
// formats it loads checkpoints in, and --quantization int8's) and the cost
// model prices each with the profile's curve for it and its weight bytes
// (two, or 34 per 32 for Q8_0), so its predictions move away from
// float32's. A profile without the format, an unknown format, and a GPU
// profile, are refused before anything runs.
func TestValidateStepsWeightFormats(t *testing.T) {
	p := testProfile(t)
	opts := StepOptions{Shape: smallShape, Plans: []parallel.Plan{parallel.Single}, Prefill: []int{64}, Decode: []int{1}, DecodeContext: 64, Rounds: 1}
	f32, err := ValidateSteps(context.Background(), p, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []tensor.DType{tensor.BF16, tensor.F16, tensor.Q8_0} {
		opts.Weights = format
		res, err := ValidateSteps(context.Background(), p, opts)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		for i, r := range res {
			if !(r.Measured > 0) || !(r.Predicted > 0) || r.Predicted == f32[i].Predicted {
				t.Errorf("%s %s: measured %g s, predicted %g s (float32 weights %g s)", format, r.StepCase, r.Measured, r.Predicted, f32[i].Predicted)
			}
		}
	}
	old := *p
	old.GEMMWeights = nil
	opts.Weights = tensor.BF16
	if _, err := ValidateSteps(context.Background(), &old, opts); err == nil || !strings.Contains(err.Error(), "re-run gearbox calibrate") {
		t.Errorf("a profile without bfloat16 measurements: %v", err)
	}
	opts.Weights = tensor.Q8_0
	if _, err := ValidateSteps(context.Background(), &old, opts); err == nil || !strings.Contains(err.Error(), "re-run gearbox calibrate") {
		t.Errorf("a profile without Q8_0 measurements: %v", err)
	}
	opts.Weights = tensor.DType(99)
	if _, err := ValidateSteps(context.Background(), p, opts); err == nil || !strings.Contains(err.Error(), "float32, bfloat16, float16 and Q8_0") {
		t.Errorf("an unknown weight format: %v", err)
	}
	if _, err := ValidateServe(context.Background(), &old, ServeOptions{Shape: smallShape, Weights: tensor.F16}); err == nil || !strings.Contains(err.Error(), "re-run gearbox calibrate") {
		t.Errorf("serving float16 on a profile without it: %v", err)
	}
}

// TestValidateServeSmall serves a small workload for real and simulated.
func TestValidateServeSmall(t *testing.T) {
	p := testProfile(t)
	res, err := ValidateServe(context.Background(), p, ServeOptions{
		Shape: smallShape, Dataset: "synthetic:in=16-48,out=4-16", Requests: 24, Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	m, s := res.Measured, res.Predicted
	if m.Completed != 24 || s.Completed != 24 || res.Requests != 24 {
		t.Fatalf("completed %d measured, %d simulated", m.Completed, s.Completed)
	}
	// The simulation runs the requests the server saw, BOS included.
	if m.TotalInputTokens != s.TotalInputTokens || m.TotalOutputTokens != s.TotalOutputTokens {
		t.Errorf("tokens: measured %d in %d out, simulated %d in %d out", m.TotalInputTokens, m.TotalOutputTokens, s.TotalInputTokens, s.TotalOutputTokens)
	}
	if !(m.TTFT.Median > 0) || !(s.TTFT.Median > 0) || !(res.SimSteps > 0) {
		t.Errorf("TTFT p50 %g ms measured, %g simulated, %d steps", m.TTFT.Median, s.TTFT.Median, res.SimSteps)
	}
	var b bytes.Buffer
	if err := WriteServeTable(&b, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| TTFT p50 (ms) |") || !strings.Contains(b.String(), "| output throughput (tok/s) |") {
		t.Errorf("table:\n%s", b.String())
	}
	t.Logf("small model, 24 requests: TTFT p50 %+.1f%%, output throughput %+.1f%%", 100*res.TTFTError(), 100*res.ThroughputError())
}

func TestWriteProfile(t *testing.T) {
	var b bytes.Buffer
	if err := WriteProfile(&b, testProfile(t)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "1024×4096") || !strings.Contains(b.String(), "engine step overhead") {
		t.Errorf("table:\n%s", b.String())
	}
}

// BenchmarkValidation is the simulator's acceptance check on this CPU
// (docs/simulator.md): it measures the default profile, runs the
// step-time sweep of ValidationShape under single, tp=2 and sp=2, and
// serves 200 requests for real and in simulation, printing the Markdown
// tables. About three minutes on two cores:
//
//	go test -run '^$' -bench Validation -benchtime 1x -timeout 30m ./calibrate
func BenchmarkValidation(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		p, err := Measure(ctx, Options{Log: os.Stderr})
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteProfile(os.Stdout, p); err != nil {
			b.Fatal(err)
		}
		steps, err := ValidateSteps(ctx, p, StepOptions{Log: os.Stderr})
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteStepTable(os.Stdout, steps); err != nil {
			b.Fatal(err)
		}
		serve, err := ValidateServe(ctx, p, ServeOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteServeTable(os.Stdout, serve); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(100*MedianAbsError(steps), "%step-err")
		b.ReportMetric(100*math.Abs(serve.TTFTError()), "%ttft-err")
		b.ReportMetric(100*math.Abs(serve.ThroughputError()), "%tput-err")
	}
}
