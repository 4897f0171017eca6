package main

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/cmd/gearbox/internal/calibrate"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/sim"
	"github.com/gearboxlm/gearbox/specdecode"
)

// simFlags are the flags simulate and plan share: the deployment's model,
// node and precision, the engine's limits, and the workload.
type simFlags struct {
	model, hardware, dataset string
	rate, burstiness         float64
	replay                   bool
	timeScale                float64
	maxRequests              int
	seed                     int64
	batched, maxSeqs         int
	prefix                   bool
	dtype, quant, kvDType    string
	sloTTFT, sloTPOT         float64
	profile                  string
	overlap                  bool
	spec                     specFlag
	acceptance               float64
}

func addSimFlags(fs *flag.FlagSet) *simFlags {
	f := &simFlags{}
	fs.StringVar(&f.model, "model", "meta-llama/Llama-3.1-8B-Instruct", "model preset (Hugging Face id; see sim.Models) or a directory with config.json")
	fs.StringVar(&f.hardware, "hardware", "8xH200", "node, e.g. 8xH200, 4xA10-pcie, 8xA100-80gb-pcie, or 2xcpu with --profile")
	fs.StringVar(&f.profile, "profile", "", "CPU profile written by gearbox calibrate, for --hardware cpu or Nxcpu (ranks sharing this machine)")
	fs.StringVar(&f.dataset, "dataset", "synthetic:in=4096,out=250", "azure:FILE, mooncake:FILE or synthetic[:in=N,out=M,n=K]")
	fs.Float64Var(&f.rate, "request-rate", math.Inf(1), "requests per second (inf: all at once)")
	fs.Float64Var(&f.burstiness, "burstiness", 1, "gamma shape of inter-arrival times (1 = Poisson)")
	fs.BoolVar(&f.replay, "replay-timestamps", false, "replay the trace's arrival times")
	fs.Float64Var(&f.timeScale, "time-scale", 1, "with --replay-timestamps, divide the trace's times by this")
	fs.IntVar(&f.maxRequests, "max-requests", 0, "use the first N requests (0: all; synthetic: the count)")
	fs.IntVar(&f.maxRequests, "num-prompts", 0, "vLLM's spelling of --max-requests")
	fs.Int64Var(&f.seed, "seed", 0, "seed for arrivals and synthetic lengths")
	fs.IntVar(&f.batched, "max-num-batched-tokens", 2048, "token budget of one engine step")
	fs.IntVar(&f.maxSeqs, "max-num-seqs", 256, "requests running at once per engine")
	fs.BoolVar(&f.prefix, "enable-prefix-caching", true, "reuse the KV of shared prompt prefixes")
	fs.StringVar(&f.dtype, "dtype", "auto", "activation and weight dtype: auto (the model's), bfloat16, float16; with --hardware cpu the CPU engine's --dtype: the matrices' format (auto: the checkpoint's, or float32), activations in float32")
	fs.StringVar(&f.quant, "quantization", "", "weight quantization: fp8 (GPUs), int8 (--hardware cpu: the CPU engine's Q8_0), or none")
	fs.StringVar(&f.kvDType, "kv-cache-dtype", "auto", "KV cache dtype: auto (the activation dtype; float32 with --hardware cpu), bfloat16, float16, float32, or fp8 (GPUs only)")
	fs.Float64Var(&f.sloTTFT, "slo-ttft-ms", 0, "TTFT objective for goodput, ms")
	fs.Float64Var(&f.sloTPOT, "slo-tpot-ms", 0, "TPOT objective for goodput, ms")
	addSpecFlag(fs, &f.spec)
	fs.Float64Var(&f.acceptance, "speculative-acceptance", -1, "with --speculative-config, the chance each draft is kept given the ones before it were: the workload's, measured where it is served (gearbox:spec_decode_num_accepted_tokens_total over …_num_draft_tokens_total gives the share kept, α(1−α^k)/((1−α)k))")
	fs.BoolVar(&f.overlap, "pipeline-overlap", false, "model vLLM's PP virtual engines: pipeline stages start the next step's micro-batches while the current step drains, and --max-num-seqs and --max-num-batched-tokens apply per virtual engine (Gearbox's executors fill and drain the pipeline every step)")
	return f
}

// simSetup is a loaded deployment and workload.
type simSetup struct {
	cfg   *model.Config
	node  sim.Node
	cost  *sim.CostModel
	reqs  []bench.Request // arrivals set
	sched sched.Config
	slo   bench.SLO
	// hostKVBytes is the host KV tier per rank for a policy that parks KV
	// there (seesaw's --swap-space); 0 for none.
	hostKVBytes int64
	overlap     bool            // --pipeline-overlap
	spec        sim.Speculation // --speculative-config, --speculative-acceptance
}

func (f *simFlags) setup() (*simSetup, error) {
	cfg, err := sim.LookupModel(f.model)
	if err != nil {
		return nil, err
	}
	node, prec, err := f.node(cfg)
	if err != nil {
		return nil, err
	}
	cost, err := sim.NewCostModel(node, prec)
	if err != nil {
		return nil, err
	}
	ds, err := bench.LoadDataset(f.dataset, f.seed)
	if err != nil {
		return nil, err
	}
	if f.maxRequests > 0 {
		ds = ds.Head(f.maxRequests)
	}
	s := &simSetup{
		cfg: cfg, node: node, cost: cost, reqs: ds.Requests,
		sched:   sched.Config{MaxNumBatchedTokens: f.batched, MaxNumSeqs: f.maxSeqs, EnablePrefixCaching: f.prefix},
		slo:     bench.SLO{TTFT: msDuration(f.sloTTFT), TPOT: msDuration(f.sloTPOT)},
		overlap: f.overlap,
	}
	if s.spec, err = f.speculation(); err != nil {
		return nil, err
	}
	if f.replay {
		offsets, err := bench.ReplayArrivals(s.reqs, f.timeScale)
		if err != nil {
			return nil, err
		}
		setArrivals(s.reqs, offsets)
	} else if err := s.poisson(f.rate, f.burstiness, f.seed); err != nil {
		return nil, err
	}
	return s, nil
}

