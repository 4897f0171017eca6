package sim

import (
	"math"
	"testing"

	"github.com/gearboxlm/gearbox/parallel"
)

// fp16 is the Seesaw paper's precision: float16 everywhere.
var fp16 = Precision{Weights: FP16, Activations: FP16, KV: FP16}

// x8Copy is the hand-computed time of a copy of bytes over a PCIe 4.0 x8
// host link: a kernel latency plus the bytes at 80% of 16 GiB/s.
func x8Copy(bytes float64) float64 { return 3.1e-6 + bytes/(0.8*17179869184) }

func placement(t *testing.T, plan string) parallel.Placement {
	t.Helper()
	p, err := parallel.Parse(plan)
	if err != nil {
		t.Fatal(err)
	}
	return parallel.Standard(p)
}

// TestHostCopyLink checks that host copies cross the node's per-GPU host
// link, not the GPU's own interface: the same L4s copy at half the rate in
// the g6.48xlarge box (Gen4 x8) as on their Gen4 x16 cards.
func TestHostCopyLink(t *testing.T) {
	const gib = 1 << 30
	aws := costModel(t, "g6.48xlarge", fp16)
	card := costModel(t, "8xL4", fp16)
	if got, want := aws.HostCopy(gib), x8Copy(gib); math.Abs(got/want-1) > 1e-12 {
		t.Errorf("g6.48xlarge: %g s per GiB, want %g", got, want)
	}
	if got, want := card.HostCopy(gib), 3.1e-6+gib/(0.8*32e9); math.Abs(got/want-1) > 1e-12 {
		t.Errorf("8xL4: %g s per GiB, want %g", got, want)
	}
	if got, want := costModel(t, "8xA10G", fp16).HostCopy(gib), x8Copy(gib); math.Abs(got/want-1) > 1e-12 {
		t.Errorf("8xA10G: %g s per GiB, want %g", got, want)
	}
	if aws.HostCopy(0) != 0 || aws.HostCopy(-1) != 0 {
		t.Error("empty copy takes time")
	}
	// A Node built by hand, without NewNode, falls back to the GPU's PCIe.
	n, _ := ParseNode("8xL4")
	n.Host = HostLink{}
	if cm, err := NewCostModel(n, fp16); err != nil || cm.HostCopy(gib) != card.HostCopy(gib) {
		t.Errorf("no host link: %v", err)
	}
}

// TestWeightReload checks Seesaw's re-shard cost against hand-computed
// shard sizes of Llama-2-70B in float16 on g5.48xlarge.
func TestWeightReload(t *testing.T) {
	cfg, err := LookupModel("meta-llama/Llama-2-70b-hf")
	if err != nil {
		t.Fatal(err)
	}
	cm := costModel(t, "g5.48xlarge", fp16)
	cases := []struct {
		plan  string
		rank  int
		elems float64
	}{
		// TP=8: per layer 2·8192 norms + (1024+2·128)·8192 qkv +
		// 8192·1024 o + 3·3584·8192 MLP = 106,971,136, times 80; plus
		// the 4,000-row vocabulary slices of the embedding and LM head
		// (32,768,000 each) and the final norm (8,192).
		{"tp=8", 0, 106971136*80 + 2*32768000 + 8192},
		{"tp=8", 7, 106971136*80 + 2*32768000 + 8192},
		// PP=8: 10 whole layers of 855,654,400; the first stage adds the
		// embedding (32000·8192), the last the final norm and LM head.
		{"pp=8", 0, 855654400*10 + 262144000},
		{"pp=8", 7, 855654400*10 + 8192 + 262144000},
		{"pp=8", 3, 855654400 * 10},
		// TP=2, PP=4 (ranks are TP-fastest): rank 3 is TP rank 1 of stage
		// 1, 20 layers of TP halves (q 4096, 4 KV heads of 128, MLP
		// 14336); rank 1 is stage 0's, with half the embedding too.
		{"tp=2,pp=4", 3, (2*8192 + (4096+1024)*8192 + 8192*4096 + 3*14336*8192) * 20},
		{"tp=2,pp=4", 1, (2*8192+(4096+1024)*8192+8192*4096+3*14336*8192)*20 + 16000*8192},
	}
	for _, c := range cases {
		l := placement(t, c.plan)
		got, err := cm.WeightReload(cfg, l, c.rank)
		if err != nil {
			t.Fatal(err)
		}
		if want := x8Copy(2 * c.elems); math.Abs(got/want-1) > 1e-12 {
			t.Errorf("%s rank %d: %g s, want %g (%g bytes)", c.plan, c.rank, got, want, 2*c.elems)
		}
		// The same bytes the memory model holds for the rank.
		if m, err := cm.Memory(cfg, l.Plan, c.rank, MemoryOptions{}); err != nil || float64(m.Weights) != 2*c.elems {
			t.Errorf("%s rank %d: Memory.Weights %d, want %g: %v", c.plan, c.rank, m.Weights, 2*c.elems, err)
		}
	}
	// The paper's scale (§4 of the spec: 17.5 GiB over 16 GiB/s, about
	// 1.1 s): a TP=8 shard is 16.06 GiB, 1.25 s at 80% of the link.
	if got, _ := cm.WeightReload(cfg, placement(t, "tp=8"), 0); got < 1.2 || got > 1.3 {
		t.Errorf("TP=8 reload %g s", got)
	}
	for _, bad := range []struct {
		plan string
		rank int
	}{{"tp=8", 8}, {"tp=8", -1}, {"tp=16", 0}, {"tp=3", 0}} {
		p, _ := parallel.Parse(bad.plan)
		if _, err := cm.WeightReload(cfg, parallel.Standard(p), bad.rank); err == nil {
			t.Errorf("%s rank %d accepted", bad.plan, bad.rank)
		}
	}
}

