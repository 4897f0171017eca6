package main

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/sim"
)

// The Seesaw paper's workloads (§6.1): 2,000 requests sampled from
// ShareGPT and 500 from arxiv-summarization, offline (all at once). Its
// Figure 9 (the length distributions) is not readable in our copy and the
// datasets are not reachable from here, so the lengths are drawn from
// log-normal distributions whose means are the datasets' published ones;
// the spreads are our assumption.
const (
	// ShareGPT as vLLM's benchmark samples it: mean prompt 161 and mean
	// output 338 tokens (Kwon et al., SOSP 2023, Fig. 11), prompts of at
	// most 1,024 tokens and requests of at most 2,048 (vLLM's
	// benchmark_serving filter).
	shareGPTIn, shareGPTOut = 161, 338
	// arXiv summarization (Cohan et al., NAACL 2018, Table 1): articles of
	// 4,938 words and abstracts of 220 on average, ×1.3 Llama tokens per
	// English word; prompts are cut to the model's context less the output.
	arxivIn, arxivOut = 6419, 286
	// seesawSigma is the log-normal spread (σ of the log) we assume: wide
	// for chat turns, narrower for papers and abstracts.
	shareGPTSigma, arxivInSigma, arxivOutSigma = 1.0, 0.5, 0.4
	// shareGPTNarrowSigma is the sensitivity row's ShareGPT spread: half
	// the assumed one, fewer very long chats.
	shareGPTNarrowSigma = 0.5
)

// seesawWorkload draws n requests of dataset ("sharegpt" or "arxiv") for
// a model of context maxLen, all arriving at once.
func seesawWorkload(dataset string, n, maxLen int, seed uint64) []bench.Request {
	return seesawWorkloadSigma(dataset, n, maxLen, seed, shareGPTSigma)
}

// seesawWorkloadSigma is seesawWorkload with ShareGPT's spread sigma (the
// sensitivity rows).
func seesawWorkloadSigma(dataset string, n, maxLen int, seed uint64, sigma float64) []bench.Request {
	rng := rand.New(rand.NewPCG(seed, 4))
	// lognormal draws with the given mean (exp(μ+σ²/2) = mean).
	draw := func(mean, sigma float64) int {
		mu := math.Log(mean) - sigma*sigma/2
		return max(1, int(math.Round(math.Exp(mu+sigma*rng.NormFloat64()))))
	}
	reqs := make([]bench.Request, n)
	for i := range reqs {
		var in, out int
		switch dataset {
		case "sharegpt":
			for {
				in, out = draw(shareGPTIn, sigma), draw(shareGPTOut, sigma)
				if in >= 4 && out >= 4 && in <= 1024 && in+out <= min(2048, maxLen) {
					break
				}
			}
		default:
			out = draw(arxivOut, arxivOutSigma)
			in = min(draw(arxivIn, arxivInSigma), maxLen-out)
		}
		reqs[i] = bench.Request{Index: i, InputTokens: in, OutputTokens: out}
	}
	return reqs
}

// seesawHostGiB is the paper's host memory per GPU (§6.1).
const seesawHostGiB = 80

// seesawBudgets are the step token budgets swept for every configuration:
// vLLM's chunk size with chunked prefill (the paper tunes it, following
// Sarathi-Serve), Seesaw's prefill batch.
var seesawBudgets = []int{512, 1024, 2048, 4096, 8192}

// seesawConfig is one deployment of a sweep: a static plan, or Seesaw's
// prefill and decode plans.
type seesawConfig struct {
	prefill, decode parallel.Plan // equal for a static plan
	budget          int
}

func (c seesawConfig) seesaw() bool { return c.prefill != c.decode }

func (c seesawConfig) String() string {
	if c.seesaw() {
		return fmt.Sprintf("%s → %s", planLabel(c.prefill), planLabel(c.decode))
	}
	return planLabel(c.prefill)
}

// planLabel writes a plan as the paper labels it: TP4PP2, DP2TP2.
func planLabel(p parallel.Plan) string {
	var b strings.Builder
	for _, f := range []struct {
		name string
		n    int
	}{{"DP", p.DP}, {"TP", p.TP}, {"PP", p.PP}} {
		if f.n > 1 {
			fmt.Fprintf(&b, "%s%d", f.name, f.n)
		}
	}
	if b.Len() == 0 {
		return "1"
	}
	return b.String()
}

// seesawBench is one of the paper's setups: a model on a node.
type seesawBench struct {
	model, node string
	linkScale   float64 // multiplies the GPUs' peer link bandwidth (Fig. 14); 0 means 1
	context     int     // the model's context as the paper ran it, if shorter than the preset's
	sigma       float64 // ShareGPT's log-normal spread; 0 means shareGPTSigma
}

// setup builds the simulator for b: the paper's BF16 weights and KV, the
// engine limits of vLLM 0.5.4 (256 sequences), steps overlapping in the
// pipeline as vLLM's virtual engines do.
func (b seesawBench) setup() (*simSetup, error) {
	cfg, err := sim.LookupModel(b.model)
	if err != nil {
		return nil, err
	}
	node, err := sim.ParseNode(b.node)
	if err != nil {
		return nil, err
	}
	if b.linkScale > 0 {
		node.Link.BytesPerS *= b.linkScale
	}
	prec, err := sim.VLLMPrecision(cfg, "auto", "", "auto")
	if err != nil {
		return nil, err
	}
	cost, err := sim.NewCostModel(node, prec)
	if err != nil {
		return nil, err
	}
	return &simSetup{cfg: cfg, node: node, cost: cost, overlap: true, sched: sched.Config{MaxNumSeqs: 256}}, nil
}

// seesawResult is one configuration's simulated run.
type seesawResult struct {
	cfg        seesawConfig
	throughput float64 // requests per second
	seconds    float64 // the run's duration
	phases     []sim.PlacementStats
	host       sim.HostStats
	err        error
}

