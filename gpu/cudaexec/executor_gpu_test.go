package cudaexec

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/internal/oracle"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

var (
	gpuOnce sync.Once
	gpuErr  error
)

// requireGPU skips the test, with one line saying why, when no CUDA device
// can be opened.
func requireGPU(t testing.TB) {
	t.Helper()
	gpuOnce.Do(func() {
		var c *cuda.Context
		if c, gpuErr = cuda.Open(0); gpuErr == nil {
			gpuErr = c.Close()
		}
	})
	if gpuErr != nil {
		t.Skipf("no CUDA GPU: %v", gpuErr)
	}
}

func newExec(t testing.TB, cfg *model.Config, w *model.Weights, opts Options) *Executor {
	t.Helper()
	x, err := New(cfg, w, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := x.Close(); err != nil {
			t.Error(err)
		}
	})
	return x
}

func loadFixture(t *testing.T, spec fixture.Spec) (*model.Model, *oracle.Model) {
	t.Helper()
	dir, err := fixture.Dir(t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.Options{DType: model.Float32}) // fp32 explicitly: compared with the float64 oracle
	if err != nil {
		t.Fatal(err)
	}
	ref, err := oracle.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m, ref
}

// checker compares a logits row with the float64 oracle: in float32, max
// |got−want| ≤ 1e-4·max|want| (the foundation tolerance); in BF16/FP16,
// relative L2 error ≤ 8u, u the format's unit roundoff (2⁻⁸ for BF16,
// 2⁻¹¹ for FP16). Rounding weights and activations to the format gives
// 3–4u on the foundation fixtures (H200, 2026-11-26: BF16 worst 0.0125,
// FP16 worst 0.00175), so FP16 is held about 8× tighter than BF16.
type checker struct {
	t      *testing.T
	dt     model.DType
	worst  float64 // largest relative L2 error seen
	vocab  int
	checks int
}

