package parallel

import "github.com/gearboxlm/gearbox/model"

// Shard is the weights one rank holds under one placement, whatever
// device runs it: the tensors of its pieces (Placement.Pieces). Cut by
// NewShard, row splits (q, k, v, gate, up, vocabulary) are views of the
// model's tensors and column splits (o, down) copies; filled by a
// transition, every tensor is the rank's own. A rank holding a base
// placement and its shift placement holds two shards, the Shift paper's
// separate-model approach.
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

	first, last bool // the rank holds the first or the last pipeline stage
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

// NewShard cuts global rank r's weights out of w under placement l: each
// of its pieces (Placement.Pieces) is a view of w where it takes whole
// rows, a copy where it takes some columns (o and down under TP).
func NewShard(cfg *model.Config, w *model.Weights, l Placement, r int) *Shard {
	s := newShardSpans(cfg, l, r)
	for _, p := range l.Pieces(cfg, r) {
		if p.Tensor == TKV {
			continue
		}
		s.eachLayer(p, func(dst *[]float32, layer int) {
			full, cols := HostTensor(cfg, w, p.Tensor, layer)
			*dst = cut(full, cols, p.Rows, p.Cols)
		})
	}
	s.tieLMHead(cfg)
	return s
}

// NewEmptyShard is global rank r's shard under l with every piece
// allocated and zero, for a transition to fill.
func NewEmptyShard(cfg *model.Config, l Placement, r int) *Shard {
	s := newShardSpans(cfg, l, r)
	for _, p := range l.Pieces(cfg, r) {
		if p.Tensor == TKV {
			continue
		}
		s.eachLayer(p, func(dst *[]float32, _ int) { *dst = make([]float32, p.Rows.Len()*p.Cols.Len()) })
	}
	s.tieLMHead(cfg)
	return s
}

// newShardSpans is the shard's bookkeeping: which heads, columns,
// vocabulary rows and layers it holds, without the tensors.
func newShardSpans(cfg *model.Config, l Placement, r int) *Shard {
	p, c := l.Plan, l.Coords[r]
	s := &Shard{
		TP: c.TP, TPSize: p.TP, SP: c.SP, SPSize: p.SP,
		Slice: SliceHeads(cfg, c.TP, p.SP, p.TP),
		Chunk: ChunkHeads(cfg, p.HeadChunk(c), p.HeadShards()),
		Vocab: Even(cfg.Vocab, p.TP, c.TP),
		Inter: Even(cfg.Intermediate, p.TP, c.TP),
		Stage: p.Stage(c.PP, cfg.Layers),
		first: c.PP == 0,
		last:  c.PP == p.PP-1,
	}
	for j := 0; j < p.SP; j++ {
		s.Chunks = append(s.Chunks, ChunkHeads(cfg, c.TP*p.SP+j, p.HeadShards()))
	}
	s.Layers = make([]LayerShard, s.Stage.Len())
	return s
}

// tieLMHead points a tied LM head at the embedding rows when the rank
// holds both (one stage).
func (s *Shard) tieLMHead(cfg *model.Config) {
	if cfg.TieWordEmbeddings && s.first && s.last {
		s.LMHead = s.Embed
	}
}

// eachLayer calls f with the shard's slot of piece p in each of its
// layers (once, with layer -1, for a tensor outside the layers). A tied
// LM head on a last stage that is not the first is the TEmbed piece there.
func (s *Shard) eachLayer(p Piece, f func(dst *[]float32, layer int)) {
	if !p.Tensor.Layered() {
		slot := s.Slot(p.Tensor, -1)
		f(slot, -1)
		return
	}
	for layer := p.Layers.Lo; layer < p.Layers.Hi; layer++ {
		f(s.Slot(p.Tensor, layer), layer)
	}
}

// Slot is where the shard keeps tensor t of (global) layer layer, -1 for
// tensors outside the layers. TEmbed on a last stage that is not the
// first is the tied LM head.
func (s *Shard) Slot(t Tensor, layer int) *[]float32 {
	switch t {
	case TEmbed:
		if !s.first {
			return &s.LMHead
		}
		return &s.Embed
	case TLMHead:
		return &s.LMHead
	case TNorm:
		return &s.Norm
	}
	l := &s.Layers[layer-s.Stage.Lo]
	return [...]*[]float32{
		TAttnNorm: &l.AttnNorm, TMLPNorm: &l.MLPNorm, TQNorm: &l.QNorm, TKNorm: &l.KNorm,
		TWQ: &l.WQ, TBQ: &l.BQ, TWK: &l.WK, TBK: &l.BK, TWV: &l.WV, TBV: &l.BV, TWO: &l.WO, TBO: &l.BO,
		TWGate: &l.WGate, TBGate: &l.BGate, TWUp: &l.WUp, TBUp: &l.BUp, TWDown: &l.WDown, TBDown: &l.BDown,
	}[t]
}

// HostTensor is tensor t of layer layer in the model's weights and its
// column count.
func HostTensor(cfg *model.Config, w *model.Weights, t Tensor, layer int) ([]float32, int) {
	h := cfg.Hidden
	switch t {
	case TEmbed:
		return w.Embed, h
	case TLMHead:
		return w.LMHead, h
	case TNorm:
		return w.Norm, 1
	}
	l := &w.Layers[layer]
	switch t {
	case TWQ, TWK, TWV, TWGate, TWUp:
		return *[...]*[]float32{TWQ: &l.WQ, TWK: &l.WK, TWV: &l.WV, TWGate: &l.WGate, TWUp: &l.WUp}[t], h
	case TWO:
		return l.WO, cfg.QDim()
	case TWDown:
		return l.WDown, cfg.Intermediate
	}
	return *[...]*[]float32{
		TAttnNorm: &l.AttnNorm, TMLPNorm: &l.MLPNorm, TQNorm: &l.QNorm, TKNorm: &l.KNorm,
		TBQ: &l.BQ, TBK: &l.BK, TBV: &l.BV, TBO: &l.BO, TBGate: &l.BGate, TBUp: &l.BUp, TBDown: &l.BDown,
	}[t], 1
}

// cut returns rows × cols of a row-major matrix with width columns: a
// view when cols is every column, else a copy.
func cut(m []float32, width int, rows, cols Span) []float32 {
	if cols.Lo == 0 && cols.Hi == width {
		return m[rows.Lo*width : rows.Hi*width]
	}
	out := make([]float32, rows.Len()*cols.Len())
	for r := rows.Lo; r < rows.Hi; r++ {
		copy(out[(r-rows.Lo)*cols.Len():], m[r*width+cols.Lo:r*width+cols.Hi])
	}
	return out
}

// CopyPiece copies the part m of a piece from src, which holds piece from
// in the layer's slot, into dst, which holds piece to. m lies inside both;
// layers are the caller's (one slot per layer).
func CopyPiece(dst []float32, to Piece, src []float32, from Piece, m Piece) {
	n := m.Cols.Len()
	for r := m.Rows.Lo; r < m.Rows.Hi; r++ {
		d := (r-to.Rows.Lo)*to.Cols.Len() + m.Cols.Lo - to.Cols.Lo
		o := (r-from.Rows.Lo)*from.Cols.Len() + m.Cols.Lo - from.Cols.Lo
		copy(dst[d:d+n], src[o:o+n])
	}
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
