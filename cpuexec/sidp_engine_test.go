package cpuexec

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/specdecode"
	"github.com/gearboxlm/gearbox/tensor"
)

// TestSiDPEngine serves requests of different prompt and output lengths
// together through the engine under the sidp policy, with a threshold
// and window small enough that the shrinking tail (replicas going idle one
// by one) moves the group to CaS: every request's greedy tokens equal
// its tokens served alone on one rank, and steps ran in both modes.
func TestSiDPEngine(t *testing.T) {
	l := load(t, fixture.Spec{Heads: 4, KVHeads: 2, Layers: 5, Intermediate: 96, Seed: 1717})
	cfg := l.m.Config
	pool := tensor.NewPool(2)
	defer pool.Close()
	var reqs []engine.Request
	for i := range 9 {
		reqs = append(reqs, engine.Request{ID: fmt.Sprint("r", i), Prompt: fixture.Tokens(900+i, 3+2*i, cfg.Vocab),
			MaxTokens: 3 + 3*i, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}})
	}
	single, err := NewExecutor(cfg, l.m.Weights, Options{BlockSize: 4, NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	want := serveAll(t, engine.Options{Exec: single}, reqs, false)
	for _, c := range []struct {
		plan string
		spec specdecode.Config
	}{{"dp=2", specdecode.Config{}}, {"dp=4", specdecode.Config{}}, {"dp=2,tp=2", specdecode.Config{}},
		{"dp=2", specdecode.Config{Method: "ngram", NumTokens: 3, LookupMin: 1, LookupMax: 2}}, // drafts in WaS and CaS steps
	} {
		ps := c.plan
		name := ps
		if c.spec.Method != "" {
			name += "/speculative"
		}
		t.Run(name, func(t *testing.T) {
			plan, _ := parallel.Parse(ps)
			pol, err := policy.NewSiDP(plan, 4, 2, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			x, err := NewExecutor(cfg, l.m.Weights, Options{Placements: pol.Placements(), BlockSize: 4, NumBlocks: 64, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			got := serveAll(t, engine.Options{Exec: x, Policy: pol, Sched: sched.Config{MaxNumBatchedTokens: 64}, Speculative: c.spec}, reqs, true)
			for i := range reqs {
				if !slices.Equal(got[i], want[i]) {
					t.Errorf("%s: %v, alone on one rank %v", reqs[i].ID, got[i], want[i])
				}
			}
			steps := x.PlanSteps()
			if steps[pol.WaS.Name] == 0 || steps[pol.CaS.Name] == 0 || pol.Switches() == 0 {
				t.Errorf("steps %v, %d switches: want both modes", steps, pol.Switches())
			}
			t.Logf("steps %v, %d switches", steps, pol.Switches())
		})
	}
}
