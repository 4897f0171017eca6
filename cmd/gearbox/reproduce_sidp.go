package main

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/sim"
)

// The SiDP paper's setup (papers/001, §5.1, Table 1): one node of 8 GPUs
// (H20 with 144 GB, H200, B200), BF16, three models, offline jobs of
// average length 1K, 2K and 4K tokens, vLLM 0.10.1 as the baseline.
var (
	sidpModels = []string{"Qwen/Qwen3-32B", "Qwen/Qwen2.5-72B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"}
	sidpNodes  = []string{"8xH20-141GB", "8xH200", "8xB200"}
	sidpLens   = []int{1024, 2048, 4096}
)

const (
	// sidpJobRequests sizes every offline job: 2,048 requests whatever
	// their average length, twice vLLM's default batch of 1,024
	// sequences, so that no deployment holds a whole job at once and
	// every batch is bounded by its KV cache or its cap, not by the job
	// (the paper's §5.2 explains its gains by a DP baseline that "can no
	// longer increase batch size" for its KV; its job sizes are not
	// given).
	sidpJobRequests = 2048
	// sidpSeed draws every job's lengths.
	sidpSeed = 17
)

// sidpSched is vLLM 0.10.1's offline engine limits on the paper's GPUs:
// for the LLM class on a GPU of at least 70 GiB that is not an A100,
// EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py) sets 16,384
// batched tokens and 1,024 sequences a step; the synthetic prompts share
// no prefix.
var sidpSched = sched.Config{MaxNumBatchedTokens: 16384, MaxNumSeqs: 1024}

// sidpRun is one simulated job: a vLLM plan (SiDP nil) or a SiDP group.
type sidpRun struct {
	node, model string
	length      int
	util        float64 // 0: vLLM's 0.9
	seqs        int     // --max-num-seqs; 0: sidpSched's
	plan        parallel.Plan
	sidp        *sim.SiDP
	modes       sim.SiDPModes
}

func (r sidpRun) String() string {
	if r.sidp != nil {
		return fmt.Sprintf("%s|%s|%d|%g|%d|sidp%d/%d|%d|%v", r.node, r.model, r.length, r.util, r.seqs, r.sidp.Replicas, r.sidp.TP, r.modes, r.sidp.NoPeakShift)
	}
	return fmt.Sprintf("%s|%s|%d|%g|%d|%s", r.node, r.model, r.length, r.util, r.seqs, r.plan)
}

// sidpResult is what one job gave: total token throughput, and for SiDP
// the iterations and time by mode.
type sidpResult struct {
	throughput  float64
	iterations  [3]int
	tokens      [3]int64
	busy        [3]float64 // replica-seconds of steps by mode
	modeSeconds [3]float64
	switches    int
	steps       int // vLLM: engine steps over all engines
	preempt     int64
	perSecond   []float64 // tokens in each second of the job
	makespan    float64   // seconds
	engines     int       // vLLM: engines (DP)
	err         error
}

// sidpLab runs jobs in parallel and remembers their results.
type sidpLab struct {
	mu      sync.Mutex
	results map[string]*sidpResult
	costs   map[string]*sim.CostModel
	cfgs    map[string]*model.Config
}

func newSiDPLab() *sidpLab {
	return &sidpLab{results: map[string]*sidpResult{}, costs: map[string]*sim.CostModel{}, cfgs: map[string]*model.Config{}}
}

// cost is the BF16 cost model of a node.
func (l *sidpLab) cost(node string) (*sim.CostModel, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.costs[node]; c != nil {
		return c, nil
	}
	n, err := sim.ParseNode(node)
	if err != nil {
		return nil, err
	}
	c, err := sim.NewCostModel(n, sim.Precision{Weights: sim.BF16, Activations: sim.BF16, KV: sim.BF16})
	if err != nil {
		return nil, err
	}
	l.costs[node] = c
	return c, nil
}

func (l *sidpLab) config(id string) (*model.Config, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.cfgs[id]; c != nil {
		return c, nil
	}
	c, err := sim.LookupModel(id)
	if err != nil {
		return nil, err
	}
	l.cfgs[id] = c
	return c, nil
}

// modelOn is config(id) and cost(node): a model and the cost model of
// the node it runs on.
func (l *sidpLab) modelOn(id, node string) (*model.Config, *sim.CostModel, error) {
	cfg, err := l.config(id)
	if err != nil {
		return nil, nil, err
	}
	c, err := l.cost(node)
	return cfg, c, err
}

// run simulates every job not yet run, GOMAXPROCS at a time.
func (l *sidpLab) run(runs []sidpRun) {
	work := make(chan sidpRun)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				res := l.simulate(r)
				l.mu.Lock()
				l.results[r.String()] = res
				l.mu.Unlock()
			}
		}()
	}
	seen := map[string]bool{}
	for _, r := range runs {
		l.mu.Lock()
		done := l.results[r.String()] != nil || seen[r.String()]
		l.mu.Unlock()
		if !done {
			seen[r.String()] = true
			work <- r
		}
	}
	close(work)
	wg.Wait()
}

func (l *sidpLab) simulate(r sidpRun) *sidpResult {
	c, err := l.cost(r.node)
	if err != nil {
		return &sidpResult{err: err}
	}
	cfg, err := l.config(r.model)
	if err != nil {
		return &sidpResult{err: err}
	}
	reqs := sim.OfflineJob(sidpJobRequests, r.length, cfg.MaxPositions, sidpSeed)
	sc := sidpSched
	if r.seqs > 0 {
		sc.MaxNumSeqs = r.seqs
	}
	if r.sidp != nil {
		res, err := sim.RunSiDP(sim.SiDPRunOptions{Model: cfg, Cost: c, SiDP: *r.sidp, Sched: sc, Memory: r.util, Requests: reqs, Modes: r.modes})
		if err != nil {
			return &sidpResult{err: err}
		}
		return &sidpResult{throughput: res.Report.TotalTokenThroughput, iterations: res.Iterations, tokens: res.Tokens, busy: res.Busy,
			modeSeconds: res.ModeSeconds, switches: len(res.Switches), makespan: res.SimDuration.Seconds(), preempt: res.Preemptions,
			perSecond: res.TokensPerSecond}
	}
	res, err := sim.Run(sim.RunOptions{Model: cfg, Cost: c, Plan: r.plan, Sched: sc, Requests: reqs, OverlapSteps: r.plan.PP > 1, Utilization: r.util})
	if err != nil {
		return &sidpResult{err: err}
	}
	return &sidpResult{throughput: res.Report.TotalTokenThroughput, steps: res.Steps, makespan: res.SimDuration.Seconds(), engines: r.plan.DP, preempt: res.Preemptions, perSecond: res.TokensPerSecond,
		tokens: [3]int64{int64(res.Report.TotalInputTokens + res.Report.TotalOutputTokens)}}
}

// get is a finished job's result.
func (l *sidpLab) get(r sidpRun) *sidpResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	if res := l.results[r.String()]; res != nil {
		return res
	}
	return &sidpResult{err: fmt.Errorf("not run")}
}

// vLLM's categories on 8 GPUs (§5.1: the best of each is the baseline).
var (
	sidpTP   = []parallel.Plan{{DP: 1, PP: 1, SP: 1, TP: 8}}
	sidpTPDP = []parallel.Plan{{DP: 2, PP: 1, SP: 1, TP: 4}, {DP: 4, PP: 1, SP: 1, TP: 2}, {DP: 8, PP: 1, SP: 1, TP: 1}}
	sidpTPPP = []parallel.Plan{{DP: 1, PP: 2, SP: 1, TP: 4}, {DP: 1, PP: 4, SP: 1, TP: 2}}
)

// sidpDefault is SiDP as the paper evaluates its throughput: DP=8.
var sidpDefault = sim.SiDP{Replicas: 8, TP: 1}

// sidpSweep is the SiDP groups of Figure 12, where the paper sweeps
// (TP, DP) for SiDP as for vLLM's TP×DP (§5.3).
var sidpSweep = []sim.SiDP{{Replicas: 2, TP: 4}, {Replicas: 4, TP: 2}, sidpDefault}

