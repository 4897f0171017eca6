package sim

import (
	"testing"

	"github.com/gearboxlm/gearbox/parallel"
)

func TestMemoryWeights(t *testing.T) {
	cfg := preset(t, "meta-llama/Llama-3.3-70B-Instruct")
	bf := costModel(t, "8xH200", bf16)
	fp8 := costModel(t, "8xH200", Precision{Weights: FP8, Activations: BF16, KV: BF16})
	// One rank in BF16 holds every parameter at 2 bytes.
	m, err := bf.Memory(cfg, parallel.Single, 0, MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Weights != 2*cfg.NumParams() || m.AlsoWeights != 0 {
		t.Errorf("single rank BF16 weights %d, want %d", m.Weights, 2*cfg.NumParams())
	}
	// FP8 quantizes the linear layers only: the embedding and LM head
	// (2·128256·8192) and the norms stay BF16.
	m, _ = fp8.Memory(cfg, parallel.Single, 0, MemoryOptions{})
	rest := int64(2*128256*8192 + 80*2*8192 + 8192)
	if want := (cfg.NumParams() - rest) + 2*rest; m.Weights != want {
		t.Errorf("single rank FP8 weights %d, want %d", m.Weights, want)
	}
	// The CPU engine on a BF16 checkpoint holds every matrix, embedding
	// and LM head included, at 2 bytes and the norms in float32.
	cpu := costModel(t, "8xH200", Precision{Weights: BF16, Activations: FP32, KV: FP32, HeadInWeights: true})
	m, _ = cpu.Memory(cfg, parallel.Single, 0, MemoryOptions{})
	norms := int64(80*2*8192 + 8192)
	if want := 2*(cfg.NumParams()-norms) + 4*norms; m.Weights != want {
		t.Errorf("single rank CPU BF16 weights %d, want %d", m.Weights, want)
	}
	// TP=8: each rank its WeightElems, the linear part at 1 byte.
	tp8, _ := parallel.Parse("tp=8")
	l := parallel.Standard(tp8)
	for r := 0; r < 8; r++ {
		m, err := fp8.Memory(cfg, tp8, r, MemoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		linear := int64(80) * (8192*(1024+2*128) + 1024*8192 + 3*3584*8192)
		if want := linear + 2*(l.WeightElems(cfg, r)-linear); m.Weights != want {
			t.Errorf("rank %d FP8 weights %d, want %d", r, m.Weights, want)
		}
		// One KV head of 128 per rank, 80 layers, K and V, BF16.
		if m.KVBytesPerToken != 2*80*128*2 || m.KVTokens != m.KV/m.KVBytesPerToken || !m.Fits() {
			t.Errorf("rank %d: %+v", r, m)
		}
	}
	// The FP8 KV cache holds twice the tokens.
	fp8kv := costModel(t, "8xH200", Precision{Weights: FP8, Activations: BF16, KV: FP8})
	a, _ := fp8.Memory(cfg, tp8, 0, MemoryOptions{})
	b, _ := fp8kv.Memory(cfg, tp8, 0, MemoryOptions{})
	if b.KVTokens != 2*a.KVTokens && b.KVTokens != 2*a.KVTokens+1 {
		t.Errorf("FP8 KV: %d tokens, BF16 KV %d", b.KVTokens, a.KVTokens)
	}
}

func TestMemoryShiftAndCapacity(t *testing.T) {
	cfg := preset(t, "Qwen/Qwen3-32B")
	cm := costModel(t, "8xH200", Precision{Weights: FP8, Activations: BF16, KV: FP8})
	base, _ := parallel.Parse("sp=8")
	plain, err := cm.Memory(cfg, base, 3, MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shift, err := cm.Memory(cfg, base, 3, MemoryOptions{Also: []parallel.Placement{parallel.ShiftPlacement(base)}})
	if err != nil {
		t.Fatal(err)
	}
	// Under SP=8 every rank holds all weights; the shift plan adds its TP=8 shard.
	if want := cm.weightBytes(cfg, parallel.ShiftPlacement(base), 3); shift.AlsoWeights != want || want*7 > plain.Weights || want*9 < plain.Weights {
		t.Errorf("shift shard %d bytes (base %d)", shift.AlsoWeights, plain.Weights)
	}
	if shift.KV >= plain.KV || shift.KVBytesPerToken != plain.KVBytesPerToken {
		t.Errorf("shift %+v, plain %+v", shift, plain)
	}
	// Llama-3.3-70B in BF16 does not fit one H100; TP=4 does.
	llama := preset(t, "meta-llama/Llama-3.3-70B-Instruct")
	h100 := costModel(t, "8xH100", bf16)
	if m, _ := h100.Memory(llama, parallel.Single, 0, MemoryOptions{}); m.Fits() || m.KV != 0 || m.KVTokens != 0 {
		t.Errorf("70B on one H100: %+v", m)
	}
	dp2tp4, _ := parallel.Parse("dp=2,tp=4")
	caps, err := h100.KVCapacity(llama, dp2tp4, MemoryOptions{MaxBatchedTokens: 8192})
	if err != nil {
		t.Fatal(err)
	}
	if len(caps) != 2 || caps[0] != caps[1] || caps[0] < 100_000 {
		t.Errorf("KV capacity per replica %v", caps)
	}
	for _, bad := range []struct {
		plan string
		rank int
		opts MemoryOptions
	}{{"tp=16", 0, MemoryOptions{}}, {"tp=3", 0, MemoryOptions{}}, {"tp=2", 2, MemoryOptions{}}, {"tp=2", 0, MemoryOptions{MaxBatchedTokens: -1}}} {
		p, _ := parallel.Parse(bad.plan)
		if _, err := h100.Memory(llama, p, bad.rank, bad.opts); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
