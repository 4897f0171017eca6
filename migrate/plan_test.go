package migrate_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/migrate"
	"github.com/gearboxlm/gearbox/parallel"
)

// move is a transfer without its tables, for comparing plans.
type move struct {
	req      migrate.RequestID
	lo, hi   int
	from, to int
}

func moves(p *migrate.Plan) []move {
	var out []move
	for _, t := range p.Transfers {
		out = append(out, move{t.Req, t.Heads.Lo, t.Heads.Hi, t.From, t.To})
	}
	return out
}

func sortMoves(ms []move) []move {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b move) int {
		if a.from != b.from {
			return a.from - b.from
		}
		if a.to != b.to {
			return a.to - b.to
		}
		return int(a.req) - int(b.req)
	})
	return ms
}

// K4's worked example, H = 8 on G1–G4 (ranks 0–3).
func TestPlanK4(t *testing.T) {
	cfg := geom(2, 8, 4)
	run := func(from, to migrate.Grouping, reqs ...migrate.Request) *migrate.Plan {
		t.Helper()
		for i := range reqs {
			reqs[i].Len = 5
		}
		p, err := migrate.NewPlan(migrate.Spec{Model: cfg, From: from, To: to, Requests: reqs})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name     string
		from, to migrate.Grouping
		reqs     []migrate.Request
		want     []move
	}{{
		// DP→TP2: G2 sends heads 0–3 of its requests to G1, G1 sends heads
		// 4–7 of its requests to G2; the same on {G3, G4}.
		name: "TP1→TP2", from: migrate.Grouping{1, 1, 1, 1}, to: migrate.Grouping{2, 2},
		reqs: []migrate.Request{{ID: 0, From: 0, To: 0}, {ID: 1, From: 1, To: 0}, {ID: 2, From: 2, To: 1}, {ID: 3, From: 3, To: 1}},
		want: []move{
			{0, 0, 4, 0, 0}, {0, 4, 8, 0, 1}, {1, 0, 4, 1, 0}, {1, 4, 8, 1, 1},
			{2, 0, 4, 2, 2}, {2, 4, 8, 2, 3}, {3, 0, 4, 3, 2}, {3, 4, 8, 3, 3},
		},
	}, {
		// TP2→TP4: G1 gathers heads 0–1 from G3; G2 gathers heads 2–3 from
		// G1 and from G3; G3 gets 4–5 from G2 and G4; G4 gets 6–7 from G2
		// and keeps its own.
		name: "TP2→TP4", from: migrate.Grouping{2, 2}, to: migrate.Grouping{4},
		reqs: []migrate.Request{{ID: 0, From: 0, To: 0}, {ID: 1, From: 1, To: 0}},
		want: []move{
			{0, 0, 2, 0, 0}, {0, 2, 4, 0, 1}, {0, 4, 6, 1, 2}, {0, 6, 8, 1, 3},
			{1, 0, 2, 2, 0}, {1, 2, 4, 2, 1}, {1, 4, 6, 3, 2}, {1, 6, 8, 3, 3},
		},
	}, {
		// TP4→TP2 reverses it, request 0 back to {G1, G2}, 1 to {G3, G4}.
		name: "TP4→TP2", from: migrate.Grouping{4}, to: migrate.Grouping{2, 2},
		reqs: []migrate.Request{{ID: 0, From: 0, To: 0}, {ID: 1, From: 0, To: 1}},
		want: []move{
			{0, 0, 2, 0, 0}, {0, 2, 4, 1, 0}, {0, 4, 6, 2, 1}, {0, 6, 8, 3, 1},
			{1, 0, 2, 0, 2}, {1, 2, 4, 1, 2}, {1, 4, 6, 2, 3}, {1, 6, 8, 3, 3},
		},
	}, {
		// TP2→TP1: the group's members send their heads to the one rank
		// the request joins.
		name: "TP2→TP1", from: migrate.Grouping{2, 2}, to: migrate.Grouping{1, 1, 1, 1},
		reqs: []migrate.Request{{ID: 0, From: 0, To: 1}, {ID: 1, From: 1, To: 2}},
		want: []move{{0, 0, 4, 0, 1}, {0, 4, 8, 1, 1}, {1, 0, 4, 2, 2}, {1, 4, 8, 3, 2}},
	}, {
		// A mixed change: {0,1} splits, {2} and {3} merge.
		name: "mixed", from: migrate.Grouping{2, 1, 1}, to: migrate.Grouping{1, 1, 2},
		reqs: []migrate.Request{{ID: 0, From: 0, To: 0}, {ID: 1, From: 2, To: 2}},
		want: []move{{0, 0, 4, 0, 0}, {0, 4, 8, 1, 0}, {1, 0, 4, 3, 2}, {1, 4, 8, 3, 3}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := run(tt.from, tt.to, tt.reqs...)
			if got, want := moves(p), sortMoves(tt.want); !slices.Equal(got, want) {
				t.Fatalf("transfers\n got %v\nwant %v", got, want)
			}
			// Each rank's part lists its sends, receives and copies.
			for r := range p.Ranks() {
				rp := p.Rank(r)
				if rp.Held != tt.from.Heads(cfg, r) || rp.Holds != tt.to.Heads(cfg, r) {
					t.Errorf("rank %d holds %v then %v", r, rp.Held, rp.Holds)
				}
				for _, tr := range rp.Sends {
					if tr.From != r || tr.To == r {
						t.Errorf("rank %d sends %+v", r, tr)
					}
				}
				for _, tr := range rp.Recvs {
					if tr.To != r || tr.From == r {
						t.Errorf("rank %d receives %+v", r, tr)
					}
				}
				for _, tr := range rp.Keeps {
					if tr.To != r || tr.From != r {
						t.Errorf("rank %d keeps %+v", r, tr)
					}
				}
				if n := len(rp.Sends) + len(rp.Recvs) + len(rp.Keeps); n == 0 {
					t.Errorf("rank %d has nothing to do", r)
				}
			}
		})
	}
}

