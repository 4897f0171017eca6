package sim

import (
	"fmt"

	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// SiDP (papers/001, specs/sidp.md) in the simulator.
//
// N data-parallel replicas of TP GPUs each share the FFN (MLP) weights:
// layer l's FFN lives only on replica o(l) = l mod N (its owner; the
// paper's assignment formula is blank, round-robin is what peak shifting's
// cycles of N layers imply), while attention, embeddings, norms and the
// LM head stay replicated. TP rank t of a replica reaches TP rank t of the
// owner (the paper never says how TP shards map to owners; this is the
// natural choice). A non-owned layer's FFN is reached in one of three
// modes, the same for every replica in an iteration:
//
//   - WaS (weight-as-a-service): each replica copies the layer's FFN shard
//     from the owner's HBM into one of its cache slots over NVLink,
//     one-sided, before it runs the layer; the copies recur every
//     iteration (sidp_was.go).
//   - CaS (compute-as-a-service): each replica sends its FFN input rows to
//     the owner, which runs one fused GEMM over every rank's rows and sends
//     the outputs back (sidp_cas.go).
//   - FSDP, the paper's Figure 14 baseline: every replica all-gathers every
//     FFN layer each iteration with a ring collective.
//
// In WaS the replicas are independent, each stepping on its own clock
// (the paper keeps DP independence in WaS, §4.2); in CaS and FSDP they
// run in lockstep: every iteration all N run, an idle one a dummy
// iteration of one token, and the iteration ends when the slowest is done
// (sidp_run.go).

// SiDPMode is how a replica reaches the FFN layers it does not own.
type SiDPMode uint8

const (
	WaS  SiDPMode = iota // copy the owner's weights into a local slot
	CaS                  // ship the activations to the owner
	FSDP                 // all-gather every FFN layer (the paper's baseline, not SiDP)
)

func (m SiDPMode) String() string {
	switch m {
	case WaS:
		return "WaS"
	case CaS:
		return "CaS"
	case FSDP:
		return "FSDP"
	}
	return fmt.Sprintf("SiDPMode(%d)", uint8(m))
}

// SiDP is one SiDP group's configuration.
type SiDP struct {
	Replicas int // N, the SiDP degree
	TP       int // tensor parallelism inside a replica; 0 means 1
	// Slots is the FFN layers each GPU's WaS cache holds; 0 means
	// 2(N−1): the N−1 remote layers of the cycle being computed (the
	// paper's "cache for N−1 remote layers", §4.2) and of the next cycle,
	// so that prefetching the next cycle never waits for the current
	// one's GEMMs (the paper's slot count is blank; see wasGroup).
	Slots int
	// NoPeakShift turns peak shifting off: every rank prefetches a cycle's
	// layers in layer order, so the readers of a layer meet at one owner
	// (Figure 10's baseline).
	NoPeakShift bool
	// NoFusion makes a CaS owner run one FFN GEMM per incoming chunk
	// instead of one fused GEMM (Figure 14's V1).
	NoFusion bool
	// NoDummySkip makes dummy replicas take part in CaS like busy ones:
	// they send their dummy rows and the owner waits for them (Figure 14's
	// V1 and V2).
	NoDummySkip bool
}

func (s SiDP) withDefaults() SiDP {
	if s.TP == 0 {
		s.TP = 1
	}
	if s.Slots == 0 {
		s.Slots = max(1, 2*(s.Replicas-1))
	}
	return s
}

// Plan is the group's GPUs as a plain DP×TP plan (the vLLM deployment
// the paper compares KV capacity with).
func (s SiDP) Plan() parallel.Plan {
	s = s.withDefaults()
	return parallel.Plan{DP: s.Replicas, PP: 1, SP: 1, TP: s.TP}
}

// Validate checks the group against the model: at least two replicas, a
// plan that fits the model, and, with peak shifting, N−1 slots (a rank may
// prefetch the last layer of a cycle first, so fewer slots could fill up
// with later layers while compute waits for an earlier one).
func (s SiDP) Validate(cfg *model.Config) error {
	s = s.withDefaults()
	if s.Replicas < 2 {
		return fmt.Errorf("sim: SiDP needs at least 2 replicas, got %d", s.Replicas)
	}
	if err := s.Plan().Validate(cfg); err != nil {
		return fmt.Errorf("sim: SiDP: %w", err)
	}
	if s.Slots < 1 || (!s.NoPeakShift && s.Slots < s.Replicas-1) {
		return fmt.Errorf("sim: SiDP with %d replicas needs %d WaS slots per GPU under peak shifting, got %d", s.Replicas, s.Replicas-1, s.Slots)
	}
	return nil
}

// Owner is the replica that holds layer l's FFN: l mod N.
func (s SiDP) Owner(l int) int { return l % s.Replicas }

// OwnedLayers is the number of FFN layers replica r owns out of layers.
func (s SiDP) OwnedLayers(r, layers int) int {
	n := layers / s.Replicas
	if r < layers%s.Replicas {
		n++
	}
	return n
}

// FFNShare is the FFN (gate, up and down projections and their biases)
// fraction of the model's parameters (§2.1: 77% of Qwen3-32B, 82% of
// Llama-3.1-405B).
func FFNShare(cfg *model.Config) float64 {
	return float64(ffnElems(cfg, 1, 0)*int64(cfg.Layers)) / float64(cfg.NumParams())
}

// ffnElems is one layer's FFN elements on TP rank t of tp, as
// parallel.Placement.WeightElems counts them.
func ffnElems(cfg *model.Config, tp, t int) int64 {
	h := int64(cfg.Hidden)
	inter := int64(parallel.Even(cfg.Intermediate, tp, t).Len())
	n := 3 * inter * h
	if cfg.MLPBias {
		n += 2*inter + h
	}
	return n
}

// FFNLayerBytes is one FFN layer's weight bytes on TP rank t of a
// replica: what a WaS fetch copies and a slot holds.
func (c *CostModel) FFNLayerBytes(cfg *model.Config, tp, t int) int64 {
	return ffnElems(cfg, tp, t) * c.wgtBytes
}

// SiDPMemory is one GPU's memory under SiDP beside the same GPU under the
// plain DP×TP deployment.
type SiDPMemory struct {
	Memory          // under SiDP: Weights without the non-owned FFN layers, KV what is left after Slots
	Baseline Memory // the same GPU under vLLM's DP×TP
	Slots    int64  // the WaS cache slots, bytes (C_slots)
	Freed    int64  // the non-owned FFN layers' bytes the GPU does not hold
}

// Gain is the KV bytes SiDP adds on the GPU: the freed FFN layers less
// the slots, (1−1/N)·F/TP − C_slots when N divides the layers (R18).
func (m SiDPMemory) Gain() int64 { return m.KV - m.Baseline.KV }

// SiDPMemory returns global rank r's memory (replica r/TP, TP rank r mod
// TP) under s, from the memory model of the same (TP, DP) deployment: the
// baseline's weights less the FFN layers the replica does not own, plus
// s.Slots FFN layers of WaS cache; the activation reserve is the
// baseline's (R18's overhead O).
func (c *CostModel) SiDPMemory(cfg *model.Config, s SiDP, r int, opts MemoryOptions) (SiDPMemory, error) {
	s = s.withDefaults()
	if err := s.Validate(cfg); err != nil {
		return SiDPMemory{}, err
	}
	base, err := c.Memory(cfg, s.Plan(), r, opts)
	if err != nil {
		return SiDPMemory{}, err
	}
	rep, t := r/s.TP, r%s.TP
	layer := c.FFNLayerBytes(cfg, s.TP, t)
	out := SiDPMemory{Memory: base, Baseline: base}
	out.Freed = int64(cfg.Layers-s.OwnedLayers(rep, cfg.Layers)) * layer
	out.Slots = int64(s.Slots) * layer
	out.Weights = base.Weights - out.Freed
	out.KV = max(0, out.Usable-out.Weights-out.Slots-out.Activations)
	out.KVTokens = 0
	if out.KVBytesPerToken > 0 {
		out.KVTokens = out.KV / out.KVBytesPerToken
	}
	return out, nil
}

// Fits reports whether the weights, slots and activations fit under SiDP.
func (m SiDPMemory) Fits() bool { return m.Weights+m.Slots+m.Activations <= m.Usable }

// SiDPKVCapacity returns the KV tokens each replica holds under s (the
// least over its TP ranks) and under the plain DP×TP deployment; a
// deployment whose weights do not fit holds 0.
func (c *CostModel) SiDPKVCapacity(cfg *model.Config, s SiDP, opts MemoryOptions) (sidp, baseline []int64, err error) {
	s = s.withDefaults()
	sidp, baseline = make([]int64, s.Replicas), make([]int64, s.Replicas)
	for r := 0; r < s.Replicas*s.TP; r++ {
		m, err := c.SiDPMemory(cfg, s, r, opts)
		if err != nil {
			return nil, nil, err
		}
		kv, kb := m.KVTokens, m.Baseline.KVTokens
		if !m.Fits() {
			kv = 0
		}
		if !m.Baseline.Fits() {
			kb = 0
		}
		rep := r / s.TP
		if r%s.TP == 0 || kv < sidp[rep] {
			sidp[rep] = kv
		}
		if r%s.TP == 0 || kb < baseline[rep] {
			baseline[rep] = kb
		}
	}
	return sidp, baseline, nil
}
