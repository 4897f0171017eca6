package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/slo"
)

// Measure asks New to measure the capacity profile (M2) on the warm
// executors at start-up, on this machine, instead of taking one: for
// every degree and batch size, the time of one prefill step of Batch
// prompts of PromptLen tokens and of one decode step of Batch sequences
// at context PromptLen, the faster of two runs.
type Measure struct {
	Degrees   []int // TP degrees, ascending powers of two; default 1, 2, 4, … up to the ranks and KV heads
	PromptLen int   // tokens per prompt; default 64
	OutputLen int   // output tokens per request, to turn decode steps into requests; default 64
	Batches   []int // batch sizes tried; default 1, 2, 4, 8
}

// DefaultDegrees are the TP degrees an instance may take on ranks ranks
// when none are given: 1, 2, 4, … up to the ranks and the KV heads, each
// a valid TP plan for cfg.
func DefaultDegrees(ranks int, cfg *model.Config) []int {
	var out []int
	for t := 1; t <= ranks && t <= cfg.KVHeads; t *= 2 {
		if (parallel.Plan{DP: 1, PP: 1, SP: 1, TP: t}).Validate(cfg) == nil {
			out = append(out, t)
		}
	}
	return out
}

func (m *Measure) defaults(ranks int, cfg *model.Config) {
	if len(m.Degrees) == 0 {
		m.Degrees = DefaultDegrees(ranks, cfg)
	}
	if m.PromptLen == 0 {
		m.PromptLen = 64
	}
	if m.OutputLen == 0 {
		m.OutputLen = 64
	}
	if len(m.Batches) == 0 {
		m.Batches = []int{1, 2, 4, 8}
	}
}

// Timing is one measured step.
type Timing struct {
	TP, Batch       int
	Prefill, Decode time.Duration
}

// profileFrom turns step timings into the planner's profile: for tier s
// at degree t, X^P is b/T_prefill(b) for the largest batch b whose
// prefill step fits the tier's TTFT (B^P = b), and X^D is
// b/(T_decode(b)·OutputLen) for the largest b whose decode step fits its
// TPOT (B^D = b); 0 when even batch 1 misses. Timings are by degree in
// m.Degrees order, batches ascending.
func profileFrom(tiers *slo.Set, m Measure, timings [][]Timing) nitsum.Profile {
	p := nitsum.Profile{TP: m.Degrees, Cap: make([][]nitsum.Capacity, tiers.Len())}
	for s := range tiers.Len() {
		t := tiers.At(s)
		if t.Background {
			continue
		}
		row := make([]nitsum.Capacity, len(m.Degrees))
		for i, ts := range timings {
			for _, x := range ts {
				if x.Prefill <= t.TTFT {
					row[i].Prefill, row[i].PrefillBatch = float64(x.Batch)/x.Prefill.Seconds(), x.Batch
				}
				if x.Decode <= t.TPOT {
					row[i].Decode, row[i].DecodeBatch = float64(x.Batch)/(x.Decode.Seconds()*float64(m.OutputLen)), x.Batch
				}
			}
		}
		p.Cap[s] = row
	}
	return p
}

// measure times prefill and decode steps on x, a warm executor of degree
// tp not yet serving, at every batch size whose KV fits its pool. It
// reads the wall clock, not Options.Clock: it measures the hardware.
func (c *Cluster) measure(ctx context.Context, x *cpuexec.Executor, tp int, m Measure) ([]Timing, error) {
	kv := x.KVLayout()
	per := (m.PromptLen + 1 + kv.BlockSize - 1) / kv.BlockSize
	pl := parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: tp})
	var out []Timing
	for _, b := range m.Batches {
		if b*per > kv.NumBlocks || m.PromptLen+1 > c.cfg.MaxPositions {
			break
		}
		seqs := make([]forward.SeqBatch, b)
		for i := range seqs {
			blocks := make([]int, per)
			for k := range blocks {
				blocks[k] = i*per + k
			}
			prompt := make([]int, m.PromptLen)
			for k := range prompt {
				prompt[k] = (7*i + 13*k + 1) % c.cfg.Vocab
			}
			seqs[i] = forward.SeqBatch{Tokens: prompt, Blocks: blocks, NumLogits: 1}
		}
		tm := Timing{TP: tp, Batch: b, Prefill: time.Duration(1<<63 - 1), Decode: time.Duration(1<<63 - 1)}
		for range 2 {
			start := time.Now()
			if _, err := x.Step(ctx, &forward.Batch{Seqs: seqs}, pl); err != nil {
				return nil, fmt.Errorf("cluster: measure prefill tp=%d batch %d: %w", tp, b, err)
			}
			tm.Prefill = min(tm.Prefill, max(time.Since(start), time.Nanosecond))
			dec := make([]forward.SeqBatch, b)
			for i, s := range seqs {
				dec[i] = forward.SeqBatch{Tokens: []int{1}, Pos: m.PromptLen, Blocks: s.Blocks, NumLogits: 1}
			}
			start = time.Now()
			if _, err := x.Step(ctx, &forward.Batch{Seqs: dec}, pl); err != nil {
				return nil, fmt.Errorf("cluster: measure decode tp=%d batch %d: %w", tp, b, err)
			}
			tm.Decode = min(tm.Decode, max(time.Since(start), time.Nanosecond))
		}
		out = append(out, tm)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cluster: measure tp=%d: a %d-token prompt does not fit the KV pool of %d blocks of %d", tp, m.PromptLen, kv.NumBlocks, kv.BlockSize)
	}
	return out, nil
}
