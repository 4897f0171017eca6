package cluster

import (
	"fmt"
	"testing"

	"github.com/gearboxlm/gearbox/nitsum"
)

// pdLayout is prefill instances of the degrees pre then decode instances
// of the degrees dec, in rank order, all of tier 0.
func pdLayout(pre, dec []int) []nitsum.Instance {
	var out []nitsum.Instance
	first := 0
	for i, t := range append(append([]int(nil), pre...), dec...) {
		role := nitsum.Prefill
		if i >= len(pre) {
			role = nitsum.Decode
		}
		out = append(out, nitsum.Instance{Tier: 0, Role: role, TP: t, FirstGPU: first, Capacity: 4, Batch: 8, Background: role == nitsum.Prefill})
		first += t
	}
	return out
}

// TestPrefillDecode (D1) serves requests on prefill instances that hand
// each request, after its first token, to a decode instance of another
// TP degree (TP2 prefill → two TP1 decode, and two TP1 prefill → TP2
// decode, on 4 ranks): every request's greedy tokens equal its tokens
// alone on one rank, each ends once, every request was handed off right
// after its prompt, and the KV bytes that crossed are exactly every
// prompt token's H heads (no rank of the prefill instance is one of the
// decode instance's): Σ prompt × H × layers × head_dim × 8.
func TestPrefillDecode(t *testing.T) {
	m := loadTiny(t)
	reqs := requests(8, 6, m.cfg.Vocab)
	want := reference(t, reqs)
	var promptTokens int64
	for _, r := range reqs {
		promptTokens += int64(len(r.Prompt))
	}
	for _, tc := range []struct{ pre, dec []int }{{[]int{2}, []int{1, 1}}, {[]int{1, 1}, []int{2}}} {
		t.Run(fmt.Sprint(tc.pre, tc.dec), func(t *testing.T) {
			c := newCluster(t, 4, pdLayout(tc.pre, tc.dec), true, nil)
			d := &driven{c: c}
			for _, r := range reqs {
				d.submit(t, r)
			}
			d.finishAll(t, 200)
			d.check(t, want)
			st := c.Stats()
			if st.HandedOff != int64(len(reqs)) {
				t.Errorf("%d handed off, want %d", st.HandedOff, len(reqs))
			}
			if wantB := promptTokens * int64(m.cfg.KVHeads) * kvBytesPerToken(c); st.HandoffBytes != wantB {
				t.Errorf("hand-offs moved %d KV bytes, want %d", st.HandoffBytes, wantB)
			}
			for _, in := range c.insts {
				if len(in.exec.PlanSteps()) == 0 {
					t.Errorf("%s instance tp%d@%d ran no step", in.spec.Role, in.spec.TP, in.spec.FirstGPU)
				}
			}
			t.Logf("%d handed off, %d KV bytes", st.HandedOff, st.HandoffBytes)
		})
	}
}
