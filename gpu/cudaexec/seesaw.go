package cudaexec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// Seesaw on the GPU (paper 004, spec seesaw.md; the choices are in the
// package doc). Transition (R2, R3): the old placement's weights are
// freed, the KV pool re-laid out a layer at a time (moveKV), and the new
// placement's shards uploaded from the host copy, counted in
// TransitionStats.WeightBytes as their bytes on the device, which are
// also the bytes that cross the host link (upload.go); KV copies within a rank count as LocalBytes, between ranks as
// KVBytes. It drops the captured CUDA graphs, which hold the old buffers'
// addresses; decode graphs are captured again on first use. The host KV
// store (K1–K4) is in swap.go.
var (
	_ engine.Transitioner = (*Executor)(nil)
	_ engine.Swapper      = (*Executor)(nil)
)

// seesaw is the executor's Seesaw state.
type seesaw struct {
	w           *model.Weights     // host copy of the weights, re-sharded from on a transition
	hostKV      *kvcache.HostStore // nil without Options.HostBlocks
	swapped     atomic.Int64       // bytes SwapOut and SwapIn copied
	moved       parallel.TransitionStats
	transitions int
	broken      error      // a transition failed half-way
	hostMu      sync.Mutex // serialises the emulated device's work (no device thread)

	// Swap staging (swap.go), allocated on the first swap.
	swapMu     sync.Mutex     // one swap at a time: they share the stages
	side       cuda.Stream    // swap-in's copies, beside the step's stream
	sideEv     cuda.Event     // recorded on side after a chunk's copies
	stageBytes int64          // size of stageDev and stageHost
	stageDev   cuda.DevicePtr // [stageBytes]
	stageIdx   cuda.DevicePtr // int32 device block ids of a chunk
	stageHost  hostBuf[byte]  // [stageBytes], page-locked on a device
	idx        []int32        // host staging of stageIdx
}

// initHost keeps the host copy of the weights and allocates the host KV
// store.
func (e *Executor) initHost(w *model.Weights) error {
	e.w = w
	if e.opts.HostBlocks == 0 {
		return nil
	}
	l := kvcache.Layout{Layers: e.cfg.Layers, KVHeads: e.cfg.KVHeads, HeadDim: e.cfg.HeadDim, BlockSize: e.opts.BlockSize,
		NumBlocks: e.opts.HostBlocks, DType: e.dt.Tensor()}
	h, err := kvcache.NewHostStore(l)
	if err != nil {
		return fmt.Errorf("cudaexec: host KV store: %w", err)
	}
	e.hostKV = h
	// No chunk is larger than one rank's slice of every host block, at
	// most a whole-model block each.
	e.stageBytes = min(swapStageBytes, int64(l.NumBlocks)*l.TokenBytes()*int64(l.BlockSize))
	return nil
}

// resident reports whether placement l's weights are on the device while
// the KV cache is under e.base.
func (e *Executor) resident(l parallel.Placement) bool {
	return l.Name == e.base.Name || l.SharesKV(e.cfg, e.base)
}

// usable is the error of a transition that failed half-way, if any.
func (e *Executor) usable() error { return e.broken }

// rankLayout is rank r's KV cache geometry under placement p.
func (e *Executor) rankLayout(p parallel.Placement, r, blocks int) kvcache.Layout {
	s := p.KVSlice(e.cfg, r)
	return kvcache.Layout{Layers: s.Layers.Len(), KVHeads: s.Heads.Len(), HeadDim: e.cfg.HeadDim, BlockSize: e.opts.BlockSize,
		NumBlocks: blocks, DType: e.dt.Tensor()}
}

// headBytes is the bytes of one KV head of one block: block size × head
// dim elements.
func (e *Executor) headBytes() int64 {
	return int64(e.opts.BlockSize) * int64(e.cfg.HeadDim) * int64(e.dt.Size())
}

// allocLayerKV allocates one layer of a rank's keys and values, slice s,
// for blocks blocks.
func (e *Executor) allocLayerKV(s parallel.KVSlice, blocks int) (k, v cuda.DevicePtr, err error) {
	n := int64(blocks) * int64(s.Heads.Len()) * e.headBytes()
	if k, err = e.alloc(n); err != nil {
		return 0, 0, fmt.Errorf("cudaexec: KV cache of %d blocks: %w", blocks, err)
	}
	if v, err = e.alloc(n); err != nil {
		return 0, 0, fmt.Errorf("cudaexec: KV cache of %d blocks: %w", blocks, err)
	}
	return k, v, nil
}

// kvBlockBytes is one KV block over every rank and layer under p, keys
// and values.
func (e *Executor) kvBlockBytes(p parallel.Placement) int64 {
	var n int64
	for r := range p.Coords {
		s := p.KVSlice(e.cfg, r)
		n += 2 * int64(s.Layers.Len()) * int64(s.Heads.Len()) * e.headBytes()
	}
	return n
}

