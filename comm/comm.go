package comm

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// Comm is one rank's handle on one group. Every member of the group calls
// the same operations in the same order with matching arguments; member
// indices (Rank, root, to, from) are indices within the group. Buffers hold
// float32 elements and lengths are in elements.
//
// A Comm is used by one goroutine at a time (its rank); different Comms,
// also of the same rank, may be used concurrently. Each operation blocks
// until this rank's part is done, after which its buffers may be reused.
// ctx is honoured while waiting for peers to arrive; once every member has
// entered an operation it completes, which takes bounded time.
//
// Any failure — invalid arguments, members that disagree, a cancelled ctx,
// a concurrent use of the Comm, or an Abort from any rank — aborts the
// whole World, and every rank's pending and later operations return an
// *Error wrapping ErrAborted and the first cause. Successful operations
// count their bytes (see volume.go); failed ones count nothing.
type Comm struct {
	w       *World
	g       *Group
	ep      Endpoint
	rank    int         // member index
	busy    atomic.Bool // an operation is running on this handle
	eq      []int       // scratch: equal counts for AllGather and AllToAll
	traffic counters
}

// Error is the error of every failed Comm operation. It wraps ErrAborted and
// Cause.
type Error struct {
	Op    Kind   // the operation that failed
	Group string // its group's label
	Rank  int    // the caller's world rank
	Cause error  // the World's abort cause
}

func (e *Error) Error() string {
	return fmt.Sprintf("comm: %s in group %q at rank %d: world aborted: %v", e.Op, e.Group, e.Rank, e.Cause)
}

// Unwrap returns ErrAborted and the cause.
func (e *Error) Unwrap() []error { return []error{ErrAborted, e.Cause} }

var errBusy = errors.New("comm: Comm used by two goroutines at once")

// Rank returns this rank's member index in the group.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of members of the group.
func (c *Comm) Size() int { return len(c.g.ranks) }

// WorldRank returns this rank's index in the World.
func (c *Comm) WorldRank() int { return c.g.ranks[c.rank] }

// Group returns the group this handle belongs to.
func (c *Comm) Group() *Group { return c.g }

// World returns the World of the group.
func (c *Comm) World() *World { return c.w }

// Abort aborts the World; see World.Abort.
func (c *Comm) Abort(err error) { c.w.Abort(err) }

// AllReduce replaces buf on every member with the element-wise sum of all
// members' buf. Every member passes the same length. The sum is taken in
// member order 0, 1, …, Size−1 for every element, so the result is
// bit-identical on every member and from run to run.
func (c *Comm) AllReduce(ctx context.Context, buf []float32) error {
	const k = KindAllReduce
	if err := c.begin(k); err != nil {
		return err
	}
	err := c.ep.AllReduce(ctx, buf)
	c.busy.Store(false)
	if err != nil {
		return c.fail(k, err)
	}
	sent, recv := AllReduceBytes(len(buf), c.Size(), c.rank, c.w.elemBytes)
	c.traffic.add(k, sent, recv)
	return nil
}

// AllGather sets recv to the concatenation of every member's send, in
// member order. len(recv) == Size·len(send), the same on every member. send
// may be this member's own chunk of recv; otherwise they must not overlap.
func (c *Comm) AllGather(ctx context.Context, send, recv []float32) error {
	const k = KindAllGather
	if err := c.begin(k); err != nil {
		return err
	}
	var err error
	if len(recv) != len(c.eq)*len(send) {
		err = fmt.Errorf("%w: len(recv) = %d, want %d members × len(send) %d", ErrInvalid, len(recv), len(c.eq), len(send))
	} else {
		for i := range c.eq {
			c.eq[i] = len(send)
		}
		err = c.ep.AllGatherV(ctx, send, recv, c.eq)
	}
	c.busy.Store(false)
	if err != nil {
		return c.fail(k, err)
	}
	sent, rcvd := AllGatherBytes(c.eq, c.rank, c.w.elemBytes)
	c.traffic.add(k, sent, rcvd)
	return nil
}

