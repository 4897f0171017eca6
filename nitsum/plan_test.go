package nitsum

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/slo"
)

// tierSet returns n SLO tiers "t0", "t1", … with a 300 ms TTFT and TPOT
// of 10, 20, … ms.
func tierSet(t testing.TB, n int) *slo.Set {
	t.Helper()
	tiers := make([]slo.Tier, n)
	for i := range tiers {
		tiers[i] = slo.Tier{Name: fmt.Sprint("t", i), TTFT: 300 * time.Millisecond, TPOT: time.Duration(10*(i+1)) * time.Millisecond}
	}
	s, err := slo.New(tiers)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// caps is a row of capacities with the given prefill and decode req/s per
// degree and batch caps 8 and 64.
func caps(prefill, decode []float64) []Capacity {
	row := make([]Capacity, len(prefill))
	for i := range row {
		row[i] = Capacity{Prefill: prefill[i], Decode: decode[i], PrefillBatch: 8, DecodeBatch: 64}
	}
	return row
}

func planFor(t testing.TB, tiers *slo.Set, prof Profile, gpus int, opt Options, rates ...float64) *Plan {
	t.Helper()
	pl, err := NewPlanner(tiers, prof, gpus, opt)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pl.Plan(rates)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, p, tiers, prof, opt)
	return p
}

