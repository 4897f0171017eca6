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

// cspsCellRun is one cell's two deployments on the same requests.
type cspsCellRun struct {
	cell         cspsCell
	reqs         []bench.Request
	sarathi      *bench.Report
	csps         *sim.CSPSRunResult
	sar, cs      cspsMeasures
	rhoCSPS      float64 // the CSPS prefill pool's utilization
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
		arch: map[sim.CSPSArch]int{}}
	var tok, dropped float64
	lastArrival := reqs[len(reqs)-1].Arrival.Seconds()
	for _, q := range cs.Requests {
		out.arch[q.Arch]++
		tok += float64(q.Input)
		dropped += float64(q.Input) * sim.DropFraction(q.Prefill.Levels)
	}
	out.dropFraction = dropped / tok
	out.rhoCSPS = cs.PrefillBusy / (float64(cs.PrefillGPUs) * lastArrival)
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
		"with the most free GPUs and sorted by GPU ID (R15), with App A's architecture (SP-TP only at N = 2) and CSA at N_v = %d, p = %.4f; "+
		"its KV then moves over the network to a 16-GPU decode pool (SP decode: Q broadcast and (O, LSE) gather per layer, shards beside other requests'). "+
		"Workload: %d requests, Poisson at %.0f req/s, lengths from Table 2 (log-normal fitted to median and P99, prompts clamped to [1K, 1M − 4K]).\n\n",
		cspsChunk, cspsLevels, cspsDrop, cspsRequests, cspsRate)
	fmt.Fprintf(w, "**Throughput (S10)**: the paper does not define it. Here prefill throughput is each request's L_in ÷ TTFT and decode "+
		"throughput its (L_out − 1) ÷ (last token − first token), averaged over requests (the per-request view of Figs. 2–3); the "+
		"cluster's prompt tokens ÷ the span of the prefills is shown beside it. With these definitions the decode-throughput ratio is "+
		"the harmonic counterpart of the TBT ratio, so Table 4's decode ratios (4.3–5.6) and Fig. 15's TBT ratios (1.6–1.9) cannot both "+
		"be met; the paper's own numbers are inconsistent under any per-request definition.\n\n")

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
		"- Oracle and the learned configurators (T11, T17): the runs use one fixed CSA configuration; no configurator is built.\n"+
		"- CSPS-NTP ÷ CSPS-TP ratios: with App A's rule SP-TP serves only prompts of 64K–128K (N = 2), so the split is by length, as G14 warns.\n"+
		"- Accuracy: the simulator has no accuracy model (F_Ad).\n"+
		"- The Fig. 10/11 variant (decodes mixed into SPT prefills) is not modelled; decode runs in its own pool.\n\n")
	fmt.Fprintf(w, "_Simulated in %.1f s._\n", time.Since(start).Seconds())
	return nil
}