// layerBlockBytes is the most one global layer's KV block takes over the
// ranks holding that layer under p: a transition's headroom per block.
func (e *Executor) layerBlockBytes(p parallel.Placement) int64 {
	var most int64
	for l := 0; l < e.cfg.Layers; l++ {
		var n int64
		for r := range p.Coords {
			if s := p.KVSlice(e.cfg, r); s.Layers.Lo <= l && l < s.Layers.Hi {
				n += 2 * int64(s.Heads.Len()) * e.headBytes()
			}
		}
		most = max(most, n)
	}
	return most
}

// weightBytes is the device bytes of every rank's weight shard under p:
// the elements of its pieces (parallel.Placement.Pieces) in the
// executor's dtype.
func (e *Executor) weightBytes(p parallel.Placement) int64 {
	var n int64
	for r := range p.Coords {
		for _, pc := range p.Pieces(e.cfg, r) {
			if pc.Tensor != parallel.TKV {
				n += pc.Elems()
			}
		}
	}
	return n * int64(e.dt.Size())
}

// transitionRoom is what transitions and swaps need on top of the
// resident weights (residentBytes, uploaded): the extra bytes of the
// largest set of weights a transition may upload, the uploader's stage
// and the swap stages, and the bytes per KV block — the largest pool
// layout's, plus a layer of headroom when a transition can happen.
func (e *Executor) transitionRoom(residentBytes int64) (extra, perBlock int64) {
	groups := map[string]int64{} // weight bytes by the first placement of each KV-sharing group
	var firsts []parallel.Placement
	moves := false
	for _, p := range e.opts.Placements {
		perBlock = max(perBlock, e.kvBlockBytes(p))
		i := slices.IndexFunc(firsts, func(f parallel.Placement) bool { return f.SharesKV(e.cfg, p) })
		if i < 0 {
			firsts = append(firsts, p)
			i = len(firsts) - 1
		}
		groups[firsts[i].Name] += e.weightBytes(p)
	}
	if len(firsts) > 1 {
		moves = true
	}
	for _, n := range groups {
		extra = max(extra, n-residentBytes)
	}
	if moves {
		var layer int64
		for _, p := range e.opts.Placements {
			layer = max(layer, e.layerBlockBytes(p))
		}
		perBlock += layer
	}
	if e.hostKV != nil {
		extra += e.stageBytes + 4*(e.stageBytes/(2*e.headBytes())) // the swap stages (allocSwapStage)
	}
	return extra, perBlock
}

