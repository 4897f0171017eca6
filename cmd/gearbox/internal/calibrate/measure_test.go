package calibrate

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/sim"
)

// TestMeasureQuick measures the quick grid on this machine: every field
// is filled and positive, the grid has the planned shape, and the fitted
// curve is usable by the cost model.
func TestMeasureQuick(t *testing.T) {
	start := time.Now()
	// The quick grid times 2-rank collectives of 4 KiB to 8 MiB a few
	// times each; on a loaded 2-core machine (go test runs packages side
	// by side) scheduling noise can swamp the size dependence and the
	// link fit refuses the points. That is the measurement doing its job;
	// this test checks the plumbing, so it measures again, up to twice.
	var p *sim.Profile
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		p, err = Measure(context.Background(), Options{Quick: true, Threads: 2})
		if !errors.Is(err, ErrNoisy) {
			break
		}
		t.Logf("attempt %d: %v", attempt+1, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("quick profile in %.1f s", time.Since(start).Seconds())
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	q := newGrid(true)
	if len(p.GEMM) != len(q.ms)*len(q.nks) {
		t.Errorf("%d GEMM points, want %d", len(p.GEMM), len(q.ms)*len(q.nks))
	}
	for _, name := range []string{"bfloat16", "float16", "q8_0"} {
		if got := len(p.GEMMWeights[name]); got != len(q.ms)*len(q.nks) || len(p.GEMMWeights) != 3 {
			t.Errorf("%d %s GEMM points (formats %d), want %d", got, name, len(p.GEMMWeights), len(q.ms)*len(q.nks))
		}
	}
	if p.Threads != 2 || p.Name == "" || p.MemoryBytes <= 0 {
		t.Errorf("profile %+v", p)
	}
	g, err := p.GPU()
	if err != nil {
		t.Fatal(err)
	}
	if !(g.Eff.GEMMHalf >= 1) || !(g.BF16FLOPS > 0) {
		t.Errorf("fitted curve %+v", g.Eff)
	}
	// The larger GEMMs of the grid must be faster than the GEMVs: the
	// measurement sees the kernels, not the loop around them.
	var small, large float64
	for _, pt := range p.GEMM {
		switch pt.M {
		case 1:
			small = max(small, pt.GFLOPS)
		case 256:
			large = max(large, pt.GFLOPS)
		}
	}
	if !(large > small) {
		t.Errorf("GEMM at M=256 %.1f GFLOP/s, at M=1 %.1f", large, small)
	}
}

func TestMeasureCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Measure(ctx, Options{Quick: true}); err == nil {
		t.Fatal("a cancelled measurement returned a profile")
	}
}

func TestFitLink(t *testing.T) {
	const lat, hop, bw = 2e-6, 0.5e-6, 10e9
	var pts []LinkPoint
	for _, kind := range []comm.Kind{comm.KindAllReduce, comm.KindAllToAll} {
		for _, b := range []int64{4 << 10, 64 << 10, 1 << 20, 8 << 20} {
			s := lat + float64(sim.CollectiveSteps(kind, linkRanks))*hop + float64(b)/bw
			pts = append(pts, LinkPoint{Kind: kind, Bytes: b, Seconds: s})
		}
	}
	ab, err := fitLink(pts, lat)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(ab.HopS-hop) > 1e-9 || math.Abs(ab.BytesPerS-bw)/bw > 1e-6 {
		t.Errorf("fit %+v, want hop %g, %g bytes/s", ab, hop, bw)
	}
	// A transport faster per call than the kernel latency gets hop 0 and
	// the bandwidth alone.
	ab, err = fitLink(pts, 10e-6)
	if err != nil {
		t.Fatal(err)
	}
	if ab.HopS != 0 || !(ab.BytesPerS > 0) {
		t.Errorf("clamped fit %+v", ab)
	}
	flat := []LinkPoint{{comm.KindAllReduce, 4096, 1e-5}, {comm.KindAllReduce, 1 << 20, 1e-5}}
	if _, err := fitLink(flat, 2e-5); err == nil {
		t.Error("times that do not grow with size were fitted")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestNodeShares(t *testing.T) {
	p := &sim.Profile{
		Version: sim.ProfileVersion, Name: "test", Threads: 4, MemoryBytes: 1 << 34, MemBytesPerS: 40e9,
		AttentionGFLOPS: 20, Link: sim.AlphaBeta{BytesPerS: 10e9}, KernelLatencyS: 2e-6,
		GEMM:        []sim.GEMMPoint{{M: 1, N: 1024, K: 1024, GFLOPS: 10}, {M: 256, N: 1024, K: 1024, GFLOPS: 150}},
		GEMMWeights: map[string][]sim.GEMMPoint{"bfloat16": {{M: 1, N: 1024, K: 1024, GFLOPS: 12}, {M: 256, N: 1024, K: 1024, GFLOPS: 290}}},
	}
	one, err := p.Node(1)
	if err != nil {
		t.Fatal(err)
	}
	n1, err := Node(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n1.GPU.BF16FLOPS != one.GPU.BF16FLOPS || n1.GPU.HBMBytesPerS != one.GPU.HBMBytesPerS {
		t.Errorf("one rank: %+v, want the profile's %+v", n1.GPU, one.GPU)
	}
	n2, err := Node(p, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n2.Count != 2 || n2.GPU.BF16FLOPS != one.GPU.BF16FLOPS/2 || n2.GPU.HBMBytesPerS != one.GPU.HBMBytesPerS/2 {
		t.Errorf("two ranks: %+v", n2)
	}
	if n2.GPU.Eff != one.GPU.Eff || n2.Link != one.Link {
		t.Error("sharing changed the efficiencies or the link")
	}
	c1, c2 := one.GPU.WeightGEMM[sim.BF16], n2.GPU.WeightGEMM[sim.BF16]
	if !(c1.Peak > 0) || c2.Peak != c1.Peak/2 || c2.Half != c1.Half || n1.GPU.WeightGEMM[sim.BF16] != c1 {
		t.Errorf("bfloat16 curve %+v on two ranks, %+v on the machine", c2, c1)
	}
	// Attention is a fraction of the peak, so a rank's share follows.
	m1, _ := sim.NewCostModel(one, sim.CPUPrecision)
	m2, _ := sim.NewCostModel(n2, sim.CPUPrecision)
	w := sim.SeqAttention(0, 512, 0)
	if a1, a2 := m1.Attention(w, 8, 2, 128, false), m2.Attention(w, 8, 2, 128, false); math.Abs(a2-p.KernelLatencyS-2*(a1-p.KernelLatencyS)) > 1e-12 {
		t.Errorf("attention %g s on a shared rank, %g on the machine", a2, a1)
	}
	if _, err := Node(p, 0); err == nil {
		t.Error("a node of 0 ranks was accepted")
	}
}
