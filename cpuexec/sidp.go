package cpuexec

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// SiDP on CPU ranks (paper 001). Under a pooled placement
// (parallel.FFNWaS, parallel.FFNCaS) each rank's shard holds the MLP of the
// layers its replica owns, o(l) = l mod DP, and reaches the others'
// through its FFN group (the ranks at its TP index in every replica,
// member i being replica i):
//
//   - Weight-as-a-Service: a housekeeper goroutine per rank copies the
//     gate, up and down matrices of every non-owned layer from the owner
//     rank's shard into one of k slots allocated once (a real memcpy from
//     the owner's memory, counted as a comm.KindRead: the reader's bytes
//     in, the owner's bytes out; the owner takes no part), in
//     parallel.PrefetchOrder's peak-shifted order, every step. The MLP of
//     a non-owned layer waits for its slot's copy, runs the same kernels
//     as a local layer on the slot, and only then frees the slot, so a
//     copy never overwrites a matrix a product still reads. Outputs are
//     bit-identical to plain DP (and so to one rank running the replica's
//     sequences).
//   - Compute-as-a-Service: a non-owner sends its MLP input rows, the
//     output of the post-attention RMSNorm (nl × hidden floats), to the
//     owner with comm Send and receives the MLP output rows (the down
//     projection, before the residual add; the TP partial sum under TP).
//     The owner stacks its own rows and the received ones in replica
//     order in a staging buffer, runs one gate/up/SiLU/down chain over
//     all of them, and sends each replica its rows back. A replica with no
//     tokens in the step (dummy) takes no part in a layer it does not own;
//     a dummy owner still serves. Every rank knows the step's dummy set
//     from the batch (the executor's), so an owner waits only for
//     non-dummy peers. The kernels' per-row results depend on M (gemv
//     dots a row in one pass at m = 1 and in 512-long pieces at m > 2, the
//     GEMM from m = 33 packs 256-deep slabs), and the residual adds the
//     down projection after it rather than accumulating into it, so CaS
//     logits match one rank to float32 rounding, not bit for bit
//     (TestCaSRowsDependOnM, TestSiDPCaS).
//
// Every rank of a step runs the step's one mode (the placement Step is
// given), so an owner in CaS never waits for a peer fetching under WaS.

// DefaultSlots is the WaS slot count when Options.SiDPSlots is 0: DP−1,
// the paper's "cache for N−1 remote layers" (R10), which is also the
// fewest with which a peak-shifted cycle (which may fetch its first layer
// last) cannot stall for good.
func DefaultSlots(dp int) int { return dp - 1 }

// SiDPStats is one rank's SiDP work since the executor was built.
type SiDPStats struct {
	Fetches      int64 // WaS: MLP layers copied into a slot
	FetchedBytes int64 // WaS: their bytes as stored
	FusedMLPs    int64 // CaS: fused MLP chains run as an owner
	FusedRows    int64 // CaS: the rows of those chains (Σ M)
	LocalMLPs    int64 // MLPs run on the rank's own rows, with an owned or fetched layer
}

// sidpCounters are a rank's SiDPStats, written by its goroutine and its
// housekeeper and read by SiDPStats.
type sidpCounters struct {
	fetches, fetched, fused, fusedRows, local atomic.Int64
}

// SiDPStats returns each rank's SiDP work so far.
func (e *Executor) SiDPStats() []SiDPStats {
	out := make([]SiDPStats, len(e.ranks))
	for r, rk := range e.ranks {
		c := &rk.sidp
		out[r] = SiDPStats{Fetches: c.fetches.Load(), FetchedBytes: c.fetched.Load(), FusedMLPs: c.fused.Load(),
			FusedRows: c.fusedRows.Load(), LocalMLPs: c.local.Load()}
	}
	return out
}

// slotEvent is what the tests' slot hook sees: a slot reserved for a
// layer's copy, the copy landed, the MLP started and finished with it
// (the slot is freed right after).
type slotEvent uint8

const (
	slotReserved slotEvent = iota
	slotFilled
	slotInUse
	slotReleased
)

