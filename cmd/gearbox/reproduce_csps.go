package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/sim"
)

// The CSPS reproduction's setup (papers/002 §5.2, spec csps.md §3–§4).
const (
	cspsCluster64 = "8xp4d.24xlarge" // 64 A100-40GB, 8 per server, 400 Gbps per server
	cspsRequests  = 200              // requests per run, Poisson at cspsRate
	cspsRate      = 1.0              // requests per second, the paper's default
	cspsChunk     = 256              // Sarathi-Serve's chunk (§3.1)
	// cspsDrop is CSA's level-2 drop ratio at C_Ad = 0: with three levels
	// (0, p, 1 − (1 − p)/2) it drops 22% of (token, level) pairs, the
	// paper's figure (§1, §5.3): (p + (1 + p)/2)/3 = 0.22.
	cspsDrop   = 0.32 / 3
	cspsLevels = 3
)

// cspsSarathiPlan is the baseline's replica: TP=4 × PP=2, eight of them.
var cspsSarathiPlan = parallel.Plan{DP: 8, TP: 4, PP: 2, SP: 1}

// cspsCell is one (dataset, model) cell of Table 4.
type cspsCell struct {
	dataset, model string
	in, out        sim.LengthDist
	// Table 4 (tok/s) and Figs. 14–16 (Sarathi ÷ CSPS ranges, per dataset).
	sarPre, sarDec, csPre, csDec float64
	ttft, tbt, resp              [2]float64
}

var cspsCells = []cspsCell{
	{"NeedleBench", "THUDM/glm-4-9b-chat-1m", sim.NeedleBenchInput, sim.NeedleBenchOutput, 226, 5.2, 1580, 29, [2]float64{6.8, 7.5}, [2]float64{1.8, 1.92}, [2]float64{9.2, 9.8}},
	{"NeedleBench", "internlm/internlm2_5-7b-chat-1m", sim.NeedleBenchInput, sim.NeedleBenchOutput, 238, 8.2, 1595, 35, [2]float64{6.8, 7.5}, [2]float64{1.8, 1.92}, [2]float64{9.2, 9.8}},
	{"BookCorpus", "THUDM/glm-4-9b-chat-1m", sim.BookCorpusInput, sim.BookCorpusOutput, 284, 9.3, 1615, 44, [2]float64{6.1, 7.2}, [2]float64{1.6, 1.75}, [2]float64{8.3, 9.5}},
	{"BookCorpus", "internlm/internlm2_5-7b-chat-1m", sim.BookCorpusInput, sim.BookCorpusOutput, 293, 9.6, 1656, 48, [2]float64{6.1, 7.2}, [2]float64{1.6, 1.75}, [2]float64{8.3, 9.5}},
}

// cspsModelSetup is one model on the cluster: BF16 weights and KV.
func cspsModelSetup(id string) (*simSetup, sim.Cluster, error) {
	cl, err := sim.ParseCluster(cspsCluster64)
	if err != nil {
		return nil, cl, err
	}
	cfg, err := sim.LookupModel(id)
	if err != nil {
		return nil, cl, err
	}
	prec, err := sim.VLLMPrecision(cfg, "auto", "", "auto")
	if err != nil {
		return nil, cl, err
	}
	cost, err := sim.NewCostModel(cl.Node, prec)
	if err != nil {
		return nil, cl, err
	}
	return &simSetup{cfg: cfg, node: cl.Node, cost: cost, sched: sched.Config{MaxNumBatchedTokens: cspsChunk, MaxNumSeqs: 256}}, cl, nil
}

// cspsMeasures are one run's per-request averages.
type cspsMeasures struct {
	ttft, tbt, resp float64 // seconds
	pre, dec        float64 // tok/s per request: L_in/TTFT and (L_out − 1)/(last − first)
	clusterPre      float64 // Σ L_in ÷ (last first token − first arrival)
	n               int
}

func measures(rs []bench.RequestResult) cspsMeasures {
	var m cspsMeasures
	var first, lastFirst time.Duration
	var in float64
	for i, r := range rs {
		if !r.OK() {
			continue
		}
		m.n++
		m.ttft += r.TTFT.Seconds()
		m.resp += r.Latency.Seconds()
		m.pre += float64(r.InputTokens) / r.TTFT.Seconds()
		if r.OutputTokens > 1 {
			d := (r.Latency - r.TTFT).Seconds()
			m.tbt += d / float64(r.OutputTokens-1)
			m.dec += float64(r.OutputTokens-1) / d
		}
		if i == 0 || r.Start < first {
			first = r.Start
		}
		lastFirst = max(lastFirst, r.Start+r.TTFT)
		in += float64(r.InputTokens)
	}
	if m.n > 0 {
		f := float64(m.n)
		m.ttft, m.tbt, m.resp, m.pre, m.dec = m.ttft/f, m.tbt/f, m.resp/f, m.pre/f, m.dec/f
		m.clusterPre = in / (lastFirst - first).Seconds()
	}
	return m
}

// decodePerGPU is a deployment's decode throughput per GPU while it
// decodes: the decode tokens its steps produced over the GPU-seconds of
// those steps, for instances of instanceGPUs GPUs each. The simulator
// stamps every token of a step with the step's end, so the decode tokens
// sharing a stamp are one step's batch, and each one's gap to its
// request's previous token is that step's duration (continuous batching
// runs a decoding request in every step of its replica): the steps'
// seconds are Σ gap / batch over the tokens.
func decodePerGPU(rs []bench.RequestResult, instanceGPUs int) float64 {
	batch := map[time.Duration]int{}
	for _, r := range rs {
		t := r.Start + r.TTFT
		for _, g := range r.ITL {
			t += g
			batch[t]++
		}
	}
	var tokens, secs float64
	for _, r := range rs {
		t := r.Start + r.TTFT
		for _, g := range r.ITL {
			t += g
			tokens++
			secs += g.Seconds() / float64(batch[t])
		}
	}
	if secs == 0 {
		return 0
	}
	return tokens / (secs * float64(instanceGPUs))
}

// cspsCellRun is one cell's two deployments on the same requests.
type cspsCellRun struct {
	cell    cspsCell
	reqs    []bench.Request
	sarathi *bench.Report
	csps    *sim.CSPSRunResult
	sar, cs cspsMeasures
	// Decode throughput per GPU while decoding (Table 4's decode row):
	// Sarathi-Serve's replicas of 8 GPUs, CSPS's decode pool.
	sarDecGPU, csDecGPU float64
	rhoCSPS             float64 // the CSPS prefill pool's utilization
	// attnDemand is the workload's dense causal attention FLOPs per second
	// of arrivals over the whole cluster's dense BF16 peak.
	attnDemand   float64
	dropFraction float64 // CSA's realized (token, level) drop fraction, token-weighted
	arch         map[sim.CSPSArch]int
}

