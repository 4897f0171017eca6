package cpuexec

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/tensor"
)

// csaRun prefills one 96-token prompt over 4 ranks (24-token SPTs) with
// CSA and returns every layer's traces by layer, the step's all-to-all
// bytes, and the model.
func csaRun(t *testing.T, m *model.Model, csa CSA, pool *tensor.Pool) (map[int][]CSATrace, int64) {
	t.Helper()
	const n, prompt = 4, 96
	c, err := NewCSPS(m.Config, m.Weights, CSPSOptions{Ranks: n, BlockSize: 4, PerRank: 32, CSA: csa, Options: Options{Pool: pool}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	traces := map[int][]CSATrace{}
	c.csaTrace = func(tr CSATrace) {
		mu.Lock()
		defer mu.Unlock()
		traces[tr.Layer] = append(traces[tr.Layer], tr)
	}
	ranks, counts := spread(prompt/4, n)
	blocks := newSPAlloc(n, 32).table(ranks, counts)
	b := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: fixture.Tokens(5, prompt, m.Config.Vocab), Blocks: blocks, NumLogits: 1}}}
	if _, err := c.Step(context.Background(), &b, c.Placement()); err != nil {
		t.Fatal(err)
	}
	if len(traces) != m.Config.Layers {
		t.Fatalf("traces of %d layers, want %d", len(traces), m.Config.Layers)
	}
	return traces, c.CommStats().Kind(comm.KindAllToAll).SentBytes
}

// csaToken is one token's rows of one layer, gathered from the traces.
type csaToken struct {
	rank, pos int
	q, k, v   []float32
	m         []int
	out       []float32
}

func gatherCSA(trs []CSATrace) []csaToken {
	var out []csaToken
	for _, tr := range trs {
		for i := range tr.Pos {
			out = append(out, csaToken{rank: tr.Rank, pos: tr.Pos[i], q: tr.Q[i], k: tr.K[i], v: tr.V[i], m: tr.M[i], out: tr.Out[i]})
		}
	}
	byPos := make([]csaToken, len(out))
	for _, x := range out {
		byPos[x.pos] = x
	}
	return byPos
}

// csaRef is, in float64, query t's head h output with each key k ≤ t
// weighted by c(t, k) (multi true: the number of levels at which both are
// in one segment and kept; false: 1, dense attention), and the weights.
func csaRef(toks []csaToken, csa CSA, n, t, h, d int, multi bool) (o []float64, w []float64) {
	o = make([]float64, d)
	w = make([]float64, t+1)
	q := toks[t].q[h*d : (h+1)*d]
	scores := make([]float64, t+1)
	mx := math.Inf(-1)
	for k := 0; k <= t; k++ {
		var s float64
		for i := range q {
			s += float64(q[i]) * float64(toks[k].k[h*d+i])
		}
		scores[k] = s / math.Sqrt(float64(d))
		mx = math.Max(mx, scores[k])
	}
	var z float64
	for k := 0; k <= t; k++ {
		c := 1.0
		if multi {
			c = 0
			for v := 1; v <= csa.Levels; v++ {
				lo, hi := csa.Segment(v, toks[t].rank, n)
				if toks[k].rank >= lo && toks[k].rank < hi && toks[t].m[h] >= v && toks[k].m[h] >= v {
					c++
				}
			}
		}
		w[k] = c * math.Exp(scores[k]-mx)
		z += w[k]
	}
	for k := 0; k <= t; k++ {
		w[k] /= z
		for i := range o {
			o[i] += w[k] * float64(toks[k].v[h*d+i])
		}
	}
	return o, w
}

