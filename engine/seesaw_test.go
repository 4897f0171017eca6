package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/specdecode"
	"github.com/gearboxlm/gearbox/tensor"
)

// phaseRecorder records, per step, the placement and whether the batch
// held only prefill chunks (every prompt here is at least minPrompt
// tokens and unchunked) or only decodes.
type phaseRecorder struct {
	*cpuexec.Executor
	mu    sync.Mutex
	steps []string // "placement:prefill" or "placement:decode" or "placement:mixed"

	// Slow swaps: the device blocks a swap-in is writing or a swap-out
	// reading, the steps that ran while one was in flight, and any step
	// that touched such a block.
	inflight   [2]map[[2]int]bool // [in, out] (replica, device block)
	overlapped [2]int
	violations []string
}

// SwapIn copies slowly, so steps run while it is in flight.
func (p *phaseRecorder) SwapIn(ctx context.Context, swaps []forward.Swap) (int64, error) {
	return p.slowly(0, swaps, func() (int64, error) { return p.Executor.SwapIn(ctx, swaps) })
}

// SwapOut copies slowly too.
func (p *phaseRecorder) SwapOut(ctx context.Context, swaps []forward.Swap) (int64, error) {
	return p.slowly(1, swaps, func() (int64, error) { return p.Executor.SwapOut(ctx, swaps) })
}

// slowly marks the swaps' device blocks in flight in direction dir (0 in,
// 1 out), waits 30 ms, then copies.
func (p *phaseRecorder) slowly(dir int, swaps []forward.Swap, copy func() (int64, error)) (int64, error) {
	p.mu.Lock()
	if p.inflight[dir] == nil {
		p.inflight[dir] = map[[2]int]bool{}
	}
	for _, s := range swaps {
		for _, b := range s.Device {
			p.inflight[dir][[2]int{s.Replica, b}] = true
		}
	}
	p.mu.Unlock()
	time.Sleep(30 * time.Millisecond)
	n, err := copy()
	p.mu.Lock()
	clear(p.inflight[dir])
	p.mu.Unlock()
	return n, err
}

const minPrompt = 5

func (p *phaseRecorder) Step(ctx context.Context, b *forward.Batch, pl parallel.Placement) ([]float32, error) {
	kinds := map[bool]bool{}
	for _, s := range b.Seqs {
		kinds[len(s.Tokens) >= minPrompt] = true
	}
	kind := "mixed"
	switch {
	case kinds[true] && !kinds[false]:
		kind = "prefill"
	case kinds[false] && !kinds[true]:
		kind = "decode"
	}
	p.mu.Lock()
	p.steps = append(p.steps, pl.Name+":"+kind)
	for dir, what := range [2]string{"read before its swap-in completed", "in a step while it was being swapped out"} {
		if len(p.inflight[dir]) > 0 {
			p.overlapped[dir]++
		}
		for _, s := range b.Seqs {
			for _, blk := range s.Blocks[:(s.Pos+len(s.Tokens)+3)/4] {
				if p.inflight[dir][[2]int{s.Replica, blk}] {
					p.violations = append(p.violations, fmt.Sprintf("block %d %s", blk, what))
				}
			}
		}
	}
	p.mu.Unlock()
	return p.Executor.Step(ctx, b, pl)
}

// seesawRequests builds the Seesaw tests' model (a 4-layer fixture), a
// kernel pool, 10 requests (each extra more output tokens) and their
// outputs run alone on one rank.
func seesawRequests(t *testing.T, extra int) (*model.Model, *tensor.Pool, []Request, []*Output) {
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Heads: 8, KVHeads: 4, Layers: 4, Intermediate: 96, Seed: 330})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pool := tensor.NewPool(2)
	t.Cleanup(pool.Close)
	var reqs []Request
	for i := 0; i < 10; i++ {
		reqs = append(reqs, Request{ID: fmt.Sprint("r", i), Prompt: fixture.Tokens(400+i, minPrompt+3*(i%4), m.Config.Vocab),
			MaxTokens: 3 + 2*(i%5) + extra, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}})
	}
	single, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{BlockSize: 4, NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	ref := startEngine(t, single, m.Tokenizer, nil, sched.Config{})
	want := make([]*Output, len(reqs))
	for i, r := range reqs {
		if want[i], err = ref.Generate(context.Background(), r, nil); err != nil {
			t.Fatal(err)
		}
	}
	return m, pool, reqs, want
}

