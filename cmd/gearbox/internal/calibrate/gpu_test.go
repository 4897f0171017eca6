package calibrate

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/gpu"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sim"
	"github.com/gearboxlm/gearbox/tensor"
)

// gpuProfile is a bfloat16 profile of an H100-like GPU, for the tests that
// run no GPU.
func gpuProfile() *sim.Profile {
	p := &sim.Profile{
		Version: sim.ProfileVersion, Name: "NVIDIA H100 80GB HBM3", DType: sim.ProfileBFloat16, MemoryBytes: 80 << 30,
		MemBytesPerS: 2.9e12, AttentionGFLOPS: 350e3, KernelLatencyS: 2.5e-6, StepOverheadS: 100e-6, LogitsBytesPerS: 10e9,
	}
	for _, m := range []int{1, 64, 1024, 8192} {
		p.GEMM = append(p.GEMM, sim.GEMMPoint{M: m, N: 4096, K: 4096, GFLOPS: 700e3 * float64(m) / float64(m+128)})
	}
	return p
}

// TestMeasureGPUWithoutGPU: with no CUDA driver, MeasureGPU fails with
// the gpu package's one-line "library not found".
func TestMeasureGPUWithoutGPU(t *testing.T) {
	if _, _, err := gpu.Search(gpu.Driver, gpu.OSEnv()); err == nil {
		t.Skip("a CUDA driver is present")
	}
	_, err := MeasureGPU(context.Background(), GPUOptions{Quick: true})
	if !errors.Is(err, gpu.ErrNotFound) || strings.Contains(err.Error(), "\n") {
		t.Errorf("MeasureGPU without a driver: %v", err)
	}
	if _, err := GPUName(0); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("GPUName without a driver: %v", err)
	}
}

// TestGPUProfileNeedsGPURunners: a GPU profile is not validated on the CPU
// engine, and not under plans whose ranks would share the one GPU.
func TestGPUProfileNeedsGPURunners(t *testing.T) {
	ctx := context.Background()
	p := gpuProfile()
	if _, err := ValidateSteps(ctx, p, StepOptions{Shape: smallShape}); err == nil || !strings.Contains(err.Error(), "GPURunners") {
		t.Errorf("steps without runners: %v", err)
	}
	if _, err := ValidateServe(ctx, p, ServeOptions{Shape: smallShape}); err == nil || !strings.Contains(err.Error(), "GPURunners") {
		t.Errorf("serve without runners: %v", err)
	}
	pool := tensor.NewPool(1)
	defer pool.Close()
	tp2 := parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2}
	if _, err := ValidateSteps(ctx, p, StepOptions{Shape: smallShape, Runners: CPURunners(pool), Plans: []parallel.Plan{tp2}}); err == nil || !strings.Contains(err.Error(), "one GPU") {
		t.Errorf("tp=2 on a GPU profile: %v", err)
	}
	o := StepOptions{Runners: CPURunners(pool)}
	if err := o.defaults(p); err != nil {
		t.Fatal(err)
	}
	if len(o.Plans) != 1 || len(o.Prefill) != 5 || o.Prefill[4] != 4096 || o.Decode[3] != 256 || o.DecodeContext != 512 {
		t.Errorf("GPU defaults %+v", o)
	}
}

