package nitsum

import (
	"slices"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/clock"
)

func TestMeterReportsLastCompleteWindow(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, err := NewMeter(clk, 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	observe := func(tiers ...int) {
		t.Helper()
		for _, s := range tiers {
			if err := m.Observe(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(want ...float64) {
		t.Helper()
		if got := m.Rates(nil); !slices.Equal(got, want) {
			t.Fatalf("rates %v, want %v", got, want)
		}
	}
	observe(0, 0, 0, 1)
	clk.Advance(999 * time.Millisecond)
	check(0, 0) // the first window is still open
	clk.Advance(time.Millisecond)
	check(3, 1)
	observe(1, 1)
	clk.Advance(700 * time.Millisecond)
	check(3, 1) // arrivals of the open window do not count yet
	clk.Advance(300 * time.Millisecond)
	check(0, 2)
	observe(0)
	clk.Advance(2500 * time.Millisecond) // a whole empty window in between
	check(0, 0)
	// Windows stay aligned to the start: now is 4.5 s in; the window
	// [4 s, 5 s) ends in 0.5 s.
	observe(0, 0)
	clk.Advance(500 * time.Millisecond)
	check(2, 0)

	half, err := NewMeter(clk, 1, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := half.Observe(0); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(500 * time.Millisecond)
	if got := half.Rates(nil); got[0] != 6 {
		t.Fatalf("3 arrivals in 0.5 s: %v req/s, want 6", got)
	}
}

func TestMeterErrors(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	for _, c := range []struct {
		clk    clock.Clock
		tiers  int
		window time.Duration
	}{{nil, 1, time.Second}, {clk, 0, time.Second}, {clk, 1, 0}} {
		if _, err := NewMeter(c.clk, c.tiers, c.window); err == nil {
			t.Errorf("NewMeter(%v, %d, %v): no error", c.clk, c.tiers, c.window)
		}
	}
	m, err := NewMeter(clk, 2, DefaultWindow)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []int{-1, 2} {
		if err := m.Observe(s); err == nil {
			t.Errorf("Observe(%d): no error", s)
		}
	}
}
