package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gearboxlm/gearbox/bench"
	"github.com/gearboxlm/gearbox/sim"
)

// cspsFlags are the simulator's CSPS knobs under --policy csps beside
// the shared ones (--sparse-attention, --csa-levels, --csa-drop,
// --csps-micro-partitions in parallelFlags).
type cspsFlags struct {
	decodeGPUs int
}

func addCSPSFlags(fs *flag.FlagSet) *cspsFlags {
	f := &cspsFlags{}
	fs.IntVar(&f.decodeGPUs, "csps-decode-gpus", 0, "simulate and plan with --policy csps: GPUs of the decode pool, the cluster's last ones (0: a quarter, 16 of the paper's 64)")
	return f
}

// cspsPrefill is the CSA, pipeline and architecture settings of par's
// flags for the simulator: one level (dense) unless --sparse-attention on,
// App B's micro-partitions (sim.CSPSMicro) unless --csps-micro-partitions
// is set, App A's architecture per request unless --csps-arch forces one.
func (par *parallelFlags) cspsPrefill() sim.CSPSOptions {
	o := sim.CSPSOptions{Levels: 1}
	if par.sparse == "on" {
		o.Levels, o.Drop = par.csaLevels, par.csaDrop
	}
	par.fs.Visit(func(f *flag.Flag) {
		if f.Name == "csps-micro-partitions" {
			o.Micro = par.micro
		}
	})
	switch par.cspsArch {
	case "sp-ntp":
		o.Arch = sim.ArchNTP
	case "sp-tp":
		o.Arch = sim.ArchTP
	}
	return o
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
func runCSPSFlags(sf *simFlags, cf *cspsFlags, prefill sim.CSPSOptions) (*sim.CSPSRunResult, error) {
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
	return s.runCSPS(cl, prefill, cf.decodeGPUs, s.reqs)
}

// runCSPS simulates reqs served by CSPS on cluster cl, whose servers are
// s's node, with a decode pool of decodeGPUs (0: sim.CSPSDecodeShare).
func (s *simSetup) runCSPS(cl sim.Cluster, prefill sim.CSPSOptions, decodeGPUs int, reqs []bench.Request) (*sim.CSPSRunResult, error) {
	return sim.RunCSPS(sim.CSPSRunOptions{
		Model: s.cfg, Cost: s.cost, Cluster: cl, DecodeGPUs: decodeGPUs, Prefill: prefill,
		Requests: slices.Clone(reqs), Report: bench.ReportOptions{SLO: s.slo, Percentiles: simPercentiles},
	})
}

// simulateCSPS is simulate --policy csps: it runs runCSPSFlags and prints
// the report table and a line on the deployment.
func simulateCSPS(sf *simFlags, cf *cspsFlags, prefill sim.CSPSOptions, stdout, stderr io.Writer) error {
	res, err := runCSPSFlags(sf, cf, prefill)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	res.Report.RunInfo.Label = fmt.Sprintf("simulate %s on %s, policy csps (N_v=%d, p=%g)", sf.model, sf.hardware, prefill.Levels, prefill.Drop)
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