// Transition implements engine.Transitioner: it moves the KV pool to
// placement to (one of Options.Placements) and, when to does not share
// the current placement's KV slices, re-shards the weights from the host
// copy; see the package's Seesaw notes (seesaw.go). A placement sharing
// the KV slices only becomes the KV cache's placement.
func (e *Executor) Transition(ctx context.Context, to parallel.Placement) (parallel.TransitionStats, error) {
	var st parallel.TransitionStats
	if err := e.usable(); err != nil {
		return st, err
	}
	i := slices.IndexFunc(e.opts.Placements, func(p parallel.Placement) bool { return p.Name == to.Name })
	if i < 0 {
		return st, fmt.Errorf("cudaexec: transition to %s, which is not one of the executor's placements %v", to, e.opts.Placements)
	}
	to = e.opts.Placements[i]
	if to.Name == e.base.Name {
		return st, nil
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	from := e.base
	if to.SharesKV(e.cfg, from) {
		e.base = to
		return st, nil
	}
	moves, err := parallel.Transition(e.cfg, from, to, parallel.MoveKV|parallel.MoveWeights|parallel.FromHost)
	if err != nil {
		return st, fmt.Errorf("cudaexec: %w", err)
	}
	if err := e.do(func() error { return e.transition(from, to, moves, &st) }); err != nil {
		e.broken = fmt.Errorf("cudaexec: transition %s → %s failed, the executor is unusable: %w", from, to, err)
		return st, e.broken
	}
	e.transitions++
	e.moved = e.moved.Add(st)
	return st, nil
}

// transition runs on the device thread: old weights out, the KV pool
// re-laid out a layer at a time, new weights in from the host copy.
func (e *Executor) transition(from, to parallel.Placement, moves []parallel.Move, st *parallel.TransitionStats) error {
	if err := e.dropGraphs(); err != nil {
		return err
	}
	if err := e.ops.sync(); err != nil {
		return err
	}
	for name, dl := range e.layouts {
		if dl.layout.Name != to.Name && !dl.layout.SharesKV(e.cfg, to) {
			for _, ds := range dl.shards {
				if err := e.freeShard(ds); err != nil {
					return err
				}
			}
			delete(e.layouts, name)
		}
	}
	if err := e.moveKV(from, to, moves, st); err != nil {
		return err
	}
	e.base = to
	e.kv = e.rankLayout(to, 0, e.kv.NumBlocks)

	up := e.newUploader()
	for _, p := range e.opts.Placements {
		if _, ok := e.layouts[p.Name]; ok || !e.resident(p) {
			continue
		}
		dl := &devLayout{layout: p}
		for r := range p.Coords {
			dl.shards = append(dl.shards, newDevShard(parallel.NewShard(e.pool, e.cfg, e.w, p, r), e.cfg.HeadDim, up.put))
		}
		e.layouts[p.Name] = dl
	}
	if err := up.finish(); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	st.WeightBytes = up.bytes
	for _, m := range moves {
		if m.From != m.To {
			st.Moves++
		}
	}
	return e.ops.sync()
}

// moveKV re-lays the KV pool out from placement from to placement to,
// global layer by global layer, following the KV moves of the plan.
func (e *Executor) moveKV(from, to parallel.Placement, moves []parallel.Move, st *parallel.TransitionStats) error {
	blocks, run := e.kv.NumBlocks, e.opts.BlockSize*e.cfg.HeadDim // run: one head of one block, in elements
	elem := int64(e.dt.Size())
	newK, newV := make([][]cuda.DevicePtr, len(e.ranks)), make([][]cuda.DevicePtr, len(e.ranks))
	for r := range e.ranks {
		n := to.KVSlice(e.cfg, r).Layers.Len()
		newK[r], newV[r] = make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
	}
	in := func(l int, s parallel.Span) bool { return s.Lo <= l && l < s.Hi }
	for l := 0; l < e.cfg.Layers; l++ {
		for r := range e.ranks {
			if s := to.KVSlice(e.cfg, r); in(l, s.Layers) {
				k, v, err := e.allocLayerKV(s, blocks)
				if err != nil {
					return err
				}
				newK[r][l-s.Layers.Lo], newV[r][l-s.Layers.Lo] = k, v
			}
		}
		for _, m := range moves {
			if m.Tensor != parallel.TKV || !in(l, m.Layers) {
				continue
			}
			fs, ts := from.KVSlice(e.cfg, m.From), to.KVSlice(e.cfg, m.To)
			src := e.ranks[m.From]
			pairs := [2][2]cuda.DevicePtr{
				{newK[m.To][l-ts.Layers.Lo], src.kLayers[l-fs.Layers.Lo]},
				{newV[m.To][l-ts.Layers.Lo], src.vLayers[l-fs.Layers.Lo]},
			}
			for _, p := range pairs {
				dst := p[0] + cuda.DevicePtr(elem*int64((m.Rows.Lo-ts.Heads.Lo)*run))
				srcp := p[1] + cuda.DevicePtr(elem*int64((m.Rows.Lo-fs.Heads.Lo)*run))
				if err := e.k.Copy2D(e.s, dst, ts.Heads.Len()*run, srcp, fs.Heads.Len()*run, blocks, m.Rows.Len()*run); err != nil {
					return err
				}
			}
			n := 2 * int64(blocks) * int64(m.Rows.Len()*run) * elem
			if m.From == m.To {
				st.LocalBytes += n
			} else {
				st.KVBytes += n
			}
		}
		if err := e.ops.sync(); err != nil { // the old buffers are read before they are freed
			return err
		}
		for r, rk := range e.ranks {
			if s := from.KVSlice(e.cfg, r); in(l, s.Layers) {
				if err := errors.Join(e.free(rk.kLayers[l-s.Layers.Lo]), e.free(rk.vLayers[l-s.Layers.Lo])); err != nil {
					return err
				}
			}
		}
	}
	for r, rk := range e.ranks {
		rk.kLayers, rk.vLayers = newK[r], newV[r]
	}
	return nil
}

// freeShard frees one rank's device weights.
func (e *Executor) freeShard(ds *devShard) error {
	ptrs := []cuda.DevicePtr{ds.embed, ds.norm, ds.lmHead}
	for _, l := range ds.layers {
		ptrs = append(ptrs, l.attnNorm, l.mlpNorm, l.qkv, l.qkvBias, l.qNorm, l.kNorm, l.o, l.oBias, l.gateUp, l.guBias, l.down, l.downBias)
	}
	var errs []error
	for _, p := range ptrs {
		errs = append(errs, e.free(p)) // free skips 0 and a pointer freed already (a tied LM head)
	}
	return errors.Join(errs...)
}

// Transitions is the number of transitions that re-laid the KV cache out.
func (e *Executor) Transitions() int { return e.transitions }

// Moved is what every transition so far moved, summed.
func (e *Executor) Moved() parallel.TransitionStats { return e.moved }
