// Package policy decides where each step runs. Before the scheduler forms
// a step's batch, a policy sees the engine's state (queues, KV usage per
// tier) and decides the placement the step's KV lives under, the phase the
// batch may carry (prefill, decode or both) and so whether a transition
// runs first; once the batch is formed it may refine the placement among
// those sharing that KV (Shift's per-step switch). The same policy drives
// the CPU engine, the GPU engine and the simulator.
package policy

import (
	"fmt"
	"sync"

	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sched"
)

// Tier is one KV tier's occupancy.
type Tier struct {
	Used, Capacity int64 // blocks
}

// Usage is Used/Capacity, 0 for a tier with no capacity.
func (t Tier) Usage() float64 {
	if t.Capacity <= 0 {
		return 0
	}
	return float64(t.Used) / float64(t.Capacity)
}

// State is what a policy sees before a step's batch is formed.
type State struct {
	Waiting        int    // requests not yet admitted (preempted ones included)
	Running        int    // requests with KV on the device
	Prefilling     int    // running requests whose prompt is not fully computed
	Parked         int    // requests whose KV is on the host tier
	DeviceKV       Tier   // the executor's KV pool
	HostKV         Tier   // the host KV tier; zero without one
	HostFits       bool   // the next waiting request's prompt fits the host tier's free blocks (true when none waits)
	DeviceFits     bool   // it fits the device's free blocks (true when none waits)
	Idle           bool   // the last iteration scheduled nothing while requests were live
	Current        string // name of the placement the KV cache is under now
	StepsInCurrent int    // steps run since the last transition
}

// Decision is a policy's choice before batching.
type Decision struct {
	// Placement is the placement the step runs under (or, with a policy
	// that refines it per batch, one sharing its KV). When it does not
	// share the KV of State.Current, the engine runs the transition to it
	// before the step.
	Placement parallel.Placement
	Phase     sched.Phase // what the batch may carry; Mixed by default
	// Offload parks every request past its prompt on the host KV tier
	// after the step (as far as the tier has room); Onboard brings parked
	// requests back before the step, as far as device blocks allow.
	Offload, Onboard bool
}

// Batch is what a policy knows about a formed batch.
type Batch struct {
	Tokens int // batched tokens: prefill chunks plus decodes
	Seqs   int // sequences in the batch
}

// Policy places steps. Implementations are safe for concurrent use.
type Policy interface {
	// Decide runs before the scheduler forms each step's batch.
	Decide(s State) Decision
	// Place picks the placement the formed batch b runs under: d's
	// placement or one of Placements that shares its KV.
	Place(d Decision, b Batch) parallel.Placement
	// Placements lists every placement the policy may return, the first
	// one the placement the engine starts under, so the executor can hold
	// their weight shards before the first step.
	Placements() []parallel.Placement
	String() string
}

// Static runs every step under one placement.
type Static struct{ P parallel.Placement }

// NewStatic is the static policy of a plan's standard placement.
func NewStatic(p parallel.Plan) Static { return Static{P: parallel.Standard(p)} }

// Decide returns the fixed placement and mixed batches.
func (s Static) Decide(State) Decision { return Decision{Placement: s.P} }

// Place returns the fixed placement.
func (s Static) Place(Decision, Batch) parallel.Placement { return s.P }

// Placements returns the fixed placement.
func (s Static) Placements() []parallel.Placement { return []parallel.Placement{s.P} }

func (s Static) String() string { return "static" }

// DefaultShiftThreshold is the batched-token count at or below which Shift
// runs the full-TP shift placement. ArcticInference documents 256 and
// defaults to 512 in code. We chose 256 by simulation (docs/simulator.md,
// "Shift threshold"): on 8×H200 with FP8 Llama-3.3-70B replaying the Azure
// code trace, thresholds from 128 to 1024 give the same goodput and within
// 2% the same median TTFT and TPOT, 256 the lowest median TTFT; 2048
// doubles TPOT (prefill-carrying steps then run under TP) and halves
// goodput, and 64 loses 1% of peak throughput. 256 keeps decode-heavy
// steps (up to 256 concurrent decodes) on TP and sends any step with a
// sizable prefill chunk to the base placement.
const DefaultShiftThreshold = 256

// Shift is Shift Parallelism's switch (paper 000, Algorithm 2): the base
// placement (SP, or SP×TP) when a step has more than Threshold batched
// tokens, else the shift placement (TP over the same ranks), which shares
// the base's KV cache.
type Shift struct {
	Base, Shifted parallel.Placement
	Threshold     int
}

// NewShift validates a Shift policy: the base must use SP.
func NewShift(base parallel.Plan, threshold int) (Shift, error) {
	if base.SP < 2 {
		return Shift{}, fmt.Errorf("shift policy: the base plan %s has no sequence parallelism to shift from (use sp ≥ 2)", base)
	}
	if threshold < 0 {
		return Shift{}, fmt.Errorf("shift policy: threshold must not be negative, got %d", threshold)
	}
	return Shift{Base: parallel.Standard(base), Shifted: parallel.ShiftPlacement(base), Threshold: threshold}, nil
}

