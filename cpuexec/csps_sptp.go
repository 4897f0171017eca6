package cpuexec

import (
	"context"
	"math"
	"sort"
	"sync/atomic"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// SP-TP prefill (paper 002, §3.2.1, R7–R10) on the CSPS executor's ranks.
//
// The TP group is the executor's N ranks and rank r's heads are the
// chunk SP-NTP gives it (cspsPlan.chunks: query heads split as evenly as
// possible, with the KV heads they read), so N need not divide the heads
// and KV heads are recomputed by every rank whose chunk reads them. Per
// layer, for the step's SP-TP tokens:
//
//  1. All-gather (comm.AllGatherV) the tokens' hidden states after the
//     attention norm: every rank then holds the [L, d] of every SP-TP
//     token of the step, L·d·(N−1) elements over the group.
//  2. Each rank multiplies them by its head chunk's rows of W_Q, W_K and
//     W_V (views of the full weights it holds, tensor.Weights.Rows: no
//     copy), adds the biases and applies the q/k norms and RoPE, and
//     attends causally with its heads over the prompt's in-step keys (and
//     its earlier chunks' cached keys, by moving the queries as SP-NTP
//     does), exactly the code SP-NTP runs after its first all-to-all.
//  3. Its heads' output times its chunk's columns of W_O (the row shard
//     W_L^i of the paper) is a partial [L, d]; a reduce-scatter along the
//     sequence (comm.ReduceScatterV, adding the N partials in rank order)
//     leaves each rank its own rows of O_L = Σ_i O^i·W_L^i, another
//     L·d·(N−1) elements: 2·L·d·(N−1) per layer in all, App A's count.
//
// W_O's column shard is the one copy (rows of W_O's [d, heads·d_h] are
// not contiguous in its columns): made once per rank, on its first SP-TP
// step, in the model's format, and counted by CSPS.SPTPCopyBytes (1/N of
// W_O per rank; a Q8_0 copy is exact when head_dim is a multiple of 32,
// re-quantized otherwise, tensor.Weights.Cols).
//
// Choices, stated: the MLP runs on each rank's own rows with the full
// weights, as SP-NTP's does: the CPU deployment holds full weights on
// every rank, so the paper's TP-sharded MLP and its second all-gather /
// reduce-scatter pair are not needed (App A does not count them either).
// KV stays sharded along the sequence: each rank computes the K and V of
// every KV head for its own rows with the full weights (and, when every
// row it owns runs SP-TP, skips their q and the O projection) and stores
// them, so a later chunk or a decode step finds the cache laid out as
// after SP-NTP. The in-step attention uses the K and V computed from the
// gathered rows; both are the same products of the same inputs and differ
// at most in float32 rounding (tensor.MatMulW's depends on the rows it
// gets).
//
// Exactness: not bitwise. The reduce-scatter adds N partial products,
// each over one head chunk's columns of W_O, whereas one rank's GEMM
// accumulates all of W_O's columns in its own blocked order, so the O
// projection rounds differently; tests hold logits to SP-NTP's 1e-4 of
// the largest logit and greedy tokens to equality. Pipelined
// (tpPipelined, R31), a step's rows are the unpipelined step's bit for
// bit.

// tpLayer is one layer's SP-TP weights on one rank.
type tpLayer struct {
	wq, wk, wv *tensor.Weights // views: the chunk's rows of the full W_Q, W_K, W_V
	wo         *tensor.Weights // the chunk's columns of W_O: a copy
}

// spTP is a worker's SP-TP state and scratch. The per-token buffers are
// indexed by gathered row (a span's rows follow the earlier spans', by
// owner within one), so the micro-partitions in flight never share one.
type spTP struct {
	layers   []tpLayer     // built on the first SP-TP step
	copied   *atomic.Int64 // the executor's count of W_O copy bytes
	spans    []tpSpan      // the step's micro-partitions (one without pipelining)
	x        []float32     // [SP-TP tokens, hidden] gathered
	q, k, v  []float32     // [SP-TP tokens, chunk widths] projections
	cos, sin []float32     // [SP tokens, head_dim/2] RoPE angles, by spOrd
	send     []float32     // [own SP-TP tokens, hidden] when it must pack them
	a        []float32     // [SP-TP tokens, chunk q] attention output
	part     []float32     // [SP-TP tokens, hidden] partial O projection
	recv     []float32     // [own SP-TP tokens, hidden] reduced
}

// tpSpan is the SP-TP tokens with spOrd in [lo, hi): one micro-partition.
type tpSpan struct {
	lo, hi int
	base   int   // gathered row of its first token: SP-TP tokens of the spans before
	rows   int   // its SP-TP tokens
	mine   int   // index among this rank's SP-TP tokens of its first one in the span
	own    int   // this rank's SP-TP tokens in the span
	counts []int // per rank: elements it contributes (its rows × hidden)
}

// buildTP lists the step's SP-TP tokens by owner and marks the ranks all
// of whose rows run SP-TP.
func (p *cspsPlan) buildTP() {
	resize(&p.tpOwnAll, p.n)
	resize(&p.tpByOwner, p.n)
	p.anyTP = false
	for r := range p.n {
		all := true
		p.tpByOwner[r] = p.tpByOwner[r][:0]
		for _, ti := range p.own[r] {
			if p.toks[ti].tp {
				p.tpByOwner[r] = append(p.tpByOwner[r], ti)
			} else {
				all = false
			}
		}
		p.tpOwnAll[r] = all && len(p.tpByOwner[r]) > 0
		p.anyTP = p.anyTP || len(p.tpByOwner[r]) > 0
	}
}

// tpIn is rank o's SP-TP tokens with spOrd in [lo, hi) and the index of
// the first among all of its SP-TP tokens.
func (p *cspsPlan) tpIn(o, lo, hi int) ([]int, int) {
	s := p.tpByOwner[o]
	a := sort.Search(len(s), func(i int) bool { return p.toks[s[i]].spOrd >= lo })
	e := sort.Search(len(s), func(i int) bool { return p.toks[s[i]].spOrd >= hi })
	return s[a:e], a
}

// tpSpan fills sp for the SP-TP tokens with spOrd in [lo, hi), whose
// gathered rows start at base.
func (w *cspsWorker) tpSpan(sp *tpSpan, lo, hi, base int) {
	p, h := w.p, w.rk.e.cfg.Hidden
	sp.lo, sp.hi, sp.base, sp.rows = lo, hi, base, 0
	resizeInts(&sp.counts, p.n)
	for o := range p.n {
		in, first := p.tpIn(o, lo, hi)
		sp.counts[o] = len(in) * h
		sp.rows += len(in)
		if o == w.rk.id {
			sp.mine, sp.own = first, len(in)
		}
	}
}

// tpWeights returns the rank's SP-TP weights, cutting them from the full
// weights of sh on first use.
func (w *cspsWorker) tpWeights(sh *parallel.Shard) []tpLayer {
	t := &w.tp
	if t.layers != nil {
		return t.layers
	}
	cfg, d := w.rk.e.cfg, w.rk.e.cfg.HeadDim
	ch := w.p.chunks[w.rk.id]
	t.layers = make([]tpLayer, cfg.Layers)
	var bytes int64
	for l := range t.layers {
		ls := &sh.Layers[l]
		t.layers[l] = tpLayer{
			wq: ls.WQ.Rows(ch.QLo*d, ch.QHi*d),
			wk: ls.WK.Rows(ch.KVLo*d, ch.KVHi*d),
			wv: ls.WV.Rows(ch.KVLo*d, ch.KVHi*d),
			wo: ls.WO.Cols(w.rk.e.pool, ch.QLo*d, ch.QHi*d),
		}
		if t.layers[l].wo != ls.WO {
			bytes += int64(t.layers[l].wo.Bytes())
		}
	}
	t.copied.Add(bytes)
	return t.layers
}

// tpPrepare sizes the step's SP-TP buffers and fills the RoPE angles of
// its SP-TP tokens (once per step: they are the same in every layer).
func (w *cspsWorker) tpPrepare() {
	p, e, t := w.p, w.rk.e, &w.tp
	cfg := e.cfg
	h, d, half := cfg.Hidden, cfg.HeadDim, cfg.HeadDim/2
	ch := p.chunks[w.rk.id]
	qc, kc := (ch.QHi-ch.QLo)*d, (ch.KVHi-ch.KVLo)*d
	n, own, nsp := 0, len(p.tpByOwner[w.rk.id]), len(p.spToks)
	for _, s := range p.tpByOwner {
		n += len(s)
	}
	grow(&t.x, n*h)
	grow(&t.q, n*qc)
	grow(&t.k, n*kc)
	grow(&t.v, n*kc)
	grow(&t.a, n*qc)
	grow(&t.part, n*h)
	grow(&t.send, own*h)
	grow(&t.recv, own*h)
	grow(&t.cos, nsp*half)
	grow(&t.sin, nsp*half)
	e.pool.Run(nsp, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			tok := &p.toks[p.spToks[k]]
			if !tok.tp {
				continue
			}
			pos := float64(tok.pos)
			for j, f := range e.invFreq {
				s, c := math.Sincos(pos * f)
				t.cos[k*half+j], t.sin[k*half+j] = float32(c), float32(s)
			}
		}
	})
}

