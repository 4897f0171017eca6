package sim

import (
	"math"
	"strings"
	"testing"
)

func TestCatalog(t *testing.T) {
	want := []string{"H100", "H200", "B200", "A100-80GB", "A100-80GB-PCIe", "A100-40GB", "A100-40GB-PCIe", "A10", "A10G", "L4", "H20", "H20-141GB"}
	gpus := GPUs()
	if len(gpus) != len(want) {
		t.Fatalf("catalog has %d GPUs, want %d", len(gpus), len(want))
	}
	for i, g := range gpus {
		if g.Name != want[i] {
			t.Errorf("GPU %d is %s, want %s", i, g.Name, want[i])
		}
		if g.MemoryBytes <= 0 || !(g.HBMBytesPerS > 0) || !(g.BF16FLOPS > 0) || !(g.PCIeBytesPerS > 0) || !(g.L2Bytes > 0) || g.PCIe == "" {
			t.Errorf("%s: missing datasheet numbers: %+v", g.Name, g)
		}
		if len(g.Sources) == 0 {
			t.Errorf("%s: no sources", g.Name)
		}
		if g.FP8FLOPS != 0 && math.Abs(g.FP8FLOPS/g.BF16FLOPS-2) > 0.01 {
			t.Errorf("%s: FP8 %g is not twice BF16 %g (dense vs sparse mixed up?)", g.Name, g.FP8FLOPS, g.BF16FLOPS)
		}
		if e := g.Eff; !(e.Matmul > 0.3 && e.Matmul < 0.95) || e.GEMMHalf != GEMMHalfSize || e.Memory != MemoryEfficiency {
			t.Errorf("%s: efficiency %+v", g.Name, e)
		}
	}
	// Dense peaks, not the datasheets' sparse ones.
	for name, bf16 := range map[string]float64{"H100": 989.4e12, "H200": 989.4e12, "A100-80GB": 312e12, "A10": 125e12, "A10G": 70e12, "L4": 121e12, "H20": 148e12, "B200": 2250e12} {
		g, err := LookupGPU(name)
		if err != nil || g.BF16FLOPS != bf16 {
			t.Errorf("%s: BF16 %g, want dense %g (%v)", name, g.BF16FLOPS, bf16, err)
		}
	}
}

// TestMatmulAnchors checks the GEMM curve against the measurements it is
// derived from and one it is not: GPU.md's 808 TFLOP/s at 8192³ on H100
// (exact by construction), the MAMF table's 792.1 TFLOP/s at its best
// H100 shape, and its A100 SXM and PCIe rows.
func TestMatmulAnchors(t *testing.T) {
	cases := []struct {
		gpu     string
		m, n, k int
		tflops  float64
		tol     float64
	}{
		{"H100", 8192, 8192, 8192, 808, 1e-9},
		{"H100", 6144, 17920, 2816, 792.1, 0.01},
		{"A100-80GB", 6912, 16384, 2048, 267.9, 1e-9},
		{"A100-80GB-PCIe", 2304, 5120, 1536, 256.4, 1e-9},
	}
	for _, c := range cases {
		g, err := LookupGPU(c.gpu)
		if err != nil {
			t.Fatal(err)
		}
		got := g.BF16FLOPS * g.Eff.Matmul * shapeFactor(float64(c.m), float64(c.n), float64(c.k), g.Eff.GEMMHalf) / 1e12
		if math.Abs(got/c.tflops-1) > c.tol {
			t.Errorf("%s %dx%dx%d: %.1f TFLOP/s, measured %.1f", c.gpu, c.m, c.n, c.k, got, c.tflops)
		}
	}
}