// sweep runs every configuration on reqs (in parallel) and returns the
// results in cfgs' order.
func (s *simSetup) sweep(cfgs []seesawConfig, reqs []bench.Request) []seesawResult {
	out := make([]seesawResult, len(cfgs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				out[i] = s.runSeesaw(cfgs[i], reqs)
			}
		}()
	}
	for i := range cfgs {
		work <- i
	}
	close(work)
	wg.Wait()
	return out
}

func (s *simSetup) runSeesaw(c seesawConfig, reqs []bench.Request) seesawResult {
	local := *s
	local.sched.MaxNumBatchedTokens = c.budget
	var pol policy.Policy
	plan := c.prefill
	if c.seesaw() {
		p, err := policy.NewSeesaw(c.prefill, c.decode)
		if err != nil {
			return seesawResult{cfg: c, err: err}
		}
		pol = p
		weights := float64(s.cfg.NumParams()) * 2 / float64(plan.Ranks()) // the host copy of the weights, BF16, per GPU
		local.hostKVBytes = int64(seesawHostGiB*(1<<30) - weights)
	}
	res, err := local.run(plan, pol, reqs)
	if err != nil {
		return seesawResult{cfg: c, err: err}
	}
	if res.Report.Completed != len(reqs) {
		return seesawResult{cfg: c, err: fmt.Errorf("%d of %d requests completed", res.Report.Completed, len(reqs))}
	}
	return seesawResult{cfg: c, throughput: res.Report.RequestThroughput, seconds: res.SimDuration.Seconds(), phases: res.Placements, host: res.Host}
}

// layouts are the TP×PP plans of n GPUs, and with dp the TP×PP×DP ones.
func layouts(n int, dp bool) []parallel.Plan {
	var out []parallel.Plan
	for d := 1; d <= n; d *= 2 {
		for t := 1; d*t <= n; t *= 2 {
			if p := n / (d * t); d*t*p == n && (dp || d == 1) {
				out = append(out, parallel.Plan{DP: d, TP: t, PP: p, SP: 1})
			}
		}
	}
	return out
}

// staticConfigs are static layouts at every budget: with dp, vLLM's every
// TP×PP×DP layout of n GPUs; without, the TP×PP ones.
func staticConfigs(n int, dp bool) []seesawConfig {
	var out []seesawConfig
	for _, p := range layouts(n, dp) {
		for _, b := range seesawBudgets {
			out = append(out, seesawConfig{prefill: p, decode: p, budget: b})
		}
	}
	return out
}

// seesawConfigs are Seesaw's: a prefill plan with more pipeline stages
// than the decode plan's, at every budget.
func seesawConfigs(n int) []seesawConfig {
	var out []seesawConfig
	for _, pf := range layouts(n, false) {
		for _, dc := range layouts(n, false) {
			if pf.PP <= dc.PP {
				continue
			}
			for _, b := range seesawBudgets {
				out = append(out, seesawConfig{prefill: pf, decode: dc, budget: b})
			}
		}
	}
	return out
}

// best is the highest-throughput result that ran.
func best(rs []seesawResult) (seesawResult, bool) {
	var top seesawResult
	ok := false
	for _, r := range rs {
		if r.err == nil && (!ok || r.throughput > top.throughput) {
			top, ok = r, true
		}
	}
	return top, ok
}

// bestBy is the best result of each configuration label, budgets folded.
func bestBy(rs []seesawResult) map[string]seesawResult {
	out := map[string]seesawResult{}
	for _, r := range rs {
		k := r.cfg.String()
		if o, ok := out[k]; r.err == nil && (!ok || r.throughput > o.throughput) {
			out[k] = r
		}
	}
	return out
}

func geomean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += math.Log(x)
	}
	return math.Exp(s / float64(len(xs)))
}

// speedup runs vLLM's sweep and Seesaw's on one setup and workload.
func (b seesawBench) speedup(dataset string, n int) (vllm, seesaw seesawResult, err error) {
	s, err := b.setup()
	if err != nil {
		return vllm, seesaw, err
	}
	reqs := seesawWorkloadSigma(dataset, n, cmp.Or(b.context, s.cfg.MaxPositions), 1, cmp.Or(b.sigma, shareGPTSigma))
	var ok bool
	if vllm, ok = best(s.sweep(staticConfigs(s.node.Count, true), reqs)); !ok {
		return vllm, seesaw, fmt.Errorf("%s on %s: no static configuration runs", b.model, b.node)
	}
	if seesaw, ok = best(s.sweep(seesawConfigs(s.node.Count), reqs)); !ok {
		return vllm, seesaw, fmt.Errorf("%s on %s: no Seesaw configuration runs", b.model, b.node)
	}
	return vllm, seesaw, nil
}

