package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/policy"
	"github.com/gearboxlm/gearbox/sim"
)

// candidate is one layout and policy gearbox plan evaluates.
type candidate struct {
	plan   parallel.Plan
	pol    policy.Policy
	hostKV int64 // host KV store per rank, bytes (seesaw candidates); 0: none
	// cspsDecode > 0 makes the candidate CSPS over the node (sim.RunCSPS:
	// per-request sequence-parallel prefill on the other GPUs, this many
	// decode GPUs); plan and pol are then unused.
	cspsDecode int
	// results
	err      error
	report   *bench.Report
	perGPU   float64 // goodput (or throughput without SLOs) per GPU, req/s
	capacity float64 // highest sustainable request rate, req/s; -1 when not searched
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", "plan --model ID|DIR --hardware NODE --dataset SPEC [--slo-ttft-ms T --slo-tpot-ms T] [flags]", stderr)
	sf := addSimFlags(fs)
	threshold := fs.Int("shift-threshold", policy.DefaultShiftThreshold, "batched tokens at or below which shift candidates run full TP")
	capRequests := fs.Int("capacity-requests", 500, "requests per run of the capacity search (0 skips the search)")
	swapSpace := fs.Float64("swap-space", 4, "host KV store in GiB per GPU for the seesaw candidates (vLLM's --swap-space); 0 leaves them out")
	nf := addNitsumSimFlags(fs)
	cf := addCSPSFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if nf.tiers != "" {
		// A tiered workload: rank Nitsum and its baselines (sim.RunNitsum).
		return planNitsum(sf, nf, stdout, stderr)
	}
	s, err := sf.setup()
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	cands := enumerate(s.cfg, s.node.Count, *threshold, int64(*swapSpace*(1<<30)), s.node.Link.Kind == sim.NVLink)
	if s.node.Count >= 2 {
		cands = append(cands, &candidate{plan: parallel.Plan{DP: 1, PP: 1, SP: s.node.Count, TP: 1},
			cspsDecode: cmp.Or(cf.decodeGPUs, sim.CSPSDecodeShare(s.node.Count))})
	}
	if len(cands) == 0 {
		return fmt.Errorf("plan: no layout of %s fits %d GPUs", sf.model, s.node.Count)
	}
	start := time.Now()
	work := make(chan *candidate)
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				s.evaluate(ctx, c, *capRequests)
			}
		}()
	}
	for _, c := range cands {
		work <- c
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	slices.SortStableFunc(cands, func(a, b *candidate) int {
		switch {
		case (a.err == nil) != (b.err == nil):
			if a.err == nil {
				return -1
			}
			return 1
		case a.perGPU != b.perGPU:
			if a.perGPU > b.perGPU {
				return -1
			}
			return 1
		case a.capacity != b.capacity:
			if a.capacity > b.capacity {
				return -1
			}
			return 1
		}
		return 0
	})
	metric := "throughput/GPU"
	if !s.slo.IsZero() {
		metric = "goodput/GPU"
	}
	fmt.Fprintf(stdout, "%s on %s, %d requests of %s; SLO TTFT %v, TPOT %v; ranked by %s (req/s)\n\n",
		sf.model, s.node, len(s.reqs), sf.dataset, s.slo.TTFT, s.slo.TPOT, metric)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tplan\tpolicy\t"+metric+"\treq/s\tTTFT p50 ms\tTTFT p99 ms\tTPOT p50 ms\tTPOT p99 ms\tcapacity req/s\t")
	for i, c := range cands {
		if c.err != nil {
			fmt.Fprintf(tw, "-\t%s\t%s\t%v\t\t\t\t\t\t\t\n", c.layout(), c.policy(), c.err)
			continue
		}
		r := c.report
		capacity := "-"
		if c.capacity >= 0 {
			capacity = fmt.Sprintf("%.2f", c.capacity)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.3f\t%.2f\t%.0f\t%.0f\t%.1f\t%.1f\t%s\t\n", i+1, c.layout(), c.policy(), c.perGPU, r.RequestThroughput,
			r.TTFT.Median, percentile(r.TTFT, 99), r.TPOT.Median, percentile(r.TPOT, 99), capacity)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range cands {
		if c.err == nil && c.cspsDecode == 0 { // CSPS's pools are a cluster layout, not one engine's flags
			fmt.Fprintf(stdout, "\nserve the best with: gearbox serve %s\n", c.serveFlags(*threshold, *swapSpace))
			break
		}
	}
	fmt.Fprintf(stderr, "evaluated %d layouts in %.1f s\n", len(cands), time.Since(start).Seconds())
	return nil
}

// serveFlags are the layout and policy flags that make gearbox serve run
// c (threshold and swapGiB are the values the plan was simulated with).
func (c *candidate) serveFlags(threshold int, swapGiB float64) string {
	switch p := c.pol.(type) {
	case policy.Shift:
		return fmt.Sprintf("--plan %s --policy shift --shift-threshold %d", c.plan, threshold)
	case *policy.SiDP:
		return fmt.Sprintf("--plan %s --policy sidp", c.plan)
	case *policy.Seesaw:
		return fmt.Sprintf("--policy seesaw --prefill-plan %s --decode-plan %s --swap-space %g", p.Prefill.Plan, p.Decode.Plan, swapGiB)
	}
	return "--plan " + c.plan.String()
}

// percentile reads percentile p of a simulated run's statistics (see
// simPercentiles).
func percentile(st bench.Stats, p float64) float64 {
	if i := slices.Index(simPercentiles, p); i >= 0 && i < len(st.Percentiles) {
		return st.Percentiles[i]
	}
	return 0
}

// enumerate lists every DP × PP × SP × TP layout of n GPUs the model
// allows, each static, those with SP also under the shift policy, the
// DP ≥ 2 TP-only layouts also under SiDP (on an NVLink node), and,
// with a host KV store (hostKV bytes per GPU), every Seesaw pair of
// TP × PP layouts whose prefill layout has more pipeline stages than its
// decode layout.
func enumerate(cfg *model.Config, n, threshold int, hostKV int64, nvlink bool) []*candidate {
	var out []*candidate
	var tpPP []parallel.Plan // DP = SP = 1 layouts, for Seesaw
	for dp := 1; dp <= n; dp++ {
		for pp := 1; dp*pp <= n; pp++ {
			for sp := 1; dp*pp*sp <= n; sp++ {
				if n%(dp*pp*sp) != 0 {
					continue
				}
				p := parallel.Plan{DP: dp, PP: pp, SP: sp, TP: n / (dp * pp * sp)}
				if p.Ranks() != n || p.Validate(cfg) != nil {
					continue
				}
				out = append(out, &candidate{plan: p, pol: policy.NewStatic(withDP(p, 1))})
				if sp > 1 {
					pol, err := policy.NewShift(withDP(p, 1), threshold)
					if err == nil && pol.Shifted.Plan.Validate(cfg) == nil {
						out = append(out, &candidate{plan: p, pol: pol})
					}
				}
				if dp == 1 && sp == 1 {
					tpPP = append(tpPP, p)
				}
			}
		}
	}
	for _, p := range sidpPlans(cfg, n) {
		if !nvlink {
			break // SiDP reads peers' weights over NVLink
		}
		if pol, err := policy.NewSiDP(p, policy.DefaultSiDPThreshold, policy.DefaultSiDPWindow, nil); err == nil {
			out = append(out, &candidate{plan: p, pol: pol})
		}
	}
	if hostKV <= 0 {
		return out
	}
	for _, pf := range tpPP {
		for _, dc := range tpPP {
			if pf.PP <= dc.PP {
				continue
			}
			if pol, err := policy.NewSeesaw(pf, dc); err == nil {
				out = append(out, &candidate{plan: pf, pol: pol, hostKV: hostKV})
			}
		}
	}
	return out
}

// layout names the candidate's layout: its plan, for Seesaw its prefill
// and decode plans, for CSPS its prefill and decode pools.
func (c *candidate) layout() string {
	if c.cspsDecode > 0 {
		return fmt.Sprintf("%d+%d GPUs", c.plan.Ranks()-c.cspsDecode, c.cspsDecode)
	}
	if s, ok := c.pol.(*policy.Seesaw); ok {
		return s.Prefill.Plan.String() + "→" + s.Decode.Plan.String()
	}
	return c.plan.String()
}

// policy names the candidate's policy.
func (c *candidate) policy() string {
	if c.cspsDecode > 0 {
		return "csps"
	}
	return c.pol.String()
}

// runCandidate simulates reqs on c and returns its report.
func (s *simSetup) runCandidate(c *candidate, reqs []bench.Request) (*bench.Report, error) {
	if c.cspsDecode > 0 {
		r, err := s.runCSPS(sim.Cluster{Node: s.node, Servers: 1, ServersPerRack: 1}, sim.CSPSOptions{}, c.cspsDecode, reqs)
		if err != nil {
			return nil, err
		}
		return r.Report, nil
	}
	r, err := s.run(c.plan, c.pol, reqs)
	if err != nil {
		return nil, err
	}
	return r.Report, nil
}

func withDP(p parallel.Plan, dp int) parallel.Plan {
	p.DP = dp
	return p
}

// evaluate simulates the workload on c, then searches the highest Poisson
// rate at which at least 90% of requests meet every SLO (Vidur's capacity
// search, by bisection over the rate).
func (s *simSetup) evaluate(ctx context.Context, c *candidate, capRequests int) {
	local := *s
	local.hostKVBytes = c.hostKV
	s = &local
	rep, err := s.runCandidate(c, s.reqs)
	if err != nil {
		c.err = err
		return
	}
	c.report = rep
	good := rep.RequestThroughput
	if !s.slo.IsZero() {
		good = rep.RequestGoodput
	}
	c.perGPU = good / float64(c.plan.Ranks())
	c.capacity = -1
	if s.slo.IsZero() || capRequests <= 0 {
		return
	}
	reqs := slices.Clone(s.reqs[:min(capRequests, len(s.reqs))])
	meets := func(rate float64) bool {
		offsets, err := bench.Arrivals(len(reqs), rate, 1, 1)
		if err != nil {
			return false
		}
		setArrivals(reqs, offsets)
		r, err := s.runCandidate(c, reqs)
		if err != nil || r.Completed == 0 || r.RequestThroughput == 0 {
			return false
		}
		// At least 90% of the requests meet every SLO. Both rates divide
		// by the run's duration, so compare their ratio, with room for its
		// rounding: exactly 90% meets whatever the duration's last bits.
		return r.RequestGoodput/r.RequestThroughput >= 0.9-1e-9 && r.Failed == 0
	}
	lo, hi := 0.0, 1.0
	for hi < 1e4 && meets(hi) && ctx.Err() == nil {
		lo, hi = hi, hi*2
	}
	for i := 0; i < 8 && ctx.Err() == nil; i++ {
		mid := (lo + hi) / 2
		if meets(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	c.capacity = lo
}
