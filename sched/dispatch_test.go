package sched

import "testing"

func TestLeastLoadedCountsTokens(t *testing.T) {
	// Replica 0 runs one long request; replica 1 many short ones. By
	// request count replica 1 is busier, by tokens it is not.
	loads := []Load{{KVTokens: 8000}, {QueuedPrefill: 300, KVTokens: 1200}, {QueuedPrefill: 1500}}
	if got := (LeastLoaded{}).Pick(loads); got != 1 {
		t.Fatalf("picked %d, want 1", got)
	}
	// Simulate arrivals: each pick adds the request's prompt to that
	// replica; loads stay within one request's size of each other.
	loads = make([]Load, 4)
	var d LeastLoaded
	for i := 0; i < 200; i++ {
		prompt := 100 + (i*7919)%3000
		r := d.Pick(loads)
		loads[r].QueuedPrefill += prompt
	}
	lo, hi := loads[0].Tokens(), loads[0].Tokens()
	for _, l := range loads {
		lo, hi = min(lo, l.Tokens()), max(hi, l.Tokens())
	}
	if hi-lo > 3100 {
		t.Fatalf("replica loads spread %d..%d", lo, hi)
	}
	if got := d.Pick([]Load{{KVTokens: 5}, {KVTokens: 5}}); got != 0 {
		t.Fatalf("tie went to %d", got)
	}
}
