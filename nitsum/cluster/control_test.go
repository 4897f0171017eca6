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

// TestKeepPlaces: a window's plan that lays out an unchanged instance on
// other ranks (the planner packs from rank 0, largest degree first) keeps
// it where it runs, so nothing of it migrates; the changed instance takes
// the free block, and ranks left over are served as spares again.
func TestKeepPlaces(t *testing.T) {
	served := func(l []nitsum.Instance) []nitsum.Instance { return ServedLayout(l, 0, false) }
	strict := nitsum.Instance{Tier: 0, Role: nitsum.Prefill, TP: 2, Capacity: 3, Batch: 8}
	loose := nitsum.Instance{Tier: 1, Role: nitsum.Prefill, TP: 1, Capacity: 2, Batch: 16}
	at := func(in nitsum.Instance, first int) nitsum.Instance { in.FirstGPU = first; return in }
	prev := served([]nitsum.Instance{at(loose, 0), at(loose, 1), at(strict, 2)})
	// The new plan: the loose tier grows to TP2, the strict one is as it was.
	bigLoose := loose
	bigLoose.TP, bigLoose.Capacity = 2, 4
	fresh := served([]nitsum.Instance{at(strict, 0), at(bigLoose, 2)})
	got := keepPlaces(fresh, prev, 4, served)
	want := []nitsum.Instance{at(bigLoose, 0), at(strict, 2)}
	if !slices.Equal(got, want) {
		t.Fatalf("kept layout %+v, want %+v", got, want)
	}
	// Nothing alike: the plan as it came.
	if got := keepPlaces(fresh, served([]nitsum.Instance{at(loose, 0), at(loose, 1), at(loose, 2), at(loose, 3)}), 4, served); !slices.Equal(got, fresh) {
		t.Fatalf("nothing to keep: %+v, want the plan %+v", got, fresh)
	}
	// A kept instance and a smaller plan: the free rank is a spare again.
	got = keepPlaces(served([]nitsum.Instance{at(strict, 0), at(loose, 2), {Tier: -1, Role: nitsum.Spare, TP: 1, FirstGPU: 3, Background: true}}), prev, 4, served)
	want = served([]nitsum.Instance{at(loose, 0), {Tier: -1, Role: nitsum.Spare, TP: 1, FirstGPU: 1, Background: true}, at(strict, 2)})
	if !slices.Equal(got, want) {
		t.Fatalf("kept layout with a spare %+v, want %+v", got, want)
	}
}