func runCSPSCell(c cspsCell, seed uint64) (*cspsCellRun, error) {
	s, cl, err := cspsModelSetup(c.model)
	if err != nil {
		return nil, err
	}
	reqs := sim.CSPSWorkload(c.in, c.out, cspsRequests, cspsRate, seed)
	sar, err := sim.Run(sim.RunOptions{Model: s.cfg, Cost: s.cost, Plan: cspsSarathiPlan, Sched: s.sched, MicroBatches: 1,
		Requests: slices.Clone(reqs), Report: bench.ReportOptions{Percentiles: simPercentiles}})
	if err != nil {
		return nil, err
	}
	cs, err := sim.RunCSPS(sim.CSPSRunOptions{Model: s.cfg, Cost: s.cost, Cluster: cl,
		Prefill: sim.CSPSOptions{Levels: cspsLevels, Drop: cspsDrop}, Requests: reqs, Report: bench.ReportOptions{Percentiles: simPercentiles}})
	if err != nil {
		return nil, err
	}
	out := &cspsCellRun{cell: c, reqs: reqs, sarathi: sar.Report, csps: cs, sar: measures(sar.Report.Requests), cs: measures(cs.Report.Requests),
		sarDecGPU: decodePerGPU(sar.Report.Requests, cspsSarathiPlan.TP*cspsSarathiPlan.PP),
		csDecGPU:  float64(cs.DecodeTokens) / cs.DecodeGPUBusy, arch: map[sim.CSPSArch]int{}}
	var tok, dropped, flops float64
	lastArrival := reqs[len(reqs)-1].Arrival.Seconds()
	for _, q := range cs.Requests {
		out.arch[q.Arch]++
		tok += float64(q.Input)
		dropped += float64(q.Input) * sim.DropFraction(q.Prefill.Levels)
		l := float64(q.Input)
		flops += 4 * float64(s.cfg.HeadDim*s.cfg.Heads*s.cfg.Layers) * l * l / 2
	}
	out.dropFraction = dropped / tok
	out.rhoCSPS = cs.PrefillBusy / (float64(cs.PrefillGPUs) * lastArrival)
	out.attnDemand = flops / lastArrival / (float64(cl.GPUs()) * s.node.GPU.BF16FLOPS)
	return out, nil
}

// within reports whether v is inside [lo, hi] widened by tol relative.
func within(v, lo, hi, tol float64) string {
	if v >= lo*(1-tol) && v <= hi*(1+tol) {
		return "within"
	}
	return "**outside**"
}

func reproduceCSPS(w *strings.Builder) error {
	start := time.Now()
	fmt.Fprintf(w, "# CSPS (paper 002) reproduced in the simulator\n\n")
	fmt.Fprintf(w, "Generated by `gearbox reproduce csps`. Cluster %s: 8 AWS p4d.24xlarge, 64 A100-40GB SXM, NVSwitch inside a server "+
		"(300 GB/s one way per GPU), 400 Gbps EFA per server shared by its GPUs between servers, one rack. BF16 weights and KV. "+
		"One cost model with global constants (docs/simulator.md); **no constant is fitted to this paper**: every number below is a prediction. "+
		"The constants this reproduction adds are sourced or stated choices: sim.P4dNetworkBytesPerS (AWS), sim.NetHopLatency (AWS EFA, "+
		"not measured here), sim.CSPSSPTMaxNTP/TP (the paper's 64K/128K), sim.CSPSMicro (M = 8, App B's range), sim.CSPSDecodeGPUs "+
		"(16, a choice), sim.CSPSActivationReserve (1 GiB, a choice), and CSA's p = %.4f, derived from the paper's 22%% drops over three levels.\n\n", cspsCluster64, cspsDrop)
	fmt.Fprintf(w, "**Baseline (Sarathi-Serve-like)**: 8 replicas of TP=4 × PP=2 (one per server), %d-token chunks mixed with decodes, "+
		"a least-outstanding-tokens dispatcher, KV capacity from the memory model, and one micro-batch per step through the two stages "+
		"(a sequence's next chunk waits for its previous one: the PP bubble of a lone long prefill). "+
		"**CSPS**: a 48-GPU prefill pool where each request, in arrival order, takes N = ⌈L_in/64K⌉ GPUs (R12), placed on the servers "+
		"with the most free GPUs and sorted by GPU ID (R15), with App A's architecture (SP-TP only at N = 2) and CSA at N_v ≤ %d, p = %.4f, each request taking the fastest N_v "+
		"(N_v = 1, no CSA, meets any accuracy constraint, so Eq. 8 never picks a slower layout: sim.CSPSConfigure); "+
		"its KV then moves over the network to a 16-GPU decode pool (SP decode: ⌈L_in/64K⌉ KV shards, each on a GPU of its own while the pool has free ones; "+
		"Q broadcast and (O, LSE) gather per layer, hierarchical across servers). "+
		"Workload: %d requests, Poisson at %.0f req/s, lengths from Table 2 (log-normal fitted to median and P99, prompts clamped to [1K, 1M − 4K]).\n\n",
		cspsChunk, cspsLevels, cspsDrop, cspsRequests, cspsRate)
	fmt.Fprintf(w, "**Throughput (S10)**: the paper does not define it. Prefill throughput here is each request's L_in ÷ TTFT averaged over "+
		"requests (Fig. 3's 1K group: 487 tok/s at a 1.6 s TTFT), with the cluster's prompt tokens ÷ the span of the prefills beside it. "+
		"Decode throughput is not per request: the paper ties it to batch size (§3.1 O1, \"low throughput due to small batch size\"; §4.1, "+
		"\"a larger decode batch for a higher compute throughput\"), and Fig. 3's 204 tok/s at a 0.54 s TBT is a batch of ~110, not one "+
		"request's 1.9 tok/s (spec S10). So it is the decode tokens a deployment's steps produce over the GPU-seconds of those steps: per GPU "+
		"while decoding, Sarathi-Serve's 8-GPU replicas (steps read off the token stamps) and CSPS's %d-GPU decode pool on one scale. "+
		"A Sarathi-Serve step that also carries a prefill chunk counts whole: its decodes wait for the chunk (O1). "+
		"A per-request decode rate would be the harmonic counterpart of TBT, and Table 4's decode ratios (4.3–5.6) could then not "+
		"coexist with Fig. 15's TBT ratios (1.6–1.9).\n\n", sim.CSPSDecodeGPUs)

	runs := make([]*cspsCellRun, len(cspsCells))
	for i, c := range cspsCells {
		r, err := runCSPSCell(c, uint64(17+i/2))
		if err != nil {
			return fmt.Errorf("%s %s: %w", c.dataset, c.model, err)
		}
		runs[i] = r
	}
	cspsUtilization(w, runs)
	cspsTable4(w, runs)
	cspsFig14to16(w, runs)
	if err := cspsBreakdown(w, runs[0]); err != nil {
		return err
	}
	if err := cspsLengthGroups(w, runs[0]); err != nil {
		return err
	}
	if err := cspsFig5(w); err != nil {
		return err
	}
	if err := cspsCSA(w); err != nil {
		return err
	}
	if err := cspsTable3(w); err != nil {
		return err
	}
	if err := cspsFig17(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "## Not reproduced\n\n"+
		"- Oracle and the learned configurators (T11, T17): the runs keep one drop ratio and M = 8 and search only N_v "+
		"(sim.CSPSConfigure: the fastest of N_v = 1 … 3); with no accuracy model there is no F_Ad to trade against.\n"+
		"- CSPS-NTP ÷ CSPS-TP ratios: with App A's rule SP-TP serves only prompts of 64K–128K (N = 2), so the split is by length, as G14 warns.\n"+
		"- Accuracy: the simulator has no accuracy model (F_Ad).\n"+
		"- The Fig. 10/11 variant (decodes mixed into SPT prefills) is not modelled; decode runs in its own pool.\n\n")
	fmt.Fprintf(w, "_Simulated in %.1f s._\n", time.Since(start).Seconds())
	return nil
}

