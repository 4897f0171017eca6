package cudaexec

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/gearboxlm/gearbox/comm"
	fwd "github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// metaLayout is where each int32 table sits in the metadata buffer, in
// elements: fixed offsets for a capacity, so graph replays find them.
type metaLayout struct {
	ids, pos, slot int // [tokens]
	qStart, seqPos int // [seqs+1], [seqs]
	tables         int // [seqs, stride]
	rows           int // [SP][rowsCap]: each SP member's logits rows, local to its token rows
	rowsCap        int
	size           int
}

func newMetaLayout(c capacity, sp int) metaLayout {
	var m metaLayout
	next := func(n int) int { off := m.size; m.size += n; return off }
	t := c.tokens + sp
	m.ids, m.pos, m.slot = next(t), next(t), next(t)
	m.qStart, m.seqPos = next(c.seqs+1), next(c.seqs)
	m.rowsCap = c.logitRows
	m.rows = next(sp * c.logitRows)
	m.tables = next(c.seqs * c.maxBlocks)
	return m
}

// stepShape is what one launch sequence is specialised on; a CUDA graph
// replays one shape.
type stepShape struct {
	tokens    int   // tokens in sequences (a graph step counts its padding sequences)
	seqs      int   // sequences, padding included
	maxQLen   int   // longest query run of one sequence
	decodes   int   // leading sequences with one query each (the scheduler puts decodes first)
	stride    int   // block-table row stride
	nl        int   // token rows per SP member: ceil(tokens/SP)
	rows      []int // logits rows per SP member
	logitRows int   // all of them
}

// rowOut maps, per SP member, its local logits rows to the step's output
// rows; filled by uploadMeta.
type rowOut [][]int

// step runs on the device thread. With argmax, each logits row's argmax
// goes to e.tokens instead of the row to e.out.
func (e *Executor) step(dl *devLayout, b *fwd.Batch, rows int, argmax bool) error {
	n, seqs := b.NumTokens(), len(b.Seqs)
	if n > e.cap.tokens || seqs > e.cap.seqs || rows > e.cap.logitRows {
		c := e.cap
		c.tokens, c.seqs, c.logitRows = max(n, c.tokens), max(seqs, c.seqs), max(rows, c.logitRows)
		if err := e.allocBuffers(c); err != nil {
			return err
		}
	}
	sp := dl.layout.Plan.SP
	lay := newMetaLayout(e.cap, e.maxSP)
	sh := stepShape{tokens: n, seqs: seqs, logitRows: rows}
	for i, s := range b.Seqs {
		if len(s.Tokens) == 1 && sh.decodes == i {
			sh.decodes++
		}
		sh.maxQLen = max(sh.maxQLen, len(s.Tokens))
		sh.stride = max(sh.stride, e.kv.BlocksFor(s.Pos+len(s.Tokens)))
	}
	bucket, graph := 0, false
	if rows == seqs && n == seqs { // a decode step: one token and one logits row per sequence
		bucket, graph = e.buckets.Bucket(seqs)
		graph = graph && bucket <= e.cap.seqs && bucket <= e.cap.logitRows && bucket <= e.cap.tokens
	}
	if graph {
		sh = e.graphShape(bucket, sp)
	} else {
		sh.nl, sh.rows = ceilDiv(sh.tokens, sp), make([]int, sp)
	}
	outRows := e.uploadMeta(b, lay, &sh, sp)
	// On the stream, so the step's kernels (or graph) see the tables: a
	// copy from pageable memory is staged at once, so e.host is free again.
	if err := e.ops.toDevice(e.meta, unsafe.Pointer(&e.host[0]), 4*int64(len(e.host))); err != nil {
		return err
	}
	if graph {
		key := graphKey{placement: dl.layout.Name, bucket: bucket}
		g, ok := e.graphs[key]
		if !ok {
			var err error
			if g, err = e.capture(dl, sh, lay); err != nil {
				return err
			}
		}
		if err := e.ctx.LaunchGraph(g, e.s); err != nil {
			return err
		}
		e.launched(e.graphStats[key])
	} else if err := e.forward(dl, sh, lay); err != nil {
		return err
	}
	if argmax {
		return e.readArgmax(dl, sh, outRows)
	}
	if err := e.readLogits(dl, sh, outRows); err != nil {
		return err
	}
	if e.wantHidden {
		return e.readHidden(dl, sh, outRows)
	}
	return nil
}

