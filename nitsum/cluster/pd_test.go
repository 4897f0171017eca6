package cluster

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/parallel"
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

// TestPrefillDecodeEmbeddings: an embedding request on a prefill instance
// ends there with its prompt's last hidden row (one rank's), never handed
// to a decode instance, while the generations beside it are handed off
// and keep their single-rank tokens; the dispatcher holds nothing after.
func TestPrefillDecodeEmbeddings(t *testing.T) {
	m := loadTiny(t)
	reqs := requests(4, 6, m.cfg.Vocab)
	want := reference(t, reqs)
	prompt := fixture.Tokens(900, 9, m.cfg.Vocab)
	x, err := cpuexec.NewExecutor(m.cfg, m.w, cpuexec.Options{BlockSize: 4, NumBlocks: 64})
	if err != nil {
		t.Fatal(err)
	}
	b := &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: prompt, Blocks: []int{0, 1, 2}, NumLogits: 1}}, Hidden: true}
	if _, err := x.Step(context.Background(), b, parallel.Standard(parallel.Single)); err != nil {
		t.Fatal(err)
	}
	wantHidden := slices.Clone(x.Hidden())

	c := newCluster(t, 4, pdLayout([]int{2}, []int{1, 1}), true, nil)
	d := &driven{c: c}
	st, err := c.Submit(engine.Request{ID: "embed", Prompt: prompt, Embed: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		d.submit(t, r)
	}
	var got []float32
	finals := 0
	for range 200 {
		if _, err := c.Iterate(context.Background()); err != nil {
			t.Fatal(err)
		}
		d.drain(t)
		for {
			ev, ok := st.TryRecv()
			if !ok {
				break
			}
			if ev.Finish != "" {
				finals++
				if ev.Finish != engine.FinishStop {
					t.Fatalf("embedding request finished %s: %v", ev.Finish, ev.Err)
				}
				got = ev.Embedding
			}
		}
		if finals > 0 && !slices.Contains(d.finals, 0) {
			break
		}
	}
	if finals != 1 || len(got) != len(wantHidden) {
		t.Fatalf("embedding request: %d final events, %d values (want 1, %d)", finals, len(got), len(wantHidden))
	}
	for i := range got {
		if diff := math.Abs(float64(got[i] - wantHidden[i])); diff > 1e-4*math.Max(1, math.Abs(float64(wantHidden[i]))) {
			t.Fatalf("value %d is %g, one rank %g", i, got[i], wantHidden[i])
		}
	}
	d.check(t, want)
	if st := c.Stats(); st.HandedOff != int64(len(reqs)) {
		t.Errorf("%d handed off, want the %d generations", st.HandedOff, len(reqs))
	}
}
