package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// The in-process transport: the members of a group are goroutines sharing
// memory, so an operation moves data straight from the peers' buffers with
// no intermediate copy. Each group has one rendezvous: every member
// publishes its arguments in its slot and arrives at the entry barrier;
// when all have arrived each member reads what it needs from its peers'
// slots and buffers, then all meet at an exit barrier, after which no
// member touches another's buffers and each may reuse its own.
//
// Only the entry barrier can wait indefinitely (for a member still busy
// elsewhere), so only it watches ctx and the abort channel. Past it every
// member is inside the same operation and reaches the next barrier after a
// bounded amount of copying, so later barriers wait unconditionally, which
// also guarantees that no member returns while a peer still reads its
// buffers. Decisions taken past the entry barrier (argument mismatches)
// depend only on what every member published, so all members take the
// same one.
//
// Send and Recv meet on an unbuffered channel per ordered pair of members:
// the sender hands over its slice, the receiver copies from it and answers
// on a second channel, and only then does the sender return.

// errAborted is what a local endpoint returns once its World is aborted;
// Comm replaces it with the abort's cause.
var errAborted = errors.New("comm: aborted")

// blockLen is the number of elements reduced at a time through a member's
// scratch block (16 KiB): large enough to amortise loop overhead, small
// enough to stay in L1/L2 together with one block of each peer.
const blockLen = 4096

// smallAllReduce is the largest all-reduce, in elements times (members−1),
// for which every member reduces the whole buffer itself (one barrier
// fewer) instead of reducing one chunk and gathering the others. Measured
// on 2 cores for P = 2, 4, 8: the saved barrier stops paying for the
// P-fold reduction work beyond a few hundred element-additions.
const smallAllReduce = 256

type local struct {
	abort chan struct{}
	once  sync.Once
}

func newLocal() *local { return &local{abort: make(chan struct{})} }

func (t *local) Abort() { t.once.Do(func() { close(t.abort) }) }

func (t *local) NewGroup(ranks []int) ([]Endpoint, error) {
	p := len(ranks)
	r := &rendezvous{n: p, abort: t.abort, slots: make([]slot, p), pairs: make([]pair, p*p)}
	for i := range r.slots {
		s := &r.slots[i]
		s.wake = make(chan struct{}, 1)
		s.displ = make([]int, p)
	}
	eps := make([]Endpoint, p)
	for i := range eps {
		eps[i] = &endpoint{r: r, me: i, s: &r.slots[i]}
	}
	return eps, nil
}

// rendezvous is the shared state of one group.
type rendezvous struct {
	n     int
	abort <-chan struct{}
	slots []slot // by member
	pairs []pair // by from·n + to

	mu      sync.Mutex // guards arrived, gen and the creation of pairs
	arrived int
	gen     uint64 // completed barriers
}

// pair returns the channel pair from member from to member to, creating it
// on first use: a group of P members needs up to P·(P−1) of them, and most
// groups only run collectives.
func (r *rendezvous) pair(from, to int) *pair {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := &r.pairs[from*r.n+to]
	if p.data == nil {
		*p = pair{data: make(chan []float32), done: make(chan error, 1)}
	}
	return p
}

// slot is what one member publishes for the current operation. The owner
// writes it before the entry barrier; peers read it between the entry and
// the exit barrier.
type slot struct {
	op     Kind
	a      []float32 // buf or send
	ca, cb []int     // counts of a (send counts); receive counts
	root   int
	displ  []int         // AllToAllV: offset in a of the chunk for each member
	tmp    []float32     // reduction block, private to the owner, made on first use
	wake   chan struct{} // one token per completed barrier the owner waits on
	_      [64]byte      // keeps neighbouring slots off each other's cache lines
}

// pair is the point-to-point channel from one member to another.
type pair struct {
	data chan []float32
	done chan error
}

type endpoint struct {
	r  *rendezvous
	me int
	s  *slot
}

// arrive counts the caller at the current barrier and reports whether it
// was the last, in which case it has released the others. r.mu is held.
func (r *rendezvous) arrive(me int) bool {
	r.arrived++
	if r.arrived < r.n {
		return false
	}
	r.arrived = 0
	r.gen++
	for i := range r.slots {
		if i != me {
			r.slots[i].wake <- struct{}{}
		}
	}
	return true
}

// enter is the entry barrier: it returns nil once every member has
// arrived, or an error if ctx is cancelled or the transport aborted first.
func (e *endpoint) enter(ctx context.Context) error {
	r := e.r
	r.mu.Lock()
	select {
	case <-r.abort:
		r.mu.Unlock()
		return errAborted
	default:
	}
	if err := ctx.Err(); err != nil {
		r.mu.Unlock()
		return err
	}
	gen := r.gen
	last := r.arrive(e.me)
	r.mu.Unlock()
	if last {
		return nil
	}
	select {
	case <-e.s.wake:
		return nil
	case <-ctx.Done():
		return e.withdraw(gen, ctx.Err())
	case <-r.abort:
		return e.withdraw(gen, errAborted)
	}
}

