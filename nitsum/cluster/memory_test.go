package cluster

import (
	"errors"
	"testing"
)

// TestWeightRule holds the warm executors to the memory rule (W1–W3):
// the column-split bytes every rank copies at start-up are exactly the
// rule's, TP1 copies none, and a budget below the rule is refused at New
// with ErrWeightsDoNotFit while one at the rule is accepted.
func TestWeightRule(t *testing.T) {
	m := loadTiny(t)
	rule, err := WeightRule(m.cfg, m.w, []int{1, 2, 4})
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 4, layout(2, 4), true, nil)
	for k, x := range c.warm {
		for r, b := range x.CopiedWeightBytes() {
			if want := rule.PerTP[k.tp]; b != want {
				t.Errorf("tp=%d at rank %d, rank %d: %d bytes copied, the rule says %d", k.tp, k.first, r, b, want)
			}
		}
	}
	if rule.PerTP[1] != 0 || rule.PerTP[2] != rule.ColSplit/2 || rule.PerTP[4] != rule.ColSplit/4 {
		t.Errorf("rule %s", rule)
	}
	t.Logf("%s", rule)
	// KV: 64 blocks of 4 tokens per executor rank, whose heads are 4, 2
	// and 1 of the model's 4 at TP 1, 2 and 4 (Σ_t 1/t = 1.75 of the whole
	// model's KV per block), each head 2 layers × head_dim × 8 bytes a token.
	for r, b := range c.KVBytesPerRank() {
		if want := int64(64*4*2*m.cfg.HeadDim*8) * (4 + 2 + 1); b != want {
			t.Errorf("rank %d holds %d KV bytes, want %d", r, b, want)
		}
	}
	_, err = New(Options{Config: m.cfg, Weights: m.w, Ranks: 4, Tiers: tiers(t), Profile: profile(), WeightBudget: rule.PerRank() - 1, Manual: true})
	if !errors.Is(err, ErrWeightsDoNotFit) {
		t.Fatalf("budget one byte short: %v", err)
	}
	t.Logf("refused: %v", err)
	newCluster(t, 4, nil, true, func(o *Options) { o.WeightBudget = rule.PerRank() })
}
