package policy

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/parallel"
)

// TestSiDPHysteresis is C10: batched tokens oscillating inside the band,
// or leaving it for fewer than Window steps, never switch; a drop that
// persists switches exactly once, at the Window-th step, and a rise that
// persists switches back once; each switch is logged.
func TestSiDPHysteresis(t *testing.T) {
	var logs bytes.Buffer
	s, err := NewSiDP(parallel.Plan{DP: 4, PP: 1, SP: 1, TP: 1}, 32, 5, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	d := s.Decide(State{})
	if d.Placement.Name != s.WaS.Name || len(s.Placements()) != 1 {
		t.Fatalf("decide %s, placements %v", d.Placement, s.Placements())
	}
	place := func(tokens int) parallel.FFNMode { return s.Place(d, Batch{Tokens: tokens}).FFN }
	// Inside the band [32, 64) and brief dips below it: WaS throughout.
	for i := range 200 {
		tokens := 32 + (i*37)%32
		if i%10 == 3 {
			tokens = 4 // a dip of 1 step
		}
		if i%10 == 7 {
			tokens = 1
			place(2)
			place(3)
			place(1) // a dip of 4 steps < window 5
		}
		if m := place(tokens); m != parallel.FFNWaS {
			t.Fatalf("step %d (%d tokens): %s inside the band", i, tokens, m)
		}
	}
	// A persistent drop: exactly one switch, at the 5th step below.
	for i := range 40 {
		want := parallel.FFNWaS
		if i >= 4 {
			want = parallel.FFNCaS
		}
		if m := place(8); m != want {
			t.Fatalf("drop step %d: %s, want %s", i, m, want)
		}
	}
	if s.Switches() != 1 {
		t.Fatalf("%d switches after one persistent drop", s.Switches())
	}
	// In CaS, the band keeps CaS: oscillation in [32, 64) and brief rises.
	for i := range 100 {
		tokens := 32 + (i*13)%32
		if i%9 == 4 {
			tokens = 500
		}
		if m := place(tokens); m != parallel.FFNCaS {
			t.Fatalf("CaS band step %d (%d tokens): %s", i, tokens, m)
		}
	}
	for i := range 10 {
		want := parallel.FFNCaS
		if i >= 4 {
			want = parallel.FFNWaS
		}
		if m := place(64); m != want {
			t.Fatalf("rise step %d: %s, want %s", i, m, want)
		}
	}
	if s.Switches() != 2 || s.Mode() != parallel.FFNWaS {
		t.Fatalf("%d switches, mode %s", s.Switches(), s.Mode())
	}
	if n := strings.Count(logs.String(), "sidp: mode switch"); n != 2 {
		t.Fatalf("%d switches logged:\n%s", n, logs.String())
	}
	for _, bad := range []parallel.Plan{{DP: 1, PP: 1, SP: 1, TP: 2}, {DP: 2, PP: 2, SP: 1, TP: 1}} {
		if _, err := NewSiDP(bad, 32, 5, nil); err == nil {
			t.Errorf("NewSiDP(%s) accepted", bad)
		}
	}
	if _, err := NewSiDP(parallel.Plan{DP: 2, PP: 1, SP: 1, TP: 1}, 32, 0, nil); err == nil {
		t.Error("window 0 accepted")
	}
}