// TestSeesawServesLikeOneRank serves 10 requests at once under Seesaw
// (prefill under pp=2, decode under tp=2, KV parked on a host store too
// small for all of them, so the phases cycle; a slow swap-in): every
// output equals the request run alone on one rank, prefill steps run only
// under pp=2 and decode steps only under tp=2, decode steps run while a
// swap-in is in flight but never read a block before it lands, the policy
// changes phase several times, and every device and host block comes
// back. Swap-outs are slow too, and no step touches a block being
// swapped out (here the device is full until they land; the edge cases
// have prefill steps beside them).
func TestSeesawServesLikeOneRank(t *testing.T) {
	m, pool, reqs, want := seesawRequests(t, 0)
	pol, err := policy.NewSeesaw(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1}, parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	x, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{Placements: pol.Placements(), BlockSize: 4, NumBlocks: 16, HostBlocks: 8, WeightsFromHost: true, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	rec := &phaseRecorder{Executor: x}
	e, err := NewEngine(Options{Exec: rec, Policy: pol, Tokenizer: m.Tokenizer, Sched: sched.Config{MaxNumBatchedTokens: 512}}) // no prompt is chunked
	if err != nil {
		t.Fatal(err)
	}
	defer e.Start()()
	got := make([]*Output, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = e.Generate(context.Background(), r, nil)
		}()
	}
	wg.Wait()
	for i := range reqs {
		if errs[i] != nil {
			t.Fatalf("%s: %v", reqs[i].ID, errs[i])
		}
		if fmt.Sprint(got[i].Tokens) != fmt.Sprint(want[i].Tokens) || got[i].FinishReason != FinishLength {
			t.Fatalf("%s: %v (%s), alone on one rank %v", reqs[i].ID, got[i].Tokens, got[i].FinishReason, want[i].Tokens)
		}
	}
	if len(rec.violations) > 0 || rec.overlapped[0] == 0 {
		t.Fatalf("swaps: %v; %d steps ran while a swap-in was in flight (want some)", rec.violations, rec.overlapped[0])
	}
	counts := map[string]int{}
	for _, s := range rec.steps {
		counts[s]++
	}
	if counts["pp=2:decode"]+counts["tp=2:prefill"]+counts["pp=2:mixed"]+counts["tp=2:mixed"] != 0 || counts["pp=2:prefill"] == 0 || counts["tp=2:decode"] == 0 {
		t.Fatalf("steps by placement and kind: %v", counts)
	}
	// Each transition re-sharded the weights from the host copy.
	if mv := x.Moved(); mv.WeightBytes < int64(x.Transitions())*4*m.Config.NumParams()/2 {
		t.Fatalf("%d transitions moved %d weight bytes; each re-shards half the model per rank from the host", x.Transitions(), mv.WeightBytes)
	}
	if pol.Transitions() < 3 || x.Transitions() < 3 || x.SwapBytes() == 0 {
		t.Fatalf("%d phase changes, %d transitions, %d bytes swapped; want several cycles", pol.Transitions(), x.Transitions(), x.SwapBytes())
	}
	st := e.Stats()
	if st.KVUsage != 0 || st.Running != 0 || st.Waiting != 0 || st.Parked != 0 || st.HostKVUsage != 0 {
		t.Fatalf("engine not idle: %+v", st)
	}
	// Every parked byte came back (no KV head is replicated under tp=2
	// with 4 KV heads, so the pulls add up to the pushes).
	if st.Transitions != int64(x.Transitions()) || st.SwapOutBytes == 0 || st.SwapOutBytes != st.SwapInBytes || st.SwapOutBytes+st.SwapInBytes != x.SwapBytes() {
		t.Fatalf("stats %+v; executor: %d transitions, %d bytes swapped", st, x.Transitions(), x.SwapBytes())
	}
	e.mu.Lock()
	used, _ := e.sched.HostBlocks()
	e.mu.Unlock()
	if used != 0 {
		t.Fatalf("%d host blocks still in use", used)
	}
	t.Logf("steps %v; %d phase changes, %d swapped bytes", counts, pol.Transitions(), x.SwapBytes())
}

// TestSeesawSpeculative serves the Seesaw requests, with longer outputs,
// under n-gram drafts: decode steps under tp=2 carry drafts while KV is
// parked and brought back, and every output is still the one rank's.
func TestSeesawSpeculative(t *testing.T) {
	m, pool, reqs, want := seesawRequests(t, 24)
	pol, err := policy.NewSeesaw(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1}, parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	x, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{Placements: pol.Placements(), BlockSize: 4, NumBlocks: 40, HostBlocks: 24, WeightsFromHost: true, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(Options{Exec: x, Policy: pol, Tokenizer: m.Tokenizer, Sched: sched.Config{MaxNumBatchedTokens: 512},
		Speculative: specdecode.Config{Method: "ngram", NumTokens: 3, LookupMin: 1, LookupMax: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Start()()
	got := generateAll(t, e, reqs)
	for i := range reqs {
		if got[i] == nil || fmt.Sprint(got[i].Tokens) != fmt.Sprint(want[i].Tokens) {
			t.Fatalf("%s: %v, alone on one rank %v", reqs[i].ID, got[i], want[i].Tokens)
		}
	}
	st := e.Stats()
	if st.DraftTokens == 0 || st.SwapOutBytes == 0 || pol.Transitions() < 2 {
		t.Fatalf("%d draft tokens (%d kept), %d bytes parked, %d phase changes", st.DraftTokens, st.AcceptedTokens, st.SwapOutBytes, pol.Transitions())
	}
	t.Logf("%d of %d drafts kept; %d bytes parked; %d phase changes", st.AcceptedTokens, st.DraftTokens, st.SwapOutBytes, pol.Transitions())
}