// sidpBatching is the paper's two batching strategies (§5.1), as
// --max-num-seqs: vLLM 0.10.1's default of 1,024, a large batch that can
// run into KV preemption, and 256 (vLLM's default on smaller GPUs), which
// preempts less; every deployment reports the better.
var sidpBatching = []int{1024, 256}

func vllmRuns(node, id string, length int, util float64, plans ...[]parallel.Plan) []sidpRun {
	var out []sidpRun
	for _, ps := range plans {
		for _, p := range ps {
			for _, n := range sidpBatching {
				out = append(out, sidpRun{node: node, model: id, length: length, util: util, seqs: n, plan: p})
			}
		}
	}
	return out
}

// best is the highest throughput among plans, and the plan; 0 when none
// ran (a plan whose weights do not fit fails).
func (l *sidpLab) best(node, id string, length int, util float64, plans []parallel.Plan) (float64, string) {
	res, run := l.bestRun(node, id, length, util, plans)
	if res.throughput == 0 {
		return 0, "—"
	}
	return res.throughput, run.plan.String()
}

// bestRun is the best run among plans (a zero result when none ran).
func (l *sidpLab) bestRun(node, id string, length int, util float64, plans []parallel.Plan) (*sidpResult, sidpRun) {
	best, run := &sidpResult{}, sidpRun{}
	for _, r := range vllmRuns(node, id, length, util, plans) {
		if res := l.get(r); res.err == nil && res.throughput > best.throughput {
			best, run = res, r
		}
	}
	return best, run
}

// sidpJob is a SiDP job with vLLM's default batching (256 sequences).
func sidpJob(node, id string, length int, util float64, s sim.SiDP, modes sim.SiDPModes) sidpRun {
	return sidpRun{node: node, model: id, length: length, util: util, seqs: sidpBatching[0], sidp: &s, modes: modes}
}

// sidpJobs is a SiDP job under each batching strategy.
func sidpJobs(node, id string, length int, util float64, s sim.SiDP, modes sim.SiDPModes) []sidpRun {
	var out []sidpRun
	for _, n := range sidpBatching {
		r := sidpJob(node, id, length, util, s, modes)
		r.seqs = n
		out = append(out, r)
	}
	return out
}

// bestSiDP is the better of a SiDP job's batching strategies.
func (l *sidpLab) bestSiDP(node, id string, length int, util float64, s sim.SiDP, modes sim.SiDPModes) *sidpResult {
	var best *sidpResult
	for _, r := range sidpJobs(node, id, length, util, s, modes) {
		if res := l.get(r); best == nil || (res.err == nil && res.throughput > best.throughput) {
			best = res
		}
	}
	return best
}

func shortModel(id string) string { return id[strings.Index(id, "/")+1:] }

func reproduceSiDP(w *strings.Builder) error {
	start := time.Now()
	lab := newSiDPLab()
	h20 := sidpNodes[0]
	fmt.Fprintf(w, "# SiDP (paper 001) reproduced in the simulator\n\n")
	fmt.Fprintf(w, "Generated by `gearbox reproduce sidp`. The paper's text has lost its inline math and figures, so most targets come from "+
		"specs/sidp.md: the abstract's headline numbers (hard), numbers surviving in the text (hard), and two AI-written digests (soft: reported, not gated). "+
		"Hardware: one node of 8 GPUs, %s (the paper's 144 GB H20), 8×H200 and 8×B200, BF16 weights, activations and KV. "+
		"Engines: vLLM 0.10.1's offline limits on these GPUs (%d sequences, %d batched tokens a step: EngineArgs.get_batch_defaults for the LLM class on GPUs of 70 GiB or more), GPU memory utilization 0.9 unless stated; "+
		"the throughput tables (Figures 6–8, 12, 13) run every deployment, SiDP included, under both of the paper's batching strategies (%d sequences a step, vLLM's default, a large batch that may preempt, and %d) and keep the better. "+
		"Baselines are the simulator's vLLM deployments: TP, TP×DP (independent engines) and TP×PP (virtual engines overlapping steps); the best of each category. "+
		"SiDP runs at DP=8 (the paper's default) unless stated, with the model in docs/simulator.md (§SiDP): in WaS every replica steps on its own clock (the paper's DP independence, §4.2), "+
		"in CaS the group steps in lockstep; 2(N−1) WaS slots per GPU, peak shifting, "+
		"one-cycle lookahead, B_th profiled on the cost model (the smallest batch at which a WaS iteration is no slower than a CaS one, at a 2K context), "+
		"hysteresis ±%.0f%% and a %.0f s persistence window (the paper gives neither). TP×PP is searched over PP 2 and 4 (PP 8 is never the best in this model).\n\n",
		h20, sidpSched.MaxNumSeqs, sidpSched.MaxNumBatchedTokens, sidpBatching[0], sidpBatching[1], 100*sim.DefaultSiDPHysteresis, sim.DefaultSiDPPersistence)
	fmt.Fprintf(w, "**Fitted constant.** One: sim.CaSChunkCost = %.1f µs, a CaS owner's handling of one peer's chunk per layer, fitted to Figure 14's "+
		"V2 → V3 step (19 s / 12 s = 1.58); that row is marked *fitted* and checks nothing. Everything else is the simulator's global cost model "+
		"(sim/hardware.go) and datasheets; nothing is tuned per experiment.\n\n", sim.CaSChunkCost*1e6)
	fmt.Fprintf(w, "**Workload.** Offline jobs (every request at time 0) of %d requests, twice vLLM's default batch, so that no deployment holds a whole job at once: prompt and output lengths each average half the "+
		"job's 1K/2K/4K (which part the paper's lengths refer to is not stated), prompts log-normal (σ 0.5), outputs log-normal with σ 1.28 so that "+
		"the longest 10%% of samples carry about half the output tokens (the paper's §3.2), cut at 8× the mean output. Requests are sharded "+
		"round-robin over SiDP's replicas; vLLM's DP engines take them least-loaded. Throughput is total (prompt + output) tokens over the job's makespan.\n\n",
		sidpJobRequests)

	if err := sidpMemory(w, lab); err != nil {
		return err
	}
	sidpUtilization(w, lab)
	sidpThroughput(w, lab)
	if err := sidpFetch(w, lab); err != nil {
		return err
	}
	if err := sidpModes(w, lab); err != nil {
		return err
	}
	if err := sidpLadder(w, lab); err != nil {
		return err
	}
	sidpTightMemory(w, lab)
	if err := sidpGaps(w, lab); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n_Simulated in %.1f s on %d threads._\n", time.Since(start).Seconds(), runtime.GOMAXPROCS(0))
	return nil
}