// checkPlan holds a plan to the invariants: GPUs within the pool, every
// GPU in exactly one aligned block inside a node, groups and instances
// agreeing, capacities covering what the plan says it serves.
func checkPlan(t testing.TB, p *Plan, tiers *slo.Set, prof Profile, opt Options) {
	t.Helper()
	node := opt.NodeGPUs
	if node == 0 {
		node = 8
	}
	if p.Used() > p.GPUs {
		t.Fatalf("plan uses %d of %d GPUs", p.Used(), p.GPUs)
	}
	next, spare := 0, 0
	gpus := make([]int, len(p.Tiers))
	groups := make([]map[Group]int, len(p.Tiers))
	prefill := make([]float64, len(p.Tiers))
	decode := make([]float64, len(p.Tiers))
	tpIndex := map[int]int{}
	for i, d := range prof.TP {
		tpIndex[d] = i
	}
	for _, in := range p.Instances {
		if in.FirstGPU != next {
			t.Fatalf("instance %+v starts at %d, want %d (gap or overlap)", in, in.FirstGPU, next)
		}
		if in.FirstGPU%in.TP != 0 || in.FirstGPU/node != (in.FirstGPU+in.TP-1)/node {
			t.Fatalf("instance %+v is not an aligned block inside a node of %d", in, node)
		}
		next += in.TP
		if in.Role == Spare {
			spare++
			if in.Tier != -1 || in.TP != 1 || !in.Background {
				t.Fatalf("spare instance %+v, want tier -1, TP1, background", in)
			}
			continue
		}
		gpus[in.Tier] += in.TP
		if groups[in.Tier] == nil {
			groups[in.Tier] = map[Group]int{}
		}
		groups[in.Tier][Group{Role: in.Role, TP: in.TP}]++
		c := prof.Cap[in.Tier][tpIndex[in.TP]]
		switch in.Role {
		case Prefill:
			prefill[in.Tier] += c.Prefill
			want := max(1, int(math.Floor(c.Prefill*tiers.At(in.Tier).TTFT.Seconds()+1e-9)))
			if in.Capacity != want || in.Batch != c.PrefillBatch {
				t.Fatalf("prefill instance %+v: capacity %d batch %d, want %d and %d", in, in.Capacity, in.Batch, want, c.PrefillBatch)
			}
		case Decode:
			decode[in.Tier] += c.Decode
			if in.Capacity != 0 || in.Batch != c.DecodeBatch {
				t.Fatalf("decode instance %+v: capacity %d batch %d, want 0 and %d", in, in.Capacity, in.Batch, c.DecodeBatch)
			}
		}
		if in.Background != (in.Role == Prefill && p.Used() == p.GPUs) {
			t.Fatalf("instance %+v: background %v, but spare GPUs: %d", in, in.Background, p.GPUs-p.Used())
		}
	}
	if next != p.GPUs || spare != p.GPUs-p.Used() {
		t.Fatalf("instances cover %d GPUs with %d spare, want %d with %d", next, spare, p.GPUs, p.GPUs-p.Used())
	}
	for s, tp := range p.Tiers {
		if gpus[s] != tp.GPUs {
			t.Fatalf("tier %d: instances hold %d GPUs, TierPlan says %d", s, gpus[s], tp.GPUs)
		}
		n := 0
		for _, g := range tp.Groups {
			n += g.Count * g.TP
			if groups[s][Group{Role: g.Role, TP: g.TP}] != g.Count {
				t.Fatalf("tier %d: group %+v disagrees with instances %v", s, g, groups[s])
			}
		}
		if n != tp.GPUs {
			t.Fatalf("tier %d: groups hold %d GPUs, want %d", s, n, tp.GPUs)
		}
		if !near(tp.Capacity, min(prefill[s], decode[s])) || tp.Served > tp.Rate+1e-9 || !near(tp.Served, min(tp.Capacity, tp.Rate)) {
			t.Fatalf("tier %d: capacity %v served %v rate %v; instances give prefill %v decode %v", s, tp.Capacity, tp.Served, tp.Rate, prefill[s], decode[s])
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(a), math.Abs(b)) }

// roleGPUs sums a tier's GPUs of one role.
func roleGPUs(tp TierPlan, r Role) int {
	n := 0
	for _, g := range tp.Groups {
		if g.Role == r {
			n += g.Count * g.TP
		}
	}
	return n
}

// C8(a): with X^P = 2·X^D the tier's GPUs split 1:2 between prefill and
// decode, whether the pool is ample or short.
func TestPlanBalancesPrefillAndDecode(t *testing.T) {
	tiers := tierSet(t, 1)
	// X^P = 2·X^D at every degree, each degree equally efficient per GPU.
	prof := Profile{TP: []int{1, 2, 4, 8}, Cap: [][]Capacity{caps([]float64{20, 40, 80, 160}, []float64{10, 20, 40, 80})}}
	for _, c := range []struct {
		gpus       int
		rate       float64
		wantP      int
		wantD      int
		wantServed float64
	}{
		{64, 100, 5, 10, 100},  // ample: exactly what 100 req/s needs
		{64, 200, 10, 20, 200}, // ample
		{12, 100, 4, 8, 80},    // short: 4 moves of 1P+2D
		{30, 1000, 10, 20, 200},
	} {
		p := planFor(t, tiers, prof, c.gpus, Options{}, c.rate)
		tp := p.Tiers[0]
		gotP, gotD := roleGPUs(tp, Prefill), roleGPUs(tp, Decode)
		if gotP != c.wantP || gotD != c.wantD || !near(tp.Served, c.wantServed) {
			t.Errorf("%d GPUs at %v req/s: P:D GPUs %d:%d serving %v, want %d:%d serving %v (groups %+v)",
				c.gpus, c.rate, gotP, gotD, tp.Served, c.wantP, c.wantD, c.wantServed, tp.Groups)
		}
		if 2*gotP != gotD {
			t.Errorf("%d GPUs at %v req/s: P:D = %d:%d, want 1:2", c.gpus, c.rate, gotP, gotD)
		}
	}
}

// C8(b): goodput efficiency is capped at the arrival rate, so the planner
// does not buy raw throughput it cannot use (pitfall 4); the decode side
// is balanced to the prefill capacity (n^P·X^P = n^D·X^D, §3.3.1), and
// only when that does not fit the pool is it sized to the capped rate.
func TestPlanCapsAtArrivalRate(t *testing.T) {
	tiers := tierSet(t, 1)
	prof := Profile{TP: []int{1}, Cap: [][]Capacity{caps([]float64{20}, []float64{10})}}
	for _, c := range []struct {
		gpus       int
		rate       float64
		wantGPUs   int
		wantGroups []Group
	}{
		// One prefill (20 req/s) balanced by two decodes (2×10): GE =
		// 5/3, not min(20, 20)/3.
		{16, 5, 3, []Group{{Prefill, 1, 1}, {Decode, 1, 2}}},
		{16, 10, 3, []Group{{Prefill, 1, 1}, {Decode, 1, 2}}},
		// 25 req/s: 2 prefills (40) and 4 decodes (40), not 3 more.
		{16, 25, 6, []Group{{Prefill, 1, 2}, {Decode, 1, 4}}},
		// Two GPUs cannot balance a prefill: one decode covers the 5 req/s.
		{2, 5, 2, []Group{{Prefill, 1, 1}, {Decode, 1, 1}}},
		// Five: two balanced moves do not fit; the second prefill gets the
		// decode its capped 25 req/s need, 3 in all.
		{5, 25, 5, []Group{{Prefill, 1, 2}, {Decode, 1, 3}}},
	} {
		p := planFor(t, tiers, prof, c.gpus, Options{}, c.rate)
		tp := p.Tiers[0]
		if tp.GPUs != c.wantGPUs || !reflect.DeepEqual(tp.Groups, c.wantGroups) {
			t.Errorf("%d GPUs, %v req/s: %d GPUs %+v, want %d %+v", c.gpus, c.rate, tp.GPUs, tp.Groups, c.wantGPUs, c.wantGroups)
		}
		if !near(tp.Served, c.rate) || !near(tp.Efficiency(), c.rate/float64(c.wantGPUs)) {
			t.Errorf("%d GPUs, %v req/s: served %v at GE %v, want %v at %v", c.gpus, c.rate, tp.Served, tp.Efficiency(), c.rate, c.rate/float64(c.wantGPUs))
		}
		if spare := p.GPUs - p.Used(); spare != c.gpus-c.wantGPUs {
			t.Errorf("%d GPUs, %v req/s: %d spare GPUs, want %d", c.gpus, c.rate, spare, c.gpus-c.wantGPUs)
		}
	}

	// TP4 is 2.5× more efficient per GPU at full load (25 vs 10 req/s per
	// GPU), but at 5 req/s a TP1 pair (GE 2.5) beats a TP4 pair (GE 0.625).
	prof = Profile{TP: []int{1, 4}, Cap: [][]Capacity{caps([]float64{10, 100}, []float64{10, 100})}}
	for _, c := range []struct {
		rate float64
		want []Group
	}{
		{5, []Group{{Prefill, 1, 1}, {Decode, 1, 1}}},
		{400, []Group{{Prefill, 4, 4}, {Decode, 4, 4}}},
		// 410: four TP4 pairs, then the last 10 req/s on TP1.
		{410, []Group{{Prefill, 1, 1}, {Prefill, 4, 4}, {Decode, 1, 1}, {Decode, 4, 4}}},
	} {
		p := planFor(t, tiers, prof, 64, Options{}, c.rate)
		if got := p.Tiers[0].Groups; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v req/s: groups %+v, want %+v", c.rate, got, c.want)
		}
	}
}

