package nitsum

import (
	"cmp"
	"slices"
)

// KeepPlaces moves p's instances so that as many as possible stay where
// a like instance of prev already is: an instance of p with the same
// tier, role, TP degree, batch cap and capacity as one of prev takes that
// instance's GPUs, and the others go to the lowest free aligned blocks,
// largest degree first; GPUs left over become TP1 spare instances as in
// Plan. It reports whether it moved anything; when the kept blocks leave
// no aligned room for the rest, p is left as planned and it reports
// false.
//
// Plan lays a pool out afresh each window (descending degree from GPU
// 0), so one tier's change shifts the blocks of every tier after it and
// instances whose tier, role and degree did not change would be torn down
// and rebuilt, their running requests migrated and their GPUs paused. The
// paper reconfigures "in any way that is the best" each window (§3.3.1)
// and leaves the placement of TP groups on GPUs unspecified (spec P10);
// which GPUs an unchanged instance uses does not change what the plan
// serves, so keeping them in place is this package's choice, and the
// instances that carry on are those with nothing to migrate.
func (p *Plan) KeepPlaces(prev []Instance) bool {
	if len(prev) == 0 {
		return false
	}
	used := make([]bool, p.GPUs)
	taken := make([]bool, len(prev))
	var placed, rest []Instance
	for _, in := range p.Instances {
		if in.Role == Spare {
			continue
		}
		k := -1
		for j, o := range prev {
			if !taken[j] && alike(o, in) && o.FirstGPU+o.TP <= p.GPUs {
				k = j
				break
			}
		}
		if k < 0 {
			rest = append(rest, in)
			continue
		}
		taken[k] = true
		in.FirstGPU = prev[k].FirstGPU
		for g := in.FirstGPU; g < in.FirstGPU+in.TP; g++ {
			used[g] = true
		}
		placed = append(placed, in)
	}
	if len(placed) == 0 {
		return false
	}
	// The rest, largest degree first (Plan's order already is), each in
	// the lowest aligned block that is free.
	slices.SortStableFunc(rest, func(a, b Instance) int { return b.TP - a.TP })
	for _, in := range rest {
		at := -1
		for g := 0; g+in.TP <= p.GPUs && at < 0; g += in.TP {
			if !slices.Contains(used[g:g+in.TP], true) {
				at = g
			}
		}
		if at < 0 {
			return false
		}
		in.FirstGPU = at
		for g := at; g < at+in.TP; g++ {
			used[g] = true
		}
		placed = append(placed, in)
	}
	for g, u := range used {
		if !u {
			placed = append(placed, Instance{Tier: -1, Role: Spare, TP: 1, FirstGPU: g, Background: true})
		}
	}
	slices.SortFunc(placed, func(a, b Instance) int { return cmp.Compare(a.FirstGPU, b.FirstGPU) })
	moved := !slices.Equal(placed, p.Instances)
	p.Instances = placed
	return moved
}

// alike says two instances differ at most in their GPUs.
func alike(a, b Instance) bool {
	a.FirstGPU = b.FirstGPU
	return a == b
}
