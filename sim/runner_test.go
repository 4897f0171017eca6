package sim

import (
	"context"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
)

// TestCostRunner: the runner prices each step under the placement the
// engine chose, advances its clock by exactly that, hands back a greedy
// token per logits row and the KV geometry it was given, and refuses a
// placement it does not hold.
func TestCostRunner(t *testing.T) {
	cm, opts := llama70B(t)
	pol, err := policy.NewShift(parallel.Plan{DP: 1, PP: 1, SP: 8, TP: 1}, 256)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(100, 0)
	clk := clock.NewFake(start)
	r, err := NewCostRunner(cm, opts.Model, pol.Placements(), 16, 1000, clk)
	if err != nil {
		t.Fatal(err)
	}
	if kv := r.KVLayout(); kv.BlockSize != 16 || kv.NumBlocks != 1000 || kv.HeadDim != opts.Model.HeadDim {
		t.Fatalf("KV layout %+v", kv)
	}
	b := &forward.Batch{Seqs: []forward.SeqBatch{
		{Tokens: make([]int, 300), Pos: 0, NumLogits: 1},
		{Tokens: []int{7}, Pos: 4000, NumLogits: 1},
		{Tokens: make([]int, 100), Pos: 200},
	}}
	shape := &StepShape{Seqs: []Seq{{New: 300, Logits: 1}, {Context: 4000, New: 1, Logits: 1}, {Context: 200, New: 100}}}
	for _, p := range pol.Placements() {
		lc, err := cm.Layout(opts.Model, p)
		if err != nil {
			t.Fatal(err)
		}
		want := lc.Step(shape)
		before := clk.Now()
		ids, err := r.StepGreedy(context.Background(), b, p)
		if err != nil {
			t.Fatal(err)
		}
		if got := clk.Now().Sub(before); got != duration(want.Seconds) {
			t.Fatalf("%s: the clock advanced %v, the cost model says %v", p, got, duration(want.Seconds))
		}
		if len(ids) != 2 || ids[0] != 1 || ids[1] != 2 {
			t.Fatalf("%s: ids %v, want [1 2]", p, ids)
		}
		if last := r.Last(); last.Plan != p.Name || last.Tokens != 401 || last.Start != before || last.End != clk.Now() || last.Cost != want {
			t.Fatalf("%s: last step %+v", p, last)
		}
	}
	logits, err := r.Step(context.Background(), b, pol.Base)
	if err != nil || len(logits) != 2*opts.Model.Vocab {
		t.Fatalf("logits: %d, %v", len(logits), err)
	}
	if got := r.PlanSteps(); got[pol.Base.Name] != 2 || got[pol.Shifted.Name] != 1 {
		t.Fatalf("plan steps %v", got)
	}
	if _, err := r.StepGreedy(context.Background(), b, parallel.Standard(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 4})); err == nil {
		t.Fatal("a placement the runner does not hold was priced")
	}
}
