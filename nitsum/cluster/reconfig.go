package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/migrate"
	"github.com/gearboxlm/gearbox/nitsum"
)

// Report is what one reconfiguration did.
type Report struct {
	From, To     migrate.Grouping // the TP degrees of the instances, in rank order
	Changed      int              // old instances replaced (their rank block or degree changed)
	Moved        int              // running requests whose KV migrated
	MovedTokens  int64            // Σ their context lengths, tokens
	Redispatched int              // waiting requests dispatched again (metadata only)
	Bytes        int64            // KV bytes that crossed ranks (migrate.Plan.MovedBytes)
	Pause        time.Duration    // from pausing the instances to resuming them
}

// Stats is a snapshot of the runtime's counters.
type Stats struct {
	Layout           migrate.Grouping // the TP degrees of the instances now, in rank order
	Instances        map[int]int      // instances now, by TP degree
	Reconfigurations int64            // layouts changed
	Failed           int64            // reconfigurations refused or aborted, nothing changed
	MigratedBytes    int64            // KV bytes moved across ranks, over all reconfigurations
	MovedRequests    int64            // running requests migrated
	Redispatched     int64            // waiting requests dispatched again
	Pause            time.Duration    // total time instances stood paused for reconfigurations
	Dispatched       [3]int64         // requests dispatched, by nitsum.Class
	Finished         int64            // requests that reached a terminal state
	HandedOff        int64            // requests handed from prefill to decode instances
	HandoffBytes     int64            // KV bytes those hand-offs moved across ranks
}

// counters hold Stats; the atomics are updated outside mu.
type counters struct {
	dispatched [3]atomic.Int64
	finished   atomic.Int64

	mu                     sync.Mutex
	layout                 migrate.Grouping
	degrees                map[int]int
	reconfigs, failed      int64
	bytes, moved, redisp   int64
	pause                  time.Duration
	handoffs, handoffBytes int64
}

// Stats returns a snapshot of the counters.
func (c *Cluster) Stats() Stats {
	s := &c.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{
		Layout: append(migrate.Grouping(nil), s.layout...), Instances: map[int]int{},
		Reconfigurations: s.reconfigs, Failed: s.failed, MigratedBytes: s.bytes, MovedRequests: s.moved,
		Redispatched: s.redisp, Pause: s.pause, Finished: s.finished.Load(), HandedOff: s.handoffs, HandoffBytes: s.handoffBytes,
	}
	for t, n := range s.degrees {
		out.Instances[t] = n
	}
	for i := range out.Dispatched {
		out.Dispatched[i] = s.dispatched[i].Load()
	}
	return out
}

// recordLayout publishes the instances' degrees; c.mu is held.
func (c *Cluster) recordLayout() {
	s := &c.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	s.layout = grouping(specs(c.insts))
	name := s.layout.String()
	c.layoutName.Store(&name)
	clear(s.degrees)
	for _, in := range c.insts {
		s.degrees[in.spec.TP]++
	}
}

// grouping is the TP degrees of layout, in rank order.
func grouping(layout []nitsum.Instance) migrate.Grouping {
	g := make(migrate.Grouping, len(layout))
	for i, in := range layout {
		g[i] = in.TP
	}
	return g
}

// specs is the instances' specs, in rank order.
func specs(insts []*instance) []nitsum.Instance {
	out := make([]nitsum.Instance, len(insts))
	for i, in := range insts {
		out[i] = in.spec
	}
	return out
}

