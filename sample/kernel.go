package sample

import (
	"math"
	"slices"
)

// chunkLen is the number of logits one pass of expInto handles at a time.
// Full-vocabulary sampling keeps one float64 sum per chunk so that finding
// the drawn token re-evaluates a single chunk rather than the vocabulary.
const chunkLen = 1024

var negInf = float32(math.Inf(-1))

// exp32 returns e^x for x <= 0 with a relative error below 3e-7, and 0 for
// x < -87 (where float32 would go subnormal), for -Inf and for NaN. It is
// written to be inlined into the vocabulary-wide loops, where it is about
// twice as fast as math.Exp: round x/ln2 to n with the 1.5·2^23 trick,
// reduce to r = x - n·ln2 in [-ln2/2, ln2/2], evaluate the degree-6 Taylor
// polynomial of e^r in Estrin's form (a short dependency chain, so that
// consecutive elements overlap) and scale by 2^n through the exponent bits.
func exp32(x float32) float32 {
	if !(x >= -87) {
		return 0
	}
	n := (x*1.442695 + 12582912) - 12582912
	r := x - n*0.69314575 - n*1.4286068e-06
	r2 := r * r
	p := (1 + r) + r2*((1.0/2+r*(1.0/6))+r2*((1.0/24+r*(1.0/120))+r2*(1.0/720)))
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// expInto sets dst[i] = e^((x[i]-m)·invT) for x[i] >= lo and 0 otherwise
// (NaN included), and returns the float64 sum of dst. The caller
// guarantees x[i] <= m for every x[i] >= lo. len(dst) >= len(x). The loop
// handles two elements per iteration, with a sum for each, which lets the
// CPU overlap their exponentials; the result is deterministic but may
// differ in the last bits from a sum in index order.
func expInto(dst, x []float32, m, invT, lo float32) float64 {
	dst = dst[:len(x)]
	var even, odd float64
	i := 0
	for ; i+1 < len(x); i += 2 {
		v0, v1 := x[i], x[i+1]
		var w0, w1 float32
		if v0 >= lo {
			w0 = exp32((v0 - m) * invT)
		}
		if v1 >= lo {
			w1 = exp32((v1 - m) * invT)
		}
		dst[i], dst[i+1] = w0, w1
		even += float64(w0)
		odd += float64(w1)
	}
	if i < len(x) {
		var w float32
		if x[i] >= lo {
			w = exp32((x[i] - m) * invT)
		}
		dst[i] = w
		even += float64(w)
	}
	return even + odd
}

// maxIndex returns the largest value of x and the lowest index holding it.
// NaN is never the maximum. If no element is greater than -Inf it returns
// (-Inf, -1).
func maxIndex(x []float32) (float32, int) {
	best, at := negInf, -1
	for i, v := range x {
		if v > best {
			best, at = v, i
		}
	}
	return best, at
}

// cand is one candidate token: its logit and id, and, once computed, its
// unnormalised probability w.
type cand struct {
	logit float32
	id    int32
	w     float32
}

// ranksBelow reports whether a ranks below b in the order every sorted
// output of this package uses: logit descending, then id ascending.
func ranksBelow(a, b cand) bool {
	return a.logit < b.logit || (a.logit == b.logit && a.id > b.id)
}

// byRank orders candidates logit descending, then id ascending.
func byRank(a, b cand) int {
	switch {
	case ranksBelow(b, a):
		return -1
	case ranksBelow(a, b):
		return 1
	}
	return 0
}

// sortByRank sorts c best first.
func sortByRank(c []cand) { slices.SortFunc(c, byRank) }

// topN keeps the n best tokens of x (in the byRank order, NaN counting as
// -Inf) in h, reusing its storage, and returns them as a min-heap whose
// root h[0] is the worst kept token. It also reports whether a token left
// out has the same logit as that root, which happens exactly when the
// tokens tied with the n-th best value are more than fit: callers that
// keep every tie (top-k does) then gather them with a second pass. When
// the root is -Inf the report may also be true for a NaN left out.
// n must be in [1, len(x)].
func topN(h []cand, x []float32, n int) (heap []cand, tiesLeftOut bool) {
	h = h[:0]
	i := 0
	for ; len(h) < n; i++ {
		v := x[i]
		if v != v {
			v = negInf
		}
		h = append(h, cand{logit: v, id: int32(i)})
	}
	for j := n/2 - 1; j >= 0; j-- {
		siftDown(h, j)
	}
	root := h[0].logit
	tie := false
	for ; i < len(x); i++ {
		v := x[i]
		if v > root {
			h[0] = cand{logit: v, id: int32(i)}
			siftDown(h, 0)
			tie = h[0].logit == root
			root = h[0].logit
		} else if v == root {
			// Scanning in increasing id, an equal logit ranks below the
			// root, so it is left out: a tie at the boundary.
			tie = true
		}
	}
	return h, tie
}

// siftDown restores the min-heap property (by ranksBelow) below h[i].
func siftDown(h []cand, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && ranksBelow(h[r], h[l]) {
			c = r
		}
		if !ranksBelow(h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