func loadCSAModel(t *testing.T, kv int) *model.Model {
	t.Helper()
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Heads: 8, KVHeads: kv, Layers: 4, Intermediate: 96, Seed: uint64(40 + kv)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.Options{DType: model.Float32})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCSAMatchesMultiplicityReference (T5, T6, T7): with 2 and 3 levels
// over 4 ranks, at drop 0 every layer's merged attention equals the
// reference that counts a key once per level where it is visible (1e-5)
// and differs from dense attention (G1); at drop 0.5 it equals the
// reference for the kept sets used, the error against dense attention
// stays within ‖π − π'‖₁·max‖v‖₂ and is reported per layer with the
// dropped softmax mass; each (layer, head, level, SPT) keeps
// n − round(p·n) tokens (all in the first and last layer, all at level
// 1); and the all-to-all bytes equal what the kept rows and the level
// segments say.
func TestCSAMatchesMultiplicityReference(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	const n = 4
	for _, kv := range []int{8, 2} {
		m := loadCSAModel(t, kv)
		cfg := m.Config
		d, nh := cfg.HeadDim, cfg.Heads
		for _, csa := range []CSA{{Levels: 2}, {Levels: 3}, {Levels: 2, Drop: 0.5}, {Levels: 3, Drop: 0.3}} {
			t.Run(fmt.Sprintf("kv=%d/levels=%d/drop=%g", kv, csa.Levels, csa.Drop), func(t *testing.T) {
				traces, a2a := csaRun(t, m, csa, pool)
				var wantBytes int64
				for l := range cfg.Layers {
					toks := gatherCSA(traces[l])
					maxDense, sumRel, maxRel, dropped := 0.0, 0.0, 0.0, 0.0
					for ti := range toks {
						for h := range nh {
							ref, pi2 := csaRef(toks, csa, n, ti, h, d, true)
							dense, pi := csaRef(toks, csa, n, ti, h, d, false)
							got := toks[ti].out[h*d : (h+1)*d]
							var diff, norm, dd, dn, l1, vmax float64
							for i := range ref {
								diff = math.Max(diff, math.Abs(float64(got[i])-ref[i]))
								norm = math.Max(norm, math.Abs(ref[i]))
								dd += (float64(got[i]) - dense[i]) * (float64(got[i]) - dense[i])
								dn += dense[i] * dense[i]
							}
							if diff > 1e-5*math.Max(norm, 1) {
								t.Fatalf("layer %d token %d head %d: |CSA − multiplicity reference| = %.3g", l, ti, h, diff)
							}
							for k := range pi {
								l1 += math.Abs(pi[k] - pi2[k])
								var vn float64
								for i := range d {
									x := float64(toks[k].v[h*d+i])
									vn += x * x
								}
								vmax = math.Max(vmax, math.Sqrt(vn))
								if pi2[k] == 0 {
									dropped += pi[k]
								}
							}
							if math.Sqrt(dd) > l1*vmax+1e-5 {
								t.Fatalf("layer %d token %d head %d: error %.3g beyond the bound ‖π−π'‖₁·max‖v‖ = %.3g", l, ti, h, math.Sqrt(dd), l1*vmax)
							}
							rel := math.Sqrt(dd / math.Max(dn, 1e-30))
							maxDense = math.Max(maxDense, math.Sqrt(dd))
							sumRel += rel
							maxRel = math.Max(maxRel, rel)
						}
					}
					units := float64(len(toks) * nh)
					t.Logf("layer %d: error vs dense attention: mean relative %.3g, max relative %.3g; dropped softmax mass per query %.3g", l, sumRel/units, maxRel, dropped/units)
					if maxDense < 1e-3 {
						t.Fatalf("layer %d: CSA equals dense attention (max diff %.3g); with %d levels it must not (G1)", l, maxDense, csa.Levels)
					}
					// Kept counts per (head, level, SPT), and the bytes the
					// kept rows make.
					for r := range n {
						var spt []csaToken
						for _, x := range toks {
							if x.rank == r {
								spt = append(spt, x)
							}
						}
						for h := range nh {
							for v := 1; v <= csa.Levels; v++ {
								kept := 0
								for _, x := range spt {
									if x.m[h] >= v {
										kept++
									}
								}
								want := csa.Kept(v, len(spt))
								if l == 0 || l == cfg.Layers-1 {
									want = len(spt)
								}
								if kept != want {
									t.Fatalf("layer %d rank %d head %d level %d: kept %d of %d, want %d", l, r, h, v, kept, len(spt), want)
								}
							}
						}
					}
					group := nh / cfg.KVHeads
					for _, x := range toks {
						o := x.rank
						for j := range n {
							if j == o {
								continue
							}
							kvSent := make([]bool, cfg.KVHeads)
							for h := range nh {
								first := 0 // lowest level ≥ 2 at which j owns h in o's segment
								for v := 2; v <= csa.Levels; v++ {
									lo, hi := csa.Segment(v, o, n)
									if j < lo || j >= hi {
										continue
									}
									if hs := evenHeads(nh, hi-lo, j-lo); h >= hs[0] && h < hs[1] {
										if first == 0 {
											first = v
										}
										if x.m[h] >= v {
											wantBytes += int64(d+1) * 4 // (O, LSE) back
										}
									}
								}
								if first > 0 && x.m[h] >= first {
									wantBytes += int64(d) * 4 // q out
									kvSent[h/group] = true
								}
							}
							for _, sent := range kvSent {
								if sent {
									wantBytes += int64(2*d) * 4 // k, v out, once per KV head
								}
							}
						}
					}
				}
				if a2a != wantBytes {
					t.Fatalf("all-to-alls moved %d bytes, the kept rows make %d", a2a, wantBytes)
				}
			})
		}
	}
}

