package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/nitsum"
)

// TestControlWindow runs the control window on a fake clock: with no
// traffic yet the planner leaves every rank a spare TP1 instance (which
// serves spilled requests as best effort); after a window with 30
// strict requests ControlStep re-lays (TP1×4 → TP2×2) the pool out as the planner does for
// those rates (the same Planner, called here directly) and moves the
// live requests there; a second step with the same rates changes
// nothing; every request's tokens are right.
func TestControlWindow(t *testing.T) {
	m := loadTiny(t)
	clk := clock.NewFake(time.Unix(1000, 0))
	c := newCluster(t, 4, nil, true, func(o *Options) { o.Clock = clk; o.Window = time.Second })
	if l := c.Stats().Layout; !slices.Equal(l, []int{1, 1, 1, 1}) {
		t.Fatalf("initial layout %v, want four spare TP1 instances", l)
	}
	reqs := requests(30, 6, m.cfg.Vocab)
	want := reference(t, reqs)
	d := &driven{c: c}
	for _, r := range reqs {
		d.submit(t, r)
	}
	d.iterate(t, 2)
	if st := c.Stats(); st.Dispatched[nitsum.BestEffort] != 30 {
		t.Fatalf("dispatched %v, want all 30 best effort on spares", st.Dispatched)
	}
	clk.Advance(time.Second)
	changed, rep, err := c.ControlStep(context.Background())
	if err != nil || !changed || !slices.Equal(rep.To, []int{2, 2}) {
		t.Fatalf("control step: changed %v to %v, %v; want tp[2 2]", changed, rep.To, err)
	}
	pl, err := nitsum.NewPlanner(c.opts.Tiers, c.opts.Profile, 4, nitsum.Options{NodeGPUs: 4})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pl.Plan([]float64{30, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Layout(), ServedLayout(p.Instances, 0, false); !slices.Equal(got, want) {
		t.Errorf("layout %+v, the planner's %+v", got, want)
	}
	t.Logf("rates [30 0 0]: %v → %v, %d moved, %d re-dispatched, %d bytes", rep.From, rep.To, rep.Moved, rep.Redispatched, rep.Bytes)
	if changed, _, err := c.ControlStep(context.Background()); changed || err != nil {
		t.Errorf("second step in the same window: changed %v, %v", changed, err)
	}
	d.finishAll(t, 500)
	d.check(t, want)
}