// readHidden copies the final-norm rows (the LM head's input) of one
// last-stage rank of each TP group, whose members hold the same rows, to
// the host, widens them to float32 and places them in e.hid as the logits
// rows go.
func (e *Executor) readHidden(dl *devLayout, sh stepShape, out rowOut) error {
	l, h, size := dl.layout, e.cfg.Hidden, e.dt.Size()
	e.hid = slices.Grow(e.hid[:0], sh.logitRows*h)[:sh.logitRows*h]
	var vals []float32
	for r, c := range l.Coords {
		m := sh.rows[c.SP]
		if c.PP != l.Plan.PP-1 || c.TP != 0 || m == 0 {
			continue
		}
		raw, err := e.hidBuf.get(e.ctx, m*h*size)
		if err != nil {
			return err
		}
		if err := e.ops.toHost(unsafe.Pointer(&raw[0]), e.ranks[r].hl, int64(len(raw))); err != nil {
			return err
		}
		if err := e.ops.sync(); err != nil {
			return err
		}
		vals = slices.Grow(vals[:0], m*h)[:m*h]
		switch e.dt {
		case model.BFloat16:
			tensor.DecodeBF16(vals, unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), m*h))
		case model.Float16:
			tensor.DecodeF16(vals, unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), m*h))
		default:
			copy(vals, unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), m*h))
		}
		for i, row := range out[c.SP] {
			if row >= 0 {
				copy(e.hid[row*h:(row+1)*h], vals[i*h:(i+1)*h])
			}
		}
	}
	return nil
}

// readArgmax takes the argmax of each last-stage rank's logits rows on the
// device (TP = 1: each rank holds the whole vocabulary) and places the ids
// in e.tokens.
func (e *Executor) readArgmax(dl *devLayout, sh stepShape, out rowOut) error {
	l, vocab := dl.layout, e.cfg.Vocab
	for r, c := range l.Coords {
		m := sh.rows[c.SP]
		if c.PP != l.Plan.PP-1 || m == 0 {
			continue
		}
		rk := e.ranks[r]
		if err := e.k.Argmax(e.s, rk.argmax, rk.logits, m, vocab); err != nil {
			return err
		}
		if cap(e.ids) < m {
			e.ids = make([]int32, m)
		}
		ids := e.ids[:m]
		if err := e.ops.toHost(unsafe.Pointer(&ids[0]), rk.argmax, 4*int64(m)); err != nil {
			return err
		}
		if err := e.ops.sync(); err != nil {
			return err
		}
		for i, row := range out[c.SP] {
			if row < 0 {
				continue
			}
			if id := int(ids[i]); id < 0 || id >= vocab {
				return fmt.Errorf("argmax of row %d is %d, outside the vocabulary [0, %d)", row, id, vocab)
			}
			e.tokens[row] = int(ids[i])
		}
	}
	return e.ops.sync()
}

// uploadMeta fills the host copy of the step's int32 tables — token ids,
// positions and cache slots of every token, sequence starts, cached
// lengths and block tables, and each SP member's logits rows — and returns
// where each SP member's logits rows go in the output. Padding tokens (up
// to a multiple of SP, and the idle sequences of a graph bucket) get token
// 0 at position 0 and no cache slot (slot −1), so they write nothing.
func (e *Executor) uploadMeta(b *fwd.Batch, lay metaLayout, sh *stepShape, sp int) rowOut {
	used := lay.tables + sh.seqs*sh.stride // the rest of the buffer is not read this step
	if cap(e.host) < used {
		e.host = make([]int32, used)
	}
	e.host = e.host[:used]
	m := e.host
	clear(m)
	for i := sp * sh.nl; i > sh.tokens; i-- {
		m[lay.slot+i-1] = -1
	}
	out := make(rowOut, sp)
	bs := e.kv.BlockSize
	t, row := 0, 0
	addRow := func(tok, to int) {
		j := tok / sh.nl
		m[lay.rows+j*lay.rowsCap+sh.rows[j]] = int32(tok - j*sh.nl)
		sh.rows[j]++
		out[j] = append(out[j], to)
	}
	for i, s := range b.Seqs {
		m[lay.qStart+i] = int32(t)
		m[lay.seqPos+i] = int32(s.Pos)
		for j, blk := range s.Blocks[:e.kv.BlocksFor(s.Pos+len(s.Tokens))] {
			m[lay.tables+i*sh.stride+j] = int32(blk)
		}
		first := len(s.Tokens) - s.NumLogits
		for j, id := range s.Tokens {
			p := s.Pos + j
			m[lay.ids+t] = int32(id)
			m[lay.pos+t] = int32(p)
			m[lay.slot+t] = int32(s.Blocks[p/bs]*bs + p%bs)
			if j >= first {
				addRow(t, row)
				row++
			}
			t++
		}
	}
	for i := len(b.Seqs); i < sh.seqs; i++ { // graph padding: one idle token per sequence
		m[lay.qStart+i] = int32(t)
		m[lay.slot+t] = -1
		addRow(t, -1)
		t++
	}
	m[lay.qStart+sh.seqs] = int32(t)
	return out
}

