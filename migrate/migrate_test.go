package migrate_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/migrate"
	"github.com/gearboxlm/gearbox/model"
)

// request is a test request's state between migrations.
type request struct {
	id      migrate.RequestID
	group   int // under the current grouping
	len     int
	waiting bool
	table   []int
	truth   kv
}

// cluster is four (or more) ranks' KV under one grouping.
type cluster struct {
	cfg    *model.Config
	bs     int
	blocks int // per cache
	g      migrate.Grouping
	caches []*kvcache.Cache
	reqs   []*request
}

// admit gives every running request of group grp with KV a table from
// a fresh BlockManager of that group (the destination group's allocator).
func admit(t *testing.T, c *cluster, tables map[migrate.RequestID][]int, grp int, reqs []*request) {
	t.Helper()
	bm, err := kvcache.NewBlockManager(kvcache.ManagerConfig{NumBlocks: c.blocks, BlockSize: c.bs})
	if err != nil {
		t.Fatal(err)
	}
	for _, rq := range reqs {
		if rq.waiting || rq.len == 0 {
			continue
		}
		seq, ok := bm.Admit(kvcache.Prefix{}, rq.len)
		if !ok {
			t.Fatalf("group %d: no blocks for request %d", grp, rq.id)
		}
		tables[rq.id] = seq.Blocks()
	}
}

// step migrates c to grouping to, each request to a group of to that
// overlaps its own, picked at random where there is a choice, and checks
// the result; it returns the plan.
func (c *cluster) step(t *testing.T, rng *rand.Rand, w *comm.World, to migrate.Grouping) *migrate.Plan {
	t.Helper()
	dest := make(map[migrate.RequestID]int)
	byGroup := make([][]*request, len(to))
	for _, rq := range c.reqs {
		src := c.g.Group(rq.group)
		var cands []int
		for j := range to {
			d := to.Group(j)
			if d.Lo < src.Hi && src.Lo < d.Hi {
				cands = append(cands, j)
			}
		}
		j := cands[rng.IntN(len(cands))]
		dest[rq.id] = j
		byGroup[j] = append(byGroup[j], rq)
	}
	tables := make(map[migrate.RequestID][]int)
	for j, rs := range byGroup {
		admit(t, c, tables, j, rs)
	}
	dst := make([]*kvcache.Cache, to.Ranks())
	for r := range dst {
		dst[r] = newCache(t, c.cfg, to.Heads(c.cfg, r).Len(), c.bs, c.blocks)
	}
	spec := migrate.Spec{Model: c.cfg, From: c.g, To: to}
	for _, rq := range c.reqs {
		spec.Requests = append(spec.Requests, migrate.Request{
			ID: rq.id, From: rq.group, To: dest[rq.id], Len: rq.len, Waiting: rq.waiting, Src: rq.table, Dst: tables[rq.id],
		})
	}
	p, err := migrate.NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	before := w.Stats()
	sts, errs := runAll(t, w, parts(p), c.caches, dst, migrate.Options{StagingBytes: 4 * 37})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%v → %v: rank %d: %v", c.g, to, r, err)
		}
	}

	// Bytes: comm's counters, the plan and the ranks' stats all equal the
	// formula.
	want := expectedBytes(c.cfg, c.g, to, spec.Requests)
	got := w.Stats().Sub(before).Group(migrate.DataGroup)
	var sent, recv int64
	for _, s := range sts {
		sent += s.SentBytes
		recv += s.RecvBytes
	}
	if got.SentBytes != want || got.RecvBytes != want || p.MovedBytes() != want || sent != want || recv != want {
		t.Fatalf("%v → %v: comm counted %d sent, %d received; plan %d; ranks %d, %d; formula %d",
			c.g, to, got.SentBytes, got.RecvBytes, p.MovedBytes(), sent, recv, want)
	}

	// Every rank of each request's new group holds exactly its head range,
	// bit for bit, and nothing else was written.
	for _, rq := range c.reqs {
		rq.group, rq.table = dest[rq.id], tables[rq.id]
		if rq.waiting {
			continue
		}
		grp := to.Group(rq.group)
		for r := grp.Lo; r < grp.Hi; r++ {
			checkHolds(t, fmt.Sprintf("%v: request %d on rank %d", to, rq.id, r), dst[r], rq.table, to.Heads(c.cfg, r), rq.truth, rq.len)
		}
	}
	for r := range dst {
		var ts [][]int
		var lens []int
		for _, rq := range byGroup[to.GroupOf(r)] {
			ts, lens = append(ts, rq.table), append(lens, rq.len)
		}
		checkUntouched(t, fmt.Sprintf("%v: rank %d", to, r), dst[r], ts, lens)
	}

	// Waiting requests: after the metadata moves, exactly the ranks of the
	// new group hold each one's metadata.
	for _, rq := range spec.Requests {
		if !rq.Waiting {
			continue
		}
		src, dg := c.g.Group(rq.From), to.Group(rq.To)
		var holders []int
		for r := dg.Lo; r < dg.Hi; r++ {
			if r >= src.Lo && r < src.Hi {
				holders = append(holders, r)
			}
		}
		for _, m := range p.Meta {
			if m.Req != rq.ID {
				continue
			}
			if m.From < src.Lo || m.From >= src.Hi {
				t.Fatalf("waiting request %d: metadata from rank %d outside its group %v", rq.ID, m.From, src)
			}
			holders = append(holders, m.To)
		}
		slices.Sort(holders)
		if want := blocks(dg.Hi)[dg.Lo:]; !slices.Equal(holders, want) {
			t.Fatalf("%v → %v: waiting request %d held on ranks %v, want %v", c.g, to, rq.ID, holders, want)
		}
	}
	c.g, c.caches = to, dst
	return p
}

