package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/nitsum"
)

// TestControlWindow runs the control window on a fake clock. Before any
// traffic the pool is laid out as equal demand from the two SLO tiers
// would have it (PlanFilled at rates 1 and 1), so the first strict
// requests already meet instances of their tier and are dispatched as
// feasible. After a window with 30 strict requests ControlStep re-lays
// the pool out as the planner does for those rates (the same Planner,
// called here directly) and moves the live requests there; a second step
// with the same rates changes nothing, nor does a window without
// arrivals; every request's tokens are right.
func TestControlWindow(t *testing.T) {
	m := loadTiny(t)
	clk := clock.NewFake(time.Unix(1000, 0))
	c := newCluster(t, 4, nil, true, func(o *Options) { o.Clock = clk; o.Window = time.Second })
	pl, err := nitsum.NewPlanner(c.opts.Tiers, c.opts.Profile, 4, nitsum.Options{NodeGPUs: 4})
	if err != nil {
		t.Fatal(err)
	}
	planned := func(rates ...float64) []nitsum.Instance {
		p, err := pl.PlanFilled(rates)
		if err != nil {
			t.Fatal(err)
		}
		return ServedLayout(p.Instances, 0, false)
	}
	first := c.Layout()
	if want := planned(1, 1, 0); !slices.Equal(first, want) {
		t.Fatalf("initial layout %+v, want the plan for equal demand %+v", first, want)
	}
	for s := range 2 {
		if !slices.ContainsFunc(first, func(in nitsum.Instance) bool { return in.Tier == s && !in.Background }) {
			t.Fatalf("initial layout %+v has no instance of tier %d", first, s)
		}
	}
	reqs := requests(30, 6, m.cfg.Vocab)
	want := reference(t, reqs)
	d := &driven{c: c}
	for _, r := range reqs {
		d.submit(t, r)
	}
	d.iterate(t, 2)
	if st := c.Stats(); st.Dispatched[nitsum.Feasible] == 0 {
		t.Fatalf("dispatched %v, want the first strict requests feasible on their tier's instances", st.Dispatched)
	}
	clk.Advance(time.Second)
	changed, rep, err := c.ControlStep(context.Background())
	if err != nil || !changed {
		t.Fatalf("control step: changed %v, %v; want a new layout for rates [30 0 0]", changed, err)
	}
	if got, want := c.Layout(), planned(30, 0, 0); !slices.Equal(got, want) {
		t.Errorf("layout %+v, the planner's %+v", got, want)
	}
	t.Logf("rates [30 0 0]: %v → %v, %d moved, %d re-dispatched, %d bytes", rep.From, rep.To, rep.Moved, rep.Redispatched, rep.Bytes)
	if changed, _, err := c.ControlStep(context.Background()); changed || err != nil {
		t.Errorf("second step in the same window: changed %v, %v", changed, err)
	}
	before := c.Layout()
	clk.Advance(2 * time.Second)
	if changed, _, err := c.ControlStep(context.Background()); changed || err != nil || !slices.Equal(c.Layout(), before) {
		t.Errorf("step after a window without arrivals: changed %v, %v; layout %+v, was %+v", changed, err, c.Layout(), before)
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
