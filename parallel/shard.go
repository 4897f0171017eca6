package parallel

import (
	"fmt"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/tensor"
)

// Shard is the weights one rank holds under one placement, whatever
// device runs it: the tensors of its pieces (Placement.Pieces). Cut by
// NewShard, row splits (q, k, v, gate, up, vocabulary) are views of the
// model's tensors and column splits (o, down) copies, in the model's
// matrix formats; filled by a transition, every tensor is the rank's own.
// A rank holding a base placement and its shift placement holds two
// shards, the Shift paper's separate-model approach.
type Shard struct {
	TP, TPSize int             // TP index and degree
	SP, SPSize int             // SP index and degree
	Slice      Heads           // heads of this rank's TP slice (computed by q/k/v)
	Chunk      Heads           // heads this rank attends to after the SP all-to-all
	Chunks     []Heads         // heads of every chunk of the slice, by SP member
	Vocab      Span            // vocabulary rows of the embedding and LM head
	Inter      Span            // intermediate columns of the MLP
	Stage      Span            // layers of this rank's pipeline stage
	Embed      *tensor.Weights // [Vocab.Len, hidden]; nil off the first stage
	LMHead     *tensor.Weights // [Vocab.Len, hidden]; nil off the last stage; Embed itself when tied on one stage
	Norm       []float32       // [hidden]; nil off the last stage
	Layers     []LayerShard    // the stage's layers

	first, last bool // the rank holds the first or the last pipeline stage
}

// LayerShard is one decoder layer's part of a Shard.
type LayerShard struct {
	AttnNorm, MLPNorm []float32       // [hidden]
	QNorm, KNorm      []float32       // [head_dim] or nil
	WQ                *tensor.Weights // [slice q heads·head_dim, hidden]
	BQ                []float32       // [slice q heads·head_dim]
	WK, WV            *tensor.Weights // [slice kv heads·head_dim, hidden]
	BK, BV            []float32
	WO                *tensor.Weights // [hidden, slice q heads·head_dim]
	BO                []float32       // [hidden], added once after the reduction
	WGate, WUp        *tensor.Weights // [Inter.Len, hidden]
	BGate, BUp        []float32
	WDown             *tensor.Weights // [hidden, Inter.Len]
	BDown             []float32       // [hidden]
}

// NewShard cuts global rank r's weights out of w under placement l: each
// of its pieces (Placement.Pieces) is a view of w where it takes whole
// rows, a copy where it takes some columns (o and down under TP), in w's
// formats (see tensor.Weights.Cols for Q8_0 columns). The pool p (nil:
// inline) splits the copies' rows.
func NewShard(p *tensor.Pool, cfg *model.Config, w *model.Weights, l Placement, r int) *Shard {
	s := newShardSpans(cfg, l, r)
	for _, pc := range l.Pieces(cfg, r) {
		if pc.Tensor == TKV {
			continue
		}
		s.eachLayer(pc, func(layer int) {
			if pc.Tensor.Matrix() {
				m := HostMatrix(w, pc.Tensor, layer)
				*s.MatSlot(pc.Tensor, layer) = m.Rows(pc.Rows.Lo, pc.Rows.Hi).Cols(p, pc.Cols.Lo, pc.Cols.Hi)
				return
			}
			*s.Slot(pc.Tensor, layer) = HostVector(w, pc.Tensor, layer)[pc.Rows.Lo:pc.Rows.Hi]
		})
	}
	s.tieLMHead(cfg)
	return s
}

