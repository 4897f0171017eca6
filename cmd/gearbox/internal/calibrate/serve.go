package calibrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/server"
	"github.com/gearboxlm/gearbox/sim"
	"github.com/gearboxlm/gearbox/tensor"
	"github.com/gearboxlm/gearbox/tokenizer"
)

// ServeOptions configure ValidateServe. Zero fields take the defaults
// noted.
type ServeOptions struct {
	Threads int   // CPU kernel threads; 0: the profile's Threads (all cores for a GPU profile, for the weights)
	Shape   Shape // default ValidationShape; its vocabulary becomes the tokenizer's
	// Model, when set, is the model to serve instead of Shape (a real
	// model's shape from ModelShape); its vocabulary too becomes the
	// tokenizer's.
	Model *model.Config
	// Runners builds the server's executor; nil runs the CPU engine with
	// a kernel pool of Threads. A GPU profile needs GPU runners
	// (GPURunners).
	Runners Runners
	// Dataset is a synthetic workload spec for bench.LoadDataset, default
	// "synthetic:in=64-256,out=16-128"; Requests is its number of
	// requests, default 200.
	Dataset  string
	Requests int
	// RequestRate is the arrival rate, requests per second; 0 or +Inf
	// sends every request at once, vllm bench serve's default.
	RequestRate float64
	Seed        int64
	// MaxNumBatchedTokens and MaxNumSeqs are the scheduler limits of both
	// the server and the simulation; defaults 2048 and 256, gearbox
	// serve's.
	MaxNumBatchedTokens int
	MaxNumSeqs          int
	// Weights is the format the CPU engine holds the matrices in, as
	// StepOptions.Weights.
	Weights tensor.DType
	Log     io.Writer // the load generator's result table; nil: silent
}

func (o *ServeOptions) defaults(p *sim.Profile) error {
	if p.IsGPU() && o.Runners == nil {
		return fmt.Errorf("calibrate: profile of %s describes a GPU: serve it on GPU runners (GPURunners)", p.Name)
	}
	if o.Threads == 0 {
		o.Threads = p.Threads
	}
	if o.Shape == (Shape{}) {
		o.Shape = ValidationShape
	}
	if o.Dataset == "" {
		o.Dataset = "synthetic:in=64-256,out=16-128"
	}
	if o.Requests == 0 {
		o.Requests = 200
	}
	if o.RequestRate == 0 {
		o.RequestRate = math.Inf(1)
	}
	if o.MaxNumBatchedTokens == 0 {
		o.MaxNumBatchedTokens = 2048
	}
	if o.MaxNumSeqs == 0 {
		o.MaxNumSeqs = 256
	}
	return nil
}

// ServeResult is one workload served for real and simulated.
type ServeResult struct {
	Shape     Shape
	Dataset   string
	Requests  int
	Measured  *bench.Report // the load generator against the in-process server
	Predicted *bench.Report // sim.Run of the same requests
	SimSteps  int           // engine steps the simulation ran
}

// TTFTError is the simulated median TTFT's relative error.
func (r *ServeResult) TTFTError() float64 {
	return (r.Predicted.TTFT.Median - r.Measured.TTFT.Median) / r.Measured.TTFT.Median
}

// ThroughputError is the simulated output throughput's relative error.
func (r *ServeResult) ThroughputError() float64 {
	return (r.Predicted.OutputThroughput - r.Measured.OutputThroughput) / r.Measured.OutputThroughput
}

// servedName is the model name of the validation server.
const servedName = "calibrate-validation"

// ValidateServe serves opts' workload for real and in simulation and
// returns both reports. For real: gearbox serve's stack in this process
// (an executor from opts.Runners under the single plan, by default
// cpuexec.Executor with a kernel pool of opts.Threads; engine.Engine with
// the scheduler limits; server.Server on a loopback port) driven by the
// load generator of gearbox bench serve (bench.Run, streaming
// completions, ignore_eos). Simulated: sim.Run with the cost model of p
// on Node(p, 1) in p's precision, the same scheduler limits, and the
// same requests, each arriving when the load generator sent it, with the
// prompt length the server reported (the prompt text plus the BOS the
// server adds) and the same output length.
func ValidateServe(ctx context.Context, p *sim.Profile, opts ServeOptions) (*ServeResult, error) {
	if err := opts.defaults(p); err != nil {
		return nil, err
	}
	if _, err := enginePrecision(p, opts.Weights); err != nil {
		return nil, err
	}
	bm, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	tok := bm.Tokenizer
	var cfg *model.Config
	if opts.Model != nil {
		c := *opts.Model
		c.Vocab = tok.VocabSize()
		cfg = &c
	} else {
		shape := opts.Shape
		shape.Vocab = tok.VocabSize()
		if cfg, err = shape.Config(); err != nil {
			return nil, err
		}
	}
	ds, err := bench.LoadDataset(opts.Dataset, opts.Seed)
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	if spec, ok := syntheticSpec(opts.Dataset); ok {
		spec.N = opts.Requests
		ds.Requests = bench.Synthetic(spec, opts.Seed)
	}
	ds = ds.Head(opts.Requests)
	for _, r := range ds.Requests {
		if r.InputTokens+r.OutputTokens+1 > cfg.MaxPositions {
			return nil, fmt.Errorf("calibrate: request %d needs %d positions, the model has %d", r.Index, r.InputTokens+r.OutputTokens+1, cfg.MaxPositions)
		}
	}

	measured, err := serveForReal(ctx, cfg, tok, ds, opts)
	if err != nil {
		return nil, err
	}
	if measured.Failed > 0 {
		return nil, fmt.Errorf("calibrate: %d of %d requests failed against the server (%v)", measured.Failed, len(ds.Requests), measured.FailedByReason)
	}
	if opts.Log != nil {
		if err := measured.WriteTable(opts.Log); err != nil {
			return nil, err
		}
	}

	predicted, steps, err := simulateServe(p, cfg, ds, measured, opts)
	if err != nil {
		return nil, err
	}
	if opts.Log != nil {
		if err := predicted.WriteTable(opts.Log); err != nil {
			return nil, err
		}
	}
	return &ServeResult{Shape: shapeOf(cfg), Dataset: opts.Dataset, Requests: len(measured.Requests), Measured: measured, Predicted: predicted, SimSteps: steps}, nil
}

