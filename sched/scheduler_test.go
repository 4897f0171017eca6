package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// planned is one SeqStep in short.
type planned struct {
	ID     string
	Pos, N int
	Sample bool
}

func summarize(st *Step) []planned {
	var out []planned
	for _, q := range st.Seqs {
		out = append(out, planned{q.ID, q.Pos, len(q.Tokens), q.Sample})
	}
	return out
}

// TestScheduleSteps plays small scenarios step by step against the exact
// plans vLLM's rule gives.
func TestScheduleSteps(t *testing.T) {
	type add struct {
		id         string
		prompt     int // tokens
		priority   int
		stopAfter  int
		beforeStep int // added just before this step (1-based)
	}
	tests := []struct {
		name      string
		cfg       Config
		adds      []add
		want      [][]planned // per step
		preempted map[int][]string
	}{{
		name: "chunked prefill, decodes first, MaxNumSeqs",
		cfg:  Config{MaxNumBatchedTokens: 8, MaxNumSeqs: 2, MaxModelLen: 64, BlockSize: 4, NumBlocks: 64},
		adds: []add{{id: "A", prompt: 10, stopAfter: 3, beforeStep: 1}, {id: "B", prompt: 3, stopAfter: 2, beforeStep: 1}, {id: "C", prompt: 5, stopAfter: 1, beforeStep: 1}},
		want: [][]planned{
			{{"A", 0, 8, false}},                   // the budget ends A's first chunk; B waits
			{{"A", 8, 2, true}, {"B", 0, 3, true}}, // A finishes its prompt, B fits whole
			{{"A", 10, 1, true}, {"B", 3, 1, true}},
			{{"A", 11, 1, true}, {"C", 0, 5, true}}, // B stopped after 2 tokens; C takes its seat
		},
	}, {
		name: "a long prompt does not hold back decodes",
		cfg:  Config{MaxNumBatchedTokens: 6, MaxNumSeqs: 4, MaxModelLen: 64, BlockSize: 4, NumBlocks: 64},
		adds: []add{{id: "A", prompt: 2, stopAfter: 9, beforeStep: 1}, {id: "L", prompt: 20, stopAfter: 1, beforeStep: 2}},
		want: [][]planned{
			{{"A", 0, 2, true}},
			{{"A", 2, 1, true}, {"L", 0, 5, false}},
			{{"A", 3, 1, true}, {"L", 5, 5, false}},
			{{"A", 4, 1, true}, {"L", 10, 5, false}},
			{{"A", 5, 1, true}, {"L", 15, 5, true}},
			{{"A", 6, 1, true}},
		},
	}, {
		name: "preemption picks the lowest priority and resumes by recomputation",
		// 4 blocks of 4: A and B hold 2 each until A needs a third.
		cfg: Config{MaxNumBatchedTokens: 64, MaxModelLen: 64, BlockSize: 4, NumBlocks: 4, Watermark: -1},
		adds: []add{
			{id: "B", prompt: 7, priority: 1, stopAfter: 5, beforeStep: 1},
			{id: "A", prompt: 7, priority: 0, stopAfter: 4, beforeStep: 1},
		},
		want: [][]planned{
			{{"A", 0, 7, true}, {"B", 0, 7, true}}, // priority order
			{{"A", 7, 1, true}, {"B", 7, 1, true}},
			{{"A", 8, 1, true}}, // A needs block 3: B goes
			{{"A", 9, 1, true}}, // B needs 3 blocks to resume, 1 is free
			{{"B", 0, 9, true}}, // A stopped after 4 tokens
			{{"B", 9, 1, true}},
			{{"B", 10, 1, true}},
		},
		preempted: map[int][]string{3: {"B"}},
	}, {
		name: "a resumed request reuses its own cached blocks",
		cfg:  Config{MaxNumBatchedTokens: 64, MaxModelLen: 64, BlockSize: 4, NumBlocks: 4, Watermark: -1, EnablePrefixCaching: true},
		adds: []add{
			{id: "B", prompt: 7, priority: 1, stopAfter: 5, beforeStep: 1},
			{id: "A", prompt: 7, priority: 0, stopAfter: 4, beforeStep: 1},
		},
		want: [][]planned{
			{{"A", 0, 7, true}, {"B", 0, 7, true}},
			{{"A", 7, 1, true}, {"B", 7, 1, true}},
			{{"A", 8, 1, true}}, // B's blocks are evictable, its last block first
			{{"A", 9, 1, true}},
			{{"B", 4, 5, true}}, // B's first block survived
			{{"B", 9, 1, true}},
			{{"B", 10, 1, true}},
		},
		preempted: map[int][]string{3: {"B"}},
	}, {
		name: "the lowest-priority request preempts itself",
		cfg:  Config{MaxNumBatchedTokens: 64, MaxModelLen: 64, BlockSize: 4, NumBlocks: 4, Watermark: -1},
		adds: []add{
			{id: "A", prompt: 5, priority: 0, stopAfter: 3, beforeStep: 1},
			{id: "B", prompt: 8, priority: 1, stopAfter: 2, beforeStep: 1},
		},
		want: [][]planned{
			{{"A", 0, 5, true}, {"B", 0, 8, true}},
			{{"A", 5, 1, true}}, // B needs a third block: none, and B is lowest
			{{"A", 6, 1, true}}, // B cannot come back yet
			{{"B", 0, 9, true}}, // A finished
		},
		preempted: map[int][]string{2: {"B"}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg)
			for i, want := range tc.want {
				for _, a := range tc.adds {
					if a.beforeStep == i+1 {
						h.add(a.id, tokens(len(a.id)+int(a.id[0]), a.prompt), 16, a.priority, a.stopAfter, Stop)
					}
				}
				st := h.step()
				if got := summarize(st); !slices.Equal(got, want) {
					t.Fatalf("step %d: planned %v, want %v", i+1, got, want)
				}
				if got := st.Preempted; !slices.Equal(got, tc.preempted[i+1]) {
					t.Fatalf("step %d: preempted %v, want %v", i+1, got, tc.preempted[i+1])
				}
			}
			h.runAll(100)
			h.checkIdle()
			if want := int64(len(tc.preempted)); h.s.Preemptions() != want {
				t.Fatalf("%d preemptions, want %d", h.s.Preemptions(), want)
			}
		})
	}
}

