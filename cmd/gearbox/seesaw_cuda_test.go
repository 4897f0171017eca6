package main

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/gpu"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
)

// TestSeesawOnCUDA: the CUDA executor takes Seesaw's two placements (it
// refused a placement not sharing the first's KV slices before it touched
// a device) with a host KV store of --swap-space: without a GPU the only
// error is the missing CUDA library; with one the runner is a Swapper and
// Transitioner with the host blocks asked for, and `generate --device
// cuda --policy seesaw` prefills under pp=2, decodes under tp=2 and
// writes the CPU's single-rank text.
func TestSeesawOnCUDA(t *testing.T) {
	m, err := loadModel("", model.Options{DType: model.Float32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pol, err := policy.NewSeesaw(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1}, parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	par := &parallelFlags{swapSpace: 0.01}
	spec := runnerSpec{placements: pol.Placements(), hostKVBytes: par.hostKVBytes(pol), blockSize: 16, numBlocks: 256, maxTokens: 256, maxSeqs: 4, maxModelLen: 256}
	d := &deviceFlags{memUtil: 0.5, eager: true}
	b, err := d.newCUDARunner(m, model.Float32, model.DTypeAuto, Choice{Device: Device{Kind: CUDA}}, spec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		if !errors.Is(err, gpu.ErrNotFound) {
			t.Fatalf("seesaw placements on the GPU: %v, want no refusal (only a missing CUDA library here)", err)
		}
		t.Logf("no CUDA here: %v", err)
		return
	}
	sw, ok := b.runner.(engine.Swapper)
	_, tr := b.runner.(engine.Transitioner)
	want := hostBlocks(m.Config, model.Float32.Tensor(), 16, spec.hostKVBytes)
	if !ok || !tr || sw.HostBlocks() != want || want == 0 {
		b.close()
		t.Fatalf("CUDA runner: swapper %v transitioner %v, host blocks %d, want %d", ok, tr, sw.HostBlocks(), want)
	}
	b.close()

	out, _, err := runCLI(t, "generate", "--prompt", "Once upon a time", "--max-tokens", "16", "--output", "json", "--device", "cuda", "--dtype", "float32",
		"--policy", "seesaw", "--prefill-plan", "pp=2", "--decode-plan", "tp=2", "--swap-space", "0.01", "--gpu-memory-utilization", "0.2")
	if err != nil {
		t.Fatal(err)
	}
	var res generateResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bad JSON %q: %v", out, err)
	}
	if res.Text != ", there was a little girl named Lily. She loved to play" || res.PlanSteps["pp=2"] != 1 || res.PlanSteps["tp=2"] != 15 {
		t.Fatalf("result = %+v", res)
	}
}
