package migrate_test

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/migrate"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// sentinel fills every cache slot no request owns, so that a stray write
// shows.
const sentinel = 0xDEADBEEF

// geom returns a model config with the KV geometry the tests need.
func geom(layers, kvHeads, headDim int) *model.Config {
	return &model.Config{Layers: layers, Heads: 2 * kvHeads, KVHeads: kvHeads, HeadDim: headDim}
}

// newCache returns a cache of the given shape with every value the
// sentinel.
func newCache(t testing.TB, cfg *model.Config, heads, blockSize, blocks int) *kvcache.Cache {
	t.Helper()
	c, err := kvcache.New(kvcache.Layout{Layers: cfg.Layers, KVHeads: heads, HeadDim: cfg.HeadDim, BlockSize: blockSize, NumBlocks: blocks})
	if err != nil {
		t.Fatal(err)
	}
	s := math.Float32frombits(sentinel)
	for l := range c.Layers {
		for b := range c.NumBlocks {
			for h := range c.KVHeads {
				for _, v := range [][]float32{c.Keys(l, b, h), c.Values(l, b, h)} {
					for i := range v {
						v[i] = s
					}
				}
			}
		}
	}
	return c
}

// snapshot is every value of c as bits, keys then values, layer by layer,
// block by block, head by head.
func snapshot(c *kvcache.Cache) []uint32 {
	if c == nil {
		return nil
	}
	var out []uint32
	for _, keys := range []bool{true, false} {
		for l := range c.Layers {
			for b := range c.NumBlocks {
				for h := range c.KVHeads {
					v := c.Values(l, b, h)
					if keys {
						v = c.Keys(l, b, h)
					}
					for _, x := range v {
						out = append(out, math.Float32bits(x))
					}
				}
			}
		}
	}
	return out
}

// kv is one request's true keys and values: [layer][kv head][token·head_dim].
type kv struct{ k, v [][][]float32 }

// randomKV draws len tokens of random bits (NaNs and denormals included),
// never the sentinel.
func randomKV(rng *rand.Rand, cfg *model.Config, n int) kv {
	draw := func() [][][]float32 {
		out := make([][][]float32, cfg.Layers)
		for l := range out {
			out[l] = make([][]float32, cfg.KVHeads)
			for h := range out[l] {
				s := make([]float32, n*cfg.HeadDim)
				for i := range s {
					u := rng.Uint32()
					if u == sentinel {
						u ^= 1
					}
					s[i] = math.Float32frombits(u)
				}
				out[l][h] = s
			}
		}
		return out
	}
	return kv{k: draw(), v: draw()}
}

// write stores heads [heads.Lo, heads.Hi) of x into cache c, whose first
// head is heads.Lo, through table.
func write(c *kvcache.Cache, table []int, heads parallel.Span, x kv, n int) {
	d, bs := c.HeadDim, c.BlockSize
	for l := range c.Layers {
		for h := heads.Lo; h < heads.Hi; h++ {
			for p := range n {
				s := p % bs
				copy(c.Keys(l, table[p/bs], h-heads.Lo)[s*d:(s+1)*d], x.k[l][h][p*d:(p+1)*d])
				copy(c.Values(l, table[p/bs], h-heads.Lo)[s*d:(s+1)*d], x.v[l][h][p*d:(p+1)*d])
			}
		}
	}
}

// checkHolds fails unless cache c, whose first head is heads.Lo, holds
// exactly x's heads [heads.Lo, heads.Hi) for tokens [0, n) through table,
// bit for bit.
func checkHolds(t *testing.T, what string, c *kvcache.Cache, table []int, heads parallel.Span, x kv, n int) {
	t.Helper()
	if c.KVHeads != heads.Len() {
		t.Fatalf("%s: cache holds %d KV heads, want %d (%v)", what, c.KVHeads, heads.Len(), heads)
	}
	d, bs := c.HeadDim, c.BlockSize
	for l := range c.Layers {
		for h := heads.Lo; h < heads.Hi; h++ {
			for p := range n {
				s := p % bs
				gotK := c.Keys(l, table[p/bs], h-heads.Lo)[s*d : (s+1)*d]
				gotV := c.Values(l, table[p/bs], h-heads.Lo)[s*d : (s+1)*d]
				if !sameBits(gotK, x.k[l][h][p*d:(p+1)*d]) || !sameBits(gotV, x.v[l][h][p*d:(p+1)*d]) {
					t.Fatalf("%s: layer %d head %d token %d differs", what, l, h, p)
				}
			}
		}
	}
}

