package sched

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/clock"
)

// nextToken is the fake model: the token that follows seq, a hash of the
// whole sequence mod 1000. An output is right only if every position the
// executor read held the right token.
func nextToken(seq []int) int {
	h := uint64(14695981039346656037)
	for _, t := range seq {
		h ^= uint64(t) + 0x9e3779b97f4a7c15
		h *= 1099511628211
	}
	return int(h % 1000)
}

// reference is the output a request gets from an unconstrained engine: n
// tokens generated one by one from prompt.
func reference(prompt []int, n int) []int {
	seq := slices.Clone(prompt)
	for range n {
		seq = append(seq, nextToken(seq))
	}
	return seq[len(prompt):]
}

// fakeExec plays the executor. It keeps, for each replica, block and
// slot, the token id "written" there, reads each sequence's context
// [0, Pos) through its block table (so a wrong table, a wrong prefix-cache
// reuse or a lost preempted block changes the output) and writes the
// chunk's tokens.
type fakeExec struct {
	blockSize int
	numBlocks int
	mem       [][]int // [replica][block·blockSize + slot], -1 never written
}

func newFakeExec(cfg Config) *fakeExec {
	e := &fakeExec{blockSize: cfg.BlockSize, numBlocks: cfg.NumBlocks}
	for range max(cfg.Replicas, 1) {
		m := make([]int, cfg.NumBlocks*cfg.BlockSize)
		for i := range m {
			m[i] = -1
		}
		e.mem = append(e.mem, m)
	}
	return e
}

type blockKey struct{ replica, block int }

// run executes step for requests whose known tokens are known[id] and
// returns, per SeqStep with Sample, the drafts the fake model agrees with
// and the token it samples after them (nil where Sample is false). It
// checks that each chunk is the request's next known tokens (then its
// drafts), that the
// block table covers the chunk and maps [0, Pos) to the request's known
// tokens, and that no block read or written by one sequence is written by
// another in the same step.
func (e *fakeExec) run(step *Step, known map[string][]int) ([][]int, error) {
	writers := map[blockKey]string{}
	for _, q := range step.Seqs {
		for p := q.Pos; p < q.Pos+len(q.Tokens); p++ {
			k := blockKey{q.Replica, q.Blocks[p/e.blockSize]}
			if w, ok := writers[k]; ok && w != q.ID {
				return nil, fmt.Errorf("%s and %s both write block %v", w, q.ID, k)
			}
			writers[k] = q.ID
		}
	}
	out := make([][]int, len(step.Seqs))
	ctxs := make([][]int, len(step.Seqs))
	for i, q := range step.Seqs {
		kn, ok := known[q.ID]
		end := q.Pos + len(q.Tokens) - q.Draft
		switch {
		case !ok:
			return nil, fmt.Errorf("step runs %s, which the engine does not know", q.ID)
		case q.Replica < 0 || q.Replica >= len(e.mem):
			return nil, fmt.Errorf("%s: replica %d", q.ID, q.Replica)
		case len(q.Tokens) == 0 || end > len(kn) || q.Draft < 0 || (q.Draft > 0 && !q.Sample):
			return nil, fmt.Errorf("%s: chunk [%d, %d) with %d drafts beyond the %d known tokens", q.ID, q.Pos, end, q.Draft, len(kn))
		case !slices.Equal(q.Tokens[:end-q.Pos], kn[q.Pos:end]):
			return nil, fmt.Errorf("%s: chunk at %d is %v, known tokens are %v", q.ID, q.Pos, q.Tokens, kn[q.Pos:end])
		case len(q.Blocks) < (q.Pos+len(q.Tokens)+e.blockSize-1)/e.blockSize:
			return nil, fmt.Errorf("%s: %d blocks for %d tokens", q.ID, len(q.Blocks), q.Pos+len(q.Tokens))
		case q.Sample != (end == len(kn)):
			return nil, fmt.Errorf("%s: sample %v for chunk [%d, %d) of %d known tokens", q.ID, q.Sample, q.Pos, q.Pos+len(q.Tokens), len(kn))
		}
		for _, b := range q.Blocks {
			if b < 0 || b >= e.numBlocks {
				return nil, fmt.Errorf("%s: block id %d", q.ID, b)
			}
		}
		ctx := make([]int, 0, q.Pos+len(q.Tokens))
		for p := range q.Pos {
			k := blockKey{q.Replica, q.Blocks[p/e.blockSize]}
			if w, ok := writers[k]; ok && w != q.ID {
				return nil, fmt.Errorf("%s reads block %v that %s writes", q.ID, k, w)
			}
			ctx = append(ctx, e.mem[q.Replica][k.block*e.blockSize+p%e.blockSize])
		}
		if !slices.Equal(ctx, kn[:q.Pos]) {
			return nil, fmt.Errorf("%s: the block table %v maps [0, %d) to %v, known tokens are %v", q.ID, q.Blocks, q.Pos, ctx, kn[:q.Pos])
		}
		ctxs[i] = append(ctx, q.Tokens...)
	}
	for i, q := range step.Seqs {
		for j, t := range q.Tokens {
			p := q.Pos + j
			e.mem[q.Replica][q.Blocks[p/e.blockSize]*e.blockSize+p%e.blockSize] = t
		}
		if !q.Sample {
			continue
		}
		// Verify the drafts: position p's token is right when it is what
		// the model samples from [0, p).
		ctx, drafts := ctxs[i], q.Tokens[len(q.Tokens)-q.Draft:]
		known := len(ctx) - q.Draft
		for j := 0; ; j++ {
			tok := nextToken(ctx[:known+j])
			out[i] = append(out[i], tok)
			if j == len(drafts) || tok != drafts[j] {
				break
			}
		}
	}
	return out, nil
}

