package migrate

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// Grouping splits ranks [0, Ranks()) into tensor-parallel groups of
// consecutive ranks: entry g is the TP degree of group g, in rank order,
// so Grouping{2, 1, 1} is one TP2 group on ranks 0–1 and two TP1 groups on
// ranks 2 and 3. A valid grouping has power-of-two degrees, each group
// starting at a multiple of its degree (aligned blocks, as the nitsum
// planner lays instances out), and degrees that the model's KV heads split
// evenly.
type Grouping []int

// Uniform is the grouping of ranks ranks into groups of degree tp.
func Uniform(ranks, tp int) Grouping {
	if tp <= 0 || ranks <= 0 {
		return nil
	}
	g := make(Grouping, ranks/tp)
	for i := range g {
		g[i] = tp
	}
	return g
}

// Ranks is the number of ranks the groups cover.
func (g Grouping) Ranks() int {
	n := 0
	for _, t := range g {
		n += t
	}
	return n
}

// Group is the ranks [Lo, Hi) of group i.
func (g Grouping) Group(i int) parallel.Span {
	lo := 0
	for _, t := range g[:i] {
		lo += t
	}
	return parallel.Span{Lo: lo, Hi: lo + g[i]}
}

// GroupOf is the index of the group holding rank r, or -1 when no group
// does.
func (g Grouping) GroupOf(r int) int {
	lo := 0
	for i, t := range g {
		if r >= lo && r < lo+t {
			return i
		}
		lo += t
	}
	return -1
}

// Heads is the KV heads rank r caches under g: position p in a group of
// degree t holds heads [p·H/t, (p+1)·H/t) of every request of its group,
// the KV slice of parallel.SliceHeads, so the cache matches the rank's
// weight shard view (spec K3, pitfall 13). r must be one of g's ranks.
func (g Grouping) Heads(cfg *model.Config, r int) parallel.Span {
	grp := g.Group(g.GroupOf(r))
	h := parallel.SliceHeads(cfg, r-grp.Lo, 1, grp.Len())
	return parallel.Span{Lo: h.KVLo, Hi: h.KVHi}
}

// Validate checks that g covers at least one rank with aligned
// power-of-two groups whose degrees fit the model: each degree is a
// valid TP plan for cfg and at most cfg.KVHeads (a migration does not
// replicate KV heads).
func (g Grouping) Validate(cfg *model.Config) error {
	if len(g) == 0 {
		return fmt.Errorf("migrate: grouping %v has no groups", g)
	}
	lo := 0
	for i, t := range g {
		switch {
		case t <= 0 || t&(t-1) != 0:
			return fmt.Errorf("migrate: grouping %v: group %d has degree %d, want a power of two", g, i, t)
		case lo%t != 0:
			return fmt.Errorf("migrate: grouping %v: group %d of degree %d starts at rank %d, not a multiple of %d", g, i, t, lo, t)
		case t > cfg.KVHeads:
			return fmt.Errorf("migrate: grouping %v: degree %d exceeds the %d KV heads", g, t, cfg.KVHeads)
		}
		if err := (parallel.Plan{DP: 1, PP: 1, SP: 1, TP: t}).Validate(cfg); err != nil {
			return fmt.Errorf("migrate: grouping %v: %w", g, err)
		}
		lo += t
	}
	return nil
}

// String writes the degrees, e.g. "tp[2 1 1]".
func (g Grouping) String() string {
	parts := make([]string, len(g))
	for i, t := range g {
		parts[i] = strconv.Itoa(t)
	}
	return "tp[" + strings.Join(parts, " ") + "]"
}