// Waiting requests move metadata only: up in TP to the ranks of the new
// group that lack it, down in TP nowhere.
func TestPlanWaiting(t *testing.T) {
	cfg := geom(2, 8, 4)
	for _, tt := range []struct {
		name     string
		from, to migrate.Grouping
		src, dst int
		want     []migrate.Meta
	}{
		{"TP1→TP2", migrate.Grouping{1, 1}, migrate.Grouping{2}, 1, 0, []migrate.Meta{{Req: 7, From: 1, To: 0}}},
		{"TP2→TP4", migrate.Grouping{2, 2}, migrate.Grouping{4}, 0, 0, []migrate.Meta{{Req: 7, From: 0, To: 2}, {Req: 7, From: 1, To: 3}}},
		{"TP4→TP2", migrate.Grouping{4}, migrate.Grouping{2, 2}, 0, 1, nil},
		{"TP1→TP1 elsewhere", migrate.Grouping{1, 1}, migrate.Grouping{1, 1}, 0, 1, []migrate.Meta{{Req: 7, From: 0, To: 1}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := migrate.NewPlan(migrate.Spec{Model: cfg, From: tt.from, To: tt.to,
				Requests: []migrate.Request{{ID: 7, From: tt.src, To: tt.dst, Waiting: true}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Transfers) != 0 || p.MovedBytes() != 0 {
				t.Errorf("a waiting request moves KV: %v", p.Transfers)
			}
			if !slices.Equal(p.Meta, tt.want) {
				t.Errorf("metadata moves %v, want %v", p.Meta, tt.want)
			}
		})
	}
}

func TestPlanRejects(t *testing.T) {
	cfg := geom(2, 4, 4)
	one := func(rq migrate.Request) []migrate.Request { return []migrate.Request{rq} }
	for _, tt := range []struct {
		name string
		spec migrate.Spec
		want string
	}{
		{"no model", migrate.Spec{From: migrate.Grouping{1}, To: migrate.Grouping{1}}, "geometry"},
		{"not a power of two", migrate.Spec{Model: cfg, From: migrate.Grouping{3, 1}, To: migrate.Grouping{4}}, "power of two"},
		{"unaligned", migrate.Spec{Model: cfg, From: migrate.Grouping{1, 2, 1}, To: migrate.Grouping{4}}, "not a multiple of 2"},
		{"more ranks than heads", migrate.Spec{Model: cfg, From: migrate.Uniform(8, 1), To: migrate.Grouping{8}}, "exceeds the 4 KV heads"},
		{"different ranks", migrate.Spec{Model: cfg, From: migrate.Grouping{1, 1}, To: migrate.Grouping{4}}, "covers 2 ranks"},
		{"twice", migrate.Spec{Model: cfg, From: migrate.Grouping{1, 1}, To: migrate.Grouping{2},
			Requests: []migrate.Request{{ID: 3}, {ID: 3, From: 1}}}, "request 3 listed twice"},
		{"source group", migrate.Spec{Model: cfg, From: migrate.Grouping{1, 1}, To: migrate.Grouping{2},
			Requests: one(migrate.Request{ID: 3, From: 2})}, "source group 2"},
		{"destination group", migrate.Spec{Model: cfg, From: migrate.Grouping{1, 1}, To: migrate.Grouping{2},
			Requests: one(migrate.Request{ID: 3, To: 1})}, "destination group 1"},
		{"negative length", migrate.Spec{Model: cfg, From: migrate.Grouping{1, 1}, To: migrate.Grouping{2},
			Requests: one(migrate.Request{ID: 3, Len: -1})}, "context length -1"},
		{"waiting with KV", migrate.Spec{Model: cfg, From: migrate.Grouping{1, 1}, To: migrate.Grouping{2},
			Requests: one(migrate.Request{ID: 3, Waiting: true, Len: 4, Src: []int{0}})}, "waiting request 3 has KV"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := migrate.NewPlan(tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// A rank's heads are its parallel.SliceHeads KV slice, so the cache
// matches the weight shard view (pitfall 13).
func TestGroupingHeads(t *testing.T) {
	cfg := geom(1, 8, 4)
	g := migrate.Grouping{2, 1, 1, 4}
	if g.Ranks() != 8 || g.String() != "tp[2 1 1 4]" {
		t.Fatalf("%v covers %d ranks", g, g.Ranks())
	}
	for r, want := range []struct{ grp, lo, hi int }{{0, 0, 4}, {0, 4, 8}, {1, 0, 8}, {2, 0, 8}, {3, 0, 2}, {3, 2, 4}, {3, 4, 6}, {3, 6, 8}} {
		if got := g.GroupOf(r); got != want.grp {
			t.Errorf("rank %d in group %d, want %d", r, got, want.grp)
		}
		grp := g.Group(want.grp)
		s := parallel.SliceHeads(cfg, r-grp.Lo, 1, grp.Len())
		if h := g.Heads(cfg, r); h != (parallel.Span{Lo: want.lo, Hi: want.hi}) || h.Lo != s.KVLo || h.Hi != s.KVHi {
			t.Errorf("rank %d holds heads %v, want [%d,%d) = SliceHeads %v", r, h, want.lo, want.hi, s)
		}
	}
	if g.GroupOf(8) != -1 || g.GroupOf(-1) != -1 {
		t.Error("GroupOf finds a rank outside the grouping")
	}
	if !slices.Equal(migrate.Uniform(4, 2), migrate.Grouping{2, 2}) {
		t.Errorf("Uniform(4, 2) = %v", migrate.Uniform(4, 2))
	}
}