// node resolves --hardware: a catalog node, or ranks of this CPU from a
// calibration profile, in the CPU engine's precision: every matrix in
// --dtype (auto: the checkpoint's) or, under --quantization int8, Q8_0,
// float32 activations, and the KV cache in --kv-cache-dtype (float32 for
// auto).
func (f *simFlags) node(cfg *model.Config) (sim.Node, sim.Precision, error) {
	count, name := 1, f.hardware
	if i := strings.IndexAny(name, "xX"); i > 0 {
		if n, err := strconv.Atoi(name[:i]); err == nil {
			count, name = n, name[i+1:]
		}
	}
	if !strings.EqualFold(name, "cpu") {
		if f.profile != "" {
			return sim.Node{}, sim.Precision{}, fmt.Errorf("--profile describes a CPU; use --hardware cpu or Nxcpu with it")
		}
		node, err := sim.ParseNode(f.hardware)
		if err != nil {
			return sim.Node{}, sim.Precision{}, err
		}
		prec, err := sim.VLLMPrecision(cfg, f.dtype, f.quant, f.kvDType)
		return node, prec, err
	}
	if f.profile == "" {
		return sim.Node{}, sim.Precision{}, fmt.Errorf("--hardware %s needs --profile FILE (run gearbox calibrate to write one)", f.hardware)
	}
	p, err := sim.LoadProfile(f.profile)
	if err != nil {
		return sim.Node{}, sim.Precision{}, err
	}
	if p.IsGPU() {
		return sim.Node{}, sim.Precision{}, fmt.Errorf("--profile %s describes a GPU (%s), not this CPU; --hardware cpu takes a profile from gearbox calibrate --device cpu", f.profile, p.Name)
	}
	prec, err := sim.CPUEnginePrecision(cfg, f.dtype, f.quant, f.kvDType)
	if err != nil {
		return sim.Node{}, sim.Precision{}, err
	}
	if err := p.CheckPrecision(prec); err != nil {
		return sim.Node{}, sim.Precision{}, fmt.Errorf("--profile %s: %w", f.profile, err)
	}
	node, err := calibrate.Node(p, count)
	return node, prec, err
}

// speculation resolves --speculative-config and --speculative-acceptance.
func (f *simFlags) speculation() (sim.Speculation, error) {
	if f.spec.Method == "" {
		if f.acceptance >= 0 {
			return sim.Speculation{}, fmt.Errorf("--speculative-acceptance needs --speculative-config")
		}
		return sim.Speculation{}, nil
	}
	if !(f.acceptance >= 0 && f.acceptance < 1) {
		return sim.Speculation{}, fmt.Errorf("--speculative-config needs --speculative-acceptance in [0, 1): a cost model has no tokens to verify drafts against, so the workload's acceptance rate is an input")
	}
	s := sim.Speculation{Tokens: f.spec.NumTokens, Acceptance: f.acceptance}
	if f.spec.Method == specdecode.DraftModel {
		d, err := sim.LookupModel(f.spec.Model)
		if err != nil {
			return sim.Speculation{}, fmt.Errorf("--speculative-config: draft model: %w", err)
		}
		s.Draft = d
	}
	return s, nil
}

// poisson sets the requests' arrivals to a gamma process at rate.
func (s *simSetup) poisson(rate, burstiness float64, seed int64) error {
	offsets, err := bench.Arrivals(len(s.reqs), rate, burstiness, seed)
	if err != nil {
		return err
	}
	setArrivals(s.reqs, offsets)
	return nil
}

func setArrivals(reqs []bench.Request, offsets []time.Duration) {
	for i := range reqs {
		reqs[i].Arrival = offsets[i]
	}
}

// run simulates the workload on one deployment.
func (s *simSetup) run(plan parallel.Plan, pol policy.Policy, reqs []bench.Request) (*sim.RunResult, error) {
	// The simulator runs DP replicas as independent engines, each under
	// the policy's single-replica placements.
	switch p := pol.(type) {
	case *policy.SiDP:
		return s.runSiDP(plan, reqs)
	case policy.Static:
		if p.P.Plan.DP > 1 {
			pol = policy.NewStatic(withDP(p.P.Plan, 1))
		}
	case policy.Shift:
		if p.Base.Plan.DP > 1 {
			sh, err := policy.NewShift(withDP(p.Base.Plan, 1), p.Threshold)
			if err != nil {
				return nil, err
			}
			pol = sh
		}
	}
	return sim.Run(sim.RunOptions{
		Model: s.cfg, Cost: s.cost, Plan: plan, Policy: pol, Requests: slices.Clone(reqs), Sched: s.sched, HostKVBytes: s.hostKVBytes,
		OverlapSteps: s.overlap, Speculative: s.spec,
		Report: bench.ReportOptions{SLO: s.slo, Percentiles: simPercentiles},
	})
}

// simPercentiles are the percentiles simulated reports carry.
var simPercentiles = []float64{50, 90, 99}

// checkRanks says what to change when a plan does not use the whole node.
func checkRanks(plan parallel.Plan, node sim.Node) error {
	if plan.Ranks() != node.Count {
		return fmt.Errorf("plan %s uses %d GPUs but the node has %d; give factors that multiply to %d", plan, plan.Ranks(), node.Count, node.Count)
	}
	return nil
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
