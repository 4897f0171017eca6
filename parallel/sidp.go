package parallel

import (
	"fmt"

	"github.com/gearboxlm/gearbox/model"
)

// SiDP (paper 001, spec sidp.md) pools the MLP weights of a plan's
// data-parallel replicas: each layer's gate, up and down matrices are held
// by exactly one owner replica, o(l) = l mod DP (the paper's formula is
// lost; round robin is what its peak-shifting cycles of DP consecutive
// layers imply, R3), and every other replica either fetches them for the
// layer (Weight-as-a-Service) or ships the layer's MLP input rows to the
// owner and gets the MLP output back (Compute-as-a-Service). Attention,
// norms, biases, the embedding and the LM head stay replicated as under
// plain DP (R1). Under TP inside a replica, TP rank t of replica r reads
// (or ships to) TP rank t of replica o(l), which holds the same
// intermediate columns (R17's natural choice). SiDP here needs PP = 1 and
// SP = 1.

// FFNMode is how a placement's replicas reach the MLP weights.
type FFNMode uint8

const (
	FFNLocal FFNMode = iota // every replica holds every layer's MLP (plain DP)
	FFNWaS                  // SiDP, Weight-as-a-Service: non-owners fetch FFN_l into a slot and compute locally
	FFNCaS                  // SiDP, Compute-as-a-Service: non-owners ship their MLP input rows to o(l)
)

func (m FFNMode) String() string {
	switch m {
	case FFNLocal:
		return "local"
	case FFNWaS:
		return "was"
	case FFNCaS:
		return "cas"
	}
	return fmt.Sprintf("ffn(%d)", uint8(m))
}

// Pooled reports whether the MLP weights are pooled over the replicas
// (SiDP, either mode): a replica's shard then holds only the MLPs of the
// layers it owns.
func (m FFNMode) Pooled() bool { return m == FFNWaS || m == FFNCaS }

// SiDPPlacement is plan's standard placement with its MLP weights pooled
// over its replicas, in mode (FFNWaS or FFNCaS); it is named as the plan
// followed by "sidp-was" or "sidp-cas". Both modes hold the same pieces
// and the same KV, so a step may run under either.
func SiDPPlacement(p Plan, mode FFNMode) (Placement, error) {
	if !mode.Pooled() {
		return Placement{}, fmt.Errorf("sidp placement of %s: mode %s does not pool the MLP", p, mode)
	}
	if p.DP < 2 {
		return Placement{}, fmt.Errorf("sidp placement of %s: SiDP pools the MLP over data-parallel replicas and needs dp ≥ 2", p)
	}
	if p.PP != 1 || p.SP != 1 {
		return Placement{}, fmt.Errorf("sidp placement of %s: SiDP supports dp×tp plans only (pp=1, sp=1)", p)
	}
	l := Standard(p)
	l.FFN = mode
	l.Name = fmt.Sprintf("%s sidp-%s", p, mode)
	return l, nil
}

// FFNOwner is the replica that holds layer's MLP under SiDP: layer mod DP.
func (l Placement) FFNOwner(layer int) int { return layer % l.Plan.DP }

// FFNSource is the global rank that holds the MLP piece of layer that
// global rank r computes with: r itself without pooling or when its
// replica owns the layer, else the rank at r's (pp, sp, tp) in the
// owner replica.
func (l Placement) FFNSource(r, layer int) int {
	c := l.Coords[r]
	if !l.FFN.Pooled() || l.FFNOwner(layer) == c.DP {
		return r
	}
	o := c
	o.DP = l.FFNOwner(layer)
	for s, oc := range l.Coords {
		if oc == o {
			return s
		}
	}
	panic(fmt.Sprintf("parallel.Placement.FFNSource: no rank at %+v in %s", o, l))
}

// FFNGroup is the ranks that share global rank r's (pp, sp, tp), ordered by
// replica: the ranks among which r's MLP pieces are pooled (member i is
// replica i).
func (l Placement) FFNGroup(r int) Group {
	me := l.Coords[r]
	return l.members(func(c Coord) bool { return c.PP == me.PP && c.SP == me.SP && c.TP == me.TP }, func(c Coord) int { return c.DP })
}

// OwnedFFNLayers is the number of layers of global rank r's stage whose
// MLP it holds: all of them without pooling, those its replica owns with.
func (l Placement) OwnedFFNLayers(cfg *model.Config, r int) int {
	st := l.Stage(cfg, r)
	if !l.FFN.Pooled() {
		return st.Len()
	}
	n := 0
	for layer := st.Lo; layer < st.Hi; layer++ {
		if l.FFNOwner(layer) == l.Coords[r].DP {
			n++
		}
	}
	return n
}

// FFNLayerElems is the number of MLP matrix elements (gate, up and down)
// of one layer that global rank r computes with: its TP slice of the
// intermediate columns. It is the size of one WaS slot and of one fetch.
func (l Placement) FFNLayerElems(cfg *model.Config, r int) int64 {
	inter := int64(Even(cfg.Intermediate, l.Plan.TP, l.Coords[r].TP).Len())
	return 3 * inter * int64(cfg.Hidden)
}

// PrefetchOrder is the order in which replica fetches the MLPs of the
// layers it does not own under WaS, every step: the layers in cycles of
// DP consecutive layers starting at c = 0, DP, 2·DP, …; with shift (peak
// shifting, R10) the replica starts each cycle at offset replica+1 and
// wraps inside it, so at every index j < DP−1 of a full cycle the
// replicas read from DP distinct owners (replica r from (r+1+j) mod DP);
// without it each cycle is read in layer order, all readers on one owner
// at a time. The replica's own layer and layers past the end are skipped.
// Each non-owned layer appears exactly once.
func PrefetchOrder(layers, replicas, replica int, shift bool) []int {
	var out []int
	off := 0
	if shift {
		off = replica + 1
	}
	for c := 0; c < layers; c += replicas {
		for j := range replicas {
			layer := c + (off+j)%replicas
			if layer%replicas != replica && layer < layers {
				out = append(out, layer)
			}
		}
	}
	return out
}

// SiDPMemory is one rank's weight memory under SiDP beside plain DP at
// the same plan (R18), in bytes at elemBytes per element: the gain is
// what pooling frees for the KV cache, (1−1/DP)·F/TP − C_slots when DP
// divides the layers and TP the intermediate size.
type SiDPMemory struct {
	DPWeights int64 // the rank's weights under plain DP: attention, norms, embedding, LM head and every layer's MLP slice
	Weights   int64 // under SiDP: the MLP slices of owned layers only
	Slots     int64 // the WaS slot cache: slots × one layer's MLP slice (C_slots)
	Gain      int64 // DPWeights − Weights − Slots
}

// SiDPMemory is global rank r's weight memory under l (a pooled
// placement) with a WaS cache of slots layers.
func (l Placement) SiDPMemory(cfg *model.Config, r, slots int, elemBytes int64) SiDPMemory {
	dp := l
	dp.FFN = FFNLocal
	m := SiDPMemory{
		DPWeights: elemBytes * dp.WeightElems(cfg, r),
		Weights:   elemBytes * l.WeightElems(cfg, r),
		Slots:     elemBytes * int64(slots) * l.FFNLayerElems(cfg, r),
	}
	m.Gain = m.DPWeights - m.Weights - m.Slots
	return m
}
