package policy

import (
	"testing"

	"github.com/gearboxlm/gearbox/parallel"
)

func TestShiftSwitchesAtThreshold(t *testing.T) {
	base := parallel.Plan{DP: 1, PP: 1, SP: 4, TP: 2}
	p, err := NewShift(base, 256)
	if err != nil {
		t.Fatal(err)
	}
	shift := parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 8}
	for _, c := range []struct {
		tokens int
		want   parallel.Plan
	}{{1, shift}, {256, shift}, {257, base}, {4096, base}} {
		if got := p.Plan(Step{Tokens: c.tokens}); got != c.want {
			t.Errorf("%d tokens: %s, want %s", c.tokens, got, c.want)
		}
	}
	if plans := p.Plans(); len(plans) != 2 || plans[0] != base || plans[1] != shift {
		t.Fatalf("Plans() = %v", plans)
	}
	if _, err := NewShift(parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 8}, 256); err == nil {
		t.Fatal("shift from a plan without SP accepted")
	}
	if _, err := NewShift(base, -1); err == nil {
		t.Fatal("negative threshold accepted")
	}
	if (Static{P: base}).Plan(Step{Tokens: 1}) != base {
		t.Fatal("static policy changed plan")
	}
}
