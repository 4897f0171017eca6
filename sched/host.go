package sched

import (
	"fmt"
	"slices"

	"github.com/gearboxlm/gearbox/kvcache"
)

// HostSwap is a planned copy of one request's KV between its replica's
// device blocks and the host tier: Device[i] ↔ Host[i], covering its
// computed tokens. Host ids are global (see Config.HostBlocks).
type HostSwap struct {
	ID           string
	Replica      int
	Device, Host []int
	out          bool
}

// Out reports whether the swap parks the request (device → host).
func (sw HostSwap) Out() bool { return sw.out }

// SwapOut plans to park running request id on the host tier: it takes
// host blocks for the request's computed tokens and returns the copy to
// make, or false (changing nothing) when the request is not running, has
// nothing computed, or the tier lacks the blocks. From then until
// SwapDone the request is neither scheduled nor preempted.
func (s *Scheduler) SwapOut(id string) (HostSwap, bool) {
	r := s.byID[id]
	if r == nil || r.state != running || r.computed == 0 || s.reps[r.replica].host == nil {
		return HostSwap{}, false
	}
	host, ok := s.reps[r.replica].host.Admit(kvcache.Prefix{}, r.computed)
	if !ok {
		return HostSwap{}, false
	}
	s.removeRunning(r)
	r.host, r.state = host, swappingOut
	s.swapping++
	return s.hostSwap(r, true), true
}

// park moves running v to the host tier in place of preempting it, when
// its replica has a tier with room: v's device blocks are freed at once
// (a preemption's victim gives them to the request that needs them), and
// the copy the caller must make before the step runs is returned. Parking
// counts as a preemption.
func (s *Scheduler) park(v *request) (HostSwap, bool) {
	rep := &s.reps[v.replica]
	if rep.host == nil || v.computed == 0 {
		return HostSwap{}, false
	}
	host, ok := rep.host.Admit(kvcache.Prefix{}, v.computed)
	if !ok {
		return HostSwap{}, false
	}
	s.removeRunning(v)
	v.host = host
	sw := s.hostSwap(v, true)
	rep.kv.Free(v.kv)
	v.kv, v.state, v.draft = nil, parked, v.draft[:0]
	s.insertParked(v)
	s.preemptions++
	return sw, true
}

// SwapIn plans to bring parked requests back to their replicas' device
// blocks, in priority order, first come first served per replica (a
// replica stops at the first request whose blocks do not fit, watermark
// included), at most max of them (max ≤ 0: no limit). The blocks the
// running decodes need for their next token are left to them: taken by
// a request coming back, they would make a decode with no victim below
// it park itself, and then the two trade places forever. From then until
// SwapDone a request is neither scheduled nor preempted.
func (s *Scheduler) SwapIn(max int) []HostSwap {
	var out []HostSwap
	blocked := make([]bool, len(s.reps))
	reserve := make([]int, len(s.reps)) // blocks the running decodes' next tokens need
	for _, r := range s.running {
		if n := s.blocksFor(len(r.tokens)) - len(r.kv.Blocks()); r.decoding() && n > 0 {
			reserve[r.replica] += n
		}
	}
	for _, r := range slices.Clone(s.parked) {
		if max > 0 && len(out) == max {
			break
		}
		if blocked[r.replica] {
			continue
		}
		kv := s.reps[r.replica].kv
		var seq *kvcache.Seq
		ok := kv.NumFree()-reserve[r.replica] >= s.blocksFor(r.computed)
		if ok {
			seq, ok = kv.Admit(kvcache.Salted(uint64(r.adapter)), r.computed)
		}
		if !ok {
			blocked[r.replica] = true
			continue
		}
		s.removeParked(r)
		r.kv, r.state = seq, swappingIn
		s.swapping++
		out = append(out, s.hostSwap(r, false))
	}
	return out
}

// blocksFor is the number of blocks n tokens take.
func (s *Scheduler) blocksFor(n int) int { return (n + s.cfg.BlockSize - 1) / s.cfg.BlockSize }

