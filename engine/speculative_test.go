package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/specdecode"
	"github.com/gearboxlm/gearbox/tensor"
)

// cycleRunner computes no model: each position's logits row has its
// maximum at (token+1) mod period, so a prompt that shows the cycle lets
// every n-gram draft be right. It counts steps and the tokens run.
type cycleRunner struct {
	oneRank
	period        int
	steps, tokens int
}

func (c *cycleRunner) PlanSteps() map[string]int { return map[string]int{"single": c.steps} }
func (c *cycleRunner) Step(_ context.Context, b *forward.Batch, _ parallel.Placement) ([]float32, error) {
	c.steps++
	c.tokens += b.NumTokens()
	vocab := c.cfg.Vocab
	out := make([]float32, b.NumLogits()*vocab)
	row := 0
	for _, s := range b.Seqs {
		for _, tok := range s.Tokens[len(s.Tokens)-s.NumLogits:] {
			out[row*vocab+(tok+1)%c.period] = 1
			row++
		}
	}
	return out, nil
}

// TestSpeculativeCounts checks the step and draft accounting on a runner
// whose every draft is right: after the prompt's step each step takes k
// drafts and one more token, with the drafts cut so that none goes past
// max tokens, and the output is the plain one.
func TestSpeculativeCounts(t *testing.T) {
	cfg := &model.Config{Vocab: 16, MaxPositions: 256, BOS: -1}
	run := func(spec specdecode.Config) ([]int, *cycleRunner, Stats) {
		r := &cycleRunner{oneRank: oneRank{cfg}, period: 5}
		e, err := NewEngine(Options{Exec: r, Clock: clock.NewFake(time.Unix(0, 0)), Speculative: spec})
		if err != nil {
			t.Fatal(err)
		}
		st, err := e.Submit(Request{Prompt: []int{0, 1, 2, 3, 4, 0, 1}, MaxTokens: 20, Sampling: sample.Params{Logprobs: -1}})
		if err != nil {
			t.Fatal(err)
		}
		drive(t, e)
		var got []int
		for {
			ev, ok := st.TryRecv()
			if !ok {
				break
			}
			got = append(got, ev.Tokens...)
			if ev.Finish != "" && ev.Finish != FinishLength {
				t.Fatalf("finish %q", ev.Finish)
			}
		}
		return got, r, e.Stats()
	}
	plain, pr, _ := run(specdecode.Config{})
	want := make([]int, 20)
	for i := range want {
		want[i] = (2 + i) % 5
	}
	if !slices.Equal(plain, want) || pr.steps != 20 {
		t.Fatalf("plain: %v in %d steps", plain, pr.steps)
	}
	got, r, st := run(specdecode.Config{Method: "ngram", NumTokens: 4, LookupMin: 1, LookupMax: 3})
	if !slices.Equal(got, want) {
		t.Fatalf("speculative: %v, want %v", got, want)
	}
	// 1 token, then 5, 5, 5 and 4 (3 drafts: the 20th token is the last).
	if r.steps != 5 || st.DraftTokens != 15 || st.AcceptedTokens != 15 || r.tokens != 7+5+5+5+4 {
		t.Fatalf("speculative: %d steps, %d tokens run, %d drafts, %d accepted", r.steps, r.tokens, st.DraftTokens, st.AcceptedTokens)
	}
}