// TestChunkedPrefill runs mixed prompts through a small budget.
func TestChunkedPrefill(t *testing.T) {
	cfg := Config{MaxNumBatchedTokens: 64, MaxNumSeqs: 4, MaxModelLen: 512, BlockSize: 16, NumBlocks: 256}
	h := newHarness(t, cfg)
	h.keepTrace = true
	lens := []int{300, 10, 64, 65, 1, 200, 33, 7}
	for i, n := range lens {
		h.add(fmt.Sprint("r", i), tokens(i, n), 20, 0, 5+i, Length)
	}
	h.runAll(500)
	h.checkIdle()
	// The 300-token prompt needs at least ⌈300/64⌉ steps of prefill.
	prefill := 0
	for _, st := range h.trace {
		for _, q := range st.Seqs {
			if q.ID == "r0" && q.Pos < 300 {
				prefill++
			}
		}
	}
	if prefill < 5 {
		t.Fatalf("300-token prompt prefilled in %d steps", prefill)
	}
	want := 0
	for i, n := range lens {
		want += n + 5 + i - 1 // every prompt token and every output token but the last
	}
	if h.computed != want {
		t.Fatalf("computed %d tokens, want %d", h.computed, want)
	}
	full := 0
	for _, st := range h.trace {
		if st.NumBatchedTokens == 64 {
			full++
		}
	}
	if full < 5 {
		t.Fatalf("only %d steps used the whole budget", full)
	}
}