// hreq is the engine's view of one request.
type hreq struct {
	prompt []int
	known  []int
	// The engine ends the request with reason after stopAfter outputs.
	stopAfter int
	reason    FinishReason
}

// harness plays the engine loop around a Scheduler and checks every step.
type harness struct {
	t        *testing.T
	cfg      Config
	s        *Scheduler
	exec     *fakeExec
	clk      *clock.Fake
	live     map[string]*hreq
	prompts  map[string][]int // every request ever added
	results  map[string]Finished
	ended    map[string]hreq // the engine's view of each terminal request
	trace    []*Step         // every step, when keepTrace
	steps    int
	computed int // Σ NumBatchedTokens

	keepTrace bool
	// draft, if set, gives each request that sampled its drafts for the
	// next step.
	draft func(known []int) []int
	// beforeExec, if set, runs between Schedule and the executor (to abort
	// requests mid-step).
	beforeExec func(*Step)
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{
		t: t, cfg: s.cfg, s: s, exec: newFakeExec(s.cfg),
		clk:     clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)),
		live:    map[string]*hreq{},
		prompts: map[string][]int{},
		results: map[string]Finished{},
		ended:   map[string]hreq{},
	}
}

// add submits a request that the engine ends with reason after stopAfter
// outputs; arrival is the fake clock's time.
func (h *harness) add(id string, prompt []int, maxTokens, priority, stopAfter int, reason FinishReason) {
	h.t.Helper()
	err := h.s.Add(&Request{ID: id, Prompt: prompt, MaxTokens: maxTokens, Priority: priority, Arrival: h.clk.Now()})
	if err != nil {
		h.t.Fatalf("add %s: %v", id, err)
	}
	h.live[id] = &hreq{prompt: slices.Clone(prompt), known: slices.Clone(prompt), stopAfter: stopAfter, reason: reason}
	h.prompts[id] = slices.Clone(prompt)
}