// ownKV projects the rank's own rows onto K and V of every KV head with
// the full weights (no q: every row it owns runs SP-TP), for its cache.
func (w *cspsWorker) ownKV(l int) {
	rk := w.rk
	st, lw, pool := &rk.st, rk.layer(l), rk.e.pool
	h := rk.e.cfg.Hidden
	_, ks := rk.widths()
	tensor.MatMulW(pool, st.k[:st.nl*ks], st.xn[:st.nl*h], lw.WK, st.nl)
	tensor.MatMulW(pool, st.v[:st.nl*ks], st.xn[:st.nl*h], lw.WV, st.nl)
	eps := float32(rk.e.cfg.RMSNormEps)
	pool.Run(st.real, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			k, v := st.k[i*ks:(i+1)*ks], st.v[i*ks:(i+1)*ks]
			if lw.BK != nil {
				tensor.Add(k, lw.BK)
				tensor.Add(v, lw.BV)
			}
			rk.positionHeads(k, lw.KNorm, i, eps)
		}
	})
}

// tpGather returns the all-gather of span sp's normed hidden states (the
// rank's own rows packed, or a view of them when it owns nothing else).
func (w *cspsWorker) tpGather(sp *tpSpan) func(context.Context, *comm.Comm) error {
	p, rk, t := w.p, w.rk, &w.tp
	h, st := rk.e.cfg.Hidden, &rk.st
	mine := p.tpByOwner[rk.id][sp.mine : sp.mine+sp.own]
	var send []float32
	if p.tpOwnAll[rk.id] { // its rows are its SP-TP tokens, in order
		send = st.xn[sp.mine*h : (sp.mine+sp.own)*h]
	} else {
		send = t.send[sp.mine*h : (sp.mine+sp.own)*h]
		for j, ti := range mine {
			r := p.toks[ti].row
			copy(send[j*h:(j+1)*h], st.xn[r*h:(r+1)*h])
		}
	}
	recv := t.x[sp.base*h : (sp.base+sp.rows)*h]
	return func(ctx context.Context, c *comm.Comm) error { return c.AllGatherV(ctx, send, recv, sp.counts) }
}

