package cpuexec

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/tensor"
)

// spAlloc hands out global block ids of a CSPS layout rank by rank.
type spAlloc struct {
	perRank int
	next    []int
}

func newSPAlloc(ranks, perRank int) *spAlloc {
	return &spAlloc{perRank: perRank, next: make([]int, ranks)}
}

// table returns a block table whose i-th run of counts[i] blocks lies on
// ranks[i].
func (a *spAlloc) table(ranks, counts []int) []int {
	var t []int
	for i, r := range ranks {
		for range counts[i] {
			if a.next[r] == a.perRank {
				panic("spAlloc: rank full")
			}
			t = append(t, r*a.perRank+a.next[r])
			a.next[r]++
		}
	}
	return t
}

// spSeq is a sequence of a CSPS test: its tokens, how many are in the
// cache, and its table in the global block space.
type spSeq struct {
	tokens []int
	done   int
	blocks []int
}

// spRun steps a CSPS executor and a single-rank executor (whose pool is
// the same global block space) through the same batches.
type spRun struct {
	t      *testing.T
	m      *model.Model
	c      *CSPS
	single *Executor
	maxRel float64 // largest |CSPS − one rank| over the row's largest |one rank| seen by stepLast
}

func newSPRun(t *testing.T, m *model.Model, ranks, perRank int, pool *tensor.Pool) *spRun {
	t.Helper()
	c, err := NewCSPS(m.Config, m.Weights, CSPSOptions{Ranks: ranks, BlockSize: 4, PerRank: perRank, Options: Options{Pool: pool}})
	if err != nil {
		t.Fatal(err)
	}
	single, err := NewExecutor(m.Config, m.Weights, Options{BlockSize: 4, NumBlocks: ranks * perRank, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	return &spRun{t: t, m: m, c: c, single: single}
}

// step runs n[i] tokens of seqs[i] (all logits) on both executors, checks
// the logits agree and advances the sequences; it returns the CSPS logits.
func (r *spRun) step(what string, seqs []*spSeq, n []int) []float32 {
	r.t.Helper()
	var b forward.Batch
	for i, s := range seqs {
		b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: s.tokens[s.done : s.done+n[i]], Pos: s.done, Blocks: s.blocks, NumLogits: n[i]})
	}
	got, err := r.c.Step(context.Background(), &b, r.c.Placement())
	if err != nil {
		r.t.Fatal(err)
	}
	got = append([]float32(nil), got...)
	want, err := r.single.Step(context.Background(), &b, r.single.KVPlacement())
	if err != nil {
		r.t.Fatal(err)
	}
	assertLogitsClose(r.t, what, got, want, r.m.Config.Vocab)
	for i, s := range seqs {
		s.done += n[i]
	}
	return got
}

// stepLast runs the pending tokens of seqs (n[i] each, the last one's
// logits) on both executors, checks the logits and the greedy tokens agree
// and returns the CSPS logits and one rank's.
func (r *spRun) stepLast(what string, seqs []*spSeq, n []int) (got, want []float32) {
	r.t.Helper()
	var b forward.Batch
	for i, s := range seqs {
		b.Seqs = append(b.Seqs, forward.SeqBatch{Tokens: s.tokens[s.done : s.done+n[i]], Pos: s.done, Blocks: s.blocks, NumLogits: 1})
	}
	got, err := r.c.Step(context.Background(), &b, r.c.Placement())
	if err != nil {
		r.t.Fatal(err)
	}
	got = append([]float32(nil), got...)
	want, err = r.single.Step(context.Background(), &b, r.single.KVPlacement())
	if err != nil {
		r.t.Fatal(err)
	}
	want = append([]float32(nil), want...)
	v := r.m.Config.Vocab
	assertLogitsClose(r.t, what, got, want, v)
	for i := range seqs {
		r.maxRel = math.Max(r.maxRel, maxRelDiff(got[i*v:(i+1)*v], want[i*v:(i+1)*v]))
	}
	for i := range seqs {
		if a, b := tensor.MaxIndex(got[i*v:(i+1)*v]), tensor.MaxIndex(want[i*v:(i+1)*v]); a != b {
			r.t.Fatalf("%s: sequence %d greedy token %d, one rank %d", what, i, a, b)
		}
	}
	for i, s := range seqs {
		s.done += n[i]
	}
	return got, want
}

// spread splits blocks over ranks 0..k-1 as evenly as possible, the last
// rank taking the fewest (uneven last SPT).
func spread(blocks, k int) (ranks, counts []int) {
	per := (blocks + k - 1) / k
	for r := 0; r < k && blocks > 0; r++ {
		c := min(per, blocks)
		ranks, counts = append(ranks, r), append(counts, c)
		blocks -= c
	}
	return ranks, counts
}

