package main

import (
	"flag"
	"io"
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sim"
)

// TestRunSiDPSim runs a small job through the seam simulate and plan use
// for --policy sidp: every request completes, the timeline holds the
// group's modes, and plans SiDP cannot run are refused.
func TestRunSiDPSim(t *testing.T) {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sf := addSimFlags(fs)
	if err := fs.Parse([]string{"--model", "Qwen/Qwen3-32B", "--hardware", "8xH20-141GB", "--dataset", "synthetic:in=512,out=64,n=32"}); err != nil {
		t.Fatal(err)
	}
	s, err := sf.setup()
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.runSiDP(parallel.Plan{DP: 4, PP: 1, SP: 1, TP: 2}, s.reqs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Completed != 32 || res.Report.TotalOutputTokens != 32*64 || len(res.Timeline) == 0 || res.Timeline[0].Plan != "WaS" {
		t.Errorf("completed %d, %d output tokens, timeline %+v", res.Report.Completed, res.Report.TotalOutputTokens, res.Timeline)
	}
	for _, p := range []parallel.Plan{{DP: 1, PP: 1, SP: 1, TP: 8}, {DP: 4, PP: 2, SP: 1, TP: 1}} {
		if _, err := s.runSiDP(p, s.reqs); err == nil {
			t.Errorf("plan %s accepted", p)
		}
	}
}

// TestSiDPPlans lists the SiDP candidates of an 8-GPU node.
func TestSiDPPlans(t *testing.T) {
	cfg, err := sim.LookupModel("Qwen/Qwen3-32B")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range sidpPlans(cfg, 8) {
		got = append(got, p.String())
	}
	if want := []string{"dp=8", "dp=4,tp=2", "dp=2,tp=4"}; !slices.Equal(got, want) {
		t.Errorf("SiDP plans %v, want %v", got, want)
	}
}
