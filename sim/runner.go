package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// CostRunner is the simulator's engine.Runner (and engine.GreedyRunner):
// it computes no model. Each step the engine hands it is priced by the
// cost model under the placement the engine chose (LayoutCost.Step of the
// batch's StepShape), and the virtual clock advances by the predicted
// duration, so the engine stamps every token with virtual time. The tokens
// it returns depend only on a sequence's place in the batch (a token's
// value does not change a step's cost) and are never a stop token when the
// engine is given no EOS and requests ignore it.
//
// Like LayoutCost, whose scratch buffers it uses, a CostRunner is not safe
// for concurrent use: one runner per engine, driven from one goroutine
// (Engine.Iterate).
type CostRunner struct {
	cfg        *model.Config
	clk        *clock.Fake
	placements []parallel.Placement
	costs      []*LayoutCost // by placement, bound once
	steps      int           // steps run
	byPlace    []int         // steps run, by placement
	kv         kvcache.Layout
	shape      StepShape
	ids        []int     // StepGreedy's result, reused
	logits     []float32 // Step's result, reused
	last       StepRecord
	host       hostTier // host KV tier and transitions (EnableHostTier)
	overlap    bool     // steps overlap in the pipeline (OverlapSteps)
	lastPlace  int      // index of the placement the latest step ran under
	stats      []PlacementStats
	drafts     bool     // speculative decoding is on (Accept)
	accept     float64  // the chance StepGreedy keeps a draft
	rng        rand.PCG // draws the drafts' fates
}

// Accept makes StepGreedy keep each draft of a decode step with
// probability p (given the ones before it were kept), with draws from a
// stream seeded by seed: the workload's acceptance rate, which a cost
// model has no tokens to decide.
func (r *CostRunner) Accept(p float64, seed uint64) {
	r.drafts, r.accept = true, p
	r.rng.Seed(seed, 0x5eed)
}

// StepRecord is one step a CostRunner ran.
type StepRecord struct {
	Plan       string    // the placement's name
	Start, End time.Time // on the runner's clock
	Tokens     int       // batched tokens
	Cost       Step      // the cost model's prediction; End − Start is Cost.Seconds on the clock's nanosecond grid
}

// NewCostRunner binds cm to cfg under each placement (the first the one
// the KV cache starts under, as engine.Runner requires) with a KV pool of
// numBlocks blocks of blockSize tokens per data-parallel replica; every
// step advances clk by its predicted duration.
func NewCostRunner(cm *CostModel, cfg *model.Config, placements []parallel.Placement, blockSize, numBlocks int, clk *clock.Fake) (*CostRunner, error) {
	if len(placements) == 0 {
		return nil, fmt.Errorf("sim: a cost runner needs a placement")
	}
	if clk == nil {
		return nil, fmt.Errorf("sim: a cost runner needs a virtual clock")
	}
	if blockSize < 1 || numBlocks < 1 {
		return nil, fmt.Errorf("sim: KV pool of %d blocks of %d tokens", numBlocks, blockSize)
	}
	r := &CostRunner{cfg: cfg, clk: clk, placements: placements, costs: make([]*LayoutCost, len(placements)), byPlace: make([]int, len(placements)), stats: make([]PlacementStats, len(placements))}
	for i, p := range placements {
		lc, err := cm.Layout(cfg, p)
		if err != nil {
			return nil, err
		}
		r.costs[i] = lc
	}
	kv := placements[0].KVSlice(cfg, 0)
	r.kv = kvcache.Layout{Layers: kv.Layers.Len(), KVHeads: kv.Heads.Len(), HeadDim: cfg.HeadDim, BlockSize: blockSize, NumBlocks: numBlocks}
	return r, nil
}

// Config is the model's configuration.
func (r *CostRunner) Config() *model.Config { return r.cfg }

// Placements are the placements the runner prices, as given.
func (r *CostRunner) Placements() []parallel.Placement { return r.placements }

// KVLayout is rank 0's KV slice in blocks of the pool's geometry: the
// scheduler takes BlockSize and NumBlocks from it.
func (r *CostRunner) KVLayout() kvcache.Layout { return r.kv }

// PlanSteps counts the steps run under each placement, by name.
func (r *CostRunner) PlanSteps() map[string]int {
	out := make(map[string]int, len(r.placements))
	for i, p := range r.placements {
		out[p.Name] = r.byPlace[i]
	}
	return out
}

