// Package policy decides which parallel plan each step runs under. A policy
// sees only plain facts about the step (how many tokens, how many
// sequences) and returns one of the plans the executor holds, so the same
// policy drives the CPU engine, the GPU engine and the simulator.
package policy

import (
	"fmt"

	"github.com/gearboxlm/gearbox/parallel"
)

// Step is what a policy knows about the step it chooses a plan for.
type Step struct {
	Tokens int // batched tokens: prefill chunks plus decodes
	Seqs   int // sequences in the batch
}

// Policy picks a step's plan. Implementations are safe for concurrent use.
type Policy interface {
	Plan(s Step) parallel.Plan
	// Plans lists every plan the policy may return, so the executor can
	// hold their weight shards before the first step.
	Plans() []parallel.Plan
	String() string
}

// Static runs every step under one plan.
type Static struct{ P parallel.Plan }

// Plan returns the fixed plan.
func (s Static) Plan(Step) parallel.Plan { return s.P }

// Plans returns the fixed plan.
func (s Static) Plans() []parallel.Plan { return []parallel.Plan{s.P} }

func (s Static) String() string { return "static" }

// DefaultShiftThreshold is the batched-token count at or below which Shift
// runs the full-TP shift plan. ArcticInference documents 256 and defaults
// to 512 in code. We chose 256 by simulation (docs/simulator.md, "Shift
// threshold"): on 8×H200 with FP8 Llama-3.3-70B replaying the Azure code
// trace, thresholds from 128 to 1024 give the same goodput and within 2%
// the same median TTFT and TPOT, 256 the lowest median TTFT; 2048 doubles
// TPOT (prefill-carrying steps then run under TP) and halves goodput, and
// 64 loses 1% of peak throughput. 256 keeps decode-heavy steps (up to 256
// concurrent decodes) on TP and sends any step with a sizable prefill
// chunk to the base plan.
const DefaultShiftThreshold = 256

// Shift is Shift Parallelism's switch (paper 000, Algorithm 2): the base
// plan (SP, or SP×TP) when a step has more than Threshold batched tokens,
// else the shift plan (TP over the same ranks), which reads the same KV
// cache.
type Shift struct {
	Base      parallel.Plan
	Threshold int
}

// NewShift validates a Shift policy: the base must use SP.
func NewShift(base parallel.Plan, threshold int) (Shift, error) {
	if base.SP < 2 {
		return Shift{}, fmt.Errorf("shift policy: the base plan %s has no sequence parallelism to shift from (use sp ≥ 2)", base)
	}
	if threshold < 0 {
		return Shift{}, fmt.Errorf("shift policy: threshold must not be negative, got %d", threshold)
	}
	return Shift{Base: base, Threshold: threshold}, nil
}

// Plan returns the base plan above the threshold and the shift plan at or
// below it.
func (s Shift) Plan(st Step) parallel.Plan {
	if st.Tokens > s.Threshold {
		return s.Base
	}
	return s.Base.Shift()
}

// Plans returns the base and shift plans.
func (s Shift) Plans() []parallel.Plan { return []parallel.Plan{s.Base, s.Base.Shift()} }

func (s Shift) String() string { return "shift" }
