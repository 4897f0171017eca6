package cpuexec

import (
	"context"
	"math"
	"sort"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/parallel"
)

// cspsWorker is one rank's CSPS program and its scratch, grown to the
// largest step seen.
type cspsWorker struct {
	rk *rank
	p  *cspsPlan

	send, recv []float32 // all-to-all buffers
	rows       []float32 // [SP tokens, chunk q|k|v] in batch order, after the first all-to-all
	spOut      []float32 // [SP tokens, chunk q] this rank's heads of every SP token
	spLse      []float32 // [SP tokens, chunk heads]
	spBlocks   [][2]int  // local's blocks of SP tokens, from spLo: first, count
	ownBlocks  [][2]int  // local's blocks of the rank's other tokens (own rows)
	csaBlocks  [][2]int  // csaAttention's blocks of its level 1 (indices into csaByOwner)
	csaRuns    [][2]int  // importance's runs of one sequence's consecutive rows (indices into csaByOwner)
	locLse     []float32 // [own rows, heads]
	part       []float32 // partials computed for other ranks: [O, LSE] per (token, head)
	units      []cspsUnit
	b1, b2     a2aBufs // SP-NTP's first and second all-to-all

	// CSA (csa.go).
	csaMine, csaAll []float32 // kept levels of own tokens, of all tokens (all-gather)
	csaImp          []float32 // [own rows, heads] importance for the next layer
	csaM, csaRow    []int     // [CSA tokens, heads] kept level; q row offset in the first all-to-all
	csaKV           []int     // [CSA tokens, KV heads] K/V row offset in the first all-to-all
	ell             []int     // [heads] lowest level a destination owns each head at
	csaUnits        []csaUnit
	csaKeys         []float32 // packed [k | v] rows per (level, head, sequence)
	csaOut          map[csaKey]int
	order           []int
	trace           func(CSATrace) // tests
	tp              spTP           // SP-TP (csps_sptp.go)
	sendCounts      []int
	recvCounts      []int
}

// run is the rank program of one CSPS step: every layer computed on the
// rank's own tokens, attention as the package doc of CSPS says. A rank
// without tokens in the step still takes part in every collective.
func (w *cspsWorker) run(ctx context.Context, rk *rank, sh *parallel.Shard) error {
	cfg := rk.e.cfg
	rk.sh, rk.g, rk.mb = sh, groups{}, &w.p.micros[rk.id]
	defer func() { rk.sh, rk.mb = nil, nil }()
	rk.prepare(rk.mb, sh)
	has, kvOnly := rk.st.nl > 0, w.p.tpOwnAll[rk.id]
	if has {
		rk.Embed()
	}
	if w.p.anyTP {
		w.tpPrepare()
	}
	for l := 0; l < cfg.Layers; l++ {
		if err := rk.BeginLayer(ctx, l); err != nil {
			return err
		}
		if has {
			rk.AttnNorm(l)
			if kvOnly {
				w.ownKV(l)
			} else {
				rk.QKV(l)
				rk.Position(l)
			}
			rk.CacheWrite(l)
		}
		if err := w.attention(ctx, l); err != nil {
			return err
		}
		if has && !kvOnly {
			rk.OutProj(l)
		}
		if has {
			rk.Residual(l, forward.AttnBranch)
			rk.MLPNorm(l)
			rk.MLPUp(l)
			rk.MLPDown(l)
			rk.Residual(l, forward.MLPBranch)
		}
	}
	if has {
		rk.Logits()
	}
	return nil
}

