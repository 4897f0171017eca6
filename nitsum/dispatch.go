package nitsum

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gearboxlm/gearbox/slo"
)

// ErrNoInstance is wrapped by Dispatch's error when no instance may take
// the request: no prefill instance at all for an SLO request, none that
// accepts background work for a background one.
var ErrNoInstance = errors.New("no instance can take the request")

// ErrUnknownRequest is wrapped by Done's error for an ID that is not in
// flight.
var ErrUnknownRequest = errors.New("request not in flight")

// Class is how the global scheduler labelled a request; the instance's
// local scheduler queues it by class.
type Class uint8

const (
	Feasible   Class = iota // fits its tier's SLO-compliant bandwidth
	BestEffort              // did not fit: spilled, served after feasible work
	Background              // of a background tier: no latency target
)

func (c Class) String() string {
	switch c {
	case Feasible:
		return "feasible"
	case BestEffort:
		return "best-effort"
	case Background:
		return "background"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// Request is what the global scheduler needs of a request.
type Request struct {
	ID   string // unique among requests in flight
	Tier int    // index in the tier set (slo.Set.Resolve)
}

// Assignment is where a request went and with which label.
type Assignment struct {
	Instance int // index in the instances the Dispatcher was built with
	Class    Class
}

// Load is one instance's requests in flight by class.
type Load struct {
	Capacity   int // SLO-compliant bandwidth: requests in flight (Instance.Capacity)
	Feasible   int // feasible requests assigned and not done
	BestEffort int
	Background int
}

// Available is the instance's remaining SLO-compliant bandwidth.
func (l Load) Available() int { return max(0, l.Capacity-l.Feasible) }

// Dispatcher is Nitsum's global scheduler (§3.3.2, G1–G8) over one
// plan's instances. Requests are handled first come, first served: each
// Dispatch call labels and places its request against the state left by
// the calls before it, under one lock, so concurrent callers are served in
// the order they take the lock. It is safe for concurrent use: HTTP
// handlers dispatch and engine loops report completions from their own
// goroutines.
//
// Only feasible requests use up bandwidth: best-effort and background
// requests are queued behind feasible ones by the local scheduler, so
// they never take a feasible request's batch slot, and counting them would
// make a spill from one tier turn another tier's requests infeasible.
type Dispatcher struct {
	mu         sync.Mutex
	background []bool  // per tier
	byTier     [][]int // per tier, its prefill instances
	prefill    []int   // every prefill instance, in index order
	bgTargets  []int   // every instance that accepts background work
	loads      []Load
	spill, bg  int // round-robin cursors into prefill and bgTargets
	live       map[string]Assignment
}

// NewDispatcher builds the global scheduler for instances (a Plan's, or
// any list of the same form) serving the tiers of set. Prefill instances
// carry their bandwidth in Capacity; decode instances are not routed to
// (the prefill instance hands its requests on) unless they accept
// background work.
func NewDispatcher(set *slo.Set, instances []Instance) (*Dispatcher, error) {
	if set == nil {
		return nil, errors.New("nitsum: dispatcher: no tier set")
	}
	d := &Dispatcher{
		background: make([]bool, set.Len()),
		byTier:     make([][]int, set.Len()),
		loads:      make([]Load, len(instances)),
		live:       make(map[string]Assignment),
	}
	for s := range set.Len() {
		d.background[s] = set.At(s).Background
	}
	for i, in := range instances {
		switch in.Role {
		case Prefill, Decode:
			if in.Tier < 0 || in.Tier >= set.Len() {
				return nil, fmt.Errorf("nitsum: dispatcher: instance %d: tier %d out of range [0, %d)", i, in.Tier, set.Len())
			}
			if d.background[in.Tier] {
				return nil, fmt.Errorf("nitsum: dispatcher: instance %d: %s for background tier %q, which has no SLO to serve", i, in.Role, set.At(in.Tier).Name)
			}
		case Spare:
			if in.Tier != -1 {
				return nil, fmt.Errorf("nitsum: dispatcher: instance %d: a spare instance has tier -1, got %d", i, in.Tier)
			}
		default:
			return nil, fmt.Errorf("nitsum: dispatcher: instance %d: unknown role %d", i, in.Role)
		}
		if in.Capacity < 0 {
			return nil, fmt.Errorf("nitsum: dispatcher: instance %d: negative capacity %d", i, in.Capacity)
		}
		if in.Role == Prefill {
			d.byTier[in.Tier] = append(d.byTier[in.Tier], i)
			d.prefill = append(d.prefill, i)
			d.loads[i].Capacity = in.Capacity
		}
		if in.Background {
			d.bgTargets = append(d.bgTargets, i)
		}
	}
	return d, nil
}

// Dispatch labels r and picks its instance:
//
//   - a request of a background tier goes round-robin to the instances
//     that accept background work (G2);
//   - otherwise it is feasible if one of its tier's prefill instances
//     has bandwidth left (G3, G4), and then goes to the least-loaded one,
//     load being feasible requests in flight over capacity, ties to the
//     lowest index (G5);
//   - an infeasible request is not rejected: it goes round-robin over
//     every prefill instance of every tier as best effort (G6).
//
// The request stays in flight until Done. Errors: an empty or duplicate
// ID, a tier out of range, or (wrapping ErrNoInstance) no instance that
// may take it.
func (d *Dispatcher) Dispatch(r Request) (Assignment, error) {
	if r.ID == "" {
		return Assignment{}, errors.New("nitsum: dispatch: empty request ID")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if r.Tier < 0 || r.Tier >= len(d.byTier) {
		return Assignment{}, fmt.Errorf("nitsum: dispatch %s: tier %d out of range [0, %d)", r.ID, r.Tier, len(d.byTier))
	}
	if _, dup := d.live[r.ID]; dup {
		return Assignment{}, fmt.Errorf("nitsum: dispatch %s: already in flight", r.ID)
	}
	var a Assignment
	switch {
	case d.background[r.Tier]:
		if len(d.bgTargets) == 0 {
			return Assignment{}, fmt.Errorf("nitsum: dispatch %s: background: %w", r.ID, ErrNoInstance)
		}
		a = Assignment{Instance: d.bgTargets[d.bg], Class: Background}
		d.bg = (d.bg + 1) % len(d.bgTargets)
		d.loads[a.Instance].Background++
	default:
		if i := d.leastLoaded(r.Tier); i >= 0 && d.loads[i].Feasible < d.loads[i].Capacity {
			a = Assignment{Instance: i, Class: Feasible}
			d.loads[i].Feasible++
			break
		}
		if len(d.prefill) == 0 {
			return Assignment{}, fmt.Errorf("nitsum: dispatch %s: %w", r.ID, ErrNoInstance)
		}
		a = Assignment{Instance: d.prefill[d.spill], Class: BestEffort}
		d.spill = (d.spill + 1) % len(d.prefill)
		d.loads[a.Instance].BestEffort++
	}
	d.live[r.ID] = a
	return a, nil
}

// leastLoaded returns the prefill instance of tier s with the lowest
// Feasible/Capacity, ties to the lowest index, or -1 if the tier has none
// with capacity.
func (d *Dispatcher) leastLoaded(s int) int {
	best := -1
	for _, i := range d.byTier[s] {
		l := d.loads[i]
		if l.Capacity == 0 {
			continue
		}
		// l.Feasible/l.Capacity < b.Feasible/b.Capacity, without division.
		if best < 0 || l.Feasible*d.loads[best].Capacity < d.loads[best].Feasible*l.Capacity {
			best = i
		}
	}
	return best
}

// Done reports that the request id finished on its instance (G7, L5):
// the bandwidth it held is available again. It returns where the request
// had gone; an id not in flight is an error wrapping ErrUnknownRequest.
func (d *Dispatcher) Done(id string) (Assignment, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.live[id]
	if !ok {
		return Assignment{}, fmt.Errorf("nitsum: done %s: %w", id, ErrUnknownRequest)
	}
	delete(d.live, id)
	l := &d.loads[a.Instance]
	switch a.Class {
	case Feasible:
		l.Feasible--
	case BestEffort:
		l.BestEffort--
	case Background:
		l.Background--
	}
	return a, nil
}

// Load returns instance i's requests in flight.
func (d *Dispatcher) Load(i int) Load {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loads[i]
}

// InFlight is the number of requests dispatched and not done.
func (d *Dispatcher) InFlight() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.live)
}
