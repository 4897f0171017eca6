package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
)

// parallelFlags are the layout flags shared by generate, inspect and serve:
// Gearbox's own (--plan, --policy, --shift-threshold) and the equivalents
// vLLM and ArcticInference users type.
type parallelFlags struct {
	fs             *flag.FlagSet
	plan           string
	policy         string
	threshold      int
	tp, pp         int
	dp, sp         int
	shift          bool
	arcticThr      int
	prefill        string        // --prefill-plan (seesaw)
	decode         string        // --decode-plan (seesaw)
	swapSpace      float64       // --swap-space, GiB of host KV store per rank (seesaw)
	sidpThr        int           // --sidp-threshold (sidp)
	sidpWin        int           // --sidp-window (sidp)
	sidpSlots      int           // --sidp-slots (sidp); 0: dp−1
	sptMax         int           // --csps-spt-max, tokens (csps)
	sparse         string        // --sparse-attention on|off (csps)
	csaLevels      int           // --csa-levels (csps)
	csaDrop        float64       // --csa-drop (csps)
	micro          int           // --csps-micro-partitions (csps)
	cspsTTFT       float64       // --csps-ttft-ms (csps): the TTFT objective, ms
	cspsProf       string        // --csps-profile (csps): calibration profile for its predictor
	cspsArch       string        // --csps-arch auto|sp-ntp|sp-tp (csps)
	dtype, quant   string        // the device's --dtype and --quantization, set by the command: the matrices csps's predictor prices
	nitsumWin      time.Duration // --nitsum-window (nitsum)
	nitsumBudget   float64       // --nitsum-weight-budget, GiB per rank (nitsum); 0: none
	nitsumColocate bool          // --nitsum-colocate (nitsum)
}