// sidpGaps is the closing reading of the throughput gaps, from the H20 4K
// Qwen3-32B jobs already run.
func sidpGaps(w *strings.Builder, lab *sidpLab) error {
	h20, id := sidpNodes[0], "Qwen/Qwen3-32B"
	cfg, c, err := lab.modelOn(id, h20)
	if err != nil {
		return err
	}
	all := append(append(append([]parallel.Plan{}, sidpTP...), sidpTPDP...), sidpTPPP...)
	v, run := lab.bestRun(h20, id, 4096, 0, all)
	sd := lab.bestSiDP(h20, id, 4096, 0, sidpDefault, sim.AutoMode)
	mem := sim.MemoryOptions{MaxBatchedTokens: sidpSched.MaxNumBatchedTokens, MaxSeqs: sidpSched.MaxNumSeqs}
	sum := func(v []int64) float64 {
		t := 0.0
		for _, x := range v {
			t += float64(x)
		}
		return t
	}
	kvBest, err := c.KVCapacity(cfg, run.plan, mem)
	if err != nil {
		return err
	}
	small, err := readSiDPDefault(c, cfg, mem)
	if err != nil {
		return err
	}
	big := "meta-llama/Llama-3.1-70B-Instruct"
	cfgBig, err := lab.config(big)
	if err != nil {
		return err
	}
	large, err := readSiDPDefault(c, cfgBig, mem)
	if err != nil {
		return err
	}
	vBig, _ := lab.bestRun(h20, big, 4096, 0, all)
	sdBig := lab.bestSiDP(h20, big, 4096, 0, sidpDefault, sim.AutoMode)
	vSteps, sSteps := float64(max(v.steps, 1)), float64(max(sd.iterations[sim.WaS], 1))
	vTok, vMs := float64(v.tokens[0])/vSteps, 1e3*v.makespan*float64(max(v.engines, 1))/vSteps
	sTok, sMs := float64(sd.tokens[sim.WaS])/sSteps, 1e3*sd.busy[sim.WaS]/sSteps
	gpus := float64(run.plan.Ranks())
	fmt.Fprintf(w, "\n## Reading the gaps\n\n"+
		"**Capacity.** The memory model gives what the paper's accounting gives: the freed bytes agree with the spec's worked example to the byte, and the "+
		"largest factor (1.65 for Qwen2.5-72B at TP2/DP4) sits at the tolerance's edge because the simulator's budget is the GPU's real 141 GiB with vLLM's "+
		"profiled activations and counts the WaS slots (see *By hand* under Figure 5).\n\n"+
		"**Throughput.** In WaS each replica now steps on its own clock, as the paper's WaS keeps DP independence (§4.2); a lockstep group made every replica "+
		"wait out every other's prefill chunks (measured when the change was made, on the same Qwen3-32B 4K job: 2,991 tokens/s against 3,864; 2,708 against 5,120 with 4,096 requests). SiDP still runs below the best vLLM deployment, and the "+
		"per-step breakdown says why, for Qwen3-32B at 4K on H20. "+
		"(1) The best vLLM deployment is %s with %d sequences: it keeps no weight replica at all, so its KV pool is the node's largest (%.2fM tokens, against "+
		"%.2fM for SiDP DP=8), and it runs %.0f tokens a step (%.0f a GPU) in %.1f ms with %d preemptions: the KV SiDP frees buys it no batch that this baseline lacks. "+
		"(2) A SiDP replica runs %.0f tokens a step in %.1f ms (%.0f tokens/s a GPU against the baseline's %.0f): every WaS step copies the %d layers it does not "+
		"own, at least %.0f ms at NVLink × LinkEfficiency, and its compute hides them only from %d rows (R17), more than a TP1 replica's KV holds at a 4K job's "+
		"contexts; on H20 a step is compute-bound at either batch, so the larger per-GPU batch SiDP would need gains little anyway (Figure 2b's paragraph). "+
		"Over the first %.0f s (half the baseline's job), while both run full batches, SiDP makes %.0f tokens/s against the baseline's %.0f (%.2f×). "+
		"(3) The tail: a lone sequence decodes at the copy floor in WaS and at %.0f ms in CaS (Figure 11, one row a replica), against a TP8 step's %.0f ms, and the "+
		"longest samples (up to 8× the mean output) set the makespan: SiDP spends %.0f s of its %.0f s in CaS; the baseline's whole job takes %.0f s. "+
		"(4) The 70B models: a TP1 replica of %s keeps %.0fK tokens of KV (about %.0f sequences at a 3K context) while its copies take %.0f ms a step and its "+
		"compute hides them only from %d rows, so even its bulk runs at %.2f× the baseline: the gain shrinks with the model where the paper's grows. "+
		"For the paper's 1.5× the paper's vLLM would have to run at two thirds of this model's rate per GPU or be held by its KV below the batch it needs, and its "+
		"H20 steps would have to grow far less with the batch than a roofline of the datasheets allows.\n\n"+
		"**Not modelled.** vLLM's own overheads beyond sim.VLLMStepOverhead (a weaker baseline would move every gain up); the HBM traffic of the WaS copies "+
		"competing with the GEMMs; replicas drifting apart in WaS (a copy is assumed to have its owner's link to itself, peak shifting's aim). "+
		"(Until CostModel.gemm took the CUDA cores' FP32 peak as a floor for GEMMs of a few rows, its tile factor m/(m+64) made an H20 one-row GEMM "+
		"compute-bound at about twice its HBM floor, raising every small-batch H20 step for SiDP and vLLM alike; the numbers above are with the floor.)\n",
		run.plan, run.seqs, sum(kvBest)/1e6, sum(small.kv)/1e6, vTok, vTok*float64(max(run.plan.DP, 1))/gpus, vMs, v.preempt,
		sTok, sMs, sTok/sMs*1e3, vTok/vMs*1e3/gpus*float64(max(run.plan.DP, 1)), cfg.Layers-cfg.Layers/8, small.floor*1e3, small.threshold,
		v.makespan/2, sidpRate(sd.perSecond, v.makespan/2), sidpRate(v.perSecond, v.makespan/2), sidpRate(sd.perSecond, v.makespan/2)/sidpRate(v.perSecond, v.makespan/2),
		sidpCaSOne(small.cost), sidpTP8One(c, cfg), sd.modeSeconds[sim.CaS], sd.makespan, v.makespan,
		shortModel(big), float64(large.kv[0])/1e3, float64(large.kv[0])/3072, large.floor*1e3, large.threshold, sidpRate(sdBig.perSecond, vBig.makespan/2)/sidpRate(vBig.perSecond, vBig.makespan/2))
	return nil
}

// sidpDefaultReading is what sidpGaps reads of SiDP's default group on
// one model: each rank's KV capacity, the cost model, the copy floor of a
// WaS step (the layers a rank does not own, fetched at the link's rate)
// and the rows from which compute hides those copies (R17).
type sidpDefaultReading struct {
	kv        []int64
	cost      *sim.SiDPCost
	floor     float64
	threshold int
}

func readSiDPDefault(c *sim.CostModel, cfg *model.Config, mem sim.MemoryOptions) (sidpDefaultReading, error) {
	kv, _, err := c.SiDPKVCapacity(cfg, sidpDefault, mem)
	if err != nil {
		return sidpDefaultReading{}, err
	}
	sc, err := c.NewSiDPCost(cfg, sidpDefault)
	if err != nil {
		return sidpDefaultReading{}, err
	}
	return sidpDefaultReading{
		kv:        kv,
		cost:      sc,
		floor:     float64(cfg.Layers-cfg.Layers/8) * sc.FetchTime(),
		threshold: sc.Threshold(sim.DefaultSiDPThresholdContext, 1<<14),
	}, nil
}

// sidpCaSOne is a CaS iteration with one decode on every replica (2K).
func sidpCaSOne(sc *sim.SiDPCost) float64 {
	reps := make([][]sim.Seq, sc.Config().Replicas)
	for i := range reps {
		reps[i] = []sim.Seq{{Context: 2048, New: 1, Logits: 1}}
	}
	st, err := sc.Iteration(sim.CaS, reps)
	if err != nil {
		return math.NaN()
	}
	return st.Seconds * 1e3
}

// sidpTP8One is a TP8 decode step of one sequence (2K), ms.
func sidpTP8One(c *sim.CostModel, cfg *model.Config) float64 {
	lc, err := c.Layout(cfg, parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 8}))
	if err != nil {
		return math.NaN()
	}
	return lc.Step(&sim.StepShape{Seqs: []sim.Seq{{Context: 2048, New: 1, Logits: 1}}}).Seconds * 1e3
}

