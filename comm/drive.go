package comm

import "fmt"

// Op is one collective that a driver runs on behalf of every member of a
// group at once (Group.Drive). An executor that holds all the members'
// buffers — ranks sharing one GPU, stepped together — moves the data
// itself (device copies and a reduction kernel); comm validates the
// operation against the group and counts each member's bytes with the
// same formulas as when the member calls the collective on its Comm.
type Op struct {
	Kind Kind // KindAllReduce, KindAllGather, KindAllToAll, KindSend (a send and its matching receive) or KindRead (member To reads From's memory; From takes no part)
	// Elems is every member's buffer for KindAllReduce, every chunk
	// (member i to member j) for KindAllToAll, the message for KindSend.
	Elems int
	// Counts is each member's contribution for KindAllGather.
	Counts []int
	// From and To are the sending and receiving members of a KindSend,
	// the owner and the reader of a KindRead.
	From, To int
	// ElemBytes is the size of one element on the wire; 0 means the
	// World's Options.ElemBytes.
	ElemBytes int
}

// Drive runs op for every member of g: move does the data movement, and
// when it succeeds each member's traffic is counted as if it had called
// the collective itself (for KindSend, the sender's Send and the
// receiver's Recv; for KindRead, the owner's bytes read and the reader's).
// Drives of KindSend and KindRead may run concurrently from several
// goroutines. It fails, counting nothing, when the World is
// aborted, when op does not fit the group, or when move fails, which
// aborts the World as a failed collective does. Every member must be
// hosted in this process.
func (g *Group) Drive(op Op, move func() error) error {
	w := g.comms[0].w
	if err := w.Err(); err != nil {
		return &Error{Op: op.Kind, Group: g.label, Cause: err}
	}
	if err := g.checkOp(op); err != nil {
		w.Abort(err)
		return &Error{Op: op.Kind, Group: g.label, Cause: err}
	}
	if err := move(); err != nil {
		w.Abort(err)
		return &Error{Op: op.Kind, Group: g.label, Cause: err}
	}
	eb := op.ElemBytes
	if eb == 0 {
		eb = w.elemBytes
	}
	p := len(g.ranks)
	switch op.Kind {
	case KindAllReduce:
		for m, c := range g.comms {
			sent, recv := AllReduceBytes(op.Elems, p, m, eb)
			c.traffic.add(op.Kind, sent, recv)
		}
	case KindAllGather:
		for m, c := range g.comms {
			sent, recv := AllGatherBytes(op.Counts, m, eb)
			c.traffic.add(op.Kind, sent, recv)
		}
	case KindAllToAll:
		counts := make([]int, p)
		for i := range counts {
			counts[i] = op.Elems
		}
		for m, c := range g.comms {
			sent, recv := AllToAllBytes(counts, counts, m, eb)
			c.traffic.add(op.Kind, sent, recv)
		}
	case KindSend:
		n := int64(op.Elems) * int64(eb)
		g.comms[op.From].traffic.add(KindSend, n, 0)
		g.comms[op.To].traffic.add(KindRecv, 0, n)
	case KindRead:
		n := int64(op.Elems) * int64(eb)
		g.comms[op.From].traffic.add(KindRead, n, 0)
		g.comms[op.To].traffic.add(KindRead, 0, n)
	}
	return nil
}

// checkOp validates a driven collective against the group.
func (g *Group) checkOp(op Op) error {
	p := len(g.ranks)
	for m, c := range g.comms {
		if c == nil {
			return fmt.Errorf("%w: member %d of group %s is not hosted here; a driven collective needs every member", ErrInvalid, m, g.label)
		}
	}
	switch op.Kind {
	case KindAllReduce, KindAllToAll:
		if op.Elems < 0 {
			return fmt.Errorf("%w: %s of %d elements", ErrInvalid, op.Kind, op.Elems)
		}
	case KindAllGather:
		if len(op.Counts) != p {
			return fmt.Errorf("%w: all_gather with %d counts in a group of %d", ErrInvalid, len(op.Counts), p)
		}
		for _, n := range op.Counts {
			if n < 0 {
				return fmt.Errorf("%w: all_gather count %d", ErrInvalid, n)
			}
		}
	case KindSend, KindRead:
		if op.From < 0 || op.From >= p || op.To < 0 || op.To >= p || op.From == op.To || op.Elems < 0 {
			return fmt.Errorf("%w: send of %d elements from member %d to %d in a group of %d", ErrInvalid, op.Elems, op.From, op.To, p)
		}
	default:
		return fmt.Errorf("%w: %s cannot be driven", ErrInvalid, op.Kind)
	}
	if op.ElemBytes < 0 {
		return fmt.Errorf("%w: element size %d bytes", ErrInvalid, op.ElemBytes)
	}
	return nil
}