// attention fills the rank's attention output (st.attn, every head of its
// rows) for layer l.
func (w *cspsWorker) attention(ctx context.Context, l int) error {
	p, rk := w.p, w.rk
	cfg := rk.e.cfg
	d := cfg.HeadDim
	me := rk.id
	ch := p.chunks[me]
	hq := ch.QHi - ch.QLo
	qc, kc := hq*d, (ch.KVHi-ch.KVLo)*d
	wd := qc + 2*kc
	nsp := len(p.spToks)
	grow(&w.rows, nsp*wd)
	grow(&w.spOut, nsp*qc)
	grow(&w.spLse, nsp*hq)
	grow(&w.locLse, rk.st.nl*cfg.Heads)
	tp := p.anyTP
	if tp {
		if m := w.tpMicro(); m > 1 {
			return w.tpPipelined(ctx, l, wd, qc, kc, m)
		}
	}
	if nsp > 0 && p.micro > 1 && !p.anyReq && !tp {
		w.local(l, wd, qc, kc, 0, 0, true)
		if len(p.csaToks) > 0 {
			if err := w.csaAttention(ctx, l); err != nil {
				return err
			}
		}
		return w.pipelined(ctx, l, wd, qc, kc)
	}
	if p.anyNTP {
		if err := w.exchangeQKV(ctx); err != nil {
			return err
		}
	}
	world := rk.e.world.Comm(me)
	var whole *tpSpan
	if tp {
		whole = w.tpWhole()
		gather := w.tpGather(whole)
		if err := rk.timed(func() error { return gather(ctx, world) }); err != nil {
			return err
		}
		w.tpProject(l, whole)
	}
	w.local(l, wd, qc, kc, 0, nsp, true)
	if len(p.csaToks) > 0 {
		if err := w.csaAttention(ctx, l); err != nil {
			return err
		}
	}
	if p.anyReq {
		if err := w.moveQueries(ctx, l, wd); err != nil {
			return err
		}
	}
	if p.anyNTP {
		if err := w.returnOutputs(ctx); err != nil {
			return err
		}
	}
	if tp {
		reduce := w.tpOutProj(l, whole)
		if err := rk.timed(func() error { return reduce(ctx, world) }); err != nil {
			return err
		}
		w.tpAddBack(whole)
	}
	return nil
}

// a2aBufs are one all-to-all's buffers and counts.
type a2aBufs struct {
	send, recv []float32
	sc, rc     []int
}

// ownedIn is rank o's SP tokens with spOrd in [lo, hi).
func (p *cspsPlan) ownedIn(o, lo, hi int) []int {
	s := p.spByOwner[o]
	a := sort.Search(len(s), func(i int) bool { return p.toks[s[i]].spOrd >= lo })
	e := sort.Search(len(s), func(i int) bool { return p.toks[s[i]].spOrd >= hi })
	return s[a:e]
}

// packQKV fills b for the first all-to-all of SP-NTP over the SP tokens
// [lo, hi): each rank sends every other rank that rank's head chunk of q,
// k and v for its own tokens; it returns the send and receive totals.
func (w *cspsWorker) packQKV(b *a2aBufs, lo, hi int) (total, rtotal int) {
	p, rk := w.p, w.rk
	cfg, st := rk.e.cfg, &rk.st
	d, me, n := cfg.HeadDim, rk.id, p.n
	qs, ks := cfg.Heads*d, cfg.KVHeads*d
	resizeInts(&b.sc, n)
	resizeInts(&b.rc, n)
	mine := p.ownedIn(me, lo, hi)
	for j := range n {
		c := p.chunks[j]
		b.sc[j] = len(mine) * ((c.QHi-c.QLo)*d + 2*(c.KVHi-c.KVLo)*d)
		total += b.sc[j]
	}
	my := p.chunks[me]
	wd := (my.QHi-my.QLo)*d + 2*(my.KVHi-my.KVLo)*d
	for o := range n {
		b.rc[o] = len(p.ownedIn(o, lo, hi)) * wd
		rtotal += b.rc[o]
	}
	grow(&b.send, total)
	grow(&b.recv, rtotal)
	off := 0
	for j := range n {
		c := p.chunks[j]
		qc, kc := (c.QHi-c.QLo)*d, (c.KVHi-c.KVLo)*d
		for _, ti := range mine {
			r := p.toks[ti].row
			off += copy(b.send[off:off+qc], st.q[r*qs+c.QLo*d:])
			off += copy(b.send[off:off+kc], st.k[r*ks+c.KVLo*d:])
			off += copy(b.send[off:off+kc], st.v[r*ks+c.KVLo*d:])
		}
	}
	return total, rtotal
}

// unpackQKV lays out what packQKV's all-to-all brought in batch order
// (w.rows, sized for every SP token).
func (w *cspsWorker) unpackQKV(b *a2aBufs, lo, hi int) {
	p, d := w.p, w.rk.e.cfg.HeadDim
	my := p.chunks[w.rk.id]
	wd := (my.QHi-my.QLo)*d + 2*(my.KVHi-my.KVLo)*d
	off := 0
	for o := range p.n {
		for _, ti := range p.ownedIn(o, lo, hi) {
			k := p.toks[ti].spOrd
			copy(w.rows[k*wd:(k+1)*wd], b.recv[off:off+wd])
			off += wd
		}
	}
}

