package cpuexec

import (
	"context"
	"fmt"
	"slices"
	"unsafe"

	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// Transition moves the executor from the placement its KV cache is under
// to placement to, between steps: every rank's KV slice under to is
// assembled from the ranks that hold it now (parallel.Transition plans
// the pieces), and, when the executor does not hold to's weight shards,
// so are they — from the current placement's shards, or from the host
// copy for a piece no rank holds. Pieces move between ranks by comm's
// Send and Recv, in a group labelled "transition", so their bytes are
// counted like collectives; a piece a rank keeps is copied within it. The
// whole KV pool moves (every block, in use or not).
//
// Weight pieces keep the host matrices' formats: F32, BF16 and F16
// pieces travel widened to float32 and arrive bit-exact; Q8_0 shards are
// cut from the host copy when Options.WeightsFromHost is set (the new
// placement's shards are NewShard's) and a transition that would move
// Q8_0 pieces between ranks is refused.
//
// The new caches and shards are built beside the old ones, so a failed
// transition (an error, a cancelled ctx) leaves the executor as it was.
// Shards built by a transition are released when a later transition
// leaves their placement for one that does not share its KV; those of
// Options.Placements are kept.
func (e *Executor) Transition(ctx context.Context, to parallel.Placement) (parallel.TransitionStats, error) {
	return e.transition(ctx, to, true)
}

// Reshard is Transition without the KV cache: the weights move (when the
// executor does not hold to's shards) and every rank gets an empty KV
// cache for its slice under to. Seesaw reshards after swapping the KV out
// to the host store (SwapOut) and fills the new caches by SwapIn.
func (e *Executor) Reshard(ctx context.Context, to parallel.Placement) (parallel.TransitionStats, error) {
	return e.transition(ctx, to, false)
}

func (e *Executor) transition(ctx context.Context, to parallel.Placement, moveKV bool) (parallel.TransitionStats, error) {
	var st parallel.TransitionStats
	if err := e.check(to); err != nil {
		return st, err
	}
	if e.remote {
		return st, errRemote("a transition")
	}
	if to.Name == e.kvAt.Name {
		return st, nil
	}
	if to.FFN.Pooled() || e.kvAt.FFN.Pooled() {
		return st, fmt.Errorf("cpuexec: no transition from %s to %s: SiDP placements run as they start", e.kvAt, to)
	}
	if h, ok := e.held[to.Name]; ok && !samePlacement(h.placement, to) {
		return st, fmt.Errorf("cpuexec: placement %s differs from the held placement of that name", to)
	}
	from := e.kvAt
	src := e.held[from.Name]
	dst, held := e.held[to.Name]
	var what parallel.Moves
	if moveKV {
		what |= parallel.MoveKV
	}
	if !held {
		what |= parallel.MoveWeights
		if e.fromHost {
			what |= parallel.FromHost
		}
	}
	moves, err := parallel.Transition(e.cfg, from, to, what)
	if err != nil {
		return st, fmt.Errorf("cpuexec: %w", err)
	}
	run := moves // the moves the ranks carry out
	if !held {
		dst = &execPlacement{placement: to, built: true}
		cut := false // the new shards are cut from the host copy, not filled by moves
		if e.quantized() {
			if !e.fromHost {
				return st, fmt.Errorf("cpuexec: transition %s → %s would move Q8_0 weights between ranks, which is not supported; hold %s from the start (Options.Placements) or re-shard from the host copy (Options.WeightsFromHost)", from, to, to.Name)
			}
			cut = true
			run = slices.DeleteFunc(slices.Clone(moves), func(m parallel.Move) bool { return m.Tensor != parallel.TKV })
		}
		for r := range to.Coords {
			if cut {
				dst.shards = append(dst.shards, parallel.NewShard(e.pool, e.cfg, e.w, to, r))
			} else {
				dst.shards = append(dst.shards, parallel.NewEmptyShard(e.cfg, e.w, to, r))
			}
		}
	}
	caches := make([]*kvcache.Cache, len(e.ranks))
	for r := range caches {
		s := to.KVSlice(e.cfg, r)
		kv := e.kv
		kv.Layers, kv.KVHeads = s.Layers.Len(), s.Heads.Len()
		if caches[r], err = kvcache.New(kv); err != nil {
			return st, fmt.Errorf("cpuexec: %w", err)
		}
	}
	x := &transition{e: e, from: from, to: to, moves: run, src: src.shards, dst: dst.shards, caches: caches}
	if err := x.index(); err != nil {
		return st, err
	}
	if err := e.onRanks(ctx, func(ctx context.Context, rk *rank) error { return x.run(ctx, rk) }); err != nil {
		return st, fmt.Errorf("cpuexec: transition %s → %s: %w", from, to, err)
	}

	for r, rk := range e.ranks {
		rk.cache = caches[r]
	}
	e.kv = caches[0].Layout
	e.kvAt = to
	if !held {
		e.held[to.Name] = dst
		e.order = append(e.order, to.Name)
	}
	if src.built && !from.SharesKV(e.cfg, to) {
		delete(e.held, from.Name)
		e.order = slices.DeleteFunc(e.order, func(n string) bool { return n == from.Name })
	}
	for _, m := range moves {
		n := x.words(m) * 4
		switch {
		case m.From == m.To:
			st.LocalBytes += n
		case m.Tensor == parallel.TKV:
			st.KVBytes += n
			st.Moves++
		default:
			st.WeightBytes += n
			st.Moves++
		}
	}
	e.transitions++
	e.moved = e.moved.Add(st)
	return st, nil
}

// quantized reports whether some host matrix is Q8_0, which a transition
// cannot fill piece by piece.
func (e *Executor) quantized() bool {
	for _, m := range e.w.Matrices() {
		if m.DType() == tensor.Q8_0 {
			return true
		}
	}
	return false
}

// Moved is what every transition so far moved, summed.
func (e *Executor) Moved() parallel.TransitionStats { return e.moved }

// samePlacement reports whether two placements put every rank at the same
// coordinate of the same plan.
func samePlacement(a, b parallel.Placement) bool {
	return a.Plan == b.Plan && slices.Equal(a.Coords, b.Coords) && a.FFN.Pooled() == b.FFN.Pooled()
}

// transition is one transition's plan and buffers, shared by the ranks
// (each reads it and writes only its own shard and cache).
type transition struct {
	e        *Executor
	from, to parallel.Placement
	moves    []parallel.Move
	src, dst []*parallel.Shard
	caches   []*kvcache.Cache
	// have and want are each rank's piece of every tensor under from and
	// under to, by parallel.Tensor.
	have, want [][]parallel.Piece
}

// index fills have and want and checks that every move's ranks hold its
// tensor.
func (x *transition) index() error {
	byTensor := func(pieces []parallel.Piece) []parallel.Piece {
		out := make([]parallel.Piece, parallel.TKV+1)
		for _, p := range pieces {
			out[p.Tensor] = p
		}
		return out
	}
	for r := range x.e.ranks {
		x.have = append(x.have, byTensor(x.from.Pieces(x.e.cfg, r)))
		x.want = append(x.want, byTensor(x.to.Pieces(x.e.cfg, r)))
	}
	for _, m := range x.moves {
		if x.want[m.To][m.Tensor].Tensor != m.Tensor || (m.From >= 0 && x.have[m.From][m.Tensor].Tensor != m.Tensor) {
			return fmt.Errorf("cpuexec: transition %s → %s: move %s from %d to %d names a piece a rank does not hold", x.from, x.to, m.Piece, m.From, m.To)
		}
	}
	return nil
}

// words is the number of float32 words move m's buffer holds: its weight
// elements (matrices travel widened to float32 whatever their format, so
// that BF16 and F16 pieces arrive bit-exact), or for the KV cache the keys
// and values of every block in the cache's dtype — a BF16 or F16 cache's
// stored 16-bit elements two to a word (see halves), so that they too
// arrive bit-exact, in half float32's bytes.
func (x *transition) words(m parallel.Move) int64 {
	if m.Tensor != parallel.TKV {
		return m.Elems()
	}
	kv := x.e.kv
	elems := 2 * int64(m.Layers.Len()) * int64(m.Rows.Len()) * int64(kv.NumBlocks) * int64(kv.BlockSize) * int64(kv.HeadDim)
	return elems * int64(kv.ElemBytes()) / 4 // elems is even: keys and values
}

// run is rank rk's part: every move in plan order, sending what it holds
// and receiving what it needs. All ranks walk the same order and each
// move involves two ranks, so the synchronous sends cannot deadlock.
func (x *transition) run(ctx context.Context, rk *rank) error {
	members := make([]int, len(x.e.ranks))
	for i := range members {
		members[i] = i
	}
	grp, err := x.e.world.Group("transition", members...)
	if err != nil {
		return err
	}
	g := grp.Comm(rk.id)
	var buf []float32
	for _, m := range x.moves {
		if m.From != rk.id && m.To != rk.id {
			continue
		}
		n := int(x.words(m))
		if cap(buf) < n {
			buf = make([]float32, n)
		}
		buf = buf[:n]
		switch {
		case m.From == rk.id && m.To == rk.id:
			x.pack(buf, m, rk)
			x.unpack(buf, m)
		case m.From == rk.id:
			x.pack(buf, m, rk)
			if err := rk.timed(func() error { return g.Send(ctx, buf, m.To) }); err != nil {
				return err
			}
		case m.From == parallel.Host:
			x.packHost(buf, m)
			x.unpack(buf, m)
		default:
			if err := rk.timed(func() error { return g.Recv(ctx, buf, m.From) }); err != nil {
				return err
			}
			x.unpack(buf, m)
		}
	}
	return nil
}

// layers lists the layers a move covers: its span, or one pass for a
// tensor outside the layers.
func layers(m parallel.Move) parallel.Span {
	if m.Tensor == parallel.TKV || m.Layers.Len() > 0 {
		return m.Layers
	}
	return parallel.Span{Lo: -1, Hi: 0}
}

// pack writes move m's data, as rank rk holds it under the current
// placement, into buf: layer by layer, rows × cols row-major; for the KV
// cache, per layer the keys then the values of every block's heads.
func (x *transition) pack(buf []float32, m parallel.Move, rk *rank) {
	if m.Tensor == parallel.TKV {
		x.kvCopy(buf, m, rk.cache, x.from.KVSlice(x.e.cfg, rk.id), true)
		return
	}
	have := x.have[rk.id][m.Tensor]
	eachLayer(buf, m, func(l int, part []float32, p parallel.Piece) {
		if m.Tensor.Matrix() {
			parallel.ReadPiece(part, *x.src[rk.id].MatSlot(m.Tensor, l), have, p)
			return
		}
		parallel.CopyPiece(part, p, *x.src[rk.id].Slot(m.Tensor, l), have, p)
	})
}

// packHost writes move m's data from the host copy of the weights.
func (x *transition) packHost(buf []float32, m parallel.Move) {
	eachLayer(buf, m, func(l int, part []float32, p parallel.Piece) {
		if m.Tensor.Matrix() {
			full := parallel.HostMatrix(x.e.w, m.Tensor, l)
			n, k := full.Shape()
			parallel.ReadPiece(part, full, parallel.Piece{Rows: parallel.Span{Lo: 0, Hi: n}, Cols: parallel.Span{Lo: 0, Hi: k}}, p)
			return
		}
		full := parallel.HostVector(x.e.w, m.Tensor, l)
		whole := parallel.Piece{Rows: parallel.Span{Lo: 0, Hi: len(full)}, Cols: parallel.Span{Lo: 0, Hi: 1}}
		parallel.CopyPiece(part, p, full, whole, p)
	})
}

// unpack writes buf, packed as pack does, into the destination rank's new
// shard or cache.
func (x *transition) unpack(buf []float32, m parallel.Move) {
	if m.Tensor == parallel.TKV {
		x.kvCopy(buf, m, x.caches[m.To], x.to.KVSlice(x.e.cfg, m.To), false)
		return
	}
	have := x.want[m.To][m.Tensor]
	eachLayer(buf, m, func(l int, part []float32, p parallel.Piece) {
		if m.Tensor.Matrix() {
			parallel.WritePiece(*x.dst[m.To].MatSlot(m.Tensor, l), have, part, p)
			return
		}
		parallel.CopyPiece(*x.dst[m.To].Slot(m.Tensor, l), have, part, p, p)
	})
}

// eachLayer calls f for each layer of weight move m (once, with layer -1,
// for a tensor outside the layers) with that layer's part of buf, packed
// layer by layer, and the piece the part holds.
func eachLayer(buf []float32, m parallel.Move, f func(layer int, part []float32, p parallel.Piece)) {
	p := parallel.Piece{Tensor: m.Tensor, Rows: m.Rows, Cols: m.Cols}
	n := p.Rows.Len() * p.Cols.Len()
	ls := layers(m)
	for l := ls.Lo; l < ls.Hi; l++ {
		f(l, buf[:n], p)
		buf = buf[n:]
	}
}

// kvCopy copies move m's keys and values between buf and cache c, which
// holds KV slice s: out of the cache with toBuf, else into it. A BF16 or
// F16 cache's elements move as they are stored, packed into buf by
// halves.
func (x *transition) kvCopy(buf []float32, m parallel.Move, c *kvcache.Cache, s parallel.KVSlice, toBuf bool) {
	if c.Half() {
		kvWalk(halves(buf), m, s, x.e.kv.NumBlocks, c.HalfKeys, c.HalfValues, toBuf)
		return
	}
	kvWalk(buf, m, s, x.e.kv.NumBlocks, c.Keys, c.Values, toBuf)
}

// kvWalk copies the move's slots between buf and a cache read through
// keys and values (its float32 or 16-bit accessors), layer by layer, keys
// before values, block by block, head by head.
func kvWalk[T float32 | uint16](buf []T, m parallel.Move, s parallel.KVSlice, numBlocks int, keys, values func(layer, block, head int) []T, toBuf bool) {
	for l := m.Layers.Lo; l < m.Layers.Hi; l++ {
		for _, get := range []func(layer, block, head int) []T{keys, values} {
			for b := 0; b < numBlocks; b++ {
				for h := m.Rows.Lo; h < m.Rows.Hi; h++ {
					slot := get(l-s.Layers.Lo, b, h-s.Heads.Lo)
					if toBuf {
						copy(buf, slot)
					} else {
						copy(slot, buf)
					}
					buf = buf[len(slot):]
				}
			}
		}
	}
}

// halves views buf's memory as 2·len(buf) 16-bit elements. The words only
// carry bits from rank to rank (comm's Send and Recv copy them as they
// are, never computing with them), so the 16-bit elements packed into
// them arrive unchanged whatever float32 value their bits spell.
func halves(buf []float32) []uint16 {
	if len(buf) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(buf))), 2*len(buf))
}

// Transitions is the number of transitions the executor has run.
func (e *Executor) Transitions() int { return e.transitions }