func (c *checker) row(what string, got []float32, want []float64) {
	c.t.Helper()
	if len(got) != len(want) {
		c.t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
	maxAbs, maxDiff, num, den := 0.0, 0.0, 0.0, 0.0
	for i := range want {
		g := float64(got[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			c.t.Fatalf("%s: logit %d is %v", what, i, g)
		}
		d := g - want[i]
		maxAbs = math.Max(maxAbs, math.Abs(want[i]))
		maxDiff = math.Max(maxDiff, math.Abs(d))
		num += d * d
		den += want[i] * want[i]
	}
	rel := math.Sqrt(num / den)
	c.worst = math.Max(c.worst, rel)
	c.checks++
	if c.dt == model.Float32 {
		if maxDiff > 1e-4*maxAbs {
			c.t.Fatalf("%s: max abs diff %.3g exceeds 1e-4 × max abs logit %.3g", what, maxDiff, maxAbs)
		}
	} else if tol := 8 * unitRoundoff(c.dt); rel > tol {
		c.t.Fatalf("%s: relative L2 error %.3g exceeds 8u = %.3g (%s)", what, rel, tol, c.dt)
	}
}

// unitRoundoff is half the spacing of dt's numbers just above 1: 2⁻ᵖ for
// p significant bits.
func unitRoundoff(dt model.DType) float64 {
	if dt == model.Float16 {
		return 0x1p-11
	}
	return 0x1p-8
}

// TestLogitsMatchOracle runs the foundation scenarios — one sequence with
// every position's logits, a varlen batch, and chunked prefill interleaved
// with decodes through 4-token blocks — on every foundation fixture, in
// float32 (foundation tolerance), bfloat16 and float16 (relative L2 ≤ 8u), with
// CUDA graphs on so the decode steps replay captured graphs.
func TestLogitsMatchOracle(t *testing.T) {
	requireGPU(t)
	for _, dt := range []model.DType{model.Float32, model.BFloat16, model.Float16} {
		for _, fx := range fixture.Foundation {
			t.Run(dt.String()+"/"+fx.Name, func(t *testing.T) {
				m, ref := loadFixture(t, fx.Spec)
				cfg := m.Config
				x := newExec(t, cfg, m.Weights, Options{DType: dt, BlockSize: 4, NumBlocks: 256, MaxNumTokens: 64, MaxNumSeqs: 8})
				c := &checker{t: t, dt: dt, vocab: cfg.Vocab}
				runScenarios(t, x, ref, c)
				t.Logf("%s: worst relative L2 error %.3g over %d rows", dt, c.worst, c.checks)
			})
		}
	}
}

// runScenarios is the foundation's three scenarios against the oracle.
func runScenarios(t *testing.T, x engine.Runner, ref *oracle.Model, c *checker) {
	t.Helper()
	cfg := x.Config()
	ctx := context.Background()
	next := 0
	type seq struct {
		tokens []int
		done   int
		blocks []int
	}
	newSeq := func(n, seed int) *seq {
		s := &seq{tokens: fixture.Tokens(seed, n, cfg.Vocab)}
		for i := 0; i < (n+3)/4; i++ {
			s.blocks = append(s.blocks, next)
			next++
		}
		return s
	}
	step := func(b *forward.Batch) []float32 {
		t.Helper()
		logits, err := x.Step(ctx, b, x.Placements()[0])
		if err != nil {
			t.Fatal(err)
		}
		return logits
	}

	one := newSeq(37, 1)
	logits := step(&forward.Batch{Seqs: []forward.SeqBatch{{Tokens: one.tokens, Blocks: one.blocks, NumLogits: len(one.tokens)}}})
	want := ref.Logits(one.tokens)
	for p := range one.tokens {
		c.row("single sequence", logits[p*cfg.Vocab:(p+1)*cfg.Vocab], want[p])
	}

	b := forward.Batch{Hidden: true} // and the rows' final-norm hidden states (embeddings)
	var seqs []*seq
	for i, n := range []int{5, 1, 19, 8, 2} {
		s := newSeq(n, 10+i)
		seqs = append(seqs, s)
		b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: s.tokens, Blocks: s.blocks, NumLogits: n})
	}
	logits = step(&b)
	var hidden []float32
	if hr, ok := x.(engine.HiddenRunner); ok {
		hidden = hr.Hidden()
	}
	row := 0
	for _, s := range seqs {
		want, wantHidden := ref.Logits(s.tokens), ref.Hidden(s.tokens)
		for p := range s.tokens {
			c.row("varlen batch", logits[row*cfg.Vocab:(row+1)*cfg.Vocab], want[p])
			if hidden != nil {
				c.row("varlen batch, hidden state", hidden[row*cfg.Hidden:(row+1)*cfg.Hidden], wantHidden[p])
			}
			row++
		}
	}

	a, d := newSeq(48, 20), newSeq(48, 21)
	for _, st := range []struct{ a, d int }{{7, 3}, {9, 1}, {1, 13}, {1, 1}, {11, 1}, {1, 8}, {1, 1}, {1, 1}, {1, 6}, {8, 1}, {1, 6}} {
		var b forward.Batch
		for _, p := range []struct {
			s *seq
			n int
		}{{a, st.a}, {d, st.d}} {
			b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: p.s.tokens[p.s.done : p.s.done+p.n], Pos: p.s.done, Blocks: p.s.blocks, NumLogits: 1})
			p.s.done += p.n
		}
		logits := step(&b)
		for i, s := range []*seq{a, d} {
			want := ref.Logits(s.tokens[:s.done])
			c.row("chunked prefill + decode", logits[i*cfg.Vocab:(i+1)*cfg.Vocab], want[s.done-1])
		}
	}
}

