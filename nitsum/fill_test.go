package nitsum

import (
	"testing"
)

// TestPlanFilled: below capacity the plain plan leaves GPUs spare and
// PlanFilled gives them out, keeping every tier at least its plain share
// and the rates as given; a plan that already fills the pool, and all-zero
// rates, come back unchanged; the same rates give the same plan.
func TestPlanFilled(t *testing.T) {
	set := tierSet(t, 2)
	prof := Profile{TP: []int{1, 2}, Cap: [][]Capacity{
		{{Prefill: 10, Decode: 5, PrefillBatch: 2, DecodeBatch: 8}, {Prefill: 25, Decode: 15, PrefillBatch: 4, DecodeBatch: 16}},
		{{Prefill: 20, Decode: 10, PrefillBatch: 4, DecodeBatch: 32}, {Prefill: 45, Decode: 30, PrefillBatch: 8, DecodeBatch: 64}},
	}}
	pl, err := NewPlanner(set, prof, 16, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rates := []float64{6, 12}
	plain, err := pl.Plan(rates)
	if err != nil {
		t.Fatal(err)
	}
	filled, err := pl.PlanFilled(rates)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plain uses %d of 16 GPUs %+v; filled %d %+v", plain.Used(), plain.Tiers, filled.Used(), filled.Tiers)
	if plain.Used() >= 16 {
		t.Fatalf("fixture: the plain plan already uses %d GPUs", plain.Used())
	}
	if filled.Used() <= plain.Used() {
		t.Errorf("filled plan uses %d GPUs, plain %d", filled.Used(), plain.Used())
	}
	for s, tp := range filled.Tiers {
		if tp.Rate != rates[s] || tp.Served != min(tp.Capacity, rates[s]) || tp.GPUs < plain.Tiers[s].GPUs || tp.Capacity < rates[s] {
			t.Errorf("tier %d: %+v (plain %+v)", s, tp, plain.Tiers[s])
		}
	}
	gpus := 0
	for _, in := range filled.Instances {
		gpus += in.TP
		if in.FirstGPU%in.TP != 0 {
			t.Errorf("instance %+v not aligned", in)
		}
	}
	if gpus != 16 {
		t.Errorf("instances cover %d GPUs", gpus)
	}
	again, _ := pl.PlanFilled(rates)
	if len(again.Instances) != len(filled.Instances) {
		t.Fatal("not deterministic")
	}
	for i := range again.Instances {
		if again.Instances[i] != filled.Instances[i] {
			t.Fatalf("not deterministic at instance %d", i)
		}
	}
	for _, r := range [][]float64{{0, 0}, {1000, 1000}} {
		p, _ := pl.Plan(r)
		f, err := pl.PlanFilled(r)
		if err != nil || f.Used() != p.Used() || len(f.Instances) != len(p.Instances) {
			t.Errorf("rates %v: filled %d GPUs, plain %d (%v)", r, f.Used(), p.Used(), err)
		}
	}
}