// NewEmptyShard is global rank r's shard under l with every piece
// allocated and zero, each matrix in the format of w's, for a transition
// to fill (through WritePiece and the vector slots). Q8_0 matrices cannot
// be filled piece by piece; it panics on one.
func NewEmptyShard(cfg *model.Config, w *model.Weights, l Placement, r int) *Shard {
	s := newShardSpans(cfg, l, r)
	for _, p := range l.Pieces(cfg, r) {
		if p.Tensor == TKV {
			continue
		}
		s.eachLayer(p, func(layer int) {
			if p.Tensor.Matrix() {
				d := HostMatrix(w, p.Tensor, layer).DType()
				if d == tensor.Q8_0 {
					panic(fmt.Sprintf("parallel.NewEmptyShard: %s is Q8_0, which cannot be filled piece by piece", p.Tensor))
				}
				*s.MatSlot(p.Tensor, layer) = tensor.NewWeights(d, p.Rows.Len(), p.Cols.Len())
				return
			}
			*s.Slot(p.Tensor, layer) = make([]float32, p.Rows.Len()*p.Cols.Len())
		})
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

// eachLayer calls f with each (global) layer of piece p (once, with layer
// -1, for a tensor outside the layers).
func (s *Shard) eachLayer(p Piece, f func(layer int)) {
	if !p.Tensor.Layered() {
		f(-1)
		return
	}
	for layer := p.Layers.Lo; layer < p.Layers.Hi; layer++ {
		f(layer)
	}
}

// Matrix reports whether t is a weight matrix (held as a tensor.Weights)
// rather than a float32 vector or the KV cache.
func (t Tensor) Matrix() bool {
	switch t {
	case TEmbed, TLMHead, TWQ, TWK, TWV, TWO, TWGate, TWUp, TWDown:
		return true
	}
	return false
}

// MatSlot is where the shard keeps matrix t of (global) layer layer, -1
// for the embedding and LM head. TEmbed on a last stage that is not the
// first is the tied LM head.
func (s *Shard) MatSlot(t Tensor, layer int) **tensor.Weights {
	switch t {
	case TEmbed:
		if !s.first {
			return &s.LMHead
		}
		return &s.Embed
	case TLMHead:
		return &s.LMHead
	}
	l := &s.Layers[layer-s.Stage.Lo]
	switch t {
	case TWQ:
		return &l.WQ
	case TWK:
		return &l.WK
	case TWV:
		return &l.WV
	case TWO:
		return &l.WO
	case TWGate:
		return &l.WGate
	case TWUp:
		return &l.WUp
	case TWDown:
		return &l.WDown
	}
	panic(fmt.Sprintf("parallel.Shard.MatSlot: %s is not a matrix", t))
}

// Slot is where the shard keeps vector t (a norm or a bias) of (global)
// layer layer, -1 for the final norm.
func (s *Shard) Slot(t Tensor, layer int) *[]float32 {
	if t == TNorm {
		return &s.Norm
	}
	if t.Matrix() || t >= TKV {
		panic(fmt.Sprintf("parallel.Shard.Slot: %s is not a vector", t))
	}
	l := &s.Layers[layer-s.Stage.Lo]
	return [...]*[]float32{
		TAttnNorm: &l.AttnNorm, TMLPNorm: &l.MLPNorm, TQNorm: &l.QNorm, TKNorm: &l.KNorm,
		TBQ: &l.BQ, TBK: &l.BK, TBV: &l.BV, TBO: &l.BO, TBGate: &l.BGate, TBUp: &l.BUp, TBDown: &l.BDown,
	}[t]
}

// HostMatrix is matrix t of layer layer in the model's weights.
func HostMatrix(w *model.Weights, t Tensor, layer int) *tensor.Weights {
	switch t {
	case TEmbed:
		return w.Embed
	case TLMHead:
		return w.LMHead
	}
	l := &w.Layers[layer]
	switch t {
	case TWQ:
		return l.WQ
	case TWK:
		return l.WK
	case TWV:
		return l.WV
	case TWO:
		return l.WO
	case TWGate:
		return l.WGate
	case TWUp:
		return l.WUp
	case TWDown:
		return l.WDown
	}
	panic(fmt.Sprintf("parallel.HostMatrix: %s is not a matrix", t))
}

// HostVector is vector t (a norm or a bias, one column) of layer layer in
// the model's weights.
func HostVector(w *model.Weights, t Tensor, layer int) []float32 {
	if t == TNorm {
		return w.Norm
	}
	if t.Matrix() || t >= TKV {
		panic(fmt.Sprintf("parallel.HostVector: %s is not a vector", t))
	}
	l := &w.Layers[layer]
	return *[...]*[]float32{
		TAttnNorm: &l.AttnNorm, TMLPNorm: &l.MLPNorm, TQNorm: &l.QNorm, TKNorm: &l.KNorm,
		TBQ: &l.BQ, TBK: &l.BK, TBV: &l.BV, TBO: &l.BO, TBGate: &l.BGate, TBUp: &l.BUp, TBDown: &l.BDown,
	}[t]
}

// CopyPiece copies the part m of a vector piece from src, which holds
// piece from in the layer's slot, into dst, which holds piece to. m lies
// inside both; layers are the caller's (one slot per layer).
func CopyPiece(dst []float32, to Piece, src []float32, from Piece, m Piece) {
	n := m.Cols.Len()
	for r := m.Rows.Lo; r < m.Rows.Hi; r++ {
		d := (r-to.Rows.Lo)*to.Cols.Len() + m.Cols.Lo - to.Cols.Lo
		o := (r-from.Rows.Lo)*from.Cols.Len() + m.Cols.Lo - from.Cols.Lo
		copy(dst[d:d+n], src[o:o+n])
	}
}

// ReadPiece writes the part m of a matrix piece from src, which holds
// piece from, into buf as float32, rows × cols row-major: exact for every
// format (widened or dequantized).
func ReadPiece(buf []float32, src *tensor.Weights, from Piece, m Piece) {
	n := m.Cols.Len()
	for r := m.Rows.Lo; r < m.Rows.Hi; r++ {
		i := r - m.Rows.Lo
		src.Segment(r-from.Rows.Lo, m.Cols.Lo-from.Cols.Lo, buf[i*n:(i+1)*n])
	}
}

// WritePiece writes buf, packed as ReadPiece packs part m, into dst,
// which holds piece to and is not yet in use (NewEmptyShard's). Values
// read from a matrix of dst's format go back bit-exact. It panics on a
// Q8_0 dst.
func WritePiece(dst *tensor.Weights, to Piece, buf []float32, m Piece) {
	n, width := m.Cols.Len(), to.Cols.Len()
	for r := m.Rows.Lo; r < m.Rows.Hi; r++ {
		i := r - m.Rows.Lo
		d := (r-to.Rows.Lo)*width + m.Cols.Lo - to.Cols.Lo
		src := buf[i*n : (i+1)*n]
		switch dst.DType() {
		case tensor.F32:
			copy(dst.F32()[d:d+n], src)
		case tensor.BF16:
			tensor.EncodeBF16(dst.Half()[d:d+n], src)
		case tensor.F16:
			tensor.EncodeF16(dst.Half()[d:d+n], src)
		default:
			panic(fmt.Sprintf("parallel.WritePiece: %v matrices cannot be written piece by piece", dst.DType()))
		}
	}
}

// Elems is the number of weight elements the shard holds, counting views
// at their size and a tied embedding and LM head once.
func (s *Shard) Elems() int64 {
	var n int64
	s.each(func(m *tensor.Weights) {
		r, k := m.Shape()
		n += int64(r) * int64(k)
	}, func(v []float32) { n += int64(len(v)) })
	return n
}

// Bytes is the memory the shard's weights take as stored (matrices in
// their formats, vectors float32), counting views at their size and a
// tied embedding and LM head once.
func (s *Shard) Bytes() int64 {
	var n int64
	s.each(func(m *tensor.Weights) { n += int64(m.Bytes()) }, func(v []float32) { n += 4 * int64(len(v)) })
	return n
}

// each calls mat for every matrix the shard holds (a tied LM head once)
// and vec for every vector.
func (s *Shard) each(mat func(*tensor.Weights), vec func([]float32)) {
	if s.Embed != nil {
		mat(s.Embed)
	}
	if s.LMHead != nil && s.LMHead != s.Embed {
		mat(s.LMHead)
	}
	vec(s.Norm)
	for _, l := range s.Layers {
		for _, m := range []*tensor.Weights{l.WQ, l.WK, l.WV, l.WO, l.WGate, l.WUp, l.WDown} {
			if m != nil {
				mat(m)
			}
		}
		for _, v := range [][]float32{l.AttnNorm, l.MLPNorm, l.QNorm, l.KNorm, l.BQ, l.BK, l.BV, l.BO, l.BGate, l.BUp, l.BDown} {
			vec(v)
		}
	}
}
