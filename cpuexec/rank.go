package cpuexec

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/lora"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// rank is one rank's state: its KV cache shard and per-step scratch. It
// implements forward.Ops with the CPU kernels and comm, and runs the one
// rank program (forward.Run) under every placement; the placement's shard
// says which heads, columns, vocabulary rows and layers it computes.
type rank struct {
	id       int
	e        *Executor
	cache    *kvcache.Cache
	st       rankState
	commTime time.Duration // time spent in collectives, waiting for peers included

	// The micro-batch being run: the shard, groups and pieces of the step.
	sh *parallel.Shard
	g  groups
	mb *micro
	ep *execPlacement // the step's held placement (its shards are the WaS owners')

	was  *wasCache    // SiDP's WaS slots, built on the first WaS step
	sidp sidpCounters // SiDP's work
}

// timed runs one collective and adds its duration to the rank's comm time.
func (rk *rank) timed(collective func() error) error {
	start := rk.e.clock.Now()
	err := collective()
	rk.commTime += rk.e.clock.Now().Sub(start)
	return err
}

// rankState holds one micro-batch's tables and the scratch buffers, grown
// to the largest micro-batch seen so steady-state steps allocate nothing.
type rankState struct {
	tokens []int // [T] token ids of the micro-batch, flattened
	tokSeq []int // [T] sequence index within the micro-batch
	tokPos []int // [T] position
	rowOut []int // [T] output logits row, or -1

	total   int  // T: real tokens in the micro-batch
	adapted bool // a sequence of the micro-batch has a LoRA adapter
	nl      int  // tokens per SP rank: ceil(T/SP), padding included
	first   int  // global index of this rank's first token: sp·nl
	real    int  // this rank's real (unpadded) tokens

	x, xn, tmp []float32 // [nl, hidden]
	q, k, v    []float32 // [nl, slice dims]
	send, recv []float32 // SP all-to-all buffers: [SP·nl, chunk q+k+v]
	attnC      []float32 // [SP·nl, chunk q] attention of this rank's chunk for every token
	back       []float32 // [SP·nl, chunk q] second all-to-all's receive buffer
	attn       []float32 // [nl, slice q]
	gate, up   []float32 // [nl, intermediate slice]
	cos, sin   []float32 // [nl, head_dim/2]
	hl, logits []float32 // [L, hidden], [L, vocab slice]
	gathered   []float32 // [L, vocab] all-gathered logits slices
	lrows      []int     // local rows with logits
	blocks     [][2]int  // attention's blocks of rows: first row, rows
	outRows    []int     // rows of the step's output this rank wrote
	counts     []int     // per TP member element counts

	loraT                         []float32 // [real, adapters' largest rank]: LoRA's x·Aᵀ per row
	casY                          []float32 // SiDP CaS: [nl, hidden] MLP output rows back from the owner
	casIn, casGate, casUp, casOut []float32 // SiDP CaS owner: staging [M, hidden], [M, inter slice] ×2, [M, hidden]
}

// groups are the communicators a rank uses under one placement; nil when the
// degree is 1.
type groups struct {
	tp, sp, pp *comm.Comm
	ffn        *comm.Comm // SiDP: the rank's FFN group (the ranks at its TP index, by replica); nil without pooling
}

func (rk *rank) groups(ep *execPlacement) (groups, error) {
	var g groups
	l, w, r := ep.placement, rk.e.world, rk.id
	get := func(kind string, members []int) (*comm.Comm, error) {
		if len(members) == 1 {
			return nil, nil
		}
		grp, err := w.Group(fmt.Sprintf("%s%v", kind, members), members...)
		if err != nil {
			return nil, err
		}
		return grp.Comm(r), nil
	}
	var err error
	if g.tp, err = get("tp", l.TPGroup(r)); err != nil {
		return g, err
	}
	if g.sp, err = get("sp", l.SPGroup(r)); err != nil {
		return g, err
	}
	stages := make([]int, l.Plan.PP)
	for s := range stages {
		stages[s] = l.Peer(r, s)
	}
	if g.pp, err = get("pp", stages); err != nil || !l.FFN.Pooled() {
		return g, err
	}
	g.ffn, err = get("sidp", l.FFNGroup(r))
	return g, err
}