// sidpStep is what every rank needs to know about the step under a pooled
// placement: its mode and each replica's tokens (0: dummy).
type sidpStep struct {
	mode parallel.FFNMode
	rows []int // by replica
}

// prepareSiDP checks a pooled step and records its mode and per-replica
// rows for the ranks.
func (e *Executor) prepareSiDP(p parallel.Placement, jobs [][]micro) error {
	e.sidpStep.mode = p.FFN
	if !p.FFN.Pooled() {
		return nil
	}
	if len(e.sidpStep.rows) != len(jobs) {
		e.sidpStep.rows = make([]int, len(jobs))
	}
	for d, job := range jobs {
		if len(job) > 1 {
			return fmt.Errorf("cpuexec: SiDP runs one micro-batch per replica, not %d", len(job))
		}
		n := 0
		for _, mb := range job {
			for _, s := range mb.seqs {
				n += len(s.Tokens)
			}
		}
		e.sidpStep.rows[d] = n
	}
	return nil
}

// wasCache is one rank's WaS slots and the channels between its compute
// and its housekeeper, all allocated once.
type wasCache struct {
	ep     *execPlacement // the shards it fetches from
	grp    *comm.Group    // the rank's FFN group in the step's World: reads are counted there
	me     int            // the rank's replica (member of grp)
	order  []int          // parallel.PrefetchOrder of the replica
	slots  []wasSlot
	free   chan int      // ids of free slots
	filled []chan int    // by layer: the slot holding it once its copy landed
	quit   chan struct{} // stops the housekeeper early
	done   chan struct{} // the housekeeper finished a micro-batch
}

// wasSlot holds one layer's MLP matrices of the rank's TP slice.
type wasSlot struct{ gate, up, down *tensor.Weights }

// wasFor returns the rank's WaS cache for placement ep, building it (the
// slots, in the format of the owners' matrices) on first use.
func (rk *rank) wasFor(ep *execPlacement) (*wasCache, error) {
	if c := rk.was; c != nil && c.ep == ep {
		return c, nil
	}
	e, l := rk.e, ep.placement
	dp := l.Plan.DP
	k := e.slots
	if k == 0 {
		k = DefaultSlots(dp)
	}
	if k < dp-1 {
		return nil, fmt.Errorf("cpuexec: %d WaS slots for dp=%d: a peak-shifted cycle fetches up to dp−1 = %d layers before its first one is used", k, dp, dp-1)
	}
	me := l.Coords[rk.id].DP
	st := l.Stage(e.cfg, rk.id)
	c := &wasCache{ep: ep, me: me, order: parallel.PrefetchOrder(e.cfg.Layers, dp, me, true),
		free: make(chan int, k), filled: make([]chan int, e.cfg.Layers), quit: make(chan struct{}, 1), done: make(chan struct{}, 1)}
	var ref *parallel.LayerShard
	for _, layer := range c.order {
		src := &ep.shards[l.FFNSource(rk.id, layer)].Layers[layer-st.Lo]
		if ref == nil {
			ref = src
		} else if !sameShape(ref.WGate, src.WGate) || !sameShape(ref.WUp, src.WUp) || !sameShape(ref.WDown, src.WDown) {
			return nil, fmt.Errorf("cpuexec: WaS slots need every layer's MLP in one format and shape; layer %d differs", layer)
		}
	}
	for layer := range c.filled {
		c.filled[layer] = make(chan int, 1)
	}
	if ref != nil {
		for s := range k {
			c.slots = append(c.slots, wasSlot{gate: likeWeights(ref.WGate), up: likeWeights(ref.WUp), down: likeWeights(ref.WDown)})
			c.free <- s
		}
	}
	rk.was = c
	return c, nil
}

func sameShape(a, b *tensor.Weights) bool {
	an, ak := a.Shape()
	bn, bk := b.Shape()
	return a.DType() == b.DType() && an == bn && ak == bk
}

func likeWeights(w *tensor.Weights) *tensor.Weights {
	n, k := w.Shape()
	return tensor.NewWeights(w.DType(), n, k)
}

