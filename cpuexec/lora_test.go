package cpuexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/internal/oracle"
	"github.com/gearboxlm/gearbox/lora"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

// loraFixture writes parallelFixture(2)'s model and two adapters: one on
// every projection of every layer, and one of rank 8 with rsLoRA's scale
// on q, v and down of layers 0 and 2. It returns the model, the adapters
// and the oracle of the base and of each adapter merged into it.
func loraFixture(t *testing.T) (*model.Model, []*lora.Adapter, []*oracle.Model) {
	t.Helper()
	spec := parallelFixture(2)
	l := load(t, spec)
	m, dir := l.m, l.dir
	t.Cleanup(func() { m.Close() })
	refs := []*oracle.Model{l.ref}
	var adapters []*lora.Adapter
	for i, l := range []fixture.LoRA{
		{Rank: 4, Seed: 1},
		{Rank: 8, Alpha: 16, RSLoRA: true, Modules: []string{"self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"}, Layers: []int{0, 2}, Seed: 2},
	} {
		ad := filepath.Join(t.TempDir(), fmt.Sprint("adapter", i))
		if err := os.Mkdir(ad, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := fixture.WriteLoRA(ad, spec, l); err != nil {
			t.Fatal(err)
		}
		a, err := lora.Load(fmt.Sprint("a", i), ad, m.Config, 16)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := oracle.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := ref.MergeLoRA(ad); err != nil {
			t.Fatal(err)
		}
		adapters, refs = append(adapters, a), append(refs, ref)
	}
	return m, adapters, refs
}

// TestLoRAMatchesOracle runs a batch of sequences of two adapters and of
// none (a prefill with every position's logits, then decode steps) under
// every kind of plan, and checks each sequence's logits against the
// float64 oracle of its adapter merged into the weights, as PEFT merges
// it. The adapters change the logits far beyond the tolerance.
func TestLoRAMatchesOracle(t *testing.T) {
	m, adapters, refs := loraFixture(t)
	cfg := m.Config
	pool := tensor.NewPool(2)
	defer pool.Close()
	prompt := fixture.Tokens(3, 11, cfg.Vocab)
	if e := oracleRowError(toF32(refs[1].Logits(prompt)[10]), refs[0].Logits(prompt)[10]); e < 0.05 {
		t.Fatalf("the adapter moves the logits by %.3g only", e)
	}
	for _, ps := range []string{"tp=1", "tp=2", "tp=4", "pp=3", "sp=2", "sp=2,tp=2", "pp=2,tp=2"} {
		t.Run(ps, func(t *testing.T) {
			plan, err := parallel.Parse(ps)
			if err != nil {
				t.Fatal(err)
			}
			e, err := NewExecutor(cfg, m.Weights, Options{Plan: plan, BlockSize: 4, NumBlocks: 64, Pool: pool, Adapters: adapters})
			if err != nil {
				t.Fatal(err)
			}
			// Sequence i runs adapter order[i]; two share adapter 1.
			order := []int{1, 0, 2, 1}
			seqs := make([]*seqState, len(order))
			var b forward.Batch
			for i, a := range order {
				s := &seqState{tokens: fixture.Tokens(3+i, 5+3*i, cfg.Vocab)}
				if i == 0 {
					s.tokens = prompt
				}
				for j := range 8 {
					s.blocks = append(s.blocks, 8*i+j)
				}
				seqs[i] = s
				b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: s.tokens, Blocks: s.blocks, NumLogits: len(s.tokens), Adapter: a})
			}
			logits, err := e.Step(context.Background(), &b, parallel.Standard(plan))
			if err != nil {
				t.Fatal(err)
			}
			row := 0
			for i, s := range seqs {
				want := refs[order[i]].Logits(s.tokens)
				for p := range s.tokens {
					assertClose(t, fmt.Sprintf("seq %d (adapter %d) position %d", i, order[i], p), logits[row*cfg.Vocab:(row+1)*cfg.Vocab], want[p])
					row++
				}
				s.done = len(s.tokens)
			}
			for step := range 3 {
				var b forward.Batch
				for i, s := range seqs {
					s.tokens = append(s.tokens, (7*step+i)%cfg.Vocab)
					b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: s.tokens[s.done:], Pos: s.done, Blocks: s.blocks, NumLogits: 1, Adapter: order[i]})
					s.done++
				}
				logits, err := e.Step(context.Background(), &b, parallel.Standard(plan))
				if err != nil {
					t.Fatal(err)
				}
				for i, s := range seqs {
					want := refs[order[i]].Logits(s.tokens)
					assertClose(t, fmt.Sprintf("decode %d, seq %d", step, i), logits[i*cfg.Vocab:(i+1)*cfg.Vocab], want[len(want)-1])
				}
			}
			bad := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: []int{1}, Blocks: []int{60}, NumLogits: 1, Adapter: 3}}}
			if _, err := e.Step(context.Background(), &bad, parallel.Standard(plan)); err == nil || !strings.Contains(err.Error(), "adapter 3") {
				t.Errorf("a third adapter of two: %v", err)
			}
		})
	}
}