// capture records the forward pass of shape sh under dl as a CUDA graph,
// keeps it in e.graphs and remembers the collective traffic one replay
// stands for (counted on each launch, not here).
func (e *Executor) capture(dl *devLayout, sh stepShape, lay metaLayout) (cuda.GraphExec, error) {
	before := e.CommStats()
	defer func() { e.unlaunched(e.CommStats().Sub(before)) }() // capturing runs nothing
	if err := e.ctx.BeginCapture(e.s); err != nil {
		return 0, fmt.Errorf("capture graph for batch %d: %w", sh.seqs, err)
	}
	fwdErr := e.forward(dl, sh, lay)
	g, err := e.ctx.EndCapture(e.s)
	if fwdErr != nil || err != nil {
		if g != 0 {
			_ = e.ctx.DestroyGraph(g)
		}
		return 0, fmt.Errorf("capture graph for batch %d: %w", sh.seqs, errors.Join(fwdErr, err))
	}
	defer e.ctx.DestroyGraph(g)
	exec, err := e.ctx.Instantiate(g)
	if err != nil {
		return 0, fmt.Errorf("instantiate graph for batch %d: %w", sh.seqs, err)
	}
	key := graphKey{placement: dl.layout.Name, bucket: sh.seqs}
	e.graphs[key] = exec
	if e.graphStats == nil {
		e.graphStats = map[graphKey]comm.Stats{}
	}
	e.graphStats[key] = e.CommStats().Sub(before)
	return exec, nil
}

// graphShape is the shape of a decode step run as the graph of bucket:
// bucket sequences of one token, each with a logits row.
func (e *Executor) graphShape(bucket, sp int) stepShape {
	return stepShape{tokens: bucket, seqs: bucket, maxQLen: 1, decodes: bucket, stride: e.cap.maxBlocks,
		logitRows: bucket, nl: ceilDiv(bucket, sp), rows: make([]int, sp)}
}

