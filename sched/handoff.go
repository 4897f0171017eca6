package sched

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gearboxlm/gearbox/kvcache"
)

// ErrNoBlocks is wrapped by Adopt's error when the pool lacks the blocks
// of the request's computed tokens.
var ErrNoBlocks = errors.New("sched: not enough free KV blocks")

// Handoff is one live request's scheduling state, read from one
// scheduler (Snapshot) so that another can take it over (Adopt): Nitsum
// moves requests between instances of different TP degree this way, the
// KV copied between the two by the caller (package migrate).
type Handoff struct {
	ID        string
	Priority  int
	Arrival   time.Time
	PromptLen int
	// Tokens are the known tokens: the prompt, then the sampled outputs.
	Tokens []int
	// Computed is the number of leading Tokens whose KV the request's
	// blocks hold; 0 for a waiting request.
	Computed int
	// Running says the request holds KV blocks (Blocks, in its replica's
	// pool); a waiting one holds none and moves as metadata only.
	Running bool
	Replica int
	Blocks  []int // the block table covering Computed tokens; nil when waiting
	Adapter int   // Request.Adapter
}

// Snapshot returns the state of every live request, running ones first
// in priority order, then waiting ones in priority order. It changes
// nothing: the caller copies the KV the block tables name and then either
// drops this scheduler or goes on with it. Requests parked on a host tier
// or between swaps cannot be handed off: Snapshot fails naming one.
func (s *Scheduler) Snapshot() ([]Handoff, error) {
	if n := s.NumParked(); n > 0 {
		return nil, fmt.Errorf("sched: snapshot: %d requests are on the host tier or swapping", n)
	}
	out := make([]Handoff, 0, len(s.running)+len(s.waiting))
	for _, r := range s.running {
		out = append(out, handoff(r, s.cfg.BlockSize))
	}
	waiting := slices.Clone([]*request(s.waiting))
	slices.SortFunc(waiting, compare)
	for _, r := range waiting {
		out = append(out, handoff(r, s.cfg.BlockSize))
	}
	return out, nil
}

func handoff(r *request, blockSize int) Handoff {
	h := Handoff{ID: r.id, Priority: r.priority, Arrival: r.arrival, PromptLen: r.promptLen, Tokens: slices.Clone(r.tokens), Replica: r.replica, Adapter: r.adapter}
	if r.state == running {
		h.Running, h.Computed = true, r.computed
		n := (r.computed + blockSize - 1) / blockSize
		h.Blocks = slices.Clone(r.kv.Blocks()[:n])
	}
	return h
}

// Adopt takes over a request handed off by another scheduler. A running
// one becomes running here, in replica 0, with Computed tokens computed:
// Adopt allocates the blocks for them and returns the block table, which
// the caller fills with the request's KV before the next Schedule. A
// waiting one joins the waiting queue with its known tokens (it computes
// them all when admitted) and gets no blocks. The request keeps its
// priority and arrival, so it keeps its place in line. Adopt fails,
// changing nothing, for a duplicate ID, known tokens beyond the context,
// Computed outside [1, len(Tokens)] for a running request, or too few
// free blocks (ErrNoBlocks).
func (s *Scheduler) Adopt(h Handoff) ([]int, error) {
	switch {
	case s.byID[h.ID] != nil:
		return nil, fmt.Errorf("%w: adopt %q", ErrDuplicateID, h.ID)
	case h.PromptLen < 1 || h.PromptLen > len(h.Tokens):
		return nil, fmt.Errorf("%w: adopt %q: prompt of %d tokens among %d known", ErrBadRequest, h.ID, h.PromptLen, len(h.Tokens))
	case len(h.Tokens) > s.limit:
		return nil, fmt.Errorf("%w: adopt %q: %d known tokens, at most %d fit", ErrTooLong, h.ID, len(h.Tokens), s.limit)
	case h.Running && (h.Computed < 1 || h.Computed > len(h.Tokens)):
		return nil, fmt.Errorf("%w: adopt %q: %d of %d tokens computed", ErrBadRequest, h.ID, h.Computed, len(h.Tokens))
	}
	r := &request{
		id: h.ID, priority: h.Priority, arrival: h.Arrival, order: s.order,
		promptLen: h.PromptLen, tokens: slices.Clone(h.Tokens), replica: -1, adapter: h.Adapter,
	}
	if !h.Running {
		s.order++
		s.byID[r.id] = r
		s.waiting.push(r)
		return nil, nil
	}
	seq, ok := s.reps[0].kv.Admit(kvcache.Salted(uint64(h.Adapter)), h.Computed)
	if !ok {
		return nil, fmt.Errorf("%w: adopt %q: %d blocks for %d computed tokens", ErrNoBlocks, h.ID, s.blocksFor(h.Computed), h.Computed)
	}
	s.order++
	r.replica, r.kv, r.computed, r.state = 0, seq, h.Computed, running
	s.account(r, 1)
	s.byID[r.id] = r
	s.insertRunning(r)
	return slices.Clone(seq.Blocks()), nil
}

// Release removes live request id once another scheduler has adopted it:
// its blocks are freed, it leaves the queues, and it reaches no terminal
// state here (it goes on elsewhere; Drain never reports it). It reports
// false for an unknown request or one on the host tier or between swaps.
func (s *Scheduler) Release(id string) bool {
	r := s.byID[id]
	if r == nil || (r.state != running && r.state != waiting) {
		return false
	}
	s.account(r, -1)
	if r.state == running {
		s.removeRunning(r)
	} else {
		s.waiting.remove(r)
	}
	s.freeBlocks(r)
	r.state = done
	delete(s.byID, id)
	return true
}
