package cpuexec

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// sidpPlans are the plans SiDP is tested under.
var sidpPlans = []string{"dp=2", "dp=4", "dp=2,tp=2", "dp=3"}

// loadSiDPFixture is a 6-layer model (cycles of 2 and 3 layers, one and a
// half of 4) with MLP biases, so pooled layers carry every kind of MLP
// tensor.
func loadSiDPFixture(t testing.TB) *model.Model {
	t.Helper()
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Heads: 4, KVHeads: 2, Layers: 6, Intermediate: 96, MLPBias: true, Seed: 17})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.Options{DType: model.Float32})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sidpPlacement(t testing.TB, plan parallel.Plan, mode parallel.FFNMode) parallel.Placement {
	t.Helper()
	p, err := parallel.SiDPPlacement(plan, mode)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mixedSteps is a run of steps over 2·dp sequences on dp replicas in
// which each step carries a random subset of the sequences (prefill
// chunks of 1–9 tokens, then single decodes), so replicas are busy, idle
// (dummy) or lightly loaded in every mix; every token of a step wants
// logits.
type mixedSteps struct {
	seqs    []*seqState
	rep     []int
	rng     *rand.Rand
	pending [][2]int // the last step's (sequence, tokens)
}

func newMixedSteps(vocab, replicas int, seed uint64) *mixedSteps {
	ms := &mixedSteps{rng: rand.New(rand.NewPCG(seed, 7))}
	next := make([]int, replicas)
	for i := range 2 * replicas {
		s := &seqState{tokens: fixture.Tokens(300+i, 40, vocab)}
		rep := i % replicas
		for range 12 {
			s.blocks = append(s.blocks, next[rep])
			next[rep]++
		}
		ms.seqs = append(ms.seqs, s)
		ms.rep = append(ms.rep, rep)
	}
	return ms
}

// next draws a step: each sequence joins with probability ½ (at least
// one does), with a chunk of up to 9 tokens while it has some left.
func (ms *mixedSteps) next() forward.Batch {
	var b forward.Batch
	ms.pending = ms.pending[:0]
	for len(b.Seqs) == 0 {
		for i, s := range ms.seqs {
			left := len(s.tokens) - s.done
			if left == 0 || ms.rng.IntN(2) == 0 {
				continue
			}
			n := min(left, 1+ms.rng.IntN(9))
			ms.pending = append(ms.pending, [2]int{i, n})
			b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: s.tokens[s.done : s.done+n], Pos: s.done, Blocks: s.blocks, NumLogits: n, Replica: ms.rep[i]})
		}
	}
	return b
}

// advance records the last step's tokens as cached.
func (ms *mixedSteps) advance() {
	for _, p := range ms.pending {
		ms.seqs[p[0]].done += p[1]
	}
}

// replicaRows are the tokens of each replica in b.
func replicaRows(b forward.Batch, replicas int) []int {
	rows := make([]int, replicas)
	for _, s := range b.Seqs {
		rows[s.Replica] += len(s.Tokens)
	}
	return rows
}

// ffnLayerBytes is the stored bytes of layer l's MLP slice at TP index tp.
func ffnLayerBytes(e *Executor, p parallel.Placement, tp, l int) int64 {
	for r, c := range p.Coords {
		if c.TP == tp && c.DP == p.FFNOwner(l) {
			w := e.held[p.Name].shards[r].Layers[l]
			return int64(w.WGate.Bytes() + w.WUp.Bytes() + w.WDown.Bytes())
		}
	}
	panic("no owner")
}

// withWatchdog runs a step under a deadline, so a deadlock fails the
// test instead of hanging it.
func withWatchdog(t *testing.T, f func(ctx context.Context) ([]float32, error)) []float32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := f(ctx)
	if err != nil {
		t.Fatalf("step: %v (deadline: %v)", err, ctx.Err())
	}
	return out
}