// exchangeQKV is the first all-to-all of SP-NTP over every SP token.
func (w *cspsWorker) exchangeQKV(ctx context.Context) error {
	nsp := len(w.p.spToks)
	total, rtotal := w.packQKV(&w.b1, 0, nsp)
	g := w.rk.e.world.Comm(w.rk.id)
	if err := w.rk.timed(func() error {
		return g.AllToAllV(ctx, w.b1.send[:total], w.b1.sc, w.b1.recv[:rtotal], w.b1.rc)
	}); err != nil {
		return err
	}
	w.unpackQKV(&w.b1, 0, nsp)
	return nil
}

// local computes the partials this rank can form from what it holds:
// for its head chunk of the SP tokens [spLo, spHi), the in-step keys from
// the all-to-all and the cached keys it holds; with own, for its own
// other tokens, every head over the cached keys it holds (their own keys
// included).
func (w *cspsWorker) local(l, wd, qc, kc, spLo, spHi int, own bool) {
	p, rk := w.p, w.rk
	cfg, st := rk.e.cfg, &rk.st
	d, me := cfg.HeadDim, rk.id
	ch := p.chunks[me]
	hq := ch.QHi - ch.QLo
	group := cfg.Heads / cfg.KVHeads
	scale := float32(1 / math.Sqrt(float64(d)))
	qs := cfg.Heads * d
	// The SP units are a block's runs of the chunk's heads that share a
	// KV head, attended together; a block is up to blockRows consecutive
	// SP tokens of one sequence (consecutive positions). The own units
	// are a block of the rank's other tokens with a KV head's heads.
	runs := headRuns(ch, group)
	rb := blockRows(group, d)
	spTok := func(k int) *cspsTok { return &p.toks[p.spToks[spLo+k]] }
	w.spBlocks = cutBlocks(w.spBlocks[:0], spHi-spLo, rb, func(k int) bool {
		return spTok(k).seq == spTok(k-1).seq && spTok(k).pos == spTok(k-1).pos+1
	}, nil)
	spUnits := len(w.spBlocks) * len(runs)
	units := spUnits
	w.ownBlocks = w.ownBlocks[:0]
	if own {
		ownTok := func(r int) *cspsTok { return &p.toks[p.own[me][r]] }
		w.ownBlocks = cutBlocks(w.ownBlocks, st.nl, rb, func(r int) bool {
			return ownTok(r).seq == ownTok(r-1).seq && ownTok(r).pos == ownTok(r-1).pos+1
		}, func(r int) bool { return ownTok(r).sp || ownTok(r).csa })
		units += len(w.ownBlocks) * cfg.KVHeads
	}
	rk.e.pool.Run(units, func(lo, hi int) {
		sc := getScratch()
		defer putScratch(sc)
		part, plse := make([]float32, rb*group*d), make([]float32, rb*group) // a block's partials over the cache
		for u := lo; u < hi; u++ {
			if u < spUnits {
				blk, run := blockAt(w.spBlocks, u/len(runs)), runs[u%len(runs)]
				k, n := spLo+blk[0], blk[1]
				j0, j1 := run[0], run[1]
				g := j1 - j0
				t := &p.toks[p.spToks[k]]
				kv := (ch.QLo+j0)/group - ch.KVLo
				first := p.seqFirstSP[t.seq]
				base := p.toks[p.spToks[first]].pos
				// In-step keys: row i's [mid_i, to+i), mid_i = max(mid, its
				// window's start).
				b := queries{q: w.rows[k*wd+j0*d:], out: w.spOut[k*qc+j0*d:], lse: w.spLse[k*hq+j0:], qStride: wd, outStride: qc, lseStride: hq,
					d: d, g: g, rows: n, from: t.mid, to: t.to, window: cfg.SlidingWindow, scale: scale}
				attendBlock(sc, &b, rowTiles{w.rows[first*wd:], wd, qc + kv*d, qc + kc + kv*d, base})
				// Cached keys: row i's [from_i, mid), none past the
				// piece's start (stop), merged by log-sum-exp.
				if p.holds(me, t.seq, t.from, t.mid) {
					c := queries{q: b.q, out: part, lse: plse, qStride: wd, outStride: g * d, lseStride: g,
						d: d, g: g, rows: n, from: 0, to: t.to, window: cfg.SlidingWindow, stop: t.mid, scale: scale}
					attendBlock(sc, &c, cacheTiles{rk.cache, l, (ch.QLo + j0) / group, p.tables[me][t.seq]}) // the cache holds every KV head
					for r := range n {
						for h := range g {
							x := &w.spLse[(k+r)*hq+j0+h]
							*x = mergePartial(w.spOut[(k+r)*qc+(j0+h)*d:][:d], *x, part[(r*g+h)*d:][:d], plse[r*g+h])
						}
					}
				}
				continue
			}
			v := u - spUnits
			blk, kvh := blockAt(w.ownBlocks, v/cfg.KVHeads), v%cfg.KVHeads
			r, h0 := blk[0], kvh*group
			t := &p.toks[p.own[me][r]]
			b := queries{q: st.q[r*qs+h0*d:], out: st.attn[r*qs+h0*d:], lse: w.locLse[r*cfg.Heads+h0:], qStride: qs, outStride: qs, lseStride: cfg.Heads,
				d: d, g: group, rows: blk[1], to: t.to, window: cfg.SlidingWindow, scale: scale}
			attendBlock(sc, &b, cacheTiles{rk.cache, l, kvh, p.tables[me][t.seq]})
		}
	})
}

