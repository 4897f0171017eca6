package comm

import (
	"context"
	"fmt"
)

// ReduceScatterV is ReduceScatter with unequal chunks: the sum of every
// member's send (len(send) == sum(counts), the same on every member) is
// split into chunks of counts[j] elements, in member order, and chunk
// Rank lands in recv (len(recv) == counts[Rank]). The sum is taken in
// member order, as AllReduce's. Every member passes the same counts. recv
// must not overlap send. A transport whose Endpoint lacks ReduceScatterV
// (Endpoint does not require it) runs it as an AllToAllV of the chunks
// and a member-order sum, with the same result and byte count.
func (c *Comm) ReduceScatterV(ctx context.Context, send, recv []float32, counts []int) error {
	const k = KindReduceScatter
	if err := c.begin(k); err != nil {
		return err
	}
	err := c.checkCounts("counts", counts, len(send))
	if err == nil && counts[c.rank] != len(recv) {
		err = fmt.Errorf("%w: len(recv) = %d, counts[%d] = %d", ErrInvalid, len(recv), c.rank, counts[c.rank])
	}
	if err == nil {
		if v, ok := c.ep.(reduceScatterVEndpoint); ok {
			err = v.ReduceScatterV(ctx, send, recv, counts)
		} else {
			err = reduceScatterVByAllToAll(ctx, c.ep, send, recv, counts, c.rank)
		}
	}
	c.busy.Store(false)
	if err != nil {
		return c.fail(k, err)
	}
	sent, rcvd := ReduceScatterVBytes(counts, c.rank, c.w.elemBytes)
	c.traffic.add(k, sent, rcvd)
	return nil
}

// ReduceScatterVBytes is the ring reduce-scatter in which member j ends
// with the counts[j] reduced elements of chunk j: member r sends the
// partial sums of every chunk but its own (r−1, r−2, …, r−P+1) and
// receives those of every chunk but r−1's, so over all members each
// direction moves (P−1)·sum(counts) elements. With equal counts it is
// ReduceScatterBytes.
func ReduceScatterVBytes(counts []int, member, elemBytes int) (sent, recv int64) {
	p := len(counts)
	if p <= 1 {
		return 0, 0
	}
	return ringBytes(counts, member, (member+p-1)%p, elemBytes)
}

// reduceScatterVEndpoint is the optional Endpoint method behind
// Comm.ReduceScatterV (the in-process transport has it). The calling Comm
// guarantees len(send) == sum(counts) and len(recv) == counts[self].
type reduceScatterVEndpoint interface {
	ReduceScatterV(ctx context.Context, send, recv []float32, counts []int) error
}

// reduceScatterVByAllToAll is ReduceScatterV on a transport without it:
// each member's chunk j goes to member j (AllToAllV), which adds the P
// chunks it receives in member order.
func reduceScatterVByAllToAll(ctx context.Context, ep Endpoint, send, recv []float32, counts []int, me int) error {
	p, m := len(counts), counts[me]
	in := make([]float32, p*m)
	rc := make([]int, p)
	for i := range rc {
		rc[i] = m
	}
	if err := ep.AllToAllV(ctx, send, counts, in, rc); err != nil {
		return err
	}
	copy(recv, in[:m])
	for i := 1; i < p; i++ {
		add(recv, in[i*m:(i+1)*m])
	}
	return nil
}

func (e *endpoint) ReduceScatterV(ctx context.Context, send, recv []float32, counts []int) error {
	s := e.s
	s.op, s.a, s.ca = KindReduceScatter, send, counts
	if err := e.start(ctx); err != nil {
		return err
	}
	off := 0
	for j := range e.me {
		off += counts[j]
	}
	sumMembers(recv, e.r.slots, off)
	e.sync()
	return nil
}

// sameCounts checks that member i published the counts member 0 did
// (both nil for the operations without counts).
func sameCounts(op Kind, c0, ci []int, i int) error {
	if len(c0) != len(ci) {
		return fmt.Errorf("%w: %s with %d counts at member 0, %d at member %d", ErrInvalid, op, len(c0), len(ci), i)
	}
	for j, c := range ci {
		if c != c0[j] {
			return fmt.Errorf("%w: %s counts[%d] = %d at member 0, %d at member %d", ErrInvalid, op, j, c0[j], c, i)
		}
	}
	return nil
}
