package calibrate

import (
	"context"
	"fmt"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/sim"
	"github.com/gearboxlm/gearbox/tensor"
)

// attentionShape is the model whose engine steps measure attention: the
// heads of Llama-3-8B (head_dim 128, four query heads per KV head) on a
// narrow, two-layer model, so that attention is most of a long step.
var attentionShape = Shape{Hidden: 1024, Intermediate: 256, Layers: 2, Heads: 8, KVHeads: 2, HeadDim: 128, Vocab: 256, MaxPositions: 4096}

// attentionRates are the engine's paged attention throughputs, GFLOP/s
// (4·head_dim FLOPs per query·key pair and head).
type attentionRates struct {
	Prefill, Decode float64
}

// measureAttention times engine steps of attentionShape that differ only
// in how many keys their queries attend: a prefill chunk at context 0
// and the same chunk after pl.prefill[1] cached tokens; a decode batch at
// a short and a long context. Everything but attention is the same in
// the two steps of a pair, so their time difference is the attention of
// the extra (query, key) pairs.
func measureAttention(ctx context.Context, pool *tensor.Pool, pl plan) (attentionRates, error) {
	cfg, err := attentionShape.Config()
	if err != nil {
		return attentionRates{}, err
	}
	w := randomWeights(cfg, pool)
	const bs = 16
	tokens, long := pl.prefill[0], pl.prefill[1]
	batch, short, dlong := pl.decode[0], pl.decode[1], pl.decode[2]
	perSeq := (dlong + 1 + bs - 1) / bs
	blocks := max(batch*perSeq, (long+tokens+bs-1)/bs)
	exec, err := engine.NewExecutor(cfg, w, engine.ExecutorOptions{BlockSize: bs, NumBlocks: blocks, Pool: pool})
	if err != nil {
		return attentionRates{}, fmt.Errorf("calibrate: %w", err)
	}
	prefill := func(context int) *engine.Batch {
		return &engine.Batch{Seqs: []engine.SeqBatch{{Tokens: tokenRun(tokens, cfg.Vocab), Pos: context, Blocks: iota(0, (context+tokens+bs-1)/bs), NumLogits: 1}}}
	}
	decode := func(context int) *engine.Batch {
		b := &engine.Batch{}
		for i := 0; i < batch; i++ {
			b.Seqs = append(b.Seqs, engine.SeqBatch{Tokens: []int{3 + i%(cfg.Vocab-3)}, Pos: context, Blocks: iota(i*perSeq, perSeq), NumLogits: 1})
		}
		return b
	}
	steps := []*engine.Batch{prefill(0), prefill(long), decode(short), decode(dlong)}
	for _, b := range steps { // warm-up: grows the ranks' scratch
		if _, err := exec.Step(ctx, b, parallel.Single); err != nil {
			return attentionRates{}, fmt.Errorf("calibrate: %w", err)
		}
	}
	t, err := rounds(ctx, pl.rounds, len(steps), func(c int) (float64, error) {
		return timeStep(ctx, exec, steps[c], parallel.Single, 1)
	})
	if err != nil {
		return attentionRates{}, err
	}
	flops := func(pairs int) float64 {
		return 4 * float64(cfg.HeadDim) * float64(cfg.Heads) * float64(cfg.Layers) * float64(pairs)
	}
	rate := func(pairs int, dt float64) (float64, error) {
		if !(dt > 0) {
			return 0, fmt.Errorf("calibrate: attention of %d more key pairs took no longer (%.3g s); the machine is too noisy to measure it", pairs, dt)
		}
		return flops(pairs) / dt / 1e9, nil
	}
	var r attentionRates
	if r.Prefill, err = rate(tokens*long, t[1]-t[0]); err != nil {
		return r, err
	}
	if r.Decode, err = rate(batch*(dlong-short), t[3]-t[2]); err != nil {
		return r, err
	}
	return r, nil
}

// timeStep is the median seconds of reps executor steps of b under plan.
func timeStep(ctx context.Context, exec *engine.Executor, b *engine.Batch, plan parallel.Plan, reps int) (float64, error) {
	ts := make([]float64, reps)
	for i := range ts {
		start := time.Now()
		if _, err := exec.Step(ctx, b, plan); err != nil {
			return 0, fmt.Errorf("calibrate: step under %s: %w", plan, err)
		}
		ts[i] = time.Since(start).Seconds()
	}
	return median(ts), nil
}