// step runs this rank's part of one step: the rank program on each of its
// replica's micro-batches.
func (rk *rank) step(ctx context.Context, ep *execPlacement, job []micro) error {
	sh := ep.shards[rk.id]
	c := ep.placement.Coords[rk.id]
	g, err := rk.groups(ep)
	if err != nil {
		return err
	}
	shape := forward.Shape{
		First: c.PP == 0, Last: c.PP == ep.placement.Plan.PP-1, LayerLo: sh.Stage.Lo, LayerHi: sh.Stage.Hi,
		TP: ep.placement.Plan.TP, SP: ep.placement.Plan.SP,
	}
	rk.sh, rk.g, rk.ep = sh, g, ep
	defer func() { rk.sh, rk.mb = nil, nil }()
	var was *wasCache
	if rk.e.sidpStep.mode == parallel.FFNWaS {
		if was, err = rk.wasFor(ep); err != nil {
			return err
		}
	}
	for i := range job {
		rk.mb = &job[i]
		rk.prepare(rk.mb, sh)
		if was != nil {
			was.start(ctx, rk)
		}
		err := forward.Run(ctx, rk, shape)
		if was != nil {
			was.stop()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// prepare fills the micro-batch tables and sizes the scratch buffers.
func (rk *rank) prepare(mb *micro, sh *parallel.Shard) {
	cfg, st := rk.e.cfg, &rk.st
	st.tokens, st.tokSeq, st.tokPos, st.rowOut = st.tokens[:0], st.tokSeq[:0], st.tokPos[:0], st.rowOut[:0]
	for i, s := range mb.seqs {
		first := len(s.Tokens) - s.NumLogits
		for j, id := range s.Tokens {
			row := -1
			if j >= first {
				row = mb.rows[i] + j - first
			}
			st.tokens = append(st.tokens, id)
			st.tokSeq = append(st.tokSeq, i)
			st.tokPos = append(st.tokPos, s.Pos+j)
			st.rowOut = append(st.rowOut, row)
		}
	}
	st.total = len(st.tokens)
	st.adapted = false
	for _, s := range mb.seqs {
		st.adapted = st.adapted || s.Adapter > 0
	}
	st.nl = (st.total + sh.SPSize - 1) / sh.SPSize
	st.first = sh.SP * st.nl
	st.real = max(0, min(st.nl, st.total-st.first))

	h, d, nl, n := cfg.Hidden, cfg.HeadDim, st.nl, st.nl*sh.SPSize
	qs, ks := (sh.Slice.QHi-sh.Slice.QLo)*d, (sh.Slice.KVHi-sh.Slice.KVLo)*d
	qc, kc := (sh.Chunk.QHi-sh.Chunk.QLo)*d, (sh.Chunk.KVHi-sh.Chunk.KVLo)*d
	grow(&st.x, nl*h)
	grow(&st.xn, nl*h)
	grow(&st.tmp, nl*h)
	grow(&st.q, nl*qs)
	grow(&st.k, nl*ks)
	grow(&st.v, nl*ks)
	grow(&st.attn, nl*qs)
	grow(&st.gate, nl*sh.Inter.Len())
	grow(&st.up, nl*sh.Inter.Len())
	grow(&st.cos, nl*d/2)
	grow(&st.sin, nl*d/2)
	if sh.SPSize > 1 {
		grow(&st.send, n*(qc+2*kc))
		grow(&st.recv, n*(qc+2*kc))
		grow(&st.back, n*qc)
	}
	grow(&st.attnC, n*qc)

	half := d / 2
	for i := 0; i < st.real; i++ {
		p := float64(st.tokPos[st.first+i])
		for j, f := range rk.e.invFreq {
			s, c := math.Sincos(p * f)
			st.cos[i*half+j], st.sin[i*half+j] = float32(c), float32(s)
		}
	}
}

func grow(buf *[]float32, n int) {
	if cap(*buf) < n {
		*buf = make([]float32, n)
	}
	*buf = (*buf)[:n]
}

// Embed looks up this rank's tokens in its vocabulary slice; under TP the
// slices are summed by ReduceTP (each token's row lives on exactly one
// member).
func (rk *rank) Embed() {
	h, st, sh := rk.e.cfg.Hidden, &rk.st, rk.sh
	x := st.x[:st.nl*h]
	clear(x)
	for i := 0; i < st.real; i++ {
		id := st.tokens[st.first+i]
		if id >= sh.Vocab.Lo && id < sh.Vocab.Hi {
			sh.Embed.Row(id-sh.Vocab.Lo, x[i*h:(i+1)*h])
		}
	}
}

// BeginLayer checks the context and runs the tests' fault hook.
func (rk *rank) BeginLayer(ctx context.Context, l int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if f := rk.e.fault; f != nil {
		return f(ctx, rk.id, l-rk.sh.Stage.Lo)
	}
	return nil
}

// layer is the shard's weights of layer l (a global index).
func (rk *rank) layer(l int) *parallel.LayerShard { return &rk.sh.Layers[l-rk.sh.Stage.Lo] }

// widths are the rank's q and KV widths of its TP slice, in elements.
func (rk *rank) widths() (qs, ks int) {
	sl, d := rk.sh.Slice, rk.e.cfg.HeadDim
	return (sl.QHi - sl.QLo) * d, (sl.KVHi - sl.KVLo) * d
}

// AttnNorm writes xn = RMSNorm(x) with the layer's attention norm.
func (rk *rank) AttnNorm(l int) {
	rmsNormRows(rk.e.pool, rk.st.xn, rk.st.x, rk.layer(l).AttnNorm, rk.st.nl, float32(rk.e.cfg.RMSNormEps))
}

// MLPNorm writes xn = RMSNorm(x) with the layer's MLP norm.
func (rk *rank) MLPNorm(l int) {
	rmsNormRows(rk.e.pool, rk.st.xn, rk.st.x, rk.layer(l).MLPNorm, rk.st.nl, float32(rk.e.cfg.RMSNormEps))
}

// QKV projects xn onto the slice's q, k and v heads, with the adapters'
// updates of the rows whose sequences have one.
func (rk *rank) QKV(l int) {
	st, w, pool := &rk.st, rk.layer(l), rk.e.pool
	tensor.MatMulWs(pool, st.xn, st.nl, tensor.Projection{Y: st.q, W: w.WQ},
		tensor.Projection{Y: st.k, W: w.WK}, tensor.Projection{Y: st.v, W: w.WV})
	if st.adapted {
		h := rk.e.cfg.Hidden
		qs, ks := rk.widths()
		rk.lora(l, lora.Q, st.q, qs, st.xn, h)
		rk.lora(l, lora.K, st.k, ks, st.xn, h)
		rk.lora(l, lora.V, st.v, ks, st.xn, h)
	}
}

// Position adds the q/k/v biases and applies the q/k norms and RoPE to the
// rank's real rows.
func (rk *rank) Position(l int) {
	st, w := &rk.st, rk.layer(l)
	qs, ks := rk.widths()
	eps := float32(rk.e.cfg.RMSNormEps)
	rk.e.pool.Run(st.real, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			q, k, v := st.q[i*qs:(i+1)*qs], st.k[i*ks:(i+1)*ks], st.v[i*ks:(i+1)*ks]
			if w.BQ != nil {
				tensor.Add(q, w.BQ)
				tensor.Add(k, w.BK)
				tensor.Add(v, w.BV)
			}
			rk.positionHeads(q, w.QNorm, i, eps)
			rk.positionHeads(k, w.KNorm, i, eps)
		}
	})
}

// CacheWrite stores the keys and values the rank attends with: its own
// rows' without SP, every token's chunk after the SP all-to-all.
func (rk *rank) CacheWrite(l int) {
	st, li := &rk.st, l-rk.sh.Stage.Lo
	if rk.sh.SPSize == 1 {
		_, ks := rk.widths()
		for i := 0; i < st.real; i++ {
			t := st.first + i
			rk.cache.Put(li, rk.mb.seqs[st.tokSeq[t]].Blocks, st.tokPos[t], st.k[i*ks:(i+1)*ks], st.v[i*ks:(i+1)*ks])
		}
		return
	}
	qc, kc, wd := rk.chunkWidths()
	for t := 0; t < st.total; t++ {
		row := st.recv[t*wd : (t+1)*wd]
		rk.cache.Put(li, rk.mb.seqs[st.tokSeq[t]].Blocks, st.tokPos[t], row[qc:qc+kc], row[qc+kc:])
	}
}

// Attention attends with the chunk's query heads: from the projections
// directly without SP (the slice is the chunk), from the all-to-all's
// receive buffer with it.
func (rk *rank) Attention(l int) {
	st, li := &rk.st, l-rk.sh.Stage.Lo
	if rk.sh.SPSize == 1 {
		qs, _ := rk.widths()
		rk.attention(li, rk.mb, rk.sh, st.q, qs, st.attn, qs)
		return
	}
	qc, _, wd := rk.chunkWidths()
	rk.attention(li, rk.mb, rk.sh, st.recv, wd, st.attnC, qc)
	clear(st.attnC[st.total*qc : st.nl*rk.sh.SPSize*qc])
}

// OutProj projects the attention output back to the hidden size.
func (rk *rank) OutProj(l int) {
	st := &rk.st
	y := rk.project(st.attn, rk.layer(l).WO)
	if st.adapted {
		qs, _ := rk.widths()
		rk.lora(l, lora.O, y, rk.e.cfg.Hidden, st.attn, qs)
	}
}

// MLPUp computes SiLU(gate)·up over the rank's intermediate slice.
func (rk *rank) MLPUp(l int) {
	st, w := &rk.st, rk.layer(l)
	var adapt func()
	if st.adapted {
		adapt = func() {
			h, is := rk.e.cfg.Hidden, rk.sh.Inter.Len()
			rk.lora(l, lora.Gate, st.gate, is, st.xn, h)
			rk.lora(l, lora.Up, st.up, is, st.xn, h)
		}
	}
	rk.mlpUp(st.gate, st.up, st.xn, st.nl, w.WGate, w.WUp, w, adapt)
}

// mlpUp computes gate = SiLU(in·wgᵀ + b)·(in·wuᵀ + b) for rows rows of in,
// with the biases of layer w, calling adapt (unless nil) before the
// activation; up is scratch.
func (rk *rank) mlpUp(gate, up, in []float32, rows int, wg, wu *tensor.Weights, w *parallel.LayerShard, adapt func()) {
	pool, h := rk.e.pool, rk.e.cfg.Hidden
	is, _ := wg.Shape()
	gate, up, in = gate[:rows*is], up[:rows*is], in[:rows*h]
	tensor.MatMulWs(pool, in, rows, tensor.Projection{Y: gate, W: wg}, tensor.Projection{Y: up, W: wu})
	if w.BGate != nil {
		addRows(gate, w.BGate, rows)
		addRows(up, w.BUp, rows)
	}
	if adapt != nil {
		adapt()
	}
	pool.Run(rows, func(lo, hi int) {
		tensor.SiLUMul(gate[lo*is:hi*is], gate[lo*is:hi*is], up[lo*is:hi*is])
	})
}

// MLPDown projects the MLP activation back to the hidden size.
func (rk *rank) MLPDown(l int) {
	st := &rk.st
	y := rk.project(st.gate, rk.layer(l).WDown)
	if st.adapted {
		rk.lora(l, lora.Down, y, rk.e.cfg.Hidden, st.gate, rk.sh.Inter.Len())
	}
}

// project computes in[nl, k]·wᵀ: added to the residual directly without
// TP, into the partial sum tmp for ReduceTP with it. It returns the rows
// it added to or wrote.
func (rk *rank) project(in []float32, w *tensor.Weights) []float32 {
	pool, h, nl := rk.e.pool, rk.e.cfg.Hidden, rk.st.nl
	_, k := w.Shape()
	if rk.g.tp == nil {
		tensor.MatMulWAcc(pool, rk.st.x[:nl*h], in[:nl*k], w, nl)
		return rk.st.x[:nl*h]
	}
	tensor.MatMulW(pool, rk.st.tmp[:nl*h], in[:nl*k], w, nl)
	return rk.st.tmp[:nl*h]
}

// Residual adds the reduced partial sum (under TP) and the branch's bias
// to the residual; padding rows stay zero.
func (rk *rank) Residual(l int, b forward.Branch) {
	st, h, nl := &rk.st, rk.e.cfg.Hidden, rk.st.nl
	x := st.x[:nl*h]
	if rk.g.tp != nil {
		tensor.Add(x, st.tmp[:nl*h])
	}
	w := rk.layer(l)
	bias := w.BO
	if b == forward.MLPBranch {
		bias = w.BDown
	}
	if bias != nil {
		addRows(x, bias, nl)
	}
	if b == forward.MLPBranch {
		clear(x[st.real*h:])
	}
}

// ReduceTP all-reduces the TP group's partial sums: the residual itself
// after Embed, the projection's partial sum after a branch.
func (rk *rank) ReduceTP(ctx context.Context, b forward.Branch) error {
	buf := rk.st.tmp
	if b == forward.EmbedBranch {
		buf = rk.st.x
	}
	buf = buf[:rk.st.nl*rk.e.cfg.Hidden]
	return rk.timed(func() error { return rk.g.tp.AllReduce(ctx, buf) })
}

// RecvResidual receives the residual from the previous pipeline stage.
func (rk *rank) RecvResidual(ctx context.Context) error {
	x, prev := rk.st.x[:rk.st.nl*rk.e.cfg.Hidden], rk.g.pp.Rank()-1
	return rk.timed(func() error { return rk.g.pp.Recv(ctx, x, prev) })
}

// SendResidual sends the residual to the next pipeline stage.
func (rk *rank) SendResidual(ctx context.Context) error {
	x, next := rk.st.x[:rk.st.nl*rk.e.cfg.Hidden], rk.g.pp.Rank()+1
	return rk.timed(func() error { return rk.g.pp.Send(ctx, x, next) })
}

// chunkWidths are the widths of the rank's attention chunk: q, KV, and a
// row of the all-to-all buffers (q|k|v).
func (rk *rank) chunkWidths() (qc, kc, wd int) {
	ch, d := rk.sh.Chunk, rk.e.cfg.HeadDim
	qc, kc = (ch.QHi-ch.QLo)*d, (ch.KVHi-ch.KVLo)*d
	return qc, kc, qc + 2*kc
}

// PackHeads lays out, for each SP member j, the rank's rows of chunk j's
// q, k and v heads (KV heads replicated inside the send buffer when
// chunks share one).
func (rk *rank) PackHeads() {
	st, sh, d := &rk.st, rk.sh, rk.e.cfg.HeadDim
	nl := st.nl
	qs, ks := rk.widths()
	qc, kc, wd := rk.chunkWidths()
	for j, ch := range sh.Chunks {
		qo, ko := (ch.QLo-sh.Slice.QLo)*d, (ch.KVLo-sh.Slice.KVLo)*d
		for i := 0; i < nl; i++ {
			row := st.send[(j*nl+i)*wd : (j*nl+i+1)*wd]
			copy(row[:qc], st.q[i*qs+qo:i*qs+qo+qc])
			copy(row[qc:qc+kc], st.k[i*ks+ko:i*ks+ko+kc])
			copy(row[qc+kc:], st.v[i*ks+ko:i*ks+ko+kc])
		}
	}
}

// ExchangeHeads is Ulysses' all-to-all: sequence-sharded q, k and v to
// head-sharded before attention, the chunk's attention output back to
// sequence-sharded after it.
func (rk *rank) ExchangeHeads(ctx context.Context, back bool) error {
	st := &rk.st
	n := rk.sh.SPSize * st.nl
	qc, _, wd := rk.chunkWidths()
	if back {
		return rk.timed(func() error { return rk.g.sp.AllToAll(ctx, st.attnC[:n*qc], st.back[:n*qc]) })
	}
	return rk.timed(func() error { return rk.g.sp.AllToAll(ctx, st.send[:n*wd], st.recv[:n*wd]) })
}

// UnpackHeads places each chunk's returned attention output in the
// slice's columns.
func (rk *rank) UnpackHeads() {
	st := &rk.st
	qs, _ := rk.widths()
	qc, _, _ := rk.chunkWidths()
	for j := 0; j < rk.sh.SPSize; j++ {
		for i := 0; i < st.nl; i++ {
			copy(st.attn[i*qs+j*qc:i*qs+(j+1)*qc], st.back[(j*st.nl+i)*qc:(j*st.nl+i+1)*qc])
		}
	}
}

// attention computes causal attention for this rank's chunk of query heads
// for the tokens q holds: every real token of the micro-batch after the SP
// all-to-all, or this rank's own rows without SP. Row r of q (stride
// qStride) is token r of the micro-batch, offset by st.first without SP.
func (rk *rank) attention(l int, mb *micro, sh *parallel.Shard, q []float32, qStride int, out []float32, outStride int) {
	cfg, st := rk.e.cfg, &rk.st
	d := cfg.HeadDim
	group := cfg.Heads / cfg.KVHeads
	scale := float32(1 / math.Sqrt(float64(d)))
	rows, base := st.total, 0
	if sh.SPSize == 1 {
		rows, base = st.real, st.first
	}
	// Units are a block's runs of consecutive local heads that share a KV
	// head, attended together; a block is up to blockRows consecutive
	// rows of one sequence (consecutive positions: a prompt's chunk), or
	// a decode's one row.
	runs := headRuns(sh.Chunk, group)
	st.blocks = cutBlocks(st.blocks[:0], rows, blockRows(group, d), func(i int) bool {
		return st.tokSeq[base+i] == st.tokSeq[base+i-1] && st.tokPos[base+i] == st.tokPos[base+i-1]+1
	}, nil)
	rk.e.pool.Run(len(st.blocks)*len(runs), func(lo, hi int) {
		sc := getScratch()
		defer putScratch(sc)
		for i := lo; i < hi; i++ {
			blk, run := blockAt(st.blocks, i/len(runs)), runs[i%len(runs)]
			r, t := blk[0], base+blk[0]
			p := st.tokPos[t]
			j0, j1 := run[0], run[1]
			kv := (sh.Chunk.QLo+j0)/group - sh.Chunk.KVLo
			b := queries{q: q[r*qStride+j0*d:], out: out[r*outStride+j0*d:], qStride: qStride, outStride: outStride,
				d: d, g: j1 - j0, rows: blk[1], to: p + 1, window: cfg.SlidingWindow, scale: scale}
			attendBlock(sc, &b, cacheTiles{rk.cache, l, kv, mb.seqs[st.tokSeq[t]].Blocks})
		}
	})
}

// positionHeads applies the optional per-head RMSNorm (qwen3) and RoPE in
// the Hugging Face rotate_half layout to every head of local row i.
func (rk *rank) positionHeads(x, norm []float32, i int, eps float32) {
	half := rk.e.cfg.HeadDim / 2
	positionRow(x, norm, rk.st.cos[i*half:(i+1)*half], rk.st.sin[i*half:(i+1)*half], eps)
}

// positionRow applies the optional per-head RMSNorm and RoPE to every head
// of x, a row of heads of len(cos)·2 elements, at the angles cos and sin.
func positionRow(x, norm, cos, sin []float32, eps float32) {
	d := 2 * len(cos)
	half := d / 2
	for off := 0; off < len(x); off += d {
		head := x[off : off+d]
		if norm != nil {
			tensor.RMSNorm(head, head, norm, eps)
		}
		x1, x2 := head[:half], head[half:]
		for j := range x1 {
			a, b := x1[j], x2[j]
			x1[j] = a*cos[j] - b*sin[j]
			x2[j] = b*cos[j] + a*sin[j]
		}
	}
}

// Logits applies the final norm and this rank's LM-head slice to its rows
// that want logits, and writes them to the step's output without TP.
func (rk *rank) Logits() {
	e, st, sh := rk.e, &rk.st, rk.sh
	h, vocab := e.cfg.Hidden, e.cfg.Vocab
	st.lrows = st.lrows[:0]
	for i := 0; i < st.real; i++ {
		if st.rowOut[st.first+i] >= 0 {
			st.lrows = append(st.lrows, i)
		}
	}
	n := len(st.lrows)
	if n == 0 {
		return
	}
	vs := sh.Vocab.Len()
	grow(&st.hl, n*h)
	grow(&st.logits, n*vs)
	for j, i := range st.lrows {
		tensor.RMSNorm(st.hl[j*h:(j+1)*h], st.x[i*h:(i+1)*h], sh.Norm, float32(e.cfg.RMSNormEps))
	}
	tensor.MatMulW(e.pool, st.logits, st.hl, sh.LMHead, n)
	if len(e.hid) > 0 && (rk.g.tp == nil || rk.g.tp.Rank() == 0) { // the rank that writes the rows' logits
		for j, i := range st.lrows {
			row := st.rowOut[st.first+i]
			copy(e.hid[row*h:(row+1)*h], st.hl[j*h:(j+1)*h])
		}
	}
	if rk.g.tp == nil {
		for j, i := range st.lrows {
			row := st.rowOut[st.first+i]
			copy(e.out[row*vocab:(row+1)*vocab], st.logits[j*vs:(j+1)*vs])
			st.outRows = append(st.outRows, row)
		}
	}
}

// GatherLogits all-gathers the TP group's vocabulary slices of the rows
// that want logits; member 0 writes them into the step's output.
func (rk *rank) GatherLogits(ctx context.Context) error {
	e, st, g := rk.e, &rk.st, rk.g
	vocab, n, vs := e.cfg.Vocab, len(st.lrows), rk.sh.Vocab.Len()
	if n == 0 {
		return nil
	}
	size := g.tp.Size()
	st.counts = st.counts[:0]
	for m := 0; m < size; m++ {
		st.counts = append(st.counts, n*parallel.Even(vocab, size, m).Len())
	}
	grow(&st.gathered, n*vocab)
	if err := rk.timed(func() error { return g.tp.AllGatherV(ctx, st.logits[:n*vs], st.gathered, st.counts) }); err != nil {
		return err
	}
	if g.tp.Rank() != 0 {
		return nil
	}
	off := 0
	for m := 0; m < size; m++ {
		span := parallel.Even(vocab, size, m)
		w := span.Len()
		for j, i := range st.lrows {
			row := st.rowOut[st.first+i]
			copy(e.out[row*vocab+span.Lo:row*vocab+span.Hi], st.gathered[off+j*w:off+(j+1)*w])
		}
		off += n * w
	}
	for _, i := range st.lrows {
		st.outRows = append(st.outRows, st.rowOut[st.first+i])
	}
	return nil
}

func rmsNormRows(pool *tensor.Pool, out, x, w []float32, rows int, eps float32) {
	h := len(w)
	pool.Run(rows, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			tensor.RMSNorm(out[t*h:(t+1)*h], x[t*h:(t+1)*h], w, eps)
		}
	})
}

func addRows(x, bias []float32, rows int) {
	n := len(bias)
	for t := 0; t < rows; t++ {
		tensor.Add(x[t*n:(t+1)*n], bias)
	}
}