// TestCSPSPrefillMatchesSingleRank prefills a long prompt sharded along
// the sequence over N ranks (uneven SPTs, N ∤ heads for N = 3, KV heads
// replicated for N > KV heads) in one chunk and in three chunks, beside a
// short prompt living whole on one rank, and compares every logits row
// with one rank's.
func TestCSPSPrefillMatchesSingleRank(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, kv := range []int{4, 2, 1} {
		m := loadParallelFixture(t, kv)
		for _, n := range []int{1, 2, 3, 4, 8} {
			t.Run(fmt.Sprintf("kv=%d/N=%d", kv, n), func(t *testing.T) {
				r := newSPRun(t, m, n, 64, pool)
				alloc := newSPAlloc(n, 64)
				const long = 90 // 23 blocks of 4
				ranks, counts := spread(23, n)
				one := &spSeq{tokens: fixture.Tokens(7, long, m.Config.Vocab), blocks: alloc.table(ranks, counts)}
				short := &spSeq{tokens: fixture.Tokens(8, 11, m.Config.Vocab), blocks: alloc.table([]int{n - 1}, []int{3})}
				r.step("one chunk", []*spSeq{one, short}, []int{long, 11})

				chunked := &spSeq{tokens: one.tokens, blocks: alloc.table(ranks, counts)}
				r.step("chunk 1", []*spSeq{chunked}, []int{37})
				r.step("chunk 2", []*spSeq{chunked}, []int{40})
				r.step("chunk 3", []*spSeq{chunked}, []int{long - 77})
			})
		}
	}
}

// TestCSPSMatchesOracle prefills prompts as long as the model's context
// over 4 ranks, in one chunk and in three, against the float64 oracle.
func TestCSPSMatchesOracle(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, fx := range fixtureSpecs[:3] {
		t.Run(fx.Name, func(t *testing.T) { checkCSPSOracle(t, load(t, fx.Spec), pool, nil) })
	}
}

// checkCSPSOracle prefills a prompt as long as l's context over 4 CSPS
// ranks, in one chunk and in three, each prompt configured by configure
// (nil: the executor's default, SP-NTP), and holds every position's
// logits to the float64 oracle.
func checkCSPSOracle(t *testing.T, l loaded, pool *tensor.Pool, configure func(int) CSPSPrompt) {
	t.Helper()
	cfg := l.m.Config
	c, err := NewCSPS(cfg, l.m.Weights, CSPSOptions{Ranks: 4, BlockSize: 4, PerRank: 64, Configure: configure, Options: Options{Pool: pool}})
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.MaxPositions
	tokens := fixture.Tokens(3, n, cfg.Vocab)
	want := l.ref.Logits(tokens)
	alloc := newSPAlloc(4, 64)
	for _, chunks := range [][]int{{n}, {100, 100, n - 200}} {
		ranks, counts := spread(n/4, 4)
		blocks := alloc.table(ranks, counts)
		done := 0
		for _, k := range chunks {
			b := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokens[done : done+k], Pos: done, Blocks: blocks, NumLogits: k}}}
			got, err := c.Step(context.Background(), &b, c.Placement())
			if err != nil {
				t.Fatal(err)
			}
			for i := range k {
				assertClose(t, fmt.Sprintf("chunks %v position %d", chunks, done+i), got[i*cfg.Vocab:(i+1)*cfg.Vocab], want[done+i])
			}
			done += k
		}
	}
}

