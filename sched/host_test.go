package sched

import (
	"slices"
	"testing"
	"time"
)

// TestHostTier parks prefilled requests on the host tier, runs phases,
// and brings them back: block counts, schedulability, HostFits and
// aborts while a swap is in flight all hold, and every block returns.
func TestHostTier(t *testing.T) {
	s, err := New(Config{MaxNumBatchedTokens: 64, MaxModelLen: 64, BlockSize: 4, NumBlocks: 8, HostBlocks: 6, Watermark: -1, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{7, 5, 9} {
		if err := s.Add(&Request{ID: string(rune('A' + i)), Prompt: make([]int, n), MaxTokens: 4, Arrival: time.Unix(int64(i), 0)}); err != nil {
			t.Fatal(err)
		}
	}
	// Prefill everything (PrefillOnly), sampling one token each.
	st := s.SchedulePhase(PrefillOnly)
	if len(st.Seqs) != 3 {
		t.Fatalf("prefill step: %v", summarize(st))
	}
	if err := s.Update(st, []int{1, 1, 1}); err != nil {
		t.Fatal(err)
	}
	// Park A (7 computed tokens: 2 blocks) and B (5: 2 blocks).
	var swaps []HostSwap
	for _, id := range []string{"A", "B"} {
		sw, ok := s.SwapOut(id)
		if !ok || len(sw.Device) != 2 || len(sw.Host) != 2 || !sw.Out() {
			t.Fatalf("swap out %s: %+v %v", id, sw, ok)
		}
		swaps = append(swaps, sw)
	}
	if st := s.SchedulePhase(DecodeOnly); len(st.Seqs) != 1 || st.Seqs[0].ID != "C" {
		t.Fatalf("swapping requests were scheduled: %v", summarize(st))
	}
	for _, sw := range swaps {
		if err := s.SwapDone(sw, true); err != nil {
			t.Fatal(err)
		}
	}
	if s.NumParked() != 2 || s.NumRunning() != 1 {
		t.Fatalf("parked %d, running %d", s.NumParked(), s.NumRunning())
	}
	if used, total := s.HostBlocks(); used != 4 || total != 12 {
		t.Fatalf("host blocks %d of %d", used, total)
	}
	// Host ids are global: replica 1's are offset by HostBlocks.
	for _, sw := range swaps {
		for _, b := range sw.Host {
			if b < sw.Replica*6 || b >= (sw.Replica+1)*6 {
				t.Fatalf("host block %d of replica %d", b, sw.Replica)
			}
		}
	}
	// A waiting 20-token prompt needs 5 host blocks; each replica has 4 free.
	if err := s.Add(&Request{ID: "D", Prompt: make([]int, 20), MaxTokens: 2, Arrival: time.Unix(9, 0)}); err != nil {
		t.Fatal(err)
	}
	if s.HostFits() {
		t.Fatal("5 blocks fit in 4 free host blocks")
	}
	// Bring both back, then abort B while its swap is in flight.
	in := s.SwapIn(0)
	if len(in) != 2 || in[0].ID != "A" || in[0].Out() {
		t.Fatalf("swap in: %+v", in)
	}
	if !s.Abort("B") {
		t.Fatal("abort of a swapping request")
	}
	for _, sw := range in {
		if err := s.SwapDone(sw, true); err != nil {
			t.Fatal(err)
		}
	}
	if !s.HostFits() {
		t.Fatal("an empty host tier of 6 blocks per replica cannot hold 5")
	}
	st = s.SchedulePhase(DecodeOnly)
	if ids := []string{st.Seqs[0].ID, st.Seqs[1].ID}; len(st.Seqs) != 2 || !slices.Contains(ids, "A") || !slices.Contains(ids, "C") {
		t.Fatalf("decode after swap-in: %v", summarize(st))
	}
	if st.Seqs[0].Pos != 7 && st.Seqs[1].Pos != 7 {
		t.Fatalf("A resumed at the wrong position: %v", summarize(st))
	}
	for _, id := range []string{"A", "C", "D"} {
		_ = s.Finish(id, Stop)
	}
	if used, _ := s.HostBlocks(); used != 0 || s.KVUsage() != 0 || s.NumParked() != 0 {
		t.Fatalf("blocks left: host %d, device usage %v, parked %d", used, s.KVUsage(), s.NumParked())
	}
	// A failed swap-out is undone: the request runs on.
	s.Add(&Request{ID: "E", Prompt: make([]int, 3), MaxTokens: 2})
	st = s.Schedule()
	_ = s.Update(st, []int{1})
	sw, ok := s.SwapOut("E")
	if !ok {
		t.Fatal("swap out E")
	}
	if err := s.SwapDone(sw, false); err != nil || s.NumRunning() != 1 {
		t.Fatalf("undo: %v, running %d", err, s.NumRunning())
	}
	if _, ok := s.SwapOut("nobody"); ok {
		t.Fatal("swap out of an unknown request")
	}
}

// TestParkInsteadOfPreempt: when a decode step needs a block and none is
// free, the lowest-priority request is parked on the host tier (its
// device blocks go to the request that needs them, its copy is in the
// step) while the tier has room, and preempted by recomputation once it
// has none; a parked victim comes back through SwapIn with its tokens.
func TestParkInsteadOfPreempt(t *testing.T) {
	for _, hostBlocks := range []int{0, 2, 8} {
		s, err := New(Config{MaxNumBatchedTokens: 64, MaxModelLen: 64, BlockSize: 4, NumBlocks: 6, HostBlocks: hostBlocks, Watermark: -1})
		if err != nil {
			t.Fatal(err)
		}
		// Three prompts of 8 tokens fill the six blocks exactly.
		for i := range 3 {
			if err := s.Add(&Request{ID: string(rune('A' + i)), Prompt: make([]int, 8), MaxTokens: 8, Arrival: time.Unix(int64(i), 0)}); err != nil {
				t.Fatal(err)
			}
		}
		st := s.Schedule()
		if len(st.Seqs) != 3 {
			t.Fatalf("host %d: prefill %v", hostBlocks, summarize(st))
		}
		if err := s.Update(st, []int{1, 1, 1}); err != nil {
			t.Fatal(err)
		}
		// Decoding token 9 needs a third block for A: C (latest) is the victim.
		st = s.SchedulePhase(DecodeOnly)
		ids := []string{}
		for _, q := range st.Seqs {
			ids = append(ids, q.ID)
		}
		if !slices.Equal(ids, []string{"A", "B"}) {
			t.Fatalf("host %d: decode step runs %v", hostBlocks, ids)
		}
		if hostBlocks < 2 { // C's 8 computed tokens need 2 host blocks
			if !slices.Equal(st.Preempted, []string{"C"}) || len(st.Parked) != 0 || s.NumWaiting() != 1 {
				t.Fatalf("host %d: preempted %v parked %d waiting %d", hostBlocks, st.Preempted, len(st.Parked), s.NumWaiting())
			}
			continue
		}
		if len(st.Preempted) != 0 || len(st.Parked) != 1 {
			t.Fatalf("host %d: preempted %v parked %+v", hostBlocks, st.Preempted, st.Parked)
		}
		sw := st.Parked[0]
		if sw.ID != "C" || !sw.Out() || len(sw.Device) != 2 || len(sw.Host) != 2 {
			t.Fatalf("host %d: park %+v", hostBlocks, sw)
		}
		// C's device blocks went to A: one of them is A's new third block.
		if a := st.Seqs[0].Blocks; len(a) != 3 || !slices.Contains(sw.Device, a[2]) {
			t.Fatalf("host %d: A's blocks %v, C's freed %v", hostBlocks, a, sw.Device)
		}
		if s.NumParked() != 1 || s.NumWaiting() != 0 || s.Preemptions() != 1 {
			t.Fatalf("host %d: parked %d waiting %d preemptions %d", hostBlocks, s.NumParked(), s.NumWaiting(), s.Preemptions())
		}
		if err := s.Update(st, []int{2, 2}); err != nil {
			t.Fatal(err)
		}
		// Finish A and B; C comes back with its 9 known tokens.
		for _, id := range []string{"A", "B"} {
			if err := s.Finish(id, Stop); err != nil {
				t.Fatal(err)
			}
		}
		in := s.SwapIn(0)
		if len(in) != 1 || in[0].ID != "C" || len(in[0].Host) != 2 || !slices.Equal(in[0].Host, sw.Host) {
			t.Fatalf("host %d: swap in %+v", hostBlocks, in)
		}
		if err := s.SwapDone(in[0], true); err != nil {
			t.Fatal(err)
		}
		st = s.SchedulePhase(DecodeOnly)
		if len(st.Seqs) != 1 || st.Seqs[0].ID != "C" || st.Seqs[0].Pos != 8 || len(st.Seqs[0].Tokens) != 1 {
			t.Fatalf("host %d: C after swap-in %+v", hostBlocks, st.Seqs)
		}
		if used, _ := s.HostBlocks(); used != 0 {
			t.Fatalf("host %d: %d host blocks still used", hostBlocks, used)
		}
	}
}

// TestFitsAtSeqCap: with MaxNumSeqs requests running, neither tier
// "fits" the next waiting request, since admission takes none (Seesaw
// would otherwise switch to a prefill phase that schedules nothing and
// back, a weight re-shard each way); one finishing frees a slot.
func TestFitsAtSeqCap(t *testing.T) {
	s, err := New(Config{MaxNumBatchedTokens: 64, MaxNumSeqs: 2, MaxModelLen: 64, BlockSize: 4, NumBlocks: 32, HostBlocks: 32, Watermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"A", "B", "C"} {
		if err := s.Add(&Request{ID: id, Prompt: make([]int, 4), MaxTokens: 4}); err != nil {
			t.Fatal(err)
		}
	}
	if !s.DeviceFits() || !s.HostFits() {
		t.Fatalf("before admission: device fits %v, host fits %v", s.DeviceFits(), s.HostFits())
	}
	if st := s.Schedule(); len(st.Seqs) != 2 {
		t.Fatalf("admitted %v", summarize(st))
	}
	if s.DeviceFits() || s.HostFits() {
		t.Fatalf("at the cap: device fits %v, host fits %v", s.DeviceFits(), s.HostFits())
	}
	_ = s.Finish("A", Stop)
	if !s.DeviceFits() || !s.HostFits() {
		t.Fatalf("after a finish: device fits %v, host fits %v", s.DeviceFits(), s.HostFits())
	}
}
