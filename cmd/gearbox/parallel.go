package main

import (
	"flag"
	"fmt"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
)

// parallelFlags are the layout flags shared by generate, inspect and serve:
// Gearbox's own (--plan, --policy, --shift-threshold) and the equivalents
// vLLM and ArcticInference users type.
type parallelFlags struct {
	fs        *flag.FlagSet
	plan      string
	policy    string
	threshold int
	tp, pp    int
	dp, sp    int
	shift     bool
	arcticThr int
}

func addParallelFlags(fs *flag.FlagSet) *parallelFlags {
	p := &parallelFlags{fs: fs}
	fs.StringVar(&p.plan, "plan", "", "parallel layout as factors, e.g. tp=2,sp=4 (dp, pp, sp, tp; missing factors are 1)")
	fs.StringVar(&p.policy, "policy", "static", "plan policy: static (every step under --plan) or shift (Shift Parallelism: the base plan above --shift-threshold batched tokens, full TP at or below)")
	fs.IntVar(&p.threshold, "shift-threshold", policy.DefaultShiftThreshold, "batched tokens at or below which the shift policy runs full TP")
	fs.IntVar(&p.tp, "tensor-parallel-size", 1, "vLLM spelling of tp= in --plan")
	fs.IntVar(&p.pp, "pipeline-parallel-size", 1, "vLLM spelling of pp= in --plan")
	fs.IntVar(&p.dp, "data-parallel-size", 1, "vLLM spelling of dp= in --plan")
	fs.IntVar(&p.sp, "ulysses-sequence-parallel-size", 1, "ArcticInference spelling of sp= in --plan")
	fs.BoolVar(&p.shift, "enable-shift-parallel", false, "ArcticInference spelling of --policy shift")
	fs.IntVar(&p.arcticThr, "shift-parallel-threshold", policy.DefaultShiftThreshold, "ArcticInference spelling of --shift-threshold")
	return p
}

// resolve turns the flags into a validated plan and policy for cfg. Mixed
// spellings are accepted when they agree and rejected with the flag to
// change when they do not.
func (p *parallelFlags) resolve(cfg *model.Config) (parallel.Plan, policy.Policy, error) {
	set := map[string]bool{}
	p.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	plan, err := parallel.Parse(p.plan)
	if err != nil {
		return plan, nil, err
	}
	aliases := []struct {
		flag string
		val  int
		dst  *int
		name string
	}{
		{"tensor-parallel-size", p.tp, &plan.TP, "tp"},
		{"pipeline-parallel-size", p.pp, &plan.PP, "pp"},
		{"data-parallel-size", p.dp, &plan.DP, "dp"},
		{"ulysses-sequence-parallel-size", p.sp, &plan.SP, "sp"},
	}
	for _, a := range aliases {
		if !set[a.flag] {
			continue
		}
		if a.val < 1 {
			return plan, nil, fmt.Errorf("--%s must be at least 1, got %d", a.flag, a.val)
		}
		if set["plan"] && *a.dst != a.val {
			return plan, nil, fmt.Errorf("--%s=%d disagrees with %s=%d in --plan %q: give the degree once", a.flag, a.val, a.name, *a.dst, p.plan)
		}
		*a.dst = a.val
	}
	if err := plan.Validate(cfg); err != nil {
		return plan, nil, err
	}
	name := p.policy
	if p.shift {
		if set["policy"] && name != "shift" {
			return plan, nil, fmt.Errorf("--enable-shift-parallel conflicts with --policy %s", name)
		}
		name = "shift"
	}
	threshold := p.threshold
	if set["shift-parallel-threshold"] {
		if set["shift-threshold"] && p.threshold != p.arcticThr {
			return plan, nil, fmt.Errorf("--shift-parallel-threshold=%d disagrees with --shift-threshold=%d: give it once", p.arcticThr, p.threshold)
		}
		threshold = p.arcticThr
	}
	switch name {
	case "static":
		if set["shift-threshold"] || set["shift-parallel-threshold"] {
			return plan, nil, fmt.Errorf("--shift-threshold needs --policy shift (or --enable-shift-parallel)")
		}
		return plan, policy.NewStatic(plan), nil
	case "shift":
		pol, err := policy.NewShift(plan, threshold)
		if err != nil {
			return plan, nil, fmt.Errorf("%w; for example --plan sp=%d", err, max(2, plan.TP))
		}
		if shifted := pol.Shifted.Plan; shifted.Validate(cfg) != nil {
			return plan, nil, fmt.Errorf("shift plan %s: %w", shifted, shifted.Validate(cfg))
		}
		return plan, pol, nil
	}
	return plan, nil, fmt.Errorf("unknown --policy %q (static or shift)", name)
}