// C2: TP 1→2→4→2→1 on four ranks; after each step every rank holds
// exactly its head range of every request of its group (checked bit for
// bit against the originals), the bytes match the formula, and after the
// return to TP1 every request lives on exactly one rank with its keys and
// values unchanged.
func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct{ kvHeads, bs int }{{8, 4}, {4, 16}, {8, 1}} {
		t.Run(fmt.Sprintf("H=%d/block=%d", tc.kvHeads, tc.bs), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.kvHeads), uint64(tc.bs)))
			cfg := geom(2, tc.kvHeads, 8)
			const ranks, perRank, maxLen = 4, 3, 40
			c := &cluster{cfg: cfg, bs: tc.bs, blocks: (ranks*perRank*maxLen+tc.bs-1)/tc.bs + 4, g: migrate.Uniform(ranks, 1)}
			byRank := make([][]*request, ranks)
			for r := range ranks {
				for i := range perRank {
					n := rng.IntN(maxLen + 1)
					if i == 0 {
						n = 0 // running, nothing computed yet
					}
					rq := &request{id: migrate.RequestID(1000*r + i), group: r, len: n, truth: randomKV(rng, cfg, n)}
					byRank[r] = append(byRank[r], rq)
					c.reqs = append(c.reqs, rq)
				}
				c.reqs = append(c.reqs, &request{id: migrate.RequestID(1000*r + 999), group: r, waiting: true})
			}
			for r := range ranks {
				c.caches = append(c.caches, newCache(t, cfg, cfg.KVHeads, tc.bs, c.blocks))
				tables := make(map[migrate.RequestID][]int)
				admit(t, c, tables, r, byRank[r])
				for _, rq := range byRank[r] {
					rq.table = tables[rq.id]
					write(c.caches[r], rq.table, c.g.Heads(cfg, r), rq.truth, rq.len)
				}
			}
			w, err := comm.NewWorld(ranks)
			if err != nil {
				t.Fatal(err)
			}
			var last *migrate.Plan
			for _, to := range []migrate.Grouping{{2, 2}, {4}, {2, 2}, {1, 1, 1, 1}} {
				last = c.step(t, rng, w, to)
				if to[0] == 4 {
					// K4: G2 gathers heads 2–3 from G1 and from G3 (pitfall 12).
					var from []int
					for _, tr := range last.Rank(1).Recvs {
						if want := to.Heads(cfg, 1); tr.Heads != want {
							t.Errorf("TP2→TP4: rank 1 receives heads %v from rank %d, want %v", tr.Heads, tr.From, want)
						}
						from = append(from, tr.From)
					}
					if slices.Sort(from); !slices.Equal(slices.Compact(from), []int{0, 2}) {
						t.Errorf("TP2→TP4: rank 1 receives from ranks %v, want [0 2]", from)
					}
				}
			}
			// Back at TP1: each request arrived on exactly one rank, which
			// holds all its heads (checked in step against the originals).
			for _, rq := range c.reqs {
				if rq.waiting {
					continue
				}
				var on []int
				for r := range ranks {
					rp := last.Rank(r)
					for _, tr := range slices.Concat(rp.Recvs, rp.Keeps) {
						if tr.Req == rq.id && !slices.Contains(on, r) {
							on = append(on, r)
						}
					}
				}
				if len(on) != 1 || on[0] != rq.group {
					t.Errorf("request %d lives on ranks %v, want [%d]", rq.id, on, rq.group)
				}
			}
		})
	}
}