// eachRow calls f with each gathered row of span sp and its token.
func (w *cspsWorker) eachRow(sp *tpSpan, f func(g, ti int)) {
	g := sp.base
	for o := range w.p.n {
		in, _ := w.p.tpIn(o, sp.lo, sp.hi)
		for _, ti := range in {
			f(g, ti)
			g++
		}
	}
}

// tpProject multiplies span sp's gathered rows by the rank's head chunk
// of W_Q, W_K and W_V (layer l), adds the biases, applies the q/k norms
// and RoPE, and lays q, k and v out as SP-NTP's first all-to-all does
// (w.rows, by spOrd), ready for local and moveQueries.
func (w *cspsWorker) tpProject(l int, sp *tpSpan) {
	p, rk, t := w.p, w.rk, &w.tp
	cfg := rk.e.cfg
	h, d := cfg.Hidden, cfg.HeadDim
	ch := p.chunks[rk.id]
	qc, kc := (ch.QHi-ch.QLo)*d, (ch.KVHi-ch.KVLo)*d
	wd, a, e := qc+2*kc, sp.base, sp.base+sp.rows
	tw := &w.tpWeights(rk.sh)[l]
	pool := rk.e.pool
	tensor.MatMulW(pool, t.q[a*qc:e*qc], t.x[a*h:e*h], tw.wq, sp.rows)
	tensor.MatMulW(pool, t.k[a*kc:e*kc], t.x[a*h:e*h], tw.wk, sp.rows)
	tensor.MatMulW(pool, t.v[a*kc:e*kc], t.x[a*h:e*h], tw.wv, sp.rows)
	lw := rk.layer(l)
	eps := float32(cfg.RMSNormEps)
	half := d / 2
	w.eachRow(sp, func(g, ti int) {
		k := p.toks[ti].spOrd
		row := w.rows[k*wd : (k+1)*wd]
		rq, rkk, rv := row[:qc], row[qc:qc+kc], row[qc+kc:]
		copy(rq, t.q[g*qc:(g+1)*qc])
		copy(rkk, t.k[g*kc:(g+1)*kc])
		copy(rv, t.v[g*kc:(g+1)*kc])
		if lw.BQ != nil {
			tensor.Add(rq, lw.BQ[ch.QLo*d:ch.QHi*d])
			tensor.Add(rkk, lw.BK[ch.KVLo*d:ch.KVHi*d])
			tensor.Add(rv, lw.BV[ch.KVLo*d:ch.KVHi*d])
		}
		cos, sin := t.cos[k*half:(k+1)*half], t.sin[k*half:(k+1)*half]
		positionRow(rq, lw.QNorm, cos, sin, eps)
		positionRow(rkk, lw.KNorm, cos, sin, eps)
	})
}