// sidpMemory is S1–S4: FFN shares, Figure 5's KV capacity, Figure 2.
func sidpMemory(w *strings.Builder, lab *sidpLab) error {
	h20 := sidpNodes[0]
	c, err := lab.cost(h20)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "## FFN share of the parameters (§2.1, S1)\n\n| model | FFN share | paper | tolerance | result |\n|---|---|---|---|---|\n")
	for _, r := range []struct {
		id         string
		paper, tol float64
	}{{"Qwen/Qwen3-32B", 0.77, 0.01}, {"meta-llama/Llama-3.1-405B", 0.82, 0.015}} {
		cfg, err := lab.config(r.id)
		if err != nil {
			return err
		}
		f := sim.FFNShare(cfg)
		fmt.Fprintf(w, "| %s | %.3f | %.2f | ±%.3f | %s |\n", r.id, f, r.paper, r.tol, check(f, r.paper, r.tol, false))
	}

	fmt.Fprintf(w, "\n## Figure 5: KV capacity at the same (TP, DP), %s, utilization 0.9 (S2)\n\n", h20)
	fmt.Fprintf(w, "Tokens of KV cache over the node (every replica's pool). vLLM holds every weight on every replica; SiDP drops the FFN layers a replica "+
		"does not own and adds its WaS slots (2(N−1) FFN layers per GPU; the N−1 column is the paper's \"cache for N−1 remote layers\").\n\n")
	fmt.Fprintf(w, "| model | TP/DP | vLLM tokens | SiDP tokens | factor | factor with N−1 slots |\n|---|---|---|---|---|---|\n")
	maxFactor, maxN1 := 0.0, 0.0
	var qwenTP4, sidpTP1 float64
	tp1OK := true
	for _, id := range sidpModels {
		cfg, err := lab.config(id)
		if err != nil {
			return err
		}
		for _, tp := range []int{4, 2, 1} {
			s := sim.SiDP{Replicas: 8 / tp, TP: tp}
			kv, base, err := c.SiDPKVCapacity(cfg, s, sim.MemoryOptions{MaxBatchedTokens: sidpSched.MaxNumBatchedTokens, MaxSeqs: sidpSched.MaxNumSeqs})
			if err != nil {
				return err
			}
			s.Slots = s.Replicas - 1
			kv1, _, err := c.SiDPKVCapacity(cfg, s, sim.MemoryOptions{MaxBatchedTokens: sidpSched.MaxNumBatchedTokens, MaxSeqs: sidpSched.MaxNumSeqs})
			if err != nil {
				return err
			}
			sum := func(v []int64) float64 {
				t := 0.0
				for _, x := range v {
					t += float64(x)
				}
				return t
			}
			k, b, k1 := sum(kv), sum(base), sum(kv1)
			factor, f1 := "vLLM cannot run", "—"
			if b > 0 {
				factor, f1 = fmt.Sprintf("%.2f", k/b), fmt.Sprintf("%.2f", k1/b)
				maxFactor, maxN1 = max(maxFactor, k/b), max(maxN1, k1/b)
			}
			if tp == 4 && id == "Qwen/Qwen3-32B" {
				qwenTP4 = k / b
			}
			if tp == 1 && id != "Qwen/Qwen3-32B" {
				tp1OK = tp1OK && b == 0 && k > 0
				sidpTP1 = max(sidpTP1, k)
			}
			fmt.Fprintf(w, "| %s | %d/%d | %.0f | %.0f | %s | %s |\n", shortModel(id), tp, 8/tp, b, k, factor, f1)
		}
	}
	fmt.Fprintf(w, "\n| quantity | paper | simulated | tolerance | result |\n|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| largest KV factor, same (TP, DP) | up to 1.8 [abs] | %.2f (%.2f with N−1 slots) | ±0.15 | %s (N−1 slots: %s) |\n", maxFactor, maxN1, check(maxFactor, 1.8, 0.15, false), check(maxN1, 1.8, 0.15, false))
	res := "within tolerance"
	if qwenTP4 > 1.15 || qwenTP4 <= 1 {
		res = "**outside tolerance**"
	}
	fmt.Fprintf(w, "| Qwen3-32B TP4/DP2 factor | \"modest\" | %.2f | 1 < f ≤ 1.15 | %s |\n", qwenTP4, res)
	res = "same as the paper"
	if !tp1OK {
		res = "**differs from the paper**"
	}
	fmt.Fprintf(w, "| 70B/72B at TP1/DP8 | vLLM cannot run, SiDP can | vLLM does not fit, SiDP holds %.2fM tokens | qualitative | %s |\n", sidpTP1/1e6, res)
	fmt.Fprintf(w, "| SiDP tokens at TP1/DP8 (soft) | ≈1.0M [digest] | %.2fM | — | soft: reported |\n", sidpTP1/1e6)
	if err := sidpKVByHand(w, c, lab); err != nil {
		return err
	}

	// Figure 2a: Qwen3-32B's total KV as DP grows at 8 GPUs.
	cfg, err := lab.config("Qwen/Qwen3-32B")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n## Figure 2: vLLM data parallelism on %s, Qwen3-32B (S3, S4)\n\n| TP/DP | KV tokens over the node |\n|---|---|\n", h20)
	var kv8, kvMin float64
	for _, dp := range []int{1, 2, 4, 8} {
		p := parallel.Plan{DP: dp, PP: 1, SP: 1, TP: 8 / dp}
		kv, err := c.KVCapacity(cfg, p, sim.MemoryOptions{MaxBatchedTokens: sidpSched.MaxNumBatchedTokens, MaxSeqs: sidpSched.MaxNumSeqs})
		if err != nil {
			return err
		}
		t := 0.0
		for _, x := range kv {
			t += float64(x)
		}
		if dp == 1 {
			kv8 = t
		}
		kvMin = t
		fmt.Fprintf(w, "| %d/%d | %.0f |\n", 8/dp, dp, t)
	}
	drop := 100 * (1 - kvMin/kv8)
	fmt.Fprintf(w, "\n| quantity | paper | simulated | tolerance | result |\n|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| KV lost going from TP8 to DP8 (Fig 2a) | up to 45%% | %.0f%% | ±9 points | %s |\n\n", drop, check(drop, 45, 9, false))
	return nil
}

// sidpKVByHand sets the simulator's memory model beside specs/sidp.md's
// worked example (§4, item 2) for the largest factor, Qwen2.5-72B at
// TP2/DP4.
func sidpKVByHand(w *strings.Builder, c *sim.CostModel, lab *sidpLab) error {
	cfg, err := lab.config("Qwen/Qwen2.5-72B-Instruct")
	if err != nil {
		return err
	}
	s := sim.SiDP{Replicas: 4, TP: 2}
	m, err := c.SiDPMemory(cfg, s, 0, sim.MemoryOptions{MaxBatchedTokens: sidpSched.MaxNumBatchedTokens, MaxSeqs: sidpSched.MaxNumSeqs})
	if err != nil {
		return err
	}
	gb := func(b int64) float64 { return float64(b) / 1e9 }
	const specM, specO = 144e9, 5e9 // the worked example's budget
	specKV := 0.9*specM - float64(m.Baseline.Weights) - specO
	add := float64(m.Freed - m.Slots)
	need := add / 0.8 // the baseline KV at which the factor is 1.8
	fmt.Fprintf(w, "\n**By hand** (specs/sidp.md §4, item 2, Qwen2.5-72B at TP2/DP4, per GPU). Weights %.1f GB; SiDP frees (1−1/4)·F/TP = %.1f GB, "+
		"the worked example's number to the byte. The worked example takes M = 144 GB, u·M = %.1f GB and O = 5 GB: KV %.1f → %.1f GB without slots, %.2f×. "+
		"The simulator's budget is M = 141 GiB = %.1f GB (the paper's \"144 GB\" is what nvidia-smi reports for this part, 143,771 MiB = 150.8 GB), u·M = %.1f GB, "+
		"and O = %.1f GB (the live activations of vLLM's profiling step: %d tokens, %d logits rows), so the baseline keeps %.1f GB of KV; "+
		"the freed %.1f GB less %d WaS slots of %.2f GB (%.1f GB) make %.1f GB: %.2f× (%.2f× without slots). "+
		"The gap to 1.84× is the larger denominator and the slots; for 1.8× with these slots the baseline would have to keep only %.1f GB of KV, "+
		"%.1f GB more reserved beside the weights than vLLM's profiling step needs.\n",
		gb(m.Baseline.Weights), gb(m.Freed), 0.9*specM/1e9, specKV/1e9, (specKV+float64(m.Freed))/1e9, (specKV+float64(m.Freed))/specKV,
		gb(m.Capacity), gb(m.Usable), gb(m.Activations), sidpSched.MaxNumBatchedTokens, sidpSched.MaxNumSeqs, gb(m.Baseline.KV),
		gb(m.Freed), 2*(s.Replicas-1), gb(m.Slots)/float64(2*(s.Replicas-1)), gb(m.Slots), gb(m.KV), float64(m.KV)/float64(m.Baseline.KV),
		float64(m.KV+m.Slots)/float64(m.Baseline.KV), need/1e9, (float64(m.Baseline.KV)-need)/1e9)
	return nil
}

