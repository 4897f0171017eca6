package engine

import (
	"errors"
	"fmt"

	"github.com/gearboxlm/gearbox/sched"
)

// Handoff is one live request taken from an engine so that another
// engine of the same model continues it: its scheduling state and, kept
// inside, its stream, sampler, detokenizer and timings, so the client
// sees one uninterrupted stream. Nitsum moves requests between instances
// of different TP degree this way; the caller copies the KV that
// State.Blocks names in the source runner's cache to the block table the
// destination's Adopt returns.
type Handoff struct {
	State sched.Handoff
	Tier  string // Request.Tier
	l     *live
}

// Handoffs returns every live request of an engine that is not
// iterating (no Iterate or Run in progress, and none until the caller is
// done with it), running ones first. It changes nothing: the caller
// either drops the engine once every handoff is adopted elsewhere, or
// goes on with it (an aborted move). It fails while a swap is in flight
// or requests are parked on a host tier.
func (e *Engine) Handoffs() ([]Handoff, error) {
	if e.prefetch.plans != nil || e.offload.plans != nil {
		return nil, errors.New("engine: handoffs: a swap is in flight")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	states, err := e.sched.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("engine: handoffs: %w", err)
	}
	out := make([]Handoff, 0, len(states))
	for _, st := range states {
		l, ok := e.reqs[st.ID]
		if !ok {
			return nil, fmt.Errorf("engine: handoffs: the scheduler holds %q, which has no stream", st.ID)
		}
		out = append(out, Handoff{State: st, Tier: l.req.Tier, l: l})
	}
	return out, nil
}

// Adopt continues a request handed off by another engine of the same
// model (Handoffs): it joins this engine's scheduler with its place in
// line, and its stream goes on from here. For a running request Adopt
// returns the block table its KV must be copied into before the next
// step; a waiting one gets none and is computed when admitted. It fails,
// changing nothing, on a duplicate id, a draining engine or a scheduler
// that cannot take it (sched.Adopt).
func (e *Engine) Adopt(h Handoff) ([]int, error) {
	if h.l == nil {
		return nil, errors.New("engine: adopt: the handoff holds no request")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.draining {
		return nil, ErrDraining
	}
	if _, dup := e.reqs[h.State.ID]; dup {
		return nil, fmt.Errorf("engine: adopt: request id %q is already live", h.State.ID)
	}
	blocks, err := e.sched.Adopt(h.State)
	if err != nil {
		return nil, fmt.Errorf("engine: adopt: %w", err)
	}
	e.reqs[h.State.ID] = h.l
	e.signal()
	return blocks, nil
}

// Release drops live request id from an engine that is not iterating,
// once another engine has adopted it (Adopt) and its KV has been copied
// there: its blocks are freed and its stream, which the adopter now
// feeds, is left open. It reports whether the request was live here.
func (e *Engine) Release(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.reqs[id]; !ok || !e.sched.Release(id) {
		return false
	}
	e.forget(id)
	return true
}
