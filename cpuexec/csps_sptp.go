package cpuexec

import (
	"context"
	"math"
	"sync/atomic"

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
// step, and counted by CSPS.SPTPCopyBytes (1/N of W_O per rank).
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
// the largest logit and greedy tokens to equality.

// tpLayer is one layer's SP-TP weights on one rank.
type tpLayer struct {
	wq, wk, wv *tensor.Weights // views: the chunk's rows of the full W_Q, W_K, W_V
	wo         *tensor.Weights // the chunk's columns of W_O: a copy
}

// spTP is a worker's SP-TP state and scratch.
type spTP struct {
	layers   []tpLayer     // built on the first SP-TP step
	copied   *atomic.Int64 // the executor's count of W_O copy bytes
	x        []float32     // [SP-TP tokens, hidden] gathered, tpGather order
	q, k, v  []float32     // [SP-TP tokens, chunk widths] projections
	cos, sin []float32     // [SP-TP tokens, head_dim/2] RoPE angles
	send     []float32     // [own SP-TP tokens, hidden] when it must pack them
	a        []float32     // [SP-TP tokens, chunk q] attention output, tpGather order
	part     []float32     // [SP-TP tokens, hidden] partial O projection
	recv     []float32     // [own SP-TP tokens, hidden] reduced
	counts   []int
}

// buildTP lays out the step's SP-TP tokens by owner (the all-gather's
// row order) and marks the ranks all of whose rows run SP-TP.
func (p *cspsPlan) buildTP() {
	resize(&p.tpOwnAll, p.n)
	for r := range p.n {
		all := true
		for _, ti := range p.own[r] {
			if p.toks[ti].tp {
				p.tpGather = append(p.tpGather, ti)
			} else {
				all = false
			}
		}
		p.tpOwnAll[r] = all && p.tpCounts[r] > 0
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

// tpAngles fills the RoPE angles of the step's SP-TP tokens (once per
// step: they are the same in every layer).
func (w *cspsWorker) tpAngles() {
	p, e := w.p, w.rk.e
	half := e.cfg.HeadDim / 2
	n := len(p.tpGather)
	grow(&w.tp.cos, n*half)
	grow(&w.tp.sin, n*half)
	e.pool.Run(n, func(lo, hi int) {
		for g := lo; g < hi; g++ {
			pos := float64(p.toks[p.tpGather[g]].pos)
			for j, f := range e.invFreq {
				s, c := math.Sincos(pos * f)
				w.tp.cos[g*half+j], w.tp.sin[g*half+j] = float32(c), float32(s)
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

// gatherTP is SP-TP's first half for layer l: all-gather the SP-TP
// tokens' normed hidden states, project them onto the rank's head chunk
// and lay q, k and v out as SP-NTP's first all-to-all does (w.rows, by
// spOrd), ready for local and moveQueries.
func (w *cspsWorker) gatherTP(ctx context.Context, l int) error {
	p, rk := w.p, w.rk
	cfg, st, t := rk.e.cfg, &rk.st, &w.tp
	h, d, me := cfg.Hidden, cfg.HeadDim, rk.id
	ch := p.chunks[me]
	qc, kc := (ch.QHi-ch.QLo)*d, (ch.KVHi-ch.KVLo)*d
	wd := qc + 2*kc
	n := len(p.tpGather)
	resizeInts(&t.counts, p.n)
	for r := range p.n {
		t.counts[r] = p.tpCounts[r] * h
	}
	own := p.tpCounts[me]
	send := st.xn[:own*h] // every row it owns is SP-TP, in order
	if !p.tpOwnAll[me] {
		grow(&t.send, own*h)
		j := 0
		for r, ti := range p.own[me] {
			if p.toks[ti].tp {
				copy(t.send[j*h:(j+1)*h], st.xn[r*h:(r+1)*h])
				j++
			}
		}
		send = t.send[:own*h]
	}
	grow(&t.x, n*h)
	world := rk.e.world.Comm(me)
	if err := rk.timed(func() error { return world.AllGatherV(ctx, send, t.x, t.counts) }); err != nil {
		return err
	}
	tw := &w.tpWeights(rk.sh)[l]
	grow(&t.q, n*qc)
	grow(&t.k, n*kc)
	grow(&t.v, n*kc)
	pool := rk.e.pool
	tensor.MatMulW(pool, t.q, t.x, tw.wq, n)
	tensor.MatMulW(pool, t.k, t.x, tw.wk, n)
	tensor.MatMulW(pool, t.v, t.x, tw.wv, n)
	lw := rk.layer(l)
	eps := float32(cfg.RMSNormEps)
	half := d / 2
	pool.Run(n, func(lo, hi int) {
		for g := lo; g < hi; g++ {
			k := p.toks[p.tpGather[g]].spOrd
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
			cos, sin := t.cos[g*half:(g+1)*half], t.sin[g*half:(g+1)*half]
			positionRow(rq, lw.QNorm, cos, sin, eps)
			positionRow(rkk, lw.KNorm, cos, sin, eps)
		}
	})
	return nil
}

// reduceTP is SP-TP's second half for layer l: the rank's heads' output
// of every SP-TP token times its chunk's columns of W_O, reduce-scattered
// along the sequence; each rank adds its own rows of the sum to their
// residual (and zeroes their attention rows, which its own O projection
// then adds as nothing, when it also owns other rows).
func (w *cspsWorker) reduceTP(ctx context.Context, l int) error {
	p, rk := w.p, w.rk
	cfg, st, t := rk.e.cfg, &rk.st, &w.tp
	h, d, me := cfg.Hidden, cfg.HeadDim, rk.id
	ch := p.chunks[me]
	qc := (ch.QHi - ch.QLo) * d
	n := len(p.tpGather)
	grow(&t.a, n*qc)
	for g, ti := range p.tpGather {
		k := p.toks[ti].spOrd
		copy(t.a[g*qc:(g+1)*qc], w.spOut[k*qc:(k+1)*qc])
	}
	grow(&t.part, n*h)
	tensor.MatMulW(rk.e.pool, t.part, t.a, w.tp.layers[l].wo, n)
	own := p.tpCounts[me]
	grow(&t.recv, own*h)
	world := rk.e.world.Comm(me)
	if err := rk.timed(func() error { return world.ReduceScatterV(ctx, t.part, t.recv, t.counts) }); err != nil {
		return err
	}
	qs := cfg.Heads * d
	j := 0
	for r, ti := range p.own[me] {
		if !p.toks[ti].tp {
			continue
		}
		tensor.Add(st.x[r*h:(r+1)*h], t.recv[j*h:(j+1)*h])
		if !p.tpOwnAll[me] {
			clear(st.attn[r*qs : (r+1)*qs])
		}
		j++
	}
	return nil
}

// SPTPCopyBytes is the weight memory the ranks hold beyond the full
// weights for SP-TP: each rank's copy of its head chunk's columns of W_O,
// made on its first SP-TP step (0 before).
func (c *CSPS) SPTPCopyBytes() int64 { return c.tpCopied.Load() }
