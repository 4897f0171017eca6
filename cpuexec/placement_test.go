package cpuexec

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// reversedStages is the toy placement of the tests: pp=2,tp=2 with the
// stages on the ranks in reverse order.
func reversedStages(t testing.TB) parallel.Placement {
	t.Helper()
	p, err := fixture.ReversedStages(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestToyPlacementMatchesOracle runs the scenario steps under the
// reversed-stage placement, beside the standard pp=2,tp=2 in the same
// executor, and checks every logits row against the float64 oracle.
func TestToyPlacementMatchesOracle(t *testing.T) {
	for _, kv := range []int{4, 1} {
		t.Run(fmt.Sprintf("kv=%d", kv), func(t *testing.T) {
			l := load(t, fixture.Spec{Heads: 8, KVHeads: kv, Layers: 3, Intermediate: 96, Seed: uint64(300 + kv)})
			toy := reversedStages(t)
			std := parallel.Standard(toy.Plan)
			e, err := NewExecutor(l.m.Config, l.m.Weights, Options{Placements: []parallel.Placement{toy}, BlockSize: 4, NumBlocks: 200})
			if err != nil {
				t.Fatal(err)
			}
			both, err := NewExecutor(l.m.Config, l.m.Weights, Options{Placements: []parallel.Placement{toy, std}, NumBlocks: 8})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := both.Step(context.Background(), &forward.Batch{}, std); err == nil || !strings.Contains(err.Error(), "transition") {
				t.Fatalf("a step under a placement with other KV slices than the cache's: %v", err)
			}
			if _, err := NewExecutor(l.m.Config, l.m.Weights, Options{Placements: []parallel.Placement{toy, toy}}); err == nil {
				t.Fatal("two placements of one name accepted")
			}
			if _, err := e.Step(context.Background(), &forward.Batch{}, std); err == nil {
				t.Fatal("a step under a placement the executor does not hold ran")
			}
			vocab := l.m.Config.Vocab
			sc := newScenario(vocab, 1, 16)
			for i := range sc.steps {
				b := sc.batch(i, 1)
				got, err := e.Step(context.Background(), &b, toy)
				if err != nil {
					t.Fatal(err)
				}
				row := 0
				for _, st := range sc.steps[i] {
					s := sc.seqs[st.seq]
					want := l.ref.Logits(s.tokens[:s.done+st.n])
					for j := 0; j < st.n; j++ {
						assertClose(t, fmt.Sprintf("step %d seq %d token %d", i, st.seq, j), got[row*vocab:(row+1)*vocab], want[s.done+j])
						row++
					}
				}
				sc.advance(i)
			}
			if e.PlanSteps()[toy.Name] != len(sc.steps) {
				t.Fatalf("steps counted %v", e.PlanSteps())
			}
			// The stages really ran reversed: ranks 2 and 3 (the first
			// stage) sent the residual, ranks 0 and 1 received it.
			st := e.CommStats()
			for r := 0; r < 4; r++ {
				sent := st.Sum(func(k comm.Key) bool { return k.Rank == r && k.Kind == comm.KindSend }).SentBytes
				recv := st.Sum(func(k comm.Key) bool { return k.Rank == r && k.Kind == comm.KindRecv }).RecvBytes
				if first := r >= 2; (sent > 0) != first || (recv > 0) == first {
					t.Fatalf("rank %d sent %d and received %d bytes between stages", r, sent, recv)
				}
			}
		})
	}
}

// TestTransitionPPToTP fills a pp=2 executor's KV cache, moves it to tp=2
// (whose shards it does not hold) and back, and checks that every rank's
// KV slice and weight shard arrive bit-exact, that the bytes counted by
// comm are the plan's, and that decoding on under tp=2 gives the oracle's
// tokens.
func TestTransitionPPToTP(t *testing.T) {
	l := load(t, fixture.Spec{Heads: 8, KVHeads: 4, Layers: 4, Intermediate: 96, AttentionBias: true, Seed: 310})
	cfg := l.m.Config
	pp := parallel.Standard(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1})
	tp := parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2})
	pool := tensor.NewPool(2)
	defer pool.Close()
	const blocks = 24
	e, err := NewExecutor(cfg, l.m.Weights, Options{Placements: []parallel.Placement{pp}, BlockSize: 4, NumBlocks: blocks, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step(context.Background(), &forward.Batch{}, tp); err == nil {
		t.Fatal("a step under a placement not held ran")
	}
	prompt := fixture.Tokens(7, 21, cfg.Vocab)
	table := []int{3, 9, 4, 11, 17, 5, 0, 22, 1, 2}
	b := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: prompt, Blocks: table, NumLogits: 1}}}
	logits, err := e.Step(context.Background(), &b, pp)
	if err != nil {
		t.Fatal(err)
	}
	tokens := append(slices.Clone(prompt), tensor.MaxIndex(logits))

	before := globalKV(e)
	stats := e.CommStats()
	st, err := e.Transition(context.Background(), tp)
	if err != nil {
		t.Fatal(err)
	}
	if e.KVPlacement().Name != tp.Name {
		t.Fatalf("KV under %s after the transition", e.KVPlacement())
	}
	assertKVEqual(t, "pp=2 → tp=2", globalKV(e), before)
	for r := range tp.Coords {
		want := parallel.NewShard(nil, cfg, l.m.Weights, tp, r)
		got := e.held[tp.Name].shards[r]
		for _, p := range tp.Pieces(cfg, r) {
			if p.Tensor == parallel.TKV {
				continue
			}
			for layer := p.Layers.Lo; layer < max(p.Layers.Hi, p.Layers.Lo+1); layer++ {
				if !p.Tensor.Layered() {
					layer = -1
				}
				if g, w := pieceValues(got, p.Tensor, layer), pieceValues(want, p.Tensor, layer); !slices.Equal(g, w) {
					t.Fatalf("rank %d %s layer %d: shard differs from the tp=2 cut of the weights", r, p.Tensor, layer)
				}
				if layer < 0 {
					break
				}
			}
		}
	}

	// Bytes: each tp=2 rank needs the KV of all 4 layers for its 2 KV
	// heads; half of that (the other stage's layers) comes from the peer.
	// Its weights: the other stage's layers of its TP slice, and the
	// vocabulary half of the embedding or LM head it did not hold.
	kvPerHeadLayer := int64(2 * blocks * 4 * cfg.HeadDim * 4)
	if want := 2 * (2 * 2) * kvPerHeadLayer; st.KVBytes != want {
		t.Fatalf("KV bytes moved %d, want %d", st.KVBytes, want)
	}
	delta := e.CommStats().Sub(stats)
	moved := delta.Sum(func(k comm.Key) bool { return k.Group == "transition" && k.Kind == comm.KindSend }).SentBytes
	recv := delta.Sum(func(k comm.Key) bool { return k.Group == "transition" && k.Kind == comm.KindRecv }).RecvBytes
	if moved != st.KVBytes+st.WeightBytes || recv != moved {
		t.Fatalf("comm counted %d sent, %d received; the transition says KV %d + weights %d", moved, recv, st.KVBytes, st.WeightBytes)
	}
	var wantWeights int64
	for r := range tp.Coords {
		for _, p := range tp.Pieces(cfg, r) {
			if p.Tensor == parallel.TKV {
				continue
			}
			n := p.Elems()
			if p.Tensor.Layered() {
				n /= 2 // the layers of the stage the rank did not run
			} else if p.Tensor == parallel.TNorm && r == 1 {
				n = 0 // rank 1 ran the last stage, norm included
			} else if p.Tensor != parallel.TNorm {
				n = 0
				if (p.Tensor == parallel.TEmbed) != (r == 0) { // the table the rank's stage did not hold
					n = p.Elems()
				}
			}
			wantWeights += 4 * n
		}
	}
	if st.WeightBytes != wantWeights {
		t.Fatalf("weight bytes moved %d, want %d", st.WeightBytes, wantWeights)
	}

	// Decode on under tp=2; the tokens are the oracle's.
	want := l.ref.Greedy(prompt, 6)
	for i := 1; i < len(want); i++ {
		b := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokens[len(tokens)-1:], Pos: len(tokens) - 1, Blocks: table, NumLogits: 1}}}
		logits, err := e.Step(context.Background(), &b, tp)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tensor.MaxIndex(logits))
	}
	if got := tokens[len(prompt):]; !slices.Equal(got, want) {
		t.Fatalf("tokens after the transition %v, oracle %v", got, want)
	}

	// Back to pp=2, whose shards the executor kept: only KV moves, and the
	// tp=2 shards a transition built are released.
	before = globalKV(e)
	st, err = e.Transition(context.Background(), pp)
	if err != nil {
		t.Fatal(err)
	}
	assertKVEqual(t, "tp=2 → pp=2", globalKV(e), before)
	if st.WeightBytes != 0 || st.KVBytes != 2*(2*2)*kvPerHeadLayer {
		t.Fatalf("back to pp=2: %+v", st)
	}
	if _, ok := e.held[tp.Name]; ok || e.Transitions() != 2 {
		t.Fatalf("held %v after 2 transitions (%d)", e.order, e.Transitions())
	}
}

