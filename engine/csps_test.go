package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/tensor"
)

// TestCSPSEngineMatchesSingleRank serves long and short prompts at once
// under the csps policy on 4 CPU ranks (SPT 64 tokens, so a 300-token
// prompt spans 4 ranks and is prefilled in chunks; short ones live whole
// on one rank each) and checks every greedy output equals one rank's.
func TestCSPSEngineMatchesSingleRank(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	pool := tensor.NewPool(2)
	defer pool.Close()
	cfg := m.Config
	prompts := [][]int{
		fixture.Tokens(1, 300, cfg.Vocab),
		m.Tokenizer.Encode("Once upon a time", true),
		fixture.Tokens(2, 150, cfg.Vocab),
		m.Tokenizer.Encode("Lily and Ben went to the park", true),
		m.Tokenizer.Encode("The cat", true),
	}
	var reqs []Request
	for i, p := range prompts {
		reqs = append(reqs, Request{ID: fmt.Sprint("r", i), Prompt: p, MaxTokens: 48, Sampling: sample.Params{Logprobs: -1}, IgnoreEOS: true})
	}
	alone, err := cpuexec.NewExecutor(cfg, m.Weights, cpuexec.Options{NumBlocks: 128, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	ref := startEngine(t, alone, m.Tokenizer, m.EOS(), sched.Config{})
	want := make([]*Output, len(reqs))
	for i, r := range reqs {
		if want[i], err = ref.Generate(context.Background(), r, nil); err != nil {
			t.Fatal(err)
		}
	}

	c, err := cpuexec.NewCSPS(cfg, m.Weights, cpuexec.CSPSOptions{Ranks: 4, PerRank: 48, SPTMax: 64, Options: cpuexec.Options{Pool: pool}})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.NewCSPS(c.Placement(), c.SPTMax(), cfg.Hidden, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := pol.Configure(len(prompts[0])); got.Degree != 4 || got.Arch != policy.SPNTP {
		t.Fatalf("300-token prompt configured as %+v, want 4 ranks of SP-NTP", got)
	}
	e, err := NewEngine(Options{Exec: c, Policy: pol, Tokenizer: m.Tokenizer, EOS: m.EOS(), Sched: sched.Config{MaxNumBatchedTokens: 128}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Start()()
	got := make([]*Output, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := e.Generate(context.Background(), r, nil)
			if err != nil {
				t.Error(err)
			}
			got[i] = out
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i := range reqs {
		if fmt.Sprint(got[i].Tokens) != fmt.Sprint(want[i].Tokens) {
			t.Fatalf("request %d: csps %v, one rank %v", i, got[i].Tokens, want[i].Tokens)
		}
	}
	if a2a := c.CommStats().Kind(comm.KindAllToAll).SentBytes; a2a == 0 {
		t.Fatal("no all-to-all ran: the long prompts were not sequence-parallel")
	}
}
