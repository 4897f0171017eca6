package comm_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
)

// shiftGroups builds the groups of Shift Parallelism with base config
// (SP=s, TP=t) on P = s·t ranks (global rank r = sp·t + tp): TP groups of t
// consecutive ranks, SP groups striding t, and the shift config's full TP
// group ordered tp-major, sp-minor.
func shiftGroups(t testing.TB, w *comm.World, s, tp int) (tpc, spc []*comm.Comm, full *comm.Group) {
	t.Helper()
	var tpParts, spParts [][]int
	for sp := range s {
		var part []int
		for k := range tp {
			part = append(part, sp*tp+k)
		}
		tpParts = append(tpParts, part)
	}
	var order []int
	for k := range tp {
		var part []int
		for sp := range s {
			part = append(part, sp*tp+k)
		}
		spParts = append(spParts, part)
		order = append(order, part...)
	}
	var err error
	if tpc, err = w.Split("tp", tpParts...); err != nil {
		t.Fatal(err)
	}
	if spc, err = w.Split("sp", spParts...); err != nil {
		t.Fatal(err)
	}
	if full, err = w.Group("shift", order...); err != nil {
		t.Fatal(err)
	}
	return tpc, spc, full
}

// Subgroups in arbitrary member order, used concurrently: every rank runs
// its TP group's all-reduces on one goroutine while another goroutine runs
// its SP group's all-to-alls and the shift group's all-gathers and
// all-reduces, so different groups (and the same rank in different groups)
// overlap in time.
func TestSubgroupsConcurrent(t *testing.T) {
	const s, tp, iters, n = 3, 2, 40, 12
	p := s * tp
	w := newWorld(t, p)
	tpc, spc, full := shiftGroups(t, w, s, tp)
	if got, want := full.Ranks(), []int{0, 2, 4, 1, 3, 5}; !slices.Equal(got, want) {
		t.Fatalf("shift group ranks %v, want %v", got, want)
	}
	for r := range p {
		if m, _ := full.Member(r); full.WorldRank(m) != r || full.Comm(r).Rank() != m {
			t.Fatalf("rank %d: member %d does not map back", r, m)
		}
	}

	in := func(it, r int) []float32 { return input(uint64(it), r, n) }
	var (
		mu   sync.Mutex
		errs []string
	)
	report := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	runAll(t, 2*p, func(i int) error {
		r := i % p
		if i < p { // TP all-reduces
			c := tpc[r]
			members := c.Group().Ranks()
			buf := make([]float32, n)
			for it := range iters {
				copy(buf, in(it, r))
				if err := c.AllReduce(bg, buf); err != nil {
					return err
				}
				var xs [][]float32
				for _, m := range members {
					xs = append(xs, in(it, m))
				}
				if want := sumInOrder(xs); !slices.Equal(buf, want) {
					report("tp rank %d iter %d: %v, want %v", r, it, buf, want)
				}
			}
			return nil
		}
		sc, fc := spc[r], full.Comm(r)
		spMembers, fullMembers := sc.Group().Ranks(), full.Ranks()
		a2a := make([]float32, s*4)
		recv := make([]float32, s*4)
		gathered := make([]float32, p*n)
		buf := make([]float32, n)
		for it := range iters {
			for j := range s { // chunk j for SP member j: (it, my world rank, j)
				copy(a2a[4*j:], []float32{float32(it), float32(r), float32(j), 0})
			}
			if err := sc.AllToAll(bg, a2a, recv); err != nil {
				return err
			}
			for i, m := range spMembers {
				if got, want := recv[4*i:4*i+3], []float32{float32(it), float32(m), float32(sc.Rank())}; !slices.Equal(got, want) {
					report("sp rank %d iter %d chunk %d: %v, want %v", r, it, i, got, want)
				}
			}
			if err := fc.AllGather(bg, in(it, r), gathered); err != nil {
				return err
			}
			var xs [][]float32
			for i, m := range fullMembers {
				if !slices.Equal(gathered[i*n:(i+1)*n], in(it, m)) {
					report("shift rank %d iter %d: block %d is not rank %d's", r, it, i, m)
				}
				xs = append(xs, in(it, m))
			}
			copy(buf, in(it, r))
			if err := fc.AllReduce(bg, buf); err != nil {
				return err
			}
			if want := sumInOrder(xs); !slices.Equal(buf, want) { // member order 0,2,4,1,3,5
				report("shift rank %d iter %d: all-reduce %v, want %v", r, it, buf, want)
			}
		}
		return nil
	})
	for _, e := range errs {
		t.Error(e)
	}
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestGroupCache(t *testing.T) {
	w := newWorld(t, 6)
	a, err := w.Group("tp", 0, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := w.Group("tp", 0, 2, 4); b != a {
		t.Error("same label and ranks: want the cached group")
	}
	if b, _ := w.Group("tp", 4, 2, 0); b == a {
		t.Error("different order: want a different group")
	}
	if b, _ := w.Group("sp", 0, 2, 4); b == a {
		t.Error("different label: want a different group")
	}
	ranks := []int{0, 2, 4}
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := w.Group("tp", ranks...); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("cached Group lookup: %v allocations, want 0", allocs)
	}
	if c := a.Comm(1); c != nil {
		t.Errorf("Comm of a non-member: %v, want nil", c)
	}
	if c := a.Comm(4); c.Rank() != 2 || c.Size() != 3 || c.WorldRank() != 4 || c.Group().Label() != "tp" {
		t.Errorf("Comm(4): member %d of %d, world rank %d, label %q", c.Rank(), c.Size(), c.WorldRank(), c.Group().Label())
	}
	if c := w.Comm(3); c.Rank() != 3 || c.Size() != 6 || c.Group().Label() != "world" {
		t.Errorf("world Comm(3): member %d of %d, label %q", c.Rank(), c.Size(), c.Group().Label())
	}

	comms, err := w.Split("pairs", []int{1, 0}, []int{5, 4})
	if err != nil {
		t.Fatal(err)
	}
	for r, want := range []int{1, 0, -1, -1, 1, 0} {
		if got := comms[r]; (want < 0) != (got == nil) || got != nil && got.Rank() != want {
			t.Errorf("Split: rank %d has %v, want member %d", r, got, want)
		}
	}
}

func TestGroupErrors(t *testing.T) {
	w := newWorld(t, 4)
	for _, ranks := range [][]int{nil, {0, 0}, {1, 4}, {-1}} {
		if _, err := w.Group("g", ranks...); err == nil {
			t.Errorf("Group(%v): want an error", ranks)
		}
	}
	if _, err := w.Split("g", []int{0, 1}, []int{1, 2}); err == nil {
		t.Error("Split with overlapping parts: want an error")
	}
	if _, err := comm.NewWorld(0); err == nil {
		t.Error("NewWorld(0): want an error")
	}
	if err := w.Err(); err != nil {
		t.Errorf("group errors aborted the world: %v", err)
	}
}
