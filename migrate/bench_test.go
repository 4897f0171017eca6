package migrate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/migrate"
)

// benchCase is one request of a Llama-3.1-8B-shaped KV (8 KV heads, head
// dim 128) on rank 0 of two TP1 ranks, merged into one TP2 group: rank 0
// keeps heads 0–3 and sends heads 4–7 to rank 1 (spec Fig 7's setting).
type benchCase struct {
	w        *comm.World
	ps       []migrate.RankPlan
	src, dst []*kvcache.Cache
	moved    int64 // bytes crossing ranks
}

func newBenchCase(b *testing.B, tokens, layers, blockSize int) *benchCase {
	b.Helper()
	cfg := geom(layers, 8, 128)
	rng := rand.New(rand.NewPCG(uint64(tokens), uint64(blockSize)))
	nb := (tokens + blockSize - 1) / blockSize
	cache := func(heads, blocks int) *kvcache.Cache {
		c, err := kvcache.New(kvcache.Layout{Layers: layers, KVHeads: heads, HeadDim: 128, BlockSize: blockSize, NumBlocks: blocks})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	from, to := migrate.Grouping{1, 1}, migrate.Grouping{2}
	src := []*kvcache.Cache{cache(8, nb), cache(8, 1)}
	for l := range layers {
		for blk := range nb {
			for h := range 8 {
				for _, v := range [][]float32{src[0].Keys(l, blk, h), src[0].Values(l, blk, h)} {
					for i := range v {
						v[i] = float32(i ^ blk ^ h)
					}
				}
			}
		}
	}
	free := blocks(nb)
	rq := migrate.Request{ID: 1, From: 0, To: 0, Len: tokens, Src: shuffledTable(rng, &free, nb)}
	free = blocks(nb)
	rq.Dst = shuffledTable(rng, &free, nb)
	p, err := migrate.NewPlan(migrate.Spec{Model: cfg, From: from, To: to, Requests: []migrate.Request{rq}})
	if err != nil {
		b.Fatal(err)
	}
	w, err := comm.NewWorld(2)
	if err != nil {
		b.Fatal(err)
	}
	return &benchCase{w: w, ps: parts(p), src: src, dst: []*kvcache.Cache{cache(4, nb), cache(4, nb)}, moved: p.MovedBytes()}
}

// run migrates once on both ranks.
func (c *benchCase) run(b *testing.B, opt migrate.Options) int {
	var wg sync.WaitGroup
	var sts [2]migrate.Stats
	var errs [2]error
	for r := range 2 {
		wg.Go(func() { sts[r], errs[r] = migrate.Run(context.Background(), c.w, c.ps[r], c.src[r], c.dst[r], opt) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	return sts[0].Messages
}

// BenchmarkMigrate is Fig 7 on CPU ranks: migrating the KV of 4,096 and
// 40,960 tokens from TP1 to TP2 on two ranks, pipelined (two staging
// buffers), unpipelined (one) and one message per page (the
// cudaMemcpyAsync-per-page baseline), with pages of 1 and 16 tokens.
// 40,960 tokens use 4 layers instead of 32 to fit in memory; time scales
// with layers, so ×8 gives the 32-layer figure. wireGB/s is bytes sent
// to the peer per second; the heads rank 0 keeps are copied within it in
// the same time.
func BenchmarkMigrate(b *testing.B) {
	for _, sz := range []struct{ tokens, layers int }{{4096, 32}, {40960, 4}} {
		for _, bs := range []int{1, 16} {
			var c *benchCase
			for _, mode := range []migrate.Mode{migrate.Pipelined, migrate.Unpipelined, migrate.PerPage} {
				b.Run(fmt.Sprintf("tokens=%d/layers=%d/block=%d/%s", sz.tokens, sz.layers, bs, mode), func(b *testing.B) {
					if c == nil {
						c = newBenchCase(b, sz.tokens, sz.layers, bs)
					}
					opt := migrate.Options{Mode: mode}
					msgs := c.run(b, opt) // touches the destination pages
					b.SetBytes(c.moved)
					for b.Loop() {
						c.run(b, opt)
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(c.moved)/sec/1e9, "wireGB/s")
					b.ReportMetric(sec*1e3, "ms/migration")
					b.ReportMetric(float64(msgs), "msgs/migration")
				})
			}
		}
	}
}

// BenchmarkStaging sweeps the staging buffer size of the pipelined mode
// (4,096 tokens, 8 layers, pages of 16 tokens).
func BenchmarkStaging(b *testing.B) {
	var c *benchCase
	for _, kib := range []int{16, 64, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("KiB=%d", kib), func(b *testing.B) {
			if c == nil {
				c = newBenchCase(b, 4096, 8, 16)
			}
			opt := migrate.Options{StagingBytes: kib << 10}
			c.run(b, opt)
			b.SetBytes(c.moved)
			for b.Loop() {
				c.run(b, opt)
			}
		})
	}
}