// TestGraphsMatchEager checks that decode steps replayed from CUDA graphs
// (batches of 1, 3 and 5 sequences: exact and padded buckets) return the
// same logits as plain launches.
func TestGraphsMatchEager(t *testing.T) {
	requireGPU(t)
	m, _ := loadFixture(t, fixture.Spec{Heads: 8, KVHeads: 2, Seed: 31})
	cfg := m.Config
	graphs := newExec(t, cfg, m.Weights, Options{DType: model.Float32, BlockSize: 4, NumBlocks: 256, MaxNumSeqs: 8})
	eager := newExec(t, cfg, m.Weights, Options{DType: model.Float32, BlockSize: 4, NumBlocks: 256, MaxNumSeqs: 8, EnforceEager: true})
	if err := graphs.CaptureGraphs(); err != nil {
		t.Fatal(err)
	}
	if n := len(graphs.graphs); n != 4 { // buckets 1, 2, 4, 8
		t.Fatalf("CaptureGraphs captured %d graphs, want 4", n)
	}
	ctx := context.Background()
	for _, n := range []int{1, 3, 5} {
		var prefill, decode forward.Batch
		for i := 0; i < n; i++ {
			blocks := []int{16 * i, 16*i + 1, 16*i + 2, 16*i + 3}
			toks := fixture.Tokens(100+i, 9+i, cfg.Vocab)
			prefill.Seqs = append(prefill.Seqs, forward.SeqBatch{Tokens: toks, Blocks: blocks, NumLogits: 1})
			decode.Seqs = append(decode.Seqs, forward.SeqBatch{Tokens: []int{toks[0]}, Pos: len(toks), Blocks: blocks, NumLogits: 1})
		}
		for _, b := range []*forward.Batch{&prefill, &decode, &decode} {
			g, err := graphs.Step(ctx, b, graphs.Placements()[0])
			if err != nil {
				t.Fatal(err)
			}
			g = slices.Clone(g)
			e, err := eager.Step(ctx, b, eager.Placements()[0])
			if err != nil {
				t.Fatal(err)
			}
			for i := range e {
				if d := math.Abs(float64(g[i] - e[i])); d > 1e-5*(1+math.Abs(float64(e[i]))) {
					t.Fatalf("batch %d: logit %d: graph %g, eager %g", n, i, g[i], e[i])
				}
			}
		}
	}
	if len(graphs.graphs) != 4 {
		t.Fatalf("%d graphs after the steps, want the 4 captured at start", len(graphs.graphs))
	}
}

