package cpuexec

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// prefillStep is one sequence of n tokens with no logits, so only the
// layers' collectives (and the embedding's) move data.
func prefillStep(n, vocab int) forward.Batch {
	blocks := make([]int, (n+3)/4)
	for i := range blocks {
		blocks[i] = i
	}
	return forward.Batch{Seqs: []forward.SeqBatch{{Tokens: fixture.Tokens(5, n, vocab), Blocks: blocks}}}
}

// TestCommVolume holds the bytes the executor's collectives count to the
// formulas of paper 000's Table 2: per layer TP all-reduces 2·2(t−1)/t·n·d
// elements per rank, Ulysses SP all-to-alls (s−1)/s of the q, k, v and
// attention-output buffers, which for MHA at s = P is 1/P of TP's volume.
func TestCommVolume(t *testing.T) {
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Heads: 8, KVHeads: 8, Layers: 3, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.Options{DType: model.Float32}) // fp32 explicitly: the float32 path's exact equivalences
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
	const n = 64
	d := float64(c.Hidden)
	layers := float64(c.Layers)
	perRank := map[string]float64{}
	for _, ps := range []string{"tp=8", "sp=8", "sp=4,tp=2", "sp=2,tp=4"} {
		plan, _ := parallel.Parse(ps)
		e, err := NewExecutor(c, m.Weights, Options{Plan: plan, BlockSize: 4, NumBlocks: 32})
		if err != nil {
			t.Fatal(err)
		}
		b := prefillStep(n, c.Vocab)
		if _, err := e.Step(context.Background(), &b, parallel.Standard(plan)); err != nil {
			t.Fatal(err)
		}
		s, tp := float64(plan.SP), float64(plan.TP)
		nl := n / s
		wantAR := 0.0
		if plan.TP > 1 {
			wantAR = (1 + 2*layers) * 2 * (tp - 1) / tp * nl * d * 4 // embedding + 2 per layer
		}
		wantA2A := 0.0
		if plan.SP > 1 {
			qc := float64(c.QDim()) / (s * tp)
			kc := float64(c.KVDim()) / (s * tp)
			wantA2A = layers * (s - 1) / s * (s*nl*(qc+2*kc) + s*nl*qc) * 4
		}
		st := e.CommStats()
		for r := 0; r < plan.Ranks(); r++ {
			ar := st.Sum(func(k comm.Key) bool { return k.Rank == r && k.Kind == comm.KindAllReduce })
			a2a := st.Sum(func(k comm.Key) bool { return k.Rank == r && k.Kind == comm.KindAllToAll })
			if float64(ar.SentBytes) != wantAR || float64(a2a.SentBytes) != wantA2A || float64(ar.RecvBytes) != wantAR {
				t.Fatalf("%s rank %d: all-reduce sent %d (want %.0f), all-to-all sent %d (want %.0f)", ps, r, ar.SentBytes, wantAR, a2a.SentBytes, wantA2A)
			}
			if other := st.Rank(r).SentBytes - ar.SentBytes - a2a.SentBytes; other != 0 {
				t.Fatalf("%s rank %d: %d bytes moved by other collectives", ps, r, other)
			}
		}
		perRank[ps] = (wantAR + wantA2A)
	}
	// Table 2: excluding the embedding, SP moves 1/P of TP's per-layer volume.
	tpLayer := perRank["tp=8"] - 2*7.0/8*n/1*d*4
	if got, want := perRank["sp=8"], tpLayer/8; got != want {
		t.Fatalf("SP=8 per-rank volume %.0f, want TP's per-layer volume / 8 = %.0f", got, want)
	}
}

