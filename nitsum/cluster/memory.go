package cluster

import (
	"errors"
	"fmt"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// ErrWeightsDoNotFit is wrapped by New's error when a rank's weight
// memory under the rule exceeds Options.WeightBudget.
var ErrWeightsDoNotFit = errors.New("the model's weights do not fit a rank under Nitsum's full-copy rule")

// Rule is the weight memory of one rank under Nitsum (W1–W3): one full
// copy of the model, which every shard view reads, plus, for every TP
// degree t > 1 an instance may take, the rank's 1/t of the attention
// output and MLP down matrices, copied once at start-up because a column
// slice is not contiguous in the row-major host copy.
type Rule struct {
	Full     int64         // bytes of the full copy, as stored
	PerTP    map[int]int64 // copied column-split bytes per rank, by degree
	Degrees  []int
	ColSplit int64 // bytes of every attention output and MLP down matrix of the model
}

// PerRank is the weight bytes one rank holds: Full + Σ PerTP.
func (r Rule) PerRank() int64 {
	n := r.Full
	for _, b := range r.PerTP {
		n += b
	}
	return n
}

func (r Rule) String() string {
	return fmt.Sprintf("full copy %d bytes + column-split copies %v bytes for TP degrees %v = %d bytes per rank",
		r.Full, r.PerTP, r.Degrees, r.PerRank())
}

// WeightRule computes the rule for the model and TP degrees tps.
// (Keeping one full shard set per degree instead, W3's rejected
// alternative, costs Full·Σ 1/t.)
func WeightRule(cfg *model.Config, w *model.Weights, tps []int) (Rule, error) {
	if len(tps) == 0 {
		return Rule{}, errors.New("cluster: the profile lists no TP degree")
	}
	full := parallel.NewShard(nil, cfg, w, parallel.Standard(parallel.Single), 0).Bytes()
	var cols int64
	for l := range cfg.Layers {
		cols += int64(parallel.HostMatrix(w, parallel.TWO, l).Bytes()) + int64(parallel.HostMatrix(w, parallel.TWDown, l).Bytes())
	}
	r := Rule{Full: full, PerTP: map[int]int64{}, Degrees: append([]int(nil), tps...), ColSplit: cols}
	for _, t := range tps {
		if t > 1 {
			r.PerTP[t] = cols / int64(t)
		}
	}
	return r, nil
}