// TestCSAImportance: the importance every rank passes to the next layer
// (per token and head, the level-1 attention mass it received from the
// later queries of its SPT, Σ_q exp(q·k·scale − lse_q)) equals a float64
// recomputation from the traced q and k rows within 1e-4 relative (of
// the largest of the head's importances in the SPT).
func TestCSAImportance(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, kv := range []int{8, 2} {
		m := loadCSAModel(t, kv)
		cfg := m.Config
		d, nh := cfg.HeadDim, cfg.Heads
		scale := 1 / math.Sqrt(float64(d))
		traces, _ := csaRun(t, m, CSA{Levels: 2, Drop: 0.5}, pool)
		checked := 0
		for l := range cfg.Layers {
			for _, tr := range traces[l] {
				n := len(tr.Pos)
				dot := func(j, i, h int) float64 { // q_j·k_i·scale
					s := 0.0
					for x := range d {
						s += float64(tr.Q[j][h*d+x]) * float64(tr.K[i][h*d+x])
					}
					return s * scale
				}
				sees := func(j, i int) bool { // query j sees key i at level 1
					if tr.Seq[i] != tr.Seq[j] || tr.Pos[i] > tr.Pos[j] {
						return false
					}
					return cfg.SlidingWindow == 0 || tr.Pos[i] > tr.Pos[j]-cfg.SlidingWindow
				}
				for h := range nh {
					lse := make([]float64, n)
					for j := range n {
						sum := 0.0
						for i := range n {
							if sees(j, i) {
								sum += math.Exp(dot(j, i, h))
							}
						}
						lse[j] = math.Log(sum)
					}
					want := make([]float64, n)
					top := 0.0
					for i := range n {
						for j := range n {
							if sees(j, i) {
								want[i] += math.Exp(dot(j, i, h) - lse[j])
							}
						}
						top = math.Max(top, want[i])
					}
					for i := range n {
						if got := float64(tr.Imp[i][h]); math.Abs(got-want[i]) > 1e-4*top {
							t.Fatalf("kv=%d layer %d rank %d token at %d head %d: importance %g, float64 %g", kv, l, tr.Rank, tr.Pos[i], h, got, want[i])
						}
						checked++
					}
				}
			}
		}
		if checked == 0 {
			t.Fatal("no CSA token traced")
		}
	}
}

func evenHeads(heads, parts, i int) [2]int {
	base, extra := heads/parts, heads%parts
	lo := i*base + min(i, extra)
	hi := lo + base
	if i < extra {
		hi++
	}
	return [2]int{lo, hi}
}