// checkUntouched fails unless every slot of c outside tokens [0, n) of
// the given tables still holds the sentinel.
func checkUntouched(t *testing.T, what string, c *kvcache.Cache, tables [][]int, lens []int) {
	t.Helper()
	used := make(map[[2]int]bool)
	for i, tb := range tables {
		for p := range lens[i] {
			used[[2]int{tb[p/c.BlockSize], p % c.BlockSize}] = true
		}
	}
	d := c.HeadDim
	for l := range c.Layers {
		for b := range c.NumBlocks {
			for s := range c.BlockSize {
				if used[[2]int{b, s}] {
					continue
				}
				for h := range c.KVHeads {
					for _, v := range [][]float32{c.Keys(l, b, h), c.Values(l, b, h)} {
						for _, x := range v[s*d : (s+1)*d] {
							if math.Float32bits(x) != sentinel {
								t.Fatalf("%s: layer %d block %d slot %d head %d written outside every table", what, l, b, s, h)
							}
						}
					}
				}
			}
		}
	}
}

func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// shuffledTable returns n distinct blocks drawn from free (which it
// shrinks), in random order.
func shuffledTable(rng *rand.Rand, free *[]int, n int) []int {
	f := *free
	rng.Shuffle(len(f), func(i, j int) { f[i], f[j] = f[j], f[i] })
	out := slices.Clone(f[:n])
	*free = f[n:]
	return out
}

