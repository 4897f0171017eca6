package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/specdecode"
	"github.com/gearboxlm/gearbox/tensor"
)

// TestCSPSEngineMatchesSingleRank serves long and short prompts at once
// under the csps policy on 4 CPU ranks (SPT 64 tokens, so a 300-token
// prompt spans 4 ranks and is prefilled in chunks; short ones live whole
// on one rank each) and checks every greedy output equals one rank's,
// with App A's architecture (SP-NTP: no TP) and with SP-TP forced
// (policy.CSPS.ForceArch, wired into the executor's Configure as cmd
// does).
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

	for _, force := range []policy.Arch{policy.Local, policy.SPTP} {
		t.Run(fmt.Sprint("force=", force), func(t *testing.T) { cspsEngineRun(t, m, pool, reqs, want, force, specdecode.Config{}) })
	}
	// N-gram drafts: decode steps of several tokens, which may cross from
	// one rank's KV shard into the next.
	t.Run("speculative", func(t *testing.T) {
		cspsEngineRun(t, m, pool, reqs, want, policy.Local, specdecode.Config{Method: "ngram", NumTokens: 4, LookupMin: 1, LookupMax: 3})
	})
}

// cspsEngineRun serves reqs on a CSPS engine over 4 ranks with the
// policy's ForceArch force and speculative decoding spec, and checks the
// outputs equal want.
func cspsEngineRun(t *testing.T, m *model.Model, pool *tensor.Pool, reqs []Request, want []*Output, force policy.Arch, spec specdecode.Config) {
	cfg := m.Config
	pol, err := policy.NewCSPS(cpuexec.CSPSPlacement(4), 64, cfg.Hidden, 1)
	if err != nil {
		t.Fatal(err)
	}
	pol.ForceArch = force
	c, err := cpuexec.NewCSPS(cfg, m.Weights, cpuexec.CSPSOptions{Ranks: 4, PerRank: 48, SPTMax: 64, Options: cpuexec.Options{Pool: pool},
		Configure: func(n int) cpuexec.CSPSPrompt { return cpuexec.CSPSPrompt{SPTP: pol.Configure(n).Arch == policy.SPTP} }})
	if err != nil {
		t.Fatal(err)
	}
	arch := policy.SPNTP
	if force == policy.SPTP {
		arch = policy.SPTP
	}
	if got := pol.Configure(len(reqs[0].Prompt)); got.Degree != 4 || got.Arch != arch {
		t.Fatalf("300-token prompt configured as %+v, want 4 ranks of %s", got, arch)
	}
	e, err := NewEngine(Options{Exec: c, Policy: pol, Tokenizer: m.Tokenizer, EOS: m.EOS(), Sched: sched.Config{MaxNumBatchedTokens: 128}, Speculative: spec})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Start()()
	got := generateAll(t, e, reqs)
	if t.Failed() {
		return
	}
	for i := range reqs {
		if fmt.Sprint(got[i].Tokens) != fmt.Sprint(want[i].Tokens) {
			t.Fatalf("request %d: csps %v, one rank %v", i, got[i].Tokens, want[i].Tokens)
		}
	}
	if spec.Method != "" {
		if st := e.Stats(); st.AcceptedTokens == 0 {
			t.Fatalf("%d of %d drafts accepted", st.AcceptedTokens, st.DraftTokens)
		}
	}
	st := c.CommStats()
	if a2a := st.Kind(comm.KindAllToAll).SentBytes; a2a == 0 {
		t.Fatal("no all-to-all ran: the long prompts were not sequence-parallel, nor did their decodes move queries")
	}
	if ag, rs := st.Kind(comm.KindAllGather).SentBytes, st.Kind(comm.KindReduceScatter).SentBytes; (arch == policy.SPTP) != (ag > 0 && rs > 0) {
		t.Fatalf("%s moved %d bytes in all-gathers and %d in reduce-scatters", arch, ag, rs)
	}
}
