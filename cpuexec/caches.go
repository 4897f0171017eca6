package cpuexec

import (
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/tensor"
)

// RankCache is rank r's KV cache, r in [0, number of ranks): the slice of
// heads and layers its placement gives it (Placement.KVSlice), block ids
// shared with the engine's scheduler. Package migrate reads and writes it
// to move requests between executors of different TP degree; callers
// guarantee that no Step or Transition runs meanwhile. It is nil for r
// out of range.
func (e *Executor) RankCache(r int) *kvcache.Cache {
	if r < 0 || r >= len(e.ranks) {
		return nil
	}
	return e.ranks[r].cache
}

// CopiedWeightBytes is the weight memory each rank holds as its own copy
// rather than as a view of the host weights, over every placement held:
// the column splits (attention output and MLP down projections) of
// placements with TP > 1, and every piece a transition built.
func (e *Executor) CopiedWeightBytes() []int64 {
	out := make([]int64, len(e.ranks))
	for _, ep := range e.held {
		for r, sh := range ep.shards {
			if ep.built {
				out[r] += sh.Bytes()
				continue
			}
			if sh.TPSize == 1 {
				continue
			}
			for _, l := range sh.Layers {
				for _, m := range []*tensor.Weights{l.WO, l.WDown} {
					if m != nil {
						out[r] += int64(m.Bytes())
					}
				}
			}
		}
	}
	return out
}
