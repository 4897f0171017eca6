package migrate_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/migrate"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// C5: one rank's metadata is corrupted; every rank returns the same
// handshake error naming the disagreement, no cache byte and no block
// table changes, no KV byte moves, and the World stays usable: the
// uncorrupted plan then runs on it.
func TestHandshakeRejects(t *testing.T) {
	cfg := geom(2, 8, 4)
	// TP2→TP4 on four ranks, the case where rank 1 gathers from ranks 0
	// and 2. Requests 1–3 start on ranks {0,1}, 4–6 on {2,3}; 3 and 6 wait.
	s := build(t, rand.New(rand.NewPCG(5, 5)), cfg, migrate.Grouping{2, 2}, migrate.Grouping{4}, []int{11, 0}, 1, 4, 16)
	first := func(ts []migrate.Transfer, req migrate.RequestID) int {
		i := slices.IndexFunc(ts, func(tr migrate.Transfer) bool { return tr.Req == req })
		if i < 0 {
			panic(fmt.Sprintf("no transfer of request %d", req))
		}
		return i
	}
	tests := []struct {
		name    string
		corrupt func(ps []migrate.RankPlan)
		want    string
	}{{
		name:    "sender's length",
		corrupt: func(ps []migrate.RankPlan) { ps[2].Sends[first(ps[2].Sends, 4)].Len = 12 },
		want:    "rank 2 sends KV heads [0,2) of 12 tokens of request 4 to rank 0, which expects KV heads [0,2) of 11 tokens of request 4",
	}, {
		name:    "receiver's length",
		corrupt: func(ps []migrate.RankPlan) { ps[3].Recvs[first(ps[3].Recvs, 1)].Len = 10 },
		want:    "rank 1 sends KV heads [6,8) of 11 tokens of request 1 to rank 3, which expects KV heads [6,8) of 10 tokens of request 1",
	}, {
		name:    "kept length",
		corrupt: func(ps []migrate.RankPlan) { ps[0].Keeps[first(ps[0].Keeps, 1)].Len = 10 },
		want:    "request 1 has 11 tokens on rank 0 and 10 on rank 0",
	}, {
		name: "receiver's head range",
		corrupt: func(ps []migrate.RankPlan) {
			ps[1].Recvs[first(ps[1].Recvs, 1)].Heads = parallel.Span{Lo: 2, Hi: 3}
		},
		want: "rank 0 sends KV heads [2,4) of 11 tokens of request 1 to rank 1, which expects KV heads [2,3) of 11 tokens of request 1",
	}, {
		name: "sender's head range",
		corrupt: func(ps []migrate.RankPlan) {
			ps[1].Sends[first(ps[1].Sends, 1)].Heads = parallel.Span{Lo: 5, Hi: 6}
		},
		want: "rank 1 sends KV heads [5,6) of 11 tokens of request 1 to rank 2",
	}, {
		name:    "unknown request",
		corrupt: func(ps []migrate.RankPlan) { ps[3].Recvs[first(ps[3].Recvs, 1)].Req = 99 },
		want:    "rank 1 sends KV heads [6,8) of 11 tokens of request 1 to rank 3, which expects nothing of it from rank 1",
	}, {
		name: "unknown request, receiver side",
		corrupt: func(ps []migrate.RankPlan) {
			ps[2].Recvs = append(ps[2].Recvs, migrate.Transfer{Req: 99, Heads: parallel.Span{Lo: 4, Hi: 6}, Len: 3, From: 0, To: 2, Dst: []int{0}})
		},
		want: "rank 2 expects KV heads [4,6) of 3 tokens of request 99 from rank 0, which sends nothing of it to rank 2",
	}, {
		name:    "missing request",
		corrupt: func(ps []migrate.RankPlan) { ps[0].Sends = ps[0].Sends[1:] },
		want:    "which sends nothing of it",
	}, {
		name:    "unknown waiting request",
		corrupt: func(ps []migrate.RankPlan) { ps[2].MetaRecvs[0].Req = 42 },
		want:    "rank 0 sends the metadata of waiting request 3 to rank 2, which expects nothing of it from rank 0",
	}, {
		name:    "held heads",
		corrupt: func(ps []migrate.RankPlan) { ps[0].Held = parallel.Span{Lo: 4, Hi: 8} },
		want:    "rank 0 cannot run its part: request 1 from rank 0 to rank 1: KV heads [2,4) outside the rank's heads [4,8)",
	}, {
		name:    "short destination table",
		corrupt: func(ps []migrate.RankPlan) { ps[1].Recvs[0].Dst = nil },
		want:    "rank 1 cannot run its part: request 1 from rank 0 to rank 1: destination table of 0 blocks for 11 tokens in blocks of 16",
	}, {
		name: "shared destination block",
		corrupt: func(ps []migrate.RankPlan) {
			i := first(ps[1].Recvs, 4)
			ps[1].Recvs[i].Dst = ps[1].Recvs[first(ps[1].Recvs, 1)].Dst
		},
		want: "rank 1 cannot run its part: destination block",
	}, {
		name:    "source block outside the cache",
		corrupt: func(ps []migrate.RankPlan) { ps[3].Keeps[0].Src = []int{-1, 0, 1} },
		want:    "rank 3 cannot run its part: request 4 from rank 3 to rank 3: source block -1 outside the cache's",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := comm.NewWorld(4)
			if err != nil {
				t.Fatal(err)
			}
			dst := s.freshDst(t)
			caches := slices.Concat(s.src, dst)
			before := make([][]uint32, len(caches))
			for i, c := range caches {
				before[i] = snapshot(c)
			}
			tables := make([][]int, 0, 2*len(s.spec.Requests))
			for _, rq := range s.spec.Requests {
				tables = append(tables, slices.Clone(rq.Src), slices.Clone(rq.Dst))
			}
			ps := parts(s.plan)
			tt.corrupt(ps)
			_, errs := runAll(t, w, ps, s.src, dst, migrate.Options{StagingBytes: 64})
			var msg string
			for r, err := range errs {
				if !errors.Is(err, migrate.ErrHandshake) {
					t.Fatalf("rank %d: err = %v, want a handshake error", r, err)
				}
				m := strings.TrimPrefix(err.Error(), fmt.Sprintf("migrate: rank %d: ", r))
				if r == 0 {
					msg = m
				} else if m != msg {
					t.Fatalf("rank %d says %q, rank 0 %q", r, m, msg)
				}
			}
			if !strings.Contains(msg, tt.want) {
				t.Fatalf("error %q does not say %q", msg, tt.want)
			}
			for i, c := range caches {
				if !slices.Equal(snapshot(c), before[i]) {
					t.Fatalf("cache %d changed", i)
				}
			}
			for i, rq := range s.spec.Requests {
				if !slices.Equal(rq.Src, tables[2*i]) || !slices.Equal(rq.Dst, tables[2*i+1]) {
					t.Fatalf("request %d's block tables changed", rq.ID)
				}
			}
			if n := w.Stats().Group(migrate.DataGroup); n != (comm.Counter{}) {
				t.Fatalf("KV moved before the handshake passed: %+v", n)
			}
			if err := w.Err(); err != nil {
				t.Fatalf("world aborted: %v", err)
			}
			// The World still works: the true plan runs and matches the oracle.
			_, errs = runAll(t, w, parts(s.plan), s.src, dst, migrate.Options{StagingBytes: 64})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("clean run, rank %d: %v", r, err)
				}
			}
			sameCaches(t, "clean run", dst, s.oracle(t))
		})
	}
}

