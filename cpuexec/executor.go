package cpuexec

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/lora"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// Executor runs steps of a Llama-family model on CPU ranks: one goroutine
// per rank, each holding only its weight shard and KV shard and talking to
// the others only through comm. It holds the weight shards of one or more
// placements by name; each step runs under one of them, and placements
// that share their KV slices read the same KV cache. Transition moves the
// KV cache (and, for a placement whose shards it does not hold, the
// weights) to another placement. It is not safe for concurrent use.
type Executor struct {
	cfg     *model.Config
	w       *model.Weights // the host copy every shard is cut from
	kvAt    parallel.Placement
	held    map[string]*execPlacement
	order   []string // names of held placements, in Options order
	ranks   []*rank
	pool    *tensor.Pool
	world   *comm.World
	micro   int       // Options.MicroBatches; 0: each step's placement's PP
	invFreq []float64 // RoPE inverse frequencies
	clock   clock.Clock

	// LoRA adapters by id − 1 (nil: freed), and the largest rank ever
	// installed; steps hold adMu for reading, SetAdapter for writing.
	adMu     sync.RWMutex
	adapters []*lora.Adapter
	maxRank  int
	kv       kvcache.Layout // of rank 0; every rank has the same block count
	out      []float32      // [NumLogits, vocab] of the last step
	hid      []float32      // [NumLogits, hidden] of the last step, when its batch asked (Batch.Hidden)
	steps    map[string]int
	stepsMu  sync.Mutex // guards steps: PlanSteps may run beside Step (an engine's Stats, /metrics)
	comm     comm.Stats // counted by worlds that were replaced
	// newWorld makes the ranks' World (Options.World); remote: some ranks
	// are hosted by other processes
	newWorld func(ranks int) (*comm.World, error)
	remote   bool

	transitions int
	moved       parallel.TransitionStats // over all transitions
	fromHost    bool                     // Options.WeightsFromHost
	host        *kvcache.HostStore       // nil without Options.HostBlocks
	hostBlocks  int                      // per replica
	swapped     atomic.Int64             // bytes SwapOut and SwapIn copied

	// fault, when set by tests, runs before every layer of every rank; an
	// error it returns fails that rank as a kernel error would.
	fault func(ctx context.Context, rank, layer int) error

	slots    int      // Options.SiDPSlots
	sidpStep sidpStep // the step's FFN mode and per-replica rows
	// slotHook and fetchDelay, when set by tests, see every WaS slot
	// event and run inside every fetch's copy.
	slotHook   func(rank int, ev slotEvent, slot, layer int)
	fetchDelay func(rank, layer int)
}

type execPlacement struct {
	placement parallel.Placement
	shards    []*parallel.Shard // by global rank
	built     bool              // by a transition (released when it is left), not Options
}

// Options configure an executor.
type Options struct {
	// Placements are the placements whose weight shards the executor
	// holds; the KV cache starts under the first, and the others must
	// share its KV slices or be reached by Transition. Empty means one
	// rank. Names must be unique.
	Placements []parallel.Placement
	// Plan, when Placements is empty, is shorthand for its standard
	// placement; the zero value is one rank.
	Plan      parallel.Plan
	BlockSize int // KV block size in tokens; default 16
	NumBlocks int // KV blocks per replica; default one full context
	// KVDType is the element format of the KV cache (and of the host KV
	// store): tensor.F32, the zero value, or tensor.BF16 or tensor.F16,
	// which halve the cache's bytes; keys and values are rounded to
	// nearest on write and attention widens them and accumulates in
	// float32.
	KVDType      tensor.DType
	MicroBatches int          // pipeline micro-batches per step; default the step's placement's PP
	Pool         *tensor.Pool // kernel threads shared by all ranks; nil runs inline
	Clock        clock.Clock  // times collectives for CommTime; default the wall clock
	// HostBlocks is the size of a host KV store (Seesaw's CPU tier) in
	// blocks per replica, shared by the ranks; 0 means none.
	HostBlocks int
	// WeightsFromHost holds only the first placement's shards; a
	// transition copies every weight piece of the new placement from the
	// host copy of the weights (not from peers) and releases the old
	// shards (Seesaw re-shards from host memory).
	WeightsFromHost bool
	// SiDPSlots is the number of layers each rank's WaS cache holds under
	// a pooled placement (parallel.FFNWaS); 0 means DefaultSlots(DP),
	// and fewer than DP−1 is refused.
	SiDPSlots int
	// World, when set, makes the World the ranks talk through (a new one
	// after a failure); nil means comm.NewWorld, every rank in this
	// process. With a World whose ranks live in several processes (the
	// MPI transport), a step runs only the ranks hosted here; see
	// procs.go.
	World func(ranks int) (*comm.World, error)
	// Adapters are the LoRA adapters a sequence may name
	// (forward.SeqBatch.Adapter i is Adapters[i−1]); see setAdapters for
	// the placements that run them.
	Adapters []*lora.Adapter
}

