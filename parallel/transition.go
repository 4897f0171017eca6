package parallel

import (
	"fmt"
	"slices"

	"github.com/gearboxlm/gearbox/model"
)

// Tensor names one tensor of the model (per layer for the decoder's), or
// the KV cache. Weights are row-major [rows, cols] in the PyTorch nn.Linear
// layout [out, in]; vectors (norms, biases) are one column [n, 1].
type Tensor uint8

const (
	TEmbed Tensor = iota // [vocab, hidden]
	TLMHead
	TNorm // final norm
	TAttnNorm
	TMLPNorm
	TQNorm
	TKNorm
	TWQ // [heads·head_dim, hidden]
	TBQ
	TWK
	TBK
	TWV
	TBV
	TWO // [hidden, heads·head_dim]
	TBO
	TWGate // [intermediate, hidden]
	TBGate
	TWUp
	TBUp
	TWDown // [hidden, intermediate]
	TBDown
	TKV // the KV cache: rows are KV heads, every token and head_dim
	numTensors
)

var tensorNames = [numTensors]string{
	"embed", "lm_head", "norm", "attn_norm", "mlp_norm", "q_norm", "k_norm", "wq", "bq", "wk", "bk", "wv", "bv",
	"wo", "bo", "w_gate", "b_gate", "w_up", "b_up", "w_down", "b_down", "kv",
}

func (t Tensor) String() string {
	if t < numTensors {
		return tensorNames[t]
	}
	return fmt.Sprintf("tensor(%d)", uint8(t))
}

// Layered reports whether t has one instance per decoder layer.
func (t Tensor) Layered() bool { return t >= TAttnNorm }

// Piece is the part of one tensor a rank holds: rows and columns of the
// full tensor, in layers Layers (an empty span for tensors outside the
// decoder layers).
type Piece struct {
	Tensor     Tensor
	Layers     Span
	Rows, Cols Span
}

// Elems is the number of elements of the piece.
func (p Piece) Elems() int64 {
	n := int64(p.Rows.Len()) * int64(p.Cols.Len())
	if p.Tensor.Layered() {
		n *= int64(p.Layers.Len())
	}
	return n
}

func (p Piece) String() string {
	return fmt.Sprintf("%s layers %v rows %v cols %v", p.Tensor, p.Layers, p.Rows, p.Cols)
}

// intersect is the common part of two pieces of one tensor.
func (p Piece) intersect(o Piece) (Piece, bool) {
	x := Piece{Tensor: p.Tensor, Layers: p.Layers.intersect(o.Layers), Rows: p.Rows.intersect(o.Rows), Cols: p.Cols.intersect(o.Cols)}
	ok := x.Rows.Len() > 0 && x.Cols.Len() > 0 && (!p.Tensor.Layered() || x.Layers.Len() > 0)
	return x, ok
}

func (s Span) intersect(o Span) Span {
	lo, hi := max(s.Lo, o.Lo), min(s.Hi, o.Hi)
	if hi < lo {
		hi = lo
	}
	return Span{lo, hi}
}

