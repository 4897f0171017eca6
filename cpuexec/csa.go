package cpuexec

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// CSA is CSPS's Communication-efficient Sparse Attention (paper 002,
// §3.2.4, R16–R23) for a prompt prefilled in one chunk over several ranks.
//
// Levels: level 1 is each rank's own SPT, attended by the rank for every
// head; level v (2 ≤ v < Levels) is a segment of 2^(v−1) consecutive
// ranks and the top level all N ranks (with no topology on CPU ranks,
// segments double, as Fig. 7's GPUs, servers, racks). Inside a level-v
// segment the heads are split as evenly as possible over its ranks
// (SP-NTP within the segment); each kept token attends causally to the
// segment's kept tokens. Levels ≤ 1 is off: attention is exact.
//
// Drops (inferred where the paper is open, stated): level 1 drops
// nothing; level 2 drops Drop of each SPT's tokens per head and level
// 2+n keeps (1−Drop)/2^n (the paper's formula read as intended, G3);
// an SPT of n tokens keeps n − round(p·n) (math.Round) at a level of
// ratio p. A token's importance for head h at layer l is the attention
// mass it received from its own SPT's queries at layer l−1, head h, at
// level 1 (every rank computes that level itself); the kept tokens are
// the most important (ties: the earlier position), so the kept sets nest
// (R21) and a token's kept levels are 1..m for one m per (token, head).
// The first and the last layer drop nothing. Dropped queries send nothing
// and get O = 0, z = 0 at that level (G5: a kept query always sees
// itself, so no kept row is empty).
//
// Communication per layer: a small all-gather of every token's m per
// head (so each segment knows which rows it receives), one all-to-all
// carrying, to each rank, for every head it owns at some level ≥ 2 of the
// sender's segments, the q of the tokens kept at the lowest such level (a
// superset of the higher ones: nothing is sent twice, R22), and the K and
// V of each KV head those heads read for every token at least one of them
// keeps (GQA, G9: drops are per query head, and a shared K/V row goes
// once if any head of its group that the destination owns keeps the
// token), and one all-to-all bringing back
// (O, LSE) per kept (token, head, level). The owner merges the levels by
// Eq. 5 in log form (mergePartial), which weighs a key visible at c
// levels c times (G1): even at Drop = 0 CSA is not dense attention.
//
// CSA runs for a whole prompt prefilled in one chunk (from position 0
// to a token whose logits are wanted) that spans several ranks whose
// order rises along the sequence (the sequence-sharded allocation's
// tables), without a sliding window; a prompt prefilled in several
// chunks, and every decode, attends densely (R37's decode drops are not
// applied).
type CSA struct {
	Levels int     // N_v; ≤ 1 is off
	Drop   float64 // level 2's drop ratio p, in [0, 1)
}

func (c CSA) validate() error {
	if c.Levels > 1 && !(c.Drop >= 0 && c.Drop < 1) {
		return fmt.Errorf("cpuexec: csa drop ratio %v outside [0, 1)", c.Drop)
	}
	return nil
}

// DropRatio is level v's drop ratio: 0 at level 1, Drop at level 2,
// 1 − (1−Drop)/2^(v−2) above.
func (c CSA) DropRatio(v int) float64 {
	if v <= 1 {
		return 0
	}
	return 1 - (1-c.Drop)/math.Exp2(float64(v-2))
}

// Kept is how many of an SPT's n tokens level v keeps per head.
func (c CSA) Kept(v, n int) int { return n - int(math.Round(c.DropRatio(v)*float64(n))) }

// Segment is the ranks [lo, hi) of rank r's level-v segment over n ranks.
func (c CSA) Segment(v, r, n int) (lo, hi int) {
	s := n
	if v < c.Levels {
		s = min(n, 1<<(v-1))
	}
	lo = r / s * s
	return lo, min(n, lo+s)
}

// levelHeads are the query heads rank r attends at level v.
func (p *cspsPlan) levelHeads(v, r, heads int) parallel.Span {
	lo, hi := p.csa.Segment(v, r, p.n)
	return parallel.Even(heads, hi-lo, r-lo)
}

