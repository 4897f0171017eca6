package sample

import (
	"fmt"
	"math"
)

// rawDist describes log_softmax of the raw logits of one Sample call.
type rawDist struct {
	lse     float64 // log Σ e^x, so that logprob(x) = x - lse
	nPosInf int     // > 0: some logits are +Inf, each with probability 1/nPosInf
	allNeg  bool    // no logit above -Inf: uniform over the vocabulary
	vocab   int
}

// rawDist computes the raw distribution's normaliser and, when Result.Top
// is wanted, leaves the best raw logits in s.top, sorted by rank. It must
// run before the penalties touch logits.
func (s *Sampler) rawDist(logits []float32) rawDist {
	d := rawDist{vocab: len(logits)}
	var m float32
	if s.nTop > 0 {
		s.top, _ = topN(s.top, logits, s.nTop)
		sortByRank(s.top)
		m = s.top[0].logit
	} else {
		m, _ = maxIndex(logits)
	}
	switch {
	case m == negInf:
		d.allNeg = true
	case math.IsInf(float64(m), 1):
		for _, v := range logits {
			if v > math.MaxFloat32 {
				d.nPosInf++
			}
		}
	default:
		var total float64
		for start := 0; start < len(logits); start += chunkLen {
			total += expInto(s.chunk, logits[start:min(start+chunkLen, len(logits))], m, 1, negInf)
		}
		d.lse = float64(m) + math.Log(total)
	}
	return d
}

// logprob returns the raw log-probability of a token whose raw logit is x.
func (d *rawDist) logprob(x float32) float32 {
	switch {
	case d.allNeg:
		return float32(-math.Log(float64(d.vocab)))
	case d.nPosInf > 0:
		if x > math.MaxFloat32 {
			return float32(-math.Log(float64(d.nPosInf)))
		}
		return negInf
	case x != x:
		return negInf
	}
	return float32(float64(x) - d.lse)
}

// topList returns the n best tokens of top (sorted by rank) with their
// log-probabilities, in a new slice; nil when n is 0.
func (d *rawDist) topList(top []cand, n int) []Logprob {
	if n == 0 {
		return nil
	}
	out := make([]Logprob, len(top))
	for i, c := range top {
		out[i] = Logprob{Token: int(c.id), Logprob: d.logprob(c.logit)}
	}
	return out
}

// LogprobOf returns the raw log-probability of token under logits
// (log_softmax, as Result.Logprob reports it for a sampled token) and, for
// top > 0, the top most likely tokens (as Result.Top): the log-probability
// of a prompt token at its position (vLLM's prompt_logprobs), with its
// Rank. It does not
// modify logits. It panics if token is outside logits, which is a bug in
// the caller.
func LogprobOf(logits []float32, token, top int) Result {
	if token < 0 || token >= len(logits) {
		panic(fmt.Sprintf("sample: LogprobOf got token %d outside the vocabulary [0, %d)", token, len(logits)))
	}
	s := Sampler{nTop: min(max(top, 0), len(logits)), chunk: make([]float32, chunkLen)}
	d := s.rawDist(logits)
	x, rank := logits[token], 1
	if x == x { // a NaN logit counts as -Inf: every larger one ranks first
		for _, v := range logits {
			if v > x {
				rank++
			}
		}
	} else {
		for _, v := range logits {
			if v > negInf {
				rank++
			}
		}
	}
	return Result{Token: token, Logprob: d.logprob(x), Top: d.topList(s.top, s.nTop), Rank: rank}
}