// simulateServe runs the requests of measured through sim.Run with the
// cost model of p: each arrives when the load generator sent it, with the
// prompt length the server reported and the output length asked for. It
// returns the report and the number of simulated steps.
func simulateServe(p *sim.Profile, cfg *model.Config, ds *bench.Dataset, measured *bench.Report, opts ServeOptions) (*bench.Report, int, error) {
	reqs := make([]bench.Request, len(measured.Requests))
	for i, r := range measured.Requests {
		reqs[i] = ds.Requests[r.Index]
		reqs[i].InputTokens = r.InputTokens
		reqs[i].Arrival = r.Start
	}
	node, err := Node(p, 1)
	if err != nil {
		return nil, 0, err
	}
	prec, err := enginePrecision(p, opts.Weights)
	if err != nil {
		return nil, 0, err
	}
	cm, err := sim.NewCostModel(node, prec)
	if err != nil {
		return nil, 0, fmt.Errorf("calibrate: %w", err)
	}
	res, err := sim.Run(sim.RunOptions{
		Model: cfg, Cost: cm, Plan: parallel.Single, Requests: reqs,
		Sched: sched.Config{MaxNumBatchedTokens: opts.MaxNumBatchedTokens, MaxNumSeqs: opts.MaxNumSeqs, EnablePrefixCaching: true},
	})
	if err != nil {
		return nil, 0, fmt.Errorf("calibrate: %w", err)
	}
	if res.Report.Failed > 0 {
		return nil, 0, fmt.Errorf("calibrate: %d of %d simulated requests failed (%v)", res.Report.Failed, len(reqs), res.Report.FailedByReason)
	}
	return res.Report, res.Steps, nil
}

// syntheticSpec parses a synthetic dataset spec, as bench.LoadDataset
// does.
func syntheticSpec(spec string) (bench.SyntheticSpec, bool) {
	rest, ok := strings.CutPrefix(spec, "synthetic")
	if !ok {
		return bench.SyntheticSpec{}, false
	}
	s, err := bench.ParseSynthetic(strings.TrimPrefix(rest, ":"))
	return s, err == nil
}

// serveForReal runs ds through an in-process server of cfg with random
// weights on an executor from opts.Runners and returns the load
// generator's report.
func serveForReal(ctx context.Context, cfg *model.Config, tok *tokenizer.Tokenizer, ds *bench.Dataset, opts ServeOptions) (_ *bench.Report, err error) {
	pool := tensor.NewPool(opts.Threads)
	defer pool.Close()
	runners := opts.Runners
	if runners == nil {
		runners = CPURunners(pool)
	}
	w := randomWeights(cfg, pool, opts.Weights)
	// Enough KV blocks for every request at once, so the server never
	// preempts; the simulation's memory model leaves far more.
	blocks, longest := 0, 0
	for _, r := range ds.Requests {
		blocks += (r.InputTokens + 1 + r.OutputTokens + 15) / 16
		longest = max(longest, r.InputTokens+1+r.OutputTokens)
	}
	blocks += blocks / 4
	// The longest sequence, with room for the prompt's tokenization to
	// come out a little longer than asked: the bound of a GPU's block
	// tables, which its decode graphs copy every step.
	maxLen := min(cfg.MaxPositions, longest+longest/4+16)
	exec, release, err := runners(cfg, w, RunnerSpec{
		Plan: parallel.Single, BlockSize: 16, NumBlocks: blocks,
		MaxTokens: opts.MaxNumBatchedTokens, MaxSeqs: opts.MaxNumSeqs, MaxModelLen: maxLen,
	})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, release()) }()
	eng, err := engine.NewEngine(engine.Options{
		Exec: exec, Tokenizer: tok, EOS: cfg.EOS, Clock: clock.Real{},
		Sched: sched.Config{
			MaxNumBatchedTokens: opts.MaxNumBatchedTokens, MaxNumSeqs: opts.MaxNumSeqs, MaxModelLen: maxLen,
			EnablePrefixCaching: true, MaxWaiting: 1024,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	api := server.New(server.Options{Engine: eng, Tokenizer: tok, ModelName: servedName, Logger: logger})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	hs := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second}
	runCtx, stop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		_ = eng.Run(runCtx)
	}()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	defer func() {
		_ = hs.Close()
		<-served
		stop()
		<-loopDone
	}()

	prompts, err := bench.NewPromptBuilder(tok, opts.Seed)
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	rep, err := bench.Run(ctx, bench.Options{
		BaseURL: "http://" + ln.Addr().String(), Model: servedName, Requests: ds.Requests, Prompts: prompts,
		RequestRate: opts.RequestRate, Seed: opts.Seed, IgnoreEOS: true, DatasetSpec: ds.Spec,
	})
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	return rep, nil
}
