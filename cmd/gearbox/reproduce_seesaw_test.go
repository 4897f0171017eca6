package main

import (
	"math"
	"testing"

	"github.com/gearboxlm/gearbox/sim"
)

// TestPhaseSplit: a static run's prefill time is its steps that carry
// prompt tokens, its decode time its decode-only steps, summed over
// placements, and the mean decode batch is decodes per decode-only step.
func TestPhaseSplit(t *testing.T) {
	r := seesawResult{phases: []sim.PlacementStats{
		{Steps: 10, Seconds: 5, Decodes: 0, DecodeSteps: 0},
		{Steps: 30, Seconds: 9, Decodes: 600, DecodeSteps: 20, DecodeSeconds: 6},
	}}
	pre, dec, batch := phaseSplit(r)
	if pre != 8 || dec != 6 || batch != 30 {
		t.Fatalf("phaseSplit = %g, %g, %g; want 8, 6, 30", pre, dec, batch)
	}
	if _, _, b := phaseSplit(seesawResult{}); b != 0 {
		t.Fatalf("mean decode batch of no decode step = %g, want 0", b)
	}
}

// TestShareGPTSigma: the sensitivity workload keeps vLLM's filter and
// seed, and a narrower spread draws fewer long requests.
func TestShareGPTSigma(t *testing.T) {
	spread := func(sigma float64) (mean, sd float64) {
		reqs := seesawWorkloadSigma("sharegpt", 2000, 8192, 1, sigma)
		var s, s2 float64
		for _, r := range reqs {
			if r.InputTokens < 4 || r.OutputTokens < 4 || r.InputTokens > 1024 || r.InputTokens+r.OutputTokens > 2048 {
				t.Fatalf("σ %g: request %+v outside vLLM's ShareGPT filter", sigma, r)
			}
			x := float64(r.OutputTokens)
			s, s2 = s+x, s2+x*x
		}
		mean = s / float64(len(reqs))
		return mean, math.Sqrt(s2/float64(len(reqs)) - mean*mean)
	}
	m1, sd1 := spread(shareGPTSigma)
	m5, sd5 := spread(shareGPTNarrowSigma)
	// The filter cuts the long tail, so the means sit below 338; the
	// narrow draw loses less of it.
	if !(m1 < shareGPTOut && m5 <= shareGPTOut+10 && m5 > m1) || !(sd5 < sd1/1.5) {
		t.Fatalf("output mean/sd: σ %g %.0f/%.0f, σ %g %.0f/%.0f", shareGPTSigma, m1, sd1, shareGPTNarrowSigma, m5, sd5)
	}
	if a, b := seesawWorkload("sharegpt", 50, 8192, 1), seesawWorkloadSigma("sharegpt", 50, 8192, 1, shareGPTSigma); a[7].InputTokens != b[7].InputTokens || a[7].OutputTokens != b[7].OutputTokens {
		t.Fatal("seesawWorkload is not seesawWorkloadSigma at the assumed spread")
	}
}