// sidpUtilization is S4 (Figure 2b).
func sidpUtilization(w *strings.Builder, lab *sidpLab) {
	h20 := sidpNodes[0]
	// Figure 2b: throughput of data parallelism at u = 0.9 and 0.3: DP=4
	// (TP2), the most replicas whose weights fit at 0.3.
	dp4 := []parallel.Plan{{DP: 4, PP: 1, SP: 1, TP: 2}}
	lab.run(append(vllmRuns(h20, "Qwen/Qwen3-32B", 2048, 0.9, dp4), vllmRuns(h20, "Qwen/Qwen3-32B", 2048, 0.3, dp4)...))
	hi, _ := lab.best(h20, "Qwen/Qwen3-32B", 2048, 0.9, dp4)
	lo, _ := lab.best(h20, "Qwen/Qwen3-32B", 2048, 0.3, dp4)
	fall := 100 * (1 - lo/hi)
	fmt.Fprintf(w, "\nFigure 2b: DP=4 (TP2, the most replicas that fit at 0.3), 2K job: %.0f tok/s at utilization 0.9, %.0f tok/s at 0.3.\n\n", hi, lo)
	fmt.Fprintf(w, "| quantity | paper | simulated | tolerance | result |\n|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| throughput lost at utilization 0.3 (Fig 2b) | ≈68%% | %.0f%% | ±14 points | %s |\n\n", fall, check(fall, 68, 14, false))

	// Why: the batch each budget allows, and T(B) between the two.
	cfg, c, err := lab.modelOn("Qwen/Qwen3-32B", h20)
	if err != nil {
		return
	}
	lc, err := c.Layout(cfg, parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2}))
	if err != nil {
		return
	}
	const ctx = 1536 // a 2K job's mean context while decoding: 1K prompt and half of the 1K output
	batch := func(u float64) int {
		kv, err := c.KVCapacity(cfg, dp4[0], sim.MemoryOptions{MaxBatchedTokens: sidpSched.MaxNumBatchedTokens, MaxSeqs: sidpSched.MaxNumSeqs, Utilization: u})
		if err != nil || len(kv) == 0 {
			return 1
		}
		return max(1, min(sidpSched.MaxNumSeqs, int(kv[0])/ctx))
	}
	step := func(b int) float64 {
		sh := sim.StepShape{}
		for range b {
			sh.Seqs = append(sh.Seqs, sim.Seq{Context: ctx, New: 1, Logits: 1})
		}
		return lc.Step(&sh).Seconds
	}
	bLo, bHi := batch(0.3), batch(0.9)
	fmt.Fprintf(w, "**Why it misses.** At a %d-token mean context a TP2 replica's KV holds about %d sequences at utilization 0.3 and %d at 0.9. "+
		"A 68%% loss needs the step at %d sequences to take only %.1f× the step at %d (%d/%d × 0.32); this model's H20 step takes %.1f× "+
		"(%.1f against %.1f ms), because on H20 (148 TFLOP/s against 4.8 TB/s) a decode step is compute-bound from a few dozen rows on. "+
		"The paper's measured H20 steps must be far flatter in B (its Figure 1a), with a per-step cost that does not grow with the batch; "+
		"the same flatness would raise every batch gain below.\n\n",
		ctx, bLo, bHi, bHi, float64(bHi)/float64(bLo)*0.32, bLo, bHi, bLo, step(bHi)/step(bLo), step(bHi)*1e3, step(bLo)*1e3)
}

// sidpThroughput is S5 (Figures 6–8), S9 (Figure 13) and S11 (Figure 15).
func sidpThroughput(w *strings.Builder, lab *sidpLab) {
	type setup struct {
		node, id string
		length   int
	}
	var setups []setup
	for _, id := range sidpModels {
		for _, n := range sidpLens {
			setups = append(setups, setup{sidpNodes[0], id, n})
		}
	}
	for _, node := range sidpNodes[1:] {
		for _, id := range sidpModels {
			setups = append(setups, setup{node, id, 4096})
		}
	}
	var runs []sidpRun
	for _, s := range setups {
		runs = append(runs, vllmRuns(s.node, s.id, s.length, 0, sidpTP, sidpTPDP, sidpTPPP)...)
		runs = append(runs, sidpJobs(s.node, s.id, s.length, 0, sidpDefault, sim.AutoMode)...)
		if s.node == sidpNodes[0] && s.length == 4096 {
			runs = append(runs, sidpJobs(s.node, s.id, s.length, 0, sidpDefault, sim.OnlyWaS)...)
		}
	}
	lab.run(runs)

	fmt.Fprintf(w, "## Figures 6–8: throughput against vLLM (S5)\n\n")
	fmt.Fprintf(w, "H20: every model and length; H200 and B200: the 4K jobs (to keep the command's run time down). tok/s; gain = SiDP over the best vLLM deployment; vs DP = over the best TP×DP.\n\n")
	fmt.Fprintf(w, "| GPU | model | S | vLLM TP | best TP×DP | best TP×PP | SiDP DP=8 | gain | vs DP | SiDP WaS iterations |\n|---|---|---|---|---|---|---|---|---|---|\n")
	type gain struct{ all, dp float64 }
	gains := map[setup]gain{}
	orderOK, orderN := 0, 0
	for _, s := range setups {
		tp, _ := lab.best(s.node, s.id, s.length, 0, sidpTP)
		dp, dpName := lab.best(s.node, s.id, s.length, 0, sidpTPDP)
		pp, ppName := lab.best(s.node, s.id, s.length, 0, sidpTPPP)
		sd := lab.bestSiDP(s.node, s.id, s.length, 0, sidpDefault, sim.AutoMode)
		best := max(tp, dp, pp)
		g := gain{sd.throughput / best, sd.throughput / dp}
		gains[s] = g
		orderN++
		if dp > tp && tp > pp {
			orderOK++
		}
		sdText := fmt.Sprintf("%.0f", sd.throughput)
		if sd.err != nil {
			sdText = "error: " + sd.err.Error()
		}
		it := sd.iterations[sim.WaS] + sd.iterations[sim.CaS]
		fmt.Fprintf(w, "| %s | %s | %dK | %.0f | %.0f (%s) | %.0f (%s) | %s | %.2f | %.2f | %.0f%% |\n", strings.TrimPrefix(s.node, "8x"), shortModel(s.id), s.length/1024,
			tp, dp, dpName, pp, ppName, sdText, g.all, g.dp, 100*float64(sd.iterations[sim.WaS])/float64(max(it, 1)))
	}
	max4K, dev1K := 0.0, 0.0
	grows, bigger := 0, 0
	for _, s := range setups {
		if s.length == 4096 {
			max4K = max(max4K, gains[s].all)
		}
		if s.length == 1024 {
			dev1K = max(dev1K, math.Abs(gains[s].dp-1))
		}
	}
	for _, id := range sidpModels {
		g := func(n int) float64 { return gains[setup{sidpNodes[0], id, n}].all }
		if g(1024) <= g(2048) && g(2048) <= g(4096) {
			grows++
		}
		if id != "Qwen/Qwen3-32B" && g(4096) > gains[setup{sidpNodes[0], "Qwen/Qwen3-32B", 4096}].all {
			bigger++
		}
	}
	fmt.Fprintf(w, "\n| quantity | paper | simulated | tolerance | result |\n|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| largest gain over the best vLLM at 4K | up to 1.5× [abs] | %.2f× | ±0.3 | %s |\n", max4K, check(max4K, 1.5, 0.3, false))
	fmt.Fprintf(w, "| at 1K, SiDP vs best TP×DP | \"closely matches\" | largest deviation %.0f%% | ±5%% | %s |\n", 100*dev1K, check(dev1K, 0, 0.05, false))
	fmt.Fprintf(w, "| gain does not shrink 1K → 2K → 4K (H20) | yes | %d of 3 models | all | %s |\n", grows, passFail(grows == 3))
	fmt.Fprintf(w, "| gain larger for 70B/72B than 32B (H20, 4K) | yes | %d of 2 models | all | %s |\n", bigger, passFail(bigger == 2))
	fmt.Fprintf(w, "| vLLM order TP×DP > TP > TP×PP | yes | %d of %d setups | all | %s |\n", orderOK, orderN, passFail(orderOK == orderN))

	sidpBreakdown(w, lab)

	fmt.Fprintf(w, "\n## Figure 13: WaS only vs WaS+CaS, H20, 4K (S9, soft)\n\n| model | WaS only over best vLLM | WaS+CaS over best vLLM | paper (soft) | CaS never lowers throughput |\n|---|---|---|---|---|\n")
	for _, id := range sidpModels {
		s := setup{sidpNodes[0], id, 4096}
		tp, _ := lab.best(s.node, s.id, s.length, 0, sidpTP)
		dp, _ := lab.best(s.node, s.id, s.length, 0, sidpTPDP)
		pp, _ := lab.best(s.node, s.id, s.length, 0, sidpTPPP)
		best := max(tp, dp, pp)
		was := lab.bestSiDP(s.node, s.id, s.length, 0, sidpDefault, sim.OnlyWaS).throughput / best
		both := gains[s].all
		fmt.Fprintf(w, "| %s | %.2f | %.2f | +7–9%% vs +27–32%% [digest] | %s |\n", shortModel(id), was, both, passFail(both >= was))
	}

	fmt.Fprintf(w, "\n## Figure 15: tail characteristics of the 4K jobs, H20 (S11)\n\n| model | iterations in WaS | CaS share of the job's time | switches |\n|---|---|---|---|\n")
	for _, id := range sidpModels {
		sd := lab.bestSiDP(sidpNodes[0], id, 4096, 0, sidpDefault, sim.AutoMode)
		it := sd.iterations[sim.WaS] + sd.iterations[sim.CaS]
		total := sd.modeSeconds[sim.WaS] + sd.modeSeconds[sim.CaS]
		wasFrac := float64(sd.iterations[sim.WaS]) / float64(max(it, 1))
		fmt.Fprintf(w, "| %s | %.0f%% (%s) | %.0f%% | %d |\n", shortModel(id), 100*wasFrac, passFail(wasFrac > 0.5), 100*sd.modeSeconds[sim.CaS]/max(total, 1e-9), sd.switches)
	}
	fmt.Fprintf(w, "\nThe paper: more than [?]%% of a long job's iterations stay in WaS, and CaS covers the tail of the tail. The result column says whether most iterations are WaS.\n\n")
}