func reproduceSeesaw(w *strings.Builder) error {
	start := time.Now()
	fmt.Fprintf(w, "# Seesaw (paper 004) reproduced in the simulator\n\n")
	fmt.Fprintf(w, "Generated by `gearbox reproduce seesaw`. Every number below is a prediction of the one cost model "+
		"(global constants, see docs/simulator.md); nothing is fitted to this paper. Setups as the paper's §6.1: BF16 weights and KV, "+
		"AWS g5.48xlarge (8×A10G) and g6.48xlarge (8×L4) with each GPU on PCIe 4.0 x8 (16 GiB/s), %d GiB of host memory per GPU "+
		"(less the host copy of the weights) for Seesaw's KV store, offline workloads (every request at once). "+
		"The baseline is vLLM as the paper runs it: the best of every TP×PP×DP layout that fits, each with its chunk size tuned "+
		"over %v tokens (chunked prefill, Sarathi-style mixed batches), pipeline stages kept busy across steps by vLLM's "+
		"virtual engines (`--pipeline-overlap`), each with vLLM's limits (256 sequences, the chunk size). Seesaw: the best prefill plan → decode plan pair (more stages in prefill), "+
		"its prefill batch tuned over the same budgets, phases switched by the host store filling and emptying, "+
		"victims of KV pressure parked on the host store.\n\n", seesawHostGiB, seesawBudgets)
	fmt.Fprintf(w, "Workloads: the paper samples 2,000 ShareGPT and 500 arxiv-summarization requests; its Figure 9 (their lengths) "+
		"is not readable here and the datasets are not reachable, so lengths are log-normal with the datasets' published means "+
		"(ShareGPT %d prompt / %d output tokens as vLLM samples it; arXiv %d / %d, Cohan et al.'s word counts ×1.3, prompts cut to the context). "+
		"The spreads (σ %.1f; %.1f and %.1f) are our assumption.\n\n", shareGPTIn, shareGPTOut, arxivIn, arxivOut, shareGPTSigma, arxivInSigma, arxivOutSigma)

	f10, err := seesawFig10(w)
	if err != nil {
		return err
	}
	if err := seesawBreakdown(w, f10); err != nil {
		return err
	}
	if err := seesawFig11(w); err != nil {
		return err
	}
	if err := seesawFig12(w); err != nil {
		return err
	}
	if err := seesawFig13(w); err != nil {
		return err
	}
	if err := seesawFig14(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "## What this does not reproduce yet\n\n"+
		"- The A10 geomean: outside, for the reason given under the breakdown above (the ShareGPT cases; the A10G's compute). "+
		"The per-figure bar values the spec's B7 asks for are not in our copy of the paper, so which of its A10 cases carry its 1.45× is unknown, "+
		"and the workloads' lengths are stand-ins (Figure 9 unreadable).\n"+
		"- Figure 11's PCIe-to-SXM ratios are reported, not checked (the table under Figure 11, read as the paper's sentence reads: the PCIe box "+
		"against vLLM on the SXM box). Seesaw on the PCIe box against Seesaw on the SXM box is lower, since its decode there runs "+
		"over the x8 links (the paper does not say how its A100 PCIe box was wired).\n"+
		"- Gearbox's own executors fill and drain the pipeline each step; the overlapped pipeline here, with the engine limits applying per "+
		"virtual engine, is vLLM's (the paper's systems), a simulator option.\n\n")
	fmt.Fprintf(w, "_Simulated in %.0f s._\n", time.Since(start).Seconds())
	return nil
}

// fig10Cases are Figure 10's: 15B on four GPUs, 34B and 70B on eight,
// each on A10G and L4, each on both datasets.
var fig10Models = []struct {
	model string
	gpus  int
}{
	{"elinas/Llama-3-15B-Instruct-zeroed", 4},
	{"codellama/CodeLlama-34b-hf", 8},
	{"meta-llama/Llama-2-70b-hf", 8},
}

// fig10Case is one bar of Figure 10: its setup, workload and the best
// static and Seesaw runs.
type fig10Case struct {
	bench   seesawBench
	dataset string
	n       int
	vllm    seesawResult
	seesaw  seesawResult
}

// fig10Result is Figure 10's cases and its A10 sensitivity geomeans.
type fig10Result struct {
	cases               []fig10Case
	a10Table1, a10Sigma float64 // A10 geomean with Table 1's A10; with ShareGPT's narrow spread
}

func seesawFig10(w *strings.Builder) (fig10Result, error) {
	fmt.Fprintf(w, "## Figure 10: throughput on PCIe boxes (Seesaw / best vLLM)\n\n")
	fmt.Fprintf(w, "| GPU | model | dataset | vLLM best (req/s) | Seesaw best (req/s) | speedup |\n|---|---|---|---|---|---|\n")
	byGPU := map[string][]float64{}
	var all []float64
	var cases []fig10Case
	for _, gpu := range []string{"A10G", "L4"} {
		for _, m := range fig10Models {
			for _, ds := range []struct {
				name string
				n    int
			}{{"sharegpt", 2000}, {"arxiv", 500}} {
				b := seesawBench{model: m.model, node: fmt.Sprintf("%dx%s@pcie4x8", m.gpus, gpu)}
				v, s, err := b.speedup(ds.name, ds.n)
				if err != nil {
					return fig10Result{}, err
				}
				cases = append(cases, fig10Case{bench: b, dataset: ds.name, n: ds.n, vllm: v, seesaw: s})
				r := s.throughput / v.throughput
				byGPU[gpu] = append(byGPU[gpu], r)
				all = append(all, r)
				fmt.Fprintf(w, "| %s | %s | %s | %.2f (%s, %d) | %.2f (%s, %d) | %.2f× |\n", gpu, m.model, ds.name,
					v.throughput, v.cfg, v.cfg.budget, s.throughput, s.cfg, s.cfg.budget, r)
			}
		}
	}
	fmt.Fprintf(w, "\n| quantity | paper | simulated | tolerance | result |\n|---|---|---|---|---|\n")
	row := func(name string, paper, got, tol float64) {
		fmt.Fprintf(w, "| %s | %.2f× | %.2f× | ±%.0f%% | %s |\n", name, paper, got, 100*tol, check(got, paper, tol, true))
	}
	row("A10 geomean", 1.45, geomean(byGPU["A10G"]), 0.1)
	row("L4 geomean", 1.29, geomean(byGPU["L4"]), 0.1)
	row("overall geomean", 1.36, geomean(all), 0.1)
	row("A10 max", 1.78, slices.Max(byGPU["A10G"]), 0.2)
	row("L4 max", 1.52, slices.Max(byGPU["L4"]), 0.2)
	// Sensitivity: the paper's Table 1 gives the g5's GPU as the A10
	// (125 TFLOPS); the chip AWS ships is the A10G (70 TFLOPS).
	var a10 []float64
	for _, m := range fig10Models {
		for _, ds := range []struct {
			name string
			n    int
		}{{"sharegpt", 2000}, {"arxiv", 500}} {
			v, s, err := seesawBench{model: m.model, node: fmt.Sprintf("%dxA10@pcie4x8", m.gpus)}.speedup(ds.name, ds.n)
			if err != nil {
				return fig10Result{}, err
			}
			a10 = append(a10, s.throughput/v.throughput)
		}
	}
	fmt.Fprintf(w, "| A10 geomean, GPUs as Table 1's A10 (125 TFLOPS) | 1.45× | %.2f× | sensitivity | max %.2f× |\n", geomean(a10), slices.Max(a10))
	// Sensitivity: ShareGPT's spread is our assumption; a narrower one
	// (fewer very long chats) on the A10G cases, arXiv's kept.
	var narrow, shareNarrow []float64
	for _, c := range cases {
		if !strings.Contains(c.bench.node, "A10G") {
			continue
		}
		r := c.seesaw.throughput / c.vllm.throughput
		if c.dataset == "sharegpt" {
			b := c.bench
			b.sigma = shareGPTNarrowSigma
			v, s, err := b.speedup(c.dataset, c.n)
			if err != nil {
				return fig10Result{}, err
			}
			r = s.throughput / v.throughput
			shareNarrow = append(shareNarrow, r)
		}
		narrow = append(narrow, r)
	}
	fmt.Fprintf(w, "| A10 geomean, ShareGPT lengths with σ %.1f | 1.45× | %.2f× | sensitivity | ShareGPT cases %s |\n",
		shareGPTNarrowSigma, geomean(narrow), ratios(shareNarrow))
	minimum := slices.Min(all)
	res := "every case ≥ 1.0×"
	if minimum < 1 {
		res = "**a case below 1.0×**"
	}
	fmt.Fprintf(w, "| min (every case ≥ 1.0×) | 1.06× | %.2f× | ≥ 1.0× | %s |\n\n", minimum, res)
	return fig10Result{cases: cases, a10Table1: geomean(a10), a10Sigma: geomean(narrow)}, nil
}