// TestPreemptionKeepsOutputs runs requests through pools too small for
// them and compares every output with the same request run alone in a
// large pool.
func TestPreemptionKeepsOutputs(t *testing.T) {
	for _, caching := range []bool{false, true} {
		t.Run(fmt.Sprint("caching=", caching), func(t *testing.T) {
			cfg := Config{MaxNumBatchedTokens: 32, MaxNumSeqs: 8, MaxModelLen: 128, BlockSize: 4, NumBlocks: 14, EnablePrefixCaching: caching}
			h := newHarness(t, cfg)
			rng := rand.New(rand.NewPCG(3, 4))
			type spec struct {
				prompt          []int
				priority, outps int
			}
			specs := map[string]spec{}
			for i := range 12 {
				id := fmt.Sprint("p", i)
				sp := spec{tokens(i%5, 8+rng.IntN(16)), rng.IntN(3), 10 + rng.IntN(20)}
				specs[id] = sp
				h.add(id, sp.prompt, 40, sp.priority, sp.outps, Length)
			}
			h.runAll(2000)
			h.checkIdle()
			if h.s.Preemptions() < 5 {
				t.Fatalf("%d preemptions; the pool is meant to force them", h.s.Preemptions())
			}
			for id, sp := range specs {
				alone := newHarness(t, Config{MaxModelLen: 128, BlockSize: 4, NumBlocks: 1024})
				alone.add(id, sp.prompt, 40, 0, sp.outps, Length)
				alone.runAll(100)
				if got, want := h.results[id].Output, alone.results[id].Output; !slices.Equal(got, want) || len(got) != sp.outps {
					t.Fatalf("%s: output %v, alone %v", id, got, want)
				}
			}
		})
	}
}

// TestPrefixCache runs a second request after a first that shares its
// leading tokens.
func TestPrefixCache(t *testing.T) {
	const bs = 4
	base := tokens(1, 40)
	with := func(n int, tail ...int) []int { return append(slices.Clone(base[:n]), tail...) }
	tests := []struct {
		name     string
		caching  bool
		first    []int
		second   []int
		wantHits int // tokens
	}{
		{"shared 32 tokens then a new tail", true, with(32, 900, 901, 902), with(32, 800, 801, 802, 803, 804), 32},
		{"identical prompts: the last token's block is recomputed", true, with(32), with(32), 28},
		{"identical prompts, last block partial", true, with(30), with(30), 28},
		{"diverges inside block 7", true, with(40), with(30, 5, 5, 5, 5), 28},
		{"diverges in the first block", true, with(40), with(3, 5, 5, 5, 5), 0},
		{"second is a prefix of the first", true, with(40), with(17), 16},
		{"the first's outputs are cached too", true, with(10), append(with(10), reference(with(10), 6)...), 12},
		{"caching off", false, with(32, 900), with(32, 800), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{MaxNumBatchedTokens: 16, MaxModelLen: 128, BlockSize: bs, NumBlocks: 64, EnablePrefixCaching: tc.caching})
			h.add("first", tc.first, 8, 0, 6, Stop)
			h.runAll(100)
			before := h.computed
			h.add("second", tc.second, 8, 0, 3, Stop)
			h.runAll(100)
			h.checkIdle()
			if got, want := h.computed-before, len(tc.second)-tc.wantHits+2; got != want {
				t.Fatalf("second computed %d tokens, want %d", got, want)
			}
			q, hits := int64(0), int64(0)
			if tc.caching {
				q, hits = int64(len(tc.first)+len(tc.second)), int64(tc.wantHits)
			}
			if h.s.PrefixQueries() != q || h.s.PrefixHits() != hits {
				t.Fatalf("queries %d hits %d tokens, want %d %d", h.s.PrefixQueries(), h.s.PrefixHits(), q, hits)
			}
		})
	}
}