// Pieces lists the parts of every tensor global rank r holds under l, KV
// cache included (Rows are KV heads; its columns are one per head, every
// token and head_dim element of the head). Tensors the model does not have
// (biases, q/k norms) are left out.
func (l Placement) Pieces(cfg *model.Config, r int) []Piece {
	p, c := l.Plan, l.Coords[r]
	h, d := cfg.Hidden, cfg.HeadDim
	all := func(n int) Span { return Span{0, n} }
	one := Span{0, 1}
	stage := l.Stage(cfg, r)
	slice := SliceHeads(cfg, c.TP, p.SP, p.TP)
	q := Span{slice.QLo * d, slice.QHi * d}
	kv := Span{slice.KVLo * d, slice.KVHi * d}
	inter := Even(cfg.Intermediate, p.TP, c.TP)
	vocab := Even(cfg.Vocab, p.TP, c.TP)
	var out []Piece
	add := func(t Tensor, rows, cols Span, present bool) {
		if present {
			out = append(out, Piece{Tensor: t, Layers: stage, Rows: rows, Cols: cols})
		}
	}
	if c.PP == 0 {
		out = append(out, Piece{Tensor: TEmbed, Rows: vocab, Cols: all(h)})
	}
	if c.PP == p.PP-1 {
		if !cfg.TieWordEmbeddings {
			out = append(out, Piece{Tensor: TLMHead, Rows: vocab, Cols: all(h)})
		} else if c.PP != 0 {
			out = append(out, Piece{Tensor: TEmbed, Rows: vocab, Cols: all(h)}) // the tied LM head
		}
		out = append(out, Piece{Tensor: TNorm, Rows: all(h), Cols: one})
	}
	add(TAttnNorm, all(h), one, true)
	add(TMLPNorm, all(h), one, true)
	add(TQNorm, all(d), one, cfg.QKNorm)
	add(TKNorm, all(d), one, cfg.QKNorm)
	add(TWQ, q, all(h), true)
	add(TBQ, q, one, cfg.AttentionBias)
	add(TWK, kv, all(h), true)
	add(TBK, kv, one, cfg.AttentionBias)
	add(TWV, kv, all(h), true)
	add(TBV, kv, one, cfg.AttentionBias)
	add(TWO, all(h), q, true)
	add(TBO, all(h), one, cfg.OutputBias)
	ffn := func(t Tensor, rows, cols Span) {
		if !l.FFN.Pooled() {
			add(t, rows, cols, true)
			return
		}
		for layer := stage.Lo; layer < stage.Hi; layer++ { // SiDP: only the layers this replica owns
			if l.FFNOwner(layer) == c.DP {
				out = append(out, Piece{Tensor: t, Layers: Span{layer, layer + 1}, Rows: rows, Cols: cols})
			}
		}
	}
	ffn(TWGate, inter, all(h))
	add(TBGate, inter, one, cfg.MLPBias)
	ffn(TWUp, inter, all(h))
	add(TBUp, inter, one, cfg.MLPBias)
	ffn(TWDown, all(h), inter)
	add(TBDown, all(h), one, cfg.MLPBias)
	kvs := l.KVSlice(cfg, r)
	out = append(out, Piece{Tensor: TKV, Layers: kvs.Layers, Rows: kvs.Heads, Cols: one})
	return out
}

// Host is Move.From for a piece read from the host copy of the weights.
const Host = -1

// Move is one piece of a transition: what rank To needs under the new
// placement, and the rank (or Host) it comes from. From == To is a copy
// within the rank.
type Move struct {
	Piece
	From, To int
}

// Moves says what a transition moves.
type Moves uint8

const (
	MoveKV      Moves = 1 << iota // the KV cache, from the ranks that hold it
	MoveWeights                   // the weight shards, from peers or the host
	FromHost                      // with MoveWeights: every weight piece from the host copy (Seesaw re-shards from host memory)
)

// Transition plans the moves that take ranks from placement from to
// placement to: for every piece of every tensor (with MoveWeights) and of
// the KV cache (with MoveKV) that a rank holds under to, where it comes
// from. A piece the rank already holds under from comes from itself;
// otherwise from the lowest rank holding it under from (of the same
// replica, for the KV cache); a weight piece no rank holds comes from the
// Host. Both placements must have the same ranks and replicas.
func Transition(cfg *model.Config, from, to Placement, what Moves) ([]Move, error) {
	if len(from.Coords) != len(to.Coords) || from.Plan.DP != to.Plan.DP {
		return nil, fmt.Errorf("parallel: transition %s → %s: %d ranks in %d replicas to %d in %d", from, to,
			len(from.Coords), from.Plan.DP, len(to.Coords), to.Plan.DP)
	}
	held := make([][]Piece, len(from.Coords))
	for r := range held {
		held[r] = from.Pieces(cfg, r)
	}
	var moves []Move
	for r := range to.Coords {
		for _, want := range to.Pieces(cfg, r) {
			if (want.Tensor == TKV && what&MoveKV == 0) || (want.Tensor != TKV && what&MoveWeights == 0) {
				continue
			}
			if want.Tensor != TKV && what&FromHost != 0 {
				moves = append(moves, Move{Piece: want, From: Host, To: r})
				continue
			}
			ms, err := sources(want, r, held, from, to)
			if err != nil {
				return nil, err
			}
			moves = append(moves, ms...)
		}
	}
	return moves, nil
}

