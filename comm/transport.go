package comm

import "context"

// Transport moves data between the members of the groups of one World. It
// is the driver side of this package, as database/sql/driver is for
// database/sql: Comm validates arguments, turns failures into an abort of
// the World and counts bytes; a Transport only moves the data. The
// in-process shared-memory transport is the default; Options.Transport
// selects another, such as the MPI transport (MPI.NewWorld).
type Transport interface {
	// NewGroup opens the group whose members are the given world ranks, in
	// member order, and returns one Endpoint per member, indexed by member
	// (nil for a member this process does not host). The World calls
	// NewGroup once per distinct (label, ranks) pair and never concurrently
	// with itself; ranks holds distinct ranks in [0, world size), is owned
	// by the World and must not be modified.
	NewGroup(ranks []int) ([]Endpoint, error)

	// Abort makes every Endpoint operation, blocked now or started later,
	// return promptly with a non-nil error. The World calls it at most once,
	// after recording the abort's cause. Operations that every member of a
	// group has already entered may complete normally instead.
	Abort()
}

// namedTransport is a Transport that also needs each group's label: the
// MPI transport derives from it the message tag that tells apart, in every
// process alike, groups with the same members.
type namedTransport interface {
	NewNamedGroup(label string, ranks []int) ([]Endpoint, error)
}

// Endpoint is one member's side of a group. Member indices (to, from, root)
// are indices within the group. Counts are in elements.
//
// The calling Comm guarantees that the arguments are consistent for this
// member: len(counts) == group size; counts are non-negative and sum to the
// length of the buffer they describe; counts[self] == len(send) for
// AllGatherV; len(send) == size·len(recv) for ReduceScatter; root, to and
// from are member indices and to, from are not the caller. Slices are valid
// until the call returns. Whether the members of a group agree with each
// other (same operation, same lengths, matching counts) is for the
// transport to check where it can; it returns an error wrapping ErrInvalid
// when they do not. One goroutine at a time uses an Endpoint.
//
// Every method blocks until this member's part of the operation is done,
// returns an error when ctx is cancelled while waiting for peers, and
// returns an error promptly after Transport.Abort.
type Endpoint interface {
	AllReduce(ctx context.Context, buf []float32) error
	ReduceScatter(ctx context.Context, send, recv []float32) error
	AllGatherV(ctx context.Context, send, recv []float32, counts []int) error
	AllToAllV(ctx context.Context, send []float32, sendCounts []int, recv []float32, recvCounts []int) error
	Broadcast(ctx context.Context, buf []float32, root int) error
	Send(ctx context.Context, buf []float32, to int) error
	Recv(ctx context.Context, buf []float32, from int) error
	Barrier(ctx context.Context) error
}