// prefetch is the housekeeper: it fetches the replica's non-owned layers
// in order, each into a free slot, until done, stopped or cancelled.
func (c *wasCache) prefetch(ctx context.Context, rk *rank) {
	defer func() { c.done <- struct{}{} }()
	for _, layer := range c.order {
		var s int
		select {
		case s = <-c.free:
		case <-c.quit:
			return
		case <-ctx.Done():
			return
		}
		rk.slotHook(slotReserved, s, layer)
		if err := c.fetch(rk, s, layer); err != nil {
			return // the World is aborted; the rank's compute sees it
		}
		rk.slotHook(slotFilled, s, layer)
		c.filled[layer] <- s
	}
}

// fetch copies layer's MLP from its owner's shard into slot s: a
// one-sided read the owner takes no part in.
func (c *wasCache) fetch(rk *rank, s, layer int) error {
	l := c.ep.placement
	src := &c.ep.shards[l.FFNSource(rk.id, layer)].Layers[layer-l.Stage(rk.e.cfg, rk.id).Lo]
	dst := &c.slots[s]
	n := int64(src.WGate.Bytes() + src.WUp.Bytes() + src.WDown.Bytes())
	op := comm.Op{Kind: comm.KindRead, From: l.FFNOwner(layer), To: c.me, Elems: int(n), ElemBytes: 1}
	err := c.grp.Drive(op, func() error {
		if d := rk.e.fetchDelay; d != nil {
			d(rk.id, layer)
		}
		dst.gate.CopyFrom(src.WGate)
		dst.up.CopyFrom(src.WUp)
		dst.down.CopyFrom(src.WDown)
		return nil
	})
	if err == nil {
		rk.sidp.fetches.Add(1)
		rk.sidp.fetched.Add(n)
	}
	return err
}

// start sets the rank's housekeeper fetching for one micro-batch, its
// reads counted in the rank's FFN group of the step's World.
func (c *wasCache) start(ctx context.Context, rk *rank) {
	c.grp = rk.g.ffn.Group()
	go c.prefetch(ctx, rk)
}

// stop ends the housekeeper's micro-batch (at once if it is waiting for a
// slot) and returns every slot to the free list.
func (c *wasCache) stop() {
	c.quit <- struct{}{}
	<-c.done
	select {
	case <-c.quit:
	default:
	}
	for _, f := range c.filled {
		select {
		case <-f:
		default:
		}
	}
	for len(c.free) > 0 {
		<-c.free
	}
	for s := range c.slots {
		c.free <- s
	}
}

// slotHook reports a slot event to the tests' hook, if any.
func (rk *rank) slotHook(ev slotEvent, slot, layer int) {
	if h := rk.e.slotHook; h != nil {
		h(rk.id, ev, slot, layer)
	}
}

// RunMLP runs layer l's MLP on the rank's rows under the step's FFN mode:
// with its own weights (plain DP, or a layer its replica owns under WaS),
// with a fetched layer (WaS), or by the layer's owner (CaS).
func (rk *rank) RunMLP(ctx context.Context, l int) error {
	mode := rk.e.sidpStep.mode
	switch {
	case mode == parallel.FFNCaS:
		return rk.casMLP(ctx, l)
	case mode == parallel.FFNWaS && rk.ep.placement.FFNOwner(l) != rk.ep.placement.Coords[rk.id].DP:
		return rk.wasMLP(ctx, l)
	}
	rk.MLPUp(l)
	rk.MLPDown(l)
	rk.sidp.local.Add(1)
	return nil
}

// wasMLP waits for layer l's slot, runs the MLP on it and frees it.
func (rk *rank) wasMLP(ctx context.Context, l int) error {
	c := rk.was
	var s int
	select {
	case s = <-c.filled[l]:
	case <-ctx.Done():
		return ctx.Err()
	case <-rk.e.world.Done():
		return rk.e.world.Err()
	}
	sl := &c.slots[s]
	rk.slotHook(slotInUse, s, l)
	st := &rk.st
	rk.mlpUp(st.gate, st.up, st.xn, st.nl, sl.gate, sl.up, rk.layer(l), nil)
	rk.project(st.gate, sl.down)
	rk.sidp.local.Add(1)
	rk.slotHook(slotReleased, s, l)
	c.free <- s
	return nil
}