// AllGatherV is AllGather with unequal contributions: member j contributes
// counts[j] elements, so len(send) == counts[Rank] and len(recv) ==
// sum(counts). Every member passes the same counts.
func (c *Comm) AllGatherV(ctx context.Context, send, recv []float32, counts []int) error {
	const k = KindAllGather
	if err := c.begin(k); err != nil {
		return err
	}
	err := c.checkCounts("counts", counts, len(recv))
	if err == nil && counts[c.rank] != len(send) {
		err = fmt.Errorf("%w: len(send) = %d, counts[%d] = %d", ErrInvalid, len(send), c.rank, counts[c.rank])
	}
	if err == nil {
		err = c.ep.AllGatherV(ctx, send, recv, counts)
	}
	c.busy.Store(false)
	if err != nil {
		return c.fail(k, err)
	}
	sent, rcvd := AllGatherBytes(counts, c.rank, c.w.elemBytes)
	c.traffic.add(k, sent, rcvd)
	return nil
}

// ReduceScatter sums send element-wise over the members (in member order,
// as AllReduce) and leaves chunk Rank of the sum in recv: len(send) ==
// Size·len(recv), the same on every member. recv may be this member's own
// chunk of send; otherwise they must not overlap.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv []float32) error {
	const k = KindReduceScatter
	if err := c.begin(k); err != nil {
		return err
	}
	var err error
	if len(send) != c.Size()*len(recv) {
		err = fmt.Errorf("%w: len(send) = %d, want %d members × len(recv) %d", ErrInvalid, len(send), c.Size(), len(recv))
	} else {
		err = c.ep.ReduceScatter(ctx, send, recv)
	}
	c.busy.Store(false)
	if err != nil {
		return c.fail(k, err)
	}
	sent, rcvd := ReduceScatterBytes(len(recv), c.Size(), c.w.elemBytes)
	c.traffic.add(k, sent, rcvd)
	return nil
}

// AllToAll exchanges equal chunks: send and recv both hold Size chunks of
// len(send)/Size elements; chunk j of send goes to member j, and chunk i of
// recv comes from member i. len(send) == len(recv), a multiple of Size, the
// same on every member. send and recv must not overlap.
func (c *Comm) AllToAll(ctx context.Context, send, recv []float32) error {
	const k = KindAllToAll
	if err := c.begin(k); err != nil {
		return err
	}
	var err error
	p := c.Size()
	if len(send) != len(recv) || len(send)%p != 0 {
		err = fmt.Errorf("%w: len(send) = %d, len(recv) = %d, want equal multiples of %d members", ErrInvalid, len(send), len(recv), p)
	} else {
		for i := range c.eq {
			c.eq[i] = len(send) / p
		}
		err = c.ep.AllToAllV(ctx, send, c.eq, recv, c.eq)
	}
	c.busy.Store(false)
	if err != nil {
		return c.fail(k, err)
	}
	sent, rcvd := AllToAllBytes(c.eq, c.eq, c.rank, c.w.elemBytes)
	c.traffic.add(k, sent, rcvd)
	return nil
}

// AllToAllV exchanges chunks of any size: send holds sendCounts[j]
// elements for member j, in member order, and recv receives
// recvCounts[i] elements from member i, in member order. Member i's
// recvCounts[j] must equal member j's sendCounts[i]. send and recv must not
// overlap.
func (c *Comm) AllToAllV(ctx context.Context, send []float32, sendCounts []int, recv []float32, recvCounts []int) error {
	const k = KindAllToAll
	if err := c.begin(k); err != nil {
		return err
	}
	err := c.checkCounts("sendCounts", sendCounts, len(send))
	if err == nil {
		err = c.checkCounts("recvCounts", recvCounts, len(recv))
	}
	if err == nil {
		err = c.ep.AllToAllV(ctx, send, sendCounts, recv, recvCounts)
	}
	c.busy.Store(false)
	if err != nil {
		return c.fail(k, err)
	}
	sent, rcvd := AllToAllBytes(sendCounts, recvCounts, c.rank, c.w.elemBytes)
	c.traffic.add(k, sent, rcvd)
	return nil
}