// tpOutProj multiplies the rank's heads' output of span sp by its
// chunk's columns of W_O (layer l) and returns the reduce-scatter of the
// partials along the sequence.
func (w *cspsWorker) tpOutProj(l int, sp *tpSpan) func(context.Context, *comm.Comm) error {
	p, rk, t := w.p, w.rk, &w.tp
	h, d := rk.e.cfg.Hidden, rk.e.cfg.HeadDim
	ch := p.chunks[rk.id]
	qc := (ch.QHi - ch.QLo) * d
	a, e := sp.base, sp.base+sp.rows
	w.eachRow(sp, func(g, ti int) {
		k := p.toks[ti].spOrd
		copy(t.a[g*qc:(g+1)*qc], w.spOut[k*qc:(k+1)*qc])
	})
	tensor.MatMulW(rk.e.pool, t.part[a*h:e*h], t.a[a*qc:e*qc], t.layers[l].wo, sp.rows)
	send, recv := t.part[a*h:e*h], t.recv[sp.mine*h:(sp.mine+sp.own)*h]
	return func(ctx context.Context, c *comm.Comm) error { return c.ReduceScatterV(ctx, send, recv, sp.counts) }
}

// tpAddBack adds the rank's rows of span sp's reduced O projection to
// their residual (and zeroes their attention rows, which its own O
// projection then adds as nothing, when it also owns other rows).
func (w *cspsWorker) tpAddBack(sp *tpSpan) {
	p, rk, t := w.p, w.rk, &w.tp
	cfg, st := rk.e.cfg, &rk.st
	h, qs := cfg.Hidden, cfg.Heads*cfg.HeadDim
	for j, ti := range p.tpByOwner[rk.id][sp.mine : sp.mine+sp.own] {
		r := p.toks[ti].row
		tensor.Add(st.x[r*h:(r+1)*h], t.recv[(sp.mine+j)*h:(sp.mine+j+1)*h])
		if !p.tpOwnAll[rk.id] {
			clear(st.attn[r*qs : (r+1)*qs])
		}
	}
}

