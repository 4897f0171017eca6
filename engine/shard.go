package engine

import (
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// shard is the weights one rank holds under one layout. Row splits (q, k,
// v, gate, up, vocabulary) are views of the model's tensors; column splits
// (o, down) are copies when TP > 1. A rank under a base plan and its shift
// plan holds two shards, the paper's separate-model approach.
type shard struct {
	tp, tpSize int              // TP index and degree
	sp, spSize int              // SP index and degree
	slice      parallel.Heads   // heads of this rank's TP slice (computed by q/k/v)
	chunk      parallel.Heads   // heads this rank attends to after the SP all-to-all
	chunks     []parallel.Heads // heads of every chunk of the slice, by SP member
	vocab      parallel.Span    // vocabulary rows of the embedding and LM head
	inter      parallel.Span    // intermediate columns of the MLP
	layers     parallel.Span    // layers of this rank's pipeline stage
	embed      []float32        // [vocab.Len, hidden]
	lmHead     []float32        // [vocab.Len, hidden]
	norm       []float32        // [hidden]
	layer      []layerShard     // the stage's layers
}

type layerShard struct {
	attnNorm, mlpNorm []float32 // [hidden]
	qNorm, kNorm      []float32 // [head_dim] or nil
	wq, bq            []float32 // [slice q heads·head_dim, hidden], [slice q heads·head_dim]
	wk, bk            []float32 // [slice kv heads·head_dim, hidden]
	wv, bv            []float32
	wo                []float32 // [hidden, slice q heads·head_dim]
	bo                []float32 // [hidden], added once after the reduction
	wgate, bgate      []float32 // [inter.Len, hidden]
	wup, bup          []float32
	wdown             []float32 // [hidden, inter.Len]
	bdown             []float32 // [hidden]
}

// newShard cuts global rank r's weights out of w under layout l.
func newShard(cfg *model.Config, w *model.Weights, l parallel.Layout, r int) *shard {
	p, c := l.Plan, l.Coords[r]
	s := &shard{
		tp: c.TP, tpSize: p.TP, sp: c.SP, spSize: p.SP,
		slice:  parallel.SliceHeads(cfg, c.TP, p.SP, p.TP),
		chunk:  parallel.ChunkHeads(cfg, p.HeadChunk(c), p.HeadShards()),
		vocab:  parallel.Even(cfg.Vocab, p.TP, c.TP),
		inter:  parallel.Even(cfg.Intermediate, p.TP, c.TP),
		layers: p.Stage(c.PP, cfg.Layers),
	}
	for j := 0; j < p.SP; j++ {
		s.chunks = append(s.chunks, parallel.ChunkHeads(cfg, c.TP*p.SP+j, p.HeadShards()))
	}
	h, d := cfg.Hidden, cfg.HeadDim
	rowsOf := func(m []float32, lo, hi, width int) []float32 { return m[lo*width : hi*width] }
	vecOf := func(b []float32, lo, hi int) []float32 {
		if b == nil {
			return nil
		}
		return b[lo:hi]
	}
	if c.PP == 0 {
		s.embed = rowsOf(w.Embed, s.vocab.Lo, s.vocab.Hi, h)
	}
	if c.PP == p.PP-1 {
		s.lmHead = rowsOf(w.LMHead, s.vocab.Lo, s.vocab.Hi, h)
		s.norm = w.Norm
	}
	q0, q1 := s.slice.QLo*d, s.slice.QHi*d
	k0, k1 := s.slice.KVLo*d, s.slice.KVHi*d
	for i := s.layers.Lo; i < s.layers.Hi; i++ {
		src := &w.Layers[i]
		s.layer = append(s.layer, layerShard{
			attnNorm: src.AttnNorm, mlpNorm: src.MLPNorm, qNorm: src.QNorm, kNorm: src.KNorm,
			wq: rowsOf(src.WQ, q0, q1, h), bq: vecOf(src.BQ, q0, q1),
			wk: rowsOf(src.WK, k0, k1, h), bk: vecOf(src.BK, k0, k1),
			wv: rowsOf(src.WV, k0, k1, h), bv: vecOf(src.BV, k0, k1),
			wo: columns(src.WO, h, cfg.QDim(), q0, q1), bo: src.BO,
			wgate: rowsOf(src.WGate, s.inter.Lo, s.inter.Hi, h), bgate: vecOf(src.BGate, s.inter.Lo, s.inter.Hi),
			wup: rowsOf(src.WUp, s.inter.Lo, s.inter.Hi, h), bup: vecOf(src.BUp, s.inter.Lo, s.inter.Hi),
			wdown: columns(src.WDown, h, cfg.Intermediate, s.inter.Lo, s.inter.Hi), bdown: src.BDown,
		})
	}
	return s
}

// columns returns columns [lo, hi) of a row-major [rows, cols] matrix: the
// matrix itself when that is all of it, else a copy.
func columns(m []float32, rows, cols, lo, hi int) []float32 {
	if lo == 0 && hi == cols {
		return m
	}
	out := make([]float32, rows*(hi-lo))
	for r := 0; r < rows; r++ {
		copy(out[r*(hi-lo):(r+1)*(hi-lo)], m[r*cols+lo:r*cols+hi])
	}
	return out
}

// bytes is the weight memory the shard holds, counting views at their size.
func (s *shard) bytes() int64 {
	n := len(s.embed) + len(s.lmHead) + len(s.norm)
	if len(s.embed) > 0 && len(s.lmHead) > 0 && &s.embed[0] == &s.lmHead[0] {
		n -= len(s.lmHead) // tied: one table
	}
	for _, l := range s.layer {
		for _, t := range [][]float32{l.attnNorm, l.mlpNorm, l.qNorm, l.kNorm, l.wq, l.bq, l.wk, l.bk, l.wv, l.bv,
			l.wo, l.bo, l.wgate, l.bgate, l.wup, l.bup, l.wdown, l.bdown} {
			n += len(t)
		}
	}
	return 4 * int64(n)
}
