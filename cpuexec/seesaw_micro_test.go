package cpuexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

// microSeen is one micro-batch as one rank ran it: its token count and,
// per sequence piece, the first block of the piece's block table (which
// names the sequence: no two live sequences share a first block here,
// prefix caching being off).
type microSeen struct {
	tokens int
	seqs   []int
}

// microRecorder checks, for every step, the micro-batches each rank
// actually ran (read from the rank's current micro-batch by the fault
// hook, which runs in the rank's goroutine before each layer): a step of
// T tokens under a placement with PP = k is cut into m = min(k, T)
// micro-batches, token i going to micro-batch ⌊i·m/T⌋, in batch order.
type microRecorder struct {
	*Executor
	eng *engine.Engine

	perRank [][]microSeen // written by each rank's goroutine during a step
	mu      sync.Mutex
	errs    []string
	// Decode-only steps under a pipelined placement, by their resident
	// sequence count.
	decodes map[int]int
	uneven  int // decode steps whose resident count k does not divide
}

// InlineSwaps has the engine run Seesaw's swaps between steps rather than
// beside them, so that which sequences are resident at each decode step,
// and so the resident counts the test needs (an odd one above k), follow
// from the schedule alone and not from when a background swap lands (a
// loaded machine once gave only counts of 1 and 2).
func (r *microRecorder) InlineSwaps() bool { return true }

