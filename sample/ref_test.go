package sample

import (
	"math"
	"slices"
	"testing"
)

// refDist is the distribution vLLM v1 samples from, computed the slow and
// obvious way: penalties in float32 over dense masks, then float64 softmax,
// min-p, top-k (keeping ties, comparing masked logits), top-p over a full
// sort, and renormalisation. It shares no code with the package. Logits
// must be finite or -Inf.
func refDist(p Params, logits []float32, prompt, generated []int) []float64 {
	v := len(logits)
	x := slices.Clone(logits)
	for tok, b := range p.LogitBias {
		x[tok] += b
	}
	rep := p.RepetitionPenalty
	if rep == 0 {
		rep = 1
	}
	seen := make([]bool, v)
	count := make([]int, v)
	for _, t := range prompt {
		seen[t] = true
	}
	for _, t := range generated {
		seen[t] = true
		count[t]++
	}
	for i := range x {
		if seen[i] {
			if x[i] > 0 {
				x[i] /= rep
			} else {
				x[i] *= rep
			}
		}
		x[i] -= p.FrequencyPenalty * float32(count[i])
		if count[i] > 0 {
			x[i] -= p.PresencePenalty
		}
	}
	probs := make([]float64, v)
	if p.Temperature == 0 {
		best := 0
		for i := range x {
			if x[i] > x[best] {
				best = i
			}
		}
		probs[best] = 1
		return probs
	}
	temp := math.Max(float64(p.Temperature), 0.01)
	mx := math.Inf(-1)
	for _, l := range x {
		mx = math.Max(mx, float64(l))
	}
	for i, l := range x {
		probs[i] = math.Exp((float64(l) - mx) / temp)
	}
	normalise(probs)
	if p.MinP > 0 {
		pmax := slices.Max(probs)
		for i := range probs {
			if probs[i] < float64(p.MinP)*pmax {
				probs[i] = 0
				x[i] = float32(math.Inf(-1))
			}
		}
	}
	if p.TopK > 0 && p.TopK < v {
		sorted := slices.Clone(x)
		slices.Sort(sorted)
		kth := sorted[v-p.TopK]
		for i := range x {
			if x[i] < kth {
				probs[i] = 0
			}
		}
	}
	normalise(probs)
	if p.TopP > 0 && p.TopP < 1 {
		order := make([]int, v)
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int {
			switch {
			case probs[a] > probs[b]:
				return -1
			case probs[a] < probs[b]:
				return 1
			}
			return 0
		})
		var cum float64
		for _, i := range order {
			if cum >= float64(p.TopP) {
				probs[i] = 0
			}
			cum += probs[i]
		}
		normalise(probs)
	}
	return probs
}

func normalise(p []float64) {
	var s float64
	for _, x := range p {
		s += x
	}
	for i := range p {
		p[i] /= s
	}
}

// checkDistribution fails t unless counts (n draws) are consistent with
// want: tokens with probability 0 must never appear, and Pearson's
// chi-square over bins of at least 50 expected draws must stay below its
// 1 - 1e-6 quantile. With a fixed seed the outcome is fixed, so the bound
// only has to be loose enough for a correct sampler and tight enough to
// fail a wrong one: when alt (the distribution of a plausible bug) differs
// from want, the same counts must be rejected against alt.
func checkDistribution(t *testing.T, counts []int, n int, want, alt []float64) {
	t.Helper()
	for i, q := range want {
		if q == 0 && counts[i] > 0 {
			t.Fatalf("token %d has probability 0 but was drawn %d times", i, counts[i])
		}
	}
	chi, df := chiSquare(counts, n, want)
	limit := chiSquareLimit(df)
	if chi > limit {
		t.Fatalf("chi-square %.1f with %d degrees of freedom exceeds %.1f\ncounts %v\nwant   %v", chi, df, limit, head(counts), headf(want, n))
	}
	if alt == nil || totalVariation(want, alt) < 0.01 {
		return
	}
	altChi, altDF := chiSquare(counts, n, alt)
	if altChi <= chiSquareLimit(altDF) {
		t.Fatalf("test has no power: counts also fit the alternative (chi-square %.1f, df %d)", altChi, altDF)
	}
}

// chiSquare bins tokens in id order until each bin expects at least 50
// draws (a short last bin joins the previous one) and returns Pearson's
// statistic with its degrees of freedom. Draws of tokens with probability
// 0 count against the bin they fall in.
func chiSquare(counts []int, n int, p []float64) (float64, int) {
	type bin struct{ obs, exp float64 }
	var bins []bin
	var cur bin
	for i, q := range p {
		cur.obs += float64(counts[i])
		cur.exp += q * float64(n)
		if cur.exp >= 50 {
			bins = append(bins, cur)
			cur = bin{}
		}
	}
	if len(bins) == 0 {
		bins = append(bins, cur)
	} else {
		bins[len(bins)-1].obs += cur.obs
		bins[len(bins)-1].exp += cur.exp
	}
	var chi float64
	for _, b := range bins {
		chi += (b.obs - b.exp) * (b.obs - b.exp) / b.exp
	}
	return chi, max(len(bins)-1, 1)
}

// chiSquareLimit is the Wilson–Hilferty approximation of the chi-square
// quantile at 1 - 1e-6 (z = 4.753).
func chiSquareLimit(df int) float64 {
	k := float64(df)
	c := 1 - 2/(9*k) + 4.753*math.Sqrt(2/(9*k))
	return k * c * c * c
}

func totalVariation(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += math.Abs(a[i] - b[i])
	}
	return s / 2
}

func head(c []int) []int {
	return c[:min(len(c), 12)]
}

func headf(p []float64, n int) []float64 {
	out := make([]float64, min(len(p), 12))
	for i := range out {
		out[i] = math.Round(p[i] * float64(n))
	}
	return out
}

// logf32 returns float32 ln(q) for each q, so that softmax(logf32(q)) = q.
func logf32(q ...float64) []float32 {
	out := make([]float32, len(q))
	for i, x := range q {
		out[i] = float32(math.Log(x))
	}
	return out
}
