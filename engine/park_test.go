package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

// TestSeesawParksPreempted: under Seesaw with a device pool too small for
// the decodes' growth, the scheduler parks its victims on the host tier
// instead of preempting them by recomputation; the engine copies their
// KV out before the step that reuses their blocks, so every output still
// equals the request alone on one rank, nothing waits for a prefill, and
// every block comes back.
func TestSeesawParksPreempted(t *testing.T) {
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Heads: 8, KVHeads: 4, Layers: 4, Intermediate: 96, Seed: 331})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pool := tensor.NewPool(2)
	defer pool.Close()
	var reqs []Request
	for i := range 6 {
		reqs = append(reqs, Request{ID: fmt.Sprint("r", i), Prompt: fixture.Tokens(500+i, 6+i%3, m.Config.Vocab),
			MaxTokens: 10 + i%4, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}})
	}
	single, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{BlockSize: 4, NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	ref := startEngine(t, single, m.Tokenizer, nil, sched.Config{})
	pol, err := policy.NewSeesaw(parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1}, parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	// 8 device blocks hold the six prompts' first blocks but not their
	// growth to 17–21 tokens (5–6 blocks each); the host holds them all.
	x, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{Placements: pol.Placements(), BlockSize: 4, NumBlocks: 8, HostBlocks: 40, WeightsFromHost: true, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(Options{Exec: x, Policy: pol, Tokenizer: m.Tokenizer, Sched: sched.Config{MaxNumBatchedTokens: 512, Watermark: -1}})
	if err != nil {
		t.Fatal(err)
	}
	// Every request is queued before the loop starts, so one prefill
	// phase takes them all.
	streams := make([]*Stream, len(reqs))
	for i, r := range reqs {
		if streams[i], err = e.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	defer e.Start()()
	got := make([][]int, len(reqs))
	errs := make([]error, len(reqs))
	for i, s := range streams {
		for {
			ev, err := s.Recv(context.Background())
			if err != nil || ev.Err != nil {
				errs[i] = errors.Join(err, ev.Err)
				break
			}
			got[i] = append(got[i], ev.Tokens...)
			if ev.Finish != "" {
				break
			}
		}
	}
	for i, r := range reqs {
		if errs[i] != nil {
			t.Fatalf("%s: %v", r.ID, errs[i])
		}
		want, err := ref.Generate(context.Background(), r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got[i]) != fmt.Sprint(want.Tokens) {
			t.Fatalf("%s: %v, alone on one rank %v", r.ID, got[i], want.Tokens)
		}
	}
	st := e.Stats()
	if st.Preemptions == 0 {
		t.Fatalf("no request was parked for lack of device blocks: %+v", st)
	}
	// Parked victims are swapped, not recomputed: one prefill phase and
	// one decode phase, and what went out came back.
	if pol.Transitions() != 1 || st.SwapOutBytes == 0 || st.SwapOutBytes != st.SwapInBytes {
		t.Fatalf("%d phase changes (want 1: parked victims need no new prefill), stats %+v", pol.Transitions(), st)
	}
	if st.KVUsage != 0 || st.Running != 0 || st.Waiting != 0 || st.Parked != 0 || st.HostKVUsage != 0 {
		t.Fatalf("engine not idle: %+v", st)
	}
}