// C8(c): the unmet-demand weight gives a less efficient tier GPUs that
// the plain greedy gives all to the efficient one.
func TestPlanWeightingServesInefficientTier(t *testing.T) {
	tiers := tierSet(t, 2)
	// Tier 0: 20 req/s per prefill and per decode GPU, GE 10. Tier 1:
	// 10 req/s each, GE 5.
	prof := Profile{TP: []int{1}, Cap: [][]Capacity{caps([]float64{20}, []float64{20}), caps([]float64{10}, []float64{10})}}
	rates := []float64{205, 107} // tier 0 alone needs 22 GPUs; the pool has 20

	plain := planFor(t, tiers, prof, 20, Options{Plain: true}, rates...)
	if plain.Tiers[0].GPUs != 20 || plain.Tiers[1].GPUs != 0 || !near(plain.Served(), 200) {
		t.Errorf("plain greedy: tier GPUs %d, %d serving %v; want 20, 0 serving 200 (tier 1 starved)",
			plain.Tiers[0].GPUs, plain.Tiers[1].GPUs, plain.Served())
	}

	// Weighted: score = GE × unmet/λ, every move 2 GPUs. Tier 0 scores
	// 10·(205−20k)/205 after k moves, tier 1 5·(107−10m)/107: six tier-0
	// moves (the sixth at 5.12 > 5), then tier 1 at 5 and 4.53 (above
	// tier 0's 4.15), tier 0 at 4.15 (above 4.07), tier 1 at 4.07: 14
	// and 6 GPUs.
	w := planFor(t, tiers, prof, 20, Options{}, rates...)
	if w.Tiers[0].GPUs != 14 || w.Tiers[1].GPUs != 6 || !near(w.Tiers[0].Served, 140) || !near(w.Tiers[1].Served, 30) {
		t.Errorf("weighted greedy: tier GPUs %d, %d serving %v, %v; want 14, 6 serving 140, 30",
			w.Tiers[0].GPUs, w.Tiers[1].GPUs, w.Tiers[0].Served, w.Tiers[1].Served)
	}
	// R1's pool (the profile of Qwen-14B on eight H100s under Table 1's
	// 200/10 and 200/15 ms, rounded, TP1 and TP2): at 16 and 57 req/s,
	// weighted by unmet req/s the loose tier scores 9.1·57 against the
	// strict tier's 5.1·16 and takes the pool until three GPUs are left,
	// too few for a strict prefill and decode, so the strict tier gets
	// none; weighted by the unmet share it gets a prefill and a decode.
	r1 := Profile{TP: []int{1, 2}, Cap: [][]Capacity{
		caps([]float64{12.3, 20.4}, []float64{0, 64.6}),
		caps([]float64{22.4, 36.3}, []float64{7.9, 39.6}),
	}}
	small := planFor(t, tiers, r1, 8, Options{}, 16, 57)
	if small.Tiers[0].GPUs == 0 || small.Tiers[1].GPUs == 0 {
		t.Errorf("16 and 57 req/s on 8 GPUs: tier GPUs %d, %d; want both served", small.Tiers[0].GPUs, small.Tiers[1].GPUs)
	}
	if !(w.Tiers[1].Efficiency() < w.Tiers[0].Efficiency()) {
		t.Errorf("tier 1 should be the less efficient: GE %v vs %v", w.Tiers[1].Efficiency(), w.Tiers[0].Efficiency())
	}
}

