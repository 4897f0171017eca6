package main

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sim"
)

// runSiDP simulates reqs on plan as a SiDP group, for simulate and plan
// under --policy sidp: plan's DP replicas of TP GPUs each, sharing their
// FFN weights (layer l's on replica l mod DP), stepping in lockstep and
// switching between weight- and compute-as-a-service by the profiled
// threshold (sim.RunSiDP). It returns the run in the form simulate and
// plan report; the timeline's spans are the group's modes (WaS, CaS), and
// every switch is logged.
func (s *simSetup) runSiDP(plan parallel.Plan, reqs []bench.Request) (*sim.RunResult, error) {
	if s.spec.Tokens > 0 {
		return nil, fmt.Errorf("--speculative-config is not modelled under --policy sidp")
	}
	if plan.DP < 2 || plan.PP != 1 || plan.SP != 1 {
		return nil, fmt.Errorf("--policy sidp needs a plan of DP ≥ 2 replicas with TP only inside them (dp=8, dp=4,tp=2), got %s", plan)
	}
	res, err := sim.RunSiDP(sim.SiDPRunOptions{
		Model: s.cfg, Cost: s.cost, SiDP: sim.SiDP{Replicas: plan.DP, TP: plan.TP}, Sched: s.sched,
		Requests: slices.Clone(reqs), Report: bench.ReportOptions{SLO: s.slo, Percentiles: simPercentiles},
		Logger: slog.Default(),
	})
	if err != nil {
		return nil, err
	}
	return &res.RunResult, nil
}

// sidpPlans are the plans of gpus GPUs that --policy sidp can run for
// cfg, for plan's candidates: DP ≥ 2 replicas of TP GPUs each, TP from 1
// up, every plan the model's heads allow.
func sidpPlans(cfg *model.Config, gpus int) []parallel.Plan {
	var out []parallel.Plan
	for tp := 1; tp <= gpus/2; tp++ {
		p := parallel.Plan{DP: gpus / tp, PP: 1, SP: 1, TP: tp}
		if gpus%tp == 0 && p.Validate(cfg) == nil {
			out = append(out, p)
		}
	}
	return out
}