// TestSiDPShards is C1 on the executor: each rank holds the MLP of the
// layers its replica owns and nothing of the others', its weight bytes
// are parallel's accounting, and plain DP's minus the non-owned layers.
func TestSiDPShards(t *testing.T) {
	m := loadSiDPFixture(t)
	for _, ps := range sidpPlans {
		plan, _ := parallel.Parse(ps)
		p := sidpPlacement(t, plan, parallel.FFNWaS)
		e, err := NewExecutor(m.Config, m.Weights, Options{Placements: []parallel.Placement{p}, BlockSize: 4, NumBlocks: 8})
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := NewExecutor(m.Config, m.Weights, Options{Plan: plan, BlockSize: 4, NumBlocks: 8})
		dpBytes := plain.WeightBytes()
		for r, got := range e.WeightBytes() {
			if want := 4 * p.WeightElems(m.Config, r); got != want {
				t.Errorf("%s rank %d: %d weight bytes, accounting says %d", ps, r, got, want)
			}
			freed := int64(0)
			for l := 0; l < m.Config.Layers; l++ {
				w := e.held[p.Name].shards[r].Layers[l]
				own := p.FFNOwner(l) == p.Coords[r].DP
				if (w.WGate != nil) != own || (w.WUp != nil) != own || (w.WDown != nil) != own {
					t.Errorf("%s rank %d layer %d: holds MLP %v, owner %v", ps, r, l, w.WGate != nil, own)
				}
				if !own {
					freed += ffnLayerBytes(e, p, p.Coords[r].TP, l)
				}
			}
			if dpBytes[r]-got != freed {
				t.Errorf("%s rank %d: %d bytes below plain DP, the non-owned MLPs are %d", ps, r, dpBytes[r]-got, freed)
			}
		}
	}
}

