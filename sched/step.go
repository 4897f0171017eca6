package sched

import (
	"fmt"
	"slices"

	"github.com/gearboxlm/gearbox/kvcache"
)

// Step is one engine step's plan: plain data, owned by the caller.
type Step struct {
	Seqs      []SeqStep
	Preempted []string // requests this Schedule call sent back to waiting; they resume by recomputation
	// Parked are the running requests this Schedule call parked on the
	// host tier instead of preempting them (when the tier has room, as
	// vLLM's swap preemption does): their device blocks are free already
	// and may be in this step's block tables, so the caller copies them
	// to the host (Swapper.SwapOut) before it runs the step. They return
	// through SwapIn.
	Parked           []HostSwap
	NumBatchedTokens int // Σ len(Seqs[i].Tokens), at most MaxNumBatchedTokens
}

// SeqStep is one request's share of a step.
type SeqStep struct {
	ID string
	// Tokens are the known tokens at positions [Pos, Pos+len(Tokens)) to
	// compute now: a prompt chunk, a recomputation chunk after preemption,
	// or the one token sampled last step. Must not be modified.
	Tokens []int
	Pos    int // tokens already computed, prefix-cache hits included
	// Blocks is the request's block table in its replica, covering
	// positions [0, Pos+len(Tokens)); valid until the next Schedule. Must
	// not be modified.
	Blocks  []int
	Replica int
	Adapter int // Request.Adapter
	// Sample is set when this chunk reaches the end of the known tokens:
	// the engine samples the next token from the last position's logits.
	Sample bool
	// Draft is the number of speculative tokens (SetDraft) at the end of
	// Tokens, after the known ones; 0 unless Sample. The engine samples
	// from the logits of the last known token and of each draft, and
	// keeps the drafts up to the first it would not have chosen itself
	// (UpdateDrafts).
	Draft int
}

// Schedule plans one step. Running requests come first, in priority
// order, each with min(known − computed, budget left) tokens; when a
// replica has no block for one, the lowest-priority running request of
// that replica (largest Priority, then latest Arrival, possibly the request
// itself) is preempted until it fits: its blocks are freed and it re-enters
// waiting at its (Priority, Arrival) place, which within its priority is
// the front; with a host tier that has room it is parked there instead
// (Step.Parked). Then, if nothing was preempted or parked, waiting requests are admitted
// in priority order while the budget, MaxNumSeqs and the KV pool (with the
// watermark) allow, stopping at the first that does not fit. A request
// whose known tokens can no longer fit its context (MaxModelLen or a whole
// replica's pool) ends with Length instead; Drain reports it. A Step with
// no Seqs means there is nothing to run.
func (s *Scheduler) Schedule() *Step { return s.SchedulePhase(Mixed) }

// Phase restricts which requests a step carries.
type Phase uint8

const (
	Mixed       Phase = iota // every running request, then admissions: continuous batching
	PrefillOnly              // requests whose prompt is not fully computed, and admissions
	DecodeOnly               // requests past their prompt only; no admissions
)

var phaseNames = [...]string{"mixed", "prefill", "decode"}

// String is the phase's name.
func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// SchedulePhase plans one step as Schedule does, restricted to phase's
// requests: under PrefillOnly running requests past their prompt are
// skipped (they keep their blocks), under DecodeOnly requests still in
// their prompt are skipped and nothing is admitted. A request recomputing
// after preemption is in its prompt until it reaches its sampled tokens.
func (s *Scheduler) SchedulePhase(phase Phase) *Step {
	st := &Step{Seqs: make([]SeqStep, 0, min(len(s.running)+len(s.waiting), s.cfg.MaxNumSeqs))}
	budget := s.scheduleRunning(st, s.cfg.MaxNumBatchedTokens, phase)
	if len(st.Preempted)+len(st.Parked) == 0 && phase != DecodeOnly {
		s.admitWaiting(st, budget)
	}
	return st
}

// decoding reports whether r has computed its whole prompt, so that its
// next tokens are decodes.
func (r *request) decoding() bool { return r.computed >= r.promptLen }

