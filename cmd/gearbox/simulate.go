package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gearboxlm/gearbox/policy"
)

func runSimulate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("simulate", "simulate --model ID|DIR --hardware NODE [--plan PLAN] [--policy static|shift|seesaw|sidp|csps|nitsum] --dataset SPEC [flags]", stderr)
	sf := addSimFlags(fs)
	par := addParallelFlags(fs)
	cf := addCSPSFlags(fs)
	nf := addNitsumSimFlags(fs) // after the parallel flags: it reuses their --nitsum-window where serve defines one
	resultJSON := fs.String("result-json", "", "write the report (vllm bench serve's keys plus the plan timeline) here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if sf.spec.Method != "" && (par.policy == "nitsum" || par.policy == "csps") {
		return fmt.Errorf("simulate: --speculative-config is not modelled under --policy %s", par.policy)
	}
	if par.policy == "nitsum" {
		// Nitsum re-plans a pool of instances every window (sim.RunNitsum).
		return simulateNitsum(sf, nf, stdout, stderr)
	}
	if par.policy == "csps" {
		// CSPS picks each request's degree and architecture on a cluster
		// (--hardware may name one, which setup's node parser rejects).
		return simulateCSPS(sf, cf, par.cspsPrefill(), stdout, stderr)
	}
	s, err := sf.setup()
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	plan, pol, err := par.resolve(s.cfg)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	if err := checkRanks(plan, s.node); err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	if _, ok := pol.(*policy.Seesaw); ok {
		s.hostKVBytes = int64(par.swapSpace * (1 << 30))
	}
	start := time.Now()
	res, err := s.run(plan, pol, s.reqs)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	wall := time.Since(start)
	res.Report.RunInfo.Label = fmt.Sprintf("simulate %s on %s, %s, policy %s", sf.model, s.node, plan, pol)
	if err := res.Report.WriteTable(stdout); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "simulated %.1f s of serving in %d steps (%.2f s wall, %.0f steps/s); KV capacity %d tokens per replica; %d preemptions; peak %.0f tok/s; %d plan spans\n",
		res.SimDuration.Seconds(), res.Steps, wall.Seconds(), float64(res.Steps)/wall.Seconds(), res.KVTokens, res.Preemptions, res.PeakThroughput(), len(res.Timeline))
	if res.DraftTokens > 0 {
		fmt.Fprintf(stderr, "speculative decoding: %d of %d draft tokens kept\n", res.AcceptedTokens, res.DraftTokens)
	}
	if res.DraftSteps > 0 {
		fmt.Fprintf(stderr, "draft model: %d steps, %.2f s of the run\n", res.DraftSteps, res.DraftSeconds)
	}
	if *resultJSON == "" {
		return nil
	}
	data, err := json.Marshal(res.Report)
	if err != nil {
		return err
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return err
	}
	out["plan_timeline"] = res.Timeline
	out["hardware"] = s.node.String()
	out["plan"] = plan.String()
	out["policy"] = pol.String()
	out["simulated_steps"] = res.Steps
	out["peak_total_token_throughput"] = res.PeakThroughput()
	data, err = json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(*resultJSON, data, 0o644)
}
