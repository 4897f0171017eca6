package calibrate

import (
	"fmt"

	"github.com/gearboxlm/gearbox/sim"
)

// Node is the profiled machine as a node of ranks CPU ranks, the way the
// CPU engine runs them: goroutines of one process sharing one kernel pool
// of the profile's threads and one memory system. It is p.Node(ranks)
// with each rank's compute peaks and memory bandwidth divided by ranks:
// the ranks of a step run their kernels at the same time (their
// collectives keep them in lockstep), so each gets a 1/ranks share of the
// cores and of the bandwidth the profile measured with all of them, and a
// plan's ranks add work to the machine instead of adding machines. One
// rank is the whole machine, exactly p.Node(1).
//
// A GPU profile describes one GPU per rank, as a catalog node does: Node
// is p.Node(ranks) unchanged.
func Node(p *sim.Profile, ranks int) (sim.Node, error) {
	n, err := p.Node(ranks)
	if err != nil {
		return sim.Node{}, fmt.Errorf("calibrate: %w", err)
	}
	if p.IsGPU() {
		return n, nil
	}
	share := float64(ranks)
	n.GPU.BF16FLOPS /= share
	n.GPU.HBMBytesPerS /= share
	curves := make(map[sim.DType]sim.GEMMCurve, len(n.GPU.WeightGEMM))
	for d, c := range n.GPU.WeightGEMM {
		c.Peak /= share
		curves[d] = c
	}
	n.GPU.WeightGEMM = curves
	return n, nil
}
