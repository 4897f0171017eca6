package cudaexec

import (
	"context"
	"fmt"
	"time"
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
// bytes copied, once they are in the store; on error the host blocks
// are undefined. Like SwapIn it may run beside Step (swapOutPart).
func (e *Executor) SwapOut(ctx context.Context, swaps []forward.Swap) (int64, error) {
	return e.swap(ctx, swaps, true)
}

// SwapIn implements engine.Swapper: it copies the swaps' host blocks into
// the device cache, every rank pulling its slice under the current
// placement, which may differ from the one that pushed (Seesaw's KV
// re-shard). It returns the bytes copied, once they have landed. It may
// be called beside Step (the engine's prefetcher): its copies run on a
// side stream while steps run on theirs (swapInPart); not beside
// Transition.
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
	e.swapMu.Lock()
	defer e.swapMu.Unlock()
	var parts []swapPart
	err := e.do(func() error {
		var err error
		if parts, err = e.swapParts(swaps, out); err != nil || len(parts) == 0 {
			return err
		}
		return e.allocSwapStage()
	})
	var n int64
	for _, c := range parts {
		if err != nil {
			break
		}
		var m int64
		if out {
			m, err = e.swapOutPart(c)
		} else {
			m, err = e.swapInPart(c)
		}
		n += m
	}
	if err != nil {
		return 0, fmt.Errorf("cudaexec: swap under %s: %w", e.base, err)
	}
	e.swapped.Add(n)
	return n, nil
}

// swapPart is one chunk of a swap: rank r's slice s of device blocks dev
// and host blocks host, small enough for the stages.
type swapPart struct {
	r         int
	s         parallel.KVSlice
	dev, host []int
}

// swapParts splits swaps into the chunks every rank moves (on the way
// out, but a replica of a lower rank's slice), each within the staging
// buffers. Call on the device thread.
func (e *Executor) swapParts(swaps []forward.Swap, out bool) ([]swapPart, error) {
	var dev, host []int
	for _, sw := range swaps {
		dev, host = append(dev, sw.Device...), append(host, sw.Host...)
	}
	if len(dev) == 0 {
		return nil, nil
	}
	var parts []swapPart
	for r := range e.ranks {
		if out && e.replicatedBelow(r) {
			continue
		}
		s := e.base.KVSlice(e.cfg, r)
		perBlock := 2 * int64(s.Layers.Len()) * int64(s.Heads.Len()) * e.headBytes()
		chunk := int(e.stageBytes / perBlock)
		if chunk == 0 {
			return nil, fmt.Errorf("rank %d's slice of one block, %d bytes, exceeds the %d-byte swap stage", r, perBlock, e.stageBytes)
		}
		for lo := 0; lo < len(dev); lo += chunk {
			hi := min(len(dev), lo+chunk)
			parts = append(parts, swapPart{r, s, dev[lo:hi], host[lo:hi]})
		}
	}
	return parts, nil
}

// sideCopyBytes is the most one copy between the host and device stages
// moves. A step's own small copies (its tables up, its token ids or
// logits down) share the copy engine with the swaps' and wait behind
// whichever copy it is working on; in pieces this size (about 0.1 ms on
// a PCIe 5 link) a swap beside the steps delays each of them by at most
// one piece rather than a whole stage.
const sideCopyBytes = 4 << 20