func TestParseNode(t *testing.T) {
	cases := []struct {
		in    string
		gpu   string
		count int
		link  LinkKind
	}{
		{"8xH200", "H200", 8, NVLink},
		{"8xh100-sxm", "H100", 8, NVLink},
		{"4xA10-pcie", "A10", 4, PCIe},
		{"8xA100-80gb-pcie", "A100-80GB-PCIe", 8, PCIe},
		{"8xA100-80GB", "A100-80GB", 8, NVLink},
		{"2XL4", "L4", 2, PCIe},
		{"B200", "B200", 1, NVLink},
		{" 8xH20 ", "H20", 8, NVLink},
		{"8xA10G", "A10G", 8, PCIe},
		{"4xa10g@PCIe4x8", "A10G", 4, PCIe},
		{"8xL4@pcie4x8", "L4", 8, PCIe},
		{"g5.48xlarge", "A10G", 8, PCIe},
		{"G6.48xlarge", "L4", 8, PCIe},
		{"8xH200@pcie4x8", "H200", 8, NVLink},
	}
	for _, c := range cases {
		n, err := ParseNode(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if n.GPU.Name != c.gpu || n.Count != c.count || n.Link.Kind != c.link {
			t.Errorf("%q: %s with %s link", c.in, n, n.Link.Kind)
		}
		if round, err := ParseNode(n.String()); err != nil || round.GPU.Name != n.GPU.Name || round.Count != n.Count || round.Host != n.Host || round.Link != n.Link {
			t.Errorf("%q: String %q does not parse back: %v", c.in, n, err)
		}
	}
	if n, _ := ParseNode("8xH200"); n.Link.BytesPerS != 450e9 || n.Link.HopLatency != NVLinkHopLatency {
		t.Errorf("8xH200 link %+v", n.Link)
	}
	for in, want := range map[string]string{
		"8xH300":    "unknown GPU \"H300\" (known: h100",
		"0xH100":    "GPU count",
		"4xcpu":     "calibration profile",
		"8xH100-pc": "a10-pcie",
		"8xL4@x16":  "unknown host link \"x16\" (known: pcie4x8)",
		"8xL4@":     "unknown host link",
		"":          "unknown GPU",
	} {
		if _, err := ParseNode(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseNode(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestMatchGPU(t *testing.T) {
	for device, want := range map[string]string{
		"NVIDIA H100 80GB HBM3":   "H100",
		"nvidia  h100 80gb hbm3 ": "H100",
		"NVIDIA H200":             "H200",
		"NVIDIA A100-SXM4-80GB":   "A100-80GB",
		"NVIDIA A100 80GB PCIe":   "A100-80GB-PCIe",
		"NVIDIA A100-SXM4-40GB":   "A100-40GB",
		"NVIDIA L4":               "L4",
		"NVIDIA A10G":             "A10G",
		"NVIDIA H100 PCIe":        "",
		"NVIDIA H100 NVL":         "",
		"NVIDIA H200 NVL":         "",
		"NVIDIA GeForce RTX 4090": "",
		"H100":                    "",
	} {
		g, ok := MatchGPU(device)
		if ok != (want != "") || g.Name != want {
			t.Errorf("MatchGPU(%q) = %q, %v; want %q", device, g.Name, ok, want)
		}
	}
}

// TestHostLinks checks the per-GPU host links: the AWS boxes of the Seesaw
// paper (g5.48xlarge, g6.48xlarge) have PCIe 4.0 x8 per GPU, 16 GiB/s one
// way, which also bounds their GPUs' peer traffic; every other node keeps
// its GPU's own PCIe interface.
func TestHostLinks(t *testing.T) {
	const x8 = 17179869184 // 16 GiB/s
	if PCIeGen4x8BytesPerS != x8 {
		t.Fatalf("PCIeGen4x8BytesPerS = %d", int64(PCIeGen4x8BytesPerS))
	}
	for _, in := range []string{"8xA10G", "4xA10G", "g5.48xlarge", "8xL4@pcie4x8", "g6.48xlarge", "2xL4@pcie4x8"} {
		n, err := ParseNode(in)
		if err != nil {
			t.Fatal(err)
		}
		if n.Host.PCIe != "Gen4 x8" || n.Host.BytesPerS != x8 || n.Link.Kind != PCIe || n.Link.BytesPerS != x8 {
			t.Errorf("%s: host %+v, link %+v", in, n.Host, n.Link)
		}
	}
	if n, _ := ParseNode("g6.48xlarge"); n.String() != "8xL4@pcie4x8" || n.Count != 8 {
		t.Errorf("g6.48xlarge is %s", n)
	}
	if n, _ := ParseNode("g5.48xlarge"); n.String() != "8xA10G@pcie4x8" || n.Count != 8 {
		t.Errorf("g5.48xlarge is %s", n)
	}
	// Unchanged: a plain L4 node is the card's Gen4 x16, an H200 node's
	// host link its Gen5 x16 and its peer link NVLink.
	for in, want := range map[string]HostLink{
		"8xL4":       {PCIe: "Gen4 x16", BytesPerS: 32e9},
		"4xA10-pcie": {PCIe: "Gen4 x16", BytesPerS: 32e9},
		"8xH200":     {PCIe: "Gen5 x16", BytesPerS: 64e9},
	} {
		n, err := ParseNode(in)
		if err != nil || n.Host != want || strings.Contains(n.String(), "@") {
			t.Errorf("%s: host %+v (%s), want %+v: %v", in, n.Host, n, want, err)
		}
		if own, _ := NewNode(n.GPU, n.Count); n.Link != own.Link {
			t.Errorf("%s: link %+v, want the GPU's own %+v", in, n.Link, own.Link)
		}
	}
	if n, _ := ParseNode("8xH200@pcie4x8"); n.Link.BytesPerS != 450e9 || n.Host.BytesPerS != x8 {
		t.Errorf("8xH200@pcie4x8: NVLink %+v must stay, host %+v", n.Link, n.Host)
	}
	a10g, _ := LookupGPU("a10g")
	if a10g.MemoryBytes != 24<<30 || a10g.HBMBytesPerS != 600e9 || a10g.FP8FLOPS != 0 || a10g.NVLinkBytesPerS != 0 || a10g.L2Bytes != 6<<20 {
		t.Errorf("A10G %+v", a10g)
	}
	var cited bool
	for _, src := range a10g.Sources {
		cited = cited || strings.Contains(src, "16 GiB/s")
	}
	if !cited {
		t.Errorf("A10G sources do not give the host link: %q", a10g.Sources)
	}
}
