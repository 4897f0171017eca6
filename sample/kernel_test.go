package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestExp32(t *testing.T) {
	var worst float64
	for i := 0; i <= 870000; i++ {
		x := float32(-float64(i) / 10000)
		want := math.Exp(float64(x))
		got := float64(exp32(x))
		if rel := math.Abs(got-want) / want; rel > worst {
			worst = rel
		}
	}
	if worst > 3e-7 {
		t.Errorf("exp32 relative error %.3g, want <= 3e-7", worst)
	}
	for _, x := range []float32{-87.5, -1000, float32(math.Inf(-1)), float32(math.NaN())} {
		if got := exp32(x); got != 0 {
			t.Errorf("exp32(%v) = %v, want 0", x, got)
		}
	}
	if got := exp32(0); got != 1 {
		t.Errorf("exp32(0) = %v, want 1", got)
	}
}

// TestTopN compares the heap against a full sort, on values with many
// ties, NaNs and infinities, for every n.
func TestTopN(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	special := []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1))}
	for trial := range 200 {
		x := make([]float32, 1+r.IntN(40))
		for i := range x {
			x[i] = float32(r.IntN(6))
			if r.IntN(8) == 0 {
				x[i] = special[r.IntN(len(special))]
			}
		}
		all := make([]cand, len(x))
		for i, v := range x {
			if v != v {
				v = negInf
			}
			all[i] = cand{logit: v, id: int32(i)}
		}
		sortByRank(all)
		for n := 1; n <= len(x); n++ {
			h, ties := topN(nil, x, n)
			sortByRank(h)
			if !slices.Equal(h, all[:n]) {
				t.Fatalf("trial %d n %d: topN = %v, want %v", trial, n, h, all[:n])
			}
			// A tie is left out when a non-NaN token beyond the first n has
			// the n-th value. With a root of -Inf, a NaN left out may also
			// count (NaN ranks as -Inf), which only costs the caller a pass.
			wantTies := false
			for _, c := range all[n:] {
				if c.logit == all[n-1].logit && x[c.id] == x[c.id] {
					wantTies = true
				}
			}
			if ties != wantTies && !(ties && h[n-1].logit == negInf) {
				t.Fatalf("trial %d n %d of %v: ties = %v, want %v", trial, n, x, ties, wantTies)
			}
		}
	}
}

// TestNucleus compares the bucketed nucleus with a sort of every
// candidate, on weights spanning many buckets and with ties.
func TestNucleus(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 500 {
		c := make([]cand, 1+r.IntN(300))
		var total float64
		for i := range c {
			l := -float32(r.IntN(60)) / 3
			c[i] = cand{logit: l, id: int32(i), w: exp32(l)}
			total += float64(c[i].w)
		}
		need := r.Float64() * total
		ref := slices.Clone(c)
		sortByRank(ref)
		var cum float64
		n := 0
		for _, x := range ref {
			if cum >= need {
				break
			}
			cum += float64(x.w)
			n++
		}
		got, w := nucleus(c, need)
		if !slices.Equal(got, ref[:n]) || w != cum {
			t.Fatalf("trial %d: nucleus kept %d tokens (weight %v), want %d (%v)", trial, len(got), w, n, cum)
		}
	}
}

func TestBucket(t *testing.T) {
	for _, tc := range []struct {
		w    float32
		want int
	}{{1, 0}, {0.75, 1}, {0.5, 1}, {0.4999, 2}, {0x1p-62, 62}, {0x1p-63, 63}, {1e-30, 63}, {0, 63}} {
		if got := bucket(tc.w); got != tc.want {
			t.Errorf("bucket(%v) = %d, want %d", tc.w, got, tc.want)
		}
	}
}
