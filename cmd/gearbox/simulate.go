package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/sim"
)

func runSimulate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("simulate", "simulate --model ID|DIR --hardware NODE [--plan PLAN] [--policy static|shift] --dataset SPEC [flags]", stderr)
	modelName := fs.String("model", "meta-llama/Llama-3.1-8B-Instruct", "model preset (Hugging Face id) or a directory with config.json")
	hardware := fs.String("hardware", "8xH200", "node, e.g. 8xH200, 4xA10-pcie")
	dataset := fs.String("dataset", "synthetic:in=4096,out=250", "azure:FILE, mooncake:FILE or synthetic[:in=N,out=M,n=K]")
	rate := fs.Float64("request-rate", math.Inf(1), "requests per second (inf: all at once)")
	burstiness := fs.Float64("burstiness", 1, "gamma shape of inter-arrival times (1 = Poisson)")
	replay := fs.Bool("replay-timestamps", false, "replay the trace's arrival times")
	timeScale := fs.Float64("time-scale", 1, "with --replay-timestamps, divide the trace's times by this")
	maxRequests := fs.Int("max-requests", 0, "use the first N requests (0: all; synthetic: the count)")
	fs.IntVar(maxRequests, "num-prompts", 0, "vLLM's spelling of --max-requests")
	seed := fs.Int64("seed", 0, "seed for arrivals and synthetic lengths")
	batched := fs.Int("max-num-batched-tokens", 2048, "token budget of one engine step")
	maxSeqs := fs.Int("max-num-seqs", 256, "requests running at once per engine")
	prefix := fs.Bool("enable-prefix-caching", true, "reuse the KV of shared prompt prefixes")
	dtype := fs.String("dtype", "auto", "activation and weight dtype: auto (the model's), bfloat16, float16")
	quant := fs.String("quantization", "", "weight quantization: fp8 or none")
	kvDType := fs.String("kv-cache-dtype", "auto", "KV cache dtype: auto or fp8")
	sloTTFT := fs.Float64("slo-ttft-ms", 0, "TTFT objective for goodput, ms")
	sloTPOT := fs.Float64("slo-tpot-ms", 0, "TPOT objective for goodput, ms")
	resultJSON := fs.String("result-json", "", "write the report (vllm bench serve's keys plus the plan timeline) here")
	par := addParallelFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := sim.LookupModel(*modelName)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	node, err := sim.ParseNode(*hardware)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	plan, pol, err := par.resolve(cfg)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	if plan.Ranks() != node.Count {
		return fmt.Errorf("simulate: plan %s uses %d GPUs but the node has %d; give a plan whose factors multiply to %d", plan, plan.Ranks(), node.Count, node.Count)
	}
	prec, err := sim.VLLMPrecision(cfg, *dtype, *quant, *kvDType)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	cost, err := sim.NewCostModel(node, prec)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	ds, err := bench.LoadDataset(*dataset, *seed)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	if *maxRequests > 0 {
		ds = ds.Head(*maxRequests)
	}
	reqs := ds.Requests
	var offsets []time.Duration
	if *replay {
		offsets, err = bench.ReplayArrivals(reqs, *timeScale)
	} else {
		offsets, err = bench.Arrivals(len(reqs), *rate, *burstiness, *seed)
	}
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	for i := range reqs {
		reqs[i].Arrival = offsets[i]
	}
	start := time.Now()
	res, err := sim.Run(sim.RunOptions{
		Model: cfg, Cost: cost, Plan: plan, Policy: pol, Requests: reqs,
		Sched:  sched.Config{MaxNumBatchedTokens: *batched, MaxNumSeqs: *maxSeqs, EnablePrefixCaching: *prefix},
		Report: bench.ReportOptions{SLO: bench.SLO{TTFT: msDuration(*sloTTFT), TPOT: msDuration(*sloTPOT)}},
	})
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	res.Report.RunInfo.Label = fmt.Sprintf("simulate %s on %s, %s, policy %s", *modelName, node, plan, pol)
	if err := res.Report.WriteTable(stdout); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "simulated %.1f s of serving in %d steps (%.2f s of wall time, %.0f steps/s); KV capacity %d tokens per replica; %d preemptions; plan timeline: %d spans\n",
		res.SimDuration.Seconds(), res.Steps, time.Since(start).Seconds(), float64(res.Steps)/time.Since(start).Seconds(), res.KVTokens, res.Preemptions, len(res.Timeline))
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
	out["hardware"] = node.String()
	out["plan"] = plan.String()
	out["policy"] = pol.String()
	out["simulated_steps"] = res.Steps
	data, err = json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(*resultJSON, data, 0o644)
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