// runSiDP runs the same random steps under plain DP and under SiDP with
// the mode mode(step) and calls check with each step's logits (plain DP's
// and SiDP's), batch and traffic.
func runSiDP(t *testing.T, m *model.Model, plan parallel.Plan, steps int, mode func(step int) parallel.FFNMode,
	check func(step int, b forward.Batch, want, got []float32, traffic comm.Stats, e *Executor, p parallel.Placement)) {
	t.Helper()
	pool := tensor.NewPool(2)
	defer pool.Close()
	was, cas := sidpPlacement(t, plan, parallel.FFNWaS), sidpPlacement(t, plan, parallel.FFNCaS)
	plain, err := NewExecutor(m.Config, m.Weights, Options{Plan: plan, BlockSize: 4, NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewExecutor(m.Config, m.Weights, Options{Placements: []parallel.Placement{was}, BlockSize: 4, NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	ms := newMixedSteps(m.Config.Vocab, plan.DP, 42)
	for i := range steps {
		b := ms.next()
		want := withWatchdog(t, func(ctx context.Context) ([]float32, error) { return plain.Step(ctx, &b, parallel.Standard(plan)) })
		want = append([]float32(nil), want...)
		p := was
		if mode(i) == parallel.FFNCaS {
			p = cas
		}
		before := e.CommStats()
		got := withWatchdog(t, func(ctx context.Context) ([]float32, error) { return e.Step(ctx, &b, p) })
		check(i, b, want, got, e.CommStats().Sub(before), e, p)
		ms.advance()
	}
}

// sidpTraffic splits a step's traffic by rank into SiDP reads, SiDP
// sends and receives, and everything else outside the TP groups.
func sidpTraffic(s comm.Stats, rank int) (read, sent, recv comm.Counter, other int64) {
	for k, c := range s {
		switch {
		case k.Rank != rank:
		case strings.HasPrefix(k.Group, "sidp") && k.Kind == comm.KindRead:
			read = read.Add(c)
		case strings.HasPrefix(k.Group, "sidp") && k.Kind == comm.KindSend:
			sent = sent.Add(c)
		case strings.HasPrefix(k.Group, "sidp") && k.Kind == comm.KindRecv:
			recv = recv.Add(c)
		case !strings.HasPrefix(k.Group, "tp"):
			other += c.Calls
		}
	}
	return read, sent, recv, other
}

// TestSiDPWaS is C2 and C6 for WaS: over random per-replica batch mixes
// (idle replicas included), logits are bit-identical to plain DP's (one
// rank running each replica's batch, with the same kernels), and every
// step's reads are in(r) = Σ_{o(l)≠r} F_l/TP for every busy rank and
// out(o) = readers·Σ_{o(l)=o} F_l/TP, with no other traffic.
func TestSiDPWaS(t *testing.T) {
	m := loadSiDPFixture(t)
	for _, ps := range sidpPlans {
		t.Run(ps, func(t *testing.T) {
			plan, _ := parallel.Parse(ps)
			runSiDP(t, m, plan, 12, func(int) parallel.FFNMode { return parallel.FFNWaS },
				func(step int, b forward.Batch, want, got []float32, traffic comm.Stats, e *Executor, p parallel.Placement) {
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("step %d logit %d: %g, plain DP %g", step, i, got[i], want[i])
						}
					}
					rows := replicaRows(b, plan.DP)
					for r, c := range p.Coords {
						var in, out int64
						for l := 0; l < m.Config.Layers; l++ {
							f := ffnLayerBytes(e, p, c.TP, l)
							if p.FFNOwner(l) != c.DP && rows[c.DP] > 0 {
								in += f
							}
							if p.FFNOwner(l) == c.DP {
								for d, n := range rows {
									if d != c.DP && n > 0 {
										out += f
									}
								}
							}
						}
						read, sent, recv, other := sidpTraffic(traffic, r)
						if read.RecvBytes != in || read.SentBytes != out || sent.Calls+recv.Calls+other != 0 {
							t.Fatalf("step %d rank %d (rows %v): read in %d out %d, want %d and %d; sends %d receives %d other calls %d",
								step, r, rows, read.RecvBytes, read.SentBytes, in, out, sent.Calls, recv.Calls, other)
						}
					}
				})
		})
	}
}

// maxRelDiff is max |got−want| / max |want| over the logits.
func maxRelDiff(got, want []float32) float64 {
	maxAbs, maxDiff := 0.0, 0.0
	for i := range want {
		maxAbs = math.Max(maxAbs, math.Abs(float64(want[i])))
		maxDiff = math.Max(maxDiff, math.Abs(float64(got[i])-float64(want[i])))
	}
	return maxDiff / maxAbs
}

// TestSiDPCaS is C3, C5 and C6 for CaS: logits within 1e-5 (relative to
// the largest logit) of plain DP's with the same argmax; every busy
// non-owner sends and receives b_r·hidden·4 bytes per non-owned layer and
// nothing else; the owner receives the busy peers' rows, runs one fused
// chain of M = Σ busy b_r rows per layer it owns (a dummy owner too), and
// dummy ranks move nothing and run no MLP.
func TestSiDPCaS(t *testing.T) {
	m := loadSiDPFixture(t)
	h := int64(m.Config.Hidden)
	for _, ps := range sidpPlans {
		t.Run(ps, func(t *testing.T) {
			plan, _ := parallel.Parse(ps)
			worst := 0.0
			dummyOwners := 0 // layers served by an owner with no tokens of its own
			var prev []SiDPStats
			runSiDP(t, m, plan, 12, func(int) parallel.FFNMode { return parallel.FFNCaS },
				func(step int, b forward.Batch, want, got []float32, traffic comm.Stats, e *Executor, p parallel.Placement) {
					v := m.Config.Vocab
					for r := 0; r < len(want)/v; r++ {
						if tensor.MaxIndex(got[r*v:(r+1)*v]) != tensor.MaxIndex(want[r*v:(r+1)*v]) {
							t.Fatalf("step %d row %d: argmax differs from plain DP", step, r)
						}
					}
					d := maxRelDiff(got, want)
					worst = max(worst, d)
					if d > 1e-5 {
						t.Fatalf("step %d: max relative difference %.3g from plain DP", step, d)
					}
					stats := e.SiDPStats()
					if prev == nil {
						prev = make([]SiDPStats, len(stats))
					}
					rows := replicaRows(b, plan.DP)
					for r, c := range p.Coords {
						var sendWant, recvWant, fusedRows, fused int64
						for l := 0; l < m.Config.Layers; l++ {
							o := p.FFNOwner(l)
							if o != c.DP && rows[c.DP] > 0 {
								sendWant += int64(rows[c.DP]) * h * 4
								recvWant += int64(rows[c.DP]) * h * 4
							}
							if o != c.DP {
								continue
							}
							peers, total := int64(0), int64(0)
							for d, n := range rows {
								total += int64(n)
								if d != o {
									peers += int64(n)
								}
							}
							if peers > 0 {
								if rows[o] == 0 {
									dummyOwners++
								}
								fused++
								fusedRows += total
								sendWant += peers * h * 4
								recvWant += peers * h * 4
							}
						}
						read, sent, recv, other := sidpTraffic(traffic, r)
						if sent.SentBytes != sendWant || recv.RecvBytes != recvWant || read.Calls+other != 0 {
							t.Fatalf("step %d rank %d (rows %v): sent %d received %d, want %d and %d; reads %d other calls %d",
								step, r, rows, sent.SentBytes, recv.RecvBytes, sendWant, recvWant, read.Calls, other)
						}
						dFused, dRows := stats[r].FusedMLPs-prev[r].FusedMLPs, stats[r].FusedRows-prev[r].FusedRows
						if dFused != fused || dRows != fusedRows {
							t.Fatalf("step %d rank %d (rows %v): %d fused chains of %d rows, want %d of %d", step, r, rows, dFused, dRows, fused, fusedRows)
						}
						if rows[c.DP] == 0 && stats[r].LocalMLPs != prev[r].LocalMLPs {
							t.Fatalf("step %d rank %d: dummy ran %d MLPs", step, r, stats[r].LocalMLPs-prev[r].LocalMLPs)
						}
					}
					prev = stats
				})
			if dummyOwners == 0 {
				t.Fatal("no step had an idle owner serving its peers")
			}
			t.Logf("%s: CaS logits within %.3g of plain DP; %d layers served by idle owners", ps, worst, dummyOwners)
		})
	}
}

// TestCaSRowsDependOnM states why CaS is not bit-exact: the same row
// multiplied alone (m = 1, one dot per output) and inside a stack of 8
// rows (gemv's 512-long k pieces) or 40 (the packed GEMM) is not always
// rounded the same.
func TestCaSRowsDependOnM(t *testing.T) {
	const n, k = 64, 1536
	rng := rand.New(rand.NewPCG(1, 2))
	w := make([]float32, n*k)
	x := make([]float32, 40*k)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	wt := tensor.NewWeightsF32(w, n, k)
	alone := make([]float32, n)
	tensor.MatMulW(nil, alone, x[:k], wt, 1)
	for _, m := range []int{8, 40} {
		y := make([]float32, m*n)
		tensor.MatMulW(nil, y, x[:m*k], wt, m)
		same := true
		for j := range alone {
			same = same && alone[j] == y[j]
		}
		if same {
			t.Errorf("row 0 at m = %d is bit-identical to m = 1: CaS could be exact", m)
		}
	}
}

// TestSiDPSwitching is C4: forced WaS⇄CaS switches at random steps
// (prefill chunks and decodes, idle replicas) give tokens equal to the
// all-WaS run's, with a watchdog on every step.
func TestSiDPSwitching(t *testing.T) {
	m := loadSiDPFixture(t)
	for _, ps := range []string{"dp=2", "dp=4", "dp=2,tp=2"} {
		t.Run(ps, func(t *testing.T) {
			plan, _ := parallel.Parse(ps)
			rng := rand.New(rand.NewPCG(0x9E3779B97F4A7C15*uint64(plan.DP), 0xBF58476D1CE4E5B9))
			modes := make([]parallel.FFNMode, 16)
			for i := range modes {
				modes[i] = parallel.FFNWaS
				if rng.IntN(2) == 1 {
					modes[i] = parallel.FFNCaS
				}
			}
			switches := 0
			runSiDP(t, m, plan, len(modes), func(i int) parallel.FFNMode { return modes[i] },
				func(step int, b forward.Batch, want, got []float32, _ comm.Stats, _ *Executor, _ parallel.Placement) {
					if step > 0 && modes[step] != modes[step-1] {
						switches++
					}
					v := m.Config.Vocab
					for r := 0; r < len(want)/v; r++ {
						if tensor.MaxIndex(got[r*v:(r+1)*v]) != tensor.MaxIndex(want[r*v:(r+1)*v]) {
							t.Fatalf("step %d (%s) row %d: token differs from WaS/plain DP", step, modes[step], r)
						}
					}
				})
			if switches < 4 {
				t.Fatalf("only %d switches drawn", switches)
			}
		})
	}
}

// TestWaSSlots is C8: with random delays injected into copies and into
// the MLPs that use the slots, at most k slots are ever taken, a slot is
// refilled only after the MLP that used it finished, each layer is used
// from the slot its copy landed in, and outputs stay bit-identical (run
// with -race to also check the memory accesses).
func TestWaSSlots(t *testing.T) {
	m := loadSiDPFixture(t)
	plan, _ := parallel.Parse("dp=4")
	p := sidpPlacement(t, plan, parallel.FFNWaS)
	for _, k := range []int{3, 5} {
		e, err := NewExecutor(m.Config, m.Weights, Options{Placements: []parallel.Placement{p}, BlockSize: 4, NumBlocks: 64, SiDPSlots: k})
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := NewExecutor(m.Config, m.Weights, Options{Plan: plan, BlockSize: 4, NumBlocks: 64})
		var mu sync.Mutex
		type slotState struct {
			layer int
			state slotEvent
			taken bool
		}
		states := map[[2]int]*slotState{}
		taken := make([]int, len(p.Coords))
		fetched := make([][]int, len(p.Coords)) // each rank's reservations of the current step, in order
		var failure string
		rng := rand.New(rand.NewPCG(3, uint64(k)))
		sleep := func() {
			mu.Lock()
			d := time.Duration(rng.IntN(300)) * time.Microsecond
			mu.Unlock()
			time.Sleep(d)
		}
		e.fetchDelay = func(int, int) { sleep() }
		e.slotHook = func(rank int, ev slotEvent, slot, layer int) {
			mu.Lock()
			s := states[[2]int{rank, slot}]
			if s == nil {
				s = &slotState{state: slotReleased}
				states[[2]int{rank, slot}] = s
			}
			bad := func(msg string) {
				if failure == "" {
					failure = fmt.Sprintf("rank %d slot %d layer %d: %s (was %d for layer %d)", rank, slot, layer, msg, s.state, s.layer)
				}
			}
			switch ev {
			case slotReserved:
				fetched[rank] = append(fetched[rank], layer)
				if s.taken {
					bad("reserved while taken")
				}
				s.taken, s.layer = true, layer
				taken[rank]++
				if taken[rank] > k {
					bad(fmt.Sprintf("%d slots taken", taken[rank]))
				}
			case slotFilled:
				if s.state != slotReserved || s.layer != layer {
					bad("filled out of order")
				}
			case slotInUse:
				if s.state != slotFilled || s.layer != layer {
					bad("used before its copy landed")
				}
			case slotReleased:
				if s.state != slotInUse || s.layer != layer {
					bad("released before use")
				}
				s.taken = false
				taken[rank]--
			}
			s.state = ev
			mu.Unlock()
			if ev == slotInUse {
				sleep() // the MLP holds the slot a while
			}
		}
		ms := newMixedSteps(m.Config.Vocab, plan.DP, 5)
		for i := range 6 {
			b := ms.next()
			want := withWatchdog(t, func(ctx context.Context) ([]float32, error) { return plain.Step(ctx, &b, parallel.Standard(plan)) })
			want = append([]float32(nil), want...)
			for r := range fetched {
				fetched[r] = fetched[r][:0]
			}
			got := withWatchdog(t, func(ctx context.Context) ([]float32, error) { return e.Step(ctx, &b, p) })
			for j := range want {
				if got[j] != want[j] {
					t.Fatalf("k=%d step %d: logit %d differs from plain DP", k, i, j)
				}
			}
			// Busy ranks fetched in the peak-shifted order, idle ones nothing.
			rows := replicaRows(b, plan.DP)
			for r, c := range p.Coords {
				want := []int(nil)
				if rows[c.DP] > 0 {
					want = parallel.PrefetchOrder(m.Config.Layers, plan.DP, c.DP, true)
				}
				if !slices.Equal(fetched[r], want) {
					t.Fatalf("k=%d step %d rank %d (rows %v): fetched %v, want %v", k, i, r, rows, fetched[r], want)
				}
			}
			ms.advance()
		}
		if failure != "" {
			t.Fatalf("k=%d: %s", k, failure)
		}
		for r, n := range taken {
			if n != 0 {
				t.Errorf("k=%d rank %d: %d slots still taken after the steps", k, r, n)
			}
		}
	}
	e, _ := NewExecutor(m.Config, m.Weights, Options{Placements: []parallel.Placement{p}, BlockSize: 4, NumBlocks: 8, SiDPSlots: 2})
	b := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: []int{1, 2}, Blocks: []int{0}, NumLogits: 1, Replica: 1}}}
	if _, err := e.Step(context.Background(), &b, p); err == nil || !strings.Contains(err.Error(), "slots") {
		t.Fatalf("2 slots at dp=4: %v, want a refusal", err)
	}
}