// cspsUtilization is spec S3's check, before any ratio is read.
func cspsUtilization(w *strings.Builder, runs []*cspsCellRun) {
	fmt.Fprintf(w, "## Workload and utilization (spec S3)\n\n")
	fmt.Fprintf(w, "| dataset | model | sampled input median / P99 / std | Table 2 | output median / P99 / std | Table 2 | dense attention FLOP/s ÷ the 64 GPUs' peak | CSPS prefill-pool utilization | requests by architecture (none / SP-NTP / SP-TP) | realized CSA drop fraction |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		var in, out []int
		for _, q := range r.reqs {
			in, out = append(in, q.InputTokens), append(out, q.OutputTokens)
		}
		im, ip, is := sim.LengthStats(in)
		om, op, os := sim.LengthStats(out)
		fmt.Fprintf(w, "| %s | %s | %.0fK / %.0fK / %.0fK | %.0fK / %.0fK / %.0fK | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f | %.2f | %.2f | %d / %d / %d | %.1f%% |\n",
			r.cell.dataset, short(r.cell.model), im/1e3, ip/1e3, is/1e3, r.cell.in.Median/1e3, r.cell.in.P99/1e3, r.cell.in.Std/1e3,
			om, op, os, r.cell.out.Median, r.cell.out.P99, r.cell.out.Std, r.attnDemand, r.rhoCSPS,
			r.arch[sim.ArchNone], r.arch[sim.ArchNTP], r.arch[sim.ArchTP], 100*r.dropFraction)
	}
	fmt.Fprintf(w, "\nUtilization is the prefill pool's busy GPU-seconds over its 48 GPUs × the arrival span. Above 1 the queue grows "+
		"for the whole run and every TTFT average depends on the run's length (%d requests here): at 1 req/s with ~100K-token median "+
		"prompts the paper's \"unlikely to increase the queueing delay\" does not hold under this roofline. The demand column needs no "+
		"model: the prompts' causal attention FLOPs (4·d_h·N_h·N_l·L²/2 each, dense) arriving per second, over the dense BF16 peak of all "+
		"64 A100s. Where it exceeds FlashAttention-2's 50–73%% of peak no dense-attention system can keep up, whatever its parallelism, "+
		"and CSA's 22%% operating point removes about a third of the pairs on the longest prompts only. A log-normal through "+
		"Table 2's median and P99 has a much smaller std than Table 2's (which implies a heavy mass near 1M, so even more demand). "+
		"The realized drop fraction is token-weighted over the requests, those run without CSA counting 0: the paper's 22%% is "+
		"its configurator's outcome, from which the fixed p is derived for three levels.\n\n", cspsRequests)
}

func short(id string) string {
	if i := strings.IndexByte(id, '/'); i >= 0 {
		return id[i+1:]
	}
	return id
}

// cspsTable4 is T13 (and the absolutes of Table 4, T15's throughput part).
func cspsTable4(w *strings.Builder, runs []*cspsCellRun) {
	fmt.Fprintf(w, "## Table 4: throughput, CSPS ÷ Sarathi-Serve (T13, ±20%% per cell)\n\n")
	fmt.Fprintf(w, "| dataset | model | Sarathi prefill / decode tok/s (paper) | simulated | CSPS prefill / decode (paper) | simulated | cluster prefill tok/s Sarathi / CSPS | prefill ratio paper | simulated | result | decode ratio paper | simulated | result |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		c := r.cell
		pp, pd := c.csPre/c.sarPre, c.csDec/c.sarDec
		sp, sd := r.cs.pre/r.sar.pre, r.csDecGPU/r.sarDecGPU
		fmt.Fprintf(w, "| %s | %s | %.0f / %.1f | %.0f / %.1f | %.0f / %.0f | %.0f / %.1f | %.0f / %.0f | %.2f | %.2f | %s | %.2f | %.2f | %s |\n",
			c.dataset, short(c.model), c.sarPre, c.sarDec, r.sar.pre, r.sarDecGPU, c.csPre, c.csDec, r.cs.pre, r.csDecGPU,
			r.sar.clusterPre, r.cs.clusterPre, pp, sp, within(sp, pp, pp, 0.2), pd, sd, within(sd, pd, pd, 0.2))
	}
	fmt.Fprintf(w, "\nWhy the decode ratios miss: per GPU, decode throughput is the batch per GPU over the step time.\n\n")
	fmt.Fprintf(w, "| dataset | model | Sarathi batch per 8-GPU replica | step ms | CSPS batch in the %d-GPU pool | GPUs it occupies | step ms | batch per GPU CSPS ÷ Sarathi | step Sarathi ÷ CSPS | CSPS batch the paper's ratio needs at these GPUs and step |\n|---|---|---|---|---|---|---|---|---|---|\n", sim.CSPSDecodeGPUs)
	for _, r := range runs {
		steps, tokens := decodeSteps(r.sarathi.Requests)
		sb := float64(tokens) / float64(max(steps, 1))
		sstep := float64(tokens) / (r.sarDecGPU * 8) / float64(max(steps, 1))
		cb := float64(r.csps.DecodeTokens) / float64(max(r.csps.DecodeSteps, 1))
		cstep := r.csps.DecodeBusy / float64(max(r.csps.DecodeSteps, 1))
		g := r.csps.DecodeGPUBusy / r.csps.DecodeBusy // GPUs the pool's steps occupy, on average
		need := r.cell.csDec / r.cell.sarDec * (sb / 8) * cstep / sstep * g
		fmt.Fprintf(w, "| %s | %s | %.2f | %.1f | %.2f | %.1f | %.1f | %.2f | %.2f | %.1f (%.2f per GPU) |\n", r.cell.dataset, short(r.cell.model),
			sb, 1e3*sstep, cb, g, 1e3*cstep, (cb/g)/(sb/8), sstep/cstep, need, need/g)
	}
	fmt.Fprintf(w, "\nA CSPS decode step costs about what a Sarathi-Serve step does (full weights per GPU against an eighth per GPU and "+
		"stage, and little attention on either side), so the ratio is the batch per GPU. A CSPS request's KV shards each take a "+
		"GPU of their own while the pool has free ones (the placement with the shortest step), so the pool runs one shard per "+
		"occupied GPU; its batch is set by the flow out of the prefill pool (over capacity on NeedleBench), not by its KV room. Table 4's "+
		"ratios need the last column's batch on the same GPUs and step. Packing short requests beside the long ones' shards on "+
		"fewer GPUs, as Fig. 12 draws it, would raise the batch per GPU at the price of longer steps (more KV per GPU); the paper "+
		"gives no placement rule, and this report keeps the one with the shortest step rather than pick a placement to meet the "+
		"ratio. The prefill ratio is the mean L_in ÷ TTFT, so it follows the TTFT ratios below: queueing decides it (see the "+
		"breakdown).\n\n")
}