func TestRankFailureAndCancel(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	m := loadParallelFixture(t, 2)
	plan := parallel.Plan{DP: 1, PP: 2, SP: 2, TP: 2}
	e, err := NewExecutor(m.Config, m.Weights, Options{Plan: plan, BlockSize: 4, NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	boom := errors.New("kernel failed")

	// A rank that fails between collectives of a layer.
	e.fault = func(_ context.Context, r, l int) error {
		if r == 5 && l == 0 {
			return boom
		}
		return nil
	}
	b := prefillStep(40, m.Config.Vocab)
	start := time.Now()
	_, err = e.Step(context.Background(), &b, parallel.Standard(plan))
	if !errors.Is(err, boom) {
		t.Fatalf("failed rank: err = %v, want %v", err, boom)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("failed step took %v", d)
	}

	// A context cancelled in the middle of a step, while other ranks wait
	// in collectives.
	ctx, cancel := context.WithCancel(context.Background())
	e.fault = func(_ context.Context, r, l int) error {
		if r == 2 && l == 1 {
			cancel()
		}
		return nil
	}
	b = prefillStep(40, m.Config.Vocab)
	start = time.Now()
	_, err = e.Step(ctx, &b, parallel.Standard(plan))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled step: err = %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("cancelled step took %v", d)
	}

	// The executor recovers: a new world, correct logits.
	e.fault = nil
	single, err := NewExecutor(m.Config, m.Weights, Options{BlockSize: 4, NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	b = prefillStep(40, m.Config.Vocab)
	b.Seqs[0].NumLogits = 3
	got, err := e.Step(context.Background(), &b, parallel.Standard(plan))
	if err != nil {
		t.Fatal(err)
	}
	got = append([]float32(nil), got...)
	want, err := single.Step(context.Background(), &b, parallel.Standard(parallel.Single))
	if err != nil {
		t.Fatal(err)
	}
	assertLogitsClose(t, "after recovery", got, want, m.Config.Vocab)

	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines left behind (%d before)", n-before, n)
	}
}

// TestWeightMemoryPerRank holds each rank's weights under TP=t to within 5%
// of (split weights)/t + replicated weights.
func TestWeightMemoryPerRank(t *testing.T) {
	m := loadParallelFixture(t, 4)
	c := m.Config
	var split, replicated float64
	for _, b := range model.Bindings(c, &model.Weights{}) {
		n := 4.0
		for _, d := range b.Shape {
			n *= float64(d)
		}
		if b.Split == model.Replicated {
			replicated += n
		} else {
			split += n
		}
	}
	for _, tp := range []int{1, 2, 4} {
		plan := parallel.Plan{DP: 1, PP: 1, SP: 1, TP: tp}
		e, err := NewExecutor(c, m.Weights, Options{Plan: plan, NumBlocks: 4})
		if err != nil {
			t.Fatal(err)
		}
		want := split/float64(tp) + replicated
		for r, got := range e.WeightBytes() {
			if ratio := float64(got) / want; ratio < 0.95 || ratio > 1.05 {
				t.Fatalf("tp=%d rank %d holds %d bytes, want %.0f (ratio %.3f)", tp, r, got, want, ratio)
			}
		}
	}
	// Shift's separate-model approach: the shift shard adds 1/SP of the
	// base's split weights (paper 000, eq. 1).
	base := parallel.Plan{DP: 1, PP: 1, SP: 2, TP: 2}
	e, err := NewExecutor(c, m.Weights, Options{Placements: []parallel.Placement{parallel.Standard(base), parallel.ShiftPlacement(base)}, NumBlocks: 4})
	if err != nil {
		t.Fatal(err)
	}
	for r, got := range e.WeightBytes() {
		want := split/2 + split/4 + 2*replicated
		if ratio := float64(got) / want; ratio < 0.95 || ratio > 1.05 {
			t.Fatalf("shift rank %d holds %d bytes, want %.0f", r, got, want)
		}
	}
}

// TestShardBytesMatchPlanMath keeps the engine's shards and the plan
// package's memory model (used by inspect and the simulator) in agreement.
func TestShardBytesMatchPlanMath(t *testing.T) {
	for _, kv := range []int{4, 1} {
		m := loadParallelFixture(t, kv)
		for _, ps := range append(equivalencePlans, "pp=3", "pp=3,tp=2") {
			plan, _ := parallel.Parse(ps)
			e, err := NewExecutor(m.Config, m.Weights, Options{Plan: plan, NumBlocks: 2})
			if err != nil {
				t.Fatal(err)
			}
			l := parallel.Standard(plan)
			for r, got := range e.PlacementWeightBytes(plan.String()) {
				if want := 4 * l.WeightElems(m.Config, r); got != want {
					t.Fatalf("kv=%d %s rank %d: shard holds %d bytes, plan math says %d", kv, ps, r, got, want)
				}
				if want := 4 * l.KVElemsPerToken(m.Config, r) * int64(e.KVLayout().NumBlocks*e.KVLayout().BlockSize); e.KVBytes()[r] != want {
					t.Fatalf("kv=%d %s rank %d: KV cache %d bytes, plan math says %d", kv, ps, r, e.KVBytes()[r], want)
				}
			}
		}
	}
}
