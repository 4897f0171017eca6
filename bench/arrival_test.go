package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func meanCV(xs []float64) (mean, cv float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(v/float64(len(xs))) / mean
}

func TestGammaGapStatistics(t *testing.T) {
	// Gaps of a rate-r process with shape k have mean 1/r and coefficient
	// of variation 1/√k (1 for Poisson).
	const n, rate = 40000, 8.0
	for _, k := range []float64{1, 0.25, 0.5, 4, math.Inf(1)} {
		gaps := gammaGaps(n, rate, k, rand.New(rand.NewPCG(42, 1)))
		mean, cv := meanCV(gaps)
		if math.Abs(mean*rate-1) > 0.03 {
			t.Errorf("burstiness %v: mean gap %v s, want %v", k, mean, 1/rate)
		}
		if want := 1 / math.Sqrt(k); math.Abs(cv-want) > 0.05*max(want, 0.1) {
			t.Errorf("burstiness %v: coefficient of variation %v, want %v", k, cv, want)
		}
	}
}

func TestArrivals(t *testing.T) {
	const n, rate = 2000, 20.0
	for _, k := range []float64{1, 0.5, 3} {
		a, err := Arrivals(n, rate, k, 7)
		if err != nil {
			t.Fatal(err)
		}
		// vLLM rescales so the last request arrives at n/rate: the mean
		// rate is exact.
		if got := a[n-1].Seconds(); math.Abs(got-n/rate) > 1e-6 {
			t.Errorf("burstiness %v: last arrival %v s, want %v", k, got, n/rate)
		}
		if !slices.IsSorted(a) || a[0] <= 0 {
			t.Errorf("burstiness %v: offsets not increasing from a first gap", k)
		}
		gaps := make([]float64, n)
		prev := time.Duration(0)
		for i, x := range a {
			gaps[i], prev = (x - prev).Seconds(), x
		}
		if _, cv := meanCV(gaps); math.Abs(cv-1/math.Sqrt(k)) > 0.1/math.Sqrt(k) {
			t.Errorf("burstiness %v: coefficient of variation %v", k, cv)
		}
		b, _ := Arrivals(n, rate, k, 7)
		c, _ := Arrivals(n, rate, k, 8)
		if !slices.Equal(a, b) || slices.Equal(a, c) {
			t.Errorf("burstiness %v: seed does not determine the offsets", k)
		}
	}
	for _, rate := range []float64{0, math.Inf(1)} {
		a, err := Arrivals(5, rate, 1, 1)
		if err != nil || !slices.Equal(a, make([]time.Duration, 5)) {
			t.Errorf("rate %v: %v, %v", rate, a, err)
		}
	}
	even, _ := Arrivals(4, 2, math.Inf(1), 1)
	if !slices.Equal(even, []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second}) {
		t.Errorf("infinite burstiness: %v", even)
	}
	for _, bad := range [][2]float64{{-1, 1}, {math.NaN(), 1}, {1, 0}, {1, -2}} {
		if _, err := Arrivals(3, bad[0], bad[1], 1); err == nil {
			t.Errorf("Arrivals(rate %v, burstiness %v) succeeded", bad[0], bad[1])
		}
	}
}

func TestReplayArrivals(t *testing.T) {
	reqs := []Request{{Arrival: 0}, {Arrival: time.Second}, {Arrival: 3 * time.Second}}
	got, err := ReplayArrivals(reqs, 4)
	if err != nil || !slices.Equal(got, []time.Duration{0, 250 * time.Millisecond, 750 * time.Millisecond}) {
		t.Fatalf("%v, %v", got, err)
	}
	for _, s := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if _, err := ReplayArrivals(reqs, s); err == nil {
			t.Errorf("time scale %v accepted", s)
		}
	}
}
