package comm

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
)

// mpiTransport is the Transport of one World over an MPI job (see mpi.go).
type mpiTransport struct {
	m     *MPI
	world *World // set right after New; its Err is the cause sent to peers

	mu   sync.Mutex
	tags map[int32]string // group tag → label and members, to refuse collisions
}

// NewGroup opens a group whose label is only its members; World uses
// NewNamedGroup.
func (t *mpiTransport) NewGroup(ranks []int) ([]Endpoint, error) {
	return t.NewNamedGroup("", ranks)
}

// NewNamedGroup opens the group: no communication, only its tag, hashed
// from the label and members so that every process derives the same one.
// Two groups of this World whose tags collide are refused.
func (t *mpiTransport) NewNamedGroup(label string, ranks []int) ([]Endpoint, error) {
	h := fnv.New32a()
	id := fmt.Sprintf("%s%v", label, ranks)
	h.Write([]byte(id))
	tag := int32(mpiTagGroups + h.Sum32()%(1<<mpiTagBits))
	t.mu.Lock()
	if other, ok := t.tags[tag]; ok && other != id {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: groups %s and %s hash to the same MPI tag %d; rename one", ErrInvalid, other, id, tag)
	}
	t.tags[tag] = id
	t.mu.Unlock()
	eps := make([]Endpoint, len(ranks))
	for i, r := range ranks {
		if r == t.m.rank {
			eps[i] = &mpiEndpoint{t: t, ranks: ranks, me: i, tag: tag, what: id}
		}
	}
	return eps, nil
}

// Abort aborts the MPI job's transport with the World's cause.
func (t *mpiTransport) Abort() {
	var cause error
	if t.world != nil {
		cause = t.world.Err()
	}
	t.m.Abort(cause)
}

// mpiEndpoint is this process's member of one group.
type mpiEndpoint struct {
	t     *mpiTransport
	ranks []int // member → world (MPI) rank
	me    int
	tag   int32
	what  string    // label and members, for errors
	tmp   []float32 // received chunks to reduce: [members, chunk]
	sum   []float32 // the reduced chunk
}

func (e *mpiEndpoint) newOp() *mpiOp { return &mpiOp{} }

func (e *mpiEndpoint) send(op *mpiOp, to int, f []float32) {
	op.sends = append(op.sends, mpiMsg{peer: e.ranks[to], tag: e.tag, f: f})
}

func (e *mpiEndpoint) recv(op *mpiOp, from int, f []float32) {
	op.recvs = append(op.recvs, mpiMsg{peer: e.ranks[from], tag: e.tag, f: f})
}

// run posts op and waits for it within the transport's timeout.
func (e *mpiEndpoint) run(ctx context.Context, op *mpiOp, kind Kind) error {
	return e.t.m.wait(ctx, op, e.t.m.timeout, func() string { return fmt.Sprintf("%s in group %s", kind, e.what) })
}

// reduceChunks sends chunk j of src (chunk bounds from lo) to member j
// and sums, in member order, every member's chunk e.me into e.sum.
func (e *mpiEndpoint) reduceChunks(ctx context.Context, src []float32, lo func(j int) int, kind Kind) ([]float32, error) {
	p := len(e.ranks)
	mlo, mhi := lo(e.me), lo(e.me+1)
	n := mhi - mlo
	if cap(e.tmp) < p*n {
		e.tmp = make([]float32, p*n)
	}
	if cap(e.sum) < n {
		e.sum = make([]float32, n)
	}
	tmp, sum := e.tmp[:p*n], e.sum[:n]
	op := e.newOp()
	for j := range p {
		if j != e.me {
			e.recv(op, j, tmp[j*n:(j+1)*n])
			e.send(op, j, src[lo(j):lo(j+1)])
		}
	}
	if err := e.run(ctx, op, kind); err != nil {
		return nil, err
	}
	part := func(j int) []float32 {
		if j == e.me {
			return src[mlo:mhi]
		}
		return tmp[j*n : (j+1)*n]
	}
	copy(sum, part(0))
	for j := 1; j < p; j++ {
		add(sum, part(j))
	}
	return sum, nil
}

func (e *mpiEndpoint) AllReduce(ctx context.Context, buf []float32) error {
	p, n := len(e.ranks), len(buf)
	if p == 1 {
		return nil
	}
	lo := func(j int) int { return j * n / p }
	sum, err := e.reduceChunks(ctx, buf, lo, KindAllReduce)
	if err != nil {
		return err
	}
	copy(buf[lo(e.me):lo(e.me+1)], sum)
	op := e.newOp()
	for j := range p {
		if j != e.me {
			e.recv(op, j, buf[lo(j):lo(j+1)])
			e.send(op, j, buf[lo(e.me):lo(e.me+1)])
		}
	}
	return e.run(ctx, op, KindAllReduce)
}

func (e *mpiEndpoint) ReduceScatter(ctx context.Context, send, recv []float32) error {
	n := len(recv)
	sum, err := e.reduceChunks(ctx, send, func(j int) int { return j * n }, KindReduceScatter)
	if err != nil {
		return err
	}
	copy(recv, sum)
	return nil
}

func (e *mpiEndpoint) AllGatherV(ctx context.Context, send, recv []float32, counts []int) error {
	op := e.newOp()
	off := 0
	for j, c := range counts {
		if j == e.me {
			if c > 0 && &recv[off] != &send[0] {
				copy(recv[off:off+c], send)
			}
		} else {
			e.recv(op, j, recv[off:off+c])
			e.send(op, j, send)
		}
		off += c
	}
	return e.run(ctx, op, KindAllGather)
}

func (e *mpiEndpoint) AllToAllV(ctx context.Context, send []float32, sendCounts []int, recv []float32, recvCounts []int) error {
	op := e.newOp()
	soff, roff := 0, 0
	for j := range sendCounts {
		s, r := send[soff:soff+sendCounts[j]], recv[roff:roff+recvCounts[j]]
		if j == e.me {
			if len(s) != len(r) {
				return fmt.Errorf("%w: all_to_all: member %d sends itself %d elements and expects %d", ErrInvalid, j, len(s), len(r))
			}
			copy(r, s)
		} else {
			e.recv(op, j, r)
			e.send(op, j, s)
		}
		soff += sendCounts[j]
		roff += recvCounts[j]
	}
	return e.run(ctx, op, KindAllToAll)
}

func (e *mpiEndpoint) Broadcast(ctx context.Context, buf []float32, root int) error {
	op := e.newOp()
	if e.me == root {
		for j := range e.ranks {
			if j != root {
				e.send(op, j, buf)
			}
		}
	} else {
		e.recv(op, root, buf)
	}
	return e.run(ctx, op, KindBroadcast)
}

func (e *mpiEndpoint) Barrier(ctx context.Context) error {
	op := e.newOp()
	for j := range e.ranks {
		if j != e.me {
			e.recv(op, j, nil)
			e.send(op, j, nil)
		}
	}
	return e.run(ctx, op, KindBarrier)
}

func (e *mpiEndpoint) Send(ctx context.Context, buf []float32, to int) error {
	op := e.newOp()
	e.send(op, to, buf)
	return e.run(ctx, op, KindSend)
}

func (e *mpiEndpoint) Recv(ctx context.Context, buf []float32, from int) error {
	op := e.newOp()
	e.recv(op, from, buf)
	return e.run(ctx, op, KindRecv)
}
