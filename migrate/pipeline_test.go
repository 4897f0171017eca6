package migrate_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/migrate"
)

// bufWatch counts, per (rank, peer, buffer), the fills and the completed
// sends, and checks at every fill that the buffer's previous send has
// completed.
type bufWatch struct {
	mu         sync.Mutex
	fills      map[[3]int]int
	sent       map[[3]int]int
	violations atomic.Int64 // fills of a buffer whose send was in flight
	overlaps   atomic.Int64 // fills while the other buffer was in flight
}

func (b *bufWatch) fill(rank, peer, buf int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, other := [3]int{rank, peer, buf}, [3]int{rank, peer, 1 - buf}
	if b.fills[k] != b.sent[k] {
		b.violations.Add(1)
	}
	if b.fills[other] > b.sent[other] {
		b.overlaps.Add(1)
	}
	b.fills[k]++
}

func (b *bufWatch) done(rank, peer, buf int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sent[[3]int{rank, peer, buf}]++
}

// C4: random delays in packing and sending never let a buffer be
// refilled while its send is in flight, the two buffers do overlap, and
// the output is unchanged.
func TestDoubleBuffering(t *testing.T) {
	cfg := geom(2, 8, 4)
	rng := rand.New(rand.NewPCG(4, 4))
	s := build(t, rng, cfg, migrate.Grouping{1, 1, 1, 1}, migrate.Grouping{4}, []int{0, 9, 23}, 0, 4, 1)
	want := s.oracle(t)
	w, err := comm.NewWorld(4)
	if err != nil {
		t.Fatal(err)
	}
	var dmu sync.Mutex
	delay := func() {
		dmu.Lock()
		d := rng.IntN(3) * 20
		dmu.Unlock()
		time.Sleep(time.Duration(d) * time.Microsecond)
	}
	for _, mode := range []migrate.Mode{migrate.Pipelined, migrate.Unpipelined} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			b := &bufWatch{fills: map[[3]int]int{}, sent: map[[3]int]int{}}
			hooks := &migrate.Hooks{
				Fill: func(rank, peer, buf int) { b.fill(rank, peer, buf); delay() },
				Send: func(int, int, int) { delay() },
				Sent: b.done,
			}
			dst := s.freshDst(t)
			sts, errs := runAll(t, w, parts(s.plan), s.src, dst, migrate.Options{Mode: mode, StagingBytes: 4 * 13, Hooks: hooks})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			fills, msgs := 0, 0
			for _, n := range b.fills {
				fills += n
			}
			for _, st := range sts {
				msgs += st.Messages
			}
			if fills != msgs || fills < 100 {
				t.Fatalf("%d fills for %d messages", fills, msgs)
			}
			if v := b.violations.Load(); v != 0 {
				t.Fatalf("%d fills of a buffer whose send was in flight", v)
			}
			sameCaches(t, "with delays", dst, want)
			o := b.overlaps.Load()
			if mode == migrate.Pipelined && o == 0 {
				t.Fatal("no buffer was filled while the other was in flight")
			}
			if mode == migrate.Unpipelined && o != 0 {
				t.Fatalf("%d overlapping fills with one buffer", o)
			}
		})
	}
}
