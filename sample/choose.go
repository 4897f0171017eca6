package sample

import "math"

// prefilterNats are the depths, in nats of tempered logit below the
// maximum, at which drawTopP gathers candidates for the nucleus before
// falling back to every token (+Inf). It is read-only; only tests change
// it, to reach the fallback.
var prefilterNats = [...]float32{8, 16, 32, float32(math.Inf(1))}

// draw samples one token from the penalised logits with temperature,
// min-p, top-k and top-p, using u (uniform in [0, 1)) as the random draw.
// It returns -1 if every logit is -Inf or NaN.
//
// Each path touches the vocabulary as few times as it can: top-k keeps a
// k-element heap in one pass and works on the k survivors; top-p gathers
// only the tokens near the top (see drawTopP) and sorts those; temperature
// and min-p alone need one pass for the maximum and one of exponentials.
func (s *Sampler) draw(logits []float32, u float64) int {
	if s.topK > 0 {
		return s.drawTopK(logits, u)
	}
	m, _ := maxIndex(logits)
	switch {
	case m == negInf:
		return -1
	case math.IsInf(float64(m), 1):
		return s.drawInfinite(logits, u)
	}
	lo := s.minPFloor(m)
	if s.topP < 1 {
		return s.drawTopP(logits, m, lo, u)
	}
	return s.drawFull(logits, m, lo, u)
}

// minPFloor returns the smallest logit min-p keeps when the largest is m:
// probability p_i >= minP·p_max exactly when l_i >= m + T·ln(minP).
func (s *Sampler) minPFloor(m float32) float32 {
	if s.minP == 0 {
		return negInf
	}
	return float32(float64(m) + float64(s.temp)*s.logMinP)
}

// weight is the unnormalised probability of a logit l when the largest
// kept logit is m.
func (s *Sampler) weight(l, m float32) float32 { return exp32((l - m) * s.invT) }

// fullMass sets s.blocks to the weight of each chunk of the vocabulary,
// counting only logits >= lo, and returns their sum.
func (s *Sampler) fullMass(logits []float32, m, lo float32) float64 {
	var total float64
	for b := range s.blocks {
		start := b * chunkLen
		z := expInto(s.chunk, logits[start:min(start+chunkLen, len(logits))], m, s.invT, lo)
		s.blocks[b] = z
		total += z
	}
	return total
}

// drawFull samples from every token with logit >= lo by inverting the
// cumulative distribution: the per-chunk sums locate the chunk, and only
// that chunk's weights are evaluated again.
func (s *Sampler) drawFull(logits []float32, m, lo float32, u float64) int {
	target := u * s.fullMass(logits, m, lo)
	block := -1
	for b, z := range s.blocks {
		if target < z {
			block = b
			break
		}
		target -= z
	}
	if block < 0 {
		// u·total rounded past the last token: take the last one that has
		// weight.
		for b := len(s.blocks) - 1; b >= 0 && block < 0; b-- {
			if s.blocks[b] > 0 {
				block = b
			}
		}
		target = math.Inf(1)
	}
	start := block * chunkLen
	x := logits[start:min(start+chunkLen, len(logits))]
	expInto(s.chunk, x, m, s.invT, lo)
	return start + pick(s.chunk[:len(x)], target)
}

// pick returns the first index whose running sum of w exceeds target, or
// the last index with positive weight if none does (target is past the
// sum, by rounding).
func pick(w []float32, target float64) int {
	var acc float64
	last := -1
	for i, x := range w {
		if x > 0 {
			acc += float64(x)
			last = i
			if acc > target {
				return i
			}
		}
	}
	return last
}

// drawTopK samples under top-k: one pass keeps the k best logits in a
// heap (a second one gathers the ties of the k-th when vLLM's keep-all-ties
// rule needs more than k), then min-p and top-p act on those candidates.
func (s *Sampler) drawTopK(logits []float32, u float64) int {
	c, ties := topN(s.cands, logits, s.topK)
	s.cands = c
	m := negInf
	for _, x := range c {
		m = max(m, x.logit)
	}
	switch {
	case m == negInf:
		return -1
	case math.IsInf(float64(m), 1):
		return s.drawInfinite(logits, u)
	}
	if ties {
		kth := c[0].logit // the heap's root: the worst kept logit
		c = gatherBand(c[:0], logits, kth, float32(math.Inf(1)))
		s.cands = c
	}
	lo := s.minPFloor(m)
	kept := c[:0]
	var total float64
	for _, x := range c {
		if x.logit >= lo {
			x.w = s.weight(x.logit, m)
			total += float64(x.w)
			kept = append(kept, x)
		}
	}
	return s.pickCands(kept, total, u)
}