// casMLP ships the rank's rows of layer l to its owner and takes the
// output back, or, on the owner, serves the layer.
func (rk *rank) casMLP(ctx context.Context, l int) error {
	p := rk.ep.placement
	owner, me := p.FFNOwner(l), p.Coords[rk.id].DP
	if owner == me {
		return rk.casServe(ctx, l)
	}
	st, n := &rk.st, rk.st.nl*rk.e.cfg.Hidden
	grow(&st.casY, n)
	if err := rk.timed(func() error { return rk.g.ffn.Send(ctx, st.xn[:n], owner) }); err != nil {
		return err
	}
	if err := rk.timed(func() error { return rk.g.ffn.Recv(ctx, st.casY[:n], owner) }); err != nil {
		return err
	}
	rk.applyMLP(st.casY[:n])
	return nil
}

// casServe is the owner's side of a CaS layer: the non-dummy replicas'
// rows (its own from xn) stacked in replica order, one MLP chain over
// them, each replica's rows sent back (its own added to the residual).
func (rk *rank) casServe(ctx context.Context, l int) error {
	e, st := rk.e, &rk.st
	rows, me := e.sidpStep.rows, rk.ep.placement.Coords[rk.id].DP
	h, is := e.cfg.Hidden, rk.sh.Inter.Len()
	m := 0
	for _, n := range rows {
		m += n
	}
	if m == rows[me] && rows[me] > 0 { // every peer is dummy: a plain local MLP
		rk.MLPUp(l)
		rk.MLPDown(l)
		rk.sidp.local.Add(1)
		return nil
	}
	grow(&st.casIn, m*h)
	grow(&st.casGate, m*is)
	grow(&st.casUp, m*is)
	grow(&st.casOut, m*h)
	off := 0
	for r, n := range rows {
		if n == 0 {
			continue
		}
		dst := st.casIn[off*h : (off+n)*h]
		if r == me {
			copy(dst, st.xn[:n*h])
		} else if err := rk.timed(func() error { return rk.g.ffn.Recv(ctx, dst, r) }); err != nil {
			return err
		}
		off += n
	}
	w := rk.layer(l)
	rk.mlpUp(st.casGate, st.casUp, st.casIn, m, w.WGate, w.WUp, w, nil)
	tensor.MatMulW(e.pool, st.casOut, st.casGate, w.WDown, m)
	rk.sidp.fused.Add(1)
	rk.sidp.fusedRows.Add(int64(m))
	off = 0
	for r, n := range rows {
		if n == 0 {
			continue
		}
		out := st.casOut[off*h : (off+n)*h]
		if r == me {
			rk.applyMLP(out)
		} else if err := rk.timed(func() error { return rk.g.ffn.Send(ctx, out, r) }); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// applyMLP takes the MLP's down projection of the rank's rows: added to
// the residual without TP, kept as the partial sum for ReduceTP with it.
func (rk *rank) applyMLP(y []float32) {
	if rk.g.tp == nil {
		tensor.Add(rk.st.x[:len(y)], y)
		return
	}
	copy(rk.st.tmp[:len(y)], y)
}

// serveCaS is a dummy rank's CaS step: it runs no layer of its own but
// serves, as owner, every layer of its replica that a non-dummy peer
// needs.
func (rk *rank) serveCaS(ctx context.Context, ep *execPlacement) error {
	g, err := rk.groups(ep)
	if err != nil {
		return err
	}
	rk.sh, rk.g, rk.ep = ep.shards[rk.id], g, ep
	defer func() { rk.sh = nil }()
	p := ep.placement
	me := p.Coords[rk.id].DP
	busy := false
	for r, n := range rk.e.sidpStep.rows {
		busy = busy || (r != me && n > 0)
	}
	if !busy {
		return nil
	}
	st := rk.sh.Stage
	for l := st.Lo; l < st.Hi; l++ {
		if p.FFNOwner(l) != me {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := rk.casServe(ctx, l); err != nil {
			return err
		}
	}
	return nil
}
