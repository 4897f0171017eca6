package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gearboxlm/gearbox/nitsum"
)

// control runs ControlStep every window until Close.
func (c *Cluster) control(ctx context.Context) {
	defer c.ctlWG.Done()
	t := time.NewTicker(c.opts.Window)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, _, err := c.ControlStep(ctx); err != nil && ctx.Err() == nil {
				c.log.Error("nitsum control window", "err", err)
			}
		}
	}
}

// ControlStep is one control window's decision (§3.3.1): the planner
// turns each tier's arrival rate over the last complete window (the
// Meter, pitfall 7) into a layout, and when it differs from the current
// one the pool is reconfigured to it. The plan is PlanFilled's, as in
// the simulator: GPUs that no tier's measured rate needs go to the tiers
// as headroom in proportion to their demand. A window without arrivals
// says nothing of the mix: the layout stays. It reports whether it
// reconfigured, and what that did. The control loop calls it every
// Options.Window; tests call it on a fake clock.
func (c *Cluster) ControlStep(ctx context.Context) (bool, Report, error) {
	rates := c.meter.Rates(nil)
	if !slices.ContainsFunc(rates, func(r float64) bool { return r > 0 }) {
		return false, Report{}, nil
	}
	p, err := c.plan.PlanFilled(rates)
	if err != nil {
		return false, Report{}, fmt.Errorf("cluster: control: %w", err)
	}
	layout := keepPlaces(c.served(p.Instances), c.Layout(), p.GPUs, c.served)
	c.mu.Lock()
	same := len(layout) == len(c.insts)
	for i := 0; same && i < len(layout); i++ {
		same = layout[i] == c.insts[i].spec
	}
	c.mu.Unlock()
	if same {
		return false, Report{}, nil
	}
	rep, err := c.Reconfigure(ctx, layout)
	if err != nil {
		return false, rep, err
	}
	return true, rep, nil
}

// keepPlaces moves the instances of layout that are like one of prev
// (same tier, role, degree, caps) onto that instance's ranks, and the
// rest onto the lowest free aligned blocks (nitsum.Plan.KeepPlaces), then
// serves the result again (served: spare ranks left over become
// instances). The planner lays the pool out afresh each window, from rank
// 0 in descending degree, so one tier's change would shift every
// instance after it: kept in place, an instance that carries on has no
// request to pause and no KV to migrate. When the kept blocks leave no
// aligned room for the rest, layout is returned as planned.
func keepPlaces(layout, prev []nitsum.Instance, gpus int, served func([]nitsum.Instance) []nitsum.Instance) []nitsum.Instance {
	p := &nitsum.Plan{GPUs: gpus, Instances: slices.Clone(layout)}
	if !p.KeepPlaces(prev) {
		return layout
	}
	return served(p.Instances)
}

// Spec is one instance of a layout (a plan's instance, decode roles colocated).
type Spec = nitsum.Instance

// Layout returns the instances' specs now, in rank order.
func (c *Cluster) Layout() []Spec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return specs(c.insts)
}