// ratios writes speedups as "1.10×, 1.17×".
func ratios(xs []float64) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.2f×", x)
	}
	return strings.Join(out, ", ")
}

func seesawFig11(w *strings.Builder) error {
	fmt.Fprintf(w, "## Figure 11: A100 (Seesaw / best vLLM)\n\n")
	fmt.Fprintf(w, "Llama-3-70B's architecture (the Llama-3.3-70B preset) with Llama-3's 8,192-token context, on 8×A100-40GB SXM (NVLink) and 8×A100-40GB PCIe with each GPU on PCIe 4.0 x8.\n\n")
	fmt.Fprintf(w, "| box | dataset | vLLM best (req/s) | Seesaw best (req/s) | speedup | paper | tolerance | result |\n|---|---|---|---|---|---|---|---|\n")
	type run struct{ v, s seesawResult }
	runs := map[string]run{}
	for _, c := range []struct {
		node, dataset string
		n             int
		paper         float64
	}{
		{"8xA100-40GB", "sharegpt", 2000, 1.13},
		{"8xA100-40GB-PCIe@pcie4x8", "sharegpt", 2000, 1.30},
		{"8xA100-40GB-PCIe@pcie4x8", "arxiv", 500, 1.46},
	} {
		v, s, err := seesawBench{model: "meta-llama/Llama-3.3-70B-Instruct", node: c.node, context: 8192}.speedup(c.dataset, c.n)
		if err != nil {
			return err
		}
		runs[c.node+c.dataset] = run{v, s}
		r := s.throughput / v.throughput
		fmt.Fprintf(w, "| %s | %s | %.2f (%s) | %.2f (%s) | %.2f× | %.2f× | ±20%% | %s |\n", c.node, c.dataset,
			v.throughput, v.cfg, s.throughput, s.cfg, r, c.paper, check(r, c.paper, 0.2, true))
	}
	// The paper's PCIe-to-SXM ratios need vLLM's arXiv run on the SXM box.
	b := seesawBench{model: "meta-llama/Llama-3.3-70B-Instruct", node: "8xA100-40GB", context: 8192}
	s, err := b.setup()
	if err != nil {
		return err
	}
	sxmArxiv, ok := best(s.sweep(staticConfigs(s.node.Count, true), seesawWorkload("arxiv", 500, b.context, 1)))
	if !ok {
		return fmt.Errorf("no static configuration runs arxiv on %s", b.node)
	}
	sxm, pcie := runs["8xA100-40GBsharegpt"], runs["8xA100-40GB-PCIe@pcie4x8sharegpt"]
	pcieArxiv := runs["8xA100-40GB-PCIe@pcie4x8arxiv"]
	fmt.Fprintf(w, "\n§6.4: \"vLLM gets roughly 60%% throughput on A100 PCIe compared with A100 SXM, while Seesaw boosts it up to 82%% – 89%%\". "+
		"\"It\" is the PCIe box's throughput against the SXM box's vLLM (the spec's reading: 0.6 × 1.30 ≈ 0.78 and 0.6 × 1.46 ≈ 0.88, "+
		"so 82%% on ShareGPT and 89%% on arXiv with vLLM's ratio at 0.61–0.63). vLLM's arXiv run on the SXM box: %.2f req/s (%s, %d). Reported, not checked.\n\n", sxmArxiv.throughput, sxmArxiv.cfg, sxmArxiv.cfg.budget)
	fmt.Fprintf(w, "| ratio | dataset | paper | simulated |\n|---|---|---|---|\n")
	fmt.Fprintf(w, "| vLLM on PCIe / vLLM on SXM | sharegpt | ≈ 0.60 | %.2f |\n", pcie.v.throughput/sxm.v.throughput)
	fmt.Fprintf(w, "| vLLM on PCIe / vLLM on SXM | arxiv | ≈ 0.60 | %.2f |\n", pcieArxiv.v.throughput/sxmArxiv.throughput)
	fmt.Fprintf(w, "| Seesaw on PCIe / vLLM on SXM | sharegpt | 0.82 | %.2f |\n", pcie.s.throughput/sxm.v.throughput)
	fmt.Fprintf(w, "| Seesaw on PCIe / vLLM on SXM | arxiv | 0.89 | %.2f |\n", pcieArxiv.s.throughput/sxmArxiv.throughput)
	fmt.Fprintf(w, "| Seesaw on PCIe / Seesaw on SXM (the other reading) | sharegpt | 0.82–0.89 | %.2f |\n\n", pcie.s.throughput/sxm.s.throughput)
	return nil
}