// TestCSPSDecodeMovesQuery (T9) decodes a long prompt whose KV is sharded
// over g ranks, beside short prompts living whole on single ranks, for 64
// greedy steps: tokens equal one rank's; every logits row is within 1e-6
// of one rank's, relative to the row's largest logit; against the float64
// oracle SP decode is about as accurate as one rank (within 1.5×,
// checked every 8 steps); new KV lands on the last shard; and each decode step moves
// exactly, per layer, the long request's q (every head) to each other
// shard and (O, LSE) back: no KV byte.
//
// The spec's 1e-6 is read relative to the row's largest logit. Element by
// element (relative, with a floor of 1) the two executors differ by up to
// about 4.5e-6, but one rank is itself 3–4e-6 from the oracle by that
// measure on this fixture, so no bound below that separates a fault from
// float32 rounding: the oracle comparison is what shows SP adds no error.
func TestCSPSDecodeMovesQuery(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	steps := 64
	for _, kv := range []int{2, 1} {
		l := load(t, parallelFixture(kv))
		cfg := l.m.Config
		v := cfg.Vocab
		for _, g := range []int{2, 4, 8} {
			t.Run(fmt.Sprintf("kv=%d/g=%d", kv, g), func(t *testing.T) {
				r := newSPRun(t, l.m, g, 96, pool)
				alloc := newSPAlloc(g, 96)
				const prompt = 60
				ranks, counts := spread(prompt/4, g)
				last := ranks[len(ranks)-1]
				long := &spSeq{tokens: fixture.Tokens(21, prompt, v), blocks: alloc.table(ranks, counts)}
				long.blocks = append(long.blocks, alloc.table([]int{last}, []int{(steps + 3) / 4})...)
				seqs := []*spSeq{long}
				for i, rk := range []int{0, g / 2, g - 1} {
					s := &spSeq{tokens: fixture.Tokens(30+i, 5+3*i, v)}
					s.blocks = alloc.table([]int{rk}, []int{(len(s.tokens) + steps + 3) / 4})
					seqs = append(seqs, s)
				}
				n := make([]int, len(seqs))
				d := cfg.HeadDim
				perLayer := int64((g-1)*(cfg.Heads*d+cfg.Heads*(d+1))) * 4 // q out, (O, LSE) back, float32
				var spErr, oneErr float64                                  // against the oracle
				for step := range steps {
					for i, s := range seqs {
						n[i] = len(s.tokens) - s.done
					}
					before := r.c.CommStats()
					logits, one := r.stepLast(fmt.Sprintf("step %d", step), seqs, n)
					delta := r.c.CommStats().Sub(before)
					if step > 0 {
						a2a := delta.Kind(comm.KindAllToAll).SentBytes
						if a2a != int64(cfg.Layers)*perLayer || delta.Total().SentBytes != a2a {
							t.Fatalf("decode step %d moved %d bytes (%d in all-to-alls), want %d: q and (O, LSE) only",
								step, delta.Total().SentBytes, a2a, int64(cfg.Layers)*perLayer)
						}
					}
					if step%8 == 0 || step == steps-1 {
						for i, s := range seqs {
							rows := l.ref.Logits(s.tokens)
							exact := rows[len(rows)-1]
							spErr = math.Max(spErr, oracleError(logits[i*v:(i+1)*v], exact))
							oneErr = math.Max(oneErr, oracleError(one[i*v:(i+1)*v], exact))
						}
					}
					for i, s := range seqs {
						s.tokens = append(s.tokens, tensor.MaxIndex(logits[i*v:(i+1)*v]))
					}
				}
				t.Logf("over %d steps: largest logit error against one rank %.2g of the row's largest; against the oracle (relative, floor 1) SP %.2g, one rank %.2g",
					steps, r.maxRel, spErr, oneErr)
				if r.maxRel > 1e-6 {
					t.Errorf("logits drift %.2g from one rank's, relative to the row's largest; T9 allows 1e-6", r.maxRel)
				}
				if spErr > 1.5*oneErr { // both are float32 rounding: 0.7–1.16× on amd64 and noasm
					t.Errorf("SP decode is %.2g from the oracle, one rank %.2g: SP adds error", spErr, oneErr)
				}
			})
		}
	}
}

// oracleError is max |got − exact| / max(|exact|, 1) over a logits row.
func oracleError(got []float32, exact []float64) float64 {
	e := 0.0
	for i, x := range exact {
		e = math.Max(e, math.Abs(float64(got[i])-x)/math.Max(math.Abs(x), 1))
	}
	return e
}