// TestStoriesGreedy: the built-in model's greedy text on the GPU equals the
// CPU engine's for 240 tokens in float32, and for the README text's length
// in bfloat16.
func TestStoriesGreedy(t *testing.T) {
	requireGPU(t)
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	prompt := m.Tokenizer.Encode("Once upon a time", true)
	generate := func(r engine.Runner, n int) []int {
		t.Helper()
		e, err := engine.NewEngine(engine.Options{Exec: r, Tokenizer: m.Tokenizer, EOS: m.EOS(), Sched: sched.Config{MaxNumBatchedTokens: 64, MaxNumSeqs: 4}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Run(ctx) }()
		defer func() { cancel(); <-done }()
		out, err := e.Generate(context.Background(), engine.Request{Prompt: prompt, MaxTokens: n, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out.Tokens
	}
	pool := tensor.NewPool(0)
	defer pool.Close()
	cpu, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	want := generate(cpu, 240)
	// Both executors stay open until the test ends, so each takes a fixed
	// KV cache: sized by --gpu-memory-utilization, the first would leave
	// the second none.
	got := generate(newExec(t, m.Config, m.Weights, Options{DType: model.Float32, MaxNumSeqs: 4, NumBlocks: 256}), 240)
	if !slices.Equal(got, want) {
		t.Fatalf("float32 greedy differs from the CPU engine:\n got %v\nwant %v", got, want)
	}
	// The README's completion text (model/builtin/stories260K/README.md) is
	// the first 82 tokens; BF16 rounding alone leaves the FP32 text after
	// about 100.
	const readme = 82
	got = generate(newExec(t, m.Config, m.Weights, Options{DType: model.BFloat16, MaxNumSeqs: 4, NumBlocks: 256}), readme)
	if !slices.Equal(got, want[:readme]) {
		t.Fatalf("bfloat16 greedy differs from the CPU engine within the README text:\n got %v\nwant %v", got, want[:readme])
	}
}

// TestPlansMatchOracle runs the foundation scenarios under every plan on
// one GPU in float32 — TP, SP, mixed SP×TP and PP, with 8 query heads over
// 4, 2 and 1 KV heads (so SP chunks replicate KV heads) — against the
// float64 oracle, and checks that the collective traffic equals the CPU
// executor's for the same steps.
func TestPlansMatchOracle(t *testing.T) {
	requireGPU(t)
	plans := []string{"tp=2", "sp=2", "sp=2,tp=2", "pp=2", "pp=2,tp=2", "sp=4", "tp=4"}
	for _, kv := range []int{4, 2, 1} {
		m, ref := loadFixture(t, fixture.Spec{Heads: 8, KVHeads: kv, Layers: 4, Seed: uint64(40 + kv)})
		for _, ps := range plans {
			t.Run(fmt.Sprintf("kv=%d/%s", kv, ps), func(t *testing.T) {
				plan, err := parallel.Parse(ps)
				if err != nil {
					t.Fatal(err)
				}
				x := newExec(t, m.Config, m.Weights, Options{Plan: plan, DType: model.Float32, BlockSize: 4, NumBlocks: 256, MaxNumTokens: 64, MaxNumSeqs: 8})
				scenariosLikeCPU(t, x, m, ref, parallel.Standard(plan))
			})
		}
	}
}

// TestShiftSwitching: a base plan of sp=2,tp=2 prefills, then decode steps
// switch at random between it and its shift plan (tp=4); tokens equal the
// oracle's greedy ones and the traffic equals the CPU executor's for the
// same switches, which never moves KV (engine's TestShiftSwitching holds
// the CPU to that).
func TestShiftSwitching(t *testing.T) {
	requireGPU(t)
	for _, kv := range []int{4, 2, 1} {
		t.Run(fmt.Sprintf("kv=%d", kv), func(t *testing.T) {
			m, ref := loadFixture(t, fixture.Spec{Heads: 8, KVHeads: kv, Layers: 3, Seed: uint64(50 + kv)})
			base := parallel.Plan{DP: 1, PP: 1, SP: 2, TP: 2}
			x := newExec(t, m.Config, m.Weights, Options{Placements: shiftPlacements(base), DType: model.Float32, BlockSize: 4, NumBlocks: 128, MaxNumSeqs: 4})
			switchPlans(t, x, m, ref, base, kv)
		})
	}
}

// switchPlans prefills a prompt under base, then decodes greedily with
// each step under base or its shift at random, on x and cpu alike; tokens
// must equal the oracle's, both plans must run and the traffic of x must
// equal cpu's.
func switchPlans(t *testing.T, x *Executor, m *model.Model, ref *oracle.Model, base parallel.Plan, seed int) {
	t.Helper()
	cpu := cpuExecutor(t, m, shiftPlacements(base), x.KVLayout().NumBlocks)
	vocab := x.Config().Vocab
	prompt := fixture.Tokens(5, 13, vocab)
	want := ref.Greedy(prompt, 48)
	blocks := make([]int, 16)
	for i := range blocks {
		blocks[i] = i
	}
	rng := uint64(seed)
	tokens := slices.Clone(prompt)
	for i := 0; i <= len(want)-1; i++ {
		b := &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokens[len(tokens)-1:], Pos: len(tokens) - 1, Blocks: blocks, NumLogits: 1}}}
		plan := parallel.Standard(base)
		if i == 0 {
			b.Seqs[0].Tokens, b.Seqs[0].Pos = tokens, 0
		} else if rng = rng*6364136223846793005 + 1442695040888963407; rng>>63 == 1 {
			plan = parallel.ShiftPlacement(base)
		}
		got, err := x.Step(context.Background(), b, plan)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cpu.Step(context.Background(), b, plan); err != nil {
			t.Fatal(err)
		}
		next := argmax(got[:vocab])
		if next != want[i] {
			t.Fatalf("token %d under %s: %d, oracle %d", i, plan, next, want[i])
		}
		tokens = append(tokens, next)
	}
	if x.PlanSteps()[parallel.ShiftPlacement(base).Name] == 0 || x.PlanSteps()[base.String()] < 2 {
		t.Fatalf("plans run: %v; want both", x.PlanSteps())
	}
	if got, want := x.CommStats(), cpu.CommStats(); !reflect.DeepEqual(got, want) {
		t.Fatalf("collective traffic differs from the CPU executor's:\nexecutor %v\nCPU      %v", got, want)
	}
}

