package migrate

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// RequestID names a request on every rank.
type RequestID uint64

// Request is one request a migration moves from its group under
// Spec.From to its group under Spec.To. Every request lives in exactly one
// group before and exactly one after.
type Request struct {
	ID RequestID
	// From and To are the request's group indices in Spec.From and
	// Spec.To. When groups merge there is one choice; when a group splits,
	// the caller picks which part each request joins.
	From, To int
	// Len is the number of tokens whose keys and values the source group
	// caches: the context length. A running request that has computed
	// nothing yet has Len 0 and moves no bytes.
	Len int
	// Waiting marks a request that has not started (spec K2): it moves as
	// metadata only (the caller moves its queue entry and prompt as
	// Plan.Meta directs), with Len 0 and no block tables.
	Waiting bool
	// Src is the request's block table in its source group's caches: token
	// p of every KV head the group holds lives in block Src[p/BlockSize]
	// of each member's cache (one table per group, from the group's
	// kvcache.BlockManager). It covers Len tokens.
	Src []int
	// Dst is the block table the request gets in its destination group's
	// caches, allocated by the caller (e.g. Admit on the destination
	// group's BlockManager) and covering Len tokens. The migration writes
	// exactly the slots of tokens [0, Len) of the heads each member holds.
	Dst []int
}

// Spec is what a migration is asked to do.
type Spec struct {
	// Model gives the KV geometry: Layers, KVHeads (H) and HeadDim, and
	// Heads for the validity of each TP degree.
	Model    *model.Config
	From, To Grouping // before and after; over the same ranks
	Requests []Request
}

// Transfer is one request's KV heads moving from one rank to another, or
// copied within a rank when From == To: the keys and values of heads
// Heads (global KV head indices) in every layer, for tokens [0, Len), read
// through block table Src of rank From's source cache and written through
// block table Dst of rank To's destination cache.
type Transfer struct {
	Req      RequestID
	Heads    parallel.Span
	Len      int
	From, To int
	Src, Dst []int
}

// Elems is the number of float32 values t carries, keys and values
// together: 2 · layers · heads · Len · headDim.
func (t Transfer) Elems(layers, headDim int) int64 {
	return 2 * int64(layers) * int64(t.Heads.Len()) * int64(t.Len) * int64(headDim)
}

// Meta is a waiting request's metadata moving from rank From to rank To,
// which does not hold it yet; it carries no KV (spec K2). When the degree
// goes up the metadata spreads from the source group to every rank of the
// destination group; when it goes down the ranks that leave drop it and
// nothing moves.
type Meta struct {
	Req      RequestID
	From, To int
}

// Plan is a migration worked out per rank (spec K4): for every running
// request, each member of its source group sends the part of its head
// range that each member of the destination group holds afterwards, and
// copies the part it keeps. When TP doubles on merged groups, rank r gives
// half its heads to the new member that holds them; from TP2 to TP4 a rank
// gathers from its old partner and from a rank of the other merged group
// (G2 ← {G1, G3}, pitfall 12); when TP goes down the same moves run in
// reverse.
type Plan struct {
	Layers, HeadDim int
	From, To        Grouping
	// Transfers lists every KV transfer, copies within a rank included,
	// ordered by From, To and request.
	Transfers []Transfer
	// Meta lists the metadata moves of waiting requests, ordered by
	// request, From and To.
	Meta []Meta

	held, holds []parallel.Span // by rank: KV heads under From and To
}