// TestCSPSMicroPartitions (T3): SP-NTP pipelined over M ∈ {2, 4, 16}
// micro-partitions (uneven ones included) gives logits bitwise equal to
// M = 1 and moves the same all-to-all bytes, for a long prompt beside a
// short one and for two long prompts in one step, under GQA with N ∤ heads.
func TestCSPSMicroPartitions(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, kv := range []int{4, 1} {
		m := loadParallelFixture(t, kv)
		for _, n := range []int{2, 3, 4} {
			type result struct {
				logits []float32
				bytes  int64
			}
			run := func(micro int) result {
				c, err := NewCSPS(m.Config, m.Weights, CSPSOptions{Ranks: n, BlockSize: 4, PerRank: 64, MicroPartitions: micro, Options: Options{Pool: pool}})
				if err != nil {
					t.Fatal(err)
				}
				alloc := newSPAlloc(n, 64)
				ranks, counts := spread(23, n)
				a := fixture.Tokens(7, 90, m.Config.Vocab)
				bTok := fixture.Tokens(9, 45, m.Config.Vocab)
				b := forward.Batch{Seqs: []forward.SeqBatch{
					{Tokens: a, Blocks: alloc.table(ranks, counts), NumLogits: 90},
					{Tokens: fixture.Tokens(8, 11, m.Config.Vocab), Blocks: alloc.table([]int{n - 1}, []int{3}), NumLogits: 2},
					{Tokens: bTok, Blocks: alloc.table([]int{0, n - 1}, []int{6, 6}), NumLogits: 45},
				}}
				got, err := c.Step(context.Background(), &b, c.Placement())
				if err != nil {
					t.Fatal(err)
				}
				return result{append([]float32(nil), got...), c.CommStats().Kind(comm.KindAllToAll).SentBytes}
			}
			want := run(1)
			for _, micro := range []int{2, 4, 16} {
				got := run(micro)
				for i := range got.logits {
					if got.logits[i] != want.logits[i] {
						t.Fatalf("kv=%d N=%d M=%d: logit %d is %v, M=1 %v", kv, n, micro, i, got.logits[i], want.logits[i])
					}
				}
				if got.bytes != want.bytes {
					t.Fatalf("kv=%d N=%d M=%d: all-to-alls moved %d bytes, M=1 %d", kv, n, micro, got.bytes, want.bytes)
				}
			}
		}
	}
}

// TestCSPSPrefillVolume holds SP-NTP's traffic to App A's count (R6): per
// layer, over all ranks, the first all-to-all moves 3·L·d·(N−1)/N
// elements and the second L·d·(N−1)/N (MHA, N | heads), whatever the
// uneven SPTs; nothing else moves.
func TestCSPSPrefillVolume(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	m := loadParallelFixture(t, 8)
	cfg := m.Config
	const l = 90
	for _, n := range []int{2, 4, 8} {
		c, err := NewCSPS(cfg, m.Weights, CSPSOptions{Ranks: n, BlockSize: 4, PerRank: 32, Options: Options{Pool: pool}})
		if err != nil {
			t.Fatal(err)
		}
		ranks, counts := spread(23, n)
		b := forward.Batch{Seqs: []forward.SeqBatch{{Tokens: fixture.Tokens(4, l, cfg.Vocab), Blocks: newSPAlloc(n, 32).table(ranks, counts), NumLogits: 1}}}
		if _, err := c.Step(context.Background(), &b, c.Placement()); err != nil {
			t.Fatal(err)
		}
		st := c.CommStats()
		want := int64(cfg.Layers) * int64(4*l*cfg.Hidden*(n-1)/n) * 4
		if got := st.Kind(comm.KindAllToAll).SentBytes; got != want || st.Total().SentBytes != want {
			t.Fatalf("N=%d: all-to-alls moved %d bytes (all collectives %d), App A gives %d", n, got, st.Total().SentBytes, want)
		}
	}
}

// TestCSPSSlidingWindow: with a 20-token sliding window, a prompt over 4
// ranks prefilled in one chunk and in chunks, then decoded, matches one
// rank (the window cuts keys held by other ranks out of both the
// all-to-all's range and the moved queries' ranges).
func TestCSPSSlidingWindow(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	checkWindowChunks(t, loadParallelFixture(t, 2), "", func(win *model.Model) *spRun { return newSPRun(t, win, 4, 64, pool) })
}

// windowPrompt is the 90-token prompt of checkWindowChunks.
func windowPrompt(vocab int) []int { return fixture.Tokens(7, 90, vocab) }

// checkWindowChunks gives m a 20-token sliding window and runs
// windowPrompt over 4 ranks of 64 blocks (the spRun that run builds)
// prefilled in one chunk, then in three chunks and decoded; each step is
// checked against one rank. prefix names the steps.
func checkWindowChunks(t *testing.T, m *model.Model, prefix string, run func(win *model.Model) *spRun) {
	t.Helper()
	cfg := *m.Config
	cfg.SlidingWindow = 20
	r := run(&model.Model{Config: &cfg, Weights: m.Weights})
	alloc := newSPAlloc(4, 64)
	ranks, counts := spread(23, 4)
	one := &spSeq{tokens: windowPrompt(cfg.Vocab), blocks: alloc.table(ranks, counts)}
	r.step(prefix+"one chunk", []*spSeq{one}, []int{90})
	chunked := &spSeq{tokens: one.tokens, blocks: alloc.table(ranks, counts)}
	r.step(prefix+"chunk 1", []*spSeq{chunked}, []int{37})
	r.step(prefix+"chunk 2", []*spSeq{chunked}, []int{40})
	r.step(prefix+"chunk 3", []*spSeq{chunked}, []int{12})
	r.step(prefix+"decode", []*spSeq{chunked}, []int{1})
}
