package calibrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/sim"
	"github.com/gearboxlm/gearbox/tensor"
)

// attentionShape is the model whose CPU engine steps measure attention:
// the heads of Llama-3-8B (head_dim 128, four query heads per KV head) on
// a narrow, two-layer model, so that attention is most of a long step.
var attentionShape = Shape{Hidden: 1024, Intermediate: 256, Layers: 2, Heads: 8, KVHeads: 2, HeadDim: 128, Vocab: 256, MaxPositions: 4096}

// engineGrid is what the measurements that run whole engine steps run,
// and how often.
type engineGrid struct {
	rounds    int    // interleaved rounds per measurement; medians are taken over them
	attention Shape  // the model of the attention steps
	prefill   int    // attention: prefill chunk tokens T (at context 0 and 3T)
	decode    [3]int // attention: decode batch, short and long context
	loopSteps int    // step overhead: decode steps of the engine loop
}

// attentionRates are the engine's paged attention throughputs: GFLOP/s
// (4·head_dim FLOPs per query·key pair and head), and for decode also the
// rate at which it streams the KV cache, bytes per second.
type attentionRates struct {
	Prefill, Decode   float64
	DecodeKVBytesPerS float64
}

// measureAttention times pairs of engine steps of g.attention, run by an
// executor from runners with KV elements of kvBytes bytes, that differ
// only in how many keys their queries attend, so that everything but
// attention cancels in their difference:
//
//   - prefill: a chunk of T tokens at context 0 and the same chunk after
//     3T cached tokens. Every query attends 3T more keys, the same number
//     for each, so the kernel threads share the extra work evenly; the
//     keys stay in cache across the chunk's queries. This is the compute
//     rate of the attention kernel, the profile's AttentionGFLOPS.
//   - decode: a batch of B sequences at a short and at a long context.
//     Each sequence's keys are read from memory once per step; the
//     measured rate is the profile's AttentionDecodeGFLOPS, and the rate
//     at which it streams the KV cache is logged to compare with the
//     memory bandwidth.
func measureAttention(ctx context.Context, runners Runners, pool *tensor.Pool, g engineGrid, kvBytes int) (_ attentionRates, err error) {
	cfg, err := g.attention.Config()
	if err != nil {
		return attentionRates{}, err
	}
	w := randomWeights(cfg, pool, tensor.F32)
	const bs = 16
	tokens, longPrefill := g.prefill, 3*g.prefill
	batch, short, long := g.decode[0], g.decode[1], g.decode[2]
	perSeq := (long + 1 + bs - 1) / bs
	blocks := max(batch*perSeq, (longPrefill+tokens+bs-1)/bs)
	exec, release, err := runners(cfg, w, RunnerSpec{
		Plan: parallel.Single, BlockSize: bs, NumBlocks: blocks,
		MaxTokens: tokens, MaxSeqs: batch, MaxModelLen: max(longPrefill+tokens, long+1),
	})
	if err != nil {
		return attentionRates{}, err
	}
	defer func() { err = errors.Join(err, release()) }()
	prefill := func(cached int) *forward.Batch {
		return &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokenRun(tokens, cfg.Vocab), Pos: cached, Blocks: blockRange(0, (cached+tokens+bs-1)/bs), NumLogits: 1}}}
	}
	decode := func(cached int) *forward.Batch {
		b := &forward.Batch{}
		for i := 0; i < batch; i++ {
			b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: []int{3 + i%(cfg.Vocab-3)}, Pos: cached, Blocks: blockRange(i*perSeq, perSeq), NumLogits: 1})
		}
		return b
	}
	steps := []*forward.Batch{prefill(0), prefill(longPrefill), decode(short), decode(long)}
	for _, b := range steps { // warm-up: grows the ranks' scratch, captures a GPU's decode graph
		if _, err := exec.Step(ctx, b, parallel.Standard(parallel.Single)); err != nil {
			return attentionRates{}, fmt.Errorf("calibrate: %w", err)
		}
	}
	t, err := rounds(ctx, g.rounds, len(steps), func(c int) (float64, error) {
		return timeStep(ctx, exec, steps[c], parallel.Single)
	})
	if err != nil {
		return attentionRates{}, err
	}
	flops := func(pairs int) float64 {
		return 4 * float64(cfg.HeadDim) * float64(cfg.Heads) * float64(cfg.Layers) * float64(pairs)
	}
	for _, d := range []struct {
		dt    float64
		pairs int
	}{{t[1] - t[0], tokens * longPrefill}, {t[3] - t[2], batch * (long - short)}} {
		if !(d.dt > 0) {
			return attentionRates{}, fmt.Errorf("calibrate: attention of %d more key pairs took no longer (%.3g s): %w", d.pairs, d.dt, ErrNoisy)
		}
	}
	kvRead := float64(batch*(long-short)) * float64(cfg.Layers*cfg.KVHeads*2*cfg.HeadDim*kvBytes)
	return attentionRates{
		Prefill:           flops(tokens*longPrefill) / (t[1] - t[0]) / 1e9,
		Decode:            flops(batch*(long-short)) / (t[3] - t[2]) / 1e9,
		DecodeKVBytesPerS: kvRead / (t[3] - t[2]),
	}, nil
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

