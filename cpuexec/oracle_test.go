package cpuexec

import (
	"context"
	"math"
	"testing"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/internal/oracle"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

// fixtureSpecs covers the architectures and storage formats the loader
// supports; every one must match the float64 oracle.
var fixtureSpecs = fixture.Foundation

type loaded struct {
	m   *model.Model
	ref *oracle.Model
	dir string // the fixture's directory
}

func load(t *testing.T, spec fixture.Spec) loaded {
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
	return loaded{m, ref, dir}
}

// assertClose checks max |got-want| ≤ 1e-4·max|want| over one logits row.
func assertClose(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
	if e := oracleRowError(got, want); e > 1e-4 {
		t.Fatalf("%s: logits %.3g from the oracle's (relative to the largest), beyond 1e-4", what, e)
	}
}

// oracleRowError is max |got − want| over a logits row, relative to the
// row's largest |want|.
func oracleRowError(got []float32, want []float64) float64 {
	maxAbs, maxDiff := 0.0, 0.0
	for i, w := range want {
		maxAbs = math.Max(maxAbs, math.Abs(w))
		maxDiff = math.Max(maxDiff, math.Abs(float64(got[i])-w))
	}
	return maxDiff / maxAbs
}

// seqState tracks one sequence's blocks across steps in a test.
type seqState struct {
	tokens []int
	done   int
	blocks []int
}

func TestLogitsMatchOracle(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, fx := range fixtureSpecs {
		t.Run(fx.Name, func(t *testing.T) {
			l := load(t, fx.Spec)
			cfg := l.m.Config
			r, err := NewExecutor(cfg, l.m.Weights, Options{BlockSize: 4, NumBlocks: 256, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			next := 0
			newSeq := func(n, seed int) *seqState {
				s := &seqState{tokens: fixture.Tokens(seed, n, cfg.Vocab)}
				for i := 0; i < (n+3)/4; i++ {
					s.blocks = append(s.blocks, next)
					next++
				}
				return s
			}
			ctx := context.Background()

			// One sequence, all positions.
			one := newSeq(37, 1)
			logits, err := r.Step(ctx, &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: one.tokens, Blocks: one.blocks, NumLogits: len(one.tokens)}}}, r.KVPlacement())
			if err != nil {
				t.Fatal(err)
			}
			want := l.ref.Logits(one.tokens)
			for p := range one.tokens {
				assertClose(t, "single sequence", logits[p*cfg.Vocab:(p+1)*cfg.Vocab], want[p])
			}

			// Varlen batch of fresh sequences.
			lens := []int{5, 1, 19, 8, 2}
			var b forward.Batch
			var seqs []*seqState
			for i, n := range lens {
				s := newSeq(n, 10+i)
				seqs = append(seqs, s)
				b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: s.tokens, Blocks: s.blocks, NumLogits: n})
			}
			logits, err = r.Step(ctx, &b, r.KVPlacement())
			if err != nil {
				t.Fatal(err)
			}
			row := 0
			for _, s := range seqs {
				want := l.ref.Logits(s.tokens)
				for p := range s.tokens {
					assertClose(t, "varlen batch", logits[row*cfg.Vocab:(row+1)*cfg.Vocab], want[p])
					row++
				}
			}

			// Chunked prefill of two sequences interleaved with decodes.
			a, c := newSeq(48, 20), newSeq(48, 21)
			steps := []struct{ a, c int }{{7, 3}, {9, 1}, {1, 13}, {1, 1}, {11, 1}, {1, 8}, {1, 1}, {1, 1}, {1, 6}, {8, 1}, {1, 6}}
			for _, st := range steps {
				b := forward.Batch{}
				for _, pair := range []struct {
					s *seqState
					n int
				}{{a, st.a}, {c, st.c}} {
					s := pair.s
					b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: s.tokens[s.done : s.done+pair.n], Pos: s.done, Blocks: s.blocks, NumLogits: 1})
					s.done += pair.n
				}
				logits, err := r.Step(ctx, &b, r.KVPlacement())
				if err != nil {
					t.Fatal(err)
				}
				for i, s := range []*seqState{a, c} {
					want := l.ref.Logits(s.tokens[:s.done])
					assertClose(t, "chunked prefill + decode", logits[i*cfg.Vocab:(i+1)*cfg.Vocab], want[s.done-1])
				}
			}
		})
	}
}

func TestGreedyMatchesOracle(t *testing.T) {
	if testing.Short() {
		t.Skip("64-step greedy oracle comparison is slow")
	}
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, fx := range fixtureSpecs {
		t.Run(fx.Name, func(t *testing.T) {
			l := load(t, fx.Spec)
			r, err := NewExecutor(l.m.Config, l.m.Weights, Options{BlockSize: 8, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			g, err := engine.NewEngine(engine.Options{Exec: r, Tokenizer: l.m.Tokenizer, Sched: sched.Config{MaxNumBatchedTokens: 5}})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Start()()
			prompt := fixture.Tokens(99, 11, l.m.Config.Vocab)
			req := engine.Request{Prompt: prompt, MaxTokens: 64, Sampling: sample.Params{Temperature: 0, Logprobs: -1}, IgnoreEOS: true}
			out, err := g.Generate(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := l.ref.Greedy(prompt, 64)
			for i := range want {
				if out.Tokens[i] != want[i] {
					t.Fatalf("token %d: got %d, oracle %d (got %v, want %v)", i, out.Tokens[i], want[i], out.Tokens, want)
				}
			}
			again, err := g.Generate(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(again.Tokens) != 64 || again.Text != out.Text {
				t.Fatalf("greedy generation is not deterministic")
			}
		})
	}
}
