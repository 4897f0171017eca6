package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/migrate"
	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/sched"
)

// Prefill/decode disaggregation (D1–D3). A prefill instance computes a
// request's prompt and its first token; then the request is handed to a
// decode instance of the same tier, its KV copied from the prefill
// instance's ranks to the decode instance's with package migrate (the two
// instances' ranks as one small World: the larger group first, so both
// are aligned), and it decodes there. The paper does not describe this
// hand-off (D3); the choices here are: the decode instance is the one of
// the prefill instance's tier with the fewest live requests; both
// instances pause for the copy (stop-and-migrate, as a reconfiguration);
// the request's SLO bandwidth on the prefill instance is released at the
// hand-off (it has left the prefill instance; G3 counts what prefill
// instances hold) and it stays in flight on the decode instance until it
// ends. A prefill instance whose tier has no decode instance keeps its
// requests to the end.

// handOffLoop runs hand-off passes when a prefill instance reports first
// tokens, until ctx ends.
func (c *Cluster) handOffLoop(ctx context.Context) {
	defer c.ctlWG.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.firsts:
		}
		c.mu.Lock()
		if !c.closed {
			if err := c.handOff(ctx); err != nil && ctx.Err() == nil {
				c.log.Error("nitsum prefill/decode hand-off", "err", err)
			}
		}
		c.mu.Unlock()
	}
}

// handOff moves every request that has its first token from the prefill
// instances to decode instances of their tier. c.mu is held; the
// instances involved pause (their loops are stopped and restarted).
// A hand-off that fails changes nothing: the request goes on decoding on
// its prefill instance, and the error is returned after the other
// hand-offs.
func (c *Cluster) handOff(ctx context.Context) error {
	var first error
	for _, src := range c.insts {
		if src.spec.Role != nitsum.Prefill || !c.hasDecode(src.spec.Tier) {
			continue
		}
		stop(src)
		hs, err := src.eng.Handoffs()
		if err != nil {
			c.start(src)
			first = cmpErr(first, err)
			continue
		}
		byDst := map[*instance][]engine.Handoff{}
		extra := map[*instance]int{}
		var dsts []*instance
		for _, h := range hs {
			if !h.State.Running || h.State.Computed < h.State.PromptLen {
				continue
			}
			dst := c.decodeFor(src.spec.Tier, extra)
			extra[dst]++
			if byDst[dst] == nil {
				dsts = append(dsts, dst)
			}
			byDst[dst] = append(byDst[dst], h)
		}
		for _, dst := range dsts {
			if err := c.handPair(ctx, src, dst, byDst[dst]); err != nil {
				first = cmpErr(first, err)
			}
		}
		c.start(src)
	}
	return first
}

func cmpErr(first, err error) error {
	if first == nil {
		return err
	}
	return first
}

// hasDecode reports whether tier s has a decode instance.
func (c *Cluster) hasDecode(s int) bool {
	return slices.ContainsFunc(c.insts, func(in *instance) bool { return in.spec.Role == nitsum.Decode && in.spec.Tier == s })
}

// decodeFor is tier s's decode instance with the fewest live requests,
// counting extra ones already given to it in this pass; ties to the
// lowest rank.
func (c *Cluster) decodeFor(s int, extra map[*instance]int) *instance {
	var best *instance
	bestN := 0
	for _, in := range c.insts {
		if in.spec.Role != nitsum.Decode || in.spec.Tier != s {
			continue
		}
		st := in.eng.Stats()
		n := st.Running + st.Waiting + extra[in]
		if best == nil || n < bestN {
			best, bestN = in, n
		}
	}
	return best
}

// handPair hands hs from src (paused) to dst: dst pauses, adopts them
// (blocks allocated), their KV moves, src releases them and dst resumes.
// Requests dst has no blocks for stay on src, decoding there, and go in
// a later pass if dst has room by then.
func (c *Cluster) handPair(ctx context.Context, src, dst *instance, hs []engine.Handoff) error {
	stop(dst)
	defer c.start(dst)
	big, small := src, dst
	if dst.spec.TP > src.spec.TP {
		big, small = dst, src
	}
	g := migrate.Grouping{big.spec.TP, small.spec.TP}
	srcGroup, dstGroup := 0, 1
	if big == dst {
		srcGroup, dstGroup = 1, 0
	}
	spec := migrate.Spec{Model: c.cfg, From: g, To: g}
	var moved []engine.Handoff
	var firstErr error
	for _, h := range hs {
		blocks, err := dst.eng.Adopt(h)
		if errors.Is(err, sched.ErrNoBlocks) {
			continue // the decode instance is full: the request decodes where it is for now
		}
		if err != nil {
			firstErr = cmpErr(firstErr, fmt.Errorf("cluster: hand-off %s: %w", h.State.ID, err))
			continue
		}
		spec.Requests = append(spec.Requests, migrate.Request{ID: migrate.RequestID(len(moved)), From: srcGroup, To: dstGroup,
			Len: h.State.Computed, Src: h.State.Blocks, Dst: blocks})
		moved = append(moved, h)
	}
	if len(moved) == 0 {
		return firstErr
	}
	undo := func() {
		for _, h := range moved {
			dst.eng.Release(h.State.ID)
		}
	}
	plan, err := migrate.NewPlan(spec)
	if err != nil {
		undo()
		return fmt.Errorf("cluster: hand-off tp%d@%d → tp%d@%d: %w", src.spec.TP, src.spec.FirstGPU, dst.spec.TP, dst.spec.FirstGPU, err)
	}
	w, err := comm.NewWorld(g.Ranks())
	if err != nil {
		undo()
		return fmt.Errorf("cluster: hand-off: %w", err)
	}
	caches := func(in *instance, lo int, out []*kvcache.Cache) {
		for r := range in.spec.TP {
			out[lo+r] = in.exec.RankCache(r)
		}
	}
	srcC, dstC := make([]*kvcache.Cache, g.Ranks()), make([]*kvcache.Cache, g.Ranks())
	caches(src, g.Group(srcGroup).Lo, srcC)
	caches(dst, g.Group(dstGroup).Lo, dstC)
	errs := make([]error, g.Ranks())
	var wg sync.WaitGroup
	for r := range g.Ranks() {
		wg.Go(func() { _, errs[r] = migrate.Run(ctx, w, plan.Rank(r), srcC[r], dstC[r], migrate.Options{}) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			undo()
			return fmt.Errorf("cluster: hand-off tp%d@%d → tp%d@%d: %w", src.spec.TP, src.spec.FirstGPU, dst.spec.TP, dst.spec.FirstGPU, err)
		}
	}
	d := c.disp.Load()
	dstIdx := slices.Index(c.insts, dst)
	for _, h := range moved {
		id := h.State.ID
		src.eng.Release(id)
		c.fmu.Lock()
		p := c.where[id]
		p.inst = dst
		c.where[id] = p
		c.fmu.Unlock()
		if _, err := d.Done(id); err == nil {
			_ = d.Place(nitsum.Request{ID: id, Tier: p.tier}, nitsum.Assignment{Instance: dstIdx, Class: p.class})
		}
	}
	s := &c.stats
	s.mu.Lock()
	s.handoffs += int64(len(moved))
	s.handoffBytes += plan.MovedBytes()
	s.mu.Unlock()
	dst.signal()
	return firstErr
}
