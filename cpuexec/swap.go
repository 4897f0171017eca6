package cpuexec

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/kvcache"
)

// HostBlocks is the size of the executor's host KV store in blocks per
// replica (Options.HostBlocks).
func (e *Executor) HostBlocks() int { return e.hostBlocks }

// SwapOut copies the swaps' device blocks into the host store: every rank
// pushes its KV slice under the placement the cache is under now (a
// pipeline stage's layers, a TP rank's heads), and together the slices
// tile the model's KV exactly once — of ranks holding the same slice (KV
// heads replicated across TP ranks), only the lowest pushes. It returns
// the bytes copied. The ranks push in parallel; on error the host blocks
// are undefined.
func (e *Executor) SwapOut(ctx context.Context, swaps []forward.Swap) (int64, error) {
	return e.swap(ctx, swaps, true)
}

// SwapIn copies the swaps' host blocks into the device KV cache: every
// rank pulls its slice under the current placement, which may differ
// from the placement that pushed (the re-shard of Seesaw's swap). It
// returns the bytes copied.
//
// SwapOut and SwapIn touch only the blocks the swaps name, the host store
// and a byte counter, so they may run concurrently with Step on other
// blocks (Seesaw's prefetcher overlaps swap-in with decode); not with a
// transition, which replaces the caches.
func (e *Executor) SwapIn(ctx context.Context, swaps []forward.Swap) (int64, error) {
	return e.swap(ctx, swaps, false)
}

// SwapBytes is the bytes SwapOut and SwapIn have copied so far.
func (e *Executor) SwapBytes() int64 { return e.swapped.Load() }

func (e *Executor) swap(ctx context.Context, swaps []forward.Swap, out bool) (int64, error) {
	h := e.host
	if h == nil {
		return 0, fmt.Errorf("cpuexec: no host KV store (Options.HostBlocks is 0)")
	}
	for _, s := range swaps {
		if s.Replica < 0 || s.Replica >= e.kvAt.Plan.DP {
			return 0, fmt.Errorf("cpuexec: swap of replica %d; the placement has %d", s.Replica, e.kvAt.Plan.DP)
		}
	}
	var total atomic.Int64
	errs := e.eachRank(func(rk *rank) error { return e.swapRank(ctx, rk, h, swaps, out, &total) })
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("cpuexec: swap under %s: %w", e.kvAt, err)
	}
	e.swapped.Add(total.Load())
	return total.Load(), nil
}

// swapRank is rank rk's part of a swap: its slice of every block pair of
// its replica.
func (e *Executor) swapRank(ctx context.Context, rk *rank, h *kvcache.HostStore, swaps []forward.Swap, out bool, total *atomic.Int64) error {
	ks := e.kvAt.KVSlice(e.cfg, rk.id)
	if out && e.replicatedBelow(rk.id) {
		return nil
	}
	slice := kvcache.Slice{LayerLo: ks.Layers.Lo, LayerHi: ks.Layers.Hi, HeadLo: ks.Heads.Lo, HeadHi: ks.Heads.Hi}
	for _, s := range swaps {
		if s.Replica != ks.Replica {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var n int64
		var err error
		if out {
			n, err = h.Push(rk.cache, slice, s.Device, s.Host)
		} else {
			n, err = h.Pull(rk.cache, slice, s.Device, s.Host)
		}
		if err != nil {
			return err
		}
		total.Add(n)
	}
	return nil
}

// replicatedBelow reports whether a lower rank holds exactly rank r's KV
// slice under the current placement.
func (e *Executor) replicatedBelow(r int) bool {
	mine := e.kvAt.KVSlice(e.cfg, r)
	for o := 0; o < r; o++ {
		if e.kvAt.KVSlice(e.cfg, o) == mine {
			return true
		}
	}
	return false
}