// scheduleRunning gives the running requests of phase their tokens and
// returns the budget left. Drafts (SetDraft) come after every running
// request has its known tokens, from the budget and free blocks left:
// they never take a block another request needs this step.
func (s *Scheduler) scheduleRunning(st *Step, budget int, phase Phase) int {
	var drafting []int // entries of st.Seqs whose request has drafts
	for i := 0; i < len(s.running) && budget > 0; {
		r := s.running[i]
		if len(r.tokens) > s.limit {
			s.terminate(r, Length)
			continue
		}
		n := r.chunk(len(r.tokens)-r.computed, budget)
		if n <= 0 || (phase == PrefillOnly && r.decoding()) || (phase == DecodeOnly && !r.decoding()) {
			i++
			continue
		}
		if !s.grow(r, n, st) {
			continue // r preempted itself; s.running[i] is the next one
		}
		if len(r.draft) > 0 && n == len(r.tokens)-r.computed && r.decoding() {
			drafting = append(drafting, len(st.Seqs))
		}
		s.plan(st, r, n)
		budget -= n
		i++
	}
	for _, i := range drafting {
		q := &st.Seqs[i]
		r := s.byID[q.ID]
		if r.state != running { // never: grow's victims sort after every planned request
			continue
		}
		n := len(q.Tokens)
		d := min(len(r.draft), budget, s.limit-len(r.tokens))
		for d > 0 && !s.reps[r.replica].kv.Allocate(r.kv, r.computed+n+d) {
			d--
		}
		if d > 0 {
			r.planned = append(append(r.planned[:0], q.Tokens...), r.draft[:d]...)
			q.Tokens, q.Draft, q.Blocks = r.planned[:n+d:n+d], d, r.kv.Blocks()
			st.NumBatchedTokens += d
			budget -= d
		}
	}
	return budget
}

// grow allocates r's blocks for n more tokens, parking or preempting
// the lowest-priority running requests of r's replica until they fit. It
// reports false if r itself was the victim. Every victim sorts after every
// request already planned this step, so planned block tables stay valid.
func (s *Scheduler) grow(r *request, n int, st *Step) bool {
	kv := s.reps[r.replica].kv
	for !kv.Allocate(r.kv, r.computed+n) {
		v := s.victim(r.replica)
		if sw, ok := s.park(v); ok {
			st.Parked = append(st.Parked, sw)
		} else {
			s.preempt(v)
			st.Preempted = append(st.Preempted, v.id)
		}
		if v == r {
			return false
		}
	}
	return true
}

// victim is the last running request of replica rep in priority order.
func (s *Scheduler) victim(rep int) *request {
	for i := len(s.running) - 1; ; i-- {
		if s.running[i].replica == rep {
			return s.running[i]
		}
	}
}

// admitWaiting admits waiting requests in order while they fit.
func (s *Scheduler) admitWaiting(st *Step, budget int) {
	for budget > 0 && len(s.running) < s.cfg.MaxNumSeqs && len(s.waiting) > 0 {
		r := s.waiting.peek()
		if len(r.tokens) > s.limit {
			s.terminate(r, Length)
			continue
		}
		rep := r.replica
		if rep < 0 {
			rep = s.pick()
		}
		kv := s.reps[rep].kv
		p := kvcache.Salted(uint64(r.adapter))
		if !r.noPrefix {
			p = kv.MatchSalted(r.tokens, uint64(r.adapter))
		}
		n := r.chunk(len(r.tokens)-p.Tokens, budget)
		seq, ok := kv.Admit(p, p.Tokens+n)
		if !ok {
			return // first come, first served: nothing overtakes r
		}
		s.waiting.remove(r)
		s.account(r, -1)
		r.replica, r.kv, r.computed, r.state = rep, seq, p.Tokens, running
		s.account(r, 1)
		s.insertRunning(r)
		s.plan(st, r, n)
		budget -= n
	}
}

// chunk is the size of r's next chunk: its left tokens within the budget
// and its own bound.
func (r *request) chunk(left, budget int) int {
	n := min(left, budget)
	if r.maxChunk > 0 {
		n = min(n, r.maxChunk)
	}
	return n
}

// plan appends r's next n tokens to the step.
func (s *Scheduler) plan(st *Step, r *request, n int) {
	pos := r.computed
	st.Seqs = append(st.Seqs, SeqStep{
		ID:      r.id,
		Tokens:  r.tokens[pos : pos+n : pos+n],
		Pos:     pos,
		Blocks:  r.kv.Blocks(),
		Replica: r.replica,
		Sample:  pos+n == len(r.tokens),
		Adapter: r.adapter,
	})
	st.NumBatchedTokens += n
}