// drawInfinite samples when some logits are +Inf: the limit distribution
// is uniform over them, and every filter keeps all of them but top-p.
func (s *Sampler) drawInfinite(logits []float32, u float64) int {
	c := s.cands[:0]
	for i, v := range logits {
		if v > math.MaxFloat32 {
			c = append(c, cand{logit: v, id: int32(i), w: 1})
		}
	}
	s.cands = c
	return s.pickCands(c, float64(len(c)), u)
}

// drawTopP samples under top-p without sorting the vocabulary. The
// nucleus is a prefix of the tokens in rank order, so any set "every
// token with logit >= f" whose mass reaches top_p contains it. drawTopP
// gathers such sets for f at 8, 16 and 32 nats (of tempered logit) below
// the maximum, widening only while the mass falls short, and finally
// takes every token; pickCands then sorts only what the nucleus needs.
func (s *Sampler) drawTopP(logits []float32, m, lo float32, u float64) int {
	total := s.fullMass(logits, m, lo)
	need := float64(s.topP) * total * (1 + roundingMargin)
	c := s.cands[:0]
	var mass float64
	hi := float32(math.Inf(1))
	for _, nats := range prefilterNats {
		floor := max(m-nats*s.temp, lo)
		n := len(c)
		c = gatherBand(c, logits, floor, hi)
		for i := n; i < len(c); i++ {
			c[i].w = s.weight(c[i].logit, m)
			mass += float64(c[i].w)
		}
		if mass >= need || floor == lo {
			break
		}
		hi = floor
	}
	s.cands = c
	return s.pickCands(c, total, u)
}

// roundingMargin covers the difference between summing the same weights
// in two orders (at most about n·2⁻⁵³ relative for n <= 2³¹ tokens), so
// that a candidate set whose mass reaches top_p·(1+margin) in one order
// surely reaches top_p in rank order.
const roundingMargin = 1e-9

// gatherBand appends to c, in id order, every token with lo <= logit < hi.
func gatherBand(c []cand, logits []float32, lo, hi float32) []cand {
	for i, v := range logits {
		if v >= lo && v < hi {
			c = append(c, cand{logit: v, id: int32(i)})
		}
	}
	return c
}

// pickCands samples from candidates c with their weights set; total is
// the weight of the whole distribution being truncated (more than c's
// when c is a top-p prefilter). With top-p it first cuts c to the nucleus.
func (s *Sampler) pickCands(c []cand, total, u float64) int {
	if s.topP < 1 {
		c, total = nucleus(c, float64(s.topP)*total)
	}
	target := u * total
	var acc float64
	last := -1
	for _, x := range c {
		if x.w > 0 {
			acc += float64(x.w)
			last = int(x.id)
			if acc > target {
				return last
			}
		}
	}
	return last
}

// nucleus returns the top-p nucleus of c and its weight: in rank order, a
// token is kept while the weight ranked above it is below need (top_p
// times the total), which is vLLM's "drop where the ascending cumulative
// probability is at most 1 - top_p" and keeps at least one token. c must
// hold every token ranked above any of its members.
//
// Rather than sorting c, nucleus buckets the weights by binary exponent,
// finds the bucket where the cumulative weight reaches need, and sorts
// only the candidates in that bucket and above; those are a rank prefix,
// because the bucket never increases with the logit. c is reordered.
func nucleus(c []cand, need float64) ([]cand, float64) {
	var mass [64]float64
	for _, x := range c {
		mass[bucket(x.w)] += float64(x.w)
	}
	cut := len(mass) - 1
	var cum float64
	for b, z := range mass {
		cum += z
		if cum >= need*(1+roundingMargin) {
			cut = b
			break
		}
	}
	n := 0
	for i, x := range c {
		if bucket(x.w) <= cut {
			c[i], c[n] = c[n], c[i]
			n++
		}
	}
	if kept, w, ok := walkNucleus(c[:n], need); ok || n == len(c) {
		return kept, w
	}
	// Unreachable unless rounding beat the margin: use every candidate.
	kept, w, _ := walkNucleus(c, need)
	return kept, w
}

// walkNucleus sorts c by rank and keeps tokens while the weight before
// them is below need. ok reports whether the kept weight reached need.
func walkNucleus(c []cand, need float64) (kept []cand, w float64, ok bool) {
	sortByRank(c)
	for i, x := range c {
		if w >= need {
			return c[:i], w, true
		}
		w += float64(x.w)
	}
	return c, w, w >= need
}

// bucket returns 0 for weight 1, b for weights in [2^-b, 2^(1-b)) and 63
// for anything smaller, zero included.
func bucket(w float32) int {
	b := 127 - int(math.Float32bits(w)>>23)
	return min(max(b, 0), 63)
}