// TestKVSwap checks the KV tier's transfer cost against hand-computed
// per-token slices.
func TestKVSwap(t *testing.T) {
	l70, err := LookupModel("meta-llama/Llama-2-70b-hf")
	if err != nil {
		t.Fatal(err)
	}
	l15, err := LookupModel("elinas/Llama-3-15B-Instruct-zeroed")
	if err != nil {
		t.Fatal(err)
	}
	cm := costModel(t, "g5.48xlarge", fp16)
	cases := []struct {
		name     string
		plan     string
		rank     int
		perToken float64 // bytes of the rank's KV slice per token
	}{
		// 70B, TP=8: one of 8 KV heads in all 80 layers, K and V of 128
		// fp16 elements: 2·80·1·128·2 = 40,960 bytes.
		{"70B", "tp=8", 5, 40960},
		// 70B, PP=8: all 8 KV heads in 10 layers: the same 40,960.
		{"70B", "pp=8", 2, 40960},
		// 70B, TP=4 PP=2: 2 KV heads in 40 layers: 2·40·2·128·2.
		{"70B", "tp=4,pp=2", 3, 40960},
		// 70B, TP=2: 4 heads, 80 layers.
		{"70B", "tp=2", 0, 163840},
		// 15B on 4 GPUs, PP=4: 8 heads, 16 layers: 2·16·8·128·2.
		{"15B", "pp=4", 1, 65536},
		// 15B, TP=4: 2 heads, 64 layers.
		{"15B", "tp=4", 3, 65536},
	}
	for _, c := range cases {
		cfg := l70
		if c.name == "15B" {
			cfg = l15
		}
		for _, tokens := range []int64{1, 1000, 3000 * 64} {
			got, err := cm.KVSwap(cfg, placement(t, c.plan), c.rank, tokens)
			if err != nil {
				t.Fatal(err)
			}
			if want := x8Copy(float64(tokens) * c.perToken); math.Abs(got/want-1) > 1e-12 {
				t.Errorf("%s %s rank %d, %d tokens: %g s, want %g", c.name, c.plan, c.rank, tokens, got, want)
			}
		}
	}
	if got, err := cm.KVSwap(l70, placement(t, "tp=8"), 0, 0); got != 0 || err != nil {
		t.Errorf("zero tokens: %g, %v", got, err)
	}
	if _, err := cm.KVSwap(l70, placement(t, "tp=8"), 0, -1); err == nil {
		t.Error("negative tokens accepted")
	}
	if _, err := cm.KVSwap(l70, placement(t, "tp=8"), 8, 1); err == nil {
		t.Error("rank 8 of 8 accepted")
	}
}