// CSATrace is what a test sees of one rank's CSA attention in one layer:
// for each of the rank's CSA tokens (plan order), its q, k, v rows
// (every head) before attention, its kept level m per head, the merged
// attention output (every head), and the importance per head that the
// next layer ranks it by.
type CSATrace struct {
	Layer, Rank int
	Pos, Seq    []int
	Q, K, V     [][]float32
	M           [][]int
	Out         [][]float32
	Imp         [][]float32
}

// csaAttention runs CSA for the step's CSA tokens in layer l.
func (w *cspsWorker) csaAttention(ctx context.Context, l int) error {
	p, rk := w.p, w.rk
	cfg, st := rk.e.cfg, &rk.st
	d, me, n, nh := cfg.HeadDim, rk.id, p.n, cfg.Heads
	qs, ks := nh*d, cfg.KVHeads*d
	group := nh / cfg.KVHeads
	scale := float32(1 / math.Sqrt(float64(d)))
	mine := p.csaByOwner[me]
	nc := len(p.csaToks)

	// Level 1 over the rank's own SPT, every head, a unit being a block
	// of consecutive tokens of a sequence (rows and positions both
	// consecutive) with a KV head's heads; then the importance the next
	// layer ranks by.
	kvh := cfg.KVHeads
	tok := func(i int) *cspsTok { return &p.toks[mine[i]] }
	w.csaBlocks = cutBlocks(w.csaBlocks[:0], len(mine), blockRows(group, d), func(i int) bool {
		return tok(i).seq == tok(i-1).seq && tok(i).row == tok(i-1).row+1 && tok(i).pos == tok(i-1).pos+1
	}, nil)
	rk.e.pool.Run(len(w.csaBlocks)*kvh, func(lo, hi int) {
		sc := getScratch()
		defer putScratch(sc)
		for u := lo; u < hi; u++ {
			blk, kv := blockAt(w.csaBlocks, u/kvh), u%kvh
			t, h0 := tok(blk[0]), kv*group
			b := queries{q: st.q[t.row*qs+h0*d:], out: st.attn[t.row*qs+h0*d:], lse: w.locLse[t.row*nh+h0:], qStride: qs, outStride: qs, lseStride: nh,
				d: d, g: group, rows: blk[1], to: t.to, window: cfg.SlidingWindow, scale: scale}
			attendBlock(sc, &b, cacheTiles{rk.cache, l, kv, p.tables[me][t.seq]})
		}
	})
	// Kept levels of the rank's tokens, from the previous layer's
	// importance.
	grow(&w.csaMine, len(mine)*nh)
	w.keptLevels(l, mine)
	grow(&w.csaImp, st.nl*nh)
	w.importance(mine, qs, ks, group, scale)

	// Every CSA token's m, everywhere.
	resizeInts(&w.sendCounts, n)
	resizeInts(&w.recvCounts, n)
	for o := range n {
		w.recvCounts[o] = len(p.csaByOwner[o]) * nh
	}
	grow(&w.csaAll, nc*nh)
	world := rk.e.world.Comm(me)
	if err := rk.timed(func() error { return world.AllGatherV(ctx, w.csaMine[:len(mine)*nh], w.csaAll, w.recvCounts) }); err != nil {
		return err
	}
	resizeInts(&w.csaM, nc*nh)
	off := 0
	for o := range n {
		for _, ti := range p.csaByOwner[o] {
			k := p.toks[ti].csaOrd
			for h := range nh {
				w.csaM[k*nh+h] = int(w.csaAll[off])
				off++
			}
		}
	}

	// First all-to-all: the q rows of kept tokens for the heads each
	// destination owns at some level of this rank's segments, and the K
	// and V rows of each KV head those heads read, once per token.
	nkv := cfg.KVHeads
	total := 0
	for j := range n {
		w.sendCounts[j] = 0
		w.csaSendRows(me, j, func(ti, h int) { w.sendCounts[j] += d }, func(ti, g int) { w.sendCounts[j] += 2 * d })
		total += w.sendCounts[j]
	}
	grow(&w.send, total)
	off = 0
	for j := range n {
		w.csaSendRows(me, j, func(ti, h int) {
			r := p.toks[ti].row
			off += copy(w.send[off:off+d], st.q[r*qs+h*d:])
		}, func(ti, g int) {
			r := p.toks[ti].row
			off += copy(w.send[off:off+d], st.k[r*ks+g*d:])
			off += copy(w.send[off:off+d], st.v[r*ks+g*d:])
		})
	}
	rtotal := 0
	resizeInts(&w.csaRow, nc*nh)
	resizeInts(&w.csaKV, nc*nkv)
	for o := range n {
		w.recvCounts[o] = 0
		w.csaSendRows(o, me, func(ti, h int) {
			w.csaRow[p.toks[ti].csaOrd*nh+h] = rtotal + w.recvCounts[o]
			w.recvCounts[o] += d
		}, func(ti, g int) {
			w.csaKV[p.toks[ti].csaOrd*nkv+g] = rtotal + w.recvCounts[o]
			w.recvCounts[o] += 2 * d
		})
		rtotal += w.recvCounts[o]
	}
	grow(&w.recv, rtotal)
	if err := rk.timed(func() error { return world.AllToAllV(ctx, w.send[:total], w.sendCounts, w.recv[:rtotal], w.recvCounts) }); err != nil {
		return err
	}

	// Each level's attention among the segment's kept tokens, for the
	// heads this rank owns there, written where the second all-to-all
	// sends it from.
	w.csaUnits = w.csaUnits[:0]
	w.csaKeys = w.csaKeys[:0]
	outOff := 0
	for o := range n {
		w.sendCounts[o] = 0
		w.csaBackPairs(me, o, func(v, h, ti int) {
			w.sendCounts[o] += d + 1
		})
	}
	// Pack the key lists per (level, head, sequence) and the units.
	for v := 2; v <= p.csa.Levels; v++ {
		lo, hi := p.csa.Segment(v, me, n)
		heads := p.levelHeads(v, me, nh)
		for h := heads.Lo; h < heads.Hi; h++ {
			start := -1
			seq := -1
			for _, ti := range p.csaToks {
				t := &p.toks[ti]
				if t.owner < lo || t.owner >= hi || w.csaM[t.csaOrd*nh+h] < v {
					continue
				}
				if t.seq != seq {
					seq, start = t.seq, len(w.csaKeys)/(2*d)
				}
				kvRow := w.csaKV[t.csaOrd*nkv+h/group]
				w.csaKeys = append(w.csaKeys, w.recv[kvRow:kvRow+2*d]...)
				w.csaUnits = append(w.csaUnits, csaUnit{q: w.csaRow[t.csaOrd*nh+h], keys: start, n: len(w.csaKeys)/(2*d) - start, tok: ti, h: h, v: v})
			}
		}
	}
	// Output offsets in the second all-to-all's send buffer.
	grow(&w.part, totalInts(w.sendCounts))
	w.csaOut = resetMap(w.csaOut)
	for o := range n {
		w.csaBackPairs(me, o, func(v, h, ti int) {
			w.csaOut[csaKey{v, h, ti}] = outOff
			outOff += d + 1
		})
	}
	for i := range w.csaUnits {
		u := &w.csaUnits[i]
		u.at = w.csaOut[csaKey{u.v, u.h, u.tok}]
	}
	rk.e.pool.Run(len(w.csaUnits), func(lo, hi int) {
		sc := getScratch()
		defer putScratch(sc)
		for _, u := range w.csaUnits[lo:hi] {
			at := u.at
			keys := w.csaKeys[u.keys*2*d:]
			attendRows(sc, w.part[at:at+d], w.recv[u.q:u.q+d], 1, keys, 2*d, 0, d, 0, 0, u.n, scale, w.part[at+d:at+d+1])
		}
	})
	rtotal = 0
	for o := range n {
		w.recvCounts[o] = 0
		w.csaBackPairs(o, me, func(v, h, ti int) { w.recvCounts[o] += d + 1 })
		rtotal += w.recvCounts[o]
	}
	grow(&w.recv, rtotal)
	if err := rk.timed(func() error {
		return world.AllToAllV(ctx, w.part[:outOff], w.sendCounts, w.recv[:rtotal], w.recvCounts)
	}); err != nil {
		return err
	}
	off = 0
	for o := range n {
		w.csaBackPairs(o, me, func(v, h, ti int) {
			r := p.toks[ti].row
			i := r*nh + h
			w.locLse[i] = mergePartial(st.attn[r*qs+h*d:r*qs+(h+1)*d], w.locLse[i], w.recv[off:off+d], w.recv[off+d])
			off += d + 1
		})
	}
	if w.trace != nil {
		w.emitTrace(l, mine, qs, ks, group)
	}
	return nil
}