// TestPrefixCacheUnderPressure shares a few long prefixes among many
// requests in a pool that must evict cached blocks.
func TestPrefixCacheUnderPressure(t *testing.T) {
	cfg := Config{MaxNumBatchedTokens: 48, MaxNumSeqs: 6, MaxModelLen: 256, BlockSize: 4, NumBlocks: 40, EnablePrefixCaching: true}
	h := newHarness(t, cfg)
	rng := rand.New(rand.NewPCG(5, 6))
	prefixes := [][]int{tokens(100, 24), tokens(200, 30), tokens(300, 17), tokens(400, 40)}
	want := 0
	for i := range 120 {
		p := append(slices.Clone(prefixes[rng.IntN(len(prefixes))]), tokens(1000+i, 1+rng.IntN(12))...)
		out := 1 + rng.IntN(15)
		h.add(fmt.Sprint("q", i), p, 20, rng.IntN(2), out, Stop)
		want += len(p) + out - 1
		if i%4 == 3 {
			h.step()
		}
	}
	h.runAll(5000)
	h.checkIdle()
	saved := int64(want - h.computed)
	if h.s.PrefixHits() == 0 || h.s.PrefixHits() > h.s.PrefixQueries() {
		t.Fatalf("hits %d of %d queried tokens", h.s.PrefixHits(), h.s.PrefixQueries())
	}
	// Every hit saves its tokens; preemption recomputes some.
	if saved <= 0 || saved > h.s.PrefixHits() {
		t.Fatalf("computed %d tokens, %d without the cache; %d hit tokens", h.computed, want, h.s.PrefixHits())
	}
	if c := h.s.reps[0].kv.NumCached(); c == 0 || c > cfg.NumBlocks {
		t.Fatalf("%d cached blocks at the end", c)
	}
}

// TestRandomTraffic runs 1,000 requests with random arrivals, priorities,
// aborts (some between Schedule and Update) and finish reasons over two
// replicas.
func TestRandomTraffic(t *testing.T) {
	t.Run("plain", func(t *testing.T) { randomTraffic(t, false) })
	t.Run("drafts", func(t *testing.T) { randomTraffic(t, true) })
}

// randomTraffic runs TestRandomTraffic, with drafts when drafts is set:
// each request that samples gets up to 6 drafts, a random number of them
// right, then a wrong one.
func randomTraffic(t *testing.T, drafts bool) {
	cfg := Config{MaxNumBatchedTokens: 96, MaxNumSeqs: 12, MaxModelLen: 160, BlockSize: 8, NumBlocks: 40, Replicas: 2, EnablePrefixCaching: true}
	h := newHarness(t, cfg)
	rng := rand.New(rand.NewPCG(7, 8))
	if drafts {
		h.draft = func(known []int) []int {
			d := reference(known, rng.IntN(5))
			return append(d, 1000+rng.IntN(3))[:min(len(d)+1, rng.IntN(7))]
		}
	}
	reasons := []FinishReason{Stop, Length, Error}
	prefixes := [][]int{tokens(1, 40), tokens(2, 17), nil}
	aborted, ids := 0, []string{}
	h.beforeExec = func(st *Step) {
		if len(st.Seqs) > 0 && rng.IntN(8) == 0 {
			id := st.Seqs[rng.IntN(len(st.Seqs))].ID
			if !h.s.Abort(id) {
				t.Fatalf("abort of running %s failed", id)
			}
			aborted++
		}
	}
	next := 0
	for next < 1000 || h.s.NumRunning()+h.s.NumWaiting() > 0 {
		for k := rng.IntN(4); k > 0 && next < 1000; k-- {
			id := fmt.Sprint("x", next)
			prompt := append(slices.Clone(prefixes[rng.IntN(len(prefixes))]), tokens(5000+next, 1+rng.IntN(60))...)
			maxTok := 1 + rng.IntN(30)
			stop := maxTok
			if rng.IntN(2) == 0 {
				stop = 1 + rng.IntN(maxTok)
			}
			h.add(id, prompt, maxTok, rng.IntN(4), stop, reasons[rng.IntN(len(reasons))])
			ids = append(ids, id)
			next++
		}
		if rng.IntN(6) == 0 && len(ids) > 0 { // abort anything, live or not
			id := ids[rng.IntN(len(ids))]
			_, live := h.live[id]
			if h.s.Abort(id) != live {
				t.Fatalf("abort of %s (live %v) answered the other way", id, live)
			}
			if live {
				aborted++
			}
			h.drain()
		}
		if h.steps > 20000 {
			t.Fatalf("not done after %d steps", h.steps)
		}
		h.step()
	}
	h.runAll(h.steps)
	h.checkIdle()
	if len(h.results) != 1000 {
		t.Fatalf("%d terminal requests of 1000", len(h.results))
	}
	count := map[FinishReason]int{}
	for id, f := range h.results {
		count[f.Reason]++
		if f.Reason != Cancelled && f.Reason != h.ended[id].reason {
			t.Fatalf("%s ended %v", id, f.Reason)
		}
	}
	if count[Cancelled] != aborted || count[Stop] == 0 || count[Length] == 0 || count[Error] == 0 {
		t.Fatalf("terminal states %v, %d aborted", count, aborted)
	}
	if h.s.Preemptions() == 0 || h.s.PrefixHits() == 0 {
		t.Fatalf("%d preemptions, %d hit tokens: the test is meant to exercise both", h.s.Preemptions(), h.s.PrefixHits())
	}
	t.Logf("%d steps, %d preemptions, prefix hits %d of %d tokens, %v", h.steps, h.s.Preemptions(), h.s.PrefixHits(), h.s.PrefixQueries(), count)
}

