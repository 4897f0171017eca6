package engine

import (
	"fmt"
	"testing"

	"github.com/gearboxlm/gearbox/tensor"
)

// TestSeesawParksPreempted: under Seesaw with a device pool too small for
// the decodes' growth, the scheduler parks its victims on the host tier
// instead of preempting them by recomputation; the engine copies their
// KV out before the step that reuses their blocks, so every output still
// equals the request alone on one rank, no victim waits for a prefill
// phase, and every block comes back.
func TestSeesawParksPreempted(t *testing.T) {
	m := seesawModel(t)
	pool := tensor.NewPool(2)
	defer pool.Close()
	// 8 device blocks hold the six prompts' first blocks but not their
	// growth to 16–21 tokens (4–6 blocks each); the host holds them all.
	r := newSeesawRig(t, m, pool, pp2, tp2, 8, 40)
	var reqs []Request
	for i := range 6 {
		reqs = append(reqs, r.req(fmt.Sprint("r", i), 500+i, 6+i%3, 10+i%4))
	}
	want := r.alone(reqs)
	got := r.serve(reqs)
	for i := range reqs {
		if fmt.Sprint(got[i].Tokens) != fmt.Sprint(want[i].Tokens) {
			t.Fatalf("%s: %v, alone on one rank %v", reqs[i].ID, got[i].Tokens, want[i].Tokens)
		}
	}
	st := r.e.Stats()
	if st.Preemptions == 0 {
		t.Fatalf("no request was parked for lack of device blocks: %+v", st)
	}
	// Parked victims are swapped, not recomputed: one prefill phase and
	// one decode phase, and what went out came back.
	if r.pol.Transitions() != 1 || st.SwapOutBytes == 0 || st.SwapOutBytes != st.SwapInBytes {
		t.Fatalf("%d phase changes (want 1: parked victims need no new prefill), stats %+v", r.pol.Transitions(), st)
	}
	if st.KVUsage != 0 || st.Running != 0 || st.Waiting != 0 || st.Parked != 0 || st.HostKVUsage != 0 {
		t.Fatalf("engine not idle: %+v", st)
	}
}