// C8(d): the same inputs give the same plan, from the same planner and a
// fresh one, over random profiles and rates.
func TestPlanIsDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		nt := 1 + rng.IntN(4)
		tiers := tierSet(t, nt)
		prof := randomProfile(rng, nt)
		gpus := 1 + rng.IntN(128)
		rates := make([]float64, nt)
		for i := range rates {
			rates[i] = rng.Float64() * 300
		}
		pl, err := NewPlanner(tiers, prof, gpus, Options{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := pl.Plan(rates)
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, a, tiers, prof, Options{})
		b, _ := pl.Plan(rates)
		c := planFor(t, tiers, prof, gpus, Options{}, rates...)
		if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(a, c) {
			t.Fatalf("trial %d: plans differ:\n%+v\n%+v\n%+v", trial, a, b, c)
		}
	}
}

// randomProfile draws capacities over T = {1, 2, 4, 8}, some zero.
func randomProfile(rng *rand.Rand, tiers int) Profile {
	prof := Profile{TP: []int{1, 2, 4, 8}, Cap: make([][]Capacity, tiers)}
	for s := range tiers {
		row := make([]Capacity, 4)
		for i := range row {
			if rng.IntN(5) > 0 {
				row[i].Prefill = rng.Float64() * 50 * float64(prof.TP[i])
			}
			if rng.IntN(5) > 0 {
				row[i].Decode = rng.Float64() * 30 * float64(prof.TP[i])
			}
			row[i].PrefillBatch, row[i].DecodeBatch = 1+rng.IntN(16), 1+rng.IntN(256)
		}
		prof.Cap[s] = row
	}
	return prof
}

