package nitsum

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/slo"
)

// dispatchFixture: tiers 0 and 1 with SLOs, tier 2 background, and
//
//	0: tier 0 prefill, capacity 2
//	1: tier 0 decode
//	2: tier 0 prefill, capacity 4
//	3: tier 1 prefill, capacity 1
//	4: tier 1 decode, accepts background work
//	5: spare, accepts background work
func dispatchFixture(t testing.TB) *Dispatcher {
	t.Helper()
	set, err := slo.New([]slo.Tier{
		{Name: "strict", TTFT: 300 * time.Millisecond, TPOT: 10 * time.Millisecond},
		{Name: "loose", TTFT: 300 * time.Millisecond, TPOT: 20 * time.Millisecond},
		{Name: "batch", Background: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDispatcher(set, []Instance{
		{Tier: 0, Role: Prefill, TP: 1, FirstGPU: 0, Capacity: 2, Batch: 4},
		{Tier: 0, Role: Decode, TP: 1, FirstGPU: 1, Batch: 64},
		{Tier: 0, Role: Prefill, TP: 2, FirstGPU: 2, Capacity: 4, Batch: 8},
		{Tier: 1, Role: Prefill, TP: 1, FirstGPU: 4, Capacity: 1, Batch: 4},
		{Tier: 1, Role: Decode, TP: 1, FirstGPU: 5, Batch: 64, Background: true},
		{Tier: -1, Role: Spare, TP: 1, FirstGPU: 6, Background: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type step struct {
	id   string
	tier int
	want Assignment
}

func run(t *testing.T, d *Dispatcher, steps []step) {
	t.Helper()
	for _, s := range steps {
		got, err := d.Dispatch(Request{ID: s.id, Tier: s.tier})
		if err != nil || got != s.want {
			t.Fatalf("Dispatch(%s, tier %d) = %+v, %v; want %+v", s.id, s.tier, got, err, s.want)
		}
	}
}

func done(t *testing.T, d *Dispatcher, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := d.Done(id); err != nil {
			t.Fatal(err)
		}
	}
}

// C9 / G1: requests are labelled in arrival order against the bandwidth
// the earlier ones left; a later request never takes a slot an earlier
// one was refused.
func TestDispatchFCFS(t *testing.T) {
	d := dispatchFixture(t)
	// Tier 0 has 2 + 4 = 6 slots: the first six are feasible, the rest
	// best effort, in order.
	for i := range 10 {
		a, err := d.Dispatch(Request{ID: fmt.Sprint("r", i), Tier: 0})
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 6; (a.Class == Feasible) != want {
			t.Fatalf("request %d: %s, want feasible = %v", i, a.Class, want)
		}
	}
	// One slot comes back: the next arrival takes it, not an earlier
	// best-effort request (they are already placed), and the one after
	// is best effort again.
	done(t, d, "r3")
	run(t, d, []step{
		{"r10", 0, Assignment{0, Feasible}},
		{"r11", 0, Assignment{2, BestEffort}},
	})
}

// C9 / G5: a feasible request goes to the prefill instance of its tier
// with the lowest feasible-in-flight to capacity ratio, ties to the
// lowest index; never to a decode instance or another tier's instance.
func TestDispatchFeasibleLeastLoaded(t *testing.T) {
	d := dispatchFixture(t)
	// Loads of instances 0 (capacity 2) and 2 (capacity 4) as ratios:
	// 0/2=0/4 → 0; 1/2>0/4 → 2; 1/2>1/4 → 2; 1/2=2/4 → 0; 2/2>2/4 → 2;
	// 2/2>3/4 → 2; then both are full.
	run(t, d, []step{
		{"a", 0, Assignment{0, Feasible}},
		{"b", 0, Assignment{2, Feasible}},
		{"c", 0, Assignment{2, Feasible}},
		{"d", 0, Assignment{0, Feasible}},
		{"e", 0, Assignment{2, Feasible}},
		{"f", 0, Assignment{2, Feasible}},
	})
	for i, want := range []Load{
		{Capacity: 2, Feasible: 2}, {}, {Capacity: 4, Feasible: 4}, {Capacity: 1}, {}, {},
	} {
		if got := d.Load(i); got != want {
			t.Errorf("instance %d: %+v, want %+v", i, got, want)
		}
	}
	// A completion on instance 2 makes it the least loaded again.
	done(t, d, "b")
	run(t, d, []step{{"g", 0, Assignment{2, Feasible}}})
	if got := d.Load(2).Available(); got != 0 {
		t.Errorf("instance 2 available %d, want 0", got)
	}
}

// C9 / G6: infeasible requests spill round-robin over every prefill
// instance of every tier (0, 2, 3), one cursor for all tiers, never to
// decode or spare instances; they are not rejected.
func TestDispatchInfeasibleRoundRobin(t *testing.T) {
	d := dispatchFixture(t)
	run(t, d, []step{
		{"s0", 1, Assignment{3, Feasible}}, // tier 1's only slot
		{"s1", 1, Assignment{0, BestEffort}},
		{"s2", 1, Assignment{2, BestEffort}},
		{"s3", 1, Assignment{3, BestEffort}},
		{"s4", 1, Assignment{0, BestEffort}},
	})
	// Best-effort requests use no bandwidth: tier 0's six slots are all
	// still there, and spilled tier-0 requests continue the same cursor.
	for i := range 6 {
		a, err := d.Dispatch(Request{ID: fmt.Sprint("f", i), Tier: 0})
		if err != nil || a.Class != Feasible {
			t.Fatalf("tier-0 request %d: %+v, %v; want feasible", i, a, err)
		}
	}
	run(t, d, []step{
		{"t0", 0, Assignment{2, BestEffort}},
		{"t1", 0, Assignment{3, BestEffort}},
		{"t2", 1, Assignment{0, BestEffort}},
	})
	if got := d.Load(0); got != (Load{Capacity: 2, Feasible: 2, BestEffort: 3}) {
		t.Errorf("instance 0: %+v", got)
	}
}

// C9 / G2: background requests go round-robin to exactly the instances
// flagged Background (here a decode and a spare instance) and use no SLO
// bandwidth.
func TestDispatchBackgroundRoundRobin(t *testing.T) {
	d := dispatchFixture(t)
	run(t, d, []step{
		{"b0", 2, Assignment{4, Background}},
		{"b1", 2, Assignment{5, Background}},
		{"b2", 2, Assignment{4, Background}},
		{"b3", 2, Assignment{5, Background}},
		{"b4", 2, Assignment{4, Background}},
		{"x", 1, Assignment{3, Feasible}},
	})
	if got := d.Load(4); got != (Load{Background: 3}) {
		t.Errorf("instance 4: %+v, want 3 background", got)
	}
	done(t, d, "b0", "b2")
	if got := d.Load(4); got != (Load{Background: 1}) {
		t.Errorf("instance 4 after two done: %+v, want 1 background", got)
	}
}

// C9 / G7: Done restores the bandwidth of a feasible request, and only
// of a feasible one; it is reported once.
func TestDispatchDoneRestoresBandwidth(t *testing.T) {
	d := dispatchFixture(t)
	run(t, d, []step{
		{"a", 1, Assignment{3, Feasible}},
		{"b", 1, Assignment{0, BestEffort}},
	})
	done(t, d, "b") // a best-effort completion frees no SLO bandwidth
	run(t, d, []step{{"c", 1, Assignment{2, BestEffort}}})
	a, err := d.Done("a")
	if err != nil || a != (Assignment{3, Feasible}) {
		t.Fatalf("Done(a) = %+v, %v", a, err)
	}
	if got := d.Load(3); got != (Load{Capacity: 1}) {
		t.Errorf("instance 3 after done: %+v, want empty", got)
	}
	run(t, d, []step{{"d", 1, Assignment{3, Feasible}}})
	for _, id := range []string{"a", "b", "nope"} {
		if _, err := d.Done(id); !errors.Is(err, ErrUnknownRequest) {
			t.Errorf("Done(%s): %v, want ErrUnknownRequest", id, err)
		}
	}
	// An ID may be reused once done.
	done(t, d, "d")
	run(t, d, []step{{"a", 1, Assignment{3, Feasible}}})
	if d.InFlight() != 2 { // c and a
		t.Errorf("in flight %d, want 2", d.InFlight())
	}
}

func TestDispatchErrors(t *testing.T) {
	d := dispatchFixture(t)
	if _, err := d.Dispatch(Request{ID: "a", Tier: 0}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    Request
		want string
	}{
		{Request{ID: "", Tier: 0}, "empty request ID"},
		{Request{ID: "a", Tier: 0}, "already in flight"},
		{Request{ID: "b", Tier: 3}, "tier 3 out of range"},
		{Request{ID: "b", Tier: -1}, "tier -1 out of range"},
	} {
		if _, err := d.Dispatch(c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Dispatch(%+v): %v, want %q", c.r, err, c.want)
		}
	}
	if d.InFlight() != 1 {
		t.Errorf("failed dispatches left %d in flight, want 1", d.InFlight())
	}

	set, err := slo.New([]slo.Tier{{Name: "a", TTFT: time.Second, TPOT: time.Second}, {Name: "bg", Background: true}})
	if err != nil {
		t.Fatal(err)
	}
	// Only decode instances: nothing can take an SLO request, nor, with
	// none flagged, a background one.
	d, err = NewDispatcher(set, []Instance{{Tier: 0, Role: Decode, TP: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tier := range []int{0, 1} {
		if _, err := d.Dispatch(Request{ID: "x", Tier: tier}); !errors.Is(err, ErrNoInstance) {
			t.Errorf("tier %d with no target: %v, want ErrNoInstance", tier, err)
		}
	}

	for _, c := range []struct {
		in   Instance
		want string
	}{
		{Instance{Tier: 2, Role: Prefill}, "tier 2 out of range"},
		{Instance{Tier: 1, Role: Prefill}, `prefill for background tier "bg"`},
		{Instance{Tier: 0, Role: Spare}, "spare instance has tier -1"},
		{Instance{Tier: 0, Role: Role(7)}, "unknown role 7"},
		{Instance{Tier: 0, Role: Prefill, Capacity: -1}, "negative capacity"},
	} {
		if _, err := NewDispatcher(set, []Instance{c.in}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewDispatcher(%+v): %v, want %q", c.in, err, c.want)
		}
	}
}

// A planner's instances drive the dispatcher: a tier gets exactly the
// feasible slots its prefill instances' capacities add up to, and a tier
// the plan gave nothing (no demand last window) spills as best effort.
func TestDispatchPlannedInstances(t *testing.T) {
	tiers := tierSet(t, 2)
	prof := Profile{TP: []int{1}, Cap: [][]Capacity{caps([]float64{20}, []float64{10}), caps([]float64{20}, []float64{10})}}
	p := planFor(t, tiers, prof, 16, Options{}, 50, 0) // tier 0: 3 prefill of capacity 6
	d, err := NewDispatcher(tiers, p.Instances)
	if err != nil {
		t.Fatal(err)
	}
	feasible := 0
	for i := range 30 {
		a, err := d.Dispatch(Request{ID: fmt.Sprint("r", i), Tier: 0})
		if err != nil {
			t.Fatal(err)
		}
		if a.Class == Feasible {
			feasible++
		}
		if in := p.Instances[a.Instance]; in.Role != Prefill || (a.Class == Feasible && in.Tier != 0) {
			t.Fatalf("request %d %s went to %+v", i, a.Class, in)
		}
	}
	if feasible != 18 {
		t.Errorf("%d feasible, want 3 instances × floor(20 req/s × 0.3 s) = 18", feasible)
	}
	a, err := d.Dispatch(Request{ID: "idle-tier", Tier: 1})
	if err != nil || a.Class != BestEffort {
		t.Errorf("tier without instances: %+v, %v; want best effort", a, err)
	}
}

// Many goroutines dispatch and complete at once: no instance ever holds
// more feasible requests than its capacity, and everything is returned.
func TestDispatchConcurrent(t *testing.T) {
	d := dispatchFixture(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var mine []string
			for i := range 2000 {
				id := fmt.Sprint(g, "-", i)
				a, err := d.Dispatch(Request{ID: id, Tier: rng.IntN(3)})
				if err != nil {
					errs <- err
					return
				}
				if l := d.Load(a.Instance); l.Feasible > l.Capacity {
					errs <- fmt.Errorf("instance %d over capacity: %+v", a.Instance, l)
					return
				}
				mine = append(mine, id)
				for len(mine) > 0 && rng.IntN(3) > 0 {
					k := rng.IntN(len(mine))
					if _, err := d.Done(mine[k]); err != nil {
						errs <- err
						return
					}
					mine[k] = mine[len(mine)-1]
					mine = mine[:len(mine)-1]
				}
			}
			for _, id := range mine {
				if _, err := d.Done(id); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if d.InFlight() != 0 {
		t.Fatalf("%d still in flight", d.InFlight())
	}
	for i := range 6 {
		if l := d.Load(i); l.Feasible+l.BestEffort+l.Background != 0 {
			t.Errorf("instance %d: %+v after every request is done", i, l)
		}
	}
}

// benchInstances: SLO tiers 0–3 and background tier 4; 128 TP1
// instances, 4 tiers × (16 prefill of capacity 8 + 16 decode), the decode
// instances taking background work.
func benchInstances(b *testing.B) (*slo.Set, []Instance) {
	tiers, err := slo.New(append(tierSet(b, 4).Tiers(), slo.Tier{Name: "batch", Background: true}))
	if err != nil {
		b.Fatal(err)
	}
	var insts []Instance
	for s := range 4 {
		for range 16 {
			insts = append(insts, Instance{Tier: s, Role: Prefill, TP: 1, FirstGPU: len(insts), Capacity: 8, Batch: 8})
		}
		for range 16 {
			insts = append(insts, Instance{Tier: s, Role: Decode, TP: 1, FirstGPU: len(insts), Batch: 64, Background: true})
		}
	}
	return tiers, insts
}

const benchRequests = 50000

func benchIDs() []string {
	ids := make([]string, benchRequests)
	for i := range ids {
		ids[i] = fmt.Sprint("cmpl-", i)
	}
	return ids
}

// BenchmarkDispatch is C11: 128 instances, 50,000 requests dispatched
// and completed per op (the paper: 3.1 s, 16.1K req/s; goal ≥ 161K).
// Completions trail arrivals by 600 requests, above the 512 feasible
// slots, so both the feasible and the spill paths run.
func BenchmarkDispatch(b *testing.B) {
	tiers, insts := benchInstances(b)
	ids := benchIDs()
	b.ReportAllocs()
	for b.Loop() {
		d, err := NewDispatcher(tiers, insts)
		if err != nil {
			b.Fatal(err)
		}
		for i, id := range ids {
			if _, err := d.Dispatch(Request{ID: id, Tier: i % 4}); err != nil {
				b.Fatal(err)
			}
			if i >= 600 {
				if _, err := d.Done(ids[i-600]); err != nil {
					b.Fatal(err)
				}
			}
		}
		for _, id := range ids[benchRequests-600:] {
			if _, err := d.Done(id); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(benchRequests*float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkDispatchLocal adds the local schedulers: every request is
// queued on its instance, and every 256 arrivals each instance takes a
// batch up to its cap and completes it.
func BenchmarkDispatchLocal(b *testing.B) {
	tiers, insts := benchInstances(b)
	ids := benchIDs()
	batch := make([]Request, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		d, err := NewDispatcher(tiers, insts)
		if err != nil {
			b.Fatal(err)
		}
		locals := make([]*Local, len(insts))
		for i, in := range insts {
			if locals[i], err = NewLocal(in.Batch); err != nil {
				b.Fatal(err)
			}
		}
		drain := func() {
			for _, l := range locals {
				batch = l.NextBatch(batch[:0], l.Batch())
				for _, r := range batch {
					if _, err := d.Done(r.ID); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		for i, id := range ids {
			r := Request{ID: id, Tier: i % 5 % 4}
			if i%50 == 0 {
				r.Tier = 4 // background
			}
			a, err := d.Dispatch(r)
			if err != nil {
				b.Fatal(err)
			}
			if err := locals[a.Instance].Push(r, a.Class); err != nil {
				b.Fatal(err)
			}
			if i%256 == 255 {
				drain()
			}
		}
		for d.InFlight() > 0 {
			drain()
		}
	}
	b.ReportMetric(benchRequests*float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkDispatchParallel dispatches and completes from GOMAXPROCS
// goroutines at once: the cost of the lock under contention.
func BenchmarkDispatchParallel(b *testing.B) {
	tiers, insts := benchInstances(b)
	d, err := NewDispatcher(tiers, insts)
	if err != nil {
		b.Fatal(err)
	}
	var next sync.Mutex
	g := 0
	b.RunParallel(func(pb *testing.PB) {
		next.Lock()
		prefix := fmt.Sprint(g, "-")
		g++
		next.Unlock()
		ids := make([]string, 1024)
		for i := range ids {
			ids[i] = fmt.Sprint(prefix, i)
		}
		i := 0
		for pb.Next() {
			id := ids[i%len(ids)]
			if _, err := d.Dispatch(Request{ID: id, Tier: i % 4}); err != nil {
				b.Error(err)
				return
			}
			if _, err := d.Done(id); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