// cspsFig14to16 is T12.
func cspsFig14to16(w *strings.Builder, runs []*cspsCellRun) {
	fmt.Fprintf(w, "## Figs. 14–16: Sarathi-Serve ÷ CSPS, per-request averages (T12, ±20%% of the paper's range)\n\n")
	fmt.Fprintf(w, "| dataset | model | avg TTFT s Sarathi / CSPS | ratio | paper | result | avg TBT ms Sarathi / CSPS | ratio | paper | result | avg response s Sarathi / CSPS | ratio | paper | result |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		c := r.cell
		t, b, e := r.sar.ttft/r.cs.ttft, r.sar.tbt/r.cs.tbt, r.sar.resp/r.cs.resp
		fmt.Fprintf(w, "| %s | %s | %.1f / %.1f | %.2f | %.1f–%.1f | %s | %.1f / %.1f | %.2f | %.2f–%.2f | %s | %.1f / %.1f | %.2f | %.1f–%.1f | %s |\n",
			c.dataset, short(c.model), r.sar.ttft, r.cs.ttft, t, c.ttft[0], c.ttft[1], within(t, c.ttft[0], c.ttft[1], 0.2),
			1e3*r.sar.tbt, 1e3*r.cs.tbt, b, c.tbt[0], c.tbt[1], within(b, c.tbt[0], c.tbt[1], 0.2),
			r.sar.resp, r.cs.resp, e, c.resp[0], c.resp[1], within(e, c.resp[0], c.resp[1], 0.2))
	}
	fmt.Fprintf(w, "\nWhy the ratios fall short, in this model (the per-phase breakdown below has the numbers): (1) CSPS gives a request "+
		"only N = ⌈L_in/64K⌉ GPUs, so a median (~100K-token) prompt prefills on 2 GPUs, slower alone than on a Sarathi replica's 4 GPUs "+
		"per stage; CSPS wins alone only on the long prompts, and everywhere on GPU-seconds per request (a replica holds 8 GPUs for a "+
		"prefill, half of them idle in the pipeline bubble), which is what shortens its queue. (2) On NeedleBench both systems are over "+
		"capacity at 1 req/s (utilization above), so the averages are queueing-dominated and grow with the run's length. (3) TBT: a CSPS "+
		"decode GPU streams the full weights every step (SP decode keeps whole models), a TP4×PP2 replica an eighth of them per GPU "+
		"and stage, twice in a row; Sarathi-Serve's decodes share their steps with the next prompt's first chunks (FIFO replicas "+
		"start it as the last one's decode starts), whose attention is cheap at small context. So the two TBTs come out about "+
		"equal, where the paper measures Sarathi-Serve's at 0.5–9.6 s, two orders of magnitude above a roofline for 256-token "+
		"chunks, and 1.6–1.9× CSPS's.\n\n")
}

// cspsLengthGroups is T15's absolutes: the baseline's smallest and largest
// input-length groups of the NeedleBench GLM-4 run against Figs. 2–3.
func cspsLengthGroups(w *strings.Builder, r *cspsCellRun) error {
	fmt.Fprintf(w, "## Figs. 2–3: Sarathi-Serve by input length, absolutes (T15, ±30%%)\n\n")
	fmt.Fprintf(w, "Groups of the NeedleBench / GLM-4 run: the paper's 1K group is taken as prompts under 16K, its 1M group as prompts of 768K or more.\n\n")
	type grp struct {
		name   string
		lo, hi int
		paper  [4]float64 // TTFT s, TBT s, prefill tok/s, decode tok/s
	}
	groups := []grp{{"short (< 16K)", 0, 16 << 10, [4]float64{1.6, 0.54, 487, 204}}, {"long (≥ 768K)", 768 << 10, math.MaxInt, [4]float64{213, 9.6, 191, 5}}}
	fmt.Fprintf(w, "| group | requests | TTFT s (paper) | simulated | result | TBT s (paper) | simulated | result | prefill tok/s (paper) | simulated | result | decode tok/s (paper) | simulated | result |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, g := range groups {
		var sel []bench.RequestResult
		for _, q := range r.sarathi.Requests {
			if q.InputTokens >= g.lo && q.InputTokens < g.hi {
				sel = append(sel, q)
			}
		}
		m := measures(sel)
		if m.n == 0 {
			fmt.Fprintf(w, "| %s | 0 | | | | | | | | | | | | |\n", g.name)
			continue
		}
		v := [4]float64{m.ttft, m.tbt, m.pre, m.dec}
		fmt.Fprintf(w, "| %s | %d ", g.name, m.n)
		for i := range v {
			fmt.Fprintf(w, "| %.3g | %.3g | %s ", g.paper[i], v[i], within(v[i], g.paper[i], g.paper[i], 0.3))
		}
		fmt.Fprintf(w, "|\n")
	}
	fmt.Fprintf(w, "\nS4 asks for Figs. 2–3's trends before any ratio is trusted. From short to long: TTFT rises in both (here "+
		"through queueing as much as length), TBT rises in both, decode throughput falls in both; prefill throughput falls in the "+
		"paper (487 → 191) but rises here, since L_in/TTFT grows with L_in whenever queueing dominates TTFT: no per-request "+
		"definition gives the paper's direction together with its TTFTs (1K/1.6 s < 1M/213 s). "+
		"Why the absolutes miss: a short prompt takes well under a second alone (the breakdown's 1K and 128K rows) but waits here "+
		"behind the long prefills its replica serves first, in a run whose demand is near the cluster's peak (the utilization table); "+
		"the paper's 1.6 s says its replicas had no such queue. The 1M group's TTFT is the prefill's roofline on 4 GPUs at a time, "+
		"above the paper's 213 s (see the breakdown), and its TBTs are the decode floor with cheap early chunks beside it, where the "+
		"paper's are 0.5–9.6 s. Decode tok/s here is per request, (L_out − 1) ÷ decode time; Fig. 3's 204 tok/s at a 0.54 s TBT "+
		"is a batch of ~110, which no per-request rate reaches. "+
		"The mixed-SP variant's absolutes (Figs. 10/11) are not reproduced (not modelled).\n\n")
	return nil
}