// TestWaSNoAllocs is C8's allocation check: one micro-batch's prefetch
// path (reserve a slot, copy, count the read, hand the slot over, free
// it, stop) allocates nothing but the housekeeper goroutine's start.
func TestWaSNoAllocs(t *testing.T) {
	m := loadSiDPFixture(t)
	plan, _ := parallel.Parse("dp=2")
	p := sidpPlacement(t, plan, parallel.FFNWaS)
	e, _ := NewExecutor(m.Config, m.Weights, Options{Placements: []parallel.Placement{p}, BlockSize: 4, NumBlocks: 8})
	b := forward.Batch{Seqs: []forward.SeqBatch{
		{Tokens: []int{5}, Pos: 3, Blocks: []int{0}, NumLogits: 1, Replica: 0},
		{Tokens: []int{6}, Pos: 3, Blocks: []int{0}, NumLogits: 1, Replica: 1}}}
	if _, err := e.Step(context.Background(), &b, p); err != nil {
		t.Fatal(err)
	}
	rk := e.ranks[1]
	c := rk.was
	ctx := context.Background()
	before := e.SiDPStats()[1].Fetches
	n := testing.AllocsPerRun(50, func() {
		c.start(ctx, rk)
		for _, l := range c.order {
			s := <-c.filled[l]
			c.free <- s
		}
		c.stop()
	})
	if got := e.SiDPStats()[1].Fetches - before; got != 51*int64(len(c.order)) {
		t.Fatalf("%d fetches, want %d", got, 51*len(c.order))
	}
	if n > 1 {
		t.Fatalf("prefetch path allocates %.0f per micro-batch", n)
	}
}

