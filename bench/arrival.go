package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Arrivals returns the send offsets, from the start of the run, of n
// requests at rate requests/s, the way vllm bench serve draws them:
// inter-arrival gaps are gamma-distributed with shape burstiness and mean
// 1/rate (burstiness 1 is a Poisson process, below 1 burstier, above 1
// more even, +Inf evenly spaced), the first request waits one gap, and the
// offsets are then scaled so the last one falls exactly at n/rate, which
// keeps the offered load the same for every seed. A rate of 0 or +Inf
// sends everything at once. The same seed gives the same offsets.
func Arrivals(n int, rate, burstiness float64, seed int64) ([]time.Duration, error) {
	if math.IsNaN(rate) || rate < 0 {
		return nil, fmt.Errorf("request rate %v: want a positive number, or 0 or inf for all at once", rate)
	}
	if math.IsNaN(burstiness) || burstiness <= 0 {
		return nil, fmt.Errorf("burstiness %v: want a positive number", burstiness)
	}
	out := make([]time.Duration, n)
	if rate == 0 || math.IsInf(rate, 1) || n == 0 {
		return out, nil
	}
	gaps := gammaGaps(n, rate, burstiness, rand.New(rand.NewPCG(uint64(seed), 0xa771a1)))
	t := 0.0
	for i, g := range gaps {
		t += g
		gaps[i] = t
	}
	scale := 1.0
	if t > 0 {
		scale = float64(n) / rate / t
	}
	for i, c := range gaps {
		out[i] = time.Duration(c * scale * float64(time.Second))
	}
	return out, nil
}

// gammaGaps draws n inter-arrival gaps in seconds with mean 1/rate and
// shape burstiness.
func gammaGaps(n int, rate, burstiness float64, rng *rand.Rand) []float64 {
	gaps := make([]float64, n)
	for i := range gaps {
		if math.IsInf(burstiness, 1) {
			gaps[i] = 1 / rate
			continue
		}
		gaps[i] = gammaVariate(rng, burstiness) / (rate * burstiness)
	}
	return gaps
}

// gammaVariate draws from Gamma(shape, 1) by Marsaglia and Tsang's method,
// boosting shapes below 1 with U^(1/shape).
func gammaVariate(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		return gammaVariate(rng, shape+1) * math.Pow(1-rng.Float64(), 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := 1 - rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// ReplayArrivals returns the trace's own arrival offsets divided by
// timeScale (2 replays twice as fast).
func ReplayArrivals(reqs []Request, timeScale float64) ([]time.Duration, error) {
	if !(timeScale > 0) || math.IsInf(timeScale, 1) {
		return nil, fmt.Errorf("time scale %v: want a positive number", timeScale)
	}
	out := make([]time.Duration, len(reqs))
	for i, r := range reqs {
		out[i] = time.Duration(float64(r.Arrival) / timeScale)
	}
	return out, nil
}
