package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// Executor runs steps of a Llama-family model on CPU ranks: one goroutine
// per rank, each holding only its weight shard and KV shard and talking to
// the others only through comm. It holds the layouts of its base plan and,
// optionally, the base plan's shift plan; each step may run under either,
// and both read the same KV cache. It is not safe for concurrent use.
type Executor struct {
	cfg     *model.Config
	base    parallel.Layout
	layouts map[parallel.Plan]*execLayout
	ranks   []*rank
	pool    *tensor.Pool
	world   *comm.World
	micro   int
	invFreq []float64 // RoPE inverse frequencies
	clock   clock.Clock
	kv      kvcache.Layout // of rank 0; every rank has the same block count
	out     []float32      // [NumLogits, vocab] of the last step
	steps   map[string]int
	comm    comm.Stats // counted by worlds that were replaced

	// fault, when set by tests, runs before every layer of every rank; an
	// error it returns fails that rank as a kernel error would.
	fault func(ctx context.Context, rank, layer int) error
}

type execLayout struct {
	layout parallel.Layout
	shards []*parallel.Shard // by global rank
}

// ExecutorOptions configure an executor.
type ExecutorOptions struct {
	Plan         parallel.Plan // base plan; the zero value means one rank
	Shift        bool          // also hold the shift plan (full TP over SP·TP ranks)
	BlockSize    int           // KV block size in tokens; default 16
	NumBlocks    int           // KV blocks per replica; default one full context
	MicroBatches int           // pipeline micro-batches per step; default PP
	Pool         *tensor.Pool  // kernel threads shared by all ranks; nil runs inline
	Clock        clock.Clock   // times collectives for CommTime; default the wall clock
}

