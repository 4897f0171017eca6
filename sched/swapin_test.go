package sched

import (
	"testing"
	"time"
)

// TestSwapInLeavesDecodesTheirBlock: a parked request comes back only
// into blocks the running decodes do not need for their next token.
// Otherwise (8 device blocks, A and B at 16 tokens each, B parked) B's
// swap-in takes the 4 free blocks, A's next token finds none and A, with
// no victim below it, parks itself; B then does the same for A, forever
// (no step ever runs).
func TestSwapInLeavesDecodesTheirBlock(t *testing.T) {
	s, err := New(Config{MaxNumBatchedTokens: 64, MaxModelLen: 64, BlockSize: 4, NumBlocks: 8, HostBlocks: 16, Watermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"A", "B"} {
		if err := s.Add(&Request{ID: id, Prompt: make([]int, 16), MaxTokens: 8, Arrival: time.Unix(int64(i), 0)}); err != nil {
			t.Fatal(err)
		}
	}
	st := s.SchedulePhase(PrefillOnly)
	if len(st.Seqs) != 2 {
		t.Fatalf("prefill: %v", summarize(st))
	}
	if err := s.Update(st, []int{1, 1}); err != nil {
		t.Fatal(err)
	}
	sw, ok := s.SwapOut("B")
	if !ok {
		t.Fatal("swap out B")
	}
	if err := s.SwapDone(sw, true); err != nil {
		t.Fatal(err)
	}
	// A (4 blocks, full) needs a 5th for position 16; B needs 4 of the 4 free.
	if in := s.SwapIn(0); len(in) != 0 {
		t.Fatalf("B swapped in over A's next block: %+v", in)
	}
	for step := 0; step < 4; step++ { // positions 16–19: A's 5th block
		st = s.SchedulePhase(DecodeOnly)
		if len(st.Seqs) != 1 || st.Seqs[0].ID != "A" || st.Seqs[0].Pos != 16+step || len(st.Parked)+len(st.Preempted) != 0 {
			t.Fatalf("decode step %d: %v, parked %v, preempted %v", step, summarize(st), st.Parked, st.Preempted)
		}
		if err := s.Update(st, []int{1}); err != nil {
			t.Fatal(err)
		}
		if in := s.SwapIn(0); len(in) != 0 {
			t.Fatalf("step %d: B (4 blocks) swapped in beside A's 5 of 8: %+v", step, in)
		}
	}
	// Once A ends, B comes back and decodes where it stopped.
	if err := s.Finish("A", Length); err != nil {
		t.Fatal(err)
	}
	in := s.SwapIn(0)
	if len(in) != 1 || in[0].ID != "B" || len(in[0].Device) != 4 {
		t.Fatalf("swap in after A ended: %+v", in)
	}
	if err := s.SwapDone(in[0], true); err != nil {
		t.Fatal(err)
	}
	if st = s.SchedulePhase(DecodeOnly); len(st.Seqs) != 1 || st.Seqs[0].ID != "B" || st.Seqs[0].Pos != 16 {
		t.Fatalf("B after its swap-in: %v", summarize(st))
	}
}