// NewExecutor shards w over the placements' ranks and allocates their KV
// caches.
func NewExecutor(cfg *model.Config, w *model.Weights, opts Options) (*Executor, error) {
	if len(opts.Placements) == 0 {
		if opts.Plan == (parallel.Plan{}) {
			opts.Plan = parallel.Single
		}
		opts.Placements = []parallel.Placement{parallel.Standard(opts.Plan)}
	}
	first := opts.Placements[0]
	if opts.BlockSize == 0 {
		opts.BlockSize = 16
	}
	if opts.NumBlocks == 0 {
		opts.NumBlocks = (cfg.MaxPositions + opts.BlockSize - 1) / opts.BlockSize
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	e := &Executor{
		cfg: cfg, w: w, held: map[string]*execPlacement{},
		pool: opts.Pool, micro: max(opts.MicroBatches, 0), invFreq: cfg.InvFreq(), clock: opts.Clock, steps: map[string]int{}, comm: comm.Stats{},
		slots: opts.SiDPSlots,
	}
	if opts.SiDPSlots < 0 {
		return nil, fmt.Errorf("cpuexec: %d SiDP slots", opts.SiDPSlots)
	}
	if err := e.setWorld(opts); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for i, p := range opts.Placements {
		if err := e.check(p); err != nil {
			return nil, err
		}
		if names[p.Name] {
			return nil, fmt.Errorf("cpuexec: two placements are named %q", p.Name)
		}
		names[p.Name] = true
		if i == 0 || !opts.WeightsFromHost {
			e.hold(p)
		}
	}
	if opts.WeightsFromHost {
		e.held[first.Name].built = true // re-sharded from the host when left and when reached again
	}
	if err := e.setAdapters(opts.Adapters); err != nil {
		return nil, err
	}
	for r := range first.Coords {
		e.ranks = append(e.ranks, &rank{id: r, e: e})
	}
	kv := kvcache.Layout{BlockSize: opts.BlockSize, NumBlocks: opts.NumBlocks, DType: opts.KVDType}
	if err := e.allocKV(first, kv); err != nil {
		return nil, err
	}
	e.fromHost = opts.WeightsFromHost
	if opts.HostBlocks > 0 {
		h, err := kvcache.NewHostStore(kvcache.Layout{Layers: cfg.Layers, KVHeads: cfg.KVHeads, HeadDim: cfg.HeadDim,
			BlockSize: opts.BlockSize, NumBlocks: opts.HostBlocks * first.Plan.DP, DType: opts.KVDType})
		if err != nil {
			return nil, fmt.Errorf("cpuexec: host KV store: %w", err)
		}
		e.host, e.hostBlocks = h, opts.HostBlocks
	}
	return e, nil
}

// check validates a placement against the model and the executor's ranks.
func (e *Executor) check(p parallel.Placement) error {
	if err := p.Plan.Validate(e.cfg); err != nil {
		return fmt.Errorf("cpuexec: placement %s: %w", p, err)
	}
	if len(p.Coords) != p.Plan.Ranks() {
		return fmt.Errorf("cpuexec: placement %s has %d ranks, its plan %s %d", p, len(p.Coords), p.Plan, p.Plan.Ranks())
	}
	if e.ranks != nil && len(p.Coords) != len(e.ranks) {
		return fmt.Errorf("cpuexec: placement %s has %d ranks, the executor %d", p, len(p.Coords), len(e.ranks))
	}
	for _, h := range e.held { // every held placement has the same ranks and replicas: check one
		if h.placement.Plan.DP != p.Plan.DP || len(h.placement.Coords) != len(p.Coords) {
			return fmt.Errorf("cpuexec: placement %s (%d ranks, dp=%d) does not fit beside %s (%d ranks, dp=%d)",
				p, len(p.Coords), p.Plan.DP, h.placement, len(h.placement.Coords), h.placement.Plan.DP)
		}
		break
	}
	return nil
}

// hold cuts p's shards from the host weights (views where the split is by
// rows) and keeps them under p's name.
func (e *Executor) hold(p parallel.Placement) {
	ep := &execPlacement{placement: p}
	for r := range p.Coords {
		ep.shards = append(ep.shards, parallel.NewShard(e.pool, e.cfg, e.w, p, r))
	}
	e.held[p.Name] = ep
	e.order = append(e.order, p.Name)
}

// allocKV gives every rank an empty KV cache for its slice under p.
func (e *Executor) allocKV(p parallel.Placement, geom kvcache.Layout) error {
	for r, rk := range e.ranks {
		s := p.KVSlice(e.cfg, r)
		kv := geom
		kv.Layers, kv.KVHeads, kv.HeadDim = s.Layers.Len(), s.Heads.Len(), e.cfg.HeadDim
		cache, err := kvcache.New(kv)
		if err != nil {
			return fmt.Errorf("cpuexec: %w", err)
		}
		if r == 0 {
			e.kv = kv
		}
		rk.cache = cache
	}
	e.kvAt = p
	return nil
}

// Placements lists the placements whose weight shards the executor
// holds, the one the KV cache is under first.
func (e *Executor) Placements() []parallel.Placement {
	out := []parallel.Placement{e.kvAt}
	for _, name := range e.order {
		if name != e.kvAt.Name {
			out = append(out, e.held[name].placement)
		}
	}
	return out
}

// KVPlacement is the placement the KV cache is laid out under now.
func (e *Executor) KVPlacement() parallel.Placement { return e.kvAt }

// KVLayout is the KV cache layout of each replica's block pool: block ids
// run over [0, NumBlocks) in every replica. Its DType is Options.KVDType.
func (e *Executor) KVLayout() kvcache.Layout { return e.kv }

// Config is the model's config.
func (e *Executor) Config() *model.Config { return e.cfg }

// WeightBytes is the weight memory held by each rank, over all the
// placements it holds: matrices in their formats, views of the host
// weights (row splits) counted at their size.
func (e *Executor) WeightBytes() []int64 {
	out := make([]int64, len(e.ranks))
	for _, ep := range e.held {
		for r, sh := range ep.shards {
			out[r] += sh.Bytes()
		}
	}
	return out
}

// PlacementWeightBytes is the weight memory each rank holds for the named
// placement, nil when the executor does not hold it.
func (e *Executor) PlacementWeightBytes(name string) []int64 {
	ep, ok := e.held[name]
	if !ok {
		return nil
	}
	out := make([]int64, len(ep.shards))
	for r, sh := range ep.shards {
		out[r] = sh.Bytes()
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

// PlanSteps returns how many steps ran under each placement, by name.
func (e *Executor) PlanSteps() map[string]int {
	e.stepsMu.Lock()
	defer e.stepsMu.Unlock()
	return maps.Clone(e.steps)
}

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

// Step runs one batch under placement p, one the executor holds that
// shares the KV cache's placement, and returns the requested logits,
// [NumLogits, vocab] in batch order, valid until the next call. On error
// the KV written for this step's tokens is undefined; the caller drops or
// recomputes those sequences.
func (e *Executor) Step(ctx context.Context, b *forward.Batch, p parallel.Placement) ([]float32, error) {
	ep, err := e.placement(p)
	if err != nil {
		return nil, err
	}
	c := e.cfg
	if err := b.Validate(c.Vocab, c.MaxPositions, e.kv.BlockSize, e.kv.NumBlocks, e.kvAt.Plan.DP); err != nil {
		return nil, err
	}
	e.adMu.RLock()
	defer e.adMu.RUnlock()
	if err := e.checkAdapters(b); err != nil {
		return nil, err
	}
	m := e.micro
	if m == 0 {
		m = ep.placement.Plan.PP // Seesaw's decode under PP = k: k micro-batches, whatever the prefill placement
	}
	jobs := e.split(b, m)
	if err := e.prepareSiDP(p, jobs); err != nil {
		return nil, err
	}
	if n := b.NumLogits() * c.Vocab; cap(e.out) < n {
		e.out = make([]float32, n)
	}
	e.out = e.out[:b.NumLogits()*c.Vocab]
	e.hid = e.hid[:0]
	if b.Hidden {
		if e.remote {
			return nil, errRemote("a step returning hidden states")
		}
		e.hid = slices.Grow(e.hid, b.NumLogits()*c.Hidden)[:b.NumLogits()*c.Hidden]
	}
	for _, rk := range e.ranks {
		rk.st.outRows = rk.st.outRows[:0]
	}
	err = e.onRanks(ctx, func(ctx context.Context, rk *rank) error {
		job := jobs[ep.placement.Coords[rk.id].DP]
		if len(job) == 0 {
			if p.FFN == parallel.FFNCaS {
				return rk.serveCaS(ctx, ep) // a dummy owner still serves
			}
			return nil
		}
		return rk.step(ctx, ep, job)
	})
	if err != nil {
		return nil, fmt.Errorf("cpuexec: step under %s: %w", p, err)
	}
	e.stepsMu.Lock()
	e.steps[p.Name]++
	e.stepsMu.Unlock()
	return e.out, nil
}

// GivesHidden reports whether steps can return hidden states: not when
// some ranks live in other processes (their rows are not gathered).
func (e *Executor) GivesHidden() bool { return !e.remote }

// Hidden is the final-norm hidden state of each logits row of the last
// step, [NumLogits, hidden], when its batch set Hidden; nil otherwise.
// It is valid until the next Step.
func (e *Executor) Hidden() []float32 {
	if len(e.hid) == 0 {
		return nil
	}
	return e.hid
}

// eachRank runs f on every rank at once, each in its own goroutine, and
// returns their errors by rank.
func (e *Executor) eachRank(f func(*rank) error) []error {
	errs := make([]error, len(e.ranks))
	if len(e.ranks) == 1 {
		// One rank runs on the caller: a goroutine per step would park the
		// caller and wake another OS thread for every step.
		errs[0] = f(e.ranks[0])
		return errs
	}
	var wg sync.WaitGroup
	for r, rk := range e.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(rk)
		}()
	}
	wg.Wait()
	return errs
}

// placement returns the held placement named as p, which must share the
// KV cache's slices. A placement laid out exactly as the KV cache's under
// another name (Seesaw with equal prefill and decode plans, whose decode
// placement WeightsFromHost does not hold and no transition reaches)
// runs on the KV cache's placement's shards.
func (e *Executor) placement(p parallel.Placement) (*execPlacement, error) {
	ep, ok := e.held[p.Name]
	if cur, held := e.held[e.kvAt.Name]; !ok && held && samePlacement(p, e.kvAt) {
		return cur, nil
	}
	if !ok {
		return nil, fmt.Errorf("cpuexec: placement %s is not held (this executor holds %v)", p, e.order)
	}
	if ep.placement.Name != e.kvAt.Name && !ep.placement.SharesKV(e.cfg, e.kvAt) {
		return nil, fmt.Errorf("cpuexec: placement %s does not share the KV cache's placement %s; transition to it first", p, e.kvAt)
	}
	return ep, nil
}

// onRanks runs f on every rank at once, each in its own goroutine over the
// executor's world (a fresh one after a failure), and returns the first
// failure: one rank's error aborts the world, which wakes every peer
// blocked in a collective.
func (e *Executor) onRanks(ctx context.Context, f func(context.Context, *rank) error) error {
	if e.world == nil || e.world.Err() != nil {
		if e.world != nil {
			for k, v := range e.world.Stats() {
				e.comm[k] = e.comm[k].Add(v)
			}
		}
		w, err := e.newWorld(len(e.ranks))
		if err != nil {
			return err
		}
		e.world = w
	}
	errs := e.eachRank(func(rk *rank) error {
		if e.world.Comm(rk.id) == nil {
			return nil // hosted by another process
		}
		err := f(ctx, rk)
		if err != nil {
			e.world.Abort(err)
		}
		return err
	})
	if err := e.world.Err(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return ctxErr
		}
		return err
	}
	return errors.Join(errs...)
}

// micro is one micro-batch of one replica: sequence pieces and the output
// row of each piece's first logits row.
type micro struct {
	seqs []forward.SeqBatch
	rows []int
}

// split groups the batch by replica and cuts each replica's tokens into up
// to parts contiguous micro-batches (a sequence may be cut; its later
// piece follows its earlier one through every stage, so causality holds).
func (e *Executor) split(b *forward.Batch, parts int) [][]micro {
	dp := e.kvAt.Plan.DP
	seqs := make([][]forward.SeqBatch, dp)
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
		m := min(parts, total)
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
				piece := forward.SeqBatch{Tokens: s.Tokens[a:bEnd], Pos: s.Pos + a, Blocks: s.Blocks, Replica: d, Adapter: s.Adapter}
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