// TestValidateStepsCatalog runs a small CPU sweep through explicit
// runners with a catalog GPU predicting beside the profile.
func TestValidateStepsCatalog(t *testing.T) {
	p := testProfile(t)
	pool := tensor.NewPool(2)
	defer pool.Close()
	cfg, err := smallShape.Config()
	if err != nil {
		t.Fatal(err)
	}
	h100, _ := sim.LookupGPU("h100")
	res, err := ValidateSteps(context.Background(), p, StepOptions{
		Model: cfg, Runners: CPURunners(pool), Catalog: &h100,
		Plans: []parallel.Plan{parallel.Single}, Prefill: []int{32}, Decode: []int{4}, DecodeContext: 64, Rounds: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		// The catalog GPU is far faster than this CPU, but its vLLM step
		// overhead is larger than these steps.
		if !(r.Catalog > sim.VLLMStepOverhead) || !(r.Catalog < sim.VLLMStepOverhead+r.Predicted) || math.IsInf(r.CatalogError(), 0) {
			t.Errorf("%s: catalog %g s, profile %g s, measured %g s", r.StepCase, r.Catalog, r.Predicted, r.Measured)
		}
	}
	var b bytes.Buffer
	if err := WriteStepTable(&b, res); err != nil {
		t.Fatal(err)
	}
	if err := WriteStepSummary(&b, []ShapeSteps{{"small", res}, {"again", res}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| catalog ms | catalog error |", "| catalog median |", "| small | 2 |", "| all | 4 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("tables lack %q:\n%s", want, b.String())
		}
	}
}

func TestModelShape(t *testing.T) {
	for name, params := range map[string]int64{"llama-3.2-1b": 1235814400, "Llama-3.1-8B": 8030261248} {
		cfg, err := ModelShape(name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.NumParams() != params {
			t.Errorf("%s: %d parameters, want %d", name, cfg.NumParams(), params)
		}
	}
	if _, err := ModelShape("llama-2"); err == nil || !strings.Contains(err.Error(), "llama-3.1-8b") {
		t.Errorf("unknown shape: %v", err)
	}
}

func TestWriteGPUProfile(t *testing.T) {
	var b bytes.Buffer
	if err := WriteProfile(&b, gpuProfile()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NVIDIA H100 80GB HBM3, bfloat16", "device copy", "logits to host", "H100 (links and FP8 ratio taken from it)", "GEMM TFLOP/s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// requireGPU skips, in one line, when no CUDA device opens.
func requireGPU(t *testing.T) {
	t.Helper()
	if _, err := GPUName(0); err != nil {
		t.Skipf("no CUDA GPU: %v", err)
	}
}

// TestMeasureGPUQuick measures the quick GPU grid on device 0, then runs
// a small step sweep and serving run on the GPU with the profile: the
// plumbing, not the error bounds (gearbox calibrate --device cuda
// --validate checks those).
func TestMeasureGPUQuick(t *testing.T) {
	requireGPU(t)
	ctx := context.Background()
	cache := &gpu.KernelCache{Dir: t.TempDir()} // compile the executor's kernels once, not per executor
	p, err := MeasureGPU(ctx, GPUOptions{Quick: true, KernelCache: cache, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	if !p.IsGPU() || len(p.GEMM) != len(newGPUGrid(true).ms)*len(newGPUGrid(true).nks) || !(p.LogitsBytesPerS > 0) {
		t.Fatalf("profile %+v", p)
	}
	var small, large float64
	for _, pt := range p.GEMM {
		switch pt.M {
		case 1:
			small = max(small, pt.GFLOPS)
		case 1024:
			large = max(large, pt.GFLOPS)
		}
	}
	if !(large > 10*small) {
		t.Errorf("GEMM at M=1024 %.0f GFLOP/s, at M=1 %.0f", large, small)
	}
	if err := WriteProfile(os.Stderr, p); err != nil {
		t.Fatal(err)
	}
	runners := GPURunners(0, cache)
	var catalog *sim.GPU
	if c, ok := sim.MatchGPU(p.Name); ok {
		catalog = &c
	}
	res, err := ValidateSteps(ctx, p, StepOptions{
		Shape: smallShape, Runners: runners, Catalog: catalog, Prefill: []int{16, 256}, Decode: []int{1, 8}, DecodeContext: 64, Rounds: 1, Log: os.Stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !(r.Measured > 0) || !(r.Predicted > 0) || (catalog != nil) != (r.Catalog > 0) {
			t.Errorf("%s: measured %g s, predicted %g, catalog %g", r.StepCase, r.Measured, r.Predicted, r.Catalog)
		}
	}
	serve, err := ValidateServe(ctx, p, ServeOptions{
		Shape: smallShape, Runners: runners, Dataset: "synthetic:in=16-48,out=4-16", Requests: 24, Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	if serve.Measured.Completed != 24 || serve.Predicted.Completed != 24 {
		t.Errorf("completed %d measured, %d simulated", serve.Measured.Completed, serve.Predicted.Completed)
	}
}