// globalKV reads every rank's KV cache into one map keyed by (layer, KV
// head, block): keys then values of the block's slots, as blockKV reads
// them.
func globalKV(e *Executor) map[[3]int][]float32 {
	out := map[[3]int][]float32{}
	for r, rk := range e.ranks {
		s := e.kvAt.KVSlice(e.cfg, r)
		for l := s.Layers.Lo; l < s.Layers.Hi; l++ {
			for h := s.Heads.Lo; h < s.Heads.Hi; h++ {
				for b := 0; b < e.kv.NumBlocks; b++ {
					kv := blockKV(rk.cache, l-s.Layers.Lo, b, h-s.Heads.Lo)
					key := [3]int{l, h, b}
					if prev, ok := out[key]; ok && !slices.Equal(prev, kv) {
						panic(fmt.Sprintf("ranks disagree on replicated KV %v", key))
					}
					out[key] = kv
				}
			}
		}
	}
	return out
}

// blockKV is the keys then the values of one head of one block of c: a
// float32 cache's values, a BF16 or F16 cache's stored bit patterns each
// as a float32 integer, so that equal slices mean bit-identical elements
// (NaN payloads included).
func blockKV(c *kvcache.Cache, layer, block, head int) []float32 {
	if !c.Half() {
		return append(slices.Clone(c.Keys(layer, block, head)), c.Values(layer, block, head)...)
	}
	return bitsKV(c.HalfKeys(layer, block, head), c.HalfValues(layer, block, head))
}

