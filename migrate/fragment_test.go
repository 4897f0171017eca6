package migrate_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/migrate"
)

// C3: shuffled block tables, block sizes 1 and 16 on either side, staging
// buffers below, at and above one shard and of odd sizes, contexts of
// length 0: every mode's result equals a naive per-page copy, the sources
// are untouched and the bytes match the formula.
func TestFragmentation(t *testing.T) {
	cfg := geom(2, 4, 3) // an odd head dim
	lens := []int{0, 1, 15, 16, 17, 37}
	// One shard: the 17-token request's half of the heads (2 of 4) to
	// the peer under TP1→TP2, keys and values of every layer.
	shard := 2 * cfg.Layers * 2 * 17 * cfg.HeadDim
	stagings := []int{1, 7, shard - 1, shard, shard + 1, 3*shard + 5} // values
	for _, tr := range []struct{ from, to migrate.Grouping }{
		{migrate.Grouping{1, 1}, migrate.Grouping{2}},
		{migrate.Grouping{2}, migrate.Grouping{1, 1}},
		{migrate.Grouping{2, 2}, migrate.Grouping{4}},
		{migrate.Grouping{4}, migrate.Grouping{1, 1, 1, 1}},
	} {
		for _, bs := range [][2]int{{1, 1}, {16, 16}, {1, 16}, {16, 1}} {
			name := fmt.Sprintf("%v→%v/blocks=%d→%d", tr.from, tr.to, bs[0], bs[1])
			t.Run(name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(bs[0]), uint64(bs[1])))
				s := build(t, rng, cfg, tr.from, tr.to, lens, 1, bs[0], bs[1])
				want := s.oracle(t)
				before := make([][]uint32, len(s.src))
				for r, c := range s.src {
					before[r] = snapshot(c)
				}
				w, err := comm.NewWorld(tr.from.Ranks())
				if err != nil {
					t.Fatal(err)
				}
				opts := []migrate.Options{{Mode: migrate.PerPage}}
				for _, n := range stagings {
					opts = append(opts, migrate.Options{StagingBytes: 4 * n}, migrate.Options{Mode: migrate.Unpipelined, StagingBytes: 4 * n})
				}
				for _, opt := range opts {
					what := fmt.Sprintf("%s, %d-value buffers", opt.Mode, opt.StagingBytes/4)
					dst := s.freshDst(t)
					prev := w.Stats()
					_, errs := runAll(t, w, parts(s.plan), s.src, dst, opt)
					for r, err := range errs {
						if err != nil {
							t.Fatalf("%s: rank %d: %v", what, r, err)
						}
					}
					sameCaches(t, what, dst, want)
					got := w.Stats().Sub(prev).Group(migrate.DataGroup)
					if wantB := expectedBytes(cfg, tr.from, tr.to, s.spec.Requests); got.SentBytes != wantB || got.RecvBytes != wantB {
						t.Fatalf("%s: comm counted %d sent, %d received, formula %d", what, got.SentBytes, got.RecvBytes, wantB)
					}
				}
				for r, c := range s.src {
					if !slices.Equal(snapshot(c), before[r]) {
						t.Fatalf("rank %d's source cache changed", r)
					}
				}
			})
		}
	}
}