// step runs one engine iteration and checks it.
func (h *harness) step() *Step {
	h.t.Helper()
	before := map[string]bool{}
	for _, r := range h.s.running {
		before[r.id] = true
	}
	st := h.s.Schedule()
	h.steps++
	h.computed += st.NumBatchedTokens
	if h.keepTrace {
		h.trace = append(h.trace, st)
	}
	h.checkStep(st, before)
	if h.beforeExec != nil {
		h.beforeExec(st)
	}
	h.drain()
	known := map[string][]int{}
	for _, q := range st.Seqs {
		if r := h.live[q.ID]; r != nil {
			known[q.ID] = r.known
		} else {
			known[q.ID] = h.results[q.ID].Output // aborted after Schedule
			known[q.ID] = append(slices.Clone(h.prompts[q.ID]), known[q.ID]...)
		}
	}
	sampled, err := h.exec.run(st, known)
	if err != nil {
		h.t.Fatalf("step %d: %v", h.steps, err)
	}
	if err := h.s.UpdateDrafts(st, sampled); err != nil {
		h.t.Fatalf("step %d: update: %v", h.steps, err)
	}
	for i, q := range st.Seqs {
		r := h.live[q.ID]
		if !q.Sample || r == nil {
			continue
		}
		r.known = append(r.known, sampled[i]...)
		if len(r.known)-len(r.prompt) >= r.stopAfter {
			if err := h.s.Finish(q.ID, r.reason); err != nil {
				h.t.Fatalf("step %d: %v", h.steps, err)
			}
		} else if h.draft != nil {
			h.s.SetDraft(q.ID, h.draft(r.known))
		}
	}
	h.drain()
	h.checkState()
	h.clk.Advance(10 * time.Millisecond)
	return st
}

// checkState holds the scheduler's internal bookkeeping: the running list
// sorted, the waiting heap ordered, no waiting request holding blocks or
// computed tokens, the replicas' loads and used block counts as recomputed
// from the requests.
func (h *harness) checkState() {
	h.t.Helper()
	s := h.s
	loads := make([]Load, len(s.reps))
	used := make([]map[int]bool, len(s.reps))
	for i := range used {
		used[i] = map[int]bool{}
	}
	for i, r := range s.running {
		if i > 0 && compare(s.running[i-1], r) >= 0 {
			h.t.Fatalf("running list out of order at %d", i)
		}
		if r.state != running || r.kv == nil || r.computed > len(r.tokens) || s.byID[r.id] != r {
			h.t.Fatalf("running %s: state %d, %d of %d computed", r.id, r.state, r.computed, len(r.tokens))
		}
		loads[r.replica].QueuedPrefill += len(r.tokens) - r.computed
		loads[r.replica].KVTokens += r.computed
		for _, b := range r.kv.Blocks() {
			used[r.replica][b] = true
		}
	}
	for i, r := range s.waiting {
		if i > 0 && compare(s.waiting[(i-1)/2], r) > 0 {
			h.t.Fatalf("waiting heap out of order at %d", i)
		}
		if r.state != waiting || r.kv != nil || r.computed != 0 || r.heapIdx != i || s.byID[r.id] != r {
			h.t.Fatalf("waiting %s: state %d, computed %d, heap index %d of %d", r.id, r.state, r.computed, r.heapIdx, i)
		}
		if r.replica >= 0 {
			loads[r.replica].QueuedPrefill += len(r.tokens)
		}
	}
	if len(s.byID) != len(s.running)+len(s.waiting) {
		h.t.Fatalf("%d live requests, %d running, %d waiting", len(s.byID), len(s.running), len(s.waiting))
	}
	for i, r := range s.reps {
		if r.load != loads[i] {
			h.t.Fatalf("replica %d: load %+v, requests add up to %+v", i, r.load, loads[i])
		}
		if r.kv.NumUsed() != len(used[i]) {
			h.t.Fatalf("replica %d: %d blocks used, running tables hold %d", i, r.kv.NumUsed(), len(used[i]))
		}
	}
}

