package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/sim"
	"github.com/gearboxlm/gearbox/slo"
)

// nitsumSimFlags are the knobs of simulate --policy nitsum and of plan over
// a tiered workload (--slo-tiers).
type nitsumSimFlags struct {
	fs      *flag.FlagSet
	tiers   string
	tp      string
	sw      string
	system  string
	staticT int
	servers int
	profile time.Duration
}

func addNitsumSimFlags(fs *flag.FlagSet) *nitsumSimFlags {
	f := &nitsumSimFlags{}
	fs.StringVar(&f.tiers, "slo-tiers", "", "with --policy nitsum (simulate) or for plan: JSON file of SLO tiers as serve takes them (examples/slo-tiers); request i of the dataset is tier i mod the number of tiers. Without it, one tier from --slo-ttft-ms and --slo-tpot-ms")
	// serve's --policy nitsum defines --nitsum-window among the parallel
	// flags, which simulate shares: define it only where it is missing.
	if fs.Lookup("nitsum-window") == nil {
		fs.Duration("nitsum-window", nitsum.DefaultWindow, "with --policy nitsum: control window (re-plan interval)")
	}
	f.fs = fs
	fs.StringVar(&f.tp, "nitsum-tp", "1,2,4,8", "with --policy nitsum: TP degrees instances may take (those above the node's GPUs are dropped)")
	fs.StringVar(&f.sw, "nitsum-switch", "fast", "with --policy nitsum: reconfiguration path: fast (shard views, warm executors, aggregated KV migration) or naive (weight reload, kernel preparation, per-page copies)")
	fs.StringVar(&f.system, "nitsum-system", "nitsum", "with --policy nitsum: nitsum, nitsum-static (planner once on the mean rates), split, tier-split (split's groups deferring instead of rejecting), slo-batch, pd or vanilla (the paper's baselines)")
	fs.IntVar(&f.staticT, "nitsum-static-tp", 1, "with --nitsum-system slo-batch, pd or vanilla: their one TP degree")
	fs.DurationVar(&f.profile, "nitsum-profile-window", 0, "with --policy nitsum: span of past arrivals the planner's rates are averaged over (the paper's profile window); 0: the last control window")
	fs.IntVar(&f.servers, "nitsum-servers", 1, "with --policy nitsum: servers of --hardware in the pool (TP groups stay inside a server)")
	return f
}

// nitsumSim is a resolved Nitsum simulation: the options and what the
// report needs.
type nitsumSim struct {
	opts  sim.NitsumRunOptions
	lens  []sim.Lengths
	label string
}

func parseNitsumSystem(s string) (sim.NitsumSystem, error) {
	systems := []sim.NitsumSystem{sim.SystemNitsum, sim.SystemStaticPlan, sim.SystemSplit, sim.SystemTierSplit, sim.SystemSLOBatch, sim.SystemPD, sim.SystemVanilla}
	names := make([]string, len(systems))
	for i, sys := range systems {
		if sys.String() == s {
			return sys, nil
		}
		names[i] = sys.String()
	}
	return 0, fmt.Errorf("--nitsum-system %q: want one of %s", s, strings.Join(names, ", "))
}

// window is --nitsum-window, wherever it was defined.
func (f *nitsumSimFlags) window() time.Duration {
	if g, ok := f.fs.Lookup("nitsum-window").Value.(flag.Getter); ok {
		if d, ok := g.Get().(time.Duration); ok {
			return d
		}
	}
	return nitsum.DefaultWindow
}

// loadTiers is --slo-tiers, or one tier from the SLO flags.
func (f *nitsumSimFlags) loadTiers(sf *simFlags) (*slo.Set, error) {
	if f.tiers != "" {
		t, err := slo.Load(f.tiers)
		if err != nil {
			return nil, fmt.Errorf("--slo-tiers: %w", err)
		}
		return t, nil
	}
	if sf.sloTTFT <= 0 || sf.sloTPOT <= 0 {
		return nil, errors.New("nitsum needs SLO tiers: --slo-tiers FILE, or --slo-ttft-ms and --slo-tpot-ms for one tier")
	}
	return slo.New([]slo.Tier{{Name: "slo", TTFT: msDuration(sf.sloTTFT), TPOT: msDuration(sf.sloTPOT)}})
}

