package policy

import (
	"testing"

	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sched"
)

func TestShiftSwitchesAtThreshold(t *testing.T) {
	base := parallel.Plan{DP: 1, PP: 1, SP: 4, TP: 2}
	p, err := NewShift(base, 256)
	if err != nil {
		t.Fatal(err)
	}
	shift := parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 8}
	d := p.Decide(State{})
	if d.Placement.Plan != base || d.Phase != sched.Mixed {
		t.Fatalf("Decide = %s %s, want %s mixed", d.Placement, d.Phase, base)
	}
	for _, c := range []struct {
		tokens int
		want   parallel.Plan
	}{{1, shift}, {256, shift}, {257, base}, {4096, base}} {
		if got := p.Place(d, Batch{Tokens: c.tokens}); got.Plan != c.want {
			t.Errorf("%d tokens: %s, want %s", c.tokens, got, c.want)
		}
	}
	if pl := p.Placements(); len(pl) != 2 || pl[0].Plan != base || pl[1].Plan != shift || pl[0].Name == pl[1].Name {
		t.Fatalf("Placements() = %v", pl)
	}
	if _, err := NewShift(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 8}, 256); err == nil {
		t.Fatal("shift from a plan without SP accepted")
	}
	if _, err := NewShift(base, -1); err == nil {
		t.Fatal("negative threshold accepted")
	}
	st := NewStatic(base)
	if st.Place(st.Decide(State{}), Batch{Tokens: 1}).Plan != base {
		t.Fatal("static policy changed plan")
	}
}

func TestTierUsage(t *testing.T) {
	if u := (Tier{Used: 3, Capacity: 12}).Usage(); u != 0.25 {
		t.Fatalf("usage %v", u)
	}
	if u := (Tier{}).Usage(); u != 0 {
		t.Fatalf("empty tier usage %v", u)
	}
}
