package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

// pacedRunner is a GreedyRunner whose steps take a fixed time (a sleep,
// as a device step leaves the host idle) and compute nothing: each logits
// row's token is a fixed function of its sequence's position. It times
// the gaps between one step's return and the next step's call, the host
// work the engine puts between device steps, over the steps that decode
// a full batch.
type pacedRunner struct {
	cfg   *model.Config
	p     parallel.Placement
	kv    kvcache.Layout
	step  time.Duration
	full  int // batch size of the steps whose gaps count
	steps int
	ids   []int
	last  time.Time
	gap   time.Duration
	gaps  int
}

func (r *pacedRunner) Config() *model.Config            { return r.cfg }
func (r *pacedRunner) Placements() []parallel.Placement { return []parallel.Placement{r.p} }
func (r *pacedRunner) KVLayout() kvcache.Layout         { return r.kv }
func (r *pacedRunner) PlanSteps() map[string]int        { return map[string]int{r.p.Name: r.steps} }
func (r *pacedRunner) Step(context.Context, *forward.Batch, parallel.Placement) ([]float32, error) {
	return nil, fmt.Errorf("pacedRunner serves greedy steps only")
}

func (r *pacedRunner) StepGreedy(_ context.Context, b *forward.Batch, _ parallel.Placement) ([]int, error) {
	if now := time.Now(); !r.last.IsZero() && len(b.Seqs) == r.full {
		r.gap += now.Sub(r.last)
		r.gaps++
	}
	r.steps++
	time.Sleep(r.step)
	r.ids = r.ids[:0]
	for _, s := range b.Seqs {
		for range s.NumLogits {
			r.ids = append(r.ids, 3+(s.Pos+len(s.Tokens))%(r.cfg.Vocab-3))
		}
	}
	r.last = time.Now()
	return r.ids, nil
}

// BenchmarkEngineLoopOverhead is the host time the engine puts between
// two device steps at a GPU server's batch sizes: n greedy requests of 16
// prompt and 128 output tokens on the built-in model's tokenizer, all at
// once, each read by its own goroutine as a server's handlers read them,
// through a runner whose steps take 1 ms and compute nothing. It reports
// the mean gap between one decode step of all n sequences and the next
// (scheduling, batch building, the greedy hand-off, detokenizing and stop
// checks, the events to the readers, as far as they are not overlapped
// with the step) and its share of a 1 ms step; a GPU decode step of a
// small model takes 1.5–3 ms (docs/performance.md).
func BenchmarkEngineLoopOverhead(b *testing.B) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 64, 256} {
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) { loopOverhead(b, m, n) })
	}
}

// loopOverhead is BenchmarkEngineLoopOverhead with n requests.
func loopOverhead(b *testing.B, m *model.Model, n int) {
	const prompt, out = 16, 128
	kv := kvcache.Layout{Layers: m.Config.Layers, KVHeads: m.Config.KVHeads, HeadDim: m.Config.HeadDim, BlockSize: 16,
		NumBlocks: n * (prompt + out + 16) / 16, DType: tensor.F32}
	r := &pacedRunner{cfg: m.Config, p: parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 1}), kv: kv,
		step: time.Millisecond, full: n}
	e := startEngine(b, r, m.Tokenizer, m.EOS(), sched.Config{MaxNumSeqs: 256, MaxNumBatchedTokens: 8192})
	req := Request{Prompt: m.Tokenizer.Encode("Once upon a time there was a little girl named Lily who", true)[:prompt],
		MaxTokens: out, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}}
	for b.Loop() {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if _, err := e.Generate(context.Background(), req, nil); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		r.last = time.Time{}
	}
	if r.gaps == 0 {
		b.Fatalf("no decode step of all %d sequences", n)
	}
	b.ReportMetric(r.gap.Seconds()*1e6/float64(r.gaps), "µs-gap/step")
	b.ReportMetric(float64(r.gaps)/float64(b.N), "full-steps/op")
}
