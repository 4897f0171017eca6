package parallel

import (
	"fmt"
	"slices"

	"github.com/gearboxlm/gearbox/model"
)

// Placement says which rank computes and holds what in one step: each
// global rank's coordinate (replica, pipeline stage, SP and TP index),
// from which follow, per op, the weight slices it holds (the embedding's
// and LM head's vocabulary rows, the q/k/v heads of its TP slice, the
// attention-head chunk it attends to, the MLP's intermediate columns, the
// layers of its stage), the KV slice it caches (KVSlice) and the groups it
// communicates over (TPGroup, SPGroup, Peer).
//
// A placement is a value. An executor holds several by Name, which must be
// unique among them: two placements with the same degrees on different
// ranks (pipeline stages in reverse rank order, say) coexist under
// different names. Placements that share their KV slices (SharesKV) run
// over one KV cache, so switching between them moves nothing; moving
// between others is a transition (Transition).
type Placement struct {
	Name   string
	Plan   Plan    // the degrees
	Coords []Coord // by global rank
	// FFN is how the replicas reach the MLP weights: each its own copy
	// (FFNLocal, the zero value) or SiDP's pool, where each layer's MLP is
	// held by one owner replica and reached by weight fetches (FFNWaS) or
	// by shipping activations (FFNCaS); see sidp.go.
	FFN FFNMode
}

// Standard is the plan's own placement, named as the plan.
func Standard(p Plan) Placement {
	l := Placement{Name: p.String(), Plan: p, Coords: make([]Coord, p.Ranks())}
	for r := range l.Coords {
		l.Coords[r] = p.Coord(r)
	}
	return l
}

// NewPlacement places the plan's coordinates on ranks: coords[r] is global
// rank r's. Every coordinate of the plan must be taken by exactly one rank.
func NewPlacement(name string, p Plan, coords []Coord) (Placement, error) {
	if name == "" {
		return Placement{}, fmt.Errorf("placement of %s: a name is required", p)
	}
	if len(coords) != p.Ranks() {
		return Placement{}, fmt.Errorf("placement %s: %d coordinates for the %d ranks of %s", name, len(coords), p.Ranks(), p)
	}
	seen := make([]bool, p.Ranks())
	for r, c := range coords {
		if c.DP < 0 || c.DP >= p.DP || c.PP < 0 || c.PP >= p.PP || c.SP < 0 || c.SP >= p.SP || c.TP < 0 || c.TP >= p.TP {
			return Placement{}, fmt.Errorf("placement %s: rank %d's coordinate %+v is outside %s", name, r, c, p)
		}
		i := p.Rank(c)
		if seen[i] {
			return Placement{}, fmt.Errorf("placement %s: coordinate %+v is taken twice", name, c)
		}
		seen[i] = true
	}
	return Placement{Name: name, Plan: p, Coords: slices.Clone(coords)}, nil
}

// String is the placement's name.
func (l Placement) String() string { return l.Name }

// Ranks is the number of ranks the placement uses.
func (l Placement) Ranks() int { return len(l.Coords) }

// ShiftPlacement is Shift Parallelism's shift configuration of base: full
// TP over the base's SP·TP ranks of each (dp, pp) slice, in ShiftOrder, so
// every rank keeps the attention-head chunk, and so the KV slice, it has
// under Standard(base). It is named as its plan (tp=SP·TP).
func ShiftPlacement(base Plan) Placement {
	s := Plan{DP: base.DP, PP: base.PP, SP: 1, TP: base.SP * base.TP}
	l := Placement{Name: s.String(), Plan: s, Coords: make([]Coord, base.Ranks())}
	for r := range l.Coords {
		c := base.Coord(r)
		l.Coords[r] = Coord{DP: c.DP, PP: c.PP, SP: 0, TP: c.TP*base.SP + c.SP}
	}
	return l
}

// Chunk is the attention-head chunk global rank r attends to.
func (l Placement) Chunk(r int) int { return l.Plan.HeadChunk(l.Coords[r]) }

// Stage is the layers of global rank r's pipeline stage.
func (l Placement) Stage(cfg *model.Config, r int) Span {
	return l.Plan.Stage(l.Coords[r].PP, cfg.Layers)
}

// KVSlice is the part of the KV cache one rank holds: the keys and values
// of KV heads Heads in layers Layers, for every token of the sequences of
// replica Replica.
type KVSlice struct {
	Replica int
	Layers  Span
	Heads   Span // KV heads
}

// KVSlice is global rank r's part of the KV cache.
func (l Placement) KVSlice(cfg *model.Config, r int) KVSlice {
	ch := ChunkHeads(cfg, l.Chunk(r), l.Plan.HeadShards())
	return KVSlice{Replica: l.Coords[r].DP, Layers: l.Stage(cfg, r), Heads: Span{ch.KVLo, ch.KVHi}}
}

// SharesKV reports whether a KV cache written under l can be read under o
// without moving: same ranks, each holding the same KV slice under both.
func (l Placement) SharesKV(cfg *model.Config, o Placement) bool {
	if len(l.Coords) != len(o.Coords) || l.Plan.DP != o.Plan.DP {
		return false
	}
	for r := range l.Coords {
		if l.KVSlice(cfg, r) != o.KVSlice(cfg, r) {
			return false
		}
	}
	return true
}

// Group lists the global ranks of one communication group, in member order.
type Group []int

// TPGroup returns the ranks sharing r's (dp, pp, sp), ordered by TP index.
func (l Placement) TPGroup(r int) Group {
	me := l.Coords[r]
	return l.members(func(c Coord) bool { return c.DP == me.DP && c.PP == me.PP && c.SP == me.SP }, func(c Coord) int { return c.TP })
}

// SPGroup returns the ranks sharing r's (dp, pp, tp), ordered by SP index.
func (l Placement) SPGroup(r int) Group {
	me := l.Coords[r]
	return l.members(func(c Coord) bool { return c.DP == me.DP && c.PP == me.PP && c.TP == me.TP }, func(c Coord) int { return c.SP })
}

// Peer returns the rank at r's (dp, sp, tp) in pipeline stage pp.
func (l Placement) Peer(r, pp int) int {
	me := l.Coords[r]
	g := l.members(func(c Coord) bool { return c.DP == me.DP && c.SP == me.SP && c.TP == me.TP }, func(c Coord) int { return c.PP })
	return g[pp]
}

func (l Placement) members(keep func(Coord) bool, key func(Coord) int) Group {
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