// OverlapSteps makes the pipeline stages of every placement carry work
// from one step into the next, as vLLM's pipeline-parallel virtual engines
// do (LayoutCost.SetOverlap). A step under another placement than the
// step before starts with an empty pipeline.
func (r *CostRunner) OverlapSteps(on bool) {
	r.overlap = on
	for _, lc := range r.costs {
		lc.SetOverlap(on)
	}
}

// Last is the latest step the runner ran (zero before the first).
func (r *CostRunner) Last() StepRecord { return r.last }

// Step prices b under p, advances the clock, and returns zero logits, one
// row per logits row of b, valid until the next call.
func (r *CostRunner) Step(_ context.Context, b *forward.Batch, p parallel.Placement) ([]float32, error) {
	if err := r.run(b, p); err != nil {
		return nil, err
	}
	n := b.NumLogits() * r.cfg.Vocab
	if cap(r.logits) < n {
		r.logits = make([]float32, n)
	}
	r.logits = r.logits[:n]
	clear(r.logits) // the sampler may have written the previous step's
	return r.logits, nil
}

// StepGreedy prices b under p, advances the clock, and returns one token
// id per logits row: 1 + i mod 7 for the batch's i-th sequence (within
// the vocabulary), valid until the next call. With Accept, a row before
// the last of a sequence returns the batch's next token (the draft it
// verifies) with the acceptance probability, and another one otherwise.
func (r *CostRunner) StepGreedy(_ context.Context, b *forward.Batch, p parallel.Placement) ([]int, error) {
	if err := r.run(b, p); err != nil {
		return nil, err
	}
	r.ids = r.ids[:0]
	for i, s := range b.Seqs {
		own := (1 + i%7) % r.cfg.Vocab
		for row := range s.NumLogits {
			tok := own
			if r.drafts && row < s.NumLogits-1 {
				draft := s.Tokens[len(s.Tokens)-s.NumLogits+row+1]
				if float64(r.rng.Uint64()>>11)/(1<<53) < r.accept {
					tok = draft
				} else if tok == draft {
					tok = (tok + 1) % r.cfg.Vocab
				}
			}
			r.ids = append(r.ids, tok)
		}
	}
	return r.ids, nil
}

// run prices one step and advances the clock by it.
func (r *CostRunner) run(b *forward.Batch, p parallel.Placement) error {
	i := r.index(p)
	if i < 0 {
		return fmt.Errorf("sim: the engine chose placement %s, which the cost runner does not hold", p)
	}
	ready := r.blocksReady(b)
	r.shape.Seqs = r.shape.Seqs[:0]
	tokens := 0
	decodeOnly := true
	for j := range b.Seqs {
		s := &b.Seqs[j]
		r.shape.Seqs = append(r.shape.Seqs, Seq{Context: s.Pos, New: len(s.Tokens), Logits: s.NumLogits, Replica: s.Replica})
		tokens += len(s.Tokens)
		decodeOnly = decodeOnly && len(s.Tokens) == 1 && s.Pos > 0
	}
	start := r.clk.Now()
	if r.overlap && r.steps > 0 {
		if i != r.lastPlace {
			r.costs[r.lastPlace].Drain()
		}
		r.costs[i].Idle(start.Sub(r.last.End).Seconds())
	}
	cost := r.costs[i].Step(&r.shape)
	end := start.Add(duration(cost.Seconds))
	r.note(i, len(b.Seqs), tokens, cost.Seconds, decodeOnly)
	if wait := ready.Sub(end); wait > 0 { // a copy the step's compute does not hide
		r.host.stats.WaitSeconds += wait.Seconds()
		r.costs[i].Idle(wait.Seconds())
		end = ready
		cost.Seconds += wait.Seconds()
	}
	r.clk.Set(end)
	r.steps++
	r.byPlace[i]++
	r.lastPlace = i
	r.last = StepRecord{Plan: p.Name, Start: start, End: end, Tokens: tokens, Cost: cost}
	return nil
}

// duration is a predicted time in seconds on the clock's nanosecond grid
// (rounded to the nearest nanosecond).
func duration(seconds float64) time.Duration {
	return time.Duration(math.Round(seconds * float64(time.Second)))
}

var _ engine.GreedyRunner = (*CostRunner)(nil)