// resolve loads the model, node, workload and tiers and profiles the
// node: the options of sim.RunNitsum.
func (f *nitsumSimFlags) resolve(sf *simFlags) (*nitsumSim, error) {
	s, err := sf.setup()
	if err != nil {
		return nil, err
	}
	tiers, err := f.loadTiers(sf)
	if err != nil {
		return nil, err
	}
	for s := range tiers.Len() {
		if tiers.At(s).Background {
			return nil, fmt.Errorf("--slo-tiers: tier %q is a background tier; the simulator serves SLO tiers only", tiers.At(s).Name)
		}
	}
	sys, err := parseNitsumSystem(f.system)
	if err != nil {
		return nil, err
	}
	var tps []int
	for _, p := range strings.Split(f.tp, ",") {
		t, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || t < 1 {
			return nil, fmt.Errorf("--nitsum-tp %q: want a comma-separated list of degrees", f.tp)
		}
		if t <= s.node.Count && s.cfg.Heads%t == 0 && s.cfg.KVHeads%t == 0 {
			tps = append(tps, t)
		}
	}
	slices.Sort(tps)
	tps = slices.Compact(tps)
	if len(tps) == 0 {
		return nil, fmt.Errorf("--nitsum-tp %q: no degree fits %s and the model's heads", f.tp, s.node)
	}
	sw := sim.FastSwitch
	switch f.sw {
	case "fast":
	case "naive":
		sw = sim.NaiveSwitch
	default:
		return nil, fmt.Errorf("--nitsum-switch %q: want fast or naive", f.sw)
	}
	if f.servers < 1 {
		return nil, fmt.Errorf("--nitsum-servers %d: want at least 1", f.servers)
	}
	n := tiers.Len()
	reqs := make([]sim.NitsumRequest, len(s.reqs))
	sum := make([][2]float64, n)
	count := make([]int, n)
	for i, q := range s.reqs {
		t := i % n
		reqs[i] = sim.NitsumRequest{Arrival: q.Arrival.Seconds(), Input: q.InputTokens, Output: q.OutputTokens, Tier: t}
		sum[t][0] += float64(q.InputTokens)
		sum[t][1] += float64(q.OutputTokens)
		count[t]++
	}
	slices.SortStableFunc(reqs, func(a, b sim.NitsumRequest) int {
		switch {
		case a.Arrival < b.Arrival:
			return -1
		case a.Arrival > b.Arrival:
			return 1
		}
		return 0
	})
	lens := make([]sim.Lengths, n)
	for t := range n {
		if count[t] == 0 {
			return nil, fmt.Errorf("tier %q gets no requests of the %d in the dataset", tiers.At(t).Name, len(s.reqs))
		}
		lens[t] = sim.Lengths{Prompt: max(1, int(sum[t][0]/float64(count[t])+0.5)), Output: max(1, int(sum[t][1]/float64(count[t])+0.5))}
	}
	pr, err := sim.NewNitsumProfiler(s.cost, s.cfg, tps)
	if err != nil {
		return nil, err
	}
	prof, err := pr.Profile(tiers, lens)
	if err != nil {
		return nil, err
	}
	return &nitsumSim{
		opts: sim.NitsumRunOptions{Model: s.cfg, Cost: s.cost, Servers: f.servers, Tiers: tiers, Profile: prof, Requests: reqs,
			System: sys, Switch: sw, Window: f.window(), ProfileWindow: f.profile, TP: f.staticT},
		lens:  lens,
		label: fmt.Sprintf("%s on %s", sf.model, poolName(f.servers, s.node.String())),
	}, nil
}

// poolName is a node, or servers × node.
func poolName(servers int, node string) string {
	if servers == 1 {
		return node
	}
	return fmt.Sprintf("%d × %s", servers, node)
}