// cspsFig5 is T14: the shares of communication and attention compute in
// one layer, dense (N_v = 1), SP-NTP at SPT 64K and SP-TP at SPT 128K.
func cspsFig5(w *strings.Builder) error {
	s, cl, err := cspsModelSetup("THUDM/glm-4-9b-chat-1m")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "## Fig. 5: shares of communication and attention compute (T14, ±10 points)\n\n")
	fmt.Fprintf(w, "GLM-4, dense attention (N_v = 1), one layer: SP-NTP with 64K SPTs (N = L/64K) and SP-TP with 128K SPTs (N = L/128K, one server), "+
		"L from 256K to 1M. Shares are busy time of the busiest link, and of the attention kernels, over the pipelined layer time.\n\n")
	fmt.Fprintf(w, "| L_in | SP-NTP N | comm %% | attention %% | SP-TP N | comm %% | attention %% |\n|---|---|---|---|---|---|---|\n")
	lo := [4]float64{101, 101, 101, 101}
	hi := [4]float64{-1, -1, -1, -1}
	var first sim.CSPSPrefill
	for _, L := range []int{256 << 10, 512 << 10, 768 << 10, 1 << 20} {
		ntp, err := s.cost.CSPSPrefillCost(s.cfg, cl, L, sim.CSPSOptions{Levels: 1, Arch: sim.ArchNTP, N: L / sim.CSPSSPTMaxNTP})
		if err != nil {
			return err
		}
		if first.N == 0 {
			first = ntp
		}
		tp, err := s.cost.CSPSPrefillCost(s.cfg, cl, L, sim.CSPSOptions{Levels: 1, Arch: sim.ArchTP, N: L / sim.CSPSSPTMaxTP})
		if err != nil {
			return err
		}
		nc, na := ntp.Shares()
		tc, ta := tp.Shares()
		for i, v := range []float64{nc, na, tc, ta} {
			lo[i], hi[i] = min(lo[i], 100*v), max(hi[i], 100*v)
		}
		fmt.Fprintf(w, "| %dK | %d | %.0f | %.0f | %d | %.0f | %.0f |\n", L>>10, ntp.N, 100*nc, 100*na, tp.N, 100*tc, 100*ta)
	}
	paper := [4][2]float64{{13, 34}, {18, 43}, {39, 62}, {11, 29}}
	names := []string{"SP-NTP communication", "SP-NTP attention", "SP-TP communication", "SP-TP attention"}
	fmt.Fprintf(w, "\n| share | paper | simulated | result |\n|---|---|---|---|\n")
	for i := range names {
		ok := math.Abs(lo[i]-paper[i][0]) <= 10 && math.Abs(hi[i]-paper[i][1]) <= 10
		res := "within"
		if !ok {
			res = "**outside**"
		}
		fmt.Fprintf(w, "| %s | %.0f–%.0f%% | %.0f–%.0f%% | %s |\n", names[i], paper[i][0], paper[i][1], lo[i], hi[i], res)
	}
	// The paper's largest SP-NTP attention share (43%) beside its smallest
	// communication share (13%) leaves the other compute at least 100 − 43 − 34 = 23%.
	ratio := first.Attention / first.Other
	paperRatio := paper[1][1] / (100 - paper[1][1] - paper[0][1])
	eff := s.cost.Efficiency().Attention * ratio / paperRatio
	fmt.Fprintf(w, "\nWhy it misses: per GPU and layer, SP-NTP's attention is 4·d_h·(N_h/N)·L²/2 FLOPs with L = 64K·N, which grows "+
		"with N, while the linear layers' FLOPs stay those of one 64K SPT, and the all-to-alls move O(L) bytes; at 256K the simulated "+
		"attention is %.1f× the other compute. The paper's shares allow at most %.1f× (43%% attention beside at least 23%% other "+
		"compute), so its attention kernels would have to run at %.0f%% of the A100's dense peak (FlashAttention-2 reaches 50–73%%; "+
		"the model uses %.0f%%), or its linear layers and overheads take several times a roofline's time. The communication "+
		"shares follow: the same bytes at the datasheet NVSwitch and EFA bandwidths are a few percent of a layer dominated "+
		"by attention. No constant is changed to close this: the sparse attention's savings are applied in the serving runs "+
		"(the breakdown above), and Fig. 5 is the paper's dense measurement (N_v = 1).\n\n",
		ratio, paperRatio, 100*eff, 100*s.cost.Efficiency().Attention)
	return nil
}

// change writes a cut of c percent as a signed change, "−10.7%" or "+0.4%".
func change(c float64) string {
	if c >= 0 {
		return fmt.Sprintf("−%.1f%%", c)
	}
	return fmt.Sprintf("+%.1f%%", -c)
}

