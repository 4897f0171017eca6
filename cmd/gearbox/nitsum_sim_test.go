package main

import (
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/sim"
)

// TestSimulateNitsum runs simulate --policy nitsum on Table 1's 14B tiers
// (two tiers, requests alternating) and plan over the same tiered
// workload: simulate reports the goodput and both tiers, plan ranks
// Nitsum and its baselines and refuses the static P/D that cannot fit.
func TestSimulateNitsum(t *testing.T) {
	args := []string{"--model", "Qwen/Qwen2.5-14B-Instruct", "--hardware", "8xH100", "--slo-tiers", "../../examples/slo-tiers/qwen-14b-h100.json",
		"--dataset", "synthetic:in=1500,out=100,n=200", "--request-rate", "20", "--seed", "1"}
	out, _, err := runCLI(t, append([]string{"simulate", "--policy", "nitsum", "--nitsum-window", "500ms"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"system nitsum (switch fast, window 500ms), 200 requests", "strict", "loose", "goodput"} {
		if !strings.Contains(out, want) {
			t.Errorf("simulate output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runCLI(t, append([]string{"plan"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ranked by goodput/GPU", "nitsum-static", "split", "slo-batch TP8", "needs two instances"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	if _, _, err := runCLI(t, "simulate", "--policy", "nitsum", "--nitsum-system", "bogus", "--slo-ttft-ms", "200", "--slo-tpot-ms", "15"); err == nil || !strings.Contains(err.Error(), "--nitsum-system") || !strings.Contains(err.Error(), "tier-split") {
		t.Errorf("a bad --nitsum-system: %v", err)
	}
	for _, s := range []sim.NitsumSystem{sim.SystemNitsum, sim.SystemStaticPlan, sim.SystemVanilla, sim.SystemPD, sim.SystemSLOBatch, sim.SystemSplit, sim.SystemTierSplit} {
		if got, err := parseNitsumSystem(s.String()); got != s || err != nil {
			t.Errorf("--nitsum-system %s: %v, %v", s, got, err)
		}
	}
}
