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

// TestSeesawPhases: the phase changes only when the host tier is full
// (or nothing is left to prefill, or nothing can run) and when it is empty
// with requests waiting; without a tier the device plays the store.
func TestSeesawPhases(t *testing.T) {
	s, err := NewSeesaw(parallel.Plan{DP: 1, PP: 4, SP: 1, TP: 1}, parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 4})
	if err != nil {
		t.Fatal(err)
	}
	tier := Tier{Used: 0, Capacity: 100}
	steps := []struct {
		st    State
		phase sched.Phase
	}{
		{State{Waiting: 5, HostKV: tier, HostFits: true, DeviceFits: true}, sched.PrefillOnly},                        // nothing live yet
		{State{Waiting: 3, Parked: 2, HostKV: tier, HostFits: true, DeviceFits: true}, sched.PrefillOnly},             // room on the host
		{State{Waiting: 3, Parked: 4, HostKV: tier, HostFits: false, DeviceFits: true}, sched.DecodeOnly},             // full → decode
		{State{Waiting: 3, Running: 2, Parked: 2, HostKV: tier, HostFits: false, DeviceFits: true}, sched.DecodeOnly}, // still parked
		{State{Waiting: 3, Running: 4, HostKV: tier, HostFits: true, DeviceFits: false}, sched.DecodeOnly},            // empty, but no room yet
		{State{Waiting: 3, Running: 2, HostKV: tier, HostFits: true, DeviceFits: true}, sched.PrefillOnly},            // empty → prefill
		{State{Running: 2, Parked: 1, HostKV: tier, HostFits: true, DeviceFits: true}, sched.DecodeOnly},              // nothing left to prefill
		{State{Running: 1, HostKV: tier, HostFits: true, DeviceFits: true}, sched.DecodeOnly},                         // nothing waits: stay
	}
	for i, c := range steps {
		d := s.Decide(c.st)
		if d.Phase != c.phase {
			t.Fatalf("step %d (%+v): %s, want %s", i, c.st, d.Phase, c.phase)
		}
		want := s.Prefill
		if c.phase == sched.DecodeOnly {
			want = s.Decode
		}
		if d.Placement.Name != want.Name || d.Offload != (c.phase == sched.PrefillOnly) || d.Onboard != (c.phase == sched.DecodeOnly) {
			t.Fatalf("step %d: %+v", i, d)
		}
	}
	if s.Transitions() != 3 {
		t.Fatalf("%d transitions, want 3", s.Transitions())
	}
	// No host tier: prefill until the device is full, decode until it is empty.
	n, _ := NewSeesaw(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1}, parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1})
	if n.Prefill.Name == n.Decode.Name {
		t.Fatal("equal plans got one name")
	}
	for i, c := range []struct {
		st    State
		phase sched.Phase
	}{
		{State{Waiting: 3, Running: 1, DeviceFits: true}, sched.PrefillOnly},
		{State{Waiting: 2, Running: 2, DeviceFits: false}, sched.DecodeOnly},
		{State{Waiting: 2, Running: 1, DeviceFits: true}, sched.DecodeOnly},
		{State{Waiting: 2, DeviceFits: true}, sched.PrefillOnly},
	} {
		if d := n.Decide(c.st); d.Phase != c.phase {
			t.Fatalf("no tier, step %d: %s, want %s", i, d.Phase, c.phase)
		}
	}
	if _, err := NewSeesaw(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1}, parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 4}); err == nil {
		t.Fatal("plans of different ranks accepted")
	}
}
