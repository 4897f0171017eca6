package cpuexec

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

var equivalencePlans = []string{
	"tp=2", "tp=4", "tp=8", "sp=2", "sp=4", "sp=8", "sp=2,tp=2", "sp=4,tp=2", "sp=2,tp=4",
	"pp=2", "pp=2,tp=2", "dp=2", "dp=2,sp=2",
}

// parallelFixture is loadParallelFixture's checkpoint: 8 query heads and
// kvHeads KV heads over 3 layers.
func parallelFixture(kvHeads int) fixture.Spec {
	return fixture.Spec{Heads: 8, KVHeads: kvHeads, Layers: 3, Intermediate: 96, Seed: uint64(100 + kvHeads)}
}

func loadParallelFixture(t testing.TB, kvHeads int) *model.Model {
	t.Helper()
	dir, err := fixture.Dir(t.TempDir(), parallelFixture(kvHeads))
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.Options{DType: model.Float32}) // fp32 explicitly: the float32 path's exact equivalences
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// scenario is a fixed sequence of steps over several sequences: one long
// prefill, five sequences starting with prefill chunks, steps mixing
// chunks and decodes, and steps whose token count is not a multiple of SP.
type scenario struct {
	seqs  []*seqState
	steps [][]struct{ seq, n int }
}

func newScenario(vocab, replicas, blocksPerSeq int) *scenario {
	sc := &scenario{}
	lens := []int{60, 30, 30, 30, 30, 30}
	next := make([]int, replicas)
	for i, n := range lens {
		s := &seqState{tokens: fixture.Tokens(200+i, n, vocab)}
		rep := i % replicas
		for b := 0; b < blocksPerSeq; b++ {
			s.blocks = append(s.blocks, next[rep])
			next[rep]++
		}
		sc.seqs = append(sc.seqs, s)
	}
	type sn = struct{ seq, n int }
	sc.steps = [][]sn{
		{{0, 45}},
		{{1, 6}, {2, 1}, {3, 9}, {4, 3}, {5, 2}},
		{{1, 5}, {2, 1}, {3, 4}, {4, 1}, {5, 1}, {0, 1}},
		{{0, 1}, {1, 1}, {2, 1}},
		{{2, 7}, {4, 1}},
		{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}},
		{{5, 1}},
	}
	return sc
}

// batch builds step i; NumLogits covers every token of the step.
func (sc *scenario) batch(i, replicas int) forward.Batch {
	var b forward.Batch
	for _, st := range sc.steps[i] {
		s := sc.seqs[st.seq]
		b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: s.tokens[s.done : s.done+st.n], Pos: s.done, Blocks: s.blocks, NumLogits: st.n, Replica: st.seq % replicas})
	}
	return b
}

func (sc *scenario) advance(i int) {
	for _, st := range sc.steps[i] {
		sc.seqs[st.seq].done += st.n
	}
}

func assertLogitsClose(t *testing.T, what string, got, want []float32, vocab int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
	for r := 0; r < len(want)/vocab; r++ {
		row := make([]float64, vocab)
		for i := range row {
			row[i] = float64(want[r*vocab+i])
		}
		assertClose(t, fmt.Sprintf("%s row %d", what, r), got[r*vocab:(r+1)*vocab], row)
	}
}

// TestPlanEquivalence runs the same steps under every plan and compares the
// logits with one rank's.
func TestPlanEquivalence(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, kv := range []int{4, 2, 1} {
		m := loadParallelFixture(t, kv)
		single, err := NewExecutor(m.Config, m.Weights, Options{BlockSize: 4, NumBlocks: 200, Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		ref := newScenario(m.Config.Vocab, 1, 16)
		var want [][]float32
		for i := range ref.steps {
			b := ref.batch(i, 1)
			logits, err := single.Step(context.Background(), &b, parallel.Standard(parallel.Single))
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, append([]float32(nil), logits...))
			ref.advance(i)
		}
		for _, ps := range equivalencePlans {
			t.Run(fmt.Sprintf("kv=%d/%s", kv, ps), func(t *testing.T) {
				plan, err := parallel.Parse(ps)
				if err != nil {
					t.Fatal(err)
				}
				e, err := NewExecutor(m.Config, m.Weights, Options{Plan: plan, BlockSize: 4, NumBlocks: 200, Pool: pool})
				if err != nil {
					t.Fatal(err)
				}
				sc := newScenario(m.Config.Vocab, plan.DP, 16)
				for i := range sc.steps {
					b := sc.batch(i, plan.DP)
					got, err := e.Step(context.Background(), &b, parallel.Standard(plan))
					if err != nil {
						t.Fatal(err)
					}
					assertLogitsClose(t, fmt.Sprintf("step %d", i), got, want[i], m.Config.Vocab)
					sc.advance(i)
				}
			})
		}
	}
}

// greedyRun decodes every sequence of a 3-sequence batch greedily for n
// steps after prefilling, choosing each step's plan with choose.
func greedyRun(t *testing.T, e *Executor, m *model.Model, n int, choose func(step, tokens int) parallel.Placement) [][]int {
	t.Helper()
	replicas := e.KVPlacement().Plan.DP
	prompts := [][]int{fixture.Tokens(1, 23, m.Config.Vocab), fixture.Tokens(2, 9, m.Config.Vocab), fixture.Tokens(3, 14, m.Config.Vocab)}
	seqs := make([]*seqState, len(prompts))
	next := make([]int, replicas)
	for i, p := range prompts {
		seqs[i] = &seqState{tokens: append([]int(nil), p...)}
		for b := 0; b < 32; b++ {
			seqs[i].blocks = append(seqs[i].blocks, next[i%replicas])
			next[i%replicas]++
		}
	}
	out := make([][]int, len(prompts))
	for step := 0; step < n; step++ {
		var b forward.Batch
		tokens := 0
		for i, s := range seqs {
			b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: s.tokens[s.done:], Pos: s.done, Blocks: s.blocks, NumLogits: 1, Replica: i % replicas})
			tokens += len(s.tokens) - s.done
		}
		logits, err := e.Step(context.Background(), &b, choose(step, tokens))
		if err != nil {
			t.Fatal(err)
		}
		v := m.Config.Vocab
		for i, s := range seqs {
			s.done = len(s.tokens)
			tok := tensor.MaxIndex(logits[i*v : (i+1)*v])
			s.tokens = append(s.tokens, tok)
			out[i] = append(out[i], tok)
		}
	}
	return out
}

func TestGreedyUnderEveryPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("64 greedy steps under every plan")
	}
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, kv := range []int{4, 2, 1} {
		m := loadParallelFixture(t, kv)
		single, err := NewExecutor(m.Config, m.Weights, Options{BlockSize: 4, NumBlocks: 200, Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		want := greedyRun(t, single, m, 64, func(int, int) parallel.Placement { return parallel.Standard(parallel.Single) })
		for _, ps := range equivalencePlans {
			t.Run(fmt.Sprintf("kv=%d/%s", kv, ps), func(t *testing.T) {
				plan, _ := parallel.Parse(ps)
				e, err := NewExecutor(m.Config, m.Weights, Options{Plan: plan, BlockSize: 4, NumBlocks: 200, Pool: pool})
				if err != nil {
					t.Fatal(err)
				}
				got := greedyRun(t, e, m, 64, func(int, int) parallel.Placement { return parallel.Standard(plan) })
				for i := range want {
					for j := range want[i] {
						if got[i][j] != want[i][j] {
							t.Fatalf("sequence %d token %d: %d, single rank %d", i, j, got[i][j], want[i][j])
						}
					}
				}
			})
		}
	}
}

// TestShiftSwitching prefills under the base (sp=4, tp=2) and decodes
// switching between the base and its shift (tp=8) at random steps; tokens
// must equal one rank's, and each step must move exactly the activations
// its plan's formulas say, so no KV byte moved between ranks.
func TestShiftSwitching(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, kv := range []int{4, 2, 1} {
		t.Run(fmt.Sprintf("kv=%d", kv), func(t *testing.T) {
			m := loadParallelFixture(t, kv)
			base := parallel.Plan{DP: 1, PP: 1, SP: 4, TP: 2}
			shift := parallel.ShiftPlacement(base)
			single, err := NewExecutor(m.Config, m.Weights, Options{BlockSize: 4, NumBlocks: 200, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			e, err := NewExecutor(m.Config, m.Weights, Options{Placements: []parallel.Placement{parallel.Standard(base), shift}, BlockSize: 4, NumBlocks: 200, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			steps := 64
			if testing.Short() {
				steps = 16
			}
			want := greedyRun(t, single, m, steps, func(int, int) parallel.Placement { return parallel.Standard(parallel.Single) })
			rng := rand.New(rand.NewPCG(uint64(kv), 1))
			used := map[string]int{}
			var prev comm.Stats
			var prevPlan parallel.Placement
			checkShiftStep := func() {
				// A shift step over 3 decoding sequences moves exactly its
				// activations: the embedding's and two per-layer TP
				// all-reduces of [3, hidden] and the LM head's all-gather
				// of 3 logits rows; no all-to-all, no send, and no KV.
				now := e.CommStats()
				if prevPlan.Name == shift.Name {
					delta := now.Sub(prev)
					c := m.Config
					ar, _ := comm.AllReduceBytes(3*c.Hidden, 8, 0, 4)
					counts := make([]int, 8)
					for i := range counts {
						counts[i] = 3 * parallel.Even(c.Vocab, 8, i).Len()
					}
					for r := 0; r < 8; r++ {
						ag, _ := comm.AllGatherBytes(counts, base.Coord(r).TP*4+base.Coord(r).SP, 4)
						arGot := delta.Sum(func(k comm.Key) bool { return k.Rank == r && k.Kind == comm.KindAllReduce }).SentBytes
						agGot := delta.Sum(func(k comm.Key) bool { return k.Rank == r && k.Kind == comm.KindAllGather }).SentBytes
						if want := int64(1+2*c.Layers) * ar; arGot != want || agGot != ag || delta.Rank(r).SentBytes != arGot+agGot {
							t.Fatalf("shift step, rank %d: all-reduce %d (want %d), all-gather %d (want %d), total %d",
								r, arGot, want, agGot, ag, delta.Rank(r).SentBytes)
						}
					}
				}
				prev = now
			}
			got := greedyRun(t, e, m, steps, func(step, tokens int) parallel.Placement {
				checkShiftStep()
				p := parallel.Standard(base)
				if step > 0 && rng.IntN(2) == 0 {
					p = shift
				}
				used[p.Name]++
				prevPlan = p
				return p
			})
			checkShiftStep()
			if used["tp=8"] == 0 || used["sp=4,tp=2"] < 2 {
				t.Fatalf("plans used: %v", used)
			}
			for i := range want {
				for j := range want[i] {
					if got[i][j] != want[i][j] {
						t.Fatalf("sequence %d token %d: %d, single rank %d (plans %v)", i, j, got[i][j], want[i][j], used)
					}
				}
			}
			if got := e.PlanSteps(); got["tp=8"] != used["tp=8"] || got["sp=4,tp=2"] != used["sp=4,tp=2"] {
				t.Fatalf("executor counted %v, test chose %v", got, used)
			}
		})
	}
}