// blocks returns 0..n-1.
func blocks(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// runAll runs every rank's part of plan p concurrently on w, rank r with
// caches src[r] and dst[r] and options opt(r), and returns the ranks'
// stats and errors, failing the test after 10 s (a deadlock).
func runAll(t testing.TB, w *comm.World, parts []migrate.RankPlan, src, dst []*kvcache.Cache, opt migrate.Options) ([]migrate.Stats, []error) {
	t.Helper()
	n := len(parts)
	sts, errs := make([]migrate.Stats, n), make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { sts[r], errs[r] = migrate.Run(ctx, w, parts[r], src[r], dst[r], opt) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("ranks still running after 10 s")
	}
	return sts, errs
}

// parts is every rank's part of p.
func parts(p *migrate.Plan) []migrate.RankPlan {
	out := make([]migrate.RankPlan, p.Ranks())
	for r := range out {
		out[r] = p.Rank(r)
	}
	return out
}

// expectedBytes is the formula: Σ over requests of the heads whose
// holder changes × layers × context × head_dim × 2 × 4, worked out from
// the groupings alone.
func expectedBytes(cfg *model.Config, from, to migrate.Grouping, reqs []migrate.Request) int64 {
	holder := func(g migrate.Grouping, grp, h int) int {
		s := g.Group(grp)
		return s.Lo + h/(cfg.KVHeads/s.Len())
	}
	var n int64
	for _, rq := range reqs {
		if rq.Waiting {
			continue
		}
		moved := 0
		for h := range cfg.KVHeads {
			if holder(from, rq.From, h) != holder(to, rq.To, h) {
				moved++
			}
		}
		n += int64(moved) * int64(cfg.Layers) * int64(rq.Len) * int64(cfg.HeadDim) * 2 * 4
	}
	return n
}

// setup is one migration ready to run: source caches filled with random
// KV through shuffled block tables, and destination tables shuffled too.
type setup struct {
	cfg          *model.Config
	spec         migrate.Spec
	plan         *migrate.Plan
	src          []*kvcache.Cache
	dstBS, dstNB int // destination block size and blocks per cache
}

// build makes a setup: in every source group one running request per
// context length in lens and waiting waiting requests, each joining a
// group of to that overlaps its own, picked at random where there is a
// choice.
func build(t testing.TB, rng *rand.Rand, cfg *model.Config, from, to migrate.Grouping, lens []int, waiting, srcBS, dstBS int) *setup {
	t.Helper()
	total := 0
	for _, n := range lens {
		total += n
	}
	// Every group's pool fits all its requests with room to spare, so
	// the shuffled tables scatter over more blocks than they use.
	srcNB := 2*len(from)*(total/srcBS+len(lens)) + 3
	s := &setup{cfg: cfg, dstBS: dstBS, dstNB: 2*len(from)*(total/dstBS+len(lens)) + 3}
	s.spec = migrate.Spec{Model: cfg, From: from, To: to}
	dstFree := make([][]int, len(to))
	for j := range dstFree {
		dstFree[j] = blocks(s.dstNB)
	}
	for r := range from.Ranks() {
		s.src = append(s.src, newCache(t, cfg, from.Heads(cfg, r).Len(), srcBS, srcNB))
	}
	id := migrate.RequestID(1)
	for g := range from {
		src := from.Group(g)
		var cands []int
		for j := range to {
			d := to.Group(j)
			if d.Lo < src.Hi && src.Lo < d.Hi {
				cands = append(cands, j)
			}
		}
		free := blocks(srcNB)
		for _, n := range lens {
			j := cands[rng.IntN(len(cands))]
			rq := migrate.Request{ID: id, From: g, To: j, Len: n,
				Src: shuffledTable(rng, &free, (n+srcBS-1)/srcBS), Dst: shuffledTable(rng, &dstFree[j], (n+dstBS-1)/dstBS)}
			x := randomKV(rng, cfg, n)
			for r := src.Lo; r < src.Hi; r++ {
				write(s.src[r], rq.Src, from.Heads(cfg, r), x, n)
			}
			s.spec.Requests = append(s.spec.Requests, rq)
			id++
		}
		for range waiting {
			s.spec.Requests = append(s.spec.Requests, migrate.Request{ID: id, From: g, To: cands[rng.IntN(len(cands))], Waiting: true})
			id++
		}
	}
	var err error
	if s.plan, err = migrate.NewPlan(s.spec); err != nil {
		t.Fatal(err)
	}
	return s
}

// freshDst returns empty (sentinel) destination caches, one per rank.
func (s *setup) freshDst(t testing.TB) []*kvcache.Cache {
	to := s.spec.To
	out := make([]*kvcache.Cache, to.Ranks())
	for r := range out {
		out[r] = newCache(t, s.cfg, to.Heads(s.cfg, r).Len(), s.dstBS, s.dstNB)
	}
	return out
}

// oracle is the destination caches a naive per-page copy produces: every
// token of every head copied on its own from the rank that holds it.
func (s *setup) oracle(t testing.TB) []*kvcache.Cache {
	out := s.freshDst(t)
	from, to, d := s.spec.From, s.spec.To, s.cfg.HeadDim
	for _, rq := range s.spec.Requests {
		src, dg := from.Group(rq.From), to.Group(rq.To)
		for r := dg.Lo; r < dg.Hi; r++ {
			holds := to.Heads(s.cfg, r)
			for h := holds.Lo; h < holds.Hi; h++ {
				sr := src.Lo + h/from.Heads(s.cfg, src.Lo).Len()
				held := from.Heads(s.cfg, sr)
				for l := range s.cfg.Layers {
					for p := range rq.Len {
						sb, db := s.src[sr].BlockSize, out[r].BlockSize
						ss, ds := p%sb*d, p%db*d
						copy(out[r].Keys(l, rq.Dst[p/db], h-holds.Lo)[ds:ds+d], s.src[sr].Keys(l, rq.Src[p/sb], h-held.Lo)[ss:ss+d])
						copy(out[r].Values(l, rq.Dst[p/db], h-holds.Lo)[ds:ds+d], s.src[sr].Values(l, rq.Src[p/sb], h-held.Lo)[ss:ss+d])
					}
				}
			}
		}
	}
	return out
}

// sameCaches fails unless a and b hold the same bits, rank by rank.
func sameCaches(t *testing.T, what string, a, b []*kvcache.Cache) {
	t.Helper()
	for r := range a {
		if !slices.Equal(snapshot(a[r]), snapshot(b[r])) {
			t.Fatalf("%s: rank %d's cache differs", what, r)
		}
	}
}