// TestCSAOffIsExact: one level (--sparse-attention off) is dense
// attention, the single rank's logits whatever the drop ratio; two levels
// at drop 0 are not (G1).
func TestCSAOffIsExact(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	m := loadCSAModel(t, 2)
	single, err := NewExecutor(m.Config, m.Weights, Options{BlockSize: 4, NumBlocks: 128, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	ranks, counts := spread(24, 4)
	blocks := newSPAlloc(4, 32).table(ranks, counts)
	b := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: fixture.Tokens(5, 96, m.Config.Vocab), Blocks: blocks, NumLogits: 96}}}
	want, err := single.Step(context.Background(), &b, single.KVPlacement())
	if err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), want...)
	for _, csa := range []CSA{{Levels: 1, Drop: 0.5}, {Levels: 2}} {
		c, err := NewCSPS(m.Config, m.Weights, CSPSOptions{Ranks: 4, BlockSize: 4, PerRank: 32, CSA: csa, Options: Options{Pool: pool}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Step(context.Background(), &b, c.Placement())
		if err != nil {
			t.Fatal(err)
		}
		if csa.Levels == 1 {
			assertLogitsClose(t, "csa off", got, want, m.Config.Vocab)
			continue
		}
		diff := 0.0
		for i := range got {
			diff = math.Max(diff, math.Abs(float64(got[i]-want[i])))
		}
		if diff < 1e-3 {
			t.Fatalf("two levels at drop 0 gave the dense logits (max diff %.3g)", diff)
		}
	}
	if _, err := NewCSPS(m.Config, m.Weights, CSPSOptions{Ranks: 2, CSA: CSA{Levels: 2, Drop: 1}}); err == nil {
		t.Fatal("drop ratio 1 accepted")
	}
}

// TestCSAPerRequest: Configure decides per prompt; in one step a
// 96-token prompt runs CSA at drop 0.5 (its middle layers keep half of
// each SPT at level 2) while a 64-token one is left dense (the single
// rank's logits).
func TestCSAPerRequest(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	m := loadCSAModel(t, 2)
	cfg := m.Config
	c, err := NewCSPS(cfg, m.Weights, CSPSOptions{Ranks: 4, BlockSize: 4, PerRank: 64, CSA: CSA{Levels: 2, Drop: 0.1},
		Configure: func(n int) CSPSPrompt { return CSPSPrompt{CSA: n > 64, Drop: 0.5} }, Options: Options{Pool: pool}})
	if err != nil {
		t.Fatal(err)
	}
	single, err := NewExecutor(cfg, m.Weights, Options{BlockSize: 4, NumBlocks: 256, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	kept := map[[2]int]int{} // (layer, rank) → tokens kept at level 2 for head 0
	seqs := map[int]bool{}
	c.csaTrace = func(tr CSATrace) {
		mu.Lock()
		defer mu.Unlock()
		for i := range tr.Pos {
			seqs[tr.Seq[i]] = true
			if tr.M[i][0] >= 2 {
				kept[[2]int{tr.Layer, tr.Rank}]++
			}
		}
	}
	alloc := newSPAlloc(4, 64)
	ranks, counts := spread(24, 4)
	long := alloc.table(ranks, counts)
	ranks, counts = spread(16, 4)
	short := alloc.table(ranks, counts)
	b := forward.Batch{Seqs: []forward.SeqBatch{
		{Tokens: fixture.Tokens(1, 96, cfg.Vocab), Blocks: long, NumLogits: 1},
		{Tokens: fixture.Tokens(2, 64, cfg.Vocab), Blocks: short, NumLogits: 1},
	}}
	got, err := c.Step(context.Background(), &b, c.Placement())
	if err != nil {
		t.Fatal(err)
	}
	got = append([]float32(nil), got...)
	want, err := single.Step(context.Background(), &b, single.KVPlacement())
	if err != nil {
		t.Fatal(err)
	}
	v := cfg.Vocab
	assertLogitsClose(t, "dense prompt", got[v:2*v], want[v:2*v], v)
	if !seqs[0] || seqs[1] {
		t.Fatalf("CSA ran on sequences %v, want only 0", seqs)
	}
	for r := range 4 {
		if k := kept[[2]int{1, r}]; k != 12 { // 24-token SPT, drop 0.5
			t.Fatalf("layer 1 rank %d keeps %d tokens at level 2, want 12", r, k)
		}
		if k := kept[[2]int{0, r}]; k != 24 {
			t.Fatalf("layer 0 rank %d keeps %d tokens at level 2, want all 24", r, k)
		}
	}
}
