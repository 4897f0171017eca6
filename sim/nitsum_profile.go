package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/slo"
)

// NitsumMaxBatch is the largest batch the offline profile tries, prefill
// and decode alike: SGLang's default --max-running-requests cap region
// and the paper's loose-tier batch of 128 (§4) with room above it
// (inferred; the paper does not give its profile's batch range).
const NitsumMaxBatch = 512

// NitsumPrefillShare is the part of a tier's TTFT a prefill batch may
// take in the offline profile: a request that arrives just after a batch
// started waits for it and then runs in the next, so a batch of at most
// half the TTFT keeps every request that finds its instance busy within
// the target (inferred: the paper inverts its profile against the TTFT
// without saying how it treats the wait).
const NitsumPrefillShare = 0.5

// Lengths are a tier's mean prompt and output lengths, tokens: what the
// profile's builder converts token throughputs with (spec P5: the paper
// never converts, so average lengths are needed).
type Lengths struct {
	Prompt, Output int
}

// NitsumProfiler builds Nitsum's offline profile (spec M2, §4.1) from the
// cost model: for every TP degree, the prefill step of a batch of prompts
// and the decode step of a batch of sequences, inverted against each
// tier's targets. It keeps one LayoutCost per degree and is not safe for
// concurrent use.
type NitsumProfiler struct {
	cost *CostModel
	cfg  *model.Config
	tp   []int
	lcs  []*LayoutCost
	buf  StepShape
}

// NewNitsumProfiler binds the profiler to a model on the cost model's
// node for TP degrees tp (ascending powers of two, each at most the
// node's GPUs and a degree the model's heads allow).
func NewNitsumProfiler(cm *CostModel, cfg *model.Config, tp []int) (*NitsumProfiler, error) {
	if len(tp) == 0 {
		return nil, errors.New("sim: nitsum profile: no TP degrees")
	}
	p := &NitsumProfiler{cost: cm, cfg: cfg, tp: tp}
	for _, t := range tp {
		lc, err := cm.Layout(cfg, parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: t}))
		if err != nil {
			return nil, fmt.Errorf("sim: nitsum profile: TP%d: %w", t, err)
		}
		p.lcs = append(p.lcs, lc)
	}
	return p, nil
}

// TP is the profiled degrees.
func (p *NitsumProfiler) TP() []int { return p.tp }

// Layout is the cost of degree index i.
func (p *NitsumProfiler) Layout(i int) *LayoutCost { return p.lcs[i] }

// PrefillStep is the seconds of one prefill step of batch prompts of
// prompt tokens each at degree index i.
func (p *NitsumProfiler) PrefillStep(i, batch, prompt int) float64 {
	p.buf.Seqs = p.buf.Seqs[:0]
	for range batch {
		p.buf.Seqs = append(p.buf.Seqs, Seq{New: prompt, Logits: 1})
	}
	return p.lcs[i].Step(&p.buf).Seconds
}

// DecodeStep is the seconds of one decode step of batch sequences of
// context tokens each at degree index i.
func (p *NitsumProfiler) DecodeStep(i, batch, context int) float64 {
	p.buf.Seqs = p.buf.Seqs[:0]
	for range batch {
		p.buf.Seqs = append(p.buf.Seqs, Seq{Context: context, New: 1, Logits: 1})
	}
	return p.lcs[i].Step(&p.buf).Seconds
}

// largest is the largest batch in [1, NitsumMaxBatch] whose step takes at
// most budget seconds (step times grow with the batch), or 0.
func largest(budget float64, step func(int) float64) (int, float64) {
	if step(1) > budget {
		return 0, 0
	}
	lo, hi := 1, NitsumMaxBatch
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if step(mid) <= budget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, step(lo)
}

// Capacity is what one instance of degree index i sustains for a tier of
// targets (ttft, tpot) and mean lengths l: X^P, the largest prefill batch
// whose step fits NitsumPrefillShare of the TTFT, over that step; X^D, the
// largest decode batch whose step (at the mean context halfway through the
// output) fits the TPOT, over that step times the output length. Both in
// requests per second.
func (p *NitsumProfiler) Capacity(i int, ttft, tpot time.Duration, l Lengths) nitsum.Capacity {
	var c nitsum.Capacity
	if b, t := largest(NitsumPrefillShare*ttft.Seconds(), func(b int) float64 { return p.PrefillStep(i, b, l.Prompt) }); b > 0 {
		c.Prefill, c.PrefillBatch = float64(b)/t, b
	}
	ctx := l.Prompt + l.Output/2
	if b, t := largest(tpot.Seconds(), func(b int) float64 { return p.DecodeStep(i, b, ctx) }); b > 0 {
		c.Decode, c.DecodeBatch = float64(b)/(t*float64(max(1, l.Output))), b
	}
	return c
}

// Profile is the planner's profile for tiers with mean lengths lens (one
// per tier; background tiers' rows are left empty).
func (p *NitsumProfiler) Profile(tiers *slo.Set, lens []Lengths) (nitsum.Profile, error) {
	if len(lens) != tiers.Len() {
		return nitsum.Profile{}, fmt.Errorf("sim: nitsum profile: %d length pairs for %d tiers", len(lens), tiers.Len())
	}
	prof := nitsum.Profile{TP: append([]int(nil), p.tp...), Cap: make([][]nitsum.Capacity, tiers.Len())}
	for s := range tiers.Len() {
		t := tiers.At(s)
		if t.Background {
			continue
		}
		prof.Cap[s] = make([]nitsum.Capacity, len(p.tp))
		for i := range p.tp {
			prof.Cap[s][i] = p.Capacity(i, t.TTFT, t.TPOT, lens[s])
		}
	}
	return prof, nil
}

// Restrict returns a copy of prof in which prefill may use only the
// degrees in pre and decode only those in dec (nil keeps every degree):
// the fixed configurations of the paper's Figure 3 as planner profiles.
func Restrict(prof nitsum.Profile, pre, dec []int) nitsum.Profile {
	out := nitsum.Profile{TP: append([]int(nil), prof.TP...), Cap: make([][]nitsum.Capacity, len(prof.Cap))}
	in := func(set []int, t int) bool { return set == nil || slices.Contains(set, t) }
	for s, row := range prof.Cap {
		out.Cap[s] = append([]nitsum.Capacity(nil), row...)
		for i := range out.Cap[s] {
			if !in(pre, prof.TP[i]) {
				out.Cap[s][i].Prefill, out.Cap[s][i].PrefillBatch = 0, 0
			}
			if !in(dec, prof.TP[i]) {
				out.Cap[s][i].Decode, out.Cap[s][i].DecodeBatch = 0, 0
			}
		}
	}
	return out
}
