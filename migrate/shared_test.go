package migrate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/migrate"
)

// One cache as source and destination: moving a request between two TP2
// groups ([2 2] → [2 2]) writes its new blocks beside the old ones in the
// same caches, which also keep the requests that stay; a destination block
// that is also read is refused.
func TestSharedCache(t *testing.T) {
	cfg := geom(2, 4, 5)
	g := migrate.Grouping{2, 2}
	rng := rand.New(rand.NewPCG(7, 7))
	const bs, nb = 4, 16
	caches := make([]*kvcache.Cache, 4)
	for r := range caches {
		caches[r] = newCache(t, cfg, 2, bs, nb)
	}
	x := randomKV(rng, cfg, 13)
	src, dst := []int{9, 2, 14, 5}, []int{0, 11, 7, 3}
	for r := 0; r < 2; r++ {
		write(caches[r], src, g.Heads(cfg, r), x, 13)
	}
	spec := migrate.Spec{Model: cfg, From: g, To: g, Requests: []migrate.Request{{ID: 1, From: 0, To: 1, Len: 13, Src: src, Dst: dst}}}
	p, err := migrate.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	w, err := comm.NewWorld(4)
	if err != nil {
		t.Fatal(err)
	}
	_, errs := runAll(t, w, parts(p), caches, caches, migrate.Options{StagingBytes: 4 * 11})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := 2; r < 4; r++ {
		checkHolds(t, "moved request", caches[r], dst, g.Heads(cfg, r), x, 13)
		checkUntouched(t, "rank", caches[r], [][]int{dst}, []int{13})
	}
	for r := 0; r < 2; r++ {
		checkHolds(t, "source left as it was", caches[r], src, g.Heads(cfg, r), x, 13)
	}

	// Back, into blocks that overlap the ones read: refused, nothing moves.
	spec.Requests[0] = migrate.Request{ID: 1, From: 1, To: 1, Len: 13, Src: dst, Dst: []int{1, 3, 4, 6}}
	if p, err = migrate.NewPlan(spec); err != nil {
		t.Fatal(err)
	}
	before := snapshot(caches[2])
	_, errs = runAll(t, w, parts(p), caches, caches, migrate.Options{})
	for r, err := range errs {
		if !errors.Is(err, migrate.ErrHandshake) || !strings.Contains(err.Error(), "rank 2 cannot run its part: block 3 is read for request 1 and written for request 1 in the same cache") {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if !slices.Equal(snapshot(caches[2]), before) {
		t.Fatal("a refused migration changed the cache")
	}
}

// A context cancelled in the middle of the data phase stops every rank
// with an error, promptly, and leaves the sources as they were.
func TestCancel(t *testing.T) {
	cfg := geom(2, 8, 4)
	s := build(t, rand.New(rand.NewPCG(8, 8)), cfg, migrate.Grouping{1, 1, 1, 1}, migrate.Grouping{4}, []int{30, 7}, 0, 4, 4)
	before := make([][]uint32, len(s.src))
	for r, c := range s.src {
		before[r] = snapshot(c)
	}
	w, err := comm.NewWorld(4)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	fills := 0
	var mu sync.Mutex
	opt := migrate.Options{StagingBytes: 4 * 9, Hooks: &migrate.Hooks{Fill: func(rank, _, _ int) {
		mu.Lock()
		defer mu.Unlock()
		if fills++; fills == 20 {
			once.Do(cancel)
		}
	}}}
	ps, dst := parts(s.plan), s.freshDst(t)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() { _, errs[r] = migrate.Run(ctx, w, ps[r], s.src[r], dst[r], opt) })
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d finished a cancelled migration", r)
		} else if !errors.Is(err, comm.ErrAborted) && !errors.Is(err, context.Canceled) {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for r, c := range s.src {
		if !slices.Equal(snapshot(c), before[r]) {
			t.Fatalf("rank %d's source cache changed", r)
		}
	}
}