// moveQueries sends the query rows of this rank's attention units to the
// ranks holding cached keys of their ranges, computes the partials other
// ranks ask of it, returns them, and merges what comes back.
func (w *cspsWorker) moveQueries(ctx context.Context, l, wd int) error {
	p, rk := w.p, w.rk
	cfg, st := rk.e.cfg, &rk.st
	d, me, n := cfg.HeadDim, rk.id, p.n
	qs := cfg.Heads * d
	ch := p.chunks[me]
	qc := (ch.QHi - ch.QLo) * d
	resizeInts(&w.sendCounts, n)
	resizeInts(&w.recvCounts, n)
	total, rtotal := 0, 0
	for g := range n {
		w.sendCounts[g] = reqHeads(p.reqs[me][g]) * d
		w.recvCounts[g] = reqHeads(p.reqs[g][me]) * d
		total += w.sendCounts[g]
		rtotal += w.recvCounts[g]
	}
	grow(&w.send, total)
	grow(&w.recv, rtotal)
	off := 0
	for g := range n {
		for _, rq := range p.reqs[me][g] {
			t := &p.toks[rq.tok]
			for h := rq.qlo; h < rq.qhi; h++ {
				var q []float32
				if t.sp {
					q = w.rows[t.spOrd*wd+(h-ch.QLo)*d:]
				} else {
					q = st.q[t.row*qs+h*d:]
				}
				off += copy(w.send[off:off+d], q[:d])
			}
		}
	}
	world := rk.e.world.Comm(me)
	if err := rk.timed(func() error {
		return world.AllToAllV(ctx, w.send[:total], w.sendCounts, w.recv[:rtotal], w.recvCounts)
	}); err != nil {
		return err
	}
	// Partials for the others: [O (d), LSE] per requested head, computed
	// for a request's heads that share a KV head together.
	group := cfg.Heads / cfg.KVHeads
	units := w.units[:0]
	qoff, roff := 0, 0
	for c := range n {
		for _, rq := range p.reqs[c][me] {
			for h := rq.qlo; h < rq.qhi; {
				e := min(rq.qhi, (h/group+1)*group)
				units = append(units, cspsUnit{tok: rq.tok, head: h, heads: e - h, q: qoff, out: roff})
				qoff += (e - h) * d
				roff += (e - h) * (d + 1)
				h = e
			}
		}
	}
	w.units = units
	grow(&w.part, roff)
	scale := float32(1 / math.Sqrt(float64(d)))
	rk.e.pool.Run(len(units), func(lo, hi int) {
		sc := getScratch()
		defer putScratch(sc)
		out, lse := make([]float32, group*d), make([]float32, group)
		for _, u := range units[lo:hi] {
			t, g := &p.toks[u.tok], u.heads
			attendGroup(sc, out[:g*d], w.recv[u.q:u.q+g*d], g, rk.cache, l, p.tables[me][t.seq], u.head/group, t.from, t.mid, scale, lse[:g])
			for i := range g {
				at := u.out + i*(d+1)
				copy(w.part[at:at+d], out[i*d:(i+1)*d])
				w.part[at+d] = lse[i]
			}
		}
	})
	for g := range n {
		w.sendCounts[g] = reqHeads(p.reqs[g][me]) * (d + 1)
		w.recvCounts[g] = reqHeads(p.reqs[me][g]) * (d + 1)
	}
	rtotal = reqHeadsAll(p.reqs[me]) * (d + 1)
	grow(&w.recv, rtotal)
	if err := rk.timed(func() error {
		return world.AllToAllV(ctx, w.part[:roff], w.sendCounts, w.recv[:rtotal], w.recvCounts)
	}); err != nil {
		return err
	}
	off = 0
	for g := range n {
		for _, rq := range p.reqs[me][g] {
			t := &p.toks[rq.tok]
			for h := rq.qlo; h < rq.qhi; h++ {
				o, lse := w.recv[off:off+d], w.recv[off+d]
				off += d + 1
				if t.sp {
					k, j := t.spOrd, h-ch.QLo
					w.spLse[k*(qc/d)+j] = mergePartial(w.spOut[k*qc+j*d:k*qc+(j+1)*d], w.spLse[k*(qc/d)+j], o, lse)
				} else {
					i := t.row*cfg.Heads + h
					w.locLse[i] = mergePartial(st.attn[t.row*qs+h*d:t.row*qs+(h+1)*d], w.locLse[i], o, lse)
				}
			}
		}
	}
	return nil
}