// sidpBreakdown checks the H20 4K throughput rows against their steps:
// the best vLLM deployment's engine steps and SiDP's replica steps by
// mode, with their mean tokens and length.
func sidpBreakdown(w *strings.Builder, lab *sidpLab) {
	h20 := sidpNodes[0]
	fmt.Fprintf(w, "\n### Per-step breakdown of the H20 4K rows\n\n"+
		"A step is one engine's (vLLM) or one replica's (SiDP) iteration with work; ms/step is its mean length (vLLM: makespan × engines / steps, "+
		"SiDP: the steps' replica-seconds / steps), tokens/step its mean prompt and output tokens. Throughput ≈ engines × tokens/step ÷ ms/step while every engine is busy.\n\n")
	fmt.Fprintf(w, "| model | deployment | steps | tokens/step | ms/step | makespan s | tok/s |\n|---|---|---|---|---|---|---|\n")
	var bulk [][3]float64
	for _, id := range sidpModels {
		all := append(append(append([]parallel.Plan{}, sidpTP...), sidpTPDP...), sidpTPPP...)
		v, run := lab.bestRun(h20, id, 4096, 0, all)
		if v.steps > 0 {
			fmt.Fprintf(w, "| %s | best vLLM: %s, %d seqs | %d | %.1f | %.1f | %.0f | %.0f |\n", shortModel(id), run.plan, run.seqs, v.steps,
				float64(v.tokens[0])/float64(v.steps), 1e3*v.makespan*float64(v.engines)/float64(v.steps), v.makespan, v.throughput)
		}
		sd := lab.bestSiDP(h20, id, 4096, 0, sidpDefault, sim.AutoMode)
		bulk = append(bulk, [3]float64{v.makespan / 2, sidpRate(v.perSecond, v.makespan/2), sidpRate(sd.perSecond, v.makespan/2)})
		for _, m := range []sim.SiDPMode{sim.WaS, sim.CaS} {
			if n := sd.iterations[m]; n > 0 {
				fmt.Fprintf(w, "| %s | SiDP DP=8, %v (%.0f s of the job) | %d | %.1f | %.1f | %.0f | %.0f |\n", shortModel(id), m, sd.modeSeconds[m], n,
					float64(sd.tokens[m])/float64(n), 1e3*sd.busy[m]/float64(n), sd.makespan, sd.throughput)
			}
		}
	}
	fmt.Fprintf(w, "\nThe bulk: tokens per second over the first half of the best vLLM deployment's job, when both still run full batches.\n\n"+
		"| model | window s | best vLLM tok/s | SiDP DP=8 tok/s | SiDP / vLLM |\n|---|---|---|---|---|\n")
	for i, id := range sidpModels {
		b := bulk[i]
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.0f | %.2f |\n", shortModel(id), b[0], b[1], b[2], b[2]/b[1])
	}
}

// sidpRate is the mean tokens per second over a job's first window seconds.
func sidpRate(perSecond []float64, window float64) float64 {
	n := min(len(perSecond), int(window))
	if n == 0 {
		return 0
	}
	t := 0.0
	for _, x := range perSecond[:n] {
		t += x
	}
	return t / float64(n)
}

func passFail(ok bool) string {
	if ok {
		return "same as the paper"
	}
	return "**differs from the paper**"
}