// CaptureGraphs captures, under every plan the executor holds, the decode
// graph of every bucket up to MaxNumSeqs sequences, as vLLM does at
// start-up, so that no step pays for a capture. It runs nothing on the
// device and writes no KV. It is a no-op with EnforceEager.
func (e *Executor) CaptureGraphs() error {
	return e.ctx.Do(func() error {
		lay := newMetaLayout(e.cap, e.maxSP)
		for name, dl := range e.layouts {
			plan := dl.layout.Plan
			for _, bucket := range e.buckets {
				if bucket > e.cap.seqs || bucket > e.cap.logitRows || bucket > e.cap.tokens {
					break
				}
				if _, ok := e.graphs[graphKey{placement: name, bucket: bucket}]; ok {
					continue
				}
				sh := e.graphShape(bucket, plan.SP)
				e.uploadMeta(&fwd.Batch{}, lay, &sh, plan.SP) // fills sh.rows; the tables are not copied
				if _, err := e.capture(dl, sh, lay); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// launched adds the traffic of a graph replay: what comm counted when
// the graph was captured.
func (e *Executor) launched(d comm.Stats) {
	for k, v := range d {
		e.replayed[k] = e.replayed[k].Add(v)
	}
}

// unlaunched takes back traffic comm counted for work that did not run (a
// graph capture).
func (e *Executor) unlaunched(d comm.Stats) {
	for k, v := range d {
		e.replayed[k] = e.replayed[k].Sub(v)
	}
}

// group is the comm group of world ranks g, labelled kind+members as the
// CPU executor labels its groups, on a live world (a fresh one after a
// failure, its counts kept).
func (e *Executor) group(kind string, g parallel.Group) (*comm.Group, error) {
	if e.world == nil || e.world.Err() != nil {
		if e.world != nil {
			e.launched(e.world.Stats())
		}
		w, err := comm.New(comm.Options{Size: len(e.ranks), ElemBytes: e.dt.Size()})
		if err != nil {
			return nil, err
		}
		e.world = w
	}
	return e.world.Group(g.Label(kind), g...)
}

// readLogits copies each last-stage rank's logits slice to the host and
// places its rows and vocabulary columns in e.out, then waits for the
// stream.
func (e *Executor) readLogits(dl *devLayout, sh stepShape, out rowOut) error {
	if sh.logitRows == 0 {
		return e.ops.sync()
	}
	l, vocab := dl.layout, e.cfg.Vocab
	for r, c := range l.Coords {
		if c.PP != l.Plan.PP-1 {
			continue
		}
		m, span := sh.rows[c.SP], dl.shards[r].spans.Vocab
		if m == 0 {
			continue
		}
		n := m * span.Len()
		if span.Len() == vocab && identityRows(out[c.SP], m) {
			// The rank's rows are the step's, in order: straight into e.out.
			if err := e.ops.toHost(unsafe.Pointer(&e.out[0]), e.ranks[r].logits, 4*int64(n)); err != nil {
				return err
			}
			continue
		}
		part, err := e.partBuf.get(e.ctx, n)
		if err != nil {
			return err
		}
		if err := e.ops.toHost(unsafe.Pointer(&part[0]), e.ranks[r].logits, 4*int64(n)); err != nil {
			return err
		}
		if err := e.ops.sync(); err != nil {
			return err
		}
		for i, row := range out[c.SP] {
			if row >= 0 {
				copy(e.out[row*vocab+span.Lo:row*vocab+span.Hi], part[i*span.Len():(i+1)*span.Len()])
			}
		}
	}
	return e.ops.sync()
}

// identityRows reports whether rows maps local rows 0..m-1 to output rows
// 0..m-1.
func identityRows(rows []int, m int) bool {
	if len(rows) != m {
		return false
	}
	for i, r := range rows {
		if r != i {
			return false
		}
	}
	return true
}

// forward enqueues one step of shape sh under dl on the stream: the rank
// program (forward.Run) once per pipeline stage, in stage order, with
// stageOps running each op for every rank of the stage. The ranks of a
// stage reach each collective together, so a collective is the device
// copies (and reduction) among their buffers, run through comm's
// Group.Drive, which counts them as it counts the CPU's.
func (e *Executor) forward(dl *devLayout, sh stepShape, lay metaLayout) error {
	l := dl.layout
	so := &stageOps{e: e, dl: dl, sh: sh, lay: lay, pending: make([]pending, len(e.ranks))}
	for stage := 0; stage < l.Plan.PP; stage++ {
		so.ranks = so.ranks[:0]
		for r, c := range l.Coords {
			if c.PP == stage {
				so.ranks = append(so.ranks, r)
			}
		}
		span := dl.shards[so.ranks[0]].spans.Stage
		err := fwd.Run(context.Background(), so, fwd.Shape{
			First: stage == 0, Last: stage == l.Plan.PP-1, LayerLo: span.Lo, LayerHi: span.Hi, TP: l.Plan.TP, SP: l.Plan.SP,
		})
		if err = errors.Join(err, so.err); err != nil {
			return err
		}
	}
	return nil
}

// pending is a rank's branch output not yet added to its residual: the
// next norm (or the stage hand-off) folds it in with AddRMSNorm.
type pending struct{ delta, bias cuda.DevicePtr }

// stageOps runs the rank program for every rank of one pipeline stage at
// once: each op enqueues its kernel for each rank in turn. A kernel
// launch that fails is kept in err and the ops after it do nothing; the
// next BeginLayer or collective returns it.
type stageOps struct {
	e       *Executor
	dl      *devLayout
	sh      stepShape
	lay     metaLayout
	ranks   []int     // global ranks of the stage
	pending []pending // by global rank
	err     error
}

var _ fwd.Ops = (*stageOps)(nil)

func (so *stageOps) meta(off int) cuda.DevicePtr { return so.e.meta + cuda.DevicePtr(4*off) }

// each runs f for every rank of the stage until one fails.
func (so *stageOps) each(f func(rk *devRank, ds *devShard) error) {
	for _, r := range so.ranks {
		if so.err != nil {
			return
		}
		so.err = f(so.e.ranks[r], so.dl.shards[r])
	}
}

// weights is layer l's (a global index) weights of shard ds.
func weights(ds *devShard, l int) *layerWeights { return &ds.layers[l-ds.spans.Stage.Lo] }

func (so *stageOps) Embed() {
	e, h, nl := so.e, so.e.cfg.Hidden, so.sh.nl
	for _, r := range so.ranks {
		if so.err != nil {
			return
		}
		ds, first := so.dl.shards[r], so.dl.layout.Coords[r].SP*nl
		so.err = e.k.Embed(e.s, e.ranks[r].x, ds.embed, so.meta(so.lay.ids+first), nl, h, ds.spans.Vocab.Lo, ds.spans.Vocab.Hi)
	}
}

func (so *stageOps) BeginLayer(context.Context, int) error { return so.err }

// norm folds each rank's pending branch output into its residual and
// writes the normed residual with w.
func (so *stageOps) norm(w func(rk *devRank, ds *devShard) (norm cuda.DevicePtr, next pending)) {
	e := so.e
	eps := float32(e.cfg.RMSNormEps)
	so.each(func(rk *devRank, ds *devShard) error {
		weight, next := w(rk, ds)
		p := so.pending[rk.id]
		so.pending[rk.id] = next
		return e.k.AddRMSNorm(e.s, rk.xn, rk.x, p.delta, p.bias, weight, so.sh.nl, e.cfg.Hidden, eps)
	})
}

func (so *stageOps) AttnNorm(l int) {
	so.norm(func(_ *devRank, ds *devShard) (cuda.DevicePtr, pending) { return weights(ds, l).attnNorm, pending{} })
}

func (so *stageOps) MLPNorm(l int) {
	so.norm(func(_ *devRank, ds *devShard) (cuda.DevicePtr, pending) { return weights(ds, l).mlpNorm, pending{} })
}

func (so *stageOps) QKV(l int) {
	e := so.e
	so.each(func(rk *devRank, ds *devShard) error {
		return e.ops.linear(rk.qkv, rk.xn, weights(ds, l).qkv, so.sh.nl, e.cfg.Hidden, ds.sliceW, e.dt)
	})
}

// Position is fused into CacheWrite: the QKVRope kernel adds the biases,
// applies the q/k norms and RoPE and writes the cache, after the SP
// all-to-all when there is one.
func (so *stageOps) Position(int) {}

// PackHeads is part of ExchangeHeads: the all-to-all copies straight from
// each rank's q|k|v projections.
func (so *stageOps) PackHeads() {}

// UnpackHeads is part of ExchangeHeads: the all-to-all copies straight
// into each rank's attention columns.
func (so *stageOps) UnpackHeads() {}

func (so *stageOps) ExchangeHeads(_ context.Context, back bool) error {
	if so.err != nil {
		return so.err
	}
	if back {
		so.err = so.e.gatherHeads(so.dl, so.ranks, so.sh.nl)
	} else {
		so.err = so.e.scatterHeads(so.dl, so.ranks, so.sh.nl)
	}
	return so.err
}

// CacheWrite runs QKVRope: biases, q/k norms and RoPE of every row the
// rank attends for, and its keys and values into the cache.
func (so *stageOps) CacheWrite(l int) {
	e, p, cfg := so.e, so.dl.layout.Plan, so.e.cfg
	rows := so.rowsAttended()
	so.each(func(rk *devRank, ds *devShard) error {
		w := weights(ds, l)
		kc, vc := rk.layerCache(l - ds.spans.Stage.Lo)
		return e.k.QKVRope(e.s, QKVArgs{
			Q: rk.q, KCache: kc, VCache: vc, QKV: headsIn(rk, p), Bias: w.qkvBias, QNorm: w.qNorm, KNorm: w.kNorm,
			Cos: e.cos, Sin: e.sin, Pos: so.meta(so.lay.pos), Slot: so.meta(so.lay.slot),
			N: rows, Heads: ds.spans.Chunk.QHi - ds.spans.Chunk.QLo, KVHeads: ds.spans.Chunk.KVHi - ds.spans.Chunk.KVLo,
			HeadDim: cfg.HeadDim, BlockSize: e.kv.BlockSize, Eps: float32(cfg.RMSNormEps),
		})
	})
}

// rowsAttended is the rows each rank attends for: its own without SP,
// every token of the micro-batch with it.
func (so *stageOps) rowsAttended() int {
	if sp := so.dl.layout.Plan.SP; sp > 1 {
		return sp * so.sh.nl
	}
	return so.sh.nl
}

func (so *stageOps) Attention(l int) {
	e, cfg, sh, lay := so.e, so.e.cfg, so.sh, so.lay
	so.each(func(rk *devRank, ds *devShard) error {
		kc, vc := rk.layerCache(l - ds.spans.Stage.Lo)
		return e.ops.attention(AttnArgs{
			Out: rk.attnC, Q: rk.q, KCache: kc, VCache: vc, BlockTables: so.meta(lay.tables),
			QStart: so.meta(lay.qStart), SeqPos: so.meta(lay.seqPos),
			NumSeqs: sh.seqs, NumTokens: sh.tokens, MaxQLen: sh.maxQLen, DecodeSeqs: sh.decodes, MaxBlocks: sh.stride,
			Heads: ds.spans.Chunk.QHi - ds.spans.Chunk.QLo, KVHeads: ds.spans.Chunk.KVHi - ds.spans.Chunk.KVLo,
			HeadDim: cfg.HeadDim, BlockSize: e.kv.BlockSize,
			Window: cfg.SlidingWindow, Scale: float32(1 / math.Sqrt(float64(cfg.HeadDim))), Workspace: e.work,
		})
	})
}

func (so *stageOps) OutProj(l int) {
	e, p := so.e, so.dl.layout.Plan
	so.each(func(rk *devRank, ds *devShard) error {
		return e.ops.linear(rk.delta, headsOut(rk, p), weights(ds, l).o, so.sh.nl, ds.qs, e.cfg.Hidden, e.dt)
	})
}

func (so *stageOps) MLPUp(l int) {
	e := so.e
	so.each(func(rk *devRank, ds *devShard) error {
		w := weights(ds, l)
		if err := e.ops.linear(rk.gateUp, rk.xn, w.gateUp, so.sh.nl, e.cfg.Hidden, 2*ds.inter, e.dt); err != nil {
			return err
		}
		return e.k.SiLUMul(e.s, rk.mlp, rk.gateUp, w.guBias, so.sh.nl, ds.inter)
	})
}

func (so *stageOps) MLPDown(l int) {
	e := so.e
	so.each(func(rk *devRank, ds *devShard) error {
		return e.ops.linear(rk.delta, rk.mlp, weights(ds, l).down, so.sh.nl, ds.inter, e.cfg.Hidden, e.dt)
	})
}

// Residual leaves the branch output pending: the next AddRMSNorm adds it
// (and its bias) to the residual.
func (so *stageOps) Residual(l int, b fwd.Branch) {
	for _, r := range so.ranks {
		rk, w := so.e.ranks[r], weights(so.dl.shards[r], l)
		bias := w.oBias
		if b == fwd.MLPBranch {
			bias = w.downBias
		}
		so.pending[r] = pending{rk.delta, bias}
	}
}

func (so *stageOps) ReduceTP(_ context.Context, b fwd.Branch) error {
	if so.err != nil {
		return so.err
	}
	e, n := so.e, so.sh.nl*so.e.cfg.Hidden
	if b == fwd.EmbedBranch { // the float32 residual itself
		so.err = e.allReduce(so.dl.layout, so.ranks, func(rk *devRank) cuda.DevicePtr { return rk.x }, n, e.k32, 4)
	} else {
		so.err = e.allReduce(so.dl.layout, so.ranks, func(rk *devRank) cuda.DevicePtr { return rk.delta }, n, e.k, e.dt.Size())
	}
	return so.err
}

// RecvResidual: the previous stage's SendResidual already wrote this
// stage's residual.
func (so *stageOps) RecvResidual(context.Context) error { return so.err }

// SendResidual folds the last MLP output into each rank's residual (the
// norm's output is not used) and copies the residual to the rank's peer
// in the next stage.
func (so *stageOps) SendResidual(context.Context) error {
	e, l := so.e, so.dl.layout
	last := so.dl.shards[so.ranks[0]].spans.Stage.Hi - 1
	so.MLPNorm(last)
	so.each(func(rk *devRank, _ *devShard) error {
		return e.sendResidual(l, rk.id, l.Peer(rk.id, l.Coords[rk.id].PP+1), so.sh.nl*e.cfg.Hidden)
	})
	return so.err
}

// Logits applies the final norm and, for each rank's rows that want
// logits, the LM head's vocabulary slice into the rank's logits buffer
// (read back by the caller).
func (so *stageOps) Logits() {
	e, h := so.e, so.e.cfg.Hidden
	so.norm(func(_ *devRank, ds *devShard) (cuda.DevicePtr, pending) { return ds.norm, pending{} })
	so.each(func(rk *devRank, ds *devShard) error {
		j := so.dl.layout.Coords[rk.id].SP
		m := so.sh.rows[j]
		if m == 0 {
			return nil
		}
		if err := e.k.GatherRows(e.s, rk.hl, rk.xn, so.meta(so.lay.rows+j*so.lay.rowsCap), m, h); err != nil {
			return err
		}
		return e.ops.linear(rk.logits, rk.hl, ds.lmHead, m, h, ds.spans.Vocab.Len(), model.Float32)
	})
}

// GatherLogits counts the all-gather of the vocabulary slices; the host
// reads every slice directly, which moves the same bytes.
func (so *stageOps) GatherLogits(context.Context) error {
	if so.err == nil {
		so.err = so.e.gatherLogits(so.dl, so.ranks, so.sh)
	}
	return so.err
}

// headsIn is where a rank's attention input rows are under plan p: its own
// q|k|v projections without SP, every token's chunk heads after the SP
// all-to-all with it. (A shift plan has no SP while its base has: the
// buffers differ then.)
func headsIn(rk *devRank, p parallel.Plan) cuda.DevicePtr {
	if p.SP == 1 {
		return rk.qkv
	}
	return rk.recv
}

// headsOut is where a rank's attention output for its own rows is under
// plan p: the attention kernel's output without SP, the second all-to-all's
// with it.
func headsOut(rk *devRank, p parallel.Plan) cuda.DevicePtr {
	if p.SP == 1 {
		return rk.attnC
	}
	return rk.attn
}

func cudaType(d model.DType) cuda.DataType {
	switch d {
	case model.Float16:
		return cuda.R16F
	case model.BFloat16:
		return cuda.R16BF
	}
	return cuda.R32F
}

// allReduce sums buf(rank) over each TP group among ranks, n elements of
// elemBytes each, with kern's Add: member 0 accumulates the others, then
// its sum is copied back to them.
func (e *Executor) allReduce(l parallel.Placement, ranks []int, buf func(*devRank) cuda.DevicePtr, n int, kern *Kernels, elemBytes int) error {
	if l.Plan.TP == 1 {
		return nil
	}
	for _, r := range ranks {
		g := l.TPGroup(r)
		if g[0] != r {
			continue // each group once, from its member 0
		}
		grp, err := e.group("tp", g)
		if err != nil {
			return err
		}
		err = grp.Drive(comm.Op{Kind: comm.KindAllReduce, Elems: n, ElemBytes: elemBytes}, func() error {
			sum := buf(e.ranks[g[0]])
			for _, m := range g[1:] {
				if err := kern.Add(e.s, sum, buf(e.ranks[m]), int64(n)); err != nil {
					return err
				}
			}
			for _, m := range g[1:] {
				if err := e.ops.copy(buf(e.ranks[m]), sum, int64(n*elemBytes)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// scatterHeads is the SP all-to-all before attention: member i of every SP
// group receives, from every member j, j's token rows of the q, k and v
// heads of chunk i, laid out [q | k | v] as rows j·nl … of its recv.
func (e *Executor) scatterHeads(dl *devLayout, ranks []int, nl int) error {
	l, d := dl.layout, e.cfg.HeadDim
	for _, r := range ranks {
		g := l.SPGroup(r)
		if g[0] != r {
			continue
		}
		grp, err := e.group("sp", g)
		if err != nil {
			return err
		}
		err = grp.Drive(comm.Op{Kind: comm.KindAllToAll, Elems: nl * dl.shards[g[0]].chunkW}, func() error {
			for i, dst := range g {
				di := dl.shards[dst]
				for j, src := range g {
					sj := dl.shards[src]
					ch := sj.spans.Chunks[i]
					qo, ko := (ch.QLo-sj.spans.Slice.QLo)*d, (ch.KVLo-sj.spans.Slice.KVLo)*d
					rowOff := int64(j*nl*di.chunkW) * int64(e.dt.Size())
					for _, c := range []struct{ dstCol, srcCol, cols int }{
						{0, qo, di.qc}, {di.qc, sj.qs + ko, di.kc}, {di.qc + di.kc, sj.qs + sj.ks + ko, di.kc},
					} {
						if err := e.k.Copy2D(e.s, e.ranks[dst].recv+cuda.DevicePtr(rowOff+int64(c.dstCol*e.dt.Size())), di.chunkW,
							e.ranks[src].qkv+cuda.DevicePtr(c.srcCol*e.dt.Size()), sj.sliceW, nl, c.cols); err != nil {
							return err
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// gatherHeads is the SP all-to-all after attention: member j of every SP
// group receives, from every member i, the attention output of chunk i's
// heads for j's token rows, into chunk i's columns of its attn.
func (e *Executor) gatherHeads(dl *devLayout, ranks []int, nl int) error {
	l, d, elem := dl.layout, e.cfg.HeadDim, e.dt.Size()
	for _, r := range ranks {
		g := l.SPGroup(r)
		if g[0] != r {
			continue
		}
		grp, err := e.group("sp", g)
		if err != nil {
			return err
		}
		err = grp.Drive(comm.Op{Kind: comm.KindAllToAll, Elems: nl * dl.shards[g[0]].qc}, func() error {
			for i, src := range g {
				si := dl.shards[src]
				for j, dst := range g {
					dj := dl.shards[dst]
					col := (dj.spans.Chunks[i].QLo - dj.spans.Slice.QLo) * d
					if err := e.k.Copy2D(e.s, e.ranks[dst].attn+cuda.DevicePtr(col*elem), dj.qs,
						e.ranks[src].attnC+cuda.DevicePtr(j*nl*si.qc*elem), si.qc, nl, si.qc); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// sendResidual copies rank r's n float32 residual elements to rank next,
// its peer in the next pipeline stage, as a send in the group of r's
// pipeline peers.
func (e *Executor) sendResidual(l parallel.Placement, r, next, n int) error {
	var peers parallel.Group
	for s := 0; s < l.Plan.PP; s++ {
		peers = append(peers, l.Peer(r, s))
	}
	grp, err := e.group("pp", peers)
	if err != nil {
		return err
	}
	from, to := l.Coords[r].PP, l.Coords[next].PP
	return grp.Drive(comm.Op{Kind: comm.KindSend, Elems: n, From: from, To: to, ElemBytes: 4}, func() error {
		return e.ops.copy(e.ranks[next].x, e.ranks[r].x, 4*int64(n))
	})
}

// gatherLogits is the all-gather of the LM head's vocabulary slices in
// each TP group of the last stage: the host reads every slice directly
// (readLogits), which moves the same bytes, so the move is empty here.
func (e *Executor) gatherLogits(dl *devLayout, ranks []int, sh stepShape) error {
	l := dl.layout
	if l.Plan.TP == 1 {
		return nil
	}
	for _, r := range ranks {
		g := l.TPGroup(r)
		m := sh.rows[l.Coords[r].SP]
		if g[0] != r || m == 0 {
			continue
		}
		counts := make([]int, len(g))
		for i, mem := range g {
			counts[i] = m * dl.shards[mem].spans.Vocab.Len()
		}
		grp, err := e.group("tp", g)
		if err != nil {
			return err
		}
		if err := grp.Drive(comm.Op{Kind: comm.KindAllGather, Counts: counts, ElemBytes: 4}, func() error { return nil }); err != nil {
			return err
		}
	}
	return nil
}
