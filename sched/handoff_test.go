package sched

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestHandoff takes a running request (mid-decode), a request mid-prefill
// and a waiting one from one scheduler into another: running ones keep
// their computed tokens on freshly allocated blocks and continue from
// there, the waiting one keeps its place in line, and a refusal (no free
// blocks, duplicate id) changes nothing.
func TestHandoff(t *testing.T) {
	cfg := Config{MaxNumBatchedTokens: 10, MaxNumSeqs: 2, MaxModelLen: 64, BlockSize: 4, NumBlocks: 16}
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	for i, n := range []int{3, 20, 5} {
		if err := src.Add(&Request{ID: string(rune('a' + i)), Prompt: slices.Repeat([]int{i + 1}, n), MaxTokens: 8, Arrival: t0.Add(time.Duration(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // a: prefilled and decoding; b: 16 of its 20 prompt tokens; c: waiting (MaxNumSeqs)
		st := src.Schedule()
		sampled := make([]int, len(st.Seqs))
		for i := range sampled {
			sampled[i] = 100 + i
		}
		if err := src.Update(st, sampled); err != nil {
			t.Fatal(err)
		}
	}
	hs, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hs {
		got = append(got, h.ID)
	}
	if !slices.Equal(got, []string{"a", "b", "c"}) || !hs[0].Running || !hs[1].Running || hs[2].Running {
		t.Fatalf("snapshot %+v", hs)
	}
	if hs[0].Computed != 4 || len(hs[0].Tokens) != 5 || hs[1].Computed != 16 || len(hs[1].Tokens) != 20 || hs[2].Blocks != nil {
		t.Fatalf("snapshot %+v", hs)
	}
	small, _ := New(Config{MaxModelLen: 64, BlockSize: 4, NumBlocks: 5, MaxNumSeqs: 2})
	a2 := hs[0]
	a2.ID = "a2"
	for _, h := range []Handoff{hs[0], a2} { // one block each: 3 left, b needs 4
		if _, err := small.Adopt(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := small.Adopt(hs[1]); !errors.Is(err, ErrNoBlocks) || small.NumRunning() != 2 {
		t.Fatalf("adopt past the pool: %v, %d running", err, small.NumRunning())
	}
	dst, _ := New(cfg)
	for _, h := range hs {
		blocks, err := dst.Adopt(h)
		if err != nil {
			t.Fatal(err)
		}
		if want := (h.Computed + 3) / 4; len(blocks) != want {
			t.Errorf("%s: %d blocks for %d computed tokens", h.ID, len(blocks), h.Computed)
		}
	}
	if _, err := dst.Adopt(hs[0]); !errors.Is(err, ErrDuplicateID) {
		t.Errorf("second adopt of a: %v", err)
	}
	st := dst.Schedule()
	var plan []string
	for _, s := range st.Seqs {
		plan = append(plan, s.ID)
		if s.ID == "a" && (s.Pos != 4 || len(s.Tokens) != 1 || !s.Sample) {
			t.Errorf("a continues %+v, want its one decode at 4", s)
		}
		if s.ID == "b" && (s.Pos != 16 || len(s.Tokens) != 4 || !s.Sample) {
			t.Errorf("b continues %+v, want its last 4 prompt tokens at 16", s)
		}
	}
	if !slices.Equal(plan, []string{"a", "b"}) || dst.NumWaiting() != 1 {
		t.Errorf("first step on the adopter %v, %d waiting; want a and b running, c waiting", plan, dst.NumWaiting())
	}
	usedBefore, _ := src.KVBlocks()
	for _, id := range []string{"a", "b", "c"} {
		if !src.Release(id) {
			t.Errorf("release %s: not live", id)
		}
	}
	if used, _ := src.KVBlocks(); src.NumRunning()+src.NumWaiting() != 0 || used >= usedBefore || len(src.Drain()) != 0 || src.Release("a") {
		t.Errorf("after release: %d running, %d waiting, %d of %d blocks used; want none, no terminal state", src.NumRunning(), src.NumWaiting(), used, usedBefore)
	}
}
