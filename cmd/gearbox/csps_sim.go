package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/sim"
)

// cspsFlags are the CSPS knobs of simulate and plan under --policy csps.
type cspsFlags struct {
	levels     int
	drop       float64
	micro      int
	decodeGPUs int
}

func addCSPSFlags(fs *flag.FlagSet) *cspsFlags {
	f := &cspsFlags{}
	fs.IntVar(&f.levels, "csa-levels", 3, "with --policy csps: CSA levels N_v (1 = dense attention, no CSA; 2 or 3)")
	fs.Float64Var(&f.drop, "csa-drop", 0.1067, "with --policy csps: CSA's level-2 drop ratio p (higher levels keep (1−p)/2ⁿ); 0.1067 drops 22% of (token, level) pairs over 3 levels, the paper's C_Ad = 0")
	fs.IntVar(&f.micro, "csps-micro", sim.CSPSMicro, "with --policy csps: micro-partitions per level of the prefill pipeline")
	fs.IntVar(&f.decodeGPUs, "csps-decode-gpus", sim.CSPSDecodeGPUs, "with --policy csps: GPUs of the decode pool (the cluster's last ones)")
	return f
}

// cspsCluster resolves --hardware for CSPS: a cluster such as
// 8xp4d.24xlarge, or a catalog node as a one-server cluster (no network).
func cspsCluster(hardware string) (sim.Cluster, error) {
	if c, err := sim.ParseCluster(hardware); err == nil {
		return c, nil
	}
	n, err := sim.ParseNode(hardware)
	if err != nil {
		return sim.Cluster{}, fmt.Errorf("--hardware %s is neither a cluster (e.g. 8xp4d.24xlarge) nor a node: %w", hardware, err)
	}
	return sim.Cluster{Node: n, Servers: 1, ServersPerRack: 1}, nil
}

// runCSPSFlags simulates sf's model and workload served by CSPS on the
// cluster --hardware names, with cf's knobs: what simulate and plan run
// for --policy csps. The engine limits and --plan do not apply (CSPS
// chooses each request's degree and architecture itself).
func runCSPSFlags(sf *simFlags, cf *cspsFlags) (*sim.CSPSRunResult, error) {
	cl, err := cspsCluster(sf.hardware)
	if err != nil {
		return nil, err
	}
	local := *sf
	local.hardware = cl.Node.String() // one server: the cost model's kernels and NVLink
	s, err := local.setup()
	if err != nil {
		return nil, err
	}
	return sim.RunCSPS(sim.CSPSRunOptions{
		Model: s.cfg, Cost: s.cost, Cluster: cl, DecodeGPUs: cf.decodeGPUs,
		Prefill:  sim.CSPSOptions{Levels: cf.levels, Drop: cf.drop, Micro: cf.micro},
		Requests: s.reqs, Report: bench.ReportOptions{SLO: s.slo, Percentiles: simPercentiles},
	})
}

// simulateCSPS is simulate --policy csps: it runs runCSPSFlags and prints
// the report table and a line on the deployment.
func simulateCSPS(sf *simFlags, cf *cspsFlags, stdout, stderr io.Writer) error {
	res, err := runCSPSFlags(sf, cf)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	res.Report.RunInfo.Label = fmt.Sprintf("simulate %s on %s, policy csps (N_v=%d, p=%g)", sf.model, sf.hardware, cf.levels, cf.drop)
	if err := res.Report.WriteTable(stdout); err != nil {
		return err
	}
	arch := map[sim.CSPSArch]int{}
	for _, q := range res.Requests {
		arch[q.Arch]++
	}
	var b strings.Builder
	for _, a := range []sim.CSPSArch{sim.ArchNone, sim.ArchNTP, sim.ArchTP} {
		fmt.Fprintf(&b, " %s %d", a, arch[a])
	}
	fmt.Fprintf(stderr, "CSPS: %d prefill GPUs, %d decode steps, decode pool KV %d tokens; requests by architecture:%s\n",
		res.PrefillGPUs, res.DecodeSteps, res.DecodeKVToks, b.String())
	return nil
}
