package main

import (
	"fmt"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/tensor"
)

// csps resolves --policy csps: --plan sp=N gives the ranks a long
// prompt's sequence partitions spread over (any N: the heads are split
// as evenly as possible, KV heads replicated when N exceeds them). Every
// rank holds the full weights, so the deployment has no TP: a request
// that fits one partition runs whole on one rank, a longer one SP-NTP or,
// with --csps-arch sp-tp, SP-TP over the same N ranks (auto is App A's
// choice at TP = 1: SP-NTP, R13). A plan with tp, pp or dp is refused.
func (p *parallelFlags) csps(cfg *model.Config, plan parallel.Plan, set map[string]bool) (parallel.Plan, policy.Policy, error) {
	if plan.TP > 1 {
		return plan, nil, fmt.Errorf("--policy csps: tp=%d: the csps layout is --plan sp=N (full weights on every rank); SP-TP prefill runs over those N ranks with --csps-arch sp-tp", plan.TP)
	}
	if plan.PP > 1 || plan.DP > 1 {
		return plan, nil, fmt.Errorf("--policy csps: %s: the csps layout is --plan sp=N (N ranks, full weights each); pp and dp do not apply", plan)
	}
	if p.sptMax < 0 {
		return plan, nil, fmt.Errorf("--csps-spt-max must not be negative, got %d", p.sptMax)
	}
	if set["shift-threshold"] || set["prefill-plan"] || set["decode-plan"] || p.shift {
		return plan, nil, fmt.Errorf("--policy csps takes no shift or seesaw flags")
	}
	// SPTMax 0 is settled by the executor (a rank's whole pool) when it is
	// built; see newCSPSRunner.
	pol, err := policy.NewCSPS(cpuexec.CSPSPlacement(plan.SP), max(1, p.sptMax), cfg.Hidden, 1)
	if err != nil {
		return plan, nil, err
	}
	if p.sptMax == 0 {
		pol.SPTMax = 0
	}
	if p.micro < 1 {
		return plan, nil, fmt.Errorf("--csps-micro-partitions must be at least 1, got %d", p.micro)
	}
	pol.MicroPartitions = p.micro
	switch p.cspsArch {
	case "auto":
	case "sp-ntp":
		pol.ForceArch = policy.SPNTP
	case "sp-tp":
		pol.ForceArch = policy.SPTP
	default:
		return plan, nil, fmt.Errorf("--csps-arch must be auto, sp-ntp or sp-tp, got %q", p.cspsArch)
	}
	switch p.sparse {
	case "off":
		if set["csa-levels"] || set["csa-drop"] {
			return plan, nil, fmt.Errorf("--csa-levels and --csa-drop need --sparse-attention on")
		}
	case "on":
		if pol.ForceArch == policy.SPTP {
			return plan, nil, fmt.Errorf("--sparse-attention on runs CSA on SP-NTP prefills; with --csps-arch sp-tp it would only cut attention compute (R25), which is not implemented")
		}
		if p.csaLevels < 2 {
			return plan, nil, fmt.Errorf("--csa-levels must be at least 2 with --sparse-attention on (1 level is off), got %d", p.csaLevels)
		}
		if !(p.csaDrop >= 0 && p.csaDrop < 1) {
			return plan, nil, fmt.Errorf("--csa-drop must be in [0, 1), got %g", p.csaDrop)
		}
		pol.CSALevels, pol.CSADrop = p.csaLevels, p.csaDrop
	default:
		return plan, nil, fmt.Errorf("--sparse-attention must be on or off, got %q", p.sparse)
	}
	return plan, pol, nil
}

// newCSPSRunner builds the CPU executor of a csps policy: pol.Ranks ranks
// with blocks KV blocks each, and settles the policy's SPT length with
// the executor's.
func newCSPSRunner(m *model.Model, pol *policy.CSPS, kv tensor.DType, blockSize, blocks int, pool *tensor.Pool) (*cpuexec.CSPS, error) {
	x, err := cpuexec.NewCSPS(m.Config, m.Weights, cpuexec.CSPSOptions{
		Ranks: pol.Ranks, BlockSize: blockSize, PerRank: blocks, SPTMax: pol.SPTMax, CSA: cpuexec.CSA{Levels: pol.CSALevels, Drop: pol.CSADrop},
		MicroPartitions: pol.MicroPartitions,
		Configure: func(promptLen int) cpuexec.CSPSPrompt {
			c := pol.Configure(promptLen)
			return cpuexec.CSPSPrompt{SPTP: c.Arch == policy.SPTP, CSA: c.CSALevels > 1, Drop: c.CSADrop}
		},
		Options: cpuexec.Options{KVDType: kv, Pool: pool},
	})
	if err != nil {
		return nil, err
	}
	pol.SPTMax = x.SPTMax()
	return x, nil
}

// cspsPolicy is pol as a csps policy, nil for any other.
func cspsPolicy(pol policy.Policy) *policy.CSPS {
	c, _ := pol.(*policy.CSPS)
	return c
}