func toF32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// TestLoRAEngine serves greedy requests of both adapters and of none at
// once through the engine under tp=2, twice each with the prefix cache
// on, and checks every output against the float64 oracle of its adapter:
// a request of one adapter never starts from blocks another adapter (or
// the base model) cached, while requests of the same adapter do. A
// request naming an adapter the runner lacks is refused at Submit.
func TestLoRAEngine(t *testing.T) {
	m, adapters, refs := loraFixture(t)
	pool := tensor.NewPool(2)
	defer pool.Close()
	x, err := NewExecutor(m.Config, m.Weights, Options{Plan: parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2}, BlockSize: 4, NumBlocks: 128, Pool: pool, Adapters: adapters})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.NewEngine(engine.Options{Exec: x, Sched: sched.Config{MaxNumBatchedTokens: 16, EnablePrefixCaching: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Start()()
	prompt := fixture.Tokens(42, 17, m.Config.Vocab) // four full blocks to share
	const n = 12
	want := make([][]int, len(refs))
	for a, ref := range refs {
		want[a] = ref.Greedy(prompt, n)
	}
	if slices.Equal(want[0], want[1]) || slices.Equal(want[0], want[2]) {
		t.Fatalf("the adapters do not change the greedy output: %v", want)
	}
	for round := range 2 {
		var wg sync.WaitGroup
		for _, a := range []int{1, 0, 2} {
			wg.Go(func() {
				out, err := e.Generate(context.Background(), engine.Request{Prompt: prompt, MaxTokens: n, Adapter: a, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if !slices.Equal(out.Tokens, want[a]) {
					t.Errorf("round %d, adapter %d: %v, oracle %v", round, a, out.Tokens, want[a])
				}
				if round == 1 && out.Usage.CachedTokens != 16 {
					t.Errorf("round 1, adapter %d: %d prompt tokens from the cache, want its own 16", a, out.Usage.CachedTokens)
				}
			})
		}
		wg.Wait()
	}
	if _, err := e.Submit(engine.Request{Prompt: prompt, MaxTokens: 1, Adapter: 3}); !errors.Is(err, engine.ErrUnknownAdapter) {
		t.Errorf("adapter 3 of 2: %v", err)
	}
}

// TestLoRASeesaw serves both adapters and the base model under Seesaw
// (prefill under pp=2, decode under tp=2, weights re-sharded from the
// host copy, KV parked on the host store between the phases), where each
// rank's slice of an update follows the placement it runs: every greedy
// output equals the oracle's of its adapter.
func TestLoRASeesaw(t *testing.T) {
	m, adapters, refs := loraFixture(t)
	pool := tensor.NewPool(2)
	defer pool.Close()
	pol, err := policy.NewSeesaw(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1}, parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	x, err := NewExecutor(m.Config, m.Weights, Options{Placements: pol.Placements(), BlockSize: 4, NumBlocks: 32, HostBlocks: 16, WeightsFromHost: true, Pool: pool, Adapters: adapters})
	if err != nil {
		t.Fatal(err)
	}
	var reqs []engine.Request
	for i, a := range []int{1, 0, 2, 1, 2} {
		reqs = append(reqs, engine.Request{ID: fmt.Sprint("r", i), Prompt: fixture.Tokens(60+i, 6+i, m.Config.Vocab), MaxTokens: 6, Adapter: a,
			IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}})
	}
	got := serveAll(t, engine.Options{Exec: x, Policy: pol}, reqs, true)
	for i, r := range reqs {
		if want := refs[r.Adapter].Greedy(r.Prompt, r.MaxTokens); !slices.Equal(got[i], want) {
			t.Errorf("%s (adapter %d): %v, oracle %v", r.ID, r.Adapter, got[i], want)
		}
	}
	if st := x.PlanSteps(); st[pol.Placements()[1].Name] == 0 || st[pol.Placements()[0].Name] == 0 {
		t.Fatalf("steps by placement %v: want both phases", st)
	}
}

// TestLoRAFree installs an adapter at run time, refuses to free one a
// live request runs with, frees it once the request has ended, and then
// refuses requests for it at Submit (not in a step, where it would fail
// the step's other requests).
func TestLoRAFree(t *testing.T) {
	m, adapters, refs := loraFixture(t)
	x, err := NewExecutor(m.Config, m.Weights, Options{BlockSize: 4, NumBlocks: 64, Adapters: adapters[:1]})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.NewEngine(engine.Options{Exec: x})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.SetAdapter(3, adapters[1]); err == nil {
		t.Fatal("id 3 installed after 1")
	}
	if err := x.SetAdapter(2, adapters[1]); err != nil || !x.HasAdapter(2) {
		t.Fatalf("install as 2: %v", err)
	}
	prompt := fixture.Tokens(7, 9, m.Config.Vocab)
	st, err := e.Submit(engine.Request{Prompt: prompt, MaxTokens: 4, Adapter: 2, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}})
	if err != nil {
		t.Fatal(err)
	}
	free := func() error { return x.SetAdapter(2, nil) }
	if e.FreeAdapter(2, free) || !x.HasAdapter(2) {
		t.Fatal("freed an adapter a waiting request runs with")
	}
	defer e.Start()()
	var got []int
	for {
		ev, err := st.Recv(context.Background())
		if err != nil {
			break
		}
		got = append(got, ev.Tokens...)
	}
	if want := refs[2].Greedy(prompt, 4); !slices.Equal(got, want) {
		t.Fatalf("adapter installed at run time: %v, oracle %v", got, want)
	}
	if !e.FreeAdapter(2, free) || x.HasAdapter(2) || !x.HasAdapter(1) {
		t.Fatal("the adapter was not freed once its request ended")
	}
	if _, err := e.Submit(engine.Request{Prompt: prompt, MaxTokens: 1, Adapter: 2}); !errors.Is(err, engine.ErrUnknownAdapter) {
		t.Fatalf("a request for a freed adapter: %v", err)
	}
}

// BenchmarkLoRAStep prices a decode step of 8 sequences (64 tokens of
// context) on a 4-layer model of hidden 512, with every sequence on a
// rank-16 adapter of all seven projections, on two of eight, and on
// none.
func BenchmarkLoRAStep(b *testing.B) {
	spec := fixture.Spec{Hidden: 512, Intermediate: 1536, Layers: 4, Heads: 8, Vocab: 512, MaxPositions: 256, Seed: 9}
	dir, err := fixture.Dir(b.TempDir(), spec)
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.Load(dir, model.Options{DType: model.Float32})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ad := b.TempDir()
	if err := fixture.WriteLoRA(ad, spec, fixture.LoRA{Rank: 16, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	a, err := lora.Load("a", ad, m.Config, 16)
	if err != nil {
		b.Fatal(err)
	}
	pool := tensor.NewPool(0)
	defer pool.Close()
	e, err := NewExecutor(m.Config, m.Weights, Options{BlockSize: 16, NumBlocks: 8 * 8, Pool: pool, Adapters: []*lora.Adapter{a}})
	if err != nil {
		b.Fatal(err)
	}
	prefill := forward.Batch{}
	for i := range 8 {
		prefill.Seqs = append(prefill.Seqs, forward.SeqBatch{Tokens: fixture.Tokens(i, 64, spec.Vocab), Blocks: []int{8 * i, 8*i + 1, 8*i + 2, 8*i + 3, 8*i + 4}, NumLogits: 1})
	}
	if _, err := e.Step(context.Background(), &prefill, e.KVPlacement()); err != nil {
		b.Fatal(err)
	}
	for _, adapted := range []int{0, 2, 8} {
		b.Run(fmt.Sprintf("adapted=%d", adapted), func(b *testing.B) {
			step := forward.Batch{}
			for i, s := range prefill.Seqs {
				ad := 0
				if i < adapted {
					ad = 1
				}
				step.Seqs = append(step.Seqs, forward.SeqBatch{Tokens: []int{7}, Pos: 64, Blocks: s.Blocks, NumLogits: 1, Adapter: ad})
			}
			for b.Loop() {
				if _, err := e.Step(context.Background(), &step, e.KVPlacement()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