// cspsCSA is T16's CSA check: 22% drops against no drops, same levels.
func cspsCSA(w *strings.Builder) error {
	s, cl, err := cspsModelSetup("THUDM/glm-4-9b-chat-1m")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "## CSA at C_Ad = 0: 22%% drops (T16, ±5 points)\n\n")
	fmt.Fprintf(w, "GLM-4, 1M-token prompt on 16 GPUs (two servers), SP-NTP, N_v = 3: p = 0 against p = %.4f "+
		"(drops 0, p, 1 − (1 − p)/2 at levels 1–3: 22%% of (token, level) pairs). Communication: bytes of both all-to-alls per GPU "+
		"and the busiest link's busy time; computation: attention kernels.\n\n", cspsDrop)
	a, err := s.cost.CSPSPrefillCost(s.cfg, cl, 1<<20, sim.CSPSOptions{Levels: 3})
	if err != nil {
		return err
	}
	b, err := s.cost.CSPSPrefillCost(s.cfg, cl, 1<<20, sim.CSPSOptions{Levels: 3, Drop: cspsDrop})
	if err != nil {
		return err
	}
	d, err := s.cost.CSPSPrefillCost(s.cfg, cl, 1<<20, sim.CSPSOptions{Levels: 1})
	if err != nil {
		return err
	}
	cut := func(base sim.CSPSPrefill) (bytes, time, comp float64) {
		return 100 * (1 - (b.FirstBytes+b.SecondBytes)/(base.FirstBytes+base.SecondBytes)), 100 * (1 - b.Comm/base.Comm), 100 * (1 - b.Attention/base.Attention)
	}
	ab, at, ac := cut(a)
	db, dt, dc := cut(d)
	fmt.Fprintf(w, "| quantity | paper | against the same levels at p = 0 | result | against N_v = 1 (no CSA, spec G1) | result |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| dropped (token, level) pairs | 22%% | %.1f%% | input | | |\n", 100*sim.DropFraction(b.Levels))
	fmt.Fprintf(w, "| communication bytes | −19%% | %s | %s | %s | %s |\n", change(ab), within(ab, 14, 24, 0), change(db), within(db, 14, 24, 0))
	fmt.Fprintf(w, "| communication time (busiest link) | −19%% | %s | %s | %s | %s |\n", change(at), within(at, 14, 24, 0), change(dt), within(dt, 14, 24, 0))
	fmt.Fprintf(w, "| attention computation | −28%% | %s | %s | %s | %s |\n", change(ac), within(ac, 23, 33, 0), change(dc), within(dc, 23, 33, 0))
	fmt.Fprintf(w, "| TTFT of this prefill | — | %.1f s → %.1f s | | %.1f s → %.1f s | |\n\n", a.Seconds, b.Seconds, d.Seconds, b.Seconds)
	fmt.Fprintf(w, "The paper does not say what the cuts are against. Against N_v = 1 the top level keeps ((1 − p)/2)² of the dense "+
		"pairs, levels 1 and 2 add theirs back (G1), and the NIC carries (1 − p)/2 of the dense bytes while NVLink carries level 2's "+
		"heads; against the same levels at p = 0 only the drops count. Neither baseline gives both of the paper's cuts (19%% of "+
		"communication, 28%% of compute): against p = 0 both cuts are smaller, against N_v = 1 the network's is much larger.\n\n")
	return nil
}

// cspsTable3 is Table 3 (T16's last part): one layer's Q against its KV
// across 8 GPUs of a server.
func cspsTable3(w *strings.Builder) error {
	fmt.Fprintf(w, "## Table 3: moving Q vs moving KV, one layer across 8 GPUs (T16: Q ≤ 2 ms, KV/Q > 500×)\n\n")
	fmt.Fprintf(w, "| model | context | Q ms (paper) | simulated | KV ms (paper) | simulated | KV/Q | result |\n|---|---|---|---|---|---|---|---|\n")
	paper := map[string][2]float64{"THUDM/glm-4-9b-chat-1m": {1173, 984}, "internlm/internlm2_5-7b-chat-1m": {1085, 879}}
	for _, id := range []string{"THUDM/glm-4-9b-chat-1m", "internlm/internlm2_5-7b-chat-1m"} {
		s, cl, err := cspsModelSetup(id)
		if err != nil {
			return err
		}
		for i, L := range []int{1 << 20, 406 << 10} {
			q, kv := s.cost.QKVMoveTimes(s.cfg, cl, L, 8)
			res := "within"
			if q > 2e-3 || kv/q <= 500 {
				res = "**outside**"
			}
			fmt.Fprintf(w, "| %s | %dK | 1 | %.3f | %.0f | %.1f | %.0f× | %s |\n", short(id), L>>10, 1e3*q, paper[id][i], 1e3*kv, kv/q, res)
		}
	}
	fmt.Fprintf(w, "\nAbsolute KV times are not checked (spec S11): the paper's ~1 s per layer is ~1 GB/s, far below NVSwitch, and "+
		"InternLM2.5 (twice GLM-4-1M's KV heads here) is faster there; the roofline moves a layer's KV in milliseconds.\n\n")
	return nil
}

// cspsSweepRates are the request rates of the capacity sweep, req/s.
var cspsSweepRates = []float64{0.05, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0}

// cspsFig17 is Fig. 17's capacity gain (T16): the highest swept rate at
// which each system keeps its mean response time within twice
// Sarathi-Serve's at the lowest rate, on NeedleBench with GLM-4.
func cspsFig17(w *strings.Builder) error {
	const n = 100
	c := cspsCells[0]
	s, cl, err := cspsModelSetup(c.model)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "## Fig. 17: request rate at equal latency (T16, 1.6–2.5× ±20%%)\n\n")
	fmt.Fprintf(w, "NeedleBench, GLM-4, %d requests per rate. Target: twice Sarathi-Serve's mean response time at %.2f req/s. "+
		"Capacity: the rate at which the mean response time, linear between swept rates, crosses the target.\n\n", n, cspsSweepRates[0])
	fmt.Fprintf(w, "| rate req/s | Sarathi mean response s | CSPS mean response s |\n|---|---|---|\n")
	var sar, cs []float64
	for i, rate := range cspsSweepRates {
		reqs := sim.CSPSWorkload(c.in, c.out, n, rate, 29)
		a, err := sim.Run(sim.RunOptions{Model: s.cfg, Cost: s.cost, Plan: cspsSarathiPlan, Sched: s.sched, MicroBatches: 1, Requests: slices.Clone(reqs)})
		if err != nil {
			return err
		}
		b, err := sim.RunCSPS(sim.CSPSRunOptions{Model: s.cfg, Cost: s.cost, Cluster: cl, Prefill: sim.CSPSOptions{Levels: cspsLevels, Drop: cspsDrop}, Requests: reqs})
		if err != nil {
			return err
		}
		sar, cs = append(sar, measures(a.Report.Requests).resp), append(cs, measures(b.Report.Requests).resp)
		fmt.Fprintf(w, "| %.2f | %.1f | %.1f |\n", rate, sar[i], cs[i])
	}
	target := 2 * sar[0]
	// capacity is the rate at which the response time, linear between
	// swept rates, first crosses the target (the last rate if it never does).
	capacity := func(resp []float64) float64 {
		for i := 1; i < len(resp); i++ {
			if resp[i] > target {
				r0, r1 := cspsSweepRates[i-1], cspsSweepRates[i]
				return r0 + (r1-r0)*(target-resp[i-1])/(resp[i]-resp[i-1])
			}
		}
		return cspsSweepRates[len(cspsSweepRates)-1]
	}
	a, b := capacity(sar), capacity(cs)
	gain := math.Inf(1)
	if a > 0 {
		gain = b / a
	}
	fmt.Fprintf(w, "\n| quantity | paper | simulated | result |\n|---|---|---|---|\n")
	fmt.Fprintf(w, "| capacity at %.0f s mean response: Sarathi / CSPS | — | %.2f / %.2f req/s | |\n", target, a, b)
	fmt.Fprintf(w, "| CSPS ÷ Sarathi-Serve | 1.6–2.5× | %.2f× | %s |\n\n", gain, within(gain, 1.6, 2.5, 0.2))
	fmt.Fprintf(w, "The paper does not say which latency it holds equal; the target is this report's choice. An earlier version of this "+
		"check took the highest swept rate that met the target instead of interpolating, which on this grid gave 1.25 ÷ 0.40 = 3.1× "+
		"(outside): the gain is sensitive to how capacity is read off the sweep, by about ±20%%.\n\n")
	return nil
}

