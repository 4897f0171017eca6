package cudaexec

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/parallel"
)

// HostBlocks implements engine.Swapper: the host KV store's size in
// blocks (Options.HostBlocks).
func (e *Executor) HostBlocks() int { return e.opts.HostBlocks }

// SwapOut implements engine.Swapper: it copies the swaps' device blocks
// into the host store, every rank pushing its KV slice under the
// placement the cache is under (a pipeline stage's layers with all their
// KV heads, a TP rank's KV heads of every layer); together the slices
// tile the model's KV once — of ranks holding the same slice (KV heads
// replicated across TP ranks) only the lowest pushes. It returns the
// bytes copied. On error the host blocks are undefined.
func (e *Executor) SwapOut(ctx context.Context, swaps []forward.Swap) (int64, error) {
	return e.swap(ctx, swaps, true)
}

// SwapIn implements engine.Swapper: it copies the swaps' host blocks into
// the device cache, every rank pulling its slice under the current
// placement, which may differ from the one that pushed (Seesaw's KV
// re-shard). It returns the bytes copied. It may be called beside Step
// (the engine's prefetcher): both run on the device thread, one after
// the other; not beside Transition.
func (e *Executor) SwapIn(ctx context.Context, swaps []forward.Swap) (int64, error) {
	return e.swap(ctx, swaps, false)
}

// SwapBytes is the bytes SwapOut and SwapIn have copied so far.
func (e *Executor) SwapBytes() int64 { return e.swapped.Load() }

func (e *Executor) swap(ctx context.Context, swaps []forward.Swap, out bool) (int64, error) {
	if e.hostKV == nil {
		return 0, fmt.Errorf("cudaexec: no host KV store (Options.HostBlocks is 0)")
	}
	if err := e.usable(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	for _, s := range swaps {
		if s.Replica != 0 {
			return 0, fmt.Errorf("cudaexec: swap of replica %d; the executor runs one", s.Replica)
		}
		if len(s.Device) != len(s.Host) {
			return 0, fmt.Errorf("cudaexec: swap of %d device blocks to %d host blocks", len(s.Device), len(s.Host))
		}
		for i := range s.Device {
			if s.Device[i] < 0 || s.Device[i] >= e.kv.NumBlocks || s.Host[i] < 0 || s.Host[i] >= e.hostKV.NumBlocks {
				return 0, fmt.Errorf("cudaexec: block pair %d → %d outside %d device and %d host blocks", s.Device[i], s.Host[i], e.kv.NumBlocks, e.hostKV.NumBlocks)
			}
		}
	}
	var n int64
	err := e.do(func() error {
		var err error
		n, err = e.swapRuns(swaps, out)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("cudaexec: swap under %s: %w", e.base, err)
	}
	e.swapped.Add(n)
	return n, nil
}

// swapRuns runs on the device thread: for every rank, block pair, layer
// of the rank's slice, keys and values, one copy of the slice's heads —
// contiguous on the device ([blocks, kv heads, ...] per layer) and in the
// host store (HND per layer) — then waits for the stream.
func (e *Executor) swapRuns(swaps []forward.Swap, out bool) (int64, error) {
	hb := e.headBytes()
	var total int64
	for r, rk := range e.ranks {
		s := e.base.KVSlice(e.cfg, r)
		if out && e.replicatedBelow(r) {
			continue
		}
		run := int64(s.Heads.Len()) * hb
		for _, sw := range swaps {
			for i, db := range sw.Device {
				for li := 0; li < s.Layers.Len(); li++ {
					l := s.Layers.Lo + li
					for _, kv := range []struct {
						dev  cuda.DevicePtr
						keys bool
					}{{rk.kLayers[li], true}, {rk.vLayers[li], false}} {
						dev := kv.dev + cuda.DevicePtr(int64(db)*run)
						host := e.hostRun(kv.keys, sw.Host[i], l, s.Heads)
						var err error
						if out {
							err = e.ops.toHost(host, dev, run)
						} else {
							err = e.ops.toDevice(dev, host, run)
						}
						if err != nil {
							return 0, err
						}
						total += run
					}
				}
			}
		}
	}
	return total, e.ops.sync()
}

// hostRun is the start of the keys (or values) of heads of layer layer of
// host block block: the heads are adjacent in the store (HND within a
// layer), so the run is heads.Len() heads long from there.
func (e *Executor) hostRun(keys bool, block, layer int, heads parallel.Span) unsafe.Pointer {
	h := e.hostKV
	switch {
	case h.Half() && keys:
		return unsafe.Pointer(unsafe.SliceData(h.HalfKeys(block, layer, heads.Lo)))
	case h.Half():
		return unsafe.Pointer(unsafe.SliceData(h.HalfValues(block, layer, heads.Lo)))
	case keys:
		return unsafe.Pointer(unsafe.SliceData(h.Keys(block, layer, heads.Lo)))
	}
	return unsafe.Pointer(unsafe.SliceData(h.Values(block, layer, heads.Lo)))
}

// replicatedBelow reports whether a lower rank holds exactly rank r's KV
// slice under the current placement.
func (e *Executor) replicatedBelow(r int) bool {
	mine := e.base.KVSlice(e.cfg, r)
	for o := 0; o < r; o++ {
		if e.base.KVSlice(e.cfg, o) == mine {
			return true
		}
	}
	return false
}
