package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/migrate"
	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/sched"
)

// driven is a manual cluster's requests and what their streams said.
type driven struct {
	c       *Cluster
	reqs    []engine.Request
	streams []*engine.Stream
	tokens  [][]int
	finish  []string
	finals  []int // final events seen per request
}

func (d *driven) submit(t *testing.T, r engine.Request) {
	t.Helper()
	st, err := d.c.Submit(r)
	if err != nil {
		t.Fatal(err)
	}
	d.reqs = append(d.reqs, r)
	d.streams = append(d.streams, st)
	d.tokens = append(d.tokens, nil)
	d.finish = append(d.finish, "")
	d.finals = append(d.finals, 0)
}

// drain reads every queued event without waiting.
func (d *driven) drain(t *testing.T) {
	t.Helper()
	for i, st := range d.streams {
		for {
			ev, ok := st.TryRecv()
			if !ok {
				break
			}
			if d.finals[i] > 0 {
				t.Fatalf("%s: event after its final one", d.reqs[i].ID)
			}
			d.tokens[i] = append(d.tokens[i], ev.Tokens...)
			if ev.Usage.CompletionTokens != len(d.tokens[i]) {
				t.Fatalf("%s: usage %d after %d tokens delivered (a token lost or repeated)", d.reqs[i].ID, ev.Usage.CompletionTokens, len(d.tokens[i]))
			}
			if ev.Finish != "" {
				d.finish[i] = ev.Finish
				d.finals[i]++
			}
		}
	}
}

func (d *driven) iterate(t *testing.T, n int) {
	t.Helper()
	for range n {
		if _, err := d.c.Iterate(context.Background()); err != nil {
			t.Fatal(err)
		}
		d.drain(t)
	}
}

// finishAll iterates until every request has ended, at most limit times.
func (d *driven) finishAll(t *testing.T, limit int) {
	t.Helper()
	for range limit {
		if !slices.Contains(d.finals, 0) {
			return
		}
		d.iterate(t, 1)
	}
	t.Fatalf("requests still live after %d iterations: finals %v", limit, d.finals)
}

// check holds every request to one final event, length, and the tokens
// it gets alone on one rank.
func (d *driven) check(t *testing.T, want [][]int) {
	t.Helper()
	for i, r := range d.reqs {
		if d.finals[i] != 1 || d.finish[i] != engine.FinishLength {
			t.Errorf("%s: %d final events, finish %q; want one, length", r.ID, d.finals[i], d.finish[i])
		}
		if !slices.Equal(d.tokens[i], want[i]) {
			t.Errorf("%s: %v, alone on one rank %v", r.ID, d.tokens[i], want[i])
		}
	}
	if n := d.c.disp.Load().InFlight(); n != 0 {
		t.Errorf("%d requests still in flight in the dispatcher", n)
	}
}

// kvBits is every running request's keys and values as the ranks of its
// instance hold them now, gathered by global KV head in the order layer,
// head, token, dim, as bits: id → bits. The cluster must be paused
// (Options.Manual, between iterations).
func kvBits(t *testing.T, c *Cluster) map[string][]uint32 {
	t.Helper()
	out := map[string][]uint32{}
	H := c.cfg.KVHeads
	for _, in := range c.insts {
		hs, err := in.eng.Handoffs()
		if err != nil {
			t.Fatal(err)
		}
		per := H / in.spec.TP
		for _, h := range hs {
			if !h.State.Running {
				continue
			}
			var bits []uint32
			for _, keys := range []bool{true, false} {
				for l := range c.cfg.Layers {
					for head := range H {
						cache := in.exec.RankCache(head / per)
						for tok := range h.State.Computed {
							b := h.State.Blocks[tok/cache.BlockSize]
							v := cache.Values(l, b, head%per)
							if keys {
								v = cache.Keys(l, b, head%per)
							}
							off := (tok % cache.BlockSize) * c.cfg.HeadDim
							for _, x := range v[off : off+c.cfg.HeadDim] {
								bits = append(bits, math.Float32bits(x))
							}
						}
					}
				}
			}
			out[h.State.ID] = bits
		}
	}
	return out
}