// cspsAlone is the first token and the mean gap between tokens of one
// request of lInput prompt and out output tokens served alone: by one
// Sarathi-Serve replica, and by CSPS on the cluster.
func cspsAlone(s *simSetup, cl sim.Cluster, lInput, out int) (sarTTFT, sarTBT, csTTFT, csTBT float64, err error) {
	one := []bench.Request{{InputTokens: lInput, OutputTokens: out}}
	a, err := sim.Run(sim.RunOptions{Model: s.cfg, Cost: s.cost, Plan: parallel.Plan{DP: 1, TP: cspsSarathiPlan.TP, PP: cspsSarathiPlan.PP, SP: 1},
		Sched: s.sched, MicroBatches: 1, Requests: one})
	if err != nil {
		return 0, 0, 0, 0, err
	}
	b, err := sim.RunCSPS(sim.CSPSRunOptions{Model: s.cfg, Cost: s.cost, Cluster: cl, Prefill: sim.CSPSOptions{Levels: cspsLevels, Drop: cspsDrop}, Requests: one})
	if err != nil {
		return 0, 0, 0, 0, err
	}
	gap := func(r bench.RequestResult) float64 {
		if r.OutputTokens < 2 {
			return 0
		}
		return (r.Latency - r.TTFT).Seconds() / float64(r.OutputTokens-1)
	}
	ra, rb := a.Report.Requests[0], b.Report.Requests[0]
	return ra.TTFT.Seconds(), gap(ra), rb.TTFT.Seconds(), gap(rb), nil
}

// decodeSteps is decodePerGPU's step count and decode tokens: the
// distinct stamps of decode tokens and their number.
func decodeSteps(rs []bench.RequestResult) (steps, tokens int) {
	seen := map[time.Duration]bool{}
	for _, r := range rs {
		t := r.Start + r.TTFT
		for _, g := range r.ITL {
			t += g
			seen[t] = true
			tokens++
		}
	}
	return len(seen), tokens
}