// TestSiDPWeightFormats: WaS copies BF16 checkpoint matrices (viewed in
// place) and Q8_0-quantized ones as stored, so its logits stay
// bit-identical to plain DP's in those formats too; CaS stays within
// float32 rounding of them (Q8_0's activation quantization at m ≤ 32
// depends on each row alone).
func TestSiDPWeightFormats(t *testing.T) {
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Heads: 4, KVHeads: 2, Layers: 4, Intermediate: 96, DType: "BF16", Seed: 23})
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []model.Options{{}, {Quantization: model.Int8}} {
		m, err := model.Load(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := m.Weights.MatrixDType()
		plan, _ := parallel.Parse("dp=2")
		for _, mode := range []parallel.FFNMode{parallel.FFNWaS, parallel.FFNCaS} {
			runSiDP(t, m, plan, 6, func(int) parallel.FFNMode { return mode },
				func(step int, _ forward.Batch, want, got []float32, _ comm.Stats, _ *Executor, _ parallel.Placement) {
					if mode == parallel.FFNWaS {
						for i := range want {
							if got[i] != want[i] {
								t.Fatalf("%s WaS step %d: logit %d %g, plain DP %g", d, step, i, got[i], want[i])
							}
						}
					} else if r := maxRelDiff(got, want); r > 1e-5 {
						t.Fatalf("%s CaS step %d: %.3g from plain DP", d, step, r)
					}
				})
		}
		m.Close()
	}
}

