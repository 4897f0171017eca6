package sim

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/parallel"
)

// TestSwapInOverlapsDecode holds the runner to Seesaw's prefetcher (paper
// 004, §5.2): a sequence swapped in joins a decode step whose compute
// runs while its KV crosses the host link, so the step takes the longer
// of its compute and the copy, never their sum; the part of the copy the
// compute does not hide is counted as a wait.
func TestSwapInOverlapsDecode(t *testing.T) {
	cfg, cm := seesawBox(t)
	tp4 := parallel.Standard(parallel.Plan{DP: 1, TP: 4, PP: 1, SP: 1})
	const block, ctx = 16, 4096
	perSeq := ctx / block
	// decode is a step of n decodes of ctx tokens each, the i-th
	// sequence on blocks [i·perSeq, (i+1)·perSeq).
	decode := func(n int) *forward.Batch {
		b := &forward.Batch{}
		for i := range n {
			blocks := make([]int, perSeq+1)
			for j := range blocks {
				blocks[j] = i*(perSeq+1) + j
			}
			b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: []int{1}, Pos: ctx, Blocks: blocks, NumLogits: 1})
		}
		return b
	}
	// swapIn copies sequences [from, to) of decode's layout.
	swapIn := func(r *CostRunner, from, to int) {
		var sw forward.Swap
		for i := from; i < to; i++ {
			for j := range perSeq {
				sw.Device = append(sw.Device, i*(perSeq+1)+j)
				sw.Host = append(sw.Host, i*(perSeq+1)+j)
			}
		}
		if _, err := r.SwapIn(context.Background(), []forward.Swap{sw}); err != nil {
			t.Fatal(err)
		}
	}
	newRunner := func() *CostRunner {
		r, err := NewCostRunner(cm, cfg, []parallel.Placement{tp4}, block, 64*(perSeq+1), clock.NewFake(time.Unix(0, 0)))
		if err != nil {
			t.Fatal(err)
		}
		r.EnableHostTier(1 << 16)
		return r
	}
	copyTime, err := cm.KVSwap(cfg, tp4, 0, int64(perSeq*block))
	if err != nil {
		t.Fatal(err)
	}

	// One sequence joins 32 decoding ones: its copy (about 32 ms) is
	// shorter than the step's compute, which hides it.
	lc, err := cm.Layout(cfg, tp4)
	if err != nil {
		t.Fatal(err)
	}
	var sh StepShape
	for range 33 {
		sh.Seqs = append(sh.Seqs, Seq{Context: ctx, New: 1, Logits: 1})
	}
	compute := lc.Step(&sh).Seconds
	if !(copyTime < compute) {
		t.Fatalf("copy %.4f s, step %.4f s: the case needs a copy shorter than the step", copyTime, compute)
	}
	r := newRunner()
	swapIn(r, 32, 33)
	if _, err := r.StepGreedy(context.Background(), decode(33), tp4); err != nil {
		t.Fatal(err)
	}
	if got := r.Last().End.Sub(time.Unix(0, 0)).Seconds(); math.Abs(got-compute) > 1e-6 {
		t.Fatalf("step with a hidden swap-in took %.6f s, its compute %.6f s", got, compute)
	}
	if w := r.HostStats().WaitSeconds; w != 0 {
		t.Fatalf("waited %.6f s for a copy the step hides", w)
	}

	// Eight sequences swapped in at once and decoded alone: the copies
	// (eight in a row on each rank's copy engine) outlast the step, which
	// ends when the last lands.
	r = newRunner()
	swapIn(r, 0, 8)
	all, err := cm.KVSwap(cfg, tp4, 0, int64(8*perSeq*block))
	if err != nil {
		t.Fatal(err)
	}
	sh.Seqs = sh.Seqs[:8]
	compute = lc.Step(&sh).Seconds
	if !(all > compute) {
		t.Fatalf("copy %.4f s, step %.4f s: the case needs a copy longer than the step", all, compute)
	}
	if _, err := r.StepGreedy(context.Background(), decode(8), tp4); err != nil {
		t.Fatal(err)
	}
	if got := r.Last().End.Sub(time.Unix(0, 0)).Seconds(); math.Abs(got-all) > 1e-6 {
		t.Fatalf("step behind a slow swap-in took %.6f s, the copy %.6f s", got, all)
	}
	if w := r.HostStats().WaitSeconds; math.Abs(w-(all-compute)) > 1e-6 {
		t.Fatalf("waited %.6f s, want the copy less the compute, %.6f s", w, all-compute)
	}
	st := r.PlacementStats()[0]
	if st.Steps != 1 || st.DecodeSteps != 1 || st.Decodes != 8 || math.Abs(st.Seconds-compute) > 1e-9 || st.DecodeSeconds != st.Seconds {
		t.Fatalf("placement stats %+v: want one decode step of 8 sequences and %.6f s of compute", st, compute)
	}
}

// BenchmarkBlocksReady is the runner's per-step check of a decode step of
// 256 sequences of 32 blocks each against swaps still in flight (the
// Seesaw decode phase's common case).
func BenchmarkBlocksReady(b *testing.B) {
	cfg := preset(b, "codellama/CodeLlama-34b-hf")
	node, err := ParseNode("4xA10G@pcie4x8")
	if err != nil {
		b.Fatal(err)
	}
	prec, err := VLLMPrecision(cfg, "float16", "", "auto")
	if err != nil {
		b.Fatal(err)
	}
	cm, err := NewCostModel(node, prec)
	if err != nil {
		b.Fatal(err)
	}
	tp4 := parallel.Standard(parallel.Plan{DP: 1, TP: 4, PP: 1, SP: 1})
	const seqs, per = 256, 32
	r, err := NewCostRunner(cm, cfg, []parallel.Placement{tp4}, 16, seqs*per, clock.NewFake(time.Unix(0, 0)))
	if err != nil {
		b.Fatal(err)
	}
	r.EnableHostTier(seqs * per)
	batch := &forward.Batch{}
	for i := range seqs {
		blocks := make([]int, per)
		for j := range blocks {
			blocks[j] = i*per + j
		}
		batch.Seqs = append(batch.Seqs, forward.SeqBatch{Tokens: []int{1}, Pos: per*16 - 1, Blocks: blocks, NumLogits: 1})
	}
	if _, err := r.SwapIn(context.Background(), []forward.Swap{{Device: batch.Seqs[seqs-1].Blocks, Host: batch.Seqs[seqs-1].Blocks}}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if r.blocksReady(batch).IsZero() {
			b.Fatal("no block in flight")
		}
	}
}
