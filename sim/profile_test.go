package sim

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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

// TestProfileWeightFormats fits a curve per measured weight format and
// prices each GEMM by its weights' curve: a bfloat16 curve of twice the
// float32 rate and another half size halves compute-bound GEMMs and moves
// the small ones by the fitted half size, while float32 GEMMs keep theirs.
// A profile without a format refuses to price it.
func TestProfileWeightFormats(t *testing.T) {
	p := testProfile()
	for _, s := range [][3]int{{1, 4096, 4096}, {8, 4096, 4096}, {64, 2048, 2048}, {256, 4096, 1024}, {2048, 2048, 2048}, {16, 512, 8192}} {
		rate := 400e9 * shapeFactor(float64(s[0]), float64(s[1]), float64(s[2]), 96)
		if p.GEMMWeights == nil {
			p.GEMMWeights = map[string][]GEMMPoint{}
		}
		p.GEMMWeights["bfloat16"] = append(p.GEMMWeights["bfloat16"], GEMMPoint{M: s[0], N: s[1], K: s[2], GFLOPS: rate / 1e9})
	}
	path := filepath.Join(t.TempDir(), "cpu.json")
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	if q, err := LoadProfile(path); err != nil || !reflect.DeepEqual(p, q) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, p, q)
	}
	g, err := p.GPU()
	if err != nil {
		t.Fatal(err)
	}
	cv, ok := g.WeightGEMM[BF16]
	if !ok || math.Abs(cv.Half/96-1) > 0.05 || math.Abs(cv.Peak/400e9-1) > 0.02 || len(g.WeightGEMM) != 1 {
		t.Fatalf("bfloat16 curve %+v (all %v); want half 96, peak 400e9", cv, g.WeightGEMM)
	}
	node, err := p.Node(1)
	if err != nil {
		t.Fatal(err)
	}
	bf16 := Precision{Weights: BF16, Activations: FP32, KV: FP32, HeadInWeights: true}
	if err := p.CheckPrecision(bf16); err != nil {
		t.Fatal(err)
	}
	cm, err := NewCostModel(node, bf16)
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range p.GEMMWeights["bfloat16"] {
		k := cm.gemm(pt.M, pt.N, pt.K, BF16)
		if got := 2 * float64(pt.M) * float64(pt.N) * float64(pt.K) / k.compute / 1e9; math.Abs(got/pt.GFLOPS-1) > 0.03 {
			t.Errorf("bfloat16 GEMM %dx%dx%d: model %.1f GFLOP/s, measured %.1f", pt.M, pt.N, pt.K, got, pt.GFLOPS)
		}
		if got, want := k.memory, float64(pt.N*pt.K*2)/(node.GPU.HBMBytesPerS*cm.weightEfficiency(float64(pt.N*pt.K*2)))+float64(pt.M*(pt.K+pt.N)*4)/node.GPU.HBMBytesPerS; math.Abs(got/want-1) > 1e-9 {
			t.Errorf("bfloat16 GEMM %dx%dx%d: memory %g s, want %g (2-byte weights, 4-byte activations)", pt.M, pt.N, pt.K, got, want)
		}
	}
	for _, pt := range p.GEMM {
		k := cm.gemm(pt.M, pt.N, pt.K, FP32)
		if got := 2 * float64(pt.M) * float64(pt.N) * float64(pt.K) / k.compute / 1e9; math.Abs(got/pt.GFLOPS-1) > 0.03 {
			t.Errorf("float32 GEMM %dx%dx%d under the bfloat16 precision: model %.1f GFLOP/s, measured %.1f", pt.M, pt.N, pt.K, got, pt.GFLOPS)
		}
	}
	fp16 := bf16
	fp16.Weights = FP16
	if err := p.CheckPrecision(fp16); err == nil || !strings.Contains(err.Error(), "re-run gearbox calibrate") {
		t.Errorf("float16 weights without float16 measurements: %v", err)
	}
	if err := testProfile().CheckPrecision(bf16); err == nil {
		t.Error("a profile without gemm_weights priced bfloat16 weights")
	}
	if err := testProfile().CheckPrecision(CPUPrecision); err != nil {
		t.Errorf("float32: %v", err)
	}
	for name, mutate := range map[string]func(*Profile){
		"format":   func(p *Profile) { p.GEMMWeights["fp8"] = p.GEMMWeights["bfloat16"] },
		"spelling": func(p *Profile) { p.GEMMWeights["bf16"] = p.GEMMWeights["bfloat16"] },
		"empty":    func(p *Profile) { p.GEMMWeights["float16"] = nil },
		"point":    func(p *Profile) { p.GEMMWeights["bfloat16"][2].GFLOPS = 0 },
		"gpu":      func(p *Profile) { p.DType, p.Threads, p.Link = ProfileBFloat16, 0, AlphaBeta{} },
	} {
		q := testProfile()
		q.GEMMWeights = map[string][]GEMMPoint{"bfloat16": slices.Clone(p.GEMMWeights["bfloat16"])}
		mutate(q)
		if err := q.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// gpuProfile is a bfloat16 profile of an H100 whose GEMM points follow the
// cost model's curve with half size 96 and a 700 TFLOP/s asymptote.
func gpuProfile() *Profile {
	p := &Profile{
		Version: ProfileVersion, Name: "NVIDIA H100 80GB HBM3", DType: ProfileBFloat16, MemoryBytes: 80 << 30,
		MemBytesPerS: 2.9e12, AttentionGFLOPS: 350e3, AttentionDecodeGFLOPS: 70e3,
		KernelLatencyS: 2.5e-6, StepOverheadS: 120e-6, LogitsBytesPerS: 8e9,
	}
	for _, s := range [][3]int{{1, 3072, 2048}, {16, 4096, 4096}, {256, 28672, 4096}, {4096, 4096, 14336}, {8192, 16384, 2048}, {64, 2048, 8192}} {
		rate := 700e12 * shapeFactor(float64(s[0]), float64(s[1]), float64(s[2]), 96)
		p.GEMM = append(p.GEMM, GEMMPoint{M: s[0], N: s[1], K: s[2], GFLOPS: rate / 1e9})
	}
	return p
}

// TestGPUProfile maps a bfloat16 profile: the fitted BF16 rate is the
// peak itself, the measured bandwidth and latencies are the device's,
// and the links and FP8 ratio come from the matched catalog entry.
func TestGPUProfile(t *testing.T) {
	p := gpuProfile()
	g, err := p.GPU()
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(g.Eff.GEMMHalf/96-1) > 0.05 || math.Abs(g.BF16FLOPS/700e12-1) > 0.02 {
		t.Errorf("fit: half %g, peak %g; want 96 and 700e12", g.Eff.GEMMHalf, g.BF16FLOPS)
	}
	h100, _ := LookupGPU("h100")
	if g.Name != p.Name || g.HBMBytesPerS != p.MemBytesPerS || g.MemoryBytes != p.MemoryBytes || g.Eff.Matmul != 1 || g.Eff.Memory != 1 {
		t.Errorf("device %+v", g)
	}
	if g.PCIe != h100.PCIe || g.PCIeBytesPerS != h100.PCIeBytesPerS || g.NVLinkBytesPerS != h100.NVLinkBytesPerS || math.Abs(g.FP8FLOPS/g.BF16FLOPS-2) > 0.01 {
		t.Errorf("links and FP8 %q %g %g %g, want the H100 entry's", g.PCIe, g.PCIeBytesPerS, g.NVLinkBytesPerS, g.FP8FLOPS)
	}
	if e := g.Eff; e.KernelLatency != p.KernelLatencyS || e.StepOverhead != p.StepOverheadS || e.LogitsBytesPerS != p.LogitsBytesPerS ||
		math.Abs(e.Attention*g.BF16FLOPS/350e12-1) > 1e-9 || math.Abs(e.AttentionDecode*g.BF16FLOPS/70e12-1) > 1e-9 {
		t.Errorf("efficiency %+v", e)
	}
	if p.Precision() != (Precision{Weights: BF16, Activations: BF16, KV: BF16}) || testProfile().Precision() != CPUPrecision {
		t.Errorf("precisions %v, %v", p.Precision(), testProfile().Precision())
	}
	node, err := p.Node(8)
	if err != nil {
		t.Fatal(err)
	}
	if node.Link.Kind != NVLink || node.Count != 8 {
		t.Errorf("node %s, link %+v", node, node.Link)
	}
	cm, err := NewCostModel(node, p.Precision())
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range p.GEMM {
		k := cm.gemm(pt.M, pt.N, pt.K, BF16)
		got := 2 * float64(pt.M) * float64(pt.N) * float64(pt.K) / k.compute / 1e9
		if math.Abs(got/pt.GFLOPS-1) > 0.03 {
			t.Errorf("GEMM %dx%dx%d: model %.1f GFLOP/s, measured %.1f", pt.M, pt.N, pt.K, got, pt.GFLOPS)
		}
	}
	if got, want := cm.Elementwise(1<<30), float64(1<<30)/p.MemBytesPerS+p.KernelLatencyS; math.Abs(got/want-1) > 1e-12 {
		t.Errorf("1 GiB copy: %g s, want %g", got, want)
	}

	// A GPU the catalog does not know: one device, no links, no FP8.
	p.Name = "NVIDIA H100 PCIe"
	if g, err = p.GPU(); err != nil || g.PCIe != "unknown" || g.NVLinkBytesPerS != 0 || g.FP8FLOPS != 0 {
		t.Errorf("unknown GPU %+v: %v", g, err)
	}
	if _, err := p.Node(1); err != nil {
		t.Error(err)
	}
	if _, err := p.Node(2); err == nil || !strings.Contains(err.Error(), "one GPU only") {
		t.Errorf("two unknown GPUs: %v", err)
	}
}

// TestGPUProfileFile round-trips a GPU profile and still reads a CPU
// profile written before the dtype field.
func TestGPUProfileFile(t *testing.T) {
	p := gpuProfile()
	path := filepath.Join(t.TempDir(), "gpu.json")
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
	data, _ := os.ReadFile(path)
	for _, field := range []string{`"dtype": "bfloat16"`, `"logits_bytes_per_s"`} {
		if !strings.Contains(string(data), field) {
			t.Errorf("saved profile lacks %s", field)
		}
	}
	if strings.Contains(string(data), `"threads"`) || strings.Contains(string(data), `"link"`) {
		t.Errorf("GPU profile writes CPU fields:\n%s", data)
	}
	old := `{"version": 1, "name": "x", "threads": 2, "memory_bytes": 1000, "mem_bytes_per_s": 1e9, "l2_bytes": 0,
		"gemm": [{"m": 1, "n": 8, "k": 8, "gflops": 1}], "attention_gflops": 1, "link": {"hop_s": 0, "bytes_per_s": 1e9},
		"kernel_latency_s": 0, "step_overhead_s": 0}`
	if q, err := ParseProfile([]byte(old)); err != nil || q.IsGPU() {
		t.Errorf("old CPU profile: %+v, %v", q, err)
	}
	for name, mutate := range map[string]func(*Profile){
		"dtype":   func(p *Profile) { p.DType = "float16" },
		"threads": func(p *Profile) { p.Threads = 4 },
		"link":    func(p *Profile) { p.Link.BytesPerS = -1 },
		"logits":  func(p *Profile) { p.LogitsBytesPerS = math.Inf(1) },
		"decode":  func(p *Profile) { p.AttentionDecodeGFLOPS = -1 },
	} {
		p := gpuProfile()
		mutate(p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	cpu := testProfile()
	cpu.Link = AlphaBeta{}
	if err := cpu.Validate(); err == nil {
		t.Error("CPU profile without a link accepted")
	}
}

// TestLaunchLatency bounds the steps the executor runs without a CUDA
// graph by the host's launches: a decode-only step never, a step with a
// prefill only where launching its kernels one by one takes longer than
// the device runs them, and then by exactly kernels × the launch
// latency; 0 means no bound.
func TestLaunchLatency(t *testing.T) {
	cfg := preset(t, "meta-llama/Llama-3.1-8B")
	stepTimes := func(launch float64) (decode, prefill, mixed float64) {
		t.Helper()
		p := gpuProfile()
		p.LaunchLatencyS = launch
		node, err := p.Node(1)
		if err != nil {
			t.Fatal(err)
		}
		cm, err := NewCostModel(node, p.Precision())
		if err != nil {
			t.Fatal(err)
		}
		lc := layoutCost(t, cm, cfg, "tp=1")
		step := func(seqs ...Seq) float64 { return lc.Step(&StepShape{Seqs: seqs}).Seconds }
		return step(Seq{Context: 500, New: 1, Logits: 1}, Seq{Context: 90, New: 1, Logits: 1}),
			step(Seq{New: 64, Logits: 1}),
			step(Seq{Context: 500, New: 1, Logits: 1}, Seq{New: 64, Logits: 1})
	}
	d0, p0, m0 := stepTimes(0)
	d1, p1, m1 := stepTimes(1e-6) // far below the 8B's kernels: hidden
	if d1 != d0 || p1 != p0 || m1 != m0 {
		t.Errorf("1 µs launches: %g %g %g s, want %g %g %g (hidden behind the device)", d1, p1, m1, d0, p0, m0)
	}
	d2, p2, m2 := stepTimes(1e-3) // host-bound
	d3, p3, m3 := stepTimes(2e-3)
	if d2 != d0 || d3 != d0 {
		t.Errorf("decode-only step %g, %g s with launch latencies; want the graphed %g s", d2, d3, d0)
	}
	overhead := gpuProfile().StepOverheadS
	for _, c := range []struct {
		name           string
		graphed, at1ms float64
		at2ms          float64
	}{{"prefill", p0, p2, p3}, {"mixed", m0, m2, m3}} {
		kernels := (c.at1ms - overhead) / 1e-3
		if math.Abs(kernels-math.Round(kernels)) > 1e-6 || kernels < 8*32 || kernels > 16*32 {
			t.Errorf("%s: %.3f kernels per step, want a whole number near 10 per layer", c.name, kernels)
		}
		if want := overhead + kernels*2e-3; math.Abs(c.at2ms/want-1) > 1e-9 {
			t.Errorf("%s: %g s at 2 ms per launch, want %g", c.name, c.at2ms, want)
		}
		if c.at1ms <= c.graphed {
			t.Errorf("%s: host-bound %g s not above the device's %g s", c.name, c.at1ms, c.graphed)
		}
	}
}