// NewPlan checks s and computes its plan. The plan shares the requests'
// block tables, which must not change until every rank's Run returns.
func NewPlan(s Spec) (*Plan, error) {
	cfg := s.Model
	if cfg == nil || cfg.Layers <= 0 || cfg.KVHeads <= 0 || cfg.HeadDim <= 0 {
		return nil, fmt.Errorf("migrate: model geometry missing or not positive: %+v", cfg)
	}
	if err := s.From.Validate(cfg); err != nil {
		return nil, fmt.Errorf("migrate: from: %w", err)
	}
	if err := s.To.Validate(cfg); err != nil {
		return nil, fmt.Errorf("migrate: to: %w", err)
	}
	if s.From.Ranks() != s.To.Ranks() {
		return nil, fmt.Errorf("migrate: %v covers %d ranks, %v covers %d", s.From, s.From.Ranks(), s.To, s.To.Ranks())
	}
	p := &Plan{Layers: cfg.Layers, HeadDim: cfg.HeadDim, From: s.From, To: s.To}
	for r := range s.From.Ranks() {
		p.held = append(p.held, s.From.Heads(cfg, r))
		p.holds = append(p.holds, s.To.Heads(cfg, r))
	}
	seen := make(map[RequestID]bool, len(s.Requests))
	for _, rq := range s.Requests {
		if err := checkRequest(s, rq, seen); err != nil {
			return nil, err
		}
		src, dst := s.From.Group(rq.From), s.To.Group(rq.To)
		if rq.Waiting {
			for d := dst.Lo; d < dst.Hi; d++ {
				if d < src.Lo || d >= src.Hi {
					p.Meta = append(p.Meta, Meta{Req: rq.ID, From: src.Lo + (d-dst.Lo)%src.Len(), To: d})
				}
			}
			continue
		}
		for r := src.Lo; r < src.Hi; r++ {
			for d := dst.Lo; d < dst.Hi; d++ {
				x := intersect(p.held[r], p.holds[d])
				if x.Len() > 0 {
					p.Transfers = append(p.Transfers, Transfer{Req: rq.ID, Heads: x, Len: rq.Len, From: r, To: d, Src: rq.Src, Dst: rq.Dst})
				}
			}
		}
	}
	slices.SortFunc(p.Transfers, func(a, b Transfer) int {
		return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To), cmp.Compare(a.Req, b.Req))
	})
	slices.SortFunc(p.Meta, func(a, b Meta) int {
		return cmp.Or(cmp.Compare(a.Req, b.Req), cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
	return p, nil
}

func checkRequest(s Spec, rq Request, seen map[RequestID]bool) error {
	switch {
	case seen[rq.ID]:
		return fmt.Errorf("migrate: request %d listed twice", rq.ID)
	case rq.From < 0 || rq.From >= len(s.From):
		return fmt.Errorf("migrate: request %d: source group %d outside %v", rq.ID, rq.From, s.From)
	case rq.To < 0 || rq.To >= len(s.To):
		return fmt.Errorf("migrate: request %d: destination group %d outside %v", rq.ID, rq.To, s.To)
	case rq.Len < 0 || rq.Len > math.MaxInt32:
		return fmt.Errorf("migrate: request %d: context length %d outside [0, 2^31)", rq.ID, rq.Len)
	case rq.Waiting && (rq.Len != 0 || len(rq.Src) != 0 || len(rq.Dst) != 0):
		return fmt.Errorf("migrate: waiting request %d has KV (%d tokens, %d source and %d destination blocks)", rq.ID, rq.Len, len(rq.Src), len(rq.Dst))
	}
	seen[rq.ID] = true
	return nil
}

func intersect(a, b parallel.Span) parallel.Span {
	lo, hi := max(a.Lo, b.Lo), min(a.Hi, b.Hi)
	if hi < lo {
		hi = lo
	}
	return parallel.Span{Lo: lo, Hi: hi}
}

// Ranks is the number of ranks the migration runs on.
func (p *Plan) Ranks() int { return p.From.Ranks() }

// MovedBytes is the KV bytes (float32 keys and values) that cross from
// one rank to another: Σ over requests of moved heads × layers × context
// × head_dim × 2 × 4. Copies within a rank are not counted.
func (p *Plan) MovedBytes() int64 {
	var n int64
	for _, t := range p.Transfers {
		if t.From != t.To {
			n += 4 * t.Elems(p.Layers, p.HeadDim)
		}
	}
	return n
}

// RankPlan is one rank's part of a plan: everything Run needs on that
// rank and nothing it does not. Each call of Plan.Rank returns a fresh
// copy (block tables shared), as a rank of a distributed system would
// hold its own; the handshake checks that the copies agree.
type RankPlan struct {
	Rank            int
	Ranks           int // ranks taking part, world ranks [0, Ranks)
	Layers, HeadDim int
	// Held is the KV heads the rank's source cache holds, under From;
	// Holds those its destination cache holds, under To.
	Held, Holds parallel.Span
	// Sends go to other ranks, ordered by destination and request; Recvs
	// come from other ranks, ordered by source and request; Keeps are
	// copies from the rank's source cache to its destination cache.
	// Transfers between one pair of ranks travel in request order.
	Sends, Recvs, Keeps []Transfer
	// MetaSends and MetaRecvs are the waiting requests' metadata moves
	// from and to this rank.
	MetaSends, MetaRecvs []Meta
}

// Rank returns rank r's part of p; r is in [0, Ranks()).
func (p *Plan) Rank(r int) RankPlan {
	rp := RankPlan{Rank: r, Ranks: p.Ranks(), Layers: p.Layers, HeadDim: p.HeadDim, Held: p.held[r], Holds: p.holds[r]}
	for _, t := range p.Transfers {
		switch {
		case t.From == r && t.To == r:
			rp.Keeps = append(rp.Keeps, t)
		case t.From == r:
			rp.Sends = append(rp.Sends, t)
		case t.To == r:
			rp.Recvs = append(rp.Recvs, t)
		}
	}
	for _, m := range p.Meta {
		if m.From == r {
			rp.MetaSends = append(rp.MetaSends, m)
		}
		if m.To == r {
			rp.MetaRecvs = append(rp.MetaRecvs, m)
		}
	}
	return rp
}