// SwapDone ends a swap planned by SwapOut or SwapIn: with ok the copy
// happened (a parked request's device blocks are freed, a returning one's
// host blocks are, and it runs again), else it is undone. A request that
// ended meanwhile (Abort, Finish) has had all its blocks freed already.
func (s *Scheduler) SwapDone(sw HostSwap, ok bool) error {
	r := s.byID[sw.ID]
	if r == nil {
		return nil
	}
	want := swappingIn
	if sw.out {
		want = swappingOut
	}
	if r.state != want {
		return fmt.Errorf("%w: request %q is not in the swap being ended", ErrStaleStep, sw.ID)
	}
	rep := &s.reps[r.replica]
	s.swapping--
	if sw.out == ok { // parked: a swap-out that happened, or a swap-in undone
		rep.kv.Free(r.kv)
		r.kv, r.state = nil, parked
		s.insertParked(r)
	} else { // on the device: a swap-in that happened, or a swap-out undone
		rep.host.Free(r.host)
		r.host, r.state = nil, running
		s.insertRunning(r)
	}
	return nil
}

// NumParked is the number of requests on the host tier, swapping
// included.
func (s *Scheduler) NumParked() int { return len(s.parked) + s.swapping }

// HostBlocks returns the host tier's blocks in use and in all, summed
// over replicas; 0, 0 without a tier.
func (s *Scheduler) HostBlocks() (used, total int64) {
	for _, r := range s.reps {
		if r.host != nil {
			used += int64(r.host.NumUsed())
			total += int64(s.cfg.HostBlocks)
		}
	}
	return used, total
}

// HostFits reports whether the next waiting request (the one admission
// takes next) would fit on the host tier of the replica with the most
// free host blocks once prefilled: Seesaw's "the CPU KV store is full"
// is its negation. It is true when nothing waits, and false while
// MaxNumSeqs requests run (admission takes none).
func (s *Scheduler) HostFits() bool {
	return s.nextFits(func(r *replica) int {
		if r.host == nil {
			return 0
		}
		return r.host.NumFree()
	})
}

// DeviceFits reports whether the next waiting request's prompt would fit
// the free device blocks of some replica (true when nothing waits; false
// while MaxNumSeqs requests run).
func (s *Scheduler) DeviceFits() bool {
	return s.nextFits(func(r *replica) int { return r.kv.NumFree() })
}

// nextFits reports whether the next waiting request's known tokens fit
// the free blocks of some replica (true when nothing waits).
func (s *Scheduler) nextFits(free func(*replica) int) bool {
	if len(s.waiting) == 0 {
		return true
	}
	if len(s.running) >= s.cfg.MaxNumSeqs {
		return false // admission takes none, whatever the blocks
	}
	need := (len(s.waiting.peek().tokens) + s.cfg.BlockSize - 1) / s.cfg.BlockSize
	for i := range s.reps {
		if free(&s.reps[i]) >= need {
			return true
		}
	}
	return false
}

// Decoding lists the running requests past their prompt, in priority
// order.
func (s *Scheduler) Decoding() []string {
	var out []string
	for _, r := range s.running {
		if r.decoding() {
			out = append(out, r.id)
		}
	}
	return out
}

// hostSwap is r's planned copy: its device and host block tables over
// its computed tokens, host ids made global.
func (s *Scheduler) hostSwap(r *request, out bool) HostSwap {
	n := (r.computed + s.cfg.BlockSize - 1) / s.cfg.BlockSize
	sw := HostSwap{ID: r.id, Replica: r.replica, Device: slices.Clone(r.kv.Blocks()[:n]), out: out}
	base := r.replica * s.cfg.HostBlocks
	for _, b := range r.host.Blocks()[:n] {
		sw.Host = append(sw.Host, base+b)
	}
	return sw
}

func (s *Scheduler) insertParked(r *request) { insertSorted(&s.parked, r) }

func (s *Scheduler) removeParked(r *request) { removeSorted(&s.parked, r) }

// freeBlocks returns every block r holds, on the device and the host.
func (s *Scheduler) freeBlocks(r *request) {
	if r.replica < 0 {
		return
	}
	rep := &s.reps[r.replica]
	if r.kv != nil {
		rep.kv.Free(r.kv)
		r.kv = nil
	}
	if r.host != nil {
		rep.host.Free(r.host)
		r.host = nil
	}
}