func (r *microRecorder) Step(ctx context.Context, b *forward.Batch, p parallel.Placement) ([]float32, error) {
	decode, total := true, 0
	for _, s := range b.Seqs {
		total += len(s.Tokens)
		decode = decode && len(s.Tokens) == 1
	}
	resident := -1
	if r.eng != nil {
		resident = r.eng.Stats().Running // the engine's lock is not held during a step
	}
	for i := range r.perRank {
		r.perRank[i] = r.perRank[i][:0]
	}
	out, err := r.Executor.Step(ctx, b, p)
	if err != nil {
		return out, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fail := func(format string, args ...any) {
		r.errs = append(r.errs, fmt.Sprintf("step under %s (%d seqs, %d tokens): ", p.Name, len(b.Seqs), total)+fmt.Sprintf(format, args...))
	}
	k := p.Plan.PP
	m := min(k, total)
	var want []int // token count of each micro-batch: ⌈(j+1)·T/m⌉ − ⌈j·T/m⌉
	for j := range m {
		want = append(want, ((j+1)*total+m-1)/m-(j*total+m-1)/m)
	}
	var order []int // the batch's sequences, by first block
	for _, s := range b.Seqs {
		order = append(order, s.Blocks[0])
	}
	for rk, seen := range r.perRank {
		var sizes, ids []int
		for _, mb := range seen {
			sizes = append(sizes, mb.tokens)
			ids = append(ids, mb.seqs...)
		}
		if !slices.Equal(sizes, want) {
			fail("rank %d ran micro-batches of %v tokens, want %v (PP %d)", rk, sizes, want, k)
		}
		if decode && !slices.Equal(ids, order) {
			fail("rank %d ran the sequences %v, the batch is %v", rk, ids, order)
		}
	}
	if decode && k > 1 {
		if resident >= 0 && len(b.Seqs) != resident {
			fail("a decode step of %d sequences with %d resident", len(b.Seqs), resident)
		}
		if r.decodes == nil {
			r.decodes = map[int]int{}
		}
		r.decodes[len(b.Seqs)]++
		if len(b.Seqs) > k && len(b.Seqs)%k != 0 {
			r.uneven++
		}
		// Each decode micro-batch holds ⌈resident/k⌉ sequences or one fewer,
		// the first ⌈resident/k⌉ (the sizes above, restated in sequences).
		if n := len(b.Seqs); n >= k {
			for j, mb := range r.perRank[0] {
				if c := len(mb.seqs); c > (n+k-1)/k || c < n/k || (j == 0 && c != (n+k-1)/k) {
					fail("micro-batch %d of %d sequences; want ⌈%d/%d⌉ or one fewer, the first ⌈%d/%d⌉", j, c, n, k, n, k)
				}
			}
		}
	}
	return out, nil
}

// TestSeesawDecodeMicroBatches is acceptance test A8: under a decode
// placement with PP = k, each decode step carries every resident sequence
// and is cut into k micro-batches of ⌈resident/k⌉ sequences (some one
// fewer when k does not divide: sequence i goes to ⌊i·k/resident⌋), every
// rank running the same micro-batches in batch order; prefill steps follow the same token split
// under their own placement's PP (not the first placement's). Served under
// Seesaw (TP prefill → PP decode, PP prefill → TP×PP decode) and under a
// static pp=2 plan, the greedy tokens equal each request run alone on one
// rank.
func TestSeesawDecodeMicroBatches(t *testing.T) {
	l := load(t, fixture.Spec{Heads: 8, KVHeads: 4, Layers: 4, Intermediate: 96, Seed: 808})
	cfg := l.m.Config
	pool := tensor.NewPool(2)
	defer pool.Close()
	var reqs []engine.Request
	for i := range 7 {
		reqs = append(reqs, engine.Request{ID: fmt.Sprint("r", i), Prompt: fixture.Tokens(800+i, 5+i, cfg.Vocab),
			MaxTokens: 2 + i, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}})
	}
	single, err := NewExecutor(cfg, l.m.Weights, Options{BlockSize: 4, NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	want := serveAll(t, engine.Options{Exec: single}, reqs, false)

	plan := func(tp, pp int) parallel.Plan { return parallel.Plan{DP: 1, PP: pp, SP: 1, TP: tp} }
	for _, tc := range []struct {
		name            string
		prefill, decode parallel.Plan
		static          bool
	}{
		{"seesaw tp=2→pp=2", plan(2, 1), plan(1, 2), false},
		{"seesaw tp=4→pp=4", plan(4, 1), plan(1, 4), false},
		{"seesaw pp=4→tp=2,pp=2", plan(1, 4), plan(2, 2), false},
		{"static pp=2", plan(1, 2), plan(1, 2), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pol policy.Policy
			var placements []parallel.Placement
			host := 0
			if tc.static {
				s := policy.NewStatic(tc.prefill)
				pol, placements = s, s.Placements()
			} else {
				s, err := policy.NewSeesaw(tc.prefill, tc.decode)
				if err != nil {
					t.Fatal(err)
				}
				pol, placements, host = s, s.Placements(), 12 // 7 prompts of 2–3 blocks: the phases cycle
			}
			x, err := NewExecutor(cfg, l.m.Weights, Options{Placements: placements, BlockSize: 4, NumBlocks: 32, HostBlocks: host, WeightsFromHost: host > 0, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			rec := &microRecorder{Executor: x, perRank: make([][]microSeen, len(x.ranks))}
			x.fault = func(_ context.Context, r, layer int) error {
				if layer == 0 { // once per micro-batch: the rank's first layer of its stage
					mb := x.ranks[r].mb
					seen := microSeen{}
					for _, s := range mb.seqs {
						seen.tokens += len(s.Tokens)
						seen.seqs = append(seen.seqs, s.Blocks[0])
					}
					rec.perRank[r] = append(rec.perRank[r], seen)
				}
				return nil
			}
			got := serveAll(t, engine.Options{Exec: rec, Policy: pol, Sched: sched.Config{MaxNumBatchedTokens: 512}}, reqs, true, &rec.eng)
			for i := range reqs {
				if !slices.Equal(got[i], want[i]) {
					t.Errorf("%s: %v, alone on one rank %v", reqs[i].ID, got[i], want[i])
				}
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, e := range rec.errs[:min(len(rec.errs), 10)] {
				t.Error(e)
			}
			// Decode steps ran under the pipelined placement, with several
			// resident counts, some not divisible by k.
			k := tc.decode.PP
			if len(rec.decodes) < 3 || rec.uneven == 0 {
				t.Errorf("decode steps under PP %d by resident count %v, %d uneven; want several counts and an uneven one", k, rec.decodes, rec.uneven)
			}
			if st := x.PlanSteps(); st[placements[len(placements)-1].Name] == 0 {
				t.Errorf("no step under the decode placement: %v", st)
			}
			t.Logf("decode steps by resident count %v", rec.decodes)
		})
	}
}

// serveAll serves reqs on an engine built from opts — all at once, or
// one after the other (each alone) — and returns each one's tokens; with
// set, *set[0] holds the engine while it runs. All at once, every request
// is submitted before the loop starts, so that the steps, and the
// resident counts the test reads, follow from the schedule alone and not
// from when a submitting goroutine ran (a loaded machine once saw at most
// four resident).
func serveAll(t *testing.T, opts engine.Options, reqs []engine.Request, together bool, set ...**engine.Engine) [][]int {
	t.Helper()
	e, err := engine.NewEngine(opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(set) > 0 {
		*set[0] = e
	}
	out := make([][]int, len(reqs))
	check := func(i int, tokens []int, finish string) {
		if finish != engine.FinishLength || len(tokens) != reqs[i].MaxTokens {
			t.Fatalf("%s: %d tokens, finish %q; want %d, %q", reqs[i].ID, len(tokens), finish, reqs[i].MaxTokens, engine.FinishLength)
		}
		out[i] = tokens
	}
	if !together {
		defer e.Start()()
		for i, r := range reqs {
			o, err := e.Generate(context.Background(), r, nil)
			if err != nil {
				t.Fatalf("%s: %v", r.ID, err)
			}
			check(i, o.Tokens, o.FinishReason)
		}
		return out
	}
	streams := make([]*engine.Stream, len(reqs))
	for i, r := range reqs {
		if streams[i], err = e.Submit(r); err != nil {
			t.Fatalf("%s: %v", r.ID, err)
		}
	}
	defer e.Start()()
	for i, st := range streams {
		var tokens []int
		finish := ""
		for {
			ev, err := st.Recv(context.Background())
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", reqs[i].ID, err)
			}
			tokens = append(tokens, ev.Tokens...)
			if ev.Finish != "" {
				finish = ev.Finish
			}
		}
		check(i, tokens, finish)
	}
	return out
}