func addParallelFlags(fs *flag.FlagSet) *parallelFlags {
	p := &parallelFlags{fs: fs}
	fs.StringVar(&p.plan, "plan", "", "parallel layout as factors, e.g. tp=2,sp=4 (dp, pp, sp, tp; missing factors are 1)")
	fs.StringVar(&p.policy, "policy", "static", "plan policy: static (every step under --plan), shift (Shift Parallelism: the base plan above --shift-threshold batched tokens, full TP at or below), seesaw (prefill under --prefill-plan, decode under --decode-plan, KV parked on a host store of --swap-space), sidp (the dp replicas of --plan pool the MLP weights: each layer's owned by one replica, fetched by the others (WaS) or served by its owner (CaS) below --sidp-threshold batched tokens), csps (--plan sp=N: long prompts' KV sharded along the sequence over N ranks, SP-NTP or SP-TP prefill (--csps-arch), decode moving q to the shards) or nitsum (serve only: the --plan tp=N CPU ranks as instances of changing TP degree for the --slo-tiers tiers, KV migrated between them every --nitsum-window)")
	fs.IntVar(&p.sidpThr, "sidp-threshold", policy.DefaultSiDPThreshold, "sidp: batched tokens per step below which the group moves to Compute-as-a-Service (after --sidp-window steps; back to Weight-as-a-Service at twice it); the simulator profiles its own B_th per GPU and model instead (docs/simulator.md)")
	fs.IntVar(&p.sidpWin, "sidp-window", policy.DefaultSiDPWindow, "sidp: consecutive steps beyond the hysteresis band before the mode switches")
	fs.IntVar(&p.sidpSlots, "sidp-slots", 0, "sidp: MLP layers each rank's weight cache holds (default dp−1, the fewest allowed)")
	fs.StringVar(&p.sparse, "sparse-attention", "off", "csps: off (exact attention) or on (CSA: multi-level sparse attention for prompts spread over several ranks, --csa-levels and --csa-drop)")
	fs.IntVar(&p.csaLevels, "csa-levels", 2, "csps with --sparse-attention on: CSA levels (level 1 a rank's own partition, level v 2^(v-1) ranks, the top all)")
	fs.Float64Var(&p.csaDrop, "csa-drop", 0, "csps with --sparse-attention on: level 2's drop ratio in [0, 1); level 2+n keeps (1-drop)/2^n")
	fs.IntVar(&p.micro, "csps-micro-partitions", 1, "csps: micro-partitions of a prompt's SP-NTP attention (each one's all-to-alls overlapped with its neighbours' attention) or SP-TP attention (each one's all-gather and reduce-scatter overlapped with its neighbours' projections and attention)")
	fs.Float64Var(&p.cspsTTFT, "csps-ttft-ms", 0, "csps with --sparse-attention on: TTFT objective; each prompt over several ranks gets the smallest level-2 drop (0, 0.02, …, 0.9) whose predicted prefill meets it, none when dense attention does (predictor: the simulator's CSPS prefill model on --csps-profile)")
	fs.StringVar(&p.cspsProf, "csps-profile", "", "csps with --csps-ttft-ms: this machine's profile from gearbox calibrate, for the prefill predictor")
	fs.StringVar(&p.cspsArch, "csps-arch", "auto", "csps: prefill architecture of prompts over several ranks: auto (App A's choice with the deployment's TP; the CPU ranks have none, so SP-NTP), sp-ntp (two all-to-alls) or sp-tp (all-gather + reduce-scatter, each rank a head chunk of the attention weights)")
	fs.IntVar(&p.sptMax, "csps-spt-max", 0, "csps: longest sequence partition one rank takes, in tokens; a prompt spans ceil(len/this) ranks (0: a rank's whole KV pool)")
	fs.DurationVar(&p.nitsumWin, "nitsum-window", nitsum.DefaultWindow, "nitsum: the control window: every window the planner re-lays the --plan tp=N ranks out as instances of TP 1, 2, 4, … from the last window's arrival rate per --slo-tiers tier")
	fs.Float64Var(&p.nitsumBudget, "nitsum-weight-budget", 0, "nitsum: GiB of weights a rank may hold under the rule full copy + Σ_{t>1} (attention output + MLP down)/t; a model over it is refused (0: no limit)")
	fs.BoolVar(&p.nitsumColocate, "nitsum-colocate", false, "nitsum: every instance serves whole requests, instead of prefill instances handing requests to their tier's decode instances after the first token")
	fs.StringVar(&p.prefill, "prefill-plan", "", "seesaw: the layout prefills run under, e.g. pp=4")
	fs.StringVar(&p.decode, "decode-plan", "", "seesaw: the layout decodes run under, e.g. tp=4")
	fs.Float64Var(&p.swapSpace, "swap-space", 4, "seesaw: host KV store in GiB per rank (vLLM's --swap-space)")
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
	if p.policy == "csps" {
		return p.csps(cfg, plan, set)
	}
	for _, f := range []string{"csps-spt-max", "sparse-attention", "csa-levels", "csa-drop", "csps-micro-partitions", "csps-ttft-ms", "csps-profile", "csps-arch"} {
		if set[f] {
			return plan, nil, fmt.Errorf("--%s needs --policy csps", f)
		}
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
	if name != "seesaw" && (set["prefill-plan"] || set["decode-plan"]) {
		return plan, nil, fmt.Errorf("--prefill-plan and --decode-plan need --policy seesaw")
	}
	if name != "sidp" && (set["sidp-threshold"] || set["sidp-window"] || set["sidp-slots"]) {
		return plan, nil, fmt.Errorf("--sidp-threshold, --sidp-window and --sidp-slots need --policy sidp")
	}
	if name != "nitsum" && (set["nitsum-window"] || set["nitsum-weight-budget"] || set["nitsum-colocate"]) {
		return plan, nil, fmt.Errorf("--nitsum-window, --nitsum-weight-budget and --nitsum-colocate need --policy nitsum")
	}
	switch name {
	case "nitsum":
		return plan, nil, fmt.Errorf("--policy nitsum is served by 'gearbox serve' only: it runs several engines, not one plan per step")
	case "sidp":
		if set["shift-threshold"] || set["shift-parallel-threshold"] {
			return plan, nil, fmt.Errorf("--shift-threshold needs --policy shift, not sidp")
		}
		if p.sidpSlots != 0 && p.sidpSlots < plan.DP-1 {
			return plan, nil, fmt.Errorf("--sidp-slots %d: a peak-shifted cycle fetches up to dp−1 = %d layers before it uses the first; give at least that", p.sidpSlots, plan.DP-1)
		}
		pol, err := policy.NewSiDP(plan, p.sidpThr, p.sidpWin, nil)
		if err != nil {
			return plan, nil, fmt.Errorf("%w; for example --plan dp=%d", err, max(2, plan.DP))
		}
		return plan, pol, nil
	case "seesaw":
		return p.seesaw(cfg, set)
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
	return plan, nil, fmt.Errorf("unknown --policy %q (static, shift, seesaw, sidp, csps or nitsum)", name)
}

// seesaw resolves --policy seesaw: two plans of the same ranks; the
// engine starts under the prefill plan.
func (p *parallelFlags) seesaw(cfg *model.Config, set map[string]bool) (parallel.Plan, policy.Policy, error) {
	if !set["prefill-plan"] || !set["decode-plan"] {
		return parallel.Plan{}, nil, fmt.Errorf("--policy seesaw needs --prefill-plan and --decode-plan, for example --prefill-plan pp=4 --decode-plan tp=4")
	}
	if set["plan"] || set["tensor-parallel-size"] || set["pipeline-parallel-size"] {
		return parallel.Plan{}, nil, fmt.Errorf("--policy seesaw takes its layouts from --prefill-plan and --decode-plan, not --plan")
	}
	var plans [2]parallel.Plan
	for i, f := range []struct{ flag, val string }{{"prefill-plan", p.prefill}, {"decode-plan", p.decode}} {
		pl, err := parallel.Parse(f.val)
		if err != nil {
			return parallel.Plan{}, nil, fmt.Errorf("--%s: %w", f.flag, err)
		}
		if pl.SP > 1 {
			return parallel.Plan{}, nil, fmt.Errorf("--%s %s: Seesaw changes TP and PP; sequence parallelism is the shift policy's", f.flag, pl)
		}
		if err := pl.Validate(cfg); err != nil {
			return parallel.Plan{}, nil, fmt.Errorf("--%s: %w", f.flag, err)
		}
		plans[i] = pl
	}
	if p.swapSpace <= 0 {
		return parallel.Plan{}, nil, fmt.Errorf("--swap-space must be positive, got %g GiB", p.swapSpace)
	}
	pol, err := policy.NewSeesaw(plans[0], plans[1])
	if err != nil {
		return parallel.Plan{}, nil, err
	}
	return plans[0], pol, nil
}

// hostKVBytes is the host KV store's size in bytes per replica for a
// policy that parks KV on the host (seesaw): --swap-space GiB per rank of
// the replica; 0 otherwise. The executor's side turns it into blocks of
// the whole model's KV in the cache's dtype (hostBlocks).
func (p *parallelFlags) hostKVBytes(pol policy.Policy) int64 {
	s, ok := pol.(*policy.Seesaw)
	if !ok {
		return 0
	}
	ranks := s.Prefill.Ranks() / s.Prefill.Plan.DP
	return int64(p.swapSpace * float64(ranks) * (1 << 30))
}

// sidpSlots is the WaS slot count for the executor: --sidp-slots under a
// policy that pools the MLP (0: the executor's default, dp−1), else 0.
func (p *parallelFlags) sidpSlotsFor(pol policy.Policy) int {
	if _, ok := pol.(*policy.SiDP); !ok {
		return 0
	}
	return p.sidpSlots
}