// Reconfigure moves the pool to layout (a plan's instances, in rank
// order, covering every rank), stop-and-migrate (K6): every instance
// pauses after its step in progress; the instances whose rank block or
// degree changes hand their requests off; running ones get blocks on
// their new instance and their KV moves there with package migrate
// (handshake first, then aggregated, double-buffered transfers); waiting
// ones are dispatched again by the new layout's Dispatcher; then every
// instance resumes. Instances whose block and degree stay keep their
// engine and requests. No weight byte is copied: every instance runs on
// the warm executor of its block and degree.
//
// On any failure (a layout that does not fit, a destination without the
// blocks, a handshake that disagrees) nothing has changed: the old
// instances resume with their requests, and the error says why.
func (c *Cluster) Reconfigure(ctx context.Context, layout []nitsum.Instance) (Report, error) {
	layout = c.served(layout)
	if err := c.checkLayout(layout); err != nil {
		c.countFailed()
		return Report{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return Report{}, ErrClosed
	}
	start := c.clk.Now()
	for _, in := range c.insts {
		stop(in)
	}
	rep, err := c.reconfigure(ctx, layout)
	for _, in := range c.insts {
		c.start(in)
	}
	rep.Pause = c.clk.Now().Sub(start)
	if err != nil {
		c.countFailed()
		return rep, err
	}
	c.recordLayout()
	s := &c.stats
	s.mu.Lock()
	s.pause += rep.Pause
	if rep.Changed > 0 {
		s.reconfigs++
	}
	s.bytes += rep.Bytes
	s.moved += int64(rep.Moved)
	s.redisp += int64(rep.Redispatched)
	s.mu.Unlock()
	c.log.Info("nitsum reconfiguration", "from", rep.From.String(), "to", rep.To.String(), "moved", rep.Moved,
		"redispatched", rep.Redispatched, "kv_bytes", rep.Bytes, "pause", rep.Pause)
	return rep, nil
}

func (c *Cluster) countFailed() {
	c.stats.mu.Lock()
	c.stats.failed++
	c.stats.mu.Unlock()
}

// move is one request handed off from a changed instance.
type move struct {
	h     engine.Handoff
	from  int // old instance index
	to    int // new instance index
	class nitsum.Class
	tier  int
}

// relayout is one reconfiguration in progress: the old instances, the
// new ones, and the requests that move. Nothing it builds is visible to
// the cluster until commit.
type relayout struct {
	c       *Cluster
	layout  []nitsum.Instance
	old     []*instance
	next    []*instance // by new index: kept instances (a copy with the new spec) or fresh ones
	kept    []bool      // by old index: the block and degree stay
	keptAt  map[int]int // old index → new index, for kept instances
	fresh   []bool      // by new index: a new engine
	d       *nitsum.Dispatcher
	moves   []move
	adopted []move // moves whose requests a kept instance adopted (undone on failure)
	rep     Report
}

// reconfigure does Reconfigure's work with every instance paused and
// c.mu held, in steps; on error c is unchanged.
func (c *Cluster) reconfigure(ctx context.Context, layout []nitsum.Instance) (Report, error) {
	x := &relayout{c: c, layout: layout, old: c.insts, rep: Report{From: grouping(specs(c.insts)), To: grouping(layout)}}
	var err error
	if x.d, err = nitsum.NewDispatcher(c.opts.Tiers, layout); err != nil {
		return x.rep, fmt.Errorf("cluster: reconfigure: %w", err)
	}
	if err := x.instances(); err != nil {
		return x.rep, err
	}
	where := c.placements()
	if err := x.placeKept(where); err != nil {
		return x.rep, err
	}
	if err := x.collect(where); err != nil {
		return x.rep, err
	}
	spec, err := x.adopt()
	if err == nil && len(spec.Requests) > 0 {
		x.rep.Bytes, err = c.migrate(ctx, spec, x.old, x.next, x.kept, x.fresh)
	}
	if err != nil {
		x.undo()
		return x.rep, err
	}
	x.commit()
	return x.rep, nil
}

// placements is a copy of where every live request is.
func (c *Cluster) placements() map[string]placed {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	out := make(map[string]placed, len(c.where))
	for id, p := range c.where {
		out[id] = p
	}
	return out
}

// instances builds the new layout's instances: an unchanged block keeps
// its instance (engine, executor, requests); others get a fresh engine
// on their warm executor.
func (x *relayout) instances() error {
	byKey := map[blockKey]int{}
	for j, in := range x.old {
		byKey[blockKey{in.spec.FirstGPU, in.spec.TP}] = j
	}
	x.next = make([]*instance, len(x.layout))
	x.kept = make([]bool, len(x.old))
	x.fresh = make([]bool, len(x.layout))
	x.keptAt = map[int]int{}
	for i, spec := range x.layout {
		if j, ok := byKey[blockKey{spec.FirstGPU, spec.TP}]; ok {
			x.kept[j], x.keptAt[j] = true, i
			in := *x.old[j] // the spec changes; engine, executor and loop channels stay
			in.spec = spec
			x.next[i] = &in
			continue
		}
		in, err := x.c.newInstance(spec)
		if err != nil {
			return err
		}
		x.next[i], x.fresh[i] = in, true
	}
	return nil
}

// oldIndex is the old index of instance in, -1 if none.
func (x *relayout) oldIndex(in *instance) int { return slices.Index(x.old, in) }

// placeKept gives the new dispatcher the requests that stay where they
// are, first, so the moves are dispatched against their load.
func (x *relayout) placeKept(where map[string]placed) error {
	for id, p := range where {
		if j := x.oldIndex(p.inst); j >= 0 && x.kept[j] {
			if err := x.d.Place(nitsum.Request{ID: id, Tier: p.tier}, nitsum.Assignment{Instance: x.keptAt[j], Class: p.class}); err != nil {
				return fmt.Errorf("cluster: reconfigure: %w", err)
			}
		}
	}
	return nil
}

// collect takes the changed instances' requests: running ones go to the
// new instance over their block, waiting ones wherever the new
// dispatcher sends them.
func (x *relayout) collect(where map[string]placed) error {
	filled := make([]int, len(x.layout))
	for j, in := range x.old {
		if x.kept[j] {
			continue
		}
		x.rep.Changed++
		hs, err := in.eng.Handoffs()
		if err != nil {
			return fmt.Errorf("cluster: reconfigure: instance tp=%d at rank %d: %w", in.spec.TP, in.spec.FirstGPU, err)
		}
		for _, h := range hs {
			p, ok := where[h.State.ID]
			if !ok {
				return fmt.Errorf("cluster: reconfigure: request %q is live on instance tp=%d at rank %d but was not dispatched", h.State.ID, in.spec.TP, in.spec.FirstGPU)
			}
			m := move{h: h, from: j, class: p.class, tier: p.tier}
			if h.State.Running {
				m.to = destination(in.spec, x.layout, filled)
				filled[m.to]++
				if err := x.d.Place(nitsum.Request{ID: h.State.ID, Tier: p.tier}, nitsum.Assignment{Instance: m.to, Class: p.class}); err != nil {
					return fmt.Errorf("cluster: reconfigure: %w", err)
				}
				x.rep.Moved++
				x.rep.MovedTokens += int64(h.State.Computed)
			} else {
				a, err := x.d.Dispatch(nitsum.Request{ID: h.State.ID, Tier: p.tier})
				if err != nil {
					return fmt.Errorf("cluster: reconfigure: re-dispatch %q: %w", h.State.ID, err)
				}
				m.to, m.class = a.Instance, a.Class
				m.h.State.Priority = int(a.Class)
				x.rep.Redispatched++
			}
			x.moves = append(x.moves, m)
		}
	}
	return nil
}

// adopt has every moving request join its new instance (running ones
// get their blocks there) and returns the migration that fills those
// blocks; waiting ones are in it as metadata (K2).
func (x *relayout) adopt() (migrate.Spec, error) {
	spec := migrate.Spec{Model: x.c.cfg, From: x.rep.From, To: x.rep.To}
	for k, m := range x.moves {
		rq := migrate.Request{ID: migrate.RequestID(k), From: m.from, To: m.to, Waiting: !m.h.State.Running}
		dst, err := x.next[m.to].eng.Adopt(m.h)
		if err != nil {
			return spec, fmt.Errorf("cluster: reconfigure: %w", err)
		}
		if !x.fresh[m.to] {
			x.adopted = append(x.adopted, m)
		}
		if m.h.State.Running {
			rq.Len, rq.Src, rq.Dst = m.h.State.Computed, m.h.State.Blocks, dst
		}
		spec.Requests = append(spec.Requests, rq)
	}
	return spec, nil
}

// undo takes back what kept instances adopted; fresh instances and the
// new dispatcher are dropped with x.
func (x *relayout) undo() {
	for _, m := range x.adopted {
		x.next[m.to].eng.Release(m.h.State.ID)
	}
}

// commit makes the new layout the cluster's.
func (x *relayout) commit() {
	c := x.c
	c.fmu.Lock()
	for id, p := range c.where {
		if j := x.oldIndex(p.inst); j >= 0 && x.kept[j] {
			p.inst = x.next[x.keptAt[j]]
			c.where[id] = p
		}
	}
	for _, m := range x.moves {
		c.where[m.h.State.ID] = placed{inst: x.next[m.to], class: m.class, tier: m.tier}
	}
	c.fmu.Unlock()
	c.obs.stepMu.Lock()
	for j, in := range x.old {
		if !x.kept[j] {
			delete(c.obs.lastQ, in.eng)
			delete(c.obs.lastH, in.eng)
		}
	}
	c.obs.stepMu.Unlock()
	c.insts = x.next
	c.disp.Store(x.d)
}

// destination is the new instance a running request of the changed
// instance from goes to: the one holding from's first rank when blocks
// merge, else the least filled one inside from's block (ties to the
// lowest rank).
func destination(from nitsum.Instance, layout []nitsum.Instance, filled []int) int {
	best := -1
	for i, in := range layout {
		if in.FirstGPU <= from.FirstGPU && from.FirstGPU < in.FirstGPU+in.TP {
			return i // a merge: one group holds the whole old block
		}
		if in.FirstGPU >= from.FirstGPU && in.FirstGPU < from.FirstGPU+from.TP {
			if best < 0 || filled[i] < filled[best] {
				best = i
			}
		}
	}
	return best
}

// migrate runs spec on every rank at once: each rank's source cache is
// its changed old instance's, its destination cache its fresh new
// instance's (nil on kept instances, which move nothing). It returns the
// KV bytes that crossed ranks.
func (c *Cluster) migrate(ctx context.Context, spec migrate.Spec, old, next []*instance, kept, fresh []bool) (int64, error) {
	plan, err := migrate.NewPlan(spec)
	if err != nil {
		return 0, fmt.Errorf("cluster: reconfigure: %w", err)
	}
	w, err := comm.NewWorld(c.opts.Ranks)
	if err != nil {
		return 0, fmt.Errorf("cluster: reconfigure: %w", err)
	}
	src := make([]*kvcache.Cache, c.opts.Ranks)
	dst := make([]*kvcache.Cache, c.opts.Ranks)
	for j, in := range old {
		if !kept[j] {
			for r := range in.spec.TP {
				src[in.spec.FirstGPU+r] = in.exec.RankCache(r)
			}
		}
	}
	for i, in := range next {
		if fresh[i] {
			for r := range in.spec.TP {
				dst[in.spec.FirstGPU+r] = in.exec.RankCache(r)
			}
		}
	}
	errs := make([]error, c.opts.Ranks)
	var wg sync.WaitGroup
	for r := range c.opts.Ranks {
		wg.Go(func() {
			_, errs[r] = migrate.Run(ctx, w, plan.Rank(r), src[r], dst[r], migrate.Options{})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil { // every rank fails alike in the handshake; the first says why
			return 0, fmt.Errorf("cluster: reconfigure %v → %v: %w", spec.From, spec.To, err)
		}
	}
	return plan.MovedBytes(), nil
}