// copyStage queues, on the side stream, the copy of the stages' first
// size bytes from the host stage to the device stage (up) or back, in
// pieces of sideCopyBytes. Call on the device thread.
func (e *Executor) copyStage(size int64, up bool) error {
	for off := int64(0); off < size; off += sideCopyBytes {
		host, dev, n := unsafe.Pointer(&e.stageHost.buf[off]), e.stageDev+cuda.DevicePtr(off), min(sideCopyBytes, size-off)
		var err error
		if up {
			err = e.ops.sideToDevice(dev, host, n)
		} else {
			err = e.ops.sideToHost(host, dev, n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// swapStageBytes is the most the swap staging buffers hold, on the
// device and on the host: one chunk of a rank's part of a swap.
const swapStageBytes = 64 << 20

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

// The stages hold a part laid out [K, V][local layer][block i][the
// slice's heads of one block]. partLayout gives, for part c, the bytes of
// one block of one layer of the slice (run), of the whole part (size),
// and the offset of (kv, local layer, block i).
func (e *Executor) partLayout(c swapPart) (run, size int64, at func(kv, li, i int) int64) {
	m, layers := len(c.dev), c.s.Layers.Len()
	run = int64(c.s.Heads.Len()) * e.headBytes()
	size = 2 * int64(layers) * int64(m) * run
	return run, size, func(kv, li, i int) int64 { return (int64(kv*layers+li)*int64(m) + int64(i)) * run }
}

// eachRun calls f with every run of part c, (kv, local layer, block i), as
// it sits in the host stage and in the host store, the keys or values of
// each layer on one of the executor's pool's goroutines.
func (e *Executor) eachRun(c swapPart, stage []byte, f func(staged, stored []byte)) {
	run, _, at := e.partLayout(c)
	layers := c.s.Layers.Len()
	e.pool.Run(2*layers, func(lo, hi int) {
		for x := lo; x < hi; x++ {
			kv, li := x/layers, x%layers
			for i, hb := range c.host {
				stored := unsafe.Slice((*byte)(e.hostRun(kv == 0, hb, c.s.Layers.Lo+li, c.s.Heads)), run)
				f(stage[at(kv, li, i):at(kv, li, i)+run], stored)
			}
		}
	})
}

// swapOutPart moves part c from the device cache into the host store
// beside the steps (Seesaw's offload behind the prefill, spec P2, in its
// two stages): the device thread uploads the block ids and queues on the
// side stream one gather per local layer and K or V, collecting the
// blocks from the rank's cache into the device stage, and one copy of the
// stage to the host stage; once they have landed (sideWait) the calling
// goroutine copies each run into the store. The blocks belong to no
// scheduled sequence until the swap-out returns, and the steps meanwhile
// write only others. It returns the bytes moved between device and host.
func (e *Executor) swapOutPart(c swapPart) (int64, error) {
	m, layers := len(c.dev), c.s.Layers.Len()
	_, size, at := e.partLayout(c)
	stage := e.stageHost.buf
	err := e.do(func() error {
		rk := e.ranks[c.r]
		cache := [2][]cuda.DevicePtr{rk.kLayers, rk.vLayers}
		width := c.s.Heads.Len() * e.opts.BlockSize * e.cfg.HeadDim
		for i, d := range c.dev {
			e.idx[i] = int32(d)
		}
		// The ids go up on the step's stream, idle between steps, so that
		// the gathers on the side stream find them there.
		if err := e.ops.toDevice(e.stageIdx, unsafe.Pointer(&e.idx[0]), 4*int64(m)); err != nil {
			return err
		}
		if err := e.ops.sync(); err != nil {
			return err
		}
		side, err := e.ops.side()
		if err != nil {
			return err
		}
		for kv := range 2 {
			for li := range layers {
				if err := e.k.GatherRows(side, e.stageDev+cuda.DevicePtr(at(kv, li, 0)), cache[kv][li], e.stageIdx, m, width); err != nil {
					return err
				}
			}
		}
		if err := e.copyStage(size, false); err != nil {
			return err
		}
		return e.ops.sideMark()
	})
	if err == nil {
		err = e.sideWait()
	}
	if err != nil {
		return 0, err
	}
	e.eachRun(c, stage, func(staged, stored []byte) { copy(stored, staged) })
	return size, nil
}

// swapInPart moves part c from the host store into the device cache
// beside the steps (Seesaw's prefetcher, spec P3–P5). The calling
// goroutine fills the host stage from the store; the device thread queues
// on the side stream one copy of the stage to the device and one device
// copy per run of consecutive device blocks for each layer's keys or
// values; then the caller asks, through the device thread (so between
// steps) every sidePoll, whether the copies have landed. Steps run on
// their own stream meanwhile. They never touch the blocks being filled,
// which belong to no scheduled sequence until the swap-in returns. It
// returns the bytes moved between host and device.
func (e *Executor) swapInPart(c swapPart) (int64, error) {
	m, layers := len(c.dev), c.s.Layers.Len()
	run, size, at := e.partLayout(c)
	stage := e.stageHost.buf
	e.eachRun(c, stage, func(staged, stored []byte) { copy(staged, stored) })
	err := e.do(func() error {
		rk := e.ranks[c.r]
		cache := [2][]cuda.DevicePtr{rk.kLayers, rk.vLayers}
		if err := e.copyStage(size, true); err != nil {
			return err
		}
		for kv := range 2 {
			for li := range layers {
				for i := 0; i < m; {
					j := i + 1
					for j < m && c.dev[j] == c.dev[j-1]+1 {
						j++
					}
					dst := cache[kv][li] + cuda.DevicePtr(int64(c.dev[i])*run)
					if err := e.ops.sideCopy(dst, e.stageDev+cuda.DevicePtr(at(kv, li, i)), int64(j-i)*run); err != nil {
						return err
					}
					i = j
				}
			}
		}
		return e.ops.sideMark()
	})
	if err == nil {
		err = e.sideWait() // the next part refills the stages only after this one has landed
	}
	if err != nil {
		return 0, err
	}
	return size, nil
}

// sideWait returns once the side stream has reached its last mark,
// asking through the device thread every sidePoll.
func (e *Executor) sideWait() error {
	for {
		var done bool
		if err := e.do(func() (err error) {
			done, err = e.ops.sideDone()
			return err
		}); err != nil || done {
			return err
		}
		time.Sleep(sidePoll)
	}
}

// sidePoll is how often a swap asks whether its copies have landed. Each
// ask waits for the device thread, so it falls between steps.
const sidePoll = 200 * time.Microsecond

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