// sources covers piece want of rank r with the pieces ranks hold under
// from: each part from r itself when it can, else from the lowest rank
// holding it. The parts are cut on the grid of every holder's boundaries.
func sources(want Piece, r int, held [][]Piece, from, to Placement) ([]Move, error) {
	type holder struct {
		rank  int
		piece Piece
	}
	var hs []holder
	cuts := [3][]int{{want.Layers.Lo, want.Layers.Hi}, {want.Rows.Lo, want.Rows.Hi}, {want.Cols.Lo, want.Cols.Hi}}
	for s, pieces := range held {
		if want.Tensor == TKV && from.Coords[s].DP != to.Coords[r].DP {
			continue
		}
		for _, p := range pieces {
			if p.Tensor != want.Tensor {
				continue
			}
			if x, ok := want.intersect(p); ok {
				hs = append(hs, holder{s, x})
				cuts[0] = append(cuts[0], x.Layers.Lo, x.Layers.Hi)
				cuts[1] = append(cuts[1], x.Rows.Lo, x.Rows.Hi)
				cuts[2] = append(cuts[2], x.Cols.Lo, x.Cols.Hi)
			}
		}
	}
	for i := range cuts {
		slices.Sort(cuts[i])
		cuts[i] = slices.Compact(cuts[i])
	}
	layerCuts := cuts[0]
	if !want.Tensor.Layered() {
		layerCuts = []int{0, 0}
	}
	var out []Move
	for a := 0; a+1 < len(layerCuts); a++ {
		for b := 0; b+1 < len(cuts[1]); b++ {
			for c := 0; c+1 < len(cuts[2]); c++ {
				cell := Piece{Tensor: want.Tensor, Rows: Span{cuts[1][b], cuts[1][b+1]}, Cols: Span{cuts[2][c], cuts[2][c+1]}}
				if want.Tensor.Layered() {
					cell.Layers = Span{layerCuts[a], layerCuts[a+1]}
				}
				src := Host // cells lie on every holder's cuts: inside a holder's piece or apart from it
				for _, h := range hs {
					if x, ok := cell.intersect(h.piece); !ok || x != cell {
						continue
					}
					if h.rank == r {
						src = r
						break
					}
					if src == Host || h.rank < src {
						src = h.rank
					}
				}
				if src == Host && want.Tensor == TKV {
					return nil, fmt.Errorf("parallel: transition %s → %s: no rank of replica %d holds %s for rank %d", from, to, to.Coords[r].DP, cell, r)
				}
				out = append(out, Move{Piece: cell, From: src, To: r})
			}
		}
	}
	return mergeMoves(out), nil
}

// mergeMoves joins cells from one source that are adjacent along one
// span and equal along the others, so a rank's piece from one source is
// one move.
func mergeMoves(ms []Move) []Move {
	for merged := true; merged; {
		merged = false
		for i := 0; i < len(ms) && !merged; i++ {
			for j := i + 1; j < len(ms); j++ {
				if m, ok := join(ms[i], ms[j]); ok {
					ms[i] = m
					ms = slices.Delete(ms, j, j+1)
					merged = true
					break
				}
			}
		}
	}
	return ms
}

func join(a, b Move) (Move, bool) {
	if a.From != b.From || a.To != b.To {
		return a, false
	}
	adj := func(x, y Span) (Span, bool) {
		switch {
		case x.Hi == y.Lo:
			return Span{x.Lo, y.Hi}, true
		case y.Hi == x.Lo:
			return Span{y.Lo, x.Hi}, true
		}
		return x, false
	}
	switch {
	case a.Rows == b.Rows && a.Cols == b.Cols:
		if s, ok := adj(a.Layers, b.Layers); ok {
			a.Layers = s
			return a, true
		}
	case a.Layers == b.Layers && a.Cols == b.Cols:
		if s, ok := adj(a.Rows, b.Rows); ok {
			a.Rows = s
			return a, true
		}
	case a.Layers == b.Layers && a.Rows == b.Rows:
		if s, ok := adj(a.Cols, b.Cols); ok {
			a.Cols = s
			return a, true
		}
	}
	return a, false
}

// TransitionStats counts what one transition moved.
type TransitionStats struct {
	KVBytes     int64 // KV bytes copied to another rank
	WeightBytes int64 // weight bytes copied from another rank or the host
	LocalBytes  int64 // bytes copied within a rank (re-laid out, not moved)
	Moves       int   // pieces moved between ranks or from the host
}

// Add returns s + o, field by field: the totals over transitions.
func (s TransitionStats) Add(o TransitionStats) TransitionStats {
	return TransitionStats{s.KVBytes + o.KVBytes, s.WeightBytes + o.WeightBytes, s.LocalBytes + o.LocalBytes, s.Moves + o.Moves}
}