// TestPriorities checks that admission follows (Priority, Arrival, Add
// order).
func TestPriorities(t *testing.T) {
	type sub struct {
		id       string
		priority int
		arrival  time.Duration // after the start
	}
	tests := []struct {
		name string
		adds []sub
		want string // admission order
	}{
		{"priority 0 behind priority 5", []sub{{"a", 5, 0}, {"b", 5, 1}, {"c", 5, 2}, {"z", 0, 3}}, "z a b c"},
		{"FCFS within a priority", []sub{{"a", 1, 3}, {"b", 1, 1}, {"c", 1, 2}}, "b c a"},
		{"equal arrivals go in Add order", []sub{{"a", 2, 0}, {"b", 2, 0}, {"c", 1, 0}, {"d", 2, 0}}, "c a b d"},
		{"negative priorities run earlier", []sub{{"a", 0, 0}, {"b", -3, 5}}, "b a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{MaxNumSeqs: 1, MaxModelLen: 64, BlockSize: 4, NumBlocks: 16})
			start := h.clk.Now()
			for _, a := range tc.adds {
				h.clk.Set(start.Add(a.arrival))
				h.add(a.id, tokens(len(a.id), 5), 4, a.priority, 2, Stop)
			}
			h.keepTrace = true
			h.runAll(100)
			var order []string
			for _, st := range h.trace {
				for _, q := range st.Seqs {
					if q.Pos == 0 {
						order = append(order, q.ID)
					}
				}
			}
			if got := strings.Join(order, " "); got != tc.want {
				t.Fatalf("admitted %q, want %q", got, tc.want)
			}
		})
	}
	// A priority-0 request arriving while priority-5 ones run and wait
	// takes the first free seat.
	h := newHarness(t, Config{MaxNumSeqs: 2, MaxModelLen: 64, BlockSize: 4, NumBlocks: 16})
	for i := range 4 {
		h.add(fmt.Sprint("low", i), tokens(i, 5), 8, 5, 3+i, Stop)
	}
	h.step()
	h.add("high", tokens(9, 5), 8, 0, 2, Stop)
	for h.live["low0"] != nil {
		h.step()
	}
	if st := h.step(); !slices.ContainsFunc(st.Seqs, func(q SeqStep) bool { return q.ID == "high" && q.Pos == 0 }) {
		t.Fatalf("after low0 ended, planned %v; want high admitted", summarize(st))
	}
}

