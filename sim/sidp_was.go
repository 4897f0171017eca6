package sim

import "math"

// wasGroup is the WaS pipeline of a SiDP group (§4.2), one GPU per
// replica standing for its TP lane (every lane moves the same bytes over
// its own links). Each rank has Slots cache slots and one copy stream.
// Its housekeeper fetches the layers it does not own in its prefetch
// order, one copy at a time, each into a slot reserved when the copy
// starts; a slot is freed when the FFN GEMM that reads it finishes, not
// when its copy lands. Compute runs layer by layer: attention, then the
// FFN, which waits (stalls) until the layer's copy has landed. Copies
// move as a fluid: the readers of one owner share its egress max-min
// fairly (each reader reads one copy at a time, capped by its own
// ingress, so k readers of one owner get 1/k of the link each), which is
// the incast of R9.
//
// Prefetch order: layers form cycles of N consecutive layers; with peak
// shifting, rank r's j-th fetch of a cycle is layer c + (r+1+j) mod N
// (j < N−1, skipping its own layer c+r), so at every prefetch index the
// readers hit distinct owners; without it, every rank fetches a cycle in
// layer order and they meet at one owner. Lookahead: a rank fetches at
// most one cycle ahead of the layer it computes (the paper's "next few
// layers"), so the ranks, whose compute runs in lockstep, start each
// cycle's copies together and peak shifting's guarantee holds. With the
// default 2(N−1) slots (the cycle being computed and the next) the
// copies never wait for a slot; with N−1, a rank can only fetch as fast
// as it consumes, in an order that differs by rank, the ranks' copy
// streams drift apart by a layer and meet at owners again (measured:
// iterations up to 2× slower; see TestWaSSlots). Copies run across
// iteration boundaries: the state carries from one iteration into the
// next (the housekeeper does not know where an iteration ends) and is
// reset by a switch to CaS or FSDP.
type wasGroup struct {
	n, layers, slots int
	ranks            []wasRank
	readers          []int     // by owner: copies in flight from it
	rate             []float64 // by rank: its copy's bytes per second, scratch
}

// wasRank is one rank's housekeeper and compute position.
type wasRank struct {
	order   []int // fetch order of the layers it does not own, one iteration
	pos     []int // pos[l]: l's index in order; −1 for its own layers
	issued  int   // copies started since the reset
	fetched int   // copies landed since the reset (copies land in issue order)
	left    float64
	inUse   int // slots reserved
	iter    int // iterations since the reset

	unit    int // 2l: attention of layer l; 2l+1: its FFN; 2·layers: done
	rem     float64
	waiting bool
	done    float64
	stall   float64
}

func (g *wasGroup) init(s SiDP, layers int) {
	g.n, g.layers, g.slots = s.Replicas, layers, s.Slots
	g.ranks = make([]wasRank, g.n)
	g.readers = make([]int, g.n)
	g.rate = make([]float64, g.n)
	for r := range g.ranks {
		k := &g.ranks[r]
		k.pos = make([]int, layers)
		for c := 0; c < layers; c += g.n {
			size := min(g.n, layers-c)
			for j := 0; j < size; j++ {
				off := j
				if !s.NoPeakShift {
					off = (r + 1 + j) % size
				}
				if l := c + off; s.Owner(l) != r {
					k.order = append(k.order, l)
				}
			}
		}
		for l := range k.pos {
			k.pos[l] = -1
		}
		for i, l := range k.order {
			k.pos[l] = i
		}
	}
	g.reset()
}

// reset empties every slot and forgets copies in flight.
func (g *wasGroup) reset() {
	for r := range g.ranks {
		k := &g.ranks[r]
		k.issued, k.fetched, k.left, k.inUse, k.iter = 0, 0, 0, 0, 0
	}
	clear(g.readers)
}

// owner is the owner of rank k's copy in flight.
func (g *wasGroup) owner(k *wasRank) int {
	return k.order[(k.issued-1)%len(k.order)] % g.n
}

// ready reports whether rank k can run layer l's FFN this iteration.
func (k *wasRank) ready(l int) bool {
	p := k.pos[l]
	return p < 0 || k.iter*len(k.order)+p < k.fetched
}

