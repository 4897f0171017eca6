package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

// seesawRig is a Seesaw engine on CPU ranks (block size 4), driven by the
// test through Iterate so that requests arrive exactly between
// iterations, and the same model on one rank for reference.
type seesawRig struct {
	t    *testing.T
	m    *model.Model
	pool *tensor.Pool
	pol  *policy.Seesaw
	x    *cpuexec.Executor
	rec  *phaseRecorder // records every step and slows swaps down (seesaw_test.go)
	e    *Engine
}

// Plans of two CPU ranks.
var (
	pp2 = parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1}
	tp2 = parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2}
)

// kvBlockBytes is the float32 KV of one block of the whole model (every
// layer, every KV head) for seesawModel.
const kvBlockBytes = 2 * 4 * 4 * 4 * 8 * 4 // keys and values × 4 layers × 4 KV heads × 4 tokens × head dim 8 × 4 bytes

func seesawModel(t *testing.T) *model.Model {
	t.Helper()
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Heads: 8, KVHeads: 4, Layers: 4, Intermediate: 96, Seed: 909})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Config.KVBytesPerToken(4) * 4; got != kvBlockBytes {
		t.Fatalf("a KV block holds %d bytes, the test assumes %d", got, kvBlockBytes)
	}
	return m
}

// newSeesawRig builds the engine: prefill under cp, decode under cd,
// device blocks per replica, host blocks; weights re-sharded from the host
// copy, as the server does.
func newSeesawRig(t *testing.T, m *model.Model, pool *tensor.Pool, cp, cd parallel.Plan, device, host int) *seesawRig {
	t.Helper()
	pol, err := policy.NewSeesaw(cp, cd)
	if err != nil {
		t.Fatal(err)
	}
	x, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{Placements: pol.Placements(), BlockSize: 4, NumBlocks: device, HostBlocks: host, WeightsFromHost: true, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	rec := &phaseRecorder{Executor: x}
	e, err := NewEngine(Options{Exec: rec, Policy: pol, Sched: sched.Config{MaxNumBatchedTokens: 512}}) // no prompt is chunked
	if err != nil {
		t.Fatal(err)
	}
	return &seesawRig{t: t, m: m, pool: pool, pol: pol, x: x, rec: rec, e: e}
}

// req is a greedy request of an n-token prompt (seeded by id) for max
// tokens past EOS.
func (r *seesawRig) req(id string, seed, n, max int) Request {
	return Request{ID: id, Prompt: fixture.Tokens(seed, n, r.m.Config.Vocab), MaxTokens: max, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}}
}

// alone returns each request's output run alone on one rank with a KV
// pool of a full context.
func (r *seesawRig) alone(reqs []Request) []*Output {
	r.t.Helper()
	single, err := cpuexec.NewExecutor(r.m.Config, r.m.Weights, cpuexec.Options{BlockSize: 4, NumBlocks: 64, Pool: r.pool})
	if err != nil {
		r.t.Fatal(err)
	}
	ref := startEngine(r.t, single, nil, nil, sched.Config{})
	out := make([]*Output, len(reqs))
	for i, q := range reqs {
		if out[i], err = ref.Generate(context.Background(), q, nil); err != nil {
			r.t.Fatal(err)
		}
	}
	return out
}

// serve submits reqs, all before the next iteration, and iterates until
// none is live (drain); it returns each request's output.
func (r *seesawRig) serve(reqs []Request) []*Output {
	r.t.Helper()
	streams := r.submit(reqs)
	r.drain()
	return r.collect(reqs, streams)
}

// submit submits reqs and returns their streams.
func (r *seesawRig) submit(reqs []Request) []*Stream {
	r.t.Helper()
	streams := make([]*Stream, len(reqs))
	for i, q := range reqs {
		st, err := r.e.Submit(q)
		if err != nil {
			r.t.Fatalf("%s: %v", q.ID, err)
		}
		streams[i] = st
	}
	return streams
}