// kvBytesPerToken is what one token of one KV head moves: keys and
// values, float32, every layer.
func kvBytesPerToken(c *Cluster) int64 { return int64(c.cfg.Layers) * int64(c.cfg.HeadDim) * 2 * 4 }

// TestReconfigureMidGeneration (C7, K1, K2) moves requests mid-prefill
// and mid-decode TP1+TP1 → TP2 → TP1+TP1 on 2 ranks: greedy tokens equal
// each request's tokens alone on one rank (so equal to a run without the
// moves), each token delivered once, every request ends once, running
// requests' KV moves (half its heads cross ranks each way: the bytes are
// MovedTokens × H/2 × layers × head_dim × 8) and waiting ones move as
// metadata only; every running request's keys and values are
// bit-identical before and after each move. No weight byte is copied: the executors are the warm
// ones built at start-up.
func TestReconfigureMidGeneration(t *testing.T) {
	m := loadTiny(t)
	reqs := requests(10, 12, m.cfg.Vocab)
	want := reference(t, reqs)
	c := newCluster(t, 2, layout(2, 1, 1), true, func(o *Options) {
		o.Sched.MaxNumSeqs = 3 // some requests wait
		o.Sched.MaxNumBatchedTokens = 8
	})
	warm := len(c.warm)
	copied := copiedBytes(c)
	d := &driven{c: c}
	for _, r := range reqs {
		d.submit(t, r)
	}
	d.iterate(t, 3)
	for i, to := range []migrate.Grouping{{2}, {1, 1}} {
		before := kvBits(t, c)
		rep, err := c.Reconfigure(context.Background(), layout(4, to...))
		if err != nil {
			t.Fatal(err)
		}
		after := kvBits(t, c)
		if len(after) != len(before) || len(after) != rep.Moved {
			t.Fatalf("reconfiguration %d: %d running before, %d after, %d moved", i, len(before), len(after), rep.Moved)
		}
		for id, b := range before {
			if !slices.Equal(after[id], b) {
				t.Errorf("reconfiguration %d: %s: KV not bit-identical after the move", i, id)
			}
		}
		if rep.Moved == 0 || rep.Redispatched == 0 {
			t.Fatalf("reconfiguration %d: %+v: want running and waiting requests moved", i, rep)
		}
		heads := int64(m.cfg.KVHeads / 2)
		if wantB := rep.MovedTokens * heads * kvBytesPerToken(c); rep.Bytes != wantB {
			t.Errorf("reconfiguration %d: %d KV bytes moved, want %d (%d tokens)", i, rep.Bytes, wantB, rep.MovedTokens)
		}
		t.Logf("%v → %v: %d running moved (%d tokens, %d bytes), %d waiting re-dispatched, pause %v",
			rep.From, rep.To, rep.Moved, rep.MovedTokens, rep.Bytes, rep.Redispatched, rep.Pause)
		d.iterate(t, 3)
	}
	d.finishAll(t, 500)
	d.check(t, want)
	st := c.Stats()
	if st.Reconfigurations != 2 || st.MigratedBytes == 0 || !slices.Equal(st.Layout, migrate.Grouping{1, 1}) {
		t.Errorf("stats %+v", st)
	}
	if len(c.warm) != warm || copiedBytes(c) != copied {
		t.Errorf("weights: %d executors holding %d copied bytes, was %d holding %d", len(c.warm), copiedBytes(c), warm, copied)
	}
}

func copiedBytes(c *Cluster) int64 {
	var n int64
	for _, x := range c.warm {
		for _, b := range x.CopiedWeightBytes() {
			n += b
		}
	}
	return n
}

