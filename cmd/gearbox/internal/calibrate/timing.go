package calibrate

import (
	"context"
	"slices"
	"time"
)

// perCall runs fn back to back until at least minDur has passed (and at
// least once) and returns the seconds of one call. fn gets the call's
// index, so it can rotate through buffers.
func perCall(minDur time.Duration, fn func(i int)) float64 {
	start := time.Now()
	n := 0
	for {
		fn(n)
		n++
		if d := time.Since(start); d >= minDur {
			return d.Seconds() / float64(n)
		}
	}
}

// rounds measures every case once per round, for the given number of
// rounds, and returns each case's median: interleaving the cases spreads
// a noisy machine's slow spells over all of them instead of one. measure
// returns seconds. It stops early with ctx's error.
func rounds(ctx context.Context, n, cases int, measure func(c int) (float64, error)) ([]float64, error) {
	samples := make([][]float64, cases)
	for r := 0; r < n; r++ {
		for c := 0; c < cases; c++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			s, err := measure(c)
			if err != nil {
				return nil, err
			}
			samples[c] = append(samples[c], s)
		}
	}
	out := make([]float64, cases)
	for c, s := range samples {
		out[c] = median(s)
	}
	return out, nil
}

// median is the middle value (the mean of the two middle ones for an
// even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