// csaUnit is one kept query at one level and head: its q at recv[q:],
// its keys the n rows from keys of the packed list, its output at
// part[at:] (d values, then the LSE).
type csaUnit struct{ q, keys, n, tok, h, v, at int }

type csaKey struct{ v, h, tok int }

func resetMap(m map[csaKey]int) map[csaKey]int {
	if m == nil {
		return map[csaKey]int{}
	}
	clear(m)
	return m
}

func totalInts(s []int) int {
	n := 0
	for _, x := range s {
		n += x
	}
	return n
}

// csaLowest sets w.ell[h] to the lowest level ≥ 2 at which rank j owns
// head h in rank o's segment, 0 where it owns h at none.
func (w *cspsWorker) csaLowest(o, j int) []int {
	p := w.p
	nh := w.rk.e.cfg.Heads
	resizeInts(&w.ell, nh)
	clear(w.ell)
	for v := p.csa.Levels; v >= 2; v-- {
		lo, hi := p.csa.Segment(v, o, p.n)
		if j < lo || j >= hi {
			continue
		}
		hs := p.levelHeads(v, j, nh)
		for h := hs.Lo; h < hs.Hi; h++ {
			w.ell[h] = v
		}
	}
	return w.ell
}

// csaSendRows calls q for each query row and kv for each K/V row pair
// rank o sends rank j in the first all-to-all, in order: per head j owns
// at some level ≥ 2 of o's segments (lowest such level ℓ), the q of o's
// CSA tokens kept at ℓ; then per KV head, the K and V of o's tokens that
// one of those query heads keeps (once, however many of them do).
func (w *cspsWorker) csaSendRows(o, j int, q func(ti, h int), kv func(ti, g int)) {
	p, cfg := w.p, w.rk.e.cfg
	nh, group := cfg.Heads, cfg.Heads/cfg.KVHeads
	ell := w.csaLowest(o, j)
	for h, v := range ell {
		if v == 0 {
			continue
		}
		for _, ti := range p.csaByOwner[o] {
			if w.csaM[p.toks[ti].csaOrd*nh+h] >= v {
				q(ti, h)
			}
		}
	}
	for g := range cfg.KVHeads {
		for _, ti := range p.csaByOwner[o] {
			m := w.csaM[p.toks[ti].csaOrd*nh:]
			for h := g * group; h < (g+1)*group; h++ {
				if ell[h] > 0 && m[h] >= ell[h] {
					kv(ti, g)
					break
				}
			}
		}
	}
}

