package nitsum

import "fmt"

// Place records request r as in flight on instance a.Instance under
// class a.Class without choosing: a request that was already running
// when the plan changed and whose KV now lives on that instance (the
// runtime re-registers it with the new plan's Dispatcher). A feasible
// placement takes bandwidth as Dispatch's would, even past the
// instance's capacity (the request is there already); Done gives it
// back. It fails on an empty or duplicate ID, an instance out of range
// or an unknown class.
func (d *Dispatcher) Place(r Request, a Assignment) error {
	if r.ID == "" {
		return fmt.Errorf("nitsum: place: empty request ID")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if a.Instance < 0 || a.Instance >= len(d.loads) {
		return fmt.Errorf("nitsum: place %s: instance %d out of range [0, %d)", r.ID, a.Instance, len(d.loads))
	}
	if _, dup := d.live[r.ID]; dup {
		return fmt.Errorf("nitsum: place %s: already in flight", r.ID)
	}
	l := &d.loads[a.Instance]
	switch a.Class {
	case Feasible:
		l.Feasible++
	case BestEffort:
		l.BestEffort++
	case Background:
		l.Background++
	default:
		return fmt.Errorf("nitsum: place %s: unknown class %d", r.ID, a.Class)
	}
	d.live[r.ID] = a
	return nil
}