func TestPlanEdgeCases(t *testing.T) {
	tiers := tierSet(t, 3)
	ok := caps([]float64{20, 40}, []float64{10, 20})
	alone := planFor(t, tierSet(t, 1), Profile{TP: []int{1, 2}, Cap: [][]Capacity{ok}}, 16, Options{}, 100)

	t.Run("zero rate", func(t *testing.T) {
		prof := Profile{TP: []int{1, 2}, Cap: [][]Capacity{ok, ok, ok}}
		p := planFor(t, tiers, prof, 16, Options{}, 0, 100, 0)
		for _, s := range []int{0, 2} {
			if tp := p.Tiers[s]; tp.GPUs != 0 || tp.Groups != nil || tp.Served != 0 || !tp.Feasible {
				t.Errorf("idle tier %d: %+v, want no GPUs and feasible", s, tp)
			}
		}
		if !reflect.DeepEqual(p.Tiers[1].Groups, alone.Tiers[0].Groups) {
			t.Errorf("busy tier: %+v, want what it gets alone: %+v", p.Tiers[1].Groups, alone.Tiers[0].Groups)
		}
	})

	t.Run("infeasible tier", func(t *testing.T) {
		prefillOnly := caps([]float64{20, 40}, []float64{0, 0}) // decode misses TPOT everywhere
		prof := Profile{TP: []int{1, 2}, Cap: [][]Capacity{make([]Capacity, 2), ok, prefillOnly}}
		p := planFor(t, tiers, prof, 16, Options{}, 500, 100, 500)
		for _, s := range []int{0, 2} {
			if tp := p.Tiers[s]; tp.Feasible || tp.GPUs != 0 || !near(tp.Unmet(), 500) {
				t.Errorf("infeasible tier %d: %+v, want infeasible, no GPUs, 500 req/s unmet", s, tp)
			}
		}
		if !reflect.DeepEqual(p.Tiers[1], alone.Tiers[0]) {
			t.Errorf("feasible tier: %+v, want what it gets alone: %+v", p.Tiers[1], alone.Tiers[0])
		}
	})

	t.Run("pool below the smallest configuration", func(t *testing.T) {
		// Prefill meets TTFT only at TP2, decode only at TP2: 4 GPUs at least.
		tp2 := caps([]float64{0, 40}, []float64{0, 20})
		p := planFor(t, tierSet(t, 1), Profile{TP: []int{1, 2}, Cap: [][]Capacity{tp2}}, 3, Options{}, 10)
		if p.Used() != 0 || len(p.Instances) != 3 || p.Tiers[0].Unmet() != 10 || !p.Tiers[0].Feasible {
			t.Errorf("plan %+v, want 3 spare GPUs and 10 req/s unmet", p)
		}
		p = planFor(t, tierSet(t, 1), Profile{TP: []int{1, 2}, Cap: [][]Capacity{tp2}}, 4, Options{}, 10)
		if p.Used() != 4 || !near(p.Tiers[0].Served, 10) {
			t.Errorf("4 GPUs: plan %+v, want the 4-GPU configuration serving 10", p)
		}
	})

	t.Run("full pool lets prefill take background work", func(t *testing.T) {
		prof := Profile{TP: []int{1}, Cap: [][]Capacity{caps([]float64{20}, []float64{10})}}
		p := planFor(t, tierSet(t, 1), prof, 6, Options{}, 1000)
		if p.Used() != 6 {
			t.Fatalf("used %d of 6", p.Used())
		}
		for _, in := range p.Instances {
			if in.Background != (in.Role == Prefill) {
				t.Errorf("instance %+v: background %v", in, in.Background)
			}
		}
	})

	t.Run("background tier gets nothing", func(t *testing.T) {
		set, err := slo.New([]slo.Tier{{Name: "bg", Background: true}, {Name: "chat", TTFT: time.Second, TPOT: 50 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		prof := Profile{TP: []int{1, 2}, Cap: [][]Capacity{nil, ok}}
		p := planFor(t, set, prof, 16, Options{}, 1000, 100)
		if p.Tiers[0].GPUs != 0 || p.Tiers[0].Feasible || !reflect.DeepEqual(p.Tiers[1].Groups, alone.Tiers[0].Groups) {
			t.Errorf("plan %+v", p.Tiers)
		}
	})
}

// With degrees up to 8 on nodes of 8, TP8 blocks start at multiples of 8
// and smaller ones pack after them; with nodes of 4, degree 8 is refused.
func TestPlanLayout(t *testing.T) {
	tiers := tierSet(t, 2)
	prof := Profile{TP: []int{1, 2, 4, 8}, Cap: [][]Capacity{
		caps([]float64{0, 0, 0, 400}, []float64{0, 0, 0, 100}), // TP8 only
		caps([]float64{10, 0, 0, 0}, []float64{0, 30, 0, 0}),   // TP1 prefill, TP2 decode
	}}
	p := planFor(t, tiers, prof, 40, Options{}, 100, 30)
	want := []Instance{
		{Tier: 0, Role: Prefill, TP: 8, FirstGPU: 0, Capacity: 120, Batch: 8},
		{Tier: 0, Role: Decode, TP: 8, FirstGPU: 8, Batch: 64},
		{Tier: 1, Role: Decode, TP: 2, FirstGPU: 16, Batch: 64},
		{Tier: 1, Role: Prefill, TP: 1, FirstGPU: 18, Capacity: 3, Batch: 8},
		{Tier: 1, Role: Prefill, TP: 1, FirstGPU: 19, Capacity: 3, Batch: 8},
		{Tier: 1, Role: Prefill, TP: 1, FirstGPU: 20, Capacity: 3, Batch: 8},
	}
	if got := p.Instances[:len(want)]; !reflect.DeepEqual(got, want) {
		t.Errorf("instances\n%+v\nwant\n%+v", got, want)
	}
	if len(p.Instances) != len(want)+19 {
		t.Errorf("%d instances, want %d and 19 spare", len(p.Instances), len(want))
	}
	if _, err := NewPlanner(tiers, prof, 40, Options{NodeGPUs: 4}); err == nil || !strings.Contains(err.Error(), "spans more than a node of 4") {
		t.Errorf("TP8 on nodes of 4: %v", err)
	}
}

func TestPlannerErrors(t *testing.T) {
	tiers := tierSet(t, 2)
	row := caps([]float64{1, 2}, []float64{1, 2})
	good := Profile{TP: []int{1, 2}, Cap: [][]Capacity{row, row}}
	for _, c := range []struct {
		name string
		prof Profile
		gpus int
		opt  Options
		want string
	}{
		{"no GPUs", good, 0, Options{}, "at least one GPU"},
		{"node not power of two", good, 8, Options{NodeGPUs: 6}, "power of two, got 6"},
		{"no degrees", Profile{Cap: good.Cap}, 8, Options{}, "no TP degrees"},
		{"degree 3", Profile{TP: []int{1, 3}, Cap: good.Cap}, 8, Options{}, "TP[1] = 3 is not a power of two"},
		{"descending", Profile{TP: []int{2, 1}, Cap: good.Cap}, 8, Options{}, "must ascend"},
		{"rows", Profile{TP: []int{1, 2}, Cap: [][]Capacity{row}}, 8, Options{}, "1 rows of capacities for 2 tiers"},
		{"columns", Profile{TP: []int{1, 2}, Cap: [][]Capacity{row, row[:1]}}, 8, Options{}, `tier "t1" has 1 capacities for 2 TP degrees`},
		{"negative", Profile{TP: []int{1, 2}, Cap: [][]Capacity{row, {{Prefill: -1}, {}}}}, 8, Options{}, `tier "t1" at TP1: throughputs must be finite and non-negative`},
		{"NaN", Profile{TP: []int{1, 2}, Cap: [][]Capacity{row, {{Decode: math.NaN()}, {}}}}, 8, Options{}, "non-negative"},
		{"no batch", Profile{TP: []int{1, 2}, Cap: [][]Capacity{row, {{}, {Decode: 3}}}}, 8, Options{}, `tier "t1" at TP2: decode throughput 3 needs a batch size`},
	} {
		if _, err := NewPlanner(tiers, c.prof, c.gpus, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	pl, err := NewPlanner(tiers, good, 8, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rates := range [][]float64{{1}, {1, -1}, {math.NaN(), 1}, {math.Inf(1), 1}} {
		if _, err := pl.Plan(rates); err == nil {
			t.Errorf("rates %v: no error", rates)
		}
	}
}

// benchProfile is a made-up but shaped profile for 4 tiers over
// T = {1, 2, 4, 8}: prefill per GPU falls slowly with TP; decode per GPU
// rises with TP for the strict tiers (small batches, M4) and falls for
// the loose ones.
func benchProfile() Profile {
	prof := Profile{TP: []int{1, 2, 4, 8}, Cap: make([][]Capacity, 4)}
	for s := range 4 {
		row := make([]Capacity, 4)
		for i, t := range prof.TP {
			ft := float64(t)
			row[i] = Capacity{
				Prefill:      (6 + 2*float64(s)) * ft * math.Pow(0.92, float64(i)),
				Decode:       (3 + 3*float64(s)) * ft * math.Pow(1.25-0.15*float64(s), float64(i)),
				PrefillBatch: 4 * (s + 1), DecodeBatch: 16 << s,
			}
		}
		prof.Cap[s] = row
	}
	return prof
}

// BenchmarkPlan: 128 GPUs, 4 tiers, T = {1, 2, 4, 8}, demand above what
// the pool serves (the paper's 2.49 ms setting, §4.2.3; goal ≤ 0.25 ms).
func BenchmarkPlan(b *testing.B) {
	tiers := tierSet(b, 4)
	pl, err := NewPlanner(tiers, benchProfile(), 128, Options{})
	if err != nil {
		b.Fatal(err)
	}
	rates := []float64{150, 200, 250, 300}
	p, err := pl.Plan(rates)
	if err != nil {
		b.Fatal(err)
	}
	if p.Used() < 120 {
		b.Fatalf("plan uses %d of 128 GPUs; the benchmark wants a full pool", p.Used())
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pl.Plan(rates); err != nil {
			b.Fatal(err)
		}
	}
}

// Stage 1 rates a prefill degree as a configuration, with its balanced
// share of decode (§3.3.1). Charging a tier's first prefill instance a
// whole decode instance instead made the first move favour large degrees:
// on R3's pool (Llama-8B on eight A100s under 500/15 and 500/30 ms,
// rounded) at 30 and 30 req/s the strict tier got a TP4 prefill and the
// plan served 45 req/s, where prefill at TP1 alone serves 55.
func TestPlanRatesConfigurations(t *testing.T) {
	tiers := tierSet(t, 2)
	prof := Profile{TP: []int{1, 2, 4, 8}, Cap: [][]Capacity{
		caps([]float64{8.4, 15.0, 25.2, 38.1}, []float64{57.3, 214.4, 433.8, 784.9}),
		caps([]float64{15.2, 27.1, 45.5, 68.4}, []float64{24.5, 49.0, 90.7, 141.4}),
	}}
	tp1 := Profile{TP: prof.TP, Cap: [][]Capacity{
		caps([]float64{8.4, 0, 0, 0}, []float64{57.3, 0, 0, 0}),
		caps([]float64{15.2, 0, 0, 0}, []float64{24.5, 0, 0, 0}),
	}}
	p := planFor(t, tiers, prof, 8, Options{}, 30, 30)
	only := planFor(t, tiers, tp1, 8, Options{}, 30, 30)
	t.Logf("all degrees: %v req/s on %d GPUs %+v %+v; TP1 only: %v", p.Served(), p.Used(), p.Tiers[0].Groups, p.Tiers[1].Groups, only.Served())
	if p.Served() < only.Served()-1e-9 {
		t.Errorf("all degrees serve %v req/s, TP1 alone %v", p.Served(), only.Served())
	}
	for _, g := range p.Tiers[0].Groups {
		if g.Role == Prefill && g.TP != 1 {
			t.Errorf("strict prefill at TP%d; TP1 is its most efficient configuration (7.3 req/s per GPU against 6.6 at TP2, 5.7 at TP4)", g.TP)
		}
	}
}
