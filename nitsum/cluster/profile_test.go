package cluster

import (
	"math"
	"testing"
	"time"
)

// TestProfileFrom turns hand-made step timings into capacities: the
// largest batch within each target wins, decode steps become requests
// through the output length, a degree that misses at batch 1 gets 0, and
// the background tier gets no row.
func TestProfileFrom(t *testing.T) {
	set := tiers(t)
	m := Measure{Degrees: []int{1, 2}, OutputLen: 64}
	ms := time.Millisecond
	p := profileFrom(set, m, [][]Timing{
		{{TP: 1, Batch: 1, Prefill: 100 * ms, Decode: 5 * ms}, {TP: 1, Batch: 2, Prefill: 250 * ms, Decode: 12 * ms}},
		{{TP: 2, Batch: 1, Prefill: 400 * ms, Decode: 25 * ms}},
	})
	strict, loose := p.Cap[0], p.Cap[1]
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(strict[0].Prefill, 8) || strict[0].PrefillBatch != 2 || !near(strict[0].Decode, 1/(0.005*64)) || strict[0].DecodeBatch != 1 {
		t.Errorf("strict TP1 %+v", strict[0])
	}
	if !near(loose[0].Decode, 2/(0.012*64)) || loose[0].DecodeBatch != 2 {
		t.Errorf("loose TP1 %+v", loose[0])
	}
	if strict[1].Prefill != 0 || strict[1].Decode != 0 {
		t.Errorf("strict TP2 %+v: misses both targets at batch 1", strict[1])
	}
	if p.Cap[2] != nil {
		t.Errorf("background tier row %v", p.Cap[2])
	}
}

// TestMeasuredProfile measures the profile on the warm executors at
// start-up: every degree and batch is timed, and the planner runs on the
// result.
func TestMeasuredProfile(t *testing.T) {
	c := newCluster(t, 4, nil, true, func(o *Options) {
		o.Profile.TP, o.Profile.Cap = nil, nil
		o.Measure = &Measure{PromptLen: 16, OutputLen: 8, Batches: []int{1, 2}}
	})
	ts := c.Timings()
	if len(ts) != 6 {
		t.Fatalf("timings %+v: want TP 1, 2, 4 × batch 1, 2", ts)
	}
	for _, x := range ts {
		if x.Prefill <= 0 || x.Decode <= 0 {
			t.Errorf("timing %+v", x)
		}
	}
	p := c.Profile()
	if len(p.TP) != 3 || len(p.Cap[0]) != 3 {
		t.Fatalf("profile %+v", p)
	}
	t.Logf("timings %+v\nprofile %+v", ts, p.Cap[:2])
}