// TestReconfigureAbortsCleanly: a reconfiguration that cannot complete
// changes nothing. Two cases: the merged instance lacks the KV blocks of
// both old ones (refused before any byte moves), and a cancelled context
// (the migration's handshake fails on every rank). Afterwards the old
// instances go on and every request's tokens are right.
func TestReconfigureAbortsCleanly(t *testing.T) {
	m := loadTiny(t)
	reqs := requests(6, 20, m.cfg.Vocab)
	want := reference(t, reqs)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name   string
		blocks int
		ctx    context.Context
	}{
		// Each TP1 instance holds three requests of ≥ 14 tokens after 12
		// iterations: ≥ 12 of its 24 blocks, so the two do not fit one pool.
		{"blocks", 24, context.Background()},
		{"cancelled", 64, cancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 2, layout(3, 1, 1), true, func(o *Options) { o.NumBlocks = tc.blocks })
			d := &driven{c: c}
			for _, r := range reqs {
				d.submit(t, r)
			}
			d.iterate(t, 12)
			_, err := c.Reconfigure(tc.ctx, layout(6, 2))
			if err == nil {
				t.Fatal("reconfiguration succeeded, want a refusal")
			}
			t.Logf("refused: %v", err)
			if l := c.Stats().Layout; !slices.Equal(l, migrate.Grouping{1, 1}) {
				t.Fatalf("layout %v after a failed reconfiguration", l)
			}
			d.finishAll(t, 500)
			d.check(t, want)
			if st := c.Stats(); st.Failed != 1 || st.Reconfigurations != 0 || st.MigratedBytes != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// randomLayout draws an aligned power-of-two partition of ranks ranks
// into degrees of tps.
func randomLayout(rng *rand.Rand, ranks int, tps []int) migrate.Grouping {
	var g migrate.Grouping
	for first := 0; first < ranks; {
		var ok []int
		for _, t := range tps {
			if first%t == 0 && first+t <= ranks {
				ok = append(ok, t)
			}
		}
		t := ok[rng.IntN(len(ok))]
		g = append(g, t)
		first += t
	}
	return g
}

// TestRandomReconfigurations (C6) serves seeded random arrivals of every
// tier on 4 ranks while the layout changes at random every few
// iterations (TP 1, 2, 4; merges, splits and mixes; the tier each
// instance serves; prefill or decode role, so requests are also handed
// from prefill to decode instances): every request ends
// exactly once with its full length, its tokens delivered once each and
// equal to its tokens alone on one rank, and the dispatcher ends empty.
func TestRandomReconfigurations(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { randomReconfigurations(t, seed) })
	}
}

func randomReconfigurations(t *testing.T, seed uint64) {
	m := loadTiny(t)
	rng := rand.New(rand.NewPCG(16, seed))
	n := 24
	reqs := requests(n, 4, m.cfg.Vocab)
	for i := range reqs {
		reqs[i].Tier = []string{"", "loose", "batch"}[rng.IntN(3)]
		reqs[i].MaxTokens = 2 + rng.IntN(10)
	}
	want := reference(t, reqs)
	c := newCluster(t, 4, layout(2, 1, 1, 1, 1), true, func(o *Options) { o.Sched.MaxNumSeqs = 3 })
	d := &driven{c: c}
	next, changes := 0, 0
	for it := 0; slices.Contains(d.finals, 0) || next < len(reqs); it++ {
		if it > 2000 {
			t.Fatal("requests still live after 2000 iterations")
		}
		for k := rng.IntN(3); k > 0 && next < len(reqs); k-- {
			d.submit(t, reqs[next])
			next++
		}
		if rng.IntN(4) == 0 {
			g := randomLayout(rng, 4, []int{1, 2, 4})
			l := layout(1+rng.IntN(3), g...)
			for i := range l {
				l[i].Tier = rng.IntN(2) // serving either SLO tier
				if i > 0 && rng.IntN(3) == 0 {
					l[i].Role, l[i].Capacity, l[i].Background = nitsum.Decode, 0, false // requests come after their first token
				}
			}
			rep, err := c.Reconfigure(context.Background(), l)
			if err != nil {
				t.Fatalf("iteration %d: → %v: %v", it, g, err)
			}
			if rep.Changed > 0 {
				changes++
			}
		}
		d.iterate(t, 1)
	}
	d.check(t, want)
	st := c.Stats()
	if changes < 5 || st.MovedRequests == 0 || st.Redispatched == 0 || st.HandedOff == 0 {
		t.Errorf("%d layout changes, stats %+v: want requests moved both ways and handed off", changes, st)
	}
	t.Logf("%d requests, %d layout changes, %d running moved, %d waiting re-dispatched, %d KV bytes, %d handed off",
		len(reqs), changes, st.MovedRequests, st.Redispatched, st.MigratedBytes, st.HandedOff)
}