// writeNitsumSim prints a run: per tier, goodput and latency percentiles.
func writeNitsumSim(w io.Writer, nr *nitsumSim, res *sim.NitsumResult) error {
	o := nr.opts
	fmt.Fprintf(w, "%s, system %s (switch %s, window %v), %d requests over %.1f s: goodput %.2f req/s (%.1f%% of requests within both targets)\n",
		nr.label, o.System, o.Switch, o.Window, len(o.Requests), res.Span, res.Goodput, 100*res.Attainment)
	if o.System == sim.SystemNitsum || o.System == sim.SystemStaticPlan {
		fmt.Fprintf(w, "%d plans, %d reconfigurations, %.1f GPU-seconds paused\n", res.Plans, res.Reconfigs, res.PausedGPUSeconds)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tier\tTTFT/TPOT SLO ms\tmean in/out\trequests\tgood\tTTFT p50/p90/p99 ms\tTPOT p50/p90/p99 ms\t")
	for s := range o.Tiers.Len() {
		t := o.Tiers.At(s)
		n, good := 0, 0
		for i, out := range res.Outcomes {
			if o.Requests[i].Tier == s {
				n++
				if out.Good {
					good++
				}
			}
		}
		var ttft, tpot [3]float64
		for k, q := range []float64{0.5, 0.9, 0.99} {
			ttft[k], tpot[k] = res.Percentile(o.Requests, s, q)
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%d/%d\t%d\t%d\t%.0f/%.0f/%.0f\t%.1f/%.1f/%.1f\t\n", t.Name, t.TTFT.Milliseconds(), t.TPOT.Milliseconds(),
			nr.lens[s].Prompt, nr.lens[s].Output, n, good, ttft[0]*1e3, ttft[1]*1e3, ttft[2]*1e3, tpot[0]*1e3, tpot[1]*1e3, tpot[2]*1e3)
	}
	return tw.Flush()
}

// simulateNitsum is simulate --policy nitsum.
func simulateNitsum(sf *simFlags, nf *nitsumSimFlags, stdout, stderr io.Writer) error {
	nr, err := nf.resolve(sf)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	start := time.Now()
	res, err := sim.RunNitsum(nr.opts)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	if err := writeNitsumSim(stdout, nr, res); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "simulated in %.2f s wall\n", time.Since(start).Seconds())
	return nil
}

// planNitsum is plan over a tiered workload: every system of the Nitsum
// paper's comparison on the pool (each static degree for the static
// baselines), ranked by goodput per GPU.
func planNitsum(sf *simFlags, nf *nitsumSimFlags, stdout, stderr io.Writer) error {
	nr, err := nf.resolve(sf)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	type row struct {
		name string
		res  *sim.NitsumResult
		err  error
	}
	var rows []row
	add := func(name string, o sim.NitsumRunOptions) {
		res, err := sim.RunNitsum(o)
		rows = append(rows, row{name, res, err})
	}
	start := time.Now()
	o := nr.opts
	for _, sys := range []sim.NitsumSystem{sim.SystemNitsum, sim.SystemStaticPlan, sim.SystemSplit} {
		o.System = sys
		add(sys.String(), o)
	}
	for _, sys := range []sim.NitsumSystem{sim.SystemSLOBatch, sim.SystemPD, sim.SystemVanilla} {
		for _, t := range o.Profile.TP {
			o.System, o.TP = sys, t
			add(fmt.Sprintf("%s TP%d", sys, t), o)
		}
	}
	gpus := float64(nr.opts.Servers * nr.opts.Cost.Node.Count)
	slices.SortStableFunc(rows, func(a, b row) int {
		switch {
		case (a.err == nil) != (b.err == nil):
			if a.err == nil {
				return -1
			}
			return 1
		case a.err != nil:
			return 0
		case a.res.Goodput > b.res.Goodput:
			return -1
		case a.res.Goodput < b.res.Goodput:
			return 1
		}
		return 0
	})
	fmt.Fprintf(stdout, "%s, %d requests of %s in %d tiers; ranked by goodput/GPU (req/s)\n\n", nr.label, len(o.Requests), sf.dataset, o.Tiers.Len())
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tsystem\tgoodput/GPU\tgoodput req/s\tattainment %\t")
	for i, r := range rows {
		if r.err != nil {
			fmt.Fprintf(tw, "-\t%s\t%v\t\t\t\n", r.name, r.err)
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%.3f\t%.2f\t%.1f\t\n", i+1, r.name, r.res.Goodput/gpus, r.res.Goodput, 100*r.res.Attainment)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "evaluated %d systems in %.1f s\n", len(rows), time.Since(start).Seconds())
	return nil
}
