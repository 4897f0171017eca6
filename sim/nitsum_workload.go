package sim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// NitsumWorkload is a tiered workload: one stream per tier (the paper adds
// a tier by adding a workload, §4.2.2, so each tier is one workload;
// inferred), each with its mean lengths and its share of the rate.
//
// It stands in for the ServeGen traces, whose statistics the paper's text
// lost: arrivals are Poisson with a rate that is piecewise constant over
// Segment seconds, each segment's rate drawn log-normal around the mean
// (σ = Burst), independently per tier, so demand and the tier mix move
// from one control window to the next as the paper's Figure 1 describes
// (its values are stripped; Segment and Burst are this stand-in's
// choices, not fitted to anything). Lengths are log-normal with σ =
// LengthSigma around each tier's mean.
type NitsumWorkload struct {
	Rate    float64   // req/s over all tiers
	Seconds float64   // trace length
	Share   []float64 // per tier, sums to 1
	Lengths []Lengths // per tier, means
	Segment float64   // seconds; 0 means NitsumSegment
	Burst   float64   // σ of a segment's log rate; 0 means NitsumBurst
	Seed    uint64
}

// Defaults of the workload stand-in (choices, see NitsumWorkload).
const (
	NitsumSegment     = 5.0 // "micro-bursts can last under 10 s" (§3.2.2)
	NitsumBurst       = 0.5
	NitsumLengthSigma = 0.8
)

// Azure LLM inference trace means as the Nitsum paper gives them (§4
// Workloads): conversation 1,155 prompt and 211 output tokens, code 2,048
// and 28.
var (
	AzureConversation = Lengths{Prompt: 1155, Output: 211}
	AzureCode         = Lengths{Prompt: 2048, Output: 28}
)

// Requests draws the workload, in arrival order.
func (w NitsumWorkload) Requests() ([]NitsumRequest, error) {
	if len(w.Share) == 0 || len(w.Share) != len(w.Lengths) || !(w.Rate > 0) || !(w.Seconds > 0) {
		return nil, fmt.Errorf("sim: nitsum workload: want a positive rate and length and one share per length pair, got %+v", w)
	}
	seg, burst := w.Segment, w.Burst
	if seg == 0 {
		seg = NitsumSegment
	}
	if burst == 0 {
		burst = NitsumBurst
	}
	rng := rand.New(rand.NewPCG(w.Seed, 0x5eed))
	var out []NitsumRequest
	for s, share := range w.Share {
		l := w.Lengths[s]
		pd := meanLengthDist(l.Prompt, 16*l.Prompt)
		od := meanLengthDist(l.Output, 16*l.Output)
		for t0 := 0.0; t0 < w.Seconds; t0 += seg {
			rate := w.Rate * share * math.Exp(burst*rng.NormFloat64()-burst*burst/2)
			end := min(w.Seconds, t0+seg)
			for t := t0 + rng.ExpFloat64()/rate; t < end; t += rng.ExpFloat64() / rate {
				out = append(out, NitsumRequest{Arrival: t, Input: pd.Sample(rng), Output: od.Sample(rng), Tier: s})
			}
		}
	}
	sortRequests(out)
	return out, nil
}

// meanLengthDist is the log-normal of mean m and σ NitsumLengthSigma as
// a LengthDist (median m·e^(−σ²/2), P99 median·e^(σ·z₀.₉₉)), in [1, hi].
func meanLengthDist(m, hi int) LengthDist {
	sigma := NitsumLengthSigma
	med := float64(m) * math.Exp(-sigma*sigma/2)
	return LengthDist{Median: med, P99: med * math.Exp(sigma*z99), Min: 1, Max: hi}
}

func sortRequests(r []NitsumRequest) {
	slices.SortStableFunc(r, func(a, b NitsumRequest) int { return cmp.Compare(a.Arrival, b.Arrival) })
}
