package sim

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
)

// testProfile is a profile whose GEMM points follow the cost model's own
// curve with half size 48 and an asymptotic 200 GFLOP/s, plus noise-free
// measurements of the rest.
func testProfile() *Profile {
	p := &Profile{
		Version: ProfileVersion, Name: "Test CPU @ 3.0GHz", Threads: 8, MemoryBytes: 64 << 30,
		MemBytesPerS: 40e9, L2Bytes: 32 << 20, AttentionGFLOPS: 50,
		Link:           AlphaBeta{HopS: 2e-6, BytesPerS: 20e9},
		KernelLatencyS: 1e-6, StepOverheadS: 50e-6,
	}
	for _, s := range [][3]int{{1, 4096, 4096}, {8, 4096, 4096}, {64, 2048, 2048}, {256, 4096, 1024}, {2048, 2048, 2048}, {16, 512, 8192}} {
		rate := 200e9 * shapeFactor(float64(s[0]), float64(s[1]), float64(s[2]), 48)
		p.GEMM = append(p.GEMM, GEMMPoint{M: s[0], N: s[1], K: s[2], GFLOPS: rate / 1e9})
	}
	return p
}

func TestProfileRoundTrip(t *testing.T) {
	p := testProfile()
	path := filepath.Join(t.TempDir(), "cpu.json")
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	q, err := LoadProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, q) {
		t.Fatalf("round trip:\n%+v\n%+v", p, q)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"mem_bytes_per_s"`, `"gemm"`, `"gflops"`, `"hop_s"`, `"step_overhead_s"`} {
		if !strings.Contains(string(data), field) {
			t.Errorf("saved profile lacks %s", field)
		}
	}
}

func TestProfileErrors(t *testing.T) {
	if _, err := ParseProfile([]byte(`{"version": 1, "name": "x", "gemm_points": []}`)); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("unknown field: %v", err)
	}
	if _, err := LoadProfile(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("missing file accepted")
	}
	mutations := map[string]func(*Profile){
		"version":   func(p *Profile) { p.Version = 2 },
		"name":      func(p *Profile) { p.Name = "" },
		"threads":   func(p *Profile) { p.Threads = 0 },
		"bandwidth": func(p *Profile) { p.MemBytesPerS = 0 },
		"gemm":      func(p *Profile) { p.GEMM = nil },
		"point":     func(p *Profile) { p.GEMM[0].K = 0 },
		"rate":      func(p *Profile) { p.GEMM[1].GFLOPS = math.NaN() },
		"link":      func(p *Profile) { p.Link.BytesPerS = -1 },
		"latency":   func(p *Profile) { p.KernelLatencyS = -1 },
		"attention": func(p *Profile) { p.AttentionGFLOPS = 0 },
	}
	for name, mutate := range mutations {
		p := testProfile()
		mutate(p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if err := p.Save(filepath.Join(t.TempDir(), "p.json")); err == nil {
			t.Errorf("%s: saved", name)
		}
	}
}

// TestProfileNode fits the GEMM curve back from the profile's points and
// builds a working cost model on the profiled node.
func TestProfileNode(t *testing.T) {
	p := testProfile()
	g, err := p.GPU()
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(g.Eff.GEMMHalf/48-1) > 0.05 || math.Abs(g.BF16FLOPS/2/200e9-1) > 0.02 {
		t.Errorf("fit: half %g, float32 peak %g; want 48 and 200e9", g.Eff.GEMMHalf, g.BF16FLOPS/2)
	}
	node, err := p.Node(4)
	if err != nil {
		t.Fatal(err)
	}
	if node.Link.Kind != InProcess || node.Count != 4 || node.GPU.Name != "cpu" {
		t.Errorf("node %s, link %+v", node, node.Link)
	}
	cm, err := NewCostModel(node, CPUPrecision)
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range p.GEMM {
		k := cm.gemm(pt.M, pt.N, pt.K, FP32)
		got := 2 * float64(pt.M) * float64(pt.N) * float64(pt.K) / k.compute / 1e9
		if math.Abs(got/pt.GFLOPS-1) > 0.03 {
			t.Errorf("GEMM %dx%dx%d: model %.1f GFLOP/s, measured %.1f", pt.M, pt.N, pt.K, got, pt.GFLOPS)
		}
	}
	if got, want := cm.Collective(comm.KindAllReduce, 1e6, 4, node.Link), 1e-6+6*2e-6+1e6/20e9; math.Abs(got/want-1) > 1e-12 {
		t.Errorf("all-reduce on the profile: %g s, want %g", got, want)
	}
	if _, err := p.Node(0); err == nil {
		t.Error("zero ranks accepted")
	}
}