// shiftPlacements are a base plan's placement and its shift placement.
func shiftPlacements(base parallel.Plan) []parallel.Placement {
	return []parallel.Placement{parallel.Standard(base), parallel.ShiftPlacement(base)}
}

// cpuExecutor is the CPU executor of the placements with x's KV geometry
// and one micro-batch, whose traffic the CUDA executor's must equal.
func cpuExecutor(t *testing.T, m *model.Model, placements []parallel.Placement, blocks int) *cpuexec.Executor {
	t.Helper()
	pool := tensor.NewPool(2)
	t.Cleanup(pool.Close)
	cpu, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{Placements: placements, BlockSize: 4, NumBlocks: blocks, MicroBatches: 1, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	return cpu
}

// scenariosLikeCPU runs the foundation scenarios on x and on the CPU
// executor under placement p, both against the oracle in float32, and
// checks that x's collective traffic equals the CPU's.
func scenariosLikeCPU(t *testing.T, x *Executor, m *model.Model, ref *oracle.Model, p parallel.Placement) {
	t.Helper()
	runScenarios(t, x, ref, &checker{t: t, dt: model.Float32})
	cpu := cpuExecutor(t, m, []parallel.Placement{p}, x.KVLayout().NumBlocks)
	runScenarios(t, cpu, ref, &checker{t: t, dt: model.Float32})
	if got, want := x.CommStats(), cpu.CommStats(); !reflect.DeepEqual(got, want) {
		t.Fatalf("collective traffic differs from the CPU executor's:\nexecutor %v\nCPU      %v", got, want)
	}
}

func argmax(v []float32) int {
	best := 0
	for i, f := range v {
		if f > v[best] {
			best = i
		}
	}
	return best
}

// TestStepGreedy: the device-side argmax equals the argmax of Step's
// logits, for one rank and under TP (where the host takes it).
func TestStepGreedy(t *testing.T) {
	requireGPU(t)
	m, _ := loadFixture(t, fixture.Spec{Heads: 8, KVHeads: 2, Seed: 61})
	for _, plan := range []parallel.Plan{parallel.Single, {DP: 1, PP: 1, SP: 1, TP: 2}, {DP: 1, PP: 1, SP: 2, TP: 1}} {
		x := newExec(t, m.Config, m.Weights, Options{Plan: plan, DType: model.BFloat16, BlockSize: 4, NumBlocks: 128, MaxNumSeqs: 8})
		var b forward.Batch
		for i := 0; i < 5; i++ {
			blocks := []int{8 * i, 8*i + 1, 8*i + 2, 8*i + 3, 8*i + 4}
			b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: fixture.Tokens(70+i, 3+4*i, m.Config.Vocab), Blocks: blocks, NumLogits: 1 + i%2})
		}
		logits, err := x.Step(context.Background(), &b, parallel.Standard(plan))
		if err != nil {
			t.Fatal(err)
		}
		var want []int
		for i := 0; i < b.NumLogits(); i++ {
			want = append(want, argmax(logits[i*m.Config.Vocab:(i+1)*m.Config.Vocab]))
		}
		got, err := x.StepGreedy(context.Background(), &b, parallel.Standard(plan))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: StepGreedy %v, argmax of Step %v", plan, got, want)
		}
	}
}