// blockRange is n consecutive block ids from first.
func blockRange(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}

// overheadShape is the model of the step-overhead run: one layer and one
// head of 128, so that its kernels take a few microseconds and the
// attention is the head size the attention rate was measured at, with
// the built-in model's tokenizer and vocabulary.
func overheadShape(vocab int) Shape {
	return Shape{Hidden: 128, Intermediate: 128, Layers: 1, Heads: 1, KVHeads: 1, HeadDim: 128, Vocab: vocab, MaxPositions: 1024}
}

// overheadPrompt is the prompt length of the step-overhead requests.
const overheadPrompt = 16

// hostTimes is the engine loop's host time per step that the cost model
// does not predict: a fixed part and a part per running sequence.
type hostTimes struct {
	Step, PerSeq float64 // seconds
}

// measureStepOverhead runs the engine loop (scheduler, executor from
// runners, sampler, detokenizer, streams) on a tiny model: one request,
// then overheadBatch requests together, each generating g.loopSteps
// tokens, each batch size on an executor of its own that a first, untimed
// run has warmed up. Its wall time per step less the cost model's
// prediction for the same steps' kernels under p (whose StepOverheadS
// must be 0) is the host time the cost model does not otherwise see: the
// one-request run gives the fixed part per step, the difference between
// the runs the part per running sequence.
func measureStepOverhead(ctx context.Context, runners Runners, pool *tensor.Pool, p *sim.Profile, g engineGrid) (_ hostTimes, err error) {
	bm, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		return hostTimes{}, fmt.Errorf("calibrate: %w", err)
	}
	cfg, err := overheadShape(bm.Tokenizer.VocabSize()).Config()
	if err != nil {
		return hostTimes{}, err
	}
	m := &model.Model{Name: "overhead", Config: cfg, Weights: randomWeights(cfg, pool, tensor.F32), Tokenizer: bm.Tokenizer}
	gen := g.loopSteps
	batches := []int{1, overheadBatch}
	execs := make([]engine.Runner, len(batches))
	for c, n := range batches {
		per := (overheadPrompt + gen + 15) / 16
		exec, release, err := runners(cfg, m.Weights, RunnerSpec{
			Plan: parallel.Single, BlockSize: 16, NumBlocks: n * per,
			MaxTokens: n * overheadPrompt, MaxSeqs: n, MaxModelLen: overheadPrompt + gen,
		})
		if err != nil {
			return hostTimes{}, err
		}
		defer func() { err = errors.Join(err, release()) }()
		if _, err := runLoop(ctx, m, exec, n, gen); err != nil {
			return hostTimes{}, err
		}
		execs[c] = exec
	}
	t, err := rounds(ctx, g.rounds, len(batches), func(c int) (float64, error) {
		return runLoop(ctx, m, execs[c], batches[c], gen)
	})
	if err != nil {
		return hostTimes{}, err
	}
	excess := make([]float64, len(batches))
	for c, n := range batches {
		predicted, err := predictLoop(p, cfg, n, gen)
		if err != nil {
			return hostTimes{}, err
		}
		excess[c] = (t[c] - predicted) / float64(gen)
	}
	return hostTimes{
		Step:   max(0, excess[0]),
		PerSeq: max(0, (excess[1]-excess[0])/float64(overheadBatch-1)),
	}, nil
}

// overheadBatch is the larger batch of the step-overhead runs.
const overheadBatch = 32

// runLoop serves n requests of gen tokens each, submitted together,
// through a fresh engine on exec (whose KV cache holds them all) and
// returns the seconds from submitting them to the end of the last stream.
func runLoop(ctx context.Context, m *model.Model, exec engine.Runner, n, gen int) (float64, error) {
	cfg := m.Config
	eng, err := engine.NewEngine(engine.Options{
		Exec: exec, Tokenizer: m.Tokenizer, EOS: cfg.EOS, Clock: clock.Real{},
		Sched: sched.Config{MaxNumBatchedTokens: 2048, MaxNumSeqs: 256, MaxModelLen: cfg.MaxPositions},
	})
	if err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	start := time.Now()
	streams := make([]*engine.Stream, n)
	for i := range streams {
		prompt := tokenRun(overheadPrompt, cfg.Vocab)
		prompt[0] = 3 + i%(cfg.Vocab-3)
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
// the whole batch.
func predictLoop(p *sim.Profile, cfg *model.Config, n, gen int) (float64, error) {
	lc, err := layoutCost(p, p.Precision(), cfg, parallel.Single)
	if err != nil {
		return 0, err
	}
	shape := sim.StepShape{Seqs: make([]sim.Seq, n)}
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
	return total, nil
}