// csaBackPairs calls f for each (level, head, token) output rank j sends
// rank o in the second all-to-all, in order.
func (w *cspsWorker) csaBackPairs(j, o int, f func(v, h, ti int)) {
	p := w.p
	nh := w.rk.e.cfg.Heads
	for v := 2; v <= p.csa.Levels; v++ {
		lo, hi := p.csa.Segment(v, j, p.n)
		if o < lo || o >= hi {
			continue
		}
		heads := p.levelHeads(v, j, nh)
		for h := heads.Lo; h < heads.Hi; h++ {
			for _, ti := range p.csaByOwner[o] {
				if w.csaM[p.toks[ti].csaOrd*nh+h] >= v {
					f(v, h, ti)
				}
			}
		}
	}
}

// keptLevels sets, for each of the rank's CSA tokens and head, the
// highest level that keeps it (csaMine, as float32 for the all-gather):
// every level in the first and last layer, else by rank of importance
// within its SPT.
func (w *cspsWorker) keptLevels(l int, mine []int) {
	p, cfg := w.p, w.rk.e.cfg
	nh, nv := cfg.Heads, p.csa.Levels
	if l == 0 || l == cfg.Layers-1 {
		for i := range w.csaMine[:len(mine)*nh] {
			w.csaMine[i] = float32(nv)
		}
		return
	}
	for a := 0; a < len(mine); {
		e := a + 1
		for e < len(mine) && p.toks[mine[e]].seq == p.toks[mine[a]].seq {
			e++
		}
		n := e - a
		level := CSA{Levels: nv, Drop: p.drops[p.toks[mine[a]].seq]}
		for h := range nh {
			w.order = w.order[:0]
			for i := a; i < e; i++ {
				w.order = append(w.order, i)
			}
			slices.SortStableFunc(w.order, func(x, y int) int {
				ix, iy := w.csaImp[p.toks[mine[x]].row*nh+h], w.csaImp[p.toks[mine[y]].row*nh+h]
				switch {
				case ix > iy:
					return -1
				case ix < iy:
					return 1
				}
				return 0
			})
			for rank, i := range w.order {
				m := 1
				for v := 2; v <= nv; v++ {
					if rank < level.Kept(v, n) {
						m = v
					}
				}
				w.csaMine[i*nh+h] = float32(m)
			}
		}
		a = e
	}
}