// withdraw leaves the entry barrier of generation gen with err, unless the
// barrier completed meanwhile: then the peers are already reading this
// member's slot and it must take part in the operation.
func (e *endpoint) withdraw(gen uint64, err error) error {
	r := e.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != gen {
		<-e.s.wake
		return nil
	}
	r.arrived--
	return err
}

// sync is a barrier inside an operation that every member has entered.
func (e *endpoint) sync() {
	r := e.r
	r.mu.Lock()
	last := r.arrive(e.me)
	r.mu.Unlock()
	if !last {
		<-e.s.wake
	}
}

// scratch makes sure the caller's reduction block exists.
func (e *endpoint) scratch() {
	if e.s.tmp == nil {
		e.s.tmp = make([]float32, blockLen)
	}
}

// agree checks that every member published the same operation with
// matching arguments. It reads only published slots, so every member
// reaches the same verdict.
func (r *rendezvous) agree() error {
	s0 := &r.slots[0]
	for i := 1; i < r.n; i++ {
		s := &r.slots[i]
		if s.op != s0.op {
			return fmt.Errorf("%w: member 0 called %s, member %d called %s", ErrInvalid, s0.op, i, s.op)
		}
		switch s0.op {
		case KindAllReduce, KindReduceScatter:
			if len(s.a) != len(s0.a) {
				return fmt.Errorf("%w: %s of %d elements at member 0, %d at member %d", ErrInvalid, s0.op, len(s0.a), len(s.a), i)
			}
			if s0.op == KindReduceScatter { // counts nil, or ReduceScatterV's
				if err := sameCounts(s0.op, s0.ca, s.ca, i); err != nil {
					return err
				}
			}
		case KindBroadcast:
			if len(s.a) != len(s0.a) || s.root != s0.root {
				return fmt.Errorf("%w: broadcast of %d elements from root %d at member 0, %d from root %d at member %d",
					ErrInvalid, len(s0.a), s0.root, len(s.a), s.root, i)
			}
		case KindAllGather:
			for j, c := range s.ca {
				if c != s0.ca[j] {
					return fmt.Errorf("%w: all_gather counts[%d] = %d at member 0, %d at member %d", ErrInvalid, j, s0.ca[j], c, i)
				}
			}
		}
	}
	if s0.op == KindAllToAll {
		for i := range r.slots {
			for j := range r.slots {
				if got, want := r.slots[i].cb[j], r.slots[j].ca[i]; got != want {
					return fmt.Errorf("%w: all_to_all: member %d expects %d elements from member %d, which sends %d",
						ErrInvalid, i, got, j, want)
				}
			}
		}
	}
	return nil
}

// start runs once the caller has published its slot: it waits at the
// entry barrier and checks that the members agree; on disagreement it
// leaves through the exit barrier so that no member returns while another
// still reads the slots.
func (e *endpoint) start(ctx context.Context) error {
	if err := e.enter(ctx); err != nil {
		return err
	}
	if err := e.r.agree(); err != nil {
		e.sync()
		return err
	}
	return nil
}

func (e *endpoint) AllReduce(ctx context.Context, buf []float32) error {
	s := e.s
	s.op, s.a = KindAllReduce, buf
	if err := e.start(ctx); err != nil {
		return err
	}
	r, n := e.r, len(buf)
	if r.n == 1 {
		return nil
	}
	if n == 0 {
		e.sync() // peers may still be reading this slot in agree
		return nil
	}
	e.scratch()
	if n*(r.n-1) <= smallAllReduce && n <= blockLen {
		// Every member sums the whole buffer; after the barrier nobody
		// reads buf any more, so each writes its own.
		sum := s.tmp[:n]
		sumMembers(sum, r.slots, 0)
		e.sync()
		copy(buf, sum)
		return nil
	}
	// Member i reduces chunk i into its own buf (only it reads chunk i of
	// its buf in this phase), then copies every other reduced chunk from
	// the member that owns it.
	lo, hi := e.me*n/r.n, (e.me+1)*n/r.n
	sumMembersBlocked(buf[lo:hi], s.tmp, r.slots, lo)
	e.sync()
	for j := range r.slots {
		if j != e.me {
			lo, hi := j*n/r.n, (j+1)*n/r.n
			copy(buf[lo:hi], r.slots[j].a[lo:hi])
		}
	}
	e.sync()
	return nil
}