// TestSiDPFailure: a rank failing mid-step under WaS or CaS, or a context
// cancelled there, ends the step promptly with that error on every rank
// (no housekeeper or peer left waiting), and the next step is correct.
func TestSiDPFailure(t *testing.T) {
	m := loadSiDPFixture(t)
	plan, _ := parallel.Parse("dp=2,tp=2")
	boom := fmt.Errorf("kernel failed")
	before := runtime.NumGoroutine()
	for _, mode := range []parallel.FFNMode{parallel.FFNWaS, parallel.FFNCaS} {
		p := sidpPlacement(t, plan, mode)
		was := sidpPlacement(t, plan, parallel.FFNWaS)
		e, err := NewExecutor(m.Config, m.Weights, Options{Placements: []parallel.Placement{was}, BlockSize: 4, NumBlocks: 64})
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := NewExecutor(m.Config, m.Weights, Options{Plan: plan, BlockSize: 4, NumBlocks: 64})
		ctx, cancel := context.WithCancel(context.Background())
		for _, fail := range []func(r, l int) error{
			func(r, l int) error {
				if r == 3 && l == 3 {
					return boom
				}
				return nil
			},
			func(r, l int) error {
				if r == 0 && l == 4 {
					cancel()
				}
				return nil
			},
		} {
			e.fault = func(_ context.Context, r, l int) error { return fail(r, l) }
			ms := newMixedSteps(m.Config.Vocab, plan.DP, 11)
			b := forward.Batch{Seqs: []forward.SeqBatch{
				{Tokens: ms.seqs[0].tokens[:7], Blocks: ms.seqs[0].blocks, NumLogits: 1, Replica: 0},
				{Tokens: ms.seqs[1].tokens[:5], Blocks: ms.seqs[1].blocks, NumLogits: 1, Replica: 1}}}
			start := time.Now()
			_, err := e.Step(ctx, &b, p)
			if err == nil || (!errors.Is(err, boom) && !errors.Is(err, context.Canceled)) {
				t.Fatalf("%s: failed step: %v", mode, err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("%s: failed step took %v", mode, d)
			}
			e.fault = nil
			want, _ := plain.Step(context.Background(), &b, parallel.Standard(plan))
			want = append([]float32(nil), want...)
			got, err := e.Step(context.Background(), &b, p)
			if err != nil {
				t.Fatalf("%s: step after the failure: %v", mode, err)
			}
			if r := maxRelDiff(got, want); r > 1e-5 {
				t.Fatalf("%s: %.3g from plain DP after the failure", mode, r)
			}
		}
		cancel()
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines left behind", n-before)
	}
}

// TestSiDPEveryMix runs one step for every non-empty set of busy replicas
// on dp=3 and dp=4 (dp=4 has a replica owning only one of the 6 layers
// and a partial cycle), under WaS and CaS, each under the watchdog: no
// mix deadlocks, WaS equals plain DP bit for bit (and one rank holding
// the whole model, for a single busy replica) and CaS within 1e-5.
func TestSiDPEveryMix(t *testing.T) {
	m := loadSiDPFixture(t)
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, dp := range []int{3, 4} {
		plan := parallel.Plan{DP: dp, PP: 1, SP: 1, TP: 1}
		was := sidpPlacement(t, plan, parallel.FFNWaS)
		plain, _ := NewExecutor(m.Config, m.Weights, Options{Plan: plan, BlockSize: 4, NumBlocks: 64, Pool: pool})
		single, _ := NewExecutor(m.Config, m.Weights, Options{BlockSize: 4, NumBlocks: 64, Pool: pool})
		e, _ := NewExecutor(m.Config, m.Weights, Options{Placements: []parallel.Placement{was}, BlockSize: 4, NumBlocks: 64, Pool: pool})
		for _, mode := range []parallel.FFNMode{parallel.FFNWaS, parallel.FFNCaS} {
			p := sidpPlacement(t, plan, mode)
			for set := 1; set < 1<<dp; set++ {
				var b forward.Batch
				for r := range dp {
					if set&(1<<r) != 0 {
						// A fresh 1+r-token prompt in blocks of its own per (mode, set).
						blk := 2 * (set + (1<<dp)*int(mode))
						b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: fixture.Tokens(set*8+r, 1+r, m.Config.Vocab),
							Blocks: []int{blk % 64}, NumLogits: 1, Replica: r})
					}
				}
				want := withWatchdog(t, func(ctx context.Context) ([]float32, error) { return plain.Step(ctx, &b, parallel.Standard(plan)) })
				want = append([]float32(nil), want...)
				got := withWatchdog(t, func(ctx context.Context) ([]float32, error) { return e.Step(ctx, &b, p) })
				if d := maxRelDiff(got, want); (mode == parallel.FFNWaS && d != 0) || d > 1e-5 {
					t.Fatalf("dp=%d %s busy set %b: %.3g from plain DP", dp, mode, set, d)
				}
				if len(b.Seqs) == 1 && mode == parallel.FFNWaS { // C2 literally: one rank holding the whole model, same batch
					one := forward.Batch{Seqs: []forward.SeqBatch{b.Seqs[0]}}
					one.Seqs[0].Replica = 0
					ref, err := single.Step(context.Background(), &one, parallel.Standard(parallel.Single))
					if err != nil {
						t.Fatal(err)
					}
					if d := maxRelDiff(got, ref); d != 0 {
						t.Fatalf("dp=%d WaS busy set %b: %.3g from one rank", dp, set, d)
					}
				}
			}
		}
	}
}