// sidpFetch is S6 (Figure 9): a replica's decode iteration against one
// stream of all FFN weights over the GPU's NVLink, and S7 (Figure 10).
func sidpFetch(w *strings.Builder, lab *sidpLab) error {
	id := "Qwen/Qwen3-32B"
	cfg, err := lab.config(id)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "## Figure 9: T(B) against fetching every FFN weight, %s at TP1, 2K context (S6)\n\n", shortModel(id))
	fmt.Fprintf(w, "T(B) is one vLLM decode iteration of a TP1 replica with B sequences; fetch is all %.1f GB of FFN weights at the GPU's one-way NVLink bandwidth times sim.LinkEfficiency (the paper's pessimistic \"Fetch\" lines).\n\n", 0.0+float64(cfg.Layers)*float64(3*cfg.Intermediate*cfg.Hidden*2)/1e9)
	batches := []int{64, 128, 256, 384, 512}
	fmt.Fprintf(w, "| GPU | fetch ms |")
	for _, b := range batches {
		fmt.Fprintf(w, " T(%d) ms |", b)
	}
	fmt.Fprintf(w, " crossing B |\n|---|---|%s---|\n", strings.Repeat("---|", len(batches)))
	var cross []int
	contexts := []int{512, 1024, 2048, 4096}
	byCtx := map[string][]int{}
	for _, node := range sidpNodes {
		c, err := lab.cost(node)
		if err != nil {
			return err
		}
		sc, err := c.NewSiDPCost(cfg, sim.SiDP{Replicas: 8})
		if err != nil {
			return err
		}
		lc, err := c.Layout(cfg, parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 1}))
		if err != nil {
			return err
		}
		fetch := sc.FetchTime() * float64(cfg.Layers)
		step := func(b, ctx int) float64 {
			sh := sim.StepShape{}
			for range b {
				sh.Seqs = append(sh.Seqs, sim.Seq{Context: ctx, New: 1, Logits: 1})
			}
			return lc.Step(&sh).Seconds
		}
		crossing := func(ctx int) int {
			for b := 16; b <= 4096; b += 16 {
				if step(b, ctx) >= fetch {
					return b
				}
			}
			return 0
		}
		fmt.Fprintf(w, "| %s | %.1f |", strings.TrimPrefix(node, "8x"), fetch*1e3)
		for _, b := range batches {
			fmt.Fprintf(w, " %.1f |", step(b, 2048)*1e3)
		}
		x := crossing(2048)
		for _, ctx := range contexts {
			byCtx[node] = append(byCtx[node], crossing(ctx))
		}
		cross = append(cross, x)
		fmt.Fprintf(w, " %d |\n", x)
	}
	ok := cross[0] < cross[1] && cross[1] < cross[2]
	fmt.Fprintf(w, "\n| quantity | paper | simulated | tolerance | result |\n|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| crossing order | H20 < H200 < B200 | %d < %d < %d | order | %s |\n", cross[0], cross[1], cross[2], passFail(ok))
	fmt.Fprintf(w, "| B200 crossing | near 512 | %d | ±20%% | %s |\n\n", cross[2], check(float64(cross[2]), 512, 0.2, true))
	fmt.Fprintf(w, "The crossing batch by context (the paper does not give Figure 9's):\n\n| GPU |")
	for _, ctx := range contexts {
		fmt.Fprintf(w, " %d |", ctx)
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|", len(contexts)))
	for _, node := range sidpNodes {
		fmt.Fprintf(w, "| %s |", strings.TrimPrefix(node, "8x"))
		for _, x := range byCtx[node] {
			fmt.Fprintf(w, " %d |", x)
		}
		fmt.Fprintf(w, "\n")
	}
	fmt.Fprintf(w, "\n**Why the order misses.** B200's fetch line is half H200's (NVLink 5 against 4), so B200 crosses later than H200 only if its decode step is more than "+
		"twice as fast. By the datasheets it is 2.27× faster at compute and 1.67× at HBM, so the order can hold only where the step is compute-bound, at short contexts "+
		"(at 512 tokens the two tie), and there the H200 crosses far beyond the paper's 64–512 sweep, inside which the paper has it cross; from a 1K context on the KV "+
		"reads make the B200 cross first. The two crossings stay within 15%% of each other at every context: a near tie that the paper's measured steps "+
		"(with overheads the datasheets do not show) can break either way.\n\n")

	// Figure 10: peak shifting on and off, WaS only, 4K jobs on H20.
	h20 := sidpNodes[0]
	var runs []sidpRun
	for _, dp := range []int{4, 8} {
		for _, off := range []bool{false, true} {
			runs = append(runs, sidpJob(h20, id, 4096, 0, sim.SiDP{Replicas: dp, TP: 8 / dp, NoPeakShift: off}, sim.OnlyWaS))
		}
	}
	lab.run(runs)
	fmt.Fprintf(w, "## Figure 10: peak shifting, WaS only, %s, 4K job, H20 (S7)\n\n| DP | with tok/s | without tok/s | gain | paper (soft) |\n|---|---|---|---|---|\n", shortModel(id))
	var g []float64
	for i, dp := range []int{4, 8} {
		on, off := lab.get(runs[2*i]).throughput, lab.get(runs[2*i+1]).throughput
		g = append(g, on/off)
		fmt.Fprintf(w, "| %d | %.0f | %.0f | %.2f× | %s [digest] |\n", dp, on, off, on/off, []string{"2.5×", "3.4×"}[i])
	}
	fmt.Fprintf(w, "\n| quantity | paper | simulated | result |\n|---|---|---|---|\n| gain > 1 at DP4, larger at DP8 | yes | %.2f×, %.2f× | %s |\n\n", g[0], g[1], passFail(g[0] > 1 && g[1] > g[0]))
	return nil
}

// sidpModes is S8 (Figure 11): one iteration's time against the batch in
// WaS only, CaS only, vLLM's DP=8 and SiDP's mode by B_th.
func sidpModes(w *strings.Builder, lab *sidpLab) error {
	id, node := "Qwen/Qwen3-32B", sidpNodes[0]
	cfg, c, err := lab.modelOn(id, node)
	if err != nil {
		return err
	}
	sc, err := c.NewSiDPCost(cfg, sidpDefault)
	if err != nil {
		return err
	}
	lc, err := c.Layout(cfg, parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 1}))
	if err != nil {
		return err
	}
	th, err := sc.ProfiledThreshold(sim.DefaultSiDPThresholdContext, 1<<12)
	if err != nil {
		return err
	}
	r17 := sc.Threshold(sim.DefaultSiDPThresholdContext, 1<<14)
	fmt.Fprintf(w, "## Figure 11: iteration time against the per-replica batch, %s, SiDP DP=8 on H20, 2K context (S8)\n\n", shortModel(id))
	fmt.Fprintf(w, "Every replica runs B decodes. WaS is the steady state (the fifth iteration); SiDP runs WaS at B ≥ B_th = %d (profiled) and CaS below. "+
		"R17's B_th, where compute hides the cycle's fetches, is %d: between the two, CaS's owner barriers and one-GPU FFN cost more than WaS's stalls.\n\n", th, r17)
	fmt.Fprintf(w, "| B | vLLM DP=8 ms | WaS ms | CaS ms | SiDP ms | SiDP / min(WaS, CaS) |\n|---|---|---|---|---|---|\n")
	smallOK, largeOK, minOK := true, true, 0
	var cas1, vllm1 float64
	batches := []int{1, 4, 16, 32, 64, 128, 256, 512}
	for _, b := range batches {
		reps := make([][]sim.Seq, 8)
		for i := range reps {
			for range b {
				reps[i] = append(reps[i], sim.Seq{Context: 2048, New: 1, Logits: 1})
			}
		}
		var was, cas sim.SiDPStep
		for range 5 {
			if was, err = sc.Iteration(sim.WaS, reps); err != nil {
				return err
			}
		}
		if cas, err = sc.Iteration(sim.CaS, reps); err != nil {
			return err
		}
		vllm := lc.Step(&sim.StepShape{Seqs: reps[0]}).Seconds
		if b == 1 {
			cas1, vllm1 = cas.Seconds, vllm
		}
		sd := cas.Seconds
		if b >= th {
			sd = was.Seconds
		}
		m := min(was.Seconds, cas.Seconds)
		if sd <= 1.05*m {
			minOK++
		}
		if b <= 4 && cas.Seconds >= was.Seconds {
			smallOK = false
		}
		if b >= 512 && math.Abs(was.Seconds/vllm-1) > 0.05 {
			largeOK = false
		}
		fmt.Fprintf(w, "| %d | %.1f | %.1f | %.1f | %.1f | %.2f |\n", b, vllm*1e3, was.Seconds*1e3, cas.Seconds*1e3, sd*1e3, sd/m)
	}
	fmt.Fprintf(w, "\n| quantity | paper | simulated | result |\n|---|---|---|---|\n")
	fmt.Fprintf(w, "| CaS faster than WaS at small B (1 and 4; the paper's bound is blank) | yes | %v | %s |\n", smallOK, passFail(smallOK))
	fmt.Fprintf(w, "| WaS within ±5%% of vLLM at large B (512) | yes | %v | %s |\n", largeOK, passFail(largeOK))
	fmt.Fprintf(w, "| SiDP within 5%% of min(WaS, CaS) | at every B | %d of %d batches | %s |\n\n", minOK, len(batches), passFail(minOK == len(batches)))
	chunks := float64(7*cfg.Layers) * sim.CaSChunkCost
	fmt.Fprintf(w, "At one row a replica CaS takes %.1f ms against vLLM DP=8's %.1f ms (%.2f×), where the paper speaks of \"small gaps\" at the tiniest batches. "+
		"%.1f ms of it is the owners handling seven chunks in each of %d layers at sim.CaSChunkCost, the constant fitted to Figure 14's V2/V3 step, where the "+
		"seven chunks are dummies'. Read together, the two figures suggest that the paper's owner handles a busy peer's chunk for much less than dummy skipping saved per "+
		"dummy chunk; this model charges both alike, so its CaS is likely overcharged when many replicas are busy, which lengthens the tail (the paper gives no "+
		"number to fit a second constant to).\n\n", cas1*1e3, vllm1*1e3, cas1/vllm1, chunks*1e3, cfg.Layers)
	return nil
}