// cspsUtilization is spec S3's check, before any ratio is read.
func cspsUtilization(w *strings.Builder, runs []*cspsCellRun) {
	fmt.Fprintf(w, "## Workload and utilization (spec S3)\n\n")
	fmt.Fprintf(w, "| dataset | model | sampled input median / P99 / std | Table 2 | output median / P99 / std | Table 2 | CSPS prefill-pool utilization | requests by architecture (none / SP-NTP / SP-TP) | realized CSA drop fraction |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		var in, out []int
		for _, q := range r.reqs {
			in, out = append(in, q.InputTokens), append(out, q.OutputTokens)
		}
		im, ip, is := sim.LengthStats(in)
		om, op, os := sim.LengthStats(out)
		fmt.Fprintf(w, "| %s | %s | %.0fK / %.0fK / %.0fK | %.0fK / %.0fK / %.0fK | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f | %.2f | %d / %d / %d | %.1f%% |\n",
			r.cell.dataset, short(r.cell.model), im/1e3, ip/1e3, is/1e3, r.cell.in.Median/1e3, r.cell.in.P99/1e3, r.cell.in.Std/1e3,
			om, op, os, r.cell.out.Median, r.cell.out.P99, r.cell.out.Std, r.rhoCSPS,
			r.arch[sim.ArchNone], r.arch[sim.ArchNTP], r.arch[sim.ArchTP], 100*r.dropFraction)
	}
	fmt.Fprintf(w, "\nUtilization is the prefill pool's busy GPU-seconds over its 48 GPUs × the arrival span. Above 1 the queue grows "+
		"for the whole run and every TTFT average depends on the run's length (%d requests here): at 1 req/s with ~100K-token median "+
		"prompts the paper's \"unlikely to increase the queueing delay\" does not hold under this roofline. A log-normal through "+
		"Table 2's median and P99 has a much smaller std than Table 2's (which implies a heavy mass near 1M).\n\n", cspsRequests)
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
		sp, sd := r.cs.pre/r.sar.pre, r.cs.dec/r.sar.dec
		fmt.Fprintf(w, "| %s | %s | %.0f / %.1f | %.0f / %.1f | %.0f / %.0f | %.0f / %.1f | %.0f / %.0f | %.2f | %.2f | %s | %.2f | %.2f | %s |\n",
			c.dataset, short(c.model), c.sarPre, c.sarDec, r.sar.pre, r.sar.dec, c.csPre, c.csDec, r.cs.pre, r.cs.dec,
			r.sar.clusterPre, r.cs.clusterPre, pp, sp, within(sp, pp, pp, 0.2), pd, sd, within(sd, pd, pd, 0.2))
	}
	fmt.Fprintf(w, "\n")
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
	fmt.Fprintf(w, "\nWhy the ratios fall short, in this model: (1) CSPS gives a request only N = ⌈L_in/64K⌉ GPUs, so a median "+
		"(~100K-token) prompt prefills on 2 GPUs while a Sarathi replica spends 8 (half of them idle in the pipeline bubble) on it; "+
		"CSPS wins on the long prompts and on queueing, not on every request. (2) On NeedleBench both systems are over capacity at "+
		"1 req/s (utilization above), so the averages are queueing-dominated and grow with the run's length. (3) CSPS's decode "+
		"pool reads the full weights on every GPU each step (SP decode keeps whole models), against an eighth of them per GPU in a "+
		"TP4×PP2 replica, so its TBT comes out longer than the baseline's, the opposite of Fig. 15; the paper's Sarathi TBTs "+
		"(0.5–9.6 s) are two orders of magnitude above what a roofline gives for 256-token chunks.\n\n")
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
	for _, L := range []int{256 << 10, 512 << 10, 768 << 10, 1 << 20} {
		ntp, err := s.cost.CSPSPrefillCost(s.cfg, cl, L, sim.CSPSOptions{Levels: 1, Arch: sim.ArchNTP, N: L / sim.CSPSSPTMaxNTP})
		if err != nil {
			return err
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
	fmt.Fprintf(w, "\nThe roofline puts causal attention at long contexts far above the links' time (FLOPs grow with L², bytes with L), "+
		"so communication shares come out small; the paper's measured shares imply links several times slower than NVSwitch's datasheet "+
		"or attention kernels several times faster than FlashAttention-2's 60%% of peak.\n\n")
	return nil
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
	commBytes := 100 * (1 - (b.FirstBytes+b.SecondBytes)/(a.FirstBytes+a.SecondBytes))
	commTime := 100 * (1 - b.Comm/a.Comm)
	comp := 100 * (1 - b.Attention/a.Attention)
	fmt.Fprintf(w, "| quantity | paper | simulated | result |\n|---|---|---|---|\n")
	fmt.Fprintf(w, "| dropped (token, level) pairs | 22%% | %.1f%% | input |\n", 100*sim.DropFraction(b.Levels))
	fmt.Fprintf(w, "| communication bytes | −19%% | −%.1f%% | %s |\n", commBytes, within(commBytes, 14, 24, 0))
	fmt.Fprintf(w, "| communication time (busiest link) | −19%% | −%.1f%% | %s |\n", commTime, within(commTime, 14, 24, 0))
	fmt.Fprintf(w, "| attention computation | −28%% | −%.1f%% | %s |\n", comp, within(comp, 23, 33, 0))
	fmt.Fprintf(w, "| TTFT of this prefill | — | %.1f s → %.1f s | |\n\n", a.Seconds, b.Seconds)
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