// TestSpeculativeMatchesPlain runs requests on the builtin model with and
// without n-gram drafts, greedy and seeded sampling with penalties and
// log-probabilities, under one rank and under parallel plans, and on one
// rank with a KV pool so small that requests preempt each other (with the
// prefix cache on and 16-token steps), and checks the tokens are the same
// and some drafts were accepted.
func TestSpeculativeMatchesPlain(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	pool := tensor.NewPool(2)
	defer pool.Close()
	var reqs []Request
	for i, text := range []string{
		"Once upon a time, there was a little girl. Once upon a time, there was a little",
		"Lily and Ben went to the park. Lily and Ben",
		"The cat",
	} {
		p := m.Tokenizer.Encode(text, true)
		reqs = append(reqs,
			Request{ID: fmt.Sprint("greedy", i), Prompt: p, MaxTokens: 60, Sampling: sample.Params{Logprobs: 2}, IgnoreEOS: true},
			Request{ID: fmt.Sprint("seeded", i), Prompt: p, MaxTokens: 60, IgnoreEOS: i == 0, Sampling: sample.Params{
				Temperature: 0.7, TopP: 0.95, FrequencyPenalty: 0.2, Seed: int64(i), HasSeed: true, Logprobs: 1}},
		)
	}
	plainExec, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	want := generateAll(t, startEngine(t, plainExec, m.Tokenizer, m.EOS(), sched.Config{}), reqs)
	spec := specdecode.Config{Method: "ngram", NumTokens: 4, LookupMin: 1, LookupMax: 4}
	for _, c := range []struct {
		name  string
		plan  parallel.Plan
		small bool // a 40-block pool of 4-token blocks, 16-token steps
	}{
		{"single", parallel.Single, false}, {"tp=2", parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2}, false},
		{"pp=2", parallel.Plan{DP: 1, PP: 2, SP: 1, TP: 1}, false}, {"sp=2", parallel.Plan{DP: 1, PP: 1, SP: 2, TP: 1}, false},
		{"preempting", parallel.Single, true},
	} {
		plan := c.plan
		t.Run(c.name, func(t *testing.T) {
			opts := cpuexec.Options{NumBlocks: 64, Pool: pool, Placements: []parallel.Placement{parallel.Standard(plan)}}
			var sc sched.Config
			if c.small {
				opts.BlockSize, opts.NumBlocks = 4, 40
				sc = sched.Config{MaxNumBatchedTokens: 16, EnablePrefixCaching: true}
			}
			var p policy.Policy
			if plan.SP > 1 { // the shift policy: SP for the big steps, TP for the small
				pol, err := policy.NewShift(plan, 8)
				if err != nil {
					t.Fatal(err)
				}
				opts.Placements, p = pol.Placements(), pol
			}
			exec, err := cpuexec.NewExecutor(m.Config, m.Weights, opts)
			if err != nil {
				t.Fatal(err)
			}
			if plan.TP == 2 { // sample and draft on several goroutines
				defer func(n int) { parallelSampleElems = n }(parallelSampleElems)
				parallelSampleElems = 1
			}
			e, err := NewEngine(Options{Exec: exec, Policy: p, Tokenizer: m.Tokenizer, EOS: m.EOS(), Speculative: spec, Sched: sc})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Start()()
			got := generateAll(t, e, reqs)
			for i := range reqs {
				if got[i] == nil {
					t.Fatal("a request failed")
				}
				if !slices.Equal(got[i].Tokens, want[i].Tokens) || got[i].Text != want[i].Text || got[i].FinishReason != want[i].FinishReason {
					t.Fatalf("%s: speculative %v %q (%s)\nplain       %v %q (%s)", reqs[i].ID, got[i].Tokens, got[i].Text, got[i].FinishReason,
						want[i].Tokens, want[i].Text, want[i].FinishReason)
				}
				for j, lp := range got[i].Logprobs {
					if w := want[i].Logprobs[j]; math.Abs(float64(lp.Logprob-w.Logprob)) > 1e-4 || len(lp.Top) != len(w.Top) || lp.Top[0].Token != w.Top[0].Token {
						t.Fatalf("%s token %d: logprob %+v, plain %+v", reqs[i].ID, j, lp, w)
					}
				}
			}
			st := e.Stats()
			if st.AcceptedTokens == 0 || st.AcceptedTokens > st.DraftTokens || c.small && st.Preemptions == 0 {
				t.Fatalf("%d of %d drafts accepted, %d preemptions", st.AcceptedTokens, st.DraftTokens, st.Preemptions)
			}
			t.Logf("%d of %d drafts accepted, %d preemptions", st.AcceptedTokens, st.DraftTokens, st.Preemptions)
		})
	}
}
