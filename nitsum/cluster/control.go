package cluster

import (
	"context"
	"fmt"
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
// one the pool is reconfigured to it. It reports whether it
// reconfigured, and what that did. The control loop calls it every
// Options.Window; tests call it on a fake clock.
func (c *Cluster) ControlStep(ctx context.Context) (bool, Report, error) {
	rates := c.meter.Rates(nil)
	p, err := c.plan.Plan(rates)
	if err != nil {
		return false, Report{}, fmt.Errorf("cluster: control: %w", err)
	}
	layout := c.served(p.Instances)
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

// Spec is one instance of a layout (a plan's instance, decode roles colocated).
type Spec = nitsum.Instance

// Layout returns the instances' specs now, in rank order.
func (c *Cluster) Layout() []Spec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return specs(c.insts)
}
