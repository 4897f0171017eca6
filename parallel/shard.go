package parallel

import "github.com/gearboxlm/gearbox/model"

// Shard is the weights one rank holds under one layout, whatever device
// runs it. Row splits (q, k,
// v, gate, up, vocabulary) are views of the model's tensors; column splits
// (o, down) are copies when TP > 1. A rank under a base plan and its shift
// plan holds two shards, the paper's separate-model approach.
type Shard struct {
	TP, TPSize int          // TP index and degree
	SP, SPSize int          // SP index and degree
	Slice      Heads        // heads of this rank's TP slice (computed by q/k/v)
	Chunk      Heads        // heads this rank attends to after the SP all-to-all
	Chunks     []Heads      // heads of every chunk of the slice, by SP member
	Vocab      Span         // vocabulary rows of the embedding and LM head
	Inter      Span         // intermediate columns of the MLP
	Stage      Span         // layers of this rank's pipeline stage
	Embed      []float32    // [Vocab.Len, hidden]; nil off the first stage
	LMHead     []float32    // [Vocab.Len, hidden]; nil off the last stage
	Norm       []float32    // [hidden]; nil off the last stage
	Layers     []LayerShard // the stage's layers
}

// LayerShard is one decoder layer's part of a Shard.
type LayerShard struct {
	AttnNorm, MLPNorm []float32 // [hidden]
	QNorm, KNorm      []float32 // [head_dim] or nil
	WQ, BQ            []float32 // [slice q heads·head_dim, hidden], [slice q heads·head_dim]
	WK, BK            []float32 // [slice kv heads·head_dim, hidden]
	WV, BV            []float32
	WO                []float32 // [hidden, slice q heads·head_dim]
	BO                []float32 // [hidden], added once after the reduction
	WGate, BGate      []float32 // [Inter.Len, hidden]
	WUp, BUp          []float32
	WDown             []float32 // [hidden, Inter.Len]
	BDown             []float32 // [hidden]
}

// NewShard cuts global rank r's weights out of w under layout l.
func NewShard(cfg *model.Config, w *model.Weights, l Layout, r int) *Shard {
	p, c := l.Plan, l.Coords[r]
	s := &Shard{
		TP: c.TP, TPSize: p.TP, SP: c.SP, SPSize: p.SP,
		Slice: SliceHeads(cfg, c.TP, p.SP, p.TP),
		Chunk: ChunkHeads(cfg, p.HeadChunk(c), p.HeadShards()),
		Vocab: Even(cfg.Vocab, p.TP, c.TP),
		Inter: Even(cfg.Intermediate, p.TP, c.TP),
		Stage: p.Stage(c.PP, cfg.Layers),
	}
	for j := 0; j < p.SP; j++ {
		s.Chunks = append(s.Chunks, ChunkHeads(cfg, c.TP*p.SP+j, p.HeadShards()))
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
		s.Embed = rowsOf(w.Embed, s.Vocab.Lo, s.Vocab.Hi, h)
	}
	if c.PP == p.PP-1 {
		s.LMHead = rowsOf(w.LMHead, s.Vocab.Lo, s.Vocab.Hi, h)
		s.Norm = w.Norm
	}
	q0, q1 := s.Slice.QLo*d, s.Slice.QHi*d
	k0, k1 := s.Slice.KVLo*d, s.Slice.KVHi*d
	in0, in1 := s.Inter.Lo, s.Inter.Hi
	for i := s.Stage.Lo; i < s.Stage.Hi; i++ {
		src := &w.Layers[i]
		s.Layers = append(s.Layers, LayerShard{
			AttnNorm: src.AttnNorm, MLPNorm: src.MLPNorm, QNorm: src.QNorm, KNorm: src.KNorm,
			WQ: rowsOf(src.WQ, q0, q1, h), BQ: vecOf(src.BQ, q0, q1),
			WK: rowsOf(src.WK, k0, k1, h), BK: vecOf(src.BK, k0, k1),
			WV: rowsOf(src.WV, k0, k1, h), BV: vecOf(src.BV, k0, k1),
			WO: columns(src.WO, h, cfg.QDim(), q0, q1), BO: src.BO,
			WGate: rowsOf(src.WGate, in0, in1, h), BGate: vecOf(src.BGate, in0, in1),
			WUp: rowsOf(src.WUp, in0, in1, h), BUp: vecOf(src.BUp, in0, in1),
			WDown: columns(src.WDown, h, cfg.Intermediate, in0, in1), BDown: src.BDown,
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

// Elems is the number of weight elements the shard holds, counting views
// at their size and a tied embedding and LM head once.
func (s *Shard) Elems() int64 {
	n := len(s.Embed) + len(s.LMHead) + len(s.Norm)
	if len(s.Embed) > 0 && len(s.LMHead) > 0 && &s.Embed[0] == &s.LMHead[0] {
		n -= len(s.LMHead) // tied: one table
	}
	for _, l := range s.Layers {
		for _, t := range [][]float32{l.AttnNorm, l.MLPNorm, l.QNorm, l.KNorm, l.WQ, l.BQ, l.WK, l.BK, l.WV, l.BV,
			l.WO, l.BO, l.WGate, l.BGate, l.WUp, l.BUp, l.WDown, l.BDown} {
			n += len(t)
		}
	}
	return int64(n)
}