// checkStep holds the budgets and that only live requests run, each once;
// before is the set of requests running before Schedule. Requests running
// before the step come first, and if any new one was admitted, every one
// of them got its tokens.
func (h *harness) checkStep(st *Step, before map[string]bool) {
	h.t.Helper()
	if st.NumBatchedTokens > h.cfg.MaxNumBatchedTokens || len(st.Seqs) > h.cfg.MaxNumSeqs {
		h.t.Fatalf("step %d: %d tokens, %d sequences; budget %d, %d", h.steps, st.NumBatchedTokens, len(st.Seqs), h.cfg.MaxNumBatchedTokens, h.cfg.MaxNumSeqs)
	}
	seen := map[string]bool{}
	n, admitted := 0, false
	for _, q := range st.Seqs {
		n += len(q.Tokens)
		if seen[q.ID] || h.live[q.ID] == nil {
			h.t.Fatalf("step %d: %s runs twice or is not live", h.steps, q.ID)
		}
		seen[q.ID] = true
		if !before[q.ID] {
			admitted = true
		} else if admitted {
			h.t.Fatalf("step %d: running %s planned after a newly admitted request", h.steps, q.ID)
		}
	}
	if n != st.NumBatchedTokens {
		h.t.Fatalf("step %d: NumBatchedTokens %d, chunks sum to %d", h.steps, st.NumBatchedTokens, n)
	}
	for _, id := range st.Preempted {
		if seen[id] || !before[id] {
			h.t.Fatalf("step %d: preempted %s also runs, or was not running", h.steps, id)
		}
	}
	if admitted {
		for id := range before {
			if !seen[id] && !slices.Contains(st.Preempted, id) && h.s.byID[id] != nil {
				h.t.Fatalf("step %d: admitted a new request while running %s got nothing", h.steps, id)
			}
		}
	}
}

// drain collects terminal events: each request exactly once, with the
// output the engine saw, which must be the reference output.
func (h *harness) drain() {
	h.t.Helper()
	for _, f := range h.s.Drain() {
		if _, dup := h.results[f.ID]; dup {
			h.t.Fatalf("%s reported terminal twice", f.ID)
		}
		r := h.live[f.ID]
		if r == nil {
			h.t.Fatalf("terminal event for unknown %s", f.ID)
		}
		if !slices.Equal(f.Output, r.known[len(r.prompt):]) {
			h.t.Fatalf("%s: output %v, engine saw %v", f.ID, f.Output, r.known[len(r.prompt):])
		}
		if want := reference(r.prompt, len(f.Output)); !slices.Equal(f.Output, want) {
			h.t.Fatalf("%s: output %v, reference %v", f.ID, f.Output, want)
		}
		h.results[f.ID] = f
		h.ended[f.ID] = *r
		delete(h.live, f.ID)
	}
}

// runAll steps until nothing is left, at most limit steps.
func (h *harness) runAll(limit int) {
	h.t.Helper()
	for h.s.NumRunning()+h.s.NumWaiting() > 0 {
		if h.steps >= limit {
			h.t.Fatalf("not done after %d steps: %d running, %d waiting", limit, h.s.NumRunning(), h.s.NumWaiting())
		}
		h.step()
	}
	h.drain()
}

// checkIdle holds that nothing is left and every block is free.
func (h *harness) checkIdle() {
	h.t.Helper()
	if len(h.live) != 0 || h.s.NumRunning() != 0 || h.s.NumWaiting() != 0 || len(h.s.byID) != 0 {
		h.t.Fatalf("left: %d live in the engine, %d running, %d waiting, %d known", len(h.live), h.s.NumRunning(), h.s.NumWaiting(), len(h.s.byID))
	}
	for i, r := range h.s.reps {
		if r.kv.NumUsed() != 0 || r.kv.NumFree() != r.kv.NumBlocks() || r.load != (Load{}) {
			h.t.Fatalf("replica %d: %d blocks used, %d free of %d, load %+v", i, r.kv.NumUsed(), r.kv.NumFree(), r.kv.NumBlocks(), r.load)
		}
	}
	if h.s.KVUsage() != 0 {
		h.t.Fatalf("KV usage %v", h.s.KVUsage())
	}
}

// tokens returns n token ids from seed: distinct seeds give distinct
// sequences.
func tokens(seed, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (seed*7919 + i*31) % 997
	}
	return out
}
