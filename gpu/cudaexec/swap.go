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

// swapStageBytes is the most the swap staging buffers hold, on the
// device and on the host: one chunk of a rank's part of a swap.
const swapStageBytes = 64 << 20

// swapRuns runs on the device thread. Every rank (on the way out, but a
// replica of a lower rank's slice) moves its slice of the swaps' blocks
// in chunks that fit the staging buffers (swapChunk).
func (e *Executor) swapRuns(swaps []forward.Swap, out bool) (int64, error) {
	var dev, host []int
	for _, sw := range swaps {
		dev, host = append(dev, sw.Device...), append(host, sw.Host...)
	}
	if len(dev) == 0 {
		return 0, nil
	}
	if err := e.allocSwapStage(); err != nil {
		return 0, err
	}
	var total int64
	for r, rk := range e.ranks {
		if out && e.replicatedBelow(r) {
			continue
		}
		s := e.base.KVSlice(e.cfg, r)
		perBlock := 2 * int64(s.Layers.Len()) * int64(s.Heads.Len()) * e.headBytes()
		chunk := int(e.stageBytes / perBlock)
		if chunk == 0 {
			return 0, fmt.Errorf("rank %d's slice of one block, %d bytes, exceeds the %d-byte swap stage", r, perBlock, e.stageBytes)
		}
		for lo := 0; lo < len(dev); lo += chunk {
			hi := min(len(dev), lo+chunk)
			n, err := e.swapChunk(rk, s, dev[lo:hi], host[lo:hi], out)
			if err != nil {
				return 0, err
			}
			total += n
		}
	}
	return total, nil
}

// allocSwapStage allocates the staging buffers on first use: stageBytes
// on the device and on the host, and the device block ids of a chunk.
func (e *Executor) allocSwapStage() error {
	if e.stageDev != 0 {
		return nil
	}
	var err error
	if e.stageDev, err = e.alloc(e.stageBytes); err != nil {
		return fmt.Errorf("swap stage: %w", err)
	}
	n := e.stageBytes / (2 * e.headBytes()) // the most blocks a chunk holds
	if e.stageIdx, err = e.alloc(4 * n); err != nil {
		return fmt.Errorf("swap stage: %w", err)
	}
	if _, err := e.stageHost.get(e.ctx, int(e.stageBytes)); err != nil {
		return fmt.Errorf("swap stage: %w", err)
	}
	e.idx = make([]int32, n)
	return nil
}

// swapChunk moves rank rk's slice s of device blocks dev to or from host
// blocks host through the stages, laid out [K, V][local layer][block i]
// [the slice's heads of one block]. Out: one gather per local layer and K
// or V collects the blocks from the rank's cache into the device stage,
// one copy brings the stage to the host, and the host copies each run
// into the store. In: the host fills the stage from the store, one copy
// takes it to the device, and one device copy per run of consecutive
// device blocks puts each layer's keys or values in place. It returns the
// bytes moved between host and device.
func (e *Executor) swapChunk(rk *devRank, s parallel.KVSlice, dev, host []int, out bool) (int64, error) {
	m, layers := len(dev), s.Layers.Len()
	stage := e.stageHost.buf
	run := int64(s.Heads.Len()) * e.headBytes() // one block of one layer of the slice
	width := s.Heads.Len() * e.opts.BlockSize * e.cfg.HeadDim
	size := 2 * int64(layers) * int64(m) * run
	at := func(kv, li, i int) int64 { return (int64(kv*layers+li)*int64(m) + int64(i)) * run }
	cache := [2][]cuda.DevicePtr{rk.kLayers, rk.vLayers}
	stored := func(kv, li, i int) []byte {
		return unsafe.Slice((*byte)(e.hostRun(kv == 0, host[i], s.Layers.Lo+li, s.Heads)), run)
	}
	if out {
		for i, d := range dev {
			e.idx[i] = int32(d)
		}
		if err := e.ops.toDevice(e.stageIdx, unsafe.Pointer(&e.idx[0]), 4*int64(m)); err != nil {
			return 0, err
		}
		for kv := range 2 {
			for li := range layers {
				if err := e.k.GatherRows(e.s, e.stageDev+cuda.DevicePtr(at(kv, li, 0)), cache[kv][li], e.stageIdx, m, width); err != nil {
					return 0, err
				}
			}
		}
		if err := e.ops.toHost(unsafe.Pointer(&stage[0]), e.stageDev, size); err != nil {
			return 0, err
		}
		if err := e.ops.sync(); err != nil {
			return 0, err
		}
		for kv := range 2 {
			for li := range layers {
				for i := range m {
					copy(stored(kv, li, i), stage[at(kv, li, i):])
				}
			}
		}
		return size, nil
	}
	for kv := range 2 {
		for li := range layers {
			for i := range m {
				copy(stage[at(kv, li, i):at(kv, li, i)+run], stored(kv, li, i))
			}
		}
	}
	if err := e.ops.toDevice(e.stageDev, unsafe.Pointer(&stage[0]), size); err != nil {
		return 0, err
	}
	for kv := range 2 {
		for li := range layers {
			for i := 0; i < m; {
				j := i + 1
				for j < m && dev[j] == dev[j-1]+1 {
					j++
				}
				dst := cache[kv][li] + cuda.DevicePtr(int64(dev[i])*run)
				if err := e.ops.copy(dst, e.stageDev+cuda.DevicePtr(at(kv, li, i)), int64(j-i)*run); err != nil {
					return 0, err
				}
				i = j
			}
		}
	}
	return size, e.ops.sync() // the stages are refilled by the next chunk
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