// Broadcast copies buf of member root into buf of every other member.
// Every member passes the same root and length.
func (c *Comm) Broadcast(ctx context.Context, buf []float32, root int) error {
	const k = KindBroadcast
	if err := c.begin(k); err != nil {
		return err
	}
	var err error
	if root < 0 || root >= c.Size() {
		err = fmt.Errorf("%w: root %d outside group of %d", ErrInvalid, root, c.Size())
	} else {
		err = c.ep.Broadcast(ctx, buf, root)
	}
	c.busy.Store(false)
	if err != nil {
		return c.fail(k, err)
	}
	sent, rcvd := BroadcastBytes(len(buf), c.Size(), c.rank, root, c.w.elemBytes)
	c.traffic.add(k, sent, rcvd)
	return nil
}

// Send copies buf to member to, which calls Recv with a buffer of the same
// length. Send is synchronous: it returns once the receiver has the data,
// so two members that Send to each other at the same time deadlock until
// ctx is cancelled; order such exchanges (e.g. even members send first).
// Sends from one member to another are received in order.
func (c *Comm) Send(ctx context.Context, buf []float32, to int) error {
	const k = KindSend
	if err := c.begin(k); err != nil {
		return err
	}
	err := c.checkPeer("to", to)
	if err == nil {
		err = c.ep.Send(ctx, buf, to)
	}
	c.busy.Store(false)
	if err != nil {
		return c.fail(k, err)
	}
	c.traffic.add(k, int64(len(buf))*int64(c.w.elemBytes), 0)
	return nil
}

// Recv fills buf with the data of the matching Send of member from, which
// must have the same length.
func (c *Comm) Recv(ctx context.Context, buf []float32, from int) error {
	const k = KindRecv
	if err := c.begin(k); err != nil {
		return err
	}
	err := c.checkPeer("from", from)
	if err == nil {
		err = c.ep.Recv(ctx, buf, from)
	}
	c.busy.Store(false)
	if err != nil {
		return c.fail(k, err)
	}
	c.traffic.add(k, 0, int64(len(buf))*int64(c.w.elemBytes))
	return nil
}

// Barrier returns once every member has called it. It moves no bytes.
func (c *Comm) Barrier(ctx context.Context) error {
	const k = KindBarrier
	if err := c.begin(k); err != nil {
		return err
	}
	err := c.ep.Barrier(ctx)
	c.busy.Store(false)
	if err != nil {
		return c.fail(k, err)
	}
	c.traffic.add(k, 0, 0)
	return nil
}

// begin claims the handle for one operation and fails fast on a dead World.
func (c *Comm) begin(k Kind) error {
	if !c.busy.CompareAndSwap(false, true) {
		return c.fail(k, errBusy)
	}
	if c.w.dead.Load() {
		c.busy.Store(false)
		return c.fail(k, nil)
	}
	return nil
}

// fail aborts the World with err (when err is not nil and the World is
// still healthy) and returns the operation's *Error.
func (c *Comm) fail(k Kind, err error) error {
	if err != nil {
		c.w.Abort(fmt.Errorf("rank %d, %s in group %q: %w", c.WorldRank(), k, c.g.label, err))
	}
	return &Error{Op: k, Group: c.g.label, Rank: c.WorldRank(), Cause: c.w.Err()}
}

func (c *Comm) checkCounts(name string, counts []int, total int) error {
	if len(counts) != c.Size() {
		return fmt.Errorf("%w: len(%s) = %d, want %d members", ErrInvalid, name, len(counts), c.Size())
	}
	sum := 0
	for i, n := range counts {
		if n < 0 {
			return fmt.Errorf("%w: %s[%d] = %d", ErrInvalid, name, i, n)
		}
		sum += n
	}
	if sum != total {
		return fmt.Errorf("%w: %s sum to %d, buffer holds %d", ErrInvalid, name, sum, total)
	}
	return nil
}

func (c *Comm) checkPeer(name string, m int) error {
	if m < 0 || m >= c.Size() || m == c.rank {
		return fmt.Errorf("%w: %s = %d, want another member of a group of %d", ErrInvalid, name, m, c.Size())
	}
	return nil
}
