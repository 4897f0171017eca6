package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/parallel"
)

// hostTier is a CostRunner's model of moving KV and weights between host
// and device memory (Seesaw): every rank has a copy engine, apart from its
// compute, that runs swaps one after another; a device block a swap
// writes (swap-in) or frees (swap-out) is usable only once the swap has
// landed, and a step that reads such a block ends no earlier. The copies
// overlap compute, the decodes of the sequences already on the device
// included: Seesaw's prefetcher moves a sequence's KV in the background
// while the others decode, and the sequence joins the batch once its copy
// lands (paper 004, §5.2). The engine hands the runner a swapped-in
// sequence in the very step that follows the swap, so the runner lets
// that step's compute overlap the copy and ends it at the later of the
// two: the same device time as the prefetcher's, the sequence's first
// token up to one step earlier. A step waits only for copies slower than
// its compute (the device filling at a decode phase's start, or very
// short outputs: the paper's "as long as the output length is not too
// short").
// Transitions re-shard every rank's weights from host memory and block
// the ranks (the Seesaw paper does not say they overlap anything).
type hostTier struct {
	blocks   int         // host KV blocks per replica
	copyFree []time.Time // by rank: when its copy engine is free
	ready    []time.Time // by device block: when its latest swap lands
	latest   time.Time   // when the latest swap of all lands
	moved    parallel.TransitionStats
	swapped  int64
	current  int             // index of the placement the KV cache is under
	copyBusy []time.Duration // by rank: time its copy engine spent moving KV
	stats    HostStats
}

// HostBlocks is the host KV tier's size in blocks (0: none).
func (r *CostRunner) HostBlocks() int { return r.host.blocks }

// InlineSwaps tells the engine to call SwapIn inline: the runner models
// the copies' overlap itself, in virtual time.
func (r *CostRunner) InlineSwaps() bool { return true }

// SwapOut prices parking the swaps' blocks on the host tier.
func (r *CostRunner) SwapOut(_ context.Context, swaps []forward.Swap) (int64, error) {
	n, err := r.swap(swaps)
	r.host.stats.SwapOutBytes += n
	return n, err
}

// SwapIn prices bringing the swaps' blocks back.
func (r *CostRunner) SwapIn(_ context.Context, swaps []forward.Swap) (int64, error) {
	n, err := r.swap(swaps)
	r.host.stats.SwapInBytes += n
	return n, err
}

// swap queues the swaps on every rank's copy engine (each moves its KV
// slice under the current placement) and marks their device blocks usable
// when the slowest rank's copy lands. It returns the bytes of the model's
// KV moved (each token once).
func (r *CostRunner) swap(swaps []forward.Swap) (int64, error) {
	if r.host.blocks == 0 {
		return 0, fmt.Errorf("sim: the cost runner has no host KV tier")
	}
	var blocks int64
	for _, s := range swaps {
		blocks += int64(len(s.Device))
	}
	if blocks == 0 {
		return 0, nil
	}
	tokens := blocks * int64(r.kv.BlockSize)
	p := r.placements[r.host.current]
	cost := r.costs[0].m
	now := r.clk.Now()
	landed := now
	for rank := range p.Coords {
		t, err := cost.KVSwap(r.cfg, p, rank, tokens)
		if err != nil {
			return 0, err
		}
		start := now
		if f := r.host.copyFree[rank]; f.After(start) {
			start = f
		}
		end := start.Add(duration(t))
		r.host.copyFree[rank] = end
		r.host.copyBusy[rank] += duration(t)
		if end.After(landed) {
			landed = end
		}
	}
	for _, s := range swaps {
		for _, b := range s.Device {
			if b < 0 || b >= len(r.host.ready) {
				return 0, fmt.Errorf("sim: swap of device block %d outside the pool's %d", b, len(r.host.ready))
			}
			r.host.ready[b] = landed
		}
	}
	if landed.After(r.host.latest) {
		r.host.latest = landed
	}
	n := tokens * int64(r.cfg.KVBytesPerToken(int(cost.kvBytes)))
	r.host.swapped += n
	return n, nil
}

// Transition re-shards every rank's weights to placement to from host
// memory, which blocks the ranks for the slowest rank's reload. The KV of
// requests resident on the device moves with it; its bytes are not
// priced (Seesaw parks prefilled KV on the host, so little is resident
// at a switch).
func (r *CostRunner) Transition(_ context.Context, to parallel.Placement) (parallel.TransitionStats, error) {
	i := r.index(to)
	if i < 0 {
		return parallel.TransitionStats{}, fmt.Errorf("sim: transition to placement %s, which the cost runner does not hold", to)
	}
	var st parallel.TransitionStats
	var slowest float64
	cost := r.costs[0].m
	for rank := range to.Coords {
		t, err := cost.WeightReload(r.cfg, to, rank)
		if err != nil {
			return st, err
		}
		slowest = max(slowest, t)
		st.WeightBytes += cost.weightBytes(r.cfg, to, rank)
		st.Moves++
	}
	r.clk.Advance(duration(slowest))
	r.host.stats.Transitions++
	r.host.stats.TransitionSeconds += slowest
	r.host.current = i
	r.host.moved.WeightBytes += st.WeightBytes
	r.host.moved.Moves += st.Moves
	return st, nil
}

// Moved is what every transition so far re-sharded, summed.
func (r *CostRunner) Moved() parallel.TransitionStats { return r.host.moved }

// SwapBytes is the KV bytes the swaps moved.
func (r *CostRunner) SwapBytes() int64 { return r.host.swapped }

// EnableHostTier gives the runner a host KV tier of blocks blocks per
// replica (Seesaw's CPU KV store), for the engine's swaps.
func (r *CostRunner) EnableHostTier(blocks int) {
	r.host.blocks = blocks
	r.host.copyFree = make([]time.Time, len(r.placements[0].Coords))
	r.host.copyBusy = make([]time.Duration, len(r.placements[0].Coords))
	r.host.ready = make([]time.Time, r.kv.NumBlocks)
}

// index is the position of placement p among the runner's, or -1.
func (r *CostRunner) index(p parallel.Placement) int {
	for i := range r.placements {
		if r.placements[i].Name == p.Name {
			return i
		}
	}
	return -1
}

// blocksReady is when every block b reads has landed (the zero time when
// none is in flight): the step that reads them cannot end before.
func (r *CostRunner) blocksReady(b *forward.Batch) time.Time {
	var ready time.Time
	if !r.host.latest.After(r.clk.Now()) {
		return ready // every copy has landed
	}
	for i := range b.Seqs {
		s := &b.Seqs[i]
		for _, blk := range s.Blocks[:r.kv.BlocksFor(s.Pos+len(s.Tokens))] {
			if t := r.host.ready[blk]; t.After(ready) {
				ready = t
			}
		}
	}
	return ready
}