// importance sets csaImp for the rank's CSA tokens: per head, the level-1
// attention mass each token received from its SPT's queries this layer,
// Σ_q exp(q·k·scale − lse_q) over the later queries q that see it. A unit
// is a head of a run of the tokens (one sequence, consecutive rows and
// positions): per query, one tensor.Scores against the run's keys it
// sees and one vectorised exp, summed per key in float64.
func (w *cspsWorker) importance(mine []int, qs, ks, group int, scale float32) {
	p, st := w.p, &w.rk.st
	cfg := w.rk.e.cfg
	nh, d := cfg.Heads, cfg.HeadDim
	tok := func(i int) *cspsTok { return &p.toks[mine[i]] }
	w.csaRuns = cutBlocks(w.csaRuns[:0], len(mine), len(mine), func(i int) bool {
		return tok(i).seq == tok(i-1).seq && tok(i).row == tok(i-1).row+1 && tok(i).pos == tok(i-1).pos+1
	}, nil)
	w.rk.e.pool.Run(len(w.csaRuns)*nh, func(lo, hi int) {
		var s []float32
		var sum []float64
		for u := lo; u < hi; u++ {
			run, h := w.csaRuns[u/nh], u%nh
			first, n := run[0], run[1]
			r0, p0 := tok(first).row, tok(first).pos
			keys := st.k[r0*ks+(h/group)*d:]
			s, sum = slices.Grow(s[:0], n)[:n], slices.Grow(sum[:0], n)[:n]
			clear(sum)
			for j := range n {
				q := tok(first + j)
				a := max(0, q.from-p0) // the keys [a, j] of the run it sees
				sc := s[a : j+1]
				tensor.Scores(sc, st.q[q.row*qs+h*d:q.row*qs+(h+1)*d], keys[a*ks:], 1, j+1-a, d, ks)
				tensor.Scale(scale, sc)
				tensor.ExpSub(sc, w.locLse[q.row*nh+h])
				for i, e := range sc {
					sum[a+i] += float64(e)
				}
			}
			for i := range n {
				w.csaImp[(r0+i)*nh+h] = float32(sum[i])
			}
		}
	})
}

// emitTrace hands the layer's CSA rows of this rank to the test hook.
func (w *cspsWorker) emitTrace(l int, mine []int, qs, ks, group int) {
	p, st := w.p, &w.rk.st
	cfg := w.rk.e.cfg
	nh, d := cfg.Heads, cfg.HeadDim
	tr := CSATrace{Layer: l, Rank: w.rk.id}
	for i, ti := range mine {
		t := &p.toks[ti]
		r := t.row
		tr.Pos = append(tr.Pos, t.pos)
		tr.Seq = append(tr.Seq, t.seq)
		tr.Q = append(tr.Q, slices.Clone(st.q[r*qs:(r+1)*qs]))
		k, v := make([]float32, qs), make([]float32, qs)
		for h := range nh {
			kv := h / group
			copy(k[h*d:(h+1)*d], st.k[r*ks+kv*d:])
			copy(v[h*d:(h+1)*d], st.v[r*ks+kv*d:])
		}
		tr.K, tr.V = append(tr.K, k), append(tr.V, v)
		m := make([]int, nh)
		for h := range nh {
			m[h] = int(w.csaMine[i*nh+h])
		}
		tr.M = append(tr.M, m)
		tr.Out = append(tr.Out, slices.Clone(st.attn[r*qs:(r+1)*qs]))
		tr.Imp = append(tr.Imp, slices.Clone(w.csaImp[r*nh:(r+1)*nh]))
	}
	w.trace(tr)
}