// cspsUnit is the partials a holder computes for another rank of one
// token's query heads [head, head+heads), which share a KV head: their
// queries at recv[q:], d apart, their [O, LSE] at part[out:], d+1 apart.
type cspsUnit struct{ tok, head, heads, q, out int }

func reqHeads(rs []cspsReq) int {
	n := 0
	for _, r := range rs {
		n += r.qhi - r.qlo
	}
	return n
}

func reqHeadsAll(by [][]cspsReq) int {
	n := 0
	for _, rs := range by {
		n += reqHeads(rs)
	}
	return n
}

// packOut fills b for the second all-to-all of SP-NTP over the SP
// tokens [lo, hi): this rank's heads of each token go back to the
// token's owner.
func (w *cspsWorker) packOut(b *a2aBufs, lo, hi int) (total, rtotal int) {
	p, rk := w.p, w.rk
	d, me, n := rk.e.cfg.HeadDim, rk.id, p.n
	my := p.chunks[me]
	qc := (my.QHi - my.QLo) * d
	resizeInts(&b.sc, n)
	resizeInts(&b.rc, n)
	mine := len(p.ownedIn(me, lo, hi))
	for o := range n {
		b.sc[o] = len(p.ownedIn(o, lo, hi)) * qc
		c := p.chunks[o]
		b.rc[o] = mine * (c.QHi - c.QLo) * d
		total += b.sc[o]
		rtotal += b.rc[o]
	}
	grow(&b.send, total)
	grow(&b.recv, rtotal)
	off := 0
	for o := range n {
		for _, ti := range p.ownedIn(o, lo, hi) {
			k := p.toks[ti].spOrd
			off += copy(b.send[off:off+qc], w.spOut[k*qc:(k+1)*qc])
		}
	}
	return total, rtotal
}

// unpackOut places every rank's heads of this rank's SP tokens [lo, hi)
// in its attention output.
func (w *cspsWorker) unpackOut(b *a2aBufs, lo, hi int) {
	p, rk := w.p, w.rk
	cfg, st := rk.e.cfg, &rk.st
	d := cfg.HeadDim
	qs := cfg.Heads * d
	mine := p.ownedIn(rk.id, lo, hi)
	off := 0
	for j := range p.n {
		c := p.chunks[j]
		cw := (c.QHi - c.QLo) * d
		for _, ti := range mine {
			r := p.toks[ti].row
			off += copy(st.attn[r*qs+c.QLo*d:r*qs+c.QLo*d+cw], b.recv[off:off+cw])
		}
	}
}

// returnOutputs is the second all-to-all of SP-NTP over every SP token.
func (w *cspsWorker) returnOutputs(ctx context.Context) error {
	nsp := len(w.p.spToks)
	total, rtotal := w.packOut(&w.b2, 0, nsp)
	g := w.rk.e.world.Comm(w.rk.id)
	if err := w.rk.timed(func() error {
		return g.AllToAllV(ctx, w.b2.send[:total], w.b2.sc, w.b2.recv[:rtotal], w.b2.rc)
	}); err != nil {
		return err
	}
	w.unpackOut(&w.b2, 0, nsp)
	return nil
}