// tpWhole is the span of every SP token, for a step that runs SP-TP
// without pipelining.
func (w *cspsWorker) tpWhole() *tpSpan {
	resize(&w.tp.spans, 1)
	sp := &w.tp.spans[0]
	w.tpSpan(sp, 0, len(w.p.spToks), 0)
	return sp
}

// tpMicro is the number of SP-TP micro-partitions of the step: up to
// CSPSOptions.MicroPartitions, each of at least tensor.RowIndependentMin
// tokens so that every projection multiplies its rows as the whole
// step's would (bit for bit); 1 when the step also has SP-NTP or CSA
// tokens or moves queries to cached keys.
func (w *cspsWorker) tpMicro() int {
	p := w.p
	if p.micro < 2 || p.anyNTP || p.anyReq || len(p.csaToks) > 0 {
		return 1
	}
	return max(1, min(p.micro, len(p.spToks)/tensor.RowIndependentMin))
}

// tpPipelined runs layer l's attention for a step of SP-TP tokens only
// in m micro-partitions along the sequence (R31): partition i+1's
// all-gather is in flight while the rank projects and attends partition
// i, and partition i's reduce-scatter while it computes partition i+1.
// The two directions run on two groups of the same ranks, each FIFO.
// Partition i's queries see only keys of partitions ≤ i, which have
// arrived, so each row is final when it is reduce-scattered; each
// partition's projections multiply at least tensor.RowIndependentMin
// rows, so every row equals the unpipelined one to the bit.
func (w *cspsWorker) tpPipelined(ctx context.Context, l, wd, qc, kc, m int) error {
	p, rk := w.p, w.rk
	nsp := len(p.spToks)
	resize(&w.tp.spans, m)
	base := 0
	for i := range m {
		s := parallel.Even(nsp, m, i)
		w.tpSpan(&w.tp.spans[i], s.Lo, s.Hi, base)
		base += w.tp.spans[i].rows
	}
	cag, crs, err := w.pipeComms("csps-tp-ag", "csps-tp-rs")
	if err != nil {
		return err
	}
	wait := func(pd *comm.Pending) error { return rk.timed(pd.Wait) }
	w.local(l, wd, qc, kc, 0, 0, true)
	in := cag.Start(ctx, w.tpGather(&w.tp.spans[0]))
	var out *comm.Pending
	for i := range m {
		sp := &w.tp.spans[i]
		if err := wait(in); err != nil {
			if out != nil {
				_ = out.Wait()
			}
			return err
		}
		if i+1 < m {
			in = cag.Start(ctx, w.tpGather(&w.tp.spans[i+1]))
		}
		w.tpProject(l, sp)
		w.local(l, wd, qc, kc, sp.lo, sp.hi, false)
		rs := w.tpOutProj(l, sp)
		if out != nil {
			if err := wait(out); err != nil {
				if i+1 < m {
					_ = in.Wait()
				}
				return err
			}
			w.tpAddBack(&w.tp.spans[i-1])
		}
		out = crs.Start(ctx, rs)
	}
	if err := wait(out); err != nil {
		return err
	}
	w.tpAddBack(&w.tp.spans[m-1])
	return nil
}

// SPTPCopyBytes is the weight memory the ranks hold beyond the full
// weights for SP-TP: each rank's copy of its head chunk's columns of W_O,
// made on its first SP-TP step (0 before).
func (c *CSPS) SPTPCopyBytes() int64 { return c.tpCopied.Load() }
