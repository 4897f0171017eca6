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