// mergePartial merges the partial (o, lo) over a disjoint key set into
// (out, lse) and returns the merged log-sum-exp: out = (e^{lse−m}·out +
// e^{lo−m}·o) / (e^{lse−m} + e^{lo−m}), m the larger of the two. A partial
// over no keys (−Inf) changes nothing.
func mergePartial(out []float32, lse float32, o []float32, lo float32) float32 {
	if math.IsInf(float64(lo), -1) {
		return lse
	}
	if math.IsInf(float64(lse), -1) {
		copy(out, o)
		return lo
	}
	m := max(lse, lo)
	a, b := math.Exp(float64(lse-m)), math.Exp(float64(lo-m))
	s := a + b
	fa, fb := float32(a/s), float32(b/s)
	for i := range out {
		out[i] = out[i]*fa + o[i]*fb
	}
	return m + float32(math.Log(s))
}

// pipeComms are the rank's handles on two groups of every rank, labelled
// in and out: a pipeline's two directions, each FIFO, running beside
// each other.
func (w *cspsWorker) pipeComms(in, out string) (*comm.Comm, *comm.Comm, error) {
	all := make([]int, w.p.n)
	for r := range all {
		all[r] = r
	}
	world := w.rk.e.world
	gi, err := world.Group(in, all...)
	if err != nil {
		return nil, nil, err
	}
	gout, err := world.Group(out, all...)
	if err != nil {
		return nil, nil, err
	}
	return gi.Comm(w.rk.id), gout.Comm(w.rk.id), nil
}

// pipelined runs SP-NTP's attention over the step's SP tokens in
// micro-partitions along the sequence (R27–R30): partition i's first
// all-to-all is in flight while the rank attends partition i−1, and
// partition i−1's second all-to-all while it attends partition i. The
// two directions run on two groups of the same ranks, each FIFO (R29).
// Partition i's queries see only keys of partitions ≤ i, which have
// arrived, so every row is final when it is sent back (R32: finished
// rows only, no partial merge) and equals the unpipelined row to the bit.
// QKV is computed once for the rank's rows before the pipeline (R30).
func (w *cspsWorker) pipelined(ctx context.Context, l, wd, qc, kc int) error {
	p, rk := w.p, w.rk
	nsp := len(p.spToks)
	m := min(p.micro, nsp)
	bound := func(i int) int { return parallel.Even(nsp, m, i).Lo }
	cq, co, err := w.pipeComms("csps-qkv", "csps-out")
	if err != nil {
		return err
	}
	start := func(c *comm.Comm, b *a2aBufs, pack func(*a2aBufs, int, int) (int, int), lo, hi int) *comm.Pending {
		total, rtotal := pack(b, lo, hi)
		return c.Start(ctx, func(ctx context.Context, c *comm.Comm) error {
			return c.AllToAllV(ctx, b.send[:total], b.sc, b.recv[:rtotal], b.rc)
		})
	}
	wait := func(pd *comm.Pending) error { return rk.timed(pd.Wait) }
	inQ := start(cq, &w.b1, w.packQKV, bound(0), bound(1))
	var out *comm.Pending
	for i := range m {
		lo, hi := bound(i), parallel.Even(nsp, m, i).Hi
		if err := wait(inQ); err != nil {
			if out != nil {
				_ = out.Wait()
			}
			return err
		}
		w.unpackQKV(&w.b1, lo, hi)
		if i+1 < m {
			inQ = start(cq, &w.b1, w.packQKV, bound(i+1), parallel.Even(nsp, m, i+1).Hi)
		}
		w.local(l, wd, qc, kc, lo, hi, false)
		if out != nil {
			if err := wait(out); err != nil {
				if i+1 < m {
					_ = inQ.Wait()
				}
				return err
			}
			pl := parallel.Even(nsp, m, i-1)
			w.unpackOut(&w.b2, pl.Lo, pl.Hi)
		}
		out = start(co, &w.b2, w.packOut, lo, hi)
	}
	if err := wait(out); err != nil {
		return err
	}
	last := parallel.Even(nsp, m, m-1)
	w.unpackOut(&w.b2, last.Lo, last.Hi)
	return nil
}