// iteration runs one lockstep iteration with sc.reps's compute, then the
// engine's overhead (copies go on during it), and returns its length and
// the slowest rank's stall; in[r] gets the bytes rank r's copies moved.
func (g *wasGroup) iteration(sc *SiDPCost, overhead float64, in []int64) (seconds, stall float64) {
	for r := range g.ranks {
		k := &g.ranks[r]
		k.unit, k.rem, k.waiting, k.done, k.stall = 0, sc.reps[r].attn, false, 0, 0
	}
	now, end := 0.0, -1.0 // end: known once every rank is done
	for {
		g.issue(sc.layer)
		if end < 0 && g.allDone() {
			end = g.finish() + overhead
		}
		dt := math.Inf(1)
		if end >= 0 {
			dt = end - now
		}
		for r := range g.ranks {
			k := &g.ranks[r]
			if k.unit < 2*g.layers && !k.waiting {
				dt = min(dt, k.rem)
			}
			if k.issued > k.fetched {
				dt = min(dt, k.left/(sc.bw/float64(g.readers[g.owner(k)])))
			}
		}
		if math.IsInf(dt, 1) { // nothing computes and nothing copies: impossible with Slots ≥ 1
			break
		}
		now += dt
		for r := range g.ranks { // rates before any copy lands
			if k := &g.ranks[r]; k.issued > k.fetched {
				g.rate[r] = sc.bw / float64(g.readers[g.owner(k)])
			}
		}
		for r := range g.ranks {
			k := &g.ranks[r]
			if k.issued > k.fetched {
				moved := min(dt*g.rate[r], k.left)
				in[r] += int64(math.Round(moved))
				k.left -= moved
				if k.left <= sc.layer*1e-12 {
					g.readers[g.owner(k)]--
					k.fetched++
					k.left = 0
				}
			}
		}
		for r := range g.ranks {
			k := &g.ranks[r]
			if k.unit >= 2*g.layers {
				continue
			}
			if k.waiting {
				k.stall += dt
				if k.ready(k.unit / 2) {
					k.waiting = false
				}
				continue
			}
			k.rem -= dt
			for k.rem <= 1e-15 && k.unit < 2*g.layers {
				l := k.unit / 2
				if k.unit%2 == 1 {
					if k.pos[l] >= 0 {
						k.inUse--
					}
				}
				k.unit++
				if k.unit == 2*g.layers {
					k.done = now
					break
				}
				w := &sc.reps[r]
				if k.unit%2 == 0 {
					k.rem = w.attn
				} else {
					k.rem = w.ffn
					k.waiting = !k.ready(k.unit / 2)
					if k.waiting {
						break
					}
				}
			}
		}
		if end >= 0 && now >= end {
			break
		}
	}
	for r := range g.ranks {
		k := &g.ranks[r]
		stall = max(stall, k.stall)
		k.iter++
	}
	return end, stall
}

// allDone reports whether every rank has run all its layers.
func (g *wasGroup) allDone() bool {
	for r := range g.ranks {
		if g.ranks[r].unit < 2*g.layers {
			return false
		}
	}
	return true
}

// finish is when the last rank finished its layers.
func (g *wasGroup) finish() float64 {
	t := 0.0
	for r := range g.ranks {
		t = max(t, g.ranks[r].done)
	}
	return t
}

// issue starts a copy on every idle copy stream with a free slot whose
// next layer is at most one cycle ahead of the rank's compute.
func (g *wasGroup) issue(bytes float64) {
	cycles := (g.layers + g.n - 1) / g.n
	for r := range g.ranks {
		k := &g.ranks[r]
		if k.issued > k.fetched || k.inUse >= g.slots {
			continue
		}
		it, l := k.issued/len(k.order), k.order[k.issued%len(k.order)]
		at := k.iter*cycles + min(k.unit/2, g.layers-1)/g.n
		if it*cycles+l/g.n > at+1 {
			continue
		}
		k.issued++
		k.inUse++
		k.left = bytes
		g.readers[g.owner(k)]++
	}
}
