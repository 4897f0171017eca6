package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gearboxlm/gearbox/bench"
)

// LengthDist is a length distribution given as the CSPS paper's Table 2
// gives its datasets (median, P99, standard deviation), sampled as a
// log-normal fitted to the median and P99 (μ = ln median, σ = ln(P99 /
// median)/z₀.₉₉) and clamped to [Min, Max]. The paper gives no
// distribution; a log-normal cannot match the std too, which is kept to
// report the fit's own against it (Std).
type LengthDist struct {
	Median, P99, Std float64 // Table 2
	Min, Max         int
}

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263478740408408

// Sigma is the fitted log-normal's σ.
func (d LengthDist) Sigma() float64 { return math.Log(d.P99/d.Median) / z99 }

// Sample draws one length.
func (d LengthDist) Sample(rng *rand.Rand) int {
	v := math.Exp(math.Log(d.Median) + d.Sigma()*rng.NormFloat64())
	return min(d.Max, max(d.Min, int(math.Round(v))))
}

// cspsMaxPrompt is the longest prompt: the models' 1M (2²⁰) context less
// the longest output, so prompt and output fit it.
const cspsMaxPrompt = 1<<20 - 4096

// Table 2 of the CSPS paper (papers/002 §5.2): NeedleBench and BookCorpus
// prompt and output lengths. Prompts are clamped to [1K, 1M − 4K] tokens
// (the models' 1M context; BookCorpus has no book ≥ 1M), outputs to 4K.
var (
	NeedleBenchInput  = LengthDist{Median: 113e3, P99: 995e3, Std: 506e3, Min: 1 << 10, Max: cspsMaxPrompt}
	NeedleBenchOutput = LengthDist{Median: 348, P99: 572, Std: 174, Min: 1, Max: 4096}
	BookCorpusInput   = LengthDist{Median: 97e3, P99: 406e3, Std: 183e3, Min: 1 << 10, Max: cspsMaxPrompt}
	BookCorpusOutput  = LengthDist{Median: 375, P99: 631, Std: 277, Min: 1, Max: 4096}
)

// CSPSWorkload is n requests with prompt and output lengths from in and out
// arriving as a Poisson process of rate requests per second (the paper's
// default 1 req/s), deterministic for a seed.
func CSPSWorkload(in, out LengthDist, n int, rate float64, seed uint64) []bench.Request {
	rng := rand.New(rand.NewPCG(seed, 0xc5b5))
	reqs := make([]bench.Request, n)
	t := 0.0
	for i := range reqs {
		t += rng.ExpFloat64() / rate
		reqs[i] = bench.Request{Index: i, Arrival: time.Duration(t * float64(time.Second)), InputTokens: in.Sample(rng), OutputTokens: out.Sample(rng)}
	}
	return reqs
}

// LengthStats are a sample's median, P99 and standard deviation.
func LengthStats(xs []int) (median, p99, std float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0, 0, 0
	}
	median = float64(s[len(s)/2])
	p99 = float64(s[min(len(s)-1, int(0.99*float64(len(s))))])
	mean := 0.0
	for _, x := range s {
		mean += float64(x)
	}
	mean /= float64(len(s))
	for _, x := range s {
		std += (float64(x) - mean) * (float64(x) - mean)
	}
	return median, p99, math.Sqrt(std / float64(len(s)))
}