// Decide keeps the base placement's KV and mixed batches.
func (s Shift) Decide(State) Decision { return Decision{Placement: s.Base} }

// Place returns the base placement above the threshold and the shift
// placement at or below it.
func (s Shift) Place(_ Decision, b Batch) parallel.Placement {
	if b.Tokens > s.Threshold {
		return s.Base
	}
	return s.Shifted
}

// Placements returns the base and shift placements.
func (s Shift) Placements() []parallel.Placement {
	return []parallel.Placement{s.Base, s.Shifted}
}

func (s Shift) String() string { return "shift" }

// Seesaw is Seesaw's transition-minimising schedule (paper 004, §4.2):
// a prefill phase under Prefill (pipeline parallelism, say) that parks
// every prefilled request on the host KV tier, then a decode phase under
// Decode (tensor parallelism) that brings parked requests back as device
// blocks free up. The phase changes only when the host tier is full
// (prefill → decode: the next waiting prompt no longer fits it) or empty
// (decode → prefill: nothing parked, requests waiting), so transitions —
// a weight re-shard each — are few and decode batches stay full.
//
// Choices the paper leaves open (its S7), stated: (a) requests still
// decoding when the prefill phase starts keep their KV on the device
// (moved to the prefill placement by the transition) and resume in the
// next decode phase; the switch waits until the next prompt fits the
// device's free blocks, so a device full of decodes keeps decoding; (b)
// at the end of a workload, when nothing is left to prefill, the prefill
// phase ends with whatever is parked; (c) "full" is the next waiting
// prompt not fitting the tier's free blocks; (d) the prefill phase runs
// chunked prefill under the scheduler's token budget, prefill chunks
// only. A phase in which nothing can be scheduled (Idle) also ends.
// Two more: a decode that needs a block when none is free parks the
// lowest-priority running request on the host tier rather than
// recomputing it later (sched's swap preemption), so KV pressure does not
// send requests back to the prefill phase; and a request whose prompt
// and output outgrow the whole device pool is not refused up front: as
// everywhere in Gearbox it ends with "length" when it fills the pool.
type Seesaw struct {
	Prefill, Decode parallel.Placement

	mu          sync.Mutex
	decoding    bool
	transitions int
}

// NewSeesaw validates a Seesaw policy: the two placements run the same
// replicas on the same ranks.
func NewSeesaw(prefill, decode parallel.Plan) (*Seesaw, error) {
	if prefill.DP != decode.DP || prefill.Ranks() != decode.Ranks() {
		return nil, fmt.Errorf("seesaw policy: the prefill plan %s and the decode plan %s must use the same ranks and data parallelism (Seesaw changes only TP and PP)", prefill, decode)
	}
	p, d := parallel.Standard(prefill), parallel.Standard(decode)
	if p.Name == d.Name {
		d.Name += " (decode)"
	}
	return &Seesaw{Prefill: p, Decode: d}, nil
}

// Decide keeps the phase unless the host tier is full (or nothing is left
// to prefill) in the prefill phase, or empty with requests waiting (and
// room for the next prompt) in the decode phase.
func (s *Seesaw) Decide(st State) Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := st.Running+st.Parked > 0
	// Without a host tier the device is the only store: prefill until the
	// next prompt does not fit it, decode until it is empty.
	tier := st.HostKV.Capacity > 0
	full := !st.HostFits
	if !tier {
		full = !st.DeviceFits
	}
	empty := st.Parked == 0 && st.DeviceFits
	if !tier {
		empty = st.Running == 0
	}
	switch {
	case !s.decoding && live && (full || st.Idle || (st.Waiting == 0 && st.Prefilling == 0)):
		s.decoding = true
		s.transitions++
	case s.decoding && st.Waiting > 0 && (empty || (st.Idle && st.Running == 0)):
		s.decoding = false
		s.transitions++
	}
	if s.decoding {
		return Decision{Placement: s.Decode, Phase: sched.DecodeOnly, Onboard: true}
	}
	return Decision{Placement: s.Prefill, Phase: sched.PrefillOnly, Offload: true}
}

// Place keeps the decision's placement.
func (s *Seesaw) Place(d Decision, _ Batch) parallel.Placement { return d.Placement }

// Placements returns the prefill placement, where the engine starts, and
// the decode placement.
func (s *Seesaw) Placements() []parallel.Placement {
	return []parallel.Placement{s.Prefill, s.Decode}
}

// Transitions is the number of phase changes so far.
func (s *Seesaw) Transitions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.transitions
}

func (s *Seesaw) String() string { return "seesaw" }