// SetDraft gives running request id speculative tokens to verify in its
// next decode step, replacing any it had; a step that carries them (up to
// the batch budget, the context and the free blocks) has SeqStep.Draft
// set, and UpdateDrafts keeps those the model agrees with. Drafts never
// preempt: a step takes them only into blocks that are free. It reports
// false, keeping nothing, for a request that is not running.
func (s *Scheduler) SetDraft(id string, draft []int) bool {
	r := s.byID[id]
	if r == nil || r.state != running {
		return false
	}
	r.draft = append(r.draft[:0], draft...)
	return true
}

// Tokens returns the known tokens of live request id (prompt, then the
// tokens sampled so far), or nil for an unknown or terminal one. The
// slice is the scheduler's: read-only, valid until the next Update.
func (s *Scheduler) Tokens(id string) []int {
	if r := s.byID[id]; r != nil {
		return r.tokens
	}
	return nil
}

// Update records that the executor ran step, the latest Schedule's plan:
// each SeqStep's request has its known tokens computed, and for each with
// Sample, sampled[i] is appended to its known tokens (sampled[i] is
// ignored otherwise); drafts the step carried are all rejected. It is
// UpdateDrafts with one token per sampled entry.
func (s *Scheduler) Update(step *Step, sampled []int) error {
	if len(sampled) != len(step.Seqs) {
		return fmt.Errorf("%w: %d sampled tokens for %d sequences", ErrBadSampleLen, len(sampled), len(step.Seqs))
	}
	out := s.outBuf[:0]
	for i, q := range step.Seqs {
		if q.Sample {
			out = append(out, sampled[i:i+1])
		} else {
			out = append(out, nil)
		}
	}
	s.outBuf = out
	defer clear(out)
	return s.UpdateDrafts(step, out)
}

// UpdateDrafts records that the executor ran step, the latest Schedule's
// plan. For each SeqStep with Sample, out[i] is the tokens the engine
// takes: the first a of the entry's Draft drafts (0 ≤ a ≤ Draft), which
// must equal them, then the token it sampled after them. The request then
// has a + len(Tokens) − Draft more tokens computed and out[i] appended
// to its known tokens; out[i] is ignored for entries without Sample.
// Full blocks that became computed enter the prefix cache. Entries of
// requests that ended since Schedule (Abort, Finish) are skipped. It
// fails, changing nothing, with ErrBadSampleLen when len(out) !=
// len(step.Seqs) or an out[i] is not drafts then one token, and with
// ErrStaleStep when an entry does not continue its request (a step
// applied twice, or an older one).
func (s *Scheduler) UpdateDrafts(step *Step, out [][]int) error {
	if len(out) != len(step.Seqs) {
		return fmt.Errorf("%w: %d sampled entries for %d sequences", ErrBadSampleLen, len(out), len(step.Seqs))
	}
	s.updated = s.updated[:0]
	for i, q := range step.Seqs {
		r := s.byID[q.ID]
		if r != nil && r.state != running {
			r = nil
		}
		if r != nil {
			end := q.Pos + len(q.Tokens) - q.Draft
			if q.Pos != r.computed || end > len(r.tokens) || q.Sample != (end == len(r.tokens)) || q.Draft < 0 || (q.Draft > 0 && !q.Sample) {
				return fmt.Errorf("%w: request %q has %d of %d tokens computed; the step computes [%d, %d) with sample %v and %d drafts",
					ErrStaleStep, q.ID, r.computed, len(r.tokens), q.Pos, end, q.Sample, q.Draft)
			}
			if q.Sample {
				o := out[i]
				drafts := q.Tokens[len(q.Tokens)-q.Draft:]
				if len(o) == 0 || len(o) > q.Draft+1 || !slices.Equal(o[:len(o)-1], drafts[:len(o)-1]) {
					return fmt.Errorf("%w: request %q: took %v from drafts %v; want a prefix of the drafts and one sampled token", ErrBadSampleLen, q.ID, o, drafts)
				}
			}
		}
		s.updated = append(s.updated, r)
	}
	for i, q := range step.Seqs {
		r := s.updated[i]
		if r == nil {
			continue
		}
		s.account(r, -1)
		r.computed += len(q.Tokens) - q.Draft
		if q.Sample {
			r.computed += len(out[i]) - 1
			r.tokens = append(r.tokens, out[i]...)
		}
		r.draft = r.draft[:0]
		s.account(r, 1)
		s.reps[r.replica].kv.Cache(r.kv, r.tokens, r.computed)
	}
	clear(s.updated)
	return nil
}
