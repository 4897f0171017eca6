package sim

import (
	"fmt"
	"math"

	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/slo"
)

// The instances of the static baselines of the Nitsum paper's comparison
// (SystemSLOBatch, SystemSplit); RunNitsum runs them with the same
// instances, queues and costs as Nitsum itself.

// strictest is the tier with the tightest TPOT (then TTFT).
func (r *nitsumRun) strictest() int {
	best := -1
	for s := range r.o.Tiers.Len() {
		t := r.o.Tiers.At(s)
		if t.Background {
			continue
		}
		if best < 0 || t.TPOT < r.o.Tiers.At(best).TPOT || (t.TPOT == r.o.Tiers.At(best).TPOT && t.TTFT < r.o.Tiers.At(best).TTFT) {
			best = s
		}
	}
	return best
}

// sloBatchInstances is static P/D at one degree with the strictest tier's
// profiled caps, split P:D so the two sides' capacities match (spec P3).
func (r *nitsumRun) sloBatchInstances() ([]nitsum.Instance, error) {
	s := r.strictest()
	i, ok := r.tpIndex[r.o.TP]
	if !ok {
		return nil, fmt.Errorf("sim: nitsum run: TP%d is not profiled", r.o.TP)
	}
	c := r.o.Profile.Cap[s][i]
	if c.Prefill <= 0 || c.Decode <= 0 {
		return nil, fmt.Errorf("sim: nitsum run: TP%d cannot meet tier %q's targets", r.o.TP, r.o.Tiers.At(s).Name)
	}
	t := r.o.Tiers.At(s)
	one, err := slo.New([]slo.Tier{{Name: "slo", TTFT: t.TTFT, TPOT: t.TPOT}})
	if err != nil {
		return nil, err
	}
	r.dispSet = one
	n := r.gpus() / r.o.TP
	if n < 2 {
		return nil, fmt.Errorf("sim: nitsum run: static P/D at TP%d needs two instances, the pool has %d GPUs", r.o.TP, r.gpus())
	}
	nP := balance(n, c.Prefill, c.Decode)
	var specs []nitsum.Instance
	for k := range n {
		in := nitsum.Instance{Tier: 0, Role: nitsum.Decode, TP: r.o.TP, FirstGPU: k * r.o.TP, Batch: c.DecodeBatch}
		if k < nP {
			in.Role, in.Batch = nitsum.Prefill, c.PrefillBatch
			in.Capacity = max(1, int(c.Prefill*t.TTFT.Seconds()))
		}
		specs = append(specs, in)
	}
	return specs, nil
}

// balance is the prefill share of n instances whose prefill and decode
// capacities are xp and xd: n·xd/(xp+xd) rounded, at least one of each.
func balance(n int, xp, xd float64) int {
	return min(n-1, max(1, int(math.Round(float64(n)*xd/(xp+xd)))))
}

// BestTP is the degree of tier s with the highest goodput per GPU of a
// balanced P/D pair, X^P·X^D/(X^P+X^D)/t: the offline best static TP
// (Split's, §4 Baselines); -1 when none meets the targets.
func BestTP(prof nitsum.Profile, s int) int { return bestTPBelow(prof, s, math.MaxInt) }

// bestTPBelow is BestTP among the degrees of at most limit GPUs.
func bestTPBelow(prof nitsum.Profile, s, limit int) int {
	best, bestE := -1, 0.0
	for i, c := range prof.Cap[s] {
		if c.Prefill <= 0 || c.Decode <= 0 || prof.TP[i] > limit {
			continue
		}
		if e := c.Prefill * c.Decode / (c.Prefill + c.Decode) / float64(prof.TP[i]); e > bestE {
			best, bestE = i, e
		}
	}
	if best < 0 {
		return -1
	}
	return prof.TP[best]
}

// splitInstances gives each tier a group at its best degree (or
// SplitTP's): a P/D pair each, then the other GPUs one instance at a time
// to the tier whose mean rate needs the most GPUs at that degree per GPU
// it holds (the paper does not give Split's division); P:D balanced
// within the group.
func (r *nitsumRun) splitInstances() ([]nitsum.Instance, error) {
	o := r.o
	n := o.Tiers.Len()
	span := max(o.Requests[len(o.Requests)-1].Arrival-o.Requests[0].Arrival, 1e-9)
	rate := make([]float64, n)
	for _, q := range o.Requests {
		rate[q.Tier] += 1 / span
	}
	need := make([]float64, n)
	tps := make([]int, n)
	gpus := make([]int, n)
	left := r.gpus()
	if o.SplitTP != nil && len(o.SplitTP) != n {
		return nil, fmt.Errorf("sim: nitsum run: split: %d degrees for %d tiers", len(o.SplitTP), n)
	}
	for s := range n {
		t := BestTP(o.Profile, s)
		if o.SplitTP != nil && o.SplitTP[s] > 0 {
			t = o.SplitTP[s]
			i, ok := r.tpIndex[t]
			if !ok || o.Profile.Cap[s][i].Prefill <= 0 || o.Profile.Cap[s][i].Decode <= 0 {
				return nil, fmt.Errorf("sim: nitsum run: split: tier %q cannot meet its targets at TP%d", o.Tiers.At(s).Name, t)
			}
		}
		if t > 0 && rate[s] > 0 {
			tps[s] = t
			left -= 2 * t // a P/D pair at least
		}
	}
	// Too few GPUs for a pair of every tier at its best degree: the
	// tier of the largest degree steps down to its best smaller one.
	if left < 0 && o.SplitTP != nil {
		return nil, fmt.Errorf("sim: nitsum run: split: P/D pairs at TP%v need %d GPUs, the pool has %d", o.SplitTP, r.gpus()-left, r.gpus())
	}
	for left < 0 {
		big := 0
		for s := range n {
			if tps[s] > tps[big] {
				big = s
			}
		}
		t := bestTPBelow(o.Profile, big, tps[big]/2)
		if t < 0 {
			return nil, fmt.Errorf("sim: nitsum run: split: %d GPUs cannot give every tier a P/D pair", r.gpus())
		}
		left += 2 * (tps[big] - t)
		tps[big] = t
	}
	for s := range n {
		if t := tps[s]; t > 0 {
			c := o.Profile.Cap[s][r.tpIndex[t]]
			need[s] = rate[s] * (1/c.Prefill + 1/c.Decode) * float64(t)
			gpus[s] = 2 * t
		}
	}
	// The rest, one instance at a time, to the tier with the most GPUs
	// needed per GPU held (ties to the lower index).
	for {
		best := -1
		for s := range n {
			if tps[s] == 0 || tps[s] > left {
				continue
			}
			if best < 0 || need[s]/float64(gpus[s]) > need[best]/float64(gpus[best]) {
				best = s
			}
		}
		if best < 0 {
			break
		}
		gpus[best] += tps[best]
		left -= tps[best]
	}
	var specs []nitsum.Instance
	next := 0
	for s := range n {
		if tps[s] == 0 {
			continue
		}
		t := tps[s]
		k := gpus[s] / t
		c := o.Profile.Cap[s][r.tpIndex[t]]
		nP := balance(k, c.Prefill, c.Decode)
		for j := range k {
			in := nitsum.Instance{Tier: s, Role: nitsum.Decode, TP: t, FirstGPU: next, Batch: c.DecodeBatch}
			if j < nP {
				in.Role, in.Batch = nitsum.Prefill, c.PrefillBatch
				in.Capacity = max(1, int(c.Prefill*o.Tiers.At(s).TTFT.Seconds()))
			}
			specs = append(specs, in)
			next += t
		}
	}
	return specs, nil
}