// drain iterates until no request is live, failing the test if that
// takes more than 5 s (a hang).
func (r *seesawRig) drain() {
	r.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.e.mu.Lock()
		live := len(r.e.reqs)
		r.e.mu.Unlock()
		if live == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("hung: %d requests still live after 5 s; %+v", live, r.e.Stats())
		}
		ran, err := r.e.Iterate(ctx)
		if err != nil {
			r.t.Fatal(err)
		}
		if !ran { // nothing runnable: a swap is in flight, and signals when it lands
			select {
			case <-r.e.wake:
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// collect reads each ended request's stream into its output.
func (r *seesawRig) collect(reqs []Request, streams []*Stream) []*Output {
	r.t.Helper()
	ctx := context.Background()
	out := make([]*Output, len(reqs))
	for i, st := range streams {
		o := &Output{}
		for {
			ev, err := st.Recv(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				r.t.Fatal(err)
			}
			if ev.Err != nil {
				r.t.Fatalf("%s: %v", reqs[i].ID, ev.Err)
			}
			o.Tokens = append(o.Tokens, ev.Tokens...)
			o.FinishReason, o.Usage = ev.Finish, ev.Usage
		}
		out[i] = o
	}
	return out
}

// phases is the recorded steps with consecutive repeats folded:
// "placement:kind" per run of steps.
func (r *seesawRig) phases() []string {
	return slices.Compact(slices.Clone(r.rec.steps))
}

// idle checks that the engine ended with nothing running, waiting or
// parked and every device and host block free, and that no step touched
// a block while a swap was moving it.
func (r *seesawRig) idle() {
	r.t.Helper()
	st := r.e.Stats()
	if st.Running != 0 || st.Waiting != 0 || st.Parked != 0 || st.KVUsage != 0 || st.HostKVUsage != 0 {
		r.t.Fatalf("engine not idle: %+v", st)
	}
	if len(r.rec.violations) > 0 {
		r.t.Fatalf("swaps: %v", r.rec.violations)
	}
}

// counts checks the policy's phase changes, the executor's transitions
// (each one a weight re-shard from the host copy) and the engine's count
// of them.
func (r *seesawRig) counts(phaseChanges, transitions int) {
	r.t.Helper()
	if got := r.pol.Transitions(); got != phaseChanges {
		r.t.Errorf("%d phase changes, want %d (steps %v)", got, phaseChanges, r.phases())
	}
	if got, st := r.x.Transitions(), r.e.Stats(); got != transitions || st.Transitions != int64(transitions) {
		r.t.Errorf("executor ran %d transitions, the engine counted %d; want %d", got, st.Transitions, transitions)
	}
	// A transition to the other plan re-shards every weight from the host
	// copy: half the model per rank under pp=2 or tp=2 (norms replicated,
	// so at least that), and nothing without one.
	mv := r.x.Moved()
	if half := int64(transitions) * 4 * r.m.Config.NumParams() / 2; mv.WeightBytes < half || (transitions == 0 && mv != (parallel.TransitionStats{})) {
		r.t.Errorf("%d transitions moved %+v; want at least %d weight bytes", transitions, mv, half)
	}
}

// swapped checks the bytes parked on the host tier and brought back: the
// whole model's KV of that many blocks, each way.
func (r *seesawRig) swapped(blocks int) {
	r.t.Helper()
	st := r.e.Stats()
	want := int64(blocks) * kvBlockBytes
	if st.SwapOutBytes != want || st.SwapInBytes != want || r.x.SwapBytes() != 2*want {
		r.t.Errorf("swapped out %d, in %d (executor %d) bytes; want %d (%d blocks) each way", st.SwapOutBytes, st.SwapInBytes, r.x.SwapBytes(), want, blocks)
	}
}

// same checks that each output equals the request run alone, in full,
// ending with "length".
func (r *seesawRig) same(reqs []Request, got, want []*Output) {
	r.t.Helper()
	for i := range reqs {
		if !slices.Equal(got[i].Tokens, want[i].Tokens) || len(got[i].Tokens) != reqs[i].MaxTokens || got[i].FinishReason != FinishLength {
			r.t.Errorf("%s: %v (%s); alone on one rank %v", reqs[i].ID, got[i].Tokens, got[i].FinishReason, want[i].Tokens)
		}
	}
}

// TestSeesawEdgeCases is acceptance test A9 on CPU ranks (pp=2 prefill,
// tp=2 decode unless stated), each case served to completion under a
// 5 s hang deadline, every output checked against the request run alone
// on one rank, every block returned.
func TestSeesawEdgeCases(t *testing.T) {
	m := seesawModel(t)
	pool := tensor.NewPool(2)
	defer pool.Close()

	// Output length 1: the prefill step samples the only token, so nothing
	// is ever decoded, parked or re-sharded: no phase change at all, every
	// step a pp=2 prefill, over several steps (14 prompt blocks, 8 on the
	// device).
	t.Run("output length 1", func(t *testing.T) {
		r := newSeesawRig(t, m, pool, pp2, tp2, 8, 8)
		var reqs []Request
		for i := range 6 {
			reqs = append(reqs, r.req(fmt.Sprint("r", i), 100+i, 5+i, 1))
		}
		want := r.alone(reqs)
		r.same(reqs, r.serve(reqs), want)
		if got := r.phases(); !slices.Equal(got, []string{"pp=2:prefill"}) || len(r.rec.steps) < 2 {
			t.Errorf("steps %v, want only pp=2 prefills, several", r.rec.steps)
		}
		r.counts(0, 0)
		r.swapped(0)
		r.idle()
	})

	// Swap-out beside prefill (spec P2): the first wave's two requests
	// are prefilled and their offload starts (30 ms, phaseRecorder); the
	// second wave arrives before the next iteration, which prefills it
	// while that offload is in flight. No step touches a block being
	// swapped out, and every output equals its run alone.
	t.Run("swap-out beside prefill", func(t *testing.T) {
		r := newSeesawRig(t, m, pool, pp2, tp2, 32, 32)
		first := []Request{r.req("a", 140, 6, 3), r.req("b", 141, 7, 3)}
		second := []Request{r.req("c", 142, 8, 3), r.req("d", 143, 9, 3)}
		want := r.alone(append(slices.Clone(first), second...))
		streams := r.submit(first)
		if ran, err := r.e.Iterate(context.Background()); !ran || err != nil {
			t.Fatalf("first iteration: ran %v, %v", ran, err)
		}
		for start := time.Now(); ; time.Sleep(time.Millisecond) { // the offload's goroutine has begun
			r.rec.mu.Lock()
			begun := len(r.rec.inflight[1]) > 0
			r.rec.mu.Unlock()
			if begun {
				break
			}
			if time.Since(start) > time.Second {
				t.Fatal("no swap-out began after the first prefill")
			}
		}
		got := r.serve(second)
		got = append(r.collect(first, streams), got...)
		r.same(append(slices.Clone(first), second...), got, want)
		if r.rec.overlapped[1] == 0 {
			t.Errorf("steps %v: none ran while a swap-out was in flight", r.rec.steps)
		}
		r.idle()
	})

	// Output length 1 beside a longer request: the length-1 requests end
	// in the prefill step and are never parked; only the other one's 3
	// prompt blocks go to the host and back, and the one phase change is
	// the end-of-workload switch.
	t.Run("output length 1 beside a decode", func(t *testing.T) {
		r := newSeesawRig(t, m, pool, pp2, tp2, 16, 16)
		reqs := []Request{r.req("a", 110, 5, 1), r.req("b", 111, 8, 1), r.req("c", 112, 11, 1), r.req("d", 113, 9, 3)}
		want := r.alone(reqs)
		r.same(reqs, r.serve(reqs), want)
		if got := r.phases(); !slices.Equal(got, []string{"pp=2:prefill", "tp=2:decode"}) || len(r.rec.steps) != 3 {
			t.Errorf("steps %v, want one pp=2 prefill and two tp=2 decodes", r.rec.steps)
		}
		r.counts(1, 1)
		r.swapped(3)
		r.idle()
	})

	// A sequence whose final KV exceeds the device's KV pool (8 blocks, 32
	// positions) under every placement: the engine does not reject it up
	// front (A9 proposes that); it prefills, parks and decodes it until
	// the pool is full and ends it with "length" after 32 − 12 + 1 tokens,
	// the first ones of its run alone, without hanging and without
	// disturbing a request beside it. A prompt that alone needs more
	// blocks than the device has is refused at Submit.
	t.Run("final KV over device capacity", func(t *testing.T) {
		r := newSeesawRig(t, m, pool, pp2, tp2, 8, 16)
		if _, err := r.e.Submit(r.req("huge", 120, 33, 1)); !errors.Is(err, ErrPromptTooLong) {
			t.Fatalf("a 33-token prompt on a 32-token device: %v, want ErrPromptTooLong", err)
		}
		long, short := r.req("long", 121, 12, 40), r.req("short", 122, 6, 4)
		reqs := []Request{long, short}
		want := r.alone(reqs)
		got := r.serve(reqs)
		if n := 8*4 - 12 + 1; got[0].FinishReason != FinishLength || !slices.Equal(got[0].Tokens, want[0].Tokens[:n]) || got[0].Usage.CompletionTokens != n {
			t.Errorf("long: %v (%s), want the first %d tokens of %v and length", got[0].Tokens, got[0].FinishReason, n, want[0].Tokens)
		}
		r.same(reqs[1:], got[1:], want[1:])
		if got := r.phases(); !slices.Equal(got, []string{"pp=2:prefill", "tp=2:decode"}) {
			t.Errorf("steps %v", got)
		}
		r.counts(1, 1)
		r.swapped(3 + 2)
		r.idle()
	})

	// Two sequences over the device's capacity (final KV 39 and 40
	// positions on 32) outgrow it together in the decode phase: the
	// scheduler parks b (the later one) on the host for a's next block,
	// and b comes back once a has ended, with its KV as it left it; each
	// ends at the pool's capacity with its alone run's tokens. b must not
	// come back early: its swap-in would take a's next block, a (no victim
	// below it) would park itself, and the two would trade places forever
	// with no step run (sched.SwapIn leaves the decodes their blocks).
	t.Run("two over device capacity", func(t *testing.T) {
		r := newSeesawRig(t, m, pool, pp2, tp2, 8, 16)
		reqs := []Request{r.req("a", 130, 10, 30), r.req("b", 131, 11, 30)}
		want := r.alone(reqs)
		got := r.serve(reqs)
		for i, q := range reqs {
			if n := 8*4 - len(q.Prompt) + 1; got[i].FinishReason != FinishLength || !slices.Equal(got[i].Tokens, want[i].Tokens[:n]) {
				t.Errorf("%s: %v (%s), want the first %d tokens of %v and length", q.ID, got[i].Tokens, got[i].FinishReason, n, want[i].Tokens)
			}
		}
		if got := r.phases(); !slices.Equal(got, []string{"pp=2:prefill", "tp=2:decode"}) {
			t.Errorf("steps %v", got)
		}
		if st := r.e.Stats(); st.Preemptions != 1 {
			t.Errorf("%d preemptions, want b parked once", st.Preemptions)
		}
		r.counts(1, 1)
		r.swapped(3 + 3 + 4) // both prompts after the prefill, then b's 16 positions
		r.idle()
	})

	// A host store smaller than any prompt (2 blocks, prompts of 3): the
	// engine neither refuses the requests nor hangs; nothing is parked
	// (SwapOut finds no room), so the device plays the store, and with no
	// swap in flight the run is deterministic. 8 device blocks: a and b
	// are prefilled (6 blocks) and c (3) no longer fits the device, nor
	// the host ("full") → decode; once b has ended, c fits the device and
	// nothing is parked ("empty") → prefill c, a staying resident (S7a) →
	// decode (a ends) → prefill d → decode c and d: 5 phase changes, each
	// a transition that also moves the resident KV.
	t.Run("host store smaller than one prompt", func(t *testing.T) {
		r := newSeesawRig(t, m, pool, pp2, tp2, 8, 2)
		reqs := []Request{r.req("a", 140, 12, 4), r.req("b", 141, 9, 3), r.req("c", 142, 10, 5), r.req("d", 143, 9, 2)}
		want := r.alone(reqs)
		r.same(reqs, r.serve(reqs), want)
		p, d := "pp=2:prefill", "tp=2:decode"
		if got, want := r.rec.steps, []string{p, d, d, p, d, p, d, d, d}; !slices.Equal(got, want) {
			t.Errorf("steps %v, want %v", got, want)
		}
		r.counts(5, 5)
		if mv := r.x.Moved(); mv.KVBytes == 0 {
			t.Errorf("no KV moved by the transitions: %+v", mv)
		}
		r.swapped(0)
		r.idle()
	})

	// c_p == c_d (pp=2 both): the phases still alternate and KV is still
	// parked and brought back (under the same layout), but no transition
	// runs and no weight byte moves; decode steps run under the decode
	// placement's name on the prefill placement's shards (the executor,
	// holding only the first placement's weights, must not reload them).
	t.Run("prefill plan equals decode plan", func(t *testing.T) {
		r := newSeesawRig(t, m, pool, pp2, pp2, 16, 4)
		weights := r.x.WeightBytes()
		reqs := []Request{r.req("a", 150, 12, 4), r.req("b", 151, 9, 5), r.req("c", 152, 6, 3)}
		want := r.alone(reqs)
		r.same(reqs, r.serve(reqs), want)
		// a's 3 blocks fit the 4-block host; b's 3 then do not, so b and c
		// stay on the device, and with nothing waiting the decode phase
		// starts.
		if got := r.phases(); !slices.Equal(got, []string{"pp=2:prefill", "pp=2 (decode):decode"}) {
			t.Errorf("steps %v", got)
		}
		r.counts(1, 0)
		r.swapped(3)
		if got := r.x.WeightBytes(); !slices.Equal(got, weights) {
			t.Errorf("weight bytes per rank %v, before %v", got, weights)
		}
		r.idle()
	})

	// A workload smaller than the host store (S7b): everything is
	// prefilled and parked with the store far from full, and the phase
	// switches to decode because nothing is waiting; it stays there once
	// the work is done. A later wave, arriving with the store empty,
	// switches back to prefill (S4) and, once prefilled, to decode again.
	t.Run("workload smaller than the host store", func(t *testing.T) {
		r := newSeesawRig(t, m, pool, pp2, tp2, 16, 64)
		wave1 := []Request{r.req("a", 160, 12, 4), r.req("b", 161, 9, 5), r.req("c", 162, 6, 3)}
		want := r.alone(wave1)
		r.same(wave1, r.serve(wave1), want)
		if got := r.phases(); !slices.Equal(got, []string{"pp=2:prefill", "tp=2:decode"}) {
			t.Errorf("steps %v", got)
		}
		r.counts(1, 1)
		r.swapped(3 + 3 + 2) // 8 of 64 host blocks: not full when the phase changed
		if st := r.e.Stats(); st.Phase != sched.DecodeOnly {
			t.Errorf("phase %s after the workload, want decode", st.Phase)
		}
		r.idle()

		wave2 := []Request{r.req("d", 163, 8, 3), r.req("e", 164, 10, 2)}
		want = r.alone(wave2)
		r.same(wave2, r.serve(wave2), want)
		if got := r.phases(); !slices.Equal(got, []string{"pp=2:prefill", "tp=2:decode", "pp=2:prefill", "tp=2:decode"}) {
			t.Errorf("steps %v", got)
		}
		r.counts(3, 3)
		r.swapped(8 + 2 + 3)
		r.idle()
	})
}
