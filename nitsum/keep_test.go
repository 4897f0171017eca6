package nitsum

import (
	"reflect"
	"testing"
)

// checkBlocks holds a layout of n GPUs to Plan's form: ascending
// FirstGPU, every GPU in exactly one block, every block aligned to its
// degree.
func checkBlocks(t *testing.T, n int, insts []Instance) {
	t.Helper()
	next := 0
	for _, in := range insts {
		if in.FirstGPU != next || in.FirstGPU%in.TP != 0 {
			t.Fatalf("instance %+v: want an aligned block at GPU %d; layout %+v", in, next, insts)
		}
		next += in.TP
	}
	if next != n {
		t.Fatalf("layout covers %d of %d GPUs: %+v", next, n, insts)
	}
}

func TestKeepPlaces(t *testing.T) {
	sP2 := Instance{Tier: 0, Role: Prefill, TP: 2, Capacity: 4, Batch: 2}
	sD2 := Instance{Tier: 0, Role: Decode, TP: 2, Batch: 18}
	sP1 := Instance{Tier: 0, Role: Prefill, TP: 1, Capacity: 2, Batch: 1}
	lP2 := Instance{Tier: 1, Role: Prefill, TP: 2, Capacity: 7, Batch: 3}
	lP1 := Instance{Tier: 1, Role: Prefill, TP: 1, Capacity: 4, Batch: 2}
	lD2 := Instance{Tier: 1, Role: Decode, TP: 2, Batch: 125}
	at := func(in Instance, g int) Instance { in.FirstGPU = g; return in }
	spare := func(g int) Instance { return Instance{Tier: -1, Role: Spare, TP: 1, FirstGPU: g, Background: true} }

	// Window 1 (Plan's layout): strict P2 D2, loose P2 D2.
	prev := []Instance{at(sP2, 0), at(sD2, 2), at(lP2, 4), at(lD2, 6)}
	// Window 2 as Plan lays it out: strict P2 D2 P1, loose D2 P1. Every
	// TP2 block after the first moved, so three unchanged instances would
	// be rebuilt.
	p := &Plan{GPUs: 8, Instances: []Instance{at(sP2, 0), at(sD2, 2), at(lD2, 4), at(sP1, 6), at(lP1, 7)}}
	if !p.KeepPlaces(prev) {
		t.Fatal("KeepPlaces moved nothing")
	}
	want := []Instance{at(sP2, 0), at(sD2, 2), at(sP1, 4), at(lP1, 5), at(lD2, 6)}
	if !reflect.DeepEqual(p.Instances, want) {
		t.Errorf("kept layout\n%+v\nwant\n%+v", p.Instances, want)
	}
	checkBlocks(t, 8, p.Instances)

	// Fewer instances than GPUs: the rest become spare, in place.
	p = &Plan{GPUs: 8, Instances: []Instance{at(lD2, 0), at(sP1, 2), spare(3), spare(4), spare(5), spare(6), spare(7)}}
	if !p.KeepPlaces(prev) {
		t.Fatal("KeepPlaces moved nothing")
	}
	want = []Instance{at(sP1, 0), spare(1), spare(2), spare(3), spare(4), spare(5), at(lD2, 6)}
	if !reflect.DeepEqual(p.Instances, want) {
		t.Errorf("kept layout with spares\n%+v\nwant\n%+v", p.Instances, want)
	}
	checkBlocks(t, 8, p.Instances)

	// Nothing alike (another batch cap counts as another instance): the
	// plan stays as laid out.
	fresh := []Instance{at(Instance{Tier: 0, Role: Prefill, TP: 4, Capacity: 6, Batch: 3}, 0), at(sD2, 4), at(lD2, 6)}
	fresh[1].Batch = 17
	p = &Plan{GPUs: 8, Instances: append([]Instance(nil), fresh...)}
	if p.KeepPlaces(prev) || !reflect.DeepEqual(p.Instances, fresh) {
		t.Errorf("no instance alike: moved to %+v", p.Instances)
	}

	// Kept TP1 blocks at GPUs 1 and 5 leave no aligned room for a TP4
	// block: the plan stays as laid out rather than fail.
	prev = []Instance{at(sP1, 1), at(lP1, 5)}
	fresh = []Instance{at(Instance{Tier: 0, Role: Decode, TP: 4, Batch: 80}, 0), at(sP1, 4), at(lP1, 5), spare(6), spare(7)}
	p = &Plan{GPUs: 8, Instances: append([]Instance(nil), fresh...)}
	if p.KeepPlaces(prev) || !reflect.DeepEqual(p.Instances, fresh) {
		t.Errorf("fragmented: moved to %+v, want the plan as laid out", p.Instances)
	}
	// Same instances already in place: nothing moves.
	p = &Plan{GPUs: 8, Instances: append([]Instance(nil), fresh...)}
	if p.KeepPlaces(fresh) {
		t.Errorf("an unchanged plan reported moved: %+v", p.Instances)
	}
}

// KeepPlaces on planner output: over a sequence of windows with moving
// rates every kept layout is a valid one, and each window keeps at least
// as many instances in place as the fresh layout would.
func TestKeepPlacesOnPlans(t *testing.T) {
	tiers := tierSet(t, 2)
	prof := Profile{TP: []int{1, 2, 4}, Cap: [][]Capacity{
		caps([]float64{12, 20, 31}, []float64{0, 64, 294}),
		caps([]float64{22, 36, 55}, []float64{8, 40, 87}),
	}}
	pl, err := NewPlanner(tiers, prof, 16, Options{})
	if err != nil {
		t.Fatal(err)
	}
	kept := func(prev, next []Instance) int {
		n := 0
		for _, a := range next {
			for _, b := range prev {
				if a == b && a.Role != Spare {
					n++
					break
				}
			}
		}
		return n
	}
	var prev []Instance
	better := 0
	for k := range 40 {
		rates := []float64{float64(10 + (k*37)%60), float64(10 + (k*53)%70)}
		p, err := pl.Plan(rates)
		if err != nil {
			t.Fatal(err)
		}
		fresh := kept(prev, p.Instances)
		p.KeepPlaces(prev)
		checkBlocks(t, 16, p.Instances)
		if got := kept(prev, p.Instances); got < fresh {
			t.Errorf("window %d: %d instances kept in place, the fresh layout keeps %d", k, got, fresh)
		} else if got > fresh {
			better++
		}
		prev = p.Instances
	}
	if better == 0 {
		t.Error("KeepPlaces never kept more instances than the fresh layout")
	}
}