func (e *endpoint) ReduceScatter(ctx context.Context, send, recv []float32) error {
	s := e.s
	s.op, s.a, s.ca = KindReduceScatter, send, nil
	if err := e.start(ctx); err != nil {
		return err
	}
	e.scratch()
	sumMembersBlocked(recv, s.tmp, e.r.slots, e.me*len(recv))
	e.sync()
	return nil
}

func (e *endpoint) AllGatherV(ctx context.Context, send, recv []float32, counts []int) error {
	s := e.s
	s.op, s.a, s.ca = KindAllGather, send, counts
	if err := e.start(ctx); err != nil {
		return err
	}
	off := 0
	for j, c := range counts {
		src := e.r.slots[j].a
		if !(j == e.me && c > 0 && &recv[off] == &src[0]) { // in place: already there
			copy(recv[off:off+c], src)
		}
		off += c
	}
	e.sync()
	return nil
}

func (e *endpoint) AllToAllV(ctx context.Context, send []float32, sendCounts []int, recv []float32, recvCounts []int) error {
	s := e.s
	s.op, s.a, s.ca, s.cb = KindAllToAll, send, sendCounts, recvCounts
	off := 0
	for j, c := range sendCounts {
		s.displ[j] = off
		off += c
	}
	if err := e.start(ctx); err != nil {
		return err
	}
	off = 0
	for j, c := range recvCounts {
		peer := &e.r.slots[j]
		from := peer.displ[e.me]
		copy(recv[off:off+c], peer.a[from:from+c])
		off += c
	}
	e.sync()
	return nil
}

func (e *endpoint) Broadcast(ctx context.Context, buf []float32, root int) error {
	s := e.s
	s.op, s.a, s.root = KindBroadcast, buf, root
	if err := e.start(ctx); err != nil {
		return err
	}
	if e.me != root {
		copy(buf, e.r.slots[root].a)
	}
	e.sync()
	return nil
}

func (e *endpoint) Barrier(ctx context.Context) error {
	e.s.op = KindBarrier
	if err := e.start(ctx); err != nil {
		return err
	}
	e.sync() // peers may still be reading this slot in agree
	return nil
}

func (e *endpoint) Send(ctx context.Context, buf []float32, to int) error {
	r := e.r
	if err := r.ready(ctx); err != nil {
		return err
	}
	p := r.pair(e.me, to)
	select {
	case p.data <- buf:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.abort:
		return errAborted
	}
	return <-p.done // the receiver answers as soon as it has copied
}

func (e *endpoint) Recv(ctx context.Context, buf []float32, from int) error {
	r := e.r
	if err := r.ready(ctx); err != nil {
		return err
	}
	p := r.pair(from, e.me)
	select {
	case src := <-p.data:
		if len(src) != len(buf) {
			err := fmt.Errorf("%w: member %d sends %d elements to member %d, which receives %d", ErrInvalid, from, len(src), e.me, len(buf))
			p.done <- err
			return err
		}
		copy(buf, src)
		p.done <- nil
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-r.abort:
		return errAborted
	}
}

// ready reports an abort or a cancelled ctx before a point-to-point call
// starts, so that neither is ignored when a peer is also ready.
func (r *rendezvous) ready(ctx context.Context) error {
	select {
	case <-r.abort:
		return errAborted
	default:
	}
	return ctx.Err()
}

// sumMembers sets dst[k] to the sum over members j = 0, 1, … of
// slots[j].a[off+k], added in member order. dst must not overlap any
// member's a.
func sumMembers(dst []float32, slots []slot, off int) {
	copy(dst, slots[0].a[off:off+len(dst)])
	for j := 1; j < len(slots); j++ {
		add(dst, slots[j].a[off:off+len(dst)])
	}
}

// sumMembersBlocked is sumMembers for a dst that may be the caller's own
// slice of a: it sums through tmp one block at a time and writes each block
// of dst only after reading it from every member.
func sumMembersBlocked(dst, tmp []float32, slots []slot, off int) {
	for lo := 0; lo < len(dst); lo += len(tmp) {
		t := tmp[:min(len(tmp), len(dst)-lo)]
		sumMembers(t, slots, off+lo)
		copy(dst[lo:], t)
	}
}

// add sets dst[i] += src[i] for i < len(dst).
func add(dst, src []float32) {
	src = src[:len(dst)]
	for len(dst) >= 8 {
		d, s := dst[:8:8], src[:8:8]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
		d[4] += s[4]
		d[5] += s[5]
		d[6] += s[6]
		d[7] += s[7]
		dst, src = dst[8:], src[8:]
	}
	for i := range dst {
		dst[i] += src[i]
	}
}