// TestReconfigureWhileServing reconfigures at random while the
// instances' loops run on their own goroutines and clients submit and
// read concurrently (stop-and-migrate against live loops): every
// request's tokens are right and end once, and Close ends cleanly.
func TestReconfigureWhileServing(t *testing.T) {
	m := loadTiny(t)
	reqs := requests(16, 24, m.cfg.Vocab)
	want := reference(t, reqs)
	c := newCluster(t, 4, layout(2, 2, 1, 1), false, func(o *Options) { o.Sched.MaxNumSeqs = 3 })
	rng := rand.New(rand.NewPCG(7, 7))
	got, errs, done := submitAll(t, c, reqs)
	moves, refused := 0, 0
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
		default:
			_, err := c.Reconfigure(context.Background(), layout(3, randomLayout(rng, 4, []int{1, 2, 4})...))
			switch {
			case errors.Is(err, sched.ErrNoBlocks): // a merge whose pool cannot take both halves: nothing changed
				refused++
			case err != nil:
				t.Fatal(err)
			default:
				moves++
			}
		}
	}
	checkOutputs(t, reqs, got, errs, want)
	st := c.Stats()
	if moves == 0 || st.Failed != int64(refused) {
		t.Errorf("%d reconfigurations, %d refused, stats %+v", moves, refused, st)
	}
	t.Logf("%d reconfigurations while serving (%d refused for blocks), %d running requests moved, %d bytes", moves, refused, st.MovedRequests, st.MigratedBytes)
}

// plans records the plan of every step an observer sees.
type plans struct {
	mu   sync.Mutex
	seen []string
}

func (p *plans) Step(s engine.StepStats) {
	p.mu.Lock()
	p.seen = append(p.seen, s.Plan)
	p.mu.Unlock()
}
func (p *plans) FirstToken(time.Duration, time.Duration) {}
func (p *plans) Token(time.Duration)                     {}
func (p *plans) Finish(engine.FinishStats)               {}

// since returns the plans seen after the first n, and how many were seen.
func (p *plans) since(n int) ([]string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen[n:]), len(p.seen)
}

// TestStepsReportLayout checks that every instance's steps reach the
// observer under the pool's layout, not the instance's own degree, so
// that /metrics' plan (gearbox:parallel_plan_info, plan switches) changes
// only when the layout does.
func TestStepsReportLayout(t *testing.T) {
	m := loadTiny(t)
	rec := &plans{}
	c := newCluster(t, 2, layout(2, 1, 1), true, func(o *Options) { o.Observer = rec })
	d := &driven{c: c}
	for _, r := range requests(4, 8, m.cfg.Vocab) {
		d.submit(t, r)
	}
	check := func(from int, want string) int {
		t.Helper()
		got, n := rec.since(from)
		if len(got) == 0 {
			t.Fatalf("no steps observed under %s", want)
		}
		for _, p := range got {
			if p != want {
				t.Fatalf("a step reported plan %q under layout %s (all: %q)", p, want, got)
			}
		}
		return n
	}
	d.iterate(t, 4)
	n := check(0, "tp[1 1]")
	if _, err := c.Reconfigure(context.Background(), layout(4, 2)); err != nil {
		t.Fatal(err)
	}
	d.iterate(t, 4)
	check(n, "tp[2]")
	d.finishAll(t, 500)
}