// bitsKV is keys then values of 16-bit patterns, each as a float32
// integer.
func bitsKV(keys, values []uint16) []float32 {
	out := make([]float32, 0, len(keys)+len(values))
	for _, h := range slices.Concat(keys, values) {
		out = append(out, float32(h))
	}
	return out
}

func assertKVEqual(t *testing.T, what string, got, want map[[3]int][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d KV (layer, head, block) entries, want %d", what, len(got), len(want))
	}
	nonzero := false
	for k, w := range want {
		if !slices.Equal(got[k], w) {
			t.Fatalf("%s: KV of layer %d head %d block %d differs", what, k[0], k[1], k[2])
		}
		nonzero = nonzero || slices.ContainsFunc(w, func(x float32) bool { return x != 0 })
	}
	if !nonzero {
		t.Fatalf("%s: the KV cache is empty; the test moved nothing", what)
	}
}

// pieceValues is tensor t of a shard's layer as float32 values: a vector
// as held, a matrix widened or dequantized (exact), with its format.
func pieceValues(sh *parallel.Shard, t parallel.Tensor, layer int) []float32 {
	if !t.Matrix() {
		return *sh.Slot(t, layer)
	}
	m := *sh.MatSlot(t, layer)
	n, k := m.Shape()
	out := make([]float32, n*k)
	for j := range n {
		m.Row(j, out[j*k:(j+1)*k])
	}
	return append(out, float32(m.DType()))
}
