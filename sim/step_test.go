package sim

import (
	"math"
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

func layoutCost(t testing.TB, cm *CostModel, cfg *model.Config, plan string) *LayoutCost {
	t.Helper()
	p, err := parallel.Parse(plan)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := cm.Layout(cfg, parallel.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	return lc
}

func preset(t testing.TB, id string) *model.Config {
	t.Helper()
	cfg, err := LookupModel(id)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestMicroBatchSplit holds prepare to the engine's split: token i of T
// goes to micro-batch ⌊i·m/T⌋, pieces keep their positions and logits
// land on the SP rank that holds their rows.
func TestMicroBatchSplit(t *testing.T) {
	cm := costModel(t, "8xH100", bf16)
	lc := layoutCost(t, cm, preset(t, "meta-llama/Llama-3.1-8B"), "pp=2,sp=2")
	b := StepShape{MicroBatches: 3, Seqs: []Seq{{Context: 0, New: 6, Logits: 1}, {Context: 9, New: 1, Logits: 1}, {Context: 2, New: 3, Logits: 3}}}
	if m := lc.prepare(&b, 0); m != 3 {
		t.Fatalf("%d micro-batches", m)
	}
	var tokens []int
	var logits [][]int
	for _, ms := range lc.micros {
		tokens = append(tokens, ms.tokens)
		logits = append(logits, slices.Clone(ms.logits))
	}
	// T = 10: micro-batches [0,4) [4,7) [7,10). Logits rows: token 5 (seq 0's
	// last), token 6 (the decode), tokens 7, 8, 9.
	if !slices.Equal(tokens, []int{4, 3, 3}) {
		t.Errorf("tokens %v", tokens)
	}
	// Micro-batch 1 holds tokens 4, 5, 6 as rows 0, 1 (SP rank 0) and 2 (SP rank 1).
	if want := [][]int{{0, 0}, {1, 1}, {2, 1}}; !slices.EqualFunc(logits, want, slices.Equal) {
		t.Errorf("logits by micro-batch and SP rank %v, want %v", logits, want)
	}
	// Attention: micro-batch 0 is seq 0's positions 0–3, micro-batch 1 its
	// positions 4–5 and the decode at 9, micro-batch 2 seq 2's 2–4.
	if got, want := lc.micros[1].prefill, SeqAttention(4, 2, 0); got != want {
		t.Errorf("micro-batch 1 prefill %+v, want %+v", got, want)
	}
	if got, want := lc.micros[1].decode, SeqAttention(9, 1, 0); got != want {
		t.Errorf("micro-batch 1 decode %+v, want %+v", got, want)
	}
	if got, want := lc.micros[2].prefill, SeqAttention(2, 3, 0); got != want {
		t.Errorf("micro-batch 2 prefill %+v, want %+v", got, want)
	}
	if m := lc.prepare(&StepShape{Seqs: []Seq{{New: 3, Replica: 1}}}, 0); m != 0 {
		t.Errorf("replica 0 has no tokens, yet %d micro-batches", m)
	}
}

// TestStepLockstep: without PP the step is the slowest rank's busy time
// plus the overhead, and the ranks of a symmetric TP group are equal.
func TestStepLockstep(t *testing.T) {
	cm := costModel(t, "8xH200", Precision{Weights: FP8, Activations: BF16, KV: BF16})
	lc := layoutCost(t, cm, preset(t, "meta-llama/Llama-3.3-70B-Instruct"), "tp=8")
	b := StepShape{Seqs: []Seq{{Context: 4096, New: 1, Logits: 1}, {Context: 100, New: 512, Logits: 1}}}
	st := lc.Step(&b)
	for r := 0; r < 8; r++ {
		bd := lc.StepTime(r, &b)
		busy := bd.Total - bd.Parts[CompOverhead].Time
		if math.Abs(busy-st.Busy) > 1e-12 {
			t.Errorf("rank %d busy %g, step busy %g", r, busy, st.Busy)
		}
		var sum float64
		for _, p := range bd.Parts {
			sum += p.Time
		}
		if math.Abs(sum-bd.Total) > 1e-12 || bd.Compute <= 0 || bd.Memory <= 0 || bd.Comm <= 0 {
			t.Errorf("rank %d breakdown inconsistent: %+v", r, bd)
		}
	}
	if math.Abs(st.Seconds-(st.Busy+VLLMStepOverhead)) > 1e-12 || st.Overhead != VLLMStepOverhead {
		t.Errorf("step %+v", st)
	}
}

// TestStepMatchesRanks: Step's busy time is the largest of the ranks'
// own breakdowns, for layouts whose TP members are twins and for one whose
// uneven vocabulary slices make them differ.
func TestStepMatchesRanks(t *testing.T) {
	cm := costModel(t, "8xH200", Precision{Weights: FP8, Activations: BF16, KV: BF16})
	cfg := *preset(t, "Qwen/Qwen2.5-14B-Instruct")
	odd := cfg
	odd.Vocab--
	shapes := []StepShape{benchShape(5), {Seqs: []Seq{{Context: 7, New: 1, Logits: 1}}}, {Seqs: []Seq{{New: 999, Logits: 999}}, MicroBatches: 3}}
	for _, c := range []*struct {
		cfg  *model.Config
		plan string
	}{{&cfg, "tp=8"}, {&odd, "tp=8"}, {&cfg, "sp=2,tp=4"}, {&odd, "sp=4,tp=2"}, {&cfg, "pp=2,tp=4"}, {&odd, "dp=2,pp=2,tp=2"}, {&cfg, "sp=8"}} {
		lc := layoutCost(t, cm, c.cfg, c.plan)
		for i := range shapes {
			st := lc.Step(&shapes[i])
			busy := 0.0
			for r := range lc.ranks {
				bd := lc.StepTime(r, &shapes[i])
				busy = max(busy, bd.Total-bd.Parts[CompOverhead].Time)
			}
			if math.Abs(st.Busy/busy-1) > 1e-12 {
				t.Errorf("%s vocab %d shape %d: step busy %g, ranks' %g", c.plan, c.cfg.Vocab, i, st.Busy, busy)
			}
		}
	}
}

// TestPipeline checks the PP schedule: one micro-batch runs the stages one
// after the other, more micro-batches overlap them, and the step is never
// shorter than the busiest rank.
func TestPipeline(t *testing.T) {
	cm := costModel(t, "8xH100", bf16)
	cfg := preset(t, "meta-llama/Llama-3.1-8B")
	lc := layoutCost(t, cm, cfg, "pp=2")
	b := StepShape{MicroBatches: 1, Seqs: []Seq{{New: 4096, Logits: 1}}}
	one := lc.Step(&b)
	s0, s1 := lc.StepTime(0, &b), lc.StepTime(1, &b)
	o := VLLMStepOverhead
	if want := s0.Total - o + s1.Total - o + o; math.Abs(one.Seconds-want) > 1e-12 {
		t.Errorf("one micro-batch: %g s, want the stages in sequence %g", one.Seconds, want)
	}
	b.MicroBatches = 4
	four := lc.Step(&b)
	if !(four.Seconds < one.Seconds && four.Seconds >= four.Busy+o) {
		t.Errorf("four micro-batches %+v, one %+v", four, one)
	}
	// Equal micro-batches on two nearly equal stages: about (m+1)/m of one stage's work.
	if r := (four.Seconds - o) / four.Busy; r < 1.15 || r > 1.35 {
		t.Errorf("pipeline fill and drain: step/busy = %.2f, want about 5/4", r)
	}
}

// TestIdleReplica: ranks of a replica without sequences do nothing.
func TestIdleReplica(t *testing.T) {
	cm := costModel(t, "8xH100", bf16)
	cfg := preset(t, "meta-llama/Llama-3.1-8B")
	lc := layoutCost(t, cm, cfg, "dp=2,tp=4")
	b := StepShape{Seqs: []Seq{{Context: 10, New: 1, Logits: 1}, {Context: 30, New: 1, Logits: 1}}}
	for r := 4; r < 8; r++ {
		if bd := lc.StepTime(r, &b); bd.Total != VLLMStepOverhead || bd.CommBytes[0].Calls != 0 {
			t.Errorf("idle rank %d: %+v", r, bd)
		}
	}
	st := lc.Step(&b)
	if st.Slowest >= 4 {
		t.Errorf("slowest rank %d is idle", st.Slowest)
	}
	// The same sequences spread over both replicas: each replica has less work.
	b.Seqs[1].Replica = 1
	if spread := lc.Step(&b); spread.Seconds >= st.Seconds {
		t.Errorf("spreading over replicas: %g s, all on one %g s", spread.Seconds, st.Seconds)
	}
}

// TestStepNoAllocs: steps allocate nothing once the scratch has grown.
func TestStepNoAllocs(t *testing.T) {
	cm := costModel(t, "8xH200", Precision{Weights: FP8, Activations: BF16, KV: BF16})
	lc := layoutCost(t, cm, preset(t, "meta-llama/Llama-3.3-70B-Instruct"), "pp=2,sp=2,tp=2")
	b := benchShape(64)
	lc.Step(&b)
	if n := testing.AllocsPerRun(20, func() { lc.Step(&b) }); n != 0 {
		t.Errorf("Step allocates %v times", n)
	}
	if n := testing.AllocsPerRun(20, func() { lc.StepTime(3, &b) }); n != 0 {
		t.Errorf("StepTime allocates %v times", n)
	}
}

func TestLayoutErrors(t *testing.T) {
	cm := costModel(t, "4xA10-pcie", bf16)
	cfg := preset(t, "meta-llama/Llama-3.1-8B")
	for _, plan := range []string{"tp=8", "tp=3", "dp=2,tp=4"} {
		p, _ := parallel.Parse(plan)
		if _, err := cm.Layout(cfg, parallel.Standard(p)); err == nil {
			t.Errorf("%s accepted on 4 GPUs", plan)
		}
	}
}

// benchShape is a serving step: n decodes at contexts 1k–5k and one 512-token
// prefill chunk, over two replicas when the plan has them.
func benchShape(n int) StepShape {
	b := StepShape{MicroBatches: 2}
	for i := 0; i < n; i++ {
		b.Seqs = append(b.Seqs, Seq{Context: 1000 + 61*i, New: 1, Logits: 1, Replica: 0})
	}
	b.Seqs = append(b.Seqs, Seq{Context: 2048, New: 512, Logits: 1})
	return b
}

// TestLogitsToHost charges an engine that samples on the host for
// bringing every logits row over, and nothing otherwise.
func TestLogitsToHost(t *testing.T) {
	cfg := preset(t, "meta-llama/Llama-3.1-8B")
	base := costModel(t, "1xH100", bf16)
	node := base.Node
	node.GPU.Eff.LogitsBytesPerS = 10e9
	withCopy, err := NewCostModel(node, bf16)
	if err != nil {
		t.Fatal(err)
	}
	shape := StepShape{Seqs: []Seq{{Context: 100, New: 1, Logits: 1}, {Context: 7, New: 1, Logits: 1}, {Context: 0, New: 16, Logits: 1}}}
	a := layoutCost(t, base, cfg, "single").Step(&shape).Seconds
	b := layoutCost(t, withCopy, cfg, "single").Step(&shape).Seconds
	if want := 3 * float64(cfg.Vocab) * 4 / 10e9; math.Abs(b-a-want) > 1e-12 {
		t.Errorf("logits copy added %g s, want %g", b-a, want)
	}
}

// TestStepOverlap: with overlapping steps a PP layout's steady decode
// step takes the busiest stage's time over its micro-batches, not the
// fill-and-drain of a lone step; one sequence still waits a whole round
// trip per token; without PP nothing changes.
func TestStepOverlap(t *testing.T) {
	cm := costModel(t, "4xA10G@pcie4x8", Precision{Weights: BF16, Activations: BF16, KV: BF16})
	cfg := preset(t, "codellama/CodeLlama-34b-hf")
	decode := func(n int) *StepShape {
		b := &StepShape{}
		for range n {
			b.Seqs = append(b.Seqs, Seq{Context: 1000, New: 1, Logits: 1})
		}
		return b
	}
	steady := func(lc *LayoutCost, b *StepShape) (first, last float64) {
		for i := range 20 {
			s := lc.Step(b).Seconds
			if i == 0 {
				first = s
			}
			last = s
		}
		return first, last
	}
	ovh := cm.eff.StepOverhead

	lc := layoutCost(t, cm, cfg, "pp=4")
	b := decode(64)
	off := lc.Step(b).Seconds
	var bottleneck float64 // the busiest stage's time over the step's four micro-batches
	for r := range 4 {
		bottleneck = max(bottleneck, lc.StepTime(r, b).Total-ovh)
	}
	lc.SetOverlap(true)
	first, on := steady(lc, b)
	if first >= off {
		t.Errorf("first overlapped step %.4f s, not shorter than a lone step %.4f s (its drain runs into the next)", first, off)
	}
	if lo, hi := bottleneck, 1.1*(bottleneck+ovh); on < lo-1e-12 || on > hi {
		t.Errorf("steady overlapped step %.4f s, want [%.4f, %.4f]: the busiest stage's time, the overhead may overlap it", on, lo, hi)
	}
	if on > 0.7*off {
		t.Errorf("steady overlapped step %.4f s vs lone %.4f s: 4 micro-batches over 4 stages should save ~3/7", on, off)
	}

	// One sequence: each token goes round the whole pipeline and is sampled.
	lc.SetOverlap(false)
	one := decode(1)
	off1 := lc.Step(one).Seconds
	lc.SetOverlap(true)
	if _, on1 := steady(lc, one); math.Abs(on1-off1) > 1e-9 {
		t.Errorf("one sequence: overlapped %.6f s per step, lone %.6f s", on1, off1)
	}

	// A gap longer than the pipeline empties it.
	lc.Drain()
	first1 := lc.Step(b).Seconds
	lc.Step(b)
	lc.Idle(10)
	if got := lc.Step(b).Seconds; math.Abs(got-first1) > 1e-9 {
		t.Errorf("after an idle gap %.6f s, want the first step's %.6f s", got, first1)
	}

	tp := layoutCost(t, cm, cfg, "tp=4")
	want := tp.Step(b).Seconds
	tp.SetOverlap(true)
	if _, got := steady(tp, b); math.Abs(got-want) > 1e-12 {
		t.Errorf("tp=4: overlapped %.6f s, lone %.6f s", got, want)
	}
}