// cspsBreakdown is the per-phase breakdown of one Table 4 row (the first
// cell): where each system's TTFT and TBT go, against the paper's own
// absolutes (Fig. 2's Sarathi-Serve TTFT and TBT, Fig. 5's shares).
func cspsBreakdown(w *strings.Builder, r *cspsCellRun) error {
	s, cl, err := cspsModelSetup(r.cell.model)
	if err != nil {
		return err
	}
	n := float64(len(r.reqs))
	// Sarathi-Serve: every request alone on a replica is its service time;
	// the rest of its TTFT is queueing.
	var sarAlone float64
	for _, q := range r.reqs {
		a, _, _, _, err := cspsAlone(s, cl, q.InputTokens, 1)
		if err != nil {
			return err
		}
		sarAlone += a
	}
	sarAlone /= n
	var wait, service, gpus, gpuSec, attn, other, commBusy, layers float64
	dense := 0
	for _, q := range r.csps.Requests {
		wait += q.Start - q.Arrival
		service += q.First - q.Start
		gpus += float64(q.N)
		l, g := float64(s.cfg.Layers), float64(q.N)
		gpuSec += g * q.Prefill.Seconds
		attn += g * l * q.Prefill.Attention
		other += g * l * q.Prefill.Other
		commBusy += g * l * q.Prefill.Comm
		layers += g * l * q.Prefill.Layer
		if q.N > 1 && len(q.Prefill.Levels) == 1 {
			dense++
		}
	}
	// The baseline's pipeline, the other way: both stages busy at once
	// (vLLM's virtual engines, RunOptions.OverlapSteps), which also
	// pipelines one sequence's chunks as Sarathi-Serve does not.
	ov, err := sim.Run(sim.RunOptions{Model: s.cfg, Cost: s.cost, Plan: cspsSarathiPlan, Sched: s.sched, OverlapSteps: true, Requests: slices.Clone(r.reqs)})
	if err != nil {
		return err
	}
	ovm := measures(ov.Report.Requests)
	sarSteps, sarTok := decodeSteps(r.sarathi.Requests)
	cs := r.csps
	steps := float64(cs.DecodeSteps)
	fmt.Fprintf(w, "## Per-phase breakdown of one Table 4 row: %s, %s\n\n", r.cell.dataset, short(r.cell.model))
	fmt.Fprintf(w, "Means over the row's %d requests. Sarathi-Serve's service time is each request's TTFT alone on one replica; "+
		"its queueing is the rest of its TTFT. CSPS's GPU-time shares weight each request's prefill by its N GPUs.\n\n", len(r.reqs))
	fmt.Fprintf(w, "| phase | Sarathi-Serve | CSPS |\n|---|---|---|\n")
	fmt.Fprintf(w, "| mean TTFT s | %.1f | %.1f |\n", r.sar.ttft, r.cs.ttft)
	fmt.Fprintf(w, "| of which queueing s | %.1f | %.1f (waiting for N free GPUs) |\n", r.sar.ttft-sarAlone, wait/n)
	fmt.Fprintf(w, "| of which prefill service s | %.1f (4 of a replica's 8 GPUs busy at a time) | %.1f on %.1f GPUs on average |\n", sarAlone, service/n, gpus/n)
	fmt.Fprintf(w, "| prefill GPU-seconds per request | %.0f (8 GPUs held) | %.0f |\n", 8*sarAlone, gpuSec/n)
	fmt.Fprintf(w, "| CSPS prefill GPU time: attention / other compute / link busy (overlapped) / exposed waits and ends | | %.0f%% / %.0f%% / %.0f%% / %.0f%% |\n",
		100*attn/gpuSec, 100*other/gpuSec, 100*commBusy/gpuSec, 100*(gpuSec-attn-other)/gpuSec)
	fmt.Fprintf(w, "| CSPS requests on N > 1 run without CSA (N_v = 1 faster, CSPSConfigure) | | %d of %d |\n", dense, r.arch[sim.ArchNTP]+r.arch[sim.ArchTP])
	fmt.Fprintf(w, "| mean TBT ms | %.1f | %.1f |\n", 1e3*r.sar.tbt, 1e3*r.cs.tbt)
	fmt.Fprintf(w, "| decode tokens per step (batch) | %.2f per 8-GPU replica | %.2f on %.1f of the %d-GPU pool's GPUs |\n", float64(sarTok)/float64(max(sarSteps, 1)),
		float64(cs.DecodeTokens)/steps, cs.DecodeGPUBusy/cs.DecodeBusy, cs.DecodeGPUs)
	p := cs.DecodeParts
	fmt.Fprintf(w, "| decode step ms: weights and MLP / attention / Q–(O, LSE) exchange / LM head and step overhead | | %.1f / %.1f / %.1f / %.1f |\n",
		1e3*p.Linear/steps, 1e3*p.Attention/steps, 1e3*p.Exchange/steps, 1e3*p.Fixed/steps)
	fmt.Fprintf(w, "| decode tok/s per GPU while decoding | %.1f | %.1f |\n", r.sarDecGPU, r.csDecGPU)
	fmt.Fprintf(w, "| sensitivity: Sarathi-Serve with both pipeline stages busy at once (OverlapSteps): mean TTFT s / TBT ms | %.1f / %.1f | TTFT ratio %.2f |\n\n",
		ovm.ttft, 1e3*ovm.tbt, ovm.ttft/r.cs.ttft)
	fmt.Fprintf(w, "Without queueing, the regime the paper says 1 req/s is in, the ratio of the mean TTFTs is that of the service "+
		"times, %.1f ÷ %.1f = %.2f against Fig. 14's 6.8–7.5: CSPS's prefill is faster alone only for the long prompts (the "+
		"table below), and the queue is what turns its %.1f× fewer GPU-seconds per request into the larger ratios above.\n\n",
		sarAlone, service/n, sarAlone/(service/n), 8*sarAlone/(gpuSec/n))
	fmt.Fprintf(w, "The baseline keeps one micro-batch in its two-stage pipeline (O1's \"sequential chunk processing\"); Sarathi-Serve's "+
		"scheduler can also keep a second batch of other sequences in flight, which under this load fills the bubble. The last row "+
		"bounds that choice: with both stages busy, Sarathi-Serve's capacity comes near CSPS's and the ratios fall further, so the "+
		"checked baseline is the one more favourable to the paper.\n\n")

	fmt.Fprintf(w, "One request alone (%d output tokens), against Fig. 2's Sarathi-Serve group averages (taken at 1 req/s, which the paper says adds no queueing):\n\n", 350)
	fmt.Fprintf(w, "| prompt | Sarathi TTFT s (paper) | simulated | Sarathi TBT ms (paper) | simulated | CSPS TTFT s | CSPS TBT ms | TTFT ratio |\n|---|---|---|---|---|---|---|---|\n")
	for _, c := range []struct {
		L         int
		ttft, tbt string
	}{{1 << 10, "1.6", "540"}, {128 << 10, "", ""}, {512 << 10, "", ""}, {1<<20 - 4096, "213", "9600"}} {
		a, ab, b, bb, err := cspsAlone(s, cl, c.L, 350)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "| %dK | %s | %.2f | %s | %.1f | %.2f | %.1f | %.2f |\n", c.L>>10, c.ttft, a, c.tbt, 1e3*ab, b, 1e3*bb, a/b)
	}
	const flops1M = 4 * 128 * 32 * 40 * float64(1<<20) * float64(1<<20) / 2 // GLM-4: 4·d_h·N_h·N_l·L²/2
	peak := s.node.GPU.BF16FLOPS
	flat, err := s.cost.CSPSPrefillCost(s.cfg, cl, 1<<20, sim.CSPSOptions{Levels: 1})
	if err != nil {
		return err
	}
	csa, err := s.cost.CSPSPrefillCost(s.cfg, cl, 1<<20, sim.CSPSOptions{Levels: cspsLevels, Drop: cspsDrop})
	if err != nil {
		return err
	}
	target := 213 / (r.cell.csPre / r.cell.sarPre) // Fig. 2's 1M TTFT over this row's Table 4 prefill ratio
	fmt.Fprintf(w, "\nWhat the paper's absolutes need: a 1M-token GLM-4 prompt's causal attention alone is 4·d_h·N_h·N_l·L²/2 = %.1e FLOPs. "+
		"Fig. 2's 213 s for Sarathi-Serve is %.0f TFLOP/s, %.2f× the A100's %.0f TFLOP/s BF16 peak on the 4 GPUs of one stage "+
		"(%.0f%% of peak if both stages worked at once, which Sarathi-Serve's one-chunk-in-flight pipeline does not do for one sequence); "+
		"the simulated 8-GPU replica runs it at FlashAttention-2's %.0f%% of peak on 4 GPUs at a time. This row's Table 4 ratio (%.2f) would put CSPS's 1M "+
		"prefill near %.0f s: %.0f%% of peak on all 16 GPUs for dense attention, or, at the simulated efficiency, %.0f%% of the dense pairs, where CSA at the "+
		"22%% operating point computes %.0f%%. The paper's 1K row (1.6 s TTFT, 0.54 s TBT) is 40–80× the roofline's, so its Sarathi-Serve carries a "+
		"large fixed cost per step that a roofline has no term for; its 1M TBT (9.6 s) is 400× a decode step's KV and weight reads.\n\n",
		flops1M, flops1M/213/1e12, flops1M/213/(4*peak), peak/1e12, 100*flops1M/213/(8*peak), 100*s.cost.Efficiency().Attention,
		r.cell.csPre/r.cell.sarPre, target, 100*flops1M/target/(16*peak), 100*s.cost.Efficiency().Attention*16*peak*target/flops1M, 100*csa.Pairs/flat.Pairs)
	return nil
}
