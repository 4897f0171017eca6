package sim

import (
	"math"
	"testing"
)

func sidpCost(t testing.TB, node string) *CostModel {
	t.Helper()
	n, err := ParseNode(node)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCostModel(n, Precision{Weights: BF16, Activations: BF16, KV: BF16})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFFNShare is S1: the FFN share of the parameters the paper quotes
// (§2.1), from the presets' configs.
func TestFFNShare(t *testing.T) {
	for _, c := range []struct {
		id        string
		want, tol float64
	}{{"Qwen/Qwen3-32B", 0.77, 0.01}, {"meta-llama/Llama-3.1-405B", 0.82, 0.015}} {
		cfg, err := LookupModel(c.id)
		if err != nil {
			t.Fatal(err)
		}
		if got := FFNShare(cfg); math.Abs(got-c.want) > c.tol {
			t.Errorf("%s: FFN share %.4f, paper %.2f ± %.3f", c.id, got, c.want, c.tol)
		}
	}
	cfg, _ := LookupModel("Qwen/Qwen3-32B")
	if got := FFNShare(cfg); math.Abs(got-25165824000.0/32762123264) > 1e-12 { // 64·3·5120·25600 of 32,762,123,264
		t.Errorf("Qwen3-32B FFN share %v", got)
	}
}

// TestSiDPMemory checks R18 to the byte and the paper's memory claims on
// its H20 node (u = 0.9): the freed bytes are the non-owned FFN layers,
// the gain is (1−1/N)·F/TP − C_slots, the KV factor at TP2/DP4 of the
// 70B/72B models is the paper's 1.8 ± 0.15 (S2), Qwen3-32B's at TP4/DP2 is
// modest (≤ 1.15), and at TP1/DP8 vLLM cannot hold the 70B/72B weights
// while SiDP can (§5.2).
func TestSiDPMemory(t *testing.T) {
	c := sidpCost(t, "8xH20-141GB")
	factor := func(id string, tp int) (SiDPMemory, float64) {
		t.Helper()
		cfg, err := LookupModel(id)
		if err != nil {
			t.Fatal(err)
		}
		s := SiDP{Replicas: 8 / tp, TP: tp}
		m, err := c.SiDPMemory(cfg, s, 0, MemoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := int64(s.Replicas)
		ffn := int64(cfg.Layers) * 3 * int64(cfg.Intermediate/tp) * int64(cfg.Hidden) * 2 // F/TP in BF16
		if m.Freed != ffn-ffn/n || m.Slots != (n-1)*ffn/int64(cfg.Layers) {
			t.Errorf("%s TP%d: freed %d slots %d, want %d and %d", id, tp, m.Freed, m.Slots, ffn-ffn/n, (n-1)*ffn/int64(cfg.Layers))
		}
		if m.Baseline.Fits() && m.Gain() != m.Freed-m.Slots {
			t.Errorf("%s TP%d: gain %d, want freed − slots %d", id, tp, m.Gain(), m.Freed-m.Slots)
		}
		return m, float64(m.KV) / float64(m.Baseline.KV)
	}
	best := 0.0
	for _, id := range []string{"Qwen/Qwen2.5-72B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"} {
		_, f := factor(id, 2)
		best = max(best, f)
		m, _ := factor(id, 1)
		if m.Baseline.Fits() || !m.Fits() || m.KV < 60e9 {
			t.Errorf("%s TP1/DP8: vLLM fits %v, SiDP fits %v with %.1f GB of KV", id, m.Baseline.Fits(), m.Fits(), float64(m.KV)/1e9)
		}
	}
	if math.Abs(best-1.8) > 0.15 {
		t.Errorf("largest KV factor at TP2/DP4 %.3f, paper up to 1.8 ± 0.15", best)
	}
	if _, f := factor("Qwen/Qwen3-32B", 4); f <= 1 || f > 1.15 {
		t.Errorf("Qwen3-32B TP4/DP2: KV factor %.3f, paper: modest (≤ 1.15)", f)
	}
	cfg, _ := LookupModel("Qwen/Qwen3-32B")
	if _, err := c.SiDPMemory(cfg, SiDP{Replicas: 8, Slots: 3}, 0, MemoryOptions{}); err == nil {
		t.Error("3 slots under peak shifting at N=8 accepted")
	}
	if _, err := c.SiDPMemory(cfg, SiDP{Replicas: 8, Slots: 3, NoPeakShift: true}, 0, MemoryOptions{}); err != nil {
		t.Error(err)
	}
}
