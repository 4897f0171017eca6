package calibrate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/gpu"
	"github.com/gearboxlm/gearbox/gpu/cudaexec"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// RunnerSpec sizes an executor for the steps a measurement or a
// validation runs.
type RunnerSpec struct {
	Plan        parallel.Plan
	BlockSize   int // KV block size in tokens
	NumBlocks   int // KV blocks
	MaxTokens   int // most tokens in one step
	MaxSeqs     int // most sequences in one step
	MaxModelLen int // longest sequence, prompt and output
}

// Runners builds the executors that the engine-step measurements and the
// validations run: model cfg with weights w (float32 on the host, as
// randomWeights makes them), sized by spec. The caller calls release when
// done with the runner.
type Runners func(cfg *model.Config, w *model.Weights, spec RunnerSpec) (r engine.Runner, release func() error, err error)

// CPURunners builds the CPU engine's executors (cpuexec.Executor) with
// kernels on pool, in float32.
func CPURunners(pool *tensor.Pool) Runners {
	return func(cfg *model.Config, w *model.Weights, spec RunnerSpec) (engine.Runner, func() error, error) {
		x, err := cpuexec.NewExecutor(cfg, w, cpuexec.Options{Plan: spec.Plan, BlockSize: spec.BlockSize, NumBlocks: spec.NumBlocks, Pool: pool})
		if err != nil {
			return nil, nil, fmt.Errorf("calibrate: %w", err)
		}
		return x, func() error { return nil }, nil
	}
}

// GPURunners builds CUDA executors (cudaexec.Executor) on CUDA device
// ordinal device, in bfloat16 with CUDA graphs for decode steps, as
// gearbox serve --device cuda runs; cache holds the compiled kernels
// (nil compiles them for every executor). Each executor has captured the
// graphs of every decode batch up to spec.MaxSeqs before it is returned,
// as vLLM does at start-up, so that no timed step captures one.
func GPURunners(device int, cache *gpu.KernelCache) Runners {
	return func(cfg *model.Config, w *model.Weights, spec RunnerSpec) (engine.Runner, func() error, error) {
		x, err := cudaexec.New(cfg, w, cudaexec.Options{
			Device: device, DType: model.BFloat16, Plan: spec.Plan, BlockSize: spec.BlockSize, NumBlocks: spec.NumBlocks,
			MaxNumTokens: spec.MaxTokens, MaxNumSeqs: spec.MaxSeqs, MaxModelLen: spec.MaxModelLen,
			KernelCache: cache, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("calibrate: %w", err)
		}
		if err := x.CaptureGraphs(); err != nil {
			return nil, nil, errors.Join(fmt.Errorf("calibrate: %w", err), x.Close())
		}
		return x, x.Close, nil
	}
}

// timeStep is the wall-clock seconds of one step of b under plan (Step
// returns when the device has finished it).
func timeStep(ctx context.Context, r engine.Runner, b *forward.Batch, plan parallel.Plan) (float64, error) {
	start := time.Now()
	if _, err := r.Step(ctx, b, parallel.Standard(plan)); err != nil {
		return 0, fmt.Errorf("calibrate: step under %s: %w", plan, err)
	}
	return time.Since(start).Seconds(), nil
}