// Ranks that disagree on the options or geometry are refused too.
func TestHandshakeOptions(t *testing.T) {
	cfg := geom(1, 2, 2)
	s := build(t, rand.New(rand.NewPCG(6, 6)), cfg, migrate.Grouping{1, 1}, migrate.Grouping{2}, []int{3}, 0, 1, 1)
	w, err := comm.NewWorld(2)
	if err != nil {
		t.Fatal(err)
	}
	ps := parts(s.plan)
	dst := s.freshDst(t)
	errs := make([]error, 2)
	done := make(chan struct{})
	go func() {
		_, errs[1] = migrate.Run(t.Context(), w, ps[1], s.src[1], dst[1], migrate.Options{StagingBytes: 8})
		close(done)
	}()
	_, errs[0] = migrate.Run(t.Context(), w, ps[0], s.src[0], dst[0], migrate.Options{StagingBytes: 12})
	<-done
	for r, err := range errs {
		if !errors.Is(err, migrate.ErrHandshake) || !strings.Contains(err.Error(), "rank 1 runs pipelined with 2-value staging buffers, rank 0 pipelined with 3") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	_, errs = runAll(t, w, ps, s.src, dst, migrate.Options{StagingBytes: 6})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "multiple of 4") {
			t.Errorf("6-byte buffers, rank %d: %v", r, err)
		}
	}
}

// A rank whose destination cache holds BF16 keys and values cannot run
// its part: migrate moves float32 caches only. Every rank returns the
// same handshake error naming the cache, and the source caches keep
// their bytes.
func TestHandshakeRefusesHalfCache(t *testing.T) {
	cfg := geom(1, 2, 2)
	s := build(t, rand.New(rand.NewPCG(7, 7)), cfg, migrate.Grouping{1, 1}, migrate.Grouping{2}, []int{3}, 0, 1, 1)
	w, err := comm.NewWorld(2)
	if err != nil {
		t.Fatal(err)
	}
	dst := s.freshDst(t)
	if dst[1], err = kvcache.New(kvcache.Layout{Layers: cfg.Layers, KVHeads: dst[1].KVHeads, HeadDim: cfg.HeadDim,
		BlockSize: dst[1].BlockSize, NumBlocks: dst[1].NumBlocks, DType: tensor.BF16}); err != nil {
		t.Fatal(err)
	}
	before := [][]uint32{snapshot(s.src[0]), snapshot(s.src[1])}
	_, errs := runAll(t, w, parts(s.plan), s.src, dst, migrate.Options{})
	const want = "rank 1 cannot run its part: destination cache of bf16 keys and values: migrate moves float32 caches only"
	for r, err := range errs {
		if !errors.Is(err, migrate.ErrHandshake) || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want a handshake error saying %q", r, err, want)
		}
	}
	for r, c := range s.src {
		if !slices.Equal(snapshot(c), before[r]) {
			t.Errorf("source cache %d changed", r)
		}
	}
}
