package parallel

import (
	"fmt"
	"slices"

	"github.com/gearboxlm/gearbox/model"
)

// Layout places every global rank at a coordinate of a plan. The standard
// layout of a plan uses Plan.Coord; the shift layout of a base plan runs
// full TP with the TP index of rank (sp, tp) set to tp·SP + sp, so each rank
// keeps the attention-head chunk, and the KV cache, it had under the base.
type Layout struct {
	Plan   Plan
	Coords []Coord // by global rank
	name   string
}

// Standard is the plan's own layout.
func Standard(p Plan) Layout {
	l := Layout{Plan: p, Coords: make([]Coord, p.Ranks()), name: p.String()}
	for r := range l.Coords {
		l.Coords[r] = p.Coord(r)
	}
	return l
}

// ShiftLayout is the shift configuration of base: TP over the base's SP·TP
// ranks of each (dp, pp) slice in ShiftOrder.
func ShiftLayout(base Plan) Layout {
	s := base.Shift()
	l := Layout{Plan: s, Coords: make([]Coord, base.Ranks()), name: s.String() + " (shift of " + base.String() + ")"}
	for r := range l.Coords {
		c := base.Coord(r)
		l.Coords[r] = Coord{DP: c.DP, PP: c.PP, SP: 0, TP: c.TP*base.SP + c.SP}
	}
	return l
}

// String names the layout.
func (l Layout) String() string { return l.name }

// Chunk is the attention-head chunk global rank r attends to.
func (l Layout) Chunk(r int) int { return l.Plan.HeadChunk(l.Coords[r]) }

// KVCompatible reports whether a KV cache written under l can be read
// under o without moving: same ranks, and every rank holds the same
// replica, layers and head chunk under both.
func (l Layout) KVCompatible(o Layout) bool {
	if len(l.Coords) != len(o.Coords) || l.Plan.HeadShards() != o.Plan.HeadShards() || l.Plan.PP != o.Plan.PP || l.Plan.DP != o.Plan.DP {
		return false
	}
	for r := range l.Coords {
		a, b := l.Coords[r], o.Coords[r]
		if a.DP != b.DP || a.PP != b.PP || l.Chunk(r) != o.Chunk(r) {
			return false
		}
	}
	return true
}

// Group lists the global ranks of one communication group, in member order.
type Group []int

// TPGroup returns the ranks sharing r's (dp, pp, sp), ordered by TP index.
func (l Layout) TPGroup(r int) Group {
	me := l.Coords[r]
	return l.members(func(c Coord) bool { return c.DP == me.DP && c.PP == me.PP && c.SP == me.SP }, func(c Coord) int { return c.TP })
}

// SPGroup returns the ranks sharing r's (dp, pp, tp), ordered by SP index.
func (l Layout) SPGroup(r int) Group {
	me := l.Coords[r]
	return l.members(func(c Coord) bool { return c.DP == me.DP && c.PP == me.PP && c.TP == me.TP }, func(c Coord) int { return c.SP })
}

// Peer returns the rank at r's (dp, sp, tp) in pipeline stage pp.
func (l Layout) Peer(r, pp int) int {
	me := l.Coords[r]
	g := l.members(func(c Coord) bool { return c.DP == me.DP && c.SP == me.SP && c.TP == me.TP }, func(c Coord) int { return c.PP })
	return g[pp]
}

func (l Layout) members(keep func(Coord) bool, key func(Coord) int) Group {
	var g Group
	for r, c := range l.Coords {
		if keep(c) {
			g = append(g, r)
		}
	}
	slices.SortFunc(g, func(a, b int) int { return key(l.Coords[a]) - key(l.Coords[b]) })
	return g
}

// Label is a stable name for a group, used to cache and account it.
func (g Group) Label(kind string) string { return fmt.Sprintf("%s%v", kind, []int(g)) }

// Heads is the set of attention heads of one chunk: query heads [QLo, QHi)
// and the KV heads [KVLo, KVHi) they read.
type Heads struct{ QLo, QHi, KVLo, KVHi int }

// ChunkHeads returns chunk c of n: Heads/n query heads, and KVHeads/n KV
// heads when n divides KVHeads, else the single KV head the chunk's query
// heads share (KV heads replicated n/KVHeads times).
func ChunkHeads(cfg *model.Config, c, n int) Heads {
	hq := cfg.Heads / n
	h := Heads{QLo: c * hq, QHi: (c + 1) * hq}
	if n <= cfg.KVHeads {
		kv := cfg.KVHeads / n
		h.KVLo, h.KVHi = c*kv, (c+1)*kv
	} else {
		h.KVLo = c / (n / cfg.KVHeads)
		h.KVHi = h.KVLo + 1
	}
	return h
}

// SliceHeads returns the heads of TP slice tp of a (SP=s, TP=t) layout: the
// chunks tp·s … tp·s+s-1 together.
func SliceHeads(cfg *model.Config, tp, s, t int) Heads {
	first, last := ChunkHeads(cfg, tp*s, s*t), ChunkHeads(cfg, tp*s+s-1, s*t)
	return Heads{QLo: first.QLo, QHi: last.QHi, KVLo: first.KVLo, KVHi: last.KVHi}
}

// Span is a contiguous range [Lo, Hi).
type Span struct{ Lo, Hi int }

// Len is Hi - Lo.
func (s Span) Len() int { return s.Hi - s.Lo }

// Even splits n into parts contiguous spans, as even as possible with the
// earlier spans taking the extra element; part i is returned.
func Even(n, parts, i int) Span {
	base, extra := n/parts, n%parts
	lo := i*base + min(i, extra)
	hi := lo + base
	if i < extra {
		hi++
	}
	return Span{lo, hi}
}
