package sched

import (
	"errors"
	"slices"
	"testing"
)

// TestDrafts follows one request through steps with drafts: the step
// carries them after the known token, UpdateDrafts keeps the accepted
// prefix and the sampled token, and the KV computed counts only those.
func TestDrafts(t *testing.T) {
	s, err := New(Config{MaxModelLen: 64, BlockSize: 4, NumBlocks: 8, EnablePrefixCaching: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(&Request{ID: "a", Prompt: []int{1, 2, 3}, MaxTokens: 40}); err != nil {
		t.Fatal(err)
	}
	if s.SetDraft("a", []int{9}) {
		t.Fatal("SetDraft took drafts for a waiting request")
	}
	st := s.Schedule()
	if err := s.Update(st, []int{4}); err != nil {
		t.Fatal(err)
	}
	if !s.SetDraft("a", []int{5, 6, 7}) || s.SetDraft("b", []int{1}) {
		t.Fatal("SetDraft")
	}
	st = s.Schedule()
	q := st.Seqs[0]
	if !slices.Equal(q.Tokens, []int{4, 5, 6, 7}) || q.Pos != 3 || q.Draft != 3 || !q.Sample || st.NumBatchedTokens != 4 || len(q.Blocks) != 2 {
		t.Fatalf("step with drafts: %+v, %d tokens", q, st.NumBatchedTokens)
	}
	// Bad outputs change nothing.
	for _, out := range [][]int{nil, {5, 9, 7, 8, 1}, {6, 8}, {5, 7, 9}} {
		if err := s.UpdateDrafts(st, [][]int{out}); !errors.Is(err, ErrBadSampleLen) {
			t.Errorf("UpdateDrafts(%v) = %v, want ErrBadSampleLen", out, err)
		}
	}
	if err := s.UpdateDrafts(st, [][]int{{5, 6, 8}}); err != nil { // two drafts taken, then 8
		t.Fatal(err)
	}
	if got := s.Tokens("a"); !slices.Equal(got, []int{1, 2, 3, 4, 5, 6, 8}) {
		t.Fatalf("known tokens %v", got)
	}
	if l := s.Loads()[0]; l != (Load{QueuedPrefill: 1, KVTokens: 6}) {
		t.Fatalf("load %+v", l)
	}
	// The drafts are used once: the next step runs only the known token.
	st = s.Schedule()
	if q := st.Seqs[0]; !slices.Equal(q.Tokens, []int{8}) || q.Pos != 6 || q.Draft != 0 {
		t.Fatalf("step after drafts: %+v", q)
	}
	if err := s.Update(st, []int{9}); err != nil {
		t.Fatal(err)
	}
	// All rejected: only the known token is computed.
	s.SetDraft("a", []int{1, 1})
	st = s.Schedule()
	if err := s.UpdateDrafts(st, [][]int{{2}}); err != nil {
		t.Fatal(err)
	}
	if l := s.Loads()[0]; l != (Load{QueuedPrefill: 1, KVTokens: 8}) {
		t.Fatalf("load after rejection %+v", l)
	}
	if err := s.UpdateDrafts(st, [][]int{{2}}); !errors.Is(err, ErrStaleStep) {
		t.Fatalf("step applied twice: %v", err)
	}
}

// TestDraftLimits checks that drafts come after every running request's
// known tokens, are cut to the batch budget, the free blocks and the
// context, and never preempt.
func TestDraftLimits(t *testing.T) {
	s, err := New(Config{MaxModelLen: 12, BlockSize: 4, NumBlocks: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := s.Add(&Request{ID: id, Prompt: []int{1, 2, 3}, MaxTokens: 8}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Update(s.Schedule(), []int{4, 4}); err != nil {
		t.Fatal(err)
	}
	// Each holds one block with 4 known tokens; 2 blocks are free. With a
	// budget of 3, b's token comes before a's drafts, which get what is
	// left: one.
	s.cfg.MaxNumBatchedTokens = 3
	s.SetDraft("a", []int{5, 6, 7, 8, 9})
	st := s.Schedule()
	if len(st.Seqs) != 2 || st.Seqs[0].ID != "a" || st.Seqs[0].Draft != 1 || !slices.Equal(st.Seqs[0].Tokens, []int{4, 5}) ||
		len(st.Seqs[0].Blocks) != 2 || st.Seqs[1].Draft != 0 || st.NumBatchedTokens != 3 {
		t.Fatalf("budget: %+v", st)
	}
	if err := s.UpdateDrafts(st, [][]int{{5, 6}, {5}}); err != nil {
		t.Fatal(err)
	}
	s.cfg.MaxNumBatchedTokens = 100
	// a has 6 known tokens in 2 blocks, b 5 in 1; one block is free, and
	// b's next token takes it. Its drafts get the room left in its two
	// blocks (positions 5 to 7), and nobody is preempted.
	s.SetDraft("b", []int{6, 7, 8, 9, 10})
	st = s.Schedule()
	if len(st.Preempted) != 0 || len(st.Seqs) != 2 || st.Seqs[1].ID != "b" || st.Seqs[1].Draft != 3 || len(st.Seqs[1].Blocks) != 2 {
		t.Fatalf("blocks: %+v", st)
	}
	if err := s.UpdateDrafts(st, [][]int{{7}, {6, 7}}); err != nil {
		t.Fatal(err)
	}
	// The context: a has 7 known tokens of 12.
	if err := s.Finish("b", Stop); err != nil {
		t.Fatal(err)
	}
	s.SetDraft("a", []int{1, 2, 3, 4, 5, 6, 7, 8})
	st = s.Schedule()
	if q := st.Seqs[0]; q.ID != "a" || q.Draft != 5 || q.Pos+len(q.Tokens) != 12 {
		t.Fatalf("context: %+v", q)
	}
}

// TestNoPrefixCacheAndMaxChunk: a request that asks for it computes a
// cached prompt from its first token, in chunks of at most MaxChunk.
func TestNoPrefixCacheAndMaxChunk(t *testing.T) {
	s, err := New(Config{MaxModelLen: 64, BlockSize: 4, NumBlocks: 16, EnablePrefixCaching: true})
	if err != nil {
		t.Fatal(err)
	}
	prompt := tokens(3, 14)
	if err := s.Add(&Request{ID: "a", Prompt: prompt, MaxTokens: 4}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(s.Schedule(), []int{1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish("a", Stop); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(&Request{ID: "bad", Prompt: prompt, MaxTokens: 4, MaxChunk: -1}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("negative MaxChunk: %v", err)
	}
	if err := s.Add(&Request{ID: "b", Prompt: prompt, MaxTokens: 4, NoPrefixCache: true, MaxChunk: 6}); err != nil {
		t.Fatal(err)
	}
	var got []int
	for range 3 {
		st := s.Schedule()
		q := st.Seqs[0]
		got = append(got, q.Pos, len(q.Tokens))
		if err := s.Update(st, []int{1}); err != nil {
			t.Fatal(err)
		}
	}
	if want := []int{0, 6, 6, 6, 12, 2}; !slices.Equal(got, want) {
		t.Fatalf("chunks (pos, len) %v, want %v", got, want)
	}
	// Without the flag the cached blocks are reused.
	if err := s.Add(&Request{ID: "c", Prompt: prompt, MaxTokens: 4}); err != nil {
		t.Fatal(err)
	}
	if q := s.Schedule().Seqs[1]; q.ID != "c" || q.Pos != 12 {
		t.Fatalf("c: %+v", q)
	}
}
