package sim

import (
	"math"
	"testing"

	"github.com/gearboxlm/gearbox/comm"
)

func costModel(t testing.TB, node string, p Precision) *CostModel {
	t.Helper()
	n, err := ParseNode(node)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := NewCostModel(n, p)
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

var bf16 = Precision{Weights: BF16, Activations: BF16, KV: BF16}

// TestGEMMRoofline checks the two regimes: a decode GEMV streams its
// weights near the memory roof, a large GEMM runs near the measured
// compute roof, and FP8 halves the one and doubles the other.
func TestGEMMRoofline(t *testing.T) {
	h100 := costModel(t, "1xH100", bf16)
	// 8192³ BF16: GPU.md's 808 TFLOP/s, less one kernel latency (0.2%).
	if comp, _ := h100.GEMMEfficiency(8192, 8192, 8192, BF16); math.Abs(comp*989.4/808-1) > 0.005 {
		t.Errorf("8192³: %.1f TFLOP/s, want 808", comp*989.4)
	}
	// M = 1 over a 28672×8192 weight (470 MB BF16): memory-bound at the
	// streaming efficiency.
	_, mem := h100.GEMMEfficiency(1, 28672, 8192, BF16)
	if mem < 0.84 || mem > 0.86 {
		t.Errorf("GEMV bandwidth fraction %.3f, want about %.3f", mem, MemoryEfficiency)
	}
	fp8 := costModel(t, "1xH100", Precision{Weights: FP8, Activations: BF16, KV: BF16})
	if r := h100.GEMM(1, 28672, 8192, BF16) / fp8.GEMM(1, 28672, 8192, FP8); r < 1.9 || r > 2.05 {
		t.Errorf("FP8 GEMV speed-up %.2f, want about 2", r)
	}
	if r := h100.GEMM(8192, 8192, 8192, BF16) / fp8.GEMM(8192, 8192, 8192, FP8); r < 1.95 || r > 2.01 {
		t.Errorf("FP8 GEMM speed-up %.2f, want 2", r)
	}
	// Weight-only FP8 on A100: half the bytes, BF16 compute.
	a100 := costModel(t, "1xA100-80GB", Precision{Weights: FP8, Activations: BF16, KV: BF16})
	a100bf := costModel(t, "1xA100-80GB", bf16)
	if r := a100bf.GEMM(1, 28672, 8192, BF16) / a100.GEMM(1, 28672, 8192, FP8); r < 1.9 {
		t.Errorf("A100 weight-only FP8 GEMV speed-up %.2f", r)
	}
	if r := a100bf.GEMM(8192, 8192, 8192, BF16) / a100.GEMM(8192, 8192, 8192, FP8); math.Abs(r-1) > 0.01 {
		t.Errorf("A100 has no FP8 tensor cores, yet FP8 GEMM speed-up %.2f", r)
	}
	if a100.Quantize(1000) != 0 || fp8.Quantize(1000) == 0 {
		t.Error("activation quantization only for W8A8")
	}
	// Monotone in every dimension, and in between the roofs at the ridge.
	prev := 0.0
	for m := 1; m <= 16384; m *= 2 {
		tm := h100.GEMM(m, 8192, 8192, BF16)
		if tm < prev {
			t.Errorf("GEMM time falls from %g to %g at m=%d", prev, tm, m)
		}
		prev = tm
	}
	if h100.GEMM(0, 10, 10, BF16) != 0 {
		t.Error("empty GEMM costs time")
	}
}

// TestGEMMShapeEfficiency is the GEMM efficiency's shape dependence: the same
// tokens over a rank's smaller weight shard stream at a higher fraction
// of the bandwidth (the Nitsum paper's small-batch effect), while at
// large M the smaller shard's narrower N lowers the compute efficiency.
func TestGEMMShapeEfficiency(t *testing.T) {
	cm := costModel(t, "8xH100", bf16)
	// Llama-3.3-70B gate/up: N = 2·28672 at TP=1, 2·3584 at TP=8.
	full, shard := cm.gemm(1, 2*28672, 8192, BF16), cm.gemm(1, 2*3584, 8192, BF16)
	if perGPU := full.memory / (8 * shard.memory); perGPU <= 1.02 {
		t.Errorf("M=1: TP=8 shard streams at only %.3f× the TP=1 per-GPU efficiency", perGPU)
	}
	full, shard = cm.gemm(4096, 2*28672, 8192, BF16), cm.gemm(4096, 2*3584, 8192, BF16)
	if perGPU := full.compute / (8 * shard.compute); perGPU >= 1 {
		t.Errorf("M=4096: TP=8 shard computes at %.3f× the TP=1 per-GPU efficiency, want below 1", perGPU)
	}
	if e := cm.weightEfficiency(1e12); math.Abs(e-MemoryEfficiency) > 1e-3 {
		t.Errorf("huge shard efficiency %g", e)
	}
	if e := cm.weightEfficiency(1); e > 1 || e < 0.999 {
		t.Errorf("tiny shard efficiency %g, want just under 1", e)
	}
}

// TestSeqAttention holds the closed forms to a direct count.
func TestSeqAttention(t *testing.T) {
	for _, c := range [][3]int{{0, 1, 0}, {0, 7, 0}, {100, 1, 0}, {5, 300, 0}, {0, 10, 4}, {3, 10, 4}, {50, 1, 16}, {10, 20, 16}, {0, 129, 0}} {
		ctx, n, w := c[0], c[1], c[2]
		var pairs int64
		for p := ctx; p < ctx+n; p++ {
			k := int64(p + 1)
			if w > 0 {
				k = min(k, int64(w))
			}
			pairs += k
		}
		got := SeqAttention(ctx, n, w)
		if got.Pairs != pairs || got.Queries != int64(n) {
			t.Errorf("SeqAttention(%d, %d, %d) = %+v, want %d pairs", ctx, n, w, got, pairs)
		}
		tiles := int64((n + FlashQueryTile - 1) / FlashQueryTile)
		if w == 0 && got.KVReads != int64(ctx+n)*tiles {
			t.Errorf("SeqAttention(%d, %d): %d KV reads", ctx, n, got.KVReads)
		}
	}
	if (SeqAttention(7, 0, 0) != AttentionWork{}) {
		t.Error("no tokens, yet work")
	}
	cm := costModel(t, "1xH200", bf16)
	// Decode at 4k context is bandwidth-bound: 8 KV heads × 4097 × 2 × 128
	// × 2 bytes; prefill of 4k is compute-bound.
	dec := cm.attention(SeqAttention(4096, 1, 0), 64, 8, 128, true)
	pre := cm.attention(SeqAttention(0, 4096, 0), 64, 8, 128, false)
	if dec.memory <= dec.compute || pre.compute <= pre.memory {
		t.Errorf("decode %+v, prefill %+v", dec, pre)
	}
	if want := 8 * 4097 * 2 * 128 * 2 / (4.8e12 * MemoryEfficiency); dec.memory < want || dec.memory > want*1.01 {
		t.Errorf("decode memory %g s, want about %g", dec.memory, want)
	}
	if cm.Attention(AttentionWork{}, 64, 8, 128, true) != 0 {
		t.Error("no work, yet time")
	}
	// A measured decode rate (a calibrated CPU) prices decode attention
	// apart from prefill; catalog GPUs use one efficiency for both.
	cm.eff.AttentionDecode = cm.eff.Attention / 2
	slow := cm.attention(SeqAttention(4096, 1, 0), 64, 8, 128, true)
	if slow.compute != 2*dec.compute || cm.attention(SeqAttention(0, 4096, 0), 64, 8, 128, false) != pre {
		t.Errorf("decode efficiency not applied: %+v vs %+v", slow, dec)
	}
}

func TestCollective(t *testing.T) {
	cm := costModel(t, "8xH200", bf16)
	link := cm.Node.Link
	// A 64 MiB all-reduce over 8 ranks: comm's ring volume at 80% of
	// 450 GB/s plus 14 hops and a launch.
	sent, recv := comm.AllReduceBytes(32<<20, 8, 3, 2)
	got := cm.Collective(comm.KindAllReduce, max(sent, recv), 8, link)
	want := KernelLatency + 14*NVLinkHopLatency + float64(sent)/(450e9*LinkEfficiency)
	if math.Abs(got/want-1) > 1e-12 || sent != 2*7*(32<<20)/8*2 {
		t.Errorf("all-reduce: %g s (%d bytes), want %g", got, sent, want)
	}
	// Small messages are latency-bound: about 10 µs at TP=8 (vLLM's
	// custom all-reduce measured 9.3 µs for 4 KB).
	if small := cm.Collective(comm.KindAllReduce, 4096, 8, link); small < 8e-6 || small > 12e-6 {
		t.Errorf("4 KB all-reduce at TP=8: %g s", small)
	}
	for _, c := range []struct {
		kind  comm.Kind
		ranks int
		steps int
	}{
		{comm.KindAllReduce, 8, 14}, {comm.KindAllGather, 8, 7}, {comm.KindReduceScatter, 4, 3},
		{comm.KindAllToAll, 8, 7}, {comm.KindBroadcast, 4, 3}, {comm.KindSend, 2, 1}, {comm.KindRecv, 2, 1},
		{comm.KindBarrier, 4, 6}, {comm.KindAllReduce, 1, 0},
	} {
		if got := CollectiveSteps(c.kind, c.ranks); got != c.steps {
			t.Errorf("%s over %d: %d steps, want %d", c.kind, c.ranks, got, c.steps)
		}
	}
	if cm.Collective(comm.KindAllReduce, 1<<20, 1, link) != 0 {
		t.Error("one rank, yet time")
	}
	pcie := costModel(t, "4xA10-pcie", bf16)
	if r := pcie.Collective(comm.KindAllReduce, 64<<20, 4, pcie.Node.Link) / cm.Collective(comm.KindAllReduce, 64<<20, 4, link); r < 10 || r > 15 {
		t.Errorf("PCIe Gen4 / NVLink 4 all-reduce time ratio %.1f, want about 450/32", r)
	}
	// Host copies over PCIe Gen5 (64 GB/s one way at 80%).
	if got, want := cm.HostCopy(1<<30), KernelLatency+float64(1<<30)/(64e9*LinkEfficiency); math.Abs(got/want-1) > 1e-12 {
		t.Errorf("host copy %g, want %g", got, want)
	}
}

func TestNewCostModelErrors(t *testing.T) {
	node, _ := ParseNode("8xH100")
	if _, err := NewCostModel(node, Precision{Weights: FP8, Activations: FP8, KV: FP8}); err == nil {
		t.Error("FP8 activations accepted")
	}
	if _, err := NewCostModel(Node{GPU: node.GPU}, bf16); err == nil {
		t.Error("empty node accepted")
	}
	bad := node
	bad.GPU.HBMBytesPerS = 0
	if _, err := NewCostModel(bad, bf16); err == nil {
		t.Error("GPU without bandwidth accepted")
	}
}

// TestGEMMFP32Floor: a GEMM of a few rows runs at least at the CUDA cores'
// FP32 peak (times Matmul), so a one-row GEMM on an H20 streams its
// weights at the memory's rate instead of being compute-bound on tensor
// tiles it leaves nearly empty; where the tensor rate is higher (many
// rows, or any row count on an H100 whose tensor rate per byte is high)
// the floor changes nothing.
func TestGEMMFP32Floor(t *testing.T) {
	h20, h100 := costModel(t, "8xH20", bf16), costModel(t, "8xH100", bf16)
	const n, k = 5120, 5120 // a Qwen3-32B-sized projection on one GPU
	g := h20.gemm(1, n, k, BF16)
	if g.compute >= g.memory {
		t.Errorf("H20 one-row GEMM: compute %.1f µs ≥ memory %.1f µs; want memory-bound", g.compute*1e6, g.memory*1e6)
	}
	if want := 2 * float64(n*k) / (h20.eff.Matmul * h20.Node.GPU.FP32FLOPS); math.Abs(g.compute/want-1) > 1e-12 {
		t.Errorf("H20 one-row GEMM compute %g s, want the FP32 floor's %g s", g.compute, want)
	}
	for _, c := range []struct {
		name string
		cm   *CostModel
		m    int
	}{{"H20, 512 rows", h20, 512}, {"H100, 1 row", h100, 1}, {"H100, 4,096 rows", h100, 4096}} {
		g := c.cm.gemm(c.m, n, k, BF16)
		tensor := 2 * float64(c.m) * n * k / (c.cm.actPeak * c.cm.eff.Matmul * shapeFactor(float64(c.m), n, k, c.cm.eff.GEMMHalf))
		if c.name != "H100, 1 row" && math.Abs(g.compute/tensor-1) > 1e-12 {
			t.Errorf("%s: compute %g s, want the tensor rate's %g s", c.name, g.compute, tensor)
		}
		if c.name == "H100, 1 row" && max(g.compute, g.memory) != g.memory {
			t.Errorf("%s: not memory-bound", c.name)
		}
	}
}