// tokenRun is n token ids cycling through the vocabulary above the
// special ids.
func tokenRun(n, vocab int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 3 + (i*7)%(vocab-3)
	}
	return out
}

// iota is n consecutive block ids from first.
func iota(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}

// overheadRequests and overheadPrompt shape the step-overhead run: a
// batch of short requests on the built-in model, whose kernels are so
// small that a step is almost all host time.
const (
	overheadRequests = 8
	overheadPrompt   = 16
)

// measureStepOverhead runs the engine loop (scheduler, executor, sampler,
// detokenizer, streams) on the built-in model with overheadRequests
// requests submitted together, and returns its wall time per step less
// the cost model's prediction for the same steps' kernels under profile p
// (whose StepOverheadS must be 0): the host time per step the cost model
// does not otherwise see.
func measureStepOverhead(ctx context.Context, pool *tensor.Pool, p *sim.Profile, pl plan) (float64, error) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	gen := pl.loopSteps
	predicted, steps, err := predictLoop(p, m.Config, gen)
	if err != nil {
		return 0, err
	}
	t, err := rounds(ctx, pl.rounds, 1, func(int) (float64, error) {
		return runLoop(ctx, m, pool, gen)
	})
	if err != nil {
		return 0, err
	}
	return max(0, (t[0]-predicted)/float64(steps)), nil
}

// runLoop serves overheadRequests requests of gen tokens each through a
// fresh engine and returns the seconds from submitting them to the end of
// the last stream.
func runLoop(ctx context.Context, m *model.Model, pool *tensor.Pool, gen int) (float64, error) {
	cfg := m.Config
	per := (overheadPrompt + gen + 15) / 16
	exec, err := engine.NewExecutor(cfg, m.Weights, engine.ExecutorOptions{BlockSize: 16, NumBlocks: overheadRequests * per, Pool: pool})
	if err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	eng, err := engine.NewEngine(engine.Options{
		Exec: exec, Tokenizer: m.Tokenizer, EOS: m.EOS(), Clock: clock.Real{},
		Sched: sched.Config{MaxNumBatchedTokens: 2048, MaxNumSeqs: 256, MaxModelLen: cfg.MaxPositions},
	})
	if err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	start := time.Now()
	streams := make([]*engine.Stream, overheadRequests)
	for i := range streams {
		prompt := tokenRun(overheadPrompt, cfg.Vocab)
		prompt[0] = 3 + i
		if streams[i], err = eng.Submit(engine.Request{Prompt: prompt, MaxTokens: gen, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}}); err != nil {
			return 0, fmt.Errorf("calibrate: %w", err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	var runErr error
	for _, s := range streams {
		for {
			ev, err := s.Recv(ctx)
			if err != nil {
				runErr = err
				break
			}
			if ev.Finish != "" {
				if ev.Finish != engine.FinishLength {
					runErr = fmt.Errorf("calibrate: overhead request ended with %q: %v", ev.Finish, ev.Err)
				}
				break
			}
		}
		if runErr != nil {
			break
		}
	}
	elapsed := time.Since(start).Seconds()
	stop()
	<-done
	return elapsed, runErr
}

// predictLoop is the cost model's kernel time, under p, of the steps
// runLoop runs: one prefill of every prompt, then gen−1 decode steps of
// the whole batch. It returns the seconds and the number of steps.
func predictLoop(p *sim.Profile, cfg *model.Config, gen int) (float64, int, error) {
	node, err := p.Node(1)
	if err != nil {
		return 0, 0, err
	}
	cm, err := sim.NewCostModel(node, sim.CPUPrecision)
	if err != nil {
		return 0, 0, err
	}
	lc, err := cm.Layout(cfg, parallel.Standard(parallel.Single))
	if err != nil {
		return 0, 0, err
	}
	shape := sim.StepShape{Seqs: make([]sim.Seq, overheadRequests)}
	for i := range shape.Seqs {
		shape.Seqs[i] = sim.Seq{Context: 0, New: overheadPrompt, Logits: 1}
	}
	total := lc.Step(&shape).Seconds
	for g := 1; g < gen; g++ {
		for i := range shape.Seqs {
			shape.Seqs[i] = sim.Seq{Context: overheadPrompt + g - 1, New: 1, Logits: 1}
		}
		total += lc.Step(&shape).Seconds
	}
	return total, gen, nil
}