// NewExecutor shards w over the plan's ranks and allocates their KV caches.
func NewExecutor(cfg *model.Config, w *model.Weights, opts ExecutorOptions) (*Executor, error) {
	plan := opts.Plan
	if plan == (parallel.Plan{}) {
		plan = parallel.Single
	}
	if err := plan.Validate(cfg); err != nil {
		return nil, err
	}
	if opts.BlockSize == 0 {
		opts.BlockSize = 16
	}
	if opts.NumBlocks == 0 {
		opts.NumBlocks = (cfg.MaxPositions + opts.BlockSize - 1) / opts.BlockSize
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.MicroBatches <= 0 {
		opts.MicroBatches = plan.PP
	}
	e := &Executor{
		cfg: cfg, base: parallel.Standard(plan), layouts: map[parallel.Plan]*execLayout{},
		pool: opts.Pool, micro: opts.MicroBatches, invFreq: cfg.InvFreq(), clock: opts.Clock, steps: map[string]int{}, comm: comm.Stats{},
	}
	layouts := []parallel.Layout{e.base}
	if opts.Shift {
		shift := plan.Shift()
		if err := shift.Validate(cfg); err != nil {
			return nil, fmt.Errorf("shift plan of %s: %w", plan, err)
		}
		sl := parallel.ShiftLayout(plan)
		if !sl.KVCompatible(e.base) {
			return nil, fmt.Errorf("engine: shift layout %s does not keep the KV layout of %s", sl, e.base)
		}
		if shift != plan {
			layouts = append(layouts, sl)
		}
	}
	for _, l := range layouts {
		el := &execLayout{layout: l}
		for r := range l.Coords {
			el.shards = append(el.shards, parallel.NewShard(cfg, w, l, r))
		}
		e.layouts[l.Plan] = el
	}
	for r := 0; r < plan.Ranks(); r++ {
		sh := e.layouts[plan].shards[r]
		kv := kvcache.Layout{
			Layers: sh.Stage.Len(), KVHeads: sh.Chunk.KVHi - sh.Chunk.KVLo, HeadDim: cfg.HeadDim,
			BlockSize: opts.BlockSize, NumBlocks: opts.NumBlocks,
		}
		cache, err := kvcache.New(kv)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		if r == 0 {
			e.kv = kv
		}
		e.ranks = append(e.ranks, &rank{id: r, e: e, cache: cache})
	}
	return e, nil
}

// Plan is the executor's base plan.
func (e *Executor) Plan() parallel.Plan { return e.base.Plan }

// Plans lists the plans a step may run under: the base, then its shift.
func (e *Executor) Plans() []parallel.Plan {
	out := []parallel.Plan{e.base.Plan}
	for p := range e.layouts {
		if p != e.base.Plan {
			out = append(out, p)
		}
	}
	return out
}

// KVLayout is the KV cache layout of each replica's block pool: block ids
// run over [0, NumBlocks) in every replica.
func (e *Executor) KVLayout() kvcache.Layout { return e.kv }

// Config is the model's config.
func (e *Executor) Config() *model.Config { return e.cfg }

// WeightBytes is the weight memory held by each rank, over all the layouts
// it holds.
func (e *Executor) WeightBytes() []int64 {
	out := make([]int64, len(e.ranks))
	for _, el := range e.layouts {
		for r, sh := range el.shards {
			out[r] += 4 * sh.Elems()
		}
	}
	return out
}

// LayoutWeightBytes is the weight memory each rank holds for one plan.
func (e *Executor) LayoutWeightBytes(p parallel.Plan) []int64 {
	el, ok := e.layouts[p]
	if !ok {
		return nil
	}
	out := make([]int64, len(el.shards))
	for r, sh := range el.shards {
		out[r] = 4 * sh.Elems()
	}
	return out
}

// KVBytes is the KV cache memory held by each rank.
func (e *Executor) KVBytes() []int64 {
	out := make([]int64, len(e.ranks))
	for r, rk := range e.ranks {
		out[r] = rk.cache.Bytes()
	}
	return out
}

// PlanSteps returns how many steps ran under each plan, by plan string.
func (e *Executor) PlanSteps() map[string]int { return maps.Clone(e.steps) }

// CommStats returns the bytes every collective moved so far.
func (e *Executor) CommStats() comm.Stats {
	out := comm.Stats{}
	for k, v := range e.comm {
		out[k] = v
	}
	if e.world != nil {
		for k, v := range e.world.Stats() {
			out[k] = out[k].Add(v)
		}
	}
	return out
}

// CommTime is the time each rank has spent in collectives, including
// waiting for its peers.
func (e *Executor) CommTime() []time.Duration {
	out := make([]time.Duration, len(e.ranks))
	for r, rk := range e.ranks {
		out[r] = rk.commTime
	}
	return out
}

// Step runs one batch under plan (the base plan or its shift) and returns
// the requested logits, [NumLogits, vocab] in batch order, valid until the
// next call. On error the KV written for this step's tokens is undefined;
// the caller drops or recomputes those sequences.
func (e *Executor) Step(ctx context.Context, b *Batch, plan parallel.Plan) ([]float32, error) {
	el, ok := e.layouts[plan]
	if !ok {
		return nil, fmt.Errorf("engine: plan %s is not loaded (this executor holds %v)", plan, e.Plans())
	}
	c := e.cfg
	if err := b.Validate(c.Vocab, c.MaxPositions, e.kv.BlockSize, e.kv.NumBlocks, e.base.Plan.DP); err != nil {
		return nil, err
	}
	jobs := e.split(b)
	if n := b.NumLogits() * c.Vocab; cap(e.out) < n {
		e.out = make([]float32, n)
	}
	e.out = e.out[:b.NumLogits()*c.Vocab]
	if e.world == nil || e.world.Err() != nil {
		if e.world != nil {
			for k, v := range e.world.Stats() {
				e.comm[k] = e.comm[k].Add(v)
			}
		}
		w, err := comm.NewWorld(len(e.ranks))
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		e.world = w
	}
	errs := make([]error, len(e.ranks))
	var wg sync.WaitGroup
	for r, rk := range e.ranks {
		job := jobs[el.layout.Coords[r].DP]
		if len(job) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rk.step(ctx, el, job); err != nil {
				errs[r] = err
				e.world.Abort(err)
			}
		}()
	}
	wg.Wait()
	if err := e.world.Err(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return nil, ctxErr
		}
		return nil, fmt.Errorf("engine: step under %s: %w", plan, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	e.steps[plan.String()]++
	return e.out, nil
}

// micro is one micro-batch of one replica: sequence pieces and the output
// row of each piece's first logits row.
type micro struct {
	seqs []SeqBatch
	rows []int
}

// split groups the batch by replica and cuts each replica's tokens into up
// to e.micro contiguous micro-batches (a sequence may be cut; its later
// piece follows its earlier one through every stage, so causality holds).
func (e *Executor) split(b *Batch) [][]micro {
	dp := e.base.Plan.DP
	seqs := make([][]SeqBatch, dp)
	rows := make([][]int, dp)
	row := 0
	for _, s := range b.Seqs {
		seqs[s.Replica] = append(seqs[s.Replica], s)
		rows[s.Replica] = append(rows[s.Replica], row)
		row += s.NumLogits
	}
	jobs := make([][]micro, dp)
	for d := range jobs {
		total := 0
		for _, s := range seqs[d] {
			total += len(s.Tokens)
		}
		if total == 0 {
			continue
		}
		m := min(e.micro, total)
		jobs[d] = make([]micro, m)
		pos := 0 // flattened token index within the replica
		for i, s := range seqs[d] {
			n := len(s.Tokens)
			firstLogit := n - s.NumLogits
			for a := 0; a < n; {
				part := pos * m / total // micro-batch of this token
				end := (part + 1) * total / m
				if end*m < (part+1)*total {
					end++
				}
				end = min(end, total)
				bEnd := min(n, a+end-pos)
				piece := SeqBatch{Tokens: s.Tokens[a:bEnd], Pos: s.Pos + a, Blocks: s.Blocks, Replica: d}
				lo := max(a, firstLogit)
				if bEnd > lo {
					piece.NumLogits = bEnd - lo
				}
				jobs[d][part].seqs = append(jobs[d][part].seqs, piece)
				jobs[d][part].rows = append(jobs[d][part].rows, rows[d][i]+max(0, lo-firstLogit))
				pos += bEnd - a
				a = bEnd
			}
		}
	}
	return jobs
}

var _ Runner = (*Executor)(nil)