// sidpLadder is S10 (Figure 14): the tail of one sequence left.
func sidpLadder(w *strings.Builder, lab *sidpLab) error {
	id, node := "meta-llama/Llama-3.1-70B-Instruct", sidpNodes[0]
	cfg, c, err := lab.modelOn(id, node)
	if err != nil {
		return err
	}
	reps := make([][]sim.Seq, 8)
	reps[0] = []sim.Seq{{Context: 4096, New: 1, Logits: 1}}
	iter := func(s sim.SiDP, mode sim.SiDPMode) (float64, error) {
		sc, err := c.NewSiDPCost(cfg, s)
		if err != nil {
			return 0, err
		}
		st, err := sc.Iteration(mode, reps)
		return st.Seconds, err
	}
	var t [4]float64
	for i, v := range []struct {
		s    sim.SiDP
		mode sim.SiDPMode
	}{{sidpDefault, sim.FSDP}, {sim.SiDP{Replicas: 8, NoFusion: true, NoDummySkip: true}, sim.CaS}, {sim.SiDP{Replicas: 8, NoDummySkip: true}, sim.CaS}, {sidpDefault, sim.CaS}} {
		if t[i], err = iter(v.s, v.mode); err != nil {
			return err
		}
	}
	// vLLM's best deployment of this model for one sequence: TP=8.
	lc, err := c.Layout(cfg, parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 8}))
	if err != nil {
		return err
	}
	vllm := lc.Step(&sim.StepShape{Seqs: reps[0]}).Seconds
	fmt.Fprintf(w, "## Figure 14: the CaS ladder on the tail, %s, SiDP DP=8 on H20 (S10)\n\n", shortModel(id))
	fmt.Fprintf(w, "One sequence left (batch 1, the digest's setup) at a 4K context on replica 0, seven dummy replicas; one iteration each. Tail times are iterations × these, so their ratios are the tail times' ratios. vLLM: the same sequence at TP=8, %.1f ms.\n\n", vllm*1e3)
	fmt.Fprintf(w, "| variant | iteration ms | paper tail s |\n|---|---|---|\n")
	names := []string{"FSDP (all-gather every FFN layer)", "CaS V1: P2P, one GEMM per chunk, dummies take part", "CaS V2: + fused owner GEMM", "CaS V3: + dummy skipping"}
	paper := []float64{33, 25, 19, 12}
	for i := range t {
		fmt.Fprintf(w, "| %s | %.1f | %.0f |\n", names[i], t[i]*1e3, paper[i])
	}
	fmt.Fprintf(w, "\n| ratio | paper | simulated | tolerance | result |\n|---|---|---|---|---|\n")
	for i := 0; i < 3; i++ {
		r, p := t[i]/t[i+1], paper[i]/paper[i+1]
		res := check(r, p, 0.2, true)
		if i == 2 {
			res = "*fitted* (sim.CaSChunkCost): checks nothing"
		}
		fmt.Fprintf(w, "| %s / %s | %.2f | %.2f | ±20%% | %s |\n", strings.SplitN(names[i], ":", 2)[0], strings.SplitN(names[i+1], ":", 2)[0], p, r, res)
	}
	r := t[0] / t[3]
	fmt.Fprintf(w, "| FSDP / V3 (total) | 2.75 | %.2f | ±20%% | %s (contains the fitted step) |\n", r, check(r, 2.75, 0.2, true))
	fmt.Fprintf(w, "| FSDP slower than vLLM | yes | %.1f× | — | %s |\n\n", t[0]/vllm, passFail(t[0] > vllm))
	sc, err := c.NewSiDPCost(cfg, sidpDefault)
	if err != nil {
		return err
	}
	layer := float64(c.FFNLayerBytes(cfg, 1, 0))
	L := float64(cfg.Layers)
	g := sc.FFNTime(1)                                               // the model's one-row FFN GEMMs of a layer
	gMem := layer / (c.Node.GPU.HBMBytesPerS * sim.MemoryEfficiency) // their weights streamed at the copy rate, the floor
	v2 := 7 * gMem / (1.2*1.32 - 1)                                  // V1/V2 at the tolerance's top needs V2 per layer ≥ this
	fsdp := 0.8 * 1.32 * (v2 + 7*gMem)                               // and FSDP/V1 at its bottom an FSDP layer ≥ this
	ag := fsdp - gMem
	fmt.Fprintf(w, "**Why the ladder misses.** V1 differs from V2 only by the owner's seven extra one-row FFN GEMMs per layer (the dummies' chunks), "+
		"each streaming the layer's %.2f GB of weights: %.2f ms in this model, %.2f ms at the HBM floor. "+
		"Even at the floor, V1/V2 ≤ 1.58 (1.32 + 20%%) needs a V2 layer of at least %.1f ms (this model's: %.2f ms, %.0f ms an iteration against %.0f ms), "+
		"and FSDP/V1 ≥ 1.06 then needs an FSDP layer of at least %.1f ms: an all-gather of %.2f GB per GPU at %.0f GB/s or less, where NCCL reaches about %.0f GB/s "+
		"(%.1f ms). So the paper's variants all carry several milliseconds a layer that bytes and FLOPs do not account for (framework and "+
		"synchronisation costs of its Python plugin, or a tail of more rows than the digest's one sequence); the model has only CaSChunkCost, fitted to V2/V3.\n\n",
		layer/1e9, g*1e3, gMem*1e3, v2*1e3, t[2]/L*1e3, v2*L*1e3, t[2]*1e3, fsdp*1e3, 0.875*layer/1e9, 0.875*layer/ag/1e9,
		c.Node.Link.BytesPerS*c.Node.Link.Efficiency/1e9, 0.875*layer/(c.Node.Link.BytesPerS*c.Node.Link.Efficiency)*1e3)
	return nil
}

// sidpTightMemory is S12 (Figure 12): utilization 0.6, 70B/72B models.
func sidpTightMemory(w *strings.Builder, lab *sidpLab) {
	h20 := sidpNodes[0]
	const u = 0.6
	var runs []sidpRun
	for _, id := range sidpModels[1:] {
		for _, n := range sidpLens {
			runs = append(runs, vllmRuns(h20, id, n, u, sidpTPDP)...)
			for _, s := range sidpSweep {
				runs = append(runs, sidpJobs(h20, id, n, u, s, sim.AutoMode)...)
			}
		}
	}
	lab.run(runs)
	fmt.Fprintf(w, "## Figure 12: short context under a tight memory budget, H20 at utilization %.1f (S12, soft)\n\n", u)
	fmt.Fprintf(w, "As the paper does here (§5.3), both vLLM's TP×DP and SiDP are swept over (TP, DP) and the best of each is kept.\n\n")
	fmt.Fprintf(w, "| model | S | best TP×DP tok/s | best SiDP tok/s | gain | paper (soft) |\n|---|---|---|---|---|---|\n")
	wins, n := 0, 0
	for _, id := range sidpModels[1:] {
		for _, length := range sidpLens {
			dp, dpName := lab.best(h20, id, length, u, sidpTPDP)
			sd, sdName := 0.0, "—"
			for _, s := range sidpSweep {
				if r := lab.bestSiDP(h20, id, length, u, s, sim.AutoMode); r.err == nil && r.throughput > sd {
					sd, sdName = r.throughput, fmt.Sprintf("dp=%d,tp=%d", s.Replicas, s.TP)
				}
			}
			g := sd / dp
			n++
			if g > 1 {
				wins++
			}
			fmt.Fprintf(w, "| %s | %dK | %.0f (%s) | %.0f (%s) | %.2f | +24–51%% [digest] |\n", shortModel(id), length/1024, dp, dpName, sd, sdName, g)
		}
	}
	fmt.Fprintf(w, "\n| quantity | paper | simulated | result |\n|---|---|---|---|\n| SiDP beats the best TP×DP at every S | yes | %d of %d | %s |\n", wins, n, passFail(wins == n))
}