func TestAddErrors(t *testing.T) {
	cfg := Config{MaxModelLen: 100, BlockSize: 4, NumBlocks: 10, MaxWaiting: 2}
	tests := []struct {
		name string
		req  *Request
		want error
	}{
		{"nil", nil, ErrEmptyPrompt},
		{"empty prompt", &Request{ID: "e", MaxTokens: 1}, ErrEmptyPrompt},
		{"zero max tokens", &Request{ID: "z", Prompt: []int{1}}, ErrBadRequest},
		{"prompt and completion beyond the context", &Request{ID: "l", Prompt: make([]int, 90), MaxTokens: 11}, ErrTooLong},
		{"prompt beyond the pool", &Request{ID: "p", Prompt: make([]int, 41), MaxTokens: 1}, ErrTooLong},
		{"prompt fills the pool", &Request{ID: "ok1", Prompt: make([]int, 40), MaxTokens: 60}, nil},
		{"duplicate", &Request{ID: "ok1", Prompt: []int{1}, MaxTokens: 1}, ErrDuplicateID},
		{"second", &Request{ID: "ok2", Prompt: []int{1}, MaxTokens: 1}, nil},
		{"queue full", &Request{ID: "full", Prompt: []int{1}, MaxTokens: 1}, ErrQueueFull},
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		err := s.Add(tc.req)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if s.NumWaiting() != 2 {
		t.Fatalf("%d waiting, want 2", s.NumWaiting())
	}
	// A terminal request's ID may be used again.
	if !s.Abort("ok2") || s.Abort("ok2") || s.Add(&Request{ID: "ok2", Prompt: []int{1}, MaxTokens: 1}) != nil {
		t.Fatal("abort and re-add of ok2")
	}
	if err := s.Finish("nope", Stop); !errors.Is(err, ErrUnknownID) {
		t.Fatalf("finish of an unknown request: %v", err)
	}
	if err := s.Finish("ok1", FinishReason(0)); err == nil {
		t.Fatal("finish with reason 0 accepted")
	}
	if got := s.Drain(); len(got) != 1 || got[0].ID != "ok2" || got[0].Reason != Cancelled || len(got[0].Output) != 0 {
		t.Fatalf("drained %v", got)
	}
}

func TestNewErrors(t *testing.T) {
	ok := Config{MaxModelLen: 64, BlockSize: 4, NumBlocks: 8}
	for _, mod := range []func(*Config){
		func(c *Config) { c.MaxModelLen = 0 },
		func(c *Config) { c.BlockSize = 0 },
		func(c *Config) { c.NumBlocks = -1 },
		func(c *Config) { c.MaxNumBatchedTokens = -1 },
		func(c *Config) { c.MaxNumSeqs = -1 },
		func(c *Config) { c.Replicas = -2 },
		func(c *Config) { c.MaxWaiting = -1 },
		func(c *Config) { c.Watermark = 1 },
	} {
		c := ok
		mod(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	s, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.MaxNumBatchedTokens != 2048 || s.cfg.MaxNumSeqs != 256 || s.cfg.Replicas != 1 || s.cfg.Watermark != 0.01 {
		t.Fatalf("defaults %+v", s.cfg)
	}
}

func TestUpdateErrors(t *testing.T) {
	s, err := New(Config{MaxModelLen: 64, BlockSize: 4, NumBlocks: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(&Request{ID: "a", Prompt: []int{1, 2, 3}, MaxTokens: 4}); err != nil {
		t.Fatal(err)
	}
	st := s.Schedule()
	if err := s.Update(st, nil); !errors.Is(err, ErrBadSampleLen) {
		t.Fatalf("short sampled: %v", err)
	}
	if err := s.Update(st, []int{7}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(st, []int{7}); !errors.Is(err, ErrStaleStep) {
		t.Fatalf("step applied twice: %v", err)
	}
	if l := s.Loads()[0]; l != (Load{QueuedPrefill: 1, KVTokens: 3}) {
		t.Fatalf("load %+v", l)
	}
}

// TestContextFull ends requests whose engine never stops them once their
// context is full, with Length.
func TestContextFull(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		prompt  int
		outputs int
	}{
		{"MaxModelLen", Config{MaxModelLen: 12, BlockSize: 4, NumBlocks: 64}, 4, 9},
		{"the replica's pool", Config{MaxModelLen: 100, BlockSize: 4, NumBlocks: 2}, 3, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg)
			h.add("a", tokens(1, tc.prompt), 1, 0, 1000, Stop)
			h.runAll(100)
			h.checkIdle()
			if f := h.results["a"]; f.Reason != Length || len(f.Output) != tc.outputs {
				t.Fatalf("ended %v after %d tokens, want length after %d", f.Reason, len(f.Output), tc.outputs)
			}
		})
	}
}

// recordingDispatcher picks replicas from a script and records the loads
// it was shown.
type recordingDispatcher struct {
	picks []int
	seen  [][]Load
}

func (d *recordingDispatcher) Pick(loads []Load) int {
	d.seen = append(d.seen, slices.Clone(loads))
	p := d.picks[0]
	d.picks = d.picks[1:]
	return p
}

// TestDispatchLoads checks the loads a dispatcher sees and that its picks
// are followed (an out-of-range pick falls back to the least loaded).
func TestDispatchLoads(t *testing.T) {
	d := &recordingDispatcher{picks: []int{1, 1, 7}}
	h := newHarness(t, Config{MaxModelLen: 64, BlockSize: 4, NumBlocks: 16, Replicas: 2, Dispatcher: d})
	h.add("a", tokens(1, 10), 8, 0, 4, Stop)
	h.add("b", tokens(2, 6), 8, 0, 4, Stop)
	h.add("c", tokens(3, 3), 8, 0, 4, Stop)
	st := h.step()
	var reps []int
	for _, q := range st.Seqs {
		reps = append(reps, q.Replica)
	}
	if !slices.Equal(reps, []int{1, 1, 0}) {
		t.Fatalf("replicas %v, want [1 1 0]", reps)
	}
	want := [][]Load{{{}, {}}, {{}, {QueuedPrefill: 10}}, {{}, {QueuedPrefill: 16}}}
	if !slices.EqualFunc(d.seen, want, slices.Equal) {
		t.Fatalf("dispatcher saw %v, want %v", d.seen, want)
	}
	// After the step: a and b computed their prompts and sampled one token.
	if got := h.s.Loads(); !slices.Equal(got, []Load{{QueuedPrefill: 1, KVTokens: 3}, {QueuedPrefill: 2, KVTokens: 16}}) {
		t.Fatalf("loads %v", got)
	}
	h.runAll(100)
	h.checkIdle()
}

// alternatingDispatcher sends requests to replicas in turn.
type alternatingDispatcher struct{ next int }

func (d *alternatingDispatcher) Pick(loads []Load) int {
	i := d.next % len(loads)
	d.next = i + 1
	return i
}

// TestDispatch checks that a preempted request resumes on its replica.
func TestDispatch(t *testing.T) {
	h := newHarness(t, Config{MaxModelLen: 64, BlockSize: 4, NumBlocks: 6, Replicas: 2, Dispatcher: &alternatingDispatcher{}, Watermark: -1})
	for i := range 4 {
		h.add(fmt.Sprint("d", i), tokens(i, 6), 16, i, 12, Stop)
	}
	st := h.step()
	for i, q := range st.Seqs {
		if q.Replica != i%2 {
			t.Fatalf("%s on replica %d, want %d", q.ID, q.Replica, i%2)
		}
	}
	replica := map[string]int{}
	for h.s.NumRunning()+h.s.NumWaiting() > 0 {
		for _, q := range h.step().Seqs {
			if r, ok := replica[q.ID]; ok && r != q.Replica {
				t.Fatalf("%s moved from replica %d to %d", q.ID, r, q.Replica)
			}
			replica[q.ID] = q.Replica
		}
	}
	h.drain()
	h.checkIdle()
	if h.s.Preemptions() == 0 {
		t.Fatal("no preemption; the pool is meant to force one")
	}
}

// TestAdapters: the running and the waiting requests' LoRA adapters,
// sorted, without repeats and without the base model's 0.
func TestAdapters(t *testing.T) {
	s, err := New(Config{BlockSize: 4, NumBlocks: 64, MaxNumSeqs: 3, MaxModelLen: 64})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range []int{2, 0, 2, 5, 1, 5} {
		if err := s.Add(&Request{ID: fmt.Sprint(i), Prompt: []int{1, 2, 3}, MaxTokens: 4, Adapter: a}); err != nil {
			t.Fatal(err)
		}
	}
	if run, wait := s.Adapters(); len(run) != 0 || !slices.Equal(wait, []int{1, 2, 5}) {
		t.Fatalf("before a step: running %v, waiting %v", run, wait)
	}
	step := s.Schedule()
	if len(step.Seqs) != 3 {
		t.Fatalf("%d scheduled", len(step.Seqs))
	}
	if run, wait := s.Adapters(); !slices.Equal(run, []int{2}) || !slices.Equal(wait, []int{1, 5}) {
		t.Fatalf("running %v, waiting %v", run, wait)
	}
}