// phaseTimes are a configuration's prefill and decode time on a workload:
// the run with every output cut to one token is its prefill, the rest of
// the full run its decode.
func (s *simSetup) phaseTimes(c seesawConfig, reqs []bench.Request) (prefill, decode float64, err error) {
	one := slices.Clone(reqs)
	for i := range one {
		one[i].OutputTokens = 1
	}
	full := s.runSeesaw(c, reqs)
	pre := s.runSeesaw(c, one)
	if full.err != nil || pre.err != nil {
		return 0, 0, cmp.Or(full.err, pre.err)
	}
	tf, tp := float64(len(reqs))/full.throughput, float64(len(reqs))/pre.throughput
	return tp, tf - tp, nil
}

// noChunk is a budget above any prompt here: vLLM without chunked prefill.
const noChunk = 16384

func seesawFig12(w *strings.Builder) error {
	fmt.Fprintf(w, "## Figure 12: where the time goes (CodeLlama-34B, arxiv, 4×A10G)\n\n")
	fmt.Fprintf(w, "Prefill time is the run with every output cut to one token; decode time is the rest of the full run. "+
		"TP4 and PP4 without chunked prefill (as the paper runs them for reference), TP2PP2 with its best chunk size, Seesaw PP4 → TP4 with its best prefill batch.\n\n")
	b := seesawBench{model: "codellama/CodeLlama-34b-hf", node: "4xA10G@pcie4x8"}
	s, err := b.setup()
	if err != nil {
		return err
	}
	reqs := seesawWorkload("arxiv", 500, s.cfg.MaxPositions, 1)
	tp4 := parallel.Plan{DP: 1, TP: 4, PP: 1, SP: 1}
	pp4 := parallel.Plan{DP: 1, TP: 1, PP: 4, SP: 1}
	tp2pp2 := parallel.Plan{DP: 1, TP: 2, PP: 2, SP: 1}
	bestOf := func(pf, dc parallel.Plan) (seesawConfig, error) {
		var cfgs []seesawConfig
		for _, bud := range seesawBudgets {
			cfgs = append(cfgs, seesawConfig{prefill: pf, decode: dc, budget: bud})
		}
		r, ok := best(s.sweep(cfgs, reqs))
		if !ok {
			return seesawConfig{}, fmt.Errorf("%s → %s does not run", pf, dc)
		}
		return r.cfg, nil
	}
	chunked, err := bestOf(tp2pp2, tp2pp2)
	if err != nil {
		return err
	}
	seesaw, err := bestOf(pp4, tp4)
	if err != nil {
		return err
	}
	rows := []struct {
		name string
		cfg  seesawConfig
	}{
		{"TP4", seesawConfig{prefill: tp4, decode: tp4, budget: noChunk}},
		{"PP4", seesawConfig{prefill: pp4, decode: pp4, budget: noChunk}},
		{fmt.Sprintf("TP2PP2 chunked (%d)", chunked.budget), chunked},
		{fmt.Sprintf("Seesaw PP4 → TP4 (%d)", seesaw.budget), seesaw},
	}
	pre := make([]float64, len(rows))
	dec := make([]float64, len(rows))
	fmt.Fprintf(w, "| configuration | prefill s | decode s | total s |\n|---|---|---|---|\n")
	for i, r := range rows {
		if pre[i], dec[i], err = s.phaseTimes(r.cfg, reqs); err != nil {
			return err
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.0f |\n", r.name, pre[i], dec[i], pre[i]+dec[i])
	}
	fmt.Fprintf(w, "\n| the paper's ordering | result |\n|---|---|\n")
	order(w, "prefill: PP4 < TP4", pre[1] < pre[0])
	order(w, "prefill: PP4 < TP2PP2 chunked", pre[1] < pre[2])
	order(w, "decode: TP4 < PP4", dec[0] < dec[1])
	order(w, "total: Seesaw < TP2PP2 chunked (vLLM's best)", pre[3]+dec[3] < pre[2]+dec[2])
	fmt.Fprintf(w, "\nSeesaw's prefill is %.2f× PP4's and its decode %.2f× TP4's (the spec's proposed check: within ~10%% of the best per-stage configuration).\n\n",
		pre[3]/pre[1], dec[3]/dec[0])
	return nil
}

// order writes one row of an ordering table.
func order(w *strings.Builder, what string, ok bool) {
	res := "holds"
	if !ok {
		res = "**does not hold**"
	}
	fmt.Fprintf(w, "| %s | %s |\n", what, res)
}

// fixedVsSeesaw runs the fixed TP×PP layouts and Seesaw's pairs on reqs and
// returns each fixed layout's best throughput by label and Seesaw's best.
func (s *simSetup) fixedVsSeesaw(reqs []bench.Request) (map[string]seesawResult, seesawResult, error) {
	fixed := bestBy(s.sweep(staticConfigs(s.node.Count, false), reqs))
	ss, ok := best(s.sweep(seesawConfigs(s.node.Count), reqs))
	if !ok || len(fixed) == 0 {
		return nil, ss, fmt.Errorf("nothing runs on %s", s.node)
	}
	return fixed, ss, nil
}

// labels are the fixed layouts' labels, most pipeline stages first.
func labels(n int) []string {
	var out []string
	for _, p := range slices.Backward(layouts(n, false)) {
		out = append(out, planLabel(p))
	}
	return out
}

// fixedTable writes one row per setting: each fixed layout's throughput,
// Seesaw's, and which fixed layout is best. It returns the best fixed
// layout of each row and whether Seesaw matched or beat every fixed
// layout in every row (within 1%).
func fixedTable(w *strings.Builder, n int, head string, rows []string, fixed []map[string]seesawResult, ss []seesawResult) ([]string, bool) {
	names := labels(n)
	fmt.Fprintf(w, "| %s | %s | Seesaw | best fixed |\n|%s\n", head, strings.Join(names, " | "), strings.Repeat("---|", len(names)+3))
	var bests []string
	always := true
	for i, row := range rows {
		fmt.Fprintf(w, "| %s |", row)
		top := ""
		for _, l := range names {
			r, ok := fixed[i][l]
			if !ok {
				fmt.Fprintf(w, " — |")
				continue
			}
			fmt.Fprintf(w, " %.3f |", r.throughput)
			if top == "" || r.throughput > fixed[i][top].throughput {
				top = l
			}
			always = always && ss[i].throughput >= 0.99*r.throughput
		}
		bests = append(bests, top)
		fmt.Fprintf(w, " %.3f (%s) | %s |\n", ss[i].throughput, ss[i].cfg, top)
	}
	return bests, always
}

func seesawFig13(w *strings.Builder) error {
	fmt.Fprintf(w, "## Figure 13: output length (Llama-2-70B, 8×A10G, 3,000-token prompts)\n\n")
	fmt.Fprintf(w, "200 requests of 3,000 prompt tokens at once; throughput in requests/s, each layout at its best chunk size.\n\n")
	s, err := seesawBench{model: "meta-llama/Llama-2-70b-hf", node: "8xA10G@pcie4x8"}.setup()
	if err != nil {
		return err
	}
	outs := []int{1, 10, 30, 100, 300, 1000}
	var rows []string
	var fixed []map[string]seesawResult
	var ss []seesawResult
	for _, out := range outs {
		f, best, err := s.fixedVsSeesaw(synthRequests(200, 3000, out))
		if err != nil {
			return err
		}
		rows = append(rows, fmt.Sprint(out))
		fixed, ss = append(fixed, f), append(ss, best)
	}
	bests, always := fixedTable(w, 8, "output tokens", rows, fixed, ss)
	pp8, tp4pp2 := fixed[0]["PP8"].throughput, fixed[0]["TP4PP2"].throughput
	fmt.Fprintf(w, "\n| the paper's ordering | result |\n|---|---|\n")
	order(w, fmt.Sprintf("output 1: Seesaw ≈ PP8 (±5%%; %.3f vs %.3f)", ss[0].throughput, pp8), math.Abs(ss[0].throughput/pp8-1) <= 0.05)
	order(w, "output 1: Seesaw > TP4PP2", ss[0].throughput > tp4pp2)
	order(w, fmt.Sprintf("best fixed layout moves PP8 → TP2PP4 → TP4PP2 as output grows (%s)", strings.Join(slices.Compact(slices.Clone(bests)), " → ")),
		slices.Equal(slices.Compact(slices.Clone(bests)), []string{"PP8", "TP2PP4", "TP4PP2"}))
	order(w, "Seesaw ≥ every fixed layout at every length (1% slack)", always)
	fmt.Fprintln(w)
	return nil
}

func seesawFig14(w *strings.Builder) error {
	fmt.Fprintf(w, "## Figure 14: interconnect bandwidth (CodeLlama-34B, arxiv, 8×A10G)\n\n")
	fmt.Fprintf(w, "The GPUs' peer link (the PCIe 4.0 x8 the all-reduces cross) scaled from 0.1× to 50×; the host links stay. "+
		"The paper scales the traced all-reduce time; scaling the link scales every collective (the pipeline sends too, which are small).\n\n")
	scales := []float64{0.1, 0.3, 1, 3, 10, 50}
	var rows []string
	var fixed []map[string]seesawResult
	var ss []seesawResult
	for _, sc := range scales {
		s, err := seesawBench{model: "codellama/CodeLlama-34b-hf", node: "8xA10G@pcie4x8", linkScale: sc}.setup()
		if err != nil {
			return err
		}
		f, best, err := s.fixedVsSeesaw(seesawWorkload("arxiv", 500, s.cfg.MaxPositions, 1))
		if err != nil {
			return err
		}
		rows = append(rows, fmt.Sprintf("%g×", sc))
		fixed, ss = append(fixed, f), append(ss, best)
	}
	bests, always := fixedTable(w, 8, "link bandwidth", rows, fixed, ss)
	fmt.Fprintf(w, "\n| the paper's ordering | result |\n|---|---|\n")
	order(w, fmt.Sprintf("best fixed layout at 0.1× is pipeline-parallel (%s)", bests[0]), bests[0] == "PP8")
	order(w, fmt.Sprintf("best fixed layout at 50× is tensor-parallel (%s)", bests[len(bests)-1]), strings.HasPrefix(bests[len(bests)-1], "TP") && !strings.Contains(bests[len(bests)-1], "PP4") && !strings.Contains(bests[len(bests)-1], "PP8"))
	order(w, "Seesaw ≥ every fixed layout at every bandwidth (1% slack)", always)
	fmt.Fprintln(w)
	return nil
}

// phaseSplit is a run's step time carrying prefill work (Seesaw's prefill
// phase, a static plan's prefill and mixed steps) and its decode-only step
// time, and its mean decode-only batch.
func phaseSplit(r seesawResult) (prefill, decode, batch float64) {
	var decodes, steps int64
	for _, p := range r.phases {
		prefill += p.Seconds - p.DecodeSeconds
		decode += p.DecodeSeconds
		decodes += p.Decodes
		steps += p.DecodeSteps
	}
	if steps > 0 {
		batch = float64(decodes) / float64(steps)
	}
	return prefill, decode, batch
}

// seesawBreakdown writes where the time of the first A10G ShareGPT and
// arXiv cases of Figure 10 goes, for the best vLLM and the best Seesaw
// configuration, and on ShareGPT also for Seesaw with the paper's decode
// layout for a small model on four GPUs (TP4, §6.3).
func seesawBreakdown(w *strings.Builder, f10 fig10Result) error {
	cases := f10.cases
	if len(cases) < 2 {
		return fmt.Errorf("seesaw breakdown: %d Figure 10 cases, want the A10G 15B pair", len(cases))
	}
	share, arxiv := cases[0], cases[1]
	fmt.Fprintf(w, "## Where the time goes (%s, %s)\n\n", share.bench.model, share.bench.node)
	fmt.Fprintf(w, "The first two bars of Figure 10, run again with the simulator's per-phase accounting. Prefill steps are Seesaw's prefill phase "+
		"or a static plan's steps that carry prompt tokens (mixed with decodes under chunked prefill); decode steps are decode-only steps. "+
		"Waits are the time steps were held past their compute for a KV copy to land (the copies the compute does not hide); "+
		"the copy engine's busy time is the busiest GPU's, hidden or not. Transitions re-shard the weights from the host copy over each GPU's PCIe 4.0 x8 link "+
		"and block the GPUs. This is the paper's split (§5.2): the KV swaps overlap compute (swap-out behind the prefill, swap-in by the prefetcher "+
		"while the others decode), while of the weight reload it says only that its cost is \"constant relative to batch size, allowing it to be amortized\".\n\n")
	s, err := share.bench.setup()
	if err != nil {
		return err
	}
	reqs := seesawWorkload(share.dataset, share.n, cmp.Or(share.bench.context, s.cfg.MaxPositions), 1)
	n := s.node.Count
	var tp []seesawConfig
	for _, b := range seesawBudgets {
		tp = append(tp, seesawConfig{prefill: parallel.Plan{DP: 1, TP: 1, PP: n, SP: 1}, decode: parallel.Plan{DP: 1, TP: n, PP: 1, SP: 1}, budget: b})
	}
	paperDecode, ok := best(s.sweep(tp, reqs))
	if !ok {
		return fmt.Errorf("seesaw breakdown: PP%d → TP%d does not run", n, n)
	}
	rows := []struct {
		dataset, who string
		r            seesawResult
	}{
		{share.dataset, "vLLM best", share.vllm},
		{share.dataset, "Seesaw best", share.seesaw},
		{share.dataset, "Seesaw, TP decode", paperDecode},
		{arxiv.dataset, "vLLM best", arxiv.vllm},
		{arxiv.dataset, "Seesaw best", arxiv.seesaw},
	}
	fmt.Fprintf(w, "| dataset | system | configuration | req/s | run s | prefill steps s | decode steps s | mean decode batch | transitions (s) | weights re-sharded GiB | KV out / in GiB | copy engine busy s | waits s | device KV tokens | host KV tokens |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	gib := func(b int64) float64 { return float64(b) / (1 << 30) }
	for _, row := range rows {
		r := row.r
		pre, dec, batch := phaseSplit(r)
		h := r.host
		host := "—"
		if h.HostKVTokens > 0 {
			host = fmt.Sprint(h.HostKVTokens)
		}
		fmt.Fprintf(w, "| %s | %s | %s, %d | %.2f | %.0f | %.0f | %.0f | %.0f | %d (%.1f) | %.0f | %.0f / %.0f | %.1f | %.1f | %d | %s |\n",
			row.dataset, row.who, r.cfg, r.cfg.budget, r.throughput, r.seconds, pre, dec, batch, h.Transitions, h.TransitionSeconds,
			gib(h.WeightBytes), gib(h.SwapOutBytes), gib(h.SwapInBytes), h.CopySeconds, h.WaitSeconds, h.DeviceKVTokens, host)
	}
	_, vDec, _ := phaseSplit(share.vllm)
	sPre, sDec, _ := phaseSplit(share.seesaw)
	_, tDec, _ := phaseSplit(paperDecode)
	fmt.Fprintf(w, "\nOn ShareGPT Seesaw's decode phase alone takes %.0f s against vLLM's whole run of %.0f s: with a prefill phase of no time at all "+
		"its speedup would be %.2f×. Its decode runs the layout vLLM runs (%s), whose decode-only steps take %.0f s; decoding under TP%d instead takes %.0f s, "+
		"because at the decode batches reached here a decode step is bound by compute and the all-reduces more than by weight streaming (see below). "+
		"The gain is the prefill: %.0f s under %s against the vLLM run's %.0f s of steps carrying prompt tokens.\n\n",
		sDec, share.vllm.seconds, share.vllm.seconds/sDec, planLabel(share.seesaw.cfg.decode), vDec, n, tDec,
		sPre, planLabel(share.seesaw.cfg.prefill), share.vllm.seconds-vDec)
	_, _, batch := phaseSplit(share.seesaw)
	in, out := 0, 0
	for _, r := range reqs {
		in, out = in+r.InputTokens, out+r.OutputTokens
	}
	ctx := (in + out/2) / len(reqs)
	fmt.Fprintf(w, "A decode step of Seesaw's mean decode batch on ShareGPT (%.0f sequences) at the workload's mean prompt plus half its mean output (%d tokens of context), "+
		"rank 0's busy time by part:\n\n", batch, ctx)
	plans := []parallel.Plan{{DP: 1, TP: n, PP: 1, SP: 1}}
	for t := n / 2; t >= 1; t /= 2 {
		plans = append(plans, parallel.Plan{DP: 1, TP: t, PP: n / t, SP: 1})
	}
	if err := decodeStepTable(w, s, plans, int(math.Round(batch)), ctx); err != nil {
		return err
	}
	overhead := 0.0 // transitions and waits for copies, the largest share of a Seesaw run above
	for _, r := range []seesawResult{share.seesaw, paperDecode, arxiv.seesaw} {
		overhead = max(overhead, (r.host.TransitionSeconds+r.host.WaitSeconds)/r.seconds)
	}
	seesawA10Gap(w, f10, share.vllm.seconds/sDec, overhead)
	return nil
}

// seesawA10Gap writes why the A10 geomean misses: what the model's
// ShareGPT and arXiv cases give, what the ShareGPT cases would need for
// the paper's geomean, and the sensitivity rows.
func seesawA10Gap(w *strings.Builder, f10 fig10Result, bound, overhead float64) {
	var share, arxiv []float64
	for _, c := range f10.cases {
		if !strings.Contains(c.bench.node, "A10G") {
			continue
		}
		r := c.seesaw.throughput / c.vllm.throughput
		if c.dataset == "sharegpt" {
			share = append(share, r)
		} else {
			arxiv = append(arxiv, r)
		}
	}
	gs, ga := geomean(share), geomean(arxiv)
	edge := 1.45 * 0.9
	fmt.Fprintf(w, "**Why the A10 geomean misses.** On the A10G the model's arXiv cases give a geomean of %.2f× (%s) and its ShareGPT cases %.2f× (%s), "+
		"%.2f× together. The tolerance's edge (%.3f×) needs the ShareGPT geomean at %.2f× with these arXiv cases, the paper's %.2f× at %.2f×. "+
		"The breakdown above says why ShareGPT stays near 1.1×: the prompts are a third of the tokens, the decode phase is most of Seesaw's run, "+
		"and it runs the layout vLLM's best runs, so even a prefill of no time would give %.2f× on the 15B case. "+
		"Seesaw's premise for the decode phase (§3.1: decode is bound by weight streaming, which TP divides) does not hold on this GPU at these batches: "+
		"the A10G's 70 dense TFLOPS against 600 GB/s (about 117 FLOPs a byte, so about 117 tokens a weight read at BF16) make a decode step of a "+
		"few hundred sequences compute-bound, and the TP all-reduces over PCIe 4.0 x8 cost more than the weight streaming TP saves. "+
		"The transitions (one on ShareGPT, where the host store holds every prompt's KV) and the waits for KV copies (the rest of the swaps hidden "+
		"behind compute, as the paper's asynchronous pipeline hides them) take at most %.1f%% of a Seesaw run above. "+
		"What would have to be true: for the tolerance, ShareGPT speedups %.0f%% above the model's; for the paper's 1.45×, %.0f%% above, "+
		"past what a free prefill would give on the 15B case, so a decode phase faster than vLLM's under the same layout — a GPU whose decode at these batches is bound by weight streaming. "+
		"With Table 1's A10 (125 TFLOPS, the same memory) the A10 geomean is %.2f×; with a narrower ShareGPT spread (σ %.1f) %.2f× — "+
		"the workload's spread is not what separates the model from the paper, the A10G's compute is. The paper's own reason for the A10's larger "+
		"gains (§6.2: \"A10 has better single GPU performance than L4, while they have similar PCIe inter-connection bandwidth\") fits Table 1's A10 "+
		"(125 against the L4's 121 TFLOPS, 600 against 300 GB/s), not the A10G, whose 70 TFLOPS are below the L4's. We keep the A10G's sourced "+
		"70 TFLOPS (the g5's GPU, docs/simulator.md): choosing the GPU by the row it lands would be fitting; the row stays outside.\n\n",
		ga, ratios(arxiv), gs, ratios(share), geomean(append(slices.Clone(share), arxiv...)), edge, edge*edge/ga, 1.45, 1.45*1.45/ga,
		bound, 100*overhead, 100*(edge*edge/ga/gs-1), 100*(1.45*1.45/ga/gs-1), f10.a10Table1, shareGPTNarrowSigma, f10.a10Sigma)
}

// decodeStepTable writes the cost model's decode step of batch sequences
// at context tokens under each of plans, rank 0's busy time by part: the
// linear layers (and at which roof), decode attention, the TP
// collectives, the rest; and the decode rate it sustains when the
// pipeline stays full (batch over rank 0's busy time).
func decodeStepTable(w *strings.Builder, s *simSetup, plans []parallel.Plan, batch, context int) error {
	fmt.Fprintf(w, "| decode layout | step busy ms | linear layers ms (compute roof / memory roof) | attention ms | all-reduce + all-gather ms | rest ms | decode tok/s |\n|---|---|---|---|---|---|---|\n")
	var sh sim.StepShape
	for range batch {
		sh.Seqs = append(sh.Seqs, sim.Seq{Context: context, New: 1, Logits: 1})
	}
	for _, p := range plans {
		lc, err := s.cost.Layout(s.cfg, parallel.Standard(p))
		if err != nil {
			return err
		}
		b := lc.StepTime(0, &sh)
		var lin, linC, linM float64
		for _, c := range []sim.Component{sim.CompQKV, sim.CompOut, sim.CompMLPUp, sim.CompMLPDown, sim.CompLMHead} {
			lin += b.Parts[c].Time
			linC += b.Parts[c].Compute
			linM += b.Parts[c].Memory
		}
		attn := b.Parts[sim.CompAttnDecode].Time
		coll := b.Parts[sim.CompAllReduce].Time + b.Parts[sim.CompAllGather].Time
		fmt.Fprintf(w, "| %s | %.1f | %.1f (%.1f / %.1f) | %.1f | %.1f | %.1f | %.0f |\n", planLabel(p), 1e3*b.Total, 1e3*lin, 1e3*linC, 1e3*linM,
			1e3*attn, 1e3*coll, 1e3*(b.Total-lin-attn-coll), float64(batch)/b.Total)
	}
	fmt.Fprintln(w)
	return nil
}
