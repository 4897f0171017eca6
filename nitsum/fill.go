package nitsum

import "fmt"

// fillRounds bounds PlanFilled's search: doublings of the rate scale,
// then as many bisection steps.
const fillRounds = 12

// PlanFilled is Plan with no GPU left idle while the tiers have demand:
// the paper's greedy stops once every tier's measured rate is met (spec
// P8) and leaves the rest of the pool unassigned, which it does not
// specify a use for (P10). PlanFilled plans instead for the rates scaled
// up by the smallest factor k ≥ 1 (searched by doubling, then bisection)
// at which the plan uses the most GPUs it can, so the spare GPUs go to the
// tiers in the proportions their own demand would have them, as headroom
// over the measured rates. Rates are all zero: Plan's all-spare plan. The
// returned plan's TierPlan.Rate is the given rate and Served is
// min(Capacity, Rate); the instances and their capacities are those of the
// scaled plan. Deterministic as Plan is.
func (pl *Planner) PlanFilled(rates []float64) (*Plan, error) {
	base, err := pl.Plan(rates)
	if err != nil {
		return nil, err
	}
	total := 0.0
	for _, r := range rates {
		total += r
	}
	if total == 0 || base.Used() == pl.gpus {
		return base, nil
	}
	scaled := make([]float64, len(rates))
	at := func(k float64) (*Plan, error) {
		for i, r := range rates {
			scaled[i] = r * k
		}
		p, err := pl.Plan(scaled)
		if err != nil {
			return nil, fmt.Errorf("nitsum: plan filled: %w", err)
		}
		return p, nil
	}
	// Doubling: the first scale whose plan uses the most GPUs seen.
	lo, hi := 1.0, 2.0
	best, bestK := base, 1.0
	for range fillRounds {
		p, err := at(hi)
		if err != nil {
			return nil, err
		}
		if p.Used() > best.Used() {
			best, bestK = p, hi
		}
		if p.Used() == pl.gpus {
			break
		}
		lo, hi = hi, 2*hi
	}
	// Bisection between the last scale short of the best and the best.
	lo, hi = max(1, min(lo, bestK/2)), bestK
	for range fillRounds {
		mid := (lo + hi) / 2
		p, err := at(mid)
		if err != nil {
			return nil, err
		}
		if p.Used() >= best.Used() {
			best, hi = p, mid
		} else {
			lo = mid
		}
	}
	for s := range best.Tiers {
		t := &best.Tiers[s]
		t.Rate = rates[s]
		t.Served = min(t.Capacity, t.Rate)
	}
	return best, nil
}
